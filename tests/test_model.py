"""Encoder, heads and models: numeric parity with a NumPy re-statement of the original BERT math,
padding invariance, activations, .keras round trips, mixed precision, tying, config checks."""
import json
import math
import os
from collections import Counter

import bert_tf  # noqa: F401  (sets the Keras backend first)
import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling import encoder as be
from bert_tf.modeling import heads as bh
from bert_tf.modeling import layers as bl
from bert_tf.modeling import models as bm
from bert_tf.modeling.config import ACTIVATIONS, BertConfig
from conftest import tiny_bert_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Odd, unequal sizes so that a transposed or mis-split matrix cannot go unnoticed.
TINY = dict(vocab_size=97, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
            intermediate_size=40, max_position_embeddings=20, type_vocab_size=3,
            hidden_act="gelu")


def tiny_config(**overrides):
    return BertConfig(**{**TINY, **overrides})


# ----------------------------------------------------------------------------------------------
# NumPy reference of the original BERT (float64), weights keyed by the original TF1 names.

_erf = np.vectorize(math.erf)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


NP_ACTS = {
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu_exact": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "swish": lambda x: x * _sigmoid(x),
    "linear": lambda x: x,
}
NP_ACTS["gelu_new"] = NP_ACTS["gelu"]  # HF's name for the tanh form
NP_ACTS["silu"] = NP_ACTS["swish"]


