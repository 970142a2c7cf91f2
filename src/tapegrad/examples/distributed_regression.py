"""Logistic regression on more data than the workers can hold, on a Dask cluster.

Run ``python -m tapegrad.examples.distributed_regression [--rows N] [--steps K]
[--scheduler ADDRESS] [--chunk-rows C] [--learning-rate LR] [--seed S]``. Needs the ``dask``
extra (``dask[distributed]``; tqdm, from the ``examples`` extra, for the progress bar).

- **Data**: ``--rows`` (default 20 million) rows of 16 float64 features (2.5 GB at the
  default), standard normal, generated chunk by chunk (``--chunk-rows`` rows each, default
  250 000: 32 MB) with ``dask.array.random``, and labels ``x . w_true + noise > 0``. They are
  never held whole: each training step generates every chunk again on the workers (a chunk's
  random numbers are fixed by the graph, so every step sees the same data).
- **Cluster**: a ``dask.distributed.LocalCluster`` of 2 worker processes, one thread each,
  with a memory limit of 1.5 GiB each (so the data do not fit in the workers together), or
  the existing cluster at ``--scheduler ADDRESS``.
- **Model**: ``p(y = 1 | x) = sigmoid(x . w + b)``, with ``w`` and ``b`` NumPy-backed
  ``tg.Variable``\\ s mixed with the Dask data. The loss, the mean negative log-likelihood
  ``-mean(y log_sigmoid(z) + (1 - y) log_sigmoid(-z))``, uses ``log_sigmoid``, an op defined
  here as a ``tg.primitive`` (a numerically stable forward: ``min(z, 0) - log1p(exp(-|z|))``)
  with a gradient registered by name (``d/dz log sigmoid(z) = sigmoid(-z)``).
- **Training**: ``--steps`` (default 10) full-batch Adam steps (learning rate 0.1): each step
  records the loss on a tape, builds its gradients (lazy, nothing computed yet), and evaluates
  the loss and both gradients in one Dask graph with ``tg.compute``, so each chunk is
  generated once per step; a tqdm progress bar shows the loss.

It prints the final loss and accuracy (evaluated on all rows, also in one graph), the seconds
per step (the mean over steps 2..K; step 1 also pays for shipping the first graph), and the
peak memory of each worker process (its peak resident set size, ``VmHWM`` on Linux, else
``ru_maxrss``, read on the workers with ``client.run``; on an existing cluster, the peak since
the worker started).
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np

import tapegrad as tg

FEATURES = 16
MEMORY_LIMIT = "1.5GiB"


@tg.primitive("StableLogSigmoid",
              samples=[tg.Sample((3, 4)), tg.Sample((5,), domain=(-40.0, 40.0)), tg.Sample(())],
              real_only=True)
def log_sigmoid(z):
    """``log(sigmoid(z))`` for a real floating array of any shape (elementwise; same shape and
    dtype), computed as ``min(z, 0) - log1p(exp(-|z|))``, which neither overflows nor loses
    digits for large ``|z|``. Gradient: ``sigmoid(-z)`` (below)."""
    import array_api_compat

    xp = array_api_compat.array_namespace(z)
    return xp.minimum(z, 0.0) - xp.log1p(xp.exp(-xp.abs(z)))


@tg.RegisterGradient("StableLogSigmoid", reads="inputs")
def _log_sigmoid_grad(op, dy):
    # d/dz log sigmoid(z) = sigmoid'(z) / sigmoid(z) = 1 - sigmoid(z) = sigmoid(-z)
    return dy * tg.nn.sigmoid(-op.inputs[0])


def make_data(rows, chunk_rows, seed):
    """Lazy Dask arrays ``x`` (rows, 16) and ``y`` (rows,) in {0., 1.}, float64, chunked by
    rows; ``w_true`` (16,) is a NumPy array drawn from ``seed``."""
    import dask.array as da

    w_true = np.random.default_rng(seed).normal(size=FEATURES)
    rng = da.random.default_rng(seed + 1)
    x = rng.standard_normal((rows, FEATURES), chunks=(chunk_rows, FEATURES))
    noise = rng.standard_normal((rows,), chunks=(chunk_rows,))
    y = (x @ w_true + noise > 0).astype(np.float64)
    return x, y, w_true


def loss_fn(x, y, w, b):
    """The mean negative log-likelihood of labels ``y`` under ``sigmoid(x @ w + b)``."""
    z = x @ w + b
    return -tg.mean(y * log_sigmoid(z) + (1.0 - y) * log_sigmoid(-z))


def accuracy(x, y, w, b):
    """The fraction of rows whose predicted label ``x @ w + b > 0`` is ``y``."""
    return tg.mean(tg.astype((x @ w + b > 0) == (y > 0.5), tg.float64))


def _peak_rss_bytes():
    # VmHWM: this process image's own peak; ru_maxrss also counts the parent's resident set
    # when the worker was forked (Dask spawns by fork and exec, and Linux keeps it over exec)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB; macOS: bytes


# a short run of main() for ``python -m tapegrad check``
CHECK_ARGS = {"argv": ["--rows", "20000", "--chunk-rows", "5000", "--steps", "2"]}


def main(argv=None) -> dict:
    """Run the example from the command line; returns :func:`train`'s figures."""
    parser = argparse.ArgumentParser(prog="python -m tapegrad.examples.distributed_regression",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000, help="rows (default 20 million)")
    parser.add_argument("--steps", type=int, default=10, help="full-batch Adam steps (10)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="an existing cluster's scheduler (default: a LocalCluster of 2 "
                             f"worker processes with {MEMORY_LIMIT} each)")
    parser.add_argument("--chunk-rows", type=int, default=250_000, help="rows per chunk")
    parser.add_argument("--learning-rate", type=float, default=0.1, help="Adam's (0.1)")
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.steps < 1 or args.chunk_rows < 1:
        parser.error("--rows, --steps and --chunk-rows must be positive")

    from dask.distributed import Client, LocalCluster

    cluster = None
    if args.scheduler is None:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               memory_limit=MEMORY_LIMIT, dashboard_address=None)
    client = Client(cluster if cluster is not None else args.scheduler)
    try:
        return train(client, args.rows, args.steps, chunk_rows=args.chunk_rows,
                     learning_rate=args.learning_rate, seed=args.seed,
                     memory_limit=MEMORY_LIMIT if cluster is not None else None)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def train(client, rows, steps, *, chunk_rows=250_000, learning_rate=0.1, seed=0,
          memory_limit=None) -> dict:
    """Train on ``client``'s cluster and print the figures; returns them as a dict (``loss``,
    ``accuracy``, ``seconds_per_step``, ``first_step``, ``peak_worker_memory_gib``: the
    largest worker's, ``losses``: the loss before each step)."""
    try:
        from tqdm import trange
    except ImportError:  # the progress bar is optional
        trange = range
    x, y, _ = make_data(rows, chunk_rows, seed)
    x, y = tg.asarray(x), tg.asarray(y)
    w = tg.Variable(np.zeros(FEATURES), name="w")
    b = tg.Variable(0.0, name="b")
    optimizer = tg.optimizers.Adam(learning_rate)
    print(f"{rows:,} rows x {FEATURES} features float64 ({rows * FEATURES * 8 / 1e9:.2f} GB, "
          f"{-(-rows // chunk_rows)} chunks) on {len(client.scheduler_info()['workers'])} workers")
    times, losses = [], []
    bar = trange(steps)
    for _ in bar:
        start = time.perf_counter()
        with tg.GradientTape() as tape:
            loss = loss_fn(x, y, w, b)
        grads = tape.gradient(loss, [w, b])  # lazy: nothing is computed yet
        loss, grads = tg.compute(loss, grads)  # one graph: each chunk generated once
        optimizer.apply_gradients(zip(grads, [w, b]))
        times.append(time.perf_counter() - start)
        losses.append(float(loss))
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    final_loss, acc = tg.compute(loss_fn(x, y, w, b), accuracy(x, y, w, b))
    peaks = client.run(_peak_rss_bytes)
    per_step = float(np.mean(times[1:])) if len(times) > 1 else times[0]
    result = {"rows": rows, "steps": steps, "loss": float(final_loss), "accuracy": float(acc),
              "seconds_per_step": per_step, "first_step": times[0], "losses": losses,
              "peak_worker_memory_gib": max(peaks.values()) / 2**30}
    print(f"loss: {result['loss']:.4f}  accuracy: {result['accuracy']:.4f}")
    print(f"seconds per step: {per_step:.2f} (first step {times[0]:.2f})")
    print("peak worker memory: " + ", ".join(f"{p / 2**30:.2f} GiB" for p in peaks.values())
          + (f" (limit {memory_limit} each)" if memory_limit else ""))
    return result


if __name__ == "__main__":
    main()
