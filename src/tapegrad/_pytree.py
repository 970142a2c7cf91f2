"""Pytrees with JAX's names and semantics (public as ``tg.tree_util``).

A pytree is a nest of containers whose other objects are its leaves. The containers
("nodes") are JAX's: tuples, lists, dicts (children in sorted key order), namedtuples (rebuilt
with ``type(x)(*children)``), ``collections.OrderedDict`` (insertion order) and
``defaultdict`` (sorted keys), classes registered with :func:`register_pytree_node` or
:func:`register_dataclass`; ``None`` is an empty subtree (no leaf). Everything else is a leaf,
subclasses of tuple, list and dict included. So the leaves and the structure of a tree are
``jax.tree_util``'s (``tests/test_tree_util.py`` checks it), and JAX is not needed.

A structure is a :class:`PyTreeDef`: equal for equal structures, hashable, printed as JAX
prints one. Inside, a node is ``(type, aux, children)`` (``aux``: the dict's sorted keys, a
registered class's auxiliary data), a leaf ``_LEAF``, ``None`` an empty subtree: plain tuples
built and compared by module-level recursion, since the transforms and control flow flatten
on every call.

Classes registered here are registered with ``jax.tree_util`` as well (when JAX is imported,
or else when tapegrad first sets JAX up), so they cross into ``jax.jit`` and ``jax.vmap``,
where ``tg.function`` and ``tg.vmap`` flatten with JAX's trees.
"""
from __future__ import annotations

import collections
import dataclasses
import functools

from . import config


class _Leaf:
    """The leaf marker of a tree structure (prints as ``*``)."""

    __slots__ = ()

    def __repr__(self):
        return "*"


_LEAF = _Leaf()
_NAMEDTUPLE = "namedtuple"  # the aux of a namedtuple node: rebuilt with type(x)(*children)

# type -> (flatten(x) -> (children, aux), unflatten(aux, children) -> x, name for messages)
_NODES = {}


class PyTreeDef:
    """The structure of a pytree (JAX's ``PyTreeDef``): what :func:`tree_flatten` returns
    beside the leaves. Equal structures compare equal and hash alike; ``repr`` prints it as JAX
    does (``PyTreeDef((*, {'a': *}))``). ``num_leaves``: the number of its leaves."""

    __slots__ = ("_node", "num_leaves")

    def __init__(self, node, num_leaves):
        self._node = node
        self.num_leaves = num_leaves

    def __eq__(self, other):
        return isinstance(other, PyTreeDef) and self._node == other._node

    def __hash__(self):
        return hash(self._node)

    def __repr__(self):
        return f"PyTreeDef({show(self)})"

    def unflatten(self, leaves):
        """``tree_unflatten(self, leaves)``."""
        return tree_unflatten(self, leaves)


# --- flattening --------------------------------------------------------------------------------
def tree_flatten(tree, is_leaf=None, none_is_leaf=False):
    """``(leaves, structure)`` of ``tree`` (JAX's ``jax.tree_util.tree_flatten``): the leaves
    in JAX's order (a list) and a :class:`PyTreeDef`.

    ``is_leaf``: a function of a subtree; where it returns true the subtree is one leaf.
    ``none_is_leaf``: ``None`` is a leaf (TensorFlow's ``nest``, where ``None`` is a missing
    gradient), not an empty subtree. Raises ``TypeError`` if a dict's keys cannot be sorted.
    """
    leaves = []
    return leaves, PyTreeDef(_structure(tree, leaves, none_is_leaf, is_leaf), len(leaves))


def _structure(x, leaves, none_is_leaf, is_leaf):
    # module-level recursion: a nested recursive function would be a reference cycle that
    # keeps `leaves` (arrays) alive until the garbage collector runs; the kinds tested inline
    # (no call per leaf), the common ones first
    t = type(x)
    if is_leaf is None or not is_leaf(x):
        if t is tuple or t is list:
            return t, None, tuple([_structure(c, leaves, none_is_leaf, is_leaf) for c in x])
        if t is dict:
            keys = _sorted_keys(x)
            return dict, keys, tuple([_structure(x[k], leaves, none_is_leaf, is_leaf)
                                      for k in keys])
        if x is None:
            if not none_is_leaf:
                return None
        else:
            node = _NODES.get(t)
            if node is not None:
                children, aux = node[0](x)
                return t, aux, tuple([_structure(c, leaves, none_is_leaf, is_leaf)
                                      for c in children])
            if issubclass(t, tuple) and hasattr(t, "_fields"):  # a namedtuple
                return t, _NAMEDTUPLE, tuple([_structure(c, leaves, none_is_leaf, is_leaf)
                                              for c in x])
    leaves.append(x)
    return _LEAF


def _sorted_keys(d):
    try:
        return tuple(sorted(d))
    except TypeError as e:
        raise TypeError(f"tree_flatten: the dict keys {list(d)!r} cannot be sorted ({e}); a "
                        "pytree's dict children are in sorted key order, as in JAX: use keys "
                        "of one type") from None


