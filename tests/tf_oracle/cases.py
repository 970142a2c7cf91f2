"""The oracle's cases: each ``case(tf)`` computes some TensorFlow names on fixed NumPy inputs
with the module ``tf`` it is given (real TensorFlow in ``record.py``, which writes their
outputs to ``values.npz``; ``tapegrad.compat.tensorflow`` in
``tests/test_compat_tensorflow_oracle.py``, which compares). A case returns a Tensor or a
list/tuple of them; values and dtypes are compared. Not collected by pytest (no test_ prefix).
"""
import numpy as np

CASES = {}
R = np.random.default_rng(0)
M = np.arange(12.0, dtype=np.float32).reshape(3, 4)
X = R.standard_normal((2, 6)).astype(np.float32)
C = (R.standard_normal((3, 8)) + 1j * R.standard_normal((3, 8))).astype(np.complex64)
SIG = np.sin(np.arange(40) * 0.3).astype(np.float32) + R.standard_normal(40).astype(np.float32)
IMG = R.uniform(0, 255, (2, 5, 7, 3)).astype(np.float32)
SV = np.array([[3.0, 1.0, 0.5], [1.0, 2.0, 0.0], [0.0, 1.0, 4.0], [1.0, 0.0, 1.0]], np.float32)


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# --- names added in the previous session ---------------------------------------------------
@case
def linspace(tf):
    return tf.linspace(0.0, 1.0, 5), tf.linspace(tf.constant(1.0), 3.0, 3)


@case
def size_rank(tf):
    x = tf.zeros([2, 3, 4])
    return tf.size(x), tf.rank(x), tf.shape(x)


@case
def split(tf):
    return (*tf.split(tf.constant(M), 2, axis=1), *tf.split(tf.constant(M), [1, -1], 0))


@case
def unstack(tf):
    return (*tf.unstack(tf.constant(M)), *tf.unstack(tf.constant(M), axis=1))


@case
def pad(tf):
    return tf.pad(tf.constant(M), [[1, 0], [0, 2]], constant_values=7)


@case
def sort_argsort(tf):
    v = tf.constant([3.0, 1.0, 2.0, -1.0])
    return (tf.sort(v), tf.sort(v, direction="DESCENDING"), tf.argsort(v),
            tf.argsort(v, direction="DESCENDING"), tf.sort(tf.constant(X), axis=0))


@case
def reverse_roll(tf):
    m = tf.constant(M)
    return (tf.reverse(m, [1]), tf.reverse(m, [0, 1]), tf.roll(m, 1, axis=0),
            tf.roll(m, [1, -2], [0, 1]))


@case
def tensordot(tf):
    m = tf.constant(M)
    return tf.tensordot(m, m, [[1], [1]]), tf.tensordot(m, tf.transpose(m), 1)


@case
def norm(tf):
    m = tf.constant(M)
    return (tf.norm(m), tf.norm(m, ord=1, axis=1), tf.norm(m, axis=1, keepdims=True),
            tf.norm(m, ord=np.inf, axis=0), tf.norm(m, axis=[0, 1]))


@case
def boolean_mask(tf):
    m = tf.constant(M)
    return (tf.boolean_mask(m, [True, False, True]), tf.boolean_mask(m, m > 5),
            tf.boolean_mask(m, [True, False, False, True], axis=1))


@case
def gather_nd(tf):
    m = tf.constant(M)
    return tf.gather_nd(m, [[0, 1], [2, 3]]), tf.gather_nd(m, [[1]])


@case
def add_n(tf):
    m = tf.constant(M)
    return tf.add_n([m, m, 2 * m])


@case
def tensor_scatter_nd_update(tf):
    m = tf.constant(M)
    return (tf.tensor_scatter_nd_update(m, [[0, 0], [2, 1]], [-1.0, -2.0]),
            tf.tensor_scatter_nd_update(m, [[1]], [[5.0, 6.0, 7.0, 8.0]]))


@case
def sequence_mask(tf):
    return (tf.sequence_mask([1, 3, 2]), tf.sequence_mask([1], 4, dtype=tf.float32),
            tf.sequence_mask(tf.constant([[0, 2], [1, 1]]), 3))


