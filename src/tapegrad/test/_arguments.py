"""The arguments and results of a checked function: NumPy copies in, Tensors out.

The bottom layer of :mod:`tapegrad.test`: which arguments are checked (the floating ones), how
they are passed to the function, and what the function must return.
"""
from __future__ import annotations

import numpy as np

from .. import _backend
from .._tensor import Tensor

_SCALARS = (bool, int, float, complex)


def to_tensor(a) -> Tensor:
    """A NumPy array as a Tensor on the default backend (the checks then run there)."""
    return Tensor(_backend.asarray(a))


def as_numpy(value) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def is_float(t) -> bool:
    return _backend.is_floating(t.dtype)


def reject_complex(dtype, what, fname):
    if getattr(dtype, "kind", None) == "c":
        raise TypeError(f"{fname}: {what} has the complex dtype {dtype}; gradient checking "
                        "supports real floating dtypes only (check the real and imaginary parts "
                        "as separate real inputs)")


def tensor_outputs(y, fname) -> list:
    """The result of ``f`` as a list of Tensors (``f`` may return a Tensor or a tuple/list)."""
    ys = list(y) if isinstance(y, (list, tuple)) else [y]
    for k, t in enumerate(ys):
        if not isinstance(t, Tensor):
            where = f"output {k}" if isinstance(y, (list, tuple)) else "the result"
            raise TypeError(f"{fname}: {where} of the function is a {type(t).__name__}, not a "
                            "Tensor; the function must compute its result with tapegrad ops "
                            "and return a Tensor or a tuple of Tensors")
    return ys


def float_args(args, fname):
    """``(positions, float64 copies, {position: original dtype name if promoted})``."""
    positions, xs, promoted = [], [], {}
    for p, a in enumerate(args):
        if isinstance(a, _SCALARS) or a is None or isinstance(a, np.generic):
            continue
        dtype = getattr(a, "dtype", None)
        if dtype is None or not hasattr(a, "shape"):
            continue
        reject_complex(dtype, f"argument {p}", fname)
        if _backend.is_floating(dtype):
            arr = np.asarray(as_numpy(a))
            if arr.dtype != np.float64:
                promoted[p] = arr.dtype.name
            positions.append(p)
            xs.append(np.array(arr, dtype=np.float64))  # a copy
    return positions, xs, promoted


def caller(f, args, positions, fname):
    """``call(xt)``: ``f(*args)`` with the Tensors ``xt`` at ``positions``, as a list of Tensors.
    """
    base = list(args)

    def call(xt):
        a = list(base)
        for p, t in zip(positions, xt):
            a[p] = t
        return tensor_outputs(f(*a), fname)

    return call
