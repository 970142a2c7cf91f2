"""tg.fft: forward values against numpy.fft (and array-api-strict), errors, gradients.

Gradients are checked three ways: the complex VJP convention of every transform against
central differences of ``Re(sum(conj(y_bar) * f(x)))`` along real or complex directions,
``tg.test.check_gradients`` to second order on real -> real composites, and on the
array-api-strict backend against NumPy's.
"""
from __future__ import annotations

import warnings

import array_api_strict as xs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg

F = tg.fft
RNG = np.random.default_rng(7)
NORMS = ["backward", "ortho", "forward"]


def _real(shape, dtype=np.float64):
    return RNG.normal(size=shape).astype(dtype)


def _complex(shape, dtype=np.complex128):
    return (RNG.normal(size=shape) + 1j * RNG.normal(size=shape)).astype(dtype)


# name, input maker, keyword sets (1-d: n/axis, n-d: s/axes)
_ONE_D = [
    ("fft", _complex), ("ifft", _complex), ("rfft", _real), ("irfft", _complex),
    ("hfft", _complex), ("ihfft", _real),
]
_N_D = [("fftn", _complex), ("ifftn", _complex), ("rfftn", _real), ("irfftn", _complex)]
_ONE_D_KW = [({}, (6,)), ({"n": 8}, (3, 5)), ({"n": 3, "axis": 0}, (5, 4)),
             ({"axis": 1}, (2, 7, 3)), ({}, (0, 4)), ({"n": 2}, (1,)), ({"n": 1}, (3, 1))]
_N_D_KW = [({}, (3, 4)), ({"axes": (0, 2)}, (2, 3, 4)), ({"s": (5, 3), "axes": (1, 0)}, (3, 4)),
           ({"s": (-1, 7), "axes": (0, 1)}, (3, 4)), ({"axes": (1, 2)}, (0, 3, 4)),
           ({"axes": (-1,)}, (1, 3))]


# --- forward values ------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("kw, shape", _ONE_D_KW)
@pytest.mark.parametrize("name, make", _ONE_D)
def test_one_dimensional_transforms_match_numpy(name, make, kw, shape, norm):
    x = make(shape)
    got = getattr(F, name)(tg.constant(x), norm=norm, **kw)
    want = getattr(np.fft, name)(x, norm=norm, **kw)
    assert isinstance(got, tg.Tensor)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("kw, shape", _N_D_KW)
@pytest.mark.parametrize("name, make", _N_D)
def test_n_dimensional_transforms_match_numpy(name, make, kw, shape, norm):
    x = make(shape)
    got = getattr(F, name)(tg.constant(x), norm=norm, **kw)
    np_kw = dict(kw)
    if "s" in np_kw:  # NumPy has no -1 sizes: the input's size (2 (m - 1) on irfftn's last axis)
        sizes = list(np_kw["s"])
        for i, a in enumerate(np_kw["axes"]):
            if sizes[i] == -1:
                m = shape[a]
                sizes[i] = 2 * (m - 1) if name == "irfftn" and i == len(sizes) - 1 else m
        np_kw["s"] = sizes
    want = getattr(np.fft, name)(x, norm=norm, **np_kw)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, make", _ONE_D + _N_D)
