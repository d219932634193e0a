"""TFRecord files read without TensorFlow (local files), and what is wrong with their framing.

Local files are read in Python (framing and CRC-32C checked, tf.train.Example parsed by a
protobuf class of our own), so the pre-flight and the run's "packed or not" decision neither
import TensorFlow nor start its runtime: a MultiWorkerMirroredStrategy must be created before
TensorFlow's context is. gs:// and other schemes go through TF's C++ record reader (no context
either); that reader is a private TF API, so where it cannot be imported the same Python framing
reads them through the public tf.io.gfile (no context either, same records and errors).
`describe_framing_error` names what a refused record's bytes show, with the fix.
"""
import os
import struct

import numpy as np

from bert_tf.fileio import is_local
from bert_tf.pretraining_data.writer import masked_crc as masked_crc32c  # google-crc32c

REGENERATE = "regenerate the data with create_pretraining_data.py"


class DataLoss(Exception):
    """A record's framing or checksum is wrong (TF's DataLossError)."""


def _tf():
    import tensorflow as tf  # remote file systems only: local files need no TensorFlow
    return tf


def open_file(path):
    """The file opened for reading bytes (local: open(), 5x cheaper than GFile)."""
    return open(path, "rb") if is_local(path) else _tf().io.gfile.GFile(path, "rb")


def file_size(path):
    """The file's length in bytes."""
    return os.path.getsize(path) if is_local(path) else _tf().io.gfile.stat(path).length


def records(path):
    """Yields the records of a TFRecord file; DataLoss on bad framing, OSError if unreadable.
    A partial header at the end just ends it (as TF's reader; callers compare sizes)."""
    if not is_local(path):
        yield from _remote_records(path)
        return
    with open(path, "rb") as f:
        yield from _framed_records(f)


def _framed_records(f):
    # TFRecord framing: uint64 length, masked CRC-32C of it, the data, masked CRC-32C of it.
    while len(head := f.read(12)) == 12:
        length, crc = struct.unpack("<QI", head)
        if masked_crc32c(head[:8]) != crc:
            raise DataLoss
        data, tail = f.read(length), f.read(4)
        if len(tail) < 4 or masked_crc32c(data) != struct.unpack("<I", tail)[0]:
            raise DataLoss
        yield data


def _first_line(error):
    # An OpError's message can be empty (ram:// of a missing file): still one line.
    return ((error.message or "").strip() or type(error).__name__).splitlines()[0]


def _record_iterator_class():
    """TF's C++ record reader (the fast path for remote files), or None where this TF release
    does not have it: it is a private API (tf.data's TFRecordDataset would start the runtime)."""
    try:
        from tensorflow.python.lib.io._pywrap_record_io import RecordIterator  # no deprecation
    except ImportError:
        return None
    return RecordIterator


def _remote_records(path):
    tf = _tf()
    iterator_class = _record_iterator_class()
    if iterator_class is None:
        yield from _gfile_records(path)
        return
    try:
        it = iterator_class(path, "")
    except tf.errors.OpError as e:
        raise OSError(_first_line(e)) from None
    try:
        while True:
            try:
                raw = next(it)
            except StopIteration:
                return
            except tf.errors.DataLossError:
                raise DataLoss from None
            except tf.errors.OpError as e:
                raise OSError(_first_line(e)) from None
            yield raw
    finally:
        it.close()


def _gfile_records(path):
    """The Python framing over tf.io.gfile (public API, no TF context)."""
    tf = _tf()
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            yield from _framed_records(f)
    except tf.errors.OpError as e:
        raise OSError(_first_line(e)) from None


def parse_example(raw):
    """A serialized tf.train.Example -> the protobuf message (TensorFlow not imported)."""
    from bert_tf.pretraining_data.sequence_packing_io import example_class
    return example_class().FromString(raw)


def first_example(files):
    """The first readable record of `files` (the first file that has one), parsed; None when
    no file has one (the pre-flight names the problem).

    Args:
        files: TFRecord paths.
    """
    for path in files:
        it = None
        try:
            it = records(path)
            for raw in it:
                return parse_example(raw)
        except Exception:  # noqa: BLE001 - bad files get their one-line error from pre-flight
            continue
        finally:
            if it is not None:
                it.close()
    return None


# ---- diagnosis of what the reader refused --------------------------------------------------

def _preview(data):
    text = data[:24].decode("utf-8", "replace")
    return " ".join(text.split())


def describe_framing_error(path, offset, index):
    """What is wrong with the TFRecord record that starts at byte `offset` (a phrase + fix).

    Args:
        path: the file.
        offset: byte offset of the record's header.
        index: the record's index in the file (named in the phrase).
    """
    size = file_size(path)
    with open_file(path) as f:
        head = f.read(24)
        f.seek(offset)
        header = f.read(12)
    if offset == 0 and head[:2] == b"\x1f\x8b":
        return ("is gzip-compressed: decompress it (pre-training reads uncompressed TFRecords)")
    if offset == 0 and size < 12:
        return (f"not a TFRecord file ({size} bytes, it starts with {_preview(head)!r}): pass the "
                f"TFRecord files written by create_pretraining_data.py")
    if len(header) < 12:
        return (f"truncated: the file ends {size - offset} bytes into the header of record "
                f"{index} (byte {offset}); the shard was cut off: copy it again or {REGENERATE}")
    length, length_crc = struct.unpack("<QI", header)
    if masked_crc32c(header[:8]) != length_crc:
        if offset == 0:
            return (f"not a TFRecord file (it starts with {_preview(head)!r}): pass the "
                    f"TFRecord files written by create_pretraining_data.py")
        return (f"corrupt header of record {index} at byte {offset}: the file is damaged: copy "
                f"it again or {REGENERATE}")
    if offset + 16 + length > size:
        return (f"truncated: record {index} at byte {offset} needs {length + 16} bytes, the file "
                f"ends {size - offset} bytes after its start; the shard was cut off: copy it "
                f"again or {REGENERATE}")
    return (f"corrupt record {index} at byte {offset} (checksum mismatch): the file is "
            f"damaged: copy it again or {REGENERATE}")


def _read_tail(path, size, n):
    with open_file(path) as f:
        f.seek(size - n)
        return f.read(n)


def ends_with_whole_record(path, size, window=4096, max_window=1 << 20):
    """Whether the file ends exactly at the end of a record (a cut-off shard does not).

    Looks in the file's last `window` bytes (growing to `max_window`) for a record header whose
    length reaches exactly the last byte and whose length checksum matches: one small read, not
    a walk of the whole file.

    Args:
        path: the file.
        size: its length in bytes.
        window: bytes read from the end at first.
        max_window: the largest window tried.
    Returns:
        True, False, or None when the last record may be longer than `max_window`.
    """
    while True:
        n = min(size, window)
        tail = _read_tail(path, size, n)
        k = n - 15  # candidate header starts p in [0, n - 16]
        if k > 0:
            b = np.frombuffer(tail, np.uint8).astype(np.uint32)
            low = b[:k] | b[1:k + 1] << 8 | b[2:k + 2] << 16 | b[3:k + 3] << 24
            high = b[4:k + 4] | b[5:k + 5] | b[6:k + 6] | b[7:k + 7]  # 0: records < 4 GiB
            hit = (low == np.arange(n - 16, n - 16 - k, -1, dtype=np.uint32)) & (high == 0)
            for p in np.flatnonzero(hit):
                if masked_crc32c(tail[p:p + 8]) == struct.unpack("<I", tail[p + 8:p + 12])[0]:
                    return True
        if n == size:
            return False
        if window >= max_window:
            return None
        window *= 8
