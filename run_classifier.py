"""BERT fine-tuning for sentence (pair) classification: GLUE, XNLI, or a TFDS dataset.

Logic: bert_tf.tasks.classifier. Original flags and defaults, plus --tfds_name and the TF2
additions (--strategy, --mixed_precision, --jit_compile, --grad_accum_steps, --export_dir, ...),
all fields of bert_tf.tasks.classifier.ClassifierConfig.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import classifier, cli

script_flags.define_flags(classifier.ClassifierConfig)
flags.adopt_module_key_flags(script_flags)  # listed in --help too


if __name__ == "__main__":
    cli.run_script(classifier.run, classifier.ClassifierConfig, cli.print_eval)
