"""bert-pack-pretraining-data: every sequence exactly once, the packed-BERT layout, SPFHP, the
journal, determinism, SIGTERM + --resume, and the one-line errors."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from bert_tf import BertError
from bert_tf.pretraining_data import schema, writer
from bert_tf.pretraining_data import sequence_packing as packing
from bert_tf.pretraining_data.sequence_packing_run import PackOptions, run as pack
from bert_tf.pretraining_data.runner import Options, run as create
from bert_tf.resources import sample_corpus

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, PREDS, N = 64, 10, 3
CLI = [sys.executable, "-m", "bert_tf.commands.pack_pretraining_data"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The shipped corpus cut into documents of 1-3 sentences (short, as reviews), a vocab of
    its words, and unpacked records made by create_pretraining_data (two files)."""
    d = tmp_path_factory.mktemp("packing")
    with open(sample_corpus(), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    docs, i = [], 0
    while i < len(lines):
        size = (1, 2, 3, 2)[len(docs) % 4]
        docs.append(lines[i:i + size])
        i += size
    (d / "short.txt").write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    words = sorted(set(re.findall(r"\w+|[^\w\s]", " ".join(lines).lower())))
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words)
                                 + "\n")
    create(Options(input_file=str(d / "short.txt"), vocab_file=str(d / "vocab.txt"),
                   output_file=str(d / "in" / "u.tfrecord"), mode="streaming", output_shards=2,
                   max_seq_length=SEQ, max_predictions_per_seq=PREDS, dupe_factor=3,
                   random_seed=7, progress=False))
    inputs = sorted(str(p) for p in (d / "in").glob("u.tfrecord-*"))
    return {"dir": d, "inputs": inputs, "glob": str(d / "in" / "u.tfrecord-*"),
            "examples": schema.parse_records(inputs, SEQ, PREDS)}


def _pack(data, out, **flags):
    opts = dict(input_file=data["glob"], output_file=str(out), max_seq_length=SEQ,
                max_predictions_per_seq=PREDS, max_sequences_per_pack=N, progress=False)
    opts.update(flags)
    return pack(PackOptions(**opts))


def _key(example):
    return tuple(np.concatenate([np.asarray(example[k], np.float64).ravel()
                                 for k in schema.FEATURE_NAMES]))


def test_spfhp_puts_each_length_into_the_pack_with_most_room():
    hist = np.zeros(9, np.int64)
    for length, count in ((6, 1), (5, 1), (4, 2), (3, 1), (2, 1), (1, 3)):
        hist[length] = count
    plan = packing.spfhp(hist, 8, 3)
    # Longest first, each into the open pack with the most room: 6, 5, 4, 4 open packs; the 3
    # goes to a 4 (room 4 > the 5's 3), the 2 to the other 4; the 1s fill the 5 (room 3), then
    # the last pack opened with room 2, and a pack closes at 3 sequences.
    assert sorted(plan) == sorted([((6,), 1), ((5, 1, 1), 1), ((4, 3), 1), ((4, 2, 1), 1)])
    assert packing.spfhp(hist, 8, 1) == [((length,), int(hist[length]))
                                         for length in range(8, 0, -1) if hist[length]]


