"""Creation functions: backends and devices, asarray copy semantics, from_dlpack, and the
differentiable ones (tril, triu, meshgrid) against NumPy and array-api-strict."""
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
STRICT_DEVICE = xs.asarray(0.0).device
DEFAULT = type(tg._backend.default_namespace().asarray(0.0))  # NumPy unless TAPEGRAD_ARRAY_BACKEND
RNG = np.random.default_rng(4)


@pytest.mark.parametrize("make, want", [
    (lambda **kw: tg.zeros((2, 3), **kw), np.zeros((2, 3))),
    (lambda **kw: tg.ones(4, **kw), np.ones(4)),
    (lambda **kw: tg.full((2,), 7.0, **kw), np.full((2,), 7.0)),
    (lambda **kw: tg.arange(1, 7, 2, **kw), np.arange(1, 7, 2)),
    (lambda **kw: tg.linspace(0.0, 1.0, 5, **kw), np.linspace(0.0, 1.0, 5)),
    (lambda **kw: tg.eye(3, 4, k=1, **kw), np.eye(3, 4, k=1)),
    (lambda **kw: tg.asarray([[1.0, 2.0]], **kw), np.array([[1.0, 2.0]])),
])
def test_creation_on_numpy_and_on_the_library_of_a_device(make, want):
    for kw, backend in (({}, DEFAULT), ({"device": "cpu"}, np.ndarray)):
        got = make(**kw)
        assert type(got._value) is backend
        np.testing.assert_array_equal(got.numpy(), want)
        assert got.dtype == want.dtype
    assert make(device="cpu").device == "cpu"
    got = make(device=STRICT_DEVICE)  # another library's device: that library creates it
    assert type(got._value) is STRICT and got.device == STRICT_DEVICE
    np.testing.assert_array_equal(got.numpy(), want)
    got32 = make(device=STRICT_DEVICE, dtype=tg.float32)
    assert got32._value.dtype == xs.float32 and got32.dtype == np.float32
    with pytest.raises(ValueError):
        make(device="gpu:7")


@pytest.mark.parametrize("scalar", [np.float32(1.5), np.float64(1.5), np.int16(3)])
def test_full_keeps_the_dtype_of_a_numpy_scalar(scalar):
    t = tg.full((2,), scalar)
    assert t.dtype == scalar.dtype
    np.testing.assert_array_equal(t.numpy(), [scalar, scalar])


def test_empty_and_like_functions_keep_the_backend():
    assert tg.empty((2, 0)).shape == (2, 0) and tg.empty(3, dtype=tg.int8).dtype == np.int8
    s = tg.asarray(xs.asarray([[1.0, 2.0]]))
    for fn, fill in [(tg.zeros_like, 0), (tg.ones_like, 1), (tg.empty_like, None)]:
        y = fn(s, dtype=tg.float32)
        assert type(y._value) is STRICT and y.dtype == np.float32 and y.shape == (1, 2)
        if fill is not None:
            np.testing.assert_array_equal(y.numpy(), fill)
    y = tg.full_like(s, 3, dtype=tg.int16)
    assert y._value.dtype == xs.int16 and y.numpy().tolist() == [[3, 3]]


def test_asarray_copy_semantics():
    a = np.arange(3.0)
    t = tg.asarray(a, device="cpu")
    assert np.shares_memory(t._value, a)  # copy=None: no copy when none is needed
    assert not np.shares_memory(tg.asarray(a, copy=True, device="cpu")._value, a)
    assert tg.asarray(t) is t and tg.asarray(t, dtype=tg.float64) is t
    c = tg.asarray(t, copy=True)
    assert c is not t and not np.shares_memory(c._value, a)
    assert type(tg.asarray(a)._value) is DEFAULT  # NumPy data goes to the default backend
    assert tg.asarray(t, dtype=tg.float32).dtype == np.float32
    with pytest.raises(ValueError, match="copy=False, but a Python list must be copied"):
        tg.asarray([1.0, 2.0], copy=False)  # a list must be copied
    s = tg.asarray(xs.asarray([1, 2]))
    assert type(tg.asarray(s, dtype=tg.float64)._value) is STRICT  # stays on its backend
    assert tg.asarray(1.5).dtype == np.float64 and tg.asarray(2).dtype == np.int64
    assert tg.asarray(True).dtype == np.bool_


