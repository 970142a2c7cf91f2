"""Shape manipulation (Array API names), forward and gradient side by side, and ``to_device``.

Every op here only moves elements around, so every gradient moves the cotangent back the
same way (reshape back, inverse permutation, flip again, slice the concatenation apart,
unstack the stack, ...), with no op of another family: the other families' gradients build on
these. ``moveaxis``, ``broadcast_arrays`` and ``meshgrid`` (an Array API creation function) are
compositions of them. ``tile`` and ``repeat``, whose gradients sum copies, are in
:mod:`.repetition`. Errors of the backend are re-raised with the op name and shapes only when
they happen, so the fast path pays nothing for them.
"""
from __future__ import annotations

import numpy as _np

from .._backend import namespace as _ns
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .._tensor import Tensor
from ._jvp import linear_jvp


def _shape(x) -> tuple:
    return tuple(getattr(x, "shape", ()))


# --- reshape, broadcast_to ---------------------------------------------------------------------
@primitive("Reshape", samples=[Sample((3, 4), shape=(4, 3)), Sample((2, 3), shape=(-1,)),
                               Sample((), shape=(1, 1)), Sample((0, 2), shape=(2, 0))])
def _reshape(x, *, shape, copy=None):
    return _ns(x).reshape(x, shape)


RegisterJVP("Reshape")(linear_jvp)


@RegisterGradient("Reshape", reads="none")
def _reshape_grad(op, dy):
    return reshape(dy, op.inputs[0].shape)  # also the gradient of ExpandDims and Squeeze


def reshape(x, /, shape, *, copy=None):
    """``x`` with a new ``shape`` (tuple of ints, one may be -1) holding the same elements.

    Gradient: the cotangent reshaped back to ``x.shape``.
    """
    return _reshape(x, shape=tuple(shape) if not isinstance(shape, int) else (shape,))


@primitive("BroadcastTo", samples=[Sample((3, 1), shape=(2, 3, 4)), Sample((), shape=(2,)),
                                   Sample((1,), shape=(0,))])
def _broadcast_to(x, *, shape):
    return _ns(x).broadcast_to(x, shape)


RegisterJVP("BroadcastTo")(linear_jvp)


@RegisterGradient("BroadcastTo", reads="none")
def _broadcast_to_grad(op, dy):
    return dy  # the tape sums the output-shaped cotangent back over the broadcast axes


def broadcast_to(x, /, shape):
    """``x`` broadcast to ``shape`` (NumPy broadcasting rules).

    Gradient: the cotangent summed over the broadcast axes (done by the tape's central
    unbroadcast).
    """
    return _broadcast_to(x, shape=tuple(shape))


# --- permute_dims, matrix_transpose ---------------------------------------------------------------
@primitive("Transpose", samples=[Sample((2, 3, 4), axes=(2, 0, 1)), Sample((3, 4), axes=(1, 0)),
                                 Sample((), axes=()), Sample((0, 2, 1), axes=(-1, 0, 1))])
def _permute_dims(x, *, axes):
    n = len(_shape(x))
    if not all(-n <= a < n for a in axes) or sorted(a % n for a in axes) != list(range(n)):
        raise ValueError(f"permute_dims: axes {axes} is not a permutation of the "
                         f"{n} axes of a tensor of shape {_shape(x)}")
    return _ns(x).permute_dims(x, tuple(a % n for a in axes))  # JAX refuses negative axes


RegisterJVP("Transpose")(linear_jvp)


@RegisterGradient("Transpose")
def _permute_dims_grad(op, dy):
    # the inverse permutation: input axis a went to output position i
    axes = op.attrs["axes"]
    n = len(axes)
    inverse = [0] * n
    for i, a in enumerate(axes):
        inverse[a % n] = i
    return permute_dims(dy, tuple(inverse))


