"""Once-differentiable provenance: the gradient that a gradient function computed outside
tapegrad ops cannot be differentiated again, and says so.

A gradient function that reads a traced tensor's array (``.numpy()``, ``np.asarray``,
``float()``) or returns raw arrays computes a gradient whose own derivative is unknown: an
outer tape would silently take it as zero. While an outer tape may differentiate the reverse
pass, the tape calls gradient functions through :func:`gradient_call` (the extension point
``gradient_call``); ``Tensor.numpy()`` reports raw reads through ``raw_access``. Such a
gradient is recorded as an ``OnceDifferentiable(op type)`` op whose gradient raises
``NotDifferentiableError`` naming the gradient function (PyTorch's ``once_differentiable``,
found instead of declared).
"""
from __future__ import annotations

import functools

from . import _backend
from ._records import READS, _state, record
from ._registry import CallDef
from ._structural import extend
from ._tensor import Tensor, _wrap
from .errors import NotDifferentiableError, describe_fn


def gradient_call(fn, op, dys):
    """Call ``fn(op, *dys)``; if it computed with raw arrays of traced tensors, or returned raw
    arrays, its results are marked once-differentiable for the outer tapes."""
    saved = _state.grad_op, _state.raw_access
    _state.grad_op, _state.raw_access = op, False
    try:
        gs = fn(op, *dys)
        raw = _state.raw_access
    finally:
        _state.grad_op, _state.raw_access = saved
    if isinstance(gs, (list, tuple, dict)):
        items = gs.values() if isinstance(gs, dict) else gs
        if not raw and all(g is None or isinstance(g, Tensor) for g in items):
            return gs
    elif not raw and (gs is None or isinstance(gs, Tensor)):
        return gs
    mark = functools.partial(_once_differentiable, op, fn, dys)
    if isinstance(gs, dict):
        return {k: mark(g) for k, g in gs.items()}
    if isinstance(gs, (list, tuple)):
        return [mark(g) for g in gs]
    return mark(gs)


def _once_differentiable_entry(op, fn):
    """The op-type entry of a gradient that ``fn`` computed outside tapegrad ops (on raw
    arrays): differentiating it again raises, naming ``fn``."""
    def grad(record, *dys):
        raise NotDifferentiableError(
            f"cannot differentiate the gradient of op type {op.type!r} again: its "
            f"gradient function {describe_fn(fn)} computed it with raw backend arrays "
            "(.numpy(), np.asarray, float()) instead of tapegrad ops, so its own derivative is "
            "unknown (it would silently be zero). Write the gradient function with tapegrad "
            "ops, or give a second-order gradient with a nested @tg.custom_gradient")

    def replay(*inputs):
        raise NotDifferentiableError(f"OnceDifferentiable({op.type}) cannot be replayed: it is "
                                     "the record of a gradient computed on raw arrays")

    return CallDef(f"OnceDifferentiable({op.type})", (), grad, replay=replay,
                   reads=READS["none"], is_custom=False)


def _once_differentiable(op, fn, dys, g):
    if g is None or callable(g) and not isinstance(g, Tensor):
        return g
    if not isinstance(g, Tensor):
        try:
            g = Tensor(_backend.asarray(g))
        except TypeError:
            return g  # not an array: _check_gradient reports it
    out = _wrap(g._value)
    inputs = tuple(a for a in (*op.inputs, *dys) if isinstance(a, Tensor))
    record(_once_differentiable_entry(op, fn), inputs, {}, (out,))
    return out


def _traced(t) -> bool:
    return any(not tape._observer and t._id in tape._watched for tape in _state.tapes)


def _note_raw_access(t):
    """Called by ``Tensor.numpy()``: inside a gradient function, reading a traced tensor's
    array makes the gradient once-differentiable."""
    if _state.grad_op is not None and not _state.raw_access and _traced(t):
        _state.raw_access = True


extend(raw_access=_note_raw_access, gradient_call=gradient_call)
