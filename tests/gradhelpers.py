"""Gradients for the op tests, computed two independent ways: the tape, and central differences."""
import numpy as np

import tapegrad as tg


def tape_grads(f, *xs):
    """Tape gradients of the scalar ``f(*xs)`` with respect to each ``xs[k]`` (float64 arrays)."""
    vs = [tg.Variable(np.asarray(x, dtype=np.float64)) for x in xs]
    with tg.GradientTape() as tape:
        y = f(*vs)
    return [g.numpy() for g in tape.gradient(y, vs)]


def numeric_grad(f, xs, k, h=1e-6):
    """Central differences of the scalar ``f(*xs)`` with respect to ``xs[k]`` (float64)."""
    xs = [np.asarray(x, dtype=np.float64) for x in xs]
    g = np.zeros_like(xs[k])
    for i in np.ndindex(g.shape):
        e = np.zeros_like(g)
        e[i] = h
        plus = [tg.constant(x + e if j == k else x) for j, x in enumerate(xs)]
        minus = [tg.constant(x - e if j == k else x) for j, x in enumerate(xs)]
        g[i] = (float(f(*plus)) - float(f(*minus))) / (2 * h)
    return g
