"""The one real-length policy (issue 45): what is per position comes from what the model
returns (an undeclared subclass too; an unclassifiable model is not cut, logged once);
features are cut by name ([B, S] labels that are not per position stay whole, weighted labels
past the last real token are kept); rows with no real tokens, masks with holes and bfloat16
models; Keras' steps keep their mode in the traced function (no retracing over fit/predict
rounds, no leak into another thread's direct call)."""
import logging
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import real_length
from bert_tf.modeling.models import (BertClassifier, BertSpanLabeler, BertTaskModel,
                                     BertTokenClassifier)
from conftest import tiny_bert_config
from test_real_length_training import _record_lengths

S = 16


def _ids(lengths, seed=0, holes=()):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    mask = (np.arange(S)[None, :] < lengths[:, None]).astype(np.int32)
    for row, pos in holes:
        mask[row, pos] = 0
    ids = rng.integers(5, 60, (len(lengths), S)).astype(np.int32) * mask
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


def _cfg():
    return tiny_bert_config(num_hidden_layers=1, max_position_embeddings=32)


def _direct(model, x):
    """The model's direct call on all of `x` (never cut: only Keras' steps cut), as numpy: the
    full-length reference without tracing a second predict function."""
    return {k: np.asarray(v) for k, v in model(x).items()}


def _twin(model):
    """A second model with `model`'s weights, computing at full length."""
    other = model.__class__.from_config(model.get_config())
    other.build()
    other.set_weights(model.get_weights())
    other.pad_to_max_seq_length = True
    return other


