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


# --- _tape -------------------------------------------------------------------------------------
def test_a_non_persistent_tape_stops_recording_once_used():
    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = x * x
        assert float(tape.gradient(y, x)) == 4.0
        x * 3.0  # after the gradient: not recorded (TensorFlow's behaviour)
        with pytest.raises(ValueError, match="this tape is not recording"):
            with tape.stop_recording():
                pass
    assert tape.operations == ()
    with pytest.raises(RuntimeError, match=r"^GradientTape\.gradient: a non-persistent "
                                           r"GradientTape can only be used"):
        tape.gradient(y, x)


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


def test_operation_view_names_the_inputs_of_a_variadic_op():
    a = tg.constant([1.0])
    with tg.GradientTape() as tape:
        tape.watch(a)
        tg.concat([a, a, a])
    (concat,) = tape.operations
    assert concat.param_names == ("arrays", "arrays[1]", "arrays[2]")


# --- _validation -------------------------------------------------------------------------------
def test_a_gradient_dict_with_unknown_names_of_any_type_is_a_gradient_count_error():
    @tg.primitive("CoreBehaviourProduct")
    def product(x1, x2, /):
        return x1 * x2

    @tg.RegisterGradient("CoreBehaviourProduct")
    def product_grad(op, dy):
        return {"x1": dy, "bogus": dy, 0: dy}

    a, b = tg.constant([1.0]), tg.constant([2.0])
    with tg.GradientTape() as tape:
        tape.watch([a, b])
        y = product(a, b)
    with pytest.raises(tg.errors.GradientCountError,
                       match="returned gradients for 0, 'bogus', which are not inputs; its inputs "
                             "are 'x1', 'x2'"):
        tape.gradient(y, [a, b])


# --- _tensor -----------------------------------------------------------------------------------
def test_one_helper_for_each_conversion_and_dtype_test():
    # issue 30 item 10: "as a Tensor" is tg.convert_to_tensor (_tensor.wrapped for a backend
    # array or tracer kept as is) and "is floating" is _backend.is_floating, with no module's
    # private copy beside them
    import pathlib

    src = pathlib.Path(tg.__file__).parent
    copies = re.compile(r"^def (_tensor|_floating|_is_floating|_floating_dtype|_is_floating_dtype"
                        r"|_is_float|is_float)\(|dtype\.kind (not )?in \"fc\"", re.M)
    found = [f"{p.relative_to(src)}: {m.group(0)}" for p in sorted(src.rglob("*.py"))
             for m in copies.finditer(p.read_text())]
    assert found == []
    t = tg.constant([1.0])
    assert tg._tensor.wrapped(t) is t
    raw = np.array([1, 2])
    w = tg._tensor.wrapped(raw)
    assert type(w) is tg.Tensor and w._value is raw  # wrapped, not converted or copied


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


def test_assign_add_converts_a_numpy_delta_to_the_backend_of_the_variable():
    v = tg.Variable(xs.asarray([1.0, 2.0], dtype=xs.float32))
    v.assign_add(np.array([0.5, 0.25]))
    v.assign_sub(np.float64(1.0))
    assert type(v._value).__module__.startswith("array_api_strict")
    assert v.dtype == tg.float32
    np.testing.assert_array_equal(np.asarray(v._value), [0.5, 1.25])


def test_numpy_ufuncs_on_tensors_keep_python_scalars_weak():
    t = tg.constant(np.array([1.0, 2.0], dtype=np.float32))
    r = np.maximum(t, 1.5)  # a Python float does not promote float32 (NEP 50), as on arrays
    assert type(r) is np.ndarray and r.dtype == np.float32
    np.testing.assert_array_equal(r, [1.5, 2.0])


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


def test_a_gradient_function_whose_signature_cannot_be_read_gets_the_variables():
    w = tg.Variable(3.0, name="w")

    class Grad:
        __signature__ = "not a signature"  # inspect.signature raises TypeError

        def __call__(self, dy, variables=None):
            assert [v.name for v in variables] == ["w"]
            return dy * w, [dy * 10.0]

    @tg.custom_gradient
    def scale(x):
        return x * w, Grad()

    x = tg.Variable(2.0)
    with tg.GradientTape() as tape:
        y = scale(x)
    gx, gw = tape.gradient(y, [x, w])
    assert (float(gx), float(gw)) == (3.0, 10.0)


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


