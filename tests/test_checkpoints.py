"""Checkpoints: original TF1 names (load, save, round trip), our tf.train.Checkpoint files,
Hugging Face safetensors + config.json. Checkpoints are built here from random arrays."""
import json
import os
import sys

import bert_tf  # noqa: F401
import keras
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import save_file

from bert_tf import BertError
from bert_tf.convert import checkpoints as ck
from bert_tf.modeling import encoder as be
from bert_tf.modeling import models as bm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_model import (as_inputs, keras_variables_by_tf1_name, numpy_bert, numpy_dict,  # noqa: E402
                        padded_batch, random_tf1_weights, tiny_config)

HEAD_NAMES = {"cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
              "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
              "cls/predictions/output_bias", "cls/seq_relationship/output_weights",
              "cls/seq_relationship/output_bias"}


def write_tf1_checkpoint(prefix, weights, optimizer_slots=True):
    """An original-format checkpoint: exactly these names (as TF1's Saver writes them, V2 format),
    plus the Adam slots and global_step that released checkpoints carry."""
    tensors = dict(weights)
    if optimizer_slots:
        for name, value in weights.items():
            tensors[name + "/adam_m"] = np.full_like(value, 0.25)
            tensors[name + "/adam_v"] = np.full_like(value, 0.5)
        tensors["global_step"] = np.asarray(1000, np.int64)
    names = sorted(tensors)
    tf.io.gfile.makedirs(os.path.dirname(prefix))
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return prefix


def assert_model_holds(model, weights):
    """Every variable equals the TF1 array bit for bit (NSP matrix stored transposed)."""
    for name, var in keras_variables_by_tf1_name(model).items():
        np.testing.assert_array_equal(var.numpy(), weights[name], err_msg=name)
    if isinstance(model, bm.BertPretrainer):
        np.testing.assert_array_equal(model.next_sentence.dense.kernel.numpy(),
                                      weights["cls/seq_relationship/output_weights"].T)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    rng = np.random.default_rng(10)
    cfg = tiny_config()
    w = random_tf1_weights(cfg, rng)
    ids, mask, types = padded_batch(rng, cfg)
    positions = np.array([[0, 3, 8], [1, 4, 0], [0, 0, 0]], np.int32)
    prefix = write_tf1_checkpoint(str(tmp_path_factory.mktemp("orig") / "bert_model.ckpt"), w)
    return cfg, w, (ids, mask, types, positions), prefix


def _inputs(batch):
    ids, mask, types, positions = batch
    return as_inputs(ids, mask, types, masked_lm_positions=positions)


