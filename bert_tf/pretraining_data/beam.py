"""Mode `beam`: streaming's shards as an Apache Beam pipeline.

`create_pretraining_data.py --runner=DirectRunner|DataflowRunner|FlinkRunner|SparkRunner` (plus
that runner's own pipeline options, passed through) runs:

  input cut into N byte-range pieces (streaming.plan_file_shards), N = --output_shards or,
  with 0, a function of the input size (`num_pieces`)                    Create (reshuffled)
  -> per piece, exactly streaming's per-shard work and writer (workers.write_shard: IdTokenizer,
     the original's chunking / NSP / truncation with a reservoir of earlier documents of the
     piece, vectorised masking and encoding, shuffled blocks) into <output_file>-SSSSS-of-NNNNN
     (temp name, renamed when complete)                                   MakeShards
  -> the pieces' stats, summed                                            + stats JSON

So Beam's per-element cost is paid per piece, no record crosses a Beam channel, and the files
are byte for byte the ones `--mode=streaming --output_shards=N` writes: the same on any runner
with any number of workers. A retried piece rewrites the same bytes. Memory per worker is
bounded as in streaming (one piece at a time).

Needs the `beam` extra (`pip install "bert_tf[beam]"`); nothing else in
bert_tf imports this module.
"""
import json

import apache_beam as beam

from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data import streaming as streaming_lib
from bert_tf.pretraining_data import workers as workers_lib
from bert_tf.pretraining_data import writer as writer_lib
from bert_tf.pretraining_data.stats import COUNTERS, Stats
from bert_tf.tokenization import IdTokenizer

MIN_PIECE_BYTES = 1 << 20   # pieces of at least 1 MB ...
MAX_PIECE_BYTES = 64 << 20  # ... and at most 64 MB; at least MIN_PIECES when the input allows
MIN_PIECES = 16


def num_pieces(total_bytes):
    """Pieces the input is cut into: a function of its size only (records depend on it)."""
    ceil = lambda a, b: -(-a // b)  # noqa: E731
    pieces = max(MIN_PIECES, ceil(total_bytes, MAX_PIECE_BYTES))
    return max(1, min(pieces, ceil(total_bytes, MIN_PIECE_BYTES)))


def plan_pieces(input_files, output_prefix="", num_shards=0):
    """Input files -> streaming ShardTasks (byte ranges; a .gz file goes whole to one), each
    writing `<output_prefix>-SSSSS-of-NNNNN`.

    Args:
        input_files: the input text files.
        output_prefix: the shards' name prefix.
        num_shards: N, pieces and files (0: `num_pieces` of the input size).
    """
    if not num_shards:
        num_shards = num_pieces(sum(docs_lib.file_size(p) for p in input_files))
    tasks = streaming_lib.plan_file_shards(input_files, num_shards)
    for t in tasks:
        t.output = f"{output_prefix}-{t.index:05d}-of-{num_shards:05d}"
    return tasks


class MakeShards(beam.DoFn):
    """ShardTask -> its file `task.output` (streaming's writer); yields the piece's stats dict."""

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        """Per worker, once: the tokenizer (its word cache lives as long as the worker)."""
        workers_lib.keep_freed_memory()  # as in streaming's workers: no page faults per batch
        cfg = self.cfg
        self.tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)

    def process(self, task):
        """Makes one piece (`workers.write_shard`); yields its stats dict."""
        yield workers_lib.write_shard(task, self.cfg, self.tokenizer, _ignore).to_dict()


def _ignore(message):
    del message  # progress: the runner reports its own


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
    writer_lib.write_text_atomic(path, json.dumps(data))  # as the shards: gfile off this machine


def build(pipeline, cfg, tasks, stats_path):
    """Add the pipeline's transforms; the stats counters end up as JSON in `stats_path`.

    Args:
        pipeline: the `beam.Pipeline` to add to.
        cfg: the `streaming.StreamConfig` every piece is made with.
        tasks: the pieces (`plan_pieces`), each with its output file.
        stats_path: where the summed stats JSON is written.
    """
    _ = (pipeline
         | "Pieces" >> beam.Create(tasks)  # reshuffles itself: pieces spread over workers
         | "MakeShards" >> beam.ParDo(MakeShards(cfg))
         | "SumStats" >> beam.CombineGlobally(SumStats())
         | "WriteStats" >> beam.Map(_write_json, stats_path))


def _check_crc32c():
    """Framing needs google-crc32c; fail before the pipeline starts, not in a worker."""
    from bert_tf.pretraining_data.writer import masked_crc
    masked_crc(b"")


_DIRECT = ("directrunner", "direct", "switchingdirectrunner")


def pipeline_runner(options):
    """The runner to run on: the one `options` names (`--runner`), except Beam's DirectRunner.
    That one first fetches its Prism runner binary from GitHub unless a copy is cached
    (offline: a failure after DNS/TCP time-outs, 48 s in one test run here), then falls back
    to the FnApiRunner. This batch pipeline runs on the FnApiRunner directly, built as the
    DirectRunner builds it (the pipeline options reach the SDK workers): no download, the
    same bytes.

    Args:
        options: the pipeline's `PipelineOptions` (`pipeline_options`).
    """
    from apache_beam.options.pipeline_options import StandardOptions
    runner = options.view_as(StandardOptions).runner
    if runner.rsplit(".", 1)[-1].lower() not in _DIRECT:
        return runner
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def pipeline_options(runner, beam_args):
    """`--runner` and the runner's own options; SDK workers log at WARNING unless asked.

    Args:
        runner: the `--runner` name.
        beam_args: the runner's own pipeline options, passed through.
    """
    from apache_beam.options.pipeline_options import PipelineOptions
    args = list(beam_args)
    if not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        args.append("--default_sdk_harness_log_level=WARNING")  # workers' INFO lines drown the output
    return PipelineOptions(args + [f"--runner={runner}"])


def run(cfg, tasks, stats_path, runner, beam_args):
    """Build and run the pipeline (blocking); returns the Stats of what was written.

    Args:
        cfg: the `streaming.StreamConfig`.
        tasks: the pieces (`plan_pieces`).
        stats_path: where the pipeline writes the summed stats JSON.
        runner: Beam runner name (`--runner`).
        beam_args: the runner's own pipeline options, passed through.
    """
    _check_crc32c()
    options = pipeline_options(runner, beam_args)
    pipeline = beam.Pipeline(runner=pipeline_runner(options), options=options)
    build(pipeline, cfg, tasks, stats_path)
    result = pipeline.run()
    result.wait_until_finish()
    return Stats.from_dict(json.loads(writer_lib.read_text(stats_path)))
