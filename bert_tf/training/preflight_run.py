"""bert-run-pretraining's pre-flight before TensorFlow is imported, and what its line says.

`check_run` checks the flags against the records' first ones (`preflight.check_pretraining_files`,
which reads local files without TensorFlow), so a wrong --max_seq_length or --dynamic_masking on
packed records fails in about a second, before a strategy or a model is built. The pre-flight
line's figures say what they cover: the whole data, from the packer's journal
(`<dir>/.bert_tf/<name>.stats.json`, bert_tf.pretraining_data.sequence_packing_run) when every file is a
shard of one, else the records sampled.
"""
import json
import logging
import os
import posixpath

from bert_tf.fileio import is_local

log = logging.getLogger("bert_tf.training.preflight")  # the pre-flight's lines, one logger

# The records carry their masks; packed training keeps them (issue 40: say what to do instead).
DYNAMIC_MASKING_ON_PACKED = (
    "--dynamic_masking: packed records were masked when they were made (bert-pack-pretraining-"
    "data keeps each sequence's masks), so training on them uses those masks: drop "
    "--dynamic_masking, or pass the unpacked records to --input_file to draw new masks at "
    "every read")


def _open(path):
    if is_local(path):
        return open(path, "rb")
    import tensorflow as tf
    return tf.io.gfile.GFile(path, "rb")


def _listdir(folder):
    if is_local(folder):
        return os.listdir(folder)
    import tensorflow as tf
    return tf.io.gfile.listdir(folder)


def _path_lib(path):
    # gs://b/x must keep its "//" (os.path.normpath would make it gs:/b/x).
    return os.path if is_local(path) else posixpath


def _norm(path):
    return os.path.normpath(path) if is_local(path) else path


def _config_sizes(path):
    """(vocab_size, type_vocab_size, max_position_embeddings) of a local bert_config.json /
    config.json, else Nones (the run checks them later, with the config it reads)."""
    try:
        with open(path) as f:
            config = json.load(f)
        sizes = config.get("vocab_size"), config.get("type_vocab_size")
        positions = config.get("max_position_embeddings")
        positions = positions if isinstance(positions, int) else None
        return (sizes if all(isinstance(v, int) for v in sizes) else (None, None)) + (positions,)
    except (OSError, ValueError, TypeError, AttributeError):
        return None, None, None


def check_run(options, run_log=None):
    """The pre-flight of a bert-run-pretraining run, before TensorFlow is imported.

    Args:
        options: PretrainingOptions (the parsed flags).
        run_log: the run's `preflight.RunLog`, handed on to the run so that its input
            pipelines do not log the same lines again; None: a new one.
    Returns:
        `check_pretraining_files`' result of phase 1's files (its line is logged), or None
        when the run reads no records or the flags it needs are not set yet (the run then
        says what is missing).
    Raises:
        BertError: the first problem of the records, or --dynamic_masking on packed records,
        or phase flags no run can use.
    """
    from bert_tf.training import phase_plan
    from bert_tf.training.options import check_mixed_precision
    from bert_tf.training.preflight import RunLog
    o = options
    check_mixed_precision(o.mixed_precision)
    run_log = RunLog() if run_log is None else run_log
    if not (o.do_train or o.do_eval) or not o.input_file or not o.output_dir or min(
            o.max_seq_length, o.max_predictions_per_seq, o.train_batch_size) <= 0:
        return None
    sizes = (None, None, None)  # --init_checkpoint may name the config later
    if o.bert_config_file and is_local(o.bert_config_file):
        sizes = _config_sizes(o.bert_config_file)
    phase_plan.check(o, sizes[2])
    return check_phases(o, run_log, *sizes[:2])


