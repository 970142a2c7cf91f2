"""tg.custom_vjp and tg.custom_jvp against jax.custom_vjp / jax.custom_jvp with the same rules,
on float64 values: first and second order, eager and under tg.function."""
import functools

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import GradientCountError, GradientShapeError, VariablesError

jax = pytest.importorskip("jax")
jnp = jax.numpy


def _jax(f, *args):
    """``f(*args)`` with JAX's 64-bit mode on for this call only (not process-wide)."""
    with tg.config.x64_scope(jax):
        return jax.tree_util.tree_map(np.asarray, f(*args))


def _close(got, want):
    got_l, want_l = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_l) == len(want_l)
    for g, w in zip(got_l, want_l):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12)


def _both(fn):
    """``fn`` eager and compiled."""
    return [fn, tg.function(fn, jit_compile=True)]


# --- the same rules, written once per library ----------------------------------------------
def _clipped_sin(lib, clip, vjp):
    """2 sin(x) whose gradient is clipped to [-lim, lim]; lim a nondiff argument."""
    @functools.partial(vjp, nondiff_argnums=(1,))
    def f(x, lim):
        return lib.sin(x) * 2.0

    def fwd(x, lim):
        return lib.sin(x) * 2.0, lib.cos(x)  # the residual depends on x: second order sees it

    def bwd(lim, c, g):
        return (clip(2.0 * c * g, -lim, lim),)

    f.defvjp(fwd, bwd)
    return f


def _log1pexp(lib, jvp):
    """log(1 + e^x) with JAX's documented numerically stable JVP."""
    @jvp
    def f(x):
        return lib.log(1.0 + lib.exp(x))

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), t * (1.0 - 1.0 / (1.0 + lib.exp(x)))

    return f


def _tree_vjp(lib, vjp):
    """A dict and a tuple in, a dict out; bwd returns None for one leaf."""
    def body(p, xs):
        return {"u": p["w"] * xs[0], "v": lib.sin(p["b"]) + xs[1] * xs[0]}

    f = vjp(body)

    def fwd(p, xs):  # body, not f: JAX refuses jacfwd of a custom_vjp call inside fwd
        return body(p, xs), (p, xs)

    def bwd(res, ct):
        p, xs = res
        u, v = ct["u"], ct["v"]
        return ({"w": u * xs[0] * 3.0, "b": lib.sum(v) * lib.cos(p["b"])},  # 3x: rule seen
                (u * p["w"] + v * xs[1], None))

    f.defvjp(fwd, bwd)
    return f


def _scaled_jvp(lib, jvp):
    """A nondiff argument ``k`` and a pytree argument: k * (a^2 b, sin(b))."""
    @functools.partial(jvp, nondiff_argnums=(0,))
    def f(k, p):
        a, b = p
        return k * a * a * b, k * lib.sin(b)

    @f.defjvp
    def f_jvp(k, primals, tangents):
        ((a, b),), ((ta, tb),) = primals, tangents
        return f(k, (a, b)), (k * (2.0 * a * b * ta + a * a * tb), k * lib.cos(b) * tb)

    return f


_TG_CLIP = _clipped_sin(tg, tg.clip, tg.custom_vjp)
_JAX_CLIP = _clipped_sin(jnp, jnp.clip, jax.custom_vjp)
_TG_LOG = _log1pexp(tg, tg.custom_jvp)
_JAX_LOG = _log1pexp(jnp, jax.custom_jvp)
_TG_TREE = _tree_vjp(tg, tg.custom_vjp)
_JAX_TREE = _tree_vjp(jnp, jax.custom_vjp)
_TG_SCALED = _scaled_jvp(tg, tg.custom_jvp)
_JAX_SCALED = _scaled_jvp(jnp, jax.custom_jvp)

_X = np.array([0.1, 1.0, 2.0, 3.0])


