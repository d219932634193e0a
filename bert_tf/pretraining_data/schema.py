"""The pre-training tf.train.Example schema (original release), parsing spec and serialisers.

Features, in the original's insertion order (the tfrecords guide: `python -m bert_tf.resources tfrecords`):
  input_ids, input_mask, segment_ids        int64 [max_seq_length], 0-padded
  masked_lm_positions, masked_lm_ids        int64 [max_predictions_per_seq], 0-padded
  masked_lm_weights                         float [max_predictions_per_seq], 1.0 real / 0.0 pad
  next_sentence_labels                      int64 [1], 1 = random next, 0 = actual next

Two serialisers produce identical bytes: `serialize_example` (tf.train.Example proto,
`SerializeToString(deterministic=True)`, so map entries are sorted by key) and
`encode_example` (pure Python, no TensorFlow import, ~10x faster; used by the streaming workers).
"""
import struct

FEATURE_NAMES = (
    "input_ids", "input_mask", "segment_ids",
    "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
    "next_sentence_labels",
)
FLOAT_FEATURES = frozenset({"masked_lm_weights"})


def feature_lengths(max_seq_length, max_predictions_per_seq):
    """Feature name -> fixed length.

    Args:
        max_seq_length, max_predictions_per_seq: the flags of that name.
    """
    return {
        "input_ids": max_seq_length, "input_mask": max_seq_length, "segment_ids": max_seq_length,
        "masked_lm_positions": max_predictions_per_seq, "masked_lm_ids": max_predictions_per_seq,
        "masked_lm_weights": max_predictions_per_seq, "next_sentence_labels": 1,
    }


def feature_spec(max_seq_length, max_predictions_per_seq):
    """The `tf.io.parse_single_example` / `parse_example` spec for the pre-training records.

    Args:
        max_seq_length, max_predictions_per_seq: the records' fixed lengths.
    """
    import tensorflow as tf
    return {
        name: tf.io.FixedLenFeature([length], tf.float32 if name in FLOAT_FEATURES else tf.int64)
        for name, length in feature_lengths(max_seq_length, max_predictions_per_seq).items()
    }


def pad_features(input_ids, segment_ids, masked_lm_positions, masked_lm_ids, is_random_next,
                 max_seq_length, max_predictions_per_seq):
    """Unpadded instance -> dict of padded feature lists (original names, order and padding).

    Args:
        input_ids, segment_ids: the instance's ids, [CLS] a [SEP] b [SEP].
        masked_lm_positions, masked_lm_ids: the predictions, sorted by position.
        is_random_next: the NSP label (True -> 1).
        max_seq_length, max_predictions_per_seq: the padded lengths.
    """
    n, m = len(input_ids), len(masked_lm_positions)
    if n > max_seq_length or len(segment_ids) != n:
        raise ValueError(f"instance has {n} tokens / {len(segment_ids)} segment ids; "
                         f"max_seq_length is {max_seq_length}")
    if m > max_predictions_per_seq or len(masked_lm_ids) != m:
        raise ValueError(f"instance has {m} masked positions; max is {max_predictions_per_seq}")
    seq_pad, pred_pad = [0] * (max_seq_length - n), [0] * (max_predictions_per_seq - m)
    return {
        "input_ids": list(input_ids) + seq_pad,
        "input_mask": [1] * n + seq_pad,
        "segment_ids": list(segment_ids) + seq_pad,
        "masked_lm_positions": list(masked_lm_positions) + pred_pad,
        "masked_lm_ids": list(masked_lm_ids) + pred_pad,
        "masked_lm_weights": [1.0] * m + [0.0] * (max_predictions_per_seq - m),
        "next_sentence_labels": [1 if is_random_next else 0],
    }


def make_example(features):
    """Padded feature dict -> tf.train.Example, features inserted in the original order."""
    import tensorflow as tf
    feature = {}
    for name in FEATURE_NAMES:
        values = features[name]
        if name in FLOAT_FEATURES:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def serialize_example(features):
    """Padded feature dict -> deterministic serialized tf.train.Example (proto path)."""
    return make_example(features).SerializeToString(deterministic=True)


# ---- fast pure-Python encoder (byte-identical to serialize_example) --------------------------

