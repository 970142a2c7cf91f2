"""Shape manipulation (Array API names), forward and gradient side by side."""
from __future__ import annotations

from .._backend import namespace as _ns
from .._registry import RegisterGradient, Sample, primitive


@primitive("Reshape", samples=[Sample((3, 4), shape=(4, 3)), Sample((2, 3), shape=(-1,)),
                               Sample((), shape=(1, 1)), Sample((0, 2), shape=(2, 0))])
def _reshape(x, *, shape, copy=None):
    return _ns(x).reshape(x, shape)


@RegisterGradient("Reshape")
def _reshape_grad(op, dy):
    return reshape(dy, op.inputs[0].shape)


def reshape(x, /, shape, *, copy=None):
    """``x`` with a new ``shape`` (tuple of ints, one may be -1) holding the same elements.

    Gradient: the cotangent reshaped back to ``x.shape``.
    """
    return _reshape(x, shape=tuple(shape) if not isinstance(shape, int) else (shape,))


@primitive("BroadcastTo", samples=[Sample((3, 1), shape=(2, 3, 4)), Sample((), shape=(2,)),
                                   Sample((1,), shape=(0,))])
def _broadcast_to(x, *, shape):
    return _ns(x).broadcast_to(x, shape)


@RegisterGradient("BroadcastTo")
def _broadcast_to_grad(op, dy):
    return dy  # the tape sums the output-shaped cotangent back over the broadcast axes


def broadcast_to(x, /, shape):
    """``x`` broadcast to ``shape`` (NumPy broadcasting rules).

    Gradient: the cotangent summed over the broadcast axes (done by the tape's central
    unbroadcast).
    """
    return _broadcast_to(x, shape=tuple(shape))


__all__ = ["reshape", "broadcast_to"]
