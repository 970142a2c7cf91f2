"""The Array API ``linalg`` extension (2024.12), forward and gradient side by side.

Published as ``tg.linalg`` (see :mod:`tapegrad.linalg`, which adds ``matmul``,
``matrix_transpose``, ``tensordot`` and ``vecdot`` from the main namespace). Every forward
calls ``xp.linalg.<fn>`` of its input's namespace; every gradient is written with tapegrad
ops, so gradients of any order exist. Conventions shared by the gradients:

- Complex inputs: ``det``, ``inv`` and ``solve`` (holomorphic) differentiate them in both
  modes: the JVP is the real formula, the gradient uses conjugate transposes (TensorFlow's
  convention, ``docs/architecture.md``, "Complex numbers"); so do ``vector_norm`` and
  ``matrix_norm`` (with ``sign(z) = z / |z|``); ``trace`` and ``diagonal`` are
  real-coefficient linear maps, exact for complex inputs too. ``slogdet`` (whose complex sign
  moves), ``cholesky``, ``eigvalsh``, ``svdvals``, ``pinv`` and ``matrix_norm``'s SVD-based
  ords are not holomorphic: their JVPs are the real-linear derivatives, their gradients the
  adjoints under ``Re<., .>``, each rule citing its source. ``eigh``, ``svd`` and ``qr`` (not
  holomorphic either) have complex derivatives in both modes, for losses invariant under the
  phases of complex eigenvectors / singular vectors (JVPs in JAX's gauge, gradients as
  PyTorch's; ``qr`` in LAPACK's gauge of a real diagonal of ``R``), see their docstrings.
- ``eigh``, ``eigvalsh`` and ``cholesky`` take a symmetric (complex: Hermitian) input and
  read only its lower triangle, as LAPACK's default (``UPLO='L'``) does in NumPy,
  array-api-strict, CuPy and PyTorch (``cholesky(x, upper=True)`` is computed as the
  transpose of the lower factor, so it reads the lower triangle too). Their gradients are the
  **symmetric** ones, ``(G + G^T) / 2`` with ``G`` a gradient for symmetric perturbations
  (complex: the Hermitian part ``(G + G^H) / 2``, for Hermitian perturbations), as PyTorch and
  JAX return (TensorFlow too for ``cholesky``): ``<grad, S>`` is the derivative along every
  symmetric direction ``S``, and a gradient step keeps a symmetric matrix symmetric. Along a
  non-symmetric direction it is not the derivative (the forward sees only the lower triangle
  move); to differentiate that lower-triangle read itself use e.g.
  ``eigh(tril(a) + matrix_transpose(tril(a, k=-1)))``.
- Spectral gradients (``eigh`` eigenvectors, ``svd`` singular vectors, ``matrix_norm`` 2/-2)
  assume distinct eigenvalues / singular values; at (numerically) repeated ones the
  gradient contains inf or NaN (PyTorch does the same). The gradients of ``eigvalsh``,
  ``svdvals`` and the ``'nuc'`` norm stay finite there.
- Matrices that must be invertible (``det``, ``slogdet``, ``inv``, ``solve``, ``qr``'s ``R``,
  ``cholesky``'s factor) give inf/NaN gradients where they are singular.
"""
from __future__ import annotations

import math
import operator
from typing import NamedTuple

from .. import _backend
from .._backend import namespace as _ns
from .._backend import xp_dtype as _xp_dtype
from .._registry import Arg, RegisterGradient, RegisterJVP, Sample, no_gradient, primitive
from .._tensor import Tensor
from ._jvp import linear_jvp
from .conversion import asarray
from .creation import ones_like, zeros_like
from .elementwise import abs as _abs
from .elementwise import astype, conj, holomorphic, imag, real, sign, where
from .products import _bilinear_jvp, matmul
from .manipulation import _shape, concat, expand_dims, matrix_transpose, reshape
from .reductions import _kept_shape, _sum_to
from .reductions import max as _max
from .reductions import min as _min
from .reductions import sum as _sum

_mT = matrix_transpose


def _mH(x):
    """The conjugate transpose of the last two axes (the transpose for real ``x``): reverse
    mode's adjoint of a holomorphic matrix map, in TensorFlow's convention."""
    return conj(_mT(x)) if x.dtype.kind == "c" else _mT(x)


def _conj(x):
    return conj(x) if x.dtype.kind == "c" else x


_INF = math.inf


class EighResult(NamedTuple):
    """``eigh``'s result: ``eigenvalues`` (..., M) ascending, ``eigenvectors`` (..., M, M)."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    """``qr``'s result: ``Q`` with orthonormal columns and upper-triangular ``R``."""

    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    """``slogdet``'s result: ``sign`` and ``logabsdet`` of the determinant, shape (...)."""

    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    """``svd``'s result: ``U``, singular values ``S`` (descending) and ``Vh``."""

    U: Tensor
    S: Tensor
    Vh: Tensor


# --- helpers ----------------------------------------------------------------------------------
def _matrix(name, x):
    if len(getattr(x, "shape", ())) < 2:
        raise ValueError(f"linalg.{name}: expected a matrix or a stack of matrices (shape "
                         f"(..., M, N)), got shape {_shape(x)}; reshape the input to at least "
                         "2-d")


def _square(name, x):
    s = getattr(x, "shape", ())
    if len(s) < 2 or s[-1] != s[-2]:
        raise ValueError(f"linalg.{name}: expected a square matrix or a stack of square "
                         f"matrices (shape (..., M, M)), got shape {_shape(x)}")


def _linalg(xp, name):
    """``xp.linalg.<name>``, or the backend's own kernel of that name where it has one (JAX's
    ``eigh``, ``eigvalsh`` and ``cholesky``, which read only the lower triangle as NumPy's)."""
    return _backend.own_kernel(xp, name) or getattr(xp.linalg, name)


def _failed(name, x, e, hint):
    """The backend's error ``e`` (e.g. ``LinAlgError``, a ``ValueError``) with context."""
    return type(e)(f"linalg.{name}: failed for an input of shape {_shape(x)}: {e}; {hint}")


_SINGULAR = ("the matrix (or one matrix of the stack) is singular; use linalg.pinv for a "
             "pseudo-inverse or regularise the matrix (e.g. add eps * I)")


def _const(like, make):
    """A constant Tensor ``make(xp, dtype)`` on ``like``'s backend, with ``like``'s dtype."""
    v = like._value
    return Tensor(make(_ns(v), v.dtype))


def _eye(like, m, n=None, k=0):
    return _const(like, lambda xp, dt: xp.eye(m, n, k=k, dtype=dt))


def _strict_lower(like, n):
    return _const(like, lambda xp, dt: xp.tril(xp.ones((n, n), dtype=dt), k=-1))


def _as_mat(v):
    """A batch of scalars ``(...)`` as ``(..., 1, 1)``, to scale a stack of matrices."""
    return reshape(v, v.shape + (1, 1))


def _diag_embed(v):
    """``(..., n)`` -> ``(..., n, n)`` with ``v`` on the diagonal."""
    return expand_dims(v, axis=-2) * _eye(v, v.shape[-1])


def _sym(g):
    """``(g + g^T) / 2``: the symmetric gradient from a gradient ``g`` for symmetric
    perturbations (``<g, S> = <sym(g), S>`` for every symmetric ``S``); exactly symmetric.
    Complex ``g``: the Hermitian part ``(g + g^H) / 2`` (``Re<g, S> = Re<sym(g), S>`` for every
    Hermitian ``S``)."""
    return (g + _mH(g)) * 0.5


def _inverse_gaps(v):
    """``F_ij = 1 / (v_j - v_i)`` for ``i != j``, 0 on the diagonal (no division by zero)."""
    n = v.shape[-1]
    eye = _eye(v, n)
    gaps = expand_dims(v, axis=-2) - expand_dims(v, axis=-1) + eye
    return (1.0 - eye) / gaps


def _nonzero(t) -> bool:
    v = t._value
    return bool(_ns(v).any(v != 0))


def _sign_on_extremes(x, v, axis, largest):
    """``sign(x)`` where ``v`` is largest (smallest) along ``axis``, ties sharing it evenly, 0
    elsewhere: the gradient of the max (min) of ``v = |x|`` or of its sums."""
    pick = _max if largest else _min
    mask = astype(v == pick(v, axis=axis, keepdims=True), x.dtype)
    return sign(x) * (mask / _sum(mask, axis=axis, keepdims=True))


