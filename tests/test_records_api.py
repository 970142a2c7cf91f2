"""The public, read-only records API: ``tape.operations`` and ``OperationView``."""
import gc
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _records


def _forward():
    x = tg.constant([[1.0, 2.0]])
    w = tg.Variable([[0.5], [0.25]], name="w")
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tg.sum(tg.exp(x @ w))
    return tape, x, w, y


def test_operations_describe_what_was_recorded():
    tape, x, w, y = _forward()
    ops = tape.operations
    assert [op.type for op in ops] == ["MatMul", "Exp", "Sum"]
    mm, ex, sm = ops
    assert mm.input_shapes == ((1, 2), (2, 1)) and mm.output_shapes == ((1, 1),)
    assert mm.input_dtypes == (np.dtype("float64"), np.dtype("float64"))
    assert mm.input_ids == (x.id, w.id)
    assert ex.input_ids == mm.output_ids and sm.input_ids == ex.output_ids
    assert sm.output_ids == (y.id,) and sm.floating_output_ids == (y.id,)
    assert mm.param_names == ("x1", "x2")
    assert mm.gradient_type == "MatMul" and not mm.is_overridden and not mm.is_custom
    assert mm.gradient_source.startswith("_matmul_grad (") and "products.py:" in mm.gradient_source
    assert mm.differentiable and not mm.surrogate
    assert mm.name == f"MatMul_{mm.output_ids[0]}"
    assert dict(sm.attrs) == {"axis": None, "dtype": None, "keepdims": False}
    assert tape.traced_ids >= {x.id, w.id, y.id}
    assert not tape.released


def test_records_keep_only_what_the_gradient_reads():
    tape, x, w, y = _forward()
    mm, ex, sm = tape.operations
    assert (mm.reads, ex.reads, sm.reads) == ("inputs", "outputs", "none")
    assert isinstance(mm.inputs[0], tg.Tensor) and isinstance(mm.outputs[0], _records.Dropped)
    assert isinstance(ex.inputs[0], _records.Dropped) and isinstance(ex.outputs[0], tg.Tensor)
    dropped = ex.inputs[0]
    assert dropped.shape == (1, 1) and dropped.ndim == 2 and dropped.size == 1
    with pytest.raises(RuntimeError, match=r"used the value of a tensor \(shape \(1, 1\), dtype "
                                           "float64\\) that its op's record did not keep"):
        dropped.numpy()
    g = tape.gradient(y, [x, w])  # the gradients need nothing that was dropped
    e = np.exp(0.5 + 0.5)
    np.testing.assert_allclose(g[0].numpy(), [[0.5 * e, 0.25 * e]])
    np.testing.assert_allclose(g[1].numpy(), [[e], [2 * e]])


def test_a_dropped_input_is_freed():
    x = tg.constant(np.ones(512))
    with tg.GradientTape() as tape:
        tape.watch(x)
        h = x * 2.0  # the Mul record keeps x (its gradient reads it), not h
        y = tg.exp(h)
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None  # only the Exp record held h, and it keeps a placeholder
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 2.0 * np.exp(2.0) * np.ones(512))


def test_a_wrong_reads_declaration_fails_with_a_clear_message():
    @tg.primitive("RecordsApiSquare")
    def square(x):
        return x * x

    @tg.RegisterGradient("RecordsApiSquare", reads="outputs")  # wrong: it reads x
    def _grad(op, dy):
        return 2.0 * op.inputs[0] * dy

    x = tg.constant([1.0, 3.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = square(x)
    with pytest.raises(RuntimeError, match="that its op's record did not keep"):
        tape.gradient(y, x)


def test_views_are_read_only():
    tape, *_ = _forward()
    op = tape.operations[0]
    with pytest.raises(AttributeError):
        op.type = "Other"
    with pytest.raises(TypeError):
        tape.operations[2].attrs["axis"] = 0


def test_view_gradient_runs_the_gradient_function_validated():
    tape, x, w, y = _forward()
    mm = tape.operations[0]
    dy = tg.constant([[2.0]])
    gx, gw = mm.gradient(dy)
    np.testing.assert_allclose(gx.numpy(), [[1.0, 0.5]])
    np.testing.assert_allclose(gw.numpy(), [[2.0], [4.0]])
    assert mm.gradient(dy, needed=[1])[0] is None


def test_view_forward_replays_the_op():
    tape, *_ = _forward()
    sm = tape.operations[2]
    np.testing.assert_allclose(sm.forward(tg.constant([[1.0, 2.0]])).numpy(), 3.0)


def test_custom_and_overridden_ops_are_marked():
    @tg.custom_gradient
    def scale(x):
        return x * 2.0, lambda dy: dy * 3.0

    v = tg.Variable([1.0])

    @tg.custom_gradient
    def with_var(x):
        def grad(dy, variables):
            return dy * v, [dy * x]
        return x * v, grad

    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        a = scale(x)
        with tg.gradient_override_map({"Sin": "Identity"}):
            b = tg.sin(a)
        with_var(b)
    cg, sin, cv = tape.operations
    assert cg.is_custom and cg.type == "CustomGradient:scale" and not cg.is_overridden
    assert cg.forward_function.__name__ == "scale"
    np.testing.assert_allclose(cg.forward(tg.constant([5.0])).numpy(), [10.0])
    assert sin.is_overridden and sin.type == "Sin" and sin.gradient_type == "Identity"
    assert cv.variables == (v,) and cv.param_names[-1].startswith("variables[0]")


def test_released_tape_has_no_operations():
    tape, x, w, y = _forward()
    plain = tg.GradientTape()
    with plain:
        plain.watch(x)
        z = x * 2.0
    plain.gradient(z, x)
    assert plain.released and plain.operations == ()
    assert len(tape.operations) == 3


def test_backward_state_names_the_running_gradient():
    seen = []

    @tg.custom_gradient
    def f(x):
        def grad(dy):
            seen.append(_records.backward_state())
            return dy
        return x * 1.0, grad

    x = tg.constant([1.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    tape.gradient(y, x)
    assert seen[0][0] is tape
    assert _records.backward_state() == (None, None)


def test_the_record_of_a_gradient_computed_on_raw_arrays_says_it_cannot_be_replayed():
    @tg.custom_gradient
    def f(x):
        return x * x, lambda dy: dy * tg.constant(2.0 * x.numpy())  # raw arrays: once only

    x = tg.constant([1.0, 2.0])
    with tg.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with tg.GradientTape() as inner:
            inner.watch(x)
            y = tg.sum(f(x))
        g = inner.gradient(y, x)
    np.testing.assert_array_equal(g.numpy(), [2.0, 4.0])
    (record,) = [op for op in outer.operations if op.type.startswith("OnceDifferentiable")]
    with pytest.raises(tg.errors.NotDifferentiableError,
                       match=r"OnceDifferentiable\(CustomGradient:f\) cannot be replayed: it is "
                             "the record of a gradient computed on raw arrays"):
        record.forward(x)
    with pytest.raises(tg.errors.NotDifferentiableError, match="cannot differentiate the "
                                                               "gradient of op type"):
        outer.gradient(g, x)
