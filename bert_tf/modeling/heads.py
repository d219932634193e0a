"""Task heads on top of BertEncoder outputs. All return float32 logits (mixed-precision safe)."""
import keras
import tensorflow as tf
from keras import ops

from bert_tf.modeling import layers as bl


def gather_positions(sequence_output, positions):
    """Vectors at given positions of each sequence.

    Args:
        sequence_output: [B, S, H].
        positions: int [B, P], indices into S.

    Returns:
        [B, P, H].
    """
    return tf.gather(sequence_output, tf.cast(positions, tf.int32), batch_dims=1)


def pooled_at(encoder, sequence_output, cls_positions):
    """The encoder's pooler (dense + tanh, as on [CLS] of an ordinary row) applied to each
    packed sequence's [CLS] vector.

    Args:
        encoder: the BertEncoder (its `pooler`).
        sequence_output: [B, S, H].
        cls_positions: int [B, N], the [CLS] position of each sequence of the pack.

    Returns:
        [B, N, H].
    """
    return encoder.pooler(gather_positions(sequence_output, cls_positions))


@keras.saving.register_keras_serializable(package="bert_tf")
class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head: transform (dense + act + LayerNorm), then logits against the tied word
    embeddings plus a per-token bias (the original's `cls/predictions`).

    Called as `head(sequence_output, masked_positions, embedding_table)` -> float32 [B, P, V].

    Args:
        hidden_size: int, H.
        vocab_size: int, V (rows of the word embedding table).
        hidden_act: str, activation of the transform (see `layers.get_activation`).
        initializer_range: float, stddev of the truncated-normal initializer.
        **kwargs: `keras.layers.Layer` arguments.
    """

    def __init__(self, hidden_size, vocab_size, hidden_act="gelu", initializer_range=0.02,
                 **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.transform = keras.layers.Dense(
            hidden_size, activation=bl.get_activation(hidden_act),
            kernel_initializer=bl.initializer(initializer_range), name="transform")
        self.layer_norm = bl._layer_norm("layer_norm")

    def build(self, input_shape=None):
        self.transform.build((None, self.hidden_size))
        self.layer_norm.build((None, self.hidden_size))
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,),
                                           initializer="zeros")

    def call(self, sequence_output, masked_positions, embedding_table):
        x = gather_positions(sequence_output, masked_positions)
        x = ops.cast(self.layer_norm(self.transform(x)), self.compute_dtype)
        # One 2-D MatMul against the table as stored ([V, H], transpose_b) and a BiasAdd: no
        # transpose of the table (nor of its [V, H] gradient), and in float32 without XLA TF
        # fuses the bias into the MatMul. x @ transpose(table) + bias took 1.22x as long, the
        # head's forward + backward with the loss at bert-tiny's [640, 128] x [128, 30522]
        # (2-core CPU, bench/cpu_allocator.py --what head).
        table = tf.cast(embedding_table, self.compute_dtype)
        logits = tf.matmul(tf.reshape(x, [-1, self.hidden_size]), table, transpose_b=True)
        logits = tf.nn.bias_add(tf.cast(logits, tf.float32), tf.cast(self.output_bias, tf.float32))
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.vocab_size]], 0))

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, vocab_size=self.vocab_size,
                      hidden_act=self.hidden_act, initializer_range=self.initializer_range)
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class DenseLogitsHead(keras.layers.Layer):
    """Optional dropout, then a dense layer to `num_outputs` float32 logits.

    Used for NSP (2 on pooled), sentence classification/regression (pooled), span start/end
    (2 on sequence) and token tagging (labels on sequence).

    Args:
        num_outputs: int, number of logits.
        dropout_rate: float, dropout on the input (training only).
        initializer_range: float, stddev of the truncated-normal kernel initializer.
        **kwargs: `keras.layers.Layer` arguments.
    """

    def __init__(self, num_outputs, dropout_rate=0.0, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.dropout = keras.layers.Dropout(dropout_rate)
        self.dense = keras.layers.Dense(num_outputs,
                                        kernel_initializer=bl.initializer(initializer_range),
                                        name="dense")

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, x, training=None):
        return ops.cast(self.dense(self.dropout(x, training=training)), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(num_outputs=self.num_outputs, dropout_rate=self.dropout_rate,
                      initializer_range=self.initializer_range)
        return config
