"""Gradient checking: compare tape gradients with central finite differences.

* :func:`compute_gradient` — TensorFlow 2's ``tf.test.compute_gradient``: the full theoretical
  (reverse-mode) and numerical (central-difference) Jacobians, in TensorFlow 2's layout.
* :func:`compute_gradient_error` — the largest absolute difference between the two (the
  TensorFlow 1 helper of that name, for code written against it).
* :func:`check_gradients` — the checker to use in tests: first, second (or higher) order, in
  float64, fast (one random projection per input and order), with an ``AssertionError`` that
  explains itself on failure: the worst Jacobian elements in a table, kinks flagged, the
  promotion to float64 and the step said, and any custom gradient at fault named.
* :func:`check_custom_gradient` — the contract of each ``custom_gradient`` call and
  user-registered op that a function runs: one gradient per input of the right shape and
  dtype, linear in the upstream gradient, equal to the derivative of the op's forward (unless
  declared ``surrogate=True``, then reported only). ``check_gradients`` runs it too.

The checks run on NumPy copies of the inputs (values of other backends are converted with
``Tensor.numpy()``). Complex inputs are not supported yet.
"""
from __future__ import annotations

import inspect
import warnings

import numpy as np

from .. import _backend
from .._tape import GradientTape
from .._tensor import Tensor
from ..errors import GradientCountError, GradientShapeError, GradientTypeError
from ..ops.creation import zeros_like


__all__ = ["compute_gradient", "compute_gradient_error", "check_gradients",
           "check_custom_gradient", "CustomGradientReport", "OpCheck",
           "SurrogateGradientWarning"]

_SCALARS = (bool, int, float, complex)

# Defaults by the itemsize of the least precise floating output: (central-difference step,
# atol, rtol) for a first-order check; order k multiplies atol and rtol by 10**(k - 1).
_DEFAULTS = {8: (1e-6, 1e-5, 1e-5), 4: (1e-3, 1e-2, 1e-2), 2: (2.0 ** -5, 1e-1, 1e-1)}

_ORDINAL = {1: "first", 2: "second", 3: "third"}


def _tensor(a):
    """A NumPy array as a Tensor on the default backend (the checks then run there)."""
    return Tensor(_backend.asarray(a))


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
    ys = fn([_tensor(x) for x in xs])
    if not ys:
        return np.zeros(0)
    return np.concatenate([_real_view(y.numpy()) for y in ys])


