"""Create masked-LM / next-sentence-prediction TFRecords for BERT pre-training.

  bert-create-pretraining-data --input_file=corpus.txt --vocab_file=vocab.txt
      --output_file=train.tfrecord   (in the checkout: python create_pretraining_data.py ...)

Flags of the original release (same names and defaults) plus this project's additions.
`--mode=original` (default) reproduces the original script's records exactly (same random
stream); `--mode=streaming` is the fast, multi-process, bounded-memory, resumable variant;
`--runner=DirectRunner|DataflowRunner|...` (`--mode=beam`) runs it as an Apache Beam pipeline,
passing every flag this script does not know to Beam as a pipeline option.
Schema and side files: `python -m bert_tf.resources tfrecords`. Logic: bert_tf/pretraining_data/.
"""
import os
import sys

# The data path does no BLAS work: without this, numpy's OpenBLAS spins its threads for
# ~0.1 CPU-s at import, in this process and in every Beam worker (they inherit the variable).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from absl import flags  # noqa: E402

import bert_tf  # noqa: E402,F401  (sets the Keras/TF environment first)
from bert_tf import script_flags  # noqa: E402
from bert_tf.commands import exit_zero_on_help, show_in_help  # noqa: E402
from bert_tf.pretraining_data.options import Options  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
    """Every flag is a field of Options (original names and defaults first)."""
    script_flags.define_flags(Options)
    flags.adopt_module_key_flags(script_flags)  # listed in --help too
    show_in_help(__name__)


def parse_flags(argv):
    """Our flags; the rest stays in argv for Beam (--runner) or is an error (other modes)."""
    try:
        return FLAGS(argv, known_only=True)
    except flags.Error as e:
        sys.exit(f"error: {e}")


def app_main(argv):
    """Runs with the parsed flags; argv: the program name and the flags left for Beam."""
    from bert_tf.pretraining_data import cli
    options = cli.options_from_flags(FLAGS, extra_args=argv[1:])
    cli.main(options)


# absl.app's own flags (help, pdb, profiling): only then is absl.app (~15 ms) worth importing.
_APP_FLAGS = ("-h", "-?", "--help", "--only_check_args", "--pdb", "--run_with_", "--profile_file",
              "--use_cprofile")


def main():
    """The `bert-create-pretraining-data` command (flags from sys.argv)."""
    define_flags()
    if any(a.split("=")[0].startswith(_APP_FLAGS) for a in sys.argv[1:]):
        from absl import app
        exit_zero_on_help(lambda: app.run(app_main, flags_parser=parse_flags))
    else:
        app_main(parse_flags(sys.argv))


if __name__ == "__main__":
    main()
