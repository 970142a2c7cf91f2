"""Reductions: forward values against NumPy, hand-checked and numerical gradients, errors."""
from __future__ import annotations

import array_api_strict as xs
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from gradhelpers import numeric_grad, tape_grads

RNG = np.random.default_rng(0)


def _grad(f, x):
    return tape_grads(f, x)[0]


def _num_grad(f, x, h=1e-6):
    return numeric_grad(f, [x], 0, h)


CASES = [((3, 4), None, False), ((3, 4), 0, False), ((3, 4), 1, True), ((2, 3, 4), (0, 2), False),
         ((2, 3, 4), -1, True), ((5,), 0, False), ((), None, False), ((1, 1), 0, True)]

NP = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min,
      "var": np.var, "std": np.std}


@pytest.mark.parametrize("name", list(NP))
@pytest.mark.parametrize("shape, axis, keepdims", CASES)
def test_forward_matches_numpy(name, shape, axis, keepdims):
    x = RNG.uniform(-2, 2, size=shape)
    got = getattr(tg, name)(tg.constant(x), axis=axis, keepdims=keepdims)
    want = NP[name](x, axis=axis, keepdims=keepdims)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(NP))
@pytest.mark.parametrize("shape, axis, keepdims", CASES[:6])
def test_gradient_matches_central_differences(name, shape, axis, keepdims):
    x = RNG.uniform(-2, 2, size=shape)
    w = RNG.normal(size=NP[name](x, axis=axis, keepdims=keepdims).shape)

    def f(t):
        return tg.sum(getattr(tg, name)(t, axis=axis, keepdims=keepdims) * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("correction", [0.0, 1.0, 2])
def test_var_std_correction(correction):
    x = RNG.normal(size=(4, 5))
    np.testing.assert_allclose(tg.var(tg.constant(x), axis=1, correction=correction).numpy(),
                               np.var(x, axis=1, ddof=correction))
    np.testing.assert_allclose(tg.std(tg.constant(x), axis=0, correction=correction).numpy(),
                               np.std(x, axis=0, ddof=correction))
    f = lambda t: tg.sum(tg.std(t, axis=0, correction=correction) ** 3)  # noqa: E731
    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6)


def test_var_gradient_by_hand():
    x = np.array([1.0, 2.0, 3.0, 4.0])  # mean 2.5, d var / dx = 2 (x - 2.5) / 4
    np.testing.assert_allclose(_grad(tg.var, x), [-0.75, -0.25, 0.25, 0.75])
    np.testing.assert_allclose(_grad(lambda t: tg.var(t, correction=1.0), x),
                               2 * (x - 2.5) / 3)
    # std = sqrt(1.25): d std / dx = (x - 2.5) / (4 std)
    np.testing.assert_allclose(_grad(tg.std, x), (x - 2.5) / (4 * np.sqrt(1.25)))


