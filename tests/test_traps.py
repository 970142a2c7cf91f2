"""Silent traps a new user met, each now an error or correct behaviour (issue 7)."""
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import TapeLeakWarning


def _is_numpy_backend():
    return type(tg.constant(1.0)._value) in (np.ndarray, np.float64)


# --- tensors never change under a tape ----------------------------------------------------------
def test_constant_copies_so_mutating_the_array_cannot_corrupt_a_gradient():
    a = np.array([1.0, 2.0])
    x = tg.constant(a)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(x * x)
    a[0] = 99.0  # the user's array, changed after the forward pass
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 4.0])
    np.testing.assert_allclose(x.numpy(), [1.0, 2.0])


def test_variable_copies_its_initial_value():
    a = np.array([1.0, 2.0])
    v = tg.Variable(a)
    a[1] = -5.0
    np.testing.assert_allclose(v.numpy(), [1.0, 2.0])


def test_asarray_keeps_the_array_api_copy_semantics():
    a = np.array([1.0, 2.0])
    shared, copied = tg.asarray(a), tg.asarray(a, copy=True)
    a[0] = 5.0  # asarray(copy=None) shares a NumPy array's memory, as documented
    if _is_numpy_backend():
        np.testing.assert_allclose(shared.numpy(), [5.0, 2.0])
    np.testing.assert_allclose(copied.numpy(), [1.0, 2.0])
    assert "shares the array's memory" in " ".join(tg.asarray.__doc__.split())


@pytest.mark.parametrize("make", [tg.constant, tg.Variable])
def test_numpy_returns_a_read_only_view(make):
    t = make([1.0, 2.0])
    with pytest.raises(ValueError, match="read-only"):
        t.numpy()[0] = 5.0
    np.testing.assert_allclose(t.numpy(), [1.0, 2.0])
    writeable = t.numpy().copy()
    writeable[0] = 5.0
    np.testing.assert_allclose(t.numpy(), [1.0, 2.0])


@pytest.mark.parametrize("copy", [None, True])
def test_np_array_of_a_tensor_is_a_writeable_copy(copy):
    t = tg.constant([1.0, 2.0])
    a = np.array(t) if copy is None else np.array(t, copy=True)
    a[0] = 7.0
    assert a[0] == 7.0
    np.testing.assert_allclose(t.numpy(), [1.0, 2.0])


def test_np_asarray_of_a_tensor_is_read_only():
    t = tg.constant([1.0, 2.0])
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(t)[0] = 3.0


# --- values that would be truncated or are not numbers ----------------------------------------
def test_assigning_floats_to_an_int_variable_raises():
    v = tg.Variable([1, 2])
    with pytest.raises(TypeError, match="kind floating cannot be stored in Variable .* dtype "
                                        "int64 without losing data"):
        v.assign([1.7, 2.2])
    with pytest.raises(TypeError, match="without losing data"):
        v.assign_add(np.array([0.5, 0.5]))
    np.testing.assert_array_equal(v.numpy(), [1, 2])
    v.assign([3, 4])  # integers still fit
    np.testing.assert_array_equal(v.numpy(), [3, 4])


def test_assigning_ints_to_a_float_variable_is_fine():
    v = tg.Variable([1.0, 2.0])
    v.assign([3, 4])
    np.testing.assert_allclose(v.numpy(), [3.0, 4.0])


def test_py_function_refuses_to_truncate_float_results():
    with pytest.raises(TypeError, match="py_function: func returned a result of dtype float64 "
                                        "but Tout is int32; the cast would silently drop its "
                                        "fraction"):
        tg.py_function(lambda x: x * 1.5, [tg.constant([1.0])], Tout=tg.int32)


def test_numpy_function_refuses_to_truncate_float_results():
    with pytest.raises(TypeError, match="numpy_function: .* Tout is int32"):
        tg.numpy_function(lambda x: x * 1.5, [tg.constant([1.0])], Tout=tg.int32)


def test_py_function_with_a_list_tout_gives_several_differentiable_results():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        a, b = tg.py_function(lambda t: (t * t, tg.sin(t)), [x], Tout=[tg.float64, tg.float64])
        loss = tg.sum(a) + tg.sum(b)
    np.testing.assert_allclose(a.numpy(), [1.0, 4.0])
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), 2 * np.array([1.0, 2.0])
                               + np.cos([1.0, 2.0]))


