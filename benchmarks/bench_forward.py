"""Forward mode against reverse mode and hand-written NumPy, in one process.

Run ``python benchmarks/bench_forward.py [--quick]``. Nothing is asserted.

* W4: Hessian-vector product of ``sum(tanh(A x)^2)``, n = 1000, float64: forward over reverse
  (``tg.hvp``: a ForwardAccumulator around a GradientTape), reverse over reverse (two nested
  tapes) and reverse over forward (a GradientTape around a ForwardAccumulator), against
  tapegrad's own gradient and a hand-written NumPy HVP. Forward over reverse also computes
  the gradient itself (its primal), so it does four matrix-vector products to the gradient's
  two; reverse over forward does three (``A v`` does not depend on ``x``), as NumPy does.
  With JAX installed, the gradient and the forward-over-reverse HVP are also timed compiled
  (``tg.function``), where XLA drops the unused gradient: three products to two.
* W1 JVP: the 200-op chain of ``bench_overhead.py`` in forward mode (one ForwardAccumulator),
  per-op overhead over the NumPy forward, against the reverse pass's.
* Tall Jacobian: ``GradientTape.jacobian`` of ``tanh(A x)``, A of shape (1000, 10): forward
  columns (10 sweeps, its choice) against reverse rows (1000 passes, the hook turned off).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import timeit

import numpy as np

import tapegrad as tg
from tapegrad import _jacobian
from bench_overhead import N_OPS, chain, chain_numpy, chain_tapegrad


def _median(fn, number, repeat):
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number


def w4(number, repeat, n=1000):
    """Times (seconds) of the W4 gradient and HVPs, and the NumPy reference."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, n)) / np.sqrt(n)
    x0, v0 = rng.normal(size=n), rng.normal(size=n)
    at, x, v = tg.constant(a), tg.constant(x0), tg.constant(v0)

    def f(x):
        return tg.sum(tg.tanh(at @ x) ** 2)

    def grad():
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        return tape.gradient(y, x)

    def hvp_rev_rev():
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = f(x)
            gv = tg.sum(inner.gradient(y, x) * v)
        return outer.gradient(gv, x)

    def hvp_rev_fwd():
        with tg.GradientTape() as tape:
            tape.watch(x)
            with tg.ForwardAccumulator(x, v) as acc:
                y = f(x)
            jv = acc.jvp(y)
        return tape.gradient(jv, x)

    def hvp_numpy():
        # f = sum(t^2), t = tanh(z), z = A x: g = A^T (2 t (1 - t^2)); H v = A^T (w * (A v))
        # with w = d/dz [2 t (1 - t^2)] = 2 (1 - t^2)(1 - 3 t^2)
        t = np.tanh(a @ x0)
        return a.T @ (2.0 * (1.0 - t * t) * (1.0 - 3.0 * t * t) * (a @ v0))

    want = hvp_numpy()
    np.testing.assert_allclose(tg.hvp(f, (x,), (v,)).numpy(), want, rtol=1e-9)
    np.testing.assert_allclose(hvp_rev_rev().numpy(), want, rtol=1e-9)
    np.testing.assert_allclose(hvp_rev_fwd().numpy(), want, rtol=1e-9)
    timed = [("gradient", grad), ("hvp fwd-over-rev", lambda: tg.hvp(f, (x,), (v,))),
             ("hvp rev-over-rev", hvp_rev_rev), ("hvp rev-over-fwd", hvp_rev_fwd),
             ("hvp numpy", hvp_numpy)]
    if importlib.util.find_spec("jax") is not None:  # the same two compiled (tg.function)
        grad_c = tg.function(lambda x: tg.grad(f)(x), jit_compile=True)
        hvp_c = tg.function(lambda x, v: tg.hvp(f, (x,), (v,)), jit_compile=True)
        np.testing.assert_allclose(grad_c(x).numpy(), grad().numpy(), rtol=1e-9)
        np.testing.assert_allclose(hvp_c(x, v).numpy(), want, rtol=1e-9)
        timed += [("compiled gradient", lambda: grad_c(x).numpy()),
                  ("compiled hvp fwd-over-rev", lambda: hvp_c(x, v).numpy())]
    return {name: _median(fn, number, repeat) for name, fn in timed}


