"""Indexing: ``Tensor.__getitem__`` and ``__setitem__``, ``take``, ``take_along_axis`` and their
gradients."""
from __future__ import annotations

import array_api_strict as xs
import numpy as np
import pytest

import tapegrad as tg
from gradhelpers import numeric_grad, tape_grads

RNG = np.random.default_rng(2)


def _grad(f, x):
    return tape_grads(f, x)[0]


def _num_grad(f, x, h=1e-6):
    return numeric_grad(f, [x], 0, h)


MASK = np.array([[True, False, True, False], [False, False, True, True], [True] * 4])
KEYS = [
    1, -1, slice(1, 3), (slice(None), 2), (Ellipsis, 1), (None, 0),
    (1, None, slice(None, None, -1)),
    (slice(None), None, Ellipsis), (), [2, 0, 2], np.array([[0, 1], [2, 2]]),
    (np.array([0, 2, 2]), np.array([1, 3, 1])), (slice(None), np.array([3, 3, 0])),
    (np.array([1, 0]), slice(1, 3)), MASK, (slice(None), MASK[0]),
    (1, 2), (np.array([], dtype=np.intp),),
]


@pytest.mark.parametrize("key", KEYS, ids=[str(i) for i in range(len(KEYS))])
def test_getitem_matches_numpy_and_gradient(key):
    x = RNG.normal(size=(3, 4))
    np_key = key if not isinstance(key, list) else np.asarray(key)
    want = x[np_key]
    got = tg.constant(x)[key]
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(got.numpy(), want)
    w = RNG.normal(size=np.shape(want))

    def f(t):
        return tg.sum(t[key] * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)


def test_repeated_indices_accumulate():
    x = [10.0, 20.0, 30.0]
    np.testing.assert_array_equal(_grad(lambda t: tg.sum(t[[0, 2, 0, 0]]), x), [3.0, 0.0, 1.0])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(_grad(lambda t: tg.sum(t[np.array([2, 2, 1, 2])] * w), x),
                                  [0.0, 3.0, 7.0])  # x2: 1 + 2 + 4
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(
        _grad(lambda t: tg.sum(t[np.array([1, 1]), np.array([0, 0])]), m), [[0, 0, 0], [2, 0, 0]])


def test_boolean_mask_and_tensor_keys():
    x = np.arange(6.0).reshape(2, 3)
    t = tg.constant(x)
    np.testing.assert_array_equal(t[t > 2.0].numpy(), [3.0, 4.0, 5.0])
    np.testing.assert_array_equal(_grad(lambda v: tg.sum(v[tg.constant(x) > 2.0] ** 2), x),
                                  [[0, 0, 0], [6, 8, 10]])
    idx = tg.constant(np.array([2, 0]))
    np.testing.assert_array_equal(t[:, idx].numpy(), x[:, [2, 0]])
    np.testing.assert_array_equal(t[idx[1]].numpy(), x[0])  # 0-d integer tensor as an index
    np.testing.assert_array_equal(t[tg.newaxis, ..., 1].numpy(), x[None, ..., 1])


def test_len_and_iteration_use_getitem():
    x = tg.Variable(np.arange(6.0).reshape(3, 2))
    with tg.GradientTape() as t:
        rows = list(x)
        y = tg.sum(rows[0] * rows[2])
    assert len(x) == 3 and len(rows) == 3
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [[4, 5], [0, 0], [0, 1]])


def test_second_order_with_repeated_indices():
    x = tg.Variable([1.0, 2.0, 3.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.sum(x[[0, 0, 2]] ** 3)  # = 2 x0^3 + x2^3
        g = inner.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), [6.0, 0.0, 27.0])
    np.testing.assert_allclose(outer.jacobian(g, x).numpy(), np.diag([12.0, 0.0, 18.0]))


