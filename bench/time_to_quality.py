"""Time to quality against Model Garden (issue 43 C): training seconds until masked-LM
accuracy on held-out records first reaches Model Garden's final accuracy, in one process tree.

Arms, per model (bert-tiny, bert-mini) and replicate: `mg` Model Garden's own pre-training
(BertPretrainerV2(BertEncoder), MaskedLMTask.train_step, AdamWeightDecay, an Orbit while-loop;
child process, bench/peers_train.py); bert_tf's loop on the same records `plain`, `packed`
(<= 3 a row; as many sequences per step on average in fewer rows: equal_batches),
`packed_xla` (the same with --jit_compile: the step XLA-compiled; Model Garden's trainer
compiles its step only on GPUs, official/core/base_trainer.py: `runtime.enable_xla and
num_gpus > 0`, so its CPU users never get XLA; bench/train_step.py's model_garden_xla row
measures what it would give) and `packed_bf16` (--mixed_precision=bfloat16: emulated,
slower, on a CPU without avx512_bf16/AMX); `two_phase` (bert-mini): the trainer's two
phases, packed in both, 128 for 90% of the steps and 512 (<= 6 a row) for the last 10% on one
schedule, each phase timed.
All but packed_bf16 run float32. Each side runs as its users run it: bert_tf's arms in the
environment bert_tf's commands set (TF's BFC CPU allocator, oneDNN's kernels on,
bert_tf/tf_env.py), Model Garden with TF's defaults (malloc; oneDNN as TF chooses for the CPU);
bench/train_step.py's model_garden_env row says what that environment gives Model Garden, and
bench/cpu_allocator.py what the allocator alone gives each.

Data: bench/packing.py's time-to-quality set-up (a CPU run learns in minutes): short documents
of the shipped sample corpus, a vocab learned from it, static masks (dupe_factor 5) at
masked_lm_prob 0.5, 64 predictions; held-out records of `--eval_docs` other documents, the
same for every arm and replicate. The same in every arm: config (dropout `--dropout`, default
0 as packing.py's), vocab, optimizer math (bias-corrected Adam, epsilon 1e-6, decoupled weight
decay 0.01 without LayerNorm/bias, global-norm clip 1.0: Model Garden's AdamWeightDecay =
bert_tf's --optimizer=adamw), learning rate (`--lr`, warm-up over a tenth of the steps, linear
decay to 0, bert_tf's formula in both), sequences per step (`--batch`), steps, initial weights
(the child writes its fresh ones before its first step; bert_tf's arms load them through
--init_checkpoint). Each replicate's seed draws its corpus, masks, packs, order and weights.
Model Garden's NSP head is dense(H, tanh) + dense(2) on [CLS] (its encoder's pooler computed,
unused), bert_tf's the pooler + dense(2): the child copies its head's dense into its pooler
before writing the initial weights, so both start as the same function. Unavoidable: the
data order (tf.data shuffle there, bert_tf's block shuffle here, both 1,000 records). Each
arm's first step (and phase 2's first) traces: it trains, its time is not counted; those first
calls are recorded (facts first_call_seconds; the first bert_tf arm's also holds this process's
one-time TF start-up, so it depends on --arms) and the report gives a second verdict with
each side's added to its time (XLA's compile is one-time per process: 400 steps weigh it far
more than a run of hours does).

Arms alternate in rotating chunks of `--chunk` steps (load from other jobs hits all alike);
evaluation (batches of 64, last partial one dropped) is off the clock. Per replicate: target =
Model Garden's final accuracy; time = first crossing (linear between evaluations); ratio =
Model Garden's time / the arm's. An arm that never gets there is censored (">X s", X = its
total) and counts as X in the ratio of means (then an upper bound). 95% interval of the ratio
of means: percentile bootstrap over replicates (10,000 resamples, seed 0) and
Fieller's (paired, t quantile). A Model Garden final not well above the unigram baseline is
INVALID. Replicate 1 checks that bert_tf's eval of Model Garden's final weights gives its number.
Goal (bert-mini, seq 128, packed, fp32; rows `packed` and `packed_xla`, both judged on the
training clock, each with the first-call verdict beside it): >= 2.0x faster than Model Garden,
interval above 1.5x; "cleared" needs >= 5 replicates, none censored or INVALID, eval parity
equal, and both intervals above 1.5x.

  .venv/bin/python bench/time_to_quality.py --quick      # smoke: 1 replicate, 40 steps
  .venv/bin/python bench/time_to_quality.py              # 5 replicates, mini + tiny, all arms
(the summary and its statistics: bench/ttq_report.py)
Writes bench/out/time_to_quality.json. Needs the peers (tf-models-official, tf_keras).
"""
import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import bert_tf  # noqa: E402,F401  (sets KERAS_BACKEND)
from bert_tf import tf_env  # noqa: E402

