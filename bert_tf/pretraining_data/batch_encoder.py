"""`schema.encode_example`'s bytes for many records at once (numpy): the streaming and Beam modes.

Each record is one row of a [rows, width] byte matrix with a validity mask: a fixed sequence of
column blocks (sorted feature names), the varint blocks of the three id features and the
varint heads in front of them holding a few invalid bytes. Compressing the matrix by its mask
gives all records back to back. With `framed=True` the row also holds the TFRecord frame: the
length and its masked CRC-32C in front, the record's masked CRC-32C (filled in after the
compression) behind.
"""
import struct

import numpy as np

from bert_tf.pretraining_data import schema

MAX_BATCH_ID = 1 << 21  # ids and positions below this are varints of at most 3 bytes
_U64 = struct.Struct("<Q")


def _varint_width(matrix):
    top = int(matrix.max()) if matrix.size else 0
    return 1 if top < 0x80 else 2 if top < 0x4000 else 3


def _put_varints(out, valid, col, matrix, width):
    """Varints of `matrix` [rows, c] (values < 2**21) into out[:, col:col + width * c];
    returns the bytes per row."""
    c = matrix.shape[1]
    if width == 1:
        out[:, col:col + c] = matrix
        return np.full(len(matrix), c, np.int64)
    block = out[:, col:col + width * c]
    big = matrix >= 0x80
    # Low byte: the value's low 8 bits with bit 7 forced to the continuation flag (uint8 ops).
    low = matrix.astype(np.uint8)
    low &= 0x7F
    low |= big.view(np.uint8) << 7
    block[:, 0::width] = low
    valid[:, col + 1:col + width * c:width] = big
    used = c + big.sum(axis=1)
    if width == 2:
        block[:, 1::2] = (matrix >> 7).astype(np.uint8)
        return used
    huge = matrix >= 0x4000
    block[:, 1::3] = ((matrix >> 7) & 0x7F) | (huge << 7)
    block[:, 2::3] = matrix >> 14
    valid[:, col + 2:col + 3 * c:3] = huge
    return used + huge.sum(axis=1)


