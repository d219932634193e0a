"""Options, validation and the two modes' drivers (what create_pretraining_data.py calls)."""
import dataclasses
import hashlib
import json
import random
import re
import sys
import time

from bert_tf import BertError
from bert_tf import fileio
from bert_tf.fileio import describe_files
from bert_tf.pretraining_data import documents as docs_lib
from bert_tf.pretraining_data import guard
from bert_tf.pretraining_data import original as original_lib
from bert_tf.pretraining_data import streaming as streaming_lib
from bert_tf.pretraining_data import workers as workers_lib
from bert_tf.pretraining_data import writer as writer_lib
from bert_tf.pretraining_data.options import MODES, Options  # noqa: F401  (API)
from bert_tf.pretraining_data.stats import Stats, dumps

def warn(message):
    """Prints `warning: <message>` to stderr."""
    print(f"warning: {message}", file=sys.stderr)


def validate(opts):
    """Checks an `Options` before any work: a one-line BertError naming the bad flag."""
    if opts.mode not in MODES:
        raise BertError(f"--mode: must be one of {', '.join(MODES)}, got {opts.mode!r}")
    if not opts.input_file and not opts.tfds_dataset:
        raise BertError("--input_file: required (or --tfds_dataset)")
    if opts.input_file and opts.tfds_dataset:
        raise BertError("--tfds_dataset: give either --input_file or --tfds_dataset, not both")
    if not opts.output_file.strip(" ,"):
        raise BertError("--output_file: required")
    if opts.max_seq_length < 5:
        raise BertError(f"--max_seq_length: must be >= 5 ([CLS] A [SEP] B [SEP]), got {opts.max_seq_length}")
    if opts.max_predictions_per_seq < 0:
        raise BertError(f"--max_predictions_per_seq: must be >= 0, got {opts.max_predictions_per_seq}")
    if not 0.0 < opts.masked_lm_prob <= 1.0:
        raise BertError(f"--masked_lm_prob: must be in (0, 1], got {opts.masked_lm_prob}")
    if not 0.0 <= opts.short_seq_prob <= 1.0:
        raise BertError(f"--short_seq_prob: must be in [0, 1], got {opts.short_seq_prob}")
    if opts.dupe_factor < 1:
        raise BertError(f"--dupe_factor: must be >= 1, got {opts.dupe_factor}")
    if opts.num_workers < 1:
        raise BertError(f"--num_workers: must be >= 1, got {opts.num_workers}")
    if opts.output_shards < 0:
        raise BertError(f"--output_shards: must be >= 0, got {opts.output_shards}")
    if opts.nsp_reservoir_size < 1:
        raise BertError(f"--nsp_reservoir_size: must be >= 1, got {opts.nsp_reservoir_size}")
    if opts.shuffle_buffer_size < 0:
        raise BertError(f"--shuffle_buffer_size: must be >= 0, got {opts.shuffle_buffer_size}")
    if opts.learn_vocab_size < 0:
        raise BertError(f"--learn_vocab_size: must be >= 0, got {opts.learn_vocab_size}")
    if opts.resume and opts.mode != "streaming":
        raise BertError("--resume: only --mode=streaming writes resumable shards")
    if opts.runner and opts.mode != "beam":
        raise BertError(f"--runner: runs the Beam pipeline (--mode=beam), not --mode={opts.mode}")
    if opts.beam_args and opts.mode != "beam":
        raise BertError(f"unknown flag(s) {' '.join(opts.beam_args)} (Beam pipeline options "
                        "need --runner)")
    if opts.mode == "beam":
        if opts.num_workers != 1:
            raise BertError("--num_workers: with --runner, use the runner's own options (e.g. "
                            "--direct_num_workers=2 --direct_running_mode=multi_processing)")
        if opts.tfds_dataset:
            raise BertError("--tfds_dataset: not supported with --runner; export the text to "
                            "files (one sentence per line) first")
    expected = int(round(opts.max_seq_length * opts.masked_lm_prob))
    if opts.max_predictions_per_seq < expected:
        warn(f"--max_predictions_per_seq={opts.max_predictions_per_seq} is smaller than "
             f"round(max_seq_length * masked_lm_prob) = {expected}: fewer tokens than "
             f"--masked_lm_prob asks for will be masked")


