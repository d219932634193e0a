"""keras-hub BERT presets <-> bert_tf, both ways: parity 1e-5 with BertBackbone, the exported
preset loads as BertBackbone / BertTextClassifier and its tokenizer gives our ids; on accented
text the tokenizer's casing (lowercase, strip_accents) gives the same ids both ways.

Marked `peers` (keras-hub): a missing peer fails every test. Nothing is downloaded: backbones
are built from configs.
"""
import os

import numpy as np
import pytest

import bert_tf  # noqa: F401
import keras
try:
    import keras_hub
    PEER_ERROR = None
except ImportError as e:  # conftest fails every test of this module (never skips)
    PEER_ERROR = e

from bert_tf import BertError, tokenization
from bert_tf.convert import interop
from bert_tf.convert import keras_hub as khc
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder

pytestmark = pytest.mark.peers

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "the", "quick", "brown",
         "fox", "jump", "##s", "over", "lazy", "dog", "cafe", "naive", "run", "##ning", "in",
         "paris", "a", "good", "movie", "un", "##want", "##ed"]
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Café in PARIS, naïve RUNNING!",
         "unwanted", "", "a good movie " * 10]
SEQ = 16


def randomize(variables, seed):
    rng = np.random.default_rng(seed)
    for v in variables:
        v.assign(rng.normal(0.0, 0.3, v.shape).astype(np.float32)
                 + (1.0 if "gamma" in (getattr(v, "path", None) or v.name) else 0.0))


def ids_batch(seed=0, batch=3, seq=10):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, len(VOCAB), (batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    types = (np.arange(seq)[None, :] >= 4).astype(np.int32).repeat(batch, 0)
    return ids, mask, types


def assert_parity(encoder, backbone, seed):
    ids, mask, types = ids_batch(seed)
    ours = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types},
                   training=False)
    theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": types},
                      training=False)
    for key in ("sequence_output", "pooled_output"):
        a, b = keras.ops.convert_to_numpy(ours[key]), keras.ops.convert_to_numpy(theirs[key])
        np.testing.assert_allclose(a, b, atol=1e-5, err_msg=key)
        assert np.abs(b).max() > 0.1


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return str(path)


def test_keras_hub_preset_into_bert_tf(tmp_path):
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=2, num_heads=4, hidden_dim=16,
        intermediate_dim=24, max_sequence_length=32, num_segments=3)
    randomize(backbone.weights, 1)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=True).save_to_preset(preset)
    model, vocab, lower, strip = khc.load_keras_hub_preset_with_casing(preset)
    # keras-hub's BertTokenizer(lowercase=True) keeps accents: no do_lower_case says that
    assert isinstance(model, BertEncoder) and (lower, strip) == (True, False)
    with pytest.raises(BertError, match="lowercase=True, strip_accents=False, which no "
                       "do_lower_case reproduces") as e:
        khc.load_keras_hub_preset(preset)
    assert "\n" not in str(e.value)
    assert tokenization.vocab_tokens(vocab) == VOCAB
    assert model.bert_config == BertConfig(
        vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=24, max_position_embeddings=32, type_vocab_size=3)
    assert_parity(model, backbone, 2)


def test_bert_tf_into_keras_hub_preset(tmp_path, vocab_file):
    cfg = BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=24, max_position_embeddings=32,
                     type_vocab_size=2)
    model = interop.build_bert_model(cfg, with_pretraining_heads=True)
    randomize(model.weights, 3)
    preset = khc.save_keras_hub_preset(model, vocab_file, True, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["out", "vocab.txt"]  # no temp dir left
    backbone = keras_hub.models.BertBackbone.from_preset(preset)
    assert_parity(model.encoder, backbone, 4)
    # the tokenizer of the preset gives the original FullTokenizer's ids (accents, case)
    ref = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
    tok = keras_hub.models.BertTokenizer.from_preset(preset)
    for text in TEXTS:
        want = ref.convert_tokens_to_ids(ref.tokenize(text))
        assert keras.ops.convert_to_numpy(tok(text)).tolist() == want, text
    assert ref.tokenize(TEXTS[1]) == ["cafe", "in", "paris", ",", "naive", "run", "##ning", "!"]
    # the task model loads from it too; same pooled features -> same head input
    clf = keras_hub.models.BertTextClassifier.from_preset(
        preset, num_classes=2, preprocessor=keras_hub.models.BertTextClassifierPreprocessor
        .from_preset(preset, sequence_length=SEQ))
    x = clf.preprocessor(TEXTS)
    for i, text in enumerate(TEXTS):
        pieces = ref.convert_tokens_to_ids(ref.tokenize(text))[:SEQ - 2]
        row = [2] + pieces + [3]
        row += [0] * (SEQ - len(row))
        assert keras.ops.convert_to_numpy(x["token_ids"][i]).tolist() == row, text
    logits = keras.ops.convert_to_numpy(clf.predict(TEXTS, verbose=0))
    assert logits.shape == (len(TEXTS), 2) and np.isfinite(logits).all()
    ours = model.encoder({"input_word_ids": x["token_ids"], "input_mask": x["padding_mask"],
                          "input_type_ids": x["segment_ids"]}, training=False)
    theirs = clf.backbone(x, training=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours["pooled_output"]),
                               keras.ops.convert_to_numpy(theirs["pooled_output"]), atol=1e-5)
    # and back: identical weights
    back, _, _ = khc.load_keras_hub_preset(preset)
    for name, value in interop.get_weights(back).items():
        np.testing.assert_array_equal(value, interop.get_weights(model)[name], err_msg=name)


