"""Gradient checking: compare tape gradients with central finite differences.

* :func:`compute_gradient` — TensorFlow 2's ``tf.test.compute_gradient``: the full theoretical
  (reverse-mode) and numerical (central-difference) Jacobians, in TensorFlow 2's layout.
* :func:`compute_gradient_error` — the largest absolute difference between the two (the
  TensorFlow 1 helper of that name, for code written against it).
* :func:`check_gradients` — the checker to use in tests: first, second (or higher) order, in
  float64, fast (one random projection per input and order), with an ``AssertionError`` naming
  the worst Jacobian element on failure.

The checks run on NumPy copies of the inputs (values of other backends are converted with
``Tensor.numpy()``). Complex inputs are not supported yet.
"""
from __future__ import annotations

import numpy as np

from . import _backend
from ._tape import GradientTape
from ._tensor import Tensor

__all__ = ["compute_gradient", "compute_gradient_error", "check_gradients"]

_SCALARS = (bool, int, float, complex)

# Defaults by the itemsize of the least precise floating output: (central-difference step,
# atol, rtol) for a first-order check; order k multiplies atol and rtol by 10**(k - 1).
_DEFAULTS = {8: (1e-6, 1e-5, 1e-5), 4: (1e-3, 1e-2, 1e-2), 2: (2.0 ** -5, 1e-1, 1e-1)}

_ORDINAL = {1: "first", 2: "second", 3: "third"}


# --- shared helpers --------------------------------------------------------------------------
def _as_numpy(value) -> np.ndarray:
    return value.numpy() if isinstance(value, Tensor) else np.asarray(value)


def _outputs(y, fname) -> list:
    """The result of ``f`` as a list of Tensors (``f`` may return a Tensor or a tuple/list)."""
    ys = list(y) if isinstance(y, (list, tuple)) else [y]
    for k, t in enumerate(ys):
        if not isinstance(t, Tensor):
            where = f"output {k}" if isinstance(y, (list, tuple)) else "the result"
            raise TypeError(f"{fname}: {where} of the function is a {type(t).__name__}, not a "
                            "Tensor; the function must compute its result with tapegrad ops "
                            "and return a Tensor or a tuple of Tensors")
    return ys


def _is_float(t) -> bool:
    return _backend.is_floating(t.dtype)


def _reject_complex(dtype, what, fname):
    if getattr(dtype, "kind", None) == "c":
        raise TypeError(f"{fname}: {what} has the complex dtype {dtype}; gradient checking "
                        "supports real floating dtypes only (check the real and imaginary parts "
                        "as separate real inputs)")


def _replace(xs, i, xi):
    xs = list(xs)
    xs[i] = xi
    return xs


def _flat_outputs(fn, xs) -> np.ndarray:
    """All outputs of ``fn`` at the arrays ``xs``, flattened and concatenated, in float64."""
    ys = fn([Tensor(x) for x in xs])
    if not ys:
        return np.zeros(0)
    return np.concatenate([np.asarray(y.numpy(), dtype=np.float64).reshape(-1) for y in ys])


def _vjp_jacobians(fn, xs) -> list:
    """Reverse-mode Jacobians of ``fn``'s (concatenated) outputs, one VJP per output element.

    Returns one float64 array of shape ``(total output size, xs[i].size)`` per input.
    """
    xt = [Tensor(x) for x in xs]
    with GradientTape(persistent=True) as tape:
        tape.watch(xt)
        ys = fn(xt)
    total = sum(y.size for y in ys)
    jac = [np.zeros((total, x.size)) for x in xs]
    row = 0
    for y in ys:
        yv = y.numpy()
        for j in range(y.size):
            onehot = np.zeros(y.size, dtype=yv.dtype)
            onehot[j] = 1
            gs = tape.gradient(y, xt, output_gradients=Tensor(onehot.reshape(yv.shape)))
            for J, g in zip(jac, gs):
                if g is not None:
                    J[row] = g.numpy().reshape(-1)
            row += 1
    return jac


def _fd_jacobian(fn, xs, i, step) -> np.ndarray:
    """Central-difference Jacobian of ``fn``'s outputs w.r.t. ``xs[i]``, ``(total size, x.size)``.
    """
    x = xs[i]
    cols = []
    for j in range(x.size):
        d = np.zeros(x.size, dtype=x.dtype)
        d[j] = step
        d = d.reshape(x.shape)
        plus = _flat_outputs(fn, _replace(xs, i, x + d))
        minus = _flat_outputs(fn, _replace(xs, i, x - d))
        cols.append((plus - minus) / (2.0 * step))
    if not cols:
        return np.zeros((_flat_outputs(fn, xs).size, 0))
    return np.stack(cols, axis=1)


