"""Shape manipulation: forward values against NumPy (and array-api-strict), gradients, errors."""
from __future__ import annotations

import array_api_strict as xs
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from gradhelpers import numeric_grad, tape_grads

RNG = np.random.default_rng(1)


_grads, _num_grad = tape_grads, numeric_grad


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
    with pytest.raises(ValueError, match=r"concat: cannot concatenate shapes \(2, 3\), \(3,\) "
                                         r"along axis 0: the tensors have different numbers of "
                                         "dimensions"):
        tg.concat([tg.ones((2, 3)), tg.ones(3)])
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
    for axis in (3, -4):  # Array API 2024.12: IndexError (not NumPy's AxisError, a ValueError)
        with pytest.raises(IndexError, match=f"expand_dims: axis {axis} is out of range") as e:
            tg.expand_dims(tg.ones((2, 3)), axis=axis)
        assert not isinstance(e.value, ValueError)


def test_expand_dims_axis_by_keyword_or_position():
    x = tg.ones((2, 3))
    assert tg.expand_dims(x, axis=1).shape == tg.expand_dims(x, 1).shape == (2, 1, 3)
    assert tg.expand_dims(x).shape == (1, 2, 3)


# --- moveaxis, roll, tile, repeat, broadcast_arrays, to_device (Array API 2023.12/2024.12) -------
SETTINGS = settings(max_examples=25, deadline=None)
STRICT = type(xs.asarray(0.0))
ARRAYS = hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64]),
                    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                    elements=st.integers(-50, 50))
NONSCALAR = hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64]),
                       hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
                       elements=st.integers(-50, 50))


def _both(fn, x, *args, **kw):
    """``fn`` on a NumPy and on an array-api-strict Tensor; returns both results as NumPy."""
    got = fn(tg.Tensor(np.asarray(x)), *args, **kw)  # on NumPy whatever the default backend
    s = fn(tg.asarray(xs.asarray(x)), *args, **kw)
    outs = got if isinstance(got, (list, tuple)) else [got]
    souts = s if isinstance(s, (list, tuple)) else [s]
    for o in souts:
        assert type(o._value) is STRICT
    return [o.numpy() for o in outs], [o.numpy() for o in souts]


def _assert_same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@SETTINGS
@given(data=st.data(), x=NONSCALAR)
def test_moveaxis_matches_numpy(data, x):
    n = x.ndim
    k = data.draw(st.integers(1, n))
    src = data.draw(st.permutations(range(-n, 0) if data.draw(st.booleans()) else range(n)))[:k]
    dst = data.draw(st.permutations(range(n)))[:k]
    src, dst = (src[0], dst[0]) if k == 1 and data.draw(st.booleans()) else (tuple(src), tuple(dst))
    (got,), (s,) = _both(lambda t: tg.moveaxis(t, src, dst), x)
    want = np.moveaxis(x, src, dst)
    _assert_same(got, want)
    _assert_same(s, want)


@SETTINGS
@given(data=st.data(), x=ARRAYS)
def test_roll_matches_numpy(data, x):
    if x.ndim and data.draw(st.booleans()):
        axis = tuple(data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=1, max_size=3)))
        shift = tuple(data.draw(st.integers(-5, 5)) for _ in axis)
    else:
        axis, shift = None, data.draw(st.integers(-5, 5))
    (got,), (s,) = _both(tg.roll, x, shift, axis=axis)
    want = np.roll(x, shift, axis=axis)
    _assert_same(got, want)
    _assert_same(s, want)


@SETTINGS
@given(x=ARRAYS, reps=st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple))
def test_tile_matches_numpy(x, reps):
    (got,), (s,) = _both(tg.tile, x, reps)
    want = np.tile(x, reps)
    _assert_same(got, want)
    _assert_same(s, want)


@SETTINGS
@given(data=st.data(), x=ARRAYS)
def test_repeat_matches_numpy(data, x):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1)) if x.ndim else None
    n = x.size if axis is None else x.shape[axis]
    if data.draw(st.booleans()):
        repeats = data.draw(st.integers(0, 3))
    else:
        repeats = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)
                                       | st.lists(st.integers(0, 3), min_size=1, max_size=1)),
                             dtype=np.int64)
    (got,), (s,) = _both(tg.repeat, x, repeats, axis=axis)
    want = np.repeat(x, repeats, axis=axis)
    _assert_same(got, want)
    _assert_same(s, want)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0,
                                                max_side=3))
