"""Recover the steady force that stirs a 2D incompressible flow from the flow seen every K
steps over N time steps (N = 1000 and more).

The seed articles' physics case, done with tapegrad's control flow and custom gradients (the
TensorFlow 2 way: ``tf.custom_gradient``, ``tf.recompute_grad``, a loop compiled once):

1. The flow: the incompressible Navier-Stokes equations on the periodic square
   ``[0, 2 pi)^2``, a ``GRID x GRID`` grid, velocity ``u`` of shape ``(2, GRID, GRID)``
   (component 0 along axis 0), float64, stirred by a steady force ``f``. One time step of
   ``dt`` (Stam 1999, "Stable fluids"): semi-Lagrangian advection (each grid point takes the
   velocity found, by bilinear interpolation, at the point the flow brought to it:
   ``x - dt u(x)``), the force's impulse ``dt f``, then viscous diffusion and the pressure
   projection onto divergence-free fields, both exact in Fourier space.
2. The spectral part, ``u -> P D u`` with ``D = exp(-nu |k|^2 dt)`` and ``P = I - k k^T / |k|^2``
   at each wavenumber ``k``, is a ``tg.custom_gradient``: a real, even, symmetric Fourier
   multiplier is self-adjoint, so its gradient is the same map applied to the cotangent (no
   differentiation through the FFTs).
3. The time loop is ``tg.lax.scan`` of the step wrapped in ``tg.recompute_grad``: compiled, the
   loop is one XLA loop traced once whatever N, and the reverse pass keeps only the velocity
   entering each step, recomputing the step's interior. ``--checkpoints S`` keeps at most
   ``S`` velocities and replays the rest on the binomial schedule (``tg.checkpointing``), so
   ``--steps 10000 --checkpoints 40`` differentiates 10^4 steps in the memory of about 40.
4. The inverse problem: a hidden force, ``FORCING`` times a combination of the 12
   divergence-free Fourier modes with ``0 < |k| <= 2`` (``forcing_modes``; coefficients
   ``theta`` drawn from a normal distribution), stirs the flow for N steps, which is observed
   with a little noise every K steps (``--every K``, default ``EVERY`` = 100), from step 0.
   Adam (``tg.optimizers.Adam``, its rate a cosine decay and ``beta_1 = 0.5``, so that the
   loss falls without oscillating) fits a Variable of 12 coefficients so that the flow
   predicts each observation from the one K steps before (``misfit``): one ``tg.lax.scan``
   over all N steps whose carry restarts from the observed flow at each window's first step
   and whose outputs ``ys`` are the misfits at the observation times. The whole Adam step
   (loss, gradient through the N steps, update) is one ``tg.function`` unless ``--eager``.

   Why not recover the initial flow from the flow N steps later, the obvious inverse
   problem? Over a long horizon it is ill-posed: advection stretches and folds the initial
   vorticity into filaments finer than the grid, and every step's bilinear interpolation
   averages neighbouring values (a numerical diffusion far larger than ``NU`` here), so the
   flow N steps later depends on the initial flow only through its largest scales, damped
   more with every step. The gradient stays right (to 3e-6 against central differences),
   but very different initial flows fit the observation equally well: at N = 100 and 1000
   the recovered initial flow was off by a relative error of about 1. Nor does a single
   start work for the force: the flow is chaotic, so a misfit many hundred steps after one
   start is a rugged function of the force (on 32 x 32, 100 steps after a start the misfit
   grows as the square of the force's error, 0.0016 at 5 % off, 0.0065 at 10 %; 1000 steps
   after, it is already 0.1-0.4 at 5 % off and no longer grows with the error). Restarting
   every K steps bounds that horizon, while the steady force, acting at every step, is seen
   afresh by every window: the fit stays well-posed however long the record, and a longer
   record only adds data.

5. An ensemble: ``ensemble(u0, viscosities, steps)`` runs the simulation for several
   viscosities at once, one ``tg.vmap`` over the viscosity (the step, its custom gradient and
   the scan batched by JAX), equal to separate simulations (``tests/test_examples.py``).

``main()`` prints the loss falling, the compile time, the time per Adam step, the peak memory
of the process and the relative error of the recovered force, and writes a picture (the
vorticity of the true and recovered forces and of the last observed flow, with colour bars)
with matplotlib. Run ``python examples/navier_stokes.py [--steps N] [--every K]
[--iterations I] [--grid G] [--lr LR] [--checkpoints S] [--eager] [--out PATH]``; e.g.
``--steps 1000`` recovers the force to a relative error of 0.006 in 30 Adam steps (0.0014
with ``--grid 32``). Needs the ``jit`` extra (JAX) to compile and matplotlib to draw.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np

import tapegrad as tg

GRID = 64
DT = 0.05
NU = 1e-3
EVERY = 100  # steps between observations
FORCING = 0.05  # the hidden force: FORCING * sum(theta_i * mode_i), theta_i ~ N(0, 1)


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
    ``2 pi / n`` wide), with the spectral part a ``custom_gradient``: ``step(u)``, or
    ``step(u, forcing)`` with the impulse ``dt * forcing`` (an ``(2, n, n)`` float64 Tensor)
    added after advection. Pass the force as an argument, not a closure, so that
    ``tg.recompute_grad(step)`` differentiates with respect to it."""
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

    def step(u, forcing=None):
        moved = advect(u)
        return project(moved if forcing is None else moved + dt * forcing)

    return step


