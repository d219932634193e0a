"""create_pretraining_data's fast path: the vectorised encoder and masker, the bisecting pair
maker against the plain sentence loop, TFRecord framing, the TF-free start, and the streaming
NSP look-ahead (no random-next segment from the instance's own document)."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import bert_tf  # noqa: F401
from bert_tf.pretraining_data import batch_encoder, documents, instances, schema, writer
from bert_tf.pretraining_data.masking import BatchMasker, num_to_predict
from bert_tf.pretraining_data.runner import Options, run
from bert_tf.pretraining_data.stats import Stats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- encoding and framing ------------------------------------------------------------------

@pytest.mark.parametrize("seq,preds,max_id", [(24, 4, 100), (128, 20, 30000), (200, 30, 200),
                                              (512, 80, (1 << 21) - 1)])
def test_batch_encoder_bytes_equal_the_proto(seq, preds, max_id):
    rng = np.random.default_rng(seq)
    rows = 40
    n = rng.integers(5, seq + 1, rows)
    n[0] = seq  # no padding
    a = np.array([rng.integers(2, x - 1) for x in n])
    m = np.minimum(rng.integers(0, preds + 1, rows), n - 3)
    m[1] = preds if n[1] - 3 >= preds else m[1]
    ids = np.zeros((rows, seq), np.int64)
    pos = np.zeros((rows, preds), np.int64)
    lab = np.zeros((rows, preds), np.int64)
    for i in range(rows):
        ids[i, :n[i]] = rng.integers(0, max_id + 1, n[i])
        pos[i, :m[i]] = np.sort(rng.choice(np.arange(1, n[i]), m[i], replace=False))
        lab[i, :m[i]] = rng.integers(0, max_id + 1, m[i])
    nsp = rng.integers(0, 2, rows).astype(bool)
    encoder = batch_encoder.BatchEncoder(seq, preds)
    got = encoder.encode(ids, n, a, pos, lab, m, nsp)
    assert encoder.encode_framed(ids, n, a, pos, lab, m, nsp).tobytes() == writer.frame(got)
    for i in range(rows):
        features = schema.pad_features(ids[i, :n[i]].tolist(), [0] * a[i] + [1] * (n[i] - a[i]),
                                       pos[i, :m[i]].tolist(), lab[i, :m[i]].tolist(),
                                       bool(nsp[i]), seq, preds)
        assert got[i] == schema.serialize_example(features), i


def test_framing_is_read_back_by_tensorflow(tmp_path):
    import tensorflow as tf
    records = [b"", b"x", bytes(range(256)) * 40, b"last"]
    f = writer.RecordFile(str(tmp_path / "r.tfrecord"))
    f.write(records[0])
    f.write_framed(writer.frame(records[1:]), 3)
    f.commit()
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "r.tfrecord"))] == records
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as w:
        for r in records:
            w.write(r)
    assert (tmp_path / "tf.tfrecord").read_bytes() == (tmp_path / "r.tfrecord").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["r.tfrecord", "tf.tfrecord"]  # no temp file left


# ---- pairs: the vectorised lock-step maker == the original's sentence loop ------------------

def _reference_truncate(seed, stream, step, a, b, max_num_tokens):
    """The original's token-by-token truncation; coin k of a side is bit k of its draws."""
    a, b, removed = list(a), list(b), {"a": 0, "b": 0}
    while len(a) + len(b) > max_num_tokens:
        side = "a" if len(a) > len(b) else "b"
        seq = a if side == "a" else b
        k = removed[side]
        base = instances._TRUNC_A if side == "a" else instances._TRUNC_B
        if instances.bits(seed, stream, step, base + k // 64) >> (k % 64) & 1:
            del seq[0]
        else:
            seq.pop()
        removed[side] += 1
    return a, b


def _reference_pairs(seed, stream, doc, partners, max_seq_length, short_seq_prob):
    """The original's per-sentence loop for one pass over `doc`, with make_pairs's draws."""
    def u(step, slot):
        return instances.uniform(seed, stream, step, slot)
    max_num_tokens = max_seq_length - 3
    target = max_num_tokens
    if u(0, 0) < short_seq_prob:
        target = 2 + int(u(0, 1) * (max_num_tokens - 1))
    out, chunk, length, i, step = [], [], 0, 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            step += 1
            a_end = 1 + int(u(step, 0) * (len(chunk) - 1)) if len(chunk) >= 2 else 1
            a = [t for s in chunk[:a_end] for t in s]
            if len(chunk) == 1 or u(step, 1) < 0.5:
                other = partners[int(u(step, 2) * len(partners))] if partners else doc
                b = []
                for j in range(int(u(step, 3) * len(other)), len(other)):
                    b.extend(other[j])
                    if len(b) >= target - len(a):
                        break
                i -= len(chunk) - a_end
                nsp = True
            else:
                b = [t for s in chunk[a_end:] for t in s]
                nsp = False
            a, b = _reference_truncate(seed, stream, step, a, b, max_num_tokens)
            out.append((a, b, nsp))
            chunk, length = [], 0
        i += 1
    return out


def _batch(docs):
    lines = [s for d in docs for s in d]
    doc_lines = np.cumsum([0] + [len(d) for d in docs])
    flat = np.array([t for s in lines for t in s], np.int32)
    return instances.DocumentBatch.from_lines(flat, [len(s) for s in lines], doc_lines)


@pytest.mark.parametrize("seq,short", [(128, 0.1), (24, 0.5), (8, 0.9)])
def test_pairs_equal_the_sentence_loop(seq, short):
    gen = random.Random(seq)
    docs = [[[gen.randint(5, 99) for _ in range(gen.randint(1, 40))]
             for _ in range(gen.randint(1, 30))] for _ in range(40)]
    docs += [[[7]], [[1], [2], [3]], [[4, 5]], [[gen.randint(5, 99) for _ in range(300)]]]
    pool, dupe, seed, first, key0 = _batch(docs), 3, 12345 + seq, 5, 1000
    stats = Stats()
    pairs = instances.make_pairs(pool, first, len(docs) - first, dupe, key0, seq, short, seed, stats)
    flat = pool.flat.tolist()
    got = {}
    for i in np.lexsort((pairs.chunk, pairs.stream)):
        a = flat[pairs.a_start[i]:pairs.a_start[i] + pairs.a_len[i]]
        b = flat[pairs.b_start[i]:pairs.b_start[i] + pairs.b_len[i]]
        got.setdefault(int(pairs.stream[i]), []).append((a, b, bool(pairs.is_random_next[i])))
    expected, truncated = {}, 0
    for d in range(first, len(docs)):
        for p in range(dupe):
            stream = (key0 + d - first) * dupe + p
            expected[stream] = _reference_pairs(seed, stream, docs[d], docs[:d] + docs[d + 1:],
                                                seq, short)
            assert got[stream] == expected[stream], (d, p)
    assert len(got) == len(expected)
    assert stats.truncated_instances > 0 and stats.nsp_same_document == 0
    one = instances.make_pairs(_batch(docs[:1]), 0, 1, 2, 0, seq, short, seed, stats)
    assert stats.nsp_same_document == int(one.is_random_next.sum()) > 0  # no other document


def test_document_batch_drops_empty_lines_and_documents():
    batch = instances.DocumentBatch.from_lines(np.arange(7, dtype=np.int32), [2, 0, 1, 0, 0, 4],
                                               [0, 2, 3, 5, 6])
    assert batch.off.tolist() == [0, 2, 3, 7] and batch.doc.tolist() == [0, 1, 2, 3]
    assert batch.document(2).flat.tolist() == [3, 4, 5, 6]
    both = instances.DocumentBatch.concat([batch, batch.document(0)])
    assert both.doc.tolist() == [0, 1, 2, 3, 4] and both.off.tolist() == [0, 2, 3, 7, 9]
    assert both.flat.tolist() == list(range(7)) + [0, 1]


# ---- masking -------------------------------------------------------------------------------

def _packed(pairs, seq):
    """[(a, b, is_random_next)] -> pack_rows's rows (ids, n, len_a) and the NSP labels."""
    flat, cols = [], [[] for _ in range(5)]
    for a, b, r in pairs:
        for col, value in zip(cols, (len(flat), len(a), len(flat) + len(a), len(b), r)):
            col.append(value)
        flat += a + b
    pairs = instances.Pairs(*(np.array(c) for c in cols), np.zeros(len(pairs)), np.zeros(len(pairs)))
    ids, n, la = instances.pack_rows(np.array(flat, np.int32), pairs, seq, 2, 3)
    return ids, n, la, pairs.is_random_next.astype(bool)


def test_batch_masker_counts_and_positions():
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b",
                                         "##c", "##d", "e"])}
    rng = random.Random(0)
    pairs = [([rng.randint(5, 9) for _ in range(rng.randint(1, 30))],
              [rng.randint(5, 9) for _ in range(rng.randint(1, 30))], bool(i % 2))
             for i in range(300)]
    for whole, per_word in ((False, False), (True, False), (True, True)):
        masker = BatchMasker(vocab, 64, 10, 0.15, whole_word=whole, per_word=per_word)
        stats = Stats()
        ids, n, a2, pos, labels, m, nsp = masker.mask_rows(
            *_packed(pairs, 64), instances.numpy_generator(1), stats)
        for i, (a, b, r) in enumerate(pairs):
            original = [2] + a + [3] + b + [3]
            k = num_to_predict(len(original), 0.15, 10)
            assert n[i] == len(original) and a2[i] == len(a) + 2 and nsp[i] == r
            assert m[i] == k if not whole else m[i] <= k
            p = pos[i, :m[i]].tolist()
            assert p == sorted(set(p)) and all(0 < q < n[i] - 1 and q != len(a) + 1 for q in p)
            assert labels[i, :m[i]].tolist() == [original[q] for q in p]
            assert (pos[i, m[i]:] == 0).all() and (labels[i, m[i]:] == 0).all()
            unmasked = [q for q in range(n[i]) if q not in p]
            assert [int(ids[i, q]) for q in unmasked] == [original[q] for q in unmasked]
            if whole:  # a ## piece is masked with the piece before it (across [SEP] too)
                cand = [q for q in range(1, n[i] - 1) if q != len(a) + 1]
                for prev, q in zip(cand, cand[1:]):
                    if original[q] in (7, 8):
                        assert (q in p) == (prev in p)
        assert stats.instances == len(pairs) and stats.masked == int(m.sum())
        assert stats.masked == stats.masked_as_mask + stats.masked_kept + stats.masked_random