def _varint(value):
    if value < 0:  # int64 two's complement, as protobuf does
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINT_CACHE = []  # varints of 0..65535, filled on first use (keeps the import fast)


def _varints():
    if not _VARINT_CACHE:  # 1-, 2- and 3-byte varints, without _varint's loop (~8 ms, not 50)
        _VARINT_CACHE.extend([bytes((i,)) for i in range(0x80)])
        _VARINT_CACHE.extend([bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(0x80, 0x4000)])
        _VARINT_CACHE.extend([bytes(((i & 0x7F) | 0x80, ((i >> 7) & 0x7F) | 0x80, i >> 14))
                              for i in range(0x4000, 0x10000)])
    return _VARINT_CACHE


def _varint_fast(value):
    return _varints()[value] if 0 <= value < 65536 else _varint(value)


def _len_field(tag, payload):
    n = len(payload)
    return tag + (_VARINT_CACHE[n] if n < len(_VARINT_CACHE) else _varint(n)) + payload


def _int64_feature(values):
    if len(values) <= 8 and not _VARINT_CACHE:  # a few short heads: not worth the table
        packed = b"".join([_varint(int(v)) for v in values])
    else:
        cache = _varints()
        try:
            # min() guards against negative values, which would silently index from the end.
            if values and min(values) < 0:
                raise IndexError
            packed = b"".join([cache[v] for v in values])
        except (IndexError, TypeError):
            packed = b"".join([_varint(int(v)) for v in values])
    int64_list = _len_field(b"\x0a", packed) if values else b""
    return _len_field(b"\x1a", int64_list)  # Feature.int64_list = 3


def _float_feature(values):
    packed = struct.pack(f"<{len(values)}f", *values)
    float_list = _len_field(b"\x0a", packed) if values else b""
    return _len_field(b"\x12", float_list)  # Feature.float_list = 2


_SORTED_NAMES = tuple(sorted(FEATURE_NAMES))  # deterministic proto map order = sorted keys
_KEY_FIELDS = {name: _len_field(b"\x0a", name.encode()) for name in FEATURE_NAMES}


def encode_example(features):
    """Padded feature dict -> serialized tf.train.Example, without TensorFlow.

    Same bytes as `serialize_example`: Example.features(1) -> Features.feature(1) map entries
    (key(1), value(2)) in sorted key order, packed Int64List/FloatList values.
    """
    entries = []
    for name in _SORTED_NAMES:
        values = features[name]
        value = _float_feature(values) if name in FLOAT_FEATURES else _int64_feature(values)
        entries.append(_len_field(b"\x0a", _KEY_FIELDS[name] + _len_field(b"\x12", value)))
    return _len_field(b"\x0a", b"".join(entries))


def parse_records(paths, max_seq_length, max_predictions_per_seq):
    """Read TFRecord files -> list of dicts of numpy arrays (tests, stats, inspection).

    Args:
        paths: a file or a list of files.
        max_seq_length, max_predictions_per_seq: the records' fixed lengths.
    """
    import tensorflow as tf
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    if isinstance(paths, str):
        paths = [paths]
    out = []
    batches = tf.data.TFRecordDataset(list(paths)).batch(4096).map(
        lambda records: tf.io.parse_example(records, spec))
    for batch in batches:
        arrays = {k: v.numpy() for k, v in batch.items()}
        for i in range(len(arrays["input_ids"])):
            out.append({k: v[i] for k, v in arrays.items()})
    return out


def _pack(values):
    """Packed varints of non-negative ints (ids >= 65536 take the slow path)."""
    try:
        return b"".join(map(_varints().__getitem__, values))
    except IndexError:
        return b"".join(map(_varint_fast, values))