# --- cholesky ---------------------------------------------------------------------------------
_SPD = (0.5, 2.0)  # 1x1 matrices with positive entries are SPD; larger ones: tests/test_linalg_ext


@primitive("Cholesky", samples=[
    Sample(Arg((1, 1), _SPD)), Sample(Arg((3, 1, 1), _SPD), upper=True), Sample((0, 0)),
    Sample((2, 0, 0), upper=True)])
def _cholesky(x, *, upper=False):
    _square("cholesky", x)
    xp = _ns(x)
    try:
        lower = _linalg(xp, "cholesky")(x)  # reads the lower triangle
    except ValueError as e:
        raise _failed("cholesky", x, e, "the matrix (or one matrix of the stack) is not "
                      "symmetric positive definite") from e
    if not upper:
        return lower
    u = xp.matrix_transpose(lower)
    return xp.conj(u) if xp.isdtype(u.dtype, "complex floating") else u


@RegisterGradient("Cholesky")
def _cholesky_grad(op, dl):
    # Murray 2016, "Differentiation of the Cholesky decomposition" (reverse mode): with
    # P = Phi(L^T dL) (lower triangle, diagonal halved), G = L^-T P L^-1 is a gradient for
    # symmetric perturbations; the input receives its symmetric part (G + G^T) / 2, as
    # TensorFlow's _CholeskyGrad and PyTorch's cholesky_backward return. Complex (A = L L^H):
    # the same with conjugate transposes, P = Phi(L^H dL), G = L^-H P L^-1 and the Hermitian
    # part (G + G^H) / 2 (the adjoint, under Re<., .>, of the JVP below: Phi is a real mask,
    # self-adjoint; as PyTorch's cholesky_backward and JAX's cholesky_jvp_rule transposed)
    low = op.outputs[0]
    if op.attrs.get("upper", False):
        low, dl = _mH(low), _mH(dl)  # U = L^H: dU = dL^H, and the cotangent of L is dU^H
    n = low.shape[-1]
    phi = _const(low, lambda xp, dt: xp.tril(xp.ones((n, n), dtype=dt), k=-1)
                 + 0.5 * xp.eye(n, dtype=dt))
    lt = _mH(low)
    s = _solve(lt, matmul(lt, dl) * phi)  # L^-H P
    return _sym(_mH(_solve(lt, _mH(s))))  # (L^-H (L^-H P)^H)^H = L^-H P L^-1


@RegisterJVP("Cholesky")
def _cholesky_jvp(op, t):
    # Murray 2016 (forward mode; Giles 2008): dL = L Phi(L^-1 dA L^-T), Phi the lower triangle
    # with the diagonal halved, along the symmetric part of dA (the transpose of the gradient's
    # symmetric rule). Complex (A = L L^H, L^-1 dA L^-H = L^-1 dL + (L^-1 dL)^H with
    # L^-1 dL lower triangular, real diagonal): dL = L Phi(L^-1 S L^-H) along the Hermitian
    # part S of dA (JAX's cholesky_jvp_rule)
    low = op.outputs[0]
    upper = op.attrs.get("upper", False)
    if upper:
        low = _mH(low)
    n = low.shape[-1]
    phi = _const(low, lambda xp, dt: xp.tril(xp.ones((n, n), dtype=dt), k=-1)
                 + 0.5 * xp.eye(n, dtype=dt))
    inner = _solve(low, _mH(_solve(low, _sym(t))))  # L^-1 (L^-1 S)^H = L^-1 S L^-H, S = S^H
    dl = matmul(low, inner * phi)
    return _mH(dl) if upper else dl


def cholesky(x, /, *, upper=False):
    """Cholesky factor of a symmetric (complex: Hermitian) positive-definite matrix (or
    stack), ``x = L L^T`` (``x = L L^H``).

    x: ``(..., M, M)`` floating, symmetric (Hermitian); only its lower triangle is read.
    Result: the lower factor ``L`` (``upper=False``) or ``U = L^H`` (``upper=True``), same
    shape and dtype. Raises ``ValueError`` for a non-square input and
    ``numpy.linalg.LinAlgError`` (a ``ValueError``) on NumPy when a matrix is not positive
    definite. Gradient: the symmetric part ``(G + G^T) / 2`` of ``G = L^-T Phi(L^T dL) L^-1``
    (Murray 2016, "Differentiation of the Cholesky decomposition"; ``Phi``: the lower triangle
    with the diagonal halved). It is the symmetric gradient, as in TensorFlow, PyTorch and
    JAX: the derivative along symmetric directions. Complex ``x``: the same with conjugate
    transposes, the Hermitian part ``(G + G^H) / 2`` of ``G = L^-H Phi(L^H dL) L^-1``
    (TensorFlow's convention), the derivative along Hermitian directions; JVP
    ``dL = L Phi(L^-1 S L^-H)`` along the Hermitian part ``S`` of the tangent.
    """
    return _cholesky(x, upper=upper)


# --- det, slogdet, inv ---------------------------------------------------------------------------
_SQUARE_SAMPLES = [Sample((3, 3)), Sample((2, 4, 4)), Sample((1, 1), domain=(0.5, 2.0)),
                   Sample((0, 0)), Sample((2, 0, 0))]


@primitive("Det", samples=_SQUARE_SAMPLES)
def _det(x):
    _square("det", x)
    return _ns(x).linalg.det(x)


@RegisterGradient("Det")
def _det_grad(op, dy):
    # Jacobi's formula d det A = det A tr(A^-1 dA) (Giles 2008, "An extended collection of
    # matrix derivative results"): dA = dy det(A) A^-T
    # (complex: the conjugates, dA = dy conj(det A) A^-H, TensorFlow's convention)
    return _as_mat(dy * _conj(op.outputs[0])) * _mH(inv(op.inputs[0]))


def _trace_of_solve(a, t):
    """``tr(A^-1 dA)`` for stacks of square matrices: ``d log det A`` (Jacobi's formula)."""
    return _trace(_solve(a, t))


@RegisterJVP("Det")
def _det_jvp(op, t):
    # Jacobi's formula d det A = det A tr(A^-1 dA) (Giles 2008; holomorphic: complex too)
    return op.outputs[0] * _trace_of_solve(op.inputs[0], t)


def det(x, /):
    """Determinant of a square matrix (or a stack of them).

    x: ``(..., M, M)`` floating. Result: shape ``(...)``, ``x``'s dtype (1 for 0x0 matrices).
    Raises ``ValueError`` for a non-square input. Gradient: Jacobi's formula,
    ``dy * det(x) * inv(x)^T`` (Giles 2008; complex: ``dy * conj(det) * inv(x)^H``);
    inf/NaN at singular matrices.
    """
    return _det(x)


@primitive("Slogdet", samples=_SQUARE_SAMPLES)
def _slogdet(x):
    _square("slogdet", x)
    sgn, logabs = _ns(x).linalg.slogdet(x)
    return sgn, logabs


@RegisterGradient("Slogdet")
def _slogdet_grad(op, dsign, dlogabs):
    # Jacobi's formula (Giles 2008): with tau = tr(A^-1 dA) = d log det A,
    # d logabsdet = Re(tau) and d sign = sign i Im(tau). Real A: the sign is piecewise
    # constant, its cotangent contributes nothing, dA = dlogabs A^-T. Complex A: for a real
    # loss, dL = dlogabs Re(tau) + Re(conj(dsign) sign i Im(tau)) = Re(w tau) with
    # w = dlogabs + i Im(conj(dsign) sign), so dA = conj(w) A^-H (TensorFlow's convention;
    # conj(w) = dlogabs + (dsign conj(sign) - conj(dsign) sign) / 2)
    x = op.inputs[0]
    if x.dtype.kind != "c":
        return _as_mat(dlogabs) * _mT(inv(x))
    q = dsign * conj(op.outputs[0])
    w = astype(dlogabs, x.dtype) + (q - conj(q)) * 0.5
    return _as_mat(w) * _mH(inv(x))


@RegisterJVP("Slogdet")
def _slogdet_jvp(op, t):
    # Jacobi's formula (Giles 2008): tau = tr(A^-1 dA) = d log det A; d logabsdet = Re(tau);
    # the sign is piecewise constant for real A, and for complex A
    # d sign = sign i Im(tau) = sign (tau - conj(tau)) / 2
    tau = _trace_of_solve(op.inputs[0], t)
    if tau.dtype.kind != "c":
        return None, tau
    return op.outputs[0] * ((tau - conj(tau)) * 0.5), real(tau)


