"""Checkpoints: the original TF1 BERT release, our own tf.train.Checkpoint files, HF safetensors.

`model` is a BertEncoder, any `bert_tf.modeling.models` model, or a keras.Model that contains exactly one
BertEncoder layer (e.g. `build_encoder_model`). Unbuilt models are built first.

Original (TF1) names, as in `bert_model.ckpt` of the release (see REFERENCE.md):
  bert/embeddings/..., bert/encoder/layer_{i}/..., bert/pooler/dense/{kernel,bias}
  BertPretrainer      cls/predictions/transform/dense, cls/predictions/transform/LayerNorm,
                      cls/predictions/output_bias (output weights tied to the word embeddings),
                      cls/seq_relationship/output_{weights,bias}   weights [2, H] (transposed)
  BertClassifier      output_weights [num_classes, H] (transposed), output_bias   (run_classifier)
  BertSpanLabeler     cls/squad/output_weights [2, H] (transposed), cls/squad/output_bias (run_squad)
  BertTokenClassifier cls/ner/output_weights [num_labels, H] (transposed), cls/ner/output_bias
                      (the original has no tagger; this name is ours)

Our own checkpoints are what `tf.train.Checkpoint(model=model)` writes (object key `model`;
other keys such as `optimizer` or `step` may sit beside it and are ignored here). Encoder
variables are found wherever the encoder sits in that object graph, so a checkpoint of a
BertPretrainer loads into a BertClassifier (its head is then reported missing).

Every loader checks all shapes before assigning anything and returns a report
`{"loaded": [...], "skipped": [...], "missing": [...]}` (names as in the file for loaded/skipped,
TF1-style names of model variables the file lacks for missing). Missing heads keep their
initialisation (logged); missing encoder variables are an error (wrong checkpoint).
"""
import collections
import json
import logging
import os
import posixpath
import re

import keras
import numpy as np
import tensorflow as tf

from bert_tf import BertError
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder

log = logging.getLogger("bert_tf")



# ----------------------------------------------------------------------------------------------
# Model structure


def _encoder_of(model):
    if isinstance(model, BertEncoder):
        return model
    enc = getattr(model, "encoder", None)
    if isinstance(enc, BertEncoder):
        return enc
    found = [l for l in getattr(model, "layers", []) if isinstance(l, BertEncoder)]
    if len(found) != 1:
        raise BertError(f"{type(model).__name__}: expected a BertEncoder or a model with exactly "
                        f"one BertEncoder, found {len(found)}")
    return found[0]


def _ensure_built(model):
    if model.built:
        return
    from bert_tf.modeling.models import _BertModel
    if not isinstance(model, (BertEncoder, _BertModel)):
        raise BertError(f"{type(model).__name__}: build the model before loading weights into it")
    model.build()  # ours need no input shapes


def _dense(layer):
    return layer.kernel, layer.bias


def _ln(layer):
    return layer.gamma, layer.beta


# Head attribute on bert_tf.modeling.models classes -> TF1 scope of its output_weights/output_bias
# (None: the MLM head, mapped by name below).
_HEADS = {"masked_lm": None, "next_sentence": "cls/seq_relationship/", "classifier": "",
          "span": "cls/squad/", "tagger": "cls/ner/"}


def _encoder_tf1_names(enc):
    """TF1 name -> (variable, transpose) for the encoder (embeddings, blocks, pooler)."""
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


