"""Reading packed pre-training records (the packed-BERT layout, as bert-pack-pretraining-data,
Habana's and Graphcore's TF packers write it).

The layout's one table is in the tfrecords guide (`python -m bert_tf.resources tfrecords`,
"Packed records"). S is --max_seq_length; P and N are read from the records: any
P >= --max_predictions_per_seq and N from 1 to 8 (more is read too). Packed masked_lm_weights
and next_sentence_weights are read as `> 0` (the layout writes the sequence index as the
weight); records from before it (P = max_predictions_per_seq + N - 1, weights 1.0) read the
same. Whether records are packed is decided from their features (`is_packed`), once per run.
"""
import math

from bert_tf.pretraining_data import sequence_packing_layout as layout
from bert_tf.pretraining_data.sequence_packing_layout import is_packed  # noqa: F401  (API)

FEATURES, FLOAT_FEATURES = layout.PACKED_FEATURE_NAMES, layout.PACKED_FLOAT_FEATURES
feature_spec = layout.packed_feature_spec  # the tf.io parse spec of (S, P, N) (imports TF)

SEQ_FEATURES = ("input_ids", "input_mask", "segment_ids", "positions")
PRED_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
NSP_FEATURES = ("next_sentence_positions", "next_sentence_labels", "next_sentence_weights")
# Model-side names of the packed-only inputs the BertPretrainer reads (encoder.PACKED_INPUTS
# and each sequence's [CLS]).
MODEL_INPUTS = ("input_positions", "input_sequence_index", "next_sentence_positions")
REPACK = "re-pack the data with bert-pack-pretraining-data"


def shapes(example):
    """(S, P, N) of a packed tf.train.Example, from its feature lengths.

    Args:
        example: a tf.train.Example (protobuf) with the packed features.
    """
    fmap = example.features.feature
    length = lambda name: len(_values(fmap[name])[1]) if name in fmap else 0
    return length("input_ids"), length("masked_lm_positions"), length("next_sentence_positions")


def _values(feature):
    kind = feature.WhichOneof("kind")
    return kind, (getattr(feature, kind).value[:] if kind else [])


def describe_record(example, max_seq_length, vocab_size=None, type_vocab_size=None,
                    shape=None, max_predictions_per_seq=None):
    """The first problem of one packed tf.train.Example as a phrase + fix, or None.

    Args:
        example: a tf.train.Example (protobuf).
        max_seq_length: S, the --max_seq_length flag.
        vocab_size: ids must be below it; None skips the check.
        type_vocab_size: segment ids must be below it; None skips the check.
        shape: (S, P, N) every record must have (the first record's); None: this record's.
        max_predictions_per_seq: the flag; P must be at least it (None skips the check).
    """
    fmap = example.features.feature
    missing = [k for k in FEATURES if k not in fmap]
    if missing:
        return f"packed records lack {', '.join(missing)}: {REPACK}"
    vals = {}
    for name in FEATURES:
        kind, v = _values(fmap[name])
        want = "float_list" if name in FLOAT_FEATURES else "int64_list"
        if kind != want and len(v):
            return f"{name} is a {kind}, expected {want}: {REPACK}"
        vals[name] = v
    s, p, n = shape or shapes(example)
    if len(vals["input_ids"]) != max_seq_length:
        return (f"packed records have input_ids of length {len(vals['input_ids'])}, not "
                f"--max_seq_length={max_seq_length}: pass --max_seq_length="
                f"{len(vals['input_ids'])}")
    for names, want in ((SEQ_FEATURES, s), (PRED_FEATURES, p), (NSP_FEATURES, n)):
        for name in names:
            if len(vals[name]) != want:
                return (f"{name} has length {len(vals[name])}, other records or features "
                        f"have {want}: {REPACK}")
    if n < 1 or p < 1:
        return f"packed records have {p} predictions and {n} sequences per pack: {REPACK}"
    if max_predictions_per_seq is not None and p < max_predictions_per_seq:
        # Fewer slots than the flag: the data was packed from records made with a smaller one.
        return (f"packed records hold {p} masked-LM predictions per row, fewer than "
                f"--max_predictions_per_seq={max_predictions_per_seq}: pass the "
                f"--max_predictions_per_seq the unpacked records were made with (at most {p}; "
                f"at most {max(p - n, 1)} if bert-pack-pretraining-data packed them: its P is "
                f"at least that + N), or {REPACK} from records made with "
                f"--max_predictions_per_seq={max_predictions_per_seq}")
    for name in ("input_ids", "masked_lm_ids"):
        lo, hi = min(vals[name]), max(vals[name])
        if lo < 0 or (vocab_size is not None and hi >= vocab_size):
            return (f"{name} has id {lo if lo < 0 else hi}, outside [0, vocab_size {vocab_size})"
                    f" of --bert_config_file: use the bert_config.json of the data's vocab.txt")
    lo, hi = min(vals["segment_ids"]), max(vals["segment_ids"])
    if lo < 0 or (type_vocab_size is not None and hi >= type_vocab_size):
        return (f"segment_ids has {lo if lo < 0 else hi}, outside [0, type_vocab_size "
                f"{type_vocab_size}) of --bert_config_file: pass the bert_config.json the data "
                f"was made for, or {REPACK} from records made for this config")
    bounds = (("input_mask", 0, n + 1), ("positions", 0, s), ("masked_lm_positions", 0, s),
              ("next_sentence_positions", 0, s), ("next_sentence_labels", 0, 2))
    for name, low, high in bounds:
        lo, hi = min(vals[name]), max(vals[name])
        if lo < low or hi >= high:
            return f"{name} has {lo if lo < low else hi}, outside [{low}, {high}): {REPACK}"
    for name in ("masked_lm_weights", "next_sentence_weights"):
        if not all(math.isfinite(w) and w >= 0 for w in vals[name]):
            return f"{name} has a negative or non-finite weight: {REPACK}"
    return None


