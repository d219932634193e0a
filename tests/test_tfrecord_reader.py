"""bert_tf.pretraining.tfrecord_reader: local files in Python, remote ones through TF's private
C++ record reader, and, where that cannot be imported, the public tf.io.gfile fallback, which
gives the same records and the same errors."""
import sys

import pytest
import tensorflow as tf

from bert_tf.pretraining import tfrecord_reader as reader

PRIVATE = "tensorflow.python.lib.io._pywrap_record_io"
RECORDS = [b"", b"a", b"\x00\xff" * 50, bytes(range(256)) * 40]  # empty, tiny, 10 KiB


def _write(path, records=RECORDS):
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def _put(path, data):
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(data)


@pytest.fixture
def no_private_reader(monkeypatch):
    # None in sys.modules makes `from <module> import ...` raise ImportError.
    monkeypatch.setitem(sys.modules, PRIVATE, None)
    assert reader._record_iterator_class() is None


def _outcome(path):
    try:
        return list(reader.records(path))
    except reader.DataLoss:
        return "DataLoss"
    except OSError:
        return "OSError"


def _cases(tmp_path, prefix):
    """{name: path} of a good, a corrupt, a cut-off and a missing file under `prefix`."""
    good = _write(f"{prefix}/good.tfrecord")
    corrupt = bytearray(good)
    corrupt[30] ^= 1  # a byte of the second record's data: its checksum fails
    paths = {"good": f"{prefix}/good.tfrecord", "corrupt": f"{prefix}/corrupt.tfrecord",
             "cut_data": f"{prefix}/cut_data.tfrecord", "cut_header": f"{prefix}/cut_hdr.tfrecord",
             "missing": f"{prefix}/missing.tfrecord"}
    _put(paths["corrupt"], bytes(corrupt))
    _put(paths["cut_data"], good[:-10])  # the last record's data cut off
    _put(paths["cut_header"], good + good[:7])  # a partial header after whole records
    return paths


def test_private_reader_is_what_this_tf_has():
    assert reader._record_iterator_class() is not None  # TF 2.20: the fast path is in use


@pytest.mark.parametrize("fallback", [False, True])
def test_remote_files_give_the_local_reader_records_and_errors(tmp_path, request, fallback):
    if fallback:
        request.getfixturevalue("no_private_reader")
    local = _cases(tmp_path, str(tmp_path))
    remote = _cases(tmp_path, f"ram://tfrecord-reader-{tmp_path.name}-{fallback}")
    want = {"good": RECORDS, "corrupt": "DataLoss", "cut_data": "DataLoss",
            "cut_header": RECORDS, "missing": "OSError"}
    assert {k: _outcome(p) for k, p in local.items()} == want
    assert {k: _outcome(p) for k, p in remote.items()} == want


def test_fallback_reads_what_tf_wrote_record_for_record(tmp_path, monkeypatch):
    path = f"ram://tfrecord-reader-{tmp_path.name}/many.tfrecord"
    records = [bytes([i % 251]) * (i * 37 % 5000) for i in range(300)]
    _write(path, records)
    fast = list(reader.records(path))
    monkeypatch.setitem(sys.modules, PRIVATE, None)
    slow = list(reader.records(path))
    assert fast == slow == records
    # first_example (the "packed or not" decision) reads the same example either way
    example = tf.train.Example(features=tf.train.Features(feature={
        "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2, 3]))}))
    ex_path = f"ram://tfrecord-reader-{tmp_path.name}/ex.tfrecord"
    _write(ex_path, [example.SerializeToString()])
    got = reader.first_example([path.replace("many", "none"), ex_path])
    assert list(got.features.feature["input_ids"].int64_list.value) == [1, 2, 3]
