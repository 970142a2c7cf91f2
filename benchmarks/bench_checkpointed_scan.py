"""Measure ``tg.lax.scan(..., checkpoints=s)`` compiled: the memory and time of one gradient of
a scanned step against keeping every carry (issue 31).

Run ``python benchmarks/bench_checkpointed_scan.py [--size 10000] [--steps 1000 10000]
[--slots 10 40]``. The step is a cheap nonlinear map of ``--size`` float64 numbers,
``c -> sin(1.1 c) * w + 0.01 c``, with ``w`` a captured parameter; the loss is the sum of the
last carry, differentiated with respect to the initial carry and ``w`` inside one
``tg.function``. For each N and each schedule (every step, ``Revolve(s)``) it prints:

* XLA's temporary buffers of the compiled gradient (``memory_analysis()``) in carries (one
  carry is ``size * 8`` bytes); target: at most ``s + 2`` carries with ``Revolve(s)``;
* the body's traces (target <= 2) and the step evaluations the plan makes
  (``N + p(N, s)`` replayed, by ``tg.checkpointing.forward_steps``);
* the time of one gradient (best of ``--repeats``), and its ratio to the prediction
  ``t(every step) + p(N, s) * t(forward step)`` (target <= 1.15), where ``t(forward step)`` is
  a forward-only scan's time over N.

Nothing is asserted; compare runs on the same quiet machine.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def _gradient(tg, n, schedule, counter):
    def step(c, _):
        counter[0] += 1
        return tg.sin(1.1 * c) * w_ref[0] + 0.01 * c, None

    w_ref = [None]

    def loss(c0, w):
        w_ref[0] = w
        return tg.sum(tg.lax.scan(step, c0, None, length=n, checkpoints=schedule)[0])

    return tg.function(tg.grad(loss, argnums=(0, 1)))


def _best(fn, args, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn(*args)
        np.asarray(out[0].numpy())
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--slots", type=int, nargs="+", default=[10, 40])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    import jax

    import tapegrad as tg
    from tapegrad.checkpointing import forward_steps

    c0 = tg.constant(np.linspace(-1.0, 1.0, args.size))
    w = tg.constant(np.full(args.size, 0.9))
    carry = args.size * 8
    print(f"step: c -> sin(1.1 c) w + 0.01 c on {args.size} float64 numbers (a carry is "
          f"{carry / 2**20:.3f} MiB); gradient of sum(c_N) wrt c_0 and w, tg.function")
    for n in args.steps:
        forward = tg.function(lambda c0, w: tg.lax.scan(
            lambda c, _: (tg.sin(1.1 * c) * w + 0.01 * c, None), c0, None, length=n)[0])
        forward(c0, w)
        t_forward = _best(lambda a, b: (forward(a, b),), (c0, w), args.repeats) / n
        results, reference = {}, None
        for schedule in [None, *args.slots]:
            counter = [0]
            fn = _gradient(tg, n, schedule, counter)
            t = time.perf_counter()
            g = fn(c0, w)
            first = time.perf_counter() - t
            traces = counter[0]
            (program,) = fn._programs.values()  # one signature: (c0, w), no Variables
            with tg.config.x64_scope(jax):  # as tapegrad runs its float64 programs
                temp = program.compiled.lower(c0._value, w._value).compile() \
                    .memory_analysis().temp_size_in_bytes
            best = _best(fn, (c0, w), args.repeats)
            if reference is None:
                reference = [x.numpy() for x in g]
            diff = max(float(np.abs(a.numpy() - b).max()) for a, b in zip(g, reference))
            results[schedule] = (best, temp, first, traces, diff)
        t_all = results[None][0]
        for schedule, (best, temp, first, traces, diff) in results.items():
            name = "every step" if schedule is None else f"Revolve({schedule})"
            p = 0 if schedule is None else forward_steps(n, schedule)
            predicted = t_all + p * t_forward
            mem = f"{temp / carry:.1f} carries"
            print(f"N={n:6d} {name:12s} XLA temp {mem:>15s}; traces {traces}; replayed "
                  f"steps {p} (p/N {p / n:.2f}); gradient {best * 1e3:8.1f} ms, first call "
                  f"{first:.2f} s; time / predicted {best / predicted:.2f} (target <= 1.15); "
                  f"|diff| {diff:.1e}")


if __name__ == "__main__":
    main()
