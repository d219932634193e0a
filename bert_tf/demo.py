"""`bert-demo` (`make demo` in a checkout): the original release's whole workflow on the
shipped sample corpus.

    bert-demo [--output_dir demo_out] [--train_steps 2500] [--export_base export]
    (or: python -m bert_tf.demo ...; outputs go under the current directory by default)

Each step runs the same command a user would run with their own data, and prints it first so
it can be copied:
  1. learn a WordPiece vocab from the sample corpus (python -m bert_tf.tokenization.vocab_builder)
  2. bert-create-pretraining-data -> sharded TFRecords + stats JSON
  3. bert-run-pretraining with a tiny config, dropout 0 (loss printed each loop) and
     --vocab_file, so its end-of-training export writes the SavedModels
  4. <export_base>/bert_demo{,_embeddings,_preprocessor,_encoder}/<version>/ (TF Serving
     layout, warm-up requests): text-in fill-mask and embeddings, the TF Hub preprocessor +
     encoder pair
  5. a fresh process (bert_tf/demo_predict.py, plain Keras) loads the exports and prints
     fill-mask predictions on sentences of the corpus (seen in training: they show that the
     pipeline learns, not that the model generalises) and sentence-embedding cosines
  6. the tensorflow_model_server / docker command and a curl request for the fill-mask model,
     then a summary (loss and masked-LM accuracy at the start and the end, the exports' sizes)
     and the commands that fine-tune, export and serve your own model.
The steps run as `python -m bert_tf.commands.<name>` with this interpreter (what the printed
`bert-<name>` commands run), so the demo works from a checkout and from an installed wheel;
how a step runs and is timed: bert_tf.demo_steps.
"""
import json
import os
import posixpath
import re
import sys
import time

from absl import app, flags

import bert_tf  # noqa: F401
from bert_tf import BertError, commands, fileio, resources
from bert_tf.demo_steps import StepClock, command, run, shown
from bert_tf.demo_steps import shown_argv, step_dies_with_demo  # noqa: F401 (API)

SAMPLE_CORPUS = resources.sample_corpus()
TINY_CONFIG = resources.config_file("bert_tiny")
# Run as a file, not a module: the point of step 5 is that it imports nothing from bert_tf.
PREDICT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_predict.py")
MODEL_NAME = "bert_demo"

# Sentences of the sample corpus, one per topic, with the word the model should fill in.
# Topic words the corpus makes predictable (over every content word of every corpus sentence,
# the demo's model has the right one in its top 5 for about half: the README has the numbers).
DEMO_FILL_MASK = [
    ("the [MASK] records fog on more than a hundred days in some years .", "logbook"),
    ("a finished [MASK] sounds hollow when tapped on the bottom .", "loaf"),
    ("each colony has a single [MASK] , whose only task is to lay eggs .", "queen"),
    ("a [MASK] swings back and forth and releases the escapement at each swing .", "pendulum"),
    ("along the coast , salt was made by letting the sun evaporate sea [MASK] in shallow pans .",
     "water"),
]
DEMO_SENTENCES = [text for text, _ in DEMO_FILL_MASK]
# Three topics, two sentences each (new sentences, words of the corpus): each same-topic pair
# should be closer than every pair across the topics. A model this small ranks by shared words
# more than by meaning: on 22 such sentences a same-topic pair beats an unrelated one 4 times
# in 5 (README), so these six are picked, not typical.
EMBED_SENTENCES = [
    "The loaf rises in a warm place.",
    "The dough is left to rise before the loaf is shaped.",
    "The bees of the colony feed the queen.",
    "The colony has a single queen and many workers.",
    "The pendulum of the clock swings back and forth.",
    "The clock has a pendulum and an escapement.",
]
SAME_TOPIC = [(0, 1), (2, 3), (4, 5)]

FLAGS = flags.FLAGS


