"""tg.linalg (Array API linalg extension): values against NumPy and array-api-strict,
gradients to second order, symmetric gradients, degeneracies, complex inputs, errors."""
from __future__ import annotations

import inspect

import array_api_strict as xs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg
from gradhelpers import tape_grads
from test_registry_gradients import symmetric_part  # the Hermitian part
from tapegrad._backend import namespace

LA = tg.linalg
RNG = np.random.default_rng(7)

SPEC = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
        "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr",
        "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm"]


def _normal(*shape):
    return RNG.normal(size=shape)


def _spd(*shape):
    """A stack of well-conditioned symmetric positive-definite matrices."""
    a = RNG.normal(size=shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def _sym(a):
    return (a + np.swapaxes(a, -1, -2)) / 2


def _grad(f, x):
    v = tg.Variable(x)
    with tg.GradientTape() as tape:
        y = f(v)
    return tape.gradient(y, v).numpy()


def _like(t, a):
    """``a`` as a constant on the backend of the Tensor ``t``."""
    return tg.Tensor(namespace(t._value).asarray(a))


def _np(t):
    return np.asarray(t._value)


# --- the namespace ----------------------------------------------------------------------------
def test_namespace_is_the_standard_extension():
    assert sorted(LA.__all__) == SPEC
    assert tg.constant([[1.0]]).__array_namespace__().linalg is LA
    assert LA.matmul is tg.matmul and LA.matrix_transpose is tg.matrix_transpose
    assert LA.tensordot is tg.tensordot and LA.vecdot is tg.vecdot


@pytest.mark.parametrize("name", SPEC)
def test_signatures_match_array_api_strict(name):
    def params(f):
        return [(p.kind, None if p.kind is p.POSITIONAL_ONLY else p.name, p.default)
                for p in inspect.signature(f).parameters.values()]

    assert params(getattr(LA, name)) == params(getattr(xs.linalg, name))


def test_array_api_generic_code_is_differentiable():
    def logdet_plus_norm(x):  # written against any Array API namespace
        xp = x.__array_namespace__()
        return xp.linalg.slogdet(x).logabsdet + xp.linalg.vector_norm(x)

    a = _spd(3, 3)
    g = _grad(logdet_plus_norm, a)
    np.testing.assert_allclose(g, np.linalg.inv(a).T + a / np.linalg.norm(a), rtol=1e-10)


# --- forward values against NumPy -------------------------------------------------------------
SQUARE_SHAPES = [(3, 3), (2, 4, 4), (2, 1, 3, 3), (1, 1), (0, 0), (2, 0, 0)]
MATRIX_SHAPES = [(3, 4), (4, 3), (2, 3, 5), (2, 5, 2), (1, 1), (0, 3), (3, 0)]


@pytest.mark.parametrize("shape", SQUARE_SHAPES)
def test_square_functions_match_numpy(shape):
    a = _normal(*shape)
    s = _spd(*shape) if shape[-1] else a
    t = tg.constant(a)
    np.testing.assert_allclose(LA.det(t).numpy(), np.linalg.det(a), rtol=1e-12)
    sign, logabs = LA.slogdet(t)
    ref = np.linalg.slogdet(a)
    np.testing.assert_array_equal(sign.numpy(), ref.sign)
    np.testing.assert_allclose(logabs.numpy(), ref.logabsdet, rtol=1e-12)
    np.testing.assert_allclose(LA.inv(t).numpy(), np.linalg.inv(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(LA.cholesky(tg.constant(s)).numpy(), np.linalg.cholesky(s),
                               rtol=1e-12)
    np.testing.assert_allclose(LA.cholesky(tg.constant(s), upper=True).numpy(),
                               np.linalg.cholesky(s, upper=True), rtol=1e-12, atol=1e-14)
    w, v = LA.eigh(tg.constant(s))
    np.testing.assert_allclose(w.numpy(), np.linalg.eigvalsh(s), rtol=1e-12)
    np.testing.assert_allclose(v.numpy() * w.numpy()[..., None, :] @ np.swapaxes(v.numpy(), -1, -2),
                               s, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(LA.eigvalsh(t).numpy(), np.linalg.eigvalsh(a), rtol=1e-12)
    for n in (-3, -1, 0, 1, 2, 5):
        np.testing.assert_allclose(LA.matrix_power(t, n).numpy(),
                                   np.linalg.matrix_power(a, n), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shape", MATRIX_SHAPES)
def test_matrix_functions_match_numpy(shape):
    a = _normal(*shape)
    t = tg.constant(a)
    u, s, vh = LA.svd(t, full_matrices=False)
    np.testing.assert_allclose(s.numpy(), np.linalg.svdvals(a), rtol=1e-12)
    np.testing.assert_allclose((u.numpy() * s.numpy()[..., None, :]) @ vh.numpy(), a, atol=1e-12)
    assert LA.svd(t).U.shape == np.linalg.svd(a).U.shape
    np.testing.assert_allclose(LA.svdvals(t).numpy(), np.linalg.svdvals(a), rtol=1e-12)
    for mode in ("reduced", "complete"):
        q, r = LA.qr(t, mode=mode)
        rq, rr = np.linalg.qr(a, mode=mode)
        np.testing.assert_allclose(q.numpy(), rq, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(r.numpy(), rr, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(LA.pinv(t).numpy(), np.linalg.pinv(a, rtol=None), atol=1e-12)
    if a.size:  # array-api-strict's matrix_rank fails on empty matrices
        np.testing.assert_array_equal(LA.matrix_rank(t).numpy(),
                                      np.linalg.matrix_rank(a, rtol=None))
    for order in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        for keep in (False, True):
            try:
                want = np.linalg.matrix_norm(a, ord=order, keepdims=keep)
            except ValueError:  # min over an empty axis: tapegrad raises too
                with pytest.raises(ValueError):
                    LA.matrix_norm(t, ord=order, keepdims=keep)
                continue
            np.testing.assert_allclose(LA.matrix_norm(t, ord=order, keepdims=keep).numpy(),
                                       want, rtol=1e-12)
    for k in (-2, -1, 0, 1, 3):
        np.testing.assert_array_equal(LA.diagonal(t, offset=k).numpy(),
                                      np.linalg.diagonal(a, offset=k))
        np.testing.assert_allclose(LA.trace(t, offset=k).numpy(),
                                   np.linalg.trace(a, offset=k), rtol=1e-12)


@pytest.mark.parametrize("s1, s2", [((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (3,)),
                                    ((2, 3, 3), (2, 3, 4)), ((3, 3), (2, 3, 2)),
                                    ((2, 1, 3, 3), (4, 3, 1)), ((0, 0), (0,)), ((2, 2), (2, 0))])
def test_solve_matches_numpy_with_the_array_api_vector_rule(s1, s2):
    a, b = _normal(*s1) + 3 * np.eye(s1[-1]), _normal(*s2)
    got = LA.solve(tg.constant(a), tg.constant(b)).numpy()
    want = np.linalg.solve(a, b)
    if len(s2) == 1:  # Array API: the result has shape x1.shape[:-2] + (M,)
        assert got.shape == s1[:-2] + s2
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_vector_norm_outer_cross_match_numpy():
    x = _normal(2, 3, 4)
    for order in (2, 1, np.inf, -np.inf, 0, 3, 0.5, -1.5):
        for axis in (None, 1, -1, (0, 2)):
            for keep in (False, True):
                np.testing.assert_allclose(
                    LA.vector_norm(tg.constant(x), axis=axis, keepdims=keep, ord=order).numpy(),
                    np.linalg.vector_norm(x, axis=axis, keepdims=keep, ord=order), rtol=1e-12)
    a, b = _normal(3), _normal(4)
    np.testing.assert_array_equal(LA.outer(tg.constant(a), tg.constant(b)).numpy(),
                                  np.outer(a, b))
    for s1, s2, axis in [((3,), (3,), -1), ((4, 1, 3), (2, 3), -1), ((3, 2), (3, 2), -2)]:
        a, b = _normal(*s1), _normal(*s2)
        np.testing.assert_allclose(LA.cross(tg.constant(a), tg.constant(b), axis=axis).numpy(),
                                   np.linalg.cross(a, b, axis=axis), rtol=1e-12)


def test_trace_dtype():
    x = np.arange(9, dtype=np.int32).reshape(3, 3)
    t = LA.trace(tg.constant(x), dtype=tg.float64)
    assert t.dtype == np.float64 and float(t) == 12.0
    y = LA.trace(tg.constant(_normal(3, 3).astype(np.float32)), dtype=np.float64)
    assert y.dtype == np.float64


# --- hypothesis: forward equals the backend's own result ------------------------------------------
_ELEMS = st.floats(-10, 10, allow_nan=False, width=64)


@settings(max_examples=40, deadline=None)
@given(a=hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=4, min_side=0, max_side=4),
                    elements=_ELEMS),
       offset=st.integers(-4, 4))
def test_property_matrix_functions(a, offset):
    t = tg.constant(a)
    np.testing.assert_array_equal(LA.diagonal(t, offset=offset).numpy(),
                                  np.linalg.diagonal(a, offset=offset))
    np.testing.assert_array_equal(LA.trace(t, offset=offset).numpy(),
                                  np.linalg.trace(a, offset=offset))
    for order in ("fro", 1, np.inf):
        np.testing.assert_array_equal(LA.matrix_norm(t, ord=order).numpy(),
                                      np.linalg.matrix_norm(a, ord=order))
    np.testing.assert_array_equal(LA.svdvals(t).numpy(), np.linalg.svdvals(a))
    np.testing.assert_array_equal(LA.matrix_transpose(t).numpy(), np.linalg.matrix_transpose(a))


@pytest.mark.skipif(tg._backend.default_namespace().__name__ == "jax.numpy",
                    reason="bit-for-bit equality with NumPy: XLA rounds det, slogdet and eigvalsh "
                           "differently (cofactor formula for small det, subnormals flushed); "
                           "test_square_functions_match_numpy compares them with tolerances")
@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 4), batch=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3),
       data=st.data())
def test_property_square_functions(n, batch, data):
    a = data.draw(hnp.arrays(np.float64, batch + (n, n), elements=_ELEMS))
    t = tg.constant(a)
    np.testing.assert_array_equal(LA.det(t).numpy(), np.linalg.det(a))
    np.testing.assert_array_equal(LA.slogdet(t).logabsdet.numpy(), np.linalg.slogdet(a)[1])
    np.testing.assert_array_equal(LA.eigvalsh(t).numpy(), np.linalg.eigvalsh(a))


@settings(max_examples=40, deadline=None)
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                    elements=_ELEMS),
       order=st.sampled_from([2, 1, 0, 3, np.inf]), keep=st.booleans())
def test_property_vector_norm(x, order, keep):
    np.testing.assert_array_equal(
        LA.vector_norm(tg.constant(x), ord=order, keepdims=keep).numpy(),
        np.linalg.vector_norm(x, ord=order, keepdims=keep))


# --- array-api-strict backend ---------------------------------------------------------------------
def _strict(a):
    return tg.asarray(xs.asarray(a))


STRICT_CASES = [
    ("det", (_normal(2, 3, 3),), {}), ("slogdet", (_normal(3, 3),), {}),
    ("inv", (_normal(2, 3, 3),), {}), ("cholesky", (_spd(2, 3, 3),), {"upper": True}),
    ("eigh", (_spd(3, 3),), {}), ("eigvalsh", (_normal(2, 4, 4),), {}),
    ("solve", (_spd(2, 3, 3), _normal(3)), {}), ("solve", (_spd(3, 3), _normal(2, 3, 2)), {}),
    ("svd", (_normal(4, 3),), {"full_matrices": False}), ("svdvals", (_normal(2, 3, 5),), {}),
    ("qr", (_normal(3, 5),), {}), ("pinv", (_normal(4, 2),), {}),
    ("matrix_norm", (_normal(3, 4),), {"ord": "nuc"}),
    ("vector_norm", (_normal(2, 3),), {"axis": -1, "ord": 3}),
    ("matrix_power", (_normal(3, 3), -2), {}), ("matrix_power", (_normal(2, 3, 3), 0), {}),
    ("matrix_rank", (_normal(3, 4),), {}), ("matrix_rank", (_normal(2, 3, 3),), {"rtol": 0.5}),
    ("outer", (_normal(3), _normal(2)), {}), ("cross", (_normal(2, 3), _normal(3)), {}),
    ("trace", (_normal(2, 3, 4),), {"offset": 1}), ("diagonal", (_normal(3, 4),), {"offset": -1}),
]


@pytest.mark.parametrize("name, args, kwargs", STRICT_CASES, ids=[c[0] for c in STRICT_CASES])
def test_array_api_strict_forward(name, args, kwargs):
    ours = getattr(LA, name)(*[_strict(a) if isinstance(a, np.ndarray) else a for a in args],
                             **kwargs)
    ref = getattr(xs.linalg, name)(*[xs.asarray(a) if isinstance(a, np.ndarray) else a
                                     for a in args], **kwargs)
    ours, ref = (ours, ref) if isinstance(ref, tuple) else ((ours,), (ref,))
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        assert isinstance(o._value, type(r))  # computed by the strict backend
        np.testing.assert_allclose(_np(o), np.asarray(r), rtol=1e-10, atol=1e-12)


def test_array_api_strict_trace_dtype():
    x = _strict(_normal(3, 3).astype(np.float32))
    for dtype in (tg.float64, "float64", xs.float64):  # tapegrad's, a name, the backend's own
        t = LA.trace(x, dtype=dtype)
        assert t.dtype == np.float64 and t._value.dtype == xs.float64
        np.testing.assert_allclose(_np(t), np.trace(np.asarray(x._value)), rtol=1e-6)


def test_array_api_strict_gradients_match_numpy():
    a = _spd(2, 3, 3)

    def f(x):
        v = LA.eigh(x).eigenvectors
        return (tg.sum(LA.cholesky(x)) + tg.sum(v ** 2 * LA.det(x)[..., None, None])
                + tg.sum(LA.solve(x, LA.diagonal(x[0, ...])) ** 2))

    g_np = _grad(f, a)
    v = tg.Variable(xs.asarray(a))
    with tg.GradientTape() as tape:
        y = f(v)
    g = tape.gradient(y, v)
    assert isinstance(g._value, xs.asarray(0.0).__class__)
    np.testing.assert_allclose(_np(g), g_np, rtol=1e-10, atol=1e-12)


# --- gradients, first and second order ------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 2), (4, 4), (2, 3, 3)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_gradients(shape, upper):
    # the registry samples are 1x1 (a random matrix is not SPD); here a random symmetric
    # perturbation sym(d) of an SPD matrix, so every entry of d is checked (the gradients are
    # symmetric: finite differences must move along symmetric directions)
    base = _spd(*shape)
    tg.test.check_gradients(
        lambda d: LA.cholesky(_like(d, base) + (d + tg.matrix_transpose(d)) / 2.0, upper=upper),
        [RNG.uniform(-0.3, 0.3, size=shape)], order=2)


def _hpd(*shape):
    """A stack of well-conditioned complex Hermitian positive-definite matrices."""
    a = RNG.normal(size=shape) + 1j * RNG.normal(size=shape)
    return a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])


