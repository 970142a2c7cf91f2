"""Creation functions (Array API names) that need no other op. Their results are constants: no
tape records them, except ``tril``/``triu``, masks of a differentiable input. The two creation
functions built from other ops live above those ops: ``asarray`` (a Tensor it copies or casts
is ``astype``) in :mod:`.conversion`, ``meshgrid`` (``reshape`` and ``broadcast_to``) in
:mod:`.manipulation`.

The backend that creates an array: for ``*_like``, ``asarray`` of a backend array and
``from_dlpack`` of a Tensor, the argument's own; otherwise the default backend (NumPy unless
``TAPEGRAD_ARRAY_BACKEND`` says otherwise), or the library of ``device=`` when that is another
library's device object (``device=x.device`` for a Tensor on array-api-strict; NumPy for
``"cpu"``), so that array-API-generic code creates arrays next to its inputs. ``dtype`` is a
tapegrad (NumPy) dtype, translated for the backend; without it the backend's defaults apply
(float64 and int64 on NumPy). ``device`` is passed to the backend (NumPy accepts ``"cpu"``).

A JAX device (``device=t.device`` of a ``tg.function`` result), while JAX is not the default
backend, makes a *device-resident* Tensor like a compiled call's result: the array is made on
the default backend (eager ops compute on it) and put on that device under JAX's 64-bit mode
(float64 stays float64), where compiled calls take it without a copy (``_split``,
``_placed``).
"""
from __future__ import annotations

from .. import _backend
from .. import config as _config
from .._backend import default_namespace as _default_namespace
from .._backend import to_numpy as _to_numpy
from .._backend import namespace as _ns
from .._backend import xp_dtype as _xp_dtype
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .._tensor import Tensor
from .._variables import on_device
from ._jvp import linear_jvp
from .dtypes import namespace_of as _namespace_of


def _v(x):
    return x._value if isinstance(x, Tensor) else x


def _split(device):
    """``device`` as ``(the device the creating backend is given, a JAX device or None)``: a
    JAX device while JAX is not the default backend is where the Tensor is put, and the array
    is made on the default backend (``device`` None)."""
    if (device is None or type(device).__module__.partition(".")[0] != "jaxlib"
            or _default_namespace().__name__.startswith("jax")):
        return device, None
    return None, device


def _placed(array, place) -> Tensor:
    """A Tensor of ``array``; with a JAX device ``place``, device-resident there too (its
    device copy made now, in 64-bit mode, beside ``array`` as its host value)."""
    if place is None:
        return Tensor(array)
    jax = _config.jax_module()  # a jaxlib device was given: JAX is imported
    with _config.x64_scope(jax):
        return on_device(jax.device_put(_to_numpy(array), place), None, host=array)


def _xp(device):
    """The namespace that creates an array on ``device``: the default backend (NumPy unless
    ``TAPEGRAD_ARRAY_BACKEND`` says otherwise) for None, else the device's library (NumPy for
    ``"cpu"``)."""
    if device is None:
        return _default_namespace()
    return _namespace_of(device)


def zeros(shape, *, dtype=None, device=None):
    """A constant Tensor of zeros; ``shape``: int or tuple of ints."""
    device, place = _split(device)
    xp = _xp(device)
    return _placed(xp.zeros(shape, dtype=_xp_dtype(xp, dtype), device=device), place)


def ones(shape, *, dtype=None, device=None):
    """A constant Tensor of ones; ``shape``: int or tuple of ints."""
    device, place = _split(device)
    xp = _xp(device)
    return _placed(xp.ones(shape, dtype=_xp_dtype(xp, dtype), device=device), place)


def full(shape, fill_value, *, dtype=None, device=None, default_float=None):
    """A constant Tensor of ``shape`` filled with ``fill_value`` (Python scalar); without
    ``dtype`` the default dtype of ``fill_value``'s kind (bool, integer, float, complex), or
    ``default_float`` for a Python float if given (a tapegrad extension that
    ``compat.tensorflow`` sets to float32). A NumPy scalar ``fill_value`` keeps its dtype."""
    if getattr(fill_value, "ndim", None) == 0 and hasattr(fill_value, "item"):  # NumPy scalar:
        dtype = fill_value.dtype if dtype is None else dtype  # the Array API's full takes a
        fill_value = fill_value.item()  # Python scalar only
    dtype = _backend.float_default(dtype, default_float, fill_value)
    device, place = _split(device)
    xp = _xp(device)
    return _placed(xp.full(shape, fill_value, dtype=_xp_dtype(xp, dtype), device=device), place)


