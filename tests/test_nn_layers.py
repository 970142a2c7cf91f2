"""tg.nn's model-building functions: dropout, moments, batch and layer normalisation, one_hot,
the dense softmax cross-entropy, l2_loss, embedding_lookup. Values against NumPy formulas and
TensorFlow's documented results; gradients to second order, reverse and forward mode."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

rng = np.random.default_rng(0)
X = rng.normal(size=(4, 5))


def check(f, *args):
    tg.test.check_gradients(f, list(args), order=2, modes=("rev", "fwd"))


# --- dropout ---------------------------------------------------------------------------------
def test_dropout_keeps_with_probability_one_minus_rate_and_scales_kept_values():
    x = tg.constant(np.full((200, 50), 3.0))
    y = nn.dropout(x, rate=0.25, seed=1).numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 3.0 / 0.75)  # 1 / (1 - rate), as TensorFlow
    assert abs(kept.mean() - 0.75) < 0.02  # 10000 draws: 4 standard deviations is 0.017


def test_dropout_is_reproducible_with_seeds_and_draws_anew_otherwise():
    x = tg.constant(np.ones((6, 7)))
    tg.random.set_seed(5)
    a, b = nn.dropout(x, 0.5, seed=2).numpy(), nn.dropout(x, 0.5, seed=2).numpy()
    tg.random.set_seed(5)
    np.testing.assert_array_equal(nn.dropout(x, 0.5, seed=2).numpy(), a)
    np.testing.assert_array_equal(nn.dropout(x, 0.5, seed=2).numpy(), b)
    assert not np.array_equal(a, b)  # the op's stream goes on


def test_dropout_noise_shape_drops_whole_rows_and_training_false_is_identity():
    x = tg.constant(rng.normal(size=(40, 6)))
    y = nn.dropout(x, 0.5, noise_shape=[None, 1], seed=3).numpy()
    rows = np.all(y == 0, axis=1)
    np.testing.assert_allclose(y[~rows], 2 * x.numpy()[~rows])
    assert 0 < rows.sum() < 40
    assert nn.dropout(x, 0.5, training=False) is x
    assert nn.dropout(x, 0.0) is x


def test_dropout_gradient_is_the_mask_to_second_order_and_in_forward_mode():
    x = tg.constant(X)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = nn.dropout(x, 0.4, seed=7)
        total = tg.sum(y)
    g = tape.gradient(total, x).numpy()
    np.testing.assert_allclose(g, np.where(y.numpy() != 0, 1 / 0.6, 0.0))

    def f(x):
        tg.random.set_seed(11)  # the same mask on every call of the check
        return nn.dropout(x, 0.4, seed=7) ** 2
    check(f, X)


@pytest.mark.parametrize("rate, match", [(1.0, r"range \[0, 1\)"), (-0.1, r"range \[0, 1\)"),
                                         ("a", "rate must be a number")])
def test_dropout_rejects_bad_rates(rate, match):
    with pytest.raises((ValueError, TypeError), match=match):
        nn.dropout(tg.constant(X), rate)


def test_dropout_rejects_integer_x_and_bad_noise_shapes():
    with pytest.raises(ValueError, match="floating dtype"):
        nn.dropout(tg.constant(np.ones(3, dtype=np.int64)), 0.5)
    with pytest.raises(ValueError, match="one entry per dimension"):
        nn.dropout(tg.constant(X), 0.5, noise_shape=[4])
    with pytest.raises(ValueError, match="must broadcast to x's shape"):
        nn.dropout(tg.constant(X), 0.5, noise_shape=[4, 2])


# --- moments, batch_normalization, layer_normalization ----------------------------------------
def test_moments_are_numpy_mean_and_population_variance():
    x = rng.normal(size=(3, 4, 5))
    m, v = nn.moments(tg.constant(x), axes=[0, 2])
    np.testing.assert_allclose(m.numpy(), x.mean(axis=(0, 2)))
    np.testing.assert_allclose(v.numpy(), x.var(axis=(0, 2)))
    m, v = nn.moments(tg.constant(x), axes=[1], keepdims=True)
    assert m.shape == v.shape == (3, 1, 5)
    check(lambda x: nn.moments(x, [0]), X)  # exact second order (no stop_gradient)


def test_batch_normalization_matches_the_formula():
    x, mean, var = X, rng.normal(size=5), rng.uniform(0.5, 2, size=5)
    offset, scale = rng.normal(size=5), rng.normal(size=5)
    y = nn.batch_normalization(tg.constant(x), tg.constant(mean), tg.constant(var),
                               tg.constant(offset), tg.constant(scale), 1e-3)
    np.testing.assert_allclose(y.numpy(), scale * (x - mean) / np.sqrt(var + 1e-3) + offset)
    y = nn.batch_normalization(tg.constant(x), tg.constant(mean), tg.constant(var), None, None,
                               1e-3)
    np.testing.assert_allclose(y.numpy(), (x - mean) / np.sqrt(var + 1e-3))
    check(lambda x, m, v, o, s: nn.batch_normalization(x, m, v, o, s, 1e-3),
          x, mean, var, offset, scale)


def test_layer_normalization_normalises_each_row_then_scales_and_shifts():
    gamma, beta = rng.normal(size=5), rng.normal(size=5)
    y = nn.layer_normalization(tg.constant(X), gamma=tg.constant(gamma), beta=tg.constant(beta))
    m, v = X.mean(-1, keepdims=True), X.var(-1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), gamma * (X - m) / np.sqrt(v + 1e-3) + beta)
    x3 = rng.normal(size=(2, 3, 4))
    g3 = rng.normal(size=(3, 4))
    y = nn.layer_normalization(tg.constant(x3), axis=[1, 2], epsilon=1e-5, gamma=tg.constant(g3))
    m, v = x3.mean((1, 2), keepdims=True), x3.var((1, 2), keepdims=True)
    np.testing.assert_allclose(y.numpy(), g3 * (x3 - m) / np.sqrt(v + 1e-5))
    check(lambda x, g, b: nn.layer_normalization(x, gamma=g, beta=b), X, gamma, beta)


def test_layer_normalization_rejects_parameters_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"gamma must have the shape \(5,\)"):
        nn.layer_normalization(tg.constant(X), gamma=tg.constant(np.ones(4)))
    with pytest.raises(ValueError, match="out of range"):
        nn.layer_normalization(tg.constant(X), axis=2)


# --- one_hot ---------------------------------------------------------------------------------
def test_one_hot_as_tensorflow_documents():
    y = nn.one_hot(tg.constant(np.asarray([0, 1, 2])), 3)
    assert y.dtype == tg.float32
    np.testing.assert_array_equal(y.numpy(), np.eye(3))
    # tf.one_hot([0, 2, -1, 1], 3, 5.0, 0.0, axis=-1): an out-of-range index is all off_value
    y = nn.one_hot(np.asarray([0, 2, -1, 1]), 3, 5.0, 0.0)
    np.testing.assert_array_equal(y.numpy(), [[5, 0, 0], [0, 0, 5], [0, 0, 0], [0, 5, 0]])
    assert y.dtype == tg.float32
    # tf.one_hot([[0, 2], [1, -1]], 3, axis=0) has shape (3, 2, 2): depth first
    y = nn.one_hot(np.asarray([[0, 2], [1, -1]]), 3, axis=0)
    assert y.shape == (3, 2, 2)
    np.testing.assert_array_equal(y.numpy()[:, 0, 1], [0, 0, 1])
    assert nn.one_hot(np.asarray([1]), 2, on_value=7, off_value=1).dtype == tg.int32
    assert nn.one_hot(np.asarray([1]), 2, dtype=tg.float64).dtype == tg.float64
    assert nn.one_hot(np.asarray([1, 2]), 0).shape == (2, 0)


def test_one_hot_errors():
    with pytest.raises(ValueError, match="depth must be a non-negative int, got -1"):
        nn.one_hot(np.asarray([0]), -1)
    with pytest.raises(TypeError, match="indices must be integers"):
        nn.one_hot(np.asarray([0.5]), 3)
    with pytest.raises(ValueError, match=r"axis must be -1 or in \[0, 1\]"):
        nn.one_hot(np.asarray([0]), 3, axis=2)


# --- softmax_cross_entropy_with_logits, l2_loss -------------------------------------------------
def _log_softmax(z, axis=-1):
    z = z - z.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


def test_softmax_cross_entropy_with_logits_values_and_gradients():
    # TensorFlow's docstring example: logits [[4, 2, 1], [0, 5, 1]], labels [[1, 0, 0],
    # [0, 0.8, 0.2]] -> [0.16984604, 0.82474494]
    y = nn.softmax_cross_entropy_with_logits(
        labels=tg.constant([[1.0, 0.0, 0.0], [0.0, 0.8, 0.2]]),
        logits=tg.constant([[4.0, 2.0, 1.0], [0.0, 5.0, 1.0]]))
    np.testing.assert_allclose(y.numpy(), [0.16984604, 0.82474494], rtol=1e-6)
    labels = rng.dirichlet(np.ones(4), size=3)
    logits = rng.normal(size=(3, 4)) * 3
    with tg.GradientTape() as tape:
        lab, log = tg.constant(labels), tg.constant(logits)
        tape.watch([lab, log])
        loss = tg.sum(nn.softmax_cross_entropy_with_logits(lab, log))
    dlab, dlog = tape.gradient(loss, [lab, log])
    sm = np.exp(_log_softmax(logits))
    np.testing.assert_allclose(dlog.numpy(), sm - labels, atol=1e-12)  # TF's backprop
    np.testing.assert_allclose(dlab.numpy(), -_log_softmax(logits))  # TF 2: labels too
    big = nn.softmax_cross_entropy_with_logits(tg.constant([[0.0, 1.0]]),
                                               tg.constant([[1000.0, -1000.0]]))
    np.testing.assert_allclose(big.numpy(), [2000.0])  # stable
    check(lambda a, b: nn.softmax_cross_entropy_with_logits(a, b, axis=0), labels.T, logits.T)


def test_softmax_cross_entropy_errors():
    with pytest.raises(ValueError, match=r"same shape, got labels \(3,\) and logits \(2, 3\)"):
        nn.softmax_cross_entropy_with_logits(tg.constant(np.ones(3)), tg.constant(np.ones((2, 3))))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        nn.softmax_cross_entropy_with_logits(tg.constant(1.0), tg.constant(1.0))


def test_l2_loss_is_half_the_sum_of_squares():
    np.testing.assert_allclose(nn.l2_loss(tg.constant(X)).numpy(), np.sum(X ** 2) / 2)
    assert float(nn.l2_loss(tg.constant([3.0, 4.0]))) == 12.5
    check(nn.l2_loss, X)


# --- embedding_lookup ------------------------------------------------------------------------
def test_embedding_lookup_gathers_rows_and_scatter_adds_gradients():
    params = rng.normal(size=(5, 3))
    ids = np.asarray([[4, 0], [4, 4]])
    p = tg.constant(params)
    with tg.GradientTape() as tape:
        tape.watch(p)
        y = nn.embedding_lookup(p, tg.constant(ids))
        loss = tg.sum(y * tg.constant(np.arange(12.0).reshape(2, 2, 3)))
    np.testing.assert_allclose(y.numpy(), params[ids])
    expect = np.zeros((5, 3))
    np.add.at(expect, ids, np.arange(12.0).reshape(2, 2, 3))  # repeated ids accumulate
    np.testing.assert_allclose(tape.gradient(loss, p).numpy(), expect)
    assert nn.embedding_lookup([p], ids).shape == (2, 2, 3)
    check(lambda p: nn.embedding_lookup(p, ids) ** 2, params)


def test_embedding_lookup_max_norm_clips_each_embedding():
    params = np.asarray([[3.0, 4.0], [0.3, 0.4]])
    y = nn.embedding_lookup(tg.constant(params), np.asarray([0, 1]), max_norm=1.0)
    np.testing.assert_allclose(y.numpy(), [[0.6, 0.8], [0.3, 0.4]])
    check(lambda p: nn.embedding_lookup(p, np.asarray([0, 1, 0]), max_norm=1.0), params)


def test_embedding_lookup_errors():
    p = tg.constant(np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"id 4 is outside \[0, 4\)"):
        nn.embedding_lookup(p, np.asarray([0, 4]))
    with pytest.raises(ValueError, match=r"id -1 is outside \[0, 4\)"):
        nn.embedding_lookup(p, np.asarray([-1]))
    with pytest.raises(TypeError, match="ids must be integers"):
        nn.embedding_lookup(p, np.asarray([0.0]))
    with pytest.raises(TypeError, match="a list of 2 sharded tensors is not supported"):
        nn.embedding_lookup([p, p], np.asarray([0]))


def test_compiled_dropout_draws_a_new_mask_on_every_call():
    pytest.importorskip("jax")
    f = tg.function(lambda x: nn.dropout(x, 0.5))
    x = tg.constant(np.ones((8, 8)))
    a, b = f(x).numpy(), f(x).numpy()
    assert set(np.unique(a)) <= {0.0, 2.0} and not np.array_equal(a, b)