def test_gradient_of_gradient_with_respect_to_the_cotangent():
    # the gradient of getitem is a scatter-add, whose own gradient is getitem again
    x = tg.Variable([1.0, 2.0, 3.0])
    dy = tg.Variable([1.0, 10.0, 100.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = x[[2, 2, 0]]
        g = inner.gradient(y, x, output_gradients=dy)
        z = tg.sum(g * tg.constant([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g.numpy(), [100.0, 0.0, 11.0])
    np.testing.assert_allclose(outer.gradient(z, dy).numpy(), [3.0, 3.0, 1.0])


@pytest.mark.parametrize("shape, indices, axis", [
    ((5,), [0, 4, 4, -1], None), ((3, 4), [2, 0, 2], 0), ((3, 4), [[1, 3], [3, 3]], 1),
    ((2, 3, 4), [0, 0], -2), ((3, 4), [], 1)])
def test_take(shape, indices, axis):
    x = RNG.normal(size=shape)
    idx = np.asarray(indices, dtype=np.intp)
    got = tg.take(tg.constant(x), tg.constant(idx), axis=axis)
    want = np.take(x, idx, axis=axis)
    np.testing.assert_array_equal(got.numpy(), want)
    w = RNG.normal(size=want.shape)

    def f(t):
        return tg.sum(tg.take(t, idx, axis=axis) * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape, ishape, axis", [((3, 4), (3, 2), 1), ((3, 4), (5, 4), 0),
                                                 ((2, 3, 4), (2, 3, 6), -1), ((3, 4), (1, 4), 0),
                                                 ((3, 1), (3, 5), 1)])
def test_take_along_axis(shape, ishape, axis):
    x = RNG.normal(size=shape)
    idx = RNG.integers(0, shape[axis], size=ishape)
    got = tg.take_along_axis(tg.constant(x), tg.constant(idx), axis=axis)
    want = np.take_along_axis(x, idx, axis=axis)
    np.testing.assert_array_equal(got.numpy(), want)
    w = RNG.normal(size=want.shape)

    def f(t):
        return tg.sum(tg.take_along_axis(t, idx, axis=axis) * w)

    np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)


def test_take_along_axis_with_argmax_picks_the_maxima():
    x = tg.Variable([[1.0, 5.0, 2.0], [7.0, 0.0, 7.5]])
    with tg.GradientTape() as t:
        m = tg.take_along_axis(x, tg.argmax(x, axis=1, keepdims=True), axis=1)
        y = tg.sum(m)
    np.testing.assert_array_equal(m.numpy(), [[5.0], [7.5]])
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [[0, 1, 0], [0, 0, 1]])


def test_errors():
    x = tg.ones((3, 4))
    with pytest.raises(IndexError, match=r"tensor index \[5\] is invalid for a tensor of shape "
                                         r"\(3, 4\)"):
        x[5]
    with pytest.raises(IndexError, match=r"<array shape=\(2,\) dtype=float64>"):
        x[tg.constant([0.0, 1.0])]
    with pytest.raises(ValueError, match="take: axis is required"):
        tg.take(x, [0])
    with pytest.raises(ValueError, match="take: axis 2 is out of range"):
        tg.take(x, [0], axis=2)
    with pytest.raises(IndexError):
        tg.take(x, [7], axis=0)
    with pytest.raises(ValueError, match="same number"):
        tg.take_along_axis(x, np.zeros(3, dtype=np.intp), axis=0)


# --- x[key] = v ----------------------------------------------------------------------------------
def _set(x, key, v):
    """``x`` with ``x[key] = v``, through ``Tensor.__setitem__`` on a copy (x is not changed)."""
    y = x + 0  # a tensor made by an op: assignable under a tape that watches x
    y[key] = v
    return y


def _np_key(key):
    return np.asarray(key) if isinstance(key, list) else key


@pytest.mark.parametrize("key", KEYS, ids=[str(i) for i in range(len(KEYS))])
@pytest.mark.parametrize("vshape", ["full", "broadcast", "scalar"])
def test_setitem_matches_numpy_and_gradients(key, vshape):
    x = RNG.normal(size=(3, 4))
    target = np.shape(x[_np_key(key)])
    v = {"full": RNG.normal(size=target), "scalar": 2.5,
         "broadcast": RNG.normal(size=target[-1:] if target else ())}[vshape]
    want = x.copy()
    want[_np_key(key)] = v
    got = tg.constant(x)
    got[key] = v if vshape == "scalar" else tg.constant(v)
    assert isinstance(got, tg.Tensor) and got.dtype == np.float64
    np.testing.assert_array_equal(got.numpy(), want)
    w = RNG.normal(size=x.shape)
    if vshape == "scalar":
        def f(a):
            return tg.sum(_set(a, key, 2.5) ** 2 * w)

        np.testing.assert_allclose(_grad(f, x), _num_grad(f, x), rtol=1e-6, atol=1e-8)
        return

    def g(a, b):
        return tg.sum(_set(a, key, b) ** 2 * w)

    for k in (0, 1):
        np.testing.assert_allclose(tape_grads(g, x, v)[k], numeric_grad(g, [x, v], k),
                                   rtol=1e-6, atol=1e-8)


def test_setitem_gradient_formulas_and_repeated_positions():
    x0, v = tg.Variable([1.0, 2.0, 3.0, 4.0]), tg.Variable([10.0, 20.0, 30.0])
    w = tg.constant([1.0, 2.0, 3.0, 4.0])
    with tg.GradientTape() as tape:
        x = x0 * 1
        x[[0, 2, 0]] = v  # position 0 is written twice; NumPy stores the last value (30)
        y = tg.sum(x * w)
    np.testing.assert_array_equal(x.numpy(), [30.0, 2.0, 20.0, 4.0])
    gx, gv = tape.gradient(y, [x0, v])
    np.testing.assert_array_equal(gx.numpy(), [0.0, 2.0, 0.0, 4.0])  # zeros where overwritten
    np.testing.assert_array_equal(gv.numpy(), [0.0, 3.0, 1.0])  # v[0] was overwritten
    with tg.GradientTape() as tape:
        x = x0 * 1
        x[1:3] = v[:1]  # broadcast: both positions get v[0]
        y = tg.sum(x * w)
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [5.0, 0.0, 0.0])