def output_prefix(opts):
    """The first --output_file entry: what the stats journal, learned vocab and lock are named
    after (`guard.sidecar_path`)."""
    return next(f.strip() for f in opts.output_file.split(",") if f.strip())


def output_paths(opts):
    """(list of output files, stats file path)."""
    files = [f.strip() for f in opts.output_file.split(",") if f.strip()]
    shards = opts.output_shards
    stats = opts.stats_file or guard.sidecar_path(files[0], "stats.json")
    if opts.mode == "beam":
        if len(files) != 1:
            raise BertError("--output_file: with --runner give one file name prefix "
                            "(shards are <prefix>-SSSSS-of-NNNNN)")
        if not shards:  # as many shards as pieces, a function of the input size
            return [], stats
    if not shards and opts.mode == "streaming" and len(files) == 1 and opts.num_workers > 1:
        shards = opts.num_workers  # one shard per worker unless told otherwise
    if shards:
        if len(files) != 1:
            raise BertError("--output_shards: give one --output_file (the shard name prefix)")
        prefix = files[0]
        paths = [f"{prefix}-{s:05d}-of-{shards:05d}" for s in range(shards)]
    else:
        paths = files
    if len(set(paths)) != len(paths):
        raise BertError("--output_file: the same file is named twice")
    return paths, stats


def _resolve_vocab(opts, input_files, prefix):
    """Path of the vocab to use (learning one if asked) and whether this run created it."""
    if opts.vocab_file and writer_lib.exists(opts.vocab_file):
        return opts.vocab_file, False
    if not opts.learn_vocab_size:
        if opts.vocab_file:
            raise BertError(f"--vocab_file: {opts.vocab_file} not found "
                            "(pass --learn_vocab_size=N to learn a vocab there from the input)")
        raise BertError("--vocab_file: required (or --learn_vocab_size=N to learn one from the input)")
    if not input_files:
        raise BertError("--learn_vocab_size: learning a vocab needs --input_file text files")
    path = opts.vocab_file or guard.sidecar_path(prefix, "vocab.txt")
    try:
        from bert_tf.tokenization.vocab_builder import learn_vocab
    except ImportError:
        raise BertError("--learn_vocab_size: bert_tf.tokenization.vocab_builder is not available") from None
    print(f"learning a {opts.learn_vocab_size}-token vocab from {len(input_files)} file(s) "
          f"into {path}", file=sys.stderr)
    tokens = learn_vocab(input_files, path, vocab_size=opts.learn_vocab_size,
                         do_lower_case=opts.do_lower_case)
    legacy = guard.legacy_sidecar_path(prefix, "vocab.txt")
    if opts.resume and not opts.vocab_file and writer_lib.exists(legacy):
        # An older version's learned vocab beside the data (it breaks '<output_file>*' globs).
        if writer_lib.read_text(legacy) == "".join(t + "\n" for t in tokens):
            writer_lib.remove_quietly(legacy)
    return path, True


def _check_bert_config(opts, vocab_size):
    if not opts.bert_config_file:
        return
    # Only the two fields every config dialect (bert_config.json, a Hugging Face config.json)
    # spells and means alike are read here: the data layer needs no model config class.
    config = fileio.read_json(opts.bert_config_file, "bert_config file not found")
    missing = [k for k in ("max_position_embeddings", "vocab_size")
               if not isinstance(config, dict) or not isinstance(config.get(k), int)]
    if missing:
        raise BertError(f"--bert_config_file={opts.bert_config_file}: no {missing[0]} (not a "
                        f"BERT config)")
    if opts.max_seq_length > config["max_position_embeddings"]:
        raise BertError(f"--max_seq_length: {opts.max_seq_length} is larger than "
                        f"max_position_embeddings {config['max_position_embeddings']} "
                        f"of {opts.bert_config_file}")
    from bert_tf.tokenization.vocab_check import check_vocab_count
    check_vocab_count(vocab_size, config["vocab_size"], opts.vocab_file or "--vocab_file",
                      opts.bert_config_file)


