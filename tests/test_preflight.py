"""bert_tf.pretraining.preflight: every common data mistake is one exact line before any step."""
import gzip
import logging

import pytest
import tensorflow as tf

from bert_tf import BertError
from bert_tf.pretraining.preflight import (check_file, check_pretraining_files,
                                        ends_with_whole_record, masked_crc32c, sample_files)
from conftest import run_pretraining_cases, write_pretraining_records

SEQ, PRED, VOCAB = 32, 5, 64
REGEN = "regenerate the data with create_pretraining_data.py"


def _check(files, **kw):
    kw.setdefault("vocab_size", VOCAB)
    kw.setdefault("type_vocab_size", 2)
    return check_pretraining_files([str(f) for f in files], SEQ, PRED, **kw)


def _error(files, **kw):
    with pytest.raises(BertError) as e:
        _check(files, **kw)
    assert "\n" not in str(e.value)
    return str(e.value)


def write_examples(path, features_list):
    """Write feature dicts (name -> int list, or float list for names in `floats`) as records."""
    with tf.io.TFRecordWriter(str(path)) as w:
        for feats in features_list:
            f = {k: (tf.train.Feature(float_list=tf.train.FloatList(value=v))
                     if isinstance(v[0], float) else
                     tf.train.Feature(int64_list=tf.train.Int64List(value=v)))
                 for k, v in feats.items()}
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def _good(tmp_path, name="good.tfrecord", n=6, **kw):
    feats = write_pretraining_records(tmp_path / name, n, **kw)
    return tmp_path / name, feats


def test_good_files_pass_and_report_what_was_checked(tmp_path):
    a, _ = _good(tmp_path, "a.tfrecord")
    b, _ = _good(tmp_path, "b.tfrecord", n=2)
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    info = _check([a, b, tmp_path / "empty.tfrecord"])
    assert (info["files"], info["records"], info["empty_files"]) == (3, 4 + 2, 1)


def test_masked_crc_matches_tfrecord_headers(tmp_path):
    path, _ = _good(tmp_path, n=1)
    data = path.read_bytes()
    assert masked_crc32c(data[:8]) == int.from_bytes(data[8:12], "little")


def test_text_file_is_not_a_tfrecord(tmp_path):
    good, _ = _good(tmp_path)
    text = tmp_path / "corpus.txt"
    text.write_text("This is a sentence.\nAnother one.\n\nDoc two.\n")
    assert _error([good, text]) == (
        f"--input_file {text}: not a TFRecord file (it starts with 'This is a sentence. Anot'): "
        "pass the TFRecord files written by create_pretraining_data.py")


def test_tiny_text_file(tmp_path):
    text = tmp_path / "note.txt"
    text.write_text("hello\n")
    assert _error([text]) == (
        f"--input_file {text}: not a TFRecord file (6 bytes, it starts with 'hello'): pass the "
        "TFRecord files written by create_pretraining_data.py")


def test_directory_in_the_glob(tmp_path):
    (tmp_path / "shards").mkdir()
    assert _error([tmp_path / "shards"]) == (
        f"--input_file {tmp_path / 'shards'}: is a directory: pass a glob of the files in it, "
        f"e.g. --input_file={tmp_path / 'shards'}/*")


def test_gzip_file(tmp_path):
    path, _ = _good(tmp_path)
    gz = tmp_path / "good.tfrecord.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert _error([gz]) == (f"--input_file {gz}: is gzip-compressed: decompress it (pre-training "
                            "reads uncompressed TFRecords)")


def test_seq_length_mismatch(tmp_path):
    path, _ = _good(tmp_path, seq_len=128, max_pred=PRED, vocab_size=VOCAB)
    assert _error([path]) == (
        f"--input_file {path}: record 0: records have input_ids of length 128, not "
        "--max_seq_length=32: pass --max_seq_length=128 or regenerate the data")


def test_max_predictions_mismatch(tmp_path):
    path, _ = _good(tmp_path, max_pred=20)
    assert _error([path], flag="--eval_input_file") == (
        f"--eval_input_file {path}: record 0: records have masked_lm_positions of length 20, not "
        "--max_predictions_per_seq=5: pass --max_predictions_per_seq=20 or regenerate the data")


