"""Benchmark the pre-training step: bert_tf against keras-hub and Model Garden, same data.

For each config (configs/bert_<name>.json) at seq 128, 20 predictions, on one device (CPU unless
a GPU is visible), on the same synthetic TFRecords and global batch, each implementation runs
`--iterations` steps per call (parameter counts are printed so that equal work is visible):

  bert_tf       run_pretraining.py's loop (tf.function running --iterations_per_loop steps,
                masked-LM + NSP loss, the original's AdamWeightDecay, global-norm clipping 1.0)
                in the environment bert_tf's commands set (bert_tf/tf_env.py: TF's BFC CPU
                allocator, oneDNN's kernels on; this process's, so keras_hub and keras_fit
                share it)
  keras_hub     BertBackbone + MaskedLMHead tied to the token embedding + Dense(2) NSP on the
                pooled output, keras AdamW (global_clipnorm 1.0), fit(steps_per_execution)
  model_garden  BertPretrainerV2(BertEncoder) with MaskedLMTask's train_step (losses, metrics)
                and AdamWeightDecay, an Orbit while-loop of N steps in one tf.function
                (tf_keras, in a child process; see bench/peers_train.py), as its users run it:
                TF's default CPU allocator (malloc), oneDNN as TF chooses for the CPU (on
                Linux x86: on only with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX)
  model_garden_bfc
                the same child with bert_tf's allocator (BFC) alone
  model_garden_env
                the same child in this process's environment (bert_tf's commands': BFC and
                oneDNN on, bert_tf/tf_env.py): the bert_tf / model_garden_env ratio is the
                code's alone; model_garden_env / model_garden is what that environment gives a
                peer (each child reports the allocator and oneDNN setting it got)
  keras_fit     (--peers ...,keras_fit) our BertPretrainer under plain keras compile/fit
                (its full call: every position of the last block, as all_positions)
  fp32          (--peers fp32, with --mixed_precision bfloat16|float16|auto) the bert_tf row
                again at float32: its ratio is the mixed-precision speed-up, in one run
  bert_tf_xla, model_garden_xla
                (--peers ...) the bert_tf and model_garden rows XLA-compiled whatever --jit
                says: without --jit, one run gives each implementation's step with and
                without XLA (bert_tf: --jit_compile)
  all_positions (--peers all_positions) the bert_tf row with its last transformer block run at
                every position (the model's plain call) instead of only where the heads read:
                its ratio is what `BertPretrainer.pretraining_logits` saves, in one run

--jit compiles every implementation with XLA (bert_tf: --jit_compile). Tracing/compilation is
excluded (one warm-up call first); timed rounds alternate between the implementations and the
best round of each counts, so load changes on a shared machine hit all alike. Rows report
steps/s, examples/s, bert_tf / impl (speed ratio: > 1 means bert_tf is faster), and the CPU time
per step of the whole process (all threads) with its ratio impl / bert_tf (> 1: bert_tf does
less work), which other jobs on the same cores disturb far less than wall time.

  .venv/bin/python bench/train_step.py                      # tiny and mini, batch 32
  .venv/bin/python bench/train_step.py --configs base --batch 8 --steps 10 --rounds 2
  .venv/bin/python bench/train_step.py --jit
  .venv/bin/python bench/train_step.py --configs base --batch 8 --mixed_precision bfloat16 \
      --peers fp32                                          # bf16 / fp32 steps/s
"""
import argparse
import functools
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bert_tf  # noqa: E402,F401  (sets KERAS_BACKEND)
from bert_tf import tf_env  # noqa: E402

tf_env.apply(commands=True)  # bert_tf as its commands run (BFC allocator, oneDNN), before TF
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf import resources  # noqa: E402
from bert_tf.modeling.config import BertConfig  # noqa: E402
from bert_tf.training.distribute import get_strategy, set_mixed_precision  # noqa: E402
from bert_tf.pretraining.input_pipeline import pretraining_dataset  # noqa: E402
from bert_tf.modeling.models import BertPretrainer, build_model  # noqa: E402
from bert_tf.pretraining import pretraining  # noqa: E402
from bert_tf.training.task import Task  # noqa: E402
from peers_train import KerasHubFit, ModelGarden, allocators_line, clock, since  # noqa: E402

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


