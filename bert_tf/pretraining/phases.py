"""Running the pre-training phases on the one trainer (the plan: bert_tf.pretraining.phase_plan).

One checkpoint stream: global steps count on across the boundary, and every checkpoint of a
two-phase run holds a `PhaseRecord` (under `phases`; one-phase checkpoints have none): which
phase its weights and optimizer are in, the global step the optimizer's own step count starts
from, and the phase flags of the run. A restart takes the record from the checkpoint, refuses
other phase flags when it trains (one line; eval- and export-only runs read what was trained
from the record instead), and continues where it was:
inside phase 1, at the boundary (the switch to phase 2 has not happened yet: it happens now, as
in an uninterrupted run), or inside phase 2. The learning rate is a function of the global step
(`PhaseSchedule`), so no restored optimizer step can put phase 2 past the end of a schedule.

At the switch the trainer gets phase 2's options (batch size; its data is read from its first
batch) and the task phase 2's lengths and record kind (packed or not, decided per phase);
--phase2_fresh_optimizer zeroes the optimizer's slots and step count, else they carry over.
"""
import json
import logging
import posixpath

import keras
import tensorflow as tf
from keras import ops

from bert_tf import BertError, fileio
from bert_tf.pretraining import phase_plan

log = logging.getLogger("bert_tf")


FLAGS_KEY = "phases/flags/.ATTRIBUTES/VARIABLE_VALUE"  # the record's flags in a checkpoint


class PhaseRecord(tf.Module):
    """What a two-phase run's checkpoints record of the phases (one-phase checkpoints have
    none, as before).

    Args:
        options: PretrainingOptions; its phase flags are recorded (`phase_plan.RECORDED`).
        strategy: the trainer's strategy: phase and optimizer_origin are int64 variables
            made under its scope as global_step is (the schedule reads optimizer_origin in the
            step); the flags are one string variable on the host CPU (TPUs hold no strings and
            no float64), read only when resuming.

    Attributes:
        phase: 1, or 2 once the run switched to phase 2.
        optimizer_origin: the global step the optimizer's step count started from (phase 2's
            first step after a fresh optimizer, else 0).
        flags: string variable, the phase flags as JSON ({name: number}).
    """

    def __init__(self, options, strategy):
        super().__init__(name="phases")
        first = tf.VariableAggregation.ONLY_FIRST_REPLICA
        with strategy.scope():
            self.phase = tf.Variable(1, dtype=tf.int64, trainable=False, name="phase",
                                     aggregation=first)
            self.optimizer_origin = tf.Variable(0, dtype=tf.int64, trainable=False,
                                                name="optimizer_origin", aggregation=first)
        with tf.device("/cpu:0"):
            self.flags = tf.Variable(
                json.dumps(phase_plan.recorded_values(options), sort_keys=True),
                dtype=tf.string, trainable=False, name="flags")


def read_record(prefix):
    """The phase record of checkpoint `prefix`: {"phase", "optimizer_origin", "flags"} (flags:
    {name: float}), or None for a checkpoint without one (one phase)."""
    if not prefix:
        return None
    reader = tf.train.load_checkpoint(prefix)
    if not reader.has_tensor(FLAGS_KEY):
        return None
    value = reader.get_tensor(FLAGS_KEY)
    flags = json.loads(value.decode() if isinstance(value, bytes) else value)
    return {"phase": int(reader.get_tensor("phases/phase/.ATTRIBUTES/VARIABLE_VALUE")),
            "optimizer_origin": int(reader.get_tensor(
                "phases/optimizer_origin/.ATTRIBUTES/VARIABLE_VALUE")),
            "flags": {k: float(v) for k, v in flags.items()}}


class PhaseSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """phase_plan's learning rate of the global step t = optimizer step + optimizer_origin.

    Not Keras-serializable (it reads the run's phase record's variable): checkpoints hold the
    optimizer's variables, never its config.

    Args:
        options: PretrainingOptions of a two-phase run.
        origin: int64 variable, the global step the optimizer's step count started from.
    """

    def __init__(self, options, origin=None):
        o = options
        self.origin = origin
        self.restart = o.phase2_lr_schedule == "restart"
        v = phase_plan.phase2_values(o)
        self.lr1, self.w1, self.n1 = float(o.learning_rate), int(o.num_warmup_steps), \
            int(o.num_train_steps)
        self.lr2, self.w2, self.n2 = float(v["phase2_learning_rate"]), \
            int(v["phase2_num_warmup_steps"]), int(v["phase2_num_train_steps"])

    @staticmethod
    def _warmup_decay(lr, t, warmup, total, first):
        # first: the warm-up's value at t = 0 is lr * first / warmup (0 or 1 step's worth).
        decay = lr * (1.0 - ops.minimum(t, float(total)) / float(total))
        if warmup <= 0:
            return decay
        return ops.where(t < float(warmup), lr * (t + first) / float(warmup), decay)

    def __call__(self, step):
        t = ops.cast(step, "float32")
        if self.origin is not None:
            t = t + ops.cast(self.origin, "float32")
        if not self.restart:
            return self._warmup_decay(self.lr1, t, self.w1, self.n1 + self.n2, 0.0)
        first = self._warmup_decay(self.lr1, t, self.w1, self.n1, 0.0)
        second = self._warmup_decay(self.lr2, t - float(self.n1), self.w2, self.n2, 1.0)
        return ops.where(t < float(self.n1), first, second)


