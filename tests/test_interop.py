"""JAX interop (tg.to_jax, tg.from_jax): values, custom gradients respected, every JAX
transformation on to_jax functions and every tapegrad one on from_jax ops, to second order,
eagerly and compiled; pytrees; errors."""
import numpy as np
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")
jnp = jax.numpy
# the references in float64, as tapegrad computes: JAX's 64-bit mode on in each test (_x64)

# every test also runs with TAPEGRAD_ARRAY_BACKEND=array_api_strict: from_jax's outputs are
# then that backend's arrays
_STRICT = tg._backend.default_namespace().__name__.startswith("array_api_strict")

X = np.array([0.3, -1.2, 2.0])


@pytest.fixture(autouse=True)
def _x64():
    """JAX's 64-bit mode on in each test only (thread-local, never process-wide)."""
    with tg.config.x64_scope(jax):
        yield


# --- to_jax --------------------------------------------------------------------------------
@tg.custom_gradient
def _cube_with_surrogate(x):
    """x**3 whose gradient is the surrogate 10 * x (not 3 x**2): tells which one JAX used."""
    def grad_fn(dy):
        return dy * 10.0 * x
    return x * x * x, grad_fn


def _f(x):
    return tg.sum(_cube_with_surrogate(x) + tg.sin(x))


def _custom_grad(x):  # what the custom gradient says d f / dx is
    return 10.0 * x + np.cos(x)


def test_to_jax_value_and_custom_gradient():
    g = tg.to_jax(_f)
    x = jnp.asarray(X)
    out = g(x)
    assert isinstance(out, jax.Array) and out.dtype == jnp.float64
    np.testing.assert_allclose(out, np.sum(X ** 3 + np.sin(X)), rtol=1e-13)
    np.testing.assert_allclose(jax.grad(g)(x), _custom_grad(X), rtol=1e-13)
    assert not np.allclose(jax.grad(g)(x), 3 * X ** 2 + np.cos(X))  # not the true derivative


def test_to_jax_under_jit_and_vmap():
    g = tg.to_jax(_f)
    x = jnp.asarray(X)
    np.testing.assert_allclose(jax.jit(g)(x), np.sum(X ** 3 + np.sin(X)), rtol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.grad(g))(x), _custom_grad(X), rtol=1e-13)
    xs = jnp.stack([x, 2 * x])
    np.testing.assert_allclose(jax.vmap(g)(xs), [np.sum(r ** 3 + np.sin(r)) for r in
                                                 (X, 2 * X)], rtol=1e-13)
    np.testing.assert_allclose(jax.vmap(jax.grad(g))(xs), [_custom_grad(X),
                                                           _custom_grad(2 * X)], rtol=1e-13)


def test_to_jax_jvp_is_tapegrads_forward_mode():
    g = tg.to_jax(_f)
    v = np.array([1.0, -2.0, 0.5])
    y, t = jax.jvp(g, (jnp.asarray(X),), (jnp.asarray(v),))
    _, t_tg = tg.jvp(_f, (tg.constant(X),), (tg.constant(v),))
    np.testing.assert_allclose(y, np.sum(X ** 3 + np.sin(X)), rtol=1e-13)
    np.testing.assert_allclose(t, t_tg.numpy(), rtol=1e-13)
    np.testing.assert_allclose(t, _custom_grad(X) @ v, rtol=1e-13)  # the custom rule's JVP
    np.testing.assert_allclose(jax.jit(lambda x, v: jax.jvp(g, (x,), (v,))[1])(X, v),
                               _custom_grad(X) @ v, rtol=1e-13)


def test_to_jax_second_order():
    g = tg.to_jax(lambda x: tg.sum(tg.sin(x) ** 3))
    x = jnp.asarray(X)
    s, c = np.sin(X), np.cos(X)
    analytic = np.diag(6 * s * c ** 2 - 3 * s ** 3)  # d2/dx2 sin^3 x
    np.testing.assert_allclose(jax.hessian(g)(x), analytic, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jax.jacrev(jax.jacrev(g))(x), analytic, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jax.grad(lambda x: jax.grad(g)(x)[0])(x),
                               analytic[0], rtol=1e-12, atol=1e-14)
    # with the surrogate: the second derivative is that of the custom gradient 10 x + cos x
    h = jax.hessian(tg.to_jax(_f))(x)
    np.testing.assert_allclose(h, np.diag(10.0 - np.sin(X)), rtol=1e-13)