tf_env.apply(commands=True)  # bert_tf as its commands run (BFC allocator, oneDNN), before TF
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf import resources  # noqa: E402
from bert_tf.modeling.config import BertConfig  # noqa: E402
from bert_tf.pretraining_data import runner as create_runner  # noqa: E402
from bert_tf.pretraining_data.options import Options as CreateOptions  # noqa: E402
from bert_tf.pretraining_data.sequence_packing_run import PackOptions, run as pack_run  # noqa: E402
from bert_tf.training.precision import CPU_BF16_FLAGS, cpu_flags  # noqa: E402
# bert_tf's pre-training modules (the one place to update when they move).
from bert_tf.pretraining import phase_plan, phases, pretraining  # noqa: E402
from packing import (Stepper, padding_share, quality_data, unigram_baseline,  # noqa: E402
                     unpacked_evaluation)
from peers_train import ModelGarden, allocators_line  # noqa: E402
from ttq_report import ARMS, equal_batches, summarize, write_json  # noqa: E402

EVAL_BATCH = 64
START = time.time()


class OurArm(Stepper):
    """bert_tf's training loop (Stepper.run) from Model Garden's initial weights; its first
    step traces (trained, not timed: `traced` holds its sequences)."""

    def __init__(self, cfg, options, eval_file, trace=True):
        self.trainer = pretraining.make_trainer(cfg, options)
        # --jit_compile reached the trainer: XLA compiles its whole step (one device).
        want = "replica_step" if options.jit_compile else None
        if self.trainer.xla_compiles != want:
            raise RuntimeError(f"--jit_compile={options.jit_compile} did not reach the trainer: "
                               f"XLA compiles {self.trainer.xla_compiles}")
        assert self.trainer.restore() == "initialized"
        self.eval_fn = unpacked_evaluation(self.trainer, eval_file)
        if trace:  # now, under this arm's dtype policy (the trainer sets the global one)
            self.prepare(options)
            self.first_seconds, self.traced = Stepper.run(self, 1)

    def prepare(self, options):
        self.iterator = iter(self.trainer.distribute(
            self.trainer.task.dataset_fn(options.input_file, True), True))

    def accuracy(self):
        return float(self.eval_fn()["masked_lm_accuracy"])


class TwoPhaseArm(OurArm):
    """The two-phase recipe on one trainer (phase_plan, phases.enter): steps cross the
    boundary inside `run`; each phase's training seconds in `seconds`."""

    def __init__(self, cfg, options, eval_file):
        self.plan = phase_plan.phases(options)
        self.seconds = [0.0, 0.0]
        super().__init__(cfg, options, eval_file)

    def prepare(self, options, phase=0):
        self.phase = self.plan[phase]
        phases.enter(self.trainer, self.phase, self.trainer.task.phase_record)
        super().prepare(self.phase.options)

    def run(self, steps):
        seconds = seqs = 0.0
        while steps > 0:
            if self.phase.number == 1 and self.trainer.step >= self.phase.end:
                self.prepare(None, 1)
                first, traced = Stepper.run(self, 1)  # traces at 512: trained, not timed
                self.first_seconds += first  # a first call too
                seqs, steps = seqs + traced, steps - 1
                continue
            n = min(steps, self.phase.end - self.trainer.step)
            s, q = Stepper.run(self, n)
            self.seconds[self.phase.number - 1] += s
            seconds, seqs, steps = seconds + s, seqs + q, steps - n
        return seconds, seqs