def attach(trainer, options):
    """Build the trainer's optimizer; for two phases with the PhaseSchedule and a PhaseRecord
    in its checkpoints (before `restore()`).

    Args:
        trainer: a Trainer of the PretrainingTask (optimizer not built yet).
        options: PretrainingOptions.
    Returns:
        the PhaseRecord, or None for one phase (its checkpoints are as before).
    """
    if not phase_plan.two_phases(options):
        trainer.build_optimizer(options.num_train_steps, options.num_warmup_steps)
        return None
    record = PhaseRecord(options, trainer.strategy)
    trainer.checkpoints.add_optional("phases", record)
    trainer.build_optimizer(phase_plan.total_steps(options), options.num_warmup_steps,
                            schedule=PhaseSchedule(options, record.optimizer_origin))
    return record


def after_restore(trainer, options, restored, training):
    """Check a resumed checkpoint's phase record against the options; log where the run is.

    Only a run that trains must have the phase flags that wrote the checkpoint; an eval- or
    export-only run takes what was trained from the record (the export's length: the longest
    phase's).

    Args:
        trainer: the Trainer, just restored.
        options: PretrainingOptions.
        restored: `restore()`'s result.
        training: whether the run trains (--do_train).
    Raises:
        BertError: a training run's phase flags are not the checkpoint's (nothing written).
    """
    if restored != "resumed":
        return
    saved = read_record(trainer.checkpoints.restored_prefix)
    recorded = saved["flags"] if saved else {}
    if not training:
        if recorded.get("phase2_num_train_steps", 0) > 0:
            trainer.task.export_seq_length = int(max(recorded["max_seq_length"],
                                                     recorded["phase2_max_seq_length"]))
        return
    where = f"{options.output_dir} (step {trainer.step})"
    problem = phase_plan.mismatch(recorded, options, where)
    if problem:
        raise BertError(problem)
    if phase_plan.two_phases(options):
        log.info("resumed in phase %d at global step %d of %d (the checkpoint's phase record)",
                 saved["phase"], trainer.step, phase_plan.total_steps(options))


def enter(trainer, phase, record):
    """Make `phase` the trainer's current one: its options (batch size, data from its first
    step), the task's lengths and record kind; at the switch to phase 2 (the record still says
    1) the optimizer starts afresh if asked and the record says 2.

    Args:
        trainer: the Trainer of the PretrainingTask.
        phase: a phase_plan.Phase.
        record: the PhaseRecord (None: one phase).
    """
    trainer.task.set_phase(phase)
    trainer.new_stage(phase.options, phase.start)
    if record is not None and phase.number == 2 and int(record.phase.numpy()) == 1:
        if phase.options.phase2_fresh_optimizer:
            for v in trainer.inner_optimizer.variables:  # a fresh optimizer's: all zero
                v.assign(tf.zeros(v.shape, v.dtype))
            record.optimizer_origin.assign(phase.start)
        record.phase.assign(2)
        log.info("phase 2 from global step %d: --phase2_max_seq_length=%d, batch %d%s",
                 phase.start, phase.options.max_seq_length, phase.options.train_batch_size,
                 ", fresh optimizer" if phase.options.phase2_fresh_optimizer else "")


def run(trainer, record, options, do_train, do_eval):
    """Train and/or evaluate each phase from where the checkpoint is.

    A phase behind the checkpoint (the record says 2) is neither trained nor evaluated again;
    with --do_eval each phase is evaluated on its eval data at its end.

    Args:
        trainer: the restored Trainer of the PretrainingTask.
        record: its PhaseRecord (None: one phase).
        options: PretrainingOptions.
        do_train: train.
        do_eval: evaluate at the end of each phase.
    Returns:
        (per-loop training metrics, {phase number: eval results}).
    """
    plan = phase_plan.phases(options)
    history, evals = [], {}
    done = int(record.phase.numpy()) if record is not None else 1
    for phase in plan:
        if phase.number < done:
            continue
        enter(trainer, phase, record)
        if do_train:
            history += trainer.train(
                trainer.task.dataset_fn(phase.options.input_file, True,
                                        flag=phase.flag("input_file")),
                until_step=phase.end)
        if do_eval:
            evals[phase.number] = evaluate(trainer, phase)
    return history, evals


def evaluate(trainer, phase):
    """Evaluate on the phase's eval data; in a two-phase run eval_results.txt holds each
    phase's rows as `phase<N>/<key> = value` (the other phase's rows kept).

    Args:
        trainer: the Trainer.
        phase: the phase_plan.Phase.
    """
    o = phase.options
    flag = phase.flag("eval_input_file" if o.eval_input_file else "input_file")
    results = trainer.evaluate(
        trainer.task.dataset_fn(phase.eval_files, False, flag=flag), o.max_eval_steps,
        empty_error=f"{flag}={phase.eval_files}: fewer than --eval_batch_size="
                    f"{o.eval_batch_size} examples to evaluate",
        write_results=phase.of == 1)
    if phase.of > 1 and trainer.is_chief:
        write_phase_results(o.output_dir, phase.number, results)
    return results


def write_phase_results(output_dir, number, results, name="eval_results.txt"):
    """eval_results.txt with phase `number`'s rows replaced by `results` (atomically).

    Args:
        output_dir: the run's output_dir.
        number: the phase.
        results: its eval results.
        name: the file in output_dir.
    """
    path = posixpath.join(output_dir, name)
    rows = {}
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            for line in f.read().splitlines():
                key, sep, value = line.partition(" = ")
                if sep and key.startswith("phase") and not key.startswith(f"phase{number}/"):
                    rows[key] = value
    rows.update({f"phase{number}/{k}": v for k, v in results.items()})
    tf.io.gfile.makedirs(output_dir)
    return fileio.write_eval_results(path, rows)
