"""Worker processes of the streaming mode: run shard tasks in parallel, report progress.

Workers are plain Python processes (forked when TensorFlow is not loaded, spawned otherwise).
Each makes whole shards (`streaming.run_shard`) and writes its shard file itself; the parent
gets progress counts, each shard's stats and the worker's peak memory through a queue.
Workers die with the parent (`guard.die_with_parent`); on a stop signal the parent sends
them SIGTERM, each removes its temp file, and every shard they renamed into place is
reported (rename and report are one step, `guard.signals_held`).
"""
import os
import queue as queue_lib
import sys
import time
import traceback

from bert_tf import BertError
from bert_tf.pretraining_data.guard import Interrupted, die_with_parent, signals_held
from bert_tf.pretraining_data.streaming import run_shard
from bert_tf.pretraining_data.writer import RecordFile
from bert_tf.tokenization import IdTokenizer


def _one_line(exc):
    if isinstance(exc, BertError):
        return str(exc)
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {last.filename}:{last.lineno}" if last else ""
    return f"internal error in a streaming worker: {type(exc).__name__}: {exc}{where}"


def peak_rss_mb():
    """Peak resident memory of this process image (VmHWM; unlike ru_maxrss it does not count
    the parent's pages a spawned child had mapped between fork and exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def keep_freed_memory():
    """Have glibc keep freed heap memory instead of returning it to the kernel after every
    batch: each batch's numpy temporaries (a few MB) would otherwise be page-faulted in anew,
    about 15 % of a worker's time. Memory stays bounded by the largest batch. A no-op where
    glibc's mallopt is not available."""
    try:
        import ctypes
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_trim_threshold, 1 << 30)
    mallopt(m_top_pad, 16 << 20)
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's maximum on 64-bit


def write_shard(task, cfg, tokenizer, report, done=None):
    """Make shard `task` into `task.output` (temp name, renamed when complete); returns its
    Stats. `report` gets ("progress", shard, records, docs, bytes) per block written.

    Args:
        task: the `ShardTask` (with `output` set).
        cfg: the `StreamConfig`.
        tokenizer: an `IdTokenizer` for cfg's vocab.
        report: called with each progress message.
        done: None, or a function giving the peak RSS (or None) for a ("done", shard,
            stats_dict, peak_rss_mb) message that `report` gets together with the rename: a
            stop signal cannot fall between them (`guard.signals_held`).
    """
    f = RecordFile(task.output)
    try:
        def send(message):  # ("records", shard, framed, count, docs, bytes)
            f.write_framed(message[2], message[3])
            report(("progress",) + message[1:2] + message[3:])

        stats = run_shard(task, cfg, tokenizer, send)
        with signals_held():
            f.commit()
            if done is not None:
                report(("done", task.index, stats.to_dict(), done()))
    except BaseException:
        f.abort()
        raise
    return stats


def shard_job(cfg):
    """The streaming mode's job (`run_tasks`' `make_job`): `write_shard` with a tokenizer."""
    tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)
    return lambda task, report, done: write_shard(task, cfg, tokenizer, report, done=done)


def _worker_main(cfg, task_queue, result_queue, parent_pid, make_job=shard_job):
    die_with_parent(parent_pid)  # no orphan keeps writing shards after a kill of the run
    try:
        keep_freed_memory()
        job = make_job(cfg)
        while True:
            task = task_queue.get()
            if task is None:
                return
            try:  # the worker writes its shard itself: records never cross the pipe
                job(task, result_queue.put, peak_rss_mb)
            except Interrupted:
                raise
            except BaseException as e:  # report, then stop: the parent aborts the run
                result_queue.put(("error", task.index, _one_line(e)))
                return
    except Interrupted as e:  # stopped (its temp file is gone); queued messages still go out
        sys.exit(128 + e.signum)


def start_method():
    """fork starts a worker in milliseconds, but is unsafe once TensorFlow is loaded (gs:// or
    tfds input, or a caller that imported it): then spawn. Workers never import TF (except for
    --tfds_dataset shards)."""
    return "spawn" if "tensorflow" in sys.modules or sys.platform != "linux" else "fork"