def test_single_precision_is_kept(name, make):
    x = make((4, 6), np.float32 if make is _real else np.complex64)
    got = getattr(F, name)(tg.constant(x))
    want = getattr(np.fft, name)(x)
    assert got.dtype == want.dtype and got.dtype.itemsize in (4, 8)
    assert got.dtype in (np.float32, np.complex64)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_real_input_to_complex_transforms_is_promoted_as_numpy_does():
    x = _real((3, 5))
    for name in ["fft", "ifft", "irfft", "hfft", "fftn", "ifftn", "irfftn"]:
        got = getattr(F, name)(tg.constant(x))
        want = getattr(np.fft, name)(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def test_inverse_pairs_round_trip():
    x, z = _real((4, 7)), _complex((4, 7))
    np.testing.assert_allclose(F.ifft(F.fft(tg.constant(z), norm="ortho"), norm="ortho").numpy(),
                               z, atol=1e-12)
    np.testing.assert_allclose(F.irfft(F.rfft(tg.constant(x)), n=7).numpy(), x, atol=1e-12)
    np.testing.assert_allclose(F.hfft(F.ihfft(tg.constant(x)), n=7).numpy(), x, atol=1e-12)
    np.testing.assert_allclose(
        F.irfftn(F.rfftn(tg.constant(x), norm="forward"), s=(4, 7), axes=(0, 1),
                 norm="forward").numpy(), x, atol=1e-12)


def test_dft_by_definition():
    x = np.array([1.0, 2.0, 0.0, -1.0])
    want = [sum(x[j] * np.exp(-2j * np.pi * j * k / 4) for j in range(4)) for k in range(4)]
    np.testing.assert_allclose(F.fft(tg.constant(x.astype(complex))).numpy(), want, atol=1e-12)
    np.testing.assert_allclose(F.rfft(tg.constant(x)).numpy(), want[:3], atol=1e-12)
    np.testing.assert_allclose(F.fft(tg.constant(x.astype(complex)), norm="ortho").numpy(),
                               np.asarray(want) / 2.0, atol=1e-12)


def test_accepts_backend_arrays_and_lists():
    x = _real(6)
    np.testing.assert_allclose(F.rfft(x).numpy(), np.fft.rfft(x), atol=1e-12)
    np.testing.assert_allclose(F.fft([1.0, 2.0, 3.0]).numpy(), np.fft.fft([1.0, 2.0, 3.0]))


# --- frequencies and shifts ----------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("d", [1.0, 0.25])
def test_frequencies(n, d):
    got, rgot = F.fftfreq(n, d=d), F.rfftfreq(n, d=d)
    assert got.dtype == np.float64 and rgot.dtype == np.float64
    np.testing.assert_allclose(got.numpy(), np.fft.fftfreq(n, d=d))
    np.testing.assert_allclose(rgot.numpy(), np.fft.rfftfreq(n, d=d))
    assert F.fftfreq(n, dtype=tg.float32).dtype == np.float32
    assert F.rfftfreq(n, d=d, dtype="float32").dtype == np.float32
    if n == 8:  # [0, 1, 2, 3, -4, -3, -2, -1] / (d n)
        np.testing.assert_allclose(got.numpy() * d * n, [0, 1, 2, 3, -4, -3, -2, -1])


def test_frequency_errors():
    with pytest.raises(ValueError, match="fftfreq: n must be a positive"):
        F.fftfreq(0)
    with pytest.raises(TypeError, match="rfftfreq: n must be an int"):
        F.rfftfreq(2.5)
    with pytest.raises(ValueError, match="real floating dtype"):
        F.fftfreq(4, dtype=tg.int32)
    with pytest.raises(ValueError, match="real floating dtype"):
        F.rfftfreq(4, dtype=tg.complex128)


@pytest.mark.parametrize("shape, axes", [((5,), None), ((4, 5), None), ((4, 5), 0), ((4, 5), -1),
                                         ((2, 3, 4), (0, 2)), ((3, 0), None), ((1, 1), (1,))])
def test_shifts_match_numpy(shape, axes):
    x = _real(shape)
    np.testing.assert_array_equal(F.fftshift(tg.constant(x), axes=axes).numpy(),
                                  np.fft.fftshift(x, axes=axes))
    np.testing.assert_array_equal(F.ifftshift(tg.constant(x), axes=axes).numpy(),
                                  np.fft.ifftshift(x, axes=axes))
    np.testing.assert_array_equal(F.ifftshift(F.fftshift(tg.constant(x), axes=axes),
                                              axes=axes).numpy(), x)


def test_shift_of_zero_frequency_to_centre_and_0d():
    np.testing.assert_array_equal(F.fftshift(F.fftfreq(5)).numpy() * 5, [-2, -1, 0, 1, 2])
    np.testing.assert_array_equal(F.fftshift(tg.constant(3.0)).numpy(), 3.0)
    np.testing.assert_array_equal(F.ifftshift(tg.constant(_real((2, 3))), axes=()).shape,
                                  (2, 3))
    with pytest.raises(ValueError, match="fftshift: axis 2 is out of range"):
        F.fftshift(tg.constant(_real((2, 3))), axes=2)


# --- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n, _ in _ONE_D + _N_D])
def test_0d_input_is_rejected(name):
    with pytest.raises(ValueError, match=f"{name}: x must have at least one dimension"):
        getattr(F, name)(tg.constant(np.float64(1.0)))


@pytest.mark.parametrize("name", [n for n, _ in _ONE_D])
def test_one_dimensional_argument_errors(name):
    x = tg.constant(_complex((3, 4)) if name in ("fft", "ifft", "irfft", "hfft") else _real((3, 4)))
    with pytest.raises(ValueError, match=f"{name}: norm must be one of"):
        getattr(F, name)(x, norm="unitary")
    with pytest.raises(ValueError, match=f"{name}: axis 2 is out of range"):
        getattr(F, name)(x, axis=2)
    with pytest.raises(ValueError, match=f"{name}: n must be a positive"):
        getattr(F, name)(x, n=0)
    with pytest.raises(TypeError, match=f"{name}: n must be an int"):
        getattr(F, name)(x, n=2.0)


@pytest.mark.parametrize("name", [n for n, _ in _N_D])
def test_n_dimensional_argument_errors(name):
    x = tg.constant(_complex((3, 4)) if name in ("fftn", "ifftn", "irfftn") else _real((3, 4)))
    with pytest.raises(ValueError, match="s was given without axes"):
        getattr(F, name)(x, s=(3, 4))
    with pytest.raises(ValueError, match="name an axis twice"):
        getattr(F, name)(x, axes=(1, -1))
    with pytest.raises(ValueError, match="axes is empty"):
        getattr(F, name)(x, axes=())
    with pytest.raises(ValueError, match="s has 1 entries for 2 axes"):
        getattr(F, name)(x, s=(3,), axes=(0, 1))
    with pytest.raises(ValueError, match=r"s\[1\] must be a positive"):
        getattr(F, name)(x, s=(3, 0), axes=(0, 1))
    with pytest.raises(ValueError, match="norm must be one of"):
        getattr(F, name)(x, norm=None)


@pytest.mark.parametrize("name, alternative", [("rfft", "fft"), ("rfftn", "fftn"),
                                               ("ihfft", "ifft")])
def test_real_transforms_reject_complex_input(name, alternative):
    with pytest.raises(TypeError, match=f"{name}: x must have a real floating dtype.*use "
                                        f"{alternative}"):
        getattr(F, name)(tg.constant(_complex(4)))


def test_half_spectrum_of_length_one_needs_n():
    with pytest.raises(ValueError, match="irfft: the transformed axis 0 has size 1"):
        F.irfft(tg.constant(_complex(1)))
    assert F.irfft(tg.constant(_complex(1)), n=1).shape == (1,)


# --- gradients: the complex VJP convention -------------------------------------------------------
def _vjp_vs_central_difference(f, x, h=1e-6):
    """``(Re<x_bar, v>, d/dt Re<y_bar, f(x + t v)>)`` for random ``y_bar`` and direction ``v``.

    With tapegrad's convention (cotangent of ``z`` = dL/dRe z + i dL/dIm z) the two agree for
    real or complex ``x`` and ``y``.
    """
    xt = tg.constant(x)
    with tg.GradientTape() as tape:
        tape.watch(xt)
        y = f(xt)
    yv = y.numpy()
    ybar = _complex(yv.shape) if np.iscomplexobj(yv) else _real(yv.shape)
    g = tape.gradient(y, xt, output_gradients=tg.constant(ybar.astype(yv.dtype)))
    assert g.shape == x.shape and g.dtype == x.dtype
    v = _complex(x.shape) if np.iscomplexobj(x) else _real(x.shape)

    def loss(z):
        return np.real(np.sum(np.conj(ybar) * f(tg.constant(z)).numpy()))

    numeric = (loss(x + h * v) - loss(x - h * v)) / (2 * h)
    return float(np.real(np.sum(np.conj(g.numpy()) * v))), numeric


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("kw, shape", _ONE_D_KW[:4] + [({"n": 7}, (2, 4)), ({"n": 12}, (2, 5))])
@pytest.mark.parametrize("name, make", _ONE_D)
def test_one_dimensional_vjp_convention(name, make, kw, shape, norm):
    f = lambda x: getattr(F, name)(x, norm=norm, **kw)  # noqa: E731
    analytic, numeric = _vjp_vs_central_difference(f, make(shape))
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("kw, shape", _N_D_KW[:4] + [({"s": (2, 9), "axes": (0, 1)}, (3, 4))])
@pytest.mark.parametrize("name, make", _N_D)
def test_n_dimensional_vjp_convention(name, make, kw, shape, norm):
    f = lambda x: getattr(F, name)(x, norm=norm, **kw)  # noqa: E731
    analytic, numeric = _vjp_vs_central_difference(f, make(shape))
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("make", [_real, _complex])
def test_shift_vjp(name, make):
    f = lambda x: getattr(F, name)(x, axes=(0, 2))  # noqa: E731
    analytic, numeric = _vjp_vs_central_difference(f, make((3, 2, 5)))
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-6)


