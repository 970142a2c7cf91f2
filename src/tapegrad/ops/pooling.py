"""Max and average pooling with TensorFlow's names, layouts and semantics (``tf.nn``).

Five primitives serve every rank on channels-last arrays (``N, *spatial, C``), the window
taken as im2col patches (the helpers of :mod:`.convolution`):

* ``MaxPool``: the maximum of each window (padding counts as ``-inf``);
* ``MaxPoolGrad(x, dy)``: routes each ``dy`` to the position of its window's maximum (the first
  one in row-major window order on ties) and sums where windows overlap (TensorFlow's
  ``MaxPoolGrad``); linear in ``dy`` and piecewise constant in ``x``;
* ``MaxPoolGradGrad(x, g)``: its adjoint in ``dy``, which takes ``g`` at each window's
  maximum (TensorFlow's ``MaxPoolGradGrad``); so the two are each other's gradients and
  max pooling is differentiable to any order (the gradient wrt ``x`` is zero away from ties);
* ``AvgPool``: the mean of each window's elements inside the input (``"SAME"`` padding does not
  count, as in TensorFlow); linear, so its gradient ``AvgPoolGrad`` is its adjoint (each
  ``dy / count`` spread over its window) and ``AvgPoolGrad``'s is ``AvgPool``.

The op-type structure is TensorFlow's (``nn_grad.py``: ``_MaxPoolGrad``,
``_MaxPoolGradGrad``, ``_AvgPoolGrad``). The ``name`` argument is accepted and ignored.
"""
from __future__ import annotations

import math

from .._backend import namespace as _ns
from .._registry import Arg, RegisterGradient, RegisterJVP, Sample, primitive
from ._jvp import linear_jvp
from .convolution import (_channels_first, _check_fits, _check_rank, _fold, _from_last,
                          _out_sizes, _pad, _patches, _per_axis, _resolve_padding, _to_last)
from .creation import convert_to_tensor

__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d"]


def _windows(xp, x, ksize, strides, padding, value):
    """The windows of ``x`` as patches ``(K, N, *out, C)``, padding filled with ``value``."""
    o = _out_sizes(x.shape[1:-1], ksize, strides, (1,) * len(ksize), padding)
    return _patches(xp, _pad(xp, x, padding, value), ksize, strides, (1,) * len(ksize), o, axis=0)


def _unfold(xp, pieces, input_shape, ksize, strides, padding):
    """The adjoint of :func:`_windows`: ``K`` pieces summed back into an ``input_shape`` array."""
    sizes = tuple(n + lo + hi for n, (lo, hi) in zip(input_shape[1:-1], padding))
    x = _fold(xp, pieces, sizes, ksize, strides, (1,) * len(ksize))
    return x[(slice(None), *(slice(lo, lo + n) for n, (lo, _) in
                             zip(input_shape[1:-1], padding)), slice(None))]


def _argmax_mask(xp, x, ksize, strides, padding):
    """One-hot ``(K, N, *out, C)``: where each window's (first) maximum is."""
    p = _windows(xp, x, ksize, strides, padding, -xp.inf)
    offsets = xp.reshape(xp.arange(p.shape[0]), (p.shape[0],) + (1,) * (p.ndim - 1))
    return xp.astype(offsets == xp.argmax(p, axis=0), x.dtype)


def _pool_attrs(rank, k=2, s=2, pad=(0, 0)):
    return dict(ksize=(k,) * rank, strides=(s,) * rank, padding=(pad,) * rank)


_POOL_GEOMETRY = [
    ((2, 5, 3), _pool_attrs(1, k=3, s=2, pad=(1, 1))),
    ((1, 4, 5, 2), _pool_attrs(2)),
    ((1, 5, 5, 2), _pool_attrs(2, k=3, s=1, pad=(1, 1))),
    ((1, 4, 5, 2), dict(ksize=(2, 3), strides=(1, 2), padding=((0, 1), (1, 1)))),
    ((1, 3, 4, 3, 1), _pool_attrs(3, pad=(0, 1))),
]


def _out_shape(shape, attrs):
    return (shape[0], *_out_sizes(shape[1:-1], attrs["ksize"], attrs["strides"],
                                  (1,) * len(attrs["ksize"]), attrs["padding"]), shape[-1])


# --- max pooling ---------------------------------------------------------------------------------
# The pooled input of the max-pool samples is drawn from a wide range, so that no two of its
# values lie closer than the gradient checks' steps (<= 2e-4): a step never moves a window's
# maximum (tests/test_pooling.py checks the gaps of the registry tests' draws)
TIE_FREE = (-500.0, 500.0)


@primitive("MaxPool", real_only=True,
           samples=[Sample(Arg(shape, TIE_FREE), **a) for shape, a in _POOL_GEOMETRY])
