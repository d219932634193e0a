"""BERT fine-tuning for sentence (pair) classification: GLUE, XNLI, or a TFDS dataset.

  bert-run-classifier --task_name=MRPC --do_train --do_eval --data_dir=glue_data/MRPC ...
  (or: python run_classifier.py ... in the checkout)

Logic: bert_tf.tasks.classifier. Original flags and defaults, plus --tfds_name and the TF2
additions (--strategy, --mixed_precision, --jit_compile, --grad_accum_steps, --export_dir, ...),
all fields of bert_tf.tasks.classifier.ClassifierConfig.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.commands import exit_zero_on_help, show_in_help
from bert_tf.tasks import classifier, cli


def define_flags():
    """Every flag is a field of ClassifierConfig."""
    script_flags.define_flags(classifier.ClassifierConfig)
    flags.adopt_module_key_flags(script_flags)  # listed in --help too
    show_in_help(__name__)


def main():
    """The `bert-run-classifier` command (flags from sys.argv)."""
    define_flags()
    config = classifier.ClassifierConfig
    exit_zero_on_help(lambda: cli.run_script(classifier.run, config, cli.print_eval))


if __name__ == "__main__":
    main()