def _define_flags():
    """Flags of the command line only: importing this module defines none (it would
    clash with other modules' flags of the same name in one process)."""
    flags.DEFINE_string("output_dir", "demo_out",
                        "Work folder (vocab, TFRecords, checkpoints, logs).")
    flags.DEFINE_string("export_base", "export",
                        "SavedModels go to <export_base>/<name>/<version>/ "
                        "(the TF Serving layout).")
    flags.DEFINE_string("input_file", SAMPLE_CORPUS, "Corpus: one sentence a line, blank line "
                        "between documents.")
    flags.DEFINE_string("vocab_file", None, "Use this vocab.txt instead of learning one.")
    flags.DEFINE_bool("do_lower_case", True, "Uncased model.")
    flags.DEFINE_integer("vocab_size", 2000, "Size of the learned vocab (upper bound).")
    flags.DEFINE_string("bert_config_file", TINY_CONFIG, "Model shape (vocab_size is replaced by "
                        "the vocab's).")
    flags.DEFINE_integer("max_seq_length", 32, "Sequence length of the pre-training examples "
                         "(short: a sentence starts near the front, as in the fill-mask demo).")
    flags.DEFINE_integer("max_predictions_per_seq", 16, "Masked positions per example (at "
                         "most).")
    flags.DEFINE_float("masked_lm_prob", 0.5, "Share of the tokens masked (0.15 in BERT: a tiny "
                       "corpus learns faster with more targets per example).")
    flags.DEFINE_integer("dupe_factor", 40, "Copies of the corpus, each with other masks and "
                         "sentence pairs.")
    flags.DEFINE_integer("train_steps", 2500, "Pre-training steps.")
    flags.DEFINE_integer("train_batch_size", 16, "Global batch size (on this corpus more, "
                         "smaller steps learn faster than fewer, larger ones).")
    flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate (tiny model, tiny corpus; 2e-3 "
                       "learns more slowly).")
    flags.DEFINE_integer("iterations_per_loop", 250, "Steps per loop, one console line each "
                         "(at most a tenth of --train_steps off TPU).")
    flags.DEFINE_integer("seed", 12345, "Seed of data generation and training.")


def _next_version(export_base, names):
    """One version number for the exports of this run: above every existing one (TF Serving's
    integer folders). Local folders are listed without TensorFlow: importing it here cost the
    demo ~5 s of one core before pre-training could start."""
    if not fileio.is_local(export_base):
        from bert_tf.export import serving
        return max(serving.next_version(posixpath.join(export_base, n)) for n in names)
    versions = [int(v) for n in names if os.path.isdir(os.path.join(export_base, n))
                for v in os.listdir(os.path.join(export_base, n)) if re.fullmatch(r"[0-9]+", v)]
    return max(versions, default=0) + 1


def write_demo_config(base_config_file, vocab_file, path, dropout=0.0):
    """Writes `base_config_file` with vocab_size set to the vocab's size and the given dropout;
    returns the config.

    Args:
        base_config_file: bert_config.json to start from (e.g. the shipped bert_tiny.json).
        vocab_file: the vocab the demo learned or was given.
        path: where to write the demo's bert_config.json.
        dropout: hidden and attention dropout (0: the demo's point is to fit its small corpus).
    """
    from bert_tf.modeling.config import BertConfig
    from bert_tf.tokenization import vocab_tokens
    cfg = BertConfig.from_json_file(base_config_file)
    cfg.vocab_size = len(vocab_tokens(vocab_file))
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = dropout
    cfg.to_json_file(path)
    return cfg


def parse_losses(train_log):
    """Total loss of each training loop line (`step 50/300 loss=3.21 ...`) of the training log."""
    return [float(m) for m in re.findall(r"step \d+/\d+ loss=([0-9.]+)", train_log)]


def parse_progress(train_log):
    """(step, loss, masked-LM accuracy) of each training loop line of the training log."""
    return [(int(s), float(loss), float(acc)) for s, loss, acc in re.findall(
        r"step (\d+)/\d+ loss=([0-9.]+) .*?mlm_acc=([0-9.]+)", train_log)]


