"""Special functions: ``logsumexp`` (as ``scipy.special.logsumexp``), differentiable."""
from __future__ import annotations

from ._backend import namespace as _ns
from ._registry import Arg, RegisterGradient, RegisterJVP, Sample, primitive
from .ops import exp, reshape
from .ops import sum as _sum
from .ops.reductions import _kept_shape, _reduction_error


@primitive("LogSumExp", real_only=True, samples=[
    Sample((3, 4)), Sample((3, 4), axis=1), Sample((2, 3, 4), axis=(0, 2)),
    Sample((3, 4), axis=-1, keepdims=True), Sample(()), Sample((0, 3), axis=1),
    Sample((1, 1), axis=0), Sample(Arg((2, 5), (20.0, 30.0)), axis=1)])
def _logsumexp(x, *, axis=None, keepdims=False):
    xp = _ns(x)
    if x.size == 0:  # no maximum to subtract; log(0) = -inf for empty slices
        return xp.log(xp.sum(xp.exp(x), axis=axis, keepdims=keepdims))
    try:
        m = xp.max(x, axis=axis, keepdims=True)
    except (ValueError, IndexError) as e:
        raise _reduction_error("logsumexp", x, e) from e
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))  # all -inf (or an inf): shift by 0
    s = xp.sum(xp.exp(x - m), axis=axis, keepdims=keepdims)
    return xp.log(s) + (m if keepdims else xp.reshape(m, s.shape))


@RegisterGradient("LogSumExp")
def _logsumexp_grad(op, dy):
    # d/dx_i log(sum_j e^x_j) = e^(x_i - y): the softmax of x over the reduced axes
    x = op.inputs[0]
    kept = _kept_shape(x.shape, op.attrs.get("axis"))
    return reshape(dy, kept) * exp(x - reshape(op.outputs[0], kept))


@RegisterJVP("LogSumExp")
def _logsumexp_jvp(op, t):
    # d logsumexp(x) = sum_i softmax(x)_i dx_i over the reduced axes (the gradient's weights)
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    w = exp(x - reshape(op.outputs[0], _kept_shape(x.shape, axis)))
    return _sum(w * t, axis=axis, keepdims=op.attrs.get("keepdims", False))


def logsumexp(x, /, *, axis=None, keepdims=False):
    """``log(sum(exp(x)))`` over ``axis`` (None: all axes; int or tuple), computed stably.

    The maximum of each slice is subtracted before exponentiating (as
    ``scipy.special.logsumexp``), so inputs of magnitude 1e4 neither overflow nor underflow;
    slices that are all ``-inf`` (or empty) give ``-inf``. x: floating, any shape. Result:
    ``x.shape`` without the reduced axes (kept as size 1 with ``keepdims``). Raises
    ``ValueError`` for an out-of-range axis. Gradient: ``dy * exp(x - logsumexp(x))``, the
    softmax of ``x`` over the reduced axes.
    """
    return _logsumexp(x, axis=axis, keepdims=keepdims)


__all__ = ["logsumexp"]
