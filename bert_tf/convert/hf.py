"""Hugging Face BERT: read `model.safetensors` + `config.json`, and write a HF model directory.

Names follow `transformers`' BERT classes: `BertModel` (no prefix: `embeddings.*`,
`encoder.layer.{i}.*`, `pooler.*`), and `bert.`-prefixed for `BertForPreTraining`
(`cls.predictions.*`, `cls.seq_relationship.*`), `BertForSequenceClassification` and
`BertForTokenClassification` (`classifier.*`) and `BertForQuestionAnswering` (`qa_outputs.*`).
torch Linear weights are [out, in], so our Dense kernels are transposed. HF's "gelu" is the
exact erf form (our "gelu_exact"); the original's tanh GELU (our "gelu") is HF's "gelu_new".
"""
import json
import logging
import os
import posixpath
import re

import keras
import numpy as np
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.convert import common
from bert_tf.convert.source import Format, Source, file_in, parent, safe_relative
from bert_tf.convert.tf1 import tf1_name_map
from bert_tf.modeling import models as bm
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.models import find_encoder

log = logging.getLogger("bert_tf")
MAX_HEADER_BYTES = 100_000_000  # safetensors refuses a longer JSON header too

_TF1_HEAD_TO_HF = {"cls/seq_relationship/": "cls.seq_relationship.", "": "classifier.",
                   "cls/squad/": "qa_outputs.", "cls/ner/": "classifier."}
_MLM = {"cls/predictions/transform/dense/kernel": "cls.predictions.transform.dense.weight",
        "cls/predictions/transform/dense/bias": "cls.predictions.transform.dense.bias",
        "cls/predictions/transform/LayerNorm/gamma": "cls.predictions.transform.LayerNorm.weight",
        "cls/predictions/transform/LayerNorm/beta": "cls.predictions.transform.LayerNorm.bias",
        "cls/predictions/output_bias": "cls.predictions.bias"}
_HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                   "gelu_fast": "gelu", "relu": "relu", "tanh": "tanh", "silu": "swish",
                   "swish": "swish"}
_TO_HF_ACTIVATION = {"gelu": "gelu_new", "gelu_new": "gelu_new", "gelu_exact": "gelu",
                     "relu": "relu", "tanh": "tanh", "swish": "silu", "silu": "silu",
                     "linear": "linear"}
# Our task model -> transformers class, and whether that class has a pooler.
ARCHITECTURES = {bm.BertPretrainer: ("BertForPreTraining", True),
                 bm.BertClassifier: ("BertForSequenceClassification", True),
                 bm.BertSpanLabeler: ("BertForQuestionAnswering", False),
                 bm.BertTokenClassifier: ("BertForTokenClassification", False)}


def _hf_name(tf1):
    """(HF name without `bert.`, transpose) for a TF1 name."""
    if tf1.startswith("bert/"):
        hf = tf1[len("bert/"):]
        hf = re.sub(r"^encoder/layer_(\d+)/", r"encoder.layer.\1.", hf).replace("/", ".")
        hf = re.sub(r"\.(kernel|gamma|beta)$",
                    lambda m: {"kernel": ".weight", "gamma": ".weight", "beta": ".bias"}[m[1]], hf)
        if hf.startswith("embeddings.") and hf.endswith("_embeddings"):
            hf += ".weight"
        return hf, tf1.endswith("/kernel")
    if tf1 in _MLM:
        return _MLM[tf1], tf1.endswith("/kernel")
    for tf1_scope, hf_scope in _TF1_HEAD_TO_HF.items():
        rest = tf1[len(tf1_scope):]
        if tf1.startswith(tf1_scope) and rest in ("output_weights", "output_bias"):
            # torch stores [out, H] like TF1's output_weights; our kernel is [H, out].
            return hf_scope + ("weight" if rest == "output_weights" else "bias"), \
                rest == "output_weights"
    raise BertError(f"no Hugging Face name for {tf1}")


def hf_name_map(model):
    """{HF name without `bert.`: (variable, transpose, TF1 name)} for every variable of `model`.

    Args:
        model: a BertEncoder, a task model or a keras.Model with one BertEncoder.
    """
    return {hf: (var, transpose, tf1) for tf1, (var, _) in tf1_name_map(model).items()
            for hf, transpose in [_hf_name(tf1)]}