def empty(shape, *, dtype=None, device=None):
    """An uninitialised constant Tensor of ``shape`` (int or tuple of ints)."""
    device, place = _split(device)
    xp = _xp(device)
    return _placed(xp.empty(shape, dtype=_xp_dtype(xp, dtype), device=device), place)


def zeros_like(x, /, *, dtype=None, device=None):
    """Zeros with the shape (and by default the dtype and backend) of ``x``; a constant."""
    device, place = _split(device)
    v = _v(x)
    xp = _ns(v)
    return _placed(xp.zeros_like(v, dtype=_xp_dtype(xp, dtype), device=device), place)


def ones_like(x, /, *, dtype=None, device=None):
    """Ones with the shape (and by default the dtype and backend) of ``x``; a constant."""
    device, place = _split(device)
    v = _v(x)
    xp = _ns(v)
    return _placed(xp.ones_like(v, dtype=_xp_dtype(xp, dtype), device=device), place)


def full_like(x, /, fill_value, *, dtype=None, device=None):
    """``fill_value`` with the shape (and by default the dtype and backend) of ``x``."""
    device, place = _split(device)
    v = _v(x)
    xp = _ns(v)
    return _placed(xp.full_like(v, fill_value, dtype=_xp_dtype(xp, dtype), device=device), place)


def empty_like(x, /, *, dtype=None, device=None):
    """Uninitialised, with the shape (and by default the dtype and backend) of ``x``."""
    device, place = _split(device)
    v = _v(x)
    xp = _ns(v)
    return _placed(xp.empty_like(v, dtype=_xp_dtype(xp, dtype), device=device), place)


def arange(start, /, stop=None, step=1, *, dtype=None, device=None, default_float=None):
    """Evenly spaced values in ``[start, stop)`` (Array API ``arange``); a 1-d constant.

    With one argument, ``start`` is the stop and the start is 0. ``default_float``: the dtype
    when ``dtype`` is None and a bound or the step is a Python float (a tapegrad extension
    that ``compat.tensorflow`` sets to float32).
    """
    dtype = _backend.float_default(dtype, default_float, start, stop, step)
    device, place = _split(device)
    xp = _xp(device)
    return _placed(xp.arange(start, stop, step, dtype=_xp_dtype(xp, dtype), device=device), place)


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    """``num`` evenly spaced values from ``start`` to ``stop``; a 1-d constant."""
    device, place = _split(device)
    xp = _xp(device)
    return _placed(xp.linspace(start, stop, num, dtype=_xp_dtype(xp, dtype), device=device,
                                endpoint=endpoint), place)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    """A 2-d constant with ones on the ``k``-th diagonal, shape ``(n_rows, n_cols or n_rows)``."""
    device, place = _split(device)
    xp = _xp(device)
    return _placed(xp.eye(n_rows, n_cols, k=k, dtype=_xp_dtype(xp, dtype), device=device), place)


def from_dlpack(x, /, *, device=None, copy=None):
    """A constant Tensor holding the data of ``x``, an object with ``__dlpack__`` (a Tensor,
    a NumPy/CuPy/torch array...), shared without a copy where possible.

    A Tensor keeps its backend; any other object becomes a NumPy array (or one of ``device``'s
    library). ``copy``: as in :func:`asarray`. Raises the backend's error (``BufferError``,
    ``TypeError``) when the object cannot be exchanged (e.g. it lives on a GPU and NumPy is
    asked for it).
    """
    if isinstance(x, Tensor):
        xp = _ns(x._value) if device is None else _xp(device)
        x = x._value
    else:
        xp = _xp(device)
    kw = {} if device is None else {"device": device}
    if copy is not None:
        kw["copy"] = copy
    return Tensor(xp.from_dlpack(x, **kw))


# --- tril, triu ------------------------------------------------------------------------------
_TRI_SAMPLES = [Sample((4, 4)), Sample((3, 5), k=1), Sample((2, 3, 4), k=-1),
                Sample((4, 3), k=-5), Sample((0, 3)), Sample((1, 1)), Sample((2, 0, 2), k=1)]


