"""``check_gradients``: first and higher orders by projected checks, failures explained."""
from __future__ import annotations

import warnings

import numpy as np

from .._backend import is_floating
from .._tape import GradientTape
from ..ops.creation import zeros_like
from ._arguments import check_tolerances, floating_outputs, prepare, to_tensor
from ._contract import check_records, is_user_op
from ._finite_differences import col_shape, defaults, step_note, traced
from ._forward_mode import forward_failures
from ._projected import output_cotangents, projected_failures, worst_elements
from ._report import SurrogateGradientWarning, locate, promotion_note, row_shape, table, unravel

_ORDINAL = {1: "first", 2: "second", 3: "third"}


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


def _vjp_function(fn, xs, rng):
    """``h(x) = [d<u, fn(x)>/dx_i for each i]`` for a fixed random cotangent ``u``.

    The VJP is computed on an inner tape, so an outer tape differentiates it again; this is
    how every order above the first is checked (as the first order of ``h``).
    """
    ys = fn([to_tensor(x) for x in xs])
    us, _ = output_cotangents(ys, rng)

    def h(xt):
        with GradientTape() as tape:
            tape.watch(xt)
            outs = fn(xt)
        gs = tape.gradient(outs, xt, output_gradients=us) if outs else [None] * len(xt)
        return [zeros_like(x) if g is None else g for g, x in zip(gs, xt)]

    return h


