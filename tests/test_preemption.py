"""Preemption (bert_tf.training.preemption): SIGTERM during training checkpoints the step in
flight and exits with PREEMPTED_EXIT_CODE; re-running the same command ends exactly where an
uninterrupted run ends (dropout on). SIGKILL after a checkpoint resumes exactly too.

run_pretraining.py runs in child processes (tiny config with one layer: less to trace, CPU).
On 2 idle cores: the one-process test (slow) ~45 s (with its uninterrupted run), the
multi-worker one (three 2-process clusters on 127.0.0.1) ~50 s; about 4x that on cores busy
with other work.
"""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.tasks import finetune
from bert_tf.training import preemption
from conftest import tiny_bert_config, write_pretraining_records
from test_multi_worker import _free_ports
from test_trainer import _arrays, _trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 200
FLAGS = dict(max_seq_length=32, max_predictions_per_seq=5, train_batch_size=8,
             eval_batch_size=8, max_eval_steps=4, learning_rate=1e-3, num_train_steps=STEPS,
             num_warmup_steps=2, iterations_per_loop=1, save_checkpoints_steps=1000, seed=7,
             do_eval=True, showprefixforinfo=True)  # absl's time prefix: the latencies


def test_exit_code_is_distinct_and_a_system_exit():
    assert preemption.PREEMPTED_EXIT_CODE == 75  # EX_TEMPFAIL; failures exit with 1
    e = preemption.Preempted(12)
    assert isinstance(e, SystemExit) and e.code == 75 and e.step == 12


def test_sigterm_ends_a_long_loop_after_the_step_in_flight(tmp_path, caplog):
    """One compiled loop of 1000 steps (a fine-tuning task, dropout on); the signal lands
    mid-loop and the checkpoint is of the step in flight: no batch made after the signal but
    the one that step may need is trained on."""
    trainer = _trainer(tmp_path, "run", dropout=0.1, iterations_per_loop=1000,
                       save_checkpoints_steps=1000)
    trainer.build_optimizer(1000, 0)
    trainer.restore()
    batches = []

    def tick():  # a batch starts: was the stop already requested?
        batches.append(bool(trainer._stop.variable.numpy()))
        if batches.count(True) > 20:  # fail in a second, not after 1000 steps
            raise RuntimeError("training ran on after the stop was requested")
        time.sleep(0.05)  # a step takes >= 50 ms
        return np.int64(0)

    base = finetune.arrays_dataset_fn(_arrays())

    def slow(*args):
        def delay(batch):
            with tf.control_dependencies([tf.py_function(tick, [], tf.int64)]):
                return {k: tf.identity(v) for k, v in batch.items()}
        return base(*args).map(delay)

    sent = []

    def send():
        while len(batches) < 11:  # training is under way (prime: no polling period divides it)
            time.sleep(0.01)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send, daemon=True).start()
    before = {s: signal.getsignal(s) for s in preemption.SIGNALS}  # SIG_IGN under `nohup ... &`
    with pytest.raises(preemption.Preempted) as info:
        trainer.train(slow)
    latency = time.monotonic() - sent[0]
    step = info.value.step
    assert info.value.code == preemption.PREEMPTED_EXIT_CODE
    assert 0 < step < 1000 and step == trainer.step
    assert int(trainer.inner_optimizer.iterations.numpy()) == step
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(f"ckpt-{step}")
    # Counted in batches, not seconds (a busy machine stretches the save): the loop reads the
    # flag before each step, so at most one step (the one in flight, which may wait for its
    # batch) trains on a batch begun after the flag was set.
    before_stop = batches.count(False)
    assert before_stop >= 11 and step <= before_stop + 1, (step, before_stop, latency)
    assert (f"preempted at step {step}: checkpoint saved, re-run the same command to resume"
            in caplog.text)
    # The handlers from before train() are back once it is over.
    assert {s: signal.getsignal(s) for s in preemption.SIGNALS} == before
    print(f"signal -> Preempted: {latency:.3f} s (step {step})")


