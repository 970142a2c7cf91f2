"""Pytrees: nested tuples, lists and dicts of leaves, flattened in JAX's order.

Dicts are flattened in sorted key order and ``None`` is an empty subtree, as in JAX, so a
structure flattened here matches ``jax.tree_util``'s. Used by the functional transforms and by
control flow (``tg.cond``, ``tg.lax.scan``, ...); JAX is not needed.
"""
from __future__ import annotations

import itertools


class _Leaf:
    """The leaf marker of a tree structure (prints as ``*``)."""

    def __repr__(self):
        return "*"


_LEAF = _Leaf()


def tree_flatten(tree, none_is_leaf=False):
    """``(leaves, structure)``: the leaves of ``tree`` in JAX's order and a comparable
    structure (nested ``(type, children)`` pairs; ``_LEAF`` for a leaf). ``none_is_leaf``:
    ``None`` is a leaf (TensorFlow's ``nest``: a missing gradient), not an empty subtree."""
    leaves = []
    return leaves, _structure(tree, leaves, none_is_leaf)


def _structure(x, leaves, none_is_leaf):
    # module-level recursion: a nested recursive function would be a reference cycle that
    # keeps `leaves` (arrays) alive until the garbage collector runs
    if x is None and not none_is_leaf:
        return None
    if isinstance(x, (list, tuple)):
        return type(x), tuple(_structure(c, leaves, none_is_leaf) for c in x)
    if isinstance(x, dict):
        return dict, tuple((k, _structure(x[k], leaves, none_is_leaf)) for k in sorted(x))
    leaves.append(x)
    return _LEAF


def tree_unflatten(structure, leaves):
    """The tree of ``structure`` with ``leaves`` (an iterable) in place of its leaves."""
    return _build(structure, iter(leaves))


def _build(structure, it):
    if structure is None:
        return None
    if structure is _LEAF:
        return next(it)
    kind, children = structure
    if kind is dict:
        return {k: _build(c, it) for k, c in children}
    return kind(_build(c, it) for c in children)


def show(structure):
    """A structure printed with ``*`` for its leaves, for error messages."""
    return repr(tree_unflatten(structure, itertools.repeat(_LEAF)))
