"""tf.data input pipeline for pre-training TFRecords (the original release's schema).

`pretraining_dataset(...)` yields dicts of int32 (float32 for weights) tensors with static
shapes, named for the model plus labels:

  input_word_ids, input_mask, input_type_ids          [B, max_seq_length]
  masked_lm_positions, masked_lm_ids, masked_lm_weights   [B, max_predictions_per_seq]
  next_sentence_labels                                [B]

Training: each epoch a new permutation of the files, interleaved (cycle 8), records shuffled in
blocks of `shuffle_buffer_size`, repeated forever. All randomness is stateless and keyed by `seed`
(not by TF's global seed) and the interleave is deterministic, so a restarted run can skip exactly
the records it already consumed (`skip_batches`) and read the same stream as an uninterrupted one.

Dynamic masking (RoBERTa style): the records' masks are undone (masked_lm_ids put back at their
positions) and each read of an example draws a fresh mask: 15% of the real tokens that are not
[CLS]/[SEP] (num = min(max_predictions, max(1, round(0.15 n))), as the original), of which 80%
become [MASK], 10% a random id in [0, vocab_size), 10% stay. [CLS] is position 0 and [SEP]s are
found from the packing ([CLS] A [SEP] B [SEP]): the last real token of each segment. Randomness is
stateless, keyed by (seed, pipeline, record index), so it is reproducible and differs per epoch.

Validation: before anything is read, `preflight.check_pretraining_files` checks the leading
records of every file (one-line `BertError`). While reading, every record is checked in-graph
(ids < vocab_size, segment ids < type_vocab_size, positions < max_seq_length, NSP label 0/1:
on GPU/TPU an out-of-range gather would silently return zeros), and each file must be read to
its last byte: a corrupt or truncated record fails the step with an `InvalidArgumentError` whose
one-line message names the file, record and byte offset (`explain_data_error` turns it into a
`BertError`), or with `skip_corrupt_records` the rest of that file is skipped and the lost records
are counted and logged.
"""
import concurrent.futures
import random
import sys

import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.training.preflight import REGENERATE, check_pretraining_files
from bert_tf.training.record_checks import check_ranges
from bert_tf.training.record_checks import explain_data_error  # noqa: F401 (re-exported)

try:
    from bert_tf.pretraining_data.schema import feature_spec
except ImportError:  # pragma: no cover - the schema module is part of the package
    feature_spec = None

MASKED_LM_PROB = 0.15


def _feature_spec(max_seq_length, max_predictions_per_seq):
    if feature_spec is not None:
        return feature_spec(max_seq_length, max_predictions_per_seq)
    ints = lambda n: tf.io.FixedLenFeature([n], tf.int64)
    return {"input_ids": ints(max_seq_length), "input_mask": ints(max_seq_length),
            "segment_ids": ints(max_seq_length),
            "masked_lm_positions": ints(max_predictions_per_seq),
            "masked_lm_ids": ints(max_predictions_per_seq),
            "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
            "next_sentence_labels": ints(1)}


def list_files(file_pattern, flag="--input_file"):
    """Sorted, de-duplicated files of comma-separated globs (`fileio.expand_globs`): every host
    sees the same order, so each reads its own shard of the list.

    Args:
        file_pattern: comma-separated file names or globs.
        flag: the flag named in the BertError when nothing matches.
    """
    return sorted(set(fileio.expand_globs(file_pattern, flag)))


def _to_model_inputs(parsed):
    """Record features (int64) -> model input names, int32."""
    i32 = lambda t: tf.cast(t, tf.int32)
    return {
        "input_word_ids": i32(parsed["input_ids"]),
        "input_mask": i32(parsed["input_mask"]),
        "input_type_ids": i32(parsed["segment_ids"]),
        "masked_lm_positions": i32(parsed["masked_lm_positions"]),
        "masked_lm_ids": i32(parsed["masked_lm_ids"]),
        "masked_lm_weights": tf.cast(parsed["masked_lm_weights"], tf.float32),
        "next_sentence_labels": i32(tf.reshape(parsed["next_sentence_labels"], [])),
    }


def unmask(features):
    """Put masked_lm_ids back at masked_lm_positions (weight > 0): the unmasked input_word_ids."""
    ids = features["input_word_ids"]
    real = features["masked_lm_weights"] > 0
    pos = tf.boolean_mask(features["masked_lm_positions"], real)
    vals = tf.boolean_mask(features["masked_lm_ids"], real)
    return tf.tensor_scatter_nd_update(ids, pos[:, None], vals)