@pytest.mark.parametrize("shape", [(2, 2), (4, 4), (2, 3, 3)])
@pytest.mark.parametrize("upper", [False, True])
def test_complex_cholesky_gradients_and_jvps(shape, upper):
    # as test_cholesky_gradients, for a Hermitian positive-definite matrix and Hermitian
    # perturbations (d + d^H) / 2 of it (the registry's complex samples are 1x1)
    base = _hpd(*shape)

    def f(d):
        return LA.cholesky(_like(d, base) + symmetric_part(d), upper=upper)

    d = RNG.uniform(-0.3, 0.3, size=shape) + 1j * RNG.uniform(-0.3, 0.3, size=shape)
    tg.test.check_gradients(f, [d], order=2, modes=("rev", "fwd"))


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3)])
def test_eigh_gradients_on_symmetric_input(shape):
    a = _normal(*shape)
    tg.test.check_gradients(lambda x: LA.eigh((x + tg.matrix_transpose(x)) / 2.0), [a], order=2)
    tg.test.check_gradients(lambda x: LA.eigvalsh((x + tg.matrix_transpose(x)) / 2.0), [a],
                            order=2)


# losses of a symmetric input x with fixed weights w of x's shape; the eigenvector loss is
# invariant under the sign of each eigenvector
SYMMETRIC_LOSSES = {
    "cholesky": lambda x, w: tg.sum(LA.cholesky(x) * w),
    "cholesky-upper": lambda x, w: tg.sum(LA.cholesky(x, upper=True) * w),
    "eigh-eigenvalues": lambda x, w: tg.sum(LA.eigh(x).eigenvalues * w[..., 0, :]),
    "eigh-eigenvectors": lambda x, w: tg.sum(LA.eigh(x).eigenvectors ** 2 * w),
    "eigvalsh": lambda x, w: tg.sum(LA.eigvalsh(x) * w[..., 0, :]),
}


