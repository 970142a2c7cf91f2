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


# --- NaN provenance: the forward op a gradient's NaN belongs to, and the user's line ------------
def _line(text) -> str:
    """``"test_debugging.py:N"``: the line of this file that holds ``text``."""
    with open(__file__) as f:
        n = next(k for k, ln in enumerate(f, 1) if text in ln)
    return f"test_debugging.py:{n}"


def two_sqrts(x):  # pytorch#160016: two sqrt calls, the second one's gradient is Inf
    y = tg.sqrt(x)                  # fine
    z = tg.sqrt(x - x)              # sqrt(0): the culprit
    return tg.sum(y + z)


def sqrt_behind_where(x):  # the where trap: the 0 branch's cotangent times sqrt'(0) = inf
    return tg.sum(tg.where(x > 0, tg.sqrt(x), 0.0))


@tg.custom_gradient
def bad_inverse(x):
    def grad(dy):
        return dy / (x - x)         # divides by zero
    return x * 1.0, grad


def custom_zero_division(x):
    return tg.sum(bad_inverse(x) * 2.0)


_CASES = [
    (two_sqrts, [1.0, 4.0], "Sqrt", "z = tg.sqrt(x - x)", "Inf",
     ["cotangent 0: shape (2,) {dt}, min 1, max 1, 0 non-finite",
      "output 0: shape (2,) {dt}, min 0, max 0, 0 non-finite"],  # Sqrt's gradient reads it
     "Sum ({l}) <- Add ({l}) <- Sqrt ({s})", "return tg.sum(y + z)"),
    (sqrt_behind_where, [0.0, 4.0], "Sqrt", "tg.where(x > 0, tg.sqrt(x), 0.0)", "NaN",
     ["cotangent 0: shape (2,) {dt}, min 0, max 1, 0 non-finite",
      "output 0: shape (2,) {dt}, min 0, max 2, 0 non-finite"],
     "Sum ({l}) <- Where ({l}) <- Sqrt ({s})", "tg.where(x > 0, tg.sqrt(x), 0.0)"),
    (custom_zero_division, [1.0, 2.0], "CustomGradient:bad_inverse",
     "return tg.sum(bad_inverse(x) * 2.0)", "Inf",
     ["cotangent 0: shape (2,) {dt}, min 2, max 2, 0 non-finite",
      "input 0 'x': shape (2,) {dt}, min 1, max 2, 0 non-finite"],
     "Sum ({l}) <- Mul ({l}) <- CustomGradient:bad_inverse ({s})",
     "return tg.sum(bad_inverse(x) * 2.0)"),
]


def _assert_provenance(message, case, dtype):
    _, _, op_type, site, what, summaries, path, loss_line = case
    assert f"produced {what} in output 0 in the gradient of op type {op_type!r}" in message
    line = _line(site)
    assert f"  forward op: {op_type!r} (whose gradient this is), called at " in message
    assert f"{__file__}:{line.rpartition(':')[2]}\n" in message, message
    for s in summaries:
        assert f"\n  {s.format(dt=dtype)}\n" in message, message
    assert f"  path from the loss: {path.format(l=_line(loss_line), s=line)}\n" in message
    assert message.endswith("  Disable with tg.debugging.disable_check_numerics()")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case", _CASES, ids=lambda c: c[0].__name__)
def test_nan_in_a_gradient_names_the_forward_op_and_its_line(check_numerics, case):
    x = tg.Variable(np.array(case[1]))
    with tg.GradientTape() as tape:
        loss = case[0](x)
    with pytest.raises(NumericsError) as info:
        tape.gradient(loss, x)
    _assert_provenance(str(info.value), case, "float64")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case", _CASES, ids=lambda c: c[0].__name__)
def test_nan_in_a_compiled_gradient_names_the_forward_op_and_its_line(check_numerics, case):
    pytest.importorskip("jax")
    f = tg.function(tg.grad(case[0]))
    with pytest.raises(NumericsError) as info:
        f(tg.constant(np.array(case[1], dtype=np.float32)))
    message = str(info.value)
    assert message.startswith(f"tg.function(grad({case[0].__name__})): check_numerics: ")
    _assert_provenance(message, case, "float32")


def test_forward_nan_names_the_users_line(check_numerics):
    with np.errstate(invalid="ignore"), pytest.raises(NumericsError) as info:
        tg.log(tg.constant([-1.0]))  # the line named
    assert f"\n  called at {__file__}:{_line('# the line named').rpartition(':')[2]}\n" in str(
        info.value)


def test_a_nan_gradient_returned_as_a_raw_array_is_reported(check_numerics):
    @tg.custom_gradient
    def f(x):
        return x * 1.0, lambda dy: np.full(2, np.nan)

    x = tg.Variable([1.0, 2.0])
    with tg.GradientTape() as tape:
        y = tg.sum(f(x))
    with pytest.raises(NumericsError, match=r"the gradient function .*<lambda>.* returned NaN "
                       r"for input 0 in the gradient of op type 'CustomGradient:f'"):
        tape.gradient(y, x)


def test_check_numerics_off_installs_nothing_and_keeps_the_memory_reports_sites():
    from tapegrad import debugging
    tg.debugging.enable_memory_report()
    tg.debugging.enable_check_numerics()
    tg.debugging.disable_memory_report()
    assert debugging._SITES in tg._records.trace_entries()  # check numerics still needs them
    tg.debugging.disable_check_numerics()
    entries = tg._records.trace_entries()
    assert debugging._SITES not in entries and debugging._OBSERVER not in entries
    assert not debugging._OBSERVER.on and debugging._SITES.sites == {}
