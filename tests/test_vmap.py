"""tg.vmap and tg.vectorized_map: values and derivatives equal JAX's (float64, rtol 1e-8) for
every composition with grad, jvp, jacrev, hessian, GradientTape and ForwardAccumulator in
either order, eagerly and compiled (tg.function), on JAX's vmap and on the per-example loop
(forced with ``batching._FORCE_LOOP``); custom gradients, NumPy primitives, Variables,
tg.random and control flow inside; GradientTape.jacobian(experimental_use_pfor=True); errors.

Without JAX, the tests that need JAX (references, tg.function) skip and the loop tests that
compare with NumPy references run."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import batching

try:
    import jax
    import jax.numpy as jnp
except ImportError:  # the loop engine is tested without JAX
    jax = jnp = None

needs_jax = pytest.mark.skipif(jax is None, reason="needs JAX (the reference, tg.function)")
# with TAPEGRAD_ARRAY_BACKEND=array_api_strict, eager Jacobians take rows (the vectorized pass
# needs NumPy's or JAX's arrays)
VECTORIZES = jax is not None and not tg._backend.default_namespace().__name__.startswith(
    "array_api_strict")
STRICT = tg._backend.default_namespace().__name__.startswith("array_api_strict")
RTOL = 1e-8


@pytest.fixture(autouse=True)
def _x64():
    """JAX's 64-bit mode on in each test only (thread-local, never process-wide): the
    references in float64."""
    if jax is None:
        yield
        return
    with tg.config.x64_scope(jax):
        yield


def val(t):
    return np.asarray(t.numpy() if isinstance(t, tg.Tensor) else t)


def close(got, want, rtol=RTOL, atol=1e-12):
    got_leaves = jax.tree_util.tree_leaves(got) if jax else [got]
    want_leaves = jax.tree_util.tree_leaves(want) if jax else [want]
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        g, w = val(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.fixture(params=["jax", "loop"])
def engine(request, monkeypatch):
    """JAX's vmap, or the per-example loop that runs without JAX (forced)."""
    if request.param == "jax" and jax is None:
        pytest.skip("needs JAX")
    if request.param == "jax" and STRICT:
        pytest.skip("JAX's vmap runs on JAX's arrays whatever the default backend: the NumPy "
                    "run covers it")
    monkeypatch.setattr(batching, "_FORCE_LOOP", request.param == "loop")
    return request.param


@pytest.fixture(params=["eager", "compiled"])
def mode(request):
    if request.param == "compiled" and jax is None:
        pytest.skip("tg.function needs JAX")
    if request.param == "compiled" and STRICT:
        pytest.skip("a compiled program runs on JAX's arrays whatever the default backend: "
                    "the NumPy run covers it")
    return request.param


def run(mode, fn, *args):
    """``fn(*args)`` eagerly, or compiled by tg.function."""
    return fn(*args) if mode == "eager" else tg.function(fn)(*args)


rng = np.random.default_rng(0)
W = rng.normal(size=(3, 4))
B0 = rng.normal(size=(3,))
XS = rng.normal(size=(5, 4))
YS = rng.normal(size=(5, 3))


def loss_tg(params, x, y):
    h = tg.tanh(params["w"] @ x + params["b"])
    return tg.sum((h - y) ** 2)


def loss_jax(params, x, y):
    h = jnp.tanh(params["w"] @ x + params["b"])
    return jnp.sum((h - y) ** 2)


PARAMS = {"w": W, "b": B0}


def tparams():
    return {k: tg.constant(v) for k, v in PARAMS.items()}


# --- values: in_axes, out_axes, pytrees -------------------------------------------------------
@needs_jax
@pytest.mark.parametrize("in_axes,out_axes,args", [
    (0, 0, (XS, XS)),
    ((1, None), -1, (XS.T, XS[0])),
    ((-1, 0), 1, (XS.T, XS)),
    (({"a": 0, "b": None}, 0), (0, {"u": 1}), ({"a": XS, "b": XS[1]}, XS)),
    ([0, (None, 0)], 0, (XS, (XS[2], XS))),
])
def test_values_equal_jax_vmap(engine, mode, in_axes, out_axes, args):
    def f_tg(a, b):
        a1 = a["a"] * a["b"] if isinstance(a, dict) else a
        b1 = b[0] * b[1] if isinstance(b, tuple) else b
        return tg.sin(a1) * b1 + 1.0, {"u": tg.stack([a1, tg.cos(b1)])}

    def f_jax(a, b):
        a1 = a["a"] * a["b"] if isinstance(a, dict) else a
        b1 = b[0] * b[1] if isinstance(b, tuple) else b
        return jnp.sin(a1) * b1 + 1.0, {"u": jnp.stack([a1, jnp.cos(b1)])}

    got = run(mode, lambda *a: tg.vmap(f_tg, in_axes, out_axes)(*a), *args)
    want = jax.vmap(f_jax, in_axes, out_axes)(*args)
    close(got, want)


@needs_jax
def test_namedtuple_arguments_in_axes_and_outputs_equal_jax_vmap(engine, mode):
    # a namedtuple argument was rebuilt with type(x)(generator): "P.__new__() missing 1
    # required positional argument"
    import collections

    P = collections.namedtuple("P", "x s")

    def f(p, np_):
        return P(np_.sin(p.x) * p.s, np_.sum(p.x ** 2))

    args = (P(XS, B0[0]),)
    got = run(mode, lambda p: tg.vmap(lambda q: f(q, tg), in_axes=(P(0, None),))(p), *args)
    want = jax.vmap(lambda q: f(q, jnp), in_axes=(P(0, None),))(*args)
    assert type(got) is P
    close(got, want)


def test_loop_values_without_jax_reference(monkeypatch):
    """The loop engine alone (runs without JAX): unbatched arguments, negative axes, pytree
    outputs, a Python number output, keyword arguments mapped over axis 0."""
    monkeypatch.setattr(batching, "_FORCE_LOOP", True)
    out = tg.vmap(lambda x, s, k=None: {"y": x * s + k, "c": 2.0}, in_axes=(-1, None))(
        XS.T, 3.0, k=XS[:, 0])
    close(out["y"], XS * 3.0 + XS[:, :1])
    close(out["c"], np.full(5, 2.0))
    assert out["c"].dtype == tg.float64