def test_strings_and_none_are_not_tensors():
    with pytest.raises(TypeError, match=r"Variable: the value has dtype <U1 \(not numeric\)"):
        tg.Variable(["a", "b"])
    with pytest.raises(TypeError, match="constant: the value has no numeric dtype"):
        tg.constant(None)


# --- tapes ------------------------------------------------------------------------------------
def test_gradient_of_a_tape_never_entered_raises():
    tape = tg.GradientTape()
    x = tg.constant(1.0)
    with pytest.raises(RuntimeError, match="this tape was never entered, so it recorded "
                                           "nothing"):
        tape.gradient(x * 2.0, x)
    with pytest.raises(RuntimeError, match="never entered"):
        tape.jacobian(x * 2.0, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jacobian_keeps_the_target_dtype(dtype):
    x = tg.constant(np.array([1.0, 2.0], dtype=dtype))
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = x * x * 3.0
    j = tape.jacobian(y, x)
    assert j.dtype == dtype
    np.testing.assert_allclose(j.numpy(), np.diag([6.0, 12.0]), rtol=1e-6)


def test_jacobian_inside_a_persistent_tape_block_keeps_recording():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
        j = tape.jacobian(y, x)
        z = tg.sum(y * x)  # recorded after the jacobian
    np.testing.assert_allclose(j.numpy(), np.diag([2.0, 4.0]))
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), [3.0, 12.0])


# --- the registry -----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["", 123, None])
def test_primitive_needs_a_non_empty_string(bad):
    with pytest.raises(TypeError, match="primitive: op_type must be a non-empty string"):
        tg.primitive(bad)


def test_register_gradient_needs_a_string():
    with pytest.raises(TypeError, match="RegisterGradient: op_type must be a non-empty string "
                                        r"\(an op type name such as 'Relu'\), got 123"):
        tg.RegisterGradient(123)


def test_register_gradient_reads_must_be_a_known_name():
    with pytest.raises(ValueError, match="reads='input'; it must be one of 'none', 'inputs', "
                                         "'outputs', 'both'"):
        tg.RegisterGradient("TrapsReads", reads="input")


def test_override_with_a_gradient_of_another_arity_raises():
    with pytest.raises(ValueError, match="op type 'Relu' takes 1 input.* the gradient of 'Mul' "
                                         r"is written for ops of 2 input\(s\)"):
        with tg.gradient_override_map({"Relu": "Mul"}):
            pass


def test_override_with_a_non_string_key_raises():
    with pytest.raises(TypeError, match="op types are strings, got 1"):
        with tg.gradient_override_map({1: "Identity"}):
            pass


@tg.primitive("TrapsListForward")
def _list_forward(x):
    return [x, x]


def test_a_forward_returning_a_list_is_named():
    with pytest.raises(TypeError, match="op type 'TrapsListForward' returned a list; a "
                                        "primitive's forward must return one backend array, or "
                                        "a tuple of them"):
        _list_forward(tg.constant([1.0]))


@tg.primitive("TrapsNumpyForward")
def _numpy_forward(x):
    return np.asarray(x) * 2.0  # leaves the inputs' backend


def test_a_forward_returning_numpy_for_another_backend_is_named():
    xs = pytest.importorskip("array_api_strict")
    with pytest.raises(TypeError, match="op type 'TrapsNumpyForward' returned a NumPy array for "
                                        "inputs on 'array_api_strict'"):
        _numpy_forward(tg.asarray(xs.asarray([1.0, 2.0])))


@tg.primitive("TrapsRawGradTuple")
def _raw_grad_tuple(x, y):
    return x * y


@tg.RegisterGradient("TrapsRawGradTuple")
def _raw_grad_tuple_grad(op, dy):
    x, y = op.inputs
    return dy * tg.constant(y.numpy()), dy * tg.constant(x.numpy())  # raw reads


def test_a_gradient_reading_numpy_and_returning_a_tuple_is_once_differentiable():
    x, y = tg.constant([1.0, 2.0]), tg.constant([3.0, 4.0])
    with tg.GradientTape() as outer:
        outer.watch([x, y])
        with tg.GradientTape() as inner:
            inner.watch([x, y])
            z = tg.sum(_raw_grad_tuple(x, y))
        gx, gy = inner.gradient(z, [x, y])
        s = tg.sum(gx) + tg.sum(gy)
    np.testing.assert_allclose(gx.numpy(), [3.0, 4.0])
    with pytest.raises(tg.errors.NotDifferentiableError,
                       match="'TrapsRawGradTuple' again: its gradient function "
                             "_raw_grad_tuple_grad"):
        outer.gradient(s, [x, y])


