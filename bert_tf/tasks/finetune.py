"""What the fine-tuning tasks share: RunConfig, losses, FinetuneTask, and the train helper
(predictions: `bert_tf.tasks.prediction`).

Fine-tuning runs on the one trainer (bert_tf.training.trainer), as pre-training does: strategy,
mixed precision, XLA, gradient accumulation, checkpoints with resume, TensorBoard summaries,
progress bars and the divergence check are the trainer's. A task here trains on in-memory
feature arrays: dicts of NumPy arrays with a leading example axis, the encoder inputs
(`input_word_ids`, `input_mask`, `input_type_ids`) plus the task's label arrays.
"""
import dataclasses
import logging

import numpy as np

from bert_tf import BertError, fileio
from bert_tf.script_flags import flag
from bert_tf.training.options import TrainerOptions
from bert_tf.training.task import INPUT_NAMES, Task

log = logging.getLogger("bert_tf.tasks")


PAD_HELP = ("Compute every batch at --max_seq_length (the original's single fixed shape; "
            "always so on TPUs and in SQuAD training). Default: each batch is cut to its "
            "longest real length, rounded up to a multiple of 8 (with --jit_compile to one of "
            "at most 8 lengths, 16 above 128). With dropout off (eval, predict) results equal "
            "the fixed shape's within 1e-5; with dropout on (training's default) the dropout "
            "masks follow the batch shape, so the two train differently, equally well.")


@dataclasses.dataclass
class RunConfig(TrainerOptions):
    """The fine-tuning scripts' shared flags (the original's names and defaults).

    Args:
        max_seq_length: WordPieces per example (padded/truncated).
        predict_batch_size: batch for predictions.
        num_train_epochs: epochs over the training set (unless num_train_steps).
        warmup_proportion: share of the steps with linear warm-up.
        do_export: export an end-to-end text-in SavedModel after training.
        pad_to_max_seq_length: keep every batch max_seq_length wide (one compiled shape);
            default (not on TPUs): each batch is cut to its longest real length, rounded up
            by `real_length.step`.
        See TrainerOptions for the rest.
    """
    max_seq_length: int = flag(128, "The maximum total input sequence length after WordPiece "
                               "tokenization; longer inputs are truncated, shorter padded.")
    train_batch_size: int = flag(32, "Total batch size for training.")
    predict_batch_size: int = flag(8, "Total batch size for predictions.")
    learning_rate: float = flag(5e-5, "The initial learning rate for Adam.")
    num_train_epochs: float = flag(3.0, "Total number of training epochs to perform.")
    warmup_proportion: float = flag(0.1, "Proportion of training to perform linear learning "
                                    "rate warmup for. E.g., 0.1 = 10% of training.")
    iterations_per_loop: int = flag(1000, "How many steps to make in each tf.function call "
                                    "(one progress line each); off TPU at most a tenth of the "
                                    "run.")
    keep_checkpoint_max: int = 3
    do_export: bool = flag(True, "After training, export an end-to-end text-in SavedModel.")
    pad_to_max_seq_length: bool = flag(False, PAD_HELP)

    def train_steps(self, num_examples):
        """(num_train_steps, num_warmup_steps) for `num_examples` training examples."""
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


# --- losses: (sum over the replica's examples, normaliser of the batch); the task divides the
# sum by the normaliser summed over replicas, so N replicas give the one-device loss.

def _ce(labels, logits):
    import tensorflow as tf
    return tf.nn.sparse_softmax_cross_entropy_with_logits(tf.cast(labels, tf.int32),
                                                          tf.cast(logits, tf.float32))


def _count(batch):
    import tensorflow as tf
    return tf.cast(tf.shape(batch["input_word_ids"])[0], tf.float32)


def _tag_weight(batch):
    import tensorflow as tf
    return tf.reduce_sum(tf.cast(batch["label_weights"], tf.float32))


def _classification_sum(batch, outputs):
    import tensorflow as tf
    return tf.reduce_sum(_ce(batch["label_ids"], outputs["logits"]))