@case
def top_k(tf):
    x = tf.constant([[1.0, 5.0, 3.0, 5.0], [0.0, -1.0, 2.0, 1.0]])
    values, indices = tf.math.top_k(x, k=2)
    return values, indices, tf.math.top_k(x).values


@case
def segment_sums(tf):
    data = tf.constant(np.arange(8.0, dtype=np.float32).reshape(4, 2))
    return (tf.math.segment_sum(data, [0, 0, 1, 2]),
            tf.math.unsorted_segment_sum(data, [2, 0, 2, 0], 3))


@case
def divide_no_nan(tf):
    return tf.math.divide_no_nan(tf.constant([1.0, 1.0, 0.0]), tf.constant([0.0, 2.0, 0.0]))


@case
def band_part_diag(tf):
    a = tf.constant(np.arange(1.0, 17.0, dtype=np.float32).reshape(4, 4))
    return (tf.linalg.band_part(a, 1, 0), tf.linalg.band_part(a, -1, 0),
            tf.linalg.band_part(a, 0, 2), tf.linalg.diag(tf.constant([[1.0, 2.0], [3.0, 4.0]])))


@case
def svd(tf):
    s, u, v = tf.linalg.svd(tf.constant(SV))  # columns of u, v up to sign: compared as |.|
    s_full, u_full, v_full = tf.linalg.svd(tf.constant(SV), full_matrices=True)
    return (s, tf.abs(u), tf.abs(v), tf.linalg.svd(tf.constant(SV), compute_uv=False),
            tf.shape(u_full), tf.shape(v_full))


@case
def squeeze_where(tf):
    x = tf.reshape(tf.range(3.0), [1, 3, 1])
    cond = tf.constant([[True, False, True], [False, True, False]])
    return (tf.squeeze(x), tf.squeeze(x, [2]), tf.where(cond), tf.where(tf.constant([0, 2, 0, 1])),
            tf.where(cond, 1.0, tf.zeros([2, 3])))


@case
def matmul(tf):
    a, b = tf.constant(M[:2, :3]), tf.constant(M[1:, 1:])
    return (tf.matmul(a, a, transpose_b=True), tf.matmul(a, a, transpose_a=True),
            tf.linalg.matmul(b, a, adjoint_b=True))


@case
def defaults_and_dtypes(tf):
    return (tf.constant(3), tf.constant([1.5, 2.0]), tf.range(5), tf.range(0.0, 1.0, 0.25),
            tf.fill([2], 3), tf.zeros([2]), tf.ones([1, 2]), tf.eye(2),
            tf.one_hot([0, 2], 3), tf.argmax(tf.constant(M)), tf.argmin(tf.constant(M), 1),
            tf.cast(tf.constant([1.7, -1.7]), tf.int32))


@case
def reductions_and_cumsum(tf):
    m = tf.constant(M)
    return (tf.reduce_sum(m, 1), tf.reduce_mean(m, [0, 1], keepdims=True), tf.reduce_max(m),
            tf.math.reduce_std(m, 0), tf.reduce_logsumexp(m, 1), tf.math.cumsum(m, 1),
            tf.math.cumsum(m, 1, exclusive=True), tf.math.cumsum(m, 0, reverse=True),
            tf.math.cumsum(m, 1, exclusive=True, reverse=True))


@case
def gather(tf):
    p = tf.constant(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4))
    return (tf.gather(p, [2, 0], axis=1), tf.gather(p, [[1, 0], [2, 2]], axis=1, batch_dims=1),
            tf.gather(p, [[3], [0]], axis=2, batch_dims=1))


@case
def concat_stack_transpose(tf):
    m = tf.constant(M)
    return (tf.concat([m, m], 0), tf.stack([m, m], axis=1), tf.transpose(m),
            tf.transpose(tf.reshape(m, [1, 3, 4]), perm=[2, 0, 1]), tf.expand_dims(m, 1))


# --- tf.signal -----------------------------------------------------------------------------
@case
def signal_fft(tf):
    c = tf.constant(C)
    return (tf.signal.fft(c), tf.signal.ifft(c), tf.signal.fft2d(c), tf.signal.ifft2d(c),
            tf.signal.fft(tf.constant(C.astype(np.complex128))))