@keras.saving.register_keras_serializable(package="test_real_length_policy")
class PerToken(BertTaskModel):
    """A subclass that returns per-position outputs without declaring anything."""

    def __init__(self, encoder, **kwargs):
        super().__init__(encoder, **kwargs)
        self.head = keras.layers.Dense(2, name="head")

    def _head_shapes(self, h):
        return [(self.head, (None, None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        return {"token_logits": self.head(enc["sequence_output"]),
                "pooled": enc["pooled_output"]}


@keras.saving.register_keras_serializable(package="test_real_length_policy")
class StaticOnly(BertClassifier):
    """Cannot be traced on another length: unclassifiable."""

    def call(self, inputs, training=None):
        if inputs["input_mask"].shape[1] not in (None, S):
            raise TypeError("computes length S only")
        return super().call(inputs, training=training)


@keras.saving.register_keras_serializable(package="test_real_length_policy")
class Transposed(BertTaskModel):
    """Returns the sequence output transposed, [B, H, S]: the length is not on axis 1."""

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        return {"hs": tf.transpose(enc["sequence_output"], [0, 2, 1]),
                "pooled": enc["pooled_output"]}


@keras.saving.register_keras_serializable(package="test_real_length_policy")
class Reshaped(BertClassifier):
    """Class logits [B, 3] whose axis 1 loses its static size (a reshape to [B, -1])."""

    def call(self, inputs, training=None):
        logits = super().call(inputs, training=training)["logits"]
        return {"logits": tf.reshape(logits, tf.stack([tf.shape(logits)[0], -1]))}


@pytest.mark.parametrize("cls", [Transposed, Reshaped])
def test_an_output_without_the_length_on_axis_1_is_not_cut_and_keeps_its_shape(cls, caplog):
    model = cls.from_bert_config(_cfg(), 3, dropout_rate=0.0) if cls is Reshaped \
        else cls.from_bert_config(_cfg())
    model.build()
    x = _ids([3, 5, 2, 4, 16, 3, 7, 2, 3, 4])  # batches cut to 8, 16 and 8 if cut
    with caplog.at_level(logging.WARNING, logger="bert_tf"):
        got = model.predict(x, batch_size=4, verbose=0)
    want = _direct(model, x)
    assert model.__dict__["_real_length_outputs"] == {
        next(iter(model.__dict__["_real_length_outputs"])): None}
    assert any(cls.__name__ in r.getMessage() for r in caplog.records)
    for k in want:
        assert got[k].shape == want[k].shape, k
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-5, err_msg=k)
    if cls is Transposed:
        assert got["hs"].shape == (10, 32, S)
    else:
        assert got["logits"].shape == (10, 3)


def test_output_kinds_by_two_lengths_and_restore_checks_the_cut_length():
    def call(x):
        h = tf.cast(tf.one_hot(x["input_word_ids"], 4), tf.float32)  # [B, S, 4]
        return {"pos": h, "cls": tf.reduce_sum(h, 1), "att": tf.einsum("bsh,bth->bst", h, h),
                "t": tf.transpose(h, [0, 2, 1])}
    x = {k: tf.constant(v) for k, v in _ids([3, 5]).items()}
    assert real_length.output_kinds(lambda i: {k: call(i)[k] for k in ("pos", "cls")}, x,
                                    {}) == ("pos",)
    for k in ("att", "t"):
        assert real_length.output_kinds(lambda i, k=k: {k: call(i)[k]}, x, {}) is None, k
    # A [B, 3] output taken for per position by mistake fails loudly, never padded to S.
    with pytest.raises(tf.errors.InvalidArgumentError, match="cut length"):
        real_length.call_on_real_length(lambda i: {"logits": tf.ones([2, 3])}, x, ("logits",))


def test_undeclared_per_position_subclass_is_cut_in_predict_only():
    model = PerToken.from_bert_config(_cfg())
    model.build()
    pad = _twin(model)
    # Batches of different real lengths (8 and 16 after rounding) concatenate at S.
    x = _ids([3, 5, 2, 4, 16, 3, 7, 2])
    got, want = model.predict(x, batch_size=4, verbose=0), _direct(model, x)
    mask = x["input_mask"] > 0
    assert got["token_logits"].shape == want["token_logits"].shape == (8, S, 2)
    np.testing.assert_allclose(got["token_logits"][mask], want["token_logits"][mask],
                               rtol=0, atol=1e-5)
    assert not got["token_logits"][~mask].any()  # padding holds 0
    np.testing.assert_allclose(got["pooled"], want["pooled"], rtol=0, atol=1e-5)
    # fit on [B, S] labels: its loss sees every position, so fit keeps the full length.
    y = {"token_logits": (x["input_word_ids"] % 2).astype(np.int32),
         "pooled": np.zeros((8, 32), np.float32)}
    losses = {"token_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              "pooled": keras.losses.MeanSquaredError()}
    for m in (model, pad):
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss=losses)
    h = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    h_pad = pad.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(h.history["loss"], h_pad.history["loss"], rtol=0, atol=1e-5)


def test_unclassifiable_model_is_not_cut_and_logged_once(caplog):
    model = StaticOnly.from_bert_config(_cfg(), 3, dropout_rate=0.0)
    model.build()
    x = _ids([3, 5, 2, 4])
    want = model(x)["logits"].numpy()
    with caplog.at_level(logging.WARNING, logger="bert_tf"):
        for _ in range(2):
            np.testing.assert_allclose(model.predict(x, batch_size=4, verbose=0)["logits"],
                                       want, rtol=0, atol=1e-5)
    said = [r.getMessage() for r in caplog.records if "StaticOnly" in r.getMessage()]
    assert len(said) == 1 and "computed at full length" in said[0], said


def test_a_bs_label_is_never_cut_by_shape_and_weighted_labels_are_kept():
    x = _ids([3, 5, 2, 4])
    multi = np.eye(S, dtype=np.float32)[[1, 2, 3, 4]]  # a multi-label target, S classes
    batch = dict(x, label_ids=multi)
    out = real_length.cut_batch_fn(S, step=8)(batch)
    assert out["input_word_ids"].shape == (4, 8)
    np.testing.assert_array_equal(out["label_ids"], multi)  # not per position: whole
    # Tagging: its labels are named; a weight past the last real token (12) keeps the cut
    # long enough to hold it.
    weights = x["input_mask"].astype(np.float32)
    weights[2, 12] = 1.0
    tags = dict(x, label_ids=np.ones((4, S), np.int32), label_weights=weights)
    fn = real_length.cut_batch_fn(S, step=8, keys=real_length.INPUT_NAMES + (
        "label_ids", "label_weights"), cover=("label_weights",))
    out = fn(tags)
    assert out["label_weights"].shape == out["input_mask"].shape == (4, 16)
    assert float(tf.reduce_sum(out["label_weights"])) == weights.sum()
    with pytest.raises(ValueError, match="label_ids has shape"):
        real_length.cut_batch_fn(S, keys=("label_ids",))(
            dict(x, label_ids=np.zeros((4, 3), np.int32)))


def test_keras_fit_with_a_bs_multi_label_target_equals_padded():
    # A pooled model (its logits' axis 1 is static, whatever its size): cut in fit; the
    # [B, S] target is never touched.
    model = BertClassifier.from_bert_config(_cfg(), S, dropout_rate=0.0)
    model.build()
    pad = _twin(model)
    x = _ids([3, 5, 2, 4, 6, 2, 3, 9])
    y = (np.random.default_rng(1).random((8, S)) < 0.3).astype(np.float32)
    for m in (model, pad):
        m.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True))
    seen = _record_lengths(model)
    h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    h_pad = pad.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    assert seen[:2] == [8, 16] and set(seen[2:]) == {None}  # kinds (two lengths), cut
    np.testing.assert_allclose(h.history["loss"], h_pad.history["loss"], rtol=0, atol=1e-5)


