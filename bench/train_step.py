"""Benchmark the pre-training step: bert_tf.training.pretraining vs a plain Keras `model.fit` peer.

For each config (configs/bert_<name>.json) at seq 128, 20 predictions, on one device (CPU unless
a GPU is visible), on the same synthetic records and global batch:

  ours       Trainer.train_loop (the run_pretraining.py loop on the one trainer: tf.function running
             --iterations_per_loop steps, masked-LM + NSP loss, AdamWeightDecay, clipping)
  keras_fit  the same BertPretrainer compiled with keras AdamW (same clipping) and sparse CE
             losses on its two outputs (masked-LM weighted by masked_lm_weights), model.fit with
             steps_per_execution = the same iterations per call
  peers      tf-models-official's BERT pretrainer or keras-hub's BertBackbone when importable
             (neither is installed by default: reported as skipped)

Tracing/compilation is excluded (one warm-up call first); rows report steps/s, examples/s and the
ratio to keras_fit measured in the same run (rounds alternate between the two; best
round counts).

  .venv/bin/python bench/train_step.py                      # tiny and mini, batch 32
  .venv/bin/python bench/train_step.py --configs tiny,mini,base --batch 16 --steps 20
  .venv/bin/python bench/train_step.py --mixed_precision float16 --jit   # on a GPU
"""
import argparse
import importlib.util
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import bert_tf  # noqa: E402,F401  (sets KERAS_BACKEND)
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf.modeling.config import BertConfig  # noqa: E402
from bert_tf.training.distribute import get_strategy, set_mixed_precision  # noqa: E402
from bert_tf.training.input_pipeline import pretraining_dataset  # noqa: E402
from bert_tf.modeling.models import BertPretrainer, build_model  # noqa: E402
from bert_tf.training.pretraining import PretrainingOptions, make_trainer  # noqa: E402

SEQ, PRED = 128, 20


def write_records(path, n, vocab_size, seed=0):
    """n random full-length instances in the pre-training schema."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as w:
        for _ in range(n):
            ids = rng.integers(5, vocab_size, SEQ)
            ids[0], ids[SEQ // 2], ids[-1] = 101 % vocab_size, 102 % vocab_size, 102 % vocab_size
            pos = np.sort(rng.choice(np.arange(1, SEQ - 1), PRED, replace=False))
            ints = {"input_ids": ids, "input_mask": np.ones(SEQ, int),
                    "segment_ids": (np.arange(SEQ) > SEQ // 2).astype(int),
                    "masked_lm_positions": pos, "masked_lm_ids": ids[pos],
                    "next_sentence_labels": [int(rng.integers(2))]}
            f = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=list(map(int, v))))
                 for k, v in ints.items()}
            f["masked_lm_weights"] = tf.train.Feature(float_list=tf.train.FloatList(
                value=[1.0] * PRED))
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


class Ours:
    """run_pretraining's loop on one device; `run(calls)` -> seconds for calls * iterations steps."""

    def __init__(self, cfg, files, out, args):
        options = PretrainingOptions(
            max_seq_length=SEQ, max_predictions_per_seq=PRED, train_batch_size=args.batch,
            learning_rate=1e-4, num_train_steps=10**6, num_warmup_steps=100,
            iterations_per_loop=args.iterations, save_checkpoints_steps=10**6, seed=1,
            jit_compile=args.jit, output_dir=out, mixed_precision=args.mixed_precision,
            progress=False)
        self.runner = make_trainer(cfg, options, get_strategy("one_device"))
        self.iterator = iter(self.runner.distribute(self.runner.task.dataset_fn(files, True),
                                                    training=True))
        self.iterations = args.iterations
        self.run(1)  # trace + warm up

    def run(self, calls):
        start = time.perf_counter()
        for _ in range(calls):
            loss = float(self.runner.train_loop(self.iterator, self.iterations)["loss"])
        elapsed = time.perf_counter() - start
        assert np.isfinite(loss)
        return elapsed


