"""Forward mode: ForwardAccumulator, RegisterJVP, jvp / jacfwd / hessian / hvp."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import tapegrad as tg
from conftest import on_strict_first_samples
from test_registry_gradients import (_cases, _is_builtin, compiled_modes, complex_cases,
                                     complex_sample, floating_outputs)

_ZERO = tg.UnconnectedGradients.ZERO


def _flat(ts):
    """Tensors flattened into one float64 vector; complex ones as (real, imaginary) pairs."""
    parts = [np.asarray(t.numpy()) for t in ts]
    return np.concatenate([np.ravel(np.stack([p.real, p.imag], axis=-1) if p.dtype.kind == "c"
                                    else p) for p in parts]) if parts else np.zeros(0)


# Built-in differentiable op types without a JVP rule, which take the transposed VJP (the
# "double VJP", tapegrad.forward) -- each with the reason. Keep in step with the forward-mode
# section of docs/architecture.md.
JVP_FALLBACK = {
    "DigitsElu": "the digits example's op shows a user op with a gradient and no JVP rule",
    "StableLogSigmoid": "the distributed regression example's op, a user op with a gradient "
                        "and no JVP rule, like DigitsElu",
}


def test_every_builtin_differentiable_op_has_a_jvp_rule():
    missing = sorted(name for name, opdef in tg.registered_ops().items()
                     if opdef.differentiable and opdef.defined and _is_builtin(opdef)
                     and opdef.jvp is None and name not in JVP_FALLBACK)
    assert not missing, (
        f"built-in op types without a JVP rule: {', '.join(missing)}; declare one with "
        "@RegisterJVP beside the op's gradient (linear ops: RegisterJVP(op_type)(linear_jvp)), "
        "or add the op to JVP_FALLBACK here and to docs/architecture.md with the reason")
    stale = sorted(name for name in JVP_FALLBACK if tg.registered_ops()[name].jvp is not None)
    assert not stale, f"JVP_FALLBACK lists op types that have a JVP rule: {stale}"


def _direction(x, rng):
    """A random direction in the space of ``x`` (complex for a complex ``x``)."""
    v = rng.uniform(-1.0, 1.0, size=np.shape(x))
    if np.asarray(x).dtype.kind == "c":
        v = v + 1j * rng.uniform(-1.0, 1.0, size=np.shape(x))
    return v


def _real_dot(g, v):
    """``Re(sum(conj(g) v))``: the inner product of (real, imaginary) pairs."""
    return float(np.sum(np.real(np.conj(g) * v)))


def _check_jvps(op_type, args, attrs, positions, rng, monkeypatch, compiled=False):
    """The JVP of the op on the sample against central differences (first and second order)
    and against its VJP (``<u, J v> = <J^T u, v>``, complex values as real pairs); the op's own
    rule must give it, each tangent with its output's shape and dtype. ``compiled``: the op
    inside ``tg.function`` (a control-flow construct, whose rule only a compiled call uses:
    eagerly the tapes and accumulators see its body's ops): the accumulators inside the
    compiled function too."""
    opdef = tg.registered_ops()[op_type]
    g = floating_outputs(op_type, args, attrs, positions)  # the gradient sweep's function
    f = tg.function(g) if compiled else g

    # the op's own rule must give its tangents (the fallback only for JVP_FALLBACK ops), each
    # of its output's shape and dtype as the rule returns it
    rule, used, wrong = opdef.jvp, [], []
    if rule is not None:
        def spy(op, *tangents):
            out = rule(op, *tangents)
            if op.type == op_type:
                used.append(out is not NotImplemented)
                if out is not NotImplemented:
                    outs = out if isinstance(out, (tuple, list)) else (out,)
                    wrong.extend((tuple(t.shape), t.dtype, tuple(o.shape), o.dtype)
                                 for t, o in zip(outs, op.outputs) if t is not None and (
                                     t.shape != o.shape or t.dtype != o.dtype))
            return out

        monkeypatch.setattr(opdef, "jvp", spy)

    xs = [np.asarray(args[p]) for p in positions]
    vs = [_direction(x, rng) for x in xs]

    def tangents(ts, tv, order):  # (outputs, tangents of order 1, of order ``order``)
        with tg.ForwardAccumulator(ts, tv) as outer:
            with tg.ForwardAccumulator(ts, tv) as inner:
                ys = g(*ts)
            first = inner.jvp(ys, unconnected_gradients=_ZERO)
        return ys, first, first if order == 1 else outer.jvp(first, unconnected_gradients=_ZERO)

    if compiled:
        tangents = tg.function(tangents)

    def jvp_at(points, order):
        ts = [tg.constant(x) for x in points]
        tv = [tg.constant(v.astype(x.dtype)) for v, x in zip(vs, points)]
        ys, first, last = tangents(ts, tv, order)
        for y, t in zip(ys, first):
            assert t.shape == y.shape and t.dtype == y.dtype, (op_type, t.shape, t.dtype, y.shape,
                                                               y.dtype)
        return _flat(last)

    low = any(y.dtype.itemsize < 8 * (1 + (y.dtype.kind == "c"))
              for y in f(*map(tg.constant, xs)))  # e.g. Cast to float32
    eps, tol, eps2, tol2 = (1e-2, 1e-2, 1e-1, 5e-2) if low else (1e-6, 1e-5, 1e-4, 1e-4)
    plus = [x + eps * v for x, v in zip(xs, vs)]
    minus = [x - eps * v for x, v in zip(xs, vs)]
    numeric1 = (_flat(f(*map(tg.constant, plus))) - _flat(f(*map(tg.constant, minus)))) / (2 * eps)
    jv = jvp_at(xs, 1)
    np.testing.assert_allclose(jv, numeric1, rtol=tol, atol=tol)
    if opdef.jvp is not None and (compiled or not opdef.is_construct):
        assert used and all(used), f"{op_type}'s JVP rule was not used (NotImplemented)"
        assert not wrong, f"{op_type}'s JVP rule returned (shape, dtype) {wrong[0][:2]} for an " \
                          f"output of {wrong[0][2:]}"
    # <u, J v> (forward mode) == <J^T u, v> (reverse mode)
    u = rng.uniform(-1.0, 1.0, size=jv.shape)
    ts = [tg.constant(x) for x in xs]
    with tg.GradientTape() as tape:
        tape.watch(ts)
        ys = f(*ts)
    us, start = [], 0
    for y in ys:
        n = y.size * (2 if y.dtype.kind == "c" else 1)
        piece = u[start:start + n]
        if y.dtype.kind == "c":
            piece = piece[0::2] + 1j * piece[1::2]
        us.append(tg.constant(piece.reshape(y.shape).astype(y.dtype)))
        start += n
    if ys:
        gs = tape.gradient(ys, ts, output_gradients=us, unconnected_gradients=_ZERO)
        rev = sum(_real_dot(g.numpy(), v) for g, v in zip(gs, vs))
        np.testing.assert_allclose(float(u @ jv), rev, rtol=tol, atol=tol)
    plus2 = [x + eps2 * v for x, v in zip(xs, vs)]
    minus2 = [x - eps2 * v for x, v in zip(xs, vs)]
    numeric2 = (jvp_at(plus2, 1) - jvp_at(minus2, 1)) / (2 * eps2)
    np.testing.assert_allclose(jvp_at(xs, 2), numeric2, rtol=tol2, atol=tol2)


@pytest.mark.parametrize("op_type, index", on_strict_first_samples(
    [c for c in _cases() if c.values[1] is not None]))
def test_every_primitive_jvp_matches_differences_and_the_vjp_to_second_order(
        op_type, index, monkeypatch):
    opdef = tg.registered_ops()[op_type]
    rng = np.random.default_rng([zlib.crc32(op_type.encode()), index, 1])
    args, attrs, positions = opdef.samples[index].materialize(rng)
    for compiled in compiled_modes(op_type):
        _check_jvps(op_type, args, attrs, positions, rng, monkeypatch, compiled)


@pytest.mark.parametrize("op_type, index, mixed", on_strict_first_samples(complex_cases()))
def test_every_primitive_jvp_of_complex_inputs_is_f_prime_t_to_second_order(
        op_type, index, mixed, monkeypatch):
    # a JVP is the derivative along the tangent, f'(z) t for a holomorphic op, whatever the
    # gradient convention: central differences of the op along complex directions measure it
    rng = np.random.default_rng([zlib.crc32(op_type.encode()), index, 3])
    sample = complex_sample(op_type, index, mixed, rng)
    if sample is not None:
        for compiled in compiled_modes(op_type):
            _check_jvps(op_type, *sample, rng, monkeypatch, compiled)


def _float32_cases():
    return [pytest.param(*c.values, id=c.id) for c in complex_cases() if not c.values[2]]


@pytest.mark.parametrize("op_type, index, mixed", on_strict_first_samples(_float32_cases()))
def test_float32_gradients_and_jvps_keep_their_dtypes_and_shapes(op_type, index, mixed,
                                                                 monkeypatch):
    # each gradient has its input's shape and dtype and each JVP its output's (the rule's own
    # result, before forward mode's central check), with the float64 values up to rounding
    opdef = tg.registered_ops()[op_type]
    rng = np.random.default_rng([zlib.crc32(op_type.encode()), index, 4])
    args, attrs, positions = opdef.samples[index].materialize(rng, np.float32)
    rule, wrong = opdef.jvp, []
    if rule is not None:
        def spy(op, *tangents):
            out = rule(op, *tangents)
            if op.type == op_type and out is not NotImplemented:
                outs = out if isinstance(out, (tuple, list)) else (out,)
                wrong.extend((t.shape, t.dtype, o.shape, o.dtype) for t, o in zip(outs, op.outputs)
                             if t is not None and (t.shape != o.shape or t.dtype != o.dtype))
            return out

        monkeypatch.setattr(opdef, "jvp", spy)

    f = floating_outputs(op_type, args, attrs, positions)  # the gradient sweep's function
    for compiled in compiled_modes(op_type):  # a construct compiled too (its rules run)
        _check_float32(f, args, positions, wrong, op_type, compiled, True)


def _check_float32(f, args, positions, wrong, op_type, compiled, reverse):
    def core(xs, vs):
        with tg.GradientTape() as tape:
            tape.watch(xs)
            with tg.ForwardAccumulator(xs, vs) as acc:
                ys = f(*xs)
        jvps = acc.jvp(ys, unconnected_gradients=_ZERO)
        us = [tg.ones_like(y) for y in ys]
        gs = (tape.gradient(ys, xs, output_gradients=us, unconnected_gradients=_ZERO)
              if ys and reverse else [tg.zeros_like(x) for x in xs])
        return ys, gs, jvps

    if compiled:
        core = tg.function(core)

    def run(dtype):
        xs = [tg.constant(np.asarray(args[p]).astype(dtype)) for p in positions]
        vs = [tg.constant(_direction(args[p], np.random.default_rng(k)).astype(dtype))
              for k, p in enumerate(positions)]
        return (xs, *core(xs, vs))

    xs, ys, gs, jvps = run(np.float32)
    assert not wrong, f"{op_type}'s JVP rule returned (shape, dtype) {wrong[0][:2]} for an " \
                      f"output of {wrong[0][2:]}"
    for x, g in zip(xs, gs):
        assert g.shape == x.shape and g.dtype == np.float32, (g.shape, g.dtype)
    for y, t in zip(ys, jvps):
        assert t.shape == y.shape and t.dtype == y.dtype, (t.shape, t.dtype, y.shape, y.dtype)
    _, ys64, gs64, jvps64 = run(np.float64)
    for got, want in zip([*gs, *jvps], [*gs64, *jvps64]):
        want = want.numpy()
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-3, atol=2e-3 * scale)


# --- accumulators ---------------------------------------------------------------------------
def test_jvp_of_a_chain_and_unconnected_targets():
    x, v = tg.constant([0.5, 1.0, 2.0]), tg.constant([1.0, 0.0, -1.0])
    c = tg.constant([3.0])
    with tg.ForwardAccumulator(x, v) as acc:
        y = tg.sin(x) * x
    want = (np.cos([0.5, 1.0, 2.0]) * [0.5, 1.0, 2.0] + np.sin([0.5, 1.0, 2.0])) * [1, 0, -1]
    np.testing.assert_allclose(acc.jvp(y).numpy(), want)
    assert acc.jvp(c) is None
    np.testing.assert_array_equal(acc.jvp(c, unconnected_gradients="zero").numpy(), [0.0])


def test_variables_as_primals_and_structures():
    w = tg.Variable([2.0, 3.0])
    b = tg.constant(1.0)
    with tg.ForwardAccumulator({"w": w, "b": b}, {"w": np.ones(2), "b": 2.0}) as acc:
        y = tg.sum(w * w) + b
    np.testing.assert_allclose(float(acc.jvp(y)), 2 * 2.0 + 2 * 3.0 + 2.0)


def test_mismatched_primals_and_tangents_raise():
    x = tg.constant([1.0, 2.0])
    with pytest.raises(ValueError, match="2 primal.* but 1 tangent"):
        tg.ForwardAccumulator([x, x], [x])
    with pytest.raises(ValueError, match=r"a tangent of shape \(3,\) for a primal of shape \(2,\)"):
        tg.ForwardAccumulator(x, tg.constant([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="a primal must be a Tensor or Variable, got float"):
        tg.ForwardAccumulator([1.0], [1.0])


def test_integer_primals_are_skipped_with_a_warning_as_tensorflow_does():
    xi, xf = tg.constant([1, 2, 3]), tg.constant([0.5, -1.0, 2.0])
    with pytest.warns(UserWarning, match=r"ForwardAccumulator: a primal of dtype int64 cannot "
                                         r"carry a tangent .* it is not watched.*tg\.astype"):
        acc = tg.ForwardAccumulator([xi, xf], [tg.constant([1, 1, 1]), tg.constant([1.0, 2.0, 3.0])])
    with acc:
        a = xi * 2
        b = xf * tg.astype(xi, tg.float64)
    assert acc.jvp(a) is None
    np.testing.assert_array_equal(acc.jvp(b).numpy(), [1.0, 4.0, 9.0])
    assert acc.jvp(b).dtype == np.float64
    with pytest.warns(UserWarning, match="cannot carry a tangent"):
        _, t = tg.jvp(lambda a: a * 2, (tg.constant([1, 2]),), (tg.constant([1, 1]),))
    np.testing.assert_array_equal(t.numpy(), [0, 0])


def test_a_primal_watched_twice_raises_and_jvp_takes_positions_apart():
    x = tg.constant([0.5, 2.0])
    with pytest.raises(ValueError, match=r"ForwardAccumulator: the Tensor of shape \(2,\) \(id "
                                         r"\d+\) already has a tangent in this accumulator.*"
                                         "watch it once with their sum"):
        tg.ForwardAccumulator([x, x], [tg.constant([1.0, 0.0]), tg.constant([0.0, 1.0])])
    acc = tg.ForwardAccumulator(x, tg.constant([1.0, 0.0]))
    with acc:
        y = tg.sin(x)
        with pytest.raises(ValueError, match="already has a tangent"):
            acc.watch(y, tg.constant([1.0, 1.0]))
    jax = pytest.importorskip("jax")
    x0, t1, t2 = np.array([0.5, 2.0]), np.array([1.0, -1.0]), np.array([0.5, 3.0])
    with tg.config.x64_scope(jax):
        _, want = jax.jvp(lambda a, b: a * jax.numpy.sin(b), (x0, x0), (t1, t2))
    _, got = tg.jvp(lambda a, b: a * tg.sin(b), (x, x), (tg.constant(t1), tg.constant(t2)))
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-15)


def test_forward_over_reverse_and_reverse_over_forward():
    x, v = tg.constant([0.3, -1.2]), tg.constant([1.0, 2.0])
    with tg.ForwardAccumulator(x, v) as acc:
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.sum(x ** 3)
        g = tape.gradient(y, x)
    np.testing.assert_allclose(acc.jvp(g).numpy(), 6 * x.numpy() * v.numpy())  # H v
    with tg.GradientTape() as tape:
        tape.watch(x)
        with tg.ForwardAccumulator(x, v) as acc:
            y = tg.sum(x ** 3)
        j = acc.jvp(y)
    np.testing.assert_allclose(tape.gradient(j, x).numpy(), 6 * x.numpy() * v.numpy())


def test_nested_accumulators_give_second_order():
    x, v = tg.constant([0.5, 2.0]), tg.constant([1.0, -1.0])
    with tg.ForwardAccumulator(x, v) as outer:
        with tg.ForwardAccumulator(x, v) as inner:
            y = tg.exp(x) * x
        t = inner.jvp(y)
    np.testing.assert_allclose(outer.jvp(t).numpy(), np.exp(x.numpy()) * (x.numpy() + 2.0)
                               * v.numpy() ** 2)


# --- custom rules ---------------------------------------------------------------------------
@tg.custom_gradient
def _straight_round(x):
    return tg.round(x), lambda dy: dy * 0.5  # a surrogate: half the identity


@tg.primitive("ForwardTestCube")
def _cube(x):
    return x * x * x


@tg.RegisterGradient("ForwardTestCube")
def _cube_grad(op, dy):
    return dy * 3.0 * op.inputs[0] ** 2


@tg.primitive("ForwardTestTwice")
def _twice(x):
    return x * 2.0


@tg.RegisterGradient("ForwardTestTwice")
def _twice_grad(op, dy):
    return dy * 2.0


@tg.RegisterJVP("ForwardTestTwice")
def _twice_jvp(op, t):
    _twice_jvp.calls += 1
    return t * 2.0


_twice_jvp.calls = 0


def test_custom_gradients_are_respected_in_forward_mode():
    x, v = tg.constant([0.4, 1.6]), tg.constant([1.0, 1.0])
    with tg.ForwardAccumulator(x, v) as acc:
        a = _straight_round(x)
        b = _cube(x)
        c = _twice(x)
    np.testing.assert_allclose(acc.jvp(a).numpy(), [0.5, 0.5])  # the surrogate, transposed
    np.testing.assert_allclose(acc.jvp(b).numpy(), 3 * x.numpy() ** 2)
    np.testing.assert_allclose(acc.jvp(c).numpy(), [2.0, 2.0])
    assert _twice_jvp.calls == 1
    with tg.ForwardAccumulator(x, v) as acc:
        with tg.gradient_override_map({"ForwardTestCube": "Identity"}):
            b = _cube(x)
    np.testing.assert_allclose(acc.jvp(b).numpy(), [1.0, 1.0])  # the override applies


def test_gradient_override_map_changes_jvps_as_it_changes_gradients():
    # Relu -> Identity: the tangent passes unchanged where relu's own JVP would mask it, in an
    # accumulator, in jacfwd and in a tall GradientTape.jacobian (columns by forward mode)
    x = tg.constant([-1.0, 2.0, -0.5])
    t = tg.constant([1.0, -3.0, 2.0])
    with tg.ForwardAccumulator(x, t) as acc:
        with tg.gradient_override_map({"Relu": "Identity"}):
            y = tg.nn.relu(x) * 2.0
    np.testing.assert_array_equal(acc.jvp(y).numpy(), [2.0, -6.0, 4.0])
    with tg.gradient_override_map({"Relu": "Identity"}):
        j = tg.jacfwd(lambda a: tg.nn.relu(a))(x)
    np.testing.assert_array_equal(j.numpy(), np.eye(3))
    a = tg.constant(np.arange(12.0).reshape(4, 3) - 6.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        with tg.gradient_override_map({"Relu": "Identity"}):
            z = tg.nn.relu(a @ x)  # a 4 x 3 Jacobian: three forward sweeps
    np.testing.assert_array_equal(tape.jacobian(z, x).numpy(), a.numpy())
    with tg.GradientTape() as tape:  # the gradient it agrees with
        tape.watch(x)
        with tg.gradient_override_map({"Relu": "Identity"}):
            z = tg.nn.relu(a @ x)
    np.testing.assert_array_equal(tape.gradient(z, x).numpy(), a.numpy().sum(axis=0))


@tg.primitive("ForwardTestScaledProduct")
def _scaled_product(a, b):
    return 3.0 * a * b


@tg.RegisterGradient("ForwardTestScaledProduct")
def _scaled_product_grad(op, dy):
    a, b = op.inputs
    return dy * 3.0 * b, dy * 3.0 * a


def test_the_transposed_vjp_of_an_op_given_a_variable_and_a_raw_array():
    # no JVP rule: the tangent comes from the transposed VJP, which reads the observed op's
    # input ids; the NumPy array is a constant input, the Variable a primal with a tangent
    w = tg.Variable([1.0, -2.0, 0.5])
    raw = np.asarray([2.0, 4.0, -1.0])
    with tg.ForwardAccumulator(w, tg.constant([1.0, 0.5, 2.0])) as acc:
        y = _scaled_product(w, raw)
    np.testing.assert_allclose(acc.jvp(y).numpy(), 3.0 * raw * [1.0, 0.5, 2.0])
    with tg.ForwardAccumulator(w, tg.constant([1.0, 0.5, 2.0])) as acc:
        y = _scaled_product(raw, w)  # the tangent on the second input
    np.testing.assert_allclose(acc.jvp(y).numpy(), 3.0 * raw * [1.0, 0.5, 2.0])


def test_register_jvp_errors():
    with pytest.raises(TypeError, match="RegisterJVP: op_type must be a non-empty string"):
        tg.RegisterJVP(1)
    with pytest.raises(ValueError, match="'ForwardTestTwice' already has a JVP rule"):
        tg.RegisterJVP("ForwardTestTwice")(lambda op, t: t)


# --- transforms -----------------------------------------------------------------------------
def _f(x):
    return tg.sum(tg.tanh(x) ** 2)


def test_jvp_jacfwd_hessian_hvp():
    x0 = np.array([0.3, -0.7, 1.1])
    v0 = np.array([1.0, 2.0, -1.0])
    x, v = tg.constant(x0), tg.constant(v0)
    out, t = tg.jvp(lambda a: tg.sin(a) * 2.0, (x,), (v,))
    np.testing.assert_allclose(out.numpy(), 2 * np.sin(x0))
    np.testing.assert_allclose(t.numpy(), 2 * np.cos(x0) * v0)
    np.testing.assert_allclose(tg.jacfwd(lambda a: tg.sin(a))(x).numpy(), np.diag(np.cos(x0)))
    th = np.tanh(x0)
    h = np.diag(2 * (1 - th ** 2) * (1 - 3 * th ** 2))  # d2/dx2 tanh(x)^2
    np.testing.assert_allclose(tg.hessian(_f)(x).numpy(), h, atol=1e-12)
    np.testing.assert_allclose(tg.hvp(_f, (x,), (v,)).numpy(), h @ v0, atol=1e-12)


def test_jacfwd_with_several_arguments_and_the_custom_rule():
    x, y = tg.constant([1.0, 2.0]), tg.constant(3.0)
    jx, jy = tg.jacfwd(lambda a, b: _straight_round(a) * b, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(jx.numpy(), np.diag([1.5, 1.5]))
    np.testing.assert_allclose(jy.numpy(), [1.0, 2.0])


# --- tg.test in forward mode ------------------------------------------------------------------
def test_check_gradients_checks_forward_mode_to_second_order():
    x = np.array([0.3, 1.0, -0.4])
    tg.test.check_gradients(lambda a: tg.sin(a) * tg.exp(a), [x], order=2, modes=("rev", "fwd"))
    tg.test.check_gradients(lambda a: _cube(a) * 2.0, [x], order=2, modes="fwd")


def test_check_gradients_in_forward_mode_names_a_wrong_rule():
    @tg.custom_gradient
    def wrong(a):
        return tg.sin(a), lambda dy: dy * tg.cos(a) * 1.5

    with pytest.raises(AssertionError, match=r"forward mode, input 0 \(shape \(3,\)\).*the JVP "
                                             r"J v does not match central differences"):
        tg.test.check_gradients(wrong, [np.array([0.3, 1.0, -0.4])], modes=("fwd",))
    with pytest.raises(ValueError, match="modes must name 'rev' and/or 'fwd'"):
        tg.test.check_gradients(tg.sin, [np.array([1.0])], modes=("forward",))


def test_accumulator_misuse_and_a_jvp_rule_of_the_wrong_count_raise():
    x = tg.constant([1.0])
    acc = tg.ForwardAccumulator(x, tg.constant([1.0]))
    with acc:
        with pytest.raises(ValueError, match="this ForwardAccumulator is already active"):
            acc.__enter__()

    @tg.primitive("ForwardTestBadRule")
    def bad(a):
        return a * 2.0

    @tg.RegisterGradient("ForwardTestBadRule")
    def _bad_grad(op, dy):
        return dy * 2.0

    @tg.RegisterJVP("ForwardTestBadRule")
    def _bad_jvp(op, t):
        return t, t

    with pytest.raises(tg.errors.GradientShapeError, match=r"the JVP rule .*_bad_jvp \(.*\) of op type "
                                                           "'ForwardTestBadRule' returned 2 "
                                                           r"tangent\(s\) for 1 output"):
        with tg.ForwardAccumulator(x, tg.constant([1.0])):
            bad(x)


@tg.primitive("ForwardTestLooseRule")
def _loose(x, *, mode):
    return x * 2.0


@tg.RegisterGradient("ForwardTestLooseRule")
def _loose_grad(op, dy):
    return dy * 2.0


@tg.RegisterJVP("ForwardTestLooseRule")
def _loose_jvp(op, t):
    mode = op.attrs["mode"]
    if mode == "float32":
        return tg.astype(t * 2.0, tg.float32)
    if mode == "scalar":
        return tg.sum(t) * 0.0 + 2.0 * t[0]  # a 0-d tangent: broadcast to the output
    if mode == "complex":
        return tg.astype(t, tg.complex128) * 2.0
    return tg.concat([t, t])


def test_tangents_are_checked_as_gradients_are():
    x, v = tg.constant([1.0, 2.0]), tg.constant([1.0, 1.0])
    for mode in ("float32", "scalar"):
        with tg.ForwardAccumulator(x, v) as acc:
            y = _loose(x, mode=mode)
        t = acc.jvp(y)
        assert t.dtype == np.float64 and t.shape == (2,)
        np.testing.assert_allclose(t.numpy(), [2.0, 2.0])
    with pytest.raises(tg.errors.GradientShapeError, match=r"the JVP rule .*_loose_jvp .* of op "
                                                           r"type 'ForwardTestLooseRule' returned "
                                                           r"a tangent for output 0 \(shape "
                                                           r"\(2,\), dtype float64\) of the "
                                                           "complex dtype complex128"):
        with tg.ForwardAccumulator(x, v):
            _loose(x, mode="complex")
    with pytest.raises(tg.errors.GradientShapeError, match=r"of shape \(4,\), which does not "
                                                           "broadcast to it"):
        with tg.ForwardAccumulator(x, v):
            _loose(x, mode="shape")


# --- GradientTape.jacobian: columns by forward mode when the source is the smaller ---------------
@tg.primitive("ForwardTestSquare")
def _square(x):
    return x * x


@tg.RegisterGradient("ForwardTestSquare")
def _square_grad(op, dy):
    _square.calls["grad"] += 1
    return dy * 2.0 * op.inputs[0]


@tg.RegisterJVP("ForwardTestSquare")
def _square_jvp(op, t):
    _square.calls["jvp"] += 1
    return t * 2.0 * op.inputs[0]


def _rows(f, x, n):
    """The reverse method: one tape.gradient per target element, with a one-hot cotangent."""
    rows = []
    for k in range(n):
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        rows.append(tape.gradient(y, x, output_gradients=tg.constant(np.eye(n)[k].reshape(
            y.shape))).numpy())
    return np.stack(rows).reshape(tuple(y.shape) + tuple(x.shape))


@pytest.mark.parametrize("shape_a", [(12, 3), (3, 12)])  # tall (forward), wide (reverse)
def test_jacobian_chooses_forward_mode_for_tall_targets_with_the_same_values(shape_a):
    rng = np.random.default_rng(3)
    a = tg.constant(rng.normal(size=shape_a))
    x = tg.constant(rng.normal(size=shape_a[1]))

    def f(x):  # a built-in chain, a custom rule (surrogate) and an op with counted rules
        return tg.tanh(a @ _square(x)) + _straight_round(a @ x) * tg.sum(x)

    _square.calls = {"grad": 0, "jvp": 0}
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    j = tape.jacobian(y, x, experimental_use_pfor=False)  # rows one by one: counted
    m, n = shape_a
    if m > n:  # one forward sweep per source element, no reverse pass
        assert _square.calls == {"grad": 0, "jvp": n}
    else:  # one reverse pass per target element
        assert _square.calls == {"grad": m, "jvp": 0}
    want = _rows(f, x, m)
    np.testing.assert_allclose(j.numpy(), want, rtol=1e-13, atol=1e-13)
    # by hand: the surrogate's Jacobian is half the identity
    x0, a0 = x.numpy(), a.numpy()
    hand = ((1 - np.tanh(a0 @ x0 ** 2) ** 2)[:, None] * a0 * 2 * x0
            + 0.5 * a0 * np.sum(x0) + np.round(a0 @ x0)[:, None])
    np.testing.assert_allclose(j.numpy(), hand, rtol=1e-12)


def test_forward_mode_jacobians_of_several_sources_batches_and_dropped_records(monkeypatch):
    monkeypatch.setattr(tg._records, "DROP_MIN_BYTES", 0)  # records keep what gradients read
    rng = np.random.default_rng(4)
    a = tg.constant(rng.normal(size=(10, 2)))
    x, b = tg.constant(rng.normal(size=2)), tg.constant(rng.normal(size=()))
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([x, b])
        y = tg.nn.relu(tg.sin(a @ x)) * b + tg.exp(a @ x)
    jx, jb = tape.jacobian(y, [x, b])
    z = a.numpy() @ x.numpy()
    dz = (np.cos(z) * (np.sin(z) > 0) * b.numpy() + np.exp(z))[:, None] * a.numpy()
    np.testing.assert_allclose(jx.numpy(), dz, rtol=1e-13)
    np.testing.assert_allclose(jb.numpy(), np.maximum(np.sin(z), 0.0), rtol=1e-13)
    xb = tg.constant(rng.normal(size=(4, 2)))
    w = tg.constant(rng.normal(size=(2, 5)))
    with tg.GradientTape() as tape:
        tape.watch(xb)
        yb = tg.tanh(xb @ w)
    jb = tape.batch_jacobian(yb, xb)  # 2 forward sweeps instead of 5 reverse passes
    t = np.tanh(xb.numpy() @ w.numpy())
    np.testing.assert_allclose(jb.numpy(), (1 - t ** 2)[:, :, None] * w.numpy().T[None],
                               rtol=1e-13)


def test_forward_mode_jacobian_is_differentiable_and_hooks_keep_reverse_mode():
    rng = np.random.default_rng(5)
    a = tg.constant(rng.normal(size=(6, 2)))
    x = tg.constant(rng.normal(size=2))
    with tg.GradientTape() as outer:
        outer.watch(x)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.sin(a @ x)
        s = tg.sum(tape.jacobian(y, x))  # sum_ij cos(a_i x) a_ij
    a0, x0 = a.numpy(), x.numpy()
    want = -a0.T @ (np.sin(a0 @ x0) * a0.sum(axis=1))
    np.testing.assert_allclose(outer.gradient(s, x).numpy(), want, rtol=1e-12)
    with tg.GradientTape() as tape:  # a gradient hook acts on reverse passes: rows are kept
        tape.watch(x)
        h = a @ x
        h.register_hook(lambda g: g * 2.0)
        y = tg.sin(h)
    np.testing.assert_allclose(tape.jacobian(y, x).numpy(),
                               2 * np.cos(a0 @ x0)[:, None] * a0, rtol=1e-13)


# --- complex numbers: JVPs are f'(z) t, gradients TensorFlow's conj(f'(z)) dy -------------------
def _complex_jax_cases():
    return {
        "negative": (lambda z: -z, lambda z: -z),
        "twice": (lambda z: 2.0 * z, lambda z: 2.0 * z),
        "imag": (tg.imag, "imag"), "real": (tg.real, "real"), "conj": (tg.conj, "conj"),
        "abs": (tg.abs, "abs"), "exp": (tg.exp, "exp"), "sin": (tg.sin, "sin"),
        "sqrt": (tg.sqrt, "sqrt"), "log": (tg.log, "log"), "tanh": (tg.tanh, "tanh"),
        "reciprocal": (tg.reciprocal, "reciprocal"), "square": (tg.square, "square"),
        "acosh": (tg.acosh, "arccosh"), "pow": (lambda z: z ** 2.5, lambda z: z ** 2.5),
        "angle": (tg.angle, "angle"),
        "prod": (lambda z: tg.prod(z), "prod"),
        "cumulative_prod": (lambda z: tg.cumulative_prod(z), "cumprod"),
        "matmul": (lambda z: tg.reshape(z, (2, 2)) @ tg.reshape(z, (2, 2)),
                   lambda z: z.reshape(2, 2) @ z.reshape(2, 2)),
        "vecdot": (lambda z: tg.vecdot(z, z * z), lambda z: (z.conj() * z * z).sum()),
        "inv": (lambda z: tg.linalg.inv(_matrix(z)),
                lambda z: jnp().linalg.inv(_matrix_jax(z))),
        "det": (lambda z: tg.linalg.det(_matrix(z)), lambda z: jnp().linalg.det(_matrix_jax(z))),
        "solve": (lambda z: tg.linalg.solve(_matrix(z), z[:2] * z[2:]),
                  lambda z: jnp().linalg.solve(_matrix_jax(z), z[:2] * z[2:])),
        "vector_norm": (tg.linalg.vector_norm, "linalg.norm"),
        "vector_norm_3": (lambda z: tg.linalg.vector_norm(z, ord=3),
                          lambda z: jnp().linalg.norm(z, ord=3)),
        "matrix_norm": (lambda z: tg.linalg.matrix_norm(_matrix(z)),
                        lambda z: jnp().linalg.norm(_matrix_jax(z))),
        "matrix_norm_1": (lambda z: tg.linalg.matrix_norm(_matrix(z), ord=1),
                          lambda z: jnp().linalg.norm(_matrix_jax(z), ord=1)),
        "slogdet_sign": (lambda z: tg.linalg.slogdet(_matrix(z)).sign,
                         lambda z: jnp().linalg.slogdet(_matrix_jax(z))[0]),
        "slogdet_logabsdet": (lambda z: tg.linalg.slogdet(_matrix(z)).logabsdet,
                              lambda z: jnp().linalg.slogdet(_matrix_jax(z))[1]),
        "cholesky": (lambda z: tg.linalg.cholesky(_hermitian(z)),
                     lambda z: jnp().linalg.cholesky(_hermitian_jax(z))),
        "cholesky_upper": (lambda z: tg.linalg.cholesky(_hermitian(z), upper=True),
                           lambda z: jnp().linalg.cholesky(_hermitian_jax(z), upper=True)),
        "eigvalsh": (lambda z: tg.linalg.eigvalsh(_hermitian(z)),
                     lambda z: jnp().linalg.eigvalsh(_hermitian_jax(z))),
        "svdvals": (lambda z: tg.linalg.svdvals(_matrix(z)),
                    lambda z: jnp().linalg.svd(_matrix_jax(z), compute_uv=False)),
        "pinv": (lambda z: tg.linalg.pinv(_matrix(z)),
                 lambda z: jnp().linalg.pinv(_matrix_jax(z))),
        "pinv_wide": (lambda z: tg.linalg.pinv(tg.reshape(z, (1, 4))),
                      lambda z: jnp().linalg.pinv(z.reshape(1, 4))),
        "matrix_norm_nuc": (lambda z: tg.linalg.matrix_norm(_matrix(z), ord="nuc"),
                            lambda z: jnp().linalg.norm(_matrix_jax(z), ord="nuc")),
        "matrix_norm_2": (lambda z: tg.linalg.matrix_norm(_matrix(z), ord=2),
                          lambda z: jnp().linalg.norm(_matrix_jax(z), ord=2)),
        "matrix_norm_-2": (lambda z: tg.linalg.matrix_norm(_matrix(z), ord=-2),
                           lambda z: jnp().linalg.norm(_matrix_jax(z), ord=-2)),
        # the decompositions, through gauge-invariant functions of their vectors (complex
        # eigenvectors and singular vectors are defined up to phases, Q and R up to signs)
        "eigh_values": (lambda z: tg.linalg.eigh(_hermitian(z)).eigenvalues,
                        lambda z: jnp().linalg.eigh(_hermitian_jax(z))[0]),
        "eigh_vectors": (lambda z: _spectral(*tg.linalg.eigh(_hermitian(z))[::-1], tg.conj),
                         lambda z: _spectral(*jnp().linalg.eigh(_hermitian_jax(z))[::-1],
                                             jnp().conj)),
        "svd_values": (lambda z: tg.linalg.svd(_matrix(z)).S,
                       lambda z: jnp().linalg.svd(_matrix_jax(z))[1]),
        "svd_vectors": (lambda z: _spectral(*_svd_vectors(tg.linalg.svd(_matrix(z)))),
                        lambda z: _spectral(*_svd_vectors(jnp().linalg.svd(_matrix_jax(z))))),
        "qr": (lambda z: _qr_signs(*tg.linalg.qr(_matrix(z) * 1j), tg),
               lambda z: _qr_signs(*jnp().linalg.qr(_matrix_jax(z) * 1j), jnp())),
        "fft": (tg.fft.fft, "fft.fft"), "ifft": (tg.fft.ifft, "fft.ifft"),
        "irfft": (tg.fft.irfft, "fft.irfft"),
        "chain": (lambda z: tg.exp(tg.conj(z) * z) / (z + 3.0) + tg.imag(z) * z,
                  lambda z: jnp().exp(z.conj() * z) / (z + 3.0) + z.imag * z),
    }


def _matrix(z):  # a well-conditioned complex 2 x 2 matrix of the case's 4 elements
    return tg.reshape(z, (2, 2)) + 2.0 * tg.eye(2, dtype=z.dtype)


def _matrix_jax(z):
    return z.reshape(2, 2) + 2.0 * jnp().eye(2, dtype=z.dtype)


def _hermitian(z):  # a Hermitian positive-definite 2 x 2 matrix of the case's 4 elements
    m = _matrix(z)
    return m @ tg.conj(tg.matrix_transpose(m)) + tg.eye(2, dtype=z.dtype)


def _hermitian_jax(z):
    m = _matrix_jax(z)
    return m @ m.conj().T + jnp().eye(2, dtype=z.dtype)


def _spectral(v, w_or_vh, conj=None):
    """``V diag(1, 2) V^H`` (``U diag(1, 2) Vh``): invariant under the vectors' phases."""
    c = np.array([1.0, 2.0])
    if conj is not None:  # eigh: (eigenvectors, eigenvalues, conj)
        return (v * c) @ conj(v.T)
    return (v * c) @ w_or_vh


def _svd_vectors(usv):
    return usv[0], usv[2]


def _qr_signs(q, r, xp):
    """``Q`` and ``R`` with ``R``'s (real) diagonal made positive, flattened together."""
    d = xp.astype(xp.sign(xp.real(xp.linalg.diagonal(r))), q.dtype)
    return xp.concat([xp.reshape(q * d, (-1,)), xp.reshape(r * d[:, None], (-1,))])


def jnp():
    import jax.numpy

    return jax.numpy


def _jax_fn(spec):
    if callable(spec):
        return spec
    fn = jnp()
    for part in spec.split("."):
        fn = getattr(fn, part)
    return fn


@pytest.mark.parametrize("name", list(_complex_jax_cases()))
def test_complex_jvps_match_jax_and_gradients_are_its_conjugates(name):
    # the issue's cases: acc.jvp(-x) was -conj(t), so imag, conj, exp, ... disagreed with
    # jax.jvp; JAX's gradient of a real loss is dL/dRe - i dL/dIm, TensorFlow's and tapegrad's
    # its conjugate
    jax = pytest.importorskip("jax")
    f, spec = _complex_jax_cases()[name]
    g = _jax_fn(spec)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    z = rng.uniform(0.5, 1.5, 4) + 1j * rng.uniform(-1.0, 1.0, 4)
    t = rng.uniform(-1.0, 1.0, 4) + 1j * rng.uniform(-1.0, 1.0, 4)
    with tg.config.x64_scope(jax):
        _, want = jax.jit(lambda a, b: jax.jvp(g, (a,), (b,)))(z, t)  # one program
    x = tg.constant(z)
    with tg.ForwardAccumulator(x, tg.constant(t)) as acc:
        y = f(x)
    got = acc.jvp(y)
    assert got.dtype == y.dtype and got.shape == y.shape
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tg.jvp(f, (x,), (tg.constant(t),))[1].numpy(), np.asarray(want),
                               rtol=1e-12, atol=1e-12)
    w = rng.uniform(-1.0, 1.0, np.shape(np.asarray(want))) + 1j * rng.uniform(
        -1.0, 1.0, np.shape(np.asarray(want)))

    def loss_jax(a):
        return jnp().sum(jnp().real(jnp().conj(w) * g(a)))

    with tg.GradientTape() as tape:
        tape.watch(x)
        loss = tg.sum(tg.real(tg.conj(tg.constant(w)) * f(x)))
    with tg.config.x64_scope(jax):
        want_grad = np.asarray(jax.jit(jax.grad(loss_jax))(z))
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), np.conj(want_grad), rtol=1e-12,
                               atol=1e-12)