def _regression_sum(batch, outputs):
    import tensorflow as tf
    logits = tf.cast(outputs["logits"], tf.float32)
    return tf.reduce_sum(tf.square(logits[:, 0] - tf.cast(batch["label_ids"], tf.float32)))


def _span_sum(batch, outputs):
    import tensorflow as tf
    start = _ce(batch["start_positions"], outputs["start_logits"])
    end = _ce(batch["end_positions"], outputs["end_logits"])
    return tf.reduce_sum((start + end) / 2.0)


def _tagging_sum(batch, outputs):
    """Mean over the labelled (first-piece) positions only."""
    import tensorflow as tf
    w = tf.cast(batch["label_weights"], tf.float32)
    return tf.reduce_sum(_ce(batch["label_ids"], outputs["logits"]) * w)


LOSSES = {"classification": (_classification_sum, _count),
          "regression": (_regression_sum, _count),
          "span": (_span_sum, _count),
          "tagging": (_tagging_sum, _tag_weight)}


def built(model, cfg):
    """`model` with its variables created (one dummy batch).

    Args:
        model: a bert_tf Keras model.
        cfg: the RunConfig; the dummy batch is at most max_seq_length long.
    """
    from bert_tf.modeling.models import build_model
    return build_model(model, seq=min(8, cfg.max_seq_length))


class FinetuneTask(Task):
    """A fine-tuning task: one loss from LOSSES, an end-to-end text-in export.

    Subclasses build their model in `build_model()` (the one place a model is made).
    `cut_training`: whether training batches are cut to their real length. Not for spans:
    the original's start/end softmax runs over every position, padding included, so cutting
    would change the loss (predictions are cut: they read real positions only).
    `position_features`: the [B, S] label features cut with the inputs (tagging's);
    `cover_features`: those whose weighted positions the cut keeps (`real_length.cut_batch_fn`).

    Args:
        cfg: the task's RunConfig subclass (vocab_file/do_lower_case for the export).
        loss: a key of LOSSES (also the export's task, except "classification"/"tagging"
            labels come from `labels`).
        labels: label strings in logit order (classification/tagging exports).
    """
    checkpoint_name = "ckpt"

    def __init__(self, cfg, loss, labels=None):
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}")
        self.cfg, self.loss_name, self.labels = cfg, loss, labels
        self.cut_training = loss != "span"
        # Per-position label features, cut with the inputs by name; a weighted label past the
        # last real token keeps the cut long enough to hold it.
        self.position_features = ("label_ids", "label_weights") if loss == "tagging" else ()
        self.cover_features = ("label_weights",) if loss == "tagging" else ()

    def normalizers(self, batch):
        """{"weight": examples in the batch, or labelled tokens for tagging}."""
        return {"weight": LOSSES[self.loss_name][1](batch)}

    def loss(self, batch, outputs, normalizers):
        """(loss, {"loss": loss}): this replica's loss sum over the global batch's weight.

        Args:
            batch: the replica's batch of feature arrays.
            outputs: the model's outputs.
            normalizers: `normalizers()` summed over the global batch.
        """
        import tensorflow as tf
        loss = LOSSES[self.loss_name][0](batch, outputs) / tf.maximum(normalizers["weight"], 1.0)
        return loss, {"loss": loss}

    def export(self, model, export_dir):
        """Writes the end-to-end text-in SavedModel of the task; returns export_dir.

        Args:
            model: the trained task model.
            export_dir: output folder (replaced atomically).
        """
        from bert_tf import export
        export.export_end_to_end(model, self.cfg.vocab_file, self.cfg.do_lower_case, export_dir,
                                 task=self.loss_name, seq_length=self.cfg.max_seq_length,
                                 labels=self.labels)
        log.info("exported %s model to %s", self.loss_name, export_dir)
        return export_dir


