"""Atomic outputs: TFRecords and JSON written under `<path>.tmp-<pid>` and renamed into place."""
import os
import posixpath

from bert_tf import BertError, fileio


tmp_name = fileio.tmp_name


def _gfile():
    import tensorflow as tf
    return tf.io.gfile, tf.errors.OpError


def check_writable(paths, flag="--output_file"):
    """Create the output directories and prove they are writable (before any work is done)."""
    gfile, op_error = _gfile()
    for directory in sorted({posixpath.dirname(p) or "." for p in paths}):
        probe = posixpath.join(directory, f".bert_tf-write-probe-{os.getpid()}")
        try:
            gfile.makedirs(directory)
            with gfile.GFile(probe, "wb") as f:
                f.write(b"")
            gfile.remove(probe)
        except op_error as e:
            raise BertError(f"{flag}: cannot write to {directory!r} ({e.message})") from None


def exists(path):
    gfile, _ = _gfile()
    return gfile.exists(path)


def remove_quietly(path):
    gfile, op_error = _gfile()
    try:
        if gfile.exists(path):
            gfile.remove(path)
    except op_error:
        pass


def remove_stale_tmps(path):
    """Delete `<path>.tmp-*` left by a killed run."""
    gfile, op_error = _gfile()
    try:
        for stale in gfile.glob(path + ".tmp-*"):
            remove_quietly(stale)
    except op_error:
        pass


def rename_into_place(tmp, path):
    gfile, _ = _gfile()
    gfile.rename(tmp, path, overwrite=True)


write_text_atomic = fileio.write_text_atomic


def read_text(path):
    gfile, _ = _gfile()
    with gfile.GFile(path, "r") as f:
        return f.read()


class RecordFile:
    """One TFRecord file written to a temp name; `commit()` renames it into place."""

    def __init__(self, path):
        import tensorflow as tf
        self.path = path
        self.tmp = tmp_name(path)
        try:
            self._writer = tf.io.TFRecordWriter(self.tmp)
        except tf.errors.OpError as e:
            raise BertError(f"{path}: cannot write ({e.message})") from None
        self.count = 0

    def write(self, record):
        self._writer.write(record)
        self.count += 1

    def close(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def commit(self):
        self.close()
        rename_into_place(self.tmp, self.path)

    def abort(self):
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
        for f in self.files:
            f.close()
        for f in self.files:
            f.commit()

    def abort(self):
        for f in self.files:
            f.abort()