def slogdet(x, /):
    """Sign and natural log of the absolute value of the determinant, as a namedtuple.

    x: ``(..., M, M)`` floating. Result: ``SlogdetResult(sign, logabsdet)``, each of shape
    ``(...)``; sign 0 and logabsdet -inf for singular matrices (``logabsdet`` has the real
    dtype; for complex ``x`` the sign is a complex number of modulus 1). Raises
    ``ValueError`` for a non-square input. Derivatives: Jacobi's formula (Giles 2008), with
    ``tau = tr(inv(x) dx)``: ``d logabsdet = Re(tau)``; the sign of a real ``x`` is piecewise
    constant (its cotangent contributes nothing), that of a complex ``x`` moves,
    ``d sign = sign * i Im(tau)``. Gradient: ``dlogabsdet * inv(x)^T`` for real ``x``;
    ``conj(w) * inv(x)^H`` with ``w = dlogabsdet + i Im(conj(dsign) sign)`` for complex ``x``
    (TensorFlow's convention).
    """
    return SlogdetResult(*_slogdet(x))


@primitive("Inv", samples=_SQUARE_SAMPLES)
def _inv(x):
    _square("inv", x)
    try:
        return _ns(x).linalg.inv(x)
    except ValueError as e:
        raise _failed("inv", x, e, _SINGULAR) from e


@RegisterGradient("Inv")
def _inv_grad(op, dy):
    # d(A^-1) = -A^-1 dA A^-1 (Giles 2008): dA = -A^-T dY A^-T (complex: A^-H, TF's convention)
    yt = _mH(op.outputs[0])
    return -matmul(matmul(yt, dy), yt)


@RegisterJVP("Inv")
def _inv_jvp(op, t):
    # d(A^-1) = -A^-1 dA A^-1 (Giles 2008; holomorphic: complex too)
    y = op.outputs[0]
    return -matmul(matmul(y, t), y)


def inv(x, /):
    """Inverse of a square matrix (or a stack of them).

    x: ``(..., M, M)`` floating. Result: same shape and dtype. Raises ``ValueError`` for a
    non-square input and ``numpy.linalg.LinAlgError`` on NumPy for a singular matrix.
    Gradient: ``-inv(x)^T dy inv(x)^T`` (Giles 2008; complex: conjugate transposes).
    """
    return _inv(x)


# --- solve ---------------------------------------------------------------------------------------
@primitive("Solve", samples=[
    Sample((3, 3), (3,)), Sample((3, 3), (3, 2)), Sample((2, 3, 3), (3,)),
    Sample((2, 3, 3), (2, 3, 4)), Sample((3, 3), (2, 3, 2)), Sample((2, 1, 3, 3), (4, 3, 1)),
    Sample((1, 1), (1,), domain=(0.5, 2.0)), Sample((0, 0), (0,)), Sample((2, 2), (2, 0))])
def _solve(x1, x2):
    _square("solve", x1)
    s1, s2 = _shape(x1), _shape(x2)
    m = s1[-1]
    if not s2 or (s2[0] if len(s2) == 1 else s2[-2]) != m:
        raise ValueError(
            f"linalg.solve: x2 of shape {s2} does not match x1 of shape {s1}: x2 must have "
            f"shape ({m},) (one vector) or (..., {m}, K) (a stack of K columns)")
    try:
        return _ns(x1, x2).linalg.solve(x1, x2)
    except ValueError as e:
        raise _failed("solve", x1, e, _SINGULAR + ", and the batch dimensions of x1 and x2 "
                      "must broadcast") from e


@RegisterGradient("Solve")
def _solve_grad(op, dx):
    # X = A^-1 B: dB = A^-T dX, dA = -dB X^T (Giles 2008; complex: A^-H and X^H, TF's
    # convention), summed over the batch axes along which A or B was broadcast. A 1-d B is
    # one column (Array API rule).
    a, b = op.inputs
    x = op.outputs[0]
    need_a, _ = op.needs_input_grad
    at = _mH(a)
    if b.ndim == 1:
        db = _solve(at, expand_dims(dx, axis=-1))  # (..., M, 1)
        da = -matmul(db, _mH(expand_dims(x, axis=-1))) if need_a else None
        return da, _sum_to(reshape(db, db.shape[:-1]), b.shape)
    db = _solve(at, dx)
    da = _sum_to(-matmul(db, _mH(x)), a.shape) if need_a else None
    return da, _sum_to(db, b.shape)


@RegisterJVP("Solve")
def _solve_jvp(op, ta, tb):
    # X = A^-1 B: dX = A^-1 (dB - dA X) (Giles 2008; holomorphic: complex too). A 1-d B is
    # one column.
    a, b = op.inputs
    x = op.outputs[0]
    vector = b.ndim == 1
    if vector:  # as columns: (..., M, 1)
        x = expand_dims(x, axis=-1)
        tb = None if tb is None else expand_dims(tb, axis=-1)
    rhs = None if ta is None else -matmul(ta, x)
    if tb is not None:
        rhs = tb if rhs is None else rhs + tb
    dx = _solve(a, rhs)
    return reshape(dx, dx.shape[:-1]) if vector else dx


def solve(x1, x2, /):
    """Solve ``x1 @ x = x2`` for ``x`` (Array API ``linalg.solve``).

    x1: ``(..., M, M)`` invertible. x2: ``(M,)`` (one vector; result
    ``x1.shape[:-2] + (M,)``) or ``(..., M, K)`` (columns; result ``(..., M, K)``, batch axes
    broadcast). Raises ``ValueError`` for mismatched shapes and ``numpy.linalg.LinAlgError``
    on NumPy for a singular ``x1``. Gradient: ``dx2 = solve(x1^T, dy)``,
    ``dx1 = -dx2 @ x^T`` (Giles 2008; complex: conjugate transposes), summed over broadcast
    batch axes.
    """
    return _solve(x1, x2)


# --- eigh, eigvalsh ------------------------------------------------------------------------------
_SYM_SAMPLES = [Sample((3, 3)), Sample((2, 4, 4)), Sample((1, 1)), Sample((0, 0))]


def _eigh_gauge(op, cotangents):
    """The gradient self-check's cotangents of ``eigh`` (``primitive``'s ``gauge``): complex
    eigenvectors are defined up to a phase each, ``v_i e^{i phi}``; the gauge-invariant
    cotangents ``dV`` have ``Im diag(V^H dV) = 0`` (the part the gradient ignores)."""
    dw, dv = cotangents
    v = op.outputs[1]
    if v.dtype.kind != "c":
        return [dw, dv]
    phase = imag(_diagonal(matmul(_mH(v), dv)))
    return [dw, dv - v * (expand_dims(phase, axis=-2) * 1j)]


@primitive("Eigh", samples=_SYM_SAMPLES, hermitian=(0,), gauge=_eigh_gauge)
def _eigh(x):
    _square("eigh", x)
    w, v = _linalg(_ns(x), "eigh")(x)  # reads the lower triangle
    return w, v


@RegisterGradient("Eigh")
def _eigh_grad(op, dw, dv):
    # A = V diag(w) V^H: G = V (diag(dw) + F o (V^H dV)) V^H with F_ij = 1 / (w_j - w_i),
    # i != j (Giles 2008; Seeger et al. 2017, "Auto-differentiating linear algebra"), is a
    # gradient for symmetric (Hermitian) perturbations; the input receives its Hermitian part
    # (G + G^H) / 2 = V (diag(dw) + F o skewH(V^H dV)) V^H, as PyTorch's linalg_eig_backward
    # (hermitian) returns. Complex eigenvectors are defined up to a phase each, v_i e^{i phi}:
    # F's zero diagonal drops Im diag(V^H dV), the gauge part, which a gauge-invariant loss
    # leaves zero (PyTorch checks it and raises; here it is ignored). Repeated eigenvalues make
    # F infinite: the eigenvector gradient is then inf/NaN.
    w, v = op.outputs
    inner = _diag_embed(dw) + _inverse_gaps(w) * matmul(_mH(v), dv)
    return _sym(matmul(matmul(v, inner), _mH(v)))


