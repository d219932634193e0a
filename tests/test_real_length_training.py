"""Fine-tuning, evaluation and prediction compute only the real tokens (issue 38): each batch
is cut to its longest real length rounded up to a bucket; with dropout off every loss, weight,
eval result and prediction equals the padded run's; a run compiles a bounded set of shapes,
one with --pad_to_max_seq_length."""
import json
import os
import random

import keras
import numpy as np
import pytest

from bert_tf.modeling import real_length
from bert_tf.modeling.models import BertClassifier, BertSpanLabeler, BertTokenClassifier
from bert_tf.tasks import classifier, finetune, prediction
from conftest import tiny_bert_config

S = 32  # buckets 8, 16, 24, 32


class _Task(finetune.FinetuneTask):
    def __init__(self, cfg, loss):
        super().__init__(cfg, loss)

    def build_model(self):
        bert = tiny_bert_config(num_hidden_layers=1,
                                max_position_embeddings=max(64, self.cfg.max_seq_length))
        # Dropout off: cut and padded runs draw different masks ([B, L, H] vs [B, S, H]).
        model = {"classification": lambda: BertClassifier.from_bert_config(bert, 3, 0.0),
                 "tagging": lambda: BertTokenClassifier.from_bert_config(bert, 3, 0.0),
                 "span": lambda: BertSpanLabeler.from_bert_config(bert)}[self.loss_name]()
        return finetune.built(model, self.cfg)


def _trainer(tmp_path, name, loss, **overrides):
    kw = dict(output_dir=str(tmp_path / name), max_seq_length=S, train_batch_size=4,
              eval_batch_size=4, learning_rate=1e-2, seed=1, progress=False,
              strategy="one_device", iterations_per_loop=1)
    kw.update(overrides)
    cfg = finetune.RunConfig(**kw)
    return finetune.make_trainer(_Task(cfg, loss), cfg)


