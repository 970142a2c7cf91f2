"""Validation of what gradient functions return: count, type, shape, dtype.

The tape calls these on every gradient that does not already have its input's shape and dtype.
An output-shaped gradient of a broadcast input is summed back to the input's shape, and a
gradient in the dtype an op promoted its output to is cast back to the input's dtype (the
central un-broadcasting: gradient functions of elementwise ops return output-shaped
gradients). Anything else raises an error that names the gradient function, its source line,
the op type and the input.
"""
from __future__ import annotations

from . import _backend
from ._records import _state
from ._structural import ops
from ._tensor import Tensor
from .errors import (GradientCountError, GradientShapeError, GradientTypeError,
                     NotDifferentiableError, describe_fn)


def as_gradient_list(result, op, fn) -> list:
    """The gradients ``fn`` returned for ``op``, one per input (``None`` allowed).

    ``result`` may be a Tensor (one input), a tuple or list, or a dict keyed by input name.
    Raises ``GradientCountError`` for the wrong number of gradients or an unknown name.
    """
    n = len(op.inputs)
    if isinstance(result, (list, tuple)):
        gs = list(result)
    elif isinstance(result, dict):
        return gradients_by_name(result, [op._opdef.param_name(k) for k in range(n)], fn,
                                 of=f" of op type {op.type!r}")
    else:
        gs = [result]
    if len(gs) != n:
        hint = ""
        if any(callable(g) and not isinstance(g, Tensor) for g in gs):
            hint = (". One of them is a function: a gradient function cannot return a "
                    "second-order gradient function. For a custom second-order gradient, return "
                    "a tensor computed by a nested @tg.custom_gradient function inside the "
                    "gradient function; the plain second derivative comes from an outer "
                    "GradientTape")
        raise GradientCountError(
            f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned "
            f"{len(gs)} gradient(s) for {n} input(s); return exactly one per input, in input "
            f"order, with None for an input that has no gradient{hint}")
    return gs


def gradients_by_name(result, names, fn, what="inputs", of="") -> list:
    """``result``, a dict of gradients keyed by name, as a list in the order of ``names``
    (``None`` for a name it lacks). Raises ``GradientCountError`` for a key that is not in
    ``names``, naming the gradient function ``fn`` (``of``: what it is the gradient of, e.g.
    `` of op type 'Mul'``) and ``what`` the names are (``"inputs"``, ``"arguments"``)."""
    unknown = sorted(set(result) - set(names), key=str)
    if unknown:
        raise GradientCountError(
            f"the gradient function {describe_fn(fn)}{of} returned gradients for "
            f"{', '.join(map(repr, unknown))}, which are not {what}; its {what} are "
            f"{', '.join(map(repr, names))}")
    return [result.get(name) for name in names]


def _input_label(op, k) -> str:
    return f"input {k} ({op._opdef.param_name(k)!r})"


def check_gradient(op, k, x, g, fn):
    """``g`` as the gradient of input ``k`` (the tensor ``x``) of ``op``: a Tensor of ``x``'s
    shape and dtype, un-broadcast and cast back where that is what it needs (a complex
    gradient of a real input: its real part, the gradient along real directions).

    Raises ``GradientTypeError`` for a non-tensor, ``GradientShapeError`` for a shape or dtype
    that does not fit ``x``.
    """
    if not isinstance(g, Tensor):
        g = _as_tensor(op, k, x, g, fn)
    gv, xv = g._value, x._value
    if gv.shape != xv.shape:
        g = _unbroadcast(op, k, x, g, fn)
    # compared as NumPy's: also across libraries (NumPy constants in a trace)
    if gv.dtype is not xv.dtype and _backend.np_dtype(gv.dtype) != _backend.np_dtype(xv.dtype):
        np_dtype = _backend.np_dtype
        out_dtypes = [o._value.dtype for o in op.outputs]
        if gv.dtype in out_dtypes and _backend.is_floating(xv.dtype):
            if np_dtype(gv.dtype).kind == "c" != np_dtype(xv.dtype).kind:
                g = ops.real(g)
            if np_dtype(g._value.dtype) != np_dtype(xv.dtype):
                g = ops.astype(g, xv.dtype)  # undo type promotion, as broadcasting is undone
        else:
            raise GradientShapeError(
                f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
                f"gradient of dtype {g.dtype} for {_input_label(op, k)}, which has dtype "
                f"{_backend.np_dtype(xv.dtype)}; return a gradient with its input's dtype")
    return g


def _as_tensor(op, k, x, g, fn):
    """A raw backend array returned as a gradient, as a Tensor; other values raise."""
    if callable(g):
        raise GradientTypeError(
            f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
            f"function for {_input_label(op, k)}, not a tensor. To give a custom second-order "
            "gradient, return a tensor computed by a nested @tg.custom_gradient function "
            "inside the gradient function (see the README); the plain second derivative "
            "comes from an outer GradientTape")
    not_array = isinstance(g, (list, tuple, dict, str)) or g is None
    if not not_array:
        try:
            _backend.namespace(g)
        except TypeError:
            not_array = True
    if not_array:
        raise GradientTypeError(
            f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
            f"{type(g).__name__} for {_input_label(op, k)}; return a Tensor (or None)")
    python = isinstance(g, (int, float)) and not isinstance(g, bool)
    dtype = x._value.dtype if python else None  # a Python number takes its input's dtype (TF)
    g = Tensor(_backend.asarray(g, dtype=dtype, xp=_backend.namespace(x._value)))
    if any(obs._observer for obs in _state.tapes):
        g = ops.identity(g)  # recorded as an op, so observers (check-numerics) see the value
    return g


def _unbroadcast(op, k, x, g, fn):
    xs, gs = tuple(x._value.shape), tuple(g._value.shape)
    lead = len(gs) - len(xs)
    axes = list(range(lead)) if lead >= 0 else None  # the axes to sum over
    if axes is not None:
        for i, a in enumerate(xs):
            b = gs[lead + i]
            if a != b:
                if a != 1:
                    axes = None
                    break
                axes.append(lead + i)
    if axes is None or gs not in [tuple(o._value.shape) for o in op.outputs]:
        raise GradientShapeError(
            f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
            f"gradient of shape {gs} for {_input_label(op, k)}, which has shape {xs}; expected "
            f"shape {xs} (a gradient of the op's output shape is summed back only where the "
            "input was broadcast). Return one gradient per input with that input's shape")
    if axes:
        g = ops.sum(g, axis=tuple(axes))
    if len(axes) != lead:  # size-1 axes were summed away
        g = ops.reshape(g, xs)
    return g


def no_gradient_error(op_type):
    """The error for differentiating through an op type that has no registered gradient."""
    return NotDifferentiableError(
        f"no gradient is registered for op type {op_type!r}; register one with "
        f"@tg.RegisterGradient({op_type!r}), declare it non-differentiable with "
        f"tg.no_gradient({op_type!r}), or wrap the computation in tg.stop_gradient")
