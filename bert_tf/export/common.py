"""Shared export plumbing: atomic SavedModel writes, export metadata, model unwrapping, id checks.

Exports are plain `tf.Module`s whose `tf.function`s close over the Keras model: the SavedModel
holds only variables, function graphs and assets, so `tf.saved_model.load` (and TF Serving)
needs neither keras nor bert_tf. The tf.Variables behind the Keras weights are tracked in a
list attribute (`model_variables`) so they are saved and restored with the functions that
capture them (see tf_variables).
"""
import json
import os
import posixpath

import bert_tf  # noqa: F401  (sets KERAS_BACKEND)
import keras
import tensorflow as tf

from bert_tf import BertError, fileio
from bert_tf.export import serving_ops
from bert_tf.fileio import error_gist
from bert_tf.modeling import models
from bert_tf.modeling import real_length as rl
from bert_tf.modeling.encoder import INPUT_NAMES

# The one place the export tasks name their task model class.
TASK_MODEL_CLASSES = {"fill_mask": models.BertPretrainer, "classification": models.BertClassifier,
                      "regression": models.BertClassifier, "span": models.BertSpanLabeler,
                      "tagging": models.BertTokenClassifier}
# The implementations live once, in bert_tf.modeling.models; re-exported for the export modules.
find_encoder = models.find_encoder
ensure_built = models.ensure_built

# TF Serving's folder for files next to the model, and what was exported (task, labels,
# config...) in it: the format module reads them back.
from bert_tf.convert.bert_tf_export import EXTRA_DIR, METADATA_FILE  # noqa: E402,F401
FORMAT = "bert_tf.export/1"


class Ref:
    """Holds an object without making it a tracked dependency of a tf.Module.

    The Keras model itself must stay out of the SavedModel's object graph (only its variables
    go in), otherwise loading would drag Keras objects along.
    """
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


class TraceOnce:
    """A graph traced once per input structure and called by reference from every exported
    function that needs it (a model, a tokenizer).

    `tf.saved_model.save` retraces every saved tf.function in its own context, and a plain
    tf.function called from two signatures is traced for each distinct input shape. The
    concrete functions kept here (off the object graph, like `Ref`) are traced with the batch
    and length dimensions unknown, so `[None, 128]` text ids and `[None, None]` request ids
    share one trace, and a retraced signature only adds a call to them.

    Args:
        fn: a Python function of tensors (nested in dicts/lists) and Python values.
        reads_variables: fn reads model variables, which may be distributed (a model trained
            under MirroredStrategy): only a trace made while saving may read those in a saved
            function, so tf.function's own cache keeps one trace per context (outside and
            inside the save). False (a tokenizer, the packer: tables and constants only): one
            trace serves both, and a trace that reads a variable after all is an error.
    """
    __slots__ = ("_fn", "_traces", "_reads_variables")

    def __init__(self, fn, reads_variables=True):
        self._fn = tf.function(fn, autograph=False)
        self._traces = {}
        self._reads_variables = reads_variables

    def __call__(self, *args, **kwargs):
        specs = tf.nest.map_structure(_unknown_length, (args, kwargs))
        if self._reads_variables:
            return self._fn.get_concrete_function(*specs[0], **specs[1])(*args, **kwargs)
        key = repr(specs)  # TensorSpecs and Python values, as tf.function's cache keys them
        if key not in self._traces:
            trace = self._fn.get_concrete_function(*specs[0], **specs[1])
            if trace.variables:
                raise BertError(f"export: {trace.name} reads variables; it needs "
                                "TraceOnce(reads_variables=True)")
            self._traces[key] = trace
        return self._traces[key](*args, **kwargs)


class TracedWhenSaved:
    """tf.Module mixin: the variants to save of functions without an input_signature can be
    traced while saving instead of before.

    `tf.saved_model.save` keeps the variants a function has been traced with, and traces each
    again in its own context (the cache key includes the save options): a variant traced
    ahead of the save only to be kept costs one more trace, a model forward among them. A
    subclass traces them in `_saved_traces()`; the save calls it when it first lists this
    module's children, inside its context and before it lists the functions themselves, so
    a module that did not trace them before (an export's) traces each once.
    """

    def _saved_traces(self):
        """Traces the variants to save (`fn.get_concrete_function(...)` calls)."""
        raise NotImplementedError

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        if save_type == "savedmodel":
            self._saved_traces()
        return super()._trackable_children(save_type, **kwargs)