def test_axis_size_with_nothing_mapped(engine):
    out = tg.vmap(lambda c: c * 2.0, in_axes=None, axis_size=3)(tg.constant([1.0, 2.0]))
    close(out, np.tile([2.0, 4.0], (3, 1)))


# --- composition with transforms, both orders --------------------------------------------------
@needs_jax
def test_vmap_of_grad_equals_jax(engine, mode):
    got = run(mode, lambda p, x, y: tg.vmap(tg.grad(loss_tg), in_axes=(None, 0, 0))(p, x, y),
              tparams(), XS, YS)
    want = jax.vmap(jax.grad(loss_jax), in_axes=(None, 0, 0))(PARAMS, XS, YS)
    close(got, want)


@needs_jax
def test_grad_of_sum_of_vmap_equals_jax(engine, mode):
    def total(p, x, y):
        return tg.sum(tg.vmap(loss_tg, in_axes=(None, 0, 0))(p, x, y))

    got = run(mode, lambda p, x, y: tg.grad(total)(p, x, y), tparams(), XS, YS)
    want = jax.grad(lambda p: jnp.sum(jax.vmap(loss_jax, (None, 0, 0))(p, XS, YS)))(PARAMS)
    close(got, want)


@needs_jax
def test_grad_through_a_closed_over_parameter(engine, mode):
    """The parameter is closed over, not an argument: the tape sees it through the call."""
    def total(w):
        return tg.sum(tg.vmap(lambda x: tg.sum(tg.sin(w @ x)))(XS))

    got = run(mode, tg.grad(total), W)
    want = jax.grad(lambda w: jnp.sum(jax.vmap(lambda x: jnp.sum(jnp.sin(w @ x)))(XS)))(W)
    close(got, want)


@needs_jax
def test_jvp_both_orders_equal_jax(engine, mode):
    def f_tg(x):
        return tg.sin(x) * tg.sum(x ** 2)

    def f_jax(x):
        return jnp.sin(x) * jnp.sum(x ** 2)

    t = np.ones_like(XS) * 0.5
    got1 = run(mode, lambda x, t: tg.jvp(tg.vmap(f_tg), (x,), (t,)), XS, t)
    got2 = run(mode, lambda x, t: tg.vmap(lambda a, b: tg.jvp(f_tg, (a,), (b,)))(x, t), XS, t)
    want = jax.jvp(jax.vmap(f_jax), (XS,), (t,))
    close(got1, want)
    close(got2, want)


@needs_jax
def test_jacrev_and_hessian_both_orders_equal_jax(engine, mode):
    def f_tg(x):
        return tg.tanh(x) * tg.sum(x ** 3)

    def f_jax(x):
        return jnp.tanh(x) * jnp.sum(x ** 3)

    got = run(mode, lambda x: tg.vmap(tg.jacrev(f_tg))(x), XS)
    close(got, jax.jit(jax.vmap(jax.jacrev(f_jax)))(XS))
    got = run(mode, lambda x: tg.jacrev(tg.vmap(f_tg))(x), XS[:3])
    close(got, jax.jit(jax.jacrev(jax.vmap(f_jax)))(XS[:3]))

    def s_tg(x):
        return tg.sum(tg.sin(x) * x[0])

    def s_jax(x):
        return jnp.sum(jnp.sin(x) * x[0])

    got = run(mode, lambda x: tg.vmap(tg.hessian(s_tg))(x), XS)
    close(got, jax.jit(jax.vmap(jax.hessian(s_jax)))(XS))
    got = run(mode, lambda x: tg.hessian(lambda z: tg.sum(tg.vmap(s_tg)(z)))(x), XS[:2])
    close(got, jax.jit(jax.hessian(lambda z: jnp.sum(jax.vmap(s_jax)(z))))(XS[:2]))


@needs_jax
def test_gradient_tape_outside_and_inside(engine, mode):
    v = tg.Variable(W)

    def outside(x):
        with tg.GradientTape() as tape:  # watches the Variable read inside the batched fn
            out = tg.sum(tg.vmap(lambda xi: tg.sum(tg.sin(v @ xi)))(x))
        return tape.gradient(out, v)

    def inside(x):
        def per_example(xi):
            xi = tg.identity(xi)
            with tg.GradientTape() as tape:
                tape.watch(xi)
                y = tg.sum(tg.sin(v @ xi))
            return tape.gradient(y, xi)
        return tg.vmap(per_example)(x)

    close(run(mode, outside, XS),
          jax.grad(lambda w: jnp.sum(jax.vmap(lambda x: jnp.sum(jnp.sin(w @ x)))(XS)))(W))
    close(run(mode, inside, XS),
          jax.vmap(jax.grad(lambda x: jnp.sum(jnp.sin(W @ x))))(XS))


@needs_jax
def test_forward_accumulator_outside_and_inside(engine, mode):
    t = np.full_like(XS, 0.3)

    def outside(x, t):
        x = tg.identity(tg.constant(x))
        with tg.ForwardAccumulator(x, tg.constant(t)) as acc:
            y = tg.vmap(lambda a: tg.exp(a) * a[0])(x)
        return acc.jvp(y)

    def inside(x, t):
        def per_example(a, ta):
            a = tg.identity(a)
            with tg.ForwardAccumulator(a, ta) as acc:
                y = tg.exp(a) * a[0]
            return acc.jvp(y)
        return tg.vmap(per_example)(x, t)

    want = jax.jvp(jax.vmap(lambda a: jnp.exp(a) * a[0]), (XS,), (t,))[1]
    close(run(mode, outside, XS, t), want)
    close(run(mode, inside, XS, t), want)