class _Clock(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())


class KerasFit:
    """The same BertPretrainer under compile/fit; `run(calls)` times calls executions of
    steps_per_execution steps, from the end of fit's first execution (fit's set-up excluded)."""

    def __init__(self, cfg, files, args):
        self.model = build_model(BertPretrainer.from_bert_config(cfg))
        self.model.compile(
            optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.01, epsilon=1e-6,
                                             global_clipnorm=1.0),
            loss={"mlm_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  "nsp_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
            steps_per_execution=args.iterations, jit_compile=args.jit)
        self.ds = pretraining_dataset(files, args.batch, SEQ, PRED, True, seed=1).map(
            lambda b: ({k: b[k] for k in ("input_word_ids", "input_mask", "input_type_ids",
                                          "masked_lm_positions")},
                       {"mlm_logits": b["masked_lm_ids"],
                        "nsp_logits": b["next_sentence_labels"]},
                       {"mlm_logits": b["masked_lm_weights"],
                        "nsp_logits": tf.ones_like(b["next_sentence_labels"], tf.float32)}))
        self.iterations = args.iterations
        self.run(1)  # trace + warm up

    def run(self, calls):
        clock = _Clock()
        clock.times = []
        hist = self.model.fit(self.ds, epochs=1, steps_per_epoch=(calls + 1) * self.iterations,
                              verbose=0, callbacks=[clock])
        assert np.isfinite(hist.history["loss"][-1])
        return clock.times[-1] - clock.times[0]


def peers_available():
    return [name for name in ("official", "keras_hub") if importlib.util.find_spec(name)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tiny,mini")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--iterations", type=int, default=10, help="steps per loop call")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timed rounds per row")
    ap.add_argument("--mixed_precision", default="none")
    ap.add_argument("--jit", action="store_true")
    args = ap.parse_args()
    set_mixed_precision(args.mixed_precision)
    device = "GPU" if tf.config.list_logical_devices("GPU") else f"CPU ({os.cpu_count()} cores)"
    print(f"# {device}, seq {SEQ}, {PRED} predictions, global batch {args.batch}, "
          f"{args.iterations} steps per call, precision {args.mixed_precision}, "
          f"jit {args.jit}, TF {tf.__version__}, Keras {keras.__version__}")
    missing = {"official", "keras_hub"} - set(peers_available())
    if missing:
        print(f"# peers not installed (skipped): {', '.join(sorted(missing))}; "
              "peer = plain keras model.fit on the same BertPretrainer")
    print(f"{'config':8} {'impl':10} {'steps/s':>9} {'examples/s':>11} {'ours/peer':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs.split(","):
            cfg = BertConfig.from_json_file(os.path.join(REPO, "configs", f"bert_{name}.json"))
            files = os.path.join(tmp, f"{name}-*.tfrecord")
            for i in range(2):
                write_records(os.path.join(tmp, f"{name}-{i}.tfrecord"), 4 * args.batch,
                              cfg.vocab_size, seed=i)
            impls = {"ours": Ours(cfg, files, os.path.join(tmp, f"out-{name}"), args),
                     "keras_fit": KerasFit(cfg, files, args)}
            # Alternate the two in rounds (the best round counts) so that load changes on a
            # shared machine hit both alike.
            calls = max(1, args.steps // args.iterations)
            best = {k: float("inf") for k in impls}
            for _ in range(args.rounds):
                for key, impl in impls.items():
                    best[key] = min(best[key], impl.run(calls))
            sps = {k: calls * args.iterations / t for k, t in best.items()}
            for impl in impls:
                print(f"{name:8} {impl:10} {sps[impl]:9.2f} {sps[impl] * args.batch:11.1f} "
                      f"{sps[impl] / sps['keras_fit']:10.2f}", flush=True)


if __name__ == "__main__":
    main()
