"""Fine-tune -> export -> serve: a Hugging Face BertModel directory (no heads) through
`from_pretrained(text_input=True)`, `fit` on Python lists, `model.export` and a fresh process
with only TensorFlow + tensorflow_text serving raw strings; Keras data conventions (lists for
x, y and validation_data, calls on lists, errors naming the argument); ids-in exports and
`bert-export-savedmodel --init_checkpoint=<.keras>`."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import bert_tf
import keras
import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert import hf
from bert_tf.export import serving
from bert_tf.modeling import models as bm
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder

WORDS = ["good", "great", "fine", "bad", "awful", "dull", "movie", "film", "the", "a", "was",
         "plot", "very", "not", "really", "it", "##s", "##ly", ".", ","]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
# One layer: the text-in steps and exports trace it, their time is mostly tracing.
CFG = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
           intermediate_size=24, max_position_embeddings=40, hidden_dropout_prob=0.0,
           attention_probs_dropout_prob=0.0)
TRAIN = [("a good film .", 1), ("great movie", 1), ("really fine plot", 1), ("very good", 1),
         ("a bad film .", 0), ("awful movie", 0), ("really dull plot", 0), ("very bad", 0)]
TEXTS, LABELS = [t for t, _ in TRAIN], [y for _, y in TRAIN]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = ["a good movie", "an awful film", "Great movie !", ""]
PAIRS = (["good film", "dull"], ["bad", "film"])


def write_hf_dir(base):
    """A randomised BertModel as HF writes it (encoder and pooler only, no MLM/NSP heads)."""
    encoder = bm.build_model(BertEncoder.from_bert_config(BertConfig(**CFG), name="encoder"))
    rng = np.random.default_rng(0)
    for v in encoder.weights:
        v.assign(rng.normal(0.0, 0.3, v.shape).astype(np.float32)
                 + (1.0 if "gamma" in v.path else 0.0))
    vocab = base / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    return hf.save_hf_directory(encoder, str(base / "hf"), str(vocab)), encoder


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    hf_dir, _ = write_hf_dir(base)
    keras.utils.set_random_seed(0)
    clf = bert_tf.from_pretrained(hf_dir, task="classification", num_classes=2,
                                  text_input=True, seq_length=12)
    clf.compile(optimizer=keras.optimizers.Adam(3e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy()], jit_compile=False)
    history = clf.fit(TEXTS, LABELS, batch_size=8, epochs=30, verbose=0).history["loss"]
    version = clf.export(str(base / "models" / "clf" / "1"))
    return dict(base=base, hf=hf_dir, clf=clf, history=history, version=version)


def test_fit_export_serve(served):
    # The export's signatures called here (in a process with only TensorFlow + tf_text:
    # test_export_serves_in_a_process_without_bert_tf, slow)
    clf, version = served["clf"], served["version"]
    assert served["history"][-1] < 0.5 * served["history"][0], served["history"]
    assert version == str(served["base"] / "models" / "clf" / "1")
    # The in-memory model called (equal to its predict: test_keras_data_conventions).
    want = clf(PROBE).numpy()
    assert np.argmax(want[:3], -1).tolist() == [1, 0, 1]
    want_pairs = clf(PAIRS).numpy()
    loaded = tf.saved_model.load(version)
    out = loaded.signatures["serving_default"](text=tf.constant(PROBE))
    assert np.abs(out["logits"].numpy() - want).max() <= 1e-5, (out["logits"], want)
    p = np.exp(want) / np.exp(want).sum(-1, keepdims=True)
    assert np.abs(out["probabilities"].numpy() - p).max() <= 1e-5
    assert out["label_id"].numpy().tolist() == want.argmax(-1).tolist()
    assert [s.decode() for s in out["label"].numpy()] == [str(i) for i in want.argmax(-1)]
    got_pairs = loaded.signatures["serving_pairs"](text=tf.constant(PAIRS[0]),
                                                   text_b=tf.constant(PAIRS[1]))
    assert np.abs(got_pairs["logits"].numpy() - want_pairs).max() <= 1e-5
    assert sorted(loaded.signatures) == ["predict_ids", "preprocess", "serving_default",
                                         "serving_pairs"]
    # The warm-up requests TF Serving replays at load time run against the export.
    requests = serving.read_warmup_file(os.path.join(version, "assets.extra",
                                                     serving.WARMUP_FILE))
    assert [r.model_spec.signature_name for r in requests] == [
        "serving_default", "serving_default", "serving_pairs", "predict_ids"]
    assert {r.model_spec.name for r in requests} == {"clf"}
    outs = [serving.run_predict_request(loaded, r) for r in requests]
    assert outs[1]["logits"].shape == (3, 2)
    meta = json.load(open(os.path.join(version, "assets.extra", "bert_tf_export.json")))
    assert (meta["task"], meta["seq_length"], meta["labels"]) == ("classification", 12, ["0", "1"])


# slow: tests/test_export.py::test_fresh_process_matches_in_memory_models (a process with only
# TensorFlow + tf_text, no bert_tf, serves text-in exports of the same EndToEndModule that
# model.export writes; this export's outputs in this process: test_fit_export_serve)
@pytest.mark.slow
def test_export_serves_in_a_process_without_bert_tf(served):
    clf, version = served["clf"], served["version"]
    want = clf.predict(PROBE, verbose=0)
    pairs = (["good film", "dull"], ["bad", "film"])
    want_pairs = clf.predict(pairs, verbose=0)
    np.save(served["base"] / "want.npy", want)
    np.save(served["base"] / "want_pairs.npy", want_pairs)
    code = f"""