class MgArm:
    """The Model Garden child as an arm: run(steps) -> (seconds, sequences), accuracy()."""

    def __init__(self, cfg_file, files, batch, seed, args, steps, init):
        extra = ["--seq", "128", "--preds", str(args.quality_preds), "--lr", str(args.lr),
                 "--train_steps", str(steps), "--warmup", str(warmup_steps(steps)),
                 "--eval_batch", str(EVAL_BATCH), "--init_out", init]
        self.child = ModelGarden(cfg_file, files["train"], batch, 1, seed=seed, extra=extra)
        self.batch, self.traced, self.eval_file = batch, float(batch), files["eval"]
        self.first_seconds = self.child.ready["first_call_seconds"]

    def run(self, steps):
        return self.child.ask(f"steps {steps}")["seconds"], float(steps * self.batch)

    def accuracy(self):
        return self.child.ask(f"eval {self.eval_file}")["masked_lm_accuracy"]


def model_config(name, vocab, args, out):
    """(BertConfig, its JSON path): the shipped bert_<name> with the learned vocab's size and
    `--dropout` everywhere."""
    cfg = BertConfig.from_json_file(resources.config_file(f"bert_{name}")).to_dict()
    with open(vocab, encoding="utf-8") as f:
        cfg.update(vocab_size=sum(1 for _ in f), hidden_dropout_prob=args.dropout,
                   attention_probs_dropout_prob=args.dropout)
    cfg, path = BertConfig(**cfg), os.path.join(out, f"bert_{name}.json")
    os.makedirs(out, exist_ok=True)
    cfg.to_json_file(path)
    return cfg, path


def data_512(work, args, seed, vocab):
    """Phase 2's records: the replicate's training corpus and the held-out corpus at 512
    (masks as at 128, 4x the predictions), packed `--pack512` a row (packed eval: the same
    sequences and masks in fewer rows); (files, predictions, sequences per training row)."""
    qdir, preds = os.path.join(work, "quality"), 4 * args.quality_preds
    out = {}
    for name, corpus_seed, dupe in (("train", seed, args.quality_dupe), ("eval", 0, 1)):
        plain = os.path.join(qdir, f"{name}512-{corpus_seed}.tfrecord")
        out[name] = plain.replace(".tfrecord", f"-packed{args.pack512}.tfrecord")
        if os.path.exists(out[name]):
            continue
        create_runner.run(CreateOptions(
            input_file=os.path.join(qdir, f"corpus-{name}-{corpus_seed}.txt"), output_file=plain,
            vocab_file=vocab, max_seq_length=512, max_predictions_per_seq=preds,
            dupe_factor=dupe, masked_lm_prob=args.quality_mask_prob, random_seed=corpus_seed,
            progress=False))
        pack_run(PackOptions(input_file=plain, output_file=out[name], max_seq_length=512,
                             max_predictions_per_seq=preds, max_sequences_per_pack=args.pack512,
                             random_seed=corpus_seed, progress=False))
    _, rows, seqs = padding_share(out["train"], 512)
    return out, preds, seqs / rows


def our_options(args, out, kind, seed, steps, batch, init, precision="none", **extra):
    """PretrainingOptions of one bert_tf arm (the shared hyperparameters: module doc);
    `extra` overrides."""
    fields = dict(
        output_dir=os.path.join(out, kind), max_seq_length=128,
        max_predictions_per_seq=args.quality_preds, train_batch_size=batch,
        eval_batch_size=EVAL_BATCH, learning_rate=args.lr, num_train_steps=steps,
        num_warmup_steps=warmup_steps(steps), optimizer="adamw", iterations_per_loop=1,
        save_checkpoints_steps=10**9, seed=seed, progress=False, strategy="one_device",
        mixed_precision=precision, init_checkpoint=init)
    return pretraining.PretrainingOptions(**{**fields, **extra})