def run(opts):
    """Create the pre-training TFRecords; returns the stats dict (also written as JSON).

    Local inputs and outputs need no TensorFlow import (gs:// paths and --tfds_dataset do).
    """
    start = time.time()
    validate(opts)
    paths, stats_path = output_paths(opts)
    input_files = docs_lib.expand_input_patterns(opts.input_file) if opts.input_file else []
    if input_files:
        if sum(docs_lib.file_size(p) for p in input_files) == 0:
            if len(input_files) == 1:
                raise BertError(f"--input_file {input_files[0]}: the file is empty")
            raise BertError(f"--input_file: all {len(input_files)} input files are empty: "
                            f"{describe_files(input_files)}")
    prefix = output_prefix(opts)
    lock_path = guard.sidecar_path(prefix, "lock")
    writer_lib.check_writable(paths + [stats_path, lock_path])
    # SIGTERM/SIGINT: a clean stop (guard.Interrupted, exit 75 in the command); the lock keeps
    # a second run, or a --resume racing a stopping one, off these files.
    with guard.stop_on_signals() as stop, guard.OutputLock(lock_path, prefix):
        try:
            vocab_path, learned = _resolve_vocab(opts, input_files, prefix)
            try:
                if opts.mode == "original":
                    return _run_original(opts, input_files, paths, stats_path, vocab_path, start)
                if opts.mode == "beam":
                    return _run_beam(opts, input_files, paths, stats_path, vocab_path, start)
                return _run_streaming(opts, input_files, paths, stats_path, vocab_path, start,
                                      stop)
            except BaseException:
                if learned:
                    writer_lib.remove_quietly(vocab_path)
                raise
        except BaseException as e:
            if not (stop.signum or isinstance(e, KeyboardInterrupt)):
                raise
            if isinstance(e, guard.Interrupted) and e.message != "interrupted":
                raise  # the mode's own line (streaming counts its shards)
            line = guard.interrupted_line(opts.mode, 0, len(paths))
            raise guard.Interrupted(stop.signum, line) from None


def _report(opts, stats, paths, stats_path, start, extra):
    seconds = time.time() - start
    data = {"mode": opts.mode, "complete": True, "outputs": paths,
            "vocab_file": extra.pop("vocab_file"), "totals": stats.summary(seconds)}
    data.update(extra)
    writer_lib.write_text_atomic(stats_path, dumps(data))
    print(stats.summary_line(seconds, len(paths)), file=sys.stderr)
    return data


def _run_original(opts, input_files, paths, stats_path, vocab_path, start):
    from bert_tf.tokenization import FullTokenizer
    tokenizer = FullTokenizer(vocab_path, do_lower_case=opts.do_lower_case)
    _check_bert_config(opts, len(tokenizer.vocab))
    stats = Stats()
    extra_docs = ()
    if opts.tfds_dataset:
        extra_docs = docs_lib.iter_tfds_documents(opts.tfds_dataset, opts.tfds_split,
                                                  opts.tfds_data_dir or None, opts.tfds_text_key)
    all_documents = original_lib.read_documents(input_files, tokenizer, stats, extra_docs)
    if not all_documents:
        raise BertError(f"--input_file: no text found in {opts.input_file or opts.tfds_dataset!r}")
    rng = random.Random(opts.random_seed)
    progress = original_lib.DocProgress(len(all_documents) * opts.dupe_factor, opts.progress)
    try:
        instances = original_lib.create_training_instances(
            all_documents, tokenizer, opts.max_seq_length, opts.dupe_factor, opts.short_seq_prob,
            opts.masked_lm_prob, opts.max_predictions_per_seq, rng,
            do_whole_word_mask=opts.do_whole_word_mask,
            whole_word_mask_per_word=opts.whole_word_mask_per_word, stats=stats,
            progress=progress.update)
    finally:
        progress.close()
    files = writer_lib.RecordFiles(paths)
    try:
        original_lib.write_instances(instances, tokenizer, opts.max_seq_length,
                                     opts.max_predictions_per_seq, files)
        files.commit()
    except BaseException:
        files.abort()
        raise
    return _report(opts, stats, paths, stats_path, start,
                   {"vocab_file": vocab_path,
                    "config": _fingerprint(opts, input_files, vocab_path, len(paths)),
                    "peak_rss_mb": {"writer": round(workers_lib.peak_rss_mb(), 1), "workers": None}})


