"""tapegrad's main namespace against the Python Array API standard, revision 2024.12.

The list of names is array-api-strict's (the reference implementation), minus its own helpers,
its ``linalg``/``fft`` extension modules (tested with those) and the functions it marks as
introduced after 2024.12. A missing name or a signature that rejects a standard call fails here.
Also: Tensors are recognised by ``array_api_compat``, and array-API-generic code runs on them
(on NumPy and on array-api-strict) and is differentiable.
"""
from __future__ import annotations

import inspect
import math

import array_api_compat
import array_api_strict as xs
import numpy as np
import pytest

import tapegrad as tg

VERSION = "2024.12"
_STRICT_ONLY = {"ArrayAPIStrictFlags", "Device", "__version__", "get_array_api_strict_flags",
                "set_array_api_strict_flags", "reset_array_api_strict_flags"}
_EXTENSIONS = {"linalg", "fft"}


def _introduced(fn):
    """The API version array-api-strict's ``requires_api_version`` wrapper names, else None."""
    for cell in getattr(fn, "__closure__", None) or ():
        v = cell.cell_contents
        if isinstance(v, str) and len(v) == 7 and v[:2] == "20" and v[4] == ".":
            return v
    return None


def standard_names() -> set:
    names = set()
    for name in xs.__all__:
        if name in _STRICT_ONLY or name in _EXTENSIONS:
            continue
        version = _introduced(getattr(xs, name))
        if version is not None and version > VERSION:
            continue
        names.add(name)
    return names


NAMES = standard_names()
FUNCTIONS = sorted(n for n in NAMES if callable(getattr(xs, n))
                   and not isinstance(getattr(xs, n), type) and n != "__array_namespace_info__")


def test_the_list_of_standard_names_is_the_2024_12_one():
    # later additions are recognised and left out; 2024.12 additions are in
    assert "isin" not in NAMES and "broadcast_shapes" not in NAMES
    for name in ["nextafter", "diff", "count_nonzero", "cumulative_prod", "take_along_axis",
                 "reciprocal", "__array_namespace_info__", "__array_api_version__", "float64",
                 "newaxis", "unique_all", "searchsorted", "meshgrid"]:
        assert name in NAMES
    assert len(NAMES) > 150


def test_every_standard_name_is_in_the_namespace_and_exported():
    missing = sorted(n for n in NAMES if not hasattr(tg, n))
    assert not missing, f"tapegrad lacks these Array API {VERSION} names: {missing}"
    unexported = sorted(n for n in NAMES if n not in tg.__all__)
    assert not unexported, f"not in tapegrad.__all__: {unexported}"
    assert tg.__array_api_version__ == VERSION


def _accepts(standard, ours) -> list:
    """Reasons why a call valid for the ``standard`` signature might fail for ``ours``."""
    P = inspect.Parameter
    params = list(ours.parameters.values())
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    var_positional = any(p.kind == P.VAR_POSITIONAL for p in params)
    by_keyword = {p.name: p for p in params if p.kind in (P.KEYWORD_ONLY, P.POSITIONAL_OR_KEYWORD)}
    problems, i = [], 0
    for p in standard.parameters.values():
        if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            if i < len(positional):
                q = positional[i]
                if p.kind == P.POSITIONAL_OR_KEYWORD and (q.name != p.name or q.kind != p.kind):
                    problems.append(f"{p.name!r} must be positional-or-keyword")
                if p.default is not P.empty and q.default is P.empty:
                    problems.append(f"{q.name!r} needs a default")
            elif not var_positional:
                problems.append(f"missing positional parameter {p.name!r}")
            i += 1
        elif p.kind == P.KEYWORD_ONLY:
            q = by_keyword.get(p.name)
            if q is None:
                problems.append(f"missing keyword parameter {p.name!r}")
            elif p.default is not P.empty and q.default is P.empty:
                problems.append(f"{p.name!r} needs a default")
        elif p.kind == P.VAR_POSITIONAL and not var_positional:
            problems.append("needs *arrays")
    for k, q in enumerate(params):  # nothing required that a standard call may leave out
        if q.default is not P.empty or q.kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            continue
        if (q.kind == P.KEYWORD_ONLY and q.name not in standard.parameters) or (
                q.kind != P.KEYWORD_ONLY and k >= i):
            problems.append(f"{q.name!r} is required but the standard does not pass it")
    return problems


@pytest.mark.parametrize("name", FUNCTIONS)
def test_signature_accepts_every_standard_call(name):
    problems = _accepts(inspect.signature(getattr(xs, name)), inspect.signature(getattr(tg, name)))
    assert not problems, f"{name}{inspect.signature(getattr(tg, name))}: {problems}"


def test_constants_and_dtypes():
    assert tg.e == math.e and tg.pi == math.pi and tg.inf == math.inf and math.isnan(tg.nan)
    assert tg.newaxis is None
    for name in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "float32", "float64", "complex64", "complex128"]:
        assert np.dtype(getattr(tg, name)) == np.dtype(name if name != "bool" else "bool")
        assert tg.zeros(2, dtype=getattr(tg, name)).dtype == getattr(tg, name)


def test_array_api_compat_recognises_tensors():
    x, v = tg.constant([1.0, 2.0]), tg.Variable([1.0])
    assert array_api_compat.array_namespace(x) is tg
    assert array_api_compat.array_namespace(x, v) is tg
    assert x.__array_namespace__() is tg
    assert array_api_compat.is_array_api_obj(x)
    s = tg.asarray(xs.asarray([1.0]))  # the namespace is tapegrad whatever the backend
    assert array_api_compat.array_namespace(s) is tg


