"""Encoder SavedModel (TF Hub convention): int32 ids dict -> pooled/sequence/per-layer outputs.

  - `__call__(inputs)`: dict `input_word_ids`, `input_mask`, `input_type_ids` int32 [batch, seq]
    (both dims dynamic) -> dict `pooled_output` [B, H] (also as `default`), `sequence_output`
    [B, S, H], `encoder_outputs` (list of the L layers' [B, S, H]); float32. Computed on the
    batch's real length only (see `common.cut_inputs`); sequence outputs hold 0.0 at every
    padding position (input_mask 0). Optional
    `training` (Python bool, default False) turns dropout on, as Model Garden's exports do;
  - `serve`: alias of `__call__` (the endpoint `keras.layers.TFSMLayer(path)` calls by default);
  - signature `serving_default`: the same inputs; `encoder_outputs` stacked batch-major to
    [B, L, S, H] (signature outputs must be flat tensors sharing the batch dimension);
  - `variables`, `trainable_variables`, `regularization_losses` (TF Hub's reusable SavedModel
    API): `hub.KerasLayer(export_dir, trainable=True)` fine-tunes the encoder's weights. They
    are the same tf.Variables the functions read (TF Serving's loader restores those);
  - `mlm` (with_mlm, from a model with a masked-LM head): `mlm(inputs)` takes the three ids
    plus int32 `masked_lm_positions` [B, P] and returns the encoder's outputs (no `default`)
    plus float32 `mlm_logits` [B, P, vocab_size] (a position past the real tokens is kept in
    the cut, so it gathers what the full length gives); `training` as above; its own `variables`
    (the encoder's and the head's, all trainable) and `regularization_losses`;
  - `vocab_file` (a SavedModel asset, copied to assets/) and `do_lower_case` (a bool
    tf.Variable, not trainable, last in `variables`) when the export is given a vocab.
Names, keys and dtypes are those of Model Garden's `export_tfhub_lib.export_model`.
"""
import bert_tf  # noqa: F401
import tensorflow as tf

from bert_tf import BertError
from bert_tf.export import common
from bert_tf.modeling import real_length as rl


POSITIONS_SPEC = tf.TensorSpec([None, None], tf.int32, name="masked_lm_positions")


def _non_weight_variables(layer, weights):
    """Dropout's seed-generator state: read by the training trace, so it must be saved too;
    not a weight, so not in `variables`."""
    return [getattr(v, "value", v) for v in layer.variables
            if id(getattr(v, "value", v)) not in weights]


class MlmModule(common.TracedWhenSaved, tf.Module):
    """The encoder export's `mlm` sub-object: ids + masked_lm_positions -> encoder outputs +
    mlm_logits (see module docstring).

    Args:
        encoder_module: the EncoderModule (runs the encoder with the same id checks).
        model: the task model holding the `masked_lm` head (a BertPretrainer).
        trace_now: as `EncoderModule`'s.
    """

    variables = trainable_variables = regularization_losses = None

    def __init__(self, encoder_module, model, trace_now=True):
        super().__init__(name="mlm")
        head = model.masked_lm
        common.ensure_built(model)
        # A Ref: the parent module is saved once, as the root.
        self._encoder = common.Ref(encoder_module)
        self._head = common.Ref(head)
        self._word_embeddings = common.Ref(common.find_encoder(model).word_embeddings)
        # The head has no dropout: one trace serves both `training` values.
        self._logits = common.TraceOnce(self._run_head)
        self.head_variables = common.tf_variables(head)
        self.variables = list(encoder_module.trainable_variables) + self.head_variables
        self.trainable_variables = list(self.variables)
        self.regularization_losses = []
        self.dropout_seed_state = _non_weight_variables(
            head, {id(v) for v in self.head_variables})
        if trace_now:
            self._saved_traces()

    def _saved_traces(self):
        spec = dict(common.ids_spec(), masked_lm_positions=POSITIONS_SPEC)
        for training in (False, True):
            self.__call__.get_concrete_function(spec, training=training)

    @tf.function(autograph=False)
    def __call__(self, inputs, training=False):
        enc = self._encoder.obj
        full = enc.checked(inputs)
        positions = tf.ensure_shape(inputs["masked_lm_positions"], [None, None])
        shape = tf.shape(full["input_word_ids"])
        # An out-of-range gather would give zeros on GPU instead of an error.
        checks = [
            tf.debugging.assert_equal(tf.shape(positions)[0], shape[0], message=(
                "masked_lm_positions must have input_word_ids' batch size")),
            tf.debugging.assert_non_negative(positions,
                                             message="masked_lm_positions must be >= 0"),
            tf.debugging.assert_less(positions, shape[1], message=(
                "masked_lm_positions must be < the sequence length"))]
        with tf.control_dependencies(checks):
            positions = tf.identity(positions)
        # The cut keeps every asked position (one may point at padding).
        cut, _ = common.cut_inputs(full, at_least=tf.reduce_max(positions) + 1)
        out = enc.run_cut(cut, training)
        logits = self._logits(out["sequence_output"], positions)
        result = enc.as_float32(out, full["input_mask"])
        result["mlm_logits"] = tf.cast(logits, tf.float32)
        return result

    def _run_head(self, sequence_output, positions):
        return self._head.obj(sequence_output, positions, self._word_embeddings.obj)


