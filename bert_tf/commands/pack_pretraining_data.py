"""Pack pre-training TFRecords: several sequences per row, no padding between them.

  bert-pack-pretraining-data --input_file='train-*' --output_file=packed.tfrecord
      (in the checkout: python pack_pretraining_data.py ...)

Reads the records create_pretraining_data writes (any mode, or the original release's) and
writes packed rows in the packed-BERT layout (Habana's and Graphcore's packers; input_mask =
which sequence, positions restart per sequence, NSP at each sequence's [CLS]), planned by SPFHP
on the length histogram. The journal
(<dir>/.bert_tf/<name>.stats.json) states the padding share before and after and the expected
speed-up. Schema: `python -m bert_tf.resources tfrecords`. Logic:
bert_tf/pretraining_data/sequence_packing*.py.
"""
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no BLAS work here (see create_pretraining_data)

from absl import flags  # noqa: E402

import bert_tf  # noqa: E402,F401  (sets the Keras/TF environment first)
from bert_tf import script_flags  # noqa: E402
from bert_tf.commands import exit_zero_on_help, show_in_help  # noqa: E402
from bert_tf.pretraining_data.sequence_packing_run import PackOptions  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
    """Every flag is a field of PackOptions."""
    script_flags.define_flags(PackOptions)
    flags.adopt_module_key_flags(script_flags)  # listed in --help too
    show_in_help(__name__)


def app_main(argv):
    """Runs with the parsed flags."""
    if len(argv) > 1:
        sys.exit(f"error: unknown argument(s): {' '.join(argv[1:])}")
    from bert_tf.pretraining_data import sequence_packing_run
    sequence_packing_run.main(script_flags.options_from_flags(PackOptions, FLAGS))


def main():
    """The `bert-pack-pretraining-data` command (flags from sys.argv)."""
    define_flags()
    from absl import app
    exit_zero_on_help(lambda: app.run(app_main))


if __name__ == "__main__":
    main()
