"""``tg.debugging.enable_gradient_checks``: user-defined gradient rules check themselves at their
first call. A corpus of wrong rules, each caught on its first call with the message asserted;
tapegrad's own rules swept without false alarms; the switches."""
from __future__ import annotations

import inspect
import re
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.examples.digits  # noqa: F401 - the examples' own rules join the sweep
import tapegrad.examples.distributed_regression  # noqa: F401
from tapegrad import _records
from tapegrad.errors import GradientCheckError, GradientCheckWarning

STRICT = os.environ.get("TAPEGRAD_ARRAY_BACKEND") == "array_api_strict"


@pytest.fixture(autouse=True)
def checks():
    """Every test here runs with the checks on (and leaves them off)."""
    with tg.debugging.gradient_checks():
        yield


def _x(values, dtype=None):
    return tg.constant(np.asarray(values), dtype=dtype)  # complex stays complex


def _loss(y):
    return tg.sum(tg.real(y) if y.dtype.kind == "c" else y)


def _grad(f, *xs):
    return tg.grad(lambda *a: _loss(f(*a)), argnums=tuple(range(len(xs))))(*xs)


# ------------------------------------------------------------------ the corpus of wrong rules

@tg.custom_gradient
def seed_example_2(x):  # seed 002, Example 2: dy * sin(x) + 0.1 * x is not linear in dy
    def grad(dy):
        return dy * tg.sin(x) + 0.1 * x
    return x ** 2, grad


@tg.custom_gradient
def wrong_sign(x):
    def grad(dy):
        return -dy * tg.cos(x)
    return tg.sin(x), grad


@tg.custom_gradient
def wrong_factor(x):
    def grad(dy):
        return dy * 3.0 * x  # d(x^2) = 2x
    return x ** 2, grad


@tg.custom_gradient
def wrong_factor_f32(x):
    def grad(dy):
        return dy * 1.5 * x ** 2  # d(x^3) = 3 x^2
    return x ** 3, grad


@tg.custom_gradient
def transposed_matrix(a, x):  # y = a @ x; the gradient of x is a^T @ dy
    def grad(dy):
        return dy[:, None] * x[None, :], a @ dy
    return a @ x, grad


@tg.custom_gradient
def missing_conjugate(z, c):  # y = c z: the gradient is conj(c) dy (tapegrad's convention)
    def grad(dy):
        return dy * c, None
    return c * z, grad


@tg.custom_gradient
def wrong_broadcast_reduction(x, b):  # y = x + b, b of shape (4,) broadcast over rows
    def grad(dy):
        return dy, tg.mean(dy, axis=0)  # the sum over the broadcast axis, not the mean
    return x + b, grad


@tg.custom_gradient
def ifft_missing_1_over_n(x):  # y = ifft(x) = F^H x / n, whose adjoint is F dy / n
    def grad(dy):
        return tg.fft.fft(dy)
    return tg.fft.ifft(x), grad


@tg.custom_gradient
def rfft_doubled_bins(x):  # y = rfft(x): the adjoint zero-pads the missing bins, it does not
    n = x.shape[-1]        # mirror them (irfft does, doubling the interior bins' weight)

    def grad(dy):
        return tg.fft.irfft(dy, n=n) * n
    return tg.fft.rfft(x), grad


@tg.custom_gradient
def nonlinear_in_dy(x):
    def grad(dy):
        return dy * dy * tg.cos(x)
    return tg.sin(x), grad


@tg.custom_gradient
def wrong_second_input(x, y):
    def grad(dy):
        return dy * y, dy * y  # the gradient of y is dy * x
    return x * y, grad


@tg.custom_gradient
def missing_gradient(x, y):
    def grad(dy):
        return dy * y, None  # y is connected: None is a zero gradient, which is wrong
    return x * y, grad


@tg.custom_gradient
def wrong_second_order(x):  # first order right, its own gradient wrong
    @tg.custom_gradient
    def first(x):
        def grad2(dy):
            return dy * 2.0 * tg.cos(x)  # d(3 x^2)... the derivative of 3 sin(x) is 3 cos(x)
        return 3.0 * tg.sin(x), grad2

    def grad(dy):
        return dy * first(x)
    return -3.0 * tg.cos(x), grad


