"""Data-type functions and namespace inspection (Array API): ``can_cast``, ``finfo``, ``iinfo``
(with their result types ``finfo_object``, ``iinfo_object``), ``isdtype``, ``result_type``,
``__array_namespace_info__``.

None of these is an op: they answer questions about dtypes and return Python objects.
tapegrad's dtype objects are NumPy's on every backend (``tg.float32`` is ``numpy.float32`` and
``Tensor.dtype`` a ``numpy.dtype``), so dtype questions are answered by NumPy; only promotion
and casting questions about arrays of another backend go to that backend, whose rules its ops
follow. ``namespace_of`` finds the library of a device (or dtype) object, for the creation
functions.
"""
from __future__ import annotations

import dataclasses
import importlib

import numpy as _np

from .. import _backend
from .._tensor import Tensor

_NUMPY_TYPES = (str, type, _np.dtype)


def namespace_of(obj):
    """The array namespace that a device (or dtype) object belongs to.

    ``None`` gives the default backend (NumPy unless ``TAPEGRAD_ARRAY_BACKEND`` says
    otherwise); a string (``"cpu"``) NumPy unless it is a device of the default backend; NumPy
    dtypes NumPy. Another library's object
    gives that library's namespace (one tapegrad has seen, else imported by the object's
    top-level module name, through ``array_api_compat`` where the library needs it). Raises
    ``TypeError`` if there is none.
    """
    if obj is None:
        return _backend.default_namespace()
    if isinstance(obj, str):  # NumPy's kind of device ("cpu"), unless the default backend's
        xp = _backend.default_namespace()
        return xp if xp is _np or obj in xp.__array_namespace_info__().devices() else _np
    root = type(obj).__module__.partition(".")[0]
    if root in ("numpy", "builtins"):
        return _np
    for xp in list(_backend._NAMESPACES.values()):
        name = xp.__name__
        if name == root or name.endswith("." + root) or (
                root == "jaxlib" and name == "jax.numpy"):  # JAX's devices are jaxlib's
            return xp
    for modname in (f"array_api_compat.{root}", root):
        try:
            xp = importlib.import_module(modname)
        except ImportError:
            continue
        if hasattr(xp, "isdtype"):
            return xp
    raise TypeError(f"{obj!r} (a {type(obj).__module__}.{type(obj).__qualname__}) is not a "
                    "device or dtype of an Array API library that tapegrad can use; pass the "
                    "device of a tensor of that library (x.device)")


def _value(x):
    return x._value if isinstance(x, Tensor) else x


def _is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, _NUMPY_TYPES)


def _np_dtype(fn, x):
    """The tapegrad (NumPy) dtype of a dtype, Tensor or backend array ``x``."""
    x = _value(x)
    if _is_array(x):
        x = x.dtype
    elif isinstance(x, (bool, int, float, complex)) or x is None:
        raise TypeError(f"{fn}: expected a dtype or an array, got {x!r}; pass e.g. tg.float32 "
                        "or a tensor")
    try:
        return _backend.np_dtype(x)
    except TypeError:
        raise TypeError(f"{fn}: {x!r} is not a dtype; pass e.g. tg.float32") from None


def _foreign(v) -> bool:
    """True for an array of a backend other than NumPy (whose own promotion rules apply)."""
    return _is_array(v) and not isinstance(v, (_np.ndarray, _np.generic))


@dataclasses.dataclass(frozen=True)
class finfo_object:  # noqa: N801 - the Array API's name
    """Machine limits of a floating dtype (what :func:`finfo` returns; frozen).

    ``bits`` (int): bits of the dtype (of one component for a complex dtype); ``eps`` (float):
    the difference between 1.0 and the next larger representable number; ``max`` / ``min``
    (float): the largest / smallest (most negative) finite number; ``smallest_normal``
    (float): the smallest positive normal number; ``dtype``: the real floating dtype these
    describe (a tapegrad dtype; float32 for complex64).
    """

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: _np.dtype


@dataclasses.dataclass(frozen=True)
class iinfo_object:  # noqa: N801 - the Array API's name
    """Machine limits of an integer dtype (what :func:`iinfo` returns; frozen): ``bits``,
    ``max``, ``min`` (Python ints) and ``dtype`` (a tapegrad dtype)."""

    bits: int
    max: int
    min: int
    dtype: _np.dtype


def finfo(type, /):  # noqa: A002 - Array API name
    """Machine limits of a real or complex floating dtype (or of an array's dtype).

    type: a floating dtype, Tensor or backend array. Returns a :class:`finfo_object`:
    ``bits`` (int), ``eps``, ``max``, ``min``, ``smallest_normal`` (Python floats) and
    ``dtype`` (for a complex dtype, those of its real components; ``dtype`` is a tapegrad
    dtype). Raises ``ValueError`` for a non-floating dtype, ``TypeError`` for a non-dtype.
    Not differentiable (returns Python numbers).
    """
    f = _np.finfo(_np_dtype("finfo", type))
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min),
                        float(f.smallest_normal), f.dtype)


