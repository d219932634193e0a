"""Pre-train BERT (masked LM + next sentence) on TFRecords from bert-create-pretraining-data.

  bert-run-pretraining --input_file='data/train*.tfrecord' --output_dir=out --do_train
      --bert_config_file=bert_config.json   (in the checkout: python run_pretraining.py ...)

The original's flags and defaults, plus the TF2 ones (--strategy, --mixed_precision, ...).
Restarting with the same --output_dir resumes from its latest checkpoint. See
bert_tf.pretraining.pretraining.

The paper's two phases in one command (phase 2 at 512 for the last steps; the long-runs guide):
  bert-run-pretraining ... --input_file='data/p1/*' --max_seq_length=128 --num_train_steps=900000
      --phase2_input_file='data/p2/*' --phase2_max_seq_length=512 --phase2_num_train_steps=100000

Several machines (--strategy=multi_worker): run the same command on every host, each with
TF_CONFIG naming the cluster and its own task, e.g. on the second of two hosts
  TF_CONFIG='{"cluster": {"worker": ["host1:12345", "host2:12345"]},
              "task": {"type": "worker", "index": 1}}'
--train_batch_size is the global batch; --output_dir (and --input_file) must be storage all
hosts see (gs://...). Worker 0 writes checkpoints, summaries and the export; each worker reads
its share of the input files. If a worker dies the others stop with an error; restart all of
them to resume. TPU pod slices: --use_tpu --tpu_name=<pod name>.
"""
import sys

from absl import app, flags, logging

import bert_tf  # noqa: F401  (sets the Keras backend)
from bert_tf import BertError
from bert_tf import script_flags
from bert_tf.commands import exit_zero_on_help, show_in_help
from bert_tf.pretraining.options import PretrainingOptions

FLAGS = flags.FLAGS


def define_flags():
    """Every flag is a field of PretrainingOptions (the original's names and defaults, the TF2
    additions, and --vocab_file/--do_lower_case/--model_name for the text-in export)."""
    script_flags.define_flags(PretrainingOptions)
    flags.adopt_module_key_flags(script_flags)  # listed in --help too
    show_in_help(__name__)


def app_main(argv):
    """Pre-trains with the parsed flags; a BertError exits with one `error: ...` line."""
    del argv
    try:
        from bert_tf.pretraining.preflight import RunLog
        from bert_tf.pretraining.preflight_run import check_run
        options = script_flags.options_from_flags(PretrainingOptions)
        run_log = RunLog()  # the lines this run logged: its input pipelines do not repeat them
        check_run(options, run_log)  # before TensorFlow is imported: a wrong flag fails in ~1 s
        from bert_tf.pretraining import pretraining
        from bert_tf.convert.handoff import hand_off
        options, source = hand_off(options)  # read once; the run loads from this Source
        result = pretraining.run_pretraining(options, init_source=source, run_log=run_log)
    except BertError as e:
        sys.exit(f"error: {e}")
    evals = result["eval_phases"] or ({None: result["eval"]} if result["eval"] else {})
    for phase, values in sorted(evals.items(), key=lambda kv: kv[0] or 0):
        for key in pretraining.EVAL_KEYS:  # two phases: phase<N>/<key>, as eval_results.txt
            print(f"{'' if phase is None else f'phase{phase}/'}{key} = {values[key]}")
    if result["export_dir"]:
        from bert_tf.export.pretraining import export_lines
        print("\n".join(export_lines(result["export_dir"], options)))


def main():
    """The `bert-run-pretraining` command (flags from sys.argv)."""
    define_flags()
    logging.set_verbosity(logging.INFO)
    exit_zero_on_help(lambda: app.run(app_main, flags_parser=script_flags.parse_flags))


if __name__ == "__main__":
    main()