def test_truncated_shard(tmp_path):
    path, _ = _good(tmp_path, n=3)
    data = path.read_bytes()
    rec = 16 + int.from_bytes(data[:8], "little")
    rec2 = 16 + int.from_bytes(data[rec:rec + 8], "little")
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(data[:rec + rec2 + 100])  # record 2 cut 100 bytes in
    assert _error([cut]) == (
        f"--input_file {cut}: truncated: record 2 at byte {rec + rec2} needs "
        f"{int.from_bytes(data[rec + rec2:rec + rec2 + 8], 'little') + 16} bytes, the file ends "
        f"100 bytes after its start; the shard was cut off: copy it again or {REGEN}")
    cut.write_bytes(data[:rec + 5])  # inside record 1's header
    assert _error([cut]) == (
        f"--input_file {cut}: truncated: the file ends 5 bytes into the header of record 1 "
        f"(byte {rec}); the shard was cut off: copy it again or {REGEN}")


def test_cut_off_end_past_the_leading_records(tmp_path):
    path, _ = _good(tmp_path, n=12)
    data = path.read_bytes()
    for keep in (len(data) - 1, len(data) - 100, len(data) - 330):
        cut = tmp_path / f"cut-{keep}.tfrecord"
        cut.write_bytes(data[:keep])
        assert _error([cut]) == (
            f"--input_file {cut}: truncated: it does not end with a whole record ({keep} bytes); "
            f"the shard was cut off: copy it again or {REGEN}")
        assert ends_with_whole_record(str(cut), keep) is False
    assert ends_with_whole_record(str(path), len(data)) is True
    # A last record longer than the largest window looked at: no verdict, no false alarm.
    assert ends_with_whole_record(str(path), len(data), window=64, max_window=64) is None
    assert ends_with_whole_record(str(path), len(data), window=64, max_window=4096) is True


def test_corrupt_record_checksum_and_header(tmp_path):
    path, _ = _good(tmp_path, n=3)
    data = bytearray(path.read_bytes())
    rec = 16 + int.from_bytes(data[:8], "little")
    bad = bytearray(data)
    bad[rec + 20] ^= 0xFF  # a payload byte of record 1
    (tmp_path / "crc.tfrecord").write_bytes(bytes(bad))
    assert _error([tmp_path / "crc.tfrecord"]) == (
        f"--input_file {tmp_path / 'crc.tfrecord'}: corrupt record 1 at byte {rec} (checksum "
        f"mismatch): the file is damaged: copy it again or {REGEN}")
    bad = bytearray(data)
    bad[rec + 2] ^= 0xFF  # record 1's length
    (tmp_path / "hdr.tfrecord").write_bytes(bytes(bad))
    assert _error([tmp_path / "hdr.tfrecord"]) == (
        f"--input_file {tmp_path / 'hdr.tfrecord'}: corrupt header of record 1 at byte {rec}: "
        f"the file is damaged: copy it again or {REGEN}")


def test_ids_beyond_the_vocab(tmp_path):
    path, feats = _good(tmp_path, vocab_size=3000, seed=4)
    biggest = max(feats[0]["input_ids"])
    assert biggest >= VOCAB
    assert _error([path]) == (
        f"--input_file {path}: record 0: input_ids has id {biggest} >= vocab_size {VOCAB} of "
        "--bert_config_file: the data was made with a bigger vocabulary; use the bert_config.json "
        "of that vocab.txt or regenerate the data")
    _check([path], vocab_size=3000)  # fine with the vocab it was made with


def test_finetuning_records_in_the_glob(tmp_path):
    good, _ = _good(tmp_path, "a.tfrecord")
    ft = tmp_path / "train.tf_record"
    write_examples(ft, [{"input_ids": [1] * SEQ, "input_mask": [1] * SEQ,
                         "segment_ids": [0] * SEQ, "label_ids": [1], "is_real_example": [1]}])
    assert _error([good, ft]) == (
        f"--input_file {ft}: record 0: holds fine-tuning features (input_ids, input_mask, "
        "is_real_example, label_ids, segment_ids), not pre-training records: remove it from "
        "--input_file")


def _one_bad(tmp_path, **changes):
    feats = write_pretraining_records(tmp_path / "src.tfrecord", 1)[0]
    feats.update(changes)
    path = tmp_path / "bad.tfrecord"
    write_examples(path, [feats])
    return path


