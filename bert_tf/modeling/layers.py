"""Keras 3 building blocks of the BERT encoder: embeddings, self-attention, transformer block.

Kernels are kept in the original's shapes ([H, H] for q/k/v, [H, I] / [I, H] for the FFN) so
that TF1 checkpoints map onto them without reshapes. Softmax and LayerNorm run in float32 under
mixed precision.
"""
import keras
import tensorflow as tf
from keras import ops

from bert_tf.modeling import fused

LAYER_NORM_EPSILON = 1e-12
ATTENTION_MASK_ADDER = -10000.0  # what the original adds to masked attention scores


def get_activation(name):
    """The activation function for a `hidden_act` name.

    `gelu` (and HF's `gelu_new`) is the original release's tanh approximation; `gelu_exact` is
    the erf form (HF's `gelu`).

    Args:
        name: str, one of `bert_tf.modeling.config.ACTIVATIONS`.
    """
    if name in ("gelu", "gelu_new"):
        return lambda x: keras.activations.gelu(x, approximate=True)
    if name == "gelu_exact":
        return lambda x: keras.activations.gelu(x, approximate=False)
    if name in ("swish", "silu"):
        return keras.activations.silu
    if name in ("relu", "tanh", "linear"):
        return keras.activations.get(name)
    raise ValueError(f"unknown hidden_act {name!r}")