def _real_view(a) -> np.ndarray:
    """``a`` flattened to float64; a complex element becomes the pair (real, imaginary)."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        a = np.stack([a.real, a.imag], axis=-1)
    return a.astype(np.float64).reshape(-1)


def _output_cotangents(ys, rng):
    """Random cotangents for outputs ``ys`` and their concatenation as real pairs.

    A complex output ``z`` gets a complex cotangent ``u``; by tapegrad's convention (the
    cotangent of ``z`` is dL/dRe z + i dL/dIm z) the VJP with ``u`` is the gradient of
    ``<u, z>`` taken over real pairs, which is what the flat real vector measures.
    """
    us, flat = [], []
    for y in ys:
        if y.dtype.kind == "c":
            (d,) = _directions([tuple(y.shape) + (2,)], rng)
            us.append(_tensor((d[..., 0] + 1j * d[..., 1]).astype(y.dtype)))
        else:
            (d,) = _directions([tuple(y.shape)], rng)
            us.append(_tensor(d.astype(y.dtype)))
        flat.append(d.reshape(-1))
    return us, np.concatenate(flat) if flat else np.zeros(0)


def _vjp_jacobians(fn, xs) -> list:
    """Reverse-mode Jacobians of ``fn``'s (concatenated) outputs, one VJP per output element.

    Returns one float64 array of shape ``(total output size, xs[i].size)`` per input.
    """
    xt = [_tensor(x) for x in xs]
    with GradientTape(persistent=True) as tape:
        tape.watch(xt)
        ys = fn(xt)
    parts = [(1.0, 1j) if y.dtype.kind == "c" else (1.0,) for y in ys]  # rows per element
    total = sum(y.size * len(p) for y, p in zip(ys, parts))
    jac = [np.zeros((total, x.size)) for x in xs]
    row = 0
    for y, unit in zip(ys, parts):
        yv = y.numpy()
        for j in range(y.size):
            for c in unit:
                onehot = np.zeros(y.size, dtype=yv.dtype)
                onehot[j] = c
                gs = tape.gradient(y, xt, output_gradients=_tensor(onehot.reshape(yv.shape)))
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

    y = fn([_tensor(a) for a in xs])[0]
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


# --- shared by check_gradients and check_custom_gradient --------------------------------------
class SurrogateGradientWarning(UserWarning):
    """A gradient declared ``surrogate=True`` differs from the derivative (reported, not failed)."""


_TABLE_ROWS = 5  # worst elements listed per failing input
_LINEARITY_RTOL = {8: 1e-8, 4: 1e-4, 2: 1e-2}  # by the gradient's itemsize (rounding only)
_BUILTIN = {}  # id(OpDef) -> bool: declared inside the tapegrad package


def _float_args(args, fname):
    """``(positions, float64 copies, {position: original dtype name if promoted})``."""
    positions, xs, promoted = [], [], {}
    for p, a in enumerate(args):
        if isinstance(a, _SCALARS) or a is None or isinstance(a, np.generic):
            continue
        dtype = getattr(a, "dtype", None)
        if dtype is None or not hasattr(a, "shape"):
            continue
        _reject_complex(dtype, f"argument {p}", fname)
        if _backend.is_floating(dtype):
            arr = np.asarray(_as_numpy(a))
            if arr.dtype != np.float64:
                promoted[p] = arr.dtype.name
            positions.append(p)
            xs.append(np.array(arr, dtype=np.float64))  # a copy
    return positions, xs, promoted


def _promotion_note(promoted) -> list:
    by_dtype = {}
    for p, name in promoted.items():
        by_dtype.setdefault(name, []).append(str(p))
    return [f"{name} inputs were promoted to float64 for this check "
            f"(input{'s' if len(ps) > 1 else ''} {', '.join(ps)})"
            for name, ps in by_dtype.items()]


def _defaults(itemsize, eps):
    d_step, d_atol, d_rtol = _DEFAULTS.get(itemsize, _DEFAULTS[8])
    return (d_step if eps is None else eps), d_atol, d_rtol


def _step_note(step, eps, itemsize) -> str:
    if eps is not None:
        return f"finite-difference step eps={step:g} (given)"
    name = {8: "float64", 4: "float32", 2: "float16"}.get(itemsize, "float64")
    return (f"finite-difference step eps={step:g}, chosen for {name} results (float64: 1e-06, "
            "float32: 0.001, float16: 0.03125)")


def _excess(ja, jn, atol, rtol):
    excess = np.abs(ja - jn) - (atol + rtol * np.abs(jn))
    return np.where(np.isnan(excess), np.inf, excess)


def _kink(fn, xs, i, col, row, step, analytic, numeric, tol, cache) -> str | None:
    """A note if the one-sided differences of element ``(row, col)`` disagree like at a kink.

    At a kink the forward and backward differences differ by a jump that does not shrink with
    the step; on a smooth function they differ by about ``step * f''``. An element is flagged
    when that difference exceeds the tolerance, is comparable to the reported error, and stays
    when the step is divided by 4.
    """
    if col not in cache:
        x = xs[i]
        base = _flat_outputs(fn, xs)
        sides = []
        for h in (step, step / 4.0):
            d = np.zeros(x.size)
            d[col] = h
            d = d.reshape(x.shape)
            plus = _flat_outputs(fn, _replace(xs, i, x + d))
            minus = _flat_outputs(fn, _replace(xs, i, x - d))
            sides.append(((plus - base) / h, (base - minus) / h))
        cache[col] = sides
    (fwd, bwd), (fwd4, bwd4) = cache[col]
    jump, jump4 = abs(fwd[row] - bwd[row]), abs(fwd4[row] - bwd4[row])
    err = abs(analytic - numeric)
    if jump > tol and not jump < 0.5 * err and jump4 >= 0.5 * jump:
        return (f"kink: one-sided differences {fwd[row]:.4g} (right) and {bwd[row]:.4g} (left) "
                "disagree; non-differentiable point, not necessarily a bug")
    return None


def _worst_elements(fn, xs, i, step, atol, rtol):
    """Full Jacobians of ``fn`` w.r.t. input ``i``; ``None`` if they agree elementwise, else
    ``(rows, n_bad, size)`` with up to ``_TABLE_ROWS`` worst ``(row, col, analytic, numeric,
    tol, kink note)``, worst first."""
    ja = _vjp_jacobians(fn, xs)[i]
    if ja.size == 0:
        return None
    jn = _fd_jacobian(fn, xs, i, step)
    excess = _excess(ja, jn, atol, rtol)
    if not np.max(excess) > 0:
        return None  # the projection's disagreement is within the elementwise tolerance
    flat = excess.reshape(-1)
    order = np.argsort(-flat, kind="stable")[:_TABLE_ROWS]
    rows, cache = [], {}
    for e in order:
        if not flat[e] > 0:
            break
        row, col = (int(t) for t in np.unravel_index(int(e), ja.shape))
        a, n = float(ja[row, col]), float(jn[row, col])
        tol = atol + rtol * abs(n)
        rows.append((row, col, a, n, tol, _kink(fn, xs, i, col, row, step, a, n, tol, cache)))
    return rows, int(np.count_nonzero(flat > 0)), ja.size


def _unravel(index, shape) -> tuple:
    return tuple(int(t) for t in np.unravel_index(index, shape))


def _row_shape(y) -> tuple:
    """The shape of an output's Jacobian rows: a complex output adds an axis (real, imag)."""
    return tuple(y.shape) + ((2,) if y.dtype.kind == "c" else ())