@case
def signal_rfft(tf):
    x = tf.constant(X)
    spec = tf.signal.rfft(x)
    return (spec, tf.signal.rfft(x, [8]), tf.signal.rfft(x, [4]), tf.signal.irfft(spec),
            tf.signal.irfft(spec, [6]), tf.signal.irfft(tf.signal.rfft(x, [7]), [7]),
            tf.signal.rfft(tf.constant(X.astype(np.float64))))


@case
def signal_shift(tf):
    x = tf.constant(M)
    return (tf.signal.fftshift(x), tf.signal.fftshift(x, axes=1), tf.signal.ifftshift(x),
            tf.signal.ifftshift(tf.range(5)), tf.signal.fftshift(tf.range(5), axes=0))


@case
def signal_windows(tf):
    return (tf.signal.hann_window(8), tf.signal.hann_window(8, periodic=False),
            tf.signal.hamming_window(5), tf.signal.hann_window(1),
            tf.signal.hann_window(4, dtype=tf.float64))


@case
def signal_frame(tf):
    s, m = tf.constant(SIG[:10]), tf.constant(M)
    return (tf.signal.frame(s, 4, 2), tf.signal.frame(s, 4, 3, pad_end=True),
            tf.signal.frame(s, 4, 3, pad_end=True, pad_value=-1.0),
            tf.signal.frame(m, 2, 1, axis=0), tf.signal.frame(m, 3, 2), tf.signal.frame(s, 12, 2))


@case
def signal_stft(tf):
    s = tf.constant(SIG)
    return (tf.signal.stft(s, 8, 4), tf.signal.stft(s, 10, 5, fft_length=16),
            tf.signal.stft(s, 8, 6, pad_end=True), tf.signal.stft(tf.stack([s, 2 * s]), 8, 4))


# --- tf.image.resize -----------------------------------------------------------------------
@case
def image_resize_bilinear(tf):
    img = tf.constant(IMG)
    return (tf.image.resize(img, [3, 4]), tf.image.resize(img, [8, 11]),
            tf.image.resize(img[0], [9, 2]), tf.image.resize(img, [5, 7]),
            tf.image.resize(tf.cast(img, tf.uint8), [4, 4]),
            tf.image.resize(tf.cast(img, tf.float64), [3, 3]))


@case
def image_resize_nearest(tf):
    img = tf.constant(IMG)
    return (tf.image.resize(img, [3, 4], method="nearest"),
            tf.image.resize(img, [8, 11], method="nearest"),
            tf.image.resize(tf.cast(img, tf.int32), [4, 10], method="nearest"),
            tf.image.resize(img[1], [7, 3], method=tf.image.ResizeMethod.NEAREST_NEIGHBOR))


# --- tf.TensorArray ------------------------------------------------------------------------
@case
def tensor_array_eager(tf):
    ta = tf.TensorArray(tf.float32, size=3)
    ta = ta.write(0, [1.0, 2.0]).write(2, [5.0, 6.0])
    tb = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    for i in range(4):
        tb = tb.write(i, float(i) * 1.5)
    tc = tf.TensorArray(tf.int32, size=3).unstack(tf.constant([[1, 2], [3, 4], [5, 6]]))
    td = tf.TensorArray(tf.float32, size=4).scatter([3, 0], tf.constant([[1.0], [2.0]]))
    # reads last: TensorFlow's eager reads clear the element (clear_after_read), here not
    return (ta.stack(), ta.size(), ta.concat(), ta.gather([2, 0]), tb.stack(), tb.size(),
            tc.stack(), td.stack(), ta.read(2), tc.read(1))


@case
def tensor_array_while_loop(tf):
    @tf.function
    def squares(x):
        n = tf.shape(x)[0]
        ta = tf.TensorArray(tf.float32, size=4, element_shape=[])

        def body(i, ta):
            return i + 1, ta.write(i, x[i] * x[i])

        _, ta = tf.while_loop(lambda i, ta: i < n, body, [tf.constant(0), ta])
        return ta.stack()

    return squares(tf.constant([1.0, 2.0, 3.0, 4.0]))


# --- tf.debugging --------------------------------------------------------------------------
@case
def debugging_values(tf):
    x = tf.constant([1.0, 2.0])
    return (tf.debugging.check_numerics(x, "x"), tf.debugging.assert_all_finite(x, "x"),
            tf.constant(tf.debugging.is_numeric_tensor(x)),
            tf.constant(tf.debugging.is_numeric_tensor(tf.constant([True]))))