import sys, numpy as np, tensorflow as tf, tensorflow_text  # the ops TF Serving has
m = tf.saved_model.load({version!r})
out = m.signatures["serving_default"](text=tf.constant({PROBE!r}))
want = np.load({str(served['base'] / 'want.npy')!r})
assert np.abs(out["logits"].numpy() - want).max() <= 1e-5, (out["logits"], want)
p = np.exp(want) / np.exp(want).sum(-1, keepdims=True)
assert np.abs(out["probabilities"].numpy() - p).max() <= 1e-5
assert out["label_id"].numpy().tolist() == want.argmax(-1).tolist()
assert [s.decode() for s in out["label"].numpy()] == [str(i) for i in want.argmax(-1)]
pairs = m.signatures["serving_pairs"](text=tf.constant({pairs[0]!r}),
                                       text_b=tf.constant({pairs[1]!r}))
want = np.load({str(served['base'] / 'want_pairs.npy')!r})
assert np.abs(pairs["logits"].numpy() - want).max() <= 1e-5
assert not [n for n in sys.modules if n.startswith("bert_tf")]
print(sorted(m.signatures))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split("\n")[-2] == ("['predict_ids', 'preprocess', 'serving_default', "
                                          "'serving_pairs']")


def test_keras_data_conventions(served):
    clf = served["clf"]
    # A call on a list is predict's forward pass.
    np.testing.assert_allclose(clf(PROBE).numpy(), clf.predict(PROBE, verbose=0), atol=1e-5)
    np.testing.assert_allclose(clf(PAIRS).numpy(), clf.predict(PAIRS, verbose=0), atol=1e-5)
    # evaluate on lists == evaluate on arrays / tensors.
    got = clf.evaluate(TEXTS, LABELS, batch_size=8, verbose=0)
    ref = clf.evaluate(tf.constant(TEXTS), np.array(LABELS), batch_size=8, verbose=0)
    assert got == ref and got[1] == 1.0
    # validation_data as lists: val_loss is evaluate's loss on the weights after the epoch.
    # Batches of 8, as the fixture's fit and the evaluate above (their steps traced once); the
    # validation labels flipped, so that val_loss is not the training loss.
    flipped = [1 - y for y in LABELS]
    frozen = clf.optimizer.learning_rate.numpy()
    clf.optimizer.learning_rate.assign(0.0)
    try:
        hist = clf.fit(TEXTS, LABELS, batch_size=8, epochs=1, verbose=0,
                       validation_data=(TEXTS, flipped)).history
    finally:
        clf.optimizer.learning_rate.assign(frozen)
    want = clf.evaluate(TEXTS, flipped, batch_size=8, verbose=0)
    assert abs(hist["val_loss"][0] - want[0]) < 1e-6 and hist["val_sparse_categorical_accuracy"][
        0] == want[1] == 0.0
    assert hist["loss"][0] < want[0]

    def error(fn):
        with pytest.raises(BertError) as e:
            fn()
        assert "\n" not in str(e.value)
        return str(e.value)

    assert error(lambda: clf.fit(TEXTS[:2], ["pos", "neg"], verbose=0)) == (
        "y: expected numbers (class ids 0..n-1 for classification), got strings such as 'pos'")
    assert error(lambda: clf.fit(TEXTS[:2], [1], verbose=0)) == "x and y: 2 inputs but 1 labels"
    assert error(lambda: clf.fit(TEXTS[:2], [1, 0], verbose=0,
                                 validation_data=(TEXTS[:3], [1, 0]))) == (
        "validation_data: 3 inputs but 2 labels")
    assert error(lambda: clf.evaluate([1, 2], [1, 0], verbose=0)) == (
        "x: expected strings, got int 1 at index 0")
    assert error(lambda: clf("one text")) == "inputs: a single string; pass a list of strings"
    assert error(lambda: clf.predict((["a", "b"], ["c"]), verbose=0)) == (
        "x: the two lists of a sentence pair have 2 and 1 texts")