_IGNORED_SIGINT = textwrap.dedent("""
    import os, signal, sys, time
    from bert_tf.pretraining_data import guard
    from bert_tf.training import preemption

    def check(send):
        flag, seen = preemption.StopFlag(), {}
        with preemption.watch(flag):
            seen["watch"] = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            seen["sigterm"] = callable(signal.getsignal(signal.SIGTERM))
            if send:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.3)
            seen["stopped"] = flag.signals
        seen["after"] = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        with guard.stop_on_signals():
            seen["guard"] = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            if send:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)
        return seen

    first = check("send")  # as started: SIGINT ignored
    # Then as Python starts when SIGINT is not ignored: its KeyboardInterrupt handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print([first, check("")])
""")


def test_an_ignored_sigint_stays_ignored():
    """A process started with SIGINT ignored (a background job: `nohup make test &`) keeps
    ignoring it while training and making data, as Python does; SIGTERM is still caught.
    One child process (TensorFlow imports once): started with SIGINT ignored, then given
    Python's own SIGINT handler, the state of a process started without it ignored."""
    proc = subprocess.run([sys.executable, "-c", _IGNORED_SIGINT], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=REPO),
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ignored, default = eval(proc.stdout.strip().splitlines()[-1])
    assert ignored == dict(watch=True, sigterm=True, stopped=0, after=True, guard=True)
    # Not ignored: both install their handler.
    assert default == dict(watch=False, sigterm=True, stopped=0, after=False, guard=False)


# ---- run_pretraining.py, one process ------------------------------------------------------

_STARTED = []


@pytest.fixture(autouse=True)
def _kill_leftovers():
    """A failed test leaves no run_pretraining.py behind."""
    yield
    while _STARTED:
        p = _STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Data and a 1-layer config with dropout (the multi-worker test needs no more)."""
    d = tmp_path_factory.mktemp("preemption")
    config = d / "bert_config.json"
    # dropout: the RNG state counts. relu: no XLA compile of the fused GELU in every process.
    tiny_bert_config(dropout=0.1, num_hidden_layers=1, hidden_act="relu").to_json_file(
        str(config))
    for i in range(2):
        write_pretraining_records(d / f"shard-{i}.tfrecord", 96, seed=i)
    return dict(dir=d, args=[f"--bert_config_file={config}",
                             f"--input_file={d / 'shard-*.tfrecord'}", "--do_train"])


@pytest.fixture(scope="module")
def setup(data):
    """`data` and an uninterrupted run's eval_results.txt."""
    setup, d = dict(data), data["dir"]
    proc = _start(setup, d / "reference")
    assert _finish(proc) == 0, _log(proc)[-3000:]
    setup["reference"] = (d / "reference" / "eval_results.txt").read_text()
    assert setup["reference"].startswith(f"global_step = {STEPS}\n")
    return setup


# run_pretraining.py's main() without the export at the end of training (~25 s a process on
# busy cores; these tests compare checkpoints and eval results, test_output's 100-step run and
# test_training's CLI test run the script with its export). The multi-worker test's resumed
# cluster keeps the export (export=True: the script itself): chief only.
_NO_EXPORT = textwrap.dedent("""
    import sys
    from bert_tf.commands import run_pretraining as command

    def app_main(argv, run=command.app_main):
        from bert_tf.pretraining import pretraining_export
        pretraining_export.export_pretrained = lambda *args, **kwargs: None
        return run(argv)

    command.app_main = app_main
    sys.argv[0] = "run_pretraining.py"
    command.main()
""")


