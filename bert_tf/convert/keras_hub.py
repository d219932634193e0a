"""keras-hub BERT presets <-> bert_tf.

A preset directory is what `BertBackbone.save_to_preset(dir)` (+ the tokenizer's) writes:
`config.json`, `model.weights.h5`, `tokenizer.json`, `assets/tokenizer/vocabulary.txt`,
`metadata.json`. keras-hub is imported lazily (a peer: `pip install "bert_tf[keras-hub]"`), never at module level.

>>> model, vocab_file, lower = load_keras_hub_preset("my_preset/")              # doctest: +SKIP
>>> model, vocab, lower, strip = load_keras_hub_preset_with_casing("bert_tiny/")  # doctest: +SKIP
>>> save_keras_hub_preset(model, vocab_file, True, "out_preset/")               # doctest: +SKIP
>>> keras_hub.models.BertTextClassifier.from_preset("out_preset/", num_classes=2)  # doctest: +SKIP
"""
import os
import shutil
import uuid

import numpy as np

from bert_tf import BertError
from bert_tf.convert.interop import (config_from_weights, encoder_of, get_weights,
                                     model_from_weights, require_peer)
from bert_tf.convert.source import Format, Source, file_in

_KH = "keras-hub"  # interop.PEER_INSTALL key
_TOP = {
    "token_embedding/embeddings": "bert/embeddings/word_embeddings",
    "position_embedding/embeddings": "bert/embeddings/position_embeddings",
    "segment_embedding/embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings_layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
    "embeddings_layer_norm/beta": "bert/embeddings/LayerNorm/beta",
    "pooled_dense/kernel": "bert/pooler/dense/kernel",
    "pooled_dense/bias": "bert/pooler/dense/bias",
}
_BLOCK = {
    "self_attention_layer/query": "attention/self/query",
    "self_attention_layer/key": "attention/self/key",
    "self_attention_layer/value": "attention/self/value",
    "self_attention_layer/attention_output": "attention/output/dense",
    "self_attention_layer_norm": "attention/output/LayerNorm",
    "feedforward_intermediate_dense": "intermediate/dense",
    "feedforward_output_dense": "output/dense",
    "feedforward_layer_norm": "output/LayerNorm",
}


def _tf1_name(path):
    if path in _TOP:
        return _TOP[path]
    first, _, rest = path.partition("/")
    layer = first[len("transformer_layer_"):]
    if first.startswith("transformer_layer_") and layer.isdigit():
        module, _, param = rest.rpartition("/")
        if module in _BLOCK:
            return f"bert/encoder/layer_{layer}/{_BLOCK[module]}/{param}"
    return None


def backbone_weights(backbone):
    """{TF1 name: array in the TF1 layout} of a keras_hub BertBackbone."""
    out = {}
    h = backbone.hidden_dim
    for w in backbone.weights:
        name = _tf1_name(w.path)
        if name is None:
            continue
        value = np.asarray(w.numpy())
        if "/attention/" in name and name.endswith("/kernel"):
            value = value.reshape(h, h)
        elif "/attention/self/" in name and name.endswith("/bias"):
            value = value.reshape(h)
        out[name] = value
    return out


def keras_hub_casing(preset_dir):
    """(lowercase, strip_accents) of a keras-hub preset's tokenizer (tokenizer.json config).

    keras-hub's WordPieceTokenizer defaults are lowercase=False, strip_accents=False, so a
    preset built with `BertTokenizer(lowercase=True)` lower-cases but keeps accents, unlike
    the original's uncased FullTokenizer. A preset without tokenizer.json: (True, True).
    """
    from bert_tf import fileio
    path = os.path.join(preset_dir, "tokenizer.json")
    if not os.path.exists(path):
        return True, True
    config = fileio.read_json(path).get("config", {})  # size-bounded, one-line errors
    if not isinstance(config, dict):
        raise BertError(f"{path}: not a keras-hub tokenizer config ('config' is not an object)")
    return (fileio.json_bool(config, "lowercase", path, default=False),
            fileio.json_bool(config, "strip_accents", path, default=False))


def _vocab_of(preset_dir):
    vocab = os.path.join(preset_dir, "assets", "tokenizer", "vocabulary.txt")
    if not os.path.exists(vocab):
        raise BertError(f"{preset_dir}: no assets/tokenizer/vocabulary.txt (save the "
                        "tokenizer with tokenizer.save_to_preset(dir) too)")
    return vocab


def load_keras_hub_preset_with_casing(preset_dir):
    """A bert_tf BertEncoder from a local keras-hub BERT preset, with its tokenizer's casing:
    (model, vocab_file, lowercase, strip_accents).

    `FullTokenizer(vocab_file, do_lower_case=lowercase, strip_accents=strip_accents)` then
    gives keras-hub's ids (on text that keras-hub's NFKC case folding lower-cases as
    str.lower does).

    Args:
        preset_dir: a directory written by `BertBackbone.save_to_preset` (+ tokenizer). Only
            local directories: nothing is downloaded.
    """
    if not os.path.isfile(os.path.join(preset_dir, "config.json")):
        raise BertError(f"{preset_dir}: not a keras-hub preset directory (no config.json)")
    vocab_file = _vocab_of(preset_dir)
    lowercase, strip_accents = keras_hub_casing(preset_dir)
    keras_hub = require_peer("keras_hub", _KH)
    try:
        backbone = keras_hub.models.BertBackbone.from_preset(preset_dir)
    except (ValueError, OSError, KeyError, TypeError) as e:
        raise BertError(f"{preset_dir}: keras-hub cannot load it as a BertBackbone "
                        f"({str(e).splitlines()[0][:200]})") from None
    weights = backbone_weights(backbone)
    cfg = config_from_weights(weights, backbone.num_heads, "gelu", preset_dir)
    from bert_tf.tokenization import check_vocab_size
    check_vocab_size(vocab_file, cfg.vocab_size, preset_dir)
    model = model_from_weights(cfg, weights, source=preset_dir)
    return model, vocab_file, lowercase, strip_accents


