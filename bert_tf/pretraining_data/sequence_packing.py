"""Sequence packing: several pre-training sequences in one row, no padding between them.

The packer is SPFHP, shortest-pack-first histogram packing (Krell et al. 2021, "Efficient
Sequence Packing without Cross-contamination"): it plans on the histogram of sequence lengths
only (longest first, each length into the pack with the most room left that fits it), then
sequences are assigned to the planned packs in input order. Rows are written in the packed-BERT
layout (Habana's and Graphcore's TF packers): its one table, with S, P and N, is in the
tfrecords guide (`python -m bert_tf.resources tfrecords`, "Packed records").
The file command (TFRecords in, TFRecords out) is `sequence_packing_run`; records are read in
`sequence_packing_io`. No TensorFlow import here except in `packed_feature_spec`/
`parse_packed_records`.
"""
from collections import defaultdict

import numpy as np

from bert_tf import BertError
from bert_tf.pretraining_data import schema

PACKED_FEATURE_NAMES = (
    "input_ids", "input_mask", "segment_ids", "positions",
    "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
    "next_sentence_positions", "next_sentence_labels", "next_sentence_weights",
)
PACKED_FLOAT_FEATURES = frozenset({"masked_lm_weights", "next_sentence_weights"})
PACKED_ONLY = ("positions", "next_sentence_positions", "next_sentence_weights")
ALGORITHM = "SPFHP (shortest-pack-first histogram packing, Krell et al. 2021)"


class InputError(BertError):
    """A record the packer cannot take (the caller adds the file and record number)."""


def default_num_predictions(max_predictions_per_seq, max_sequences_per_pack):
    """P when the packs need no more: max_predictions_per_seq + max_sequences_per_pack (the
    packed-BERT layout's length, so its fixed-length readers parse our rows).

    Args:
        max_predictions_per_seq: the unpacked records' max_predictions_per_seq.
        max_sequences_per_pack: N.
    """
    return max_predictions_per_seq + max_sequences_per_pack


def packed_feature_lengths(max_seq_length, num_predictions, max_sequences_per_pack):
    """Feature name -> fixed length of a packed row (S, P, N).

    Args:
        max_seq_length: S.
        num_predictions: P.
        max_sequences_per_pack: N.
    """
    s, p, n = max_seq_length, num_predictions, max_sequences_per_pack
    return {"input_ids": s, "input_mask": s, "segment_ids": s, "positions": s,
            "masked_lm_positions": p, "masked_lm_ids": p, "masked_lm_weights": p,
            "next_sentence_positions": n, "next_sentence_labels": n, "next_sentence_weights": n}


def packed_feature_spec(max_seq_length, num_predictions, max_sequences_per_pack):
    """The `tf.io.parse_example` spec of packed records (imports TensorFlow).

    Args:
        max_seq_length: S.
        num_predictions: P.
        max_sequences_per_pack: N.
    """
    import tensorflow as tf
    lengths = packed_feature_lengths(max_seq_length, num_predictions, max_sequences_per_pack)
    return {name: tf.io.FixedLenFeature([n], tf.float32 if name in PACKED_FLOAT_FEATURES
                                        else tf.int64) for name, n in lengths.items()}


def is_packed(feature_names):
    """Whether records with these feature names are packed (they have `positions` or
    `next_sentence_positions`)."""
    return any(name in feature_names for name in ("positions", "next_sentence_positions"))


def parse_packed_records(paths, max_seq_length, num_predictions, max_sequences_per_pack):
    """Packed TFRecord file(s) -> list of dicts of numpy arrays (tests, inspection; imports TF).

    Args:
        paths: a file path or a list of them.
        max_seq_length: S.
        num_predictions: P.
        max_sequences_per_pack: N.
    """
    import tensorflow as tf
    spec = packed_feature_spec(max_seq_length, num_predictions, max_sequences_per_pack)
    paths = [paths] if isinstance(paths, str) else list(paths)
    out = []
    for batch in tf.data.TFRecordDataset(paths).batch(4096).map(
            lambda r: tf.io.parse_example(r, spec)):
        arrays = {k: v.numpy() for k, v in batch.items()}
        out.extend({k: v[i] for k, v in arrays.items()} for i in range(len(arrays["input_ids"])))
    return out


# ---- one sequence ----------------------------------------------------------------------------

