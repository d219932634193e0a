"""Pre-flight check of pre-training TFRecords: one-line errors before the first step.

`check_pretraining_files` reads the first records of every input file (a bounded, evenly spaced
sample when there are more than `max_files`); local files without TensorFlow, so a wrong flag
fails in about a second (gs:// and other schemes through TF's reader). It checks the TFRecord
framing (including that the file ends with a whole record: a cut-off shard does
not), the feature keys, dtypes and lengths against the flags, and the value ranges the model
gathers with (on GPU/TPU an out-of-range gather returns zeros instead of failing). Each problem
is one line naming the file, the record, what is wrong and the fix; the first one is raised as
`BertError`, counting the files with the same problem; other problems are logged as warnings.

The summary line says what its figures cover (bert_tf.pretraining.preflight_line): the packer's
journal (the whole data) when there is one, else the records it sampled.

TFRecord files are read, and their framing errors described, by
bert_tf.pretraining.tfrecord_reader; the rest of each file is checked in-graph while training
(bert_tf.pretraining.record_checks).
"""
import concurrent.futures
import logging
import math
import os
import time

from bert_tf import BertError
from bert_tf.fileio import describe_files, is_local
from bert_tf.pretraining import packed_records
from bert_tf.pretraining.preflight_line import packer_journal, summary_line
from bert_tf.pretraining.tfrecord_reader import (  # noqa: F401 (the last two: API)
    REGENERATE, DataLoss, describe_framing_error, file_size, parse_example, records,
    ends_with_whole_record, masked_crc32c)

log = logging.getLogger(__name__)

# The records carry their masks; packed training keeps them (issue 40: say what to do instead).
DYNAMIC_MASKING_ON_PACKED = (
    "--dynamic_masking: packed records were masked when they were made (bert-pack-pretraining-"
    "data keeps each sequence's masks), so training on them uses those masks: drop "
    "--dynamic_masking, or pass the unpacked records to --input_file to draw new masks at "
    "every read")


def _isdir(path):
    import tensorflow as tf  # remote file systems only
    return tf.io.gfile.isdir(path)


SEQ_FEATURES = ("input_ids", "input_mask", "segment_ids")
PRED_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
PRETRAINING_FEATURES = SEQ_FEATURES + PRED_FEATURES + ("next_sentence_labels",)
# Keys only the original's fine-tuning scripts write (run_classifier / run_squad records).
FINETUNING_KEYS = frozenset({"label_ids", "is_real_example", "unique_ids", "start_positions",
                             "end_positions", "is_impossible"})


def sample_files(files, max_files):
    """At most `max_files` of `files`, evenly spaced, first and last included (deterministic).

    Args:
        files: a list of paths.
        max_files: how many to keep at most.
    """
    n = len(files)
    if n <= max_files:
        return list(files)
    if max_files <= 1:
        return [files[0]]
    picks = sorted({round(i * (n - 1) / (max_files - 1)) for i in range(max_files)})
    return [files[i] for i in picks]


# ---- record contents ------------------------------------------------------------------------

def _values(feature):
    kind = feature.WhichOneof("kind")
    return kind, (getattr(feature, kind).value[:] if kind else [])  # a list: min/max 2x faster