def check_predictions(predictions):
    """How many fill-mask answers are in the top 5, and the same-topic vs cross-topic cosines.

    Args:
        predictions: demo_predict.py's results for DEMO_SENTENCES and EMBED_SENTENCES.
    Returns:
        {"hits": [bool per sentence], "same": [cosines], "cross": [cosines]}.
    """
    hits = [answer in f["masks"][0]["tokens"]
            for f, (_, answer) in zip(predictions["fill_mask"], DEMO_FILL_MASK)]
    cos = predictions["embeddings"]["cosine"]
    n = len(cos)
    same = [cos[i][j] for i, j in SAME_TOPIC]
    cross = [cos[i][j] for i in range(n) for j in range(i + 1, n) if (i, j) not in SAME_TOPIC]
    return {"hits": hits, "same": same, "cross": cross}


def _size(path):
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
                for f in files)
    return f"{total / 1e6:.1f} MB"


def run_demo(output_dir, export_base, input_file=SAMPLE_CORPUS, vocab_file=None,
             do_lower_case=True, vocab_size=2000, bert_config_file=TINY_CONFIG,
             max_seq_length=32, max_predictions_per_seq=16, masked_lm_prob=0.5, dupe_factor=40,
             train_steps=2500, train_batch_size=16, learning_rate=1e-3, iterations_per_loop=250,
             seed=12345):
    """Runs steps 1-6; returns a dict of paths and the per-loop training losses.

    Args:
        output_dir: working folder (vocab, records, checkpoints, logs).
        export_base: TF Serving base folder for the exported models.
        input_file: raw text corpus, one sentence per line, blank lines between documents.
        vocab_file: an existing vocab; None learns one of `vocab_size` from the corpus.
        do_lower_case, vocab_size, bert_config_file, max_seq_length, max_predictions_per_seq,
            masked_lm_prob, dupe_factor, train_steps, train_batch_size, learning_rate,
            iterations_per_loop, seed: as the flags of the same names of the scripts the demo
            runs.
    """
    start, clock = time.time(), StepClock()
    os.makedirs(output_dir, exist_ok=True)
    output_dir = os.path.abspath(output_dir)
    export_base = os.path.abspath(export_base)
    lower = f"--do_lower_case={str(do_lower_case).lower()}"

    if not vocab_file:
        clock.start("1/6 learn a WordPiece vocab from the corpus")
        vocab_file = os.path.join(output_dir, "vocab.txt")
        run([sys.executable, "-m", "bert_tf.tokenization.vocab_builder",
              f"--input_file={input_file}", f"--output_file={vocab_file}",
              f"--vocab_size={vocab_size}", lower])
    else:
        clock.start(f"1/6 use the given vocab {vocab_file}")
    config_file = os.path.join(output_dir, "bert_config.json")
    cfg = write_demo_config(bert_config_file, vocab_file, config_file)
    print(f"model: L={cfg.num_hidden_layers} H={cfg.hidden_size} A={cfg.num_attention_heads} "
          f"vocab={cfg.vocab_size} -> {config_file}")

    clock.start("2/6 bert-create-pretraining-data: text -> masked-LM/NSP TFRecords")
    data_dir = os.path.join(output_dir, "tfrecords")
    os.makedirs(data_dir, exist_ok=True)
    shards = ",".join(os.path.join(data_dir, f"train-{i}-of-2.tfrecord") for i in range(2))
    run(command("create_pretraining_data") + [
        f"--input_file={input_file}", f"--output_file={shards}", f"--vocab_file={vocab_file}",
        lower, f"--max_seq_length={max_seq_length}",
        f"--max_predictions_per_seq={max_predictions_per_seq}",
        f"--masked_lm_prob={masked_lm_prob}", f"--dupe_factor={dupe_factor}",
        f"--random_seed={seed}"])

    # bert-run-pretraining picks the same version: the next one above all four models'.
    names = [MODEL_NAME + s for s in ("", "_embeddings", "_preprocessor", "_encoder")]
    version = _next_version(export_base, names)
    fill_mask_dir, _, pre_dir, enc_dir = (posixpath.join(export_base, n, str(version))
                                          for n in names)

    clock.start("3/6 bert-run-pretraining: masked-LM + NSP pre-training (exports text-in "
                "SavedModels at the end)")
    # Static masks: dupe_factor copies of each sentence, each masked differently at
    # masked_lm_prob (--dynamic_masking draws at BERT's 0.15, which learns this corpus far slower).
    train_dir = os.path.join(output_dir, "pretraining")
    if os.path.isdir(train_dir):  # a fresh run each time, not a resume of the last demo
        import shutil
        shutil.rmtree(train_dir)
    train_log = run(command("run_pretraining") + [
        f"--bert_config_file={config_file}", f"--input_file={data_dir}/train-*.tfrecord",
        f"--output_dir={train_dir}", "--do_train", "--do_eval",
        f"--max_seq_length={max_seq_length}",
        f"--max_predictions_per_seq={max_predictions_per_seq}",
        f"--train_batch_size={train_batch_size}", "--eval_batch_size=32",
        f"--learning_rate={learning_rate}", f"--num_train_steps={train_steps}",
        f"--num_warmup_steps={max(1, train_steps // 10)}",
        f"--save_checkpoints_steps={train_steps}",
        f"--iterations_per_loop={iterations_per_loop}", "--max_eval_steps=10",
        f"--seed={seed}", f"--vocab_file={vocab_file}", lower, f"--export_dir={export_base}",
        f"--model_name={MODEL_NAME}", "--noprogress"],
        log_path=os.path.join(output_dir, "pretraining.log"))
    losses = parse_losses(train_log)

    clock.start("4/6 the exports bert-run-pretraining wrote (TF Serving layout, warm-up "
                "requests)")
    for path in (posixpath.join(export_base, n, str(version)) for n in names):
        if not os.path.exists(os.path.join(path, "saved_model.pb")):
            raise BertError(f"{path}: bert-run-pretraining did not export it")
        print(f"  {path}")

    clock.start("5/6 a fresh process loads the exports with plain Keras (no bert_tf import)")
    print("The fill-mask sentences are from the training corpus: the model saw them, so the "
          "right words show\nthat the pipeline learns, not that the model generalises (that "
          "takes a real corpus).")
    results_file = os.path.join(output_dir, "predictions.json")
    run([sys.executable, PREDICT_SCRIPT,
          f"--fill_mask_dir={fill_mask_dir}", f"--preprocessor_dir={pre_dir}",
          f"--encoder_dir={enc_dir}", "--fill_mask_text=" + "|".join(DEMO_SENTENCES),
          "--embed_text=" + "|".join(EMBED_SENTENCES), f"--json_file={results_file}"])
    with open(results_file, encoding="utf-8") as f:
        predictions = json.load(f)
    check = check_predictions(predictions)
    print(f"right word in the top 5: {sum(check['hits'])}/{len(check['hits'])} ("
          + ", ".join(f"{a}{'' if h else ' (missed)'}"
                      for (_, a), h in zip(DEMO_FILL_MASK, check["hits"])) + ")")
    print("cosine of same-topic pairs: " + ", ".join(f"{c:.2f}" for c in check["same"])
          + "; of unrelated pairs: " + ", ".join(f"{c:.2f}" for c in check["cross"]))

    clock.start("6/6 serve it with stock TF Serving")
    print(serving_instructions(export_base, MODEL_NAME))
    clock.stop()
    progress = parse_progress(train_log)
    print(summary(progress, train_log, [posixpath.join(export_base, n, str(version))
                                        for n in names], time.time() - start, clock.rows))
    print(next_commands(vocab_file, config_file, train_dir, export_base, do_lower_case))
    return {"vocab_file": vocab_file, "config_file": config_file, "train_dir": train_dir,
            "fill_mask_dir": fill_mask_dir, "preprocessor_dir": pre_dir, "encoder_dir": enc_dir,
            "losses": losses, "progress": progress, "predictions": predictions,
            "check": check}


