"""TensorFlow 2 names for tapegrad: change ``import tensorflow as tf`` to
``import tapegrad.compat.tensorflow as tf`` and code that uses only these features runs.

Every name is a tapegrad function, module or class: an alias, one with TensorFlow's default
arguments bound by ``functools.partial``, or (below "TensorFlow's signatures") a thin adapter
taking TensorFlow's positional arguments and keywords (``tf.reduce_sum(x, 1)``,
``tf.concat(values, 0)``, ``tf.transpose(x, perm=...)``, ``tf.matmul(a, b, transpose_b=True)``,
``tf.math.cumsum(x, exclusive=True)``, ``tf.gather(x, i, batch_dims=1)``; ``name=`` is accepted
and ignored). The one other
difference from ``import tapegrad`` is TensorFlow's float32 default: ``constant``,
``convert_to_tensor``, ``Variable``, ``fill`` and ``range`` make float32 tensors from Python
floats and int32 ones from Python ints (the core keeps its float64/int64 defaults); ``zeros``, ``ones``, ``eye``, ``random.normal`` and ``random.uniform`` are float32
unless given a dtype (``one_hot`` is float32 in tapegrad too). ``nn`` (convolutions and pooling
included), ``optimizers`` (also as ``keras.optimizers``, with ``schedules``) and ``train`` are
tapegrad's own. ``data.Dataset`` (``tapegrad.compat.tf_data``) is an input pipeline of
Tensors iterated eagerly in Python (``from_tensor_slices``, ``map``, ``shuffle``, ``batch``,
``repeat``, ...). ``signal`` and ``image.resize`` (``compat.tf_signal``), ``debugging``
(``compat.tf_debugging``), ``TensorArray`` (``compat.tf_tensor_array``) and ``summary``
(``compat.tf_summary``, JSON lines, not TensorBoard's format) live in their own modules;
``tests/tf_oracle`` compares this module's outputs with real TensorFlow's.
"""
from __future__ import annotations

import builtins
import functools
import types

import numpy as _np

import tapegrad as _tg
from tapegrad import (GradientTape, Module, RegisterGradient, Tensor,  # noqa: F401
                      UnconnectedGradients, cond, foldl, foldr, map_fn, scan, switch_case,
                      while_loop, abs, acos, acosh, add, asin, asinh, atan, atan2,
                      atanh, broadcast_to, clip_by_global_norm, clip_by_norm, clip_by_value, cos,
                      cosh, custom_gradient, einsum, equal, exp, float16, float32,
                      float64, floor, gradient_override_map, greater, greater_equal, identity,
                      int32, int64, less, less_equal, log, logical_and, logical_not, logical_or,
                      maximum, minimum, multiply, name_scope, nn, no_gradient,
                      not_equal, numpy_function, ones_like, optimizers, pow, py_function,
                      recompute_grad, round, sign, sin, sinh, sqrt, square,
                      stop_gradient, subtract, tan, tanh, test, tile, vectorized_map,
                      zeros_like)
from tapegrad import bool as bool  # noqa: A004, F401

# --- creation, with TensorFlow's float32 default ---------------------------------------------
_f32 = _tg.float32
complex64, complex128 = _tg.complex64, _tg.complex128
int8, int16, uint8 = _tg.int8, _tg.int16, _tg.uint8


def _tf_dtype(dtype, value):
    """``dtype``, or TensorFlow's default for Python data when it is None: float32 for Python
    floats (nested lists holding one), int32 for Python ints (nested lists of them, bools
    excluded); a value with a dtype (an array, a NumPy scalar, a Tensor) keeps its own."""
    if dtype is not None or value is None or hasattr(value, "dtype"):
        return dtype
    kind = _np.asarray(value).dtype.kind if isinstance(value, (int, float, list, tuple)) else ""
    return _f32 if kind == "f" else _tg.int32 if kind == "i" else None


def constant(value, dtype=None, shape=None, name=None):
    """``tf.constant``: a Tensor of ``value`` (float32 for Python floats). With ``shape``, a
    scalar ``value`` fills that shape and any other is reshaped to it (it must have as many
    elements). Raises ``TypeError`` when the element counts differ, as TensorFlow does.

    A Tensor ``value`` (not a Variable) is returned as it is, as TensorFlow's eager
    ``tf.constant`` returns an eager tensor, so tapes and accumulators that trace it go on
    tracing it; a ``dtype`` other than its own raises ``TypeError``, as TensorFlow's does
    (cast it with ``tf.cast``, which is differentiable)."""
    if isinstance(value, Tensor) and not isinstance(value, _tg.Variable):
        if dtype is not None and _tg._backend.np_dtype(dtype) != value.dtype:
            raise TypeError(f"tf.constant: value is a Tensor of dtype {value.dtype} but dtype "
                            f"{_tg._backend.np_dtype(dtype)} was asked; TensorFlow converts no "
                            "tensor's dtype here: cast it with tf.cast(value, dtype)")
        out = value
    else:
        _extras.check_not_string(value, "tf.constant")
        out = _tg.constant(value, _tf_dtype(dtype, value))
    if shape is None:
        return out
    shape = tuple(int(d) for d in shape)
    if out.ndim == 0:
        return _tg.broadcast_to(out, shape)
    size = functools.reduce(lambda a, b: a * b, shape, 1)
    if out.size != size:
        raise TypeError(f"tf.constant: value has {out.size} element(s) but shape {list(shape)} "
                        f"needs {size}; give a scalar to fill the shape, or a value with "
                        f"{size} elements")
    return _tg.reshape(out, shape)


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None):
    """``tf.convert_to_tensor``: a Tensor of ``value``; a Variable gives a fresh read of it (a
    Tensor of its own, recorded by tapes, as TensorFlow's ``read_value``), so two conversions
    of one Variable are two tensors with their own gradients."""
    if isinstance(value, _tg.Variable):
        read = value.read_value()
        return read if dtype is None else _tg.astype(read, dtype)
    return _tg.convert_to_tensor(value, _tf_dtype(dtype if dtype is not None else dtype_hint,
                                                  value))


