"""Tensor, Variable, constant, convert_to_tensor and the TensorFlow compatibility aliases."""
import numpy as np
import pytest

import tapegrad as tg


def test_array_facts_and_conversions():
    t = tg.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert (t.shape, t.dtype, t.ndim, t.size, len(t)) == ((2, 3), np.float64, 2, 6, 2)
    np.testing.assert_array_equal(np.asarray(t), t.numpy())
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    assert t.__array_namespace__() is tg
    assert float(tg.constant(2.5)) == 2.5 and int(tg.constant(3)) == 3
    assert bool(tg.constant(1.0)) and not bool(tg.constant(0.0))
    assert [float(r[0]) for r in t] == [1.0, 4.0]


def test_repr_is_readable():
    assert repr(tg.constant([1.0, 2.0])) == \
        "<tg.Tensor: shape=(2,), dtype=float64, numpy=[1., 2.]>"
    v = tg.Variable([1.0], name="w")
    assert repr(v).startswith("<tg.Variable 'w' shape=(1,) dtype=float64")
    assert f"{tg.constant(0.5):.2f}" == "0.50"


def test_len_and_iter_of_0d_raise():
    with pytest.raises(TypeError, match="0-d"):
        len(tg.constant(1.0))
    with pytest.raises(TypeError, match="0-d"):
        iter(tg.constant(1.0))


def test_python_defaults_and_dtype():
    assert tg.constant(1.0).dtype == np.float64
    assert tg.constant(1).dtype == np.int64
    assert tg.constant([1.0], dtype=tg.float32).dtype == np.float32


def test_operators_match_numpy():
    a, b = np.array([1.5, -2.0, 3.0]), np.array([2.0, 0.5, -1.0])
    x, y = tg.constant(a), tg.constant(b)
    for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b), (x / y, a / b),
                      (x // y, a // b), (x % y, a % b), (abs(x) ** y, abs(a) ** b), (-x, -a),
                      (2.0 - x, 2.0 - a), (2.0 / x, 2.0 / a), (abs(x), abs(a)), (+x, a)]:
        np.testing.assert_allclose(got.numpy(), want)
    np.testing.assert_array_equal((x < y).numpy(), a < b)
    np.testing.assert_array_equal((x == y).numpy(), a == b)
    assert (x >= y).dtype == np.bool_


def test_ndarray_on_the_left_gives_a_tensor():
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        y = np.array([3.0, 4.0]) * x
    assert isinstance(y, tg.Tensor)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 4.0])


def test_comparisons_are_not_differentiable():
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        m = x > 1.5
        y = tg.astype(m, tg.float64) * 3.0
    assert tape.gradient(y, x) is None


def test_getitem_transpose_astype():
    a = np.arange(12.0).reshape(3, 4)
    x = tg.Variable(a)
    with tg.GradientTape() as tape:
        y = tg.sum(x[1:, ::2] * 2.0) + tg.sum(x[np.array([0, 0])]) + tg.sum(x.T[0])
    g = tape.gradient(y, x).numpy()
    expected = np.zeros((3, 4))
    expected[1:, ::2] += 2.0
    expected[0] += 2.0
    expected[:, 0] += 1.0
    np.testing.assert_allclose(g, expected)
    np.testing.assert_array_equal(x.mT.numpy(), a.T)
    assert x.astype(tg.float32).dtype == np.float32


def test_variable_assign_family():
    v = tg.Variable([1.0, 2.0], name="v")
    assert v.assign([5.0, 6.0]) is v
    np.testing.assert_allclose(v.numpy(), [5.0, 6.0])
    v.assign_add([1.0, 1.0])
    v.assign_sub(tg.constant([0.5, 0.5]))
    np.testing.assert_allclose(v.numpy(), [5.5, 6.5])
    with pytest.raises(ValueError, match="shape \\(3,\\) to Variable 'v' of shape \\(2,\\)"):
        v.assign([1.0, 2.0, 3.0])
    snap = v.read_value()
    v.assign([0.0, 0.0])
    np.testing.assert_allclose(snap.numpy(), [5.5, 6.5])


def test_variable_copies_its_initial_value():
    a = np.array([1.0, 2.0])
    v = tg.Variable(a)
    a[0] = 100.0
    assert float(v.numpy()[0]) == 1.0


def test_variable_works_as_a_tensor():
    v = tg.Variable([[1.0, 2.0]])
    assert isinstance(v, tg.Tensor)
    np.testing.assert_allclose(tg.exp(v).numpy(), np.exp([[1.0, 2.0]]))
    with tg.GradientTape() as tape:
        y = tg.sum(v.read_value() * 2.0)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), [[2.0, 2.0]])


