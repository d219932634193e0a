"""Packed vs unpacked pre-training (issue 33), measured in one process on one short-document
corpus.

Corpus: the shipped bert_tf/resources/sample_corpus.txt (230 real English sentences) cut into
short documents of 1-10 sentences drawn at random (uniform; ~95 tokens a document on average,
about a food review's length), `--docs` of them, no download. `bert-create-pretraining-data`
(original mode, masked_lm_prob 0.15, dupe_factor 1, 20 predictions at 128 and 80 at 512) makes
the ordinary records; `bert-pack-pretraining-data` packs them (3 sequences a pack at 128,
`--pack512` (default 6) at 512). The vocabulary is the corpus's words and word pieces; in the
throughput rows the models have BERT's 30,522 rows anyway, so that the masked-LM head costs what
it costs with BERT's vocabulary.

Reported:
  * padding share of all tokens at seq 128 and 512, before and after packing;
  * sequences/s of the training step (run_pretraining's loop, one device, float32, the same
    rows per batch packed or not; real sequences per second, as the step lines report), for
    bert-mini (L=4, H=256) and bert-base (L=12, H=768), best of `--rounds` alternating rounds;
  * time to quality at seq 128, set up as the demo (bert-demo) so that a CPU run learns in
    minutes: bert_tiny (L=2, H=128) with dropout 0, a WordPiece vocab learned from the sample
    corpus (vocab_builder, 2,000 asked), static masks (dupe_factor 5) at the demo's
    masked_lm_prob 0.5, Adam-W at 1e-3 (BERT's 0.15 masking or 30,522 rows stay at the
    unigram level for hundreds of steps on 2 cores). Documents of 1-7 sentences (the learned
    pieces make them longer) give ~39 % padding. Both runs train on the same sequences from the
    same initial weights, the same steps and learning-rate schedule, with as many sequences
    per step (18 packed rows of ~1.6 sequences, 28 unpacked rows), in alternating chunks of
    steps so both see the same machine load; masked-LM accuracy on held-out records (1,500
    documents, the same for both, evaluation off the clock) against training seconds, linear
    between evaluations. One run's order of data alone moves its final accuracy by ~0.01 (a
    re-shuffled copy of the same records, `--quality_pack 1`, ended 0.008 above the original
    order), so `--quality_seeds` replicates (each its own corpus, masks, packs, order and
    initial weights; default 3) are run and the goal is judged on their mean curves. The
    unigram baseline (always the most frequent masked token) is printed; a run that does not
    rise well above it is INVALID.
    Goal: the packed run reaches the unpacked run's final accuracy in <= 1/1.4 of the time
    the unpacked run needs for it.

  .venv/bin/python bench/packing.py                       # everything (~30 min on 2 free cores)
  .venv/bin/python bench/packing.py --models ''           # padding + time to quality (~16 min)
  .venv/bin/python bench/packing.py --quality_steps 0     # padding + throughput
"""
import argparse
import os
import random
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import bert_tf  # noqa: E402,F401  (sets KERAS_BACKEND)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf import resources  # noqa: E402
from bert_tf.modeling.config import BertConfig  # noqa: E402
from bert_tf.pretraining_data import runner as create_runner  # noqa: E402
from bert_tf.pretraining_data.options import Options as CreateOptions  # noqa: E402
from bert_tf.pretraining_data.sequence_packing_run import PackOptions, run as pack_run  # noqa: E402
from bert_tf.tokenization import vocab_builder  # noqa: E402
from bert_tf.pretraining import pretraining  # noqa: E402
from bert_tf.training.distribute import get_strategy  # noqa: E402
from curves import first_time, mean_curve  # noqa: E402

VOCAB_SIZE = 30522
PRED = {128: 20, 512: 80}  # the original README's values
MODELS = {"mini": "bert_mini", "base": "bert_base"}


def write_corpus(path, docs, seed, max_sentences=10):
    """`docs` documents of 1-`max_sentences` sentences of the sample corpus, blank line
    between them."""
    with open(resources.sample_corpus(), encoding="utf-8") as f:
        sentences = [ln.strip() for ln in f if ln.strip()]
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            n = rng.randint(1, max_sentences)
            f.write("\n".join(rng.choice(sentences) for _ in range(n)) + "\n\n")
    return sentences


