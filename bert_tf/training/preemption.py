"""Preemption: SIGTERM (or SIGINT) during training -> finish the step in flight, checkpoint that
step, exit with PREEMPTED_EXIT_CODE; the same command run again resumes from the checkpoint.

Python runs signal handlers only between bytecodes of the main thread, and the main thread sits
inside one tf.function for all `iterations_per_loop` steps of a loop. So the signal's wakeup fd
(written by CPython's C-level handler, in whatever thread) wakes a watcher thread that sets a
tf.Variable; the training loop's condition reads it before every step, so the loop ends after
the step in flight. Multi-worker: each step all-reduces the flag, so every worker stops after
the same step, however the signal reached them, and all save (the chief into output_dir) and
exit with the same code. TPUStrategy is single-client (one Python process drives every host),
so the local flag is enough there.

tf.distribute.experimental.PreemptionCheckpointHandler is not used: on Google Cloud CPU and TPU
VMs it is a documented no-op, on Cloud GPU VMs it ignores SIGTERM (it polls only the maintenance
event), it probes the metadata server (up to 5 s) when created, and it agrees on a step only
between calls of one step each, one step later than the all-reduce here.

A second signal while the checkpoint is being written exits at once, with 128 + its number
(the shell's convention for a process killed by that signal).
"""
import contextlib
import logging
import os
import signal
import threading

import tensorflow as tf

from bert_tf.training import distribute

log = logging.getLogger("bert_tf")

PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL (sysexits.h): "try again"; a failed run exits with 1
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(SystemExit):
    """Ends a preempted run once its checkpoint is written: the process exits with
    PREEMPTED_EXIT_CODE and no traceback (absl's app.run lets SystemExit through).

    Args:
        step: the global step of the checkpoint.
    """

    def __init__(self, step):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.step = step


def preempted(step):
    """Log the preemption line and return the `Preempted` to raise.

    Args:
        step: the global step of the checkpoint just written.
    """
    log.warning("preempted at step %d: checkpoint saved, re-run the same command to resume", step)
    return Preempted(step)


class StopFlag:
    """The flag the training loop reads before each step; set by `watch()` on a signal."""

    def __init__(self):
        # Outside any strategy scope and on the host: a local flag, never checkpointed.
        with tf.device("/cpu:0"):
            self.variable = tf.Variable(False, trainable=False, name="preemption_requested")
        self.signals = 0  # received while watching

    def requested(self, strategy):
        """In the training loop's graph: a bool tensor, True once a stop is requested (on
        several workers: on any of them, so that all see the same value at the same step).

        Args:
            strategy: the trainer's tf.distribute.Strategy.
        """
        if distribute.is_tpu(strategy) or getattr(strategy.extended, "_num_workers", 1) <= 1:
            return self.variable.read_value()
        local = strategy.run(lambda: tf.cast(self.variable.read_value(), tf.float32))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, local, axis=None) > 0

    def _on_signal(self, signum):
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            log.warning("%s received: finishing the current step, then saving a checkpoint "
                        "(send it again to exit at once, without one)", name)
            self.variable.assign(True)
        else:
            log.warning("second %s: exiting without a checkpoint", name)
            os._exit(128 + signum)


def caught_signals():
    """SIGNALS less an ignored SIGINT: a process started with SIGINT ignored (a background
    job, `nohup ... &`) keeps ignoring it, as Python itself does."""
    return [s for s in SIGNALS
            if not (s == signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN)]


def _read_wakeups(read_fd, flag):
    try:
        while True:
            data = os.read(read_fd, 64)
            if not data:  # write end closed: watching is over
                return
            for signum in data:
                if signum in SIGNALS:
                    flag._on_signal(signum)
    finally:
        os.close(read_fd)


@contextlib.contextmanager
def watch(flag):
    """While inside, SIGTERM and SIGINT set `flag` (their previous handlers come back after;
    an ignored SIGINT stays ignored).

    Outside the main thread signals cannot be caught: nothing is watched there.

    Args:
        flag: a `StopFlag`.
    """
    flag.variable.assign(False)
    flag.signals = 0
    if threading.current_thread() is not threading.main_thread():
        log.debug("training outside the main thread: preemption signals are not caught")
        yield flag
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # set_wakeup_fd requires it
    old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if old_fd != -1:  # someone else's (e.g. an asyncio loop): keep it, poll between loops only
        signal.set_wakeup_fd(old_fd)
        os.close(read_fd)
        os.close(write_fd)
        read_fd = write_fd = None
    else:
        threading.Thread(target=_read_wakeups, args=(read_fd, flag), daemon=True,
                         name="bert_tf-preemption").start()

    def handler(signum, frame):
        del frame
        if write_fd is None:  # the watcher thread handles it otherwise
            flag._on_signal(signum)

    old = {s: signal.signal(s, handler) for s in caught_signals()}
    try:
        yield flag
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if write_fd is not None:
            signal.set_wakeup_fd(-1)
            os.close(write_fd)  # ends the watcher thread
