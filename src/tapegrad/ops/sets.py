"""Set functions (Array API): ``unique_all``, ``unique_counts``, ``unique_inverse``,
``unique_values``. Their results are data-dependent selections and integer counts, so none is
differentiable. Results with several parts are named tuples, as the standard specifies.

Each function flattens ``x``. NaNs are all distinct (each NaN is its own unique value) and
``-0.0`` equals ``+0.0``, as the standard asks; the order of the unique values is the
backend's (sorted on NumPy).
"""
from __future__ import annotations

from typing import NamedTuple

from .._backend import namespace as _ns
from .._registry import no_gradient, primitive
from .._tensor import Tensor


class UniqueAllResult(NamedTuple):
    """``values``, ``indices`` (first occurrence in the flattened ``x``), ``inverse_indices``
    (``x``'s shape), ``counts``."""

    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    """``values`` and their ``counts``."""

    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    """``values`` and ``inverse_indices`` (``x``'s shape; ``values[inverse_indices] == x``)."""

    values: Tensor
    inverse_indices: Tensor


@primitive("UniqueAll")
def _unique_all(x):
    return tuple(_ns(x).unique_all(x))


@primitive("UniqueCounts")
def _unique_counts(x):
    return tuple(_ns(x).unique_counts(x))


@primitive("UniqueInverse")
def _unique_inverse(x):
    return tuple(_ns(x).unique_inverse(x))


@primitive("UniqueValues")
def _unique_values(x):
    return _ns(x).unique_values(x)


for _t in ("UniqueAll", "UniqueCounts", "UniqueInverse", "UniqueValues"):
    no_gradient(_t)


def unique_all(x, /):
    """Unique elements of ``x`` with first-occurrence indices, inverse indices and counts.

    x: any shape (flattened). Returns ``UniqueAllResult(values, indices, inverse_indices,
    counts)``: 1-d ``values`` of ``x``'s dtype, 1-d ``indices`` and ``counts`` and
    ``x``-shaped ``inverse_indices`` of the default index dtype. Not differentiable.
    """
    return UniqueAllResult(*_unique_all(x))


def unique_counts(x, /):
    """Unique elements of ``x`` and how often each occurs: ``UniqueCountsResult(values,
    counts)``, both 1-d. Not differentiable."""
    return UniqueCountsResult(*_unique_counts(x))


def unique_inverse(x, /):
    """Unique elements of ``x`` and the indices that rebuild ``x`` from them:
    ``UniqueInverseResult(values, inverse_indices)``, the latter of ``x``'s shape. Not
    differentiable."""
    return UniqueInverseResult(*_unique_inverse(x))


def unique_values(x, /):
    """The unique elements of ``x`` (flattened), a 1-d tensor of ``x``'s dtype. Not
    differentiable."""
    return _unique_values(x)


__all__ = ["unique_all", "unique_counts", "unique_inverse", "unique_values"]
