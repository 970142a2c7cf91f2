"""Reductions and statistics (Array API names), forward and gradient side by side.

The gradient of a reduction broadcasts the cotangent back over the reduced axes: with
``keepdims=False`` it is first reshaped to the kept-dims shape, then broadcast to the input.
``_sum_to`` (a sum that undoes broadcasting) serves the gradients of the families above.
"""
from __future__ import annotations

import builtins
import math

import numpy as _np

from .._backend import namespace as _ns
from .._backend import xp_dtype as _xp_dtype
from .._registry import RegisterGradient, RegisterJVP, Sample, no_gradient, primitive
from ._jvp import linear_jvp
from .conversion import asarray
from .creation import ones_like, zeros_like
from .elementwise import astype, holomorphic, logical_and, logical_or, where
from .manipulation import broadcast_to, concat, flip, reshape

_AXIS_SAMPLES = [Sample((3, 4)), Sample((3, 4), axis=1), Sample((2, 3, 4), axis=(0, 2)),
                 Sample((3, 4), axis=-1, keepdims=True), Sample(()), Sample((0, 3), axis=0),
                 Sample((1, 1), axis=0)]
# max/min/var/std need at least one element in each reduced slice
_NONEMPTY_SAMPLES = [s for s in _AXIS_SAMPLES if s.args[0] != (0, 3)] + [
    Sample((0, 3), axis=1), Sample((2, 3, 4), axis=(1,), keepdims=True)]


def _axes(axis, ndim):
    """``axis`` (None, int or tuple) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    out = []
    for a in axis:
        if not -ndim <= a < builtins.max(ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor of {ndim} dimension(s)")
        out.append(a % ndim if ndim else 0)
    return tuple(sorted(out))


def _reduction_error(name, x, e):
    shape = tuple(getattr(x, "shape", ()))
    return ValueError(f"{name}: cannot reduce a tensor of shape {shape} as asked: {e}")


def _reduction(name):
    """The forward ``(x, *, axis=None, keepdims=False)`` of the reduction ``xp.<name>``
    (named ``_<name>``), the backend's errors re-raised by :func:`_reduction_error`."""
    def forward(x, *, axis=None, keepdims=False):
        try:
            return getattr(_ns(x), name)(x, axis=axis, keepdims=keepdims)
        except (ValueError, IndexError) as e:
            raise _reduction_error(name, x, e) from e

    forward.__name__ = forward.__qualname__ = f"_{name}"
    return forward


def _kept_shape(shape, axis):
    axes = _axes(axis, len(shape))
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _count(shape, axis) -> int:
    """Number of elements reduced into each output element."""
    n = 1
    for a in _axes(axis, len(shape)):
        n *= shape[a]
    return n


def _expand_to(dy, x, axis):
    """Broadcast a reduction's cotangent ``dy`` back to the shape of ``x``."""
    if dy.ndim not in (0, x.ndim):  # the reduced axes are gone: restore them as size 1
        dy = reshape(dy, _kept_shape(x.shape, axis))
    return broadcast_to(dy, x.shape)


def _kept(t, x, axis):
    """A reduction's output or cotangent ``t`` reshaped to keep the reduced axes (size 1)."""
    return reshape(t, _kept_shape(x.shape, axis))


def _weighted_sum(op, w, t):
    """The JVP ``sum(w * t)`` over the reduced axes of a reduction ``op`` whose partial
    derivatives are ``w`` (x's shape): the gradient's weights, contracted with the tangent."""
    return _sum(w * t, axis=op.attrs.get("axis"), keepdims=op.attrs.get("keepdims", False))


# --- sum, mean, prod -------------------------------------------------------------------------
@primitive("Sum", samples=_AXIS_SAMPLES)
def _sum(x, *, axis=None, dtype=None, keepdims=False):
    try:
        if type(x) is _np.ndarray:  # what np.sum calls, without its Python dispatch
            return _np.add.reduce(x, axis=axis, dtype=_xp_dtype(_np, dtype), keepdims=keepdims)
        xp = _ns(x)
        return xp.sum(x, axis=axis, dtype=_xp_dtype(xp, dtype), keepdims=keepdims)
    except (ValueError, IndexError) as e:
        raise _reduction_error("sum", x, e) from e


RegisterJVP("Sum")(linear_jvp)


@RegisterGradient("Sum", reads="none")
def _sum_grad(op, dy):
    # d(sum x)/dx_i = 1: the cotangent broadcast back over the reduced axes
    return _expand_to(dy, op.inputs[0], op.attrs.get("axis"))


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001 - Array API name
    """Sum over ``axis`` (None: all axes; int or tuple of ints).

    x: any shape, numeric dtype. Result: ``x.shape`` without the reduced axes (kept as size 1
    with ``keepdims``). Gradient: the cotangent broadcast over the reduced axes.
    """
    return _sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


