"""Searching (Array API): ``nonzero`` and ``searchsorted``. Both return integer indices, so
neither is differentiable. (``argmax``/``argmin`` live in :mod:`.reductions`, ``where`` in
:mod:`.elementwise`.)
"""
from __future__ import annotations

from .._backend import namespace as _ns
from .._registry import no_gradient, primitive
from .._tensor import Tensor


@primitive("NonZero")
def _nonzero(x):
    if len(x.shape) == 0:
        raise ValueError("nonzero: x must have at least one dimension, got a 0-d tensor; "
                         "reshape it to (1,)")
    return tuple(_ns(x).nonzero(x))


no_gradient("NonZero")


def nonzero(x, /):
    """The indices of the nonzero (True) elements of ``x`` (Array API ``nonzero``).

    x: at least 1-d. Returns a tuple of ``x.ndim`` 1-d integer tensors (the default index
    dtype), one per axis, in row-major order; for complex ``x`` an element is nonzero if either
    component is. Data-dependent shape. Raises ``ValueError`` for a 0-d ``x``. Not
    differentiable.
    """
    return _nonzero(x)


@primitive("SearchSorted", real_only=True)
def _searchsorted(x1, x2, *, side="left", sorter=None):
    if len(x1.shape) != 1:
        raise ValueError(f"searchsorted: x1 must be 1-d (sorted ascending), got shape "
                         f"{tuple(x1.shape)}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    xp = _ns(x1)
    if not hasattr(x2, "shape"):  # a Python scalar: a 0-d array of x1's dtype
        x2 = xp.asarray(x2, dtype=x1.dtype)
    return xp.searchsorted(x1, x2, side=side, sorter=sorter)


no_gradient("SearchSorted")


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """The indices at which inserting ``x2``'s elements into ``x1`` keeps it sorted.

    x1: 1-d, sorted ascending unless ``sorter`` (the integer indices that sort it, e.g. from
    ``argsort``) is given; x2: any shape (or a Python scalar). side: ``"left"`` gives the first
    suitable index ``i`` (``x1[i-1] < v <= x1[i]``), ``"right"`` the last
    (``x1[i-1] <= v < x1[i]``). Result: ``x2``'s shape, the default index dtype. Raises
    ``ValueError`` for a non-1-d ``x1`` or another ``side``. Not differentiable.
    """
    if isinstance(sorter, Tensor):
        sorter = sorter._value
    return _searchsorted(x1, x2, side=side, sorter=sorter)


__all__ = ["nonzero", "searchsorted"]