def test_load_original_checkpoint_into_pretrainer(case):
    cfg, w, batch, prefix = case
    assert ck.is_tf1_checkpoint(prefix) and ck.is_tf1_checkpoint(os.path.dirname(prefix))
    model = bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg))  # unbuilt: the loader builds it
    report = ck.load_tf1_checkpoint(model, prefix)
    assert report["loaded"] == sorted(w)
    assert report["missing"] == []
    assert report["skipped"] == sorted([n + s for n in w for s in ("/adam_m", "/adam_v")]
                                       + ["global_step"])
    assert_model_holds(model, w)
    out = numpy_dict(model(_inputs(batch), training=False))
    want = numpy_bert(w, cfg, *batch)
    np.testing.assert_allclose(out["sequence_output"], want["sequence_output"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["pooled_output"], want["pooled_output"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["mlm_logits"], want["mlm_logits"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(out["nsp_logits"], want["nsp_logits"], rtol=0, atol=1e-5)
    # The name map is exactly the original's name list with the original shapes.
    names = ck.tf1_name_map(model)
    assert set(names) == set(w)
    assert sorted(id(v) for v, _ in names.values()) == sorted(id(v) for v in model.weights)
    for name, (var, transpose) in names.items():
        assert tuple(var.shape[::-1] if transpose else var.shape) == w[name].shape, name
    # load_checkpoint detects the format; the directory works as well as the prefix.
    again = bm.build_model(bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)))
    assert ck.load_checkpoint(again, os.path.dirname(prefix)) == report
    assert_model_holds(again, w)


def test_save_original_checkpoint_round_trip_is_bit_exact(case, tmp_path):
    cfg, w, batch, prefix = case
    model = bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg))
    ck.load_tf1_checkpoint(model, prefix)
    out_prefix = str(tmp_path / "export" / "bert_model.ckpt")
    assert ck.save_tf1_checkpoint(model, out_prefix, global_step=7) == out_prefix
    # Exactly the original names and shapes, nothing else; no temporary files left behind.
    assert sorted(os.listdir(tmp_path / "export")) == ["bert_model.ckpt.data-00000-of-00001",
                                                       "bert_model.ckpt.index"]
    listed = dict(tf.train.list_variables(out_prefix))
    assert listed == {**{n: list(v.shape) for n, v in w.items()}, "global_step": []}
    reader = tf.train.load_checkpoint(out_prefix)
    for name, value in w.items():
        got = reader.get_tensor(name)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, value, err_msg=name)
    assert reader.get_tensor("global_step") == 7
    assert ck.is_tf1_checkpoint(out_prefix)

    fresh = bm.build_model(bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)))
    report = ck.load_checkpoint(fresh, out_prefix)
    assert report["missing"] == [] and report["skipped"] == ["global_step"]
    for a, b in zip(model.weights, fresh.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    before, after = (numpy_dict(m(_inputs(batch), training=False)) for m in (model, fresh))
    for key in ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits"):
        np.testing.assert_allclose(after[key], before[key], rtol=0, atol=1e-6)
    # Saving over an existing checkpoint replaces it.
    ck.save_tf1_checkpoint(fresh, out_prefix)
    assert "global_step" not in dict(tf.train.list_variables(out_prefix))


@pytest.mark.parametrize("change,name,file_shape,model_shape", [
    (dict(vocab_size=100), "bert/embeddings/word_embeddings", [97, 24], [100, 24]),
    (dict(intermediate_size=48), "bert/encoder/layer_0/intermediate/dense/kernel", [24, 40], [24, 48]),
    (dict(max_position_embeddings=32), "bert/embeddings/position_embeddings", [20, 24], [32, 24]),
])
def test_shape_mismatch_is_one_line_error(case, change, name, file_shape, model_shape):
    cfg, w, _, prefix = case
    model = bm.BertPretrainer(be.BertEncoder.from_bert_config(tiny_config(**change)))
    with pytest.raises(BertError) as err:
        ck.load_checkpoint(model, prefix)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(prefix)
    assert name in msg and str(file_shape) in msg and str(model_shape) in msg, msg
    # Nothing was assigned (shapes are all checked first).
    assert not np.array_equal(model.encoder.embeddings.token_type_embeddings.numpy(),
                              w["bert/embeddings/token_type_embeddings"])


def test_layer_count_mismatch_is_one_line_error(case):
    _, _, _, prefix = case
    with pytest.raises(BertError, match=r"encoder layer 1 but the model only 1 layers"):
        ck.load_checkpoint(bm.BertPretrainer(be.BertEncoder.from_bert_config(tiny_config(num_hidden_layers=1))), prefix)
    with pytest.raises(BertError, match=r"encoder variables of the model are not in the file, "
                                        r"e\.g\. bert/encoder/layer_2/"):
        ck.load_checkpoint(bm.BertPretrainer(be.BertEncoder.from_bert_config(tiny_config(num_hidden_layers=3))), prefix)


def test_missing_checkpoint_errors(tmp_path):
    model = bm.BertPretrainer(be.BertEncoder.from_bert_config(tiny_config()))
    with pytest.raises(BertError, match="checkpoint not found"):
        ck.load_checkpoint(model, str(tmp_path / "nope" / "bert_model.ckpt"))
    with pytest.raises(BertError, match="no checkpoint found"):
        ck.load_checkpoint(model, str(tmp_path))
    assert not ck.is_tf1_checkpoint(str(tmp_path / "nope"))


@pytest.mark.parametrize("kind", ["classifier", "span", "tagger", "encoder"])
def test_fine_tuning_models_load_encoder_only_checkpoint(case, tmp_path, kind):
    cfg, w, batch, _ = case
    encoder_only = {k: v for k, v in w.items() if k not in HEAD_NAMES}
    prefix = write_tf1_checkpoint(str(tmp_path / "enc" / "bert_model.ckpt"), encoder_only)
    model = {"classifier": lambda: bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 3), "span": lambda: bm.BertSpanLabeler(be.BertEncoder.from_bert_config(cfg)),
             "tagger": lambda: bm.BertTokenClassifier(be.BertEncoder.from_bert_config(cfg), 5),
             "encoder": lambda: be.build_encoder_model(cfg)}[kind]()
    bm.build_model(model)
    head = {"classifier": "", "span": "cls/squad/", "tagger": "cls/ner/", "encoder": None}[kind]
    head_layer = {"classifier": "classifier", "span": "span", "tagger": "tagger"}.get(kind)
    init = [v.numpy() for v in getattr(model, head_layer).weights] if head_layer else []
    report = ck.load_checkpoint(model, prefix)
    expected_missing = [] if head is None else sorted([head + "output_bias", head + "output_weights"])
    assert report["missing"] == expected_missing
    assert report["loaded"] == sorted(encoder_only)
    encoder = (model.encoder if kind != "encoder"
               else [l for l in model.layers if isinstance(l, be.BertEncoder)][0])
    assert_model_holds(encoder, w)
    if head_layer:  # the head kept its initialisation
        for before, var in zip(init, getattr(model, head_layer).weights):
            np.testing.assert_array_equal(var.numpy(), before)
    # A pre-training checkpoint also loads; its cls/* heads are skipped, not errors.
    report = ck.load_checkpoint(model, case[3])
    assert {n for n in report["skipped"] if not n.endswith(("adam_m", "adam_v"))} >= (
        HEAD_NAMES - set(ck.tf1_name_map(model)))