def _head_tf1_names(model):
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
    for attr, scope in _HEADS.items():
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
    """
    _ensure_built(model)
    names = _encoder_tf1_names(_encoder_of(model))
    if not isinstance(model, BertEncoder):
        names.update(_head_tf1_names(model))
    return names


def _is_encoder_name(name):
    return name.startswith("bert/") and not name.startswith("bert/pooler/")


# ----------------------------------------------------------------------------------------------
# Shared loading logic


def _resolve_prefix(path):
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            indexes = sorted(tf.io.gfile.glob(posixpath.join(path, "*.index")))
            if len(indexes) != 1:
                raise BertError(f"{path}: no checkpoint found in this directory"
                                if not indexes else
                                f"{path}: {len(indexes)} checkpoints in this directory; "
                                f"pass the prefix of one")
            latest = indexes[0][:-len(".index")]
        return latest
    if path.endswith(".index"):
        path = path[:-len(".index")]
    if not tf.io.gfile.exists(path + ".index"):
        raise BertError(f"{path}: checkpoint not found (no {posixpath.basename(path)}.index)")
    return path


def _reader(prefix):
    try:
        return tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BertError(f"{prefix}: cannot read checkpoint ({msg})") from None


def _assign_all(source, plan, where):
    """plan: list of (file name, variable, transpose, array). Shapes are checked first."""
    for name, var, transpose, value in plan:
        shape = tuple(value.shape[::-1] if transpose else value.shape)
        if shape != tuple(var.shape):
            file_shape = list(value.shape)
            model_shape = list(var.shape[::-1] if transpose else var.shape)
            raise BertError(f"{source}: {name} has shape {file_shape} in the {where} but "
                            f"{model_shape} in the model (wrong bert_config for this checkpoint?)")
    for name, var, transpose, value in plan:
        value = np.asarray(value)
        if transpose:
            value = value.T
        var.assign(value.astype(var.dtype, copy=False))


def _finish(source, model, loaded, skipped, missing_tf1, layer_of):
    """Raise for a config/file mismatch or a missing encoder, log missing heads, make the report.

    `layer_of(file name)` -> encoder layer index of a file variable, or None.
    """
    n_layers = _encoder_of(model).bert_config.num_hidden_layers
    extra = [i for n in skipped for i in [layer_of(n)] if i is not None and i >= n_layers]
    if extra:
        raise BertError(f"{source}: the file has encoder layer {max(extra)} but the model only "
                        f"{n_layers} layers (wrong num_hidden_layers?)")
    missing_encoder = [n for n in missing_tf1 if _is_encoder_name(n)]
    if missing_encoder:
        raise BertError(f"{source}: {len(missing_encoder)} encoder variables of the model are not "
                        f"in the file, e.g. {missing_encoder[0]} (not a BERT checkpoint for this "
                        f"config?)")
    if missing_tf1:
        log.warning("%s: not in the file, left at initialisation: %s", source,
                    ", ".join(missing_tf1))
    return {"loaded": sorted(loaded), "skipped": sorted(skipped), "missing": sorted(missing_tf1)}


def _layer_matcher(pattern):
    regex = re.compile(pattern)

    def layer_of(name):
        m = regex.match(name)
        return int(m.group(1)) if m else None
    return layer_of


# ----------------------------------------------------------------------------------------------
# Original TF1 checkpoints


def is_tf1_checkpoint(path):
    """True if `path` (prefix or directory) is a checkpoint with the original `bert/...` names."""
    try:
        prefix = _resolve_prefix(path)
        names = [n for n, _ in tf.train.list_variables(prefix)]
    except (BertError, tf.errors.OpError, ValueError):
        return False
    return (any(n.startswith("bert/") for n in names)
            and "_CHECKPOINTABLE_OBJECT_GRAPH" not in names)


def load_tf1_checkpoint(model, path):
    """Load an original BERT checkpoint (`bert_model.ckpt` prefix or its directory) into `model`.

    Skips optimizer slots (`adam_m`, `adam_v`), `global_step` and names the model does not have;
    heads the file lacks keep their initialisation. Returns the report dict.
    """
    prefix = _resolve_prefix(path)
    reader = _reader(prefix)
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
    report = _finish(prefix, model, loaded, skipped, missing,
                     _layer_matcher(r"bert/encoder/layer_(\d+)/"))
    _assign_all(prefix, plan, "checkpoint")
    return report


def save_tf1_checkpoint(model, path, global_step=None):
    """Write `model` as an original-format checkpoint at prefix `path` (`path.index`, `.data-*`).

    Names and shapes are exactly the original's (see `tf1_name_map`); float32. Written under a
    temporary prefix and renamed (data first, index last), so `path.index` only ever names a
    complete checkpoint. `global_step` (int) is stored as int64 `global_step` if given.
    Returns `path`.
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