def mask_candidates(input_mask, input_type_ids):
    """bool [S]: real tokens that are neither [CLS] (position 0) nor a [SEP].

    A [SEP] closes each segment: a real token whose successor is padding, the end, or in another
    segment.

    Args:
        input_mask: int [S], 1 for real tokens.
        input_type_ids: int [S] segment ids.
    """
    real = input_mask > 0
    nxt_real = tf.concat([real[1:], [False]], 0)
    nxt_type = tf.concat([input_type_ids[1:], input_type_ids[-1:]], 0)
    is_sep = real & (~nxt_real | tf.not_equal(nxt_type, input_type_ids))
    is_cls = tf.equal(tf.range(tf.shape(real)[0]), 0)
    return real & ~is_sep & ~is_cls


def dynamic_mask(features, seed, max_predictions_per_seq, vocab_size, mask_id,
                 masked_lm_prob=MASKED_LM_PROB):
    """Re-mask one example (see the module docstring): a fresh mask over `unmask(features)`.

    Args:
        features: one example's dict as produced by `_to_model_inputs`.
        seed: int32/int64 [2], the stateless seed of this example's mask.
        max_predictions_per_seq: length of the masked_lm_* features.
        vocab_size: random replacements are drawn from [0, vocab_size).
        mask_id: id of [MASK].
        masked_lm_prob: fraction of the candidates to mask.
    Returns:
        `features` with new input_word_ids and masked_lm_positions/ids/weights.
    """
    ids = unmask(features)
    cand = mask_candidates(features["input_mask"], features["input_type_ids"])
    seq_len = tf.shape(ids)[0]
    n_cand = tf.reduce_sum(tf.cast(cand, tf.int32))
    # round() like Python 3's (half to even), as the original's int(round(n * prob)).
    num = tf.cast(tf.round(tf.cast(n_cand, tf.float32) * masked_lm_prob), tf.int32)
    num = tf.minimum(tf.minimum(tf.maximum(num, 1), max_predictions_per_seq), n_cand)
    s_pick, s_kind, s_rand = tf.unstack(
        tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3))
    # A uniformly random subset of `num` candidates: the top scores of iid uniforms.
    scores = tf.where(cand, tf.random.stateless_uniform([seq_len], s_pick), -1.0)
    k = min(max_predictions_per_seq, int(ids.shape[0]))  # static: FixedLenFeature
    top = tf.math.top_k(scores, k=k).indices
    chosen = tf.range(k) < num
    positions = tf.sort(tf.where(chosen, top, seq_len))  # chosen first, ascending
    valid = positions < seq_len
    positions = tf.where(valid, positions, 0)
    pad = max_predictions_per_seq - k
    positions = tf.pad(positions, [[0, pad]])
    valid = tf.pad(valid, [[0, pad]])
    labels = tf.where(valid, tf.gather(ids, positions), 0)
    kind = tf.random.stateless_uniform([max_predictions_per_seq], s_kind)
    random_ids = tf.random.stateless_uniform([max_predictions_per_seq], s_rand, minval=0,
                                             maxval=vocab_size, dtype=tf.int32)
    new_tokens = tf.where(kind < 0.8, tf.cast(mask_id, tf.int32),
                          tf.where(kind < 0.9, labels, random_ids))
    upd_pos = tf.boolean_mask(positions, valid)
    new_ids = tf.tensor_scatter_nd_update(ids, upd_pos[:, None],
                                          tf.boolean_mask(new_tokens, valid))
    out = dict(features)
    out.update(input_word_ids=new_ids, masked_lm_positions=positions, masked_lm_ids=labels,
               masked_lm_weights=tf.cast(valid, tf.float32))
    return out


# Shuffling is stateless (keyed by the seed only): tf.data's own shuffle also depends on the
# global TF seed, which would make a resumed run read a different stream.

def _shuffled_files(files, sizes, seed, repeat):
    """Each epoch a fresh permutation of `files` (the original: repeat, then shuffle files)."""
    names, lengths = tf.constant(files), tf.constant(sizes, tf.int64)
    key = tf.constant([seed, 0], tf.int64)

    def epoch_files(epoch):
        k = tf.random.experimental.stateless_fold_in(key, epoch)
        order = tf.argsort(tf.random.stateless_uniform([len(files)], k))
        return tf.data.Dataset.from_tensor_slices((tf.gather(names, order),
                                                   tf.gather(lengths, order)))

    epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)
    return epochs.flat_map(epoch_files)