def test_setitem_second_order():
    rng = np.random.default_rng(3)

    def f(a, b):
        y = a * a
        y[1:, ::2] = b ** 3  # b broadcast over the rows
        y[tg.constant([0, 0]), tg.constant([1, 3])] = tg.sin(b[:2])
        return tg.sum(y * y * a)

    tg.test.check_gradients(f, [rng.normal(size=(3, 4)), rng.normal(size=(2,))], order=2)


def test_setitem_casts_the_value_and_keeps_dtype():
    x = tg.constant(np.zeros(3, dtype=np.float32))
    v = tg.Variable(np.array([1.5, 2.5]))  # float64 into float32
    with tg.GradientTape() as tape:
        y = x + 0
        y[:2] = v * 2
        s = tg.sum(y * y)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.numpy(), [3.0, 5.0, 0.0])
    g = tape.gradient(s, v)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g.numpy(), [12.0, 20.0])
    i = tg.constant([1, 2, 3])
    i[0] = 7.9  # NumPy's cast: truncation
    assert i.dtype == np.int64 and i.numpy().tolist() == [7, 2, 3]


def test_setitem_rebinds_the_python_object_only():
    x = tg.constant([1.0, 2.0, 3.0])
    y, z, tail = x, x * 1, x[1:]
    old_id = x._id
    x[0] = 5
    assert y is x and x._id != old_id
    np.testing.assert_array_equal(x.numpy(), [5.0, 2.0, 3.0])
    np.testing.assert_array_equal(z.numpy(), [1.0, 2.0, 3.0])  # computed before: unchanged
    np.testing.assert_array_equal(tail.numpy(), [2.0, 3.0])


def test_setitem_tape_gradient_reaches_old_value_and_value():
    x0 = tg.constant([1.0, 2.0, 3.0])
    v = tg.constant(4.0)
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([x0, v])
        x = x0 * x0
        before = x  # the same object: it is updated too
        x[1] = v * v
        y = tg.sum(x * tg.constant([1.0, 10.0, 100.0]))
    assert before is x
    np.testing.assert_array_equal(x.numpy(), [1.0, 16.0, 9.0])
    gx, gv = tape.gradient(y, [x0, v])
    np.testing.assert_array_equal(gx.numpy(), [2.0, 0.0, 600.0])  # d(x0^2)/dx0, zero at [1]
    assert float(gv) == 80.0  # 10 * 2v


