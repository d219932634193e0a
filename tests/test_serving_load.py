"""End-to-end exports under concurrent load: 8 threads x 200 mixed requests in one process.

Every output must equal the sequential result for the same request (the vocab hash table, the
tokenizer ops and the model variables are shared by all threads), and the process's resident
memory must stay flat after warm-up. The exports come from test_export's `Exports` (tiny model,
seq 16, traced once per module).
"""
import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from test_export import Exports

THREADS, REQUESTS = 8, 200
LONG = ("The quick brown fox jumps over the lazy dog. Café 北京 😀 " * 200)[:10_000]
SHORT = ["The quick brown fox jumps over the lazy dog.", "", "北京 and 東京 😀 naïve RUNNING!",
         "😀😀😀", "   \t\n ", "[MASK] is a [MASK] city!", "a", "unwanted cat"]


def rss_bytes():
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def mixed_requests(signatures):
    """(signature name, inputs) pairs: empty strings, 10k characters, CJK, emoji, batch 1 and 64."""
    batch64 = [SHORT[i % len(SHORT)] + (" 北" * (i % 5)) for i in range(64)]
    batch64[7], batch64[40] = LONG, ""
    out = [("serving_default", {"text": [t]}) for t in SHORT + [LONG]]
    out += [("serving_default", {"text": batch64}),
            ("serving_default", {"text": [LONG] * 3 + [""] * 3})]
    if "serving_pairs" in signatures:
        out += [("serving_pairs", {"text": ["Who jumps?"], "text_b": [LONG]}),
                ("serving_pairs", {"text": batch64, "text_b": batch64[::-1]}),
                ("serving_pairs", {"text": [""], "text_b": ["😀"]})]
    return out


def _numpy(outputs):
    return {k: v.numpy() for k, v in outputs.items()}


def _equal(got, want):
    return got.keys() == want.keys() and all(
        got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        and np.array_equal(got[k], want[k]) for k in want)


def drive(export_dir, threads=THREADS, requests=REQUESTS):
    """Load `export_dir`, run the mixed requests sequentially, then from `threads` threads.

    Returns a dict of measurements; raises AssertionError on the first differing output.
    """
    model = tf.saved_model.load(export_dir)
    sigs = {name: model.signatures[name] for name in model.signatures}
    reqs = [(name, {k: tf.constant(v) for k, v in inputs.items()})
            for name, inputs in mixed_requests(sigs)]
    want = [_numpy(sigs[name](**inputs)) for name, inputs in reqs]  # sequential reference
    errors, lock = [], threading.Lock()

    def worker(t, n, check=True):
        for i in range(n):
            j = (t * 7 + i * 3) % len(reqs)  # every thread sees every request, in its own order
            name, inputs = reqs[j]
            got = _numpy(sigs[name](**inputs))
            if check and not _equal(got, want[j]):
                with lock:
                    errors.append((t, i, j, name))
                return

    def run(n):
        pool = [threading.Thread(target=worker, args=(t, n)) for t in range(threads)]
        start = time.perf_counter()
        for p in pool:
            p.start()
        for p in pool:
            p.join()
        return time.perf_counter() - start

    run(max(2, requests // 8))  # warm-up: first concurrent calls, thread-local allocator caches
    rss = [rss_bytes()]
    half = requests // 2
    seconds = run(half)
    rss.append(rss_bytes())
    seconds += run(requests - half)
    rss.append(rss_bytes())
    assert not errors, ("outputs differ from the sequential ones (thread, i, request, "
                        f"signature): {errors[:5]}")
    return {"requests": threads * requests, "seconds": seconds,
            "rss_mb": [round(r / 2**20, 1) for r in rss], "distinct": len(reqs)}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    return Exports(str(tmp_path_factory.mktemp("load_exports")))


def _check(exports, name, report):
    m = drive(exports[name])
    report(f"{name}: {m['requests']} requests ({m['distinct']} distinct) from {THREADS} threads "
           f"in {m['seconds']:.1f}s, RSS after warm-up/half/end {m['rss_mb']} MB")
    first, mid, end = m["rss_mb"]
    # Flat: a leak of even 10 KB per request would add ~16 MB over the 1,600 requests.
    assert end - first < 48 and end - mid < 24, m["rss_mb"]


@pytest.fixture
def report(capsys):
    def out(line):
        with capsys.disabled():
            print("\n" + line)
    return out


@pytest.mark.parametrize("name", ["classification",
                                  pytest.param("fill_mask", marks=pytest.mark.slow)])  # ~25 s
def test_end_to_end_exports_under_concurrent_load(exports, name, report):
    _check(exports, name, report)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["span", "tagging", "regression", "embeddings"])
def test_other_end_to_end_exports_under_concurrent_load(exports, name, report):
    _check(exports, name, report)