def initializer(stddev):
    """The original's weight initializer: truncated normal with `stddev` (initializer_range)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def _layer_norm(name):
    # float32 policy: statistics of fp16/bf16 activations are not precise enough.
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, dtype="float32", name=name)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEmbeddings(keras.layers.Layer):
    """Word + token type + position embeddings, then LayerNorm and dropout.

    Called as `layer(input_word_ids, input_type_ids, training=None, position_ids=None)` ->
    [B, S, hidden_size]; `position_ids` int [B, S] (packed rows restart at 0 for each
    sequence) gathers the position embeddings by id instead of taking rows 0..S-1.

    Args:
        vocab_size: int, rows of the word embedding table.
        hidden_size: int, embedding width.
        max_position_embeddings: int, longest sequence (rows of the position table).
        type_vocab_size: int, number of segment (token type) ids.
        initializer_range: float, stddev of the truncated-normal initializer.
        dropout_rate: float, dropout after the LayerNorm (training only).
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).
    """

    def __init__(self, vocab_size, hidden_size, max_position_embeddings=512, type_vocab_size=2,
                 initializer_range=0.02, dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.dropout_rate = dropout_rate
        self.layer_norm = _layer_norm("layer_norm")
        self.dropout = keras.layers.Dropout(dropout_rate)

    def build(self, input_shape=None):
        init = initializer(self.initializer_range)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.hidden_size), initializer=init)
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings", shape=(self.type_vocab_size, self.hidden_size),
            initializer=init)
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_position_embeddings, self.hidden_size),
            initializer=init)
        self.layer_norm.build((None, None, self.hidden_size))

    def call(self, input_word_ids, input_type_ids, training=None, position_ids=None):
        x = ops.take(self.word_embeddings, input_word_ids, axis=0)
        x = x + ops.take(self.token_type_embeddings, input_type_ids, axis=0)
        if position_ids is None:
            seq_len = ops.shape(input_word_ids)[1]
            x = x + ops.expand_dims(self.position_embeddings[:seq_len], 0)
        else:
            x = x + ops.take(self.position_embeddings, position_ids, axis=0)
        x = ops.cast(self.layer_norm(x), self.compute_dtype)
        return self.dropout(x, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                      max_position_embeddings=self.max_position_embeddings,
                      type_vocab_size=self.type_vocab_size,
                      initializer_range=self.initializer_range, dropout_rate=self.dropout_rate)
        return config


def attention_bias(input_mask, dtype="float32"):
    """Additive attention bias from a padding mask, as the original computes it for 0/1.

    Read as `mask > 0`: any other positive value (a packed row's sequence index given as a mask)
    is a real token, never a positive bias.

    Args:
        input_mask: int or float [B, S], > 0 for real tokens and 0 for padding.
        dtype: dtype of the result.

    Returns:
        [B, 1, 1, S]: 0 for real tokens, -10000 for padding.
    """
    real = ops.cast(ops.greater(input_mask, 0), dtype)
    return (1.0 - real)[:, None, None, :] * ATTENTION_MASK_ADDER


def packed_attention_bias(sequence_index, dtype="float32"):
    """Block-diagonal additive attention bias of packed rows, built from the sequence index.

    A token attends only to the tokens of its own sequence, so the sequences of a pack do not
    see each other (no cross-contamination); the [B, S, S] mask is never stored in records.

    Args:
        sequence_index: int [B, S]: 1, 2, 3, ... = which sequence of the pack; 0 = padding.
        dtype: dtype of the result.

    Returns:
        [B, 1, S, S]: 0 where query and key are in the same sequence, -10000 elsewhere (padding
        keys always; a padding query attends to nothing real, and nothing reads it).
    """
    idx = ops.cast(sequence_index, "int32")
    same = ops.logical_and(ops.equal(idx[:, :, None], idx[:, None, :]), idx[:, None, :] > 0)
    return (1.0 - ops.cast(same, dtype))[:, None, :, :] * ATTENTION_MASK_ADDER


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSelfAttention(keras.layers.Layer):
    """Multi-head self-attention with separate [H, H] query/key/value kernels.

    Called as `layer(x, bias, training=None, queries=None)` with `x` [B, S, H] and `bias` from
    `attention_bias`; returns the context [B, S, H] (before the output projection, which lives
    in TransformerBlock as in the original's `attention/output/dense`). `queries` [B, P, H]
    (rows of `x`) attend instead of all of `x`, with `bias` [B, 1, 1 or P, S]: context [B, P, H].

    Args:
        hidden_size: int, H.
        num_attention_heads: int, must divide `hidden_size`.
        initializer_range: float, stddev of the truncated-normal initializer.
        attention_dropout_rate: float, dropout on the attention probabilities.
        **kwargs: `keras.layers.Layer` arguments.
    """

    def __init__(self, hidden_size, num_attention_heads, initializer_range=0.02,
                 attention_dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.head_size = hidden_size // num_attention_heads
        self.initializer_range = initializer_range
        self.attention_dropout_rate = attention_dropout_rate
        dense = lambda name: keras.layers.Dense(hidden_size, kernel_initializer=initializer(
            initializer_range), name=name)
        self.query, self.key, self.value = dense("query"), dense("key"), dense("value")
        self.dropout = keras.layers.Dropout(attention_dropout_rate)

    def build(self, input_shape):
        for d in (self.query, self.key, self.value):
            d.build(input_shape)

    def _heads(self, x):
        b, s = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (b, s, self.num_attention_heads, self.head_size))

    def call(self, x, bias, training=None, queries=None):
        queries = x if queries is None else queries
        q, k, v = (self._heads(self.query(queries)), self._heads(self.key(x)),
                   self._heads(self.value(x)))
        scores = ops.einsum("bqnd,bknd->bnqk", q, k)
        # Softmax in float32 (the bias of -10000 overflows fp16 anyway).
        scores = (ops.cast(scores, "float32") * (1.0 / float(self.head_size) ** 0.5)
                  + ops.cast(bias, "float32"))
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probs = self.dropout(probs, training=training)
        context = ops.einsum("bnqk,bknd->bqnd", probs, v)
        b, s = ops.shape(queries)[0], ops.shape(queries)[1]
        return ops.reshape(context, (b, s, self.hidden_size))

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
                      initializer_range=self.initializer_range,
                      attention_dropout_rate=self.attention_dropout_rate)
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class TransformerBlock(keras.layers.Layer):
    """Post-LN transformer layer as in the original: LN(x + attn(x)), then LN(h + FFN(h)).

    Called as `layer(x, bias, training=None, positions=None)` with `x` [B, S, H] -> [B, S, H].
    `positions` int [B, P] computes the output only there -> [B, P, H] (keys and values still
    come from every position), with `bias` [B, 1, 1, S] or the queries' rows [B, 1, P, S]: a
    model that reads few positions of the last layer (masked-LM and NSP in pre-training) skips
    the rest of its work. With dropout off the rows equal the full output's; in training they
    are equal in distribution (the dropout masks are drawn for [B, P, ...]).

    Args:
        hidden_size: int, H.
        num_attention_heads: int, must divide `hidden_size`.
        intermediate_size: int, width of the feed-forward layer.
        hidden_act: str, feed-forward activation (see `get_activation`).
        hidden_dropout_prob: float, dropout after the attention output and the FFN.
        attention_probs_dropout_prob: float, dropout on the attention probabilities.
        initializer_range: float, stddev of the truncated-normal initializer.
        **kwargs: `keras.layers.Layer` arguments.
    """

    def __init__(self, hidden_size, num_attention_heads, intermediate_size, hidden_act="gelu",
                 hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        init = initializer(initializer_range)
        self.attention = BertSelfAttention(hidden_size, num_attention_heads, initializer_range,
                                           attention_probs_dropout_prob, name="self")
        self.attention_output = keras.layers.Dense(hidden_size, kernel_initializer=init,
                                                   name="attention_output")
        self.attention_layer_norm = _layer_norm("attention_layer_norm")
        self.intermediate = keras.layers.Dense(intermediate_size, kernel_initializer=init,
                                               name="intermediate")
        self.output_dense = keras.layers.Dense(hidden_size, kernel_initializer=init,
                                               name="output_dense")
        self.output_layer_norm = _layer_norm("output_layer_norm")
        self.dropout = keras.layers.Dropout(hidden_dropout_prob)
        self._act = get_activation(hidden_act)
        self._train_act = fused.training_activation(hidden_act) or self._act

    def build(self, input_shape):
        self.attention.build(input_shape)
        self.attention_output.build(input_shape)
        self.attention_layer_norm.build(input_shape)
        self.intermediate.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
        self.output_layer_norm.build(input_shape)

    def call(self, x, bias, training=None, positions=None):
        queries = None
        if positions is not None:
            queries = tf.gather(x, ops.cast(positions, "int32"), batch_dims=1)
        attn = self.attention(x, bias, training=training, queries=queries)
        x = x if queries is None else queries  # the residual of the rows computed
        attn = self.dropout(self.attention_output(attn), training=training)
        h = ops.cast(self.attention_layer_norm(x + attn), self.compute_dtype)
        act = self._train_act if training is True else self._act
        ffn = self.output_dense(act(self.intermediate(h)))
        ffn = self.dropout(ffn, training=training)
        return ops.cast(self.output_layer_norm(h + ffn), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
                      intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
                      hidden_dropout_prob=self.hidden_dropout_prob,
                      attention_probs_dropout_prob=self.attention_probs_dropout_prob,
                      initializer_range=self.initializer_range)
        return config