def simulate(step, u0, steps, checkpoints=None, forcing=None):
    """The velocity after ``steps`` steps of ``step`` from ``u0`` (a ``tg.lax.scan`` of the
    step wrapped in ``tg.recompute_grad``), under ``forcing`` (an ``(2, n, n)`` Tensor, or
    ``None`` for none). ``checkpoints``: ``None`` keeps the velocity entering every step for
    the gradient; an int ``s`` keeps at most ``s`` of them and replays the rest on the
    binomial schedule (``tg.checkpointing.Revolve``)."""
    checkpointed = tg.recompute_grad(step)
    args = () if forcing is None else (forcing,)
    final, _ = tg.lax.scan(lambda u, _: (checkpointed(u, *args), None), u0, None, length=steps,
                           checkpoints=checkpoints)
    return final


def misfit(step, forcing, observed, every, checkpoints=None):
    """How well the flow under ``forcing`` predicts each observation from the one before: the
    mean, over the ``m`` windows, of the mean squared difference between ``observed[j + 1]``
    and the flow ``every`` steps after ``observed[j]`` (``observed``: ``(m + 1, 2, n, n)``,
    the flow seen every ``every`` steps from step 0). A 0-d float64 Tensor from one
    ``tg.lax.scan`` over all ``m * every`` steps of recompute_grad steps: at a window's first
    step the carry restarts from the observation, and the scan's outputs ``ys`` are each
    step's misfit weighted ``1 / m`` at a window's last step, 0 elsewhere (so the memory does
    not grow with ``m``); ``checkpoints`` as ``simulate``'s. Restarting keeps the fit
    well-posed however long the record: the flow is chaotic, so a misfit ``N`` steps after a
    single start is a rugged function of the force once ``N`` passes a few hundred steps."""
    m = observed.shape[0] - 1
    i = np.arange(m * every)
    xs = (tg.constant(i // every), tg.constant(i % every == 0),
          tg.constant(((i + 1) % every == 0) / m))
    checkpointed = tg.recompute_grad(step)

    def body(u, x):
        j, start, weight = x
        u = checkpointed(tg.where(start, tg.take(observed, j, axis=0), u), forcing)
        return u, weight * tg.mean((u - tg.take(observed, j + 1, axis=0)) ** 2)

    _, ys = tg.lax.scan(body, observed[0], xs, checkpoints=checkpoints)
    return tg.sum(ys)


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


def forcing_modes(n):
    """The 12 divergence-free Fourier modes with ``0 < |k| <= 2`` on an ``n x n`` grid, an
    ``(12, 2, n, n)`` float64 NumPy array: for each wavevector ``k`` of a half plane, the
    velocity of the stream function ``sin(k . x)`` and of ``cos(k . x)``, each scaled to RMS 1
    (they are orthogonal, so the relative error of a coefficient vector is that of its
    force)."""
    x = 2 * np.pi * np.arange(n) / n
    x0, x1 = np.meshgrid(x, x, indexing="ij")
    modes = []
    for a, b in [(1, 0), (2, 0), (0, 1), (0, 2), (1, 1), (-1, 1)]:
        for wave in (np.cos, np.sin):  # u = (d psi / d x1, -d psi / d x0), psi = sin / cos
            mode = np.stack([b * wave(a * x0 + b * x1), -a * wave(a * x0 + b * x1)])
            modes.append(mode / np.sqrt(np.mean(mode ** 2)))
    return np.stack(modes)


def make_problem(n, steps, every=EVERY, seed=0, noise=0.01, compiled=True):
    """The inverse problem: a dict with ``step`` (``make_step(n)``), ``modes``
    (``forcing_modes(n)``), ``theta`` (the hidden coefficients, ``(12,)``: the force is
    ``FORCING * theta . modes``), ``every`` and ``observed`` (NumPy ``(steps // every + 1, 2,
    n, n)``: the flow at steps 0, ``every``, ``2 every``, ..., ``steps``, from
    ``initial_flow(n, seed)``, plus Gaussian noise of standard deviation ``noise``). The flow
    is run ``every`` steps at a time (one program, compiled once unless ``compiled`` is
    false), keeping only the observed velocities. Raises ``ValueError`` when ``steps`` is not
    a positive multiple of ``every``."""
    if every < 1 or steps < every or steps % every:
        raise ValueError(f"make_problem: steps={steps} is not a positive multiple of "
                         f"every={every}, the number of steps between observations; choose "
                         "steps = every * a whole number")
    rng = np.random.default_rng(seed)
    step, modes = make_step(n), forcing_modes(n)
    theta = rng.normal(size=len(modes))
    forcing = tg.constant(FORCING * np.tensordot(theta, modes, axes=1))
    run = lambda u: simulate(step, u, every, forcing=forcing)  # noqa: E731
    run = tg.function(run) if compiled else run
    frames = [initial_flow(n, seed)]
    for _ in range(steps // every):
        frames.append(run(tg.constant(frames[-1])).numpy())
    observed = np.stack(frames)
    observed += noise * np.random.default_rng(seed + 1).normal(size=observed.shape)
    return {"step": step, "modes": modes, "theta": theta, "every": every, "observed": observed}


WHY = ("Why not recover the initial flow from the flow N steps later? Advection folds it into "
       "filaments finer than the grid and every step's bilinear interpolation smooths them "
       "away, so the flow N steps later keeps only a damped trace of its largest scales: very "
       "different initial flows fit equally well (at N = 100 or 1000 the recovered one is off "
       "by ~100%). And a misfit N steps after one start is a rugged function of anything, the "
       "flow being chaotic. So each window of K steps restarts from the observed flow, and a "
       "steady force, acting at every step, is seen afresh by every window: the fit stays "
       "well-posed however long the record.")


# a short run of main() for ``python -m tapegrad check``: a small grid, a few steps, no picture
CHECK_ARGS = {"argv": ["--grid", "16", "--steps", "4", "--every", "2", "--iterations", "1",
                       "--eager", "--out", ""]}


def main(argv=None):
    """Run the inverse problem; returns ``{"losses", "error", "theta", "recovered",
    "compile_seconds", "step_seconds", "peak_rss_mb"}``: the loss at every Adam step, the
    relative L2 error of the recovered force (equal to that of its coefficients ``recovered``
    against the hidden ``theta``), the first call's time less a later step's, the mean time
    of the later Adam steps and the process's peak resident memory (``ru_maxrss``, MiB)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="time steps N (default 200)")
    parser.add_argument("--every", type=int, default=EVERY,
                        help="K: the flow is observed every K steps (default %(default)s)")
    parser.add_argument("--iterations", type=int, default=30, help="Adam steps (default 30)")
    parser.add_argument("--grid", type=int, default=GRID, help="grid points per side (64)")
    parser.add_argument("--lr", type=float, default=0.2,
                        help="Adam's initial learning rate, decayed to 1%% of it by a cosine "
                             "over the iterations (default %(default)s)")
    parser.add_argument("--eager", action="store_true", help="run the step eagerly")
    parser.add_argument("--checkpoints", type=int, default=None,
                        help="store at most this many velocities for the gradient (default: "
                             "every step's); the rest are recomputed (tg.checkpointing)")
    parser.add_argument("--out", default="navier_stokes.png", help="picture to write ('' none)")
    args = parser.parse_args(argv)
    if args.every < 1 or args.steps < args.every or args.steps % args.every:
        parser.error(f"--steps {args.steps} is not a positive multiple of --every {args.every} "
                     "(the flow is observed every K steps); choose --steps as a multiple of "
                     "--every, or a smaller --every")

    problem = make_problem(args.grid, args.steps, args.every, compiled=not args.eager)
    step, modes = problem["step"], tg.constant(FORCING * problem["modes"])
    observed = tg.constant(problem["observed"])
    theta = tg.Variable(np.zeros(len(problem["theta"])), name="theta")
    schedule = tg.optimizers.schedules.CosineDecay(args.lr, args.iterations, alpha=0.01)
    optimizer = tg.optimizers.Adam(schedule, beta_1=0.5)  # little momentum: no overshoot

    def train_step():
        with tg.GradientTape() as tape:
            forcing = tg.tensordot(theta, modes, axes=1)
            loss = misfit(step, forcing, observed, args.every, args.checkpoints)
        optimizer.apply_gradients([(tape.gradient(loss, theta), theta)])
        return loss

    run = train_step if args.eager else tg.function(train_step)
    mode = "eager" if args.eager else "compiled"
    memory = "every step's velocity" if args.checkpoints is None else \
        f"at most {args.checkpoints} velocities"
    print(f"Recovering the 12 coefficients of a steady force from the flow observed every "
          f"{args.every} steps over N={args.steps} steps ({args.grid}x{args.grid}, {mode}; the "
          f"gradient keeps {memory}).\n{WHY}")
    losses, times = [], []
    for k in range(args.iterations):
        start = time.perf_counter()
        losses.append(float(run()))
        times.append(time.perf_counter() - start)
        if k % max(1, args.iterations // 10) == 0 or k == args.iterations - 1:
            print(f"step {k:4d}  loss {losses[-1]:.3e}")
    step_seconds = float(np.mean(times[1:])) if len(times) > 1 else times[0]
    compile_seconds = times[0] - step_seconds
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (
        2 ** 20 if sys.platform == "darwin" else 2 ** 10)  # bytes on macOS, KiB on Linux
    recovered = theta.numpy()
    error = float(np.linalg.norm(recovered - problem["theta"]) / np.linalg.norm(problem["theta"]))
    print(f"{args.iterations} Adam steps ({mode}, N={args.steps}): first call "
          f"{times[0]:.2f} s (trace and compile: about {compile_seconds:.2f} s more than a later "
          f"step), then "
          f"{step_seconds:.3f} s per step; peak memory (ru_maxrss) {peak_mb:.0f} MiB")
    print(f"relative error of the recovered force: {error:.3f}")
    if args.out:
        draw(args.out, problem, recovered, args.steps)
        print(f"wrote {args.out}")
    return {"losses": losses, "error": error, "theta": problem["theta"],
            "recovered": recovered, "compile_seconds": compile_seconds,
            "step_seconds": step_seconds, "peak_rss_mb": peak_mb}


def draw(path, problem, recovered, steps):
    """Write a picture: the vorticity of the true force, of the recovered force (coefficients
    ``recovered``) and of the last observed flow (after ``steps`` steps), each with a colour
    bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = FORCING * problem["modes"]
    true, found = np.tensordot(problem["theta"], modes, 1), np.tensordot(recovered, modes, 1)
    lim = np.abs(vorticity(true)).max()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    panels = [("vorticity of the true force", true, lim),
              ("vorticity of the recovered force", found, lim),
              (f"vorticity of the observed flow\nafter N = {steps} steps (t = {steps * DT:g})",
               problem["observed"][-1], None)]
    for ax, (title, u, lim) in zip(axes, panels):
        w = vorticity(u)
        lim = lim or np.abs(w).max()
        image = ax.imshow(w, cmap="RdBu_r", vmin=-lim, vmax=lim)
        fig.colorbar(image, ax=ax, shrink=0.85)
        ax.set_title(title)
        ax.axis("off")
    fig.suptitle(f"Navier-Stokes: the steady force recovered from the flow seen every "
                 f"{problem['every']} steps over N = {steps} steps")
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    main()
