"""Sorting: sort/argsort against NumPy and array-api-strict (stable, descending), the gradient
of sort through the permutation, errors."""
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
RNG = np.random.default_rng(5)
ARRAYS = hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64, np.uint8]),
                    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
                    elements=st.integers(0, 4))  # small range: many ties


def _stable_descending_argsort(x, axis):
    # a stable ascending sort of -x keeps equal elements in input order (exact for these ints)
    return np.argsort(-x.astype(np.float64), axis=axis, kind="stable")


@SETTINGS
@given(data=st.data(), x=ARRAYS)
def test_sort_and_argsort_match_the_backends(data, x):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    descending = data.draw(st.booleans())
    got = tg.sort(tg.constant(x), axis=axis, descending=descending)
    want = np.sort(x, axis=axis)
    want = np.flip(want, axis=axis) if descending else want
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.numpy(), want)
    idx = tg.argsort(tg.constant(x), axis=axis, descending=descending).numpy()
    want_idx = (_stable_descending_argsort(x, axis) if descending
                else np.argsort(x, axis=axis, kind="stable"))
    np.testing.assert_array_equal(idx, want_idx)
    s = tg.asarray(xs.asarray(x))
    ss = tg.sort(s, axis=axis, descending=descending)
    assert type(ss._value) is STRICT
    np.testing.assert_array_equal(ss.numpy(),
                                  tg.asarray(xs.sort(xs.asarray(x), axis=axis,
                                                     descending=descending)).numpy())
    np.testing.assert_array_equal(
        tg.argsort(s, axis=axis, descending=descending).numpy(),
        tg.asarray(xs.argsort(xs.asarray(x), axis=axis, descending=descending)).numpy())


def test_stable_descending_argsort_keeps_the_order_of_ties():
    x = tg.constant([1.0, 3.0, 1.0, 3.0, 2.0])
    np.testing.assert_array_equal(tg.argsort(x, descending=True).numpy(), [1, 3, 4, 0, 2])
    np.testing.assert_array_equal(tg.argsort(x).numpy(), [0, 2, 4, 1, 3])


def test_sort_gradient_goes_back_through_the_permutation():
    x = np.array([[3.0, 1.0, 2.0], [0.5, -1.0, 4.0]])
    w = np.array([10.0, 20.0, 30.0])
    v = tg.Variable(x)
    with tg.GradientTape(persistent=True) as t:
        up = tg.sum(tg.sort(v, axis=1) * w)
        down = tg.sum(tg.sort(v, axis=1, descending=True) * w)
    # ascending: row 0 sorts to (1, 2, 3), so x = 3 gets weight 30, 1 gets 10, 2 gets 20
    np.testing.assert_array_equal(t.gradient(up, v).numpy(), [[30, 10, 20], [20, 10, 30]])
    np.testing.assert_array_equal(t.gradient(down, v).numpy(), [[10, 30, 20], [20, 30, 10]])


@pytest.mark.parametrize("kw", [{}, {"axis": 0}, {"descending": True}, {"stable": False}])
def test_sort_gradient_first_and_second_order(kw):
    x = RNG.normal(size=(4, 3))
    tg.test.check_gradients(lambda a: tg.sort(a, **kw) ** 3 * tg.sin(a), [x], order=2)


def test_argsort_is_not_differentiable_and_errors():
    v = tg.Variable([2.0, 1.0])
    with tg.GradientTape() as t:
        i = tg.argsort(v)
        y = tg.sum(v * tg.astype(i, tg.float64))
    np.testing.assert_array_equal(t.gradient(y, v).numpy(), [1.0, 0.0])
    for fn in (tg.sort, tg.argsort):
        with pytest.raises(ValueError, match="0-d tensor has nothing to sort"):
            fn(tg.constant(1.0))
        with pytest.raises(ValueError, match="axis 2 is out of range"):
            fn(tg.ones((2, 2)), axis=2)