def np_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def numpy_bert(w, cfg, ids, mask, types, positions=None):
    """The original BERT forward pass (inference) on TF1-named float64 weights `w`."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    act = NP_ACTS[cfg.hidden_act]
    b, s = ids.shape
    h, n = cfg.hidden_size, cfg.num_attention_heads
    d = h // n
    x = (w["bert/embeddings/word_embeddings"][ids]
         + w["bert/embeddings/token_type_embeddings"][types]
         + w["bert/embeddings/position_embeddings"][:s][None])
    x = np_layer_norm(x, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
    adder = (1.0 - mask[:, None, None, :].astype(np.float64)) * -10000.0
    outputs = []
    for i in range(cfg.num_hidden_layers):
        p = f"bert/encoder/layer_{i}/"

        def dense(t, scope):
            return t @ w[p + scope + "/kernel"] + w[p + scope + "/bias"]

        def split(t):
            return t.reshape(b, s, n, d).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, "attention/self/" + name)) for name in ("query", "key", "value"))
        probs = np_softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + adder)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
        attn = np_layer_norm(dense(context, "attention/output/dense") + x,
                             w[p + "attention/output/LayerNorm/gamma"],
                             w[p + "attention/output/LayerNorm/beta"])
        ffn = dense(act(dense(attn, "intermediate/dense")), "output/dense")
        x = np_layer_norm(ffn + attn, w[p + "output/LayerNorm/gamma"], w[p + "output/LayerNorm/beta"])
        outputs.append(x)
    pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
    out = {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": outputs}
    if positions is not None and "cls/predictions/output_bias" in w:
        g = x[np.arange(b)[:, None], positions]
        t = act(g @ w["cls/predictions/transform/dense/kernel"]
                + w["cls/predictions/transform/dense/bias"])
        t = np_layer_norm(t, w["cls/predictions/transform/LayerNorm/gamma"],
                          w["cls/predictions/transform/LayerNorm/beta"])
        out["mlm_logits"] = (t @ w["bert/embeddings/word_embeddings"].T
                             + w["cls/predictions/output_bias"])
        out["nsp_logits"] = (pooled @ w["cls/seq_relationship/output_weights"].T
                             + w["cls/seq_relationship/output_bias"])
    return out


def random_tf1_weights(cfg, rng, heads=True):
    """Random weights under the original names and shapes, scaled so attention is peaked and
    every nonlinearity is exercised (not the near-zero regime of the 0.02 initializer)."""
    h, i_size = cfg.hidden_size, cfg.intermediate_size
    f32 = lambda *shape, scale=1.0, loc=0.0: (loc + scale * rng.standard_normal(shape)).astype(np.float32)
    w = {"bert/embeddings/word_embeddings": f32(cfg.vocab_size, h),
         "bert/embeddings/token_type_embeddings": f32(cfg.type_vocab_size, h),
         "bert/embeddings/position_embeddings": f32(cfg.max_position_embeddings, h),
         "bert/embeddings/LayerNorm/gamma": f32(h, scale=0.2, loc=1.0),
         "bert/embeddings/LayerNorm/beta": f32(h, scale=0.2)}
    for layer in range(cfg.num_hidden_layers):
        p = f"bert/encoder/layer_{layer}/"
        for scope, (n_in, n_out) in {"attention/self/query": (h, h), "attention/self/key": (h, h),
                                     "attention/self/value": (h, h),
                                     "attention/output/dense": (h, h),
                                     "intermediate/dense": (h, i_size),
                                     "output/dense": (i_size, h)}.items():
            w[p + scope + "/kernel"] = f32(n_in, n_out, scale=1.5 / math.sqrt(n_in))
            w[p + scope + "/bias"] = f32(n_out, scale=0.2)
        for scope in ("attention/output/LayerNorm", "output/LayerNorm"):
            w[p + scope + "/gamma"] = f32(h, scale=0.2, loc=1.0)
            w[p + scope + "/beta"] = f32(h, scale=0.2)
    w["bert/pooler/dense/kernel"] = f32(h, h, scale=1.0 / math.sqrt(h))
    w["bert/pooler/dense/bias"] = f32(h, scale=0.2)
    if heads:
        w["cls/predictions/transform/dense/kernel"] = f32(h, h, scale=1.0 / math.sqrt(h))
        w["cls/predictions/transform/dense/bias"] = f32(h, scale=0.2)
        w["cls/predictions/transform/LayerNorm/gamma"] = f32(h, scale=0.2, loc=1.0)
        w["cls/predictions/transform/LayerNorm/beta"] = f32(h, scale=0.2)
        w["cls/predictions/output_bias"] = f32(cfg.vocab_size, scale=0.5)
        w["cls/seq_relationship/output_weights"] = f32(2, h, scale=1.0 / math.sqrt(h))
        w["cls/seq_relationship/output_bias"] = f32(2, scale=0.2)
    return w


def keras_variables_by_tf1_name(model):
    """Our variables under the original names, found by attribute (independent of checkpoints.py)."""
    enc = model if isinstance(model, be.BertEncoder) else model.encoder
    e = enc.embeddings
    out = {"bert/embeddings/word_embeddings": e.word_embeddings,
           "bert/embeddings/token_type_embeddings": e.token_type_embeddings,
           "bert/embeddings/position_embeddings": e.position_embeddings,
           "bert/embeddings/LayerNorm/gamma": e.layer_norm.gamma,
           "bert/embeddings/LayerNorm/beta": e.layer_norm.beta,
           "bert/pooler/dense/kernel": enc.pooler.kernel, "bert/pooler/dense/bias": enc.pooler.bias}
    for i, blk in enumerate(enc.transformer_layers):
        p = f"bert/encoder/layer_{i}/"
        for scope, dense in {"attention/self/query": blk.attention.query,
                             "attention/self/key": blk.attention.key,
                             "attention/self/value": blk.attention.value,
                             "attention/output/dense": blk.attention_output,
                             "intermediate/dense": blk.intermediate,
                             "output/dense": blk.output_dense}.items():
            out[p + scope + "/kernel"], out[p + scope + "/bias"] = dense.kernel, dense.bias
        for scope, ln in (("attention/output/LayerNorm", blk.attention_layer_norm),
                          ("output/LayerNorm", blk.output_layer_norm)):
            out[p + scope + "/gamma"], out[p + scope + "/beta"] = ln.gamma, ln.beta
    if isinstance(model, bm.BertPretrainer):
        mlm = model.masked_lm
        out.update({"cls/predictions/transform/dense/kernel": mlm.transform.kernel,
                    "cls/predictions/transform/dense/bias": mlm.transform.bias,
                    "cls/predictions/transform/LayerNorm/gamma": mlm.layer_norm.gamma,
                    "cls/predictions/transform/LayerNorm/beta": mlm.layer_norm.beta,
                    "cls/predictions/output_bias": mlm.output_bias,
                    "cls/seq_relationship/output_bias": model.next_sentence.dense.bias})
    return out


def set_tf1_weights(model, w):
    """Assign TF1-named arrays to `model` (transposing the [2, H] NSP matrix as the original)."""
    for name, var in keras_variables_by_tf1_name(model).items():
        var.assign(w[name])
    if isinstance(model, bm.BertPretrainer):
        model.next_sentence.dense.kernel.assign(w["cls/seq_relationship/output_weights"].T)


def padded_batch(rng, cfg, lengths=(9, 5, 1), seq=9):
    b = len(lengths)
    ids = np.zeros((b, seq), np.int32)
    mask = np.zeros((b, seq), np.int32)
    types = np.zeros((b, seq), np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, cfg.vocab_size, n)
        mask[row, :n] = 1
        types[row, n // 2:n] = rng.integers(0, cfg.type_vocab_size)
    return ids, mask, types


def as_inputs(ids, mask, types, **extra):
    d = {"input_word_ids": tf.constant(ids), "input_mask": tf.constant(mask),
         "input_type_ids": tf.constant(types)}
    d.update({k: tf.constant(v) for k, v in extra.items()})
    return d


def numpy_dict(out):
    return {k: ([np.asarray(t) for t in v] if isinstance(v, (list, tuple)) else np.asarray(v))
            for k, v in out.items()}


# ----------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def pretrainer_case():
    rng = np.random.default_rng(0)
    cfg = tiny_config()
    model = bm.build_model(bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)))
    w = random_tf1_weights(cfg, rng)
    set_tf1_weights(model, w)
    ids, mask, types = padded_batch(rng, cfg)
    positions = np.array([[0, 3, 8, 8], [1, 2, 4, 0], [0, 0, 0, 0]], np.int32)
    return cfg, model, w, (ids, mask, types, positions)


@pytest.fixture
def restore_dtype_policy():
    previous = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(previous)


# ----------------------------------------------------------------------------------------------
# Numeric parity


def test_encoder_matches_numpy_reference_on_padded_batch(pretrainer_case):
    cfg, model, w, (ids, mask, types, _) = pretrainer_case
    got = numpy_dict(model.encoder(as_inputs(ids, mask, types), training=False))
    want = numpy_bert(w, cfg, ids, mask, types)
    np.testing.assert_allclose(got["sequence_output"], want["sequence_output"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], rtol=0, atol=1e-5)
    assert len(got["encoder_outputs"]) == cfg.num_hidden_layers
    for g, r in zip(got["encoder_outputs"], want["encoder_outputs"]):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(got["encoder_outputs"][-1], got["sequence_output"])
    # The weights are large enough that attention is far from uniform: masking matters.
    unmasked = numpy_bert(w, cfg, ids, np.ones_like(mask), types)
    assert np.abs(unmasked["sequence_output"][1, :5] - want["sequence_output"][1, :5]).max() > 1e-2


def test_pretrainer_logits_match_numpy_reference(pretrainer_case):
    cfg, model, w, (ids, mask, types, positions) = pretrainer_case
    out = model(as_inputs(ids, mask, types, masked_lm_positions=positions), training=False)
    assert out["mlm_logits"].dtype == tf.float32 and out["nsp_logits"].dtype == tf.float32
    assert tuple(out["mlm_logits"].shape) == (3, 4, cfg.vocab_size)
    assert tuple(out["nsp_logits"].shape) == (3, 2)
    want = numpy_bert(w, cfg, ids, mask, types, positions)
    # Logits are O(10) (sum over H of O(1) terms): 1e-5 relative to that scale.
    np.testing.assert_allclose(np.asarray(out["mlm_logits"]), want["mlm_logits"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.asarray(out["nsp_logits"]), want["nsp_logits"], rtol=0, atol=1e-5)
    # Without positions every position is scored (fill-mask use).
    full = model(as_inputs(ids, mask, types), training=False)["mlm_logits"]
    assert tuple(full.shape) == (3, 9, cfg.vocab_size)
    np.testing.assert_allclose(np.asarray(full)[0, 3], np.asarray(out["mlm_logits"])[0, 1],
                               rtol=0, atol=1e-5)
    # Pre-training's steps: the last block only at [CLS] and the masked positions.
    fast = model.pretraining_logits(as_inputs(ids, mask, types, masked_lm_positions=positions))
    assert sorted(fast) == ["mlm_logits", "nsp_logits"]
    np.testing.assert_allclose(np.asarray(fast["mlm_logits"]), want["mlm_logits"], rtol=0,
                               atol=1e-4)
    np.testing.assert_allclose(np.asarray(fast["nsp_logits"]), want["nsp_logits"], rtol=0,
                               atol=1e-5)


def test_pretraining_logits_equal_the_full_call_with_gradients():
    """Packed rows (each sequence's [CLS], block-diagonal attention, padding predictions at 0)
    and plain ones: `pretraining_logits` gives `call`'s logits and the same gradient for every
    weight, while its last block computes N + P of S rows (N = 1 [CLS] in plain rows)."""
    model = bm.build_model(bm.BertPretrainer.from_bert_config(tiny_bert_config()))
    rng = np.random.default_rng(3)
    b, s = 2, 16
    ids = rng.integers(5, 64, (b, s)).astype("int32")
    index = np.array([[1] * 6 + [2] * 7 + [0] * 3, [1] * 9 + [2] * 4 + [3] * 3], "int32")
    plain = dict(input_word_ids=ids, input_mask=(index > 0).astype("int32"),
                 input_type_ids=(rng.random((b, s)) < 0.5).astype("int32"),
                 masked_lm_positions=np.array([[2, 8, 11, 0], [1, 5, 10, 14]], "int32"))
    packed = dict(plain, input_sequence_index=index,
                  input_positions=np.array([list(range(6)) + list(range(7)) + [0] * 3,
                                            list(range(9)) + list(range(4)) + list(range(3))],
                                           "int32"),
                  next_sentence_positions=np.array([[0, 6, 0], [0, 9, 13]], "int32"))
    last = model.encoder.transformer_layers[-1]
    rows = []
    last_call = last.call

    def record(*args, **kwargs):  # the rows the last block computes
        out = last_call(*args, **kwargs)
        rows.append(tuple(out.shape))
        return out

    last.call = record
    try:
        for inputs, n in ((plain, 1), (packed, 3)):
            del rows[:]
            model.pretraining_logits(inputs)
            assert rows == [(b, n + 4, 32)]
    finally:
        last.call = last_call
    for inputs in (plain, packed):
        grads = []
        for forward in (model, model.pretraining_logits):
            with tf.GradientTape() as tape:
                out = forward(inputs, training=True)  # dropout is 0: training = eval
                loss = (tf.reduce_sum(tf.nn.log_softmax(out["mlm_logits"])[..., 7])
                        + tf.reduce_sum(tf.nn.log_softmax(out["nsp_logits"])[..., 1]))
            grads.append((out, tape.gradient(loss, model.trainable_variables)))
        (full, g_full), (fast, g_fast) = grads
        for key in ("mlm_logits", "nsp_logits"):
            assert full[key].shape == fast[key].shape
            np.testing.assert_allclose(fast[key], full[key], rtol=0, atol=1e-5)
        for v, a, f in zip(model.trainable_variables, g_full, g_fast):
            assert (a is None) == (f is None), v.path
            if a is not None:
                np.testing.assert_allclose(tf.convert_to_tensor(f), tf.convert_to_tensor(a),
                                           rtol=1e-4, atol=1e-6, err_msg=v.path)


def test_encoder_output_positions_shapes_symbolic_and_dropout():
    cfg = tiny_bert_config(dropout=0.5)
    encoder = be.BertEncoder.from_bert_config(cfg)
    inputs = {k: keras.Input((None,), dtype="int32", name=k)
              for k in ("input_word_ids", "input_mask", "input_type_ids")}
    spec = encoder(inputs, output_positions=keras.Input((5,), dtype="int32"))
    assert tuple(spec["sequence_output"].shape) == (None, 5, 32)
    assert [tuple(t.shape) for t in spec["encoder_outputs"]] == [(None, None, 32), (None, 5, 32)]
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 64, (2, 12)).astype("int32")
    x = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
         "input_type_ids": np.zeros_like(ids)}
    at = np.array([[0, 3, 3, 7, 11], [0, 1, 2, 9, 0]], "int32")
    full = encoder(x, training=False)
    cut = encoder(x, training=False, output_positions=at)
    assert tuple(cut["sequence_output"].shape) == (2, 5, 32)
    np.testing.assert_allclose(cut["sequence_output"],
                               np.take_along_axis(np.asarray(full["sequence_output"]),
                                                  at[..., None], 1), rtol=0, atol=1e-5)
    np.testing.assert_array_equal(cut["encoder_outputs"][0], full["encoder_outputs"][0])
    np.testing.assert_allclose(cut["pooled_output"], full["pooled_output"], rtol=0, atol=1e-5)
    # Dropout stays on in the last block: the same lower blocks (dropout off there too, as
    # training=False) would not make these differ.
    block, bias = encoder.transformer_layers[-1], bl.attention_bias(x["input_mask"])
    h = full["encoder_outputs"][0]
    off = block(h, bias, training=False, positions=at)
    on = block(h, bias, training=True, positions=at)
    assert np.abs(np.asarray(on) - np.asarray(off)).max() > 1e-2


def test_fine_tuning_heads_match_reference(pretrainer_case):
    cfg, pre, w, (ids, mask, types, _) = pretrainer_case
    rng = np.random.default_rng(1)
    ref = numpy_bert(w, cfg, ids, mask, types)
    inputs = as_inputs(ids, mask, types)
    for model in (bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 5), bm.BertSpanLabeler(be.BertEncoder.from_bert_config(cfg)), bm.BertTokenClassifier(be.BertEncoder.from_bert_config(cfg), 7)):
        bm.build_model(model)
        set_tf1_weights(model, w)
        head = {bm.BertClassifier: "classifier", bm.BertSpanLabeler: "span",
                bm.BertTokenClassifier: "tagger"}[type(model)]
        dense = getattr(model, head).dense
        kernel = rng.standard_normal(dense.kernel.shape).astype(np.float32)
        bias = rng.standard_normal(dense.bias.shape).astype(np.float32)
        dense.kernel.assign(kernel)
        dense.bias.assign(bias)
        out = numpy_dict(model(inputs, training=False))
        assert all(v.dtype == np.float32 for v in out.values())
        if head == "classifier":
            np.testing.assert_allclose(out["logits"], ref["pooled_output"] @ kernel + bias, atol=1e-4)
        elif head == "span":
            logits = ref["sequence_output"] @ kernel + bias
            np.testing.assert_allclose(out["start_logits"], logits[..., 0], atol=1e-4)
            np.testing.assert_allclose(out["end_logits"], logits[..., 1], atol=1e-4)
        else:
            np.testing.assert_allclose(out["logits"], ref["sequence_output"] @ kernel + bias,
                                       atol=1e-4)
        # Dropout is active in training only.
        if getattr(model, "dropout_rate", 0):
            trained = np.asarray(model(inputs, training=True)["logits"])
            assert not np.allclose(trained, out["logits"])


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_each_hidden_act_matches_reference(act):
    rng = np.random.default_rng(2)
    cfg = tiny_config(hidden_act=act, num_hidden_layers=1)
    enc = be.BertEncoder.from_bert_config(cfg)
    enc.build()
    w = random_tf1_weights(cfg, rng, heads=False)
    set_tf1_weights(enc, w)
    ids, mask, types = padded_batch(rng, cfg, lengths=(7, 4), seq=7)
    got = np.asarray(enc(as_inputs(ids, mask, types))["sequence_output"])
    np.testing.assert_allclose(got, numpy_bert(w, cfg, ids, mask, types)["sequence_output"],
                               rtol=0, atol=1e-5)
    if act in ("gelu", "gelu_exact"):
        # The two gelus must really differ (by far more than the tolerance above).
        other = tiny_config(hidden_act="gelu_exact" if act == "gelu" else "gelu", num_hidden_layers=1)
        alt = numpy_bert(w, other, ids, mask, types)["sequence_output"]
        assert np.abs(alt - got).max() > 1e-4


def test_get_activation_gelu_is_the_original_tanh_form():
    x = np.linspace(-6, 6, 1001).astype(np.float32)
    np.testing.assert_allclose(np.asarray(bl.get_activation("gelu")(x)), NP_ACTS["gelu"](x.astype(np.float64)),
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(bl.get_activation("gelu_exact")(x)),
                               NP_ACTS["gelu_exact"](x.astype(np.float64)), atol=1e-6)
    diff = np.abs(NP_ACTS["gelu"](x.astype(np.float64)) - NP_ACTS["gelu_exact"](x.astype(np.float64)))
    assert 1e-4 < diff.max() < 2e-3


def test_padding_invariance(pretrainer_case):
    cfg, model, _, _ = pretrainer_case
    rng = np.random.default_rng(3)
    ids = rng.integers(1, cfg.vocab_size, (2, 6)).astype(np.int32)
    types = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]], np.int32)
    short = model(as_inputs(ids, np.ones_like(ids), types), training=False)
    # Append 5 padding positions holding garbage ids/types: they must be invisible.
    pad_ids = np.concatenate([ids, rng.integers(0, cfg.vocab_size, (2, 5)).astype(np.int32)], 1)
    pad_types = np.concatenate([types, rng.integers(0, cfg.type_vocab_size, (2, 5)).astype(np.int32)], 1)
    pad_mask = np.concatenate([np.ones_like(ids), np.zeros((2, 5), np.int32)], 1)
    long = model(as_inputs(pad_ids, pad_mask, pad_types), training=False)
    # exp(-10000) is exactly 0 in float32, so only float rounding of differently shaped matmuls
    # remains (~1 ulp of O(1) values); garbage leaking through the mask would be O(0.1).
    np.testing.assert_allclose(np.asarray(long["sequence_output"])[:, :6],
                               np.asarray(short["sequence_output"]), rtol=0, atol=5e-6)
    np.testing.assert_allclose(np.asarray(long["pooled_output"]), np.asarray(short["pooled_output"]),
                               rtol=0, atol=5e-6)
    np.testing.assert_allclose(np.asarray(long["mlm_logits"])[:, :6], np.asarray(short["mlm_logits"]),
                               rtol=0, atol=5e-5)
    np.testing.assert_allclose(np.asarray(long["nsp_logits"]), np.asarray(short["nsp_logits"]),
                               rtol=0, atol=5e-6)
    # Same ids but the padding unmasked: outputs do change (the check above is not vacuous).
    leaky = model(as_inputs(pad_ids, np.ones_like(pad_mask), pad_types), training=False)
    assert np.abs(np.asarray(leaky["sequence_output"])[:, :6]
                  - np.asarray(short["sequence_output"])).max() > 1e-2


def test_mlm_output_weights_are_tied_to_word_embeddings(pretrainer_case):
    cfg, model, w, (ids, mask, types, positions) = pretrainer_case
    table = model.encoder.word_embeddings
    assert table is model.encoder.embeddings.word_embeddings
    # Exactly one [V, H] variable in the whole model, and the head owns none.
    vh = [v for v in model.weights if tuple(v.shape) == (cfg.vocab_size, cfg.hidden_size)]
    assert len(vh) == 1 and vh[0] is table
    assert not [v for v in model.masked_lm.weights if tuple(v.shape) == (cfg.vocab_size, cfg.hidden_size)]
    assert len({id(v) for v in model.weights}) == len(model.weights)
    inputs = as_inputs(ids, mask, types, masked_lm_positions=positions)
    # Gradients of the MLM logits reach every row of the table (output projection), not only
    # the rows of the input ids (embedding lookup).
    with tf.GradientTape() as tape:
        logits = model(inputs, training=False)["mlm_logits"]
    grad = tf.convert_to_tensor(tape.gradient(logits, table.value))
    unused = sorted(set(range(cfg.vocab_size)) - set(ids.ravel().tolist()))
    assert np.abs(np.asarray(grad)[unused]).min(axis=1).max() > 0
    # Changing the embeddings changes the MLM output projection as the reference says.
    w2 = dict(w)
    w2["bert/embeddings/word_embeddings"] = (w["bert/embeddings/word_embeddings"] * 0.5).astype(np.float32)
    old = table.numpy()
    try:
        table.assign(w2["bert/embeddings/word_embeddings"])
        got = np.asarray(model(inputs, training=False)["mlm_logits"])
        want = numpy_bert(w2, cfg, ids, mask, types, positions)["mlm_logits"]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    finally:
        table.assign(old)


# ----------------------------------------------------------------------------------------------
# Serialization


@keras.saving.register_keras_serializable(package="bert_tf_tests")
class LayerHarness(keras.Model):
    """A model around one layer so the layer itself goes through .keras save/load."""

    def __init__(self, layer, kind, **kwargs):
        super().__init__(**kwargs)
        self.layer = keras.saving.deserialize_keras_object(layer) if isinstance(layer, dict) else layer
        self.kind = kind
        if kind == "mlm":
            c = self.layer.get_config()
            self.table = self.add_weight(shape=(c["vocab_size"], c["hidden_size"]), name="table",
                                         initializer="random_normal")

    def call(self, inputs):
        if self.kind == "embeddings":
            return self.layer(inputs["input_word_ids"], inputs["input_type_ids"])
        if self.kind in ("attention", "block"):
            return self.layer(inputs["x"], bl.attention_bias(inputs["input_mask"]))
        if self.kind == "mlm":
            return self.layer(inputs["x"], inputs["positions"], self.table)
        if self.kind == "dense":
            return self.layer(inputs["x"])
        return self.layer(inputs)  # encoder

    def build_from_config(self, config):
        pass  # the inner layer is rebuilt by its own build config; `table` exists from __init__

    def get_config(self):
        return {"layer": keras.saving.serialize_keras_object(self.layer), "kind": self.kind,
                "name": self.name}


def _layer_cases(cfg):
    h = cfg.hidden_size
    return [
        ("embeddings", bl.BertEmbeddings(cfg.vocab_size, h, cfg.max_position_embeddings,
                                         cfg.type_vocab_size, 0.02, 0.1, name="emb")),
        ("attention", bl.BertSelfAttention(h, cfg.num_attention_heads, 0.02, 0.1, name="att")),
        ("block", bl.TransformerBlock(h, cfg.num_attention_heads, cfg.intermediate_size,
                                      "gelu_exact", 0.1, 0.1, 0.02, name="blk")),
        ("encoder", be.BertEncoder.from_bert_config(cfg, name="enc")),
        ("mlm", bh.MaskedLMHead(h, cfg.vocab_size, "relu", 0.02, name="mlm")),
        ("dense", bh.DenseLogitsHead(3, 0.1, 0.02, name="dense")),
    ]


def _assert_same_outputs(a, b):
    fa, fb = tf.nest.flatten(a), tf.nest.flatten(b)
    assert len(fa) == len(fb)
    for x, y in zip(fa, fb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_every_layer_round_trips_through_keras_file(tmp_path):
    cfg = tiny_config()
    rng = np.random.default_rng(4)
    ids, mask, types = padded_batch(rng, cfg, lengths=(6, 3), seq=6)
    inputs = {**as_inputs(ids, mask, types),
              "x": tf.constant(rng.standard_normal((2, 6, cfg.hidden_size)).astype(np.float32)),
              "positions": tf.constant([[0, 5], [2, 2]], tf.int32)}
    for kind, layer in _layer_cases(cfg):
        harness = LayerHarness(layer, kind)
        before = harness(inputs)
        # Non-default weights, so that a load which silently re-initialises would show.
        for v in harness.weights:
            v.assign(rng.standard_normal(v.shape).astype(np.float32) * 0.3)
        before = harness(inputs)
        path = str(tmp_path / f"{kind}.keras")
        harness.save(path)
        loaded = keras.models.load_model(path)
        assert type(loaded.layer) is type(layer)
        assert loaded.layer.get_config() == layer.get_config()
        _assert_same_outputs(before, loaded(inputs))
        assert len(loaded.weights) == len(harness.weights)
        for a, b in zip(harness.weights, loaded.weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def _model_inputs(cfg, rng, pretrainer=False):
    ids, mask, types = padded_batch(rng, cfg, lengths=(7, 4), seq=7)
    extra = {"masked_lm_positions": np.array([[1, 2], [0, 3]], np.int32)} if pretrainer else {}
    return as_inputs(ids, mask, types, **extra)


@pytest.mark.parametrize("kind", ["pretrainer", "classifier", "span", "tagger", "functional"])
def test_every_model_round_trips_through_keras_file(tmp_path, kind):
    cfg = tiny_config()
    rng = np.random.default_rng(5)
    model = {"pretrainer": lambda: bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)),
             "classifier": lambda: bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 4, dropout_rate=0.2),
             "span": lambda: bm.BertSpanLabeler(be.BertEncoder.from_bert_config(cfg)),
             "tagger": lambda: bm.BertTokenClassifier(be.BertEncoder.from_bert_config(cfg), 6),
             "functional": lambda: be.build_encoder_model(cfg)}[kind]()
    inputs = _model_inputs(cfg, rng, pretrainer=kind == "pretrainer")
    if kind == "functional":
        model(inputs)
    else:
        model.build()  # no call: the saved build config must still rebuild it on load
    for v in model.weights:
        v.assign(rng.standard_normal(v.shape).astype(np.float32) * 0.3)
    before = model(inputs, training=False)
    path = str(tmp_path / f"{kind}.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is type(model)
    as_json = lambda c: json.loads(json.dumps(c))  # shapes come back as lists, not tuples
    assert as_json(loaded.get_config()) == as_json(model.get_config())
    _assert_same_outputs(before, loaded(inputs, training=False))


def test_get_config_round_trip():
    cfg = tiny_config(hidden_act="swish")
    for _, layer in _layer_cases(cfg):
        config = layer.get_config()
        clone = type(layer).from_config(config)
        assert clone.get_config() == config
        json.dumps(config)  # plain JSON
    enc = be.BertEncoder.from_bert_config(cfg)
    assert BertConfig.from_dict(enc.get_config()) == cfg
    for model in (bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)), bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 3, dropout_rate=0.3),
                  bm.BertSpanLabeler(be.BertEncoder.from_bert_config(cfg)), bm.BertTokenClassifier(be.BertEncoder.from_bert_config(cfg), 9, dropout_rate=0.0)):
        config = model.get_config()
        json.dumps(config)
        clone = type(model).from_config(config)
        assert clone.get_config() == config
        assert clone.bert_config == cfg
        # The encoder is a nested Keras config, not a hand-made dict.
        assert config["encoder"]["class_name"] == "BertEncoder"
        assert BertConfig.from_dict(config["encoder"]["config"]) == cfg
        assert isinstance(clone.encoder, be.BertEncoder) and clone.encoder is not model.encoder
    assert bm.BertClassifier.from_config(
        bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 3, dropout_rate=0.3)
        .get_config()).dropout_rate == 0.3


def test_task_models_take_an_encoder_instance():
    cfg = tiny_config()
    encoder = be.BertEncoder.from_bert_config(cfg)
    pre = bm.build_model(bm.BertPretrainer(encoder))
    # A pre-trained encoder instance goes into a fine-tuning model as is (weights shared).
    clf = bm.build_model(bm.BertClassifier(encoder, 2))
    assert clf.encoder is pre.encoder is encoder
    assert len(clf.weights) == len(encoder.weights) + 2  # not rebuilt: no duplicate weights
    encoder.word_embeddings.assign(tf.ones_like(encoder.word_embeddings))
    np.testing.assert_array_equal(clf.encoder.word_embeddings.numpy(), 1.0)
    # A BertConfig where the encoder belongs: one line pointing at from_bert_config.
    with pytest.raises(BertError, match=r"encoder must be a BertEncoder, got BertConfig .*"
                                        r"BertClassifier.from_bert_config"):
        bm.BertClassifier(cfg, 2)
    assert bm.find_encoder(clf) is encoder
    assert bm.find_encoder(be.build_encoder_model(cfg)).bert_config == cfg
    with pytest.raises(BertError, match="found 0"):
        bm.find_encoder(keras.Sequential([keras.layers.Dense(2)]))


# ----------------------------------------------------------------------------------------------
# Mixed precision


def _graph_op_dtypes(fn, inputs):
    graph = tf.function(fn).get_concrete_function(inputs).graph
    return Counter((op.type, op.outputs[0].dtype.name) for op in graph.get_operations()
                   if op.outputs)


@pytest.mark.parametrize("policy,low,tol", [
    # fp16 keeps 11 significant bits (roundoff 2^-11 ~ 4.9e-4), bf16 8 (2^-8 ~ 3.9e-3). Outputs
    # are LayerNorm-ed (|x| up to ~4) after ~10 chained rounded ops per block, so errors of a
    # few roundoffs times |x| are expected (measured: 4.4e-3 fp16, 5.7e-2 bf16 on sequence_output).
    # tol = ~40 x roundoff; a precision bug (low-precision softmax under the -10000 adder, fp16
    # LayerNorm statistics) is orders of magnitude worse.
    ("mixed_float16", "float16", 2e-2),
    ("mixed_bfloat16", "bfloat16", 1.5e-1),
])
def test_mixed_precision(policy, low, tol, restore_dtype_policy):
    rng = np.random.default_rng(6)
    cfg = tiny_config()
    w = random_tf1_weights(cfg, rng)
    ids, mask, types = padded_batch(rng, cfg)
    inputs = as_inputs(ids, mask, types, masked_lm_positions=np.array([[0, 3], [1, 4], [0, 0]], np.int32))
    want = numpy_bert(w, cfg, ids, mask, types, np.asarray(inputs["masked_lm_positions"]))

    keras.config.set_dtype_policy(policy)
    model = bm.build_model(bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)))
    set_tf1_weights(model, w)
    assert all(v.dtype == "float32" for v in model.weights)  # master weights stay float32
    out = model(inputs, training=False)
    assert out["mlm_logits"].dtype == tf.float32 and out["nsp_logits"].dtype == tf.float32
    assert out["sequence_output"].dtype == low
    # LayerNorm layers run under a float32 policy; the graph's softmax and LayerNorm statistics
    # are float32 while the matmuls really run in low precision.
    lns = [l for l in model._flatten_layers() if isinstance(l, keras.layers.LayerNormalization)]
    assert len(lns) == 2 * cfg.num_hidden_layers + 2
    assert all(l.dtype_policy.compute_dtype == "float32" for l in lns)
    ops = _graph_op_dtypes(lambda x: model(x, training=False), inputs)
    assert ops[("Softmax", "float32")] == cfg.num_hidden_layers
    assert not [k for k in ops if k[0] == "Softmax" and k[1] != "float32"]
    assert ops[("Rsqrt", "float32")] == len(lns)
    assert not [k for k in ops if k[0] in ("Rsqrt", "Mean") and k[1] != "float32"]
    assert ops[("MatMul", low)] > 0 and ops[("BatchMatMulV2", low)] > 0
    got = numpy_dict(out)
    for key in ("sequence_output", "pooled_output", "nsp_logits"):
        diff = np.abs(got[key].astype(np.float32) - want[key]).max()
        assert 0 < diff < tol, (key, diff)
    # MLM logits are sums over H of O(1) products: scale the tolerance by their magnitude.
    scale = np.abs(want["mlm_logits"]).max()
    assert 0 < np.abs(got["mlm_logits"] - want["mlm_logits"]).max() < tol * scale


# ----------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize("overrides,needle", [
    (dict(hidden_size=24, num_attention_heads=5), "not divisible by num_attention_heads"),
    (dict(hidden_act="gelu_fancy"), "unknown hidden_act 'gelu_fancy'"),
    (dict(intermediate_size=-4), "intermediate_size must be a positive integer"),
    (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer"),
    (dict(vocab_size=12.5), "vocab_size must be a positive integer"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob must be in [0, 1)"),
])
def test_config_validation_errors_are_one_line(overrides, needle, tmp_path):
    for make in (lambda: tiny_config(**overrides),
                 lambda: be.BertEncoder(**{**TINY, **overrides}),
                 lambda: bm.BertPretrainer.from_bert_config({**TINY, **overrides})):
        with pytest.raises(BertError) as err:
            make()
        assert needle in str(err.value) and "\n" not in str(err.value)
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**TINY, **overrides}))
    with pytest.raises(BertError) as err:
        BertConfig.from_json_file(str(path))
    assert str(err.value).startswith(f"{path}: ") and needle in str(err.value)
    assert "\n" not in str(err.value)


def _param_count(c):
    h, i = c.hidden_size, c.intermediate_size
    emb = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * h + 2 * h
    block = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    return emb + c.num_hidden_layers * block + h * h + h


@pytest.mark.parametrize("name,layers,hidden,heads,inter", [
    ("bert_base", 12, 768, 12, 3072), ("bert_large", 24, 1024, 16, 4096),
    ("bert_tiny", 2, 128, 2, 512), ("bert_mini", 4, 256, 4, 1024),
    ("bert_small", 4, 512, 8, 2048), ("bert_medium", 8, 512, 8, 2048),
])
def test_shipped_configs_have_documented_sizes(name, layers, hidden, heads, inter):
    cfg = BertConfig.from_json_file(os.path.join(REPO, "configs", f"{name}.json"))
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
            cfg.intermediate_size) == (layers, hidden, heads, inter)
    assert (cfg.vocab_size, cfg.hidden_act, cfg.max_position_embeddings, cfg.type_vocab_size,
            cfg.initializer_range, cfg.head_size) == (30522, "gelu", 512, 2, 0.02, 64)
    if name == "bert_base":
        assert _param_count(cfg) == 109_482_240  # the well-known BERT-Base (uncased) size
    if name == "bert_tiny":
        enc = be.BertEncoder.from_bert_config(cfg)
        enc.build()
        assert enc.count_params() == _param_count(cfg) == 4_385_920
