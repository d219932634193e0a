"""TF Hub interop: Model Garden's export_tfhub_lib SavedModels -> bert_tf (parity 1e-5), and our
preprocessor/encoder exports used as TF Hub models (hub.KerasLayer in tf_keras, fine-tuning).

Marked `peers` (tf-models-official, tf_keras, tensorflow-hub): a missing peer fails every test.
"""
import os

import numpy as np
import pytest

import bert_tf  # noqa: F401
import tensorflow as tf
try:
    import tensorflow_hub as hub
    import tf_keras
    from official.legacy.bert import configs as mg_configs
    from official.nlp.tools import export_tfhub_lib
    PEER_ERROR = None
except ImportError as e:  # conftest fails every test of this module (never skips)
    PEER_ERROR = e

from bert_tf import BertError, tokenization
from bert_tf.convert import interop, tfhub
from bert_tf.export import export_encoder, export_preprocessor
from conftest import original_pack

pytestmark = pytest.mark.peers

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!", "the", "quick",
         "brown", "fox", "jump", "##s", "##ed", "over", "lazy", "dog", "a", "is", "of", "cat",
         "sat", "on", "mat", "good", "bad", "movie", "film", "great", "terrible", "un",
         "##want", "run", "##ning", "paris", "city", "was", "very", "and", "not", "it"]
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "a good movie!",
             "It was a very bad film, not great.", "", "the cat sat on the mat and jumped",
             "Paris is a city. " * 12]
SEQ = 24
H, LAYERS = 16, 2


def py_pack(tok, text_a, text_b, seq):
    """The original's convert_single_example packing (conftest.original_pack) of two texts."""
    ids = lambda text: tok.convert_tokens_to_ids(tok.tokenize(text))
    return original_pack(ids(text_a), ids(text_b) if text_b is not None else None, seq,
                         cls=2, sep=3)


class Env:
    def __init__(self, base):
        self.base = base
        self.vocab = os.path.join(base, "vocab.txt")
        with open(self.vocab, "w", encoding="utf-8") as f:
            f.write("\n".join(VOCAB) + "\n")
        self.tok = tokenization.FullTokenizer(self.vocab, do_lower_case=True)
        cfg = mg_configs.BertConfig(
            vocab_size=len(VOCAB), hidden_size=H, num_hidden_layers=LAYERS,
            num_attention_heads=4, intermediate_size=32, max_position_embeddings=64,
            type_vocab_size=2)
        # Model Garden side: a pretrainer with random (non-initialiser) weights, its
        # checkpoint, and export_tfhub_lib's encoder (+ mlm) and preprocessing SavedModels.
        from official.nlp.modeling import models as mg_models
        encoder = export_tfhub_lib.get_bert_encoder(cfg)
        pt = mg_models.BertPretrainerV2(
            encoder_network=encoder,
            mlm_activation=lambda t: tf_keras.activations.gelu(t, approximate=True))
        ids = tf.ones((1, 4), tf.int32)
        pt(dict(input_word_ids=ids, input_mask=ids, input_type_ids=tf.zeros_like(ids),
                masked_lm_positions=tf.zeros((1, 1), tf.int32)))
        rng = np.random.default_rng(0)
        for v in pt.weights:
            v.assign(rng.normal(0, 0.3, v.shape).astype(np.float32)
                     + (1.0 if "gamma" in v.name else 0.0))
        ckpt = tf.train.Checkpoint(**pt.checkpoint_items).save(os.path.join(base, "mg", "ckpt"))
        self.mg_enc = os.path.join(base, "mg_encoder")
        export_tfhub_lib.export_model(self.mg_enc, bert_config=cfg, model_checkpoint_path=ckpt,
                                      with_mlm=True, vocab_file=self.vocab, do_lower_case=True)
        self.mg_pre = os.path.join(base, "mg_preprocess")
        export_tfhub_lib.export_preprocessing(
            self.mg_pre, vocab_file=self.vocab, do_lower_case=True,
            tokenize_with_offsets=True, default_seq_length=SEQ)
        # bert_tf side: the converted model and our exports of it.
        self.model, vocab_file, lower = tfhub.load_tfhub_encoder(self.mg_enc)
        assert lower is True and open(vocab_file).read() == open(self.vocab).read()
        self.pre = export_preprocessor(self.vocab, True, os.path.join(base, "pre"), SEQ)
        # as Model Garden's: with the mlm sub-model, the vocab asset and do_lower_case
        self.enc = export_encoder(self.model, os.path.join(base, "enc"), vocab_file=self.vocab,
                                  do_lower_case=True, with_mlm=True)
        # A freshly initialised bert_tf encoder (sane weight scale) for the fine-tuning test.
        fresh = interop.build_bert_model(type(self.model.bert_config).from_dict(
            dict(self.model.bert_config.to_dict())))
        self.fresh_weights = len(fresh.weights)
        self.fresh_enc = export_encoder(fresh, os.path.join(base, "fresh_enc"))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return Env(str(tmp_path_factory.mktemp("tfhub")))


