"""bf16 vs fp32 loss curves: bert-tiny pre-training on the shipped sample corpus, paired seeds.

The demo's data (a WordPiece vocab learned from `bert_tf.resources.sample_corpus()`, seq 32,
16 predictions, static masks at 50%) and model (bert_tiny.json, dropout 0). For each seed, one
run with --mixed_precision=none and one with bfloat16: the same initial weights and data order
(weights are float32 under both policies), so the runs differ only in the compute precision.
Reports per seed the training loss of the last loop (the last tenth of the steps) and the
eval loss / masked-LM accuracy on the first `--eval_steps` batches, then the mean and sample
standard deviation of each precision and of the paired difference bf16 - fp32; then the curve:
for each loop, its mean training loss per precision (mean ± sd over seeds, and fp32's range),
whether bf16's mean lies inside fp32's range, and the paired difference with its 95% t
interval (`--json` keeps every seed's curve). The eval reads the training records (no
held-out set).

  .venv/bin/python bench/bf16_loss.py                     # 3 seeds x 300 steps of 16
  .venv/bin/python bench/bf16_loss.py --seeds 1,2,3,4,5 --steps 1000
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import bert_tf  # noqa: E402,F401  (sets KERAS_BACKEND)
from bert_tf import resources  # noqa: E402
from bert_tf.pretraining import pretraining  # noqa: E402
from ttq_report import t975  # noqa: E402  (bench/: this script's folder)

SEQ, PRED = 32, 16


def make_data(tmp, vocab_size=2000, dupe_factor=10):
    """The demo's vocab, config and records of the sample corpus; (config, records glob)."""
    from bert_tf.demo import write_demo_config
    corpus, vocab = resources.sample_corpus(), os.path.join(tmp, "vocab.txt")
    subprocess.run([sys.executable, "-m", "bert_tf.tokenization.vocab_builder",
                    f"--input_file={corpus}", f"--output_file={vocab}",
                    f"--vocab_size={vocab_size}"], check=True, capture_output=True)
    shards = ",".join(os.path.join(tmp, f"train-{i}.tfrecord") for i in range(2))
    subprocess.run([sys.executable, "-m", "bert_tf.commands.create_pretraining_data",
                    f"--input_file={corpus}", f"--output_file={shards}",
                    f"--vocab_file={vocab}", f"--max_seq_length={SEQ}",
                    f"--max_predictions_per_seq={PRED}", "--masked_lm_prob=0.5",
                    f"--dupe_factor={dupe_factor}", "--random_seed=12345"],
                   check=True, capture_output=True)
    config = write_demo_config(resources.config_file("bert_tiny"), vocab,
                               os.path.join(tmp, "bert_config.json"))
    return config, os.path.join(tmp, "train-*.tfrecord")


def run(config, pattern, out, seed, precision, args):
    """One run: ([(step, mean training loss of the loop ending there)], eval results, CPU
    seconds)."""
    o = pretraining.PretrainingOptions(
        output_dir=out, input_file=pattern, max_seq_length=SEQ, max_predictions_per_seq=PRED,
        train_batch_size=args.batch, eval_batch_size=32, learning_rate=args.learning_rate,
        num_train_steps=args.steps, num_warmup_steps=max(1, args.steps // 10),
        save_checkpoints_steps=10 ** 9, iterations_per_loop=max(1, args.steps // 10), seed=seed,
        progress=False, strategy="one_device", mixed_precision=precision)
    cpu = time.process_time()
    trainer = pretraining.make_trainer(config, o, packed=False)
    trainer.restore()
    history = trainer.train(trainer.task.dataset_fn(pattern, True))
    ev = trainer.evaluate(trainer.task.dataset_fn(pattern, False), args.eval_steps)
    return [(h["step"], h["loss"]) for h in history], ev, time.process_time() - cpu


def _stats(values):
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{statistics.mean(values):.4f} ± {sd:.4f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--learning_rate", type=float, default=1e-3)
    ap.add_argument("--eval_steps", type=int, default=10)
    ap.add_argument("--json", help="also write every seed's curve here")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = {"none": [], "bfloat16": []}
    curves = {"none": [], "bfloat16": []}  # per seed: each loop's training loss
    with tempfile.TemporaryDirectory() as tmp:
        config, pattern = make_data(tmp)
        print(f"# bert-tiny (vocab {config.vocab_size}), seq {SEQ}, {args.steps} steps of "
              f"{args.batch}, lr {args.learning_rate}, eval {args.eval_steps} batches of 32, "
              f"seeds {seeds}; {os.cpu_count()} cores")
        print(f"{'seed':>4} {'precision':9} {'train_loss':>10} {'eval_loss':>9} "
              f"{'eval_mlm_acc':>12} {'cpu_s':>6}")
        for seed in seeds:
            for precision in rows:
                losses, ev, cpu = run(config, pattern, os.path.join(tmp, f"{precision}-{seed}"),
                                      seed, precision, args)
                loss = losses[-1][1]
                rows[precision].append((loss, ev["loss"], ev["masked_lm_accuracy"], cpu))
                curves[precision].append(losses)
                print(f"{seed:4d} {precision:9} {loss:10.4f} {ev['loss']:9.4f} "
                      f"{ev['masked_lm_accuracy']:12.4f} {cpu:6.1f}", flush=True)
    for i, name in enumerate(("train_loss", "eval_loss", "eval_mlm_acc")):
        fp32 = [r[i] for r in rows["none"]]
        bf16 = [r[i] for r in rows["bfloat16"]]
        print(f"{name:12} fp32 {_stats(fp32)}  bf16 {_stats(bf16)}  bf16-fp32 "
              f"{_stats([b - a for a, b in zip(fp32, bf16)])}  (mean ± sd, n={len(seeds)})")
    print("the curve: mean training loss of the loop ending at each step, mean ± sd over seeds;"
          " fp32's range over seeds; paired bf16-fp32 with its 95% t interval")
    for a, b in zip(zip(*curves["none"]), zip(*curves["bfloat16"])):
        step = a[0][0]
        assert all(x[0] == step for x in a + b)  # the same loops in every run
        a, b = [x[1] for x in a], [x[1] for x in b]
        d = [y - x for x, y in zip(a, b)]
        half = t975(len(d) - 1) * statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 \
            else float("nan")
        mean_b = statistics.mean(b)
        print(f"  step {step:6d}: fp32 {_stats(a)} [{min(a):.4f}, {max(a):.4f}]  bf16 "
              f"{_stats(b)} ({'inside' if min(a) <= mean_b <= max(a) else 'OUTSIDE'} fp32's "
              f"range)  bf16-fp32 {_stats(d)} [{statistics.mean(d) - half:+.4f}, "
              f"{statistics.mean(d) + half:+.4f}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "seeds": seeds, "curves": curves, "rows": rows}, f)
    cpu = [statistics.mean(r[3] for r in rows[p]) for p in rows]
    print(f"cpu_s per run: fp32 {cpu[0]:.1f}, bf16 {cpu[1]:.1f} (bf16/fp32 {cpu[1] / cpu[0]:.2f})")


if __name__ == "__main__":
    main()
