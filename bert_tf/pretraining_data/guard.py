"""A data run that is safe to kill and to re-run.

- Workers die with their parent, SIGKILL included (`die_with_parent`: PR_SET_PDEATHSIG on
  Linux, a getppid watchdog elsewhere), so a restarted run never races orphans.
- SIGTERM/SIGINT stop the run cleanly (`stop_on_signals`): the first raises `Interrupted` in
  the main thread, the run removes its temp files and exits with PREEMPTED_EXIT_CODE (as a
  preempted run_pretraining); a second one exits at once.
- `OutputLock`: one run per output prefix. A lock file holds the pid and host; local files are
  also `flock`ed, so the kernel releases the lock of a dead holder (forked workers share it);
  on gs:// and other schemes the holder refreshes the file and a silent one is taken over.
- Sidecar files (stats journal, learned vocab, lock) go to `<dir>/.bert_tf/<name>.*`, where
  neither `<output_file>*` nor `<dir>/*` reaches: the training input expansion
  (`fileio.expand_globs`) drops folders, shell and Python globs skip dot names.
"""
import contextlib
import os
import posixpath
import signal
import socket
import threading
import time

from bert_tf import BertError
from bert_tf.pretraining_data.documents import is_local

PREEMPTED_EXIT_CODE = 75  # = training.preemption's (not imported here: it loads TensorFlow)
SIGNALS = (signal.SIGTERM, signal.SIGINT)
SIDECAR_DIR = ".bert_tf"
REMOTE_HEARTBEAT_S = 30.0
REMOTE_STALE_S = 120.0  # a remote lock not refreshed for this long is taken over


def sidecar_path(output, name):
    """`<dir>/.bert_tf/<basename>.<name>`: a file that belongs to output prefix `output`.

    Args:
        output: the output file or shard prefix (`--output_file`, its first entry for a list).
        name: "stats.json", "vocab.txt" or "lock".
    """
    directory, base = posixpath.split(output)
    return posixpath.join(directory, SIDECAR_DIR, f"{base}.{name}")