def _locate(row, out_shapes):
    """``(output number, element index)`` of ``row`` in the concatenated flat outputs."""
    o, r = 0, row
    while r >= int(np.prod(out_shapes[o])):
        r -= int(np.prod(out_shapes[o]))
        o += 1
    return o, _unravel(r, out_shapes[o])


def _rel(a, n) -> float:
    d = abs(a - n)
    if n != 0:
        return d / abs(n)
    return 0.0 if d == 0 else float("inf")


def _table(rows, n_bad, size, x_shape, out_cell) -> list:
    worst = f"; the worst {len(rows)}" if n_bad > len(rows) else ""
    lines = [f"  {n_bad} of {size} Jacobian elements outside the tolerance{worst}:",
             f"    {'input index':<14} {'output index':<18} {'analytic':>15} {'numeric':>15} "
             f"{'abs err':>10} {'rel err':>10}"]
    for row, col, a, n, tol, kink in rows:
        line = (f"    {str(_unravel(col, x_shape)):<14} {out_cell(row):<18} {a:>15.8g} "
                f"{n:>15.8g} {abs(a - n):>10.3g} {_rel(a, n):>10.3g}")
        lines.append(line + (f"   <- {kink}" if kink else ""))
    return lines


# --- check_custom_gradient -------------------------------------------------------------------
def _module_of(fn) -> str:
    try:
        fn = inspect.unwrap(fn)
    except ValueError:
        pass
    return getattr(fn, "__module__", "") or ""


def _is_builtin_module(module) -> bool:
    return module == "tapegrad" or module.startswith("tapegrad.")


def _is_user_op(op) -> bool:
    """A ``custom_gradient`` call or an op type declared outside tapegrad (not overridden);
    ``op`` is an ``OperationView``."""
    if op.is_overridden:
        return False
    if op.is_custom:
        return not _is_builtin_module(_module_of(op.gradient_function))
    forward = op.forward_function
    if forward is None:
        return False  # e.g. the record of a gradient computed on raw arrays
    known = _BUILTIN.get(id(forward))
    if known is None:
        known = _BUILTIN[id(forward)] = _is_builtin_module(_module_of(forward))
    return not known and op.differentiable


def _surrogate_paths(ops, xt) -> dict:
    """``{input number: [surrogate op types on a path from that input]}``."""
    if not any(op.surrogate for op in ops):
        return {}
    paths = {}
    for i, t in enumerate(xt):
        reach, names = {t.id}, []
        for op in ops:
            if not reach.isdisjoint(op.input_ids):
                reach.update(op.floating_output_ids)
                if op.surrogate and op.type not in names:
                    names.append(op.type)
        if names:
            paths[i] = names
    return paths