def test_convert_to_tensor():
    t = tg.constant([1.0])
    assert tg.convert_to_tensor(t) is t
    assert tg.convert_to_tensor([1, 2]).dtype == np.int64
    with pytest.raises(TypeError, match="use tg.astype"):
        tg.convert_to_tensor(t, dtype=tg.float32)


def test_bad_value_type_is_a_clear_error():
    with pytest.raises(TypeError, match="not an array of an Array API library"):
        tg.exp(object())


def test_compat_tensorflow_aliases_and_float32_default():
    import tapegrad.compat.tensorflow as tf

    assert tf.constant(1.0).dtype == np.float32
    assert tf.constant(1).dtype == np.int32  # TensorFlow's int32 for Python ints
    v = tf.Variable([1.0, 2.0])
    assert v.dtype == np.float32 and isinstance(v, tg.Variable)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(v)) + tf.reduce_max(v) + tf.math.reduce_mean(v)
    np.testing.assert_allclose(tape.gradient(loss, v).numpy(), [2.5, 5.5])
    assert tf.optimizers is tg.optimizers and tf.test is tg.test and tf.nn is tg.nn


def test_compat_tensorflow_takes_tensorflows_positional_arguments_and_keywords():
    import tapegrad.compat.tensorflow as tf

    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 6.0, 5.0]])
    xn = x.numpy()
    for got, want in [
            (tf.reduce_sum(x, 1), xn.sum(1)), (tf.reduce_mean(x, 0, name="m"), xn.mean(0)),
            (tf.reduce_max(x, 1, True), xn.max(1, keepdims=True)),
            (tf.reduce_sum(x, [0, 1]), xn.sum()), (tf.math.reduce_std(x, 0), xn.std(0)),
            (tf.reduce_logsumexp(x, 1), np.log(np.exp(xn).sum(1))),
            (tf.concat([x, x], 0), np.concatenate([xn, xn])),
            (tf.stack([x, x], 1), np.stack([xn, xn], 1)),
            (tf.transpose(x, perm=[1, 0]), xn.T),
            (tf.matmul(x, x, transpose_b=True), xn @ xn.T),
            (tf.matmul(x, x, transpose_a=True), xn.T @ xn),
            (tf.math.argmax(x), [1, 1, 1]), (tf.argmin(x, 1), [0, 0]),
            (tf.math.cumsum(x, 1), xn.cumsum(1)),
            (tf.cumsum(x, 1, exclusive=True), [[0, 1, 3], [0, 4, 10]]),
            (tf.math.cumsum(x, 1, reverse=True), [[6, 5, 3], [15, 11, 5]])]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert tf.math.argmax(x, 1).dtype == np.int64
    assert tf.math.argmax(x, 1, output_type=tf.int32).dtype == np.int32
    z = tf.constant([[1 + 2j, 3j], [1.0, 1j]])
    np.testing.assert_allclose(tf.matmul(z, z, adjoint_a=True).numpy(),
                               z.numpy().conj().T @ z.numpy())
    np.testing.assert_allclose(tf.transpose(z, conjugate=True).numpy(), z.numpy().conj().T)
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    with tf.GradientTape() as tape:  # d/dV sum(V V^T) = 2 * column sums broadcast over rows
        loss = tf.reduce_sum(tf.matmul(v, v, transpose_b=True))
    np.testing.assert_allclose(tape.gradient(loss, v).numpy(), [[8.0, 12.0], [8.0, 12.0]])


@pytest.mark.parametrize("batch_dims,axis,index_shape", [
    (1, None, (2, 6)), (1, 2, (2, 2, 3)), (1, -1, (2, 4)), (2, None, (2, 3, 2)),
    (-1, None, (2, 3))])