def _block_shuffle(ds, size, seed):
    """Shuffle within consecutive blocks of `size` records (in place of a shuffle buffer)."""
    key = tf.constant([seed, 1], tf.int64)

    def shuffle_block(index, block):
        k = tf.random.experimental.stateless_fold_in(key, index)
        n = tf.shape(tf.nest.flatten(block)[0])[0]
        order = tf.argsort(tf.random.stateless_uniform([n], k))
        return tf.nest.map_structure(lambda t: tf.gather(t, order), block)

    return ds.batch(size).enumerate().map(shuffle_block).unbatch()


def file_sizes(files):
    """Byte size of each file (the reader checks that it read every byte)."""
    if any("://" in f for f in files):  # remote file systems: overlap the round trips
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            return list(pool.map(lambda f: tf.io.gfile.stat(f).length, files))
    return [tf.io.gfile.stat(f).length for f in files]


def _count_records(path, offset, size):
    """Records (whole or partial) in bytes [offset, size) of `path`, walking the length headers."""
    rest = tf.strings.substr(tf.io.read_file(path), offset, size - offset)
    n = size - offset

    def body(pos, count):
        header = tf.strings.substr(rest, pos, 8)
        length = tf.cond(tf.strings.length(header) == 8,
                         lambda: tf.io.decode_raw(header, tf.int64)[0],
                         lambda: tf.constant(-1, tf.int64))
        nxt = pos + length + 16
        return tf.where((length < 0) | (nxt > n), n, nxt), count + 1

    return tf.while_loop(lambda pos, count: pos < n, body,
                         (tf.constant(0, tf.int64), tf.constant(0, tf.int64)))[1]


READ_BLOCK = 256  # records per step of the per-file bookkeeping (its cost is per block)


def _read_file(path, size, flag, skip_corrupt_records):
    """(path, index in file, record) of one TFRecord file, checked to be read to its last byte.

    TF's reader stops a file at a corrupt record (and silently at a partial header); reading it
    error-tolerantly and comparing the bytes consumed with the file size finds both, and names
    the file, which TF's DataLossError does not.
    """
    blocks = tf.data.TFRecordDataset(path).ignore_errors().batch(READ_BLOCK)
    marked = blocks.map(lambda b: (b, False)).concatenate(
        tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), True)))

    def track(state, item):
        offset, index = state
        block, last = item
        n = tf.shape(block, out_type=tf.int64)[0]
        nbytes = tf.reduce_sum(tf.cast(tf.strings.length(block), tf.int64)) + 16 * n
        end = (offset + nbytes, index + n)
        return end, (index + tf.range(n), block, last, end)

    def keep(indices, block, last, end):
        offset, index = end

        def damaged():
            where = tf.strings.join([flag, " ", path, ": record ", tf.strings.as_string(index),
                                     " at byte ", tf.strings.as_string(offset),
                                     " is corrupt or truncated"])
            if not skip_corrupt_records:
                op = tf.debugging.Assert(False, [tf.strings.join([
                    where, ": copy the file again or ", REGENERATE,
                    "; or skip the rest of such files with --skip_corrupt_records"])])
            else:
                lost = _count_records(path, offset, size)
                op = tf.print(tf.strings.join([  # stderr: TF's C++ warnings are silenced
                    "warning: ", where, ": skipped the rest of the file (--skip_corrupt_records): ",
                    tf.strings.as_string(lost), " record(s), ",
                    tf.strings.as_string(size - offset), " bytes lost"]),
                    output_stream=sys.stderr)
            with tf.control_dependencies([op]):
                return tf.constant(True)

        # `<`: a file that grew since it was listed is not damaged.
        check = tf.cond(last & (offset < size), damaged, lambda: tf.constant(True))
        with tf.control_dependencies([check]):
            return tf.logical_not(last)

    ds = marked.scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), track).filter(keep)
    ds = ds.map(lambda indices, block, last, end: (tf.fill(tf.shape(block), path), indices, block))
    return ds.unbatch()


