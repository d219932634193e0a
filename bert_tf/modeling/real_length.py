"""Compute only the real tokens: cut a padded batch to its longest real length, pad back after.

BERT's outputs at real positions do not depend on padding (a padded key's attention bias is
-10000, whose softmax weight underflows to exactly 0), so a batch padded to `max_seq_length`
can be cut to `real_length(input_mask)` (the last real position + 1 over the batch) without
changing any real-position, pooled or task output beyond float rounding.

Two uses:
- In-graph (serving, SavedModels, eager prediction): `real_length` on the batch, optionally
  rounded up with `bucket_length(..., step=)`, then `cut` the inputs and `pad_back` sequence
  outputs to the fixed length. Dynamic shapes; plain TF ops that stock TF Serving links
  (Max, Range, Slice, Pad...).
- Input pipelines (fine-tuning, evaluation, prediction under `tf.function`/XLA/TPU): the cut
  length is rounded up to one of `length_buckets(max_seq_length)`, so a run compiles at most
  8 shapes at <= 128 and at most 16 above.

>>> import tensorflow as tf
>>> from bert_tf.modeling import real_length as rl
>>> mask = tf.constant([[1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
>>> int(rl.real_length(mask))
3
>>> rl.length_buckets(128)
[16, 32, 48, 64, 80, 96, 112, 128]
>>> int(rl.bucket_length(tf.constant(17), 128))
32
"""
import math

import tensorflow as tf

MASK_KEYS = ("input_mask",)  # the feature that says which positions are real
# What start/end logits hold at padding positions of a restored output: far below any real
# logit, so no decoder picks them; finite, so JSON carries it and a start + an end does not
# overflow float32.
SPAN_PAD_LOGIT = -1e9


def bucket_step(max_seq_length):
    """The rounding step of `max_seq_length`: at most 8 buckets up to 128 and 16 above, each a
    multiple of 8 (lengths that suit matmul tiling).

    Args:
        max_seq_length: int, the fixed (padded) length.
    """
    buckets = 8 if max_seq_length <= 128 else 16
    return max(8, int(math.ceil(max_seq_length / buckets / 8.0)) * 8)


def length_buckets(max_seq_length, step=None):
    """Every length a batch can be cut to: multiples of `step` below `max_seq_length`, then
    `max_seq_length` itself.

    Args:
        max_seq_length: int.
        step: int or None (None: `bucket_step(max_seq_length)`).
    """
    step = step or bucket_step(max_seq_length)
    return list(range(step, max_seq_length, step)) + [max_seq_length]


def real_length(input_mask):
    """The last real position + 1 over the batch (a scalar int32 tensor, at least 1).

    Args:
        input_mask: int or bool [B, S]; > 0 marks a real token. Real tokens need not be a
            prefix: the cut keeps everything up to the last one.
    """
    mask = tf.convert_to_tensor(input_mask)
    real = tf.cast(mask > tf.zeros([], mask.dtype), tf.int32) if mask.dtype != tf.bool \
        else tf.cast(mask, tf.int32)
    positions = tf.range(1, tf.shape(real)[-1] + 1, dtype=tf.int32)
    last = tf.reduce_max(real * positions)  # 0 for an empty batch or all-padding rows
    return tf.maximum(last, 1)


def bucket_length(length, max_seq_length, step=None):
    """`length` rounded up to the next of `length_buckets(max_seq_length, step)`.

    Args:
        length: scalar int tensor (e.g. `real_length(mask)`).
        max_seq_length: int or scalar int tensor, the cap.
        step: int or None (None: `bucket_step(max_seq_length)`, which needs a Python int).
    """
    step = step or bucket_step(int(max_seq_length))
    length = tf.cast(length, tf.int32)
    rounded = (length + step - 1) // step * step
    return tf.minimum(rounded, tf.cast(max_seq_length, tf.int32))


