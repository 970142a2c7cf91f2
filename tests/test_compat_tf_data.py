"""tf.data in tapegrad.compat.tensorflow (issue 33): a TensorFlow 2 input pipeline of
tapegrad Tensors, iterated eagerly; values checked against NumPy."""
import numpy as np
import pytest

import tapegrad.compat.tensorflow as tf

X = np.arange(20.0).reshape(10, 2)
Y = np.arange(10)


def _rows(dataset):
    return [tuple(np.asarray(v) for v in e) if isinstance(e, tuple) else np.asarray(e)
            for e in dataset.as_numpy_iterator()]


def test_slices_map_batch_in_order():
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).map(lambda x, y: (2.0 * x, y + 1)).batch(4)
    batches = _rows(ds)
    assert len(batches) == len(ds) == 3
    np.testing.assert_array_equal(batches[0][0], 2.0 * X[:4])
    np.testing.assert_array_equal(batches[2][1], Y[8:] + 1)
    assert len(_rows(ds.unbatch())) == 10
    dropped = tf.data.Dataset.from_tensor_slices(X).batch(4, drop_remainder=True)
    assert [b.shape for b in _rows(dropped)] == [(4, 2), (4, 2)] and len(dropped) == 2


def test_shuffle_is_a_seeded_permutation_and_reshuffles_each_epoch():
    ds = tf.data.Dataset.range(50).shuffle(50, seed=3)
    first, second = [int(v) for v in ds.as_numpy_iterator()], [int(v) for v in ds]
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != list(range(50)) and first != second
    again = [int(v) for v in tf.data.Dataset.range(50).shuffle(50, seed=3)]
    assert again == first  # the same seed, the same first epoch
    fixed = tf.data.Dataset.range(50).shuffle(50, seed=3, reshuffle_each_iteration=False)
    assert [int(v) for v in fixed] == [int(v) for v in fixed]
    small = [int(v) for v in tf.data.Dataset.range(100).shuffle(4, seed=0)]
    assert sorted(small) == list(range(100))
    assert all(small[i] < i + 4 for i in range(100))  # a buffer of 4 moves nothing far ahead


def test_repeat_take_skip_filter_enumerate_zip_and_dicts():
    ds = tf.data.Dataset.range(3).repeat(2)
    assert [int(v) for v in ds] == [0, 1, 2, 0, 1, 2] and len(ds) == 6
    assert [int(v) for v in tf.data.Dataset.range(10).repeat().skip(8).take(5)] == [8, 9, 0, 1, 2]
    assert [int(v) for v in tf.data.Dataset.range(10).filter(lambda v: v % 3 == 0)] == [0, 3, 6, 9]
    pairs = list(tf.data.Dataset.range(5, 8).enumerate())
    assert [(int(i), int(v)) for i, v in pairs] == [(0, 5), (1, 6), (2, 7)]
    z = tf.data.Dataset.zip((tf.data.Dataset.range(3), tf.data.Dataset.range(10, 20)))
    assert [(int(a), int(b)) for a, b in z] == [(0, 10), (1, 11), (2, 12)] and len(z) == 3
    d = tf.data.Dataset.from_tensor_slices({"x": X, "y": Y}).batch(5)
    first = next(iter(d))
    np.testing.assert_array_equal(first["x"].numpy(), X[:5])
    assert int(tf.data.Dataset.range(4).repeat().cardinality()) == -2
    assert tf.data.Dataset.range(4).prefetch(tf.data.AUTOTUNE).cache() is not None


def test_a_training_loop_over_a_dataset():
    w = tf.Variable(np.zeros(2, np.float32))
    opt = tf.optimizers.SGD(0.002)
    ds = tf.data.Dataset.from_tensor_slices((X.astype(np.float32),
                                             (X @ [1.0, -0.5]).astype(np.float32)))
    losses = []
    for _ in range(30):
        for x, y in ds.shuffle(10, seed=1).batch(5):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.reduce_sum(x * w, axis=1) - y) ** 2)
            opt.apply_gradients([(tape.gradient(loss, w), w)])
        losses.append(float(loss))
    assert losses[-1] < 0.1 * losses[0]


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match=r"tf.data.Dataset.batch: batch_size must be a "
                                         r"positive int, got 0"):
        tf.data.Dataset.range(3).batch(0)
    with pytest.raises(ValueError, match=r"from_tensor_slices: every component needs the same "
                                         r"leading size to slice along, got shapes "
                                         r"\[\(10, 2\), \(3,\)\]"):
        tf.data.Dataset.from_tensor_slices((X, Y[:3]))
    with pytest.raises(TypeError, match=r"the length is unknown"):
        len(tf.data.Dataset.range(3).filter(lambda v: v > 0))
    with pytest.raises(AttributeError, match=r"tf.data.TFRecordDataset is not provided by "
                                             r"tapegrad.compat.tensorflow yet"):
        tf.data.TFRecordDataset


def test_from_tensor_slices_of_a_list_slices_it_as_one_tensor():
    # TensorFlow's function guide: a list is converted to a tensor, not taken as a structure
    ds = tf.data.Dataset.from_tensor_slices([1, 2, 3])
    assert [int(x.numpy()) for x in ds] == [1, 2, 3]
    pairs = tf.data.Dataset.from_tensor_slices(([[1.0, 2.0], [3.0, 4.0]], [5, 6]))
    got = [(x.numpy().tolist(), int(y.numpy())) for x, y in pairs]
    assert got == [([1.0, 2.0], 5), ([3.0, 4.0], 6)]
