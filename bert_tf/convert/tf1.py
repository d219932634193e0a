"""The original TF1 BERT checkpoints (`bert_model.ckpt` of google-research/bert): read and write.

`model` is a BertEncoder, a `bert_tf.modeling.models` task model, or a keras.Model that
contains exactly one BertEncoder layer (e.g. `build_encoder_model`). Unbuilt models are built.

Original names, as in the release's `bert_model.ckpt`:
  bert/embeddings/..., bert/encoder/layer_{i}/..., bert/pooler/dense/{kernel,bias}
  BertPretrainer      cls/predictions/transform/dense, cls/predictions/transform/LayerNorm,
                      cls/predictions/output_bias (output weights tied to the word embeddings),
                      cls/seq_relationship/output_{weights,bias}   weights [2, H] (transposed)
  BertClassifier      output_weights [num_classes, H] (transposed), output_bias   (run_classifier)
  BertSpanLabeler     cls/squad/output_weights [2, H] (transposed), cls/squad/output_bias (run_squad)
  BertTokenClassifier cls/ner/output_weights [num_labels, H] (transposed), cls/ner/output_bias
                      (the original has no tagger; this name is ours)
"""
import os
import posixpath

import keras
import numpy as np
import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert import common
from bert_tf.convert.source import (Format, Source, beside, checkpoint_variables, parent,
                                    write_config_and_vocab)
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.models import ensure_built, find_encoder

# Head attribute of the task models -> TF1 scope of its output_weights/output_bias
# (None: the MLM head, mapped by name below).
HEADS = {"masked_lm": None, "next_sentence": "cls/seq_relationship/", "classifier": "",
         "span": "cls/squad/", "tagger": "cls/ner/"}


def _dense(layer):
    return layer.kernel, layer.bias


def _ln(layer):
    return layer.gamma, layer.beta


def _encoder_names(enc):
    names = {}
    e = enc.embeddings
    names["bert/embeddings/word_embeddings"] = e.word_embeddings
    names["bert/embeddings/token_type_embeddings"] = e.token_type_embeddings
    names["bert/embeddings/position_embeddings"] = e.position_embeddings
    g, b = _ln(e.layer_norm)
    names["bert/embeddings/LayerNorm/gamma"], names["bert/embeddings/LayerNorm/beta"] = g, b
    for i, block in enumerate(enc.transformer_layers):
        p = f"bert/encoder/layer_{i}/"
        parts = {"attention/self/query": block.attention.query,
                 "attention/self/key": block.attention.key,
                 "attention/self/value": block.attention.value,
                 "attention/output/dense": block.attention_output,
                 "intermediate/dense": block.intermediate,
                 "output/dense": block.output_dense}
        for scope, layer in parts.items():
            names[p + scope + "/kernel"], names[p + scope + "/bias"] = _dense(layer)
        for scope, layer in (("attention/output/LayerNorm", block.attention_layer_norm),
                             ("output/LayerNorm", block.output_layer_norm)):
            names[p + scope + "/gamma"], names[p + scope + "/beta"] = _ln(layer)
    names["bert/pooler/dense/kernel"], names["bert/pooler/dense/bias"] = _dense(enc.pooler)
    return {k: (v, False) for k, v in names.items()}


def _head_names(model):
    names = {}
    mlm = getattr(model, "masked_lm", None)
    if mlm is not None:
        k, b = _dense(mlm.transform)
        g, be = _ln(mlm.layer_norm)
        names.update({"cls/predictions/transform/dense/kernel": (k, False),
                      "cls/predictions/transform/dense/bias": (b, False),
                      "cls/predictions/transform/LayerNorm/gamma": (g, False),
                      "cls/predictions/transform/LayerNorm/beta": (be, False),
                      "cls/predictions/output_bias": (mlm.output_bias, False)})
    for attr, scope in HEADS.items():
        head = getattr(model, attr, None)
        if scope is None or head is None:
            continue
        k, b = _dense(head.dense)
        names[scope + "output_weights"] = (k, True)  # original stores [num_outputs, H]
        names[scope + "output_bias"] = (b, False)
    return names


def tf1_name_map(model):
    """{original TF1 variable name: (keras Variable, transpose)} for every variable of `model`.

    `transpose` is True where the original stores the matrix as [num_outputs, H] (our Dense
    kernels are [H, num_outputs]). The MLM output weights are the word embeddings (tied), so
    they have no entry of their own, as in the original.

    Args:
        model: a BertEncoder, a task model or a keras.Model with one BertEncoder (built here
            if it is ours and unbuilt).
    """
    ensure_built(model)
    names = _encoder_names(find_encoder(model))
    if not isinstance(model, BertEncoder):
        names.update(_head_names(model))
    return names


def is_tf1_checkpoint(path):
    """True if `path` (prefix or directory) is a checkpoint with the original `bert/...` names.

    Args:
        path: checkpoint prefix or directory.
    """
    try:
        prefix = common.resolve_prefix(path)
        names = [n for n, _ in tf.train.list_variables(prefix)]
    except (BertError, tf.errors.OpError, ValueError):
        return False
    return (any(n.startswith("bert/") for n in names)
            and "_CHECKPOINTABLE_OBJECT_GRAPH" not in names)


