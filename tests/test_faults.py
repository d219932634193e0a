"""Infrastructure faults give one line and lose no work: unreadable checkpoints (resume falls
back to the newest readable one), a full or unwritable disk during a checkpoint save or an
export, a TPU that cannot be reached, and empty input files (named in the error)."""
import contextlib
import logging
import os
import re
import socket
import subprocess
import threading
import time
import types

import numpy as np
import pytest

import bert_tf  # noqa: F401
import keras
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.export import common
from bert_tf.training import distribute
from bert_tf.training.checkpointing import Checkpoints
from conftest import tiny_bert_config, write_pretraining_records

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "model.ckpt"
DATA = f"{NAME}-{{}}.data-00000-of-00001"


# ---- checkpoints ------------------------------------------------------------------------------

def _checkpoints(out, units=3, keep=3):
    """A Checkpoints over a tiny built model + optimizer (as the trainer has before restore)."""
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units),
                                  keras.layers.Dropout(0.1, seed=1)])
        step = tf.Variable(0, dtype=tf.int64)
        seed = tf.Variable(7, dtype=tf.int64)
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)
    options = types.SimpleNamespace(output_dir=str(out), keep_checkpoint_max=keep,
                                    init_checkpoint=None)
    ckpts = Checkpoints(options, NAME, strategy, model, step, seed)
    ckpts.set_optimizer(optimizer)
    return ckpts


def _save(ckpts, step):
    """Saves step `step` with every kernel entry equal to `step` (to see which one was read)."""
    ckpts.global_step.assign(step)
    ckpts.model.layers[0].kernel.assign(tf.fill([4, 3], float(step)))
    return ckpts.save()


def _resume(out, caplog):
    """A fresh Checkpoints restored from `out`: (result, step, kernel value, warning lines)."""
    ckpts = _checkpoints(out)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bert_tf"):
        result = ckpts.restore()
    kernel = np.unique(ckpts.model.layers[0].kernel.numpy())
    warnings = [r.getMessage() for r in caplog.records if r.name == "bert_tf"]
    return ckpts, result, int(ckpts.global_step.numpy()), kernel.tolist(), warnings


def _state(out):
    state = tf.train.get_checkpoint_state(str(out))
    return ([os.path.basename(p) for p in state.all_model_checkpoint_paths],
            os.path.basename(state.model_checkpoint_path))


def _three(out):
    ckpts = _checkpoints(out)
    for step in (1, 2, 3):
        _save(ckpts, step)
    return ckpts


def _files(out):
    return sorted(f for f in os.listdir(out))


def _ckpt_files(*steps):
    return sorted(f for s in steps for f in (f"{NAME}-{s}.index", DATA.format(s)))


@pytest.mark.parametrize("damage", ["truncated data", "flipped byte", "no index"])
def test_unreadable_latest_checkpoint_falls_back_and_training_goes_on(tmp_path, caplog, damage):
    out = tmp_path / "out"
    _three(out)
    if damage == "truncated data":
        path = out / DATA.format(3)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        why, moved = "Read less bytes than requested", [DATA.format(3), f"{NAME}-3.index"]
    elif damage == "flipped byte":  # in the first tensor: found by its checksum mid-restore
        data = bytearray((out / DATA.format(3)).read_bytes())
        data[0] ^= 0xFF
        (out / DATA.format(3)).write_bytes(bytes(data))
        why = (re.escape(f"TensorBundle at {out / NAME}-3 shard 0 (8 bytes): Checksum does not "
                         "match: stored ") + r"\d+ vs\. calculated on the restored bytes \d+")
        moved = [DATA.format(3), f"{NAME}-3.index"]
    else:
        os.remove(out / f"{NAME}-3.index")
        why, moved = "no .index file", [DATA.format(3)]
    ckpts, result, step, kernel, warnings = _resume(out, caplog)
    assert (result, step, kernel) == ("resumed", 2, [2.0])
    assert len(warnings) == 1 and re.fullmatch(
        re.escape(f"{out}: skipped unreadable checkpoint {NAME}-3 (") + (
            why if damage == "flipped byte" else re.escape(why))
        + re.escape(f") (its files renamed to *.unreadable); resuming from {NAME}-2"),
        warnings[0]), warnings
    assert _files(out) == sorted(["checkpoint"] + _ckpt_files(1, 2)
                                 + [f + ".unreadable" for f in moved])
    assert _state(out) == ([f"{NAME}-1", f"{NAME}-2"], f"{NAME}-2")
    # Training goes on: step 3 is written anew, the manager keeps 3 and deletes ckpt-1.
    _save(ckpts, 3)
    _save(ckpts, 4)
    assert _files(out) == sorted(["checkpoint"] + _ckpt_files(2, 3, 4)
                                 + [f + ".unreadable" for f in moved])
    assert _state(out) == ([f"{NAME}-2", f"{NAME}-3", f"{NAME}-4"], f"{NAME}-4")
    assert _resume(out, caplog)[1:] == ("resumed", 4, [4.0], [])


