"""Small file helpers every module shares.

gs:// and other schemes go through tf.io.gfile (a Cloud TPU reads only GCS); local files through
Python's own I/O, so a command that only reads configs and text (the vocab builder, the demo's
driver) never pays TensorFlow's import. Text is UTF-8, and a bad byte is reported with its file
and line. Writes go to `<path>.tmp-<pid>` and are renamed into
place, so no half-written file ever carries the final name.
"""
import contextlib
import os
import re

from bert_tf import BertError


def tmp_name(path):
    """The temp name a write to `path` goes through; the pid keeps concurrent writers apart."""
    return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_dir(final_dir, create=True, replace=True):
    """Yields a new temp sibling of `final_dir` to fill; once the block ends without an error
    it is renamed to `final_dir`, otherwise removed: a reader (TF Serving polls export folders)
    never sees a half-written directory under the final name.

    Args:
        final_dir: the directory to publish (local or gs://...); its parent is created.
        create: create the temp directory (False: the block's writer creates it itself).
        replace: an existing final_dir is swapped out, then deleted (put back if the swap
            fails); False: it is a BertError at publishing time.
    """
    import logging
    import uuid
    import tensorflow as tf
    final_dir = final_dir.rstrip("/")
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = f"{final_dir}.tmp-{tag}"  # not all digits: TF Serving never loads it as a version
    try:
        parent = os.path.dirname(final_dir)
        if parent:
            tf.io.gfile.makedirs(parent)
        if create:
            tf.io.gfile.makedirs(tmp)
        yield tmp
        if not tf.io.gfile.exists(final_dir):
            _rename_dir(tmp, final_dir)
            return
        if not replace:
            raise BertError(f"{final_dir}: already exists")
        old = f"{final_dir}.old-{tag}"
        _rename_dir(final_dir, old)
        try:
            _rename_dir(tmp, final_dir)
        except tf.errors.OpError:
            _rename_dir(old, final_dir)  # the previous one stays published
            raise
        if not _remove_quietly(old):
            logging.getLogger("bert_tf").warning("%s: could not delete the replaced folder", old)
    finally:
        _remove_quietly(tmp)


def _rename_dir(src, dst):
    # Local renames are atomic; on object stores gfile renames object by object.
    import tensorflow as tf
    tf.io.gfile.rename(src, dst, overwrite=False)


def _remove_quietly(path):
    # False when `path` is still there (the error that got us here matters more).
    import tensorflow as tf
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
        return True
    except tf.errors.OpError:
        return False


def open_file(path, mode="rb"):
    """`path` opened for reading or writing: a local file with the built-in `open` (no
    TensorFlow import), any other scheme (gs://...) through tf.io.gfile.GFile.

    Args:
        path: local or gs://... file.
        mode: "rb", "wb", "r" or "w" (text modes are UTF-8).
    """
    if is_local(path):
        return open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
    import tensorflow as tf
    return tf.io.gfile.GFile(path, mode)