def get_static_value(tensor, partial=False):
    """``tf.get_static_value``: the value as a NumPy array, or ``None`` inside a
    ``tf.function`` trace (where it is not known yet)."""
    if _tg.config.tracing():
        return None
    return convert_to_tensor(tensor).numpy()


def _variable_init(self, initial_value, trainable=True, name=None, dtype=None):
    _tg.Variable.__init__(self, initial_value, trainable, name, _tf_dtype(dtype, initial_value))


Variable = type("Variable", (_tg.Variable,), {
    "__slots__": (), "_default_float": _f32, "__module__": __name__, "__init__": _variable_init,
    "value": _tg.Variable.read_value,  # TensorFlow's name for a read of the current value
    "__doc__": "``tf.Variable``: a ``tg.Variable`` whose Python floats become float32 and "
               "Python ints int32, as TensorFlow's (shape, dtype and errors as "
               "``tg.Variable``; ``value()`` reads it).",
})
IndexedSlices = _tg.IndexedSlices  # a Variable's row-gather gradient (tapegrad.ops.indexing)
autodiff = types.SimpleNamespace(GradientTape=GradientTape,
                                 ForwardAccumulator=_tg.ForwardAccumulator)
grad_pass_through = _tg.straight_through


class _Shape(Tensor):
    """``tf.shape``'s result: a 1-d integer Tensor that also holds the static shape
    (``_static``, a tuple, or an int for one element), so that ``reshape``, ``zeros``,
    ``ones`` and ``fill`` take it, or a list holding its elements (``[tf.shape(x)[0], -1]``),
    inside a ``tf.function`` trace as Python ints. Arithmetic on it gives plain Tensors."""

    __slots__ = ("_static",)

    def __getitem__(self, key):
        out = Tensor.__getitem__(self, key)
        if isinstance(key, (int, slice)) and not isinstance(key, builtins.bool):
            out = _Shape(out._value)
            out._static = self._static[key]
        return out


