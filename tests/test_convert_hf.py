"""Hugging Face export: a bert_tf model written as a HF BERT directory, checked against the
tensor names, layouts and config fields of transformers' BERT classes, then re-imported."""
import json
import os
import sys

import bert_tf  # noqa: F401
import numpy as np
import pytest
from safetensors.numpy import load_file

from bert_tf import BertError
from bert_tf.convert import checkpoints as ck
from bert_tf.convert import hf
from bert_tf.modeling import encoder as be
from bert_tf.modeling import models as bm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_model import as_inputs, numpy_dict, padded_batch, tiny_config  # noqa: E402

# transformers' BertModel state dict (modeling_bert.py): name -> shape as a function of the config.
_EMBEDDINGS = {
    "embeddings.word_embeddings.weight": lambda c: (c.vocab_size, c.hidden_size),
    "embeddings.position_embeddings.weight": lambda c: (c.max_position_embeddings, c.hidden_size),
    "embeddings.token_type_embeddings.weight": lambda c: (c.type_vocab_size, c.hidden_size),
    "embeddings.LayerNorm.weight": lambda c: (c.hidden_size,),
    "embeddings.LayerNorm.bias": lambda c: (c.hidden_size,),
}
_LAYER = {  # torch Linear weights are [out_features, in_features]
    "attention.self.query.weight": lambda c: (c.hidden_size, c.hidden_size),
    "attention.self.query.bias": lambda c: (c.hidden_size,),
    "attention.self.key.weight": lambda c: (c.hidden_size, c.hidden_size),
    "attention.self.key.bias": lambda c: (c.hidden_size,),
    "attention.self.value.weight": lambda c: (c.hidden_size, c.hidden_size),
    "attention.self.value.bias": lambda c: (c.hidden_size,),
    "attention.output.dense.weight": lambda c: (c.hidden_size, c.hidden_size),
    "attention.output.dense.bias": lambda c: (c.hidden_size,),
    "attention.output.LayerNorm.weight": lambda c: (c.hidden_size,),
    "attention.output.LayerNorm.bias": lambda c: (c.hidden_size,),
    "intermediate.dense.weight": lambda c: (c.intermediate_size, c.hidden_size),
    "intermediate.dense.bias": lambda c: (c.intermediate_size,),
    "output.dense.weight": lambda c: (c.hidden_size, c.intermediate_size),
    "output.dense.bias": lambda c: (c.hidden_size,),
    "output.LayerNorm.weight": lambda c: (c.hidden_size,),
    "output.LayerNorm.bias": lambda c: (c.hidden_size,),
}
_POOLER = {"pooler.dense.weight": lambda c: (c.hidden_size, c.hidden_size),
           "pooler.dense.bias": lambda c: (c.hidden_size,)}
# BertForPreTraining's heads (BertPreTrainingHeads); the decoder weight is tied, not saved.
_PRETRAINING_HEADS = {
    "cls.predictions.bias": lambda c: (c.vocab_size,),
    "cls.predictions.transform.dense.weight": lambda c: (c.hidden_size, c.hidden_size),
    "cls.predictions.transform.dense.bias": lambda c: (c.hidden_size,),
    "cls.predictions.transform.LayerNorm.weight": lambda c: (c.hidden_size,),
    "cls.predictions.transform.LayerNorm.bias": lambda c: (c.hidden_size,),
    "cls.seq_relationship.weight": lambda c: (2, c.hidden_size),
    "cls.seq_relationship.bias": lambda c: (2,),
}


def expected_layout(cfg, prefix="", pooler=True, heads=None):
    names = dict(_EMBEDDINGS)
    for i in range(cfg.num_hidden_layers):
        names.update({f"encoder.layer.{i}.{k}": v for k, v in _LAYER.items()})
    if pooler:
        names.update(_POOLER)
    out = {prefix + k: f(cfg) for k, f in names.items()}
    out.update({k: f(cfg) for k, f in (heads or {}).items()})
    return out


def _vocab(tmp_path, cfg):
    path = tmp_path / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
        f"tok{i}" for i in range(cfg.vocab_size - 5)]
    path.write_text("\n".join(tokens) + "\n")
    return str(path)


def _randomised(model, seed):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.standard_normal(v.shape).astype(np.float32) * 0.3)
    return model


