"""The one training loop of run_pretraining.py and the fine-tuning scripts.

A `Task` supplies the model, its loss and metrics, and what to export; the `Trainer` does the
rest, the same way for every task (Model Garden's task/trainer split, kept small):

* One code path for every strategy (TPU, mirrored GPUs/CPUs, multi-worker, one device):
  `train_loop(iterator, steps)` is a tf.function running `steps` steps, each
  `strategy.run(replica_step)` on the next distributed batch (the TPU host-loop pattern): on
  TPUs `iterations_per_loop` steps, elsewhere at most a tenth of the run, so that the log
  shows a curve (bert_tf.training.reporting).
* Global-batch normalisation: the task's normalisers (e.g. the masked-LM weight sum) are summed
  over replicas before the loss divides by them, and the per-replica gradients are summed, so N
  replicas compute exactly the one-device loss and gradient of the same global batch. The sum
  happens before the optimizer, so global-norm clipping and the float16 LossScaleOptimizer's
  finite check see the same global gradient on every replica.
* Gradient accumulation (k = grad_accum_steps): the replica batch is split into k micro-batches
  whose gradients are summed (with the whole batch's normalisers) before one update.
* Variables without a gradient (the pooler of span/tagging models) are left out of the update.
* jit_compile: XLA compiles the whole replica step (the forward/backward pass only when
  replicas all-reduce across devices outside TPUs); `Trainer.xla_compiles` says which.
* Checkpoints (bert_tf.training.checkpointing) hold the model, optimizer, global step, data
  seed and dropout RNG states; a restart resumes from the latest and the seeded input skips
  the batches consumed so far. Without one, `init_checkpoint` initialises the model.
* Datasets are built before anything is written, so bad input leaves no output behind.
* Evaluation sums the task's stats over replicas and batches (bert_tf.training.evaluation).
* Multi-worker: only the chief writes checkpoints, summaries, results and exports; the others
  save to a deleted temporary directory (saving may need every worker). A lost worker ends the
  job with one error line.
* SIGTERM/SIGINT while training: the step in flight ends the loop (on every worker), its
  checkpoint is saved and the process exits with 75 (bert_tf.training.preemption).
"""
import collections
import logging
import os
import posixpath
import random
import time

import keras
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.training import checkpointing, distribute, evaluation, preemption, reporting
from bert_tf.training.optimization import create_optimizer
from bert_tf.training.options import check_mixed_precision
from bert_tf.training.task import INPUT_NAMES, Task  # noqa: F401  (API)

log = logging.getLogger("bert_tf")