def shape(input, out_type=None, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.shape``: ``input``'s shape as a 1-d integer Tensor (int32, or ``out_type``), as
    ``tapegrad.shape``; it and its elements (``tf.shape(x)[0]``) are also taken as static
    sizes by this module's ``reshape``, ``zeros``, ``ones`` and ``fill`` inside a
    ``tf.function``. Not differentiable (a constant)."""
    out = _tg.shape(input, out_type)
    static = _Shape(out._value)
    static._static = tuple(_tg.convert_to_tensor(input).shape)
    return static


def _static_shape(shape):
    """A shape argument with ``tf.shape`` results (whole or their elements) as Python ints."""
    if hasattr(shape, "_static"):
        return shape._static
    if isinstance(shape, (list, tuple)):
        return tuple(getattr(d, "_static", d) for d in shape)
    return shape


def reshape(tensor, shape, name=None):
    """``tf.reshape``: ``tensor`` with ``shape`` (one entry may be -1); entries may be
    ``tf.shape`` results, also inside ``tf.function``. Errors and gradient as
    ``tapegrad.reshape``."""
    return _tg.reshape(tensor, _static_shape(shape))


def zeros(shape, dtype=_f32, name=None):
    """``tf.zeros``: zeros of ``shape`` (a ``tf.shape`` result allowed), float32 by default."""
    return _tg.zeros(_static_shape(shape), dtype=dtype)


def ones(shape, dtype=_f32, name=None):
    """``tf.ones``: ones of ``shape`` (a ``tf.shape`` result allowed), float32 by default."""
    return _tg.ones(_static_shape(shape), dtype=dtype)

eye = functools.partial(_tg.eye, dtype=_f32)


def fill(dims, value, name=None):
    """``tf.fill``: a tensor of shape ``dims`` filled with the scalar ``value`` (float32 for a
    Python float, int32 for a Python int, as in TensorFlow); errors as ``tapegrad.full``."""
    return _tg.full(_static_shape(dims), value, dtype=_tf_dtype(None, value))


def range(start, limit=None, delta=1, dtype=None, name=None):  # noqa: A001 - TF's name
    """``tf.range``: ``start, start + delta, ...`` below ``limit`` (from 0 to ``start`` when
    ``limit`` is None), 1-d; int32 for Python ints and float32 for Python floats unless
    ``dtype`` is given, as in TensorFlow; errors as ``tapegrad.arange``. Not differentiable."""
    if dtype is None:
        data = [v for v in (start, limit, delta) if v is not None]
        dtype = _tf_dtype(None, data) if not any(hasattr(v, "dtype") for v in data) else None
    return _tg.arange(start, limit, delta, dtype=dtype)

one_hot = _tg.nn.one_hot

_range = builtins.range  # this module's range is TensorFlow's tf.range


# --- TensorFlow's signatures ------------------------------------------------------------------
def _axes(axis):
    """TensorFlow's axis argument (None, an int, or a list or tuple of ints) as tapegrad's."""
    return tuple(axis) if isinstance(axis, (list, tuple)) else axis


def _integer(x) -> builtins.bool:
    return convert_to_tensor(x).dtype.kind in "iu"


def _reduction(fn):
    """``fn(x, /, *, axis, keepdims)`` with TensorFlow's ``(input_tensor, axis=None,
    keepdims=False, name=None)``; integer sums and products keep the input's dtype (int32
    stays int32) and an integer mean is the sum divided with truncation, as TensorFlow's."""
    def reduce(input_tensor, axis=None, keepdims=False, name=None):
        if fn in (_tg.sum, _tg.prod, _tg.mean) and _integer(input_tensor):
            x = convert_to_tensor(input_tensor)
            total = (_tg.prod if fn is _tg.prod else _tg.sum)(
                x, axis=_axes(axis), keepdims=keepdims, dtype=x.dtype)
            if fn is not _tg.mean:
                return total
            n = x.size // builtins.max(total.size, 1) if x.size else 1
            return _tg.sign(total) * (_tg.abs(total) // _tg.astype(_tg.constant(n), x.dtype))
        return fn(input_tensor, axis=_axes(axis), keepdims=keepdims)

    reduce.__name__ = reduce.__qualname__ = fn.__name__
    reduce.__doc__ = (f"TensorFlow's reduction over ``axis`` (None: all; an int, or a list or "
                      f"tuple of ints) as tapegrad's ``{fn.__name__}``, whose shapes, dtypes, "
                      "errors and gradient it has; ``keepdims`` keeps the axes as size 1.")
    return reduce


def _int_kept(fn):
    """``fn`` (a sum or product) of an integer tensor in its own dtype, as TensorFlow keeps
    int32 (the Array API promotes to the default integer, int64)."""
    def kept(x, /, *, axis=None, keepdims=False):
        x = convert_to_tensor(x)
        dtype = x.dtype if _np.dtype(x.dtype).kind in "iu" else None
        return fn(x, axis=axis, dtype=dtype, keepdims=keepdims)

    kept.__name__ = fn.__name__
    return kept


def _mean(x, /, *, axis=None, keepdims=False):
    """``tf.reduce_mean``: of an integer tensor, the integer mean rounded toward zero in its
    dtype, as TensorFlow computes it."""
    x = convert_to_tensor(x)
    if _np.dtype(x.dtype).kind not in "iu":
        return _tg.mean(x, axis=axis, keepdims=keepdims)
    total = _tg.sum(x, axis=axis, dtype=_tg.int64, keepdims=keepdims)
    n = x.size // builtins.max(total.size, 1) if x.size else 1
    return _tg.astype(_tg.astype(total, _tg.float64) / n, x.dtype)


_mean.__name__ = "mean"
reduce_sum, reduce_mean, reduce_prod = map(_reduction, (_int_kept(_tg.sum), _mean,
                                                        _int_kept(_tg.prod)))
reduce_max, reduce_min = _reduction(_tg.max), _reduction(_tg.min)
reduce_all, reduce_any = _reduction(_tg.all), _reduction(_tg.any)
reduce_logsumexp = _reduction(_tg.special.logsumexp)
reduce_std, reduce_variance = _reduction(_tg.std), _reduction(_tg.var)


def _python_data(values):
    """``values`` with each entry converted by this module's ``convert_to_tensor`` (int32 for
    Python ints, float32 for floats) when none has a dtype; else as they are (a Python
    number then takes its partners' dtype, as in TensorFlow)."""
    if any(hasattr(v, "dtype") for v in values):
        return list(values)
    return [convert_to_tensor(v) for v in values]


def concat(values, axis, name=None):
    """``tf.concat``: the tensors ``values`` joined along ``axis`` (required, as in TF);
    shapes, dtypes, errors and gradient as ``tapegrad.concat`` (Python lists alone: int32 or
    float32, as TensorFlow converts them)."""
    return _tg.concat(_python_data(values), axis=axis)


def stack(values, axis=0, name=None):
    """``tf.stack``: the same-shape tensors ``values`` stacked along a new ``axis``; shapes,
    dtypes, errors and gradient as ``tapegrad.stack`` (Python numbers alone: int32 or
    float32, as TensorFlow converts them)."""
    return _tg.stack(_python_data(values), axis=axis)


def transpose(a, perm=None, conjugate=False, name=None):
    """``tf.transpose``: ``a`` with its axes permuted by ``perm`` (reversed when None),
    complex-conjugated if ``conjugate``. Result shape ``a.shape`` permuted, same dtype;
    ``ValueError`` for a ``perm`` that is not a permutation of the axes (as
    ``tapegrad.permute_dims``). Gradient: the cotangent permuted back."""
    out = _tg.permute_dims(a, None if perm is None else tuple(perm))
    return _tg.conj(out) if conjugate else out


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           name=None):
    """``tf.matmul``: ``a @ b`` with either operand's last two axes transposed
    (``transpose_*``) or conjugate-transposed (``adjoint_*``) first; shapes, dtypes, errors
    and gradient as ``tapegrad.matmul`` of the transposed operands."""
    if transpose_a or adjoint_a:
        a = _tg.matrix_transpose(_tg.conj(a) if adjoint_a else a)
    if transpose_b or adjoint_b:
        b = _tg.matrix_transpose(_tg.conj(b) if adjoint_b else b)
    return _tg.matmul(a, b)


def _arg(fn):
    def arg(input, axis=None, output_type=_tg.int64, name=None):  # noqa: A002 - TF's name
        out = fn(input, axis=0 if axis is None else axis)  # TensorFlow's default axis is 0
        return out if out.dtype == output_type else _tg.astype(out, output_type)

    arg.__name__ = arg.__qualname__ = fn.__name__
    arg.__doc__ = (f"``tf.math.{fn.__name__}``: the index of the {fn.__name__[3:]} along "
                   "``axis`` (0 by default, as in TensorFlow): ``input``'s shape without "
                   "``axis``, dtype ``output_type``; errors as tapegrad's "
                   f"``{fn.__name__}``; no gradient (integer result).")
    return arg


