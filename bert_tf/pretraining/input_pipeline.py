"""tf.data input pipeline for pre-training TFRecords (the original release's schema).

`pretraining_dataset(...)` yields dicts of int32 (float32 for weights) tensors with static
shapes, named for the model plus labels:

  input_word_ids, input_mask, input_type_ids          [B, max_seq_length]
  masked_lm_positions, masked_lm_ids, masked_lm_weights   [B, max_predictions_per_seq]
  next_sentence_labels                                [B]

Packed records (bert-pack-pretraining-data; `packed_records`) are detected by their features
(or must be what `packed=` says) and yield input_positions and input_sequence_index (1, 2, ...
= which sequence; the records store it as input_mask) [B, S], masked_lm_* [B, P], and
next_sentence_positions/labels/weights [B, N] instead (P and N read from the records);
input_mask is then a 0/1 padding mask, as for ordinary records.

Training: each epoch a new permutation of the files, interleaved (cycle 8), records shuffled in
blocks of `shuffle_buffer_size`, repeated forever. All randomness is stateless and keyed by `seed`
(not by TF's global seed) and the interleave is deterministic, so a restarted run can skip exactly
the records it already consumed (`skip_batches`) and read the same stream as an uninterrupted one.

Dynamic masking (RoBERTa style): each batch's stored masks are undone (masked_lm_ids put back
at their positions) and the batch is masked afresh by `pretraining_data.masking.BatchMasker`, the
implementation create_pretraining_data.py's streaming and Beam modes use: 15% of the real tokens
that are not [CLS]/[SEP] (num = min(max_predictions, max(1, round(0.15 * candidates))); the
offline data, like the original, counts [CLS]/[SEP] in n too), of which 80% become [MASK], 10% a
random id in [0, vocab_size), 10% stay. [CLS] is position 0 and the [SEP]s are found from the
packing ([CLS] A [SEP] B [SEP], A = the segment-0 tokens). The numpy Generator is seeded by
(seed, pipeline, batch index), so the masks are reproducible, differ per epoch, and a resumed run
(which skips the consumed batches) re-masks identically. It runs in Python (`tf.numpy_function`)
on the input host: tf.data always runs on the host CPU, so this is fine on GPUs and TPU VMs (it
never has to run inside a TPU graph).

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

import numpy as np
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.pretraining import packed_records
from bert_tf.pretraining.preflight import (DYNAMIC_MASKING_ON_PACKED, REGENERATE,
                                           check_pretraining_files)
from bert_tf.pretraining.record_checks import check_ranges
from bert_tf.pretraining.record_checks import explain_data_error  # noqa: F401 (re-exported)
from bert_tf.pretraining_data.masking import BatchMasker
from bert_tf.pretraining_data.schema import feature_spec

MASKED_LM_PROB = 0.15


def list_files(file_pattern, flag="--input_file"):
    """Sorted, de-duplicated files of comma-separated globs (`fileio.expand_globs`): every host
    sees the same order, so each reads its own shard of the list.

    Args:
        file_pattern: comma-separated file names or globs.
        flag: the flag named in the BertError when nothing matches.
    """
    return sorted(set(fileio.expand_globs(file_pattern, flag)))


# Record feature -> model input name, where they differ (packed rows add `positions`).
_MODEL_NAMES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids",
                "positions": "input_positions"}


def _to_model_inputs(parsed):
    """Record features (int64; packed or not) -> model input names, int32 (weights float32);
    a packed record's sequence index as input_sequence_index (`packed_records.to_model_inputs`)."""
    out = {_MODEL_NAMES.get(name, name): tf.cast(t, tf.float32 if name.endswith("_weights")
                                                 else tf.int32)
           for name, t in parsed.items()}
    if "next_sentence_positions" in out:
        return packed_records.to_model_inputs(out)
    out["next_sentence_labels"] = tf.reshape(out["next_sentence_labels"], [])  # one per row
    return out


def _remask(masker, seed, pipeline_id, batch_index, ids, input_mask, type_ids, positions, labels,
            weights):
    """numpy: undo the records' masks, then mask the batch afresh (see `dynamic_mask`)."""
    ids = ids.astype(np.int64)
    real = weights > 0
    ids[np.nonzero(real)[0], positions[real]] = labels[real]  # the unmasked ids
    n = (input_mask > 0).sum(axis=1)
    len_a = np.clip(((input_mask > 0) & (type_ids == 0)).sum(axis=1) - 2, 0, np.maximum(n - 2, 0))
    gen = np.random.default_rng([int(seed) % (1 << 64), int(pipeline_id), int(batch_index)])
    out = masker.mask_packed(ids, n, len_a, gen)
    i32 = lambda a: a.astype(np.int32)
    return i32(out.ids), i32(out.positions), i32(out.labels), out.weights


