"""Iterative linear solvers with implicit gradients: ``cg`` and ``gmres``, with current
SciPy's arguments and ``(x, info)`` result, re-exported by ``tg.linalg``.

Each iteration is ``tg.lax`` control flow (one XLA loop inside ``tg.function``, a Python loop
eagerly) wrapped in ``tg.lax.custom_linear_solve``: the gradient is one more solve with the
transposed operator (the adjoint method), never a differentiation through the iterations.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

from . import _backend, config
from . import control_flow as _cf
from .errors import ConvergenceError, ConvergenceWarning
from ._tensor import Tensor
from .ops.creation import convert_to_tensor
from .lax import cond, custom_linear_solve, while_loop
from .ops import (abs as _abs, arange, asarray, astype, expand_dims, eye, finfo, logical_not,
                  matmul, matrix_transpose, maximum, minimum, ones, ones_like, sqrt,
                  sum as _sum, where, zeros_like)
from .ops import conj, real, result_type
from .ops import max as _max
from .ops.linalg_ext import solve as _dense_solve

__all__ = ["cg", "gmres"]

_SQRT2 = float(np.sqrt(2.0))


def _operator(A, where_):
    """``A`` as a function of a vector: a matrix (Tensor or array) or a callable."""
    if callable(A) and not isinstance(A, Tensor):
        return A
    a = A if isinstance(A, Tensor) else convert_to_tensor(A)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{where_}: A must be a square matrix or a function, got shape "
                         f"{tuple(a.shape)}")
    return lambda v: matmul(a, v)


def _dot(u, v):
    return _sum(u * v)


def _is_complex(u):
    return _backend.np_dtype(u.dtype).kind == "c"


def _promoted(b, *operators):
    """``b`` cast to the result dtype of it and the matrices among ``operators`` (``A`` and
    ``M``; functions are skipped), as SciPy's solvers take a real ``b`` with a complex ``A``."""
    matrices = [o if isinstance(o, Tensor) else convert_to_tensor(o) for o in operators
                if o is not None and not callable(o) or isinstance(o, Tensor)]
    dtype = result_type(b, *matrices)
    return b if dtype == b.dtype else astype(b, dtype)


def _inner(u, v):
    """``u^H v``: the inner product of complex vectors (``u^T v`` for real ones)."""
    return _dot(conj(u), v) if _is_complex(u) else _dot(u, v)


def _squared(u):
    """``||u||^2`` (``|u|^2`` of a 0-d ``u``), real for a complex ``u`` too."""
    return real(_inner(u, u)) if _is_complex(u) else _dot(u, u)