@pytest.mark.parametrize("compiled", [False, True])
def test_custom_vjp_clipped_gradient_first_and_second_order_like_jax(compiled):
    def loss(f, lib):
        return lambda x: lib.sum(f(x, 1.5) ** 2)

    wrap = (lambda fn: tg.function(fn, jit_compile=True)) if compiled else (lambda fn: fn)
    x = tg.constant(_X)
    _close(wrap(_TG_CLIP)(x, 1.5), _jax(_JAX_CLIP, _X, 1.5))
    _close(wrap(tg.grad(loss(_TG_CLIP, tg)))(x), _jax(jax.grad(loss(_JAX_CLIP, jnp)), _X))
    _close(wrap(tg.hessian(loss(_TG_CLIP, tg)))(x), _jax(jax.hessian(loss(_JAX_CLIP, jnp)), _X))
    # reverse over reverse: the derivative of bwd, through its residual cos(x)
    g2 = tg.grad(lambda x: tg.sum(tg.grad(loss(_TG_CLIP, tg))(x) * x))
    j2 = jax.grad(lambda x: jnp.sum(jax.grad(loss(_JAX_CLIP, jnp))(x) * x))
    _close(wrap(g2)(x), _jax(j2, _X))


@pytest.mark.parametrize("compiled", [False, True])
def test_custom_jvp_log1pexp_like_jax_in_both_modes_and_orders(compiled):
    x0 = np.array([-3.0, 0.0, 2.0, 40.0])
    x, t = tg.constant(x0), tg.constant(np.linspace(0.5, 2.0, 4))
    wrap = (lambda fn: tg.function(fn, jit_compile=True)) if compiled else (lambda fn: fn)
    loss_tg, loss_jax = (lambda x: tg.sum(_TG_LOG(x))), (lambda x: jnp.sum(_JAX_LOG(x)))
    _close(wrap(lambda x, t: tg.jvp(_TG_LOG, (x,), (t,)))(x, t),
           _jax(lambda x, t: jax.jvp(_JAX_LOG, (x,), (t,)), x0, t.numpy()))
    _close(wrap(tg.grad(loss_tg))(x), _jax(jax.grad(loss_jax), x0))
    _close(wrap(tg.hessian(loss_tg))(x), _jax(jax.hessian(loss_jax), x0))
    _close(wrap(tg.grad(lambda x: tg.sum(tg.grad(loss_tg)(x))))(x),
           _jax(jax.grad(lambda x: jnp.sum(jax.grad(loss_jax)(x))), x0))


def test_custom_jvp_rule_is_used_where_the_plain_derivative_is_nan():
    x = tg.constant(np.array([800.0]))
    assert tg.grad(lambda x: tg.sum(_TG_LOG(x)))(x).numpy().tolist() == [1.0]
    assert tg.jvp(_TG_LOG, (x,), (tg.ones_like(x),))[1].numpy().tolist() == [1.0]


@pytest.mark.parametrize("compiled", [False, True])
def test_custom_vjp_pytree_arguments_and_outputs_like_jax(compiled):
    p0 = {"w": np.array([1.5, -0.5]), "b": np.array(0.3)}
    xs0 = (np.array([2.0, 1.0]), np.array([0.7, -1.2]))
    p = {k: tg.constant(v) for k, v in p0.items()}
    xs = tuple(tg.constant(v) for v in xs0)

    def loss(f, lib):
        return lambda p, xs: lib.sum(f(p, xs)["u"] ** 2) + lib.sum(f(p, xs)["v"] * xs[0])

    wrap = (lambda fn: tg.function(fn, jit_compile=True)) if compiled else (lambda fn: fn)
    _close(wrap(_TG_TREE)(p, xs), _jax(_JAX_TREE, p0, xs0))
    got = wrap(tg.grad(loss(_TG_TREE, tg), argnums=(0, 1)))(p, xs)
    _close(got, _jax(jax.grad(loss(_JAX_TREE, jnp), argnums=(0, 1)), p0, xs0))
    with tg.GradientTape() as tape:  # a whole-leaf None cotangent: no gradient from bwd
        tape.watch(xs[1])
        y = tg.sum(_TG_TREE(p, xs)["v"])
    assert tape.gradient(y, xs[1]) is None
    hw = tg.hessian(lambda w: loss(_TG_TREE, tg)({"w": w, "b": p["b"]}, xs))(p["w"])
    _close(hw, _jax(jax.hessian(lambda w: loss(_JAX_TREE, jnp)({"w": w, "b": p0["b"]}, xs0)),
                    p0["w"]))