def _ids_classifier(served):
    """An ids-in classifier fit on lists of ids: (model, its ids, its logits on them)."""
    keras.utils.set_random_seed(1)
    clf = bert_tf.from_pretrained(served["hf"], task="classification", num_classes=3)
    tok = served["clf"].preprocessor
    ids = {k: v.numpy().tolist() for k, v in tok(tf.constant(TEXTS)).items()}
    clf.compile(optimizer=keras.optimizers.Adam(3e-3),
                loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
                jit_compile=False)
    before = clf.evaluate(ids, {"logits": LABELS}, verbose=0)
    clf.fit(ids, {"logits": LABELS}, batch_size=8, epochs=5, verbose=0)
    assert clf.evaluate(ids, {"logits": LABELS}, verbose=0) < before
    return clf, ids, clf.predict(ids, verbose=0)["logits"]


def test_ids_models_take_lists_and_export_ids_in(served, tmp_path):
    clf, ids, want = _ids_classifier(served)
    np.testing.assert_allclose(clf(ids)["logits"].numpy(), want, atol=1e-5)
    with pytest.raises(BertError, match=r"^x: strings need a text-in model"):
        clf.predict(TEXTS, verbose=0)
    path = clf.export(str(tmp_path / "ids" / "3"), labels=["neg", "neu", "pos"], verbose=False)
    loaded = tf.saved_model.load(path)
    assert sorted(loaded.signatures) == ["predict_ids", "serving_default"]
    arrays = {k: tf.constant(v, tf.int32) for k, v in ids.items()}
    out = loaded.signatures["serving_default"](**arrays)
    np.testing.assert_allclose(out["logits"].numpy(), want, atol=1e-5)
    assert [s.decode() for s in out["label"].numpy()] == [
        ["neg", "neu", "pos"][i] for i in want.argmax(-1)]
    requests = serving.read_warmup_file(os.path.join(path, "assets.extra", serving.WARMUP_FILE))
    assert [serving.run_predict_request(loaded, r)["logits"].shape for r in requests] == [
        (1, 3), (2, 3), (1, 3), (2, 3)]


# slow: test_fit_export_serve (export_model's text-in path: a text-in model's export writes
# its vocab to a file and takes the same vocab_file branch, EndToEndModule, as an ids model
# exported with vocab_file=)
@pytest.mark.slow
def test_ids_model_exports_text_in_with_its_vocab(served, tmp_path):
    clf, ids, want = _ids_classifier(served)
    text = clf.export(str(tmp_path / "text" / "1"), vocab_file=str(served["base"] / "vocab.txt"),
                      seq_length=12, verbose=False)
    got = tf.saved_model.load(text).signatures["serving_default"](text=tf.constant(TEXTS))
    np.testing.assert_allclose(got["logits"].numpy(), want, atol=1e-5)


def test_export_savedmodel_takes_a_keras_file(served):
    from conftest import run_export_savedmodel
    base = served["base"]
    keras_file = str(base / "clf.keras")
    served["clf"].save(keras_file)  # compiled and fit
    # The command as a process (the checkout's export_savedmodel.py: bert-export-savedmodel's
    # main(), its flags parsed) to a successful export, its `exported <path>` line last on
    # stdout: the default suite's successful run of the script as a process (its errors as
    # processes: test_export_serving.py::test_export_script_errors_are_one_line).
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "export_savedmodel.py"),
         f"--init_checkpoint={keras_file}", f"--export_base={base / 'cli'}", "--model_name=clf"],
        cwd=str(base), capture_output=True, text=True, timeout=300,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    version = str(base / "cli" / "clf" / "1")
    assert proc.stdout.strip().split("\n")[-1] == f"exported {version}"
    out = tf.saved_model.load(version).signatures["serving_default"](text=tf.constant(PROBE))
    np.testing.assert_allclose(out["logits"].numpy(), served["clf"](PROBE).numpy(), atol=1e-5)
    meta = json.load(open(os.path.join(version, "assets.extra", "bert_tf_export.json")))
    assert (meta["task"], meta["seq_length"], meta["model_name"]) == ("classification", 12, "clf")
    # The refusal, run() in this process (the script turns a BertError into its one `error:`
    # line and exit 1: test_export_serving.py::test_export_script_errors_are_one_line)
    with pytest.raises(BertError) as bad:
        run_export_savedmodel([f"--init_checkpoint={keras_file}", f"--export_dir={base / 'x'}",
                               "--task=span"])
    assert str(bad.value) == (
        f"--task=span: {keras_file} holds a BertClassifier (classification); leave "
        f"--task out, or use --task=embeddings")
    assert not os.path.exists(base / "x")
