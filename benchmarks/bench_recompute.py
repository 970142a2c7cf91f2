"""Measure ``tg.recompute_grad``: peak memory and time of an MLP step, unwrapped and wrapped.

Run ``python benchmarks/bench_recompute.py [--quick]``. The model is a 16-layer 1024-wide MLP
(``h = tanh(h @ W + b)``, batch 256, float32, loss = mean of the squared output); one step is
the forward under a ``GradientTape`` and ``tape.gradient`` with respect to the 32 Variables
(the optimizer update, the same for every variant, is left out). Three variants:

* ``unwrapped``: the plain layers;
* ``every layer wrapped``: each layer call is ``tg.recompute_grad(layer)`` (issue 9's target:
  peak <= 1/2 of unwrapped, time <= 1.4x);
* ``blocks of 4 wrapped``: ``tg.recompute_grad`` of four layers at a time (sqrt(16)
  checkpoints, the classic schedule), for comparison.

Memory is measured with ``tracemalloc`` (NumPy reports its buffers to it), above what the
weights and the data take: ``held`` is what the tape keeps when the forward returns (records
and the loss), ``peak`` the most alive at once during the forward and the gradient, which
includes the 64 MiB of weight gradients the step returns. Time is the median (and minimum)
over repeats, the variants alternating, without tracemalloc. Every variant's gradients are
checked against the unwrapped ones first. Nothing is asserted. For steadier times pin BLAS to
one thread (``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``).
"""
from __future__ import annotations

import argparse
import functools
import gc
import statistics
import time

import numpy as np

import tapegrad as tg
from bench_memory import tape_memory

LAYERS, WIDTH, BATCH = 16, 1024, 256


def make_model(seed=0):
    """``(x, variables)``: the data and the weights ``[W0, b0, W1, b1, ...]`` (float32)."""
    rng = np.random.default_rng(seed)
    x = tg.constant(rng.normal(size=(BATCH, WIDTH)).astype(np.float32))
    variables = []
    for _ in range(LAYERS):
        w = rng.normal(scale=1 / np.sqrt(WIDTH), size=(WIDTH, WIDTH)).astype(np.float32)
        variables += [tg.Variable(w), tg.Variable(np.zeros(WIDTH, np.float32))]
    return x, variables


def layer(h, w, b):
    return tg.tanh(tg.matmul(h, w) + b)


def layers(h, *wb):
    """Several layers in a row: ``wb`` is ``(W, b, W, b, ...)``."""
    for w, b in zip(wb[::2], wb[1::2]):
        h = layer(h, w, b)
    return h


def forward(x, variables, block):
    """The loss under a new tape, ``block`` layers per call of a ``tg.recompute_grad``-wrapped
    function (``block=0``: unwrapped). Returns ``(tape, loss)`` and nothing else."""
    fn = tg.recompute_grad(layers) if block else layers
    step = block or LAYERS
    with tg.GradientTape() as tape:
        h = x
        for i in range(0, 2 * LAYERS, 2 * step):
            h = fn(h, *variables[i:i + 2 * step])
        loss = tg.mean(h * h)
    return tape, loss


def step(x, variables, block):
    tape, loss = forward(x, variables, block)
    return tape.gradient(loss, variables)


def timing(x, variables, repeats):
    """``{block: [seconds of one step, ...]}``, the variants alternating in every repeat so
    that a change in machine load affects them alike."""
    times = {block: [] for _, block in VARIANTS}
    for _ in range(repeats):
        for block in times:
            gc.collect()
            t0 = time.perf_counter()
            step(x, variables, block)
            times[block].append(time.perf_counter() - t0)
    return times


VARIANTS = (("unwrapped", 0), ("every layer wrapped", 1), ("blocks of 4 wrapped", 4))


def main(argv=None):
    """Print the table; return ``{variant: {"held", "peak", "median", "min"}}``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing repeats")
    repeats = 3 if parser.parse_args(argv).quick else 11
    x, variables = make_model()
    reference = [g.numpy() for g in step(x, variables, 0)]
    for name, block in VARIANTS[1:]:
        for g, r in zip(step(x, variables, block), reference):
            np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-6, err_msg=name)
    times = timing(x, variables, repeats)
    results = {}
    for name, block in VARIANTS:
        held, peak = tape_memory(functools.partial(forward, x, variables, block), variables)
        results[name] = {"held": held, "peak": peak, "median": statistics.median(times[block]),
                         "min": min(times[block])}
    base = results["unwrapped"]
    print(f"{LAYERS}-layer {WIDTH}-wide tanh MLP, batch {BATCH}, float32: forward + gradient "
          f"({repeats} timing repeats)")
    print(f"{'variant':22s} {'held MiB':>9s} {'peak MiB':>9s} {'peak/unw':>9s} "
          f"{'median s':>9s} {'min s':>7s} {'time/unw':>9s} {'min/unw':>8s}")
    print("-" * 81)
    for name, r in results.items():
        print(f"{name:22s} {r['held'] / 2**20:9.1f} {r['peak'] / 2**20:9.1f} "
              f"{r['peak'] / base['peak']:9.2f} {r['median']:9.3f} {r['min']:7.3f} "
              f"{r['median'] / base['median']:9.2f} {r['min'] / base['min']:8.2f}")
    return results


if __name__ == "__main__":
    main()