def run_tasks(tasks, cfg, num_workers, on_message, make_job=shard_job):
    """Run shard tasks, in this process (num_workers <= 1) or in worker processes.

    Raises BertError on the first failing shard (workers are stopped).

    Args:
        tasks: the `ShardTask`s to run.
        cfg: the `StreamConfig`.
        num_workers: processes (<= 1: this one).
        on_message: gets, in order per shard, ("progress", shard, records, docs, bytes) for
            each block written to `task.output`, then ("done", shard, stats_dict,
            worker_peak_rss_mb or None) once that file is complete.
        make_job: a module-level function, cfg -> job(task, report, done) run per task in
            each process (default: the streaming mode's shards; packing has its own).
    """
    if not tasks:
        return
    if num_workers <= 1:
        keep_freed_memory()
        job = make_job(cfg)
        for task in tasks:
            try:
                job(task, on_message, lambda: None)
            except BertError:
                raise
            except Exception as e:
                raise BertError(_one_line(e)) from e
        return

    import multiprocessing
    import numpy  # noqa: F401  (loaded once here, shared by the forked workers)
    ctx = multiprocessing.get_context(start_method())
    task_queue = ctx.Queue()
    result_queue = ctx.Queue(maxsize=8 * num_workers)  # back-pressure on the writer
    for task in tasks:
        task_queue.put(task)
    workers = []
    for _ in range(min(num_workers, len(tasks))):
        task_queue.put(None)
    try:
        for _ in range(min(num_workers, len(tasks))):
            p = ctx.Process(target=_worker_main, daemon=True,
                            args=(cfg, task_queue, result_queue, os.getpid(), make_job))
            p.start()
            workers.append(p)
        remaining = {t.index for t in tasks}
        quiet = 0  # polls without a message since a worker was seen dead
        while remaining:
            # A message taken off the queue is handled whole: a stop signal waits (<= 0.1 s).
            with signals_held():
                try:
                    message = result_queue.get(timeout=0.1)
                except queue_lib.Empty:
                    message = None
                if message is not None:
                    quiet = 0
                    if message[0] == "error":
                        raise BertError(message[2])
                    on_message(message)
                    if message[0] == "done":
                        remaining.discard(message[1])
                    continue
            dead = [p for p in workers if not p.is_alive() and p.exitcode not in (0, None)]
            if dead or not any(p.is_alive() for p in workers):
                quiet += 1  # drain what is left before concluding a worker died silently
                if quiet >= 10:
                    codes = ", ".join(str(p.exitcode) for p in workers)
                    raise BertError(f"--num_workers: a worker process died (exit codes {codes}); "
                                    "out of memory?")
        for p in workers:
            p.join(timeout=10)
    except BaseException:
        _stop(workers, result_queue, on_message)
        raise
    finally:
        for p in workers:
            if p.is_alive():
                p.terminate()
        for p in workers:
            p.join(timeout=5)
        task_queue.cancel_join_thread()
        result_queue.cancel_join_thread()


def _stop(workers, result_queue, on_message, timeout=5.0):
    """Stops the workers (SIGTERM: each removes its temp file and exits) and passes on the
    "done" of every shard they finished meanwhile, so that all shards on disk are reported."""
    for p in workers:
        if p.is_alive():
            p.terminate()
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            message = result_queue.get(timeout=0.02)
        except queue_lib.Empty:
            if not any(p.is_alive() for p in workers):
                return  # all exited, the queue is drained
            continue
        except (OSError, EOFError, ValueError):  # a message cut by a killed worker
            return
        if message[0] == "done":
            on_message(message)


class Progress:
    """tqdm over input bytes with documents/s and instances/s; silent when not a terminal."""

    def __init__(self, total_bytes, enabled=None):
        self.start = time.time()
        self.docs = self.instances = 0
        self.bar = None
        if enabled is False or (enabled is None and not sys.stderr.isatty()):
            return  # tqdm's import costs ~0.1 s of start-up
        from bert_tf.progress import bar as tqdm
        self.bar = tqdm(total=total_bytes or None, unit="B", unit_scale=True, dynamic_ncols=True,
                        desc="streaming", file=sys.stderr, mininterval=1.0)

    def update(self, docs, instances, nbytes):
        """Advances the bar.

        Args:
            docs, instances: documents and instances done since the last call.
            nbytes: input bytes done since the last call.
        """
        if self.bar is None:
            return
        self.docs += docs
        self.instances += instances
        elapsed = max(time.time() - self.start, 1e-9)
        if nbytes:
            self.bar.update(nbytes)
        self.bar.set_postfix_str(f"{self.docs / elapsed:.0f} docs/s, {self.instances / elapsed:.0f} inst/s",
                                 refresh=False)

    def close(self):
        """Closes the bar (if any)."""
        if self.bar is not None:
            self.bar.close()
