"""Reductions and statistics (Array API names), forward and gradient side by side.

The gradient of a reduction broadcasts the cotangent back over the reduced axes: with
``keepdims=False`` it is first reshaped to the kept-dims shape, then broadcast to the input.
"""
from __future__ import annotations

from .._backend import namespace as _ns
from .._registry import RegisterGradient, Sample, primitive
from .creation import asarray
from .manipulation import broadcast_to, reshape

_AXIS_SAMPLES = [Sample((3, 4)), Sample((3, 4), axis=1), Sample((2, 3, 4), axis=(0, 2)),
                 Sample((3, 4), axis=-1, keepdims=True), Sample(()), Sample((0, 3), axis=0),
                 Sample((1, 1), axis=0)]


def _axes(axis, ndim):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    out = []
    for a in axis:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor of {ndim} dimension(s)")
        out.append(a % ndim if ndim else 0)
    return tuple(sorted(out))


def _kept_shape(shape, axis):
    axes = _axes(axis, len(shape))
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _expand_to(dy, x, axis):
    """Broadcast a reduction's cotangent ``dy`` back to the shape of ``x``."""
    return broadcast_to(reshape(dy, _kept_shape(x.shape, axis)), x.shape)


@primitive("Sum", samples=_AXIS_SAMPLES)
def _sum(x, *, axis=None, dtype=None, keepdims=False):
    return _ns(x).sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


@RegisterGradient("Sum")
def _sum_grad(op, dy):
    # d(sum x)/dx_i = 1: the cotangent broadcast back over the reduced axes
    return _expand_to(dy, op.inputs[0], op.attrs.get("axis"))


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001 - Array API name
    """Sum over ``axis`` (None: all axes; int or tuple of ints).

    x: any shape, numeric dtype. Result: ``x.shape`` without the reduced axes (kept as size 1
    with ``keepdims``). Gradient: the cotangent broadcast over the reduced axes.
    """
    return _sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


def mean(x, /, *, axis=None, keepdims=False):
    """Arithmetic mean over ``axis``; same shapes as :func:`sum`. Floating ``x`` only.

    Written as ``sum(x) / n``, so its gradient is ``dy / n`` broadcast back.
    """
    x = asarray(x)
    n = 1
    for a in _axes(axis, x.ndim):
        n *= x.shape[a]
    return _sum(x, axis=axis, keepdims=keepdims) / float(n)


__all__ = ["sum", "mean"]
