"""Extract per-token activations of BERT layers to JSON lines (like the original release).

Input: one text per line, or "text_a ||| text_b". Logic: bert_tf.tasks.features.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import cli

flags.DEFINE_string("input_file", None, "Text file: one example per line.")
flags.DEFINE_string("output_file", None, "JSON lines output file.")
flags.DEFINE_string("layers", "-1,-2,-3,-4", "Comma-separated encoder layer indexes.")
flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT "
                    "model.")
flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after "
                     "WordPiece tokenization; longer inputs are truncated.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
                    "BERT model; original TF1 or bert_tf format).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be "
                  "True for uncased models and False for cased models.")
flags.DEFINE_integer("batch_size", 32, "Batch size for predictions.")
flags.DEFINE_bool("use_tpu", False, "Whether to use TPU (same as --strategy=tpu).")
flags.DEFINE_string("master", None, "TPU address (with --use_tpu).")
flags.DEFINE_integer("num_tpu_cores", 8, "Only used with --use_tpu.")
flags.DEFINE_bool("use_one_hot_embeddings", False, "Accepted for compatibility; has no "
                  "effect (the embedding lookup is chosen by the backend).")
cli.define_tf2_flags(training=False)
# Flags defined in shared modules are listed in --help too.
flags.adopt_module_key_flags(cli)
flags.adopt_module_key_flags(script_flags)
flags.DEFINE_bool("progress", True, "Show a progress bar.")


def _report(result):
    print(f"wrote {result['num_examples']} lines to {result['output_file']}")


if __name__ == "__main__":
    from bert_tf.tasks import features
    cli.run_script(features.run, features.FeatureConfig, _report)
