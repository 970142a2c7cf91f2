"""Measure issue 17's Navier-Stokes inverse step: tapegrad compiled (and eager) against the
``jax.jit`` program a JAX user writes, in one process on one thread.

Run ``python benchmarks/bench_navier_stokes.py [--steps 100 1000] [--repeats 5]
[--eager-steps 100]``. The workload is one step of the inverse problem that
``examples/navier_stokes.py`` posed before issue 31 (the initial flow from the flow N steps
later; the example now recovers a force), with its step, on a 64 x 64 grid: the loss after N
time steps (a ``tg.lax.scan`` of a
``tg.recompute_grad``-wrapped step), its gradient with respect to the initial-flow Variable,
and an Adam update, all in one ``tg.function``. The peer is the same program in JAX:
``jax.lax.scan`` of a ``jax.checkpoint``-wrapped step, the projection a ``jax.custom_vjp``,
Adam written out (optax's ``adam`` does the same arithmetic), ``jax.jit`` of the whole step
with the parameters and Adam's moments kept as JAX arrays, a block of calls dispatched ahead
and waited for once. Both use float64.

For each N it prints:

* first call (trace, compile and one run) of each side and their ratio (target <= 1.2), the
  same less one step's time (trace and compile alone; one step at N = 1000 takes about a
  second), and tapegrad's at the largest N over that at the smallest (target <= 1.5);
* the second call of each side on its own (it would include a second compile if one
  happened: tapegrad compiled a donating program there until it decided donation at trace);
* time per step in the steady state, the mean over a block of ``--repeats`` calls after the
  second (target <= 1.15);
* peak memory of the compiled step: XLA's temporary buffers (``memory_analysis()`` of the
  compiled program; the arguments and results, a few hundred KiB, are the same on both sides)
  for tapegrad with ``recompute_grad`` against JAX with ``jax.checkpoint`` (target <= 1.2), and
  both without checkpointing, for comparison;
* eager tapegrad at ``--eager-steps``: time per step and the peak of NumPy memory
  (``tracemalloc``) during one step.

A small problem runs first on both sides, untimed, so that neither pays the process's one-time
start-up (JAX's backend, tapegrad's first trace). The gradients of both sides are compared
before timing. Nothing is asserted. Other processes on the machine move the step times by
20% or more; compare runs on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import navier_stokes as ns  # noqa: E402

import tapegrad as tg  # noqa: E402

LR = 0.1
SMOOTHING = 0.05  # the prior on the initial flow: u0 = P exp(-SMOOTHING |k|^2) v
BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7


def tapegrad_step(n, steps, checkpoint, observed, compiled=True):
    """``(call, variable)``: the inverse step as a function of nothing (the state is ``v`` and
    Adam's slots), compiled by ``tg.function`` unless ``compiled`` is false."""
    step = ns.make_step(n)
    prior = ns.spectral_operator(n, dt=1.0, nu=SMOOTHING)
    body = tg.recompute_grad(step) if checkpoint else step
    v = tg.Variable(np.zeros((2, n, n)), name="v")
    target = tg.constant(observed)
    optimizer = tg.optimizers.Adam(LR, BETA_1, BETA_2, EPSILON)
    optimizer.build([v])  # its slots exist before the first call, which then traces once

    def train_step():
        with tg.GradientTape() as tape:
            final, _ = tg.lax.scan(lambda u, _: (body(u), None), prior(v), None, length=steps)
            loss = tg.mean((final - target) ** 2)
        optimizer.apply_gradients([(tape.gradient(loss, v), v)])
        return loss

    return (tg.function(train_step) if compiled else train_step), v


def jax_navier_stokes(n):
    """``(step, prior)``: the example's time step and its smoothing prior on an ``(2, n, n)``
    float64 field, written in JAX (the projection a ``jax.custom_vjp``) as a JAX user would."""
    import jax
    import jax.numpy as jnp

    def spectral(dt, nu):
        kx, ky, k2 = ns.wavenumbers(n)
        resolved = (np.abs(kx) < n / 2) & (ky < n / 2)
        decay = jnp.asarray(np.where(resolved, np.exp(-nu * (kx ** 2 + ky ** 2) * dt), 0.0))
        kx, ky, inv_k2 = jnp.asarray(kx), jnp.asarray(ky), jnp.asarray(1.0 / k2)

        def apply(u):
            h = jnp.fft.rfftn(u, axes=(1, 2))
            div = (kx * h[0] + ky * h[1]) * inv_k2
            out = jnp.stack([decay * (h[0] - kx * div), decay * (h[1] - ky * div)])
            return jnp.fft.irfftn(out, s=(n, n), axes=(1, 2))

        op = jax.custom_vjp(apply)
        op.defvjp(lambda u: (apply(u), None), lambda _, dy: (apply(dy),))
        return op

    project, prior = spectral(ns.DT, ns.NU), spectral(1.0, SMOOTHING)
    scale = ns.DT * n / (2 * np.pi)
    rows = jnp.arange(n, dtype=jnp.float64)[:, None]
    cols = jnp.arange(n, dtype=jnp.float64)[None, :]

    def advect(u):
        a, b = rows - scale * u[0], cols - scale * u[1]
        a0, b0 = jnp.floor(a), jnp.floor(b)
        wa, wb = a - a0, b - b0
        i0, j0 = a0.astype(jnp.int64) % n, b0.astype(jnp.int64) % n
        i1, j1 = (i0 + 1) % n, (j0 + 1) % n
        flat = u.reshape(2, n * n)

        def at(i, j):
            return jnp.take(flat, (i * n + j).reshape(-1), axis=1).reshape(2, n, n)

        return ((1 - wa) * ((1 - wb) * at(i0, j0) + wb * at(i0, j1))
                + wa * ((1 - wb) * at(i1, j0) + wb * at(i1, j1)))

    def step(u):
        return project(advect(u))

    return step, prior


def jax_step(n, steps, checkpoint, observed):
    """``(jitted, state)``: the peer, ``jitted(state) -> (state, loss)`` with ``state = (v, m,
    s, t)`` JAX arrays."""
    import jax
    import jax.numpy as jnp

    step, prior = jax_navier_stokes(n)
    body = jax.checkpoint(step) if checkpoint else step
    target = jnp.asarray(observed)

    def loss_fn(v):
        final, _ = jax.lax.scan(lambda u, _: (body(u), None), prior(v), None, length=steps)
        return jnp.mean((final - target) ** 2)

    @jax.jit
    def train_step(state):
        v, m, s, t = state
        loss, g = jax.value_and_grad(loss_fn)(v)
        t = t + 1
        alpha = LR * jnp.sqrt(1 - BETA_2 ** t) / (1 - BETA_1 ** t)
        m = m + (g - m) * (1 - BETA_1)
        s = s + (g * g - s) * (1 - BETA_2)
        return (v - m * alpha / (jnp.sqrt(s) + EPSILON), m, s, t), loss

    zeros = jnp.zeros((2, n, n))
    return train_step, (zeros, zeros, zeros, jnp.asarray(0.0))


def tapegrad_temp_bytes(fn, variable):
    """XLA's temporary buffer size of ``fn``'s compiled program (one signature, no arguments:
    its inputs are the Variables it reads)."""
    (program,) = fn._programs.values()
    values = [v._value for v in program.variables]
    return program.compiled.lower(*values).compile().memory_analysis().temp_size_in_bytes


def jax_temp_bytes(fn, state):
    return fn.lower(state).compile().memory_analysis().temp_size_in_bytes


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def measure(n, steps, repeats, observed):
    """One N: the figures of both sides (seconds and bytes)."""
    ours, v = tapegrad_step(n, steps, True, observed)
    peer, state = jax_step(n, steps, True, observed)
    first_ours, loss_ours = timed(lambda: float(ours()))
    first_peer, (state, loss_peer) = timed(lambda: jax_block(peer(state)))
    gap = abs(loss_ours - float(loss_peer)) + np.abs(v.numpy() - np.asarray(state[0])).max()
    second_ours, _ = timed(lambda: float(ours()))
    second_peer, (state, _) = timed(lambda: jax_block(peer(state)))
    t = time.perf_counter()
    for _ in range(repeats):
        loss = ours()
    float(loss)
    step_ours = (time.perf_counter() - t) / repeats
    t = time.perf_counter()
    for _ in range(repeats):
        state, loss = peer(state)
    loss.block_until_ready()
    step_peer = (time.perf_counter() - t) / repeats
    mem = {"ours": tapegrad_temp_bytes(ours, v), "peer": jax_temp_bytes(peer, state)}
    plain, pv = tapegrad_step(n, steps, False, observed)
    plain()
    mem["ours, no checkpoint"] = tapegrad_temp_bytes(plain, pv)
    bare, bstate = jax_step(n, steps, False, observed)
    mem["peer, no checkpoint"] = jax_temp_bytes(bare, bstate)
    return {"first": (first_ours, first_peer), "second": (second_ours, second_peer),
            "step": (step_ours, step_peer), "mem": mem, "gap": gap}


def target(n, steps):
    """The flow ``steps`` steps after ``ns.initial_flow(n)``, NumPy ``(2, n, n)``."""
    return ns.simulate(ns.make_step(n), tg.constant(ns.initial_flow(n)), steps).numpy()


def jax_block(out):
    out[1].block_until_ready()
    return out


def eager(n, steps, observed):
    """``(seconds per step, peak bytes)`` of the eager step (the second call; its peak from
    ``tracemalloc``, which sees NumPy's buffers)."""
    fn, _ = tapegrad_step(n, steps, True, observed, compiled=False)
    fn()
    seconds, _ = timed(fn)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--eager-steps", type=int, default=100)
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    n = ns.GRID
    mib = 2.0 ** 20
    results = {}
    measure(16, 2, 1, target(16, 2))  # JAX's and tapegrad's one-time start-up
    observed = target(n, 20)  # its value does not change the work
    for steps in args.steps:
        r = measure(n, steps, args.repeats, observed)
        results[steps] = r
        (fo, fp), (so, sp), mem = r["first"], r["step"], r["mem"]
        (s2o, s2p) = r["second"]
        print(f"N={steps:5d}  first call: tapegrad {fo:.2f} s, jax.jit {fp:.2f} s (ratio "
              f"{fo / fp:.2f}, target <= 1.2); less one step (trace and compile): "
              f"{fo - so:.2f} s and {fp - sp:.2f} s (ratio {(fo - so) / (fp - sp):.2f})")
        print(f"          second call: tapegrad {s2o * 1e3:.1f} ms, jax.jit {s2p * 1e3:.1f} ms "
              f"(ratio {s2o / s2p:.2f})")
        print(f"          step (steady state, mean of {args.repeats}): tapegrad {so * 1e3:.1f} ms, "
              f"jax.jit {sp * 1e3:.1f} ms (ratio {so / sp:.2f}, target <= 1.15); |loss and v "
              f"difference| {r['gap']:.1e}")
        print(f"          XLA temp memory: tapegrad + recompute_grad {mem['ours'] / mib:.1f} MiB, "
              f"jax + jax.checkpoint {mem['peer'] / mib:.1f} MiB (ratio "
              f"{mem['ours'] / mem['peer']:.2f}, target <= 1.2); without checkpointing "
              f"{mem['ours, no checkpoint'] / mib:.1f} and {mem['peer, no checkpoint'] / mib:.1f}"
              " MiB")
    lo, hi = min(results), max(results)
    if hi != lo:
        def compile_s(r, side):
            return r["first"][side] - r["step"][side]

        print(f"first call at N={hi} / at N={lo}: tapegrad "
              f"{results[hi]['first'][0] / results[lo]['first'][0]:.2f}, jax.jit "
              f"{results[hi]['first'][1] / results[lo]['first'][1]:.2f}; less one step: "
              f"tapegrad {compile_s(results[hi], 0) / compile_s(results[lo], 0):.2f} (target "
              f"<= 1.5), jax.jit {compile_s(results[hi], 1) / compile_s(results[lo], 1):.2f}")
    if args.eager_steps:
        seconds, peak = eager(n, args.eager_steps, observed)
        print(f"eager tapegrad, N={args.eager_steps}: {seconds:.2f} s per step, peak NumPy "
              f"memory {peak / mib:.1f} MiB")
    return results


if __name__ == "__main__":
    main()