@RegisterJVP("Eigh")
def _eigh_jvp(op, t):
    # the perturbation formulas (Giles 2008; JAX's eigh_jvp_rule), along the symmetric
    # (Hermitian) part S of dA: P = V^H S V, dw = Re diag(P), dV = V (F o P) with
    # F_ij = 1 / (w_j - w_i), i != j; complex: the gauge (phase) of dV is JAX's, zero diagonal,
    # so Im diag(V^H dV) = 0
    w, v = op.outputs
    p = matmul(matmul(_mH(v), _sym(t)), v)
    dw = _diagonal(p)
    return real(dw) if dw.dtype.kind == "c" else dw, matmul(v, _inverse_gaps(w) * p)


def eigh(x, /):
    """Eigen-decomposition of a real symmetric (complex Hermitian) matrix or stack.

    x: ``(..., M, M)`` floating, symmetric (Hermitian); only its lower triangle is read.
    Result: ``EighResult(eigenvalues, eigenvectors)``: ``(..., M)`` ascending, real dtype, and
    ``(..., M, M)`` with the eigenvectors as columns (each defined up to sign, or up to a
    phase ``e^{i phi}`` if complex). Raises ``ValueError`` for a non-square input. Gradient:
    the symmetric (Hermitian) part ``(G + G^H) / 2`` of ``G = V (diag(dw) + F o V^H dV) V^H``
    with ``F_ij = 1/(w_j - w_i)`` (Giles 2008, "An extended collection of matrix derivative
    results"; PyTorch's ``linalg_eig_backward``). It is the symmetric gradient, as in PyTorch
    and JAX: the derivative along symmetric (Hermitian) directions. Complex inputs: TensorFlow's
    convention (``docs/architecture.md``, "Complex numbers"), for losses invariant under the
    eigenvectors' phases (the gauge part ``Im diag(V^H dV)`` of the cotangent is ignored); the
    JVP takes JAX's gauge (``dV = V (F o V^H dA V)``, ``Im diag(V^H dV) = 0``). Eigenvalues must
    be distinct (repeated ones give inf/NaN eigenvector gradients).
    """
    return EighResult(*_eigh(x))


@primitive("Eigvalsh", samples=_SYM_SAMPLES, hermitian=(0,))
def _eigvalsh(x):
    _square("eigvalsh", x)
    return _linalg(_ns(x), "eigvalsh")(x)


@RegisterGradient("Eigvalsh")
def _eigvalsh_grad(op, dw):
    # dw_i = v_i^T dA v_i (Giles 2008): G = V diag(dw) V^T, symmetric; _sym makes it exactly
    # so. Complex (Hermitian A): dw_i = v_i^H S v_i along the Hermitian part S of dA (real;
    # JAX's eigh_jvp_rule), so G = V diag(dw) V^H, Hermitian. V is recomputed with the Eigh
    # op, so second derivatives come from its gradient.
    x = op.inputs[0]
    _, v = _eigh(x)
    return _sym(matmul(v * expand_dims(dw, axis=-2), _mH(v)))


@RegisterJVP("Eigvalsh")
def _eigvalsh_jvp(op, t):
    # dw_i = v_i^T S v_i along the symmetric part S of dA (Giles 2008); complex:
    # dw_i = Re(v_i^H S v_i) along the Hermitian part (JAX's eigh_jvp_rule); V from the Eigh op
    x = op.inputs[0]
    _, v = _eigh(x)
    dw = _sum(_conj(v) * matmul(_sym(t), v), axis=-2)
    return real(dw) if dw.dtype.kind == "c" else dw


def eigvalsh(x, /):
    """Eigenvalues of a real symmetric (complex Hermitian) matrix or stack, ascending.

    x: ``(..., M, M)`` floating, symmetric (Hermitian); only its lower triangle is read.
    Result: ``(..., M)``, real dtype. Raises ``ValueError`` for a non-square input. Gradient:
    ``V diag(dy) V^T`` (Giles 2008, "An extended collection of matrix derivative results"),
    defined also at repeated eigenvalues to first order. It is the symmetric gradient, as in
    PyTorch and JAX: the derivative along symmetric directions. Complex ``x``: ``dw_i =
    v_i^H S v_i`` along the Hermitian part ``S`` of the tangent, gradient ``V diag(dy) V^H``
    (Hermitian; TensorFlow's convention); its second order comes from ``eigh``'s gradient.
    """
    return _eigvalsh(x)


# --- svd, svdvals --------------------------------------------------------------------------------
def _svd_gauge(op, cotangents):
    """The gradient self-check's cotangents of ``svd`` (``primitive``'s ``gauge``): with
    ``full_matrices`` and ``M != N`` the extra columns of U (rows of Vh) are not unique (their
    cotangents are set to zero); complex pairs ``(u_i, v_i)`` are defined up to a common phase
    (``U e^{i phi}``, ``e^{-i phi} Vh``): the gauge-invariant cotangents have
    ``Im diag(U^H dU) + Im diag(V^H dV) = 0``, to which half the sum is taken off each."""
    du, ds, dvh = cotangents
    u, s, vh = op.outputs
    m, n = op.inputs[0].shape[-2:]
    k = min(m, n)
    extra = op.attrs.get("full_matrices", True) and m != n
    if extra:
        du, dvh, u, vh = du[..., :, :k], dvh[..., :k, :], u[..., :, :k], vh[..., :k, :]
    if u.dtype.kind == "c":
        half = (imag(_diagonal(matmul(_mH(u), du))) + imag(_diagonal(matmul(vh, _mH(dvh))))) * 0.5j
        du = du - u * expand_dims(half, axis=-2)
        dvh = dvh + vh * expand_dims(half, axis=-1)
    if extra:
        full_u, _, full_vh = op.outputs
        du = concat([du, zeros_like(full_u[..., :, k:])], axis=-1)
        dvh = concat([dvh, zeros_like(full_vh[..., k:, :])], axis=-2)
    return [du, ds, dvh]


@primitive("Svd", gauge=_svd_gauge, samples=[
    Sample((3, 3)), Sample((4, 3), full_matrices=False), Sample((3, 5), full_matrices=False),
    Sample((2, 3, 2), full_matrices=False), Sample((2, 4, 4)), Sample((1, 1), domain=(0.5, 2.0)),
    Sample((0, 0)), Sample((0, 3), full_matrices=False)])
def _svd(x, *, full_matrices=True):
    _matrix("svd", x)
    u, s, vh = _ns(x).linalg.svd(x, full_matrices=full_matrices)
    return u, s, vh


def _safe_reciprocal(s):
    """``1 / s`` with 0 where ``s`` is 0 (JAX's svd_jvp_rule), differentiable everywhere."""
    zero = astype(s == 0, s.dtype)
    return 1.0 / (s + zero) - zero


@RegisterGradient("Svd")
def _svd_grad(op, du, ds, dvh):
    # Townsend 2016, "Differentiating the singular value decomposition", for the reduced
    # SVD A = U S V^H (k = min(m, n)), F_ij = 1 / (s_j^2 - s_i^2) for i != j:
    #   dA = U [(F o (U^H dU - dU^H U)) S + diag(ds) + S (F o (V^H dV - dV^H V))] V^H
    #        + (I - U U^H) dU S^-1 V^H + U S^-1 dV^H (I - V V^H)
    # Complex (PyTorch's svd_backward): each pair (u_i, v_i) is defined up to a common phase
    # e^{i phi}; for a loss invariant under it, Im diag(U^H dU) = -Im diag(V^H dV), and the
    # diagonal of the bracket gains i Im diag(U^H dU) / s. Repeated singular values make F
    # infinite; zero ones make the last two terms (and the complex diagonal one) infinite.
    x = op.inputs[0]
    u, s, vh = op.outputs
    m, n = x.shape[-2:]
    k = min(m, n)
    if op.attrs.get("full_matrices", True) and m != n:
        # the extra columns of U (rows of Vh) are not unique: no gradient flows through them
        if (m > k and _nonzero(du[..., :, k:])) or (n > k and _nonzero(dvh[..., k:, :])):
            raise NotImplementedError(
                "linalg.svd: with full_matrices=True and a non-square matrix, the extra "
                f"columns of U (or rows of Vh) beyond min(M, N) = {k} are not unique, so they "
                "have no gradient; call svd(x, full_matrices=False), or use only the first "
                f"{k} of them")
        u, du = u[..., :, :k], du[..., :, :k]
        vh, dvh = vh[..., :k, :], dvh[..., :k, :]
    v, dv = _mH(vh), _mH(dvh)
    f = _inverse_gaps(s * s)
    uh_du = matmul(_mH(u), du)
    vh_dv = matmul(_mH(v), dv)
    inner = (f * (uh_du - _mH(uh_du)) * expand_dims(s, axis=-2) + _diag_embed(ds)
             + expand_dims(s, axis=-1) * (f * (vh_dv - _mH(vh_dv))))
    if uh_du.dtype.kind == "c":  # the phase term (PyTorch's svd_backward)
        inner = inner + _diag_embed(imag(_diagonal(uh_du)) * _safe_reciprocal(s)) * 1j
    da = matmul(matmul(u, inner), vh)
    if m > k:
        da = da + matmul((du - matmul(u, uh_du)) / expand_dims(s, axis=-2), vh)
    if n > k:
        da = da + matmul(u, (dvh - matmul(_mH(vh_dv), vh)) / expand_dims(s, axis=-1))
    return da


