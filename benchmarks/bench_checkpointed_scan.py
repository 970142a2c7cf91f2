"""Measure ``tg.lax.scan(..., checkpoints=s)`` compiled: the memory, time and compile time of one
gradient of a scanned step against keeping every carry and against the JAX peers (issue 31).

Run ``python benchmarks/bench_checkpointed_scan.py [--step {cheap,ns,both}] [--size 10000]
[--grid 32] [--steps 1000 10000] [--slots 10 40] [--repeats 3] [--no-peers]
[--store-all-limit-mib 1024]``, pinned to one core (``taskset -c 1``); it sets XLA and BLAS to
one thread itself. The steps:

* ``cheap``: ``c -> sin(1.1 c) * w + 0.01 c`` on ``--size`` float64 numbers, ``w`` a captured
  parameter; the loss is ``sum(c_N)``, differentiated with respect to ``c_0`` and ``w``;
* ``ns``: the Navier-Stokes step of ``examples/navier_stokes.py`` (``make_step``) on a
  ``(2, grid, grid)`` float64 velocity; the loss is ``sum(u_N ** 2) / 2``, differentiated with
  respect to ``u_0``. The JAX peers run the same step written in JAX
  (``bench_navier_stokes.jax_navier_stokes``).

Each gradient is one compiled program: ``tg.function(tg.grad(loss))`` for tapegrad,
``jax.jit(jax.grad(loss))`` with the arguments kept on the device for the peers, float64 on
both sides. For each step and N it prints one row per program:

* ``ours every step`` (``checkpoints=None``) and ``ours Revolve(s)`` for each ``--slots`` and
  for Equinox's default ``s``; ``ours online while(s)`` for each ``--slots``: a
  ``tg.while_loop(..., checkpoints=s)`` with no ``maximum_iterations`` (its trip count is
  found as it runs; ``tg.checkpointing.Online(s)``), whose replayed steps are
  ``Online(s).forward_steps(N) - (N - 1)`` (its sweep is the primal loop);
* ``jax lax.scan`` (plain: every step's residuals kept) and ``jax lax.scan+checkpoint`` (a
  ``jax.checkpoint``-ed step: one carry per step kept, the step recomputed backward);
* ``equinox ckpt while(s)``: ``equinox.internal.while_loop(..., kind="checkpointed",
  max_steps=N, checkpoints=s)`` (how diffrax writes it) with Equinox's default ``s``
  (``floor(sqrt(2N + 1/4) - 3/2) + 1``, from ``checkpointed_while_loop``) and each ``--slots``.

Columns: XLA's temporary buffers of the compiled gradient (``memory_analysis()``) in carries
(target <= ``s + 2`` for Revolve(s)); the body's traces (a Python counter in the step; ours:
target <= 2); the replayed step evaluations of our plan (``p(N, s)``,
``tg.checkpointing.forward_steps``); the copies of the step in XLA's optimized program (its
``sine`` ops for the cheap step, one per forward copy; its ``fft`` ops for Navier-Stokes, two
per forward copy and two per VJP); compile time (ours: tapegrad's trace of the function into a
jaxpr, timed in the first call, plus ``lower`` and ``compile`` of its program timed again after
``jax.clear_caches()``; the peers: ``lower`` plus ``compile``, which trace the function); the
time of one gradient (best of ``--repeats``); ours' first call; ours' time over the prediction
``t(every step) + p(N, s) t(forward step)`` (target <= 1.15; ``t(forward step)`` from a
forward-only scan); the largest difference from the reference gradient (ours, every step).
Then the ratios: ours Revolve(s) over Equinox with the same ``s`` (equal memory; targets: time
<= 0.9, compile <= 1) and over the ``jax.checkpoint`` scan.

Programs that keep O(N) carries (ours every step, both ``lax.scan`` peers) are skipped where
N carries exceed ``--store-all-limit-mib``; the prediction then takes ``t(every step)`` per step
from the largest N measured. Nothing is asserted; compare runs on the same quiet machine.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402


class Cheap:
    """The cheap nonlinear step on ``size`` float64 numbers, its arguments ``(c0, w)``."""

    def __init__(self, size):
        self.args = (np.linspace(-1.0, 1.0, size), np.full(size, 0.9))
        self.carry = size * 8
        self.marker = "sine"  # one per forward evaluation of the step in the program
        self.title = (f"cheap step c -> sin(1.1 c) w + 0.01 c on {size} float64 numbers; "
                      "gradient of sum(c_N) wrt c_0 and w")

    def tg_step(self, tg):
        return lambda c, w: tg.sin(1.1 * c) * w + 0.01 * c

    def jax_step(self, jnp):
        return lambda c, w: jnp.sin(1.1 * c) * w + 0.01 * c

    def loss(self, xp, c):
        return xp.sum(c)


class NavierStokes:
    """The example's Navier-Stokes step on a ``(2, grid, grid)`` velocity, its argument
    ``(u0,)``: a smooth divergence-free field of RMS speed 1 (the prior of random noise)."""

    def __init__(self, grid):
        import jax.numpy as jnp

        import bench_navier_stokes as bns
        self.bns, self.grid = bns, grid
        _, prior = bns.jax_navier_stokes(grid)
        u0 = np.asarray(prior(jnp.asarray(np.random.default_rng(0).normal(size=(2, grid, grid)))))
        self.args = (u0 / np.sqrt(np.mean(u0 ** 2)),)
        self.carry = 2 * grid * grid * 8
        self.marker = "fft"  # two per evaluation of the step, two per its VJP
        self.title = (f"Navier-Stokes step (examples/navier_stokes.py make_step) on a (2, {grid}, "
                      f"{grid}) float64 velocity; gradient of sum(u_N^2)/2 wrt u_0")

    def tg_step(self, tg):
        return self.bns.ns.make_step(self.grid)

    def jax_step(self, jnp):
        return self.bns.jax_navier_stokes(self.grid)[0]

    def loss(self, xp, c):
        return 0.5 * xp.sum(c * c)


def _has_equinox():
    """Whether Equinox is installed (the ``bench`` extra); without it its rows are skipped."""
    try:
        import equinox  # noqa: F401
    except ImportError:
        return False
    return True


def equinox_default(n):
    """Equinox's default number of checkpoints for ``max_steps=n`` (its
    ``checkpointed_while_loop``: the largest s with ``2 n < (s + 1)(s + 2)``)."""
    return 1 if n == 1 else math.floor(-1.5 + math.sqrt(2 * n + 0.25)) + 1


def ours(tg, work, n, schedule, counter):
    """``tg.function(tg.grad(loss))`` of the scan of ``work``'s step, ``checkpoints=schedule``;
    a ``tg.checkpointing.Online`` schedule: a ``tg.while_loop`` of the step while a loop-carried
    count is below ``n``, with no ``maximum_iterations`` (its trip count found as it runs)."""
    step = work.tg_step(tg)

    def loss(c0, *params):
        def body(c, _):
            counter[0] += 1
            return step(c, *params), None

        if isinstance(schedule, tg.checkpointing.Online):
            c, _ = tg.while_loop(lambda c, k: k < n, lambda c, k: (body(c, None)[0], k + 1),
                                 (c0, tg.constant(0)), checkpoints=schedule)
            return work.loss(tg, c)
        return work.loss(tg, tg.lax.scan(body, c0, None, length=n, checkpoints=schedule)[0])

    return tg.function(tg.grad(loss, argnums=tuple(range(len(work.args)))))


def peer(work, n, kind, slots, counter):
    """``jax.jit(jax.grad(loss))`` of the loop as a JAX or Equinox user writes it: ``kind`` is
    ``"scan"`` (plain ``lax.scan``), ``"checkpoint"`` (``lax.scan`` of a ``jax.checkpoint``-ed
    step) or ``"equinox"`` (the checkpointed while loop with ``slots`` checkpoints)."""
    import jax
    import jax.numpy as jnp

    step = work.jax_step(jnp)

    def loss(c0, *params):
        def advance(c):
            counter[0] += 1
            return step(c, *params)

        if kind == "equinox":
            import equinox.internal as eqxi

            _, c = eqxi.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, advance(s[1])),
                                   (0, c0), max_steps=n, kind="checkpointed", checkpoints=slots)
        else:
            body = lambda c, _: (advance(c), None)  # noqa: E731
            body = jax.checkpoint(body) if kind == "checkpoint" else body
            c, _ = jax.lax.scan(body, c0, None, length=n)
        return work.loss(jnp, c)

    return jax.jit(jax.grad(loss, argnums=tuple(range(len(work.args)))))


def _best(fn, args, repeats, wait):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        wait(fn(*args))
        times.append(time.perf_counter() - t)
    return min(times)


def measure_ours(tg, jax, work, n, schedule, repeats):
    """``(best, temp bytes, compile, first call, traces, gradient, marker ops)`` of ours."""
    from tapegrad import _function

    args = tuple(tg.constant(a) for a in work.args)
    counter, traced = [0], []
    fn = ours(tg, work, n, schedule, counter)
    init = _function._Program.__init__

    def timed_init(self, *a, **k):  # tapegrad's trace (into a jaxpr), timed
        t = time.perf_counter()
        init(self, *a, **k)
        traced.append(time.perf_counter() - t)

    _function._Program.__init__ = timed_init
    try:
        t = time.perf_counter()
        g = fn(*args)
        np.asarray(g[0].numpy())
        first = time.perf_counter() - t
    finally:
        _function._Program.__init__ = init
    traces = counter[0]
    best = _best(fn, args, repeats, lambda out: np.asarray(out[0].numpy()))
    (program,) = fn._programs.values()  # one signature, no Variables
    jax.clear_caches()  # JAX's lowering and XLA's compile again, timed
    t = time.perf_counter()
    with tg.config.x64_scope(jax):  # as tapegrad runs its float64 programs
        compiled = program.compiled.lower(*(a._value for a in args)).compile()
    compile_s = sum(traced) + time.perf_counter() - t
    temp = compiled.memory_analysis().temp_size_in_bytes
    return (best, temp, compile_s, first, traces, [x.numpy() for x in g],
            _count(compiled, work.marker))


def measure_peer(jax, work, n, kind, slots, repeats):
    """``(best, temp bytes, compile, None, traces, gradient, marker ops)`` of a peer."""
    args = tuple(jax.device_put(a) for a in work.args)
    counter = [0]
    fn = peer(work, n, kind, slots, counter)
    jax.clear_caches()
    t = time.perf_counter()
    lowered = fn.lower(*args)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t
    traces = counter[0]
    temp = compiled.memory_analysis().temp_size_in_bytes
    g = jax.block_until_ready(compiled(*args))
    best = _best(compiled, args, repeats, jax.block_until_ready)
    return (best, temp, compile_s, None, traces, [np.asarray(x) for x in g],
            _count(compiled, work.marker))


def _count(compiled, marker):
    """How many ``marker`` ops XLA's optimized program has: the copies of the step it runs."""
    return compiled.as_text().count(f" {marker}(")


