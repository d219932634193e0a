"""Keras task models: an encoder instance plus a head (keras-hub's backbone + task split).

Every model takes the encoder's input dict (`input_word_ids`, `input_mask`, `input_type_ids`,
int32 [B, S]) and returns float32 logits in a dict. Attribute names (`encoder`, `masked_lm`,
`next_sentence`, `classifier`, `span`, `tagger`) are the object keys of our training
checkpoints (`tf.train.Checkpoint(model=...)`), so keep them stable.

>>> import bert_tf
>>> from bert_tf.modeling.config import BertConfig
>>> from bert_tf.modeling.encoder import BertEncoder
>>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
...                  intermediate_size=32, max_position_embeddings=32)
>>> clf = build_model(BertClassifier(BertEncoder.from_bert_config(cfg), num_classes=3))
>>> type(BertClassifier.from_config(clf.get_config()).encoder).__name__
'BertEncoder'
"""
import keras
from keras import ops

from bert_tf import BertError
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder, dummy_inputs
from bert_tf.modeling.heads import DenseLogitsHead, MaskedLMHead, pooled_at
from bert_tf.modeling.keras_data import KerasConventions
from bert_tf.modeling.real_length import SPAN_PAD_LOGIT

POOLINGS = ("cls", "cls_token", "mean")


