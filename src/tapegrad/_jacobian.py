"""``GradientTape.jacobian`` and ``batch_jacobian``: Jacobians from a tape's records.

The tape (the core) computes one reverse pass; a Jacobian is many passes over the same records,
stacked. As ``jax.jacrev`` and ``jax.jacfwd`` choose: row by row, one reverse pass per target
element with a one-hot cotangent (``_rows``), or, with fewer source than target elements,
column by column, one forward sweep per source element with a one-hot tangent through each
record's JVP rule (``_columns``, by :func:`tapegrad.forward.linearize`). With
``experimental_use_pfor=True`` the rows first try one reverse pass batched over all one-hot
cotangents, by the core's ``vectorize`` extension point (``tapegrad.batching``, JAX's ``vmap``). A batch Jacobian's
cotangent (or tangent) is one-hot in the trailing shape and ones across the batch, so one pass
gives a row (column) for every example. Everything is computed with tapegrad ops, so an outer
tape differentiates the result again (Hessians). The tape's methods call these functions
through the core's extension points (``_structural.extend``).
"""
from __future__ import annotations

import math

from . import _backend
from ._hooks import HOOKS
from ._structural import extend, extensions, ops
from ._tape import _flatten, _unflatten
from ._tensor import Tensor
from .forward import linearize


def jacobian(tape, target, sources, unconnected_gradients, use_pfor=True):
    """:meth:`GradientTape.jacobian` of ``tape`` (arguments, result and errors there)."""
    unconnected = tape._start("jacobian", unconnected_gradients)
    if not isinstance(target, Tensor):
        raise TypeError("GradientTape.jacobian: target must be a single Tensor")
    flat_sources = _flatten(sources)
    out = []
    if _forward_is_cheaper(target, flat_sources, sum(s.size for s in flat_sources)):
        for s in flat_sources:
            cols = _columns(tape, target, _one_hots(s, s.shape), s)
            out.append(_stacked(cols, -1, target.shape + s.shape, s.dtype, unconnected))
    else:
        shapes = [target.shape + s.shape for s in flat_sources]
        out = _vectorized(use_pfor, tape, target, target.shape, flat_sources, unconnected, 0,
                          shapes)
        if out is None:
            rows = _rows(tape, target, _one_hots(target, target.shape), flat_sources,
                         unconnected)
            out = [_stacked(r, 0, shape, s.dtype, unconnected)
                   for s, r, shape in zip(flat_sources, rows, shapes)]
    tape._finish()
    return _unflatten(sources, iter(out))


def batch_jacobian(tape, target, source, unconnected_gradients, use_pfor=True):
    """:meth:`GradientTape.batch_jacobian` of ``tape`` (arguments, result and errors there)."""
    unconnected = tape._start("batch_jacobian", unconnected_gradients)
    for what, t in (("target", target), ("source", source)):
        if not isinstance(t, Tensor):
            raise TypeError(f"GradientTape.batch_jacobian: {what} must be a single Tensor, "
                            f"got {type(t).__name__}")
        if t.ndim < 2:
            raise ValueError(f"GradientTape.batch_jacobian: the {what} has shape {t.shape}; "
                             "it must have rank 2 or more, (batch, ...) (as TensorFlow "
                             "requires); use GradientTape.jacobian for other shapes")
    if target.shape[0] != source.shape[0]:
        raise ValueError(f"GradientTape.batch_jacobian: the batch sizes differ: target shape "
                         f"{target.shape}, source shape {source.shape}; their first "
                         "dimensions must match")
    if not _backend.is_floating(target.dtype):
        raise TypeError(f"GradientTape.batch_jacobian: the target has dtype {target.dtype}; "
                        "only floating targets have Jacobians")
    shape = target.shape + source.shape[1:]
    if _forward_is_cheaper(target, [source], source.size):
        cols = _columns(tape, target, _one_hots(source, source.shape[1:]), source)
        result = _stacked(cols, -1, shape, source.dtype, unconnected)
    else:
        vectorized = _vectorized(use_pfor, tape, target, target.shape[1:], [source],
                                 unconnected, 1, [shape])
        if vectorized is not None:
            result, = vectorized
        else:
            rows, = _rows(tape, target, _one_hots(target, target.shape[1:]), [source],
                          unconnected)
            result = _stacked(rows, 1, shape, source.dtype, unconnected)
    tape._finish()
    return result


