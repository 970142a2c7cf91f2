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
from ._tensor import Tensor
from .ops import arange, astype, where

__all__ = ["scan", "fori_loop", "while_loop", "cond", "switch", "map"]


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
    index = astype(p != 0, np.int32)
    if not _cf._compiled([index, *_cf.tree_flatten(operands)[0]]):
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
    if i.ndim != 0 or np.dtype(i.dtype).kind not in "iu":
        raise TypeError(f"tg.lax.switch: index must be a scalar integer, got shape "
                        f"{tuple(i.shape)} and dtype {i.dtype}")
    n = len(branches) - 1
    i = astype(i, np.int32)
    i = where(i < 0, 0, where(i > n, n, i))
    return _cf._switch("tg.lax.switch", i, branches, operands,
                       [f"branches[{k}]" for k in range(len(branches))])


def map(f, xs):  # noqa: A001 - JAX's name
    """``f`` applied to each slice of ``xs`` along its leading axis, stacked
    (``jax.lax.map``): ``scan`` with no carry. Errors as :func:`scan`."""
    return _cf._scan("tg.lax.map", lambda c, x: (c, f(x)), (), xs, None, False, 1)[1]
