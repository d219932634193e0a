"""Outputs of a cut call padded back to the full length (`real_length`'s restore half):
every padding position (input_mask 0, past the cut or in a hole) holds 0 or what the model
declares (`padding_values`), so an output does not depend on what else was in the batch."""
import tensorflow as tf


def is_position_output(x):
    """Whether output `x` of a call on inputs of dynamic length is per position: its axis 1
    is dynamic too (the one rule; see the module docstring).

    Args:
        x: a tensor or TensorSpec.
    """
    return x.shape.rank is not None and x.shape.rank >= 2 and x.shape[1] is None


def padding_values(model):
    """{output key: what its padding positions hold} as the model (or its inner `.model`)
    declares in `padding_values`; other outputs hold 0."""
    for m in (model, getattr(model, "model", None)):
        values = getattr(m, "padding_values", None)
        if values is not None:
            return dict(values)
    return {}


def _pad_value(value, dtype):
    """`value` as `dtype`, clamped to its finite range (-1e9 is float16's min, not -inf)."""
    if dtype.is_floating:
        value = min(max(float(value), float(dtype.min)), float(dtype.max))
    return tf.cast(value, dtype)


def pad_back(x, seq_length, value=0):
    """A [B, L, ...] tensor padded on axis 1 to `seq_length` with `value` (the inverse of `cut`
    for outputs: positions past the cut hold `value`).

    Args:
        x: tensor of rank >= 2.
        seq_length: int or scalar int tensor, the length to restore.
        value: the padding value.
    """
    x = tf.convert_to_tensor(x)
    extra = tf.maximum(tf.cast(seq_length, tf.int32) - tf.shape(x)[1], 0)
    paddings = tf.concat([[[0, 0], [0, extra]], tf.zeros([tf.rank(x) - 2, 2], tf.int32)], 0)
    out = tf.pad(x, paddings, constant_values=_pad_value(value, x.dtype))
    if isinstance(seq_length, int):
        out = tf.ensure_shape(out, [x.shape[0], seq_length] + x.shape[2:].as_list())
    return out


def restore(x, input_mask, value=0, seq_length=None, length=None):
    """A [B, L, ...] output of a cut batch back to [B, S, ...]; every padding position
    (input_mask 0, past the cut or not) holds `value`.

    Args:
        x: tensor [B, L, ...], L <= S.
        input_mask: [B, S] mask (the uncut one), or the cut [B, L] one with `seq_length`.
        value: what padding positions hold (cast to x's dtype, clamped to its finite range).
        seq_length: S (None: input_mask's length).
        length: the cut length L, if known: x's axis 1 must equal it (an error otherwise, so
            an output taken for per position by mistake fails loudly).
    """
    x = tf.convert_to_tensor(x)
    if length is not None:
        tf.debugging.assert_equal(tf.shape(x)[1], tf.cast(length, tf.int32), message=(
            "real_length.restore: an output taken for per position does not have the cut "
            "length on axis 1"))
    input_mask = tf.convert_to_tensor(input_mask)
    if seq_length is None:
        seq_length = tf.shape(input_mask)[1]
        static = input_mask.shape[1]
    else:
        static = seq_length if isinstance(seq_length, int) else None
        input_mask = pad_back(input_mask, seq_length, 0)
    full = pad_back(x, seq_length, value)
    keep = input_mask > tf.zeros([], input_mask.dtype) if input_mask.dtype != tf.bool \
        else input_mask
    for _ in range(x.shape.rank - 2):
        keep = keep[..., None]
    out = tf.where(keep, full, _pad_value(value, x.dtype))
    batch = x.shape[0] if x.shape[0] is not None else input_mask.shape[0]
    out.set_shape(tf.TensorShape([batch, static]).concatenate(x.shape[2:]))
    return out


def restore_outputs(outputs, input_mask, values=None, seq_length=None, keys=None,
                    length=None):
    """Every per-position output of a cut call restored with `restore`; the others unchanged.

    Args:
        outputs: a tensor, or a dict of tensors or of lists of tensors.
        input_mask: as for `restore`.
        values: {output key: what its padding positions hold} (`padding_values`; others 0).
        seq_length: as for `restore`.
        keys: the per-position outputs' keys (`output_kinds`; None for a single tensor);
            omitted: those with a dynamic axis 1 (`is_position_output`, for calls whose
            outputs are known, like the exports' on a dynamic length).
        length: the cut length, checked against each restored output (`restore`).
    """
    values = values or {}

    def one(key, x):
        if isinstance(x, (list, tuple)):
            return type(x)(one(key, v) for v in x)
        if (key not in keys) if keys is not None else not is_position_output(x):
            return x
        return restore(x, input_mask, values.get(key, 0), seq_length, length)

    if isinstance(outputs, dict):
        return {k: one(k, v) for k, v in outputs.items()}
    return one(None, outputs)
