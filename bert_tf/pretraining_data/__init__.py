"""create_pretraining_data: masked-LM / next-sentence TFRecords for BERT pre-training.

  schema     feature names, `feature_spec(max_seq_length, max_predictions_per_seq)`, serialisers
  documents  input files/globs/gzip/tfds -> documents (lists of sentences)
  masking    masked-LM selection: the original's algorithm on tokens (mode `original`, its exact
             random stream) and BatchMasker, the vectorised one (streaming and Beam, and
             run_pretraining.py --dynamic_masking)
  instances  per-document pairs (chunking / NSP / truncation) + batch masking and encoding,
             shared by streaming and Beam
  original   mode `original`: the original release's algorithm and random stream, exactly
  streaming  mode `streaming`: sharded, multi-process, bounded memory, resumable
  beam       mode `beam` (--runner=...): streaming's shards as an Apache Beam pipeline (needs
             the [beam] extra; imported only in that mode)
  writer     atomic TFRecord (own framing, no TensorFlow for local paths) and JSON outputs
  stats      counters of the stats JSON
  guard      workers that die with the run, a clean stop on SIGTERM/SIGINT (exit 75), the
             output lock, and where sidecar files go (`<dir>/.bert_tf/`)
  runner     `Options` + `run(options)`, what create_pretraining_data.py calls
  cli        absl flags of create_pretraining_data.py
"""
from bert_tf.pretraining_data.schema import FEATURE_NAMES, feature_spec  # noqa: F401


def run(options):
    """Lazy import, so `import bert_tf.pretraining_data` stays light."""
    from bert_tf.pretraining_data.runner import run as _run
    return _run(options)