def _basis(t, trailing):
    """``(xp, dtype, m, lead)`` for one-hots of ``t``'s shape in its ``trailing`` shape (``t``'s
    whole shape, or its shape after the batch axis): its namespace and dtype, the number ``m``
    of trailing elements, and ``lead``, ones of shape ``(batch size or 1, 1)``."""
    xp = _backend.namespace(t._value)
    dtype = t._value.dtype
    lead = xp.ones((math.prod(t.shape[:t.ndim - len(trailing)]), 1), dtype=dtype)
    return xp, dtype, math.prod(trailing), lead


def _one_hots(t, trailing):
    """Backend arrays of ``t``'s shape and dtype, one per element of the ``trailing`` shape:
    one-hot there, and ones across the leading (batch) axis."""
    xp, dtype, m, lead = _basis(t, trailing)
    return (xp.reshape(lead * xp.eye(1, m, k=k, dtype=dtype), t.shape) for k in range(m))


def _vectorized(use_pfor, tape, target, trailing, sources, unconnected, axis, shapes):
    """The Jacobians from one reverse pass batched over every one-hot cotangent (the
    ``vectorize`` extension point, ``tapegrad.batching``), stacked at ``axis`` and reshaped to
    ``shapes``; ``None`` where it does not apply (then rows one by one)."""
    vectorize = extensions.vectorize
    if not use_pfor or vectorize is None or HOOKS:
        return None

    def cotangents():  # all of _one_hots', stacked on a new leading axis
        xp, dtype, m, lead = _basis(target, trailing)
        return xp.reshape(xp.eye(m, dtype=dtype)[:, None, :] * lead[None], (m, *target.shape))

    out = vectorize(tape, target, cotangents, sources, unconnected, axis, shapes)
    if out is None:
        return None
    return [(None if unconnected.value == "none" else
             ops.zeros(shape, dtype=s.dtype)) if g is vectorize.missing else g
            for g, s, shape in zip(out, sources, shapes)]


def _rows(tape, target, cotangents, sources, unconnected):
    """One reverse pass per cotangent (a backend array of the target's shape); per source,
    the list of its gradients (zeros where a pass did not reach it), or ``None`` where no
    pass reached it."""
    rows = [[] for _ in sources]
    for c in cotangents:
        for r, g in zip(rows, tape._backward([target], [Tensor(c)], sources, unconnected)):
            r.append(g)
    return [None if r and all(g is None for g in r) else
            [ops.zeros_like(s) if g is None else g for g in r]
            for s, r in zip(sources, rows)]


def _forward_is_cheaper(target, sources, n_source) -> bool:
    """Forward mode (columns) for fewer source than target elements, where it gives what
    the reverse passes give: real floating target and sources, no gradient hooks."""
    if HOOKS or n_source >= target.size:
        return False
    return all(_backend.is_floating(t.dtype) and t.dtype.kind != "c" for t in (target, *sources))


def _columns(tape, target, tangents, source):
    """One forward sweep per tangent (a backend array of ``source``'s shape): the tangents
    of the recorded ops' outputs in recording order, by ``linearize``. The list of the
    target's tangents, cast to the source's dtype (zeros where a sweep did not reach it),
    or ``None`` if no sweep reached it."""
    reach = {source._id} & tape._watched
    active = []
    for op in list(tape._ops):
        if not reach.isdisjoint(op._in_ids) and op._gdef.differentiable:
            active.append(op)
            reach.update(op._float_out)
    if target._id not in reach:
        return None
    cols = []
    for v in tangents:
        known = {source._id: Tensor(v)}
        for op in active:
            ins = [known.get(i) for i in op._in_ids]
            if any(t is not None for t in ins):
                for i, t in zip(op._out_ids, linearize(op, ins)):
                    if t is not None:
                        known[i] = t
        t = known.get(target._id)
        t = ops.zeros_like(target) if t is None else t
        cols.append(t if t.dtype == source.dtype else ops.astype(t, source.dtype))
    return cols


def _stacked(rows, axis, shape, dtype, unconnected):
    """The Jacobian of ``shape`` from its ``rows`` (stacked along ``axis``): ``None`` for an
    unconnected source under ``UnconnectedGradients.NONE``, zeros if unconnected or empty."""
    if rows is None and unconnected.value == "none":
        return None
    if not rows:
        return ops.zeros(shape, dtype=dtype)
    return ops.reshape(ops.stack(rows, axis=axis), shape)


extend(jacobian=jacobian, batch_jacobian=batch_jacobian)
