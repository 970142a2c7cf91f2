"""``tg.debugging.enable_gradient_checks``: user-defined gradient rules check themselves at their
first call. A corpus of wrong rules, each caught on its first call with the message asserted;
tapegrad's own rules swept without false alarms; the switches.

The corpus (``CORPUS``), and the check that catches each rule at its first call:

     #  wrong rule                                   caught by
     1  seed 002 Example 2 (+ 0.1*x)                 linearity
     2  wrong sign                                   VJP vs central difference
     3  wrong factor                                 VJP vs central difference
     4  wrong factor, float32                        VJP vs central difference
     5  transposed matrix                            VJP vs central difference
     6  missing conjugate (complex)                  VJP vs central difference
     7  wrong broadcast reduction                    VJP vs central difference
     8  ifft adjoint without 1/n                     VJP vs central difference
     9  rfft adjoint doubling the bins               VJP vs central difference
    10  nonlinear in dy (dy*dy)                      linearity
    11  wrong gradient of the second input           VJP vs central difference
    12  None for a connected input                   VJP vs central difference
    13  wrong second-order rule                      VJP vs central difference
    14  custom_vjp, wrong bwd                        VJP vs central difference
    15  custom_jvp, wrong JVP rule                   VJP vs central difference
    16  RegisterGradient, wrong                      VJP vs central difference
    17  RegisterJVP disagreeing with the VJP         JVP vs VJP
    18  gradient_override_map to a wrong rule        VJP vs central difference
    19  rfft adjoint halving the edge bins too       VJP vs central difference
    20  irfft adjoint not doubling the inner bins    VJP vs central difference
    21  fft2 adjoint over the wrong axes             VJP vs central difference
    22  ifft adjoint without the conjugate           VJP vs central difference
    23  fft: transpose, not adjoint                  VJP vs central difference
    24  ifft2 scaled by one axis's length            VJP vs central difference
    25  broadcast reduced over the wrong axis        VJP vs central difference
    26  complex cast, wrong gradient                 VJP vs central difference
    27  batched matmul missing a transpose           VJP vs central difference
    28  softmax missing the subtraction              VJP vs central difference
    29  stable logsumexp off by the shift            VJP vs central difference
    30  cumsum gradient not reversed                 VJP vs central difference
    31  inverse missing the minus sign               VJP vs central difference
    32  two outputs, cotangents swapped              VJP vs central difference
    33  custom_vjp, transposed matrix                VJP vs central difference
    34  cotangent clipped (nonlinear)                linearity
    35  RegisterJVP with a transposed matrix         JVP vs VJP
    36  svd (complex): singular vectors dropped      VJP vs central difference
    37  eigvalsh (complex): missing conjugate        VJP vs central difference
    38  linear op, adjoint not transposed            dot-product (adjoint) test
    39  linear DFT, adjoint with a spurious 1/n      dot-product (adjoint) test

FFT adjoints as in autograd#185, jax#6223, Zygote#1158 (8, 9, 19-24); the right rules of 19-31
pass and agree with tapegrad's built-in gradients (``RIGHT``). 36 and 37 are built-in op types
whose check keeps to gauge-invariant cotangents and Hermitian directions
(``primitive(gauge=, hermitian=)``): a wrong rule is still caught there.
"""
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