@tg.primitive("TrapsRawGradComplex")
def _raw_grad_complex(z):
    return z * z


@tg.RegisterGradient("TrapsRawGradComplex")
def _raw_grad_complex_grad(op, dy):
    return dy * 2.0 * tg.conj(tg.constant(complex(op.inputs[0])))  # a raw read, as float()


def test_a_gradient_reading_complex_of_a_traced_tensor_is_once_differentiable():
    z = tg.constant(1.0 + 2.0j)
    with tg.GradientTape() as outer:
        outer.watch(z)
        with tg.GradientTape() as inner:
            inner.watch(z)
            w = tg.real(_raw_grad_complex(z))
        g = inner.gradient(w, z)
        s = tg.real(g)
    np.testing.assert_allclose(g.numpy(), 2.0 - 4.0j)
    with pytest.raises(tg.errors.NotDifferentiableError,
                       match="'TrapsRawGradComplex' again: its gradient function "
                             "_raw_grad_complex_grad"):
        outer.gradient(s, z)


# --- needs_input_grad -------------------------------------------------------------------------
@tg.primitive("TrapsThree")
def _three(a, b, c):
    return a * b + c


@tg.RegisterGradient("TrapsThree")
def _three_grad(op, dy):
    _three.seen.append(op.needs_input_grad)
    a, b, _ = op.inputs
    return dy * b, dy * a, dy


_three.seen = []


@tg.primitive("TrapsOne")
def _one(a):
    return a * 2.0


@tg.RegisterGradient("TrapsOne")
def _one_grad(op, dy):
    _one.seen.append(op.needs_input_grad)
    return 2.0 * dy


_one.seen = []


def test_needs_input_grad_for_one_and_three_inputs():
    a, b, c = tg.constant([1.0]), tg.constant([2.0]), tg.constant([3.0])
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([a, c])
        y = _three(a, b, c)
        w = _one(a)
    _three.seen.clear()
    _one.seen.clear()
    ga, gc = tape.gradient(y, [a, c])
    assert _three.seen == [(True, False, True)]
    np.testing.assert_allclose(ga.numpy(), [2.0])
    np.testing.assert_allclose(gc.numpy(), [1.0])
    tape.gradient(y, [c])
    assert _three.seen[-1] == (False, False, True)
    tape.gradient(w, a)
    assert _one.seen == [(True,)]


# --- NumPy functions on tensors ---------------------------------------------------------------
def test_numpy_ufuncs_compute_eagerly_and_return_numpy():
    t = tg.constant([0.0, 1.0])
    s = np.sin(t)
    assert type(s) is np.ndarray
    np.testing.assert_allclose(s, np.sin([0.0, 1.0]))
    assert float(np.sum(t)) == 1.0


def test_an_ndarray_on_the_left_of_an_operator_still_gives_a_tensor():
    t = tg.constant([1.0, 2.0])
    x = tg.constant([3.0, 4.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(np.array([2.0, 2.0]) * x + np.multiply(np.ones(2), t))
    assert isinstance(y, tg.Tensor)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 2.0])


