"""Extract per-token activations of BERT layers to JSON lines (like the original release).

  bert-extract-features --input_file=input.txt --output_file=output.jsonl --vocab_file=...
      --bert_config_file=... --init_checkpoint=...   (in the checkout: python extract_features.py)

Input: one text per line, or "text_a ||| text_b". Logic: bert_tf.tasks.features; flags are the
fields of bert_tf.tasks.features.FeatureConfig (the training ones left out).
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.commands import exit_zero_on_help, show_in_help
from bert_tf.tasks import cli, features
from bert_tf.training.options import TRAINING_FLAGS


def define_flags():
    """Every flag is a field of FeatureConfig, the training ones left out."""
    script_flags.define_flags(features.FeatureConfig, exclude=TRAINING_FLAGS)
    flags.adopt_module_key_flags(script_flags)  # listed in --help too
    show_in_help(__name__)


def _report(result):
    print(f"wrote {result['num_examples']} lines to {result['output_file']}")


def main():
    """The `bert-extract-features` command (flags from sys.argv)."""
    define_flags()
    exit_zero_on_help(lambda: cli.run_script(features.run, features.FeatureConfig, _report))


if __name__ == "__main__":
    main()