@needs_jax
def test_nested_vmap_and_second_order_through_it(engine, mode):
    def f_tg(x, y):
        return tg.sin(x) * tg.cos(y)

    def f_jax(x, y):
        return jnp.sin(x) * jnp.cos(y)

    ys = XS[:3, :2]
    got = run(mode, lambda a, b: tg.vmap(lambda x: tg.vmap(lambda y: f_tg(x, y))(b))(a),
              XS[:, 0], ys[:, 0])
    close(got, jax.vmap(lambda x: jax.vmap(lambda y: f_jax(x, y))(ys[:, 0]))(XS[:, 0]))
    inner = lambda x: tg.sum(tg.vmap(lambda y: f_tg(x, y))(ys[:, 0]))  # noqa: E731
    got = run(mode, lambda a: tg.vmap(tg.grad(tg.grad(inner)))(a), XS[:, 0])
    jinner = lambda x: jnp.sum(jax.vmap(lambda y: f_jax(x, y))(ys[:, 0]))  # noqa: E731
    close(got, jax.jit(jax.vmap(jax.grad(jax.grad(jinner))))(XS[:, 0]))


# --- what a body may contain -------------------------------------------------------------------
@tg.custom_gradient
def _cube_surrogate(x):
    """x**3 with the surrogate gradient 10 x: tells which gradient was batched."""
    return x * x * x, lambda dy: dy * 10.0 * x


@tg.primitive("VmapTestNumpySquare")
def _np_square(x):
    out = np.square(np.asarray(x))  # a NumPy forward: a host callback under JAX
    return out if isinstance(x, np.ndarray) else tg._backend.asarray(out, xp=tg._backend.namespace(x))


@tg.RegisterGradient("VmapTestNumpySquare")
def _np_square_grad(op, dy):
    return dy * 3.0 * op.inputs[0]  # a surrogate, to see that it is the one used


def test_custom_gradient_and_numpy_primitive_rules_are_batched(engine, mode):
    def total(x):
        return tg.sum(tg.vmap(lambda a: tg.sum(_cube_surrogate(a) + _np_square(a)))(x))

    value = run(mode, total, XS)
    grads = run(mode, tg.grad(total), XS)
    per_example = run(mode, lambda x: tg.vmap(tg.grad(
        lambda a: tg.sum(_cube_surrogate(a) + _np_square(a))))(x), XS)
    close(value, np.sum(XS ** 3 + XS ** 2))
    close(grads, 10.0 * XS + 3.0 * XS)
    close(per_example, 10.0 * XS + 3.0 * XS)


def test_variables_are_shared_and_get_gradients(engine, mode):
    v = tg.Variable(W)
    c = tg.Variable(2.0, trainable=False)

    def step(x):
        with tg.GradientTape() as tape:
            y = tg.vmap(lambda xi: tg.sum(v @ xi) * c)(x)
            out = tg.sum(y ** 2)
        return y, tape.gradient(out, v)

    y, g = run(mode, step, XS)
    y_ref = np.sum(XS @ W.T, axis=1) * 2.0
    close(y, y_ref)
    close(g, 2.0 * np.einsum("b,bj->j", 2.0 * y_ref, XS)[None, :] * np.ones((3, 1)))


def test_random_draws_are_independent_per_example_and_reproducible(engine):
    def draw(x):
        return tg.random.normal((3,)), tg.random.uniform((2,), maxval=10, dtype=tg.int64)

    tg.random.set_seed(1)
    a, ia = map(val, tg.vmap(draw)(np.zeros(4)))
    tg.random.set_seed(1)
    b, ib = map(val, tg.vmap(draw)(np.zeros(4)))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ia, ib)
    assert a.shape == (4, 3) and ia.shape == (4, 2) and ia.dtype == np.int64
    assert len({tuple(r) for r in a.round(12)}) == 4  # every example its own numbers
    c = val(tg.vmap(draw)(np.zeros(4))[0])
    assert not np.allclose(a, c)  # the next call draws new ones


@needs_jax
def test_random_draws_are_the_same_in_the_gradients_run(monkeypatch):
    monkeypatch.setattr(batching, "_FORCE_LOOP", False)
    """The function runs again for its gradient (JAX's vjp): it must see the same noise."""
    x = tg.constant(XS)

    def noisy(xi):
        return tg.sum(xi * tg.random.normal((4,)))

    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.vmap(noisy)(x)
        total = tg.sum(y * y)
    noise = val(y)
    g = val(tape.gradient(total, x))
    # d/dx sum_b (x_b . n_b)^2 = 2 (x_b . n_b) n_b; recover n_b from the gradient's direction
    n = g / (2.0 * noise[:, None])
    close(np.sum(XS * n, axis=1), noise)


@needs_jax
def test_random_inside_tg_function_differs_between_calls(engine):
    f = tg.function(lambda x: tg.vmap(lambda a: a + tg.random.uniform((2,)))(x))
    a, b = val(f(np.zeros((3, 2)))), val(f(np.zeros((3, 2))))
    assert not np.allclose(a, b)
    assert len({tuple(r) for r in a.round(12)}) == 3


def test_cond_and_scan_on_batched_values(engine, mode):
    def body(x):
        y = tg.cond(tg.sum(x) > 0, lambda: x * 2.0, lambda: -x)
        carry, ys = tg.lax.scan(lambda c, xi: (c * xi + 1.0, c), 1.0, y)
        return carry + tg.sum(ys) + tg.sum(tg.where(x > 0, x, 0.0))

    def ref(x):
        y = x * 2.0 if x.sum() > 0 else -x
        c, acc = 1.0, 0.0
        for yi in y:
            acc += c
            c = c * yi + 1.0
        return c + acc + np.sum(np.where(x > 0, x, 0.0))

    got = run(mode, lambda x: tg.vmap(body)(x), XS)
    close(got, np.array([ref(x) for x in XS]))
    g = run(mode, tg.grad(lambda x: tg.sum(tg.vmap(body)(x))), XS)
    eps = 1e-6
    num = np.zeros_like(XS)
    for idx in np.ndindex(*XS.shape):
        d = np.zeros_like(XS)
        d[idx] = eps
        num[idx] = (sum(ref(x) for x in XS + d) - sum(ref(x) for x in XS - d)) / (2 * eps)
    close(g, num, rtol=1e-6, atol=1e-6)


