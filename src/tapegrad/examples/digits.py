"""Train a small MLP on scikit-learn's handwritten digits, with custom-gradient ops.

Run ``python -m tapegrad.examples.digits [--out PATH] [--epochs N] [--seed S] [--explain PATH]
[--eager] [--compare]``.

The demo follows the custom-gradient workflow end to end:

1. declare two custom ops: the hidden activation ``elu`` as a new **primitive** (forward on
   backend arrays, gradient registered by name with ``tg.RegisterGradient``), and a numerically
   stable ``log_softmax`` with ``tg.custom_gradient``;
2. check both numerically with ``tg.test.check_gradients``, first and second order, in float64;
3. train a 64-128-10 MLP (float32) with ``tg.optimizers.Adam`` on mini-batches, showing the
   running loss in a tqdm progress bar (plain prints when tqdm is not installed); the training
   step is compiled with ``tg.function`` (XLA through JAX) when JAX is installed, unless
   ``--eager`` is given; ``--compare`` trains both ways from the same start and prints both
   timings;
4. report the held-out accuracy as ``test accuracy: 0.xxx`` and save the training-loss curve
   as a PNG.

``--explain PATH`` first records one training step on a tape, prints ``tape.explain`` for the
parameters and draws the tape (``tg.viz``) to ``PATH`` (``.png`` or ``.svg``); without
Graphviz's ``dot`` program it writes the DOT text next to it and prints how to install it.

Data: ``sklearn.datasets.load_digits`` (1797 8x8 images bundled with scikit-learn, no
download), pixels scaled to [0, 1], 20% held out with ``train_test_split(test_size=0.2,
random_state=0, stratify=y)``. Needs the ``examples`` extra (scikit-learn, matplotlib, tqdm).
"""
from __future__ import annotations

import argparse
import pathlib
import tempfile
import time

import numpy as np

import tapegrad as tg
from tapegrad._backend import namespace as _ns

HIDDEN = 128
CLASSES = 10


# --- custom ops ---------------------------------------------------------------------------------
@tg.primitive("DigitsElu", samples=[tg.Sample((3, 4)), tg.Sample(()), tg.Sample((0, 2))],
              real_only=True)
def elu(x):
    """Exponential linear unit: ``x`` for ``x > 0``, ``exp(x) - 1`` otherwise.

    x: any shape, real float dtype (complex raises ``TypeError``: ``real_only``); the result has the same shape and dtype. Gradient: ``dy`` for
    ``x > 0``, ``dy * exp(x) = dy * (y + 1)`` otherwise (Clevert et al. 2015, eq. 2; the
    derivative is continuous at 0, so the second derivative exists away from 0).
    """
    xp = _ns(x)
    return xp.where(x > 0, x, xp.expm1(xp.minimum(x, 0)))


@tg.RegisterGradient("DigitsElu")
def _elu_grad(op, dy):
    # d elu/dx = 1 for x > 0, exp(x) = y + 1 otherwise; uses the output, so an outer tape
    # differentiates it again through the op itself.
    x, y = op.inputs[0], op.outputs[0]
    return tg.where(x > 0.0, dy, dy * (y + 1.0))


@tg.test.samples(tg.Sample((4, 10)), tg.Sample((3,), domain=(-30.0, 30.0)))
@tg.custom_gradient
def log_softmax(logits):
    """Numerically stable ``log(softmax(logits))`` along the last axis.

    logits: shape ``(..., classes)``, float dtype; result: same shape and dtype. The maximum is
    subtracted before exponentiating, so logits of magnitude 1e4 do not overflow. Gradient:
    ``dy - softmax * sum(dy)`` over the last axis (from d log_softmax_i / dx_j =
    delta_ij - softmax_j), written with the output ``y`` (``softmax = exp(y)``) so that an outer
    tape can differentiate it again.
    """
    shifted = logits - tg.max(logits, axis=-1, keepdims=True)
    y = shifted - tg.log(tg.sum(tg.exp(shifted), axis=-1, keepdims=True))

    def grad(dy):
        return dy - tg.exp(y) * tg.sum(dy, axis=-1, keepdims=True)

    return y, grad


def cross_entropy(logits, onehot):
    """Mean softmax cross-entropy of ``logits`` (batch, classes) against one-hot targets.

    Returns a 0-d Tensor of the logits' dtype; differentiable through :func:`log_softmax`.
    """
    return -tg.mean(tg.sum(onehot * log_softmax(logits), axis=-1))