def test_the_issues_fft_pipeline_jvp_matches_jax():
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(18)
    x0, t0 = rng.normal(size=8), rng.normal(size=8)

    def f_jax(a):
        r = jnp().fft.rfft(a)
        return jnp().real(r) + 2.0 * jnp().imag(r)

    with tg.config.x64_scope(jax):
        _, want = jax.jvp(f_jax, (x0,), (t0,))
    _, got = tg.jvp(lambda a: tg.real(tg.fft.rfft(a)) + 2.0 * tg.imag(tg.fft.rfft(a)),
                    (tg.constant(x0),), (tg.constant(t0),))
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-12, atol=1e-12)
    z0 = x0[:5] + 1j * t0[:5]
    with tg.config.x64_scope(jax):
        _, want = jax.jvp(lambda z: jnp().fft.irfft(z * z), (z0,), (1j * z0,))
    _, got = tg.jvp(lambda z: tg.fft.irfft(z * z), (tg.constant(z0),), (tg.constant(1j * z0),))
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-12, atol=1e-12)


def test_the_sign_of_a_complex_number_has_its_derivative():
    # sign(z) = z / |z|: JAX and TensorFlow give it a zero derivative (right for real z only);
    # tapegrad gives i s Im(conj(s) t) / |z| in both modes, and 0 at z = 0
    z0 = np.array([1.0 + 2.0j, -0.5 + 0.1j, 0.0])
    t0 = np.array([0.3 - 1.0j, 1.0 + 1.0j, 1.0 + 0.0j])
    h = 1e-7
    numeric = (np.sign(z0[:2] + h * t0[:2]) - np.sign(z0[:2] - h * t0[:2])) / (2 * h)
    _, got = tg.jvp(tg.sign, (tg.constant(z0),), (tg.constant(t0),))
    np.testing.assert_allclose(got.numpy()[:2], numeric, rtol=1e-7)
    assert got.numpy()[2] == 0.0
    tg.test.check_gradients(tg.sign, [np.array([1.0 + 2.0j, -2.0 + 1.0j])], order=2,
                            modes=("rev", "fwd"))


