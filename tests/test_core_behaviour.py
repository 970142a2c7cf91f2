"""Behaviour of the core that the rest of the suite did not pin down.

Found by the sampled mutation test (``benchmarks/mutation_sample.py``): each test here fails
on a mutant of the core that every other test let through. Grouped by module.
"""
import gc
import re

import array_api_strict as xs
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _hooks


# --- _hooks ------------------------------------------------------------------------------------
def test_a_hook_is_forgotten_when_its_tensor_dies():
    t = tg.constant([1.0, 2.0]) * 2.0
    t.register_hook(lambda g: None)
    key = t.id
    assert key in _hooks.HOOKS
    del t
    gc.collect()
    assert key not in _hooks.HOOKS


# --- _views ------------------------------------------------------------------------------------
def test_operation_view_dtypes_are_numpy_dtypes_for_tensors_of_another_backend():
    x = tg.constant(xs.asarray([1.0, 2.0], dtype=xs.float32))
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = x * x
        tg.astype(x, tg.int16)
    (mul, cast) = tape.operations
    assert mul.input_dtypes == (np.dtype(np.float32), np.dtype(np.float32))
    assert mul.output_dtypes == (np.dtype(np.float32),)
    assert mul.input_shapes == ((2,), (2,))
    assert cast.input_dtypes == (np.dtype(np.float32),)
    assert cast.output_dtypes == (np.dtype(np.int16),)
    assert type(y._value).__module__.startswith("array_api_strict")


# --- _registry ---------------------------------------------------------------------------------
class _ShapeOnly:
    shape = (2,)


class _DtypeOnly:
    dtype = np.dtype(np.float64)


@pytest.mark.parametrize("result", [_ShapeOnly, _DtypeOnly], ids=["no dtype", "no shape"])
def test_a_forward_result_needs_both_a_shape_and_a_dtype(result):
    op_type = f"CoreBehaviour{result.__name__}"

    @tg.primitive(op_type)
    def forward(x, /):
        return result()

    with pytest.raises(TypeError, match=f"op type '{op_type}' returned a {result.__name__}"):
        forward(tg.constant([1.0, 2.0]))


def test_a_two_input_primitive_with_two_outputs_returns_both_outside_a_tape():
    @tg.primitive("CoreBehaviourSumAndDifference")
    def sum_and_difference(x1, x2, /):
        return x1 + x2, x1 - x2

    s, d = sum_and_difference(tg.constant([3.0, 5.0]), tg.constant([1.0, 2.0]))
    assert isinstance(s, tg.Tensor) and isinstance(d, tg.Tensor) and s.id != d.id
    np.testing.assert_array_equal(s.numpy(), [4.0, 7.0])
    np.testing.assert_array_equal(d.numpy(), [2.0, 3.0])


# --- _tensor -----------------------------------------------------------------------------------
def test_assign_add_and_sub_take_a_list_in_the_variables_dtype():
    v = tg.Variable(np.array([1, 2], dtype=np.int8))
    # 300 does not fit int8: refused like the Python int 300, not wrapped around
    with pytest.raises(OverflowError):
        v.assign_add(300)
    with pytest.raises(OverflowError):
        v.assign_add([300, 0])
    with pytest.raises(OverflowError):
        v.assign_sub([0, 300])
    np.testing.assert_array_equal(v.numpy(), [1, 2])
    v.assign_add([1, 1])
    v.assign_sub((2, 0))
    assert v.dtype == np.int8
    np.testing.assert_array_equal(v.numpy(), [0, 3])


# --- custom_gradient ---------------------------------------------------------------------------
def test_the_gradient_of_a_single_variable_may_be_returned_without_a_list():
    w = tg.Variable([1.0, 2.0, 3.0], name="w")

    @tg.custom_gradient
    def dot_w(x):
        def grad(dy, variables):
            return dy * w, dy * x  # one Variable: its gradient bare, not [dy * x]

        return tg.sum(x * w), grad

    x = tg.constant([4.0, 5.0, 6.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = dot_w(x)
    gx, gw = tape.gradient(y, [x, w])
    np.testing.assert_array_equal(gx.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(gw.numpy(), [4.0, 5.0, 6.0])


# --- ops.elementwise ---------------------------------------------------------------------------
def test_imag_of_a_real_tensor_is_zeros_on_every_backend():
    # array-api-strict's own imag rejects real input; tapegrad follows NumPy everywhere
    x = tg.constant(xs.asarray([1.5, -2.0], dtype=xs.float32))
    y = tg.imag(x)
    assert type(y._value).__module__.startswith("array_api_strict")
    assert y.dtype == tg.float32
    np.testing.assert_array_equal(np.asarray(y._value), [0.0, 0.0])
    np.testing.assert_array_equal(tg.imag(tg.constant([1.5, -2.0])).numpy(), [0.0, 0.0])


# --- test (tg.test) ----------------------------------------------------------------------------
def _projected(message):
    m = re.search(r"projected check <u, J v>: analytic = (\S+), numeric = (\S+);", message)
    return float(m.group(1)), float(m.group(2))


def test_check_gradients_projected_numeric_value_is_the_directional_derivative():
    @tg.custom_gradient
    def square(x):
        def grad(dy):
            return dy * 4.0 * x  # twice the derivative 2 x

        return x * x, grad

    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(square, [np.array([0.5, -1.0, 2.0])])
    analytic, numeric = _projected(str(info.value))
    # the analytic projection <u, J v> is twice the numeric one, which is a central difference
    assert abs(numeric) > 1.0
    assert analytic == pytest.approx(2.0 * numeric, rel=1e-6)


def test_check_custom_gradient_uses_the_given_step():
    @tg.custom_gradient
    def cube(x):
        def grad(dy):
            return dy * 3.0 * x * x

        return x * x * x, grad

    x = np.array([1.0])
    assert tg.test.check_custom_gradient(cube, [x]).failed == []
    # the central difference of x^3 with step h is 3 x^2 + h^2: 3.25 at x = 1, h = 0.5
    with pytest.raises(AssertionError, match=r"derivative \(central difference\) 3\.25\b"):
        tg.test.check_custom_gradient(cube, [x], eps=0.5)


def test_check_gradients_names_only_the_surrogate_ops_on_the_path():
    @tg.custom_gradient(surrogate=True)
    def ste_round(x):
        def grad(dy):
            return dy

        return tg.round(x), grad

    x = np.array([0.3, 1.6, -0.7])
    with pytest.warns(tg.test.SurrogateGradientWarning) as record:
        tg.test.check_gradients(lambda t: tg.sum(ste_round(t) * t), [x])
    msg = str(record[0].message)
    assert "passes through the declared surrogate gradient(s) CustomGradient:ste_round, which " \
        "differ from the derivative by design" in msg


def test_check_gradients_says_that_a_nan_or_infinite_value_never_passes():
    @tg.custom_gradient
    def inf_gradient(x):
        def grad(dy):
            return dy * 0.0 + np.inf

        return x * 1.0, grad

    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(inf_gradient, [np.array([1.0, 2.0])])
    lines = str(info.value).splitlines()
    assert lines[2].startswith("  analytic = inf, numeric = 1,")
    assert lines[3] == ("  a NaN or infinite value never passes: the function or its gradient "
                        "overflows or leaves its domain at these inputs or within eps of them")
    assert lines[4].startswith("  projected check <u, J v>: analytic = ")
