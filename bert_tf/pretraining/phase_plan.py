"""The two-phase pre-training recipe as a plan: which steps each phase runs, on what data, at
what learning rate. No TensorFlow import (the command's pre-flight uses it before TF starts).

The BERT paper pre-trains at max_seq_length 128 for 90% of the steps and at 512 for the rest.
With --phase2_input_file, one bert-run-pretraining does both: phase 1 runs global steps
[0, N1) on --input_file (--max_seq_length, --max_predictions_per_seq, --train_batch_size,
N1 = --num_train_steps), phase 2 runs [N1, N1 + N2) on --phase2_input_file with the phase2_*
flags. Steps are global: the checkpoints, summaries and the learning rate count on across the
boundary.

Learning rate of the update at global step t (0-based; L = --learning_rate, W = warm-up):
  continue (default; the paper's one schedule over both phases, T = N1 + N2):
      L * t / W1                  for t < W1
      L * (1 - t / T)             otherwise (> 0 up to the last step, t = T - 1)
  restart (NVIDIA, Chinese-BERT-wwm; L2 = --phase2_learning_rate, u = t - N1):
      phase 1: L * t / W1 for t < W1, else L * (1 - t / N1)
      phase 2: L2 * (u + 1) / W2 for u < W2, else L2 * (1 - u / N2)
  Phase 2's warm-up starts at L2 / W2, not 0: its first step trains. Neither schedule reaches 0
  inside phase 2, whatever a checkpoint restored (`learning_rate_at` is this formula; the
  trainer's schedule is bert_tf.pretraining.phases.PhaseSchedule).
"""
import dataclasses
import os
import re
import types

from bert_tf import BertError

SCHEDULES = ("continue", "restart")
# Flags that only mean something with --phase2_input_file (their unset values).
_PHASE2_ONLY = types.MappingProxyType({
    "phase2_eval_input_file": None, "phase2_train_batch_size": None,
    "phase2_num_train_steps": None, "phase2_learning_rate": None,
    "phase2_num_warmup_steps": None, "phase2_fresh_optimizer": False,
    "phase2_lr_schedule": "continue"})
# The phase flags a checkpoint records; a resume with other values is refused.
RECORDED = ("num_train_steps", "max_seq_length", "max_predictions_per_seq", "train_batch_size",
            "learning_rate", "num_warmup_steps", "phase2_num_train_steps",
            "phase2_max_seq_length", "phase2_max_predictions_per_seq",
            "phase2_train_batch_size", "phase2_lr_schedule", "phase2_learning_rate",
            "phase2_num_warmup_steps", "phase2_fresh_optimizer")


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase: global steps [start, end) with its own options.

    Attributes:
        number: 1 or 2.
        start, end: the global steps it runs.
        options: the run's PretrainingOptions with this phase's input_file, eval_input_file
            (None: its input_file), max_seq_length, max_predictions_per_seq and
            train_batch_size.
        prefix: its flags' prefix ("--" or "--phase2_"), named in its errors.
        of: how many phases the run has.
    """
    number: int
    start: int
    end: int
    options: object
    prefix: str = "--"
    of: int = 1

    def flag(self, name):
        """This phase's name of a flag: `flag("max_seq_length")` -> --phase2_max_seq_length."""
        return self.prefix + name

    @property
    def label(self):
        """The name its lines say ("phase 2") in a two-phase run; None in a one-phase one
        (its lines say nothing)."""
        return f"phase {self.number}" if self.of > 1 else None

    @property
    def eval_files(self):
        """The files --do_eval reads in this phase."""
        return self.options.eval_input_file or self.options.input_file


def two_phases(options):
    """Whether the options ask for phase 2."""
    return bool(getattr(options, "phase2_input_file", None))


