"""Learnability on synthetic but non-trivial data (tiny models, CPU, seconds) and the files
each task writes (eval_results.txt, test_results.tsv, predictions.json, CoNLL output)."""
import json
import os
import random

import numpy as np
import pytest

import bert_tf
from bert_tf.tasks import classifier, metrics, ner, squad

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "tiny_test.json")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _setup(tmp_path, tokens, **overrides):
    """vocab.txt + a tiny bert_config.json (no dropout, wide init: learns in few steps)."""
    vocab = SPECIAL + tokens
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg.update(vocab_size=len(vocab), hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0, initializer_range=0.2, **overrides)
    (tmp_path / "bert_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return dict(vocab_file=str(tmp_path / "vocab.txt"),
                bert_config_file=str(tmp_path / "bert_config.json"),
                output_dir=str(tmp_path / "out"), seed=1, progress=False, do_export=False)


def _read_results(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        k, v = line.rstrip("\n").split(" = ")
        out[k] = float(v)
    return out


WORDS = [f"w{i}" for i in range(20)]


def _overlap_tsv(path, n, rng):
    """MRPC layout; label 1 iff text_b is text_a's words reordered, 0 iff it shares none.

    Every word is equally likely under both labels: only the overlap tells them apart.
    """
    rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(n):
        a = rng.sample(WORDS, 3)
        same = rng.random() < 0.5
        b = rng.sample(a, 3) if same else rng.sample([w for w in WORDS if w not in a], 3)
        rows.append(f"{int(same)}\t{i}\t{i}\t{' '.join(a)}\t{' '.join(b)}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_pair_classification_learns_word_overlap(tmp_path):
    flags = _setup(tmp_path, WORDS)
    data = tmp_path / "mrpc"
    data.mkdir()
    rng = random.Random(0)
    _overlap_tsv(data / "train.tsv", 2000, rng)
    _overlap_tsv(data / "dev.tsv", 200, rng)
    _overlap_tsv(data / "test.tsv", 10, rng)
    cfg = classifier.ClassifierConfig(
        task_name="MRPC", data_dir=str(data), do_train=True, do_eval=True, do_predict=True,
        max_seq_length=12, train_batch_size=32, learning_rate=2e-3, num_train_steps=250,
        warmup_proportion=0.1, **flags)
    result = classifier.run(cfg)
    res = _read_results(os.path.join(cfg.output_dir, "eval_results.txt"))
    assert set(res) == {"eval_accuracy", "eval_f1", "eval_loss", "global_step", "loss"}
    assert res["global_step"] == 250
    assert res["eval_accuracy"] >= 0.85, res
    assert res["eval_f1"] >= 0.85, res
    rows = [list(map(float, line.split("\t")))
            for line in open(os.path.join(cfg.output_dir, "test_results.tsv"))]
    assert len(rows) == 10 and all(len(r) == 2 and abs(sum(r) - 1) < 1e-6 for r in rows)
    assert np.argmax(rows, 1).tolist() == np.argmax(result["test_outputs"], 1).tolist()


def _cola_like(tmp_path, rng):
    data = tmp_path / "cola"
    data.mkdir()
    lines = [f"src\t{rng.randint(0, 1)}\t\t{' '.join(rng.sample(WORDS, 4))}" for _ in range(40)]
    (data / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (data / "dev.tsv").write_text("\n".join(lines[:24]) + "\n", encoding="utf-8")
    test = ["index\tsentence"] + [f"{i}\t{line.split(chr(9))[3]}"
                                  for i, line in enumerate(lines[:24])]
    (data / "test.tsv").write_text("\n".join(test) + "\n", encoding="utf-8")
    return data, [int(line.split("\t")[1]) for line in lines[:24]]


# One layer where no threshold depends on the model: the files' agreement, not learning.
def test_cola_eval_results_match_test_predictions(tmp_path):
    """eval_results.txt (accuracy, MCC) agrees exactly with test_results.tsv on the same data,
    and a second run evaluates the saved checkpoint without training."""
    flags = _setup(tmp_path, WORDS, num_hidden_layers=1)
    data, labels = _cola_like(tmp_path, random.Random(1))
    cfg = classifier.ClassifierConfig(task_name="cola", data_dir=str(data), do_train=True,
                                      do_eval=True, do_predict=True, max_seq_length=8,
                                      train_batch_size=8, num_train_steps=4,
                                      save_checkpoints_steps=2, **flags)
    classifier.run(cfg)
    res = _read_results(os.path.join(cfg.output_dir, "eval_results.txt"))
    assert set(res) == {"eval_accuracy", "eval_mcc", "eval_loss", "global_step", "loss"}
    probs = np.loadtxt(os.path.join(cfg.output_dir, "test_results.tsv"), delimiter="\t")
    preds = probs.argmax(1)
    assert res["eval_accuracy"] == pytest.approx(metrics.accuracy(labels, preds))
    assert res["eval_mcc"] == pytest.approx(metrics.matthews_corrcoef(labels, preds))
    assert res["eval_loss"] == pytest.approx(
        -np.mean(np.log(probs[np.arange(len(labels)), labels])), rel=1e-5)
    ckpts = sorted(f for f in os.listdir(cfg.output_dir) if f.endswith(".index"))
    assert ckpts == ["ckpt-2.index", "ckpt-4.index"]
    # eval only: restores ckpt-4, same numbers
    os.remove(os.path.join(cfg.output_dir, "eval_results.txt"))
    again = classifier.run(classifier.ClassifierConfig(
        task_name="cola", data_dir=str(data), do_eval=True, max_seq_length=8, **flags))
    assert again["eval"]["global_step"] == 4
    assert again["eval"]["eval_mcc"] == pytest.approx(res["eval_mcc"])
    assert again["eval"]["eval_loss"] == pytest.approx(res["eval_loss"], rel=1e-6)


def test_stsb_regression_writes_pearson_spearman(tmp_path):
    flags = _setup(tmp_path, WORDS, num_hidden_layers=1)  # no threshold: one layer
    data = tmp_path / "stsb"
    data.mkdir()
    rng = random.Random(2)
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    rows = [f"{i}\tg\tf\t2012\t{i}\ts\ts\t{' '.join(rng.sample(WORDS, 3))}\t"
            f"{' '.join(rng.sample(WORDS, 3))}\t{rng.uniform(0, 5):.2f}" for i in range(16)]
    for name in ("train.tsv", "dev.tsv"):
        (data / name).write_text(head + "\tscore\n" + "\n".join(rows) + "\n", encoding="utf-8")
    (data / "test.tsv").write_text(head + "\n" + "\n".join(r.rsplit("\t", 1)[0] for r in rows)
                                   + "\n", encoding="utf-8")
    cfg = classifier.ClassifierConfig(task_name="sts-b", data_dir=str(data), do_train=True,
                                      do_eval=True, do_predict=True, max_seq_length=10,
                                      train_batch_size=8, num_train_steps=3, **flags)
    classifier.run(cfg)
    res = _read_results(os.path.join(cfg.output_dir, "eval_results.txt"))
    assert set(res) == {"eval_pearson", "eval_spearman", "eval_loss", "global_step", "loss"}
    scores = np.loadtxt(os.path.join(cfg.output_dir, "test_results.tsv"))
    gold = [float(r.rsplit("\t", 1)[1]) for r in rows]
    assert scores.shape == (16,)
    assert res["eval_pearson"] == pytest.approx(metrics.pearson(scores, gold), abs=1e-6)
    assert res["eval_spearman"] == pytest.approx(metrics.spearman(scores, gold), abs=1e-6)
    assert res["eval_loss"] == pytest.approx(np.mean((scores - gold) ** 2), rel=1e-5)


def test_tfds_path_trains_and_evaluates(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    flags = _setup(tmp_path, list("abcdefghij"), num_hidden_layers=1)  # no threshold
    with tfds.testing.mock_data(num_examples=16):
        result = classifier.run(classifier.ClassifierConfig(
            tfds_name="glue/mrpc", do_train=True, do_eval=True, max_seq_length=16,
            train_batch_size=8, num_train_steps=2, **flags))
    assert set(result["eval"]) == {"eval_accuracy", "eval_f1", "eval_loss", "global_step",
                                   "loss"}
    assert result["eval"]["global_step"] == 2


# --- SQuAD: the answer is the word after the keyword ---------------------------------------

def _keyword_squad(path, n, rng, lo, hi):
    paras = []
    for i in range(n):
        ctx = rng.choices(WORDS, k=rng.randint(lo, hi))
        p = rng.randrange(len(ctx) - 1)
        ctx[p] = "key"
        start = len(" ".join(ctx[:p + 1])) + 1
        paras.append({"context": " ".join(ctx), "qas": [{
            "id": f"q{i}", "question": "what follows key ?",
            "answers": [{"text": ctx[p + 1], "answer_start": start}]}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                             "paragraphs": paras}]}))
    return str(path)


def test_span_extraction_learns_word_after_keyword(tmp_path):
    flags = _setup(tmp_path, ["key", "what", "follows", "?"] + WORDS)
    rng = random.Random(0)
    # contexts of up to 26 words in 24-token windows (17 context pieces, stride 8): long
    # ones span two or three windows
    train = _keyword_squad(tmp_path / "train.json", 2000, rng, 6, 26)
    dev = _keyword_squad(tmp_path / "dev.json", 150, rng, 6, 26)
    cfg = squad.SquadConfig(train_file=train, predict_file=dev, do_train=True, do_predict=True,
                            max_seq_length=24, doc_stride=8, max_query_length=8,
                            train_batch_size=32, learning_rate=1e-3, num_train_steps=250,
                            n_best_size=5, max_answer_length=4, **flags)
    result = squad.run(cfg)
    assert result["eval"]["exact_match"] >= 85.0, result["eval"]
    preds = json.load(open(os.path.join(cfg.output_dir, "predictions.json")))
    nbest = json.load(open(os.path.join(cfg.output_dir, "nbest_predictions.json")))
    assert len(preds) == 150 and set(nbest) == set(preds)
    assert all(len(v) <= 5 and v[0]["text"] == preds[k] for k, v in nbest.items())
    assert not os.path.exists(os.path.join(cfg.output_dir, "null_odds.json"))
    res = _read_results(os.path.join(cfg.output_dir, "eval_results.txt"))
    assert res["exact_match"] == result["eval"]["exact_match"] and res["global_step"] == 250


# --- NER: entities are runs of capitalised words ---------------------------------------------

def _caps_conll(path, n, rng):
    """IOB1 tags (as CoNLL-2003): a run of capitalised words is one PER entity."""
    caps = [w.capitalize() for w in WORDS]
    out = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(n):
        toks, tags, k = [], [], rng.randint(4, 12)
        while len(toks) < k:
            if rng.random() < 0.3:
                for _ in range(rng.randint(1, 3)):
                    toks.append(rng.choice(caps))
                    tags.append("I-PER")
            toks.append(rng.choice(WORDS))
            tags.append("O")
        out += [f"{t} NN O {g}" for t, g in zip(toks, tags)] + [""]
    path.write_text("\n".join(out), encoding="utf-8")


def test_tagging_learns_capitalised_runs(tmp_path):
    flags = _setup(tmp_path, WORDS + [w.capitalize() for w in WORDS])
    data = tmp_path / "conll"
    data.mkdir()
    rng = random.Random(0)
    _caps_conll(data / "train.txt", 1500, rng)
    _caps_conll(data / "valid.txt", 150, rng)  # dev.txt missing: valid.txt is used
    _caps_conll(data / "test.txt", 5, rng)
    cfg = ner.NerConfig(data_dir=str(data), do_lower_case=False, do_train=True, do_eval=True,
                        do_predict=True, max_seq_length=12, train_batch_size=32,
                        learning_rate=2e-3, num_train_steps=200, **flags)
    result = ner.run(cfg)
    res = _read_results(os.path.join(cfg.output_dir, "eval_results.txt"))
    assert res["eval_f1"] >= 0.85, res
    assert res["eval_f1"] == pytest.approx(result["eval"]["eval_f1"])
    assert {"eval_precision", "eval_recall", "eval_accuracy", "eval_f1_PER"} <= set(res)
    lines = open(os.path.join(cfg.output_dir, "test_predictions.txt")).read().split("\n\n")
    first = [line.split() for line in lines[0].splitlines()]
    assert all(len(cols) == 3 for cols in first)  # word gold predicted
    assert {c[1] for c in first} <= {"O", "B-PER", "I-PER"}  # gold converted to IOB2


# --- the shared loop under a strategy and mixed precision ------------------------------------

def _tagging_tuner(tmp_path, name, **overrides):
    from conftest import tiny_bert_config
    from bert_tf.modeling.models import BertTokenClassifier
    from bert_tf.tasks import finetune

    class NoDropoutTagging(finetune.FinetuneTask):
        # no dropout anywhere (the head's default is 0.1): replicas draw other masks
        def build_model(self):
            model = BertTokenClassifier.from_bert_config(tiny_bert_config(num_hidden_layers=1), 3,
                                                         dropout_rate=0.0)
            return finetune.built(model, self.cfg)

    cfg = finetune.RunConfig(output_dir=str(tmp_path / name), max_seq_length=8,
                             train_batch_size=4, learning_rate=1e-2, seed=1, progress=False,
                             **overrides)
    return finetune.make_trainer(NoDropoutTagging(cfg, "tagging"), cfg)


def _tagging_arrays():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 64, (4, 8)).astype(np.int32)
    # replica 0 gets examples 0-1 (7 labelled positions), replica 1 examples 2-3 (2): the loss
    # must be normalised by the global count, not averaged per replica
    weights = np.zeros((4, 8), np.float32)
    weights[0, 1:5] = weights[1, 1:4] = weights[2, 1] = weights[3, 2] = 1
    return {"input_word_ids": ids, "input_mask": np.ones_like(ids),
            "input_type_ids": np.zeros_like(ids),
            "label_ids": rng.integers(0, 3, (4, 8)).astype(np.int32), "label_weights": weights}


def test_finetuner_mirrored_and_bfloat16_match_one_device(tmp_path):
    import keras
    from bert_tf.tasks import finetune, prediction
    from conftest import TWO_CPUS
    arrays = _tagging_arrays()
    one = _tagging_tuner(tmp_path, "one", strategy="one_device")
    start = [w.copy() for w in one.model.get_weights()]
    loss_one = finetune.train(one, arrays, 2, 0)
    want = one.model.get_weights()
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(want, start)) > 1e-3
    if TWO_CPUS:
        two = _tagging_tuner(tmp_path, "two", strategy="mirrored")
        assert two.strategy.num_replicas_in_sync == 2
        two.model.set_weights(start)
        assert finetune.train(two, arrays, 2, 0) == pytest.approx(loss_one, rel=1e-5)
        for a, b in zip(two.model.get_weights(), want):
            np.testing.assert_allclose(a, b, atol=2e-5)
    # bfloat16 compute, float32 variables and outputs: predictions track the float32 model's
    try:
        bf = _tagging_tuner(tmp_path, "bf16", strategy="one_device", mixed_precision="bfloat16")
        assert bf.model.dtype_policy.compute_dtype == "bfloat16"
        assert {w.dtype for w in bf.model.get_weights()} == {np.dtype("float32")}
        bf.model.set_weights(want)
        logits = prediction.predict(bf, arrays, 3, ["logits"])["logits"]
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    full = prediction.predict(one, arrays, 3, ["logits"])["logits"]
    assert logits.dtype == np.float32 and logits.shape == (4, 8, 3)
    assert 0 < np.max(np.abs(logits - full)) < 0.1 * np.max(np.abs(full))