def test_max_min_ties_split_evenly():
    x = np.array([1.0, 3.0, 3.0, 2.0])
    np.testing.assert_allclose(_grad(tg.max, x), [0.0, 0.5, 0.5, 0.0])
    x = np.array([[1.0, 1.0, 1.0], [2.0, 0.0, 0.0]])
    np.testing.assert_allclose(_grad(lambda t: tg.sum(tg.max(t, axis=1)), x),
                               [[1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(_grad(lambda t: tg.sum(tg.min(t, axis=1, keepdims=True) * 6.0), x),
                               [[2.0, 2.0, 2.0], [0.0, 3.0, 3.0]])
    np.testing.assert_allclose(_grad(tg.min, x), [[0.0, 0.0, 0.0], [0.0, 0.5, 0.5]])


def test_prod_gradient_with_zeros():
    # the gradient is the product of the other elements, also where x has zeros
    np.testing.assert_allclose(_grad(tg.prod, [2.0, 3.0, 4.0]), [12.0, 8.0, 6.0])
    np.testing.assert_allclose(_grad(tg.prod, [2.0, 0.0, 4.0]), [0.0, 8.0, 0.0])
    np.testing.assert_allclose(_grad(tg.prod, [0.0, 5.0, 0.0]), [0.0, 0.0, 0.0])
    x = np.array([[2.0, 0.0, 3.0], [1.0, 2.0, 3.0], [0.0, 0.0, 7.0]])
    want = [[0.0, 6.0, 0.0], [6.0, 3.0, 2.0], [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(_grad(lambda t: tg.sum(tg.prod(t, axis=1)), x), want)
    np.testing.assert_allclose(_grad(lambda t: tg.sum(tg.prod(t.T, axis=0, keepdims=True)), x),
                               want)


def test_prod_hessian():
    # d2 prod / dx_i dx_j = product of the elements other than i and j (0 on the diagonal)
    x = tg.Variable([2.0, 3.0, 5.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.prod(x)
        g = inner.gradient(y, x)
    h = outer.jacobian(g, x).numpy()
    np.testing.assert_allclose(h, [[0, 5, 3], [5, 0, 2], [3, 2, 0]], atol=1e-12)


def test_second_order_of_max_var_and_cumsum():
    x = tg.Variable([0.5, -1.0, 2.0, 1.5])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.var(x) + tg.max(x) ** 2 + tg.sum(tg.cumulative_sum(x) ** 2)
        g = inner.gradient(y, x)
    h = outer.jacobian(g, x).numpy()
    n = 4
    h_var = 2.0 / n * (np.eye(n) - 1.0 / n)
    h_max = np.zeros((n, n))
    h_max[2, 2] = 2.0
    lower = np.tril(np.ones((n, n)))  # cumsum as a matrix L: H = 2 L^T L
    np.testing.assert_allclose(h, h_var + h_max + 2 * lower.T @ lower, atol=1e-12)


@pytest.mark.parametrize("shape, axis, include_initial", [
    ((5,), None, False), ((5,), 0, True), ((3, 4), 1, False), ((3, 4), 0, True),
    ((2, 3, 4), -2, True), ((0, 3), 1, False), ((3, 0), 1, True)])
def test_cumulative_sum(shape, axis, include_initial):
    x = RNG.normal(size=shape)
    got = tg.cumulative_sum(tg.constant(x), axis=axis, include_initial=include_initial)
    want = np.cumulative_sum(x, axis=axis, include_initial=include_initial)
    np.testing.assert_allclose(got.numpy(), want)
    w = RNG.normal(size=want.shape)

    def f(t):
        return tg.sum(tg.cumulative_sum(t, axis=axis, include_initial=include_initial) * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)


def test_cumulative_sum_gradient_by_hand():
    # x_j enters y_k for every k >= j: the gradient of sum(y) counts them
    np.testing.assert_allclose(_grad(lambda t: tg.sum(tg.cumulative_sum(t)), [1.0, 2.0, 3.0]),
                               [3.0, 2.0, 1.0])
    w = np.array([1.0, 10.0, 100.0, 1000.0])
    f = lambda t: tg.sum(tg.cumulative_sum(t, include_initial=True) * w)  # noqa: E731
    np.testing.assert_allclose(_grad(f, [1.0, 2.0, 3.0]), [1110.0, 1100.0, 1000.0])


def test_cumulative_sum_dtype_and_errors():
    x = tg.constant(np.arange(4, dtype=np.int32))
    assert tg.cumulative_sum(x, dtype=tg.float64).dtype == np.float64
    with pytest.raises(ValueError, match="axis is required"):
        tg.cumulative_sum(tg.ones((2, 3)))
    with pytest.raises(ValueError, match="at least one dimension"):
        tg.cumulative_sum(tg.constant(1.0))


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), (-1, False)])
def test_argmax_argmin(fn, axis, keepdims):
    x = RNG.normal(size=(3, 4))
    got = getattr(tg, fn)(tg.constant(x), axis=axis, keepdims=keepdims)
    want = getattr(np, fn)(x, axis=axis, keepdims=keepdims)
    assert np.issubdtype(got.dtype, np.integer)
    np.testing.assert_array_equal(got.numpy(), want)


def test_argmax_is_not_differentiable_but_usable_under_a_tape():
    x = tg.Variable([1.0, 5.0, 2.0])
    with tg.GradientTape() as t:
        i = tg.argmax(x)
        y = tg.take(x, tg.reshape(i, (1,))) * 2.0
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [0.0, 2.0, 0.0])
    assert tg.registered_ops()["ArgMax"].differentiable is False


def test_gradient_dtype_follows_input():
    x = tg.Variable(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32))
    with tg.GradientTape() as t:
        y = tg.prod(x, dtype=tg.float64) + tg.max(x) + tg.std(x)
    g = t.gradient(y, x)
    assert g.dtype == np.float32
    d_std = (1.0 - 2.5) / (4 * np.std([1, 2, 3, 4]))
    np.testing.assert_allclose(g.numpy()[0, 0], 24.0 + 0.0 + d_std, rtol=1e-5)


def test_errors():
    with pytest.raises(ValueError, match=r"mean: .*\(2, 3\).*axis 2"):
        tg.mean(tg.ones((2, 3)), axis=2)
    with pytest.raises(ValueError, match=r"sum: .*\(2, 3\).*axis -3"):
        tg.sum(tg.ones((2, 3)), axis=-3)
    with pytest.raises(ValueError, match=r"max: cannot reduce a tensor of shape \(0, 3\)"):
        tg.max(tg.ones((0, 3)), axis=0)  # no maximum of an empty slice


# --- cumulative_prod, count_nonzero (Array API 2024.12) -----------------------------------------
SETTINGS = settings(max_examples=25, deadline=None)
STRICT = type(xs.asarray(0.0))


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64, np.int64]),
       shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