@pytest.mark.parametrize("changes, want", [
    ({"next_sentence_labels": [2]}, f"next_sentence_labels is [2], must be [0] or [1]: {REGEN}"),
    ({"masked_lm_positions": [1, 2, 3, 4, SEQ]},
     f"masked_lm_positions has {SEQ}, outside [0, --max_seq_length={SEQ}): {REGEN}"),
    ({"segment_ids": [0] * (SEQ - 1) + [2]},
     "segment_ids has 2, outside [0, type_vocab_size 2) of --bert_config_file: use the matching "
     "bert_config.json or regenerate the data"),
    ({"masked_lm_ids": [5, 6, 7, 8, -1]}, f"masked_lm_ids has negative id -1: {REGEN}"),
    ({"input_mask": [0] * (SEQ - 2) + [1, 3]},
     f"input_mask has values [0, 1, 3], must be 0/1: {REGEN}"),
    ({"input_mask": [1] * (SEQ - 1)},
     f"input_mask has length {SEQ - 1} but input_ids has {SEQ}: the record is malformed; {REGEN}"),
    ({"masked_lm_weights": [1, 1, 1, 1, 1]},
     f"masked_lm_weights is a int64_list, expected float_list: not pre-training data; {REGEN}"),
])
def test_bad_values(tmp_path, changes, want):
    path = _one_bad(tmp_path, **changes)
    assert _error([path]) == f"--input_file {path}: record 0: {want}"


def test_missing_features_and_other_protos(tmp_path):
    feats = write_pretraining_records(tmp_path / "src.tfrecord", 1)[0]
    del feats["next_sentence_labels"]
    write_examples(tmp_path / "nonsp.tfrecord", [feats])
    assert _error([tmp_path / "nonsp.tfrecord"]) == (
        f"--input_file {tmp_path / 'nonsp.tfrecord'}: record 0: records lack "
        f"next_sentence_labels: not pre-training data; remove it from --input_file or {REGEN}")
    write_examples(tmp_path / "other.tfrecord", [{"image_id": [3], "pixels": [0.5, 0.25]}])
    assert _error([tmp_path / "other.tfrecord"]) == (
        f"--input_file {tmp_path / 'other.tfrecord'}: record 0: records lack input_ids, "
        "input_mask, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights, "
        f"next_sentence_labels: not pre-training data; remove it from --input_file or {REGEN}")
    with tf.io.TFRecordWriter(str(tmp_path / "raw.tfrecord")) as w:
        w.write(b"\xff\xff\xff not a proto")
    assert _error([tmp_path / "raw.tfrecord"]) == (
        f"--input_file {tmp_path / 'raw.tfrecord'}: record 0: not a tf.train.Example (another "
        "kind of TFRecord): pass the files written by create_pretraining_data.py")


def test_only_the_leading_records_are_read(tmp_path):
    path = tmp_path / "late.tfrecord"
    feats = write_pretraining_records(tmp_path / "src.tfrecord", 6)
    feats[5]["next_sentence_labels"] = [7]
    write_examples(path, feats)
    _check([path], records_per_file=5)
    assert "record 5: next_sentence_labels is [7]" in _error([path], records_per_file=6)
    assert check_file(str(path), SEQ, PRED, records_per_file=3) == (None, 3)