def test_every_sequence_is_packed_exactly_once_in_habanas_schema(data, tmp_path):
    journal = _pack(data, tmp_path / "p.tfrecord", output_shards=2, num_workers=2)
    p = journal["num_predictions"]
    assert p >= PREDS + N and p == max(PREDS + N, journal["num_predictions_needed"])
    rows = packing.parse_packed_records(journal["outputs"], SEQ, p, N)
    examples = data["examples"]
    assert len(rows) == journal["totals"]["packs_out"] < len(examples)
    cls = int(examples[0]["input_ids"][0])
    for row in rows:
        mask, w = row["input_mask"], row["next_sentence_weights"]
        k = int(w.sum())
        assert 1 <= k <= N and set(w[:k]) == {1.0} and not w[k:].any()
        real = int(np.count_nonzero(mask))
        # input_mask: 1..k in order, then 0 padding; positions restart at 0 per sequence.
        assert list(dict.fromkeys(mask[:real])) == list(range(1, k + 1)) and not mask[real:].any()
        for s in range(k):
            where = np.flatnonzero(mask == s + 1)
            assert row["next_sentence_positions"][s] == where[0]
            assert row["input_ids"][where[0]] == cls
            assert list(row["positions"][where]) == list(range(len(where)))
        assert not row["positions"][real:].any() and not row["input_ids"][real:].any()
        preds = row["masked_lm_weights"] != 0
        # The packed-BERT layout: each prediction's weight is its sequence's index.
        assert (row["masked_lm_weights"][preds] == mask[row["masked_lm_positions"][preds]]).all()
        assert (mask[row["masked_lm_positions"][preds]] > 0).all()
        assert not row["masked_lm_positions"][~preds].any()
    unpacked = [s for row in rows for s in packing.unpack_example(row, SEQ, PREDS)]
    assert sorted(map(_key, unpacked)) == sorted(map(_key, examples))  # each exactly once
    t = journal["totals"]
    assert t["sequences_in"] == len(examples) and journal["mode"] == "pack"
    assert t["padding_share_after"] < t["padding_share_before"]
    tokens = sum(int(e["input_mask"].sum()) for e in examples)
    assert t["padding_share_before"] == round(1 - tokens / (len(examples) * SEQ), 6)
    assert t["padding_share_after"] == round(1 - tokens / (len(rows) * SEQ), 6)
    assert t["expected_speedup"] == round(len(examples) / len(rows), 4)
    assert journal["algorithm"].startswith("SPFHP")
    on_disk = json.loads((tmp_path / ".bert_tf" / "p.tfrecord.stats.json").read_text())
    assert on_disk["complete"] and on_disk["totals"] == t


def test_file_packing_equals_pack_examples(data, tmp_path):
    journal = _pack(data, tmp_path / "one.tfrecord", random_seed=5)
    rows = packing.parse_packed_records(str(tmp_path / "one.tfrecord"), SEQ,
                                        journal["num_predictions"], N)
    mem = packing.pack_examples(data["examples"], SEQ, N, PREDS,
                                num_predictions=journal["num_predictions"], random_seed=5)
    assert len(mem) == len(rows)
    for a, b in zip(mem, rows):
        for name in packing.PACKED_FEATURE_NAMES:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_same_seed_same_bytes_other_seed_other_order(data, tmp_path):
    a = _pack(data, tmp_path / "a" / "p.tfrecord", window_size=100)
    b = _pack(data, tmp_path / "b" / "p.tfrecord", window_size=100, num_workers=2,
              output_shards=1)
    c = _pack(data, tmp_path / "c" / "p.tfrecord", window_size=100, random_seed=99)
    read = lambda j: open(j["outputs"][0], "rb").read()  # noqa: E731
    assert read(a) == read(b) and read(a) != read(c)
    assert a["totals"]["packs_out"] == c["totals"]["packs_out"]


