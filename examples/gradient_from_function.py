"""A gradient computed by a separate function: ``grad(dy) = dy * sin(x) + 0.1 * x``.

Reproduces the TensorFlow 2 pattern of seed article 002, example 2: ``tf.custom_gradient`` on
``y = x ** 2`` whose gradient function delegates to another Python function.

Caution: ``dy * sin(x) + 0.1 * x`` is a *surrogate*, not a vector-Jacobian product. A true VJP
is linear in ``dy`` (doubling the cotangent doubles the gradient); the ``+ 0.1 x`` term does not
scale with ``dy``, and neither term is the derivative ``2 x`` of the forward. The example prints
both facts. Use such surrogates deliberately (e.g. straight-through estimators), never as the
gradient of the forward.
"""
import tapegrad as tg


def complex_gradient_calculation(dy, x):
    """The replacement "gradient": ``dy * sin(x) + 0.1 * x`` (shapes of ``x``)."""
    return dy * tg.sin(x) + 0.1 * x


@tg.custom_gradient
def custom_op(x):
    """``x ** 2`` (any shape, float dtype) whose gradient is the surrogate above."""
    y = x ** 2

    def grad(dy):
        return complex_gradient_calculation(dy, x)

    return y, grad


def main():
    """Differentiate at ``x = [1, 2]`` with cotangents 1 and 2; print and return the results."""
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape(persistent=True) as tape:
        y = custom_op(x)
    g1 = tape.gradient(y, x)
    g2 = tape.gradient(y, x, output_gradients=2.0 * tg.ones_like(y))
    del tape
    print(f"surrogate gradient (dy = 1): {g1.numpy()}")
    print(f"surrogate gradient (dy = 2): {g2.numpy()}  != 2 x {g1.numpy()}: not linear in dy,")
    print(f"  so it is a surrogate, not a true VJP (the true gradient is 2x = {2 * x.numpy()})")
    return {"grad": g1.numpy().tolist(), "grad_dy2": g2.numpy().tolist(),
            "true_grad": (2 * x.numpy()).tolist()}


if __name__ == "__main__":
    main()