def _unknown_length(value):
    """A tensor's spec with its batch and length dimensions (axes 0 and 1) unknown, the rest as
    they are (a ragged tensor's spec as it is); other values as they are."""
    if isinstance(value, tf.Tensor):
        shape = value.shape
        if shape.rank is not None:
            shape = tf.TensorShape([None] * min(shape.rank, 2) + shape.as_list()[2:])
        return tf.TensorSpec(shape, value.dtype)
    if isinstance(value, tf.RaggedTensor):
        return tf.type_spec_from_value(value)
    return value


def join(*parts):
    """Path join that keeps gs:// URLs intact."""
    return posixpath.join(*parts) if "://" in parts[0] else os.path.join(*parts)


def ids_spec(seq_length=None):
    """Signature specs of the three int32 encoder inputs."""
    return {n: tf.TensorSpec([None, seq_length], tf.int32, name=n) for n in INPUT_NAMES}


def tf_variables(model):
    """The tf.Variables behind a Keras model's weights, to track in the exported module.

    Tracking the Keras Variable wrappers instead would export each weight twice: the wrapper
    saves as a *new* variable initialised from the one the functions capture, so a TF1-style
    loader (TF Serving's C++ LoadSavedModel, tf.compat.v1 sessions) restores the copy and the
    graph then reads an uninitialised variable ("Could not find variable ...").
    """
    out = []
    for v in model.weights:
        value = getattr(v, "value", v)
        if not isinstance(value, tf.Variable):
            raise BertError(f"export: weight {v.path} is not backed by a tf.Variable "
                            "(KERAS_BACKEND must be tensorflow)")
        out.append(value)
    return out


def bert_config_of(model, what="model"):
    """The BertConfig of `model`'s encoder; BertError naming `what` if it has none.

    Args:
        model: a BertEncoder, functional encoder model or bert_tf task model.
        what: names the caller in the error (e.g. "export_encoder").
    """
    return models.find_encoder(model, what).bert_config


def checked_ids(input_word_ids, input_mask, input_type_ids, vocab_size, type_vocab_size,
                max_positions):
    """Validates an ids request in-graph.

    TF Serving feeds tensors without Python-side checks, so the graph itself rejects wrong
    ranks, mismatched shapes and out-of-range ids with InvalidArgumentError (a gather with an
    out-of-range index would silently return zeros on GPU).

    Args:
        input_word_ids: int32 [B, S].
        input_mask: int32 [B, S], same shape.
        input_type_ids: int32 [B, S], same shape.
        vocab_size: int, word ids must be below it.
        type_vocab_size: int, type ids must be below it.
        max_positions: int, longest S (max_position_embeddings).

    Returns:
        The three inputs as a dict, gated on the checks.
    """
    ids = tf.ensure_shape(input_word_ids, [None, None])
    mask = tf.ensure_shape(input_mask, [None, None])
    types = tf.ensure_shape(input_type_ids, [None, None])
    shape = tf.shape(ids)
    checks = [
        tf.debugging.assert_equal(tf.shape(mask), shape,
                                  message="input_mask must have input_word_ids' shape"),
        tf.debugging.assert_equal(tf.shape(types), shape,
                                  message="input_type_ids must have input_word_ids' shape"),
        tf.debugging.assert_less_equal(shape[1], max_positions,
                                       message="sequence longer than max_position_embeddings"),
        tf.debugging.assert_non_negative(ids, message="input_word_ids must be >= 0"),
        tf.debugging.assert_less(ids, vocab_size, message="input_word_ids must be < vocab_size"),
        tf.debugging.assert_non_negative(types, message="input_type_ids must be >= 0"),
        tf.debugging.assert_less(types, type_vocab_size,
                                 message="input_type_ids must be < type_vocab_size"),
    ]
    with tf.control_dependencies(checks):
        return {"input_word_ids": tf.identity(ids), "input_mask": tf.identity(mask),
                "input_type_ids": tf.identity(types)}