def test_all_empty_and_many_problems(tmp_path, caplog):
    for i in range(3):
        (tmp_path / f"e{i}.tfrecord").write_bytes(b"")
    empty = sorted(tmp_path.glob("e*"))
    assert _error(empty) == (f"--input_file: all 3 file(s) are empty (no records): {empty[0]}, "
                             f"{empty[1]}, {empty[2]}: {REGEN}")
    assert _error(empty[:1]) == f"--input_file {empty[0]}: the file is empty (no records): {REGEN}"
    bad = []
    for i in range(3):
        p = tmp_path / f"t{i}.txt"
        p.write_text("hello world, plain text")
        bad.append(p)
    # One problem, one line (issue 40): the same problem in other files is counted, not logged.
    with caplog.at_level(logging.INFO, logger="bert_tf.pretraining.preflight"):
        msg = _error(bad)
    assert msg == (f"--input_file {bad[0]}: not a TFRecord file (it starts with 'hello world, "
                   "plain text'): pass the TFRecord files written by create_pretraining_data.py "
                   "(the same in 2 more file(s))")
    assert caplog.records == []
    # A different problem of another file is its own warning line; the first is not repeated.
    (tmp_path / "dir.tfrecord").mkdir()
    with caplog.at_level(logging.INFO, logger="bert_tf.pretraining.preflight"):
        msg = _error(bad + [tmp_path / "dir.tfrecord"])
    assert msg.endswith("(the same in 2 more file(s); 1 more file(s) with other problems, "
                        "listed above)")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"--input_file {tmp_path / 'dir.tfrecord'}: is a directory: pass a glob of "
                    f"the files in it, e.g. --input_file={tmp_path / 'dir.tfrecord'}/*")]


def test_sample_of_many_files_is_even_and_deterministic(tmp_path):
    files = [f"f{i:05d}" for i in range(10000)]
    s = sample_files(files, 1000)
    assert len(s) == 1000 and s[0] == "f00000" and s[-1] == "f09999"
    assert s == sample_files(files, 1000) and len(set(s)) == 1000
    assert sample_files(files[:7], 1000) == files[:7]
    # A sampled check names only files it read, and says so for empty ones.
    for i in range(5):
        (tmp_path / f"e{i}.tfrecord").write_bytes(b"")
    empty = sorted(tmp_path.glob("e*"))
    assert _error(empty, max_files=2) == (
        f"--input_file: all 2 checked of 5 file(s) are empty (no records): {empty[0]}, "
        f"{empty[4]}: {REGEN}")


def test_run_pretraining_reports_each_mistake_in_one_line_and_writes_nothing(tmp_path):
    """The issue's table, through run_pretraining.py (one interpreter runs every case)."""
    from conftest import tiny_bert_config
    config = tmp_path / "bert_config.json"
    tiny_bert_config(vocab_size=VOCAB).to_json_file(str(config))
    d = tmp_path / "data"
    d.mkdir()
    good, _ = _good(d, "good-0.tfrecord", n=8)
    (d / "text-0.txt").write_text("This is a sentence.\nAnother one.\n")
    write_pretraining_records(d / "seq-0.tfrecord", 4, seq_len=64)
    write_pretraining_records(d / "pred-0.tfrecord", 4, max_pred=20)
    long, _ = _good(tmp_path, "long.tfrecord", n=40)
    data = long.read_bytes()
    (d / "cut-0.tfrecord").write_bytes(data[:-50])  # cut in its last record
    write_pretraining_records(d / "vocab-0.tfrecord", 4, vocab_size=3000, seed=4)
    ft = d / "train.tf_record"
    write_examples(ft, [{"input_ids": [1] * SEQ, "input_mask": [1] * SEQ,
                         "segment_ids": [0] * SEQ, "label_ids": [1], "is_real_example": [1]}])
    cases = {  # input files -> what the check says (compared with test_preflight's lines above)
        "text": ([good, d / "text-0.txt"], check_file(str(d / "text-0.txt"), SEQ, PRED)[0]),
        "seq": ([d / "seq-0.tfrecord"], check_file(str(d / "seq-0.tfrecord"), SEQ, PRED)[0]),
        "pred": ([d / "pred-0.tfrecord"], check_file(str(d / "pred-0.tfrecord"), SEQ, PRED)[0]),
        "cut": ([d / "cut-0.tfrecord"], check_file(str(d / "cut-0.tfrecord"), SEQ, PRED)[0]),
        "vocab": ([d / "vocab-0.tfrecord"],
                  check_file(str(d / "vocab-0.tfrecord"), SEQ, PRED, VOCAB)[0]),
        "finetuning": ([good, ft], check_file(str(ft), SEQ, PRED)[0]),
    }
    assert all(want for _, want in cases.values())
    assert "does not end with a whole record" in cases["cut"][1]
    assert "holds fine-tuning" in cases["finetuning"][1]
    argv = {}
    for name, (files, _) in cases.items():
        argv[name] = [f"--bert_config_file={config}", f"--input_file={','.join(map(str, files))}",
                      f"--output_dir={tmp_path / name}", "--max_seq_length=32",
                      "--max_predictions_per_seq=5", "--train_batch_size=4",
                      "--eval_batch_size=4", "--num_train_steps=2", "--num_warmup_steps=1",
                      "--do_train" if name != "pred" else "--do_eval"]
    got, _ = run_pretraining_cases(argv, tmp_path)
    for name, (_, want) in cases.items():
        assert got[name] == f"error: {want}", name
        out = tmp_path / name
        assert not out.exists() or not list(out.iterdir()), (name, list(out.iterdir()))


