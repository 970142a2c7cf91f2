"""Check-numerics mode and tg.debugging.log."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import NumericsError


@pytest.fixture
def check_numerics():
    tg.debugging.enable_check_numerics()
    yield
    tg.debugging.disable_check_numerics()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_in_forward_names_op_and_shapes(check_numerics):
    x = tg.constant([[1.0, -1.0]])
    with pytest.raises(NumericsError, match=r"'Log' produced NaN .* forward computation; its "
                                            r"inputs have shapes \[\(1, 2\)\]"):
        tg.log(x)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_inf_in_gradient_names_the_op_being_differentiated(check_numerics):
    x = tg.Variable([0.0, 4.0])
    with tg.GradientTape() as tape:
        y = tg.sum(tg.sqrt(x))
    with pytest.raises(NumericsError, match="produced Inf .* in the gradient of op type 'Sqrt'"):
        tape.gradient(y, x)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_from_custom_gradient_function(check_numerics):
    @tg.custom_gradient
    def f(x):
        return x * 1.0, lambda dy: dy * tg.log(x - 10.0)

    x = tg.Variable([1.0])
    with tg.GradientTape() as tape:
        y = f(x)
    with pytest.raises(NumericsError, match="'Log' produced NaN .*CustomGradient:f"):
        tape.gradient(y, x)


def test_check_numerics_off_by_default_and_after_disable():
    tg.debugging.enable_check_numerics()
    tg.debugging.disable_check_numerics()
    with np.errstate(invalid="ignore"):
        assert np.isnan(tg.log(tg.constant(-1.0)).numpy())


def test_finite_values_pass(check_numerics):
    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        y = tg.sum(tg.exp(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.exp([1.0, 2.0]))


def test_log_from_gradient_functions():
    @tg.custom_gradient
    def f(x):
        def grad(dy):
            tg.debugging.log("dy", dy)
            tg.debugging.log("x", x)
            return dy * 3.0

        return x * 3.0, grad

    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        y = tg.sum(f(x) * 2.0)
    tape.gradient(y, x)
    assert list(tape.logs) == ["dy", "x"]
    np.testing.assert_allclose(tape.logs["dy"][0].numpy(), [2.0, 2.0])
    np.testing.assert_allclose(tape.logs["x"][0].numpy(), [1.0, 2.0])


def test_log_outside_a_gradient_is_an_error():
    with pytest.raises(RuntimeError, match="outside a gradient computation"):
        tg.debugging.log("x", 1.0)
