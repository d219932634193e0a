"""Worker processes of the streaming mode: run shard tasks in parallel, report progress.

Workers are plain Python processes (forked when TensorFlow is not loaded, spawned otherwise).
Each makes whole shards (`streaming.run_shard`) and writes its shard file itself; the parent
gets progress counts, each shard's stats and the worker's peak memory through a queue.
"""
import queue as queue_lib
import sys
import time
import traceback

from bert_tf import BertError
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


def write_shard(task, cfg, tokenizer, report):
    """Make shard `task` into `task.output` (temp name, renamed when complete); returns its
    Stats. `report` gets ("progress", shard, records, docs, bytes) per block written.

    Args:
        task: the `ShardTask` (with `output` set).
        cfg: the `StreamConfig`.
        tokenizer: an `IdTokenizer` for cfg's vocab.
        report: called with each progress message.
    """
    f = RecordFile(task.output)
    try:
        def send(message):  # ("records", shard, framed, count, docs, bytes)
            f.write_framed(message[2], message[3])
            report(("progress",) + message[1:2] + message[3:])

        stats = run_shard(task, cfg, tokenizer, send)
        f.commit()
    except BaseException:
        f.abort()
        raise
    return stats


def _worker_main(cfg, task_queue, result_queue):
    keep_freed_memory()
    tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)
    while True:
        task = task_queue.get()
        if task is None:
            return
        try:  # the worker writes its shard itself: records never cross the pipe
            stats = write_shard(task, cfg, tokenizer, result_queue.put)
            result_queue.put(("done", task.index, stats.to_dict(), peak_rss_mb()))
        except BaseException as e:  # report, then stop: the parent aborts the run
            result_queue.put(("error", task.index, _one_line(e)))
            return


def start_method():
    """fork starts a worker in milliseconds, but is unsafe once TensorFlow is loaded (gs:// or
    tfds input, or a caller that imported it): then spawn. Workers never import TF (except for
    --tfds_dataset shards)."""
    return "spawn" if "tensorflow" in sys.modules or sys.platform != "linux" else "fork"


def run_tasks(tasks, cfg, num_workers, on_message):
    """Run shard tasks, in this process (num_workers <= 1) or in worker processes.

    Raises BertError on the first failing shard (workers are stopped).

    Args:
        tasks: the `ShardTask`s to run.
        cfg: the `StreamConfig`.
        num_workers: processes (<= 1: this one).
        on_message: gets, in order per shard, ("progress", shard, records, docs, bytes) for
            each block written to `task.output`, then ("done", shard, stats_dict,
            worker_peak_rss_mb or None) once that file is complete.
    """
    if not tasks:
        return
    if num_workers <= 1:
        keep_freed_memory()
        tokenizer = IdTokenizer(cfg.vocab, cfg.do_lower_case, cfg.token_cache_size)
        for task in tasks:
            try:
                stats = write_shard(task, cfg, tokenizer, on_message)
            except BertError:
                raise
            except Exception as e:
                raise BertError(_one_line(e)) from e
            on_message(("done", task.index, stats.to_dict(), None))
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
            p = ctx.Process(target=_worker_main, args=(cfg, task_queue, result_queue), daemon=True)
            p.start()
            workers.append(p)
        remaining = {t.index for t in tasks}
        while remaining:
            try:
                message = result_queue.get(timeout=1.0)
            except queue_lib.Empty:
                dead = [p for p in workers if not p.is_alive() and p.exitcode not in (0, None)]
                if dead or not any(p.is_alive() for p in workers):
                    # Drain what is left before concluding a worker died silently.
                    try:
                        message = result_queue.get(timeout=1.0)
                    except queue_lib.Empty:
                        codes = ", ".join(str(p.exitcode) for p in workers)
                        raise BertError(f"--num_workers: a worker process died (exit codes {codes}); "
                                        "out of memory?") from None
                else:
                    continue
            if message[0] == "error":
                raise BertError(message[2])
            on_message(message)
            if message[0] == "done":
                remaining.discard(message[1])
        for p in workers:
            p.join(timeout=10)
    finally:
        for p in workers:
            if p.is_alive():
                p.terminate()
        for p in workers:
            p.join(timeout=5)
        task_queue.cancel_join_thread()
        result_queue.cancel_join_thread()


class Progress:
    """tqdm over input bytes with documents/s and instances/s; silent when not a terminal."""

    def __init__(self, total_bytes, enabled=None):
        self.start = time.time()
        self.docs = self.instances = 0
        self.bar = None
        if enabled is False or (enabled is None and not sys.stderr.isatty()):
            return  # tqdm's import costs ~0.1 s of start-up
        from tqdm import tqdm
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