def test_compat_tensorflow_gather_with_batch_dims(batch_dims, axis, index_shape):
    import itertools

    import tapegrad.compat.tensorflow as tf

    rng = np.random.default_rng(5)
    p = rng.normal(size=(2, 3, 4, 5))
    b = batch_dims % len(index_shape) if batch_dims < 0 else batch_dims
    ax = b if axis is None else axis % p.ndim
    idx = rng.integers(0, p.shape[ax], size=index_shape)
    want = np.empty(p.shape[:ax] + idx.shape[b:] + p.shape[ax + 1:])
    for bi in itertools.product(*[range(n) for n in p.shape[:b]]):  # TF's definition
        want[bi] = np.take(p[bi], idx[bi], axis=ax - b)
    v = tf.Variable(p, dtype=tf.float64)
    with tf.GradientTape() as tape:
        got = tf.gather(v, idx, axis=axis, batch_dims=batch_dims)
        loss = tf.reduce_sum(got * got)
    np.testing.assert_allclose(got.numpy(), want)
    grad = np.zeros_like(p)  # d/dp sum(gathered^2): 2 * value, added at each picked slice
    for bi in itertools.product(*[range(n) for n in p.shape[:b]]):
        moved = np.moveaxis(grad[bi], ax - b, 0)
        np.add.at(moved, idx[bi], 2 * np.moveaxis(np.take(p[bi], idx[bi], axis=ax - b),
                                                  list(range(ax - b, ax - b + idx[bi].ndim)),
                                                  list(range(idx[bi].ndim))))
    np.testing.assert_allclose(tape.gradient(loss, v).numpy(), grad)


def test_compat_tensorflow_gather_rejects_mismatched_batch_axes():
    import tapegrad.compat.tensorflow as tf

    with pytest.raises(ValueError, match=r"must share their first 1 axes and axis \(here 0\)"):
        tf.gather(tf.zeros([2, 3]), [[0], [1]], axis=0, batch_dims=1)
    with pytest.raises(ValueError, match="params \\(2, 3\\) and indices \\(3, 1\\)"):
        tf.gather(tf.zeros([2, 3]), [[0], [1], [0]], batch_dims=1)