def permute_dims(x, /, axes=None):
    """Permute the axes of ``x``: result axis ``i`` is input axis ``axes[i]``.

    axes: a permutation of ``range(x.ndim)`` (negative entries allowed); ``None`` (a tapegrad
    extension, NumPy's and TensorFlow's ``transpose`` default) reverses the axes. Raises
    ``ValueError`` otherwise. Gradient: the cotangent permuted by the inverse permutation.
    """
    if axes is None:
        axes = range(len(_shape(x)) - 1, -1, -1)
    return _permute_dims(x, axes=tuple(axes))


@primitive("MatrixTranspose", samples=[Sample((3, 4)), Sample((2, 3, 4)), Sample((0, 1, 2))])
def _matrix_transpose(x):
    if len(_shape(x)) < 2:
        raise ValueError(f"matrix_transpose: expected a tensor of at least 2 dimensions, got "
                         f"shape {_shape(x)}; use reshape or expand_dims to make it a matrix")
    return _ns(x).matrix_transpose(x)


RegisterJVP("MatrixTranspose")(linear_jvp)


@RegisterGradient("MatrixTranspose", reads="none")
def _matrix_transpose_grad(op, dy):
    return matrix_transpose(dy)


def matrix_transpose(x, /):
    """Swap the last two axes of ``x`` (shape ``(..., M, N)`` -> ``(..., N, M)``).

    Raises ``ValueError`` if ``x`` has fewer than 2 dimensions. Gradient: the cotangent
    transposed back.
    """
    return _matrix_transpose(x)


# --- expand_dims, squeeze -------------------------------------------------------------------------
@primitive("ExpandDims", samples=[Sample((3, 4), axis=1), Sample((), axis=0),
                                  Sample((3, 4), axis=-1), Sample((0, 2), axis=0)])
def _expand_dims(x, *, axis):
    try:
        return _ns(x).expand_dims(x, axis=axis)
    except (ValueError, IndexError) as e:
        raise IndexError(f"expand_dims: axis {axis} is out of range for a tensor of shape "
                         f"{_shape(x)}; it must lie in [-ndim-1, ndim]") from e


RegisterGradient("ExpandDims", reads="none")(_reshape_grad)
RegisterJVP("ExpandDims")(linear_jvp)


def expand_dims(x, /, axis=0):
    """Insert a size-1 axis at position ``axis`` (in the result; in ``[-ndim-1, ndim]``).

    ``axis`` may be given by keyword (Array API 2024.12 as published) or positionally (the
    later revision).

    Raises ``IndexError`` (Array API 2024.12) for an out-of-range axis. Gradient: the cotangent
    reshaped back.
    """
    return _expand_dims(x, axis=axis)


@primitive("Squeeze", samples=[Sample((3, 1, 4), axis=1), Sample((1, 1), axis=(0, 1)),
                               Sample((1, 0), axis=0), Sample((2, 1), axis=-1)])
def _squeeze(x, *, axis):
    try:
        return _ns(x).squeeze(x, axis=axis)
    except (ValueError, IndexError) as e:
        raise ValueError(f"squeeze: cannot remove axis {axis} of a tensor of shape "
                         f"{_shape(x)}; only axes of size 1 can be squeezed") from e


RegisterGradient("Squeeze", reads="none")(_reshape_grad)
RegisterJVP("Squeeze")(linear_jvp)


def squeeze(x, /, axis):
    """Remove the size-1 axis or axes ``axis`` (int or tuple of ints) of ``x``.

    Raises ``ValueError`` if an axis is out of range or not of size 1. Gradient: the cotangent
    reshaped back.
    """
    return _squeeze(x, axis=axis)


# --- flip -----------------------------------------------------------------------------------------
@primitive("Flip", samples=[Sample((3, 4)), Sample((3, 4), axis=1), Sample((2, 3, 4), axis=(0, 2)),
                            Sample(()), Sample((0, 3), axis=0)])
def _flip(x, *, axis=None):
    return _ns(x).flip(x, axis=axis)


RegisterJVP("Flip")(linear_jvp)


@RegisterGradient("Flip", reads="none")
def _flip_grad(op, dy):
    return flip(dy, axis=op.attrs.get("axis"))


def flip(x, /, *, axis=None):
    """Reverse the order of elements along ``axis`` (None: all axes; int or tuple of ints).

    Shape and dtype are kept. Gradient: the cotangent flipped along the same axes.
    """
    return _flip(x, axis=axis)


