"""Mode `beam`: the document -> instances -> masked records logic as an Apache Beam pipeline.

`create_pretraining_data.py --runner=DirectRunner|DataflowRunner|FlinkRunner|SparkRunner` (plus
that runner's own pipeline options, passed through) runs:

  input pieces (files cut into ~1 MB byte ranges; a .gz file is one piece)  Create + Reshuffle
  -> documents keyed by (file path, byte offset of their first line)     ReadDocuments
  -> token ids (IdTokenizer), empty documents dropped                    TokenizeDocuments
  -> random NSP group per document, ~`nsp_reservoir_size` documents each AssignGroup + GroupByKey
  -> per group: streaming's per-document work (instances.InstanceMaker: `dupe_factor` passes
     of the original's chunking / NSP / truncation, random-next segments drawn from the other
     documents of the group, pairs drawn from a seed hashed from (random_seed, document key)),
     then one vectorised masking + encoding of the group's pairs (instances.RecordMaker)
  -> records shuffled within the group, TFRecord-framed in chunks of 1000  MakeInstances
  -> <output_file>-SSSSS-of-NNNNN (num_shards=--output_shards)            + stats JSON

The group of a document is a hash of (random_seed, key) modulo the number of groups (documents /
group size), so groups, partners and every draw depend only on the input and the flags: the set
of records is the same on any runner with any number of workers. Which shard a chunk lands in
and the order inside a shard are the runner's choice. Memory per worker is bounded by one
group (its documents and their records), not by the corpus. A group of one document (only
with a tiny --nsp_reservoir_size) draws random-next from that document; the stats count it
(`nsp_same_document`).

Needs the `beam` extra (`pip install -c constraints.txt -e '.[beam]'`); nothing else in
bert_tf imports this module.
"""
import hashlib
import json
import posixpath
import random

import apache_beam as beam
from apache_beam import coders
from apache_beam.io import filebasedsink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from bert_tf import BertError
from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data import streaming as streaming_lib
from bert_tf.pretraining_data.instances import (InstanceMaker, RecordMaker, num_sentences,
                                                 numpy_generator, pack_document)
from bert_tf.pretraining_data.stats import COUNTERS, Stats
from bert_tf.pretraining_data.writer import frame
from bert_tf.tokenization import IdTokenizer

SPLIT_BYTES = 1 << 20  # input piece size (parallel reading); output does not depend on it
RECORDS_PER_ELEMENT = 1000  # records per output element (one TFRecord-framed bytes object)
STATS_TAG = "stats"


def hash64(*parts):
    digest = hashlib.sha256("/".join(["bert_tf.beam"] + [str(p) for p in parts]).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def key_names(input_files):
    """Path -> the name used in document keys: relative to the inputs' common folder, so the
    output does not change when the corpus is moved (or copied to gs://)."""
    dirs = [p[:p.rfind("/") + 1] for p in input_files]
    common = posixpath.commonprefix(dirs)
    common = common[:common.rfind("/") + 1]
    return {p: p[len(common):] for p in input_files}


def plan_pieces(input_files, split_bytes=None):
    """Files -> ("range", path, name, lo, hi) / ("file", path, name) pieces; a range yields the
    documents that start in it."""
    split_bytes = split_bytes or SPLIT_BYTES
    pieces = []
    names = key_names(input_files)
    for path in input_files:
        size = docs_lib.file_size(path)
        if size == 0:
            continue
        if docs_lib.is_gzip(path):
            pieces.append(("file", path, names[path]))
        else:
            for lo in range(0, size, split_bytes):
                pieces.append(("range", path, names[path], lo, min(lo + split_bytes, size)))
    return pieces


class ReadDocuments(beam.DoFn):
    """piece -> (document key, sentences); keys do not depend on how files are cut."""

    def process(self, piece):
        if piece[0] == "range":
            _, path, name, lo, hi = piece
            for doc, offset in docs_lib.iter_range_documents(path, lo, hi, offsets=True):
                yield f"{name}@{offset:012d}", doc
        else:
            _, path, name = piece
            for ordinal, doc in enumerate(docs_lib.iter_file_documents(path)):
                yield f"{name}#{ordinal:09d}", doc


class TokenizeDocuments(beam.DoFn):
    """(key, sentences) -> (key, packed token ids); documents without tokens are dropped."""

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        cfg = self.cfg
        self.tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)

    def process(self, element):
        key, sentences = element
        doc = [ids for ids in map(self.tokenizer.encode, sentences) if ids]
        if doc:
            yield key, pack_document(doc)


def assign_group(element, random_seed, group_size, num_documents):
    key, doc = element
    num_groups = max(1, round(num_documents / group_size))
    return hash64("group", random_seed, key) % num_groups, (key, doc)


