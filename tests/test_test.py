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
            return dy * y * tg.where(x < 0.0, 1.0, 1.5)  # wrong (x1.5) where x >= 0

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