# --- TensorFlow's compute_gradient -------------------------------------------------------------
def _default_step(dtype) -> float:
    # a power of two near eps**(1/3) (the step that balances truncation and rounding error);
    # exactly representable, like TensorFlow's 1/1024: 2**-17 for float64, 2**-8 for float32
    return float(2.0 ** np.round(np.log2(np.finfo(dtype).eps ** (1.0 / 3.0))))


def compute_gradient(f, x, delta=None):
    """Theoretical and numerical Jacobians of ``y = f(*x)`` (TF 2 ``tf.test.compute_gradient``).

    Args:
        f: a function of ``len(x)`` Tensors returning one floating Tensor ``y``.
        x: a list or tuple of the arguments: Tensors, arrays, Python scalars or nested lists,
            each of a real floating dtype (Python floats become float64 Tensors). Their dtypes
            are kept (no promotion).
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
        ``(f(x + delta e_c) - f(x - delta e_c)) / (2 delta)``, computed in float64.

    Raises:
        ValueError: if ``x`` is not a list or tuple.
        TypeError: if an argument or ``y`` is not of a real floating dtype, or ``f`` does not
            return a single Tensor.
    """
    fname = "compute_gradient"
    if not isinstance(x, (list, tuple)):
        raise ValueError(f"{fname}: `x` must be a list or tuple of the arguments of `f`, not a "
                         f"{type(x).__name__}; write compute_gradient(f, [x])")
    xs = []
    for i, a in enumerate(x):
        arr = np.array(_as_numpy(a))  # a copy: the caller's array is never touched
        _reject_complex(arr.dtype, f"argument {i}", fname)
        if not _backend.is_floating(arr.dtype):
            raise TypeError(f"{fname}: argument {i} has dtype {arr.dtype}; only real floating "
                            "arguments have gradients (pass e.g. np.float64 values, and close "
                            "over integer arguments inside `f`)")
        xs.append(arr)

    def fn(xt):
        y = f(*xt)
        if not isinstance(y, Tensor):
            raise TypeError(f"{fname}: `f` must return a single Tensor, got "
                            f"{type(y).__name__}; check several outputs one at a time, or use "
                            "tg.test.check_gradients")
        _reject_complex(y.dtype, "the result of `f`", fname)
        if not _is_float(y):
            raise TypeError(f"{fname}: `f` returned a tensor of dtype {y.dtype}; only floating "
                            "results have gradients")
        return [y]

    y = fn([Tensor(a) for a in xs])[0]
    theoretical = _vjp_jacobians(fn, xs)
    numerical = []
    for i, a in enumerate(xs):
        if delta is None:
            worst = a.dtype if a.dtype.itemsize <= y.dtype.itemsize else y.dtype
            step = _default_step(worst)
        else:
            step = delta
        numerical.append(_fd_jacobian(fn, xs, i, step))
    return (tuple(J.astype(a.dtype) for J, a in zip(theoretical, xs)),
            tuple(J.astype(a.dtype) for J, a in zip(numerical, xs)))


def compute_gradient_error(f, x, delta=None) -> float:
    """The largest absolute difference between the theoretical and numerical Jacobians.

    Same arguments and errors as :func:`compute_gradient`. Returns a Python float (``0.0`` if
    every Jacobian is empty). This is TensorFlow 1's ``tf.test.compute_gradient_error`` on
    TensorFlow 2's ``compute_gradient`` interface.
    """
    theoretical, numerical = compute_gradient(f, x, delta)
    err = 0.0
    for jt, jn in zip(theoretical, numerical):
        if jt.size:
            err = max(err, float(np.max(np.abs(jt.astype(np.float64) - jn))))
    return err


# --- check_gradients ---------------------------------------------------------------------------
def _directions(shapes, rng) -> list:
    """Random arrays of ``shapes`` with entries of random sign and magnitude in [1, 2].

    Every product ``u[r] * v[c]`` is at least 1 in magnitude, so one wrong Jacobian element
    moves ``<u, J v>`` by at least its own error (a single bad element is never diluted), and
    the continuous magnitudes make cancellation between several bad elements a coincidence.
    """
    return [rng.choice([-1.0, 1.0], size=s) * rng.uniform(1.0, 2.0, size=s) for s in shapes]


def _vjp_function(fn, xs, rng):
    """``h(x) = [d<u, fn(x)>/dx_i for each i]`` for a fixed random cotangent ``u``.

    The VJP is computed on an inner tape, so an outer tape differentiates it again; this is
    how every order above the first is checked (as the first order of ``h``).
    """
    from .ops.creation import zeros_like

    ys = fn([Tensor(x) for x in xs])
    us = [Tensor(u.astype(y.dtype)) for u, y in zip(_directions([y.shape for y in ys], rng), ys)]

    def h(xt):
        with GradientTape() as tape:
            tape.watch(xt)
            outs = fn(xt)
        gs = tape.gradient(outs, xt, output_gradients=us) if outs else [None] * len(xt)
        return [zeros_like(x) if g is None else g for g, x in zip(gs, xt)]

    return h