def dynamic_mask(features, masker, seed, pipeline_id, batch_index):
    """Re-mask a batch of `_to_model_inputs` dicts with `masker` (see the module docstring).

    Args:
        features: the batch; its masked_lm_* undo its stored masks.
        masker: a `masking.BatchMasker` for the batch's shapes.
        seed, pipeline_id, batch_index: seed the numpy Generator (int or scalar tensors).

    Returns:
        `features` with new input_word_ids and masked_lm_positions/ids/weights (static shapes).
    """
    names = ("input_word_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
    fn = lambda *args: _remask(masker, *args)
    outs = tf.numpy_function(fn, [
        tf.cast(seed, tf.int64), tf.cast(pipeline_id, tf.int64), tf.cast(batch_index, tf.int64),
        features["input_word_ids"], features["input_mask"], features["input_type_ids"],
        features["masked_lm_positions"], features["masked_lm_ids"],
        features["masked_lm_weights"]], [tf.int32, tf.int32, tf.int32, tf.float32],
        stateful=False)
    out = dict(features)
    for name, t in zip(names, outs):
        t.set_shape(features[name].shape)  # numpy_function loses them; TPU/XLA need them
        out[name] = t
    return out


# Every tf.data function here is plain TF ops (explicit tf.cond/while_loop): AutoGraph
# converting them (tf.data's default) only costs tracing time (~1 CPU-s a cold pipeline).
_plain = tf.autograph.experimental.do_not_convert

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
    return epochs.flat_map(_plain(epoch_files))


def _block_shuffle(ds, size, seed):
    """Shuffle within consecutive blocks of `size` records (in place of a shuffle buffer)."""
    key = tf.constant([seed, 1], tf.int64)

    def shuffle_block(index, block):
        k = tf.random.experimental.stateless_fold_in(key, index)
        n = tf.shape(tf.nest.flatten(block)[0])[0]
        order = tf.argsort(tf.random.stateless_uniform([n], k))
        return tf.nest.map_structure(lambda t: tf.gather(t, order), block)

    return ds.batch(size).enumerate().map(_plain(shuffle_block)).unbatch()


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
                        skip_corrupt_records=False, preflight=True, packed=None,
                        run_log=None, preflight_label=None):
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
        packed: whether the run was set up for packed records (decided once from them,
            `pretraining.records_are_packed`); records of the other kind are a BertError.
            None: whichever kind the records are.
        run_log: the run's `preflight.RunLog` (its pre-flight line once per run); None: logged.
        preflight_label: what the pre-flight line says the files are for ("phase 2").
    """
    if batch_size <= 0:
        raise BertError(f"batch size must be > 0, got {batch_size}")
    if dynamic_masking and (vocab_size is None or mask_id is None):
        raise BertError("--dynamic_masking: needs vocab_size and mask_id")
    files = list_files(file_pattern, flag)
    if preflight:
        info = check_pretraining_files(files, max_seq_length, max_predictions_per_seq,
                                       vocab_size, type_vocab_size, flag=flag,
                                       run_log=run_log, label=preflight_label)
        shape = info["shape"] if info["packed"] else None  # (S, P, N) of packed records
    else:
        fmt = packed_records.record_format(files)
        shape = fmt and fmt["packed"] and (
            fmt["seq_length"], fmt["predictions"], fmt["sequences_per_pack"])
    if packed is not None and bool(shape) != bool(packed):
        kind = lambda p: "packed" if p else "ordinary (unpacked)"  # noqa: E731
        raise BertError(f"{flag}={file_pattern}: {kind(shape)} records, but this run was set "
                        f"up for {kind(packed)} ones (its training records' kind): pass "
                        "files of that kind")
    if shape and dynamic_masking:
        raise BertError(DYNAMIC_MASKING_ON_PACKED)
    repeat = is_training if repeat is None else repeat
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0

    shard_records = num_pipelines > 1 and len(files) < num_pipelines
    if num_pipelines > 1 and not shard_records:
        files = files[pipeline_id::num_pipelines]
    sizes = file_sizes(files)  # of this pipeline's files only
    # Nested functions (_read_file's scan/filter/map) inherit the unconverted status.
    read = _plain(lambda path, size: _read_file(path, size, flag, skip_corrupt_records))
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
    if shape:  # S, P and N from the records (P, N are the packer's, not flags)
        spec = packed_records.feature_spec(max_seq_length, shape[1], shape[2])
    else:
        spec = feature_spec(max_seq_length, max_predictions_per_seq)

    def parse(index, item):
        path, file_index, record = item
        return _to_model_inputs(tf.io.parse_single_example(record, spec)), path, file_index, index

    checks = (max_seq_length, vocab_size, type_vocab_size, flag)
    masker = BatchMasker(
        None, max_seq_length, max_predictions_per_seq, MASKED_LM_PROB, vocab_size=vocab_size,
        mask_id=mask_id) if dynamic_masking else None

    def check(features, paths, file_indices, indices):
        # The record's own ids and positions are checked before any re-masking.
        features = check_ranges(features, paths, file_indices, *checks)
        if masker is not None:  # drop_remainder: record index // batch_size is the batch index
            features = dynamic_mask(features, masker, seed, pipeline_id, indices[0] // batch_size)
        return features

    ds = ds.map(_plain(parse), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.batch(batch_size, drop_remainder=True)  # static shapes (TPU)
    ds = ds.map(_plain(check), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
