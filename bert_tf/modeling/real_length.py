"""Compute only the real tokens: the one policy for cutting a padded batch to its real length
and padding outputs back. Every path (exports, Keras fit/evaluate/predict, the trainer's
fine-tuning and prediction) asks this module.

BERT's outputs at real positions do not depend on padding (a padded key's attention bias is
-10000, whose softmax weight underflows to exactly 0), so a batch padded to S can be cut to its
last real position + 1 without changing any real-position, pooled or task output beyond float
rounding. Real tokens need not be a prefix: a hole in the mask stays inside the cut.

When to cut (`cuts`): never on a TPU (TPUStrategy may pad unknown dimensions; per-shape
compilation is unverified there); never under pad_to_max_seq_length (the fixed shape was
asked for); never where XLA compiles the step, unless the length is bucketed in the input
pipeline (XLA needs static shapes: one compilation per bucket). Models given inputs beyond the
encoder's three are not cut either: such inputs (masked_lm_positions) index positions that may
lie past the cut.

How to round (`step`): under XLA to `bucket_step(S)`, because each length is one compilation
(at most 8 lengths up to 128, 16 above); everywhere else to STEP (8), because the step is
traced once with a dynamic length, so coarser rounding only adds work (8 suits matmul tiling).

What is per position (`output_kinds`): decided from what the model returns, one way
everywhere: the call is traced on inputs of two static lengths; an output whose axis 1 is that
length in both traces, every other non-batch axis unchanged, is per position; one with no
non-batch axis changing (pooled, class, [B, C] outputs, whatever C is) is not. A model with
an output that is neither (the length on another axis, an unknown size), not all dense
tensors, or no trace is not cut, and that is logged once. Keras' fit and evaluate do not cut
models with per-position outputs (their losses would see fewer positions).

What padding positions hold (`restore_outputs`): 0, unless the model declares otherwise next
to its outputs (`padding_values`, e.g. `BertSpanLabeler`'s start/end logits hold
SPAN_PAD_LOGIT). Every padding position (input_mask 0, past the cut or in a hole) holds it, so
an output does not depend on what else was in the batch.

A row with no real tokens (input_mask all 0) has nothing real to compute: where its outputs
are padded back, its per-position outputs hold the padding values at every position (a
padded computation without restore holds what the model computes there). Its pooled and
class outputs are the model's on a row of padding only, whose attention spreads over every
position given: they follow the batch's cut length (a padded computation's follow S), so they
differ between the two; do not use them.

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
import contextlib
import functools
import logging
import math
import threading

import tensorflow as tf

from bert_tf.modeling.restore import (  # noqa: F401  (API: the restore half of the policy)
    is_position_output, pad_back, padding_values, restore, restore_outputs)

log = logging.getLogger("bert_tf")

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# What start/end logits hold at padding positions of a restored output: far below any real
# logit, so no decoder picks them; finite, so JSON carries it and a start + an end does not
# overflow float32.
SPAN_PAD_LOGIT = -1e9
STEP = 8  # rounding wherever the length is dynamic (see the module docstring)


# ---- when to cut, how to round -------------------------------------------------------------

def cuts(pad_to_max_seq_length=False, tpu=False, xla=False, bucketed=False):
    """Whether batches are cut to their real length (the rules: module docstring).

    Args:
        pad_to_max_seq_length: the fixed shape was asked for.
        tpu: the run is on a TPU.
        xla: the step that meets the batch is XLA-compiled.
        bucketed: the cut length is one of `length_buckets` (cut in the input pipeline).
    """
    return not pad_to_max_seq_length and not tpu and (not xla or bucketed)


def step(max_seq_length, xla=False):
    """The rounding step of cut lengths: `bucket_step(max_seq_length)` under XLA, else STEP.

    Args:
        max_seq_length: int, the fixed (padded) length.
        xla: the step is XLA-compiled (per shape).
    """
    return bucket_step(int(max_seq_length)) if xla else STEP


def bucket_step(max_seq_length):
    """The rounding step under XLA for int `max_seq_length`: at most 8 buckets up to 128 and
    16 above, each a multiple of 8 (lengths that suit matmul tiling)."""
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


# ---- the cut ---------------------------------------------------------------------------------

def real_length(input_mask):
    """The last real position + 1 over the batch (a scalar int32 tensor, at least 1).

    Args:
        input_mask: int, float or bool [B, S]; > 0 marks a real token. Real tokens need not
            be a prefix: the cut keeps everything up to the last one.
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


