"""TF Hub BERT SavedModels (Model Garden's `export_tfhub_lib`) -> bert_tf weights + vocab.

No peer is needed: the encoder SavedModel is read with `tf.saved_model.load` through the
variable names of `official.nlp.modeling.networks.BertEncoder` (`transformer/layer_0/...`)
and, when exported with `with_mlm=True`, of its `mlm` sub-model (`.../cls/predictions/...`).
The vocab and do_lower_case come from the encoder (`vocab_file` asset, `do_lower_case`) or from
the matching preprocessing SavedModel.

>>> model, vocab, lower = load_tfhub_encoder("bert_en_uncased_L-2_H-128_A-2/2")  # doctest: +SKIP
"""
import os

import numpy as np

from bert_tf import BertError
from bert_tf.convert.interop import config_from_weights, model_from_weights, weights_source
from bert_tf.convert.source import Format, saved_model_inside

_EMBEDDINGS = {
    "word_embeddings/embeddings": "bert/embeddings/word_embeddings",
    "position_embedding/embeddings": "bert/embeddings/position_embeddings",
    "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
    "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
    "pooler_transform/kernel": "bert/pooler/dense/kernel",
    "pooler_transform/bias": "bert/pooler/dense/bias",
}
_BLOCK = {
    "self_attention/query": "attention/self/query",
    "self_attention/key": "attention/self/key",
    "self_attention/value": "attention/self/value",
    "self_attention/attention_output": "attention/output/dense",
    "self_attention_layer_norm": "attention/output/LayerNorm",
    "intermediate": "intermediate/dense",
    "output": "output/dense",
    "output_layer_norm": "output/LayerNorm",
}
_MLM = {
    "cls/predictions/transform/dense/kernel": "cls/predictions/transform/dense/kernel",
    "cls/predictions/transform/dense/bias": "cls/predictions/transform/dense/bias",
    "cls/predictions/transform/LayerNorm/gamma": "cls/predictions/transform/LayerNorm/gamma",
    "cls/predictions/transform/LayerNorm/beta": "cls/predictions/transform/LayerNorm/beta",
    "cls/predictions/output_bias/bias": "cls/predictions/output_bias",
}


def _load(export_dir):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops of preprocessing SavedModels)
    if not tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb")):
        raise BertError(f"{export_dir}: not a SavedModel (no saved_model.pb)")
    try:
        return tf.saved_model.load(export_dir)
    except (tf.errors.OpError, ValueError) as e:
        raise BertError(f"{export_dir}: cannot load the SavedModel "
                        f"({str(e).splitlines()[0][:200]})") from None


def _tf1_name(name, num_layers_seen):
    name = name.split(":")[0]
    for theirs, ours in {**_EMBEDDINGS, **_MLM}.items():
        if name == theirs or name.endswith("/" + theirs):
            return ours
    parts = name.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("layer_") and part[6:].isdigit() and i and parts[i - 1] == "transformer":
            rest = "/".join(parts[i + 1:-1])
            if rest in _BLOCK:
                num_layers_seen.add(int(part[6:]))
                return f"bert/encoder/{part}/{_BLOCK[rest]}/{parts[-1]}"
    return None


