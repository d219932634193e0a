"""Keras models: the pre-training model and the fine-tuning models (encoder + head).

Every model takes the encoder's input dict (`input_word_ids`, `input_mask`, `input_type_ids`,
int32 [B, S]) and returns float32 logits in a dict. Build weights with `model(dummy_inputs())`
or `build_model(model)` before loading checkpoints.
"""
import keras
from keras import ops

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder, dummy_inputs
from bert_tf.modeling.heads import DenseLogitsHead, MaskedLMHead


class _BertModel(keras.Model):
    """Shared plumbing: holds `encoder` built from a BertConfig (dict in get_config)."""

    def __init__(self, bert_config, **kwargs):
        super().__init__(**kwargs)
        if isinstance(bert_config, dict):
            bert_config = BertConfig.from_dict(bert_config)
        self.bert_config = bert_config
        self.encoder = BertEncoder.from_bert_config(bert_config, name="encoder")

    def build(self, input_shape=None):
        # Build sub-layers directly; Keras' default would trace the whole call symbolically
        # first (about 1 s per model even for a tiny config).
        self.encoder.build()
        h = self.bert_config.hidden_size
        for head, shape in self._head_shapes(h):
            head.build(shape)
        self.built = True

    def _head_shapes(self, h):
        return []

    def get_build_config(self):
        return {"input_shape": None}  # build() needs no shapes, so .keras files always rebuild

    def get_config(self):
        return {"bert_config": self.bert_config.to_dict(), "name": self.name,
                "trainable": self.trainable}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(_BertModel):
    """Encoder + masked-LM head (tied embeddings) + next-sentence head.

    Extra input: `masked_lm_positions` int [B, P]. Outputs: `mlm_logits` [B, P, V],
    `nsp_logits` [B, 2], plus the encoder's `sequence_output` / `pooled_output`.
    """

    def __init__(self, bert_config, **kwargs):
        super().__init__(bert_config, **kwargs)
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
        nsp = self.next_sentence(enc["pooled_output"])
        return {"mlm_logits": mlm, "nsp_logits": nsp,
                "sequence_output": enc["sequence_output"], "pooled_output": enc["pooled_output"]}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(_BertModel):
    """Sentence(-pair) classification/regression on the pooled [CLS] output -> `logits` [B, C]."""

    def __init__(self, bert_config, num_classes, dropout_rate=0.1, **kwargs):
        super().__init__(bert_config, **kwargs)
        self.num_classes = num_classes
        self.dropout_rate = dropout_rate
        self.classifier = DenseLogitsHead(num_classes, dropout_rate,
                                          self.bert_config.initializer_range, name="classifier")

    def _head_shapes(self, h):
        return [(self.classifier, (None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        return {"logits": self.classifier(enc["pooled_output"], training=training)}

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "dropout_rate": self.dropout_rate}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSpanLabeler(_BertModel):
    """SQuAD-style span extraction -> `start_logits`, `end_logits` [B, S]."""

    def __init__(self, bert_config, **kwargs):
        super().__init__(bert_config, **kwargs)
        self.span = DenseLogitsHead(2, 0.0, self.bert_config.initializer_range, name="span")

    def _head_shapes(self, h):
        return [(self.span, (None, None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        logits = self.span(enc["sequence_output"])
        return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenClassifier(_BertModel):
    """Per-token tagging (NER) -> `logits` [B, S, num_labels]."""

    def __init__(self, bert_config, num_labels, dropout_rate=0.1, **kwargs):
        super().__init__(bert_config, **kwargs)
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self.tagger = DenseLogitsHead(num_labels, dropout_rate,
                                      self.bert_config.initializer_range, name="tagger")

    def _head_shapes(self, h):
        return [(self.tagger, (None, None, h))]

    def call(self, inputs, training=None):
        enc = self.encoder(inputs, training=training)
        return {"logits": self.tagger(enc["sequence_output"], training=training)}

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "dropout_rate": self.dropout_rate}


def build_model(model, batch=2, seq=8):
    """Create all weights by running one dummy batch; returns the model."""
    inputs = dummy_inputs(batch, seq)
    if isinstance(model, BertPretrainer):
        inputs["masked_lm_positions"] = ops.zeros((batch, 2), dtype="int32")
    model(inputs, training=False)
    return model
