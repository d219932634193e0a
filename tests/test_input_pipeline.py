"""bert_tf.pretraining.input_pipeline: names/dtypes/values, sharding, deterministic resume, dynamic masking."""
import numpy as np
import pytest

import bert_tf
import tensorflow as tf

from bert_tf import BertError
from bert_tf.pretraining_data.masking import BatchMasker
from bert_tf.pretraining.input_pipeline import (dynamic_mask, explain_data_error, list_files,
                                             pretraining_dataset)
from conftest import CLS_ID, MASK_ID, SEP_ID, write_pretraining_records

SEQ, PRED, VOCAB = 32, 5, 64


def _ds(pattern, batch=4, **kw):
    kw.setdefault("is_training", False)
    return pretraining_dataset(pattern, batch, SEQ, PRED, **kw)


def _collect(ds, n=None):
    out = []
    for i, b in enumerate(ds):
        if n is not None and i >= n:
            break
        out.append({k: v.numpy() for k, v in b.items()})
    return out


def test_eval_batches_are_the_records_in_order(tmp_path):
    feats = write_pretraining_records(tmp_path / "a.tfrecord", 10, seed=3)
    ds = _ds(str(tmp_path / "a.tfrecord"), batch=4)
    batches = _collect(ds)
    assert len(batches) == 2  # drop_remainder: 10 -> 2 batches of 4
    b = batches[1]
    assert sorted(b) == ["input_mask", "input_type_ids", "input_word_ids", "masked_lm_ids",
                         "masked_lm_positions", "masked_lm_weights", "next_sentence_labels"]
    for k, v in b.items():
        assert v.dtype == (np.float32 if k == "masked_lm_weights" else np.int32), k
    assert b["input_word_ids"].shape == (4, SEQ) and b["masked_lm_ids"].shape == (4, PRED)
    assert b["next_sentence_labels"].shape == (4,)
    for j in range(4):
        f = feats[4 + j]
        np.testing.assert_array_equal(b["input_word_ids"][j], f["input_ids"])
        np.testing.assert_array_equal(b["input_type_ids"][j], f["segment_ids"])
        np.testing.assert_array_equal(b["input_mask"][j], f["input_mask"])
        np.testing.assert_array_equal(b["masked_lm_positions"][j], f["masked_lm_positions"])
        np.testing.assert_array_equal(b["masked_lm_ids"][j], f["masked_lm_ids"])
        np.testing.assert_array_equal(b["masked_lm_weights"][j], f["masked_lm_weights"])
        assert b["next_sentence_labels"][j] == f["next_sentence_labels"][0]
    # Static shapes for TPU.
    spec = ds.element_spec
    assert spec["input_word_ids"].shape.as_list() == [4, SEQ]


def test_file_patterns(tmp_path):
    for name in ("a-0.tfrecord", "a-1.tfrecord", "b.tfrecord", "c.txt"):
        (tmp_path / name).write_bytes(b"")
    got = list_files(f"{tmp_path}/a-*.tfrecord, {tmp_path}/b.tfrecord,{tmp_path}/a-0.tfrecord")
    assert [p.rsplit("/", 1)[1] for p in got] == ["a-0.tfrecord", "a-1.tfrecord", "b.tfrecord"]
    with pytest.raises(BertError) as e:
        _ds(f"{tmp_path}/nothing-*.tfrecord")
    assert str(e.value) == f"--input_file: '{tmp_path}/nothing-*.tfrecord' matches no files"


def _ids(batches):
    return [tuple(row) for b in batches for row in b["input_word_ids"]]


def _rows(feats):
    """The records' input_ids as _ids gives them: one pipeline's eval stream is the records in
    file order (test_eval_batches_are_the_records_in_order), no pipeline built for it."""
    return [tuple(f["input_ids"]) for f in feats]


