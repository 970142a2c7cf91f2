"""``tg.Module`` and ``tg.name_scope``: TensorFlow 2's ``tf.Module`` and ``tf.name_scope``.

A :class:`Module` finds its Variables and submodules by walking its attributes (no
registration): an attribute that is a :class:`~tapegrad.Variable` or a ``Module``, or holds
them inside lists, tuples and dicts (to any depth), is collected. The walk is TensorFlow's
``Module._flatten``: attributes in sorted name order, dict entries in sorted key order, list
and tuple entries in order; a module's own leaves first, then each submodule's, depth first;
each object once (the first place it is found). Paths are tuples of attribute names, dict
keys and list indices, ``("encoder", "layers", 0, "kernel")``; :meth:`Module.named_variables`
joins them with ``"/"``.

``name_scope(name)`` prefixes the names of the Variables created inside it, nested scopes
joined by ``"/"`` as in TensorFlow's eager mode (``tf.Variable(0., name="w")`` inside
``tf.name_scope("dense")`` is ``"dense/w"``; TensorFlow's ``":0"`` suffix is not added). A
Module's :attr:`~Module.name_scope` is the scope of its name, entered inside the scopes
active when it was created.
"""
from __future__ import annotations

import functools
import re

from . import _variables
from ._variables import Variable

_CAMEL_TO_SNAKE = re.compile(r"((?<=[a-z0-9])[A-Z]|(?!^)[A-Z](?=[a-z]))")  # TensorFlow's
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class name_scope:  # noqa: N801 - TensorFlow's name
    """A context manager that prefixes the names of Variables created inside it.

    name: a string. Entering gives the new scope, returned by ``__enter__``: ``name + "/"``
    inside the current scope (``"outer/name/"``); a name ending in ``"/"`` is an absolute
    scope, used as it is; ``""`` is the root scope (no prefix). A scope object can be entered
    again, also nested in itself. The scope is per thread. Raises ``ValueError`` if ``name`` is
    not a string (TensorFlow's message).
    """

    def __init__(self, name):
        if not isinstance(name, str):
            raise ValueError(f"name for name_scope must be a string, got {name!r}")
        self._name = name
        self._outer = []

    @property
    def name(self) -> str:
        """The name the scope was created with."""
        return self._name

    def __enter__(self) -> str:
        old = getattr(_variables.name_scopes, "prefix", "")
        name = self._name
        scope = "" if not name else name if name.endswith("/") else f"{old}{name}/"
        self._outer.append(old)
        _variables.name_scopes.prefix = scope
        return scope

    def __exit__(self, *exc):
        _variables.name_scopes.prefix = self._outer.pop()
        return False


def _ordered(keys):
    """Dict keys in sorted order; keys of different types (``{1: ..., "a": ...}``), which do
    not compare, by type name first."""
    try:
        return sorted(keys)
    except TypeError:
        return sorted(keys, key=lambda k: (type(k).__name__, repr(k)))


def _children(value, path):
    """``(path, leaf)`` pairs of a nested structure of dicts (sorted keys), lists and tuples."""
    if isinstance(value, dict):
        for key in _ordered(value):
            yield from _children(value[key], path + (key,))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _children(item, path + (i,))
    else:
        yield path, value