def test_a_row_with_no_real_tokens_gives_what_the_docstring_says():
    model = BertTokenClassifier.from_bert_config(_cfg(), 3, dropout_rate=0.0)
    model.build()
    x = _ids([5, 0, 3, 0])
    got, want = model.predict(x, batch_size=4, verbose=0), _direct(model, x)
    mask = x["input_mask"] > 0
    np.testing.assert_allclose(got["logits"][mask], want["logits"][mask], rtol=0, atol=1e-5)
    assert not got["logits"][[1, 3]].any()  # padding values at every position
    # Pooled outputs of an empty row are the model's on the row cut to the batch's length.
    clf = BertClassifier.from_bert_config(_cfg(), 3, dropout_rate=0.0)
    clf.build()
    logits = clf.predict(x, batch_size=4, verbose=0)["logits"]
    direct = clf({k: v[:, :8] for k, v in x.items()})["logits"].numpy()
    np.testing.assert_allclose(logits, direct, rtol=0, atol=1e-5)
    # A batch of empty rows only: cut to one step (8).
    empty = _ids([0, 0])
    assert int(real_length.cut_inputs(empty)[1]) == 8


def test_a_mask_with_a_hole_keeps_the_hole_inside_the_cut():
    model = BertSpanLabeler.from_bert_config(_cfg())
    model.build()
    x = _ids([6, 4, 9, 3], holes=[(0, 2), (2, 5)])
    assert int(real_length.cut_inputs(x)[1]) == 16  # last real position 8 (+1): 16
    got, want = model.predict(x, batch_size=4, verbose=0), _direct(model, x)
    mask = x["input_mask"] > 0
    for k in ("start_logits", "end_logits"):
        np.testing.assert_allclose(got[k][mask], want[k][mask], rtol=0, atol=1e-5)
        assert got[k][0, 2] == got[k][2, 5] == real_length.SPAN_PAD_LOGIT  # the holes
        assert (got[k][~mask] == real_length.SPAN_PAD_LOGIT).all()


@pytest.fixture
def bfloat16():
    before = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    keras.mixed_precision.set_global_policy(before)


def test_bfloat16_model_and_inputs(bfloat16):
    from bert_tf.export.encoder import EncoderModule
    model = BertSpanLabeler.from_bert_config(_cfg())
    model.build()
    assert model.encoder.compute_dtype == "bfloat16"
    x = _ids([6, 4, 9, 3])
    got, want = model.predict(x, batch_size=4, verbose=0), _direct(model, x)
    mask = x["input_mask"] > 0
    for k in ("start_logits", "end_logits"):
        assert got[k].dtype == want[k].dtype
        np.testing.assert_allclose(got[k][mask], want[k][mask], rtol=0, atol=3e-2)
        assert (got[k][~mask] == real_length.SPAN_PAD_LOGIT).all()
    # The encoder export: bfloat16 sequence outputs restored in float32, 0.0 at padding.
    module = EncoderModule(model)
    out = module.serve_flat(*[tf.constant(v) for v in x.values()])
    seq = out["sequence_output"].numpy()
    assert seq.dtype == np.float32 and seq.shape == (4, S, 32) and not seq[~mask].any()
    ref = model.encoder(x)["sequence_output"].numpy().astype(np.float32)
    np.testing.assert_allclose(seq[mask], ref[mask], rtol=0, atol=5e-2)
    # bfloat16 inputs: a bfloat16 mask marks real tokens; a bfloat16 output keeps its dtype.
    bmask = tf.cast(x["input_mask"], tf.bfloat16)
    assert int(real_length.real_length(bmask)) == 9
    h = tf.ones([4, 16, 3], tf.bfloat16)
    back = real_length.restore(h[:, :9], bmask, real_length.SPAN_PAD_LOGIT)
    assert back.dtype == tf.bfloat16 and back.shape == (4, S, 3)
    assert float(back[0, 7, 0]) == float(tf.cast(real_length.SPAN_PAD_LOGIT, tf.bfloat16))


