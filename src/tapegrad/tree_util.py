"""``tg.tree_util``: pytrees with JAX's names and semantics (``jax.tree_util``).

Tuples, lists, dicts (children in sorted key order), namedtuples, ``OrderedDict``,
``defaultdict`` and the classes registered with :func:`register_pytree_node` or
:func:`register_dataclass` are nodes, ``None`` is an empty subtree, everything else is a leaf.
Every tapegrad transform and control-flow construct flattens its arguments with these
functions, so a tree flattens alike in tapegrad and in JAX. The implementation is
``tapegrad._pytree``.
"""
from ._pytree import (PyTreeDef, register_dataclass, register_pytree_node, tree_flatten,
                      tree_leaves, tree_map, tree_structure, tree_unflatten)

__all__ = ["PyTreeDef", "register_dataclass", "register_pytree_node", "tree_flatten",
           "tree_leaves", "tree_map", "tree_structure", "tree_unflatten"]
