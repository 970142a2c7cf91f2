"""``tg.function`` (XLA through JAX) against hand-written ``jax.jit`` code, and eager tapegrad
against hand-written NumPy, in one process.

Run ``OMP_NUM_THREADS=1 python benchmarks/bench_function.py [--quick]`` (needs the ``jit``
extra). Each row times the same computation written three ways where it applies: hand-written
NumPy (forward and a backward written out by hand: the reference), hand-written JAX
(``jax.jit`` of ``jax.grad``/``jax.jvp``: the peer) and tapegrad, compiled
(``tg.function(jit_compile=True)``) or eager. Every pair is checked to compute the same
numbers before it is timed; times are the median of several repeats, the two sides
alternating.

The compiled rows are timed as a JAX user runs the peer: data and parameters kept as JAX
arrays (tapegrad: the data as Tensors on the JAX device, ``tg.asarray(x, device=...)``, and
the Variables, which hold the device arrays the calls wrote), JAX's default (asynchronous)
dispatch, and one wait per timed block of calls (``jax.block_until_ready`` on the peer's last
result, ``.numpy()`` on tapegrad's). The rows marked "per-call NumPy" are the earlier
measurement, kept beside them: each call's result fetched as NumPy (``np.asarray``,
``.numpy()``), which waits for every call, with the peer's data as NumPy arrays. JAX's own
``JAX_CPU_ENABLE_ASYNC_DISPATCH=0`` runs both sides synchronously. Nothing is asserted.

* W1: a chain of 200 elementwise ops on a 16-element float64 vector, forward + gradient. Its
  row "best blocks" divides the two sides' fastest blocks instead of their medians: W1's
  program is so short that on a machine with few cores the median depends on how the call's
  Python (on the main thread) meets XLA's worker thread (``benchmarks/README.md``).
* W2: one SGD step of a 784-512-512-10 ReLU MLP, batch 256, float32.
* W3: one SGD step of a 784-64-64-10 ReLU MLP, batch 16, float32.
* W4: a Hessian-vector product of ``sum(tanh(A x)^2)``, n = 1000, float64 (tapegrad: reverse
  over reverse, two nested tapes; JAX: forward over reverse). The row "tg.hvp" times
  ``tg.hvp`` (forward over reverse, as the peer) against the peer, for comparison.
* the trace and XLA compile time of the digits demo's training step.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tapegrad as tg
from bench_overhead import (N_OPS, chain, chain_numpy, chain_tapegrad, make_mlp, pin_allocator,
                            print_table, step_numpy, time_pair)

from tapegrad._function import _jax  # noqa: E402

jax = _jax()
jax.config.update("jax_enable_x64", True)  # the peer in float64, as tg.function's programs
jnp = jax.numpy


def _ready(x):
    """The peer's result as NumPy (``np.asarray`` waits for it): the per-call NumPy rows."""
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(x)]


def time_blocks(peer, tapegrad, number, repeat):
    """Per-call seconds ``((median, best), (median, best))`` of the peer and tapegrad over
    ``repeat`` blocks, the two sides alternating, as ``time_pair``; a block is ``number`` calls
    with one wait at the end: the peer's last result with ``jax.block_until_ready``,
    tapegrad's with ``.numpy()``."""
    runs_peer, runs_tg = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            out = peer()
        jax.block_until_ready(out)
        runs_peer.append((time.perf_counter() - t0) / number)
        t0 = time.perf_counter()
        for _ in range(number):
            out = tapegrad()
        out.numpy()
        runs_tg.append((time.perf_counter() - t0) / number)
    return ((statistics.median(runs_peer), min(runs_peer)),
            (statistics.median(runs_tg), min(runs_tg)))


_DEVICE = jax.devices()[0]


# --- W1 ---------------------------------------------------------------------------------------
def _chain_jax(x):
    return jnp.sum(chain(x, jnp.sin, jnp.exp))