@pytest.mark.parametrize("kind", ["encoder", "pretrainer", "classifier", "span", "tagger"])
def test_hf_export_layout_and_reimport_parity(tmp_path, kind):
    cfg = tiny_config()
    make = {"encoder": lambda: be.BertEncoder.from_bert_config(cfg),
            "pretrainer": lambda: bm.BertPretrainer(be.BertEncoder.from_bert_config(cfg)),
            "classifier": lambda: bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 3),
            "span": lambda: bm.BertSpanLabeler(be.BertEncoder.from_bert_config(cfg)),
            "tagger": lambda: bm.BertTokenClassifier(be.BertEncoder.from_bert_config(cfg), 4)}
    model = _randomised(bm.build_model(make[kind]()), seed=3)
    vocab = _vocab(tmp_path, cfg)
    out = str(tmp_path / "hf")
    assert hf.save_hf_directory(model, out, vocab, do_lower_case=False) == out
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors",
                                       "special_tokens_map.json", "tokenizer_config.json",
                                       "vocab.txt"]
    assert sorted(os.listdir(tmp_path)) == ["hf", "vocab.txt"]  # no temporary directory left

    arch, want = {
        "encoder": ("BertModel", expected_layout(cfg)),
        "pretrainer": ("BertForPreTraining", expected_layout(cfg, "bert.", heads=_PRETRAINING_HEADS)),
        "classifier": ("BertForSequenceClassification", expected_layout(
            cfg, "bert.", heads={"classifier.weight": lambda c: (3, c.hidden_size),
                                 "classifier.bias": lambda c: (3,)})),
        # transformers builds these two without a pooler (add_pooling_layer=False).
        "span": ("BertForQuestionAnswering", expected_layout(
            cfg, "bert.", pooler=False, heads={"qa_outputs.weight": lambda c: (2, c.hidden_size),
                                               "qa_outputs.bias": lambda c: (2,)})),
        "tagger": ("BertForTokenClassification", expected_layout(
            cfg, "bert.", pooler=False, heads={"classifier.weight": lambda c: (4, c.hidden_size),
                                               "classifier.bias": lambda c: (4,)})),
    }[kind]
    tensors = load_file(os.path.join(out, "model.safetensors"))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == want
    assert all(v.dtype == np.float32 for v in tensors.values())
    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt"}  # transformers refuses files without it
    # Layout, not just shape: a torch Linear weight is our kernel transposed.
    enc = bm.find_encoder(model)
    p = "" if kind == "encoder" else "bert."
    np.testing.assert_array_equal(tensors[p + "encoder.layer.1.intermediate.dense.weight"],
                                  enc.layer_1.intermediate.kernel.numpy().T)
    np.testing.assert_array_equal(tensors[p + "embeddings.word_embeddings.weight"],
                                  enc.word_embeddings.numpy())

    config = json.loads(open(os.path.join(out, "config.json")).read())
    assert config["architectures"] == [arch] and config["model_type"] == "bert"
    assert config["hidden_act"] == "gelu_new"  # the original's tanh GELU
    assert (config["layer_norm_eps"], config["position_embedding_type"]) == (1e-12, "absolute")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size",
                "initializer_range", "hidden_dropout_prob", "attention_probs_dropout_prob"):
        assert config[key] == getattr(cfg, key), key
    if kind in ("classifier", "tagger"):
        n = 3 if kind == "classifier" else 4
        assert config["id2label"] == {str(i): f"LABEL_{i}" for i in range(n)}
    tok_config = json.loads(open(os.path.join(out, "tokenizer_config.json")).read())
    assert tok_config["do_lower_case"] is False and tok_config["tokenizer_class"] == "BertTokenizer"
    assert open(os.path.join(out, "vocab.txt")).read() == open(vocab).read()

    # Re-import: config and weights give the same outputs.
    again_cfg = hf.bert_config_from_hf(out)
    assert again_cfg == cfg
    fresh = bm.build_model(type(model).from_config(model.get_config()))
    report = ck.load_checkpoint(fresh, out)
    assert report["skipped"] == []
    assert report["missing"] == ([] if kind not in ("span", "tagger")
                                 else ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"])
    rng = np.random.default_rng(4)
    ids, mask, types = padded_batch(rng, cfg)
    inputs = as_inputs(ids, mask, types)
    got, want_out = (numpy_dict(m(inputs, training=False)) for m in (fresh, model))
    keys = [k for k in want_out if k != "encoder_outputs"]
    if kind in ("span", "tagger"):
        keys = [k for k in keys if k != "pooled_output"]
    for key in keys:
        np.testing.assert_allclose(got[key], want_out[key], rtol=0, atol=1e-6, err_msg=key)


def test_hf_export_activation_labels_and_errors(tmp_path):
    cfg = tiny_config(hidden_act="gelu_exact")
    clf = bm.build_model(bm.BertClassifier(be.BertEncoder.from_bert_config(cfg), 1))
    vocab = _vocab(tmp_path, cfg)
    out = hf.save_hf_directory(clf, str(tmp_path / "reg"), vocab)
    config = json.loads(open(os.path.join(out, "config.json")).read())
    assert config["hidden_act"] == "gelu"  # HF's "gelu" is the exact erf form
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "LABEL_0"}
    assert json.loads(open(os.path.join(out, "tokenizer_config.json")).read())["do_lower_case"]
    assert hf.bert_config_from_hf(out).hidden_act == "gelu_exact"
    # An existing directory is never overwritten by accident; overwrite=True swaps it.
    with pytest.raises(BertError, match="already exists"):
        hf.save_hf_directory(clf, out, vocab)
    tagger = bm.build_model(bm.BertTokenClassifier(be.BertEncoder.from_bert_config(cfg), 2))
    hf.save_hf_directory(tagger, out, vocab, labels=["O", "B-PER"], overwrite=True)
    config = json.loads(open(os.path.join(out, "config.json")).read())
    assert config["id2label"] == {"0": "O", "1": "B-PER"} and config["label2id"]["B-PER"] == 1
    # Bad input: one line, and no output directory at all.
    short = tmp_path / "short.txt"
    short.write_text("".join(f"w{i}\n" for i in range(200)))  # more lines than vocab_size
    for kwargs, needle in [(dict(vocab_file=str(short)), "short.txt: 200 lines but the model has vocab_size 97"),
                           (dict(vocab_file=vocab, labels=["a"]), "1 given, the model has 2")]:
        target = str(tmp_path / "never")
        with pytest.raises(BertError) as err:
            hf.save_hf_directory(tagger, target, **kwargs)
        assert needle in str(err.value) and "\n" not in str(err.value)
        assert not os.path.exists(target)
    assert sorted(os.listdir(tmp_path)) == ["reg", "short.txt", "vocab.txt"]