def check_gradients(f, args, order=1, atol=None, rtol=None, eps=None, *, seed=0,
                    modes=("rev",)):
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
            of Tensors. Non-floating outputs (integer, boolean) are ignored (at least one output
            must be floating); each floating output gets its own random cotangent. A complex
            output is checked as (real, imaginary) pairs with a complex cotangent; in reports
            its output index gains a last axis (0: real part, 1: imaginary part).
        args: a list or tuple of the arguments. Tensors, Variables and backend arrays of a
            floating dtype are checked: they are passed to ``f`` as float64 Tensors (float32 and
            float16 values are **promoted to float64** for the check, so the check measures the
            gradient formulas, not the rounding of low precision; a failure report says so),
            complex ones as complex128 Tensors. A complex input is checked as (real,
            imaginary) pairs under tapegrad's convention (TensorFlow's: the gradient of a real
            ``L`` is ``dL/dRe z + i dL/dIm z``), so ``<J^T u, v>`` is ``Re(sum(conj(g) v))``
            for a complex direction ``v``, and in reports its input index gains a last axis
            (0: real part, 1: imaginary part).
            Everything else — Python and NumPy scalars, integer and boolean arrays, shapes,
            ``None`` — is passed unchanged and treated as a constant; at least one argument
            must be floating. Size-0 inputs are passed but have nothing to check; an input that
            ``f`` does not depend on has a zero gradient (``None`` from the tape counts as
            zeros).
        order: the highest order to check (an int >= 1).
        atol, rtol: the tolerance ``|analytic - numeric| <= atol + rtol * |numeric|``,
            relative to the numeric (central-difference) value, never to the analytic one; a
            NaN or infinite value on either side fails. Defaults for order 1: ``1e-5`` if every
            floating output of ``f`` is float64 (the usual case), ``1e-2`` if one is float32
            (``f`` computes in float32 whatever its inputs), ``1e-1`` for float16; order ``k``
            multiplies the defaults by ``10**(k - 1)``. Values given here apply to every order.
        eps: the central-difference step: by default ``1e-6`` for float64 outputs, ``1e-3``
            for float32, ``2**-5`` for float16.
        seed: the seed of the random cotangents and directions (the check is deterministic).
        modes: ``("rev",)`` (the default), ``("fwd",)`` or ``("rev", "fwd")`` (JAX's
            ``check_grads`` names): ``"fwd"`` also checks forward mode: for each input, the JVP
            ``J v`` (a ``ForwardAccumulator``) is compared with central differences of ``f``
            and, projected on a cotangent ``u``, with the VJP: ``<u, J v> == <J^T u, v>``; for
            order 2, the JVP of the JVP map ``x -> J(x) v`` (nested accumulators) against
            central differences of that map.

    Method: for each order and each checked input ``i``, the scalar ``<u, J_i v>`` (``u`` a
    random cotangent of the outputs, ``v`` a random direction in input ``i``, entries of random
    sign and magnitude in [1, 2], drawn from ``seed``) is computed from one VJP and by a central
    difference of ``<u, f(x + eps v)>``: one VJP and two evaluations of ``f`` per input instead
    of a full Jacobian. A single wrong Jacobian element moves that scalar by at least its own
    error, so it shows whenever that error exceeds ``atol + rtol * |<u, J v>|``. Only where
    the two disagree are both full Jacobians built (one VJP per output element, two
    evaluations per input element), and the check fails if one of their elements is outside
    the tolerance (which is then the authority).

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
        TypeError: if ``args`` is not a list or tuple, ``f`` returns something other than
            Tensors, none of the arguments is floating (pass the inputs
            to check as floating arrays, e.g. ``x.astype(np.float64)``) or none of ``f``'s
            outputs is floating (check a floating quantity): there would be nothing to check.
        ValueError: if ``order`` is not an int >= 1, ``atol`` or ``rtol`` is not a finite
            number >= 0, or ``eps`` not a finite number > 0.
        Errors raised by ``f`` or by a gradient function (e.g. ``GradientShapeError``,
        ``NotDifferentiableError`` when an op's gradient is not differentiable again) propagate,
        unless a custom gradient's own check failed (then they are quoted in the message).
    """
    fname, positions, xs, promoted, call = prepare("check_gradients", f, args)
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"{fname}: order must be an int >= 1, got {order!r}")
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if not modes or set(modes) - {"rev", "fwd"}:
        raise ValueError(f"{fname}: modes must name 'rev' and/or 'fwd', got {modes!r}")
    check_tolerances(fname, atol=atol, rtol=rtol, eps=eps)

    def fn(xt):
        return [y for y in call(xt) if is_floating(y.dtype)]

    tape, xt, ys = traced(call, xs)
    ops = tape.operations
    out_index = floating_outputs(ys, fname)
    records = [op for op in ops if is_user_op(op)]
    report = None
    if records:
        report = check_records(records, tape.traced_ids, f"custom gradients met by {fname}",
                               seed, atol, rtol, eps)
    through = _surrogate_paths(ops, xt)
    del tape, ops, records

    itemsize = min(ys[k].dtype.itemsize for k in out_index)
    step, d_atol, d_rtol = defaults(itemsize, eps)
    rng = np.random.default_rng(seed)
    failed, excused, excused_inputs, error = [], [], set(), None
    if "fwd" in modes:
        failed += forward_failures(fn, xs, rng, step, d_atol if atol is None else atol,
                                   d_rtol if rtol is None else rtol, min(order, 2), fname,
                                   positions)
    rev_orders = order if "rev" in modes and not failed else 0
    try:
        g = fn
        for k in range(1, rev_orders + 1):
            scale = 10.0 ** (k - 1)
            a_tol = d_atol * scale if atol is None else atol
            r_tol = d_rtol * scale if rtol is None else rtol
            out_shapes = None
            for i, analytic, numeric in projected_failures(g, xs, rng, step, a_tol, r_tol):
                if out_shapes is None:
                    out_shapes = [row_shape(y) for y in g([to_tensor(x) for x in xs])]
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

    notes = [*promotion_note(promoted), step_note(step, eps, itemsize)]
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
    found = worst_elements(fn, xs, i, step, atol, rtol)
    if found is None:
        return None
    rows, n_bad, size = found
    row, col, analytic, numeric, tol, _ = rows[0]
    o, out_elem = locate(row, out_shapes)
    in_elem = unravel(col, col_shape(xs[i]))
    p = positions[i]
    if k == 1:
        what = "gradient"
        out_label = f"output {out_index[o]}" if len(out_index) > 1 else "the output"
    else:
        what = f"{_ORDINAL.get(k, f'order-{k}')}-order gradient"
        out_label = (f"the order-{k - 1} gradient with respect to input {positions[o]} "
                     "(projected on a random output cotangent)")

    def out_cell(r):
        q, elem = locate(r, out_shapes)
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
    if not np.isfinite(analytic) or not np.isfinite(numeric):
        lines.insert(3, "  a NaN or infinite value never passes: the function or its gradient "
                        "overflows or leaves its domain at these inputs or within eps of them")
    lines += table(rows, n_bad, size, col_shape(xs[i]), out_cell)
    return "\n".join(lines)
