"""``tg.vmap`` and the vectorized ``GradientTape.jacobian`` against their peers, in one process.

Run ``OMP_NUM_THREADS=1 python benchmarks/bench_vmap.py [--quick]`` (needs the ``jit`` extra;
the script pins XLA and BLAS to one thread itself). Nothing is asserted; each figure is a ratio
to its peer measured in the same run, the two sides alternating (``time_pair``), median of
the repeats, with the range over the repeats.

* Per-example gradients of the W3 MLP (784-64-64-10, ReLU, softmax cross-entropy), batch 64,
  float32:
  - compiled: ``tg.function`` of ``tg.vmap(tg.grad(loss), in_axes=(None, 0, 0))`` against
    ``jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))`` written as JAX's users write
    it (parameters and data kept on the device as JAX arrays, one wait per timed block);
    target <= 1.2;
  - eager: ``tg.vmap(tg.grad(loss))`` against a Python loop of 64 ``tape.gradient`` calls,
    one per example; target <= 0.3.
* A primitive with a NumPy forward (elementwise, a host callback under ``tg.vmap``), batch 64
  of 784: declared ``vmap_method="expand_dims"`` (one callback for the batch) against the
  default ``"sequential"`` (one per example), eager ``tg.vmap``; the ratio.
* A 256x256 Jacobian of a tanh MLP (256-256-256) by ``GradientTape.jacobian``:
  vectorized (``experimental_use_pfor=True``, one reverse pass batched by ``jax.vmap``)
  against the row-by-row loop (``experimental_use_pfor=False``, 256 reverse passes): the
  speed-up; ``jax.jit(jax.jacrev)`` for scale.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402
from bench_overhead import make_mlp, pin_allocator, time_pair  # noqa: E402

from tapegrad._function import _jax  # noqa: E402

jax = _jax()
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def loss_jax(params, x, label):
    w1, b1, w2, b2, w3, b3 = params
    h = jax.nn.relu(x @ w1 + b1)
    h = jax.nn.relu(h @ w2 + b2)
    logits = h @ w3 + b3
    return -jax.nn.log_softmax(logits)[label]


def loss_tg(params, x, label):
    w1, b1, w2, b2, w3, b3 = params
    h = tg.nn.relu(x @ w1 + b1)
    h = tg.nn.relu(h @ w2 + b2)
    logits = h @ w3 + b3
    return tg.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)


def per_example(number, repeat):
    x, labels, params = make_mlp(sizes=(784, 64, 64, 10), batch=64)
    labels = labels.astype(np.int64)
    jparams = [jnp.asarray(p) for p in params]
    jx, jl = jnp.asarray(x), jnp.asarray(labels)
    peer = jax.jit(jax.vmap(jax.grad(loss_jax), in_axes=(None, 0, 0)))
    tparams = [tg.constant(p) for p in params]
    xt, lt = tg.constant(x), tg.constant(labels)
    batched = tg.vmap(tg.grad(loss_tg), in_axes=(None, 0, 0))
    compiled = tg.function(batched)

    def loop():
        out = []
        for b in range(x.shape[0]):
            ps = [tg.identity(p) for p in tparams]
            with tg.GradientTape() as tape:
                tape.watch(ps)
                loss = loss_tg(ps, xt[b], lt[b])
            out.append(tape.gradient(loss, ps))
        return out

    want = [np.asarray(g) for g in peer(jparams, jx, jl)]
    for got in (compiled(tparams, xt, lt), batched(tparams, xt, lt)):
        for g, w in zip(got, want):
            assert g.dtype == tg.float32
            np.testing.assert_allclose(g.numpy(), w, rtol=2e-4, atol=1e-6)
    for k, g in enumerate(loop()[5]):
        np.testing.assert_allclose(g.numpy(), want[k][5], rtol=2e-4, atol=1e-6)

    def run_peer():  # on the device, one wait per timed block (number calls)
        out = None
        for _ in range(number):
            out = peer(jparams, jx, jl)
        jax.block_until_ready(out)

    def run_compiled():  # as the peer: dispatch runs ahead, one wait per block (.numpy())
        out = None
        for _ in range(number):
            out = compiled(tparams, xt, lt)
        for g in out:
            g.numpy()

    (t_jit, r_jit), (t_tg, r_tg) = time_pair(run_peer, run_compiled, 1, repeat)
    n_eager = max(number // 20, 2)
    (t_loop, r_loop), (t_eager, r_eager) = time_pair(loop, lambda: batched(tparams, xt, lt),
                                                     n_eager, repeat)
    return {
        "per-example grads, compiled tg.vmap / jax.jit(jax.vmap)":
            (t_tg / t_jit, f"{r_tg / r_jit:.2f}-{r_tg / max(r_jit, 1e-12):.2f}", "<= 1.2"),
        "  jax.jit(jax.vmap(jax.grad)) (us per call)": (t_jit / number * 1e6, "", ""),
        "  tg.function(tg.vmap(tg.grad)) (us per call)": (t_tg / number * 1e6, "", ""),
        "per-example grads, eager tg.vmap / loop of 64 tape.gradient":
            (t_eager / t_loop, "", "<= 0.3"),
        "  eager tg.vmap (ms per call)": (t_eager * 1e3, "", ""),
        "  loop of 64 tape.gradient (ms)": (t_loop * 1e3, "", ""),
    }, (r_jit, r_tg, r_loop, r_eager)


def host_callback(number, repeat):
    rng = np.random.default_rng(0)
    x = tg.constant(rng.normal(size=(64, 784)))
    ops = {m: tg.primitive(f"BenchVmapSoftplus_{m}", vmap_method=m)(
        lambda a: np.logaddexp(0.0, np.asarray(a))) for m in ("sequential", "expand_dims")}
    per = {m: tg.vmap(lambda r, op=op: op(r) * 2.0) for m, op in ops.items()}
    want = np.logaddexp(0.0, x.numpy()) * 2.0
    for f in per.values():
        np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-12)
    (t_seq, _), (t_vec, _) = time_pair(lambda: per["sequential"](x),
                                       lambda: per["expand_dims"](x), number, repeat)
    return {
        "NumPy forward in tg.vmap: one callback / one per example": (t_vec / t_seq, "", "report"),
        "  vmap_method='sequential' (ms)": (t_seq * 1e3, "", ""),
        "  vmap_method='expand_dims' (ms)": (t_vec * 1e3, "", ""),
    }


def jacobian(number, repeat, n=256):
    rng = np.random.default_rng(0)
    w1 = rng.normal(size=(n, n)) / np.sqrt(n)
    w2 = rng.normal(size=(n, n)) / np.sqrt(n)
    x0 = rng.normal(size=n)
    xt, w1t, w2t = tg.constant(x0), tg.constant(w1), tg.constant(w2)

    def jac(pfor):
        with tg.GradientTape() as tape:
            tape.watch(xt)
            y = tg.tanh(w2t @ tg.tanh(w1t @ xt))
        return tape.jacobian(y, xt, experimental_use_pfor=pfor)

    peer = jax.jit(jax.jacrev(lambda x: jnp.tanh(w2 @ jnp.tanh(w1 @ x))))
    want = np.asarray(peer(x0))
    np.testing.assert_allclose(jac(True).numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jac(False).numpy(), want, rtol=1e-10, atol=1e-12)
    (t_rows, _), (t_vec, _) = time_pair(lambda: jac(False), lambda: jac(True), number, repeat)

    def run_peer():
        jax.block_until_ready(peer(x0))

    (t_jit, _), (t_vec2, _) = time_pair(run_peer, lambda: jac(True), number, repeat)
    return {
        "256x256 jacobian: rows / vectorized (speed-up)": (t_rows / t_vec, "", "report"),
        "  rows, experimental_use_pfor=False (ms)": (t_rows * 1e3, "", ""),
        "  vectorized, experimental_use_pfor=True (ms)": (t_vec * 1e3, "", ""),
        "  jax.jit(jax.jacrev) (ms), for scale": (t_jit * 1e3, "", ""),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="tg.vmap against jax.vmap and loops")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    pin_allocator()
    reps = 3 if args.quick else 7
    rows, raw = per_example(40 if args.quick else 200, reps)
    rows.update(host_callback(5 if args.quick else 20, reps))
    rows.update(jacobian(2 if args.quick else 5, reps))
    width = max(len(k) for k in rows)
    print(f"{'measurement':{width}s} {'value':>10s}   target")
    print("-" * (width + 24))
    for name, (value, _, target) in rows.items():
        print(f"{name:{width}s} {value:10.3f}   {target}")
    r_jit, r_tg, r_loop, r_eager = raw
    print(f"(best-of-repeats ratios: compiled {r_tg / r_jit:.3f}, eager {r_eager / r_loop:.3f})")
    return rows


if __name__ == "__main__":
    main()
