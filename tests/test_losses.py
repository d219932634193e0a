"""bert_tf.pretraining.losses: same values and gradients as TF's fused cross-entropy op."""
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.pretraining.losses import sparse_softmax_cross_entropy


def _loss_and_grad(fn, labels, logits, weights, jit=False):
    def step(lg):
        with tf.GradientTape() as tape:
            tape.watch(lg)
            loss = tf.reduce_sum(fn(labels, lg) * weights)
        return loss, tape.gradient(loss, lg)
    return tf.function(step, jit_compile=jit)(logits)


def _reference(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


@pytest.mark.parametrize("jit", [False, True])
def test_matches_fused_op_values_and_gradient(jit):
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(0, 4, (3, 5, 97)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 97, (3, 5)).astype(np.int32))
    labels = tf.tensor_scatter_nd_update(labels, [[0, 0], [2, 4]], [0, 96])  # both ends
    weights = tf.constant(rng.uniform(0, 1, (3, 5)).astype(np.float32))
    ours = sparse_softmax_cross_entropy(labels, logits)
    assert ours.shape == (3, 5)
    np.testing.assert_allclose(ours, _reference(labels, logits), rtol=1e-6, atol=1e-6)
    loss, grad = _loss_and_grad(sparse_softmax_cross_entropy, labels, logits, weights, jit)
    ref_loss, ref_grad = _loss_and_grad(_reference, labels, logits, weights)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, atol=1e-7)


def test_large_logits_stay_finite():
    logits = tf.constant([[1e4, -1e4, 0.0], [-5e3, -5e3, -5e3]])
    ours = sparse_softmax_cross_entropy(tf.constant([1, 2]), logits)
    np.testing.assert_allclose(ours, [2e4, np.log(3.0)], rtol=1e-6)


def test_out_of_range_label_fails():
    with pytest.raises(tf.errors.InvalidArgumentError):
        sparse_softmax_cross_entropy(tf.constant([3]), tf.zeros([1, 3]))


@pytest.mark.parametrize("jit", [False, True])
def test_hits_are_argmax_matches_and_carry_no_gradient(jit):
    rng = np.random.default_rng(1)
    logits = tf.constant(rng.normal(0, 3, (4, 6, 50)).astype(np.float32))
    labels = rng.integers(0, 50, (4, 6)).astype(np.int32)
    labels[:2] = np.argmax(logits.numpy(), -1)[:2]  # some hits, some misses
    labels = tf.constant(labels)
    expected = (np.argmax(logits.numpy(), -1) == labels.numpy()).astype(np.float32)

    @tf.function(jit_compile=jit)
    def run(lg):
        with tf.GradientTape() as tape:
            tape.watch(lg)
            loss, hits = sparse_softmax_cross_entropy(labels, lg, with_hits=True)
            total = tf.reduce_sum(loss) + tf.reduce_sum(hits)
        return loss, hits, tape.gradient(total, lg)

    loss, hits, grad = run(logits)
    np.testing.assert_array_equal(hits, expected)
    assert 0 < expected.sum() < expected.size
    np.testing.assert_allclose(loss, _reference(labels, logits), rtol=1e-6, atol=1e-6)
    _, ref_grad = _loss_and_grad(_reference, labels, logits, tf.ones((4, 6)))
    np.testing.assert_allclose(grad, ref_grad, atol=1e-6)