def make_arms(name, seed, args, files, vocab, steps, out, arms):
    """Fills `arms` with the arms of one (model, replicate), Model Garden's first (its initial
    weights are the others' start); returns the facts."""
    cfg, cfg_file = model_config(name, vocab, args, out)
    _, rows, seqs = padding_share(files["packed"], 128)
    packed_rows, batch = equal_batches(args.batch, seqs / rows)
    init = os.path.join(out, "mg-init", "ckpt")
    arms["mg"] = MgArm(cfg_file, files, batch, seed, args, steps, init)  # into the caller's
    # dict as each arm starts: a failure in a later one still closes the child
    facts = {"batch": batch, "packed_rows": packed_rows, "cfg": cfg, "init": init}
    wanted = args.arms.split(",")
    for kind, path, rows_, precision, jit in (
            ("plain", files["train"], batch, "none", False),
            ("packed", files["packed"], packed_rows, "none", False),
            ("packed_xla", files["packed"], packed_rows, "none", True),
            ("packed_bf16", files["packed"], packed_rows, "bfloat16", False)):
        if kind in wanted:
            arms[kind] = OurArm(cfg, our_options(args, out, kind, seed, steps, rows_, init,
                                                 precision, input_file=path, jit_compile=jit),
                                files["eval"])
    if ("two_phase" in wanted and name in args.two_phase_models.split(",")
            and seed <= (args.two_phase_replicates or seed)):
        d512, preds512, per_row = data_512(args.workdir, args, seed, vocab)
        rows512 = max(1, round(batch / per_row))
        n1 = phase1_steps(steps)
        arm = TwoPhaseArm(cfg, our_options(
            args, out, "two_phase", seed, steps, packed_rows, init, input_file=files["packed"],
            num_train_steps=n1, phase2_input_file=d512["train"],
            phase2_max_seq_length=512, phase2_max_predictions_per_seq=preds512,
            phase2_train_batch_size=rows512, phase2_num_train_steps=steps - n1), files["eval"])
        arm.eval512, arm.n1 = d512["eval"], n1
        arms["two_phase"] = arm
        facts.update(rows512=rows512, phase1_steps=n1, sequences_per_row512=per_row)
    return facts


def code_version():
    """What the numbers depend on besides the flags: the committed trees of bench/ and bert_tf/
    (a commit elsewhere, tests or docs, keeps --resume possible) and a hash of their uncommitted
    changes (--resume refuses to mix versions)."""
    def git(*cmd):
        return subprocess.run(["git", "-C", REPO, *cmd], capture_output=True, text=True).stdout
    diff = git("diff", "HEAD", "--", "bench", "bert_tf")
    trees = git("rev-parse", "HEAD:bench", "HEAD:bert_tf").split()
    return "/".join(t[:12] for t in trees) + ("+" + hashlib.sha256(diff.encode()).hexdigest()[:12]
                                              if diff else "")