def read_tfhub_encoder(export_dir, hidden_act="gelu"):
    """Reads a TF Hub BERT encoder SavedModel into (BertConfig, TF1-named weights, vocab_file,
    do_lower_case); vocab_file / do_lower_case are None when the export does not carry them.

    Args:
        export_dir: the SavedModel directory (Model Garden's export_tfhub_lib layout).
        hidden_act: not recorded in the SavedModel; export_tfhub_lib uses the config's
            "gelu", the tanh approximation (bert_tf's "gelu").
    """
    loaded = _load(export_dir)
    variables = list(getattr(loaded, "variables", []) or [])
    mlm = getattr(loaded, "mlm", None)
    if mlm is not None:
        variables += list(mlm.variables)
    weights, layers = {}, set()
    for v in variables:
        name = _tf1_name(v.name, layers)
        if name is not None:
            weights.setdefault(name, v.numpy())
    if "bert/embeddings/word_embeddings" not in weights or not layers:
        raise BertError(f"{export_dir}: no BERT encoder variables (expected Model Garden "
                        "BertEncoder names such as transformer/layer_0/self_attention/...)")
    h = weights["bert/embeddings/word_embeddings"].shape[1]
    heads = None
    for i in range(len(layers)):
        for q in ("query", "key", "value"):
            k = f"bert/encoder/layer_{i}/attention/self/{q}/"
            if k + "kernel" not in weights:
                raise BertError(f"{export_dir}: missing {k}kernel (truncated export?)")
            heads = weights[k + "kernel"].shape[1]
            weights[k + "kernel"] = weights[k + "kernel"].reshape(h, h)
            weights[k + "bias"] = weights[k + "bias"].reshape(h)
        k = f"bert/encoder/layer_{i}/attention/output/dense/kernel"
        weights[k] = weights[k].reshape(h, h)
    cfg = config_from_weights(weights, heads, hidden_act, export_dir)
    vocab_file = do_lower_case = None
    if hasattr(loaded, "vocab_file"):
        vocab_file = loaded.vocab_file.asset_path.numpy().decode("utf-8")
    if hasattr(loaded, "do_lower_case"):
        do_lower_case = bool(loaded.do_lower_case.numpy())
    return cfg, weights, vocab_file, do_lower_case


def load_tfhub_encoder(export_dir, bert_config=None, hidden_act="gelu"):
    """A bert_tf model from a TF Hub encoder SavedModel: (model, vocab_file, do_lower_case).

    Args:
        export_dir: the encoder SavedModel.
        bert_config: optional BertConfig; default inferred from the weights.
        hidden_act: see read_tfhub_encoder.

    The model is a BertPretrainer when the export has the `mlm` sub-model (its NSP head is
    freshly initialised: TF Hub exports carry none), else a BertEncoder. A given bert_config
    must agree with the weights' shapes.
    """
    cfg, weights, vocab_file, do_lower_case = read_tfhub_encoder(export_dir, hidden_act)
    if vocab_file is not None:
        from bert_tf import tokenization
        tokenization.check_vocab_size(vocab_file, cfg.vocab_size, export_dir)
    model = model_from_weights(bert_config or cfg, weights, source=export_dir)
    return model, vocab_file, do_lower_case


def read_tfhub_preprocessor(export_dir):
    """(vocab_file, do_lower_case) of a TF Hub BERT preprocessing SavedModel.

    The vocab is the export's one .txt asset; lower-casing is observed by tokenizing a vocab
    word and its upper-case form (the SavedModel records no flag).
    """
    import tensorflow as tf
    from bert_tf import tokenization
    assets = os.path.join(export_dir, "assets")
    found = sorted(f for f in tf.io.gfile.glob(os.path.join(assets, "*.txt")))
    if len(found) != 1:
        raise BertError(f"{export_dir}: expected one vocab .txt asset in assets/, found "
                        f"{len(found)} (not a WordPiece BERT preprocessor?)")
    vocab_file = found[0]
    loaded = _load(export_dir)
    if not hasattr(loaded, "tokenize"):
        raise BertError(f"{export_dir}: no `tokenize` (not a TF Hub BERT preprocessor)")
    words = [w for w in tokenization.vocab_tokens(vocab_file) if w.isalpha() and w.islower()]
    if not words:
        return vocab_file, True
    probe = tf.constant([words[0], words[0].upper()])
    ids = loaded.tokenize(probe)
    rows = ids.merge_dims(1, 2).to_list() if ids.ragged_rank > 1 else ids.to_list()
    return vocab_file, bool(np.array_equal(rows[0], rows[1]))


# ---- the format (bert_tf.convert.source) -----------------------------------------------------

def _detect(path):
    return saved_model_inside(path)  # also <dir>/encoder/ and <dir>/<newest version>/


def _read(path):
    cfg, weights, vocab, lower = read_tfhub_encoder(path)
    return weights_source("tfhub", path, path, lambda: weights, bert_config=cfg,
                          vocab_file=vocab, casing=None if lower is None else (lower, lower))


# --from=tfhub reads bert_tf's own encoder export too (a TF Hub-style SavedModel).
FORMAT = Format("tfhub", _detect, _read, heads=True, also_reads=("bert_tf_export",),
                looks_for="saved_model.pb (TF Hub encoder), also under encoder/ or a numbered "
                "version folder")