def _max_pool(input, *, ksize, strides, padding):  # noqa: A002 - TF's name
    xp = _ns(input)
    return xp.max(_windows(xp, input, ksize, strides, padding, -xp.inf), axis=0)


@RegisterGradient("MaxPool", reads="inputs")
def _max_pool_grad(op, dy):
    return _max_pool_backprop(op.inputs[0], dy, **op.attrs)


@RegisterJVP("MaxPool")
def _max_pool_jvp(op, t):
    # the Jacobian picks each window's maximum: the tangent taken there
    return _max_pool_grad_grad(op.inputs[0], t, **op.attrs)


@primitive("MaxPoolGrad", real_only=True,
           samples=[Sample(Arg(shape, TIE_FREE), _out_shape(shape, a), **a)
                    for shape, a in _POOL_GEOMETRY])
def _max_pool_backprop(input, grad, *, ksize, strides, padding):  # noqa: A002
    xp = _ns(input, grad)
    mask = _argmax_mask(xp, input, ksize, strides, padding)
    routed = mask * grad
    return _unfold(xp, [routed[j, ...] for j in range(routed.shape[0])], input.shape, ksize,
                   strides, padding)


@RegisterGradient("MaxPoolGrad", reads="inputs")
def _max_pool_backprop_grad(op, ddx):
    # linear in grad, whose adjoint is MaxPoolGradGrad; piecewise constant in input (TF
    # _MaxPoolGradGrad: no gradient to the original input)
    return None, _max_pool_grad_grad(op.inputs[0], ddx, **op.attrs)


@RegisterJVP("MaxPoolGrad")
def _max_pool_backprop_jvp(op, t_input, t_grad):
    return None if t_grad is None else _max_pool_backprop(op.inputs[0], t_grad, **op.attrs)


@primitive("MaxPoolGradGrad", real_only=True, samples=[Sample(Arg(shape, TIE_FREE), shape, **a)
                                       for shape, a in _POOL_GEOMETRY])
def _max_pool_grad_grad(input, grad, *, ksize, strides, padding):  # noqa: A002
    xp = _ns(input, grad)
    mask = _argmax_mask(xp, input, ksize, strides, padding)
    return xp.sum(mask * _windows(xp, grad, ksize, strides, padding, 0), axis=0)


@RegisterGradient("MaxPoolGradGrad", reads="inputs")
def _max_pool_grad_grad_grad(op, dz):
    # the adjoint of MaxPoolGrad in grad (TF _MaxPoolGradGradGrad)
    return None, _max_pool_backprop(op.inputs[0], dz, **op.attrs)


@RegisterJVP("MaxPoolGradGrad")
def _max_pool_grad_grad_jvp(op, t_input, t_grad):
    return None if t_grad is None else _max_pool_grad_grad(op.inputs[0], t_grad, **op.attrs)


# --- average pooling ---------------------------------------------------------------------------
def _counts(xp, input_shape, ksize, strides, padding, like):
    """How many elements of the input each window holds, shaped ``(1, *out, 1)``: a product
    over the axes of the per-axis counts (TF divides by these under "SAME" padding)."""
    total = None
    rank = len(ksize)
    for axis, (n, k, s, (lo, hi)) in enumerate(zip(input_shape[1:-1], ksize, strides, padding)):
        o = (n + lo + hi - k) // s + 1
        start = xp.arange(o) * s - lo
        count = xp.minimum(start + k, n) - xp.maximum(start, 0)
        shape = [1] * (rank + 2)
        shape[axis + 1] = o
        count = xp.reshape(xp.astype(count, like.dtype), tuple(shape))
        total = count if total is None else total * count
    return total


@primitive("AvgPool", real_only=True, samples=[Sample(shape, **a) for shape, a in _POOL_GEOMETRY])
def _avg_pool(input, *, ksize, strides, padding):  # noqa: A002
    xp = _ns(input)
    sums = xp.sum(_windows(xp, input, ksize, strides, padding, 0), axis=0)
    return sums / _counts(xp, input.shape, ksize, strides, padding, input)


@RegisterGradient("AvgPool", reads="none")
def _avg_pool_grad(op, dy):
    # linear: the adjoint, dy / count spread over each window (TF _AvgPoolGrad)
    return _avg_pool_backprop(dy, input_shape=tuple(op.inputs[0].shape), **op.attrs)


RegisterJVP("AvgPool")(linear_jvp)


@primitive("AvgPoolGrad", real_only=True,
           samples=[Sample(_out_shape(shape, a), input_shape=shape, **a)
                    for shape, a in _POOL_GEOMETRY])
def _avg_pool_backprop(grad, *, input_shape, ksize, strides, padding):
    xp = _ns(grad)
    spread = grad / _counts(xp, input_shape, ksize, strides, padding, grad)
    return _unfold(xp, [spread] * math.prod(ksize), input_shape, ksize, strides, padding)