@pytest.mark.parametrize("state", ["missing", "garbage", "empty", "stale"])
def test_missing_or_corrupt_state_file_is_rebuilt_from_the_files(tmp_path, caplog, state):
    out = tmp_path / "out"
    _three(out)
    if state == "missing":
        os.remove(out / "checkpoint")
    elif state == "stale":  # the state write after a complete save did not happen
        tf.compat.v1.train.update_checkpoint_state(str(out), f"{NAME}-2", [f"{NAME}-1",
                                                                             f"{NAME}-2"])
    else:
        (out / "checkpoint").write_text("garbage {{{" if state == "garbage" else "")
    ckpts, result, step, kernel, warnings = _resume(out, caplog)
    assert (result, step, kernel) == ("resumed", 3, [3.0])
    word = {"missing": "missing", "stale": None}.get(state, "unreadable")
    assert warnings == ([f"{out / 'checkpoint'}: {word} state file; resuming from {NAME}-3, "
                         "found by its files"] if word else [])
    assert _state(out) == ([f"{NAME}-1", f"{NAME}-2", f"{NAME}-3"], f"{NAME}-3")
    _save(ckpts, 4)  # the manager knows the old ones again: ckpt-1 goes
    assert _files(out) == ["checkpoint"] + _ckpt_files(2, 3, 4)


def test_latest_listed_but_its_files_never_arrived(tmp_path, caplog):
    out = tmp_path / "out"
    _three(out)
    for f in _ckpt_files(3):
        os.remove(out / f)
    _, result, step, kernel, warnings = _resume(out, caplog)
    assert (result, step, kernel) == ("resumed", 2, [2.0])
    assert warnings == [f"{out}: skipped unreadable checkpoint {NAME}-3 (its files are missing); "
                        f"resuming from {NAME}-2"]
    assert _state(out) == ([f"{NAME}-1", f"{NAME}-2"], f"{NAME}-2")


def test_no_readable_checkpoint_is_one_error_and_touches_nothing(tmp_path, caplog):
    out = tmp_path / "out"
    _three(out)
    for step in (1, 2, 3):
        os.remove(out / f"{NAME}-{step}.index")
    before = _files(out)
    with pytest.raises(BertError) as e:
        _checkpoints(out).restore()
    assert str(e.value) == (
        f"{out}: no readable checkpoint ({NAME}-3: no .index file; {NAME}-2: no .index file; "
        f"{NAME}-1: no .index file): delete the {NAME}-* files and the checkpoint file to start "
        "from scratch, or pass another --output_dir")
    assert _files(out) == before
    # A folder without checkpoints starts fresh; one of another model is named in one line.
    assert _checkpoints(tmp_path / "new").restore() == "fresh"
    _save(_checkpoints(tmp_path / "out2"), 1)
    with pytest.raises(BertError) as e:
        _checkpoints(tmp_path / "out2", units=5).restore()
    assert str(e.value).startswith(f"{tmp_path / 'out2' / NAME}-1: does not fit the model "
                                   "(Received incompatible tensor with shape (4, 3) when "
                                   "attempting to restore variable with shape (4, 5)")
    assert str(e.value).endswith("): resume with the bert_config and task that wrote it, or "
                                 "pass another --output_dir")


