"""The fine-tuning loop shared by run_classifier / run_squad / run_ner.

`Finetuner` builds a task model under a tf.distribute strategy (mixed precision optional),
initialises it from `--init_checkpoint` (original TF1 or ours, via bert_tf.convert.checkpoints),
trains on in-memory feature arrays with a tf.function loop of several steps per call, writes
resumable checkpoints to the output directory (`ckpt-<step>`), predicts, and exports an
end-to-end text-in SavedModel through bert_tf.export.

Feature arrays are dicts of NumPy arrays with a leading example axis: the encoder inputs
(`input_word_ids`, `input_mask`, `input_type_ids`) plus the task's label arrays.
"""
import dataclasses
import logging
import math

import numpy as np

from bert_tf import BertError, fileio

log = logging.getLogger("bert_tf.tasks")

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
CHECKPOINT_NAME = "ckpt"
MAX_STEPS_PER_LOOP = 50  # progress/loss refresh at least this often


@dataclasses.dataclass
class RunConfig:
    """Settings every task shares (the scripts' common flags)."""
    output_dir: str
    init_checkpoint: str = None
    max_seq_length: int = 128
    learning_rate: float = 5e-5
    train_batch_size: int = 32
    eval_batch_size: int = 8
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    optimizer: str = "adamw_original"
    weight_decay_rate: float = 0.01
    strategy: str = None  # None: "tpu" with use_tpu, else "auto"
    mixed_precision: str = "none"
    use_tpu: bool = False
    tpu_name: str = None
    tpu_zone: str = None
    gcp_project: str = None
    master: str = None
    seed: int = None
    num_train_steps: int = None  # None: from epochs and the number of training examples
    progress: bool = True

    def train_steps(self, num_examples):
        if self.num_train_steps is not None:
            steps = int(self.num_train_steps)
        else:
            steps = int(num_examples / self.train_batch_size * self.num_train_epochs)
        if steps <= 0:
            raise BertError(f"--num_train_epochs: {num_examples} training examples at batch "
                            f"{self.train_batch_size} x {self.num_train_epochs} epochs is 0 steps")
        return steps, int(steps * self.warmup_proportion)


# Flags that must be > 0 wherever a config has them (checked before any work starts).
POSITIVE_FLAGS = ("max_seq_length", "train_batch_size", "eval_batch_size", "predict_batch_size",
                  "batch_size", "learning_rate", "doc_stride", "max_query_length", "n_best_size",
                  "max_answer_length", "num_train_steps")


def check_flags(cfg):
    """One-line BertErrors for out-of-range numeric flags."""
    for name in POSITIVE_FLAGS:
        value = getattr(cfg, name, None)
        if value is not None and not value > 0:
            raise BertError(f"--{name}: must be > 0, got {value}")
    if hasattr(cfg, "warmup_proportion") and not 0.0 <= cfg.warmup_proportion <= 1.0:
        raise BertError(f"--warmup_proportion: must be in [0, 1], got {cfg.warmup_proportion}")