def read_text(path, missing="file not found"):
    """The whole file as str; BertError naming the file (and line) when missing, unreadable or
    not UTF-8.

    Args:
        path: local or gs://... file.
        missing: the error message when the file does not exist (e.g. which flag to fix).
    """
    if is_local(path):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise BertError(f"{path}: {missing}") from None
        except OSError as e:
            raise BertError(f"{path}: cannot read ({e.strerror})") from None
    else:
        import tensorflow as tf
        if not tf.io.gfile.exists(path):
            raise BertError(f"{path}: {missing}")
        try:
            with tf.io.gfile.GFile(path, "rb") as f:
                data = f.read()
        except tf.errors.OpError as e:
            raise BertError(f"{path}: cannot read ({e.message})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise BertError(f"{path}: line {line} is not valid UTF-8") from None


MAX_JSON_BYTES = 64 << 20  # configs and metadata are small: a bigger "config" is refused


def read_json(path, missing="file not found"):
    """A JSON object from `path` (gs:// too); one-line BertError when missing, over
    MAX_JSON_BYTES, not UTF-8, not valid JSON, or not an object.

    Args:
        path: local or gs://... file.
        missing: the error message when the file does not exist.

    Returns:
        The parsed dict.
    """
    import json
    if _size(path) > MAX_JSON_BYTES:
        raise BertError(f"{path}: over {MAX_JSON_BYTES >> 20} MiB, not a config/metadata file")
    try:
        data = json.loads(read_text(path, missing))
    except json.JSONDecodeError as e:
        raise BertError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise BertError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _size(path):
    """Bytes in the file at `path`; 0 when it is missing (read_text then says so)."""
    if is_local(path):
        return os.path.getsize(path) if os.path.isfile(path) else 0
    import tensorflow as tf
    return tf.io.gfile.stat(path).length if tf.io.gfile.exists(path) else 0


def json_bool(data, key, path, default=None):
    """data[key] where it is a JSON bool, `default` where it is missing or null; a one-line
    BertError naming `path` otherwise (the string "false" is no False).

    Args:
        data: the parsed JSON object.
        key: the field.
        path: the file it came from, for the error message.
        default: the value of a missing or null field.
    """
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BertError(f"{path}: {key} is {value!r}, expected true, false or null")
    return value


def write_text_atomic(path, text, make_parent=False):
    """Writes text to path via a temp name + rename, so readers never see a partial file.

    Args:
        path: local or gs://... destination; replaced if it exists.
        text: str to write (UTF-8).
        make_parent: create the parent folder first if missing.

    Returns:
        `path`.

    Raises:
        BertError: the write or rename failed.
    """
    if not isinstance(text, str):
        raise BertError(f"{path}: text to write must be str, got {type(text).__name__}")
    parent = os.path.dirname(path)
    tmp = tmp_name(path)
    if is_local(path):
        try:
            if make_parent and parent:
                os.makedirs(parent, exist_ok=True)
            # newline="": the bytes gfile would write (no \r\n on Windows).
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError as e:
            remove_file_quietly(tmp)
            raise BertError(f"{path}: cannot write ({e.strerror})") from None
        except BaseException:  # bad text, or a stop signal in between: no temp file is left
            remove_file_quietly(tmp)
            raise
        return path
    import tensorflow as tf
    try:
        if make_parent and parent and not tf.io.gfile.exists(parent):
            tf.io.gfile.makedirs(parent)
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(text)
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except tf.errors.OpError as e:
        remove_file_quietly(tmp)
        raise BertError(f"{path}: cannot write ({e.message})") from None
    return path


def remove_file_quietly(path):
    """Delete the file `path` if it exists (local without TensorFlow); errors are ignored.

    Args:
        path: local or gs://... file.
    """
    if is_local(path):
        with contextlib.suppress(OSError):
            os.remove(path)
        return
    import tensorflow as tf
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    except tf.errors.OpError:
        pass


def error_gist(error):
    """One line for a file-system error: the first line of a TF or OS error without TF's
    op/function decorations, and for TF's "path; reason" only the reason (the caller names
    the path).

    Args:
        error: an exception (tf.errors.OpError, OSError, ...).
    """
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = str(getattr(error, "message", None) or error)
    text = re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:\w+\]", "", text)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(error).__name__)
    m = re.match(r"^(?:/|[a-zA-Z][\w+.-]*://)\S*; (.+)$", line)
    return m.group(1) if m else line


def describe_files(paths, shown=3):
    """The first `shown` paths, comma-separated, and how many more there are ("a, b, c and 7
    more"), for error messages that must name the files without growing with them.

    Args:
        paths: list of paths.
        shown: how many to name.
    """
    paths = [str(p) for p in paths]
    text = ", ".join(paths[:shown])
    return text + (f" and {len(paths) - shown} more" if len(paths) > shown else "")


def write_eval_results(path, results):
    """The original's eval_results.txt: `key = value` lines sorted by key, written atomically.

    Args:
        path: destination file.
        results: dict of metric name -> value.

    Returns:
        `path`.
    """
    return write_text_atomic(path, "".join(f"{k} = {results[k]}\n" for k in sorted(results)))


_REMOTE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_local(path):
    """True for a local path, False for gs://... and other schemes (read through tf.io.gfile)."""
    return not _REMOTE.match(os.fspath(path))


def _local_glob(pattern):
    # A pattern whose directory has no wildcard: fnmatch on that directory's names, so that
    # hidden files match as in tf.io.gfile.glob (glob's include_hidden needs Python 3.11).
    import fnmatch
    import glob
    directory, name = os.path.split(pattern)
    if not glob.has_magic(name):
        return [pattern] if os.path.lexists(pattern) else []
    try:
        names = os.listdir(directory or os.curdir)
    except OSError:
        return []
    return [os.path.join(directory, n) for n in fnmatch.filter(names, name)]


def expand_globs(patterns, flag="--input_file"):
    """Comma-separated globs (or a list of them) -> files: each glob's matches in
    `tf.io.gfile.glob` order (as the original scripts), globs in the given order; folders
    dropped. A local glob with wildcards in its last component only is expanded without
    TensorFlow (same order: directory order, `*` matching dot files too).

    Args:
        patterns: "a*.txt,b.txt" or a list of globs (local paths or gs://... and other
            schemes tf.io.gfile knows).
        flag: the flag named in errors.

    Raises:
        BertError: no glob given, or a glob that matches no file (nearly always a typo).
    """
    import glob
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    patterns = [p.strip() for p in patterns or () if p and p.strip()]
    if not patterns:
        raise BertError(f"{flag}: no input given")
    files = []
    for pattern in patterns:
        if is_local(pattern) and not glob.has_magic(os.path.dirname(pattern)):
            matched = [m for m in _local_glob(pattern) if not os.path.isdir(m)]
        else:
            import tensorflow as tf
            try:
                matched = [m for m in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(m)]
            except tf.errors.OpError as e:
                raise BertError(f"{flag}: cannot list {pattern!r}: {e.message}") from None
        if not matched:
            raise BertError(f"{flag}: {pattern!r} matches no files")
        files.extend(matched)
    return files