@pytest.mark.parametrize("kind,num_out", [("classifier", 3), ("span", 2), ("tagger", 4)])
def test_fine_tuned_heads_use_the_original_names(case, tmp_path, kind, num_out):
    cfg, w, batch, _ = case
    rng = np.random.default_rng(11)
    scope = {"classifier": "", "span": "cls/squad/", "tagger": "cls/ner/"}[kind]
    head_w = {scope + "output_weights": rng.standard_normal((num_out, cfg.hidden_size)).astype(np.float32),
              scope + "output_bias": rng.standard_normal(num_out).astype(np.float32)}
    encoder_w = {k: v for k, v in w.items() if k not in HEAD_NAMES}
    prefix = write_tf1_checkpoint(str(tmp_path / "ft" / "model.ckpt"), {**encoder_w, **head_w})
    model = {"classifier": lambda: bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), num_out), "span": lambda: bm.BertSpanLabeler(be.BertEncoder.from_bert_config(cfg)),
             "tagger": lambda: bm.BertTokenClassifier(be.BertEncoder.from_bert_config(cfg), num_out)}[kind]()
    report = ck.load_checkpoint(model, prefix)
    assert report["missing"] == [] and report["loaded"] == sorted({**encoder_w, **head_w})
    ids, mask, types, _ = batch
    out = numpy_dict(model(as_inputs(ids, mask, types), training=False))
    ref = numpy_bert(w, cfg, ids, mask, types)
    wt, b = head_w[scope + "output_weights"], head_w[scope + "output_bias"]
    if kind == "classifier":  # run_classifier: logits = pooled @ output_weights^T + bias
        np.testing.assert_allclose(out["logits"], ref["pooled_output"] @ wt.T + b, atol=1e-4)
    elif kind == "span":  # run_squad: [start, end] = sequence @ cls/squad/output_weights^T + bias
        logits = ref["sequence_output"] @ wt.T + b
        np.testing.assert_allclose(out["start_logits"], logits[..., 0], atol=1e-4)
        np.testing.assert_allclose(out["end_logits"], logits[..., 1], atol=1e-4)
    else:
        np.testing.assert_allclose(out["logits"], ref["sequence_output"] @ wt.T + b, atol=1e-4)
    saved = ck.save_tf1_checkpoint(model, str(tmp_path / "again" / "model.ckpt"))
    reader = tf.train.load_checkpoint(saved)
    assert sorted(reader.get_variable_to_shape_map()) == sorted({**encoder_w, **head_w})
    for name, value in {**encoder_w, **head_w}.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)