def check_phases(options, run_log, vocab_size=None, type_vocab_size=None):
    """Check every phase's training (and --do_eval) files against its flags, each line once
    per `run_log`; with two phases also the line of where the run starts.

    Args:
        options: PretrainingOptions.
        run_log: the run's `preflight.RunLog`.
        vocab_size, type_vocab_size: the config's (None: not checked).
    Returns:
        phase 1's training files' `check_pretraining_files` result.
    Raises:
        BertError: a phase's files do not fit its flags, or its --do_eval files are of the
        other record kind (packed or plain) than its training files.
    """
    from bert_tf import BertError
    from bert_tf.fileio import expand_globs
    from bert_tf.training import phase_plan
    from bert_tf.training.preflight import check_pretraining_files
    o, first = options, None
    plan = phase_plan.phases(o)
    for phase in plan:
        p = phase.options
        checks = [("input_file", p.input_file, o.do_train)]
        if o.do_eval and phase.eval_files != p.input_file:
            checks.append(("eval_input_file", phase.eval_files, False))
        kinds = []
        for name, pattern, training in checks:
            files = sorted(set(expand_globs(pattern, phase.flag(name))))  # as list_files
            info = check_pretraining_files(
                files, p.max_seq_length, p.max_predictions_per_seq, vocab_size,
                type_vocab_size, flag=phase.flag(name),
                batch_size=p.train_batch_size if training else None,
                dynamic_masking=o.dynamic_masking and training, run_log=run_log,
                label=phase.label)
            first = first or info
            kinds.append(bool(info and info["packed"]))
        if len(kinds) == 2:  # the model's inputs follow the training records' kind
            problem = phase_plan.kind_mismatch(phase, kinds[0], kinds[1], phase.eval_files)
            if problem:
                raise BertError(problem)
    if len(plan) > 1 and run_log.first("phases"):
        log.info("%s", phase_plan.where_line(o, phase_plan.latest_step(o.output_dir)))
    return first


def packer_journal(files, shape):
    """Whole-data figures of packed `files` from bert-pack-pretraining-data's journals
    (`<dir>/.bert_tf/*.stats.json`), or None unless every file is a shard of a complete
    journal of the same (S, P, N).

    Args:
        files: the packed record files.
        shape: (S, P, N) of their records.
    Returns:
        {"rows", "sequences", "padding", "sequences_per_row", "journals"} or None.
    """
    rows = sequences = tokens = 0
    journals, left = set(), {_norm(p) for p in files}
    for folder in sorted({_path_lib(p).dirname(p) for p in left}):
        path_lib = _path_lib(folder)
        meta = path_lib.join(folder, ".bert_tf")
        try:
            names = sorted(n for n in _listdir(meta) if n.endswith(".stats.json"))
        except Exception:  # noqa: BLE001 - no journal folder: the figures are sampled
            return None
        for name in names:
            try:
                with _open(path_lib.join(meta, name)) as f:
                    j = json.loads(f.read())
                if (j.get("mode"), j.get("complete")) != ("pack", True) or (
                        j["max_seq_length"], j["num_predictions"],
                        j["max_sequences_per_pack"]) != tuple(shape):
                    continue
                for i, output in enumerate(j["outputs"]):
                    path = path_lib.join(folder, posixpath.basename(output))
                    if path in left:  # the journal names where it wrote; the data may be moved
                        shard = j["shards"][str(i)]
                        rows, sequences = rows + shard["packs"], sequences + shard["sequences"]
                        tokens += shard["tokens"]
                        left.discard(path)
                        journals.add(path_lib.join(meta, name))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    if left or not rows:
        return None
    return {"rows": rows, "sequences": sequences, "padding": 1 - tokens / (rows * shape[0]),
            "sequences_per_row": sequences / rows, "journals": sorted(journals)}


def summary_line(info, records_per_file, batch_size=None, label=None):
    """The pre-flight line: the records' kind, and figures that say what they cover.

    Args:
        info: `check_pretraining_files`' result.
        records_per_file: leading records checked per file (named for sampled figures).
        batch_size: --train_batch_size (packed: the line gives the sequences a step holds).
        label: what the records are for ("phase 2"), said first; None: nothing.
    """
    s, p, n = info["shape"]
    kind = (f"packed records (up to {n} sequences per pack; {p} predictions)" if info["packed"]
            else "ordinary (unpacked) records")
    checked = f"{info['records']} record(s) of {info['files']} file(s) checked"
    if info["source"] == "journal":
        cover = (f"the whole data (the packer's journal): {info['rows']} rows holding "
                 f"{info['sequences']} sequences, ")
    else:
        each = f" ({records_per_file} at most of each file)" if info["files"] > 1 else ""
        cover = f"in a sample, the first {info['records']} record(s){each}: "
    figures = f"padding {100 * info['padding']:.1f}% of the tokens"
    if info["packed"]:
        figures = f"{info['sequences_per_row']:.2f} sequences per row on average, " + figures
        if batch_size:
            batch_flag = "--phase2_train_batch_size" if label == "phase 2" else \
                "--train_batch_size"
            figures += (f"; a step of {batch_flag}={batch_size} rows holds "
                        f"{batch_size * info['sequences_per_row']:.1f} sequences on average")
    head = f"pre-flight ({label})" if label else "pre-flight"
    return f"{head}: {kind}, {checked}; {cover}{figures}"
