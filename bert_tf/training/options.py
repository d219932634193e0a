"""TrainerOptions (the knobs of the one training loop) and PretrainingOptions.

Every field made with `flag()` is also a command-line flag of the scripts (original names and
defaults); task options (PretrainingOptions, the fine-tuning configs) subclass it. No
TensorFlow import, so that parsing flags stays fast.
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
    skip_corrupt_records: bool = flag(False, "On a corrupt or truncated record, skip the rest "
                                      "of that input file and log how many records were lost, "
                                      "instead of stopping with an error naming the file and "
                                      "byte offset.")
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


@dataclasses.dataclass
class PretrainingOptions(TrainerOptions):
    """run_pretraining's flags (the original's names and defaults, plus the TF2 ones).

    Args:
        bert_config_file, input_file, do_train, do_eval: as the original.
        max_seq_length, max_predictions_per_seq: must match the data files.
        num_warmup_steps, max_eval_steps: as the original.
        dynamic_masking, mask_id: re-mask every read (RoBERTa style) with this [MASK] id.
        vocab_file, do_lower_case: with a vocab, the export also writes text-in models.
        model_name: name of the TF Serving models under export_dir.
        eval_input_file: --do_eval's files (default: input_file, as the original).
        phase2_*: the second phase of the paper's recipe in the same command (phase 2 of
            bert_tf.training.phase_plan): its files, lengths, batch, steps, learning-rate
            schedule across the boundary and whether the optimizer starts afresh.
        See TrainerOptions for the rest.
    """
    bert_config_file: str = flag(None, "The config json file of the pre-trained BERT model. "
                                 "This specifies the model architecture.")
    input_file: str = flag(None, "Input TF example files (can be a glob or comma separated).")
    max_seq_length: int = flag(128, "The maximum total input sequence length after WordPiece "
                               "tokenization. Must match the data file.")
    max_predictions_per_seq: int = flag(20, "Maximum number of masked LM predictions per "
                                        "sequence. Must match the data file.")
    do_train: bool = flag(False, "Whether to run training.")
    do_eval: bool = flag(False, "Whether to run eval on the dev set.")
    num_train_steps: int = flag(100000, "Number of training steps.")
    num_warmup_steps: int = flag(10000, "Number of warmup steps.")
    max_eval_steps: int = flag(100, "Maximum number of eval steps.")
    dynamic_masking: bool = flag(False, "Re-mask every example each time it is read (RoBERTa "
                                 "style) instead of using the records' fixed masks.")
    mask_id: int = flag(103, "Id of [MASK] for --dynamic_masking (103 in Google's released "
                        "vocabularies).")
    eval_input_file: str = flag(None, "Files --do_eval evaluates on (default: --input_file, "
                                "as the original).")
    phase2_input_file: str = flag(None, "Phase 2's input files. With them one command "
                                  "pre-trains in two phases, as the BERT paper: phase 1 on "
                                  "--input_file at --max_seq_length for --num_train_steps, then "
                                  "phase 2 on these at --phase2_max_seq_length for "
                                  "--phase2_num_train_steps; re-running it resumes in either.")
    phase2_eval_input_file: str = flag(None, "Phase 2's --do_eval files (default: "
                                       "--phase2_input_file).")
    phase2_max_seq_length: int = flag(512, "Phase 2's max_seq_length. Must match its data.")
    phase2_max_predictions_per_seq: int = flag(80, "Phase 2's max_predictions_per_seq. Must "
                                               "match its data.")
    phase2_train_batch_size: int = flag(None, "Phase 2's global batch (default: "
                                        "--train_batch_size).")
    phase2_num_train_steps: int = flag(None, "Phase 2's steps (default: a ninth of "
                                       "--num_train_steps, so phase 2 is the last 10%, as the "
                                       "paper).")
    phase2_lr_schedule: str = flag("continue", "continue: one warm-up and one linear decay over "
                                   "both phases' steps (the paper's single schedule); restart: "
                                   "phase 2 warms up again to --phase2_learning_rate and decays "
                                   "over its own steps (NVIDIA, Chinese-BERT-wwm).")
    phase2_learning_rate: float = flag(None, "With --phase2_lr_schedule=restart: phase 2's peak "
                                       "learning rate (default: --learning_rate).")
    phase2_num_warmup_steps: int = flag(None, "With --phase2_lr_schedule=restart: phase 2's "
                                        "warm-up steps (default: the share of phase 2 that "
                                        "--num_warmup_steps is of --num_train_steps).")
    phase2_fresh_optimizer: bool = flag(False, "Start phase 2 with a fresh optimizer (zero Adam "
                                        "moments, its step count from 0) instead of carrying "
                                        "phase 1's slots over.")
    export_dir: str = flag(None, "Where to export after training (default: <output_dir>/export)."
                           " Without --do_train/--do_eval: only export the latest checkpoint in "
                           "--output_dir there.")
    vocab_file: str = flag(None, "vocab.txt of the model: the export then also writes the TF "
                           "Hub preprocessor + encoder pair and text-in fill-mask and "
                           "embeddings models in the TF Serving layout under --export_dir.")
    do_lower_case: bool = flag(True, "With --vocab_file: whether the exported preprocessing "
                               "lower-cases the text (True for uncased models).")
    model_name: str = flag("bert", "With --vocab_file: TF Serving model name of the export "
                           "(<export_dir>/<model_name>[_embeddings|_preprocessor|_encoder]/<v>).")