def w1(number, repeat):
    x0 = np.random.default_rng(0).normal(size=16)
    peer = jax.jit(jax.grad(_chain_jax))
    compiled = tg.function(_chain_tg, jit_compile=True)
    xt, xj, xd = tg.constant(x0), jnp.asarray(x0), tg.asarray(x0, device=_DEVICE)
    np.testing.assert_allclose(compiled(xd).numpy(), np.asarray(peer(xj)), rtol=1e-10)
    np.testing.assert_allclose(chain_tapegrad(x0), chain_numpy(x0), rtol=1e-10)
    (t_jit, best_jit), (t_tg, best_tg) = time_blocks(lambda: peer(xj), lambda: compiled(xd),
                                                     number, repeat)
    (t_jit_np, _), (t_tg_np, _) = time_pair(lambda: _ready(peer(x0)),
                                            lambda: compiled(xt).numpy(), number, repeat)
    (t_np, _), (t_eager, _) = time_pair(lambda: chain_numpy(x0), lambda: chain_tapegrad(x0),
                                        max(number // 10, 5), repeat)
    return {"W1 compiled / jax.jit": (t_tg / t_jit, "<= 1.25"),
            "W1 jax.jit (us)": (t_jit * 1e6, ""), "W1 compiled (us)": (t_tg * 1e6, ""),
            "W1 best blocks: compiled / jax.jit": (best_tg / best_jit, ""),
            "W1 per-call NumPy: compiled / jax.jit": (t_tg_np / t_jit_np, ""),
            "W1 per-call NumPy: jax.jit (us)": (t_jit_np * 1e6, ""),
            "W1 per-call NumPy: compiled (us)": (t_tg_np * 1e6, ""),
            "W1 eager overhead per op over NumPy (us)": ((t_eager - t_np) / N_OPS * 1e6, "<= 3")}


def _chain_tg(x):
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = chain(x)
    return tape.gradient(y, x, output_gradients=tg.ones_like(y))


# --- W2, W3: MLP SGD steps ----------------------------------------------------------------------
def _mlp_loss_jax(params, x, labels):
    w1, b1, w2, b2, w3, b3 = params
    h = jax.nn.relu(x @ w1 + b1)
    h = jax.nn.relu(h @ w2 + b2)
    logits = h @ w3 + b3
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(x.shape[0]), labels])


def mlp(sizes, batch, number, repeat, tag, target="<= 1.05", compiled_only=False):
    x, labels, params = make_mlp(sizes=sizes, batch=batch)
    lr = 0.01

    @jax.jit
    def peer(params, x, labels):
        loss, g = jax.value_and_grad(_mlp_loss_jax)(params, x, labels)
        return loss, [p - lr * gp for p, gp in zip(params, g)]

    jparams = [jnp.asarray(p) for p in params]
    xj, lj = jnp.asarray(x), jnp.asarray(labels)
    state = {"p": jparams}

    def run_peer():  # as a JAX user writes the loop: no wait
        loss, state["p"] = peer(state["p"], xj, lj)
        return loss

    def run_peer_numpy():
        loss, state["p"] = peer(state["p"], x, labels)
        return _ready(loss)

    xt, lt = tg.constant(x), tg.constant(labels)
    xd, ld = tg.asarray(x, device=_DEVICE), tg.asarray(labels, device=_DEVICE)

    def make_step():  # its own Variables: after compiled calls they hold JAX arrays
        variables = [tg.Variable(p) for p in params]
        opt = tg.optimizers.SGD(lr)

        def step(xb, yb):  # the batch as arguments, as the peer takes it
            with tg.GradientTape() as tape:
                loss = tg.mean(tg.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=yb, logits=_mlp_tg(variables, xb)))
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        return step

    step, compiled = make_step(), tg.function(make_step(), jit_compile=True)
    l_peer = float(peer(jparams, x, labels)[0])
    l_tg = float(compiled(xt, lt))
    assert abs(l_peer - l_tg) < 1e-4 * max(1.0, abs(l_peer)), (l_peer, l_tg)
    compiled(xd, ld).numpy()  # warm-up with the device data
    np_params = [p.copy() for p in params]
    (t_jit, _), (t_tg, _) = time_blocks(run_peer, lambda: compiled(xd, ld), number, repeat)
    if compiled_only:
        return {f"{tag} compiled / jax.jit": (t_tg / t_jit, target),
                f"{tag} jax.jit (ms)": (t_jit * 1e3, ""), f"{tag} compiled (ms)": (t_tg * 1e3, "")}
    (t_jit_np, _), (t_tg_np, _) = time_pair(run_peer_numpy, lambda: compiled(xt, lt).numpy(),
                                            number, repeat)
    (t_np, _), (t_eager, _) = time_pair(lambda: step_numpy(x, labels, np_params),
                                        lambda: step(xt, lt), number, repeat)
    return {f"{tag} compiled / jax.jit": (t_tg / t_jit, target),
            f"{tag} per-call NumPy: compiled / jax.jit": (t_tg_np / t_jit_np, ""),
            f"{tag} compiled / NumPy": (t_tg / t_np, ""),
            f"{tag} jax.jit / NumPy": (t_jit / t_np, ""),
            f"{tag} eager / NumPy": (t_eager / t_np, "<= 2" if tag == "W3" else "")}


