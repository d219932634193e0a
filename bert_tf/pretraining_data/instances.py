"""Per-batch work shared by the streaming and Beam modes: documents, pairs, records (numpy).

  DocumentBatch   documents as one flat array of token ids with sentence and document offsets
  make_pairs      the original's chunking / next-sentence / truncation for every pass over every
                  document of a batch at once: all (document, pass) streams advance in lock-step,
                  one chunk per stream per step
  RecordMaker     pairs -> packed [CLS] A [SEP] B [SEP] rows -> masked (masking.BatchMasker) ->
                  TFRecord-framed records (batch_encoder.BatchEncoder)

The pair draws are counter-based: uniform(stream, chunk, slot) is a hash of (seed, stream,
chunk, slot), so a stream's pairs depend only on its key, its document and its partner
documents, never on which other streams share the batch (`uniform` is the scalar form).
"""
import dataclasses

import numpy as np

from bert_tf import BertError
from bert_tf.pretraining_data.masking import BatchMasker
from bert_tf.pretraining_data.batch_encoder import MAX_BATCH_ID, BatchEncoder

M64 = (1 << 64) - 1
_K1, _K2 = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03
_SLOT_BITS = 20          # slots per chunk: 0..3 the chunk's draws, then truncation bit words
_TRUNC_A, _TRUNC_B = 16, 1 << 19  # first slot of the words for A's and B's front cuts
_MAX_WORDS = (1 << 19) - 16       # 64-bit words per side: cuts of up to ~33M tokens


