"""Dask: what laziness and scheduling cost in memory, and data out of core.

Run ``python benchmarks/bench_dask.py [--rows N] [--repeats R] [--out-of-core 5,10,20]
[--steps K] [--skip-in-memory] [--skip-out-of-core]``. Needs the ``dask`` extra.

1. **In memory** (``--rows``, default 4 million, x 16 float64: 512 MB): one full-batch
   gradient of the example's logistic-regression loss
   (``tapegrad.examples.distributed_regression.loss_fn``, with its custom-gradient
   log-sigmoid) wrt ``w`` and ``b``: the tape, ``tape.gradient`` and ``tg.compute(loss,
   grads)`` on a ``LocalCluster`` of 2 worker processes (one thread each) holding the data
   (persisted in chunks of 500 000 rows), against the same function on NumPy arrays in this
   process. Both give the same numbers (checked to 1e-10) before they are timed; the figures
   are the median of ``--repeats`` runs, and the ratio is Dask over NumPy (target <= 1.3).
   The data are persisted once both workers have joined (``wait_for_workers``: otherwise the
   first worker up may get every chunk) and timed once they are in memory; the scheduler
   decides where the 4 chunks of ``x`` go (printed per worker).
2. **Out of core**: the example (20 million rows = 2.5 GB generated chunk by chunk on 2 workers
   with 1.5 GiB each) at each row count of ``--out-of-core`` (millions), ``--steps`` steps each
   (default 3), each on a fresh cluster: seconds per step (mean over steps 2..K) and the peak
   resident memory of the largest worker; seconds per step per million rows shows whether
   the time grows linearly with the rows.

Nothing is asserted. The machine's load changes the times; compare runs on one machine.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tapegrad as tg
from tapegrad.examples import distributed_regression as example


def gradient(x, y, w, b):
    """The loss and its gradients wrt ``w`` and ``b``, evaluated (``tg.compute``: one graph
    on Dask; a no-op on NumPy)."""
    with tg.GradientTape() as tape:
        loss = example.loss_fn(x, y, w, b)
    grads = tape.gradient(loss, [w, b])
    return tg.compute(loss, grads)


CHUNK_ROWS = 1_000_000  # 128 MB chunks of x: 2 per worker


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def in_memory(rows, repeats):
    import dask
    from dask.distributed import Client, LocalCluster, wait

    w = tg.Variable(np.random.default_rng(1).normal(size=example.FEATURES) * 0.1)
    b = tg.Variable(0.05)
    # NumPy first, with no cluster running: idle Dask processes (heartbeats, memory monitors)
    # make one-process timings erratic on a 2-core machine
    x, y, _ = example.make_data(rows, CHUNK_ROWS, seed=0)
    x_np, y_np = (tg.asarray(a) for a in dask.compute(x, y, scheduler="threads"))
    on_numpy = gradient(x_np, y_np, w, b)
    t_numpy = _median_time(lambda: gradient(x_np, y_np, w, b), repeats)
    del x_np, y_np
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        x, y = dask.persist(x, y)  # the data live on the workers, in chunks
        wait([x, y])
        placement = [sum(1 for k in keys if k[0] == x.name) for keys in client.has_what().values()]
        x, y = tg.asarray(x), tg.asarray(y)
        on_dask = gradient(x, y, w, b)
        for a, n in zip(on_dask[1] + [on_dask[0]], on_numpy[1] + [on_numpy[0]]):
            np.testing.assert_allclose(a.numpy(), n.numpy(), rtol=1e-10, atol=1e-12)
        t_dask = _median_time(lambda: gradient(x, y, w, b), repeats)
    print(f"\n1. in memory: {rows:,} x {example.FEATURES} float64, one full-batch gradient "
          f"(median of {repeats}, min in brackets)")
    print(f"   tapegrad on NumPy, 1 process:      {t_numpy[0]:.3f} s ({t_numpy[1]:.3f})")
    print(f"   tapegrad on Dask, 2 workers:       {t_dask[0]:.3f} s ({t_dask[1]:.3f}); "
          f"chunks of x per worker {placement} (the scheduler places them; 2 and 2 is balanced)")
    print(f"   ratio Dask / NumPy: {t_dask[0] / t_numpy[0]:.2f} (target <= 1.3); "
          f"speed-up {t_numpy[0] / t_dask[0]:.2f}x")


def out_of_core(millions, steps):
    rows_out = []
    for m in millions:
        rows = int(m * 1_000_000)
        print(f"\n2. out of core: {rows:,} rows, {steps} steps")
        result = example.main(["--rows", str(rows), "--steps", str(steps)])
        rows_out.append((m, result))
    print("\n   rows (M) | s/step | s/step per M rows | peak worker memory (GiB, limit 1.5)")
    for m, r in rows_out:
        print(f"   {m:8g} | {r['seconds_per_step']:6.2f} | {r['seconds_per_step'] / m:17.3f} | "
              f"{r['peak_worker_memory_gib']:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out-of-core", default="5,10,20", help="row counts in millions")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--skip-in-memory", action="store_true")
    parser.add_argument("--skip-out-of-core", action="store_true")
    args = parser.parse_args()
    if not args.skip_in_memory:
        in_memory(args.rows, args.repeats)
    if not args.skip_out_of_core:
        out_of_core([float(m) for m in args.out_of_core.split(",")], args.steps)


if __name__ == "__main__":
    main()
