"""GradientTape semantics, case by case against TensorFlow 2's documented behaviour."""
import gc
import threading
import warnings
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientCountError, GradientShapeError, NotDifferentiableError


def test_only_watched_inputs_are_recorded():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        y = x * x  # x not watched: a constant to the tape
    assert tape.gradient(y, x) is None


def test_value_computed_outside_tape_is_a_constant():
    x = tg.constant(3.0)
    outside = x * x
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = outside * x
    assert float(tape.gradient(y, x)) == pytest.approx(9.0)  # d(9 x)/dx, not d(x^3)/dx


def test_watch_traces_through_recorded_ops():
    x = tg.constant([1.0, 2.0, 3.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(tg.exp(x) * x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.exp([1, 2, 3.0]) * (1 + np.array([1, 2, 3.0])))


class _Subclass(tg.Tensor):
    __slots__ = ()


def test_a_watched_tensor_subclass_has_its_gradient_under_one_tape_and_under_two():
    # one tape and two tapes both trace a subclass of Tensor like a Tensor
    x0 = np.array([0.5, -1.0, 2.0])
    want = np.cos(x0) * x0 ** 2 + 2 * np.sin(x0) * x0  # d/dx sin(x) x^2
    x = _Subclass(x0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(tg.sin(x) * x * x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), want, rtol=1e-14)
    with tg.GradientTape() as outer:
        with tg.GradientTape() as tape:
            outer.watch(x)
            tape.watch(x)
            y = tg.sum(tg.sin(x) * x * x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), want, rtol=1e-14)
    np.testing.assert_allclose(outer.gradient(y, x).numpy(), want, rtol=1e-14)


def test_variables_watched_automatically():
    v = tg.Variable([1.0, -2.0])
    with tg.GradientTape() as tape:
        y = tg.sum(v * v)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), [2.0, -4.0])
    assert [w.name for w in tape.watched_variables()] == [v.name]


def test_watch_accessed_variables_false():
    v = tg.Variable(2.0)
    w = tg.Variable(5.0)
    with tg.GradientTape(watch_accessed_variables=False, persistent=True) as tape:
        tape.watch(w)
        y = v * w
    assert tape.gradient(y, v) is None
    assert float(tape.gradient(y, w)) == 2.0
    assert [x.name for x in tape.watched_variables()] == [w.name]


def test_untrainable_variable_not_watched():
    v = tg.Variable(2.0, trainable=False)
    with tg.GradientTape() as tape:
        y = v * v
    assert tape.gradient(y, v) is None


def test_non_persistent_tape_used_twice_raises():
    x = tg.Variable(1.0)
    with tg.GradientTape() as tape:
        y = x * x
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match="non-persistent GradientTape can only be used"):
        tape.gradient(y, x)


def test_persistent_tape_allows_several_gradients():
    x = tg.Variable(3.0)
    with tg.GradientTape(persistent=True) as tape:
        y = x * x
        z = y * y
    assert float(tape.gradient(y, x)) == 6.0
    assert float(tape.gradient(z, x)) == pytest.approx(4 * 27.0)


def test_nested_tapes_give_second_and_third_derivatives():
    x = tg.Variable(2.0)
    with tg.GradientTape() as t3:
        with tg.GradientTape() as t2:
            with tg.GradientTape() as t1:
                y = x ** 4
            g1 = t1.gradient(y, x)
        g2 = t2.gradient(g1, x)
    g3 = t3.gradient(g2, x)
    assert (float(g1), float(g2), float(g3)) == pytest.approx((32.0, 48.0, 48.0))


def test_hessian_with_jacobian():
    x = tg.Variable([1.0, 2.0, 3.0])
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = tg.sum(x ** 3) + x[0] * x[1]
        g = inner.gradient(y, x)
    h = outer.jacobian(g, x).numpy()
    expected = np.diag(6 * np.array([1.0, 2.0, 3.0]))
    expected[0, 1] = expected[1, 0] = 1.0
    np.testing.assert_allclose(h, expected)


