"""XLA-fused element-wise kernels for the training step when the step itself is not compiled.

Without `--jit_compile`, TF runs the tanh GELU of every feed-forward layer as ~7 kernels forward
and ~15 backward, each a pass over the [B, S, intermediate] activations. Here XLA compiles the
forward and the hand-written backward into one pass each (about 5x less time on CPU). Inside a
step that is compiled anyway (`--jit_compile`, TPUs) the functions are simply inlined.

Used only with `training=True`: inference graphs (SavedModel exports) keep plain TF ops, so
TF Serving needs no XLA.
"""
import math

import tensorflow as tf

_C = math.sqrt(2.0 / math.pi)
_A = 0.044715


@tf.function(jit_compile=True, autograph=False)
def _gelu_forward(x):
    return 0.5 * x * (1.0 + tf.tanh(x * (_C + (_C * _A) * (x * x))))


@tf.function(jit_compile=True, autograph=False)
def _gelu_backward(x, dy):
    u = x * x
    t = tf.tanh(x * (_C + (_C * _A) * u))
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (_C + (3.0 * _C * _A) * u))


@tf.custom_gradient
def gelu(x):
    """The original's tanh GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with its
    exact derivative; forward and backward each one XLA-fused pass.

    Args:
        x: float Tensor.
    """
    return _gelu_forward(x), lambda dy: _gelu_backward(x, dy)


def training_activation(name):
    """The fused training kernel for a `hidden_act` name, or None where there is none."""
    return gelu if name in ("gelu", "gelu_new") else None
