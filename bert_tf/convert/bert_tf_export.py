"""bert_tf's own SavedModel exports as a format: read back into Keras, and written by
`bert-convert --to=savedmodel` (an `encoder/` + `preprocessor/` pair).

Detected by `assets.extra/bert_tf_export.json`, also inside a directory of exports: the
`encoder/` of bert-convert's pair (the vocab and casing come from `preprocessor/`) and the
TF Serving layout (`<model>/<version>/`: the newest version), only where that SavedModel has
the metadata. The model comes back from the Keras config in that metadata (Keras safe mode:
Keras' and registered classes only), with the exported variables in order, read as data
(`saved_model_data`: nothing in the SavedModel runs). Writing goes through `bert_tf.exporter`
(the export package is a higher layer than convert).
"""
import posixpath

import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.convert.source import (Format, Source, join, lazy, note, real_inside,
                                    saved_model_inside)

EXTRA_DIR = "assets.extra"            # TF Serving's folder for files next to the model
METADATA_FILE = "bert_tf_export.json"  # what was exported (task, labels, config...), in EXTRA_DIR


def _exists(directory, name):
    return tf.io.gfile.exists(join(directory, name))


def read_metadata(export_dir):
    """The dict an export stored in `assets.extra/bert_tf_export.json`; BertError if it is
    not our export."""
    path = join(export_dir, EXTRA_DIR, METADATA_FILE)
    if not tf.io.gfile.exists(path):
        raise BertError(f"{export_dir}: not a bert_tf export (no {EXTRA_DIR}/{METADATA_FILE})")
    return fileio.read_json(path)


def is_export(export_dir):
    """Whether `export_dir` is a SavedModel bert_tf exported (it has our metadata)."""
    return _exists(export_dir, "saved_model.pb") and _exists(export_dir,
                                                             join(EXTRA_DIR, METADATA_FILE))


def _sibling_preprocessor(export_dir):
    """The preprocessor export beside an encoder export, or None: `<dir>/preprocessor` next
    to `<dir>/encoder` (bert-convert), `<name>_preprocessor/<newest version>` next to
    `<name>_encoder/<version>` (run_pretraining's TF Serving export)."""
    export_dir = export_dir.rstrip("/")
    parent, name = posixpath.split(export_dir)
    candidates = []
    if name == "encoder":
        candidates.append(join(parent, "preprocessor"))
    elif name.isdigit():
        grand, model = posixpath.split(parent)
        if model.endswith("_encoder"):
            candidates.append(join(grand, model[:-len("_encoder")] + "_preprocessor"))
    for c in candidates:
        if tf.io.gfile.isdir(c):
            found = saved_model_inside(c)
            if found is not None:
                return found
    return None


def export_vocab(export_dir, meta):
    """(vocab_file or None, casing or None) of a bert_tf export: its one `.txt` asset (text-in
    exports; encoder exports have none) and the do_lower_case / strip_accents its metadata
    records (strip_accents absent: it follows do_lower_case, as the original).

    Args:
        export_dir: the export's directory.
        meta: the export's metadata dict (`read_metadata`).
    """
    found = tf.io.gfile.glob(join(export_dir, "assets", "*.txt"))
    meta_file = join(export_dir, EXTRA_DIR, METADATA_FILE)
    lower = fileio.json_bool(meta, "do_lower_case", meta_file)
    strip = fileio.json_bool(meta, "strip_accents", meta_file)
    home = export_dir
    if len(found) != 1:  # an encoder export: the vocab is its sibling preprocessor's
        pre = _sibling_preprocessor(export_dir)
        if pre is not None:
            pre_file = join(pre, EXTRA_DIR, METADATA_FILE)
            pre_meta = fileio.read_json(pre_file) if tf.io.gfile.exists(pre_file) else {}
            found, home = tf.io.gfile.glob(join(pre, "assets", "*.txt")), pre
            if lower is None:
                lower = fileio.json_bool(pre_meta, "do_lower_case", pre_file)
            if strip is None:
                strip = fileio.json_bool(pre_meta, "strip_accents", pre_file)
    vocab = real_inside(home, found[0], "vocab asset") if len(found) == 1 else None
    return vocab, None if lower is None else (lower, lower if strip is None else strip)


def newest_export(directory):
    """(metadata, export dir) of the newest export under directory/export that records a
    bert_config, or None: training writes no bert_config.json, its exports carry it."""
    found = []
    for pattern in ("export", "export/*", "export/*/*"):
        found += tf.io.gfile.glob(join(directory, pattern, EXTRA_DIR, METADATA_FILE))
    for meta_file in sorted(found, key=lambda f: tf.io.gfile.stat(f).mtime_nsec, reverse=True):
        meta = fileio.read_json(meta_file)
        if "bert_config" in meta:
            return meta, posixpath.dirname(posixpath.dirname(meta_file))
    return None


