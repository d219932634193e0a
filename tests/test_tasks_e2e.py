"""End to end through the scripts: an original-format TF1 checkpoint -> run_classifier.py
(train a few steps, predict, export) -> predictions from the SavedModel in a fresh process;
plus extract_features.py output, run_ner.py's tagging export, flag defaults and one-line
errors."""
import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bert_tf
from bert_tf.tasks import finetune, prediction

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONFIG = os.path.join(ROOT, "configs", "tiny_test.json")
WORDS = [f"w{i}" for i in range(20)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [w.capitalize()
                                                                  for w in WORDS]


def _run(args, check=True, timeout=300):
    proc = subprocess.run([sys.executable] + args, cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def tf1_model(tmp_path_factory):
    """vocab, config and an original-format checkpoint of a (pre-training) BERT."""
    import keras
    from bert_tf.convert.checkpoints import save_tf1_checkpoint
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.models import BertPretrainer, build_model
    d = tmp_path_factory.mktemp("tf1")
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = len(VOCAB)
    (d / "bert_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    keras.utils.set_random_seed(7)
    model = build_model(BertPretrainer.from_bert_config(cfg))
    prefix = save_tf1_checkpoint(model, str(d / "bert_model.ckpt"), global_step=1000)
    return {"dir": d, "ckpt": prefix, "vocab": str(d / "vocab.txt"),
            "config": str(d / "bert_config.json"),
            "word_embeddings": keras.ops.convert_to_numpy(model.encoder.word_embeddings)}


def _pairs_tsv(path, n, rng):
    rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(n):
        rows.append(f"{rng.randint(0, 1)}\t{i}\t{i}\t{' '.join(rng.sample(WORDS, 3))}\t"
                    f"{' '.join(rng.sample(WORDS, 2))}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return [r.split("\t")[3:5] for r in rows[1:]]


def _env():
    return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")


# slow: two processes, ~33 CPU-s. In the default suite: tasks from an original TF1 checkpoint
# (test_extract_features_json_lines, test_run_ner_predictions_cut_equal_padded below),
# run_classifier's training, eval and test results (test_real_length_training.py), end-to-end
# exports served by a fresh process without bert_tf (test_export.py's fresh-process test). A
# fine-tuning command's own end-of-training export (--do_export) runs in slow tests only.
@pytest.mark.slow
def test_tf1_checkpoint_finetune_export_fresh_process(tmp_path, tf1_model):
    from bert_tf.convert import checkpoints
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.models import BertClassifier, build_model
    data = tmp_path / "mrpc"
    data.mkdir()
    rng = random.Random(3)
    _pairs_tsv(data / "train.tsv", 32, rng)
    test_pairs = _pairs_tsv(data / "test.tsv", 6, rng)
    out = tmp_path / "out"
    # The serving process has nothing but TensorFlow (+ tf_text ops). It starts now and
    # imports TensorFlow while the script trains; it reads the export path from stdin once
    # the script has finished.
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf, tensorflow_text  # noqa: F401  (registers the text ops)
        m = tf.saved_model.load(sys.stdin.readline().strip())
        pairs = {test_pairs!r}
        out = m.signatures["serving_pairs"](text=tf.constant([p[0] for p in pairs]),
                                            text_b=tf.constant([p[1] for p in pairs]))
        print(json.dumps({{"probabilities": out["probabilities"].numpy().tolist(),
                           "label": [x.decode() for x in out["label"].numpy()],
                           "bert_tf": any(k.startswith("bert_tf") for k in sys.modules)}}))
    """)
    server = subprocess.Popen([sys.executable, "-c", script], cwd=str(tmp_path), env=_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        proc = _run(["run_classifier.py", "--task_name=mrpc", f"--data_dir={data}",
                     f"--vocab_file={tf1_model['vocab']}",
                     f"--bert_config_file={tf1_model['config']}",
                     f"--init_checkpoint={tf1_model['ckpt']}", f"--output_dir={out}",
                     "--do_train", "--do_predict", "--max_seq_length=16",
                     "--train_batch_size=8", "--learning_rate=1e-4", "--num_train_steps=3",
                     "--seed=5", "--noprogress", "--strategy=one_device"])
        assert f"exported to {out}/export" in proc.stdout
        stdout, stderr = server.communicate(f"{out / 'export'}\n", timeout=300)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, stderr[-3000:]
    got = json.loads(stdout.strip().splitlines()[-1])
    # Training started from the TF1 weights: 3 small steps move them by ~1e-3 at most, while
    # a fresh initialisation would differ by ~0.02 everywhere.
    config = BertConfig.from_json_file(tf1_model["config"])
    model = build_model(BertClassifier.from_bert_config(config, 2))
    checkpoints.load_checkpoint(model, str(out / "ckpt-3"))
    diff = np.abs(np.asarray(model.encoder.word_embeddings) - tf1_model["word_embeddings"])
    assert 0 < diff.max() < 5e-3
    expected = np.loadtxt(out / "test_results.tsv", delimiter="\t")
    assert expected.shape == (6, 2)
    assert not got["bert_tf"]
    np.testing.assert_allclose(got["probabilities"], expected, atol=1e-5)
    assert got["label"] == [str(i) for i in expected.argmax(1)]


def test_extract_features_json_lines(tmp_path, tf1_model):
    inp = tmp_path / "input.txt"
    inp.write_text("w1 W2 w3\n\nw4 ||| w5 w6\n", encoding="utf-8")
    out = tmp_path / "features.jsonl"
    from bert_tf.tasks import features
    result = features.run(features.FeatureConfig(
        input_file=str(inp), output_file=str(out), vocab_file=tf1_model["vocab"],
        bert_config_file=tf1_model["config"], init_checkpoint=tf1_model["ckpt"],
        layers="-1,0", max_seq_length=8, batch_size=2, progress=False))
    assert result["num_examples"] == 3
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [x["linex_index"] for x in lines] == [0, 1, 2]
    assert [[t["token"] for t in x["features"]] for x in lines] == [
        ["[CLS]", "w1", "w2", "w3", "[SEP]"], ["[CLS]", "[SEP]"],
        ["[CLS]", "w4", "[SEP]", "w5", "w6", "[SEP]"]]
    tok = lines[2]["features"][1]
    assert list(tok) == ["token", "layers"] and list(tok["layers"][0]) == ["index", "values"]
    assert [layer["index"] for layer in tok["layers"]] == [-1, 0]
    assert len(tok["layers"][0]["values"]) == 32
    assert all(round(v, 6) == v for v in tok["layers"][0]["values"])
    # the values are the encoder's, from the TF1 checkpoint
    import keras
    from bert_tf.convert import checkpoints
    from bert_tf.modeling.config import BertConfig
    from bert_tf.modeling.encoder import BertEncoder
    enc = BertEncoder.from_bert_config(BertConfig.from_json_file(tf1_model["config"]))
    ids = np.array([[2, 9, 3, 10, 11, 3]], np.int32)  # [CLS] w4 [SEP] w5 w6 [SEP]
    inputs = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
              "input_type_ids": np.array([[0, 0, 0, 1, 1, 1]], np.int32)}
    enc(inputs)
    checkpoints.load_checkpoint(enc, tf1_model["ckpt"])
    outs = enc(inputs)["encoder_outputs"]
    for layer in tok["layers"]:
        want = keras.ops.convert_to_numpy(outs[layer["index"]])[0, 1]
        np.testing.assert_allclose(layer["values"], want, atol=2e-6)


@pytest.mark.slow  # a second SavedModel export + fresh process: ~40 s on 2 busy cores
def test_ner_export_tags_like_the_library(tmp_path, tf1_model):
    """run_ner's end-of-training export tags text as the library's decoding does."""
    from bert_tf.tasks import ner
    data = tmp_path / "conll"
    data.mkdir()
    sents = [["W1", "w2", "W3", "W4", "w5"], ["w6", "W7"]]
    tags = [["B-PER", "O", "B-PER", "I-PER", "O"], ["O", "B-PER"]]
    text = "\n\n".join("\n".join(f"{w} NN O {t}" for w, t in zip(s, g))
                       for s, g in zip(sents, tags))
    for name in ("train.txt", "test.txt"):
        (data / name).write_text(text + "\n", encoding="utf-8")
    cfg = ner.NerConfig(data_dir=str(data), vocab_file=tf1_model["vocab"],
                        bert_config_file=tf1_model["config"],
                        init_checkpoint=tf1_model["ckpt"], output_dir=str(tmp_path / "out"),
                        do_lower_case=False, do_train=True, do_predict=True,
                        max_seq_length=8, train_batch_size=2, num_train_steps=2,
                        labels="O,B-PER,I-PER", seed=3, progress=False)
    result = ner.run(cfg)
    script = textwrap.dedent(f"""
        import json
        import tensorflow as tf, tensorflow_text  # noqa: F401
        m = tf.saved_model.load({result['export_dir']!r})
        out = m.signatures["serving_default"](text=tf.constant({[' '.join(s) for s in sents]!r}))
        print(json.dumps([[t.decode() for t in row] for row in out["tags"].numpy()]))
    """)
    got = json.loads(_run(["-c", script]).stdout.strip().splitlines()[-1])
    # one piece per word: the export's tags after [CLS] are the word tags
    assert [row[1:1 + len(s)] for row, s in zip(got, sents)] == result["test_predictions"]


@pytest.mark.parametrize("script,config", [
    ("run_classifier.py", "bert_tf.tasks.classifier:ClassifierConfig"),
    ("run_squad.py", "bert_tf.tasks.squad:SquadConfig"),
    ("run_ner.py", "bert_tf.tasks.ner:NerConfig"),
    ("extract_features.py", "bert_tf.tasks.features:FeatureConfig"),
    ("run_pretraining.py", "bert_tf.pretraining.options:PretrainingOptions"),
])
def test_script_flag_defaults_match_library(script, config):
    """The script's flags have the library config's defaults; the original flags exist."""
    module, cls = config.split(":")
    check = textwrap.dedent(f"""
        import dataclasses, importlib, json, sys
        sys.argv = [{script!r}]
        importlib.import_module('bert_tf.commands.' + {script[:-3]!r}).define_flags()
        from absl import flags
        cls = getattr(importlib.import_module({module!r}), {cls!r})
        fields = [f for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING]
        bad = [(f.name, repr(f.default)) for f in fields
               if f.name in flags.FLAGS and flags.FLAGS[f.name].default != f.default]
        tf_imported = "tensorflow" in sys.modules
        # flags -> config -> run() -> report, through the script's own main (run faked)
        from bert_tf import BertError
        from bert_tf.tasks import cli
        flags.FLAGS(["x", "--max_seq_length=24", "--nodo_lower_case", "--strategy=mirrored",
                     "--mixed_precision=bfloat16", "--vocab_file=v.txt"])
        seen = []
        cli.main_for(lambda c: seen.append(c) or c, cls,
                     lambda r: print("reported", type(r).__name__))(["x"])
        cfg = seen[0]
        got_cfg = [cfg.max_seq_length, cfg.do_lower_case, cfg.strategy, cfg.mixed_precision,
                   cfg.vocab_file]
        def fail(cfg):
            raise BertError("--vocab_file: v.txt: not found")
        try:
            cli.main_for(fail, cls)(["x"])
        except SystemExit as e:
            exit_msg = str(e.code)
        defaults = {{name: flags.FLAGS[name].default for name in flags.FLAGS}}
        print(json.dumps({{"bad": bad, "tf": tf_imported, "flags": sorted(flags.FLAGS),
                           "cfg": got_cfg, "exit": exit_msg, "defaults": defaults}}))
    """)
    proc = _run(["-c", check])
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["bad"] == []
    assert not got["tf"]  # flag parsing alone does not import TensorFlow
    assert got["cfg"] == [24, False, "mirrored", "bfloat16", "v.txt"]
    assert f"reported {config.split(':')[1]}" in proc.stdout
    assert got["exit"] == "error: --vocab_file: v.txt: not found"
    originals = {
        "run_classifier.py": {"data_dir", "task_name", "do_lower_case", "max_seq_length",
                              "train_batch_size", "eval_batch_size", "predict_batch_size",
                              "learning_rate", "num_train_epochs", "warmup_proportion",
                              "save_checkpoints_steps", "iterations_per_loop", "use_tpu",
                              "tpu_name", "tpu_zone", "gcp_project", "master",
                              "num_tpu_cores"},
        "run_squad.py": {"train_file", "predict_file", "doc_stride", "max_query_length",
                         "n_best_size", "max_answer_length", "verbose_logging",
                         "version_2_with_negative", "null_score_diff_threshold"},
        "extract_features.py": {"input_file", "output_file", "layers", "batch_size",
                                "use_one_hot_embeddings"},
        "run_ner.py": {"data_dir", "labels"},
        "run_pretraining.py": {"bert_config_file", "input_file", "output_dir",
                               "init_checkpoint", "do_train", "do_eval", "use_tpu", "tpu_name",
                               "tpu_zone", "gcp_project", "master", "num_tpu_cores"},
    }[script]
    assert originals <= set(got["flags"])
    # The original defaults (flags are made from the options dataclasses now).
    original_defaults = {
        "run_pretraining.py": dict(max_seq_length=128, max_predictions_per_seq=20,
                                   train_batch_size=32, eval_batch_size=8, learning_rate=5e-5,
                                   num_train_steps=100000, num_warmup_steps=10000,
                                   save_checkpoints_steps=1000, iterations_per_loop=1000,
                                   max_eval_steps=100, num_tpu_cores=8, use_tpu=False),
        "run_classifier.py": dict(max_seq_length=128, train_batch_size=32, eval_batch_size=8,
                                  predict_batch_size=8, learning_rate=5e-5,
                                  num_train_epochs=3.0, warmup_proportion=0.1,
                                  save_checkpoints_steps=1000, iterations_per_loop=1000,
                                  do_lower_case=True),
        "run_squad.py": dict(max_seq_length=384, doc_stride=128, max_query_length=64,
                             train_batch_size=32, predict_batch_size=8, n_best_size=20,
                             max_answer_length=30, null_score_diff_threshold=0.0),
        "extract_features.py": dict(layers="-1,-2,-3,-4", max_seq_length=128, batch_size=32),
        "run_ner.py": dict(max_seq_length=128, train_file="train.txt", label_scheme="iob2"),
    }[script]
    assert {k: got["defaults"][k] for k in original_defaults} == original_defaults


def test_script_errors_are_one_line(tmp_path):
    proc = _run(["run_classifier.py", "--task_name=bogus", "--do_train",
                 f"--output_dir={tmp_path}"], check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: --task_name: unknown task 'bogus'; expected one of cola, mnli")
    assert "Traceback" not in proc.stderr
    # absl flag errors: one line too, before TensorFlow is imported
    for args, want in ((["run_squad.py", "--doc_stride=abc"],
                        "error: flag --doc_stride=abc: invalid literal for int() with base 10: "
                        "'abc'"),
                       (["extract_features.py", "--bogus_flag=1"],
                        "error: Unknown command line flag 'bogus_flag'")):
        proc = _run(args, check=False)
        assert (proc.returncode, proc.stderr.strip()) == (1, want)


def test_library_errors(tmp_path, tf1_model):
    from bert_tf import BertError
    from bert_tf.tasks import classifier, squad
    common = dict(vocab_file=tf1_model["vocab"], bert_config_file=tf1_model["config"],
                  output_dir=str(tmp_path / "o"), progress=False)
    with pytest.raises(BertError, match=r"^at least one of --do_train, --do_eval, "):
        classifier.run(classifier.ClassifierConfig(task_name="rte", data_dir=str(tmp_path),
                                                   **common))
    with pytest.raises(BertError, match=r"dev\.tsv: data file not found \(check --data_dir\)"):
        classifier.run(classifier.ClassifierConfig(task_name="rte", data_dir=str(tmp_path),
                                                   do_eval=True, max_seq_length=32, **common))
    with pytest.raises(BertError, match=r"^--max_seq_length: 128 exceeds the model's "
                                        r"max_position_embeddings 64"):
        classifier.run(classifier.ClassifierConfig(task_name="rte", data_dir=str(tmp_path),
                                                   do_eval=True, max_seq_length=128, **common))
    with pytest.raises(BertError, match=r"^--predict_file: required with --do_predict"):
        squad.run(squad.SquadConfig(do_predict=True, max_seq_length=32, **common))
    assert finetune.RunConfig("x", num_train_epochs=2.0, train_batch_size=4,
                              warmup_proportion=0.1).train_steps(10) == (5, 0)
    with pytest.raises(BertError, match=r"^--num_train_epochs: 3 training examples"):
        finetune.RunConfig("x", train_batch_size=32, num_train_epochs=1.0).train_steps(3)
    with pytest.raises(BertError, match=r"^--eval_batch_size: must be > 0, got 0"):
        classifier.run(classifier.ClassifierConfig(task_name="rte", data_dir=str(tmp_path),
                                                   do_eval=True, eval_batch_size=0, **common))
    with pytest.raises(BertError, match=r"^--warmup_proportion: must be in \[0, 1\], got 1.5"):
        squad.run(squad.SquadConfig(do_train=True, warmup_proportion=1.5, **common))
    from bert_tf.tasks import features
    assert features.parse_layers("-1, -2,0", 2) == [-1, -2, 0]
    with pytest.raises(BertError, match=r"^--layers: 2 is outside the model's 2 layers "
                                        r"\(-2\.\.1\)"):
        features.parse_layers("-1,2", 2)
    with pytest.raises(BertError, match=r"^--layers: expected comma-separated integers"):
        features.parse_layers("-1,last", 2)
    with pytest.raises(BertError, match=r"^--batch_size: must be > 0, got -1"):
        features.run(features.FeatureConfig(input_file="in.txt", output_file="out.jsonl",
                                            vocab_file=tf1_model["vocab"],
                                            bert_config_file=tf1_model["config"],
                                            batch_size=-1))


def _record_cuts(monkeypatch):
    """The seq_length each prediction step is made with: S when batches are cut, else None."""
    cuts, make = [], prediction._predict_step

    def record(trainer, output_keys, element_spec, seq_length, *rest):
        cuts.append(seq_length)
        return make(trainer, output_keys, element_spec, seq_length, *rest)
    monkeypatch.setattr(prediction, "_predict_step", record)
    return cuts


def test_extract_features_cut_equals_padded(tmp_path, tf1_model, monkeypatch):
    inp = tmp_path / "input.txt"
    inp.write_text("w1 W2 w3\nw4\nw4 ||| w5 w6 w1 w2 w3 w4 w5 w6 w1\nw2 w3\n", encoding="utf-8")
    from bert_tf.tasks import features
    cuts = _record_cuts(monkeypatch)
    lines = {}
    for pad in (False, True):
        out = tmp_path / f"features-{pad}.jsonl"
        features.run(features.FeatureConfig(
            input_file=str(inp), output_file=str(out), vocab_file=tf1_model["vocab"],
            bert_config_file=tf1_model["config"], init_checkpoint=tf1_model["ckpt"],
            layers="-1,-2", max_seq_length=32, batch_size=2, progress=False,
            pad_to_max_seq_length=pad))
        lines[pad] = [json.loads(line) for line in out.read_text().splitlines()]
    assert cuts == [32, None]
    assert len(lines[False]) == len(lines[True]) == 4
    for a, b in zip(lines[False], lines[True]):
        assert [t["token"] for t in a["features"]] == [t["token"] for t in b["features"]]
        for ta, tb in zip(a["features"], b["features"]):
            for la, lb in zip(ta["layers"], tb["layers"]):
                assert la["index"] == lb["index"]
                np.testing.assert_allclose(la["values"], lb["values"], rtol=0, atol=1e-5)


def test_run_ner_predictions_cut_equal_padded(tmp_path, tf1_model, monkeypatch):
    from bert_tf.tasks import ner
    data = tmp_path / "conll"
    data.mkdir()
    rng = random.Random(0)
    sents = [[rng.choice(WORDS) for _ in range(rng.choice([1, 2, 5, 12]))] for _ in range(7)]
    text = "\n\n".join("\n".join(f"{w} NN O O" for w in s) for s in sents)
    (data / "test.txt").write_text(text + "\n", encoding="utf-8")
    cuts = _record_cuts(monkeypatch)
    written = {}
    for pad in (False, True):
        out = tmp_path / f"out-{pad}"
        ner.run(ner.NerConfig(
            data_dir=str(data), vocab_file=tf1_model["vocab"],
            bert_config_file=tf1_model["config"], init_checkpoint=tf1_model["ckpt"],
            output_dir=str(out), do_lower_case=False, do_predict=True, max_seq_length=32,
            predict_batch_size=2, labels="O,B-PER,I-PER,B-LOC", seed=3, progress=False,
            pad_to_max_seq_length=pad))
        written[pad] = (out / "test_predictions.txt").read_text(encoding="utf-8")
    assert cuts == [32, None]
    assert written[False] == written[True]
    assert len({line.split()[-1] for line in written[True].split("\n") if line}) > 1