class Module:
    """A container of Variables and other Modules (TensorFlow 2's ``tf.Module``).

    Subclass it, call ``super().__init__(name=...)`` first in ``__init__``, and store
    Variables and submodules as attributes (also inside lists, tuples, dicts); ``variables``,
    ``trainable_variables`` and ``submodules`` find them (see the module docstring for the
    order). name: a Python identifier; default the class name in snake case (``MyDense`` ->
    ``"my_dense"``). Raises ``ValueError`` for a name that is not an identifier.

    Create Variables inside ``with self.name_scope:`` (or decorate methods with
    :meth:`with_name_scope`) to have their names start with the module's scope.
    """

    def __init__(self, name=None):
        if name is None:
            name = _CAMEL_TO_SNAKE.sub(r"_\1", type(self).__name__).lower()
        elif not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise ValueError(f"{name!r} is not a valid module name. Module names must be valid "
                             "Python identifiers (e.g. a valid class name).")
        self._name = name
        with name_scope(name) as scope:
            self._name_scope = name_scope(scope)

    @property
    def name(self) -> str:
        """The module's name (not including the enclosing scopes)."""
        return self._name

    @property
    def name_scope(self) -> name_scope:
        """The module's :class:`name_scope` (``"outer/name/"``), to enter with ``with``."""
        return self._name_scope

    @property
    def variables(self) -> tuple:
        """Every Variable of this module and its submodules, each once, in walk order."""
        return tuple(self._flatten(predicate=_is_variable))

    @property
    def trainable_variables(self) -> tuple:
        """The Variables of :attr:`variables` that are trainable."""
        return tuple(self._flatten(predicate=lambda v: _is_variable(v) and v.trainable))

    @property
    def non_trainable_variables(self) -> tuple:
        """The Variables of :attr:`variables` that are not trainable."""
        return tuple(self._flatten(predicate=lambda v: _is_variable(v) and not v.trainable))

    @property
    def submodules(self) -> tuple:
        """Every Module reachable from this one (not itself), each once, in walk order."""
        return tuple(self._flatten(predicate=_is_module))

    def named_variables(self, trainable_only=False):
        """``(path, variable)`` pairs of :attr:`variables` (or only the trainable ones), the
        path the attribute path where each was first found, joined by ``"/"``:
        ``"encoder/layers/0/kernel"``. Paths are unique and stable while the attributes are."""
        seen = set()
        for path, v in self._flatten(predicate=_is_variable, with_path=True):
            if id(v) not in seen and (v.trainable or not trainable_only):
                seen.add(id(v))
                yield "/".join(map(str, path)), v

    def _flatten(self, recursive=True, predicate=None, attribute_traversal_key=None,
                 with_path=False):
        """The walk behind the properties (TensorFlow's ``tf.Module._flatten``).

        Yields the leaves for which ``predicate`` (default: all) is true, or ``(path, leaf)``
        pairs with ``with_path=True`` (then an object reachable along several paths is
        yielded once per path, as in TensorFlow). ``recursive=False`` stops at this module's
        attributes. ``attribute_traversal_key``: the sort key of attribute names.
        """
        return _walk(self, recursive, predicate or (lambda _: True), attribute_traversal_key,
                     with_path, (), {id(self)}, [])

    @classmethod
    def with_name_scope(cls, method):
        """Decorator: run ``method`` inside its module's :attr:`name_scope`."""
        @functools.wraps(method)
        def in_scope(self, *args, **kwargs):
            with self.name_scope:
                return method(self, *args, **kwargs)
        return in_scope

    def __repr__(self):
        return f"<{type(self).__name__} {getattr(self, '_name', '?')!r}>"


def _is_variable(obj) -> bool:
    return isinstance(obj, Variable)


def _is_module(obj) -> bool:
    return isinstance(obj, Module)


def _walk(module, recursive, predicate, key, with_path, prefix, seen, stack):
    # TensorFlow's _flatten_module: this module's leaves first, then its submodules' in order;
    # a module already on the recursion stack (a cycle) is not entered again
    submodules = []
    recursive = recursive and id(module) not in stack
    for name in sorted(vars(module), key=key):
        for path, leaf in _children(vars(module)[name], (name,)):
            if not with_path:
                if id(leaf) in seen:
                    continue
                seen.add(id(leaf))
            if predicate(leaf):
                yield (prefix + path, leaf) if with_path else leaf
            if recursive and _is_module(leaf):
                submodules.append((prefix + path, leaf))
    stack.append(id(module))
    for path, sub in submodules:
        yield from _walk(sub, recursive, predicate, key, with_path, path, seen, stack)
    stack.pop()


__all__ = ["Module", "name_scope"]