class BertTf:
    """run_pretraining's loop on one device; `run(calls)` -> (wall, CPU) seconds of calls loops."""

    def __init__(self, cfg, files, out, args, all_positions=False):
        kw = dict(max_seq_length=SEQ, max_predictions_per_seq=PRED, train_batch_size=args.batch,
                  learning_rate=1e-4, num_train_steps=10**6, num_warmup_steps=100,
                  iterations_per_loop=args.iterations, save_checkpoints_steps=10**6, seed=1,
                  jit_compile=args.jit, mixed_precision=args.mixed_precision)
        options = pretraining.PretrainingOptions(output_dir=out, progress=False, **kw)
        self.runner = pretraining.make_trainer(cfg, options, get_strategy("one_device"))
        if all_positions:  # the Task default: model(inputs), every position of every block
            self.runner.task.forward = functools.partial(Task.forward, self.runner.task)
        dataset = self.runner.distribute(self.runner.task.dataset_fn(files, True), True)
        self.iterator = iter(dataset)
        self.iterations = args.iterations
        self.params = self.runner.model.count_params()
        self.run(1)  # trace + warm up

    def run(self, calls):
        start = clock()
        for _ in range(calls):
            loss = float(self.runner.train_loop(self.iterator, self.iterations)["loss"])
        assert np.isfinite(loss)
        return since(start)


