"""Mode `beam`: the document -> instances -> masked records logic as an Apache Beam pipeline.

`create_pretraining_data.py --runner=DirectRunner|DataflowRunner|FlinkRunner|SparkRunner` (plus
that runner's own pipeline options, passed through) runs:

  input pieces (files cut into byte ranges; a .gz file is one piece)     Create + Reshuffle
  -> documents keyed by (file path, byte offset of their first line)     ReadDocuments
  -> token ids, empty documents dropped                                  TokenizeDocuments
  -> random NSP group per document, ~`nsp_reservoir_size` documents each AssignGroup + GroupByKey
  -> per document: `dupe_factor` passes of the original's chunking / NSP / truncation /
     masking (streaming.InstanceMaker), its random-next segments drawn from the other
     documents of its group, all draws from a seed hashed from (random_seed, document key)
  -> records, shuffled within the group                                  MakeInstances
  -> WriteToTFRecord(<output_file>, num_shards=--output_shards)          + stats JSON

The group of a document is a hash of (random_seed, key) modulo the number of groups (documents /
group size), so groups, partners and every draw depend only on the input and the flags: the set
of records is the same on any runner with any number of workers. Which shard a record lands in
and the order inside a shard are the runner's (WriteToTFRecord's) choice. Memory per worker is
bounded by one group (its documents and their records), not by the corpus.

Needs the `beam` extra (`pip install -c constraints.txt -e '.[beam]'`); nothing else in
bert_tf imports this module.
"""
import hashlib
import json
import posixpath
import random

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bert_tf import BertError
from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data import streaming as streaming_lib
from bert_tf.pretraining_data.stats import COUNTERS, Stats

SPLIT_BYTES = 64 << 20  # input piece size; output does not depend on it
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
    """(key, sentences) -> (key, list of id lists); documents without tokens are dropped."""

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        cfg = self.cfg
        self.tokenizer = streaming_lib.IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)

    def process(self, element):
        key, sentences = element
        doc = [ids for ids in map(self.tokenizer.encode, sentences) if ids]
        if doc:
            yield key, doc


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
    """(group, [(key, doc)]) -> serialized tf.train.Example records (+ a stats dict, tagged)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def setup(self):
        cfg = self.cfg
        self.maker = streaming_lib.InstanceMaker(cfg, None, None)
        self.batcher = None
        if not self.maker.whole_word and max(cfg.vocab.values()) < 1 << 21:
            self.batcher = streaming_lib.BatchMasker(cfg, 0, None)

    def process(self, element):
        group, items = element
        docs = sorted(items, key=lambda item: item[0])  # arrival order is the runner's
        cfg, maker, batcher = self.cfg, self.maker, self.batcher
        stats = Stats()
        maker.stats = stats
        records = []
        for index, (key, doc) in enumerate(docs):
            seed = hash64("doc", cfg.random_seed, key)
            maker.rng = random.Random(seed)
            others = _Others(docs, index)
            pairs = [p for _ in range(cfg.dupe_factor) for p in maker.pairs(doc, others)]
            if batcher is not None:
                batcher.stats = stats
                batcher.gen = batcher.np.random.Generator(batcher.np.random.PCG64(seed))
                records += batcher.encode(pairs)
            else:
                records += [maker.record(*p) for p in pairs]
            stats.documents += 1
            stats.sentences += len(doc)
        random.Random(hash64("shuffle", cfg.random_seed, group, docs[0][0])).shuffle(records)
        yield from records
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats.to_dict())


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
    _ = made.records | "Write" >> beam.io.WriteToTFRecord(output_prefix, num_shards=num_shards)
    _ = (made[STATS_TAG]
         | "SumStats" >> beam.CombineGlobally(SumStats())
         | "WriteStats" >> beam.Map(_write_json, stats_path))


def _check_crc32c():
    """WriteToTFRecord needs a CRC-32C implementation and only fails when it writes."""
    from apache_beam.io import tfrecordio
    try:
        tfrecordio._default_crc32c_fn(b"")
    except RuntimeError:
        raise BertError("--runner: WriteToTFRecord needs google-crc32c "
                        "(pip install -c constraints.txt google-crc32c)") from None


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
    """The shards WriteToTFRecord wrote for `output_prefix` (its default name template) at or
    after time `since` (older shards of another shard count may share the prefix)."""
    matches = FileSystems.match([output_prefix + "-?????-of-?????"])[0].metadata_list
    return sorted(m.path for m in matches if m.last_updated_in_seconds >= since - 2)


def remove_temp_dirs(output_prefix):
    """Delete the temp folders a failed WriteToTFRecord leaves beside the output (driver side)."""
    import tensorflow as tf
    directory, base = posixpath.split(output_prefix)
    try:
        for path in tf.io.gfile.glob(posixpath.join(directory or ".", f"beam-temp-{base}-*")):
            tf.io.gfile.rmtree(path)
    except tf.errors.OpError:  # best effort: never hide the error that brought us here
        pass
