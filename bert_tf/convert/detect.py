"""Which BERT format a path holds, and its weights as TF1-named arrays where that is the route.

Shared by `checkpoints.load_checkpoint` (so `--init_checkpoint` of every script) and
`bert_tf.from_pretrained`. Formats (`Detected.format`):

  tf1             original release checkpoint (`bert/...` names), e.g. `bert_model.ckpt`
  bert_tf         our training checkpoints (`tf.train.Checkpoint(model=...)`)
  model_garden    Model Garden `Checkpoint(encoder=BertEncoder)` / BertPretrainerV2 checkpoints
  hf              Hugging Face directory (`model.safetensors` or its index) or `.safetensors` file
  keras_hub       keras-hub preset directory (`config.json` + `model.weights.h5`)
  tfhub           TF Hub BERT encoder SavedModel (Model Garden's export_tfhub_lib)
  bert_tf_export  our encoder / end-to-end SavedModel (`assets.extra/bert_tf_export.json`),
                  also as `bert-convert --to=savedmodel` writes it (a directory holding
                  `encoder/` + `preprocessor/`: the vocab and casing come from the latter) and
                  in the TF Serving layout (`<model>/<version>/`: the newest version)
  keras           a `.keras` file of any bert_tf model (`model.save`); a BertTextModel's
                  preprocessing layer supplies the vocab and casing

The first three are checkpoint prefixes (a directory means its latest checkpoint), told apart by
their variable names and object graph; the others by the files in the directory.
"""
import dataclasses
import os
import posixpath

import tensorflow as tf

from bert_tf import BertError
from bert_tf.convert import common

CHECKPOINT_FORMATS = ("tf1", "bert_tf", "model_garden")
LOOKED_FOR = ("a checkpoint (.index + .data: original bert/... names, bert_tf's model key or "
              "Model Garden's encoder key), model.safetensors, config.json + model.weights.h5 "
              "(keras-hub preset), saved_model.pb (TF Hub / bert_tf export, also under "
              "encoder/ or a numbered version folder), or pass a .keras file")


@dataclasses.dataclass(frozen=True)
class Detected:
    """Where a BERT model lives.

    Attributes:
        format: one of the module docstring's formats.
        path: what the loader reads: checkpoint prefix, HF directory or file, or directory.
        directory: the directory of config / vocab files that may come with it.
    """
    format: str
    path: str
    directory: str


def _join(*parts):
    return posixpath.join(*parts) if "://" in parts[0] else os.path.join(*parts)


def _exists(directory, name):
    return tf.io.gfile.exists(_join(directory, name))


def _prefix_format(prefix):
    from bert_tf.convert import model_garden, native
    names = dict(tf.train.list_variables(prefix))
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in names:
        if any(n.startswith("bert/") for n in names):
            return "tf1"
        raise BertError(f"{prefix}: a checkpoint without BERT variables (no bert/... names "
                        f"and no object graph)")
    if native.is_bert_tf_checkpoint(prefix):
        return "bert_tf"
    if model_garden.is_model_garden_checkpoint(prefix):
        return "model_garden"
    raise BertError(f"{prefix}: a tf.train.Checkpoint with no BERT encoder under bert_tf's "
                    f"object keys (model, model/encoder) or Model Garden's (encoder, "
                    f"model/encoder_network)")


def detect(path):
    """The format of `path` (see the module docstring).

    Args:
        path: a checkpoint prefix, `.index` file, `.safetensors` file or a directory
            (str or PathLike; gs:// works).

    Returns:
        A `Detected`.

    Raises:
        BertError: one line naming the path and what was looked for.
    """
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        return Detected("hf", path, posixpath.dirname(path) or ".")
    if path.endswith(".keras") and not tf.io.gfile.isdir(path):
        if not tf.io.gfile.exists(path):
            raise BertError(f"{path}: file not found")
        return Detected("keras", path, posixpath.dirname(path) or ".")
    if tf.io.gfile.isdir(path):
        inner = _export_inside(path)
        if inner is not None:  # bert-convert's encoder/ + preprocessor/, TF Serving versions
            return Detected("bert_tf_export", inner, path)
        if _exists(path, "saved_model.pb"):
            ours = _exists(path, _join("assets.extra", "bert_tf_export.json"))
            return Detected("bert_tf_export" if ours else "tfhub", path, path)
        if _exists(path, "model.weights.h5") and _exists(path, "config.json"):
            return Detected("keras_hub", path, path)
        if _exists(path, "model.safetensors") or _exists(path, "model.safetensors.index.json"):
            return Detected("hf", path, path)
        try:
            prefix = common.resolve_prefix(path)
        except BertError as e:
            raise BertError(f"{e} (looked for {LOOKED_FOR})") from None
    else:
        prefix = common.resolve_prefix(path)
    common.reader(prefix)  # one-line error for an unreadable file
    return Detected(_prefix_format(prefix), prefix, posixpath.dirname(prefix) or ".")


def _export_inside(path):
    """The SavedModel a directory of exports stands for, or None: `encoder/` (bert-convert
    --to=savedmodel), else the highest numbered version folder (TF Serving layout)."""
    if _exists(path, "saved_model.pb"):
        return None
    if _exists(path, _join("encoder", "saved_model.pb")):
        return _join(path, "encoder")
    versions = [v for v in tf.io.gfile.listdir(path) if v.rstrip("/").isdigit()]
    for v in sorted(versions, key=lambda v: int(v.rstrip("/")), reverse=True):
        if _exists(path, _join(v.rstrip("/"), "saved_model.pb")):
            return _join(path, v.rstrip("/"))
    return None