@pytest.mark.slow  # three training runs (~2.5 min on a loaded 2-core machine)
def test_run_pretraining_in_graph_checks_and_skip_corrupt_records(tmp_path):
    """Past the pre-flight's leading records: bad ids and a corrupt record stop the run with
    one line and no checkpoint; --skip_corrupt_records trains on, logging what was lost."""
    import os
    import subprocess
    import sys
    from conftest import tiny_bert_config
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    config = tmp_path / "bert_config.json"
    tiny_bert_config(vocab_size=VOCAB).to_json_file(str(config))
    feats = write_pretraining_records(tmp_path / "src", 24)
    feats[20]["input_ids"] = [1] * (SEQ - 1) + [999]
    write_examples(tmp_path / "ids.tfrecord", feats)
    good = tmp_path / "good.tfrecord"
    write_pretraining_records(good, 24)
    data, pos = bytearray(good.read_bytes()), 0
    for _ in range(20):
        pos += 16 + int.from_bytes(data[pos:pos + 8], "little")
    data[pos + 30] ^= 0x55
    (tmp_path / "crc.tfrecord").write_bytes(bytes(data))

    def run(name, *extra):
        return subprocess.run(
            [sys.executable, os.path.join(repo, "run_pretraining.py"),
             f"--bert_config_file={config}", f"--input_file={tmp_path / name}.tfrecord",
             f"--output_dir={tmp_path / name}", "--max_seq_length=32",
             "--max_predictions_per_seq=5", "--train_batch_size=4", "--num_train_steps=8",
             "--num_warmup_steps=1", "--iterations_per_loop=8", "--seed=1", "--do_train",
             *extra], capture_output=True, text=True, cwd=tmp_path, timeout=300,
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))

    res = run("ids")
    assert res.returncode == 1 and res.stderr.splitlines()[-1] == (
        f"error: --input_file {tmp_path / 'ids.tfrecord'}: record 20: input_ids has id 999 outside "
        f"[0, vocab_size {VOCAB}) of --bert_config_file: use the bert_config.json that matches "
        "the data or regenerate the data"), res.stderr[-3000:]
    res = run("crc")
    assert res.returncode == 1 and res.stderr.splitlines()[-1] == (
        f"error: --input_file {tmp_path / 'crc.tfrecord'}: record 20 at byte {pos} is corrupt or "
        f"truncated: copy the file again or {REGEN}; or skip the rest of such files with "
        "--skip_corrupt_records"), res.stderr[-3000:]
    for name in ("ids", "crc"):
        assert not [p for p in (tmp_path / name).glob("*") if "ckpt" in p.name
                    or p.name == "checkpoint"], name
    res = run("crc", "--skip_corrupt_records")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (f"warning: --input_file {tmp_path / 'crc.tfrecord'}: record 20 at byte {pos} is "
            "corrupt or truncated: skipped the rest of the file (--skip_corrupt_records): "
            f"4 record(s), {len(data) - pos} bytes lost") in res.stderr
    assert (tmp_path / "crc" / "checkpoint").exists()


# ---- issue 40: one line, before TensorFlow; messages and figures that say what they are ------

def _packed_shards(tmp_path):
    """400 sequences (seq 64, 7..64 tokens) packed into 2 shards by bert-pack-pretraining-data
    (its journal in packed/.bert_tf/); returns (shard paths, journal dict)."""
    from bert_tf.pretraining_data.sequence_packing_run import PackOptions, run
    (tmp_path / "data").mkdir()
    for i in range(2):
        write_pretraining_records(tmp_path / "data" / f"u{i}.tfrecord", 200, seq_len=64,
                                  seed=i, min_len=7)
    journal = run(PackOptions(input_file=str(tmp_path / "data" / "u*.tfrecord"),
                              output_file=str(tmp_path / "packed" / "p.tfrecord"),
                              output_shards=2, max_seq_length=64, max_predictions_per_seq=5,
                              progress=False))
    return sorted(str(p) for p in (tmp_path / "packed").glob("p.tfrecord-*")), journal


