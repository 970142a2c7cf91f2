"""``custom_gradient``, ``py_function`` and ``numpy_function``.

``custom_gradient`` follows TensorFlow 2: the decorated function returns ``(y, grad_fn)``; the
forward runs unrecorded, and one op is recorded whose inputs are the positional arguments (and
the Variables the forward read) and whose outputs are ``y``; its gradient is ``grad_fn``.
Because ``y`` itself is the recorded output, a ``grad_fn`` written with tapegrad ops on the inputs
and on ``y`` is differentiable again by an outer tape. Intermediates of the forward other than
``y`` are constants to outer tapes: a ``grad_fn`` that closes over them gets no second-order
contribution through them (use the inputs and outputs, or a nested ``custom_gradient``).
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from . import _backend, _records
from ._pytree import show, tree_flatten, tree_unflatten
from ._registry import CallDef, no_gradient, primitive, variable_names
from ._tensor import _SCALARS, Tensor
from ._variables import Variable
from .errors import GradientCountError, VariablesError, describe_fn
from .ops import astype, clip


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


def custom_gradient(f=None, *, surrogate=False):
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
        return functools.partial(custom_gradient, surrogate=surrogate)
    call = _recorder(f, f"CustomGradient:{getattr(f, '__name__', 'f')}", surrogate,
                     _positional_params(f))
    return _CustomGradientFunction(f, call, surrogate)


_STATIC = frozenset((*_SCALARS, str, type(None)))  # arguments that are neither Tensors nor trees


def _recorder(f, op_type, surrogate, params, kind="custom_gradient", bound_static=False):
    """``call(bound, *args, **kwargs)``: ``f(*bound, *args, **kwargs)`` (which returns
    ``(y, grad_fn)``) run unrecorded, and recorded as one op of type ``op_type`` whose gradient
    is ``grad_fn``. ``bound`` is ``(self,)`` for a method or ``()``, not an input; with
    ``bound_static`` (``custom_vjp``'s non-differentiable arguments) the Tensors in it are
    static arguments, not Variables the forward reads. A ``grad_fn`` with a ``_jvp_rule``
    attribute (``custom_jvp``) gives the op that JVP rule: ``_jvp_rule(*tangents)``, one
    tangent (a tree, ``None`` leaves for none) per argument, returns the outputs' tangents."""

    def call(bound, *args, **kwargs):
        state = _records._state
        saved = state.tapes
        watcher = _VariableWatcher()
        # observers (check-numerics) see the forward's ops; forward-mode accumulators do not:
        # the op's tangent comes from its custom gradient
        state.tapes = [watcher, *[t for t in saved if t._observer and not t._differentiates]]
        try:
            result = f(*bound, *args, **kwargs)
        finally:
            state.tapes = saved
        if not (isinstance(result, tuple) and len(result) == 2 and callable(result[1])):
            raise TypeError(
                f"custom_gradient: {f.__qualname__} must return a pair (y, grad_fn) with grad_fn "
                f"a function of the output cotangents; it returned {type(result).__name__}")
        y, grad_fn = result
        kw_names = [k for k, v in kwargs.items() if isinstance(v, Tensor) or (
            type(v) not in _STATIC and any(isinstance(x, Tensor) for x in tree_flatten(v)[0]))]
        given = (*args, *[kwargs[k] for k in kw_names])  # the arguments grad_fn differentiates
        trees = _trees(given)  # None unless an argument is a container (the common case)
        inputs = given if trees is None else _leaf_inputs(given, trees)
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
        if saved:
            n = len(args)

            def replay(*xs):
                vals = xs if trees is None else _rebuild(given, trees, xs)
                return call(bound, *vals[:n], **{**kwargs, **dict(zip(kw_names, vals[n:]))})

            own = params[len(bound):]
            arg_names = (*own[:n], *[f"args[{i}]" for i in range(len(own), n)], *kw_names)
            names = arg_names if trees is None else _leaf_names(arg_names, trees)
            rule = getattr(grad_fn, "_jvp_rule", None)
            info = CallDef(op_type, (*names, *variable_names(variables)),
                           _grad_adapter(grad_fn, variables, trees, arg_names, f),
                           jvp=None if rule is None else _jvp_adapter(rule, given, trees),
                           replay=replay, function=f, variables=variables, surrogate=surrogate)
            _records.record(info, (*inputs, *variables), {}, outs)
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
    if isinstance(res, dict):
        unknown = sorted(set(res) - set(arg_names), key=str)
        if unknown:
            raise GradientCountError(
                f"the gradient function {describe_fn(fn)} returned gradients for "
                f"{', '.join(map(repr, unknown))}, which are not arguments; its arguments are "
                f"{', '.join(map(repr, arg_names))}")
        return [res.get(name) for name in arg_names]
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


def py_function(func, inp, Tout, name=None):  # noqa: N803 - TensorFlow's name
    """Run ``func(*inp)`` eagerly on Tensors; gradients flow through the tapegrad ops it uses.

    ``inp``: list of Tensors (other values are converted); ``Tout``: a dtype or a list of
    dtypes, one per result (results are cast to them). Returns a Tensor or a list of Tensors.
    Raises ``ValueError`` if the number of results does not match ``Tout``.
    """
    from .ops.creation import convert_to_tensor

    args = [a if isinstance(a, Tensor) else convert_to_tensor(a) for a in inp]
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


__all__ = ["custom_gradient", "py_function", "numpy_function", "straight_through",
           "clip_gradient"]
