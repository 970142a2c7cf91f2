"""Measure tapegrad's overhead against hand-written NumPy (forward + manual backward).

Run ``python benchmarks/bench_overhead.py [--quick]``. Two measurements, printed as a table:

(a) a chain of 200 small elementwise ops (sin, multiply by a scalar, add a scalar, exp,
    multiply by the input) on a 16-element float64 vector: tapegrad forward + ``tape.gradient``
    against the same forward in NumPy with the backward written out by hand. Reported as the
    extra microseconds per op, ``(t_tapegrad - t_numpy) / 200``; target <= 3 us/op.
(b) one training step of a 784-512-512-10 ReLU MLP with softmax cross-entropy, batch 256,
    float32: forward, backward and an SGD update, tapegrad against hand-written NumPy.
    Reported as the time ratio; target <= 1.15x.

Times are per call, the median (and minimum) over several repeats of ``timeit``, the NumPy and
tapegrad runs alternating. Nothing is
asserted: these are measurements, see benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import timeit

import numpy as np

import tapegrad as tg

N_OPS = 200
CYCLE = 5  # ops per cycle of the chain: sin, * 0.9, + 0.1, exp, * x0


# --- (a) elementwise chain --------------------------------------------------------------------
def chain(x, sin=tg.sin, exp=tg.exp):
    """The chain's forward: ``N_OPS`` ops, ``CYCLE`` per cycle, with the given ``sin``/``exp``."""
    y = x
    for _ in range(N_OPS // CYCLE):
        y = sin(y)
        y = y * 0.9
        y = y + 0.1
        y = exp(y)
        y = y * x
    return y


def chain_tapegrad(x0):
    """Forward + gradient of ``sum(chain(x0))`` with tapegrad; returns the gradient array."""
    x = tg.constant(x0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = chain(x)
    return tape.gradient(y, x, output_gradients=tg.ones_like(y))._value


def chain_numpy(x0):
    """The same forward in NumPy and its backward written out by hand; returns the gradient."""
    saved = []
    y = x0
    for _ in range(N_OPS // CYCLE):
        a = y
        b = np.sin(a)
        c = b * 0.9
        d = c + 0.1
        e = np.exp(d)
        y = e * x0
        saved.append((a, e))
    g = np.ones_like(y)
    gx = np.zeros_like(x0)
    for a, e in reversed(saved):
        gx += g * e  # d(e * x0)/dx0
        g = g * x0  # d(e * x0)/de
        g = g * e  # exp' = exp
        g = g * 0.9  # the + 0.1 passes g unchanged
        g = g * np.cos(a)
    return gx + g


# --- (b) MLP training step --------------------------------------------------------------------
def make_mlp(seed=0, sizes=(784, 512, 512, 10), batch=256):
    """Random float32 data ``(x, labels)`` and He-initialised weights ``[w1, b1, ...]``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    labels = rng.integers(0, sizes[-1], size=batch)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append((rng.normal(size=(fan_in, fan_out)) * np.sqrt(2.0 / fan_in))
                      .astype(np.float32))
        params.append(np.zeros(fan_out, dtype=np.float32))
    return x, labels, params


def step_numpy(x, labels, params, lr=0.01):
    """One SGD step of the MLP in NumPy with a hand-written backward; returns the loss."""
    w1, b1, w2, b2, w3, b3 = params
    n = x.shape[0]
    z1 = x @ w1 + b1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w2 + b2
    h2 = np.maximum(z2, 0)
    logits = h2 @ w3 + b3
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    s = e.sum(axis=1, keepdims=True)
    logp = shifted - np.log(s)
    loss = -logp[np.arange(n), labels].mean()
    dlogits = e / s
    dlogits[np.arange(n), labels] -= 1
    dlogits /= n
    dw3, db3 = h2.T @ dlogits, dlogits.sum(0)
    dz2 = (dlogits @ w3.T) * (z2 > 0)
    dw2, db2 = h1.T @ dz2, dz2.sum(0)
    dz1 = (dz2 @ w2.T) * (z1 > 0)
    dw1, db1 = x.T @ dz1, dz1.sum(0)
    for p, g in zip(params, (dw1, db1, dw2, db2, dw3, db3)):
        p -= lr * g
    return float(loss)


def mlp_loss(x, labels, variables):
    """The MLP's mean softmax cross-entropy in tapegrad (``variables``: ``[w1, b1, ...]``)."""
    w1, b1, w2, b2, w3, b3 = variables
    h1 = tg.nn.relu(tg.matmul(x, w1) + b1)
    h2 = tg.nn.relu(tg.matmul(h1, w2) + b2)
    logits = tg.matmul(h2, w3) + b3
    return tg.mean(tg.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def make_step_tapegrad(x, labels, params, lr=0.01):
    """A closure running one SGD step of the same MLP in tapegrad; returns the loss."""
    x = tg.constant(x)
    labels = tg.constant(labels)
    variables = [tg.Variable(p) for p in params]
    opt = tg.optimizers.SGD(learning_rate=lr)

    def step():
        with tg.GradientTape() as tape:
            loss = mlp_loss(x, labels, variables)
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return float(loss)

    return step


# --- timing -----------------------------------------------------------------------------------
def pin_allocator():
    """Fix glibc malloc's mmap and trim thresholds (32 and 64 MiB) for this process.

    glibc raises both thresholds when a large mmapped block is freed, so whether a 200 KB array
    (a 784x64 float32 gradient) costs fresh pages on every step depends on what the process did
    before: the hand-written NumPy W3 step took about 90 or 170 us in one process depending on
    it (and on whether the tapegrad step beside it updated its Variables in place). Pinned, both
    sides of a comparison run under the same allocator. A no-op where libc has no ``mallopt``.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError, TypeError):
        pass


def print_table(rows, width):
    """Print ``{measurement: (value, target)}`` as a table with a ``width``-wide name column."""
    print(f"{'measurement':{width}s} {'value':>10s}   target")
    print("-" * (width + 24))
    for name, (value, target) in rows.items():
        print(f"{name:{width}s} {value:10.2f}   {target}")


def time_pair(numpy_fn, tapegrad_fn, number, repeat):
    """Per-call seconds ``(numpy, tapegrad)``, each as ``(median, min)`` over ``repeat`` runs.

    The two are timed alternately (one run of ``number`` calls each, ``repeat`` times), so a
    change in machine load affects both alike.
    """
    runs_np, runs_tg = [], []
    for _ in range(repeat):
        runs_np.append(timeit.timeit(numpy_fn, number=number) / number)
        runs_tg.append(timeit.timeit(tapegrad_fn, number=number) / number)
    return ((statistics.median(runs_np), min(runs_np)),
            (statistics.median(runs_tg), min(runs_tg)))


def main(argv=None):
    """Run both benchmarks, print the table and return the measured figures as a dict."""
    parser = argparse.ArgumentParser(description="tapegrad overhead against hand-written NumPy")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    reps = 3 if args.quick else 9
    pin_allocator()

    x0 = np.random.default_rng(0).normal(size=16)
    np.testing.assert_allclose(chain_tapegrad(x0), chain_numpy(x0), rtol=1e-10)
    (t_np, t_np_min), (t_tg, t_tg_min) = time_pair(
        lambda: chain_numpy(x0), lambda: chain_tapegrad(x0), 20 if args.quick else 200, reps)
    per_op = (t_tg - t_np) / N_OPS * 1e6
    per_op_min = (t_tg_min - t_np_min) / N_OPS * 1e6

    x, labels, params = make_mlp()
    step_tg = make_step_tapegrad(x, labels, params)
    params_np = [p.copy() for p in params]
    l_np, l_tg = step_numpy(x, labels, params_np), step_tg()
    assert abs(l_np - l_tg) < 1e-4 * max(1.0, abs(l_np)), (l_np, l_tg)
    (m_np, m_np_min), (m_tg, m_tg_min) = time_pair(
        lambda: step_numpy(x, labels, params_np), step_tg, 2 if args.quick else 5, reps)
    ratio, ratio_min = m_tg / m_np, m_tg_min / m_np_min

    rows = [
        ("(a) 200-op chain, NumPy fwd+manual bwd", f"{t_np * 1e6:9.1f} us", ""),
        ("(a) 200-op chain, tapegrad fwd+gradient", f"{t_tg * 1e6:9.1f} us", ""),
        ("(a) overhead per op (median / min)", f"{per_op:5.2f} / {per_op_min:.2f} us",
         "<= 3 us/op"),
        ("(b) MLP step, NumPy hand-written", f"{m_np * 1e3:9.2f} ms", ""),
        ("(b) MLP step, tapegrad", f"{m_tg * 1e3:9.2f} ms", ""),
        ("(b) ratio tapegrad / NumPy (median / min)", f"{ratio:5.2f}x / {ratio_min:.2f}x",
         "<= 1.15x"),
    ]
    print(f"{'measurement':44s} {'result':>22s}   target")
    print("-" * 80)
    for name, value, target in rows:
        print(f"{name:44s} {value:>22s}   {target}")
    return {"chain_numpy_s": t_np, "chain_tapegrad_s": t_tg, "overhead_us_per_op": per_op,
            "mlp_numpy_s": m_np, "mlp_tapegrad_s": m_tg, "mlp_ratio": ratio}


if __name__ == "__main__":
    main()
