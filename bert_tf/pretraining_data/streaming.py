"""Mode `streaming`: bounded memory, several processes, resumable shards.

Design
- The input is cut into `num_shards` byte ranges of about equal size (gzip files, which cannot be
  seeked, go whole to the range holding their first byte; a tfds split is cut with
  `tfds.even_splits`). Shard s is made *only* from the documents starting in range s, with its
  own `random.Random` seeded from (random_seed, s). So a shard's bytes depend on the input, the
  flags and the number of shards, never on `--num_workers` or on what other shards did: a killed
  run resumed with `--resume` (finished shards skipped) gives the same files as an uninterrupted one.
- Per document: `dupe_factor` passes of the original's chunking/NSP/truncation/masking logic
  (same probabilities), but a random-next segment comes from a reservoir sample of at most
  `nsp_reservoir_size` earlier documents of the shard, not from the whole corpus; instances
  go through a shuffle buffer of `shuffle_buffer_size` records. Memory is bounded by those two
  buffers and the tokenizer cache, whatever the corpus size.
- Workers are plain Python processes (no TensorFlow): they tokenize with a per-word cache,
  work on ids, encode records with `schema.RecordEncoder` and send them to the parent, which
  writes `<shard>.tmp-<pid>` with tf.io.TFRecordWriter and renames it when the shard is done.
- Masking: candidates sampled uniformly (rng.sample, same distribution as the original's
  shuffle-then-take); 80/10/10 decided with one draw per token, or once per word with
  `whole_word_mask_per_word`. The original's per-token whole-word masking stays available
  under `do_whole_word_mask`.
"""
import dataclasses
import hashlib
import itertools
import queue as queue_lib
import random
import re
import sys
import time
import traceback

from bert_tf import BertError
from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data.masking import num_to_predict
from bert_tf.pretraining_data.schema import RecordEncoder
from bert_tf.pretraining_data.stats import Stats
from bert_tf.tokenization import CLS, MASK, SEP, BasicTokenizer, WordpieceTokenizer

RECORD_BATCH = 1000  # records per message from a worker to the writer


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
    index: int
    pieces: list  # ("range", path, lo, hi) | ("file", path, size) | ("tfds", name, split, dir, key)
    size: int = 0  # bytes, for progress (0 when unknown)