def test_converting_a_traced_tensor_to_numpy_warns_once_per_call_site():
    x = tg.constant([1.0, 2.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        with tg.GradientTape() as tape:
            tape.watch(x)
            for _ in range(3):
                a = np.asarray(x * 2.0)  # one call site, three conversions
            np.asarray(tg.constant([5.0]))  # not traced: no warning
    leaks = [w for w in caught if issubclass(w.category, TapeLeakWarning)]
    assert len(leaks) == 1
    assert "test_traps.py" in leaks[0].filename
    assert f"test_traps.py:{leaks[0].lineno}" in str(leaks[0].message)
    assert "converted to a NumPy array" in str(leaks[0].message)
    np.testing.assert_allclose(a, [2.0, 4.0])


def test_explain_names_the_conversion():
    x = tg.constant([1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TapeLeakWarning)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.constant(np.exp(x))  # eager NumPy: leaves the tape
            loss = tg.sum(y)
    text = str(tape.explain(loss, {"x": x}))
    assert "x: unconnected — it was converted to a NumPy array at " in text
    assert "test_traps.py" in text
    assert list(tape.conversions) == [x.id]


def test_scipy_special_on_a_traced_tensor_warns_and_explains():
    special = pytest.importorskip("scipy.special")
    x = tg.constant([0.5, 0.25])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tg.GradientTape() as tape:
            tape.watch(x)
            h = tg.sum(tg.asarray(special.entr(x)))
    assert any(issubclass(w.category, TapeLeakWarning) for w in caught)
    assert tape.gradient(h, x) is None
    np.testing.assert_allclose(h.numpy(), -(0.5 * np.log(0.5) + 0.25 * np.log(0.25)))


def test_leaving_for_numpy_warns_for_accumulators_variables_and_dlpack_too():
    x = tg.constant([0.5, 0.25])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tg.ForwardAccumulator(x, tg.constant([1.0, 1.0])) as acc:
            y = tg.asarray(np.exp(x))
    assert acc.jvp(y) is None
    (leak,) = [w for w in caught if issubclass(w.category, TapeLeakWarning)]
    assert "that a ForwardAccumulator gives a tangent was converted to a NumPy array" in str(
        leak.message)
    assert "carries no JVP" in str(leak.message) and leak.filename == __file__
    v = tg.Variable([1.0, 2.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tg.GradientTape() as tape:
            loss = tg.sum(tg.asarray(np.square(v)))  # no op read v: it was never watched
    assert tape.gradient(loss, v) is None
    (leak,) = [w for w in caught if issubclass(w.category, TapeLeakWarning)]
    assert "a Variable of shape (2,) that a recording GradientTape traces" in str(leak.message)
    assert "tg.custom_gradient" in str(leak.message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tg.GradientTape() as tape:
            tape.watch(x)
            np.from_dlpack(x)
    (leak,) = [w for w in caught if issubclass(w.category, TapeLeakWarning)]
    assert "was exported through DLPack (__dlpack__) at" in str(leak.message)


def test_a_conversion_inside_an_installed_library_is_reported_at_each_line_that_called_it():
    # SciPy's array-API path converts with np.asarray inside SciPy: the warning names the
    # user's line (so that each call site warns once) and SciPy's
    pytest.importorskip("scipy")
    from test_array_api_consumers import run_with_array_api

    run_with_array_api("""
        import warnings
        import numpy as np
        import tapegrad as tg
        from scipy.special import entr

        x = tg.constant([0.5, 0.25])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            with tg.GradientTape(persistent=True) as tape:
                tape.watch(x)
                a = tg.sum(entr(x))
                b = tg.sum(entr(x * 2.0))
        assert tape.gradient(a, x) is None and tape.gradient(b, x) is None
        leaks = [w for w in caught if issubclass(w.category, tg.errors.TapeLeakWarning)]
        assert len(leaks) == 2, [str(w.message) for w in leaks]
        assert {w.filename for w in leaks} == {"<string>"}, [w.filename for w in leaks]
        assert len({w.lineno for w in leaks}) == 2  # the two lines that called entr
        for w in leaks:
            assert "(inside " in str(w.message) and "scipy" in str(w.message), str(w.message)
        print("ok")
    """)


# --- the namespace ----------------------------------------------------------------------------
def test_version_and_no_stray_names():
    assert isinstance(tg.__version__, str) and tg.__version__[0].isdigit()
    assert not hasattr(tg, "annotations")


def test_array_namespace_rejects_an_unknown_version():
    t = tg.constant(1.0)
    assert t.__array_namespace__(api_version="2024.12") is tg
    with pytest.raises(ValueError, match="not '2099.12'"):
        t.__array_namespace__(api_version="2099.12")


# --- the structural-ops interface ---------------------------------------------------------------
def test_provide_rejects_an_unknown_name_and_missing_ops_say_what_to_import():
    from tapegrad import _structural

    with pytest.raises(TypeError, match="'mul' is not a structural op of the core; the names "
                                        "are add, sum"):
        _structural.provide(mul=lambda a, b: a)
    with pytest.raises(RuntimeError, match="needs the op 'add', which tapegrad.ops provides "
                                           "when it is imported"):
        _structural._Missing("add")(1, 2)
