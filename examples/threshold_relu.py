"""A trainable thresholded ReLU: a new primitive op with a gradient registered by name.

Reproduces the TensorFlow 2 pattern of seed article 000: a custom op ``CustomRelu`` with a
threshold input, its gradient attached with ``@tf.RegisterGradient``, and a training loop in
which Adam updates both the data ``x`` and the ``threshold`` on the dummy loss
``sum((out - 1)^2)``. Here the op is declared with ``@tg.primitive("ThresholdRelu")`` (forward
on backend arrays) and ``@tg.RegisterGradient("ThresholdRelu")`` (gradient in tapegrad ops),
which attaches the gradient for real (the seed's registration was never attached to any op).

Choice of forward. The seed's ``where(x > t, x, 0)`` has derivative zero with respect to ``t``
almost everywhere (moving ``t`` only changes which elements jump between ``0`` and ``x``), so
an honest threshold gradient is zero and the threshold could never learn. This example uses
the shifted variant ``where(x > t, x - t, 0)``, continuous in both arguments, whose exact
derivatives are ``d/dx = 1`` and ``d/dt = -1`` on the active elements ``x > t`` and 0 elsewhere.

What to expect: the threshold falls (lowering it raises every active output towards 1 and
switches more elements on), and the active elements are pulled to 1. Elements still below the
threshold get no gradient and contribute 1 each, so the loss decreases towards that count,
not to 0.
"""
import numpy as np

import tapegrad as tg


@tg.primitive("ThresholdRelu", samples=[tg.Sample((3, 4), tg.Arg((), (-0.5, 0.5))),
                                        tg.Sample((2, 3), tg.Arg((3,), (-0.5, 0.5)))])
def threshold_relu(x, threshold):
    """Shifted thresholded ReLU: ``x - threshold`` where ``x > threshold``, else 0.

    x: any shape, float dtype; threshold: a scalar or a tensor broadcastable to ``x``. The
    result has the broadcast shape. Gradient: ``dy`` to ``x`` and ``-dy`` to ``threshold`` on
    the active elements (derivative of ``x - t``), 0 elsewhere.
    """
    xp = x.__array_namespace__()  # the backend arrays' own Array API namespace (NumPy here)
    return xp.where(x > threshold, x - threshold, xp.zeros_like(x - threshold))


@tg.RegisterGradient("ThresholdRelu")
def _threshold_relu_grad(op, dy):
    x, threshold = op.inputs
    dx = tg.where(x > threshold, dy, tg.zeros_like(dy))
    # d/dt (x - t) = -1 on active elements; the tape sums this output-shaped gradient back
    # to the threshold's shape (a sum over all elements for a scalar threshold).
    return dx, -dx


def main(steps=100, learning_rate=0.01, seed=0):
    """Train ``x`` and the threshold with Adam; print and return losses and the threshold.

    Returns ``{"losses": [loss at steps 0, 10, ...], "threshold": final value}``.
    """
    x = tg.Variable(tg.random.Generator.from_seed(seed).normal([10, 10]), name="x")
    threshold = tg.Variable(0.5, name="threshold")
    optimizer = tg.optimizers.Adam(learning_rate)
    losses = []
    for i in range(steps):
        with tg.GradientTape() as tape:
            output = threshold_relu(x, threshold)
            loss = tg.sum(tg.square(output - tg.ones_like(output)))  # the seed's dummy loss
        if i % 10 == 0:
            losses.append(float(loss))
            print(f"loss at step {i} = {float(loss):.4f}, threshold = {float(threshold):.4f}")
        grads = tape.gradient(loss, [x, threshold])
        optimizer.apply_gradients(zip(grads, [x, threshold]))
    return {"losses": losses, "threshold": float(threshold)}


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