def test_our_training_checkpoints_load(case, tmp_path):
    cfg, w, batch, prefix = case
    trained = bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg))
    ck.load_tf1_checkpoint(trained, prefix)
    # As bert_tf.pretraining.pretraining writes them: model + optimizer (+ counters) beside it.
    step = tf.Variable(3, dtype=tf.int64)
    optimizer = keras.optimizers.Adam()
    optimizer.build(trained.trainable_variables)
    path = tf.train.Checkpoint(model=trained, optimizer=optimizer, global_step=step).write(
        str(tmp_path / "ours" / "model.ckpt-3"))
    assert not ck.is_tf1_checkpoint(path)
    pre = bm.build_model(bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)))
    # TF keys variables by their shortest path, here through the optimizer
    # (optimizer/_trainable_variables/N); the loader follows the object graph instead.
    assert any(n.startswith("optimizer/_trainable_variables/") for n, _ in tf.train.list_variables(path))
    report = ck.load_checkpoint(pre, path)
    assert report["missing"] == [] and report["skipped"] == []
    assert len(report["loaded"]) == len(w)
    assert "model/encoder/layer_1/output_layer_norm/gamma" in report["loaded"]
    assert_model_holds(pre, w)
    clf = bm.build_model(bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 2))
    report = ck.load_checkpoint(clf, path)
    assert report["missing"] == ["output_bias", "output_weights"]
    assert all(n.startswith("model/masked_lm/") or n.startswith("model/next_sentence/")
               for n in report["skipped"]) and len(report["skipped"]) == 7
    assert_model_holds(clf.encoder, w)
    # An encoder saved on its own (object key `model`) loads into a full model too.
    enc_path = tf.train.Checkpoint(model=pre.encoder).write(str(tmp_path / "enc" / "ckpt"))
    fresh = bm.build_model(bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)))
    report = ck.load_checkpoint(fresh, enc_path)
    assert sorted(report["missing"]) == sorted(HEAD_NAMES)
    assert_model_holds(fresh.encoder, w)
    # Model Garden's object key for an encoder.
    mg_path = tf.train.Checkpoint(encoder=pre.encoder).write(str(tmp_path / "mg" / "ckpt"))
    enc = be.BertEncoder.from_bert_config(cfg)
    assert ck.load_checkpoint(enc, mg_path)["missing"] == []
    assert_model_holds(enc, w)
    with pytest.raises(BertError, match=r"has encoder layer 1 but the model only 1 layers"):
        ck.load_checkpoint(bm.BertPretrainer(be.BertEncoder.from_bert_config(tiny_config(num_hidden_layers=1))), path)
    bad = bm.BertPretrainer(be.BertEncoder.from_bert_config(tiny_config(intermediate_size=48)))
    with pytest.raises(BertError, match=r"model/encoder/layer_0/intermediate/_kernel has shape \[24, 40\] in the checkpoint but \[24, 48\]"):
        ck.load_checkpoint(bad, path)
    # All shapes are checked before anything is assigned.
    assert not np.array_equal(bad.encoder.embeddings.word_embeddings.numpy(),
                              w["bert/embeddings/word_embeddings"])
    # The format-specific entry gives the same report as load_checkpoint.
    from bert_tf.convert import native
    again = bm.build_model(bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 2))
    assert native.load_bert_tf_checkpoint(again, path) == ck.load_checkpoint(clf, path)
    with pytest.raises(BertError, match="neither an original BERT checkpoint"):
        native.load_bert_tf_checkpoint(again, prefix)