class OpCheck:
    """The contract check of one recorded op: ``status`` is ``"passed"``, ``"surrogate"``
    (a declared surrogate that differs from the derivative: reported, not failed) or
    ``"failed"``; ``problems`` (why it failed), ``notes`` (what was reported)."""

    def __init__(self, number, op_type, where, surrogate):
        self.number, self.op_type, self.where = number, op_type, where
        self.surrogate = surrogate
        self.problems, self.notes = [], []
        self.differs = False  # a declared surrogate that differs from a true gradient

    @property
    def status(self) -> str:
        if self.problems:
            return "failed"
        if self.differs:
            return "surrogate"
        return "passed"

    def lines(self) -> list:
        head = {"failed": "FAILED", "surrogate": "surrogate", "passed": "passed"}[self.status]
        text = [f"  {head:<9} op {self.number}: {self.op_type}"
                + (f", gradient {self.where}" if self.where else "")
                + (" (declared surrogate=True)" if self.surrogate else "")]
        text += [f"      - {p}" for p in self.problems]
        text += [f"      - {n}" for n in self.notes]
        return text


class CustomGradientReport:
    """What :func:`check_custom_gradient` found: ``ops`` (one :class:`OpCheck` per recorded
    custom op, in execution order), ``failed`` and ``surrogates`` (subsets of ``ops``),
    ``seed``. ``str(report)`` is the readable report."""

    def __init__(self, title, seed, ops, notes=()):
        self.title, self.seed, self.ops, self.notes = title, seed, list(ops), list(notes)

    @property
    def failed(self) -> list:
        return [c for c in self.ops if c.status == "failed"]

    @property
    def surrogates(self) -> list:
        return [c for c in self.ops if c.status == "surrogate"]

    def __str__(self):
        if not self.ops:
            return (f"{self.title}: no custom_gradient function or user-registered op was "
                    "recorded while running the function (built-in ops are checked by the "
                    "registry tests)")
        lines = [f"{self.title}: {len(self.ops)} custom gradient call(s) checked in float64, "
                 f"seed={self.seed} (op n draws its random values from "
                 f"numpy.random.default_rng([{self.seed}, n]): the same seed replays the check)"]
        lines += [f"  note: {n}" for n in self.notes]
        for c in self.ops:
            lines += c.lines()
        counts = [f"{len(self.failed)} failed"] if self.failed else []
        n_pass = sum(c.status == "passed" for c in self.ops)
        counts += [f"{n_pass} passed"] if n_pass else []
        if self.surrogates:
            counts.append(f"{len(self.surrogates)} declared surrogate (reported, not failed)")
        lines.append("  result: " + ", ".join(counts))
        return "\n".join(lines)

    def __repr__(self):
        return (f"<CustomGradientReport ops={len(self.ops)} failed={len(self.failed)} "
                f"surrogates={len(self.surrogates)}>")