def cut(features, length, keys):
    """`features` with the named [B, S, ...] values cut to [B, length, ...] (by name, never by
    shape: a [B, S] value that is not per position is not cut by coincidence).

    Args:
        features: dict of tensors.
        length: scalar int tensor.
        keys: the keys to cut.
    """
    out = dict(features)
    for k in keys:
        out[k] = out[k][:, :length]
    return out


def cut_inputs(inputs, at_least=None, step=STEP):
    """The encoder inputs of `inputs` cut to the batch's real length.

    Args:
        inputs: dict with the int [B, S] encoder inputs (other keys are kept as they are).
        at_least: optional scalar int32 tensor, a length to keep anyway (masked-LM positions
            past the real tokens must stay in range).
        step: the rounding step (`step()`).

    Returns:
        (the cut dict, the length): the last real position + 1 (at least 1 and `at_least`),
        rounded up to a multiple of `step`, at most S. A batch with a real token at position
        S - 1 keeps its shape.
    """
    mask = inputs["input_mask"]
    length = real_length(mask)
    if at_least is not None:
        length = tf.maximum(length, at_least)
    s = mask.shape[1] if mask.shape[1] is not None else tf.shape(mask)[1]
    length = bucket_length(length, s, step=step)
    return cut(inputs, length, keys=[k for k in INPUT_NAMES if k in inputs]), length


def cut_batch_fn(max_seq_length, step=None, keys=INPUT_NAMES, cover=()):
    """A `tf.data` map function: each batch cut to `bucket_length(real_length(input_mask))`.

    Features are cut by name, never by shape: a [B, S] label that is not per position (a
    multi-label target with S classes) is never cut by coincidence.

    Args:
        max_seq_length: int, the records' fixed length.
        step: rounding step (None: `bucket_step(max_seq_length)`).
        keys: the per-position features to cut (default: the encoder inputs; a tagging task
            adds its label_ids and label_weights).
        cover: features among `keys` whose nonzero positions the cut keeps (tagging's
            label_weights): a label past the last real token is kept, never dropped.

    The batch is a dict, or a tuple whose first element is the features dict (the rest pass
    unchanged).
    """
    def fn(*batch):
        feats = batch[0]
        for k in keys:
            if k in feats and feats[k].shape[1] not in (None, max_seq_length):
                raise ValueError(f"cut_batch_fn: {k} has shape {feats[k].shape}, not "
                                 f"[batch, {max_seq_length}, ...]")
        length = real_length(feats["input_mask"])
        for k in cover:
            if k in feats:
                w = tf.abs(feats[k])
                w = tf.reduce_max(w, axis=list(range(2, len(w.shape)))) if len(w.shape) > 2 \
                    else w
                length = tf.maximum(length, real_length(w))
        length = bucket_length(length, max_seq_length, step)
        feats = cut(feats, length, keys=[k for k in keys if k in feats])
        return (feats,) + tuple(batch[1:]) if len(batch) > 1 else feats
    return fn


# ---- a model call on the real length --------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _log_once(what, why):
    log.warning("%s: computed at full length (%s)", what, why)


def cuttable(inputs):
    """Whether a model call on `inputs` may be cut: only the encoder inputs are given, as
    tensors (inputs that index positions, like masked_lm_positions, may point past the cut;
    symbolic KerasTensors are Keras' own business)."""
    return isinstance(inputs, dict) and "input_mask" in inputs and set(inputs) <= set(
        INPUT_NAMES) and all(isinstance(v, tf.Tensor) for v in inputs.values())


def _kind(a, b, la, lb):
    """"position", "other" or None for one output traced at lengths la and lb (shapes a, b)."""
    if a.rank is None or a.rank != b.rank or a.rank < 1:
        return None
    if a.rank >= 2 and a[1] == la and b[1] == lb and a[2:] == b[2:] and \
            a[2:].is_fully_defined():
        return "position"
    if a[1:] == b[1:] and a[1:].is_fully_defined():
        return "other"
    return None


