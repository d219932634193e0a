"""Small file helpers every module shares.

All through tf.io.gfile, so gs:// paths work (a Cloud TPU reads only GCS). Text is UTF-8, and a
bad byte is reported with its file and line. Writes go to `<path>.tmp-<pid>` and are renamed into
place, so no half-written file ever carries the final name.
"""
import os

from bert_tf import BertError


def tmp_name(path):
    return f"{path}.tmp-{os.getpid()}"


def read_text(path, missing="file not found"):
    """The whole file as str; BertError naming the file (and line) when missing or not UTF-8."""
    import tensorflow as tf
    if not tf.io.gfile.exists(path):
        raise BertError(f"{path}: {missing}")
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise BertError(f"{path}: line {line} is not valid UTF-8") from None


def write_text_atomic(path, text, make_parent=False):
    """Writes text to path via a temp name + rename; returns path."""
    import tensorflow as tf
    parent = os.path.dirname(path)
    if make_parent and parent and not tf.io.gfile.exists(parent):
        tf.io.gfile.makedirs(parent)
    tmp = tmp_name(path)
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(text)
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except tf.errors.OpError as e:
        try:
            tf.io.gfile.remove(tmp)
        except tf.errors.OpError:
            pass
        raise BertError(f"{path}: cannot write ({e.message})") from None
    return path


def write_eval_results(path, results):
    """The original's eval_results.txt: `key = value` lines sorted by key, written atomically."""
    return write_text_atomic(path, "".join(f"{k} = {results[k]}\n" for k in sorted(results)))