def summary(progress, train_log, export_dirs, seconds, steps=()):
    """The closing table: loss and masked-LM accuracy at the first and last loop, the eval's,
    and each export with its size.

    Args:
        progress: [(step, loss, mlm accuracy)] per training loop (`parse_progress`).
        train_log: bert-run-pretraining's output (for the eval line).
        export_dirs: the export version folders.
        seconds: the demo's wall time.
        steps: [(step, wall seconds, CPU seconds)] (`StepClock.rows`).
    """
    rows = [f"{'':12}{'step':>6}{'loss':>9}{'MLM accuracy':>14}"]
    for label, (step, loss, acc) in (("first loop", progress[0]), ("last loop", progress[-1])):
        rows.append(f"{label:12}{step:>6}{loss:>9.3f}{acc:>14.3f}")
    m = re.search(r"eval at step (\d+): loss=([0-9.]+) masked_lm_accuracy=([0-9.]+)", train_log)
    if m:
        rows.append(f"{'eval':12}{m[1]:>6}{float(m[2]):>9.3f}{float(m[3]):>14.3f}")
    rows.append("")
    rows += [f"{shown(d):58} {_size(d):>8}" for d in export_dirs]
    if steps:
        rows += ["", "step  seconds  CPU seconds"]
        rows += [f"{step:4} {wall:8.1f} {cpu:12.1f}" for step, wall, cpu in steps]
    return (f"\n==> summary (demo finished in {seconds:.0f} s)\n" + "\n".join(rows))