# ---- full or unwritable disks -----------------------------------------------------------------

@contextlib.contextmanager
def _failing_dir(path):
    """`path` made a folder whose writes fail for real: a full 256 KiB tmpfs (as root, where
    permissions do not stop writes) or a read-only folder (other users). Yields
    (break_it, fix_it, reason)."""
    path.mkdir(parents=True)
    if os.geteuid() != 0:
        try:
            yield (lambda: os.chmod(path, 0o555), lambda: os.chmod(path, 0o755),
                   "Permission denied")
        finally:
            os.chmod(path, 0o755)
        return
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"root without a tmpfs mount ({res.stderr.strip()}): no real write failure")
    fillers = []

    def fill():
        while True:
            try:
                with open(path / f".filler-{len(fillers)}", "wb", buffering=0) as f:
                    fillers.append(f.name)
                    f.write(b"x" * 4096)
            except OSError:
                return

    def free():
        for name in fillers:
            os.remove(name)
        fillers.clear()

    try:
        yield fill, free, "No space left on device"
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _no_fillers(out):
    return [f for f in _files(out) if not f.startswith(".filler-")]


def test_checkpoint_save_on_a_full_or_read_only_disk(tmp_path, caplog):
    out = tmp_path / "out"
    with _failing_dir(out) as (break_it, fix_it, reason):
        ckpts = _checkpoints(out)
        _save(ckpts, 1)
        before = {f: (out / f).read_bytes() for f in _no_fillers(out)}
        break_it()
        with pytest.raises(BertError) as e:
            _save(ckpts, 2)
        assert str(e.value) == (f"{out / NAME}-2: cannot write the checkpoint ({reason}); "
                                f"{NAME}-1 is intact")
        assert {f: (out / f).read_bytes() for f in _no_fillers(out)} == before
        fix_it()
        _save(ckpts, 2)
        assert _resume(out, caplog)[1:] == ("resumed", 2, [2.0], [])


def test_checkpoint_save_blocked_midway_leaves_no_partial_files(tmp_path, caplog):
    # A file where TF puts its temp folder: the write fails after the save began (root too).
    out = tmp_path / "out"
    ckpts = _checkpoints(out)
    _save(ckpts, 1)
    (out / f"{NAME}-2_temp").write_text("in the way")
    with pytest.raises(BertError, match=rf"^{out / NAME}-2: cannot write the checkpoint \(.+\); "
                                        rf"{NAME}-1 is intact$"):
        _save(ckpts, 2)
    assert _files(out) == ["checkpoint"] + _ckpt_files(1)
    _save(ckpts, 2)
    assert _resume(out, caplog)[1:] == ("resumed", 2, [2.0], [])


class Tiny(tf.Module):
    def __init__(self):
        super().__init__()
        self.v = tf.Variable(tf.fill([4096], 2.0))  # 16 KiB: does not fit a full disk

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def __call__(self, x):
        return {"y": x * self.v[0]}


def test_export_to_a_full_or_read_only_disk_or_through_a_file(tmp_path):
    m, sig = Tiny(), None
    (tmp_path / "afile").write_text("x")
    final = tmp_path / "afile" / "m" / "1"
    with pytest.raises(BertError) as e:
        common.write_saved_model(m, str(final), sig, {})
    assert str(e.value) == (f"{final}: cannot write the export ({tmp_path / 'afile'} is not a "
                            "directory)")
    exports = tmp_path / "exports"
    with _failing_dir(exports) as (break_it, fix_it, reason):
        common.write_saved_model(m, str(exports / "1"), sig, {"kind": "old"})
        before = _no_fillers(exports)
        break_it()
        for version in ("1", "2"):  # replacing one, and a new one
            with pytest.raises(BertError) as e:
                common.write_saved_model(m, str(exports / version), sig, {"kind": "new"})
            assert str(e.value) == f"{exports / version}: cannot write the export ({reason})"
            assert _no_fillers(exports) == before == ["1"]
        fix_it()
        assert common.read_metadata(str(exports / "1")) == {"kind": "old"}


# ---- a TPU that cannot be reached -------------------------------------------------------------