# ----------------------------------------------------------------------------------------------
# Our checkpoints (tf.train.Checkpoint(model=...))


def _variable_paths(root):
    """{id(variable): tuple of attribute names from `root`} over the trackable object graph."""
    view = tf.train.TrackableView(root)
    paths, seen = {}, {id(root)}
    queue = collections.deque([(root, ())])
    while queue:
        obj, prefix = queue.popleft()
        for name, child in view.children(obj).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            if isinstance(child, (keras.Variable, tf.Variable)):
                paths[id(child)] = prefix + (name,)
            else:
                queue.append((child, prefix + (name,)))
    return paths


class _ObjectGraph:
    """The object graph a tf.train.Checkpoint stores; lets us follow attribute paths to keys.

    Keys cannot be derived from paths alone: TF names each variable by its *shortest* path,
    which may run through the optimizer (`optimizer/_trainable_variables/3/...`).
    """

    def __init__(self, reader, prefix):
        from tensorflow.core.protobuf import trackable_object_graph_pb2
        if not reader.has_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"):
            raise BertError(f"{prefix}: neither an original BERT checkpoint (bert/... names) nor "
                            f"one written by tf.train.Checkpoint")
        self.proto = trackable_object_graph_pb2.TrackableObjectGraph()
        self.proto.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))

    def children(self, node):
        return {ref.local_name: ref.node_id for ref in self.proto.nodes[node].children}

    def find(self, node, path):
        for name in path:
            node = self.children(node).get(name)
            if node is None:
                return None
        return node

    def variable_key(self, node):
        for attr in self.proto.nodes[node].attributes:
            if attr.name == "VARIABLE_VALUE":
                return attr.checkpoint_key
        return None

    def variables_under(self, node, path):
        """{node id: path} of every variable reachable from `node` (shortest paths)."""
        found, seen = {}, {node}
        queue = collections.deque([(node, path)])
        while queue:
            node, path = queue.popleft()
            if self.variable_key(node) is not None:
                found[node] = path
            for name, child in self.children(node).items():
                if child not in seen:
                    seen.add(child)
                    queue.append((child, path + (name,)))
        return found


def _load_ours(model, prefix, reader):
    graph = _ObjectGraph(reader, prefix)
    enc = _encoder_of(model)
    # Where the encoder sits: a full model saved as `model`, an encoder saved as `model`, or
    # Model Garden's `encoder` key.
    enc_path = next((p for p in (("model", "encoder"), ("model",), ("encoder",))
                     if graph.find(0, p + ("embeddings", "word_embeddings")) is not None), None)
    if enc_path is None:
        raise BertError(f"{prefix}: no BERT encoder under the object key 'model' (not written by "
                        f"tf.train.Checkpoint(model=...)?)")
    enc_paths = _variable_paths(enc)
    model_paths = {} if model is enc else _variable_paths(model)
    plan, loaded, missing, used = [], [], [], set()
    enc_ids = {id(v) for v in enc.weights}
    for tf1_name, (var, _) in tf1_name_map(model).items():
        path = (enc_path + enc_paths[id(var)] if id(var) in enc_ids
                else ("model",) + model_paths[id(var)])
        node = graph.find(0, path)
        key = None if node is None else graph.variable_key(node)
        if key is None:
            missing.append(tf1_name)
            continue
        plan.append(("/".join(path), var, False, reader.get_tensor(key)))
        loaded.append("/".join(path))
        used.add(node)
    # Unused variables of the saved model (e.g. a pre-training head); optimizer etc. are ignored.
    scope = ("model",) if graph.find(0, ("model",)) is not None else enc_path
    skipped = ["/".join(p) for node, p in graph.variables_under(graph.find(0, scope), scope).items()
               if node not in used]
    report = _finish(prefix, model, loaded, skipped, missing,
                     _layer_matcher(re.escape("/".join(enc_path)) + r"/layer_(\d+)/"))
    _assign_all(prefix, plan, "checkpoint")
    return report