@pytest.mark.parametrize("compiled", [False, True])
def test_custom_jvp_nondiff_argument_and_pytrees_like_jax(compiled):
    a0, b0 = np.array([1.0, 2.0]), np.array([0.5, -0.3])
    a, b = tg.constant(a0), tg.constant(b0)
    wrap = (lambda fn: tg.function(fn, jit_compile=True)) if compiled else (lambda fn: fn)

    def tg_loss(a, b):
        u, v = _TG_SCALED(3.0, (a, b))
        return tg.sum(u * v)

    def jax_loss(a, b):
        u, v = _JAX_SCALED(3.0, (a, b))
        return jnp.sum(u * v)

    _close(wrap(lambda a, b: tg.jvp(lambda a, b: _TG_SCALED(3.0, (a, b)), (a, b),
                                    (tg.ones_like(a), b)))(a, b),
           _jax(lambda a, b: jax.jvp(lambda a, b: _JAX_SCALED(3.0, (a, b)), (a, b),
                                     (jnp.ones_like(a), b)), a0, b0))
    _close(wrap(tg.grad(tg_loss, argnums=(0, 1)))(a, b),
           _jax(jax.grad(jax_loss, argnums=(0, 1)), a0, b0))
    _close(wrap(tg.hessian(tg_loss))(a, b), _jax(jax.hessian(jax_loss), a0, b0))


def test_tapes_accumulators_and_vmap_around_custom_rules():
    x = tg.constant(_X)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(_TG_LOG(x))
    _close(tape.gradient(y, x), _jax(jax.grad(lambda x: jnp.sum(_JAX_LOG(x))), _X))
    scaled = tg.custom_vjp(tg.sin)
    scaled.defvjp(lambda x: (tg.sin(x), tg.cos(x)), lambda c, g: (3.0 * c * g,))
    with tg.ForwardAccumulator(x, tg.ones_like(x)) as acc:  # the transpose of a linear bwd
        y = scaled(x)
    _close(acc.jvp(y), 3.0 * np.cos(_X))
    _close(tg.vmap(tg.grad(lambda x: _TG_CLIP(x, 1.5)))(x), np.clip(2.0 * np.cos(_X), -1.5, 1.5))
    _close(tg.vmap(tg.grad(_TG_LOG))(x), _jax(jax.vmap(jax.grad(_JAX_LOG)), _X))


def test_without_differentiation_fun_itself_runs():
    calls = []

    @tg.custom_vjp
    def f(x):
        calls.append("fun")
        return x * 2.0

    f.defvjp(lambda x: (calls.append("fwd") or x * 2.0, None), lambda r, g: (g * 2.0,))
    f(tg.constant(1.0))
    tg.grad(f)(tg.constant(1.0))
    assert calls == ["fun", "fwd"]


# --- errors ---------------------------------------------------------------------------------
def test_calling_before_defvjp_or_defjvp_is_an_error():
    f = tg.custom_vjp(lambda x: x)
    with pytest.raises(TypeError, match=r"has no VJP rule yet; call .*defvjp\(fwd, bwd\)"):
        f(tg.constant(1.0))
    g = tg.custom_jvp(lambda x: x)
    with pytest.raises(TypeError, match=r"has no JVP rule yet; call .*defjvp\(jvp\)"):
        g(tg.constant(1.0))


def test_bwd_returning_the_wrong_number_of_cotangents_is_an_error():
    @tg.custom_vjp
    def f(x, y):
        return x * y

    def bad_bwd(res, g):
        return g * res[1]  # not a tuple of two

    f.defvjp(lambda x, y: (x * y, (x, y)), bad_bwd)
    with pytest.raises(GradientCountError, match=r"backward rule .*bad_bwd .* returned a "
                       r"Tensor; it must return a tuple with one cotangent per differentiable "
                       r"argument: 2"):
        tg.grad(f)(tg.constant(1.0), tg.constant(2.0))


