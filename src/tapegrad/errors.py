"""User-facing errors. Each message says what happened, where, and what to do."""
from __future__ import annotations

import inspect


class RegistrationError(ValueError, KeyError):
    """An op type already has what is being registered for it (``RegisterGradient`` of a type
    with a gradient). A ``ValueError``, and a ``KeyError`` as TensorFlow raises there."""

    __str__ = ValueError.__str__  # KeyError's would quote the message


class GradientError(ValueError):
    """Base class of errors about a value returned by a gradient function."""


class GradientShapeError(GradientError):
    """A gradient function returned a gradient whose shape or dtype does not fit its input."""


class GradientCountError(GradientError):
    """A gradient function returned the wrong number of gradients."""


class GradientTypeError(GradientError, TypeError):
    """A gradient function returned something that is not a tensor (a function, a list, ...)."""


class GradientCheckError(GradientError):
    """With ``tg.debugging.enable_gradient_checks()`` (or ``custom_gradient(check=True)``), a
    user-defined gradient or JVP rule failed its self-check: it is not linear in its cotangent,
    or disagrees with a central difference of its forward, or its JVP disagrees with it."""


class GradientCheckWarning(UserWarning):
    """:class:`GradientCheckError` as a warning (``enable_gradient_checks(action="warn")``)."""


class NotDifferentiableError(LookupError):
    """Differentiation reached an op type that has no gradient registered."""


class VariablesError(TypeError):
    """A ``custom_gradient`` function reads Variables but its gradient does not accept ``variables=``."""


class NumericsError(FloatingPointError):
    """With ``tg.debugging.enable_check_numerics()``, an op produced a NaN or an Inf."""


class TapeLeakWarning(UserWarning):
    """A Tensor that a recording tape traces was converted to a NumPy array: what is computed
    from that array carries no gradient."""


class ConvergenceWarning(RuntimeWarning):
    """An iterative solve a gradient needs (the adjoint solve of ``tg.linalg.cg`` or
    ``tg.linalg.gmres``) stopped before reaching its tolerance: the gradient is inaccurate."""


class ConvergenceError(RuntimeError):
    """:class:`ConvergenceWarning` as an error, with ``adjoint_on_failure="raise"``."""


def describe_fn(fn) -> str:
    """``qualname (file:line)`` of a function (a gradient function, a hook), for messages."""
    try:
        fn = inspect.unwrap(fn)
    except ValueError:
        pass
    name = getattr(fn, "__qualname__", None) or repr(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return name
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


class CheckpointError(ValueError):
    """A checkpoint does not fit the objects it is restored into, or its files are damaged
    (``tg.train.Checkpoint.restore``); nothing was restored."""


class SavedModelError(ValueError):
    """A directory is not a tapegrad export (``tg.saved_model.load``), or its files are damaged
    or incomplete."""
