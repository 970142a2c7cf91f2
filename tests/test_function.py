"""tg.function: compiled with XLA through JAX, the same values as eager execution."""
import re
import sys

import warnings

import numpy as np
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")


def _eager_and_compiled(f, *args):
    eager = f(*args)
    compiled = tg.function(f, jit_compile=True)(*args)
    return eager, compiled


def _close(a, b, rtol=1e-12):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        assert x.dtype == y.dtype
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=rtol, atol=1e-14)


# --- tracing --------------------------------------------------------------------------------
def test_traces_once_per_signature_and_prints_at_trace_time(capsys):
    @tg.function
    def f(x, scale):
        print("tracing")
        return tg.sum(tg.sin(x)) * scale

    x = tg.constant([1.0, 2.0])
    for _ in range(3):
        np.testing.assert_allclose(f(x, 2.0).numpy(), 2 * np.sin([1.0, 2.0]).sum())
    assert f.experimental_get_tracing_count() == 1
    assert capsys.readouterr().out == "tracing\n"
    f(tg.constant([1.0, 2.0, 3.0]), 2.0)  # new shape
    f(x, 3.0)  # new Python value
    f(tg.constant(np.array([1.0, 2.0], dtype=np.float32)), 2.0)  # new dtype
    assert f.experimental_get_tracing_count() == 4


def test_calls_of_tensors_alone_find_their_program_by_shape_and_dtype(capsys):
    @tg.function(jit_compile=True)
    def g(x, y):
        print("tracing g")
        return x * y

    a, b = tg.constant([1.0, 2.0]), tg.constant([3.0, 4.0])
    for _ in range(3):
        np.testing.assert_allclose(g(a, b).numpy(), [3.0, 8.0])
    g(tg.constant([1.0, 2.0, 3.0]), tg.constant([1.0, 1.0, 1.0]))  # new shapes
    g(a, tg.constant(np.array([3.0, 4.0], dtype=np.float32)))  # a new dtype
    g(a, y=b)  # a keyword: another signature, as in TensorFlow
    assert g.experimental_get_tracing_count() == 4
    assert capsys.readouterr().out == "tracing g\n" * 4

    @tg.function(jit_compile=True)
    def outer(x):
        print("tracing outer")
        return g(x, x) + 1.0  # inside outer's trace: inlined, not g's program for (2,)

    np.testing.assert_allclose(outer(a).numpy(), [2.0, 5.0])
    assert g.experimental_get_tracing_count() == 4
    assert capsys.readouterr().out == "tracing outer\ntracing g\n"
    with tg.GradientTape() as tape:  # the found program's call is still recorded
        tape.watch(a)
        y = tg.sum(g(a, b))
    np.testing.assert_allclose(tape.gradient(y, a).numpy(), [3.0, 4.0])


@pytest.mark.parametrize("how", ["argument", "closure"])
def test_a_function_called_on_concrete_values_inside_another_trace_is_inlined(how):
    # inside outer's trace the Variables are bound to tracers: inner's program run there (its
    # arguments concrete) returned a tensor holding a tracer, which the next op read
    v, c = tg.Variable(0.7), tg.constant(0.5)
    if how == "argument":  # a Variable argument: concrete, but bound to a tracer in the trace
        inner = tg.function(lambda x: tg.sin(x) * x)
        outer = tg.function(lambda x: inner(x) * 2.0)
        args, value, slope = (v,), lambda w: 2 * np.sin(w) * w, lambda w: 2 * (
            np.cos(w) * w + np.sin(w))
    else:  # a concrete constant argument, inner reads a Variable
        inner = tg.function(lambda x: tg.sin(x) * v)
        outer = tg.function(lambda: inner(c) * 2.0)
        args, value, slope = (), lambda w: 2 * np.sin(0.5) * w, lambda w: 2 * np.sin(0.5)
        inner(c)  # its program is then found by shape: that path inlines in a trace too
    np.testing.assert_allclose(outer(*args).numpy(), value(0.7), rtol=1e-12)
    v.assign(1.1)  # read on each call, not a constant of outer's program
    np.testing.assert_allclose(outer(*args).numpy(), value(1.1), rtol=1e-12)
    with tg.GradientTape() as tape:
        y = outer(*args)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), slope(1.1), rtol=1e-12)
    with tg.ForwardAccumulator(v, tg.constant(1.0, dtype=tg.float64)) as acc:
        y = outer(*args)
    np.testing.assert_allclose(acc.jvp(y).numpy(), slope(1.1), rtol=1e-12)


def test_nested_functions_under_two_forward_accumulators_give_the_second_derivative():
    inner = tg.function(lambda x: tg.sin(x) * x)
    outer = tg.function(lambda x: inner(x) * 2.0)
    x = tg.constant(0.7)
    with tg.ForwardAccumulator(x, tg.constant(1.0)) as acc2:
        with tg.ForwardAccumulator(x, tg.constant(1.0)) as acc1:
            y = outer(x)
        d1 = acc1.jvp(y)
    d2 = acc2.jvp(d1)
    np.testing.assert_allclose(d1.numpy(), 2 * (np.sin(0.7) + 0.7 * np.cos(0.7)), rtol=1e-12)
    np.testing.assert_allclose(d2.numpy(), 2 * (2 * np.cos(0.7) - 0.7 * np.sin(0.7)),
                               rtol=1e-12)


def test_results_have_eager_dtypes_and_live_on_the_default_backend():
    @tg.function(jit_compile=True)
    def f(x, y):
        return x * 2.0, tg.astype(y, tg.float64), tg.argmax(x)

    a, b, c = f(tg.constant(np.ones(3, dtype=np.float32)), tg.constant([1, 2]))
    assert (a.dtype, b.dtype, c.dtype) == (np.float32, np.float64, np.int64)
    assert type(a._value) is type(tg.constant(1.0)._value.__array_namespace__().ones(1))


def test_nested_structures_and_python_outputs():
    @tg.function
    def f(d, pair):
        return {"sum": d["a"] + pair[0], "n": 3, "none": None}

    out = f({"a": tg.constant([1.0])}, (tg.constant([2.0]), "label"))
    np.testing.assert_allclose(out["sum"].numpy(), [3.0])
    assert out["n"] == 3 and out["none"] is None


def test_input_signature_rejects_other_shapes():
    f = tg.function(lambda x: x * 2.0, input_signature=[tg.TensorSpec([None, 2], tg.float64)])
    np.testing.assert_allclose(f(tg.constant([[1.0, 2.0]])).numpy(), [[2.0, 4.0]])
    with pytest.raises(TypeError, match=r"argument 0 has shape \(3,\) and dtype float64, which "
                                        r"does not fit its input_signature TensorSpec\(shape="
                                        r"\(None, 2\)"):
        f(tg.constant([1.0, 2.0, 3.0]))


def test_unhashable_python_argument_is_named():
    f = tg.function(lambda x, opts: x)
    with pytest.raises(TypeError, match="an argument of type set is neither a Tensor nor a "
                                        "hashable Python value"):
        f(tg.constant(1.0), {1, 2})


# --- everything tapegrad has, inside ------------------------------------------------------
@tg.custom_gradient
def _leaky_relu(x):
    return tg.nn.relu(x), lambda dy: tg.where(x > 0, dy, 0.1 * dy)


@tg.custom_gradient
def _stable_softmax(x):
    e = tg.exp(x - tg.max(x, axis=-1, keepdims=True))
    y = e / tg.sum(e, axis=-1, keepdims=True)
    return y, lambda dy: y * (dy - tg.sum(dy * y, axis=-1, keepdims=True))