def test_adjoint_pairs_by_hand():
    # <F x, y> = <x, F^H y> with F^H = n * ifft: the VJP of fft is ifft(., norm="forward")
    z, ybar = _complex(5), _complex(5)
    zt = tg.constant(z)
    with tg.GradientTape() as tape:
        tape.watch(zt)
        y = F.fft(zt)
    g = tape.gradient(y, zt, output_gradients=tg.constant(ybar)).numpy()
    np.testing.assert_allclose(g, 5 * np.fft.ifft(ybar), atol=1e-12)
    # irfft's VJP: c * rfft(y_bar) / n with c = (1, 2, 2, 1) for n = 6
    zt = tg.constant(_complex(4))
    with tg.GradientTape() as tape:
        tape.watch(zt)
        y = F.irfft(zt)
    ybar = _real(6)
    g = tape.gradient(y, zt, output_gradients=tg.constant(ybar)).numpy()
    np.testing.assert_allclose(g, np.array([1, 2, 2, 1]) * np.fft.rfft(ybar) / 6, atol=1e-12)


# --- gradients: real -> real composites, second order --------------------------------------------
def _h(k):
    return RNG.uniform(0.5, 1.5, size=k)


_COMPOSITES = [
    ("rfft-filter-irfft", lambda x, h=_h(4): F.irfft(F.rfft(x) * h, n=6) ** 2, (3, 6)),
    ("rfft-odd-padded", lambda x, h=_h(5): F.irfft(F.rfft(x, n=9, norm="ortho") * h, n=7,
                                                   norm="ortho") ** 3, (2, 6)),
    ("rfft-trimmed-axis0", lambda x, h=_h(3): F.irfft(
        F.rfft(x, n=4, axis=0, norm="forward") * h[:, None], n=5, axis=0,
        norm="forward") ** 2, (6, 2)),
    ("ihfft-hfft", lambda x, h=_h(4): F.hfft(F.ihfft(x) * h, n=7) ** 2, (2, 7)),
    ("rfftn-irfftn", lambda x, h=_h(3): F.irfftn(F.rfftn(x, s=(4, 5), axes=(0, 1)) * h,
                                                 s=(3, 6), axes=(0, 1)) ** 2, (3, 5)),
    ("fft-of-half-spectrum", lambda x, h=_h(4): F.irfft(F.fft(F.rfft(x), axis=0) * h, n=6,
                                                         axis=1) ** 2, (3, 6)),
    ("ifftn-irfft", lambda x: F.irfft(F.ifftn(F.rfft(x, norm="ortho"), axes=(0,)) * 2.0,
                                      axis=-1) ** 2, (4, 5)),
    ("shift-sandwich", lambda x: tg.sin(F.fftshift(tg.sin(F.ifftshift(x, axes=1)), axes=(0, 1))),
     (3, 4)),
    ("shifted-spectrum", lambda x: F.irfft(F.ifftshift(F.fftshift(F.rfft(x), axes=0), axes=0),
                                           n=5) ** 2, (4, 5)),
]