# --- tf.print: written with output_stream="file://..." and compared as text -----------------
PRINTS = {
    "print_int_matrix": lambda tf: (tf.reshape(tf.range(100), (10, 10)),),
    "print_floats": lambda tf: (tf.constant([0.1, 1 / 3, 1e20, 12345678.0, -2.5]),
                                tf.constant([0.1, 1 / 3], tf.float64)),
    "print_3d": lambda tf: (tf.constant(np.arange(28).reshape(7, 2, 2)),),
    "print_mixed": lambda tf: ("loss:", tf.constant(3.0), tf.constant([True, False]), 7),
}


# --- dtypes of Python numbers and integer tensors (TensorFlow's rules) ---------------------
@case
def python_number_dtypes(tf):
    cond = tf.constant([True, False])
    i = tf.constant([1, 2, 7])
    return (tf.where(cond, 1.0, 0.0), tf.where(cond, 1, 0), tf.stack([1, 2]),
            tf.concat([[1, 2], [3]], 0), tf.math.truediv(tf.constant(3), 2), tf.divide(i, tf.constant(2)),
            i // 2, i % 3, tf.constant(2.0) * 3, tf.fill([2], 1.5), tf.range(1, 10, 3),
            tf.zeros([2], tf.int32), tf.ones_like(i), tf.cast(i, tf.float32) / 2)


@case
def integer_reductions(tf):
    i = tf.constant([[1, 2, 4], [3, 5, 8]])
    return (tf.reduce_mean(i), tf.reduce_mean(i, 0), tf.reduce_sum(i, 1), tf.reduce_max(i),
            tf.reduce_prod(i), tf.math.cumsum(i, 1), tf.argmax(i, 1),
            tf.argmax(i, 1, output_type=tf.int32), tf.sort(i, direction="DESCENDING"),
            tf.math.segment_sum(i, [0, 1]), tf.add_n([i, i]), tf.matmul(i, tf.transpose(i)),
            tf.reduce_all(i > 0), tf.reduce_any(i > 7, 1), tf.abs(-i), tf.sign(i - 3))


@case
def shapes_of_edge_cases(tf):
    t = tf.constant(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4))
    return (tf.squeeze(tf.ones([1, 1])), tf.split(t, [1, 3], axis=-1)[1],
            tf.boolean_mask(t, tf.constant([[True, False, True], [False, False, True]])),
            tf.gather_nd(t, [[1, 2], [0, 0]]), tf.gather_nd(t, [[[1, 2, 3]], [[0, 1, 1]]]),
            tf.pad(tf.constant([[1, 2]]), [[0, 1], [2, 0]], constant_values=-1),
            tf.one_hot([0, 2], 3, dtype=tf.int32), tf.one_hot([1, 0], 3, on_value=5.0,
                                                                off_value=-1.0),
            tf.one_hot([1, 0], 3, axis=0), tf.math.top_k(tf.constant([2, 9, 4]), 2).indices,
            tf.transpose(tf.constant([[1 + 2j, 3j]]), conjugate=True),
            tf.reduce_sum(t, axis=[0, 2]), tf.math.reduce_variance(t, 1))


@case
def nn_names(tf):
    x = tf.constant(X)
    return (tf.nn.softmax(x), tf.nn.log_softmax(x), tf.nn.relu(x), tf.nn.sigmoid(x),
            tf.nn.softplus(x), tf.nn.elu(x),
            tf.nn.leaky_relu(x), tf.nn.gelu(x),
            tf.nn.softmax_cross_entropy_with_logits(tf.nn.softmax(-x), x),
            tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant([1, 5]), x),
            tf.nn.sigmoid_cross_entropy_with_logits(tf.nn.sigmoid(-x), x))


# --- gradients (tf.GradientTape) -------------------------------------------------------------
def _grad(tf, f, *xs):
    xs = [tf.constant(x) for x in xs]
    with tf.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = f(*xs)
    return tape.gradient(y, xs)


W = R.standard_normal((2, 8, 11, 3)).astype(np.float32)


