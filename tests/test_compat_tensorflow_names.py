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


def test_creation_and_shape_names():
    assert tf.__version__.startswith("2.")
    np.testing.assert_allclose(tf.linspace(0.0, 1.0, 5).numpy(), np.linspace(0, 1, 5))
    assert tf.linspace(0.0, 1.0, 5).dtype == np.float32
    a = tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.linspace(a, 3.0, 3))  # a + (a+3)/2 + 3
    np.testing.assert_allclose(tape.gradient(y, a).numpy(), 1.5)
    x = tf.zeros([2, 3, 4])
    assert tf.size(x).numpy() == 24 and tf.size(x).dtype == np.int32
    assert tf.rank(x).numpy() == 3
    m = np.arange(12.0).reshape(3, 4)
    assert [p.shape for p in tf.split(m, 2, axis=1)] == [(3, 2), (3, 2)]
    pieces = tf.split(m, [1, -1], 0)
    np.testing.assert_array_equal(pieces[1].numpy(), m[1:])
    with pytest.raises(ValueError, match="equal pieces"):
        tf.split(m, 3, axis=1)
    rows = tf.unstack(m)
    assert isinstance(rows, list) and len(rows) == 3
    np.testing.assert_array_equal(rows[2].numpy(), m[2])
    np.testing.assert_array_equal(tf.pad(m, [[1, 0], [0, 2]], constant_values=7).numpy(),
                                  np.pad(m, [[1, 0], [0, 2]], constant_values=7))
    np.testing.assert_array_equal(tf.reverse(m, [1]).numpy(), m[:, ::-1])
    np.testing.assert_array_equal(tf.roll(m, 1, axis=0).numpy(), np.roll(m, 1, axis=0))
    np.testing.assert_array_equal(tf.sort([3, 1, 2], direction="DESCENDING").numpy(), [3, 2, 1])
    np.testing.assert_array_equal(tf.argsort([3, 1, 2]).numpy(), [1, 2, 0])
    np.testing.assert_allclose(tf.tensordot(m, m, [[1], [1]]).numpy(), m @ m.T)
    np.testing.assert_allclose(tf.norm(m).numpy(), np.linalg.norm(m))
    np.testing.assert_allclose(tf.norm(m, ord=1, axis=1).numpy(), np.abs(m).sum(1))
    np.testing.assert_allclose(tf.add_n([m, m, m]).numpy(), 3 * m)


def test_indexing_names():
    m = np.arange(12.0).reshape(3, 4)
    mask = np.array([True, False, True])
    np.testing.assert_array_equal(tf.boolean_mask(m, mask).numpy(), m[mask])
    np.testing.assert_array_equal(tf.boolean_mask(m, m > 5).numpy(), m[m > 5])
    np.testing.assert_array_equal(tf.boolean_mask(m, [True, False, False, True], axis=1).numpy(),
                                  m[:, [0, 3]])
    np.testing.assert_array_equal(tf.gather_nd(m, [[0, 1], [2, 3]]).numpy(), [1.0, 11.0])
    np.testing.assert_array_equal(tf.gather_nd(m, [[1]]).numpy(), m[[1]])
    upd = tf.tensor_scatter_nd_update(m, [[0, 0], [2, 1]], [-1.0, -2.0])
    expected = m.copy()
    expected[0, 0], expected[2, 1] = -1, -2
    np.testing.assert_array_equal(upd.numpy(), expected)
    v, u = tf.Variable(m), tf.Variable([5.0, 6.0, 7.0, 8.0], dtype=tf.float64)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.tensor_scatter_nd_update(v, [[1]], u[None]) * m)
    gv, gu = tape.gradient(y, [v, u])
    np.testing.assert_array_equal(gv.numpy(), m * np.array([[1], [0], [1]]))
    np.testing.assert_array_equal(gu.numpy(), m[1])
    np.testing.assert_array_equal(tf.sequence_mask([1, 3, 2]).numpy(),
                                  np.arange(3) < np.array([1, 3, 2])[:, None])
    assert tf.sequence_mask([1], 4, dtype=tf.float32).numpy().tolist() == [[1, 0, 0, 0]]