def _custom_vjp_wrong():
    f = tg.custom_vjp(lambda x: tg.exp(x))
    f.defvjp(lambda x: (tg.exp(x), x), lambda x, dy: (dy * x,))  # exp(x)' is exp(x), not x
    return f


def _custom_jvp_wrong():
    f = tg.custom_jvp(lambda x: tg.sin(x))

    @f.defjvp
    def rule(primals, tangents):
        (x,), (t,) = primals, tangents
        return tg.sin(x), t * tg.sin(x)  # the tangent of sin is t * cos(x)
    return f


@tg.primitive("GradientChecksWrongCube")
def _cube(x):
    return x ** 3


@tg.RegisterGradient("GradientChecksWrongCube")
def _wrong_cube_grad(op, dy):
    return dy * 3.0 * op.inputs[0]  # 3 x, not 3 x^2


@tg.primitive("GradientChecksCubeBadJVP")
def _cube2(x):
    return x ** 3


@tg.RegisterGradient("GradientChecksCubeBadJVP")
def _cube2_grad(op, dy):
    return dy * 3.0 * op.inputs[0] ** 2


@tg.RegisterJVP("GradientChecksCubeBadJVP")
def _cube2_jvp(op, t):
    return t * 2.0 * op.inputs[0] ** 2  # disagrees with the (right) gradient


@tg.RegisterGradient("GradientChecksWrongSinGrad")
def _wrong_sin_grad(op, dy):
    return dy * tg.sin(op.inputs[0])  # for Sin under gradient_override_map: not cos


def _override(x):
    with tg.gradient_override_map({"Sin": "GradientChecksWrongSinGrad"}):
        return tg.sin(x)


def _second_order(x):
    return tg.grad(lambda z: tg.sum(wrong_second_order(z)))(x)


rng = np.random.default_rng(7)
X = rng.uniform(-2, 2, 5)
A = rng.uniform(-2, 2, (3, 3))
Z = rng.uniform(-2, 2, 6) + 1j * rng.uniform(-2, 2, 6)

# (name, function, inputs, the message's expected excerpt)
CORPUS = [
    ("seed 002 Example 2 (+ 0.1*x)", seed_example_2, lambda: [_x(X)],
     r"'CustomGradient:seed_example_2' .*is not linear in its cotangent dy at input 0 'x'"),
    ("wrong sign", wrong_sign, lambda: [_x(X)],
     r"'CustomGradient:wrong_sign' .*disagrees with a central difference .*input 0 'x'"),
    ("wrong factor", wrong_factor, lambda: [_x(X)],
     r"wrong_factor.<locals>.grad \(.*test_gradient_checks.py:\d+\)\) disagrees"),
    ("wrong factor, float32", wrong_factor_f32, lambda: [_x(X, tg.float32)],
     r"disagrees .*tolerance rtol=0.001"),
    ("transposed matrix", transposed_matrix, lambda: [_x(A), _x(X[:3])],
     r"disagrees .* at input 1 'x'"),
    ("missing conjugate (complex)", missing_conjugate,
     lambda: [_x(Z), tg.constant(np.complex128(0.3 + 1.7j))],
     r"missing_conjugate' .*disagrees .*input 0 'z'"),
    ("wrong broadcast reduction", wrong_broadcast_reduction,
     lambda: [_x(rng.uniform(-1, 1, (3, 4))), _x(X[:4])], r"disagrees .*input 1 'b'"),
    ("ifft adjoint without 1/n", ifft_missing_1_over_n, lambda: [_x(Z)],
     r"ifft_missing_1_over_n' .*disagrees .*<g\(dy\), v> = "),
    ("rfft adjoint doubling the bins", rfft_doubled_bins, lambda: [_x(rng.uniform(-1, 1, 8))],
     r"rfft_doubled_bins' .*disagrees .*<dy, \(f\(x\+h\*v\) - f\(x-h\*v\)\)/\(2h\)> = "),
    ("nonlinear in dy (dy*dy)", nonlinear_in_dy, lambda: [_x(X)],
     r"not linear in its cotangent .*g\(a\*dy1 \+ dy2\)\[\d\] = .* but a\*g\(dy1\)"),
    ("wrong gradient of the second input", wrong_second_input, lambda: [_x(X), _x(X[::-1])],
     r"at input 1 'y'"),
    ("None for a connected input", missing_gradient, lambda: [_x(X), _x(X[::-1])],
     r"at input 1 'y'"),
    ("wrong second-order rule", _second_order, lambda: [_x(X)],
     r"'CustomGradient:first' .*grad2 .*disagrees"),
    ("custom_vjp, wrong bwd", _custom_vjp_wrong(), lambda: [_x(X)],
     r"'CustomVJP:<lambda>' .*disagrees .*input 0 'x'"),
    ("custom_jvp, wrong JVP rule", _custom_jvp_wrong(), lambda: [_x(X)],
     r"'CustomJVP:<lambda>' \(its gradient _custom_jvp_wrong.<locals>.rule .*disagrees"),
    ("RegisterGradient, wrong", _cube, lambda: [_x(X)],
     r"'GradientChecksWrongCube' \(its gradient _wrong_cube_grad .*disagrees .*input 0 'x'"),
    ("RegisterJVP disagreeing with the VJP", _cube2, lambda: [_x(X)],
     r"the JVP rule _cube2_jvp .* of op type 'GradientChecksCubeBadJVP' disagrees .*"
     r"<dy, jvp\(v\)> = .* and <g\(dy\), v> = .* from its gradient _cube2_grad"),
    ("gradient_override_map to a wrong rule", _override, lambda: [_x(X)],
     r"op type 'Sin' \(its gradient _wrong_sin_grad .*disagrees"),
]