def test_export_tfhub_lib_encoder_converts_with_parity(env):
    theirs = tf.saved_model.load(env.mg_enc)
    mg_pre = tf.saved_model.load(env.mg_pre)
    x = mg_pre(tf.constant(SENTENCES))
    rows = [py_pack(env.tok, t, None, SEQ) for t in SENTENCES]
    np.testing.assert_array_equal(x["input_word_ids"].numpy(), [r[0] for r in rows])
    want = theirs(x, training=False)
    got = env.model.encoder(x, training=False)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(np.asarray(got[key]), want[key].numpy(), atol=1e-5)
    assert len(got["encoder_outputs"]) == len(want["encoder_outputs"]) == LAYERS
    for a, b in zip(got["encoder_outputs"], want["encoder_outputs"]):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), atol=1e-5)
    # with_mlm=True: the masked-LM head comes along too
    pos = tf.constant([[1, 2]] * len(SENTENCES), tf.int32)
    mlm = theirs.mlm(dict(x, masked_lm_positions=pos), training=False)["mlm_logits"].numpy()
    ours = env.model(dict(x, masked_lm_positions=pos), training=False)["mlm_logits"]
    np.testing.assert_allclose(np.asarray(ours), mlm, atol=1e-5)
    assert np.abs(mlm).max() > 0.5  # random weights, not a degenerate all-zero check


def test_export_tfhub_lib_preprocessor_converts_and_ours_matches_it(env):
    vocab_file, lower = tfhub.read_tfhub_preprocessor(env.mg_pre)
    assert lower is True and tokenization.vocab_tokens(vocab_file) == VOCAB
    theirs, ours = tf.saved_model.load(env.mg_pre), tf.saved_model.load(env.pre)
    text = tf.constant(SENTENCES)
    a, b = theirs(text), ours(text)
    assert sorted(a) == sorted(b) == ["input_mask", "input_type_ids", "input_word_ids"]
    for k in a:
        assert a[k].dtype == b[k].dtype == tf.int32 and a[k].shape == b[k].shape == (6, SEQ)
        np.testing.assert_array_equal(a[k].numpy(), b[k].numpy(), err_msg=k)
    ta, tb = theirs.tokenize(text), ours.tokenize(text)
    assert ta.dtype == tb.dtype == tf.int32 and ta.ragged_rank == tb.ragged_rank == 2
    assert ta.to_list() == tb.to_list()
    # each packer takes the other's tokens (drop-in both ways), pairs included; lengths
    # other than the default too (pair rows with a non-empty b: TF Hub's packer adds a
    # [SEP] for an empty b, the original does not)
    first = [SENTENCES[i] for i in (0, 1, 2, 4, 5)]
    pairs = tf.constant(first), tf.constant(first[1:] + first[:1])
    for n in (SEQ, 9, 40):
        want = theirs.bert_pack_inputs([theirs.tokenize(pairs[0]), theirs.tokenize(pairs[1])],
                                       seq_length=n)
        for packer, tok in ((ours, theirs), (theirs, ours), (ours, ours)):
            got = packer.bert_pack_inputs([tok.tokenize(pairs[0]), tok.tokenize(pairs[1])],
                                          seq_length=n)
            for k in want:
                np.testing.assert_array_equal(got[k].numpy(), want[k].numpy(), err_msg=k)


def at_real(value, inputs, key):
    """Model Garden's output with padding positions of sequence outputs set to 0.0, what our
    exports hold there (they compute only the real tokens)."""
    value = value.numpy()
    if key == "sequence_output":
        value = value * inputs["input_mask"].numpy()[..., None]
    return value


def test_encoder_export_is_a_drop_in_for_model_garden(env):
    theirs, ours = tf.saved_model.load(env.mg_enc), tf.saved_model.load(env.enc)
    x = tf.saved_model.load(env.pre)(tf.constant(SENTENCES))
    a, b = theirs(x, training=False), ours(x)
    assert sorted(a) == sorted(b) == ["default", "encoder_outputs", "pooled_output",
                                      "sequence_output"]
    for k in ("default", "pooled_output", "sequence_output"):
        assert a[k].dtype == b[k].dtype == tf.float32 and a[k].shape == b[k].shape
        np.testing.assert_allclose(b[k].numpy(), at_real(a[k], x, k), atol=1e-5, err_msg=k)
    assert [t.shape for t in a["encoder_outputs"]] == [t.shape for t in b["encoder_outputs"]]
    # training=True turns dropout on in both (what hub.KerasLayer(trainable=True) calls in fit)
    for m, out in ((theirs, a), (ours, b)):
        drop = m(x, training=True)["sequence_output"].numpy()
        assert drop.shape == out["sequence_output"].shape
        assert np.abs(drop - out["sequence_output"].numpy()).max() > 1e-2
    # reusable SavedModel attributes, over the same tf.Variables the functions read; both
    # add the (non-trainable) do_lower_case variable to `variables`
    n = 5 + 16 * LAYERS + 2
    assert len(ours.trainable_variables) == len(theirs.trainable_variables) == n
    assert len(ours.variables) == len(theirs.variables) == n + 1
    assert list(ours.regularization_losses) == []
    assert {id(v) for v in ours.variables} - {id(v) for v in ours.trainable_variables} == {
        id(ours.do_lower_case)}


