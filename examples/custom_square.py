"""Custom square: a function whose gradient is given explicitly with ``tg.custom_gradient``.

Reproduces the TensorFlow 2 pattern of seed article 001, example 1::

    @tf.custom_gradient
    def custom_square(x):
        y = tf.square(x)
        def grad(dy):
            return 2 * x * dy
        return y, grad

The forward squares its input; ``grad(dy)`` returns the vector-Jacobian product ``2 x dy``.
At ``x = 2`` the value is 4 and the gradient is 4.
"""
import tapegrad as tg


@tg.custom_gradient
def custom_square(x):
    """``x ** 2`` (any shape, float dtype) with the hand-written gradient ``2 x dy``."""
    y = tg.square(x)

    def grad(dy):
        return 2.0 * x * dy

    return y, grad


def main():
    """Differentiate ``custom_square`` at ``x = 2``; print and return the value and gradient."""
    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = custom_square(x)
    dy_dx = tape.gradient(y, x)
    print(f"custom square of {float(x)}: {float(y)}")
    print(f"gradient of custom square: {float(dy_dx)}")
    return {"y": float(y), "dy_dx": float(dy_dx)}


if __name__ == "__main__":
    main()
