"""`bert-pack-pretraining-data`: options, the two passes, the journal, resume.

Pass 1 reads the lengths (one task per input file, on `--num_workers` processes), pass 2
writes the shards (one task per shard). The journal `<dir>/.bert_tf/<name>.stats.json` is
written as each shard finishes; with `--resume` and the same flags and inputs, finished shards
are kept (and pass 1 is not redone). Same lock, SIGTERM (exit 75) and worker handling as
create_pretraining_data's streaming mode (`guard`, `workers`).
"""
import dataclasses
import json
import sys
import time
import types

import numpy as np

from bert_tf import BertError
from bert_tf.pretraining_data import guard, sequence_packing as packing
from bert_tf.pretraining_data import sequence_packing_io as io_lib
from bert_tf.pretraining_data import workers as workers_lib
from bert_tf.pretraining_data import writer as writer_lib
from bert_tf.pretraining_data.documents import expand_input_patterns, file_size
from bert_tf.pretraining_data.stats import dumps
from bert_tf.script_flags import flag


@dataclasses.dataclass
class PackOptions:
    """Flags of bert-pack-pretraining-data (see each field's help), plus `progress`."""
    input_file: str = flag("", "Input pre-training TFRecord file(s), unpacked (comma-separated "
                           "list of files/globs), as create_pretraining_data writes them.")
    output_file: str = flag("", "Output packed TFRecord file (or comma-separated list of files).")
    max_seq_length: int = flag(128, "Length of the packed rows; every input sequence must fit.")
    max_predictions_per_seq: int = flag(20, "Masked-LM predictions per input sequence; packed "
                                        "rows hold this + max_sequences_per_pack (more if "
                                        "the data needs it, stated in the journal).")
    max_sequences_per_pack: int = flag(3, "Most sequences in one packed row.")
    random_seed: int = flag(12345, "Seed of the packs' order (the output is a function of "
                            "the flags and inputs).")
    num_workers: int = flag(1, "Worker processes (results do not depend on it).")
    output_shards: int = flag(0, "Write <output_file>-SSSSS-of-NNNNN shards. 0: the "
                              "--output_file list; with one --output_file and "
                              "--num_workers>1, one shard per worker.")
    resume: bool = flag(False, "Keep finished shards of an interrupted run with the same flags.")
    window_size: int = flag(100000, "Sequences packed together (memory is bounded by one "
                            "window per worker).")
    stats_file: str = flag("", "Journal JSON (default: <dir>/.bert_tf/<output name>.stats.json).")
    progress: bool = None  # None: a tqdm bar when stderr is a terminal


def validate(opts):
    """One-line BertError naming the bad flag."""
    if not opts.input_file.strip(" ,"):
        raise BertError("--input_file: required")
    if not opts.output_file.strip(" ,"):
        raise BertError("--output_file: required")
    for name, low in (("max_seq_length", 2), ("max_predictions_per_seq", 0),
                      ("max_sequences_per_pack", 1), ("num_workers", 1), ("output_shards", 0),
                      ("window_size", 1)):
        if getattr(opts, name) < low:
            raise BertError(f"--{name}: must be >= {low}, got {getattr(opts, name)}")


def _output_paths(opts):
    from bert_tf.pretraining_data.runner import output_paths  # the same sharding rules
    return output_paths(types.SimpleNamespace(
        output_file=opts.output_file, output_shards=opts.output_shards,
        stats_file=opts.stats_file, mode="streaming", num_workers=opts.num_workers))


def _fingerprint(opts, input_files, num_shards, digests):
    """What --resume must find unchanged: the flags and each input's path, size and sha256
    (content, not only size: records rewritten to the same size are other records)."""
    flags = {k: v for k, v in dataclasses.asdict(opts).items()
             if k not in ("num_workers", "resume", "progress", "stats_file", "output_file")}
    return {"flags": flags, "num_shards": num_shards,
            "inputs": [[p, file_size(p), d] for p, d in zip(input_files, digests)]}


