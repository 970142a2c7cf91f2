"""The forward-mode check of ``check_gradients(..., modes=("fwd",))``: JVPs against central
differences and against the VJP, to first and second order."""
from __future__ import annotations

import numpy as np

from .._tape import GradientTape
from ..forward import ForwardAccumulator
from ._arguments import to_tensor
from ._finite_differences import _real_view, replace, shifted
from ._projected import directions, directions_for, excess, real_dot

_ZERO = "zero"


def _jvp(fn, xs, i, v, order):
    """``J v`` (order 1) or the JVP of ``x -> J(x) v`` along ``v`` (order 2) of ``fn``'s
    flattened outputs at ``xs``, along ``v`` in input ``i``, in float64."""
    xt = [to_tensor(x) for x in xs]
    vt = to_tensor(v.astype(xs[i].dtype))
    with ForwardAccumulator(xt[i], vt) as outer:
        with ForwardAccumulator(xt[i], vt) as inner:
            ys = fn(xt)
        first = inner.jvp(ys, unconnected_gradients=_ZERO)
    ts = first if order == 1 else outer.jvp(first, unconnected_gradients=_ZERO)
    return np.concatenate([_real_view(t.numpy()) for t in ts]) if ts else np.zeros(0)


def _vjp_dot(fn, xs, i, u, v):
    """``<J^T u, v>`` by reverse mode."""
    xt = [to_tensor(x) for x in xs]
    with GradientTape() as tape:
        tape.watch(xt[i])
        ys = fn(xt)
        flat = [y for y in ys]
    gs = tape.gradient(flat, xt[i], output_gradients=_split(u, flat),
                       unconnected_gradients=_ZERO)
    return real_dot(gs.numpy(), v)


def _split(u, ys):
    """The flat real vector ``u`` as cotangents of ``ys`` (a complex output's from pairs)."""
    out, start = [], 0
    for y in ys:
        n = int(np.prod(y.shape))
        if y.dtype.kind == "c":
            piece = u[start:start + 2 * n].reshape(tuple(y.shape) + (2,))
            piece, n = piece[..., 0] + 1j * piece[..., 1], 2 * n
        else:
            piece = u[start:start + n].reshape(y.shape)
        out.append(to_tensor(piece.astype(y.dtype)))
        start += n
    return out


def forward_failures(fn, xs, rng, step, atol, rtol, order, fname, positions) -> list:
    """``[(input number, report text)]`` for the inputs whose JVPs disagree."""
    failures = []
    for i, x in enumerate(xs):
        if x.size == 0:
            continue
        (v,) = directions_for([x], rng)
        jv = _jvp(fn, xs, i, v, 1)
        plus, minus = shifted(fn, xs, i, step * v)
        numeric = (plus - minus) / (2.0 * step)
        bad = excess(jv, numeric, atol, rtol)
        what = None
        if np.any(bad > 0):
            k = int(np.argmax(bad))
            what = (f"the JVP J v does not match central differences at output element {k}: "
                    f"forward mode {jv[k]:.10g}, numeric {numeric[k]:.10g}")
        else:
            (u,) = directions([jv.shape], rng)
            rev = _vjp_dot(fn, xs, i, u, v)
            fwd = float(u @ jv)
            if excess(fwd, rev, atol, rtol) > 0:
                what = (f"forward and reverse mode disagree: <u, J v> = {fwd:.10g} by the JVP "
                        f"but <J^T u, v> = {rev:.10g} by the VJP")
        if what is None and order >= 2:
            step2 = np.sqrt(step)  # a difference of first-order JVPs: a larger step
            second = _jvp(fn, xs, i, v, 2)
            numeric2 = (_jvp(fn, replace(xs, i, x + step2 * v), i, v, 1)
                        - _jvp(fn, replace(xs, i, x - step2 * v), i, v, 1)) / (2.0 * step2)
            bad = excess(second, numeric2, atol * 10, rtol * 10)
            if np.any(bad > 0):
                k = int(np.argmax(bad))
                what = (f"the second-order JVP (nested ForwardAccumulators) does not match "
                        f"central differences of the JVP at output element {k}: forward mode "
                        f"{second[k]:.10g}, numeric {numeric2[k]:.10g}")
        if what is not None:
            failures.append((i, f"{fname}: forward mode, input {positions[i]} (shape "
                                f"{x.shape}), direction v drawn from the seed: {what} "
                                f"(tolerance atol={atol:g} + rtol={rtol:g} * |numeric|)"))
    return failures
