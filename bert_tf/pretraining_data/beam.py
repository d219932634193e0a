"""Mode `beam`: streaming's shards as an Apache Beam pipeline.

`create_pretraining_data.py --runner=DirectRunner|DataflowRunner|FlinkRunner|SparkRunner` (plus
that runner's own pipeline options, passed through) runs:

  input cut into byte-range pieces (streaming.plan_file_shards)          Create + Reshuffle
  -> per piece, exactly streaming's per-shard work (streaming.run_shard: IdTokenizer, the
     original's chunking / NSP / truncation with a reservoir of earlier documents of the
     piece, vectorised masking and encoding, shuffled blocks), TFRecord-framed blocks of
     >= shuffle_buffer_size records                                      MakeRecords
  -> <output_file>-SSSSS-of-NNNNN (num_shards=--output_shards)            + stats JSON

So Beam's per-element cost is paid per piece and per block, not per document or record, and
the records are exactly the ones `--mode=streaming` writes with as many shards as there are
pieces: the same on any runner with any number of workers. The number of pieces depends only
on the input size (`num_pieces`); which output file a block lands in and the order of blocks
are the runner's choice. Memory per worker is bounded as in streaming (one piece at a time).

Needs the `beam` extra (`pip install -c constraints.txt -e '.[beam]'`); nothing else in
bert_tf imports this module.
"""
import json
import posixpath

import apache_beam as beam
from apache_beam import coders
from apache_beam.io import filebasedsink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data import streaming as streaming_lib
from bert_tf.pretraining_data.stats import COUNTERS, Stats
from bert_tf.tokenization import IdTokenizer

MIN_PIECE_BYTES = 1 << 20   # pieces of at least 1 MB ...
MAX_PIECE_BYTES = 64 << 20  # ... and at most 64 MB; at least MIN_PIECES when the input allows
MIN_PIECES = 16
STATS_TAG = "stats"


