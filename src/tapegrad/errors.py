"""User-facing errors. Each message says what happened, where, and what to do."""
from __future__ import annotations


class GradientError(ValueError):
    """Base class of errors about a value returned by a gradient function."""


class GradientShapeError(GradientError):
    """A gradient function returned a gradient whose shape or dtype does not fit its input."""


class GradientCountError(GradientError):
    """A gradient function returned the wrong number of gradients."""


class GradientTypeError(GradientError, TypeError):
    """A gradient function returned something that is not a tensor (a function, a list, ...)."""


class NotDifferentiableError(LookupError):
    """Differentiation reached an op type that has no gradient registered."""


class VariablesError(TypeError):
    """A ``custom_gradient`` function reads Variables but its gradient does not accept ``variables=``."""


class NumericsError(FloatingPointError):
    """With ``tg.debugging.enable_check_numerics()``, an op produced a NaN or an Inf."""