def next_commands(vocab_file, config_file, train_dir, export_base, do_lower_case):
    """The commands that take it further, with this run's files.

    Args:
        vocab_file, config_file, train_dir, export_base: this run's paths.
        do_lower_case: the vocab's casing.
    """
    v, c, t, e = (shown(p) for p in (vocab_file, config_file, train_dir, export_base))
    lower = "" if do_lower_case else " --nodo_lower_case"
    return f"""
==> next
# fine-tune the pre-trained checkpoint, e.g. on GLUE MRPC (tab-separated files in glue_data/MRPC):
bert-run-classifier --task_name=mrpc --data_dir=glue_data/MRPC --do_train --do_eval \\
  --vocab_file={v} --bert_config_file={c} --init_checkpoint={t} \\
  --max_seq_length=64 --output_dir=mrpc_out{lower}
# export a checkpoint (yours or a released one) for TF Serving:
bert-export-savedmodel --bert_config_file={c} --vocab_file={v} --init_checkpoint={t} \\
  --task=fill_mask --export_base={e} --model_name=bert_demo{lower}
# serve it: the commands above; the guide: python -m bert_tf.resources serving"""


def serving_instructions(export_base, model_name):
    """Shell commands that serve `export_base/model_name` with stock TF Serving and query it.

    Args:
        export_base: the TF Serving base folder.
        model_name: the model's folder (and serving name) under it.
    """
    body = json.dumps({"instances": [DEMO_SENTENCES[0]]})
    return f"""# with the stock docker image (REST on 8501, gRPC on 8500):
docker run --rm -p 8500:8500 -p 8501:8501 \\
  -v {export_base}/{model_name}:/models/{model_name} -e MODEL_NAME={model_name} \\
  tensorflow/serving:2.20.0
# or with the binary:
tensorflow_model_server --port=8500 --rest_api_port=8501 \\
  --model_name={model_name} --model_base_path={export_base}/{model_name}
# then:
curl -s -X POST http://localhost:8501/v1/models/{model_name}:predict \\
  -d '{body}'"""


def _main(argv):
    del argv
    try:
        run_demo(FLAGS.output_dir, FLAGS.export_base, FLAGS.input_file, FLAGS.vocab_file,
                 FLAGS.do_lower_case, FLAGS.vocab_size, FLAGS.bert_config_file,
                 FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.masked_lm_prob,
                 FLAGS.dupe_factor,
                 FLAGS.train_steps, FLAGS.train_batch_size, FLAGS.learning_rate,
                 FLAGS.iterations_per_loop, FLAGS.seed)
    except BertError as e:
        sys.exit(f"error: {e}")


def main():
    """The `bert-demo` command (flags from sys.argv)."""
    _define_flags()
    commands.show_in_help(__name__)
    commands.exit_zero_on_help(lambda: app.run(_main))


if __name__ == "__main__":
    main()
