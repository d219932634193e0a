"""from_pretrained(task="embeddings"): pooling and normalisation from a sentence-transformers
directory (1_Pooling/config.json, modules.json), explicit overrides, NumPy parity, and the
export serving the same vectors."""
import json
import shutil

import numpy as np
import pytest

import bert_tf
import tensorflow as tf

from bert_tf import BertError
from test_serve_path import write_hf_dir

TEXTS = ["a good film .", "really dull plot", "", "the movie was not very good , really"]
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize",
            "type": "sentence_transformers.models.Normalize"}]


def pooling_config(mode):
    return {"word_embedding_dimension": 16, "pooling_mode_cls_token": mode == "cls",
            "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_max_tokens": mode == "max",
            "pooling_mode_mean_sqrt_len_tokens": False}


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("st")
    hf_dir, _ = write_hf_dir(base)
    st = base / "st"
    shutil.copytree(hf_dir, st)
    (st / "1_Pooling").mkdir()
    (st / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config("mean")))
    (st / "modules.json").write_text(json.dumps(MODULES))
    enc = bert_tf.from_pretrained(hf_dir, text_input=True, seq_length=12)
    ids = enc.preprocessor(tf.constant(TEXTS))
    out = enc.model(ids)
    return dict(base=base, hf=hf_dir, st=str(st), ids={k: v.numpy() for k, v in ids.items()},
                seq=out["sequence_output"].numpy(), pooled=out["pooled_output"].numpy())


def test_mean_pooling_and_normalize_from_the_sentence_transformers_files(st_dir, tmp_path):
    emb = bert_tf.from_pretrained(st_dir["st"], task="embeddings", text_input=True,
                                  seq_length=12)
    assert (emb.model.pooling, emb.model.normalize) == ("mean", True)
    got = emb.predict(TEXTS, verbose=0)
    mask = st_dir["ids"]["input_mask"][:, :, None].astype(np.float64)
    mean = (st_dir["seq"] * mask).sum(1) / mask.sum(1)
    want = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    assert got.shape == (4, 16)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # Explicit arguments override the files; without them a plain HF dir gives the pooler.
    # Ids in (text in and predict: `emb` above): no tokenizer graph or predict trace each.
    raw = bert_tf.from_pretrained(st_dir["st"], task="embeddings", normalize=False)
    np.testing.assert_allclose(raw(st_dir["ids"])["embedding"].numpy(), mean, atol=1e-5)
    cls = bert_tf.from_pretrained(st_dir["hf"], task="embeddings")
    assert (cls.pooling, cls.normalize) == ("cls", False)
    np.testing.assert_allclose(cls(st_dir["ids"])["embedding"].numpy(), st_dir["pooled"],
                               atol=1e-6)
    token = bert_tf.from_pretrained(st_dir["hf"], task="embeddings", pooling="cls_token")
    np.testing.assert_allclose(token(st_dir["ids"])["embedding"].numpy(),
                               st_dir["seq"][:, 0], atol=1e-6)
    # The export serves the same vectors, text in; its `pooled_output` stays the pooler's.
    path = emb.export(str(tmp_path / "emb" / "1"), verbose=False)
    out = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(TEXTS))
    np.testing.assert_allclose(out["embedding"].numpy(), got, atol=1e-5)
    np.testing.assert_allclose(out["pooled_output"].numpy(), st_dir["pooled"], atol=1e-5)
    meta = json.load(open(f"{path}/assets.extra/bert_tf_export.json"))
    assert (meta["task"], meta["pooling"], meta["normalize"]) == ("embeddings", "mean", True)


def test_ids_in_embedder_and_errors(st_dir, tmp_path):
    emb = bert_tf.from_pretrained(st_dir["st"], task="embeddings")
    got = emb(st_dir["ids"])["embedding"].numpy()
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    path = emb.export(str(tmp_path / "ids" / "1"), verbose=False)
    served = tf.saved_model.load(path).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in st_dir["ids"].items()})
    np.testing.assert_allclose(served["embedding"].numpy(), got, atol=1e-5)
    bad = tmp_path / "bad"
    shutil.copytree(st_dir["st"], bad)
    (bad / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config("max")))
    with pytest.raises(BertError) as e:
        bert_tf.from_pretrained(str(bad), task="embeddings")
    assert str(e.value) == (f"{bad}/1_Pooling/config.json: pooling pooling_mode_max_tokens is "
                            f"not supported (bert_tf pools with pooling_mode_cls_token or "
                            f"pooling_mode_mean_tokens; pass pooling=... to choose)")
    with pytest.raises(BertError, match=r"^pooling / normalize are only for task='embeddings'"):
        bert_tf.from_pretrained(st_dir["hf"], pooling="mean")
    with pytest.raises(BertError, match=r"^pooling='max': expected one of cls, cls_token, mean"):
        bert_tf.from_pretrained(str(bad), task="embeddings", pooling="max")