def _projected_failures(fn, xs, rng, step, atol, rtol):
    """``(i, analytic, numeric)`` for each input ``i`` where ``<u, J_i v_i>`` from one VJP and
    from a central difference of ``<u, fn(x + t v_i)>`` disagree (``u``, ``v_i`` random)."""
    xt = [Tensor(x) for x in xs]
    with GradientTape() as tape:
        tape.watch(xt)
        ys = fn(xt)
    if not ys:
        return []
    us = _directions([y.shape for y in ys], rng)
    gs = tape.gradient(ys, xt, output_gradients=[Tensor(u.astype(y.dtype))
                                                 for u, y in zip(us, ys)])
    u = np.concatenate([v.reshape(-1) for v in us])
    failures = []
    for i, x in enumerate(xs):
        if x.size == 0:
            continue
        (v,) = _directions([x.shape], rng)
        analytic = 0.0 if gs[i] is None else float(np.sum(gs[i].numpy() * v))
        plus = _flat_outputs(fn, _replace(xs, i, x + step * v))
        minus = _flat_outputs(fn, _replace(xs, i, x - step * v))
        numeric = float(u @ (plus - minus)) / (2.0 * step)
        if not abs(analytic - numeric) <= atol + rtol * abs(numeric):  # NaN fails too
            failures.append((i, analytic, numeric))
    return failures


def check_gradients(f, args, order=1, atol=None, rtol=None, eps=None, *, seed=0):
    """Assert that the tape gradients of ``f(*args)`` match central finite differences.

    Checks every order from 1 to ``order`` (as JAX's ``check_grads`` does): order 1 compares
    the reverse-mode VJP with central differences of ``f``; order ``k + 1`` does the same for
    the order-``k`` gradient map ``x -> d<u, g(x)>/dx`` (``u`` a fixed random cotangent),
    which is differentiated with nested ``GradientTape``\\ s, against central differences of
    that analytic gradient.

    Args:
        f: a function of ``*args`` built from tapegrad ops, returning a Tensor or a tuple/list
            of Tensors. Non-floating outputs (integer, boolean) are ignored; each floating output
            gets its own random cotangent.
        args: a list or tuple of the arguments. Tensors, Variables and backend arrays of a real
            floating dtype are checked: they are passed to ``f`` as float64 Tensors (float32 and
            float16 values are **promoted to float64** for the check, so the check measures the
            gradient formulas, not the rounding of low precision). Everything else — Python
            and NumPy scalars, integer and boolean arrays, shapes, ``None`` — is passed
            unchanged and treated as a constant. Size-0 inputs are passed but have nothing to
            check; an input that ``f`` does not depend on has a zero gradient (``None`` from
            the tape counts as zeros).
        order: the highest order to check (an int >= 1).
        atol, rtol: the tolerance ``|analytic - numeric| <= atol + rtol * |numeric|``.
            Defaults for order 1: ``1e-5`` if every floating output of ``f`` is float64 (the
            usual case), ``1e-2`` if one is float32 (``f`` computes in float32 whatever its
            inputs), ``1e-1`` for float16; order ``k`` multiplies the defaults by
            ``10**(k - 1)``. Values given here apply to every order.
        eps: the central-difference step: by default ``1e-6`` for float64 outputs, ``1e-3``
            for float32, ``2**-5`` for float16.
        seed: the seed of the random cotangents and directions (the check is deterministic).

    Method: for each order and each checked input ``i``, the scalar ``<u, J_i v>`` (``u`` a
    random cotangent of the outputs, ``v`` a random direction in input ``i``, entries of random
    sign and magnitude in [1, 2], drawn from ``seed``) is computed from one VJP and by a central
    difference of ``<u, f(x + eps v)>``: one VJP and two evaluations of ``f`` per input instead
    of a full Jacobian. A single Jacobian element wrong by more than ``atol`` always shows in
    that scalar. Only where the two disagree are both full Jacobians built (one VJP per output
    element, two evaluations per input element), and the check fails if one of their elements
    is outside the tolerance (which is then the authority).

    Returns:
        None.

    Raises:
        AssertionError: on a mismatch; the message names the order, the input's index in
            ``args``, the worst element's index in that input and in the output, the analytic
            and numeric values and the tolerance.
        TypeError: if ``args`` is not a list or tuple, an argument is complex, or ``f`` returns
            something other than Tensors. ``ValueError`` if ``order`` is not an int >= 1.
        Errors raised by ``f`` or by a gradient function (e.g. ``GradientShapeError``,
        ``NotDifferentiableError`` when an op's gradient is not differentiable again) propagate.
    """
    fname = f"check_gradients({getattr(f, '__qualname__', None) or repr(f)})"
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"{fname}: `args` must be a list or tuple of the arguments of `f`, not a "
                        f"{type(args).__name__}; write check_gradients(f, [x])")
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"{fname}: order must be an int >= 1, got {order!r}")

    positions, xs = [], []
    for p, a in enumerate(args):
        if isinstance(a, _SCALARS) or a is None or isinstance(a, np.generic):
            continue
        dtype = getattr(a, "dtype", None)
        if dtype is None or not hasattr(a, "shape"):
            continue
        _reject_complex(dtype, f"argument {p}", fname)
        if _backend.is_floating(dtype):
            positions.append(p)
            xs.append(np.asarray(_as_numpy(a), dtype=np.float64).copy())
    if not xs:
        return None  # nothing differentiable to check
    base = list(args)

    def call(xt):
        a = list(base)
        for p, t in zip(positions, xt):
            a[p] = t
        return _outputs(f(*a), fname)

    def fn(xt):
        return [y for y in call(xt) if _is_float(y)]

    ys = call([Tensor(x) for x in xs])
    out_index = [k for k, y in enumerate(ys) if _is_float(y)]  # f's floating outputs
    if not out_index:
        return None  # nothing differentiable to check
    itemsize = min(ys[k].dtype.itemsize for k in out_index)
    d_step, d_atol, d_rtol = _DEFAULTS.get(itemsize, _DEFAULTS[8])
    step = d_step if eps is None else eps
    rng = np.random.default_rng(seed)
    g = fn
    for k in range(1, order + 1):
        scale = 10.0 ** (k - 1)
        a_tol = d_atol * scale if atol is None else atol
        r_tol = d_rtol * scale if rtol is None else rtol
        for i, analytic, numeric in _projected_failures(g, xs, rng, step, a_tol, r_tol):
            _diagnose(g, xs, i, step, a_tol, r_tol, k, analytic, numeric, fname,
                      positions, out_index, [y.shape for y in g([Tensor(x) for x in xs])])
        if k < order:
            g = _vjp_function(g, xs, rng)
    return None


