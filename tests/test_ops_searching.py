"""Searching: nonzero and searchsorted against NumPy and array-api-strict; errors."""
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


@SETTINGS
@given(x=hnp.arrays(st.sampled_from([np.float64, np.int16, np.bool_]),
                    hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
                    elements=st.integers(0, 1)))
def test_nonzero_matches_the_backends(x):
    got = tg.nonzero(tg.constant(x))
    want = np.nonzero(x)
    assert isinstance(got, tuple) and len(got) == x.ndim
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)
    got = tg.nonzero(tg.asarray(xs.asarray(x)))
    for g, w in zip(got, want):
        assert type(g._value) is STRICT
        np.testing.assert_array_equal(g.numpy(), w)


def test_nonzero_of_complex_and_errors():
    got = tg.nonzero(tg.constant([0j, 1j, 2.0 + 0j, 0j]))
    np.testing.assert_array_equal(got[0].numpy(), [1, 2])
    with pytest.raises(ValueError, match="0-d"):
        tg.nonzero(tg.constant(1.0))


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from([np.float64, np.int64]))
def test_searchsorted_matches_the_backends(data, dtype):
    x1 = np.sort(data.draw(hnp.arrays(dtype, st.integers(0, 6), elements=st.integers(-5, 5))))
    x2 = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0,
                                                      max_side=4), elements=st.integers(-6, 6)))
    side = data.draw(st.sampled_from(["left", "right"]))
    got = tg.searchsorted(tg.constant(x1), tg.constant(x2), side=side)
    want = np.searchsorted(x1, x2, side=side)
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.shape == want.shape
    s = tg.searchsorted(tg.asarray(xs.asarray(x1)), tg.asarray(xs.asarray(x2)), side=side)
    assert type(s._value) is STRICT
    np.testing.assert_array_equal(s.numpy(), want)


def test_searchsorted_sorter_scalars_and_errors():
    x1 = tg.constant([3.0, 1.0, 2.0])
    np.testing.assert_array_equal(
        tg.searchsorted(x1, tg.constant([2.5, 0.0]), sorter=tg.argsort(x1)).numpy(), [2, 0])
    assert int(tg.searchsorted(tg.constant([1.0, 2.0, 3.0]), 2.0, side="right")) == 2
    s = tg.asarray(xs.asarray([1.0, 2.0, 3.0]))
    assert int(tg.searchsorted(s, 2.0)) == 1  # a Python scalar also on array-api-strict
    with pytest.raises(ValueError, match="1-d"):
        tg.searchsorted(tg.ones((2, 2)), tg.ones(2))
    with pytest.raises(ValueError, match="side must be"):
        tg.searchsorted(tg.ones(2), tg.ones(2), side="middle")
