"""bert_tf.from_pretrained on every format bert_tf writes itself, text-in models, and the lazy
Keras registration of `import bert_tf` (peer formats: tests/test_peers_pretrained.py)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import bert_tf
import keras
import tensorflow as tf

from bert_tf import BertError, tokenization
from bert_tf.convert import checkpoints, formats, hf
from bert_tf.modeling import models as bm
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.pretrained import casing_from_name, from_pretrained, read_pretrained

WORDS = ["good", "great", "fine", "bad", "awful", "dull", "movie", "film", "the", "a", "was",
         "plot", "very", "not", "really", "it", "##s", "##ly", ".", ","]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["Good", "Bad"]
CFG = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
           intermediate_size=24, max_position_embeddings=40, type_vocab_size=2,
           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # fit() learns in 20 steps
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def randomize(model, seed=0):
    # Not the initialiser's values: every bias and LayerNorm differs, so a swapped or
    # untransposed tensor shows in the outputs.
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0.0, 0.3, v.shape).astype(np.float32)
                 + (1.0 if "gamma" in v.path else 0.0))


def ids_batch():
    rng = np.random.default_rng(1)
    ids = rng.integers(0, CFG["vocab_size"], (3, 9)).astype(np.int32)
    mask = np.ones((3, 9), np.int32)
    mask[1, 5:] = 0
    types = np.zeros((3, 9), np.int32)
    types[:, 4:] = 1
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A randomised BertPretrainer written in each format bert_tf writes without peers."""
    from bert_tf import export
    from bert_tf.convert.tf1 import save_tf1_checkpoint
    base = tmp_path_factory.mktemp("pretrained")
    cfg = BertConfig(**CFG)
    model = bm.build_model(bm.BertPretrainer.from_bert_config(cfg))
    randomize(model)
    vocab = base / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    orig = base / "uncased_L-2_H-16_A-2"  # an original release directory
    orig.mkdir()
    cfg.to_json_file(str(orig / "bert_config.json"))
    (orig / "vocab.txt").write_text(vocab.read_text())
    save_tf1_checkpoint(model, str(orig / "bert_model.ckpt"))
    hf_dir = hf.save_hf_directory(model, str(base / "hf"), str(vocab), do_lower_case=False)
    # A training output directory: tf.train.Checkpoint(model=...) via the manager, and the
    # encoder export training writes under export/ (no bert_config.json, no vocab).
    train = base / "train"
    step = tf.Variable(7, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, global_step=step), str(train),
                               max_to_keep=1, checkpoint_name="model.ckpt").save(7)
    export.export_encoder(model.encoder, str(train / "export"))
    x = ids_batch()
    out = model(dict(x), training=False)
    return dict(model=model, cfg=cfg, vocab=str(vocab), orig=str(orig), hf=hf_dir,
                train=str(train), export=str(train / "export"), x=x,
                ref={k: np.asarray(out[k]) for k in ("sequence_output", "pooled_output",
                                                     "mlm_logits", "nsp_logits")})


def assert_matches(got, ref, keys=("sequence_output", "pooled_output")):
    for key in keys:
        np.testing.assert_allclose(np.asarray(got[key]), ref[key], atol=1e-5, err_msg=key)


@pytest.mark.parametrize("fmt,where,lower,vocab", [
    ("tf1", "orig", True, "orig"), ("hf", "hf", False, "hf"),
    ("bert_tf_export", "export", None, None), ("bert_tf", "train", None, None)])
def test_every_format_bert_tf_writes(src, fmt, where, lower, vocab):
    info = read_pretrained(src[where])
    assert info.detected.format == fmt
    assert info.bert_config == src["cfg"]
    if vocab:
        assert tokenization.vocab_tokens(info.vocab_file) == VOCAB
        assert os.path.dirname(info.vocab_file) == src[vocab]
    else:
        assert info.vocab_file is None  # the encoder export carries none
    if lower is not None:
        assert (info.do_lower_case, info.strip_accents) == (lower, lower)
    enc = from_pretrained(src[where])
    assert type(enc) is BertEncoder and enc.bert_config == src["cfg"]
    assert_matches(enc(dict(src["x"]), training=False), src["ref"])
    # The same paths work as --init_checkpoint (load_checkpoint).
    again = bm.BertClassifier.from_bert_config(src["cfg"], 3)
    report = checkpoints.load_checkpoint(again, src[where])
    assert report["missing"] == ["output_bias", "output_weights"]
    assert_matches(again.encoder(dict(src["x"]), training=False), src["ref"])


