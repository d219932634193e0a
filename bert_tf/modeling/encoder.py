"""BertEncoder: embeddings + N post-LN transformer blocks + tanh pooler on [CLS].

Inputs follow the TF Hub / Model Garden convention: a dict of int32 `input_word_ids`,
`input_mask`, `input_type_ids` ([batch, seq]), plus `input_positions` and
`input_sequence_index` for packed rows (`PACKED_INPUTS`). `input_mask` is always a padding
mask, read as `> 0`. Outputs: `sequence_output` [B, S, H],
`pooled_output` [B, H] and `encoder_outputs` (list of every layer's [B, S, H]).

>>> import bert_tf, keras
>>> from bert_tf.modeling.config import BertConfig
>>> from bert_tf.modeling.encoder import BertEncoder, dummy_inputs
>>> cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
...                  intermediate_size=32, max_position_embeddings=32)
>>> out = BertEncoder.from_bert_config(cfg)(dummy_inputs(batch=3, seq=7))
>>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape), len(out["encoder_outputs"])
((3, 7, 16), (3, 16), 2)
"""
import keras
import tensorflow as tf
from keras import ops

from bert_tf import BertError
from bert_tf.modeling import layers as bl
from bert_tf.modeling.config import BertConfig

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# Packed pre-training rows add `input_positions` [B, S] (restarting at 0 for each sequence) and
# `input_sequence_index` [B, S] (1, 2, ... = which sequence; 0 = padding): attention is then
# block-diagonal. The index has its own name so that a mask is never taken for one (or one for
# a mask). Training-only: exports and served models take INPUT_NAMES.
PACKED_INPUTS = ("input_positions", "input_sequence_index")