class EncoderModule(common.TracedWhenSaved, tf.Module):
    """The encoder SavedModel's root object (see module docstring).

    Args:
        encoder_or_model: a BertEncoder, a functional encoder model or a bert_tf task model
            (only its encoder is exported, plus its masked-LM head with with_mlm).
        vocab_file: optional vocab.txt, saved as the `vocab_file` asset.
        do_lower_case: the vocab's casing (bool), saved as the `do_lower_case` variable; given
            with vocab_file.
        with_mlm: add the `mlm` sub-object; None: when the model has a `masked_lm` head.
        name: tf.Module name.
        trace_now: trace the functions to save now (batch and length unknown), so calls in
            this process use those traces; False (`export_encoder`): only while saving, where
            `tf.saved_model.save` would trace them again in its own context (a model forward
            per `training` value saved).
    """

    # Plain attributes instead of tf.Module's computed properties, so they are saved.
    variables = trainable_variables = regularization_losses = None

    def __init__(self, encoder_or_model, vocab_file=None, do_lower_case=None, with_mlm=None,
                 name="bert_encoder", trace_now=True):
        super().__init__(name=name)
        has_head = hasattr(encoder_or_model, "masked_lm")
        if with_mlm and not has_head:
            raise BertError(f"export_encoder: with_mlm=True needs a model with a masked-LM "
                            f"head (a BertPretrainer), got a {type(encoder_or_model).__name__}")
        if (vocab_file is None) != (do_lower_case is None):
            raise BertError("export_encoder: pass vocab_file and do_lower_case together")
        cfg = common.bert_config_of(encoder_or_model, "export_encoder")
        enc = common.find_encoder(encoder_or_model)
        # A task model contributes only its encoder; a functional encoder model is used whole.
        model = enc if hasattr(encoder_or_model, "encoder") else encoder_or_model
        common.ensure_built(model)
        self._model = common.Ref(model)
        # The model: one trace per `training` value (and per save context).
        self._run = common.TraceOnce(self._run_model)
        self._cfg = cfg
        self.model_variables = common.tf_variables(model)
        self.variables = list(self.model_variables)
        trainable = {id(getattr(w, "value", w)) for w in model.trainable_weights}
        self.trainable_variables = [v for v in self.model_variables if id(v) in trainable]
        self.regularization_losses = []  # BERT fine-tuning uses decoupled weight decay
        self.dropout_seed_state = _non_weight_variables(
            model, {id(v) for v in self.model_variables})
        self.with_mlm = bool(has_head if with_mlm is None else with_mlm)
        if vocab_file is not None:
            self._check_vocab(vocab_file)
            # Model Garden's encoders carry these for users who tokenize by themselves.
            self.vocab_file = tf.saved_model.Asset(vocab_file)
            self.do_lower_case = tf.Variable(bool(do_lower_case), trainable=False,
                                             name="do_lower_case")
            self.variables.append(self.do_lower_case)
        # keras.layers.TFSMLayer's default endpoint name.
        self.serve = self.__call__
        if trace_now:
            self._saved_traces()
        if self.with_mlm:
            self.mlm = MlmModule(self, encoder_or_model, trace_now)

    def _saved_traces(self):
        # The traces that are saved: inference, and training (dropout on) as TF Hub's
        # KerasLayer(trainable=True) calls it while fine-tuning.
        for training in (False, True):
            self.__call__.get_concrete_function(common.ids_spec(), training=training)

    def _check_vocab(self, vocab_file):
        from bert_tf.tokenization import check_vocab_size
        if not tf.io.gfile.exists(vocab_file):
            raise BertError(f"export_encoder: vocab_file {vocab_file}: file not found")
        check_vocab_size(vocab_file, self._cfg.vocab_size)

    def checked(self, inputs):
        """The three int32 [B, S] ids of `inputs` (other keys ignored), checked in-graph."""
        cfg = self._cfg
        return common.checked_ids(inputs["input_word_ids"], inputs["input_mask"],
                                  inputs["input_type_ids"], cfg.vocab_size,
                                  cfg.type_vocab_size, cfg.max_position_embeddings)

    def run_cut(self, cut, training=False):
        """The encoder's output dict (compute dtype) on checked ids cut to their real length
        (one trace per `training` value and save context, shared by every exported function).

        Args:
            cut: dict of the three int32 [B, L] id tensors (`common.cut_inputs`).
            training: Python bool, dropout on.
        """
        return self._run(cut, training)

    def _run_model(self, cut, training):
        out = self._model.obj(cut, training=training)
        if not isinstance(out, dict) or "pooled_output" not in out:
            raise BertError("export_encoder: the model must return the encoder's output dict")
        return out

    def encode(self, inputs, training=False):
        """Checked ids -> the encoder's outputs in float32 (shared by both endpoints),
        computed on the batch's real length; sequence outputs padded back (see `as_float32`).

        Args:
            inputs: dict of the three int32 [B, S] id tensors.
            training: Python bool, dropout on.

        Returns:
            Dict of pooled_output, sequence_output and encoder_outputs (a list).
        """
        full = self.checked(inputs)
        cut, _ = common.cut_inputs(full)
        return self.as_float32(self.run_cut(cut, training), full["input_mask"])

    @staticmethod
    def as_float32(out, input_mask):
        """The exported keys of an encoder output dict of a cut batch, in float32, sequence
        outputs back at input_mask's length with 0.0 at every padding position.

        Args:
            out: the encoder's output dict.
            input_mask: the uncut int32 [B, S] mask.
        """
        out = {k: tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), out[k])
               for k in ("pooled_output", "sequence_output", "encoder_outputs")}
        out["encoder_outputs"] = list(out["encoder_outputs"])
        return rl.restore_outputs(out, input_mask)

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