@pytest.mark.parametrize("f, shape", [pytest.param(f, s, id=i) for i, f, s in _COMPOSITES])
def test_real_composites_second_order(f, shape):
    tg.test.check_gradients(f, [_real(shape)], order=2)


def test_power_spectrum_gradient_by_hand():
    # Parseval: sum |rfft(x)|^2 weighted by c / n equals sum x^2, whose gradient is 2 x
    x = _real(8)
    c = np.array([1, 2, 2, 2, 1]) / 8.0
    xt = tg.constant(x)
    with tg.GradientTape() as tape:
        tape.watch(xt)
        y = F.rfft(xt)
        power = tg.sum(tg.abs(y) ** 2 * c)
    np.testing.assert_allclose(float(power), np.sum(x * x), rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(power, xt).numpy(), 2 * x, atol=1e-12)


def test_abs_of_spectrum_first_order():
    # first order only: abs's gradient at complex z, dy * sign(z), is not differentiable again
    f = lambda x: tg.abs(F.rfft(x, norm="ortho")) + tg.abs(F.ihfft(x, n=9))  # noqa: E731
    tg.test.check_gradients(f, [_real((3, 8))], order=1)


def test_circular_convolution_through_spectra_second_order():
    # irfft(rfft(a) rfft(b)) is the circular convolution of a and b: bilinear, both inputs
    def f(a, b):
        return F.irfft(F.rfft(a) * F.rfft(b), n=6) ** 2

    a, b = _real((3, 6)), _real(6)
    want = np.stack([[sum(a[r, j] * b[(k - j) % 6] for j in range(6)) for k in range(6)]
                     for r in range(3)])
    np.testing.assert_allclose(F.irfft(F.rfft(a) * F.rfft(b), n=6).numpy(), want, atol=1e-12)
    tg.test.check_gradients(f, [a, b], order=2)


