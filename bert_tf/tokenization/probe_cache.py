"""On-disk cache of the in-graph tokenizer's character probes.

Building a text-in tokenizer probes every code point through Python's `unicodedata` and
tensorflow-text's ops (about 4 s in a new process). The results are a function of those
versions and of this package's tokenization code only, so they are kept under
`$BERT_TF_CACHE` (default `$XDG_CACHE_HOME/bert_tf`, else `~/.cache/bert_tf`) in files named
by a hash of all of that. `BERT_TF_CACHE=off` turns the cache off. Any failure (a cache
that cannot be read or written, versions or sources that cannot be hashed) means probe again,
never an error; files are written to a temp name, then renamed, and temp files a killed
writer left behind are removed once they are `STALE_TMP_SECONDS` old.
"""
import functools
import hashlib
import json
import os
import sys
import tempfile
import time
import unicodedata

import numpy as np

_SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))  # the tokenization package
# A writer takes well under a second; a temp file this old is an orphan (its writer was killed).
STALE_TMP_SECONDS = 600


@functools.lru_cache(maxsize=None)
def _fingerprint():
    """What the probes depend on: Python (its Unicode tables), TF, tensorflow-text (its ICU)
    and the source of this package's tokenization modules."""
    import tensorflow as tf
    import tensorflow_text as tf_text
    h = hashlib.sha256()
    for part in (sys.version, unicodedata.unidata_version, tf.__version__, tf_text.__version__):
        h.update(part.encode() + b"\0")
    for name in sorted(os.listdir(_SOURCE_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(_SOURCE_DIR, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:20]


def cache_dir():
    """The cache folder, or None when `BERT_TF_CACHE=off`."""
    where = os.environ.get("BERT_TF_CACHE")
    if where is not None:
        return None if where.strip().lower() in ("off", "0", "") else where
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bert_tf")


def _path(name, args):
    """The cache file of one probe, or None: cache off, or no fingerprint (e.g. an install
    whose tokenization sources are not files): then the caller probes."""
    folder = cache_dir()
    if folder is None:
        return None
    tag = "-".join([name] + [str(a) for a in args])
    try:
        return os.path.join(folder, f"probe-{tag}-{_fingerprint()}.npz")
    except Exception:  # noqa: BLE001  (whatever hashing the install raises: probe again)
        return None


TMP_PREFIX = "probe-"  # the only temp files this cache writes, and so the only ones it removes


def _remove_stale_tmp(folder, now=None):
    """Deletes this cache's own temp files (`probe-*.tmp`, left by a killed writer) older than
    STALE_TMP_SECONDS in `folder`; other files are never touched, since BERT_TF_CACHE may be a
    shared folder (errors ignored)."""
    now = time.time() if now is None else now
    try:
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if name.startswith(TMP_PREFIX) and name.endswith(".tmp") \
                    and now - os.path.getmtime(path) > STALE_TMP_SECONDS:
                os.unlink(path)
    except OSError:  # another process removed it first, or the folder is not ours to clean
        pass


def _load(path):
    try:
        with np.load(path, allow_pickle=False) as data:
            if "json" in data:
                return json.loads(str(data["json"]))
            return np.unpackbits(data["bits"])[:int(data["size"])].astype(bool)
    except Exception:  # missing, partial or foreign: recompute
        return None


def _save(path, value):
    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _remove_stale_tmp(os.path.dirname(path))
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=TMP_PREFIX, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            if isinstance(value, np.ndarray):
                np.savez(f, bits=np.packbits(value), size=np.int64(value.size))
            else:
                np.savez(f, json=np.array(json.dumps(value)))
        os.replace(tmp, path)
    except Exception:  # read-only home, full disk: the next process probes again
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


def cached(decode=None):
    """Decorator: keep a probe's result (a bool mask, or JSON-able data turned back into its
    type by `decode`) on disk; the arguments (bools) are part of the file name."""
    def wrap(fn):
        @functools.wraps(fn)
        def probe(*args):
            path = _path(fn.__name__.lstrip("_"), args)
            value = _load(path) if path else None
            if value is not None:
                return decode(value) if decode else value
            value = fn(*args)
            if path:
                _save(path, value)
            return value
        return probe
    return wrap