# ----------------------------------------------------------------------------------------------
# Hugging Face

_HF_LAYER = {  # TF1 suffix -> (HF suffix, transposed: torch Linear is [out, in])
    "attention/self/query/kernel": ("attention.self.query.weight", True),
    "attention/self/query/bias": ("attention.self.query.bias", False),
    "attention/self/key/kernel": ("attention.self.key.weight", True),
    "attention/self/key/bias": ("attention.self.key.bias", False),
    "attention/self/value/kernel": ("attention.self.value.weight", True),
    "attention/self/value/bias": ("attention.self.value.bias", False),
    "attention/output/dense/kernel": ("attention.output.dense.weight", True),
    "attention/output/dense/bias": ("attention.output.dense.bias", False),
    "attention/output/LayerNorm/gamma": ("attention.output.LayerNorm.weight", False),
    "attention/output/LayerNorm/beta": ("attention.output.LayerNorm.bias", False),
    "intermediate/dense/kernel": ("intermediate.dense.weight", True),
    "intermediate/dense/bias": ("intermediate.dense.bias", False),
    "output/dense/kernel": ("output.dense.weight", True),
    "output/dense/bias": ("output.dense.bias", False),
    "output/LayerNorm/gamma": ("output.LayerNorm.weight", False),
    "output/LayerNorm/beta": ("output.LayerNorm.bias", False),
}
_HF_OTHER = {
    "bert/embeddings/word_embeddings": ("embeddings.word_embeddings.weight", False),
    "bert/embeddings/token_type_embeddings": ("embeddings.token_type_embeddings.weight", False),
    "bert/embeddings/position_embeddings": ("embeddings.position_embeddings.weight", False),
    "bert/embeddings/LayerNorm/gamma": ("embeddings.LayerNorm.weight", False),
    "bert/embeddings/LayerNorm/beta": ("embeddings.LayerNorm.bias", False),
    "bert/pooler/dense/kernel": ("pooler.dense.weight", True),
    "bert/pooler/dense/bias": ("pooler.dense.bias", False),
    "cls/predictions/transform/dense/kernel": ("cls.predictions.transform.dense.weight", True),
    "cls/predictions/transform/dense/bias": ("cls.predictions.transform.dense.bias", False),
    "cls/predictions/transform/LayerNorm/gamma": ("cls.predictions.transform.LayerNorm.weight", False),
    "cls/predictions/transform/LayerNorm/beta": ("cls.predictions.transform.LayerNorm.bias", False),
    "cls/predictions/output_bias": ("cls.predictions.bias", False),
    "cls/seq_relationship/output_weights": ("cls.seq_relationship.weight", False),  # already [2, H]
    "cls/seq_relationship/output_bias": ("cls.seq_relationship.bias", False),
}


def to_hf(w, prefix="bert.", old_layer_norm=False):
    out = {}
    for name, value in w.items():
        if name.startswith("bert/encoder/layer_"):
            layer, rest = name[len("bert/encoder/layer_"):].split("/", 1)
            hf, transpose = _HF_LAYER[rest]
            hf = f"{prefix}encoder.layer.{layer}.{hf}"
        else:
            hf, transpose = _HF_OTHER[name]
            if not hf.startswith("cls."):
                hf = prefix + hf
        if old_layer_norm and "LayerNorm" in hf:
            hf = hf.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        out[hf] = np.ascontiguousarray(value.T if transpose else value)
    return out


