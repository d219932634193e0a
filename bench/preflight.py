"""Pre-flight check cost on many pre-training shards (seq 128, 20 predictions, vocab 30522).

Prints the check's wall and CPU time (best of --repeats; on a busy machine CPU time is the
steadier one) next to a peer measured in the same run: tf.data
reading and parsing the same leading records (TFRecordDataset + parse_single_example).

  python bench/preflight.py --files 1000
  python bench/preflight.py --files 10000   # above 1,000 files an even sample of 1,000 is read
"""
import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "tests")]

import tensorflow as tf  # noqa: E402

from bert_tf.pretraining_data.schema import feature_spec  # noqa: E402
from bert_tf.pretraining.preflight import check_pretraining_files, sample_files  # noqa: E402
from conftest import write_pretraining_records  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--records", type=int, default=20, help="records per file")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    d = tempfile.mkdtemp()
    write_pretraining_records(f"{d}/src", a.records, seq_len=128, max_pred=20, vocab_size=30522)
    with open(f"{d}/src", "rb") as f:
        data = f.read()
    files = [f"{d}/shard-{i:05d}.tfrecord" for i in range(a.files)]
    for name in files:
        with open(name, "wb") as f:
            f.write(data)
    best = cpu = float("inf")
    for _ in range(a.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        info = check_pretraining_files(files, 128, 20, 30522, 2)
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    spec = feature_spec(128, 20)
    checked = sample_files(files, 1000)
    start = time.perf_counter()
    ds = tf.data.Dataset.from_tensor_slices(checked).flat_map(
        lambda f: tf.data.TFRecordDataset(f).take(4)).map(
        lambda r: tf.io.parse_single_example(r, spec))
    n = sum(1 for _ in ds)
    peer = time.perf_counter() - start
    print(f"preflight: {a.files} files ({info['files']} checked, {info['records']} records): "
          f"{best * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms CPU (best of {a.repeats}); peer tf.data reading the same {n} records: "
          f"{peer * 1e3:.0f} ms; peer/preflight {peer / best:.1f}x")


if __name__ == "__main__":
    main()
