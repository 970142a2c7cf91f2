"""The op registry: ``primitive``, ``RegisterGradient``, ``no_gradient``, ``gradient_override_map``.

An *op type* is a name (``"Relu"``) with a forward function on backend arrays, an optional
gradient function, and sample inputs for the tests. Built-in ops are declared with exactly these
public decorators.
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import types

import numpy as np

from . import _backend, _tape
from ._tensor import Tensor, _wrap
from ._tensor import _ids as _tensor_ids

_SCALARS = (bool, int, float, complex)
_SCALAR_TYPES = frozenset(_SCALARS)
_NO_ATTRS = types.MappingProxyType({})  # the (read-only) attrs of an op without attributes


class Arg:
    """A sample float input of a given ``shape`` drawn uniformly from ``domain`` (lo, hi)."""

    __slots__ = ("shape", "domain")

    def __init__(self, shape, domain=None):
        self.shape = tuple(shape)
        self.domain = domain


class Sample:
    """Sample inputs of an op, for the registry-driven gradient tests.

    Positional ``args``: a tuple of ints is a random float input of that shape, an :class:`Arg`
    a random float input with its own domain, anything else is passed as it is (integer index
    arrays, Python scalars, shapes). Keyword ``attrs`` are passed as keyword attributes.
    ``domain``: the default (lo, hi) for random inputs.
    """

    def __init__(self, *args, domain=(-2.0, 2.0), **attrs):
        self.args = args
        self.domain = domain
        self.attrs = attrs

    def materialize(self, rng, dtype=np.float64):
        """Return ``(args, attrs, float_positions)`` with random arrays drawn from ``rng``."""
        args, pos = [], []
        for i, a in enumerate(self.args):
            if isinstance(a, tuple) and all(isinstance(d, int) for d in a):
                a = Arg(a)
            if isinstance(a, Arg):
                lo, hi = a.domain or self.domain
                args.append(rng.uniform(lo, hi, size=a.shape).astype(dtype))
                pos.append(i)
            else:
                args.append(a)
        return args, dict(self.attrs), pos

    def __repr__(self):
        return f"Sample({', '.join(map(repr, self.args))}, attrs={self.attrs})"


class OpDef:
    """The registry entry of one op type."""

    __slots__ = ("type", "forward", "params", "arity", "takes_attrs", "samples", "grad",
                 "differentiable", "public", "surrogate")

    def __init__(self, op_type, forward, samples):
        self.type = op_type
        self.forward = forward
        self.samples = list(samples or ())
        self.grad = None
        self.surrogate = False
        self.differentiable = True
        self.public = None
        self.params, self.arity, self.takes_attrs = (), None, True
        try:
            everything = inspect.signature(forward).parameters.values()
        except (TypeError, ValueError):
            return
        ps = [p for p in everything
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        self.takes_attrs = any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in everything)
        self.params = tuple(p.name for p in ps)
        if all(p.kind is not p.VAR_POSITIONAL and p.default is p.empty for p in ps):
            self.arity = len(ps)  # a fixed number of inputs, none optional

    def param_name(self, i: int) -> str:
        """The name of input ``i`` (``x``, ``x1``, ``arrays[2]``...)."""
        if i < len(self.params):
            return self.params[i]
        return f"{self.params[-1]}[{i - len(self.params) + 1}]" if self.params else f"input {i}"


_OPS: dict[str, OpDef] = {}


def registered_ops() -> dict[str, OpDef]:
    """All registered op types, by name (a copy)."""
    return dict(_OPS)


def _unknown(op_type, what):
    close = difflib.get_close_matches(op_type, _OPS, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    return LookupError(f"{what}: unknown op type {op_type!r}.{hint} Registered op types are "
                       "listed by tg.registered_ops().")


def primitive(op_type: str, *, samples=None):
    """Declare a new op type whose forward runs on backend arrays.

    Decorates ``forward(*arrays, **attrs) -> array | tuple[array, ...]``. The result is the
    public op: call it with Tensors, backend arrays or Python scalars as positional inputs and
    keyword attributes; it returns Tensor(s) and is recorded by active tapes. Give its gradient
    with :func:`RegisterGradient`. ``samples``: a list of :class:`Sample` for the tests.

    Raises ``ValueError`` if ``op_type`` is already registered.
    """
    if not isinstance(op_type, str) or not op_type:
        raise TypeError(f"primitive: op_type must be a non-empty string, got {op_type!r}")

    def decorate(forward):
        if op_type in _OPS:
            raise ValueError(
                f"primitive: op type {op_type!r} is already registered (by "
                f"{_where(_OPS[op_type].forward)}); choose another name"
            )
        opdef = OpDef(op_type, forward, samples)
        _OPS[op_type] = opdef
        op = _make_op(opdef)
        functools.update_wrapper(op, forward)
        op.op_type = op_type
        opdef.public = op
        return op

    return decorate


def _make_op(opdef):
    forward = opdef.forward
    record = _tape.record
    state = _tape._state
    T = Tensor
    new = object.__new__
    ids = _tensor_ids
    scalar = _SCALAR_TYPES

    def wrap(out):
        if type(out) is tuple:
            return tuple(_wrap(o) for o in out)
        return _wrap(out)

    # fast paths for ops of one or two inputs and no attributes (elementwise ops, matmul): no
    # tape -> one backend call plus a few lookups. Their forward may carry `_numpy_fn`, called
    # directly on NumPy arrays. Other ops take the general path.
    fast = getattr(forward, "_numpy_fn", None) or forward
    nd = np.ndarray
    if opdef.arity == 1 and not opdef.takes_attrs:
        def op(x, /):
            v = x._value if isinstance(x, T) else _raw(x)
            out = fast(v) if type(v) is nd else forward(v)
            if state.tapes:
                return record(opdef, (x,), _NO_ATTRS, out)
            if type(out) is tuple:
                return wrap(out)
            t = new(T)
            t._value = out
            t._id = next(ids)
            return t
    elif opdef.arity == 2 and not opdef.takes_attrs:
        def op(x1, x2, /):
            v1 = x1._value if isinstance(x1, T) else x1 if type(x1) in scalar else _raw(x1)
            v2 = x2._value if isinstance(x2, T) else x2 if type(x2) in scalar else _raw(x2)
            out = fast(v1, v2) if type(v1) is nd else forward(v1, v2)
            if state.tapes:
                return record(opdef, (x1, x2), _NO_ATTRS, out)
            if type(out) is tuple:
                return wrap(out)
            t = new(T)
            t._value = out
            t._id = next(ids)
            return t
    else:
        def op(*args, **attrs):
            out = forward(*[a._value if isinstance(a, T) else _raw(a) for a in args], **attrs)
            if state.tapes:
                return record(opdef, args, attrs, out)
            return wrap(out)

    return op


def _raw(a):
    """A non-Tensor op input as a backend value: scalars stay, sequences and (under another
    default backend) NumPy arrays go to the default namespace, backend arrays pass."""
    if isinstance(a, _SCALARS) or a is None:
        return a
    if isinstance(a, (list, tuple, np.ndarray, np.generic)):
        if isinstance(a, (list, tuple)) or _backend.default_namespace() is not np:
            return _backend.asarray(a)
    return a


def RegisterGradient(op_type: str, *, surrogate: bool = False):  # noqa: N802 - TF's name
    """Register ``fn(op, *output_grads)`` as the gradient of ``op_type``.

    ``op`` is the :class:`~tapegrad._tape.Operation` record (``.type``, ``.inputs``,
    ``.outputs``, ``.attrs``, ``get_attr``); ``output_grads`` has one Tensor per output. ``fn``
    returns one gradient (a Tensor or ``None``) per input, or a single Tensor for a one-input op.
    Write it with tapegrad ops so that it is itself differentiable.

    ``surrogate=True`` marks a gradient that is intentionally not the derivative of the
    forward (straight-through, leaky): ``tg.test`` reports it instead of failing.

    Raises ``ValueError`` if ``op_type`` already has a gradient, ``LookupError`` if it is not
    a registered op type (declare it with :func:`primitive` first).
    """

    def decorate(fn):
        opdef = _OPS.get(op_type)
        if opdef is None:
            raise _unknown(op_type, "RegisterGradient")
        if opdef.grad is not None or not opdef.differentiable:
            raise ValueError(
                f"RegisterGradient: op type {op_type!r} already has a gradient "
                f"({_where(opdef.grad) if opdef.grad else 'no_gradient'}); use "
                "tg.gradient_override_map to use another gradient in a block of code"
            )
        opdef.grad = fn
        opdef.surrogate = bool(surrogate)
        return fn

    return decorate


def no_gradient(op_type: str) -> None:
    """Declare that ``op_type`` is not differentiable: its inputs receive ``None`` gradients."""
    opdef = _OPS.get(op_type)
    if opdef is None:
        raise _unknown(op_type, "no_gradient")
    opdef.differentiable = False


@contextlib.contextmanager
def gradient_override_map(op_type_map: dict):
    """Within the block, ops of type ``k`` are recorded with the gradient of op type ``v``.

    Works eagerly under :class:`GradientTape` (the override is fixed when the op is recorded).
    Raises ``LookupError`` naming the closest registered names if a type is unknown.
    """
    for k, v in op_type_map.items():
        for t in (k, v):
            if t not in _OPS:
                raise _unknown(t, "gradient_override_map")
    state = _tape._state
    saved = state.overrides
    state.overrides = {**saved, **op_type_map}
    _tape._overriding += 1
    try:
        yield
    finally:
        _tape._overriding -= 1
        state.overrides = saved


def _where(fn) -> str:
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", repr(fn))
    if code is None:
        return name
    return f"{name} at {code.co_filename}:{code.co_firstlineno}"
