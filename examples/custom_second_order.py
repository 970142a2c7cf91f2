"""A custom *second-order* gradient: a nested ``custom_gradient`` inside the gradient function.

Corrects seed article 002, example 3. There the gradient function returned
``(dx, gradgrad)``, a gradient and a function, for a single input: TensorFlow raises
``ValueError`` and tapegrad raises ``GradientCountError`` (the example shows the message). A
gradient function returns exactly one tensor per input. To control the second-order gradient,
compute that tensor with another ``custom_gradient`` function, whose own gradient function is
then what an outer tape uses; the second derivative itself comes from the outer tape.

Here ``custom_quadratic(x) = x ** 2``; its gradient ``2 x dy`` is computed by the nested
``quadratic_grad(x, dy)``, whose hand-written gradient is ``(2 dy ddy, 2 x ddy)`` (the partial
derivatives of ``2 x dy`` with respect to ``x`` and ``dy``). The result is checked against the
true derivatives: first ``2 x``, second ``2``.
"""
import tapegrad as tg

calls = {"second_order": 0}


@tg.custom_gradient
def quadratic_grad(x, dy):
    """``2 x dy`` with a hand-written gradient: the custom second-order rule of ``x ** 2``."""

    def grad(ddy):
        calls["second_order"] += 1
        return 2.0 * dy * ddy, 2.0 * x * ddy

    return 2.0 * x * dy, grad


@tg.custom_gradient
def custom_quadratic(x):
    """``x ** 2`` (any shape, float dtype) whose gradient is computed by ``quadratic_grad``."""

    def grad(dy):
        return quadratic_grad(x, dy)

    return x * x, grad


@tg.custom_gradient
def seed_quadratic(x):
    """The seed's broken version: the gradient function returns a gradient *and* a function."""

    def grad(dy):
        def gradgrad(ddy):
            return 2.0 * ddy
        return 2.0 * x * dy, gradgrad

    return x * x, grad


def main():
    """First and second derivative of ``custom_quadratic`` at ``[1, 3]``, and the seed's error."""
    calls["second_order"] = 0
    x = tg.Variable([1.0, 3.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = custom_quadratic(x)
        dy_dx = inner.gradient(y, x)
    d2y_dx2 = outer.gradient(dy_dx, x)
    print(f"first derivative:  {dy_dx.numpy()}  (true 2x = {2 * x.numpy()})")
    print(f"second derivative: {d2y_dx2.numpy()}  (true: [2. 2.]); custom rule called "
          f"{calls['second_order']} time(s)")

    with tg.GradientTape() as tape:
        y = seed_quadratic(x)
    try:
        tape.gradient(y, x)
        seed_error = None
    except Exception as e:  # noqa: BLE001 - shown to the reader
        seed_error = f"{type(e).__name__}: {e}"
        print(f"the seed's version raises {seed_error.split(';')[0]}")
    return {"dy_dx": dy_dx.numpy().tolist(), "d2y_dx2": d2y_dx2.numpy().tolist(),
            "second_order_calls": calls["second_order"], "seed_error": seed_error}


if __name__ == "__main__":
    main()