def _check_op(number, op, traced, rng, atol, rtol, eps) -> OpCheck:
    """Check one record ``op``; ``traced``: the ids the tape traced (inputs depending on ``f``'s
    floating arguments). The other inputs are constants, as they are to the tape."""
    op_type = op.type
    fn_grad = op.gradient_function
    check = OpCheck(number, op_type, op.gradient_source, op.surrogate)
    if fn_grad is None:
        check.problems.append(f"no gradient is registered for op type {op_type!r}")
        return check
    n_replay = len(op.inputs) - len(op.variables)
    ids = op.input_ids
    pos = [k for k in range(n_replay) if ids[k] is not None and ids[k] in traced]
    xs = [np.array(op.inputs[k].numpy(), dtype=np.float64) for k in pos]
    forward = op.forward

    def run(xt):
        full = list(op.inputs)
        for k, t in zip(pos, xt):
            full[k] = t
        out = forward(*full)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def fn(xt):
        return [y for y in run(xt) if _is_float(y)]

    # a fresh record of the op on float64 copies of its floating inputs
    xt = [_tensor(x) for x in xs]
    with GradientTape(persistent=True) as tape:
        tape.watch(xt)
        run(xt)
    recs = [o for o in tape.operations if o.type == op_type]
    if not recs:
        check.notes.append("not checked: no floating input of the op could be traced")
        return check
    rec = recs[-1]
    names = [f"input {k} ({name!r})" for k, name in enumerate(rec.param_names)]

    # 1. one gradient per input, each of its input's shape and dtype
    shapes = [tuple(o.shape) for o in rec.outputs]
    dys = [_directions(shapes, rng) for _ in range(2)]
    a, b = (float(s * m) for s, m in zip(rng.choice([-1.0, 1.0], 2), rng.uniform(0.5, 2.0, 2)))
    dys.append([a * d1 + b * d2 for d1, d2 in zip(*dys)])

    def cotangents(ds):
        return [_tensor(d.astype(o.dtype)) if _is_float(o) else zeros_like(o)
                for d, o in zip(ds, rec.outputs)]

    fresh = {t.id for t in xt}
    needed = [k for k, i in enumerate(rec.input_ids) if i in fresh]
    try:
        g1, g2, g12 = ([None if g is None else g.numpy() for g in rec.gradient(
            *cotangents(ds), needed=needed)] for ds in dys)
    except (GradientCountError, GradientShapeError, GradientTypeError) as exc:
        check.problems.append(f"its gradients do not fit its inputs: {type(exc).__name__}: "
                              f"{exc}")
        return check
    except Exception as exc:  # noqa: BLE001 - reported, with its type
        check.problems.append(f"its gradient function raised {type(exc).__name__}: {exc}")
        return check
    bad = [names[k] for k, g in enumerate(g1) if g is not None and not np.all(np.isfinite(g))]
    if bad:
        check.problems.append(f"returned non-finite values (nan or inf) for {', '.join(bad)}")
        return check

    # 2. linearity in the upstream gradient
    for k, (u, v, w) in enumerate(zip(g1, g2, g12)):
        if u is None and v is None and w is None:
            continue
        z = np.zeros(np.shape(next(t for t in (u, v, w) if t is not None)))
        u, v, w = (z if t is None else np.asarray(t, dtype=np.float64) for t in (u, v, w))
        expect = a * u + b * v
        err = np.abs(w - expect)
        scale = np.abs(a * u) + np.abs(b * v) + np.abs(w)
        itemsize = next(t for t in (g1[k], g2[k], g12[k]) if t is not None).dtype.itemsize
        tol = _LINEARITY_RTOL.get(itemsize, 1e-8) * (scale + (scale.max() if scale.size else 0))
        if err.size and np.any(err > tol):
            e = int(np.argmax(err - tol))
            msg = (f"not linear in the upstream gradient dy: g(a*dy1 + b*dy2) != a*g(dy1) + "
                   f"b*g(dy2) for {names[k]} (a={a:.6g}, b={b:.6g}; at index "
                   f"{_unravel(e, err.shape)}: {w.reshape(-1)[e]:.8g} vs "
                   f"{expect.reshape(-1)[e]:.8g}). A gradient must be a vector-Jacobian "
                   "product: every term is scaled by dy (a term without dy, like "
                   "`+ 0.1 * x`, is not part of a gradient)")
            if check.surrogate:
                check.differs = True
                check.notes.append("warning: " + msg + "; reported only, as declared surrogate")
            else:
                check.problems.append(msg)
            break

    # 3. agreement with central differences of the op's own forward
    if len(rec.inputs) > len(pos) and op.variables:
        check.notes.append("the gradients of the Variables its forward reads are checked for "
                           "shape and linearity only")
    outs = fn(xt)
    out_shapes = [_row_shape(y) for y in outs]
    itemsize = min((y.dtype.itemsize for y in outs), default=8)
    step, d_atol, d_rtol = _defaults(itemsize, eps)
    a_tol = d_atol if atol is None else atol
    r_tol = d_rtol if rtol is None else rtol
    for i, _, _ in _projected_failures(fn, xs, rng, step, a_tol, r_tol):
        found = _worst_elements(fn, xs, i, step, a_tol, r_tol)
        if found is None:
            continue
        (row, col, ga, gn, tol, kink), n_bad, size = found[0][0], found[1], found[2]
        o, elem = _locate(row, out_shapes)
        out = f"output {o} at index {elem}" if len(out_shapes) > 1 else f"output index {elem}"
        where = (f"{names[pos[i]]} at index {_unravel(col, xs[i].shape)}, {out}: gradient "
                 f"{ga:.8g}, derivative (central difference) {gn:.8g}")
        ratio = f"; gradient / derivative = {ga / gn:.4g}" if gn and np.isfinite(ga) else ""
        if check.surrogate:
            check.differs = True
            check.notes.append(f"surrogate gradient of {op_type}: differs from the derivative "
                               f"by {abs(ga - gn):.3g} ({where}), as declared")
            break
        check.problems.append(
            f"does not match central differences of its forward: {n_bad} of {size} Jacobian "
            f"elements of {names[pos[i]]} are outside the tolerance; worst: {where}, "
            f"|difference| = {abs(ga - gn):.3g} > tolerance = {tol:.3g}{ratio}"
            + (f" ({kink})" if kink else ""))
    if check.surrogate and not check.differs and not check.problems:
        check.notes.append("declared surrogate, yet it agrees with the derivative here")
    return check


