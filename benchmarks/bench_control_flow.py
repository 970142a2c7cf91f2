"""Measure compiled control flow: a ``tg.lax.scan`` of N time steps inside ``tg.function``
against the ``jax.jit`` + ``jax.lax.scan`` program a JAX user writes, in one process.

Run ``python benchmarks/bench_control_flow.py [--steps 100 1000]``. The workload is the
gradient of ``sum_t sum(h_t ** 2)`` with ``h_t = tanh(h_{t-1} @ W + x_t)`` (64 x 64 float64
state and weights, N slices ``x_t``), with respect to ``W``. For each N it prints the first
call (trace, compile and one run) of each side, their ratio, the ratio of the first call at
the largest N to that at the smallest (compile time must not grow with N: the body is traced
once), and the mean time of a compiled step of each side over a block of repeats (tapegrad's
reverse pass recomputes each step from its carry; JAX's saves the step's residuals). The JAX
peer keeps its arrays on the device, lets dispatch run ahead and waits once per block, as JAX
users do; tapegrad's call returns NumPy arrays (issue 19 is about that difference).
Gradients are compared first. Nothing is asserted. For steadier times pin BLAS to one
thread (``OMP_NUM_THREADS=1``).

This is the recurrent-step part of issue 17's Navier-Stokes benchmark, which is not written
yet.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def _workloads(n):
    import jax
    import jax.numpy as jnp

    import tapegrad as tg

    xs = np.random.default_rng(0).normal(size=(n, 64, 64)) * 0.01
    w0 = np.eye(64) * 0.5

    def loss(w, xs):
        def step(h, x):
            h = tg.tanh(h @ w + x)
            return h, tg.sum(h ** 2)
        return tg.sum(tg.lax.scan(step, tg.zeros((64, 64), dtype=tg.float64), xs)[1])

    def loss_jax(w, xs):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, jnp.sum(h ** 2)
        return jnp.sum(jax.lax.scan(step, jnp.zeros((64, 64)), xs)[1])

    ours = tg.function(tg.grad(loss))
    peer = jax.jit(jax.grad(loss_jax))
    return ((lambda: ours(tg.constant(w0), tg.constant(xs)).numpy()),
            (lambda: peer(jnp.asarray(w0), jnp.asarray(xs))),
            ours, peer, (tg.constant(w0), tg.constant(xs)), (jnp.asarray(w0), jnp.asarray(xs)))


def _first_call(fn):
    t = time.perf_counter()
    out = fn()
    getattr(out, "block_until_ready", lambda: None)()
    return time.perf_counter() - t, np.asarray(out)


def _steps(fn, args, repeats, wait):
    """Seconds per call of ``repeats`` calls in a row, waiting once at the end (JAX's calls
    dispatch ahead; tapegrad's return NumPy arrays, so they wait anyway)."""
    t = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    wait(out)
    return (time.perf_counter() - t) / repeats


def _oscillator(n):
    """A small program: the gradient of a damped oscillator's final energy after ``n`` explicit
    Euler steps with respect to its parameters, a dict (``k`` stiffness, ``c`` damping)."""
    import jax
    import jax.numpy as jnp

    import tapegrad as tg

    def loss(p, x0):
        def step(s, _):
            x, v = s
            a = -p["k"] * x - p["c"] * v
            return (x + 0.01 * v, v + 0.01 * a), None
        (x, v), _ = tg.lax.scan(step, (x0, tg.zeros_like(x0)), None, length=n)
        return tg.sum(0.5 * v ** 2 + 0.5 * p["k"] * x ** 2)

    def loss_jax(p, x0):
        def step(s, _):
            x, v = s
            a = -p["k"] * x - p["c"] * v
            return (x + 0.01 * v, v + 0.01 * a), None
        (x, v), _ = jax.lax.scan(step, (x0, jnp.zeros_like(x0)), None, length=n)
        return jnp.sum(0.5 * v ** 2 + 0.5 * p["k"] * x ** 2)

    p = {"k": 2.0, "c": 0.1}
    x0 = np.linspace(-1.0, 1.0, 8)
    ours = tg.function(tg.grad(loss))
    peer = jax.jit(jax.grad(loss_jax))
    a_ours = ({k: tg.constant(v, dtype=tg.float64) for k, v in p.items()}, tg.constant(x0))
    a_peer = ({k: jnp.asarray(v) for k, v in p.items()}, jnp.asarray(x0))
    return ours, peer, a_ours, a_peer


def _small_program(n, repeats):
    """Row: the compile (first call) and call times of the oscillator gradient, each side."""
    ours, peer, a_ours, a_peer = _oscillator(n)
    t_ours, g_ours = _first_call(lambda: ours(*a_ours)["k"].numpy())
    t_peer, g_peer = _first_call(lambda: peer(*a_peer)["k"])
    s_ours = _steps(ours, a_ours, repeats, lambda o: o["k"].numpy())
    s_peer = _steps(peer, a_peer, repeats, lambda o: o["k"].block_until_ready())
    print(f"small program (oscillator, N={n}, dict parameters, tg.grad of tg.lax.scan): "
          f"first call tapegrad {t_ours * 1e3:.0f} ms, jax.jit {t_peer * 1e3:.0f} ms (ratio "
          f"{t_ours / t_peer:.2f}, target <= 1.5); call tapegrad {s_ours * 1e3:.3f} ms, "
          f"jax.jit {s_peer * 1e3:.3f} ms (ratio {s_ours / s_peer:.2f}, target <= 1.5); "
          f"|difference| {abs(float(g_ours) - float(g_peer)):.1e}")


def _body_traces():
    """Rows: how many times a loop body's Python runs to build one compiled program (JAX's
    own transforms trace a body once per program)."""
    import tapegrad as tg

    def counted(fn):
        def body(*a):
            body.count += 1
            return fn(*a)
        body.count = 0
        return body

    x = tg.constant(np.linspace(0.1, 1.0, 4))
    w_body = counted(lambda i, h: (i + 1, tg.sin(h) * 1.1))
    tg.function(tg.grad(lambda h: tg.sum(tg.while_loop(
        lambda i, h: i < 5, w_body, (tg.constant(0), h), maximum_iterations=5)[1])))(x)
    s_body = counted(lambda c, _: (tg.sin(c) * 1.1, None))
    tg.function(tg.grad(lambda h: tg.sum(tg.lax.scan(s_body, h, None, length=5)[0])))(x)
    a_body, b_body = counted(lambda c, _: (tg.sin(c), None)), counted(lambda c, _: (c ** 2, None))

    def two_scans(h):
        h = tg.lax.scan(a_body, h, None, length=5)[0]
        return tg.sum(tg.lax.scan(b_body, h, None, length=5)[0])
    tg.function(lambda h, v: tg.hvp(two_scans, (h,), (v,)))(x, x)
    print(f"body traces per compiled program (target <= 2): gradient of tg.while_loop "
          f"{w_body.count}, gradient of tg.lax.scan {s_body.count}, HVP through two tg.lax.scans "
          f"{a_body.count} + {b_body.count}")
    more = {}
    for name, transform in [("JVP", lambda f: lambda h: tg.jvp(f, (h,), (h,))[1]),
                            ("HVP", lambda f: lambda h: tg.hvp(f, (h,), (h,))),
                            ("gradient of the gradient's norm",
                             lambda f: tg.grad(lambda h: tg.sum(tg.grad(f)(h) ** 2)))]:
        w_body.count = s_body.count = 0
        branch = counted(lambda h: tg.sin(h) ** 2)
        tg.function(transform(lambda h: tg.sum(tg.while_loop(
            lambda i, h: i < 5, w_body, (tg.constant(0), h), maximum_iterations=5)[1])))(x)
        tg.function(transform(lambda h: tg.sum(tg.lax.scan(s_body, h, None, length=5)[0])))(x)
        tg.function(transform(lambda h: tg.sum(tg.cond(tg.sum(h) > 0, lambda: branch(h),
                                                        lambda: tg.cos(h)))))(x)
        more[name] = (w_body.count, s_body.count, branch.count)
    print("  more body traces (tg.while_loop, tg.lax.scan, a tg.cond branch): "
          + "; ".join(f"{k} {w}, {s}, {b}" for k, (w, s, b) in more.items()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    firsts = {}
    for n in args.steps:
        first_ours, first_peer, ours, peer, a_ours, a_peer = _workloads(n)
        t_ours, g_ours = _first_call(first_ours)
        t_peer, g_peer = _first_call(first_peer)
        firsts[n] = t_ours
        err = np.abs(g_ours - g_peer).max()
        s_ours = _steps(ours, a_ours, args.repeats, lambda o: o.numpy())
        s_peer = _steps(peer, a_peer, args.repeats, lambda o: o.block_until_ready())
        print(f"N={n:5d}  first call: tapegrad {t_ours:.2f} s, jax.jit {t_peer:.2f} s "
              f"(ratio {t_ours / t_peer:.2f}, target <= 1.2); step: tapegrad "
              f"{s_ours * 1e3:.1f} ms, jax.jit {s_peer * 1e3:.1f} ms (ratio "
              f"{s_ours / s_peer:.2f}, target <= 1.15); max |gradient difference| {err:.1e}")
    lo, hi = min(firsts), max(firsts)
    if hi != lo:
        print(f"first call at N={hi} / at N={lo}: {firsts[hi] / firsts[lo]:.2f} (target <= 1.5)")
    _small_program(1000, 200)
    _body_traces()


if __name__ == "__main__":
    main()