@pytest.mark.parametrize("where", ["orig", "hf", "train"])
def test_pretraining_heads_load(src, where):
    pre = from_pretrained(src[where], task="pretraining")
    assert type(pre) is bm.BertPretrainer
    assert_matches(pre(dict(src["x"]), training=False), src["ref"],
                   ("sequence_output", "mlm_logits", "nsp_logits"))


def test_tasks_and_casing(src, tmp_path):
    clf = from_pretrained(src["orig"], task="classification", num_classes=3)
    assert type(clf) is bm.BertClassifier and clf.num_classes == 3
    tagger = from_pretrained(src["hf"], task="tagging", num_classes=5)
    assert type(tagger) is bm.BertTokenClassifier and tagger.num_labels == 5
    span = from_pretrained(src["train"], task="span")
    assert type(span) is bm.BertSpanLabeler
    assert_matches(span.encoder(dict(src["x"]), training=False), src["ref"])
    assert [casing_from_name(p) for p in (
        "a/uncased_L-12_H-768_A-12/bert_model.ckpt", "cased_L-12_H-768_A-12",
        "multi_cased_L-12_H-768_A-12/", "wwm_uncased_L-24_H-1024_A-16",
        "multilingual_L-12_H-768_A-12", "hub/bert_en_cased_L-12_H-768_A-12/4",
        "chinese_L-12_H-768_A-12", "showcased/x")] == [
        True, False, False, True, None, False, None, None]
    # A cased original directory; explicit arguments win.
    cased = tmp_path / "cased_L-2_H-16_A-2"
    cased.mkdir()
    for name in os.listdir(src["orig"]):
        (cased / name).write_bytes(open(os.path.join(src["orig"], name), "rb").read())
    assert read_pretrained(str(cased)).do_lower_case is False
    assert read_pretrained(str(cased), do_lower_case=True).do_lower_case is True
    # A training directory's config and vocab can be passed when it has no export.
    info = read_pretrained(src["train"], vocab_file=src["vocab"], do_lower_case=False)
    assert (info.vocab_file, info.do_lower_case) == (src["vocab"], False)


def test_text_input_keeps_accents_when_the_source_does(src, tmp_path):
    # A HF directory whose tokenizer lower-cases but keeps accents (strip_accents: false).
    hf_dir = tmp_path / "hf_keep_accents"
    shutil.copytree(src["hf"], hf_dir)
    config = json.loads((hf_dir / "tokenizer_config.json").read_text())
    config.update(do_lower_case=True, strip_accents=False)
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(config))
    info = read_pretrained(str(hf_dir))
    assert (info.do_lower_case, info.strip_accents) == (True, False)
    enc = from_pretrained(str(hf_dir), text_input=True, seq_length=10)
    assert (enc.preprocessor.do_lower_case, enc.preprocessor.strip_accents) == (True, False)
    text = "GOOD fïlm, Fïlm film"
    tok = tokenization.FullTokenizer(src["vocab"], True, strip_accents=False)
    want = tok.convert_tokens_to_ids(["[CLS]"] + tok.tokenize(text) + ["[SEP]"])
    assert want == [2, 5, 1, 24, 1, 12, 3]  # fïlm is no vocab word; stripped it would be film
    ids = enc.preprocessor(tf.constant([text]))
    assert ids["input_word_ids"].numpy().tolist() == [want + [0] * 3]
    x = {k: v.numpy() for k, v in ids.items()}
    assert_matches(enc(tf.constant([text])), {
        k: np.asarray(v) for k, v in from_pretrained(str(hf_dir))(x, training=False).items()})
    # The casing survives a .keras file; do_lower_case given wins (the original's casing).
    enc.save(str(tmp_path / "enc.keras"))
    again = keras.saving.load_model(str(tmp_path / "enc.keras"))
    assert again.preprocessor.strip_accents is False
    assert again.preprocessor(tf.constant([text]))["input_word_ids"].numpy().tolist() == [
        want + [0] * 3]
    info = read_pretrained(str(hf_dir), do_lower_case=True)
    assert (info.do_lower_case, info.strip_accents) == (True, True)