def _edge_weights(n, interior):
    """Per-bin weights of an rfft spectrum of a length-``n`` signal: 1 at the edge bins (0,
    and n/2 for even n), ``interior`` elsewhere."""
    w = np.full(n // 2 + 1, float(interior))
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return tg.constant(w)


@tg.custom_gradient
def rfft_halving_edges_too(x):  # the adjoint of rfft is irfft(dy * w) * n, w = 1/2 inside,
    n = x.shape[-1]             # 1 at the edge bins (autograd#185): here 1/2 everywhere

    def grad(dy):
        return tg.fft.irfft(dy * 0.5, n=n) * n
    return tg.fft.rfft(x), grad


@tg.custom_gradient
def irfft_not_doubling(x):  # y = irfft(x, n): the adjoint is rfft(dy) * w / n with w = 2
    n = 2 * (x.shape[-1] - 1)  # inside, 1 at the edges (jax#6223): here no doubling

    def grad(dy):
        return tg.fft.rfft(dy) / n
    return tg.fft.irfft(x, n=n), grad


@tg.custom_gradient
def fft2_wrong_axes(x):  # y = fft over the last two axes: its adjoint n * ifft over the same
    def grad(dy):        # two, here over the first two (Zygote#1158's axes)
        return tg.fft.ifftn(dy, axes=(0, 1)) * 12
    return tg.fft.fftn(x, axes=(-2, -1)), grad


@tg.custom_gradient
def ifft_without_conjugation(x):  # y = F^H x / n: the adjoint F dy / n = fft(dy) / n, not the
    def grad(dy):                 # transpose without the conjugate conj(F) dy / n = ifft(dy)
        return tg.fft.ifft(dy)
    return tg.fft.ifft(x), grad


@tg.custom_gradient
def fft_transposed_not_adjoint(x):  # y = F x: the adjoint F^H dy = n ifft(dy), not F^T dy
    def grad(dy):
        return tg.fft.fft(dy)
    return tg.fft.fft(x), grad


@tg.custom_gradient
def ifft2_one_axis_scale(x):  # y = ifft over (4, 6): the adjoint fft(dy) / 24, not / 6
    def grad(dy):
        return tg.fft.fftn(dy, axes=(-2, -1)) / 6
    return tg.fft.ifftn(x, axes=(-2, -1)), grad


@tg.custom_gradient
def broadcast_reduced_over_the_wrong_axis(x, b):  # y = x + b, b (4,) over the rows of x (4, 4)
    def grad(dy):
        return dy, tg.sum(dy, axis=1)  # axis=0
    return x + b, grad


@tg.custom_gradient
def complex_cast_wrong(x):  # y = complex(x): the gradient is real(dy)
    def grad(dy):
        return tg.real(dy) + tg.imag(dy)
    return tg.astype(x, tg.complex128), grad


@tg.custom_gradient
def batched_matmul_missing_transpose(a, b):  # y = a @ b, stacks of (3, 3): da = dy @ b^T
    def grad(dy):
        return dy @ b, tg.matrix_transpose(a) @ dy
    return a @ b, grad


@tg.custom_gradient
def softmax_missing_subtraction(x):  # g = y * (dy - sum(dy * y))
    y = tg.nn.softmax(x)

    def grad(dy):
        return y * dy
    return y, grad


@tg.custom_gradient
def logsumexp_off_by_a_shift(x):  # y = m + log(sum(exp(x - m))): g = dy * exp(x - y), not
    m = tg.max(x)                 # dy * exp(x - m)
    y = m + tg.log(tg.sum(tg.exp(x - m)))

    def grad(dy):
        return dy * tg.exp(x - m)
    return y, grad


@tg.custom_gradient
def cumsum_not_reversed(x):  # y = cumsum(x): g = reversed cumsum of dy
    def grad(dy):
        return tg.cumulative_sum(dy)
    return tg.cumulative_sum(x), grad


@tg.custom_gradient
def inverse_missing_minus(a):  # y = inv(a): da = -inv(a)^T dy inv(a)^T
    y = tg.linalg.inv(a)

    def grad(dy):
        yt = tg.matrix_transpose(y)
        return yt @ dy @ yt
    return y, grad


@tg.primitive("GradientChecksSinCos")
def _sincos(x):
    return tg._backend.namespace(x).sin(x), tg._backend.namespace(x).cos(x)


@tg.RegisterGradient("GradientChecksSinCos")
def _sincos_swapped(op, ds, dc):  # the two outputs' cotangents swapped
    x = op.inputs[0]
    return dc * tg.cos(x) - ds * tg.sin(x)


def _sin_of_sincos(x):
    return _sincos(x)[0]


@tg.custom_vjp
def _custom_vjp_transposed(a, x):
    return a @ x


_custom_vjp_transposed.defvjp(lambda a, x: (a @ x, (a, x)),  # dx = a^T dy, not a dy
                              lambda res, dy: (dy[:, None] * res[1][None, :], res[0] @ dy))


@tg.custom_gradient
def clipped_cotangent(x):  # a gradient that clips dy: not linear in it
    def grad(dy):
        return tg.clip(dy, -0.5, 0.5) * tg.cos(x)
    return tg.sin(x), grad


@tg.primitive("GradientChecksMatVecBadJVP")
def _matvec(a, x):
    return a @ x


@tg.RegisterGradient("GradientChecksMatVecBadJVP")
def _matvec_grad(op, dy):
    a, x = op.inputs
    return dy[:, None] * x[None, :], tg.matrix_transpose(a) @ dy


@tg.RegisterJVP("GradientChecksMatVecBadJVP")
def _matvec_jvp(op, ta, tx):  # d(a x) = ta x + a tx: here a^T tx
    a, x = op.inputs
    return ta @ x + tg.matrix_transpose(a) @ tx


@tg.RegisterGradient("GradientChecksWrongSvdGrad")
def _svd_values_only(op, du, ds, dvh):  # drops the singular vectors' cotangents
    u, s, vh = op.outputs
    return (u * tg.expand_dims(ds, axis=-2)) @ vh


def _svd_override(x):
    with tg.gradient_override_map({"Svd": "GradientChecksWrongSvdGrad"}):
        return tg.linalg.svd(x).U


@tg.RegisterGradient("GradientChecksWrongEigvalshGrad")
def _eigvalsh_missing_conj(op, dw):  # complex: V diag(dw) V^H, here V^T
    _, v = tg.linalg.eigh(op.inputs[0])
    return (v * tg.expand_dims(dw, axis=-2)) @ tg.matrix_transpose(v)


def _eigvalsh_override(x):
    with tg.gradient_override_map({"Eigvalsh": "GradientChecksWrongEigvalshGrad"}):
        return tg.linalg.eigvalsh(x)


rng = np.random.default_rng(7)
X = rng.uniform(-2, 2, 5)
A = rng.uniform(-2, 2, (3, 3))
Z = rng.uniform(-2, 2, 6) + 1j * rng.uniform(-2, 2, 6)
C = rng.uniform(-1, 1, (3, 3)) + 1j * rng.uniform(-1, 1, (3, 3))

# (name, function, inputs, the message's expected excerpt)
LIN = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0], [0.0, 0.25, 1.5]])  # not symmetric