def test_figures_say_what_they_cover(tmp_path, caplog):
    """The line gives the whole data's figures from the packer's journal, else says they are
    a sample and of how many records; a step's sequences for packed rows (issue 39)."""
    from bert_tf.pretraining import preflight
    shards, journal = _packed_shards(tmp_path)
    t, shape = journal["totals"], (64, journal["num_predictions"], 3)
    run_log = preflight.RunLog()
    with caplog.at_level(logging.INFO, logger="bert_tf.pretraining.preflight"):
        info = check_pretraining_files(shards, 64, 5, VOCAB, 2, batch_size=32, run_log=run_log)
    per_row = t["sequences_in"] / t["packs_out"]
    assert (info["source"], info["rows"], info["sequences"]) == ("journal", t["packs_out"],
                                                                 t["sequences_in"])
    assert info["padding"] == pytest.approx(t["padding_share_after"], abs=1e-6)
    assert caplog.messages == [
        f"pre-flight: packed records (up to 3 sequences per pack; {shape[1]} predictions), 8 "
        f"record(s) of 2 file(s) checked; the whole data (the packer's journal): "
        f"{t['packs_out']} rows holding {t['sequences_in']} sequences, {per_row:.2f} sequences "
        f"per row on average, padding {100 * t['padding_share_after']:.1f}% of the tokens; a "
        f"step of --train_batch_size=32 rows holds {32 * per_row:.1f} sequences on average"]
    caplog.clear()
    # The same files again in the same run (another input pipeline): no second line.
    with caplog.at_level(logging.INFO, logger="bert_tf.pretraining.preflight"):
        check_pretraining_files(shards, 64, 5, VOCAB, 2, batch_size=32, run_log=run_log)
    assert caplog.messages == []
    # Without the journal: the sampled records' figures, said to be a sample.
    for p in (tmp_path / "packed" / ".bert_tf").iterdir():
        p.unlink()
    with caplog.at_level(logging.INFO, logger="bert_tf.pretraining.preflight"):
        info = check_pretraining_files(shards, 64, 5, VOCAB, 2, batch_size=32,
                                       run_log=preflight.RunLog())  # another run
    assert info["source"] == "sample" and "rows" not in info
    assert caplog.messages == [
        f"pre-flight: packed records (up to 3 sequences per pack; {shape[1]} predictions), 8 "
        f"record(s) of 2 file(s) checked; in a sample, the first 8 record(s) (4 at most of each "
        f"file): {info['sequences_per_row']:.2f} sequences per row on average, padding "
        f"{100 * info['padding']:.1f}% of the tokens; a step of --train_batch_size=32 rows holds "
        f"{32 * info['sequences_per_row']:.1f} sequences on average"]


def test_dynamic_masking_on_packed_records_says_what_to_do(tmp_path):
    from bert_tf.pretraining.options import PretrainingOptions
    from bert_tf.pretraining.preflight_run import check_run
    shards, _ = _packed_shards(tmp_path)
    o = PretrainingOptions(input_file=",".join(shards), output_dir=str(tmp_path / "out"),
                           max_seq_length=64, max_predictions_per_seq=5, do_train=True,
                           dynamic_masking=True)
    with pytest.raises(BertError) as e:
        check_run(o)
    assert str(e.value) == (
        "--dynamic_masking: packed records were masked when they were made "
        "(bert-pack-pretraining-data keeps each sequence's masks), so training on them uses "
        "those masks: drop --dynamic_masking, or pass the unpacked records to --input_file to "
        "draw new masks at every read")
    import dataclasses
    assert check_run(dataclasses.replace(o, do_train=False, do_eval=True))["packed"]  # eval: ok