def test_asarray_of_a_tensor_that_copies_or_casts_is_differentiable():
    # array-API code copies or casts its input with xp.asarray (SciPy: xp.asarray(x, copy=True))
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        c = tg.asarray(x, copy=True)
        f = tg.asarray(x, dtype=tg.float32)
        y = tg.sum(c * c) + tg.sum(tg.astype(f, tg.float64) * 3.0)
    assert f.dtype == np.float32 and not np.shares_memory(c._value, x._value)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [5.0, 7.0])
    c = tg.asarray(tg.constant([1.0]), copy=True)
    c[0] = 2.0  # a copy is a new tensor to assign to


def test_from_dlpack():
    a = np.arange(4.0)
    t = tg.from_dlpack(a, device="cpu")
    assert isinstance(t, tg.Tensor) and np.shares_memory(t._value, a)
    u = tg.from_dlpack(t)
    assert type(u._value) is np.ndarray and np.shares_memory(u._value, a)
    assert not np.shares_memory(tg.from_dlpack(a, copy=True, device="cpu")._value, a)
    d = tg.from_dlpack(a)  # the default backend
    assert type(d._value) is DEFAULT and d.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    s = tg.asarray(xs.asarray([1.0, 2.0]))
    v = tg.from_dlpack(s)
    assert type(v._value) is STRICT
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


# --- tril, triu -------------------------------------------------------------------------------
MATRICES = hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=4, min_side=0, max_side=4),
                      elements=st.floats(-5, 5))


@pytest.mark.parametrize("name", ["tril", "triu"])
@SETTINGS
@given(x=MATRICES, k=st.integers(-4, 4))
def test_tril_triu_match_the_backends(name, x, k):
    got = getattr(tg, name)(tg.constant(x), k=k)
    np.testing.assert_array_equal(got.numpy(), getattr(np, name)(x, k=k))
    s = getattr(tg, name)(tg.asarray(xs.asarray(x)), k=k)
    assert type(s._value) is STRICT
    want = tg.asarray(getattr(xs, name)(xs.asarray(x), k=k)).numpy()
    np.testing.assert_array_equal(s.numpy(), want)


@pytest.mark.parametrize("name", ["tril", "triu"])
def test_tril_triu_gradients_and_errors(name):
    fn = getattr(tg, name)
    x = RNG.normal(size=(2, 3, 4))
    tg.test.check_gradients(lambda a: fn(a, k=1) ** 2, [x], order=2)
    v = tg.Variable(x)
    with tg.GradientTape() as t:
        y = tg.sum(fn(v, k=-1))
    mask = getattr(np, name)(np.ones_like(x), k=-1)
    np.testing.assert_array_equal(t.gradient(y, v).numpy(), mask)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        fn(tg.constant([1.0, 2.0]))


# --- meshgrid ---------------------------------------------------------------------------------
VECTORS = st.lists(hnp.arrays(np.float64, st.tuples(st.integers(0, 4)), elements=st.floats(-5, 5)),
                   min_size=0, max_size=3)


@SETTINGS
@given(arrays=VECTORS, indexing=st.sampled_from(["xy", "ij"]))
def test_meshgrid_matches_the_backends(arrays, indexing):
    got = tg.meshgrid(*[tg.constant(a) for a in arrays], indexing=indexing)
    want = np.meshgrid(*arrays, indexing=indexing)
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g.numpy(), w)
    if arrays:
        got = tg.meshgrid(*[tg.asarray(xs.asarray(a)) for a in arrays], indexing=indexing)
        want = xs.meshgrid(*[xs.asarray(a) for a in arrays], indexing=indexing)
        for g, w in zip(got, want):
            assert type(g._value) is STRICT
            np.testing.assert_array_equal(g.numpy(), tg.asarray(w).numpy())


def test_meshgrid_gradient_sums_back():
    a, b = RNG.normal(size=3), RNG.normal(size=2)
    va, vb = tg.Variable(a), tg.Variable(b)
    with tg.GradientTape() as t:
        X, Y = tg.meshgrid(va, vb)  # shapes (2, 3)
        y = tg.sum(X * Y)
    ga, gb = t.gradient(y, [va, vb])
    np.testing.assert_allclose(ga.numpy(), np.full(3, b.sum()))
    np.testing.assert_allclose(gb.numpy(), np.full(2, a.sum()))
    tg.test.check_gradients(lambda p, q, r: tg.meshgrid(p, q, r, indexing="ij")[1] ** 3 * 0.5
                            + tg.permute_dims(tg.meshgrid(p, q, r)[2], (1, 0, 2)),
                            [a, b, RNG.normal(size=4)], order=2)


def test_meshgrid_errors():
    with pytest.raises(ValueError, match="1-d"):
        tg.meshgrid(tg.ones((2, 2)))
    with pytest.raises(ValueError, match="indexing"):
        tg.meshgrid(tg.ones(2), indexing="ji")
