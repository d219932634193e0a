"""create_pretraining_data.py's options: each flag defined once, as a field (`script_flags.flag`).

The original release's flags come first, with their names and defaults; the rest are this
project's additions. No TensorFlow import: the data path starts fast.
"""
import dataclasses

from bert_tf.script_flags import flag

MODES = ("original", "streaming", "beam")


@dataclasses.dataclass
class Options:
    """Flags of create_pretraining_data.py (see each field's help), plus `beam_args` and
    `progress`, which are not flags."""
    input_file: str = flag("", "Input raw text file (or comma-separated list of files/globs; "
                           ".gz accepted).")
    output_file: str = flag("", "Output TF example file (or comma-separated list of files).")
    vocab_file: str = flag("", "The vocabulary file that the BERT model was trained on.")
    do_lower_case: bool = flag(True, "Whether to lower case the input text.")
    do_whole_word_mask: bool = flag(False, "Whether to use whole word masking rather than "
                                    "per-WordPiece masking (original behaviour: 80/10/10 still "
                                    "drawn per piece).")
    max_seq_length: int = flag(128, "Maximum sequence length.")
    max_predictions_per_seq: int = flag(20, "Maximum number of masked LM predictions per "
                                        "sequence.")
    random_seed: int = flag(12345, "Random seed for data generation.")
    dupe_factor: int = flag(10, "Number of times to duplicate the input data (with different "
                            "masks).")
    masked_lm_prob: float = flag(0.15, "Masked LM probability.")
    short_seq_prob: float = flag(0.1, "Probability of creating sequences which are shorter than "
                                 "the maximum length.")
    # New in this project.
    mode: str = flag("original", "original: the original algorithm and random stream, records "
                     "identical to the original script's. streaming: sharded, multi-process, "
                     "bounded memory, resumable. beam: an Apache Beam pipeline (implied by "
                     "--runner).", enum=MODES)
    num_workers: int = flag(1, "streaming: worker processes (results do not depend on it).")
    output_shards: int = flag(0, "Write <output_file>-SSSSS-of-NNNNN shards. 0: the "
                              "--output_file list; in streaming mode with one --output_file and "
                              "--num_workers>1, one shard per worker; with --runner, one shard "
                              "per piece of the input (1-64 MB pieces, at least 16 when the "
                              "input allows).")
    resume: bool = flag(False, "streaming: keep finished shards of an interrupted run with the "
                        "same flags.")
    whole_word_mask_per_word: bool = flag(False, "Whole-word masking with the 80/10/10 choice "
                                          "made once per word (fixes google-research/bert#910). "
                                          "Not original-compatible.")
    learn_vocab_size: int = flag(0, "If --vocab_file is not given or does not exist, learn a "
                                 "WordPiece vocab of this size from the input (written to "
                                 "--vocab_file, or <dir>/.bert_tf/<output name>.vocab.txt). 0: error.")
    tfds_dataset: str = flag("", "Read documents from a tensorflow-datasets text dataset (e.g. "
                             "wikipedia/20230601.en) instead of --input_file; text is split into "
                             "sentences by a simple regex.")
    tfds_split: str = flag("train", "Split of --tfds_dataset.")
    tfds_data_dir: str = flag("", "data_dir for --tfds_dataset.")
    tfds_text_key: str = flag("text", "Text feature of --tfds_dataset.")
    nsp_reservoir_size: int = flag(1000, "streaming and beam: documents kept (reservoir sample "
                                   "of the shard's or piece's earlier documents) to draw "
                                   "random-next segments from.")
    shuffle_buffer_size: int = flag(10000, "streaming and beam: records are put in a random "
                                    "order in blocks of at least this many (per shard or piece); "
                                    "0: no shuffling.")
    stats_file: str = flag("", "Stats JSON (default: <dir>/.bert_tf/<output name>.stats.json, "
                           "out of the way of '<output_file>*' and '<dir>/*' globs).")
    bert_config_file: str = flag("", "Optional bert_config.json: checks max_seq_length and the "
                                 "vocab size against it.")
    runner: str = flag("", "Run as an Apache Beam pipeline on this runner (DirectRunner, "
                       "DataflowRunner, FlinkRunner, SparkRunner, ...); unknown flags are passed "
                       "to Beam as pipeline options (e.g. --direct_num_workers=2 "
                       "--direct_running_mode=multi_processing, --project/--region/"
                       "--temp_location for Dataflow). Needs the [beam] extra.")
    beam_args: tuple = ()   # mode beam: pipeline options passed through to Beam
    progress: bool = None  # None: a tqdm bar when stderr is a terminal
