"""One entry point for every checkpoint format: `load_checkpoint(model, path)`.

It reads the path through the format table (`bert_tf.convert.formats`, shared with
`bert_tf.from_pretrained` and every script) and loads the weights with that format's loader.
The converters' public functions are re-exported here for convenience.
"""
import os

from bert_tf.convert import formats
from bert_tf.convert.hf import (bert_config_from_hf, load_hf_safetensors,  # noqa: F401
                                save_hf_directory)
from bert_tf.convert.native import load_bert_tf_checkpoint  # noqa: F401
from bert_tf.convert.tf1 import (is_tf1_checkpoint, load_tf1_checkpoint,  # noqa: F401
                                 load_tf1_weights, save_tf1_checkpoint, tf1_name_map)


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
            or `.safetensors` file, a keras-hub preset or a SavedModel directory; or the
            `bert_tf.convert.source.Source` a command read for it (not read again).

    Returns:
        The report `{"loaded": [...], "skipped": [...], "missing": [...]}` (see
        `bert_tf.convert.common`).

    Raises:
        BertError: no checkpoint there, a config/shape mismatch or a missing encoder.
    """
    if not isinstance(path, formats.source.Source):
        path = os.fspath(path)
    return formats.load_checkpoint(model, path)