def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REFUSED = ("--tpu_name=my-tpu: cannot reach the TPU (URLError: [Errno 111] Connection refused): "
           "pass --gcp_project (no Google Cloud metadata server answers here to look them up), "
           "or run the job on the TPU VM itself")


def test_unreachable_tpu_is_one_line(monkeypatch):
    # The GCE metadata server (asked for the project) refuses: as off Google Cloud.
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{_closed_port()}")
    with pytest.raises(BertError) as e:
        distribute.get_strategy("tpu", "my-tpu", "us-central1-b", None)
    assert str(e.value) == REFUSED
    options = types.SimpleNamespace(use_tpu=True, strategy=None, tpu_name="my-tpu",
                                    tpu_zone="us-central1-b", gcp_project=None)
    with pytest.raises(BertError) as e:
        distribute.strategy_from_options(options)
    assert str(e.value) == REFUSED
    # One that accepts but never answers: the lookup times out instead of hanging.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    threading.Thread(target=lambda: held.extend(server.accept() for _ in range(8)),
                     daemon=True).start()
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setattr(distribute, "TPU_LOOKUP_TIMEOUT_S", 1)
    start = time.perf_counter()
    with pytest.raises(BertError) as e:
        distribute.get_strategy("tpu", "my-tpu", None, "my-project")
    assert time.perf_counter() - start < 10
    assert str(e.value) == ("--tpu_name=my-tpu: cannot reach the TPU (TimeoutError: timed out): "
                            "pass --tpu_zone (no Google Cloud metadata server answers here to "
                            "look them up), or run the job on the TPU VM itself")
    assert socket.getdefaulttimeout() is None
    server.close()


def test_unreachable_tpu_through_run_pretraining(tmp_path, monkeypatch, caplog, capfd):
    """In process: the command's own app_main after its flags (the pre-flight, the hand-off,
    run_pretraining), its options given instead of parsed; sys.exit("error: ...") is the
    command's one line and exit status 1 (test_training's
    test_cli_runs_and_reports_bad_flags_in_one_line runs the entry point)."""
    from bert_tf.commands import run_pretraining as command
    from bert_tf.pretraining.options import PretrainingOptions
    config = tmp_path / "bert_config.json"
    tiny_bert_config().to_json_file(str(config))
    write_pretraining_records(tmp_path / "train.tfrecord", 4)
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{_closed_port()}")
    options = PretrainingOptions(
        bert_config_file=str(config), input_file=str(tmp_path / "train.tfrecord"),
        output_dir=str(tmp_path / "out"), max_seq_length=32,
        max_predictions_per_seq=5,  # the records' (pre-flight)
        do_train=True, use_tpu=True, tpu_name="my-tpu", tpu_zone="us-central1-b")
    capfd.readouterr()
    monkeypatch.setattr(command.script_flags, "options_from_flags", lambda cls: options)
    with pytest.raises(SystemExit) as e:
        command.app_main([])
    assert e.value.code == f"error: {REFUSED}"
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not (tmp_path / "out").exists()


# ---- empty input files are named ----------------------------------------------------------------

def test_empty_text_inputs_are_named(tmp_path):
    from bert_tf.pretraining_data.options import Options
    from bert_tf.pretraining_data.runner import run
    data = os.path.join(REPO, "tests", "data", "pretraining")
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"e{i}.txt")
        paths[-1].write_text("")
    listed = fileio.expand_globs(str(tmp_path / "e*.txt"))  # in the order the error names them
    cases = {str(paths[0]): f"--input_file {paths[0]}: the file is empty",
             str(tmp_path / "e*.txt"): (f"--input_file: all 5 input files are empty: {listed[0]}, "
                                        f"{listed[1]}, {listed[2]} and 2 more")}
    for pattern, want in cases.items():
        opts = Options(input_file=pattern, vocab_file=os.path.join(data, "vocab.txt"),
                       output_file=str(tmp_path / "o" / "out.tfrecord"), max_seq_length=24,
                       max_predictions_per_seq=4, progress=False)
        with pytest.raises(BertError) as e:
            run(opts)
        assert str(e.value) == want
    assert not (tmp_path / "o").exists()
