"""Data-type functions: finfo, iinfo, isdtype, result_type, can_cast against NumPy (tapegrad's
dtypes are NumPy's) and, for arrays of array-api-strict, against its own promotion rules."""
from __future__ import annotations

import array_api_strict as xs
import numpy as np
import pytest

import tapegrad as tg

DTYPES = [tg.bool, tg.int8, tg.int16, tg.int32, tg.int64, tg.uint8, tg.uint16, tg.uint32,
          tg.uint64, tg.float32, tg.float64, tg.complex64, tg.complex128]
KINDS = ["bool", "signed integer", "unsigned integer", "integral", "real floating",
         "complex floating", "numeric", ("bool", "real floating")]


@pytest.mark.parametrize("dtype", [tg.float32, tg.float64, tg.complex64, tg.complex128])
def test_finfo(dtype):
    want = np.finfo(dtype)
    for arg in (dtype, tg.ones(2, dtype=dtype), np.ones(2, dtype=dtype), np.dtype(dtype).name,
                tg.asarray(xs.ones(2, dtype=getattr(xs, np.dtype(dtype).name)))):
        got = tg.finfo(arg)
        assert (got.bits, got.eps, got.max, got.min, got.smallest_normal) == (
            want.bits, want.eps, want.max, want.min, want.smallest_normal)
        assert got.dtype == want.dtype
        # Array API: Python numbers, and a frozen result object
        assert type(got.bits) is int
        assert all(type(a) is float for a in (got.eps, got.max, got.min, got.smallest_normal))
        assert isinstance(got.dtype, np.dtype)
        with pytest.raises(AttributeError):
            got.eps = 1.0


@pytest.mark.parametrize("dtype", [tg.int8, tg.int64, tg.uint8, tg.uint64])
def test_iinfo(dtype):
    want = np.iinfo(dtype)
    for arg in (dtype, tg.zeros(1, dtype=dtype), xs.int8 if dtype is tg.int8 else dtype):
        got = tg.iinfo(arg)
        assert (got.bits, got.max, got.min, got.dtype) == (want.bits, want.max, want.min,
                                                           want.dtype)
        assert type(got.bits) is type(got.max) is type(got.min) is int
        assert isinstance(got.dtype, np.dtype)
        with pytest.raises(AttributeError):
            got.max = 0
    with pytest.raises(ValueError):
        tg.iinfo(tg.float32)
    with pytest.raises(TypeError, match="expected a dtype or an array"):
        tg.finfo(1.0)


@pytest.mark.parametrize("kind", KINDS)
def test_isdtype(kind):
    for dtype in DTYPES:
        assert tg.isdtype(dtype, kind) == np.isdtype(dtype, kind)
        assert tg.isdtype(getattr(xs, np.dtype(dtype).name), kind) == np.isdtype(dtype, kind)
    assert tg.isdtype(tg.float32, tg.float32) and not tg.isdtype(tg.float32, tg.float64)
    with pytest.raises(TypeError, match="got an array"):
        tg.isdtype(tg.ones(2), "numeric")


def test_result_type_matches_numpy_for_dtypes_arrays_and_scalars():
    for a in DTYPES:
        for b in DTYPES:
            assert tg.result_type(a, b) == np.result_type(a, b)
    x32 = tg.ones(2, dtype=tg.float32)
    assert tg.result_type(x32, 1.0) == np.float32  # Python scalars are weak
    assert tg.result_type(x32, 1j) == np.complex64
    assert tg.result_type(tg.int8, 1, tg.ones(1, dtype=tg.int16)) == np.int16
    with pytest.raises(TypeError, match="at least one array or dtype"):
        tg.result_type(1, 2.0)


def test_result_type_and_can_cast_of_strict_arrays_follow_strict():
    i64, u64 = tg.asarray(xs.asarray([1])), tg.asarray(xs.asarray([1], dtype=xs.uint64))
    with pytest.raises(TypeError):
        tg.result_type(i64, u64)  # undefined in the standard: array-api-strict refuses
    assert tg.result_type(i64, tg.int8) == np.int64
    assert tg.result_type(tg.asarray(xs.asarray([1.0], dtype=xs.float32)), 2.0) == np.float32
    assert not tg.can_cast(i64, tg.float64)  # array-api-strict: no cross-kind casts
    assert tg.can_cast(tg.asarray(xs.asarray([1], dtype=xs.int8)), tg.int16)


def test_can_cast_matches_numpy_for_dtypes():
    for a in DTYPES:
        for b in DTYPES:
            assert tg.can_cast(a, b) == np.can_cast(a, b)
    assert tg.can_cast(tg.Tensor(np.ones(2, dtype=np.int8)), tg.float32)  # a NumPy array