def _check_matrix(fn, x):
    if len(x.shape) < 2:
        raise ValueError(f"{fn}: expected a tensor of at least 2 dimensions (..., M, N), got "
                         f"shape {tuple(x.shape)}; reshape it to a matrix first")


@primitive("Tril", samples=_TRI_SAMPLES)
def _tril(x, *, k=0):
    _check_matrix("tril", x)
    return _ns(x).tril(x, k=k)


RegisterJVP("Tril")(linear_jvp)


@RegisterGradient("Tril")
def _tril_grad(op, dy):
    return tril(dy, k=op.attrs.get("k", 0))  # a linear mask: the cotangent masked the same way


@primitive("Triu", samples=_TRI_SAMPLES)
def _triu(x, *, k=0):
    _check_matrix("triu", x)
    return _ns(x).triu(x, k=k)


RegisterJVP("Triu")(linear_jvp)


@RegisterGradient("Triu")
def _triu_grad(op, dy):
    return triu(dy, k=op.attrs.get("k", 0))


def tril(x, /, *, k=0):
    """The lower triangle of the matrices in ``x``: elements above diagonal ``k`` set to zero.

    x: shape ``(..., M, N)``, at least 2-d; k: 0 the main diagonal, > 0 above, < 0 below.
    Result: ``x``'s shape and dtype. Raises ``ValueError`` for fewer than 2 dimensions.
    Gradient: the cotangent masked the same way (``tril(dy, k)``; the op is linear).
    """
    return _tril(x, k=k)


def triu(x, /, *, k=0):
    """The upper triangle of the matrices in ``x``: elements below diagonal ``k`` set to zero.

    Shapes, errors as :func:`tril`. Gradient: ``triu(dy, k)`` (the op is a linear mask).
    """
    return _triu(x, k=k)


def shape(input, out_type=None, name=None):  # noqa: A002 - TensorFlow's names
    """``input``'s shape as a 1-d integer constant on its backend (TensorFlow's ``tf.shape``;
    not an Array API function, where ``x.shape`` is a tuple). out_type: the integer dtype,
    default int32 as in TensorFlow. Not differentiable (a constant)."""
    v = _v(input)
    xp = _ns(v) if hasattr(v, "shape") else _default_namespace()
    dims = tuple(v.shape) if hasattr(v, "shape") else tuple(xp.asarray(v).shape)
    return Tensor(xp.asarray(dims, dtype=_xp_dtype(xp, "int32" if out_type is None else out_type)))


def constant(value, dtype=None, *, default_float=None) -> Tensor:
    """Create a Tensor holding a copy of ``value`` (scalar, nested list, backend array, Tensor).

    ``dtype``: backend dtype; by default Python floats give ``default_float`` if set, else the
    backend's default float (float64 on NumPy), and Python ints its default integer. Arrays are
    copied (as TensorFlow does), so writing into the array later cannot change the Tensor or a
    gradient; ``tg.asarray(x, copy=False)`` wraps without a copy. Raises ``TypeError`` for
    string or object data (``None``, ragged lists).
    """
    if isinstance(value, Tensor):
        if dtype is None or value.dtype == dtype:
            return Tensor(value._value)  # tensors never change: no copy needed
        value = value._value
    dtype = _backend.float_default(dtype, default_float, value)
    return Tensor(_backend.asarray(_backend.check_numeric(value, "constant"), dtype=dtype,
                                   copy=True))


def convert_to_tensor(value, dtype=None, *, default_float=None) -> Tensor:
    """Return ``value`` unchanged if it is a Tensor (or Variable) of ``dtype``; an
    :class:`~tapegrad.IndexedSlices` made dense (recorded, differentiable in its values); else
    :func:`constant`.

    Raises ``TypeError`` if ``value`` is a Tensor of a different dtype (cast with ``astype``).
    """
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype != dtype:
            raise TypeError(
                f"convert_to_tensor: the tensor has dtype {value.dtype}, not the requested "
                f"{dtype}; use tg.astype(x, dtype) to cast"
            )
        return value
    if getattr(value, "_sparse", False):  # IndexedSlices (ops.indexing)
        return convert_to_tensor(value._dense(), dtype)
    return constant(value, dtype, default_float=default_float)


__all__ = ["constant", "convert_to_tensor", "zeros", "ones", "full", "empty", "zeros_like",
           "ones_like", "full_like", "empty_like", "arange", "linspace", "eye", "from_dlpack",
           "tril", "triu", "shape"]