def _diagnose(fn, xs, i, step, atol, rtol, k, p_analytic, p_numeric, fname, positions,
              out_index, out_shapes):
    """Build both full Jacobians w.r.t. input ``i``; raise ``AssertionError`` at the worst one."""
    ja = _vjp_jacobians(fn, xs)[i]
    jn = _fd_jacobian(fn, xs, i, step)
    if ja.size == 0:
        return
    excess = np.abs(ja - jn) - (atol + rtol * np.abs(jn))
    excess = np.where(np.isnan(excess), np.inf, excess)
    if not np.max(excess) > 0:
        return  # the projection's disagreement is within the elementwise tolerance
    row, col = (int(t) for t in np.unravel_index(int(np.argmax(excess)), ja.shape))
    analytic, numeric = float(ja[row, col]), float(jn[row, col])
    o, r = 0, row  # locate the row in the concatenated outputs
    while r >= int(np.prod(out_shapes[o])):
        r -= int(np.prod(out_shapes[o]))
        o += 1
    out_elem = tuple(int(t) for t in np.unravel_index(r, out_shapes[o]))
    in_elem = tuple(int(t) for t in np.unravel_index(col, xs[i].shape))
    p = positions[i]
    if k == 1:
        what = "gradient"
        out_label = f"output {out_index[o]}" if len(out_index) > 1 else "the output"
    else:
        what = f"{_ORDINAL.get(k, f'order-{k}')}-order gradient"
        out_label = (f"the order-{k - 1} gradient with respect to input {positions[o]} "
                     "(projected on a random output cotangent)")
    tol = atol + rtol * abs(numeric)
    raise AssertionError(
        f"{fname}: the {what} with respect to input {p} (shape {xs[i].shape}) does not match "
        f"central differences.\n"
        f"  worst element: input {p} at index {in_elem}, {out_label} at index {out_elem}\n"
        f"  analytic = {analytic:.10g}, numeric = {numeric:.10g}, "
        f"|difference| = {abs(analytic - numeric):.3g} > tolerance = {tol:.3g} "
        f"(atol={atol:g} + rtol={rtol:g} * |numeric|)\n"
        f"  projected check <u, J v>: analytic = {p_analytic:.8g}, numeric = {p_numeric:.8g}; "
        f"step eps={step:g}, computed in float64")