def _model_variables(export_dir):
    """The export's `model_variables` values in order, read as data (nothing in it runs)."""
    from bert_tf.convert.saved_model_data import SavedModelData
    sm = SavedModelData(export_dir)
    node = sm.node(["model_variables"])
    if node is None:
        raise BertError(f"{export_dir}: no model_variables in saved_model.pb (not an encoder "
                        f"or end-to-end export, or truncated)")
    return [value for _, value in sm.variables_of(node)]


def load_model(export_dir, meta=None):
    """Rebuilds the bert_tf Keras model of an encoder/end-to-end export with its weights:
    (model, metadata). See `bert_tf.export.load_as_keras_model`.

    Args:
        export_dir: the export's directory.
        meta: its metadata dict, or None to read it from the export.
    """
    import keras
    from bert_tf.modeling.models import ensure_built
    meta = read_metadata(export_dir) if meta is None else meta
    if meta.get("kind") not in ("encoder", "end_to_end"):
        raise BertError(f"{export_dir}: a {meta.get('kind')} export holds no model weights")
    if "keras_config" not in meta:
        raise BertError(f"{export_dir}: exported by an older bert_tf (no keras_config in "
                        f"{EXTRA_DIR}/{METADATA_FILE}); export it again")
    if not isinstance(meta["keras_config"], dict) or not isinstance(
            meta.get("variable_paths"), list):
        raise BertError(f"{export_dir}: {EXTRA_DIR}/{METADATA_FILE}: keras_config is not an "
                        f"object or variable_paths not a list")
    try:  # safe mode: registered classes and Keras' own only, no Lambda
        model = keras.saving.deserialize_keras_object(meta["keras_config"], safe_mode=True)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise BertError(f"{export_dir}: cannot rebuild the model from its keras_config "
                        f"({str(e).strip().splitlines()[0]})") from None
    ensure_built(model)
    saved = _model_variables(export_dir)
    name = type(model).__name__
    if len(saved) != len(model.weights):
        raise BertError(f"{export_dir}: {len(saved)} saved variables, {name} has "
                        f"{len(model.weights)}")
    for var, value, path in zip(model.weights, saved, meta["variable_paths"]):
        if tuple(var.shape) != tuple(value.shape):
            raise BertError(f"{export_dir}: variable {path} has shape {tuple(value.shape)}, "
                            f"the rebuilt model expects {tuple(var.shape)}")
        var.assign(value)
    return model, meta


# ---- the format ------------------------------------------------------------------------------

def _detect(path):
    # only a SavedModel with our metadata: a TF Hub one in the same layout is tfhub's
    inner = saved_model_inside(path)
    return inner if inner is not None and is_export(inner) else None


def _read(path):
    from bert_tf.convert.interop import encoder_of, get_weights
    from bert_tf.modeling.config import BertConfig
    meta = read_metadata(path)
    vocab, casing = export_vocab(path, meta)
    model = lazy(lambda: load_model(path, meta)[0])
    weights = lazy(lambda: get_weights(model()))
    if "bert_config" in meta:
        cfg = BertConfig.from_dict(meta["bert_config"], source=path)
    else:
        cfg = encoder_of(model()).bert_config

    def loader(target):
        from bert_tf.convert.tf1 import load_tf1_weights
        return load_tf1_weights(target, weights(), path)
    return Source("bert_tf_export", path, path, cfg, vocab, casing, loader=loader,
                  has_mlm=lambda: "cls/predictions/output_bias" in weights())


def _write(net, cfg, out, vocab_file, casing):
    import bert_tf
    bert_tf.exporter("encoder")(net, posixpath.join(out, "encoder"))
    if vocab_file is None:
        note("no vocab: wrote the encoder only (give --vocab_file for the preprocessor)")
        return
    # packs to what the encoder takes (bert_pack_inputs takes any length)
    bert_tf.exporter("preprocessor")(vocab_file, casing[0], posixpath.join(out, "preprocessor"),
                                     seq_length=min(128, cfg.max_position_embeddings),
                                     strip_accents=casing[1])


FORMAT = Format("bert_tf_export", _detect, _read, _write, aliases=("savedmodel",),
                looks_for="saved_model.pb with assets.extra/bert_tf_export.json (a bert_tf "
                "export, also under encoder/ or a numbered version folder)")
