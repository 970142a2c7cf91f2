"""register_hook, straight_through, clip_gradient."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientShapeError


def test_hook_inspects_the_gradient_of_an_intermediate():
    x = tg.Variable([1.0, 2.0])
    seen = []
    with tg.GradientTape() as tape:
        h = x * 3.0
        h.register_hook(lambda g: seen.append(g.numpy().copy()))
        y = tg.sum(h * h)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [18.0, 36.0])
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], [6.0, 12.0])  # complete: d(h^2)/dh


def test_hook_sees_the_accumulated_gradient_once():
    x = tg.Variable(2.0)
    seen = []
    with tg.GradientTape() as tape:
        h = x * 1.0
        tg.register_hook(h, lambda g: seen.append(float(g)))
        y = h * 3.0 + h * 4.0
    assert float(tape.gradient(y, x)) == 7.0
    assert seen == [7.0]


def test_hook_replaces_the_gradient_and_leaf_hooks():
    x = tg.Variable([1.0, -1.0])
    with tg.GradientTape() as tape:
        h = x * 2.0
        handle = h.register_hook(lambda g: g * 0.0 + 1.0)
        leaf = tg.register_hook(x, lambda g: g * 10.0)
        y = tg.sum(h * h)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [20.0, 20.0])
    handle.remove()
    leaf.remove()
    with tg.GradientTape() as tape:
        y = tg.sum(x * x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, -2.0])


def test_hook_returning_wrong_shape_is_an_error():
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        h = x * 1.0
        h.register_hook(lambda g: tg.sum(g))
        y = tg.sum(h)
    with pytest.raises(GradientShapeError, match="gradient hook .*lambda.* shape \\(\\)"):
        tape.gradient(y, x)


def test_straight_through_round():
    rnd = tg.straight_through(tg.round)
    x = tg.Variable([0.4, 1.6])
    with tg.GradientTape() as tape:
        y = tg.sum(rnd(x) * tg.constant([2.0, 3.0]))
    np.testing.assert_allclose(rnd(x).numpy(), [0.0, 2.0])
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 3.0])
    assert rnd.surrogate


def test_clip_gradient():
    x = tg.Variable([1.0, 5.0])
    with tg.GradientTape() as tape:
        y = tg.sum(tg.clip_gradient(x * x, -3.0, 3.0) * tg.constant([1.0, 10.0]))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 30.0])
    with pytest.raises(ValueError, match="lo=2.0 is greater than hi=1.0"):
        tg.clip_gradient(x, 2.0, 1.0)