def test_hf_safetensors_load_matches_tf1_path(case, tmp_path):
    cfg, w, batch, prefix = case
    tensors = to_hf(w)
    # As BertForPreTraining writes it: tied decoder weight/bias duplicates and the position_ids buffer.
    tensors["cls.predictions.decoder.weight"] = w["bert/embeddings/word_embeddings"].copy()
    tensors["cls.predictions.decoder.bias"] = w["cls/predictions/output_bias"].copy()
    tensors["bert.embeddings.position_ids"] = np.arange(cfg.max_position_embeddings)[None].astype(np.int64)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    hf_model = bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg))
    report = ck.load_hf_safetensors(hf_model, str(tmp_path))  # the directory
    assert report["missing"] == []
    assert report["skipped"] == sorted(["cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
                                        "bert.embeddings.position_ids"])
    assert len(report["loaded"]) == len(w)
    tf1_model = bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg))
    ck.load_tf1_checkpoint(tf1_model, prefix)
    for a, b in zip(tf1_model.weights, hf_model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    got, want = (numpy_dict(m(_inputs(batch), training=False)) for m in (hf_model, tf1_model))
    for key in ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits"):
        np.testing.assert_array_equal(got[key], want[key])


def test_hf_safetensors_without_prefix_and_old_layer_norm_names(case, tmp_path):
    cfg, w, batch, _ = case
    encoder_w = {k: v for k, v in w.items() if k not in HEAD_NAMES}
    path = str(tmp_path / "weights.safetensors")
    save_file(to_hf(encoder_w, prefix="", old_layer_norm=True), path)
    model = be.BertEncoder.from_bert_config(cfg)
    report = ck.load_hf_safetensors(model, path)
    assert report["missing"] == [] and report["skipped"] == []
    assert_model_holds(model, w)
    # BertModel weights into a classifier: its head is reported missing.
    clf = bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 3)
    assert ck.load_hf_safetensors(clf, path)["missing"] == ["output_bias", "output_weights"]
    # A wrong config: one line naming the variable and both shapes (torch layout).
    bad = be.BertEncoder.from_bert_config(tiny_config(intermediate_size=48))
    with pytest.raises(BertError) as err:
        ck.load_hf_safetensors(bad, path)
    assert "\n" not in str(err.value) and "encoder.layer.0.intermediate.dense.weight" in str(err.value)
    assert "[40, 24]" in str(err.value) and "[48, 24]" in str(err.value)


def test_hf_sharded_directory(case, tmp_path):
    cfg, w, _, _ = case
    tensors = to_hf({k: v for k, v in w.items() if k not in HEAD_NAMES})
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / file))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, part in shards.items() for n in part}}))
    model = be.BertEncoder.from_bert_config(cfg)
    assert ck.load_hf_safetensors(model, str(tmp_path))["missing"] == []
    assert_model_holds(model, w)


@pytest.mark.parametrize("hf_act,ours", [("gelu", "gelu_exact"), ("gelu_new", "gelu"),
                                         ("relu", "relu"), ("silu", "swish")])
def test_bert_config_from_hf(tmp_path, hf_act, ours):
    hf = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 30522,
          "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
          "intermediate_size": 3072, "hidden_act": hf_act, "hidden_dropout_prob": 0.1,
          "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512,
          "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
          "pad_token_id": 0, "position_embedding_type": "absolute"}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    cfg = ck.bert_config_from_hf(str(tmp_path))
    assert cfg.hidden_act == ours
    assert cfg.to_dict() == {**{k: hf[k] for k in cfg.to_dict() if k != "hidden_act"},
                             "hidden_act": ours}


def test_bert_config_from_hf_errors(tmp_path):
    path = tmp_path / "config.json"
    for bad, needle in [({"hidden_act": "quick_gelu"}, "hidden_act 'quick_gelu'"),
                        ({"model_type": "roberta"}, "model_type 'roberta'"),
                        ({"layer_norm_eps": 1e-5}, "layer_norm_eps"),
                        ({"hidden_size": 100, "num_attention_heads": 3}, "not divisible")]:
        path.write_text(json.dumps({"vocab_size": 10, "hidden_size": 64, "num_attention_heads": 4,
                                    "intermediate_size": 128, **bad}))
        with pytest.raises(BertError) as err:
            ck.bert_config_from_hf(str(path))
        assert needle in str(err.value) and "\n" not in str(err.value)
        assert str(err.value).startswith(str(path))