def _lengths(opts, input_files, progress):
    """Pass 1 -> {"records_per_file", "padded_tokens", "histogram", "max_predictions"}."""
    cfg = io_lib.PackConfig(opts.max_seq_length, opts.max_sequences_per_pack)
    found = {}

    def on_message(message):
        if message[0] == "progress":
            progress.update(0, 0, message[3])
        elif message[0] == "done":
            found[message[1]] = message[2]

    tasks = [io_lib.LengthTask(i, p) for i, p in enumerate(input_files)]
    workers_lib.run_tasks(tasks, cfg, opts.num_workers, on_message, make_job=io_lib.length_job)
    per_file = [found[i] for i in range(len(input_files))]
    return {"records_per_file": [f["records"] for f in per_file],
            "sha256": [f["sha256"] for f in per_file], "sizes": [f["size"] for f in per_file],
            "stamps": [f["stamp"] for f in per_file],
            "stamp_proves": [f["stamp_proves"] for f in per_file],
            "padded_tokens": sum(f["padded_tokens"] for f in per_file),
            "histogram": np.sum([f["histogram"] for f in per_file], axis=0).tolist(),
            "max_predictions": np.max([f["max_predictions"] for f in per_file], axis=0).tolist()}


def plan_tasks(records_per_file, input_files, paths, window_size):
    """Output shard k packs input records [k*R/K, (k+1)*R/K), in equal windows of at most
    `window_size` -> list of PackTask.

    Args:
        records_per_file: records in each input file.
        input_files: the input file paths, in order.
        paths: the output shard paths (K of them).
        window_size: the most sequences packed (and shuffled) together.
    """
    total, k = sum(records_per_file), len(paths)
    starts = np.cumsum([0] + list(records_per_file))
    tasks, first_window = [], 0
    for index, path in enumerate(paths):
        lo, hi = total * index // k, total * (index + 1) // k
        pieces = []
        for f, name in enumerate(input_files):
            a, b = max(lo, starts[f]), min(hi, starts[f + 1])
            if a < b:
                pieces.append((name, int(a - starts[f]), int(b - a)))
        count = -(-(hi - lo) // window_size)
        windows = [(hi - lo) * (w + 1) // count - (hi - lo) * w // count for w in range(count)]
        tasks.append(io_lib.PackTask(index, pieces, windows, first_window, path))
        first_window += count
    return tasks


def _digests(input_files, lengths, progress_enabled, only=None):
    """sha256 of each input; one whose [size, mtime_ns] proves it unchanged since `lengths`
    (pass 1's, from the journal) keeps pass 1's without being read again.

    Args:
        input_files: the input paths.
        lengths: pass 1's record (sha256, stamps, stamp_proves), or {}.
        progress_enabled: the --progress setting (a bar over the bytes hashed).
        only: indices to consider (default all); the others get None.
    Returns:
        {"sha256", "stamps", "stamp_proves"}: lists, as pass 1's (the stamps of now).
    """
    n = len(input_files)
    known = lengths.get("sha256") or [None] * n
    stamps = list(lengths.get("stamps") or [None] * n)
    proves = list(lengths.get("stamp_proves") or [False] * n)
    out, todo = [None] * n, []
    now = {}
    for i, path in enumerate(input_files):
        if only is not None and i not in only:
            continue
        now[i] = io_lib.file_stamp(path)
        if proves[i] and known[i] and stamps[i] == now[i]:
            out[i] = known[i]
        else:
            todo.append(i)
    if todo:
        progress = _bar(sum(now[i][0] for i in todo), progress_enabled,
                        "hashing inputs", "B")
        try:
            for i in todo:
                start_ns, stamps[i] = time.time_ns(), io_lib.file_stamp(input_files[i])
                out[i] = io_lib.file_digest(input_files[i],
                                            lambda b: progress.update(0, 0, b))
                proves[i] = io_lib.stamp_proves(stamps[i], start_ns, input_files[i])
        finally:
            progress.close()
    return {"sha256": out, "stamps": stamps, "stamp_proves": proves}


def _check_unchanged(input_files, lengths, progress_enabled):
    """After pass 2: inputs whose stamp does not prove them unchanged (written just before pass
    1 read them) are hashed again; other content is a one-line error."""
    racy = {i for i, ok in enumerate(lengths.get("stamp_proves") or []) if not ok}
    now = _digests(input_files, {}, progress_enabled, only=racy)["sha256"]
    for i in sorted(racy):
        if now[i] != lengths["sha256"][i]:
            raise BertError(f"--input_file {input_files[i]}: its content (sha256) "
                            f"{io_lib.CHANGED}")


def _bar(total, enabled, desc, unit):
    progress = workers_lib.Progress(total, enabled)
    if progress.bar is not None:
        progress.bar.desc, progress.bar.unit = desc, unit
    return progress


def run(opts):
    """Pack the records; returns the journal dict (also written as JSON)."""
    start = time.time()
    validate(opts)
    paths, stats_path = _output_paths(opts)
    input_files = expand_input_patterns(opts.input_file)
    prefix = next(f.strip() for f in opts.output_file.split(",") if f.strip())
    overlap = set(paths) & set(input_files)
    if overlap:
        raise BertError(f"--output_file: {sorted(overlap)[0]} is also an input; write "
                        "to another path")
    lock_path = guard.sidecar_path(prefix, "lock")
    writer_lib.check_writable(paths + [stats_path, lock_path])
    with guard.stop_on_signals() as stop, guard.OutputLock(lock_path, prefix):
        try:
            return _run(opts, input_files, paths, stats_path, start, stop)
        except BaseException as e:
            if not (stop.signum or isinstance(e, KeyboardInterrupt)):
                raise
            if isinstance(e, guard.Interrupted) and e.message != "interrupted":
                raise
            raise guard.Interrupted(stop.signum, guard.interrupted_line(
                "streaming", 0, len(paths))) from None


def _run(opts, input_files, paths, stats_path, start, stop):
    writer_lib.remove_stale_tmps(stats_path)
    journal_existed = writer_lib.exists(stats_path)
    previous = {}
    if opts.resume and journal_existed:
        try:
            previous = json.loads(writer_lib.read_text(stats_path))
        except ValueError:
            raise BertError(f"--resume: {stats_path} is not valid JSON; delete it to start "
                            "over") from None
        # Content before trusting it; an input whose stamp proves it unchanged is not re-read.
        now = _digests(input_files, previous.get("lengths") or {}, opts.progress)
        fingerprint = _fingerprint(opts, input_files, len(paths), now["sha256"])
        if previous.get("config") != fingerprint:
            raise BertError(f"--resume: {stats_path} was made with other flags or inputs (or "
                            "an input's content changed since); use the same ones, or drop "
                            "--resume to start over")
        if previous.get("lengths"):  # the same content: pass 2 checks today's stamps
            previous["lengths"].update(stamps=now["stamps"], stamp_proves=now["stamp_proves"])
    lengths = previous.get("lengths")
    if lengths is None:
        progress = _bar(None, opts.progress, "reading lengths", "rec")
        try:
            lengths = _lengths(opts, input_files, progress)
        finally:
            progress.close()
        fingerprint = _fingerprint(opts, input_files, len(paths), lengths["sha256"])
    total = sum(lengths["records_per_file"])
    if not total:
        raise BertError(f"--input_file: no records in {opts.input_file!r}; give files "
                        "with pre-training records")
    histogram = np.asarray(lengths["histogram"])
    default_p = packing.default_num_predictions(opts.max_predictions_per_seq,
                                                opts.max_sequences_per_pack)
    needed_p = packing.predictions_bound(histogram, lengths["max_predictions"],
                                         opts.max_seq_length, opts.max_sequences_per_pack)
    p = max(default_p, needed_p)
    cfg = io_lib.PackConfig(opts.max_seq_length, opts.max_sequences_per_pack, p,
                            opts.random_seed,
                            dict(zip(input_files, lengths["stamps"])) if "stamps" in lengths
                            else None)
    tasks = plan_tasks(lengths["records_per_file"], input_files, paths, opts.window_size)
    done = {int(k): v for k, v in previous.get("shards", {}).items()
            if writer_lib.exists(paths[int(k)])}
    for path in paths:
        writer_lib.remove_stale_tmps(path)
    todo = [t for t in tasks if t.index not in done]
    tokens = int((histogram * np.arange(len(histogram))).sum())
    settings = {"algorithm": packing.ALGORITHM, "max_seq_length": opts.max_seq_length,
                "max_sequences_per_pack": opts.max_sequences_per_pack,
                "num_predictions": p, "default_num_predictions": default_p,
                "num_predictions_needed": needed_p, "window_size": opts.window_size,
                "random_seed": opts.random_seed, "shards": len(paths)}
    if p > default_p:
        settings["num_predictions_note"] = (
            f"P={p} > max_predictions_per_seq + max_sequences_per_pack = {default_p}: "
            f"{opts.max_sequences_per_pack} sequences of these lengths can hold up to {p} "
            "masked tokens")
    journal_written = []

    def write_journal(complete, extra=None):
        data = {"mode": "pack", "complete": complete, "outputs": paths, "config": fingerprint,
                **settings, "lengths": lengths,
                "shards": {str(k): done[k] for k in sorted(done)}}
        data.update(extra or {})
        writer_lib.write_text_atomic(stats_path, dumps(data))
        journal_written.append(True)
        return data

    progress = _bar(sum(t.size for t in todo), opts.progress, "packing", "seq")

    def on_message(message):
        if message[0] == "progress":
            progress.update(message[3], message[2], message[3])
        elif message[0] == "done":
            done[message[1]] = message[2]
            write_journal(False)

    write_journal(False)
    try:
        workers_lib.run_tasks(todo, cfg, opts.num_workers, on_message, make_job=io_lib.pack_job)
        progress.close()
        _check_unchanged(input_files, lengths, opts.progress)
    except BaseException as e:
        progress.close()
        for t in todo:
            writer_lib.remove_stale_tmps(t.output)
        if isinstance(e, KeyboardInterrupt) or stop.signum:
            raise guard.Interrupted(stop.signum, guard.interrupted_line(
                "streaming", len(done), len(paths))) from None
        for t in todo:  # errors leave nothing behind
            writer_lib.remove_quietly(t.output)
        if journal_written and not journal_existed:
            writer_lib.remove_quietly(stats_path)
        raise
    packs = sum(d["packs"] for d in done.values())
    seconds = time.time() - start
    totals = {
        "sequences_in": total, "packs_out": packs, "tokens": tokens,
        "padding_share_before": round(1 - tokens / max(lengths["padded_tokens"], 1), 6),
        "padding_share_after": round(1 - tokens / max(packs * opts.max_seq_length, 1), 6),
        "expected_speedup": round(total / max(packs, 1), 4),
        "sequences_per_pack": round(total / max(packs, 1), 4),
        "most_predictions_in_a_pack": max(d["most_predictions_in_a_pack"] for d in done.values()),
        "seconds": round(seconds, 3)}
    data = write_journal(True, {"totals": totals, "resumed_shards": len(tasks) - len(todo),
                                "padding_share_before": totals["padding_share_before"],
                                "padding_share_after": totals["padding_share_after"],
                                "expected_speedup": totals["expected_speedup"]})
    print(summary_line(totals, len(paths)))
    return data


def summary_line(totals, outputs):
    """The one line printed at the end.

    Args:
        totals: the run's totals (the journal's).
        outputs: how many output files were written.
    """
    return (f"packed {totals['sequences_in']} sequences into {totals['packs_out']} rows "
            f"({totals['sequences_per_pack']:.2f} per row) in {outputs} file(s): padding "
            f"{100 * totals['padding_share_before']:.1f}% -> "
            f"{100 * totals['padding_share_after']:.1f}%, expected speed-up "
            f"{totals['expected_speedup']:.2f}x, in {totals['seconds']:.1f}s")


def main(opts):
    """Run; a BertError is `error: <one line>` (exit 1); SIGTERM/SIGINT exit 75."""
    try:
        return run(opts)
    except BertError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt as e:
        line = e.message if isinstance(e, guard.Interrupted) else "interrupted"
        print(line, file=sys.stderr)
        sys.exit(guard.PREEMPTED_EXIT_CODE)
