"""The functional transforms (tg.grad, value_and_grad, vjp, jacrev), GradientTape.batch_jacobian
and tg.recompute_grad: values against hand-derived derivatives, tapes and central differences."""
import numpy as np
import pytest

import tapegrad as tg

A = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])
X = np.array([0.4, -0.9, 1.3])


def _f(x):
    """sum(tanh(A x)^2): gradient 2 A^T (t (1 - t^2)), t = tanh(A x)."""
    return tg.sum(tg.tanh(tg.matmul(tg.constant(A), x)) ** 2)


def _f_grad(x):
    t = np.tanh(A @ x)
    return 2 * A.T @ (t * (1 - t ** 2))


def _f_hessian(x):
    t = np.tanh(A @ x)
    return A.T @ np.diag(2 * (1 - t ** 2) * (1 - 3 * t ** 2)) @ A


def _close(t, expected, **kw):
    np.testing.assert_allclose(t.numpy(), expected, **{"rtol": 1e-12, "atol": 1e-12, **kw})


# --- grad and value_and_grad -------------------------------------------------------------------
def test_grad_matches_the_hand_derived_gradient_and_the_tape():
    x = tg.constant(X)
    g = tg.grad(_f)(x)
    _close(g, _f_grad(X))
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = _f(x)
    _close(g, tape.gradient(y, x).numpy())


def test_grad_of_grad_is_the_second_derivative():
    def cube(x):
        return x ** 3

    assert float(tg.grad(cube)(2.0)) == pytest.approx(12.0)
    assert float(tg.grad(tg.grad(cube))(2.0)) == pytest.approx(12.0)
    assert float(tg.grad(tg.grad(tg.grad(cube)))(2.0)) == pytest.approx(6.0)


def test_jacrev_of_grad_is_the_hessian_and_check_gradients_agrees():
    x = tg.constant(X)
    _close(tg.jacrev(tg.grad(_f))(x), _f_hessian(X))
    _close(tg.jacrev(tg.jacrev(_f))(x), _f_hessian(X))
    tg.test.check_gradients(tg.grad(_f), [X], order=2)  # grad's own gradient, twice


def test_grad_argnums_int_tuple_and_negative():
    def f(x, y, z):
        return tg.sum(x * y) + 3.0 * z

    x, y = tg.constant([1.0, 2.0]), tg.constant([5.0, 7.0])
    _close(tg.grad(f)(x, y, 2.0), [5.0, 7.0])
    gx, gz = tg.grad(f, argnums=(0, 2))(x, y, 2.0)
    _close(gx, [5.0, 7.0])
    assert float(gz) == 3.0
    _close(tg.grad(f, argnums=-2)(x, y, 2.0), [1.0, 2.0])
    (gy,) = tg.grad(f, argnums=(1,))(x, y, 2.0)
    _close(gy, [1.0, 2.0])


def test_grad_pytrees_of_dicts_lists_tuples_and_none():
    def f(params, data):
        w, (b, extra) = params["w"], params["rest"]
        return tg.sum(w * data[0]) + b * data[1] + 0.0 * extra[0]

    params = {"w": tg.constant([1.0, 2.0]), "rest": (tg.constant(3.0), [1.5, None])}
    g = tg.grad(f)(params, [tg.constant([4.0, -1.0]), 2.0])
    assert set(g) == {"w", "rest"} and isinstance(g["rest"], tuple)
    assert isinstance(g["rest"][1], list) and g["rest"][1][1] is None
    _close(g["w"], [4.0, -1.0])
    assert float(g["rest"][0]) == 2.0
    assert float(g["rest"][1][0]) == 0.0  # a Python float leaf: a scalar Tensor


def test_grad_keeps_shape_and_dtype_and_gives_zeros_for_unconnected_inputs():
    x = tg.constant(np.ones((2, 3), np.float32))
    y = tg.constant(np.ones(4, np.float64))
    gx, gy = tg.grad(lambda x, y: tg.sum(x * x), argnums=(0, 1))(x, y)
    assert (gx.shape, gx.dtype, gy.shape, gy.dtype) == ((2, 3), np.float32, (4,), np.float64)
    _close(gx, 2 * np.ones((2, 3)))
    _close(gy, np.zeros(4))