@pytest.mark.parametrize("shape", [(4, 4), (2, 4, 4)])
@pytest.mark.parametrize("name", SYMMETRIC_LOSSES)
def test_symmetric_gradients_match_differences_along_symmetric_directions(name, shape):
    # the gradient G is the symmetric one (as in PyTorch and JAX): G == G^T, and <G, S> is the
    # central difference of the loss along every random symmetric direction S
    a, w = _spd(*shape), _normal(*shape)

    def f(x):
        return SYMMETRIC_LOSSES[name](x, w)

    (g,) = tape_grads(f, a)
    assert g.dtype == np.float64  # real
    upper = np.triu_indices(shape[-1], 1)
    assert np.all(g[..., upper[0], upper[1]] != 0.0)  # not the lower-triangular gradient
    np.testing.assert_allclose(g, np.swapaxes(g, -1, -2), rtol=0, atol=1e-12)
    eps = 1e-6
    for _ in range(3):
        s = _sym(_normal(*shape))
        fd = (float(f(tg.constant(a + eps * s))) - float(f(tg.constant(a - eps * s)))) / (2 * eps)
        np.testing.assert_allclose(np.sum(g * s), fd, rtol=1e-6, atol=1e-9)


def test_cholesky_gradient_by_hand():
    # sym(L^-T Phi(L^T W) L^-1) (Murray 2016; PyTorch's cholesky_backward), Phi: the lower
    # triangle with the diagonal halved; U = L^T with weights W^T gives the same gradient
    a, w = _spd(3, 3), _normal(3, 3)
    low = np.linalg.cholesky(a)
    li = np.linalg.inv(low)
    p = np.tril(low.T @ w) - np.diag(np.diag(low.T @ w)) / 2
    want = _sym(li.T @ p @ li)
    np.testing.assert_allclose(_grad(lambda x: tg.sum(LA.cholesky(x) * w), a), want,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_grad(lambda x: tg.sum(LA.cholesky(x, upper=True) * w.T), a),
                               want, rtol=1e-10, atol=1e-12)