def _start(setup, out, env=None, log_name=None, export=False, **flags):
    args = setup["args"] + [f"--output_dir={out}"]
    args += [f"--{k}={v}" for k, v in {**FLAGS, **flags}.items()]
    log_path = log_name or f"{out}.log"
    log = open(log_path, "a")
    script = [os.path.join(REPO, "run_pretraining.py")] if export else ["-c", _NO_EXPORT]
    proc = subprocess.Popen([sys.executable] + script + args,
                            env=dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=REPO,
                                     **(env or {})),
                            cwd=setup["dir"], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    proc.log_path = log_path
    _STARTED.append(proc)
    return proc


def _log(proc):
    with open(proc.log_path) as f:
        return f.read()


def _finish(proc, timeout=300):
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"no exit within {timeout}s:\n{_log(proc)[-3000:]}")


def _wait_for(procs, done, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"exited ({p.returncode}) too early:\n{_log(p)[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"timed out:\n{_log(procs[0])[-3000:]}")


def _seconds(line):
    """The time of day of an absl log line ("W1125 14:41:27.967191 ...") in seconds."""
    h, m, sec = re.search(r"[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+) ", line).groups()
    return int(h) * 3600 + int(m) * 60 + float(sec)


def _assert_preempted(proc, sent, out, steps=STEPS):
    """Exit code, one log line and no traceback; returns the checkpoint's step and the seconds
    from the signal's arrival to the checkpoint's log line and to the exit (process teardown,
    TF's included, takes most of it)."""
    assert _finish(proc, 60) == preemption.PREEMPTED_EXIT_CODE, _log(proc)[-3000:]
    exit_latency = time.monotonic() - sent
    text = _log(proc)
    assert "Traceback" not in text
    lines = [ln for ln in text.splitlines() if "preempted at step" in ln]
    assert len(lines) == 1, text[-3000:]
    step = int(lines[0].split("preempted at step ")[1].split(":")[0])
    assert lines[0].endswith(f"preempted at step {step}: checkpoint saved, re-run the same "
                             "command to resume")
    assert 5 <= step < steps  # not a checkpoint boundary (every 1000 steps)
    assert tf.train.latest_checkpoint(str(out)).endswith(f"model.ckpt-{step}")
    received = [ln for ln in text.splitlines() if "SIGTERM received: " in ln]
    if received:  # the signalled process (not the other worker)
        saved_latency = _seconds(lines[0]) - _seconds(received[0])
        assert saved_latency < 5, saved_latency
        print(f"\nSIGTERM at step {step}: checkpoint logged after {saved_latency:.3f} s, exit "
              f"after {exit_latency:.2f} s")
    return step, exit_latency


# slow: four run_pretraining.py processes (~45 s on 2 idle cores), as the two-worker test
# below. The default suite keeps the trainer's part, the signal ending a loop after the step in
# flight with that step's checkpoint (test_sigterm_ends_a_long_loop_after_the_step_in_flight,
# in process), the exit code (test_exit_code_is_distinct_and_a_system_exit) and resuming with
# the same numbers (test_two_phase.py, test_trainer.py); a SIGTERM to a run_pretraining.py
# process, its exit 75 and the same command resuming exactly run in the slow tests only (in the
# default suite a process is signalled only in the data commands' tests: test_packing_data.py,
# test_pretraining_data_signals.py).
@pytest.mark.slow
def test_sigterm_exits_75_then_sigkill_and_the_same_command_resumes_exactly(setup):
    out = setup["dir"] / "run"
    # SIGTERM mid-run (checkpoints are every 1000 steps): a checkpoint of that step, exit 75.
    proc = _start(setup, out)
    _wait_for([proc], lambda: f"step 5/{STEPS}" in _log(proc))
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    step, latency = _assert_preempted(proc, sent, out)
    assert latency < 30, latency  # 1.2-2 s measured on 2 idle cores, 7.7 s on busy ones
    assert not (out / "eval_results.txt").exists()
    # The same command resumes from it; SIGKILL 15 steps later loses those steps...
    again = _start(setup, out)
    _wait_for([again], lambda: f"step {step + 15}/{STEPS}" in _log(again))
    again.kill()
    assert _finish(again) == -signal.SIGKILL
    assert f"model.ckpt-{step} (step {step})" in _log(again)
    assert tf.train.latest_checkpoint(str(out)).endswith(f"model.ckpt-{step}")
    # ...and the same command again redoes them: the uninterrupted run's numbers, exactly.
    last = _start(setup, out)
    assert _finish(last) == 0, _log(last)[-3000:]
    assert (out / "eval_results.txt").read_text() == setup["reference"]


# ---- run_pretraining.py --strategy=multi_worker: two processes -------------------------------

def _cluster(setup, out, run, export=False, **flags):
    workers = [f"127.0.0.1:{p}" for p in _free_ports(2)]
    procs = []
    for i in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
        procs.append(_start(setup, out, env={"TF_CONFIG": json.dumps(tf_config)},
                            log_name=f"{out}-{run}-worker{i}.log", strategy="multi_worker",
                            export=export, **flags))
    return procs


def _variables(checkpoint):
    reader = tf.train.load_checkpoint(checkpoint)
    # save_counter counts saves (the preempted run made one more); the object graph is bytes.
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH"))}


# slow: three 2-worker clusters, ~100 CPU-s. The default suite's two-worker run (parity with one
# process, chief-only checkpoint and export): test_multi_worker.py's
# test_two_workers_match_one_process; SIGTERM ending a loop after its step:
# test_sigterm_ends_a_long_loop_after_the_step_in_flight. Both workers stopping at one step and
# resuming exactly: this test only.
@pytest.mark.slow
def test_sigterm_to_one_worker_stops_both_at_one_step_and_they_resume_exactly(data):
    """Three 2-worker clusters (uninterrupted, preempted, resumed); the uninterrupted and the
    resumed runs' last checkpoints (model, optimizer slots, dropout RNG, ...) are compared.
    The resumed cluster exports (the chief to output_dir/export, worker 1 to a scratch
    folder)."""
    flags = dict(num_train_steps=30, do_eval=False)  # the signal lands at step 5 or 6
    ref = data["dir"] / "mw-reference"
    assert [_finish(p) for p in _cluster(data, ref, "run", **flags)] == [0, 0]
    out = data["dir"] / "mw"
    chief, other = _cluster(data, out, "preempted", **flags)
    _wait_for([chief, other], lambda: "step 5/30" in _log(chief))
    sent = time.monotonic()
    other.send_signal(signal.SIGTERM)  # worker 1: the chief learns it through the all-reduce
    stopped = [_assert_preempted(p, sent, out, 30) for p in (chief, other)]
    steps = {step for step, _ in stopped}
    assert len(steps) == 1, steps
    # SIGTERM to exit within a Kubernetes grace period (30 s), TF's teardown included.
    assert max(latency for _, latency in stopped) < 30, stopped
    step = steps.pop()
    assert not (out / "export").exists()
    procs = _cluster(data, out, "resumed", export=True, **flags)
    assert [_finish(p) for p in procs] == [0, 0], _log(procs[0])[-3000:]
    for p in procs:
        assert f"model.ckpt-{step} (step {step})" in _log(p)
    # Chief-only export: worker 0 exported to output_dir/export; worker 1 to a scratch folder
    # (the collectives need both), which its log names.
    chief_log, other_log = (_log(p) for p in procs)
    assert f"exported the encoder to {out / 'export'} (ids in;" in chief_log, chief_log[-3000:]
    assert "exported the encoder to" not in other_log, other_log[-3000:]
    assert re.search(r"exported the ids-in encoder to \S*bert_tf-worker-export-\w+/export;",
                     other_log), other_log[-3000:]
    assert (out / "export" / "saved_model.pb").exists()
    want = _variables(str(ref / "model.ckpt-30"))
    got = _variables(str(out / "model.ckpt-30"))
    assert sorted(got) == sorted(want) and any(k.startswith("dropout_rng/") for k in got)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