def test_jacobian_shape_and_values():
    x = tg.constant([[1.0, 2.0], [3.0, 4.0]])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sin(x) * 2.0
    j = tape.jacobian(y, x)
    assert j.shape == (2, 2, 2, 2)
    expected = np.zeros((2, 2, 2, 2))
    for i in range(2):
        for k in range(2):
            expected[i, k, i, k] = 2 * np.cos(x.numpy()[i, k])
    np.testing.assert_allclose(j.numpy(), expected)


def test_sources_structures():
    a, b, c = tg.Variable(1.0), tg.Variable(2.0), tg.Variable(3.0)
    with tg.GradientTape(persistent=True) as tape:
        y = a * b * c
    assert isinstance(tape.gradient(y, [a, b]), list)
    ga, gb = tape.gradient(y, (a, b))
    assert (float(ga), float(gb)) == (6.0, 3.0)
    d = tape.gradient(y, {"a": a, "nested": [b, c]})
    assert float(d["a"]) == 6.0 and [float(t) for t in d["nested"]] == [3.0, 2.0]


def test_unconnected_gradients():
    x, z = tg.Variable([1.0, 2.0]), tg.Variable([[5.0]])
    with tg.GradientTape(persistent=True) as tape:
        y = tg.sum(x * 2.0)
    assert tape.gradient(y, z) is None
    zero = tape.gradient(y, z, unconnected_gradients=tg.UnconnectedGradients.ZERO)
    assert zero.shape == (1, 1) and zero.dtype == z.dtype and float(zero[0, 0]) == 0.0
    assert tape.gradient(y, z, unconnected_gradients="zero").shape == (1, 1)


def test_output_gradients_weight_the_target():
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        y = x * x
    g = tape.gradient(y, x, output_gradients=tg.constant([10.0, -1.0]))
    np.testing.assert_allclose(g.numpy(), [20.0, -4.0])


def test_list_of_targets_is_summed():
    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y1, y2 = x * x, x * 3.0
    assert float(tape.gradient([y1, y2], x)) == 7.0


def test_integer_tensors_carry_no_gradient():
    i = tg.constant([1, 2, 3])
    with tg.GradientTape() as tape:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            tape.watch(i)
        assert any("cannot carry a gradient" in str(m.message) for m in w)
        y = tg.astype(i, tg.float64) * 2.0
    assert tape.gradient(y, i) is None


def test_integer_source_with_zero_unconnected_gives_float_zeros():
    i = tg.constant([1, 2])
    x = tg.Variable(1.0)
    with tg.GradientTape() as tape:
        y = x * 2.0
    g = tape.gradient(y, i, unconnected_gradients=tg.UnconnectedGradients.ZERO)
    assert g.dtype == np.float64 and g.shape == (2,)


def test_cast_through_integer_cuts_the_gradient():
    x = tg.Variable([1.5, 2.5])
    with tg.GradientTape() as tape:
        y = tg.astype(tg.astype(x, tg.int64), tg.float64) * x
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 2.0])


def test_integer_targets_and_sources_have_none_gradients_as_in_tensorflow():
    x = tg.Variable(1.0)
    with tg.GradientTape(persistent=True) as tape:
        y = tg.astype(x, tg.int32)
        z = x * 3.0
    with pytest.warns(UserWarning, match="a target of dtype int32 has no gradient .* its "
                                         "gradients are None, as in TensorFlow"):
        assert tape.gradient(y, x) is None
    with pytest.warns(UserWarning, match="target of dtype int32"):
        assert float(tape.gradient([y, z], x)) == 3.0  # the floating target alone
    with pytest.warns(UserWarning, match="target of dtype int32"):
        assert float(tape.gradient(y, x, unconnected_gradients="zero")) == 0.0
    n = tg.constant(3)
    with pytest.warns(UserWarning, match="cannot carry a gradient"):
        with tg.GradientTape() as tape:
            tape.watch(n)
            w = tg.astype(n, tg.float64) * x
    assert tape.gradient(w, n) is None


