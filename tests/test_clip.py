"""tg.clip_by_value, clip_by_norm, global_norm, clip_by_global_norm: TensorFlow's documented
values, NumPy formulas, gradients (TensorFlow's, to second order) and the errors."""
import numpy as np
import pytest

import tapegrad as tg

rng = np.random.default_rng(4)


def test_clip_by_value_values_and_gradient():
    # tf.clip_by_value([[-10., -1., 0.], [0., 2., 10.]], -1, 1) -> [[-1, -1, 0], [0, 1, 1]]
    t = tg.constant([[-10.0, -1.0, 0.0], [0.0, 2.0, 10.0]])
    np.testing.assert_array_equal(tg.clip_by_value(t, -1, 1).numpy(), [[-1, -1, 0], [0, 1, 1]])
    lo, hi = tg.constant(-1.0), tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch([t, lo, hi])
        y = tg.sum(tg.clip_by_value(t, lo, hi) * tg.constant([[1.0, 2, 3], [4, 5, 6]]))
    dt, dlo, dhi = tape.gradient(y, [t, lo, hi])
    np.testing.assert_array_equal(dt.numpy(), [[0, 2, 3], [4, 0, 0]])  # ties pass (-1 at -1)
    assert (float(dlo), float(dhi)) == (1.0, 11.0)
    x = rng.uniform(-2, 2, size=(3, 4))
    tg.test.check_gradients(lambda x: tg.clip_by_value(x, -1.0, 1.0) ** 2, [x], order=2,
                            modes=("rev", "fwd"))


def test_clip_by_value_rejects_bounds_that_broadcast_t():
    with pytest.raises(ValueError, match=r"must broadcast to t's shape \(3,\), but they "
                                         r"broadcast the result to \(2, 3\)"):
        tg.clip_by_value(tg.constant(np.ones(3)), tg.constant(np.zeros((2, 3))), 1.0)


def test_clip_by_norm_as_tensorflow_documents():
    # tf.clip_by_norm([[1., 2., 3., 4., 5.]], 2.0) (TensorFlow's docstring)
    t = tg.constant([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=tg.float32)
    np.testing.assert_allclose(tg.clip_by_norm(t, 2.0).numpy(),
                               [[0.26967996, 0.5393599, 0.80903983, 1.0787199, 1.3483998]],
                               rtol=1e-6)
    x = rng.normal(size=(3, 4))
    rows = np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(tg.clip_by_norm(tg.constant(x), 1.0, axes=[1]).numpy(),
                               x / np.maximum(rows, 1.0))
    np.testing.assert_allclose(tg.clip_by_norm(tg.constant(x), 100.0).numpy(), x)  # unchanged
    tg.test.check_gradients(lambda x: tg.clip_by_norm(x, 1.0, axes=1), [x], order=2,
                            modes=("rev", "fwd"))


def test_clip_by_norm_of_zeros_has_a_finite_gradient():
    z = tg.constant(np.zeros(3))
    with tg.GradientTape() as tape:
        tape.watch(z)
        y = tg.sum(tg.clip_by_norm(z, 1.0))
    np.testing.assert_array_equal(tape.gradient(y, z).numpy(), [1.0, 1.0, 1.0])


def test_global_norm_and_clip_by_global_norm():
    a, b = rng.normal(size=(2, 3)), rng.normal(size=4)
    norm = np.sqrt(np.sum(a ** 2) + np.sum(b ** 2))
    np.testing.assert_allclose(float(tg.global_norm([tg.constant(a), None, tg.constant(b)])),
                               norm)
    clipped, n = tg.clip_by_global_norm([tg.constant(a), None, tg.constant(b)], 1.0)
    assert clipped[1] is None and len(clipped) == 3
    np.testing.assert_allclose(float(n), norm)
    np.testing.assert_allclose(clipped[0].numpy(), a / max(norm, 1.0))
    np.testing.assert_allclose(clipped[2].numpy(), b / max(norm, 1.0))
    same, _ = tg.clip_by_global_norm((tg.constant(a),), 100.0)
    np.testing.assert_allclose(same[0].numpy(), a)
    given, n = tg.clip_by_global_norm([tg.constant(a)], 1.0, use_norm=tg.constant(2.0))
    np.testing.assert_allclose(given[0].numpy(), a / 2.0)
    assert float(n) == 2.0
    with np.errstate(invalid="ignore"):  # inf - inf
        inf, _ = tg.clip_by_global_norm([tg.constant(np.asarray([np.inf, 1.0]))], 1.0)
    assert np.all(np.isnan(inf[0].numpy()))  # TensorFlow: an infinite norm gives NaN
    f32, _ = tg.clip_by_global_norm([tg.constant(np.ones(2, np.float32))], 1.0)
    assert f32[0].dtype == tg.float32
    tg.test.check_gradients(lambda a, b: tg.clip_by_global_norm([a, b], 1.0)[0], [a, b],
                            order=2, modes=("rev", "fwd"))


def test_clip_errors():
    t = tg.constant(np.ones(3))
    with pytest.raises(ValueError, match="clip_norm must be a non-negative scalar, got -1.0"):
        tg.clip_by_norm(t, -1.0)
    with pytest.raises(ValueError, match="clip_by_global_norm: clip_norm must be a non-negative"):
        tg.clip_by_global_norm([t], -0.5)
    with pytest.raises(TypeError, match="t_list should be a list or tuple of tensors, got Tensor"):
        tg.clip_by_global_norm(t, 1.0)
    with pytest.raises(ValueError, match="holds no tensors"):
        tg.global_norm([None])