def test_real_imag_conj_of_spectra_second_order():
    tg.test.check_gradients(
        lambda x: (tg.imag(F.fft(x, axis=0)) ** 2 + tg.real(F.ifftn(x, norm="ortho")) ** 3,
                   tg.real(F.rfft(x) * tg.conj(F.ihfft(x))) ** 2), [_real((3, 6))], order=2)


def test_power_spectrum_hessian():
    # sum |rfft(x)|^2 c / n = ||x||^2 (Parseval): gradient 2 x, Hessian 2 I
    c = np.array([1, 2, 2, 1]) / 6.0
    x = tg.Variable(_real(6))
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            y = F.rfft(x)
            e = tg.sum(tg.real(y * tg.conj(y)) * c)
        g = inner.gradient(e, x)
    np.testing.assert_allclose(g.numpy(), 2 * x.numpy(), atol=1e-12)
    np.testing.assert_allclose(outer.jacobian(g, x).numpy(), 2 * np.eye(6), atol=1e-12)


def test_real_input_of_complex_transforms_gets_a_real_gradient():
    # NumPy promotes a real input of fft/irfft/hfft; its gradient is the adjoint's real part
    for f in [lambda x: F.irfft(F.fft(x)[..., :4], n=6) ** 2,
              lambda x: F.irfft(x, n=7) ** 2, lambda x: F.hfft(x, norm="ortho") ** 2,
              lambda x: F.irfftn(F.ifftn(x, axes=(0,)), axes=(0, 1)) ** 2]:
        tg.test.check_gradients(f, [_real((3, 5))], order=2)


def test_hessian_of_a_filtered_energy():
    # E(x) = ||M x||^2 with M = irfft o diag(h) o rfft (a real matrix): Hessian 2 M^T M
    h = _h(4)
    m = np.fft.irfft(np.fft.rfft(np.eye(6), axis=0) * h[:, None], n=6, axis=0)
    x = tg.Variable(_real(6))
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            e = tg.sum(F.irfft(F.rfft(x) * h, n=6) ** 2)
        g = inner.gradient(e, x)
    np.testing.assert_allclose(g.numpy(), 2 * m.T @ m @ x.numpy(), atol=1e-12)
    np.testing.assert_allclose(outer.jacobian(g, x).numpy(), 2 * m.T @ m, atol=1e-12)


# --- array-api-strict backend --------------------------------------------------------------------
def _strict(a):
    return tg.asarray(xs.asarray(a))


@pytest.mark.parametrize("name, make, kw", [
    ("fft", _complex, {"n": 7, "norm": "ortho"}), ("ifft", _complex, {"axis": 0}),
    ("rfft", _real, {"n": 5}), ("irfft", _complex, {"n": 9, "norm": "forward"}),
    ("hfft", _complex, {}), ("ihfft", _real, {"axis": 0}),
    ("fftn", _complex, {"s": (2, 6), "axes": (0, 1)}), ("ifftn", _complex, {}),
    ("rfftn", _real, {"norm": "ortho"}), ("irfftn", _complex, {"axes": (0, 1)}),
    ("fftshift", _real, {"axes": 1}), ("ifftshift", _complex, {}),
])
def test_array_api_strict_forward(name, make, kw):
    x = make((4, 5))
    got = getattr(F, name)(_strict(x), **kw)
    assert type(got._value).__module__.startswith("array_api_strict")
    want = getattr(xs.fft, name)(xs.asarray(x), **kw)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-12)
    np.testing.assert_allclose(np.asarray(got), getattr(np.fft, name)(x, **kw), atol=1e-12)


