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
    """``(positions, copies, {position: original dtype name if promoted})``: the floating
    arguments as float64 copies, complex ones as complex128 copies."""
    positions, xs, promoted = [], [], {}
    for p, a in enumerate(args):
        if isinstance(a, _SCALARS) or a is None or isinstance(a, np.generic):
            continue
        dtype = getattr(a, "dtype", None)
        if dtype is None or not hasattr(a, "shape"):
            continue
        if _backend.is_floating(dtype):
            arr = np.asarray(as_numpy(a))
            wide = np.complex128 if arr.dtype.kind == "c" else np.float64
            if arr.dtype != wide:
                promoted[p] = arr.dtype.name
            positions.append(p)
            xs.append(np.array(arr, dtype=wide))  # a copy
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


def prepare(checker, f, args):
    """``(fname, positions, xs, promoted, call)`` for checking ``f(*args)`` with ``checker``.

    ``fname`` names the check in messages, ``positions``/``xs``/``promoted`` are
    :func:`float_args`'s, ``call`` is :func:`caller`'s. Raises ``TypeError`` if ``args`` is not
    a list or tuple, or none of the arguments is floating (real or complex) (then there
    is nothing to differentiate, and a check would pass without checking anything).
    """
    fname = f"{checker}({getattr(f, '__qualname__', None) or repr(f)})"
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"{fname}: `args` must be a list or tuple of the arguments of `f`, not a "
                        f"{type(args).__name__}; write {checker}(f, [x])")
    positions, xs, promoted = float_args(args, fname)
    if not xs:
        got = ", ".join(str(getattr(a, "dtype", type(a).__name__)) for a in args) or "none"
        raise TypeError(f"{fname}: none of the arguments is a floating array or Tensor (got: "
                        f"{got}), so there is nothing to differentiate: integer and boolean "
                        "arrays, Python and NumPy scalars are passed as constants. Pass the "
                        "inputs to check as floating arrays, e.g. x.astype(np.float64) or "
                        "np.asarray(3.0)")
    return fname, positions, xs, promoted, caller(f, args, positions, fname)


def floating_outputs(ys, fname) -> list:
    """The positions of the floating Tensors among ``f``'s outputs ``ys``.

    Raises ``TypeError`` if there is none (the check would pass without checking anything).
    """
    found = [k for k, y in enumerate(ys) if _backend.is_floating(y.dtype)]
    if not found:
        got = ", ".join(str(y.dtype) for y in ys) or "no output"
        raise TypeError(f"{fname}: none of the outputs of the function is floating (got: {got}), "
                        "so it has no gradient to check; check a floating quantity it computes "
                        "(e.g. the values that an argmax selects, not its indices)")
    return found


def check_tolerances(fname, **values):
    """Raise ``ValueError`` unless each value given (``None``: the default) is a finite real
    number, ``>= 0`` for ``atol`` and ``rtol``, ``> 0`` for a step (``eps``, ``delta``): a NaN
    or infinite tolerance would make every comparison fail or pass."""
    for name, v in values.items():
        if v is None:
            continue
        positive = name in ("eps", "delta")
        try:
            ok = bool(np.isfinite(v) and (v > 0 if positive else v >= 0))
        except (TypeError, ValueError):  # not a number, or an array
            ok = False
        if not ok:
            raise ValueError(f"{fname}: {name} must be a finite number "
                             f"{'> 0' if positive else '>= 0'}, got {v!r}")
