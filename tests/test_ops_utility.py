"""Utility functions: all, any, diff against NumPy and array-api-strict; diff's gradient."""
from __future__ import annotations

import array_api_strict as xs
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg

SETTINGS = settings(max_examples=25, deadline=None)
STRICT = type(xs.asarray(0.0))
RNG = np.random.default_rng(6)


@pytest.mark.parametrize("name", ["all", "any"])
@SETTINGS
@given(data=st.data(), x=hnp.arrays(st.sampled_from([np.float64, np.int8, np.bool_]),
                                     hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                      max_side=4), elements=st.integers(0, 1)))
def test_all_any_match_the_backends(name, data, x):
    axis = data.draw(st.none() | st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=1,
                                          max_size=x.ndim, unique_by=lambda a: a % x.ndim)
                     .map(tuple) if x.ndim else st.none())
    keepdims = data.draw(st.booleans())
    got = getattr(tg, name)(tg.constant(x), axis=axis, keepdims=keepdims)
    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    assert got.dtype == np.bool_ and got.shape == np.shape(want)
    np.testing.assert_array_equal(got.numpy(), want)
    s = getattr(tg, name)(tg.asarray(xs.asarray(x)), axis=axis, keepdims=keepdims)
    assert type(s._value) is STRICT
    np.testing.assert_array_equal(s.numpy(), want)


def test_all_any_special_values_and_errors():
    assert bool(tg.all(tg.constant([np.nan, np.inf, -1.0])))
    assert bool(tg.all(tg.ones((0,)))) and not bool(tg.any(tg.ones((0,))))
    assert bool(tg.any(tg.constant([0j, 1j])))
    with pytest.raises(ValueError, match="all: cannot reduce"):
        tg.all(tg.ones((2,)), axis=1)


@SETTINGS
@given(data=st.data(), x=hnp.arrays(st.sampled_from([np.float64, np.int64]),
                                     hnp.array_shapes(min_dims=1, max_dims=3, min_side=0,
                                                      max_side=5), elements=st.integers(-9, 9)))
def test_diff_matches_the_backends(data, x):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = data.draw(st.integers(0, 3))
    kw = {}
    for key in ("prepend", "append"):
        if data.draw(st.booleans()):
            shape = list(x.shape)
            shape[axis] = data.draw(st.integers(0, 2))
            kw[key] = RNG.integers(-9, 9, size=shape).astype(x.dtype)
    got = tg.diff(tg.constant(x), axis=axis, n=n, **{k: tg.constant(v) for k, v in kw.items()})
    # the standard's definition: join, then difference (NumPy skips the join when n = 0)
    nothing = np.take(x, np.arange(0), axis=axis)
    joined = np.concatenate([kw.get("prepend", nothing), x, kw.get("append", nothing)], axis=axis)
    want = np.diff(joined, axis=axis, n=n)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    if n == 0 and kw:
        return  # array-api-strict follows NumPy there
    s = tg.diff(tg.asarray(xs.asarray(x)), axis=axis, n=n,
                **{k: tg.asarray(xs.asarray(v)) for k, v in kw.items()})
    assert type(s._value) is STRICT
    np.testing.assert_array_equal(s.numpy(), want)


def test_diff_gradient():
    # out_i = x_{i+1} - x_i, so d sum(w out)/dx_j = w_{j-1} - w_j
    v = tg.Variable([1.0, 4.0, 9.0, 16.0])
    w = np.array([1.0, 10.0, 100.0])
    with tg.GradientTape() as t:
        y = tg.sum(tg.diff(v) * w)
    np.testing.assert_array_equal(t.gradient(y, v).numpy(), [-1.0, -9.0, -90.0, 100.0])
    x, p = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 1))
    tg.test.check_gradients(lambda a, b: tg.diff(a, n=2, prepend=b) ** 2, [x, p], order=2)
    tg.test.check_gradients(lambda a: tg.diff(a, axis=0, append=1.5) ** 3, [x], order=2)


def test_diff_errors():
    with pytest.raises(ValueError, match="0-d"):
        tg.diff(tg.constant(1.0))
    with pytest.raises(ValueError, match="out of range"):
        tg.diff(tg.ones(3), axis=1)
    with pytest.raises(ValueError, match="non-negative"):
        tg.diff(tg.ones(3), n=-1)
