"""Shape manipulation: forward values against NumPy, gradients, errors."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(1)


def _grads(f, *xs):
    vs = [tg.Variable(np.asarray(x, dtype=np.float64)) for x in xs]
    with tg.GradientTape() as t:
        y = f(*vs)
    return [g.numpy() for g in t.gradient(y, vs)]


def _num_grad(f, xs, k, h=1e-6):
    """Central differences of the scalar ``f(*xs)`` with respect to ``xs[k]``."""
    xs = [np.asarray(x, dtype=np.float64) for x in xs]
    g = np.zeros_like(xs[k])
    for i in np.ndindex(g.shape):
        e = np.zeros_like(g)
        e[i] = h
        plus = [tg.constant(x + e if j == k else x) for j, x in enumerate(xs)]
        minus = [tg.constant(x - e if j == k else x) for j, x in enumerate(xs)]
        g[i] = (float(f(*plus)) - float(f(*minus))) / (2 * h)
    return g


def _check(op, np_op, *shapes, **kw):
    """Forward against NumPy, gradient of a random projection against central differences."""
    xs = [RNG.normal(size=s) for s in shapes]
    got = op(*[tg.constant(x) for x in xs], **kw)
    want = np_op(*xs, **kw)
    outs = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    assert len(outs) == len(wants)
    ws = []
    for o, w in zip(outs, wants):
        assert o.shape == np.shape(w)
        np.testing.assert_array_equal(o.numpy(), w)
        ws.append(RNG.normal(size=np.shape(w)))

    def f(*ts):
        out = op(*ts, **kw)
        out = out if isinstance(out, tuple) else (out,)
        total = tg.constant(0.0)
        for o, w in zip(out, ws):
            total = total + tg.sum(o * w)
        return total

    for k, g in enumerate(_grads(f, *xs)):
        np.testing.assert_allclose(g, _num_grad(f, xs, k), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape, axes", [((2, 3, 4), (2, 0, 1)), ((3, 4), (1, 0)), ((), ()),
                                         ((2, 3, 4), (-1, -3, 1)), ((0, 2), (1, 0))])
def test_permute_dims(shape, axes):
    _check(lambda x: tg.permute_dims(x, axes), lambda x: np.permute_dims(x, axes), shape)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (1, 0, 2)])
def test_matrix_transpose_and_mT(shape):
    _check(tg.matrix_transpose, np.matrix_transpose, shape)
    x = RNG.normal(size=shape)
    np.testing.assert_array_equal(tg.constant(x).mT.numpy(), np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("shape, axis", [((3, 4), 0), ((3, 4), 1), ((3, 4), -1), ((), 0),
                                         ((3, 4), -3)])
def test_expand_dims(shape, axis):
    _check(lambda x: tg.expand_dims(x, axis=axis), lambda x: np.expand_dims(x, axis), shape)


@pytest.mark.parametrize("shape, axis", [((3, 1, 4), 1), ((1, 1), (0, 1)), ((1, 0), 0),
                                         ((2, 1), -1)])
def test_squeeze(shape, axis):
    _check(lambda x: tg.squeeze(x, axis), lambda x: np.squeeze(x, axis), shape)


@pytest.mark.parametrize("shape, axis", [((3, 4), None), ((3, 4), 0), ((2, 3, 4), (0, 2)),
                                         ((5,), -1), ((), None)])
def test_flip(shape, axis):
    _check(lambda x: tg.flip(x, axis=axis), lambda x: np.flip(x, axis=axis), shape)


def test_reshape_and_broadcast_to():
    _check(lambda x: tg.reshape(x, (4, 3)), lambda x: np.reshape(x, (4, 3)), (3, 4))
    _check(lambda x: tg.reshape(x, -1), lambda x: np.reshape(x, -1), (3, 4))
    _check(lambda x: tg.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)),
           (3, 1))


@pytest.mark.parametrize("shapes, axis", [([(2, 3), (2, 4)], 1), ([(2, 3), (1, 3), (0, 3)], 0),
                                          ([(3,), (2, 2)], None), ([(1,)], 0),
                                          ([(2, 3, 1), (2, 3, 2)], -1)])
def test_concat(shapes, axis):
    _check(lambda *xs: tg.concat(xs, axis=axis), lambda *xs: np.concat(xs, axis=axis), *shapes)


@pytest.mark.parametrize("shapes, axis", [([(2, 3), (2, 3)], 0), ([(2, 3)] * 3, -1),
                                          ([(), ()], 0), ([(0, 2)], 1), ([(2, 3), (2, 3)], 1)])
def test_stack(shapes, axis):
    _check(lambda *xs: tg.stack(xs, axis=axis), lambda *xs: np.stack(xs, axis=axis), *shapes)


@pytest.mark.parametrize("shape, axis", [((3, 2), 0), ((2, 3, 4), 1), ((1,), 0), ((2, 3), -1)])
def test_unstack(shape, axis):
    _check(lambda x: tg.unstack(x, axis=axis), lambda x: np.unstack(x, axis=axis), shape)


def test_unstack_returns_a_tuple_and_unused_pieces_get_zero_gradient():
    x = tg.Variable(np.arange(6.0).reshape(3, 2))
    with tg.GradientTape() as t:
        parts = tg.unstack(x)
        y = tg.sum(parts[1] * 3.0)
    assert isinstance(parts, tuple) and len(parts) == 3
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [[0, 0], [3, 3], [0, 0]])
    assert tg.unstack(tg.ones((0, 2))) == ()


def test_concat_gradient_by_hand_with_promotion():
    a = tg.Variable(np.ones(2, dtype=np.float32))
    b = tg.Variable([1.0, 2.0, 3.0])
    with tg.GradientTape() as t:
        y = tg.sum(tg.concat([a, b]) * tg.constant([1.0, 2.0, 3.0, 4.0, 5.0]))
    ga, gb = t.gradient(y, [a, b])
    assert ga.dtype == np.float32
    np.testing.assert_array_equal(ga.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(gb.numpy(), [3.0, 4.0, 5.0])


def test_second_order_through_concat_and_stack():
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.sum(tg.concat([x, tg.flip(x)]) ** 3) + tg.sum(tg.stack([x, x * x]) ** 2)
        g = inner.gradient(y, x)
    h = outer.jacobian(g, x).numpy()
    # y = 2 sum x^3 + sum x^2 + sum x^4: diagonal Hessian 12 x + 2 + 12 x^2
    np.testing.assert_allclose(h, np.diag([12 + 2 + 12, 24 + 2 + 48]))


def test_errors():
    with pytest.raises(ValueError, match=r"squeeze: cannot remove axis 0 of a tensor of shape"):
        tg.squeeze(tg.ones((2, 3)), 0)
    with pytest.raises(ValueError, match=r"concat: cannot concatenate shapes \(2, 3\), \(4, 5\)"):
        tg.concat([tg.ones((2, 3)), tg.ones((4, 5))])
    with pytest.raises(ValueError, match="at least one tensor"):
        tg.concat([])
    with pytest.raises(TypeError, match="list or tuple of tensors"):
        tg.stack(tg.ones((2, 3)))
    with pytest.raises(ValueError, match="must all have the same shape"):
        tg.stack([tg.ones(2), tg.ones(3)])
    with pytest.raises(ValueError, match="0-d"):
        tg.unstack(tg.constant(1.0))
    with pytest.raises(ValueError, match="not a permutation"):
        tg.permute_dims(tg.ones((2, 3)), (0, 0))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        tg.matrix_transpose(tg.ones(3))
    with pytest.raises(ValueError, match="expand_dims: axis 3 is out of range"):
        tg.expand_dims(tg.ones((2, 3)), axis=3)
