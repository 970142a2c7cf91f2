"""Finite differences and Jacobians: steps and tolerance defaults, the reverse-mode and
central-difference Jacobians, and TensorFlow's ``compute_gradient`` on them."""
from __future__ import annotations

import numpy as np

from .. import _backend
from .._tape import GradientTape
from .._tensor import Tensor
from ._arguments import as_numpy, check_tolerances, to_tensor

# Defaults by the itemsize of the least precise floating output: (central-difference step,
# atol, rtol) for a first-order check; order k multiplies atol and rtol by 10**(k - 1).
_DEFAULTS = {8: (1e-6, 1e-5, 1e-5), 4: (1e-3, 1e-2, 1e-2), 2: (2.0 ** -5, 1e-1, 1e-1)}


def defaults(itemsize, eps):
    """``(step, atol, rtol)`` for a first-order check of outputs of ``itemsize`` bytes (an
    unknown itemsize gets float64's); ``eps`` given replaces the step."""
    d_step, d_atol, d_rtol = _DEFAULTS.get(itemsize, _DEFAULTS[8])
    return (d_step if eps is None else eps), d_atol, d_rtol


def step_note(step, eps, itemsize) -> str:
    """The report's note on the central-difference step ``step`` (``eps``: the one given)."""
    if eps is not None:
        return f"finite-difference step eps={step:g} (given)"
    names = {8: "float64", 4: "float32", 2: "float16"}
    steps = ", ".join(f"{name}: {_DEFAULTS[size][0]:g}" for size, name in names.items())
    return (f"finite-difference step eps={step:g}, chosen for {names.get(itemsize, 'float64')} "
            f"results ({steps})")


def replace(xs, i, xi):
    """A copy of the list ``xs`` with ``xi`` at position ``i``."""
    xs = list(xs)
    xs[i] = xi
    return xs


def traced(fn, xs):
    """``(tape, xt, ys)``: ``ys = fn(xt)`` on Tensors ``xt`` of the arrays ``xs``, recorded by a
    persistent tape that watches ``xt``."""
    xt = [to_tensor(x) for x in xs]
    with GradientTape(persistent=True) as tape:
        tape.watch(xt)
        ys = fn(xt)
    return tape, xt, ys


def shifted(fn, xs, i, d):
    """``(plus, minus)``: :func:`flat_outputs` of ``fn`` with input ``i`` moved by ``+d`` and
    by ``-d``."""
    return flat_outputs(fn, replace(xs, i, xs[i] + d)), flat_outputs(fn, replace(xs, i, xs[i] - d))


def flat_outputs(fn, xs) -> np.ndarray:
    """All outputs of ``fn`` at the arrays ``xs``, flattened and concatenated, in float64."""
    ys = fn([to_tensor(x) for x in xs])
    if not ys:
        return np.zeros(0)
    return np.concatenate([_real_view(y.numpy()) for y in ys])