def test_sharding_by_file_and_by_record(tmp_path):
    feats = [write_pretraining_records(tmp_path / f"s-{i}.tfrecord", 6, seed=10 + i)
             for i in range(4)]
    pattern = str(tmp_path / "s-*.tfrecord")
    everything = _rows(sum(feats, []))
    assert len(everything) == 24
    parts = [_ids(_collect(_ds(pattern, batch=2, input_context=tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=i)))) for i in range(2)]
    assert sorted(parts[0] + parts[1]) == sorted(everything) and not set(parts[0]) & set(parts[1])
    assert len(parts[0]) == 12  # two whole files each
    # One file, two pipelines: records are split instead (even / odd records).
    one = str(tmp_path / "s-0.tfrecord")
    rec = [_ids(_collect(_ds(one, batch=1, input_context=tf.distribute.InputContext(2, i, 1))))
           for i in range(2)]
    full = _rows(feats[0])
    assert rec[0] == full[0::2] and rec[1] == full[1::2]


def test_training_stream_is_seeded_and_skippable(tmp_path):
    feats = [write_pretraining_records(tmp_path / f"t-{i}.tfrecord", 7, seed=20 + i)
             for i in range(3)]
    pattern = str(tmp_path / "t-*.tfrecord")
    a = _ids(_collect(_ds(pattern, is_training=True, seed=5), 12))  # > 2 epochs of 21 records
    b = _ids(_collect(_ds(pattern, is_training=True, seed=5, skip_batches=5), 7))
    c = _ids(_collect(_ds(pattern, is_training=True, seed=6), 12))
    assert a[20:] == b
    assert a != c
    records = _rows(sum(feats, []))
    assert set(a) <= set(records) and a[:21] != records  # shuffled; epochs mix, as the original


def _batch(rows, max_pred=3):
    """Model-input dict of unpadded (ids, segment ids, stored masks {position: label}) rows."""
    seq = max(len(ids) for ids, _, _ in rows)
    pad = lambda v, n: list(v) + [0] * (n - len(v))
    return {
        "input_word_ids": tf.constant([pad(ids, seq) for ids, _, _ in rows]),
        "input_mask": tf.constant([pad([1] * len(ids), seq) for ids, _, _ in rows]),
        "input_type_ids": tf.constant([pad(types, seq) for _, types, _ in rows]),
        "masked_lm_positions": tf.constant([pad(sorted(m), max_pred) for _, _, m in rows]),
        "masked_lm_ids": tf.constant([pad([m[p] for p in sorted(m)], max_pred)
                                      for _, _, m in rows]),
        "masked_lm_weights": tf.constant([pad([1.0] * len(m), max_pred) for _, _, m in rows]),
        "next_sentence_labels": tf.zeros([len(rows)], tf.int32)}


def test_dynamic_mask_unmasks_and_never_picks_cls_sep_or_padding():
    # Two segments (stored mask at 1 and 5), one segment + padding, one segment filling the row.
    rows = [([CLS_ID, MASK_ID, 11, SEP_ID, 20, MASK_ID, 22, SEP_ID], [0] * 4 + [1] * 4,
             {1: 10, 5: 21}),
            ([CLS_ID, 30, 31, 32, SEP_ID], [0] * 5, {}),
            ([CLS_ID, 40, 41, 42, 43, 44, 45, SEP_ID], [0] * 8, {3: 42})]
    unmasked = [[CLS_ID, 10, 11, SEP_ID, 20, 21, 22, SEP_ID], [CLS_ID, 30, 31, 32, SEP_ID, 0, 0, 0],
                [CLS_ID, 40, 41, 42, 43, 44, 45, SEP_ID]]
    # masked_lm_prob 1: every candidate is predicted, so the positions are the candidates.
    masker = BatchMasker(None, 8, 8, 1.0, vocab_size=VOCAB, mask_id=MASK_ID)
    out = {k: v.numpy() for k, v in dynamic_mask(_batch(rows, 8), masker, 1, 0, 0).items()}
    want = [[1, 2, 4, 5, 6], [1, 2, 3], [1, 2, 3, 4, 5, 6]]
    for j, pos in enumerate(want):
        w = out["masked_lm_weights"][j]
        assert w.tolist() == [1.0] * len(pos) + [0.0] * (8 - len(pos))
        assert out["masked_lm_positions"][j].tolist() == pos + [0] * (8 - len(pos))
        assert out["masked_lm_ids"][j][:len(pos)].tolist() == [unmasked[j][p] for p in pos]
        rest = [p for p in range(8) if p not in pos]
        assert out["input_word_ids"][j][rest].tolist() == [unmasked[j][p] for p in rest]
    assert out["input_word_ids"].dtype == np.int32 and out["masked_lm_weights"].dtype == np.float32


