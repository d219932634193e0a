"""Extract per-token activations of BERT layers to JSON lines (like the original release).

Input: one text per line, or "text_a ||| text_b". Logic: bert_tf.tasks.features; flags are the
fields of bert_tf.tasks.features.FeatureConfig (the training ones left out).
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import cli, features
from bert_tf.training.options import TRAINING_FLAGS

script_flags.define_flags(features.FeatureConfig, exclude=TRAINING_FLAGS)
flags.adopt_module_key_flags(script_flags)  # listed in --help too


def _report(result):
    print(f"wrote {result['num_examples']} lines to {result['output_file']}")


if __name__ == "__main__":
    cli.run_script(features.run, features.FeatureConfig, _report)