def forward_time(tg, work, n, repeats):
    """The time of one forward step: a compiled forward-only scan over ``n``, over ``n``."""
    step = work.tg_step(tg)
    args = tuple(tg.constant(a) for a in work.args)
    fn = tg.function(lambda c0, *p: tg.lax.scan(lambda c, _: (step(c, *p), None), c0, None,
                                                length=n)[0])
    fn(*args)
    return _best(fn, args, repeats, lambda out: np.asarray(out.numpy())) / n


def run(tg, jax, work, args, memo):
    """Print the rows of one step for each N; ``memo`` keeps ``t(every step)`` per step."""
    from tapegrad.checkpointing import forward_steps

    print(work.title + f" (a carry is {work.carry / 2**10:.1f} KiB)")
    for n in args.steps:
        store_all = n * work.carry <= args.store_all_limit_mib * 2**20
        default = equinox_default(n)
        slots = list(dict.fromkeys([*args.slots, default]))
        t_forward = forward_time(tg, work, n, args.repeats)
        rows = {}
        if store_all:
            rows["ours every step"] = (None, measure_ours(tg, jax, work, n, None, args.repeats))
        for s in slots:
            rows[f"ours Revolve({s})"] = (s, measure_ours(tg, jax, work, n, s, args.repeats))
        for s in args.slots:  # the online schedule of a while loop: no bound needed
            rows[f"ours online while({s})"] = (tg.checkpointing.Online(s), measure_ours(
                tg, jax, work, n, tg.checkpointing.Online(s), args.repeats))
        if args.peers:
            if store_all:
                rows["jax lax.scan"] = (None, measure_peer(jax, work, n, "scan", None,
                                                           args.repeats))
                rows["jax lax.scan+checkpoint"] = (None, measure_peer(
                    jax, work, n, "checkpoint", None, args.repeats))
            for s in slots if _has_equinox() else ():
                rows[f"equinox ckpt while({s})"] = (s, measure_peer(jax, work, n, "equinox", s,
                                                                    args.repeats))
        if store_all:
            memo[type(work)] = rows["ours every step"][1][0] / n
        t_all = memo.get(type(work), math.nan) * n
        reference = next(iter(rows.values()))[1][5]
        print(f"N={n}" + ("" if store_all else f" (O(N)-carry programs skipped: {n} carries "
                          f"> {args.store_all_limit_mib} MiB; t(every step) extrapolated)")
              + f"; t(forward step) {t_forward * 1e6:.1f} us; Equinox's default s = {default}")
        print(f"  {'program':26s} {'XLA temp':>10s} {'traces':>6s} {'p(N,s)/N':>8s} "
              f"{work.marker:>5s} {'compile':>8s} {'gradient':>10s} {'1st call':>8s} "
              f"{'t/pred':>6s} "
              f"{'|diff|':>7s}")
        for name, (s, (best, temp, compile_s, first, traces, g, ops)) in rows.items():
            ours_row = first is not None
            if isinstance(s, tg.checkpointing.Online):  # the sweep ran in the primal loop
                p = s.forward_steps(n) - (n - 1)
            else:
                p = forward_steps(n, s) if ours_row and s is not None else 0
            ratio = best / (t_all + p * t_forward) if ours_row else math.nan
            diff = max(float(np.abs(a - b).max()) for a, b in zip(g, reference))
            print(f"  {name:26s} {temp / work.carry:10.1f} {traces:6d} "
                  f"{p / n if ours_row and s else math.nan:8.2f} {ops:5d} {compile_s:7.2f}s "
                  f"{best * 1e3:8.1f}ms {first if ours_row else math.nan:7.2f}s {ratio:6.2f} "
                  f"{diff:7.1e}")
        for s in slots if args.peers and _has_equinox() else ():
            (b, m, c), (be, me, ce) = (rows[f"ours Revolve({s})"][1][:3],
                                       rows[f"equinox ckpt while({s})"][1][:3])
            print(f"  ours Revolve({s}) / equinox({s}): time {b / be:.2f} (target <= 0.9), "
                  f"compile {c / ce:.2f} (target <= 1), XLA temp {m / me:.2f}")
        if args.peers and store_all:
            bj, mj, cj = rows["jax lax.scan+checkpoint"][1][:3]
            for s in slots:
                b, m, c = rows[f"ours Revolve({s})"][1][:3]
                print(f"  ours Revolve({s}) / jax lax.scan+checkpoint: time {b / bj:.2f}, "
                      f"compile {c / cj:.2f}, XLA temp {m / mj:.3f}")
        sys.stdout.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--step", choices=["cheap", "ns", "both"], default="cheap")
    parser.add_argument("--size", type=int, default=10_000, help="the cheap step's numbers")
    parser.add_argument("--grid", type=int, default=32, help="the Navier-Stokes grid")
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--slots", type=int, nargs="+", default=[10, 40])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure jax.lax.scan and Equinox's checkpointed while loop")
    parser.add_argument("--store-all-limit-mib", type=float, default=1024)
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jax

    jax.config.update("jax_enable_x64", True)  # this process's peers run in float64
    import tapegrad as tg

    memo = {}
    if args.peers and not _has_equinox():
        print("Equinox is not installed (pip install -e .[jit,bench]): its rows are skipped")
    if args.step in ("cheap", "both"):
        run(tg, jax, Cheap(args.size), args, memo)
    if args.step in ("ns", "both"):
        run(tg, jax, NavierStokes(args.grid), args, memo)


if __name__ == "__main__":
    main()
