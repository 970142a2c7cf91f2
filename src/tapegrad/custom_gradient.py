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
from ._registry import CallDef, no_gradient, primitive, variable_names
from ._tensor import Tensor
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

    ``f(*args, **kwargs)`` returns ``(y, grad_fn)``: ``y`` a Tensor or a tuple/list of Tensors,
    ``grad_fn(*dys)`` one gradient per input of ``f`` (``None`` allowed; a single Tensor when
    ``f`` has one input), each with its input's shape and dtype, or a dict keyed by input name
    (omitted names get no gradient). The inputs are the positional arguments, then the Tensor
    arguments passed by keyword, in signature order. The cotangents ``dys`` have the shapes of
    ``y``. If the forward reads trainable Variables that are not arguments, ``grad_fn`` must
    accept ``variables=`` and return ``(input_grads, variable_grads)``.

    ``surrogate=True`` marks a gradient that is intentionally not the derivative of the forward
    (straight-through, leaky or scaled gradients): ``tg.test`` reports it instead of failing.

    The forward's own ops are not recorded. Higher order: ``grad_fn``'s ops are recorded by
    outer tapes; for a custom *second-order* gradient return a tensor computed by a nested
    ``custom_gradient`` function from ``grad_fn``.

    Errors: ``TypeError`` if ``f`` does not return ``(y, grad_fn)``; ``VariablesError`` if it
    reads Variables and ``grad_fn`` lacks ``variables=``; at gradient time
    ``GradientCountError``, ``GradientShapeError`` and ``GradientTypeError`` name ``grad_fn``,
    its source line and the input.
    """
    if f is None:
        return functools.partial(custom_gradient, surrogate=surrogate)
    op_type = f"CustomGradient:{getattr(f, '__name__', 'f')}"
    params = _positional_params(f)

    def call(bound, *args, **kwargs):
        """``f(*bound, *args, **kwargs)`` with its custom gradient; ``bound`` is ``(self,)`` for
        a method (not an input) or ``()``."""
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
        kw_names = [k for k, v in kwargs.items() if isinstance(v, Tensor)]
        inputs = (*args, *[kwargs[k] for k in kw_names])
        arg_ids = {a._id for a in inputs if isinstance(a, Tensor)}
        variables = [v for i, v in watcher.variables.items() if i not in arg_ids]
        if variables and not _accepts_variables(grad_fn):
            names = ", ".join(repr(v.name) for v in variables)
            raise VariablesError(
                f"custom_gradient: {f.__qualname__} reads the Variable(s) {names}, so its "
                f"gradient function {grad_fn.__qualname__} must accept a keyword argument "
                "`variables` and return (input_gradients, variable_gradients); pass the "
                "Variables as arguments instead, or mark them trainable=False")
        outs, rebuild = _outputs(y, inputs)
        if saved:
            n = len(args)

            def replay(*xs):
                return call(bound, *xs[:n], **{**kwargs, **dict(zip(kw_names, xs[n:]))})

            own = params[len(bound):]
            names = (*own[:n], *[f"args[{i}]" for i in range(len(own), n)], *kw_names,
                     *variable_names(variables))
            info = CallDef(op_type, names, _grad_adapter(grad_fn, variables), replay=replay,
                           function=f, variables=variables, surrogate=surrogate)
            _records.record(info, (*inputs, *variables), {}, outs)
        return rebuild(outs)

    return _CustomGradientFunction(f, call, surrogate)


class _CustomGradientFunction:
    """What :func:`custom_gradient` returns: called like ``f``; as a method, the instance is
    bound to ``self`` and is not an input of the op (TensorFlow's decorator does the same)."""

    _custom_gradient = True  # found by `python -m tapegrad check` and tg.test.samples

    def __init__(self, f, call, surrogate):
        functools.update_wrapper(self, f)
        self._call = call
        self.surrogate = surrogate

    def __call__(self, *args, **kwargs):
        return self._call((), *args, **kwargs)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        bound = functools.partial(self._call, (obj,))
        functools.update_wrapper(bound, self.__wrapped__)
        bound.surrogate = self.surrogate
        return bound

    def __repr__(self):
        return f"<tg.custom_gradient {describe_fn(self.__wrapped__)}>"


def _outputs(y, args):
    """Flatten ``y`` to fresh-or-own output Tensors, and a function rebuilding its structure."""
    arg_ids = {a._id for a in args if isinstance(a, Tensor)}

    def own(t):
        if isinstance(t, Tensor) and not isinstance(t, Variable) and t._id not in arg_ids:
            return t
        v = t._value if isinstance(t, Tensor) else _backend.asarray(t)
        return Tensor(v)

    if isinstance(y, (tuple, list)):
        outs = tuple(own(t) for t in y)
        return outs, lambda o: type(y)(o)
    return (own(y),), lambda o: o[0]


def _grad_adapter(grad_fn, variables):
    if not variables:
        def grad(op, *dys):
            return grad_fn(*dys)
    else:
        def grad(op, *dys):
            res = grad_fn(*dys, variables=variables)
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise GradientCountError(
                    f"the gradient function {describe_fn(grad_fn)} is called with "
                    "variables=, so it must return a pair (input_gradients, variable_gradients)")
            gin, gvar = res
            gin = list(gin) if isinstance(gin, (tuple, list)) else [gin]
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