def describe_record(example, max_seq_length, max_predictions_per_seq, vocab_size=None,
                    type_vocab_size=None, flag="--input_file"):
    """The first problem of one parsed tf.train.Example as a phrase + fix, or None if it is fine.

    Args:
        example: a tf.train.Example (protobuf).
        max_seq_length: expected length of input_ids, input_mask and segment_ids.
        max_predictions_per_seq: expected length of the masked_lm_* features.
        vocab_size: ids must be below it; None skips the check.
        type_vocab_size: segment ids must be below it; None skips the check.
        flag: the flag the file came from, named in the phrase.
    """
    fmap = example.features.feature
    keys = set(fmap)
    if packed_records.is_packed(keys):  # bert-pack-pretraining-data's records
        return packed_records.describe_record(example, max_seq_length, vocab_size,
                                              type_vocab_size,
                                              max_predictions_per_seq=max_predictions_per_seq)
    missing = [k for k in PRETRAINING_FEATURES if k not in keys]
    if missing:
        if keys & FINETUNING_KEYS:
            return (f"holds fine-tuning features ({', '.join(sorted(keys))}), not pre-training "
                    f"records: remove it from {flag}")
        return (f"records lack {', '.join(missing)}: not pre-training data; remove it from "
                f"{flag} or {REGENERATE}")
    vals = {}
    for name in PRETRAINING_FEATURES:
        kind, v = _values(fmap[name])
        want = "float_list" if name == "masked_lm_weights" else "int64_list"
        if kind != want and len(v):
            return (f"{name} is a {kind or 'empty feature'}, expected {want}: not pre-training "
                    f"data; {REGENERATE}")
        vals[name] = v
    for names, want, opt in ((SEQ_FEATURES, max_seq_length, "--max_seq_length"),
                             (PRED_FEATURES, max_predictions_per_seq,
                              "--max_predictions_per_seq")):
        n = len(vals[names[0]])
        if n != want:
            return (f"records have {names[0]} of length {n}, not {opt}={want}: pass {opt}={n} "
                    f"or regenerate the data")
        for name in names[1:]:
            if len(vals[name]) != n:
                return (f"{name} has length {len(vals[name])} but {names[0]} has {n}: the record "
                        f"is malformed; {REGENERATE}")
    nsp = list(vals["next_sentence_labels"])
    if nsp not in ([0], [1]):
        return f"next_sentence_labels is {nsp}, must be [0] or [1]: {REGENERATE}"
    return _describe_ranges(vals, max_seq_length, vocab_size, type_vocab_size)


def _describe_ranges(vals, max_seq_length, vocab_size, type_vocab_size):
    for name in ("input_ids", "masked_lm_ids"):
        lo, hi = min(vals[name]), max(vals[name])
        if lo < 0:
            return f"{name} has negative id {lo}: {REGENERATE}"
        if vocab_size is not None and hi >= vocab_size:
            return (f"{name} has id {hi} >= vocab_size {vocab_size} of --bert_config_file: the "
                    f"data was made with a bigger vocabulary; use the bert_config.json of that "
                    f"vocab.txt or regenerate the data")
    lo, hi = min(vals["segment_ids"]), max(vals["segment_ids"])
    if lo < 0 or (type_vocab_size is not None and hi >= type_vocab_size):
        bad = lo if lo < 0 else hi
        return (f"segment_ids has {bad}, outside [0, type_vocab_size {type_vocab_size}) of "
                f"--bert_config_file: use the matching bert_config.json or regenerate the data")
    if not set(vals["input_mask"]) <= {0, 1}:
        return f"input_mask has values {sorted(set(vals['input_mask']))}, must be 0/1: {REGENERATE}"
    lo, hi = min(vals["masked_lm_positions"]), max(vals["masked_lm_positions"])
    if lo < 0 or hi >= max_seq_length:
        bad = lo if lo < 0 else hi
        return (f"masked_lm_positions has {bad}, outside [0, --max_seq_length={max_seq_length}): "
                f"{REGENERATE}")
    if not all(math.isfinite(w) and w >= 0 for w in vals["masked_lm_weights"]):
        return f"masked_lm_weights has a negative or non-finite weight: {REGENERATE}"
    return None


def _phase_flags(what, flag):
    """Phase 2's files are checked against the phase2_* lengths: their fix names those."""
    if not flag.startswith("--phase2_"):
        return what
    for name in ("--max_seq_length", "--max_predictions_per_seq"):
        what = what.replace(name, "--phase2_" + name[2:])
    return what