def test_array_api_strict_gradients_match_numpy():
    x, z, h = _real((3, 6)), _complex((3, 5)), _h(4)

    def f(x, z, h):
        a = tg.sum(F.irfft(F.rfft(x, n=7) * h, n=5) ** 2)
        b = tg.sum(F.hfft(F.fftshift(F.fftn(z, s=(4, 5), axes=(0, 1))), n=6) ** 2)
        return a + b

    grads = []
    for conv in (tg.constant, _strict):
        xt, zt = conv(x), conv(z)
        with tg.GradientTape() as tape:
            tape.watch([xt, zt])
            y = f(xt, zt, conv(h))
        grads.append(tape.gradient(y, [xt, zt]))
    for g_np, g_strict in zip(*grads):
        assert type(g_strict._value).__module__.startswith("array_api_strict")
        assert g_strict.dtype == g_np.dtype
        np.testing.assert_allclose(np.asarray(g_strict), g_np.numpy(), atol=1e-10)


def test_real_input_of_complex_transforms_is_promoted_on_array_api_strict_too():
    x = _real(4)
    got = F.fft(_strict(x))  # array-api-strict alone refuses real input here
    np.testing.assert_allclose(got.numpy(), np.fft.fft(x), atol=1e-12)


# --- property test: forward equals the backend's own result --------------------------------------
@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3), data=st.data())
def test_random_shapes_match_numpy(shape, data):
    shape = tuple(shape)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    name = data.draw(st.sampled_from(["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]))
    norm = data.draw(st.sampled_from(NORMS))
    n = data.draw(st.one_of(st.none(), st.integers(1, 7)))
    half = name in ("irfft", "hfft")
    if n is None and (2 * (shape[axis] - 1) if half else shape[axis]) < 1:
        n = 1  # the default length would be empty: NumPy and tapegrad both reject it
    if name == "irfft" and shape[axis] == 0:
        return  # NumPy's irfft of an empty axis with n given reads uninitialised memory
    x = _real(shape) if name in ("rfft", "ihfft") else _complex(shape)
    dtype = data.draw(st.sampled_from(["double", "single"]))
    if dtype == "single":
        x = x.astype(np.float32 if x.dtype == np.float64 else np.complex64)
    got = getattr(F, name)(tg.constant(x), n=n, axis=axis, norm=norm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(np.fft, name)(x, n=n, axis=axis, norm=norm)
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 1e-4 if dtype == "single" else 1e-10
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 4), min_size=1, max_size=3), data=st.data())
def test_random_n_dimensional_shapes_match_numpy(shape, data):
    shape = tuple(shape)
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    name = data.draw(st.sampled_from(["fftn", "ifftn", "rfftn", "irfftn"]))
    norm = data.draw(st.sampled_from(NORMS))
    s = [data.draw(st.integers(1, 5)) for _ in axes]
    x = _real(shape) if name == "rfftn" else _complex(shape)
    strict = data.draw(st.booleans())
    xt = _strict(x) if strict else tg.constant(x)
    got = getattr(F, name)(xt, s=s, axes=axes, norm=norm)
    want = getattr(np.fft, name)(x, s=s, axes=axes, norm=norm)
    assert got.shape == want.shape and got.dtype == want.dtype
    if strict:
        assert type(got._value).__module__.startswith("array_api_strict")
        want_strict = getattr(xs.fft, name)(xs.asarray(x), s=s, axes=axes, norm=norm)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want_strict), atol=1e-10)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(0, 4), min_size=0, max_size=3), data=st.data())
def test_random_shifts_match_the_backend(shape, data):
    shape = tuple(shape)
    axes = None
    if shape and data.draw(st.booleans()):
        axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                                  max_size=len(shape), unique_by=lambda a: a % len(shape)))
    x = _real(shape)
    for name in ("fftshift", "ifftshift"):
        got = getattr(F, name)(_strict(x), axes=axes)
        want = x if not shape else getattr(xs.fft, name)(xs.asarray(x), axes=axes)
        assert type(got._value).__module__.startswith("array_api_strict")
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