def test_cumulative_prod_matches_the_backends(data, dtype, shape):
    x = data.draw(hnp.arrays(dtype, shape, elements=st.integers(-3, 3)))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1)) if x.ndim > 1 or data.draw(
        st.booleans()) else None
    include_initial = data.draw(st.booleans())
    got = tg.cumulative_prod(tg.constant(x), axis=axis, include_initial=include_initial)
    want = np.cumulative_prod(x, axis=axis, include_initial=include_initial)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
    s = tg.cumulative_prod(tg.asarray(xs.asarray(x)), axis=axis, include_initial=include_initial)
    assert type(s._value) is STRICT
    np.testing.assert_array_equal(s.numpy(), want)


@pytest.mark.parametrize("x, axis", [
    ([2.0, 0.0, 3.0, 4.0], None),            # one zero
    ([0.0, 2.0, 0.0, 5.0], None),            # two zeros, the first at the start
    ([1.5, -2.0, 0.5, 0.0], None),           # a zero at the end
    ([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0], [1.0, 2.0, 3.0]], 1),
    ([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0], [1.0, 2.0, 3.0]], 0),
])
@pytest.mark.parametrize("include_initial", [False, True])
def test_cumulative_prod_gradient_with_zeros(x, axis, include_initial):
    # first order is exact at exact zeros: the function is a polynomial, central differences
    # are exact enough; dx_j = sum_{k>=j} w_k prod_{i<=k, i!=j} x_i
    x = np.asarray(x)
    w = RNG.normal(size=np.cumulative_prod(x, axis=axis, include_initial=include_initial).shape)

    def f(t):
        return tg.sum(tg.cumulative_prod(t, axis=axis, include_initial=include_initial) * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-7, atol=1e-9)
    tg.test.check_gradients(f, [x], order=1)


def test_cumulative_prod_gradient_by_hand():
    # y = (a, ab, abc): d sum(y)/da = 1 + b + bc, /db = a + ac, /dc = ab
    np.testing.assert_allclose(_grad(lambda t: tg.sum(tg.cumulative_prod(t)), [2.0, 3.0, 5.0]),
                               [1 + 3 + 15, 2 + 10, 6])
    # with b = 0: d/da = 1 + 0 + 0, d/db = a + ac, d/dc = ab = 0
    np.testing.assert_allclose(_grad(lambda t: tg.sum(tg.cumulative_prod(t)), [2.0, 0.0, 5.0]),
                               [1.0, 2 + 10, 0.0])


def test_cumulative_prod_second_order_away_from_zeros():
    x = RNG.uniform(0.5, 1.5, size=(3, 4)) * RNG.choice([-1.0, 1.0], size=(3, 4))
    tg.test.check_gradients(lambda t: tg.cumulative_prod(t, axis=1) ** 2, [x], order=2)
    tg.test.check_gradients(lambda t: tg.cumulative_prod(t, axis=0, include_initial=True), [x],
                            order=2)


def test_cumulative_prod_dtype_and_errors():
    assert tg.cumulative_prod(tg.constant([1, 2, 3]), dtype=tg.float32).dtype == np.float32
    with pytest.raises(ValueError, match="axis is required"):
        tg.cumulative_prod(tg.ones((2, 3)))
    with pytest.raises(ValueError, match="at least one dimension"):
        tg.cumulative_prod(tg.constant(2.0))


@SETTINGS
@given(data=st.data(), x=hnp.arrays(st.sampled_from([np.float64, np.int32, np.bool_]),
                                     hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                      max_side=4),
                                     elements=st.integers(0, 1)))
def test_count_nonzero_matches_the_backends(data, x):
    axis = data.draw(st.none() | st.lists(st.integers(0, x.ndim - 1), unique=True).map(tuple)
                     if x.ndim else st.none())
    keepdims = data.draw(st.booleans())
    got = tg.count_nonzero(tg.constant(x), axis=axis, keepdims=keepdims)
    want = np.count_nonzero(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.shape == np.shape(want)
    s = tg.count_nonzero(tg.asarray(xs.asarray(x)), axis=axis, keepdims=keepdims)
    assert type(s._value) is STRICT
    np.testing.assert_array_equal(s.numpy(), want)


def test_count_nonzero_is_not_differentiable():
    v = tg.Variable([0.0, 1.5, 2.0])
    with tg.GradientTape() as t:
        c = tg.count_nonzero(v)
        y = tg.sum(v) * tg.astype(c, tg.float64)
    assert int(c) == 2
    np.testing.assert_array_equal(t.gradient(y, v).numpy(), [2.0, 2.0, 2.0])
