"""Elementwise ops: the functions added for Array API 2024.12 (conj, real, imag, nextafter), the
complex-gradient convention, the bitwise operators of Tensor, and astype.

Forwards are compared with the backend's own function (NumPy and array-api-strict) over random
shapes including 0-d and size-0; gradients with central differences.
"""
from __future__ import annotations

import array_api_strict as xs
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg

SETTINGS = settings(max_examples=25, deadline=None)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def _floats(dtype):
    width = np.dtype(dtype).itemsize * 8
    return hnp.arrays(dtype, SHAPES, elements=st.floats(-10, 10, width=width))


def _complex(dtype):
    real = np.float32 if dtype == np.complex64 else np.float64
    return st.tuples(_floats(real), _floats(real)).filter(lambda p: p[0].shape == p[1].shape).map(
        lambda p: (p[0] + 1j * p[1]).astype(dtype))


ANY_FLOAT = st.sampled_from([np.float32, np.float64]).flatmap(_floats)
ANY_COMPLEX = st.sampled_from([np.complex64, np.complex128]).flatmap(_complex)


def _np(t):
    return t.numpy() if isinstance(t, tg.Tensor) else tg.asarray(t).numpy()


def _numpy(x):
    """A Tensor on NumPy whatever the default backend."""
    return tg.Tensor(np.asarray(x))


@pytest.mark.parametrize("name", ["conj", "real", "imag"])
@SETTINGS
@given(x=ANY_COMPLEX)
def test_complex_parts_match_the_backends(name, x):
    got = getattr(tg, name)(_numpy(x))
    want = getattr(np, name)(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    s = getattr(tg, name)(tg.asarray(xs.asarray(x)))
    np.testing.assert_array_equal(s.numpy(), _np(getattr(xs, name)(xs.asarray(x))))


@pytest.mark.parametrize("name", ["conj", "real"])
@SETTINGS
@given(x=ANY_FLOAT)
def test_conj_and_real_of_real_input_are_the_input(name, x):
    got = getattr(tg, name)(_numpy(x))
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.numpy(), x)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_nextafter_matches_the_backends(data, dtype):
    x1 = data.draw(_floats(dtype))
    x2 = data.draw(hnp.arrays(dtype, hnp.broadcastable_shapes(x1.shape, min_dims=0, min_side=0),
                              elements=st.floats(-10, 10, width=np.dtype(dtype).itemsize * 8)))
    got = tg.nextafter(_numpy(x1), _numpy(x2))
    want = np.nextafter(x1, x2)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
    s = tg.nextafter(tg.asarray(xs.asarray(x1)), tg.asarray(xs.asarray(x2)))
    np.testing.assert_array_equal(s.numpy(), _np(xs.nextafter(xs.asarray(x1), xs.asarray(x2))))


def test_nextafter_steps_one_ulp_and_its_gradient_is_the_identity_in_x1():
    x = np.array([1.0, 0.0, -2.0])
    y = tg.nextafter(tg.constant(x), 5.0).numpy()
    eps = np.finfo(float).eps
    np.testing.assert_array_equal(y, [1.0 + eps, 5e-324, -2.0 + eps])
    a, b = tg.Variable(x), tg.Variable([3.0, 3.0, 3.0])
    with tg.GradientTape() as t:
        out = tg.sum(tg.nextafter(a, b) * tg.constant([1.0, 2.0, 3.0]))
    ga, gb = t.gradient(out, [a, b])
    np.testing.assert_array_equal(ga.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(gb.numpy(), 0.0)


# --- complex gradients: the cotangent of z is dL/dRe(z) + i dL/dIm(z) ----------------------------
def _complex_grad_numeric(f, z, h=1e-6):
    """Central differences of the real loss ``f(z)`` along the real and imaginary parts."""
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = h
        d_re = (f(z + e) - f(z - e)) / (2 * h)
        d_im = (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
        g[i] = d_re + 1j * d_im
    return g


RNG = np.random.default_rng(3)
Z = RNG.normal(size=(2, 3)) + 1j * RNG.normal(size=(2, 3)) + (1.5 + 0.5j)  # away from branch cuts
W = RNG.normal(size=(2, 3)) + 1j * RNG.normal(size=(2, 3))

COMPLEX_FNS = {
    "exp": tg.exp, "log": tg.log, "sqrt": tg.sqrt, "sin": tg.sin, "tanh": tg.tanh,
    "reciprocal": tg.reciprocal, "acosh": tg.acosh, "asin": tg.asin, "square": tg.square,
    "abs": tg.abs, "conj": tg.conj, "real": tg.real, "imag": tg.imag,
    "negative": tg.negative,
    "mul_const": lambda z: z * tg.constant(W), "div_by": lambda z: tg.constant(W) / z,
    "sub": lambda z: z - 2.0j, "chain": lambda z: tg.exp(0.1 * tg.conj(z) * z) / (z + 3.0),
    "sign": tg.sign, "round": lambda z: tg.round(z * 10.0), "pow": lambda z: z ** 2.5,
    "pow_exponent": lambda z: tg.constant(W) ** z, "pow_real_base": lambda z: 2.0 ** z,
}


@pytest.mark.parametrize("name", list(COMPLEX_FNS))
def test_complex_gradient_convention(name):
    f = COMPLEX_FNS[name]

    def loss(z):  # a real loss: Re(sum(conj(W) f(z)))
        return tg.sum(tg.real(tg.conj(tg.constant(W)) * f(z)))

    v = tg.Variable(Z)
    with tg.GradientTape() as t:
        y = loss(v)
    g = t.gradient(y, v)
    assert g.dtype == np.complex128
    want = _complex_grad_numeric(lambda z: float(loss(tg.constant(z))), Z)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6, atol=1e-6)


def test_real_input_of_a_complex_result_gets_a_real_gradient():
    x = RNG.normal(size=(3,))
    v = tg.Variable(x)
    with tg.GradientTape() as t:
        y = tg.sum(tg.imag(v * tg.constant(W[0])) + tg.real(tg.astype(v, tg.complex128) * 2j))
    g = t.gradient(y, v)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g.numpy(), W[0].imag)  # d Im(x w)/dx = Im(w); Re(2i x) = 0