def test_packed_segment_ids_beyond_the_config_say_what_to_do(tmp_path):
    shards, _ = _packed_shards(tmp_path)
    with pytest.raises(BertError) as e:
        check_pretraining_files(shards[:1], 64, 5, VOCAB, 1)
    assert str(e.value) == (
        f"--input_file {shards[0]}: record 0: segment_ids has 1, outside [0, type_vocab_size 1) "
        "of --bert_config_file: pass the bert_config.json the data was made for, or re-pack "
        "the data with bert-pack-pretraining-data from records made for this config")


def test_wrong_seq_length_on_packed_records_is_one_line_before_tensorflow(tmp_path):
    """Issue 40: two absl `E... preflight.py` lines came before the error line, after ~12 s
    (the strategy and the model were built first). Now: one line, TensorFlow never imported."""
    import os
    import subprocess
    import sys
    shards, _ = _packed_shards(tmp_path)
    from conftest import tiny_bert_config
    tiny_bert_config(vocab_size=VOCAB).to_json_file(str(tmp_path / "bert_config.json"))
    driver = ("import atexit, sys; atexit.register(lambda: print('tensorflow imported:', "
              "'tensorflow' in sys.modules)); sys.argv[0] = 'bert-run-pretraining'; "
              "from bert_tf.commands.run_pretraining import main; main()")
    res = subprocess.run(
        [sys.executable, "-c", driver, f"--bert_config_file={tmp_path / 'bert_config.json'}",
         f"--input_file={tmp_path / 'packed' / 'p.tfrecord-*'}",
         f"--output_dir={tmp_path / 'out'}", "--max_seq_length=32", "--do_train"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"error: --input_file {shards[0]}: record 0: packed records have input_ids of length "
        "64, not --max_seq_length=32: pass --max_seq_length=64 (the same in 1 more file(s))"]
    assert res.stdout.splitlines() == ["tensorflow imported: False"]
    assert not (tmp_path / "out").exists()


def test_unreadable_file_says_what_to_do(tmp_path):
    gone = tmp_path / "gone.tfrecord"
    gone.symlink_to(tmp_path / "moved-away.tfrecord")  # a file that vanished after the glob
    assert check_file(str(gone), SEQ, PRED) == (
        f"--input_file {gone}: cannot read it (No such file or directory): check that it exists "
        "and is readable by this user, or remove it from --input_file", 0)


# ---- review of issues 39/40: remote files, the journal, P, one line, one line per run ------

def _ram(name, data):
    """`data` written to TF's in-memory file system (a remote scheme: read through TF)."""
    path = f"ram://preflight-{name}"
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(data)
    return path


def test_remote_files_good_corrupt_and_missing_are_one_line(tmp_path):
    """The remote reader raised IndexError on an OpError with an empty message (a missing
    ram:// file), instead of the one-line error."""
    path, _ = _good(tmp_path, n=3)
    data = path.read_bytes()
    rec = 16 + int.from_bytes(data[:8], "little")
    bad = bytearray(data)
    bad[rec + 20] ^= 0xFF  # a payload byte of record 1
    good, crc = _ram(f"{tmp_path.name}/good.tfrecord", data), _ram(f"{tmp_path.name}/crc.tfrecord",
                                                                   bytes(bad))
    assert check_file(good, SEQ, PRED) == (None, 3)
    assert _check([good])["records"] == 3
    assert _error([crc]) == (f"--input_file {crc}: corrupt record 1 at byte {rec} (checksum "
                             f"mismatch): the file is damaged: copy it again or {REGEN}")
    missing = f"ram://preflight-{tmp_path.name}/missing.tfrecord"
    assert _error([missing]) == (
        f"--input_file {missing}: cannot read it (NotFoundError): check that it exists and is "
        "readable by this user, or remove it from --input_file")


def test_remote_packed_records_take_their_figures_from_the_journal(tmp_path):
    """os.path.normpath made ram://d/x (and gs://b/x) ram:/d/x, so the journal was never found."""
    shards, journal = _packed_shards(tmp_path)
    folder = f"ram://preflight-{tmp_path.name}/packed"
    remote = [_ram(f"{tmp_path.name}/packed/{p.rsplit('/', 1)[1]}", open(p, "rb").read())
              for p in shards]
    for p in (tmp_path / "packed" / ".bert_tf").glob("*.stats.json"):
        _ram(f"{tmp_path.name}/packed/.bert_tf/{p.name}", p.read_bytes())
    info = check_pretraining_files(remote, 64, 5, VOCAB, 2)
    assert (info["source"], info["rows"], info["sequences"]) == (
        "journal", journal["totals"]["packs_out"], journal["totals"]["sequences_in"])
    assert info["journals"] == [f"{folder}/.bert_tf/p.tfrecord.stats.json"]


def test_packed_records_with_fewer_predictions_than_the_flag_say_what_to_do(tmp_path):
    """'any P >= --max_predictions_per_seq' was documented, not enforced: P=8 trained with
    --max_predictions_per_seq=20 silently."""
    shards, journal = _packed_shards(tmp_path)
    p = journal["num_predictions"]
    assert p >= 8 and check_pretraining_files(shards, 64, p, VOCAB, 2)["packed"]  # P == flag
    with pytest.raises(BertError) as e:
        check_pretraining_files(shards, 64, 20, VOCAB, 2)
    assert str(e.value) == (
        f"--input_file {shards[0]}: record 0: packed records hold {p} masked-LM predictions per "
        "row, fewer than --max_predictions_per_seq=20: pass the --max_predictions_per_seq the "
        f"unpacked records were made with (at most {p}; at most {p - 3} if "
        "bert-pack-pretraining-data packed them: its P is at least that + N), or re-pack the "
        "data with bert-pack-pretraining-data from records made with "
        "--max_predictions_per_seq=20 (the same in 1 more file(s))")


def _command(tmp_path, *flags):
    import os
    import subprocess
    import sys
    from conftest import tiny_bert_config
    tiny_bert_config(vocab_size=VOCAB).to_json_file(str(tmp_path / "bert_config.json"))
    driver = ("import sys; sys.argv[0] = 'bert-run-pretraining'; "
              "from bert_tf.commands.run_pretraining import main; main()")
    return subprocess.run(
        [sys.executable, "-c", driver, f"--bert_config_file={tmp_path / 'bert_config.json'}",
         f"--input_file={tmp_path / 'packed' / 'p.tfrecord-*'}",
         f"--output_dir={tmp_path / 'out'}", "--do_train", *flags],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))