def check_file(path, max_seq_length, max_predictions_per_seq, vocab_size=None,
               type_vocab_size=None, records_per_file=4, flag="--input_file", info=None):
    """Check the first `records_per_file` records of one file, and that it ends with a whole one.

    Args:
        path: the file.
        max_seq_length: as `describe_record`.
        max_predictions_per_seq: as `describe_record`.
        vocab_size: as `describe_record`.
        type_vocab_size: as `describe_record`.
        records_per_file: leading records parsed and checked.
        flag: the flag the file came from, named in the problem line.
        info: a dict that gets the records' kind (`packed`), `shape` (S, P, N) and token
            counts (`tokens`, `real_tokens`, `sequences`).
    Returns:
        (problem line or None, number of records read).
    """
    info = {} if info is None else info
    offset, index, it, longest = 0, 0, None, 0
    try:
        it = records(path)
        for index in range(records_per_file):
            try:
                raw = next(it)
            except StopIteration:  # a partial header at the end also stops the reader
                if file_size(path) != offset:
                    return f"{flag} {path}: {describe_framing_error(path, offset, index)}", index
                break
            except DataLoss:
                what = describe_framing_error(path, offset, index)
                return f"{flag} {path}: {what}", index
            try:
                example = parse_example(raw)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError type varies by backend
                return (f"{flag} {path}: record {index}: not a tf.train.Example (another "
                        f"kind of TFRecord): pass the files written by "
                        f"create_pretraining_data.py"), index
            what = (describe_record(example, max_seq_length, max_predictions_per_seq,
                                    vocab_size, type_vocab_size, flag)
                    or packed_records.tally(example, info))
            if what:
                return f"{flag} {path}: record {index}: {_phase_flags(what, flag)}", index + 1
            offset += len(raw) + 16
            longest = max(longest, len(raw))
        else:
            index = records_per_file
            size = file_size(path)
            window = min(4096, max(512, 2 * longest + 32))  # the last record is most likely
            if size > offset and ends_with_whole_record(path, size, window) is False:  # as long
                return (f"{flag} {path}: truncated: it does not end with a whole record ({size} "
                        f"bytes); the shard was cut off: copy it again or {REGENERATE}"), index
    except OSError as e:  # unreadable (a directory, permissions, vanished file, ...)
        if os.path.isdir(path) if is_local(path) else _isdir(path):
            return (f"{flag} {path}: is a directory: pass a glob of the files in it, e.g. "
                    f"{flag}={path.rstrip('/')}/*"), 0
        return (f"{flag} {path}: cannot read it ({e.strerror or e}): check that it exists and is "
                f"readable by this user, or remove it from {flag}"), 0
    finally:
        if it is not None:
            it.close()
    return None, index