def test_bwd_returning_a_cotangent_of_another_structure_names_the_argument():
    @tg.custom_vjp
    def f(p):
        return p["a"] * 2.0

    f.defvjp(lambda p: (p["a"] * 2.0, None), lambda r, g: ({"b": g},))
    with pytest.raises(GradientCountError, match=r"structure \{'b': \*\} for argument 0 \('p'\), "
                       r"which has the structure \{'a': \*\}"):
        tg.grad(f)({"a": tg.constant(1.0)})


def test_a_jvp_rule_with_a_tangent_of_another_structure_is_an_error():
    @tg.custom_jvp
    def f(x):
        return x, x * 2.0

    f.defjvp(lambda primals, tangents: (f(*primals), tangents[0]))
    with pytest.raises(GradientShapeError, match=r"tangent_out of structure \*; the output has "
                       r"the structure \(\*, \*\)"):
        tg.jvp(f, (tg.constant(1.0),), (tg.constant(1.0),))


def test_a_custom_vjp_forward_reading_a_trainable_variable_is_an_error():
    w = tg.Variable(2.0, name="w")

    @tg.custom_vjp
    def f(x):
        return x * w

    f.defvjp(lambda x: (x * w, None), lambda r, g: (g * w,))
    with pytest.raises(VariablesError, match=r"custom_vjp: .*f reads the trainable Variable\(s\) "
                       r"'w', which are not its arguments"):
        tg.grad(f)(tg.constant(1.0))


def test_nondiff_argnums_beyond_the_arguments_is_an_error():
    f = tg.custom_vjp(lambda x, y: x, nondiff_argnums=(2,))
    f.defvjp(lambda x, y: (x, None), lambda k, r, g: (g, g))
    with pytest.raises(TypeError, match=r"nondiff_argnums=\(2,\) names argument 2, but"):
        tg.grad(f)(tg.constant(1.0), tg.constant(1.0))


def test_a_tape_outside_an_accumulator_differentiates_a_custom_vjp_tangent():
    # the accumulator records the custom_vjp op (the innermost level); the outer tape records
    # fwd's ops and must also see the ops of the tangent rule (it got None before)
    f = tg.custom_vjp(lambda x: tg.sin(x))
    f.defvjp(lambda x: (tg.sin(x), x), lambda x, dy: (tg.cos(x) * dy,))
    x = tg.constant(0.7, dtype=tg.float64)
    with tg.GradientTape() as tape:
        tape.watch(x)
        with tg.ForwardAccumulator(x, tg.constant(1.0, dtype=tg.float64)) as acc:
            y = f(x)
        d = acc.jvp(y)
    np.testing.assert_allclose(float(d), np.cos(0.7), rtol=1e-14)
    np.testing.assert_allclose(float(tape.gradient(d, x)), -np.sin(0.7), rtol=1e-14)


# --- as methods (issue 30) -----------------------------------------------------------------
def _scaled_model(lib, vjp, jvp):
    """A class with a custom_vjp and a custom_jvp method of ``self.a * sin(x)``, self a nondiff
    argument; the rules are the true derivative times 3 (so a rule that is not used shows)."""
    class Model:
        def __init__(self, a):
            self.a = a

        @functools.partial(vjp, nondiff_argnums=(0,))
        def by_vjp(self, x):
            return self.a * lib.sin(x)

        def _fwd(self, x):
            return self.a * lib.sin(x), x

        def _bwd(self, x, g):
            return (3.0 * g * self.a * lib.cos(x),)

        by_vjp.defvjp(_fwd, _bwd)

        @functools.partial(jvp, nondiff_argnums=(0,))
        def by_jvp(self, x):
            return self.a * lib.sin(x)

        @by_jvp.defjvp
        def _jvp(self, primals, tangents):
            (x,), (t,) = primals, tangents
            return self.a * lib.sin(x), 3.0 * self.a * lib.cos(x) * t

    return Model(2.5)


