"""Create masked-LM / next-sentence-prediction TFRecords for BERT pre-training.

Flags of the original release (same names and defaults) plus this project's additions.
`--mode=original` (default) reproduces the original script's records exactly (same random
stream); `--mode=streaming` is the fast, multi-process, bounded-memory, resumable variant;
`--runner=DirectRunner|DataflowRunner|...` (`--mode=beam`) runs it as an Apache Beam pipeline,
passing every flag this script does not know to Beam as a pipeline option.
Schema and stats file: see tfrecords/README.md. Logic: bert_tf/pretraining_data/.
"""
import sys

from absl import app, flags

import bert_tf  # noqa: F401  (sets the Keras/TF environment first)

FLAGS = flags.FLAGS

# ---- original flags ----
flags.DEFINE_string("input_file", None, "Input raw text file (or comma-separated list of files/globs; .gz accepted).")
flags.DEFINE_string("output_file", None, "Output TF example file (or comma-separated list of files).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text.")
flags.DEFINE_bool("do_whole_word_mask", False,
                  "Whether to use whole word masking rather than per-WordPiece masking "
                  "(original behaviour: 80/10/10 still drawn per piece).")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10, "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1,
                   "Probability of creating sequences which are shorter than the maximum length.")

# ---- new flags ----
flags.DEFINE_enum("mode", "original", ["original", "streaming", "beam"],
                  "original: the original algorithm and random stream, records identical to the "
                  "original script's. streaming: sharded, multi-process, bounded memory, resumable. "
                  "beam: an Apache Beam pipeline (implied by --runner).")
flags.DEFINE_string("runner", None,
                    "Run as an Apache Beam pipeline on this runner (DirectRunner, DataflowRunner, "
                    "FlinkRunner, SparkRunner, ...); unknown flags are passed to Beam as pipeline "
                    "options (e.g. --direct_num_workers=2 --direct_running_mode=multi_processing, "
                    "--project/--region/--temp_location for Dataflow). Needs the [beam] extra.")
flags.DEFINE_integer("num_workers", 1, "streaming: worker processes (results do not depend on it).")
flags.DEFINE_integer("output_shards", 0,
                     "Write <output_file>-SSSSS-of-NNNNN shards. 0: the --output_file list; in "
                     "streaming mode with one --output_file and --num_workers>1, one shard per worker.")
flags.DEFINE_bool("resume", False, "streaming: keep finished shards of an interrupted run with the same flags.")
flags.DEFINE_bool("whole_word_mask_per_word", False,
                  "Whole-word masking with the 80/10/10 choice made once per word (fixes "
                  "google-research/bert#910). Not original-compatible.")
flags.DEFINE_integer("learn_vocab_size", 0,
                     "If --vocab_file is not given or does not exist, learn a WordPiece vocab of this "
                     "size from the input (written to --vocab_file, or <output>.vocab.txt). 0: error.")
flags.DEFINE_string("tfds_dataset", None,
                    "Read documents from a tensorflow-datasets text dataset (e.g. wikipedia/20230601.en) "
                    "instead of --input_file; text is split into sentences by a simple regex.")
flags.DEFINE_string("tfds_split", "train", "Split of --tfds_dataset.")
flags.DEFINE_string("tfds_data_dir", None, "data_dir for --tfds_dataset.")
flags.DEFINE_string("tfds_text_key", "text", "Text feature of --tfds_dataset.")
flags.DEFINE_integer("nsp_reservoir_size", 1000,
                     "streaming and beam: documents kept (reservoir sample of the shard's or "
                     "piece's earlier documents) to draw random-next segments from.")
flags.DEFINE_integer("shuffle_buffer_size", 10000,
                     "streaming and beam: per-shard (per-piece) instance shuffle buffer.")
flags.DEFINE_string("stats_file", None, "Stats JSON (default: <output>.stats.json).")
flags.DEFINE_string("bert_config_file", None,
                    "Optional bert_config.json: checks max_seq_length and the vocab size against it.")


def parse_flags(argv):
    """Our flags; the rest stays in argv for Beam (--runner) or is an error (other modes)."""
    try:
        return FLAGS(argv, known_only=True)
    except flags.Error as e:
        sys.exit(f"error: {e}")


def main(argv):
    from bert_tf.pretraining_data import cli
    options = cli.options_from_flags(FLAGS, extra_args=argv[1:])
    cli.main(options)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
