"""PretrainingOptions: run_pretraining's flags, the trainer's (TrainerOptions) plus the
pre-training task's. No TensorFlow import, so that parsing flags stays fast.
"""
import dataclasses

from bert_tf.script_flags import flag
from bert_tf.training.options import TrainerOptions


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
        skip_corrupt_records: on a corrupt or truncated record, skip the rest of that file.
        phase2_*: the second phase of the paper's recipe in the same command (phase 2 of
            bert_tf.pretraining.phase_plan): its files, lengths, batch, steps, learning-rate
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
    skip_corrupt_records: bool = flag(False, "On a corrupt or truncated record, skip the rest "
                                      "of that input file and log how many records were lost, "
                                      "instead of stopping with an error naming the file and "
                                      "byte offset.")
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