def _arrays(n=16, seed=0):
    """Mostly short rows (3..12 real tokens), one full-length row in four."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 13, n)
    lengths[::4] = S
    ids = rng.integers(5, 64, (n, S)).astype(np.int32)
    mask = (np.arange(S)[None, :] < lengths[:, None]).astype(np.int32)
    ids *= mask
    weights = ((rng.random((n, S)) < 0.5) * mask).astype(np.float32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids),
            "label_ids": rng.integers(0, 3, (n, S)).astype(np.int32), "label_weights": weights,
            "start_positions": (lengths - 1).astype(np.int32),
            "end_positions": (lengths - 1).astype(np.int32)}


def _features(loss, arrays):
    keep = {"classification": ("label_ids",), "tagging": ("label_ids", "label_weights"),
            "span": ("start_positions", "end_positions")}[loss]
    out = {k: arrays[k] for k in finetune.INPUT_NAMES + keep}
    if loss == "classification":
        out["label_ids"] = arrays["label_ids"][:, 0]
    return out


def _run(tmp_path, name, loss, steps=5, **overrides):
    trainer = _trainer(tmp_path, name, loss, **overrides)
    trainer.build_optimizer(steps, 1)
    trainer.restore()
    feats = _features(loss, _arrays())
    history = trainer.train(finetune.arrays_dataset_fn(
        feats, cut=finetune.cuts_batches(trainer.options, trainer.task), task=trainer.task))
    keys = {"classification": ["logits"], "tagging": ["logits"],
            "span": ["start_logits", "end_logits"]}[loss]
    preds = prediction.predict(trainer, _features(loss, _arrays(10, seed=1)), 4, keys)
    return trainer, [m["loss"] for m in history], preds


def test_tagging_training_equals_padded_and_compiles_bounded_shapes(tmp_path):
    loss = "tagging"
    cut, cut_losses, cut_preds = _run(tmp_path, "cut", loss)
    pad, pad_losses, pad_preds = _run(tmp_path, "pad", loss, pad_to_max_seq_length=True)
    np.testing.assert_allclose(cut_losses, pad_losses, rtol=0, atol=1e-5)
    for a, b in zip(cut.model.trainable_variables, pad.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-5, err_msg=a.path)
    # Shapes the compiled step ran on: buckets only (<= 8), one with the flag.
    assert set(cut.step_shapes) <= set(real_length.length_buckets(S))
    assert 1 < len(cut.step_shapes) <= 8 and sum(cut.step_shapes.values()) == 5
    assert dict(pad.step_shapes) == {S: 5}
    mask = _arrays(10, seed=1)["input_mask"] > 0
    for k, v in cut_preds.items():
        assert v.shape == pad_preds[k].shape
        real = v if v.ndim == 2 else v[mask]  # per-token outputs: the real positions
        np.testing.assert_allclose(real, pad_preds[k] if v.ndim == 2 else pad_preds[k][mask],
                                   rtol=0, atol=1e-5)
        if v.ndim == 3:
            assert not v[~mask].any()  # padding holds 0


def test_span_predictions_equal_at_real_positions(tmp_path):
    # The span loss's softmax covers padding positions (as the original's), so span training
    # keeps the full length; predictions are cut (decoding reads real positions only).
    trainer = _trainer(tmp_path, "span", "span")
    assert trainer.task.cut_training is False
    trainer.restore()
    feats = _features("span", _arrays(10, seed=1))
    keys = ["start_logits", "end_logits"]
    cut = prediction.predict(trainer, feats, 4, keys)
    trainer.options.pad_to_max_seq_length = True
    pad = prediction.predict(trainer, feats, 4, keys)
    mask = feats["input_mask"] > 0
    for k in keys:
        assert cut[k].shape == pad[k].shape == (10, S)
        np.testing.assert_allclose(cut[k][mask], pad[k][mask], rtol=0, atol=1e-5)
        assert (cut[k][~mask] == real_length.SPAN_PAD_LOGIT).all()
    # One trace of the prediction step per mode (cut batches come with a None length).
    steps = trainer._finetune_predict_steps.values()
    assert [s.experimental_get_tracing_count() for s in steps] == [1, 1]


def _cola(tmp_path):
    """CoLA-layout TSVs of 1..12 words (the vocabulary is the words: one piece each), so the
    cut batches take lengths 8, 16 and 24 of 32; vocab and a dropout-free config."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(20)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    cfg = tiny_bert_config(vocab_size=len(vocab), num_hidden_layers=1).to_dict()
    (tmp_path / "bert_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    data = tmp_path / "cola"
    data.mkdir()
    sents = [" ".join(rng.choices(words, k=rng.choice([1, 2, 3, 4, 12]))) for _ in range(24)]
    lines = [f"src\t{rng.randint(0, 1)}\t\t{t}" for t in sents]
    (data / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (data / "dev.tsv").write_text("\n".join(lines[:12]) + "\n", encoding="utf-8")
    test = ["index\tsentence"] + [f"{i}\t{t}" for i, t in enumerate(sents[12:])]
    (data / "test.tsv").write_text("\n".join(test) + "\n", encoding="utf-8")
    return dict(task_name="cola", data_dir=str(data), vocab_file=str(tmp_path / "vocab.txt"),
                bert_config_file=str(tmp_path / "bert_config.json"), do_train=True,
                do_eval=True, do_predict=True, max_seq_length=S, train_batch_size=4,
                eval_batch_size=4, predict_batch_size=4, num_train_steps=4,
                learning_rate=1e-3, seed=1, progress=False, do_export=False)


def _results(out):
    res = dict(line.strip().split(" = ") for line in open(os.path.join(out,
                                                                         "eval_results.txt")))
    return {k: float(v) for k, v in res.items()}, np.loadtxt(
        os.path.join(out, "test_results.tsv"), delimiter="\t")


def _capture_trainers(monkeypatch):
    trainers, make = [], finetune.make_trainer

    def capture(*args, **kwargs):
        trainers.append(make(*args, **kwargs))
        return trainers[-1]
    monkeypatch.setattr(finetune, "make_trainer", capture)
    return trainers


def test_run_classifier_eval_and_test_results_equal_padded(tmp_path, monkeypatch):
    flags = _cola(tmp_path)
    trainers = _capture_trainers(monkeypatch)
    classifier.run(classifier.ClassifierConfig(output_dir=str(tmp_path / "cut"), **flags))
    classifier.run(classifier.ClassifierConfig(output_dir=str(tmp_path / "pad"),
                                               pad_to_max_seq_length=True, **flags))
    # The cut run trained on short batches (texts of <= 14 pieces: 8 or 16), not only S.
    shapes = [t.step_shapes for t in trainers if t.step_shapes]
    assert len(shapes) == 2 and sum(shapes[0].values()) == 4
    assert set(shapes[0]) <= {8, 16, S} and set(shapes[0]) - {S}
    assert dict(shapes[1]) == {S: 4}
    (cut, cut_probs), (pad, pad_probs) = _results(tmp_path / "cut"), _results(tmp_path / "pad")
    assert set(cut) == set(pad) and cut["global_step"] == 4
    for k in cut:
        assert cut[k] == pytest.approx(pad[k], abs=1e-5), k
    assert cut_probs.shape == pad_probs.shape == (12, 2)
    np.testing.assert_allclose(cut_probs, pad_probs, rtol=0, atol=1e-5)


def _twins(make, optimizer=lambda: keras.optimizers.SGD(0.1)):
    """Two models with the same weights (one cuts, one padded)."""
    a, b = make(), make()
    for m in (a, b):
        m.build()
    b.set_weights(a.get_weights())
    for m in (a, b):
        m.compile(optimizer=optimizer(),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return a, b


def _record_lengths(model):
    """model.call records the length of every batch it is traced with (None: cut)."""
    seen = []
    call = model.call

    def recording(x, **kw):
        seen.append(x["input_mask"].shape[1])
        return call(x, **kw)
    model.call = recording
    return seen


def _ids(n=12):
    arrays = _arrays(n)
    return arrays, {k: arrays[k] for k in finetune.INPUT_NAMES}


def test_keras_fit_evaluate_predict_on_ids_cut_per_batch(tmp_path):
    arrays, x = _ids()
    y, w = arrays["label_ids"], arrays["label_weights"]
    # A per-position model: cut in predict only.
    cut, pad = _twins(lambda: BertTokenClassifier.from_bert_config(
        tiny_bert_config(num_hidden_layers=1), 3, dropout_rate=0.0))
    seen = _record_lengths(cut)
    p_cut, p_pad = cut.predict(x, batch_size=4, verbose=0), \
        pad.predict(x, batch_size=4, verbose=0, pad_to_max_seq_length=True)
    assert seen == [8, 16, None]  # what it returns (traces at two lengths), then its cut step
    mask = arrays["input_mask"] > 0
    assert p_cut["logits"].shape == p_pad["logits"].shape == (12, S, 3)
    np.testing.assert_allclose(p_cut["logits"][mask], p_pad["logits"][mask], rtol=0, atol=1e-5)
    assert not p_cut["logits"][~mask].any()
    del seen[:]
    cut.fit(x, y, sample_weight=w, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert seen == [S]  # its loss sees every position: fit keeps the full length
    # A pooled model: cut in fit and evaluate too.
    cut, pad = _twins(lambda: BertClassifier.from_bert_config(
        tiny_bert_config(num_hidden_layers=1), 3, dropout_rate=0.0))
    seen = _record_lengths(cut)
    y = arrays["label_ids"][:, 0]
    h_cut = cut.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    assert seen[:2] == [8, 16] and set(seen[2:]) == {None}  # kinds, then cut
    pad.pad_to_max_seq_length = True  # the attribute, as the keyword
    h_pad = pad.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h_cut.history["loss"], h_pad.history["loss"], rtol=0, atol=1e-5)
    del seen[:]
    assert cut.evaluate(x, y, batch_size=4, verbose=0) == pytest.approx(
        pad.evaluate(x, y, batch_size=4, verbose=0), abs=1e-5)
    assert seen == [None]
    for a, b in zip(cut.weights, pad.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-5, err_msg=a.path)


def test_keras_fit_predict_on_texts_cut_per_batch(tmp_path):
    from bert_tf.pretrained import BertTextModel
    from bert_tf.tokenization.text_graph import BertPreprocessingLayer
    flags = _cola(tmp_path)
    texts = ["w1", "w2 w3 w4", " ".join(["w5"] * 30), "w6 w7"] * 2
    labels = [0, 1, 1, 0] * 2

    pre = BertPreprocessingLayer(flags["vocab_file"], True, S)  # shared: made once

    def make():
        return BertTextModel(pre, BertClassifier.from_bert_config(
            tiny_bert_config(vocab_size=25, num_hidden_layers=1), 2, dropout_rate=0.0))

    cut, pad = _twins(make, lambda: keras.optimizers.Adam(1e-2))  # Adam: slots to make
    pad.pad_to_max_seq_length = True
    seen = {"cut": [], "pad": []}  # the lengths the inner model is traced with: cut (None), S
    for name, m in (("cut", cut), ("pad", pad)):
        m.model.call = (lambda call, name: lambda x, **kw: (seen[name].append(
            x["input_mask"].shape[1]), call(x, **kw))[1])(m.model.call, name)
    # fit first: the preprocessing layer (no weights) counts as built, so Adam's slots are made
    # before the step is traced, and each fit traces its step once. The cut model's fit is the
    # first call of `pre` (its check catches a second trace); the pad model's comes after.
    h_cut = cut.fit(texts, labels, batch_size=4, epochs=1, shuffle=False, verbose=0)
    h_pad = pad.fit(texts, labels, batch_size=4, epochs=1, shuffle=False, verbose=0)
    # fit's step cut the batches too; each length traced once (the cut step: its inner length
    # branches and the step, None)
    assert None in seen["cut"] and len(set(seen["cut"])) == len(seen["cut"]), seen
    assert seen["pad"] == [S]
    np.testing.assert_allclose(h_cut.history["loss"], h_pad.history["loss"], rtol=0, atol=1e-5)
    seen = {"cut": [], "pad": []}
    np.testing.assert_allclose(cut.predict(texts, batch_size=4, verbose=0),
                               pad.predict(texts, batch_size=4, verbose=0), rtol=0, atol=1e-5)
    assert None in seen["cut"] and len(set(seen["cut"])) == len(seen["cut"]), seen
    assert seen["pad"] == [S]


def _classifier_twins():
    return _twins(lambda: BertClassifier.from_bert_config(
        tiny_bert_config(num_hidden_layers=1), 3, dropout_rate=0.0))


@pytest.mark.parametrize("attribute", [False, True])
def test_keras_fit_validation_inherits_fit_mode(attribute):
    # Keras' fit runs self.evaluate on validation_data: it must not re-decide the mode (and
    # drop fit's traced step) when the keyword and the attribute disagree.
    arrays, x = _ids(8)
    y = arrays["label_ids"][:, 0]
    model, _ = _classifier_twins()
    model.pad_to_max_seq_length = attribute
    seen = _record_lengths(model)
    h = model.fit(x, y, validation_data=(x, y), batch_size=4, epochs=2, verbose=0,
                  pad_to_max_seq_length=not attribute)
    assert len(h.history["loss"]) == len(h.history["val_loss"]) == 2
    assert set(seen) == ({S} if not attribute else {8, 16, None})  # (kinds: 8 and 16)


def _span_twins():
    def make():
        return BertSpanLabeler.from_bert_config(tiny_bert_config(num_hidden_layers=1))
    a, b = make(), make()
    for m in (a, b):
        m.build()
    b.set_weights(a.get_weights())
    for m in (a, b):
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        m.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss={"start_logits": loss, "end_logits": loss})
    return a, b


@pytest.mark.parametrize("kind", ["tagging", "span"])
def test_keras_per_position_losses_equal_padded(kind):
    # Per-position losses see every position (tagging without sample_weight, span softmax):
    # fit / evaluate keep the full length, so they equal the padded run's.
    arrays, x = _ids(8)
    if kind == "tagging":
        cut, pad = _twins(lambda: BertTokenClassifier.from_bert_config(
            tiny_bert_config(num_hidden_layers=1), 3, dropout_rate=0.0))
        y = arrays["label_ids"]
    else:
        cut, pad = _span_twins()
        y = {"start_logits": arrays["start_positions"], "end_logits": arrays["end_positions"]}
    kw = dict(batch_size=4, verbose=0)
    got = cut.evaluate(x, y, **kw)
    want = pad.evaluate(x, y, pad_to_max_seq_length=True, **kw)
    assert got == pytest.approx(want, abs=1e-5)
    h_cut = cut.fit(x, y, epochs=1, shuffle=False, **kw)
    h_pad = pad.fit(x, y, epochs=1, shuffle=False, pad_to_max_seq_length=True, **kw)
    np.testing.assert_allclose(h_cut.history["loss"], h_pad.history["loss"], rtol=0, atol=1e-5)


def test_pretrainer_given_masked_lm_positions_is_not_cut_in_keras():
    from bert_tf.modeling.models import BertPretrainer
    arrays, x = _ids(8)
    model = BertPretrainer.from_bert_config(tiny_bert_config(num_hidden_layers=1))
    model.build()
    # Short rows with a masked-LM position in their padding (past any cut length).
    x = dict(x, masked_lm_positions=np.tile(np.array([[1, 2, S - 1]], np.int32), (8, 1)))
    want = model(x)
    got = model.predict(x, batch_size=4, verbose=0)
    for k in ("mlm_logits", "nsp_logits", "sequence_output"):
        np.testing.assert_allclose(got[k], want[k].numpy(), rtol=0, atol=1e-5, err_msg=k)


def test_pretrainer_given_the_encoder_inputs_only_is_cut_in_keras_predict():
    from bert_tf.modeling.models import BertPretrainer
    arrays, x = _ids(8)
    model = BertPretrainer.from_bert_config(tiny_bert_config(num_hidden_layers=1))
    model.build()
    seen = _record_lengths(model)
    got = model.predict(x, batch_size=4, verbose=0)
    assert None in seen  # cut
    want = model.predict(x, batch_size=4, verbose=0, pad_to_max_seq_length=True)
    mask = arrays["input_mask"] > 0
    for k in ("mlm_logits", "sequence_output"):
        assert got[k].shape == want[k].shape, k
        np.testing.assert_allclose(got[k][mask], want[k][mask], rtol=0, atol=1e-5, err_msg=k)
        assert not got[k][~mask].any(), k  # padding holds 0
    np.testing.assert_allclose(got["nsp_logits"], want["nsp_logits"], rtol=0, atol=1e-5)


def test_keras_under_a_one_replica_mirrored_strategy_is_not_cut(caplog):
    import logging

    import tensorflow as tf
    arrays, x = _ids(8)
    for strategy, cut in ((tf.distribute.MirroredStrategy(["/cpu:0"]), False),
                          (tf.distribute.OneDeviceStrategy("/cpu:0"), True)):
        with strategy.scope():
            model = BertClassifier.from_bert_config(tiny_bert_config(num_hidden_layers=1), 3,
                                                    dropout_rate=0.0)
            model.build()
        seen = _record_lengths(model)
        with caplog.at_level(logging.WARNING, logger="bert_tf"):
            model.predict(x, batch_size=4, verbose=0)
        assert (None in seen) == cut and (S in seen) != cut, (strategy, seen)
    assert any("MirroredStrategy" in r.getMessage() for r in caplog.records)


def test_predict_on_batch_trace_is_not_reused_by_predict():
    arrays, x = _ids(8)
    model = BertTokenClassifier.from_bert_config(tiny_bert_config(num_hidden_layers=1), 3,
                                                 dropout_rate=0.0)
    model.build()
    seen = _record_lengths(model)
    first = model.predict_on_batch({k: v[:4] for k, v in x.items()})
    assert seen == [S]  # what it is given
    out = model.predict(x, batch_size=4, verbose=0)
    assert seen == [S, 8, 16, None]  # predict: the outputs' kinds, then its own, cut step
    mask = arrays["input_mask"][:4] > 0
    np.testing.assert_allclose(out["logits"][:4][mask], first["logits"][mask], rtol=0,
                               atol=1e-5)
    assert not out["logits"][:4][~mask].any()
    again = model.predict_on_batch({k: v[:4] for k, v in x.items()})
    assert seen == [S, 8, 16, None]  # its own step again, kept: no retrace
    np.testing.assert_array_equal(again["logits"], first["logits"])


@pytest.mark.parametrize("text", [False, True])
def test_pad_to_max_seq_length_survives_save_and_load(tmp_path, text):
    model = BertClassifier.from_bert_config(tiny_bert_config(num_hidden_layers=1), 2,
                                            pad_to_max_seq_length=True)
    model.build()
    if text:
        from bert_tf.pretrained import BertTextModel
        from bert_tf.tokenization.text_graph import BertPreprocessingLayer
        (tmp_path / "vocab.txt").write_text("\n".join(
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]) + "\n", encoding="utf-8")
        model = BertTextModel(BertPreprocessingLayer(str(tmp_path / "vocab.txt"), True, 8),
                              model, pad_to_max_seq_length=True)
        model.build()
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.pad_to_max_seq_length is True
    assert (loaded.model if text else loaded).pad_to_max_seq_length is True
    assert BertClassifier.from_config(dict(model.get_config() if not text else
                                           model.model.get_config(),
                                           pad_to_max_seq_length=False)
                                      ).pad_to_max_seq_length is False


def test_from_pretrained_passes_pad_to_max_seq_length(tmp_path):
    import bert_tf
    from bert_tf.convert.checkpoints import save_tf1_checkpoint
    from bert_tf.modeling.models import BertPretrainer, build_model
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    cfg = tiny_bert_config(vocab_size=len(vocab), num_hidden_layers=1)
    (tmp_path / "bert_config.json").write_text(json.dumps(cfg.to_dict()), encoding="utf-8")
    save_tf1_checkpoint(build_model(BertPretrainer.from_bert_config(cfg)),
                        str(tmp_path / "bert_model.ckpt"))
    m = bert_tf.from_pretrained(str(tmp_path), "classification", 2, text_input=True,
                                seq_length=8, pad_to_max_seq_length=True)
    assert m.pad_to_max_seq_length is True and m.model.pad_to_max_seq_length is True
    ids = bert_tf.from_pretrained(str(tmp_path), "classification", 2)
    assert ids.pad_to_max_seq_length is False


def test_cut_cuts_the_named_keys_only():
    mask = np.ones((1, 4), np.int32)
    out = real_length.cut({"input_mask": mask, "x": mask}, 2, keys=["input_mask"])
    np.testing.assert_array_equal(out["input_mask"], [[1, 1]])
    np.testing.assert_array_equal(out["x"], mask)  # same shape, not named: whole
    with pytest.raises(TypeError):
        real_length.cut({"input_mask": mask}, 2)  # keys are required


def test_restore_clamps_the_padding_value_to_the_dtype():
    import tensorflow as tf
    x = tf.ones([1, 2], tf.float16)
    back = real_length.restore(x, tf.constant([[1, 1, 0, 0]]), real_length.SPAN_PAD_LOGIT)
    assert np.isfinite(back.numpy()).all()
    assert float(back[0, 3]) == float(tf.float16.min)


def test_the_policy_step_is_8_without_xla_and_a_bucket_with_it():
    assert real_length.step(128) == 8 and real_length.step(512) == 8
    assert real_length.step(128, xla=True) == 16 and real_length.step(512, xla=True) == 32
    assert len(real_length.length_buckets(128, 16)) == 8
    plain = finetune.RunConfig(max_seq_length=128)
    assert finetune.cuts_batches(plain) and not finetune.cuts_batches(
        finetune.RunConfig(use_tpu=True)) and not finetune.cuts_batches(
        finetune.RunConfig(pad_to_max_seq_length=True))
    # When to cut: never on a TPU, never padded, under XLA only when bucketed.
    assert real_length.cuts() and real_length.cuts(xla=True, bucketed=True)
    assert not real_length.cuts(xla=True) and not real_length.cuts(tpu=True, bucketed=True)
    assert not real_length.cuts(pad_to_max_seq_length=True)


def _long_arrays(seq, full, seed=0):
    """Eight rows of 17..24 real tokens, the first of full length if `full`. Two batches of four
    (one epoch, whatever the shuffle): each cut to 32 under XLA (a bucket of 16), to 24 without
    (a multiple of 8), or kept at full length when it holds the full row."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(17, 25, 8)
    if full:
        lengths[0] = seq
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, 64, (8, seq)).astype(np.int32) * mask
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids),
            "label_ids": rng.integers(0, 3, 8).astype(np.int32)}


@pytest.mark.parametrize("jit", [True, False])
def test_train_step_shapes_bounded_under_xla_and_step_8_without(tmp_path, jit):
    # Under XLA each length is one compile: lengths are buckets of 16 (<= 8 at 128), so both
    # batches (17..24 real tokens) share one compile (no full-length row under XLA: one
    # compile, not two). Without XLA the step is traced once and lengths are multiples of 8;
    # the batch holding the full-length row keeps the full length.
    seq = 128
    trainer = _trainer(tmp_path, f"xla{jit}", "classification", max_seq_length=seq,
                       jit_compile=jit)
    finetune.train(trainer, _long_arrays(seq, full=not jit), 2, 1)
    shapes = trainer.step_shapes
    assert sum(shapes.values()) == 2
    if jit:
        assert set(shapes) <= set(real_length.length_buckets(seq)) and len(shapes) <= 8
        assert dict(shapes) == {32: 2}
    else:
        assert all(k % 8 == 0 for k in shapes) and any(k % 16 for k in shapes)
        assert dict(shapes) == {seq: 1, 24: 1}


def test_mirrored_prediction_batches_cut_to_different_lengths(tmp_path):
    from conftest import TWO_CPUS
    if not TWO_CPUS:
        pytest.skip("needs the two logical CPUs of conftest")
    # Outputs are padded back to S in each replica, before the gather, so batches cut to
    # different lengths concatenate. On one worker both replicas of a batch share its cut (the
    # global batch is cut before it is split); several workers, each cutting its own, are not
    # run here. Batch 0 is short only, batch 1 starts with full-length rows.
    one = _trainer(tmp_path, "one", "tagging", pad_to_max_seq_length=True)
    two = _trainer(tmp_path, "two", "tagging", strategy="mirrored")
    assert two.strategy.num_replicas_in_sync == 2
    for t in (one, two):
        t.restore()
    two.model.set_weights(one.model.get_weights())
    order = [1, 2, 3, 5, 0, 4, 6, 7, 9, 8]  # rows 0, 4, 8 are full length
    feats = {k: v[order] for k, v in _features("tagging", _arrays(10, seed=1)).items()}
    want = prediction.predict(one, feats, 4, ["logits"])["logits"]
    got = prediction.predict(two, feats, 4, ["logits"])["logits"]
    mask = feats["input_mask"] > 0
    assert got.shape == want.shape == (10, S, 3)
    np.testing.assert_allclose(got[mask], want[mask], rtol=0, atol=1e-5)
    assert not got[~mask].any()