def test_watched_variables_are_in_creation_order():
    a, b = tg.Variable(1.0, name="a"), tg.Variable(2.0, name="b")
    with tg.GradientTape() as tape:
        tape.watch(b)
        y = b * a
    assert [v.name for v in tape.watched_variables()] == ["a", "b"]


def test_tensorflows_error_types_for_misuse():
    tape = tg.GradientTape()
    with tape:
        with pytest.raises(ValueError, match="already recording; do not re-enter it"):
            tape.__enter__()
        with pytest.raises(ValueError, match="expected a Tensor or Variable, got ndarray; "
                                             "convert it with tg.constant first"):
            tape.watch(np.ones(2))


def test_source_must_be_tensor():
    x = tg.Variable(1.0)
    with tg.GradientTape() as tape:
        y = x * 2.0
    with pytest.raises(TypeError, match="sources must be Tensors"):
        tape.gradient(y, np.array(1.0))


def test_stop_recording():
    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = x * x
        with tape.stop_recording():
            z = x * 100.0
        w = y + z
    assert float(tape.gradient(w, x)) == 4.0


def test_stop_recording_outside_context_raises():
    with pytest.raises(ValueError, match="not recording"):
        with tg.GradientTape().stop_recording():
            pass


def test_reset_forgets_records():
    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = x * x
        tape.reset()
        z = x * 3.0
    assert float(tape.gradient(z, x)) == 3.0


def test_stop_gradient():
    x = tg.Variable(3.0)
    with tg.GradientTape() as tape:
        y = tg.stop_gradient(x * x) * x
    assert float(tape.gradient(y, x)) == 9.0


def test_non_persistent_tape_stops_recording_when_used_inside_its_block():
    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = x * x
        g = tape.gradient(y, x)
        z = g * x  # not recorded any more, and no error on exit
    assert float(z) == 8.0


def test_variable_assigned_after_recording_uses_recorded_value():
    v = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = v * v * v
    v.assign(10.0)
    assert float(tape.gradient(y, v)) == 12.0


def test_tapes_are_thread_local():
    x = tg.Variable(2.0)
    results = {}

    def other_thread():
        results["y"] = x * x  # must not be recorded on the main thread's tape

    with tg.GradientTape() as tape:
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        y = x * 3.0
    assert len(tape._ops) == 1
    assert float(tape.gradient(y, x)) == 3.0


def test_broadcast_gradients_sum_back():
    a = tg.Variable(np.ones((2, 3)))
    b = tg.Variable(np.array([1.0, 2.0, 3.0]))
    c = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = tg.sum(a * b * c)
    ga, gb, gc = tape.gradient(y, [a, b, c])
    np.testing.assert_allclose(ga.numpy(), np.tile([2.0, 4.0, 6.0], (2, 1)))
    np.testing.assert_allclose(gb.numpy(), [4.0, 4.0, 4.0])
    assert float(gc) == pytest.approx(12.0)


def test_mixed_float_dtypes_gradient_has_input_dtype():
    a = tg.Variable(np.ones(3, np.float32))
    b = tg.Variable(np.full(3, 2.0))
    with tg.GradientTape() as tape:
        y = tg.sum(a * b)
    ga, gb = tape.gradient(y, [a, b])
    assert ga.dtype == np.float32 and gb.dtype == np.float64


def test_float32_stays_float32_with_python_scalars():
    x = tg.Variable(np.ones(3, np.float32))
    with tg.GradientTape() as tape:
        y = tg.sum(x * 2.5 + 1.0)
    assert y.dtype == np.float32
    assert tape.gradient(y, x).dtype == np.float32


# --- registered gradients and their errors ------------------------------------------------------
@tg.primitive("TapeTestWrongShape")
def _wrong_shape(x):
    return x * 2.0


@tg.RegisterGradient("TapeTestWrongShape")
def _wrong_shape_grad(op, dy):
    return tg.sum(dy, axis=0)