# ---- NSP: never the instance's own document ------------------------------------------------

def _one_token_documents(tmp_path, num_docs, sentences=6):
    """Document k is made of the word dk only: a record's B reveals the document it came from."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"d{k}" for k in range(num_docs)]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    text = "\n\n".join("\n".join(" ".join([f"d{k}"] * 7) for _ in range(sentences))
                       for k in range(num_docs))
    (tmp_path / "corpus.txt").write_text(text + "\n")
    return str(tmp_path / "corpus.txt"), str(tmp_path / "vocab.txt")


def _same_document_pairs(paths, seq):
    same = random_next = 0
    for r in schema.parse_records(paths, seq, 4):
        ids = r["input_ids"].copy()
        m = int(r["masked_lm_weights"].sum())
        ids[r["masked_lm_positions"][:m]] = r["masked_lm_ids"][:m]
        n = int(r["input_mask"].sum())
        seg = r["segment_ids"][:n]
        a = {int(t) for t, s in zip(ids[:n], seg) if s == 0} - {2, 3}
        b = {int(t) for t, s in zip(ids[:n], seg) if s == 1} - {3}
        assert len(a) == 1 and len(b) == 1
        if r["next_sentence_labels"][0]:
            random_next += 1
            same += a == b
        else:
            assert a == b
    return same, random_next


@pytest.mark.parametrize("shards", [1, 3, 7])
def test_streaming_random_next_never_from_the_same_document(tmp_path, shards):
    # 7 equal documents: with 7 shards every shard holds one (its partner: the next shard's).
    corpus, vocab = _one_token_documents(tmp_path, 7)
    data = run(Options(input_file=corpus, vocab_file=vocab, mode="streaming", dupe_factor=5,
                       max_seq_length=24, max_predictions_per_seq=4, output_shards=shards,
                       output_file=str(tmp_path / "out"), progress=False))
    same, random_next = _same_document_pairs(data["outputs"], 24)
    t = data["totals"]
    assert random_next == t["nsp_random_next"] > 20
    assert same == t["nsp_same_document"] == 0 and t["nsp_same_document_fraction"] == 0.0


@pytest.mark.parametrize("mode", ["streaming", "original"])
def test_single_document_corpus_counts_its_same_document_pairs(tmp_path, mode):
    corpus, vocab = _one_token_documents(tmp_path, 1)
    data = run(Options(input_file=corpus, vocab_file=vocab, mode=mode, dupe_factor=5,
                       max_seq_length=24, max_predictions_per_seq=4,
                       output_file=str(tmp_path / "out"), progress=False))
    same, random_next = _same_document_pairs(data["outputs"], 24)
    t = data["totals"]
    assert same == random_next == t["nsp_same_document"] == t["nsp_random_next"] > 0
    assert t["nsp_same_document_fraction"] == 1.0


def test_original_mode_counts_no_same_document_pairs_on_a_real_corpus(tmp_path):
    corpus, vocab = _one_token_documents(tmp_path, 7)
    data = run(Options(input_file=corpus, vocab_file=vocab, mode="original", dupe_factor=5,
                       max_seq_length=24, max_predictions_per_seq=4,
                       output_file=str(tmp_path / "out"), progress=False))
    same, _ = _same_document_pairs(data["outputs"], 24)
    assert same == data["totals"]["nsp_same_document"] == 0


# ---- start-up without TensorFlow -------------------------------------------------------------

def test_cli_never_imports_tensorflow_for_local_paths(tmp_path):
    corpus, vocab = _one_token_documents(tmp_path, 3)
    code = ("import runpy, sys\n"
            "sys.argv = ['create_pretraining_data.py'] + sys.argv[1:]\n"
            "try:\n"
            "    runpy.run_path(%r, run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print('TF LOADED' if 'tensorflow' in sys.modules else 'NO TF')\n"
            % os.path.join(REPO, "create_pretraining_data.py"))
    for mode in ("original", "streaming"):
        proc = subprocess.run(
            [sys.executable, "-c", code, f"--input_file={tmp_path}/corpus*.txt",
             f"--vocab_file={vocab}", f"--output_file={tmp_path}/{mode}/out", f"--mode={mode}",
             "--num_workers=2", "--max_seq_length=24", "--max_predictions_per_seq=4"],
            capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1] == "NO TF", proc.stdout
        assert "wrote " in proc.stderr


def test_local_glob_order_matches_gfile(tmp_path):
    import tensorflow as tf
    for name in ("b.txt", "A.txt", ".hidden.txt", "10.txt", "9.txt", "we ird.txt"):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "dir.txt").mkdir()
    for pattern in ("*", "*.txt", "?.txt", "[ab9].txt", "b.txt", ".*"):
        full = str(tmp_path / pattern)
        expected = [m for m in tf.io.gfile.glob(full) if not tf.io.gfile.isdir(m)]
        assert documents.expand_input_patterns(full) == expected, pattern


@pytest.mark.parametrize("mode", ["original", "streaming", "beam"])
def test_non_local_paths_go_through_gfile(mode):
    """gs:// and other schemes use tf.io.gfile (input, glob, records, stats); TF's in-memory
    ram:// file system stands in for GCS here (Beam: the in-process DirectRunner)."""
    import tensorflow as tf
    if mode == "beam":
        pytest.importorskip("apache_beam")
    with open(os.path.join(REPO, "tests", "data", "pretraining", "corpus.txt")) as f:
        text = f.read()
    with tf.io.gfile.GFile(f"ram://h4in/{mode}/corpus.txt", "w") as f:
        f.write(text)
    vocab = os.path.join(REPO, "tests", "data", "pretraining", "vocab.txt")
    data = run(Options(input_file=f"ram://h4in/{mode}/corpus*.txt", vocab_file=vocab, mode=mode,
                       output_file=f"ram://h4out/{mode}/x", max_seq_length=24,
                       max_predictions_per_seq=4, dupe_factor=2, progress=False,
                       output_shards=0 if mode == "original" else 2))
    assert len(schema.parse_records(data["outputs"], 24, 4)) == data["totals"]["instances"] > 10
    names = ["x"] if mode == "original" else [f"x-0000{i}-of-00002" for i in range(2)]
    assert sorted(tf.io.gfile.listdir(f"ram://h4out/{mode}")) == [".bert_tf"] + names
    assert tf.io.gfile.listdir(f"ram://h4out/{mode}/.bert_tf") == ["x.stats.json"]  # no lock


def test_forked_and_spawned_workers_write_the_same_bytes(tmp_path, monkeypatch):
    from bert_tf.pretraining_data import workers
    corpus, vocab = _one_token_documents(tmp_path, 9)
    outs = {}
    for method in ("fork", "spawn"):
        monkeypatch.setattr(workers, "start_method", lambda m=method: m)
        data = run(Options(input_file=corpus, vocab_file=vocab, mode="streaming", dupe_factor=3,
                           max_seq_length=24, max_predictions_per_seq=4, num_workers=2,
                           output_file=str(tmp_path / method / "out"), progress=False))
        assert len(data["outputs"]) == 2 and data["peak_rss_mb"]["workers"] > 0
        outs[method] = [open(p, "rb").read() for p in data["outputs"]]
    assert outs["fork"] == outs["spawn"] and all(outs["fork"])