def _norm(u):
    """``||u||``, real for a complex ``u`` too."""
    return sqrt(_squared(u))


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       adjoint_rtol=None, adjoint_atol=None, adjoint_maxiter=None, adjoint_on_failure="warn"):
    """Solve ``A x = b`` for a symmetric (complex: Hermitian) positive definite ``A`` by
    conjugate gradients (``scipy.sparse.linalg.cg``'s arguments and result).

    Args:
        A: an ``(n, n)`` matrix (Tensor or array) or a function ``v -> A v`` of an ``(n,)``
            Tensor (matrix-free operators: a stencil, an FFT); it may read tensors and
            Variables, which get gradients.
        b: the ``(n,)`` floating right-hand side, real or complex (inner products are then
            ``u^H v``, as SciPy's and JAX's); cast to the result dtype of it and a matrix
            ``A`` or ``M`` (a function must return ``b``'s dtype); ``x`` has that dtype.
        x0: the starting guess (default zeros).
        rtol, atol: stop when ``||r|| <= max(rtol * ||b||, atol)``.
        maxiter: at most this many iterations (default ``10 n``).
        M: a preconditioner approximating ``A^{-1}``: a matrix or a function (symmetric or
            Hermitian positive definite, as ``A``).
        callback: not supported (``ValueError``): a compiled loop cannot call back per step.
        adjoint_rtol, adjoint_atol, adjoint_maxiter: the tolerances and iteration limit of
            the gradient's solve (default: the forward's).
        adjoint_on_failure: what a gradient's solve that ends above its tolerance (or with a
            NaN residual) does: ``"warn"`` (default), ``"raise"`` or ``"ignore"`` (see
            :func:`_check_adjoint`).

    Returns ``(x, info)``: ``x`` of ``b``'s shape and dtype, ``info`` a 0-d int Tensor, 0 on
    convergence and otherwise the number of iterations run (as SciPy). Gradients with respect
    to ``b`` and ``A``'s parameters are implicit (``tg.lax.custom_linear_solve`` with
    ``symmetric=True``): one CG solve with ``A`` again (Hestenes & Stiefel 1952 for the
    iteration; the adjoint ``b_bar = A^{-1} x_bar``, ``A_bar = -b_bar x^T``), started from zeros,
    on the cotangent divided by its largest magnitude and scaled back (:func:`_rescaled`), so
    a tiny cotangent does not underflow. ``x0`` gets no gradient. Raises ``ValueError`` for a
    non-square matrix, a callback or an unknown ``adjoint_on_failure``; a gradient's solve
    that fails warns :class:`~tapegrad.errors.ConvergenceWarning` or raises
    :class:`~tapegrad.errors.ConvergenceError`.
    """
    if callback is not None:
        raise ValueError("tg.linalg.cg: callback is not supported; the iteration is one "
                         "compiled loop. Run scipy.sparse.linalg.cg eagerly to watch each step")
    b = _promoted(convert_to_tensor(b), A, M)
    matvec = _operator(A, "tg.linalg.cg")
    precond = (lambda v: v) if M is None else _operator(M, "tg.linalg.cg: M")
    n = int(b.shape[0])
    limit = 10 * n if maxiter is None else int(maxiter)
    start = zeros_like(b) if x0 is None else astype(convert_to_tensor(x0), b.dtype)

    def solve(op, rhs, start=start, rtol=rtol, atol=atol, limit=limit):
        """``(x, info, ||r||, tolerance)``."""
        tol2 = maximum(rtol * rtol * _squared(rhs), atol * atol)  # squared norms compared
        r = rhs - op(start)
        z = precond(r)
        init = (start, r, z, _inner(r, z), convert_to_tensor(np.int32(0)))

        def go(c):  # without M, r.z is r.r: no second reduction per step (as JAX's cg)
            rr = real(c[3]) if M is None else _squared(c[1])
            return (rr > tol2) & (c[4] < limit)

        def step(c):
            x, r, p, rz, k = c
            ap = op(p)
            alpha = rz / _inner(p, ap)
            x = x + alpha * p
            r = r - alpha * ap
            z = precond(r)
            rz_new = _inner(r, z)
            return x, r, z + (rz_new / rz) * p, rz_new, k + 1

        x, r, _, _, k = while_loop(go, step, init)
        rr = _squared(r)
        return x, where(rr > tol2, k, 0), sqrt(rr), sqrt(tol2)

    adjoint = _adjoint_options("tg.linalg.cg", rtol, atol, limit, adjoint_rtol, adjoint_atol,
                               adjoint_maxiter, adjoint_on_failure)

    def adjoint_solve(op, rhs):  # from zeros, not x0: x0 guesses x, not the adjoint
        return _check_adjoint(*_rescaled(lambda rhs, atol: solve(
            op, rhs, zeros_like(rhs), adjoint[0], atol, adjoint[2]), rhs, adjoint[1]),
            adjoint, "tg.linalg.cg", "iterations")

    return custom_linear_solve(matvec, b, lambda op, rhs: solve(op, rhs)[:2], adjoint_solve,
                               symmetric=True, has_aux=True)


_ON_FAILURE = ("warn", "raise", "ignore")


def _adjoint_options(where_, rtol, atol, limit, adjoint_rtol, adjoint_atol, adjoint_maxiter,
                     adjoint_on_failure):
    """``(rtol, atol, iteration limit, on_failure)`` of a gradient's solve: the ``adjoint_``
    ones given, else the forward's. Raises ``ValueError`` for an unknown ``on_failure``."""
    if adjoint_on_failure not in _ON_FAILURE:
        raise ValueError(f"{where_}: adjoint_on_failure must be one of "
                         f"{', '.join(map(repr, _ON_FAILURE))} (as numpy.errstate's), got "
                         f"{adjoint_on_failure!r}")
    return (rtol if adjoint_rtol is None else adjoint_rtol,
            atol if adjoint_atol is None else adjoint_atol,
            limit if adjoint_maxiter is None else int(adjoint_maxiter), adjoint_on_failure)