def test_keras_hub_errors_are_one_line(tmp_path, vocab_file):
    with pytest.raises(BertError, match="no config.json"):
        khc.load_keras_hub_preset(str(tmp_path))
    cfg = BertConfig(vocab_size=len(VOCAB) + 1, hidden_size=8, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=8, max_position_embeddings=16)
    model = interop.build_bert_model(cfg)
    n = len(VOCAB)
    with pytest.raises(BertError,
                       match=f"vocab.txt: {n} lines but the model has vocab_size {n + 1} "):
        khc.save_keras_hub_preset(model, vocab_file, True, str(tmp_path / "p"))
    exact = interop.build_bert_model(BertConfig(**dict(cfg.to_dict(), vocab_size=len(VOCAB),
                                                       hidden_act="gelu_exact")))
    with pytest.raises(BertError, match="always uses the tanh GELU"):
        khc.save_keras_hub_preset(exact, vocab_file, True, str(tmp_path / "p"))
    ok = interop.build_bert_model(BertConfig(**dict(cfg.to_dict(), vocab_size=len(VOCAB))))
    khc.save_keras_hub_preset(ok, vocab_file, True, str(tmp_path / "p"))
    with pytest.raises(BertError, match="already exists"):
        khc.save_keras_hub_preset(ok, vocab_file, True, str(tmp_path / "p"))
    os.remove(tmp_path / "p" / "assets" / "tokenizer" / "vocabulary.txt")
    with pytest.raises(BertError, match="no assets/tokenizer/vocabulary.txt"):
        khc.load_keras_hub_preset(str(tmp_path / "p"))


# Accented text, whose ids depend on the casing: keras-hub's BertTokenizer(lowercase=True) keeps
# accents (its default strip_accents=False), the original's uncased FullTokenizer strips them.
ACCENTED_VOCAB = VOCAB + [
    "café", "naïve", "über", "zürich", "crème", "brûlée", "são", "münchen", "élan", "uber",
    "zurich", "creme", "brulee", "sao", "munchen", "elan", "Café", "Über", "São", "Zürich",
    "Crème", "PARIS", "The"]
ACCENTED = ["Café in PARIS, naïve RUNNING!", "Über Zürich: crème brûlée.",
            "São Paulo, München, élan", "The café, the Crème, the Über"]
CASINGS = [(True, False), (True, True), (False, False), (False, True)]


def keras_hub_ids(tokenizer, texts):
    return [keras.ops.convert_to_numpy(tokenizer(t)).tolist() for t in texts]


@pytest.mark.parametrize("lowercase,strip_accents", CASINGS)
def test_keras_hub_preset_casing_gives_keras_hub_ids(tmp_path, lowercase, strip_accents):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(ACCENTED_VOCAB) + "\n", encoding="utf-8")
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(ACCENTED_VOCAB), num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=8, max_sequence_length=16)
    preset = str(tmp_path / "preset")
    backbone.save_to_preset(preset)
    theirs = keras_hub.models.BertTokenizer(vocabulary=ACCENTED_VOCAB, lowercase=lowercase,
                                            strip_accents=strip_accents)
    theirs.save_to_preset(preset)
    want = keras_hub_ids(theirs, ACCENTED)
    # keras-hub -> bert_tf: the casing read from the preset gives keras-hub's ids exactly
    _, vocab, lower, strip = khc.load_keras_hub_preset_with_casing(preset)
    assert (lower, strip) == (lowercase, strip_accents)
    ours = tokenization.FullTokenizer(vocab, do_lower_case=lower, strip_accents=strip)
    assert [ours.convert_tokens_to_ids(ours.tokenize(t)) for t in ACCENTED] == want
    # ... where do_lower_case alone (the old reading) gave other ids on every line
    if lowercase != strip_accents:
        old = tokenization.FullTokenizer(vocab, do_lower_case=lower)
        assert all(old.convert_tokens_to_ids(old.tokenize(t)) != ids
                   for t, ids in zip(ACCENTED, want))
        with pytest.raises(BertError, match="no do_lower_case reproduces"):
            khc.load_keras_hub_preset(preset)
    else:
        assert khc.load_keras_hub_preset(preset)[2] is lowercase
    # bert_tf -> keras-hub: the preset we write makes keras-hub tokenize as we do
    model = interop.build_bert_model(BertConfig(
        vocab_size=len(ACCENTED_VOCAB), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=8, max_position_embeddings=16))
    out = khc.save_keras_hub_preset(model, str(vocab_file), lowercase, str(tmp_path / "out"),
                                    strip_accents=strip_accents)
    assert khc.keras_hub_casing(out) == (lowercase, strip_accents)
    assert keras_hub_ids(keras_hub.models.BertTokenizer.from_preset(out), ACCENTED) == want
    if lowercase == strip_accents:  # the original's do_lower_case alone, as before
        again = khc.save_keras_hub_preset(model, str(vocab_file), lowercase,
                                          str(tmp_path / "again"))
        assert keras_hub_ids(keras_hub.models.BertTokenizer.from_preset(again), ACCENTED) == want
