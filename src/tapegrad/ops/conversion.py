"""``asarray`` (Array API creation function): a Tensor from Python data, a backend array or
another Tensor; ``compute``, which evaluates lazy (Dask) Tensors together.

It sits above :mod:`.elementwise` because a Tensor that it copies or casts is ``astype``, so
that the copy keeps the gradient. Which backend creates the array, and how ``dtype`` and
``device`` are read, is as for the other creation functions (:mod:`.creation`).
"""
from __future__ import annotations

from .. import _backend
from .._backend import namespace as _ns
from .._backend import xp_dtype as _xp_dtype
from .._tensor import Tensor
from .creation import _placed, _split, _xp
from .elementwise import astype


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """A Tensor from a scalar, nested sequence, backend array or Tensor (Array API ``asarray``).

    dtype: by default inferred (Python floats: the backend's default float, ints: its default
    integer). A Tensor's or non-NumPy backend array stays on its own backend; Python data and
    NumPy arrays go to the default backend (or to the library of ``device``). ``copy``: True
    always copies, False raises ``ValueError`` if a copy is needed (always for Python data),
    None copies only if needed: so ``asarray(numpy_array)`` shares the array's memory, and
    writing into the array later changes the Tensor and any gradient computed from it (use
    ``copy=True``, or :func:`constant`, which always copies). A Tensor of the requested dtype
    and device is returned unchanged unless ``copy=True`` (Tensors are immutable). The result
    is a constant (no tape records it), except for a Tensor copied or cast on its own backend
    (``device`` None): that is ``astype``, differentiable, so that array-API code which copies
    or casts its input (``xp.asarray(x, copy=True)``) keeps the gradient. A JAX device (while
    JAX is not the default backend) gives a device-resident Tensor, as a ``tg.function``
    call's result: the value on the default backend (for eager ops) and on that device (for
    compiled calls, without a copy), float64 kept as float64.
    """
    tensor = isinstance(obj, Tensor)
    if tensor:
        if ((dtype is None or obj.dtype == dtype) and (device is None or device == obj.device)
                and not copy):
            return obj
        if device is None and copy is not False:
            return astype(obj, obj.dtype if dtype is None else dtype)
        obj = obj._value
    elif copy is False and isinstance(obj, (list, tuple, bool, int, float, complex)):
        raise ValueError(f"asarray: copy=False, but a Python {type(obj).__name__} must be copied "
                         "into a new array; pass copy=None (copy only if needed) or True")
    if device is None:  # a Tensor's array stays on its backend; other data: see _backend.asarray
        return Tensor(_backend.asarray(obj, dtype=dtype, xp=_ns(obj) if tensor else None,
                                       copy=copy))
    device, place = _split(device)
    xp = _xp(device)
    if place is not None and not isinstance(obj, (list, tuple, bool, int, float, complex)):
        obj = _backend.to_numpy(obj)  # a JAX array (or another library's) via NumPy
    return _placed(xp.asarray(obj, dtype=_xp_dtype(xp, dtype), device=device, copy=copy), place)


def compute(*tensors):
    """Evaluate lazy (Dask) Tensors together, in one graph, as ``dask.compute`` does.

    tensors: Tensors, or lists/tuples of Tensors (e.g. ``tg.compute(loss, grads)``). Returns a
    tuple with one entry per argument (a list/tuple for a list/tuple): each lazy Tensor becomes
    a new Tensor holding the computed NumPy array (same shape and dtype); a Tensor of any
    other backend is returned as it is. Work the Tensors share (the forward pass under a loss
    and its gradients) runs once. The results are constants: no tape records this. Raises
    ``TypeError`` for an argument that is not a Tensor or a list/tuple of Tensors.
    """
    flat = []
    for i, arg in enumerate(tensors):
        items = arg if isinstance(arg, (list, tuple)) else [arg]
        for t in items:
            if not isinstance(t, Tensor):
                raise TypeError(f"tg.compute: argument {i} is or holds a "
                                f"{type(t).__name__}; pass Tensors or lists/tuples of Tensors")
        flat.extend(items)
    values = _backend.materialize([t._value for t in flat])
    done = iter([t if v is t._value else Tensor(v) for t, v in zip(flat, values)])
    return tuple(type(a)(next(done) for _ in a) if isinstance(a, (list, tuple)) else next(done)
                 for a in tensors)


__all__ = ["asarray", "compute"]