def iinfo(type, /):  # noqa: A002 - Array API name
    """Machine limits of an integer dtype (or of an array's dtype): an :class:`iinfo_object`
    with ``bits``, ``max``, ``min`` (Python ints) and ``dtype`` (a tapegrad dtype). Raises
    ``ValueError`` for a non-integer dtype, ``TypeError`` for a non-dtype."""
    i = _np.iinfo(_np_dtype("iinfo", type))
    return iinfo_object(int(i.bits), int(i.max), int(i.min), i.dtype)


def isdtype(dtype, kind):
    """True if ``dtype`` is of ``kind`` (Array API ``isdtype``).

    dtype: a dtype object (not an array). kind: a dtype, one of ``"bool"``, ``"signed
    integer"``, ``"unsigned integer"``, ``"integral"``, ``"real floating"``, ``"complex
    floating"``, ``"numeric"``, or a tuple of these (true if any matches). Raises
    ``TypeError`` for an array, ``ValueError`` for an unknown kind.
    """
    if _is_array(_value(dtype)):
        raise TypeError("isdtype: expected a dtype, got an array; use isdtype(x.dtype, kind)")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    kinds = tuple(k if isinstance(k, str) else _np_dtype("isdtype", k) for k in kinds)
    return _np.isdtype(_np_dtype("isdtype", dtype), kinds if isinstance(kind, tuple) else kinds[0])


def result_type(*arrays_and_dtypes):
    """The dtype that Array API type promotion gives for the arguments (a tapegrad dtype).

    arrays_and_dtypes: Tensors, backend arrays, dtypes and (2024.12) Python scalars, at least
    one array or dtype. Arrays of a backend other than NumPy are promoted by that backend, so
    the answer is what its ops do (e.g. array-api-strict raises ``TypeError`` for int64 with
    uint64, which the standard leaves undefined). Raises ``TypeError`` when only scalars are
    given or the dtypes do not promote.
    """
    values = [_value(a) for a in arrays_and_dtypes]
    if not any(not isinstance(v, (bool, int, float, complex)) for v in values):
        raise TypeError("result_type: needs at least one array or dtype (Python scalars "
                        "alone have no Array API dtype)")
    foreign = [v for v in values if _foreign(v)]
    if foreign:
        xp = _backend.namespace(foreign[0])
        values = [v if _is_array(v) or isinstance(v, (bool, int, float, complex))
                  else _backend.xp_dtype(xp, v) for v in values]
        return _backend.np_dtype(xp.result_type(*values))
    values = [v if isinstance(v, (bool, int, float, complex)) or _is_array(v)
              else _np_dtype("result_type", v) for v in values]
    return _np.result_type(*values)


def can_cast(from_, to, /):
    """True if ``from_`` (a dtype, Tensor or backend array) can be cast to the dtype ``to``
    without loss (the backend's rules for its arrays; NumPy's "safe" casting for dtypes)."""
    v = _value(from_)
    if _foreign(v):
        xp = _backend.namespace(v)
        return xp.can_cast(v.dtype, _backend.xp_dtype(xp, to))
    return _np.can_cast(_np_dtype("can_cast", v), _np_dtype("can_cast", to))


class _Info:
    """Array API inspection utilities of tapegrad (its default backend, tapegrad dtypes)."""

    def __init__(self, xp):
        self._xp = xp
        self._info = xp.__array_namespace_info__()

    def capabilities(self):
        return self._info.capabilities()

    def default_device(self):
        device = self._info.default_device()
        if device is None:  # JAX: "the current default device", the one it creates arrays on
            device = self._xp.empty(0).device
        return device

    def devices(self):
        return self._info.devices()

    def default_dtypes(self, *, device=None):
        return {k: _backend.np_dtype(v) for k, v in
                self._info.default_dtypes(device=device).items()}

    def dtypes(self, *, device=None, kind=None):
        return {k: _backend.np_dtype(v) for k, v in
                self._info.dtypes(device=device, kind=kind).items()}


def __array_namespace_info__():
    """Array API inspection: an object with ``capabilities()``, ``default_device()``,
    ``devices()``, ``default_dtypes(*, device=None)`` and ``dtypes(*, device=None, kind=None)``.

    The answers are those of the default backend (NumPy unless ``TAPEGRAD_ARRAY_BACKEND`` says
    otherwise), which creation functions use, with dtypes as tapegrad's dtype objects (NumPy
    dtypes): on NumPy, float64/complex128/int64 defaults and the device ``"cpu"``.
    """
    return _Info(_backend.default_namespace())


__all__ = ["can_cast", "finfo", "iinfo", "isdtype", "result_type", "__array_namespace_info__"]
