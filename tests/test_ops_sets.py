"""Set functions: unique_* against NumPy and array-api-strict, named results, NaNs, no gradient."""
from __future__ import annotations

import array_api_strict as xs
import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg

SETTINGS = settings(max_examples=25, deadline=None)
STRICT = type(xs.asarray(0.0))
ARRAYS = hnp.arrays(st.sampled_from([np.float64, np.int32, np.bool_]),
                    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                    elements=st.integers(0, 1))
FIELDS = {"unique_all": ("values", "indices", "inverse_indices", "counts"),
          "unique_counts": ("values", "counts"), "unique_inverse": ("values", "inverse_indices")}


def _compare(got, want):
    if isinstance(want, tuple):
        assert type(got).__name__ == type(want).__name__
        assert got._fields == want._fields
        for g, w in zip(got, want):
            _compare(g, w)
        return
    assert isinstance(got, tg.Tensor) and got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), tg.asarray(want).numpy())


@SETTINGS
@given(x=ARRAYS.flatmap(lambda a: st.just(a * 3 - 1 if a.dtype != np.bool_ else a)))
def test_unique_functions_match_the_backends(x):
    for name in ["unique_all", "unique_counts", "unique_inverse", "unique_values"]:
        got = getattr(tg, name)(tg.Tensor(np.asarray(x)))  # on NumPy whatever the default
        _compare(got, getattr(np, name)(x))
        if name in FIELDS:
            assert got._fields == FIELDS[name]
        s = getattr(tg, name)(tg.asarray(xs.asarray(x)))
        _compare(s, getattr(xs, name)(xs.asarray(x)))
        for t in (s if isinstance(s, tuple) else (s,)):
            assert type(t._value) is STRICT


def test_unique_all_by_hand_with_nans_and_signed_zeros():
    x = tg.Tensor(np.array([[2.0, np.nan, -0.0], [0.0, 2.0, np.nan]]))  # NumPy sorts the values
    r = tg.unique_all(x)
    np.testing.assert_array_equal(r.values.numpy(), [0.0, 2.0, np.nan, np.nan])  # NaNs distinct
    np.testing.assert_array_equal(r.counts.numpy(), [2, 2, 1, 1])
    np.testing.assert_array_equal(r.indices.numpy()[:2], [2, 0])
    assert r.inverse_indices.shape == (2, 3)
    np.testing.assert_array_equal(
        tg.take(r.values, tg.reshape(r.inverse_indices, (-1,))).numpy()[[0, 2, 3, 4]],
        [2.0, -0.0, 0.0, 2.0])


def test_unique_values_carries_no_gradient():
    v = tg.Variable([1.0, 2.0, 2.0])
    with tg.GradientTape() as t:
        y = tg.sum(tg.unique_values(v))
    assert float(y) == 3.0
    assert t.gradient(y, v) is None