@RegisterJVP("Svd")
def _svd_jvp(op, t):
    # reduced SVD A = U S V^H, k = min(m, n) (Townsend 2016; JAX's svd_jvp_rule): with
    # P = U^H dA V and F_ij = 1 / (s_j^2 - s_i^2) (i != j),
    #   dS = Re diag(P),  dU = U (F o (P S + S P^H) + i Im diag(P) S^-1) + (I - U U^H) dA V S^-1,
    #   dV = V (F o (S P + P^H S)) + (I - V V^H) dA^H U S^-1.
    # Complex: the phase term i Im diag(P) / s goes to dU with Im diag(V^H dV) = 0 (JAX's
    # gauge). With full_matrices and m != n the extra columns are not unique: the transposed
    # VJP.
    x = op.inputs[0]
    u, s, vh = op.outputs
    m, n = x.shape[-2:]
    if op.attrs.get("full_matrices", True) and m != n:
        return NotImplemented
    v = _mH(vh)
    p = matmul(matmul(_mH(u), t), v)
    f = _inverse_gaps(s * s)
    row, col = expand_dims(s, axis=-2), expand_dims(s, axis=-1)  # s_j and s_i at (i, j)
    ph = _mH(p)
    inner_u = f * (p * row + ph * col)
    dp = _diagonal(p)
    if dp.dtype.kind == "c":  # the phase term (JAX's svd_jvp_rule)
        inner_u = inner_u + _diag_embed(imag(dp) * _safe_reciprocal(s)) * 1j
        dp = real(dp)
    du = matmul(u, inner_u)
    dv = matmul(v, f * (p * col + ph * row))
    if m > n:
        tv = matmul(t, v)
        du = du + (tv - matmul(u, matmul(_mH(u), tv))) / row
    if n > m:
        tu = matmul(_mH(t), u)
        dv = dv + (tu - matmul(v, matmul(_mH(v), tu))) / row
    return du, dp, _mH(dv)


def svd(x, /, *, full_matrices=True):
    """Singular value decomposition ``x = U diag(S) Vh`` of a matrix or stack.

    x: ``(..., M, N)`` floating. Result: ``SVDResult(U, S, Vh)`` with ``S`` of shape
    ``(..., K)``, ``K = min(M, N)``, descending and real; ``U`` ``(..., M, M)`` and ``Vh``
    ``(..., N, N)`` if ``full_matrices`` else ``(..., M, K)`` and ``(..., K, N)`` (singular
    vectors defined up to a common sign, or for complex ones a common phase ``e^{i phi}`` per
    pair ``u_i``, ``v_i``). Raises ``ValueError`` for a < 2-d input. Gradient: Townsend
    (2016), "Differentiating the singular value decomposition" (reduced SVD); singular values
    must be distinct, and nonzero when ``M != N``. Complex inputs: TensorFlow's convention
    (``docs/architecture.md``, "Complex numbers"), for losses invariant under the pairs' phases,
    with PyTorch's phase term ``i Im diag(U^H dU) / S`` (``svd_backward``); the JVP takes JAX's
    gauge (``svd_jvp_rule``: ``Im diag(V^H dV) = 0``). With ``full_matrices=True`` and
    ``M != N`` the extra columns of ``U`` / rows of ``Vh`` are not unique: a nonzero cotangent
    on them raises ``NotImplementedError`` (use ``full_matrices=False``).
    """
    return SVDResult(*_svd(x, full_matrices=full_matrices))


@primitive("Svdvals", samples=[Sample((3, 3)), Sample((4, 2)), Sample((2, 3, 5)),
                               Sample((1, 1), domain=(0.5, 2.0)), Sample((0, 3))])
def _svdvals(x):
    _matrix("svdvals", x)
    return _ns(x).linalg.svdvals(x)


@RegisterGradient("Svdvals")
def _svdvals_grad(op, ds):
    # ds_i = u_i^T dA v_i (Townsend 2016): dA = U diag(ds) V^T, with U, V from the Svd op.
    # Complex: ds_i = Re(u_i^H dA v_i) (JAX's svd_jvp_rule), so dA = U diag(ds) V^H
    # (TensorFlow's convention): the same product with Vh = V^H
    x = op.inputs[0]
    u, _, vh = _svd(x, full_matrices=False)
    return matmul(u * expand_dims(ds, axis=-2), vh)


@RegisterJVP("Svdvals")
def _svdvals_jvp(op, t):
    # ds_i = u_i^T dA v_i (Townsend 2016), with U, V from the Svd op; complex:
    # ds_i = Re(u_i^H dA v_i) (JAX's svd_jvp_rule), V = Vh^H
    x = op.inputs[0]
    u, _, vh = _svd(x, full_matrices=False)
    ds = _sum(_conj(u) * matmul(t, _mH(vh)), axis=-2)
    return real(ds) if ds.dtype.kind == "c" else ds


def svdvals(x, /):
    """Singular values of a matrix or stack, descending.

    x: ``(..., M, N)`` floating. Result: ``(..., min(M, N))``, real dtype. Raises
    ``ValueError`` for a < 2-d input. Gradient: ``U diag(dy) V^T`` (Townsend 2016); a kink
    where singular values cross. Complex ``x``: ``ds_i = Re(u_i^H dx v_i)``, gradient
    ``U diag(dy) V^H`` (TensorFlow's convention); its second order comes from ``svd``'s
    gradient.
    """
    return _svdvals(x)


# --- qr ------------------------------------------------------------------------------------------
@primitive("Qr", samples=[
    Sample((3, 3)), Sample((4, 3)), Sample((2, 5, 3)), Sample((3, 5)), Sample((2, 2, 4)),
    Sample((3, 3), mode="complete"), Sample((2, 4), mode="complete"),
    Sample((1, 1), domain=(0.5, 2.0)), Sample((0, 0))])
def _qr(x, *, mode="reduced"):
    _matrix("qr", x)
    q, r = _ns(x).linalg.qr(x, mode=mode)
    return q, r


def _qr_grad_tall(q, r, dq, dr):
    # m >= n (Walter & Lehmann 2018, "Algorithmic differentiation of linear algebra functions
    # with application in optimum experimental design"; Liao et al. 2019, "Differentiable
    # programming tensor networks"):
    #   M = R dR^H - dQ^H Q,  dA = (dQ + Q copyltu(M)) R^-H,
    # copyltu(M) the symmetric (Hermitian) matrix with M's lower triangle; complex: its
    # diagonal is Re diag(M), the imaginary part being the gauge of R's real diagonal
    # (PyTorch's linalg_qr_backward, syminvadj)
    mm = matmul(r, _mH(dr)) - matmul(_mH(dq), q)
    n = mm.shape[-1]
    low = mm * _strict_lower(mm, n)
    diag = mm * _eye(mm, n)
    if diag.dtype.kind == "c":
        diag = real(diag)
    sym = low + _mH(low) + diag
    return _mH(_solve(r, _mH(dq + matmul(q, sym))))


