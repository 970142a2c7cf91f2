"""Property tests: every table-driven elementwise op computes what its backend computes.

Random shapes (0-d, size-0 and broadcast shapes included) and float dtypes, values drawn from
each op's own sample domain; the reference is the default backend's function of the same name
(NumPy, or array-api-strict when the suite runs with ``TAPEGRAD_ARRAY_BACKEND``).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg
from tapegrad import _backend
from tapegrad.ops import elementwise as ew

XP = _backend.default_namespace()
DTYPES = st.sampled_from([np.float32, np.float64])
SETTINGS = settings(max_examples=15, deadline=None)


def _values(data, shape, dtype, domain):
    seed = data.draw(st.integers(0, 2**32 - 1))
    lo, hi = domain
    return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(dtype)


def _reference(name, *arrays):
    fn = getattr(XP, name)
    return _backend.to_numpy(fn(*[XP.asarray(a) for a in arrays]))


def _check(got, want, dtype):
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


# real/imag/conj are for complex input (tests/test_ops_elementwise.py covers them)
@pytest.mark.parametrize("name,domain", [(row[0], row[3]) for row in ew._UNARY
                                         if row[0] not in ("real", "imag", "conj")])
@SETTINGS
@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
       dtype=DTYPES)
def test_unary_forward_matches_the_backend(name, domain, data, shape, dtype):
    x = _values(data, shape, dtype, domain)
    _check(getattr(tg, name)(tg.asarray(x)).numpy(), _reference(name, x), dtype)


@pytest.mark.parametrize("name,d1,d2", [(row[0], row[4], row[5]) for row in ew._BINARY])
@SETTINGS
@given(data=st.data(), shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0,
                                                                 max_dims=3, min_side=0,
                                                                 max_side=3),
       dtype=DTYPES)
def test_binary_forward_matches_the_backend(name, d1, d2, data, shapes, dtype):
    a = _values(data, shapes.input_shapes[0], dtype, d1)
    b = _values(data, shapes.input_shapes[1], dtype, d2)
    _check(getattr(tg, name)(tg.asarray(a), tg.asarray(b)).numpy(), _reference(name, a, b), dtype)


@pytest.mark.parametrize("name", ["equal", "not_equal", "less", "less_equal", "greater",
                                  "greater_equal"])
@SETTINGS
@given(data=st.data(), shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3),
       dtype=DTYPES)
def test_comparisons_match_the_backend(name, data, shapes, dtype):
    a = np.round(_values(data, shapes.input_shapes[0], dtype, (-2, 2)))  # ties happen
    b = np.round(_values(data, shapes.input_shapes[1], dtype, (-2, 2)))
    got = getattr(tg, name)(tg.asarray(a), tg.asarray(b)).numpy()
    np.testing.assert_array_equal(got, _reference(name, a, b))
