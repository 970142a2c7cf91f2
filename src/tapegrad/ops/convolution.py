"""Convolution and deconvolution with TensorFlow's names, layouts and semantics (``tf.nn``).

Three primitives serve every rank (1-d, 2-d, 3-d) and every public function, on channels-last
arrays (``N, *spatial, C``; a channels-first ``data_format`` is transposed around them):

* ``Conv`` (TensorFlow's N-d ``Conv`` op): ``y = conv(x, w)``, filters ``(*k, C / groups, O)``;
  ``groups`` > 1 is a grouped convolution, which is what ``depthwise_conv2d`` is;
* ``ConvBackpropInput``: the adjoint of ``Conv`` in ``x`` (``conv*_transpose``, the
  deconvolution);
* ``ConvBackpropFilter``: the adjoint of ``Conv`` in ``w``.

The op-type structure is TensorFlow's (``nn_grad.py``: the gradient of ``Conv2D`` is
``Conv2DBackpropInput`` and ``Conv2DBackpropFilter``, each of which has those three as its
gradient). All three are bilinear, so with ``<.,.>`` the sum of elementwise products,
``<conv(x, w), y> = <x, B_in(w, y)> = <w, B_f(x, y)>`` gives every gradient as another of the
three, differentiable to any order, and every JVP as ``op(t1, b) + op(a, t2)``.

Forwards are im2col (Chellapilla, Puri & Simard 2006): the ``prod(k)`` strided slices of the
zero-padded input, one per filter offset (basic slicing with steps for strides and dilations),
stacked into patches ``(N, *out, K, C)`` and contracted with the filter by one ``matmul``. The
adjoint of taking patches (``_fold``) puts every slice back in place (zero-inserted between
strides, padded to the input's size) and sums. Output sizes and ``"SAME"`` padding follow
TensorFlow (and Dumoulin & Visin 2016, "A guide to convolution arithmetic for deep
learning"): ``SAME``: ``ceil(n / s)`` with the padding ``max((out - 1) s + (k - 1) d + 1 - n, 0)``
split with the extra element at the end; ``VALID``: ``ceil((n - (k - 1) d) / s)``.

The ``name`` argument of each function is accepted for TensorFlow compatibility and ignored.
"""
from __future__ import annotations

import itertools
import math

from .._backend import namespace as _ns
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .._tensor import Tensor
from .creation import convert_to_tensor
from .manipulation import permute_dims, reshape

__all__ = ["conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose",
           "conv3d_transpose", "depthwise_conv2d"]


# --- array helpers (backend arrays, Array API) ---------------------------------------------------
def _pad(xp, x, pads, value=0):
    """``x`` (``N, *spatial, C``) with ``pads[i] = (lo, hi)`` elements of ``value`` around
    spatial axis ``i`` (the Array API has no ``pad``: concatenation)."""
    for axis, (lo, hi) in enumerate(pads, start=1):
        if lo or hi:
            parts = []
            for n in (lo, hi):
                shape = list(x.shape)
                shape[axis] = n
                parts.append(xp.full(tuple(shape), value, dtype=x.dtype))
            x = xp.concat([parts[0], x, parts[1]], axis=axis)
    return x


def _window(i, d, o, s):
    """The slice of a padded axis that filter offset ``i`` sees over ``o`` outputs."""
    return slice(i * d, i * d + (o - 1) * s + 1, s) if o else slice(0, 0)


def _patches(xp, x, k, s, d, o, axis=-2):
    """The im2col patches of padded ``x`` (``N, *spatial, C``), one per filter offset in row-major
    order (as the filter's ``reshape``), stacked on ``axis``: ``(N, *o, prod(k), C)`` for a
    ``matmul`` (-2), ``(prod(k), N, *o, C)`` for a reduction over offsets (0)."""
    pieces = [x[(slice(None), *map(_window, offsets, d, o, s), slice(None))]
              for offsets in itertools.product(*map(range, k))]
    return xp.stack(pieces, axis=axis)


def _dilate(xp, x, axis, s):
    """Insert ``s - 1`` zeros between the elements of ``x`` along ``axis``."""
    n = x.shape[axis]
    x = xp.stack([x] + [xp.zeros_like(x)] * (s - 1), axis=axis + 1)
    x = xp.reshape(x, x.shape[:axis] + (n * s,) + x.shape[axis + 2:])
    return x[(slice(None),) * axis + (slice(0, max((n - 1) * s + 1, 0)), Ellipsis)]


