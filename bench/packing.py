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
  * time to quality (bert-mini with the corpus's vocabulary, seq 128): both runs train on the
    same sequences, the packed one with batches of as many sequences (fewer rows), with the same
    schedule, in alternating chunks; masked-LM accuracy on held-out documents against training
    wall-clock seconds (evaluation time excluded).
    Goal: the packed run reaches the unpacked run's final accuracy in <= 1/1.4 of its time.

  .venv/bin/python bench/packing.py                       # everything (~15 min on 2 free cores)
  .venv/bin/python bench/packing.py --models mini --quality_epochs 1   # quicker
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
from bert_tf.pretraining_data.packing_run import PackOptions, run as pack_run  # noqa: E402
from bert_tf.training import pretraining  # noqa: E402
from bert_tf.training.distribute import get_strategy  # noqa: E402

VOCAB_SIZE = 30522
PRED = {128: 20, 512: 80}  # the original README's values
MODELS = {"mini": "bert_mini", "base": "bert_base"}


def write_corpus(path, docs, seed):
    """`docs` documents of 1-10 sentences of the sample corpus, blank line between them."""
    with open(resources.sample_corpus(), encoding="utf-8") as f:
        sentences = [ln.strip() for ln in f if ln.strip()]
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            f.write("\n".join(rng.choice(sentences) for _ in range(rng.randint(1, 10))) + "\n\n")
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


def corpus_vocab_size(work):
    """Entries of the corpus's vocab.txt."""
    with open(os.path.join(work, "vocab.txt"), encoding="utf-8") as f:
        return sum(1 for _ in f)


def trainer(cfg, seq, batch, out, steps=10**6, lr=1e-4, warmup=100):
    options = pretraining.PretrainingOptions(
        output_dir=out, max_seq_length=seq, max_predictions_per_seq=PRED[seq],
        train_batch_size=batch, eval_batch_size=64, learning_rate=lr, num_train_steps=steps,
        num_warmup_steps=warmup, iterations_per_loop=1, save_checkpoints_steps=10**6, seed=1,
        progress=False)
    return pretraining.make_trainer(cfg, options, get_strategy("one_device"))


class Stepper:
    """run_pretraining's training loop over one record file; `run(steps)` -> (seconds,
    real sequences trained)."""

    def __init__(self, cfg, seq, batch, files, out, **kw):
        self.trainer = trainer(cfg, seq, batch, out, **kw)
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


def time_to_quality(data, eval_file, batch, epochs, evals, work, unpacked_rows, packed_rows,
                    packed_seqs, lr):
    """Curves [(train seconds, masked-LM accuracy)] of both runs (same sequences, same
    schedule; the packed batch holds as many sequences in fewer rows). The runs advance in
    alternating chunks, so that load changes on a shared machine hit both alike. The vocabulary
    is the corpus's own (not 30,522 rows), so that a CPU run gets past the unigram stage."""
    cfg = config("mini", corpus_vocab_size(work))
    per_row = packed_seqs / packed_rows
    batches = {"unpacked": batch, "packed": max(1, round(batch / per_row))}
    steps = epochs * unpacked_rows // batch
    runs, eval_fns = {}, {}
    for kind in ("unpacked", "packed"):
        runs[kind] = Stepper(cfg, 128, batches[kind], data[kind],
                             os.path.join(work, f"ttq-{kind}"), steps=steps, lr=lr,
                             warmup=max(1, steps // 10))
        runs[kind].run(1)  # trace (its time is not counted; its step is)
        # After the trace: the traced loop keeps the packed inputs, evaluation reads unpacked.
        eval_fns[kind] = runs[kind].trainer.task.dataset_fn(eval_file, False)
    curves = {kind: [] for kind in runs}
    clock = {kind: 0.0 for kind in runs}
    done = 1
    for i in range(1, evals + 1):
        n = steps * i // evals - done
        for kind, s in runs.items():
            clock[kind] += s.run(n)[0]
            acc = s.trainer.evaluate(eval_fns[kind], 10**6)["masked_lm_accuracy"]
            curves[kind].append((clock[kind], acc))
            print(f"  {kind}: step {done + n}/{steps}, {clock[kind]:.0f} s, masked-LM accuracy "
                  f"{acc:.3f}", flush=True)
        done += n
    return {kind: (batches[kind], curves[kind]) for kind in runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=4000, help="documents of the corpus")
    ap.add_argument("--models", default="mini,base")
    ap.add_argument("--pack512", type=int, default=6, help="--max_sequences_per_pack at 512")
    ap.add_argument("--batch", type=int, default=32, help="rows per step, seq 128 (base: /4)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quality_epochs", type=int, default=3, help="0: skip time to quality")
    ap.add_argument("--quality_lr", type=float, default=2e-3)
    ap.add_argument("--evals", type=int, default=8, help="accuracy points per curve")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="bench-packing-")
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

    if args.quality_epochs:
        eval_file = make_data(work, 128, 3, max(200, args.docs // 10), seed=2)[0]
        (_, ru, _), (_, rp, sp) = shares[128]["unpacked"], shares[128]["packed"]
        curves = time_to_quality(data[128], eval_file, args.batch, args.quality_epochs,
                                 args.evals, work, ru, rp, sp, args.quality_lr)
        print(f"\nTime to quality, bert-mini, seq 128, {args.quality_epochs} epoch(s), masked-LM "
              "accuracy on held-out documents (training seconds):")
        for kind, (batch, curve) in curves.items():
            points = ", ".join(f"{t:.0f}s {a:.3f}" for t, a in curve)
            print(f"  {kind} ({batch} rows/step): {points}")
        t_u, target = curves["unpacked"][1][-1]
        if target <= curves["unpacked"][1][0][1] + 0.02:
            print("warning: the unpacked run did not learn beyond its first point: train longer "
                  "(--quality_epochs, --docs)")
        t_p = next((t for t, a in curves["packed"][1] if a >= target), None)
        if t_p is None:
            print(f"packed never reached {target:.3f} (final {curves['packed'][1][-1][1]:.3f})")
        else:
            print(f"\n| run | time to masked-LM accuracy {target:.3f} |\n|---|---|\n"
                  f"| unpacked | {t_u:.0f} s |\n| packed | {t_p:.0f} s ({t_u / t_p:.2f}x faster; "
                  f"goal >= 1.4x) |")


if __name__ == "__main__":
    main()