def _normalise(name):
    if name.startswith("bert."):
        name = name[len("bert."):]
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
    name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
    if name == "cls.predictions.decoder.bias":  # the same tensor as cls.predictions.bias
        name = "cls.predictions.bias"
    return name


def _weight_map(index):
    """{tensor name: shard file name} of a `model.safetensors.index.json` (checked types)."""
    weight_map = fileio.read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise BertError(f"{index}: 'weight_map' is not an object of tensor name -> file name")
    return weight_map


def _read_safetensors(path):
    from safetensors.numpy import load as st_load
    path = os.fspath(path)
    files = [path]
    if tf.io.gfile.isdir(path):
        index = posixpath.join(path, "model.safetensors.index.json")
        if tf.io.gfile.exists(index):
            shards = sorted(set(_weight_map(index).values()))
            files = [safe_relative(path, s, "shard") for s in shards]
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


def hf_tensor_names(path):
    """Normalised tensor names of a HF directory or `.safetensors` file, from the index or the
    files' headers only (no weights read)."""
    import struct
    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        index = posixpath.join(path, "model.safetensors.index.json")
        if tf.io.gfile.exists(index):
            return {_normalise(n) for n in _weight_map(index)}
        path = posixpath.join(path, "model.safetensors")
    try:
        length = tf.io.gfile.stat(path).length
        with tf.io.gfile.GFile(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            if size > length - 8:  # a corrupt header size: never ask GFile for that much
                raise ValueError(f"header size {size} beyond the file's {length} bytes")
            if size > MAX_HEADER_BYTES:  # safetensors' own limit
                raise ValueError(f"header of {size} bytes, over safetensors' "
                                 f"{MAX_HEADER_BYTES >> 20} MB limit")
            header = json.loads(f.read(size))
    except (tf.errors.OpError, struct.error, ValueError) as e:
        raise BertError(f"{path}: not a readable safetensors file ({e})") from None
    return {_normalise(n) for n in header if n != "__metadata__"}


def load_hf_safetensors(model, path):
    """Loads Hugging Face BERT weights into `model`; returns the report dict.

    Accepts names with or without the `bert.` prefix, old `LayerNorm.gamma/beta`, and the heads
    of the module docstring. `cls.predictions.decoder.weight` (tied) is skipped.

    Args:
        model: a BertEncoder, a task model or a keras.Model with one BertEncoder.
        path: a HF model directory (`model.safetensors` or a sharded index) or a file.
    """
    source, tensors = _read_safetensors(path)
    names = hf_name_map(model)
    order = {hf: i for i, hf in enumerate(names)}
    plan, loaded, skipped, found = [], [], [], set()
    # Canonical names first, so an alias (cls.predictions.decoder.bias) is the one skipped.
    is_alias = lambda n: _normalise(n) != (n[len("bert."):] if n.startswith("bert.") else n)
    for file_name in sorted(tensors, key=lambda n: (is_alias(n), n)):
        hf = _normalise(file_name)
        entry = names.get(hf)
        if entry is None or hf in found:
            skipped.append(file_name)
            continue
        var, transpose, _ = entry
        found.add(hf)
        plan.append((file_name, var, transpose, tensors[file_name]))
        loaded.append(file_name)
    plan.sort(key=lambda item: order[_normalise(item[0])])  # errors name the first in model order
    decoder = tensors.get("cls.predictions.decoder.weight")
    table = tensors.get("bert.embeddings.word_embeddings.weight",
                        tensors.get("embeddings.word_embeddings.weight"))
    if decoder is not None and table is not None and not np.array_equal(decoder, table):
        log.warning("%s: cls.predictions.decoder.weight differs from the word embeddings; BERT "
                    "ties them, so it is ignored", source)
    if not loaded:
        raise BertError(f"{source}: no BERT weights (embeddings.*, encoder.layer.*) found")
    missing = [tf1 for hf, (_, _, tf1) in names.items() if hf not in found]
    report = common.finish(source, model, loaded, skipped, missing,
                           common.layer_matcher(r"(?:bert\.)?encoder\.layer\.(\d+)\."))
    common.assign_all(source, plan, "file")
    return report


def bert_config_from_hf(config_json_path):
    """BertConfig from a Hugging Face `config.json`.

    Args:
        config_json_path: the file, or the model directory holding it.
    """
    path = os.fspath(config_json_path)
    if tf.io.gfile.isdir(path):
        path = posixpath.join(path, "config.json")
    data = fileio.read_json(path, "Hugging Face config.json not found")
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


def hf_config(model, labels=None):
    """The `config.json` dict of `model` as a transformers BERT class.

    Args:
        model: a BertEncoder (`BertModel`), a task model, or a keras.Model with one encoder.
        labels: optional label strings of a classifier / tagger (`id2label`).
    """
    cfg = find_encoder(model).bert_config
    arch = ARCHITECTURES.get(type(model), ("BertModel", True))[0]
    data = {"architectures": [arch], "model_type": "bert",
            **{k: v for k, v in cfg.to_dict().items() if k != "hidden_act"},
            "hidden_act": _TO_HF_ACTIVATION[cfg.hidden_act], "layer_norm_eps": 1e-12,
            "pad_token_id": 0, "position_embedding_type": "absolute", "use_cache": True,
            "classifier_dropout": None, "torch_dtype": "float32"}
    n = getattr(model, "num_classes", getattr(model, "num_labels", None))
    if n is not None:
        labels = [f"LABEL_{i}" for i in range(n)] if labels is None else [str(x) for x in labels]
        if len(labels) != n:
            raise BertError(f"labels: {len(labels)} given, the model has {n} outputs")
        data["id2label"] = {str(i): x for i, x in enumerate(labels)}
        data["label2id"] = {x: i for i, x in enumerate(labels)}
        if isinstance(model, bm.BertClassifier) and n == 1:
            data["problem_type"] = "regression"
    return dict(sorted(data.items()))


def hf_casing(model_dir):
    """(do_lower_case, strip_accents) from a HF directory's tokenizer_config.json (HF's
    BertTokenizer: strip_accents null = do_lower_case), else None when it records none."""
    path = posixpath.join(os.fspath(model_dir), "tokenizer_config.json")
    if not tf.io.gfile.exists(path):
        return None
    config = fileio.read_json(path)
    lower = fileio.json_bool(config, "do_lower_case", path, default=True)
    strip = fileio.json_bool(config, "strip_accents", path)
    return lower, lower if strip is None else strip


def save_hf_directory(model, out_dir, vocab_file, do_lower_case=True, labels=None,
                      overwrite=False, strip_accents=None):
    """Writes `model` as a Hugging Face BERT model directory, atomically; returns `out_dir`.

    Files: `model.safetensors` (HF names and [out, in] layouts, float32, `format: pt`),
    `config.json`, `vocab.txt`, `tokenizer_config.json` and `special_tokens_map.json`. The
    tied MLM decoder weight is not written (transformers re-ties it on load); span and tagging
    models have no pooler in HF, so theirs is left out.

    Args:
        model: a BertEncoder (-> `BertModel`), a task model, or a keras.Model with one encoder.
        out_dir: the directory to create (built under a temporary sibling, then renamed).
        vocab_file: the model's vocab.txt (`bert_tf.tokenization.check_vocab_size`).
        do_lower_case: bool, written to `tokenizer_config.json`.
        labels: optional label strings of a classifier / tagger.
        overwrite: replace an existing `out_dir`.
        strip_accents: None (HF: follow do_lower_case, as the original) or a bool.
    """
    from safetensors.numpy import save as st_save
    out_dir = os.fspath(out_dir).rstrip("/")
    if tf.io.gfile.exists(out_dir) and not overwrite:
        raise BertError(f"{out_dir}: already exists (pass overwrite=True to replace it)")
    config = hf_config(model, labels)
    from bert_tf.tokenization import check_vocab_size
    vocab = check_vocab_size(vocab_file, config["vocab_size"])
    prefix = "" if type(model) not in ARCHITECTURES else "bert."
    with_pooler = ARCHITECTURES.get(type(model), ("", True))[1]
    tensors = {}
    for hf, (var, transpose, _) in hf_name_map(model).items():
        if hf.startswith("pooler.") and not with_pooler:
            continue
        value = np.asarray(keras.ops.convert_to_numpy(var), dtype=np.float32)
        name = hf if hf.startswith(("cls.", "classifier.", "qa_outputs.")) else prefix + hf
        tensors[name] = np.ascontiguousarray(value.T if transpose else value)
    files = {
        "model.safetensors": st_save(tensors, metadata={"format": "pt"}),
        "config.json": json.dumps(config, indent=2) + "\n",
        "vocab.txt": "\n".join(vocab) + "\n",
        "tokenizer_config.json": json.dumps(
            {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(do_lower_case),
             "strip_accents": None if strip_accents is None else bool(strip_accents),
             "tokenize_chinese_chars": True,
             "model_max_length": config["max_position_embeddings"], "unk_token": "[UNK]",
             "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
             "mask_token": "[MASK]"}, indent=2) + "\n",
        "special_tokens_map.json": json.dumps(
            {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
             "cls_token": "[CLS]", "mask_token": "[MASK]"}, indent=2) + "\n",
    }
    with fileio.atomic_dir(out_dir) as tmp:
        for name, data in files.items():
            with tf.io.gfile.GFile(posixpath.join(tmp, name), "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return out_dir


# ---- the format (bert_tf.convert.source) -----------------------------------------------------

def _detect(path):
    if path.endswith(".safetensors"):
        return path
    if tf.io.gfile.isdir(path) and (file_in(path, "model.safetensors")
                                    or file_in(path, "model.safetensors.index.json")):
        return path
    return None


# Weights files HF folders may hold that bert_tf never reads: pickles (torch.load runs code),
# Keras 2 HDF5 and Flax. Only model.safetensors is data.
_NOT_READ = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5",
             "tf_model.h5.index.json", "flax_model.msgpack")


def _explain(path):
    """The refusal for a HF folder (or file) with weights only in a format bert_tf does not
    read, else None."""
    if not tf.io.gfile.exists(path):  # a typo: formats.detect says it is not there
        return None
    name = os.path.basename(path.rstrip("/"))
    found = ([name] if name in _NOT_READ or name.endswith((".bin", ".pt", ".pth", ".pkl"))
             else [n for n in _NOT_READ if tf.io.gfile.isdir(path) and file_in(path, n)])
    if not found:
        return None
    return (f"{path}: holds {found[0]} but no model.safetensors; bert_tf reads Hugging Face "
            f"weights from safetensors only (a .bin is a pickle: loading it runs code): save "
            f"the model with transformers' save_pretrained(dir, safe_serialization=True) and "
            f"pass that folder")


def _read(path):
    from bert_tf.convert import sentence_transformers as st
    directory = path if tf.io.gfile.isdir(path) else parent(path)
    config_file = file_in(directory, "config.json")  # none: bert_config_file= gives it
    src = Source("hf", path, directory,
                 bert_config_from_hf(config_file) if config_file else None,
                 file_in(directory, "vocab.txt"), hf_casing(directory),
                 config_file=config_file,
                 loader=lambda model: load_hf_safetensors(model, path),
                 has_mlm=lambda: "cls.predictions.bias" in hf_tensor_names(path),
                 pooling=lambda read_pooling=True: st.pooling(directory, read_pooling),
                 max_seq_length=st.max_seq_length(directory))
    src.config_hint = f"no config.json in {directory}"
    return src


def _write(net, cfg, out, vocab_file, casing):
    lower, strip = casing
    save_hf_directory(net, out, vocab_file, lower, strip_accents=None if strip == lower else strip)


def _config(path):
    """A config.json in HF's dialect (it names a model_type or architectures)."""
    data = fileio.read_json(path)
    return bert_config_from_hf(path) if isinstance(data, dict) and (
        "model_type" in data or "architectures" in data) else None


FORMAT = Format("hf", _detect, _read, _write, heads=True, needs_vocab=True, config=_config,
                explain=_explain,
                looks_for="model.safetensors (Hugging Face)")
