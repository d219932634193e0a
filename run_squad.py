"""BERT fine-tuning for SQuAD v1.1 / v2.0 (writes predictions.json, nbest_predictions.json,
null_odds.json; and eval_results.txt when the predict file has answers).

Logic: bert_tf.tasks.squad. Original flags and defaults plus the TF2 additions.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import cli

flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT "
                    "model.")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_string("output_dir", None, "The output directory where the model checkpoints "
                    "and predictions will be written.")
flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json")
flags.DEFINE_string("predict_file", None, "SQuAD json for predictions, e.g. dev-v1.1.json")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
                    "BERT model; original TF1 or bert_tf format).")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be "
                  "True for uncased models and False for cased models.")
flags.DEFINE_integer("max_seq_length", 384, "The maximum total input sequence length after "
                     "WordPiece tokenization.")
flags.DEFINE_integer("doc_stride", 128, "When splitting up a long document into chunks, how "
                     "much stride to take between chunks.")
flags.DEFINE_integer("max_query_length", 64, "The maximum number of tokens for the question; "
                     "longer questions are truncated.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_predict", False, "Whether to run eval on the dev set.")
cli.define_schedule_flags()  # batch sizes, lr, epochs, warm-up, checkpoint/loop steps
flags.DEFINE_integer("n_best_size", 20, "The total number of n-best predictions to generate "
                     "in the nbest_predictions.json output file.")
flags.DEFINE_integer("max_answer_length", 30, "The maximum length of an answer that can be "
                     "generated (in WordPieces).")
cli.define_tpu_flags()
flags.DEFINE_bool("verbose_logging", False, "Log the text alignment warnings of "
                  "post-processing.")
flags.DEFINE_bool("version_2_with_negative", False, "If true, the SQuAD examples contain some "
                  "that do not have an answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0, "If null_score - best_non_null is "
                   "greater than the threshold predict null.")
cli.define_tf2_flags()
# Flags defined in shared modules are listed in --help too.
flags.adopt_module_key_flags(cli)
flags.adopt_module_key_flags(script_flags)


def _report(result):
    cli.print_eval(result)
    print(f"predictions in {result['output_dir']}")


if __name__ == "__main__":
    from bert_tf.tasks import squad
    cli.run_script(squad.run, squad.SquadConfig, _report)