def _fold(xp, pieces, sizes, k, s, d):
    """The adjoint of :func:`_patches`: the ``prod(k)`` pieces ``(N, *o, C)`` (row-major offset
    order) put back where they were taken and summed, into ``(N, *sizes, C)``. Axis by axis from
    the last: the pieces of one offset along the first axis are folded along the others, then
    padded along the first axis once (fewer full-size pads than padding every piece)."""
    rank = len(k)
    for axis, stride in enumerate(s, start=1):
        if stride > 1 and pieces[0].shape[axis] > 0:
            pieces = [_dilate(xp, q, axis, stride) for q in pieces]
    spans = pieces[0].shape[1:1 + rank]

    def fold(pieces, axis):
        if axis == rank:
            return pieces[0]
        n = len(pieces) // k[axis]
        total = None
        for i in range(k[axis]):
            pads = [(0, 0)] * rank
            pads[axis] = (i * d[axis], sizes[axis] - i * d[axis] - spans[axis])
            q = _pad(xp, fold(pieces[i * n:(i + 1) * n], axis + 1), pads)
            total = q if total is None else total + q
        return total

    return fold(list(pieces), 0)


def _out_sizes(sizes, k, s, d, padding):
    return tuple((n + lo + hi - (kk - 1) * dd - 1) // ss + 1
                 for n, kk, ss, dd, (lo, hi) in zip(sizes, k, s, d, padding))