class BertTaskModel(KerasConventions, keras.Model):
    """Base of the task models: holds `encoder` (a BertEncoder) and serialises it nested.

    `fit`, `evaluate`, `predict` and direct calls take the input dict with lists or NumPy
    arrays as values, and labels as lists; `export(path)` writes a TF Serving SavedModel
    (`bert_tf.modeling.keras_data.KerasConventions`).

    Args:
        encoder: a `BertEncoder` instance (e.g. `BertEncoder.from_bert_config(cfg)`); it may
            be shared with, or come pre-trained from, another model.
        pad_to_max_seq_length: True: `fit` / `evaluate` / `predict` keep every batch at full
            length (default False: cut to the real length; saved in the config).
        **kwargs: `keras.Model` arguments (`name`, `trainable`, `dtype`).
    """

    def __init__(self, encoder, pad_to_max_seq_length=False, **kwargs):
        if not isinstance(encoder, BertEncoder):
            raise BertError(f"{type(self).__name__}: encoder must be a BertEncoder, got "
                            f"{type(encoder).__name__} (for a BertConfig use "
                            f"{type(self).__name__}.from_bert_config(cfg, ...))")
        super().__init__(**kwargs)
        self.encoder = encoder
        self.pad_to_max_seq_length = bool(pad_to_max_seq_length)

    @classmethod
    def from_bert_config(cls, bert_config, *args, **kwargs):
        """Shortcut for `cls(BertEncoder.from_bert_config(bert_config), *args, **kwargs)`.

        Args:
            bert_config: a `BertConfig` or its dict (`bert_config.json` fields).
            *args: the task model's own arguments (e.g. `num_classes`).
            **kwargs: its keyword arguments.
        """
        if isinstance(bert_config, dict):
            bert_config = BertConfig.from_dict(bert_config)
        return cls(BertEncoder.from_bert_config(bert_config, name="encoder"), *args, **kwargs)

    @property
    def bert_config(self):
        """The encoder's BertConfig."""
        return self.encoder.bert_config

    def build(self, input_shape=None):
        # Build sub-layers directly; Keras' default would trace the whole call symbolically
        # first (about 1 s per model even for a tiny config). A shared encoder is built once.
        if not self.encoder.built:
            self.encoder.build()
        h = self.bert_config.hidden_size
        for head, shape in self._head_shapes(h):
            if not head.built:
                head.build(shape)
        self.built = True

    def _head_shapes(self, h):
        return []

    def get_build_config(self):
        return {"input_shape": None}  # build() needs no shapes, so .keras files always rebuild

    def get_config(self):
        return {"encoder": keras.saving.serialize_keras_object(self.encoder),
                "pad_to_max_seq_length": self.pad_to_max_seq_length,
                "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("encoder"), dict):
            config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def check_labels(labels, n, what):
    """`labels` as a list of n strings (None stays None); a one-line BertError otherwise.

    Args:
        labels: label names in logit order, or None.
        n: the number of logits.
        what: the argument n came from, for the message.
    """
    if labels is None:
        return None
    if isinstance(labels, str):
        raise BertError(f"labels: expected a list of names, got the string {labels!r}")
    labels = [str(x) for x in labels]
    if len(labels) != n:
        raise BertError(f"labels: {len(labels)} names given, but {what}={n}")
    if len(set(labels)) != n:
        raise BertError(f"labels: names repeat in {labels}")
    return labels


def _plain(labels):  # Keras tracks list attributes; configs hold plain lists
    return None if labels is None else list(labels)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(BertTaskModel):
    """Encoder + masked-LM head (tied to the word embeddings) + next-sentence head.

    Extra input: `masked_lm_positions` int [B, P] (all positions are scored when absent).
    Outputs: `mlm_logits` [B, P, V], `nsp_logits` [B, 2] (float32), plus the encoder's
    `sequence_output` / `pooled_output`. Packed rows (`input_positions` and
    `input_sequence_index` [B, S], the encoder's `PACKED_INPUTS`, with
    `next_sentence_positions` int [B, N], each sequence's [CLS]) give `nsp_logits` [B, N, 2]
    and `pooled_output` [B, N, H].

    Args:
        encoder: the `BertEncoder`; the heads take its hidden size, vocabulary, activation
            and initializer range.
        **kwargs: `keras.Model` arguments.
    """

    def __init__(self, encoder, **kwargs):
        super().__init__(encoder, **kwargs)
        c = self.bert_config
        self.masked_lm = MaskedLMHead(c.hidden_size, c.vocab_size, c.hidden_act,
                                      c.initializer_range, name="masked_lm")
        self.next_sentence = DenseLogitsHead(2, 0.0, c.initializer_range, name="next_sentence")

    def _head_shapes(self, h):
        return [(self.masked_lm, (None, None, h)), (self.next_sentence, (None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        positions = inputs.get("masked_lm_positions")
        if positions is None:  # score every position (fill-mask use)
            b, s = ops.shape(inputs["input_word_ids"])[0], ops.shape(inputs["input_word_ids"])[1]
            positions = ops.broadcast_to(ops.arange(s, dtype="int32")[None, :], (b, s))
        mlm = self.masked_lm(enc["sequence_output"], positions, self.encoder.word_embeddings)
        pooled = enc["pooled_output"]
        cls_positions = inputs.get("next_sentence_positions")
        if cls_positions is not None:  # packed rows: the pooler on each sequence's [CLS]
            pooled = pooled_at(self.encoder, enc["sequence_output"], cls_positions)
        nsp = self.next_sentence(pooled)
        return {"mlm_logits": mlm, "nsp_logits": nsp,
                "sequence_output": enc["sequence_output"], "pooled_output": pooled}

    def pretraining_logits(self, inputs, training=None):
        """`mlm_logits` and `nsp_logits` as `call` gives them, with the last transformer block
        run only at the positions the heads read: each [CLS] and the masked positions
        (pre-training's training and eval steps). With dropout off the values are `call`'s
        within float rounding; in training they are equal in distribution (the last block's
        dropout masks are drawn for those rows), so runs from before this path differ.

        Args:
            inputs: `call`'s inputs, `masked_lm_positions` included.
            training: dropout on (True) or off.
        """
        masked = ops.cast(inputs["masked_lm_positions"], "int32")
        cls = inputs.get("next_sentence_positions")
        packed = cls is not None
        cls = ops.zeros_like(masked[:, :1]) if cls is None else ops.cast(cls, "int32")
        n, p = ops.shape(cls)[1], ops.shape(masked)[1]
        enc = self.encoder(inputs, training=training,
                           output_positions=ops.concatenate([cls, masked], axis=1))
        rows = enc["sequence_output"]  # [B, n + p, H]: the [CLS] rows, then the masked ones
        at = ops.broadcast_to(n + ops.arange(p, dtype="int32")[None, :], ops.shape(masked))
        mlm = self.masked_lm(rows, at, self.encoder.word_embeddings)
        # Plain rows: the encoder's pooled_output is already of row 0, the [CLS].
        pooled = self.encoder.pooler(rows[:, :n]) if packed else enc["pooled_output"]
        return {"mlm_logits": mlm, "nsp_logits": self.next_sentence(pooled)}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(BertTaskModel):
    """Sentence(-pair) classification or regression on the pooled [CLS] output.

    Output: `logits` [B, num_classes] float32 (`num_classes=1` for regression).

    Args:
        encoder: the `BertEncoder`.
        num_classes: int, number of logits.
        dropout_rate: float, dropout on the pooled output before the dense layer (training only).
        labels: optional class names in logit order (saved in the config; every export
            serves them instead of "0", "1", ...).
        **kwargs: `keras.Model` arguments.
    """

    def __init__(self, encoder, num_classes, dropout_rate=0.1, labels=None, **kwargs):
        super().__init__(encoder, **kwargs)
        self.num_classes = num_classes
        self.dropout_rate = dropout_rate
        self.labels = check_labels(labels, num_classes, "num_classes")
        self.classifier = DenseLogitsHead(num_classes, dropout_rate,
                                          self.bert_config.initializer_range, name="classifier")

    def _head_shapes(self, h):
        return [(self.classifier, (None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        return {"logits": self.classifier(enc["pooled_output"], training=training)}

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "dropout_rate": self.dropout_rate, "labels": _plain(self.labels)}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSpanLabeler(BertTaskModel):
    """SQuAD-style span extraction -> `start_logits`, `end_logits` [B, S] float32 (where a cut
    batch is padded back, padding positions hold `SPAN_PAD_LOGIT`, -1e9).

    Args:
        encoder: the `BertEncoder`.
        **kwargs: `keras.Model` arguments.
    """

    # What padding positions of restored start/end logits hold (real_length): never a best span.
    padding_values = {"start_logits": SPAN_PAD_LOGIT, "end_logits": SPAN_PAD_LOGIT}

    def __init__(self, encoder, **kwargs):
        super().__init__(encoder, **kwargs)
        self.span = DenseLogitsHead(2, 0.0, self.bert_config.initializer_range, name="span")

    def _head_shapes(self, h):
        return [(self.span, (None, None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        logits = self.span(enc["sequence_output"])
        return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenClassifier(BertTaskModel):
    """Per-token tagging (NER) -> `logits` [B, S, num_labels] float32.

    Args:
        encoder: the `BertEncoder`.
        num_labels: int, number of tags.
        dropout_rate: float, dropout on the sequence output (training only).
        labels: optional tag names in logit order (saved in the config, served by exports).
        **kwargs: `keras.Model` arguments.
    """

    def __init__(self, encoder, num_labels, dropout_rate=0.1, labels=None, **kwargs):
        super().__init__(encoder, **kwargs)
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self.labels = check_labels(labels, num_labels, "num_labels")
        self.tagger = DenseLogitsHead(num_labels, dropout_rate,
                                      self.bert_config.initializer_range, name="tagger")

    def _head_shapes(self, h):
        return [(self.tagger, (None, None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        return {"logits": self.tagger(enc["sequence_output"], training=training)}

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "dropout_rate": self.dropout_rate, "labels": _plain(self.labels)}


def pool(encoder_outputs, input_mask, pooling="cls", normalize=False):
    """One float32 vector per sequence from the encoder's outputs.

    Args:
        encoder_outputs: the BertEncoder's output dict.
        input_mask: int [B, S] (mean pooling only; None: every position counts).
        pooling: "cls" (the pooler: BERT's `pooled_output`), "cls_token" (the [CLS] position
            of `sequence_output`, sentence-transformers' CLS pooling) or "mean" (the mean of
            `sequence_output` over the mask).
        normalize: L2-normalise (sentence-transformers' Normalize: x / max(|x|, 1e-12)).
    """
    if pooling == "cls":
        out = ops.cast(encoder_outputs["pooled_output"], "float32")
    elif pooling == "cls_token":
        out = ops.cast(encoder_outputs["sequence_output"][:, 0, :], "float32")
    elif pooling == "mean":
        seq = ops.cast(encoder_outputs["sequence_output"], "float32")
        mask = (ops.ones(ops.shape(seq)[:2], "float32") if input_mask is None
                else ops.cast(input_mask, "float32"))
        total = ops.sum(seq * mask[:, :, None], axis=1)
        out = total / ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1e-9)
    else:
        raise BertError(f"pooling={pooling!r}: expected one of {', '.join(POOLINGS)}")
    if normalize:
        norm = ops.sqrt(ops.sum(out * out, axis=-1, keepdims=True))
        out = out / ops.maximum(norm, 1e-12)
    return out


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEmbedder(BertTaskModel):
    """Sentence embeddings -> `embedding` [B, H] float32 (no weights beyond the encoder's).

    Args:
        encoder: the `BertEncoder`.
        pooling: "cls", "cls_token" or "mean" (see `pool`).
        normalize: bool, L2-normalise the vectors.
        **kwargs: `keras.Model` arguments.
    """

    def __init__(self, encoder, pooling="cls", normalize=False, **kwargs):
        if pooling not in POOLINGS:
            raise BertError(f"pooling={pooling!r}: expected one of {', '.join(POOLINGS)}")
        super().__init__(encoder, **kwargs)
        self.pooling = pooling
        self.normalize = bool(normalize)

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        return {"embedding": pool(enc, inputs.get("input_mask"), self.pooling, self.normalize)}

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling, "normalize": self.normalize}


def find_encoder(model, what=None):
    """The one BertEncoder of `model`.

    Args:
        model: a `BertEncoder`, a `BertTaskModel`, or a keras.Model with exactly one
            BertEncoder layer (e.g. `build_encoder_model`).
        what: name used in the error message (default: the model's class name).

    Raises:
        BertError: if there is no BertEncoder, or more than one.
    """
    if isinstance(model, BertEncoder):
        return model
    if isinstance(getattr(model, "encoder", None), BertEncoder):
        return model.encoder
    found = [l for l in getattr(model, "layers", []) if isinstance(l, BertEncoder)]
    if len(found) != 1:
        raise BertError(f"{what or type(model).__name__}: expected a BertEncoder, a bert_tf "
                        f"task model or a model with exactly one BertEncoder, found "
                        f"{len(found)} in a {type(model).__name__}")
    return found[0]


def ensure_built(model):
    """Creates the weights of an unbuilt BertEncoder or task model (no input shapes needed).

    Args:
        model: a `BertEncoder`, a `BertTaskModel` or a built keras.Model.

    Returns:
        `model`.

    Raises:
        BertError: for any other unbuilt model (build it by calling it once).
    """
    if model.built and model.weights:
        return model
    if not isinstance(model, (BertEncoder, BertTaskModel)):
        raise BertError(f"{type(model).__name__}: build the model before loading or exporting "
                        f"its weights")
    model.build()
    return model


def build_model(model, batch=2, seq=8):
    """Create all weights and run one dummy batch through `model` (traces it once).

    Args:
        model: a `BertEncoder` or `BertTaskModel`.
        batch: int, dummy batch size.
        seq: int, dummy sequence length.

    Returns:
        `model`.
    """
    inputs = dummy_inputs(batch, seq)
    if isinstance(model, BertPretrainer):
        inputs["masked_lm_positions"] = ops.zeros((batch, 2), dtype="int32")
    model(inputs, training=False)
    return model
