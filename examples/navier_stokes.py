"""Recover the initial velocity of a 2D incompressible flow from the flow N time steps later.

The seed articles' physics case, done with tapegrad's control flow and custom gradients (the
TensorFlow 2 way: ``tf.custom_gradient``, ``tf.recompute_grad``, a loop compiled once):

1. The flow: the incompressible Navier-Stokes equations on the periodic square
   ``[0, 2 pi)^2``, a ``GRID x GRID`` grid, velocity ``u`` of shape ``(2, GRID, GRID)``
   (component 0 along axis 0), float64. One time step of ``dt`` (Stam 1999, "Stable fluids"):
   semi-Lagrangian advection (each grid point takes the velocity found, by bilinear
   interpolation, at the point the flow brought to it: ``x - dt u(x)``), then viscous diffusion
   and the pressure projection onto divergence-free fields, both exact in Fourier space.
2. The spectral part, ``u -> P D u`` with ``D = exp(-nu |k|^2 dt)`` and ``P = I - k k^T / |k|^2``
   at each wavenumber ``k``, is a ``tg.custom_gradient``: a real, even, symmetric Fourier
   multiplier is self-adjoint, so its gradient is the same map applied to the cotangent (no
   differentiation through the FFTs).
3. The time loop is ``tg.lax.scan`` of the step wrapped in ``tg.recompute_grad``: compiled, the
   loop is one XLA loop traced once whatever N, and the reverse pass keeps only the velocity
   entering each step, recomputing the step's interior.
4. The inverse problem: a hidden initial flow (random low-wavenumber modes, projected) is run
   forward N steps and observed with a little noise. Adam (``tg.optimizers.Adam``) fits a
   Variable ``v`` so that the flow from ``u0 = P v`` matches the observation in the mean
   squared sense; the whole step (loss, gradient through the N steps, update) is one
   ``tg.function`` unless ``--eager``.

5. An ensemble: ``ensemble(u0, viscosities, steps)`` runs the simulation for several
   viscosities at once, one ``tg.vmap`` over the viscosity (the step, its custom gradient and
   the scan batched by JAX), equal to separate simulations (``tests/test_examples.py``).

``main()`` prints the loss falling and the relative error of the recovered initial flow, and
writes a picture (vorticity of the truth, the observation and the recovered flow) with
matplotlib. Run ``python examples/navier_stokes.py [--steps N] [--iterations K] [--grid G]
[--eager] [--out PATH]``. Needs the ``jit`` extra (JAX) to compile and matplotlib to draw.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tapegrad as tg

GRID = 64
DT = 0.05
NU = 1e-3
SMOOTHING = 0.05


def wavenumbers(n):
    """``(kx, ky, k2)``: the integer wavenumbers of ``rfftn`` over the last two axes of an
    ``(n, n)`` field, shapes ``(n, 1)``, ``(1, n // 2 + 1)`` and ``(n, n // 2 + 1)`` (float64),
    with ``k2 = |k|^2`` set to 1 at ``k = 0`` (the mean flow, which projection leaves alone)."""
    kx = np.fft.fftfreq(n, 1.0 / n)[:, None]
    ky = np.fft.rfftfreq(n, 1.0 / n)[None, :]
    k2 = kx ** 2 + ky ** 2
    k2[0, 0] = 1.0
    return kx, ky, k2


def spectral_operator(n, dt=DT, nu=NU):
    """The map ``u -> P D u`` of an ``(2, n, n)`` float64 Tensor, ``D = exp(-nu |k|^2 dt)``,
    with the Nyquist modes set to zero, as a ``tg.custom_gradient``: ``P D`` is a real
    symmetric multiplier at each ``k``, even in ``k``, so the map is self-adjoint and its
    gradient is ``P D dy``. ``nu``: a Python float or a 0-d float64 Tensor (one of a batch
    under ``tg.vmap``: ``ensemble``)."""
    kx, ky, k2 = wavenumbers(n)
    resolved = (np.abs(kx) < n / 2) & (ky < n / 2)  # the Nyquist modes have no direction
    decay = tg.where(resolved, tg.exp(-nu * tg.constant(kx ** 2 + ky ** 2) * dt), 0.0)
    kx, ky, inv_k2 = tg.constant(kx), tg.constant(ky), tg.constant(1.0 / k2)

    def apply(u):
        h = tg.fft.rfftn(u, axes=(1, 2))
        div = (kx * h[0] + ky * h[1]) * inv_k2
        out = tg.stack([decay * (h[0] - kx * div), decay * (h[1] - ky * div)])
        return tg.fft.irfftn(out, s=(n, n), axes=(1, 2))

    @tg.custom_gradient
    def spectral(u):
        return apply(u), apply

    return spectral


def make_step(n, dt=DT, nu=NU):
    """One time step ``u -> u'`` of an ``(2, n, n)`` float64 velocity (grid units: the cell is
    ``2 pi / n`` wide), with the spectral part a ``custom_gradient``."""
    project = spectral_operator(n, dt, nu)
    scale = dt * n / (2 * np.pi)  # velocity times dt, in cells
    rows = tg.constant(np.arange(n, dtype=np.float64)[:, None])
    cols = tg.constant(np.arange(n, dtype=np.float64)[None, :])

    def advect(u):
        a = rows - scale * u[0]
        b = cols - scale * u[1]
        a0, b0 = tg.floor(a), tg.floor(b)
        wa, wb = a - a0, b - b0
        i0 = tg.remainder(tg.astype(a0, tg.int64), n)
        j0 = tg.remainder(tg.astype(b0, tg.int64), n)
        i1, j1 = tg.remainder(i0 + 1, n), tg.remainder(j0 + 1, n)
        flat = tg.reshape(u, (2, n * n))

        def at(i, j):
            return tg.reshape(tg.take(flat, tg.reshape(i * n + j, (-1,)), axis=1), (2, n, n))

        return ((1 - wa) * ((1 - wb) * at(i0, j0) + wb * at(i0, j1))
                + wa * ((1 - wb) * at(i1, j0) + wb * at(i1, j1)))

    def step(u):
        return project(advect(u))

    return step


def simulate(step, u0, steps, checkpoints=None):
    """The velocity after ``steps`` steps of ``step`` from ``u0`` (a ``tg.lax.scan`` of the
    step wrapped in ``tg.recompute_grad``). ``checkpoints``: ``None`` keeps the velocity
    entering every step for the gradient; an int ``s`` keeps at most ``s`` of them and
    replays the rest on the binomial schedule (``tg.checkpointing.Revolve``)."""
    checkpointed = tg.recompute_grad(step)
    final, _ = tg.lax.scan(lambda u, _: (checkpointed(u), None), u0, None, length=steps,
                           checkpoints=checkpoints)
    return final


def ensemble(u0, viscosities, steps, n=None):
    """The flows after ``steps`` steps from one ``(2, n, n)`` initial velocity ``u0`` for each
    of the viscosities (a 1-d float64 array or Tensor of ``m``): ``(m, 2, n, n)``, from one
    ``tg.vmap`` over the viscosity (each example builds its own step), equal to ``m``
    separate simulations."""
    n = n or u0.shape[-1]
    return tg.vmap(lambda nu: simulate(make_step(n, nu=nu), u0, steps))(viscosities)


def initial_flow(n, seed=0):
    """A random smooth divergence-free ``(2, n, n)`` velocity of RMS speed about 1."""
    rng = np.random.default_rng(seed)
    kx, ky, _ = wavenumbers(n)
    k = np.sqrt(kx ** 2 + ky ** 2)
    amplitude = np.where((k > 0) & (k <= 4), 1.0, 0.0)
    h = amplitude * (rng.normal(size=(2, *k.shape)) + 1j * rng.normal(size=(2, *k.shape)))
    u = np.fft.irfftn(h, s=(n, n), axes=(1, 2))
    u = spectral_operator(n, nu=0.0)(tg.constant(u)).numpy()
    return u / np.sqrt(np.mean(u ** 2))


def vorticity(u):
    """``d u1 / d x0 - d u0 / d x1`` of an ``(2, n, n)`` NumPy velocity (central differences)."""
    n = u.shape[-1]
    d = lambda f, axis: (np.roll(f, -1, axis) - np.roll(f, 1, axis)) * n / (4 * np.pi)
    return d(u[1], 0) - d(u[0], 1)


def make_problem(n, steps, seed=0, noise=0.01):
    """``(step, truth, observed)``: the hidden initial flow and its noisy observation
    after ``steps`` steps, NumPy ``(2, n, n)`` float64."""
    step = make_step(n)
    truth = initial_flow(n, seed)
    final = simulate(step, tg.constant(truth), steps).numpy()
    observed = final + noise * np.random.default_rng(seed + 1).normal(size=final.shape)
    return step, truth, observed


def main(argv=None):
    """Run the inverse problem; returns ``{"losses", "error", "truth", "recovered", "seconds"}``
    (the loss at every Adam step, the relative L2 error of the recovered initial flow)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="time steps N (default 20)")
    parser.add_argument("--iterations", type=int, default=200, help="Adam steps (default 200)")
    parser.add_argument("--grid", type=int, default=GRID, help="grid points per side (64)")
    parser.add_argument("--lr", type=float, default=0.1, help="Adam's learning rate")
    parser.add_argument("--smoothing", type=float, default=SMOOTHING,
                        help="prior's width: u0 = P exp(-s |k|^2) v (default %(default)s)")
    parser.add_argument("--eager", action="store_true", help="run the step eagerly")
    parser.add_argument("--checkpoints", type=int, default=None,
                        help="store at most this many velocities for the gradient (default: "
                             "every step's); the rest are recomputed (tg.checkpointing)")
    parser.add_argument("--out", default="navier_stokes.png", help="picture to write ('' none)")
    args = parser.parse_args(argv)

    step, truth, observed = make_problem(args.grid, args.steps)
    prior = spectral_operator(args.grid, dt=1.0, nu=args.smoothing)
    v = tg.Variable(np.zeros_like(truth), name="v")
    target = tg.constant(observed)
    optimizer = tg.optimizers.Adam(args.lr)

    def train_step():
        with tg.GradientTape() as tape:
            final = simulate(step, prior(v), args.steps, args.checkpoints)
            loss = tg.mean((final - target) ** 2)
        optimizer.apply_gradients([(tape.gradient(loss, v), v)])
        return loss

    run = train_step if args.eager else tg.function(train_step)
    losses = []
    start = time.perf_counter()
    for k in range(args.iterations):
        losses.append(float(run()))
        if k % max(1, args.iterations // 10) == 0 or k == args.iterations - 1:
            print(f"step {k:4d}  loss {losses[-1]:.3e}")
    seconds = time.perf_counter() - start
    recovered = prior(v).numpy()
    error = float(np.linalg.norm(recovered - truth) / np.linalg.norm(truth))
    mode = "eager" if args.eager else "compiled"
    print(f"{args.iterations} Adam steps ({mode}, N={args.steps}) in {seconds:.1f} s; relative "
          f"error of the recovered initial flow {error:.3f}")
    if args.out:
        draw(args.out, truth, observed, recovered)
        print(f"wrote {args.out}")
    return {"losses": losses, "error": error, "truth": truth, "recovered": recovered,
            "seconds": seconds}


def draw(path, truth, observed, recovered):
    """Write the vorticity of the three flows side by side as an image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 4.2))
    for ax, (title, u) in zip(axes, [("truth (t = 0)", truth), ("observed (t = N dt)", observed),
                                     ("recovered (t = 0)", recovered)]):
        w = vorticity(u)
        lim = np.abs(w).max()
        ax.imshow(w, cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.set_title(title)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    main()
