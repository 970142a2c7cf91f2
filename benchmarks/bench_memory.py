"""Measure the memory a GradientTape holds for one W2 step (the MLP of bench_overhead.py).

Run ``python benchmarks/bench_memory.py``. The forward of the 784-512-512-10 ReLU MLP (batch
256, float32, softmax cross-entropy) runs under a tape inside a function that returns only the
loss, so every intermediate array still alive afterwards is held by the tape's records. The
table gives, measured with ``tracemalloc`` (NumPy reports its array buffers to it):

* ``held by the tape``: bytes allocated by the forward and still alive when it returns (the
  records' arrays, plus the loss);
* ``peak of the step``: the most bytes alive at once during forward and ``tape.gradient``,
  above what the weights and data already take;
* the same figures for hand-written NumPy, which keeps exactly what its backward reads
  (``z1``, ``h1``, ``z2``, ``h2``, the softmax), as the reference.

Nothing is asserted; the figures do not depend on machine load.
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np

import tapegrad as tg
from bench_overhead import make_mlp, mlp_loss


def forward(x, labels, variables):
    """The MLP's loss, computed under a new tape; returns ``(tape, loss)`` and nothing else."""
    with tg.GradientTape() as tape:
        loss = mlp_loss(x, labels, variables)
    return tape, loss


def forward_numpy(x, labels, params):
    """The arrays hand-written NumPy keeps for its backward (see bench_overhead.step_numpy)."""
    w1, b1, w2, b2, w3, b3 = params
    z1 = x @ w1 + b1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w2 + b2
    h2 = np.maximum(z2, 0)
    logits = h2 @ w3 + b3
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    p = e / e.sum(axis=1, keepdims=True)
    return z1 > 0, h1, z2 > 0, h2, p


def tape_memory(forward_fn, sources):
    """``(held, peak)`` bytes of ``tape, loss = forward_fn()`` and then
    ``tape.gradient(loss, sources)``, above what was alive before: what the tape holds when
    the forward returns, and the most alive at once during both."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    tape, loss = forward_fn()
    held = tracemalloc.get_traced_memory()[0] - base
    grads = tape.gradient(loss, sources)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    del tape, loss, grads
    return held, peak


def measure():
    """``{"tape_held": bytes, "tape_peak": bytes, "numpy_held": bytes}`` for one W2 step."""
    x, labels, params = make_mlp()
    xt, lt = tg.constant(x), tg.constant(labels)
    variables = [tg.Variable(p) for p in params]
    forward(xt, lt, variables)  # warm up caches (op tables, namespaces)
    held, peak = tape_memory(lambda: forward(xt, lt, variables), variables)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    kept = forward_numpy(x, labels, params)
    numpy_held = tracemalloc.get_traced_memory()[0] - base
    del kept
    tracemalloc.stop()
    return {"tape_held": held, "tape_peak": peak, "numpy_held": numpy_held}


def main():
    """Print the table; return the figures."""
    m = measure()
    print(f"{'W2 step (784-512-512-10, batch 256, float32)':48s} {'MiB':>8s}")
    print("-" * 58)
    print(f"{'held by the tape after the forward':48s} {m['tape_held'] / 2**20:8.2f}")
    print(f"{'peak of forward + gradient':48s} {m['tape_peak'] / 2**20:8.2f}")
    print(f"{'hand-written NumPy keeps for its backward':48s} {m['numpy_held'] / 2**20:8.2f}")
    print(f"{'ratio tape / NumPy (held)':48s} {m['tape_held'] / m['numpy_held']:8.2f}")
    return m


if __name__ == "__main__":
    main()
