"""BERT fine-tuning for SQuAD v1.1 / v2.0 (writes predictions.json, nbest_predictions.json,
null_odds.json; and eval_results.txt when the predict file has answers).

Logic: bert_tf.tasks.squad. Original flags and defaults plus the TF2 additions, all fields of
bert_tf.tasks.squad.SquadConfig.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import cli, squad

script_flags.define_flags(squad.SquadConfig)
flags.adopt_module_key_flags(script_flags)  # listed in --help too


def _report(result):
    cli.print_eval(result)
    print(f"predictions in {result['output_dir']}")


if __name__ == "__main__":
    cli.run_script(squad.run, squad.SquadConfig, _report)
