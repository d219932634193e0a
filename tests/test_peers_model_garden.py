"""Model Garden (tf-models-official, tf_keras) checkpoints <-> bert_tf, both ways, parity 1e-5.

Marked `peers`: run with `make test-peers`. A missing peer fails every test (never skips).
"""
import numpy as np
import pytest

import bert_tf  # noqa: F401
import tensorflow as tf
try:  # Model Garden's Keras is tf_keras, imported explicitly (never TF_USE_LEGACY_KERAS)
    import tf_keras
    from official.nlp.modeling import layers as mg_layers
    from official.nlp.modeling import models as mg_models
    from official.nlp.modeling import networks
    PEER_ERROR = None
except ImportError as e:  # conftest fails every test of this module (never skips)
    PEER_ERROR = e

from bert_tf import BertError
from bert_tf.convert import model_garden as mgc
from bert_tf.modeling import models as bm
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder

pytestmark = pytest.mark.peers

CFG = dict(vocab_size=40, hidden_size=16, num_hidden_layers=3, num_attention_heads=4,
           intermediate_size=24, max_position_embeddings=32, type_vocab_size=3)


def randomize(variables, seed):
    # Not the initialiser's values: every bias, LayerNorm and table differs, so a swapped or
    # untransposed tensor shows in the outputs.
    rng = np.random.default_rng(seed)
    for v in variables:
        v.assign(rng.normal(0.0, 0.3, v.shape).astype(np.float32)
                 + (1.0 if "gamma" in v.name else 0.0))


def inputs(seed=0, batch=3, seq=9):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, CFG["vocab_size"], (batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    types = rng.integers(0, CFG["type_vocab_size"], (batch, seq)).astype(np.int32)
    positions = np.array([[1, 3], [0, 4], [2, 1]], np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}, positions


def mg_encoder():
    return networks.BertEncoder(
        vocab_size=CFG["vocab_size"], hidden_size=16, num_layers=3, num_attention_heads=4,
        intermediate_size=24, max_sequence_length=32, type_vocab_size=3, dict_outputs=True)


def assert_encoder_parity(ours, theirs, x):
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(np.asarray(ours[key]), theirs[key].numpy(), atol=1e-5,
                                   err_msg=key)
    assert len(ours["encoder_outputs"]) == len(theirs["encoder_outputs"]) == 3
    for a, b in zip(ours["encoder_outputs"], theirs["encoder_outputs"]):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), atol=1e-5)
    # padding never leaks into real positions
    assert np.abs(theirs["sequence_output"].numpy()).max() > 0.1


def test_gelu_flavours_match_model_garden(tmp_path):
    # BertEncoder's default inner activation is the original's tanh GELU (our "gelu", checked
    # by the parity tests below); an encoder built with exact GELU needs "gelu_exact".
    enc = networks.BertEncoder(
        vocab_size=CFG["vocab_size"], hidden_size=16, num_layers=3, num_attention_heads=4,
        intermediate_size=24, max_sequence_length=32, type_vocab_size=3, dict_outputs=True,
        inner_activation=lambda t: tf_keras.activations.gelu(t, approximate=False))
    x, _ = inputs(5)
    enc(x)
    randomize(enc.weights, 5)
    path = tf.train.Checkpoint(encoder=enc).save(str(tmp_path / "exact" / "ckpt"))
    theirs = enc(x, training=False)
    exact = mgc.load_model_garden_checkpoint(path, hidden_act="gelu_exact")
    assert exact.bert_config.hidden_act == "gelu_exact"
    assert_encoder_parity(exact(x, training=False), theirs, x)
    tanh = mgc.load_model_garden_checkpoint(path)
    diff = np.abs(np.asarray(tanh(x, training=False)["sequence_output"])
                  - theirs["sequence_output"].numpy()).max()
    assert diff > 1e-4, diff


def test_model_garden_encoder_checkpoint_into_bert_tf(tmp_path):
    enc = mg_encoder()
    x, _ = inputs()
    enc(x)
    randomize(enc.weights, 1)
    path = tf.train.Checkpoint(encoder=enc).save(str(tmp_path / "mg" / "ckpt"))
    cfg, weights = mgc.read_model_garden_checkpoint(path)
    assert cfg == BertConfig(**CFG, hidden_act="gelu")
    model = mgc.load_model_garden_checkpoint(str(tmp_path / "mg"))  # directory -> latest
    assert isinstance(model, BertEncoder)
    assert_encoder_parity(model(x, training=False), enc(x, training=False), x)


def test_model_garden_bert_encoder_v2_checkpoint_into_bert_tf(tmp_path):
    # encoder type "bert_v2": a layer with named attributes instead of a functional model
    enc = networks.BertEncoderV2(
        vocab_size=CFG["vocab_size"], hidden_size=16, num_layers=3, num_attention_heads=4,
        intermediate_size=24, max_sequence_length=32, type_vocab_size=3, dict_outputs=True)
    x, _ = inputs(6)
    enc(x)
    randomize(enc.weights, 6)
    path = tf.train.Checkpoint(encoder=enc).save(str(tmp_path / "v2" / "ckpt"))
    model = mgc.load_model_garden_checkpoint(path)
    assert model.bert_config == BertConfig(**CFG)
    assert_encoder_parity(model(x, training=False), enc(x, training=False), x)