@pytest.mark.parametrize("name, f, inputs, message", CORPUS, ids=[c[0] for c in CORPUS])
def test_a_wrong_rule_is_caught_at_its_first_call(name, f, inputs, message):
    with pytest.raises(GradientCheckError, match=message) as caught:
        _grad(f, *inputs())
    text = str(caught.value)
    assert "tolerance rtol=" in text and "tg.test.check_gradients" in text
    assert re.search(r"\.py:\d+\)", text)  # the rule's file and line


def test_the_message_names_the_two_numbers():
    with pytest.raises(GradientCheckError) as caught:
        _grad(wrong_factor, _x([1.0, 2.0]))
    lhs, rhs = map(float, re.findall(r"= (-?[\d.]+(?:e-?\d+)?)", str(caught.value))[:2])
    assert lhs == pytest.approx(1.5 * rhs, rel=1e-6)  # 3x against 2x, along the same v


# ----------------------------------------------------------------------- no false alarm

@tg.custom_gradient
def right(x):
    def grad(dy):
        return dy * 2.0 * x
    return x ** 2, grad


@tg.custom_gradient
def right_complex(z, c):
    def grad(dy):
        return dy * tg.conj(c), None
    return c * z, grad


@tg.custom_gradient
def right_ifft(x):
    n = x.shape[-1]

    def grad(dy):
        return tg.fft.fft(dy) / n
    return tg.fft.ifft(x), grad


@pytest.mark.parametrize("dtype", [None, tg.float32])
def test_right_rules_pass(dtype):
    x = _x(X, dtype)
    np.testing.assert_allclose(_grad(right, x)[0].numpy(), 2 * X, rtol=1e-6)
    c = tg.constant(np.complex128(0.3 + 1.7j))  # not a source: its None gradient is right
    g = tg.grad(lambda z: _loss(right_complex(z, c)))(_x(Z))
    np.testing.assert_allclose(g.numpy(), np.full(6, 0.3 - 1.7j))
    _grad(right_ifft, _x(Z))


def _builtin(opdef) -> bool:
    module = getattr(inspect.unwrap(opdef.forward), "__module__", "") or ""
    return module == "tapegrad" or module.startswith("tapegrad.")


