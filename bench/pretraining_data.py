"""Benchmark create_pretraining_data: original mode vs streaming (1 and 2 workers) vs Beam vs Model Garden.

On one deterministic synthetic corpus (sentences of Zipf-distributed words from a generated word
list) at two sizes, each row runs `create_pretraining_data.py` as a user would, in its own
process, and reports instances/s over the whole command's wall time (start-up, imports and
worker start included) and peak RSS: VmHWM of the writing (main) process and of the largest
worker from the stats JSON (Beam rows: the largest child process, sampled every 0.1 s), and
the CPU seconds of the command and its workers (`x orig/CPU`: instances per CPU-second
against the original row's; on a shared machine this is the steadier figure, as the wall
time depends on how many cores the other load leaves).
bert_tf is byte-compiled before the rows run, as an installed package is.
Beam rows: DirectRunner in-process, and 2 worker processes with
--direct_running_mode=multi_processing, --output_shards=0 (skipped without the [beam] extra). Ratios are against
the original-mode row of the same size, measured in the same run.

  .venv/bin/python bench/pretraining_data.py            # 3.5 MB and 20 MB corpora
  .venv/bin/python bench/pretraining_data.py --quick    # 1 MB and 2 MB, dupe_factor 2
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
           "br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
_CODAS = ["", "n", "r", "s", "t", "l", "nd", "st", "ck", "ng"]


def make_words(count=20000, seed=7):
    """Deterministic pseudo-English word list (1-4 syllables), most common first."""
    rng = random.Random(seed)
    words, seen = [], set()
    while len(words) < count:
        n = rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
        w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(n))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def write_corpus(path, target_bytes, seed=11, words=None):
    """Documents of 4-40 sentences of 4-30 Zipf-distributed words, blank line between docs."""
    words = words or make_words()
    rng = random.Random(seed)
    cum, total = [], 0.0
    for rank in range(len(words)):
        total += 1.0 / (rank + 1)
        cum.append(total)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target_bytes:
            lines = []
            for _ in range(rng.randint(4, 40)):
                sent = rng.choices(words, cum_weights=cum, k=rng.randint(4, 30))
                sent[0] = sent[0].capitalize()
                if len(sent) > 8:
                    sent[len(sent) // 2] += ","
                lines.append(" ".join(sent) + rng.choice(".....?!"))
            text = "\n".join(lines) + "\n\n"
            f.write(text)
            written += len(text.encode("utf-8"))
    return written


def write_vocab(path, words, size=8000):
    """Specials, punctuation, letters and ## letters (everything tokenizes), then top words."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = SPECIAL + list(".,?!") + letters + ["##" + c for c in letters]
    vocab += words[: size - len(vocab)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")


CLI = os.path.join(REPO, "create_pretraining_data.py")


def _flags(opts):
    args = []
    for key, value in opts.items():
        if key == "beam_args":
            args += list(value)
        else:
            args.append(f"--{key}={value}")
    return args


def run_cli(opts):
    """Run the script; wall seconds, instances, peak RSS (from its stats JSON or sampled)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    import resource
    from bert_tf.pretraining_data.guard import sidecar_path
    stats_path = sidecar_path(opts["output_file"], "stats.json")
    if hasattr(os, "sync"):  # earlier rows' outputs are written back now, not during this row
        os.sync()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    proc = subprocess.Popen([sys.executable, CLI] + _flags(opts), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    child_peak = [0.0]

    def sample():  # peak RSS of the children (Beam workers), off the timing thread
        while proc.poll() is None:
            if psutil is not None:
                try:
                    for c in psutil.Process(proc.pid).children(recursive=True):
                        child_peak[0] = max(child_peak[0], c.memory_info().rss / 2**20)
                except psutil.Error:
                    pass
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()  # returns at the exit: the wall time is not rounded to a poll
    seconds = time.time() - start
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the script and its waited-for workers
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        return {"error": " | ".join(err.strip().splitlines()[-3:])}
    with open(stats_path) as f:
        data = json.load(f)
    rss = data.get("peak_rss_mb") or {}
    return {"instances": data["totals"]["instances"], "seconds": seconds, "cpu_seconds": cpu,
            "rss_self_mb": rss.get("writer") or 0,
            "rss_child_mb": rss.get("workers") or child_peak[0]}


_GARDEN = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
sys.argv = ["x", "--input_file={inp}", "--output_file={out}", "--vocab_file={vocab}",
            "--dupe_factor={dupe}", "--max_seq_length=128", "--max_predictions_per_seq=20"]
from absl import flags
from official.nlp.data import create_pretraining_data as cpd
flags.FLAGS(sys.argv)
cpd.main(None)
end = time.time()  # the bench measures from the process start (imports included)
import tensorflow as tf
n = sum(1 for _ in tf.data.TFRecordDataset("{out}"))
from bert_tf.pretraining_data.workers import peak_rss_mb
print(json.dumps({{"instances": n, "end": end, "rss_self_mb": peak_rss_mb(), "rss_child_mb": 0}}))
"""


def run_row(code):
    """A Python snippet printing {"instances", "end" (time.time()), RSS}: wall from its start."""
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r["seconds"] = r.pop("end") - start
    return r


def beam_installed():
    return subprocess.run([sys.executable, "-c", "import apache_beam"],
                          capture_output=True).returncode == 0


def garden_installed():
    code = "import official.nlp.data.create_pretraining_data"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 MB / 2 MB corpora, dupe_factor 2")
    parser.add_argument("--sizes_mb", default=None, help="comma-separated corpus sizes in MB")
    parser.add_argument("--dupe_factor", type=int, default=None)
    parser.add_argument("--skip_original", action="store_true",
                        help="skip the (slow) original-mode row at the larger size")
    parser.add_argument("--skip_garden", action="store_true",
                        help="skip the tf-models-official row (slow: TensorFlow, one core)")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    sizes = [float(s) for s in (args.sizes_mb or ("1,2" if args.quick else "3.5,20")).split(",")]
    dupe = args.dupe_factor or (2 if args.quick else 10)
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench_ptd_")
    # Byte-compile bert_tf first, as an installed package is (pip writes .pyc files): with
    # PYTHONDONTWRITEBYTECODE set, every row would otherwise compile its modules (~20 ms).
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(REPO, "bert_tf"), CLI],
                   check=False, capture_output=True)
    os.makedirs(workdir, exist_ok=True)
    words = make_words()
    vocab = os.path.join(workdir, "vocab.txt")
    write_vocab(vocab, words)
    has_garden = not args.skip_garden and garden_installed()
    has_beam = beam_installed()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"cores: {os.cpu_count()}  load average: {load:.1f}  dupe_factor: {dupe}  "
          f"max_seq_length: 128  workdir: {workdir}")
    if not has_garden and not args.skip_garden:
        print("tf-models-official (official.nlp.data.create_pretraining_data): not installed "
              "(make peers); row skipped")
    if not has_beam:
        print("apache-beam: not installed (pip install -c constraints.txt -e '.[beam]'); "
              "Beam rows skipped")
    results = {}
    # Start-up: a 10-line job, wall time of the whole command.
    tiny = os.path.join(workdir, "ten_lines.txt")
    write_corpus(tiny, 1, words=words)
    with open(tiny) as f:
        lines = f.read().splitlines()[:10]
    with open(tiny, "w") as f:
        f.write("\n".join(lines) + "\n")
    for name, extra in (("original mode", {"mode": "original"}),
                        ("streaming, 2 workers", {"mode": "streaming", "num_workers": 2})):
        r = run_cli(dict(extra, input_file=tiny, vocab_file=vocab,
                         output_file=os.path.join(workdir, "tiny.tfrecord")))
        results[f"10 lines {name}"] = r
        print(f"start-up, 10-line job, {name}: "
              + (f"error: {r['error']}" if "error" in r else f"{r['seconds']:.2f} s"))
    for size in sizes:
        corpus = os.path.join(workdir, f"corpus_{size:g}mb.txt")
        t = time.time()
        nbytes = write_corpus(corpus, int(size * 1e6), words=words)
        print(f"\ncorpus {nbytes / 1e6:.1f} MB ({time.time() - t:.1f}s to generate)")
        base = {"input_file": corpus, "vocab_file": vocab, "dupe_factor": dupe}
        rows = []
        if not (args.skip_original and size != sizes[0]):
            rows.append(("original mode", dict(base, mode="original",
                                               output_file=os.path.join(workdir, "o.tfrecord"))))
        for w in (1, 2):
            rows.append((f"streaming, {w} worker{'s' if w > 1 else ''}",
                         dict(base, mode="streaming", num_workers=w, output_shards=2,
                              output_file=os.path.join(workdir, f"s{w}.tfrecord"))))
        if has_beam:
            # --output_shards=0: one file per piece (4 at 3.5 MB, 16 at 20 MB: work for 2 procs).
            rows.append(("beam Direct, in-process", dict(
                base, mode="beam", runner="DirectRunner", output_shards=0,
                output_file=os.path.join(workdir, "b1.tfrecord"))))
            rows.append(("beam Direct, 2 procs", dict(
                base, mode="beam", runner="DirectRunner", output_shards=0,
                beam_args=["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
                output_file=os.path.join(workdir, "b2.tfrecord"))))
        print(f"{'row':<24}{'instances':>10}{'seconds':>9}{'inst/s':>10}{'x original':>11}"
              f"{'CPU s':>8}{'x orig/CPU':>11}{'RSS parent MB':>15}{'RSS worker MB':>15}")
        base_rate = base_cpu_rate = None
        for name, opts in rows:
            r = run_cli(opts)
            results[f"{size:g}MB {name}"] = r
            if "error" in r:
                print(f"{name:<24} error: {r['error']}")
                continue
            rate = r["instances"] / r["seconds"]
            cpu_rate = r["instances"] / max(r["cpu_seconds"], 1e-9)
            if name == "original mode":
                base_rate, base_cpu_rate = rate, cpu_rate
            ratio = f"{rate / base_rate:.1f}x" if base_rate else "-"
            cpu_ratio = f"{cpu_rate / base_cpu_rate:.1f}x" if base_cpu_rate else "-"
            print(f"{name:<24}{r['instances']:>10}{r['seconds']:>9.1f}{rate:>10.0f}{ratio:>11}"
                  f"{r['cpu_seconds']:>8.1f}{cpu_ratio:>11}"
                  f"{r['rss_self_mb']:>15.0f}{r['rss_child_mb']:>15.0f}")
        if has_garden:
            out = os.path.join(workdir, "garden.tfrecord")
            r = run_row(_GARDEN.format(repo=REPO, inp=corpus, out=out, vocab=vocab, dupe=dupe))
            if "error" in r:
                print(f"{'tf-models-official':<24} error: {r['error']}")
            else:
                rate = r["instances"] / r["seconds"]
                ratio = f"{rate / base_rate:.1f}x" if base_rate else "-"
                print(f"{'tf-models-official':<24}{r['instances']:>10}{r['seconds']:>9.1f}"
                      f"{rate:>10.0f}{ratio:>11}{'-':>8}{'-':>11}{r['rss_self_mb']:>15.0f}{0:>15}")
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
