"""The projected check ``<u, J v>`` (one VJP and two evaluations per input) and, where it
fails, the search of the full Jacobians for the worst elements (with kinks flagged)."""
from __future__ import annotations

import numpy as np

from .._tape import GradientTape
from ._arguments import to_tensor
from ._finite_differences import col_shape, fd_jacobian, flat_outputs, shifted, unit, vjp_jacobians

_TABLE_ROWS = 5  # worst elements listed per failing input


def directions(shapes, rng) -> list:
    """Random arrays of ``shapes`` with entries of random sign and magnitude in [1, 2].

    Every product ``u[r] * v[c]`` is at least 1 in magnitude, so one wrong Jacobian element
    moves ``<u, J v>`` by at least its own error (a single bad element is never diluted), and
    the continuous magnitudes make cancellation between several bad elements a coincidence.
    """
    return [rng.choice([-1.0, 1.0], size=s) * rng.uniform(1.0, 2.0, size=s) for s in shapes]


def directions_for(xs, rng) -> list:
    """:func:`directions` in the spaces of the arrays ``xs``: a complex array's direction is
    complex, its real and imaginary parts drawn as :func:`directions` draws."""
    out = []
    for x in xs:
        if np.asarray(x).dtype.kind == "c":
            (d,) = directions([tuple(np.shape(x)) + (2,)], rng)
            out.append(d[..., 0] + 1j * d[..., 1])
        else:
            (d,) = directions([np.shape(x)], rng)
            out.append(d)
    return out


def real_dot(g, v) -> float:
    """``<g, v>`` with complex numbers as (real, imaginary) pairs: ``Re(sum(conj(g) v))``, the
    inner product under which tapegrad's VJP of a complex input is the transpose of its JVP."""
    g, v = np.asarray(g), np.asarray(v)
    if g.dtype.kind == "c" or v.dtype.kind == "c":
        return float(np.sum(g.real * v.real + g.imag * v.imag))
    return float(np.sum(g * v))


def output_cotangents(ys, rng):
    """Random cotangents for outputs ``ys`` and their concatenation as real pairs.

    A complex output ``z`` gets a complex cotangent ``u``; by tapegrad's convention (the
    cotangent of ``z`` is dL/dRe z + i dL/dIm z) the VJP with ``u`` is the gradient of
    ``<u, z>`` taken over real pairs, which is what the flat real vector measures.
    """
    us, flat = [], []
    for y in ys:
        if y.dtype.kind == "c":
            (d,) = directions([tuple(y.shape) + (2,)], rng)
            us.append(to_tensor((d[..., 0] + 1j * d[..., 1]).astype(y.dtype)))
        else:
            (d,) = directions([tuple(y.shape)], rng)
            us.append(to_tensor(d.astype(y.dtype)))
        flat.append(d.reshape(-1))
    return us, np.concatenate(flat) if flat else np.zeros(0)


def projected_failures(fn, xs, rng, step, atol, rtol):
    """``(i, analytic, numeric)`` for each input ``i`` where ``<u, J_i v_i>`` from one VJP and
    from a central difference of ``<u, fn(x + t v_i)>`` disagree (``u``, ``v_i`` random): their
    :func:`excess` is positive (outside the tolerance, or not finite)."""
    xt = [to_tensor(x) for x in xs]
    with GradientTape() as tape:
        tape.watch(xt)
        ys = fn(xt)
    if not ys:
        return []
    us, u = output_cotangents(ys, rng)
    gs = tape.gradient(ys, xt, output_gradients=us)
    failures = []
    for i, x in enumerate(xs):
        if x.size == 0:
            continue
        (v,) = directions_for([x], rng)
        analytic = 0.0 if gs[i] is None else real_dot(gs[i].numpy(), v)
        plus, minus = shifted(fn, xs, i, step * v)
        numeric = float(u @ (plus - minus)) / (2.0 * step)
        if excess(analytic, numeric, atol, rtol) > 0:
            failures.append((i, analytic, numeric))
    return failures


def excess(analytic, numeric, atol, rtol):
    """``|analytic - numeric| - (atol + rtol * |numeric|)`` elementwise: ``> 0`` outside the
    tolerance, which is relative to the numeric value. ``inf`` where either value is NaN or
    infinite: a non-finite derivative never passes (``inf <= atol + rtol * inf`` would)."""
    analytic, numeric = np.asarray(analytic), np.asarray(numeric)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, mapped to inf below
        diff = np.abs(analytic - numeric) - (atol + rtol * np.abs(numeric))
    finite = np.isfinite(analytic) & np.isfinite(numeric) & ~np.isnan(diff)
    return np.where(finite, diff, np.inf)


def _kink(fn, xs, i, col, row, step, analytic, numeric, tol, cache) -> str | None:
    """A note if the one-sided differences of element ``(row, col)`` disagree like at a kink.

    At a kink the forward and backward differences differ by a jump that does not shrink with
    the step; on a smooth function they differ by about ``step * f''``. An element is flagged
    when that difference exceeds the tolerance, is comparable to the reported error, and stays
    when the step is divided by 4.
    """
    if col not in cache:
        x = xs[i]
        base = flat_outputs(fn, xs)
        sides = []
        for h in (step, step / 4.0):
            plus, minus = shifted(fn, xs, i, unit(x, col, h))
            sides.append(((plus - base) / h, (base - minus) / h))
        cache[col] = sides
    (fwd, bwd), (fwd4, bwd4) = cache[col]
    jump, jump4 = abs(fwd[row] - bwd[row]), abs(fwd4[row] - bwd4[row])
    err = abs(analytic - numeric)
    if jump > tol and not jump < 0.5 * err and jump4 >= 0.5 * jump:
        return (f"kink: one-sided differences {fwd[row]:.4g} (right) and {bwd[row]:.4g} (left) "
                "disagree; non-differentiable point, not necessarily a bug")
    return None


def worst_elements(fn, xs, i, step, atol, rtol):
    """Full Jacobians of ``fn`` w.r.t. input ``i``; ``None`` if they agree elementwise, else
    ``(rows, n_bad, size)`` with up to ``_TABLE_ROWS`` worst ``(row, col, analytic, numeric,
    tol, kink note)``, worst first."""
    ja = vjp_jacobians(fn, xs)[i]
    if ja.size == 0:
        return None
    jn = fd_jacobian(fn, xs, i, step)
    flat = excess(ja, jn, atol, rtol).reshape(-1)
    if not np.max(flat) > 0:
        return None  # the projection's disagreement is within the elementwise tolerance
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