class Sequence:
    """One unpacked instance without its padding."""
    __slots__ = ("ids", "segments", "lm_positions", "lm_ids", "lm_weights", "label")

    def __init__(self, ids, segments, lm_positions, lm_ids, lm_weights, label):
        self.ids, self.segments, self.label = ids, segments, label
        self.lm_positions, self.lm_ids, self.lm_weights = lm_positions, lm_ids, lm_weights

    def __len__(self):
        return len(self.ids)

    @property
    def num_predictions(self):
        """How many masked-LM predictions the sequence has."""
        return len(self.lm_positions)


def check_features(names):
    """A record's feature names -> InputError unless an unpacked pre-training record."""
    if is_packed(names):
        raise InputError("already packed (it has a 'positions' / 'next_sentence_positions' "
                         "feature): give the unpacked records (bert-run-pretraining reads packed "
                         "ones as they are)")
    missing = [n for n in schema.FEATURE_NAMES if n not in names]
    if missing:
        raise InputError(f"not a pre-training record (no {missing[0]!r} feature; expected "
                         f"{', '.join(schema.FEATURE_NAMES)}): give the records "
                         "create_pretraining_data writes")


def sequence_length(input_mask):
    """Real tokens of an unpacked record: its input_mask is 1s then 0s."""
    mask = np.asarray(input_mask)
    n = int(np.count_nonzero(mask))
    if n and (mask[:n] != 1).any():
        raise InputError("input_mask is not 1s followed by 0s (already packed?): give the "
                         "unpacked records create_pretraining_data writes")
    return n


def to_sequence(features, max_seq_length):
    """An original-schema dict (padded arrays) -> Sequence; InputError if it cannot be packed.

    Args:
        features: feature name -> padded array, as in an unpacked record.
        max_seq_length: S (a longer sequence is an InputError).
    """
    check_features(features)
    n = sequence_length(features["input_mask"])
    if not n:  # the library and the command reject it alike (nothing to train on)
        raise InputError("a sequence with no tokens (input_mask all 0): remove such records "
                         "or make the data again")
    if n > max_seq_length:
        raise InputError(f"a sequence of {n} tokens is longer than --max_seq_length="
                         f"{max_seq_length}: pass --max_seq_length={n} or more (the records' "
                         "own length)")
    pos = np.asarray(features["masked_lm_positions"], np.int64)
    lm_ids = np.asarray(features["masked_lm_ids"], np.int64)
    weights = np.asarray(features["masked_lm_weights"], np.float32)
    real = (pos != 0) | (lm_ids != 0) | (weights != 0)  # padding entries are all zero
    if (pos[real] >= n).any() or (pos[real] < 0).any():
        raise InputError("a masked_lm_position points outside its sequence: the record is "
                         "damaged; make the data again")
    label = np.asarray(features["next_sentence_labels"]).reshape(-1)
    return Sequence(np.asarray(features["input_ids"], np.int64)[:n],
                    np.asarray(features["segment_ids"], np.int64)[:n],
                    pos[real], lm_ids[real], weights[real], int(label[0]) if label.size else 0)


# ---- the plan --------------------------------------------------------------------------------

def spfhp(histogram, max_seq_length, max_sequences_per_pack):
    """Shortest-pack-first histogram packing.

    Lengths are binned longest first; each goes into the open pack with the most room left
    that still fits it, or opens a new pack. A pack closes when full or holding
    `max_sequences_per_pack` sequences.

    Args:
        histogram: counts, histogram[L] = sequences of length L (index 0 unused).
        max_seq_length: the row length S.
        max_sequences_per_pack: N.

    Returns:
        [(lengths, count), ...]: `count` packs each of the sequences `lengths` (longest
        first), in a deterministic order.
    """
    histogram = np.asarray(histogram, np.int64)
    s = max_seq_length
    open_packs = defaultdict(list)  # room left -> [[count, lengths], ...]
    closed = []
    for length in range(min(s, len(histogram) - 1), 0, -1):
        todo = int(histogram[length])
        room = s  # look at packs with the most room first
        while todo > 0:
            while room >= length and not open_packs.get(room):
                room -= 1
            if room < length:  # fits nowhere: new packs of this one length
                _add(open_packs, closed, [todo, (length,)], s - length, max_sequences_per_pack)
                break
            entry = open_packs[room][-1]
            take = min(entry[0], todo)
            entry[0] -= take
            if not entry[0]:
                open_packs[room].pop()
            todo -= take
            _add(open_packs, closed, [take, entry[1] + (length,)], room - length,
                 max_sequences_per_pack)
    for room in sorted(open_packs, reverse=True):
        closed.extend(e for e in open_packs[room] if e[0])
    return [(tuple(lengths), count) for count, lengths in closed]