def test_check_gradients_names_the_function_by_its_qualified_name():
    @tg.custom_gradient
    def square(x):
        def grad(dy):
            return dy * 3.0 * x

        return x * x, grad

    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(square, [np.array([1.0, 2.0])])
    text = str(info.value)
    assert text.startswith(f"check_gradients({square.__qualname__}): the gradient with respect "
                           "to input 0 (shape (2,)) does not match central differences.")
    lines = text.splitlines()
    assert lines[4] == "  2 of 4 Jacobian elements outside the tolerance:"
    assert lines[5].split() == ["input", "index", "output", "index", "analytic", "numeric", "abs",
                                "err", "rel", "err"]
    assert lines[5].startswith("    input index    output index ")


def test_check_gradients_locates_elements_of_a_complex_output_as_real_and_imaginary_parts():
    @tg.custom_gradient
    def complex_square(x):
        def grad(dy):
            return tg.real(dy) * 0.0  # wrong: zero

        return tg.astype(x * x, tg.complex128) * (1 + 2j), grad

    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(complex_square, [np.array([1.0, 2.0])])
    lines = str(info.value).splitlines()
    # output 1 is 4 (1 + 2j): d Im / dx1 = 8 is the worst element, (1, 1) = (element, imag)
    assert lines[1] == "  worst element: input 0 at index (1,), the output at index (1, 1)"
    assert lines[6].split()[:4] == ["(1,)", "(1,", "1)", "0"]
    assert lines[7].split()[:4] == ["(1,)", "(1,", "0)", "0"]


def test_check_gradients_loosens_the_default_tolerances_by_ten_per_order():
    # the central differences of exp at 5 with step 5.5e-3 are off by 5.04e-6 relative (at both
    # orders): within the default rtol 1e-5 of order 1 and 1e-4 of order 2, not within 1e-6
    tg.test.check_gradients(tg.exp, [np.array([5.0])], order=2, eps=5.5e-3)
    with pytest.raises(AssertionError, match=r"rel err\n    \(0,\) .* 5\.04e-06"):
        tg.test.check_gradients(tg.exp, [np.array([5.0])], eps=5.5e-3, rtol=1e-6)


def test_a_non_linear_surrogate_gradient_is_not_said_to_agree_with_the_derivative():
    @tg.custom_gradient(surrogate=True)
    def almost_square(x):
        def grad(dy):
            return dy * 2.0 * x + 1e-6 * x  # the derivative, plus a tiny term without dy

        return x * x, grad

    report = tg.test.check_custom_gradient(almost_square, [np.array([1.0, 2.0])])
    text = str(report)
    assert "CustomGradient:almost_square, gradient " in text
    assert "(declared surrogate=True)" in text
    assert "warning: not linear in the upstream gradient dy" in text
    assert "A gradient must be a vector-Jacobian product: every term is scaled by dy (a term " \
        "without dy, like `+ 0.1 * x`, is not part of a gradient); reported only" in text
    assert "yet it agrees with the derivative" not in text
    assert report.ops[0].status == "surrogate"


def test_the_surrogate_warning_leaves_out_a_report_without_surrogates():
    round_ste = tg.straight_through(tg.round)  # a built-in surrogate: not in the report

    @tg.custom_gradient
    def square(x):
        def grad(dy):
            return dy * 2.0 * x

        return x * x, grad

    with pytest.warns(tg.test.SurrogateGradientWarning) as record:
        tg.test.check_gradients(lambda t, s: tg.sum(round_ste(t) * t) + tg.sum(square(s)),
                                [np.array([0.3, 1.6, -0.7]), np.array([1.0, 2.0])])
    (warning,) = record
    msg = str(warning.message)
    assert "surrogate gradient(s) CustomGradient:straight_through_round, which differ" in msg
    assert "custom gradients met by" not in msg  # square's report: all passed, no surrogate


def test_extension_points_are_provided_once_by_name():
    from tapegrad import _structural

    points = _structural.extensions
    assert all(getattr(points, name) is not None for name in
               ("raw_access", "gradient_call", "jacobian", "batch_jacobian", "host_callback",
                "explain", "to_dot", "register_hook", "conversion", "to_host", "vectorize"))
    with pytest.raises(TypeError, match="'explainer' is not an extension point of the core; "
                                        "they are raw_access, gradient_call, jacobian"):
        _structural.extend(explainer=print)
    with pytest.raises(RuntimeError, match="the extension point 'explain' is already provided"):
        _structural.extend(explain=print)
