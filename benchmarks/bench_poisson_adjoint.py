"""Measure the adjoint (gradient) solve of a preconditioned ``tg.linalg.cg`` on a 2D Poisson
problem, compiled, against ``jax.scipy.sparse.linalg.cg``'s gradient as a JAX user writes it,
in one process on one thread (issue 31).

Run ``python benchmarks/bench_poisson_adjoint.py [--grid 64] [--rtol 1e-8] [--repeats 10]``
(``taskset -c 1`` to pin it). The problem is ``bench_cg.py``'s: the matrix-free 5-point
Laplacian on a ``grid x grid`` interior (4096 unknowns at 64) with zero Dirichlet boundaries
plus a positive coefficient field ``c``, ``A(c) v = -Lap v + c * v``, float64. One call returns
``loss = sum(x * w)`` for ``A(c) x = b`` and its gradients with respect to ``b`` and ``c``
(``b_bar = A^{-1} w``, ``c_bar = -b_bar * x``): one forward and one adjoint CG solve. Two
preconditioners, the same function of ``c`` on both sides:

- ``jacobi``: ``M r = r / diag(A)``;
- ``ic0``: incomplete Cholesky IC(0) in red-black ordering, ``M^{-1} = (D + L) D^{-1} (D + L)^T``
  with ``L`` the strictly lower part of ``A`` (red unknowns first) and ``D`` the IC(0) pivots:
  ``diag(A)`` on red points, ``diag(A) - sum over red neighbours of 1 / diag(A)`` on black
  ones (red-black ordering makes IC(0)'s dropped fill exactly the black-black coupling).
  Applied as its two triangular solves, each a masked stencil pass (vectorised: red points
  depend on no red point). ``--check`` compares it with the dense IC(0) matrix on a small grid.

It prints, per preconditioner: the CG iterations of the forward solve and of the backward
(adjoint) solve on each side (preconditioner applications counted by a host callback in an
instrumented copy of each program, minus one per solve; target: backward within 10 % of
forward), the relative error of each side's gradients against the dense solve's
(``numpy.linalg.solve`` of the assembled matrix), the first call and the per-call time of
value-and-gradient (best of ``--blocks`` alternating blocks of ``--repeats`` calls; the JAX
peer keeps its arrays on the device and waits once per block) and the ratio tapegrad / JAX
(target <= 1.2). Nothing is asserted.
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

from bench_cg import _problem, _stencil, alternating_blocks  # noqa: E402  (run from benchmarks/)


def _red(grid):
    """1.0 on the red points ``(i + j)`` even of the flattened grid, 0.0 on the black ones."""
    i, j = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")
    return ((i + j) % 2 == 0).astype(np.float64).ravel()


def _preconditioner(kind, lap, c, red):
    """``r -> M r`` for ``A(c) = lap + c`` (any array namespace: only arithmetic and ``lap``)."""
    d = 4.0 + c

    def nbsum(v):  # the sum over the (up to four) grid neighbours: 4 v - (4 v - neighbours)
        return 4.0 * v - lap(v)

    if kind == "jacobi":
        return lambda r: r / d
    black = 1.0 - red
    piv = d - black * nbsum(red / d)  # IC(0) pivots (red: d; black: d - sum 1/d_red)

    def apply(r):
        y_red = red * r / piv  # (D + L) y = r: red rows first, then black ones
        y = y_red + black * (r + nbsum(y_red)) / piv
        return y + red * nbsum(black * y) / piv  # (I + D^{-1} L^T) z = y

    return apply


def _dense(grid, c):
    n = grid * grid
    lap = _stencil(np, np.reshape, np.concatenate, np.zeros, grid)
    return np.stack([lap(e) for e in np.eye(n)], axis=1) + np.diag(c)


def _check(grid=6):
    """The masked IC(0) equals the dense one of the red-black reordered matrix."""
    b, c, _ = _problem(grid)
    a = _dense(grid, c)
    red = _red(grid).astype(bool)
    order = np.r_[np.flatnonzero(red), np.flatnonzero(~red)]
    p = a[np.ix_(order, order)]
    low = np.tril(p, -1)
    piv = np.diag(p).copy()
    nr = red.sum()
    for k in range(nr, len(order)):  # IC(0): the black pivots lose their red neighbours' share
        piv[k] -= np.sum(low[k, :nr] ** 2 / piv[:nr])
    m_inv = (np.diag(piv) + low) @ np.diag(1 / piv) @ (np.diag(piv) + low).T
    want = np.empty_like(b)
    want[order] = np.linalg.solve(m_inv, b[order])
    lap = _stencil(np, np.reshape, np.concatenate, np.zeros, grid)
    got = _preconditioner("ic0", lap, c, _red(grid))(b)
    offdiag = m_inv - p
    assert np.abs(offdiag[:nr, :]).max() == 0 and np.abs(np.diag(offdiag)).max() < 1e-14
    print(f"IC(0) check on {grid}x{grid}: max |masked - dense| = {np.abs(got - want).max():.1e}")


def tapegrad_side(grid, kind, rtol, maxiter, tap=None, grad=True):
    import tapegrad as tg

    lap = _stencil(tg, tg.reshape, tg.concat, lambda s: tg.zeros(s, dtype=tg.float64), grid)
    red = tg.constant(_red(grid))

    def loss(b, c, w):
        m = _preconditioner(kind, lap, c, red)

        def precond(r):
            if tap is not None:
                tap(r)
            return m(r)

        x, _ = tg.linalg.cg(lambda v: lap(v) + c * v, b, rtol=rtol, maxiter=maxiter, M=precond)
        return tg.sum(x * w)

    return tg.function(tg.value_and_grad(loss, argnums=(0, 1)) if grad else loss,
                       jit_compile=True)


def jax_side(grid, kind, rtol, maxiter, tap=None, grad=True):
    import jax
    import jax.numpy as jnp

    lap = _stencil(jnp, jnp.reshape, jnp.concatenate, jnp.zeros, grid)
    red = jnp.asarray(_red(grid))

    def loss(b, c, w):
        m = _preconditioner(kind, lap, c, red)

        def precond(r):
            if tap is not None:
                tap(r)
            return m(r)

        x, _ = jax.scipy.sparse.linalg.cg(lambda v: lap(v) + c * v, b, tol=rtol, atol=0.0,
                                          maxiter=maxiter, M=precond)
        return jnp.sum(x * w)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)) if grad else loss)


def _applications(make, grid, kind, rtol, maxiter, args, raw, value_only):
    """Preconditioner applications in one call, counted by a host callback (an instrumented
    copy of the program; the timed ones have none); ``value_only`` runs the forward alone."""
    import jax

    count = [0]

    def tap(r):
        jax.debug.callback(lambda: count.__setitem__(0, count[0] + 1), ordered=False)

    fn = make(grid, kind, rtol, maxiter, tap, grad=not value_only)
    jax.block_until_ready(jax.tree_util.tree_map(raw, fn(*args)))
    jax.effects_barrier()
    count[0] = 0
    jax.block_until_ready(jax.tree_util.tree_map(raw, fn(*args)))
    jax.effects_barrier()
    return count[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grid", type=int, default=64)
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    import tapegrad as tg

    jax.config.update("jax_enable_x64", True)
    if args.check:
        _check()
    grid, rtol = args.grid, args.rtol
    maxiter = 10 * grid * grid
    b, c, w = _problem(grid)
    a = _dense(grid, c)
    x = np.linalg.solve(a, b)
    u = np.linalg.solve(a, w)  # A is symmetric: b_bar = A^{-1} w, c_bar = -b_bar * x
    dense = (u, -u * x)
    a_ours = [tg.constant(v) for v in (b, c, w)]
    a_peer = [jax.device_put(jnp.asarray(v)) for v in (b, c, w)]
    for make, convert, wait in ((tapegrad_side, tg.constant, lambda o: o[0].numpy()),
                                (jax_side, jnp.asarray, jax.block_until_ready)):
        wait(make(8, "jacobi", rtol, 640)(*[convert(v) for v in _problem(8)]))  # start-up
    print(f"{grid}x{grid} Poisson + c ({grid * grid} unknowns), preconditioned CG rtol={rtol:g}, "
          "value and gradient wrt b and c, float64, 1 thread")
    for kind in ("jacobi", "ic0"):
        ours = tapegrad_side(grid, kind, rtol, maxiter)
        peer = jax_side(grid, kind, rtol, maxiter)
        t = time.perf_counter()
        g_ours = [g.numpy() for g in ours(*a_ours)[1]]
        first_ours = time.perf_counter() - t
        t = time.perf_counter()
        g_peer = jax.block_until_ready(peer(*a_peer))[1]
        first_peer = time.perf_counter() - t

        def error(gs):
            return max(np.abs(np.asarray(g) - d).max() / np.abs(d).max()
                       for g, d in zip(gs, dense))

        iters = {}
        for name, make, args_, raw in (("tapegrad", tapegrad_side, a_ours, lambda v: v._value),
                                       ("jax", jax_side, a_peer, lambda v: v)):
            forward = _applications(make, grid, kind, rtol, maxiter, args_, raw, True)
            total = _applications(make, grid, kind, rtol, maxiter, args_, raw, False)
            iters[name] = (forward - 1, total - forward - 1)  # one application before the loop

        times = alternating_blocks(jax, ours, a_ours, peer, a_peer, args.repeats,
                                   args.blocks)
        s_ours, s_peer = min(times["ours"]), min(times["peer"])
        (f_o, b_o), (f_p, b_p) = iters["tapegrad"], iters["jax"]
        print(f"[{kind}] iterations forward/backward: tapegrad {f_o}/{b_o} "
              f"({100 * (b_o - f_o) / f_o:+.1f} %), jax {f_p}/{b_p} "
              f"({100 * (b_p - f_p) / f_p:+.1f} %)")
        print(f"[{kind}] gradient error vs dense solve: tapegrad {error(g_ours):.1e}, jax "
              f"{error(g_peer):.1e}")
        print(f"[{kind}] first call: tapegrad {first_ours:.2f} s, jax.jit {first_peer:.2f} s")
        print(f"[{kind}] per call (best of {args.blocks} blocks of {args.repeats}): tapegrad "
              f"{s_ours * 1e3:.2f} ms, jax.jit {s_peer * 1e3:.2f} ms (ratio "
              f"{s_ours / s_peer:.2f}, target <= 1.2); medians "
              f"{np.median(times['ours']) * 1e3:.2f} and {np.median(times['peer']) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
