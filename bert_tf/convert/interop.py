"""Shared by the peer converters: bert_tf models <-> TF1-named weight dicts, lazy peer imports.

Weights travel between formats as a flat dict of numpy arrays keyed by the original TF1 names
(`bert/encoder/layer_0/attention/self/query/kernel` [H, H], `cls/predictions/output_bias`,
`cls/seq_relationship/output_weights` [2, H]...), the one layout every converter agrees on.
"""
import numpy as np

from bert_tf import BertError
from bert_tf.convert.source import Source, lazy
from bert_tf.convert.tf1 import load_tf1_weights, tf1_name_map
from bert_tf.modeling.config import BertConfig

# What a pip user runs (setup.py's extras; Model Garden cannot resolve in one pip command:
# its tf-models-official pins absl-py/numpy ranges the stack has outgrown, so it goes --no-deps).
# Keyed by the setup.py extra.
PEER_INSTALL = {
    "keras-hub": 'pip install "bert_tf[keras-hub]"',
    "model-garden": ('pip install "bert_tf[model-garden]" && pip install --no-deps '
                     'tf-models-official==2.20.0 tensorflow-model-optimization==0.8.1'),
}


def require_peer(module, pkgs):  # pkgs: a PEER_INSTALL key or a pip requirement
    """Imports a peer package lazily; BertError with the install command if it is missing.

    Peers (keras_hub, tf-models-official...) are optional, so only the converter that needs
    one imports it.

    Args:
        module: str, the module to import (e.g. "keras_hub").
        pkgs: str, the pip requirement(s) put in the install hint.

    Returns:
        The imported module.
    """
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        install = PEER_INSTALL.get(pkgs, f"pip install {pkgs}")
        raise BertError(f"{module} is not installed ({e}): {install}") from None


# ---- our models <-> TF1-named weights -------------------------------------------------------

def build_bert_model(bert_config, with_pretraining_heads=False):
    """The one place converters build bert_tf models (encoder, or encoder + MLM/NSP heads).

    Args:
        bert_config: a BertConfig.
        with_pretraining_heads: build a BertPretrainer instead of a bare BertEncoder.
    Returns: the built model.
    """
    from bert_tf.modeling import models as bm
    from bert_tf.modeling.encoder import BertEncoder
    enc = BertEncoder.from_bert_config(bert_config, name="encoder")
    return bm.build_model(bm.BertPretrainer(enc) if with_pretraining_heads else enc)


def encoder_of(model):
    """The built BertEncoder of a bert_tf model (BertError if there is none)."""
    from bert_tf.modeling import models as bm
    return bm.find_encoder(bm.ensure_built(model))


def get_weights(model):
    """{TF1 name: numpy array in the TF1 layout} of a bert_tf model."""
    out = {}
    for name, (var, transpose) in tf1_name_map(model).items():
        value = np.asarray(var.numpy() if hasattr(var, "numpy") else var)
        out[name] = value.T if transpose else value
    return out


def set_weights(model, weights, source="weights"):
    """Assigns TF1-named arrays to the model; every model weight must be present.

    Raises BertError naming the first missing tensor or shape mismatch (nothing is assigned
    then). Tensors the model has no place for (e.g. heads of a bare encoder) are ignored.

    Args:
        model: a built bert_tf model (BertEncoder, BertPretrainer...).
        weights: {TF1 name: array in the TF1 layout}, as `get_weights` returns.
        source: str, names the weights in error messages.

    Returns:
        `model`.
    """
    plan = []
    for name, (var, transpose) in tf1_name_map(model).items():
        if name not in weights:
            raise BertError(f"{source}: no tensor for {name} (does the source hold this "
                            "model's weights?)")
        value = np.asarray(weights[name])
        if transpose:
            value = value.T
        if tuple(value.shape) != tuple(var.shape):
            raise BertError(f"{source}: {name} has shape {list(value.shape)}, the model "
                            f"expects {list(var.shape)} (config/weights mismatch)")
        plan.append((var, value))
    for var, value in plan:
        var.assign(value.astype(var.dtype if isinstance(var.dtype, str) else var.dtype.name))
    return model


def config_from_weights(weights, num_attention_heads, hidden_act="gelu", source="weights"):
    """BertConfig implied by TF1-named arrays (head count and activation are not in them).

    Args:
        weights: {TF1 name: array}; needs the embedding tables and layer_0's FFN kernel.
        num_attention_heads: int, from the source's own config.
        hidden_act: str, from the source's own config.
        source: str, names the weights in error messages.

    Raises:
        BertError: a required tensor is missing (not BERT encoder weights).
    """
    try:
        vocab, hidden = weights["bert/embeddings/word_embeddings"].shape
        layers = 0
        while f"bert/encoder/layer_{layers}/attention/self/query/kernel" in weights:
            layers += 1
        return BertConfig(
            vocab_size=int(vocab), hidden_size=int(hidden), num_hidden_layers=layers,
            num_attention_heads=int(num_attention_heads),
            intermediate_size=int(
                weights["bert/encoder/layer_0/intermediate/dense/kernel"].shape[1]),
            hidden_act=hidden_act,
            max_position_embeddings=int(weights["bert/embeddings/position_embeddings"].shape[0]),
            type_vocab_size=int(weights["bert/embeddings/token_type_embeddings"].shape[0]),
            source=source)
    except KeyError as e:
        raise BertError(f"{source}: not a BERT encoder (no tensor {e.args[0]})") from None


def model_from_weights(bert_config, weights, source="weights"):
    """A new bert_tf model (a BertPretrainer if MLM weights are present) holding `weights`.

    With MLM but no NSP weights the NSP head keeps its fresh initialisation.

    Args:
        bert_config: a BertConfig matching the weights.
        weights: {TF1 name: array in the TF1 layout}.
        source: str, names the weights in error messages.
    """
    heads = "cls/predictions/output_bias" in weights
    model = build_bert_model(bert_config, with_pretraining_heads=heads)
    if heads and "cls/seq_relationship/output_weights" not in weights:
        weights = dict(weights)  # MLM without NSP: keep the NSP head as initialised
        weights.update({k: v for k, v in get_weights(model).items()
                        if k.startswith("cls/seq_relationship/")})
    return set_weights(model, weights, source)


# ---- a Source of TF1-named arrays (the formats read through a peer's layout) ----------------

def weights_source(name, path, directory, read_weights, **fields):
    """A Source whose weights come as TF1-named arrays: `read_weights()` ->
    {TF1 name: array}, called once (on the first load or has_mlm).

    Args:
        name: the Format's name (`Source.format`).
        path: what the source reads (`Source.path`; also named in load errors).
        directory: where its config / vocab files are (`Source.directory`).
        read_weights: () -> {TF1 variable name: numpy array}.
        **fields: other `Source` fields (bert_config, vocab_file, casing, ...).
    """
    weights = lazy(read_weights)

    def loader(model):
        return load_tf1_weights(model, weights(), path)
    return Source(name, path, directory, loader=loader,
                  has_mlm=lambda: "cls/predictions/output_bias" in weights(), **fields)
