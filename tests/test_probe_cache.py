"""The on-disk cache of the in-graph tokenizer's character probes gives exactly what probing
gives, survives a corrupt file, and can be turned off."""
import os
import shutil

import numpy as np
import pytest

from bert_tf.tokenization import char_tables, fast_path, probe_cache

# (probe with its lru_cache, arguments); `.__wrapped__` is the disk-cached probe.
PROBES = [(char_tables.char_classes, ()), (char_tables.case_fixups, ()),
          (char_tables.sigma_risky_class, ()), (fast_path._fast_mask, (True, True)),
          (fast_path._fast_mask, (False, False)), (fast_path.split_risky_mask, ()),
          (char_tables._sigma_context_tables, ())]


def _same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def test_cached_probes_equal_probing_and_a_corrupt_file_is_probed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path))
    for fn, args in PROBES:
        probed = fn.__wrapped__(*args)  # empty cache: probes, then writes
        files = os.listdir(tmp_path)
        path = probe_cache._path(fn.__wrapped__.__name__.lstrip("_"), args)
        assert os.path.basename(path) in files and not [f for f in files if f.endswith(".tmp")]
        assert _same(fn.__wrapped__(*args), probed), fn.__name__  # read back
        assert _same(fn(*args), probed), fn.__name__  # what this process computed itself
    # A truncated file (a killed writer on another file system, say): probed again, rewritten.
    fn, args = PROBES[1]
    path = probe_cache._path("case_fixups", ())
    with open(path, "r+b") as f:
        f.truncate(10)
    assert _same(fn.__wrapped__(*args), fn(*args))
    assert _same(probe_cache._load(path), [list(p) for p in fn(*args)])


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_TF_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert probe_cache.cache_dir() is None
    assert _same(char_tables.case_fixups.__wrapped__(), char_tables.case_fixups())
    assert os.listdir(tmp_path) == []


def test_default_folder_and_an_unwritable_one(tmp_path, monkeypatch):
    monkeypatch.delenv("BERT_TF_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probe_cache.cache_dir() == str(tmp_path / "xdg" / "bert_tf")
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("BERT_TF_CACHE", str(blocked / "cache"))
    assert _same(char_tables.case_fixups.__wrapped__(), char_tables.case_fixups())  # no error
    assert blocked.read_text() == "not a folder"


@pytest.mark.parametrize("name", ["tokenization_source", "tensorflow_text"])
def test_the_file_name_changes_with_what_the_probes_depend_on(name, tmp_path, monkeypatch):
    before = probe_cache._fingerprint()
    probe_cache._fingerprint.cache_clear()
    if name == "tensorflow_text":
        import tensorflow_text
        monkeypatch.setattr(tensorflow_text, "__version__", tensorflow_text.__version__ + ".x")
    else:  # the same sources with one comment added to wordpiece.py
        edited = tmp_path / "tokenization"
        shutil.copytree(probe_cache._SOURCE_DIR, edited,
                        ignore=shutil.ignore_patterns("__pycache__"))
        with open(edited / "wordpiece.py", "a") as f:
            f.write("# edited\n")
        monkeypatch.setattr(probe_cache, "_SOURCE_DIR", str(edited))
    try:
        assert probe_cache._fingerprint() != before
    finally:
        monkeypatch.undo()
        probe_cache._fingerprint.cache_clear()
    assert probe_cache._fingerprint() == before


def test_a_fingerprint_that_fails_means_probe_again(tmp_path, monkeypatch):
    # An install without the tokenization sources as files (a zip, say): no cache, no error.
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(probe_cache, "_SOURCE_DIR", str(tmp_path / "no-such-folder"))
    probe_cache._fingerprint.cache_clear()
    try:
        assert probe_cache._path("case_fixups", ()) is None
        assert _same(char_tables.case_fixups.__wrapped__(), char_tables.case_fixups())
    finally:
        monkeypatch.undo()
        probe_cache._fingerprint.cache_clear()
    assert not (tmp_path / "cache").exists()


def test_orphaned_temp_files_are_removed_once_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path))
    old, fresh = tmp_path / "probe-killed.tmp", tmp_path / "probe-writing.tmp"
    # BERT_TF_CACHE may be a shared folder: another program's old temp file stays
    foreign = tmp_path / "someone-elses-download.tmp"
    stale = probe_cache.STALE_TMP_SECONDS + 60
    for f in (old, fresh, foreign):
        f.write_bytes(b"half")
    for f in (old, foreign):
        os.utime(f, (os.path.getatime(f) - stale, os.path.getmtime(f) - stale))
    char_tables.case_fixups.__wrapped__()  # empty cache: probes and writes
    names = sorted(os.listdir(tmp_path))
    assert names == sorted([fresh.name, foreign.name,
                            os.path.basename(probe_cache._path("case_fixups", ()))])


def test_the_suite_never_writes_the_users_cache():
    folder = probe_cache.cache_dir()
    home_cache = os.path.join(os.path.expanduser("~"), ".cache")
    assert folder == os.environ["BERT_TF_CACHE"] and os.path.isdir(folder)
    assert not os.path.abspath(folder).startswith(os.path.abspath(home_cache) + os.sep)
