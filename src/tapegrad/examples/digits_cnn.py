"""A small convolutional network on scikit-learn's digits, with a checkpoint restored midway.

Run ``python -m tapegrad.examples.digits_cnn [--epochs N] [--seed S] [--checkpoint-dir DIR]
[--devices N]``.

What a model builder needs, end to end (TensorFlow 2's names throughout):

- the model is a ``tg.Module`` holding its Variables (``conv1/kernel``, ``dense/bias``, ...);
- the forward pass is two ``tg.nn.conv2d`` layers (3x3, ``SAME``, NHWC) with ReLU, a
  ``tg.nn.max_pool2d``, then two dense layers with ``tg.nn.dropout`` (rate 0.25, training
  only);
- ``tg.optimizers.AdamW`` follows a ``tg.optimizers.schedules.CosineDecay`` learning rate
  with a linear warm-up;
- halfway through, the model and the optimizer are saved with ``tg.train.Checkpoint`` and a
  ``tg.train.CheckpointManager``; training continues from a *fresh* model and optimizer
  restored from that checkpoint, so the second half runs on restored state;
- the held-out accuracy is printed as ``test accuracy: 0.xxx``;
- ``--devices N`` trains data-parallel with ``tg.distribute.MirroredStrategy`` on N devices
  (needs JAX): the Variables are created in ``strategy.scope()``, each batch is split along
  its first axis by ``strategy.experimental_distribute_dataset`` and the step is one
  ``tg.function`` program that XLA partitions, summing the gradients across devices. On the
  CPU, N devices are made with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``, which
  ``main`` sets when JAX has not started yet. Without ``--devices`` the steps run eagerly.

Data: ``sklearn.datasets.load_digits`` as 8x8x1 images (the split of
:mod:`tapegrad.examples.digits`). Needs the ``examples`` extra.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

import numpy as np

import tapegrad as tg
from tapegrad.examples.digits import CLASSES, load_data


class DigitsCNN(tg.Module):
    """conv(32) -> conv(64) -> max-pool -> dropout -> dense(128) -> dropout -> dense(10).

    Input: images ``(n, 8, 8, 1)`` float32; output: logits ``(n, 10)`` float32. Convolutions
    are 3x3, ``SAME``, with ReLU; the pool is 2x2 (to 4x4x64); dropout rate 0.25, in training
    only. Kernels are He-normal (``std = sqrt(2 / fan_in)``), biases zero.
    """

    def __init__(self, seed: int = 0, name: str = "digits_cnn"):
        super().__init__(name=name)
        rng = np.random.default_rng(seed)

        def layer(*shape):
            fan_in = int(np.prod(shape[:-1]))
            return {"kernel": tg.Variable(rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shape),
                                          dtype=tg.float32),
                    "bias": tg.Variable(np.zeros(shape[-1]), dtype=tg.float32)}

        self.conv1 = layer(3, 3, 1, 32)
        self.conv2 = layer(3, 3, 32, 64)
        self.dense1 = layer(4 * 4 * 64, 128)
        self.dense2 = layer(128, CLASSES)

    def __call__(self, images, training: bool = False):
        """Logits ``(n, 10)`` for images ``(n, 8, 8, 1)``; dropout only if ``training``."""
        h = images
        for conv in (self.conv1, self.conv2):
            h = tg.nn.relu(tg.nn.conv2d(h, conv["kernel"], strides=1, padding="SAME")
                           + conv["bias"])
        h = tg.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
        h = tg.nn.dropout(tg.reshape(h, (h.shape[0], -1)), rate=0.25, training=training)
        h = tg.nn.relu(h @ self.dense1["kernel"] + self.dense1["bias"])
        h = tg.nn.dropout(h, rate=0.25, training=training)
        return h @ self.dense2["kernel"] + self.dense2["bias"]


def make_optimizer(total_steps: int):
    """AdamW (weight decay 1e-4) on a cosine schedule: warm-up to 3e-3 over 5% of the steps."""
    warmup = max(1, total_steps // 20)
    schedule = tg.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0, decay_steps=total_steps - warmup, alpha=0.02,
        warmup_target=3e-3, warmup_steps=warmup)
    return tg.optimizers.AdamW(learning_rate=schedule, weight_decay=1e-4)


def train_epochs(model, opt, x, y, epochs, batch_size, rng):
    """Train ``model`` in place for ``epochs`` epochs; return the step losses (floats)."""
    losses = []
    params = model.trainable_variables
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch_size):
            idx = order[start:start + batch_size]
            xb, yb = tg.constant(x[idx]), tg.constant(y[idx])
            with tg.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = tg.mean(tg.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=yb, logits=logits))
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            losses.append(float(loss))
    return losses


def train_epochs_distributed(strategy, model, opt, x, y, epochs, batch_size, rng):
    """:func:`train_epochs` data-parallel: each global batch of ``batch_size`` images is split
    across ``strategy``'s devices (an uneven last batch runs whole on each) and the step is one
    compiled program; returns the step losses (floats, read once per epoch)."""
    params = model.trainable_variables
    step = _steps.get((id(model), id(opt)))
    if step is None:
        @tg.function
        def step(xb, yb):
            with tg.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = tg.mean(tg.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=yb, logits=logits))
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss
        _steps[(id(model), id(opt))] = step
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(x))
        batches = [(x[order[s:s + batch_size]], y[order[s:s + batch_size]])
                   for s in range(0, len(x), batch_size)]
        epoch = [strategy.run(step, args=batch)
                 for batch in strategy.experimental_distribute_dataset(batches)]
        losses += [float(strategy.reduce("MEAN", loss, axis=None)) for loss in epoch]
    return losses


_steps = {}  # (model, optimizer) -> their compiled step


def _strategy(devices):
    """A ``MirroredStrategy`` on the first ``devices`` devices; on the CPU, asks XLA for that
    many when JAX has not started yet. Raises ``SystemExit`` (a usage error) when JAX is
    missing or has fewer devices."""
    if "jax" not in sys.modules:
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = (
                f"{flags} --xla_force_host_platform_device_count={devices}").strip()
    try:
        import jax
    except ImportError:
        raise SystemExit("--devices needs JAX: pip install \"tapegrad[jit]\"") from None
    if len(jax.devices()) < devices:
        raise SystemExit(f"--devices {devices}: JAX sees {len(jax.devices())} device(s); on the "
                         f"CPU start Python with XLA_FLAGS=--xla_force_host_platform_device_count="
                         f"{devices} (JAX had started before this option was read)")
    return tg.distribute.MirroredStrategy(devices=list(range(devices)), per_replica=False)


def evaluate(model, x, y) -> float:
    """Accuracy in [0, 1] of ``model`` on images ``x`` (n, 8, 8, 1) with labels ``y``."""
    logits = model(tg.constant(x)).numpy()
    return float(np.mean(np.argmax(logits, axis=-1) == y))


# a short run of main() for ``python -m tapegrad check``
CHECK_ARGS = {"argv": ["--epochs", "2"]}


def main(argv=None) -> dict:
    """Command-line entry point; returns ``{"accuracy", "losses", "checkpoint", "seconds"}``."""
    parser = argparse.ArgumentParser(prog="python -m tapegrad.examples.digits_cnn",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=12, help="training epochs (default 12)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation/shuffling seed")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="where the midway checkpoint is written (default: a temporary "
                             "directory, removed at the end)")
    parser.add_argument("--devices", type=int, default=None,
                        help="train data-parallel on this many devices (tg.distribute; needs "
                             "JAX; default: eager steps on one device)")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the checkpoint is taken halfway)")
    if args.devices is not None and args.devices < 1:
        parser.error("--devices must be at least 1")
    strategy = None if args.devices is None else _strategy(args.devices)
    scope = strategy.scope if strategy is not None else contextlib.nullcontext

    def train(model, opt, epochs):
        if strategy is None:
            return train_epochs(model, opt, x_train, y_train, epochs, batch_size, rng)
        return train_epochs_distributed(strategy, model, opt, x_train, y_train, epochs,
                                        batch_size, rng)

    tg.random.set_seed(args.seed)  # the dropout masks
    x_train, y_train, x_test, y_test = load_data(args.seed)
    x_train, x_test = (a.reshape(-1, 8, 8, 1) for a in (x_train, x_test))
    batch_size = 32
    total = args.epochs * -(-len(x_train) // batch_size)
    rng = np.random.default_rng(args.seed)
    first = args.epochs // 2

    with tempfile.TemporaryDirectory() as tmp:
        directory = args.checkpoint_dir or tmp
        t0 = time.perf_counter()
        with scope():
            model, opt = DigitsCNN(args.seed), make_optimizer(total)
        losses = train(model, opt, first)
        manager = tg.train.CheckpointManager(tg.train.Checkpoint(model=model, optimizer=opt),
                                             directory, max_to_keep=2)
        path = manager.save()
        print(f"epoch {first}: accuracy {evaluate(model, x_test, y_test):.3f}, "
              f"checkpoint saved to {path}")

        with scope():
            model, opt = DigitsCNN(args.seed + 1), make_optimizer(total)  # fresh state...
        tg.train.Checkpoint(model=model, optimizer=opt).restore(manager.latest_checkpoint)
        print(f"restored a fresh model and optimizer from {manager.latest_checkpoint} "
              f"(step {int(opt.iterations.numpy())})")
        losses += train(model, opt, args.epochs - first)
        seconds = time.perf_counter() - t0
    accuracy = evaluate(model, x_test, y_test)
    where = "" if strategy is None else f" on {strategy.num_replicas_in_sync} device(s)"
    print(f"trained {args.epochs} epochs on {len(x_train)} images{where} in {seconds:.1f} s")
    print(f"test accuracy: {accuracy:.3f}")
    return {"accuracy": accuracy, "losses": losses, "checkpoint": path, "seconds": seconds}


if __name__ == "__main__":
    main()