@pytest.mark.parametrize("f, op_type, name", [
    (tg.floor, "Floor", "x"), (lambda z: tg.maximum(1.0, z), "Maximum", "x2"),
    (lambda z: z < 0.5, "Less", "x1"), (lambda z: tg.clip(z, 0.0, 1.0), "Clip", "x"),
    (tg.nn.relu, "Relu", "features"), (lambda z: tg.atan2(z, 1.0), "Atan2", "x1"),
    (lambda z: tg.sort(z), "Sort", "x"), (lambda z: tg.max(z), "Max", "x")])
def test_real_only_ops_refuse_complex_input_naming_the_op_and_what_to_do(f, op_type, name):
    # TensorFlow and the Array API define these for real numbers only; NumPy would order by
    # the real part or drop the imaginary part without a word
    with pytest.raises(TypeError, match=rf"op type '{op_type}': input '{name}' has the complex "
                                        r"dtype complex128, but .* real numbers only.*"
                                        r"tg\.real\(z\) and tg\.imag\(z\)"):
        f(tg.constant(Z))
    with pytest.raises(TypeError, match=r"clip_by_value: t has the complex dtype complex128, "
                                        r"but clipping orders values.*tg\.real\(t\)"):
        tg.clip_by_value(tg.constant(Z), 0.0, 1.0)


def test_second_order_through_real_imag_conj():
    x = RNG.normal(size=(4,))
    tg.test.check_gradients(
        lambda a: tg.real(tg.astype(a, tg.complex128) * tg.constant(W[0, :1])) ** 3
        + tg.conj(a) * tg.imag(tg.astype(a, tg.complex128) * 1j), [x], order=2)


# --- operators and astype -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
def test_bitwise_operators(dtype):
    a = RNG.integers(0, 8, size=(3, 4)).astype(dtype)
    b = RNG.integers(0, 8, size=(4,)).astype(dtype)
    ta, tb = tg.constant(a), tg.constant(b)
    np.testing.assert_array_equal((ta & tb).numpy(), a & b)
    np.testing.assert_array_equal((ta | tb).numpy(), a | b)
    np.testing.assert_array_equal((ta ^ tb).numpy(), a ^ b)
    np.testing.assert_array_equal((~ta).numpy(), ~a)
    if dtype is not np.bool_:
        np.testing.assert_array_equal((ta << tb).numpy(), a << b)
        np.testing.assert_array_equal((ta >> 1).numpy(), a >> 1)
        np.testing.assert_array_equal((1 << ta).numpy(), 1 << a)
        np.testing.assert_array_equal((3 & ta).numpy(), 3 & a)
    else:
        np.testing.assert_array_equal((True ^ ta).numpy(), True ^ a)


