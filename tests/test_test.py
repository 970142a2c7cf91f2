"""Tests of tapegrad.test: compute_gradient, compute_gradient_error, check_gradients."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import NotDifferentiableError
from tapegrad._backend import namespace as _ns


# --- throw-away primitives with deliberately wrong gradients (registered once, module level) ----
@tg.primitive("TestWrongGrad")
def _wrong_square(x):
    return _ns(x).multiply(x, x)


@tg.RegisterGradient("TestWrongGrad")
def _wrong_square_grad(op, dy):
    # right (2 x) except where x > 1.5, where it is one too large
    x = op.inputs[0]
    return dy * (2.0 * x) + tg.where(x > 1.5, dy, tg.zeros_like(dy))


@tg.primitive("TestRawCube")
def _raw_cube(x):
    return x * x * x


@tg.RegisterGradient("TestRawCube")
def _raw_cube_grad(op, dy):
    # right values, but computed on raw arrays: an outer tape sees a constant (zero 2nd derivative)
    x = op.inputs[0].numpy()
    return tg.constant(3.0 * x * x * dy.numpy())


@tg.primitive("TestTwoOutputs")
def _two_outputs(x):
    xp = _ns(x)
    return xp.sin(x), xp.cos(x)


@tg.RegisterGradient("TestTwoOutputs")
def _two_outputs_grad(op, dsin, dcos):
    x = op.inputs[0]
    return dsin * tg.cos(x) + dcos * tg.sin(x)  # wrong sign of the cos part: -sin(x) is right


def _numbers(message, name):
    m = re.search(rf"{name} = (\S+?),", message)
    return float(m.group(1))


# --- compute_gradient --------------------------------------------------------------------------
def test_compute_gradient_square_is_diagonal_2x():
    x = np.array([1.0, -2.0, 3.0])
    (jt,), (jn,) = tg.test.compute_gradient(lambda t: t ** 2, [x])
    np.testing.assert_allclose(jt, np.diag(2 * x))
    np.testing.assert_allclose(jn, np.diag(2 * x), rtol=1e-8, atol=1e-9)


def test_compute_gradient_layout_rows_are_outputs():
    # y = A x with A of shape (2, 3): TF2 layout puts y (size 2) on rows, x (size 3) on columns
    a = np.arange(6.0).reshape(2, 3) - 2.5
    x = np.array([0.3, -0.7, 1.1])
    (jt,), (jn,) = tg.test.compute_gradient(lambda t: tg.sum(a * t, axis=1), [x])
    assert jt.shape == (2, 3) and jn.shape == (2, 3)
    np.testing.assert_allclose(jt, a)
    np.testing.assert_allclose(jn, a, atol=1e-8)


def test_compute_gradient_two_inputs_with_broadcast():
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(2, 3)), rng.normal(size=(3,))
    jt, jn = tg.test.compute_gradient(lambda a, b: a * b, [x, w])
    # d(x*w)[i, j] / dx[k, l] = w[j] delta_ik delta_jl ; d(x*w)[i, j] / dw[l] = x[i, j] delta_jl
    expect_x = np.diag(np.tile(w, 2))
    expect_w = np.zeros((6, 3))
    for i in range(2):
        for j in range(3):
            expect_w[i * 3 + j, j] = x[i, j]
    assert [j.shape for j in jt] == [(6, 6), (6, 3)]
    np.testing.assert_allclose(jt[0], expect_x)
    np.testing.assert_allclose(jt[1], expect_w)
    np.testing.assert_allclose(jn[0], expect_x, atol=1e-8)
    np.testing.assert_allclose(jn[1], expect_w, atol=1e-8)


def test_compute_gradient_dtypes_and_scalars():
    (jt,), (jn,) = tg.test.compute_gradient(lambda t: t * t, [3.0])  # TF's docstring example
    assert jt.dtype == np.float64 and jt.shape == (1, 1)
    assert jt[0, 0] == 6.0 and abs(jn[0, 0] - 6.0) < 1e-8
    x32 = np.array([0.5, 1.5], dtype=np.float32)
    (jt,), (jn,) = tg.test.compute_gradient(tg.exp, [x32])
    assert jt.dtype == np.float32 and jn.dtype == np.float32
    np.testing.assert_allclose(jn, np.diag(np.exp(x32)), rtol=1e-3)


def test_compute_gradient_unconnected_input_gives_zeros_and_empty_output():
    x, z = np.array([1.0, 2.0]), np.array([5.0, 6.0, 7.0])
    jt, jn = tg.test.compute_gradient(lambda a, b: tg.sin(a), [x, z])
    assert jt[1].shape == (2, 3) and not jt[1].any() and not jn[1].any()
    jt, jn = tg.test.compute_gradient(lambda a: a, [np.zeros((0, 2))])
    assert jt[0].shape == (0, 0) and jn[0].shape == (0, 0)


def test_compute_gradient_errors():
    with pytest.raises(ValueError, match="list or tuple"):
        tg.test.compute_gradient(tg.sin, np.ones(3))
    with pytest.raises(TypeError, match="argument 0 has dtype int"):
        tg.test.compute_gradient(lambda a: a * 1.0, [np.arange(3)])
    with pytest.raises(TypeError, match="single Tensor"):
        tg.test.compute_gradient(lambda a: (a, a), [np.ones(2)])


def test_compute_gradient_error_small_for_correct_ops():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(0.5, 2.0, size=(3, 2)), rng.uniform(-1, 1, size=(2,))
    assert tg.test.compute_gradient_error(lambda a, b: tg.log(a) * tg.tanh(b), [x, y]) < 1e-8
    assert tg.test.compute_gradient_error(tg.sin, [x.astype(np.float32)]) < 1e-2
    assert tg.test.compute_gradient_error(lambda a: a, [np.zeros(0)]) == 0.0


def test_compute_gradient_error_large_for_wrong_gradient():
    x = np.array([1.0, 2.0])  # 2.0 > 1.5: that element's gradient is 1 too large
    assert abs(tg.test.compute_gradient_error(_wrong_square, [x]) - 1.0) < 1e-6


# --- check_gradients: passing cases --------------------------------------------------------------
def test_check_gradients_passes_correct_functions_to_third_order():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(3, 4)), rng.uniform(0.5, 2, size=(4,))
    assert tg.test.check_gradients(lambda x, y: tg.sum(tg.sin(x) / y, axis=0), [a, b],
                                   order=3) is None


def test_check_gradients_tuple_outputs_scalars_empty_and_unused_inputs():
    rng = np.random.default_rng(3)

    def f(x, s, e, unused, n, k):
        assert n == 3 and k.dtype == np.int64  # passed through unchanged
        return tg.exp(x) * s, tg.sum(e) + s, x > 0.0  # the boolean output is ignored

    tg.test.check_gradients(f, [rng.normal(size=(2, 3)), np.array(0.7), np.zeros((0, 4)),
                                rng.normal(size=(2,)), 3, np.arange(3)], order=2)


def test_check_gradients_promotes_float32_to_float64():
    seen = []

    def f(x):
        seen.append(x.dtype)
        return tg.tanh(x) ** 3

    tg.test.check_gradients(f, [np.linspace(-1, 1, 5, dtype=np.float32)], order=2)
    assert set(seen) == {np.dtype(np.float64)}


def test_check_gradients_accepts_float32_valued_functions():
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    tg.test.check_gradients(lambda t: tg.exp(tg.astype(t, tg.float32)) * 3.0, [x], order=2)
    tg.test.check_gradients(lambda t: tg.sin(t), [tg.constant(x, dtype=tg.float32)], order=2)


def test_check_gradients_accepts_tensors_and_variables():
    v = tg.Variable([0.3, 0.6])
    tg.test.check_gradients(lambda a, b: a * tg.cos(b), [v, tg.constant([1.0, 2.0])], order=2)


# --- check_gradients: failures -------------------------------------------------------------------
def test_check_gradients_reports_wrong_primitive_gradient():
    b = np.array([[0.1, 0.2, 0.3], [0.4, 1.9, 0.5]])  # only b[1, 1] > 1.5
    a = np.full((2, 3), 1.0)
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(lambda x, y: x * _wrong_square(y), [a, b])
    msg = str(info.value)
    assert "input 1" in msg and "index (1, 1)" in msg
    assert abs(_numbers(msg, "analytic") - 4.8) < 1e-9   # 2 * 1.9 + 1
    assert abs(_numbers(msg, "numeric") - 3.8) < 1e-6    # 2 * 1.9
    assert "tolerance" in msg
    tol = float(re.search(r"tolerance = (\S+)", msg).group(1))
    assert abs(tol - (1e-5 + 1e-5 * 3.8)) < 1e-7


def test_check_gradients_reports_wrong_custom_gradient():
    @tg.custom_gradient
    def bad_exp(x):
        y = tg.exp(x)

        def grad(dy):
            return dy * y * tg.where(x < 0.0, tg.ones_like(x), 1.5)  # wrong (x1.5) where x >= 0

        return y, grad

    x = np.array([-1.0, -0.5, 0.25, -2.0])
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(lambda t: tg.sum(bad_exp(t)), [x])
    msg = str(info.value)
    assert "input 0" in msg and "index (2,)" in msg
    assert abs(_numbers(msg, "analytic") - 1.5 * np.exp(0.25)) < 1e-9
    assert abs(_numbers(msg, "numeric") - np.exp(0.25)) < 1e-6


def test_check_gradients_names_the_wrong_output():
    x = np.array([0.4, 0.9])
    with pytest.raises(AssertionError, match=r"output 1 at index \(\d,\)"):
        tg.test.check_gradients(_two_outputs, [x])


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_check_gradients_catches_nan_gradient():
    @tg.custom_gradient
    def nan_grad(x):
        def grad(dy):
            return dy * tg.log(x - 10.0)  # NaN for every sample

        return x * 1.0, grad

    with pytest.raises(AssertionError, match="analytic = nan"):
        tg.test.check_gradients(nan_grad, [np.array([1.0, 2.0])])


def test_second_order_catches_gradient_written_on_raw_arrays():
    x = np.array([0.5, -1.0, 1.5])
    tg.test.check_gradients(_raw_cube, [x], order=1)  # the first derivative is right
    # differentiating the raw-array gradient again raises instead of giving a silent zero
    with pytest.raises(NotDifferentiableError, match="'TestRawCube'.*_raw_cube_grad .*test_test.py:"):
        tg.test.check_gradients(_raw_cube, [x], order=2)


def test_check_gradients_argument_errors():
    with pytest.raises(TypeError, match="list or tuple"):
        tg.test.check_gradients(tg.sin, np.ones(2))
    with pytest.raises(ValueError, match="order"):
        tg.test.check_gradients(tg.sin, [np.ones(2)], order=0)
    with pytest.raises(TypeError, match="not a Tensor"):
        tg.test.check_gradients(lambda x: x.numpy(), [np.ones(2)])


def test_check_gradients_tolerance_arguments_are_used():
    x = np.array([1.0, 2.0])  # analytic 5 vs numeric 4 at element 1
    tg.test.check_gradients(_wrong_square, [x], atol=1.5, rtol=0.0)
    with pytest.raises(AssertionError, match="atol=0.5"):
        tg.test.check_gradients(_wrong_square, [x], atol=0.5, rtol=0.0)


# --- check_custom_gradient: the contract of custom gradients -------------------------------------
@tg.primitive("TestSteSign")
def _ste_sign(x):
    return _ns(x).sign(x)


@tg.RegisterGradient("TestSteSign", surrogate=True)
def _ste_sign_grad(op, dy):
    return dy  # straight-through: the derivative of sign is 0 away from 0


@tg.primitive("TestScaleShapeBad")
def _scale_shape_bad(x, w):
    return _ns(x).multiply(x, w)


@tg.RegisterGradient("TestScaleShapeBad")
def _scale_shape_bad_grad(op, dy):
    x, w = op.inputs
    return dy * w, tg.sum(dy * x)  # w has shape (3,): its gradient must not be summed to 0-d


def _triple_square():
    @tg.custom_gradient
    def square(x):
        def grad(dy):
            return dy * 3.0 * x  # wrong factor: 2 x is right

        return x * x, grad

    return square


def _between(message, before, after):
    return message.split(before, 1)[1].split(after, 1)[0]


def test_check_custom_gradient_names_a_wrong_factor():
    square = _triple_square()
    x = np.array([0.5, -1.0, 2.0])
    with pytest.raises(AssertionError) as info:
        tg.test.check_custom_gradient(square, [x])
    msg = str(info.value)
    assert "FAILED    op 0: CustomGradient:square" in msg and "1 failed" in msg
    assert "does not match central differences of its forward" in msg
    assert "gradient / derivative = 1.5" in msg
    # the worst element is the largest |x|: gradient 3 x = 6, derivative 2 x = 4
    assert "input 0 ('x') at index (2,)" in msg
    worst = _between(msg, "input 0 ('x') at index (2,), output index (2,): ", ", |difference|")
    grad, derivative = (float(t.split()[-1]) for t in worst.split(", "))
    assert grad == 6.0 and abs(derivative - 4.0) < 1e-6
    assert "seed=0" in msg and "default_rng([0, n])" in msg


def test_check_gradients_blames_the_wrong_custom_gradient_by_name():
    square = _triple_square()
    x = np.array([0.5, -1.0, 2.0])
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(lambda t: tg.sum(tg.sin(t) + square(t)), [x])
    msg = str(info.value)
    # the whole function's worst element first: d/dx = cos x + 3 x vs cos x + 2 x at x = 2
    assert abs(_numbers(msg, "analytic") - (np.cos(2.0) + 6.0)) < 1e-9
    assert abs(_numbers(msg, "numeric") - (np.cos(2.0) + 4.0)) < 1e-6
    # then the custom gradient it uses, checked on its own and named
    assert "likely cause: the custom gradient of CustomGradient:square" in msg
    assert "custom gradients met by check_gradients" in msg
    assert "FAILED    op 0: CustomGradient:square" in msg


def test_check_gradients_fails_on_a_broken_contract_even_when_masked():
    square = _triple_square()  # its output is multiplied by 0: f's own gradient is right
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(lambda t: t + 0.0 * square(t), [np.array([1.0, 2.0])])
    msg = str(info.value)
    assert "breaks the gradient contract" in msg and "match central differences here" in msg
    assert "CustomGradient:square" in msg and "gradient / derivative = 1.5" in msg


def test_check_custom_gradient_catches_gradient_not_linear_in_dy():
    @tg.custom_gradient
    def custom_op(x):
        def grad(dy):
            return dy * tg.sin(x) + 0.1 * x  # the `+ 0.1 x` term does not scale with dy

        return x ** 2, grad

    x = np.array([1.0, 2.0, -0.5])
    with pytest.raises(AssertionError) as info:
        tg.test.check_custom_gradient(custom_op, [x])
    msg = str(info.value)
    assert "not linear in the upstream gradient dy" in msg and "input 0 ('x')" in msg
    # g(a dy1 + b dy2) - a g(dy1) - b g(dy2) = 0.1 x (1 - a - b) at the printed index
    a = float(_between(msg, "(a=", ","))
    b = float(_between(msg, "b=", ";"))
    index = int(_between(msg, "at index (", ",)"))
    got, expect = (float(t) for t in _between(msg, f"({index},): ", ")").split(" vs "))
    assert abs((got - expect) - 0.1 * x[index] * (1 - a - b)) < 1e-9


def test_linear_gradients_pass_and_the_report_lists_them():
    @tg.custom_gradient
    def cube(x):
        def grad(dy):
            return dy * 3.0 * x * x

        return x * x * x, grad

    def f(x, t):
        return tg.sum(cube(x)) + _threshold_free(x, t)

    def _threshold_free(x, t):
        return tg.sum(tg.sin(x * t))

    report = tg.test.check_custom_gradient(f, [np.array([0.3, -1.2]), np.array(0.7)])
    assert [(c.op_type, c.status) for c in report.ops] == [("CustomGradient:cube", "passed")]
    assert not report.failed and "1 passed" in str(report)
    # built-in ops are not custom gradients
    assert tg.test.check_custom_gradient(tg.sin, [np.ones(3)]).ops == []
    tg.test.check_gradients(f, [np.array([0.3, -1.2]), np.array(0.7)], order=2)


def test_check_custom_gradient_catches_a_wrong_shape():
    x, w = np.ones((2, 3)), np.array([1.0, 2.0, 3.0])
    with pytest.raises(AssertionError) as info:
        tg.test.check_custom_gradient(_scale_shape_bad, [x, w])
    msg = str(info.value)
    assert "FAILED    op 0: TestScaleShapeBad" in msg and "GradientShapeError" in msg
    assert "shape () for input 1 ('w'), which has shape (3,)" in msg
    # check_gradients names the op too, and quotes the tape's error
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(_scale_shape_bad, [x, w])
    msg = str(info.value)
    assert "breaks the gradient contract" in msg and "TestScaleShapeBad" in msg
    assert "the gradient check of the whole function raised GradientShapeError" in msg


def test_check_custom_gradient_catches_a_wrong_count():
    @tg.custom_gradient
    def scale(x, w):
        def grad(dy):
            return dy * w  # no gradient for w

        return x * w, grad

    with pytest.raises(AssertionError, match=r"GradientCountError: .* returned 1 gradient\(s\) "
                                             r"for 2 input\(s\)"):
        tg.test.check_custom_gradient(scale, [np.ones(2), np.ones(2)])


def _ste_round():
    @tg.custom_gradient(surrogate=True)
    def ste_round(x):
        def grad(dy):
            return dy  # straight-through estimator: the derivative of round is 0

        return tg.round(x), grad

    return ste_round


def test_surrogate_gradient_is_reported_not_failed():
    ste_round = _ste_round()
    x = np.array([0.3, 1.6, -0.7])
    report = tg.test.check_custom_gradient(ste_round, [x])
    (check,) = report.ops
    assert check.status == "surrogate" and report.failed == []
    text = str(report)
    assert "surrogate gradient of CustomGradient:ste_round: differs from the derivative by 1 " \
        in text and "as declared" in text
    assert "1 declared surrogate (reported, not failed)" in text
    # the same gradient without the declaration fails
    plain = tg.custom_gradient(ste_round.__wrapped__)
    with pytest.raises(AssertionError, match="FAILED"):
        tg.test.check_custom_gradient(plain, [x])


def test_check_gradients_passes_through_a_declared_surrogate_and_says_so():
    ste_round = _ste_round()
    x = np.array([0.3, 1.6, -0.7])
    with pytest.warns(tg.test.SurrogateGradientWarning) as record:
        assert tg.test.check_gradients(lambda t: tg.sum(ste_round(t) * t), [x], order=2) is None
    msg = str(record[0].message)
    assert "passed, with declared surrogate gradients" in msg
    assert "not failed: the gradient with respect to input 0 passes through the declared " \
        "surrogate gradient(s) CustomGradient:ste_round" in msg
    # d/dx (round(x) x) is round(x); the straight-through gradient adds x
    assert abs(_numbers(msg, "analytic") - 3.6) < 1e-9 and abs(_numbers(msg, "numeric") - 2) < 1e-6
    # an input that does not reach the surrogate is still checked
    square = _triple_square()
    with pytest.raises(AssertionError, match="input 1"):
        tg.test.check_gradients(lambda t, s: tg.sum(ste_round(t)) + tg.sum(square(s)),
                                [x, np.array([1.0, 2.0])])


def test_registered_surrogate_and_non_linear_surrogate_are_reported():
    report = tg.test.check_custom_gradient(_ste_sign, [np.array([0.5, -1.5])])
    assert [c.status for c in report.ops] == ["surrogate"]
    assert "surrogate gradient of TestSteSign: differs from the derivative by 1" in str(report)

    @tg.custom_gradient(surrogate=True)
    def custom_op(x):
        def grad(dy):
            return dy * tg.sin(x) + 0.1 * x

        return x ** 2, grad

    report = tg.test.check_custom_gradient(custom_op, [np.array([1.0, 2.0])])
    text = str(report)
    assert report.ops[0].status == "surrogate"
    assert "warning: not linear in the upstream gradient dy" in text
    assert "reported only, as declared surrogate" in text


def test_check_custom_gradient_replays_with_the_same_seed():
    square = _triple_square()

    def report(seed):
        with pytest.raises(AssertionError) as info:
            tg.test.check_custom_gradient(square, [np.array([0.5, -1.0, 2.0])], seed=seed)
        return str(info.value)

    assert report(3) == report(3)
    assert "seed=3" in report(3) and "default_rng([3, n])" in report(3)


# --- check_gradients: self-explaining reports ------------------------------------------------------
def _table_rows(msg):
    lines = msg.splitlines()
    start = next(k for k, line in enumerate(lines) if "input index" in line) + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("    ("):
            break
        rows.append(line)
    return rows


def test_failure_table_lists_the_worst_elements_with_errors():
    b = np.array([[0.1, 1.6, 0.3], [1.8, 1.9, 0.5]])  # three elements > 1.5 are one too large
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(_wrong_square, [b])
    msg = str(info.value)
    assert "3 of 36 Jacobian elements outside the tolerance:" in msg
    rows = _table_rows(msg)
    assert len(rows) == 3
    seen = set()
    for row in rows:
        index = tuple(int(t) for t in re.findall(r"\d+", row.split(")")[0]))
        analytic, numeric, abs_err, rel_err = (float(t) for t in row.split(")")[-1].split()[:4])
        seen.add(index)
        assert abs(analytic - (2 * b[index] + 1)) < 1e-6
        assert abs(numeric - 2 * b[index]) < 1e-5
        assert abs(abs_err - 1.0) < 1e-3 and abs(rel_err - 1 / (2 * b[index])) < 1e-3
    assert seen == {(0, 1), (1, 0), (1, 1)}
    assert "non-differentiable point" not in msg  # a smooth function: a real bug
    assert "promoted" not in msg
    assert "finite-difference step eps=1e-06, chosen for float64 results" in msg


def test_failure_table_keeps_the_worst_five():
    x = np.linspace(1.6, 2.5, 8)  # all 8 elements are one too large
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(_wrong_square, [x])
    msg = str(info.value)
    assert "8 of 64 Jacobian elements outside the tolerance; the worst 5:" in msg
    assert len(_table_rows(msg)) == 5


def test_kink_is_flagged_as_non_differentiable_point():
    # relu at 0: the gradient says 0, the central difference averages 0 and 3
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(lambda t: tg.nn.relu(t) * 3.0, [np.array([0.0, 1.0, -0.5])])
    msg = str(info.value)
    (row,) = _table_rows(msg)
    assert row.strip().startswith("(0,)")
    assert "kink: one-sided differences 3 (right) and 0 (left) disagree; " \
        "non-differentiable point, not necessarily a bug" in row
    # abs a tenth of a step from its kink at 0: the central difference is 0.1, the gradient 1
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(tg.abs, [np.array([1e-7, 2.0])])
    msg = str(info.value)
    assert abs(_numbers(msg, "analytic") - 1.0) < 1e-12
    assert abs(_numbers(msg, "numeric") - 0.1) < 1e-6
    assert "non-differentiable point, not necessarily a bug" in msg


def test_float32_inputs_are_promoted_and_the_report_says_so():
    x = np.array([1.0, 2.0], dtype=np.float32)
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(_wrong_square, [x])
    msg = str(info.value)
    assert "float32 inputs were promoted to float64 for this check (input 0)" in msg
    assert "eps=1e-06, chosen for float64 results" in msg
    assert abs(_numbers(msg, "analytic") - 5.0) < 1e-9  # float64 accuracy, not float32
    # a function that computes in float32 gets the float32 step
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(lambda t: _wrong_square(tg.astype(t, tg.float32)),
                                [np.array([1.0, 2.0])])
    assert "eps=0.001, chosen for float32 results" in str(info.value)


# --- traps: nothing checked, NaN and inf, tolerances, dtypes ----------------------------------------
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_compute_gradient_error_is_nan_when_a_jacobian_is_nan():
    # sqrt(-1) is NaN: its Jacobian rows are NaN, which max(0.0, nan) used to turn into 0.0
    assert np.isnan(tg.test.compute_gradient_error(tg.sqrt, [[-1.0, 4.0]]))
    # a NaN after a finite error is not dropped either (max(1.0, nan) is 1.0)
    err = tg.test.compute_gradient_error(lambda a, b: _wrong_square(a) + tg.sqrt(b),
                                         [np.array([2.0]), np.array([-1.0])])
    assert np.isnan(err)
    assert not err < 1e-3  # the usual assertion fails, as it should


def test_check_gradients_rejects_arguments_that_are_all_integer():
    square = _triple_square()  # a wrong gradient that a check on integer inputs never reached

    def f(k):
        return tg.sum(square(tg.astype(k, tg.float64)))

    for check in (tg.test.check_gradients, tg.test.check_custom_gradient):
        with pytest.raises(TypeError) as info:
            check(f, [np.array([1, 2])])
        msg = str(info.value)
        assert "none of the arguments is a floating array or Tensor (got: int64)" in msg
        assert "x.astype(np.float64)" in msg
    with pytest.raises(TypeError, match=r"\(got: float, int\)"):  # Python scalars are constants
        tg.test.check_gradients(lambda a, n: tg.sin(tg.constant(a)) * n, [0.5, 3])
    # with a floating argument beside it, an integer index stays a constant
    x, idx = np.array([0.5, -1.0, 2.0]), np.array([2, 0])
    tg.test.check_gradients(lambda t, i: tg.take(tg.sin(t), i) ** 2, [x, idx], order=2)
    with pytest.raises(AssertionError, match=r"input 0 \('x'\) at index \(2,\)"):
        tg.test.check_custom_gradient(lambda t, i: tg.take(square(t), i), [x, idx])


def test_check_gradients_rejects_functions_without_floating_outputs():
    square = _triple_square()
    x = np.array([0.5, -1.0, 2.0])
    for check in (tg.test.check_gradients, tg.test.check_custom_gradient):
        with pytest.raises(TypeError) as info:
            check(lambda t: tg.argmax(square(t)), [x])
        msg = str(info.value)
        assert "none of the outputs of the function is floating (got: int64)" in msg
        assert "check a floating quantity" in msg
        with pytest.raises(TypeError, match=r"\(got: int64, bool\)"):
            check(lambda t: (tg.argmax(t), t > 0.0), [x])


def test_compute_gradient_evaluates_f_in_each_arguments_dtype():
    seen = []

    def f(a, b):
        seen.append((a.dtype, b.dtype))
        return tg.sum(tg.exp(a)) * b

    a32, b64 = np.array([0.5, -1.0], dtype=np.float32), np.array([2.0])
    (ja, jb), (na, nb) = tg.test.compute_gradient(f, [a32, b64])
    assert len(seen) > 4 and set(seen) == {(np.dtype(np.float32), np.dtype(np.float64))}
    assert ja.dtype == na.dtype == np.float32 and jb.dtype == nb.dtype == np.float64
    np.testing.assert_allclose(ja, 2.0 * np.exp(a32)[None, :], rtol=1e-6)
    np.testing.assert_allclose(na, 2.0 * np.exp(a32)[None, :], rtol=1e-3)
    np.testing.assert_allclose(nb, [[np.exp(a32).sum()]], rtol=1e-6)


def _scaled_exp(c):
    @tg.custom_gradient
    def scaled_exp(x):
        y = tg.exp(x)

        def grad(dy):
            return dy * y * c  # c times the derivative

        return y, grad

    return scaled_exp


def test_tolerance_is_relative_to_the_numeric_derivative():
    x = np.array([0.3, -0.5, 1.2])
    # |1.5 g - g| = 0.5 |g| > 0.4 |g|: fails; relative to the analytic 1.5 g it would pass
    # (0.4 * 1.5 |g| = 0.6 |g|)
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(_scaled_exp(1.5), [x], atol=1e-12, rtol=0.4)
    msg = str(info.value)
    analytic, numeric = _numbers(msg, "analytic"), _numbers(msg, "numeric")
    assert abs(numeric - np.exp(1.2)) < 1e-6 and abs(analytic - 1.5 * np.exp(1.2)) < 1e-9
    tol = float(re.search(r"tolerance = (\S+)", msg).group(1))
    assert tol == pytest.approx(0.4 * numeric, rel=1e-2)
    assert "3 of 9 Jacobian elements outside the tolerance" in msg
    with pytest.raises(AssertionError, match=r"gradient / derivative = 1\.5.*tolerance"
                                             r"|tolerance.*gradient / derivative = 1\.5"):
        tg.test.check_custom_gradient(_scaled_exp(1.5), [x], atol=1e-12, rtol=0.4)
    # |1.3 g - g| = 0.3 |g| <= 0.4 |g|: passes
    tg.test.check_gradients(_scaled_exp(1.3), [x], atol=1e-12, rtol=0.4)
    report = tg.test.check_custom_gradient(_scaled_exp(1.3), [x], atol=1e-12, rtol=0.4)
    assert [c.status for c in report.ops] == ["passed"]


_VARIABLES_NOTE = ("the gradients of the Variables its forward reads are checked for shape and "
                   "linearity only")


def _variable_scale(w, variable_grad):
    @tg.custom_gradient
    def scale(x):
        def grad(dy, variables=None):
            return dy * w, [variable_grad(dy, x)]

        return x * w, grad

    return scale


def test_variables_note_appears_exactly_when_the_custom_gradient_reads_variables():
    x = np.array([0.5, 1.5])
    w = tg.Variable([1.0, 2.0], name="w")
    report = tg.test.check_custom_gradient(_variable_scale(w, lambda dy, t: dy * t), [x])
    assert [c.status for c in report.ops] == ["passed"]
    assert report.ops[0].notes == [_VARIABLES_NOTE] and _VARIABLES_NOTE in str(report)
    # the same op closing over a constant instead of a Variable: no note
    wc = tg.constant([1.0, 2.0])

    @tg.custom_gradient
    def scale(t):
        return t * wc, lambda dy: dy * wc

    report = tg.test.check_custom_gradient(scale, [x])
    assert [c.status for c in report.ops] == ["passed"]
    assert report.ops[0].notes == [] and _VARIABLES_NOTE not in str(report)
    with pytest.raises(AssertionError) as info:  # nor in a failure report
        tg.test.check_custom_gradient(_triple_square(), [x])
    assert "FAILED" in str(info.value) and _VARIABLES_NOTE not in str(info.value)


def test_variable_gradients_are_checked_for_shape_and_linearity():
    x, w = np.array([0.5, 1.5]), tg.Variable([1.0, 2.0], name="w")
    with pytest.raises(AssertionError) as info:  # summed to shape (): the shape is wrong
        tg.test.check_custom_gradient(_variable_scale(w, lambda dy, t: tg.sum(dy * t)), [x])
    msg = str(info.value)
    assert "GradientShapeError" in msg and "shape () for input 1 ('variables[0] (w)')" in msg
    with pytest.raises(AssertionError) as info:  # `+ 1.0` does not scale with dy
        tg.test.check_custom_gradient(_variable_scale(w, lambda dy, t: dy * t + 1.0), [x])
    msg = str(info.value)
    assert "not linear in the upstream gradient dy" in msg
    assert "input 1 ('variables[0] (w)')" in msg and _VARIABLES_NOTE in msg


def test_py_function_with_a_list_tout_passes_gradients_through_each_result():
    x = np.array([0.5, 2.0, -1.0])

    def f(t):  # computes in float32; Tout casts both results to float64
        return tg.py_function(lambda u: (tg.sin(tg.astype(u, tg.float32)), u * u), [t],
                              Tout=[tg.float64, tg.float64])

    xt = tg.constant(x)
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(xt)
        out = f(xt)
        a, b = out
        both = tg.sum(a) + 3.0 * tg.sum(b)
    assert isinstance(out, list) and a.dtype == b.dtype == tg.float64
    np.testing.assert_allclose(a.numpy(), np.sin(x), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), x * x)
    np.testing.assert_allclose(tape.gradient(a, xt).numpy(), np.cos(x), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(b, xt).numpy(), 2 * x)
    np.testing.assert_allclose(tape.gradient(both, xt).numpy(), np.cos(x) + 6 * x, rtol=1e-6)
    tg.test.check_gradients(lambda t: tg.py_function(lambda u: (tg.sin(u), u * u), [t],
                                                     Tout=[tg.float64, tg.float64]),
                            [x], order=2)


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
def test_an_infinite_numeric_derivative_fails_loudly():
    @tg.custom_gradient
    def flat_exp(t):
        return tg.exp(t), lambda dy: dy * 0.0  # wrong: the derivative is exp(t)

    # exp overflows within eps of x: the central difference is inf, and
    # |0 - inf| <= atol + rtol * inf used to pass the zero gradient
    x = np.array([709.7827128])
    with pytest.raises(AssertionError) as info:
        tg.test.check_gradients(flat_exp, [x])
    msg = str(info.value)
    assert _numbers(msg, "numeric") == np.inf and _numbers(msg, "analytic") == 0.0
    assert "a NaN or infinite value never passes" in msg
    assert "FAILED    op 0: CustomGradient:flat_exp" in msg
    with pytest.raises(AssertionError, match=r"gradient 0, derivative \(central difference\) inf"):
        tg.test.check_custom_gradient(flat_exp, [x])


def test_a_gradient_that_is_not_finite_for_some_upstream_gradient_fails():
    calls = []

    @tg.custom_gradient
    def square(x):
        def grad(dy):
            calls.append(1)
            g = dy * 2.0 * x
            return g * np.nan if len(calls) == 3 else g  # NaN for the third dy only

        return x * x, grad

    with pytest.raises(AssertionError, match=r"returned non-finite values \(nan or inf\) for "
                                             r"input 0 \('x'\)"):
        tg.test.check_custom_gradient(square, [np.array([0.5, -1.0])])
    assert len(calls) == 3  # g(dy1), g(dy2), g(a dy1 + b dy2): the NaN is the combination's


@pytest.mark.parametrize("kwargs, message", [
    ({"atol": np.nan}, "atol must be a finite number >= 0, got nan"),
    ({"rtol": np.inf}, "rtol must be a finite number >= 0, got inf"),
    ({"atol": -1e-5}, "atol must be a finite number >= 0"),
    ({"eps": 0.0}, "eps must be a finite number > 0, got 0.0"),
    ({"eps": "1e-6"}, "eps must be a finite number > 0"),
])
def test_tolerances_must_be_finite_numbers(kwargs, message):
    x = [np.array([0.5, 1.0])]
    with pytest.raises(ValueError, match=re.escape(message)):
        tg.test.check_gradients(tg.sin, x, **kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        tg.test.check_custom_gradient(tg.sin, x, **kwargs)
    with pytest.raises(ValueError, match=r"delta must be a finite number > 0, got nan"):
        tg.test.compute_gradient(tg.sin, x, delta=np.nan)


@tg.primitive("TestTestCubeReadsInputs")
def _cube_reads_inputs(x):
    return x ** 3


@tg.RegisterGradient("TestTestCubeReadsInputs", reads="inputs")
def _cube_reads_inputs_grad(op, dy):
    (x,) = op.inputs
    return 3.0 * x * x * dy


def test_contract_of_an_op_whose_record_drops_its_outputs():
    # the record keeps a Dropped placeholder for the output, whose dtype is the backend's
    # (array_api_strict's under that backend): the cotangents are still made as NumPy arrays
    report = tg.test.check_custom_gradient(_cube_reads_inputs, [np.array([1.0, -2.0, 0.5])])
    assert [c.status for c in report.ops] == ["passed"]


# --- complex arguments --------------------------------------------------------------------------
def test_check_gradients_takes_complex_arguments_as_real_pairs():
    z = np.array([0.5 + 1.0j, -1.0 + 0.25j, 2.0 - 0.5j])
    tg.test.check_gradients(lambda a: tg.exp(a) * tg.conj(a) + tg.abs(a), [z], order=2,
                            modes=("rev", "fwd"))

    @tg.custom_gradient
    def jax_convention_square(a):  # JAX's gradient, the conjugate of tapegrad's convention
        return a * a, lambda dy: dy * 2.0 * a

    with pytest.raises(AssertionError, match=r"the gradient with respect to input 0 \(shape "
                                             r"\(3,\)\) does not match central differences"
                                             r"(.|\n)*input 0 at index \(\d, [01]\)"):
        tg.test.check_gradients(jax_convention_square, [z])


def test_compute_gradient_takes_complex_arguments_as_tensorflow_does():
    # z -> z^2 as a map of (Re z, Im z): [[2x, -2y], [2y, 2x]] at z = 1 + 2i, rows (Re y, Im y)
    for dtype, real in ((np.complex128, np.float64), (np.complex64, np.float32)):
        theoretical, numerical = tg.test.compute_gradient(lambda z: z * z,
                                                          [np.array([1.0 + 2.0j], dtype)])
        assert theoretical[0].dtype == real and numerical[0].dtype == real
        np.testing.assert_allclose(theoretical[0], [[2.0, -4.0], [4.0, 2.0]], rtol=1e-6)
        np.testing.assert_allclose(numerical[0], [[2.0, -4.0], [4.0, 2.0]], rtol=1e-3)
    # a real result of a complex argument: one row, two columns (d|z|/dRe, d|z|/dIm)
    theoretical, numerical = tg.test.compute_gradient(tg.abs, [np.array([3.0 + 4.0j])])
    np.testing.assert_allclose(theoretical[0], [[0.6, 0.8]], rtol=1e-12)
    np.testing.assert_allclose(numerical[0], [[0.6, 0.8]], rtol=1e-8)