def test_dynamic_masking_on_packed_records_is_one_line(tmp_path):
    """The pre-flight's INFO line was logged before the --dynamic_masking error: 2 lines."""
    from bert_tf.pretraining.preflight import DYNAMIC_MASKING_ON_PACKED
    _packed_shards(tmp_path)
    res = _command(tmp_path, "--max_seq_length=64", "--max_predictions_per_seq=5",
                   "--dynamic_masking")
    assert res.returncode == 1
    assert res.stderr.splitlines() == [f"error: {DYNAMIC_MASKING_ON_PACKED}"]


def test_the_line_is_logged_once_per_run_not_once_per_process(tmp_path, caplog):
    """The pre-flight's state is the run's `RunLog`, passed along (no module state): the
    command's pre-flight logs the line once, the run's input pipelines handed the same RunLog
    do not repeat it, and a second run in one process (a notebook's) logs it again."""
    from bert_tf.pretraining import preflight
    from bert_tf.pretraining.options import PretrainingOptions
    from bert_tf.pretraining.preflight_run import check_run
    shards, _ = _packed_shards(tmp_path)
    o = PretrainingOptions(input_file=",".join(shards), output_dir=str(tmp_path / "out"),
                           max_seq_length=64, max_predictions_per_seq=5, do_train=True)

    def lines(step):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="bert_tf.pretraining.preflight"):
            step()
        return len([m for m in caplog.messages if m.startswith("pre-flight:")])

    def pipeline(run_log):  # an input pipeline of the run
        return lambda: check_pretraining_files(shards, 64, 5, run_log=run_log)

    for _ in range(2):  # the command's main() twice in one process
        run_log = preflight.RunLog()
        assert lines(lambda: check_run(o, run_log)) == 1
        assert lines(pipeline(run_log)) + lines(pipeline(run_log)) == 0
    for _ in range(2):  # run_pretraining twice, without the command
        run_log = preflight.RunLog()
        assert lines(pipeline(run_log)) + lines(pipeline(run_log)) == 1
    assert lines(pipeline(None)) == 1  # no run: every call logs
    assert not [name for name in vars(preflight) if name.isupper() and name.startswith("_")]
