"""bert-convert on the commonest Hugging Face layout: a `BertModel` directory (no MLM/NSP heads),
written here with the real BertModel safetensors names. No --model needed; no long warning."""
import json
import os

import numpy as np
import pytest

import bert_tf  # noqa: F401
from bert_tf import BertError

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "was", "good", "bad",
         "it", "dull", "a", "film", "##s", "##ly", ".", ",", "fine", "great", "plot", "very",
         "not", "really", "awful", "Good", "Bad"]
H, I, L, V = 16, 24, 2, len(VOCAB)


def write_bert_model_dir(base):
    """A tiny HF `BertModel` directory (config.json, model.safetensors, vocab.txt,
    tokenizer_config.json) plus `base/bert_config.json` of the same model; returns the dir."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(0)
    shapes = {"embeddings.word_embeddings.weight": (V, H),
              "embeddings.position_embeddings.weight": (40, H),
              "embeddings.token_type_embeddings.weight": (2, H),
              "embeddings.LayerNorm.weight": (H,), "embeddings.LayerNorm.bias": (H,),
              "pooler.dense.weight": (H, H), "pooler.dense.bias": (H,)}
    for i in range(L):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            shapes[f"{p}attention.self.{n}.weight"] = (H, H)
            shapes[f"{p}attention.self.{n}.bias"] = (H,)
        shapes.update({f"{p}attention.output.dense.weight": (H, H),
                       f"{p}attention.output.dense.bias": (H,),
                       f"{p}attention.output.LayerNorm.weight": (H,),
                       f"{p}attention.output.LayerNorm.bias": (H,),
                       f"{p}intermediate.dense.weight": (I, H),
                       f"{p}intermediate.dense.bias": (I,),
                       f"{p}output.dense.weight": (H, I), f"{p}output.dense.bias": (H,),
                       f"{p}output.LayerNorm.weight": (H,), f"{p}output.LayerNorm.bias": (H,)})
    d = os.path.join(str(base), "hf_bert_model")
    os.makedirs(d)
    save_file({k: rng.normal(0, 0.3, s).astype(np.float32) for k, s in shapes.items()},
              os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": V,
              "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": 2,
              "intermediate_size": I, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
              "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 40,
              "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
              "pad_token_id": 0, "position_embedding_type": "absolute"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")
    bert_cfg = {k: config[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                       "num_attention_heads", "intermediate_size", "hidden_act",
                                       "hidden_dropout_prob", "attention_probs_dropout_prob",
                                       "max_position_embeddings", "type_vocab_size",
                                       "initializer_range")}
    with open(os.path.join(str(base), "bert_config.json"), "w") as f:
        json.dump(bert_cfg, f)
    return d


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return write_bert_model_dir(tmp_path_factory.mktemp("enc_only"))


def _tensors(path):
    from safetensors.numpy import load_file
    return load_file(path)


def test_hf_bert_model_converts_without_model_flag(hf_dir, tmp_path, capsys, caplog):
    import tensorflow as tf
    from bert_tf.convert.__main__ import convert
    src = _tensors(os.path.join(hf_dir, "model.safetensors"))
    convert("hf", hf_dir, "tf1", str(tmp_path / "tf1"))
    convert("hf", hf_dir, "hf", str(tmp_path / "hf"))
    err = capsys.readouterr().err.splitlines()
    assert err == [f"note: {hf_dir} has no pre-training heads: converting the encoder"] * 2
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    names = dict(tf.train.list_variables(str(tmp_path / "tf1" / "bert_model.ckpt")))
    assert not [n for n in names if n.startswith("cls/")]
    reader = tf.train.load_checkpoint(str(tmp_path / "tf1" / "bert_model.ckpt"))
    q = "encoder.layer.1.attention.self.query.weight"
    np.testing.assert_array_equal(
        reader.get_tensor("bert/encoder/layer_1/attention/self/query/kernel"), src[q].T)
    out = _tensors(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(out) == sorted(src)
    for k in src:
        np.testing.assert_array_equal(out[k], src[k])
    assert (tmp_path / "hf" / "vocab.txt").read_text().split("\n")[:V] == VOCAB


def test_explicit_pretrainer_on_an_encoder_only_source_is_one_line(hf_dir, tmp_path):
    from bert_tf.convert.__main__ import convert
    with pytest.raises(BertError) as e:
        convert("hf", hf_dir, "tf1", str(tmp_path / "x"), model="pretrainer")
    assert "\n" not in str(e.value) and "--model=encoder" in str(e.value)
    assert not (tmp_path / "x").exists()


def test_heads_kept_when_the_source_has_them(tmp_path, capsys):
    import tensorflow as tf
    from bert_tf.convert.__main__ import convert
    from bert_tf.convert import hf
    from bert_tf.convert.interop import build_bert_model
    from bert_tf.modeling.config import BertConfig
    cfg = BertConfig(vocab_size=V, hidden_size=H, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=I, max_position_embeddings=40)
    (tmp_path / "v.txt").write_text("\n".join(VOCAB) + "\n")
    hf.save_hf_directory(build_bert_model(cfg, with_pretraining_heads=True),
                         str(tmp_path / "pre"), str(tmp_path / "v.txt"))
    convert("hf", str(tmp_path / "pre"), "tf1", str(tmp_path / "tf1"))
    assert "no pre-training heads" not in capsys.readouterr().err
    names = dict(tf.train.list_variables(str(tmp_path / "tf1" / "bert_model.ckpt")))
    assert "cls/predictions/output_bias" in names and "cls/seq_relationship/output_bias" in names