def test_compat_tensorflow_float32_defaults_and_model_aliases():
    import tapegrad.compat.tensorflow as tf

    f32 = np.float32
    assert [t.dtype for t in (tf.zeros([2]), tf.ones([2]), tf.eye(2), tf.fill([2], 1.5),
                              tf.range(0.0, 1.0, 0.5), tf.random.normal([2]),
                              tf.random.uniform([2]), tf.one_hot([1], 2))] == [f32] * 8
    assert tf.fill([2], 1).dtype == np.int32 and tf.zeros([2], dtype=tf.float64).dtype == np.float64
    # a NumPy scalar keeps its dtype, as an array does (TensorFlow's rule)
    assert tf.fill([2], np.float64(1.5)).dtype == np.float64
    assert tf.constant(np.float64(1.5)).dtype == np.float64
    assert tf.constant([[1.0], [2.0]]).dtype == f32 and tf.range(0, 2.0).dtype == f32
    assert tf.random.uniform([3], 0, 5, dtype=tf.int32).dtype == np.int32
    np.testing.assert_array_equal(tf.range(0.0, 1.0, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    np.testing.assert_array_equal(tf.transpose(x).numpy(), x.numpy().T)
    np.testing.assert_array_equal(tf.gather(x, [1, 0, 1]).numpy(), x.numpy()[[1, 0, 1]])
    np.testing.assert_array_equal(tf.shape(x).numpy(), [2, 3])
    assert tf.shape(x).dtype == np.int32
    np.testing.assert_allclose(tf.einsum("ij->j", x).numpy(), [5.0, 7.0, 9.0])
    np.testing.assert_allclose(tf.sin(x).numpy(), np.sin(x.numpy()))
    np.testing.assert_allclose(tf.pow(x, 2.0).numpy(), x.numpy() ** 2)
    assert tf.identity(x) is not x and np.array_equal(tf.identity(x).numpy(), x.numpy())
    clipped, norm = tf.clip_by_global_norm([x], 1.0)
    np.testing.assert_allclose(float(norm), float(tf.linalg.global_norm([x])), rtol=1e-6)
    assert tf.clip_by_value is tg.clip_by_value and tf.clip_by_norm is tg.clip_by_norm
    assert tf.Module is tg.Module and tf.nn.dropout is tg.nn.dropout
    assert tf.nn.softmax_cross_entropy_with_logits is tg.nn.softmax_cross_entropy_with_logits
    with tf.name_scope("block") as scope:
        v = tf.Variable(1.0, name="w")
    assert scope == "block/" and v.name == "block/w" and v.dtype == np.float32
    assert tf.nn.conv2d is tg.nn.conv2d and tf.nn.conv2d_transpose is tg.nn.conv2d_transpose
    assert tf.keras.optimizers.AdamW is tg.optimizers.AdamW is tf.optimizers.AdamW
    assert tf.keras.optimizers.schedules.CosineDecay is tg.optimizers.schedules.CosineDecay
    assert tf.train.Checkpoint is tg.train.Checkpoint
    images = tf.random.normal([1, 4, 4, 2])
    filters = tf.random.normal([3, 3, 2, 3])
    y = tf.nn.conv2d(images, filters, strides=1, padding="SAME")
    assert y.shape == (1, 4, 4, 3) and y.dtype == np.float32


@pytest.mark.skipif(tg._backend.default_namespace() is not np,
                    reason="in-place updates are a NumPy optimisation")
def test_assign_sub_in_place_only_when_nothing_else_holds_the_array():
    v = tg.Variable(np.ones(3))
    before = id(v._value)
    v.assign_sub(np.full(3, 0.5))
    assert id(v._value) == before  # nothing else held it: updated in place
    held = v.numpy()  # a user's reference to the array
    v.assign_sub(0.5)
    np.testing.assert_allclose(held, [0.5, 0.5, 0.5])  # the user's array did not change
    np.testing.assert_allclose(v.numpy(), [0.0, 0.0, 0.0])
    del held
    with tg.GradientTape() as tape:
        y = tg.sum(v * v + v)
    v.assign_add(np.full(3, 10.0))  # the tape recorded the old value: it must still see it
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(v.numpy(), [10.0, 10.0, 10.0])


def test_compat_tensorflow_constant_of_a_tensor_keeps_it_on_the_tape():
    import tapegrad.compat.tensorflow as tf

    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.reduce_sum(tf.constant(x) ** 2)  # TensorFlow returns the tensor itself
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [2.0, 4.0])
    assert tf.constant(x, dtype=tf.float32) is x
    np.testing.assert_array_equal(tf.constant(x, shape=(2, 1)).numpy(), [[1.0], [2.0]])
    with pytest.raises(TypeError, match=r"tf.constant: value is a Tensor of dtype float32 but "
                                        r"dtype float64 was asked.*tf.cast\(value, dtype\)"):
        tf.constant(x, dtype=tf.float64)
    v = tf.Variable([1.0, 2.0])  # a Variable: a constant copy of its value, as before
    c = tf.constant(v)
    assert c is not v and not isinstance(c, tf.Variable)


def test_compat_keras_names_what_it_has_instead_of_layers():
    import tapegrad.compat.tensorflow as tf

    assert isinstance(tf.keras.optimizers.AdamW(0.1), tg.optimizers.Optimizer)
    with pytest.raises(AttributeError, match="has no tf.keras.layers: only tf.keras.optimizers "
                                             "is here.*write a layer as a tg.Module"):
        tf.keras.layers.Dense(3)


def test_compat_tensorflow_names_of_issue_18():
    import tapegrad.compat.tensorflow as tf

    np.testing.assert_array_equal(tf.constant(1.5, shape=[2, 2]).numpy(), np.full((2, 2), 1.5))
    assert tf.constant([1.0, 2.0], shape=(2, 1)).shape == (2, 1)
    with pytest.raises(TypeError, match=r"value has 2 element\(s\) but shape \[3\] needs 3"):
        tf.constant([1.0, 2.0], shape=[3])
    v = tf.Variable(2.0)
    assert float(v.value()) == 2.0 and v.value() is not v
    np.testing.assert_array_equal(tf.get_static_value(tf.constant([1, 2])), [1, 2])
    x = tf.constant([-1.0, 0.5])
    np.testing.assert_allclose(tf.nn.swish(x).numpy(), x.numpy() / (1 + np.exp(-x.numpy())),
                               rtol=1e-6)
    assert tf.complex64 == np.complex64 and tf.complex128 == np.complex128
    assert tf.autodiff.ForwardAccumulator is tg.ForwardAccumulator
    assert tf.autodiff.GradientTape is tg.GradientTape
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.grad_pass_through(tf.round)(x) * 2.0)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 2.0])
    # a Variable converted twice is two reads, each with its own gradient (TF's
    # gradients_function of f(v, v) = v * v gives [v, v] = [1, 1] at v = 1)
    w = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        a, b = tf.convert_to_tensor(w), tf.convert_to_tensor(w)
        tape.watch([a, b])
        y = a * b
    assert [float(g) for g in tape.gradient(y, [a, b])] == [1.0, 1.0]
    assert float(tf.reduce_sum(tf.ones((2, 3)), axis=tf.constant(1))[0]) == 3.0


def test_get_static_value_is_none_while_tracing():
    pytest.importorskip("jax")
    import tapegrad.compat.tensorflow as tf

    seen = []
    tf.function(lambda x: seen.append(tf.get_static_value(x)) or x * 2.0)(tf.constant(1.0))
    assert seen[0] is None