@pytest.mark.parametrize("name", ["by_vjp", "by_jvp"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_custom_rule_as_a_method_binds_self_like_a_function(name, compiled):
    # obj.f(x) is f(obj, x), as for a function; JAX's custom_vjp/custom_jvp objects have no
    # __get__ (obj.f(x) raises there), so JAX is called as Class.f(obj, x), which gives the same
    m_tg, m_jax = _scaled_model(tg, tg.custom_vjp, tg.custom_jvp), _scaled_model(
        jnp, jax.custom_vjp, jax.custom_jvp)
    method, unbound = getattr(m_tg, name), getattr(type(m_jax), name)
    assert isinstance(getattr(type(m_tg), name), (tg.custom_vjp, tg.custom_jvp))
    assert method.__name__ == name
    x = tg.constant(_X)
    wrap = tg.function(jit_compile=True) if compiled else (lambda f: f)
    _close(wrap(method)(x), _jax(lambda x: unbound(m_jax, x), _X))
    _close(wrap(tg.grad(lambda x: tg.sum(method(x))))(x),
           _jax(jax.grad(lambda x: jnp.sum(unbound(m_jax, x))), _X))
    _close(getattr(type(m_tg), name)(m_tg, x), _jax(lambda x: unbound(m_jax, x), _X))
    if name == "by_jvp":
        t = np.linspace(0.5, 1.5, _X.size).reshape(_X.shape)
        _close(tg.jvp(method, (x,), (tg.constant(t),))[1],
               _jax(lambda x, t: jax.jvp(lambda x: unbound(m_jax, x), (x,), (t,))[1], _X, t))
    with pytest.raises(TypeError):  # JAX: obj.f(x) is not a method call
        _jax(getattr(m_jax, name), _X)


def test_a_method_without_self_in_nondiff_argnums_gets_no_cotangent_for_self():
    class Model:
        a = 2.0

        @tg.custom_vjp
        def f(self, x):
            return self.a * tg.sin(x)

        def _fwd(self, x):
            return self.a * tg.sin(x), (self, x)

        def _bwd(res, g):
            self, x = res
            return None, g * self.a * tg.cos(x)

        f.defvjp(_fwd, _bwd)

    x = tg.constant(_X)
    np.testing.assert_allclose(tg.grad(lambda x: tg.sum(Model().f(x)))(x).numpy(),
                               2.0 * np.cos(_X), rtol=1e-12)


@pytest.mark.parametrize("name", ["by_vjp", "by_jvp"])
@pytest.mark.parametrize("modes", [("rev",), ("rev", "fwd")])
def test_check_gradients_checks_a_custom_rule_and_names_a_wrong_one(name, modes):
    x = np.array([0.3, 0.7, -1.1])

    @tg.custom_vjp
    def right_vjp(x, y):
        return tg.sin(x) * y

    right_vjp.defvjp(lambda x, y: (tg.sin(x) * y, (x, y)),
                     lambda r, g: (g * tg.cos(r[0]) * r[1], g * tg.sin(r[0])))

    @tg.custom_jvp
    def right_jvp(x, y):
        return tg.sin(x) * y

    @right_jvp.defjvp
    def _(p, t):
        return tg.sin(p[0]) * p[1], tg.cos(p[0]) * p[1] * t[0] + tg.sin(p[0]) * t[1]

    right = right_vjp if name == "by_vjp" else right_jvp
    for order in (1, 2):
        tg.test.check_gradients(right, [x, x + 2.0], order=order, modes=modes)
    wrong = getattr(_scaled_model(tg, tg.custom_vjp, tg.custom_jvp), name)  # 3x the derivative
    kind = "CustomVJP" if name == "by_vjp" else "CustomJVP"
    with pytest.raises(AssertionError, match=rf"FAILED    op 0: {kind}:{name}, gradient "
                                             r"(?s:.*)gradient / derivative = 3(\.0+)?\b"):
        tg.test.check_gradients(lambda x: tg.exp(wrong(x)), [x], modes=modes)