def test_to_jax_pytrees_and_float32():
    def f(d):  # dict in, tuple out
        return d["a"] * d["b"], tg.sum(d["a"])

    g = tg.to_jax(f)
    a = jnp.asarray([1.0, 2.0], jnp.float32)
    b = jnp.asarray([3.0, -1.0], jnp.float32)
    prod, total = g({"a": a, "b": b})
    assert prod.dtype == jnp.float32 and total.dtype == jnp.float32
    np.testing.assert_allclose(prod, [3.0, -2.0])
    np.testing.assert_allclose(total, 3.0)
    ga = jax.grad(lambda d: g(d)[0].sum() + g(d)[1])({"a": a, "b": b})
    assert set(ga) == {"a", "b"}
    np.testing.assert_allclose(ga["a"], b + 1)
    np.testing.assert_allclose(ga["b"], a)


def test_to_jax_numpy_forward_runs_as_host_callback_under_jit():
    @tg.custom_gradient
    def np_sin(x):
        y = tg.numpy_function(np.sin, [x], tg.float64)
        return y, lambda dy: dy * tg.cos(x)

    g = tg.to_jax(lambda x: tg.sum(np_sin(x) * 2.0))
    np.testing.assert_allclose(jax.jit(g)(X), 2 * np.sum(np.sin(X)), rtol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.grad(g))(X), 2 * np.cos(X), rtol=1e-13)


def test_to_jax_integer_input_gets_no_tangent():
    g = tg.to_jax(lambda x, n: tg.sum(x * tg.astype(n, x.dtype)))
    n = jnp.asarray([1, 2, 3])
    np.testing.assert_allclose(jax.grad(g)(jnp.asarray(X), n), [1.0, 2.0, 3.0])


def test_to_jax_refuses_a_non_callable():
    with pytest.raises(TypeError, match=r"tg.to_jax: expected a function of Tensors, got a int"):
        tg.to_jax(3)


def test_to_jax_refuses_an_output_that_is_not_an_array():
    with pytest.raises(TypeError, match=r"output leaf 0 is a str"):
        tg.to_jax(lambda x: "no")(jnp.asarray(X))


# --- from_jax ------------------------------------------------------------------------------
_sin_times = tg.from_jax(lambda x, y: jnp.sin(x) * y)
A = np.array([0.5, 1.0, -0.7])
B = np.array([2.0, 3.0, -1.5])


def test_from_jax_value_eagerly_on_numpy():
    out = _sin_times(tg.constant(A), B)
    assert isinstance(out, tg.Tensor) and out.dtype == np.float64 and out.shape == (3,)
    np.testing.assert_allclose(out.numpy(), np.sin(A) * B, rtol=1e-15)
    # the default backend's array
    assert type(out._value).__module__.startswith("array_api_strict" if _STRICT else "numpy")