def _xp(x):
    import array_api_compat
    return array_api_compat.array_namespace(x)


@tg.primitive("GradientChecksLinearWrongAdjoint", linear=(0,))
def _apply_lin(x):
    return _xp(x).asarray(LIN, dtype=x.dtype) @ x


@tg.RegisterGradient("GradientChecksLinearWrongAdjoint")
def _lin_not_transposed(op, dy):
    return tg.constant(LIN) @ dy  # A, not A^T


@tg.primitive("GradientChecksLinearFFT", linear=(0,))
def _real_dft(x):
    xp = _xp(x)
    return xp.real(xp.fft.fft(xp.astype(x, xp.complex128)))


@tg.RegisterGradient("GradientChecksLinearFFT")
def _real_dft_over_n(op, dy):
    n = dy.shape[0]  # the adjoint of Re(F x) is Re(F^H dy) = Re(F dy) here (F symmetric)
    return tg.real(tg.fft.fft(tg.astype(dy, tg.complex128))) / n  # a spurious 1/n


@tg.primitive("GradientChecksLinearRight", linear=(0,))
def _apply_lin_right(x):
    return _xp(x).asarray(LIN, dtype=x.dtype) @ x


@tg.RegisterGradient("GradientChecksLinearRight")
def _lin_transposed(op, dy):
    return tg.constant(LIN.T) @ dy


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
    ("rfft adjoint halving the edge bins too", rfft_halving_edges_too,
     lambda: [_x(rng.uniform(-1, 1, 8))], r"rfft_halving_edges_too' .*disagrees"),
    ("irfft adjoint not doubling the inner bins", irfft_not_doubling,
     lambda: [_x(rng.uniform(-1, 1, 5) + 1j * rng.uniform(-1, 1, 5))],
     r"irfft_not_doubling' .*disagrees .*input 0 'x'"),
    ("fft2 adjoint over the wrong axes", fft2_wrong_axes,
     lambda: [_x(rng.uniform(-1, 1, (3, 4, 3)) + 1j)], r"fft2_wrong_axes' .*disagrees"),
    ("ifft adjoint without the conjugate", ifft_without_conjugation, lambda: [_x(Z)],
     r"ifft_without_conjugation' .*disagrees"),
    ("fft: transpose, not adjoint", fft_transposed_not_adjoint, lambda: [_x(Z)],
     r"fft_transposed_not_adjoint' .*disagrees"),
    ("ifft2 scaled by one axis's length", ifft2_one_axis_scale,
     lambda: [_x(rng.uniform(-1, 1, (4, 6)) + 0j)], r"ifft2_one_axis_scale' .*disagrees"),
    ("broadcast reduced over the wrong axis", broadcast_reduced_over_the_wrong_axis,
     lambda: [_x(rng.uniform(-1, 1, (4, 4))), _x(X[:4])], r"disagrees .*input 1 'b'"),
    ("complex cast, wrong gradient", complex_cast_wrong, lambda: [_x(X)],
     r"complex_cast_wrong' .*disagrees .*input 0 'x'"),
    ("batched matmul missing a transpose", batched_matmul_missing_transpose,
     lambda: [_x(rng.uniform(-1, 1, (2, 3, 3))), _x(rng.uniform(-1, 1, (2, 3, 3)))],
     r"disagrees .*input 0 'a'"),
    ("softmax missing the subtraction", softmax_missing_subtraction, lambda: [_x(X)],
     r"softmax_missing_subtraction' .*disagrees"),
    ("stable logsumexp off by the shift", logsumexp_off_by_a_shift, lambda: [_x(X)],
     r"logsumexp_off_by_a_shift' .*disagrees"),
    ("cumsum gradient not reversed", cumsum_not_reversed, lambda: [_x(X)],
     r"cumsum_not_reversed' .*disagrees"),
    ("inverse missing the minus sign", inverse_missing_minus, lambda: [_x(A + 3 * np.eye(3))],
     r"inverse_missing_minus' .*disagrees"),
    ("two outputs, cotangents swapped", _sin_of_sincos, lambda: [_x(X)],
     r"'GradientChecksSinCos' \(its gradient _sincos_swapped .*disagrees"),
    ("custom_vjp, transposed matrix", _custom_vjp_transposed, lambda: [_x(A), _x(X[:3])],
     r"'CustomVJP:_custom_vjp_transposed' .*disagrees"),
    ("cotangent clipped (nonlinear)", clipped_cotangent, lambda: [_x(X)],
     r"clipped_cotangent' .*is not linear in its cotangent dy at input 0 'x'"),
    ("RegisterJVP with a transposed matrix", _matvec, lambda: [_x(A), _x(X[:3])],
     r"the JVP rule _matvec_jvp .* of op type 'GradientChecksMatVecBadJVP' disagrees"),
    ("svd (complex): singular vectors dropped", _svd_override, lambda: [_x(C)],
     r"op type 'Svd' \(its gradient _svd_values_only .*disagrees"),
    ("eigvalsh (complex): missing conjugate", _eigvalsh_override,
     lambda: [_x(C + C.conj().T)], r"op type 'Eigvalsh' \(its gradient _eigvalsh_missing_conj"),
    ("linear op, adjoint not transposed", _apply_lin, lambda: [_x(X[:3])],
     r"'GradientChecksLinearWrongAdjoint' \(its gradient _lin_not_transposed .*declared linear, "
     r"fails the dot-product \(adjoint\) test"),
    ("linear DFT, adjoint with a spurious 1/n", _real_dft, lambda: [_x(np.linspace(0, 1, 8))],
     r"'GradientChecksLinearFFT' .*fails the dot-product \(adjoint\) test .*<dy, f\(v\)> ="),
]