def config_from(obj, cls=RunConfig, **overrides):
    """A dataclass `cls` filled from attributes of `obj` (absl FLAGS or a namespace)."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif hasattr(obj, f.name):
            values[f.name] = getattr(obj, f.name)
    return cls(**values)


# --- losses: (sum over the replica's examples, normaliser); the loop divides the summed
# losses by the normaliser summed over replicas, so N replicas give the one-device loss.

def classification_loss(batch, outputs):
    import tensorflow as tf
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        tf.cast(batch["label_ids"], tf.int32), outputs["logits"])
    return tf.reduce_sum(ce), tf.cast(tf.size(ce), tf.float32)


def regression_loss(batch, outputs):
    import tensorflow as tf
    se = tf.square(outputs["logits"][:, 0] - tf.cast(batch["label_ids"], tf.float32))
    return tf.reduce_sum(se), tf.cast(tf.size(se), tf.float32)


def span_loss(batch, outputs):
    import tensorflow as tf
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits
    start = ce(tf.cast(batch["start_positions"], tf.int32), outputs["start_logits"])
    end = ce(tf.cast(batch["end_positions"], tf.int32), outputs["end_logits"])
    return tf.reduce_sum((start + end) / 2.0), tf.cast(tf.size(start), tf.float32)


def tagging_loss(batch, outputs):
    """Mean over the labelled (first-piece) positions only."""
    import tensorflow as tf
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        tf.cast(batch["label_ids"], tf.int32), outputs["logits"])
    w = tf.cast(batch["label_weights"], tf.float32)
    return tf.reduce_sum(ce * w), tf.reduce_sum(w)


# --- helpers around the concurrently built modules ------------------------------------------

def _get_strategy(cfg):
    from bert_tf.training import distribute
    if cfg.use_tpu and cfg.strategy not in (None, "tpu"):
        raise BertError(f"--use_tpu: conflicts with --strategy={cfg.strategy}")
    name = "tpu" if cfg.use_tpu else (cfg.strategy or "auto")
    return distribute.get_strategy(name, tpu_name=cfg.tpu_name or cfg.master,
                                   tpu_zone=cfg.tpu_zone, gcp_project=cfg.gcp_project)


def _create_optimizer(cfg, num_train_steps, num_warmup_steps):
    from bert_tf.training import optimization
    return optimization.create_optimizer(cfg.learning_rate, num_train_steps, num_warmup_steps,
                                         optimizer_type=cfg.optimizer,
                                         weight_decay_rate=cfg.weight_decay_rate)


def make_dataset(features, batch_size, training=False, seed=None):
    """tf.data over in-memory arrays; training: shuffled, repeated, full batches only."""
    import tensorflow as tf
    n = len(next(iter(features.values())))
    ds = tf.data.Dataset.from_tensor_slices(features)
    if training:
        ds = ds.shuffle(min(n, 100_000), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=training)
    return ds.prefetch(tf.data.AUTOTUNE)


class Finetuner:
    """One task model under a strategy: init, train, checkpoint, predict, export."""

    def __init__(self, model_fn, loss_fn, cfg):
        import keras
        import tensorflow as tf
        from bert_tf.modeling.models import build_model
        self.cfg = cfg
        self.loss_fn = loss_fn
        if cfg.seed is not None:
            keras.utils.set_random_seed(cfg.seed)
        from bert_tf.training import distribute
        distribute.set_mixed_precision(cfg.mixed_precision)
        self.strategy = _get_strategy(cfg)
        with self.strategy.scope():
            self.model = model_fn()
            build_model(self.model, seq=min(8, cfg.max_seq_length))
        self.optimizer = None
        self.restored_from = None
        self._predict_steps = {}  # output keys -> traced step (eval and predict share it)
        tf.io.gfile.makedirs(cfg.output_dir)

    # -- weights --------------------------------------------------------------------------
    def latest_checkpoint(self):
        import tensorflow as tf
        return tf.train.latest_checkpoint(self.cfg.output_dir)

    def _checkpoint(self):
        import tensorflow as tf
        objects = {"model": self.model}
        if self.optimizer is not None:
            objects["optimizer"] = self.optimizer
        return tf.train.Checkpoint(**objects)

    def restore(self, inference=False):
        """Our latest checkpoint in output_dir, else --init_checkpoint; returns the source.

        inference: warn when neither exists (eval/predict would use random weights).
        """
        latest = self.latest_checkpoint()
        if latest:
            status = self._checkpoint().restore(latest)
            status.expect_partial()
            status.assert_existing_objects_matched()
            self.restored_from = latest
        elif self.cfg.init_checkpoint:
            from bert_tf.convert import checkpoints
            with self.strategy.scope():
                checkpoints.load_checkpoint(self.model, self.cfg.init_checkpoint)
            self.restored_from = self.cfg.init_checkpoint
        elif inference:
            log.warning("no checkpoint in %s and no --init_checkpoint: predicting with random "
                        "weights", self.cfg.output_dir)
        return self.restored_from

    # -- training -------------------------------------------------------------------------
    def train(self, features, num_train_steps, num_warmup_steps):
        """Train to `num_train_steps` (resuming from output_dir); returns the mean final loss."""
        import keras
        import tensorflow as tf
        cfg = self.cfg
        with self.strategy.scope():
            inner = _create_optimizer(cfg, num_train_steps, num_warmup_steps)
            # The step sums gradients over replicas itself, so clipping and the float16
            # finite check see the global gradient on every replica.
            inner.gradients_aggregated = True
            self.optimizer = (keras.optimizers.LossScaleOptimizer(inner)
                              if keras.mixed_precision.dtype_policy().name == "mixed_float16"
                              else inner)
            self.optimizer.build(self.model.trainable_variables)
        self.restore()
        ckpt = self._checkpoint()
        manager = tf.train.CheckpointManager(ckpt, cfg.output_dir, max_to_keep=3,
                                             checkpoint_name=CHECKPOINT_NAME)
        replicas = self.strategy.num_replicas_in_sync
        if cfg.train_batch_size <= 0 or cfg.train_batch_size % replicas:
            raise BertError(f"--train_batch_size: {cfg.train_batch_size} is not divisible by "
                            f"the {replicas} replicas")
        step = int(self.optimizer.iterations.numpy())
        if step >= num_train_steps:
            log.info("checkpoint at step %d >= num_train_steps %d: nothing to train",
                     step, num_train_steps)
            return None
        ds = make_dataset(features, cfg.train_batch_size, training=True, seed=cfg.seed)
        iterator = iter(self.strategy.experimental_distribute_dataset(ds))
        loop = self._train_loop()
        from tqdm.auto import tqdm
        bar = tqdm(total=num_train_steps, initial=step, desc="train", unit="step",
                   disable=not cfg.progress, dynamic_ncols=True)
        save_every = max(int(cfg.save_checkpoints_steps or num_train_steps), 1)
        per_loop = max(1, min(int(cfg.iterations_per_loop or 1), MAX_STEPS_PER_LOOP))
        loss = None
        try:
            while step < num_train_steps:
                next_save = (step // save_every + 1) * save_every
                n = min(per_loop, num_train_steps - step, next_save - step)
                loss = float(loop(iterator, tf.constant(n, tf.int32)))
                if not math.isfinite(loss):
                    raise BertError(f"training diverged at step {step + n}: loss {loss} "
                                    "(lower --learning_rate?)")
                step += n
                bar.update(n)
                bar.set_postfix(loss=f"{loss:.4f}")
                if step % save_every == 0 or step == num_train_steps:
                    manager.save(checkpoint_number=step)
        finally:
            bar.close()
        log.info("trained to step %d, loss %.4f", step, loss)
        return loss

    def _train_loop(self):
        import tensorflow as tf
        strategy, model, optimizer, loss_fn = (self.strategy, self.model, self.optimizer,
                                               self.loss_fn)

        def step_fn(batch):
            ctx = tf.distribute.get_replica_context()
            inputs = {k: batch[k] for k in INPUT_NAMES}
            variables = model.trainable_variables
            with tf.GradientTape() as tape:
                outputs = model(inputs, training=True)
                loss_sum, weight = loss_fn(batch, outputs)
                if ctx.num_replicas_in_sync > 1:
                    weight = ctx.all_reduce(tf.distribute.ReduceOp.SUM, weight)
                loss = loss_sum / tf.maximum(weight, 1.0)
                scaled = optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, variables)
            # The pooler gets no gradient in span/tagging models: leave it out.
            pairs = [(tf.convert_to_tensor(g), v) for g, v in zip(grads, variables)
                     if g is not None]
            grads = [g for g, _ in pairs]
            if ctx.num_replicas_in_sync > 1:
                grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            optimizer.apply(grads, [v for _, v in pairs])
            return loss

        @tf.function
        def loop(iterator, steps):
            total = tf.constant(0.0)
            for _ in tf.range(steps):
                per_replica = strategy.run(step_fn, args=(next(iterator),))
                total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            return total / tf.cast(steps, tf.float32)

        return loop

    @property
    def global_step(self):
        if self.optimizer is not None:
            return int(self.optimizer.iterations.numpy())
        latest = self.latest_checkpoint()
        return int(latest.rsplit("-", 1)[-1]) if latest else 0

    # -- prediction -----------------------------------------------------------------------
    def predict(self, features, batch_size, output_keys, desc="predict"):
        """Model outputs (float32 NumPy) for every example, in order."""
        results = {k: [] for k in output_keys}
        for out in self.predict_batches(features, batch_size, output_keys, desc):
            for k in output_keys:
                results[k].append(out[k])
        return {k: np.concatenate(v, axis=0) if v else np.zeros((0,), np.float32)
                for k, v in results.items()}

    def predict_batches(self, features, batch_size, output_keys, desc="predict"):
        """Yields dicts of float32 NumPy outputs batch by batch (streaming consumers).

        The last batch is padded to full size (and the padding dropped from its outputs), so
        one traced step serves every batch, and the iterator is never run to its end (ending
        a distributed iterator costs about a second).
        """
        batch_size = int(batch_size)
        if batch_size <= 0:
            raise BertError(f"batch size: must be > 0, got {batch_size}")
        inputs = {k: np.asarray(features[k]) for k in INPUT_NAMES}
        n = len(inputs["input_word_ids"])
        num_batches = -(-n // batch_size)
        pad = num_batches * batch_size - n
        if pad:  # all-zero rows: input_mask 0 everywhere, outputs discarded
            inputs = {k: np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)])
                      for k, v in inputs.items()}
        step = self._predict_step(tuple(output_keys))
        iterator = iter(self.strategy.experimental_distribute_dataset(
            make_dataset(inputs, batch_size)))
        from tqdm.auto import tqdm
        with tqdm(total=n, desc=desc, unit="ex", disable=not self.cfg.progress,
                  dynamic_ncols=True) as bar:
            for b in range(num_batches):
                keep = batch_size if b < num_batches - 1 else batch_size - pad
                out = {k: v.numpy()[:keep].astype(np.float32)
                       for k, v in step(next(iterator)).items()}
                bar.update(keep)
                yield out

    def _predict_step(self, output_keys):
        import tensorflow as tf
        cache = self._predict_steps
        if output_keys not in cache:
            strategy, model = self.strategy, self.model

            @tf.function
            def step(batch):
                out = strategy.run(lambda b: model(b, training=False), args=(batch,))
                return {k: strategy.gather(out[k], axis=0) for k in output_keys}

            cache[output_keys] = step
        return cache[output_keys]

    # -- export ---------------------------------------------------------------------------
    def export(self, vocab_file, do_lower_case, export_dir, task, labels=None):
        from bert_tf import export
        export.export_end_to_end(self.model, vocab_file, do_lower_case, export_dir, task=task,
                                 seq_length=self.cfg.max_seq_length, labels=labels)
        log.info("exported %s model to %s", task, export_dir)
        return export_dir


write_results = fileio.write_eval_results
write_text = fileio.write_text_atomic


def softmax(x, axis=-1):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