def dummy_inputs(batch=2, seq=8):
    """A valid input dict (all word id 1, full mask), handy for building weights.

    Args:
        batch: int, batch size.
        seq: int, sequence length.
    """
    ids = ops.ones((batch, seq), dtype="int32")
    return {"input_word_ids": ids, "input_mask": ids, "input_type_ids": ops.zeros_like(ids)}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(keras.layers.Layer):
    """The BERT transformer encoder (the original's `bert/` tower), keras-hub's "backbone".

    Construct from a BertConfig with `from_bert_config`; the arguments are the fields of
    `bert_config.json` (validated with one-line `BertError`s).

    Called as `encoder(inputs, training=None, output_positions=None)` -> `sequence_output`
    [B, S, H], `pooled_output` [B, H] (of position 0) and `encoder_outputs` (each block's).
    `output_positions` int [B, P] runs the last block only at those positions: its output,
    `sequence_output` and `encoder_outputs[-1]`, is then [B, P, H] (with dropout off, those
    rows of the full one; in training equal in distribution), and `pooled_output` is of
    `output_positions[:, 0]`.

    Args:
        vocab_size: int, rows of the word embedding table.
        hidden_size: int, H.
        num_hidden_layers: int, number of transformer blocks.
        num_attention_heads: int, must divide `hidden_size`.
        intermediate_size: int, feed-forward width.
        hidden_act: str, feed-forward activation ("gelu" is the original's tanh form).
        hidden_dropout_prob: float, dropout on embeddings and block outputs.
        attention_probs_dropout_prob: float, dropout on attention probabilities.
        max_position_embeddings: int, longest sequence.
        type_vocab_size: int, number of segment ids.
        initializer_range: float, stddev of the truncated-normal initializer.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).
    """

    def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512,
                 type_vocab_size=2, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        # Validates sizes/activation with one-line errors.
        self.bert_config = BertConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
            hidden_act=hidden_act, hidden_dropout_prob=hidden_dropout_prob,
            attention_probs_dropout_prob=attention_probs_dropout_prob,
            max_position_embeddings=max_position_embeddings, type_vocab_size=type_vocab_size,
            initializer_range=initializer_range)
        c = self.bert_config
        self.embeddings = bl.BertEmbeddings(
            c.vocab_size, c.hidden_size, c.max_position_embeddings, c.type_vocab_size,
            c.initializer_range, c.hidden_dropout_prob, name="embeddings")
        # One attribute per block, not a list: Keras 3's TrackedList is invisible to
        # tf.train.Checkpoint on the TF backend, so listed blocks would silently not be saved.
        for i in range(c.num_hidden_layers):
            setattr(self, f"layer_{i}", bl.TransformerBlock(
                c.hidden_size, c.num_attention_heads, c.intermediate_size, c.hidden_act,
                c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.initializer_range,
                name=f"layer_{i}"))
        self.pooler = keras.layers.Dense(c.hidden_size, activation="tanh",
                                         kernel_initializer=bl.initializer(c.initializer_range),
                                         name="pooler")

    @classmethod
    def from_bert_config(cls, config, **kwargs):
        """An encoder for a `BertConfig`; kwargs go to the Layer (e.g. `name`)."""
        return cls(**config.to_dict(), **kwargs)

    def build(self, input_shape=None):
        h = self.bert_config.hidden_size
        self.embeddings.build()
        for block in self.transformer_layers:
            block.build((None, None, h))
        self.pooler.build((None, h))

    def get_build_config(self):
        return {"input_shape": None}  # build() needs no shapes, so .keras files always rebuild

    @property
    def transformer_layers(self):
        """The blocks in order (attributes `layer_0` ... `layer_{L-1}`)."""
        return [getattr(self, f"layer_{i}") for i in range(self.bert_config.num_hidden_layers)]

    @property
    def word_embeddings(self):
        """The [vocab_size, H] word embedding table; the MLM head reuses it as output weights."""
        return self.embeddings.word_embeddings

    def call(self, inputs, training=None, output_positions=None):
        ids = ops.cast(inputs["input_word_ids"], "int32")
        mask = inputs.get("input_mask")
        mask = ops.ones_like(ids) if mask is None else ops.cast(mask, "int32")
        type_ids = inputs.get("input_type_ids")
        type_ids = ops.zeros_like(ids) if type_ids is None else ops.cast(type_ids, "int32")
        positions = inputs.get("input_positions")
        index = inputs.get("input_sequence_index")
        if (positions is None) != (index is None):  # half a packed row would train wrong
            error = BertError("BertEncoder inputs: packed rows need both input_positions and "
                              "input_sequence_index (see encoder.PACKED_INPUTS); got only "
                              f"{'input_positions' if index is None else 'input_sequence_index'}")
            error._keras_call_info_injected = True  # Keras then keeps it one line
            raise error
        if positions is None:
            x = self.embeddings(ids, type_ids, training=training)
            bias = bl.attention_bias(mask)
        else:  # packed rows (see PACKED_INPUTS); input_mask is not needed
            x = self.embeddings(ids, type_ids, training=training,
                                position_ids=ops.cast(positions, "int32"))
            bias = bl.packed_attention_bias(index)
        outputs = []
        blocks = self.transformer_layers
        for block in blocks[:-1]:
            x = block(x, bias, training=training)
            outputs.append(x)
        if output_positions is not None:
            output_positions = ops.cast(output_positions, "int32")
            if positions is not None:  # packed: the queries' rows of the [B, 1, S, S] bias
                bias = tf.gather(bias, output_positions, axis=2, batch_dims=1)
        x = blocks[-1](x, bias, training=training, positions=output_positions)
        outputs.append(x)
        pooled = self.pooler(x[:, 0, :])
        return {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": outputs}

    def compute_output_spec(self, inputs, training=None, output_positions=None):
        ids = inputs["input_word_ids"]
        b, s = ids.shape[0], ids.shape[1]
        h = self.bert_config.hidden_size
        spec = lambda length: keras.KerasTensor((b, length, h), dtype=self.compute_dtype)
        last = spec(s if output_positions is None else output_positions.shape[1])
        return {"sequence_output": last,
                "pooled_output": keras.KerasTensor((b, h), dtype=self.compute_dtype),
                "encoder_outputs": [spec(s) for _ in
                                    range(self.bert_config.num_hidden_layers - 1)] + [last]}

    def get_config(self):
        config = super().get_config()
        config.update(self.bert_config.to_dict())
        return config

    def export(self, filepath, **kwargs):
        """Writes the TF Serving SavedModel (embeddings; ids in, text in with vocab_file=) at
        filepath, e.g. `<model_base>/1`: see `bert_tf.export.keras_export.export_model`.

        Args:
            filepath: the SavedModel folder.
            **kwargs: `export_model` keyword arguments.
        """
        import bert_tf  # the export package is a higher layer: reached through its exporter
        return bert_tf.exporter("model")(self, filepath, **kwargs)


def encoder_inputs(seq_length=None):
    """Symbolic Keras inputs (int32, dynamic batch; dynamic seq unless given).

    Args:
        seq_length: int or None, static sequence length.
    """
    return {name: keras.Input(shape=(seq_length,), dtype="int32", name=name)
            for name in INPUT_NAMES}


def build_encoder_model(config, seq_length=None, name="bert_encoder"):
    """A functional keras.Model around a new BertEncoder (dict in, dict out).

    Args:
        config: a `BertConfig`.
        seq_length: int or None, static sequence length of the inputs.
        name: str, the model's name.
    """
    encoder = BertEncoder.from_bert_config(config, name="encoder")
    inputs = encoder_inputs(seq_length)
    return keras.Model(inputs, encoder(inputs), name=name)