@pytest.mark.parametrize("name, f, inputs, message", CORPUS, ids=[c[0] for c in CORPUS])
def test_a_wrong_rule_is_caught_at_its_first_call(name, f, inputs, message):
    with pytest.raises(GradientCheckError, match=message) as caught:
        _grad(f, *inputs())
    text = str(caught.value)
    assert "tolerance rtol=" in text and "tg.test.check_gradients" in text
    assert re.search(r"\.py:\d+\)", text)  # the rule's file and line


def test_a_right_linear_rule_passes_the_dot_product_test():
    x = _x(X[:3])
    np.testing.assert_allclose(_grad(_apply_lin_right, x)[0].numpy(), LIN.T @ np.ones(3),
                               rtol=1e-12)


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


@tg.custom_gradient
def right_rfft(x):
    n = x.shape[-1]

    def grad(dy):
        return tg.fft.irfft(dy * _edge_weights(n, 0.5), n=n) * n
    return tg.fft.rfft(x), grad


@tg.custom_gradient
def right_irfft(x):
    n = 2 * (x.shape[-1] - 1)

    def grad(dy):
        return tg.fft.rfft(dy) * _edge_weights(n, 2.0) / n
    return tg.fft.irfft(x, n=n), grad


@tg.custom_gradient
def right_fft2(x):
    def grad(dy):
        return tg.fft.ifftn(dy, axes=(-2, -1)) * 12
    return tg.fft.fftn(x, axes=(-2, -1)), grad