def test_dynamic_mask_is_keyed_by_seed_and_batch_index():
    # Pins BatchMasker's output for a numpy Generator seeded with (seed, pipeline, batch index):
    # a resumed run depends on it; an intended change of the draws updates these numbers.
    rows = [([CLS_ID, 5, 6, 7, 8, SEP_ID], [0] * 6, {}),
            ([CLS_ID, 9, MASK_ID, SEP_ID, 11, 12, 13, SEP_ID], [0] * 4 + [1] * 4, {2: 10})]
    masker = BatchMasker(None, 8, 3, 0.15, vocab_size=VOCAB, mask_id=MASK_ID)
    got = lambda seed, batch: {k: v.numpy().tolist() for k, v in dynamic_mask(
        _batch(rows), masker, seed, 0, batch).items()}
    a = got(3, 0)
    assert a == got(3, 0)
    # 6 and 8 tokens ([CLS]/[SEP] counted, as the original) * 0.15 -> round -> 1 prediction each.
    assert a["masked_lm_weights"] == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert a["masked_lm_positions"] == [[1, 0, 0], [2, 0, 0]]
    assert a["masked_lm_ids"] == [[5, 0, 0], [10, 0, 0]]
    assert a["input_word_ids"] == [[CLS_ID, 5, 6, 7, 8, SEP_ID, 0, 0],  # 5 kept (10 %)
                                   [CLS_ID, 9, MASK_ID, SEP_ID, 11, 12, 13, SEP_ID]]
    b = got(3, 1)
    assert b["masked_lm_positions"] == [[3, 0, 0], [4, 0, 0]]
    assert b["input_word_ids"] == [[CLS_ID, 5, 6, MASK_ID, 8, SEP_ID, 0, 0],
                                   [CLS_ID, 9, 10, SEP_ID, MASK_ID, 12, 13, SEP_ID]]
    c = got(4, 0)
    assert c["masked_lm_positions"] == [[4, 0, 0], [4, 0, 0]]
    assert c["input_word_ids"][0] == [CLS_ID, 5, 6, 7, 43, SEP_ID, 0, 0]  # 8 -> random 43


def test_dynamic_masking_statistics(tmp_path):
    n, seq, pred = 600, 64, 20
    feats = write_pretraining_records(tmp_path / "d.tfrecord", n, seq_len=seq, max_pred=pred,
                                      vocab_size=VOCAB, seed=7)
    ds = pretraining_dataset(str(tmp_path / "d.tfrecord"), n, seq, pred, is_training=False,
                             seed=11, dynamic_masking=True, vocab_size=VOCAB, mask_id=MASK_ID)
    # One pipeline built: the masks' reproducibility is checked by
    # test_dynamic_mask_is_keyed_by_seed_and_batch_index and, over two pipelines, by
    # test_dynamic_masking_resumes_identically_with_static_shapes.
    b = _collect(ds, 1)[0]
    kinds = {"mask": 0, "keep": 0, "random": 0}
    changed_from_record = 0
    for j, f in enumerate(feats):
        orig = np.array(f["input_ids"])
        for p, label in zip(f["masked_lm_positions"], f["masked_lm_ids"]):
            if label:
                orig[p] = label
        real = np.array(f["input_mask"]) == 1
        cand = real & ~np.isin(orig, [CLS_ID, SEP_ID])
        want_num = min(pred, max(1, round(real.sum() * 0.15)))  # the original's rule
        w = b["masked_lm_weights"][j]
        num = int(w.sum())
        assert num == want_num and np.all(w[:num] == 1) and np.all(w[num:] == 0)
        pos = b["masked_lm_positions"][j][:num]
        assert np.all(np.diff(pos) > 0) and np.all(cand[pos])  # sorted, real, not CLS/SEP
        assert np.all(b["masked_lm_positions"][j][num:] == 0)
        assert np.all(b["masked_lm_ids"][j][num:] == 0)
        np.testing.assert_array_equal(b["masked_lm_ids"][j][:num], orig[pos])
        new = b["input_word_ids"][j]
        untouched = np.ones(seq, bool)
        untouched[pos] = False
        np.testing.assert_array_equal(new[untouched], orig[untouched])
        for p in pos:
            if new[p] == MASK_ID:
                kinds["mask"] += 1
            elif new[p] == orig[p]:
                kinds["keep"] += 1
            else:
                kinds["random"] += 1
        changed_from_record += int(set(pos) != set(np.array(f["masked_lm_positions"])[
            np.array(f["masked_lm_weights"]) > 0]))
    total = sum(kinds.values())
    # 80/10/10 (a random id may equal the original or [MASK] with prob. 1/64 each).
    assert abs(kinds["mask"] / total - 0.8 - 0.1 / VOCAB) < 0.025, kinds
    assert abs(kinds["keep"] / total - 0.1 - 0.1 / VOCAB) < 0.02, kinds
    assert abs(kinds["random"] / total - 0.1 + 0.2 / VOCAB) < 0.02, kinds
    assert changed_from_record > 0.9 * n  # a fresh mask, not the record's
    # Uniform over candidates: the first content position is picked ~15% of the time.
    first = np.mean([1 in b["masked_lm_positions"][j][:int(b["masked_lm_weights"][j].sum())]
                     for j in range(n)])
    assert 0.10 < first < 0.20, first