@pytest.mark.parametrize("compiled", [False, True])
def test_from_jax_gradient_jvp_and_hessian(compiled):
    def loss(x, y):
        return tg.sum(_sin_times(x, y))

    def derivatives(x, y):
        gx, gy = tg.grad(loss, argnums=(0, 1))(x, y)
        _, jv = tg.jvp(lambda x: _sin_times(x, y), (x,), (tg.ones_like(x),))
        h = tg.hessian(loss)(x, y)
        with tg.GradientTape() as tape:
            tape.watch(y)
            gx2 = tg.grad(loss)(x, y)
        dgx_dy = tape.jacobian(gx2, y)  # reverse over reverse, mixed
        return gx, gy, jv, h, dgx_dy

    fn = tg.function(derivatives) if compiled else derivatives
    gx, gy, jv, h, dgx_dy = fn(tg.constant(A), tg.constant(B))
    np.testing.assert_allclose(gx.numpy(), np.cos(A) * B, rtol=1e-14)
    np.testing.assert_allclose(gy.numpy(), np.sin(A), rtol=1e-14)
    np.testing.assert_allclose(jv.numpy(), np.cos(A) * B, rtol=1e-14)
    np.testing.assert_allclose(h.numpy(), np.diag(-np.sin(A) * B), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(dgx_dy.numpy(), np.diag(np.cos(A)), rtol=1e-14, atol=1e-15)


def test_from_jax_forward_over_forward_and_third_order():
    x = tg.constant(A)
    with tg.ForwardAccumulator(x, tg.ones_like(x)) as outer:
        with tg.ForwardAccumulator(x, tg.ones_like(x)) as inner:
            y = _sin_times(x, B)
        jv = inner.jvp(y)
    np.testing.assert_allclose(jv.numpy(), np.cos(A) * B, rtol=1e-14)
    np.testing.assert_allclose(outer.jvp(jv).numpy(), -np.sin(A) * B, rtol=1e-14)
    third = tg.grad(lambda x: tg.sum(tg.grad(lambda x: tg.sum(
        tg.grad(lambda x: tg.sum(_sin_times(x, B)))(x)))(x)))(x)
    np.testing.assert_allclose(third.numpy(), -np.cos(A) * B, rtol=1e-14)


def test_from_jax_pytrees_dict_in_tuple_out():
    op = tg.from_jax(lambda d: (d["x"] ** 2, jnp.sum(d["x"] * d["w"])))
    x, w = tg.constant(A), tg.constant(B)
    sq, dot = op({"x": x, "w": w})
    np.testing.assert_allclose(sq.numpy(), A ** 2)
    np.testing.assert_allclose(float(dot), A @ B)
    with tg.GradientTape() as tape:
        tape.watch([x, w])
        sq, dot = op({"x": x, "w": w})
        total = tg.sum(sq) + dot
    gx, gw = tape.gradient(total, [x, w])
    np.testing.assert_allclose(gx.numpy(), 2 * A + B)
    np.testing.assert_allclose(gw.numpy(), A)


def test_from_jax_python_number_leaves_are_static_and_integer_inputs_get_none():
    op = tg.from_jax(lambda x, n, k: x * n ** k)
    x, n = tg.constant(A), tg.constant(np.array([1, 2, 3]))
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(op(x, n, 2))
    gx, gn = tape.gradient(y, [x, n])
    np.testing.assert_allclose(gx.numpy(), [1.0, 4.0, 9.0])
    assert gn is None


def test_from_jax_complex_gradient_has_tapegrads_convention():
    # tapegrad's gradient of a holomorphic op is dy * conj(f'(z)) (TensorFlow's); jax.grad's
    # is the conjugate
    op = tg.from_jax(lambda z: z * z)
    z = tg.constant(np.array([1.0 + 2.0j, -0.5 + 0.3j]))
    with tg.GradientTape() as tape:
        tape.watch(z)
        y = tg.sum(tg.real(op(z)))
    got = tape.gradient(y, z).numpy()
    with tg.GradientTape() as tape:
        tape.watch(z)
        y = tg.sum(tg.real(z * z))
    np.testing.assert_allclose(got, tape.gradient(y, z).numpy(), rtol=1e-15)
    np.testing.assert_allclose(got, np.conj(2 * z.numpy()), rtol=1e-15)


def test_round_trip_to_jax_of_from_jax():
    # tapegrad calling JAX calling tapegrad: values and gradients to second order
    inner = tg.from_jax(lambda x: jnp.exp(x) * x)
    g = tg.to_jax(lambda x: tg.sum(inner(x)))
    x = jnp.asarray(A)
    np.testing.assert_allclose(jax.grad(g)(x), np.exp(A) * (1 + A), rtol=1e-14)
    np.testing.assert_allclose(jax.hessian(g)(x), np.diag(np.exp(A) * (2 + A)), rtol=1e-14,
                               atol=1e-15)


def test_from_jax_refuses_a_non_callable():
    with pytest.raises(TypeError, match=r"tg.from_jax: expected a function of JAX arrays, "
                                        r"got a str"):
        tg.from_jax("jnp.sin")


def test_from_jax_refuses_an_output_that_is_not_an_array():
    op = tg.from_jax(lambda x: "text")
    with pytest.raises(TypeError, match=r"tg.from_jax\(<lambda>\): output leaf 0 is a str"):
        op(tg.constant(A))


def test_top_level_names():
    assert {"to_jax", "from_jax"} <= set(tg.__all__)
    assert tg.to_jax is tg.interop.to_jax and tg.from_jax is tg.interop.from_jax


def test_to_jax_known_gap_second_order_through_a_custom_forward():
    # documented limitation: a grad_fn that reads the custom op's output y gets JAX's
    # derivative of the forward (3 x**2) at second order, where tapegrad's tapes use the
    # custom gradient (dy/dx = y = x**3); first order agrees
    @tg.custom_gradient
    def c(x):
        y = x * x * x
        return y, lambda dy: dy * y

    f = lambda x: tg.sum(c(x))  # noqa: E731
    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(jax.grad(tg.to_jax(f))(jnp.asarray(x)), x ** 3, rtol=1e-14)
    np.testing.assert_allclose(np.diag(tg.hessian(f)(tg.constant(x)).numpy()), x ** 3)
    np.testing.assert_allclose(np.diag(jax.hessian(tg.to_jax(f))(jnp.asarray(x))), 3 * x ** 2)