# Exports compute only a batch's real tokens, as `real_length` rules: SavedModel functions run
# plain TF ops (TF Serving needs no XLA) and never on a TPU, so every batch is cut, rounded up
# to `real_length.step(S)` (8: one trace serves every length).
SPAN_PAD_LOGIT = rl.SPAN_PAD_LOGIT  # (API) what span logits hold at padding


def cut_inputs(inputs, at_least=None):
    """The encoder inputs cut to the batch's real length (`real_length.cut_inputs`).

    Args:
        inputs: dict of the int32 [B, S] encoder inputs (other keys are kept as they are).
        at_least: optional scalar int32 tensor, a length to keep anyway (masked-LM positions
            past the real tokens must stay in range).

    Returns:
        (the cut dict, the length): the last real position + 1 (at least 1 and `at_least`),
        rounded up to a multiple of 8, at most S.
    """
    return rl.cut_inputs(inputs, at_least,
                         step=rl.step(inputs["input_mask"].shape[1], xla=False))


def write_saved_model(module, export_dir, signatures, metadata, before_publish=None,
                      replace=True):
    """tf.saved_model.save into a temp sibling dir, add metadata, then rename into place.

    Readers (TF Serving polls the folder) never see a half-written export. A write that fails
    (disk full, no permission) is a BertError naming export_dir, with the temp dir removed and
    an existing export_dir left in place.

    Args:
        module: the tf.Module to save.
        export_dir: final folder (local or gs://...).
        signatures: dict of signature name -> tf.function, for `tf.saved_model.save`.
        metadata: JSON-able dict written to `assets.extra/bert_tf_export.json`.
        before_publish: optional callable(tmp_dir) that adds files (e.g. warm-up requests)
            before the rename.
        replace: swap out an existing export_dir (renamed away, then deleted); False raises
            BertError instead.

    Returns:
        `export_dir` (without a trailing slash).
    """
    export_dir = export_dir.rstrip("/")
    if tf.io.gfile.exists(export_dir) and not replace:
        raise BertError(f"{export_dir}: already exists")
    try:
        with fileio.atomic_dir(export_dir, create=False, replace=replace) as tmp:
            tf.saved_model.save(module, tmp, signatures=signatures)
            extra = join(tmp, EXTRA_DIR)
            tf.io.gfile.makedirs(extra)
            # Every function of the export against the op list of the minimum TF Serving
            # version, which then travels with the model.
            requirements = serving_ops.requirements_json(serving_ops.ops_in_saved_model(tmp),
                                                         export_dir)
            with tf.io.gfile.GFile(join(extra, serving_ops.REQUIREMENTS_FILE), "w") as f:
                f.write(requirements)
            with tf.io.gfile.GFile(join(extra, METADATA_FILE), "w") as f:
                f.write(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
            if before_publish is not None:
                before_publish(tmp)
    except (tf.errors.OpError, OSError) as e:  # disk full, no permission, a file in the way
        raise BertError(f"{export_dir}: cannot write the export ({error_gist(e)})") from None
    return export_dir


def read_metadata(export_dir):
    """The dict `write_saved_model` stored in export_dir; BertError if it is not our export."""
    from bert_tf.convert.bert_tf_export import read_metadata as read
    return read(export_dir)


def model_metadata(model):
    """How to rebuild `model`: its Keras config (`keras.saving.serialize_keras_object`, the
    encoder nested), its encoder's bert_config, and its variable paths in weight order."""
    config = keras.saving.serialize_keras_object(model)
    config.pop("compile_config", None)  # optimizer/loss state is not part of an export
    return {"bert_config": bert_config_of(model).to_dict(), "keras_config": config,
            "variable_paths": [relative_path(v) for v in model.weights]}


def relative_path(variable):
    """Variable path without the (instance-numbered) top-level model name."""
    path = variable.path
    return path.split("/", 1)[1] if "/" in path else path