def _matmul_groups(xp, a, b, groups):
    """``a (M, G*A) @ b (G, A, B)`` group by group, as ``(M, G*B)``."""
    if groups == 1:
        return xp.matmul(a, b[0, ...])
    m = a.shape[0]
    a = xp.permute_dims(xp.reshape(a, (m, groups, a.shape[1] // groups)), (1, 0, 2))
    y = xp.matmul(a, b)  # (G, M, B)
    return xp.reshape(xp.permute_dims(y, (1, 0, 2)), (m, groups * b.shape[2]))


def _grouped_filter(xp, w, groups):
    """Filter ``(*k, Cg, O)`` as ``(G, K*Cg, O/G)``: group ``g`` maps input channels
    ``g*Cg...`` to output channels ``g*O/G...``."""
    k, cg, o = math.prod(w.shape[:-2]), w.shape[-2], w.shape[-1]
    w = xp.reshape(w, (k, cg, groups, o // groups))
    return xp.reshape(xp.permute_dims(w, (2, 0, 1, 3)), (groups, k * cg, o // groups))


def _group_major(xp, p, groups):
    """Patches ``(M, K, C)`` as ``(M, G*K*Cg)``: each group's ``K*Cg`` columns together."""
    m, k, c = p.shape
    p = xp.reshape(p, (m, k, groups, c // groups))
    return xp.reshape(xp.permute_dims(p, (0, 2, 1, 3)), (m, k * c))


# --- the primitives -----------------------------------------------------------------------------
def _attrs(rank, s=1, d=1, pad=(0, 0), groups=1):
    return dict(strides=(s,) * rank, padding=(pad,) * rank, dilations=(d,) * rank, groups=groups)


_CONV_SAMPLES = [
    Sample((2, 5, 3), (3, 3, 2), **_attrs(1)),
    Sample((1, 7, 2), (2, 2, 3), **_attrs(1, s=2, pad=(1, 0))),
    Sample((1, 5, 4, 2), (2, 3, 2, 3), **_attrs(2, pad=(1, 1))),
    Sample((2, 6, 5, 1), (2, 2, 1, 2), strides=(2, 1), padding=((0, 1), (1, 0)),
           dilations=(1, 2), groups=1),
    Sample((1, 5, 5, 4), (3, 3, 1, 4), **_attrs(2, s=2, pad=(1, 1), groups=4)),
    Sample((1, 4, 3, 3, 2), (2, 2, 2, 2, 2), **_attrs(3, pad=(0, 1))),
]


@primitive("Conv", real_only=True, samples=_CONV_SAMPLES)
def _conv(input, filters, *, strides, padding, dilations, groups=1):  # noqa: A002 - TF's name
    xp = _ns(input, filters)
    k = filters.shape[:-2]
    o = _out_sizes(input.shape[1:-1], k, strides, dilations, padding)
    p = _patches(xp, _pad(xp, input, padding), k, strides, dilations, o)
    m = math.prod(p.shape[:-2])
    p = xp.reshape(p, (m, p.shape[-2], p.shape[-1]))
    y = _matmul_groups(xp, _group_major(xp, p, groups), _grouped_filter(xp, filters, groups),
                       groups)
    return xp.reshape(y, (input.shape[0], *o, filters.shape[-1]))


def _geometry(op):
    a = op.attrs
    return dict(strides=a["strides"], padding=a["padding"], dilations=a["dilations"],
                groups=a.get("groups", 1))


@RegisterGradient("Conv", reads="inputs")
def _conv_grad(op, dy):
    # <conv(x, w), dy> = <x, B_in(w, dy)> = <w, B_f(x, dy)> (TF nn_grad._Conv2DGrad)
    x, w = op.inputs
    g = _geometry(op)
    need_x, need_w = op.needs_input_grad
    return (_conv_backprop_input(w, dy, input_shape=tuple(x.shape), **g) if need_x else None,
            _conv_backprop_filter(x, dy, filter_shape=tuple(w.shape), **g) if need_w else None)


def _bilinear_jvp(fn):
    """The JVP rule of an op ``fn`` bilinear in its two inputs: ``fn(t1, b) + fn(a, t2)``."""
    def jvp(op, t1, t2):
        a, b = op.inputs
        parts = [fn(t1, b, **op.attrs) if t1 is not None else None,
                 fn(a, t2, **op.attrs) if t2 is not None else None]
        parts = [q for q in parts if q is not None]
        return None if not parts else parts[0] if len(parts) == 1 else parts[0] + parts[1]

    return jvp


RegisterJVP("Conv")(_bilinear_jvp(_conv))


def _sample_out_shape(sample):
    x, w = sample.args
    a = sample.attrs
    return (x[0], *_out_sizes(x[1:-1], w[:-2], a["strides"], a["dilations"], a["padding"]), w[-1])


@primitive("ConvBackpropInput", real_only=True, samples=[
    Sample(s.args[1], _sample_out_shape(s), input_shape=s.args[0], **s.attrs)
    for s in _CONV_SAMPLES])
def _conv_backprop_input(filters, out_backprop, *, input_shape, strides, padding, dilations,
                         groups=1):
    xp = _ns(filters, out_backprop)
    dy = out_backprop
    k = filters.shape[:-2]
    m = math.prod(dy.shape[:-1])
    # one piece per filter offset: dy @ w[offset]^T group by group, (K, G, M, Og) @ (K, G, Og, Cg)
    kk, cg = math.prod(k), filters.shape[-2]
    og = dy.shape[-1] // groups
    w = xp.reshape(filters, (kk, cg, groups, og))
    dy = xp.permute_dims(xp.reshape(dy, (1, m, groups, og)), (0, 2, 1, 3))
    dp = xp.matmul(dy, xp.permute_dims(w, (0, 2, 3, 1)))  # (K, G, M, Cg)
    dp = xp.reshape(xp.permute_dims(dp, (0, 2, 1, 3)), (kk, *out_backprop.shape[:-1], groups * cg))
    sizes = tuple(n + lo + hi for n, (lo, hi) in zip(input_shape[1:-1], padding))
    dx = _fold(xp, [dp[j, ...] for j in range(kk)], sizes, k, strides, dilations)
    return dx[(slice(None), *(slice(lo, lo + n) for n, (lo, _) in
                              zip(input_shape[1:-1], padding)), slice(None))]


@RegisterGradient("ConvBackpropInput", reads="inputs")
def _conv_backprop_input_grad(op, ddx):
    # <ddx, B_in(w, dy)> = <conv(ddx, w), dy> = <w, B_f(ddx, dy)> (TF _Conv2DBackpropInputGrad)
    w, dy = op.inputs
    g = _geometry(op)
    need_w, need_dy = op.needs_input_grad
    return (_conv_backprop_filter(ddx, dy, filter_shape=tuple(w.shape), **g) if need_w else None,
            _conv(ddx, w, **g) if need_dy else None)


RegisterJVP("ConvBackpropInput")(_bilinear_jvp(_conv_backprop_input))


@primitive("ConvBackpropFilter", real_only=True, samples=[
    Sample(s.args[0], _sample_out_shape(s), filter_shape=s.args[1], **s.attrs)
    for s in _CONV_SAMPLES])
def _conv_backprop_filter(input, out_backprop, *, filter_shape, strides, padding,  # noqa: A002
                          dilations, groups=1):
    xp = _ns(input, out_backprop)
    dy = out_backprop
    k = tuple(filter_shape[:-2])
    p = _patches(xp, _pad(xp, input, padding), k, strides, dilations, dy.shape[1:-1])
    m, kk, c = math.prod(p.shape[:-2]), p.shape[-2], p.shape[-1]
    cg, og = c // groups, dy.shape[-1] // groups
    p = xp.reshape(_group_major(xp, xp.reshape(p, (m, kk, c)), groups), (m, groups, kk * cg))
    dy = xp.reshape(dy, (m, groups, og))
    dw = xp.matmul(xp.permute_dims(p, (1, 2, 0)), xp.permute_dims(dy, (1, 0, 2)))  # G, K*Cg, Og
    dw = xp.permute_dims(xp.reshape(dw, (groups, kk, cg, og)), (1, 2, 0, 3))
    return xp.reshape(dw, tuple(filter_shape))


@RegisterGradient("ConvBackpropFilter", reads="inputs")
def _conv_backprop_filter_grad(op, ddw):
    # <ddw, B_f(x, dy)> = <conv(x, ddw), dy> = <x, B_in(ddw, dy)> (TF _Conv2DBackpropFilterGrad)
    x, dy = op.inputs
    g = _geometry(op)
    need_x, need_dy = op.needs_input_grad
    return (_conv_backprop_input(ddw, dy, input_shape=tuple(x.shape), **g) if need_x else None,
            _conv(x, ddw, **g) if need_dy else None)


RegisterJVP("ConvBackpropFilter")(_bilinear_jvp(_conv_backprop_filter))


# --- arguments as TensorFlow takes them ---------------------------------------------------------
_FORMATS = {1: ("NWC", "NCW"), 2: ("NHWC", "NCHW"), 3: ("NDHWC", "NCDHW")}


def _channels_first(who, data_format, rank):
    last, first = _FORMATS[rank]
    if data_format is None or data_format == last:
        return False
    if data_format == first:
        return True
    raise ValueError(f"{who}: data_format={data_format!r} is not supported; use {last!r} "
                     f"(channels last, the default) or {first!r} (channels first)")


def _per_axis(who, name, value, rank, first):
    """An int, or TF's list of 1, ``rank`` or ``rank + 2`` ints (batch and channel entries 1)."""
    if value is None:
        return (1,) * rank
    values = (value,) if isinstance(value, int) else tuple(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{who}: {name} must be an int or a list of ints, got {value!r}")
    if len(values) == rank + 2:
        ends = (values[0], values[1]) if first else (values[0], values[-1])
        if ends != (1, 1):
            raise ValueError(f"{who}: {name}={list(values)} must be 1 in the batch and channel "
                             f"dimensions; give {rank} spatial values instead")
        values = values[2:] if first else values[1:-1]
    elif len(values) == 1:
        values = values * rank
    elif len(values) != rank:
        raise ValueError(f"{who}: {name} must be an int or a list of 1, {rank} or {rank + 2} "
                         f"ints, got {list(values)}")
    if min(values) < 1:
        raise ValueError(f"{who}: {name} must be positive, got {list(values)}")
    return values


def _resolve_padding(who, padding, rank, first, sizes, k, s, d):
    """``"SAME"``, ``"VALID"`` or TF's explicit list as ``(lo, hi)`` pairs per spatial axis."""
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return ((0, 0),) * rank
        if padding.upper() == "SAME":
            pads = []
            for n, kk, ss, dd in zip(sizes, k, s, d):
                total = max((-(-n // ss) - 1) * ss + (kk - 1) * dd + 1 - n, 0)
                pads.append((total // 2, total - total // 2))
            return tuple(pads)
        raise ValueError(f"{who}: padding={padding!r} is not supported; use 'SAME', 'VALID' or "
                         f"an explicit list of {rank + 2} [before, after] pairs")
    try:
        pairs = tuple((int(lo), int(hi)) for lo, hi in padding)
    except (TypeError, ValueError):
        pairs = None
    if pairs is None or len(pairs) != rank + 2:
        raise ValueError(f"{who}: explicit padding must be a list of {rank + 2} [before, after] "
                         f"pairs, one per dimension of the input, got {padding!r}")
    ends = (pairs[0], pairs[1]) if first else (pairs[0], pairs[-1])
    if ends != ((0, 0), (0, 0)) or min(map(min, pairs)) < 0:
        raise ValueError(f"{who}: explicit padding {[list(p) for p in pairs]} must be "
                         "non-negative, and [0, 0] in the batch and channel dimensions")
    return pairs[2:] if first else pairs[1:-1]


def _check_rank(who, x, rank, what="input"):
    if x.ndim != rank + 2:
        fmt = _FORMATS[rank][0]
        raise ValueError(f"{who}: {what} must have {rank + 2} dimensions ({fmt} or "
                         f"{_FORMATS[rank][1]}), got shape {tuple(x.shape)}")


def _check_fits(who, sizes, k, d, padding, what="dilated filter"):
    for axis, (n, kk, dd, (lo, hi)) in enumerate(zip(sizes, k, d, padding)):
        if n + lo + hi < (kk - 1) * dd + 1:
            raise ValueError(f"{who}: the {what} size {(kk - 1) * dd + 1} exceeds the "
                             f"padded input size {n + lo + hi} in spatial dimension {axis}; "
                             f"use padding='SAME' or a smaller {what.split()[-1]}")


def _to_last(x, rank, first):
    return permute_dims(x, (0, *range(2, rank + 2), 1)) if first else x


def _from_last(x, rank, first):
    return permute_dims(x, (0, rank + 1, *range(1, rank + 1))) if first else x


def _convolve(who, rank, input, filters, strides, padding, data_format,  # noqa: A002
              dilations, depthwise=False):
    first = _channels_first(who, data_format, rank)
    x, w = convert_to_tensor(input), convert_to_tensor(filters)
    _check_rank(who, x, rank)
    _check_rank(who, w, rank, "filters")
    x = _to_last(x, rank, first)
    c = x.shape[-1]
    k = tuple(w.shape[:-2])
    if w.shape[-2] != c:
        raise ValueError(f"{who}: the input has {c} channels but the filters expect "
                         f"{w.shape[-2]} (filters of shape {tuple(w.shape)}: the second-to-last "
                         "dimension is the number of input channels)")
    s = _per_axis(who, "strides", strides, rank, first)
    d = _per_axis(who, "dilations", dilations, rank, first)
    sizes = tuple(x.shape[1:-1])
    pads = _resolve_padding(who, padding, rank, first, sizes, k, s, d)
    _check_fits(who, sizes, k, d, pads)
    groups = 1
    if depthwise:  # (*k, C, M) as (*k, 1, C*M): C groups of one input channel
        groups = c
        w = reshape(w, (*k, 1, c * w.shape[-1]))
    y = _conv(x, w, strides=s, padding=pads, dilations=d, groups=groups)
    return _from_last(y, rank, first)


def _deconvolve(who, rank, input, filters, output_shape, strides, padding,  # noqa: A002
                data_format, dilations):
    first = _channels_first(who, data_format, rank)
    dy, w = convert_to_tensor(input), convert_to_tensor(filters)
    _check_rank(who, dy, rank)
    _check_rank(who, w, rank, "filters")
    dy = _to_last(dy, rank, first)
    try:
        shape = tuple(int(n) for n in (output_shape.numpy() if isinstance(output_shape, Tensor)
                                       else output_shape))
    except TypeError:
        shape = ()
    if len(shape) != rank + 2:
        raise ValueError(f"{who}: output_shape must list the {rank + 2} dimensions of the "
                         f"result, got {output_shape!r}")
    if first:
        shape = (shape[0], *shape[2:], shape[1])
    k = tuple(w.shape[:-2])
    if w.shape[-1] != dy.shape[-1]:
        raise ValueError(f"{who}: the input has {dy.shape[-1]} channels but the filters expect "
                         f"{w.shape[-1]} (filters of shape {tuple(w.shape)} are "
                         "[*spatial, output_channels, input_channels])")
    s = _per_axis(who, "strides", strides, rank, first)
    d = _per_axis(who, "dilations", dilations, rank, first)
    sizes = shape[1:-1]
    pads = _resolve_padding(who, padding, rank, first, sizes, k, s, d)
    _check_fits(who, sizes, k, d, pads)
    expected = (shape[0], *_out_sizes(sizes, k, s, d, pads), w.shape[-1])
    if shape[-1] != w.shape[-2] or expected != tuple(dy.shape):
        raise ValueError(f"{who}: output_shape {list(output_shape)} is inconsistent with the "
                         f"input of shape {tuple(input.shape)} and filters of shape "
                         f"{tuple(w.shape)}: a convolution of output_shape with these strides "
                         f"and padding has shape {_order(expected, first)} and "
                         f"{w.shape[-2]} channels are needed")
    x = _conv_backprop_input(w, dy, input_shape=shape, strides=s, padding=pads, dilations=d)
    return _from_last(x, rank, first)


def _order(shape, first):
    return [shape[0], shape[-1], *shape[1:-1]] if first else list(shape)


# --- the public functions -----------------------------------------------------------------------
_SHAPES = """
    Shapes: ``input`` ``(N, {s}, C)`` (``data_format="{last}"``, the default) or ``(N, C, {s})``
    (``"{first}"``); ``filters`` ``({k}, C, O)``. Result: ``(N, {o}, O)`` (or channels first),
    the inputs' floating dtype (promoted). ``strides``, ``dilations``: an int or a list of 1,
    {r} or {r2} ints (the batch and channel entries 1); TensorFlow allows ``strides`` > 1 with
    ``dilations`` > 1 only on some devices, tapegrad everywhere. ``padding``: ``"SAME"``
    (output size ``ceil(n / s)``, zeros split evenly, the extra one after), ``"VALID"``
    (``ceil((n - (k - 1) d) / s)``) or TensorFlow's explicit list of {r2} ``[before, after]``
    pairs in ``data_format`` order (the batch and channel pairs ``[0, 0]``).
"""
_ERRORS = """
    Raises ``ValueError`` for an input or filter of the wrong rank, a channel count that does
    not match the filters' (naming both), a bad ``padding``, ``data_format``, ``strides`` or
    ``dilations``, or a dilated filter larger than the padded input.
"""


def conv1d(input, filters, stride, padding, data_format="NWC", dilations=None,  # noqa: A002
           name=None):
    """1-d convolution (cross-correlation, as in every deep-learning library): ``tf.nn.conv1d``.

    ``y[n, i, o] = sum_{a, c} x_pad[n, i s + a d, c] w[a, c, o]``.
    """
    return _convolve("conv1d", 1, input, filters, stride, padding, data_format, dilations)


def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None,  # noqa: A002
           name=None):
    """2-d convolution (cross-correlation): ``tf.nn.conv2d``.

    ``y[n, i, j, o] = sum_{a, b, c} x_pad[n, i s0 + a d0, j s1 + b d1, c] w[a, b, c, o]``.
    """
    return _convolve("conv2d", 2, input, filters, strides, padding, data_format, dilations)


def conv3d(input, filters, strides, padding, data_format="NDHWC", dilations=None,  # noqa: A002
           name=None):
    """3-d convolution (cross-correlation): ``tf.nn.conv3d``.

    ``y[n, i, j, l, o] = sum_{a, b, e, c} x_pad[n, i s0 + a d0, j s1 + b d1, l s2 + e d2, c]
    w[a, b, e, c, o]``.
    """
    return _convolve("conv3d", 3, input, filters, strides, padding, data_format, dilations)


for _fn, _r, _s, _k, _o in ((conv1d, 1, "W", "kw", "W'"), (conv2d, 2, "H, W", "kh, kw", "H', W'"),
                            (conv3d, 3, "D, H, W", "kd, kh, kw", "D', H', W'")):
    _fn.__doc__ += _SHAPES.format(s=_s, k=_k, o=_o, r=_r, r2=_r + 2, last=_FORMATS[_r][0],
                                  first=_FORMATS[_r][1]) + _ERRORS + """
    Op type ``Conv`` (TensorFlow's N-d convolution op); gradients ``ConvBackpropInput`` (wrt
    the input: the transposed convolution) and ``ConvBackpropFilter`` (wrt the filters), each
    differentiable again (see the module docstring for the adjoint identities).
    """


def depthwise_conv2d(input, filter, strides, padding, data_format=None,  # noqa: A002
                     dilations=None, name=None):
    """Depthwise 2-d convolution: ``tf.nn.depthwise_conv2d``.

    Each input channel ``c`` is convolved with its own ``channel_multiplier`` filters:
    ``y[n, i, j, c * M + m] = sum_{a, b} x_pad[n, i s0 + a d0, j s1 + b d1, c] w[a, b, c, m]``.
    ``input``: ``(N, H, W, C)`` (``data_format`` ``None`` or ``"NHWC"``) or ``(N, C, H, W)``
    (``"NCHW"``); ``filter``: ``(kh, kw, C, M)``. Result: ``(N, H', W', C * M)`` (or channels
    first). ``strides`` (TensorFlow: 4 ints with batch and channel 1; an int or 2 ints are
    accepted too), ``padding`` and ``dilations`` as in :func:`conv2d`. Computed as a grouped
    ``Conv`` (``groups = C``, the filter reshaped to ``(kh, kw, 1, C * M)``), so its gradients
    are those of :func:`conv2d`. Raises ``ValueError`` as :func:`conv2d`.
    """
    return _convolve("depthwise_conv2d", 2, input, filter, strides, padding, data_format,
                     dilations, depthwise=True)


def conv1d_transpose(input, filters, output_shape, strides, padding="SAME",  # noqa: A002
                     data_format="NWC", dilations=None, name=None):
    """The transpose (adjoint, "deconvolution") of :func:`conv1d`: ``tf.nn.conv1d_transpose``.

    As :func:`conv2d_transpose`, one spatial dimension (``input`` ``(N, W', I)``, ``filters``
    ``(kw, O, I)``, ``output_shape`` ``(N, W, O)``; ``"NCW"`` for channels first).
    """
    return _deconvolve("conv1d_transpose", 1, input, filters, output_shape, strides, padding,
                       data_format, dilations)


def conv2d_transpose(input, filters, output_shape, strides, padding="SAME",  # noqa: A002
                     data_format="NHWC", dilations=None, name=None):
    """The transpose (adjoint, "deconvolution") of :func:`conv2d`: ``tf.nn.conv2d_transpose``.

    ``input``: ``(N, H', W', I)``; ``filters``: ``(kh, kw, O, I)`` (the filters of the
    convolution whose adjoint this is: ``O`` its input channels, ``I`` its output channels);
    ``output_shape``: the result's shape ``(N, H, W, O)`` (a list, tuple or 1-d Tensor; in
    ``data_format`` order), needed because several input sizes convolve to the same output size
    when ``strides`` > 1. ``strides``, ``padding``, ``dilations`` describe that convolution, as in
    :func:`conv2d`. Result: ``output_shape``, the inputs' dtype, with
    ``<conv2d(x, filters), input> == <x, conv2d_transpose(input, filters)>`` for every ``x`` of
    that shape (Dumoulin & Visin 2016, section 4).

    Raises ``ValueError`` as :func:`conv2d`, and if ``output_shape`` is not of length 4 or a
    convolution of ``output_shape`` does not give ``input``'s shape (naming the shape it gives).
    Op type ``ConvBackpropInput`` (TensorFlow's ``Conv2DBackpropInput``); its gradients are
    ``ConvBackpropFilter`` (wrt ``filters``) and ``Conv`` (wrt ``input``).
    """
    return _deconvolve("conv2d_transpose", 2, input, filters, output_shape, strides, padding,
                       data_format, dilations)


def conv3d_transpose(input, filters, output_shape, strides, padding="SAME",  # noqa: A002
                     data_format="NDHWC", dilations=None, name=None):
    """The transpose (adjoint, "deconvolution") of :func:`conv3d`: ``tf.nn.conv3d_transpose``.

    As :func:`conv2d_transpose`, three spatial dimensions (``filters`` ``(kd, kh, kw, O, I)``,
    ``output_shape`` ``(N, D, H, W, O)``; ``"NCDHW"`` for channels first).
    """
    return _deconvolve("conv3d_transpose", 3, input, filters, output_shape, strides, padding,
                       data_format, dilations)