@RegisterGradient("Qr")
def _qr_grad(op, dq, dr):
    x = op.inputs[0]
    q, r = op.outputs
    m, n = x.shape[-2:]
    if m >= n:
        if m > n and op.attrs.get("mode", "reduced") == "complete":
            raise NotImplementedError(
                f"linalg.qr: no gradient for mode='complete' with more rows ({m}) than "
                f"columns ({n}): the last {m - n} columns of Q are not unique; use "
                "mode='reduced'")
        return _qr_grad_tall(q, r, dq, dr)
    # m < n (Liao et al. 2019, "Differentiable programming tensor networks"):
    # A = [X | Y] with X = Q U square and Y = Q V: dY = Q dV, and X gets the square-case
    # gradient with dQ + Y dV^H in place of dQ (V = Q^H Y; complex: conjugate transposes)
    y = x[..., :, m:]
    dv = dr[..., :, m:]
    dx = _qr_grad_tall(q, r[..., :, :m], dq + matmul(y, _mH(dv)), dr[..., :, :m])
    return concat([dx, matmul(q, dv)], axis=-1)


def _qr_jvp_tall(q, r, t):
    # m >= n (Walter & Lehmann 2018; JAX's qr_jvp_rule): with C = Q^H dA R^-1 and
    # W = tril(C, -1) - tril(C, -1)^H (skew-Hermitian), dQ = Q (W - C) + dA R^-1,
    # dR = (C - W) R; complex: W also gets i Im diag(C), so that R's diagonal stays real as
    # LAPACK returns it (JAX's "correction necessary for complex inputs")
    t_rinv = _mH(_solve(_mH(r), _mH(t)))  # dA R^-1
    c = matmul(_mH(q), t_rinv)
    low = c * _strict_lower(c, c.shape[-1])
    w = low - _mH(low)
    if c.dtype.kind == "c":
        w = w + _diag_embed(imag(_diagonal(c))) * 1j
    return matmul(q, w - c) + t_rinv, matmul(c - w, r)


@RegisterJVP("Qr")
def _qr_jvp(op, t):
    x = op.inputs[0]
    q, r = op.outputs
    m, n = x.shape[-2:]
    if m >= n:
        if m > n and op.attrs.get("mode", "reduced") == "complete":
            return NotImplemented  # the extra columns of Q are not unique (the gradient raises)
        return _qr_jvp_tall(q, r, t)
    # m < n: A = [X | Y], X = Q U square, Y = Q V (Liao et al. 2019): (dQ, dU) from X, and
    # dY = dQ V + Q dV gives dV = Q^H (dY - dQ V)
    dq, du = _qr_jvp_tall(q, r[..., :, :m], t[..., :, :m])
    dv = matmul(_mH(q), t[..., :, m:] - matmul(dq, r[..., :, m:]))
    return dq, concat([du, dv], axis=-1)


def qr(x, /, *, mode="reduced"):
    """QR decomposition ``x = Q R`` of a matrix or stack (Householder, as the backend does).

    x: ``(..., M, N)`` floating, first ``min(M, N)`` columns independent. mode:
    ``'reduced'`` (``Q`` ``(..., M, K)``, ``R`` ``(..., K, N)``, ``K = min(M, N)``) or
    ``'complete'`` (``Q`` ``(..., M, M)``, ``R`` ``(..., M, N)``). Result:
    ``QRResult(Q, R)``. Raises ``ValueError`` for a < 2-d input or another mode. Gradient:
    Walter & Lehmann (2018) / Liao et al. (2019), ``(dQ + Q copyltu(R dR^H - dQ^H Q)) R^-H``
    for ``M >= N``, and the split ``A = [X | Y]`` of Liao et al. for ``M < N``;
    ``mode='complete'`` with ``M > N`` raises ``NotImplementedError`` (the extra columns of
    ``Q`` are not unique). Complex inputs: TensorFlow's convention (``docs/architecture.md``,
    "Complex numbers"), in the gauge where ``R``'s diagonal is real, as LAPACK returns it: the
    gradient drops the imaginary part of ``diag(M)`` (PyTorch's ``linalg_qr_backward``), the
    JVP keeps ``diag(dR)`` real (JAX's ``qr_jvp_rule``).
    """
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}")
    return QRResult(*_qr(x, mode=mode))


# --- pinv ----------------------------------------------------------------------------------------
@primitive("Pinv", samples=[Sample((3, 3)), Sample((4, 2)), Sample((2, 3)), Sample((2, 4, 3)),
                            Sample((1, 1), domain=(0.5, 2.0)), Sample((0, 0)), Sample((3, 0))])
def _pinv(x, *, rtol=None):
    _matrix("pinv", x)
    return _ns(x).linalg.pinv(x, rtol=rtol)


@RegisterGradient("Pinv")
def _pinv_grad(op, dp):
    # Golub & Pereyra 1973, "The differentiation of pseudo-inverses and nonlinear least squares
    # problems whose variables separate", for X = A^+ at constant rank:
    #   dX = -X dA X + X X^H dA^H (I - A X) + (I - X A) dA^H X^H X
    # (^H: the transpose for real A; the formula holds for complex A with conjugate
    # transposes, as the Penrose conditions do), whose adjoint under Re<., .> (TensorFlow's
    # convention; Re tr(M^H P dA^H Q) = Re tr((Q M^H P)^H dA)) is
    #   dA = -X^H dX X^H + (I - A X) dX^H X X^H + X^H X dX^H (I - X A)
    a = op.inputs[0]
    p = op.outputs[0]
    pt, dpt = _mH(p), _mH(dp)
    g = -matmul(matmul(pt, dp), pt)
    t2 = matmul(dpt, matmul(p, pt))
    t3 = matmul(matmul(pt, p), dpt)
    return g + (t2 - matmul(a, matmul(p, t2))) + (t3 - matmul(matmul(t3, p), a))


@RegisterJVP("Pinv")
def _pinv_jvp(op, t):
    # Golub & Pereyra 1973, at constant rank, X = A^+ (complex: conjugate transposes, the
    # dA^H terms make it real-linear, not holomorphic):
    #   dX = -X dA X + X X^H dA^H (I - A X) + (I - X A) dA^H X^H X
    a = op.inputs[0]
    p = op.outputs[0]
    tt = _mH(t)
    t2 = matmul(matmul(p, _mH(p)), tt)  # X X^H dA^H
    t3 = matmul(tt, matmul(_mH(p), p))  # dA^H X^H X
    return (-matmul(matmul(p, t), p) + (t2 - matmul(matmul(t2, a), p))
            + (t3 - matmul(p, matmul(a, t3))))


def pinv(x, /, *, rtol=None):
    """Moore-Penrose pseudo-inverse of a matrix or stack.

    x: ``(..., M, N)`` floating. rtol: singular values ``<= rtol * largest`` count as zero
    (float or array broadcasting against ``x.shape[:-2]``; default ``max(M, N) * eps``).
    Result: ``(..., N, M)``. Raises ``ValueError`` for a < 2-d input. Gradient: Golub &
    Pereyra (1973), valid where the rank is locally constant (a full-rank ``x``); complex
    ``x``: the same formulas with conjugate transposes (real-linear in the tangent, not
    holomorphic), the gradient in TensorFlow's convention.
    """
    return _pinv(x, rtol=rtol._value if isinstance(rtol, Tensor) else rtol)


# --- matrix_norm, vector_norm --------------------------------------------------------------------
_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, _INF, -_INF)


@primitive("MatrixNorm", samples=[
    Sample((3, 4)), Sample((2, 3, 3), keepdims=True), Sample((3, 4), ord="nuc"),
    Sample((2, 4, 3), ord=2), Sample((3, 3), ord=-2), Sample((3, 4), ord=1),
    Sample((2, 3, 4), ord=-1), Sample((4, 3), ord=_INF), Sample((3, 4), ord=-_INF, keepdims=True),
    Sample((2, 3), ord="nuc", keepdims=True), Sample((0, 3)), Sample((1, 1), ord=2)])
def _matrix_norm(x, *, keepdims=False, ord="fro"):  # noqa: A002 - Array API name
    _matrix("matrix_norm", x)
    return _ns(x).linalg.matrix_norm(x, keepdims=keepdims, ord=ord)


