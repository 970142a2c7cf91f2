"""``custom_gradient``, JAX's ``custom_vjp`` and ``custom_jvp``, ``py_function`` and
``numpy_function``.

``custom_gradient`` follows TensorFlow 2: the decorated function returns ``(y, grad_fn)``; the
forward runs unrecorded, and one op is recorded whose inputs are the positional arguments (and
the Variables the forward read) and whose outputs are ``y``; its gradient is ``grad_fn``.
Because ``y`` itself is the recorded output, a ``grad_fn`` written with tapegrad ops on the inputs
and on ``y`` is differentiable again by an outer tape. Intermediates of the forward other than
``y`` are constants to outer tapes: a ``grad_fn`` that closes over them gets no second-order
contribution through them (use the inputs and outputs, or a nested ``custom_gradient``).
An argument that is a container of Tensors (tuple, list, dict, any pytree) has its Tensor
leaves as inputs, and its gradient has its structure.

``custom_vjp`` and ``custom_jvp`` have JAX's semantics and are recorded by the same machinery
(``_recorder``); see their docstrings for how each order of differentiation is obtained.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from . import _backend, _records, _structural
from ._pytree import show, tree_flatten, tree_unflatten
from ._registry import CallDef, no_gradient, primitive, variable_names
from ._tensor import _SCALARS, Tensor
from ._variables import Variable
from ._tape import GradientTape
from ._validation import gradients_by_name
from .errors import GradientCountError, GradientShapeError, VariablesError, describe_fn
from .ops import astype, clip, zeros_like


class _VariableWatcher:
    """A tape stand-in that records no op but notes the trainable Variables ops read."""

    _watch_vars = True
    _watched = frozenset()
    _observer = False
    _differentiates = False

    def __init__(self):
        self.variables = {}

    def _note_variable(self, v):
        self.variables.setdefault(v._id, v)


def _positional_params(f):
    try:
        return tuple(p.name for p in inspect.signature(f).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    except (TypeError, ValueError):
        return ()


def _accepts_variables(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "variables" or p.kind is p.VAR_KEYWORD for p in params)


def custom_gradient(f=None, *, surrogate=False, check=False):
    """Decorator: give a function its own gradient (TensorFlow 2 ``tf.custom_gradient``).

    ``f(*args, **kwargs)`` returns ``(y, grad_fn)``: ``y`` a Tensor or a pytree (tuple, list,
    dict) of Tensors, ``grad_fn(*dys)`` one gradient per argument of ``f`` (``None`` allowed; a
    single gradient when ``f`` has one argument), or a dict keyed by argument name (omitted
    names get no gradient). ``dys`` are the cotangents of ``y``'s leaves, in its flattening
    order (JAX's: dicts by sorted key), each of its leaf's shape.

    The arguments that are inputs are the positional ones, then those passed by keyword that
    are Tensors or containers holding Tensors, in signature order. A Tensor argument's
    gradient is a Tensor of its shape and dtype. An argument that is a container (tuple, list,
    dict, or another pytree ``tapegrad._pytree`` flattens) has its Tensor leaves as inputs
    (Variables among them included: they are arguments, not "read" Variables) and its other
    leaves (Python numbers, strings, ``None``, arrays) static; its gradient has the argument's
    structure, with ``None`` at a leaf without one, or is ``None`` for the whole argument.
    If the forward reads trainable Variables that are not arguments, ``grad_fn`` must accept
    ``variables=`` and return ``(argument_grads, variable_grads)``.

    ``surrogate=True`` marks a gradient that is intentionally not the derivative of the forward
    (straight-through, leaky or scaled gradients): ``tg.test`` reports it instead of failing.

    ``check=True`` checks ``grad_fn`` at the first call of its gradient, on that call's inputs,
    as ``tg.debugging.enable_gradient_checks()`` checks every user rule (linearity in ``dy``,
    agreement with a central difference of ``f``), with its tolerances (or the defaults), and
    raises :class:`~tapegrad.errors.GradientCheckError` when it fails.

    The forward's own ops are not recorded. Higher order: ``grad_fn``'s ops are recorded by
    outer tapes; for a custom *second-order* gradient return a tensor computed by a nested
    ``custom_gradient`` function from ``grad_fn``. Forward mode (``tg.jvp``,
    ``ForwardAccumulator``) takes the transpose of ``grad_fn``. The result applies directly
    under ``tg.function``, ``tg.grad``, ``tg.vmap`` and the other transforms.

    Errors: ``TypeError`` if ``f`` does not return ``(y, grad_fn)``; ``VariablesError`` if it
    reads Variables and ``grad_fn`` lacks ``variables=``; at gradient time
    ``GradientCountError`` (the wrong number of gradients, or a container argument's gradient
    of another structure: the message names ``grad_fn``, the argument and the structure
    expected), ``GradientShapeError`` and ``GradientTypeError`` name ``grad_fn``, its source
    line and the input.
    """
    if f is None:
        return functools.partial(custom_gradient, surrogate=surrogate, check=check)
    call = _recorder(f, f"CustomGradient:{getattr(f, '__name__', 'f')}", surrogate,
                     _positional_params(f), check=check)
    return _CustomGradientFunction(f, call, surrogate)


_STATIC = frozenset((*_SCALARS, str, type(None)))  # arguments that are neither Tensors nor trees


def _recorder(f, op_type, surrogate, params, kind="custom_gradient", bound_static=False,
              record_forward=False, check=False):
    """``call(bound, *args, **kwargs)``: ``f(*bound, *args, **kwargs)`` (which returns
    ``(y, grad_fn)``) run unrecorded, and recorded as one op of type ``op_type`` whose gradient
    is ``grad_fn``. ``bound`` is ``(self,)`` for a method or ``()``, not an input; with
    ``bound_static`` (``custom_vjp``'s non-differentiable arguments) the Tensors in it are
    static arguments, not Variables the forward reads. With ``record_forward``
    (``custom_vjp``), JAX's levels: only the innermost tape or accumulator that traces an
    input records the op; the others record the forward's ops, so that they differentiate
    the forward (and ``grad_fn``'s residuals) by its ops, as JAX's outer transforms do. A
    ``grad_fn`` with a ``_jvp_rule``
    attribute (``custom_jvp``) gives the op that JVP rule: ``_jvp_rule(*tangents)``, one
    tangent (a tree, ``None`` leaves for none) per argument, returns the outputs' tangents.
    ``check``: the gradient checks itself (``custom_gradient(check=True)``)."""

    def call(bound, *args, **kwargs):
        kw_names = [k for k, v in kwargs.items() if isinstance(v, Tensor) or (
            type(v) not in _STATIC and any(isinstance(x, Tensor) for x in tree_flatten(v)[0]))]
        given = (*args, *[kwargs[k] for k in kw_names])  # the arguments grad_fn differentiates
        trees = _trees(given)  # None unless an argument is a container (the common case)
        inputs = given if trees is None else _leaf_inputs(given, trees)
        saved = _records.trace_entries()
        watcher = _VariableWatcher()
        if record_forward:  # JAX's levels: the innermost records the op, the others the forward
            level = _innermost_level(saved, inputs)
            entries = [watcher, *[t for t in saved if t is not level]]
        else:
            level = saved  # truthy: the op is recorded if a tape or accumulator is active
            # observers (check-numerics) see the forward's ops; forward-mode accumulators do
            # not: the op's tangent comes from its custom gradient
            entries = [watcher, *[t for t in saved if t._observer and not t._differentiates]]
        with _records.trace_stack(entries):
            result = f(*bound, *args, **kwargs)
        if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
            raise TypeError(
                f"custom_gradient: {f.__qualname__} must return a pair (y, grad_fn) with grad_fn "
                f"a function of the output cotangents; it returned {type(result).__name__}")
        y, grad_fn = result
        arg_ids = {a._id for a in inputs if isinstance(a, Tensor)}
        if watcher.variables and bound_static:
            arg_ids.update(x._id for x in tree_flatten(bound)[0] if isinstance(x, Tensor))
        variables = [v for i, v in watcher.variables.items() if i not in arg_ids]
        if variables and not _accepts_variables(grad_fn):
            names = ", ".join(repr(v.name) for v in variables)
            if kind != "custom_gradient":
                raise VariablesError(
                    f"{kind}: {f.__qualname__} reads the trainable Variable(s) {names}, which "
                    "are not its arguments, so they would get no gradient; pass them as "
                    "arguments (their cotangents come from the rule), or mark them "
                    "trainable=False")
            raise VariablesError(
                f"custom_gradient: {f.__qualname__} reads the Variable(s) {names}, so its "
                f"gradient function {grad_fn.__qualname__} must accept a keyword argument "
                "`variables` and return (input_gradients, variable_gradients); pass the "
                "Variables as arguments instead, or mark them trainable=False")
        outs, rebuild = _outputs(y, arg_ids)
        if level:
            n = len(args)

            def replay(*xs):
                vals = xs if trees is None else _rebuild(given, trees, xs)
                return call(bound, *vals[:n], **{**kwargs, **dict(zip(kw_names, vals[n:]))})

            own = params[len(bound):]
            arg_names = (*own[:n], *[f"args[{i}]" for i in range(len(own), n)], *kw_names)
            names = arg_names if trees is None else _leaf_names(arg_names, trees)
            rule = getattr(grad_fn, "_jvp_rule", None)
            grad = _grad_adapter(grad_fn, variables, trees, arg_names, f)
            info = CallDef(op_type, (*names, *variable_names(variables)),
                           _checked(grad) if check else grad,
                           jvp=None if rule is None else _jvp_adapter(rule, given, trees),
                           replay=replay, function=f, variables=variables, surrogate=surrogate)
            _records.record(info, (*inputs, *variables), {}, outs,
                            only=level if record_forward else None)
        return rebuild(outs)

    return call


class _CustomGradientFunction:
    """What :func:`custom_gradient` returns: called like ``f``; as a method, the instance is
    bound to ``self`` and is not an input of the op (TensorFlow's decorator does the same)."""

    _custom_gradient = True  # found by `python -m tapegrad check` and tg.test.samples
    # slots, not the instance's __dict__: wrappers of it (tg.function, tg.grad, functools.wraps)
    # copy its __dict__, and a copied `_call` shadowed Function._call ("takes 1 positional
    # argument but 3 were given")
    __slots__ = ("_cg_call", "surrogate", "__dict__", "__weakref__")

    def __init__(self, f, call, surrogate):
        functools.update_wrapper(self, f)
        self._cg_call = call
        self.surrogate = surrogate

    def __call__(self, *args, **kwargs):
        return self._cg_call((), *args, **kwargs)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        bound = functools.partial(self._cg_call, (obj,))
        functools.update_wrapper(bound, self.__wrapped__)
        bound.surrogate = self.surrogate
        return bound

    def __repr__(self):
        return f"<tg.custom_gradient {describe_fn(self.__wrapped__)}>"


# --- container arguments: their Tensor leaves are the op's inputs ----------------------------
def _trees(given):
    """Per argument, ``None`` (a Tensor or another single value: one input) or ``(leaves,
    structure, positions)`` for a container: its leaves (``None`` leaves included) and the
    positions of its Tensor leaves, the inputs; ``None`` when no argument is a container."""
    trees = None
    for k, a in enumerate(given):
        if isinstance(a, Tensor) or type(a) in _STATIC:
            continue
        leaves, structure = tree_flatten(a, none_is_leaf=True)
        if len(leaves) == 1 and leaves[0] is a:  # an array, or another leaf
            continue
        if trees is None:
            trees = [None] * len(given)
        trees[k] = leaves, structure, [j for j, x in enumerate(leaves) if isinstance(x, Tensor)]
    return trees


def _leaf_inputs(given, trees):
    """The op's inputs: each single argument, and the Tensor leaves of each container."""
    out = []
    for a, tree in zip(given, trees):
        if tree is None:
            out.append(a)
        else:
            out.extend(tree[0][j] for j in tree[2])
    return tuple(out)


def _leaf_names(arg_names, trees):
    """The op's input names: an argument's, or ``"p leaf 1"`` for a container's leaf 1."""
    out = []
    for name, tree in zip(arg_names, trees):
        out.extend([name] if tree is None else [f"{name} leaf {j}" for j in tree[2]])
    return out


def _rebuild(given, trees, xs):
    """The arguments with ``xs`` (one per input, in input order) in place of their inputs."""
    it = iter(xs)
    out = []
    for a, tree in zip(given, trees):
        if tree is None:
            out.append(next(it))
            continue
        leaves, structure, positions = tree
        leaves = list(leaves)
        for j in positions:
            leaves[j] = next(it)
        out.append(tree_unflatten(structure, leaves))
    return out


def _per_argument(res, arg_names, fn):
    """What ``grad_fn`` returned as one gradient per argument (``res`` itself for one)."""
    n = len(arg_names)
    if n == 1:
        return [res]
    if isinstance(res, dict):  # by name (one argument's gradient may be a dict: above)
        return gradients_by_name(res, arg_names, fn, "arguments")
    if isinstance(res, (tuple, list)) and len(res) == n:
        return list(res)
    got = f"{len(res)} gradients" if isinstance(res, (tuple, list)) else f"a {type(res).__name__}"
    raise GradientCountError(
        f"the gradient function {describe_fn(fn)} returned {got} for {n} arguments "
        f"({', '.join(map(repr, arg_names))}); return a tuple with one gradient per argument, "
        "each with its argument's structure (None for an argument without one)")


def _leaf_gradients(per_arg, trees, arg_names, fn, f):
    """One gradient per input from one per argument: a container's gradient, of its
    structure, gives its Tensor leaves'. Raises ``GradientCountError`` for another
    structure, naming ``fn``, the function ``f`` and the argument."""
    out = []
    for k, (g, tree) in enumerate(zip(per_arg, trees)):
        if tree is None:
            out.append(g)
            continue
        leaves, structure, positions = tree
        if g is None:
            out.extend([None] * len(positions))
            continue
        gl, gs = tree_flatten(g, none_is_leaf=True)
        if gs != structure:
            raise GradientCountError(
                f"the gradient function {describe_fn(fn)} of {describe_fn(f)} returned a "
                f"gradient of structure {show(gs)} for argument {k} ({arg_names[k]!r}), which "
                f"has the structure {show(structure)}; return a gradient of the argument's "
                "structure, with None at a leaf (or for the whole argument) without one")
        out.extend(gl[j] for j in positions)
    return out


def _jvp_adapter(rule, given, trees):
    """The op's JVP rule (``CallDef``'s ``jvp(op, *tangents)``, one tangent or ``None`` per
    input) from ``rule(*tangents)``, one tangent tree per argument."""
    def jvp(op, *ins):
        return rule(*(ins[:len(given)] if trees is None else _rebuild(given, trees, ins)))

    jvp.__wrapped__ = rule
    return jvp


def _innermost_level(tapes, inputs):
    """The innermost of ``tapes`` that differentiates (a tape or a forward accumulator) and
    traces one of ``inputs`` (a tape: watches it, or a trainable Variable it would watch on
    access; an accumulator: gives it a tangent), or ``None``."""
    for t in reversed(tapes):
        if not t._differentiates:
            continue
        traced = getattr(t, "_watched", None)
        if traced is None:  # a ForwardAccumulator
            traced = t._tangents
        for a in inputs:
            if isinstance(a, Tensor) and (a._id in traced or getattr(t, "_watch_vars", False)
                                          and a._variable and a.trainable):
                return t
    return None


def _outputs(y, arg_ids):
    """Flatten ``y`` (a Tensor or a pytree of them) to fresh-or-own output Tensors, and a
    function rebuilding its structure."""
    def own(t):
        if isinstance(t, Tensor) and not isinstance(t, Variable) and t._id not in arg_ids:
            return t
        v = t._value if isinstance(t, Tensor) else _backend.asarray(t)
        return Tensor(v)

    if isinstance(y, Tensor):
        return (own(y),), _first
    leaves, structure = tree_flatten(y)
    return tuple(own(t) for t in leaves), functools.partial(tree_unflatten, structure)


def _first(outs):
    return outs[0]


def _grad_adapter(grad_fn, variables, trees, arg_names, f):
    """``CallDef``'s ``grad(op, *dys)`` from ``grad_fn(*dys)``: gradients per input (and per
    Variable read), from ``grad_fn``'s per argument."""
    def per_input(gin):
        if trees is None:
            return gin
        return _leaf_gradients(_per_argument(gin, arg_names, grad_fn), trees, arg_names,
                               grad_fn, f)

    if not variables and trees is None:  # the common case, as cheap as can be
        def grad(op, *dys):
            return grad_fn(*dys)
    elif not variables:
        def grad(op, *dys):
            return per_input(grad_fn(*dys))
    else:
        def grad(op, *dys):
            res = grad_fn(*dys, variables=variables)
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise GradientCountError(
                    f"the gradient function {describe_fn(grad_fn)} is called with "
                    "variables=, so it must return a pair (input_gradients, variable_gradients)")
            gin, gvar = res
            if trees is None:
                gin = list(gin) if isinstance(gin, (tuple, list)) else [gin]
            else:
                gin = per_input(gin)
            gvar = list(gvar) if isinstance(gvar, (tuple, list)) else [gvar]
            if len(gvar) != len(variables):
                raise GradientCountError(
                    f"the gradient function {describe_fn(grad_fn)} returned "
                    f"{len(gvar)} variable gradient(s) for {len(variables)} Variable(s) "
                    f"({', '.join(v.name for v in variables)}); return one per Variable")
            return [*gin, *gvar]
    grad.__wrapped__ = grad_fn
    return grad


def _checked(grad):
    """``grad`` checked by ``tg.debugging``'s gradient checks before it runs (``check=True``)."""
    def checked(op, *dys):
        checks = _structural.extensions.gradient_check
        if checks is not None:
            checks.force(grad, op)
        return grad(op, *dys)

    checked.__wrapped__ = grad
    return checked


def _cast_outputs(out, Tout, where):  # noqa: N803 - TensorFlow's name
    if isinstance(Tout, (list, tuple)):
        outs = out if isinstance(out, (list, tuple)) else (out,)
        if len(outs) != len(Tout):
            raise ValueError(f"{where}: func returned {len(outs)} value(s) but Tout lists "
                             f"{len(Tout)} dtype(s)")
        return [_cast_outputs(o, t, where) for o, t in zip(outs, Tout)]
    t = out if isinstance(out, Tensor) else Tensor(_backend.asarray(out))
    if Tout is None or t.dtype == Tout:
        return t
    _check_no_truncation(t.dtype, Tout, where)
    return astype(t, Tout)


def _check_no_truncation(dtype, Tout, where):  # noqa: N803
    """Raise ``TypeError`` if casting a result of ``dtype`` to ``Tout`` drops its fraction
    or imaginary part (TensorFlow raises too)."""
    got, want = np.dtype(dtype), np.dtype(Tout)
    if (got.kind in "fc" and want.kind in "biu") or (got.kind == "c" and want.kind == "f"):
        raise TypeError(
            f"{where}: func returned a result of dtype {got} but Tout is {want}; the cast would "
            f"silently drop its {'fraction' if got.kind == 'f' else 'imaginary part'}. Give "
            f"Tout={got}, or round/cast inside func if that is what you want")


def py_function(func=None, inp=None, Tout=None, name=None):  # noqa: N803 - TF's name
    """Run ``func(*inp)`` eagerly on Tensors; gradients flow through the tapegrad ops it uses.

    Without ``func`` (``@tg.py_function(Tout=tg.float32)``, TensorFlow's decorator form) it
    returns a decorator: the decorated function called with Tensors is ``py_function(func,
    args, Tout)``.

    ``inp``: list of Tensors (other values are converted); ``Tout``: a dtype or a list of
    dtypes, one per result (results are cast to them). Returns a Tensor or a list of Tensors.
    Raises ``ValueError`` if the number of results does not match ``Tout``.
    """
    from .ops.creation import convert_to_tensor

    if Tout is None:
        raise TypeError("py_function: Tout is required (a dtype, or a list of dtypes, one per "
                        "result of func)")
    if func is None:
        return lambda f: functools.wraps(f)(lambda *args: py_function(f, args, Tout, name))
    args = [convert_to_tensor(a) for a in inp]
    return _cast_outputs(func(*args), Tout, "py_function")


@primitive("NumpyFunction")
def _numpy_function(*arrays, func, Tout):  # noqa: N803
    xp = _backend.namespace(*arrays)  # the results go back to the inputs' backend
    out = func(*[_backend.to_numpy(a) for a in arrays])
    if isinstance(Tout, (list, tuple)):
        outs = out if isinstance(out, (list, tuple)) else (out,)
        if len(outs) != len(Tout):
            raise ValueError(f"numpy_function: func returned {len(outs)} value(s) but Tout "
                             f"lists {len(Tout)} dtype(s)")
        return tuple(_numpy_result(o, t, xp) for o, t in zip(outs, Tout))
    return _numpy_result(out, Tout, xp)


def _numpy_result(out, Tout, xp):  # noqa: N803
    out = np.asarray(out)
    _check_no_truncation(out.dtype, Tout, "numpy_function")
    return _backend.asarray(out.astype(Tout, copy=False), xp=xp)


no_gradient("NumpyFunction")


def numpy_function(func, inp, Tout, stateful=True, name=None):  # noqa: N803
    """Run ``func`` on NumPy arrays (the values of ``inp``) and wrap its results as Tensors.

    ``Tout``: a dtype or a list of dtypes (results are converted to them). The op (type
    ``"NumpyFunction"``) has no gradient: wrap the call in :func:`custom_gradient`, or give it
    one for a block with ``gradient_override_map({"NumpyFunction": "YourGradOp"})``.
    """
    out = _numpy_function(*inp, func=func, Tout=Tout)
    return list(out) if isinstance(out, tuple) else out


def straight_through(forward_fn):
    """``forward_fn`` with the identity as its gradient: the straight-through estimator.

    ``forward_fn(x)`` must keep ``x``'s shape and dtype (``round``, ``sign``, a quantiser).
    The gradient ``dy`` passes unchanged (Bengio, Leonard & Courville 2013); it is declared a
    surrogate, so ``tg.test`` reports the mismatch with the true derivative instead of failing.
    """
    def forward(x):
        return forward_fn(x), lambda dy: dy

    forward.__name__ = f"straight_through_{getattr(forward_fn, '__name__', 'fn')}"
    return custom_gradient(forward, surrogate=True)


@functools.partial(custom_gradient, surrogate=True)
def _clip_gradient(x, lo, hi):
    return x, lambda dy: (clip(dy, lo, hi), None, None)


def clip_gradient(x, lo, hi):
    """Identity in the forward pass; clips the gradient flowing back to ``[lo, hi]``.

    ``x``: floating Tensor of any shape; ``lo``, ``hi``: Python floats. A surrogate gradient
    (declared as such to ``tg.test``). Raises ``ValueError`` if ``lo > hi``.
    """
    if lo > hi:
        raise ValueError(f"clip_gradient: lo={lo} is greater than hi={hi}")
    return _clip_gradient(x, float(lo), float(hi))


# --- JAX's custom_vjp and custom_jvp, on the same machinery -------------------------------------
class _CustomRule:
    """What :class:`custom_vjp` and :class:`custom_jvp` share: ``fun``, ``nondiff_argnums``,
    the call splitting the arguments and recording one op through :func:`_recorder`."""

    # slots: wrappers (tg.function, functools.wraps) copy the instance's __dict__ only
    __slots__ = ("fun", "nondiff_argnums", "_record", "__dict__", "__weakref__")
    _kind = ""

    def __init__(self, fun, nondiff_argnums=()):
        if not callable(fun):
            raise TypeError(f"tg.{self._kind}: expected a function, got {type(fun).__name__}")
        nums = (nondiff_argnums,) if isinstance(nondiff_argnums, int) else nondiff_argnums
        if not all(isinstance(i, int) and i >= 0 for i in nums):
            raise TypeError(f"tg.{self._kind}: nondiff_argnums must be non-negative ints, got "
                            f"{nondiff_argnums!r}")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(sorted(set(nums)))
        params = _positional_params(fun)
        names = [p for i, p in enumerate(params) if i not in self.nondiff_argnums]
        prefix = "CustomVJP" if self._kind == "custom_vjp" else "CustomJVP"

        def forward(nondiff, *diff):
            return self._forward(nondiff, *diff)

        functools.update_wrapper(forward, fun)  # errors and views name fun
        self._record = _recorder(forward, f"{prefix}:{getattr(fun, '__name__', 'f')}",
                                 False, ("nondiff", *names), kind=self._kind,
                                 bound_static=True, record_forward=self._kind == "custom_vjp")

    def _rule(self):
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        self._rule()  # raises before defvjp / defjvp
        if kwargs:  # as JAX: keywords are bound to positions by fun's signature
            bound = inspect.signature(self.fun).bind(*args, **kwargs)
            bound.apply_defaults()
            if bound.kwargs:
                raise TypeError(f"tg.{self._kind}: {self.__qualname__} takes keyword-only "
                                f"arguments {sorted(bound.kwargs)}; {self._kind} functions "
                                "take positional arguments (bind others with functools.partial)")
            args = bound.args
        for i in self.nondiff_argnums:
            if i >= len(args):
                raise TypeError(f"tg.{self._kind}: nondiff_argnums={self.nondiff_argnums} "
                                f"names argument {i}, but {self.__qualname__} was called with "
                                f"{len(args)} positional argument(s)")
        if not any(t._differentiates for t in _records.trace_entries()):  # as JAX: fun itself
            return self.fun(*args)                                      # when not differentiated
        nondiff = tuple((i, args[i]) for i in self.nondiff_argnums)
        diff = [a for i, a in enumerate(args) if i not in self.nondiff_argnums]
        return self._record((nondiff,), *diff)

    def __get__(self, obj, objtype=None):
        """As a method (``@tg.custom_vjp`` on a ``def`` in a class): ``obj.f`` is ``f`` with
        ``obj`` bound to the first positional argument, as a function's method is (so
        ``obj.f(x)`` is ``f(obj, x)``; put 0 in ``nondiff_argnums`` to pass ``obj`` to the
        rule first, without a cotangent). ``Class.f`` is ``f`` itself. JAX's objects have no
        ``__get__``: there ``Class.f(obj, x)`` is the call that works, and gives the same."""
        if obj is None:
            return self
        bound = functools.partial(self, obj)
        functools.update_wrapper(bound, self.fun)
        return bound

    def __repr__(self):
        return f"<tg.{self._kind} {describe_fn(self.fun)}>"


def _merge(nondiff, diff):
    """All positional arguments from the ``(position, value)`` pairs ``nondiff`` and the
    others, ``diff``."""
    args, it = [], iter(diff)
    fixed = dict(nondiff)
    for i in range(len(nondiff) + len(diff)):
        args.append(fixed[i] if i in fixed else next(it))
    return args


class custom_vjp(_CustomRule):  # noqa: N801 - JAX's name
    """A function with a custom reverse-mode rule (JAX's ``jax.custom_vjp``, same semantics).

    ``f = tg.custom_vjp(fun, nondiff_argnums=())`` (or ``@tg.custom_vjp``, or
    ``@functools.partial(tg.custom_vjp, nondiff_argnums=(0,))``); then
    ``f.defvjp(fwd, bwd)``:

    * ``fwd(*args) -> (out, residuals)``: the same arguments as ``fun`` and the same ``out``
      (a Tensor or a pytree of them); ``residuals`` is anything ``bwd`` needs.
    * ``bwd(*nondiff_args, residuals, cotangent) -> tuple``: ``cotangent`` has ``out``'s
      structure and shapes; the result has one cotangent per differentiable positional
      argument, each with its argument's pytree structure and leaf shapes, ``None`` for a
      zero one (a leaf's, or a whole argument's).

    ``f(*args)`` returns ``fun(*args)``; under a tape (``GradientTape``, ``tg.grad``, ...) it
    runs ``fwd`` unrecorded and is recorded as one op whose gradient calls ``bwd``. ``bwd``'s
    tapegrad ops are recorded by outer tapes, so its result is differentiated again (second
    order: the derivative of ``bwd``, as in JAX). Forward mode (``tg.jvp``,
    ``ForwardAccumulator``) takes the transpose of ``bwd`` (JAX refuses ``jvp`` of a
    ``custom_vjp`` function). Works under ``tg.function``, ``tg.vmap`` and the transforms.
    Non-differentiable arguments (``nondiff_argnums``) are passed to ``bwd`` first and get no
    cotangent; a keyword argument is bound to its position by ``fun``'s signature.

    Errors: ``TypeError`` when called before ``defvjp``, when ``fwd`` does not return a pair,
    for ``nondiff_argnums`` naming a missing argument; ``VariablesError`` when ``fwd`` reads a
    trainable Variable that is not an argument (it would get no gradient); at gradient time
    ``GradientCountError`` when ``bwd`` returns another number of cotangents or a cotangent
    of another structure (naming ``bwd`` and the argument).
    """

    __slots__ = ("fwd", "bwd")
    _kind = "custom_vjp"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.fwd = self.bwd = None

    def defvjp(self, fwd, bwd):
        """Set the rule: ``fwd(*args) -> (out, residuals)`` and ``bwd(*nondiff_args, residuals,
        cotangent) -> tuple of cotangents`` (see :class:`custom_vjp`). Returns ``None``."""
        if not (callable(fwd) and callable(bwd)):
            raise TypeError("tg.custom_vjp: defvjp(fwd, bwd) takes two functions, got "
                            f"{type(fwd).__name__} and {type(bwd).__name__}")
        self.fwd, self.bwd = fwd, bwd

    def _rule(self):
        if self.bwd is None:
            raise TypeError(f"tg.custom_vjp: {self.__qualname__} has no VJP rule yet; call "
                            f"{self.__name__}.defvjp(fwd, bwd) before calling it (JAX raises "
                            "AttributeError here)")
        return self.bwd

    def _forward(self, nondiff, *diff):
        fwd, bwd = self.fwd, self.bwd
        result = fwd(*_merge(nondiff, diff))
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"tg.custom_vjp: the forward rule {describe_fn(fwd)} must return "
                            f"a pair (out, residuals); it returned {type(result).__name__}")
        out, residuals = result
        structure = tree_flatten(out)[1]
        fixed = [v for _, v in nondiff]
        n = len(diff)

        def grad_fn(*dys):
            cts = bwd(*fixed, residuals, tree_unflatten(structure, dys))
            if not isinstance(cts, (tuple, list)) or len(cts) != n:
                got = (f"{len(cts)} cotangent(s)" if isinstance(cts, (tuple, list))
                       else f"a {type(cts).__name__}")
                raise GradientCountError(
                    f"the backward rule {describe_fn(bwd)} of tg.custom_vjp "
                    f"{self.__qualname__} returned {got}; it must return a tuple with one "
                    f"cotangent per differentiable argument: {n} (None for a zero one)")
            return cts[0] if n == 1 else tuple(cts)

        grad_fn.__wrapped__ = bwd
        return out, grad_fn


class custom_jvp(_CustomRule):  # noqa: N801 - JAX's name
    """A function with a custom forward-mode rule (JAX's ``jax.custom_jvp``, same semantics).

    ``f = tg.custom_jvp(fun, nondiff_argnums=())`` (or a decorator); then ``f.defjvp(jvp)``
    (usable as a decorator) with ``jvp(*nondiff_args, primals, tangents) -> (primal_out,
    tangent_out)``: ``primals`` and ``tangents`` are tuples with one entry per differentiable
    argument, a tangent tree of its primal's structure and shapes (zeros for a primal without
    a tangent); ``tangent_out`` has ``fun``'s output structure and shapes. The rule must be
    linear in ``tangents`` (as JAX requires).

    ``f(*args)`` returns ``fun(*args)``; under a tape or accumulator it is recorded as one op.
    Forward mode (``tg.jvp``, ``ForwardAccumulator``, ``jacfwd``) uses the rule's
    ``tangent_out``. Reverse mode is its transpose: the gradient is the VJP of the linear map
    ``t -> jvp(primals, t)[1]``, computed by a tape over the tangents (exact, as the rule is
    linear in them; JAX transposes the rule's linear part the same way). The rule's ops are
    recorded by outer tapes and accumulators, so derivatives of every order follow from it.
    The rule's ``primal_out`` is not used (``fun``'s output is).

    Errors: ``TypeError`` when called before ``defjvp``, when the rule does not return a
    pair; ``GradientShapeError`` when ``tangent_out`` has another structure than the output;
    ``VariablesError`` when ``fun`` reads a trainable Variable that is not an argument.
    """

    __slots__ = ("jvp",)
    _kind = "custom_jvp"

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.jvp = None

    def defjvp(self, jvp):
        """Set the rule ``jvp(*nondiff_args, primals, tangents) -> (primal_out,
        tangent_out)`` (see :class:`custom_jvp`); returns ``jvp``, so it is a decorator."""
        if not callable(jvp):
            raise TypeError(f"tg.custom_jvp: defjvp takes a function, got {type(jvp).__name__}")
        self.jvp = jvp
        return jvp

    def _rule(self):
        if self.jvp is None:
            raise TypeError(f"tg.custom_jvp: {self.__qualname__} has no JVP rule yet; call "
                            f"{self.__name__}.defjvp(jvp) before calling it")
        return self.jvp

    def _forward(self, nondiff, *diff):
        out = self.fun(*_merge(nondiff, diff))
        leaves, structure = tree_flatten(out)
        fixed = [v for _, v in nondiff]
        rule = self.jvp

        def tangents_out(tangents):
            """The flat tangents of the outputs, ``tangents`` one tree per argument."""
            tangents = tuple(_zero_tangents(p, t) for p, t in zip(diff, tangents))
            res = rule(*fixed, tuple(diff), tangents)
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError(f"tg.custom_jvp: the rule {describe_fn(rule)} must return a "
                                f"pair (primal_out, tangent_out); it returned "
                                f"{type(res).__name__}")
            flat, got = tree_flatten(res[1])
            if got != structure:
                raise GradientShapeError(
                    f"the JVP rule {describe_fn(rule)} of tg.custom_jvp {self.__qualname__} "
                    f"returned a tangent_out of structure {show(got)}; the output has the "
                    f"structure {show(structure)}: return one tangent per output leaf")
            return flat

        def grad_fn(*dys):  # the transpose of the rule: the VJP of t -> tangent_out(t)
            with GradientTape(watch_accessed_variables=False) as tape:
                ts = [_zero_tangents(p, None) for p in diff]
                sources = [[x for x in tree_flatten(t)[0] if _differentiable(x)] for t in ts]
                tape.watch([x for s in sources for x in s])
                tout = tangents_out(ts)
            pairs = [(t, d) for t, d in zip(tout, dys) if isinstance(t, Tensor)]
            flat = iter(tape.gradient([t for t, _ in pairs], [x for s in sources for x in s],
                                      output_gradients=[d for _, d in pairs]))
            grads = []
            for t in ts:
                gl, gs = tree_flatten(t, none_is_leaf=True)
                grads.append(tree_unflatten(gs, [next(flat) if _differentiable(x) else None
                                                 for x in gl]))
            return grads[0] if len(grads) == 1 else tuple(grads)

        grad_fn.__wrapped__ = rule
        grad_fn._jvp_rule = lambda *ts: tangents_out(ts)
        return out, grad_fn


def _differentiable(x):
    return isinstance(x, Tensor) and _backend.is_floating(x.dtype)


def _zero_tangents(primal, tangent):
    """``tangent`` (a tree of ``primal``'s structure, or ``None``) with zeros of each Tensor
    leaf's shape and dtype where it has ``None``; a Python number's tangent is its type's
    zero, other leaves (strings, ``None``) stay as the primal's."""
    pl, structure = tree_flatten(primal, none_is_leaf=True)
    tl = [None] * len(pl) if tangent is None else tree_flatten(tangent, none_is_leaf=True)[0]
    return tree_unflatten(structure, [
        (zeros_like(p) if t is None else t) if isinstance(p, Tensor)
        else type(p)(0) if isinstance(p, _SCALARS) else p for p, t in zip(pl, tl)])



__all__ = ["custom_gradient", "py_function", "numpy_function", "straight_through",
           "clip_gradient", "custom_vjp", "custom_jvp"]