def model_garden_user_code(preprocessor_dir, encoder_dir, texts):
    """Code written against a Model Garden TF Hub BERT pair: everything beyond `__call__`."""
    preprocess, encoder = hub.load(preprocessor_dir), hub.load(encoder_dir)
    special = preprocess.tokenize.get_special_tokens_dict()
    tokens, starts, limits = preprocess.tokenize_with_offsets(tf.constant(texts))
    inputs = preprocess(tf.constant(texts))
    # mask the first two word pieces, score them with the masked-LM
    positions = tf.constant([[1, 2]] * len(texts), tf.int32)
    first_two = tf.one_hot(positions, SEQ, dtype=tf.int32, axis=1)
    masked = tf.where(tf.reduce_sum(first_two, -1) > 0, special["mask_id"],
                      inputs["input_word_ids"])
    mlm = encoder.mlm(dict(inputs, input_word_ids=masked, masked_lm_positions=positions))
    with tf.io.gfile.GFile(encoder.vocab_file.asset_path.numpy().decode(), "r") as f:
        vocab = f.read().splitlines()
    # the mlm sub-model in tf_keras, fine-tunable
    layer = hub.KerasLayer(encoder.mlm, trainable=True)
    logits = layer(dict(inputs, masked_lm_positions=positions))["mlm_logits"]
    return dict(special=special, tokens=tokens, starts=starts, limits=limits, mlm=mlm,
                vocab=vocab, lower=encoder.do_lower_case.numpy(), keras_logits=logits,
                keras_trainable=len(layer.trainable_weights))


def test_same_code_runs_on_model_garden_and_bert_tf_exports(env):
    texts = list(SENTENCES)
    theirs = model_garden_user_code(env.mg_pre, env.mg_enc, texts)
    ours = model_garden_user_code(env.pre, env.enc, texts)
    assert sorted(ours) == sorted(theirs)
    spec = lambda d: {k: (v.dtype, v.shape, int(v)) for k, v in d.items()}
    assert spec(ours["special"]) == spec(theirs["special"]) == {
        "vocab_size": (tf.int32, (), len(VOCAB)), "start_of_sequence_id": (tf.int32, (), 2),
        "end_of_segment_id": (tf.int32, (), 3), "padding_id": (tf.int32, (), 0),
        "mask_id": (tf.int32, (), 4)}
    for k, dtype in (("tokens", tf.int32), ("starts", tf.int64), ("limits", tf.int64)):
        a, b = theirs[k], ours[k]
        assert a.dtype == b.dtype == dtype and a.ragged_rank == b.ragged_rank == 2
        assert a.shape.as_list() == b.shape.as_list() == [len(texts), None, None]
        assert a.to_list() == b.to_list(), k  # ASCII text: same ids, same byte offsets
    assert sorted(ours["mlm"]) == sorted(theirs["mlm"]) == [
        "encoder_outputs", "mlm_logits", "pooled_output", "sequence_output"]
    inputs = tf.saved_model.load(env.pre)(tf.constant(texts))
    for k in ("mlm_logits", "pooled_output", "sequence_output"):
        a, b = theirs["mlm"][k], ours["mlm"][k]
        assert a.dtype == b.dtype == tf.float32 and a.shape == b.shape
        np.testing.assert_allclose(b.numpy(), at_real(a, inputs, k), atol=1e-5, err_msg=k)
    assert ours["mlm"]["mlm_logits"].shape == (len(texts), 2, len(VOCAB))
    assert [t.shape for t in ours["mlm"]["encoder_outputs"]] == [
        t.shape for t in theirs["mlm"]["encoder_outputs"]]
    assert ours["vocab"] == theirs["vocab"] == VOCAB
    assert ours["lower"] is theirs["lower"] is np.True_
    np.testing.assert_allclose(ours["keras_logits"].numpy(), theirs["keras_logits"].numpy(),
                               atol=1e-5)
    assert ours["keras_trainable"] == theirs["keras_trainable"] == 5 + 16 * LAYERS + 2 + 5


