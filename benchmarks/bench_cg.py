"""Measure ``tg.linalg.cg`` with its implicit gradient, compiled, against the ``jax.jit``
program a JAX user writes with ``jax.scipy.sparse.linalg.cg``, in one process on one thread.

Run ``python benchmarks/bench_cg.py [--grid 64] [--rtol 1e-8] [--repeats 20]``. The workload
is a 2D Poisson-type problem on a ``grid x grid`` interior (4096 unknowns at 64): the
matrix-free 5-point Laplacian with zero Dirichlet boundaries plus a positive field ``c``,
``A(c) v = -Lap v + c * v`` (symmetric positive definite), float64. One call solves
``A(c) x = b`` by CG and returns the gradients of ``loss = sum(x * w)`` with respect to ``b``
and to the field ``c``: the forward solve and one adjoint solve (``b_bar = A^{-1} w``,
``c_bar = -b_bar * x``), ``tg.function(jit_compile=True)`` of ``tg.grad`` against ``jax.jit``
of ``jax.grad``. Both sides write the stencil the same way (slices and concatenations), use
the same ``rtol`` and ``maxiter`` and no preconditioner.

A small problem runs first on both sides, untimed, so that neither pays the process's
one-time start-up (JAX's backend, tapegrad's first trace). It prints, for each side, the first
call at the full size (trace, XLA compile and one run) and the mean time
of a call over a block of ``--repeats`` calls, and the ratios tapegrad / JAX (issue 17's
target for the call: <= 1.2). The JAX peer keeps its arrays on the device, dispatches the
block of calls and waits once at its end; tapegrad's call returns NumPy arrays (two vectors
of 4096 here). The gradients of both sides are compared first, and the number of operator
applications (matvecs) of one call is counted on each side, in a separate instrumented
program whose operator calls back to the host, to show both do the same iterations. Nothing
is asserted. Other processes on the machine move the times; compare runs on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402


def _problem(grid):
    """``(b, c, w)``: a right-hand side, the positive field of the operator, the loss weights."""
    s = np.linspace(0, 1, grid)
    xx, yy = np.meshgrid(s, s, indexing="ij")
    b = (np.sin(3 * np.pi * xx) * np.cos(2 * np.pi * yy) + xx * yy).ravel()
    c = (0.02 * (1.5 + np.sin(2 * np.pi * xx) * np.sin(np.pi * yy))).ravel()
    w = np.cos(np.pi * (xx - 2 * yy)).ravel()
    return b, c, w


def _stencil(xp, reshape, concat, zeros, grid):
    """``v -> -Lap v`` on the flattened ``grid x grid`` interior, zero Dirichlet boundary."""
    def lap(v):
        u = reshape(v, (grid, grid))
        row, col = zeros((1, grid)), zeros((grid, 1))
        up = concat([u[1:], row], axis=0)
        down = concat([row, u[:-1]], axis=0)
        left = concat([u[:, 1:], col], axis=1)
        right = concat([col, u[:, :-1]], axis=1)
        return reshape(4 * u - up - down - left - right, (grid * grid,))
    return lap


def tapegrad_side(grid, rtol, maxiter, tap=None):
    import tapegrad as tg

    lap = _stencil(tg, tg.reshape, tg.concat, lambda s: tg.zeros(s, dtype=tg.float64), grid)

    def loss(b, c, w):
        def op(v):
            if tap is not None:
                tap(v)
            return lap(v) + c * v
        x, _ = tg.linalg.cg(op, b, rtol=rtol, maxiter=maxiter)
        return tg.sum(x * w)

    return tg.function(tg.grad(loss, argnums=(0, 1)), jit_compile=True)


def jax_side(grid, rtol, maxiter, tap=None):
    import jax
    import jax.numpy as jnp

    lap = _stencil(jnp, jnp.reshape, jnp.concatenate, jnp.zeros, grid)

    def loss(b, c, w):
        def op(v):
            if tap is not None:
                tap(v)
            return lap(v) + c * v
        x, _ = jax.scipy.sparse.linalg.cg(op, b, tol=rtol, atol=0.0, maxiter=maxiter)
        return jnp.sum(x * w)

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def _count_matvecs(make, args, grid, rtol, maxiter, raw):
    """Operator applications in one call of the program ``make`` builds, counted by a host
    callback in its operator (an instrumented copy; the timed programs have none)."""
    import jax

    count = [0]

    def bump():
        count[0] += 1

    def tap(v):
        jax.debug.callback(bump, ordered=False)

    fn = make(grid, rtol, maxiter, tap)
    out = fn(*args)
    jax.block_until_ready([raw(a) for a in out])
    jax.effects_barrier()
    count[0] = 0
    out = fn(*args)
    jax.block_until_ready([raw(a) for a in out])
    jax.effects_barrier()
    return count[0]


def alternating_blocks(jax, ours, a_ours, peer, a_peer, repeats, blocks):
    """``{"ours": [...], "peer": [...]}``: seconds per call of ``blocks`` alternating blocks of
    ``repeats`` calls each; each side lets dispatch run ahead and waits once per block."""
    def block_ours():
        for _ in range(repeats):
            out = ours(*a_ours)
        out[0].numpy()

    def block_peer():
        for _ in range(repeats):
            out = peer(*a_peer)
        jax.block_until_ready(out)

    times = {"ours": [], "peer": []}
    for _ in range(blocks):
        for name, block in (("ours", block_ours), ("peer", block_peer)):
            t = time.perf_counter()
            block()
            times[name].append((time.perf_counter() - t) / repeats)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grid", type=int, default=64)
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--maxiter", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=5)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    import tapegrad as tg

    jax.config.update("jax_enable_x64", True)
    grid, rtol = args.grid, args.rtol
    maxiter = args.maxiter or 10 * grid * grid
    for make, convert, wait in ((tapegrad_side, tg.constant, lambda o: o[0].numpy()),
                                (jax_side, jnp.asarray, jax.block_until_ready)):
        wait(make(8, rtol, 640)(*[convert(a) for a in _problem(8)]))  # the one-time start-up
    b, c, w = _problem(grid)
    ours = tapegrad_side(grid, rtol, maxiter)
    peer = jax_side(grid, rtol, maxiter)
    a_ours = [tg.constant(a) for a in (b, c, w)]
    a_peer = [jax.device_put(jnp.asarray(a)) for a in (b, c, w)]

    t = time.perf_counter()
    g_ours = [g.numpy() for g in ours(*a_ours)]
    first_ours = time.perf_counter() - t
    t = time.perf_counter()
    g_peer = jax.block_until_ready(peer(*a_peer))
    first_peer = time.perf_counter() - t
    g_peer = [np.asarray(g) for g in g_peer]
    err = max(np.abs(a - p).max() / np.abs(p).max() for a, p in zip(g_ours, g_peer))

    n_ours = _count_matvecs(tapegrad_side, a_ours, grid, rtol, maxiter, lambda a: a._value)
    n_peer = _count_matvecs(jax_side, a_peer, grid, rtol, maxiter, lambda a: a)

    times = alternating_blocks(jax, ours, a_ours, peer, a_peer, args.repeats, args.blocks)
    s_ours, s_peer = min(times["ours"]), min(times["peer"])
    m_ours, m_peer = np.median(times["ours"]), np.median(times["peer"])
    print(f"{grid}x{grid} Poisson ({grid * grid} unknowns), CG rtol={rtol:g}, maxiter={maxiter}, "
          "solve + gradient wrt b and c, float64, 1 thread")
    print(f"matvecs per call: tapegrad {n_ours}, jax {n_peer}; max relative gradient "
          f"difference {err:.1e}")
    print(f"first call: tapegrad {first_ours:.2f} s, jax.jit {first_peer:.2f} s (ratio "
          f"{first_ours / first_peer:.2f})")
    print(f"per call (best of {args.blocks} blocks of {args.repeats}): tapegrad "
          f"{s_ours * 1e3:.2f} ms, jax.jit {s_peer * 1e3:.2f} ms (ratio {s_ours / s_peer:.2f}, "
          f"target <= 1.2); medians {m_ours * 1e3:.2f} and {m_peer * 1e3:.2f} ms (ratio "
          f"{m_ours / m_peer:.2f})")


if __name__ == "__main__":
    main()