def legacy_sidecar_path(output, name):
    """Where versions before the `.bert_tf` folder put it: `<output>.<name>`.

    Args:
        output: the output file or shard prefix.
        name: "stats.json" or "vocab.txt".
    """
    return f"{output}.{name}"


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal; `message` is the line the command prints.

    Args:
        signum: the signal (0: a plain KeyboardInterrupt turned into this).
    """

    def __init__(self, signum=0, message="interrupted"):
        super().__init__(message)
        self.signum = signum
        self.message = message


def interrupted_line(mode, done, total):
    """The one line an interrupted run prints (the command then exits with 75).

    Args:
        mode: `--mode`.
        done, total: shards finished (kept, in the journal) and planned.
    """
    if mode == "streaming":
        return f"interrupted: {done} of {total} shards done; re-run with --resume to finish"
    if mode == "beam":
        return "interrupted: nothing kept (a Beam pipeline starts over); re-run the same command"
    return "interrupted: nothing written (--mode=original cannot resume); re-run the same command"


class _Hold:
    depth = 0
    pending = None  # the Interrupted to raise once the hold ends


_hold = _Hold()


@contextlib.contextmanager
def signals_held():
    """A stop signal that arrives inside is acted on at its end, so the block (rename a shard
    into place and report it) happens whole: a shard on disk is a shard in the journal."""
    _hold.depth += 1
    try:
        yield
    finally:
        _hold.depth -= 1
        if not _hold.depth and _hold.pending is not None:
            pending, _hold.pending = _hold.pending, None
            raise pending


def _deliver(exc):
    if _hold.depth:
        _hold.pending = exc
        return
    raise exc


def _worker_stop(signum, frame):
    del frame
    _deliver(Interrupted(signum))


# ---- workers ------------------------------------------------------------------------------

def _watch_parent(parent_pid):
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(0.2)


def set_parent_death_signal(signum):
    """Linux: this process gets `signum` when its parent exits (PR_SET_PDEATHSIG; kept across
    exec, so usable as a subprocess `preexec_fn`; it fires when the *thread* that started this
    process ends, so start it from one that lives as long as the parent). Returns whether it
    took effect.

    Args:
        signum: the signal to receive.
    """
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return False
    try:
        import ctypes
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(pr_set_pdeathsig, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid):
    """Called first in a child process: it is killed when `parent_pid` exits, however.

    Args:
        parent_pid: the parent's pid, taken before the child was started (a child whose
            parent is already gone exits at once).
    """
    armed = set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(1)
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True,
                         name="bert_tf-parent-watch").start()
    # Ctrl-C reaches the whole process group: the parent alone decides how the run stops.
    # SIGTERM (the parent's stop, or a group kill) raises Interrupted outside `signals_held`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_stop)


# ---- signals ------------------------------------------------------------------------------

class StopState:
    """What `stop_on_signals` saw: `signum` of the first signal, 0 while none."""

    def __init__(self):
        self.signum = 0


@contextlib.contextmanager
def stop_on_signals():
    """While inside, the first SIGTERM/SIGINT raises `Interrupted` in the main thread (the run
    cleans up and reports); a second exits at once with 128 + its number. Yields a `StopState`
    (a worker's death seen while stopping is the stop, not an error). Outside the main
    thread signals cannot be caught: nothing is installed.
    """
    state = StopState()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum, frame):
        del frame
        if state.signum:
            os._exit(128 + signum)
        state.signum = signum
        _deliver(Interrupted(signum))

    # An ignored SIGINT (a background job) stays ignored, as Python itself leaves it.
    old = {s: signal.signal(s, handler) for s in SIGNALS
           if not (s == signal.SIGINT and signal.getsignal(s) == signal.SIG_IGN)}
    try:
        yield state
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# ---- the output lock ----------------------------------------------------------------------

def _holder_text():
    return (f"pid {os.getpid()} on {socket.gethostname()}, started "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OutputLock:
    """Exclusive use of one output prefix; `acquire()` raises a one-line BertError naming the
    holder when another live run has it.

    Args:
        path: the lock file (`sidecar_path(output, "lock")`).
        output: the output named in the error.
    """

    def __init__(self, path, output):
        self.path = path
        self.output = output
        self._fd = None
        self._beat = None

    def _refuse(self, holder):
        holder = holder.strip() or "another process"
        raise BertError(f"--output_file: {self.output} is being written by another run "
                        f"({holder}); wait for it or stop it (lock {self.path})")

    def acquire(self):
        """Takes the lock (a lock whose holder is gone is taken over)."""
        if is_local(self.path):
            self._acquire_local()
        else:
            self._acquire_remote()
        return self

    def _acquire_local(self):
        import fcntl
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace")
                os.close(fd)
                self._refuse(holder)
            try:  # the file may have been unlinked by its releasing holder in between
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_holder_text() + "\n").encode(), 0)
        self._fd = fd

    def _acquire_remote(self):
        import tensorflow as tf
        gfile = tf.io.gfile
        if gfile.exists(self.path):
            with gfile.GFile(self.path, "r") as f:
                holder = f.read()
            fields = holder.split()
            host = socket.gethostname()
            try:
                pid, their_host, beat = int(fields[1]), fields[3].rstrip(","), float(fields[-1])
            except (IndexError, ValueError):
                pid, their_host, beat = 0, "", 0.0
            gone = (their_host == host and not _pid_alive(pid)) or time.time() - beat > REMOTE_STALE_S
            if not gone:
                self._refuse(holder.rsplit(", heartbeat", 1)[0])
        self._write_remote()
        stop = threading.Event()

        def beat():
            while not stop.wait(REMOTE_HEARTBEAT_S):
                try:
                    self._write_remote()
                except Exception:  # noqa: BLE001  a missed beat only ages the lock
                    pass

        threading.Thread(target=beat, daemon=True, name="bert_tf-lock-heartbeat").start()
        self._beat = stop

    def _write_remote(self):
        import tensorflow as tf
        with tf.io.gfile.GFile(self.path, "w") as f:
            f.write(f"{_holder_text()}, heartbeat {time.time():.0f}\n")

    def release(self):
        """Gives the lock up and deletes the file (and the sidecar folder when empty)."""
        if self._fd is not None:
            try:
                os.unlink(self.path)  # while still locked: a waiter re-checks the inode
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                pass  # not empty: it holds the stats journal
        elif self._beat is not None:
            self._beat.set()
            self._beat = None
            from bert_tf.pretraining_data.writer import remove_quietly
            remove_quietly(self.path)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
