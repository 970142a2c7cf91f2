"""Utility functions (Array API): ``all``, ``any`` (boolean reductions, not differentiable) and
``diff`` (differentiable: it is written with ``concat``, slicing and ``subtract``, so its
gradient is theirs: the transposed difference of the cotangent).
"""
from __future__ import annotations

from .. import _backend
from .._registry import no_gradient, primitive
from .conversion import asarray
from .elementwise import subtract
from .indexing import getitem
from .manipulation import broadcast_to, concat
from .reductions import _reduction


def _truth_reduction(name):
    """The forward of ``xp.all``/``xp.any``, with a complex ``x`` compared with 0 first (JAX
    reduces only the real part: ``any([0j, 1j])`` would be False)."""
    reduce = _reduction(name)

    def forward(x, *, axis=None, keepdims=False):
        if _backend.np_dtype(x.dtype).kind == "c":
            x = x != 0
        return reduce(x, axis=axis, keepdims=keepdims)

    forward.__name__ = forward.__qualname__ = f"_{name}"
    return forward


_all = primitive("All")(_truth_reduction("all"))
_any = primitive("Any")(_truth_reduction("any"))

no_gradient("All")
no_gradient("Any")


def all(x, /, *, axis=None, keepdims=False):  # noqa: A001 - Array API name
    """True where every element along ``axis`` (None: all axes; int or tuple) is nonzero.

    NaN and infinities count as True; an empty reduction gives True. Result: boolean, shapes
    as ``sum``. Raises ``ValueError`` for an out-of-range axis. Not differentiable.
    """
    return _all(x, axis=axis, keepdims=keepdims)


def any(x, /, *, axis=None, keepdims=False):  # noqa: A001 - Array API name
    """True where some element along ``axis`` (None: all axes; int or tuple) is nonzero.

    An empty reduction gives False. Result: boolean, shapes as ``sum``. Not differentiable.
    """
    return _any(x, axis=axis, keepdims=keepdims)


def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    """The ``n``-th forward difference ``out[i] = x[i+1] - x[i]`` along ``axis``, applied
    ``n`` times (Array API ``diff``).

    x: at least 1-d, numeric. prepend/append: tensors of ``x``'s shape except along ``axis``
    (or Python scalars, broadcast to one slice) joined to ``x`` first; dtypes are promoted.
    Result: ``x``'s shape with ``M + N1 + N2 - n`` along ``axis`` (0 if negative), as the
    standard says also for ``n = 0`` (where NumPy ignores prepend/append).
    Raises ``ValueError`` for a 0-d ``x``, an out-of-range axis or a negative ``n``.
    Gradient: that of concat/slice/subtract, i.e. ``dx_j = dy_{j-1} - dy_j`` per order.
    """
    x = asarray(x)
    ndim = x.ndim
    if ndim == 0:
        raise ValueError("diff: x must have at least one dimension, got a 0-d tensor")
    if not -ndim <= axis < ndim:
        raise ValueError(f"diff: axis {axis} is out of range for a tensor of shape {x.shape}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"diff: n must be a non-negative int, got {n!r}")
    axis %= ndim
    if prepend is not None or append is not None:
        slice_shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
        parts = [_edge(prepend, x, slice_shape), x, _edge(append, x, slice_shape)]
        x = concat([p for p in parts if p is not None], axis=axis)
    lead = (slice(None),) * axis
    later, earlier = lead + (slice(1, None), ...), lead + (slice(None, -1), ...)
    for _ in range(n):
        if x.shape[axis] == 0:
            break
        x = subtract(getitem(x, later), getitem(x, earlier))
    return x


def _edge(v, x, slice_shape):
    if v is None or hasattr(v, "shape"):
        return v
    return broadcast_to(asarray(v, dtype=x.dtype, device=x.device), slice_shape)


__all__ = ["all", "any", "diff"]