# --- errors --------------------------------------------------------------------------------------
def test_error_mismatched_batch_sizes_names_arguments_and_sizes(engine):
    with pytest.raises(ValueError, match=r"argument 0 \('x'\) axis 0 has size 5; argument 1 "
                                         r"\('y'\)\['b'\] axis 1 has size 4"):
        tg.vmap(lambda x, y: x, in_axes=(0, {"b": 1}))(XS, {"b": W})


def test_error_in_axes_structure_does_not_match(engine):
    with pytest.raises(ValueError, match=r"in_axes has 1 entries but the function was called "
                                         r"with 2 positional arguments"):
        tg.vmap(lambda x, y: x, in_axes=(0,))(XS, XS)
    with pytest.raises(ValueError, match=r"gives argument 0 \('x'\) as a dict with keys "
                                         r"\['a'\] but argument 0 \('x'\) is a tuple of length 2"):
        tg.vmap(lambda x: x[0], in_axes=({"a": 0},))((XS, XS))
    with pytest.raises(TypeError, match=r"in_axes must be an int, None, or a tuple, list or "
                                        r"dict of them; got a str"):
        tg.vmap(lambda x: x, in_axes="0")


def test_error_axis_out_of_range(engine):
    with pytest.raises(ValueError, match=r"in_axes 2 for argument 0 \('x'\) is out of range: "
                                         r"it has shape \(5, 4\) \(rank 2\), so the axis must "
                                         r"be in \[-2, 1\]"):
        tg.vmap(lambda x: x, in_axes=2)(XS)
    with pytest.raises(ValueError, match=r"out_axes 3 for the output\[1\] is out of range: the "
                                         r"batched output has rank 1, so the axis must be in "
                                         r"\[-1, 0\]"):
        tg.vmap(lambda x: (x, x[0]), out_axes=(0, 3))(XS)
    with pytest.raises(ValueError, match=r"out_axes does not match the arguments: .* gives the "
                                         r"output as a tuple of length 2 but the output is a leaf"):
        tg.vmap(lambda x: x, out_axes=(0, 1))(XS)


def test_error_nothing_mapped_without_axis_size(engine):
    with pytest.raises(ValueError, match=r"no argument is mapped .* give axis_size"):
        tg.vmap(lambda x: x, in_axes=None)(XS)


@needs_jax
def test_error_python_control_flow_on_a_batched_value(monkeypatch, mode):
    monkeypatch.setattr(batching, "_FORCE_LOOP", False)

    def f(x):
        if tg.sum(x) > 0:  # a Python branch on a batched value
            return x
        return -x

    with pytest.raises(batching.BatchedValueError,
                       match=r"test_vmap.py:\d+ needs the concrete value of a batched tensor.*"
                             r"tg.cond\(pred, true_fn, false_fn\) or tg.where"):
        run(mode, lambda x: tg.vmap(f)(x), XS)


def test_error_assigning_a_variable(engine):
    v = tg.Variable(0.0)

    def f(x):
        v.assign_add(1.0)
        return x

    with pytest.raises(ValueError, match=r"assigned the Variable .* may read Variables but not "
                                         r"assign them"):
        tg.vmap(f)(XS)
    assert float(v) == 0.0  # put back


@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
def test_error_assigning_a_batched_value_to_a_variable_names_it(engine, method):
    v = tg.Variable(np.zeros(4), name="running_mean")

    def f(x):
        getattr(v, method)(x * 2.0)  # each example's own value
        return x

    with pytest.raises(ValueError, match=r"tg.vmap\(.*f \(.*assigned the Variable 'running_mean' "
                                         r"\(shape \(4,\)\).*Return the new value and assign "
                                         r"it outside tg.vmap"):
        tg.vmap(f)(XS)
    np.testing.assert_array_equal(v.numpy(), np.zeros(4))  # put back


def test_error_not_callable():
    with pytest.raises(TypeError, match=r"tg.vmap: expected a function, got a int"):
        tg.vmap(3)


# --- vectorized_map -----------------------------------------------------------------------------
def test_vectorized_map_values_and_gradient(engine):
    x = tg.constant(XS)
    with tg.GradientTape() as tape:
        tape.watch(x)
        out = tg.vectorized_map(lambda e: {"s": tg.sum(e[0] ** 2), "p": e[1] * 2.0},
                                (x, tg.constant(YS)))
        total = tg.sum(out["s"])
    close(out["s"], np.sum(XS ** 2, axis=1))
    close(out["p"], YS * 2.0)
    close(tape.gradient(total, x), 2.0 * XS)
    from tapegrad.compat import tensorflow as tf
    close(tf.vectorized_map(lambda e: e * 3.0, XS), XS * 3.0)


def test_vectorized_map_falls_back_to_a_loop(monkeypatch):
    monkeypatch.setattr(batching, "_FORCE_LOOP", False)

    def f(e):
        return e * 2.0 if float(tg.sum(e)) > 0 else -e  # cannot be vectorized

    want = np.array([r * 2.0 if r.sum() > 0 else -r for r in XS])
    if jax is None:
        close(tg.vectorized_map(f, XS), want)
        return
    with pytest.warns(UserWarning, match=r"could not vectorize, running once per element"):
        close(tg.vectorized_map(f, XS), want)
    with pytest.raises(batching.BatchedValueError, match=r"needs the concrete value"):
        tg.vectorized_map(f, XS, fallback_to_while_loop=False)


def test_vectorized_map_mismatched_sizes(engine):
    with pytest.raises(ValueError, match=r"\[0\] axis 0 has size 5; .*\[1\] axis 0 has size 3"):
        tg.vectorized_map(lambda e: e[0], (XS, W))


# --- GradientTape.jacobian(experimental_use_pfor=True) ----------------------------------------
def _mlp(x, w1, w2):
    return tg.tanh(tg.tanh(x @ w1) @ w2)