def _add(open_packs, closed, entry, room, limit):
    if room == 0 or len(entry[1]) >= limit:
        closed.append(entry)
    else:
        open_packs[room].append(entry)


def assign(plan, lengths):
    """Sequences (by index) into the plan's packs, each length's sequences in input order.

    Args:
        plan: `spfhp`'s output for the histogram of `lengths`.
        lengths: each sequence's length.

    Returns:
        list of packs, each a list of sequence indices (longest first).
    """
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    starts = np.searchsorted(lengths[order], np.arange(lengths.max(initial=0) + 2))
    taken = defaultdict(int)
    packs = []
    for pack_lengths, count in plan:
        for _ in range(count):
            pack = []
            for length in pack_lengths:
                i = starts[length] + taken[length]
                taken[length] += 1
                pack.append(int(order[i]))
            packs.append(pack)
    return packs


def predictions_bound(histogram, max_predictions_by_length, max_seq_length,
                      max_sequences_per_pack):
    """The most predictions any pack of these sequences can hold: a knapsack over lengths
    (at most N sequences, at most S tokens, each length at most as often as it occurs),
    each length counted with the most predictions seen at that length.

    Args:
        histogram: histogram[L] = sequences of length L.
        max_predictions_by_length: [L] = the most predictions of a sequence of length L.
        max_seq_length: S.
        max_sequences_per_pack: N.
    """
    n, s = max_sequences_per_pack, max_seq_length
    best = np.full((n + 1, s + 1), -1, np.int64)  # best[k, t]: k sequences of t tokens
    best[0, 0] = 0
    for length in range(1, min(s, len(histogram) - 1) + 1):
        value = int(max_predictions_by_length[length])
        for _ in range(min(int(histogram[length]), n)):
            for k in range(n, 0, -1):
                cand = np.where(best[k - 1, :s + 1 - length] >= 0,
                                best[k - 1, :s + 1 - length] + value, -1)
                best[k, length:] = np.maximum(best[k, length:], cand)
    return int(best.max())


# ---- rows ------------------------------------------------------------------------------------

def build_row(sequences, max_seq_length, num_predictions, max_sequences_per_pack):
    """Sequences of one pack -> a packed feature dict (numpy arrays).

    Args:
        sequences: the pack's Sequence objects, in row order.
        max_seq_length: S.
        num_predictions: P.
        max_sequences_per_pack: N.
    """
    s, p, n = max_seq_length, num_predictions, max_sequences_per_pack
    ints = {name: np.zeros(length, np.int64) for name, length in
            packed_feature_lengths(s, p, n).items() if name not in PACKED_FLOAT_FEATURES}
    row = dict(ints, masked_lm_weights=np.zeros(p, np.float32),
               next_sentence_weights=np.zeros(n, np.float32))
    offset = j = 0
    for k, seq in enumerate(sequences):
        length, m = len(seq), seq.num_predictions
        if offset + length > s or j + m > p or k >= n:
            raise BertError(f"internal error: a pack does not fit (S={s}, P={p}, N={n}); "
                            "please report it with the command line")
        span = slice(offset, offset + length)
        row["input_ids"][span] = seq.ids
        row["input_mask"][span] = k + 1
        row["segment_ids"][span] = seq.segments
        row["positions"][span] = np.arange(length)
        row["masked_lm_positions"][j:j + m] = seq.lm_positions + offset
        row["masked_lm_ids"][j:j + m] = seq.lm_ids
        row["masked_lm_weights"][j:j + m] = k + 1  # the layout: the prediction's sequence
        row["next_sentence_positions"][k] = offset
        row["next_sentence_labels"][k] = seq.label
        row["next_sentence_weights"][k] = 1.0
        offset += length
        j += m
    return row


def window_rng(random_seed, window):
    """The Generator that orders window `window`'s packs (a function of the seed only).

    Args:
        random_seed: the run's --random_seed.
        window: the window's global index.
    """
    return np.random.default_rng(np.random.SeedSequence([int(random_seed) & (2**63 - 1), window]))


