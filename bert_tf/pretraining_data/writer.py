"""Atomic outputs: TFRecords and JSON written under `<path>.tmp-<pid>` and renamed into place.

Local paths use Python's own file calls and a hand-written TFRecord framing (length + masked
CRC-32C from `google-crc32c`), so the data path never imports TensorFlow. Other schemes
(gs://, ...) go through `tf.io.gfile` with the same framing.
"""
import os
import posixpath
import struct

from bert_tf import BertError, fileio
from bert_tf.pretraining_data.documents import is_local

tmp_name = fileio.tmp_name
remove_quietly = fileio.remove_file_quietly

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def _crc_fn():
    try:
        import google_crc32c
    except ImportError:  # pinned by the project; name the fix all the same
        raise BertError("writing TFRecords needs google-crc32c "
                        "(pip install google-crc32c)") from None
    return google_crc32c.value


_crc32c = None


def masked_crc(data):
    """TFRecord's masked CRC-32C of `data` (bytes or memoryview)."""
    global _crc32c
    if _crc32c is None:
        _crc32c = _crc_fn()
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(records):
    """Serialized records -> one bytes object of TFRecord frames (what a TFRecord file holds)."""
    global _crc32c
    if _crc32c is None:
        _crc32c = _crc_fn()
    crc32c, pack_u32, pack_u64 = _crc32c, _U32.pack, _U64.pack
    heads = {}
    out = []
    for record in records:
        n = len(record)
        head = heads.get(n)
        if head is None:
            length = pack_u64(n)
            head = heads[n] = length + pack_u32(masked_crc(length))
        crc = crc32c(record)
        out.append(head + record + pack_u32((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF))
    return b"".join(out)


def _gfile():
    import tensorflow as tf
    return tf.io.gfile, tf.errors.OpError


def check_writable(paths, flag="--output_file"):
    """Create the output directories and prove they are writable (before any work is done).

    Args:
        paths: the output files.
        flag: the flag they came from, named in the error.
    """
    for directory in sorted({posixpath.dirname(p) or "." for p in paths}):
        probe = posixpath.join(directory, f".bert_tf-write-probe-{os.getpid()}")
        if is_local(directory):
            try:
                os.makedirs(directory, exist_ok=True)
                with open(probe, "wb"):
                    pass
                os.remove(probe)
            except OSError as e:
                raise BertError(f"{flag}: cannot write to {directory!r} ({e.strerror})") from None
            continue
        gfile, op_error = _gfile()
        try:
            gfile.makedirs(directory)
            with gfile.GFile(probe, "wb") as f:
                f.write(b"")
            gfile.remove(probe)
        except op_error as e:
            raise BertError(f"{flag}: cannot write to {directory!r} ({e.message})") from None


def exists(path):
    """Whether `path` exists (local without TensorFlow)."""
    if is_local(path):
        return os.path.exists(path)
    gfile, _ = _gfile()
    return gfile.exists(path)


def remove_stale_tmps(path):
    """Delete `<path>.tmp-*` left by a killed run."""
    if is_local(path):
        import glob
        for stale in glob.glob(glob.escape(path) + ".tmp-*"):
            remove_quietly(stale)
        return
    gfile, op_error = _gfile()
    try:
        for stale in gfile.glob(path + ".tmp-*"):
            remove_quietly(stale)
    except op_error:
        pass


def rename_into_place(tmp, path):
    """Rename `tmp` to `path`, replacing it (atomic on local file systems).

    Args:
        tmp: the finished temp file.
        path: its final name.
    """
    if is_local(path):
        os.replace(tmp, path)
        return
    gfile, _ = _gfile()
    gfile.rename(tmp, path, overwrite=True)


def write_text_atomic(path, text):
    """`fileio.write_text_atomic` (local without TensorFlow); returns `path`.

    Args:
        path: the file to write.
        text: its contents (UTF-8).
    """
    return fileio.write_text_atomic(path, text)


def read_text(path):
    """A UTF-8 file's text (local without TensorFlow)."""
    if is_local(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    gfile, _ = _gfile()
    with gfile.GFile(path, "r") as f:
        return f.read()


def _open_for_write(path):
    if is_local(path):
        try:
            return open(path, "wb")
        except OSError as e:
            raise BertError(f"{path}: cannot write ({e.strerror})") from None
    gfile, op_error = _gfile()
    try:
        return gfile.GFile(path, "wb")
    except op_error as e:
        raise BertError(f"{path}: cannot write ({e.message})") from None


class RecordFile:
    """One TFRecord file written to a temp name; `commit()` renames it into place."""

    def __init__(self, path):
        self.path = path
        self.tmp = tmp_name(path)
        self._file = _open_for_write(self.tmp)
        self.count = 0

    def write(self, record):
        """Append one serialized record."""
        self._file.write(frame((record,)))
        self.count += 1

    def write_framed(self, data, count):
        """Append records already framed (`frame()`, `BatchEncoder.encode_framed`): one write.

        Args:
            data: the framed records (bytes or a uint8 array).
            count: records in them.
        """
        if not isinstance(data, bytes) and not is_local(self.path):
            data = bytes(data)  # a numpy array: gfile takes bytes
        self._file.write(data)
        self.count += count

    def close(self):
        """Closes the temp file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def commit(self):
        """Closes the temp file and renames it into place."""
        self.close()
        rename_into_place(self.tmp, self.path)

    def abort(self):
        """Closes and deletes the temp file."""
        self.close()
        remove_quietly(self.tmp)


class RecordFiles:
    """Several RecordFiles committed together (the original mode's round-robin outputs)."""

    def __init__(self, paths):
        self.files = []
        try:
            for p in paths:
                self.files.append(RecordFile(p))
        except BaseException:
            self.abort()
            raise

    def __getitem__(self, i):
        return self.files[i]

    def __len__(self):
        return len(self.files)

    def commit(self):
        """Closes all, then renames all into place."""
        for f in self.files:
            f.close()
        for f in self.files:
            f.commit()

    def abort(self):
        """Deletes all temp files."""
        for f in self.files:
            f.abort()
