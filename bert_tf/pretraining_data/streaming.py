"""Mode `streaming`: bounded memory, several processes, resumable shards.

Design
- The input is cut into `num_shards` byte ranges of about equal size (gzip files, which cannot be
  seeked, go whole to the range holding their first byte; a tfds split is cut with
  `tfds.even_splits`). Shard s is made *only* from the documents starting in range s, with its
  own `random.Random` seeded from (random_seed, s). So a shard's bytes depend on the input, the
  flags and the number of shards, never on `--num_workers` or on what other shards did: a killed
  run resumed with `--resume` (finished shards skipped) gives the same files as an uninterrupted one.
- Documents are read in batches of about BATCH_CHARS characters (one `IdTokenizer.encode_lines`
  call each). For every document of a batch, `dupe_factor` passes of the original's chunking /
  NSP / truncation logic (same probabilities) run in lock-step (`instances.make_pairs`), but a
  random-next segment comes from another document of the batch or from a reservoir sample of
  at most `nsp_reservoir_size` earlier documents of the shard, not from the whole corpus. A
  shard's first batch always holds 2 documents or more; only a one-document shard draws from
  the first document of the next shard, and only a single-document corpus draws from itself
  (counted as `nsp_same_document`).
  Packed rows are collected into blocks of at least `shuffle_buffer_size` records; each block is
  put in a random order, masked and encoded at once. Memory is bounded by a batch, a block, the
  reservoir and the tokenizer cache, whatever the corpus size.
- Workers are plain Python processes (no TensorFlow; forked when the parent has not loaded
  it): they write their shard to `<shard>.tmp-<pid>` and rename it when the shard is done;
  the parent only gets progress counts and each shard's stats.
"""
import dataclasses
import hashlib
import random

from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data.instances import (DocumentBatch, RecordMaker, make_pairs,
                                                 numpy_generator)
from bert_tf.pretraining_data.stats import Stats



@dataclasses.dataclass
class StreamConfig:
    """Everything a worker needs (picklable)."""
    vocab: dict                 # token -> id, as load_vocab returns it
    do_lower_case: bool = True
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    random_seed: int = 12345
    do_whole_word_mask: bool = False
    whole_word_mask_per_word: bool = False
    nsp_reservoir_size: int = 1000
    shuffle_buffer_size: int = 10000
    token_cache_size: int = 1 << 18  # words; ~50 MB per worker at most


@dataclasses.dataclass
class ShardTask:
    """One output shard's input: its pieces, and where a one-document shard finds partners."""
    index: int
    pieces: list  # ("range", path, lo, hi) | ("file", path, size) | ("tfds", name, split, dir, key)
    size: int = 0  # bytes, for progress (0 when unknown)
    fallback: list = dataclasses.field(default_factory=list)  # other shards' pieces, next first
    output: str = ""  # the shard's file, written by the worker that makes it


