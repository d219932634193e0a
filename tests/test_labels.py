"""Labels travel with the model: from_pretrained(labels=...) -> the model's config -> a .keras
file -> bert-export-savedmodel serves the names, not '0'/'1'; export(labels=...) overrides."""
import json

import numpy as np
import pytest

import bert_tf
import keras
import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert.tf1 import save_tf1_checkpoint
from bert_tf.modeling import models as bm
from bert_tf.modeling.config import BertConfig
from conftest import run_export_savedmodel

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film", "the", "was"]
TEXTS = ["the film was good", "bad film", "the the bad", "good good good"]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A tiny original release directory with random (not initial) weights."""
    d = tmp_path_factory.mktemp("labels") / "uncased_L-1_H-16_A-2"
    d.mkdir()
    cfg = BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=24, max_position_embeddings=16)
    model = bm.build_model(bm.BertPretrainer.from_bert_config(cfg))
    rng = np.random.default_rng(0)
    for v in model.weights:
        v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
    cfg.to_json_file(str(d / "bert_config.json"))
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    save_tf1_checkpoint(model, str(d / "bert_model.ckpt"))
    return d


def _served_labels(path, texts=TEXTS):
    out = tf.saved_model.load(str(path)).signatures["serving_default"](text=tf.constant(texts))
    return [s.decode() for s in out["label"].numpy()], out["logits"].numpy()


def _labelled_classifier(release):
    """A text-in classifier with labels ["neg", "pos"] and a head where both classes win on
    some text, so names cannot match by luck: (model, its logits on TEXTS)."""
    clf = bert_tf.from_pretrained(str(release), task="classification", labels=["neg", "pos"],
                                  text_input=True, seq_length=8)
    assert clf.model.num_classes == 2 and clf.model.labels == ["neg", "pos"]
    rng = np.random.default_rng(3)
    kernel, bias = clf.model.classifier.dense.kernel, clf.model.classifier.dense.bias
    kernel.assign(rng.normal(0.0, 2.0, kernel.shape).astype(np.float32))
    bias.assign(np.zeros(bias.shape, np.float32))
    bias.assign(-clf.predict(TEXTS, verbose=0).mean(0))  # centred: each class wins somewhere
    logits = clf.predict(TEXTS, verbose=0)
    assert len(set(logits.argmax(-1))) == 2, logits
    return clf, logits


def test_labels_from_pretrained_through_a_keras_file_to_the_served_model(release, tmp_path):
    clf, logits = _labelled_classifier(release)
    path = tmp_path / "clf.keras"
    clf.save(str(path))
    again = keras.saving.load_model(str(path))
    assert again.model.labels == ["neg", "pos"]
    assert again.model.get_config()["labels"] == ["neg", "pos"]
    # bert-export-savedmodel's run() in this process (the script as a process:
    # test_export_serving.py::test_export_script_errors_are_one_line)
    version = tmp_path / "serve" / "clf" / "1"
    assert run_export_savedmodel([f"--init_checkpoint={path}",
                                  f"--export_base={tmp_path / 'serve'}",
                                  "--model_name=clf"]) == str(version)
    labels, served = _served_labels(version)
    np.testing.assert_allclose(served, logits, atol=1e-5)
    assert labels == [["neg", "pos"][i] for i in logits.argmax(-1)]
    meta = json.loads((version / "assets.extra" / "bert_tf_export.json").read_text())
    assert meta["labels"] == ["neg", "pos"]
    # labels=... given to model.export wins over the model's own (model.export with none:
    # test_model_export_serves_the_models_own_labels, slow).
    other = clf.export(str(tmp_path / "other" / "1"), labels=["n", "p"], verbose=False)
    assert _served_labels(other)[0] == [["n", "p"][i] for i in logits.argmax(-1)]


# slow: test_labels_from_pretrained_through_a_keras_file_to_the_served_model (the .keras
# export there is keras_export.export_model with labels=None, the function model.export calls:
# the model's own labels served; model.export itself: its labels=... override there)
@pytest.mark.slow
def test_model_export_serves_the_models_own_labels(release, tmp_path):
    clf, logits = _labelled_classifier(release)
    own = clf.export(str(tmp_path / "own" / "1"), verbose=False)
    labels, served = _served_labels(own)
    np.testing.assert_allclose(served, logits, atol=1e-5)
    assert labels == [["neg", "pos"][i] for i in logits.argmax(-1)]


def test_label_arguments_and_the_tagger_config(release):
    clf = bert_tf.from_pretrained(str(release), task="classification", num_classes=3,
                                  labels=("a", "b", 2))
    assert clf.labels == ["a", "b", "2"]
    assert bert_tf.from_pretrained(str(release), task="classification",
                                   num_classes=2).labels is None  # exports serve "0", "1"
    with pytest.raises(BertError, match=r"^labels: 2 names given, but num_classes=3$"):
        bert_tf.from_pretrained(str(release), task="classification", num_classes=3,
                                labels=["a", "b"])
    with pytest.raises(BertError, match=r"^labels are only for task='classification' or "
                                        r"'tagging', not task='span'$"):
        bert_tf.from_pretrained(str(release), task="span", labels=["a"])
    with pytest.raises(BertError, match=r"^labels: expected a list of names"):
        bert_tf.from_pretrained(str(release), task="classification", labels="ab")
    with pytest.raises(BertError, match=r"^labels: names repeat"):
        bert_tf.from_pretrained(str(release), task="classification", labels=["a", "a"])
    tagger = bert_tf.from_pretrained(str(release), task="tagging", labels=["O", "B-X", "I-X"])
    config = tagger.get_config()
    assert config["num_labels"] == 3 and config["labels"] == ["O", "B-X", "I-X"]
    again = bm.BertTokenClassifier.from_config(json.loads(json.dumps(config)))
    assert again.labels == ["O", "B-X", "I-X"]
    # Labels are configuration only: the checkpoint's objects are unchanged.
    assert "labels" not in dict(tf.train.TrackableView(tagger).children(tagger))