def test_dynamic_masking_differs_per_epoch(tmp_path):
    write_pretraining_records(tmp_path / "e.tfrecord", 8, seed=1)
    ds = pretraining_dataset(str(tmp_path / "e.tfrecord"), 8, SEQ, PRED, is_training=False,
                             repeat=True, seed=3, dynamic_masking=True, vocab_size=VOCAB,
                             mask_id=MASK_ID)
    e1, e2 = _collect(ds, 2)
    np.testing.assert_array_equal(unmask_np(e1), unmask_np(e2))  # same examples
    assert not np.array_equal(e1["masked_lm_positions"], e2["masked_lm_positions"])
    with pytest.raises(BertError, match="--dynamic_masking"):
        pretraining_dataset(str(tmp_path / "e.tfrecord"), 8, SEQ, PRED, is_training=True,
                            dynamic_masking=True)


def unmask_np(batch):
    ids = batch["input_word_ids"].copy()
    for j, (pos, labels, w) in enumerate(zip(batch["masked_lm_positions"], batch["masked_lm_ids"],
                                             batch["masked_lm_weights"])):
        ids[j, pos[w > 0]] = labels[w > 0]
    return ids


def test_dynamic_masking_resumes_identically_with_static_shapes(tmp_path):
    for i in range(3):
        write_pretraining_records(tmp_path / f"r-{i}.tfrecord", 7, seed=30 + i)
    pattern = str(tmp_path / "r-*.tfrecord")
    ds = lambda **kw: _ds(pattern, is_training=True, seed=5, dynamic_masking=True,
                          vocab_size=VOCAB, mask_id=MASK_ID, **kw)
    full = ds()
    specs = tf.nest.flatten(full.element_spec)
    assert all(s.shape.is_fully_defined() for s in specs), full.element_spec
    a = _collect(full, 12)  # > 2 epochs of 21 records
    b = _collect(ds(skip_batches=5), 7)
    for x, y in zip(a[5:], b):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


# ---- validation: pre-flight, in-graph checks, corrupt records ------------------------------

