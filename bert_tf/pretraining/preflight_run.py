"""bert-run-pretraining's pre-flight before TensorFlow is imported.

`check_run` checks the flags against the records' first ones (`preflight.check_pretraining_files`,
which reads local files without TensorFlow), so a wrong --max_seq_length or --dynamic_masking on
packed records fails in about a second, before a strategy or a model is built; `check_phases`
does it for every phase of a two-phase run.
"""
import json
import logging

from bert_tf import BertError
from bert_tf.fileio import expand_globs, is_local
from bert_tf.pretraining import phase_plan
from bert_tf.pretraining.preflight import RunLog, check_pretraining_files
from bert_tf.training.options import check_mixed_precision

log = logging.getLogger("bert_tf.pretraining.preflight")  # the pre-flight's lines, one logger


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