def _other_node(x, t):
    """``(aux, children)`` if ``x`` (of type ``t``) is a node of a kind other than tuple, list
    or dict (registered, or a namedtuple), else ``None`` (a leaf)."""
    node = _NODES.get(t)
    if node is not None:
        children, aux = node[0](x)
        return aux, children
    if issubclass(t, tuple) and hasattr(t, "_fields"):
        return _NAMEDTUPLE, x
    return None


def _level(x):
    """``(type, aux, children)`` of ``x`` one level down, or ``None`` for a leaf or ``None``."""
    t = type(x)
    if t is tuple or t is list:
        return t, None, x
    if t is dict:
        keys = _sorted_keys(x)
        return dict, keys, [x[k] for k in keys]
    if x is None:
        return None
    level = _other_node(x, t)
    return None if level is None else (t, *level)


def tree_leaves(tree, is_leaf=None):
    """The leaves of ``tree`` in JAX's order, a list (``jax.tree_util.tree_leaves``)."""
    leaves = []
    _structure(tree, leaves, False, is_leaf)
    return leaves


def tree_structure(tree, is_leaf=None):
    """The :class:`PyTreeDef` of ``tree`` (``jax.tree_util.tree_structure``)."""
    return tree_flatten(tree, is_leaf)[1]


# --- rebuilding --------------------------------------------------------------------------------
def tree_unflatten(structure, leaves):
    """The tree of ``structure`` (a :class:`PyTreeDef`) with ``leaves`` in place of its leaves
    (``jax.tree_util.tree_unflatten``). ``leaves``: an iterable; if it has a length it must be
    ``structure.num_leaves``, else as many are taken from it as there are leaves. Raises
    ``ValueError`` saying how many leaves were expected if there are too few or too many."""
    if hasattr(leaves, "__len__") and len(leaves) != structure.num_leaves:
        raise _count_error(structure, len(leaves))
    try:
        return _build(structure._node, iter(leaves))
    except StopIteration:
        raise _count_error(structure, "fewer") from None


def _count_error(structure, got):
    return ValueError(f"tree_unflatten: the structure {show(structure)} has "
                      f"{structure.num_leaves} leaves, but {got} were given; give one leaf "
                      "per `*`")


def _build(node, it):
    if node is _LEAF:
        return next(it)
    if node is None:
        return None
    t, aux, children = node
    values = [_build(c, it) for c in children]
    if t is tuple:
        return tuple(values)
    if t is list:
        return values
    if t is dict:
        return dict(zip(aux, values))
    if aux is _NAMEDTUPLE:
        return t(*values)
    return _NODES[t][1](aux, values)


def tree_map(f, tree, *rest, is_leaf=None):
    """``f`` applied leaf by leaf (``jax.tree_util.tree_map``): the tree of ``tree``'s
    structure whose leaves are ``f(leaf, *others)``, ``others`` being the subtrees of ``rest``
    at that leaf's place (each of ``rest`` has ``tree``'s structure, or a deeper one at its
    leaves). Raises ``ValueError`` naming the place where a tree of ``rest`` differs."""
    leaves, structure = tree_flatten(tree, is_leaf)
    others = [_up_to(structure._node, r, [], "", k + 1) for k, r in enumerate(rest)]
    return tree_unflatten(structure, [f(*xs) for xs in zip(leaves, *others)])


def _up_to(node, x, out, path, k):
    """Append to ``out`` the subtrees of ``x`` at the leaves of ``node`` (JAX's
    ``flatten_up_to``); ``path``, ``k``: where (for the error)."""
    if node is _LEAF:
        out.append(x)
        return out
    level = _level(x)
    if node is None and x is None:
        return out
    children = None if level is None else list(level[2])
    if (node is None or level is None or level[:2] != node[:2]
            or len(children) != len(node[2])):
        raise ValueError(f"tree_map: tree {k} of `rest` does not have the first tree's "
                         f"structure at {'the root' if not path else path}: expected "
                         f"{_show(node)}, got {_show(_structure(x, [], False, None))}; give "
                         "trees of the first tree's structure")
    t, aux = level[:2]
    keys = aux if t is dict else (t._fields if aux is _NAMEDTUPLE else range(len(node[2])))
    for key, c, child in zip(keys, node[2], children):
        _up_to(c, child, out, f"{path}[{key!r}]", k)
    return out


# --- registering classes -----------------------------------------------------------------------
def register_pytree_node(nodetype, flatten_func, unflatten_func):
    """Make the class ``nodetype`` a pytree node (``jax.tree_util.register_pytree_node``):
    ``flatten_func(x)`` returns ``(children, aux_data)`` (an iterable of children; hashable,
    comparable auxiliary data kept in the structure), ``unflatten_func(aux_data, children)``
    rebuilds it. Also registered with ``jax.tree_util`` (now if JAX is imported, else when
    tapegrad first sets JAX up). Raises ``ValueError`` if ``nodetype`` is already a node."""
    if nodetype in _NODES or nodetype in (tuple, list, dict, type(None)):
        raise ValueError(f"register_pytree_node: {nodetype.__name__} is already a pytree node "
                         "type; register each class once")
    _NODES[nodetype] = (flatten_func, unflatten_func)
    config.when_jax_loaded(functools.partial(_register_with_jax, "register_pytree_node",
                                             nodetype, flatten_func, unflatten_func))


