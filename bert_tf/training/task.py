"""Task: what the one trainer (bert_tf.training.trainer) needs from a task (pre-training in
bert_tf.pretraining, fine-tuning in bert_tf.tasks). No TensorFlow import at module level, so
options modules can subclass it while flags are parsed."""
from bert_tf import BertError

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


class Task:
    """What the trainer needs from a task; subclasses override the methods they use.

    Attributes:
        checkpoint_name: file prefix of the checkpoints in output_dir.
        stat_keys: keys of the per-step statistics `loss()` returns; the trainer sums them over
            replicas and steps and hands the sums to `summarize()`.
        eval_keys: keys of `summarize()` written as eval summaries.
        model_inputs: batch keys passed to the model.
    """
    checkpoint_name = "ckpt"
    stat_keys = ("loss",)
    eval_keys = ("loss",)
    model_inputs = INPUT_NAMES

    def build_model(self):
        """The task's Keras model, built (variables created). Called under the strategy."""
        raise NotImplementedError

    def check(self, options, num_replicas):
        """Raise a one-line BertError for options this task cannot run with.

        Args:
            options: the trainer's options.
            num_replicas: replicas in sync.
        """

    def forward(self, model, inputs, training):
        """The outputs `loss()` reads, from `model` on `inputs` (training and eval steps).

        Args:
            model: the task's model.
            inputs: the batch's `model_inputs`.
            training: True in training steps (dropout on), False in eval.
        """
        return model(inputs, training=training)

    def normalizers(self, batch):
        """Per-replica sums (float32 scalars) the loss divides by; summed over replicas."""
        return {}

    def loss(self, batch, outputs, normalizers):
        """(this replica's share of the global loss, {stat_key: scalar}) for one batch.

        Args:
            batch: the replica's (micro-)batch.
            outputs: the model's outputs (training or inference mode).
            normalizers: `normalizers()` of the whole global batch.
        """
        raise NotImplementedError

    def summarize(self, totals, steps):
        """Sums of the stats over `steps` steps -> the reported metrics (a `loss` key).

        Args:
            totals: {stat_key: sum over replicas and steps}.
            steps: number of steps summed.
        """
        return {"loss": totals["loss"] / max(steps, 1)}

    def rates(self, totals, seconds):
        """Extra throughputs of a training loop ({name: per second}) for its log line and
        summaries.

        Args:
            totals: the loop's stat sums.
            seconds: its wall-clock time.
        """
        return {}

    def log_text(self, metrics):
        """The metrics part of the training log line."""
        return f"loss={metrics['loss']:.4f}"

    def explain_data_error(self, error):
        """The one-line BertError for an error the task's input raised in a training or eval
        loop (a bad record found in-graph), or None: the trainer re-raises `error` as it is.

        Args:
            error: the tf.errors.OpError.
        """
        return None

    def export(self, model, export_dir):
        """Export the trained model under export_dir; returns the path written.

        Args:
            model: the trained model (`build_model()`'s).
            export_dir: where to export.
        """
        raise BertError("this task has no export")
