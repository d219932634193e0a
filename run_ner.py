"""BERT fine-tuning for CoNLL-2003 style named-entity recognition (token tagging).

Logic: bert_tf.tasks.ner. Flags follow run_classifier's; entity-level P/R/F1 (conlleval rules)
go to eval_results.txt, predictions to eval_predictions.txt / test_predictions.txt.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import cli

flags.DEFINE_string("data_dir", None, "Directory with the CoNLL files.")
flags.DEFINE_string("train_file", "train.txt", "Training file (relative to --data_dir).")
flags.DEFINE_string("dev_file", "dev.txt", "Dev file (valid.txt is used if dev.txt is "
                    "missing).")
flags.DEFINE_string("test_file", "test.txt", "Test file.")
flags.DEFINE_string("labels", None, "Comma-separated tag set (default: the CoNLL-2003 IOB2 "
                    "tags O,B-PER,I-PER,B-ORG,I-ORG,B-LOC,I-LOC,B-MISC,I-MISC).")
flags.DEFINE_enum("label_scheme", "iob2", ["iob2", "none"], "iob2: convert IOB1 input (as "
                  "CoNLL-2003 is released) to IOB2; none: use the tags as given.")
flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT "
                    "model.")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_string("output_dir", None, "The output directory.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (original TF1 or bert_tf).")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text (use False "
                  "with cased models, usual for NER).")
flags.DEFINE_integer("max_seq_length", 128, "Maximum WordPieces per window; longer sentences "
                     "are split at word boundaries.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
flags.DEFINE_bool("do_predict", False, "Whether to tag the test set.")
flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
cli.define_schedule_flags()  # batch sizes, lr, epochs, warm-up, checkpoint/loop steps
cli.define_tpu_flags()
cli.define_tf2_flags()
# Flags defined in shared modules are listed in --help too.
flags.adopt_module_key_flags(cli)
flags.adopt_module_key_flags(script_flags)


if __name__ == "__main__":
    from bert_tf.tasks import ner
    cli.run_script(ner.run, ner.NerConfig, cli.print_eval)