class Trainer:
    """Strategy, model, optimizer, checkpoints and the distributed train/eval/predict loops.

    Args:
        task: a `Task`.
        options: `bert_tf.training.options.TrainerOptions` (or a subclass).
        strategy: a tf.distribute.Strategy; default: from options (strategy, use_tpu, ...).
        init_source: the `Source` the command read for options.init_checkpoint (loaded
            from, not read again; `bert_tf.convert.handoff`), or None.

    Attributes:
        step_shapes: collections.Counter of training steps per batch length (axis 1 of the
            first model input): the shapes a run compiled its step for.
        checkpoints: the `checkpointing.Checkpoints` of output_dir (its `manager()` too);
            `restore()` and `save()` delegate to it.
        xla_compiles: what `jit_compile` makes XLA compile: "replica_step" (one device or a
            TPU), "forward_backward" (several devices: the all-reduce stays outside) or None
            (jit_compile off; a TPU compiles its step anyway). Set when the trainer is made.
    """

    def __init__(self, task, options, strategy=None, init_source=None):
        self.task, self.options = task, options
        o = options
        check_mixed_precision(o.mixed_precision)  # before a strategy (a TPU) is made
        self.strategy = strategy or distribute.strategy_from_options(o)
        distribute.set_mixed_precision(o.mixed_precision, self.strategy)  # auto: its devices
        n = self.strategy.num_replicas_in_sync
        self.is_chief = distribute.is_chief(self.strategy)
        devices = getattr(self.strategy.extended, "worker_devices", ())
        if any("CPU" not in d.upper() for d in devices):  # GPUs/TPUs: say which (C++ logs don't)
            log.info("training on %s", ", ".join(devices))
        o.check(n)
        task.check(o, n)
        if o.seed is not None:
            keras.utils.set_random_seed(o.seed)
        seed = o.seed if o.seed is not None else random.SystemRandom().randrange(1 << 31)
        self.loss_scaling = keras.mixed_precision.dtype_policy().name == "mixed_float16"
        with self.strategy.scope():
            self.model = task.build_model()
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="global_step",
                                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.data_seed = tf.Variable(seed, dtype=tf.int64, trainable=False, name="data_seed",
                                         aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.optimizer = self.inner_optimizer = None
        self.num_train_steps = None
        self.checkpoints = checkpointing.Checkpoints(options, task.checkpoint_name, self.strategy,
                                                     self.model, self.global_step, self.data_seed,
                                                     init_source=init_source)
        self._train_loop_fn = self._eval_step_fn = None
        self.data_start_step = 0  # global step of the training data's first batch
        # Steps per batch length = the shapes XLA/TPUs compile the step for.
        self.step_shapes = collections.Counter()
        self._stop = preemption.StopFlag()
        self._grad_fn = self._forward_backward
        self._step_fn = self._replica_step
        # What jit_compile makes XLA compile (public: benchmarks and users check it took).
        self.xla_compiles = None
        if o.jit_compile and (n == 1 or distribute.is_tpu(self.strategy)):
            self._step_fn = tf.function(self._replica_step, jit_compile=True, autograph=False)
            self.xla_compiles = "replica_step"
            log.info("--jit_compile: XLA compiles each replica's whole step")
        elif o.jit_compile:  # cross-device all-reduces stay outside XLA
            self._grad_fn = tf.function(self._forward_backward, jit_compile=True,
                                        autograph=False)
            self.xla_compiles = "forward_backward"
            log.info("--jit_compile: XLA compiles each replica's forward and backward pass "
                     "(the all-reduce and the update stay outside)")

    @property
    def step(self):
        """The global step as a Python int."""
        return int(self.global_step.numpy())

    # ---- optimizer and checkpoints (bert_tf.training.checkpointing) -----------------------

    def build_optimizer(self, num_train_steps, num_warmup_steps, schedule=None):
        """Create the optimizer and its schedule (before `restore()` to resume its state).

        Args:
            num_train_steps: updates until the learning rate reaches 0.
            num_warmup_steps: updates of linear warm-up.
            schedule: a LearningRateSchedule instead of the warm-up + linear decay.
        """
        o = self.options
        with self.strategy.scope():
            inner = create_optimizer(o.learning_rate, num_train_steps, num_warmup_steps,
                                     optimizer_type=o.optimizer,
                                     weight_decay_rate=o.weight_decay_rate, schedule=schedule)
            inner.gradients_aggregated = True  # replica_step sums them before apply()
            self.inner_optimizer = inner
            self.optimizer = (keras.optimizers.LossScaleOptimizer(inner) if self.loss_scaling
                              else inner)
            self.optimizer.build(self.model.trainable_variables)
        self.num_train_steps = int(num_train_steps)
        self.checkpoints.set_optimizer(self.optimizer)
        self._train_loop_fn = None

    def restore(self, inference=False):
        """`Checkpoints.restore`: resume from output_dir, else load init_checkpoint; returns
        "resumed", "initialized" or "fresh"."""
        return self.checkpoints.restore(inference)

    def save(self):
        """Checkpoint `<checkpoint_name>-<step>` into output_dir (chief); its path or None."""
        return self.checkpoints.save()

    def new_stage(self, options, data_start_step):
        """Train on with other options; model, optimizer and checkpoints stay, the compiled
        loops are traced again (what XLA compiles stays as made: `xla_compiles`).

        Args:
            options: the stage's TrainerOptions (a pre-training phase's batch, ...).
            data_start_step: the global step of the stage's first batch (a resume skips this
                stage's batches only)."""
        self.options = options
        self.data_start_step = int(data_start_step)
        self._train_loop_fn = self._eval_step_fn = None

    # ---- data -----------------------------------------------------------------------------

    def distribute(self, dataset_fn, training):
        """strategy.distribute_datasets_from_function over the task's dataset.

        Args:
            dataset_fn: `(input_context, per_replica_batch, seed, skip_batches)` -> a
                tf.data.Dataset of per-replica batches (static shapes for TPUs).
            training: use train_batch_size and skip the batches consumed so far (resume);
                else eval_batch_size, from the start.
        """
        o = self.options
        seed, step = int(self.data_seed.numpy()), self.step
        global_batch = o.train_batch_size if training else o.eval_batch_size

        def fn(ctx):
            per_pipeline_steps = ctx.num_replicas_in_sync // ctx.num_input_pipelines
            return dataset_fn(ctx, ctx.get_per_replica_batch_size(global_batch), seed,
                              (step - self.data_start_step) * per_pipeline_steps
                              if training else 0)

        return self.strategy.distribute_datasets_from_function(fn)

    # ---- the step -------------------------------------------------------------------------

    def _forward_backward(self, batch, normalizers):
        inputs = {k: batch[k] for k in self.task.model_inputs}
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            outputs = self.task.forward(self.model, inputs, training=True)
            loss, stats = self.task.loss(batch, outputs, normalizers)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        # IndexedSlices -> dense (loop variables); None: no gradient (left out of the update).
        return [None if g is None else tf.convert_to_tensor(g) for g in grads], stats

    def replica_step(self, batch):
        """One optimizer update on this replica's batch; returns its stats (call in
        strategy.run)."""
        return self._step_fn(batch)

    def _replica_step(self, batch):
        ctx = tf.distribute.get_replica_context()
        n = ctx.num_replicas_in_sync
        norms = self.task.normalizers(batch)
        if n > 1 and norms:
            norms = ctx.all_reduce(tf.distribute.ReduceOp.SUM, norms)
        variables = self.model.trainable_variables
        k = self.options.grad_accum_steps
        if k == 1:
            grads, stats = self._grad_fn(batch, norms)
            missing = {i for i, g in enumerate(grads) if g is None}
        else:
            # A cut batch's length is dynamic: the micro-batch shape keeps it as a tensor.
            micro = {name: tf.reshape(t, tf.concat([[k, t.shape[0] // k], tf.shape(t)[1:]], 0))
                     for name, t in batch.items()}
            missing = set()

            def body(i, acc_g, acc_s):
                g, s = self._grad_fn({name: t[i] for name, t in micro.items()}, norms)
                missing.update(j for j, x in enumerate(g) if x is None)
                g = [tf.zeros(v.shape, v.dtype) if x is None else x for x, v in zip(g, variables)]
                return (i + 1, [a + b for a, b in zip(acc_g, g)],
                        {key: acc_s[key] + s[key] for key in self.task.stat_keys})

            zeros_g = [tf.zeros(v.shape, v.dtype) for v in variables]
            zeros_s = {key: tf.zeros((), tf.float32) for key in self.task.stat_keys}
            # One micro-batch at a time: running them in parallel would undo the memory saving.
            _, grads, stats = tf.while_loop(lambda i, *_: i < k, body,
                                            (tf.constant(0), zeros_g, zeros_s),
                                            parallel_iterations=1)
        grads = [g for i, g in enumerate(grads) if i not in missing]
        variables = [v for i, v in enumerate(variables) if i not in missing]
        if n > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        self.optimizer.apply(grads, variables)
        return stats

    def train_loop(self, iterator, steps):
        """Run `steps` training steps; returns the stats summed over replicas and steps.

        Args:
            iterator: over `distribute(dataset_fn, training=True)`.
            steps: number of steps (one traced loop serves every count; fewer on preemption).
        """
        return self._loop(iterator, steps)[0]

    def _loop(self, iterator, steps):
        # -> (totals, stopped): stopped = a preemption signal ended the loop (on every worker).
        if self._train_loop_fn is None:
            strategy, keys, stop = self.strategy, self.task.stat_keys, self._stop
            first_input = self.task.model_inputs[0]

            @tf.function(autograph=False)  # explicit while_loops; converting Keras code is slow
            def loop(iterator, steps):
                def body(i, totals, _, lengths):
                    batch = next(iterator)
                    local = strategy.experimental_local_results(batch)[0][first_input]
                    lengths = lengths.write(i, tf.shape(local)[1])
                    stats = strategy.run(self.replica_step, args=(batch,))
                    with tf.control_dependencies([self.global_step.assign_add(1)]):
                        stopped = stop.requested(strategy)  # polled after each step
                    return i + 1, {key: totals[key] + strategy.reduce(
                        tf.distribute.ReduceOp.SUM, stats[key], axis=None) for key in keys}, \
                        stopped, lengths

                totals = {key: tf.zeros((), tf.float32) for key in keys}
                lengths = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[])
                # Steps are sequential anyway (each reads the last one's weights); letting the
                # executor start later iterations early only contends for the cores.
                _, totals, stopped, lengths = tf.while_loop(
                    lambda i, _, stopped, __: tf.logical_and(i < steps, tf.logical_not(stopped)),
                    body, (tf.constant(0), totals, stop.requested(strategy), lengths),
                    parallel_iterations=1)
                return totals, stopped, lengths.stack()

            self._train_loop_fn = loop
        totals, stopped, lengths = self._train_loop_fn(iterator, tf.constant(steps, tf.int32))
        self.step_shapes.update(int(x) for x in lengths.numpy())
        return totals, stopped

    def _run_loop(self, iterator, steps):
        try:
            totals, stopped = self._loop(iterator, steps)
            return {k: float(v) for k, v in totals.items()}, bool(stopped)
        except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                tf.errors.CancelledError, tf.errors.AbortedError) as e:
            if getattr(self.strategy.extended, "_num_workers", 1) <= 1:
                raise
            raise BertError(f"--strategy=multi_worker: lost contact with another worker at "
                            f"step {self.step} ({distribute.worker_failure(e)}); "
                            "restart all workers to resume from the latest checkpoint") from None
        except tf.errors.OpError as e:  # a bad record: the task's one-line error
            raise self.task.explain_data_error(e) or e from None

    def learning_rate(self):
        """The optimizer's current learning rate as a Python float."""
        lr = self.inner_optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    # ---- train / eval ---------------------------------------------------------------------

    def train(self, dataset_fn, until_step=None):
        """Train to num_train_steps (or `until_step`); returns a list of per-loop metrics.

        Args:
            dataset_fn: see `distribute()`.
            until_step: stop at this global step instead.
        """
        o = self.options
        if self.optimizer is None:
            raise BertError("build_optimizer() first")
        target = min(self.num_train_steps, until_step or self.num_train_steps)
        step = self.step
        if step >= target:
            log.info("checkpoint at step %d >= %d: nothing to train", step, target)
            return []
        iterator = iter(self.distribute(dataset_fn, training=True))  # input errors come first
        loop = reporting.loop_steps(o.iterations_per_loop, self.num_train_steps,
                                    distribute.is_tpu(self.strategy))
        report, history = reporting.Report(self, step), []
        with preemption.watch(self._stop) as stop:
            try:
                while step < target:
                    n = min(loop, target - step,
                            o.save_checkpoints_steps - step % o.save_checkpoints_steps)
                    start = time.perf_counter()
                    totals, stopped = self._run_loop(iterator, n)
                    elapsed = time.perf_counter() - start
                    n, step = self.step - step, self.step  # fewer than asked when stopped
                    if n:
                        history.append(report.loop(totals, n, elapsed))
                    if stopped or step % o.save_checkpoints_steps == 0 or step == target:
                        self.save()
                    if stopped:
                        raise preemption.preempted(step)
                if stop.signals:  # came after the last step, whose checkpoint is saved
                    raise preemption.preempted(step)
            finally:
                report.close()
        return history

    def evaluate(self, dataset_fn, max_steps, empty_error="no examples to evaluate",
                 write_results=True):
        """Mean metrics over up to `max_steps` eval batches; the chief writes
        output_dir/eval_results.txt and eval summaries.

        Args:
            dataset_fn: see `distribute()`.
            max_steps: batches to evaluate at most.
            empty_error: BertError message when there is not a single full batch.
            write_results: write eval_results.txt (False: the caller writes the results).
        """
        task, n = self.task, self.strategy.num_replicas_in_sync
        if self.options.eval_batch_size <= 0 or self.options.eval_batch_size % n:
            raise BertError(f"--eval_batch_size: {self.options.eval_batch_size} is not "
                            f"divisible by the {n} replicas")
        if self._eval_step_fn is None:
            self._eval_step_fn = evaluation.eval_step_fn(self.strategy, self.model, task)
        results = evaluation.run_eval(
            self._eval_step_fn, lambda: self.distribute(dataset_fn, training=False), task,
            max_steps, empty_error)
        results["global_step"] = self.step
        if self.is_chief:
            evaluation.record(self, results, write_results)
        return results

    def write_results(self, results, name="eval_results.txt"):
        """`key = value` lines (sorted) to output_dir/name, atomically; returns the path.

        Args:
            results: dict of metric name -> number.
            name: file name in output_dir.
        """
        tf.io.gfile.makedirs(self.options.output_dir)
        path = posixpath.join(self.options.output_dir, name)
        fileio.write_eval_results(path, results)
        return path

    def export(self, export_dir=None):
        """task.export of the model; the path written, None on non-chiefs.

        Args:
            export_dir: default options.export_dir, else output_dir/export.
        """
        export_dir = export_dir or self.options.export_dir or posixpath.join(
            self.options.output_dir, "export")
        if self.is_chief:
            return self.task.export(self.model, export_dir)
        with distribute.scratch_dir("bert_tf-worker-export-") as tmp:
            self.task.export(self.model, os.path.join(tmp, "export"))
        return None
