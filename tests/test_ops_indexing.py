"""Indexing: ``Tensor.__getitem__``, ``take``, ``take_along_axis`` and their gradients."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from gradhelpers import numeric_grad, tape_grads

RNG = np.random.default_rng(2)


def _grad(f, x):
    return tape_grads(f, x)[0]


def _num_grad(f, x, h=1e-6):
    return numeric_grad(f, [x], 0, h)


MASK = np.array([[True, False, True, False], [False, False, True, True], [True] * 4])
KEYS = [
    1, -1, slice(1, 3), (slice(None), 2), (Ellipsis, 1), (None, 0),
    (1, None, slice(None, None, -1)),
    (slice(None), None, Ellipsis), (), [2, 0, 2], np.array([[0, 1], [2, 2]]),
    (np.array([0, 2, 2]), np.array([1, 3, 1])), (slice(None), np.array([3, 3, 0])),
    (np.array([1, 0]), slice(1, 3)), MASK, (slice(None), MASK[0]),
    (1, 2), (np.array([], dtype=np.intp),),
]


@pytest.mark.parametrize("key", KEYS, ids=[str(i) for i in range(len(KEYS))])
def test_getitem_matches_numpy_and_gradient(key):
    x = RNG.normal(size=(3, 4))
    np_key = key if not isinstance(key, list) else np.asarray(key)
    want = x[np_key]
    got = tg.constant(x)[key]
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(got.numpy(), want)
    w = RNG.normal(size=np.shape(want))

    def f(t):
        return tg.sum(t[key] * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)


def test_repeated_indices_accumulate():
    x = [10.0, 20.0, 30.0]
    np.testing.assert_array_equal(_grad(lambda t: tg.sum(t[[0, 2, 0, 0]]), x), [3.0, 0.0, 1.0])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(_grad(lambda t: tg.sum(t[np.array([2, 2, 1, 2])] * w), x),
                                  [0.0, 3.0, 7.0])  # x2: 1 + 2 + 4
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(
        _grad(lambda t: tg.sum(t[np.array([1, 1]), np.array([0, 0])]), m), [[0, 0, 0], [2, 0, 0]])


def test_boolean_mask_and_tensor_keys():
    x = np.arange(6.0).reshape(2, 3)
    t = tg.constant(x)
    np.testing.assert_array_equal(t[t > 2.0].numpy(), [3.0, 4.0, 5.0])
    np.testing.assert_array_equal(_grad(lambda v: tg.sum(v[tg.constant(x) > 2.0] ** 2), x),
                                  [[0, 0, 0], [6, 8, 10]])
    idx = tg.constant(np.array([2, 0]))
    np.testing.assert_array_equal(t[:, idx].numpy(), x[:, [2, 0]])
    np.testing.assert_array_equal(t[idx[1]].numpy(), x[0])  # 0-d integer tensor as an index
    np.testing.assert_array_equal(t[tg.newaxis, ..., 1].numpy(), x[None, ..., 1])


def test_len_and_iteration_use_getitem():
    x = tg.Variable(np.arange(6.0).reshape(3, 2))
    with tg.GradientTape() as t:
        rows = list(x)
        y = tg.sum(rows[0] * rows[2])
    assert len(x) == 3 and len(rows) == 3
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [[4, 5], [0, 0], [0, 1]])


def test_second_order_with_repeated_indices():
    x = tg.Variable([1.0, 2.0, 3.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.sum(x[[0, 0, 2]] ** 3)  # = 2 x0^3 + x2^3
        g = inner.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), [6.0, 0.0, 27.0])
    np.testing.assert_allclose(outer.jacobian(g, x).numpy(), np.diag([12.0, 0.0, 18.0]))


def test_gradient_of_gradient_with_respect_to_the_cotangent():
    # the gradient of getitem is a scatter-add, whose own gradient is getitem again
    x = tg.Variable([1.0, 2.0, 3.0])
    dy = tg.Variable([1.0, 10.0, 100.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = x[[2, 2, 0]]
        g = inner.gradient(y, x, output_gradients=dy)
        z = tg.sum(g * tg.constant([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g.numpy(), [100.0, 0.0, 11.0])
    np.testing.assert_allclose(outer.gradient(z, dy).numpy(), [3.0, 3.0, 1.0])


@pytest.mark.parametrize("shape, indices, axis", [
    ((5,), [0, 4, 4, -1], None), ((3, 4), [2, 0, 2], 0), ((3, 4), [[1, 3], [3, 3]], 1),
    ((2, 3, 4), [0, 0], -2), ((3, 4), [], 1)])
def test_take(shape, indices, axis):
    x = RNG.normal(size=shape)
    idx = np.asarray(indices, dtype=np.intp)
    got = tg.take(tg.constant(x), tg.constant(idx), axis=axis)
    want = np.take(x, idx, axis=axis)
    np.testing.assert_array_equal(got.numpy(), want)
    w = RNG.normal(size=want.shape)

    def f(t):
        return tg.sum(tg.take(t, idx, axis=axis) * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape, ishape, axis", [((3, 4), (3, 2), 1), ((3, 4), (5, 4), 0),
                                                 ((2, 3, 4), (2, 3, 6), -1), ((3, 4), (1, 4), 0),
                                                 ((3, 1), (3, 5), 1)])
def test_take_along_axis(shape, ishape, axis):
    x = RNG.normal(size=shape)
    idx = RNG.integers(0, shape[axis], size=ishape)
    got = tg.take_along_axis(tg.constant(x), tg.constant(idx), axis=axis)
    want = np.take_along_axis(x, idx, axis=axis)
    np.testing.assert_array_equal(got.numpy(), want)
    w = RNG.normal(size=want.shape)

    def f(t):
        return tg.sum(tg.take_along_axis(t, idx, axis=axis) * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)


def test_take_along_axis_with_argmax_picks_the_maxima():
    x = tg.Variable([[1.0, 5.0, 2.0], [7.0, 0.0, 7.5]])
    with tg.GradientTape() as t:
        m = tg.take_along_axis(x, tg.argmax(x, axis=1, keepdims=True), axis=1)
        y = tg.sum(m)
    np.testing.assert_array_equal(m.numpy(), [[5.0], [7.5]])
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [[0, 1, 0], [0, 0, 1]])


def test_errors():
    x = tg.ones((3, 4))
    with pytest.raises(IndexError, match=r"tensor index \[5\] is invalid for a tensor of shape "
                                         r"\(3, 4\)"):
        x[5]
    with pytest.raises(IndexError, match=r"<array shape=\(2,\) dtype=float64>"):
        x[tg.constant([0.0, 1.0])]
    with pytest.raises(ValueError, match="take: axis is required"):
        tg.take(x, [0])
    with pytest.raises(ValueError, match="take: axis 2 is out of range"):
        tg.take(x, [0], axis=2)
    with pytest.raises(IndexError):
        tg.take(x, [7], axis=0)
    with pytest.raises(ValueError, match="same number"):
        tg.take_along_axis(x, np.zeros(3, dtype=np.intp), axis=0)
    with pytest.raises(TypeError):
        x[0] = 1.0  # Tensors are immutable
