"""``tf.debugging``, ``tf.TensorArray``, ``tf.summary``, ``tf.signal`` / ``tf.image.resize``
errors and ``tf.distribute`` in ``tapegrad.compat.tensorflow`` (issue 33): behaviour the
TensorFlow oracle (tests/test_compat_tensorflow_oracle.py) does not cover: errors, messages,
run-time checks inside tf.function, files written."""
import json

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.compat.tensorflow as tf


# --- tf.debugging --------------------------------------------------------------------------
def test_value_assertions_pass_silently_and_raise_invalid_argument():
    x = tf.constant([1.0, 2.0])
    assert tf.debugging.assert_equal(x, [1.0, 2.0]) is None
    tf.debugging.assert_less(x, 3.0)
    tf.debugging.assert_greater_equal(x, 1.0)
    tf.debugging.assert_positive(x)
    tf.debugging.assert_near(x, x + 1e-6)  # 10 float32 eps: 1.2e-6
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"^shapes Condition x == y did not hold element-wise: x = \[1 2\]"):
        tf.debugging.assert_equal(tf.constant([1, 2]), [1, 3], message="shapes")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"x < y did not hold"):
        tf.debugging.assert_less(x, 2.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not equal to tolerance"):
        tf.debugging.assert_near(x, x + 1e-4)
    tf.debugging.assert_near(x, x + 1e-4, atol=1e-3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"x > y did not hold"):
        tf.debugging.assert_positive(tf.constant([1, 0]))


def test_check_numerics_returns_its_input_or_names_nan_and_inf():
    x = tf.constant([1.0, 2.0])
    assert tf.debugging.check_numerics(x, "x") is x
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"^logits : Tensor had NaN values$"):
        tf.debugging.check_numerics(tf.constant([np.nan, 1.0]), "logits")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"^y : Tensor had Inf values$"):
        tf.debugging.assert_all_finite(tf.constant([np.inf]), "y")


def test_static_assertions():
    x = tf.zeros([2, 3])
    tf.debugging.assert_rank(x, 2)
    with pytest.raises(ValueError, match=r"Tensor must have rank 3. Received rank 2, shape \(2, 3\)"):
        tf.debugging.assert_rank(x, 3)
    tf.debugging.assert_shapes([(x, ("N", 3)), (tf.zeros([2]), ["N"]), (tf.constant(1.0), [])])
    tf.debugging.assert_shapes([(x, "NK"), (tf.zeros([3, 2]), "KN")])
    with pytest.raises(ValueError, match=r"tensor 1 has shape \(3,\), expected \('N',\)"):
        tf.debugging.assert_shapes([(x, ("N", None)), (tf.zeros([3]), ("N",))])
    tf.debugging.assert_type(x, tf.float32)
    with pytest.raises(TypeError, match=r"has dtype float32, expected int32"):
        tf.debugging.assert_type(x, tf.int32)
    assert tf.debugging.is_numeric_tensor(tf.constant(1)) and not tf.debugging.is_numeric_tensor(
        1.0) and not tf.debugging.is_numeric_tensor(tf.constant([True]))


def test_value_assertions_inside_tf_function_check_when_the_program_runs():
    @tf.function
    def f(x):
        tf.debugging.assert_less(x, 3.0, message="too big")
        return tf.debugging.check_numerics(tf.math.log(x), "log x")

    np.testing.assert_allclose(f(tf.constant([1.0, 2.0])).numpy(), np.log([1.0, 2.0]))
    with pytest.raises(Exception, match=r"too big Condition x < y did not hold"):
        f(tf.constant([1.0, 5.0]))
    with pytest.raises(Exception, match=r"log x : Tensor had NaN values"):
        f(tf.constant([-1.0, 0.5]))


# --- tf.TensorArray ------------------------------------------------------------------------
def test_tensor_array_is_functional_and_checks_indices_and_shapes():
    ta = tf.TensorArray(tf.float32, size=2)
    tb = ta.write(0, [1.0, 2.0])
    tc = tb.write(1, [3.0, 4.0])
    np.testing.assert_array_equal(tb.stack().numpy(), [[1, 2], [0, 0]])  # tb is unchanged
    np.testing.assert_array_equal(tc.stack().numpy(), [[1, 2], [3, 4]])
    assert tc.element_shape == (2,) and tc.dtype == np.float32 and not tc.dynamic_size
    assert "size=2" in repr(tc)
    with pytest.raises(ValueError, match=r"index 2 but the array is not resizeable and its size "
                                         r"is 2; give a larger size or dynamic_size=True"):
        tc.write(2, [5.0, 6.0])
    with pytest.raises(ValueError, match=r"element of shape \(3,\) does not match the array's "
                                         r"element shape \(2,\)"):
        tc.write(0, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"index 5 is out of range for an array of size 2"):
        tc.read(5)
    with pytest.raises(ValueError, match=r"element shape is unknown|elements' shape is unknown"):
        tf.TensorArray(tf.float32, size=3).read(0)
    assert tf.TensorArray(tf.float32, size=0, dynamic_size=True).stack().shape == (0,)
    with pytest.raises(ValueError, match=r"are scalars; use stack\(\)"):
        tf.TensorArray(tf.float32, size=1).write(0, 1.0).concat()
    leaves = tg.tree_util.tree_leaves({"ta": tc})
    assert len(leaves) == 1 and leaves[0] is tc.stack()