def test_array_namespace_info():
    info = tg.__array_namespace_info__()
    caps = info.capabilities()
    xp = tg._backend.default_namespace()  # NumPy by default
    backend = xp.__array_namespace_info__()
    assert caps == backend.capabilities() and "max dimensions" in caps
    if xp.__name__ != "jax.numpy":  # JAX says no, as these fail under jax.jit (tg.function)
        assert caps["boolean indexing"] is True and caps["data-dependent shapes"] is True
    # JAX answers None, "the current default device": tapegrad names it
    want = xp.empty(0).device if backend.default_device() is None else backend.default_device()
    assert info.default_device() == want and info.devices() == backend.devices()
    assert tg.zeros(1, device=info.default_device()).device == info.default_device()
    defaults = info.default_dtypes()
    assert defaults == {"real floating": tg.float64, "complex floating": tg.complex128,
                        "integral": tg.int64, "indexing": tg.int64}
    assert set(info.dtypes()) == {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                  "uint32", "uint64", "float32", "float64", "complex64",
                                  "complex128"}
    assert set(info.dtypes(kind="real floating")) == {"float32", "float64"}
    assert info.dtypes(kind=("bool", "complex floating")) == {
        "bool": np.dtype(bool), "complex64": np.dtype(np.complex64),
        "complex128": np.dtype(np.complex128)}


def test_array_object_attributes():
    x = tg.Tensor(np.arange(6.0).reshape(2, 3))  # on NumPy whatever the default backend
    assert x.device == "cpu" and x.to_device("cpu") is x
    assert (x.ndim, x.size, x.shape) == (2, 6, (2, 3))
    np.testing.assert_array_equal(x.mT.numpy(), np.arange(6.0).reshape(2, 3).T)
    shared = np.from_dlpack(x)  # DLPack shares the backend array
    assert np.shares_memory(shared, x._value)
    assert x.__dlpack_device__() == (1, 0)
    assert float(np.from_dlpack(tg.sum(x))) == 15.0  # NumPy scalar results too
    s = tg.asarray(xs.asarray([1.0, 2.0]))
    assert s.device == xs.asarray(1.0).device
    assert s.to_device(s.device) is s


# --- array-API-generic code on Tensors ----------------------------------------------------------
def least_squares(A, b):
    """min_x |A x - b|^2 through the normal equations A^T A x = A^T b, solved by conjugate
    gradients with one step per unknown (exact in exact arithmetic). Only the array namespace of
    the inputs is used: matmul, matrix_transpose, sum and elementwise arithmetic."""
    xp = array_api_compat.array_namespace(A, b)
    At = xp.matrix_transpose(A)
    G, r = At @ A, At @ b
    x = xp.zeros(r.shape, dtype=r.dtype, device=r.device)
    p = r
    rr = xp.sum(r * r)
    for _ in range(A.shape[-1]):
        Gp = G @ p
        alpha = rr / xp.sum(p * Gp)
        x = x + alpha * p
        r = r - alpha * Gp
        rr_new = xp.sum(r * r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def test_generic_least_squares_on_numpy_tensors_is_right_and_differentiable():
    rng = np.random.default_rng(0)
    A, b = rng.normal(size=(6, 3)), rng.normal(size=6)
    x = least_squares(tg.constant(A), tg.constant(b))
    assert isinstance(x, tg.Tensor)
    np.testing.assert_allclose(x.numpy(), np.linalg.lstsq(A, b, rcond=None)[0], rtol=1e-9)
    assert np.all(np.isfinite(x.numpy()))
    tg.test.check_gradients(least_squares, [A, b], order=2)


def test_generic_least_squares_on_array_api_strict_tensors():
    rng = np.random.default_rng(1)
    A, b = rng.normal(size=(5, 2)), rng.normal(size=5)
    At, bt = tg.asarray(xs.asarray(A)), tg.asarray(xs.asarray(b))
    with tg.GradientTape() as tape:
        tape.watch([At, bt])
        x = least_squares(At, bt)
        loss = tg.sum(x * x)
    assert type(x._value) is type(xs.asarray(1.0))  # computed by array-api-strict
    want = np.linalg.lstsq(A, b, rcond=None)[0]
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-9)
    # d|x|^2/db = 2 A (A^T A)^-1 x
    gA, gb = tape.gradient(loss, [At, bt])
    np.testing.assert_allclose(gb.numpy(), 2 * A @ np.linalg.solve(A.T @ A, want), rtol=1e-7)
    assert gA.shape == A.shape and type(gA._value) is type(xs.asarray(1.0))


def test_generic_code_creates_arrays_on_the_inputs_backend():
    def standardise(x):
        xp = array_api_compat.array_namespace(x)
        n = xp.asarray(x.shape[0], dtype=x.dtype, device=x.device)
        mu = xp.sum(x, axis=0) / n
        ones = xp.ones(x.shape, dtype=x.dtype, device=x.device)
        return (x - mu) * ones / xp.sqrt(xp.sum((x - mu) ** 2, axis=0) / n)

    data = np.random.default_rng(2).normal(size=(4, 3))
    got = standardise(tg.asarray(xs.asarray(data)))
    assert type(got._value) is type(xs.asarray(1.0))
    np.testing.assert_allclose(got.numpy(), (data - data.mean(0)) / data.std(0), rtol=1e-12)
    tg.test.check_gradients(standardise, [data], order=2)
