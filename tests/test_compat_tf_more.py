"""Names TensorFlow's guides use (issue 33; ``tapegrad.compat.tf_extras``) and the TF-compatible
gradient-machinery behaviours fixed with them, checked against NumPy and the math."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.compat.tensorflow as tf


def test_meshgrid_xy_and_ij_as_numpy_with_float32_default_and_gradient():
    a, b = [0.5, 1.0, 2.0], [-1.0, 3.0]
    for indexing in ("xy", "ij"):
        got = tf.meshgrid(a, b, indexing=indexing)
        want = np.meshgrid(a, b, indexing=indexing)
        assert len(got) == 2 and all(g.dtype == np.float32 for g in got)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w)
    x = tf.constant(a)
    with tf.GradientTape() as tape:
        tape.watch(x)
        gx, gy = tf.meshgrid(x, tf.constant(b))
        total = tf.reduce_sum(gx * gy)
    np.testing.assert_allclose(tape.gradient(total, x).numpy(), [2.0, 2.0, 2.0])  # sum(b) each
    with pytest.raises(ValueError, match="tf.meshgrid: indexing must be 'xy' or 'ij', got 'xx'"):
        tf.meshgrid(a, b, indexing="xx")


def test_cast_takes_dtype_by_keyword():
    # the tensor guide casts through float16, which array_api_strict lacks: float32 here
    x = tf.cast(tf.constant([2.2, 3.3, 4.4], dtype=tf.float64), dtype=tf.float32)
    u8 = tf.cast(x, dtype=tf.uint8)
    assert x.dtype == np.float32 and u8.dtype == np.uint8
    np.testing.assert_array_equal(u8.numpy(), [2, 3, 4])


def test_generator_from_seed_alg_reset_split_and_float32_default():
    g = tf.random.Generator.from_seed(1, alg="philox")
    first = g.normal(shape=[2, 3])
    assert first.dtype == np.float32 and first.shape == (2, 3)
    g.reset_from_seed(1)
    np.testing.assert_array_equal(g.normal([2, 3]).numpy(), first.numpy())
    np.testing.assert_array_equal(tf.random.Generator.from_seed(1).normal([2, 3]).numpy(),
                                  first.numpy())
    u = g.uniform([4], minval=2.0, maxval=3.0)
    assert u.dtype == np.float32 and np.all((u.numpy() >= 2.0) & (u.numpy() < 3.0))
    # split: deterministic children with different streams; the parent draws on
    kids = tf.random.Generator.from_seed(5).split(3)
    again = tf.random.Generator.from_seed(5).split(3)
    draws = [k.normal([]).numpy() for k in kids]
    assert len({float(d) for d in draws}) == 3 and all(isinstance(k, tf.random.Generator)
                                                       for k in kids)
    np.testing.assert_array_equal(draws, [k.normal([]).numpy() for k in again])
    assert isinstance(tf.random.get_global_generator().split(1)[0], tg.random.Generator)
    with pytest.raises(ValueError, match="Generator.split: count must be a positive int, got 0"):
        g.split(0)


def test_stateless_normal_and_uniform_are_fixed_by_the_seed():
    a = tf.random.stateless_normal(shape=[2, 3], seed=[1, 2])
    b = tf.random.stateless_normal(shape=[2, 3], seed=[1, 2])
    c = tf.random.stateless_normal(shape=[2, 3], seed=[1, 3])
    assert a.shape == (2, 3) and a.dtype == np.float32
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())
    u = tf.random.stateless_uniform([100], seed=tf.constant([7, 8]), minval=0, maxval=10,
                                    dtype=tf.int32)
    assert u.dtype == np.int32 and u.numpy().min() >= 0 and u.numpy().max() < 10
    np.testing.assert_array_equal(
        u.numpy(), tf.random.stateless_uniform([100], seed=[7, 8], minval=0, maxval=10,
                                               dtype=tf.int32).numpy())
    with pytest.raises(ValueError, match=r"tf.random.stateless_normal: seed must be a shape "
                                         r"\[2\] integer tensor or list of two ints, got 3"):
        tf.random.stateless_normal([2], seed=3)


def test_dtypes_namespace_and_types_experimental():
    assert tf.dtypes.int32 == np.int32 and tf.dtypes.float32 == tf.float32
    x = tf.random.uniform(shape=[3, 3], minval=-1, maxval=2, dtype=tf.dtypes.int32)
    assert x.dtype == np.int32
    assert isinstance(tf.constant(1.0), tf.types.experimental.TensorLike)
    with pytest.raises(AttributeError, match="tf.dtypes.qint8 is not provided"):
        tf.dtypes.qint8


def test_tensor_shape_is_a_tuple_with_tensorflows_methods():
    x = tf.constant(np.zeros((3, 2, 4), np.float32))
    assert x.shape == (3, 2, 4) and x.shape.as_list() == [3, 2, 4]
    assert x.shape.rank == 3 and x.shape.ndims == 3 and tf.Variable([1.0]).shape.as_list() == [1]
    assert isinstance(x.shape, tuple) and x.shape[1:] == (2, 4) and hash(x.shape) == hash((3, 2, 4))
    s = tf.TensorShape([None, 2])
    assert s.as_list() == [None, 2] and s.is_compatible_with([5, 2])
    s.assert_is_compatible_with((1, 2))
    with pytest.raises(ValueError, match=r"Shapes \(None, 2\) and \(1, 3\) are incompatible"):
        s.assert_is_compatible_with([1, 3])
    with pytest.raises(ValueError, match="unknown rank"):
        tf.TensorShape(None)


def test_init_scope_lifts_assignments_out_of_the_trace():
    class Model(tf.Module):
        def __init__(self):
            self.v = tf.Variable(0)
            self.counter = 0

        @tf.function
        def __call__(self):
            if self.counter == 0:
                with tf.init_scope():
                    self.counter += 1
                    self.v.assign_add(1)
            return self.v

    m = Model()
    assert [int(m().numpy()) for _ in range(3)] == [1, 1, 1]  # TensorFlow's guide prints these
    with tf.init_scope():  # eagerly: nothing to leave
        m.v.assign(5)
    assert int(m.v.numpy()) == 5


def test_constant_of_strings_says_strings_are_not_supported():
    for value in ("hello", b"x", ["a", "b"]):
        with pytest.raises(TypeError, match="tf.constant: .* holds strings; TensorFlow's string "
                                            r"tensors \(tf.string, tf.strings\) are not "
                                            "supported by tapegrad"):
            tf.constant(value)


def test_py_function_as_a_decorator_and_tout_required():
    @tf.py_function(Tout=tf.float32)
    def py_plus(x, y):
        return x + y

    out = py_plus(tf.constant(1.5), tf.constant(2.0))
    assert out.dtype == np.float32 and float(out.numpy()) == 3.5
    with pytest.raises(TypeError, match="py_function: Tout is required"):
        tg.py_function(lambda x: x, [1.0])


def test_tensor_spec_none_admits_any_rank():
    spec = tg.TensorSpec(None)
    assert spec.is_compatible_with(np.zeros((2, 3), np.float32))
    assert spec.is_compatible_with(np.float32(1.0))

    @tg.function(input_signature=[tg.TensorSpec(None)])
    def double(x):
        return x * 2.0

    np.testing.assert_allclose(double(tg.constant(np.ones((2, 2), np.float32))).numpy(),
                               2 * np.ones((2, 2)))


def test_function_gives_none_for_unconnected_inputs_and_outputs():
    @tg.function
    def f(x, y):
        return x * 2.0

    x, y = tg.constant(1.0), tg.constant(2.0)
    with tg.GradientTape() as tape:
        tape.watch([x, y])
        z = f(x, y)
    dx, dy = tape.gradient(z, [x, y])
    assert float(dx.numpy()) == 2.0 and dy is None
    with tg.GradientTape() as tape:
        tape.watch([x, y])
        z = f(x, y)
    assert float(tape.gradient(z, [x, y], unconnected_gradients="zero")[1].numpy()) == 0.0

    @tg.function
    def g(x):
        return tg.constant(1.0), x * 3.0

    with tg.ForwardAccumulator(x, tg.constant(1.0)) as acc:
        c, d = g(x)
    assert acc.jvp(c) is None and float(acc.jvp(d).numpy()) == 3.0


def test_tensorflow_error_types_and_messages():
    @tg.RegisterGradient("TgExtrasDupOp")
    def _g(op, dy):
        return dy

    for cls in (KeyError, ValueError):
        with pytest.raises(cls, match="'TgExtrasDupOp' already has a gradient"):
            @tg.RegisterGradient("TgExtrasDupOp")
            def _g2(op, dy):
                return 2 * dy
    tg.no_gradient("TgExtrasNotYetDefinedOp")  # accepted, as TensorFlow does
    x = tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    with pytest.raises(ValueError, match="Unknown value for unconnected_gradients: 'nonsense'"):
        tape.gradient(y, x, unconnected_gradients="nonsense")
    with pytest.raises(ValueError, match="multiple times"):
        tg.ForwardAccumulator([x, x], [1.0, 2.0])


def test_train_list_variables_and_load_variable(tmp_path):
    class Model(tg.Module):
        def __init__(self):
            super().__init__()
            self.w = tg.Variable([[1.0, 2.0]])
            self.b = tg.Variable(3.0)

    path = tf.train.Checkpoint(model=Model()).write(str(tmp_path / "ck"))
    assert tf.train.list_variables(path) == [("model/b", []), ("model/w", [1, 2]),
                                             ("save_counter", [])]
    np.testing.assert_array_equal(tf.train.load_variable(path, "model/w"), [[1.0, 2.0]])
    with pytest.raises(KeyError, match="no array 'model/v' in the checkpoint; it has model/b, "
                                       "model/w, save_counter"):
        tf.train.load_variable(path, "model/v")
    with pytest.raises(FileNotFoundError, match="no checkpoint saved in the directory"):
        tf.train.list_variables(str(tmp_path))


def test_pretty_printed_concrete_signatures_lists_the_traces_in_order():
    pytest.importorskip("jax")

    @tf.function
    def my_relu(x):
        return tf.maximum(0., tf.cast(x, tf.float32))

    assert my_relu.pretty_printed_concrete_signatures() == ""
    assert float(my_relu(tf.constant(5.5))) == 5.5
    np.testing.assert_array_equal(my_relu([1, -1]).numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(my_relu(tf.constant([3., -3.])).numpy(), [3.0, 0.0])
    block = ("Input Parameters:\n  x (POSITIONAL_OR_KEYWORD): {}\nOutput Type:\n  {}\n"
             "Captures:\n  None")
    s0 = "TensorSpec(shape=(), dtype=float32, name=None)"
    s2 = "TensorSpec(shape=(2,), dtype=float32, name=None)"
    assert my_relu.pretty_printed_concrete_signatures() == "\n\n".join([
        block.format(s0, s0), block.format("List[Literal[1], Literal[-1]]", s2),
        block.format(s2, s2)])

    @tf.function
    def scaled(a, *, b=1):
        return {"s": a * b}

    assert float(scaled(tf.constant(2.0), b=3)["s"]) == 6.0
    assert scaled.pretty_printed_concrete_signatures() == (
        f"Input Parameters:\n  a (POSITIONAL_OR_KEYWORD): {s0}\n  b (KEYWORD_ONLY): Literal[3]\n"
        f"Output Type:\n  Dict['s': {s0}]\nCaptures:\n  None")


def test_concrete_function_takes_only_its_tensor_arguments_as_tensorflow():
    pytest.importorskip("jax")

    class SimpleModel(tf.Module):
        def __init__(self):
            self.bias, self.weight = 0., 2.

    def evaluate(model, x):
        return model.weight * x + model.bias

    model, x = SimpleModel(), tf.constant(10.)
    concrete = tf.function(evaluate).get_concrete_function(model, x)
    assert float(concrete(x)) == 20.0  # the model is bound at the trace
    assert float(concrete(model, x)) == 20.0
    model.bias += 5.0
    assert float(tf.function(evaluate).get_concrete_function(model, x)(x)) == 25.0
    with pytest.raises(TypeError, match="argument leaf 0 of the concrete function is shape"):
        concrete(x, x)
