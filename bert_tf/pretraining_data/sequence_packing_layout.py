"""The packed-BERT row layout: feature names and lengths, the parse spec, building a row
from sequences, unpacking it, and its tf.train.Example bytes.

A row of S tokens holds up to N sequences and P masked-LM predictions (Habana's and Graphcore's
TF packers write the same layout; its one table is in the tfrecords guide, `python -m
bert_tf.resources tfrecords`, "Packed records"). The packer (SPFHP) is
`bert_tf.pretraining_data.sequence_packing`. No TensorFlow import here except in
`packed_feature_spec`/`parse_packed_records`.
"""
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
