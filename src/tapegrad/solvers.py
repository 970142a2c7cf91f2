"""Iterative linear solvers with implicit gradients: ``cg`` (and the machinery for more), with
current SciPy's arguments and ``(x, info)`` result, re-exported by ``tg.linalg``.

The iteration is a ``tg.lax.while_loop`` (one XLA loop inside ``tg.function``, a Python loop
eagerly) wrapped in ``tg.lax.custom_linear_solve``: the gradient is one more solve with the
transposed operator (the adjoint method), never a differentiation through the iterations.
"""
from __future__ import annotations

import numpy as np

from ._tensor import Tensor, convert_to_tensor
from .lax import custom_linear_solve, while_loop
from .ops import astype, matmul, maximum, sqrt, sum as _sum, where, zeros_like

__all__ = ["cg"]


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


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
    """Solve ``A x = b`` for a symmetric positive definite ``A`` by conjugate gradients
    (``scipy.sparse.linalg.cg``'s arguments and result).

    Args:
        A: an ``(n, n)`` matrix (Tensor or array) or a function ``v -> A v`` of an ``(n,)``
            Tensor (matrix-free operators: a stencil, an FFT); it may read tensors and
            Variables, which get gradients.
        b: the ``(n,)`` floating right-hand side.
        x0: the starting guess (default zeros).
        rtol, atol: stop when ``||r|| <= max(rtol * ||b||, atol)``.
        maxiter: at most this many iterations (default ``10 n``).
        M: a preconditioner approximating ``A^{-1}``: a matrix or a function.
        callback: not supported (``ValueError``): a compiled loop cannot call back per step.

    Returns ``(x, info)``: ``x`` of ``b``'s shape and dtype, ``info`` a 0-d int Tensor, 0 on
    convergence and otherwise the number of iterations run (as SciPy). Gradients with respect
    to ``b`` and ``A``'s parameters are implicit (``tg.lax.custom_linear_solve`` with
    ``symmetric=True``): one CG solve with ``A`` again (Hestenes & Stiefel 1952 for the
    iteration; the adjoint ``b_bar = A^{-1} x_bar``, ``A_bar = -b_bar x^T``). ``x0`` gets no
    gradient. Raises ``ValueError`` for a non-square matrix or a callback.
    """
    if callback is not None:
        raise ValueError("tg.linalg.cg: callback is not supported; the iteration is one "
                         "compiled loop. Run scipy.sparse.linalg.cg eagerly to watch each step")
    b = b if isinstance(b, Tensor) else convert_to_tensor(b)
    matvec = _operator(A, "tg.linalg.cg")
    precond = (lambda v: v) if M is None else _operator(M, "tg.linalg.cg: M")
    n = int(b.shape[0])
    limit = 10 * n if maxiter is None else int(maxiter)
    start = zeros_like(b) if x0 is None else astype(convert_to_tensor(x0), b.dtype)

    def solve(op, rhs):
        tol = maximum(rtol * sqrt(_dot(rhs, rhs)), atol)
        r = rhs - op(start)
        z = precond(r)
        init = (start, r, z, _dot(r, z), convert_to_tensor(np.int32(0)))

        def go(c):
            return (sqrt(_dot(c[1], c[1])) > tol) & (c[4] < limit)

        def step(c):
            x, r, p, rz, k = c
            ap = op(p)
            alpha = rz / _dot(p, ap)
            x = x + alpha * p
            r = r - alpha * ap
            z = precond(r)
            rz_new = _dot(r, z)
            return x, r, z + (rz_new / rz) * p, rz_new, k + 1

        x, r, _, _, k = while_loop(go, step, init)
        info = where(sqrt(_dot(r, r)) > tol, k, 0)
        return x, info

    return custom_linear_solve(matvec, b, solve, symmetric=True, has_aux=True)