def token_counts(example, packed):
    """(tokens, real tokens, sequences) of one record, packed or not (for the padding share).

    Args:
        example: a tf.train.Example (protobuf).
        packed: whether it is a packed record.
    """
    fmap = example.features.feature
    mask = _values(fmap["input_mask"])[1]
    real = sum(1 for m in mask if m > 0)
    if not packed:
        return len(mask), real, 1
    return len(mask), real, sum(1 for w in _values(fmap["next_sentence_weights"])[1] if w > 0)


def tally(example, info):
    """Adds a checked record's kind, shapes and token counts to `info` (pre-flight); a problem
    phrase when its kind or shapes differ from the file's first record.

    Args:
        example: a tf.train.Example (protobuf) that passed its checks.
        info: the file's dict: `packed`, `shape` (S, P, N), `tokens`, `real_tokens`, `sequences`.
    """
    packed = is_packed(example.features.feature)
    shape = shapes(example)
    if "packed" not in info:
        info.update(packed=packed, shape=shape, tokens=0, real_tokens=0, sequences=0)
    elif info["packed"] != packed:
        return "mixes packed and ordinary records: pass one kind"
    elif packed and info["shape"] != shape:
        return (f"packed record of shape (S, P, N) {shape}, the first one's is "
                f"{info['shape']}: {REPACK}")
    for key, n in zip(("tokens", "real_tokens", "sequences"), token_counts(example, packed)):
        info[key] += n
    return None


def record_format(files):
    """The kind and shapes of the first record of `files` (the first file that has one).

    Read in Python (bert_tf.pretraining.tfrecord_reader): deciding "packed or not" before the
    strategy must not start TensorFlow's runtime (a MultiWorkerMirroredStrategy's collective
    ops can only be configured before it starts).

    Args:
        files: TFRecord paths.

    Returns:
        {"packed": bool, "seq_length": S, "predictions": P, "sequences_per_pack": N} (N = 1
        and P the record's for ordinary records), or None when no file has a readable record.
    """
    from bert_tf.pretraining.tfrecord_reader import first_example
    example = first_example(files)
    if example is None:
        return None
    packed = is_packed(set(example.features.feature))
    s, p, n = shapes(example)
    return {"packed": packed, "seq_length": s, "predictions": p,
            "sequences_per_pack": n if packed else 1}


def to_model_inputs(batch):
    """Packed features as parsed (`input_mask` = the sequence index, as the records store it)
    -> the model's names: `input_sequence_index`, and `input_mask` a 0/1 padding mask, so the
    index never reaches the model as a mask. Features that already have the index pass
    unchanged. The input pipeline applies it to every packed record.

    Args:
        batch: dict of tensors (one record or a batch) with the packed features under model
            input names.
    """
    import tensorflow as tf
    if "input_sequence_index" in batch:
        return batch
    out = dict(batch)
    index = batch["input_mask"]
    out["input_sequence_index"] = index
    out["input_mask"] = tf.cast(index > 0, index.dtype)
    return out