def test_grad_has_aux_and_value_and_grad():
    def f(x):
        return tg.sum(x ** 2), {"mean": tg.mean(x), "label": "ok"}

    x = tg.constant([1.0, 3.0])
    g, aux = tg.grad(f, has_aux=True)(x)
    _close(g, [2.0, 6.0])
    assert float(aux["mean"]) == 2.0 and aux["label"] == "ok"
    (value, aux), g = tg.value_and_grad(f, has_aux=True)(x)
    assert float(value) == 10.0 and float(aux["mean"]) == 2.0
    _close(g, [2.0, 6.0])
    value, g = tg.value_and_grad(_f)(tg.constant(X))
    assert float(value) == pytest.approx(np.sum(np.tanh(A @ X) ** 2))
    _close(g, _f_grad(X))


def test_grad_passes_keyword_arguments_through():
    def f(x, *, scale):
        return tg.sum(x) * scale

    _close(tg.grad(f)(tg.constant([1.0, 2.0]), scale=4.0), [4.0, 4.0])


def test_grad_treats_each_argument_and_closures_as_distinct_like_jax():
    x = tg.constant(3.0)
    # JAX: the closed-over x is a constant, only the argument is differentiated
    assert float(tg.grad(lambda y: y * x)(x)) == 3.0
    ga, gb = tg.grad(lambda a, b: a * b * b, argnums=(0, 1))(x, x)
    assert (float(ga), float(gb)) == (9.0, 18.0)


def test_grad_of_a_variable_argument():
    v = tg.Variable([1.0, -2.0])
    _close(tg.grad(lambda w: tg.sum(w ** 3))(v), [3.0, 12.0])