def shard_seed(random_seed, shard_index):
    """The seed of shard `shard_index`'s `random.Random` and numpy Generator.

    Args:
        random_seed: `--random_seed`.
        shard_index: the shard.
    """
    digest = hashlib.sha256(f"bert_tf.streaming/{random_seed}/{shard_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# ---- planning ------------------------------------------------------------------------------

def plan_file_shards(input_files, num_shards):
    """Cut the concatenated input into `num_shards` byte ranges -> list of ShardTask.

    Args:
        input_files: the input files, in order (a .gz file goes whole to one shard).
        num_shards: ranges to cut into.
    """
    sizes = [docs_lib.file_size(p) for p in input_files]
    total = sum(sizes)
    bounds = [total * s // num_shards for s in range(num_shards + 1)]
    tasks = [ShardTask(s, [], bounds[s + 1] - bounds[s]) for s in range(num_shards)]
    base = 0
    for path, size in zip(input_files, sizes):
        if size == 0:
            continue
        if docs_lib.is_gzip(path):
            owner = max(s for s in range(num_shards) if bounds[s] <= base)
            tasks[owner].pieces.append(("file", path, size))
        else:
            for s in range(num_shards):
                lo, hi = max(bounds[s], base), min(bounds[s + 1], base + size)
                if lo < hi:
                    tasks[s].pieces.append(("range", path, lo - base, hi - base))
        base += size
    for s in range(num_shards):  # a one-document shard draws random-next from the next shard
        tasks[s].fallback = [p for t in tasks[s + 1:] + tasks[:s] for p in t.pieces]
    return tasks


def plan_tfds_shards(name, split, data_dir, text_key, num_shards):
    """A tfds split cut into `num_shards` even sub-splits -> list of ShardTask.

    Args:
        name, split, data_dir, text_key: as for `documents.iter_tfds_documents`.
        num_shards: sub-splits (`tfds.even_splits`).
    """
    if num_shards == 1:
        splits = [split]
    else:
        import tensorflow_datasets as tfds
        splits = list(tfds.even_splits(split, n=num_shards))  # split objects, not strings
    return [ShardTask(s, [("tfds", name, splits[s], data_dir, text_key)], 0)
            for s in range(num_shards)]


def _iter_task_documents(task):
    """(sentences, bytes) for each document of the shard, in input order."""
    for piece in task.pieces:
        kind = piece[0]
        if kind == "range":
            yield from docs_lib.iter_range_documents(piece[1], piece[2], piece[3])
        elif kind == "file":
            for doc in docs_lib.iter_file_documents(piece[1]):
                yield doc, 0
            yield [], piece[2]
        else:
            _, name, split, data_dir, text_key = piece
            for doc in docs_lib.iter_tfds_documents(name, split, data_dir, text_key):
                yield doc, 0


# ---- one shard ---------------------------------------------------------------------------

BATCH_CHARS = 1 << 19  # characters of text tokenized, paired, masked and encoded together


def _batches(pieces, tokenizer):
    """(DocumentBatch, documents read, input bytes) per batch of `pieces`' documents; a batch
    closes after BATCH_CHARS characters and 2 documents (the last one may be smaller)."""
    lines, doc_lines, chars, nbytes = [], [0], 0, 0
    for sentences, more in _iter_task_documents(ShardTask(-1, pieces)):
        nbytes += more
        if sentences:
            lines += sentences
            doc_lines.append(len(lines))
            chars += sum(map(len, sentences))
        if chars >= BATCH_CHARS and len(doc_lines) > 2:
            ids, lengths = tokenizer.encode_lines(lines)
            yield DocumentBatch.from_lines(ids, lengths, doc_lines), len(doc_lines) - 1, nbytes
            lines, doc_lines, chars, nbytes = [], [0], 0, 0
    if len(doc_lines) > 1 or nbytes:
        ids, lengths = tokenizer.encode_lines(lines)
        yield DocumentBatch.from_lines(ids, lengths, doc_lines), len(doc_lines) - 1, nbytes


def _first_document(pieces, tokenizer):
    for batch, _, _ in _batches(pieces, tokenizer):
        if len(batch):
            return batch.document(0)
    return None


def run_shard(task, cfg, tokenizer, send):
    """Make one shard; returns the shard's Stats. Deterministic in (task, cfg).

    Args:
        task: the `ShardTask`.
        cfg: the `StreamConfig`.
        tokenizer: an `IdTokenizer` for cfg's vocab.
        send: called with ("records", shard, framed records (bytes-like), records, documents,
            input bytes), once per block of records.
    """
    seed = shard_seed(cfg.random_seed, task.index)
    rng = random.Random(seed)
    rand = rng.random
    gen = numpy_generator(seed)
    stats = Stats()
    recorder = RecordMaker(cfg)
    reservoir, seen, capacity = [], 0, cfg.nsp_reservoir_size
    block, block_rows, docs_done, bytes_done = [], 0, 0, 0
    # Draws: pairs are counter-based (instances.make_pairs); the shuffling and masking use
    # `gen` (numpy), the reservoir `rng`; all seeded per shard.

    def flush():
        nonlocal block, block_rows, docs_done, bytes_done
        if block:
            data = recorder.records(block, gen, stats, shuffle=cfg.shuffle_buffer_size > 0)
        else:
            data = b""
        send(("records", task.index, data, block_rows, docs_done, bytes_done))
        block, block_rows, docs_done, bytes_done = [], 0, 0, 0

    def process(batch, extra=()):
        nonlocal seen, block_rows
        # Random-next partners: the reservoir (earlier documents) and the batch's other ones.
        pool = DocumentBatch.concat(reservoir + [batch] + list(extra))
        pairs = make_pairs(pool, len(reservoir), len(batch), cfg.dupe_factor, stats.documents,
                           cfg.max_seq_length, cfg.short_seq_prob, seed, stats)
        stats.documents += len(batch)
        stats.sentences += batch.num_sentences
        if len(pairs):
            block.append(recorder.pack(pool.flat, pairs))
            block_rows += len(pairs)
        for d in range(len(batch)):
            seen += 1
            if len(reservoir) < capacity:
                reservoir.append(batch.document(d))
            else:
                j = int(rand() * seen)
                if j < capacity:
                    reservoir[j] = batch.document(d)

    held = None  # the shard's first documents, until there are 2 (each needs a partner)
    for batch, ndocs, nbytes in _batches(task.pieces, tokenizer):
        docs_done += ndocs
        bytes_done += nbytes
        if held is not None:
            batch = DocumentBatch.concat([held, batch])
            held = None
        if not reservoir and len(batch) < 2:
            held = batch
            continue
        process(batch)
        if block_rows >= max(cfg.shuffle_buffer_size, 1):
            flush()
    if held is not None and len(held):  # a one-document shard: the next shard's first document
        other = _first_document(task.fallback, tokenizer)
        process(held, [other] if other is not None else [])
    flush()
    return stats
