"""Any BERT checkpoint in one line: `bert_tf.from_pretrained(path, task=..., text_input=...)`.

`path` may be an original release directory (`bert_config.json`, `vocab.txt`,
`bert_model.ckpt.*`), a Hugging Face directory, a keras-hub preset, a Model Garden checkpoint,
a TF Hub or bert_tf SavedModel, or one of our training output directories
(`bert_tf.convert.detect` tells them apart). The config, vocab and casing come from the source:

  original / training / Model Garden   `bert_config.json` beside the checkpoint (training: else
                 the config of an export under `export/`; Model Garden: else the checkpoint's
                 shapes, with what `params.yaml`'s BERT encoder says over them), `vocab.txt`
                 beside it, casing as the original release named its models (`uncased_...`
                 lower-cases, `cased_...`/`multi_cased_...` not, others: the original's
                 default, True)
  Hugging Face   `config.json`, `vocab.txt`, `tokenizer_config.json` (`do_lower_case`,
                 `strip_accents`)
  keras-hub      the preset's config, `assets/tokenizer/vocabulary.txt`, `tokenizer.json`
                 (`lowercase`, `strip_accents`: keras-hub's `BertTokenizer(lowercase=True)`
                 lower-cases and keeps accents, and so does the text model built from it)
  SavedModels    the weights' shapes (TF Hub) or the export's metadata, its vocab asset and
                 `do_lower_case`

With `text_input=True` the model takes raw strings (`BertTextModel`: the in-graph tokenizer in
front), so `model.fit(list_of_strings, labels)` and `model.predict(strings)` work, as with
keras-hub's `BertTextClassifier.from_preset`, and `model.save("m.keras")` reloads after
`import bert_tf`.

>>> clf = bert_tf.from_pretrained("uncased_L-12_H-768_A-12", task="classification",
...                               num_classes=2, text_input=True)      # doctest: +SKIP
>>> clf.fit(["a fine film", "a dull film"], [1, 0])                    # doctest: +SKIP
"""
import dataclasses
import json
import os
import posixpath
import re

import bert_tf  # noqa: F401  (sets KERAS_BACKEND before keras is imported)
import keras
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.convert import checkpoints, detect
from bert_tf.modeling import models as bm
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.keras_data import KerasConventions
from bert_tf.tokenization.text_graph import BertPreprocessingLayer

TASKS = {None: BertEncoder, "pretraining": bm.BertPretrainer, "classification": bm.BertClassifier,
         "span": bm.BertSpanLabeler, "tagging": bm.BertTokenClassifier,
         "embeddings": bm.BertEmbedder}
_MG_ACTIVATIONS = {"gelu": "gelu", "exact_gelu": "gelu_exact", "relu": "relu", "tanh": "tanh",
                   "swish": "swish"}


@dataclasses.dataclass
class PretrainedSource:
    """What `read_pretrained` found.

    Attributes:
        detected: the `bert_tf.convert.detect.Detected` (format, weights path, directory).
        bert_config: the model's BertConfig.
        vocab_file: its vocab.txt, or None when the source has none.
        do_lower_case: the tokenizer's lower-casing.
        strip_accents: its accent stripping; differs from do_lower_case only for tokenizers
            the original has no flag for (some keras-hub / HF ones).
        weights: TF1-named arrays for the formats read that way, else None (loaded by
            `checkpoints.load_detected`).
        casing_from: where the casing came from: "source" (recorded in it), "name" (the
            original release's naming), "argument", or None (the original's default, True).
    """
    detected: detect.Detected
    bert_config: BertConfig
    vocab_file: str
    do_lower_case: bool
    strip_accents: bool
    weights: dict = None
    casing_from: str = None


def _file(directory, name):
    path = detect._join(directory, name)
    return path if tf.io.gfile.exists(path) else None


def casing_from_name(path):
    """do_lower_case from the model's name, as the original release named its checkpoints:
    True for `uncased_...`, False for `cased_...` / `multi_cased_...`, else None.

    Args:
        path: the checkpoint path; its last three components are looked at, deepest first
            (TF Hub handles end in a version number).
    """
    for part in reversed(re.split(r"[/\\]", path.rstrip("/\\"))[-3:]):
        name = part.lower()
        if "uncased" in name:
            return True
        if re.search(r"(^|[^a-z])cased", name):
            return False
    return None


def _export_metadata(directory):
    """(bert_config dict, export dir, metadata) of the newest bert_tf export under
    directory/export, or None: training writes no bert_config.json, its exports carry it."""
    found = []
    for pattern in ("export", "export/*", "export/*/*"):
        found += tf.io.gfile.glob(detect._join(directory, pattern, "assets.extra",
                                               "bert_tf_export.json"))
    for meta_file in sorted(found, key=lambda f: tf.io.gfile.stat(f).mtime_nsec, reverse=True):
        meta = fileio.read_json(meta_file)
        if "bert_config" in meta:
            return meta, posixpath.dirname(posixpath.dirname(meta_file))
    return None


