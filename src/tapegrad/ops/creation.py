"""Creation functions (Array API names). Their results are constants: no tape records them.

Without ``dtype`` the backend's defaults apply (float64 and int64 on NumPy). ``xp`` is the
namespace of the ``*_like`` argument, otherwise NumPy (pass a backend array to ``asarray`` to
create on another backend).
"""
from __future__ import annotations

import numpy as np

from .._backend import namespace as _ns
from .._tensor import Tensor, constant


def _v(x):
    return x._value if isinstance(x, Tensor) else x


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """A Tensor from a scalar, nested sequence, backend array or Tensor (Array API ``asarray``).

    A Tensor of the requested dtype is returned unchanged (Tensors are immutable).
    """
    if isinstance(obj, Tensor) and (dtype is None or obj.dtype == dtype):
        return obj
    return constant(obj, dtype)


def zeros(shape, *, dtype=None, device=None):
    """A constant Tensor of zeros; ``shape``: int or tuple of ints."""
    return Tensor(np.zeros(shape, dtype=dtype))


def ones(shape, *, dtype=None, device=None):
    """A constant Tensor of ones; ``shape``: int or tuple of ints."""
    return Tensor(np.ones(shape, dtype=dtype))


def full(shape, fill_value, *, dtype=None, device=None):
    """A constant Tensor of ``shape`` filled with ``fill_value`` (Python scalar)."""
    return Tensor(np.full(shape, fill_value, dtype=dtype))


def empty(shape, *, dtype=None, device=None):
    """An uninitialised constant Tensor of ``shape``."""
    return Tensor(np.empty(shape, dtype=dtype))


def zeros_like(x, /, *, dtype=None, device=None):
    """Zeros with the shape (and by default the dtype and backend) of ``x``; a constant."""
    v = _v(x)
    return Tensor(_ns(v).zeros_like(v, dtype=dtype))


def ones_like(x, /, *, dtype=None, device=None):
    """Ones with the shape (and by default the dtype and backend) of ``x``; a constant."""
    v = _v(x)
    return Tensor(_ns(v).ones_like(v, dtype=dtype))


def full_like(x, /, fill_value, *, dtype=None, device=None):
    """``fill_value`` with the shape (and by default the dtype and backend) of ``x``."""
    v = _v(x)
    return Tensor(_ns(v).full_like(v, fill_value, dtype=dtype))


def empty_like(x, /, *, dtype=None, device=None):
    """Uninitialised, with the shape (and by default the dtype and backend) of ``x``."""
    v = _v(x)
    return Tensor(_ns(v).empty_like(v, dtype=dtype))


def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
    """Evenly spaced values in ``[start, stop)`` (Array API ``arange``); a 1-d constant."""
    return Tensor(np.arange(start, stop, step, dtype=dtype))


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    """``num`` evenly spaced values from ``start`` to ``stop``; a 1-d constant."""
    return Tensor(np.linspace(start, stop, num, dtype=dtype, endpoint=endpoint))


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    """A 2-d constant with ones on the ``k``-th diagonal, shape ``(n_rows, n_cols or n_rows)``."""
    return Tensor(np.eye(n_rows, n_cols, k=k, dtype=dtype))


__all__ = ["asarray", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
           "empty_like", "arange", "linspace", "eye"]