@RegisterGradient("MatrixNorm")
def _matrix_norm_grad(op, dy):
    # 'fro': x / |x|_F;  'nuc': U V^T;  2 / -2: u_1 v_1^T for the largest / smallest singular
    # value (Townsend 2016); 1 / -1 (inf / -inf): sign(x) on the column (row) of largest /
    # smallest absolute sum, split evenly among ties. Complex x: the same formulas are the
    # gradients dL/dRe + i dL/dIm (sign(z) = z / |z|) for 'fro' and the absolute sums, and
    # U V^H (u_1 v_1^H) for the SVD-based ords (ds_i = Re(u_i^H dA v_i), as svdvals)
    x = op.inputs[0]
    if x.size == 0:
        return zeros_like(x)
    order = op.attrs.get("ord", "fro")
    kept = x.shape[:-2] + (1, 1)
    dyk = reshape(dy, kept)
    if order in ("fro", None):
        yk = reshape(op.outputs[0], kept)
        return dyk * x / where(yk == 0.0, ones_like(yk), yk)  # y = 0 only at x = 0: gradient 0
    if order in ("nuc", 2, -2):
        u, _, vh = _svd(x, full_matrices=False)  # vh = V^H: U V^H, second order from Svd
        if order == 2:
            u, vh = u[..., :, :1], vh[..., :1, :]
        elif order == -2:
            u, vh = u[..., :, -1:], vh[..., -1:, :]
        return dyk * matmul(u, vh)
    along, across = (-2, -1) if order in (1, -1) else (-1, -2)  # summed axis, chosen axis
    sums = _sum(_abs(x), axis=along, keepdims=True)
    return dyk * _sign_on_extremes(x, sums, across, order > 0)


@RegisterJVP("MatrixNorm")
def _matrix_norm_jvp(op, t):
    # one number per matrix: d norm = <G, dA> with G the gradient at a unit cotangent (the
    # formulas above, so ties and zeros are treated as the gradient treats them)
    y = op.outputs[0]
    g = _matrix_norm_grad(op, ones_like(y))
    change = real(conj(g) * t) if g.dtype.kind == "c" else g * t
    return _sum(change, axis=(-2, -1), keepdims=op.attrs.get("keepdims", False))


def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002 - Array API name
    """Matrix norm of a matrix or stack (Array API ``linalg.matrix_norm``).

    x: ``(..., M, N)`` floating. ord: ``'fro'`` (default), ``'nuc'`` (sum of singular
    values), ``2`` / ``-2`` (largest / smallest singular value), ``1`` / ``-1`` (max / min
    absolute column sum), ``inf`` / ``-inf`` (max / min absolute row sum). Result: ``(...)``,
    or ``(..., 1, 1)`` with ``keepdims``; real dtype. Raises ``ValueError`` for another ord or
    a < 2-d input. Gradient: ``x / norm`` ('fro', 0 at x = 0), ``U V^T`` ('nuc'),
    ``u_i v_i^T`` (2, -2; Townsend 2016), ``sign(x)`` on the extreme column / row with ties
    split evenly (1, -1, inf, -inf); complex ``x``: the same with ``sign(z) = z / |z|``
    (TensorFlow's convention) for 'fro', 1, -1, inf and -inf, and ``U V^H`` / ``u_i v_i^H``
    for 'nuc', 2, -2 (``ds_i = Re(u_i^H dx v_i)``; their second order comes from ``svd``'s
    gradient).
    """
    if ord is None:
        ord = "fro"  # noqa: A001
    if ord not in _MATRIX_ORDS:
        raise ValueError(f"linalg.matrix_norm: ord must be one of 'fro', 'nuc', 1, -1, 2, -2, "
                         f"inf, -inf; got {ord!r} (use linalg.vector_norm for p-norms of the "
                         "entries)")
    return _matrix_norm(x, keepdims=keepdims, ord=ord)


@primitive("VectorNorm", samples=[
    Sample((5,)), Sample((3, 4), axis=1), Sample((2, 3, 4), axis=(0, 2), keepdims=True),
    Sample(()), Sample((3, 4), ord=1), Sample((3, 4), axis=0, ord=_INF),
    Sample((2, 3, 4), axis=(-1, -2), ord=-_INF), Sample((3, 4), ord=3),
    Sample(Arg((4,), (0.3, 2.0)), ord=0.5), Sample(Arg((2, 4), (-2.0, -0.3)), axis=-1, ord=-1.5),
    Sample((3, 4), ord=0), Sample((0, 3), axis=1), Sample((1, 1), axis=0, keepdims=True)])
def _vector_norm(x, *, axis=None, keepdims=False, ord=2):  # noqa: A002 - Array API name
    try:
        return _ns(x).linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
    except (ValueError, IndexError) as e:
        raise ValueError(f"linalg.vector_norm: cannot take the norm of an input of shape "
                         f"{_shape(x)} with axis={axis!r}, ord={ord!r}: {e}; axis must be "
                         "None or distinct axes of x, ord a number or +-inf") from e


@RegisterGradient("VectorNorm")
def _vector_norm_grad(op, dy):
    # d|x|_p / dx_i = sign(x_i) (|x_i| / |x|_p)^(p - 1) (Petersen & Pedersen, "The Matrix
    # Cookbook" for p = 2): x / |x| for p = 2, sign(x) for p = 1, sign(x) on the extreme
    # elements (ties split evenly) for +-inf, 0 for the count p = 0. Where the norm is 0
    # (x = 0) the gradient is 0 (a subgradient) for p > 0. Complex x: sign(z) = z / |z|, the
    # gradient dL/dRe + i dL/dIm of TensorFlow's convention.
    x = op.inputs[0]
    order = op.attrs.get("ord", 2)
    if x.size == 0 or order == 0:
        return zeros_like(x)
    axis = op.attrs.get("axis")
    kept = _kept_shape(x.shape, axis)
    dyk = reshape(dy, kept)
    if order == 1:
        return dyk * sign(x)
    if order in (_INF, -_INF):
        return dyk * _sign_on_extremes(x, _abs(x), axis, order > 0)
    yk = reshape(op.outputs[0], kept)
    safe = where(yk == 0.0, ones_like(yk), yk)
    if order == 2:
        return dyk * x / safe
    return dyk * sign(x) * (_abs(x) / safe) ** (order - 1.0)


@RegisterJVP("VectorNorm")
def _vector_norm_jvp(op, t):
    # a reduction: d norm = sum(G * dx) over its axes, G the gradient at a unit cotangent;
    # complex x: d norm = sum(Re(conj(G) dz)), G being dL/dRe + i dL/dIm
    y = op.outputs[0]
    g = _vector_norm_grad(op, ones_like(y))
    change = real(conj(g) * t) if g.dtype.kind == "c" else g * t
    return _sum(change, axis=op.attrs.get("axis"), keepdims=op.attrs.get("keepdims", False))


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002 - Array API name
    """Vector p-norm over ``axis`` (Array API ``linalg.vector_norm``).

    x: any shape, floating. axis: None (all elements), int or tuple of ints. ord: any real
    ``p`` (``sum(|x|^p)^(1/p)``), ``inf`` / ``-inf`` (max / min of ``|x|``), ``0`` (number of
    nonzero elements). Result: ``x.shape`` without ``axis`` (kept as size 1 with
    ``keepdims``), real dtype. Raises ``ValueError`` for a bad axis. Gradient:
    ``sign(x) (|x| / norm)^(p-1)`` (``x / norm`` for p = 2), ``sign(x)`` on the extreme
    elements with ties split evenly for +-inf, 0 for ord = 0. At ``x = 0`` the gradient is
    the subgradient 0 (p > 0); for p < 1 it is infinite at zero elements. Complex ``x``: the
    same with ``sign(z) = z / |z|`` (TensorFlow's convention), and the JVP
    ``sum(Re(conj(G) t))``.
    """
    if isinstance(axis, list):
        axis = tuple(axis)
    return _vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)


# --- matrix_power --------------------------------------------------------------------------------
def matrix_power(x, n, /):
    """``x`` to the integer power ``n`` (a stack of square matrices).

    x: ``(..., M, M)`` floating; n: int (0: identity, negative: powers of ``inv(x)``).
    Result: ``x``'s shape. Raises ``ValueError`` for a non-square input, ``TypeError`` for a
    non-integer ``n``. Computed by repeated squaring with ``matmul`` (and ``inv`` first for
    ``n < 0``), as NumPy does, so its gradient is that of those ops (Giles 2008);
    ``n = 0`` gives a constant (zero gradient).
    """
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"linalg.matrix_power: n must be an integer, got "
                        f"{type(n).__name__}") from None
    t = asarray(x)
    _square("matrix_power", t._value)
    if n == 0:
        return _const(t, lambda xp, dt: xp.broadcast_to(xp.eye(t.shape[-1], dtype=dt),
                                                        t.shape))
    if n < 0:
        t, n = inv(t), -n
    result = None
    while True:  # binary decomposition of n
        if n & 1:
            result = t if result is None else matmul(result, t)
        n >>= 1
        if not n:
            return result
        t = matmul(t, t)