def _check_records(records, traced, title, seed, atol, rtol, eps,
                   notes=()) -> CustomGradientReport:
    checks = [_check_op(n, op, traced, np.random.default_rng([seed, n]), atol, rtol, eps)
              for n, op in enumerate(records)]
    return CustomGradientReport(title, seed, checks, notes)


def check_custom_gradient(f, args, *, atol=None, rtol=None, eps=None, seed=0):
    """Check the contract of every custom gradient that ``f(*args)`` uses.

    Runs ``f`` under a tape (floating arguments as float64 Tensors, as in
    :func:`check_gradients`) and checks each recorded ``custom_gradient`` call and each op type
    registered outside tapegrad (``primitive`` + ``RegisterGradient`` in user code; built-in
    ops are checked by the registry tests) on its own, in float64, at the inputs it received:

    1. the gradient function returns one gradient per input, each with its input's shape and
       dtype (an output-shaped gradient of a broadcast input is accepted, as by the tape);
    2. it is linear in the upstream gradient: ``g(a*dy1 + b*dy2) == a*g(dy1) + b*g(dy2)`` for
       random ``a``, ``b``, ``dy1``, ``dy2`` (up to rounding);
    3. it agrees with central differences of the op's own forward (replayed): ``<u, J v>`` for
       random ``u``, ``v``, then, where that disagrees, elementwise.

    A gradient declared ``surrogate=True`` (``custom_gradient(surrogate=True)``,
    ``RegisterGradient(..., surrogate=True)``) that differs from the derivative or is not
    linear is reported, not failed. Op ``n`` draws its random values from
    ``numpy.random.default_rng([seed, n])``, so a run is replayed by passing the same ``seed``.

    Args:
        f, args: as for :func:`check_gradients`.
        atol, rtol, eps: tolerance and step of the central-difference comparison, as for
            :func:`check_gradients` at order 1 (defaults by the op's output dtype).
        seed: the seed of the random values.

    Returns:
        a :class:`CustomGradientReport` (``str()`` gives the readable report).

    Raises:
        AssertionError: with the report's text, if an op not declared surrogate fails.
        TypeError: as :func:`check_gradients` for bad ``args`` or results of ``f``.
    """
    fname = f"check_custom_gradient({getattr(f, '__qualname__', None) or repr(f)})"
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"{fname}: `args` must be a list or tuple of the arguments of `f`, not a "
                        f"{type(args).__name__}; write check_custom_gradient(f, [x])")
    positions, xs, promoted = _float_args(args, fname)
    call = _caller(f, args, positions, fname)
    xt = [_tensor(x) for x in xs]
    with GradientTape(persistent=True) as tape:
        tape.watch(xt)
        call(xt)
    records = [op for op in tape.operations if _is_user_op(op)]
    report = _check_records(records, tape.traced_ids, fname, seed, atol, rtol, eps,
                            _promotion_note(promoted))
    if report.failed:
        raise AssertionError(str(report))
    return report


