"""BERT fine-tuning for CoNLL-2003 style named-entity recognition (token tagging).

Logic: bert_tf.tasks.ner. Flags follow run_classifier's (fields of bert_tf.tasks.ner.NerConfig);
entity-level P/R/F1 (conlleval rules) go to eval_results.txt, predictions to
eval_predictions.txt / test_predictions.txt.
"""
from absl import flags

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import script_flags
from bert_tf.tasks import cli, ner

script_flags.define_flags(ner.NerConfig)
flags.adopt_module_key_flags(script_flags)  # listed in --help too


if __name__ == "__main__":
    cli.run_script(ner.run, ner.NerConfig, cli.print_eval)
