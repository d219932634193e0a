"""bert_tf.training.optimization: schedule values, update math against NumPy, decay exclusions, replicas."""
import contextlib

import numpy as np
import pytest

import bert_tf
import keras
import tensorflow as tf

from bert_tf import BertError
from bert_tf.training.distribute import get_strategy
from bert_tf.training.optimization import WarmupLinearDecay, create_optimizer


def test_schedule_values():
    s = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10)
    got = [float(s(step)) for step in (0, 1, 5, 9, 10, 11, 50, 99, 100, 150)]
    want = [0.0, 1e-5, 5e-5, 9e-5, 9e-5, 8.9e-5, 5e-5, 1e-6, 0.0, 0.0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    # No warm-up: plain linear decay from step 0.
    s0 = WarmupLinearDecay(2.0, num_train_steps=4, num_warmup_steps=0)
    assert [float(s0(i)) for i in range(5)] == [2.0, 1.5, 1.0, 0.5, 0.0]


def _variables():
    # (path, initial value, gradient per step)
    rng = np.random.default_rng(0)
    specs = [("model/layer_0/intermediate/kernel", (3, 4)),
             ("model/layer_0/output_layer_norm/gamma", (4,)),
             ("model/layer_0/intermediate/bias", (4,)),
             ("model/masked_lm/output_bias", (5,))]
    out = []
    for path, shape in specs:
        init = rng.normal(size=shape).astype(np.float32)
        grads = [rng.normal(size=shape).astype(np.float32) * 2 for _ in range(3)]
        out.append((path, init, grads))
    return out


def _run_keras(opt_type, variables, **kw):
    opt = create_optimizer(1e-2, num_train_steps=10, num_warmup_steps=2, optimizer_type=opt_type,
                           **kw)
    kvars = []
    for path, init, _ in variables:
        *scopes, name = path.split("/")
        with contextlib.ExitStack() as stack:
            for scope in scopes:
                stack.enter_context(keras.name_scope(scope))
            kvars.append(keras.Variable(init, name=name))
    assert [v.path for v in kvars] == [p for p, _, _ in variables]
    opt.build(kvars)
    for step in range(3):
        opt.apply([tf.constant(g[step]) for _, _, g in variables], kvars)
    return opt, [v.numpy() for v in kvars]


def _clip(grads, clip_norm):
    norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
    return [g * (clip_norm / max(norm, clip_norm)) for g in grads], norm


def _numpy_reference(kind, variables, wd=0.01, b1=0.9, b2=0.999, eps=1e-6, clip_norm=1.0):
    params = [init.astype(np.float64) for _, init, _ in variables]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    decayed = ["kernel" in p for p, _, _ in variables]
    norms = []
    for step in range(3):
        lr = 1e-2 * step / 2 if step < 2 else 1e-2 * (1 - step / 10)
        grads, norm = _clip([g[step].astype(np.float64) for _, _, g in variables], clip_norm)
        norms.append(norm)
        t = step + 1
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            if kind == "adamw_original":  # no bias correction, decay inside the update
                upd = m[i] / (np.sqrt(v[i]) + eps) + (wd * params[i] if decayed[i] else 0)
                params[i] = params[i] - lr * upd
            elif kind == "adamw":  # decay first (lr * wd * p), then bias-corrected Adam
                if decayed[i]:
                    params[i] = params[i] - lr * wd * params[i]
                alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                params[i] = params[i] - alpha * m[i] / (np.sqrt(v[i]) + eps)
            elif kind == "lamb":
                upd = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps)
                if decayed[i]:
                    upd = upd + wd * params[i]
                    ratio = np.linalg.norm(params[i]) / np.linalg.norm(upd)
                    upd = ratio * upd
                params[i] = params[i] - lr * upd
    return params, norms


