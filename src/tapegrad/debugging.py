"""Debugging aids: check-numerics mode and logging from inside gradient functions."""
from __future__ import annotations

import functools

from . import _backend, _records, config
from .errors import NumericsError

__all__ = ["enable_check_numerics", "disable_check_numerics", "log"]


class _NumericsObserver:
    """Sees every op (forward and gradient) and raises at the first NaN or Inf it produces.

    Inside ``tg.function`` the values are symbolic: the check is compiled into the program as
    a host callback (``jax.debug.callback``) that raises when the op runs; JAX reports it as a
    ``JaxRuntimeError`` carrying the same message."""

    _observer = True
    _differentiates = False

    def observe(self, opdef, args, attrs, outs):
        op_type = opdef.type
        jax = config.loaded_jax()
        for k, out in enumerate(outs):
            v = out._value
            if not _backend.is_floating(v.dtype):
                continue
            message = functools.partial(_message, op_type, k, _phase(), _shapes(args))
            if jax is not None and isinstance(v, jax.core.Tracer):
                jax.debug.callback(functools.partial(_check, message), v)
            else:
                _check(message, v)


def _check(message, v):
    xp = _backend.namespace(v)
    if not bool(xp.all(xp.isfinite(v))):
        raise NumericsError(message("NaN" if bool(xp.any(xp.isnan(v))) else "Inf"))


def _phase() -> str:
    tape, op = _records.backward_state()
    if tape is None:
        return "in the forward computation"
    if op is None:
        return "in the gradient computation"
    return f"in the gradient of op type {op.type!r} (while differentiating it)"


def _shapes(args) -> str:
    return ", ".join(str(tuple(a.shape)) if hasattr(a, "shape") else repr(a) for a in args)


def _message(op_type, k, phase, shapes, what) -> str:
    return (f"check_numerics: op type {op_type!r} produced {what} in output {k} {phase}; its "
            f"inputs have shapes [{shapes}]. Disable with tg.debugging.disable_check_numerics()")


_OBSERVER = _NumericsObserver()


def enable_check_numerics() -> None:
    """Raise :class:`~tapegrad.errors.NumericsError` at the first NaN or Inf produced by any op.

    Checks every forward and gradient computation (in this thread and threads started later),
    naming the op type, whether it was forward or gradient, and the input shapes. Costs one
    reduction per op; off by default.
    """
    _records.add_observer(_OBSERVER)


def disable_check_numerics() -> None:
    """Turn check-numerics mode off again."""
    _records.remove_observer(_OBSERVER)


def log(name: str, value) -> None:
    """From inside a gradient function, keep ``value`` in ``tape.logs[name]`` (a list).

    For debugging gradients without print statements: after ``tape.gradient`` returns,
    ``tape.logs`` maps each name to the values logged during that call, in order. Raises
    ``RuntimeError`` when no gradient is being computed.
    """
    tape, _ = _records.backward_state()
    if tape is None:
        raise RuntimeError(
            f"tg.debugging.log({name!r}, ...) was called outside a gradient computation; call "
            "it from a gradient function (custom_gradient or RegisterGradient) while "
            "tape.gradient runs")
    tape.logs.setdefault(name, []).append(value)