argmax, argmin = _arg(_tg.argmax), _arg(_tg.argmin)


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """``tf.math.cumsum``: running sums along ``axis``; ``exclusive`` leaves out each element
    itself, ``reverse`` sums from the end. Result: ``x``'s shape and dtype; errors as
    ``tapegrad.cumulative_sum``. Gradient: the reversed running sum of the cotangent (by the
    composition)."""
    x = convert_to_tensor(x)
    if reverse:
        x = _tg.flip(x, axis=axis)
    out = _tg.cumulative_sum(x, axis=axis,  # an integer x keeps its dtype, as in TensorFlow
                             dtype=x.dtype if _np.dtype(x.dtype).kind in "iu" else None)
    if exclusive:
        out = out - x
    return _tg.flip(out, axis=axis) if reverse else out


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """``tf.gather``: the slices of ``params`` along ``axis`` at the integer ``indices``.

    With ``batch_dims`` b (negative counts from the end of ``indices``' axes), the first b
    axes of ``params`` and ``indices`` are batch axes of equal sizes, matched one to one, and
    ``axis`` (default b) must be at least b. Result shape: ``params.shape[:axis] +
    indices.shape[b:] + params.shape[axis + 1:]``. Raises ``ValueError`` for an ``axis``
    before the batch axes or batch axes of different sizes, ``IndexError`` for an index out
    of range. Gradient: the indexing's (a scatter-add of the cotangent).
    """
    params, indices = _tg.convert_to_tensor(params), _tg.convert_to_tensor(indices)
    b = batch_dims + indices.ndim if batch_dims < 0 else batch_dims
    axis = b if axis is None else axis + params.ndim if axis < 0 else axis
    if b == 0:
        return _tg.take(params, indices, axis=axis)
    if axis < b or tuple(params.shape[:b]) != tuple(indices.shape[:b]):
        raise ValueError(f"gather: with batch_dims={batch_dims}, params {tuple(params.shape)} "
                         f"and indices {tuple(indices.shape)} must share their first {b} axes "
                         f"and axis (here {axis}) must be at least {b}")
    n, m = indices.ndim, axis - b
    if m:  # the gathered axis next to the batch axes
        params = _tg.permute_dims(params, (*_range(b), axis, *_range(b, axis),
                                           *_range(axis + 1, params.ndim)))
    batch = tuple(_tg.reshape(_tg.arange(params.shape[k]), [1] * k + [-1] + [1] * (n - k - 1))
                  for k in _range(b))
    out = params[(*batch, indices)]  # params.shape[:b] + indices.shape[b:] + the rest
    if not m:
        return out
    return _tg.permute_dims(out, (*_range(b), *_range(n, n + m), *_range(b, n),
                                  *_range(n + m, out.ndim)))