# --- check_gradients ---------------------------------------------------------------------------
def _caller(f, args, positions, fname):
    base = list(args)

    def call(xt):
        a = list(base)
        for p, t in zip(positions, xt):
            a[p] = t
        return _outputs(f(*a), fname)

    return call


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
    ys = fn([_tensor(x) for x in xs])
    us, _ = _output_cotangents(ys, rng)

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
    xt = [_tensor(x) for x in xs]
    with GradientTape() as tape:
        tape.watch(xt)
        ys = fn(xt)
    if not ys:
        return []
    us, u = _output_cotangents(ys, rng)
    gs = tape.gradient(ys, xt, output_gradients=us)
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
    that analytic gradient. Every ``custom_gradient`` call and user-registered op that ``f``
    runs is also checked on its own with :func:`check_custom_gradient` (built-in ops are
    skipped: the registry tests check them), so a wrong custom gradient is named.

    Args:
        f: a function of ``*args`` built from tapegrad ops, returning a Tensor or a tuple/list
            of Tensors. Non-floating outputs (integer, boolean) are ignored; each floating output
            gets its own random cotangent. A complex output is checked as (real, imaginary)
            pairs with a complex cotangent; in reports its output index gains a last axis
            (0: real part, 1: imaginary part).
        args: a list or tuple of the arguments. Tensors, Variables and backend arrays of a real
            floating dtype are checked: they are passed to ``f`` as float64 Tensors (float32 and
            float16 values are **promoted to float64** for the check, so the check measures the
            gradient formulas, not the rounding of low precision; a failure report says so).
            Everything else — Python and NumPy scalars, integer and boolean arrays, shapes,
            ``None`` — is passed unchanged and treated as a constant. Size-0 inputs are passed
            but have nothing to check; an input that ``f`` does not depend on has a zero
            gradient (``None`` from the tape counts as zeros).
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

    Surrogate gradients: an input whose gradient passes through a gradient declared
    ``surrogate=True`` is not failed for disagreeing with central differences; the
    disagreement is reported with a :class:`SurrogateGradientWarning` instead.

    Returns:
        None.

    Raises:
        AssertionError: on a mismatch. The message names the order and, per failing input, its
            index in ``args``, the worst element's index in that input and in the output, the
            analytic and numeric values and the tolerance, then a table of the worst elements
            (index, analytic, numeric, absolute and relative error) where elements at which the
            one-sided differences disagree are marked as a kink ("non-differentiable point,
            not necessarily a bug"), the promotion of float32 inputs and the step used, and
            the report of the custom gradients ``f`` uses (see :func:`check_custom_gradient`).
            Also raised, naming the op, when a custom gradient breaks its contract although
            ``f``'s gradients match.
        TypeError: if ``args`` is not a list or tuple, an argument is complex, or ``f`` returns
            something other than Tensors. ``ValueError`` if ``order`` is not an int >= 1.
        Errors raised by ``f`` or by a gradient function (e.g. ``GradientShapeError``,
        ``NotDifferentiableError`` when an op's gradient is not differentiable again) propagate,
        unless a custom gradient's own check failed (then they are quoted in the message).
    """
    fname = f"check_gradients({getattr(f, '__qualname__', None) or repr(f)})"
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"{fname}: `args` must be a list or tuple of the arguments of `f`, not a "
                        f"{type(args).__name__}; write check_gradients(f, [x])")
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"{fname}: order must be an int >= 1, got {order!r}")

    positions, xs, promoted = _float_args(args, fname)
    if not xs:
        return None  # nothing differentiable to check
    call = _caller(f, args, positions, fname)

    def fn(xt):
        return [y for y in call(xt) if _is_float(y)]

    xt = [_tensor(x) for x in xs]
    with GradientTape(persistent=True) as tape:
        tape.watch(xt)
        ys = call(xt)
    ops = tape.operations
    out_index = [k for k, y in enumerate(ys) if _is_float(y)]  # f's floating outputs
    if not out_index:
        return None  # nothing differentiable to check
    records = [op for op in ops if _is_user_op(op)]
    report = None
    if records:
        report = _check_records(records, tape.traced_ids, f"custom gradients met by {fname}",
                                seed, atol, rtol, eps)
    through = _surrogate_paths(ops, xt)
    del tape, ops, records

    itemsize = min(ys[k].dtype.itemsize for k in out_index)
    step, d_atol, d_rtol = _defaults(itemsize, eps)
    rng = np.random.default_rng(seed)
    failed, excused, excused_inputs, error = [], [], set(), None
    try:
        g = fn
        for k in range(1, order + 1):
            scale = 10.0 ** (k - 1)
            a_tol = d_atol * scale if atol is None else atol
            r_tol = d_rtol * scale if rtol is None else rtol
            out_shapes = None
            for i, analytic, numeric in _projected_failures(g, xs, rng, step, a_tol, r_tol):
                if out_shapes is None:
                    out_shapes = [_row_shape(y) for y in g([_tensor(x) for x in xs])]
                text = _diagnose(g, xs, i, step, a_tol, r_tol, k, analytic, numeric, fname,
                                 positions, out_index, out_shapes)
                if text is None or i in excused_inputs:
                    continue
                if i in through:
                    excused_inputs.add(i)
                    excused.append((i, text))
                else:
                    failed.append((i, text))
            if failed:
                break
            if k < order:
                g = _vjp_function(g, xs, rng)
    except Exception as exc:  # noqa: BLE001 - quoted below when a custom gradient is at fault
        if report is None or not report.failed:
            raise
        error = exc

    notes = [*_promotion_note(promoted), _step_note(step, eps, itemsize)]
    excuse = [f"{text}\n  not failed: the gradient with respect to input {positions[i]} "
              f"passes through the declared surrogate gradient(s) {', '.join(through[i])}, "
              "which differ from the derivative by design" for i, text in excused]
    if failed or (report is not None and report.failed):
        parts = [text for _, text in failed]
        if not failed:
            parts.append(f"{fname}: a custom gradient that the function uses breaks the "
                         "gradient contract (its own check is below)"
                         + ("" if error else "; the function's gradients match central "
                                              "differences here"))
            notes = notes[:-1]  # the step of the whole-function check is beside the point
        parts += [f"  note: {n}" for n in notes]
        if failed and report is not None and report.failed:
            names = ", ".join(dict.fromkeys(c.op_type for c in report.failed))
            parts.append(f"  likely cause: the custom gradient of {names}, which fails its own "
                         "check (below)")
        if error is not None:
            parts.append(f"  the gradient check of the whole function raised "
                         f"{type(error).__name__}: {error}")
        parts += excuse
        if report is not None:
            parts.append(str(report))
        raise AssertionError("\n".join(parts)) from error
    if excuse or (report is not None and report.surrogates):
        parts = [f"{fname}: passed, with declared surrogate gradients (reported, not failed)",
                 *excuse, *([str(report)] if report is not None and report.surrogates else [])]
        warnings.warn("\n".join(parts), SurrogateGradientWarning, stacklevel=2)
    return None


def _diagnose(fn, xs, i, step, atol, rtol, k, p_analytic, p_numeric, fname, positions,
              out_index, out_shapes):
    """The report of input ``i``'s full Jacobians, or ``None`` if they agree elementwise."""
    found = _worst_elements(fn, xs, i, step, atol, rtol)
    if found is None:
        return None
    rows, n_bad, size = found
    row, col, analytic, numeric, tol, _ = rows[0]
    o, out_elem = _locate(row, out_shapes)
    in_elem = _unravel(col, xs[i].shape)
    p = positions[i]
    if k == 1:
        what = "gradient"
        out_label = f"output {out_index[o]}" if len(out_index) > 1 else "the output"
    else:
        what = f"{_ORDINAL.get(k, f'order-{k}')}-order gradient"
        out_label = (f"the order-{k - 1} gradient with respect to input {positions[o]} "
                     "(projected on a random output cotangent)")

    def out_cell(r):
        q, elem = _locate(r, out_shapes)
        if k > 1:
            return f"grad {positions[q]} {elem}"
        return f"output {out_index[q]} {elem}" if len(out_index) > 1 else str(elem)

    lines = [
        f"{fname}: the {what} with respect to input {p} (shape {xs[i].shape}) does not match "
        f"central differences.",
        f"  worst element: input {p} at index {in_elem}, {out_label} at index {out_elem}",
        f"  analytic = {analytic:.10g}, numeric = {numeric:.10g}, "
        f"|difference| = {abs(analytic - numeric):.3g} > tolerance = {tol:.3g} "
        f"(atol={atol:g} + rtol={rtol:g} * |numeric|)",
        f"  projected check <u, J v>: analytic = {p_analytic:.8g}, numeric = {p_numeric:.8g}; "
        f"step eps={step:g}, computed in float64",
    ]
    lines += _table(rows, n_bad, size, xs[i].shape, out_cell)
    return "\n".join(lines)