def load_keras_hub_preset(preset_dir):
    """A bert_tf BertEncoder from a local keras-hub BERT preset: (model, vocab_file, lower).

    `lower` is the original's do_lower_case (lower-case and strip accents). A preset whose
    tokenizer lower-cases without stripping accents (keras-hub's default for
    `BertTokenizer(lowercase=True)`), or the reverse, has no do_lower_case equivalent: that
    is a BertError here (never silently other ids); use load_keras_hub_preset_with_casing.

    Args:
        preset_dir: a directory written by `BertBackbone.save_to_preset` (+ tokenizer). Only
            local directories: nothing is downloaded.
    """
    model, vocab_file, lowercase, strip_accents = load_keras_hub_preset_with_casing(preset_dir)
    if lowercase != strip_accents:
        raise BertError(f"{preset_dir}: its tokenizer has lowercase={lowercase}, "
                        f"strip_accents={strip_accents}, which no do_lower_case reproduces; use "
                        "load_keras_hub_preset_with_casing and FullTokenizer(..., "
                        "strip_accents=...)")
    return model, vocab_file, lowercase


def to_keras_hub_backbone(model):
    """A keras_hub BertBackbone holding a bert_tf model's encoder weights (dropout as ours)."""
    keras_hub = require_peer("keras_hub", _KH)
    cfg = encoder_of(model).bert_config
    if cfg.hidden_act not in ("gelu", "gelu_new"):
        raise BertError(f"keras-hub's BertBackbone always uses the tanh GELU; this model's "
                        f"hidden_act is {cfg.hidden_act!r}")
    if cfg.hidden_dropout_prob != cfg.attention_probs_dropout_prob:
        raise BertError("keras-hub's BertBackbone has one dropout rate; this model has "
                        f"hidden {cfg.hidden_dropout_prob} / attention "
                        f"{cfg.attention_probs_dropout_prob}")
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=cfg.vocab_size, num_layers=cfg.num_hidden_layers,
        num_heads=cfg.num_attention_heads, hidden_dim=cfg.hidden_size,
        intermediate_dim=cfg.intermediate_size, dropout=cfg.hidden_dropout_prob,
        max_sequence_length=cfg.max_position_embeddings, num_segments=cfg.type_vocab_size)
    ours = get_weights(model)
    for w in backbone.weights:
        name = _tf1_name(w.path)
        if name is None:
            raise BertError(f"keras-hub BertBackbone weight {w.path} has no bert_tf counterpart")
        w.assign(np.asarray(ours[name]).reshape(w.shape))
    return backbone


def save_keras_hub_preset(model, vocab_file, do_lower_case, preset_dir, strip_accents=None):
    """Writes a keras-hub BERT preset (backbone + tokenizer) to preset_dir, atomically.

    Args:
        model: a BertEncoder or bert_tf model with the tanh GELU ("gelu"); its encoder is saved.
        vocab_file: the model's WordPiece vocab (as many lines as the embedding table rows).
        do_lower_case: as the original's --do_lower_case.
        preset_dir: a new directory (BertError if it exists).
        strip_accents: None (strip exactly when do_lower_case, as the original FullTokenizer)
            or a bool, as `FullTokenizer(..., strip_accents=...)`.

    `BertBackbone.from_preset(preset_dir)` and `BertTextClassifier.from_preset(preset_dir,
    num_classes=...)` load it. The tokenizer's lowercase / strip_accents are written
    explicitly (keras-hub's own default keeps accents). Returns preset_dir.
    """
    keras_hub = require_peer("keras_hub", _KH)
    from bert_tf import tokenization
    cfg = encoder_of(model).bert_config
    vocab = tokenization.check_vocab_size(vocab_file, cfg.vocab_size, exact=True)  # keras-hub's
    backbone = to_keras_hub_backbone(model)
    tokenizer = keras_hub.models.BertTokenizer(
        vocabulary=vocab, lowercase=bool(do_lower_case),
        strip_accents=bool(do_lower_case if strip_accents is None else strip_accents))
    preset_dir = preset_dir.rstrip("/")
    if os.path.exists(preset_dir):
        raise BertError(f"{preset_dir}: already exists (choose a new directory)")
    tmp = f"{preset_dir}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        backbone.save_to_preset(tmp)
        tokenizer.save_to_preset(tmp)
        os.rename(tmp, preset_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return preset_dir


# ---- the format (bert_tf.convert.source) -----------------------------------------------------

def _detect(path):
    import tensorflow as tf
    if tf.io.gfile.isdir(path) and file_in(path, "model.weights.h5") \
            and file_in(path, "config.json"):
        return path
    return None


def _read(path):
    model, vocab, lower, strip = load_keras_hub_preset_with_casing(path)
    weights = get_weights(model)

    def loader(target):
        from bert_tf.convert.tf1 import load_tf1_weights
        return load_tf1_weights(target, weights, path)
    return Source("keras_hub", path, path, encoder_of(model).bert_config, vocab, (lower, strip),
                  loader=loader)


def _write(net, cfg, out, vocab_file, casing):
    save_keras_hub_preset(net, vocab_file, casing[0], out, strip_accents=casing[1])


FORMAT = Format("keras_hub", _detect, _read, _write, needs_vocab=True,
                looks_for="config.json + model.weights.h5 (keras-hub preset)")
