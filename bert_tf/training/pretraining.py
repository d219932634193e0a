"""The pre-training loop of run_pretraining.py: tf.distribute custom loop, checkpoints, eval, export.

One code path for every strategy (TPU, mirrored GPUs/CPUs, multi-worker, one device):

* `train_loop(iterator, steps)` is a tf.function that runs `steps` (= iterations_per_loop) steps,
  each `strategy.run(replica_step)` on the next distributed batch (the TPU host-loop pattern).
* Loss = masked-LM weighted mean over the real predictions, sum(w * ce) / (sum(w) + 1e-5), plus
  the NSP mean, both over the *global* batch: every replica divides its sums by the global weight
  sum (one all-reduce) and the global batch size, and the per-replica gradients are summed. So N
  replicas compute exactly the one-device loss and gradient of the same global batch.
* Gradient accumulation (k = grad_accum_steps): the per-replica batch is split into k
  micro-batches whose gradients are summed before one optimizer update; with the global
  normalisers above the sum is the full batch's gradient (up to dropout and float rounding).
* Gradients are summed over replicas here, before the optimizer, so that global-norm clipping
  (in bert_tf.training.optimization) and the float16 LossScaleOptimizer's finite check see the same
  global gradient on every replica.
* Checkpoints (tf.train.CheckpointManager, `model.ckpt-<step>` in output_dir) hold the model,
  the optimizer, `global_step`, the data seed and the dropout RNG states. A restart resumes from the latest one: the
  input pipeline is seeded and deterministic, and skips the batches consumed so far.
* Multi-worker (MultiWorkerMirroredStrategy, TF_CONFIG): the same loop; each worker reads its own
  share of the input files; every worker restores from output_dir (shared storage such as gs://),
  only the chief writes checkpoints, summaries, eval_results.txt and exports (the others save to
  a local temporary directory that is deleted, since saving may need every worker). A lost
  worker aborts the collectives and ends the job with one error line instead of hanging.
"""
import dataclasses
import logging
import os
import posixpath
import random
import re
import shutil
import tempfile
import time

import keras
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.modeling.config import BertConfig
from bert_tf.training.distribute import is_chief
from bert_tf.training.input_pipeline import list_files, pretraining_dataset
from bert_tf.modeling.models import BertPretrainer, build_model
from bert_tf.training.optimization import create_optimizer

log = logging.getLogger("bert_tf")

STAT_KEYS = ("loss", "mlm_loss_sum", "mlm_weight", "mlm_correct", "nsp_loss_sum", "nsp_correct",
             "examples")
EVAL_KEYS = ("global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
             "next_sentence_accuracy", "next_sentence_loss")
MODEL_INPUTS = ("input_word_ids", "input_mask", "input_type_ids", "masked_lm_positions")


@dataclasses.dataclass
class PretrainingOptions:
    """run_pretraining's knobs (flag names and the original's defaults)."""
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    train_batch_size: int = 32
    eval_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_steps: int = 100000
    num_warmup_steps: int = 10000
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    max_eval_steps: int = 100
    optimizer: str = "adamw_original"
    weight_decay_rate: float = 0.01
    grad_accum_steps: int = 1
    jit_compile: bool = False
    dynamic_masking: bool = False
    mask_id: int = 103  # [MASK] in Google's released vocabularies
    seed: int | None = None
    keep_checkpoint_max: int = 5
    init_checkpoint: str | None = None