def check_pretraining_files(files, max_seq_length, max_predictions_per_seq, vocab_size=None,
                            type_vocab_size=None, flag="--input_file", records_per_file=4,
                            max_files=1000, batch_size=None, dynamic_masking=False,
                            log_line=True, run_log=None, label=None):
    """Check pre-training TFRecord files against the flags before any step.

    Args:
      files: list of file paths (already expanded from the flag's globs).
      max_seq_length, max_predictions_per_seq: the flags the data must have been made with.
      vocab_size, type_vocab_size: from bert_config.json; None skips that range check.
      flag: the flag the files came from, named in the messages.
      records_per_file: how many leading records of each file are parsed and checked.
      max_files: above this many files, an evenly spaced sample of this many is checked.
      batch_size: --train_batch_size; for packed records the line says how many sequences a
        step holds on average.
      dynamic_masking: the run trains with --dynamic_masking: packed records are then an
        error, raised before the line is logged (one problem, one line).
      log_line: log the line.
      run_log: the run's `RunLog`: the line is logged once per run for the same files (the
        command's pre-flight and every input pipeline of the run check them); None: logged.
      label: what the line is about, e.g. "phase 2" ("pre-flight (phase 2): ...").

    Returns:
      dict with `files` (checked), `records` (checked), `empty_files`, `seconds`, `packed`
      (the kind found), `shape` ((S, P, N) of the records; N = 0 for ordinary ones),
      `padding` (the share of padding tokens), `sequences_per_row` and `source` (what these
      two cover: "journal" = the whole data, from the packer's journal, or "sample" = the
      checked records). Logged in one line, once per `run_log` for the same files.

    Raises:
      BertError: the first problem, one line; it counts the files with the same problem, and
      other files' different problems are logged as warnings.
    """
    start = time.perf_counter()
    chosen = sample_files(list(files), max_files)
    args = (max_seq_length, max_predictions_per_seq, vocab_size, type_vocab_size,
            records_per_file, flag)
    infos = [{} for _ in chosen]
    if any(not is_local(p) for p in chosen):  # remote file systems: overlap the round trips
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda p, i: check_file(p, *args, info=i), chosen, infos))
    else:
        results = [check_file(p, *args, info=i) for p, i in zip(chosen, infos)]
    # (path, what is wrong without the "--flag path: " prefix)
    problems = [(p, line[len(f"{flag} {p}: "):]) for p, (line, _) in zip(chosen, results) if line]
    kinds = [(p, i) for p, i in zip(chosen, infos) if "packed" in i]
    if not problems and kinds:
        for path, i in kinds[1:]:
            first_path, first = kinds[0]
            if (i["packed"], i["shape"][1:]) != (first["packed"], first["shape"][1:]):
                what = lambda x: (f"packed records of (S, P, N) {x['shape']}" if x["packed"]
                                  else "ordinary records")
                problems.append((path, f"holds {what(i)}, {first_path} {what(first)}: pass "
                                       f"files of one kind and shape"))
                break
    if problems:
        raise BertError(_one_line(problems, flag))
    records = sum(n for _, n in results)
    if records == 0:
        if len(files) == 1:
            raise BertError(f"{flag} {files[0]}: the file is empty (no records): {REGENERATE}")
        some = "all" if len(chosen) == len(files) else f"all {len(chosen)} checked of"
        raise BertError(f"{flag}: {some} {len(files)} file(s) are empty (no records): "
                        f"{describe_files(chosen)}: {REGENERATE}")
    first = kinds[0][1]
    if first["packed"] and dynamic_masking:
        raise BertError(DYNAMIC_MASKING_ON_PACKED)
    tokens = sum(i["tokens"] for _, i in kinds)
    out = {"files": len(chosen), "records": records,
           "empty_files": sum(1 for _, n in results if n == 0), "packed": first["packed"],
           "shape": first["shape"], "source": "sample",
           "padding": 1.0 - sum(i["real_tokens"] for _, i in kinds) / max(tokens, 1),
           "sequences_per_row": sum(i["sequences"] for _, i in kinds) / records}
    journal = packer_journal(files, first["shape"]) if first["packed"] else None
    if journal:
        out.update(journal, source="journal")
    key = (tuple(chosen), first["shape"])
    if log_line and (run_log is None or run_log.first(key)):  # every pipeline checks them
        log.info("%s", summary_line(out, records_per_file, batch_size, label))
    out["seconds"] = time.perf_counter() - start
    return out


class RunLog:
    """The pre-flight lines one run has logged, passed along explicitly (as the command's
    `Source` is): the command's pre-flight logs a line, and the run's input pipelines, handed
    the same RunLog, do not log it again. A new run (a notebook's second) has a new RunLog, so
    it logs its lines again; nothing is kept per process."""

    def __init__(self):
        self._logged = set()

    def first(self, key):
        """True the first time `key` (files and record shape) is seen in this run."""
        if key in self._logged:
            return False
        self._logged.add(key)
        return True


def _one_line(problems, flag):
    """The error of the first problem; files with the same one are counted in it, different
    problems of other files are logged as warnings (one line each, no duplicate)."""
    (path, what), rest = problems[0], problems[1:]
    same = [p for p, w in rest if w == what]
    others = [(p, w) for p, w in rest if w != what]
    for p, w in others:
        log.warning("%s %s: %s", flag, p, w)
    note = [f"the same in {len(same)} more file(s)"] if same else []
    if others:
        note.append(f"{len(others)} more file(s) with other problems, listed above")
    return f"{flag} {path}: {what}" + (f" ({'; '.join(note)})" if note else "")
