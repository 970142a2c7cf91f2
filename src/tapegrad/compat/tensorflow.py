"""TensorFlow 2 names for tapegrad: change ``import tensorflow as tf`` to
``import tapegrad.compat.tensorflow as tf`` and code that uses only these features runs.

Aliases only. The one difference from ``import tapegrad`` is TensorFlow's float32 default:
``constant``, ``convert_to_tensor`` and ``Variable`` make float32 tensors from Python floats.
"""
from __future__ import annotations

import contextlib
import functools
import types

import tapegrad as _tg
from tapegrad import (GradientTape, RegisterGradient, Tensor, UnconnectedGradients,  # noqa: F401
                      abs, add, custom_gradient, divide, exp, float16, float32, float64,
                      gradient_override_map, int32, int64, log, matmul, maximum, minimum,
                      multiply, nn, no_gradient, numpy_function, ones, ones_like, optimizers,
                      py_function, random, recompute_grad, reshape, sqrt, square, stop_gradient,
                      subtract, tanh, test, where, zeros, zeros_like)
from tapegrad import bool as bool  # noqa: A004, F401

constant = functools.partial(_tg.constant, default_float=_tg.float32)
convert_to_tensor = functools.partial(_tg.convert_to_tensor, default_float=_tg.float32)
Variable = type("Variable", (_tg.Variable,), {"__slots__": (), "_default_float": _tg.float32,
                                              "__module__": __name__})
cast = _tg.astype
reduce_sum, reduce_mean, reduce_prod = _tg.sum, _tg.mean, _tg.prod
reduce_max, reduce_min = _tg.max, _tg.min
concat, stack, expand_dims, squeeze = _tg.concat, _tg.stack, _tg.expand_dims, _tg.squeeze
negative, sigmoid = _tg.negative, _tg.nn.sigmoid
function, TensorSpec, config = _tg.function, _tg.TensorSpec, _tg.config


@contextlib.contextmanager
def name_scope(name):
    """``tf.name_scope``: accepted for compatibility (tapegrad names no graph nodes); yields
    ``name``."""
    yield name


math = types.SimpleNamespace(
    abs=_tg.abs, add=_tg.add, subtract=_tg.subtract, multiply=_tg.multiply,
    divide=_tg.divide, negative=_tg.negative, square=_tg.square, sqrt=_tg.sqrt, exp=_tg.exp,
    expm1=_tg.expm1, log=_tg.log, log1p=_tg.log1p, sin=_tg.sin, cos=_tg.cos, tan=_tg.tan,
    sinh=_tg.sinh, cosh=_tg.cosh, tanh=_tg.tanh, asin=_tg.asin, acos=_tg.acos, atan=_tg.atan,
    atan2=_tg.atan2, sign=_tg.sign, maximum=_tg.maximum, minimum=_tg.minimum, pow=_tg.pow,
    floor=_tg.floor, ceil=_tg.ceil, round=_tg.round, sigmoid=_tg.nn.sigmoid,
    softplus=_tg.nn.softplus, reduce_sum=_tg.sum, reduce_mean=_tg.mean, reduce_max=_tg.max,
    reduce_min=_tg.min, reduce_prod=_tg.prod, reduce_std=_tg.std, reduce_variance=_tg.var,
    reduce_logsumexp=_tg.special.logsumexp, cumsum=_tg.cumulative_sum, argmax=_tg.argmax,
    argmin=_tg.argmin, greater=_tg.greater, less=_tg.less, equal=_tg.equal,
)