def test_jacfwd_of_pytrees_has_jax_structure_and_values():
    # jacfwd converted every argument to one Tensor: a dict gave "constant: the value has no
    # numeric dtype", and jacfwd(grad(f)) of a dict failed with it
    import collections

    jax = pytest.importorskip("jax")
    P = collections.namedtuple("P", "u v")
    d0 = {"w": np.array([0.5, -1.5]), "s": np.array(2.0)}

    def f(d, scale, np_=tg):
        return P(np_.sin(d["w"]) * d["s"], {"t": np_.sum(d["w"] ** 2) * scale})

    def g(d, np_=tg):
        return np_.sum(np_.exp(d["w"]) * d["s"] ** 3)

    d = {k: tg.constant(v) for k, v in d0.items()}
    got = [tg.jacfwd(f)(d, 3.0), tg.jacfwd(tg.grad(g))(d)]
    with jax.enable_x64(True):
        want = [jax.jacfwd(lambda d: f(d, 3.0, jax.numpy))(d0),
                jax.jacfwd(jax.grad(lambda d: g(d, jax.numpy)))(d0)]
    assert type(got[0]) is P and set(got[0].v["t"]) == {"s", "w"}
    for got_k, want_k in zip(got, want):
        assert tg.tree_util.tree_structure(got_k) == tg.tree_util.tree_structure(
            jax.tree_util.tree_map(np.asarray, want_k))
        for a, b in zip(tg.tree_util.tree_leaves(got_k), jax.tree_util.tree_leaves(want_k)):
            np.testing.assert_allclose(a.numpy(), np.asarray(b), rtol=1e-12, atol=1e-12)