def warmup_steps(steps):
    """Every arm's warm-up: a tenth of the steps."""
    return max(1, steps // 10)


def phase1_steps(steps):
    """two_phase's steps at 128: 90%."""
    return steps - max(1, round(steps * 0.1))


def run_replicate(name, seed, args, files, vocab, steps):
    """Curves {arm: [(step, seconds, accuracy)]} and facts of one (model, replicate); the
    Model Garden child is closed and bert_tf's arms freed whatever happens."""
    out = os.path.join(args.workdir, f"{name}-{seed}")
    arms = {}
    try:
        return _run_replicate(name, seed, args, files, vocab, steps, out, arms)
    finally:
        if "mg" in arms:
            arms["mg"].child.close()
        arms.clear()  # the next replicate's arms do not share memory or graphs with these
        keras.backend.clear_session()
        gc.collect()


def _run_replicate(name, seed, args, files, vocab, steps, out, arms):
    facts = make_arms(name, seed, args, files, vocab, steps, out, arms)
    clock, chunks = dict.fromkeys(arms, 0.0), {k: [] for k in arms}
    seqs = {k: a.traced for k, a in arms.items()}
    curves = {k: [] for k in arms}
    # The same points in every replicate, two_phase or not (mean_curve pairs them up).
    points = sorted({max(2, round(steps * float(f))) for f in args.eval_at.split(",")}
                    | {phase1_steps(steps), steps})
    done, order = 1, list(arms)
    for point in points:
        while done < point:
            n = min(args.chunk, point - done)
            order = order[1:] + order[:1]  # rotated: no arm always runs after the same one
            for k in order:
                seconds, trained = arms[k].run(n)
                chunks[k].append(round(seconds, 3))
                clock[k] += seconds
                seqs[k] += trained
            done += n
        for k, arm in arms.items():
            curves[k].append((done, clock[k], arm.accuracy()))
        print(f"  [{time.time() - START:.0f} s] {name} r{seed} step {done}/{steps}: " + ", ".join(
            f"{k} {clock[k]:.0f}s {curves[k][-1][2]:.3f}" for k in arms), flush=True)
    facts.update(sequences_per_step={k: v / steps for k, v in seqs.items()},
                 chunk_seconds=chunks,
                 first_call_seconds={k: a.first_seconds for k, a in arms.items()},
                 jit_compile=[k for k, a in arms.items()
                              if getattr(a, "trainer", None) and a.trainer.options.jit_compile])
    if "two_phase" in arms:
        arm = arms["two_phase"]
        arm.trainer.new_stage(arm.trainer.options, arm.trainer.step)  # eval step: packed task
        acc512 = arm.trainer.evaluate(arm.trainer.task.dataset_fn(arm.eval512, False),
                                      10**6)["masked_lm_accuracy"]  # packed, as phase 2
        facts.update(phase_seconds=arm.seconds, acc512=float(acc512),
                     acc128_phase1=[c for c in curves["two_phase"] if c[0] == arm.n1][0][2])
    if args.parity and seed == args.seeds[0]:  # bert_tf's eval of MG's weights = MG's own?
        prefix = arms["mg"].child.ask(f"save {os.path.join(out, 'mg-final', 'ckpt')}")["path"]
        options = our_options(args, out, "parity", seed, steps, facts["batch"], prefix,
                              input_file=files["train"])
        facts["parity"] = (OurArm(facts["cfg"], options, files["eval"], trace=False).accuracy(),
                           arms["mg"].accuracy())
    facts["vocab_size"] = facts.pop("cfg").vocab_size
    return curves, facts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 replicate, 40 steps, small data")
    ap.add_argument("--models", default="mini,tiny", help="mini first: the goal's model")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--two_phase_models", default="mini")
    ap.add_argument("--replicates", type=int, default=5, help="seeds 1..N")
    ap.add_argument("--two_phase_replicates", type=int, help="the first N seeds (default: all)")
    ap.add_argument("--steps", default="tiny=800,mini=400", help="N, or model=N,...")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--eval_at", default="0.5,0.7,0.8,0.9,0.95,1",
                    help="evaluations, as fractions of the steps (two_phase adds its boundary)")
    ap.add_argument("--chunk", type=int, default=5, help="steps per alternation (short: "
                    "load bursts from other jobs hit every arm)")
    ap.add_argument("--docs", dest="quality_docs", type=int, default=2000)
    # 1,500: enough 512-token rows for batches of 64 (two_phase's eval at 512).
    ap.add_argument("--eval_docs", dest="quality_eval_docs", type=int, default=1500)
    ap.add_argument("--preds", dest="quality_preds", type=int, default=64)
    ap.add_argument("--pack512", type=int, default=6)
    # bench/packing.py's time-to-quality data (its quality_data reads these).
    ap.set_defaults(quality_max_sentences=7, quality_dupe=5, quality_mask_prob=0.5,
                    quality_vocab=2000, quality_pack=3)
    ap.add_argument("--no_parity", dest="parity", action="store_false",
                    help="skip the eval parity check (replicate 1)")
    ap.add_argument("--workdir")
    ap.add_argument("--json", default=os.path.join(REPO, "bench", "out", "time_to_quality.json"))
    ap.add_argument("--resume", action="store_true", help="keep the (model, replicate) results "
                    "already in --json from a run with the same settings; run the others")
    args = ap.parse_args()
    if args.quick:
        args.replicates, args.steps, args.eval_at = 1, "40", "0.5,1"
        args.quality_docs, args.quality_eval_docs = 300, 200
    steps = dict(kv.split("=") for kv in args.steps.split(",")) if "=" in args.steps else {}
    missing = [m for m in args.models.split(",") if steps and m not in steps]
    if missing:
        ap.error(f"--steps={args.steps} names no step count for --models {','.join(missing)}")
    args.seeds = list(range(1, args.replicates + 1))
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bench-ttq-")
    args.code = code_version()
    tf.get_logger().setLevel("ERROR")
    bf16 = [f for f in CPU_BF16_FLAGS if f in cpu_flags()]
    print(f"# {os.cpu_count()} cores, bf16 hardware: {', '.join(bf16) or 'none (emulated)'}; "
          f"TF {tf.__version__}; {allocators_line()}; "
          + " ".join([os.path.basename(sys.executable)] + sys.argv),
          flush=True)
    out, data, done = {"args": dict(vars(args)), "models": {}}, {}, {}
    if args.resume and os.path.exists(args.json):
        with open(args.json) as f:
            old = json.load(f)
        same = ("workdir", "json", "resume", "replicates", "seeds", "models")
        keys = (set(old["args"]) | set(vars(args))) - set(same)
        changed = sorted(k for k in keys if old["args"].get(k) != vars(args).get(k))
        if changed:  # "code" included: another bench or bert_tf version measures differently
            ap.error(f"--resume: {args.json} was run with other settings or code "
                     f"({', '.join(changed)})")
        done = {(name, r["seed"]): r for name, m in old["models"].items()
                for r in m["replicates"]}
        dropped = sorted(k for k in done if k[0] not in args.models.split(",")
                         or k[1] not in args.seeds)
        if dropped:  # the rewritten file would lose them
            ap.error(f"--resume: {args.json} holds replicates these --models/--replicates "
                     f"would drop: {dropped}")
        print(f"resuming: {len(done)} replicate(s) from {args.json}", flush=True)
    for seed in args.seeds:
        vocab, files = quality_data(args.workdir, args, seed)
        data[seed] = (vocab, files, unigram_baseline(files, args.quality_preds))
    for name in args.models.split(","):
        n, results = int(steps.get(name, 0 if steps else args.steps)), []
        out["models"][name] = {"steps": n, "replicates": []}
        for seed in args.seeds:
            vocab, files, baseline = data[seed]
            if (name, seed) in done:  # --resume: measured by an earlier run
                curves, facts = done[name, seed]["curves"], done[name, seed]["facts"]
                facts["resumed"] = True
            else:
                print(f"[{time.time() - START:.0f} s] bert-{name} replicate {seed}: {n} steps",
                      flush=True)
                curves, facts = run_replicate(name, seed, args, files, vocab, n)
                facts["baseline"] = baseline
            results.append((seed, curves, facts))
            print("  " + json.dumps({k: v for k, v in facts.items() if k != "chunk_seconds"}),
                  flush=True)
            out["models"][name]["replicates"].append({"seed": seed, "curves": curves,
                                                      "facts": facts})
            write_json(out, args.json)  # partial results survive an interrupted run
        out["models"][name]["summary"] = summarize(name, results)
    out["wall_seconds"] = time.time() - START
    write_json(out, args.json)
    print(f"\nwall {out['wall_seconds']:.0f} s; work dir {args.workdir}; wrote {args.json}")


if __name__ == "__main__":
    main()