@RegisterGradient("AvgPoolGrad", reads="none")
def _avg_pool_backprop_grad(op, ddx):
    a = op.attrs
    return _avg_pool(ddx, ksize=a["ksize"], strides=a["strides"], padding=a["padding"])


RegisterJVP("AvgPoolGrad")(linear_jvp)


# --- the public functions -----------------------------------------------------------------------
def _pool(who, rank, op, input, ksize, strides, padding, data_format):  # noqa: A002
    first = _channels_first(who, data_format, rank)
    x = convert_to_tensor(input)
    _check_rank(who, x, rank)
    x = _to_last(x, rank, first)
    k = _per_axis(who, "ksize", ksize, rank, first)
    s = _per_axis(who, "strides", strides, rank, first)
    sizes = tuple(x.shape[1:-1])
    pads = _resolve_padding(who, padding, rank, first, sizes, k, s, (1,) * rank)
    if any(max(p) >= kk for p, kk in zip(pads, k)):
        raise ValueError(f"{who}: explicit padding {[list(p) for p in pads]} must be smaller "
                         f"than the window {list(k)} in every spatial dimension, or a window "
                         "could hold only padding")
    _check_fits(who, sizes, k, (1,) * rank, pads, "window")
    return _from_last(op(x, ksize=k, strides=s, padding=pads), rank, first)


_POOL_DOC = """
    ``input``: ``(N, {s}, C)`` (``data_format="{last}"``, the default) or ``(N, C, {s})``
    (``"{first}"``), real floating dtype. ``ksize``, ``strides``: an int or a list of 1, {r} or
    {r2} ints (the batch and channel entries 1). ``padding``: ``"SAME"`` (output size
    ``ceil(n / s)``), ``"VALID"`` (``ceil((n - k + 1) / s)``) or TensorFlow's explicit list of
    {r2} ``[before, after]`` pairs (each smaller than the window). Result: ``(N, {o}, C)`` (or
    channels first), the input's dtype.
    Raises ``ValueError`` for an input of the wrong rank, a bad ``padding``, ``data_format``,
    ``ksize`` or ``strides``, or a window larger than the padded input.
"""


def max_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):  # noqa: A002
    """1-d max pooling: ``tf.nn.max_pool1d``, the maximum of each window."""
    return _pool("max_pool1d", 1, _max_pool, input, ksize, strides, padding, data_format)


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):  # noqa: A002
    """2-d max pooling: ``tf.nn.max_pool2d``, the maximum of each window."""
    return _pool("max_pool2d", 2, _max_pool, input, ksize, strides, padding, data_format)


def max_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):  # noqa: A002
    """3-d max pooling: ``tf.nn.max_pool3d``, the maximum of each window."""
    return _pool("max_pool3d", 3, _max_pool, input, ksize, strides, padding, data_format)


def avg_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):  # noqa: A002
    """1-d average pooling: ``tf.nn.avg_pool1d``, the mean of each window."""
    return _pool("avg_pool1d", 1, _avg_pool, input, ksize, strides, padding, data_format)


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):  # noqa: A002
    """2-d average pooling: ``tf.nn.avg_pool2d``, the mean of each window."""
    return _pool("avg_pool2d", 2, _avg_pool, input, ksize, strides, padding, data_format)


def avg_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):  # noqa: A002
    """3-d average pooling: ``tf.nn.avg_pool3d``, the mean of each window."""
    return _pool("avg_pool3d", 3, _avg_pool, input, ksize, strides, padding, data_format)


for _fn, _r, _s, _o in ((max_pool1d, 1, "W", "W'"), (max_pool2d, 2, "H, W", "H', W'"),
                        (max_pool3d, 3, "D, H, W", "D', H', W'"), (avg_pool1d, 1, "W", "W'"),
                        (avg_pool2d, 2, "H, W", "H', W'"), (avg_pool3d, 3, "D, H, W", "D', H', W'")):
    _fn.__doc__ += _POOL_DOC.format(s=_s, o=_o, r=_r, r2=_r + 2, last=("NWC", "NHWC", "NDHWC")[_r - 1],
                                    first=("NCW", "NCHW", "NCDHW")[_r - 1])
    _fn.__doc__ += ("""
    Padding counts as ``-inf``. Op type ``MaxPool``; gradient ``MaxPoolGrad``: each ``dy`` goes
    to its window's maximum, the first in row-major window order on ties (TensorFlow's
    behaviour), summed where windows overlap; ``MaxPoolGrad``'s gradient is ``MaxPoolGradGrad``
    and back, so max pooling is differentiable to any order.
    """ if _fn.__name__.startswith("max") else """
    Each window's mean is over its elements inside the input (``"SAME"`` padding is not counted,
    as in TensorFlow). Op type ``AvgPool``, linear; gradient ``AvgPoolGrad`` (its adjoint:
    ``dy / count`` spread over each window), whose gradient is ``AvgPool``.
    """)
