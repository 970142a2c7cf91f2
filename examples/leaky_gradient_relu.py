"""A ReLU whose *gradient* leaks: the forward is a plain ReLU, the backward passes 1% below zero.

Reproduces the TensorFlow 2 pattern of seed article 001, example 2: ``tf.custom_gradient``
around ``tf.nn.relu`` with ``grad(dy) = where(x < 0, 0.01 dy, dy)``. The forward output is still
exactly ``max(x, 0)``; only the backward pass is changed, so units stuck below zero keep
receiving a small gradient. (This is a deliberate surrogate gradient, not the derivative of the
forward.)
"""
import tapegrad as tg

LEAK = 0.01


@tg.custom_gradient
def leaky_gradient_relu(x):
    """``relu(x)`` (any shape, float dtype); gradient ``dy`` for ``x >= 0``, ``0.01 dy`` below."""
    y = tg.nn.relu(x)

    def grad(dy):
        return tg.where(x < 0.0, dy * LEAK, dy)

    return y, grad


def main():
    """Apply the op to ``[-1, 1, -2, 3]``; print and return the output and the gradient."""
    x = tg.Variable([-1.0, 1.0, -2.0, 3.0])
    with tg.GradientTape() as tape:
        y = leaky_gradient_relu(x)
    dy_dx = tape.gradient(y, x)
    print(f"custom ReLU output:   {y.numpy()}")
    print(f"custom ReLU gradient: {dy_dx.numpy()}")
    return {"y": y.numpy().tolist(), "dy_dx": dy_dx.numpy().tolist()}


if __name__ == "__main__":
    main()