def _mlp_tg(variables, x):
    w1, b1, w2, b2, w3, b3 = variables
    h = tg.nn.relu(x @ w1 + b1)
    h = tg.nn.relu(h @ w2 + b2)
    return h @ w3 + b3


# --- W4: Hessian-vector product ------------------------------------------------------------
def hvp_tg(at):
    """W4's tapegrad side: ``hvp(x, v)`` of ``sum(tanh(at @ x)^2)``, reverse over reverse."""
    def hvp(x, v):
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = tg.sum(tg.tanh(at @ x) ** 2)
            g = inner.gradient(y, x)
            gv = tg.sum(g * v)
        return outer.gradient(gv, x)
    return hvp


def w4(number, repeat, n=1000):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, n)) / np.sqrt(n)
    x0, v0 = rng.normal(size=n), rng.normal(size=n)

    def f_jax(x):
        return jnp.sum(jnp.tanh(a @ x) ** 2)

    peer = jax.jit(lambda x, v: jax.jvp(jax.grad(f_jax), (x,), (v,))[1])
    at = tg.constant(a)
    hvp = tg.function(hvp_tg(at), jit_compile=True)

    @tg.function(jit_compile=True)
    def hvp_fr(x, v):  # what a tapegrad user writes: tg.hvp, forward over reverse as the peer
        return tg.hvp(lambda y: tg.sum(tg.tanh(at @ y) ** 2), (x,), (v,))

    xt, vt = tg.constant(x0), tg.constant(v0)
    xj, vj = jnp.asarray(x0), jnp.asarray(v0)
    xd, vd = tg.asarray(x0, device=_DEVICE), tg.asarray(v0, device=_DEVICE)
    np.testing.assert_allclose(hvp(xd, vd).numpy(), np.asarray(peer(xj, vj)), rtol=1e-8)
    np.testing.assert_allclose(hvp_fr(xd, vd).numpy(), np.asarray(peer(xj, vj)), rtol=1e-8)
    (t_jit, _), (t_tg, _) = time_blocks(lambda: peer(xj, vj), lambda: hvp(xd, vd), number,
                                        repeat)
    (t_jit_fr, _), (t_fr, _) = time_blocks(lambda: peer(xj, vj), lambda: hvp_fr(xd, vd), number,
                                           repeat)
    (t_jit_np, _), (t_tg_np, _) = time_pair(lambda: _ready(peer(x0, v0)),
                                            lambda: hvp(xt, vt).numpy(), number, repeat)
    return {"W4 HVP compiled / jax.jit": (t_tg / t_jit, "<= 1.1"),
            "W4 tg.hvp compiled / jax.jit": (t_fr / t_jit_fr, ""),
            "W4 per-call NumPy: compiled / jax.jit": (t_tg_np / t_jit_np, "")}


# --- digits step: trace + compile ------------------------------------------------------------
def digits_compile_time():
    from tapegrad.examples import digits

    params = digits.build_model(0)
    step = digits.make_step(params, tg.optimizers.Adam(3e-3), compiled=True)
    x = tg.constant(np.zeros((32, 64), np.float32))
    t = tg.constant(np.eye(10, dtype=np.float32)[np.zeros(32, int)])
    t0 = time.perf_counter()
    float(step(x, t))
    return {"digits step trace + XLA compile (s)": (time.perf_counter() - t0, "<= 3")}


def main(argv=None):
    """Run every row; print the table; return ``{row: (value, target)}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    reps = 3 if args.quick else 7
    print("JAX's CPU dispatch:", "asynchronous" if jax.config.values.get(
        "jax_cpu_enable_async_dispatch", True) else "synchronous")
    pin_allocator()
    rows = {}
    rows.update(w1(200 if args.quick else 1000, reps))
    rows.update(mlp((784, 64, 64, 10), 16, 50 if args.quick else 300, reps, "W3", "<= 1.1"))
    rows.update(mlp((784, 512, 512, 10), 256, 2 if args.quick else 10, reps, "W2"))
    rows.update(w4(5 if args.quick else 30, reps))
    if _DEVICE.platform == "gpu":  # issue 19's GPU row: too slow to be worth it on a CPU
        rows.update(mlp((784, 512, 512, 10), 4096, 5 if args.quick else 50, reps, "MLP b4096",
                        "<= 1.1", compiled_only=True))
    rows.update(digits_compile_time())
    print_table(rows, 46)
    return rows


if __name__ == "__main__":
    main()