def test_eigvalsh_gradient_by_hand():
    # d(sum c_i w_i) = V diag(c) V^T (Giles 2008), a symmetric matrix
    a = _spd(4, 4)
    c = _normal(4)
    _, v = np.linalg.eigh(a)
    g = _grad(lambda x: tg.sum(LA.eigvalsh(x) * c), a)
    np.testing.assert_allclose(g, (v * c) @ v.T, atol=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf / NaN are the point here
def test_eigh_at_repeated_eigenvalues():
    # documented: the eigenvector gradient is not defined there (inf/NaN); eigenvalues are fine
    a = np.diag([1.0, 1.0, 2.0])
    w = _normal(3, 3)
    g = _grad(lambda x: tg.sum(LA.eigh(x).eigenvectors * w), a)
    assert not np.all(np.isfinite(g))
    g = _grad(lambda x: tg.sum(LA.eigvalsh(x) * np.array([1.0, 2.0, 3.0])), a)
    assert np.all(np.isfinite(g))


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 2)])
def test_svd_qr_pinv_gradients(shape):
    a = _normal(*shape)
    tg.test.check_gradients(lambda x: LA.svd(x, full_matrices=False), [a], order=2)
    tg.test.check_gradients(LA.svdvals, [a], order=2)
    tg.test.check_gradients(LA.qr, [a], order=2)
    tg.test.check_gradients(LA.pinv, [a], order=2)