def test_math_linalg_and_random_names():
    x = np.array([[1.0, 5.0, 3.0, 5.0], [0.0, -1.0, 2.0, 1.0]])
    values, indices = tf.math.top_k(x, k=2)
    np.testing.assert_array_equal(values.numpy(), [[5, 5], [2, 1]])
    np.testing.assert_array_equal(indices.numpy(), [[1, 3], [2, 3]])
    assert indices.dtype == np.int32
    data = np.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(tf.math.segment_sum(data, [0, 0, 1, 2]).numpy(),
                                  [[2, 4], [4, 5], [6, 7]])
    np.testing.assert_array_equal(tf.math.unsorted_segment_sum(data, [2, 0, 2, 0], 3).numpy(),
                                  [[8, 10], [0, 0], [4, 6]])
    y = tf.Variable([0.0, 2.0])
    with tf.GradientTape() as tape:
        q = tf.math.divide_no_nan(tf.constant([1.0, 1.0]), y)
    np.testing.assert_array_equal(q.numpy(), [0.0, 0.5])
    np.testing.assert_array_equal(tape.gradient(q, y).numpy(), [0.0, -0.25])
    a = np.arange(1.0, 17.0).reshape(4, 4)
    np.testing.assert_array_equal(tf.linalg.band_part(a, 1, 0).numpy(),
                                  np.tril(a) - np.tril(a, -2))
    np.testing.assert_array_equal(tf.linalg.band_part(a, -1, 0).numpy(), np.tril(a))
    np.testing.assert_array_equal(tf.linalg.diag([[1.0, 2.0]]).numpy(), [np.diag([1.0, 2.0])])
    tf.random.set_seed(3)
    s = tf.random.shuffle(np.arange(10))
    assert sorted(s.numpy().tolist()) == list(range(10))
    c = tf.random.categorical([[np.log(0.5), np.log(0.5), -np.inf], [-np.inf, -np.inf, 0.0]], 2000)
    assert c.shape == (2, 2000) and c.dtype == np.int64
    assert set(c.numpy()[1].tolist()) == {2} and 0.45 < (c.numpy()[0] == 0).mean() < 0.55
    t = tf.random.truncated_normal([5000], mean=1.0, stddev=2.0).numpy()
    assert t.dtype == np.float32 and t.min() >= -3.0 and t.max() <= 5.0
    assert abs(t.mean() - 1.0) < 0.1 and 1.6 < t.std() < 1.9  # 2-sigma truncation: 0.88 sd


def test_errors_device_and_missing_names():
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.where([True], 1.0)
    with tf.device("/CPU:0"):
        assert tf.constant(1).numpy() == 1
    with pytest.raises(AttributeError, match=r"tf\.signal\.mfccs_from_log_mel_spectrograms is "
                                             r"not provided by tapegrad"):
        tf.signal.mfccs_from_log_mel_spectrograms
    with pytest.raises(AttributeError, match=r"tf\.debugging\.abs .*tg\.abs"):
        tf.debugging.abs
    with pytest.raises(AttributeError, match=r"tf\.math\.logaddexp .*tg\.logaddexp"):
        tf.math.logaddexp
    with pytest.raises(AttributeError, match=r"tf\.linalg\.expm is not provided"):
        tf.linalg.expm


def test_print_eagerly_and_inside_tf_function(capsys):
    import sys
    tf.print("x:", tf.constant([1, 2, 3, 4, 5, 6, 7]), output_stream=sys.stdout)
    assert capsys.readouterr().out == "x: [1 2 3 ... 5 6 7]\n"

    @tf.function
    def f(x):
        tf.print("in", x * 2, output_stream=sys.stdout)
        return x + 1

    f(tf.constant([1.0, 2.0]))
    f(tf.constant([3.0, 4.0]))
    out = capsys.readouterr().out
    assert out.splitlines() == ["in [2 4]", "in [6 8]"]  # TensorFlow 2.21 prints [2 4]
