"""Encoder SavedModel (TF Hub convention): int32 ids dict -> pooled/sequence/per-layer outputs.

  - `__call__(inputs)`: dict `input_word_ids`, `input_mask`, `input_type_ids` int32 [batch, seq]
    (both dims dynamic) -> dict `pooled_output` [B, H] (also as `default`), `sequence_output`
    [B, S, H], `encoder_outputs` (list of the L layers' [B, S, H]); float32. Optional
    `training` (Python bool, default False) turns dropout on, as Model Garden's exports do;
  - `serve`: alias of `__call__` (the endpoint `keras.layers.TFSMLayer(path)` calls by default);
  - signature `serving_default`: the same inputs; `encoder_outputs` stacked batch-major to
    [B, L, S, H] (signature outputs must be flat tensors sharing the batch dimension);
  - `variables`, `trainable_variables`, `regularization_losses` (TF Hub's reusable SavedModel
    API): `hub.KerasLayer(export_dir, trainable=True)` fine-tunes the encoder's weights. They
    are the same tf.Variables the functions read (TF Serving's loader restores those).
"""
import bert_tf  # noqa: F401
import tensorflow as tf

from bert_tf import BertError
from bert_tf.export import common


class EncoderModule(tf.Module):
    """The encoder SavedModel's root object (see module docstring).

    Args:
        encoder_or_model: a BertEncoder, a functional encoder model or a bert_tf task model
            (only its encoder is exported).
        name: tf.Module name.
    """

    # Plain attributes instead of tf.Module's computed properties, so they are saved.
    variables = trainable_variables = regularization_losses = None

    def __init__(self, encoder_or_model, name="bert_encoder"):
        super().__init__(name=name)
        cfg = common.bert_config_of(encoder_or_model, "export_encoder")
        enc = common.find_encoder(encoder_or_model)
        # A task model contributes only its encoder; a functional encoder model is used whole.
        model = enc if hasattr(encoder_or_model, "encoder") else encoder_or_model
        common.ensure_built(model)
        self._model = common.Ref(model)
        self._cfg = cfg
        self.model_variables = common.tf_variables(model)
        self.variables = list(self.model_variables)
        trainable = {id(getattr(w, "value", w)) for w in model.trainable_weights}
        self.trainable_variables = [v for v in self.model_variables if id(v) in trainable]
        self.regularization_losses = []  # BERT fine-tuning uses decoupled weight decay
        # Dropout's seed-generator state: read by the training trace, so it must be saved
        # too; not a weight, so not in `variables`.
        weights = {id(v) for v in self.model_variables}
        self.dropout_seed_state = [
            getattr(v, "value", v) for v in model.variables
            if id(getattr(v, "value", v)) not in weights]
        # keras.layers.TFSMLayer's default endpoint name.
        self.serve = self.__call__
        # The traces that are saved: inference, and training (dropout on) as TF Hub's
        # KerasLayer(trainable=True) calls it while fine-tuning.
        for training in (False, True):
            self.__call__.get_concrete_function(common.ids_spec(), training=training)

    def encode(self, inputs, training=False):
        """Checked ids -> the encoder's outputs in float32 (shared by both endpoints).

        Args:
            inputs: dict of the three int32 [B, S] id tensors.
            training: Python bool, dropout on.

        Returns:
            Dict of pooled_output, sequence_output and encoder_outputs (a list).
        """
        cfg = self._cfg
        inputs = common.checked_ids(inputs["input_word_ids"], inputs["input_mask"],
                                    inputs["input_type_ids"], cfg.vocab_size,
                                    cfg.type_vocab_size, cfg.max_position_embeddings)
        out = self._model.obj(inputs, training=training)
        if not isinstance(out, dict) or "pooled_output" not in out:
            raise BertError("export_encoder: the model must return the encoder's output dict")
        return {"pooled_output": tf.cast(out["pooled_output"], tf.float32),
                "sequence_output": tf.cast(out["sequence_output"], tf.float32),
                "encoder_outputs": [tf.cast(x, tf.float32) for x in out["encoder_outputs"]]}

    @tf.function(autograph=False)
    def __call__(self, inputs, training=False):
        out = self.encode(inputs, training)
        # TF Hub's alias for the whole-input representation (Model Garden exports have it).
        out["default"] = out["pooled_output"]
        return out

    @tf.function(input_signature=list(common.ids_spec().values()), autograph=False)
    def serve_flat(self, input_word_ids, input_mask, input_type_ids):
        """The `serving_default` signature: encoder_outputs stacked to [B, L, S, H].

        Signature outputs must be flat tensors sharing the batch dimension.

        Args:
            input_word_ids: int32 [B, S].
            input_mask: int32 [B, S].
            input_type_ids: int32 [B, S].
        """
        out = self.encode({"input_word_ids": input_word_ids, "input_mask": input_mask,
                           "input_type_ids": input_type_ids})
        return {"pooled_output": out["pooled_output"],
                "sequence_output": out["sequence_output"],
                "encoder_outputs": tf.stack(out["encoder_outputs"], axis=1)}


def export_encoder(encoder_or_model, export_dir):
    """Writes the encoder SavedModel to export_dir (atomically); returns export_dir.

    Args:
        encoder_or_model: a BertEncoder, a functional model from build_encoder_model, or any
            bert_tf.modeling.models model (its `.encoder` is exported).
        export_dir: folder to write (replaced if it exists).
    """
    module = EncoderModule(encoder_or_model)
    metadata = {"format": common.FORMAT, "kind": "encoder",
                **common.model_metadata(module._model.obj)}
    signatures = {"serving_default": module.serve_flat}
    return common.write_saved_model(module, export_dir, signatures, metadata)
