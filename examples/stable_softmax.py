"""A numerically stable softmax with a hand-written gradient.

Reproduces the TensorFlow 2 pattern of seed article 001, example 3: a ``tf.custom_gradient``
softmax that subtracts the row maximum before exponentiating, with the gradient
``y * (dy - sum(dy * y))``.

Two corrections to the seed: the gradient of ``sum(softmax(x))`` is exactly zero (the outputs
always sum to 1), so differentiating it shows nothing; this example differentiates a weighted
sum ``sum(w * softmax(x))`` instead, and prints the zero gradient of the plain sum only as a
check. It also shows the point of the max-shift: at logits of magnitude 1e4 the naive
``exp(x) / sum(exp(x))`` overflows to ``inf / inf = nan``, while the stable version returns
the same probabilities and gradients as for the unshifted logits.
"""
import numpy as np

import tapegrad as tg


@tg.custom_gradient
def stable_softmax(x):
    """Softmax over the last axis of ``x`` (shape ``(..., n)``, float dtype); same shape out.

    Gradient: ``y * (dy - sum(dy * y, axis=-1))``, the softmax Jacobian ``diag(y) - y y^T``
    applied to ``dy``.
    """
    e = tg.exp(x - tg.max(x, axis=-1, keepdims=True))
    y = e / tg.sum(e, axis=-1, keepdims=True)

    def grad(dy):
        return y * (dy - tg.sum(dy * y, axis=-1, keepdims=True))

    return y, grad


def naive_softmax(x):
    """``exp(x) / sum(exp(x))``: overflows for large logits (for comparison only)."""
    e = tg.exp(x)
    return e / tg.sum(e, axis=-1, keepdims=True)


def _value_and_grads(x, weights):
    x = tg.Variable(x)
    with tg.GradientTape(persistent=True) as tape:
        y = stable_softmax(x)
        weighted = tg.sum(weights * y)
        total = tg.sum(y)
    g_weighted, g_sum = tape.gradient(weighted, x), tape.gradient(total, x)
    return y.numpy(), g_weighted.numpy(), g_sum.numpy()


def main():
    """Softmax and gradients at moderate and at 1e4-sized logits; print and return them."""
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    weights = np.array([1.0, 2.0, 3.0])
    y, g_weighted, g_sum = _value_and_grads(x, weights)
    print(f"stable softmax:\n{y}")
    print(f"gradient of sum(w * softmax(x)), w = {weights}:\n{g_weighted}")
    print(f"gradient of sum(softmax(x)) (zero up to rounding: outputs sum to 1):\n{g_sum}")

    large = x + 1e4
    y_large, g_large, _ = _value_and_grads(large, weights)
    with np.errstate(over="ignore", invalid="ignore"):
        naive = naive_softmax(tg.constant(large)).numpy()
    print(f"stable softmax at x + 1e4 (same as above):\n{y_large}")
    print(f"naive softmax at x + 1e4 (overflow):\n{naive}")
    return {"weights": weights.tolist(), "y": y.tolist(), "grad_weighted": g_weighted.tolist(),
            "grad_sum": g_sum.tolist(), "y_large": y_large.tolist(),
            "grad_large": g_large.tolist(), "naive_large": naive.tolist()}


if __name__ == "__main__":
    main()
