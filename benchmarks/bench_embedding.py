"""An embedding training step with the dense gradient against the ``IndexedSlices`` one, in
one process (issue 33, item 5).

Run ``OMP_NUM_THREADS=1 python benchmarks/bench_embedding.py [--quick]`` (the compiled rows
need the ``jit`` extra). A 200000x64 float32 table (51 MB), a batch of 1024 random ids, the
loss ``sum(embedding_lookup(table, ids)^2 * w)``, one optimizer step: SGD (row update) and
Adam (dense Adam from the dense gradient against lazy Adam, ``Adam(lazy=True)``, from the
IndexedSlices). Both gather from the Variable; the dense step takes the gradient with
``sparse=False`` (``GradientTape._gradient``, the pass tapegrad's own callers run): the dense
``ScatterAdd`` gradient tapegrad gave before IndexedSlices (a user gets it by reading the
Variable with ``v.read_value()`` first, which also copies the table). Both run eagerly on NumPy and compiled
(``tg.function``, JAX on the CPU). Each pair is checked to make the same update first (lazy
Adam agrees with Adam on the first step). Times: the median of the repeats, the two sides
alternating; a compiled step is waited for by fetching its loss (the update is in the same
program). Memory (eager): the peak ``tracemalloc`` size during one step (NumPy reports its
buffers to it) and the bytes of the gradient (dense: the array; sparse: values + indices).
Nothing is asserted.
"""
from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np

import tapegrad as tg

N, E, B = 200_000, 64, 1024


def make_step(opt, sparse, ids, weights):
    v = tg.Variable(np.zeros((N, E), np.float32), name="table")

    def gradient():
        with tg.GradientTape() as tape:
            e = tg.nn.embedding_lookup(v, ids)
            loss = tg.sum(e * e * weights)
        # dense: the pass as before IndexedSlices (what tapegrad's own callers get)
        return loss, tape._gradient(loss, v, None, "none", sparse)

    def step():
        loss, g = gradient()
        opt.apply_gradients([(g, v)])
        return loss

    return v, step, gradient


def grad_bytes(g):
    if isinstance(g, tg.IndexedSlices):
        return g.values.numpy().nbytes + g.indices.numpy().nbytes
    return g.numpy().nbytes


def measure(make_opt, compiled, repeat, rng):
    ids_np = rng.integers(0, N, size=B)
    init = rng.normal(size=(N, E)).astype(np.float32)
    ids, weights = tg.constant(ids_np), tg.constant(rng.uniform(size=E).astype(np.float32))
    sides = {}
    for sparse in (False, True):
        v, step, gradient = make_step(make_opt(sparse), sparse, ids, weights)
        v.assign(init)
        run = tg.function(step) if compiled else step
        run()  # the first step (traced when compiled)
        sides[sparse] = [v, run, gradient()[1]]
    np.testing.assert_allclose(sides[True][0].numpy(), sides[False][0].numpy(), rtol=1e-5,
                               atol=1e-6)
    times = {False: [], True: []}
    for _ in range(repeat):
        for sparse in (False, True):
            run = sides[sparse][1]
            t0 = time.perf_counter()
            run().numpy()  # waits for a compiled call (the loss and the update: one program)
            times[sparse].append(time.perf_counter() - t0)
    out = {}
    for sparse in (False, True):
        row = {"ms": 1e3 * statistics.median(times[sparse]),
               "grad MB": grad_bytes(sides[sparse][2]) / 1e6}
        if not compiled:
            run = sides[sparse][1]
            tracemalloc.start()
            run()
            row["peak MB"] = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
        out[sparse] = row
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args()
    repeat = 3 if args.quick else 15
    rng = np.random.default_rng(0)
    optimizers = {
        "SGD": lambda sparse: tg.optimizers.SGD(0.1),
        "Adam": lambda sparse: tg.optimizers.Adam(0.01, lazy=sparse),
    }
    print(f"table {N}x{E} float32 ({N * E * 4 / 1e6:.0f} MB), batch {B} ids; "
          "dense = today's dense gradient step, sparse = IndexedSlices step (Adam: lazy)")
    print(f"{'step':<22}{'dense ms':>10}{'sparse ms':>11}{'ratio':>7}"
          f"{'dense peak MB':>15}{'sparse peak MB':>16}{'ratio':>7}{'grad MB d/s':>15}")
    for compiled in (False, True):
        for name, make_opt in optimizers.items():
            r = measure(make_opt, compiled, repeat, rng)
            d, s = r[False], r[True]
            label = f"{name} {'compiled' if compiled else 'eager'}"
            mem = (f"{d['peak MB']:>15.1f}{s['peak MB']:>16.1f}"
                   f"{s['peak MB'] / d['peak MB']:>7.3f}" if not compiled else
                   f"{'-':>15}{'-':>16}{'-':>7}")
            print(f"{label:<22}{d['ms']:>10.2f}{s['ms']:>11.2f}{s['ms'] / d['ms']:>7.3f}{mem}"
                  f"{d['grad MB']:>8.1f}/{s['grad MB']:.2f}")


if __name__ == "__main__":
    main()