def _rescaled(solve, rhs, atol):
    """``solve(rhs / s, atol / s)`` scaled back by ``s``, the largest ``|rhs_i|`` (1 if ``rhs``
    is zero): ``solve`` returns ``(x, info, ||r||, tolerance)`` and so does this, ``x``, the
    residual norm and the tolerance times ``s``. The solve of a linear system is homogeneous,
    but its inner products are not safe at any scale: a float32 cotangent of 1e-20 has ``r.r``
    below the smallest float32 and CG's step ``r.z / p.Ap`` becomes 0/0 (jax#40254); the
    absolute tolerance stays the caller's, in the caller's units."""
    s = _max(_abs(rhs))
    s = where(s > 0, s, ones_like(s))
    x, info, rnorm, tol = solve(rhs / s, atol / s)
    return x * s, info, rnorm * s, tol * s


def _check_adjoint(x, info, rnorm, tol, options, where_, unit):
    """``(x, info)`` of a gradient's solve, after acting on its failure (a residual norm
    ``rnorm`` not at most the tolerance ``tol``: above it, or NaN) as ``options[3]`` says: ``"warn"``
    (:class:`~tapegrad.errors.ConvergenceWarning`), ``"raise"``
    (:class:`~tapegrad.errors.ConvergenceError`) or ``"ignore"``. Eagerly the check reads the
    values; inside ``tg.function`` it is a host callback (``jax.debug.callback``) that the
    program makes only when the solve failed, whose error ``tg.function`` raises as
    ``ConvergenceError`` when the result is read."""
    if options[3] != "ignore":
        check = functools.partial(_adjoint_failed, where_, options, unit)
        values = [t._value for t in (rnorm, tol)]
        jax = config.loaded_jax()
        if jax is not None and any(isinstance(v, jax.core.Tracer) for v in values):
            # the host is called only on a failure: a callback on every call cost 1.5-2 ms
            # per solve (bench_cg.py: 1.45-1.54x jax.jit, against 0.96-0.98 without)
            failed = jax.numpy.logical_not(jax.numpy.all(values[0] <= values[1]))
            jax.lax.cond(failed, lambda r, t: jax.debug.callback(check, r, t),
                         lambda r, t: None, *values)
        else:
            check(*values)
    return x, info


def _adjoint_failed(where_, options, unit, rnorm, tol):
    rnorm, tol = _backend.to_numpy(rnorm), _backend.to_numpy(tol)
    if np.all(rnorm <= tol):
        return
    message = (f"{where_}: the adjoint solve (of the gradient, A^T u = cotangent; A^H "
               f"for complex A) did not converge: residual norm {np.max(rnorm):.3g} > tolerance {np.min(tol):.3g} "
               f"(max(adjoint_rtol * ||cotangent||, adjoint_atol)) after adjoint_maxiter="
               f"{options[2]} {unit}, so the gradient is inaccurate. Raise adjoint_maxiter, "
               "loosen adjoint_rtol or adjoint_atol, or pass a better preconditioner M; "
               "adjoint_on_failure='ignore' silences this, 'raise' makes it an error")
    if options[3] == "raise":
        raise ConvergenceError(message)
    warnings.warn(message, ConvergenceWarning, stacklevel=2)


def _vector(b, where_):
    b = convert_to_tensor(b)
    if b.ndim != 1:
        raise ValueError(f"{where_}: b must be a vector of shape (n,), got shape "
                         f"{tuple(b.shape)}")
    return b


def _check_size(A, n, where_, name):
    """A matrix given for ``A`` (or ``M``) must be ``n x n`` for ``n`` unknowns."""
    if callable(A) and not isinstance(A, Tensor):
        return
    shape = tuple(A.shape) if hasattr(A, "shape") else np.shape(A)
    if shape[0] != n:
        raise ValueError(f"{where_}: {name} is {shape[0]} x {shape[1]} but b has {n} entries")