class BatchEncoder:
    """Padded arrays of many instances -> their serialized tf.train.Example records.

    Args:
        max_seq_length, max_predictions_per_seq: the records' fixed lengths.
    """

    def __init__(self, max_seq_length, max_predictions_per_seq):
        self.seq, self.preds = seq, preds = max_seq_length, max_predictions_per_seq
        entry = schema.RecordEncoder._packed_entry
        self._heads = {name: self._head_table(name, width)
                       for name, width in (("input_ids", seq), ("masked_lm_ids", preds),
                                           ("masked_lm_positions", preds))}
        self._mask_head = self._fixed_head(entry("input_mask", b"\x00" * seq), seq)
        self._seg_head = self._fixed_head(entry("segment_ids", b"\x00" * seq), seq)
        w_entry = schema._len_field(b"\x0a", schema._KEY_FIELDS["masked_lm_weights"] + schema._len_field(
            b"\x12", schema._float_feature([0.0] * preds)))
        self._w_head = self._fixed_head(w_entry, 4 * preds)
        nsp = [schema.RecordEncoder._int64_entry("next_sentence_labels", [v]) for v in (0, 1)]
        self._nsp = np.frombuffer(b"".join(nsp), np.uint8).reshape(2, -1)
        lower = np.arange(max(seq, preds))[None, :] < np.arange(max(seq, preds) + 1)[:, None]
        self._below = lower.astype(np.uint8)  # row k: k ones, then zeros
        ones = np.frombuffer(struct.pack("<f", 1.0), np.uint8)
        self._weights = (lower[:preds + 1, :preds, None] * ones).reshape(preds + 1, 4 * preds)
        self._frame_heads = {}

    @staticmethod
    def _fixed_head(entry, payload):
        return np.frombuffer(entry[:len(entry) - payload], np.uint8)

    @staticmethod
    def _head_table(name, values):
        """Heads for payloads of values..3*values bytes, right-aligned (they sit right before
        the payload): ([3*values + 1, width] bytes, [.., width] valid, lengths)."""
        heads = [b""] * values + [schema.RecordEncoder._packed_entry(name, b"\x00" * p)[:-p]
                                  for p in range(values, 3 * values + 1)]
        width = max(len(h) for h in heads)
        table = np.zeros((len(heads), width), np.uint8)
        for p, h in enumerate(heads):
            table[p, width - len(h):] = np.frombuffer(h, np.uint8)
        lengths = np.array([len(h) for h in heads])
        return table, np.arange(width)[None, :] >= (width - lengths)[:, None], lengths

    def _frame_head(self, lengths):
        """[rows, 12] TFRecord length fields: u64 length + its masked CRC-32C."""
        from bert_tf.pretraining_data.writer import masked_crc
        uniq, inverse = np.unique(lengths, return_inverse=True)
        table = self._frame_heads
        heads = []
        for length in uniq.tolist():
            head = table.get(length)
            if head is None:
                packed = _U64.pack(length)
                head = table[length] = packed + struct.pack("<I", masked_crc(packed))
            heads.append(head)
        return np.frombuffer(b"".join(heads), np.uint8).reshape(-1, 12)[inverse.ravel()]

    def encode(self, ids, n, num_segment_a, positions, labels, m, is_random_next):
        """Padded arrays -> list of serialized tf.train.Example records (bytes).

        Args:
            as for `encode_framed`.
        """
        flat, ends = self._records(ids, n, num_segment_a, positions, labels, m, is_random_next, False)
        blob = flat.tobytes()
        return [blob[s:e] for s, e in zip([0] + ends[:-1], ends)]

    def encode_framed(self, ids, n, num_segment_a, positions, labels, m, is_random_next):
        """Padded arrays -> the records as TFRecord frames, back to back: what a TFRecord file
        holds (a uint8 array; write it as it is).

        Args:
            ids: int [rows, seq], 0-padded.
            n: int [rows], real tokens.
            num_segment_a: int [rows], tokens with segment id 0.
            positions, labels: int [rows, preds], 0-padded.
            m: int [rows], real predictions.
            is_random_next: bool [rows].
        """
        if not len(n):
            return np.zeros(0, np.uint8)
        flat, ends = self._records(ids, n, num_segment_a, positions, labels, m, is_random_next, True)
        from bert_tf.pretraining_data.writer import _crc_fn
        crc32c = _crc_fn()
        unframed = flat.tobytes()  # crc32c takes bytes only (no numpy buffers, no memoryviews)
        crcs = np.fromiter((crc32c(unframed[s + 12:e - 4]) for s, e in
                            zip([0] + ends[:-1], ends)), np.uint64, len(ends))
        masked = ((((crcs >> np.uint64(15)) | (crcs << np.uint64(17))) + np.uint64(0xA282EAD8))
                  & np.uint64(0xFFFFFFFF)).astype("<u4")
        tail = np.array(ends, np.int64)[:, None] - 4 + np.arange(4)[None, :]
        flat[tail] = masked.view(np.uint8).reshape(-1, 4)
        return flat

    def _records(self, ids, n, num_segment_a, positions, labels, m, is_random_next, framed):
        """(uint8 array of the records back to back, list of their end offsets); framed: with
        the TFRecord length fields and room for the CRCs."""
        seq, preds = self.seq, self.preds
        rows = len(n)
        widths = {name: _varint_width(x) for name, x in
                  (("input_ids", ids), ("masked_lm_ids", labels), ("masked_lm_positions", positions))}
        var_cols = {name: self._heads[name][0].shape[1] + widths[name] * x.shape[1] for name, x in
                    (("input_ids", ids), ("masked_lm_ids", labels), ("masked_lm_positions", positions))}
        lead = 12 if framed else 0
        width = (lead + 4 + var_cols["input_ids"] + len(self._mask_head) + seq
                 + var_cols["masked_lm_ids"] + var_cols["masked_lm_positions"]
                 + len(self._w_head) + 4 * preds + self._nsp.shape[1] + len(self._seg_head) + seq
                 + (4 if framed else 0))
        out = np.empty((rows, width), np.uint8)
        valid = np.ones((rows, width), bool)
        body = np.zeros(rows, np.int64)
        col = lead + 4  # 0x0A and the outer varint (up to 3 bytes) go in front afterwards

        def put_fixed(block):
            nonlocal col
            w = block.shape[-1]
            out[:, col:col + w] = block
            col += w
            body[:] += w

        def put_var(name, matrix):
            nonlocal col
            table, table_valid, lengths = self._heads[name]
            payload_col = col + table.shape[1]
            used = _put_varints(out, valid, payload_col, matrix, widths[name])
            out[:, col:payload_col] = table[used]
            valid[:, col:payload_col] = table_valid[used]
            col = payload_col + widths[name] * matrix.shape[1]
            body[:] += lengths[used] + used

        below = self._below
        n = np.asarray(n, np.int64)
        put_var("input_ids", ids)
        put_fixed(self._mask_head)
        put_fixed(below[n, :seq])
        put_var("masked_lm_ids", labels)
        put_var("masked_lm_positions", positions)
        put_fixed(self._w_head)
        put_fixed(self._weights[np.asarray(m, np.int64)])
        put_fixed(self._nsp[np.asarray(is_random_next, np.int64)])
        put_fixed(self._seg_head)
        put_fixed(below[n, :seq] - below[np.asarray(num_segment_a, np.int64), :seq])
        # 0x0A + varint(body), right-aligned against the first feature.
        outer = np.zeros((rows, 3), np.int64)
        outer[:, 0] = (body & 0x7F) | ((body >= 0x80) << 7)
        outer[:, 1] = ((body >> 7) & 0x7F) | ((body >= 0x4000) << 7)
        outer[:, 2] = body >> 14
        outer_len = 1 + (body >= 0x80) + (body >= 0x4000)
        start = lead + 4 - 1 - outer_len  # column of the 0x0A tag
        cols = np.arange(lead, lead + 4)[None, :]
        rel = cols - start[:, None]  # 0: tag, 1..: outer varint bytes
        out[:, lead:lead + 4] = np.where(rel == 0, 0x0A, np.take_along_axis(
            outer, np.clip(rel - 1, 0, 2), axis=1))
        valid[:, lead:lead + 4] = rel >= 0
        record_len = 1 + outer_len + body
        if framed:
            out[:, :12] = self._frame_head(record_len)
            record_len = record_len + 16  # the last 4 columns: the record's CRC, filled in later
        return out[valid], np.cumsum(record_len).tolist()