def pretraining_losses(outputs, batch, mlm_weight_total, global_batch_size):
    """This replica's share of the global loss, and its metric sums.

    mlm_weight_total: sum of masked_lm_weights over the whole global batch (all replicas).
    Summing the returned `loss` over replicas gives
    sum(w * ce) / (sum(w) + 1e-5) + mean(nsp ce) of the global batch, as the original.
    """
    logits = tf.cast(outputs["mlm_logits"], tf.float32)
    labels = batch["masked_lm_ids"]
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    mlm_sum = tf.reduce_sum(weights * ce)
    nsp_logits = tf.cast(outputs["nsp_logits"], tf.float32)
    nsp_labels = batch["next_sentence_labels"]
    nsp_ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels, logits=nsp_logits)
    nsp_sum = tf.reduce_sum(nsp_ce)
    loss = mlm_sum / (tf.cast(mlm_weight_total, tf.float32) + 1e-5) \
        + nsp_sum / tf.cast(global_batch_size, tf.float32)
    mlm_hit = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
    nsp_hit = tf.cast(tf.equal(tf.argmax(nsp_logits, -1, output_type=tf.int32), nsp_labels),
                      tf.float32)
    stats = {"loss": loss, "mlm_loss_sum": mlm_sum, "mlm_weight": tf.reduce_sum(weights),
             "mlm_correct": tf.reduce_sum(weights * mlm_hit), "nsp_loss_sum": nsp_sum,
             "nsp_correct": tf.reduce_sum(nsp_hit),
             "examples": tf.cast(tf.shape(nsp_labels)[0], tf.float32)}
    return loss, stats


def _worker_failure(error):
    """The gist of a collective failure: which tasks stopped, else the abort reason."""
    text = str(getattr(error, "message", "") or error)
    if "unhealthy" in text or "heartbeat" in text:
        tasks = sorted(set(re.findall(r"/job:\w+/replica:\d+/task:\d+", text)))
        if tasks:
            return f"{', '.join(tasks)} stopped sending heartbeats"
    for line in text.splitlines():
        if "aborted by:" in line:
            return line.split("aborted by:", 1)[1].strip()[:300]
        if "Connection reset" in line or "Socket closed" in line:
            return line.strip()[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else type(error).__name__)[:300]


def summarize(totals, steps):
    """Metric sums of a loop (or an eval) -> the reported means."""
    w = max(totals["mlm_weight"], 1e-12)
    n = max(totals["examples"], 1e-12)
    return {"loss": totals["loss"] / max(steps, 1),
            "masked_lm_loss": totals["mlm_loss_sum"] / w,
            "masked_lm_accuracy": totals["mlm_correct"] / w,
            "next_sentence_loss": totals["nsp_loss_sum"] / n,
            "next_sentence_accuracy": totals["nsp_correct"] / n}


write_eval_results = fileio.write_eval_results


def _own_export_encoder(encoder, export_dir):
    """Encoder SavedModel: `__call__(ids dict)` and a `serving_default` signature taking int32
    input_word_ids/input_mask/input_type_ids [batch, seq] -> float32 pooled_output/sequence_output.
    Written to a temporary directory and renamed into place."""
    spec = tf.TensorSpec([None, None], tf.int32)

    class _EncoderModule(tf.Module):
        def __init__(self, enc):
            super().__init__()
            self.encoder = enc

        @tf.function(input_signature=[{n: spec for n in MODEL_INPUTS[:3]}])
        def __call__(self, inputs):
            out = self.encoder(inputs, training=False)
            return {"pooled_output": tf.cast(out["pooled_output"], tf.float32),
                    "sequence_output": tf.cast(out["sequence_output"], tf.float32)}

        @tf.function(input_signature=[spec, spec, spec])
        def serve(self, input_word_ids, input_mask, input_type_ids):
            return self.__call__({"input_word_ids": input_word_ids, "input_mask": input_mask,
                                  "input_type_ids": input_type_ids})

    module = _EncoderModule(encoder)
    export_dir = export_dir.rstrip("/")
    tmp = f"{export_dir}.tmp-{os.getpid()}"
    if tf.io.gfile.exists(tmp):
        tf.io.gfile.rmtree(tmp)
    tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
    if tf.io.gfile.exists(export_dir):
        tf.io.gfile.rmtree(export_dir)
    tf.io.gfile.rename(tmp, export_dir)
    return export_dir