def _mix(x):
    """splitmix64's finalizer on uint64 arrays (a bijection; numpy wraps on overflow)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _bits(stream_hash, chunk, slot):
    """uint64 draws for (stream, chunk, slot); stream_hash = _stream_hash(seed, stream)."""
    if np.ndim(chunk) == 0:  # a Python product: numpy warns on uint64 scalar overflow
        return _mix(stream_hash ^ np.uint64((((int(chunk) << _SLOT_BITS) | slot) * _K2) & M64))
    counter = (np.asarray(chunk, np.uint64) << np.uint64(_SLOT_BITS)) | np.uint64(slot)
    return _mix(stream_hash ^ (counter * np.uint64(_K2)))


def _stream_hash(seed, stream):
    return _mix((np.asarray(stream, np.uint64) * np.uint64(_K1)) + np.uint64(seed & M64))


def _uniform(stream_hash, chunk, slot):
    return (_bits(stream_hash, chunk, slot) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _mix_int(x):
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & M64
    return x ^ (x >> 31)


def bits(seed, stream, chunk, slot):
    """The scalar (Python int) form of the uint64 draw of (seed, stream, chunk, slot).

    Args:
        seed: the shard's seed.
        stream, chunk, slot: the draw's counters (chunk 0: the pass's target length).
    """
    h = _mix_int((stream * _K1 + (seed & M64)) & M64)
    return _mix_int(h ^ (((chunk << _SLOT_BITS) | slot) * _K2 & M64))


def uniform(seed, stream, chunk, slot):
    """The scalar form of the uniform [0, 1) draw `make_pairs` uses (tests, references).

    Args:
        seed, stream, chunk, slot: as for `bits`.
    """
    return (bits(seed, stream, chunk, slot) >> 11) * 2.0 ** -53


@dataclasses.dataclass
class DocumentBatch:
    """Documents as arrays: sentence s is flat[off[s]:off[s + 1]], document d holds sentences
    doc[d]..doc[d + 1] - 1. Every sentence and document is non-empty."""
    flat: np.ndarray   # int32 token ids
    off: np.ndarray    # int64 [sentences + 1]
    doc: np.ndarray    # int64 [documents + 1]

    @classmethod
    def from_lines(cls, ids, line_lengths, doc_lines):
        """Drops empty lines and documents left empty.

        Args:
            ids: int32 token ids of all lines, back to back.
            line_lengths: int [lines], tokens per line.
            doc_lines: int [documents + 1], line offsets of the documents.
        """
        lengths = np.asarray(line_lengths, np.int64)
        kept = lengths > 0
        off = np.zeros(int(kept.sum()) + 1, np.int64)
        np.cumsum(lengths[kept], out=off[1:])
        kept_before = np.concatenate([[0], np.cumsum(kept)])
        doc = kept_before[np.asarray(doc_lines, np.int64)]
        doc = np.concatenate([[0], doc[1:][doc[1:] > doc[:-1]]]) if len(doc) > 1 else doc[:1]
        return cls(np.asarray(ids, np.int32), off, doc)

    @classmethod
    def concat(cls, batches):
        """One batch holding the documents of `batches`, in order."""
        if len(batches) == 1:
            return batches[0]
        # One concatenation per array, then each part shifted by what precedes it (no loop
        # of numpy calls: the pool holds up to nsp_reservoir_size one-document batches).
        flats = [b.flat for b in batches]
        offs = [b.off[1:] for b in batches]
        docs = [b.doc[1:] for b in batches]
        n_tok = np.fromiter(map(len, flats), np.int64, len(batches))
        n_sent = np.fromiter(map(len, offs), np.int64, len(batches))
        n_doc = np.fromiter(map(len, docs), np.int64, len(batches))
        off = np.concatenate([np.zeros(1, np.int64)] + offs)
        off[1:] += np.repeat(np.cumsum(n_tok) - n_tok, n_sent)
        doc = np.concatenate([np.zeros(1, np.int64)] + docs)
        doc[1:] += np.repeat(np.cumsum(n_sent) - n_sent, n_doc)
        return cls(np.concatenate(flats), off, doc)

    def __len__(self):
        return len(self.doc) - 1

    @property
    def num_sentences(self):
        """Sentences in all documents."""
        return len(self.off) - 1

    def document(self, d):
        """Document d as a batch of its own (a copy: the batch's memory can go)."""
        s0, s1 = int(self.doc[d]), int(self.doc[d + 1])
        off = self.off[s0:s1 + 1]
        return DocumentBatch(self.flat[off[0]:off[-1]].copy(), off - off[0],
                             np.array([0, s1 - s0], np.int64))


@dataclasses.dataclass
class Pairs:
    """Segments A and B (start in the pool's flat ids, length), NSP label, and the stream and
    chunk each pair came from; one entry per pair."""
    a_start: np.ndarray
    a_len: np.ndarray
    b_start: np.ndarray
    b_len: np.ndarray
    is_random_next: np.ndarray
    stream: np.ndarray
    chunk: np.ndarray

    def __len__(self):
        return len(self.a_len)


def _front_cuts(h, chunk, cut, base):
    """Tokens cut from the front: popcount of `cut` random bits (Binomial(cut, 1/2))."""
    front = np.zeros(len(cut), np.int64)
    words = -(-cut // 64)
    if len(cut) and int(words.max()) > _MAX_WORDS:
        raise BertError("a sentence has more than 33M tokens: split the input into lines")
    for w in range(int(words.max()) if len(cut) else 0):
        rows = np.nonzero(words > w)[0]
        draw = _bits(h[rows], chunk[rows], base + w)
        nbits = np.minimum(cut[rows] - 64 * w, 64).astype(np.uint64)
        keep = np.where(nbits == 64, np.uint64(M64),
                        (np.uint64(1) << (nbits % np.uint64(64))) - np.uint64(1))
        front[rows] += np.bitwise_count(draw & keep)
    return front


def make_pairs(pool, first, count, dupe_factor, first_key, max_seq_length, short_seq_prob,
               seed, stats):
    """The original's per-document algorithm for documents first..first+count-1 of `pool`,
    `dupe_factor` passes each; random-next segments come from the pool's other documents.

    Per pass: a target length (max_seq_length - 3, or with short_seq_prob uniform in
    [2, max_seq_length - 3]); chunks of whole sentences up to the target; A = the chunk's first
    1..n-1 sentences; B = the rest (actual next), or with probability 1/2 (always for a
    one-sentence chunk) sentences of another document from a random start up to the target,
    the chunk's unused sentences going back to the document; then the longer side loses
    tokens, each from the front or the back with probability 1/2.

    Args:
        pool: the `DocumentBatch` of the streams' documents and their partners.
        first, count: the documents (of `pool`) to make pairs of.
        dupe_factor: passes per document.
        first_key: the shard's serial number of document `first`; pass p of document first+i
            is stream (first_key + i) * dupe_factor + p.
        max_seq_length, short_seq_prob: the flags of that name.
        seed: the shard's seed.
        stats: a `Stats`, counted into.
    """
    max_tokens = max_seq_length - 3
    off, docs = pool.off, pool.doc
    n_pool = len(pool)
    doc_of = np.repeat(np.arange(first, first + count), dupe_factor)
    key = (first_key - first + doc_of) * dupe_factor + np.tile(np.arange(dupe_factor), count)
    h = _stream_hash(seed, key)
    short = _uniform(h, 0, 0) < short_seq_prob
    target = np.where(short, 2 + (_uniform(h, 0, 1) * (max_tokens - 1)).astype(np.int64), max_tokens)
    i0, end = docs[doc_of].copy(), docs[doc_of + 1]
    live = np.arange(len(key))
    parts, step = [], 0
    while len(live):
        step += 1
        hs, tg, s0, e = h[live], target[live], i0[live], end[live]
        i = np.minimum(np.searchsorted(off, off[s0] + tg), e) - 1
        n_chunk = i - s0 + 1
        a_end = s0 + np.where(n_chunk >= 2, 1 + (_uniform(hs, step, 0) * (n_chunk - 1)).astype(np.int64), 1)
        a_start, la = off[s0], off[a_end] - off[s0]
        rand = (n_chunk == 1) | (_uniform(hs, step, 1) < 0.5)
        # Partner: uniform over the pool's other documents (itself only when there is none).
        d = doc_of[live]
        if n_pool > 1:
            q = (_uniform(hs, step, 2) * (n_pool - 1)).astype(np.int64)
            q += q >= d
        else:
            q = d
        q0, q1 = docs[q], docs[q + 1]
        j = q0 + (_uniform(hs, step, 3) * (q1 - q0)).astype(np.int64)
        b_end = np.minimum(np.maximum(np.searchsorted(off, off[j] + tg - la), j + 1), q1)
        b_start = np.where(rand, off[j], off[a_end])
        lb = np.where(rand, off[b_end], off[i + 1]) - b_start
        rand_rows = np.nonzero(rand)[0]
        stats.nsp_forced_random_next += int((n_chunk == 1).sum())
        if n_pool == 1:
            stats.nsp_same_document += len(rand_rows)
        # Truncation: the longer side (B on ties) loses each token; front or back by coin.
        excess = la + lb - max_tokens
        cut = np.nonzero(excess > 0)[0]
        if len(cut):
            ex, ca, cb = excess[cut], la[cut], lb[cut]
            first_a = np.where(ca > cb, np.minimum(ex, ca - cb), 0)
            first_b = np.where(ca > cb, 0, np.minimum(ex, cb - ca))
            rest = ex - first_a - first_b
            cut_a, cut_b = first_a + rest // 2, first_b + rest - rest // 2
            chunk = np.full(len(cut), step, np.int64)
            front_a = _front_cuts(hs[cut], chunk, cut_a, _TRUNC_A)
            front_b = _front_cuts(hs[cut], chunk, cut_b, _TRUNC_B)
            a_start[cut] += front_a
            la[cut] -= cut_a
            b_start[cut] += front_b
            lb[cut] -= cut_b
            stats.truncated_instances += len(cut)
            stats.truncated_tokens += int(ex.sum())
        parts.append((a_start, la, b_start, lb, rand, key[live], np.full(len(live), step)))
        i0[live] = np.where(rand, a_end, i + 1)
        live = live[i0[live] < end[live]]
    if not parts:
        return Pairs(*[np.zeros(0, np.int64)] * 7)
    return Pairs(*(np.concatenate(c) for c in zip(*parts)))


def pack_rows(flat, pairs, max_seq_length, cls_id, sep_id):
    """[CLS] A [SEP] B [SEP] rows, 0-padded -> (int32 [rows, max_seq_length] ids, n, len_a).

    Args:
        flat: the pool's token ids.
        pairs: `Pairs` into `flat`.
        max_seq_length: row length.
        cls_id, sep_id: ids of [CLS] and [SEP].
    """
    seq = max_seq_length
    la, lb = pairs.a_len, pairs.b_len
    # Row r of `window` is padded[r:r + seq]: A's row starts one token before A, B's row
    # la + 2 tokens before B, so one row copy each puts them at their columns.
    padded = np.zeros(len(flat) + 2 * seq + 2, np.int32)
    padded[seq + 2:seq + 2 + len(flat)] = flat
    window = np.lib.stride_tricks.sliding_window_view(padded, seq)
    col = np.arange(seq, dtype=np.int32)[None, :]
    la_c = la.astype(np.int32)[:, None]
    n = la + lb + 3
    ids = np.where(col <= la_c, window[pairs.a_start + seq + 1],
                   window[pairs.b_start - la + seq])
    ids[col >= n.astype(np.int32)[:, None]] = 0
    ids[:, 0] = cls_id
    rows = np.arange(len(la))
    ids[rows, la + 1] = sep_id
    ids[rows, n - 1] = sep_id
    return ids, n, la.copy()


SUB_BLOCK = 2048  # rows masked and encoded together (~25 % faster than 10k: cache-sized)


class RecordMaker:
    """Pairs -> serialized records: one vectorised packing, masking and encoding per batch.

    Args:
        cfg: a `streaming.StreamConfig` (vocab and masking flags).
    """

    def __init__(self, cfg):
        if max(cfg.vocab.values()) >= MAX_BATCH_ID:
            raise BertError(f"--vocab_file: {max(cfg.vocab.values()) + 1} tokens; the streaming "
                            f"and Beam modes handle at most {MAX_BATCH_ID} (use --mode=original)")
        self.seq = cfg.max_seq_length
        self.masker = BatchMasker(cfg.vocab, cfg.max_seq_length, cfg.max_predictions_per_seq,
                                  cfg.masked_lm_prob, whole_word=cfg.do_whole_word_mask,
                                  per_word=cfg.whole_word_mask_per_word)
        self.encoder = BatchEncoder(cfg.max_seq_length, cfg.max_predictions_per_seq)

    def pack(self, flat, pairs):
        """`pack_rows` of `pairs` -> (ids, n, len_a, is_random_next), what `records` takes.

        Args:
            flat: the token ids `pairs` point into.
            pairs: `Pairs` (`make_pairs`).
        """
        ids, n, la = pack_rows(flat, pairs, self.seq, self.masker.cls, self.masker.sep)
        return ids, n, la, np.asarray(pairs.is_random_next, bool)

    def records(self, packed, gen, stats, shuffle=True):
        """Packed rows -> their masked records, TFRecord-framed back to back (a uint8 array).

        Args:
            packed: a list of `pack` results, made into one block.
            gen: the numpy Generator the shuffling and masking draw from.
            stats: a `Stats`, counted into.
            shuffle: records in a random order (a permutation of the whole block).
        """
        ids, n, la, nsp = (np.concatenate(x) for x in zip(*packed))
        if shuffle:
            order = gen.permutation(len(n))
            ids, n, la, nsp = ids[order], n[order], la[order], nsp[order]
        out = []
        for i in range(0, len(n), SUB_BLOCK):  # sub-blocks: the temporaries stay in cache
            rows = slice(i, i + SUB_BLOCK)
            out.append(self.encoder.encode_framed(*self.masker.mask_rows(
                ids[rows], n[rows], la[rows], nsp[rows], gen, stats)))
        return np.concatenate(out) if len(out) != 1 else out[0]


def numpy_generator(seed):
    """The numpy Generator the masking of a shard (or Beam group) draws from."""
    return np.random.Generator(np.random.PCG64(seed))
