"""tapegrad: automatic differentiation with first-class custom gradients.

Gradient machinery has TensorFlow 2's names (``GradientTape``, ``custom_gradient``,
``RegisterGradient``, ``gradient_override_map``); math is the Python Array API standard's
(this module is an Array API 2024.12 namespace). See ``docs/architecture.md`` for the layers.
"""
import sys as _sys
from importlib.metadata import PackageNotFoundError as _NotFound
from importlib.metadata import version as _version

import numpy as _np

from ._registry import (Arg, Sample, RegisterGradient, RegisterJVP, gradient_override_map,
                        no_gradient, primitive, registered_ops)
from ._records import Operation
from ._hooks import register_hook
from ._tape import GradientTape, UnconnectedGradients
from ._views import OperationView
from ._tensor import Tensor
from .ops.creation import constant, convert_to_tensor
from ._variables import Variable
from ._structural import provide as _provide
from . import checkpointing, errors, tree_util
from . import ops as _ops
from .ops import *  # noqa: F403
from . import custom_gradient as _cg
from .custom_gradient import *  # noqa: F401,F403
from . import config, debugging, fft, linalg, nn, optimizers, random, special, test, viz  # noqa: E402
from . import train  # noqa: E402
from . import _jacobian, _leaks, _once_differentiable  # noqa: E402,F401 - they plug into the core
from . import control_flow as _control_flow
from .control_flow import *  # noqa: F401,F403
from . import lax  # noqa: E402
from . import autograph  # noqa: E402
from . import transforms as _transforms
from .transforms import *  # noqa: F401,F403
from ._function import Function, RetracingWarning, TensorSpec, function
from .module import Module, name_scope
from .forward import ForwardAccumulator, jacfwd, jvp
from .interop import from_jax, to_jax
from .batching import vectorized_map, vmap
from . import saved_model  # noqa: E402
from . import distribute  # noqa: E402

try:
    __version__ = _version("tapegrad")
except _NotFound:  # running from a source tree that was not installed
    __version__ = "0+unknown"

float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
bool = _np.bool_  # noqa: A001 - Array API name
e, pi, inf, nan, newaxis = _np.e, _np.pi, _np.inf, _np.nan, None
__array_api_version__ = "2024.12"  # the Array API revision the main namespace implements

print = debugging.print  # noqa: A001 - tg.print; not in __all__, so * keeps Python's print
_provide(namespace=_sys.modules[__name__])  # Tensor.__array_namespace__ returns this module

__all__ = [
    "Tensor", "Variable", "constant", "convert_to_tensor", "GradientTape", "Operation",
    "OperationView", "UnconnectedGradients", "register_hook", "debugging", "primitive",
    "RegisterGradient", "no_gradient", "gradient_override_map", "registered_ops", "Sample",
    "Arg", "errors", "fft", "linalg", "nn", "optimizers", "random", "special", "test", "viz",
    "config", "train", "function", "Function", "RetracingWarning", "TensorSpec",
    "ForwardAccumulator",
    "RegisterJVP", "jvp", "jacfwd", "Module", "name_scope", "to_jax", "from_jax", "saved_model",
    "vmap", "vectorized_map", "tree_util", "checkpointing",
    *_cg.__all__, *_control_flow.__all__, "lax", "autograph",
    *_transforms.__all__,
    "float16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "bool", "e", "pi", "inf", "nan", "newaxis",
    "__array_api_version__", "__version__",
    *_ops.__all__,
]