def export_encoder(encoder, export_dir):
    """bert_tf.export.export_encoder when available, else a plain encoder SavedModel."""
    try:
        from bert_tf.export import export_encoder as _export
    except ImportError:
        _export = _own_export_encoder
    return _export(encoder, export_dir)


class PretrainingRunner:
    """Model, optimizer, checkpoints and the distributed train/eval loops for one output_dir."""

    def __init__(self, bert_config, output_dir, options=None, strategy=None):
        self.config = bert_config
        self.output_dir = output_dir
        self.options = o = options or PretrainingOptions()
        self.strategy = strategy or tf.distribute.get_strategy()
        n = self.strategy.num_replicas_in_sync
        self.is_chief = is_chief(self.strategy)
        self._check_options(n)
        self.per_replica_batch = o.train_batch_size // n
        self.per_replica_eval_batch = o.eval_batch_size // n
        if o.seed is not None:
            keras.utils.set_random_seed(o.seed)
        seed = o.seed if o.seed is not None else random.SystemRandom().randrange(1 << 31)
        policy = keras.mixed_precision.dtype_policy()
        self.loss_scaling = policy.name == "mixed_float16"
        with self.strategy.scope():
            self.model = build_model(BertPretrainer(bert_config))
            inner = create_optimizer(o.learning_rate, o.num_train_steps, o.num_warmup_steps,
                                     optimizer_type=o.optimizer,
                                     weight_decay_rate=o.weight_decay_rate)
            inner.gradients_aggregated = True  # replica_step sums them before apply()
            self.inner_optimizer = inner
            self.optimizer = (keras.optimizers.LossScaleOptimizer(inner) if self.loss_scaling
                              else inner)
            self.optimizer.build(self.model.trainable_variables)
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="global_step",
                                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.data_seed = tf.Variable(seed, dtype=tf.int64, trainable=False, name="data_seed",
                                         aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        tf.io.gfile.makedirs(output_dir)
        # Keras does not put its dropout RNG states in TF checkpoints; without them a resumed
        # run would draw other dropout masks than an uninterrupted one.
        rng_states = [v for v in self.model.non_trainable_variables
                      if "seed_generator" in v.path]
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                              global_step=self.global_step,
                                              data_seed=self.data_seed, dropout_rng=rng_states)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, output_dir, max_to_keep=o.keep_checkpoint_max,
            checkpoint_name="model.ckpt", step_counter=self.global_step)
        fb = self._forward_backward
        self._grad_fn = tf.function(fb, jit_compile=True) if o.jit_compile else fb
        self._train_loop_fn = None
        self._eval_step_fn = None

    # ---- setup ----------------------------------------------------------------------------

    def _check_options(self, n):
        o = self.options
        if o.train_batch_size <= 0 or o.train_batch_size % n:
            raise BertError(f"--train_batch_size: {o.train_batch_size} is not divisible by the "
                            f"{n} replicas")
        if o.eval_batch_size <= 0 or o.eval_batch_size % n:
            raise BertError(f"--eval_batch_size: {o.eval_batch_size} is not divisible by the "
                            f"{n} replicas")
        if o.grad_accum_steps < 1 or (o.train_batch_size // n) % o.grad_accum_steps:
            raise BertError(f"--grad_accum_steps: the per-replica batch {o.train_batch_size // n}"
                            f" is not divisible by {o.grad_accum_steps}")
        for name in ("iterations_per_loop", "save_checkpoints_steps", "num_train_steps",
                     "max_seq_length", "max_predictions_per_seq"):
            if getattr(o, name) <= 0:
                raise BertError(f"--{name}: must be > 0, got {getattr(o, name)}")
        if o.max_seq_length > self.config.max_position_embeddings:
            raise BertError(f"--max_seq_length: {o.max_seq_length} exceeds the config's "
                            f"max_position_embeddings {self.config.max_position_embeddings}")
        if o.dynamic_masking and not 0 <= o.mask_id < self.config.vocab_size:
            raise BertError(f"--mask_id: {o.mask_id} is not in the vocabulary "
                            f"(vocab_size {self.config.vocab_size})")

    def restore(self):
        """Resume from the latest checkpoint in output_dir, else load --init_checkpoint.

        Returns "resumed", "initialized" or "fresh".
        """
        latest = self.manager.latest_checkpoint
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            log.info("resumed from %s (step %d)", latest, int(self.global_step.numpy()))
            return "resumed"
        if self.options.init_checkpoint:
            from bert_tf.convert.checkpoints import load_checkpoint
            load_checkpoint(self.model, self.options.init_checkpoint)
            log.info("initialised from %s", self.options.init_checkpoint)
            return "initialized"
        return "fresh"

    def _dataset(self, input_file, is_training):
        o = self.options
        seed = int(self.data_seed.numpy())
        step = int(self.global_step.numpy())
        global_batch = o.train_batch_size if is_training else o.eval_batch_size
        list_files(input_file)  # fail early, with the flag's value

        def dataset_fn(ctx):
            per_pipeline_steps = ctx.num_replicas_in_sync // ctx.num_input_pipelines
            return pretraining_dataset(
                input_file, ctx.get_per_replica_batch_size(global_batch), o.max_seq_length,
                o.max_predictions_per_seq, is_training, input_context=ctx, seed=seed,
                dynamic_masking=o.dynamic_masking and is_training,
                vocab_size=self.config.vocab_size, mask_id=o.mask_id,
                skip_batches=step * per_pipeline_steps if is_training else 0)

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    # ---- the step ---------------------------------------------------------------------------

    def _forward_backward(self, batch, mlm_weight_total, global_batch_size):
        inputs = {k: batch[k] for k in MODEL_INPUTS}
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            outputs = self.model(inputs, training=True)
            loss, stats = pretraining_losses(outputs, batch, mlm_weight_total,
                                             global_batch_size)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        grads = [tf.convert_to_tensor(g) for g in grads]  # IndexedSlices -> dense (loop vars)
        return grads, stats

    def _replica_step(self, batch):
        ctx = tf.distribute.get_replica_context()
        n = ctx.num_replicas_in_sync
        weight_total = tf.reduce_sum(batch["masked_lm_weights"])
        if n > 1:
            weight_total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, weight_total)
        global_batch = self.per_replica_batch * n
        k = self.options.grad_accum_steps
        if k == 1:
            grads, stats = self._grad_fn(batch, weight_total, global_batch)
        else:
            micro = {name: tf.reshape(t, [k, t.shape[0] // k] + t.shape[1:])
                     for name, t in batch.items()}
            zeros_g = [tf.zeros(v.shape, v.dtype) for v in self.model.trainable_variables]
            zeros_s = {key: tf.zeros((), tf.float32) for key in STAT_KEYS}

            def body(i, acc_g, acc_s):
                g, s = self._grad_fn({name: t[i] for name, t in micro.items()}, weight_total,
                                     global_batch)
                return (i + 1, [a + b for a, b in zip(acc_g, g)],
                        {key: acc_s[key] + s[key] for key in STAT_KEYS})

            # One micro-batch at a time: running them in parallel would undo the memory saving.
            _, grads, stats = tf.while_loop(lambda i, *_: i < k, body,
                                            (tf.constant(0), zeros_g, zeros_s),
                                            parallel_iterations=1)
        if n > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        self.optimizer.apply(grads, self.model.trainable_variables)
        return stats

    def train_loop(self, iterator, steps):
        """Run `steps` training steps on `iterator` (distributed); returns the summed stats."""
        if self._train_loop_fn is None:
            strategy = self.strategy

            @tf.function(autograph=False)  # explicit while_loops; converting Keras code is slow
            def loop(iterator, steps):
                def body(i, totals):
                    stats = strategy.run(self._replica_step, args=(next(iterator),))
                    self.global_step.assign_add(1)
                    return i + 1, {key: totals[key] + strategy.reduce(
                        tf.distribute.ReduceOp.SUM, stats[key], axis=None) for key in STAT_KEYS}

                totals = {key: tf.zeros((), tf.float32) for key in STAT_KEYS}
                # Steps are sequential anyway (each reads the last one's weights); letting the
                # executor start later iterations early only contends for the cores.
                _, totals = tf.while_loop(lambda i, _: i < steps, body, (tf.constant(0), totals),
                                          parallel_iterations=1)
                return totals

            self._train_loop_fn = loop
        return self._train_loop_fn(iterator, tf.convert_to_tensor(steps, tf.int32))

    def save(self):
        """Checkpoint `model.ckpt-<step>` into output_dir (chief); returns its path or None."""
        step = int(self.global_step.numpy())
        if self.is_chief:
            return self.manager.save(checkpoint_number=step)
        tmp = tempfile.mkdtemp(prefix="bert_tf-worker-ckpt-")
        try:
            self.checkpoint.write(os.path.join(tmp, "model.ckpt"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return None

    def _run_loop(self, iterator, steps):
        try:
            return {k: float(v) for k, v in self.train_loop(iterator, steps).items()}
        except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                tf.errors.CancelledError, tf.errors.AbortedError) as e:
            if getattr(self.strategy.extended, "_num_workers", 1) <= 1:
                raise
            raise BertError(f"--strategy=multi_worker: lost contact with another worker at "
                            f"step {int(self.global_step.numpy())} ({_worker_failure(e)}); "
                            "restart all workers to resume from the latest checkpoint") from None

    def learning_rate(self):
        lr = self.inner_optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    # ---- train / eval / export ------------------------------------------------------------

    def train(self, input_file, until_step=None, writer=None):
        """Train to num_train_steps (or `until_step`); returns a list of per-loop metric dicts."""
        o = self.options
        target = min(o.num_train_steps, until_step or o.num_train_steps)
        step = int(self.global_step.numpy())
        if step >= target:
            return []
        iterator = iter(self._dataset(input_file, is_training=True))
        if writer is None:
            writer = (tf.summary.create_file_writer(self.output_dir) if self.is_chief
                      else tf.summary.create_noop_writer())
        history = []
        while step < target:
            n = min(o.iterations_per_loop, target - step,
                    o.save_checkpoints_steps - step % o.save_checkpoints_steps)
            start = time.perf_counter()
            totals = self._run_loop(iterator, n)
            elapsed = time.perf_counter() - start
            step = int(self.global_step.numpy())
            m = summarize(totals, n)
            m.update(step=step, learning_rate=self.learning_rate(),
                     examples_per_second=totals["examples"] / max(elapsed, 1e-9))
            if self.loss_scaling:
                m["loss_scale"] = float(self.optimizer.dynamic_scale.numpy())
            history.append(m)
            with writer.as_default(step=step):
                for key, value in m.items():
                    if key != "step":
                        tf.summary.scalar(key, value)
            log.info("step %d/%d loss=%.4f mlm_loss=%.4f mlm_acc=%.4f nsp_loss=%.4f "
                     "nsp_acc=%.4f lr=%.3g examples/s=%.1f", step, o.num_train_steps, m["loss"],
                     m["masked_lm_loss"], m["masked_lm_accuracy"], m["next_sentence_loss"],
                     m["next_sentence_accuracy"], m["learning_rate"], m["examples_per_second"])
            if step % o.save_checkpoints_steps == 0 or step == target:
                self.save()
        writer.flush()
        return history

    def evaluate(self, input_file, max_steps=None):
        """Evaluate up to max_eval_steps batches; writes output_dir/eval_results.txt."""
        max_steps = self.options.max_eval_steps if max_steps is None else max_steps
        strategy = self.strategy
        if self._eval_step_fn is None:
            global_batch = self.per_replica_eval_batch * strategy.num_replicas_in_sync

            def replica_eval(batch):
                ctx = tf.distribute.get_replica_context()
                w = tf.reduce_sum(batch["masked_lm_weights"])
                if ctx.num_replicas_in_sync > 1:
                    w = ctx.all_reduce(tf.distribute.ReduceOp.SUM, w)
                outputs = self.model({k: batch[k] for k in MODEL_INPUTS}, training=False)
                return pretraining_losses(outputs, batch, w, global_batch)[1]

            @tf.function
            def eval_step(batch):
                stats = strategy.run(replica_eval, args=(batch,))
                return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, stats[k], axis=None)
                        for k in STAT_KEYS}

            self._eval_step_fn = eval_step
        totals = {k: 0.0 for k in STAT_KEYS}
        steps = 0
        for batch in self._dataset(input_file, is_training=False):
            if steps >= max_steps:
                break
            for k, v in self._eval_step_fn(batch).items():
                totals[k] += float(v)
            steps += 1
        if steps == 0:
            raise BertError(f"--input_file={input_file}: fewer than --eval_batch_size="
                            f"{self.options.eval_batch_size} examples to evaluate")
        results = summarize(totals, steps)
        results["global_step"] = int(self.global_step.numpy())
        if not self.is_chief:
            return results
        write_eval_results(posixpath.join(self.output_dir, "eval_results.txt"), results)
        writer = tf.summary.create_file_writer(posixpath.join(self.output_dir, "eval"))
        with writer.as_default(step=results["global_step"]):
            for key in EVAL_KEYS[1:]:
                tf.summary.scalar(key, results[key])
        writer.flush()
        log.info("eval at step %d: %s", results["global_step"],
                 " ".join(f"{k}={results[k]:.4f}" for k in EVAL_KEYS[1:]))
        return results

    def export(self, export_dir=None):
        """Encoder SavedModel into export_dir (default output_dir/export); None on non-chiefs."""
        export_dir = export_dir or posixpath.join(self.output_dir, "export")
        if self.is_chief:
            return export_encoder(self.model.encoder, export_dir)
        tmp = tempfile.mkdtemp(prefix="bert_tf-worker-export-")
        try:
            export_encoder(self.model.encoder, os.path.join(tmp, "export"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return None


def run_pretraining(bert_config_file, input_file, output_dir, do_train=False, do_eval=False,
                    export_dir=None, strategy=None, options=None):
    """What run_pretraining.py does: train and/or evaluate; export the encoder after training.

    Without do_train/do_eval but with export_dir it is the separate export step: the latest
    checkpoint in output_dir (else --init_checkpoint) is exported to export_dir.
    Returns {"train": [per-loop metrics], "eval": results or None, "export_dir": path or None}.
    """
    if not bert_config_file:
        raise BertError("--bert_config_file: required")
    if not output_dir:
        raise BertError("--output_dir: required")
    if not do_train and not do_eval and not export_dir:
        raise BertError("--do_train/--do_eval/--export_dir: at least one must be set")
    if (do_train or do_eval) and not input_file:
        raise BertError("--input_file: required")
    config = BertConfig.from_json_file(bert_config_file)
    if do_train or do_eval:
        list_files(input_file)
    tf.io.gfile.makedirs(output_dir)
    runner = PretrainingRunner(config, output_dir, options, strategy)
    restored = runner.restore()
    out = {"train": [], "eval": None, "export_dir": None}
    if do_train:
        out["train"] = runner.train(input_file)
        out["export_dir"] = runner.export(export_dir)
    elif export_dir:
        if restored == "fresh":
            raise BertError(f"--output_dir={output_dir}: no checkpoint to export (and no "
                            "--init_checkpoint)")
        out["export_dir"] = runner.export(export_dir)
    if do_eval:
        out["eval"] = runner.evaluate(input_file)
    return out
