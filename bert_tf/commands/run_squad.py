"""BERT fine-tuning for SQuAD v1.1 / v2.0 (writes predictions.json, nbest_predictions.json,
null_odds.json; and eval_results.txt when the predict file has answers).

  bert-run-squad --do_train --train_file=train-v1.1.json --do_predict ...
  (or: python run_squad.py ... in the checkout)

Logic: bert_tf.tasks.squad. Original flags and defaults plus the TF2 additions, all fields of
bert_tf.tasks.squad.SquadConfig.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.commands import exit_zero_on_help, show_in_help
from bert_tf.tasks import cli, squad


def define_flags():
    """Every flag is a field of SquadConfig."""
    script_flags.define_flags(squad.SquadConfig)
    flags.adopt_module_key_flags(script_flags)  # listed in --help too
    show_in_help(__name__)


def _report(result):
    cli.print_eval(result)
    print(f"predictions in {result['output_dir']}")


def main():
    """The `bert-run-squad` command (flags from sys.argv)."""
    define_flags()
    exit_zero_on_help(lambda: cli.run_script(squad.run, squad.SquadConfig, _report))


if __name__ == "__main__":
    main()