def _sum_to(g, shape):
    """Sum ``g`` over the leading axes and the axes where ``shape`` has 1 (undo broadcasting)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    if axes:
        g = _sum(g, axis=axes)
    return g if g.shape == shape else reshape(g, shape)


def mean(x, /, *, axis=None, keepdims=False):
    """Arithmetic mean over ``axis``; same shapes as :func:`sum`. Floating ``x`` only.

    Written as ``sum(x) / n``, so its gradient is ``dy / n`` broadcast back.
    """
    x = asarray(x)
    try:
        n = _count(x.shape, axis)
    except ValueError as e:
        raise _reduction_error("mean", x, e) from None
    return _sum(x, axis=axis, keepdims=keepdims) / float(n)


@primitive("Prod", samples=_AXIS_SAMPLES + [Sample((4, 3), axis=0, keepdims=True)])
def _prod(x, *, axis=None, dtype=None, keepdims=False):
    try:
        xp = _ns(x)
        return xp.prod(x, axis=axis, dtype=_xp_dtype(xp, dtype), keepdims=keepdims)
    except (ValueError, IndexError) as e:
        raise _reduction_error("prod", x, e) from e


@RegisterGradient("Prod")
@holomorphic
def _prod_grad(op, dy):
    # d(prod x)/dx_i = product of the other elements of x_i's slice. Written without dividing
    # by zero (the product p of the slice's nonzero elements and its number n0 of zeros):
    # n0 = 0: p / x_i;  n0 = 1: p at the zero, 0 elsewhere;  n0 >= 2: 0.
    # Exact to first order everywhere; higher orders are exact where no slice holds a zero.
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    return _kept(dy, x, axis) * _prod_others(x, axis)


def _prod_others(x, axis):
    zero = x == 0.0
    safe = where(zero, ones_like(x), x)
    p = _prod(safe, axis=axis, keepdims=True)
    n0 = _sum(astype(zero, x.dtype), axis=axis, keepdims=True)
    return where(zero, where(n0 == 1.0, p, 0.0), where(n0 == 0.0, p / safe, 0.0))


@RegisterJVP("Prod")
def _prod_jvp(op, t):
    # d prod = sum_i (product of the others) dx_i, the gradient's division-free weights
    return _weighted_sum(op, _prod_others(op.inputs[0], op.attrs.get("axis")), t)


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    """Product over ``axis`` (None: all axes; int or tuple of ints); 1 for empty slices.

    Shapes as :func:`sum`. Gradient: the cotangent times the product of the *other* elements
    of each slice, computed without division so that zeros in ``x`` are handled exactly
    (conjugated for complex ``x``, TensorFlow's convention); JVP: those products contracted
    with the tangent.
    """
    return _prod(x, axis=axis, dtype=dtype, keepdims=keepdims)


# --- max, min --------------------------------------------------------------------------------
_max = primitive("Max", real_only=True, samples=_NONEMPTY_SAMPLES)(_reduction("max"))
_min = primitive("Min", real_only=True, samples=_NONEMPTY_SAMPLES)(_reduction("min"))


def _extremum_grad(op, dy):
    # the cotangent goes to the elements equal to the result, split evenly among ties
    # (TensorFlow's _MinOrMaxGrad); the mask is constant, so the gradient is piecewise linear
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    mask = astype(x == _kept(op.outputs[0], x, axis), x.dtype)
    return mask * (_kept(dy, x, axis) / _sum(mask, axis=axis, keepdims=True))


def _extremum_jvp(op, t):
    # the mean tangent of the elements equal to the result: the transpose of the gradient's
    # even split among ties (the tangent at the argmax when it is unique)
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    mask = astype(x == _kept(op.outputs[0], x, axis), x.dtype)
    return _weighted_sum(op, mask, t) / _sum(mask, axis=axis, keepdims=op.attrs.get(
        "keepdims", False))


RegisterGradient("Max")(_extremum_grad)
RegisterGradient("Min")(_extremum_grad)
RegisterJVP("Max")(_extremum_jvp)
RegisterJVP("Min")(_extremum_jvp)


def max(x, /, *, axis=None, keepdims=False):  # noqa: A001 - Array API name
    """Maximum over ``axis`` (None: all axes; int or tuple of ints).

    Shapes as :func:`sum`; raises ``ValueError`` for a reduction over an empty slice.
    Gradient: the cotangent to the maximal elements, split evenly among ties (as TensorFlow).
    """
    return _max(x, axis=axis, keepdims=keepdims)


def min(x, /, *, axis=None, keepdims=False):  # noqa: A001 - Array API name
    """Minimum over ``axis`` (None: all axes; int or tuple of ints).

    Shapes as :func:`sum`; raises ``ValueError`` for a reduction over an empty slice.
    Gradient: the cotangent to the minimal elements, split evenly among ties (as TensorFlow).
    """
    return _min(x, axis=axis, keepdims=keepdims)


# --- var, std --------------------------------------------------------------------------------
@primitive("Var", real_only=True, samples=_NONEMPTY_SAMPLES + [Sample((3, 4), axis=0, correction=1.0)])
def _var(x, *, axis=None, correction=0.0, keepdims=False):
    try:
        return _ns(x).var(x, axis=axis, correction=correction, keepdims=keepdims)
    except (ValueError, IndexError) as e:
        raise _reduction_error("var", x, e) from e


def _centered_over_dof(x, axis, correction):
    """``(x - mean(x)) / (N - correction)`` over ``axis``, with N the slice size."""
    dof = _count(x.shape, axis) - correction
    return (x - mean(x, axis=axis, keepdims=True)) * (1.0 / dof if dof > 0 else math.nan)


@RegisterGradient("Var")
def _var_grad(op, dy):
    # var = sum((x - m)^2) / (N - c); d var/dx_i = 2 (x_i - m) / (N - c) (the m-terms sum to 0)
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    d = _centered_over_dof(x, axis, op.attrs.get("correction", 0.0))
    return _kept(dy, x, axis) * (2.0 * d)


@RegisterJVP("Var")
def _var_jvp(op, t):
    # d var = sum_i 2 (x_i - m) dx_i / (N - c), the gradient's weights
    d = _centered_over_dof(op.inputs[0], op.attrs.get("axis"), op.attrs.get("correction", 0.0))
    return _weighted_sum(op, 2.0 * d, t)


@primitive("Std", real_only=True, samples=[  # no single-element slices: std = 0 there, its gradient infinite
    Sample((3, 4)), Sample((3, 4), axis=1), Sample((2, 3, 4), axis=(0, 2)),
    Sample((3, 4), axis=-1, keepdims=True), Sample((3, 4), axis=0, correction=1.0),
    Sample((0, 3), axis=1)])
def _std(x, *, axis=None, correction=0.0, keepdims=False):
    try:
        return _ns(x).std(x, axis=axis, correction=correction, keepdims=keepdims)
    except (ValueError, IndexError) as e:
        raise _reduction_error("std", x, e) from e


@RegisterGradient("Std")
def _std_grad(op, dy):
    # std = sqrt(var): d std/dx_i = (x_i - m) / ((N - c) std)
    x = op.inputs[0]
    axis = op.attrs.get("axis")
    d = _centered_over_dof(x, axis, op.attrs.get("correction", 0.0))
    return _kept(dy / op.outputs[0], x, axis) * d


@RegisterJVP("Std")
def _std_jvp(op, t):
    # d std = sum_i (x_i - m) dx_i / ((N - c) std)
    d = _centered_over_dof(op.inputs[0], op.attrs.get("axis"), op.attrs.get("correction", 0.0))
    return _weighted_sum(op, d, t) / op.outputs[0]


def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    """Variance ``sum((x - mean)^2) / (N - correction)`` over ``axis`` (floating ``x``).

    Shapes as :func:`sum`; NaN where ``N - correction <= 0``. Gradient:
    ``dy * 2 (x - mean) / (N - correction)``.
    """
    return _var(x, axis=axis, correction=correction, keepdims=keepdims)


def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    """Standard deviation ``sqrt(var(x, axis, correction))`` (floating ``x``).

    Shapes as :func:`sum`. Gradient: ``dy * (x - mean) / ((N - correction) * std)``, infinite
    or NaN where the slice is constant (std = 0), as for ``sqrt`` at 0.
    """
    return _std(x, axis=axis, correction=correction, keepdims=keepdims)


# --- cumulative_sum --------------------------------------------------------------------------
def _cumulative(name):
    """The forward of ``xp.<name>`` (``cumulative_sum``, ``cumulative_prod``; named
    ``_<name>``): ``x`` at least 1-d, ``axis`` required unless ``x`` is 1-d."""
    def forward(x, *, axis=None, dtype=None, include_initial=False):
        if x.ndim == 0:
            raise ValueError(f"{name}: x must have at least one dimension, got a 0-d "
                             "tensor; reshape it to (1,)")
        if axis is None and x.ndim > 1:
            raise ValueError(f"{name}: axis is required for a tensor of {x.ndim} "
                             "dimensions (only 1-d tensors may omit it)")
        try:
            xp = _ns(x)
            return getattr(xp, name)(x, axis=axis, dtype=_xp_dtype(xp, dtype),
                                     include_initial=include_initial)
        except (ValueError, IndexError) as e:
            raise _reduction_error(name, x, e) from e

    forward.__name__ = forward.__qualname__ = f"_{name}"
    return forward


_cumulative_sum = primitive("CumulativeSum", samples=[
    Sample((5,)), Sample((3, 4), axis=1), Sample((3, 4), axis=0, include_initial=True),
    Sample((2, 3, 4), axis=-1), Sample((0, 3), axis=1),
    Sample((3, 0), axis=1, include_initial=True),
    Sample((1,), include_initial=True)])(_cumulative("cumulative_sum"))


def _reverse_cumsum(t, axis):
    """``out_j = sum_{k>=j} t_k`` along ``axis`` (flip, cumulative_sum, flip)."""
    return flip(cumulative_sum(flip(t, axis=axis), axis=axis), axis=axis)


RegisterJVP("CumulativeSum")(linear_jvp)


@RegisterGradient("CumulativeSum")
def _cumulative_sum_grad(op, dy):
    # y_k = sum_{j<=k} x_j, so dx_j = sum_{k>=j} dy_k: a reversed cumulative sum of dy.
    # With include_initial, y_k = sum_{j<k} x_j: the same after dropping dy_0.
    axis = op.attrs.get("axis")
    axis = 0 if axis is None else axis % dy.ndim
    if op.attrs.get("include_initial", False):
        dy = dy[(slice(None),) * axis + (slice(1, None), ...)]
    return _reverse_cumsum(dy, axis)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Cumulative sum along ``axis`` (required unless ``x`` is 1-d).

    Result: ``x``'s shape, with one more element along ``axis`` (a leading 0) if
    ``include_initial``. Raises ``ValueError`` for a 0-d ``x`` or a missing axis. Gradient:
    the reversed cumulative sum of the cotangent (flip, cumulative_sum, flip).
    """
    return _cumulative_sum(x, axis=axis, dtype=dtype, include_initial=include_initial)


# --- cumulative_prod --------------------------------------------------------------------------
_cumulative_prod = primitive("CumulativeProd", samples=[
    Sample((5,)), Sample((3, 4), axis=1), Sample((3, 4), axis=0, include_initial=True),
    Sample((2, 3, 4), axis=-1), Sample((0, 3), axis=1),
    Sample((3, 0), axis=1, include_initial=True), Sample((1,), include_initial=True),
    Sample((4,), domain=(-1.5, 1.5))])(_cumulative("cumulative_prod"))


@RegisterGradient("CumulativeProd")
@holomorphic
def _cumulative_prod_grad(op, dy):
    # y_k = prod_{i<=k} x_i, so dx_j = sum_{k>=j} dy_k prod_{i<=k, i!=j} x_i. Per slice, with
    # k0 its first zero (the exclusive-product formulation, as PyTorch's cumprod_backward):
    #   j < k0 (or no zero): dx_j = sum_{k>=j} dy_k y_k / x_j   (y_k = 0 from k0 on);
    #   j = k0:  dx_j = (prod_{i<j} x_i) * sum_{k>=j} dy_k prod_{j<i<=k} x_i;
    #   j > k0:  dx_j = 0 (every product keeps the factor x_k0 = 0).
    # No division by zero; exact to first order everywhere, higher orders exact where no
    # slice holds a zero (the j > k0 terms vanish only at x_k0 = 0), as for prod.
    x, y = op.inputs[0], op.outputs[0]
    axis, lead, before, first, ones, excl, tail = _first_zero_parts(op, x)
    if op.attrs.get("include_initial", False):  # y_0 = 1 is a constant: drop it
        dy, y = dy[lead + (slice(1, None), ...)], y[lead + (slice(1, None), ...)]
    g = where(before, _reverse_cumsum(dy * y, axis) / where(before, x, ones), 0.0)
    # at the first zero: the exclusive product times the tail products after it
    s = _sum(where(before, 0.0, dy * tail), axis=axis, keepdims=True)
    return g + where(first, excl * s, 0.0)


def _first_zero_parts(op, x):
    """What the CumulativeProd gradient and JVP share, for ``x`` along the op's axis:
    ``(axis, lead, before, first, ones, excl, tail)``, with ``lead`` the index prefix of the
    axis, ``before`` (ahead of the slice's first zero) and ``first`` (at it) masks, ``excl``
    the exclusive products and ``tail`` the products after the first zero (ones up to it)."""
    axis = op.attrs.get("axis")
    axis = 0 if axis is None else axis % x.ndim
    lead = (slice(None),) * axis
    zero = x == 0.0
    zeros_so_far = cumulative_sum(astype(zero, x.dtype), axis=axis)
    before = zeros_so_far == 0.0
    first = logical_and(zero, zeros_so_far == 1.0)
    ones = ones_like(x)
    excl = cumulative_prod(x, axis=axis, include_initial=True)[lead + (slice(None, -1), ...)]
    tail = cumulative_prod(where(logical_or(before, first), ones, x), axis=axis)
    return axis, lead, before, first, ones, excl, tail


@RegisterJVP("CumulativeProd")
def _cumulative_prod_jvp(op, t):
    # dy_k = sum_{j<=k} t_j prod_{i<=k, i!=j} x_i. Per slice, with k0 its first zero:
    #   k < k0 (or no zero): dy_k = y_k sum_{j<=k} t_j / x_j;
    #   k >= k0: only j = k0 keeps no zero factor: dy_k = (prod_{i<k0} x_i) t_k0 prod_{k0<i<=k} x_i.
    # No division by zero, as in the gradient; exact to first order everywhere.
    x, y = op.inputs[0], op.outputs[0]
    axis, lead, before, first, ones, excl, tail = _first_zero_parts(op, x)
    initial = op.attrs.get("include_initial", False)
    if initial:  # y_0 = 1 is a constant: its tangent is zero
        y0, y = y[lead + (slice(0, 1), ...)], y[lead + (slice(1, None), ...)]
    dy = y * cumulative_sum(where(before, t / where(before, x, ones), 0.0), axis=axis)
    at_zero = _sum(where(first, excl * t, 0.0), axis=axis, keepdims=True)
    dy = where(before, dy, at_zero * tail)
    if initial:
        dy = concat([zeros_like(y0), dy], axis=axis)
    return dy


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Cumulative product along ``axis`` (required unless ``x`` is 1-d).

    Result: ``x``'s shape, with one more element along ``axis`` (a leading 1) if
    ``include_initial``. Raises ``ValueError`` for a 0-d ``x`` or a missing axis. Gradient:
    ``dx_j = sum_{k>=j} dy_k prod_{i<=k, i!=j} x_i``, computed without division so that zeros
    in ``x`` are exact (exclusive products before and after each slice's first zero); second
    order is exact away from zeros. Complex ``x``: that formula's conjugate (TensorFlow's
    convention, ``elementwise.holomorphic``); the JVP is the same sum on the tangent.
    """
    return _cumulative_prod(x, axis=axis, dtype=dtype, include_initial=include_initial)


# --- count_nonzero ---------------------------------------------------------------------------
_count_nonzero = primitive("CountNonzero")(_reduction("count_nonzero"))


no_gradient("CountNonzero")


def count_nonzero(x, /, *, axis=None, keepdims=False):
    """The number of nonzero (True; for complex, either component nonzero) elements over
    ``axis`` (None: all axes; int or tuple of ints).

    Result: the default integer dtype, shapes as :func:`sum`. Not differentiable.
    """
    return _count_nonzero(x, axis=axis, keepdims=keepdims)


# --- argmax, argmin --------------------------------------------------------------------------
_argmax = primitive("ArgMax", real_only=True)(_reduction("argmax"))
_argmin = primitive("ArgMin", real_only=True)(_reduction("argmin"))


no_gradient("ArgMax")
no_gradient("ArgMin")


def argmax(x, /, *, axis=None, keepdims=False):
    """Index of the first maximal element along ``axis`` (int; None: of the flattened ``x``).

    Result: integer dtype (the backend's default index type), shape as :func:`max`. Not
    differentiable (an integer result).
    """
    return _argmax(x, axis=axis, keepdims=keepdims)


def argmin(x, /, *, axis=None, keepdims=False):
    """Index of the first minimal element along ``axis`` (int; None: of the flattened ``x``).

    Result: integer dtype, shape as :func:`min`. Not differentiable (an integer result).
    """
    return _argmin(x, axis=axis, keepdims=keepdims)


__all__ = ["sum", "mean", "prod", "max", "min", "var", "std", "cumulative_sum",
           "cumulative_prod", "count_nonzero", "argmax", "argmin"]