def _offsets(path):
    """Byte offset of each record of a TFRecord file."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        out.append(pos)
        pos += 16 + int.from_bytes(data[pos:pos + 8], "little")
    return out


def _data_error(ds):
    with pytest.raises(tf.errors.OpError) as e:
        _collect(ds)
    err = explain_data_error(e.value)
    assert err is not None, e.value.message
    assert "\n" not in str(err)
    return str(err)


def _write_with(path, feats, i, **changes):
    from test_preflight import write_examples
    feats = [dict(f) for f in feats]
    feats[i].update(changes)
    write_examples(path, feats)


def test_preflight_runs_before_any_record_is_read(tmp_path):
    write_pretraining_records(tmp_path / "a.tfrecord", 6, seq_len=64)
    with pytest.raises(BertError) as e:
        _ds(str(tmp_path / "a.tfrecord"), flag="--eval_input_file")
    assert str(e.value) == (
        f"--eval_input_file {tmp_path / 'a.tfrecord'}: record 0: records have input_ids of length "
        "64, not --max_seq_length=32: pass --max_seq_length=64 or regenerate the data")


@pytest.mark.parametrize("changes, want", [
    ({"input_ids": [1] * (SEQ - 1) + [VOCAB + 5]},
     f"input_ids has id {VOCAB + 5} outside [0, vocab_size {VOCAB}) of --bert_config_file: use "
     "the bert_config.json that matches the data or regenerate the data"),
    ({"masked_lm_ids": [3, 3, 3, 3, -2]},
     f"masked_lm_ids has id -2 outside [0, vocab_size {VOCAB}) of --bert_config_file: use "
     "the bert_config.json that matches the data or regenerate the data"),
    ({"segment_ids": [0] * (SEQ - 1) + [2]},
     "segment_ids has 2 outside [0, type_vocab_size 2) of --bert_config_file: use the matching "
     "bert_config.json or regenerate the data"),
    ({"masked_lm_positions": [1, 2, 3, 4, SEQ + 1]},
     f"masked_lm_positions has {SEQ + 1} outside [0, --max_seq_length={SEQ}): regenerate the "
     "data with create_pretraining_data.py"),
    ({"next_sentence_labels": [3]},
     "next_sentence_labels is 3, must be 0 or 1: regenerate the data with "
     "create_pretraining_data.py"),
])
def test_values_past_the_preflight_are_checked_in_graph(tmp_path, changes, want):
    src = write_pretraining_records(tmp_path / "src.tfrecord", 10, seed=2)
    path = tmp_path / "late.tfrecord"
    _write_with(path, src, 7, **changes)  # the pre-flight reads records 0-3 only
    # Evaluation, and training with dynamic masking (the checks run before the re-masking);
    # training without it reads and checks as the latter does.
    for training, dynamic in ((False, False), (True, True)):
        ds = _ds(str(path), batch=2, is_training=training, repeat=False, vocab_size=VOCAB,
                 type_vocab_size=2, dynamic_masking=dynamic, mask_id=MASK_ID)
        assert _data_error(ds) == f"--input_file {path}: record 7: {want}"


@pytest.mark.parametrize("masked", [2, 0])  # 0: --max_predictions_per_seq=0 records
def test_check_ranges_names_the_first_failing_check_of_the_first_bad_row(masked):
    """Row 1 fails two checks (input_ids first in order, then segment_ids) at two values
    each, row 2 fails too: the message names row 1's record, input_ids and its first bad id;
    with no input_ids check, segment_ids' first bad value."""
    from bert_tf.pretraining.record_checks import check_ranges
    features = dict(
        input_word_ids=tf.constant([[1, 2, 3, 4], [1, 99, 3, 98], [1, 97, 3, 4]]),
        input_type_ids=tf.constant([[0, 0, 1, 1], [0, 3, 1, 7], [0, 0, 1, 1]]),
        masked_lm_ids=tf.ones([3, masked], tf.int32),
        masked_lm_positions=tf.ones([3, masked], tf.int32),
        next_sentence_labels=tf.constant([[0], [1], [0]]))
    paths, indices = tf.constant(["p0", "p1", "p2"]), tf.constant([10, 11, 12])
    for vocab_size, want in (
            (50, "input_ids has id 99 outside [0, vocab_size 50) of --bert_config_file: use "
                 "the bert_config.json that matches the data or regenerate the data"),
            (None, "segment_ids has 3 outside [0, type_vocab_size 2) of --bert_config_file: "
                   "use the matching bert_config.json or regenerate the data")):
        with pytest.raises(tf.errors.InvalidArgumentError) as e:  # in a graph, as tf.data
            tf.function(lambda v=vocab_size: check_ranges(features, paths, indices, SEQ, v, 2))()
        assert str(explain_data_error(e.value)) == f"--input_file p1: record 11: {want}"
    ok = dict(features, input_word_ids=features["input_word_ids"][:1] * 0 + 1)
    ok = {k: v[:1] for k, v in ok.items()}
    out = check_ranges(ok, paths[:1], indices[:1], SEQ, 50, 2)
    assert out.keys() == ok.keys()