def phase2_values(options):
    """Phase 2's steps, batch, peak learning rate and warm-up with the defaults filled in."""
    o = options
    n1 = o.num_train_steps
    steps = o.phase2_num_train_steps if o.phase2_num_train_steps is not None else max(1, n1 // 9)
    warmup = o.phase2_num_warmup_steps
    if warmup is None:
        warmup = round(o.num_warmup_steps * steps / n1) if n1 > 0 else 0
    return {"phase2_num_train_steps": steps,
            "phase2_train_batch_size": o.phase2_train_batch_size or o.train_batch_size,
            "phase2_learning_rate": (o.phase2_learning_rate if o.phase2_learning_rate is not None
                                     else o.learning_rate),
            "phase2_num_warmup_steps": warmup}


def phases(options):
    """The run's phases (one, or two with --phase2_input_file), as `Phase`s."""
    o = options
    if not two_phases(o):
        return (Phase(1, 0, o.num_train_steps, o),)
    v = phase2_values(o)
    n1, n2 = o.num_train_steps, v["phase2_num_train_steps"]
    second = dataclasses.replace(
        o, input_file=o.phase2_input_file, eval_input_file=o.phase2_eval_input_file,
        max_seq_length=o.phase2_max_seq_length,
        max_predictions_per_seq=o.phase2_max_predictions_per_seq,
        train_batch_size=v["phase2_train_batch_size"])
    return (Phase(1, 0, n1, o, of=2), Phase(2, n1, n1 + n2, second, "--phase2_", of=2))


def total_steps(options):
    """Global steps of the whole run (both phases)."""
    return phases(options)[-1].end


def check(options, max_position_embeddings=None):
    """One-line BertErrors for phase flags no run can use (before anything is written).

    Args:
        options: PretrainingOptions.
        max_position_embeddings: the config's; phase 2's length must fit (None: not checked).
    """
    o = options
    if not two_phases(o):
        for name, unset in _PHASE2_ONLY.items():
            if getattr(o, name) != unset:
                raise BertError(f"--{name}: needs --phase2_input_file (phase 2's data)")
        return
    if o.phase2_lr_schedule not in SCHEDULES:
        raise BertError(f"--phase2_lr_schedule: {o.phase2_lr_schedule!r} is not one of "
                        f"{', '.join(SCHEDULES)}")
    if o.phase2_lr_schedule == "continue":
        for name in ("phase2_learning_rate", "phase2_num_warmup_steps"):
            if getattr(o, name) is not None:
                raise BertError(f"--{name}: only with --phase2_lr_schedule=restart (continue "
                                "keeps phase 1's one schedule over both phases)")
    v = phase2_values(o)
    for name, value in (("phase2_max_seq_length", o.phase2_max_seq_length),
                        ("phase2_max_predictions_per_seq", o.phase2_max_predictions_per_seq),
                        ("phase2_train_batch_size", v["phase2_train_batch_size"]),
                        ("phase2_num_train_steps", v["phase2_num_train_steps"])):
        if value <= 0:
            raise BertError(f"--{name}: must be > 0, got {value}")
    if v["phase2_num_warmup_steps"] < 0:
        raise BertError(f"--phase2_num_warmup_steps: must be >= 0, got "
                        f"{v['phase2_num_warmup_steps']}")
    if max_position_embeddings is not None and o.phase2_max_seq_length > max_position_embeddings:
        raise BertError(f"--phase2_max_seq_length: {o.phase2_max_seq_length} exceeds the "
                        f"config's max_position_embeddings {max_position_embeddings}")


def learning_rate_at(options, t):
    """The documented learning rate of the update at global step `t` (module docstring).

    Args:
        options: PretrainingOptions.
        t: global step, 0-based.
    """
    o = options
    lr, w1, n1 = o.learning_rate, o.num_warmup_steps, o.num_train_steps
    if not two_phases(o) or o.phase2_lr_schedule == "continue":
        total = total_steps(o)
        return lr * t / w1 if t < w1 else lr * (1 - min(t, total) / total)
    if t < n1:
        return lr * t / w1 if t < w1 else lr * (1 - t / n1)
    v = phase2_values(o)
    lr2, w2, n2 = (v["phase2_learning_rate"], v["phase2_num_warmup_steps"],
                   v["phase2_num_train_steps"])
    u = min(t - n1, n2)
    return lr2 * (u + 1) / w2 if u < w2 else lr2 * (1 - u / n2)


def recorded_values(options):
    """The phase flags a two-phase run's checkpoints record, as numbers (all 0 for one
    phase, whose checkpoints have no record)."""
    o = options
    if not two_phases(o):
        return {name: 0.0 for name in RECORDED}
    values = {name: getattr(o, name) for name in RECORDED}
    values.update(phase2_values(o))
    values["phase2_lr_schedule"] = SCHEDULES.index(o.phase2_lr_schedule)
    values["phase2_fresh_optimizer"] = int(bool(o.phase2_fresh_optimizer))
    return {k: float(v) for k, v in values.items()}


def mismatch(recorded, options, where):
    """The one-line error for resuming a checkpoint whose phase flags are not the options',
    or None when they agree.

    Args:
        recorded: `recorded_values` of the run that wrote the checkpoint ({}: a checkpoint
            without a record, of one phase).
        options: this run's PretrainingOptions.
        where: the checkpoint, as named in the message ("out (step 12)").
    """
    want = recorded_values(options)
    was_two = recorded.get("phase2_num_train_steps", 0) > 0
    if not was_two and not two_phases(options):
        return None  # one phase, as before: its flags may change on resume
    fix = "re-run with the flags that started it, or pass another --output_dir"
    if not was_two:
        return (f"--phase2_input_file: the checkpoint in {where} is of a one-phase run: {fix} "
                "(or start phase 2 from it with --init_checkpoint, the two-command way)")
    if not two_phases(options):
        return f"--phase2_input_file: the checkpoint in {where} is of a two-phase run: {fix}"
    for name in RECORDED:
        if recorded.get(name) != want[name]:
            shown = lambda v: (SCHEDULES[int(v)] if name == "phase2_lr_schedule"  # noqa: E731
                               else bool(v) if name == "phase2_fresh_optimizer"
                               else int(v) if float(v).is_integer() and "rate" not in name
                               else v)
            return (f"--{name}: {shown(want[name])}, but the checkpoint in {where} was written "
                    f"with {shown(recorded.get(name, float('nan')))}: {fix}")
    return None


def kind_mismatch(phase, packed, eval_packed, eval_pattern):
    """The one-line error for --do_eval files of the other record kind (packed or plain)
    than the phase's training files (the model's inputs follow those), or None.

    Args:
        phase: the Phase.
        packed: whether its training records are packed.
        eval_packed: whether its eval records are.
        eval_pattern: the eval files as given.
    """
    if bool(packed) == bool(eval_packed):
        return None
    kind = lambda p: "packed" if p else "ordinary (unpacked)"  # noqa: E731
    return (f"{phase.flag('eval_input_file')}={eval_pattern}: {kind(eval_packed)} records, but "
            f"{phase.flag('input_file')} holds {kind(packed)} ones: evaluate "
            f"{phase.label or 'the run'} on records of its training data's kind")


def latest_step(output_dir, checkpoint_name="model.ckpt"):
    """The step of the newest `<checkpoint_name>-<step>.index` in a local output_dir, or None
    (remote or none: the run's restore says where it resumes).

    Args:
        output_dir: the run's --output_dir.
        checkpoint_name: the checkpoints' file prefix."""
    from bert_tf.fileio import is_local
    if not output_dir or not is_local(output_dir) or not os.path.isdir(output_dir):
        return None
    own = re.compile(re.escape(checkpoint_name) + r"-(\d+)\.index$")
    steps = [int(m.group(1)) for m in map(own.match, os.listdir(output_dir)) if m]
    return max(steps) if steps else None


def where_line(options, step):
    """The pre-flight's phase line: the phases' steps and shapes, the schedule and where the
    run starts.

    Args:
        options: the run's PretrainingOptions (two phases).
        step: the latest checkpoint's step, or None."""
    o, (p1, p2) = options, phases(options)
    parts = [f"phase {p.number} = steps {p.start}-{p.end} on {p.flag('input_file')} at "
             f"{p.flag('max_seq_length')}={p.options.max_seq_length}, batch "
             f"{p.options.train_batch_size}" for p in (p1, p2)]
    if step is None:
        at = "starts in phase 1"
    elif step < p1.end:
        at = f"resumes in phase 1 at step {step}"
    elif step == p1.end:
        at = f"resumes at the boundary (step {step}): phase 2 next"
    else:
        at = f"resumes in phase 2 at step {step}"
    fresh = "fresh optimizer" if o.phase2_fresh_optimizer else "optimizer slots carried over"
    return (f"pre-flight: two phases: {'; '.join(parts)}; learning rate: "
            f"--phase2_lr_schedule={o.phase2_lr_schedule}, {fresh}; {at}")