def check_ops(seed: int = 0) -> dict:
    """Check the gradients of the custom ops by finite differences, first and second order.

    Uses ``tg.test.check_gradients`` on small float64 inputs, prints one line per op and order,
    and returns ``{(op name, order): True}``; a failed check raises (the checker's error).
    """
    rng = np.random.default_rng(seed)
    cases = {"elu (primitive DigitsElu)": (elu, rng.normal(size=(4, 5))),
             "log_softmax (custom_gradient)": (log_softmax, rng.normal(size=(3, 6)))}
    results = {}
    for name, (fn, x) in cases.items():
        for order in (1, 2):
            tg.test.check_gradients(fn, [x], order=order)
            results[(name, order)] = True
            print(f"gradient check {name}, order {order}: ok")
    return results


# --- data and model -------------------------------------------------------------------------------
def load_data(seed: int = 0):
    """The digits split: ``(x_train, y_train, x_test, y_test)`` as NumPy arrays.

    Pixels are float32 in [0, 1] (the raw values are 0..16), shape ``(n, 64)``; labels int64.
    The 20% test split is stratified and fixed (``random_state=0``), whatever ``seed`` is;
    ``seed`` is accepted for symmetry with the other functions and does not change the split.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test


def build_model(seed: int = 0, hidden: int = HIDDEN, dtype=np.float32) -> list:
    """Parameters ``[w1 (64, hidden), b1, w2 (hidden, 10), b2]`` as trainable Variables.

    Weights are He-normal (``std = sqrt(2 / fan_in)``), biases zero.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0.0, np.sqrt(2.0 / 64), size=(64, hidden))
    w2 = rng.normal(0.0, np.sqrt(2.0 / hidden), size=(hidden, CLASSES))
    return [tg.Variable(w1, name="w1", dtype=dtype), tg.Variable(np.zeros(hidden), name="b1",
                                                                 dtype=dtype),
            tg.Variable(w2, name="w2", dtype=dtype), tg.Variable(np.zeros(CLASSES), name="b2",
                                                                 dtype=dtype)]


def forward(params, x):
    """Logits (batch, 10) of the MLP for inputs ``x`` (batch, 64)."""
    w1, b1, w2, b2 = params
    h = elu(tg.matmul(x, w1) + b1)
    return tg.matmul(h, w2) + b2


def _progress(total):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="training", unit="step", mininterval=0.2)


def make_step(params, opt, compiled: bool):
    """One training step ``step(x, onehot) -> loss``: forward, gradient, Adam update; compiled
    with ``tg.function(jit_compile=True)`` if ``compiled``."""
    def step(xb, tb):
        with tg.GradientTape() as tape:
            loss = cross_entropy(forward(params, xb), tb)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        return loss

    return tg.function(step, jit_compile=True) if compiled else step