def test_in_range_values_pass_unchanged(tmp_path):
    feats = write_pretraining_records(tmp_path / "a.tfrecord", 8, seed=3)
    b = _collect(_ds(str(tmp_path / "a.tfrecord"), batch=8, vocab_size=VOCAB,
                     type_vocab_size=2))[0]
    np.testing.assert_array_equal(b["input_word_ids"], [f["input_ids"] for f in feats])


def _damaged(tmp_path, kind, n=10, at=6, feats=None):
    """A file of n records with record `at` damaged: (path, offset of record `at`); `feats`, a
    list, gets the undamaged records' features."""
    good = tmp_path / "good.tfrecord"
    written = write_pretraining_records(good, n, seed=5)
    if feats is not None:
        feats.extend(written)
    data = bytearray(good.read_bytes())
    off = _offsets(good)[at]
    if kind == "checksum":
        data[off + 30] ^= 0x55
    elif kind == "truncated":
        data = data[:off + 40]
    elif kind == "partial header":  # TF's reader alone would end the file silently here
        data = data[:off + 5]
    path = tmp_path / f"{kind.replace(' ', '_')}-é.tfrecord"  # names are C-escaped in-graph
    path.write_bytes(bytes(data))
    return path, off


@pytest.mark.parametrize("kind", ["checksum", "truncated", "partial header"])
def test_corrupt_record_mid_file_is_one_line_with_file_and_offset(tmp_path, kind):
    path, off = _damaged(tmp_path, kind)
    for training in (False, True):  # (the pre-flight would find a cut-off end first)
        ds = _ds(str(path), batch=2, is_training=training, repeat=False, preflight=False)
        assert _data_error(ds) == (
            f"--input_file {path}: record 6 at byte {off} is corrupt or truncated: copy the file "
            "again or regenerate the data with create_pretraining_data.py; or skip the rest of "
            "such files with --skip_corrupt_records")


def test_skip_corrupt_records_skips_the_rest_of_the_file_and_counts(tmp_path, capfd):
    feats = []
    path, off = _damaged(tmp_path, "checksum", n=10, at=6, feats=feats)
    other = write_pretraining_records(tmp_path / "other.tfrecord", 4, seed=9)
    size = path.stat().st_size
    ds = _ds(f"{path},{tmp_path / 'other.tfrecord'}", batch=1, skip_corrupt_records=True)
    got = _ids(_collect(ds))
    good = _rows(feats)
    assert got == good[:6] + [tuple(f["input_ids"]) for f in other]
    err = capfd.readouterr().err
    assert (f"warning: --input_file {path}: record 6 at byte {off} is corrupt or truncated: "
            "skipped the rest of the file (--skip_corrupt_records): 4 record(s), "
            f"{size - off} bytes lost") in err
    # Truncated: the partial record is the one lost.
    path, off = _damaged(tmp_path, "truncated", n=10, at=9)
    assert len(_collect(_ds(str(path), batch=1, skip_corrupt_records=True, preflight=False))) == 9
    assert (f"{path}: record 9 at byte {off} is corrupt or truncated: skipped the rest of the "
            "file (--skip_corrupt_records): 1 record(s), 40 bytes lost") in capfd.readouterr().err


def test_a_record_of_another_length_mid_file_is_one_line(tmp_path):
    path = tmp_path / "mixed.tfrecord"
    write_pretraining_records(tmp_path / "a", 6, seed=1)
    write_pretraining_records(tmp_path / "b", 2, seq_len=64, seed=2)
    path.write_bytes((tmp_path / "a").read_bytes() + (tmp_path / "b").read_bytes())
    msg = _data_error(_ds(str(path), batch=2))
    key = msg.split("a record's ")[1].split()[0]  # TF's parser names the first key it rejects
    assert key in ("input_ids", "input_mask", "segment_ids")
    assert msg == (
        f"--input_file: a record's {key} has another length or type than "
        "--max_seq_length/--max_predictions_per_seq expect: pass the flags the data was made "
        "with or regenerate the data")