def _chain_jvp(x0):
    x = tg.constant(x0)
    with tg.ForwardAccumulator(x, tg.ones_like(x)) as acc:
        y = chain(x)
    return acc.jvp(y)


def w1_jvp(number, repeat):
    """Per-op overhead (us) of the chain's JVP over its NumPy forward, and of the reverse pass
    (forward + gradient) over NumPy's forward + hand-written backward."""
    x0 = np.random.default_rng(0).normal(size=16)
    t_fwd_np = _median(lambda: chain(x0, np.sin, np.exp), number, repeat)
    t_jvp = _median(lambda: _chain_jvp(x0), number, repeat)
    t_np = _median(lambda: chain_numpy(x0), number, repeat)
    t_rev = _median(lambda: chain_tapegrad(x0), number, repeat)
    return {"jvp": (t_jvp - t_fwd_np) / N_OPS * 1e6, "reverse": (t_rev - t_np) / N_OPS * 1e6}


def tall_jacobian(number, repeat, m=1000, n=10):
    """Times (seconds) of a tall Jacobian by forward columns and by reverse rows."""
    rng = np.random.default_rng(0)
    a, x = tg.constant(rng.normal(size=(m, n))), tg.constant(rng.normal(size=n))

    def jac():
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.tanh(a @ x)
        return tape.jacobian(y, x)

    def rows():
        saved = _jacobian._forward_is_cheaper
        _jacobian._forward_is_cheaper = lambda *a: False  # reverse rows only
        try:
            return jac()
        finally:
            _jacobian._forward_is_cheaper = saved

    np.testing.assert_allclose(jac().numpy(), rows().numpy(), rtol=1e-12)
    return {"columns": _median(jac, number, repeat), "rows": _median(rows, number, repeat)}


def main(argv=None):
    """Print the table; return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    reps = 3 if args.quick else 7
    t = w4(3 if args.quick else 10, reps)
    o = w1_jvp(5 if args.quick else 30, reps)
    j = tall_jacobian(1 if args.quick else 3, reps)
    rows = [
        ("W4 gradient (ms)", t["gradient"] * 1e3, ""),
        ("W4 HVP forward over reverse (ms)", t["hvp fwd-over-rev"] * 1e3, ""),
        ("W4 HVP reverse over reverse (ms)", t["hvp rev-over-rev"] * 1e3, ""),
        ("W4 HVP reverse over forward (ms)", t["hvp rev-over-fwd"] * 1e3, ""),
        ("W4 HVP hand-written NumPy (ms)", t["hvp numpy"] * 1e3, ""),
        ("W4 fwd-over-rev HVP / own gradient", t["hvp fwd-over-rev"] / t["gradient"], "<= 1.6"),
        ("W4 fwd-over-rev HVP / NumPy HVP", t["hvp fwd-over-rev"] / t["hvp numpy"], "<= 2"),
        ("W4 rev-over-fwd HVP / own gradient", t["hvp rev-over-fwd"] / t["gradient"], ""),
        ("W4 rev-over-fwd HVP / NumPy HVP", t["hvp rev-over-fwd"] / t["hvp numpy"], ""),
    ]
    if "compiled gradient" in t:
        rows += [("W4 compiled gradient (ms)", t["compiled gradient"] * 1e3, ""),
                 ("W4 compiled fwd-over-rev HVP (ms)", t["compiled hvp fwd-over-rev"] * 1e3, ""),
                 ("W4 compiled fwd-over-rev HVP / gradient",
                  t["compiled hvp fwd-over-rev"] / t["compiled gradient"], "")]
    rows += [
        ("W1 JVP overhead per op (us)", o["jvp"], "<= reverse's"),
        ("W1 reverse overhead per op (us)", o["reverse"], ""),
        ("tall Jacobian, forward columns (ms)", j["columns"] * 1e3, ""),
        ("tall Jacobian, reverse rows (ms)", j["rows"] * 1e3, ""),
        ("tall Jacobian rows / columns", j["rows"] / j["columns"], ""),
    ]
    print(f"{'measurement':40s} {'value':>10s}   target")
    print("-" * 64)
    for name, value, target in rows:
        print(f"{name:40s} {value:10.2f}   {target}")
    return rows


if __name__ == "__main__":
    main()