def test_grad_under_an_outer_tape_is_differentiable():
    x = tg.constant([0.5, 1.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        g = tg.grad(lambda y: tg.sum(tg.sin(y)))(x)  # cos(x)
        s = tg.sum(g)
    _close(tape.gradient(s, x), -np.sin([0.5, 1.0]))


def test_grad_respects_a_custom_surrogate_gradient():
    @tg.custom_gradient
    def spike(x):
        return tg.astype(x > 0, x.dtype), lambda dy: dy / (1.0 + tg.abs(x)) ** 2

    x = tg.constant([-1.0, 0.5, 3.0])
    _close(tg.grad(lambda x: tg.sum(spike(x)))(x), 1 / (1 + np.abs([-1.0, 0.5, 3.0])) ** 2)
    rounded = tg.straight_through(tg.round)
    _close(tg.jacrev(rounded)(x), np.eye(3))
    _close(tg.grad(lambda x: tg.sum(rounded(x) * x))(x), np.round([-1.0, 0.5, 3.0]) + [-1, .5, 3])


@pytest.mark.parametrize("out, message", [
    (lambda x: x * 2.0, r"scalar-output functions; f returned an output of shape \(3,\)"),
    (lambda x: (tg.sum(x), x), "f must return a scalar, but it returned a tuple of length 2"),
    (lambda x: tg.astype(tg.sum(x), tg.int64), "real floating scalar; it returned dtype int64"),
    (lambda x: None, r"f returned None; it must return the scalar to differentiate \(a missing "),
])
def test_grad_needs_a_scalar_floating_output(out, message):
    with pytest.raises(TypeError, match=message):
        tg.grad(out)(tg.constant(X))
    with pytest.raises(TypeError, match="^value_and_grad: "):
        tg.value_and_grad(out)(tg.constant(X))


def test_grad_argument_errors():
    def f(x, y):
        return tg.sum(x)

    x = tg.constant(X)
    with pytest.raises(TypeError, match="^grad: differentiating with respect to argnums=2 requires at least 3 positional arguments"):
        tg.grad(f, argnums=2)(x, x)
    with pytest.raises(TypeError, match="argnums must be an int or a tuple of ints"):
        tg.grad(f, argnums="x")(x, x)
    with pytest.raises(ValueError, match="argnums is empty"):
        tg.grad(f, argnums=())(x, x)
    with pytest.raises(TypeError, match="argument 1 has a leaf of dtype int64; only floating"):
        tg.grad(f, argnums=1)(x, tg.constant([1, 2]))
    with pytest.raises(TypeError, match="has_aux=True, f must return a pair"):
        tg.grad(lambda x: tg.sum(x), has_aux=True)(x)


def test_transformed_functions_are_named_after_f():
    assert tg.grad(_f).__name__ == "grad(_f)"
    assert tg.jacrev(_f).__name__ == "jacrev(_f)"
    assert {"grad", "value_and_grad", "vjp", "jacrev", "recompute_grad"} <= set(tg.__all__)


# --- vjp -------------------------------------------------------------------------------------
def test_vjp_returns_one_gradient_per_primal():
    def f(x, y):
        return x * y, tg.sum(x)

    x, y = tg.constant([1.0, 2.0]), tg.constant([3.0, 5.0])
    out, vjp_fn = tg.vjp(f, x, y)
    _close(out[0], [3.0, 10.0])
    gx, gy = vjp_fn((tg.constant([1.0, -1.0]), 2.0))
    _close(gx, [3.0 + 2.0, -5.0 + 2.0])
    _close(gy, [1.0, -2.0])
    gx, gy = vjp_fn((tg.constant([0.0, 1.0]), 0.0))  # vjp_fn can be called again
    _close(gx, [0.0, 5.0])
    _close(gy, [0.0, 2.0])


def test_vjp_equals_the_transposed_jacobian_on_pytrees():
    def f(p):
        return {"a": tg.sin(p["x"]) * p["y"][0], "b": [tg.sum(p["x"] ** 2)]}

    p = {"x": tg.constant(X), "y": [tg.constant(2.0)]}
    out, vjp_fn = tg.vjp(f, p)
    ct = {"b": [3.0], "a": np.array([1.0, -2.0, 0.5])}  # dicts match by key, as in JAX
    (g,) = vjp_fn(ct)
    _close(g["x"], ct["a"] * 2.0 * np.cos(X) + 3.0 * 2 * X)
    _close(g["y"][0], np.dot(ct["a"], np.sin(X)))
    jac = tg.jacrev(f)(p)
    _close(g["x"], ct["a"] @ jac["a"]["x"].numpy() + 3.0 * jac["b"][0]["x"].numpy())


def test_vjp_has_aux_integer_primals_and_unconnected():
    def f(x, n, z):
        return x * tg.astype(n, x.dtype), "aux"

    x = tg.constant([1.0, 2.0])
    out, vjp_fn, aux = tg.vjp(f, x, tg.constant([3, 4]), tg.constant(np.ones(2, np.float32)),
                              has_aux=True)
    assert aux == "aux"
    gx, gn, gz = vjp_fn(tg.ones_like(out))
    _close(gx, [3.0, 4.0])
    assert gn is None  # JAX gives a float0 zero
    assert gz.dtype == np.float32
    _close(gz, [0.0, 0.0])


def test_vjp_cotangent_errors():
    out, vjp_fn = tg.vjp(lambda x: (x, [x * 2.0]), tg.constant(X))
    with pytest.raises(ValueError, match=r"the cotangent has the structure \(\*, \*\), but f's "
                                         r"output has the structure \(\*, \[\*\]\)"):
        vjp_fn((X, X))
    with pytest.raises(ValueError, match=r"output_gradients of shape \(2,\)"):
        vjp_fn((X, [np.ones(2)]))


def test_vjp_to_second_order():
    x = tg.constant(X)
    with tg.GradientTape() as tape:
        tape.watch(x)
        _, vjp_fn = tg.vjp(_f, x)
        (g,) = vjp_fn(1.0)
        s = tg.sum(g * tg.constant([1.0, 0.0, -1.0]))
    _close(tape.gradient(s, x), _f_hessian(X) @ [1.0, 0.0, -1.0])


# --- jacrev ----------------------------------------------------------------------------------
def test_jacrev_matches_the_hand_derived_jacobian():
    def f(x):
        return tg.tanh(tg.matmul(tg.constant(A), x))

    t = np.tanh(A @ X)
    jac = tg.jacrev(f)(tg.constant(X))
    assert jac.shape == (2, 3)
    _close(jac, (1 - t ** 2)[:, None] * A)


def test_jacrev_structure_is_outputs_then_arguments_like_jax():
    def f(x, y):
        return {"p": x * y, "s": tg.sum(x)}

    x, y = tg.constant([1.0, 2.0]), tg.constant([3.0, 4.0])
    jac = tg.jacrev(f, argnums=(0, 1))(x, y)
    assert set(jac) == {"p", "s"} and isinstance(jac["p"], tuple)
    _close(jac["p"][0], np.diag([3.0, 4.0]))
    _close(jac["p"][1], np.diag([1.0, 2.0]))
    _close(jac["s"][0], [1.0, 1.0])
    _close(jac["s"][1], [0.0, 0.0])
    jac, aux = tg.jacrev(lambda x: (x * 2.0, 7), has_aux=True)(x)
    _close(jac, 2 * np.eye(2))
    assert aux == 7


def test_jacrev_needs_floating_outputs():
    with pytest.raises(TypeError, match="jacrev: f returned an output of dtype int64"):
        tg.jacrev(lambda x: tg.astype(x, tg.int64))(tg.constant(X))


# --- GradientTape.batch_jacobian ---------------------------------------------------------------
def _per_example(x, w):
    """Examples independent: row b depends on x[b] only; target (B, 2, 2), source (B, 3)."""
    h = tg.tanh(tg.matmul(x, w))  # (B, 4)
    return tg.reshape(h * h[:, :1], (x.shape[0], 2, 2))


def test_batch_jacobian_equals_a_loop_of_per_example_jacobians():
    rng = np.random.default_rng(0)
    x, w = tg.constant(rng.normal(size=(5, 3))), tg.constant(rng.normal(size=(3, 4)))
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = _per_example(x, w)
    bj = tape.batch_jacobian(y, x, parallel_iterations=4, experimental_use_pfor=False)
    assert bj.shape == (5, 2, 2, 3) and bj.dtype == np.float64
    for b in range(5):
        xb = tg.constant(x.numpy()[b:b + 1])
        with tg.GradientTape() as t:
            t.watch(xb)
            yb = _per_example(xb, w)
        _close(bj[b], t.jacobian(yb, xb).numpy()[0, :, :, 0, :])


def test_batch_jacobian_of_float32_and_unconnected_sources():
    x = tg.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    other = tg.constant(np.ones((3, 4), np.float32))
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([x, other])
        y = x ** 2
    bj = tape.batch_jacobian(y, x)
    assert bj.dtype == np.float32
    _close(bj, np.stack([np.diag(2 * r) for r in x.numpy()]))
    assert tape.batch_jacobian(y, other) is None
    z = tape.batch_jacobian(y, other, unconnected_gradients="zero")
    assert z.shape == (3, 2, 4) and not z.numpy().any()


def test_batch_jacobian_is_differentiable_again():
    x = tg.constant([[1.0, 2.0], [3.0, -1.0]])
    with tg.GradientTape() as outer:
        outer.watch(x)
        with tg.GradientTape() as inner:
            inner.watch(x)
            y = x ** 3
        s = tg.sum(inner.batch_jacobian(y, x))  # sum_b sum_i 3 x_bi^2
    _close(outer.gradient(s, x), 6 * x.numpy())


def test_batch_jacobian_respects_a_custom_gradient():
    rounded = tg.straight_through(tg.round)
    x = tg.constant([[0.2, 1.7], [2.4, -0.6]])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = rounded(x) * 3.0
    _close(tape.batch_jacobian(y, x), np.stack([3 * np.eye(2)] * 2))


def test_batch_jacobian_errors():
    x = tg.constant(np.ones((3, 2)))
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = x * 2.0
    with pytest.raises(ValueError, match=r"the batch sizes differ: target shape \(3, 2\), "
                                         r"source shape \(2, 2\)"):
        tape.batch_jacobian(y, tg.constant(np.ones((2, 2))))
    with pytest.raises(ValueError, match=r"the source has shape \(3,\); it must have rank 2"):
        tape.batch_jacobian(y, tg.constant(np.ones(3)))
    with pytest.raises(TypeError, match="target must be a single Tensor, got list"):
        tape.batch_jacobian([y], x)
    tape.batch_jacobian(y, x)
    with pytest.raises(RuntimeError, match="non-persistent GradientTape can only be used"):
        tape.batch_jacobian(y, x)


def test_jacobian_accepts_tensorflows_keywords():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    _close(tape.jacobian(y, x, parallel_iterations=2, experimental_use_pfor=True),
           np.diag([2.0, 4.0]))


# --- recompute_grad ---------------------------------------------------------------------------
def _block(h, w):
    """Three ops per call (matmul, tanh, multiply), reading the Variable SCALE."""
    return tg.tanh(tg.matmul(h, w)) * SCALE


SCALE = tg.Variable(1.5)


def _loss(layer, x, w):
    return tg.sum(layer(layer(x, w), w) ** 2)


def _data(seed, batch):
    rng = np.random.default_rng(seed)
    return tg.constant(rng.normal(size=(batch, 3))), tg.Variable(rng.normal(size=(3, 3)) * 0.5)


def _assert_same_with_and_without_recompute(results_of, f, rtol=1e-10):
    """``results_of(fn)`` (a list of Tensors) is the same for ``f`` and its wrapped twin."""
    want, got = results_of(f), results_of(tg.recompute_grad(f))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _close(g, w.numpy(), rtol=rtol)
    return got


def test_compiled_recompute_grad_holds_its_recomputation_behind_an_optimization_barrier():
    # as jax.checkpoint: the recomputation's inputs and the cotangents pass one barrier, so XLA
    # cannot merge the recomputation into the forward; the gradient is unchanged
    jax = pytest.importorskip("jax")
    f = tg.recompute_grad(lambda x: tg.sum(tg.sin(tg.sin(x))))
    step = tg.function(tg.grad(f))
    x = np.linspace(0.0, 1.0, 5)
    _close(step(tg.constant(x)), np.cos(np.sin(x)) * np.cos(x), rtol=1e-12)
    (program,) = step._programs.values()
    with tg.config.x64_scope(jax):
        text = program.compiled.lower(x).as_text()
    assert "optimization_barrier" in text
    # eagerly the op passes its inputs through, with the identity's derivatives
    a, b = tg.constant([1.0, 2.0]), tg.constant(3.0)
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([a, b])
        ha, hb = tg.lax.optimization_barrier(a, b)
        y = tg.sum(ha * hb)
    _close(tape.gradient(y, a), [3.0, 3.0])
    _close(tape.gradient(y, b), 3.0)


def test_recompute_grad_values_and_gradients_equal_the_unwrapped_function():
    x, w = _data(seed=1, batch=4)

    def results_of(layer):
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = _loss(layer, x, w)
        return [y, *tape.gradient(y, [x, w, SCALE])]

    _assert_same_with_and_without_recompute(results_of, _block)


def test_recompute_grad_to_second_order_with_a_variable_inside():
    x, w = _data(seed=2, batch=2)

    def results_of(layer):
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = _loss(layer, x, w)
            gx, gscale = inner.gradient(y, [x, SCALE])
            s = tg.sum(gx * gx) + gscale
        return outer.gradient(s, [x, w, SCALE])

    _assert_same_with_and_without_recompute(results_of, _block)
    wrapped = tg.recompute_grad(_block)
    tg.test.check_gradients(lambda x: _loss(wrapped, x, w), [x.numpy()], order=2)


def test_recompute_grad_records_one_op_instead_of_many():
    x, w = tg.constant(np.ones((2, 3))), tg.Variable(np.eye(3))
    counts = []
    for layer in (_block, tg.recompute_grad(_block)):
        with tg.GradientTape() as tape:
            tape.watch(x)
            layer(layer(x, w), w)
        counts.append([op.type for op in tape.operations])
    assert len(counts[0]) == 6
    assert counts[1] == ["CustomGradient:recompute_grad(_block)"] * 2


def test_recompute_grad_tuple_outputs_keyword_tensors_and_a_repeated_argument():
    def f(a, b, *, c, power):
        return a * b * c, tg.sum(a ** power)

    assert tg.recompute_grad(f).__name__ == "f"
    x, c = tg.constant([1.0, 2.0]), tg.constant([3.0, -1.0])

    def results_of(fn):
        with tg.GradientTape() as tape:
            tape.watch([x, c])
            p, s = fn(x, x, c=c, power=3)  # x at two positions: each gets its own share
            y = tg.sum(p) + s
        return [y, *tape.gradient(y, [x, c])]

    _, gx, _ = _assert_same_with_and_without_recompute(results_of, f)
    _close(gx, [2 * 1.0 * 3.0 + 3 * 1.0, 2 * 2.0 * -1.0 + 3 * 4.0])  # 2xc + 3x^2


def test_recompute_grad_keeps_a_custom_gradient_inside():
    rounded = tg.straight_through(tg.round)
    wrapped = tg.recompute_grad(lambda x: rounded(x) * 2.0)
    x = tg.constant([0.3, 1.6])
    _close(wrapped(x), [0.0, 4.0])
    _close(tg.grad(lambda x: tg.sum(wrapped(x)))(x), [2.0, 2.0])


def test_jacobians_of_an_empty_target_are_empty_zeros():
    x = tg.constant(np.ones((3, 2)))
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x[:, :0] * 2.0
    assert tape.batch_jacobian(y, x).shape == (3, 0, 2)
    assert tape.jacobian(y, x).shape == (3, 0, 3, 2)


# --- pytrees of every kind (tg.tree_util), against JAX in float64 -----------------------------
def _jax_x64():
    jax = pytest.importorskip("jax")
    return jax, jax.enable_x64(True)  # scoped: the process keeps its setting


def _assert_trees_close(got, want):
    jax = pytest.importorskip("jax")
    assert tg.tree_util.tree_structure(got) == tg.tree_util.tree_structure(
        jax.tree_util.tree_map(np.asarray, want))
    for g, w in zip(tg.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-12, atol=1e-12)


def test_grad_of_a_namedtuple_argument_is_that_namedtuple_like_jax():
    # namedtuples were rebuilt with type(x)(generator): "P.__new__() missing 1 required
    # positional argument: 'b'"
    import collections

    P = collections.namedtuple("P", "a b")
    jax, x64 = _jax_x64()
    p0 = P(np.array([0.5, -1.0]), np.array(2.0))

    def loss(p, np_=tg):
        return np_.sum(np_.sin(p.a) * p.b ** 2)

    g = tg.grad(loss)(P(tg.constant(p0.a), tg.constant(p0.b)))
    with x64:
        want = jax.grad(lambda p: loss(p, jax.numpy))(p0)
    assert type(g) is P
    _assert_trees_close(g, want)


def test_hessian_of_a_dict_is_a_dict_of_dicts_like_jax():
    # the Hessian of a dict argument converted the dict to a Tensor: "constant: the value has
    # no numeric dtype"
    jax, x64 = _jax_x64()
    d0 = {"a": np.array([1.0, 2.0]), "b": np.array(0.5)}

    def f(d, np_=tg):
        return np_.sum(d["a"] ** 3 * d["b"]) + np_.sin(d["b"]) * d["a"][0]

    d = {k: tg.constant(v) for k, v in d0.items()}
    h = tg.hessian(f)(d)
    with x64:
        want = jax.hessian(lambda d: f(d, jax.numpy))(d0)
    assert set(h) == {"a", "b"} and set(h["a"]) == {"a", "b"}
    assert h["a"]["b"].shape == (2,) and h["b"]["a"].shape == (2,) and h["a"]["a"].shape == (2, 2)
    _assert_trees_close(h, want)


def test_hessian_with_argnums_pair_is_a_tuple_of_tuples_like_jax():
    # argnums=(0, 1) gave "'tuple' object has no attribute 'shape'"
    jax, x64 = _jax_x64()
    a0, b0 = np.array([1.0, 2.0]), np.array([3.0, 4.0, -1.0])

    def f(a, b, np_=tg):
        return np_.sum(a * a) * np_.sum(np_.tanh(b)) + np_.sum(a[:, None] * b[None, :] ** 2)

    h = tg.hessian(f, argnums=(0, 1))(tg.constant(a0), tg.constant(b0))
    with x64:
        want = jax.hessian(lambda a, b: f(a, b, jax.numpy), argnums=(0, 1))(a0, b0)
    assert [[blk.shape for blk in row] for row in h] == [[(2, 2), (2, 3)], [(3, 2), (3, 3)]]
    _assert_trees_close(h, want)


def test_recompute_grad_of_container_arguments_matches_jax_checkpoint():
    # a dict/tuple argument was no input of the op: its leaves got no gradient (None)
    jax = pytest.importorskip("jax")

    def f(p, s, np_=tg):
        return np_.sin(p["a"]) * p["b"][0] * s

    p0 = {"a": np.array([1.0, 2.0]), "b": (np.array(3.0), None)}
    p = {"a": tg.constant(p0["a"]), "b": (tg.constant(p0["b"][0]), None)}
    g = tg.recompute_grad(f)
    got = tg.grad(lambda p, s: tg.sum(g(p, s)), argnums=(0, 1))(p, tg.constant(2.0))
    with tg.config.x64_scope(jax):
        want = jax.grad(lambda p, s: jax.numpy.sum(jax.checkpoint(
            lambda p, s: f(p, s, jax.numpy))(p, s)), argnums=(0, 1))(p0, 2.0)
        want = jax.tree_util.tree_map(np.asarray, want)
    assert tg.tree_util.tree_structure(got) == tg.tree_util.tree_structure(want)
    for a, b in zip(tg.tree_util.tree_leaves(got), tg.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-12, atol=1e-12)