def cut(features, length, keys=None):
    """`features` with every [B, S, ...] value cut to [B, length, ...].

    Args:
        features: dict of tensors.
        length: scalar int tensor.
        keys: the keys to cut (None: every value of rank >= 2 whose second dimension equals
            that of `input_mask`, which must then be static).
    """
    if keys is None:
        seq = _seq_dim(features)
        if seq is None:  # nothing to compare with: cutting nothing would pass silently
            raise ValueError("real_length.cut: keys=None needs an input_mask with a static "
                             "length (axis 1); pass keys=")
        keys = [k for k, v in features.items() if _is_sequence(v, seq)]
    out = dict(features)
    for k in keys:
        out[k] = out[k][:, :length]
    return out


def pad_back(x, seq_length, value=0):
    """A [B, L, ...] tensor padded on axis 1 to `seq_length` with `value` (the inverse of `cut`
    for outputs: positions past the cut hold `value`).

    Args:
        x: tensor of rank >= 2.
        seq_length: int or scalar int tensor, the length to restore.
        value: the padding value (0 for hidden states, e.g. -10000 for logits).
    """
    x = tf.convert_to_tensor(x)
    extra = tf.maximum(tf.cast(seq_length, tf.int32) - tf.shape(x)[1], 0)
    paddings = tf.concat([[[0, 0], [0, extra]], tf.zeros([tf.rank(x) - 2, 2], tf.int32)], 0)
    out = tf.pad(x, paddings, constant_values=tf.cast(value, x.dtype))
    if isinstance(seq_length, int):
        out = tf.ensure_shape(out, [x.shape[0], seq_length] + x.shape[2:].as_list())
    return out


def restore(x, input_mask, value=0, seq_length=None):
    """A [B, L, ...] output of a cut batch back to [B, S, ...]; every padding position
    (input_mask 0, past the cut or not) holds `value`, so an output does not depend on what
    else was in the batch.

    Args:
        x: tensor [B, L, ...], L <= S.
        input_mask: int [B, S] mask (the uncut one), or the cut [B, L] one with `seq_length`.
        value: what padding positions hold (0 for hidden states; see SPAN_PAD_LOGIT).
        seq_length: S (None: input_mask's length).
    """
    x = tf.convert_to_tensor(x)
    input_mask = tf.convert_to_tensor(input_mask)
    if seq_length is None:
        seq_length = tf.shape(input_mask)[1]
        static = input_mask.shape[1]
    else:
        static = seq_length if isinstance(seq_length, int) else None
        input_mask = pad_back(input_mask, seq_length, 0)
    full = pad_back(x, seq_length, value)
    keep = input_mask > 0
    for _ in range(x.shape.rank - 2):
        keep = keep[..., None]
    out = tf.where(keep, full, tf.cast(value, x.dtype))
    batch = x.shape[0] if x.shape[0] is not None else input_mask.shape[0]
    out.set_shape(tf.TensorShape([batch, static]).concatenate(x.shape[2:]))
    return out


def _seq_dim(features):
    for key in MASK_KEYS:
        if key in features:
            return tf.convert_to_tensor(features[key]).shape[1]
    return None


def _is_sequence(v, seq):
    shape = getattr(v, "shape", None)
    return shape is not None and len(shape) >= 2 and seq is not None and shape[1] == seq


def cut_batch_fn(max_seq_length, keys=None, step=None):
    """A `tf.data` map function: each batch (a dict, or a (features, labels[, weights]) tuple)
    cut to its `bucket_length(real_length(input_mask))`.

    Labels and weights of shape [B, S] (token tagging) are cut with the features.

    Args:
        max_seq_length: int, the records' fixed length.
        keys: feature keys to cut (None: every [B, max_seq_length, ...] value).
        step: rounding step (None: `bucket_step(max_seq_length)`).
    """
    def _cut_value(v, length):
        if getattr(v, "shape", None) is not None and len(v.shape) >= 2 \
                and v.shape[1] == max_seq_length:
            return v[:, :length]
        return v

    def fn(*batch):
        first = batch[0]
        mask = first["input_mask"]
        length = bucket_length(real_length(mask), max_seq_length, step)
        feats = {k: (v[:, :length] if (keys is None and _is_sequence(v, max_seq_length))
                     or (keys is not None and k in keys) else v) for k, v in first.items()}
        rest = tuple(tf.nest.map_structure(lambda v: _cut_value(v, length), b)
                     for b in batch[1:])
        return (feats,) + rest if rest else feats
    return fn
