"""Data-parallel steps: ``tg.distribute.MirroredStrategy`` against hand-written ``jax.jit`` with
the same sharding, on 1, 2 and 4 CPU devices.

Run ``OMP_NUM_THREADS=1 python benchmarks/bench_distribute.py [--quick]`` (the ``jit`` extra).
The script asks XLA for 8 virtual CPU devices (``--xla_force_host_platform_device_count=8``;
``BENCH_VIRTUAL_DEVICES=N`` for N) before JAX starts and uses the first 1, 2 and 4: with only
4, XLA:CPU's in-process all-reduce hangs on a loaded 2-core machine (see below). The
workload: one Adam step of a 64-256-256-10 tanh MLP with a softmax cross-entropy loss, global
batch 256, float32 (tapegrad: float32 Variables; the peer: float32 arrays), the batch split
along its first axis across the devices.

* **tapegrad**: Variables and the optimizer made in ``strategy.scope()``, the batch put on the
  devices once by ``strategy.experimental_distribute_values``, ``strategy.run(step, args)``:
  the global-batch program (``MirroredStrategy(per_replica=False)``, XLA's partitioner), or
  with ``--per-replica`` the default per-replica step (``jax.shard_map``; the loss
  ``tg.nn.compute_average_loss`` of the per-example losses, as TensorFlow's loop writes it).
* **peer**: ``jax.jit(step, in_shardings=..., out_shardings=...)`` with parameters and Adam
  moments replicated (``NamedSharding(mesh, P())``), the batch sharded
  (``NamedSharding(mesh, P("batch"))``) by ``jax.device_put`` once, Adam written out by hand,
  and the state donated (``donate_argnums``), as a JAX user writes it.

Both sides are checked to compute the same losses over 5 steps (from the same initial values)
before timing. Each timed block runs ``--steps`` steps with one wait at its end (the peer:
``jax.block_until_ready`` of the last loss; tapegrad: ``jax.block_until_ready`` of the
Variables' and the last loss's device arrays, then ``.numpy()`` of the loss); the sides alternate
in pairs of blocks (which side goes first alternates too), ``--repeat`` blocks each; the table
gives each side's per-step median and range, the ratio of the medians, and the median and
range of the ratios within the pairs (adjacent in time, so a slow drift of the machine's load
cancels in them), and the same for the process's CPU time per step (all its threads, XLA's
included), which other processes on a shared machine disturb less than the wall-clock. On a
machine with fewer cores than devices no speed-up is expected: the point is tapegrad's
overhead against the peer on the same partitioned program. Nothing is asserted.

Each device count runs in its own process (this script with ``--stage N``), killed after
``--timeout`` seconds and started again up to ``--tries`` times: XLA:CPU's in-process
all-reduce can hang (``benchmarks/README.md``), and the script then reports the hang (or
XLA's abort after its 40 s rendezvous timeout) instead of waiting for ever.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# 8 virtual devices for meshes of at most 4: XLA:CPU's client runs every device's part of a
# program on a pool of max(cores, devices) threads, and an all-reduce's participants each hold
# one until all arrive; with exactly 4 threads for 4 participants the 4-device stage was
# aborted in 7 of 10 processes on the loaded 2-core machine, with 8 in none (benchmarks/README.md)
VIRTUAL_DEVICES = int(os.environ.get("BENCH_VIRTUAL_DEVICES", "8"))
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_"
                               f"device_count={VIRTUAL_DEVICES}").strip()

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402
from tapegrad._function import _jax  # noqa: E402
from tapegrad._variables import device_array  # noqa: E402

jax = _jax()
jnp = jax.numpy
P = jax.sharding.PartitionSpec
SIZES, BATCH, LR, B1, B2, EPS = (64, 256, 256, 10), 256, 1e-3, 0.9, 0.999, 1e-7


def initial(seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for a, b in zip(SIZES[:-1], SIZES[1:]):
        params += [rng.normal(0, 1 / np.sqrt(a), size=(a, b)).astype(np.float32),
                   np.zeros(b, np.float32)]
    x = rng.normal(size=(BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], size=BATCH)
    return params, x, y


def tapegrad_side(devices, params, x, y, per_replica=False):
    strategy = tg.distribute.MirroredStrategy(devices=list(range(devices)),
                                              per_replica=per_replica)
    with strategy.scope():
        variables = [tg.Variable(p, dtype=tg.float32) for p in params]
        opt = tg.optimizers.Adam(LR, beta_1=B1, beta_2=B2, epsilon=EPS)

    @tg.function
    def step(xb, yb):
        with tg.GradientTape() as tape:
            h = xb
            for k in range(0, len(variables) - 2, 2):
                h = tg.tanh(h @ variables[k] + variables[k + 1])
            logits = h @ variables[-2] + variables[-1]
            per_example = tg.nn.sparse_softmax_cross_entropy_with_logits(labels=yb,
                                                                         logits=logits)
            # per replica: TensorFlow's loss (each replica's share of the global mean)
            loss = (tg.nn.compute_average_loss(per_example) if per_replica
                    else tg.mean(per_example))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    xb, yb = strategy.experimental_distribute_values((x, y))

    def wait(loss):  # every device's part of the last step (a replicated value's host copy
        # reads one device's): the next program on these devices then starts on all of them
        if per_replica:  # the replicas' shares summed: the global mean
            loss = strategy.reduce("SUM", loss)
        jax.block_until_ready([device_array(v) for v in (*variables, loss)])
        return float(loss.numpy())

    return lambda: strategy.run(step, args=(xb, yb)), wait


def peer_side(devices, params, x, y):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("batch",))
    repl, split = (jax.sharding.NamedSharding(mesh, P()),
                   jax.sharding.NamedSharding(mesh, P("batch")))

    def loss_fn(ps, xb, yb):
        h = xb
        for k in range(0, len(ps) - 2, 2):
            h = jnp.tanh(h @ ps[k] + ps[k + 1])
        logits = h @ ps[-2] + ps[-1]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, yb[:, None], axis=1))

    def step(ps, ms, vs, t, xb, yb):
        loss, gs = jax.value_and_grad(loss_fn)(ps, xb, yb)
        t = t + 1
        ms = [B1 * m + (1 - B1) * g for m, g in zip(ms, gs)]
        vs = [B2 * v + (1 - B2) * g * g for v, g in zip(vs, gs)]
        lr = LR * jnp.sqrt(1 - B2 ** t) / (1 - B1 ** t)
        ps = [p - lr * m / (jnp.sqrt(v) + EPS) for p, m, v in zip(ps, ms, vs)]
        return ps, ms, vs, t, loss

    jitted = jax.jit(step, in_shardings=(repl, repl, repl, repl, split, split),
                     out_shardings=(repl, repl, repl, repl, repl),
                     donate_argnums=(0, 1, 2, 3))
    state = [jax.device_put([jnp.asarray(p) for p in params], repl),
             jax.device_put([jnp.zeros_like(p) for p in params], repl),
             jax.device_put([jnp.zeros_like(p) for p in params], repl),
             jax.device_put(jnp.zeros((), jnp.float32), repl)]
    xb, yb = jax.device_put(x, split), jax.device_put(y.astype(np.int32), split)

    def call():
        ps, ms, vs, t, loss = jitted(*state, xb, yb)
        state[:] = [ps, ms, vs, t]
        return loss

    return call, lambda loss: float(jax.block_until_ready(loss))


def block(call, wait, steps):
    """Seconds per step: wall-clock, and CPU time of this process (every thread: XLA's too)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        out = call()
    wait(out)
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def stage(devices, steps, repeat, per_replica=False):
    """One device count, in this process: check, then alternate the sides' blocks; prints the
    per-step times of every block as one JSON line."""
    params, x, y = initial()
    tg_call, tg_wait = tapegrad_side(devices, params, x, y, per_replica)
    jx_call, jx_wait = peer_side(devices, params, x, y)
    a = [tg_wait(tg_call()) for _ in range(5)]
    b = [jx_wait(jx_call()) for _ in range(5)]
    if not np.allclose(a, b, rtol=1e-4):
        raise SystemExit(f"the two sides differ on {devices} devices: {a} vs {b}")
    runs_tg, runs_jx = [], []
    for k in range(repeat):  # alternate, the first side changing from pair to pair
        first, second = ((jx_call, jx_wait, runs_jx), (tg_call, tg_wait, runs_tg))[::(-1) ** k]
        for call, wait, runs in (first, second):
            runs.append(block(call, wait, steps))
    print("RESULT " + json.dumps({"jax": [w for w, _ in runs_jx],
                                  "tapegrad": [w for w, _ in runs_tg],
                                  "jax_cpu": [c for _, c in runs_jx],
                                  "tapegrad_cpu": [c for _, c in runs_tg]}), flush=True)


def run_stage(devices, steps, repeat, timeout, per_replica=False):
    """``stage`` in a fresh interpreter (4 virtual devices), killed after ``timeout`` seconds:
    XLA:CPU's in-process all-reduce may hang (see benchmarks/README.md). Returns the runs, or a
    string saying why there are none."""
    cmd = [sys.executable, __file__, "--stage", str(devices), "--steps", str(steps),
           "--repeat", str(repeat)] + (["--per-replica"] if per_replica else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"no result in {timeout} s (killed: a hang)"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()] or ["no output"]
        why = [ln for ln in lines if "imeout" in ln or "rendezvous" in ln] or lines[-1:]
        return f"exit status {proc.returncode}: {why[0][:200]}"
    return json.loads(lines[-1][len("RESULT "):])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds for one device count's process before it is killed")
    parser.add_argument("--tries", type=int, default=2,
                        help="processes started per device count before giving up on it")
    parser.add_argument("--per-replica", action="store_true",
                        help="tapegrad's step per replica (MirroredStrategy's default: "
                             "jax.shard_map, compute_average_loss) instead of the "
                             "global-batch program (per_replica=False)")
    parser.add_argument("--stage", type=int, help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args()
    steps, repeat = (10, 3) if args.quick else (args.steps, args.repeat)
    if args.stage is not None:
        return stage(args.stage, steps, repeat, args.per_replica)
    print(f"{len(jax.devices())} virtual CPU devices, {os.cpu_count()} cores; global batch "
          f"{BATCH}, MLP {SIZES}, Adam, float32; {steps} steps per block, {repeat} blocks per "
          "side, alternating; one process per device count; tapegrad "
          + ("per replica (shard_map)" if args.per_replica else "global batch (GSPMD)"))
    print(f"{'devices':>7} {'jax.jit ms/step':>22} {'tapegrad ms/step':>22} {'ratio':>6} "
          "pair ratios        CPU-time pair ratios")

    def fmt(r):
        return f"{statistics.median(r) * 1e3:.3f} [{min(r) * 1e3:.3f}-{max(r) * 1e3:.3f}]"

    for devices in args.devices:
        for attempt in range(1, args.tries + 1):
            got = run_stage(devices, steps, repeat, args.timeout, args.per_replica)
            if isinstance(got, dict):
                break
            print(f"{devices:>7} try {attempt}: {got}", flush=True)
        else:
            continue
        rj, rt = got["jax"], got["tapegrad"]
        pairs = [t / j for t, j in zip(rt, rj)]
        cpu = [t / j for t, j in zip(got["tapegrad_cpu"], got["jax_cpu"])]
        ratio = statistics.median(rt) / statistics.median(rj)
        print(f"{devices:>7} {fmt(rj):>22} {fmt(rt):>22} {ratio:>6.2f} "
              f"{statistics.median(pairs):.2f} [{min(pairs):.2f}-{max(pairs):.2f}] "
              f"{statistics.median(cpu):.2f} [{min(cpu):.2f}-{max(cpu):.2f}]", flush=True)


if __name__ == "__main__":
    main()