def load_checkpoint(model, path):
    """Load an original TF1 checkpoint or one of ours (`tf.train.Checkpoint(model=...)`).

    `path`: a checkpoint prefix or a directory (its latest checkpoint). Returns the report dict.
    """
    prefix = _resolve_prefix(path)
    if is_tf1_checkpoint(prefix):
        return load_tf1_checkpoint(model, prefix)
    _ensure_built(model)
    return _load_ours(model, prefix, _reader(prefix))


# ----------------------------------------------------------------------------------------------
# Hugging Face


def _hf_name_map(model):
    """HF name (without `bert.`) -> (variable, transpose, TF1 name), derived from the TF1 map."""
    names = {}
    for tf1, (var, _) in tf1_name_map(model).items():
        hf, transpose = None, False
        if tf1.startswith("bert/"):
            hf = tf1[len("bert/"):]
            hf = re.sub(r"^encoder/layer_(\d+)/", r"encoder.layer.\1.", hf)
            hf = hf.replace("/", ".")
            hf = re.sub(r"\.(kernel|gamma|beta)$",
                        lambda m: {"kernel": ".weight", "gamma": ".weight", "beta": ".bias"}[m.group(1)],
                        hf)
            if hf.startswith("embeddings.") and hf.endswith("_embeddings"):
                hf += ".weight"
            transpose = tf1.endswith("/kernel")  # torch Linear stores [out, in]
        elif tf1.startswith("cls/predictions/"):
            hf = {"cls/predictions/transform/dense/kernel": "cls.predictions.transform.dense.weight",
                  "cls/predictions/transform/dense/bias": "cls.predictions.transform.dense.bias",
                  "cls/predictions/transform/LayerNorm/gamma":
                      "cls.predictions.transform.LayerNorm.weight",
                  "cls/predictions/transform/LayerNorm/beta":
                      "cls.predictions.transform.LayerNorm.bias",
                  "cls/predictions/output_bias": "cls.predictions.bias"}[tf1]
            transpose = tf1.endswith("/kernel")
        else:
            # Dense heads: torch stores [out, H] like TF1's output_weights; our kernel is [H, out].
            scope = {"cls/seq_relationship/": "cls.seq_relationship.", "": "classifier.",
                     "cls/squad/": "qa_outputs.", "cls/ner/": "classifier."}
            for tf1_scope, hf_scope in scope.items():
                rest = tf1[len(tf1_scope):]
                if tf1.startswith(tf1_scope) and rest in ("output_weights", "output_bias"):
                    hf = hf_scope + ("weight" if rest == "output_weights" else "bias")
                    transpose = rest == "output_weights"
                    break
        names[hf] = (var, transpose, tf1)
    return names


def _normalise_hf(name):
    if name.startswith("bert."):
        name = name[len("bert."):]
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
    name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
    if name == "cls.predictions.decoder.bias":  # the same tensor as cls.predictions.bias
        name = "cls.predictions.bias"
    return name


def _read_safetensors(path):
    from safetensors.numpy import load as st_load
    path = os.fspath(path)
    files = [path]
    if tf.io.gfile.isdir(path):
        index = posixpath.join(path, "model.safetensors.index.json")
        if tf.io.gfile.exists(index):
            with tf.io.gfile.GFile(index, "r") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            files = [posixpath.join(path, s) for s in shards]
        else:
            files = [posixpath.join(path, "model.safetensors")]
    tensors = {}
    for file in files:
        if not tf.io.gfile.exists(file):
            raise BertError(f"{file}: safetensors file not found")
        with tf.io.gfile.GFile(file, "rb") as f:
            data = f.read()
        try:
            tensors.update(st_load(data))
        except Exception as e:  # safetensors raises its own error types
            raise BertError(f"{file}: not a readable safetensors file ({e})") from None
    return files[0] if len(files) == 1 else path, tensors