def write_vocab(path, sentences):
    words = sorted({w for s in sentences for w in
                    "".join(c if c.isalnum() else f" {c} " for c in s.lower()).split()})
    chars = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    vocab += [w for w in words if w not in vocab]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")


def padding_share(path, seq):
    """(share of padding tokens, rows, real sequences) of a record file."""
    spec = {"input_mask": tf.io.FixedLenFeature([seq], tf.int64)}
    tokens = real = rows = seqs = 0
    for batch in tf.data.TFRecordDataset(path).batch(1024).map(
            lambda b: tf.io.parse_example(b, spec)):
        m = batch["input_mask"].numpy()
        rows += len(m)
        tokens += m.size
        real += int((m > 0).sum())
        seqs += int(m.max(axis=1).sum())  # packed: the highest sequence index of each row
    return 1 - real / tokens, rows, seqs


def make_data(work, seq, pack, docs, seed=1):
    corpus = os.path.join(work, f"corpus-{seed}.txt")
    if not os.path.exists(corpus):
        sentences = write_corpus(corpus, docs, seed)
        if not os.path.exists(os.path.join(work, "vocab.txt")):
            write_vocab(os.path.join(work, "vocab.txt"), sentences)
    unpacked = os.path.join(work, f"unpacked-{seq}-{seed}.tfrecord")
    create_runner.run(CreateOptions(
        input_file=corpus, output_file=unpacked, vocab_file=os.path.join(work, "vocab.txt"),
        max_seq_length=seq, max_predictions_per_seq=PRED[seq], dupe_factor=1,
        masked_lm_prob=0.15, random_seed=seed, progress=False))
    packed = os.path.join(work, f"packed-{seq}-{pack}-{seed}.tfrecord")
    pack_run(PackOptions(input_file=unpacked, output_file=packed, max_seq_length=seq,
                         max_predictions_per_seq=PRED[seq], max_sequences_per_pack=pack,
                         progress=False))
    return unpacked, packed