def _sweep(dtype):
    """Every sample of every differentiable built-in op type, its gradient checked (all rules,
    every call): the op types flagged, as (type, dtype) pairs."""
    flagged, cases = set(), 0
    for name, opdef in sorted(tg.registered_ops().items()):
        if not (opdef.differentiable and _builtin(opdef)) or opdef.is_construct:
            continue
        for k, sample in enumerate(opdef.samples):
            if dtype == "complex128" and opdef.real_only:
                continue
            args, attrs, pos = sample.materialize(np.random.default_rng(k), dtype)
            if not pos:
                continue
            xs = [tg.constant(args[p]) for p in pos]
            full = list(args)
            for p, x in zip(pos, xs):
                full[p] = x
            with tg.GradientTape() as tape:
                tape.watch(xs)
                try:
                    out = opdef.public(*full, **attrs)
                except (TypeError, ValueError):  # the op refuses this dtype
                    continue
            outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                    if tg._backend.is_floating(o._value.dtype)]
            cases += 1
            with tg.debugging.gradient_checks(rules="all", calls=10 ** 9):
                try:
                    tape.gradient(outs, xs)
                except GradientCheckError:
                    flagged.add(name)
    return flagged, cases


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_no_false_alarm_on_the_registry(dtype, monkeypatch):
    monkeypatch.setattr(_records, "DROP_MIN_BYTES", 1 << 40)  # keep inputs: replay them
    flagged, cases = _sweep(dtype)
    assert cases > 150
    assert flagged == set()  # Eigh, Eigvalsh, Svd: by their declared hermitian= and gauge=


# ------------------------------------------------------------------------- the switches

def test_off_checks_nothing():
    tg.debugging.disable_gradient_checks()
    np.testing.assert_allclose(_grad(wrong_factor, _x([1.0, 2.0]))[0].numpy(), [3.0, 6.0])


def test_calls_counts_per_rule():
    @tg.custom_gradient
    def f(x):
        def grad(dy):
            return dy * 3.0 * x
        return x ** 2, grad

    tg.debugging.disable_gradient_checks()
    with tg.debugging.gradient_checks(calls=1):
        tg.debugging.disable_gradient_checks()
        _grad(f, _x(X))  # off: not counted
        tg.debugging.enable_gradient_checks(calls=2)
        for _ in range(2):
            with pytest.raises(GradientCheckError):
                _grad(f, _x(X))
        np.testing.assert_allclose(_grad(f, _x([1.0]))[0].numpy(), [3.0])  # the third call


def test_warn_instead_of_raise():
    with tg.debugging.gradient_checks(action="warn"):
        with pytest.warns(GradientCheckWarning, match="not linear in its cotangent"):
            g = _grad(seed_example_2, _x([1.0, 2.0]))[0]
    np.testing.assert_allclose(g.numpy(), np.sin([1.0, 2.0]) + 0.1 * np.array([1.0, 2.0]))


def test_custom_gradient_check_true_checks_one_function_while_off():
    @tg.custom_gradient(check=True)
    def f(x):
        def grad(dy):
            return dy * 3.0 * x
        return x ** 2, grad

    tg.debugging.disable_gradient_checks()
    with pytest.raises(GradientCheckError, match="'CustomGradient:f'"):
        _grad(f, _x(X))
    np.testing.assert_allclose(_grad(wrong_factor, _x([1.0]))[0].numpy(), [3.0])  # unchecked


def test_a_surrogate_is_checked_for_linearity_only():
    @tg.custom_gradient(surrogate=True)
    def straight(x):
        def grad(dy):
            return dy
        return tg.round(x), grad

    np.testing.assert_allclose(_grad(straight, _x([0.3, 1.2]))[0].numpy(), [1.0, 1.0])


def test_compiled_rules_are_not_checked():
    f = tg.function(lambda x: tg.grad(lambda z: tg.sum(wrong_factor(z)))(x))
    np.testing.assert_allclose(np.asarray(f(_x([1.0, 2.0]))), [3.0, 6.0])


@pytest.mark.parametrize("kwargs, message", [
    (dict(action="print"), r"action='print'; it must be 'raise' or 'warn'"),
    (dict(calls=0), r"calls=0; it must be a positive int"),
    (dict(rtol=-1.0), r"rtol=-1.0; it must be None or a non-negative number"),
    (dict(rules="mine"), r"rules='mine'; it must be 'user'"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tg.debugging.enable_gradient_checks(**kwargs)


def test_environment_variable_turns_the_checks_on():
    code = ("import tapegrad as tg\n"
            "@tg.custom_gradient\n"
            "def f(x):\n"
            "    return x * x, lambda dy: dy * x\n"
            "try:\n"
            "    tg.grad(lambda x: tg.sum(f(x)))(tg.constant([1.0, 2.0]))\n"
            "except tg.errors.GradientCheckError as e:\n"
            "    print('caught', type(e).__name__)\n")
    env = {**os.environ, "TAPEGRAD_CHECK_GRADIENTS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert "caught GradientCheckError" in out.stdout, out.stderr
