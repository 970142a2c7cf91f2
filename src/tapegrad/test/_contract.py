"""The contract of custom gradients (``custom_gradient`` calls and user-registered ops):
:func:`check_custom_gradient` and the check of one recorded op."""
from __future__ import annotations

import inspect

import numpy as np

from .._backend import is_floating, np_dtype
from ..errors import GradientCountError, GradientShapeError, GradientTypeError
from ..ops.creation import zeros_like
from ._arguments import check_tolerances, floating_outputs, prepare, to_tensor
from ._finite_differences import defaults, traced
from ._projected import directions, projected_failures, worst_elements
from ._report import CustomGradientReport, OpCheck, locate, promotion_note, row_shape, unravel

_LINEARITY_RTOL = {8: 1e-8, 4: 1e-4, 2: 1e-2}  # by the gradient's itemsize (rounding only)
_BUILTIN = {}  # id(forward function) -> bool: declared inside the tapegrad package


def _module_of(fn) -> str:
    try:
        fn = inspect.unwrap(fn)
    except ValueError:
        pass
    return getattr(fn, "__module__", "") or ""


def _is_builtin_module(module) -> bool:
    return module == "tapegrad" or module.startswith("tapegrad.")


def is_user_op(op) -> bool:
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


def _check_op(number, op, traced_ids, rng, atol, rtol, eps) -> OpCheck:
    """Check one record ``op``; ``traced_ids``: the ids the tape traced (inputs depending on ``f``'s
    floating arguments). The other inputs are constants, as they are to the tape."""
    check = OpCheck(number, op.type, op.gradient_source, op.surrogate)
    if op.gradient_function is None:
        check.problems.append(f"no gradient is registered for op type {op.type!r}")
        return check
    n_replay = len(op.inputs) - len(op.variables)
    ids = op.input_ids
    pos = [k for k in range(n_replay) if ids[k] is not None and ids[k] in traced_ids]
    if any(op.inputs[k].dtype.kind == "c" for k in pos) or any(
            np_dtype(d).kind == "c" for d in op.output_dtypes):
        check.notes.append("not checked on its own: it has complex inputs or outputs (the "
                           "contract check takes real ones; the whole function's check covers "
                           "it)")
        return check
    xs = [np.array(op.inputs[k].numpy(), dtype=np.float64) for k in pos]
    forward = op.forward

    def run(xt):
        full = list(op.inputs)
        for k, t in zip(pos, xt):
            full[k] = t
        out = forward(*full)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def fn(xt):
        return [y for y in run(xt) if is_floating(y.dtype)]

    # a fresh record of the op on float64 copies of its floating inputs
    tape, xt, _ = traced(run, xs)
    recs = [o for o in tape.operations if o.type == op.type]
    if not recs:
        check.notes.append("not checked: no floating input of the op could be traced")
        return check
    rec = recs[-1]
    names = [f"input {k} ({name!r})" for k, name in enumerate(rec.param_names)]
    if rec.variables:
        check.notes.append("the gradients of the Variables its forward reads are checked for "
                           "shape and linearity only")
    if _fits_and_is_linear(check, rec, {t.id for t in xt}, names, rng):
        _check_derivative(check, fn, xs, [names[k] for k in pos], rng, atol, rtol, eps)
    if check.surrogate and not check.differs and not check.problems:
        check.notes.append("declared surrogate, yet it agrees with the derivative here")
    return check


def _fits_and_is_linear(check, rec, fresh, names, rng) -> bool:
    """Steps 1 and 2 on the fresh record ``rec`` (inputs with ids in ``fresh`` and the Variables
    it reads are wanted); ``False`` if step 1 failed (then step 3 is skipped)."""
    # 1. one gradient per input, each of its input's shape and dtype
    shapes = [tuple(o.shape) for o in rec.outputs]
    dys = [directions(shapes, rng) for _ in range(2)]
    a, b = (float(s * m) for s, m in zip(rng.choice([-1.0, 1.0], 2), rng.uniform(0.5, 2.0, 2)))
    dys.append([a * d1 + b * d2 for d1, d2 in zip(*dys)])

    def cotangents(ds):
        return [to_tensor(d.astype(np_dtype(o.dtype))) if is_floating(o.dtype) else zeros_like(o)
                for d, o in zip(ds, rec.outputs)]

    n_args = len(rec.inputs) - len(rec.variables)
    needed = [k for k, i in enumerate(rec.input_ids) if i in fresh or k >= n_args]
    try:
        g1, g2, g12 = ([None if g is None else g.numpy() for g in rec.gradient(
            *cotangents(ds), needed=needed)] for ds in dys)
    except (GradientCountError, GradientShapeError, GradientTypeError) as exc:
        check.problems.append(f"its gradients do not fit its inputs: {type(exc).__name__}: "
                              f"{exc}")
        return False
    except Exception as exc:  # noqa: BLE001 - reported, with its type
        check.problems.append(f"its gradient function raised {type(exc).__name__}: {exc}")
        return False
    bad = [names[k] for k, gs in enumerate(zip(g1, g2, g12))
           if not all(g is None or np.all(np.isfinite(g)) for g in gs)]
    if bad:
        check.problems.append(f"returned non-finite values (nan or inf) for {', '.join(bad)}")
        return False

    # 2. linearity in the upstream gradient
    for k, gs in enumerate(zip(g1, g2, g12)):
        msg = _nonlinearity(gs, a, b, names[k])
        if msg is None:
            continue
        if check.surrogate:
            check.differs = True
            check.notes.append("warning: " + msg + "; reported only, as declared surrogate")
        else:
            check.problems.append(msg)
        break
    return True