def test_offsets_on_accented_text_point_into_the_input(env):
    # Model Garden's offsets count the normalized text (é -> e is one byte shorter), so from
    # a stripped accent on they are off; ours slice the input bytes.
    text = "Café jumps"
    data = text.encode()
    for path, want in ((env.pre, ["Café".encode(), b"jump", b"s"]),
                       (env.mg_pre, [b"Caf\xc3", b" jum", b"p"])):
        _, starts, limits = hub.load(path).tokenize_with_offsets(tf.constant([text]))
        got = [data[s:e] for s, e in zip(starts.flat_values.numpy(), limits.flat_values.numpy())]
        assert got == want, path


def test_hub_keraslayer_tutorial_classifier_fine_tunes_every_encoder_weight(env, caplog):
    # The TF Hub "classify text with BERT" tutorial's model, on our exports, in tf_keras.
    tf_keras.utils.set_random_seed(1)
    text_input = tf_keras.layers.Input(shape=(), dtype=tf.string, name="text")
    encoder_inputs = hub.KerasLayer(env.pre, name="preprocessing")(text_input)
    encoder = hub.KerasLayer(env.fresh_enc, trainable=True, name="BERT_encoder")
    net = encoder(encoder_inputs)["pooled_output"]
    net = tf_keras.layers.Dropout(0.1)(net)
    net = tf_keras.layers.Dense(1, activation=None, name="classifier")(net)
    model = tf_keras.Model(text_input, net)
    assert len(encoder.trainable_weights) == env.fresh_weights == 5 + 16 * LAYERS + 2
    before = [w.numpy().copy() for w in encoder.trainable_weights]
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-2),
                  loss=tf_keras.losses.BinaryCrossentropy(from_logits=True))
    x = np.array(["a good movie", "a great film", "a very good film", "a bad movie",
                  "a terrible film", "a very bad movie", "it was great", "it was terrible"])
    y = np.array([1, 1, 1, 0, 0, 0, 1, 0], np.float32)
    start = model.evaluate(x, y, verbose=0)
    for _ in range(20):  # with dropout (the encoder's training trace)
        model.train_on_batch(x, y)
    end = model.evaluate(x, y, verbose=0)
    assert end < 0.7 * start, (start, end)
    assert "zero trainable weights" not in caplog.text
    changed = [np.abs(w.numpy() - b).max() > 0 for w, b in zip(encoder.trainable_weights, before)]
    assert all(changed), [w.name for w, c in zip(encoder.trainable_weights, changed) if not c]


@pytest.mark.parametrize("seq_length", [32, 64, 128, 512])
def test_bert_pack_inputs_any_seq_length_from_one_export(env, seq_length):
    p = hub.load(env.pre)
    text = tf_keras.layers.Input(shape=(), dtype=tf.string)
    text_b = tf_keras.layers.Input(shape=(), dtype=tf.string)
    tokenize = hub.KerasLayer(p.tokenize)
    pack = hub.KerasLayer(p.bert_pack_inputs, arguments=dict(seq_length=seq_length))
    model = tf_keras.Model([text, text_b], pack([tokenize(text), tokenize(text_b)]))
    long = " ".join(SENTENCES * 8)
    a, b = [long, "a good movie", "the cat"], ["the lazy dog", long, ""]
    out = model([tf.constant(a), tf.constant(b)])
    rows = [py_pack(env.tok, x, y, seq_length) for x, y in zip(a, b)]
    for i, k in enumerate(("input_word_ids", "input_mask", "input_type_ids")):
        assert out[k].dtype == tf.int32 and tuple(out[k].shape) == (3, seq_length)
        np.testing.assert_array_equal(out[k].numpy(), np.array([r[i] for r in rows]), err_msg=k)


def test_tfhub_errors_are_one_line(env, tmp_path):
    with pytest.raises(BertError, match="not a SavedModel"):
        tfhub.read_tfhub_encoder(str(tmp_path))
    import shutil
    bad = str(tmp_path / "bad_vocab")
    shutil.copytree(env.mg_enc, bad)
    with open(os.path.join(bad, "assets", "vocab.txt"), "a", encoding="utf-8") as f:
        f.write("extra\n")
    with pytest.raises(BertError, match=f"vocab.txt: {len(VOCAB) + 1} lines but .*bad_vocab has "
                                        f"vocab_size {len(VOCAB)}"):
        tfhub.load_tfhub_encoder(bad)
    with pytest.raises(BertError, match="no BERT encoder variables"):
        tfhub.read_tfhub_encoder(env.pre)
    cfg = interop.config_from_weights(tfhub.read_tfhub_encoder(env.mg_enc)[1], 4)
    with pytest.raises(BertError, match="config/weights mismatch"):
        tfhub.load_tfhub_encoder(env.mg_enc, bert_config=type(cfg).from_dict(
            dict(cfg.to_dict(), intermediate_size=30)))
