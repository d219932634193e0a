"""In-graph checks of pre-training records while they are read, and their one-line errors.

`check_ranges` (used by `input_pipeline` on every batch) fails with an InvalidArgumentError
whose message is one line naming the file, the record, the feature and the bound: on GPU/TPU an
out-of-range gather would silently return zeros. `explain_data_error` turns such an error (or a
tf.io parse error of a record with other lengths) into a `BertError`. The leading records of
every file are checked before any step by bert_tf.pretraining.preflight.
"""
import re

import tensorflow as tf

from bert_tf import BertError
from bert_tf.pretraining.tfrecord_reader import REGENERATE


def _first(mask):
    """Index of the first True of a 1-D bool `mask` (its length when none is)."""
    n = tf.shape(mask, out_type=tf.int32)[0]
    return tf.reduce_min(tf.where(mask, tf.range(n), n))


def _in_range(values, low, high, phrase):
    """(per-row ok [B], message parts for the first bad value of row `r`) of values [B, ...];
    None for rows of no values (nothing to check, nothing to gather a message from)."""
    if values.shape[1:].num_elements() == 0:
        return None
    rows = tf.reshape(values, [tf.shape(values)[0], -1])
    inside = (rows >= low) & (rows < high)

    def first_bad(r):  # a gather, no boolean_mask: cheap to trace, safe when all are inside
        i = tf.minimum(_first(~inside[r]), tf.shape(rows)[1] - 1)
        return tf.as_string(rows[r][i])
    return tf.reduce_all(inside, axis=1), lambda r: phrase(first_bad(r))


def check_ranges(features, paths, indices, max_seq_length, vocab_size=None, type_vocab_size=None,
                 flag="--input_file"):
    """In-graph range checks of a batch of examples (see the module docstring); returns `features`.

    An out-of-range value fails with an InvalidArgumentError whose message is one line naming
    the file, the record, the feature and the bound.

    Args:
        features: a dict as made by `input_pipeline._to_model_inputs`, batched [B, ...].
        paths: string [B], each example's file (named in the message).
        indices: int [B], each example's record index in its file.
        max_seq_length: masked_lm_positions must be below it.
        vocab_size: input and masked-LM ids must be below it; None skips the check.
        type_vocab_size: segment ids must be below it; None skips the check.
        flag: the flag the files came from, named in the message.
    """
    checks = []  # (per-row ok, message parts of row r)
    if vocab_size is not None:
        for name, key in (("input_ids", "input_word_ids"), ("masked_lm_ids", "masked_lm_ids")):
            checks.append(_in_range(features[key], 0, vocab_size, lambda bad, name=name: [
                f"{name} has id ", bad, f" outside [0, vocab_size {vocab_size}) of "
                "--bert_config_file: use the bert_config.json that matches the data or regenerate "
                "the data"]))
    if type_vocab_size is not None:
        checks.append(_in_range(features["input_type_ids"], 0, type_vocab_size, lambda bad: [
            "segment_ids has ", bad,
            f" outside [0, type_vocab_size {type_vocab_size}) of --bert_config_file: use the "
            "matching bert_config.json or regenerate the data"]))
    checks.append(_in_range(features["masked_lm_positions"], 0, max_seq_length, lambda bad: [
        "masked_lm_positions has ", bad,
        f" outside [0, --max_seq_length={max_seq_length}): {REGENERATE}"]))
    for name, key in (("positions", "input_positions"),
                      ("next_sentence_positions", "next_sentence_positions")):
        if key in features:  # packed records
            checks.append(_in_range(features[key], 0, max_seq_length, lambda bad, name=name: [
                f"{name} has ", bad, f" outside [0, --max_seq_length={max_seq_length}): "
                "re-pack the data with bert-pack-pretraining-data"]))
    checks.append(_in_range(features["next_sentence_labels"], 0, 2, lambda bad: [
        "next_sentence_labels is ", bad, f", must be 0 or 1: {REGENERATE}"]))
    checks = [c for c in checks if c is not None]
    row_ok = tf.reduce_all(tf.stack([c for c, _ in checks], axis=1), axis=1)

    def fail():
        # Only run when a check failed: the first bad example, its first failing check. One
        # Assert of the chosen message (not a cond per check): tracing is per pipeline.
        r = _first(~row_ok)
        which = _first(~tf.stack([c[r] for c, _ in checks]))
        where = [flag, " ", paths[r], ": record ", tf.as_string(indices[r]), ": "]
        messages = tf.stack([tf.strings.join(where + phrase(r)) for _, phrase in checks])
        op = tf.debugging.Assert(False, [messages[which]])
        with tf.control_dependencies([op]):
            return tf.constant(True)

    checked = tf.cond(tf.reduce_all(row_ok), lambda: tf.constant(True), fail)
    with tf.control_dependencies([checked]):
        return {k: tf.identity(v) for k, v in features.items()}


_ASSERT = re.compile(r"assertion failed: \[(--\w+ .*?)\]\s*(?:\n|\[\[|\[Op:|$)")
_PARSE = re.compile(r"Key: (\w+)\.")


def explain_data_error(error, flag="--input_file"):
    """The one-line BertError for a tf.errors.OpError raised by this pipeline, or None.

    The pre-training task's `explain_data_error` (the Task protocol's hook): the trainer's
    training and evaluation loops raise `task.explain_data_error(e) or e`.

    Args:
        error: the tf.errors.OpError.
        flag: the flag the input files came from, named in the parse-error message.
    """
    message = getattr(error, "message", str(error))
    m = _ASSERT.search(message)
    if m:  # Assert C-escapes its strings (quotes, non-ASCII bytes)
        raw = m.group(1).encode("utf-8").decode("unicode_escape").encode("latin-1")
        return BertError(raw.decode("utf-8", "replace"))
    m = _PARSE.search(message)
    if isinstance(error, tf.errors.InvalidArgumentError) and m and "Example" in message:
        return BertError(f"{flag}: a record's {m.group(1)} has another length or type than "
                         "--max_seq_length/--max_predictions_per_seq expect: pass the flags the "
                         "data was made with or regenerate the data")
    return None
