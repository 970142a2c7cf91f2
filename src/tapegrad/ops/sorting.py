"""Sorting (Array API): ``sort`` (differentiable) and ``argsort``.

A descending sort is computed from an ascending one on the flipped input, so that it works on
every backend (NumPy's ``sort`` has no ``descending``) and a stable descending ``argsort`` keeps
equal elements in their original order, as the standard asks.
"""
from __future__ import annotations

from .._backend import namespace as _ns
from .._registry import RegisterGradient, RegisterJVP, Sample, no_gradient, primitive
from .indexing import take_along_axis

_SORT_SAMPLES = [Sample((5,)), Sample((3, 4), axis=0), Sample((3, 4), descending=True),
                 Sample((2, 3, 4), axis=1, descending=True, stable=False), Sample((0, 3)),
                 Sample((3, 0), axis=0), Sample((1,))]


def _check(fn, x, axis):
    ndim = len(x.shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fn}: axis {axis} is out of range for a tensor of shape "
                         f"{tuple(x.shape)}" + (" (a 0-d tensor has nothing to sort; reshape it "
                                                "to (1,))" if ndim == 0 else ""))


def _argsort_forward(x, axis, descending, stable):
    xp = _ns(x)
    if not descending:
        return xp.argsort(x, axis=axis, stable=stable)
    # positions in the flipped input, mapped back: n - 1 - i, in reverse order
    n = x.shape[axis]
    i = xp.argsort(xp.flip(x, axis=axis), axis=axis, stable=stable)
    return xp.flip((n - 1) - i, axis=axis)


@primitive("Sort", real_only=True, samples=_SORT_SAMPLES)
def _sort(x, *, axis=-1, descending=False, stable=True):
    _check("sort", x, axis)
    xp = _ns(x)
    y = xp.sort(x, axis=axis, stable=stable)
    return xp.flip(y, axis=axis) if descending else y


@RegisterGradient("Sort")
def _sort_grad(op, dy):
    # y = x[p] along the axis with p = argsort(x): dx[p[k]] = dy[k], i.e. dx = dy[argsort(p)]
    # (the inverse permutation); take_along_axis's own gradient is a scatter-add.
    x = op.inputs[0]
    a = op.attrs
    p = argsort(x, axis=a.get("axis", -1), descending=a.get("descending", False),
                stable=a.get("stable", True))
    axis = a.get("axis", -1)
    return take_along_axis(dy, argsort(p, axis=axis), axis=axis)


@RegisterJVP("Sort")
def _sort_jvp(op, t):
    # y = x[p] along the axis, p = argsort(x) (the permutation the gradient inverts): dy = dx[p]
    a = op.attrs
    axis = a.get("axis", -1)
    p = argsort(op.inputs[0], axis=axis, descending=a.get("descending", False),
                stable=a.get("stable", True))
    return take_along_axis(t, p, axis=axis)


@primitive("ArgSort", real_only=True)
def _argsort(x, *, axis=-1, descending=False, stable=True):
    _check("argsort", x, axis)
    return _argsort_forward(x, axis, descending, stable)


no_gradient("ArgSort")


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """``x`` sorted along ``axis`` (Array API ``sort``).

    x: at least 1-d, real dtype; axis: int. descending: largest first. stable: equal elements
    keep their order (only observable through :func:`argsort`). Result: ``x``'s shape and
    dtype; NaNs sort to the end (NumPy). Raises ``ValueError`` for a 0-d ``x`` or an
    out-of-range axis. Gradient: the cotangent sent back through the sorting permutation,
    ``dx = take_along_axis(dy, argsort(argsort(x)))`` (ties get one element's share each).
    """
    return _sort(x, axis=axis, descending=descending, stable=stable)


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """The indices that sort ``x`` along ``axis`` (Array API ``argsort``).

    Arguments and errors as :func:`sort`; with ``stable``, equal elements keep their original
    order, also when ``descending``. Result: ``x``'s shape, the default index dtype (int64 on
    NumPy). Not differentiable (an integer result).
    """
    return _argsort(x, axis=axis, descending=descending, stable=stable)

__all__ = ["sort", "argsort"]