@tg.primitive("FunctionTestShiftedRelu")
def _shifted_relu(x, t):
    xp = x.__array_namespace__()
    return xp.where(x > t, x - t, xp.zeros_like(x - t))


@tg.RegisterGradient("FunctionTestShiftedRelu")
def _shifted_relu_grad(op, dy):
    x, t = op.inputs
    active = tg.where(x > t, dy, tg.zeros_like(dy))
    return active, -active


def test_custom_gradients_registered_gradients_and_second_order():
    def f(x, t):
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape(persistent=True) as tape:
                tape.watch([x, t])
                y = tg.sum(_leaky_relu(x) ** 2) + tg.sum(_stable_softmax(x) * x)
                z = tg.sum(_shifted_relu(x, t) ** 3)
            gx, gt = tape.gradient(z, [x, t])
            gy = tape.gradient(y, x)
            j = tape.jacobian(_stable_softmax(x), x)
        return y, z, gx, gt, gy, j, outer.gradient(tg.sum(gx), x)

    x, t = tg.constant([-1.0, 0.5, 2.0]), tg.constant(0.2)
    eager, compiled = _eager_and_compiled(f, x, t)
    _close(eager, compiled)


def test_overrides_hooks_straight_through_and_clip_gradient():
    def f(x):
        seen = []
        with tg.GradientTape(persistent=True) as tape:
            tape.watch(x)
            with tg.gradient_override_map({"Sin": "Identity"}):
                a = tg.sin(x)
            a.register_hook(lambda g: g * 2.0)
            b = tg.straight_through(tg.round)(x * 3.0)
            c = tg.clip_gradient(x, -0.5, 0.5)
            loss = tg.sum(a) + tg.sum(b * b) + tg.sum(c * 10.0)
        return tape.gradient(loss, x), seen

    _close(*_eager_and_compiled(f, tg.constant([0.3, -1.2])))


@tg.custom_gradient
def _custom_square(x):
    def grad(dy):
        @tg.custom_gradient
        def first(x):  # the seed's custom second-order pattern: 2x with its own gradient 2
            return 2.0 * x, lambda d2: 2.0 * d2
        return dy * first(x)
    return x * x, grad


def _half_relu(x):  # the seed's "gradient from another function": relu with 0.5 * dy
    @tg.custom_gradient
    def f(x):
        return tg.nn.relu(x), lambda dy: 0.5 * dy
    return f(x)


def test_seed_patterns_give_the_eager_values():
    def f(x):
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as tape:
                tape.watch(x)
                y = tg.sum(_custom_square(x)) + tg.sum(_half_relu(x))
            g = tape.gradient(y, x)
        return y, g, outer.gradient(tg.sum(g), x)

    _close(*_eager_and_compiled(f, tg.constant([-1.5, 0.5, 2.0])))


def test_thresholded_relu_trained_by_adam_matches_eager():
    def train(compile_step):
        x = tg.Variable(np.linspace(-1.0, 1.0, 6))
        t = tg.Variable(0.1)
        opt = tg.optimizers.Adam(0.01)

        def step():
            with tg.GradientTape() as tape:
                loss = tg.sum((_shifted_relu(x, t) - 1.0) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [x, t]), [x, t]))
            return loss

        step = tg.function(step, jit_compile=True) if compile_step else step
        losses = [float(step()) for _ in range(100)]
        return losses, x.numpy(), t.numpy()

    eager, compiled = train(False), train(True)
    np.testing.assert_allclose(compiled[0], eager[0], rtol=1e-12)
    np.testing.assert_allclose(compiled[1], eager[1], rtol=1e-12)
    np.testing.assert_allclose(compiled[2], eager[2], rtol=1e-12)
    assert eager[0][-1] < eager[0][0]


# --- Variables and optimizers ------------------------------------------------------------
def _model(optimizer):
    rng = np.random.default_rng(0)
    w = tg.Variable(rng.normal(size=(3, 2)), name="w")
    b = tg.Variable(np.zeros(2), name="b")
    opt = optimizer()

    def step(x, y):
        with tg.GradientTape() as tape:
            loss = tg.mean((tg.nn.relu(x @ w) + b - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss

    return step, (w, b), opt


@pytest.mark.parametrize("optimizer", [
    lambda: tg.optimizers.Adam(0.05), lambda: tg.optimizers.SGD(0.1, momentum=0.9),
    lambda: tg.optimizers.SGD(lambda step: 0.1 / (1.0 + step))])
def test_state_after_compiled_training_equals_eager_training(optimizer):
    x = tg.constant(np.random.default_rng(1).normal(size=(8, 3)))
    y = tg.constant(np.ones((8, 2)))
    eager_step, eager_vars, eager_opt = _model(optimizer)
    step, variables, opt = _model(optimizer)
    compiled = tg.function(step, jit_compile=True)
    for _ in range(6):
        le, lc = eager_step(x, y), compiled(x, y)
    np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-12)
    for a, b in zip(eager_vars, variables):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12)
    assert int(opt.iterations) == int(eager_opt.iterations) == 6
    assert compiled.experimental_get_tracing_count() == 1  # even though slots were created


def test_creating_a_variable_on_a_later_call_raises():
    state = {}

    @tg.function
    def f(x):
        state.setdefault(x.shape, tg.Variable(tg.zeros_like(x)))  # a new one per shape
        return x

    f(tg.constant([1.0]))
    with pytest.raises(ValueError, match=r"only supports Variables created on the first call"):
        f(tg.constant([1.0, 2.0]))


def test_assigned_variables_are_written_back_each_call():
    counter = tg.Variable(np.int64(0), trainable=False)
    total = tg.Variable(0.0)

    @tg.function
    def f(x):
        counter.assign_add(1)
        total.assign(total + tg.sum(x))
        return counter.read_value()

    for k in range(1, 4):
        assert int(f(tg.constant([1.0, 2.0]))) == k
    assert int(counter) == 3 and float(total) == 9.0


# --- gradients through a compiled call ------------------------------------------------------
def test_an_outer_tape_differentiates_a_compiled_call_to_second_order():
    w = tg.Variable([0.5, -0.25])

    def f(x):
        return tg.sum(tg.sin(x * w) ** 2)

    compiled = tg.function(f, jit_compile=True)

    def grads(fn):
        x = tg.constant([1.0, 2.0])
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = fn(x)
            gx, gw = inner.gradient(y, [x, w])
        return y, gx, gw, outer.gradient(tg.sum(gx), x)

    _close(grads(f), grads(compiled))
    assert [op.type for op in _record_of(compiled)] == ["Function:f"]


def _record_of(fn):
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        fn(x)
    return tape.operations


# --- modes and errors ------------------------------------------------------------------------
def test_jit_compile_false_and_run_functions_eagerly_run_the_python_function(capsys):
    f = tg.function(lambda x: print("ran") or x, jit_compile=False)
    f(tg.constant(1.0))
    f(tg.constant(1.0))
    assert capsys.readouterr().out == "ran\nran\n"
    g = tg.function(lambda x: print("ran") or x)
    tg.config.run_functions_eagerly(True)
    try:
        g(tg.constant(1.0))
        g(tg.constant(1.0))
    finally:
        tg.config.run_functions_eagerly(False)
    assert capsys.readouterr().out == "ran\nran\n"
    assert g.experimental_get_tracing_count() == 0


