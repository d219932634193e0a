"""Loading exports back into Keras 3.

- `load_as_keras_layer(export_dir, signature=None, trainable=False)`: a `keras.layers.TFSMLayer`
  over any export (preprocessor, encoder, end-to-end). With trainable=True its weights *are*
  the SavedModel's variables (stock TFSMLayer trains copies the saved functions never read),
  so an encoder export can be fine-tuned inside a Keras model. The exported functions run
  with dropout off.
- `load_as_keras_model(export_dir)`: the original bert_tf Keras model rebuilt from the export's
  metadata with the exported weights, for fine-tuning with dropout (the "own model +
  checkpoint" route).

A TFSMLayer runs the SavedModel's functions (a SavedModel is a program): give
`load_as_keras_layer` exports you trust, such as your own. `load_as_keras_model` runs nothing
from the export: its weights are read as data (`bert_tf.convert.saved_model_data`) and its
Keras config is rebuilt in Keras' safe mode.
"""
import bert_tf  # noqa: F401
import keras
import tensorflow as tf

from bert_tf import BertError
from bert_tf.export import common


class _SharedVariable(keras.Variable):
    """A Keras variable over an existing tf.Variable (no copy): Keras' TF backend wraps a
    tf.Variable handed to _initialize as is."""

    def __init__(self, variable, **kwargs):
        self._shared = variable
        super().__init__(initializer=lambda shape, dtype: None, shape=variable.shape,
                         dtype=variable.dtype.name, trainable=variable.trainable, **kwargs)

    def _initialize_with_initializer(self, initializer):
        self._initialize(self._shared)


class SavedModelLayer(keras.layers.TFSMLayer):
    """TFSMLayer that shares the SavedModel's variables and can also call signatures (which
    only take keyword arguments): a dict input is passed as keywords, a single tensor to the
    signature's only input.

    Args:
        filepath: the SavedModel folder.
        call_endpoint: a saved function attribute or a signature name.
        **kwargs: `keras.layers.TFSMLayer` arguments (`trainable`, `name`).
    """

    def __init__(self, filepath, call_endpoint="serving_default", **kwargs):
        super().__init__(filepath, call_endpoint=call_endpoint, **kwargs)
        signatures = self._reloaded_obj.signatures
        self._signature_inputs = None
        if not hasattr(self._reloaded_obj, call_endpoint) and call_endpoint in signatures:
            self._signature_inputs = sorted(
                signatures[call_endpoint].structured_input_signature[1])

    def _add_existing_weight(self, weight):
        self._track_variable(_SharedVariable(weight, name=weight.name.split(":")[0]
                                             .replace("/", "_")))

    def call(self, inputs, training=False, **kwargs):
        if self._signature_inputs is None:
            return super().call(inputs, training=training, **kwargs)
        if isinstance(inputs, dict):
            return self.call_endpoint_fn(**inputs, **kwargs)
        if len(self._signature_inputs) != 1:
            raise BertError(f"{self.filepath}: signature {self.call_endpoint!r} takes "
                            f"{self._signature_inputs}; pass a dict")
        return self.call_endpoint_fn(**{self._signature_inputs[0]: inputs}, **kwargs)


def load_as_keras_layer(export_dir, signature=None, trainable=False, name=None):
    """keras.layers.TFSMLayer over export_dir. It runs the SavedModel's code: use it on exports
    you trust (bert_tf's, your own); `load_as_keras_model` reads an export as data.

    Args:
        export_dir: any bert_tf SavedModel export.
        signature: a signature name (e.g. "serving_pairs", "predict_ids") or a saved function
            attribute; default: the export's `__call__` (preprocessor: strings -> inputs dict,
            encoder: inputs dict -> outputs dict, end-to-end: strings -> task outputs).
        trainable: expose the export's variables as trainable weights (fine-tuning; they are
            the SavedModel's own variables, so training changes what the layer computes).
        name: Keras layer name.
    """
    if not tf.io.gfile.exists(common.join(export_dir, "saved_model.pb")):
        raise BertError(f"{export_dir}: no saved_model.pb (not a SavedModel export)")
    return SavedModelLayer(export_dir, call_endpoint=signature or "__call__",
                           trainable=trainable, name=name)


def load_as_keras_model(export_dir):
    """Rebuilds the bert_tf Keras model of an encoder/end-to-end export with its weights.

    The model comes back from the Keras config stored in the export's metadata
    (`keras.saving.deserialize_keras_object`, safe mode), then takes the exported variables in
    order, read from the export's `variables/` as data: nothing in the SavedModel runs.

    Args:
        export_dir: an encoder or end-to-end export.

    Returns:
        (model, metadata). Embeddings exports give the BertEncoder (or functional encoder
        model) only.
    """
    from bert_tf.convert import bert_tf_export
    return bert_tf_export.load_model(export_dir)