@pytest.mark.parametrize("kind", ["adamw_original", "adamw", "lamb"])
def test_update_matches_numpy(kind):
    variables = _variables()
    _, got = _run_keras(kind, variables)
    want, norms = _numpy_reference(kind, variables)
    assert min(norms) > 1.0  # clipping is active in this test
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_adamw_original_has_no_bias_correction():
    # One step, lr constant: update = m/(sqrt(v)+eps) = 0.1 g / (sqrt(0.001) |g| + eps).
    opt = create_optimizer(1.0, num_train_steps=10**9, num_warmup_steps=0, weight_decay_rate=0.0,
                           clip_norm=None)
    var = keras.Variable(np.zeros(1, np.float32), name="w")
    opt.build([var])
    opt.apply([tf.constant([0.5])], [var])
    want = -0.1 * 0.5 / (np.sqrt(0.001) * 0.5 + 1e-6)
    np.testing.assert_allclose(var.numpy(), [want], rtol=1e-5)


def test_weight_decay_exclusions_on_the_pretrainer(tiny_config):
    from bert_tf.modeling.models import BertPretrainer, build_model
    model = build_model(BertPretrainer.from_bert_config(tiny_config))
    variables = model.trainable_variables
    before = {v.path: v.numpy() for v in variables}
    # Constant lr 0.5, zero gradients: the Adam part is 0, only the decay moves parameters.
    opt = create_optimizer(0.5, num_train_steps=10**9, num_warmup_steps=0, weight_decay_rate=0.1)
    opt.build(variables)
    opt.apply([tf.zeros_like(v) for v in variables], variables)
    decayed = set()
    for v in variables:
        if np.array_equal(v.numpy(), before[v.path]):
            continue
        np.testing.assert_allclose(v.numpy(), before[v.path] * (1 - 0.5 * 0.1), rtol=1e-6)
        decayed.add(v.path)
    names = {p.split("/", 1)[1] for p in decayed}
    want = {f"encoder/embeddings/{n}_embeddings" for n in ("word", "token_type", "position")}
    want |= {f"encoder/layer_{i}/{n}/kernel" for i in range(2) for n in
             ("self/query", "self/key", "self/value", "attention_output", "intermediate",
              "output_dense")}
    want |= {"encoder/pooler/kernel", "masked_lm/transform/kernel", "next_sentence/dense/kernel"}
    assert names == want
    assert all(opt.excluded(v) == (v.path not in decayed) for v in variables)


def test_replica_gradients_are_summed_before_clipping():
    """Two replicas' gradients are summed, then the *sum* is clipped (not each share)."""
    strategy = get_strategy("mirrored")
    assert strategy.num_replicas_in_sync == 2
    init = np.array([0.5, -1.0, 2.0], np.float32)
    shares = [np.array([0.6, 0.0, 0.0], np.float32), np.array([0.0, 0.7, 0.2], np.float32)]
    with strategy.scope():
        opt = create_optimizer(0.1, num_train_steps=10**9, num_warmup_steps=0,
                               weight_decay_rate=0.0, clip_norm=0.5)
        with keras.name_scope("dense"):
            var = keras.Variable(init, name="kernel")
        opt.build([var])
    grads = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(shares[ctx.replica_id_in_sync_group]))

    @tf.function
    def step(g):
        strategy.run(lambda g: opt.apply([g], [var]), args=(g,))

    step(grads)
    total = (shares[0] + shares[1]).astype(np.float64)
    g = total * 0.5 / np.linalg.norm(total)  # each share alone is below 1.0 but not the sum
    m, v = 0.1 * g, 0.001 * g * g
    want = init - 0.1 * m / (np.sqrt(v) + 1e-6)
    for local in strategy.experimental_local_results(var.value):
        np.testing.assert_allclose(local.numpy(), want, rtol=1e-5)


def test_no_clipping_and_zero_decay():
    variables = _variables()
    _, got = _run_keras("adamw_original", variables, clip_norm=None, weight_decay_rate=0.0)
    want, _ = _numpy_reference("adamw_original", variables, wd=0.0, clip_norm=1e30)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_unknown_optimizer_and_bad_steps():
    with pytest.raises(BertError, match="--optimizer: unknown optimizer 'sgd'"):
        create_optimizer(1e-4, 10, 1, optimizer_type="sgd")
    with pytest.raises(BertError, match="--num_train_steps"):
        create_optimizer(1e-4, 0, 0)