@tg.custom_gradient
def right_softmax(x):
    y = tg.nn.softmax(x)

    def grad(dy):
        return y * (dy - tg.sum(dy * y))
    return y, grad


@tg.custom_gradient
def right_logsumexp(x):
    m = tg.max(x)
    y = m + tg.log(tg.sum(tg.exp(x - m)))

    def grad(dy):
        return dy * tg.exp(x - y)
    return y, grad


@tg.custom_gradient
def right_cumsum(x):
    def grad(dy):
        return tg.flip(tg.cumulative_sum(tg.flip(dy)))
    return tg.cumulative_sum(x), grad


@tg.custom_gradient
def right_inverse(a):
    y = tg.linalg.inv(a)

    def grad(dy):
        yt = tg.matrix_transpose(y)
        return -(yt @ dy @ yt)
    return y, grad


# the right rules of the corpus's wrong ones, and the same functions of built-in ops: each
# wrong rule is wrong for the reason it says
RIGHT = [
    ("rfft, even n", right_rfft, tg.fft.rfft, lambda: [_x(rng.uniform(-1, 1, 8))]),
    ("rfft, odd n", right_rfft, tg.fft.rfft, lambda: [_x(rng.uniform(-1, 1, 7))]),
    ("irfft", right_irfft, lambda x: tg.fft.irfft(x, n=8),
     lambda: [_x(rng.uniform(-1, 1, 5) + 1j * rng.uniform(-1, 1, 5))]),
    ("fft2", right_fft2, lambda x: tg.fft.fftn(x, axes=(-2, -1)),
     lambda: [_x(rng.uniform(-1, 1, (3, 4, 3)) + 1j)]),
    ("softmax", right_softmax, tg.nn.softmax, lambda: [_x(X)]),
    ("logsumexp", right_logsumexp, lambda x: tg.log(tg.sum(tg.exp(x))), lambda: [_x(X)]),
    ("cumsum", right_cumsum, tg.cumulative_sum, lambda: [_x(X)]),
    ("inverse", right_inverse, tg.linalg.inv, lambda: [_x(A + 3 * np.eye(3))]),
]


@pytest.mark.parametrize("name, f, plain, inputs", RIGHT, ids=[r[0] for r in RIGHT])
def test_the_corpus_right_rules_pass(name, f, plain, inputs):
    xs = inputs()
    w = rng.uniform(-1, 1, tuple(plain(*xs).shape))  # a loss that weighs each output

    def loss(g):
        return lambda *a: _loss(g(*a) * tg.constant(w))

    got = tg.grad(loss(f))(*xs)  # checked, and passes
    np.testing.assert_allclose(got.numpy(), tg.grad(loss(plain))(*xs).numpy(), atol=1e-12)


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