def export_encoder(encoder_or_model, export_dir, vocab_file=None, do_lower_case=None,
                   with_mlm=None, before_publish=None):
    """Writes the encoder SavedModel to export_dir (atomically); returns export_dir.

    Args:
        encoder_or_model: a BertEncoder, a functional model from build_encoder_model, or any
            bert_tf.modeling.models model (its `.encoder` is exported).
        export_dir: folder to write (replaced if it exists).
        vocab_file: optional vocab.txt, exported as the `vocab_file` asset (needs
            do_lower_case).
        do_lower_case: exported as the `do_lower_case` variable (with vocab_file).
        with_mlm: export the `mlm` sub-object (needs a model with a masked-LM head, e.g. a
            BertPretrainer); default: whenever the model has one.
        before_publish: optional callable(tmp_dir) adding files (warm-up requests) before
            the export is renamed into place.
    """
    module = EncoderModule(encoder_or_model, vocab_file, do_lower_case, with_mlm,
                           trace_now=False)
    metadata = {"format": common.FORMAT, "kind": "encoder", "with_mlm": module.with_mlm,
                **common.model_metadata(module._model.obj)}
    if vocab_file is not None:
        metadata["do_lower_case"] = bool(do_lower_case)
    signatures = {"serving_default": module.serve_flat}
    return common.write_saved_model(module, export_dir, signatures, metadata,
                                    before_publish=before_publish)
