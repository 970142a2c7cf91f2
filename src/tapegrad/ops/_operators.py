"""Python operators of :class:`Tensor`, bound to the ops of this package."""
from __future__ import annotations

import numpy as np

from .. import _structural, _tensor
from . import elementwise as ew
from .indexing import getitem, setitem
from .products import matmul
from .manipulation import matrix_transpose, to_device


def _method(fn):
    """``fn`` as a Tensor method (``x.astype(dtype)`` is ``astype(x, dtype)``), with its
    docstring."""
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__, method.__doc__ = fn.__name__, fn.__doc__
    return method


def _swap(fn):
    def reflected(a, b):
        return fn(b, a)

    reflected.__name__ = f"r{fn.__name__}"
    return reflected


def _transpose(x):
    if x.ndim != 2:
        raise ValueError(f"Tensor.T is defined for 2-d tensors only (Array API), this one has "
                         f"shape {x.shape}; use x.mT to swap the last two axes or "
                         "tg.permute_dims(x, axes) for another order")
    return matrix_transpose(x)


_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")


def _array_namespace(self, api_version=None):
    """The module ``tapegrad`` (Array API ``__array_namespace__``); raises ``ValueError`` for an
    unknown version."""
    if api_version is not None and api_version not in _API_VERSIONS:
        raise ValueError(f"__array_namespace__: tapegrad implements the Array API "
                         f"{_API_VERSIONS[-1]} (and the earlier {', '.join(_API_VERSIONS[:-1])}), "
                         f"not {api_version!r}")
    return _structural.ops.namespace


def _len(self):
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def _iter(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))


def _format(self, spec):
    if _tensor._traced(self._value):  # symbolic: its description, as str() gives
        try:
            return format(str(self), spec)
        except ValueError:
            raise TypeError(f"format spec {spec!r} on a traced tensor (inside tg.function): "
                            "it has no value yet; print values at run time with "
                            "tg.print(x)") from None
    if self.ndim == 0:
        return format(self.numpy().item(), spec)
    return format(str(self), spec)


def _dlpack(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
    """The DLPack capsule of the backend array (Array API ``__dlpack__``); the data is shared,
    so it carries no gradient: warns (``TapeLeakWarning``) when a recording tape traces this
    tensor or a forward accumulator gives it a tangent, as ``__array__`` does."""
    _structural.extensions.raw_access(self)  # raw data inside a gradient function
    if _structural.extensions.conversion is not None:
        _structural.extensions.conversion(self, "exported through DLPack (__dlpack__)")
    v = self._value
    if isinstance(v, np.generic):  # NumPy scalars have no __dlpack__
        v = np.asarray(v)
    kw = {k: a for k, a in (("stream", stream), ("max_version", max_version),
                            ("dl_device", dl_device), ("copy", copy)) if a is not None}
    return v.__dlpack__(**kw)


def _dlpack_device(self, /):
    """``(device type, device id)`` of the backend array (Array API ``__dlpack_device__``)."""
    v = self._value
    return (np.asarray(v) if isinstance(v, np.generic) else v).__dlpack_device__()


# the NumPy ufuncs behind Python's binary operators, as tapegrad functions: `ndarray * tensor`
# calls np.multiply, which must stay a differentiable Tensor op
_OPERATOR_UFUNCS = {
    "add": ew.add, "subtract": ew.subtract, "multiply": ew.multiply, "divide": ew.divide,
    "true_divide": ew.divide, "floor_divide": ew.floor_divide, "remainder": ew.remainder,
    "power": ew.pow, "matmul": matmul, "bitwise_and": ew.bitwise_and,
    "bitwise_or": ew.bitwise_or, "bitwise_xor": ew.bitwise_xor,
    "left_shift": ew.bitwise_left_shift, "right_shift": ew.bitwise_right_shift,
    "equal": ew.equal, "not_equal": ew.not_equal, "less": ew.less, "less_equal": ew.less_equal,
    "greater": ew.greater, "greater_equal": ew.greater_equal}


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """NumPy ufuncs on Tensors: an operator's ufunc is the tapegrad op (a Tensor); any other
    computes eagerly on NumPy arrays (``Tensor.__array__``, which warns for traced tensors)."""
    op = _OPERATOR_UFUNCS.get(ufunc.__name__) if method == "__call__" and not kwargs else None
    if op is not None and len(inputs) == 2:
        return op(*inputs)
    arrays = [np.asarray(a) if isinstance(a, type(self)) else a for a in inputs]
    return getattr(ufunc, method)(*arrays, **kwargs)


def attach(cls):
    """Bind ``+ - * / // % ** @``, bitwise ``& | ^ ~ << >>`` (logical on booleans), unary ops,
    comparisons, ``[]`` (reading and assigning), ``.T``/``.mT``, ``astype``, ``to_device``,
    ``len``, iteration, the conversions ``bool``, ``int``, ``float``, ``complex``,
    ``operator.index`` and ``format``, ``__array_namespace__`` and ``__dlpack__``."""
    for name, fn in [("add", ew.add), ("sub", ew.subtract), ("mul", ew.multiply),
                     ("truediv", ew.divide), ("floordiv", ew.floor_divide),
                     ("mod", ew.remainder), ("pow", ew.pow), ("and", ew.bitwise_and),
                     ("or", ew.bitwise_or), ("xor", ew.bitwise_xor),
                     ("lshift", ew.bitwise_left_shift), ("rshift", ew.bitwise_right_shift)]:
        setattr(cls, f"__{name}__", fn)
        setattr(cls, f"__r{name}__", _swap(fn))
    for name, fn in [("eq", ew.equal), ("ne", ew.not_equal), ("lt", ew.less),
                     ("le", ew.less_equal), ("gt", ew.greater), ("ge", ew.greater_equal)]:
        setattr(cls, f"__{name}__", fn)
    cls.__neg__ = ew.negative
    cls.__pos__ = ew.positive
    cls.__abs__ = ew.abs
    cls.__invert__ = ew.bitwise_invert
    cls.__getitem__ = getitem
    cls.__setitem__ = setitem
    cls.__matmul__ = matmul
    cls.__rmatmul__ = _swap(matmul)
    cls.T = property(_transpose, doc="The transpose of a 2-d tensor (Array API ``x.T``).")
    cls.mT = property(matrix_transpose, doc="The last two axes swapped (``matrix_transpose``).")
    cls.astype = _method(ew.astype)
    cls.to_device = _method(to_device)
    cls.__array_ufunc__ = _array_ufunc
    cls.__dlpack__ = _dlpack
    cls.__array_namespace__ = _array_namespace
    cls.__len__, cls.__iter__, cls.__format__ = _len, _iter, _format
    cls.__bool__ = lambda self: bool(self._value)
    cls.__int__ = lambda self: int(self._value)
    cls.__index__ = lambda self: int(self._value.__index__())
    cls.__float__ = lambda self: float(self.numpy())
    cls.__complex__ = lambda self: complex(self.numpy())  # as float(): a raw read
    cls.__dlpack_device__ = _dlpack_device