def _model_garden_config(directory, inferred):
    """BertConfig from Model Garden's `params.yaml` (task.model.encoder.bert) over the one
    `inferred` from the checkpoint's shapes, or None without a params.yaml."""
    path = _file(directory, "params.yaml")
    if path is None:
        return None
    import yaml
    try:
        params = yaml.safe_load(fileio.read_text(path))
    except yaml.YAMLError as e:
        raise BertError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    node = params if isinstance(params, dict) else {}
    for key in ("task", "model", "encoder", "bert"):
        node = node.get(key, node) if isinstance(node, dict) else node
    if not isinstance(node, dict) or "hidden_size" not in node:
        raise BertError(f"{path}: no BERT encoder config (task.model.encoder.bert)")
    if node.get("embedding_size") not in (None, node["hidden_size"]) or node.get("norm_first"):
        raise BertError(f"{path}: embedding_size / norm_first encoders are not BERT's layout")
    act = node.get("hidden_activation", "gelu")
    if act not in _MG_ACTIVATIONS:
        raise BertError(f"{path}: hidden_activation {act!r} is not supported; expected one of "
                        f"{', '.join(_MG_ACTIVATIONS)}")
    fields = dict(vocab_size=node.get("vocab_size"), hidden_size=node["hidden_size"],
                  num_hidden_layers=node.get("num_layers"),
                  num_attention_heads=node.get("num_attention_heads"),
                  intermediate_size=node.get("intermediate_size"),
                  hidden_act=_MG_ACTIVATIONS[act], hidden_dropout_prob=node.get("dropout_rate"),
                  attention_probs_dropout_prob=node.get("attention_dropout_rate"),
                  max_position_embeddings=node.get("max_position_embeddings"),
                  type_vocab_size=node.get("type_vocab_size"),
                  initializer_range=node.get("initializer_range"))
    return BertConfig.from_dict({**inferred.to_dict(), **{
        k: v for k, v in fields.items() if v is not None}}, source=path)


