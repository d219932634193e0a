"""Optimizers for BERT pre-training and fine-tuning (Keras 3, tf.distribute-safe).

`create_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type=...)`:

  "adamw_original"  the original release's AdamWeightDecay: Adam *without* bias correction,
                    update = m / (sqrt(v) + eps) + wd * param (decoupled decay, skipped for
                    LayerNorm and bias variables), param -= lr * update.
  "adamw"           keras AdamW (bias-corrected Adam, decoupled decay lr * wd * param) with the
                    same exclusions.
  "lamb"            LAMB (You et al. 2019): bias-corrected Adam direction plus wd * param, scaled
                    by the trust ratio ||param|| / ||update||; LayerNorm and bias variables get
                    neither decay nor the trust ratio (as NVIDIA's and Model Garden's BERT LAMB).

All three clip the *global* gradient norm to `clip_norm` (1.0, as the original) and use
`WarmupLinearDecay`: lr * step / warmup during warm-up, then lr * (1 - step / num_train_steps)
(polynomial decay, power 1, to 0 at num_train_steps), where step counts applied updates from 0.

Where clipping happens under tf.distribute: Keras clips per replica *before* it all-reduces the
gradients, which would clip each replica's share instead of the global gradient. These optimizers
all-reduce first (sum over replicas) and then clip. A caller that has already summed the
gradients over replicas (bert_tf.training.trainer does, so that keras' LossScaleOptimizer sees
the same gradients on every replica) sets `optimizer.gradients_aggregated = True`.
"""
import re

import keras
import tensorflow as tf
from keras import ops

from bert_tf import BertError

