"""tapegrad: reverse-mode automatic differentiation with first-class custom gradients."""
from __future__ import annotations

import numpy as _np

from ._registry import (Arg, Sample, RegisterGradient, gradient_override_map, no_gradient,
                        primitive, registered_ops)
from ._tape import GradientTape, Operation, UnconnectedGradients, register_hook
from ._tensor import Tensor, Variable, constant, convert_to_tensor
from . import errors
from . import custom_gradient as _cg
from .custom_gradient import *  # noqa: F401,F403
from . import ops as _ops
from .ops import *  # noqa: F403
from . import debugging, fft, linalg, nn, optimizers, random, special, test, viz  # noqa: E402

float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
bool = _np.bool_  # noqa: A001 - Array API name
e, pi, inf, nan, newaxis = _np.e, _np.pi, _np.inf, _np.nan, None
__array_api_version__ = "2024.12"  # the Array API revision the main namespace implements

__all__ = [
    "Tensor", "Variable", "constant", "convert_to_tensor", "GradientTape", "Operation",
    "UnconnectedGradients", "register_hook", "debugging", "primitive", "RegisterGradient", "no_gradient",
    "gradient_override_map", "registered_ops", "Sample", "Arg", "errors",
    "fft", "linalg", "nn", "optimizers", "random", "special", "test", "viz", *_cg.__all__,
    "float16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "bool", "e", "pi", "inf", "nan", "newaxis",
    "__array_api_version__",
    *_ops.__all__,
]
