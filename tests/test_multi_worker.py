"""run_pretraining.py --strategy=multi_worker: two worker processes on 127.0.0.1 (TF_CONFIG).

Each test starts a real two-process cluster (TF import, cluster start-up and tracing in every
process): ~20 s for the parity test on 2 idle cores; the kill-and-resume one (two clusters and a
heartbeat timeout) is `slow`.
"""
import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.pretraining.input_pipeline import pretraining_dataset
from bert_tf.pretraining.pretraining import PretrainingOptions, make_trainer, summarize
from conftest import scalar_summaries, tiny_bert_config, write_pretraining_records

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT = 300  # seconds for a worker to start, trace and log its first steps
FLAGS = dict(max_seq_length=32, max_predictions_per_seq=5, train_batch_size=8,
             learning_rate=1e-3, num_warmup_steps=2, iterations_per_loop=1, seed=7)


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def cluster(tmp_path):
    """start(out_dir, **flags) launches two workers; they are killed at teardown if still up."""
    config = tmp_path / "bert_config.json"
    tiny_bert_config().to_json_file(str(config))  # no dropout: runs are comparable
    for i in range(2):
        write_pretraining_records(tmp_path / f"shard-{i}.tfrecord", 96, seed=i)
    pattern = str(tmp_path / "shard-*.tfrecord")
    procs = []

    def start(out, run, **flags):
        workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
        args = [f"--bert_config_file={config}", f"--input_file={pattern}",
                f"--output_dir={out}", "--do_train", "--strategy=multi_worker"]
        args += [f"--{k}={v}" for k, v in {**FLAGS, **flags}.items()]
        started = []
        for i in range(2):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
            env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CONFIG=json.dumps(tf_config))
            log = open(tmp_path / f"{run}-worker{i}.log", "w")
            p = subprocess.Popen([sys.executable, os.path.join(REPO, "run_pretraining.py")] + args,
                                 env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
            p.log_path = log.name
            log.close()
            procs.append(p)
            started.append(p)
        return started

    start.pattern = pattern
    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _log(proc):
    with open(proc.log_path) as f:
        return f.read()


def _wait_all(procs, timeout):
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker did not finish within {timeout}s:\n{_log(p)[-3000:]}")
    return [p.returncode for p in procs]


def _wait_for(proc, text, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in _log(proc):
            return
        if proc.poll() is not None:
            pytest.fail(f"worker exited ({proc.returncode}) before {text!r}:\n{_log(proc)[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"no {text!r} within {timeout}s:\n{_log(proc)[-3000:]}")


def _summaries(out, tag):
    got = dict(scalar_summaries(out)[tag])  # one events file: the chief's only
    return [got[s] for s in sorted(got)]


def _single_process_losses(pattern, out, steps):
    """One process, one device, global batch 8 = worker 0's 4 examples + worker 1's 4 examples
    (each worker reads its own file, as the input pipeline shards them)."""
    options = PretrainingOptions(output_dir=out, num_train_steps=steps,
                                 save_checkpoints_steps=100, **FLAGS)
    runner = make_trainer(tiny_bert_config(), options, tf.distribute.OneDeviceStrategy("/cpu:0"))
    shards = [pretraining_dataset(pattern, 4, 32, 5, True, seed=7,
                                  input_context=tf.distribute.InputContext(2, i, 2))
              for i in range(2)]
    both = tf.data.Dataset.zip(tuple(shards)).map(
        lambda a, b: {k: tf.concat([a[k], b[k]], 0) for k in a})
    it = iter(both)
    return [summarize({k: float(v) for k, v in runner.train_loop(it, 1).items()}, 1)["loss"]
            for _ in range(steps)]


# The default suite's two-worker run (test_preemption's three clusters are `slow`).
def test_two_workers_match_one_process(cluster, tmp_path):
    out = tmp_path / "out"
    procs = cluster(out, "parity", num_train_steps=3, save_checkpoints_steps=100)
    # The single-process reference is computed while the workers start.
    want = _single_process_losses(cluster.pattern, str(tmp_path / "single"), 3)
    assert _wait_all(procs, 2 * START_TIMEOUT) == [0, 0], _log(procs[0])[-3000:]
    got = _summaries(str(out), "loss")
    assert len(got) == 3 and got[0] != got[2]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    # Chief-only outputs: one checkpoint and one export, nothing from worker 1 in output_dir.
    assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-3")
    assert (out / "export" / "saved_model.pb").exists()
    assert sorted(p for p in os.listdir(out) if not p.startswith("events.")) == [
        "checkpoint", "export", "model.ckpt-3.data-00000-of-00001", "model.ckpt-3.index"]
    assert "exported the encoder" in _log(procs[0])
    assert "exported the encoder" not in _log(procs[1])


@pytest.mark.slow
def test_killed_worker_fails_the_job_then_all_resume(cluster, tmp_path):
    out = tmp_path / "out"
    flags = dict(num_train_steps=60, save_checkpoints_steps=2)
    chief, other = cluster(out, "killed", **flags)
    _wait_for(chief, "step 4/60", START_TIMEOUT)
    other.kill()
    killed_at = time.monotonic()
    # The chief blocks in the next all-reduce until the cluster's heartbeats mark worker 1 dead.
    try:
        chief.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the chief hung after worker 1 was killed:\n" + _log(chief)[-3000:])
    assert chief.returncode == 1
    assert time.monotonic() - killed_at < 120
    last = _log(chief).strip().splitlines()[-1]
    # Seen either way round: worker 1's heartbeats stop, or its connection resets first.
    assert re.fullmatch(r"error: --strategy=multi_worker: lost contact with another worker at "
                        r"step \d+ \((/job:worker/replica:0/task:1 stopped sending heartbeats|"
                        r".*(Connection reset|Socket closed|unavailable|UNAVAILABLE).*)\); "
                        r"restart all workers to resume from the latest checkpoint", last), last
    saved = int(tf.train.latest_checkpoint(str(out)).rsplit("-", 1)[1])
    assert saved >= 4 and saved % 2 == 0
    # Restarting both workers: both restore the chief's latest checkpoint and finish.
    procs = cluster(out, "resumed", **flags)
    assert _wait_all(procs, 2 * START_TIMEOUT) == [0, 0], _log(procs[0])[-3000:]
    for p in procs:
        assert f"model.ckpt-{saved} (step {saved})" in _log(p)
    assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-60")
