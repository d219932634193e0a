"""BERT fine-tuning for sentence (pair) classification: GLUE, XNLI, or a TFDS dataset.

Logic: bert_tf.tasks.classifier. Original flags and defaults, plus --tfds_name and the TF2
additions (--strategy, --mixed_precision, --optimizer, --export_dir, ...).
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import cli

flags.DEFINE_string("data_dir", None, "The input data dir: the task's .tsv files.")
flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT "
                    "model.")
flags.DEFINE_string("task_name", None, "The name of the task to train (cola, mnli, "
                    "mnli_mismatched, mrpc, xnli, sst-2, qnli, qqp, rte, sts-b, wnli).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_string("output_dir", None, "The output directory where the model checkpoints "
                    "and results will be written.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
                    "BERT model; original TF1 or bert_tf format).")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be "
                  "True for uncased models and False for cased models.")
flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after "
                     "WordPiece tokenization; longer pairs are truncated, shorter padded.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
flags.DEFINE_bool("do_predict", False, "Whether to run the model in inference mode on the "
                  "test set.")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
cli.define_schedule_flags()  # batch sizes, lr, epochs, warm-up, checkpoint/loop steps
cli.define_tpu_flags()
# Additions.
flags.DEFINE_string("tfds_name", None, "Read a TFDS dataset instead of --data_dir TSVs, e.g. "
                    "glue/mrpc or imdb_reviews (needs a 'label' feature).")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory (default: TFDS's).")
flags.DEFINE_string("xnli_language", "zh", "XNLI: language to train/evaluate on.")
cli.define_tf2_flags()
# Flags defined in shared modules are listed in --help too.
flags.adopt_module_key_flags(cli)
flags.adopt_module_key_flags(script_flags)


if __name__ == "__main__":
    from bert_tf.tasks import classifier
    cli.run_script(classifier.run, classifier.ClassifierConfig, cli.print_eval)