def test_broadcast_arrays_matches_numpy(shapes):
    xs_ = [RNG.normal(size=s) for s in shapes.input_shapes]
    got = tg.broadcast_arrays(*[tg.Tensor(a) for a in xs_])
    assert isinstance(got, list)
    for g, w in zip(got, np.broadcast_arrays(*xs_)):
        _assert_same(g.numpy(), w)
    got = tg.broadcast_arrays(*[tg.asarray(xs.asarray(a)) for a in xs_])
    assert all(type(g._value) is STRICT and g.shape == shapes.result_shape for g in got)


def test_new_manipulation_gradients():
    x = RNG.normal(size=(2, 3, 4))
    tg.test.check_gradients(lambda a: tg.moveaxis(a, (0, -1), (2, 0)) ** 2, [x], order=2)
    tg.test.check_gradients(lambda a: tg.roll(a, (1, -2), axis=(0, 2)) ** 3, [x], order=2)
    tg.test.check_gradients(lambda a: tg.roll(a, 5) * tg.sin(a), [x], order=2)
    tg.test.check_gradients(lambda a: tg.tile(a, (2, 1, 1, 3)) ** 2, [x], order=2)
    tg.test.check_gradients(lambda a: tg.repeat(a, 3, axis=1) ** 2, [x], order=2)
    tg.test.check_gradients(lambda a: tg.repeat(a, tg.asarray([2, 0, 1, 3]), axis=-1) ** 2, [x],
                            order=2)
    tg.test.check_gradients(lambda a: tg.repeat(a, 2) ** 2, [x], order=2)
    y = RNG.normal(size=(3, 1))
    tg.test.check_gradients(lambda a, b: sum(t ** 2 for t in tg.broadcast_arrays(a, b)),
                            [x, y], order=2)
    tg.test.check_gradients(lambda a: tg.to_device(a * 1.0, a.device) ** 2, [x], order=2)


def test_repeat_and_tile_gradients_by_hand():
    v = tg.Variable([1.0, 2.0, 3.0])
    with tg.GradientTape(persistent=True) as t:
        # copies at positions 0, 1 | none | 2, 3, 4
        r = tg.sum(tg.repeat(v, tg.asarray([2, 0, 3])) * tg.arange(5.0))
        u = tg.sum(tg.tile(v, (2, 2)) * tg.reshape(tg.arange(12.0), (2, 6)))
    np.testing.assert_array_equal(t.gradient(r, v).numpy(), [0 + 1, 0, 2 + 3 + 4])
    np.testing.assert_array_equal(t.gradient(u, v).numpy(), [0 + 3 + 6 + 9, 1 + 4 + 7 + 10,
                                                             2 + 5 + 8 + 11])


def test_new_manipulation_errors():
    x = tg.ones((2, 3))
    with pytest.raises(ValueError, match="moveaxis: source axis 2 is out of range"):
        tg.moveaxis(x, 2, 0)
    with pytest.raises(ValueError, match="repeated destination axis"):
        tg.moveaxis(x, (0, 1), (1, 1))
    with pytest.raises(ValueError, match="same number of axes"):
        tg.moveaxis(x, (0, 1), 0)
    with pytest.raises(ValueError, match=r"broadcast_arrays: shapes \(2, 3\), \(4,\) do not"):
        tg.broadcast_arrays(x, tg.ones(4))
    with pytest.raises(ValueError, match="repeat: cannot repeat"):
        tg.repeat(x, tg.asarray([1, 2]), axis=1)
    with pytest.raises(ValueError, match="roll: shift"):
        tg.roll(x, (1, 2), axis=(0,))
    with pytest.raises(ValueError, match="roll: cannot roll"):
        tg.roll(x, 1, axis=2)
    assert tg.to_device(x, x.device) is x
    with pytest.raises(ValueError):
        tg.to_device(tg.Tensor(np.ones(2)), "gpu")