def test_one_line_errors(data, tmp_path):
    with pytest.raises(BertError, match=r"^--input_file .*u\.tfrecord-00000-of-00002: record "
                                        r"\d+: a sequence of (\d+) tokens is longer than "
                                        r"--max_seq_length=16: pass --max_seq_length=\1 or "
                                        r"more \(the records' own length\)$"):
        _pack(data, tmp_path / "short.tfrecord", max_seq_length=16)
    done = _pack(data, tmp_path / "p.tfrecord")
    with pytest.raises(BertError, match=r"^--input_file .*p\.tfrecord: record 0: already packed"):
        _pack(dict(data, glob=done["outputs"][0]), tmp_path / "again.tfrecord")
    other = writer.RecordFile(str(tmp_path / "cls.tfrecord"))
    other.write(schema._len_field(b"\x0a", schema._len_field(b"\x0a", schema._len_field(
        b"\x0a", b"label_ids") + schema._len_field(b"\x12", schema._int64_feature([1])))))
    other.commit()
    with pytest.raises(BertError, match=r"^--input_file .*cls\.tfrecord: record 0: not a "
                                        r"pre-training record \(no 'input_ids' feature"):
        _pack(dict(data, glob=str(tmp_path / "cls.tfrecord")), tmp_path / "x.tfrecord")
    (tmp_path / "text.txt").write_text("just some text, not records\n")
    proc = subprocess.run(CLI + [f"--input_file={tmp_path / 'text.txt'}",
                                 f"--output_file={tmp_path / 'y.tfrecord'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: --input_file {tmp_path / 'text.txt'}: not a TFRecord file (bad record framing): "
        "leave it out of --input_file"]
    assert not list(tmp_path.glob("[xy].tfrecord*")) and not list(tmp_path.glob("again*"))


def _cli_flags(data, out, *extra):
    inputs = ",".join(data["inputs"] * 12)  # the same records 12 times: a longer run
    return CLI + [f"--input_file={inputs}", f"--output_file={out}", "--output_shards=16",
                  f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDS}", *extra]


def _shards(directory):
    return {n: (directory / n).read_bytes() for n in sorted(os.listdir(directory))
            if "-of-" in n and ".tmp-" not in n}


def test_sigterm_exits_75_and_resume_gives_the_same_bytes(data, tmp_path):
    ref = subprocess.run(_cli_flags(data, tmp_path / "ref" / "p.tfrecord"), cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    assert re.match(r"packed \d+ sequences into \d+ rows .* padding [\d.]+% -> [\d.]+%, "
                    r"expected speed-up [\d.]+x", ref.stdout.strip().splitlines()[-1])
    out = tmp_path / "o" / "p.tfrecord"
    journal = out.parent / ".bert_tf" / "p.tfrecord.stats.json"
    proc = subprocess.Popen(_cli_flags(data, out), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while True:  # until a shard is finished and in the journal
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        try:
            if json.loads(journal.read_text())["shards"]:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGSTOP)  # holds it mid-run while the signal is queued
    proc.send_signal(signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err
    done = _shards(out.parent)
    assert 1 <= len(done) < 16
    assert err.strip().splitlines() == [
        f"interrupted: {len(done)} of 16 shards done; re-run with --resume to finish"]
    assert not [n for n in os.listdir(out.parent) if ".tmp-" in n]
    again = subprocess.run(_cli_flags(data, out, "--resume"), cwd=REPO, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert _shards(out.parent) == _shards(tmp_path / "ref")
    assert json.loads(journal.read_text())["resumed_shards"] == len(done)


# ---- the packed-BERT layout and the packer's edges (issue 39) -------------------------------

def test_our_records_parse_with_the_layouts_fixed_length_spec(data, tmp_path):
    """The packed-BERT tooling's fixed-length spec, written out here: masked_lm_* of length
    max_predictions_per_seq + max_sequences_per_pack, next_sentence_* of N."""
    import tensorflow as tf
    journal = _pack(data, tmp_path / "p.tfrecord")
    p = PREDS + N
    assert journal["num_predictions"] == p  # the data needs no more
    ints = lambda n: tf.io.FixedLenFeature([n], tf.int64)  # noqa: E731
    floats = lambda n: tf.io.FixedLenFeature([n], tf.float32)  # noqa: E731
    spec = {"input_ids": ints(SEQ), "input_mask": ints(SEQ), "segment_ids": ints(SEQ),
            "positions": ints(SEQ), "masked_lm_positions": ints(p), "masked_lm_ids": ints(p),
            "masked_lm_weights": floats(p), "next_sentence_positions": ints(N),
            "next_sentence_labels": ints(N), "next_sentence_weights": floats(N)}
    rows = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(
        journal["outputs"])]
    assert len(rows) == journal["totals"]["packs_out"]
    for row in rows:
        w, pos, mask = (row[k].numpy() for k in ("masked_lm_weights", "masked_lm_positions",
                                                  "input_mask"))
        assert (w[w > 0] == mask[pos[w > 0]]).all() and set(w) <= {0, 1, 2, 3}
        assert set(row["next_sentence_weights"].numpy()) <= {0.0, 1.0}


def test_zero_length_sequences_are_rejected_by_the_library_and_the_command(data, tmp_path):
    empty = {k: np.zeros_like(v) for k, v in data["examples"][0].items()}
    with pytest.raises(BertError, match=r"^example 1: a sequence with no tokens \(input_mask "
                                        r"all 0\): remove such records or make the data again$"):
        packing.pack_examples([data["examples"][0], empty], SEQ, N, PREDS)
    f = writer.RecordFile(str(tmp_path / "e.tfrecord"))
    for example in (data["examples"][0], data["examples"][1], empty):
        f.write(_encode(example))
    f.commit()
    with pytest.raises(BertError, match=r"^--input_file .*e\.tfrecord: record 2: a sequence "
                                        r"with no tokens \(input_mask all 0\): remove"):
        _pack(dict(data, glob=str(tmp_path / "e.tfrecord")), tmp_path / "x.tfrecord")


def _encode(example):
    entries = []
    for name in sorted(example):
        values = np.asarray(example[name]).tolist()
        value = (schema._float_feature(values) if name in schema.FLOAT_FEATURES
                 else schema._int64_feature([int(v) for v in values]))
        entries.append(schema._len_field(b"\x0a", schema._len_field(b"\x0a", name.encode())
                                         + schema._len_field(b"\x12", value)))
    return schema._len_field(b"\x0a", b"".join(entries))


def test_an_input_that_shrinks_between_the_passes_is_a_one_line_error(data, tmp_path):
    from bert_tf.pretraining_data import sequence_packing_io as packing_io
    path = data["inputs"][0]
    records = sum(1 for _ in packing_io.iter_records(path))
    task = packing_io.PackTask(0, [(path, 0, records + 5)], [records + 5], 0,
                               str(tmp_path / "s.tfrecord"))
    cfg = packing_io.PackConfig(SEQ, N, PREDS + N)
    with pytest.raises(BertError, match=rf"^--input_file .*u\.tfrecord-00000-of-00002: has "
                                        rf"{records} records, pass 1 read {records + 5} or more: "
                                        r"it changed since pass 1 read it"):
        packing_io.write_packs(task, cfg, lambda message: None)
    stamp = packing_io.file_stamp(path)
    cfg = packing_io.PackConfig(SEQ, N, PREDS + N, input_stamps={path: [stamp[0] + 1, stamp[1]]})
    with pytest.raises(BertError, match=r"now \d+ bytes, \d+ in pass 1: it changed"):
        packing_io.write_packs(task, cfg, lambda message: None)
    assert not list(tmp_path.iterdir())


def test_resume_refuses_inputs_rewritten_to_the_same_size(data, tmp_path):
    from bert_tf.pretraining_data import sequence_packing_io as packing_io
    src = tmp_path / "in"
    src.mkdir()
    for path in data["inputs"]:
        (src / os.path.basename(path)).write_bytes(open(path, "rb").read())
    inputs = dict(data, glob=str(src / "u.tfrecord-*"))
    out = tmp_path / "out" / "p.tfrecord"
    first = _pack(inputs, out, output_shards=2)
    assert first["complete"]
    again = _pack(inputs, out, output_shards=2, resume=True)  # unchanged: resumes
    assert again["resumed_shards"] == 2
    # Same records in the reverse order: the same size, other content.
    target = src / os.path.basename(data["inputs"][0])
    records = list(packing_io.iter_records(str(target)))
    f = writer.RecordFile(str(target))
    for record in reversed(records):
        f.write(record)
    f.commit()
    assert target.stat().st_size == os.path.getsize(data["inputs"][0])
    with pytest.raises(BertError, match=r"^--resume: .*p\.tfrecord\.stats\.json was made with "
                                        r"other flags or inputs \(or an input's content changed"):
        _pack(inputs, out, output_shards=2, resume=True)


def _copy_inputs(data, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for path in data["inputs"]:
        (src / os.path.basename(path)).write_bytes(open(path, "rb").read())
    return dict(data, glob=str(src / "u.tfrecord-*")), src / os.path.basename(data["inputs"][0])


def _reverse_records(target, keep_mtime):
    from bert_tf.pretraining_data import sequence_packing_io as packing_io
    st = target.stat()
    records = list(packing_io.iter_records(str(target)))
    f = writer.RecordFile(str(target))
    for record in reversed(records):
        f.write(record)
    f.commit()
    assert target.stat().st_size == st.st_size
    if keep_mtime:  # a rewrite within the mtime's granularity: only the content tells
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_an_input_rewritten_to_the_same_size_between_the_passes_is_an_error(
        data, tmp_path, monkeypatch, keep_mtime):
    """Issue 39 review: pass 2 checked only sizes and record counts, so the same records in
    another order (same size) were packed as if pass 1 had read them."""
    from bert_tf.pretraining_data import sequence_packing_run as run_lib
    inputs, target = _copy_inputs(data, tmp_path)
    plan = run_lib.plan_tasks

    def between_the_passes(*args, **kw):
        _reverse_records(target, keep_mtime)
        return plan(*args, **kw)

    monkeypatch.setattr(run_lib, "plan_tasks", between_the_passes)
    out = tmp_path / "out" / "p.tfrecord"
    what = r"its content \(sha256\)" if keep_mtime else r"modified \(mtime\) since pass 1: it"
    with pytest.raises(BertError, match=rf"^--input_file {re.escape(str(target))}: {what} "
                                        r"changed since pass 1 read it"):
        _pack(inputs, out, output_shards=2)
    assert not (tmp_path / "out").exists() or not [
        p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_resume_hashes_only_inputs_whose_stamp_changed(data, tmp_path, monkeypatch):
    """--resume hashed every input again (serially, no bar); now an input whose (size,
    mtime_ns) in the journal proves it unchanged keeps its sha256, the others are hashed."""
    from bert_tf.pretraining_data import sequence_packing_io as packing_io
    inputs, target = _copy_inputs(data, tmp_path)
    old = time.time_ns() - 10 ** 10  # written 10 s before pass 1: the stamp proves content
    for p in target.parent.iterdir():
        os.utime(p, ns=(old, old))
    out = tmp_path / "out" / "p.tfrecord"
    first = _pack(inputs, out, output_shards=2)
    assert first["lengths"]["stamp_proves"] == [True, True]
    hashed = []
    digest = packing_io.file_digest
    monkeypatch.setattr(packing_io, "file_digest",
                        lambda path, *a: hashed.append(path) or digest(path, *a))
    again = _pack(inputs, out, output_shards=2, resume=True)
    assert again["resumed_shards"] == 2 and hashed == []
    os.utime(target, ns=(old + 10 ** 9, old + 10 ** 9))  # touched, not changed: hashed, resumes
    again = _pack(inputs, out, output_shards=2, resume=True)
    assert again["resumed_shards"] == 2 and hashed == [str(target)]
    _reverse_records(target, keep_mtime=False)
    with pytest.raises(BertError, match=r"^--resume: .*was made with other flags or inputs"):
        _pack(inputs, out, output_shards=2, resume=True)


def test_an_input_gone_or_unreadable_is_a_one_line_error(tmp_path):
    # deleted between the passes or before --resume: its stamp and its hash say so in one line
    from bert_tf.pretraining_data import sequence_packing_io as packing_io
    gone = str(tmp_path / "gone.tfrecord")
    for read in (packing_io.file_stamp, packing_io.file_digest):
        with pytest.raises(BertError, match=rf"^--input_file {re.escape(gone)}: cannot be read "
                                            r"now \(.+\): if it moved or changed while packing"):
            read(gone)