def _real_view(a) -> np.ndarray:
    """``a`` flattened to float64; a complex element becomes the pair (real, imaginary)."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        a = np.stack([a.real, a.imag], axis=-1)
    return a.astype(np.float64).reshape(-1)


def col_shape(x) -> tuple:
    """The shape of the Jacobian columns of input ``x``: a complex input adds an axis (real,
    imaginary), as :func:`_real_view` flattens it."""
    return tuple(np.shape(x)) + ((2,) if np.asarray(x).dtype.kind == "c" else ())


def unit(x, col, h):
    """An array like ``x`` that is ``h`` at Jacobian column ``col`` and 0 elsewhere (for a
    complex ``x``, column ``2 k`` is element ``k``'s real part, ``2 k + 1`` its imaginary one)."""
    x = np.asarray(x)
    d = np.zeros(x.size, dtype=x.dtype)
    if x.dtype.kind == "c":
        d[col // 2] = h if col % 2 == 0 else 1j * h
    else:
        d[col] = h
    return d.reshape(x.shape)


def vjp_jacobians(fn, xs) -> list:
    """Reverse-mode Jacobians of ``fn``'s (concatenated) outputs, one VJP per output element.

    Returns one float64 array of shape ``(total output size, n)`` per input, ``n`` its size
    (twice that for a complex input, as (real, imaginary) pairs).
    """
    tape, xt, ys = traced(fn, xs)
    parts = [(1.0, 1j) if y.dtype.kind == "c" else (1.0,) for y in ys]  # rows per element
    total = sum(y.size * len(p) for y, p in zip(ys, parts))
    jac = [np.zeros((total, int(np.prod(col_shape(x))))) for x in xs]
    row = 0
    for y, unit in zip(ys, parts):
        yv = y.numpy()
        for j in range(y.size):
            for c in unit:
                onehot = np.zeros(y.size, dtype=yv.dtype)
                onehot[j] = c
                gs = tape.gradient(y, xt, output_gradients=to_tensor(onehot.reshape(yv.shape)))
                for J, g in zip(jac, gs):
                    if g is not None:
                        J[row] = _real_view(g.numpy())
                row += 1
    return jac


def fd_jacobian(fn, xs, i, step) -> np.ndarray:
    """Central-difference Jacobian of ``fn``'s outputs w.r.t. ``xs[i]``, ``(total size, x.size)``.
    """
    x = xs[i]
    cols = []
    for j in range(int(np.prod(col_shape(x)))):
        plus, minus = shifted(fn, xs, i, unit(x, j, step))
        cols.append((plus - minus) / (2.0 * step))
    if not cols:
        return np.zeros((flat_outputs(fn, xs).size, 0))
    return np.stack(cols, axis=1)


def _default_step(dtype) -> float:
    # a power of two near eps**(1/3) (the step that balances truncation and rounding error);
    # exactly representable, like TensorFlow's 1/1024: 2**-17 for float64, 2**-8 for float32
    return float(2.0 ** np.round(np.log2(np.finfo(dtype).eps ** (1.0 / 3.0))))


def compute_gradient(f, x, delta=None):
    """Theoretical and numerical Jacobians of ``y = f(*x)`` (TF 2 ``tf.test.compute_gradient``).

    Args:
        f: a function of ``len(x)`` Tensors returning one floating Tensor ``y``.
        x: a list or tuple of the arguments: Tensors, arrays, Python scalars or nested lists,
            each of a floating dtype, real or complex (Python floats become float64 Tensors).
            Their dtypes
            are kept (no promotion): ``f`` gets each argument as a Tensor of that argument's
            dtype (float32 stays float32) in every evaluation.
        delta: the central-difference step. Default: per input, a power of two near
            ``eps ** (1/3)`` of the less precise of the input's and ``y``'s dtypes
            (``2**-17`` for float64, ``2**-8`` for float32).

    Returns:
        ``(theoretical, numerical)``: two tuples holding one 2-d NumPy array per argument, of
        that argument's dtype, with TensorFlow 2's layout: shape ``(y.size, x[i].size)``, rows
        indexing the (flattened, C-order) elements of ``y`` and columns those of ``x[i]``, so
        ``J[r, c] = d y.flat[r] / d x[i].flat[c]``. The theoretical Jacobian is built with one
        reverse-mode pass (a ``GradientTape`` VJP) per element of ``y``; an argument that ``y``
        does not depend on gets zeros. The numerical one is
        ``(f(x + delta e_c) - f(x - delta e_c)) / (2 delta)``, computed in float64. As in
        TensorFlow, a complex argument or result counts as twice as many reals: the (real,
        imaginary) parts of each element are consecutive columns (rows), the Jacobians have
        the real dtype, and the theoretical one follows the gradient convention of
        TensorFlow and tapegrad (row ``2k + 1`` is the VJP of the cotangent ``1j`` at
        element ``k``), so both agree.

    Raises:
        ValueError: if ``x`` is not a list or tuple, or ``delta`` is not a finite number > 0.
        TypeError: if an argument or ``y`` is not of a floating dtype, or ``f`` does not
            return a single Tensor.
    """
    fname = "compute_gradient"
    if not isinstance(x, (list, tuple)):
        raise ValueError(f"{fname}: `x` must be a list or tuple of the arguments of `f`, not a "
                         f"{type(x).__name__}; write compute_gradient(f, [x])")
    check_tolerances(fname, delta=delta)
    xs = []
    for i, a in enumerate(x):
        arr = np.array(as_numpy(a))  # a copy: the caller's array is never touched
        if not _backend.is_floating(arr.dtype):
            raise TypeError(f"{fname}: argument {i} has dtype {arr.dtype}; only floating "
                            "arguments have gradients (pass e.g. np.float64 values, and close "
                            "over integer arguments inside `f`)")
        xs.append(arr)

    def fn(xt):
        y = f(*xt)
        if not isinstance(y, Tensor):
            raise TypeError(f"{fname}: `f` must return a single Tensor, got "
                            f"{type(y).__name__}; check several outputs one at a time, or use "
                            "tg.test.check_gradients")
        if not _backend.is_floating(y.dtype):
            raise TypeError(f"{fname}: `f` returned a tensor of dtype {y.dtype}; only floating "
                            "results have gradients")
        return [y]

    y = fn([to_tensor(a) for a in xs])[0]
    theoretical = vjp_jacobians(fn, xs)
    numerical = []
    for i, a in enumerate(xs):
        if delta is None:
            worst = a.dtype if a.dtype.itemsize <= y.dtype.itemsize else y.dtype
            step = _default_step(worst)
        else:
            step = delta
        numerical.append(fd_jacobian(fn, xs, i, step))
    real = [np.real(np.zeros((), a.dtype)).dtype for a in xs]
    return (tuple(J.astype(r) for J, r in zip(theoretical, real)),
            tuple(J.astype(r) for J, r in zip(numerical, real)))


def compute_gradient_error(f, x, delta=None) -> float:
    """The largest absolute difference between the theoretical and numerical Jacobians.

    Same arguments and errors as :func:`compute_gradient`. Returns a Python float: ``0.0`` if
    every Jacobian is empty, and NaN if an element of either Jacobian is NaN (e.g. ``f`` or its
    gradient leaves its domain) or both are the same infinity, so that ``error < tol`` fails
    instead of passing. This is TensorFlow 1's ``tf.test.compute_gradient_error`` on
    TensorFlow 2's ``compute_gradient`` interface.
    """
    theoretical, numerical = compute_gradient(f, x, delta)
    errors = [np.max(np.abs(jt.astype(np.float64) - jn))
              for jt, jn in zip(theoretical, numerical) if jt.size]
    return float(np.max(errors)) if errors else 0.0  # np.max propagates NaN; max() would not