# --- concat, stack, unstack ---------------------------------------------------------------------
def _check_arrays(fn, arrays):
    if isinstance(arrays, (Tensor, str)) or not hasattr(arrays, "__len__"):
        raise TypeError(f"{fn}: expected a list or tuple of tensors, got "
                        f"{type(arrays).__name__}; wrap the tensors in a list")
    if len(arrays) == 0:
        raise ValueError(f"{fn}: needs at least one tensor, got an empty sequence")


@primitive("Concat", samples=[Sample((2, 3), (2, 4), axis=1), Sample((2, 3), (1, 3), (0, 3)),
                              Sample((3,), (2, 2), axis=None), Sample((1,)),
                              Sample((2, 3, 1), (2, 3, 2), axis=-1)])
def _concat(*arrays, axis=0):
    shapes = [_shape(a) for a in arrays]
    try:
        if axis is not None:
            _check_joinable(shapes, axis)
        return _ns(*arrays).concat(arrays, axis=axis)
    except ValueError as e:
        raise ValueError(f"concat: cannot concatenate shapes {', '.join(map(str, shapes))} "
                         f"along axis {axis}: {e}") from e


def _check_joinable(shapes, axis):
    """Raise ``ValueError`` unless ``shapes`` agree except along ``axis`` (JAX raises
    ``TypeError``, other backends ``ValueError``)."""
    ndim = len(shapes[0])
    if any(len(s) != ndim for s in shapes):
        raise ValueError("the tensors have different numbers of dimensions")
    if -ndim <= axis < ndim:
        a = axis % ndim
        if len({s[:a] + s[a + 1:] for s in shapes}) > 1:
            raise ValueError(f"the shapes differ in a dimension other than axis {axis}")


RegisterJVP("Concat")(linear_jvp)  # linear in all pieces jointly


@RegisterGradient("Concat")
def _concat_grad(op, dy):
    # each input receives its slice of the cotangent
    axis = op.attrs.get("axis", 0)
    grads, start = [], 0
    if axis is None:
        for x in op.inputs:
            n = _size(x)
            grads.append(reshape(dy[start:start + n], _shape(x)))
            start += n
        return grads
    axis %= dy.ndim
    lead = (slice(None),) * axis
    for x in op.inputs:
        n = _shape(x)[axis]
        grads.append(dy[lead + (slice(start, start + n), ...)])
        start += n
    return grads


def _size(x) -> int:
    n = 1
    for d in _shape(x):
        n *= d
    return n


def concat(arrays, /, *, axis=0):
    """Join a sequence of tensors along the existing axis ``axis`` (None: flatten them first).

    arrays: a non-empty list/tuple of tensors whose shapes agree except along ``axis``; dtypes
    are promoted. Result: the total size along ``axis``. Raises ``TypeError``/``ValueError``
    otherwise. Gradient: the cotangent sliced back into the input pieces.
    """
    _check_arrays("concat", arrays)
    return _concat(*arrays, axis=axis)


@primitive("Stack", samples=[Sample((2, 3), (2, 3)), Sample((2, 3), (2, 3), (2, 3), axis=-1),
                             Sample((), ()), Sample((0, 2), axis=1)])
def _stack(*arrays, axis=0):
    try:
        return _ns(*arrays).stack(arrays, axis=axis)
    except ValueError as e:
        shapes = ", ".join(str(_shape(a)) for a in arrays)
        raise ValueError(f"stack: cannot stack tensors of shapes {shapes} along axis {axis}; "
                         f"they must all have the same shape ({e})") from e


RegisterJVP("Stack")(linear_jvp)


@RegisterGradient("Stack")
def _stack_grad(op, dy):
    return list(unstack(dy, axis=op.attrs.get("axis", 0)))


def stack(arrays, /, *, axis=0):
    """Join a sequence of same-shaped tensors along a new axis ``axis`` of the result.

    arrays: a non-empty list/tuple of tensors of one shape ``S``; result ``S`` with
    ``len(arrays)`` inserted at ``axis``. Raises ``TypeError``/``ValueError`` otherwise.
    Gradient: the cotangent unstacked along ``axis``.
    """
    _check_arrays("stack", arrays)
    return _stack(*arrays, axis=axis)