def pack_sequences(sequences, max_seq_length, max_sequences_per_pack, rng=None):
    """Sequence objects -> list of packs (lists of Sequence), shuffled when `rng` is given.

    Args:
        sequences: the Sequence objects to pack.
        max_seq_length: S.
        max_sequences_per_pack: N.
        rng: a numpy Generator that shuffles the packs, or None for the plan's order.
    """
    if not sequences:
        return []
    lengths = np.fromiter((len(q) for q in sequences), np.int64, len(sequences))
    histogram = np.bincount(lengths, minlength=max_seq_length + 1)
    packs = assign(spfhp(histogram, max_seq_length, max_sequences_per_pack), lengths)
    if rng is not None:
        packs = [packs[i] for i in rng.permutation(len(packs))]
    return [[sequences[i] for i in pack] for pack in packs]


def pack_examples(examples, max_seq_length=128, max_sequences_per_pack=3,
                  max_predictions_per_seq=20, num_predictions=None, random_seed=12345,
                  shuffle=True):
    """Original-schema examples (dicts of padded numpy arrays) -> packed rows.

    Args:
        examples: dicts with the original features (as `schema.parse_records` returns).
        max_seq_length: S of the packed rows (>= every sequence's length).
        max_sequences_per_pack: N.
        max_predictions_per_seq: sets the default P (+ N).
        num_predictions: P; None: max(default, what the packs need).
        random_seed: orders the packs (as one window of the file command).
        shuffle: False keeps the plan's order.

    Returns:
        list of packed feature dicts (the tfrecords guide's table).

    Raises:
        InputError: an example that cannot be packed (no tokens, too long, already packed),
            named by its index; the file command rejects the same records.
    """
    sequences = []
    for i, example in enumerate(examples):
        try:
            sequences.append(to_sequence(example, max_seq_length))
        except InputError as e:
            raise InputError(f"example {i}: {e}") from None
    rng = window_rng(random_seed, 0) if shuffle else None
    packs = pack_sequences(sequences, max_seq_length, max_sequences_per_pack, rng)
    needed = max((sum(q.num_predictions for q in pack) for pack in packs), default=0)
    p = num_predictions or max(default_num_predictions(max_predictions_per_seq,
                                                       max_sequences_per_pack), needed)
    if needed > p:
        raise BertError(f"num_predictions={p}: a pack needs {needed}; pass num_predictions="
                        f"{needed} or more, or None to size it from the data")
    return [build_row(pack, max_seq_length, p, max_sequences_per_pack) for pack in packs]


def unpack_example(row, max_seq_length, max_predictions_per_seq):
    """A packed row -> its sequences as original-schema dicts, padded to these lengths
    (masked_lm_weights 1.0: a packed weight > 0 is a real prediction).

    Args:
        row: a packed feature dict (numpy arrays).
        max_seq_length: the unpacked records' max_seq_length.
        max_predictions_per_seq: the unpacked records' max_predictions_per_seq.
    """
    mask = np.asarray(row["input_mask"])
    weights = np.asarray(row["next_sentence_weights"])
    out = []
    lm_pos = np.asarray(row["masked_lm_positions"])
    lm_real = (lm_pos != 0) | (np.asarray(row["masked_lm_weights"]) != 0)
    for k in range(int(np.count_nonzero(weights))):
        where = np.flatnonzero(mask == k + 1)
        start, length = int(where[0]), len(where)
        preds = lm_real & (lm_pos >= start) & (lm_pos < start + length)
        features = schema.pad_features(
            row["input_ids"][where].tolist(), row["segment_ids"][where].tolist(),
            (lm_pos[preds] - start).tolist(), row["masked_lm_ids"][preds].tolist(),
            bool(row["next_sentence_labels"][k]), max_seq_length, max_predictions_per_seq)
        out.append({name: np.asarray(v, np.float32 if name in schema.FLOAT_FEATURES else np.int64)
                    for name, v in features.items()})
    return out


def encode_row(row):
    """A packed feature dict -> serialized tf.train.Example (sorted keys, as TF's
    deterministic serialisation), without TensorFlow."""
    entries = []
    for name in sorted(PACKED_FEATURE_NAMES):
        values = row[name].tolist()
        value = (schema._float_feature(values) if name in PACKED_FLOAT_FEATURES
                 else schema._int64_feature(values))
        entries.append(schema._len_field(b"\x0a", schema._len_field(b"\x0a", name.encode())
                                         + schema._len_field(b"\x12", value)))
    return schema._len_field(b"\x0a", b"".join(entries))
