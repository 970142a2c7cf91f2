"""tg.IndexedSlices: the row-gather gradient of a Variable (TensorFlow 2's ResourceGather
gradient), its aggregation, conversions, and the optimizers' row updates (Keras 3), eager
and compiled; checked against the dense gradient (the Variable read with ``read_value``)
and NumPy formulas."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.compat import tensorflow as tf

rng = np.random.default_rng(33)
W0 = rng.normal(size=(10, 4)).astype(np.float32)
IDS = np.array([[1, 3], [3, 7], [1, 9]])  # repeated ids
SCALE = np.arange(1, 5, dtype=np.float32)


def _loss(table, ids=IDS):
    e = tg.nn.embedding_lookup(table, ids)
    return tg.sum(e * e * tg.constant(SCALE))


def _dense_expected(w, ids=IDS):
    out = np.zeros_like(w)
    np.add.at(out, ids.reshape(-1), 2 * w[ids.reshape(-1)] * SCALE)
    return out


def test_gradient_is_indexed_slices_equal_to_the_dense_gradient():
    v = tg.Variable(W0)
    with tg.GradientTape(persistent=True) as tape:
        sparse_loss = _loss(v)
        dense_loss = _loss(v.read_value())  # a dense read: the gradient is a Tensor
    g = tape.gradient(sparse_loss, v)
    assert isinstance(g, tg.IndexedSlices) and isinstance(g, tf.IndexedSlices)
    assert g.dense_shape == g.shape == (10, 4) and g.dtype == np.float32
    np.testing.assert_array_equal(g.indices.numpy(), [1, 3, 3, 7, 1, 9])
    assert g.values.shape == (6, 4)
    d = tape.gradient(dense_loss, v)
    assert type(d) is tg.Tensor
    np.testing.assert_allclose(tg.convert_to_tensor(g).numpy(), d.numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g), _dense_expected(W0), rtol=1e-6)
    np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), d.numpy(), rtol=1e-6)


@pytest.mark.parametrize("gather", [lambda v, i: tg.take(v, i, axis=0), lambda v, i: v[i],
                                    lambda v, i: tf.gather(v, i % 10)])
def test_take_getitem_and_tf_gather_give_indexed_slices(gather):
    v = tg.Variable(W0)
    with tg.GradientTape() as tape:
        y = tg.sum(gather(v, np.array([4, -6, 0])) * 2.0)  # -6: row 4, counted from the end
    g = tape.gradient(y, v)
    assert isinstance(g, tg.IndexedSlices)
    np.testing.assert_array_equal(g.indices.numpy(), [4, 4, 0])
    expected = np.zeros_like(W0)
    expected[4], expected[0] = 4.0, 2.0  # the repeated row sums
    np.testing.assert_array_equal(np.asarray(g), expected)


def test_two_gathers_concatenate_and_a_dense_use_makes_it_dense():
    v = tg.Variable(W0)
    with tg.GradientTape(persistent=True) as tape:
        two = tg.sum(v[np.array([2])]) + tg.sum(tg.take(v, np.array([5, 2]), axis=0) * 3.0)
        mixed = tg.sum(v[np.array([2])]) + tg.sum(v * 2.0)
        columns = tg.sum(v[:, np.array([0, 1])])  # not a row gather: dense
    g = tape.gradient(two, v)
    assert isinstance(g, tg.IndexedSlices)
    np.testing.assert_array_equal(g.indices.numpy(), [5, 2, 2])  # TF: the later use first
    expected = np.zeros_like(W0)
    expected[2], expected[5] = 4.0, 3.0
    np.testing.assert_array_equal(np.asarray(g), expected)
    m = tape.gradient(mixed, v)
    assert type(m) is tg.Tensor
    expected = np.full_like(W0, 2.0)
    expected[2] += 1.0
    np.testing.assert_array_equal(m.numpy(), expected)
    assert type(tape.gradient(columns, v)) is tg.Tensor


def test_plain_tensors_functional_transforms_and_jacobians_stay_dense():
    x = tg.constant(W0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = _loss(x)
    g = tape.gradient(y, x)
    assert type(g) is tg.Tensor  # only Variables get IndexedSlices
    np.testing.assert_allclose(g.numpy(), _dense_expected(W0), rtol=1e-6)
    v = tg.Variable(W0)
    gv = tg.grad(_loss)(v)
    assert type(gv) is tg.Tensor  # JAX's transforms: dense
    np.testing.assert_allclose(gv.numpy(), _dense_expected(W0), rtol=1e-6)
    with tg.GradientTape() as tape:
        y = tg.nn.embedding_lookup(v, np.array([1, 1]))[:, 0]
    j = tape.jacobian(y, v, experimental_use_pfor=False)
    expected = np.zeros((2, 10, 4), np.float32)
    expected[:, 1, 0] = 1.0
    np.testing.assert_array_equal(j.numpy(), expected)


def test_second_order_through_the_sparse_gradient_is_the_dense_one():
    v = tg.Variable(W0)
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.sum(v[np.array([1, 1, 3])] ** 3)
        g = inner.gradient(y, v)  # an outer tape records: dense, differentiable
        assert type(g) is tg.Tensor
        s = tg.sum(g * g)
    h = outer.gradient(s, v)
    counts = np.zeros(10, np.float32)
    np.add.at(counts, [1, 1, 3], 1)
    # g = 3 c w^2 per row; d sum(g^2)/dw = 2 g * 6 c w
    expected = 2 * (3 * counts[:, None] * W0 ** 2) * 6 * counts[:, None] * W0
    np.testing.assert_allclose(np.asarray(h), expected, rtol=1e-5)


def test_function_traces_and_returns_indexed_slices():
    v = tg.Variable(W0)

    @tg.function
    def grad(ids):
        with tg.GradientTape() as tape:
            y = _loss(v, ids)
        return tape.gradient(y, v)

    g = grad(tg.constant(IDS))
    assert isinstance(g, tg.IndexedSlices)
    np.testing.assert_allclose(np.asarray(g), _dense_expected(W0), rtol=1e-6)


def _train(make, sparse, compiled, ids_per_step, dtype=np.float32):
    v = tg.Variable(W0.astype(dtype))
    opt = make()

    def step(ids):
        with tg.GradientTape() as tape:
            y = _loss(v if sparse else v.read_value(), ids)
        g = tape.gradient(y, v)
        assert isinstance(g, tg.IndexedSlices) == sparse
        opt.apply_gradients([(g, v)])

    run = tg.function(step) if compiled else step
    for ids in ids_per_step:
        run(tg.constant(ids))
    return v.numpy()


OPTIMIZERS = {
    "sgd": lambda: tg.optimizers.SGD(0.05),
    "sgd_momentum": lambda: tg.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "adam": lambda: tg.optimizers.Adam(0.05),
    "lazy_adam": lambda: tg.optimizers.Adam(0.05, lazy=True, amsgrad=True),
    "adagrad": lambda: tg.optimizers.Adagrad(0.05),
    "rmsprop": lambda: tg.optimizers.RMSprop(0.05, centered=True),
    "clipnorm_sgd": lambda: tg.optimizers.SGD(0.05, clipnorm=1e6),  # no effect: same result
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_step_from_indexed_slices_equals_the_dense_step(name, compiled):
    # the same ids each step: lazy Adam agrees with Adam (no row has stale moments)
    steps = [IDS] * 3
    dense = _train(OPTIMIZERS[name], False, compiled, steps)
    sparse = _train(OPTIMIZERS[name], True, compiled, steps)
    np.testing.assert_allclose(sparse, dense, rtol=2e-6, atol=1e-7)
    assert not np.allclose(dense, W0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_sgd_updates_only_the_rows_and_lazy_adam_differs_from_adam_by_design(compiled):
    steps = [np.array([0, 2, 2]), np.array([5])]
    w = _train(OPTIMIZERS["sgd"], True, compiled, steps)
    expected = W0.copy()
    for ids in steps:
        expected -= 0.05 * _dense_expected(expected, ids)
    np.testing.assert_allclose(w, expected, rtol=1e-6)
    untouched = [1, 3, 4, 6, 7, 8, 9]
    np.testing.assert_array_equal(w[untouched], W0[untouched])
    lazy = _train(OPTIMIZERS["lazy_adam"], True, compiled, steps)
    adam = _train(lambda: tg.optimizers.Adam(0.05, amsgrad=True), True, compiled, steps)
    np.testing.assert_array_equal(lazy[untouched], W0[untouched])
    np.testing.assert_allclose(lazy[5], adam[5], rtol=1e-6)  # row 5: first touched at step 2
    assert not np.allclose(lazy[[0, 2]], adam[[0, 2]])  # dense Adam moves them at step 2 too


def test_lazy_adam_first_step_sums_repeated_ids_as_adam_does():
    # Adam's step at t=1 is lr * g / (|g| + eps) per element: repeats must be summed first
    v = tg.Variable(W0)
    opt = tg.optimizers.Adam(0.1, lazy=True)
    g = tg.IndexedSlices(tg.constant(np.ones((3, 4), np.float32)), tg.constant([2, 2, 4]),
                         (10, 4))
    opt.apply_gradients([(g, v)])
    eps_step = 0.1 * 2.0 / (2.0 + 1e-7)
    np.testing.assert_allclose(v.numpy()[2], W0[2] - eps_step, atol=2e-6)
    np.testing.assert_allclose(v.numpy()[4], W0[4] - 0.1 / (1 + 1e-7), atol=2e-6)
    assert opt.get_config()["lazy"] is True
    assert tg.optimizers.AdamW.from_config(tg.optimizers.AdamW(lazy=True).get_config()).lazy


def test_clipping_uses_the_values_as_tensorflow():
    g = tg.IndexedSlices(tg.constant([[3.0, 4.0], [0.0, 12.0]]), tg.constant([1, 1]), (3, 2))
    clipped = tg.clip_by_norm(g, 6.5)  # the norm of the values: 13
    assert isinstance(clipped, tg.IndexedSlices)
    np.testing.assert_allclose(clipped.values.numpy(), [[1.5, 2.0], [0.0, 6.0]])
    other = tg.constant([0.0, 0.0])
    assert float(tg.global_norm([g, other])) == 13.0
    (c, o), norm = tg.clip_by_global_norm([g, other], 1.3)
    assert isinstance(c, tg.IndexedSlices) and float(norm) == 13.0
    np.testing.assert_allclose(c.values.numpy(), [[0.3, 0.4], [0.0, 1.2]], rtol=1e-6)


def test_conversions_and_arithmetic_are_dense():
    g = tg.IndexedSlices(tg.constant([[1.0, 2.0]]), tg.constant([2]), [3, 2])
    expected = np.array([[0, 0], [0, 0], [1, 2]], np.float32)
    np.testing.assert_array_equal((g + tg.ones((3, 2))).numpy(), expected + 1)
    np.testing.assert_array_equal((tg.ones((3, 2)) + g).numpy(), expected + 1)
    np.testing.assert_array_equal((2.0 * g).numpy(), 2 * expected)
    np.testing.assert_array_equal(np.asarray(-g), -expected)
    assert isinstance(-g, tg.IndexedSlices)
    leaves, tree = tg.tree_util.tree_flatten(g)
    assert len(leaves) == 2 and tg.tree_util.tree_unflatten(tree, leaves).dense_shape == (3, 2)


def test_bad_input_errors():
    with pytest.raises(ValueError, match=r"values.shape\[1:\] == dense_shape\[1:\]"):
        tg.IndexedSlices(tg.ones((2, 3)), tg.constant([0, 1]), (5, 4))
    with pytest.raises(ValueError, match=r"one row per index"):
        tg.IndexedSlices(tg.ones((2, 3)), tg.constant([0, 1, 2]), (5, 3))
    with pytest.raises(TypeError, match="indices must be integers, got dtype float"):
        tg.IndexedSlices(tg.ones((2, 3)), tg.constant([0.0, 1.0]), (5, 3))
    with pytest.raises(ValueError, match="without a dense_shape"):
        tg.convert_to_tensor(tg.IndexedSlices(tg.ones((1, 3)), tg.constant([0])))
    v = tg.Variable(np.zeros((5, 3), np.float32), name="table")
    wrong = tg.IndexedSlices(tg.ones((1, 3)), tg.constant([0]), (6, 3))
    with pytest.raises(ValueError, match=r"IndexedSlices gradient for Variable 'table' has "
                                         r"dense_shape \(6, 3\) but the variable has shape "
                                         r"\(5, 3\)"):
        tg.optimizers.SGD().apply_gradients([(wrong, v)])
    np.testing.assert_array_equal(v.numpy(), 0.0)  # nothing updated


def test_minimize_takes_the_sparse_gradient_as_the_users_tape_does():
    # optimizer.minimize computes the gradient for the user: rows stay IndexedSlices
    seen = []

    class Spy(tg.optimizers.SGD):
        def apply_gradients(self, grads_and_vars):
            pairs = list(grads_and_vars)
            seen.extend(type(g).__name__ for g, _ in pairs)
            return super().apply_gradients(pairs)

    v = tg.Variable(W0)
    Spy(0.05).minimize(lambda: _loss(v), [v])
    assert seen == ["IndexedSlices"]
    np.testing.assert_allclose(v.numpy(), W0 - 0.05 * _dense_expected(W0), rtol=1e-6)