def test_fit_predict_rounds_do_not_retrace():
    model = BertTokenClassifier.from_bert_config(_cfg(), 3, dropout_rate=0.0)
    model.build()
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    traces = _record_lengths(model)
    x, val = _ids([3, 5, 2, 4, 16, 3, 7, 2]), _ids([4, 2, 6, 3])
    y = np.ones((8, S), np.int32)
    counts = []
    for _ in range(3):
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        out = model.predict(val, batch_size=4, verbose=0)
        counts.append(len(traces))
    # Round 1: the outputs' kinds (two lengths), fit's step (full length), predict's (cut);
    # then none.
    assert counts == [4, 4, 4], traces
    assert not out["logits"][val["input_mask"] == 0].any()


def test_first_fit_traces_its_step_once_with_the_numbers_of_keras_own_build():
    """Adam's slots are built before fit traces its step (Keras builds them inside the first
    trace, and a tf.function that creates variables traces twice): one trace, and the weights
    after two epochs equal a twin trained through keras.Model.fit's own build."""
    def make():
        model = BertClassifier.from_bert_config(_cfg(), 3, dropout_rate=0.0)
        model.build()
        model.compile(optimizer=keras.optimizers.Adam(1e-2),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model
    ours, twin = make(), make()
    twin.set_weights(ours.get_weights())
    traces = _record_lengths(ours)
    x, y = _ids([3, 5, 2, 4, 16, 3, 7, 2]), np.array([0, 1, 2, 0, 1, 2, 0, 1])
    ours.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False,
             pad_to_max_seq_length=True)
    assert traces == [S]
    assert not twin.optimizer.built
    keras.Model.fit(twin, x, y, batch_size=4, epochs=2, verbose=0, shuffle=False)
    names = [[v.path.split("/", 1)[1].replace(m.name, "model", 1) for v in m.optimizer.variables]
             for m in (ours, twin)]
    assert names[0] == names[1] and len(names[0]) == 2 + 2 * len(ours.trainable_variables)
    for a, b in zip(ours.get_weights(), twin.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_predict_in_one_thread_does_not_cut_a_direct_call_in_another():
    model = BertTokenClassifier.from_bert_config(_cfg(), 3, dropout_rate=0.0)
    model.build()
    x = _ids([3, 5, 2, 4])
    direct_want = model(x)["logits"].numpy()        # computed padding positions
    assert direct_want[x["input_mask"] == 0].any()
    # The predict thread stops inside its traced step (its mode set) until the main thread's
    # direct call is done: the two overlap by construction, not by timing.
    inside, go, results = threading.Event(), threading.Event(), {}
    call = model.call

    def blocking(inputs, **kw):
        if threading.current_thread().name == "predict" and not inside.is_set() and \
                inputs["input_mask"].shape[1] is None:  # predict's cut step, being traced
            results["blocked"] = real_length.keras_mode()
            inside.set()
            assert go.wait(60)
        return call(inputs, **kw)
    model.call = blocking

    def run():
        try:
            results["predict"] = model.predict(x, batch_size=4, verbose=0)["logits"]
        except Exception as e:  # noqa: BLE001  (reported below)
            results["error"] = e
        finally:
            inside.set()
    t = threading.Thread(target=run, name="predict")
    t.start()
    assert inside.wait(60)
    assert real_length.keras_mode() is None
    try:
        results["direct"] = model(x)["logits"].numpy()
    finally:
        go.set()
        t.join(60)
    assert "error" not in results, results.get("error")
    assert "blocked" in results  # the direct call ran while predict was inside its step
    np.testing.assert_array_equal(results["direct"], direct_want)
    assert not results["predict"][x["input_mask"] == 0].any()  # predict was cut: 0 there