def test_model_garden_pretrainer_v2_heads_into_bert_tf(tmp_path):
    enc = mg_encoder()
    nsp = mg_layers.ClassificationHead(inner_dim=16, num_classes=2, name="next_sentence")
    gelu = lambda t: tf_keras.activations.gelu(t, approximate=True)
    pt = mg_models.BertPretrainerV2(encoder_network=enc, mlm_activation=gelu,
                                    classification_heads=[nsp])
    x, pos = inputs(2)
    pt(dict(x, masked_lm_positions=pos))
    randomize(pt.weights, 2)
    theirs = pt(dict(x, masked_lm_positions=pos), training=False)
    # checkpoint_items (what export_tfhub_lib restores: encoder, masked_lm, NSP pooler only)
    items = tf.train.Checkpoint(**pt.checkpoint_items).save(str(tmp_path / "items" / "ckpt"))
    # the whole model (what a Model Garden training run saves: NSP output layer included)
    full = tf.train.Checkpoint(model=pt).save(str(tmp_path / "full" / "ckpt"))
    for path in (items, full):
        model = mgc.load_model_garden_checkpoint(path)
        assert isinstance(model, bm.BertPretrainer)
        ours = model(dict(x, masked_lm_positions=pos), training=False)
        np.testing.assert_allclose(np.asarray(ours["mlm_logits"]),
                                   theirs["mlm_logits"].numpy(), atol=1e-5)
        np.testing.assert_allclose(np.asarray(ours["pooled_output"]),
                                   theirs["pooled_output"].numpy(), atol=1e-5)
    # NSP: Model Garden's head has its own pooler; copied into the encoder, logits agree
    model = mgc.load_model_garden_checkpoint(full, copy_pooler_dense_to_encoder=True)
    ours = model(dict(x, masked_lm_positions=pos), training=False)
    np.testing.assert_allclose(np.asarray(ours["nsp_logits"]), theirs["next_sentence"].numpy(),
                               atol=1e-5)
    with pytest.raises(BertError, match="no next_sentence head"):
        mgc.read_model_garden_checkpoint(
            tf.train.Checkpoint(encoder=enc).save(str(tmp_path / "enc" / "ckpt")),
            copy_pooler_dense_to_encoder=True)


def test_bert_tf_into_model_garden_checkpoint(tmp_path):
    cfg = BertConfig(**CFG)
    model = mgc.build_bert_model(cfg, with_pretraining_heads=True)
    randomize([getattr(v, "value", v) for v in model.weights], 3)
    prefix = mgc.save_model_garden_checkpoint(model, str(tmp_path / "out" / "bert_model.ckpt"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]
    # Model Garden restores it with its own strict check, encoder alone and with heads
    enc = mg_encoder()
    x, pos = inputs(4)
    enc(x)
    tf.train.Checkpoint(encoder=enc).restore(prefix).assert_existing_objects_matched()
    ours = model.encoder(x, training=False)
    assert_encoder_parity(ours, enc(x, training=False), x)
    enc2 = mg_encoder()
    nsp = mg_layers.ClassificationHead(inner_dim=16, num_classes=2, name="next_sentence")
    pt = mg_models.BertPretrainerV2(
        encoder_network=enc2, classification_heads=[nsp],
        mlm_activation=lambda t: tf_keras.activations.gelu(t, approximate=True))
    pt(dict(x, masked_lm_positions=pos))
    tf.train.Checkpoint(model=pt).restore(prefix).assert_consumed()
    tf.train.Checkpoint(**pt.checkpoint_items).restore(prefix).assert_existing_objects_matched()
    theirs = pt(dict(x, masked_lm_positions=pos), training=False)
    ours = model(dict(x, masked_lm_positions=pos), training=False)
    np.testing.assert_allclose(np.asarray(ours["mlm_logits"]), theirs["mlm_logits"].numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(ours["nsp_logits"]), theirs["next_sentence"].numpy(),
                               atol=1e-5)
    # and back: identical weights
    back = mgc.load_model_garden_checkpoint(prefix)
    for name, value in mgc.get_weights(model).items():
        np.testing.assert_array_equal(mgc.get_weights(back)[name], value, err_msg=name)


def test_model_garden_errors_are_one_line(tmp_path):
    with pytest.raises(BertError, match="no checkpoint"):
        mgc.read_model_garden_checkpoint(str(tmp_path / "missing"))
    other = tf.train.Checkpoint(thing=tf.Variable([1.0])).save(str(tmp_path / "o" / "ckpt"))
    with pytest.raises(BertError, match="no 'encoder' object"):
        mgc.read_model_garden_checkpoint(other)
    enc = mg_encoder()
    enc(inputs()[0])
    path = tf.train.Checkpoint(encoder=enc).save(str(tmp_path / "mg" / "ckpt"))
    with pytest.raises(BertError, match=r"shape \[40, 16\], the model expects \[41, 16\] "
                                        r"\(config/weights mismatch\)"):
        mgc.load_model_garden_checkpoint(path, bert_config=BertConfig(**dict(CFG, vocab_size=41)))
    for data in (tmp_path / "mg").glob("ckpt-1.data-*"):
        data.write_bytes(data.read_bytes()[:100])  # truncated
    with pytest.raises(BertError, match="truncated or missing .data file") as e:
        mgc.read_model_garden_checkpoint(path)
    assert "\n" not in str(e.value)
