"""Repetition (Array API ``tile`` and ``repeat``), forward and gradient side by side.

Each element of the result is a copy of an element of the input, so the gradient sums the
cotangent over each element's copies: a reshape and a ``sum`` for ``tile`` and for one repeat
count, a scatter-add (the gradient of indexing) for per-element counts. They move elements
around like the ops of :mod:`.manipulation`, but their gradients need :mod:`.reductions` and
:mod:`.indexing`, hence a module above those.
"""
from __future__ import annotations

import numpy as _np

from .._backend import namespace as _ns
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .._tensor import Tensor
from ._jvp import linear_jvp
from .indexing import _scatter_add
from .manipulation import _shape, reshape
from .reductions import sum as _sum


# --- tile ----------------------------------------------------------------------------------------
@primitive("Tile", samples=[Sample((2, 3), repetitions=(2, 1)), Sample((3,), repetitions=(2, 2)),
                            Sample((2, 3, 1), repetitions=(3,)), Sample((), repetitions=(2,)),
                            Sample((0, 2), repetitions=(2, 2)), Sample((2,), repetitions=(0,)),
                            Sample((1, 1), repetitions=(1, 1))])
def _tile(x, *, repetitions):
    return _ns(x).tile(x, repetitions)


RegisterJVP("Tile")(linear_jvp)


@RegisterGradient("Tile")
def _tile_grad(op, dy):
    # y[r_0 * s_0 + i_0, ...] = x[i_0, ...]: view dy as (r_0, s_0, r_1, s_1, ...), sum the r axes
    x = op.inputs[0]
    reps, shape = op.attrs["repetitions"], x.shape
    n = max(len(reps), len(shape))
    reps = (1,) * (n - len(reps)) + tuple(reps)
    padded = (1,) * (n - len(shape)) + tuple(shape)
    split = tuple(d for pair in zip(reps, padded) for d in pair)
    return reshape(_sum(reshape(dy, split), axis=tuple(range(0, 2 * n, 2))), shape)


def tile(x, repetitions, /):
    """Tile ``x`` ``repetitions[i]`` times along axis ``i`` (Array API ``tile``).

    repetitions: a tuple of non-negative ints; if shorter than ``x.ndim`` it is padded with
    leading 1s, if longer ``x`` gets leading size-1 axes. Result: shape
    ``padded_shape * padded_repetitions``. Gradient: the cotangent summed over the tiles.
    """
    return _tile(x, repetitions=tuple(repetitions))


# --- repeat --------------------------------------------------------------------------------------
@primitive("Repeat", samples=[
    Sample((4,), repeats=2, axis=0), Sample((2, 3), repeats=_np.asarray([1, 0, 2]), axis=1),
    Sample((3, 2), repeats=3, axis=-2), Sample((0, 2), repeats=2, axis=0),
    Sample((1,), repeats=_np.asarray([3]), axis=0), Sample((2, 2), repeats=0, axis=1)])
def _repeat(x, *, repeats, axis):
    xp = _ns(x)
    if not isinstance(repeats, int):
        repeats = xp.asarray(repeats)
    try:
        return xp.repeat(x, repeats, axis=axis)
    except (ValueError, IndexError) as e:
        raise ValueError(f"repeat: cannot repeat a tensor of shape {_shape(x)} {repeats} times "
                         f"along axis {axis}: {e}") from e


RegisterJVP("Repeat")(linear_jvp)


@RegisterGradient("Repeat")
def _repeat_grad(op, dy):
    # each output position reads one input position: the cotangent summed back per input
    x = op.inputs[0]
    axis = op.attrs["axis"] % x.ndim
    r = op.attrs["repeats"]
    n = x.shape[axis]
    if isinstance(r, int):  # view dy as (..., n, r, ...) and sum the copies
        return _sum(reshape(dy, x.shape[:axis] + (n, r) + x.shape[axis + 1:]), axis=axis + 1)
    xp = _ns(r)
    source = xp.repeat(xp.arange(n), r)  # the input position of each output position (constant)
    return _scatter_add(dy, shape=x.shape, key=(slice(None),) * axis + (source,))


def repeat(x, repeats, /, *, axis=None):
    """Repeat each element of ``x`` along ``axis`` (Array API ``repeat``).

    repeats: a non-negative int, or a 1-d integer array/Tensor of ``x.shape[axis]`` counts (or
    one count). axis: None flattens ``x`` first (result 1-d). Result: ``x``'s shape with the
    total count along ``axis``. Raises ``ValueError`` for bad counts. Gradient: the cotangent
    summed over each element's copies (a scatter-add for per-element counts).
    """
    if isinstance(repeats, Tensor):
        repeats = repeats._value
    if not isinstance(repeats, int):  # counts as an array of x's backend
        repeats = _ns(x._value if isinstance(x, Tensor) else x).asarray(repeats)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return _repeat(x, repeats=repeats, axis=axis)


__all__ = ["tile", "repeat"]
