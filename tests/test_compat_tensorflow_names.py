"""``tapegrad.compat.tensorflow``: TensorFlow's result orders, dtypes, signatures and names
(issue 33), checked against the math and NumPy (TensorFlow is not installed)."""
import numpy as np
import pytest

import tapegrad.compat.tensorflow as tf


def test_svd_returns_tensorflows_s_u_v_with_v_not_vh():
    m = np.array([[3.0, 1.0], [1.0, 2.0], [0.0, 1.0]])
    s, u, v = tf.linalg.svd(tf.constant(m, tf.float64))
    assert s.shape == (2,) and u.shape == (3, 2) and v.shape == (2, 2)  # full_matrices=False
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(m, compute_uv=False))
    np.testing.assert_allclose(u.numpy() @ np.diag(s.numpy()) @ v.numpy().T, m, atol=1e-12)
    s_full, u_full, v_full = tf.linalg.svd(tf.constant(m), full_matrices=True)
    assert u_full.shape == (3, 3) and v_full.shape == (2, 2)
    np.testing.assert_allclose(tf.linalg.svd(m, compute_uv=False).numpy(), s.numpy())
    x = tf.Variable(m)
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(tf.linalg.svd(x)[0])  # the nuclear norm: gradient U V^T
    np.testing.assert_allclose(tape.gradient(total, x).numpy(), u.numpy() @ v.numpy().T,
                               atol=1e-10)


def test_svd_of_complex_gives_v_conjugate_transposed():
    m = np.array([[1 + 2j, 0.5], [0.0, 1 - 1j]])
    s, u, v = tf.linalg.svd(tf.constant(m))
    np.testing.assert_allclose(u.numpy() @ np.diag(s.numpy()) @ v.numpy().conj().T, m,
                               atol=1e-12)


def test_python_ints_become_int32_as_in_tensorflow():
    assert tf.constant(3).dtype == np.int32 and tf.constant([[1, 2]]).dtype == np.int32
    assert tf.convert_to_tensor([1, 2]).dtype == np.int32
    assert tf.Variable(3).dtype == np.int32 and tf.fill([2], 3).dtype == np.int32
    assert tf.range(5).dtype == np.int32 and tf.range(0.0, 1.0, 0.5).dtype == np.float32
    np.testing.assert_array_equal(tf.range(1, 7, 2).numpy(), [1, 3, 5])
    assert (tf.constant(3) + 1).dtype == np.int32 and (tf.constant(7) // 2).numpy() == 3
    # values with a dtype keep it, and booleans stay boolean
    assert tf.constant(np.array([1, 2])).dtype == np.int64
    assert tf.constant(True).dtype == np.bool_ and tf.constant(2, tf.int64).dtype == np.int64
    assert tf.range(3, dtype=tf.float64).dtype == np.float64


def test_squeeze_without_axis_drops_every_size_one_axis():
    x = tf.reshape(tf.range(3.0), [1, 3, 1])
    assert tf.squeeze(x).shape == (3,) and tf.squeeze(x, [2]).shape == (1, 3)
    assert tf.squeeze(x, axis=0).shape == (3, 1) and tf.squeeze(tf.ones([2, 2])).shape == (2, 2)
    v = tf.Variable(np.ones((1, 2)))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.squeeze(v) * tf.constant([2.0, 3.0], tf.float64))
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), [[2.0, 3.0]])


def test_where_with_one_argument_gives_int64_indices():
    cond = np.array([[True, False, True], [False, True, False]])
    idx = tf.where(tf.constant(cond))
    assert idx.dtype == np.int64 and idx.shape == (3, 2)
    np.testing.assert_array_equal(idx.numpy(), np.argwhere(cond))
    np.testing.assert_array_equal(tf.where(tf.constant([0, 2, 0, 1])).numpy(), [[1], [3]])
    np.testing.assert_allclose(tf.where(cond, 1.0, tf.zeros([2, 3])).numpy(), cond * 1.0)
    with pytest.raises(ValueError, match="give both x and y"):
        tf.where(cond, 1.0)


@pytest.mark.parametrize("module", ["tf", "tf.linalg"])
def test_matmul_takes_transpose_and_adjoint(module):
    matmul = tf.matmul if module == "tf" else tf.linalg.matmul
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(6.0, 12.0).reshape(2, 3)
    np.testing.assert_allclose(matmul(a, b, transpose_b=True).numpy(), a @ b.T)
    np.testing.assert_allclose(matmul(a, b, transpose_a=True).numpy(), a.T @ b)
    c = a + 1j * b
    np.testing.assert_allclose(matmul(c, c, adjoint_a=True).numpy(), c.conj().T @ c)


def test_reshape_with_tf_shape_entries_inside_tf_function():
    @tf.function
    def flatten(x):
        return tf.reshape(x, [tf.shape(x)[0], -1]) + tf.zeros(tf.shape(x)[:1])[:, None]

    @tf.function
    def like(x):
        return tf.reshape(x, tf.shape(x)) * tf.ones([tf.shape(x)[0], 1, 1])

    x = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(flatten(tf.constant(x)).numpy(), x.reshape(2, 12))
    np.testing.assert_array_equal(like(tf.constant(x)).numpy(), x)
    s = tf.shape(tf.constant(x))
    assert s.dtype == np.int32
    np.testing.assert_array_equal(s.numpy(), [2, 3, 4])
    np.testing.assert_array_equal((s[1] * 2).numpy(), 6)
