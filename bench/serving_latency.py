"""Serving latency/throughput: end-to-end text-in SavedModel vs the ids-in encoder SavedModel.

In one process, for each config (random weights, seq 128): export the end-to-end `embeddings`
model (in-graph tokenizer) and the encoder, load both with tf.saved_model.load, and time their
serving signatures at batch 1 and 32 on real sentences (tests/data/sample_text.txt):

  text-in        e2e.signatures["serving_default"](text=...)        tokenize + pack + encode
  ids-in         enc.signatures["serving_default"](ids...)          ids precomputed (peer)
  py-tok+ids-in  Python FullTokenizer + packing, then the encoder   what a client would do

Prints p50/p99 latency (ms), CPU time per call and sequences/s per row, and text-in / ids-in
ratios (target at batch 1 and 32: <= 1.1). Rows take turns call by call (interleaved), so load
from other processes hits them alike; the CPU-time ratio is the steadier one on a busy machine.
Vocab: the sample text's words plus generated filler up to vocab_size.

  .venv/bin/python bench/serving_latency.py                    # tiny config
  .venv/bin/python bench/serving_latency.py --configs tiny,base --iters 30
"""
import argparse
import os
import re
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import bert_tf  # noqa: E402,F401
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf import export, resources, tokenization  # noqa: E402
from bert_tf.modeling.config import BertConfig  # noqa: E402
from bert_tf.modeling.encoder import BertEncoder, dummy_inputs  # noqa: E402

SEQ = 128


def sentences():
    with open(os.path.join(REPO, "tests", "data", "sample_text.txt"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    # pairs of lines: ~40-60 wordpieces, so packing and truncation are both exercised
    return [f"{a} {b}" for a, b in zip(lines, lines[1:])]


def make_vocab(path, texts, size):
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    vocab += [f"filler{i}" for i in range(size - len(vocab))]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab[:size]) + "\n")


def timed_interleaved(fns, iters):
    """{name: (wall s [iters], CPU s [iters])}: the rows take turns call by call, so load from
    other processes hits them alike; process CPU time is the steadier measure there."""
    for fn in fns.values():  # warm-up: graph optimisation happens on the first calls
        fn()
        fn()
    out = {name: ([], []) for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            out[name][0].append(time.perf_counter() - w)
            out[name][1].append(time.process_time() - c)
    return {name: (np.array(w), np.array(c)) for name, (w, c) in out.items()}


def run_config(name, cfg_path, iters, work):
    cfg = BertConfig.from_json_file(cfg_path)
    texts = sentences()
    vocab = os.path.join(work, f"{name}_vocab.txt")
    make_vocab(vocab, texts, cfg.vocab_size)
    keras.utils.set_random_seed(0)
    enc = BertEncoder.from_bert_config(cfg)
    enc(dummy_inputs(), training=False)
    t = time.perf_counter()
    e2e_dir = export.export_end_to_end(enc, vocab, True, os.path.join(work, f"{name}_e2e"),
                                       task="embeddings", seq_length=SEQ)
    enc_dir = export.export_encoder(enc, os.path.join(work, f"{name}_enc"))
    print(f"# {name}: exported both in {time.perf_counter() - t:.1f} s", flush=True)
    e2e = tf.saved_model.load(e2e_dir).signatures["serving_default"]
    ids_fn = tf.saved_model.load(enc_dir).signatures["serving_default"]
    pre = tf.saved_model.load(e2e_dir).signatures["preprocess"]
    py_tok = tokenization.FullTokenizer(vocab, do_lower_case=True)

    def py_pack(batch):
        rows = []
        for text in batch:
            ids = py_tok.convert_tokens_to_ids(py_tok.tokenize(text))[:SEQ - 2]
            rows.append([2] + ids + [3] + [0] * (SEQ - len(ids) - 2))
        ids = np.array(rows, np.int32)
        return {"input_word_ids": tf.constant(ids),
                "input_mask": tf.constant((ids > 0).astype(np.int32)),
                "input_type_ids": tf.constant(np.zeros_like(ids))}

    for batch_size in (1, 32):
        batch = [texts[i % len(texts)] for i in range(batch_size)]
        text_t = tf.constant(batch)
        ids = pre(text=text_t)
        # same inputs for both paths (checked, so the comparison is like for like)
        np.testing.assert_array_equal(py_pack(batch)["input_word_ids"].numpy(),
                                      ids["input_word_ids"].numpy())
        rows = timed_interleaved({
            "text-in": lambda: e2e(text=text_t)["pooled_output"].numpy(),
            "ids-in": lambda: ids_fn(**ids)["pooled_output"].numpy(),
            "py-tok+ids-in": lambda: ids_fn(**py_pack(batch))["pooled_output"].numpy(),
        }, iters)
        for row, (t, c) in rows.items():
            print(f"{name:5s} batch {batch_size:2d} {row:14s} p50 {1e3 * np.median(t):8.2f} ms  "
                  f"p99 {1e3 * np.percentile(t, 99):8.2f} ms  "
                  f"cpu p50 {1e3 * np.median(c):8.2f} ms  "
                  f"{batch_size / np.median(t):9.1f} seq/s", flush=True)
        wall = {row: np.median(t) for row, (t, _) in rows.items()}
        cpu = {row: np.median(c) for row, (_, c) in rows.items()}
        print(f"{name:5s} batch {batch_size:2d} ratio text-in/ids-in "
              f"{wall['text-in'] / wall['ids-in']:.2f}x"
              f" (cpu {cpu['text-in'] / cpu['ids-in']:.2f}x)  py-tok+ids-in/ids-in "
              f"{wall['py-tok+ids-in'] / wall['ids-in']:.2f}x (cpu "
              f"{cpu['py-tok+ids-in'] / cpu['ids-in']:.2f}x)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="tiny",
                        help="comma-separated shipped configs: tiny (bert_tiny.json), base, "
                             "mini, ...")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    print(f"# TF {tf.__version__}, devices {[d.name for d in tf.config.list_logical_devices()]}, "
          f"seq {SEQ}, {args.iters} timed calls per row", flush=True)
    with tempfile.TemporaryDirectory() as work:
        for name in args.configs.split(","):
            try:
                path = resources.config_file(f"bert_{name}")
            except bert_tf.BertError as e:
                sys.exit(f"error: --configs: {e}")
            run_config(name, path, args.iters, work)


if __name__ == "__main__":
    main()
