"""tg.special.logsumexp: values against SciPy, stability, gradient (softmax), second order."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp as sp_logsumexp, softmax as sp_softmax

import tapegrad as tg
from gradhelpers import tape_grads

RNG = np.random.default_rng(4)


def _grad(f, x):
    return tape_grads(f, x)[0]


@pytest.mark.parametrize("shape, axis, keepdims", [
    ((3, 4), None, False), ((3, 4), 1, False), ((3, 4), 0, True), ((2, 3, 4), (0, 2), False),
    ((), None, False), ((0, 3), 1, False), ((5,), -1, True)])
def test_matches_scipy(shape, axis, keepdims):
    x = RNG.normal(size=shape) * 3
    got = tg.special.logsumexp(tg.constant(x), axis=axis, keepdims=keepdims)
    want = sp_logsumexp(x, axis=axis, keepdims=keepdims)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_stable_for_large_and_infinite_inputs():
    x = np.array([[1e4, 1e4, 1e4 - 1.0], [-1e4, -1e4 - 2.0, -1e4]])
    got = tg.special.logsumexp(tg.constant(x), axis=1).numpy()
    np.testing.assert_allclose(got, sp_logsumexp(x, axis=1), rtol=1e-15)
    assert np.isfinite(got).all()
    g = _grad(lambda t: tg.sum(tg.special.logsumexp(t, axis=1)), x)
    np.testing.assert_allclose(g, sp_softmax(x, axis=1), rtol=1e-12)
    x = np.array([-np.inf, 0.0, np.log(3.0)])
    np.testing.assert_allclose(tg.special.logsumexp(tg.constant(x)).numpy(), np.log(4.0))
    with np.errstate(divide="ignore"):
        assert tg.special.logsumexp(tg.constant([-np.inf, -np.inf])).numpy() == -np.inf


def test_gradient_is_softmax_and_second_order():
    x = np.array([0.5, -1.0, 2.0])
    s = sp_softmax(x)
    np.testing.assert_allclose(_grad(tg.special.logsumexp, x), s, rtol=1e-12)
    v = tg.Variable(x)
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.special.logsumexp(v)
        g = inner.gradient(y, v)
    # the Hessian of logsumexp is diag(s) - s s^T
    np.testing.assert_allclose(outer.jacobian(g, v).numpy(), np.diag(s) - np.outer(s, s),
                               atol=1e-12)


def test_errors():
    with pytest.raises(ValueError, match=r"logsumexp: cannot reduce a tensor of shape \(2, 3\)"):
        tg.special.logsumexp(tg.ones((2, 3)), axis=2)