def cuts_batches(options, task=None, strategy=None):
    """Whether batches are cut to their real length (`real_length.cuts`; bucketed under
    --jit_compile); for training, only a task whose loss does not see padding.

    Args:
        options: the RunConfig (or any options; without the field: cut).
        task: for training, the FinetuneTask (its `cut_training`); None for prediction.
        strategy: the tf.distribute.Strategy the run uses (a TPUStrategy passed as an object
            counts as a TPU too).
    """
    from bert_tf.modeling import real_length
    from bert_tf.training import distribute
    tpu = getattr(options, "use_tpu", False) or getattr(options, "strategy", None) == "tpu" \
        or (strategy is not None and distribute.is_tpu(strategy))
    return real_length.cuts(getattr(options, "pad_to_max_seq_length", False), tpu=tpu,
                            xla=bool(getattr(options, "jit_compile", False)),
                            bucketed=True) and getattr(task, "cut_training", True)


def arrays_dataset_fn(features, cut=False, step=None, task=None):
    """The trainer's dataset_fn over in-memory arrays: shuffled, repeated, full batches only
    (static batch size), each input pipeline its own share.

    Args:
        features: dict of NumPy arrays with a leading example axis.
        cut: cut each batch to its longest real length, rounded up to one of
            `real_length.length_buckets(S, step)`: the same batches in the same order, a
            bounded set of shapes. Features are cut by name: the encoder inputs and the
            task's `position_features`.
        step: the rounding step (`real_length.step`; None: `real_length.bucket_step(S)`).
        task: the FinetuneTask (its `position_features`, `cover_features`).
    """
    def fn(ctx, batch_size, seed, skip_batches):
        import tensorflow as tf
        from bert_tf.modeling import real_length
        n = len(next(iter(features.values())))
        ds = tf.data.Dataset.from_tensor_slices(features)
        if ctx.num_input_pipelines > 1:
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        # TF mixes the global seed into the shuffle's: set it to the checkpoint's data seed so
        # that a resumed run (whatever its --seed) continues the same order.
        tf.random.set_seed(seed)
        ds = ds.shuffle(min(n, 100_000), seed=seed, reshuffle_each_iteration=True).repeat()
        ds = ds.batch(batch_size, drop_remainder=True)
        if skip_batches:  # a resumed run continues the same stream
            ds = ds.skip(skip_batches)
        if cut:
            ds = ds.map(real_length.cut_batch_fn(
                int(features["input_mask"].shape[1]), step=step,
                keys=INPUT_NAMES + tuple(getattr(task, "position_features", ())),
                cover=tuple(getattr(task, "cover_features", ()))))
        return ds.prefetch(tf.data.AUTOTUNE)
    return fn


def make_trainer(task, cfg, init_source=None):
    """A Trainer for `task` under cfg's strategy and precision.

    Args:
        task, cfg: a FinetuneTask (or any Task) and its RunConfig.
        init_source: the `Source` read for --init_checkpoint, or None (`Trainer`).
    """
    from bert_tf.training.trainer import Trainer
    return Trainer(task, cfg, init_source=init_source)


def train(trainer, features, num_train_steps, num_warmup_steps):
    """Train to num_train_steps on feature arrays, resuming from output_dir.

    Args:
        trainer: from make_trainer.
        features: dict of NumPy arrays (encoder inputs and labels), leading example axis.
        num_train_steps, num_warmup_steps: the schedule (RunConfig.train_steps).
    Returns:
        The mean loss of the last loop (None when the checkpoint is already there).
    """
    from bert_tf.modeling import real_length
    trainer.build_optimizer(num_train_steps, num_warmup_steps)
    trainer.restore()
    o = trainer.options
    history = trainer.train(arrays_dataset_fn(
        features, cut=cuts_batches(o, trainer.task, trainer.strategy), task=trainer.task,
        step=real_length.step(features["input_mask"].shape[1], xla=bool(o.jit_compile))))
    if not history:
        return None
    log.info("trained to step %d, loss %.4f", history[-1]["step"], history[-1]["loss"])
    return history[-1]["loss"]


write_results = fileio.write_eval_results


def write_text(path, text):
    """Text to path atomically (temp name + rename), creating its folder.

    Args:
        path, text: the destination file and the str to write.
    """
    return fileio.write_text_atomic(path, text, make_parent=True)


def softmax(x, axis=-1):
    """Softmax in float64 (NumPy), max-subtracted so large logits cannot overflow.

    Args:
        x, axis: array-like logits and the class axis.
    """
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