def _fingerprint(opts, input_files, vocab_path, num_shards):
    """What the outputs depend on: --resume refuses to mix shards made with different values."""
    from bert_tf.tokenization import vocab_tokens
    vocab_hash = hashlib.sha256("\n".join(vocab_tokens(vocab_path)).encode()).hexdigest()
    flags = {k: v for k, v in dataclasses.asdict(opts).items()
             if k not in ("num_workers", "resume", "progress", "stats_file", "vocab_file",
                          "learn_vocab_size", "bert_config_file", "output_file", "runner",
                          "beam_args")}
    return {"flags": flags, "num_shards": num_shards, "vocab_sha256": vocab_hash,
            "inputs": [[p, docs_lib.file_size(p)] for p in input_files]}


def _stream_config(opts, vocab_path):
    from bert_tf.tokenization import load_vocab
    vocab = load_vocab(vocab_path)
    _check_bert_config(opts, len(vocab))
    return streaming_lib.StreamConfig(
        vocab=dict(vocab), do_lower_case=opts.do_lower_case, max_seq_length=opts.max_seq_length,
        max_predictions_per_seq=opts.max_predictions_per_seq, masked_lm_prob=opts.masked_lm_prob,
        short_seq_prob=opts.short_seq_prob, dupe_factor=opts.dupe_factor,
        random_seed=opts.random_seed, do_whole_word_mask=opts.do_whole_word_mask,
        whole_word_mask_per_word=opts.whole_word_mask_per_word,
        nsp_reservoir_size=opts.nsp_reservoir_size, shuffle_buffer_size=opts.shuffle_buffer_size)


def _beam_error(exc, runner):
    """One line from what a Beam runner raised (it wraps or stringifies worker exceptions)."""
    text = str(exc)
    found = re.search(r"BertError: (.+)", text)
    if isinstance(exc, BertError) or found:
        line = (text.strip().splitlines() or [""])[0] if isinstance(exc, BertError) else found.group(1)
        return re.sub(r"\s*\[while running .*$", "", line).strip()
    first = next((l.strip() for l in text.splitlines() if l.strip()), "")
    return f"--runner={runner}: the Beam pipeline failed: {type(exc).__name__}: {first}"[:2000]


def _run_beam(opts, input_files, paths, stats_path, vocab_path, start):
    import logging
    beam_logger = logging.getLogger("apache_beam")
    quiet = beam_logger.level == logging.NOTSET  # Beam's INFO lines would bury the summary line
    if quiet:
        beam_logger.setLevel(logging.ERROR)  # import-time notes about optional GCP clients
    try:
        from bert_tf.pretraining_data import beam as beam_lib
    except ImportError as e:
        raise BertError(f"--runner: apache-beam is not installed ({e}); "
                        "pip install \"bert_tf[beam]\"") from None
    finally:
        if quiet:
            beam_logger.setLevel(logging.WARNING)
    del paths  # the plan names the shards (the same names when --output_shards is given)
    cfg = _stream_config(opts, vocab_path)
    runner = opts.runner or "DirectRunner"
    tasks = beam_lib.plan_pieces(input_files, opts.output_file.strip(" ,"), opts.output_shards)
    written = [t.output for t in tasks]
    partial = writer_lib.tmp_name(stats_path) + ".beam"
    try:
        total = beam_lib.run(cfg, tasks, partial, runner, opts.beam_args)
        if total.instances == 0:
            raise BertError(f"--input_file: no text found in {opts.input_file!r}")
    except BaseException as e:
        for p in written:  # nothing half-made is left: finished shards and workers' temp files
            writer_lib.remove_quietly(p)
            writer_lib.remove_stale_tmps(p)
        if not isinstance(e, Exception) or (isinstance(e, BertError) and "[while running" not in str(e)):
            raise
        raise BertError(_beam_error(e, runner)) from None
    finally:
        writer_lib.remove_quietly(partial)
    return _report(opts, total, written, stats_path, start,
                   {"vocab_file": vocab_path, "runner": runner, "beam_args": list(opts.beam_args),
                    "config": _fingerprint(opts, input_files, vocab_path, len(written)),
                    "peak_rss_mb": {"writer": round(workers_lib.peak_rss_mb(), 1), "workers": None}})


