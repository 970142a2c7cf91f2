"""TensorFlow 2 names for tapegrad: change ``import tensorflow as tf`` to
``import tapegrad.compat.tensorflow as tf`` and code that uses only these features runs.

Aliases only: every name is a tapegrad function, module or class, or one with TensorFlow's
default arguments bound by ``functools.partial``. The one difference from ``import tapegrad``
is TensorFlow's float32 default: ``constant``, ``convert_to_tensor``, ``Variable``, ``fill``
and ``range`` make float32 tensors from Python floats; ``zeros``, ``ones``, ``eye``,
``random.normal`` and ``random.uniform`` are float32 unless given a dtype (``one_hot`` is
float32 in tapegrad too). ``nn`` (convolutions and pooling included), ``optimizers`` (also as
``keras.optimizers``, with ``schedules``) and ``train`` are tapegrad's own. Known gaps: ``transpose`` takes the permutation positionally (not
``perm=``); ``gather`` has no ``batch_dims``.
"""
from __future__ import annotations

import functools
import types

import tapegrad as _tg
from tapegrad import (GradientTape, Module, RegisterGradient, Tensor,  # noqa: F401
                      UnconnectedGradients, abs, acos, acosh, add, asin, asinh, atan, atan2,
                      atanh, broadcast_to, clip_by_global_norm, clip_by_norm, clip_by_value, cos,
                      cosh, custom_gradient, divide, einsum, equal, exp, float16, float32,
                      float64, floor, gradient_override_map, greater, greater_equal, identity,
                      int32, int64, less, less_equal, log, logical_and, logical_not, logical_or,
                      matmul, maximum, minimum, multiply, name_scope, nn, no_gradient,
                      not_equal, numpy_function, ones_like, optimizers, pow, py_function,
                      recompute_grad, reshape, round, shape, sign, sin, sinh, sqrt, square,
                      stop_gradient, subtract, tan, tanh, test, tile, where, zeros_like)
from tapegrad import bool as bool  # noqa: A004, F401

# --- creation, with TensorFlow's float32 default ---------------------------------------------
_f32 = _tg.float32
constant = functools.partial(_tg.constant, default_float=_f32)
convert_to_tensor = functools.partial(_tg.convert_to_tensor, default_float=_f32)
Variable = type("Variable", (_tg.Variable,), {"__slots__": (), "_default_float": _f32,
                                              "__module__": __name__})
zeros = functools.partial(_tg.zeros, dtype=_f32)
ones = functools.partial(_tg.ones, dtype=_f32)
eye = functools.partial(_tg.eye, dtype=_f32)
fill = functools.partial(_tg.full, default_float=_f32)
range = functools.partial(_tg.arange, default_float=_f32)  # noqa: A001 - TensorFlow's name
one_hot = _tg.nn.one_hot

# --- manipulation and math -------------------------------------------------------------------
cast = _tg.astype
transpose = _tg.permute_dims
gather = functools.partial(_tg.take, axis=0)
reduce_sum, reduce_mean, reduce_prod = _tg.sum, _tg.mean, _tg.prod
reduce_max, reduce_min = _tg.max, _tg.min
reduce_all, reduce_any, reduce_logsumexp = _tg.all, _tg.any, _tg.special.logsumexp
concat, stack, expand_dims, squeeze = _tg.concat, _tg.stack, _tg.expand_dims, _tg.squeeze
negative, sigmoid = _tg.negative, _tg.nn.sigmoid
function, TensorSpec, config = _tg.function, _tg.TensorSpec, _tg.config

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
linalg = types.SimpleNamespace(global_norm=_tg.global_norm,
                               **{n: getattr(_tg.linalg, n) for n in _tg.linalg.__all__})

# --- namespaces: random with the float32 default; nn, optimizers, train ----------------------
random = types.SimpleNamespace(
    normal=functools.partial(_tg.random.normal, dtype=_f32),
    uniform=functools.partial(_tg.random.uniform, dtype=_f32),
    set_seed=_tg.random.set_seed, Generator=_tg.random.Generator,
    get_global_generator=_tg.random.get_global_generator,
)
train = _tg.train  # Checkpoint, CheckpointManager, latest_checkpoint
keras = types.SimpleNamespace(optimizers=optimizers)  # tf.keras.optimizers.AdamW, .schedules