def test_tensor_array_in_a_loop_needs_its_element_shape_and_a_fixed_size():
    x = tf.constant([1.0, 2.0, 3.0])

    def fill(ta):
        def body(i, ta):
            return i + 1, ta.write(i, x[i] + 1.0)
        return tf.while_loop(lambda i, ta: i < 3, body, [tf.constant(0), ta])[1].stack()

    np.testing.assert_array_equal(fill(tf.TensorArray(tf.float32, 3, element_shape=[])).numpy(),
                                  [2, 3, 4])  # eagerly
    np.testing.assert_array_equal(  # written before the loop: its shape is known
        tf.function(fill)(tf.TensorArray(tf.float32, 3).write(2, 0.0)).numpy(), [2, 3, 4])
    with pytest.raises(ValueError, match=r"before its element shape is known; give "
                                         r"element_shape=\[...\]"):
        fill(tf.TensorArray(tf.float32, 3))

    @tf.function
    def grow(x):
        ta = tf.TensorArray(tf.float32, size=1, dynamic_size=True, element_shape=[])
        return ta.write(tf.shape(x)[0] - tf.constant(1), x[0]).stack()

    with pytest.raises(ValueError, match=r"dynamic_size array cannot grow at a traced index"):
        grow(x)


# --- tf.summary ----------------------------------------------------------------------------
def _records(logdir):
    with open(logdir / "summaries.jsonl") as f:
        return [json.loads(line) for line in f]


def test_summary_writes_json_lines_eagerly_and_from_tf_function(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "logs"))
    assert tf.summary.scalar("ignored", 1.0, step=0) is False  # no default writer
    with writer.as_default(step=3):
        assert tf.summary.scalar("loss", tf.constant(0.5))
        tf.summary.histogram("w", np.arange(10.0), buckets=5)
        tf.summary.text("note", "hello", step=4)
    step = tf.Variable(7, dtype=tf.int64)

    @tf.function
    def train_step(x):
        with writer.as_default():
            tf.summary.scalar("traced", x * 2, step=step)
        return x

    train_step(tf.constant(1.0))
    step.assign(8)
    train_step(tf.constant(2.0))
    tf.summary.flush(writer)
    rows = _records(tmp_path / "logs")
    assert [(r["tag"], r["step"], r["kind"]) for r in rows] == [
        ("loss", 3, "scalar"), ("w", 3, "histogram"), ("note", 4, "text"), ("traced", 7, "scalar"),
        ("traced", 8, "scalar")]
    assert rows[0]["value"] == 0.5 and rows[2]["value"] == "hello"
    assert [r["value"] for r in rows[3:]] == [2.0, 4.0]
    assert [b[2] for b in rows[1]["buckets"]] == [2, 2, 2, 2, 2]
    assert rows[1]["buckets"][0][:2] == [0.0, 1.8]


def test_summary_without_a_step_says_how_to_give_one(tmp_path):
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        with pytest.raises(ValueError, match=r"no step: pass step= or set one with "
                                             r"tf.summary.experimental.set_step"):
            tf.summary.scalar("loss", 1.0)
        tf.summary.experimental.set_step(2)
        try:
            assert tf.summary.experimental.get_step() == 2 and tf.summary.scalar("loss", 1.0)
        finally:
            tf.summary.experimental.set_step(None)
    with pytest.raises(TypeError, match=r"data must be a str"):
        with tf.summary.create_noop_writer().as_default(step=1):
            tf.summary.text("t", 3.0)


# --- tf.signal and tf.image errors; tf.distribute -------------------------------------------
def test_signal_and_image_errors():
    with pytest.raises(ValueError, match=r"frame_length and frame_step must be positive, got 0"):
        tf.signal.frame(tf.zeros([5]), 0, 1)
    with pytest.raises(NotImplementedError, match=r"method='bicubic'.*only 'bilinear' and "
                                                  r"'nearest'"):
        tf.image.resize(tf.zeros([2, 2, 1]), [3, 3], method="bicubic")
    with pytest.raises(NotImplementedError, match=r"antialias=True"):
        tf.image.resize(tf.zeros([2, 2, 1]), [1, 1], antialias=True)
    with pytest.raises(ValueError, match=r"images must be 3-d .* got shape \(2, 2\)"):
        tf.image.resize(tf.zeros([2, 2]), [3, 3])


def test_distribute_is_tapegrads():
    assert tf.distribute is tg.distribute and tf.distribute.MirroredStrategy is not None


def test_integer_reductions_keep_int32_and_truncate_the_mean():
    i = tf.constant([[-7, 2], [3, 1]])
    assert tf.reduce_sum(i).dtype == np.int32 and tf.math.cumsum(i).dtype == np.int32
    np.testing.assert_array_equal(tf.reduce_mean(i, 1).numpy(), [-2, 2])  # -2.5 -> -2, as C
    np.testing.assert_array_equal(tf.reduce_mean(i, 0, keepdims=True).numpy(), [[-2, 1]])


def test_tensor_array_element_shape_with_unknown_sizes_is_learned_from_the_first_write():
    ta = tf.TensorArray(tf.float32, size=2, element_shape=[None, 2])
    assert ta.element_shape is None
    ta = ta.write(1, tf.ones([3, 2]))
    assert ta.element_shape == (3, 2) and ta.stack().shape == (2, 3, 2)