def test_a_python_branch_on_a_traced_value_names_the_line():
    @tg.function(autograph=False)  # with AutoGraph (the default) it is a tg.cond: test_autograph
    def f(x):
        if tg.sum(x) > 0:
            return x
        return -x

    with pytest.raises(TypeError, match=r"the Python code at .*test_function.py:\d+ needs the "
                                        r"concrete value of a traced tensor.*tg.cond.*tg.where"):
        f(tg.constant([1.0]))
    g = tg.function(lambda x: float(tg.sum(x)))
    with pytest.raises(TypeError, match="needs the concrete value of a traced tensor"):
        g(tg.constant([1.0]))


def test_a_data_dependent_shape_names_the_op():
    f = tg.function(lambda x: tg.nonzero(x > 0)[0], jit_compile=True)
    with pytest.raises(TypeError, match=r"op type 'NonZero' \(at .*\) has an output whose shape "
                                        r"depends on the values.*jit_compile=False"):
        f(tg.constant([1.0, -1.0]))
    np.testing.assert_array_equal(tg.function(lambda x: tg.nonzero(x > 0)[0],
                                              jit_compile=False)(tg.constant([1.0, -1.0])), [0])


def test_missing_jax_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` raises ImportError
    f = tg.function(lambda x: x, jit_compile=True)
    with pytest.raises(ImportError, match=r'pip install "tapegrad\[jit\]"'):
        f(tg.constant(1.0))
    g = tg.function(lambda x: x * 2.0)  # jit_compile=None: eager, with one warning
    with pytest.warns(UserWarning, match="JAX is not installed, so the function runs eagerly"):
        np.testing.assert_allclose(g(tg.constant(1.0)).numpy(), 2.0)


def test_compat_tensorflow_has_function_and_name_scope():
    import tapegrad.compat.tensorflow as tf

    @tf.function
    def f(x):
        with tf.name_scope("block") as scope:
            assert scope == "block/"  # TensorFlow 2 returns the full scope
            return x * 2.0

    np.testing.assert_allclose(f(tf.constant([1.0])).numpy(), [2.0])


# --- NumPy forwards, randomness, check-numerics ----------------------------------------------
@tg.primitive("FunctionTestNumpySoftsign")
def _numpy_softsign(x):
    a = np.asarray(x)  # NumPy only: inside tg.function it runs as a host callback
    return a / (1.0 + np.abs(a))


@tg.RegisterGradient("FunctionTestNumpySoftsign")
def _numpy_softsign_grad(op, dy):
    return dy / (1.0 + tg.abs(op.inputs[0])) ** 2


def test_numpy_forwards_and_numpy_function_compile_as_host_callbacks():
    if type(tg.constant(1.0)._value) is not np.ndarray:
        pytest.skip("a NumPy-only forward is refused eagerly on another default backend")
    def f(x):
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.sum(_numpy_softsign(x) * x)
        c = tg.numpy_function(lambda a: np.cumsum(a) * 2.0, [x], tg.float64)
        return y, tape.gradient(y, x), c

    _close(*_eager_and_compiled(f, tg.constant([1.0, -2.0, 3.0])))


def test_random_numbers_are_fresh_on_every_compiled_call():
    g = tg.random.Generator.from_seed(7)
    f = tg.function(lambda x: x + g.normal((4,)) + tg.random.uniform((4,), seed=1),
                    jit_compile=True)
    x = tg.constant(np.zeros(4))
    a, b = f(x).numpy(), f(x).numpy()
    assert not np.allclose(a, b)
    assert f.experimental_get_tracing_count() == 1
    ints = tg.function(lambda: g.uniform((1000,), 0, 10, dtype=tg.int64), jit_compile=True)()
    assert ints.dtype == np.int64 and 0 <= int(tg.min(ints)) and int(tg.max(ints)) <= 9


def test_check_numerics_names_the_op_inside_a_compiled_function():
    f = tg.function(lambda x: tg.sum(tg.log(x)), jit_compile=True)
    tg.debugging.enable_check_numerics()
    try:
        with pytest.raises(tg.errors.NumericsError, match=r"^tg\.function\(<lambda>\): "
                           "check_numerics: op type 'Log' produced NaN in output 0 in the forward "
                           "computation"):
            f(tg.constant([1.0, -1.0]))
        np.testing.assert_allclose(f(tg.constant([1.0, 2.0])).numpy(), np.log(2.0))
    finally:
        tg.debugging.disable_check_numerics()


def test_variables_assigned_by_a_compiled_call_work_eagerly_afterwards():
    w = tg.Variable(np.ones((2, 2)))

    @tg.function(jit_compile=True)
    def f():
        w.assign(w * 2.0)

    f()
    x = tg.constant(np.ones((1, 2)))
    with tg.GradientTape() as tape:
        y = tg.sum(x @ w)  # NumPy data meets the Variable's (JAX) state
    np.testing.assert_allclose(float(y), 8.0)
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), np.ones((2, 2)))
    w.assign(np.zeros((2, 2)))
    np.testing.assert_allclose(w.numpy(), 0.0)


# --- device-resident values ---------------------------------------------------------------
_device_resident = pytest.mark.skipif(
    tg._backend.default_namespace().__name__.startswith("jax"),
    reason="JAX is the eager backend: results are plain JAX-array Tensors, never copied")


@pytest.fixture
def host_copies(monkeypatch):
    """Counts the host copies of device-resident values (the core's ``to_host``)."""
    from tapegrad import _structural

    made = []
    to_host = _structural.extensions.to_host

    def counted(array, name):
        made.append(name)
        return to_host(array, name)

    monkeypatch.setattr(_structural.extensions, "to_host", counted)
    return made


@_device_resident
def test_results_stay_on_the_device_until_read_and_are_copied_once(host_copies):
    f = tg.function(lambda x: tg.sin(x) * 2.0, jit_compile=True)
    x = tg.constant([0.5, 1.0])
    y = f(x)
    assert y.device == jax.devices()[0]  # the JAX device, as the Array API attribute
    assert (y.shape, y.dtype, y.ndim, y.size) == ((2,), np.float64, 1, 2)
    z = f(y)  # a result goes back in as it is
    assert host_copies == []
    np.testing.assert_allclose(z.numpy(), 2 * np.sin(2 * np.sin([0.5, 1.0])), rtol=1e-14)
    assert host_copies == ["<lambda>"]
    np.testing.assert_allclose((z + 1.0).numpy(), z.numpy() + 1.0)  # an eager op: NumPy's
    assert type((z * 1.0)._value) is type(x._value)
    assert f"{float(z[0]):.6f}" == f"{2 * np.sin(2 * np.sin(0.5)):.6f}" and len(host_copies) == 1
    assert z.device == jax.devices()[0]  # still held there too
    f(z)
    assert len(host_copies) == 1


@_device_resident
def test_a_tape_records_a_compiled_call_without_copying_its_outputs(host_copies):
    f = tg.function(lambda x: tg.sin(x) * 2.0, jit_compile=True)
    x = tg.constant(np.linspace(0.0, 1.0, 300))  # big enough that records may drop it
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    assert host_copies == [] and len(tape.operations) == 1
    assert tape.operations[0].output_shapes == ((300,),)
    g = tape.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), 2 * np.cos(np.linspace(0.0, 1.0, 300)), rtol=1e-14)


def test_differentiating_a_call_with_an_integer_argument_does_not_warn():
    f = tg.function(lambda x, k: tg.sum(x ** 2) * tg.astype(k, x.dtype), jit_compile=True)
    x = tg.constant([1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = f(x, tg.constant(3))
        g = tape.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), [6.0, 12.0])


def test_a_rebound_device_resident_value_is_not_read_stale():
    f = tg.function(lambda x: x * 2.0, jit_compile=True)
    y = f(tg.constant([1.0, 2.0]))
    y[0] = 10.0  # rebinds the Python object to a new (host) value
    np.testing.assert_allclose(f(y).numpy(), [20.0, 8.0])
    w = tg.Variable([1.0, 2.0])

    @tg.function(jit_compile=True)
    def step():
        w.assign(w * 3.0)

    step()
    w.assign([5.0, 6.0])  # eager assignment after a compiled one
    step()
    np.testing.assert_allclose(w.numpy(), [15.0, 18.0])


@_device_resident
def test_float64_state_stays_float64_in_eager_ops_outside_64_bit_mode():
    scope = getattr(jax, "enable_x64", None)  # thread-local (JAX >= 0.6): turned off here
    if not (callable(scope) and hasattr(scope, "value")):  # whatever the process's setting
        pytest.skip("this JAX has no scoped 64-bit switch to turn it off here")
    w = tg.Variable(np.array([1.0 / 3.0]))

    @tg.function(jit_compile=True)
    def step():
        w.assign(w + 1e-12)

    with scope(False):  # the user's JAX in 32-bit mode
        step()
        y = w * 3.0  # eager, on the host copy
        assert y.dtype == np.float64 and type(y._value) is type(tg.constant(1.0)._value)
        np.testing.assert_allclose(y.numpy(), (np.array([1.0 / 3.0]) + 1e-12) * 3.0,
                                   rtol=1e-15)


@_device_resident
def test_arrays_created_on_a_jax_device_are_device_resident(host_copies):
    f = tg.function(lambda x: x * 2.0, jit_compile=True)
    y = f(tg.constant([1.0 / 3.0, 2.0]))
    x = tg.asarray(np.array([1.0 / 3.0, 1.0]), device=y.device)  # as Array API code writes
    z = tg.zeros(2, device=y.device)
    for t in (x, z):
        assert t.device == y.device and t.dtype == np.float64  # float64 even in 32-bit mode
        assert type(t._value) is type(tg.constant(1.0)._value)  # eager ops: default backend
    np.testing.assert_allclose((x + z).numpy(), [1.0 / 3.0, 1.0], rtol=1e-15)
    np.testing.assert_allclose(f(x).numpy(), [2.0 / 3.0, 2.0], rtol=1e-15)
    assert host_copies == ["<lambda>"]  # only f(x)'s result was copied, by numpy()


def test_a_variable_a_program_only_reads_is_put_on_the_device_once():
    w = tg.Variable(np.array([1.0, 2.0]))
    f = tg.function(lambda x: x * w, jit_compile=True)
    x = tg.asarray(np.array([3.0, 4.0]), device=jax.devices()[0])
    f(x)  # the first call puts w's value on the device and keeps it there
    with jax.transfer_guard("disallow_explicit"):
        y = f(x)
    np.testing.assert_allclose(y.numpy(), [3.0, 8.0])
    w.assign([5.0, 6.0])  # a new value: the next call takes it, not the kept copy
    np.testing.assert_allclose(f(x).numpy(), [15.0, 24.0])


def _donating_step():
    """Variables v (read and written by the step) and w (only read), and the step."""
    v = tg.Variable(np.arange(4.0), name="v")
    w = tg.Variable(np.ones(4), name="w")

    @tg.function(jit_compile=True)
    def step():
        v.assign(v * 2.0 + w)

    step()
    step()  # v now holds the device array the last call wrote, with no host copy
    return v, w, step


@_device_resident
def test_a_step_donates_the_old_state_only_nothing_else_holds():
    from tapegrad._variables import device_array

    v, w, step = _donating_step()  # v: 0 1 2 3 -> 1 3 5 7 -> 3 7 11 15
    (program,) = step._programs.values()
    before = device_array(v).unsafe_buffer_pointer()
    step()  # v's old buffer was donated: XLA wrote the new value into it
    assert device_array(v).unsafe_buffer_pointer() == before
    assert program.donated == (0,)  # v (argument 0) donated; w, only read, never
    np.testing.assert_array_equal(v.numpy(), [7.0, 15.0, 23.0, 31.0])
    np.testing.assert_array_equal(w.numpy(), [1.0, 1.0, 1.0, 1.0])

    # what still holds v's value before a step keeps that value after it
    step()  # 15 31 47 63, no host copy
    snapshot = v._snapshot()  # as a tape's record keeps it: the device array, shared
    step()
    array = device_array(v)  # the device array itself
    step()
    read = v.read_value()  # a Tensor read eagerly (a host copy)
    step()
    view = v.numpy()  # a NumPy view
    step()
    with tg.GradientTape() as tape:  # a tape records a compiled call reading v
        y = tg.function(lambda: tg.sum(v * v), jit_compile=True)()
    step()
    want = [[15.0, 31.0, 47.0, 63.0]]
    for _ in range(5):
        want.append([2 * a + 1 for a in want[-1]])
    np.testing.assert_array_equal(snapshot.numpy(), want[0])
    np.testing.assert_array_equal(np.asarray(array), want[1])
    np.testing.assert_array_equal(read.numpy(), want[2])
    np.testing.assert_array_equal(view, want[3])
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [2 * a for a in want[4]])
    np.testing.assert_array_equal(v.numpy(), want[5])


@_device_resident
def test_no_donation_while_a_tape_records():
    from tapegrad._variables import device_array

    v, w, step = _donating_step()
    (program,) = step._programs.values()
    with tg.GradientTape():
        assert program._donated() == ()
        before = device_array(v).unsafe_buffer_pointer()
        step()  # the old buffer, not donated, is alive while the new one is written
        assert device_array(v).unsafe_buffer_pointer() != before
    assert program._donated() == (0,)
    np.testing.assert_array_equal(v.numpy(), [7.0, 15.0, 23.0, 31.0])


def test_a_training_step_called_ten_times_compiles_once(caplog):
    # the first call (state from the host, not donated) and the second (donated) compiled
    # two programs of one signature
    import logging

    def train(compiled):
        w = tg.Variable(np.linspace(-1.0, 1.0, 6).reshape(3, 2), name="w")
        opt = tg.optimizers.Adam(0.05)
        opt.build([w])  # its slots made before: a first call that made them would trace again
        x = tg.constant(np.arange(12.0).reshape(4, 3) / 10)

        def step(x):
            with tg.GradientTape() as tape:
                loss = tg.sum(tg.tanh(x @ w) ** 2)
            opt.apply_gradients(zip([tape.gradient(loss, w)], [w]))
            return loss

        step = tg.function(step, jit_compile=compiled)
        losses = [float(step(x)) for _ in range(10)]
        return w.numpy(), [v.numpy() for v in opt.variables], losses, step

    with jax.log_compiles(True), caplog.at_level(logging.WARNING):
        w, slots, losses, step = train(True)
    compiles = [r for r in caplog.records if "Compiling jit(program)" in r.getMessage()]
    assert len(compiles) == 1
    (program,) = step._programs.values()
    assert program.compiled._cache_size() == 1
    w_eager, slots_eager, losses_eager, _ = train(False)
    np.testing.assert_allclose(w, w_eager, rtol=1e-13)
    for a, b in zip(slots, slots_eager):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    np.testing.assert_allclose(losses, losses_eager, rtol=1e-13)


def test_the_tensors_only_path_gives_what_the_general_path_gives(monkeypatch):
    # Calls whose arguments are all Tensors find their program and inputs in one pass
    # (Function._call, _tensor_inputs); a keyword argument takes the general path (JAX's
    # trees, Program.run). Both must give the same results, Variables and gradients.
    from tapegrad import _function

    general = []
    run = _function._Program.run
    monkeypatch.setattr(_function._Program, "run",
                        lambda self, leaves: general.append(1) or run(self, leaves))

    def make():
        w = tg.Variable(np.array([0.5, -1.0, 2.0]), name="w")
        n = tg.Variable(np.array(0), trainable=False, name="n")

        def f(x, k):
            n.assign_add(1)
            w.assign(w * 0.5 + tg.astype(k, w.dtype))
            return {"y": tg.sin(x) * w, "k": k * 2, "note": "static"}

        return tg.function(f, jit_compile=True), w, n

    fast, w1, n1 = make()
    slow, w2, n2 = make()
    x = tg.constant([0.1, 0.2, 0.3])
    k = tg.asarray(np.int32(3), device=jax.devices()[0])
    host_ok = type(x._value) is np.ndarray  # another backend's host value: the general path
    a, b = fast(x, k), slow(x, k=k)  # first calls: traced, both general
    for step in range(4):  # later: results (device-resident) and a host-held Tensor go back in
        calls = len(general)
        xa, xb = (x, x) if step == 2 else (a["y"], b["y"])
        a, b = fast(xa, k), slow(xb, k=k)
        # only the keyword call took the general path
        assert len(general) == calls + 1 + (step == 2 and not host_ok)
        assert a["note"] == b["note"] == "static"
        for key in ("y", "k"):
            assert a[key].dtype == b[key].dtype
            np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
        np.testing.assert_array_equal(w1.numpy(), w2.numpy())
        assert int(n1.numpy()) == int(n2.numpy())
    assert a["k"].dtype == np.int32 and int(n1.numpy()) == 5
    with tg.GradientTape() as t1:
        t1.watch(x)
        y1 = tg.sum(fast(x, k)["y"] ** 2)
    with tg.GradientTape() as t2:
        t2.watch(x)
        y2 = tg.sum(slow(x, k=k)["y"] ** 2)
    g1, gw1 = t1.gradient(y1, [x, w1])
    g2, gw2 = t2.gradient(y2, [x, w2])
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    np.testing.assert_array_equal(gw1.numpy(), gw2.numpy())


def _mlp_training(compiled, steps=5):
    rng = np.random.default_rng(0)
    params = [tg.Variable(rng.normal(size=(8, 16)).astype(np.float32) / 3, name="w1"),
              tg.Variable(np.zeros(16, np.float32), name="b1"),
              tg.Variable(rng.normal(size=(16, 3)).astype(np.float32) / 4, name="w2")]
    opt = tg.optimizers.Adam(1e-2)

    def step(x, y):
        with tg.GradientTape() as tape:
            logits = tg.nn.relu(x @ params[0] + params[1]) @ params[2]
            loss = tg.mean(tg.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                           logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    batches = [(rng.normal(size=(4, 8)).astype(np.float32), rng.integers(0, 3, 4))
               for _ in range(steps)]
    return params, opt, (tg.function(step, jit_compile=True) if compiled else step), batches


def test_compiled_training_touches_no_host_memory_and_equals_eager_training(host_copies):
    params, opt, step, batches = _mlp_training(compiled=False)
    eager_losses = [float(step(tg.constant(x), tg.constant(y))) for x, y in batches]
    eager = [p.numpy() for p in params]
    params, opt, step, batches = _mlp_training(compiled=True)
    device = jax.devices()[0]
    data = [(tg.asarray(x, device=device), tg.asarray(y, device=device)) for x, y in batches]
    losses = [step(*data[0])]  # traces and compiles; copies the Variables to the device once
    with jax.transfer_guard("disallow_explicit"):  # any host-to-device copy raises
        losses += [step(x, y) for x, y in data[1:]]
    assert host_copies == []  # and no device-to-host copy either
    assert all(p.device == device for p in [*params, opt.iterations])
    np.testing.assert_allclose([float(v) for v in losses], eager_losses, rtol=1e-5)
    for p, e in zip(params, eager):
        assert p.dtype == np.float32
        np.testing.assert_allclose(p.numpy(), e, rtol=1e-5, atol=1e-6)
    assert int(opt.iterations) == len(batches)


def test_a_program_error_is_raised_at_the_call_or_the_first_wait_naming_the_function():
    if type(tg.constant(1.0)._value) is not np.ndarray:
        pytest.skip("a NumPy-only forward is refused eagerly on another default backend")

    def slow_then_bad(x):  # the error comes after a computation long enough to be waited for
        return _value_shaped(tg.sum(tg.tanh(x @ x @ x)) * 0.0 + 2.0)

    f = tg.function(slow_then_bad, jit_compile=True)
    with pytest.raises(TypeError, match=r"^tg\.function\(slow_then_bad\): host callback: op type "
                                        "'FunctionTestValueShaped' returned outputs"):
        f(tg.constant(np.ones((300, 300)) / 300)).numpy()


def test_kernels_without_an_array_api_function_stay_native_in_jax():
    # erf (gelu), scatter-add (the gradient of take) and scatter-update (x[k] = v) have JAX
    # kernels: a traced computation makes no host callback for them
    def f(a, i):
        x = tg.Tensor(a)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.sum(tg.nn.gelu(x)) + tg.sum(tg.take(x, tg.Tensor(i)) ** 2)
        z = x * 1.0
        z[0] = 5.0
        return tape.gradient(y, x)._value, z._value

    program = str(jax.make_jaxpr(f)(np.array([0.5, -1.0, 2.0]), np.array([0, 2, 2])))
    assert "callback" not in program and "erf" in program


def test_bad_arguments_to_function_and_config_raise():
    with pytest.raises(TypeError, match="tg.function: expected a function, got int"):
        tg.function(123)
    with pytest.raises(TypeError, match="jit_compile must be True, False or None, got 'yes'"):
        tg.function(lambda x: x, jit_compile="yes")
    with pytest.raises(TypeError, match="run_functions_eagerly: expected True or False, got 1"):
        tg.config.run_functions_eagerly(1)


@tg.primitive("FunctionTestValueShaped")
def _value_shaped(x):
    return np.full(int(np.asarray(x).sum()) + 1, 1.0)  # output shape from the values


@tg.primitive("FunctionTestEmptyOnZeros")
def _empty_on_zeros(x):
    return np.full(int(np.asarray(x).sum()), 1.0)


@tg.primitive("FunctionTestSpdOnly")
def _spd_only(x):
    return np.linalg.cholesky(np.asarray(x))  # fails on the zeros the shapes are found with


def test_host_callbacks_refuse_value_dependent_shapes_and_unfindable_shapes():
    if type(tg.constant(1.0)._value) is not np.ndarray:
        pytest.skip("a NumPy-only forward is refused eagerly on another default backend")
    with pytest.raises(TypeError, match=r"host callback: op type 'FunctionTestValueShaped' "
                                        r"returned outputs of shapes and dtypes \[\(\(3,\), .*"
                                        r"at run time but \[\(\(1,\), .*its output shape "
                                        "depends on its input values"):
        # raised at the call or, where the program runs asynchronously (a GPU), at the wait
        tg.function(lambda x: _value_shaped(x) * 2.0, jit_compile=True)(tg.constant([2.0])).numpy()
    with pytest.raises(TypeError, match="op type 'FunctionTestEmptyOnZeros' gives an empty "
                                        "output for zeros"):
        tg.function(lambda x: _empty_on_zeros(x), jit_compile=True)(tg.constant([2.0]))
    with pytest.raises(TypeError, match=r"op type 'FunctionTestSpdOnly' needs the values of its "
                                        r"inputs .* running it on zeros; that run failed with "
                                        "LinAlgError"):
        tg.function(lambda x: _spd_only(x), jit_compile=True)(tg.constant(np.eye(2)))


def test_a_variable_leaked_by_a_failed_trace_is_ignored_by_later_traces():
    state = {}

    @tg.function
    def leaks(x):
        state.setdefault(x.shape, tg.Variable(tg.zeros_like(x)))
        return x

    leaks(tg.constant([1.0]))
    with pytest.raises(ValueError, match=r"only supports Variables created on the first call"):
        leaks(tg.constant([1.0, 2.0]))  # leaves a Variable holding a tracer in `state`
    total = tg.Variable(0.0)

    @tg.function
    def step(x):
        total.assign_add(tg.sum(x))
        return total * 1.0

    assert float(step(tg.constant([1.0, 2.0]))) == 3.0
    assert float(step(tg.constant([1.0, 2.0]))) == 6.0 and float(total) == 6.0


def _fresh_process(code, **env):
    """Run ``code`` in a new interpreter (JAX not yet started); returns its stdout lines."""
    import os
    import subprocess
    import textwrap

    base = {k: v for k, v in os.environ.items() if k != "TAPEGRAD_ARRAY_BACKEND"}  # NumPy
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\n")


def test_the_users_jax_defaults_survive_import_and_compiled_calls():
    out = _fresh_process("""
        import jax
        before = {k: jax.config.values[k] for k in
                  ("jax_cpu_enable_async_dispatch", "jax_enable_x64")}
        import tapegrad as tg
        f = tg.function(lambda x: tg.sin(x) * 2.0, jit_compile=True)
        y = f(tg.constant([0.5]))
        print(float(y[0]), y.dtype)
        after = {k: jax.config.values[k] for k in before}
        print(before == after, after["jax_cpu_enable_async_dispatch"], after["jax_enable_x64"])
        print(jax.numpy.zeros(1).dtype)
    """)
    assert float(out[0].split()[0]) == pytest.approx(2 * np.sin(0.5))
    assert out[0].split()[1] == "float64"  # the program ran in 64-bit mode, for itself only
    assert out[1] == "True True False"  # JAX's default: asynchronous dispatch, 32-bit mode
    assert out[2] == "float32"


def _long_body(v):
    def body(x):
        for _ in range(300):  # a trace long enough for the other thread to run meanwhile
            x = tg.sin(x * v)
        return tg.sum(x)
    return body


def test_tracing_leaves_other_threads_variables_alone():
    import threading

    w = tg.Variable(np.linspace(-1.0, 1.0, 100))
    opt = tg.optimizers.SGD(0.01)
    errors, steps, stop = [], [], threading.Event()

    def eager_training():
        try:
            while not stop.is_set():
                with tg.GradientTape() as tape:
                    loss = tg.sum(w)
                opt.apply_gradients([(tape.gradient(loss, w), w)])
                steps.append(1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    thread = threading.Thread(target=eager_training)
    thread.start()
    try:
        for k in range(3):
            # sin(v x) converges to a fixed point for 1 < v < 2 (not chaotic: XLA's sin may
            # differ from NumPy's in the last bit)
            v = tg.Variable(np.full(50, 1.2 + 0.15 * k))
            got = tg.function(_long_body(v))(tg.constant(np.ones(50)))
            np.testing.assert_allclose(float(got), float(_long_body(v)(tg.constant(np.ones(50)))))
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert len(steps) > 0
    # w = w - 0.01 at every step: the eager thread saw only its own values
    np.testing.assert_allclose(w.numpy(), np.linspace(-1.0, 1.0, 100) - 0.01 * len(steps),
                               atol=1e-9)


def test_concurrent_first_calls_trace_once_and_all_get_the_result():
    import threading

    for _ in range(3):
        f = tg.function(_long_body(tg.Variable(np.full(8, 0.7))))
        results, errors = [], []

        def call():
            try:
                results.append(float(f(tg.constant(np.ones(8)))))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert f.experimental_get_tracing_count() == 1
        expected = float(_long_body(tg.constant(np.full(8, 0.7)))(tg.constant(np.ones(8))))
        np.testing.assert_allclose(results, [expected] * 4)


def test_a_variable_bound_in_one_thread_keeps_its_value_in_another():
    import threading

    from tapegrad._variables import bind_variables

    v = tg.Variable([1.0, 2.0])
    seen = []
    with bind_variables([(v, np.array([5.0, 6.0]))]) as scope:
        v.assign([7.0, 8.0])
        thread = threading.Thread(target=lambda: seen.append(v.numpy().copy()))
        thread.start()
        thread.join()
        np.testing.assert_array_equal(v.numpy(), [7.0, 8.0])
    np.testing.assert_array_equal(seen[0], [1.0, 2.0])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(scope.values[v._id], [7.0, 8.0])


def test_a_dtype_argument_is_static():
    f = tg.function(lambda x, dtype: tg.astype(x, dtype))
    assert int(f(tg.constant(1.5), tg.int32)) == 1
    assert f(tg.constant(1.5), tg.float32).dtype == tg.float32
    assert f.experimental_get_tracing_count() == 2  # one trace per dtype, as per Python value


# --- retracing warning, methods, 64-bit mode scoped to tapegrad (issue 19) ----------------------
def test_a_function_that_keeps_retracing_warns_once_naming_the_argument():
    f = tg.function(lambda x, scale: x * scale)
    with pytest.warns(UserWarning, match=r"5 out of the last 5 calls to <lambda> triggered "
                                         r"tg.function retracing.*argument 1 \('scale'\) is a "
                                         r"Python float whose value changes.*pass it as a Tensor"
                      ) as caught:
        for k in range(8):
            f(tg.constant([1.0]), float(k))
    assert len([w for w in caught if "retracing" in str(w.message)]) == 1
    assert caught[0].filename == __file__  # points at the call
    assert f.experimental_get_tracing_count() == 8


def test_changing_shapes_and_keywords_are_named_and_steady_calls_never_warn():
    import warnings

    g = tg.function(lambda x, *, n: x * n)
    with pytest.warns(UserWarning, match=r"argument 0 \('x'\) changes shape or dtype \(now "
                                         r"\(6,\), float64\).*argument 'n' is a Python int"):
        for k in range(1, 9):
            g(tg.constant(np.ones(k)), n=k)
    steady = tg.function(lambda x, scale: x * scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(20):
            steady(tg.constant([1.0, 2.0]), 3.0)
            steady(tg.constant([1.0, 2.0, 3.0]), 3.0)  # two signatures, alternating
    assert steady.experimental_get_tracing_count() == 2


class _Dense(tg.Module):
    def __init__(self, scale, name=None):
        super().__init__(name=name)
        self.w = tg.Variable(np.full((3, 2), scale))

    @tg.function(input_signature=[tg.TensorSpec((None, 3), tg.float64)])
    def __call__(self, x):
        return tg.matmul(x, self.w)


def test_a_method_with_an_input_signature_does_not_count_self():
    a, b = _Dense(1.0), _Dense(2.0)
    x = tg.constant(np.ones((2, 3)))
    np.testing.assert_array_equal(a(x).numpy(), np.full((2, 2), 3.0))
    np.testing.assert_array_equal(b(x).numpy(), np.full((2, 2), 6.0))  # not a's trace
    np.testing.assert_array_equal(a(x).numpy(), np.full((2, 2), 3.0))
    assert a(tg.constant(np.ones((4, 3)))).shape == (4, 2)
    assert _Dense.__call__.experimental_get_tracing_count() == 3  # a: 2 shapes, b: 1
    a.w.assign(np.full((3, 2), 5.0))  # state, read on each call
    np.testing.assert_array_equal(a(x).numpy(), np.full((2, 2), 15.0))
    with tg.GradientTape() as tape:
        loss = tg.sum(a(x) * a(x))
    np.testing.assert_allclose(tape.gradient(loss, a.w).numpy(), np.full((3, 2), 2 * 2 * 15.0))
    with pytest.raises(TypeError, match=r"__call__: argument 0 has shape \(2, 4\) and dtype "
                                        r"float64, which does not fit its input_signature "
                                        r"TensorSpec\(shape=\(None, 3\), dtype=float64"):
        a(tg.constant(np.ones((2, 4))))
    with pytest.raises(TypeError, match=r"input_signature has 1 TensorSpec\(s\) but the call "
                                        r"passes 2 positional argument\(s\)"):
        a(x, x)
    assert "bound tg.Function" in repr(a.__call__) and a.__call__.__self__ is a


def test_a_method_decorator_without_signature_and_eager_mode():
    class Counter(tg.Module):
        def __init__(self):
            super().__init__()
            self.total = tg.Variable(0.0)

        @tg.function
        def add(self, x, times=1):
            for _ in range(times):
                self.total.assign_add(tg.sum(x))
            return self.total * 1.0

    c = Counter()
    assert float(c.add(tg.constant([1.0, 2.0]))) == 3.0
    assert float(c.add(tg.constant([1.0, 2.0]), times=2)) == 9.0
    tg.config.run_functions_eagerly(True)
    try:
        assert float(c.add(tg.constant([1.0]))) == 10.0
    finally:
        tg.config.run_functions_eagerly(False)


def test_x64_caller_turns_64_bit_mode_on_for_the_call_only():
    from tapegrad import config

    call = config.x64_caller(jax)
    before = config.x64_enabled(jax)
    assert call(lambda a: (config.x64_enabled(jax), jax.numpy.zeros(1).dtype, a), (7,)) == (
        True, np.float64, 7)
    assert config.x64_enabled(jax) == before

    def fails():
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        call(fails, ())
    assert config.x64_enabled(jax) == before
    if hasattr(jax, "enable_x64") and hasattr(jax.enable_x64, "value"):
        with jax.enable_x64(False):  # the user's thread in 32-bit mode
            assert call(lambda: jax.numpy.zeros(1).dtype, ()) == np.float64
            assert jax.numpy.zeros(1).dtype == np.float32


def test_64_bit_mode_is_scoped_to_tapegrad_programs():
    out = _fresh_process("""
        import jax, jax.numpy as jnp, numpy as np, tapegrad as tg
        f = tg.function(lambda x: x * 2.0, jit_compile=True)
        y = f(tg.constant(1.0))
        print(jnp.zeros(1).dtype, jax.config.jax_enable_x64, y.dtype, float(y))
        v = tg.Variable(np.ones(2))

        @tg.function
        def step(x):
            v.assign_add(x)
            return tg.astype(tg.sum(v), tg.int64) + tg.argmax(x)

        r = step(tg.constant([1.0, 0.5]))
        # the state written back is NumPy, so eager ops on it stay in float64
        print(r.dtype, int(r), type(v.numpy()).__name__, (v * 2.0).dtype, jnp.zeros(1).dtype)
        with tg.GradientTape() as tape:
            x = tg.constant([0.5, 2.0])
            tape.watch(x)
            z = tg.sum(f(x) * x)
        g = tape.gradient(z, x)
        print(g.dtype, g.numpy().tolist(), jnp.ones(1).dtype, jnp.arange(2).dtype)
    """)
    assert out[0] == "float32 False float64 2.0"
    assert out[1] == "int64 3 ndarray float64 float32"
    assert out[2] == "float64 [2.0, 8.0] float32 int32"
    repeated = _fresh_process("""
        import jax, jax.numpy as jnp, numpy as np, tapegrad as tg
        f = tg.function(lambda x, k: (x / 3.0, k + 1), jit_compile=True)
        x, k = tg.constant(1.0), tg.constant(np.int64(2 ** 40))
        for _ in range(3):  # after the first: the Tensors-only path, on device-resident inputs
            x, k = f(x, k)
            assert jnp.zeros(1).dtype == np.float32 and not jax.enable_x64.value
        print(x.dtype, x.numpy() == 1.0 / 27.0, k.dtype, int(k) == 2 ** 40 + 3)
    """)
    assert repeated[0] == "float64 True int64 True"
    jax_backend = _fresh_process("""
        import jax, tapegrad as tg
        f = tg.function(lambda x: x * 2.0)
        print(jax.config.jax_enable_x64, f(tg.constant(1.0)).dtype, (tg.constant(1.0) * 2.0).dtype)
    """, TAPEGRAD_ARRAY_BACKEND="jax.numpy")
    assert jax_backend[0] == "True float64 float64"  # eager tapegrad on JAX arrays: process-wide


def test_a_call_that_reads_then_assigns_a_variable_differentiates_at_the_value_it_read():
    # the record of the call keeps the Variable's value before the call's own write, as the
    # eager computation does (it kept the written value: dy/dx was 20 instead of 2)
    def body(v):
        def f(x):
            y = x * v
            v.assign(v * 10.0)
            return y
        return f

    results = {}
    for mode in ("eager", "compiled"):
        v = tg.Variable(2.0)
        f = body(v) if mode == "eager" else tg.function(body(v))
        x = tg.constant(3.0)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        gx, gv = tape.gradient(y, [x, v])
        with tg.ForwardAccumulator(x, tg.constant(1.0)) as acc:
            z = f(x)
        results[mode] = (y.numpy(), gx.numpy(), gv.numpy(), acc.jvp(z).numpy(), v.numpy())
    np.testing.assert_allclose(results["eager"], [6.0, 2.0, 3.0, 20.0, 200.0])
    np.testing.assert_allclose(results["compiled"], results["eager"])


def test_a_closed_over_matrix_is_one_array_of_the_program_of_its_gradients():
    # W4 of benchmarks/bench_function.py: a Hessian-vector product of sum(tanh(A x)^2). A
    # gradient rule that transposed the constant A at trace time gave the program a new
    # constant per gradient (W4's held A three times) and ran 1.2-1.4x jax.jit's time
    n = 200
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, n))
    at = tg.constant(a)

    @tg.function
    def hvp(x, v):
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = tg.sum(tg.tanh(at @ x) ** 2)
            gv = tg.sum(inner.gradient(y, x) * v)
        return outer.gradient(gv, x)

    x, v = rng.normal(size=n) / n, rng.normal(size=n)
    got = hvp(tg.constant(x), tg.constant(v)).numpy()
    t = np.tanh(a @ x)
    np.testing.assert_allclose(got, a.T @ (2 * (1 - 3 * t**2) * (1 - t**2) * (a @ v)))
    (program,) = hvp._programs.values()
    from tapegrad import config

    with config.x64_scope(jax):  # the program as traced, before XLA lays it out for a device
        stablehlo = program.compiled.lower(x, v).as_text()
    matrix = f"tensor<{n}x{n}xf64>"
    assert len(re.findall(rf"stablehlo.constant dense<[^>]*> : {matrix}", stablehlo)) == 1  # A
    assert not re.findall(rf"stablehlo.transpose .*{matrix}", stablehlo)  # no transposed copy


def test_float32_products_trace_at_float32_precision_unless_tensor_float_32_is_enabled():
    # On a GPU with TF32 (Ampere and later) JAX's default precision rounds float32 products'
    # inputs to 10 mantissa bits; tapegrad's programs ask for float32 unless told otherwise
    f = tg.function(lambda a, b: a @ b)
    a = tg.constant(np.ones((2, 2), np.float32))

    def precision():
        (program,) = f._programs.values()
        ones = jax.numpy.ones((2, 2), jax.numpy.float32)
        with tg.config.x64_scope(jax):  # as tapegrad's calls run it
            lowered = program.compiled.lower(ones, ones).as_text()
        return re.findall(r"precision = \[(\w+), \w+\]", lowered)

    assert not tg.config.experimental.tensor_float_32_execution_enabled()
    f(a, a)
    assert precision() == ["HIGHEST"]
    try:
        tg.config.experimental.enable_tensor_float_32_execution(True)
        np.testing.assert_array_equal(f(a, a).numpy(), np.full((2, 2), 2.0))
        assert precision() == ["DEFAULT"]  # traced again at JAX's default precision
        assert f.experimental_get_tracing_count() == 2
    finally:
        tg.config.experimental.enable_tensor_float_32_execution(False)
    with pytest.raises(TypeError, match="enable_tensor_float_32_execution: expected True or "
                                        "False, got 1"):
        tg.config.experimental.enable_tensor_float_32_execution(1)


def test_a_closed_over_tensor_of_the_default_backend_meets_the_traced_values():
    # on another default backend (array_api_strict) the constant's ops took JAX tracers and
    # raised TypeError ("Only numeric dtypes are allowed in matmul")
    at = tg.constant(np.arange(9.0).reshape(3, 3) / 9.0)

    def loss_and_grad(x):
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.sum(tg.sin(at @ x) * at[0])
        return y, tape.gradient(y, x)

    x = tg.constant(np.array([1.0, -2.0, 0.5]))
    got = tg.function(loss_and_grad)(x)
    for g, e in zip(got, loss_and_grad(x)):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-12)


def test_closed_over_matrices_of_matrix_products_are_one_array_each_in_the_gradients_program():
    # the gradient of X @ W for W is X^T dC: transposing the constant X while tracing put a
    # transposed copy of it into the program beside X (likewise Z in W^T @ Z)
    rng = np.random.default_rng(0)
    xt, zt = tg.constant(rng.normal(size=(20, 5))), tg.constant(rng.normal(size=(5, 30)))

    def gradient(w):
        with tg.GradientTape() as tape:
            tape.watch(w)
            loss = tg.sum(tg.sin(xt @ w) ** 2) + tg.sum(tg.cos(w.mT @ zt))
        return tape.gradient(loss, w)

    w = tg.constant(rng.normal(size=(5, 3)))
    f = tg.function(gradient)
    np.testing.assert_allclose(f(w).numpy(), gradient(w).numpy(), rtol=1e-12)
    (program,) = f._programs.values()
    with tg.config.x64_scope(jax):
        stablehlo = program.compiled.lower(w.numpy()).as_text()
    constants = re.findall(r"stablehlo.constant dense<[^>]*> : tensor<(\w+)xf64>", stablehlo)
    assert sorted(c for c in constants if "x" in c) == ["20x5", "5x30"]


def test_the_first_trace_is_not_recorded_by_the_enclosing_tape_or_accumulator():
    # the first call traces f: the enclosing tape recorded the trace's ops (on JAX tracers,
    # ['Mul', 'Sin', 'Mul'] before the call's own op) and an accumulator saw them
    v = tg.Variable(np.array([0.5, 1.0]))

    @tg.function(jit_compile=True)
    def f(x):
        return tg.sin(v * x) * 2.0

    x0 = np.array([0.3, -0.7])
    x = tg.constant(x0)
    for call in range(2):
        with tg.GradientTape(persistent=True) as tape:
            y = f(x)
        assert [op.type for op in tape.operations] == ["Function:f"], call
        np.testing.assert_allclose(tape.gradient(y, v).numpy(),
                                   2.0 * np.cos(v.numpy() * x0) * x0, rtol=1e-12)
    f2 = tg.function(f.__wrapped__, jit_compile=True)  # a first call under an accumulator
    for call in range(2):
        with tg.GradientTape(persistent=True) as tape:
            with tg.ForwardAccumulator(x, tg.constant(np.ones(2))) as acc:
                y = f2(x)
        assert not any(isinstance(t._value, jax.core.Tracer)
                       for op in tape.operations for t in (*op.inputs, *op.outputs)
                       if isinstance(t, tg.Tensor)), call
        np.testing.assert_allclose(acc.jvp(y).numpy(), 2.0 * np.cos(v.numpy() * x0) * v.numpy(),
                                   rtol=1e-12)


def test_forward_mode_around_a_compiled_while_loop_without_a_bound_is_jaxs_jvp():
    # a compiled call's tangents were the transpose of its VJP, which a while_loop without
    # maximum_iterations does not have: "reverse-mode differentiation of a compiled while_loop
    # needs a bound ... Forward mode (tg.jvp, ForwardAccumulator) works without it", raised
    # by forward mode. Now the call's JVP rule runs the program under an accumulator.
    v = tg.Variable(np.array([1.25, 0.5]))

    def f(w):
        return tg.while_loop(lambda x: tg.sum(x) < 6.0, lambda x: x * w * v + 0.5, [w])[0]

    w0, t0, tv = np.array([1.5, 1.2]), np.array([1.0, -0.5]), np.array([0.25, 2.0])

    def want(w, t, dv):
        with tg.config.x64_scope(jax):
            g = lambda w, v: jax.lax.while_loop(lambda x: x.sum() < 6.0,  # noqa: E731
                                                lambda x: x * w * v + 0.5, w)
            return [np.asarray(a) for a in jax.jvp(g, (w, v.numpy()), (t, dv))]

    fc = tg.function(f, jit_compile=True)
    for call in range(2):  # the first call traces f, the second runs the program
        y, dy = tg.jvp(fc, (tg.constant(w0),), (tg.constant(t0),))
        ref = want(w0, t0, np.zeros(2))
        np.testing.assert_allclose(y.numpy(), ref[0], rtol=1e-12)
        np.testing.assert_allclose(dy.numpy(), ref[1], rtol=1e-12)
        w = tg.constant(w0)
        with tg.ForwardAccumulator([w, v], [tg.constant(t0), tg.constant(tv)]) as acc:
            y = fc(w)
        np.testing.assert_allclose(acc.jvp(y).numpy(), want(w0, t0, tv)[1], rtol=1e-12)
    # reverse mode: checkpointed (UNBOUNDED_WHILE_SLOTS), equal to the eager loop's gradient
    np.testing.assert_allclose(tg.grad(lambda w: tg.sum(fc(w)))(tg.constant(w0)).numpy(),
                               tg.grad(lambda w: tg.sum(f(w)))(tg.constant(w0)).numpy(),
                               rtol=1e-12)