def _nonlinearity(gs, a, b, name):
    """Why ``gs = (g(dy1), g(dy2), g(a*dy1 + b*dy2))`` (NumPy arrays or ``None``: zeros) is not
    linear, or ``None`` if it is (up to rounding)."""
    if all(g is None for g in gs):
        return None
    given = next(g for g in gs if g is not None)
    u, v, w = (np.zeros(np.shape(given)) if g is None else np.asarray(g, dtype=np.float64)
               for g in gs)
    expect = a * u + b * v
    err = np.abs(w - expect)
    scale = np.abs(a * u) + np.abs(b * v) + np.abs(w)
    tol = _LINEARITY_RTOL.get(given.dtype.itemsize, 1e-8) * (
        scale + (scale.max() if scale.size else 0))
    if np.all(err <= tol):  # the values are finite (checked before)
        return None
    e = int(np.argmax(err - tol))
    return (f"not linear in the upstream gradient dy: g(a*dy1 + b*dy2) != a*g(dy1) + "
            f"b*g(dy2) for {name} (a={a:.6g}, b={b:.6g}; at index "
            f"{unravel(e, err.shape)}: {w.reshape(-1)[e]:.8g} vs "
            f"{expect.reshape(-1)[e]:.8g}). A gradient must be a vector-Jacobian "
            "product: every term is scaled by dy (a term without dy, like "
            "`+ 0.1 * x`, is not part of a gradient)")


def _check_derivative(check, fn, xs, names, rng, atol, rtol, eps):
    """Step 3: the gradients of the replayed forward ``fn`` at the float64 inputs ``xs``
    (named ``names``) against its central differences."""
    outs = fn([to_tensor(x) for x in xs])
    out_shapes = [row_shape(y) for y in outs]
    itemsize = min((y.dtype.itemsize for y in outs), default=8)
    step, d_atol, d_rtol = defaults(itemsize, eps)
    a_tol = d_atol if atol is None else atol
    r_tol = d_rtol if rtol is None else rtol
    for i, _, _ in projected_failures(fn, xs, rng, step, a_tol, r_tol):
        found = worst_elements(fn, xs, i, step, a_tol, r_tol)
        if found is None:
            continue
        (row, col, ga, gn, tol, kink), n_bad, size = found[0][0], found[1], found[2]
        o, elem = locate(row, out_shapes)
        out = f"output {o} at index {elem}" if len(out_shapes) > 1 else f"output index {elem}"
        where = (f"{names[i]} at index {unravel(col, xs[i].shape)}, {out}: gradient "
                 f"{ga:.8g}, derivative (central difference) {gn:.8g}")
        ratio = f"; gradient / derivative = {ga / gn:.4g}" if gn and np.isfinite(ga) else ""
        if check.surrogate:
            check.differs = True
            check.notes.append(f"surrogate gradient of {check.op_type}: differs from the "
                               f"derivative by {abs(ga - gn):.3g} ({where}), as declared")
            break
        check.problems.append(
            f"does not match central differences of its forward: {n_bad} of {size} Jacobian "
            f"elements of {names[i]} are outside the tolerance; worst: {where}, "
            f"|difference| = {abs(ga - gn):.3g} > tolerance = {tol:.3g}{ratio}"
            + (f" ({kink})" if kink else ""))


def check_records(records, traced_ids, title, seed, atol, rtol, eps,
                  notes=()) -> CustomGradientReport:
    """The report of :func:`_check_op` on each record (``OperationView``) in ``records``; op
    ``n`` draws from ``default_rng([seed, n])``."""
    checks = [_check_op(n, op, traced_ids, np.random.default_rng([seed, n]), atol, rtol, eps)
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
        TypeError: as :func:`check_gradients` for bad ``args`` or results of ``f``, including
            when none of the arguments or none of ``f``'s outputs is floating.
        ValueError: as :func:`check_gradients` for ``atol``, ``rtol`` and ``eps``.
    """
    fname, _, xs, promoted, call = prepare("check_custom_gradient", f, args)
    check_tolerances(fname, atol=atol, rtol=rtol, eps=eps)
    tape, _, ys = traced(call, xs)
    floating_outputs(ys, fname)
    records = [op for op in tape.operations if is_user_op(op)]
    report = check_records(records, tape.traced_ids, fname, seed, atol, rtol, eps,
                           promotion_note(promoted))
    if report.failed:
        raise AssertionError(str(report))
    return report