def output_kinds(call, inputs, cache, what="model"):
    """The keys of `call`'s per-position outputs (a tuple; () for none, (None,) for a single
    per-position tensor), or None when they cannot be classified (logged once). Found by
    tracing `call` on inputs of two static lengths (the rule: module docstring; cached in
    `cache` by the inputs' keys and dtypes and the lengths).

    Args:
        call: the model call, a function of the inputs dict.
        inputs: dict of [B, S] tensors or arrays.
        cache: a dict owned by the model.
        what: the model's name, for the log.
    """
    s = inputs["input_mask"].shape[1]
    lengths = (8, 16) if s is None or s >= 16 else (max(1, s // 2), s)  # lengths a cut makes
    key = (tuple(sorted((k, tf.as_dtype(v.dtype).name) for k, v in inputs.items())), lengths)
    if key in cache:
        return cache[key]
    outs, why = [], "its outputs are not all dense tensors of known rank"
    try:
        with keras_scope(None):
            for n in lengths:
                spec = {k: tf.TensorSpec([None, n], v.dtype) for k, v in inputs.items()}
                outs.append(tf.function(call, autograph=False).get_concrete_function(
                    spec).structured_outputs)
    except Exception as e:  # noqa: BLE001  (any failure: no cut, said once)
        outs, why = None, f"its outputs cannot be traced: {e}"
    kinds = None
    if outs and lengths[0] != lengths[1] and all(
            isinstance(x, tf.Tensor) for o in outs for x in tf.nest.flatten(o)):  # graph tensors
        flat = [o.items() if isinstance(o, dict) else [(None, o)] for o in outs]
        kinds = []
        for (k, va), (_, vb) in zip(*flat):
            got = {_kind(a.shape, b.shape, *lengths)
                   for a, b in zip(tf.nest.flatten(va), tf.nest.flatten(vb))}
            if None in got or len(got) > 1:  # a key's tensors all per position, or none
                why = (f"output {k!r} is neither per position (the length on axis 1) nor "
                       "pooled (no axis following the length)")
                kinds = None
                break
            if got == {"position"}:
                kinds.append(k)
    cache[key] = None if kinds is None else tuple(kinds)
    if kinds is None:
        _log_once(what, f"cannot tell which outputs are per position; {why}")
    return cache[key]


def call_on_real_length(call, inputs, keys, values=None, step=STEP):
    """`call(inputs)` computed on the batch cut to its real length, its per-position outputs
    restored to [B, S, ...] (`restore_outputs`). Pooled, class and real-position outputs equal
    the full-length computation's within float rounding.

    Args:
        call: the model call, a function of the inputs dict, returning a dict or a tensor.
        inputs: dict of the int [B, S] encoder inputs.
        keys: the per-position outputs' keys (`output_kinds`).
        values: `padding_values` of the model.
        step: the rounding step.
    """
    mask = tf.convert_to_tensor(inputs["input_mask"])
    short, length = cut_inputs(inputs, step=step)
    with keras_scope(None):  # an inner model computes what it is given
        out = call(short)
    return restore_outputs(out, mask, values, keys=keys, length=length)


# ---- the Keras mode: in the traced step, per thread -------------------------------------------

# The mode of the Keras step being traced: thread-local, so another thread's direct call is
# never cut; read while Keras traces, so each traced step holds its mode (KerasConventions
# keeps one step per mode). "losses" (fit / evaluate: cut only models without per-position
# outputs, whose losses would see other positions), "outputs" (predict: cut, per-position
# outputs restored), "off" (not cut); None: outside fit / evaluate / predict.
_keras = threading.local()


def keras_mode():
    """This thread's Keras mode (None: not inside fit / evaluate / predict)."""
    return getattr(_keras, "mode", None)


@contextlib.contextmanager
def keras_scope(mode):
    """Sets this thread's Keras mode for the block (None: a direct call, never cut)."""
    before = keras_mode()
    _keras.mode = mode
    try:
        yield
    finally:
        _keras.mode = before
