"""Gradient hooks: ``register_hook(tensor, fn)`` and ``Tensor.register_hook``.

A hook sees (and may replace) the gradient flowing into one tensor during ``tape.gradient``.
Hooks are kept by tensor id and die with their tensor; the tape runs them through
:func:`run_hooks` when a tensor's gradient is complete.
"""
from __future__ import annotations

import weakref

from . import _structural
from ._tensor import Tensor
from .errors import GradientShapeError, describe_fn

HOOKS: dict = {}  # tensor id -> gradient hooks, in registration order


def register_hook(tensor, fn):
    """Call ``fn(grad)`` with the gradient flowing into ``tensor`` during ``tape.gradient``.

    ``tensor``: a Tensor or Variable. ``fn`` returns ``None`` (keep the gradient: inspect it) or
    a Tensor of the same shape and dtype that replaces it for everything upstream. The hook
    runs once per ``gradient`` call, when the tensor's gradient is complete. Returns a handle
    whose ``remove()`` unregisters it; hooks die with their tensor.
    Raises ``TypeError`` if ``tensor`` is not a Tensor; at gradient time
    ``GradientShapeError`` if ``fn`` returns a gradient of another shape or dtype.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"register_hook: expected a Tensor or Variable, got {type(tensor).__name__}")
    key = tensor._id
    if key not in HOOKS:
        HOOKS[key] = []
        weakref.finalize(tensor, HOOKS.pop, key, None)
    HOOKS[key].append(fn)
    return _HookHandle(key, fn)


_structural.extend(register_hook=register_hook)


class _HookHandle:
    """What :func:`register_hook` returns: ``remove()`` unregisters the hook."""

    def __init__(self, key, fn):
        self._key, self._fn = key, fn

    def remove(self):
        """Unregister the hook (no error if it is already gone)."""
        fns = HOOKS.get(self._key, [])
        if self._fn in fns:
            fns.remove(self._fn)


def run_hooks(key, g):
    """The gradient ``g`` of tensor id ``key`` after its hooks ran, in order."""
    for fn in list(HOOKS.get(key, ())):
        new = fn(g)
        if new is None:
            continue
        if not isinstance(new, Tensor) or new.shape != g.shape or new.dtype != g.dtype:
            got = (f"shape {new.shape} and dtype {new.dtype}" if isinstance(new, Tensor)
                   else f"a {type(new).__name__}")
            raise GradientShapeError(
                f"the gradient hook {describe_fn(fn)} returned {got} for a gradient of shape "
                f"{g.shape} and dtype {g.dtype}; return None or a Tensor of the same shape and "
                "dtype")
        g = new
    return g