class RecordEncoder:
    """Fast `encode_example` for one instance layout: caches the entries that repeat.

    input_mask, segment_ids, masked_lm_weights and next_sentence_labels only depend on a few
    lengths, so their encoded map entries are cached; only ids and positions are encoded per call.
    """

    def __init__(self, max_seq_length, max_predictions_per_seq):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self._mask = {}
        self._segments = {}
        self._weights = {}
        self._heads = {}
        self._zeros = b"\x00" * max(max_seq_length, max_predictions_per_seq)
        self._nsp = [self._int64_entry("next_sentence_labels", [v]) for v in (0, 1)]

    @staticmethod
    def _int64_entry(name, values):
        return _len_field(b"\x0a", _KEY_FIELDS[name] + _len_field(b"\x12", _int64_feature(values)))

    @staticmethod
    def _packed_entry(name, packed):
        int64_list = _len_field(b"\x0a", packed) if packed else b""
        feature = _len_field(b"\x1a", int64_list)
        return _len_field(b"\x0a", _KEY_FIELDS[name] + _len_field(b"\x12", feature))

    def _head(self, name, payload_length):
        """Bytes of a packed int64 map entry up to its payload, cached per payload length."""
        key = (name, payload_length)
        head = self._heads.get(key)
        if head is None:
            probe = self._packed_entry(name, b"\x00" * payload_length)
            head = self._heads[key] = probe[:len(probe) - payload_length]
        return head

    def encode(self, input_ids, num_segment_a, masked_lm_positions, masked_lm_ids, is_random_next):
        """One instance -> a serialized record.

        Args:
            input_ids: unpadded ids.
            num_segment_a: segment ids are 0 for the first `num_segment_a` tokens, then 1.
            masked_lm_positions, masked_lm_ids: unpadded predictions.
            is_random_next: the NSP label.
        """
        seq, preds = self.max_seq_length, self.max_predictions_per_seq
        n, m = len(input_ids), len(masked_lm_positions)
        if n > seq or m > preds:
            raise ValueError(f"instance of {n} tokens / {m} predictions does not fit")
        zeros = self._zeros
        # Positions < 128 are one-byte varints: bytes() packs them in C.
        lm_pos = bytes(masked_lm_positions) if seq <= 128 else _pack(masked_lm_positions)
        return self.assemble(_pack(input_ids) + zeros[:seq - n], n, num_segment_a,
                             _pack(masked_lm_ids) + zeros[:preds - m],
                             lm_pos + zeros[:preds - m], m, is_random_next)

    def assemble(self, ids_packed, n, num_segment_a, lm_ids_packed, lm_pos_packed, m,
                 is_random_next):
        """A record from already packed (and padded) varints of the three id features.

        Args:
            ids_packed, lm_ids_packed, lm_pos_packed: packed varints of input_ids,
                masked_lm_ids and masked_lm_positions, padded.
            n: real tokens (input_mask).
            num_segment_a: tokens with segment id 0.
            m: real predictions (masked_lm_weights).
            is_random_next: the NSP label.
        """
        seq, preds = self.max_seq_length, self.max_predictions_per_seq
        mask_entry = self._mask.get(n)
        if mask_entry is None:
            mask_entry = self._mask[n] = self._int64_entry("input_mask", [1] * n + [0] * (seq - n))
        seg_key = (num_segment_a, n)
        seg_entry = self._segments.get(seg_key)
        if seg_entry is None:
            seg_entry = self._segments[seg_key] = self._int64_entry(
                "segment_ids", [0] * num_segment_a + [1] * (n - num_segment_a) + [0] * (seq - n))
        w_entry = self._weights.get(m)
        if w_entry is None:
            w_entry = self._weights[m] = _len_field(b"\x0a", _KEY_FIELDS["masked_lm_weights"] + _len_field(
                b"\x12", _float_feature([1.0] * m + [0.0] * (preds - m))))
        heads = self._heads
        h_ids = heads.get(("input_ids", len(ids_packed))) or self._head("input_ids", len(ids_packed))
        h_lm_ids = (heads.get(("masked_lm_ids", len(lm_ids_packed)))
                    or self._head("masked_lm_ids", len(lm_ids_packed)))
        h_lm_pos = (heads.get(("masked_lm_positions", len(lm_pos_packed)))
                    or self._head("masked_lm_positions", len(lm_pos_packed)))
        # Sorted key order: input_ids input_mask masked_lm_ids masked_lm_positions
        # masked_lm_weights next_sentence_labels segment_ids.
        body = b"".join((h_ids, ids_packed, mask_entry, h_lm_ids, lm_ids_packed,
                         h_lm_pos, lm_pos_packed, w_entry, self._nsp[1 if is_random_next else 0],
                         seg_entry))
        return b"\x0a" + _varint_fast(len(body)) + body
