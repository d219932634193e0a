"""Sequence packing: several pre-training sequences in one row, no padding between them.

The packer is SPFHP, shortest-pack-first histogram packing (Krell et al. 2021, "Efficient
Sequence Packing without Cross-contamination"): it plans on the histogram of sequence lengths
only (longest first, each length into the pack with the most room left that fits it), then
sequences are assigned to the planned packs in input order. Rows are written in the packed-BERT
layout (Habana's and Graphcore's TF packers): its one table, with S, P and N, is in the
tfrecords guide (`python -m bert_tf.resources tfrecords`, "Packed records").
The row layout (names, lengths, building and unpacking rows) is `sequence_packing_layout`,
whose names are importable from here too; the file command (TFRecords in, TFRecords out) is
`sequence_packing_run`; records are read in `sequence_packing_io`. No TensorFlow import here.
"""
from collections import defaultdict

import numpy as np

from bert_tf import BertError
from bert_tf.pretraining_data import schema
from bert_tf.pretraining_data.sequence_packing_layout import (  # noqa: F401 (API)
    PACKED_FEATURE_NAMES, PACKED_FLOAT_FEATURES, PACKED_ONLY, build_row, default_num_predictions,
    encode_row, is_packed, packed_feature_lengths, packed_feature_spec, parse_packed_records,
    unpack_example)

ALGORITHM = "SPFHP (shortest-pack-first histogram packing, Krell et al. 2021)"


class InputError(BertError):
    """A record the packer cannot take (the caller adds the file and record number)."""


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