# Substrings of variable paths that get no weight decay (original: "LayerNorm", "layer_norm",
# "bias"; our paths use layer_norm/*_layer_norm, and output_bias contains "bias").
DEFAULT_EXCLUDE = ("LayerNorm", "layer_norm", "bias")
OPTIMIZER_TYPES = ("adamw_original", "adamw", "lamb")


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = init_lr * step / warmup if step < warmup else init_lr * max(0, 1 - step / total).

    The decay is measured from step 0 (not from the end of warm-up), as the original's
    polynomial_decay(power=1) followed by the warm-up override.

    Args:
        init_lr: peak learning rate.
        num_train_steps: step at which the rate reaches 0.
        num_warmup_steps: steps of linear warm-up from 0.
    """

    def __init__(self, init_lr, num_train_steps, num_warmup_steps=0):
        self.init_lr = float(init_lr)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        total = float(max(self.num_train_steps, 1))
        decayed = self.init_lr * (1.0 - ops.minimum(step, total) / total)
        if self.num_warmup_steps <= 0:
            return decayed
        warmup = self.init_lr * step / float(self.num_warmup_steps)
        return ops.where(step < float(self.num_warmup_steps), warmup, decayed)

    def get_config(self):
        return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps}


def _variable_path(variable):
    return getattr(variable, "path", None) or variable.name


class _BertOptimizerMixin:
    """Exclusions by variable path, and global-norm clipping after the cross-replica sum."""

    def _bert_init(self, weight_decay_rate, exclude_from_weight_decay, clip_norm):
        self.weight_decay_rate = float(weight_decay_rate or 0.0)
        self.exclude_patterns = tuple(exclude_from_weight_decay or ())
        self.clip_norm = float(clip_norm) if clip_norm else None
        self.gradients_aggregated = False
        self._decayed_keys = set()

    def excluded(self, variable):
        """True if `variable` gets no weight decay (its path matches an exclusion)."""
        path = _variable_path(variable)
        return any(re.search(p, path) for p in self.exclude_patterns)

    def build(self, var_list):
        super().build(var_list)
        # Keras matches exclusions against the short name ("gamma"), which cannot tell a
        # LayerNorm scale from anything else; decide once here by the full path.
        self._decayed_keys = {self._var_key(v) for v in var_list if not self.excluded(v)}

    def _use_weight_decay(self, variable):
        return self._var_key(variable) in self._decayed_keys

    def _clip_gradients(self, grads):
        ctx = tf.distribute.get_replica_context()
        if (not self.gradients_aggregated and ctx is not None
                and ctx.num_replicas_in_sync > 1):
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, list(grads))
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g in grads]
        if self.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)
        return grads

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)  # summed in _clip_gradients (or by the caller)

    def _bert_config(self):
        return {"weight_decay_rate": self.weight_decay_rate,
                "exclude_from_weight_decay": list(self.exclude_patterns),
                "clip_norm": self.clip_norm}


class _StepConstants:
    constants = None  # dtype -> the update's constant tensors while one is traced


class _AdamMoments(_BertOptimizerMixin, keras.optimizers.Optimizer):
    """Shared state of AdamWeightDecay and Lamb: the hyper-parameters and the m/v slots."""

    def __init__(self, learning_rate=1e-3, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-6, clip_norm=1.0, exclude_from_weight_decay=DEFAULT_EXCLUDE,
                 name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self._bert_init(weight_decay_rate, exclude_from_weight_decay, clip_norm)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self._step = _StepConstants()  # a plain object: nothing for checkpoints to track

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        # The step's constants once per update, not once per variable: fewer ops to trace
        # (the optimizer was ~half the training step's graph), the same values.
        self._step.constants = {}
        # Made here, before the per-variable updates. Under a tf.distribute strategy each
        # replica makes them and the merged update uses the last replica's: equal values.
        try:
            for dtype in {tf.as_dtype(v.dtype) for v in trainable_variables}:
                self._constants(dtype)
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._step.constants = None

    def _constants(self, dtype):
        """This update's beta_1, 1 - beta_1, beta_2, 1 - beta_2, epsilon, weight_decay_rate
        and Adam's bias corrections (1 - beta^t) as `dtype` tensors."""
        cache = {} if self._step.constants is None else self._step.constants
        dtype = tf.as_dtype(dtype)
        if dtype not in cache:
            c = {k: tf.constant(x, dtype) for k, x in (
                ("b1", self.beta_1), ("1-b1", 1.0 - self.beta_1), ("b2", self.beta_2),
                ("1-b2", 1.0 - self.beta_2), ("eps", self.epsilon),
                ("wd", self.weight_decay_rate))}
            t = tf.cast(self.iterations + 1, dtype)
            c["bc1"], c["bc2"] = 1.0 - tf.pow(c["b1"], t), 1.0 - tf.pow(c["b2"], t)
            cache[dtype] = c
        return cache[dtype]

    def _update_moments(self, gradient, variable):
        """m, v after this step's update (the biased moments, as the original keeps them), as
        tensors: the values just assigned, not read back."""
        c = self._constants(variable.dtype)
        g = tf.cast(tf.convert_to_tensor(gradient), variable.dtype)
        i = self._get_variable_index(variable)
        m_var, v_var = self._m[i].value, self._v[i].value
        m = c["b1"] * m_var + c["1-b1"] * g
        v = c["b2"] * v_var + c["1-b2"] * tf.square(g)
        m_var.assign(m)
        v_var.assign(v)
        return m, v

    def get_config(self):
        config = super().get_config()
        config.update(self._bert_config(), beta_1=self.beta_1, beta_2=self.beta_2,
                      epsilon=self.epsilon)
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class AdamWeightDecay(_AdamMoments):
    """The original BERT optimizer (see the module docstring for the exact update).

    Args:
        learning_rate: float or schedule.
        name: optimizer name.
        **kwargs: weight_decay_rate, beta_1, beta_2, epsilon, clip_norm,
            exclude_from_weight_decay (as `create_optimizer`) and Keras optimizer arguments.
    """

    def __init__(self, learning_rate=1e-3, name="adam_weight_decay", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        """Apply one update to `variable` (Keras calls it per variable, after clipping).

        Args:
            gradient: the (summed, clipped) gradient of `variable`.
            variable: the variable to update.
            learning_rate: this step's learning rate.
        """
        lr = tf.cast(learning_rate, variable.dtype)
        m, v = self._update_moments(gradient, variable)
        c = self._constants(variable.dtype)
        update = m / (tf.sqrt(v) + c["eps"])
        if self.weight_decay_rate and self._use_weight_decay(variable):
            update = update + c["wd"] * variable
        self.assign_sub(variable, lr * update)


@keras.saving.register_keras_serializable(package="bert_tf")
class Lamb(_AdamMoments):
    """LAMB with decay inside the trust-ratio update; excluded variables use plain Adam steps.

    Args:
        learning_rate: float or schedule.
        name: optimizer name.
        **kwargs: as `AdamWeightDecay`.
    """

    def __init__(self, learning_rate=1e-3, name="lamb", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        """Apply one update to `variable` (Keras calls it per variable, after clipping).

        Args:
            gradient: the (summed, clipped) gradient of `variable`.
            variable: the variable to update.
            learning_rate: this step's learning rate.
        """
        lr = tf.cast(learning_rate, variable.dtype)
        m, v = self._update_moments(gradient, variable)
        c = self._constants(variable.dtype)
        update = (m / c["bc1"]) / (tf.sqrt(v / c["bc2"]) + c["eps"])
        if self._use_weight_decay(variable):
            if self.weight_decay_rate:
                update = update + c["wd"] * variable
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            u_norm = ops.sqrt(ops.sum(ops.square(update)))
            ratio = ops.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            update = ratio * update
        self.assign_sub(variable, lr * update)


@keras.saving.register_keras_serializable(package="bert_tf")
class AdamW(_BertOptimizerMixin, keras.optimizers.AdamW):
    """keras AdamW with path-based exclusions and post-all-reduce global-norm clipping.

    Args:
        learning_rate: float or schedule.
        weight_decay_rate: decoupled decay rate (0: none).
        beta_1: first-moment decay.
        beta_2: second-moment decay.
        epsilon: added to the root of the second moment.
        clip_norm: global gradient-norm limit (None or 0: no clipping).
        exclude_from_weight_decay: regexes of variable paths without decay.
        name: optimizer name.
        **kwargs: Keras optimizer arguments.
    """

    def __init__(self, learning_rate=1e-3, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-6, clip_norm=1.0, exclude_from_weight_decay=DEFAULT_EXCLUDE,
                 name="adamw", **kwargs):
        kwargs.pop("weight_decay", None)
        # keras requires weight_decay > 0 for AdamW; a rate of 0 becomes "decay nothing".
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay_rate or 1.0,
                         beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, name=name, **kwargs)
        self._bert_init(weight_decay_rate, exclude_from_weight_decay, clip_norm)

    def _use_weight_decay(self, variable):
        return bool(self.weight_decay_rate) and super()._use_weight_decay(variable)

    def get_config(self):
        config = super().get_config()
        config.pop("weight_decay", None)
        config.update(self._bert_config())
        return config


def create_optimizer(init_lr, num_train_steps, num_warmup_steps, optimizer_type="adamw_original",
                     weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                     clip_norm=1.0, exclude_from_weight_decay=DEFAULT_EXCLUDE, schedule=None):
    """An optimizer with the WarmupLinearDecay schedule (see the module docstring).

    Args:
        init_lr: peak learning rate.
        num_train_steps: updates until the learning rate reaches 0 (> 0).
        num_warmup_steps: updates of linear warm-up (>= 0).
        optimizer_type: one of OPTIMIZER_TYPES.
        weight_decay_rate: decoupled weight decay rate.
        beta_1: Adam's first-moment decay.
        beta_2: Adam's second-moment decay.
        epsilon: Adam's epsilon.
        clip_norm: global gradient-norm limit.
        exclude_from_weight_decay: regexes of variable paths that get no weight decay.
        schedule: a LearningRateSchedule to use instead (e.g. the two pre-training phases').
    Raises:
        BertError: unknown optimizer_type or bad step counts.
    """
    if optimizer_type not in OPTIMIZER_TYPES:
        raise BertError(f"--optimizer: unknown optimizer {optimizer_type!r}; expected one of "
                        f"{', '.join(OPTIMIZER_TYPES)}")
    if num_train_steps <= 0:
        raise BertError(f"--num_train_steps: must be > 0, got {num_train_steps}")
    if num_warmup_steps < 0:
        raise BertError(f"--num_warmup_steps: must be >= 0, got {num_warmup_steps}")
    schedule = schedule or WarmupLinearDecay(init_lr, num_train_steps, num_warmup_steps)
    cls = {"adamw_original": AdamWeightDecay, "adamw": AdamW, "lamb": Lamb}[optimizer_type]
    return cls(learning_rate=schedule, weight_decay_rate=weight_decay_rate, beta_1=beta_1,
               beta_2=beta_2, epsilon=epsilon, clip_norm=clip_norm,
               exclude_from_weight_decay=exclude_from_weight_decay)