def _run_streaming(opts, input_files, paths, stats_path, vocab_path, start, stop):
    num_shards = len(paths)
    cfg = _stream_config(opts, vocab_path)
    if opts.tfds_dataset:
        tasks = streaming_lib.plan_tfds_shards(opts.tfds_dataset, opts.tfds_split,
                                               opts.tfds_data_dir or None, opts.tfds_text_key,
                                               num_shards)
    else:
        tasks = streaming_lib.plan_file_shards(input_files, num_shards)
    fingerprint = _fingerprint(opts, input_files, vocab_path, num_shards)

    done = {}  # shard -> stats dict
    writer_lib.remove_stale_tmps(stats_path)
    journal_existed = writer_lib.exists(stats_path)
    journal = stats_path
    legacy = guard.legacy_sidecar_path(output_prefix(opts), "stats.json")
    legacy = legacy if not opts.stats_file and writer_lib.exists(legacy) else None
    if opts.resume and not journal_existed and legacy:
        journal, journal_existed = legacy, True  # an older version's journal, beside the data
    if opts.resume and journal_existed:
        try:
            previous = json.loads(writer_lib.read_text(journal))
        except ValueError:
            raise BertError(f"--resume: {journal} is not valid JSON; delete it to start over") from None
        if previous.get("config") != fingerprint:
            raise BertError(f"--resume: {journal} was made with other flags, inputs or vocab; "
                            "use the same ones, or drop --resume to start over")
        for key, shard_stats in previous.get("shards", {}).items():
            if writer_lib.exists(paths[int(key)]):
                done[int(key)] = shard_stats
    for p in paths:
        writer_lib.remove_stale_tmps(p)
    todo = [t for t in tasks if t.index not in done]
    for t in todo:
        t.output = paths[t.index]

    total_bytes = sum(t.size for t in todo)
    progress = workers_lib.Progress(total_bytes, opts.progress)
    worker_rss = []
    journal_written = []

    def write_journal(complete):
        data = {"mode": "streaming", "complete": complete, "outputs": paths,
                "vocab_file": vocab_path, "config": fingerprint,
                "shards": {str(k): done[k] for k in sorted(done)}}
        writer_lib.write_text_atomic(stats_path, dumps(data))
        if legacy and not journal_written:  # moved out of the data's way
            writer_lib.remove_quietly(legacy)
        journal_written.append(True)
        return data

    def on_message(message):
        kind, shard = message[0], message[1]
        if kind == "progress":
            progress.update(message[3], message[2], message[4])
        elif kind == "done":
            if message[3]:
                worker_rss.append(message[3])
            done[shard] = message[2]
            write_journal(False)

    try:
        workers_lib.run_tasks(todo, cfg, opts.num_workers, on_message)
        progress.close()
        total = Stats()
        for shard_stats in done.values():
            total.merge(Stats.from_dict(shard_stats))
        if total.instances == 0:
            raise BertError(f"--input_file: no text found in {opts.input_file or opts.tfds_dataset!r}")
    except BaseException as e:
        progress.close()
        for t in todo:  # temp files of stopped workers
            writer_lib.remove_stale_tmps(t.output)
        if isinstance(e, KeyboardInterrupt) or stop.signum:
            # Finished shards stay, recorded in the journal (written as each one finished).
            line = guard.interrupted_line(opts.mode, len(done), num_shards)
            raise guard.Interrupted(stop.signum, line) from None
        for t in todo:  # errors leave nothing behind
            writer_lib.remove_quietly(t.output)
        if journal_written and not journal_existed:
            writer_lib.remove_quietly(stats_path)
        raise
    data = write_journal(True)
    return _report(opts, total, paths, stats_path, start,
                   {"vocab_file": vocab_path, "config": fingerprint, "shards": data["shards"],
                    "resumed_shards": len(tasks) - len(todo),
                    "peak_rss_mb": {"writer": round(workers_lib.peak_rss_mb(), 1),
                                    "workers": round(max(worker_rss), 1) if worker_rss else None}})