def train(params, x_train, y_train, *, epochs: int = 30, batch_size: int = 32,
          learning_rate: float = 3e-3, seed: int = 0, compiled: bool = False) -> list:
    """Train ``params`` in place with Adam on shuffled mini-batches; return the step losses.

    x_train: (n, 64) float array, y_train: (n,) integer labels. ``compiled``: run the step with
    ``tg.function`` (needs JAX); the first step's time (trace and XLA compile) is printed, and at
    the end the time of all the steps that traced a new signature.
    Shows a tqdm bar with the running (exponentially averaged) loss, or prints one line per
    epoch without tqdm.
    """
    rng = np.random.default_rng(seed)
    opt = tg.optimizers.Adam(learning_rate=learning_rate)
    step = make_step(params, opt, compiled)
    dtype = params[0].dtype
    onehot = np.eye(CLASSES, dtype=dtype)[y_train]
    n = len(x_train)
    steps = -(-n // batch_size)
    bar = _progress(epochs * steps)
    losses, running, tracing = [], None, 0.0
    for epoch in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            xb, tb = tg.constant(x_train[idx]), tg.constant(onehot[idx])
            traces = step.experimental_get_tracing_count() if compiled else 0
            t0 = time.perf_counter()
            value = float(step(xb, tb))
            if compiled and step.experimental_get_tracing_count() > traces:
                tracing += time.perf_counter() - t0
                if not losses:
                    print(f"first step (trace and XLA compile): {tracing:.2f} s")
            losses.append(value)
            running = value if running is None else 0.95 * running + 0.05 * value
            if bar is not None:
                bar.set_postfix(loss=f"{running:.4f}", refresh=False)
                bar.update()
        if bar is None:
            print(f"epoch {epoch + 1}/{epochs}: running loss {running:.4f}")
    if bar is not None:
        bar.close()
    if compiled:
        print(f"tracing and compiling took {tracing:.2f} s for "
              f"{step.experimental_get_tracing_count()} batch shape(s) (a last batch of "
              f"{n % batch_size or batch_size} images is a new signature); the "
              f"{len(losses)} steps ran in the rest")
    return losses


def evaluate(params, x, y) -> float:
    """Accuracy (a float in [0, 1]) of the model on inputs ``x`` (n, 64) with labels ``y``."""
    logits = forward(params, tg.constant(x)).numpy()
    return float(np.mean(np.argmax(logits, axis=-1) == y))


def plot_losses(losses, path, steps_per_epoch: int | None = None) -> None:
    """Save the training-loss curve (per step, plus the per-epoch mean) as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=0.6, alpha=0.5, label="mini-batch")
    if steps_per_epoch:
        n = len(losses) // steps_per_epoch
        means = np.asarray(losses[:n * steps_per_epoch]).reshape(n, steps_per_epoch).mean(1)
        ax.plot(np.arange(1, n + 1) * steps_per_epoch, means, "o-", label="epoch mean")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title("tapegrad MLP on sklearn digits")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def explain_step(params, x, onehot, path) -> pathlib.Path:
    """Record one training step on a tape, print ``tape.explain`` and draw the tape to ``path``.

    x: a batch (n, 64), onehot: its one-hot labels (n, 10). The picture (``.png`` or ``.svg``
    by suffix) shows the recorded ops from the parameters to the loss with their output shapes,
    the custom ops highlighted. Without Graphviz's ``dot`` program the DOT text is written to
    ``path`` with the suffix ``.dot`` instead, and the install command is printed. Returns the
    path written. The parameters are not updated.
    """
    xb, tb = tg.constant(x), tg.constant(onehot)
    with tg.GradientTape() as tape:
        loss = cross_entropy(forward(params, xb), tb)
    print(tape.explain(loss, params))
    graph = tg.viz.graph(tape, loss, params)
    try:
        path = graph.render(path)
    except tg.viz.GraphvizNotFoundError:
        path = graph.render(pathlib.Path(path).with_suffix(".dot"))
        print(f"Graphviz's `dot` program is missing, so the tape's picture was saved as DOT "
              f"text to {path}; to render it, {tg.viz.INSTALL_HINT}")
        return path
    print(f"picture of one training step saved to {path}")
    return path


# a short run of main() for ``python -m tapegrad check`` (the loss curve to a temporary file)
CHECK_ARGS = {"argv": ["--epochs", "1", "--out",
                       str(pathlib.Path(tempfile.gettempdir()) / "digits_check_loss.png")]}


def main(argv=None) -> dict:
    """Command-line entry point; returns ``{"accuracy", "losses", "checks", "out", "explain"}``."""
    parser = argparse.ArgumentParser(prog="python -m tapegrad.examples.digits",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="digits_loss.png", help="PNG file for the loss curve")
    parser.add_argument("--epochs", type=int, default=30, help="training epochs (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation/shuffling seed")
    parser.add_argument("--explain", metavar="PATH", default=None,
                        help="draw the tape of one training step to PATH (.png or .svg)")
    parser.add_argument("--eager", action="store_true",
                        help="run the training step eagerly (default: compiled when JAX is "
                             "installed)")
    parser.add_argument("--compare", action="store_true",
                        help="train eagerly and compiled from the same start; print both times")
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.explain is not None and pathlib.Path(args.explain).suffix.lower() not in (
            ".png", ".svg"):
        parser.error("--explain PATH must end in .png or .svg")

    checks = check_ops(args.seed)
    x_train, y_train, x_test, y_test = load_data(args.seed)
    params = build_model(args.seed)
    batch_size = 32
    explained = None
    if args.explain is not None:
        explained = explain_step(params, x_train[:batch_size],
                                 np.eye(CLASSES, dtype=params[0].dtype)[y_train[:batch_size]],
                                 args.explain)
    has_jax = _has_jax()
    if (args.compare or not args.eager) and not has_jax:
        print('JAX is not installed: training eagerly (pip install "tapegrad[jit]" compiles '
              "the step with XLA)")
    modes = ([False, True] if args.compare and has_jax else
             [has_jax and not args.eager])
    start = [p.numpy().copy() for p in params]
    timings = {}
    for compiled in modes:
        for p, v in zip(params, start):
            p.assign(v)
        t0 = time.perf_counter()
        losses = train(params, x_train, y_train, epochs=args.epochs, batch_size=batch_size,
                       seed=args.seed, compiled=compiled)
        timings["compiled" if compiled else "eager"] = elapsed = time.perf_counter() - t0
        print(f"trained {args.epochs} epoch(s) on {len(x_train)} images in {elapsed:.1f} s "
              f"({'compiled with tg.function' if compiled else 'eager'})")
    plot_losses(losses, args.out, -(-len(x_train) // batch_size))
    print(f"loss curve saved to {args.out}")
    accuracy = evaluate(params, x_test, y_test)
    print(f"test accuracy: {accuracy:.3f}")
    return {"accuracy": accuracy, "losses": losses, "checks": checks, "out": args.out,
            "explain": explained, "timings": timings}


def _has_jax() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
