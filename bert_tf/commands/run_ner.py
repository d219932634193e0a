"""BERT fine-tuning for CoNLL-2003 style named-entity recognition (token tagging).

  bert-run-ner --data_dir=conll2003 --vocab_file=... --bert_config_file=... --do_train ...
  (or: python run_ner.py ... in the checkout)

Logic: bert_tf.tasks.ner. Flags follow run_classifier's (fields of bert_tf.tasks.ner.NerConfig);
entity-level P/R/F1 (conlleval rules) go to eval_results.txt, predictions to
eval_predictions.txt / test_predictions.txt.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.commands import exit_zero_on_help, show_in_help
from bert_tf.tasks import cli, ner


def define_flags():
    """Every flag is a field of NerConfig."""
    script_flags.define_flags(ner.NerConfig)
    flags.adopt_module_key_flags(script_flags)  # listed in --help too
    show_in_help(__name__)


def main():
    """The `bert-run-ner` command (flags from sys.argv)."""
    define_flags()
    exit_zero_on_help(lambda: cli.run_script(ner.run, ner.NerConfig, cli.print_eval))


if __name__ == "__main__":
    main()