def register_dataclass(nodetype, data_fields=None, meta_fields=None):
    """Make the dataclass (or class) ``nodetype`` a pytree node whose children are its
    ``data_fields`` and whose auxiliary data are its ``meta_fields`` (names of attributes;
    ``jax.tree_util.register_dataclass``); rebuilt by ``nodetype(**fields)``. With neither
    given, ``nodetype`` must be a dataclass: its fields are data fields, except those with
    ``field(metadata={"static": True})`` (meta fields, as in JAX). Returns ``nodetype`` (a
    decorator). Raises ``TypeError`` if only one of the two is given, or neither for a class
    that is not a dataclass; ``ValueError`` if a name is in both, or as
    :func:`register_pytree_node`."""
    if (data_fields is None) != (meta_fields is None):
        raise TypeError(f"register_dataclass: give both data_fields and meta_fields, or neither "
                        f"(for a dataclass); got data_fields={data_fields!r}, "
                        f"meta_fields={meta_fields!r}")
    if data_fields is None:
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(f"register_dataclass: {nodetype!r} is not a dataclass; give its "
                            "data_fields and meta_fields")
        fields = [f for f in dataclasses.fields(nodetype) if f.init]
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
    if set(data_fields) & set(meta_fields):
        raise ValueError(f"register_dataclass: {sorted(set(data_fields) & set(meta_fields))} "
                         "are both data and meta fields; name each field once")
    if nodetype in _NODES:
        raise ValueError(f"register_dataclass: {nodetype.__name__} is already a pytree node "
                         "type; register each class once")
    _NODES[nodetype] = (functools.partial(_fields_of, data_fields, meta_fields),
                        functools.partial(_from_fields, nodetype, data_fields, meta_fields))
    config.when_jax_loaded(functools.partial(_register_with_jax, "register_dataclass",
                                             nodetype, list(data_fields), list(meta_fields)))
    return nodetype


def _fields_of(data_fields, meta_fields, x):
    return ([getattr(x, n) for n in data_fields], tuple(getattr(x, n) for n in meta_fields))


def _from_fields(nodetype, data_fields, meta_fields, aux, children):
    return nodetype(**dict(zip(data_fields, children)), **dict(zip(meta_fields, aux)))


def _register_with_jax(how, nodetype, a, b, jax):
    try:
        getattr(jax.tree_util, how)(nodetype, a, b)
    except ValueError as e:  # the user registered it with JAX too: JAX knows it already
        if "uplicate" not in str(e):
            raise


def _ordered_dict_children(x):
    return list(x.values()), tuple(x)


def _defaultdict_children(x):
    keys = _sorted_keys(x)
    return [x[k] for k in keys], (x.default_factory, keys)


def _defaultdict_from(aux, children):
    return collections.defaultdict(aux[0], zip(aux[1], children))


def _ordered_dict_from(keys, children):
    return collections.OrderedDict(zip(keys, children))


# JAX's other built-in nodes; JAX has them already, so not through register_pytree_node
_NODES[collections.OrderedDict] = (_ordered_dict_children, _ordered_dict_from)
_NODES[collections.defaultdict] = (_defaultdict_children, _defaultdict_from)


# --- printing ----------------------------------------------------------------------------------
def show(structure):
    """A structure printed with ``*`` for its leaves, for error messages: ``(*, {'a': *})``;
    a namedtuple as ``P(a=*, b=*)``, a registered class as ``Name[aux](*, *)``."""
    return _show(structure._node)


def _show(node):
    if node is _LEAF:
        return "*"
    if node is None:
        return "None"
    t, aux, children = node
    parts = [_show(c) for c in children]
    if t is tuple:
        return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
    if t is list:
        return f"[{', '.join(parts)}]"
    if t is dict:
        return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(aux, parts)) + "}"
    if aux is _NAMEDTUPLE:
        return f"{t.__name__}({', '.join(f'{k}={p}' for k, p in zip(t._fields, parts))})"
    return f"{t.__name__}[{aux!r}]({', '.join(parts)})"


def leaf_paths(structure, prefix):
    """The name of each leaf of ``structure``, in flattening order, as Python would index
    it from ``prefix``: ``prefix[0]['h']``, ``prefix.field`` for a namedtuple's field,
    ``prefix[k]`` for the ``k``-th child of a registered class."""
    out = []
    _paths(structure._node, prefix, out)
    return out


def _paths(node, prefix, out):
    if node is _LEAF:
        out.append(prefix)
        return
    if node is None:
        return
    t, aux, children = node
    if t is dict or t is collections.OrderedDict or t is collections.defaultdict:
        names = [f"[{k!r}]" for k in (aux[1] if t is collections.defaultdict else aux)]
    elif aux is _NAMEDTUPLE:
        names = [f".{k}" for k in t._fields]
    else:
        names = [f"[{k}]" for k in range(len(children))]
    for name, c in zip(names, children):
        _paths(c, prefix + name, out)
