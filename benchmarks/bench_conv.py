"""``tg.nn.conv2d`` forward + gradient, eager, against ``jax.jit`` and hand-written NumPy im2col.

Run ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_conv.py [--quick]``.
One computation: a 3x3 convolution, batch 32, 32x32x16 -> 32 channels, stride 1, ``"SAME"``,
float32: the forward ``y = conv2d(x, w)`` and the VJP of a fixed cotangent ``dy`` wrt ``x``
and ``w``, written three ways:

* tapegrad, eager: ``tg.nn.conv2d`` under a ``GradientTape``, ``tape.gradient(y, [x, w], dy)``;
* hand-written NumPy im2col (the reference): the 9 shifted slices of the padded input stacked
  and multiplied with the filter; ``dw = cols^T dy``, ``dx`` by adding ``dy w^T``'s columns back
  into the 9 slices (in place); the columns are kept from the forward for ``dw``;
* ``jax.jit`` of ``jax.lax.conv_general_dilated`` and its ``jax.vjp`` (the peer, if JAX is
  installed).

Each pair is checked to compute the same numbers before it is timed; times are the median of
several repeats, the two sides alternating. Nothing is asserted. Targets (issue 10): eager
tapegrad <= 1.3x NumPy im2col and <= 2x ``jax.jit``.
"""
from __future__ import annotations

import argparse

import numpy as np

import tapegrad as tg
from bench_overhead import print_table, time_pair

N, H, W, C, O, K = 32, 32, 32, 16, 32, 3


def _check(got, want):
    """Equal up to float32 rounding of sums of ~10^4 products (tolerance scaled by the max)."""
    for g, v in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), v, rtol=1e-3, atol=1e-4 * np.abs(v).max())


def conv_numpy(x, w, dy):
    """Forward and both gradients of a stride-1 "SAME" conv2d, NHWC / HWIO, by im2col."""
    kh, kw, c, o = w.shape
    ph, pw = (kh - 1) // 2, (kw - 1) // 2
    n, h, wd, _ = x.shape
    xp = np.zeros((n, h + kh - 1, wd + kw - 1, c), x.dtype)
    xp[:, ph:ph + h, pw:pw + wd] = x
    cols = np.stack([xp[:, a:a + h, b:b + wd] for a in range(kh) for b in range(kw)], axis=3)
    cols = cols.reshape(n * h * wd, kh * kw * c)
    y = (cols @ w.reshape(-1, o)).reshape(n, h, wd, o)
    g = dy.reshape(-1, o)
    dw = (cols.T @ g).reshape(w.shape)
    dcols = (g @ w.reshape(-1, o).T).reshape(n, h, wd, kh * kw, c)
    dxp = np.zeros_like(xp)
    for j, (a, b) in enumerate((a, b) for a in range(kh) for b in range(kw)):
        dxp[:, a:a + h, b:b + wd] += dcols[:, :, :, j]
    return y, dxp[:, ph:ph + h, pw:pw + wd], dw


def conv_tapegrad(x, w, dy):
    with tg.GradientTape() as tape:
        tape.watch([x, w])
        y = tg.nn.conv2d(x, w, 1, "SAME")
    dx, dw = tape.gradient(y, [x, w], output_gradients=dy)
    return y, dx, dw


def _jax_peer():
    try:
        import jax
    except ImportError:
        return None

    def f(x, w, dy):
        conv = lambda x, w: jax.lax.conv_general_dilated(  # noqa: E731
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y, vjp = jax.vjp(conv, x, w)
        return (y, *vjp(dy))

    jitted = jax.jit(f)
    return lambda *a: jax.block_until_ready(jitted(*a))


def main(argv=None):
    """Run the rows; print the table; return ``{row: (value, target)}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    number, reps = (2, 3) if args.quick else (5, 9)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, H, W, C)).astype(np.float32)
    w = (rng.normal(size=(K, K, C, O)) / np.sqrt(K * K * C)).astype(np.float32)
    dy = rng.normal(size=(N, H, W, O)).astype(np.float32)
    xt, wt, dyt = tg.constant(x), tg.constant(w), tg.constant(dy)

    ref = conv_numpy(x, w, dy)
    _check([t.numpy() for t in conv_tapegrad(xt, wt, dyt)], ref)
    (t_np, _), (t_tg, _) = time_pair(lambda: conv_numpy(x, w, dy),
                                     lambda: conv_tapegrad(xt, wt, dyt), number, reps)
    rows = {"tapegrad eager (ms)": (t_tg * 1e3, ""), "NumPy im2col (ms)": (t_np * 1e3, ""),
            "tapegrad / NumPy im2col": (t_tg / t_np, "<= 1.3")}
    peer = _jax_peer()
    if peer is not None:
        _check(peer(x, w, dy), ref)
        (t_jax, _), (t_tg2, _) = time_pair(lambda: peer(x, w, dy),
                                           lambda: conv_tapegrad(xt, wt, dyt), number, reps)
        rows.update({"jax.jit (ms)": (t_jax * 1e3, ""),
                     "tapegrad / jax.jit": (t_tg2 / t_jax, "<= 2")})
    print_table(rows, 30)
    return rows


if __name__ == "__main__":
    main()
