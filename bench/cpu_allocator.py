"""What TF's CPU allocator does to pre-training (bert_tf/tf_env.py): TF's default, malloc,
against BFC, which bert_tf's commands set, in one run; and the masked-LM head's form.

Two child processes, the same but for TF_CPU_ALLOCATOR_USE_BFC (false / true), build the same
work and answer "run N" on stdin with the (wall, CPU) seconds of N calls; timed rounds alternate
between them and the best round of each counts, as bench/train_step.py. Each child reports the
allocator it got (only BFC keeps statistics).

  elementwise   x * 2 on a [640, 30522] float32 tensor (bert-tiny's masked-LM logits at batch
                32, 78 MB): one fresh output a call
  step          bench/train_step.py's bert_tf row (run_pretraining's loop), per --configs
  head          (this process) MaskedLMHead's logits and the masked-LM loss, forward and
                backward, at bert-tiny's shapes, against the former form of the logits,
                x @ transpose(table) + bias (changed with the allocator)

  .venv/bin/python bench/cpu_allocator.py                   # all, tiny and mini
  .venv/bin/python bench/cpu_allocator.py --what step --configs base --batch 8 --steps 10
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peers_train import TaggedChild, clock, since  # noqa: E402

_TAG = "@@alloc "


def child(args):
    """Child: build the work, then answer "N" with the (wall, CPU) seconds of N calls."""
    import argparse as ap_
    import tempfile

    import train_step as ts  # imports bert_tf and sets the commands' environment first
    import tensorflow as tf
    from bert_tf import resources, tf_env
    from bert_tf.modeling.config import BertConfig

    if args.what == "elementwise":
        x = tf.random.normal([640, 30522])
        double = tf.function(lambda x: x * 2.0)

        def run(calls):
            start = clock()
            for _ in range(calls):
                y = double(x)
                del y
            return since(start)
        run(2)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-alloc-")
        cfg = BertConfig.from_json_file(resources.config_file(f"bert_{args.config}"))
        for i in range(2):
            ts.write_records(os.path.join(tmp, f"r-{i}.tfrecord"), 4 * args.batch,
                             cfg.vocab_size, seed=i)
        impl = ts.make_impl("bert_tf", args.config, cfg, os.path.join(tmp, "r-*.tfrecord"), tmp,
                            ap_.Namespace(batch=args.batch, iterations=args.iterations,
                                          jit=False, mixed_precision="none"))
        run = impl.run
    print(_TAG + json.dumps({"bfc": tf_env.bfc_in_use()}), flush=True)
    for line in sys.stdin:
        wall, cpu = run(int(line))
        print(_TAG + json.dumps({"wall": wall, "cpu": cpu}), flush=True)


class Child(TaggedChild):
    def __init__(self, bfc, what, config, args):
        super().__init__([sys.executable, os.path.abspath(__file__), "--child", "--what", what,
                          "--config", config or "tiny", "--batch", str(args.batch),
                          "--iterations", str(args.iterations)], bfc, _TAG)

    def run(self, calls):
        r = self.ask(calls)
        return r["wall"], r["cpu"]


def ab(what, config, args, calls, unit):
    """Alternating rounds, malloc then BFC; prints one row."""
    pair = {}
    try:
        for key, bfc in (("malloc", False), ("bfc", True)):
            pair[key] = Child(bfc, what, config, args)
        best = {k: (float("inf"), float("inf")) for k in pair}
        for _ in range(args.rounds):
            for k, c in pair.items():
                w, cpu = c.run(calls)
                best[k] = (min(best[k][0], w), min(best[k][1], cpu))
    finally:
        for c in pair.values():
            c.close()
    per = {k: (1000 * w / unit, 1000 * c / unit) for k, (w, c) in best.items()}
    name = what if config is None else f"step {config}"
    print(f"{name:14} {per['malloc'][0]:10.1f} {per['bfc'][0]:10.1f} "
          f"{per['malloc'][0] / per['bfc'][0]:8.2f}x   CPU {per['malloc'][1]:8.1f} "
          f"{per['bfc'][1]:8.1f} {per['malloc'][1] / per['bfc'][1]:6.2f}x", flush=True)


def head_ab(rounds):
    """MaskedLMHead's logits + the masked-LM loss, forward + backward: now and the former form."""
    import bert_tf  # noqa: F401
    import tensorflow as tf
    from bert_tf.modeling.heads import MaskedLMHead, gather_positions
    from bert_tf.pretraining.losses import sparse_softmax_cross_entropy

    class FormerHead(MaskedLMHead):
        def call(self, sequence_output, masked_positions, embedding_table):
            x = gather_positions(sequence_output, masked_positions)
            x = self.layer_norm(self.transform(x))
            return tf.tensordot(x, tf.transpose(embedding_table), 1) + self.output_bias

    vocab, hidden, batch, preds = 30522, 128, 32, 20
    table = tf.Variable(tf.random.normal([vocab, hidden], stddev=0.02))
    seq = tf.random.normal([batch, 128, hidden])
    pos = tf.random.uniform([batch, preds], 0, 128, tf.int32)
    labels = tf.random.uniform([batch, preds], 0, vocab, tf.int32)
    times = {}
    for name, cls in (("former", FormerHead), ("now", MaskedLMHead)):
        head = cls(hidden, vocab)
        head(seq, pos, table)

        @tf.function
        def step(seq, head=head):
            with tf.GradientTape() as tape:
                tape.watch(seq)
                loss = tf.reduce_sum(sparse_softmax_cross_entropy(
                    labels, head(seq, pos, table)))
            return tape.gradient(loss, [seq, table] + head.trainable_variables)
        step(seq)
        times[name] = (head, step)
    best = dict.fromkeys(times, float("inf"))
    for _ in range(rounds):
        for name, (_, step) in times.items():
            start = time.perf_counter()
            for _ in range(10):
                step(seq)[0].numpy()
            best[name] = min(best[name], (time.perf_counter() - start) / 10)
    print(f"{'head':14} {1000 * best['former']:10.1f} {1000 * best['now']:10.1f} "
          f"{best['former'] / best['now']:8.2f}x   (former / now, this process's allocator)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", default="elementwise,step,head")
    ap.add_argument("--configs", default="tiny,mini")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per round")
    ap.add_argument("--iterations", type=int, default=10, help="steps per loop call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    wanted = args.what.split(",")
    print(f"# {os.cpu_count()} cores; " + " ".join([os.path.basename(sys.executable)] + sys.argv))
    print(f"{'what':14} {'malloc ms':>10} {'BFC ms':>10} {'ratio':>9}   (ms per call / step)")
    if "elementwise" in wanted:
        ab("elementwise", None, args, 20, 20)
    if "step" in wanted:
        calls = max(1, args.steps // args.iterations)
        for config in args.configs.split(","):
            ab("step", config, args, calls, calls * args.iterations)
    if "head" in wanted:
        from bert_tf import tf_env
        tf_env.apply(commands=True)
        head_ab(args.rounds)


if __name__ == "__main__":
    main()
