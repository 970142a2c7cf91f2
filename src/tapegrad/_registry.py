"""The op registry: ``primitive``, ``RegisterGradient``, ``no_gradient``, ``gradient_override_map``.

An *op type* is a name (``"Relu"``) with a forward function on backend arrays, an optional
gradient function (and what it reads of the record), and sample inputs for the tests. Built-in
ops are declared with exactly these public decorators. A gradient may be registered before its
op type is defined (TensorFlow allows it, and gradient-only names are what
``gradient_override_map`` maps to).
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import linecache
import os
import types
import warnings

import numpy as np

from . import _backend, _records, _structural, config
from ._records import READS, record
from ._samples import Arg, Sample  # noqa: F401 - op modules declare samples through here
from ._tensor import _SCALARS, Tensor, _raw, _wrap
from ._tensor import _ids as _tensor_ids
from .errors import RegistrationError, describe_fn

_SCALAR_TYPES = frozenset(_SCALARS)
_NO_ATTRS = types.MappingProxyType({})  # the (read-only) attrs of an op without attributes


class OpDef:
    """The registry entry of one op type.

    ``type``, ``forward`` (on backend arrays; ``None`` for a type that only has a gradient so
    far), ``grad``, ``reads`` (what ``grad`` reads of a record, a bit set: 1 inputs, 2
    outputs), ``differentiable``, ``surrogate``, ``jvp`` (the forward-mode rule, or None),
    ``samples``, ``public`` (the op function), ``real_only`` (complex inputs are refused),
    ``vmap_method`` (how a host callback of the forward is batched: ``primitive``'s),
    ``optional`` (the names of the inputs that may be None), ``params``/``arity`` (from the
    forward's signature), ``hermitian``, ``gauge`` and ``linear`` (what the gradient
    self-check, ``tg.debugging.enable_gradient_checks``, must know: ``primitive``'s).
    """

    __slots__ = ("type", "forward", "params", "arity", "takes_attrs", "samples", "grad",
                 "differentiable", "public", "surrogate", "reads", "jvp", "real_only",
                 "vmap_method", "optional", "hermitian", "gauge", "linear")
    is_custom = False
    is_construct = False  # a control-flow construct (:func:`construct`), not a primitive

    def __init__(self, op_type, forward=None, samples=None):
        self.type = op_type
        self.real_only = False
        self.vmap_method = "sequential"
        self.optional = frozenset()
        self.hermitian, self.gauge, self.linear = frozenset(), None, frozenset()
        self.samples = list(samples or ())
        self.grad = None
        self.surrogate = False
        self.differentiable = True
        self.reads = READS["both"]
        self.jvp = None
        self.public = None
        self.define(forward)

    def define(self, forward):
        """Set the forward function and read its signature."""
        self.forward = forward
        self.params, self.arity, self.takes_attrs = (), None, True
        if forward is None:
            return
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

    @property
    def defined(self) -> bool:
        """False for a type that has a registered gradient but no forward (``primitive``) yet."""
        return self.forward is not None

    @property
    def forward_function(self):
        """The forward on backend arrays (``OperationView.forward_function``)."""
        return self.forward

    @property
    def reads_name(self) -> str:
        """``reads`` as its name: ``"inputs"``, ``"outputs"``, ``"both"`` or ``"none"``."""
        return next(k for k, v in READS.items() if v == self.reads)

    def replay(self, attrs):
        """A function of the op's positional inputs that runs the op again with ``attrs``."""
        public = self.public

        def forward(*inputs):
            return public(*inputs, **attrs)

        return forward

    def param_name(self, i: int) -> str:
        """The name of input ``i`` (``x``, ``x1``, ``arrays[2]``...)."""
        if i < len(self.params):
            return self.params[i]
        return f"{self.params[-1]}[{i - len(self.params) + 1}]" if self.params else f"input {i}"

    def __repr__(self):
        state = "" if self.defined else ", gradient only (never defined with tg.primitive)"
        return f"<OpDef {self.type!r}{state}>"


class CallDef(OpDef):
    """The op-type entry of one recorded call that is not a registered primitive: a
    ``custom_gradient`` call, a compiled ``tg.function`` call, a compiled control-flow
    construct, a gradient computed on raw arrays. Each call makes its own (it is not in the
    registry); tapes, accumulators and views read it through :class:`OpDef`'s protocol.

    Args: ``op_type`` (``"CustomGradient:f"``, ``"Function:f"``, ``"Scan"``...); ``names`` of
    the inputs (``param_name``); ``grad(op, *dys)``; ``jvp`` (or ``None``: forward mode takes
    the transposed VJP); ``replay``: the call again as a function of its inputs (``None``: it
    cannot be replayed, ``replay_error`` says why); ``function``: the user's function, for
    views; ``variables``: the Variables read by the call, its last inputs; ``surrogate``;
    ``reads`` (a ``READS`` bit set); ``is_custom``: a user's gradient; ``rules``: a
    construct's ``(vjp, jvp)`` of this call, which its op type's registered rules run
    (:func:`construct`).
    """

    __slots__ = ("names", "function", "replay_error", "is_custom", "variables", "rules")

    def __init__(self, op_type, names, grad, *, jvp=None, replay=None, function=None,
                 variables=(), replay_error="", surrogate=False, reads=READS["both"],
                 is_custom=True, rules=None):
        super().__init__(op_type)
        self.variables, self.rules = tuple(variables), rules
        self.names, self.grad, self.jvp, self.forward = tuple(names), grad, jvp, replay
        self.function, self.replay_error, self.surrogate = function, replay_error, surrogate
        self.reads, self.is_custom = reads, is_custom

    @property
    def forward_function(self):
        """The user's function (``OperationView.forward_function``), or ``None``."""
        return self.function

    def replay(self, attrs):
        """The call again, as a function of its inputs; raises if it cannot be replayed."""
        if self.forward is not None:
            return self.forward

        def forward(*inputs):
            raise NotImplementedError(f"a {self.type} op cannot be replayed from its record: "
                                      f"{self.replay_error}")

        return forward

    def param_name(self, i: int) -> str:
        return self.names[i] if i < len(self.names) else f"input {i}"

    def __repr__(self):
        return f"<CallDef {self.type!r}>"


def variable_names(variables) -> list:
    """Input names for Variables read by a call, after its arguments: ``variables[k] (name)``."""
    return [f"variables[{k}] ({v.name})" for k, v in enumerate(variables)]


_OPS: dict[str, OpDef] = {}


def registered_ops() -> dict[str, OpDef]:
    """All registered op types, by name (a copy), as :class:`OpDef` entries.

    A type registered with ``RegisterGradient`` but never defined with ``primitive`` is
    included; its entry's ``defined`` is False.
    """
    return dict(_OPS)


def _entry(op_type) -> OpDef:
    """The registry entry of ``op_type``, made (without a forward) if there is none yet."""
    opdef = _OPS.get(op_type)
    if opdef is None:
        opdef = _OPS[op_type] = OpDef(op_type)
    return opdef


def _check_type_name(op_type, what):
    if not isinstance(op_type, str) or not op_type:
        raise TypeError(f"{what}: op_type must be a non-empty string (an op type name such as "
                        f"'Relu'), got {op_type!r} of type {type(op_type).__name__}")


def _unknown(op_type, what):
    if not isinstance(op_type, str):
        return TypeError(f"{what}: op types are strings, got {op_type!r} of type "
                         f"{type(op_type).__name__}")
    close = difflib.get_close_matches(op_type, _OPS, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    return LookupError(f"{what}: unknown op type {op_type!r}.{hint} Registered op types are "
                       "listed by tg.registered_ops().")


VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")


def _positions(op_type, name, value):
    """``primitive``'s ``hermitian`` or ``linear``: a tuple of input positions, or TypeError."""
    value = tuple(value) if isinstance(value, (tuple, list)) else value
    if not isinstance(value, tuple) or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in value):
        raise TypeError(f"primitive({op_type!r}): {name} must be a tuple of input positions "
                        f"(non-negative ints, such as (0,)), got {value!r}")
    return value


def primitive(op_type: str, *, samples=None, real_only: bool = False,
              vmap_method: str = "sequential", optional=(), hermitian=(), gauge=None,
              linear=()):
    """Declare a new op type whose forward runs on backend arrays.

    Decorates ``forward(*arrays, **attrs) -> array | tuple[array, ...]``. The result is the
    public op: call it with Tensors, backend arrays or Python scalars as positional inputs and
    keyword attributes; it returns Tensor(s) and is recorded by active tapes. Give its gradient
    with :func:`RegisterGradient` (before or after). ``samples``: a list of :class:`Sample`
    for the tests. ``real_only=True`` declares an op of real numbers (an order, a kink, a
    rounding: ``relu``, ``maximum``, ``floor``, comparisons, as TensorFlow and the Array API
    define them): a complex input raises ``TypeError`` naming the op and the input, instead of
    a result that silently drops or orders the imaginary part.

    ``vmap_method``: how a forward that needs concrete values (NumPy code), which runs as a
    host callback (``jax.pure_callback``) on traced values, is called under ``tg.vmap``; JAX's
    ``pure_callback`` argument of that name. ``"sequential"`` (the default): once per example,
    on one example's arrays, which is right for any forward. ``"expand_dims"``: once for the
    whole batch, each batched input with a new leading axis of the batch size and each
    unbatched one with a leading axis of size 1; ``"broadcast_all"``: the same with every
    input broadcast to the batch size. Declare either only for a forward that computes each
    leading index independently and broadcasts over leading axes (elementwise NumPy code,
    code written with ``axis=-1`` or ``...``): it must return outputs with the same leading
    axes (for nested ``tg.vmap`` calls, one per level). The values are then those of the
    per-example calls, from one call.

    ``optional``: the names of the forward's inputs that may be None (``clip``'s bounds); a
    None at any other input raises ``TypeError`` naming the op and the input.

    For the gradient self-check (``tg.debugging.enable_gradient_checks``), of an op whose
    gradient is right only in a subspace: ``hermitian``, the positions of the inputs read as
    symmetric (Hermitian) matrices whose gradient is the symmetric one (``eigh``: one
    triangle read), which the check perturbs along symmetric (Hermitian) directions only;
    ``gauge(op, cotangents) -> cotangents``, for outputs defined up to a gauge (complex
    singular vectors' phases), the projection of a list of cotangents (Tensors, one per
    output) onto the gauge-invariant ones, which the check draws its random cotangents from.
    ``linear``: the positions of the inputs the forward is jointly linear in (an FFT, a
    projection, the right-hand side of a solve), for which the check is the dot-product
    (adjoint) test ``<dy, f(v)> = <g(dy), v>`` (the forward at ``v`` in those inputs, the others
    as they are; no finite-difference step, so only rounding separates the two) when only
    those inputs need gradients, instead of a central difference.

    Raises ``TypeError`` if ``op_type`` is not a non-empty string, ``ValueError`` if it is
    already defined by other code or ``vmap_method`` is not one of the three names; the same
    definition run again (the same function name, file and line: a notebook cell re-run)
    replaces it with a warning; ``TypeError`` if ``hermitian`` or ``linear`` is not a tuple of
    input positions or ``gauge`` is not callable. At call time the op
    raises ``TypeError`` if the forward returns something other than a backend array or a
    tuple of them, or a NumPy array for inputs of another backend, and (``real_only``) for a
    complex input.
    """
    _check_type_name(op_type, "primitive")
    if vmap_method not in VMAP_METHODS:
        raise ValueError(f"primitive({op_type!r}): vmap_method must be one of "
                         f"{', '.join(map(repr, VMAP_METHODS))} (JAX's pure_callback "
                         f"methods), got {vmap_method!r}")
    hermitian, linear = (_positions(op_type, name, value) for name, value in
                         (("hermitian", hermitian), ("linear", linear)))
    if gauge is not None and not callable(gauge):
        raise TypeError(f"primitive({op_type!r}): gauge must be None or a function "
                        f"gauge(op, cotangents) -> cotangents, got {type(gauge).__name__}")

    def decorate(forward):
        opdef = _OPS.get(op_type)
        if opdef is not None and opdef.defined:
            if not _defined_again(opdef.forward, forward, f"primitive: op type {op_type!r}"):
                raise ValueError(
                    f"primitive: op type {op_type!r} is already registered (by "
                    f"{describe_fn(opdef.forward)}); choose another name")
            opdef.forward = None
        if opdef is None:
            opdef = _OPS[op_type] = OpDef(op_type, forward, samples)
        else:  # its gradient was registered first
            opdef.define(forward)
            opdef.samples = list(samples or ())
        opdef.real_only = bool(real_only)
        opdef.vmap_method = vmap_method
        opdef.optional = frozenset(optional)
        opdef.hermitian, opdef.gauge, opdef.linear = frozenset(hermitian), gauge, frozenset(linear)
        op = _make_op(opdef)
        functools.update_wrapper(op, forward)
        op.op_type = op_type
        opdef.public = op
        return op

    return decorate


class ConstructDef(OpDef):
    """The registry entry of a control-flow construct (``Scan``, ``While``, ``Switch``): its
    ``forward`` and ``public`` are the construct's public function on Tensors (the registry
    sweeps call it with a sample's inputs and its bodies as attrs), its ``grad`` and ``jvp``
    run the rule of the call each record carries (:func:`construct`)."""

    __slots__ = ()
    is_construct = True

    def __repr__(self):
        return f"<ConstructDef {self.type!r}>"


def _recorded_vjp(op, *dys):
    """The gradient of a construct's record: the VJP its call made (``CallDef.rules``)."""
    return op._opdef.rules[0](op, *dys)


def _recorded_jvp(op, *tangents):
    """The JVP of a construct's record: the JVP its call made (``CallDef.rules``)."""
    return op._opdef.rules[1](op, *tangents)


def construct(op_type: str, public, *, samples):
    """Register the control-flow construct ``op_type`` (``Scan``, ``While``, ``Switch``).

    ``public(*tensors, **attrs)``: the construct as users call it (its bodies given as attrs),
    for the registry sweeps, which call it with ``samples`` (a list of :class:`Sample`).
    Eagerly a construct runs its body in Python (the tapes record the body's ops); compiled, it
    is recorded as one op of type ``op_type`` whose entry is a ``CallDef`` made by that call,
    carrying the call's VJP and JVP (closures over its trace) as ``rules``; the entry's
    ``grad`` and ``jvp`` are this type's registered rules (see :func:`construct_call`), which
    run those. Returns the entry. Raises ``ValueError`` if ``op_type`` is already registered.
    """
    _check_type_name(op_type, "construct")
    if op_type in _OPS:
        raise ValueError(f"construct: op type {op_type!r} is already registered "
                         f"({_OPS[op_type]!r}); choose another name")
    opdef = _OPS[op_type] = ConstructDef(op_type, public, samples)
    opdef.public, opdef.grad, opdef.jvp = public, _recorded_vjp, _recorded_jvp
    return opdef


def construct_call(op_type, names, vjp, jvp) -> CallDef:
    """The entry of one compiled call of the construct ``op_type`` for its record: ``names``
    of its inputs, and the call's ``vjp(op, *dys)`` and ``jvp(op, *tangents)``, which the
    record's gradient and JVP (the op type's registered rules, read now) run. An op type
    that is not a registered construct (``Select``, ``tg.cond`` on a batched predicate inside
    ``tg.vmap``) has the call's rules as its gradient and JVP."""
    entry = _OPS.get(op_type)
    if entry is None or not entry.is_construct:
        return CallDef(op_type, names, vjp, jvp=jvp, replay_error="call the construct again")
    return CallDef(op_type, names, entry.grad, jvp=entry.jvp, rules=(vjp, jvp),
                   replay_error="call the construct again", is_custom=False)


def _defined_again(old, new, what) -> bool:
    """True, with a warning, when ``new`` is ``old`` run again from the same source (the same
    qualified name, file and first line: a notebook cell or a module executed a second time),
    so that it may replace ``old``; False for a different definition."""
    old, new = inspect.unwrap(old), inspect.unwrap(new)
    a, b = getattr(old, "__code__", None), getattr(new, "__code__", None)
    if a is None or b is None or (old.__qualname__, a.co_filename, a.co_firstlineno) != (
            new.__qualname__, b.co_filename, b.co_firstlineno):
        return False
    warnings.warn(f"{what} is defined again by the same code ({describe_fn(new)}), as when a "
                  "notebook cell runs twice: the new definition replaces the old one",
                  stacklevel=3)
    return True


def _is_complex(v) -> bool:
    if type(v) is complex:
        return True
    dt = getattr(v, "dtype", None)
    if dt is None:
        return False
    kind = getattr(dt, "kind", None)
    return kind == "c" if kind is not None else _backend.np_dtype(dt).kind == "c"


def _complex_input_error(opdef, k, v):
    dtype = "complex" if type(v) is complex else _backend.np_dtype(v.dtype)
    return TypeError(
        f"op type {opdef.type!r}: input {opdef.param_name(k)!r} has the complex dtype {dtype}, "
        f"but {opdef.type} is defined for real numbers only (it orders, rounds or clips values; "
        "TensorFlow and the Array API refuse complex input too, NumPy would order by the real "
        "part first or drop the imaginary part). Apply it to tg.real(z) and tg.imag(z) "
        "separately, or to tg.abs(z), whichever you mean")


# The op wrapper, one template for every op: convert the inputs, run the forward (directly,
# without the checks, on NumPy inputs), check the result, wrap it, hand it to the tapes. An op
# of a fixed number of inputs and no attributes (elementwise ops, matmul) gets the template
# with its inputs spelled out, which spares the tuple and list of a variadic call per op.
_OP_TEMPLATE = """
def op({params}):
    {convert}
    if real_only:
        _refuse_complex(opdef, {values})
    if {on_numpy}:
        out = fast({call})
        if type(out) is not nd:
            out = _checked_result(opdef, out, {args})
    else:
        out = _checked_result(opdef, _run_forward(opdef, {values}, {attrs}), {args})
    if type(out) is tuple:
        outs = tuple([_wrap(o) for o in out])
        if state.tapes:
            record(opdef, {args}, {attrs}, outs)
        return outs
    t = new(T)
    t._value = out
    t._id = next(ids)
    if state.tapes:
        record(opdef, {args}, {attrs}, (t,))
    return t
"""


def _make_op(opdef, fast_paths=True):
    """The public op of ``opdef``, from ``_OP_TEMPLATE``: spelled out for ops of one or two
    inputs and no attributes unless ``fast_paths=False`` (the variadic form, which the others
    must agree with: ``tests/test_fast_paths.py``)."""
    n = opdef.arity if fast_paths and not opdef.takes_attrs and opdef.arity in (1, 2) else 0
    xs = [f"x{k}" for k in range(n)]
    vs = [f"v{k}" for k in range(n)]
    if n:
        fields = dict(
            params=", ".join(xs) + ", /",
            convert="; ".join(f"{v} = {x}._value if isinstance({x}, T) else {x} if type({x}) "
                              f"in scalar else _input(opdef, {k}, {x})"
                              for k, (x, v) in enumerate(zip(xs, vs))),
            on_numpy=" and ".join(["type(v0) is nd", *(f"(type({v}) is nd or type({v}) in "
                                                          "scalar)" for v in vs[1:])]),
            values=f"({', '.join(vs)},)", call=", ".join(vs), args=f"({', '.join(xs)},)",
            attrs="_NO_ATTRS")
    else:
        fields = dict(params="*args, **attrs",
                      convert="values = [a._value if isinstance(a, T) else _input(opdef, args, a) "
                              "for a in args]",
                      on_numpy="all([type(v) is nd or type(v) in scalar for v in values])",
                      values="values", call="*values, **attrs", args="args", attrs="attrs")
    forward = opdef.forward
    scope = dict(opdef=opdef, fast=getattr(forward, "_numpy_fn", None) or forward,
                 real_only=opdef.real_only, state=_records._state, T=Tensor, nd=np.ndarray,
                 scalar=_SCALAR_TYPES, new=object.__new__, ids=_tensor_ids, _input=_input,
                 _wrap=_wrap, record=record, _NO_ATTRS=_NO_ATTRS, _run_forward=_run_forward,
                 _checked_result=_checked_result, _refuse_complex=_refuse_complex)
    source = _OP_TEMPLATE.format(**fields)
    # named inside the package (tracebacks show it, and frames there are tapegrad's own)
    inputs = {0: "any number of inputs", 1: "1 input", 2: "2 inputs"}[n]
    name = os.path.join(os.path.dirname(__file__), f"<op wrapper, {inputs}>")
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    exec(compile(source, name, "exec"), scope)  # noqa: S102 - our own template, no user text
    return scope["op"]


def _input(opdef, where, a):
    """The op input ``a`` (not a Tensor, not a Python scalar) as a backend value (``_raw``);
    ``where`` is its position, or all the inputs (``a`` is one of them). Raises ``TypeError``
    for None at an input that is not ``optional``: the check costs nothing on the path of
    Tensors and numbers."""
    if a is None:
        k = where if type(where) is int else next(k for k, b in enumerate(where) if b is None)
        name = opdef.param_name(k)
        if name not in opdef.optional:
            op = getattr(opdef.forward, "__name__", opdef.type).lstrip("_")
            raise TypeError(f"{op} (op type {opdef.type!r}): argument {name!r} is None (a "
                            "NoneType); pass a Tensor, an array or a Python number")
    return _raw(a)


def _refuse_complex(opdef, values):
    """Raise the ``TypeError`` of a real-only op type for the first complex input."""
    for k, v in enumerate(values):
        if _is_complex(v):
            raise _complex_input_error(opdef, k, v)


def _run_forward(opdef, values, attrs):
    """``opdef.forward(*values, **attrs)``; a forward that needs concrete values of traced inputs
    (NumPy code inside ``tg.function``) runs as a host callback instead."""
    if config.tracing():
        values = _backend.mixable_with_jax(values, config.trace_constants())
    try:
        return opdef.forward(*values, **attrs)
    except TypeError as error:
        return _host_forward(opdef, values, attrs, error)


def _host_forward(opdef, values, attrs, error):
    """The forward as a host callback if ``error`` (a ``TypeError`` the forward raised) says it
    needs concrete values; else ``error`` is raised again."""
    host_callback = _structural.extensions.host_callback
    if host_callback is None or not host_callback.wants(error, opdef):
        raise error
    return host_callback(opdef, values, attrs)


def _checked_result(opdef, out, args):
    """``out`` if it is a backend array, or a tuple of them, of the inputs' backend; raises
    ``TypeError`` naming the op type otherwise."""
    outs = out if type(out) is tuple else (out,)
    for o in outs:
        if isinstance(o, Tensor) or not (hasattr(o, "shape") and hasattr(o, "dtype")):
            inside = f" holding a {type(o).__name__}" if o is not out else ""
            raise TypeError(
                f"the forward {describe_fn(opdef.forward)} of op type {opdef.type!r} returned "
                f"a {type(out).__name__}{inside}; a primitive's forward must return one backend "
                "array, or a tuple of them for several outputs (not a list, a Tensor or a "
                "Python number)")
    if any(isinstance(o, (np.ndarray, np.generic)) for o in outs) and not config.tracing():
        for a in args:
            v = a._value if isinstance(a, Tensor) else a
            if hasattr(v, "__array_namespace__") and not isinstance(v, (np.ndarray, np.generic)):
                raise TypeError(
                    f"the forward {describe_fn(opdef.forward)} of op type {opdef.type!r} "
                    f"returned a NumPy array for inputs on {_backend.namespace(v).__name__!r}; "
                    "compute with the inputs' namespace (xp = array_namespace(x)), or convert "
                    "the result back with xp.asarray before returning it")
        if (_backend.default_namespace() is not np
                and all(isinstance(a, _SCALARS) for a in args)):  # Python scalars only:
            # the result goes where tg.constant puts a value, as _raw puts a NumPy input
            # (tg.sin(0.5) held a NumPy scalar that array_api_strict's ops then refused); NumPy
            # values (tg.to_jax's rules on the host) stay NumPy
            out = (tuple(_backend.asarray(o) for o in outs) if type(out) is tuple
                   else _backend.asarray(out))
    return out


def RegisterGradient(op_type: str, *, surrogate: bool = False, reads: str = "both"):  # noqa: N802 - TF's name
    """Register ``fn(op, *output_grads)`` as the gradient of ``op_type``.

    ``op`` is the :class:`~tapegrad._records.Operation` record (``.type``, ``.inputs``,
    ``.outputs``, ``.attrs``, ``get_attr``, ``needs_input_grad``); ``output_grads`` has one
    Tensor per output. ``fn`` returns one gradient (a Tensor or ``None``) per input, or a
    single Tensor for a one-input op. Write it with tapegrad ops so that it is itself
    differentiable. The op type may be defined (:func:`primitive`) before or after.

    ``reads``: what ``fn`` reads of the record: ``"both"`` (inputs and outputs, the default),
    ``"inputs"``, ``"outputs"`` or ``"none"`` (Chainer's ``retain_inputs`` /
    ``retain_outputs``). Records keep only that, so a tape holds less memory; the others are
    :class:`~tapegrad._records.Dropped` placeholders with their shape and dtype.

    ``surrogate=True`` marks a gradient that is intentionally not the derivative of the
    forward (straight-through, leaky): ``tg.test`` reports it instead of failing.

    Raises ``TypeError`` if ``op_type`` is not a non-empty string, ``ValueError`` if it already
    has a gradient from other code (the same code run again replaces it with a warning, as
    :func:`primitive`) or ``reads`` is not one of the four names.
    """
    _check_type_name(op_type, "RegisterGradient")
    if reads not in READS:
        raise ValueError(f"RegisterGradient({op_type!r}): reads={reads!r}; it must be one of "
                         f"{', '.join(map(repr, READS))}")

    def decorate(fn):
        opdef = _entry(op_type)
        if opdef.grad is not None and _defined_again(
                opdef.grad, fn, f"RegisterGradient: the gradient of {op_type!r}"):
            opdef.grad = None
        if opdef.grad is not None or not opdef.differentiable:
            raise RegistrationError(
                f"RegisterGradient: op type {op_type!r} already has a gradient "
                f"({describe_fn(opdef.grad) if opdef.grad else 'no_gradient'}); use "
                "tg.gradient_override_map to use another gradient in a block of code"
            )
        opdef.grad = fn
        opdef.surrogate = bool(surrogate)
        opdef.reads = READS[reads]
        return fn

    return decorate


def RegisterJVP(op_type: str):  # noqa: N802 - the forward-mode twin of RegisterGradient
    """Register ``fn(op, *tangents)`` as the JVP rule of ``op_type`` (forward mode).

    ``op`` is the op's record (``inputs``, ``outputs``, ``attrs``), ``tangents`` one Tensor per
    input (``None`` for an input without a tangent); ``fn`` returns one tangent per output (a
    Tensor of the output's shape and dtype, or a tuple for several outputs; ``None`` for a zero
    tangent), or ``NotImplemented`` to use the default for this call. For complex values a
    tangent is the derivative along the tangent (``f'(z) t`` for a holomorphic op), not the
    gradient's conjugate form. Tangents are checked as gradients are: one that broadcasts to
    its output's shape or differs only in floating precision (or is real for a complex output)
    is fitted, other shapes and dtypes raise ``GradientShapeError`` at the call. Write it
    with tapegrad ops so that it is differentiable again. The default (no rule) is the transpose of the op's VJP (``tapegrad.forward``).
    The op type may be defined before or after. Raises ``TypeError`` for a type that is not a
    non-empty string, ``ValueError`` if it already has a JVP rule from other code (the same
    code run again replaces it with a warning, as :func:`primitive`).
    """
    _check_type_name(op_type, "RegisterJVP")

    def decorate(fn):
        opdef = _entry(op_type)
        if opdef.jvp is not None and _defined_again(
                opdef.jvp, fn, f"RegisterJVP: the JVP rule of {op_type!r}"):
            opdef.jvp = None
        if opdef.jvp is not None:
            raise ValueError(f"RegisterJVP: op type {op_type!r} already has a JVP rule "
                             f"({describe_fn(opdef.jvp)})")
        opdef.jvp = fn
        return fn

    return decorate


def no_gradient(op_type: str) -> None:
    """Declare that ``op_type`` is not differentiable: its inputs receive ``None`` gradients.

    A type not defined yet is declared ahead, as TensorFlow's ``tf.no_gradient`` accepts any
    name (and :func:`RegisterGradient` does here). Raises ``TypeError`` for a name that is not
    a non-empty string.
    """
    _check_type_name(op_type, "no_gradient")
    opdef = _entry(op_type)
    opdef.differentiable = False
    opdef.reads = READS["none"]


@contextlib.contextmanager
def gradient_override_map(op_type_map: dict):
    """Within the block, ops of type ``k`` are recorded with the gradient of op type ``v``.

    ``k`` must be a defined op type; ``v`` any registered type (also one that only has a
    gradient, registered with :func:`RegisterGradient`). Works eagerly under
    :class:`GradientTape` (the override is fixed when the op is recorded) and in forward mode
    (``ForwardAccumulator``, ``jacfwd``, a Jacobian by columns): the JVP is ``v``'s JVP rule
    (:func:`RegisterJVP`), or the transpose of ``v``'s gradient where ``v`` has no rule. Raises
    ``LookupError`` naming the closest registered names if a type is unknown, or if ``k`` was
    never defined; ``ValueError`` if both types take a fixed number of inputs and the numbers
    differ (the gradient would return the wrong number of gradients), or if ``v`` is a
    control-flow construct (``Scan``...: its gradient runs what a compiled call records).
    """
    resolved = {}
    for k, v in op_type_map.items():
        for t in (k, v):
            if not isinstance(t, str) or t not in _OPS:
                raise _unknown(t, "gradient_override_map")
        src, dst = _OPS[k], _OPS[v]
        if not src.defined:
            raise LookupError(
                f"gradient_override_map: op type {k!r} has a registered gradient but was never "
                f"defined with tg.primitive({k!r}), so no op of that type runs; the keys are "
                "the op types whose gradient you replace")
        if dst.is_construct and src is not dst:
            raise ValueError(
                f"gradient_override_map: {v!r} is a control-flow construct, whose gradient runs "
                f"the rules a compiled {v} call records; ops of type {k!r} have none. Map "
                f"{k!r} to a gradient written for it (register one with tg.RegisterGradient)")
        if src.arity is not None and dst.arity is not None and src.arity != dst.arity:
            raise ValueError(
                f"gradient_override_map: op type {k!r} takes {src.arity} input(s) but the "
                f"gradient of {v!r} is written for ops of {dst.arity} input(s); map {k!r} to a "
                f"gradient for {src.arity} input(s) (register one with tg.RegisterGradient)")
        resolved[k] = dst
    state = _records._state
    saved = state.overrides
    state.overrides = {**saved, **resolved}
    _records._overriding += 1
    try:
        yield
    finally:
        _records._overriding -= 1
        state.overrides = saved