def load_hf_safetensors(model, path):
    """Load Hugging Face BERT weights (`model.safetensors`, a sharded directory, or a file).

    Accepts names with or without the `bert.` prefix, old `LayerNorm.gamma/beta`, and the heads
    `cls.predictions.*` / `cls.seq_relationship.*` (BertForPreTraining), `classifier.*`
    (sequence or token classification) and `qa_outputs.*` (question answering). torch Linear
    weights [out, in] are transposed. `cls.predictions.decoder.weight` (tied) is skipped.
    Returns the report dict (file names for loaded/skipped, TF1-style names for missing).
    """
    source, tensors = _read_safetensors(path)
    names = _hf_name_map(model)
    order = {hf: i for i, hf in enumerate(names)}
    plan, loaded, skipped, found = [], [], [], set()
    # Canonical names first, so an alias (cls.predictions.decoder.bias) is the one skipped.
    is_alias = lambda n: _normalise_hf(n) != (n[len("bert."):] if n.startswith("bert.") else n)
    for file_name in sorted(tensors, key=lambda n: (is_alias(n), n)):
        hf = _normalise_hf(file_name)
        entry = names.get(hf)
        if entry is None or hf in found:
            skipped.append(file_name)
            continue
        var, transpose, _ = entry
        found.add(hf)
        plan.append((file_name, var, transpose, tensors[file_name]))
        loaded.append(file_name)
    plan.sort(key=lambda item: order[_normalise_hf(item[0])])  # errors name the first in model order
    decoder = tensors.get("cls.predictions.decoder.weight")
    table = tensors.get("bert.embeddings.word_embeddings.weight",
                        tensors.get("embeddings.word_embeddings.weight"))
    if decoder is not None and table is not None and not np.array_equal(decoder, table):
        log.warning("%s: cls.predictions.decoder.weight differs from the word embeddings; BERT "
                    "ties them, so it is ignored", source)
    if not loaded:
        raise BertError(f"{source}: no BERT weights (embeddings.*, encoder.layer.*) found")
    missing = [tf1 for hf, (_, _, tf1) in names.items() if hf not in found]
    report = _finish(source, model, loaded, skipped, missing,
                     _layer_matcher(r"(?:bert\.)?encoder\.layer\.(\d+)\."))
    _assign_all(source, plan, "file")
    return report


_HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                   "gelu_fast": "gelu", "relu": "relu", "tanh": "tanh", "silu": "swish",
                   "swish": "swish"}


def bert_config_from_hf(config_json_path):
    """BertConfig from a Hugging Face `config.json` (file or the directory holding it).

    HF's "gelu" is the exact erf form -> our "gelu_exact"; "gelu_new" (tanh) -> our "gelu".
    """
    path = os.fspath(config_json_path)
    if tf.io.gfile.isdir(path):
        path = posixpath.join(path, "config.json")
    if not tf.io.gfile.exists(path):
        raise BertError(f"{path}: Hugging Face config.json not found")
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            data = json.loads(f.read())
    except json.JSONDecodeError as e:
        raise BertError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise BertError(f"{path}: expected a JSON object")
    if data.get("model_type", "bert") != "bert":
        raise BertError(f"{path}: model_type {data['model_type']!r} is not 'bert'")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise BertError(f"{path}: position_embedding_type "
                        f"{data['position_embedding_type']!r} is not supported (only 'absolute')")
    eps = data.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or abs(eps - 1e-12) > 1e-15:
        raise BertError(f"{path}: layer_norm_eps {eps!r} is not supported (BERT uses 1e-12)")
    act = data.get("hidden_act", "gelu")
    if act not in _HF_ACTIVATIONS:
        raise BertError(f"{path}: hidden_act {act!r} is not supported; expected one of "
                        f"{', '.join(_HF_ACTIVATIONS)}")
    fields = {k: data[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                   "num_attention_heads", "intermediate_size",
                                   "hidden_dropout_prob", "attention_probs_dropout_prob",
                                   "max_position_embeddings", "type_vocab_size",
                                   "initializer_range") if k in data}
    fields["hidden_act"] = _HF_ACTIVATIONS[act]
    return BertConfig.from_dict(fields, source=path)