@primitive("Unstack", samples=[Sample((3, 2)), Sample((2, 3, 4), axis=1), Sample((1,)),
                               Sample((2, 0), axis=0), Sample((2, 3), axis=-1)])
def _unstack(x, *, axis=0):
    if not _shape(x):
        raise ValueError("unstack: cannot unstack a 0-d tensor; it needs at least one axis")
    return tuple(_ns(x).unstack(x, axis=axis))


RegisterJVP("Unstack")(linear_jvp)


@RegisterGradient("Unstack")
def _unstack_grad(op, *dys):
    return stack(dys, axis=op.attrs.get("axis", 0))


def unstack(x, /, *, axis=0):
    """Split ``x`` along ``axis`` into a tuple of ``x.shape[axis]`` tensors without that axis.

    Raises ``ValueError`` for a 0-d tensor or an out-of-range axis. Gradient: the cotangents
    stacked back along ``axis`` (zeros for unused pieces).
    """
    return _unstack(x, axis=axis)


# --- moveaxis, broadcast_arrays, meshgrid (compositions of differentiable ops) ----------------
def _axes_tuple(fn, what, axes, ndim) -> tuple:
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"{fn}: {what} axis {a} is out of range for a tensor of {ndim} "
                             "dimension(s)")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{fn}: repeated {what} axis in {axes}")
    return tuple(out)


