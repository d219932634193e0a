"""One entry point for every checkpoint format: `load_checkpoint(model, path)`.

It detects the format (`bert_tf.convert.detect`, shared with `bert_tf.from_pretrained`) and
calls its converter module:
  bert_tf.convert.tf1     original TF1 `bert_model.ckpt` (`bert/encoder/layer_0/...`); also writes
  bert_tf.convert.native  ours: `tf.train.Checkpoint(model=...)` from training
  bert_tf.convert.hf      Hugging Face `model.safetensors` (directory or file); also writes
  model_garden, tfhub, keras_hub, bert_tf exports: read as TF1-named arrays, then
                          `load_tf1_weights`

The converters' public functions are re-exported here for convenience.
"""
import os

from bert_tf import BertError
from bert_tf.convert import common, detect
from bert_tf.convert.hf import (bert_config_from_hf, load_hf_safetensors,  # noqa: F401
                                save_hf_directory)
from bert_tf.convert.native import load_bert_tf_checkpoint
from bert_tf.convert.tf1 import (is_tf1_checkpoint, load_tf1_checkpoint,  # noqa: F401
                                 save_tf1_checkpoint, tf1_name_map)


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


def load_detected(model, detected):
    """Loads the weights of an already detected source (`detect.detect`) into `model`.

    Args:
        model: see load_checkpoint.
        detected: a `detect.Detected`.

    Returns:
        The report dict.
    """
    fmt, path = detected.format, detected.path
    if fmt == "hf":
        return load_hf_safetensors(model, path)
    if fmt == "tf1":
        return load_tf1_checkpoint(model, path)
    if fmt == "bert_tf":
        return load_bert_tf_checkpoint(model, path)
    return load_tf1_weights(model, detect.read_weights(detected)[1], path)


def load_checkpoint(model, path):
    """Loads any BERT checkpoint bert_tf reads into `model`.

    Formats: original TF1 checkpoints, ours, Model Garden's (`Checkpoint(encoder=BertEncoder)`,
    BertPretrainerV2), Hugging Face directories / `.safetensors` files, keras-hub presets (needs
    keras-hub), TF Hub encoder SavedModels and bert_tf encoder / end-to-end exports: the paths
    `bert_tf.from_pretrained` accepts.

    Args:
        model: a BertEncoder, a `bert_tf.modeling.models` task model, or a keras.Model with
            exactly one BertEncoder (built first if it is ours and unbuilt).
        path: a checkpoint prefix or directory (its latest checkpoint), a HF model directory
            or `.safetensors` file, a keras-hub preset or a SavedModel directory.

    Returns:
        The report `{"loaded": [...], "skipped": [...], "missing": [...]}` (see
        `bert_tf.convert.common`).

    Raises:
        BertError: no checkpoint there, a config/shape mismatch or a missing encoder.
    """
    return load_detected(model, detect.detect(os.fspath(path)))