def _sibling_preprocessor(export_dir):
    """The preprocessor export beside an encoder export, or None: `<dir>/preprocessor` next
    to `<dir>/encoder` (bert-convert), `<name>_preprocessor/<newest version>` next to
    `<name>_encoder/<version>` (run_pretraining's TF Serving export)."""
    export_dir = export_dir.rstrip("/")
    parent, name = posixpath.split(export_dir)
    candidates = []
    if name == "encoder":
        candidates.append(_join(parent, "preprocessor"))
    elif name.isdigit():
        grand, model = posixpath.split(parent)
        if model.endswith("_encoder"):
            candidates.append(_join(grand, model[:-len("_encoder")] + "_preprocessor"))
    for c in candidates:
        if tf.io.gfile.isdir(c):
            found = _export_inside(c) or (c if _exists(c, "saved_model.pb") else None)
            if found is not None:
                return found
    return None


def export_vocab(export_dir, meta):
    """(vocab_file or None, casing or None) of a bert_tf export: its one `.txt` asset (text-in
    exports; encoder exports have none) and the do_lower_case / strip_accents its metadata
    records (strip_accents absent: it follows do_lower_case, as the original).

    Args:
        export_dir: the SavedModel directory.
        meta: its `assets.extra/bert_tf_export.json` dict.
    """
    found = tf.io.gfile.glob(_join(export_dir, "assets", "*.txt"))
    lower = meta.get("do_lower_case")
    if len(found) != 1:  # an encoder export: the vocab is its sibling preprocessor's
        pre = _sibling_preprocessor(export_dir)
        if pre is not None:
            from bert_tf import fileio
            pre_meta = _join(pre, "assets.extra", "bert_tf_export.json")
            pre_meta = fileio.read_json(pre_meta) if tf.io.gfile.exists(pre_meta) else {}
            found = tf.io.gfile.glob(_join(pre, "assets", "*.txt"))
            lower = meta.get("do_lower_case", pre_meta.get("do_lower_case"))
            meta = {**pre_meta, **meta}
    return (found[0] if len(found) == 1 else None,
            None if lower is None else (bool(lower), bool(meta.get("strip_accents", lower))))


def read_weights(detected):
    """Weights of the formats loaded through TF1-named arrays (model_garden, tfhub,
    bert_tf_export, keras_hub).

    Args:
        detected: a `Detected` of one of those formats.

    Returns:
        (BertConfig implied by the source, {TF1 name: array in the TF1 layout}, vocab_file or
        None, casing) with casing (lowercase, strip_accents) or None when the source records
        none. The config's hidden_act is the format's default where the source has none.
    """
    fmt, path = detected.format, detected.path
    if fmt == "model_garden":
        from bert_tf.convert.model_garden import read_model_garden_checkpoint
        cfg, weights = read_model_garden_checkpoint(path)
        return cfg, weights, None, None
    if fmt == "tfhub":
        from bert_tf.convert.tfhub import read_tfhub_encoder
        cfg, weights, vocab, lower = read_tfhub_encoder(path)
        return cfg, weights, vocab, None if lower is None else (lower, lower)
    if fmt == "keras_hub":
        from bert_tf.convert import keras_hub
        from bert_tf.convert.interop import encoder_of, get_weights
        model, vocab, lower, strip = keras_hub.load_keras_hub_preset_with_casing(path)
        return encoder_of(model).bert_config, get_weights(model), vocab, (lower, strip)
    if fmt == "keras":
        return read_keras_file(path)
    if fmt == "bert_tf_export":
        from bert_tf.convert.interop import encoder_of, get_weights
        from bert_tf.export.keras_loading import load_as_keras_model
        model, meta = load_as_keras_model(path)
        vocab, lower = export_vocab(path, meta)
        return encoder_of(model).bert_config, get_weights(model), vocab, lower
    raise BertError(f"{path}: {fmt} weights are loaded by their own loader, not read_weights")


def read_keras_file(path):
    """(BertConfig, TF1-named weights, vocab_file or None, casing or None) of a `.keras` file
    of a bert_tf model: the encoder's config; its heads' weights too; a BertTextModel's
    preprocessing layer gives the vocab (the temp file it wrote) and casing."""
    import keras
    from bert_tf.convert.interop import encoder_of, get_weights
    try:
        model = keras.saving.load_model(path, compile=False)
    except (ValueError, TypeError, KeyError, OSError) as e:
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise BertError(f"{path}: cannot load this .keras file ({msg})") from None
    pre = getattr(model, "preprocessor", None)
    inner = getattr(model, "model", model) if pre is not None else model
    try:
        cfg = encoder_of(inner).bert_config
    except BertError:
        raise BertError(f"{path}: a .keras file without a bert_tf BertEncoder "
                        f"({type(model).__name__})") from None
    if pre is None or not hasattr(pre, "tokenizer"):
        return cfg, get_weights(inner), None, None
    return (cfg, get_weights(inner), pre.tokenizer.vocab_file,
            (bool(pre.do_lower_case), bool(pre.strip_accents)))
