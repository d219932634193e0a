"""create_pretraining_data under kill and preemption: no orphan workers, a clean SIGTERM (exit 75,
one line, no temp files), a lock that keeps a second run off the output, and a `--resume` that
gives the bytes of an uninterrupted run."""
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from test_pretraining_data_streaming import _write_synthetic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARDS = 16
CLI = [sys.executable, "-m", "bert_tf.commands.create_pretraining_data"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A corpus that 2 workers turn into 16 shards in 1-2 s, and the uninterrupted run's
    shards (the bytes every resumed run must give)."""
    d = tmp_path_factory.mktemp("signals")
    text, vocab = _write_synthetic(d, num_docs=4000, seed=11)
    ref = d / "ref"
    proc = _start(text, vocab, ref / "d.tfrecord")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return {"text": text, "vocab": vocab, "shards": _shards(ref)}


def _flags(text, vocab, out, *extra):
    return [f"--input_file={text}", f"--vocab_file={vocab}", f"--output_file={out}",
            "--mode=streaming", "--num_workers=2", f"--output_shards={SHARDS}",
            "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=5",
            "--random_seed=3", *extra]


def _start(text, vocab, out, *extra):
    # Its own session: every process of the run has the process group id = its pid.
    return subprocess.Popen(CLI + _flags(text, vocab, out, *extra), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _shards(directory):
    return {n: (directory / n).read_bytes() for n in sorted(os.listdir(directory))
            if "-of-" in n and ".tmp-" not in n}


def _all_files(directory):
    return sorted(os.path.relpath(os.path.join(root, n), directory)
                  for root, _, names in os.walk(directory) for n in names)


def _group_alive(pgid):
    """Pids of live (not zombie) processes in process group `pgid`."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry))
    return alive


def _journal(out_dir):
    import json
    return json.loads((out_dir / ".bert_tf" / "d.tfrecord.stats.json").read_text())


def _wait_for_shards(proc, out_dir, timeout=60):
    """Waits until a shard is finished and in the journal (the run is under way)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if _journal(out_dir)["shards"]:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    raise AssertionError("no shard finished in time")


def _seconds_until_gone(pgid, start, limit=2.0):
    """Seconds from `start` (perf_counter) until no process of the group is alive."""
    while time.perf_counter() - start < limit:
        if not _group_alive(pgid):
            return time.perf_counter() - start
        time.sleep(0.002)
    raise AssertionError(f"processes of the run still alive {limit} s after: {_group_alive(pgid)}")


def _resume_and_compare(corpus, out):
    proc = _start(corpus["text"], corpus["vocab"], out, "--resume")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert _shards(out.parent) == corpus["shards"]  # byte-identical to the uninterrupted run
    return _journal(out.parent)


def test_sigkill_leaves_no_process_and_resume_is_byte_identical(corpus, tmp_path):
    out = tmp_path / "o" / "d.tfrecord"
    proc = _start(corpus["text"], corpus["vocab"], out)
    _wait_for_shards(proc, out.parent)
    assert len(_group_alive(proc.pid)) == 3  # the run and its 2 workers
    start = time.perf_counter()
    proc.kill()
    proc.wait()
    gone = _seconds_until_gone(proc.pid, start)
    print(f"SIGKILL: no process of the run left after {gone * 1000:.0f} ms")
    done = len(_shards(out.parent))
    assert 1 <= done < SHARDS  # the kill came mid-run (else the corpus is too small)
    time.sleep(0.3)
    assert len(_shards(out.parent)) == done  # nothing writes after the kill
    assert (out.parent / ".bert_tf" / "d.tfrecord.lock").exists()  # left by the killed run ...
    journal = _resume_and_compare(corpus, out)  # ... and taken over: its holder is gone
    assert journal["complete"] and journal["resumed_shards"] >= 1
    assert _all_files(out.parent) == sorted([*corpus["shards"], ".bert_tf/d.tfrecord.stats.json"])


def test_sigterm_is_a_clean_stop_with_exit_75_and_resume_is_byte_identical(corpus, tmp_path):
    out = tmp_path / "o" / "d.tfrecord"
    proc = _start(corpus["text"], corpus["vocab"], out)
    _wait_for_shards(proc, out.parent)
    start = time.perf_counter()
    proc.send_signal(signal.SIGTERM)  # to the main process only, as `kubectl delete` does
    _, err = proc.communicate(timeout=30)
    exited = time.perf_counter() - start
    gone = _seconds_until_gone(proc.pid, start)
    print(f"SIGTERM: exit after {exited * 1000:.0f} ms, no process of the run left after "
          f"{gone * 1000:.0f} ms")
    assert proc.returncode == 75, err
    done = _shards(out.parent)
    assert 1 <= len(done) < SHARDS
    assert err.strip().splitlines() == [
        f"interrupted: {len(done)} of {SHARDS} shards done; re-run with --resume to finish"]
    journal = _journal(out.parent)
    assert not journal["complete"]
    assert sorted(f"d.tfrecord-{int(k):05d}-of-{SHARDS:05d}" for k in journal["shards"]) == \
        sorted(done)  # the finished shards are the journal's, all of them
    # No temp file, and no lock, is left.
    assert _all_files(out.parent) == sorted([*done, ".bert_tf/d.tfrecord.stats.json"])
    journal = _resume_and_compare(corpus, out)
    assert journal["complete"] and journal["resumed_shards"] == len(done)


def test_a_second_run_on_the_same_output_is_refused(corpus, tmp_path):
    out = tmp_path / "o" / "d.tfrecord"
    first = _start(corpus["text"], corpus["vocab"], out)
    try:
        _wait_for_shards(first, out.parent)
        os.killpg(first.pid, signal.SIGSTOP)  # it cannot finish before the second one starts
        second = _start(corpus["text"], corpus["vocab"], out, "--resume")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"error: --output_file: {out} is being written by another "
                                   f"run (pid {first.pid} on {os.uname().nodename}, started ")
        assert lines[0].endswith(f"wait for it or stop it (lock {out.parent}/.bert_tf/"
                                 "d.tfrecord.lock)")
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGTERM)
        os.killpg(first.pid, signal.SIGCONT)
        first.communicate(timeout=30)
    assert first.returncode == 75


def test_a_second_signal_exits_at_once(tmp_path):
    """While a stopped run cleans up, another SIGTERM ends it with 128 + 15, at once."""
    code = ("import time\n"
            "from bert_tf.pretraining_data import guard\n"
            "with guard.stop_on_signals():\n"  # as runner.run: the cleanup is inside
            "    try:\n"
            "        print('ready', flush=True)\n"
            "        time.sleep(600)\n"
            "    except guard.Interrupted as e:\n"
            "        print('stopping', e.signum, flush=True)\n"
            "        time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                     daemon=True).start()
    try:
        assert lines.get(timeout=120) == "ready\n"
        proc.send_signal(signal.SIGTERM)
        assert lines.get(timeout=120) == f"stopping {int(signal.SIGTERM)}\n"
        proc.send_signal(signal.SIGTERM)
        # At once, not after the 600 s cleanup (no wall-clock bound tighter than that: a busy
        # machine can take seconds to schedule the child).
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