@pytest.fixture
def vectorize_small(monkeypatch):
    """Vectorize the tests' small Jacobians too (eagerly only 32 rows and more are)."""
    monkeypatch.setattr(batching, "VECTORIZE_MIN_ROWS", 1)


@pytest.mark.parametrize("persistent", [False, True])
def test_jacobian_pfor_equals_rows(persistent, vectorize_small, monkeypatch):
    x = tg.constant(rng.normal(size=(6,)))
    w1, w2 = tg.constant(rng.normal(size=(6, 8))), tg.constant(rng.normal(size=(8, 7)))
    results, passes = [], []
    backward = tg.GradientTape._backward

    def counted(self, *args):
        passes[-1] += 1
        return backward(self, *args)

    monkeypatch.setattr(tg.GradientTape, "_backward", counted)
    for pfor in (True, False):
        passes.append(0)
        with tg.GradientTape(persistent=persistent) as tape:
            tape.watch([x, w1])
            y = _mlp(x, w1, w2)
        results.append(tape.jacobian(y, [x, w1, w2], experimental_use_pfor=pfor))
    assert passes == [1 if VECTORIZES else 7, 7]  # one batched pass, or 7 rows
    for a, b in zip(*results):
        if a is None:
            assert b is None
            continue
        close(a, val(b), rtol=1e-12)
    assert results[0][2] is None  # unwatched: not connected
    if jax is not None:
        close(results[0][0], jax.jacrev(lambda x: jnp.tanh(jnp.tanh(x @ val(w1)) @ val(w2)))(
            val(x)))


def test_batch_jacobian_pfor_equals_rows(vectorize_small):
    x = tg.constant(rng.normal(size=(4, 6)))
    w1, w2 = tg.constant(rng.normal(size=(6, 8))), tg.constant(rng.normal(size=(8, 7)))
    out = []
    for pfor in (True, False):
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = _mlp(x, w1, w2)
        out.append(val(tape.batch_jacobian(y, x, experimental_use_pfor=pfor)))
    assert out[0].shape == (4, 7, 6)
    close(out[0], out[1], rtol=1e-12)


def test_jacobian_pfor_differentiated_again_by_an_outer_tape(vectorize_small):
    """An outer tape records the Jacobian's computation: rows, so it is differentiable."""
    x = tg.constant(rng.normal(size=(3,)))
    with tg.GradientTape() as outer:
        outer.watch(x)
        with tg.GradientTape() as inner:
            inner.watch(x)
            y = tg.sin(x) * tg.sum(x)
        j = inner.jacobian(y, x)
        s = tg.sum(j)
    g = outer.gradient(s, x)
    if jax is not None:
        f = lambda x: jnp.sin(x) * jnp.sum(x)  # noqa: E731
        close(g, jax.grad(lambda x: jnp.sum(jax.jacrev(f)(x)))(val(x)))
    assert g is not None


@needs_jax
def test_jacobian_pfor_inside_tg_function():
    @tg.function
    def jac(x, w):
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.tanh(x @ w)
        return tape.jacobian(y, x)

    x, w = rng.normal(size=(9,)), rng.normal(size=(9, 5))  # fewer targets: rows, batched
    close(jac(x, w), jax.jacrev(lambda x: jnp.tanh(x @ w))(x))