def read_pretrained(path, bert_config_file=None, vocab_file=None, do_lower_case=None):
    """Detects the format of `path` and finds its config, vocab and casing.

    Args:
        path: see the module docstring.
        bert_config_file, vocab_file, do_lower_case: override what the source says (or give
            what it lacks, e.g. for a training directory without an export).

    Returns:
        A `PretrainedSource`.
    """
    det = detect.detect(path)
    d, cfg, vocab, casing, weights = det.directory, None, None, None, None
    if det.format in ("model_garden", "tfhub", "keras_hub", "bert_tf_export", "keras"):
        cfg, weights, vocab, casing = detect.read_weights(det)
    if det.format in ("tf1", "bert_tf", "model_garden") and _file(d, "bert_config.json"):
        cfg = BertConfig.from_json_file(_file(d, "bert_config.json"))
    elif det.format == "model_garden":
        cfg = _model_garden_config(d, cfg) or cfg
    elif det.format == "hf":
        from bert_tf.convert import hf
        cfg = hf.bert_config_from_hf(d)
        casing = hf.hf_casing(d)
    elif det.format == "bert_tf" and bert_config_file is None:
        found = _export_metadata(d)
        if found is None:
            raise BertError(f"{det.path}: a bert_tf training checkpoint with no bert_config.json "
                            f"beside it and no export under {d}/export: pass "
                            f"bert_config_file=... (and vocab_file=... for text input)")
        meta, export_dir = found
        cfg = BertConfig.from_dict(meta["bert_config"], source=export_dir)
        vocab, casing = detect.export_vocab(export_dir, meta)
    if bert_config_file is not None:
        cfg = BertConfig.from_json_file(os.fspath(bert_config_file))
    if cfg is None:
        raise BertError(f"{det.path}: no bert_config.json beside the checkpoint: pass "
                        f"bert_config_file=...")
    vocab = os.fspath(vocab_file) if vocab_file is not None else vocab or _file(d, "vocab.txt")
    if vocab is not None:  # before any weights are read
        from bert_tf.tokenization import check_vocab_size
        check_vocab_size(vocab, cfg.vocab_size, bert_config_file or det.path)
    casing_from = None if casing is None else "source"
    if do_lower_case is not None:
        casing, casing_from = (bool(do_lower_case), bool(do_lower_case)), "argument"
    if casing is None:
        lower = casing_from_name(det.path)
        casing_from = None if lower is None else "name"
        casing = (True, True) if lower is None else (lower, lower)  # the original's default
    return PretrainedSource(det, cfg, vocab, casing[0], casing[1], weights, casing_from)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTextModel(KerasConventions, keras.Model):
    """A task model (or encoder) with the in-graph tokenizer in front: strings in.

    Input: a string batch [B], or a tuple of two (sentence pairs: `[CLS] a [SEP] b [SEP]`).
    Output: the task model's `logits` tensor for classification / tagging (so `fit(texts,
    labels)` works as in keras-hub), the `embedding` tensor for embeddings, otherwise its
    output dict. `fit`, `evaluate`, `predict`, `validation_data` and direct calls take Python
    lists or arrays (a tuple of two lists for pairs; labels as lists or arrays), and
    `export(path)` writes the text-in TF Serving SavedModel
    (`bert_tf.export.keras_export.export_model`).

    Args:
        preprocessor: a `BertPreprocessingLayer` (vocab, casing, seq_length).
        model: a `BertEncoder` or `bert_tf.modeling.models` task model.
        **kwargs: `keras.Model` arguments.
    """

    _text_input = True

    def __init__(self, preprocessor, model, **kwargs):
        super().__init__(**kwargs)
        self.preprocessor = preprocessor
        self.model = model
        # Strings never go through XLA (Keras' jit_compile="auto" would try).
        self.supports_jit = preprocessor.supports_jit = False

    @property
    def encoder(self):
        """The BertEncoder inside."""
        return bm.find_encoder(self.model)

    def build(self, input_shape=None):
        bm.ensure_built(self.model)
        self.built = True

    def get_build_config(self):
        return {"input_shape": None}  # build() needs no shapes

    def call(self, inputs, training=None):
        texts = list(inputs) if isinstance(inputs, (list, tuple)) else inputs
        out = self.model(self.preprocessor(texts), training=training)
        if isinstance(self.model, (bm.BertClassifier, bm.BertTokenClassifier)):
            return out["logits"]
        if isinstance(self.model, bm.BertEmbedder):
            return out["embedding"]
        return out

    def get_config(self):
        return {"preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
                "model": keras.saving.serialize_keras_object(self.model),
                "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("preprocessor", "model"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


# sentence-transformers' Pooling modes bert_tf has (the pooler is BERT's, "cls").
_ST_POOLING = {"pooling_mode_cls_token": "cls_token", "pooling_mode_mean_tokens": "mean"}
_ST_OTHER = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
             "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


def sentence_transformers_pooling(directory, read_pooling=True):
    """(pooling, normalize) a sentence-transformers model declares, else (None, False).

    Reads `modules.json` (the Pooling module's folder, and normalize when it lists a
    `sentence_transformers.models.Normalize`) and the Pooling folder's `config.json`
    (`pooling_mode_cls_token` -> "cls_token", the [CLS] vector without BERT's pooler, as
    sentence-transformers pools; `pooling_mode_mean_tokens` -> "mean"). The model's own
    folder is looked at, then its parent (models whose transformer is in `0_Transformer/`).

    Args:
        directory: the checkpoint's directory (None: nothing to read).
        read_pooling: False skips the Pooling config (pooling given explicitly).
    """
    if not directory:
        return None, False
    here = directory.rstrip("/\\")
    for d in filter(None, (here, posixpath.dirname(here))):
        modules_file, folder, normalize = _file(d, "modules.json"), "1_Pooling", False
        modules = _st_modules(modules_file) if modules_file else []
        if d != here and posixpath.basename(here) not in [
                m.get("path") for m in modules if str(m.get("type")).endswith(".Transformer")]:
            break  # the parent is not this model's sentence-transformers folder
        if modules_file:
            for m in modules:
                kind = str(m.get("type", ""))
                if kind.endswith(".Pooling") and m.get("path"):
                    folder = m["path"]
                normalize = normalize or kind.endswith(".Normalize")
        config_file = _file(d, f"{folder}/config.json") if read_pooling else None
        if config_file is None:
            if modules_file:
                return None, normalize
            continue
        conf = fileio.read_json(config_file)
        modes = [k for k in (*_ST_POOLING, *_ST_OTHER) if isinstance(conf, dict) and conf.get(k)]
        if len(modes) != 1 or modes[0] not in _ST_POOLING:
            raise BertError(f"{config_file}: pooling {' + '.join(modes) or '(none)'} is not "
                            f"supported (bert_tf pools with {' or '.join(_ST_POOLING)}; pass "
                            f"pooling=... to choose)")
        return _ST_POOLING[modes[0]], normalize
    return None, False


def _st_modules(path):
    try:
        modules = json.loads(fileio.read_text(path))
    except ValueError:
        modules = None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BertError(f"{path}: expected a list of modules")
    return modules


def _task_model(task, cfg, num_classes, pooling=None, normalize=False):
    if task != "embeddings" and (pooling is not None or normalize):
        raise BertError(f"pooling / normalize are only for task='embeddings', not task={task!r}")
    if task == "embeddings":
        if num_classes is not None:
            raise BertError("num_classes is only for task='classification' or 'tagging', not "
                            "task='embeddings'")
        return bm.BertEmbedder.from_bert_config(cfg, pooling=pooling or "cls",
                                                normalize=normalize)
    if task not in TASKS:
        raise BertError(f"task={task!r}: expected one of "
                        f"{', '.join(repr(t) for t in TASKS)}")
    if task in ("classification", "tagging"):
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise BertError(f"task={task!r} needs num_classes (a positive int), got "
                            f"{num_classes!r}")
        return TASKS[task].from_bert_config(cfg, num_classes)
    if num_classes is not None:
        raise BertError(f"num_classes is only for task='classification' or 'tagging', not "
                        f"task={task!r}")
    if task is None:
        return BertEncoder.from_bert_config(cfg, name="encoder")
    return TASKS[task].from_bert_config(cfg)


def from_pretrained(path, task=None, num_classes=None, text_input=False, seq_length=128, *,
                    bert_config_file=None, vocab_file=None, do_lower_case=None, pooling=None,
                    normalize=None):
    """A built Keras model holding the weights of any BERT checkpoint bert_tf reads.

    Args:
        path: an original release directory or checkpoint prefix, a Hugging Face directory, a
            keras-hub preset, a Model Garden checkpoint (directory or prefix), a TF Hub or
            bert_tf SavedModel, or one of our training output directories.
        task: None (the BertEncoder), "pretraining" (BertPretrainer), "classification"
            (BertClassifier), "span" (BertSpanLabeler), "tagging" (BertTokenClassifier) or
            "embeddings" (BertEmbedder: one vector per input, pooled and normalised as a
            sentence-transformers directory's `1_Pooling/config.json` and `modules.json`
            say, else BERT's pooler output). Heads the checkpoint lacks keep their
            initialisation (logged).
        num_classes: int, for "classification" and "tagging".
        text_input: put the in-graph tokenizer in front (`BertTextModel`); classification
            and tagging models come compiled as keras-hub's (Adam 5e-5, sparse categorical
            cross-entropy on the logits, accuracy).
        seq_length: int, what text input is packed (and truncated) to.
        bert_config_file, vocab_file, do_lower_case: keyword-only overrides (see
            `read_pretrained`).
        pooling: task="embeddings": "cls" (the pooler), "cls_token" (the [CLS] vector) or
            "mean" (masked mean); overrides the source's sentence-transformers config.
        normalize: task="embeddings": L2-normalise (overrides the source's).

    Returns:
        The model (the encoder or task model, or a `BertTextModel` with text_input).

    Raises:
        BertError: one line: unknown format (listing what was looked for), a missing config or
            vocab, a bad task / num_classes, a config that does not fit the weights.
    """
    src = read_pretrained(path, bert_config_file, vocab_file, do_lower_case)
    if task == "embeddings":
        st_pooling, st_normalize = sentence_transformers_pooling(src.detected.directory,
                                                                 read_pooling=pooling is None)
        pooling = pooling or st_pooling
        normalize = st_normalize if normalize is None else bool(normalize)
    model = _task_model(task, src.bert_config, num_classes, pooling, normalize)
    bm.build_model(model)
    # An embedder's only weights are its encoder's.
    target = model.encoder if isinstance(model, bm.BertEmbedder) else model
    if src.weights is not None:
        checkpoints.load_tf1_weights(target, src.weights, src.detected.path)
    else:
        checkpoints.load_detected(target, src.detected)
    if not text_input:
        return model
    return text_model(model, src, seq_length)


def text_model(model, source, seq_length=128):
    """`BertTextModel` around `model` with `source`'s vocab and casing.

    Args:
        model: the built encoder or task model.
        source: a `PretrainedSource`.
        seq_length: int, the packed length.
    """
    where = source.detected.path
    if source.vocab_file is None:
        raise BertError(f"{where}: no vocab found with the checkpoint: pass vocab_file=...")
    cfg = source.bert_config
    if not 3 <= int(seq_length) <= cfg.max_position_embeddings:
        raise BertError(f"seq_length={seq_length}: must be in [3, max_position_embeddings="
                        f"{cfg.max_position_embeddings}]")
    pre = BertPreprocessingLayer(source.vocab_file, source.do_lower_case, int(seq_length),
                                 strip_accents=source.strip_accents, name="preprocessor")
    from bert_tf.tokenization.vocab_check import check_vocab_count
    check_vocab_count(len(pre.vocabulary), cfg.vocab_size, source.vocab_file, where)
    out = BertTextModel(pre, model, name=f"{model.name}_text")
    out.build()
    if isinstance(model, (bm.BertClassifier, bm.BertTokenClassifier)):
        out.compile(optimizer=keras.optimizers.Adam(5e-5),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return out