def test_svd_full_matrices_gradient():
    a = _normal(4, 2)
    # only S (or only the first min(M, N) columns of U) used: the gradient is defined
    g_full = _grad(lambda x: tg.sum(LA.svd(x).S), a)
    np.testing.assert_allclose(g_full, _grad(lambda x: tg.sum(LA.svdvals(x)), a), rtol=1e-12)
    w = _normal(4, 2)

    def first_columns(x):
        u = LA.svd(x).U
        return tg.sum(tg.abs(u[:, :2] * w))  # sign-invariant

    np.testing.assert_allclose(_grad(first_columns, a), _grad(
        lambda x: tg.sum(tg.abs(LA.svd(x, full_matrices=False).U * w)), a), rtol=1e-10)
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
        _grad(lambda x: tg.sum(LA.svd(x).U), a)


def test_qr_complete_tall_has_no_gradient():
    with pytest.raises(NotImplementedError, match="mode='reduced'"):
        _grad(lambda x: tg.sum(LA.qr(x, mode="complete").Q), _normal(4, 2))
    tg.test.check_gradients(lambda x: LA.qr(x, mode="complete"), [_normal(2, 4)], order=2)


def test_det_slogdet_inv_solve_gradients_by_hand():
    a = _normal(3, 3) + 2 * np.eye(3)
    np.testing.assert_allclose(_grad(LA.det, a), np.linalg.det(a) * np.linalg.inv(a).T,
                               rtol=1e-10)
    np.testing.assert_allclose(_grad(lambda x: LA.slogdet(x).logabsdet, a),
                               np.linalg.inv(a).T, rtol=1e-10)
    w = _normal(3, 3)
    ai = np.linalg.inv(a)
    np.testing.assert_allclose(_grad(lambda x: tg.sum(LA.inv(x) * w), a), -ai.T @ w @ ai.T,
                               rtol=1e-10)
    b = _normal(3)
    x = np.linalg.solve(a, b)
    db = np.linalg.solve(a.T, np.ones(3))
    np.testing.assert_allclose(_grad(lambda m: tg.sum(LA.solve(m, b)), a), -np.outer(db, x),
                               rtol=1e-10)
    np.testing.assert_allclose(_grad(lambda v: tg.sum(LA.solve(a, v)), b), db, rtol=1e-10)