@case
def gradients_of_new_names(tf):
    return (
        *_grad(tf, lambda img: tf.reduce_sum(tf.image.resize(img, [8, 11]) * W), IMG),
        *_grad(tf, lambda img: tf.reduce_sum(tf.image.resize(img, [3, 4]) ** 2), IMG),
        *_grad(tf, lambda s: tf.reduce_sum(tf.abs(tf.signal.stft(s, 8, 4)) ** 2), SIG),
        *_grad(tf, lambda s: tf.reduce_sum(tf.signal.frame(s, 4, 2) * tf.range(4.0)), SIG[:10]),
        *_grad(tf, lambda x: tf.reduce_sum(tf.math.real(tf.signal.rfft(x, [8])) * 2.0
                                           + tf.math.imag(tf.signal.rfft(x, [8]))), X),
        *_grad(tf, lambda x: tf.reduce_sum(tf.signal.fftshift(x) * tf.constant(M)), M),
    )


@case
def gradients_of_last_sessions_names(tf):
    upd = np.array([-1.0, -2.0], np.float32)
    return (
        *_grad(tf, lambda m, u: tf.reduce_sum(tf.tensor_scatter_nd_update(m, [[0, 0], [2, 1]], u)
                                              * tf.constant(M)), M, upd),
        *_grad(tf, lambda a, b: tf.reduce_sum(tf.math.divide_no_nan(a, b)),
               np.array([1.0, 2.0, 3.0], np.float32), np.array([0.0, 2.0, -1.0], np.float32)),
        *_grad(tf, lambda d: tf.reduce_sum(tf.math.unsorted_segment_sum(d, [2, 0, 2], 3)
                                           * tf.constant([[1.0], [2.0], [3.0]])), X[:, :3].T),
        *_grad(tf, lambda x: tf.reduce_sum(tf.math.top_k(x, 2).values * [1.0, 3.0]), X),
        *_grad(tf, lambda m: tf.norm(m) + tf.reduce_sum(tf.norm(m, ord=1, axis=1)), M),
        *_grad(tf, lambda m: tf.reduce_sum(tf.linalg.svd(m, compute_uv=False)), SV),
        *_grad(tf, lambda p: tf.reduce_sum(tf.gather(p, [[1, 0], [2, 2]], axis=1, batch_dims=1)
                                           * 2.0), np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)),
        *_grad(tf, lambda m: tf.reduce_sum(tf.boolean_mask(m, [True, False, True]) ** 2), M),
        *_grad(tf, lambda m: tf.reduce_sum(tf.gather_nd(m, [[0, 1], [2, 3], [0, 1]])), M),
        *_grad(tf, lambda m: tf.reduce_sum(tf.linalg.band_part(m, 1, 0) * tf.constant(M.T @ M)[:3]),
               M),
        *_grad(tf, lambda x: tf.reduce_sum(tf.math.cumsum(x, 1, exclusive=True, reverse=True)
                                           * tf.constant(X)), X),
    )


@case
def gradient_through_tensor_array_loop(tf):
    @tf.function
    def loss_and_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            ta = tf.TensorArray(tf.float32, size=4, element_shape=[2])

            def body(i, ta):
                return i + 1, ta.write(i, x[i] * x[i] * tf.cast(i + 1, tf.float32))

            _, ta = tf.while_loop(lambda i, ta: i < 4, body, [tf.constant(0), ta],
                                  maximum_iterations=4)
            loss = tf.reduce_sum(ta.stack() * tf.constant([[1.0, 2.0]]))
        return loss, tape.gradient(loss, x)

    return loss_and_grad(tf.constant(X[:, :4].T.copy()))


@case
def compiled_new_names(tf):
    @tf.function
    def f(img, s, x):
        ta = tf.TensorArray(tf.float32, size=2).unstack(x)
        return (tf.image.resize(img, [4, 9]), tf.image.resize(img, [3, 3], method="nearest"),
                tf.signal.stft(s, 8, 4), tf.signal.frame(s, 5, 3, pad_end=True),
                tf.signal.hann_window(6), tf.signal.irfft(tf.signal.rfft(x)),
                tf.signal.fftshift(x), ta.read(1), ta.concat(), tf.math.top_k(x, 3).indices,
                tf.math.unsorted_segment_sum(x, [1, 1], 2), tf.linalg.band_part(x, 0, 1),
                tf.reduce_mean(tf.cast(x > 0, tf.int32), 1), tf.debugging.check_numerics(x, "x"))

    return f(tf.constant(IMG), tf.constant(SIG), tf.constant(X))