class _Others:
    """The documents of a group except one, as the sequence InstanceMaker draws partners from."""

    def __init__(self, docs, skip):
        self.docs, self.skip = docs, skip

    def __len__(self):
        return len(self.docs) - 1

    def __getitem__(self, j):
        return self.docs[j if j < self.skip else j + 1][1]


class MakeInstances(beam.DoFn):
    """(group, [(key, doc)]) -> TFRecord-framed chunks of records (+ a stats dict, tagged).

    The per-document work is streaming's (`instances.InstanceMaker`, pairs drawn with a
    Python RNG seeded per document) and one vectorised masking + encoding of the whole group
    (`instances.RecordMaker`, numpy RNG seeded per group), so Beam's per-element cost is paid
    per chunk of RECORDS_PER_ELEMENT records, not per record.
    """

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        self.recorder = RecordMaker(self.cfg)

    def process(self, element):
        group, items = element
        docs = sorted(items, key=lambda item: item[0])  # arrival order is the runner's
        cfg = self.cfg
        stats = Stats()
        maker = InstanceMaker(cfg.max_seq_length, cfg.short_seq_prob, None, stats)
        pairs = []
        for index, (key, doc) in enumerate(docs):
            maker.rng = random.Random(hash64("doc", cfg.random_seed, key))
            others = _Others(docs, index)
            for _ in range(cfg.dupe_factor):
                pairs += maker.pairs(doc, others)
            stats.documents += 1
            stats.sentences += num_sentences(doc)
        records = []
        for lo in range(0, len(pairs), streaming_lib.BATCH_PAIRS * 8):
            gen = numpy_generator(hash64("mask", cfg.random_seed, docs[0][0], lo))
            records += self.recorder.records(pairs[lo:lo + streaming_lib.BATCH_PAIRS * 8], gen, stats)
        random.Random(hash64("shuffle", cfg.random_seed, group, docs[0][0])).shuffle(records)
        for lo in range(0, len(records), RECORDS_PER_ELEMENT):
            yield frame(records[lo:lo + RECORDS_PER_ELEMENT])
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
    def create_accumulator(self):
        return dict.fromkeys(COUNTERS, 0)

    def add_input(self, acc, value):
        for k in COUNTERS:
            acc[k] += value[k]
        return acc

    def merge_accumulators(self, accumulators):
        out = self.create_accumulator()
        for acc in accumulators:
            self.add_input(out, acc)
        return out

    def extract_output(self, acc):
        return acc


def _write_json(data, path):
    with FileSystems.create(path) as f:
        f.write(json.dumps(data).encode())


def build(pipeline, cfg, pieces, output_prefix, num_shards, group_size, stats_path):
    """Add the pipeline's transforms; the stats counters end up as JSON in `stats_path`."""
    docs = (pipeline
            | "Pieces" >> beam.Create(pieces)
            | "SpreadPieces" >> beam.Reshuffle()
            | "ReadDocuments" >> beam.ParDo(ReadDocuments())
            | "TokenizeDocuments" >> beam.ParDo(TokenizeDocuments(cfg)))
    count = docs | "CountDocuments" >> beam.combiners.Count.Globally()
    made = (docs
            | "AssignGroup" >> beam.Map(assign_group, cfg.random_seed, group_size,
                                        beam.pvalue.AsSingleton(count))
            | "GroupForNSP" >> beam.GroupByKey()
            | "MakeInstances" >> beam.ParDo(MakeInstances(cfg)).with_outputs(STATS_TAG, main="records"))
    _ = made.records | "Write" >> beam.io.Write(_FramedSink(output_prefix, num_shards))
    _ = (made[STATS_TAG]
         | "SumStats" >> beam.CombineGlobally(SumStats())
         | "WriteStats" >> beam.Map(_write_json, stats_path))


def _check_crc32c():
    """Framing needs google-crc32c; fail before the pipeline starts, not in a worker."""
    from bert_tf.pretraining_data.writer import masked_crc
    masked_crc(b"")


def run(cfg, input_files, output_prefix, num_shards, group_size, stats_path, runner, beam_args,
        split_bytes=None):
    """Build and run the pipeline (blocking); returns the Stats of what was written."""
    from apache_beam.options.pipeline_options import PipelineOptions
    _check_crc32c()
    args = list(beam_args)
    if not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        args.append("--default_sdk_harness_log_level=WARNING")  # workers' INFO lines drown the output
    options = PipelineOptions(args + [f"--runner={runner}"])
    pipeline = beam.Pipeline(options=options)
    build(pipeline, cfg, plan_pieces(input_files, split_bytes), output_prefix, num_shards,
          group_size, stats_path)
    result = pipeline.run()
    result.wait_until_finish()
    with FileSystems.open(stats_path) as f:
        return Stats.from_dict(json.loads(f.read().decode()))


def written_files(output_prefix, since=0.0):
    """The shards the pipeline wrote for `output_prefix` (its default name template) at or
    after time `since` (older shards of another shard count may share the prefix)."""
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