def test_setitem_keeps_what_the_tape_recorded():
    # the gradients of Exp (its output), Max (its input) and Mul (the other factor) read the
    # tensors that are assigned to afterwards: they must see the values they were recorded with
    x0, c = tg.constant([0.0, 1.0, 2.0]), tg.constant([2.0, 3.0, 4.0])
    with tg.GradientTape() as tape:
        tape.watch(x0)
        a = tg.exp(x0)
        m = tg.max(a)
        b = x0 * c
        a[2] = -1.0
        c[0] = 100.0
        y = m + tg.sum(b) + tg.sum(a)
    e = np.exp([0.0, 1.0, 2.0])
    np.testing.assert_allclose(tape.gradient(y, x0).numpy(),
                               [0, 0, e[2]] + np.array([2.0, 3.0, 4.0]) + [e[0], e[1], 0])


def test_setitem_on_a_variable_assigns():
    v = tg.Variable([[1.0, 2.0], [3.0, 4.0]], name="w")
    obj = v
    v[0, :] = tg.constant([7, 8])
    v[v > 7.5] = 0
    assert obj is v and isinstance(v, tg.Variable) and v.name == "w"
    np.testing.assert_array_equal(v.numpy(), [[7.0, 0.0], [3.0, 4.0]])
    with tg.GradientTape() as tape:  # not read under the tape yet: an unrecorded assignment
        v[1, 1] = 10.0
        y = tg.sum(v * v)
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [[14.0, 0.0], [6.0, 20.0]])


def test_setitem_on_a_watched_source_raises():
    x0 = tg.constant([1.0, 2.0])
    v = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x0)
        x = x0
        with pytest.raises(RuntimeError, match=r"tensor\[0\]: a recording GradientTape watches "
                                               r"this tensor as a source.*tg\.where.*x = x \+ 0"):
            x[0] = 3.0
        y = v * 2  # reading v watches it
        with pytest.raises(RuntimeError, match="watches this Variable as a source.*stop_recording"):
            v[0] = 3.0
        with tape.stop_recording():
            v[1] = 5.0  # not recording: an assignment
        y[0] = 0.0  # made by a recorded op: fine
        x = x + 0  # the advised copy
        x[0] = 3.0
        s = tg.sum(x * x)
    np.testing.assert_array_equal(x0.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(v.numpy(), [1.0, 5.0])
    np.testing.assert_array_equal(tape.gradient(s, x0).numpy(), [0.0, 4.0])
    with tg.GradientTape() as tape:
        tape.watch(x0)
    x0[0] = 3.0  # the tape is no longer recording
    assert x0.numpy().tolist() == [3.0, 2.0]


def test_setitem_errors():
    x = tg.ones((3, 4))
    with pytest.raises(IndexError, match=r"tensor index \[5\] is invalid for a tensor of shape "
                                         r"\(3, 4\)"):
        x[5] = 1.0
    with pytest.raises(ValueError, match=r"cannot assign a value of shape \(3,\) to "
                                         r"tensor\[0\] of a tensor of shape \(3, 4\)"):
        x[0] = tg.ones(3)
    np.testing.assert_array_equal(x.numpy(), np.ones((3, 4)))  # unchanged after the errors


def test_setitem_on_array_api_strict_tensors():
    # array-api-strict assigns basic keys and masks itself; integer arrays go through NumPy
    x = tg.Variable(np.arange(12.0).reshape(3, 4))
    s = tg.asarray(xs.asarray(np.arange(12.0).reshape(3, 4)))
    v = tg.asarray(xs.asarray([10.0, 20.0]))
    with tg.GradientTape() as tape:
        tape.watch(v)
        y = s * 1
        y[0, 1:3] = v
        y[np.array([2, 1]), np.array([0, 3])] = v * v
        y[None, 1, 0] = -1.0
        loss = tg.sum(y)
    assert type(y._value) is type(xs.asarray(1.0))
    want = x.numpy().copy()
    want[0, 1:3] = [10, 20]
    want[[2, 1], [0, 3]] = [100, 400]
    want[None, 1, 0] = -1
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(tape.gradient(loss, v).numpy(), [21.0, 41.0])