def test_errors_are_one_line(src, tmp_path):
    def error(fn, *args, **kwargs):
        with pytest.raises(BertError) as e:
            fn(*args, **kwargs)
        assert "\n" not in str(e.value)
        return str(e.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    msg = error(from_pretrained, str(empty))
    assert msg.startswith(f"{empty}: no checkpoint found") and "saved_model.pb" in msg
    assert "model.safetensors" in msg and "model.weights.h5" in msg
    assert error(from_pretrained, src["orig"], task="classification") == (
        "task='classification' needs num_classes (a positive int), got None")
    assert error(from_pretrained, src["orig"], task="span", num_classes=2).startswith(
        "num_classes is only for")
    assert error(from_pretrained, src["orig"], task="ner").startswith("task='ner': expected")
    # A training directory without config or export: what to pass.
    bare = tmp_path / "bare"
    tf.train.Checkpoint(model=src["model"]).write(str(bare / "model.ckpt-1"))
    assert "pass bert_config_file=..." in error(from_pretrained, str(bare))
    assert "no vocab found" in error(from_pretrained, src["export"], text_input=True)
    assert "seq_length=99" in error(from_pretrained, src["orig"], text_input=True,
                                    seq_length=99)
    other = tmp_path / "other"
    tf.train.Checkpoint(thing=tf.Variable(1.0)).write(str(other / "ckpt"))
    assert "no BERT encoder under" in error(from_pretrained, str(other))
    assert formats.detect(src["hf"] + "/model.safetensors")[0].name == "hf"


TRAIN = [("a good film .", 1), ("great movie", 1), ("really fine plot", 1), ("very good", 1),
         ("a bad film .", 0), ("awful movie", 0), ("really dull plot", 0), ("very bad", 0)]
PROBE = ["a good movie", "an awful film", "Great movie !"]


def text_classifier(src):
    """A text-in classifier from the original release directory, its new head seeded."""
    keras.utils.set_random_seed(0)  # the new head's initialisation
    return from_pretrained(src["orig"], task="classification", num_classes=2, text_input=True,
                           seq_length=12)


@pytest.fixture(scope="module")
def text_clf(src, tmp_path_factory):
    """A text-in classifier (not fine-tuned: test_text_classifier_fine_tunes_on_raw_strings),
    saved to .keras with its logits (a direct call: predict on strings is
    test_text_classifier_takes_raw_strings' pairs, no second predict function traced)."""
    clf = text_classifier(src)
    logits = keras.ops.convert_to_numpy(clf(PROBE))
    base = tmp_path_factory.mktemp("text_clf")
    clf.save(str(base / "clf.keras"))
    np.save(base / "want.npy", logits)
    return dict(model=clf, logits=logits, path=str(base / "clf.keras"),
                want=str(base / "want.npy"))


def test_text_classifier_takes_raw_strings(src, text_clf):
    clf = text_clf["model"]
    assert type(clf) is bert_tf.pretrained.BertTextModel
    # The in-graph ids are FullTokenizer's (uncased: "GOOD" -> "good").
    text = "The plot was really GOOD, not dull!"
    tok = tokenization.FullTokenizer(src["vocab"], do_lower_case=True)
    want = tok.convert_tokens_to_ids(["[CLS]"] + tok.tokenize(text) + ["[SEP]"])
    assert want == [2, 13, 16, 15, 19, 5, 24, 18, 10, 1, 3]
    ids = clf.preprocessor(tf.constant([text]))
    assert ids["input_word_ids"].numpy().tolist() == [want + [0]]
    assert ids["input_mask"].numpy().tolist() == [[1] * 11 + [0]]
    # Sentence pairs: [CLS] a [SEP] b [SEP], b with type id 1.
    pair = clf.preprocessor((tf.constant(["good film"]), tf.constant(["bad"])))
    assert pair["input_word_ids"].numpy().tolist() == [[2, 5, 12, 3, 8, 3] + [0] * 6]
    assert pair["input_type_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1] + [0] * 6]
    assert text_clf["logits"].shape == (3, 2)
    pairs = (["good film", "dull"], ["bad", "film"])
    direct = clf.model(clf.preprocessor(tuple(tf.constant(p) for p in pairs)))["logits"]
    np.testing.assert_allclose(clf.predict(pairs, verbose=0), direct.numpy(), atol=1e-6)
    # A text-in encoder returns the encoder's dict.
    enc = from_pretrained(src["orig"], text_input=True, seq_length=8)
    out = enc(tf.constant(["a good film"]))
    assert sorted(out) == ["encoder_outputs", "pooled_output", "sequence_output"]
    assert out["sequence_output"].shape == (1, 8, 16)


# slow: tests/test_serve_path.py::test_fit_export_serve (the same fit of a from_pretrained
# text-in classifier on these raw strings, there from a Hugging Face directory: the loss falls,
# the probes are classified [1, 0, 1]) and tests/test_docs.py::test_api_examples_run (API.md: a
# text classifier of a release directory fit on strings, saved and reloaded in its process);
# the text-in model of an original release: test_text_classifier_takes_raw_strings.
# Not in the default suite since `text_clf` is no longer fit: `keras.saving.load_model` in a
# fresh process of a compiled *and trained* text-in .keras (optimizer state in the file).
# test_keras_file_loads_after_import_bert_tf loads text_clf compiled (by from_pretrained) but
# untrained; test_serve_path.py::test_export_savedmodel_takes_a_keras_file's process loads the
# fit classifier's .keras with compile=False (its weights, not its optimizer state).
@pytest.mark.slow
def test_text_classifier_fine_tunes_on_raw_strings(src):
    clf = text_classifier(src)
    texts, labels = [t for t, _ in TRAIN], np.array([y for _, y in TRAIN])
    clf.compile(optimizer=keras.optimizers.Adam(3e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = clf.fit(texts, labels, batch_size=8, epochs=20, verbose=0).history["loss"]
    assert history[-1] < 0.6 * history[0], history
    logits = clf.predict(PROBE, verbose=0)
    assert logits.shape == (3, 2) and np.argmax(logits, -1).tolist() == [1, 0, 1]


def test_keras_file_loads_after_import_bert_tf(text_clf):
    # A fresh process where `import bert_tf` comes first (the import hook registers the
    # classes when keras loads): no bert_tf module imported by hand, identical logits (direct
    # calls, as text_clf's). Then bert_tf's lazy submodules (was test_handoffs.py's
    # test_lazy_submodules, its own TensorFlow process): bert_tf.export, not imported by
    # loading the file, resolves on attribute access, load_as_keras_model from its module.
    code = ("import sys, numpy as np, bert_tf, keras\n"
            "assert 'bert_tf.modeling.models' not in sys.modules\n"
            f"m = keras.saving.load_model({text_clf['path']!r})\n"
            f"got = keras.ops.convert_to_numpy(m({PROBE!r}))\n"
            f"assert np.array_equal(got, np.load({text_clf['want']!r})), got\n"
            "print(type(m).__name__, m.preprocessor.seq_length, m.preprocessor.do_lower_case)\n"
            "assert 'bert_tf.export' not in sys.modules\n"
            "print(bert_tf.export.load_as_keras_model.__module__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[-3:] == ["BertTextModel 12 True",
                                           "bert_tf.export.keras_loading", ""]


def test_registration_when_keras_came_first(text_clf):
    # keras imported before bert_tf: `import bert_tf` fills the registry at once, with
    # stand-ins that import the class's module when Keras asks for the object.
    import types
    registry = types.SimpleNamespace(GLOBAL_CUSTOM_OBJECTS={"bert_tf>BertClassifier": int})
    bert_tf._register(registry)
    objects = registry.GLOBAL_CUSTOM_OBJECTS
    assert objects["bert_tf>BertClassifier"] is int  # never overwrites a registered class
    stand_in = objects["bert_tf>BertTextModel"]
    assert (stand_in.module, stand_in.name) == ("bert_tf.pretrained", "BertTextModel")
    config = text_clf["model"].get_config()
    rebuilt = stand_in.from_config(config)
    assert type(rebuilt) is bert_tf.pretrained.BertTextModel
    assert rebuilt.preprocessor.vocabulary == VOCAB and rebuilt.model.num_classes == 2
    assert type(objects["bert_tf>WarmupLinearDecay"](1e-3, 10, 2)).__name__ == "WarmupLinearDecay"


def test_import_bert_tf_is_light_and_registers_every_class():
    light = subprocess.run([sys.executable, "-c", "import sys, bert_tf; print(sorted(m for m in "
                            "sys.modules if m.split('.')[0] in ('tensorflow', 'keras', "
                            "'numpy')))"], capture_output=True, text=True, cwd=ROOT)
    assert light.stdout.strip() == "[]", light.stderr[-2000:]
    # What `import bert_tf` registers lazily == what the modules register when imported.
    import importlib
    for module in bert_tf.SERIALIZABLE:
        importlib.import_module(module)
    table = sorted(f"bert_tf>{n}" for names in bert_tf.SERIALIZABLE.values() for n in names)
    objects = keras.saving.get_custom_objects()
    assert sorted(k for k in objects if k.startswith("bert_tf>")) == table
    # The modules' classes replaced the stand-ins.
    assert all(isinstance(objects[k], type) and objects[k].__module__ == module
               for module, names in bert_tf.SERIALIZABLE.items() for k in
               (f"bert_tf>{n}" for n in names))
    # Every decorator in the source is in the table.
    found = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "bert_tf")):
        for f in files:
            if f.endswith(".py"):
                text = open(os.path.join(dirpath, f), encoding="utf-8").read()
                found |= {m.split("class ")[1].split("(")[0] for m in text.split(
                    "@keras.saving.register_keras_serializable(package=\"bert_tf\")\n")[1:]}
    assert sorted(f"bert_tf>{n}" for n in found) == table