def _transposed(M, like):
    """The adjoint of the operator ``M``: ``M^T``, or ``M^H`` for a complex one (the operator
    a gradient's solve with ``A^H`` is preconditioned by): of a matrix directly, of a linear
    function by one reverse pass through it (whose VJP is ``M^H`` in tapegrad's convention,
    docs/architecture.md, "Complex numbers")."""
    if callable(M) and not isinstance(M, Tensor):
        return _cf._transpose(M, like)
    mt = matrix_transpose(M if isinstance(M, Tensor) else convert_to_tensor(M))
    mt = conj(mt) if _is_complex(mt) else mt
    return lambda v: matmul(mt, v)


def _with_row(V, k, v):
    """``V`` with row ``k`` (a 0-d int Tensor) replaced by ``v``: a new Tensor (compiled, XLA
    updates the loop's buffer in place)."""
    out = asarray(V, copy=True)
    out[k] = v
    return out


def _gmres(op, pre, rhs, start, rtol, atol, m, limit):
    """Restarted GMRES with left preconditioning: SciPy's iteration, its inner tolerance
    control included; returns ``(x, info)``.

    Every shape is fixed, so that the loops compile: the Krylov basis ``V`` is ``(m + 1, n)``
    with zero rows not yet reached; the Givens rotations applied so far are accumulated in one
    orthogonal ``(m + 1, m + 1)`` matrix ``Q`` (applying them all to a new Hessenberg column is
    one product, and ``|beta Q[k+1, 0]|`` is the least-squares residual after step ``k``); the
    triangular factor ``R`` is the identity in the columns not reached, so one ``(m, m)`` solve
    gives ``y`` with zeros there. Complex: inner products ``u^H v`` and complex Givens
    rotations ``[[conj(c), conj(s)], [-s, c]]`` with ``c = a / r``, ``s = b / r``,
    ``r = sqrt(|a|^2 + |b|^2)``, which take ``(a, b)`` to ``(r, 0)``; norms and tolerances real. Returns ``(x, info, ||rhs - op(x)||, tolerance)``."""
    dtype = rhs.dtype
    cj = conj if _is_complex(rhs) else (lambda z: z)
    eps = float(finfo(dtype).eps)
    rows = arange(m + 1)
    cols = arange(m)
    first = astype(rows == 0, dtype)
    bnrm = _norm(rhs)
    tol = maximum(rtol * bnrm, atol)
    ptol = _norm(pre(rhs)) * minimum(tol / where(bnrm > 0, bnrm, 1.0), 1.0)
    r = rhs - op(start)
    zero = convert_to_tensor(np.int32(0))

    def project(w, V, h):
        """``w`` less its components along ``V``'s rows (classical Gram-Schmidt, two products);
        their coefficients are added to ``h``."""
        c = matmul(cj(V), w)
        return w - matmul(c, V), h + c

    def arnoldi(s):
        """Step ``k`` of the Arnoldi process, its Hessenberg column reduced to ``R``'s by the
        rotations so far and a new one (SciPy's loop body)."""
        V, Q, R, keep, k, beta, _, _ = s
        ek, ek1 = astype(rows == k, dtype), astype(rows == k + 1, dtype)
        w = pre(op(V[k]))
        h0 = _norm(w)
        w, h = project(w, V, zeros_like(first))
        # once more where the first pass cancelled much, ||w|| < ||w_0|| / sqrt(2) (Daniel,
        # Gragg, Kaufman & Stewart 1976; "twice is enough"), as SciPy's modified Gram-Schmidt
        # is about as accurate as two classical passes
        w, h = cond(_norm(w) * _SQRT2 < h0, lambda w, h: project(w, V, h),
                    lambda w, h: (w, h), w, h)
        h1 = _norm(w)
        brk = h1 <= eps * h0  # an invariant subspace: the exact solution is in reach
        V = _with_row(V, k + 1, where(brk, 0.0, w / where(brk, 1.0, h1)))
        col = matmul(Q, h + ek1 * where(brk, 0.0, h1))
        a, c = _dot(col, ek), _dot(col, ek1)
        mag = sqrt(_squared(a) + _squared(c))
        dead = mag == 0  # a singular column: SciPy's pseudo-solve drops its component
        mag = where(dead, 1.0, mag)
        cs, sn = where(dead, 1.0, a / mag), where(dead, 0.0, c / mag)
        qk, qk1 = matmul(ek, Q), matmul(ek1, Q)
        Q = (Q + expand_dims(ek, axis=1) * (cj(cs) * qk + cj(sn) * qk1 - qk)
             + expand_dims(ek1, axis=1) * (cs * qk1 - sn * qk - qk1))
        R = where(cols == k, expand_dims(col + ek * (mag - a) - ek1 * c, axis=1), R)
        keep = keep * (1.0 - ek * astype(dead, dtype))
        presid = _abs(beta * _dot(matmul(ek1, Q), first))
        return V, Q, R, keep, k + 1, beta, presid, brk

    def cycle(state):
        x, r, _, it, ptol, factor, _ = state
        z = pre(r)
        beta = _norm(z)
        V = expand_dims(first, axis=1) * (z / where(beta > 0, beta, 1.0))
        inner = (V, eye(m + 1, dtype=dtype), eye(m + 1, m, dtype=dtype),
                 ones(m + 1, dtype=dtype), zero, beta, beta, convert_to_tensor(False))

        def go(s):  # SciPy's inner loop runs at least once
            k, presid, brk = s[4], s[6], s[7]
            return (k == 0) | ((k < m) & (presid > ptol) & logical_not(brk))

        V, Q, R, keep, k, _, presid, brk = while_loop(go, arnoldi, inner)
        g = beta * matmul(Q, first) * keep * astype(rows < k, dtype)
        x = x + matmul(_dense_solve(R[:m], g[:m]), V[:m])
        r = rhs - op(x)
        rn = _norm(r)
        factor = where(presid <= ptol, maximum(0.25 * factor, eps), minimum(1.5 * factor, 1.0))
        ptol = presid * minimum(tol / where(rn > 0, rn, 1.0), factor)
        return x, r, rn, it + 1, ptol, factor, brk

    def more(state):
        return (state[2] > tol) & (state[3] < limit) & logical_not(state[6]) & (bnrm > 0)

    init = (start, r, _norm(r), zero, ptol, real(ones((), dtype=dtype)), convert_to_tensor(False))
    x, _, rn, _, _, _, _ = while_loop(more, cycle, init)
    done = (rn <= tol) | (bnrm == 0)
    return (where(bnrm > 0, x, 0.0), where(done, zero, convert_to_tensor(np.int32(limit))), rn,
            tol)


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
          callback=None, callback_type=None, adjoint_rtol=None, adjoint_atol=None,
          adjoint_maxiter=None, adjoint_on_failure="warn"):
    """Solve ``A x = b`` for a general (non-symmetric) ``A`` by restarted GMRES
    (``scipy.sparse.linalg.gmres``'s arguments and result).

    Args:
        A: an ``(n, n)`` matrix (Tensor or array) or a function ``v -> A v`` of an ``(n,)``
            Tensor; it may read tensors and Variables, which get gradients.
        b: the ``(n,)`` floating right-hand side, real or complex (inner products are then
            ``u^H v``, as SciPy's and JAX's); cast to the result dtype of it and a matrix
            ``A`` or ``M`` (a function must return ``b``'s dtype); ``x`` has that dtype.
        x0: the starting guess (default zeros).
        rtol, atol: stop when ``||b - A x|| <= max(rtol * ||b||, atol)``.
        restart: the Krylov dimension built between restarts (default ``min(20, n)``).
        maxiter: at most this many restart cycles (default ``10 n``), as SciPy counts them.
        M: a preconditioner approximating ``A^{-1}`` (a matrix or a function), applied on the
            left as SciPy does: the inner loop minimises ``||M (b - A x)||``, the final test
            is on ``b - A x``.
        callback, callback_type: not supported (``ValueError``): a compiled loop cannot call
            back per step.
        adjoint_rtol, adjoint_atol, adjoint_maxiter: the tolerances and restart-cycle limit
            of the gradient's solve (default: the forward's).
        adjoint_on_failure: what a gradient's solve that ends above its tolerance (or with a
            NaN residual) does: ``"warn"`` (default), ``"raise"`` or ``"ignore"``, as
            :func:`cg`'s.

    Returns ``(x, info)``: ``x`` of ``b``'s shape and dtype, ``info`` a 0-d int32 Tensor, 0 on
    convergence and otherwise ``maxiter`` (as SciPy, also when a breakdown stopped it
    earlier). The iteration is SciPy's (Saad & Schultz 1986, "GMRES: a generalized minimal
    residual algorithm for solving nonsymmetric linear systems"), its inner-loop tolerance
    control included, with two passes of classical Gram-Schmidt instead of modified
    Gram-Schmidt; it is a ``tg.lax.while_loop`` of restart cycles around a ``while_loop`` of
    Arnoldi steps on fixed-size arrays, so inside ``tg.function`` it is one XLA loop.

    Gradients with respect to ``b`` and ``A``'s parameters are implicit
    (``tg.lax.custom_linear_solve``): one GMRES solve with the transposed operator, ``A^T``
    (a matrix's transpose, or one reverse pass through the function; ``A^H`` for complex
    ones) preconditioned by ``M^T`` (``M^H``), from zeros, on the cotangent divided by its
    largest magnitude and scaled back (a tiny cotangent does not underflow); the adjoint
    ``b_bar = A^{-T} x_bar``, ``A_bar = -b_bar x^T`` (complex: ``A^{-H} x_bar`` and
    ``-b_bar x^H``, the conjugate of JAX's gradient, as docs/architecture.md's "Complex
    numbers" defines it). They are as accurate as that solve, so use a small ``rtol`` (or
    ``adjoint_rtol``). ``x0`` gets no gradient.

    Raises ``ValueError`` for a callback, an unknown ``callback_type`` or
    ``adjoint_on_failure``, a ``b`` that is not a vector, a non-square ``A`` or ``M``, or one
    whose size is not ``b``'s; a gradient's solve that fails warns
    :class:`~tapegrad.errors.ConvergenceWarning` or raises
    :class:`~tapegrad.errors.ConvergenceError`.
    """
    where_ = "tg.linalg.gmres"
    if callback is not None:
        raise ValueError(f"{where_}: callback is not supported; the iteration is one compiled "
                         "loop. Run scipy.sparse.linalg.gmres eagerly to watch each step")
    if callback_type not in (None, "x", "pr_norm", "legacy"):
        raise ValueError(f"{where_}: unknown callback_type {callback_type!r} (SciPy's are "
                         "'x', 'pr_norm' and 'legacy'; none is supported here)")
    b = _vector(b, where_)
    b = _promoted(b, A, M)
    n = int(b.shape[0])
    matvec = _operator(A, where_)
    _check_size(A, n, where_, "A")
    if M is None:
        precond = precond_t = (lambda v: v)
    else:
        precond = _operator(M, f"{where_}: M")
        _check_size(M, n, where_, "M")
        precond_t = _transposed(M, b)
    m = min(20 if restart is None else int(restart), n)
    if m < 1:
        raise ValueError(f"{where_}: restart must be at least 1, got {restart}")
    limit = 10 * n if maxiter is None else int(maxiter)
    start = zeros_like(b) if x0 is None else astype(convert_to_tensor(x0), b.dtype)
    if tuple(start.shape) != (n,):
        raise ValueError(f"{where_}: x0 has shape {tuple(start.shape)} but b has ({n},)")

    def solve(op, rhs):
        return _gmres(op, precond, rhs, start, rtol, atol, m, limit)[:2]

    adjoint = _adjoint_options(where_, rtol, atol, limit, adjoint_rtol, adjoint_atol,
                               adjoint_maxiter, adjoint_on_failure)

    def transpose_solve(op, rhs):
        return _check_adjoint(*_rescaled(lambda rhs, atol: _gmres(
            op, precond_t, rhs, zeros_like(rhs), adjoint[0], atol, m, adjoint[2]),
            rhs, adjoint[1]), adjoint, where_, "restart cycles")

    return custom_linear_solve(matvec, b, solve, transpose_solve, has_aux=True)
