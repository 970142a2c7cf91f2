"""``tg.lax``: JAX's carry-style control flow, on tapegrad's implementation
(:mod:`tapegrad.control_flow`): eagerly Python loops that tapes record, inside ``tg.function``
one XLA control-flow op, differentiable in both modes to any order.

``scan``, ``fori_loop``, ``while_loop``, ``cond``, ``switch`` and ``map`` have the signatures
and semantics of their ``jax.lax`` namesakes; carries, operands and results are pytrees
(tuples, lists, dicts; ``None`` an empty subtree) of Tensors, arrays or Python numbers.
"""
from __future__ import annotations

import builtins

import numpy as np

from . import control_flow as _cf
from ._pytree import tree_flatten, tree_unflatten
from ._tensor import Tensor
from .custom_gradient import custom_gradient
from .ops import arange, astype, where, zeros_like

__all__ = ["scan", "fori_loop", "while_loop", "cond", "switch", "map", "custom_linear_solve"]


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs`` (``jax.lax.scan``).

    Args:
        f: ``f(carry, x) -> (carry, y)``; the carry keeps its structure, shapes and dtypes.
        init: the initial carry (a pytree).
        xs: a pytree of arrays of one leading size ``n`` (or ``None``, with ``length``).
        length: ``n`` when ``xs`` is ``None`` (or a check of it).
        reverse: run from the last slice to the first (``ys`` stay in ``xs``' order).
        unroll: passed to ``jax.lax.scan`` when compiled.

    Returns ``(carry, ys)``: the final carry and the ``y`` of every step stacked on a new
    leading axis of size ``n``. Compiled, the reverse pass recomputes each step from the carry
    that entered it (only the carries are kept, as ``jax.checkpoint`` of the step keeps).
    Raises ``ValueError`` for arrays of different leading sizes (naming them) or nothing to
    scan over; ``TypeError`` when ``f`` does not return a pair or changes the carry's
    structure, shape or dtype (naming the carry leaf and both shapes).
    """
    return _cf._scan("tg.lax.scan", f, init, xs, length, reverse, unroll)


def _concrete_int(x):
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, Tensor) and not _cf._compiled([x]) and x.ndim == 0:
        return int(x)
    return None


def fori_loop(lower, upper, body_fun, init_val):
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)`` (``jax.lax.fori_loop``).

    ``i`` is a 0-d int32 Tensor. With Python-int bounds the loop is a :func:`scan` (reverse
    mode works, compiled too); with traced bounds a :func:`while_loop` (forward mode only when
    compiled). Returns the final ``val``. Errors as :func:`scan` and :func:`while_loop`.
    """
    lo, hi = _concrete_int(lower), _concrete_int(upper)
    if lo is not None and hi is not None:
        steps = arange(lo, builtins.max(lo, hi), dtype=np.int32)
        return _cf._scan("tg.lax.fori_loop", lambda v, i: (body_fun(i, v), None), init_val,
                         steps, None, False, 1)[0]
    i0 = astype(_cf._tensor(lower), np.int32)
    out = _cf._while("tg.lax.fori_loop", lambda c: c[0] < upper,
                     lambda c: (c[0] + 1, body_fun(c[0], c[1])), (i0, init_val), None,
                     "(i, init_val)")
    return out[1]


def while_loop(cond_fun, body_fun, init_val):
    """``val = body_fun(val)`` while ``cond_fun(val)`` (``jax.lax.while_loop``).

    ``cond_fun`` returns a scalar bool; ``body_fun`` the carry in the same structure, shapes
    and dtypes. Returns the final carry. Compiled, forward mode works and reverse mode raises
    ``ValueError`` (as in JAX; ``tg.while_loop(maximum_iterations=...)`` is reverse
    differentiable). Errors as :func:`tapegrad.while_loop`.
    """
    return _cf._while("tg.lax.while_loop", cond_fun, body_fun, init_val, None, "init_val")


def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)`` (``jax.lax.cond``).

    ``pred``: a scalar bool or integer (non-zero is true). Both branches return the same
    structure, shapes and dtypes when compiled. Differentiable in both modes with respect to
    the operands and the tensors the branches use. Raises ``TypeError`` for a non-scalar
    predicate and for branches that disagree.
    """
    p = _cf._tensor(pred)
    if p.ndim != 0:
        raise TypeError(f"tg.lax.cond: the predicate must be a scalar, got shape "
                        f"{tuple(p.shape)}")
    _cf._check_callables("tg.lax.cond", [true_fun, false_fun], ["true_fun", "false_fun"])
    index = astype(p != 0, np.int32)
    if not _cf._compiled([index, *tree_flatten(operands)[0]]):
        return (true_fun if bool(p != 0) else false_fun)(*operands)
    return _cf._switch("tg.lax.cond", index, [false_fun, true_fun], operands,
                       ["false_fun", "true_fun"])


def switch(index, branches, *operands):
    """``branches[index](*operands)``, ``index`` clamped to ``[0, len(branches) - 1]``
    (``jax.lax.switch``). Errors and gradients as :func:`cond`."""
    branches = list(branches)
    if not branches:
        raise ValueError("tg.lax.switch: branches is empty; give at least one branch")
    i = _cf._tensor(index)
    if i.ndim != 0 or _cf._spec(i)[1].kind not in "iu":
        raise TypeError(f"tg.lax.switch: index must be a scalar integer, got one of "
                        f"{_cf._describe(_cf._spec(i))}")
    names = [f"branches[{k}]" for k in range(len(branches))]
    _cf._check_callables("tg.lax.switch", branches, names)
    n = len(branches) - 1
    i = astype(i, np.int32)
    i = where(i < 0, 0, where(i > n, n, i))
    return _cf._switch("tg.lax.switch", i, branches, operands, names)


def map(f, xs):  # noqa: A001 - JAX's name
    """``f`` applied to each slice of ``xs`` along its leading axis, stacked
    (``jax.lax.map``): ``scan`` with no carry. Errors as :func:`scan`."""
    return _cf._scan("tg.lax.map", lambda c, x: (c, f(x)), (), xs, None, False, 1)[1]


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False,
                        has_aux=False):
    """The solution ``x`` of ``matvec(x) = b`` found by ``solve(matvec, b)``, differentiated
    implicitly (``jax.lax.custom_linear_solve``): the solver's iterations are never
    differentiated.

    Args:
        matvec: a linear function from pytrees shaped like ``b`` to the same; it may read
            tensors and Variables (the operator's parameters), which receive gradients.
        b: a pytree of floating Tensors (the right-hand side).
        solve: ``solve(matvec, b) -> x`` (or ``(x, aux)`` with ``has_aux``).
        transpose_solve: ``transpose_solve(vecmat, b) -> x`` solving the transposed system;
            not needed when ``symmetric``.
        symmetric: ``matvec`` is symmetric, so ``solve`` solves the transposed system too.
        has_aux: ``solve`` returns ``(x, aux)``; then ``(x, aux)`` is returned, ``aux``
            without gradient.

    Gradient (the adjoint method): with ``u = A^{-T} x_bar`` (one transposed solve, itself a
    ``custom_linear_solve``, so second order works), ``b_bar = u`` and each parameter
    ``theta`` of ``matvec`` gets ``-(d(A x)/d theta)^T u``, since ``A x = b`` gives
    ``A dx = db - dA x``. Forward mode: the transposed VJP of that rule. Raises ``ValueError``
    when neither ``symmetric`` nor ``transpose_solve`` says how to solve the transposed system.
    """
    if transpose_solve is None and not symmetric:
        raise ValueError("tg.lax.custom_linear_solve: give transpose_solve, or symmetric=True "
                         "if matvec is symmetric; the gradient solves the transposed system")
    leaves, structure = tree_flatten(b)
    leaves = [_cf._tensor(x) for x in leaves]
    n = len(leaves)
    params = _cf._reads(matvec, tree_unflatten(structure, leaves))
    vecmat = matvec if symmetric else _cf._transpose(matvec, tree_unflatten(structure, leaves))
    t_solve = solve if symmetric else transpose_solve

    aux_structure = {}

    def run(*args):
        out = solve(matvec, tree_unflatten(structure, list(args[:n])))
        x, aux = out if has_aux else (out, None)
        x_leaves = [_cf._tensor(a) for a in tree_flatten(x)[0]]
        aux_leaves, aux_structure["s"] = tree_flatten(aux)
        aux_leaves = [_cf._tensor(a) for a in aux_leaves]

        def grad_fn(*dys, variables=()):
            cts = [d if d is not None else zeros_like(x) for d, x in zip(dys, x_leaves)]
            u = custom_linear_solve(vecmat, tree_unflatten(structure, cts), t_solve, solve,
                                    symmetric)
            u_leaves = tree_flatten(u)[0]
            sources = [*params, *variables]
            with _cf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(sources)
                ax = tree_flatten(matvec(tree_unflatten(structure, x_leaves)))[0]
            g = tape.gradient(ax, sources, output_gradients=[-w for w in u_leaves],
                              unconnected_gradients=_cf._ZERO)
            gin = [*u_leaves, *g[:len(params)]]
            return (gin, g[len(params):]) if variables else gin

        return (*x_leaves, *aux_leaves), grad_fn

    run.__name__ = "custom_linear_solve"
    outs = custom_gradient(run)(*leaves, *params)
    x = tree_unflatten(structure, list(outs[:n]))
    if not has_aux:
        return x
    return x, tree_unflatten(aux_structure["s"], list(outs[n:]))