def load_tf1_checkpoint(model, path):
    """Loads an original BERT checkpoint into `model`; returns the report dict.

    Skips optimizer slots (`adam_m`, `adam_v`), `global_step` and names the model does not
    have; heads the file lacks keep their initialisation.

    Args:
        model: see the module docstring.
        path: `bert_model.ckpt` prefix or its directory.
    """
    prefix = common.resolve_prefix(path)
    reader = common.reader(prefix)
    shapes = reader.get_variable_to_shape_map()
    names = tf1_name_map(model)
    plan, loaded = [], []
    for name, (var, transpose) in names.items():
        if name in shapes:
            plan.append((name, var, transpose, reader.get_tensor(name)))
            loaded.append(name)
    skipped = [n for n in shapes if n not in names]
    if not loaded:
        raise BertError(f"{prefix}: no variable with the original BERT names (bert/...) found")
    missing = [n for n in names if n not in shapes]
    report = common.finish(prefix, model, loaded, skipped, missing,
                           common.layer_matcher(r"bert/encoder/layer_(\d+)/"))
    common.assign_all(prefix, plan, "checkpoint")
    return report


def save_tf1_checkpoint(model, path, global_step=None):
    """Writes `model` as an original-format checkpoint at prefix `path`; returns `path`.

    Names and shapes are exactly the original's (see `tf1_name_map`); float32. Written under a
    temporary prefix and renamed (data first, index last), so `path.index` only ever names a
    complete checkpoint.

    Args:
        model: see the module docstring; every weight must have an original name.
        path: checkpoint prefix (`.../bert_model.ckpt`).
        global_step: int, stored as int64 `global_step` if given.
    """
    path = os.fspath(path)
    if path.endswith(".index"):
        path = path[:-len(".index")]
    names = tf1_name_map(model)
    mapped = {id(v) for v, _ in names.values()}
    unmapped = [v.path for v in model.weights if id(v) not in mapped]
    if unmapped:  # never write a checkpoint that silently lacks some of the model
        raise BertError(f"{type(model).__name__}: no original BERT name for {', '.join(unmapped)}")
    tensors = {}
    for name, (var, transpose) in names.items():
        value = np.asarray(keras.ops.convert_to_numpy(var), dtype=np.float32)
        tensors[name] = value.T if transpose else value
    if global_step is not None:
        tensors["global_step"] = np.asarray(global_step, dtype=np.int64)
    order = sorted(tensors)
    parent = posixpath.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
    tmp = f"{path}.tmp-{os.getpid()}"
    with tf.device("CPU:0"):
        tf.raw_ops.SaveV2(prefix=tmp, tensor_names=order, shape_and_slices=[""] * len(order),
                          tensors=[tf.constant(tensors[n]) for n in order])
    # The index refers to shards by number, not by file name, so renaming is safe. An old index
    # goes first, so the name never pairs an old index with new data (or the reverse).
    if tf.io.gfile.exists(path + ".index"):
        tf.io.gfile.remove(path + ".index")
    for data in sorted(tf.io.gfile.glob(tmp + ".data-*")):
        tf.io.gfile.rename(data, path + data[len(tmp):], overwrite=True)
    tf.io.gfile.rename(tmp + ".index", path + ".index", overwrite=True)
    return path


def load_tf1_weights(model, weights, source):
    """Loads TF1-named arrays (as the peer converters read them) into `model`.

    Args:
        model: a BertEncoder, a task model or a keras.Model with one BertEncoder.
        weights: {TF1 name: array in the TF1 layout} (`bert_tf.convert.interop.get_weights`).
        source: the path, for messages.

    Returns:
        The report dict (see `bert_tf.convert.common`); names are TF1 names.
    """
    names = tf1_name_map(model)
    plan = [(n, var, transpose, weights[n]) for n, (var, transpose) in names.items()
            if n in weights]
    if not plan:
        raise BertError(f"{source}: no BERT encoder weights found")
    skipped = [n for n in weights if n not in names]
    missing = [n for n in names if n not in weights]
    report = common.finish(source, model, [p[0] for p in plan], skipped, missing,
                           common.layer_matcher(r"bert/encoder/layer_(\d+)/"))
    common.assign_all(source, plan, "file")
    return report


# ---- the format (bert_tf.convert.source) -----------------------------------------------------

def _detect(path):
    prefix, names = checkpoint_variables(path)
    if prefix and "_CHECKPOINTABLE_OBJECT_GRAPH" not in names \
            and any(n.startswith("bert/") for n in names):
        return prefix
    return None


def _read(prefix):
    directory = parent(prefix)
    return Source("tf1", prefix, directory, **beside(directory),
                  loader=lambda model: load_tf1_checkpoint(model, prefix),
                  has_mlm=lambda: "cls/predictions/output_bias" in checkpoint_variables(prefix)[1])


def _write(net, cfg, out, vocab_file, casing):
    tf.io.gfile.makedirs(out)
    save_tf1_checkpoint(net, posixpath.join(out, "bert_model.ckpt"))
    write_config_and_vocab(out, cfg, vocab_file, casing, "tf1")


FORMAT = Format("tf1", _detect, _read, _write, heads=True,
                looks_for="a checkpoint (.index + .data) with the original bert/... names")