@tg.primitive("TapeTestWrongDtype")
def _wrong_dtype(x):
    return x * 2.0


@tg.RegisterGradient("TapeTestWrongDtype")
def _wrong_dtype_grad(op, dy):
    return tg.astype(dy, tg.float32)


@tg.primitive("TapeTestTwoGrads")
def _two_grads(x):
    return x


@tg.RegisterGradient("TapeTestTwoGrads")
def _two_grads_grad(op, dy):
    return dy, dy


@tg.primitive("TapeTestNoGrad")
def _no_grad(x):
    return x + 1.0


@tg.primitive("TapeTestNanGrad")
def _nan_grad(x):
    return x


@tg.RegisterGradient("TapeTestNanGrad")
def _nan_grad_grad(op, dy):
    return dy * float("nan")


def test_wrong_shape_gradient_error_names_everything():
    x = tg.Variable(np.ones((2, 3)))
    with tg.GradientTape() as tape:
        y = _wrong_shape(x)
    with pytest.raises(GradientShapeError) as e:
        tape.gradient(y, x)
    msg = str(e.value)
    assert "_wrong_shape_grad" in msg and "test_tape.py:" in msg
    assert "'TapeTestWrongShape'" in msg and "input 0 ('x')" in msg
    assert "(3,)" in msg and "(2, 3)" in msg


def test_wrong_dtype_gradient_error():
    x = tg.Variable(np.ones(3))
    with tg.GradientTape() as tape:
        y = _wrong_dtype(x)
    with pytest.raises(GradientShapeError, match="dtype float32 .* has dtype float64"):
        tape.gradient(y, x)


def test_wrong_number_of_gradients_error():
    x = tg.Variable(1.0)
    with tg.GradientTape() as tape:
        y = _two_grads(x)
    with pytest.raises(GradientCountError, match="returned 2 gradient\\(s\\) for 1 input"):
        tape.gradient(y, x)


def test_op_without_gradient_error():
    x = tg.Variable(1.0)
    with tg.GradientTape() as tape:
        y = _no_grad(x)
    with pytest.raises(NotDifferentiableError, match="RegisterGradient\\('TapeTestNoGrad'\\)"):
        tape.gradient(y, x)


def test_nan_gradient_propagates_visibly():
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        y = tg.sum(_nan_grad(x) * 3.0)
    g = tape.gradient(y, x).numpy()
    assert np.isnan(g).all()


def test_registering_twice_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        tg.primitive("TapeTestWrongShape")(lambda x: x)
    with pytest.raises(ValueError, match="already has a gradient"):
        tg.RegisterGradient("TapeTestWrongShape")(lambda op, dy: dy)


def test_register_gradient_before_the_op_type_is_defined():
    # TensorFlow accepts a gradient registered before its op exists (the seed article's order)
    @tg.RegisterGradient("TapeTestLateOp")
    def _grad(op, dy):
        return 3.0 * dy

    entry = tg.registered_ops()["TapeTestLateOp"]
    assert not entry.defined and "never defined" in repr(entry)
    with pytest.raises(LookupError, match="'TapeTestLateOp' has a registered gradient but was "
                                          "never defined with tg.primitive"):
        with tg.gradient_override_map({"TapeTestLateOp": "Identity"}):
            pass

    @tg.primitive("TapeTestLateOp")
    def late(x):
        return x * 2.0

    assert tg.registered_ops()["TapeTestLateOp"].defined
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = late(x)
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 3.0])


