"""TrainerOptions: the knobs of the one training loop.

Every field made with `flag()` is also a command-line flag of the scripts (original names and
defaults); task options (bert_tf.pretraining.options.PretrainingOptions, the fine-tuning
configs) subclass it. No TensorFlow import, so that parsing flags stays fast.
"""
import dataclasses

from bert_tf.script_flags import flag

# Flags only a training script has (extract_features leaves them out).
TRAINING_FLAGS = ("output_dir", "train_batch_size", "eval_batch_size", "learning_rate",
                  "num_train_steps", "save_checkpoints_steps", "iterations_per_loop",
                  "optimizer", "weight_decay_rate", "grad_accum_steps", "jit_compile", "seed",
                  "export_dir")


MIXED_PRECISIONS = ("none", "float16", "bfloat16", "auto")  # + "float32" (= none)


def check_mixed_precision(value):
    """A one-line BertError for a --mixed_precision value that no run takes (before TF starts,
    so a typo does not first create the strategy or connect to a TPU)."""
    if (value or "none").lower() not in MIXED_PRECISIONS + ("float32",):
        from bert_tf import BertError
        raise BertError(f"--mixed_precision: unknown value {value!r}; expected one of "
                        f"{', '.join(MIXED_PRECISIONS)}")


@dataclasses.dataclass
class TrainerOptions:
    """Strategy, optimizer, schedule, step and checkpoint options shared by every task.

    Args:
        output_dir: checkpoints, summaries, eval results and (by default) exports go here.
        init_checkpoint: weights to start from (any format bert_tf reads) when output_dir has
            no checkpoint of its own.
        train_batch_size: global batch (all replicas together).
        eval_batch_size: global eval batch.
        learning_rate: peak learning rate of the warm-up + linear-decay schedule.
        num_train_steps: optimizer updates; None lets a fine-tuning task derive it from epochs.
        save_checkpoints_steps: checkpoint every this many steps (and at the end).
        iterations_per_loop: steps per call of the compiled training loop (log/summary rate);
            off TPU at most a tenth of the run (bert_tf.training.reporting).
        keep_checkpoint_max: checkpoints kept in output_dir.
        optimizer: adamw_original | adamw | lamb.
        weight_decay_rate: decoupled weight decay (not on LayerNorm/bias).
        grad_accum_steps: micro-batches per replica batch whose gradients are summed.
        jit_compile: XLA-compile the replica step.
        strategy: one_device | mirrored | multi_worker | tpu | auto (None: tpu with use_tpu).
        mixed_precision: none | float16 (loss scaling) | bfloat16 | auto (bf16 where fast).
        use_tpu, tpu_name, tpu_zone, gcp_project, master, num_tpu_cores: the original TPU flags.
        seed: random seed (weights, dropout, data order); None: random, kept in checkpoints.
        progress: show progress bars.
        export_dir: where the export at the end of training goes (None: output_dir/export).
    """
    output_dir: str = flag(None, "The output directory where the model checkpoints and "
                           "results will be written.")
    init_checkpoint: str = flag(None, "Initial weights (usually a pre-trained BERT model), in "
                                "any format bert_tf reads: an original TF1 release, Hugging "
                                "Face, keras-hub, Model Garden, TF Hub, a bert_tf export, "
                                ".keras file or training output directory.")
    train_batch_size: int = flag(32, "Total (global) batch size for training.")
    eval_batch_size: int = flag(8, "Total (global) batch size for eval.")
    learning_rate: float = flag(5e-5, "The initial learning rate.")
    num_train_steps: int | None = flag(None, "Train exactly this many steps (fine-tuning "
                                       "default: num_train_epochs over the training set).")
    save_checkpoints_steps: int = flag(1000, "How often to save the model checkpoint.")
    iterations_per_loop: int = flag(1000, "How many steps to run in each call of the "
                                    "compiled training loop (one progress line each); off "
                                    "TPU at most a tenth of the run.")
    keep_checkpoint_max: int = 5
    optimizer: str = flag("adamw_original", "adamw_original (the original AdamWeightDecay) | "
                          "adamw | lamb.")
    weight_decay_rate: float = flag(0.01, "Decoupled weight decay (not on LayerNorm/bias).")
    grad_accum_steps: int = flag(1, "Split each per-replica batch into this many micro-batches "
                                 "and accumulate their gradients (one update per step).")
    jit_compile: bool = flag(False, "XLA-compile the training step.")
    strategy: str = flag(None, "one_device | mirrored | multi_worker | tpu | auto (default: "
                         "tpu with --use_tpu, else auto = mirrored on several GPUs).")
    mixed_precision: str = flag("none", "none | float16 (with loss scaling) | bfloat16 | "
                                "auto (bfloat16 on a TPU, a GPU of compute capability >= 8.0 "
                                "or a CPU with avx512_bf16/AMX, else float32).")
    use_tpu: bool = flag(False, "Whether to use TPU (same as --strategy=tpu).")
    tpu_name: str = flag(None, "The Cloud TPU to use.")
    tpu_zone: str = flag(None, "GCE zone where the Cloud TPU is located in.")
    gcp_project: str = flag(None, "Project name for the Cloud TPU-enabled project.")
    master: str = flag(None, "TPU address (used when --tpu_name is not given).")
    num_tpu_cores: int = flag(8, "Only used with --use_tpu: number of TPU cores expected (the "
                              "strategy reports the real number).")
    seed: int | None = flag(None, "Random seed (weights, dropout, data order); default: "
                            "random, kept in the checkpoint so a resumed run sees the same data.")
    progress: bool = flag(True, "Show progress bars.")
    export_dir: str = flag(None, "Where to export after training (default: "
                           "<output_dir>/export).")

    def check(self, num_replicas):
        """One-line BertErrors for options no trainer can run with on `num_replicas`."""
        from bert_tf import BertError
        n, batch = num_replicas, self.train_batch_size
        if batch <= 0 or batch % n:
            raise BertError(f"--train_batch_size: {batch} is not divisible by the {n} replicas")
        if self.grad_accum_steps < 1 or (batch // n) % self.grad_accum_steps:
            raise BertError(f"--grad_accum_steps: the per-replica batch {batch // n} is not "
                            f"divisible by {self.grad_accum_steps}")
        for name in ("iterations_per_loop", "save_checkpoints_steps"):
            if getattr(self, name) <= 0:
                raise BertError(f"--{name}: must be > 0, got {getattr(self, name)}")
