"""Replacing a gradient: a ReLU whose backward pass returns ``0.5 * dy`` everywhere.

Reproduces the TensorFlow 2 pattern of seed article 002, example 1: ``tf.custom_gradient``
around ``tf.nn.relu`` whose ``grad(dy)`` ignores the forward and returns ``dy * 0.5``. The tape
uses whatever the gradient function returns, so at ``x = [-1, 2]`` the "gradient" is
``[0.5, 0.5]`` although the true derivative of ReLU there is ``[0, 1]``.
"""
import tapegrad as tg


@tg.custom_gradient
def scaled_gradient_relu(x):
    """``relu(x)`` (any shape, float dtype) with its gradient replaced by ``0.5 dy``."""
    y = tg.nn.relu(x)

    def grad(dy):
        return dy * 0.5

    return y, grad


def main():
    """Differentiate at ``x = [-1, 2]``; print and return the output and the replaced gradient."""
    x = tg.Variable([-1.0, 2.0])
    with tg.GradientTape() as tape:
        y = scaled_gradient_relu(x)
    dy_dx = tape.gradient(y, x)
    print(f"output:   {y.numpy()}")
    print(f"gradient: {dy_dx.numpy()}  (true ReLU derivative: [0. 1.])")
    return {"y": y.numpy().tolist(), "dy_dx": dy_dx.numpy().tolist()}


if __name__ == "__main__":
    main()