def test_astype_copy_device_and_backend_dtypes():
    x = tg.constant([1.5, 2.5])
    assert tg.astype(x, tg.float64, copy=False) is x
    assert tg.astype(x, tg.float64) is not x
    assert x.astype(tg.float32, device=x.device).dtype == np.float32
    assert _numpy([1.0]).astype(tg.float32, device="cpu").dtype == np.float32
    s = tg.asarray(xs.asarray([1.5, -2.5]))
    for dtype in (tg.int32, "int32", xs.int32):
        y = tg.astype(s, dtype)
        assert y._value.dtype == xs.int32 and y.dtype == np.int32
        np.testing.assert_array_equal(y.numpy(), [1, -2])


@pytest.mark.parametrize("exponent", [0, 0.0, "tensor"])
def test_the_derivatives_of_x_to_the_power_zero_are_zero_at_zero(exponent):
    # d/dx x^0 = 0 everywhere (a^0 = 1), to second order, in reverse and forward mode, and
    # d/db a^b = a^b log a is 0 at a = 0 (TensorFlow's choice); JAX gives these with an integer
    # exponent 0 (for a float 0.0 its formula 0 * 0^-1 gives nan)
    jax = pytest.importorskip("jax")
    x0 = np.array([0.0, 1.5, -2.0])
    f = jax.grad(lambda a: jax.numpy.sum(jax.numpy.power(a, 0)))
    with tg.config.x64_scope(jax):
        want1, want2 = np.asarray(f(x0)), np.asarray(jax.jacfwd(f)(x0))
    x = tg.constant(x0)
    b = tg.zeros(3) if exponent == "tensor" else exponent
    with tg.GradientTape(persistent=True) as t2:
        t2.watch(x)
        with tg.GradientTape() as t1:
            t1.watch(x)
            y = tg.sum(tg.pow(x, b))
        g = t1.gradient(y, x)
        gi = [g[i] for i in range(3)]
    np.testing.assert_array_equal(g.numpy(), want1)
    for i in range(3):
        h = t2.gradient(gi[i], x, unconnected_gradients="zero")
        np.testing.assert_array_equal(h.numpy(), want2[i])
    ones = tg.ones(3)
    with tg.ForwardAccumulator(x, ones) as outer:
        with tg.ForwardAccumulator(x, ones) as inner:
            y = tg.pow(x, b)
        j = inner.jvp(y)
    np.testing.assert_array_equal(j.numpy(), want1)
    np.testing.assert_array_equal(outer.jvp(j, unconnected_gradients="zero").numpy(),
                                  np.diag(want2))
    if exponent == "tensor":
        with tg.GradientTape() as tape:
            tape.watch(b)
            y = tg.sum(tg.pow(x, b))
        with tg.config.x64_scope(jax):
            db = np.asarray(jax.grad(lambda e: jax.numpy.sum(jax.numpy.power(x0, e)))(
                np.zeros(3)))
        got = tape.gradient(y, b).numpy()
        np.testing.assert_array_equal(got[:2], db[:2])
        assert got[2] == 0.0  # a < 0: TensorFlow's 0 where JAX's log(a) gives nan


def test_a_python_complex_number_is_refused_by_a_real_only_op_too():
    with pytest.raises(TypeError, match=r"op type 'Maximum': input 'x2' has the complex dtype "
                                        r"complex, but Maximum is defined for real numbers only"):
        tg.maximum(tg.constant([1.0, 2.0]), 0.5j)


def test_angle_is_numpys_and_refuses_integers():
    z = np.array([1 + 2j, -3 + 0.5j, -1 - 1j, 2.0])
    np.testing.assert_allclose(tg.angle(tg.constant(z)).numpy(), np.angle(z), rtol=1e-15)
    np.testing.assert_allclose(tg.angle(tg.constant([-1.0, 2.0])).numpy(), [np.pi, 0.0])
    assert tg.angle(tg.constant(z)).dtype == tg.float64
    with pytest.raises(TypeError, match="angle: expected a floating or complex tensor, got "
                                        "dtype int64; cast it with tg.astype first"):
        tg.angle(tg.constant([1, 2]))


def test_an_op_of_python_scalars_computes_on_the_default_backend():
    """tg.sin(0.5) held a NumPy scalar under another default backend (array_api_strict), whose
    ops then refused it beside their arrays (the composition matrix's custom_gradient@nested)."""
    import math

    from tapegrad import _backend
    y = tg.sin(0.5)
    assert _backend.namespace(y._value) is _backend.default_namespace()
    np.testing.assert_allclose((y * tg.constant([1.0, 2.0])).numpy(),
                               [math.sin(0.5), 2 * math.sin(0.5)], rtol=1e-15)
    assert y.dtype == tg.float64