def moveaxis(x, source, destination, /):
    """Move axes ``source`` of ``x`` to positions ``destination`` (ints or tuples of ints of
    equal length); the other axes keep their order.

    Raises ``ValueError`` for out-of-range or repeated axes or lengths that differ. Written
    with :func:`permute_dims`, so the gradient is the cotangent permuted back.
    """
    ndim = len(_shape(x))
    src = _axes_tuple("moveaxis", "source", source, ndim)
    dst = _axes_tuple("moveaxis", "destination", destination, ndim)
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: source {source} and destination {destination} must have "
                         "the same number of axes")
    order = [a for a in range(ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, tuple(order))


def _broadcast_shapes(fn, shapes) -> tuple:
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if d != out[i] and out[i] != 1 and d != 1:
                raise ValueError(f"{fn}: shapes {', '.join(map(str, shapes))} do not broadcast "
                                 f"(axis {i - ndim}: sizes {out[i]} and {d})")
            if out[i] == 1:
                out[i] = d
    return tuple(out)


def broadcast_arrays(*arrays):
    """Broadcast tensors against each other (Array API ``broadcast_arrays``).

    Returns a list of tensors, one per input, all of the broadcast shape, each keeping its
    dtype. Raises ``ValueError`` if the shapes do not broadcast. Each is a
    :func:`broadcast_to`, so each gradient is summed back over the broadcast axes.
    """
    shape = _broadcast_shapes("broadcast_arrays", [_shape(a) for a in arrays])
    return [broadcast_to(a, shape) for a in arrays]


def meshgrid(*arrays, indexing="xy"):
    """Coordinate grids from 1-d tensors (Array API ``meshgrid``); differentiable.

    arrays: ``n`` 1-d tensors of sizes ``N1..Nn``. indexing: ``"xy"`` (Cartesian: the first two
    output axes swapped, shape ``(N2, N1, N3, ...)``) or ``"ij"`` (matrix: ``(N1, ..., Nn)``).
    Returns a list of ``n`` tensors of that shape, output ``i`` varying along input ``i``'s axis;
    each keeps its input's dtype. Raises ``ValueError`` for a non-1-d input or another
    ``indexing``. Built from ``reshape`` and ``broadcast_to``, so the gradient of each input is
    its output's cotangent summed over the other axes.
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    for i, a in enumerate(arrays):
        if len(getattr(a, "shape", ())) != 1:
            raise ValueError(f"meshgrid: array {i} has shape {tuple(getattr(a, 'shape', ()))}; "
                             "every array must be 1-d (flatten it with reshape(x, (-1,)))")
    sizes = [a.shape[0] for a in arrays]
    axes = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(arrays)
    for a, n in zip(axes, sizes):
        shape[a] = n
    out = []
    for a, x in zip(axes, arrays):
        s = [1] * len(arrays)
        s[a] = shape[a]
        out.append(broadcast_to(reshape(x, tuple(s)), tuple(shape)))
    return out


# --- roll ----------------------------------------------------------------------------------------
@primitive("Roll", samples=[Sample((5,), shift=2), Sample((3, 4), shift=-1, axis=1),
                            Sample((3, 4), shift=(1, 2), axis=(0, 1)), Sample((3, 4), shift=5),
                            Sample((), shift=1), Sample((0, 3), shift=1, axis=1),
                            Sample((1,), shift=3, axis=0)])
def _roll(x, *, shift, axis=None):
    try:
        return _ns(x).roll(x, shift, axis=axis)
    except (ValueError, IndexError) as e:
        raise ValueError(f"roll: cannot roll a tensor of shape {_shape(x)} by {shift} along "
                         f"axis {axis}: {e}") from e


RegisterJVP("Roll")(linear_jvp)


@RegisterGradient("Roll")
def _roll_grad(op, dy):
    shift = op.attrs["shift"]
    back = -shift if isinstance(shift, int) else tuple(-s for s in shift)
    return roll(dy, back, axis=op.attrs.get("axis"))


def roll(x, /, shift, *, axis=None):
    """Shift elements cyclically by ``shift`` along ``axis`` (Array API ``roll``).

    shift: int, or a tuple of ints matching a tuple ``axis``; axis: None rolls the flattened
    tensor and restores the shape, a tuple rolls along each axis (an int shift for all). Shape
    and dtype are kept. Raises ``ValueError`` for a tuple shift without an axis tuple of its
    length, or an out-of-range axis. Gradient: the cotangent rolled back by ``-shift``.
    """
    if not isinstance(shift, int):
        shift = tuple(shift)
        if isinstance(axis, int) or axis is None or len(tuple(axis)) != len(shift):
            raise ValueError(f"roll: shift {shift} is a tuple, so axis must be a tuple of the "
                             f"same length, got {axis}")
    if axis is not None and not isinstance(axis, int):
        axis = tuple(axis)
    return _roll(x, shift=shift, axis=axis)


# --- to_device -----------------------------------------------------------------------------------
@primitive("ToDevice", samples=[Sample((3,), device="cpu"), Sample((), device="cpu"),
                                Sample((0, 2), device="cpu")])
def _to_device(x, *, device, stream=None):
    device = _named_device(_ns(x), device)
    return x.to_device(device) if stream is None else x.to_device(device, stream=stream)


def _named_device(xp, device):
    """``"cpu"`` names the CPU device of backends whose devices are objects (array-api-strict)."""
    if isinstance(device, str) and device == "cpu" and xp is not _np:
        for d in xp.__array_namespace_info__().devices():
            if "cpu" in str(d).lower():
                return d
    return device


RegisterJVP("ToDevice")(linear_jvp)


@RegisterGradient("ToDevice")
def _to_device_grad(op, dy):
    return to_device(dy, op.inputs[0].device)  # the cotangent moved back


def to_device(x, device, /, *, stream=None):
    """``x`` on ``device`` of its backend (what ``Tensor.to_device`` calls).

    Returns ``x`` itself if it is already there. Raises the backend's error for an unknown
    device (NumPy knows only ``"cpu"``). Gradient: the cotangent moved back to ``x``'s device.
    """
    if isinstance(x, Tensor) and stream is None and (
            device == x.device or _named_device(_ns(x._value), device) == x.device):
        return x
    return _to_device(x, device=device, stream=stream)


__all__ = ["reshape", "broadcast_to", "permute_dims", "matrix_transpose", "expand_dims",
           "squeeze", "flip", "concat", "stack", "unstack", "moveaxis", "broadcast_arrays",
           "meshgrid", "roll", "to_device"]