def test_without_jax_installed_the_loop_gives_the_same_values_and_gradients(monkeypatch):
    """JAX made unimportable (as when it is not installed): the loop runs, with the values
    and gradients of hand derivations."""
    import sys

    for name in [m for m in sys.modules if m == "jax" or m.startswith("jax.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "jax", None)
    assert batching._jax() is None
    w = tg.constant(W)
    with tg.GradientTape() as tape:
        tape.watch(w)
        y = tg.vmap(lambda x: tg.sum(tg.sin(w @ x)))(XS)
        total = tg.sum(y)
    close(y, np.sum(np.sin(XS @ W.T), axis=1))
    close(tape.gradient(total, w), np.einsum("bi,bj->ij", np.cos(XS @ W.T), XS))
    per_example = tg.vmap(tg.grad(lambda x: tg.sum(tg.sin(W @ x))))(XS)
    close(per_example, np.cos(XS @ W.T) @ W)


def test_random_in_nested_vmap_differs_across_both_axes(engine, mode):
    out = val(run(mode, lambda x: tg.vmap(lambda a: tg.vmap(
        lambda b: tg.random.normal(()))(a))(x), np.zeros((2, 3))))
    assert out.shape == (2, 3) and len(set(out.round(12).ravel())) == 6


def test_small_eager_jacobians_take_rows(monkeypatch):
    """Eagerly, fewer than VECTORIZE_MIN_ROWS rows are taken one by one (cheaper)."""
    passes = []
    backward = tg.GradientTape._backward
    monkeypatch.setattr(tg.GradientTape, "_backward",
                        lambda self, *a: passes.append(1) or backward(self, *a))
    x = tg.constant(rng.normal(size=(40,)))
    for n in (5, 40):
        passes.clear()
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.sin(x[:n]) * 2.0
        j = tape.jacobian(y, x)
        close(j, np.concatenate([np.diag(2.0 * np.cos(val(x)[:n])), np.zeros((n, 40 - n))], 1))
        assert len(passes) == (1 if n == 40 and VECTORIZES else n)


# --- eager calls compiled once per signature ------------------------------------------------
def _counted(fn):
    calls = []

    def f(*args):
        calls.append(1)
        return fn(*args)

    return f, calls


@pytest.mark.skipif(not VECTORIZES, reason="the compiled eager path takes NumPy and JAX values")
def test_eager_calls_are_compiled_once_per_signature_with_the_op_by_op_values(monkeypatch):
    """A batched function called eagerly again with the same shapes and dtypes runs its
    compiled program (the Python function is not run again) and gives the values of the op
    by op path (``_COMPILE_EAGER`` off) and JAX's; a new shape, dtype, axis or static value
    traces again."""
    monkeypatch.setattr(batching, "_FORCE_LOOP", False)
    f, calls = _counted(tg.grad(loss_tg))
    batched = tg.vmap(f, in_axes=(None, 0, 0))
    ref = jax.jit(jax.vmap(jax.grad(loss_jax), in_axes=(None, 0, 0)))
    for k in range(3):
        xs, ys = XS * (k + 1), YS - k
        got = batched(tparams(), xs, ys)
        close(got, ref(PARAMS, xs, ys))
        monkeypatch.setattr(batching, "_COMPILE_EAGER", False)
        close(got, tg.vmap(tg.grad(loss_tg), in_axes=(None, 0, 0))(tparams(), xs, ys))
        monkeypatch.setattr(batching, "_COMPILE_EAGER", True)
    assert len(calls) == 1
    close(batched(tparams(), XS[:3], YS[:3]), ref(PARAMS, XS[:3], YS[:3]))
    assert len(calls) == 2  # another batch size
    close(batched(tparams(), XS.astype(np.float32), YS), ref(PARAMS, XS.astype(np.float32), YS),
          rtol=1e-5)
    assert len(calls) == 3  # another dtype
    scaled, calls = _counted(lambda x, s: x * s)
    g = tg.vmap(scaled, in_axes=(0, None))
    close(g(XS, 2.0), XS * 2.0)
    close(g(XS, 3.0), XS * 3.0)  # a static value is part of the signature
    close(g(XS, 3.0), XS * 3.0)
    assert len(calls) == 2


@needs_jax
def test_eager_calls_reading_outer_tensors_or_drawing_run_op_by_op(monkeypatch):
    """A function that reads a tensor made before the call (a closure rebound between calls,
    a Variable assigned) or draws random numbers is not kept compiled: each call sees the
    current values and draws new numbers, as op by op."""
    monkeypatch.setattr(batching, "_FORCE_LOOP", False)
    c = tg.constant(2.0)
    closure, c_calls = _counted(lambda x: x * c)
    by_closure = tg.vmap(closure)
    close(by_closure(XS), XS * 2.0)
    c = tg.constant(5.0)  # noqa: F841 - read by the closure
    close(by_closure(XS), XS * 5.0)
    v = tg.Variable(W)
    by_variable = tg.vmap(lambda x: v @ x)
    close(by_variable(XS), XS @ W.T)
    v.assign(2.0 * W)
    close(by_variable(XS), 2.0 * XS @ W.T)
    noisy = tg.vmap(lambda x: x + tg.random.normal((4,)))
    tg.random.set_seed(3)
    a = val(noisy(XS))
    b = val(noisy(XS))
    tg.random.set_seed(3)
    monkeypatch.setattr(batching, "_COMPILE_EAGER", False)
    np.testing.assert_array_equal(val(noisy(XS)), a)  # the op-by-op path's numbers
    np.testing.assert_array_equal(val(noisy(XS)), b)
    assert not np.allclose(a, b)
    assert len(c_calls) >= 2  # each call ran it (twice on array-api-strict: _probe)


# --- batched cond: the unselected branch's derivative does not leak NaN ------------------------
@needs_jax
@pytest.mark.parametrize("branch", ["sqrt", "log"])
def test_batched_cond_gradient_of_an_unselected_singular_branch_is_jaxs(engine, mode, branch):
    """Under tg.vmap cond runs both branches; sqrt/log of the negative example's value has a
    NaN derivative, which JAX's batched lax.cond does not pass on (its values: [0, 0.25]
    for sqrt, [0, 0.25] for log at [-1, 4]); tapegrad gives JAX's values, in both modes,
    reverse over the call and inside it, and forward."""
    tg_fn, jax_fn = {"sqrt": (tg.sqrt, jnp.sqrt), "log": (tg.log, jnp.log)}[branch]
    xs = np.array([-1.0, 4.0, 0.5])

    def f(x):
        return tg.cond(x > 0, lambda: tg_fn(x), lambda: 0.0 * x)

    def f_jax(x):
        return jax.lax.cond(x > 0, jax_fn, lambda x: 0.0 * x, x)

    want = jax.jit(jax.vmap(jax.grad(f_jax)))(xs)
    assert np.all(np.isfinite(want))
    close(run(mode, tg.vmap(tg.grad(f)), xs), want)
    close(run(mode, tg.grad(lambda x: tg.sum(tg.vmap(f)(x))), xs),
          jax.jit(jax.grad(lambda x: jnp.sum(jax.vmap(f_jax)(x))))(xs))
    close(run(mode, tg.vmap(lambda x: tg.jvp(f, (x,), (tg.ones_like(x),))[1]), xs),
          jax.jit(jax.vmap(lambda x: jax.jvp(f_jax, (x,), (jnp.ones_like(x),))[1]))(xs))
    close(run(mode, lambda x: tg.jvp(lambda x: tg.vmap(f)(x), (x,), (tg.ones_like(x),))[1],
              tg.constant(xs)),
          jax.jvp(jax.vmap(f_jax), (xs,), (jnp.ones_like(xs),))[1])


@needs_jax
@pytest.mark.skipif(not VECTORIZES, reason="on array_api_strict the second-order passes meet "
                    "array_api_strict's where with JAX's tracers (a backend limit)")
@pytest.mark.parametrize("branch", ["sqrt", "log"])
def test_batched_cond_second_derivatives_of_an_unselected_singular_branch_are_jaxs(
        engine, mode, branch):
    """Second order through the batched cond (the Select's gradient is a Select again):
    inside the call, tg.hessian, and reverse over the call's gradient; JAX's finite values
    ([0, -1/32, ...] for sqrt at [-1, 4, 0.5])."""
    tg_fn, jax_fn = {"sqrt": (tg.sqrt, jnp.sqrt), "log": (tg.log, jnp.log)}[branch]
    xs = np.array([-1.0, 4.0, 0.5])

    def f(x):
        return tg.cond(x > 0, lambda: tg_fn(x), lambda: 0.0 * x)

    want2 = jax.jit(jax.vmap(jax.grad(jax.grad(
        lambda x: jax.lax.cond(x > 0, jax_fn, lambda x: 0.0 * x, x)))))(xs)
    assert np.all(np.isfinite(want2))
    close(run(mode, tg.vmap(tg.grad(tg.grad(f))), xs), want2)
    close(run(mode, tg.vmap(tg.hessian(f)), xs), want2)
    close(run(mode, tg.grad(lambda x: tg.sum(tg.vmap(tg.grad(f))(x))), xs), want2)


@needs_jax
@pytest.mark.skipif(not VECTORIZES, reason="on array_api_strict a batched cond whose branch "
                    "returns its input as it is meets array_api_strict's where (a limit found "
                    "here, there before this test)")
def test_batched_cond_with_a_branch_returning_its_input_as_it_is(engine, mode):
    """A branch that returns a tensor made before the cond, with no op on it: its gradient
    reaches that tensor (it is a capture of the Select op too)."""
    xs, ys = np.array([-1.0, 4.0, 0.5]), np.array([2.0, -3.0, -1.0])

    def f(x, y):
        return tg.cond(x > 0, lambda: x, lambda: tg.sqrt(y))

    def f_jax(x, y):
        return jax.lax.cond(x > 0, lambda: x, lambda: jnp.sqrt(y))

    want = jax.jit(jax.vmap(jax.grad(f_jax, argnums=(0, 1))))(xs, ys)
    close(run(mode, tg.vmap(tg.grad(f, argnums=(0, 1))), xs, ys), want)
    close(run(mode, tg.grad(lambda x, y: tg.sum(tg.vmap(f)(x, y)), argnums=(0, 1)), xs, ys),
          jax.jit(jax.grad(lambda x, y: jnp.sum(jax.vmap(f_jax)(x, y)), argnums=(0, 1)))(xs, ys))


@needs_jax
def test_batched_switch_with_a_closed_over_parameter_gradient_is_jaxs(engine, mode):
    """Three branches (indices clamped), a closed-over parameter and a Variable read inside
    them: the gradients with respect to both are JAX's (finite where a branch is singular
    at the other examples' values)."""
    v = tg.Variable(B0)
    idx = np.array([-2, 1, 5, 0, 2])  # examples 2 and 4 take the last branch (clamped)
    w0 = np.abs(W)
    xs = np.abs(XS) * np.array([1, 1, -1, 1, -1])[:, None]  # w0 @ x < 0 only there

    def f(w, x, i):  # tg.lax.switch clamps the index as JAX's does
        return tg.lax.switch(i, [lambda: tg.sum(tg.sqrt(w @ x) * v),
                                 lambda: tg.sum(tg.log(w @ x) * v),
                                 lambda: tg.sum(w @ x * v)])

    def f_jax(w, x, i):
        return jax.lax.switch(i, [lambda: jnp.sum(jnp.sqrt(w @ x) * B0),
                                  lambda: jnp.sum(jnp.log(w @ x) * B0),
                                  lambda: jnp.sum(w @ x * B0)])

    def step(w, xs, i):
        w = tg.identity(w)
        with tg.GradientTape() as tape:
            tape.watch(w)
            total = tg.sum(tg.vmap(lambda x, i: f(w, x, i))(xs, i))
        return tape.gradient(total, [w, v])

    got = run(mode, step, w0, xs, idx)
    want = jax.jit(jax.grad(lambda w, b: jnp.sum(jax.vmap(lambda x, i: jax.lax.switch(
        i, [lambda: jnp.sum(jnp.sqrt(w @ x) * b), lambda: jnp.sum(jnp.log(w @ x) * b),
            lambda: jnp.sum(w @ x * b)]))(xs, idx)), argnums=(0, 1)))(w0, B0)
    assert all(np.all(np.isfinite(w)) for w in want)
    close(got, list(want))
    per_example = run(mode, lambda xs, i, w: tg.vmap(tg.grad(lambda x, i, w: f(w, x, i)),
                                                     in_axes=(0, 0, None))(xs, i, w),
                      xs, idx, w0)
    close(per_example, jax.jit(jax.vmap(jax.grad(lambda x, i: f_jax(w0, x, i))))(xs, idx))


# --- NumPy forwards under tg.vmap: once per example, or once per batch where declared ------------
_HOST_SHAPES = []


def _logged(fn):
    def forward(*arrays):
        if np.any(np.asarray(arrays[0])):  # not the run on zeros that finds the output shapes
            _HOST_SHAPES.append(tuple(np.shape(arrays[0])))
        out = fn(*[np.asarray(a) for a in arrays])
        return out if isinstance(arrays[0], np.ndarray) else tg._backend.asarray(
            out, xp=tg._backend.namespace(arrays[0]))
    return forward


def _host_ops(method):
    suffix = {"sequential": "Seq", "expand_dims": "Expand", "broadcast_all": "Broadcast"}[method]
    # elementwise, with an unbatched second input
    scaled_sin = tg.primitive(f"VmapTestSin{suffix}", vmap_method=method)(
        _logged(lambda x, s: np.sin(x) * s))
    # along the last axis (any leading axes): a running sum, and a 0-d output per row
    cumsum = tg.primitive(f"VmapTestCumsum{suffix}", vmap_method=method)(
        _logged(lambda x: np.cumsum(x, axis=-1)))
    norm = tg.primitive(f"VmapTestNorm{suffix}", vmap_method=method)(
        _logged(lambda x: np.sqrt(np.sum(x * x, axis=-1))))
    tg.RegisterGradient(f"VmapTestSin{suffix}")(
        lambda op, dy: (dy * tg.cos(op.inputs[0]) * op.inputs[1], None))
    tg.RegisterGradient(f"VmapTestCumsum{suffix}")(
        lambda op, dy: tg.flip(tg.cumulative_sum(tg.flip(dy, axis=-1), axis=-1), axis=-1))
    tg.RegisterGradient(f"VmapTestNorm{suffix}")(
        lambda op, dy: dy[..., None] * op.inputs[0] / op.outputs[0][..., None])
    return scaled_sin, cumsum, norm


_HOST = {m: _host_ops(m) for m in ("sequential", "expand_dims", "broadcast_all")}


@needs_jax
@pytest.mark.parametrize("method", ["sequential", "expand_dims", "broadcast_all"])
def test_numpy_forward_runs_once_per_batch_where_declared(monkeypatch, mode, method):
    """A primitive with a NumPy forward under tg.vmap (a host callback): with the default
    vmap_method "sequential" its forward runs once per example; declared "expand_dims" or
    "broadcast_all" (it broadcasts over leading axes), once per batch, also nested. The
    values and per-example gradients equal the per-example loop's, and hand derivations."""
    scaled_sin, cumsum, norm = _HOST[method]
    s = np.array([0.5, -2.0, 1.5, 3.0])

    def f(x, s):
        return norm(cumsum(scaled_sin(x, s)))

    def ref(x):
        return np.sqrt(np.sum(np.cumsum(np.sin(x) * s, axis=-1) ** 2, axis=-1))

    def both(x, s):
        return tg.vmap(f, in_axes=(0, None))(x, s), tg.vmap(tg.grad(f), in_axes=(0, None))(x, s)

    monkeypatch.setattr(batching, "_FORCE_LOOP", False)
    _HOST_SHAPES.clear()
    value, grad = run(mode, both, XS, s)
    # three ops, run twice (values, gradients): 6 calls for the batch, or 6 * 5 per example
    # (and on array-api-strict eagerly 6 for example 0 that find the captures: _probe)
    batch = [sh for sh in _HOST_SHAPES if sh == (5, 4)]
    single = [sh for sh in _HOST_SHAPES if sh == (4,)]
    probe = 6 if mode == "eager" and not VECTORIZES else 0
    assert len(batch) + len(single) == len(_HOST_SHAPES)
    if method == "sequential":
        assert not batch and len(single) == 30 + probe
    else:
        assert len(batch) == 6 and len(single) == probe
    monkeypatch.setattr(batching, "_FORCE_LOOP", True)
    loop_value, loop_grad = both(XS, s)
    close(value, loop_value)
    close(grad, loop_grad)
    close(value, np.array([ref(x) for x in XS]))
    eps = 1e-6
    num = np.array([[(ref(x + eps * e) - ref(x - eps * e)) / (2 * eps) for e in np.eye(4)]
                    for x in XS])
    close(grad, num, rtol=1e-6, atol=1e-8)
    monkeypatch.setattr(batching, "_FORCE_LOOP", False)
    _HOST_SHAPES.clear()
    nested = run(mode, lambda x: tg.vmap(tg.vmap(lambda r: f(r, s)))(x), np.stack([XS, -XS]))
    close(nested, np.array([[ref(x) for x in XS], [ref(-x) for x in XS]]))
    assert any(sh[:2] == (2, 5) for sh in _HOST_SHAPES) == (method != "sequential")


def test_error_vmap_method_not_known():
    with pytest.raises(ValueError, match="vmap_method must be one of 'sequential', "
                                         "'expand_dims', 'broadcast_all'.*got 'vectorized'"):
        tg.primitive("VmapTestBadMethod", vmap_method="vectorized")


@needs_jax
def test_grad_of_vmap_of_a_bounded_while_loop_matches_jax():
    # the JVP rule of vmap's jax.custom_jvp (and of to_jax's) ran the loop as lax.while_loop,
    # which JAX then could not transpose: "Reverse-mode differentiation does not work for
    # lax.while_loop"; a bounded loop there now runs as a scan, as under a recording tape
    def g(x, np_=tg):
        def body(i, y):
            return i + 1, np_.sin(y) * 1.5 + x

        if np_ is tg:
            _, y = tg.while_loop(lambda i, y: y < 2.0, body, (tg.constant(0), x),
                                 maximum_iterations=3)
        else:  # the reference: 3 steps, each taken while the condition holds
            y, active = x, True
            for _ in range(3):
                active = active & (y < 2.0)
                y = jnp.where(active, body(0, y)[1], y)
        return y ** 2

    x0 = np.array([0.3, 0.7, 1.9, -0.5])
    x = tg.constant(x0)
    loss = lambda x: tg.sum(tg.vmap(g)(x) * tg.constant([1.0, 2.0, 3.0, 4.0]))  # noqa: E731
    # (the Hessian compiled: eagerly, JAX's op-by-op dispatch took 12 s of the test's 17)
    got = [tg.grad(loss)(x), tg.function(tg.grad(loss))(x), tg.function(tg.hessian(loss))(x),
           jax.grad(lambda x: jnp.sum(jax.vmap(tg.to_jax(g))(x) * jnp.array(
               [1.0, 2.0, 3.0, 4.0])))(x0)]
    with tg.config.x64_scope(jax):
        ref = lambda x: jnp.sum(jax.vmap(lambda x: g(x, jnp))(x) * jnp.array(  # noqa: E731
            [1.0, 2.0, 3.0, 4.0]))
        gradient = np.asarray(jax.jit(jax.grad(ref))(x0))  # one program each, not per op
        want = [gradient, gradient, np.asarray(jax.jit(jax.hessian(ref))(x0)), gradient]
    for a, b in zip(got, want):
        np.testing.assert_allclose(val(a), b, rtol=1e-12, atol=1e-12)
    # without maximum_iterations JAX cannot transpose the loop: an error saying what to do
    # (it was JAX's own, naming lax.while_loop only)
    def unbounded(x):
        return tg.while_loop(lambda y: y < 2.0, lambda y: tg.abs(y) * 1.5 + 0.5, (x,))[0]

    with pytest.raises(ValueError, match=r"gradient of Vmap:unbounded \(a tg.vmap .* "
                                         r"tg.while_loop without maximum_iterations.* pass "
                                         r"maximum_iterations"):
        tg.grad(lambda x: tg.sum(tg.vmap(unbounded)(x)))(x)