@pytest.mark.parametrize("shape", [(4, 3), (3, 5)])
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_svd_full_matrices_non_square_is_checked_without_error(shape, kind):
    # the extra columns of U (rows of Vh) have no gradient (the rule refuses a cotangent
    # there): Svd's gauge= zeroes the check's random cotangent on them
    x = rng.uniform(-1, 1, shape) + (1j * rng.uniform(-1, 1, shape) if kind == "complex" else 0)
    k = min(shape)

    def f(x):
        u, s, vh = tg.linalg.svd(x)
        return tg.sum(tg.abs(u[:, :k]) ** 2 * s) + tg.sum(s)  # gauge-invariant

    with tg.debugging.gradient_checks(rules="all"):
        got = tg.grad(f)(tg.constant(x))
    want = tg.grad(f)(tg.constant(x))  # unchecked
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-12)

    def f_np(x):
        u, s, _ = np.linalg.svd(x)
        return np.sum(np.abs(u[:, :k]) ** 2 * s) + np.sum(s)

    d = rng.uniform(-1, 1, shape) + (1j * rng.uniform(-1, 1, shape) if kind == "complex" else 0)
    fd = (f_np(x + 1e-6 * d) - f_np(x - 1e-6 * d)) / 2e-6  # <g, d> = Re sum(g conj(d))
    assert np.real(np.sum(got.numpy() * np.conj(d))) == pytest.approx(fd, rel=1e-6)


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


def test_a_tg_function_first_call_runs_eagerly_and_is_checked():
    f = tg.function(lambda x: tg.grad(lambda z: tg.sum(wrong_factor(z)))(x))
    with pytest.raises(GradientCheckError, match=r"'CustomGradient:wrong_factor' .*disagrees"):
        f(_x([1.0, 2.0]))
    assert f.experimental_get_tracing_count() == 0  # the first call ran eagerly
    np.testing.assert_allclose(np.asarray(f(_x([1.0, 2.0]))), [3.0, 6.0])  # traced: unchecked
    assert f.experimental_get_tracing_count() == 1


def test_a_tg_function_right_rule_first_call_then_compiled():
    f = tg.function(lambda x: tg.grad(lambda z: tg.sum(right(z)))(x))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(_x([1.0, 2.0]))), [2.0, 4.0])
    assert f.experimental_get_tracing_count() == 1
    tg.debugging.disable_gradient_checks()
    g = tg.function(lambda x: tg.grad(lambda z: tg.sum(wrong_factor(z)))(x))
    np.testing.assert_allclose(np.asarray(g(_x([1.0, 2.0]))), [3.0, 6.0])  # off: compiled
    assert g.experimental_get_tracing_count() == 1


def test_a_tg_function_called_under_a_tape_is_checked_at_its_first_call():
    f = tg.function(lambda x: wrong_factor(x))
    with pytest.raises(GradientCheckError, match=r"'CustomGradient:wrong_factor'"):
        _grad(f, _x([1.0, 2.0]))


@pytest.mark.parametrize("kwargs, message", [
    (dict(action="print"), r"action='print'; it must be 'raise' or 'warn'"),
    (dict(calls=0), r"calls=0; it must be a positive int"),
    (dict(rtol=-1.0), r"rtol=-1.0; it must be None or a non-negative number"),
    (dict(rules="mine"), r"rules='mine'; it must be 'user'"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tg.debugging.enable_gradient_checks(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(hermitian="x"), r"primitive\('GradientChecksBadDecl'\): hermitian must be a tuple "
                          r"of input positions \(non-negative ints, such as \(0,\)\), got 'x'"),
    (dict(hermitian=(-1,)), r"hermitian must be a tuple of input positions"),
    (dict(linear=0), r"primitive\('GradientChecksBadDecl'\): linear must be a tuple of "
                     r"input positions \(non-negative ints, such as \(0,\)\), got 0"),
    (dict(gauge="phase"), r"primitive\('GradientChecksBadDecl'\): gauge must be None or a "
                          r"function gauge\(op, cotangents\) -> cotangents, got str"),
])
def test_bad_primitive_check_declarations(kwargs, message):
    with pytest.raises(TypeError, match=message):
        tg.primitive("GradientChecksBadDecl", **kwargs)


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
