"""One entry point for every checkpoint format: `load_checkpoint(model, path)`.

It detects the format and calls its converter module:
  bert_tf.convert.tf1     original TF1 `bert_model.ckpt` (`bert/encoder/layer_0/...`); also writes
  bert_tf.convert.native  ours: `tf.train.Checkpoint(model=...)` from training (and Model
                          Garden's `encoder` key)
  bert_tf.convert.hf      Hugging Face `model.safetensors` (directory or file); also writes

The converters' public functions are re-exported here for convenience.
"""
import os
import posixpath

import tensorflow as tf

from bert_tf.convert import common
from bert_tf.convert.hf import (bert_config_from_hf, load_hf_safetensors,  # noqa: F401
                                save_hf_directory)
from bert_tf.convert.native import load_bert_tf_checkpoint
from bert_tf.convert.tf1 import (is_tf1_checkpoint, load_tf1_checkpoint,  # noqa: F401
                                 save_tf1_checkpoint, tf1_name_map)


def _is_hf(path):
    if path.endswith(".safetensors"):
        return True
    return tf.io.gfile.isdir(path) and any(
        tf.io.gfile.exists(posixpath.join(path, f))
        for f in ("model.safetensors", "model.safetensors.index.json"))


def load_checkpoint(model, path):
    """Loads an original TF1 checkpoint, one of ours, or a Hugging Face one into `model`.

    Args:
        model: a BertEncoder, a `bert_tf.modeling.models` task model, or a keras.Model with
            exactly one BertEncoder (built first if it is ours and unbuilt).
        path: a checkpoint prefix or directory (its latest checkpoint), a HF model directory
            or a `.safetensors` file.

    Returns:
        The report `{"loaded": [...], "skipped": [...], "missing": [...]}` (see
        `bert_tf.convert.common`).

    Raises:
        BertError: no checkpoint there, a config/shape mismatch or a missing encoder.
    """
    path = os.fspath(path)
    if _is_hf(path):
        return load_hf_safetensors(model, path)
    prefix = common.resolve_prefix(path)
    if is_tf1_checkpoint(prefix):
        return load_tf1_checkpoint(model, prefix)
    return load_bert_tf_checkpoint(model, prefix)