def pretraining_dataset(file_pattern, batch_size, max_seq_length, max_predictions_per_seq,
                        is_training, input_context=None, seed=None, dynamic_masking=False,
                        vocab_size=None, mask_id=None, shuffle_buffer_size=1000, cycle_length=8,
                        skip_batches=0, repeat=None, flag="--input_file", type_vocab_size=None,
                        skip_corrupt_records=False, preflight=True):
    """The pre-training tf.data.Dataset (see the module docstring).

    Args:
        file_pattern: comma-separated TFRecord files or globs.
        batch_size: per replica (what `input_context.get_per_replica_batch_size` returns).
        max_seq_length: length of the token features in the records.
        max_predictions_per_seq: length of the masked_lm_* features in the records.
        is_training: shuffle files and records (and repeat, unless `repeat` says otherwise).
        input_context: tf.distribute.InputContext; the files are split over its input
            pipelines (or the records, when there are fewer files than pipelines).
        seed: key of the shuffles and dynamic masks; default: a random one.
        dynamic_masking: draw a fresh mask at every read (needs vocab_size and mask_id).
        vocab_size: from bert_config.json; ids are checked against it (pre-flight and
            in-graph) when given.
        mask_id: id of [MASK] (dynamic masking).
        shuffle_buffer_size: records per shuffled block (training).
        cycle_length: files read at once (training).
        skip_batches: batches of *this pipeline* already consumed (resume); needs a fixed
            `seed`.
        repeat: default = is_training (evaluation reads the files once, in order).
        flag: the flag the file pattern came from, named in error messages.
        type_vocab_size: from bert_config.json; segment ids are checked against it when given.
        skip_corrupt_records: on a corrupt or truncated record, skip the rest of that file and
            log how many records were lost, instead of failing.
        preflight: check the leading records of every file first (`preflight.py`); every host
            and input pipeline does, so all fail alike before any step.
    """
    if batch_size <= 0:
        raise BertError(f"batch size must be > 0, got {batch_size}")
    if dynamic_masking and (vocab_size is None or mask_id is None):
        raise BertError("--dynamic_masking: needs vocab_size and mask_id")
    files = list_files(file_pattern, flag)
    if preflight:
        check_pretraining_files(files, max_seq_length, max_predictions_per_seq, vocab_size,
                                type_vocab_size, flag=flag)
    repeat = is_training if repeat is None else repeat
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0

    shard_records = num_pipelines > 1 and len(files) < num_pipelines
    if num_pipelines > 1 and not shard_records:
        files = files[pipeline_id::num_pipelines]
    sizes = file_sizes(files)  # of this pipeline's files only
    read = lambda path, size: _read_file(path, size, flag, skip_corrupt_records)
    if is_training:
        ds = _shuffled_files(files, sizes, seed, repeat)
        ds = ds.interleave(read, cycle_length=max(1, min(cycle_length, len(files))),
                           block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=True)
    else:
        ds = tf.data.Dataset.from_tensor_slices((files, tf.constant(sizes, tf.int64)))
        ds = ds.flat_map(read)
        if repeat:
            ds = ds.repeat()
    if shard_records:
        ds = ds.shard(num_pipelines, pipeline_id)
    if is_training and shuffle_buffer_size and shuffle_buffer_size > 1:
        ds = _block_shuffle(ds, shuffle_buffer_size, seed)

    ds = ds.enumerate()  # record index in this pipeline's stream: keys the dynamic mask
    if skip_batches:
        ds = ds.skip(int(skip_batches) * batch_size)
    spec = _feature_spec(max_seq_length, max_predictions_per_seq)
    base_seed = tf.constant([seed, 2 + pipeline_id], tf.int64)  # 0, 1: the shuffles

    def parse(index, item):
        path, file_index, record = item
        features = _to_model_inputs(tf.io.parse_single_example(record, spec))
        if dynamic_masking:  # check the record's own ids and positions before re-masking
            one = lambda t: tf.expand_dims(t, 0)
            features = check_ranges(tf.nest.map_structure(one, features), one(path),
                                    one(file_index), *checks)
            features = tf.nest.map_structure(lambda t: t[0], features)
            key = tf.random.experimental.stateless_fold_in(base_seed, index)
            features = dynamic_mask(features, key, max_predictions_per_seq, vocab_size, mask_id)
        return features, path, file_index

    checks = (max_seq_length, vocab_size, type_vocab_size, flag)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(batch_size, drop_remainder=True)  # static shapes (TPU)
    if dynamic_masking:
        ds = ds.map(lambda features, paths, indices: features)
    else:
        ds = ds.map(lambda features, paths, indices: check_ranges(features, paths, indices,
                                                                  *checks))
    return ds.prefetch(tf.data.AUTOTUNE)
