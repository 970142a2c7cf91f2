"""matmul, tensordot, vecdot, ``@``, ``.T``/``.mT``: values against NumPy, gradients, errors."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from gradhelpers import numeric_grad, tape_grads

RNG = np.random.default_rng(3)


_grads, _num_grad = tape_grads, numeric_grad


def _check(op, np_op, s1, s2, **kw):
    x1, x2 = RNG.normal(size=s1), RNG.normal(size=s2)
    got = op(tg.constant(x1), tg.constant(x2), **kw)
    want = np_op(x1, x2, **kw)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    w = RNG.normal(size=np.shape(want))

    def f(a, b):
        return tg.sum(op(a, b, **kw) * w)

    for k, g in enumerate(_grads(f, x1, x2)):
        np.testing.assert_allclose(g, _num_grad(f, [x1, x2], k), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("s1, s2", [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((0, 3), (3, 2)),
    ((3, 0), (0, 2)), ((1, 1), (1, 1))])
def test_matmul(s1, s2):
    _check(tg.matmul, np.matmul, s1, s2)


def test_matmul_1d_gradients_by_hand():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    ga, gb = _grads(lambda x, y: tg.matmul(x, y), a, b)  # dot product
    np.testing.assert_array_equal(ga, b)
    np.testing.assert_array_equal(gb, a)
    m = np.arange(6.0).reshape(3, 2)
    ga, gm = _grads(lambda x, y: tg.sum(x @ y), a, m)  # row vector times matrix
    np.testing.assert_array_equal(ga, m.sum(axis=1))
    np.testing.assert_array_equal(gm, np.outer(a, [1.0, 1.0]))
    gm, gb2 = _grads(lambda x, y: tg.sum(x @ y), m.T, b)  # matrix times column vector
    np.testing.assert_array_equal(gm, np.outer([1.0, 1.0], b))
    np.testing.assert_array_equal(gb2, m.T.sum(axis=0))


def test_matmul_second_order():
    # y = sum((A x)^2): Hessian in x is 2 A^T A
    a = RNG.normal(size=(4, 3))
    x = tg.Variable(RNG.normal(size=3))
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.sum((tg.constant(a) @ x) ** 2)
        g = inner.gradient(y, x)
    np.testing.assert_allclose(outer.jacobian(g, x).numpy(), 2 * a.T @ a, rtol=1e-12)


def test_operators_and_transposes():
    a, b = RNG.normal(size=(2, 3)), RNG.normal(size=(3, 4))
    np.testing.assert_allclose((tg.constant(a) @ tg.constant(b)).numpy(), a @ b)
    got = a @ tg.constant(b)  # NumPy defers to Tensor.__rmatmul__
    assert isinstance(got, tg.Tensor)
    np.testing.assert_allclose(got.numpy(), a @ b)
    np.testing.assert_array_equal(tg.constant(a).T.numpy(), a.T)
    c = RNG.normal(size=(5, 2, 3))
    np.testing.assert_array_equal(tg.constant(c).mT.numpy(), np.swapaxes(c, -1, -2))
    x = tg.Variable(a)
    with tg.GradientTape() as t:
        y = tg.sum(x.T * tg.constant(b[:, :2]))
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), b[:, :2].T)


def test_T_requires_2d():
    with pytest.raises(ValueError, match=r"Tensor.T is defined for 2-d tensors only.*\(2, 3, 4\)"
                                         r".*x.mT"):
        tg.ones((2, 3, 4)).T
    with pytest.raises(ValueError, match="2-d tensors only"):
        tg.ones(3).T


@pytest.mark.parametrize("s1, s2, axes", [
    ((2, 3, 4), (3, 4, 5), 2), ((2, 3), (3, 4), 1), ((2, 3), (4, 5), 0),
    ((2, 3, 4), (4, 2), ([2, 0], [0, 1])), ((3, 4), (4, 3), ([0, 1], [1, 0])),
    ((3, 4, 2), (2, 5, 3), ([0, 2], [2, 0])), ((3,), (3,), 1), ((0, 3), (3, 2), 1),
    ((2, 3), (3, 2), (1, 0))])
def test_tensordot(s1, s2, axes):
    _check(tg.tensordot, np.tensordot, s1, s2, axes=axes)


@pytest.mark.parametrize("s1, s2, axis", [
    ((3, 4), (3, 4), -1), ((3, 4), (4,), -1), ((2, 1, 3), (4, 3), -1), ((3, 4), (3, 4), -2),
    ((3,), (3,), -1), ((0, 2), (2,), -1), ((3, 4), (3, 4), 0), ((2, 3), (1, 3), 1)])
def test_vecdot(s1, s2, axis):
    n = max(len(s1), len(s2))
    _check(tg.vecdot, lambda a, b, axis: np.vecdot(a, b, axis=axis - n if axis >= 0 else axis),
           s1, s2, axis=axis)


def test_vecdot_gradient_by_hand():
    a, b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([10.0, 20.0])
    ga, gb = _grads(lambda x, y: tg.sum(tg.vecdot(x, y)), a, b)
    np.testing.assert_array_equal(ga, [[10, 20], [10, 20]])
    np.testing.assert_array_equal(gb, [4.0, 6.0])  # b is broadcast over the rows


def test_errors():
    with pytest.raises(ValueError, match=r"matmul: cannot multiply shapes \(2, 3\) and \(4, 5\).*"
                                         r"last dimension \(3\).*second-to-last dimension \(4\)"):
        tg.ones((2, 3)) @ tg.ones((4, 5))
    with pytest.raises(ValueError, match="at least 1-d"):
        tg.matmul(tg.constant(2.0), tg.ones(3))
    with pytest.raises(ValueError, match=r"tensordot: cannot contract shapes \(2, 3\) and "
                                         r"\(4, 5\)"):
        tg.tensordot(tg.ones((2, 3)), tg.ones((4, 5)), axes=1)
    with pytest.raises(ValueError, match="vecdot: cannot take dot products"):
        tg.vecdot(tg.ones((2, 3)), tg.ones((2, 4)))
    with pytest.raises(ValueError, match="vecdot: axis 2 is out of range"):
        tg.vecdot(tg.ones((2, 3)), tg.ones((2, 3)), axis=2)
