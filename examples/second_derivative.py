"""A second derivative through a custom gradient, with nested tapes.

Reproduces the TensorFlow 2 pattern of nesting ``tf.GradientTape`` blocks to differentiate a
gradient (seed article 002, example 3, done the working way): the inner tape gives the first
derivative of a ``tf.custom_gradient`` function, and the outer tape, which records the gradient
function's ops, differentiates that again.

The function is ``cube(x) = x ** 3`` with the hand-written gradient ``3 x^2 dy``. Because the
gradient function is written with tapegrad ops, it is itself differentiable: at ``x = [1, 2]``
the first derivative is ``3 x^2 = [3, 12]`` and the second ``6 x = [6, 12]``.
"""
import tapegrad as tg


@tg.custom_gradient
def cube(x):
    """``x ** 3`` (any shape, float dtype); gradient ``3 x^2 dy`` written in tapegrad ops."""
    y = x * x * x

    def grad(dy):
        return dy * 3.0 * x * x  # tapegrad ops: an outer tape records (and differentiates) them

    return y, grad


def main():
    """First and second derivative of ``cube`` at ``x = [1, 2]``; print and return them."""
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = cube(x)
        dy_dx = inner.gradient(y, x)
    d2y_dx2 = outer.gradient(dy_dx, x)
    print(f"first derivative 3x^2:  {dy_dx.numpy()}")
    print(f"second derivative 6x:   {d2y_dx2.numpy()}")
    return {"dy_dx": dy_dx.numpy().tolist(), "d2y_dx2": d2y_dx2.numpy().tolist()}


if __name__ == "__main__":
    main()