class _Clock(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.times.append(clock())


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
        self.params = self.model.count_params()
        self.run(1)  # trace + warm up

    def run(self, calls):
        clock = _Clock()
        clock.times = []
        hist = self.model.fit(self.ds, epochs=1, steps_per_epoch=(calls + 1) * self.iterations,
                              verbose=0, callbacks=[clock])
        assert np.isfinite(hist.history["loss"][-1])
        return (clock.times[-1][0] - clock.times[0][0], clock.times[-1][1] - clock.times[0][1])


def bert_tf_impl(cfg, files, out, args, all_positions=False):
    """The bert_tf row: the one place to switch when the trainer changes."""
    return BertTf(cfg, files, out, args, all_positions)


PEERS = ("keras_hub", "model_garden", "model_garden_bfc", "model_garden_env", "keras_fit", "fp32",
         "all_positions", "bert_tf_xla", "model_garden_xla")
MODEL_GARDEN_ENV = {"model_garden_bfc": "bfc", "model_garden_env": "bert_tf"}  # else "shipped"


def make_impl(key, name, cfg, files, tmp, args):
    config_file = resources.config_file(f"bert_{name}")
    if key == "bert_tf":
        return bert_tf_impl(cfg, files, os.path.join(tmp, f"out-{name}"), args)
    if key == "keras_hub":
        return KerasHubFit(cfg, files, args.batch, args.iterations, jit=args.jit)
    if key.startswith("model_garden"):
        return ModelGarden(config_file, files, args.batch, args.iterations,
                           jit=args.jit or key == "model_garden_xla",
                           env=MODEL_GARDEN_ENV.get(key, "shipped"))
    if key == "bert_tf_xla":
        return bert_tf_impl(cfg, files, os.path.join(tmp, f"out-{name}-xla"),
                            argparse.Namespace(**{**vars(args), "jit": True}))
    if key == "all_positions":
        return bert_tf_impl(cfg, files, os.path.join(tmp, f"out-{name}-all"), args, True)
    if key == "fp32":  # the trainer sets the global policy: put the run's back for the others
        impl = bert_tf_impl(cfg, files, os.path.join(tmp, f"out-{name}-fp32"),
                            argparse.Namespace(**{**vars(args), "mixed_precision": "none"}))
        set_mixed_precision(args.mixed_precision)
        return impl
    return KerasFit(cfg, files, args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="tiny,mini")
    ap.add_argument("--peers", default="keras_hub,model_garden,model_garden_env",
                    help=f"comma-separated, from {','.join(PEERS)}")
    ap.add_argument("--batch", type=int, default=32, help="global batch")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--iterations", type=int, default=10, help="steps per loop call")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timed rounds per row")
    ap.add_argument("--mixed_precision", default="none",
                    help="none | float16 | bfloat16 | auto (every row but model_garden)")
    ap.add_argument("--jit", action="store_true", help="XLA for every implementation")
    args = ap.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        ap.error(f"--peers: unknown {', '.join(sorted(unknown))}; expected {', '.join(PEERS)}")
    if args.mixed_precision != "none" and {p for p in peers if p.startswith("model_garden")}:
        ap.error("--mixed_precision: the Model Garden row runs in float32 only; "
                 "pass --peers keras_hub,keras_fit")
    if args.jit and {"bert_tf_xla", "model_garden_xla"} & set(peers):
        ap.error("--peers bert_tf_xla/model_garden_xla: XLA whatever --jit says; with --jit "
                 "they repeat bert_tf and model_garden, leave out --jit")
    if "fp32" in peers and args.mixed_precision == "none":
        ap.error("--peers fp32: compares against --mixed_precision bfloat16|float16|auto")
    policy = set_mixed_precision(args.mixed_precision)
    device = "GPU" if tf.config.list_logical_devices("GPU") else f"CPU ({os.cpu_count()} cores)"
    print(f"# {device}, seq {SEQ}, {PRED} predictions, global batch {args.batch}, "
          f"{args.iterations} steps per call, {args.steps} timed steps x {args.rounds} rounds, "
          f"precision {args.mixed_precision} ({policy}), jit {args.jit}, TF {tf.__version__}, "
          f"Keras {keras.__version__}")
    print("# " + " ".join([os.path.basename(sys.executable)] + sys.argv))
    print("# " + allocators_line() + "; keras_hub and keras_fit share this process's")
    print(f"{'config':7} {'impl':16} {'params':>11} {'steps/s':>8} {'examples/s':>11} "
          f"{'bert_tf/impl':>13} {'cpu_ms/st':>9} {'cpu ratio':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs.split(","):
            cfg = BertConfig.from_json_file(resources.config_file(f"bert_{name}"))
            files = os.path.join(tmp, f"{name}-*.tfrecord")
            for i in range(2):
                write_records(os.path.join(tmp, f"{name}-{i}.tfrecord"), 4 * args.batch,
                              cfg.vocab_size, seed=i)
            impls = {key: make_impl(key, name, cfg, files, tmp, args)
                     for key in ["bert_tf"] + peers}
            calls = max(1, args.steps // args.iterations)
            steps = calls * args.iterations
            wall = {k: float("inf") for k in impls}
            cpu = dict(wall)
            try:
                for _ in range(args.rounds):
                    for key, impl in impls.items():
                        w, c = impl.run(calls)
                        wall[key], cpu[key] = min(wall[key], w), min(cpu[key], c)
            finally:
                for impl in impls.values():
                    if hasattr(impl, "close"):
                        impl.close()
            for key, impl in impls.items():
                sps = steps / wall[key]
                print(f"{name:7} {key:16} {impl.params:11,d} {sps:8.2f} {sps * args.batch:11.1f} "
                      f"{wall[key] / wall['bert_tf']:13.2f} {1000 * cpu[key] / steps:9.0f} "
                      f"{cpu[key] / cpu['bert_tf']:10.2f}", flush=True)
            gains = [(k, wall[k] / wall[k + "_xla"]) for k in ("bert_tf", "model_garden")
                     if k + "_xla" in wall]
            if gains:  # each implementation's own XLA speed-up, same run
                print(f"{name:7} XLA speed-up: " + ", ".join(f"{k} {g:.2f}x" for k, g in gains),
                      flush=True)
            del impls


if __name__ == "__main__":
    main()