# --- matrix_rank ---------------------------------------------------------------------------------
@primitive("MatrixRank")
def _matrix_rank(x, *, rtol=None):
    _matrix("matrix_rank", x)
    return _ns(x).linalg.matrix_rank(x, rtol=rtol)


no_gradient("MatrixRank")


def matrix_rank(x, /, *, rtol=None):
    """Rank (number of singular values ``> rtol * largest``) of a matrix or stack.

    x: ``(..., M, N)`` floating. rtol: float or array broadcasting against ``x.shape[:-2]``;
    default ``max(M, N) * eps``. Result: ``(...)``, default integer dtype. Raises
    ``ValueError`` for a < 2-d input. Not differentiable (an integer result).
    """
    return _matrix_rank(x, rtol=rtol._value if isinstance(rtol, Tensor) else rtol)


# --- outer, cross --------------------------------------------------------------------------------
@primitive("Outer", samples=[Sample((3,), (4,)), Sample((0,), (2,)), Sample((1,), (1,)),
                             Sample((2,), (0,))])
def _outer(x1, x2):
    if len(_shape(x1)) != 1 or len(_shape(x2)) != 1:
        raise ValueError(f"linalg.outer: x1 and x2 must be 1-d, got shapes {_shape(x1)} and "
                         f"{_shape(x2)}; use x1[..., :, None] * x2[..., None, :] for stacks")
    return _ns(x1, x2).linalg.outer(x1, x2)


@RegisterGradient("Outer")
@holomorphic  # complex: da = dy conj(b), db = dy^T conj(a)
def _outer_grad(op, dy):
    # y_ij = a_i b_j: da = dy b, db = dy^T a
    a, b = op.inputs
    return matmul(dy, b), matmul(a, dy)


RegisterJVP("Outer")(_bilinear_jvp)  # d(a b^T) = da b^T + a db^T


def outer(x1, x2, /):
    """Outer product of two vectors: ``(N,)`` and ``(M,)`` -> ``(N, M)``.

    Raises ``ValueError`` unless both are 1-d. Gradient: ``dx1 = dy @ x2``,
    ``dx2 = x1 @ dy`` (with ``conj(x2)``, ``conj(x1)`` for complex values, TensorFlow's
    convention); JVP ``outer(dx1, x2) + outer(x1, dx2)``.
    """
    return _outer(x1, x2)


@primitive("Cross", samples=[Sample((3,), (3,)), Sample((2, 3), (3,)), Sample((4, 1, 3), (2, 3)),
                             Sample((3, 2), (3, 2), axis=-2), Sample((2, 3, 4), (3, 1), axis=-2),
                             Sample((0, 3), (3,))])
def _cross(x1, x2, *, axis=-1):
    s1, s2 = _shape(x1), _shape(x2)
    if not (isinstance(axis, int) and -min(len(s1), len(s2)) <= axis <= -1):
        raise ValueError(f"linalg.cross: axis must be a negative int in [-N, -1] with N the "
                         f"smaller of the ranks of x1 {s1} and x2 {s2}; got {axis!r}")
    if s1[axis] != 3 or s2[axis] != 3:
        raise ValueError(f"linalg.cross: x1 {s1} and x2 {s2} must both have size 3 along axis "
                         f"{axis} (3-vectors)")
    try:
        return _ns(x1, x2).linalg.cross(x1, x2, axis=axis)
    except ValueError as e:
        raise ValueError(f"linalg.cross: shapes {s1} and {s2} do not broadcast: {e}") from e


@RegisterGradient("Cross")
@holomorphic  # complex: conj(b) x dy, dy x conj(a)
def _cross_grad(op, dy):
    # <dy, a x b> = <b x dy, a> = <dy x a, b> (scalar triple product); the tape sums these
    # output-shaped gradients over broadcast axes
    a, b = op.inputs
    axis = op.attrs.get("axis", -1)
    return _cross(b, dy, axis=axis), _cross(dy, a, axis=axis)


RegisterJVP("Cross")(_bilinear_jvp)  # d(a x b) = da x b + a x db


def cross(x1, x2, /, *, axis=-1):
    """Cross product of 3-vectors along ``axis``, broadcasting the other axes.

    x1, x2: size 3 along ``axis`` (a negative int, Array API 2023.12+). Result: the broadcast
    shape. Raises ``ValueError`` for a positive or out-of-range axis, a size other than 3, or
    shapes that do not broadcast. Gradient: ``dx1 = x2 x dy``, ``dx2 = dy x x1`` (scalar
    triple product), summed over broadcast axes (with ``conj(x2)``, ``conj(x1)`` for complex
    values, TensorFlow's convention); JVP ``dx1 x x2 + x1 x dx2``.
    """
    return _cross(x1, x2, axis=axis)


# --- trace, diagonal -----------------------------------------------------------------------------
@primitive("Trace", samples=[Sample((3, 3)), Sample((3, 4), offset=1),
                             Sample((2, 3, 4), offset=-1), Sample((2, 2), offset=3),
                             Sample((0, 0)), Sample((2, 0, 3)), Sample((1, 1))])
def _trace(x, *, offset=0, dtype=None):
    _matrix("trace", x)
    xp = _ns(x)
    return xp.linalg.trace(x, offset=offset, dtype=_xp_dtype(xp, dtype))


@RegisterGradient("Trace")
def _trace_grad(op, dy):
    # tr_k(A) = sum_i A_{i, i+k}: dA = dy on the k-th diagonal (a linear map)
    x = op.inputs[0]
    if dy.dtype != x.dtype:
        dy = astype(dy, x.dtype)
    m, n = x.shape[-2:]
    return _as_mat(dy) * _eye(x, m, n, k=op.attrs.get("offset", 0))


RegisterJVP("Trace")(linear_jvp)


def trace(x, /, *, offset=0, dtype=None):
    """Sum of the ``offset``-th diagonal of a matrix or stack.

    x: ``(..., M, N)`` numeric. offset: 0 main diagonal, > 0 above, < 0 below. dtype: of the
    result (default: ``x``'s, integer dtypes widened as by ``sum``). Result: ``(...)``.
    Raises ``ValueError`` for a < 2-d input. Gradient: ``dy`` placed on that diagonal.
    """
    return _trace(x, offset=offset, dtype=dtype)


@primitive("Diagonal", samples=[Sample((3, 3)), Sample((3, 4), offset=1),
                                Sample((2, 4, 3), offset=-1), Sample((3, 4), offset=-2),
                                Sample((4, 2), offset=1), Sample((2, 2), offset=3),
                                Sample((0, 2)), Sample((1, 1))])
def _diagonal(x, *, offset=0):
    _matrix("diagonal", x)
    return _ns(x).linalg.diagonal(x, offset=offset)


@RegisterGradient("Diagonal")
def _diagonal_grad(op, dy):
    # the cotangent placed back on the k-th diagonal: element l sits at (l, l + k) (k >= 0) or
    # (l - k, l) (k < 0), so dA = E_k * dy' broadcast along columns (rows), with dy' zero-padded
    # to M (N) entries
    x = op.inputs[0]
    k = op.attrs.get("offset", 0)
    m, n = x.shape[-2:]
    length = m if k >= 0 else n
    pad = length - dy.shape[-1]
    if pad:
        zeros = _const(dy, lambda xp, dt: xp.zeros(dy.shape[:-1] + (pad,), dtype=dt))
        dy = concat([dy, zeros], axis=-1)
    return expand_dims(dy, axis=-1 if k >= 0 else -2) * _eye(x, m, n, k=k)


RegisterJVP("Diagonal")(linear_jvp)


def diagonal(x, /, *, offset=0):
    """The ``offset``-th diagonal of a matrix or stack.

    x: ``(..., M, N)``. offset: 0 main diagonal, > 0 above, < 0 below. Result:
    ``(..., L)`` with ``L`` the diagonal's length (0 if ``offset`` is out of range), ``x``'s
    dtype. Raises ``ValueError`` for a < 2-d input. Gradient: ``dy`` placed back on that
    diagonal of zeros.
    """
    return _diagonal(x, offset=offset)


__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matrix_norm",
           "matrix_power", "matrix_rank", "outer", "pinv", "qr", "slogdet", "solve", "svd",
           "svdvals", "trace", "vector_norm", "EighResult", "QRResult", "SlogdetResult",
           "SVDResult"]
