"""``asarray`` (Array API creation function): a Tensor from Python data, a backend array or
another Tensor.

It sits above :mod:`.elementwise` because a Tensor that it copies or casts is ``astype``, so
that the copy keeps the gradient. Which backend creates the array, and how ``dtype`` and
``device`` are read, is as for the other creation functions (:mod:`.creation`).
"""
from __future__ import annotations

from .. import _backend
from .._backend import namespace as _ns
from .._backend import xp_dtype as _xp_dtype
from .._tensor import Tensor
from .creation import _xp
from .elementwise import astype


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """A Tensor from a scalar, nested sequence, backend array or Tensor (Array API ``asarray``).

    dtype: by default inferred (Python floats: the backend's default float, ints: its default
    integer). A Tensor's or non-NumPy backend array stays on its own backend; Python data and
    NumPy arrays go to the default backend (or to the library of ``device``). ``copy``: True
    always copies, False raises ``ValueError`` if a copy is needed, None copies only if
    needed: so ``asarray(numpy_array)`` shares the array's memory, and writing into the array
    later changes the Tensor and any gradient computed from it (use ``copy=True``, or
    :func:`constant`, which always copies). A Tensor of the requested dtype and device is
    returned unchanged unless
    ``copy=True`` (Tensors are immutable). The result is a constant (no tape records it),
    except for a Tensor copied or cast on its own backend (``device`` None): that is
    ``astype``, differentiable, so that array-API code which copies or casts its input
    (``xp.asarray(x, copy=True)``) keeps the gradient.
    """
    tensor = isinstance(obj, Tensor)
    if tensor:
        if ((dtype is None or obj.dtype == dtype) and (device is None or device == obj.device)
                and not copy):
            return obj
        if device is None and copy is not False:
            return astype(obj, obj.dtype if dtype is None else dtype)
        obj = obj._value
    if device is None:  # a Tensor's array stays on its backend; other data: see _backend.asarray
        return Tensor(_backend.asarray(obj, dtype=dtype, xp=_ns(obj) if tensor else None,
                                       copy=copy))
    xp = _xp(device)
    return Tensor(xp.asarray(obj, dtype=_xp_dtype(xp, dtype), device=device, copy=copy))


__all__ = ["asarray"]