def squeeze(input, axis=None, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.squeeze``: ``input`` without the size-1 axes ``axis`` (an int or a list; all
    size-1 axes when None, as in TensorFlow). Errors (an axis whose size is not 1) and
    gradient as ``tapegrad.squeeze``."""
    if axis is None:
        axis = tuple(i for i, d in enumerate(_tg.convert_to_tensor(input).shape) if d == 1)
    return _tg.squeeze(input, axis=_axes(axis))


def where(condition, x=None, y=None, name=None):
    """``tf.where``: with ``x`` and ``y``, ``x`` where ``condition`` is true and ``y``
    elsewhere (broadcast; as ``tapegrad.where``, whose gradient it has). With neither, the
    indices of the true elements: int64 of shape ``(k, condition.ndim)``, in row-major
    order (not differentiable; its shape depends on the data, so not inside
    ``tf.function``). Raises ``ValueError`` when only one of ``x``, ``y`` is given."""
    if x is None and y is None:
        idx = _tg.nonzero(_tg.astype(condition, _tg.bool))
        return _tg.astype(_tg.stack(idx, axis=1), _tg.int64)
    if x is None or y is None:
        raise ValueError("tf.where: give both x and y (a choice between them) or neither (the "
                         "indices of the true elements), not only one")
    return _tg.where(condition, *_python_data([x, y]))  # two Python floats: float32


# --- manipulation and math -------------------------------------------------------------------
expand_dims = _tg.expand_dims
negative, sigmoid = _tg.negative, _tg.nn.sigmoid
function, TensorSpec, config = _tg.function, _tg.TensorSpec, _tg.config
autograph = _tg.autograph  # tf.autograph: experimental.do_not_convert, set_loop_options, to_code

math = types.SimpleNamespace(
    abs=_tg.abs, add=_tg.add, subtract=_tg.subtract, multiply=_tg.multiply,
    divide=_tg.divide, negative=_tg.negative, square=_tg.square, sqrt=_tg.sqrt, exp=_tg.exp,
    expm1=_tg.expm1, log=_tg.log, log1p=_tg.log1p, sin=_tg.sin, cos=_tg.cos, tan=_tg.tan,
    sinh=_tg.sinh, cosh=_tg.cosh, tanh=_tg.tanh, asin=_tg.asin, acos=_tg.acos, atan=_tg.atan,
    atan2=_tg.atan2, sign=_tg.sign, maximum=_tg.maximum, minimum=_tg.minimum, pow=_tg.pow,
    floor=_tg.floor, ceil=_tg.ceil, round=_tg.round, sigmoid=_tg.nn.sigmoid, angle=_tg.angle,
    real=_tg.real, imag=_tg.imag, conj=_tg.conj,
    softplus=_tg.nn.softplus, reduce_sum=reduce_sum, reduce_mean=reduce_mean,
    reduce_max=reduce_max, reduce_min=reduce_min, reduce_prod=reduce_prod,
    reduce_std=reduce_std, reduce_variance=reduce_variance, reduce_logsumexp=reduce_logsumexp,
    reduce_all=reduce_all, reduce_any=reduce_any, cumsum=cumsum, argmax=argmax, argmin=argmin,
    greater=_tg.greater, less=_tg.less, equal=_tg.equal,
)


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """``tf.linalg.svd``: TensorFlow's ``(s, u, v)`` of ``tensor`` (``(..., M, N)``) with
    ``tensor = u @ diag(s) @ adjoint(v)``: ``s`` ``(..., K)`` (K = min(M, N)), descending;
    ``u`` ``(..., M, K)`` and ``v`` ``(..., N, K)`` (``(..., M, M)``, ``(..., N, N)`` with
    ``full_matrices``). ``v`` is V, not the Array API's ``Vh`` (v = conj(Vh)^T). Only ``s``
    when ``compute_uv`` is False. Errors and gradient as ``tapegrad.linalg.svd``/``svdvals``
    (the gradient of a ``u`` or ``v`` is undefined for repeated singular values)."""
    if not compute_uv:
        return _tg.linalg.svdvals(tensor)
    u, s, vh = _tg.linalg.svd(tensor, full_matrices=full_matrices)
    return s, u, _tg.matrix_transpose(_tg.conj(vh))


linalg = types.SimpleNamespace(global_norm=_tg.global_norm,
                               **{n: getattr(_tg.linalg, n) for n in _tg.linalg.__all__})
linalg.svd, linalg.matmul = svd, matmul

# --- namespaces: random with the float32 default; nn, optimizers, train ----------------------
random = types.SimpleNamespace(
    normal=functools.partial(_tg.random.normal, dtype=_f32),
    uniform=functools.partial(_tg.random.uniform, dtype=_f32),
    set_seed=_tg.random.set_seed, Generator=_tg.random.Generator,
    get_global_generator=_tg.random.get_global_generator,
)
train = _tg.train  # Checkpoint, CheckpointManager, latest_checkpoint
distribute = _tg.distribute  # MirroredStrategy, ReduceOp, get_replica_context (JAX's devices)
saved_model = _tg.saved_model  # save, load, SaveOptions
class _Keras(types.SimpleNamespace):
    """``tf.keras`` as far as tapegrad has it: ``optimizers`` (with ``schedules``)."""

    def __getattr__(self, name):
        raise AttributeError(
            f"tapegrad.compat.tensorflow has no tf.keras.{name}: only tf.keras.optimizers is "
            "here. tapegrad has no Keras layers or models; write a layer as a tg.Module with "
            "its Variables (tg.nn has the functions: dense math, conv2d, dropout, ...), see "
            "the README's 'Models' section")


keras = _Keras(optimizers=optimizers)  # tf.keras.optimizers.AdamW, .schedules


# --- TensorFlow names tapegrad lacks: aliases and thin adapters on tapegrad ops (issue 33) ----
__version__ = "2.16.0-tapegrad"  # a TensorFlow 2 version, for code that checks it; not TF's


def linspace(start, stop, num, name=None, axis=0):
    """``tf.linspace``: ``num`` evenly spaced values from ``start`` to ``stop`` (both kept),
    1-d, float32 for Python numbers (else ``start``'s dtype). Scalar ``start``/``stop`` only.
    Differentiable in ``start`` and ``stop`` when they are Tensors (by the composition
    ``start + (stop - start) * t``)."""
    if isinstance(start, Tensor) or isinstance(stop, Tensor):
        start, stop = convert_to_tensor(start), convert_to_tensor(stop)
        t = _tg.linspace(0.0, 1.0, int(num), dtype=start.dtype)
        return start + (_tg.astype(stop, start.dtype) - start) * t
    return _tg.linspace(start, stop, int(num), dtype=_f32)


def size(input, out_type=_tg.int32, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.size``: the number of elements of ``input``, a 0-d ``out_type`` (int32) Tensor."""
    return _tg.constant(convert_to_tensor(input).size, out_type)


def rank(input, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.rank``: the number of axes of ``input``, a 0-d int32 Tensor."""
    return _tg.constant(convert_to_tensor(input).ndim, _tg.int32)


def split(value, num_or_size_splits, axis=0, num=None, name=None):
    """``tf.split``: a list of pieces of ``value`` along ``axis``: ``num_or_size_splits``
    equal ones (an int dividing the axis) or ones of the given sizes (one may be -1, the
    rest). Raises ``ValueError`` when they do not add up to the axis. Gradient: slicing's."""
    value = convert_to_tensor(value)
    n = value.shape[axis]
    if isinstance(num_or_size_splits, int):
        if n % num_or_size_splits:
            raise ValueError(f"tf.split: axis {axis} of size {n} does not split into "
                             f"{num_or_size_splits} equal pieces; give a list of sizes")
        sizes = [n // num_or_size_splits] * num_or_size_splits
    else:
        sizes = [int(s) for s in num_or_size_splits]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = n - sum(s for s in sizes if s != -1)
    if sum(sizes) != n or builtins.min(sizes) < 0:
        raise ValueError(f"tf.split: sizes {list(num_or_size_splits)} do not add up to axis "
                         f"{axis}'s size {n}")
    lead, starts = (slice(None),) * (axis % value.ndim), _np.cumsum([0] + sizes)
    return [value[(*lead, slice(int(a), int(a) + s))] for a, s in zip(starts, sizes)]


def unstack(value, num=None, axis=0, name=None):
    """``tf.unstack``: a list of the ``value.shape[axis]`` slices along ``axis``; errors and
    gradient as ``tapegrad.unstack``."""
    return list(_tg.unstack(value, axis=axis))


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """``tf.pad``: ``tensor`` with ``paddings[i] = [before, after]`` elements of
    ``constant_values`` added on axis i (``paddings``: ``(ndim, 2)``). Only
    ``mode="CONSTANT"``; ``NotImplementedError`` for REFLECT and SYMMETRIC. Gradient: the
    cotangent's middle (by the composition with ``concat``)."""
    if str(mode).upper() != "CONSTANT":
        raise NotImplementedError(f"tf.pad: mode {mode!r} is not provided by "
                                  "tapegrad.compat.tensorflow yet; only 'CONSTANT'")
    out = convert_to_tensor(tensor)
    for axis, (before, after) in enumerate(_np.asarray(paddings).tolist()):
        shape_ = list(out.shape)
        parts = []
        for n in (before, after):
            shape_[axis] = n
            parts.append(_tg.full(tuple(shape_), constant_values, dtype=out.dtype))
        out = _tg.concat([parts[0], out, parts[1]], axis=axis)
    return out


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """``tf.sort``: ``values`` sorted along ``axis``, ``direction`` "ASCENDING" or
    "DESCENDING"; shapes, errors and gradient as ``tapegrad.sort``."""
    return _tg.sort(values, axis=axis, descending=direction == "DESCENDING")


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None):
    """``tf.argsort``: the int32 indices that sort ``values`` along ``axis``."""
    out = _tg.argsort(values, axis=axis, descending=direction == "DESCENDING", stable=True)
    return _tg.astype(out, _tg.int32)


def reverse(tensor, axis, name=None):
    """``tf.reverse``: ``tensor`` reversed along the axes in the list ``axis``; gradient as
    ``tapegrad.flip``."""
    return _tg.flip(tensor, axis=_axes(axis))


def roll(input, shift, axis, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.roll``: ``input`` shifted cyclically by ``shift`` along ``axis`` (ints or equal
    length lists); errors and gradient as ``tapegrad.roll``."""
    return _tg.roll(input, _axes(shift), axis=_axes(axis))


def tensordot(a, b, axes, name=None):
    """``tf.tensordot``: ``a`` and ``b`` contracted over ``axes`` (an int, or two lists of
    axes); shapes, errors and gradient as ``tapegrad.tensordot``."""
    axes = axes if isinstance(axes, int) else tuple(_axes(x) for x in axes)
    return _tg.tensordot(a, b, axes=axes)


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None):  # noqa: A002
    """``tf.norm``: the 2-norm (``ord`` "euclidean" or "fro": over all elements when ``axis``
    is None, else over ``axis``) or a vector ``ord``-norm over the int ``axis``. Other
    matrix norms raise ``NotImplementedError`` (use ``tg.linalg.matrix_norm``). Gradient as
    ``tapegrad.linalg.vector_norm``."""
    keep = builtins.bool(keepdims)
    if ord in ("euclidean", "fro"):
        return _tg.linalg.vector_norm(tensor, axis=_axes(axis), keepdims=keep, ord=2)
    if isinstance(axis, (list, tuple)):
        raise NotImplementedError(f"tf.norm: matrix norm ord={ord!r} is not provided by "
                                  "tapegrad.compat.tensorflow yet; use tg.linalg.matrix_norm")
    return _tg.linalg.vector_norm(tensor, axis=axis, keepdims=keep, ord=ord)


def boolean_mask(tensor, mask, axis=None, name=None):
    """``tf.boolean_mask``: the slices of ``tensor`` where the k-d boolean ``mask`` is true,
    ``mask`` matching ``tensor``'s axes ``axis`` (default 0) to ``axis + k``; those axes
    become one of the true count. Not inside ``tf.function`` (a data-dependent shape).
    Gradient: the gather's."""
    tensor, mask = convert_to_tensor(tensor), convert_to_tensor(mask)
    axis = axis or 0
    k, shape_ = mask.ndim, tensor.shape
    flat = _tg.reshape(tensor, (*shape_[:axis], -1, *shape_[axis + k:]))
    (idx,) = _tg.nonzero(_tg.reshape(_tg.astype(mask, _tg.bool), (-1,)))
    return _tg.take(flat, idx, axis=axis)


def gather_nd(params, indices, batch_dims=0, name=None):
    """``tf.gather_nd``: ``params[indices[..., 0], ..., indices[..., m - 1]]`` for integer
    ``indices`` of shape ``(..., m)``: shape ``indices.shape[:-1] + params.shape[m:]``.
    Only ``batch_dims=0`` (``NotImplementedError`` otherwise). Gradient: indexing's."""
    if batch_dims:
        raise NotImplementedError("tf.gather_nd: batch_dims is not provided by "
                                  "tapegrad.compat.tensorflow yet; use tf.gather(batch_dims=)")
    indices = convert_to_tensor(indices)
    return convert_to_tensor(params)[tuple(indices[..., i] for i in _range(indices.shape[-1]))]


def add_n(inputs, name=None):
    """``tf.add_n``: the elementwise sum of the same-shape tensors ``inputs``."""
    return functools.reduce(_tg.add, inputs)


def _one_hot_rows(indices, rows, dtype):
    """``(n, rows)`` one-hot matrix of the flattened integer ``indices``."""
    return _tg.nn.one_hot(_tg.reshape(convert_to_tensor(indices), (-1,)), rows, dtype=dtype)


def tensor_scatter_nd_update(tensor, indices, updates, name=None):
    """``tf.tensor_scatter_nd_update``: ``tensor`` with the elements (or slices) at
    ``indices`` (``(..., m)``, indexing the first m axes) replaced by ``updates``
    (``indices.shape[:-1] + tensor.shape[m:]``). Indices should be distinct (TensorFlow
    leaves the order of duplicates unspecified; here they add). Gradient: by the
    composition (a one-hot mask and product): zero at the updated places for ``tensor``,
    the gathered cotangent for ``updates``."""
    tensor, indices = convert_to_tensor(tensor), convert_to_tensor(indices)
    m = indices.shape[-1]
    lead, rest = tensor.shape[:m], tensor.shape[m:]
    rows = functools.reduce(lambda a, b: a * b, lead, 1)
    lin = _tg.tensordot(_tg.astype(indices, _tg.int64),
                        _tg.constant(_np.ravel_multi_index(_np.eye(m, dtype=int).T, lead)
                                     if m else _np.zeros(0, int), _tg.int64), axes=1)
    hot = _one_hot_rows(lin, rows, tensor.dtype)
    flat = _tg.reshape(tensor, (rows, *rest))
    upd = _tg.reshape(convert_to_tensor(updates, tensor.dtype), (-1, *rest))
    keep = _tg.reshape(1 - _tg.max(hot, axis=0), (rows,) + (1,) * len(rest))
    return _tg.reshape(flat * keep + _tg.tensordot(_tg.matrix_transpose(hot), upd, axes=1),
                       tensor.shape)


def sequence_mask(lengths, maxlen=None, dtype=_tg.bool, name=None):
    """``tf.sequence_mask``: ``mask[..., j] = j < lengths[...]``, shape
    ``lengths.shape + (maxlen,)`` (``maxlen`` default: the largest length), ``dtype``."""
    lengths = convert_to_tensor(lengths)
    if maxlen is None:
        maxlen = int(_tg.max(lengths).numpy()) if lengths.size else 0
    out = _tg.arange(int(maxlen)) < _tg.astype(lengths, _tg.int64)[..., None]
    return out if dtype == _tg.bool else _tg.astype(out, dtype)


def divide_no_nan(x, y, name=None):
    """``tf.math.divide_no_nan``: ``x / y``, and 0 where ``y`` is 0 (also its gradient,
    by the double ``where``)."""
    x, y = convert_to_tensor(x), convert_to_tensor(y)
    zero = y == 0
    return _tg.where(zero, _tg.zeros_like(x / _tg.where(zero, 1, y)),
                     x / _tg.where(zero, _tg.ones_like(y), y))


TopKV2 = __import__("collections").namedtuple("TopKV2", ["values", "indices"])


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.math.top_k``: ``(values, indices)`` of the ``k`` largest entries along the last
    axis, largest first (ties: the lower index first), indices int32. Gradient: to the
    chosen entries (``take_along_axis``'s)."""
    idx = _tg.argsort(input, axis=-1, descending=True, stable=True)[..., :k]
    return TopKV2(_tg.take_along_axis(convert_to_tensor(input), idx, axis=-1),
                  _tg.astype(idx, _tg.int32))


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """``tf.math.unsorted_segment_sum``: ``out[s] = sum of data[i...] where segment_ids[i...]
    == s``; ``segment_ids`` matches ``data``'s first axes; shape ``(num_segments,) +
    data.shape[segment_ids.ndim:]``; ids outside ``[0, num_segments)`` are dropped. Gradient:
    the cotangent gathered by ``segment_ids`` (by the composition with a one-hot matrix)."""
    data, ids = convert_to_tensor(data), convert_to_tensor(segment_ids)
    rest = data.shape[ids.ndim:]
    hot = _one_hot_rows(ids, int(num_segments), data.dtype)
    return _tg.tensordot(_tg.matrix_transpose(hot), _tg.reshape(data, (-1, *rest)), axes=1)


def segment_sum(data, segment_ids, name=None):
    """``tf.math.segment_sum``: ``unsorted_segment_sum`` with ``max(segment_ids) + 1``
    segments (sorted ids, as TensorFlow requires)."""
    ids = convert_to_tensor(segment_ids)
    return unsorted_segment_sum(data, ids, int(_tg.max(ids).numpy()) + 1)


def band_part(input, num_lower, num_upper, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.linalg.band_part``: the matrices ``(..., M, N)`` of ``input`` with the elements
    more than ``num_lower`` below or ``num_upper`` above the diagonal set to 0 (a negative
    count keeps the whole triangle). Gradient: the same band of the cotangent."""
    x = convert_to_tensor(input)
    m, n = x.shape[-2:]
    d = _tg.arange(m)[:, None] - _tg.arange(n)[None, :]
    keep = ((d <= num_lower) if num_lower >= 0 else d == d) & (
        (-d <= num_upper) if num_upper >= 0 else d == d)
    return _tg.where(keep, x, _tg.zeros_like(x))


def diag(diagonal, name=None, k=0, num_rows=-1, num_cols=-1, padding_value=0,
         align="RIGHT_LEFT"):
    """``tf.linalg.diag``: the ``(..., N, N)`` matrices with ``diagonal`` (``(..., N)``) on
    their main diagonal and zeros elsewhere (only ``k=0`` and the defaults). Gradient: the
    cotangent's diagonal."""
    if k or num_rows != -1 or num_cols != -1 or padding_value:
        raise NotImplementedError("tf.linalg.diag: k, num_rows, num_cols and padding_value "
                                  "are not provided by tapegrad.compat.tensorflow yet")
    diagonal = convert_to_tensor(diagonal)
    return diagonal[..., None] * _tg.eye(diagonal.shape[-1], dtype=diagonal.dtype)


def shuffle(value, seed=None, name=None):
    """``tf.random.shuffle``: ``value`` with its first axis randomly permuted (the order of
    argsorted uniform draws from tapegrad's global generator, so ``tf.random.set_seed``
    makes it repeatable; not TensorFlow's stream). Gradient: the gather's."""
    value = convert_to_tensor(value)
    return _tg.take(value, _tg.argsort(_tg.random.uniform([value.shape[0]])), axis=0)


def categorical(logits, num_samples, dtype=_tg.int64, seed=None, name=None):
    """``tf.random.categorical``: ``(batch, num_samples)`` class indices drawn from the
    unnormalised log-probabilities ``logits`` ``(batch, classes)``, by the Gumbel-max trick
    on tapegrad's global generator (not TensorFlow's stream). Not differentiable."""
    logits = convert_to_tensor(logits)
    b, c = logits.shape
    u = _tg.random.uniform([b, num_samples, c], minval=1e-12, maxval=1.0,
                           dtype=_tg.float64)
    gumbel = -_tg.log(-_tg.log(u))
    return _tg.astype(_tg.argmax(_tg.astype(logits, _tg.float64)[:, None, :] + gumbel,
                                 axis=-1), dtype)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_f32, seed=None, name=None):
    """``tf.random.truncated_normal``: normal draws of ``shape`` with ``mean`` and ``stddev``
    where those more than 2 stddev from the mean are redrawn (8 rounds, then the rare rest
    clipped to the bounds), on tapegrad's global generator (not TensorFlow's stream)."""
    z = _tg.random.normal(shape, dtype=dtype)
    for _ in _range(8):
        z = _tg.where(_tg.abs(z) > 2, _tg.random.normal(shape, dtype=dtype), z)
    return mean + stddev * _tg.clip(z, -2.0, 2.0)


math.divide_no_nan, math.top_k, math.segment_sum = divide_no_nan, top_k, segment_sum
math.unsorted_segment_sum = unsorted_segment_sum
linalg.band_part, linalg.diag, linalg.norm, linalg.tensordot = band_part, diag, norm, tensordot
random.shuffle, random.categorical = shuffle, categorical
random.truncated_normal = truncated_normal

errors = types.SimpleNamespace(  # TensorFlow's error classes as the Python ones tapegrad raises
    InvalidArgumentError=ValueError, NotFoundError=FileNotFoundError,
    UnimplementedError=NotImplementedError, ResourceExhaustedError=MemoryError,
    OutOfRangeError=IndexError)


class device:  # noqa: N801 - TensorFlow's name
    """``tf.device(name)``: a context manager that does nothing: tapegrad places tensors on
    their backend's device (``tg.to_device``/JAX's default device), not per ``with`` block."""

    def __init__(self, device_name):
        self.name = device_name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def print(*inputs, output_stream=None, sep=" ", end="\n", summarize=3, name=None):  # noqa: A001
    """``tf.print``: ``tg.print`` (``tapegrad.debugging.print``: at run time, also inside
    ``tf.function``; TensorFlow's layout, default stream ``sys.stderr``)."""
    _tg.debugging.print(*inputs, output_stream=output_stream, sep=sep, end=end,
                        summarize=summarize)


# missing names with no same-named tapegrad function: what to use instead
_CLOSEST = {"strings": "none (tensors are numeric: keep text in Python or NumPy)",
            "ragged": "a list of Tensors, or a padded Tensor with a mask (sequence_mask)",
            "sparse": "tg.IndexedSlices for rows of a gradient; dense Tensors otherwise"}


def _missing(where, name):
    for ns, prefix in ((_tg, "tg."), (_tg.linalg, "tg.linalg."), (_tg.nn, "tg.nn."),
                       (_tg.special, "tg.special."), (_tg.random, "tg.random.")):
        if not name.startswith("_") and hasattr(ns, name):
            hint = f"; the closest tapegrad function is {prefix}{name} (Array API signature)"
            break
    else:
        hint = f"; closest in tapegrad: {_CLOSEST[name]}" if name in _CLOSEST else ""
    return AttributeError(f"{where}.{name} is not provided by tapegrad.compat.tensorflow "
                          f"yet{hint}")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise _missing("tf", name)


class _Namespace(types.SimpleNamespace):
    """A ``tf.<sub>`` namespace whose missing names say so (see ``_missing``)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _missing(self.__dict__.get("_tf_name", "tf"), name)


from .tf_data import AUTOTUNE as _AUTOTUNE  # noqa: E402
from .tf_data import Dataset as _Dataset  # noqa: E402

data = types.SimpleNamespace(Dataset=_Dataset, AUTOTUNE=_AUTOTUNE,
                             experimental=types.SimpleNamespace(AUTOTUNE=_AUTOTUNE))

def divide(x, y, name=None):
    """``tf.divide`` / ``tf.math.truediv``: ``x / y``; integer operands are first cast to
    float64 (int32, int64, uint32...) or float32 (8- and 16-bit), as TensorFlow's ``truediv``
    does (the Array API's ``divide`` takes floating operands only). Gradient: division's."""
    x, y = _python_data([x, y])
    x, y = convert_to_tensor(x), convert_to_tensor(y, x.dtype) if not hasattr(y, "dtype") else y
    if x.dtype.kind in "iu" and _np.dtype(y.dtype).kind in "iu":
        to = _f32 if x.dtype.itemsize <= 2 else _tg.float64
        x, y = _tg.astype(x, to), _tg.astype(y, to)
    return _tg.divide(x, y)


math.divide = math.truediv = truediv = divide

# --- tf.signal, tf.image.resize, tf.debugging, tf.TensorArray, tf.summary (issue 33) -------
from . import tf_debugging as _tf_debugging  # noqa: E402
from . import tf_signal as _tf_signal  # noqa: E402
from . import tf_summary as _tf_summary  # noqa: E402
from .tf_tensor_array import TensorArray  # noqa: E402, F401

signal = types.SimpleNamespace(**{n: getattr(_tf_signal, n) for n in _tf_signal.__all__
                                  if n != "resize"})
image = types.SimpleNamespace(resize=_tf_signal.resize, ResizeMethod=types.SimpleNamespace(
    BILINEAR="bilinear", NEAREST_NEIGHBOR="nearest"))
debugging = types.SimpleNamespace(**{n: getattr(_tf_debugging, n)
                                     for n in _tf_debugging.__all__})
summary = types.SimpleNamespace(**{n: getattr(_tf_summary, n) for n in _tf_summary.__all__})
assert_equal, assert_rank = debugging.assert_equal, debugging.assert_rank


def meshgrid(*args, indexing="xy", name=None):
    """``tf.meshgrid(x, y, ..., indexing='xy')``: coordinate grids of the 1-D ``args`` (a list of
    Tensors, one per argument, each of shape ``(len(y), len(x), ...)`` for ``'xy'``,
    ``(len(x), len(y), ...)`` for ``'ij'``). Python lists of floats become float32. Gradients:
    those of ``_tg.meshgrid`` (broadcasts). Raises ``ValueError`` for another ``indexing``."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"tf.meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    return list(_tg.meshgrid(*[convert_to_tensor(a) for a in args], indexing=indexing))


def cast(x, dtype, name=None):
    """``tf.cast(x, dtype)``: ``x`` (a Tensor, array or Python value) as ``dtype``; ``dtype`` may
    be given by keyword, as TensorFlow's guides do. Gradient: that of ``_tg.astype``."""
    return _tg.astype(convert_to_tensor(x), dtype)


# --- names TensorFlow's guides use (tapegrad.compat.tf_extras) --------------------------------
from . import tf_extras as _extras  # noqa: E402
from tapegrad._tensor import TensorShape  # noqa: E402, F401

init_scope = _extras.init_scope
dtypes = _Namespace(_tf_name="tf.dtypes", **vars(_extras.dtypes))
types = _Namespace(_tf_name="tf.types", experimental=_Namespace(
    _tf_name="tf.types.experimental", **vars(_extras.types_experimental)))
random.Generator = _extras.Generator
random.stateless_normal, random.stateless_uniform = (_extras.stateless_normal,
                                                      _extras.stateless_uniform)

for _sub in ("math", "linalg", "random", "errors", "autodiff", "data", "signal", "image",
             "debugging", "summary"):
    globals()[_sub] = _Namespace(_tf_name=f"tf.{_sub}", **vars(globals()[_sub]))
