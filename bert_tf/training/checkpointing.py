"""The trainer's checkpoints: what they hold, where they go, and how a run starts from one.

Checkpoints (`<checkpoint_name>-<step>` in output_dir) hold the model (under `model`), the
optimizer, `global_step`, the data seed and the dropout RNG states; a restart resumes from the
latest and the seeded input skips the batches consumed so far. Without one, `init_checkpoint`
(original TF1 or ours) initialises the model. Multi-worker: only the chief writes into
output_dir; the others save to a deleted temporary directory (saving may need every worker).
"""
import logging
import os

import tensorflow as tf

from bert_tf.training import distribute

log = logging.getLogger("bert_tf")


def dropout_rng_states(model):
    """The state variables of the model's dropout seed generators.

    Keras does not put them in TF checkpoints; without them a resumed run would draw other
    dropout masks than an uninterrupted one.

    Args:
        model: a built Keras model.
    """
    return [v for v in model.non_trainable_variables if "seed_generator" in v.path]


class Checkpoints:
    """Save and restore a trainer's state in output_dir.

    Args:
        options: `TrainerOptions` (output_dir, keep_checkpoint_max, init_checkpoint).
        checkpoint_name: file prefix of the checkpoints (the task's `checkpoint_name`).
        strategy: the tf.distribute.Strategy the model was built under.
        model: the built Keras model.
        global_step: int64 variable; also the checkpoint number.
        data_seed: int64 variable, the input pipeline's shuffle seed.
    """

    def __init__(self, options, checkpoint_name, strategy, model, global_step, data_seed):
        self.options, self.checkpoint_name, self.strategy = options, checkpoint_name, strategy
        self.model, self.global_step, self.data_seed = model, global_step, data_seed
        self.is_chief = distribute.is_chief(strategy)
        self.optimizer = None
        self._manager = None

    def set_optimizer(self, optimizer):
        """Include `optimizer` (its slots and iterations) in later saves and restores.

        Args:
            optimizer: the optimizer `apply()`-ing the updates (the LossScaleOptimizer, if any).
        """
        self.optimizer = optimizer
        self._manager = None  # its checkpoint lacks the optimizer

    def checkpoint(self):
        """A tf.train.Checkpoint of the state; its keys are the names of old checkpoints too."""
        items = dict(model=self.model, global_step=self.global_step, data_seed=self.data_seed,
                     dropout_rng=dropout_rng_states(self.model))
        if self.optimizer is not None:
            items["optimizer"] = self.optimizer
        return tf.train.Checkpoint(**items)

    def manager(self):
        """The tf.train.CheckpointManager of output_dir (creates no file)."""
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(
                self.checkpoint(), self.options.output_dir,
                max_to_keep=self.options.keep_checkpoint_max,
                checkpoint_name=self.checkpoint_name, step_counter=self.global_step)
        return self._manager

    def restore(self, inference=False):
        """Resume from the latest checkpoint in output_dir, else load init_checkpoint.

        Args:
            inference: no optimizer state expected; warn when neither exists.
        Returns:
            "resumed", "initialized" or "fresh".
        """
        out = self.options.output_dir
        latest = tf.train.latest_checkpoint(out) if out else None
        if latest:
            status = self.checkpoint().restore(latest)
            if self.optimizer is None:
                status.expect_partial()
            status.assert_existing_objects_matched()
            log.info("resumed from %s (step %d)", latest, int(self.global_step.numpy()))
            return "resumed"
        if self.options.init_checkpoint:
            from bert_tf.convert.checkpoints import load_checkpoint
            with self.strategy.scope():
                load_checkpoint(self.model, self.options.init_checkpoint)
            log.info("initialised from %s", self.options.init_checkpoint)
            return "initialized"
        if inference:
            log.warning("no checkpoint in %s and no --init_checkpoint: predicting with random "
                        "weights", out)
        return "fresh"

    def save(self):
        """Checkpoint `<checkpoint_name>-<step>` into output_dir (chief); its path or None."""
        if self.is_chief:
            tf.io.gfile.makedirs(self.options.output_dir)
            return self.manager().save(checkpoint_number=int(self.global_step.numpy()))
        with distribute.scratch_dir("bert_tf-worker-ckpt-") as tmp:
            self.checkpoint().write(os.path.join(tmp, "ckpt"))
        return None