def config(name, vocab_size=VOCAB_SIZE):
    cfg = BertConfig.from_json_file(resources.config_file(MODELS[name])).to_dict()
    cfg.update(vocab_size=vocab_size, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    return BertConfig(**cfg)


def trainer(cfg, seq, batch, out, steps=10**6, lr=1e-4, warmup=100, preds=None, seed=1,
            packed=False):
    options = pretraining.PretrainingOptions(
        output_dir=out, max_seq_length=seq, max_predictions_per_seq=preds or PRED[seq],
        train_batch_size=batch, eval_batch_size=64, learning_rate=lr, num_train_steps=steps,
        num_warmup_steps=warmup, iterations_per_loop=1, save_checkpoints_steps=10**6, seed=seed,
        progress=False)
    return pretraining.make_trainer(cfg, options, get_strategy("one_device"), packed=packed)


def unpacked_evaluation(trainer, pattern):
    """`trainer.evaluate` of unpacked records, also for a packed run: evaluation gets a task of
    the records' kind (its eval step keeps it; the traced training loop keeps the packed one)."""
    task = pretraining.PretrainingTask(trainer.task.config, trainer.task.options, packed=False)
    data_fn = task.dataset_fn(pattern, False)

    def evaluate():
        train_task, trainer.task = trainer.task, task
        try:
            return trainer.evaluate(data_fn, 10**6)
        finally:
            trainer.task = train_task
    return evaluate


class Stepper:
    """run_pretraining's training loop over one record file; `run(steps)` -> (seconds,
    real sequences trained)."""

    def __init__(self, cfg, seq, batch, files, out, **kw):
        self.trainer = trainer(cfg, seq, batch, out, packed=pretraining.records_are_packed(files),
                               **kw)
        self.iterator = iter(self.trainer.distribute(
            self.trainer.task.dataset_fn(files, True), True))

    def run(self, steps):
        start = time.perf_counter()
        totals = self.trainer.train_loop(self.iterator, steps)
        seqs = float(totals["examples"])  # reading it waits for the steps
        assert np.isfinite(float(totals["loss"]))
        return time.perf_counter() - start, seqs


def throughput(name, seq, data, batch, steps, rounds, work):
    cfg = config(name)
    runs = {kind: Stepper(cfg, seq, batch, data[kind], os.path.join(work, f"{name}-{seq}-{kind}"))
            for kind in ("unpacked", "packed")}
    for s in runs.values():
        s.run(1)  # trace and warm up
    best = {kind: 0.0 for kind in runs}
    for _ in range(rounds):  # alternating, so load changes hit both alike
        for kind, s in runs.items():
            seconds, seqs = s.run(steps)
            best[kind] = max(best[kind], seqs / seconds)
    return best


def quality_data(work, args, seed):
    """Records of one time-to-quality replicate (see the module doc): the learned vocab and
    the held-out eval records (the same for every replicate), and this replicate's training
    records (corpus, masks and order from `seed`) and their packs."""
    qdir = os.path.join(work, "quality")
    os.makedirs(qdir, exist_ok=True)
    vocab = os.path.join(qdir, "vocab.txt")
    if not os.path.exists(vocab):
        vocab_builder.learn_vocab(resources.sample_corpus(), vocab, args.quality_vocab)
    files = {}
    # Eval: its own corpus seed (0), disjoint from the replicates' seeds 1, 2, ...
    for name, docs, corpus_seed, dupe in (("train", args.quality_docs, seed, args.quality_dupe),
                                          ("eval", args.quality_eval_docs, 0, 1)):
        files[name] = os.path.join(qdir, f"{name}-{corpus_seed}.tfrecord")
        if os.path.exists(files[name]):
            continue
        corpus = os.path.join(qdir, f"corpus-{name}-{corpus_seed}.txt")
        write_corpus(corpus, docs, 1000 + corpus_seed, args.quality_max_sentences)
        create_runner.run(CreateOptions(
            input_file=corpus, output_file=files[name], vocab_file=vocab, max_seq_length=128,
            max_predictions_per_seq=args.quality_preds, dupe_factor=dupe,
            masked_lm_prob=args.quality_mask_prob, random_seed=corpus_seed, progress=False))
    files["packed"] = os.path.join(qdir, f"train-{seed}-packed{args.quality_pack}.tfrecord")
    pack_run(PackOptions(input_file=files["train"], output_file=files["packed"],
                         max_seq_length=128, max_predictions_per_seq=args.quality_preds,
                         max_sequences_per_pack=args.quality_pack, random_seed=seed,
                         progress=False))
    return vocab, files


def masked_ids(path, preds):
    """The ids of the real masked tokens of unpacked records."""
    spec = {"masked_lm_ids": tf.io.FixedLenFeature([preds], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([preds], tf.float32)}
    out = [b["masked_lm_ids"].numpy()[b["masked_lm_weights"].numpy() > 0]
           for b in tf.data.TFRecordDataset(path).batch(4096).map(
               lambda x: tf.io.parse_example(x, spec))]
    return np.concatenate(out)


def unigram_baseline(files, preds):
    """Eval accuracy of always predicting the training records' most frequent masked token."""
    top = np.bincount(masked_ids(files["train"], preds)).argmax()
    return float((masked_ids(files["eval"], preds) == top).mean())


def time_to_quality(files, vocab, args, batch, per_row, seed):
    """Curves [(step, train seconds, masked-LM accuracy)] of both runs: the same sequences,
    steps and schedule; the packed batch holds as many sequences in fewer rows. The runs
    advance in alternating chunks of steps, so that load changes on a shared machine hit both
    alike; evaluation (same held-out records) is off the clock."""
    cfg = BertConfig.from_json_file(resources.config_file("bert_tiny")).to_dict()
    with open(vocab, encoding="utf-8") as f:
        cfg.update(vocab_size=sum(1 for _ in f), hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0)
    cfg = BertConfig(**cfg)
    rows = max(1, round(batch / per_row))  # as many sequences per step, to half a sequence
    batches = {"unpacked": max(1, round(rows * per_row)), "packed": rows}
    steps = args.quality_steps
    runs, eval_fns, seqs = {}, {}, {}
    for kind, path in (("unpacked", files["train"]), ("packed", files["packed"])):
        runs[kind] = Stepper(cfg, 128, batches[kind], path,
                             os.path.join(args.workdir, f"ttq-{seed}-{kind}"), steps=steps,
                             lr=args.quality_lr, warmup=max(1, steps // 10),
                             preds=args.quality_preds, seed=seed)
        seqs[kind] = runs[kind].run(1)[1]  # trace (its time is not counted; its step is)
        eval_fns[kind] = unpacked_evaluation(runs[kind].trainer, files["eval"])
    clock = {kind: 0.0 for kind in runs}

    def evaluate(step):
        for kind, s in runs.items():
            acc = eval_fns[kind]()["masked_lm_accuracy"]
            curves[kind].append((step, clock[kind], acc))
        print(f"  step {step}/{steps}: " + ", ".join(
            f"{k} {clock[k]:.1f} s acc {curves[k][-1][2]:.3f}" for k in runs), flush=True)

    curves = {kind: [] for kind in runs}
    evaluate(1)
    done = 1
    for i in range(1, args.evals + 1):
        point = steps * i // args.evals
        while done < point:
            n = min(args.quality_chunk, point - done)
            for kind, s in runs.items():
                seconds, trained = s.run(n)
                clock[kind] += seconds
                seqs[kind] += trained
            done += n
        evaluate(done)
    return batches, seqs, curves


def ttq_line(name, unpacked, packed):
    """One row: the unpacked final accuracy and both runs' time to it."""
    target = unpacked[-1][2]
    t_u, t_p = first_time(unpacked, target), first_time(packed, target)
    speed = "never (final %.3f)" % packed[-1][2] if t_p is None else f"{t_u / t_p:.2f}x"
    return (f"| {name} | {target:.3f} | {packed[-1][2]:.3f} | {t_u:.1f} | "
            + ("-" if t_p is None else f"{t_p:.1f}") + f" | {speed} | "
            f"{unpacked[-1][1] / packed[-1][1]:.2f}x |"), (None if t_p is None else t_u / t_p)


def report_quality(args, results, baseline, cfg_line):
    """results: {seed: (batches, seqs, curves)}; the goal is judged on the replicates' mean
    curves (one replicate's order of data alone moves its final accuracy by ~0.01)."""
    steps = args.quality_steps
    print(f"\nTime to quality at seq 128: {cfg_line}")
    print(f"unigram baseline (always the most frequent masked token): {baseline:.3f}")
    for seed, (batches, seqs, _) in results.items():
        print(f"replicate {seed}: " + "; ".join(
            f"{kind} {batches[kind]} rows/step, {seqs[kind] / steps:.1f} sequences/step"
            for kind in batches))
    means = {kind: mean_curve([r[2][kind] for r in results.values()])
             for kind in ("unpacked", "packed")}
    print(f"\nMean of {len(results)} replicates:\n\n| step | unpacked s | unpacked acc | "
          "packed s | packed acc |\n|---|---|---|---|---|")
    for (st, tu, au), (_, tp, ap) in zip(means["unpacked"], means["packed"]):
        print(f"| {st} | {tu:.1f} | {au:.3f} | {tp:.1f} | {ap:.3f} |")
    print(f"\n| replicate | unpacked final acc | packed final acc | unpacked s to it | "
          f"packed s to it | time to quality | all {steps} steps |\n|---|---|---|---|---|---|---|")
    for seed, (_, _, curves) in results.items():
        print(ttq_line(str(seed), curves["unpacked"], curves["packed"])[0])
    line, ratio = ttq_line("mean", means["unpacked"], means["packed"])
    print(line)
    target = means["unpacked"][-1][2]
    need = max(2 * baseline, baseline + 0.05)
    print("\ntime to quality (mean curves): packed "
          + ("never reaches" if ratio is None else f"{ratio:.2f}x faster to")
          + f" the unpacked final accuracy {target:.3f}; goal >= 1.4x: "
          + ("met" if ratio and ratio >= 1.4 else "NOT met"))
    if target < need:
        print(f"INVALID: the unpacked run's accuracy {target:.3f} is not well above the unigram "
              f"baseline {baseline:.3f} (need >= {need:.3f}): "
              "train longer (--quality_steps) or check the settings")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=4000, help="documents of the corpus")
    ap.add_argument("--models", default="mini,base")
    ap.add_argument("--pack512", type=int, default=6, help="--max_sequences_per_pack at 512")
    ap.add_argument("--batch", type=int, default=32, help="rows per step, seq 128 (base: /4)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quality_steps", type=int, default=1000, help="0: skip time to quality")
    ap.add_argument("--quality_batch", type=int, default=28, help="unpacked rows per step")
    ap.add_argument("--quality_lr", type=float, default=1e-3)
    ap.add_argument("--quality_docs", type=int, default=2000, help="training documents")
    ap.add_argument("--quality_eval_docs", type=int, default=1500, help="held-out documents")
    ap.add_argument("--quality_max_sentences", type=int, default=7,
                    help="sentences per document at most (the learned vocab's pieces make "
                    "documents longer: 7 gives ~39%% padding)")
    ap.add_argument("--quality_dupe", type=int, default=5, help="dupe_factor (static masks)")
    ap.add_argument("--quality_mask_prob", type=float, default=0.5)
    ap.add_argument("--quality_preds", type=int, default=64, help="max_predictions_per_seq")
    ap.add_argument("--quality_vocab", type=int, default=2000, help="learned vocab size")
    ap.add_argument("--quality_pack", type=int, default=3,
                    help="--max_sequences_per_pack of the time-to-quality run")
    ap.add_argument("--quality_chunk", type=int, default=25, help="steps per alternation")
    ap.add_argument("--quality_seeds", default="1,2,3",
                    help="replicates: each seed draws its own training corpus, masks, "
                    "packs, order and initial weights; the goal is judged on the mean curves")
    ap.add_argument("--evals", type=int, default=12, help="accuracy points per curve")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench-packing-")
    os.makedirs(work, exist_ok=True)
    tf.get_logger().setLevel("ERROR")
    packs = {128: 3, 512: args.pack512}
    data, shares = {}, {}
    for seq in (128, 512):
        u, p = make_data(work, seq, packs[seq], args.docs)
        data[seq] = {"unpacked": u, "packed": p}
        shares[seq] = {"unpacked": padding_share(u, seq), "packed": padding_share(p, seq)}
    print(f"\nCorpus: {args.docs} documents of 1-10 sample_corpus.txt sentences; work dir {work}")
    print("\n| seq | max_sequences_per_pack | rows unpacked | rows packed | sequences | padding "
          "before | padding after |\n|---|---|---|---|---|---|---|")
    for seq in (128, 512):
        (pu, ru, su), (pp, rp, sp) = shares[seq]["unpacked"], shares[seq]["packed"]
        assert su == sp, (su, sp)
        print(f"| {seq} | {packs[seq]} | {ru} | {rp} | {su} | {pu:.1%} | {pp:.1%} |")

    print("\n| model | seq | rows/step | unpacked sequences/s | packed sequences/s | speed-up |"
          "\n|---|---|---|---|---|---|")
    for name in filter(None, args.models.split(",")):
        for seq in (128, 512):
            batch = args.batch // (4 if seq == 512 else 1) // (4 if name == "base" else 1)
            best = throughput(name, seq, data[seq], max(batch, 1), args.steps, args.rounds,
                              work)
            print(f"| bert-{name} | {seq} | {max(batch, 1)} | {best['unpacked']:.1f} | "
                  f"{best['packed']:.1f} | {best['packed'] / best['unpacked']:.2f}x |",
                  flush=True)

    if args.quality_steps:
        results, seeds = {}, [int(x) for x in args.quality_seeds.split(",")]
        for seed in seeds:
            vocab, files = quality_data(work, args, seed)
            (pu, ru, su), (pp, rp, _) = (padding_share(files[k], 128)
                                         for k in ("train", "packed"))
            baseline = unigram_baseline(files, args.quality_preds)
            cfg_line = (f"bert_tiny (L=2, H=128), dropout 0, learned WordPiece vocab of "
                        f"{sum(1 for _ in open(vocab, encoding='utf-8'))} (asked "
                        f"{args.quality_vocab}); {args.quality_docs} training documents, "
                        f"dupe_factor {args.quality_dupe} (static masks), masked_lm_prob "
                        f"{args.quality_mask_prob}, max_predictions_per_seq "
                        f"{args.quality_preds}; replicate {seed}: {su} sequences, padding "
                        f"{pu:.1%} unpacked, {pp:.1%} packed ({rp} rows of <= "
                        f"{args.quality_pack}); Adam-W lr {args.quality_lr}, warm-up "
                        f"{max(1, args.quality_steps // 10)} steps then linear decay over "
                        f"{args.quality_steps} steps; eval on {args.quality_eval_docs} "
                        f"held-out documents; runs alternate every {args.quality_chunk} steps; "
                        f"replicates (corpus, masks, order, initial weights): {args.quality_seeds}")
            print(f"\n[time to quality, replicate {seed}] {cfg_line}", flush=True)
            results[seed] = time_to_quality(files, vocab, args, args.quality_batch, su / rp,
                                            seed)
        report_quality(args, results, baseline, cfg_line)


if __name__ == "__main__":
    main()