def num_pieces(total_bytes):
    """Pieces the input is cut into: a function of its size only (records depend on it)."""
    ceil = lambda a, b: -(-a // b)  # noqa: E731
    pieces = max(MIN_PIECES, ceil(total_bytes, MAX_PIECE_BYTES))
    return max(1, min(pieces, ceil(total_bytes, MIN_PIECE_BYTES)))


def plan_pieces(input_files):
    """Input files -> streaming ShardTasks (byte ranges; a .gz file goes whole to one)."""
    total = sum(docs_lib.file_size(p) for p in input_files)
    return streaming_lib.plan_file_shards(input_files, num_pieces(total))


class MakeRecords(beam.DoFn):
    """ShardTask -> TFRecord-framed blocks of records (+ the piece's stats dict, tagged)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        """Per worker, once: the tokenizer (its word cache lives as long as the worker)."""
        cfg = self.cfg
        self.tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)

    def process(self, task):
        """Runs one piece (`streaming.run_shard`): yields its framed record blocks, then its
        stats dict tagged `STATS_TAG`."""
        chunks = []
        stats = streaming_lib.run_shard(task, self.cfg, self.tokenizer, chunks.append)
        for message in chunks:
            if message[3]:  # ("records", shard, framed records, count, docs, bytes)
                yield bytes(message[2])
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats.to_dict())


class _FramedSink(filebasedsink.FileBasedSink):
    """Writes elements that are already TFRecord frames (WriteToTFRecord frames each one)."""

    def __init__(self, prefix, num_shards):
        super().__init__(prefix, coder=coders.BytesCoder(), file_name_suffix="",
                         num_shards=num_shards, shard_name_template=None,
                         mime_type="application/octet-stream",
                         compression_type=CompressionTypes.UNCOMPRESSED)

    def write_encoded_record(self, file_handle, value):
        file_handle.write(value)


class SumStats(beam.CombineFn):
    """Sums the pieces' stats dicts (`stats.COUNTERS` -> int) into one."""

    def create_accumulator(self):
        """All counters 0."""
        return dict.fromkeys(COUNTERS, 0)

    def add_input(self, acc, value):
        """Adds one stats dict to the accumulator (in place).

        Args:
            acc: the accumulator (a stats dict).
            value: a piece's stats dict.
        """
        for k in COUNTERS:
            acc[k] += value[k]
        return acc

    def merge_accumulators(self, accumulators):
        """The sum of several accumulators."""
        out = self.create_accumulator()
        for acc in accumulators:
            self.add_input(out, acc)
        return out

    def extract_output(self, acc):
        """The accumulator itself: the summed stats dict."""
        return acc


def _write_json(data, path):
    with FileSystems.create(path) as f:
        f.write(json.dumps(data).encode())


def build(pipeline, cfg, tasks, output_prefix, num_shards, stats_path):
    """Add the pipeline's transforms; the stats counters end up as JSON in `stats_path`.

    Args:
        pipeline: the `beam.Pipeline` to add to.
        cfg: the `streaming.StreamConfig` every piece is made with.
        tasks: the pieces (`plan_pieces`).
        output_prefix: the records go to `<output_prefix>-SSSSS-of-NNNNN`.
        num_shards: output files (0: the runner chooses).
        stats_path: where the summed stats JSON is written.
    """
    made = (pipeline
            | "Pieces" >> beam.Create(tasks)  # reshuffles itself: pieces spread over workers
            | "MakeRecords" >> beam.ParDo(MakeRecords(cfg)).with_outputs(STATS_TAG, main="records"))
    _ = made.records | "Write" >> beam.io.Write(_FramedSink(output_prefix, num_shards))
    _ = (made[STATS_TAG]
         | "SumStats" >> beam.CombineGlobally(SumStats())
         | "WriteStats" >> beam.Map(_write_json, stats_path))


def _check_crc32c():
    """Framing needs google-crc32c; fail before the pipeline starts, not in a worker."""
    from bert_tf.pretraining_data.writer import masked_crc
    masked_crc(b"")


def run(cfg, input_files, output_prefix, num_shards, stats_path, runner, beam_args):
    """Build and run the pipeline (blocking); returns the Stats of what was written.

    Args:
        cfg: the `streaming.StreamConfig`.
        input_files: the input text files (cut into pieces by size).
        output_prefix, num_shards, stats_path: as for `build`.
        runner: Beam runner name (`--runner`).
        beam_args: the runner's own pipeline options, passed through.
    """
    from apache_beam.options.pipeline_options import PipelineOptions
    _check_crc32c()
    args = list(beam_args)
    if not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        args.append("--default_sdk_harness_log_level=WARNING")  # workers' INFO lines drown the output
    options = PipelineOptions(args + [f"--runner={runner}"])
    pipeline = beam.Pipeline(options=options)
    build(pipeline, cfg, plan_pieces(input_files), output_prefix, num_shards, stats_path)
    result = pipeline.run()
    result.wait_until_finish()
    with FileSystems.open(stats_path) as f:
        return Stats.from_dict(json.loads(f.read().decode()))


def written_files(output_prefix, since=0.0):
    """The shards the pipeline wrote for `output_prefix` (its default name template).

    Args:
        output_prefix: the pipeline's output prefix.
        since: a time.time(); files last modified before it (older shards of another shard
            count may share the prefix) are left out.
    """
    matches = FileSystems.match([output_prefix + "-?????-of-?????"])[0].metadata_list
    return sorted(m.path for m in matches if m.last_updated_in_seconds >= since - 2)


def remove_temp_dirs(output_prefix):
    """Delete the temp folders a failed Write leaves beside the output (driver side)."""
    import tensorflow as tf
    directory, base = posixpath.split(output_prefix)
    try:
        for path in tf.io.gfile.glob(posixpath.join(directory or ".", f"beam-temp-{base}-*")):
            tf.io.gfile.rmtree(path)
    except tf.errors.OpError:  # best effort: never hide the error that brought us here
        pass