def test_jvp_hvp_and_hessian_of_pytree_primals_match_jax():
    # jvp converted each primal to one Tensor: a dict gave "constant: the value has no numeric
    # dtype", and a tuple of equal-shaped leaves was stacked, f receiving one Tensor
    import collections

    jax = pytest.importorskip("jax")
    P = collections.namedtuple("P", "a b")
    x0 = {"a": np.array([1.0, -2.0]), "b": np.array(3.0)}
    v0 = {"a": np.array([0.5, 0.25]), "b": np.array(-1.0)}
    kinds = {"dict": lambda d: d, "tuple": lambda d: (d["a"], d["b"] + 0.0 * d["a"]),
             "namedtuple": lambda d: P(d["a"], d["b"])}

    def f(p, c, np_=tg):  # p: the pytree; c: a second argument, a scalar
        a, b = (p["a"], p["b"]) if isinstance(p, dict) else (p[0], p[1])
        return {"y": np_.sin(a) * b * c, "z": (np_.sum(a ** 2 * b) * c,)}

    def scalar(p, np_=tg):
        return np_.sum(f(p, 2.0, np_)["y"] ** 2) + f(p, 2.0, np_)["z"][0]

    for kind, make in kinds.items():
        x, v = make(x0), make(v0)
        tg_x, tg_v = (tg.tree_util.tree_map(tg.constant, t) for t in (x, v))
        seen = []
        out, tangent = tg.jvp(lambda p, c: seen.append(type(p)) or f(p, c), (tg_x, 2.0),
                              (tg_v, 1.0))
        assert seen == [type(x)], kind  # f gets the tree, not a stacked Tensor
        got = [out, tangent, tg.hvp(scalar, (tg_x,), (tg_v,)), tg.hessian(scalar)(tg_x)]
        with tg.config.x64_scope(jax):
            jx, jv = (jax.tree_util.tree_map(jax.numpy.asarray, t) for t in (x, v))
            jout, jtangent = jax.jvp(lambda p, c: f(p, c, jax.numpy), (jx, 2.0), (jv, 1.0))
            g = jax.grad(lambda p: scalar(p, jax.numpy))
            want = [jout, jtangent, jax.jvp(g, (jx,), (jv,))[1],
                    jax.hessian(lambda p: scalar(p, jax.numpy))(jx)]
            want = jax.tree_util.tree_map(np.asarray, want)
        for got_k, want_k in zip(got, want):
            assert tg.tree_util.tree_structure(got_k) == tg.tree_util.tree_structure(want_k), kind
            for a, b in zip(tg.tree_util.tree_leaves(got_k), tg.tree_util.tree_leaves(want_k)):
                np.testing.assert_allclose(a.numpy(), b, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"jvp: the tangents have the structure .* but the "
                                         r"primals have"):
        tg.jvp(lambda p: p["a"], ({"a": tg.constant(1.0)},), ({"b": tg.constant(1.0)},))
    with pytest.raises(TypeError, match=r"jvp: primals must be a tuple or list .* \(primal,\)"):
        tg.jvp(tg.sin, tg.constant(1.0), (tg.constant(1.0),))