def test_gradient_override_map_works_eagerly():
    x = tg.Variable([-1.0, 2.0])
    with tg.GradientTape() as tape:
        with tg.gradient_override_map({"Square": "Identity"}):
            y = tg.sum(tg.square(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 1.0])
    with tg.GradientTape() as tape:
        y = tg.sum(tg.square(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [-2.0, 4.0])


def test_gradient_override_map_rejects_unknown_types():
    with pytest.raises(LookupError, match="unknown op type 'Sqaure'.*Did you mean 'Square'"):
        with tg.gradient_override_map({"Sqaure": "Identity"}):
            pass


def test_operation_record_attributes():
    seen = {}

    @tg.primitive("TapeTestAttrs")
    def scale(x, *, factor):
        return x * factor

    @tg.RegisterGradient("TapeTestAttrs")
    def _scale_grad(op, dy):
        seen["type"], seen["factor"] = op.type, op.get_attr("factor")
        seen["n_in"], seen["n_out"] = len(op.inputs), len(op.outputs)
        with pytest.raises(KeyError, match="has no attribute 'nope'"):
            op.get_attr("nope")
        return dy * op.get_attr("factor")

    x = tg.Variable(1.0)
    with tg.GradientTape() as tape:
        y = scale(x, factor=4.0)
    assert float(tape.gradient(y, x)) == 4.0
    assert seen == {"type": "TapeTestAttrs", "factor": 4.0, "n_in": 1, "n_out": 1}


# --- memory -------------------------------------------------------------------------------------
def test_training_step_leaves_no_tensors_alive_without_gc():
    w = tg.Variable(np.ones((4, 3)))
    x = tg.constant(np.ones((2, 4)))
    gc.collect()
    gc.disable()
    try:
        refs = []
        with tg.GradientTape() as tape:
            h = tg.tanh(tg.sum(x[:, :, None] * w, axis=1))
            loss = tg.sum(h * h)
            refs += [weakref.ref(h), weakref.ref(loss)]
        grad = tape.gradient(loss, w)
        refs.append(weakref.ref(grad))
        rec = weakref.ref(tape)
        del tape, h, loss, grad
        assert rec() is None
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_persistent_tape_memory_freed_with_tape():
    x = tg.Variable(np.ones(5))
    gc.disable()
    try:
        with tg.GradientTape(persistent=True) as tape:
            y = tg.exp(x)
            z = tg.sum(y)
        tape.gradient(z, x)
        ry = weakref.ref(y)
        del y, z
        assert ry() is not None  # still held by the persistent tape's records
        del tape
        assert ry() is None
    finally:
        gc.enable()


def test_gradient_structures_are_pytrees_with_none_cotangents_allowed():
    x, y = tg.constant(2.0), tg.constant(3.0)
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([x, y])
        a, b = x * y, x + y
    grads = tape.gradient([a, b], {"y": y, "x": [x]}, output_gradients=[None, tg.constant(2.0)])
    # a None output gradient stands for ones, as in TensorFlow
    assert float(grads["y"]) == 2.0 + 2.0 and float(grads["x"][0]) == 3.0 + 2.0


def test_gradient_sources_and_targets_may_be_namedtuples():
    # a namedtuple was rebuilt with type(x)(generator): "P.__new__() missing 1 required
    # positional argument"; TensorFlow's nest (and JAX) keep the namedtuple
    import collections

    P = collections.namedtuple("P", "a b")
    a, b = tg.constant([1.0, 2.0]), tg.constant(3.0)
    with tg.GradientTape() as tape:
        tape.watch([a, b])
        y = P(tg.sum(a * b), a * a)
    g = tape.gradient(y, P(a, b))
    assert type(g) is P
    np.testing.assert_array_equal(g.a.numpy(), [3.0 + 2.0, 3.0 + 4.0])  # b + 2a
    assert float(g.b) == 3.0  # sum(a)


def test_watch_of_a_structure_names_the_path_of_a_leaf_that_is_not_a_tensor():
    # the error said "got NoneType" without saying where; TensorFlow's watch flattens with
    # nest.flatten (None a leaf) and raises ValueError too
    with tg.GradientTape() as tape:
        with pytest.raises(ValueError, match=r"got NoneType at x\['b'\]\[1\] of the structure "
                                             r"x given; .* or leave it out"):
            tape.watch({"a": tg.constant(1.0), "b": (tg.constant(2.0), None)})
        with pytest.raises(ValueError, match=r"got float; convert it with tg.constant"):
            tape.watch(3.0)