@pytest.mark.parametrize("s1, s2", [((3, 3), (3,)), ((2, 3, 3), (3,)), ((3, 3), (2, 3, 2)),
                                    ((2, 1, 3, 3), (4, 3, 1))])
def test_solve_gradients(s1, s2):
    a = _normal(*s1) + 3 * np.eye(3)
    tg.test.check_gradients(LA.solve, [a, _normal(*s2)], order=2)


@pytest.mark.parametrize("n", [-2, -1, 0, 1, 2, 3, 5])
def test_matrix_power_gradients(n):
    a = _normal(2, 3, 3) / 2 + np.eye(3)
    tg.test.check_gradients(lambda x: LA.matrix_power(x, n), [a], order=2)


@pytest.mark.parametrize("order", ["fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf])
def test_matrix_norm_gradients(order):
    tg.test.check_gradients(lambda x: LA.matrix_norm(x, ord=order), [_normal(2, 3, 4)], order=2)


def test_norms_at_zero_have_zero_subgradient():
    for order in (2, 1, 3, np.inf):
        g = _grad(lambda x: LA.vector_norm(x, ord=order), np.zeros(4))
        np.testing.assert_array_equal(g, np.zeros(4))
    np.testing.assert_array_equal(_grad(LA.matrix_norm, np.zeros((2, 3))), np.zeros((2, 3)))


def test_vector_norm_gradients_by_hand():
    x = np.array([[3.0, -4.0, 0.5], [1.0, 2.0, -2.0]])
    np.testing.assert_allclose(_grad(LA.vector_norm, x), x / np.linalg.norm(x), rtol=1e-12)
    g = _grad(lambda t: tg.sum(LA.vector_norm(t, axis=1, ord=np.inf)), x)
    np.testing.assert_array_equal(g, [[0, -1, 0], [0, 0.5, -0.5]])  # tie split evenly
    np.testing.assert_array_equal(_grad(lambda t: LA.vector_norm(t, ord=1), x), np.sign(x))
    np.testing.assert_array_equal(_grad(lambda t: LA.vector_norm(t, ord=0), x), np.zeros((2, 3)))
    tg.test.check_gradients(lambda t: LA.vector_norm(t, axis=(0, 1), ord=3, keepdims=True), [x],
                            order=2)


def test_trace_diagonal_outer_cross_gradients():
    x = _normal(2, 3, 4)
    np.testing.assert_array_equal(_grad(lambda t: tg.sum(LA.trace(t, offset=1)), x),
                                  np.broadcast_to(np.eye(3, 4, k=1), x.shape))
    w = _normal(2, 3)
    want = np.eye(3, 4, k=-1) * np.pad(w[:, :2], ((0, 0), (0, 2)))[:, None, :]
    np.testing.assert_array_equal(
        _grad(lambda t: tg.sum(LA.diagonal(t, offset=-1) * w[:, :2]), x), want)
    for k in (-2, 0, 2, 5):
        tg.test.check_gradients(lambda t: LA.diagonal(t, offset=k), [x], order=2)
    tg.test.check_gradients(LA.outer, [_normal(3), _normal(2)], order=2)
    tg.test.check_gradients(lambda a, b: LA.cross(a, b, axis=-2), [_normal(4, 3, 1), _normal(3, 2)],
                            order=2)


# --- complex inputs -------------------------------------------------------------------------------
def test_complex_forward_values():
    a = _normal(3, 3) + 1j * _normal(3, 3)
    h = a @ a.conj().T + 3 * np.eye(3)
    t, th = tg.constant(a), tg.constant(h)
    np.testing.assert_allclose(LA.det(t).numpy(), np.linalg.det(a), rtol=1e-12)
    np.testing.assert_allclose(LA.inv(t).numpy(), np.linalg.inv(a), rtol=1e-10)
    np.testing.assert_allclose(LA.cholesky(th).numpy(), np.linalg.cholesky(h), rtol=1e-12)
    np.testing.assert_allclose(LA.cholesky(th, upper=True).numpy(),
                               np.linalg.cholesky(h, upper=True), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(LA.eigvalsh(th).numpy(), np.linalg.eigvalsh(h), rtol=1e-12)
    np.testing.assert_allclose(LA.svdvals(t).numpy(), np.linalg.svdvals(a), rtol=1e-12)
    np.testing.assert_allclose(LA.matrix_norm(t, ord="nuc").numpy(),
                               np.linalg.matrix_norm(a, ord="nuc"), rtol=1e-12)
    np.testing.assert_allclose(LA.vector_norm(t).numpy(), np.linalg.vector_norm(a), rtol=1e-12)
    np.testing.assert_allclose(LA.solve(t, tg.constant(a[0])).numpy(),
                               np.linalg.solve(a, a[0]), rtol=1e-10)
    np.testing.assert_array_equal(LA.trace(t).numpy(), np.linalg.trace(a))


# the forward check differences JVPs with the step sqrt(eps): the default 1e-3 leaves a
# truncation error (about 1e-4, these decompositions' third derivatives along directions of
# entries up to 2) above its tolerance; 1e-4 does not
_EPS = 1e-8


def _cnormal(*shape):
    return _normal(*shape) + 1j * _normal(*shape)


def _weights(k):  # distinct weights: sum_i c_i v_i v_i^H is invariant under the vectors' phases
    return tg.constant(np.arange(1.0, k + 1.0) + 0j)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_complex_eigh_of_phase_invariant_functions(shape):
    # without the sweep's phase fixing: V diag(c) V^H and the eigenvalues are smooth functions
    # of a Hermitian matrix, whatever phases LAPACK picks; both modes, to second order
    def f(x):
        w, v = LA.eigh(symmetric_part(x))
        return w, tg.matmul(v * _weights(shape[-1]), tg.conj(tg.matrix_transpose(v)))

    tg.test.check_gradients(f, [_cnormal(*shape)], order=2, modes=("rev", "fwd"),
                            eps=_EPS)


def test_complex_eigh_jvp_is_in_jaxs_gauge():
    # JAX's gauge: dV = V (F o V^H dA V), so V^H dV has a zero diagonal (Im diag(V^H dV) = 0)
    a = _cnormal(4, 4)
    h, t = tg.constant(a + a.conj().T), _cnormal(4, 4)
    with tg.ForwardAccumulator(h, tg.constant(t + t.conj().T)) as acc:
        _, v = LA.eigh(h)
    vh_dv = v.numpy().conj().T @ acc.jvp(v).numpy()
    np.testing.assert_allclose(np.diag(vh_dv), 0.0, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5), (2, 3, 2)])
def test_complex_svd_of_phase_invariant_functions(shape):
    # U diag(c) Vh (invariant under the pairs' common phases) and S; both modes, second order
    def f(x):
        u, s, vh = LA.svd(x, full_matrices=False)
        return s, tg.matmul(u * _weights(min(shape[-2:])), vh)

    tg.test.check_gradients(f, [_cnormal(*shape)], order=2, modes=("rev", "fwd"),
                            eps=_EPS)


@pytest.mark.parametrize("shape, mode", [((3, 3), "reduced"), ((4, 3), "reduced"),
                                         ((3, 5), "reduced"), ((2, 4, 2), "reduced"),
                                         ((2, 4), "complete")])
def test_complex_qr_in_the_gauge_of_a_real_diagonal(shape, mode):
    # LAPACK's complex QR has a real diagonal of R: Q and R are then smooth (up to locally
    # constant signs), and the derivatives, which keep that diagonal real (JAX's qr_jvp_rule,
    # PyTorch's linalg_qr_backward), are theirs without any phase fixing
    a = _cnormal(*shape)
    r = LA.qr(tg.constant(a), mode=mode).R.numpy()
    if np.any(np.diagonal(r, axis1=-2, axis2=-1).imag != 0):
        pytest.skip("this backend's QR does not return a real diagonal of R")
    tg.test.check_gradients(lambda x: LA.qr(x, mode=mode), [a], order=2, modes=("rev", "fwd"),
                            eps=_EPS)


def test_complex_trace_diagonal_gradients_are_linear_maps():
    a = tg.Variable(_normal(3, 3) + 1j * _normal(3, 3))
    with tg.GradientTape() as tape:
        y = LA.trace(a) + tg.sum(LA.diagonal(a, offset=1))
    g = tape.gradient(y, a).numpy()
    np.testing.assert_array_equal(g, np.eye(3) + np.eye(3, k=1))


# --- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["det", "slogdet", "inv", "cholesky", "eigh", "eigvalsh"])
def test_non_square_input_is_rejected(name):
    with pytest.raises(ValueError, match=r"square .*got shape \(3, 4\)"):
        getattr(LA, name)(tg.constant(_normal(3, 4)))


@pytest.mark.skipif(tg._backend.default_namespace().__name__ == "jax.numpy",
                    reason="JAX does not raise for a singular or indefinite matrix: it returns "
                           "inf or NaN")
def test_numerical_failures_raise_linalg_error():
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        LA.inv(tg.constant(np.ones((2, 2))))
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        LA.solve(tg.constant(np.ones((2, 2))), tg.constant(np.ones(2)))
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        LA.cholesky(tg.constant(-np.eye(2)))


def test_errors():
    with pytest.raises(ValueError, match=r"x2 must have shape \(3,\)"):
        LA.solve(tg.constant(np.eye(3)), tg.constant(np.ones((2, 4))))
    with pytest.raises(ValueError, match="ord must be one of"):
        LA.matrix_norm(tg.constant(np.eye(2)), ord=3)
    with pytest.raises(ValueError, match="negative int"):
        LA.cross(tg.constant(np.ones(3)), tg.constant(np.ones(3)), axis=0)
    with pytest.raises(ValueError, match="size 3"):
        LA.cross(tg.constant(np.ones(2)), tg.constant(np.ones(2)))
    with pytest.raises(ValueError, match="must be 1-d"):
        LA.outer(tg.constant(np.ones((2, 2))), tg.constant(np.ones(2)))
    with pytest.raises(ValueError, match="'reduced' or 'complete'"):
        LA.qr(tg.constant(np.eye(2)), mode="r")
    with pytest.raises(ValueError, match="axis=5"):
        LA.vector_norm(tg.constant(np.ones(3)), axis=5)
    with pytest.raises(TypeError, match="n must be an integer"):
        LA.matrix_power(tg.constant(np.eye(2)), 1.5)
    for name in ("svd", "svdvals", "qr", "pinv", "matrix_norm", "trace", "diagonal",
                 "matrix_rank"):
        with pytest.raises(ValueError, match="at least 2-d"):
            getattr(LA, name)(tg.constant(np.ones(3)))


def test_matrix_rank_is_not_differentiable():
    a = tg.Variable(_normal(3, 3))
    with tg.GradientTape() as tape:
        r = LA.matrix_rank(a, rtol=tg.constant(1e-3))
        y = tg.sum(a) * tg.astype(r, tg.float64)
    assert int(r) == 3
    np.testing.assert_array_equal(tape.gradient(y, a).numpy(), np.full((3, 3), 3.0))