def shard_seed(random_seed, shard_index):
    digest = hashlib.sha256(f"bert_tf.streaming/{random_seed}/{shard_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# ---- planning ------------------------------------------------------------------------------

def plan_file_shards(input_files, num_shards):
    """Cut the concatenated input into `num_shards` byte ranges -> list of ShardTask."""
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
    return tasks


def plan_tfds_shards(name, split, data_dir, text_key, num_shards):
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


# ---- tokenization --------------------------------------------------------------------------

# Characters that Python's str.split() treats as whitespace but the original tokenizer deletes
# (so they join their neighbours): a sentence containing one takes the uncached path.
_SPLIT_MISMATCH = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
_ASCII_CONTROL = {c: None for c in list(range(32)) + [127]}
_ASCII_PUNCT_SPLIT = re.compile(r"[!-/:-@\[-`{-~]|[^!-/:-@\[-`{-~]+")


class IdTokenizer:
    """FullTokenizer's output as ids, cached per whitespace-separated word.

    FullTokenizer works word by word after whitespace splitting, so tokenize(text) equals the
    concatenation over text.split() of tokenize(word), except for _SPLIT_MISMATCH characters.
    """

    def __init__(self, vocab, do_lower_case=True, cache_size=1 << 18):
        self.vocab = vocab
        self.basic = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece = WordpieceTokenizer(vocab=vocab)
        self.cache_size = cache_size
        self.cache = {}

    def _slow(self, text):
        vocab, wp = self.vocab, self.wordpiece
        return [vocab[p] for t in self.basic.tokenize(text) for p in wp.tokenize(t)]

    def _word(self, word):
        """Ids of one whitespace-free word; ASCII words skip the per-character Unicode checks."""
        if not word.isascii():
            return self._slow(word)
        # ASCII: cleaning only deletes control characters; no CJK; NFD/accent stripping is a
        # no-op; every ASCII punctuation/symbol is a split point.
        word = word.translate(_ASCII_CONTROL)
        if self.basic.do_lower_case:
            word = word.lower()
        vocab, wp = self.vocab, self.wordpiece
        return [vocab[p] for piece in _ASCII_PUNCT_SPLIT.findall(word) for p in wp.tokenize(piece)]

    def encode(self, text):
        if _SPLIT_MISMATCH.search(text):
            return self._slow(text)
        words = text.split()
        cache = self.cache
        try:
            return list(itertools.chain.from_iterable(map(cache.__getitem__, words)))
        except KeyError:
            if len(cache) >= self.cache_size:  # bounded memory: start over
                cache.clear()
                getattr(self.wordpiece, "_cache", {}).clear()
            for w in words:
                if w not in cache:
                    cache[w] = tuple(self._word(w))
            return list(itertools.chain.from_iterable(map(cache.__getitem__, words)))


# ---- instances -----------------------------------------------------------------------------

class InstanceMaker:
    """The original's per-document algorithm on ids, with a reservoir for random-next."""

    def __init__(self, cfg, rng, stats):
        vocab = cfg.vocab
        self.cfg, self.rng, self.stats = cfg, rng, stats
        self.cls, self.sep, self.mask = vocab[CLS], vocab[SEP], vocab[MASK]
        self.random_ids = list(vocab.values())  # uniform over vocab lines, like the original
        self.is_continuation = bytearray(max(vocab.values()) + 1)
        for token, i in vocab.items():
            if token.startswith("##"):
                self.is_continuation[i] = 1
        self.whole_word = cfg.do_whole_word_mask or cfg.whole_word_mask_per_word
        self.encoder = RecordEncoder(cfg.max_seq_length, cfg.max_predictions_per_seq)

    def pairs(self, doc, reservoir):
        """(tokens_a, tokens_b, is_random_next) of one pass over `doc`, truncated to fit."""
        rng, cfg = self.rng, self.cfg
        max_num_tokens = cfg.max_seq_length - 3
        target = max_num_tokens
        if rng.random() < cfg.short_seq_prob:
            target = rng.randint(2, max_num_tokens)
        out = []
        rand = rng.random
        chain = itertools.chain.from_iterable
        chunk, length, i, n_doc = [], 0, 0, len(doc)
        while i < n_doc:
            segment = doc[i]
            chunk.append(segment)
            length += len(segment)
            if i == n_doc - 1 or length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a = list(chain(chunk[:a_end]))
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    if len(chunk) == 1:
                        self.stats.nsp_forced_random_next += 1
                    target_b = target - len(a)
                    other = reservoir[int(rand() * len(reservoir))] if reservoir else doc
                    b = []
                    for j in range(int(rand() * len(other)), len(other)):
                        b.extend(other[j])
                        if len(b) >= target_b:
                            break
                    i -= len(chunk) - a_end
                else:
                    is_random_next = False
                    b = list(chain(chunk[a_end:]))
                if len(a) + len(b) > max_num_tokens:
                    a, b = self._truncate(a, b, max_num_tokens)
                out.append((a, b, is_random_next))
                chunk, length = [], 0
            i += 1
        return out

    def _truncate(self, a, b, max_num_tokens):
        """The original's truncation in distribution, with two draws instead of one per token.

        Which side loses each token depends only on the lengths (the longer one; b on ties),
        so the counts per side are arithmetic; front-vs-back is a fair coin per token, so the
        number cut from the front is Binomial(count, 1/2) = popcount of `count` random bits.
        """
        la, lb = len(a), len(b)
        excess = la + lb - max_num_tokens
        if la > lb:
            first_a, first_b = min(excess, la - lb), 0
        else:
            first_a, first_b = 0, min(excess, lb - la)
        rest = excess - first_a - first_b  # then alternating, starting with b (tie -> b)
        cut_a = first_a + rest // 2
        cut_b = first_b + rest - rest // 2
        getrandbits = self.rng.getrandbits
        front_a = bin(getrandbits(cut_a)).count("1") if cut_a else 0
        front_b = bin(getrandbits(cut_b)).count("1") if cut_b else 0
        stats = self.stats
        stats.truncated_instances += 1
        stats.truncated_tokens += excess
        return a[front_a:la - (cut_a - front_a)], b[front_b:lb - (cut_b - front_b)]

    def record(self, a, b, is_random_next):
        """Mask one pair and encode it (the per-instance path, used for whole-word masking)."""
        rng, cfg, stats = self.rng, self.cfg, self.stats
        la, lb = len(a), len(b)
        n = la + lb + 3
        ids = [self.cls]
        ids += a
        ids.append(self.sep)
        ids += b
        ids.append(self.sep)
        k = num_to_predict(n, cfg.masked_lm_prob, cfg.max_predictions_per_seq)
        rand = rng.random

        if not self.whole_word:
            # k uniform candidates by a partial Fisher-Yates shuffle (the original's
            # shuffle-then-take-first-k has the same distribution, with far more draws).
            candidates = list(range(1, la + 1))
            candidates += range(la + 2, n - 1)
            n_cand = len(candidates)
            if k > n_cand:
                k = n_cand
            for j in range(k):
                r = j + int(rand() * (n_cand - j))
                candidates[j], candidates[r] = candidates[r], candidates[j]
            positions = candidates[:k]
            positions.sort()
            groups = [[p] for p in positions] if cfg.whole_word_mask_per_word else None
        else:
            is_cont = self.is_continuation
            words = []
            for p in itertools.chain(range(1, la + 1), range(la + 2, n - 1)):
                if words and is_cont[ids[p]]:
                    words[-1].append(p)
                else:
                    words.append([p])
            rng.shuffle(words)
            groups, count = [], 0
            for w in words:
                if count >= k:
                    break
                if count + len(w) <= k:
                    groups.append(w)
                    count += len(w)
            positions = sorted(p for w in groups for p in w)

        labels = [ids[p] for p in positions]
        mask_id, random_ids = self.mask, self.random_ids
        n_vocab = len(random_ids)
        n_mask = n_rand = 0
        if not cfg.whole_word_mask_per_word:
            for p in positions:  # 80/10/10 per token, one draw
                r = rand()
                if r < 0.8:
                    ids[p] = mask_id
                    n_mask += 1
                elif r >= 0.9:
                    new = random_ids[int(rand() * n_vocab)]
                    n_rand += new != ids[p]
                    ids[p] = new
        else:
            for w in groups:  # 80/10/10 once per word
                r = rand()
                if r < 0.8:
                    for p in w:
                        ids[p] = mask_id
                    n_mask += len(w)
                elif r >= 0.9:
                    for p in w:
                        new = random_ids[int(rand() * n_vocab)]
                        n_rand += new != ids[p]
                        ids[p] = new
        stats.instances += 1
        stats.tokens += n
        stats.candidates += n - 3
        stats.masked += len(positions)
        stats.masked_as_mask += n_mask
        stats.masked_random += n_rand
        stats.masked_kept += len(positions) - n_mask - n_rand
        if is_random_next:
            stats.nsp_random_next += 1
        else:
            stats.nsp_actual_next += 1
        return self.encoder.encode(ids, la + 2, positions, labels, is_random_next)


def _varint_rows(matrix):
    """Packed varints of each row of a non-negative int matrix -> (bytes, row starts, row ends)."""
    import numpy as np
    if matrix.size and matrix.max() >= 1 << 21:
        raise ValueError("ids >= 2**21")
    nbytes = 1 + (matrix >= 0x80) + (matrix >= 0x4000)
    stacked = np.stack([(matrix & 0x7F) | ((matrix >= 0x80) << 7),
                        ((matrix >> 7) & 0x7F) | ((matrix >= 0x4000) << 7),
                        matrix >> 14], axis=-1).astype(np.uint8)
    flat = stacked[np.arange(3) < nbytes[..., None]].tobytes()
    ends = np.cumsum(nbytes.sum(axis=1))
    starts = ends - nbytes.sum(axis=1)
    return flat, starts.tolist(), ends.tolist()


class BatchMasker:
    """Masking and encoding of many pairs at once with numpy (non-whole-word masking).

    Same distribution as the per-instance path: k = min(max_predictions, max(1, round(n * p)))
    candidates chosen uniformly (argsort of random keys), each then [MASK] (80 %), kept (10 %)
    or replaced by a uniformly drawn vocab entry (10 %). Draws come from a numpy PCG64 seeded
    per shard, so the shard stays deterministic.
    """

    def __init__(self, cfg, seed, stats):
        import numpy as np
        self.np = np
        self.cfg, self.stats = cfg, stats
        self.gen = np.random.Generator(np.random.PCG64(seed))
        vocab = cfg.vocab
        self.cls, self.sep, self.mask = vocab[CLS], vocab[SEP], vocab[MASK]
        self.random_ids = np.array(list(vocab.values()), dtype=np.int64)
        self.encoder = RecordEncoder(cfg.max_seq_length, cfg.max_predictions_per_seq)

    def encode(self, pairs):
        np, cfg, stats, gen = self.np, self.cfg, self.stats, self.gen
        seq, preds = cfg.max_seq_length, cfg.max_predictions_per_seq
        count = len(pairs)
        la = np.fromiter((len(a) for a, _, _ in pairs), np.int64, count)
        lb = np.fromiter((len(b) for _, b, _ in pairs), np.int64, count)
        n = la + lb + 3
        flat = []
        cls, sep = self.cls, self.sep
        for a, b, _ in pairs:
            flat.append(cls)
            flat += a
            flat.append(sep)
            flat += b
            flat.append(sep)
        ids = np.zeros((count, seq), np.int64)
        starts = np.cumsum(n) - n
        ids[np.repeat(np.arange(count), n), np.arange(int(n.sum())) - np.repeat(starts, n)] = flat

        col = np.arange(seq)[None, :]
        la_c, n_c = la[:, None], n[:, None]
        candidate = ((col >= 1) & (col <= la_c)) | ((col >= la_c + 2) & (col <= n_c - 2))
        k = np.minimum(preds, np.maximum(1, np.round(n * cfg.masked_lm_prob).astype(np.int64)))
        k = np.minimum(k, n - 3)
        width = min(preds, seq)
        keys = gen.random((count, seq))
        keys[~candidate] = 2.0
        order = np.argsort(keys, axis=1)[:, :width]
        pos = np.full((count, preds), seq, np.int64)
        pos[:, :width] = np.where(np.arange(width)[None, :] < k[:, None], order, seq)
        pos.sort(axis=1)
        chosen = pos < seq
        pos[~chosen] = 0
        rows = np.arange(count)[:, None]
        labels = np.where(chosen, ids[rows, pos], 0)
        u = gen.random((count, preds))
        replacement = self.random_ids[gen.integers(0, len(self.random_ids), (count, preds))]
        as_mask = chosen & (u < 0.8)
        as_random = chosen & (u >= 0.9)
        new = np.where(as_mask, self.mask, np.where(as_random, replacement, labels))
        r, c = np.nonzero(chosen)
        ids[r, pos[r, c]] = new[r, c]

        m = chosen.sum(axis=1)
        stats.instances += count
        stats.tokens += int(n.sum())
        stats.candidates += int(n.sum()) - 3 * count
        stats.masked += int(m.sum())
        stats.masked_as_mask += int(as_mask.sum())
        n_random = int((as_random & (replacement != labels)).sum())
        stats.masked_random += n_random
        stats.masked_kept += int(m.sum()) - int(as_mask.sum()) - n_random
        n_next = sum(1 for _, _, nsp in pairs if nsp)
        stats.nsp_random_next += n_next
        stats.nsp_actual_next += count - n_next

        ids_flat, ids_s, ids_e = _varint_rows(ids)
        lm_flat, lm_s, lm_e = _varint_rows(labels)
        if seq <= 128:
            pos_flat = pos.astype(np.uint8).tobytes()
            pos_s = list(range(0, count * preds, preds))
            pos_e = [x + preds for x in pos_s]
        else:
            pos_flat, pos_s, pos_e = _varint_rows(pos)
        assemble = self.encoder.assemble
        return [assemble(ids_flat[ids_s[i]:ids_e[i]], ni, lai + 2, lm_flat[lm_s[i]:lm_e[i]],
                         pos_flat[pos_s[i]:pos_e[i]], mi, pairs[i][2])
                for i, ni, lai, mi in zip(range(count), n.tolist(), la.tolist(), m.tolist())]


BATCH_PAIRS = 512  # pairs masked together by BatchMasker


def run_shard(task, cfg, tokenizer, send):
    """Make one shard; `send(message)` receives ("records", shard, [bytes], docs, bytes).

    Returns the shard's Stats. Deterministic in (task, cfg).
    """
    seed = shard_seed(cfg.random_seed, task.index)
    rng = random.Random(seed)
    rand = rng.random
    stats = Stats()
    maker = InstanceMaker(cfg, rng, stats)
    batcher = None if maker.whole_word or max(cfg.vocab.values()) >= 1 << 21 else \
        BatchMasker(cfg, seed, stats)
    reservoir, seen = [], 0
    buffer, buffer_size = [], cfg.shuffle_buffer_size
    pending, out, docs_done, bytes_done = [], [], 0, 0

    def shuffle_in(records):
        for record in records:
            if len(buffer) < buffer_size:
                buffer.append(record)
            elif buffer_size:
                j = int(rand() * buffer_size)
                out.append(buffer[j])
                buffer[j] = record
            else:
                out.append(record)

    for sentences, nbytes in _iter_task_documents(task):
        bytes_done += nbytes
        doc = [ids for ids in map(tokenizer.encode, sentences) if ids]
        if doc:
            stats.documents += 1
            stats.sentences += len(doc)
            docs_done += 1
            for _ in range(cfg.dupe_factor):
                pairs = maker.pairs(doc, reservoir)
                if batcher is None:
                    shuffle_in([maker.record(*p) for p in pairs])
                else:
                    pending += pairs
            if len(pending) >= BATCH_PAIRS:
                shuffle_in(batcher.encode(pending))
                pending = []
            seen += 1
            if len(reservoir) < cfg.nsp_reservoir_size:
                reservoir.append(doc)
            else:
                j = int(rand() * seen)
                if j < cfg.nsp_reservoir_size:
                    reservoir[j] = doc
        if len(out) >= RECORD_BATCH:
            send(("records", task.index, out, docs_done, bytes_done))
            out, docs_done, bytes_done = [], 0, 0
    if pending:
        shuffle_in(batcher.encode(pending))
    rng.shuffle(buffer)
    out.extend(buffer)
    for start in range(0, max(len(out), 1), RECORD_BATCH):
        send(("records", task.index, out[start:start + RECORD_BATCH], docs_done, bytes_done))
        docs_done = bytes_done = 0
    return stats


# ---- processes -----------------------------------------------------------------------------

def _one_line(exc):
    if isinstance(exc, BertError):
        return str(exc)
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {last.filename}:{last.lineno}" if last else ""
    return f"internal error in a streaming worker: {type(exc).__name__}: {exc}{where}"


def peak_rss_mb():
    """Peak resident memory of this process image (VmHWM; unlike ru_maxrss it does not count
    the parent's pages a spawned child had mapped between fork and exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker_main(cfg, task_queue, result_queue):
    tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)
    while True:
        task = task_queue.get()
        if task is None:
            return
        try:
            stats = run_shard(task, cfg, tokenizer, result_queue.put)
            result_queue.put(("done", task.index, stats.to_dict(), peak_rss_mb()))
        except BaseException as e:  # report, then stop: the parent aborts the run
            result_queue.put(("error", task.index, _one_line(e)))
            return


def run_tasks(tasks, cfg, num_workers, on_message):
    """Run shard tasks, in this process (num_workers <= 1) or in worker processes.

    `on_message` gets ("records", shard, [bytes], docs, bytes) and
    ("done", shard, stats_dict, worker_peak_rss_mb or None), in order per shard. Raises BertError on the first failing shard (workers are stopped).
    """
    if not tasks:
        return
    if num_workers <= 1:
        tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)
        for task in tasks:
            try:
                stats = run_shard(task, cfg, tokenizer, on_message)
            except BertError:
                raise
            except Exception as e:
                raise BertError(_one_line(e)) from e
            on_message(("done", task.index, stats.to_dict(), None))
        return

    import multiprocessing
    # spawn: the parent has TensorFlow loaded; forking it is not safe. Workers never import TF
    # (except for --tfds_dataset shards).
    ctx = multiprocessing.get_context("spawn")
    task_queue = ctx.Queue()
    result_queue = ctx.Queue(maxsize=8 * num_workers)  # back-pressure on the writer
    for task in tasks:
        task_queue.put(task)
    workers = []
    for _ in range(min(num_workers, len(tasks))):
        task_queue.put(None)
    try:
        for _ in range(min(num_workers, len(tasks))):
            p = ctx.Process(target=_worker_main, args=(cfg, task_queue, result_queue), daemon=True)
            p.start()
            workers.append(p)
        remaining = {t.index for t in tasks}
        while remaining:
            try:
                message = result_queue.get(timeout=1.0)
            except queue_lib.Empty:
                dead = [p for p in workers if not p.is_alive() and p.exitcode not in (0, None)]
                if dead or not any(p.is_alive() for p in workers):
                    # Drain what is left before concluding a worker died silently.
                    try:
                        message = result_queue.get(timeout=1.0)
                    except queue_lib.Empty:
                        codes = ", ".join(str(p.exitcode) for p in workers)
                        raise BertError(f"--num_workers: a worker process died (exit codes {codes}); "
                                        "out of memory?") from None
                else:
                    continue
            if message[0] == "error":
                raise BertError(message[2])
            on_message(message)
            if message[0] == "done":
                remaining.discard(message[1])
        for p in workers:
            p.join(timeout=10)
    finally:
        for p in workers:
            if p.is_alive():
                p.terminate()
        for p in workers:
            p.join(timeout=5)
        task_queue.cancel_join_thread()
        result_queue.cancel_join_thread()


class Progress:
    """tqdm over input bytes with documents/s and instances/s; silent when not a terminal."""

    def __init__(self, total_bytes, enabled=None):
        from tqdm import tqdm
        self.start = time.time()
        self.docs = self.instances = 0
        self.bar = tqdm(total=total_bytes or None, unit="B", unit_scale=True, dynamic_ncols=True,
                        desc="streaming", disable=enabled is False or (enabled is None and not sys.stderr.isatty()),
                        file=sys.stderr, mininterval=1.0)

    def update(self, docs, instances, nbytes):
        self.docs += docs
        self.instances += instances
        elapsed = max(time.time() - self.start, 1e-9)
        if nbytes:
            self.bar.update(nbytes)
        self.bar.set_postfix_str(f"{self.docs / elapsed:.0f} docs/s, {self.instances / elapsed:.0f} inst/s",
                                 refresh=False)

    def close(self):
        self.bar.close()
