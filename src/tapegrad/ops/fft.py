"""Discrete Fourier transforms (the Array API ``fft`` extension), forward and gradient side by side.

Public through :mod:`tapegrad.fft` (``tg.fft.rfft``, ...). Forwards call ``xp.fft.<name>`` of
the input's namespace. Every transform is linear, so every gradient is the adjoint linear map,
itself written with these transforms (so gradients of any order exist).

Cotangent convention for complex values (TensorFlow's and PyTorch's): the cotangent of a
complex tensor ``z`` for a real loss ``L`` is ``dL/dRe(z) + i dL/dIm(z)``, so that
``dL = Re(sum(conj(z_bar) * dz))``. The VJP of a complex-linear map ``A`` is then
``x_bar = A^H y_bar`` (conjugate transpose), and for a *real* input it is ``Re(A^H y_bar)``: the
gradient of a real input is real, of a complex input complex (same dtype as the input). With
the DFT ``F`` of length ``n`` and the duality ``F^H = n * ifft`` the adjoints are transforms of
the other direction with the *dual* normalisation (backward <-> forward, ortho <-> ortho):

* ``fft``/``ifft``/``fftn``/``ifftn``: ``x_bar = ifft(y_bar, norm=dual)`` (resp. ``fft``),
  real part taken for a real input.
* ``rfft``/``rfftn`` (real -> half spectrum ``R``): ``x_bar = Re(R^H y_bar)``, which is
  ``irfft(y_bar / c, norm=dual)`` with ``c = (1, 2, ..., 2, 1)`` the Hermitian multiplicities of
  the half-spectrum bins (the last is 1 only for even ``n``): ``n * irfft(z)_j = sum_k c_k
  Re(z_k e^(2 pi i jk/n))`` while ``Re(R^H y)_j = sum_k Re(y_k e^(2 pi i jk/n))``.
* ``irfft``/``irfftn``: ``y_j = (1/n) sum_k c_k Re(z_k e^(2 pi i jk/n))`` is real-linear in
  ``z``; ``dy/dRe(z_k) + i dy/dIm(z_k)`` summed against ``y_bar`` is
  ``c_k (1/n) sum_j y_bar_j e^(-2 pi i jk/n)``, i.e. ``z_bar = c * rfft(y_bar, norm=dual)``.
* ``hfft`` (``= n irfft(conj z)``) and ``ihfft`` (``= conj(rfft(x)) / n``): by the same
  computation ``z_bar = c * ihfft(y_bar, norm=dual)`` and ``x_bar = hfft(y_bar / c, norm=dual)``.
* zero-padding / trimming by ``n`` or ``s`` is undone by trimming / zero-padding the gradient.
* ``fftshift``/``ifftshift`` are permutations: the gradient is the inverse shift.

The JAX convention (``dL/dRe(z) - i dL/dIm(z)``) is the complex conjugate of this one; for real
inputs, and so for every real -> real composite, both give the same gradient.

Forward mode: every transform is real-linear, so its JVP is the transform of the tangent
(``linear_jvp``), in every convention. The registry-driven checks run every transform on real
and complex samples (complex outputs as (real, imaginary) pairs); ``tests/test_fft.py`` checks
complex VJPs and JVPs against JAX too. The ``r2c`` transforms (``rfft``, ``rfftn``, ``ihfft``)
refuse complex input (``real_only``), as their public functions do.
"""
from __future__ import annotations

import operator

import numpy as _np

from .._backend import namespace as _ns
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .._tensor import Tensor
from ._jvp import linear_jvp
from .creation import convert_to_tensor
from .elementwise import real
from .manipulation import _shape, concat

_NORMS = ("backward", "ortho", "forward")
_DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


# --- argument checks (public wrappers) -------------------------------------------------------
def _is_complex(v) -> bool:
    kind = getattr(v.dtype, "kind", None)
    if kind is not None:
        return kind == "c"
    return _ns(v).isdtype(v.dtype, "complex floating")


def _value(x):
    return x._value if isinstance(x, Tensor) else x


def _check_norm(fn, norm):
    if norm not in _NORMS:
        raise ValueError(f"{fn}: norm must be one of 'backward', 'ortho', 'forward', got "
                         f"{norm!r}")


def _check_ndim(fn, x):
    if len(x.shape) == 0:
        raise ValueError(f"{fn}: x must have at least one dimension, got a 0-d tensor; "
                         "reshape it to (1,) for a transform of length 1")


def _check_axis(fn, axis, ndim) -> int:
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"{fn}: axis must be an int, got {type(axis).__name__}") from None
    if not -ndim <= a < ndim:
        raise ValueError(f"{fn}: axis {a} is out of range for a tensor with {ndim} "
                         f"dimension(s); use an axis in [{-ndim}, {ndim})")
    return a % ndim


def _check_size(fn, what, n) -> int:
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"{fn}: {what} must be an int, got {type(n).__name__}") from None
    if n < 1:
        raise ValueError(f"{fn}: {what} must be a positive number of points, got {n}")
    return n


def _check_real(fn, x, alternative):
    if _is_complex(_value(x)):
        raise TypeError(f"{fn}: x must have a real floating dtype, got {x.dtype}; for complex "
                        f"input use {alternative}")


def _params_1d(fn, x, n, axis, norm, half):
    """Resolved ``(n, axis)``; ``half``: ``n`` is the output length of a half-spectrum input."""
    x = convert_to_tensor(x)
    _check_ndim(fn, x)
    _check_norm(fn, norm)
    axis = _check_axis(fn, axis, len(x.shape))
    if n is None:
        m = x.shape[axis]
        n = 2 * (m - 1) if half else m
        if n < 1:
            raise ValueError(f"{fn}: the transformed axis {axis} has size {m}, which gives "
                             f"{n} points; pass n >= 1 (or a longer input)")
    return x, _check_size(fn, "n", n), axis


def _params_nd(fn, x, s, axes, norm, half):
    """Resolved ``(s, axes)`` as tuples of ints, axes non-negative and unique."""
    x = convert_to_tensor(x)
    _check_ndim(fn, x)
    _check_norm(fn, norm)
    ndim = len(x.shape)
    if axes is None:
        if s is not None:
            raise ValueError(f"{fn}: s was given without axes; the Array API requires both "
                             f"(e.g. axes={tuple(range(-len(s), 0))} for the last {len(s)} "
                             "axes)")
        axes = tuple(range(ndim))
    else:
        axes = tuple(_check_axis(fn, a, ndim) for a in axes)
    if not axes:
        raise ValueError(f"{fn}: axes is empty; name at least one axis to transform")
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fn}: axes {axes} name an axis twice; each axis may be "
                         "transformed once")
    if s is None:
        s = (-1,) * len(axes)
    s = tuple(s)
    if len(s) != len(axes):
        raise ValueError(f"{fn}: s has {len(s)} entries for {len(axes)} axes; give one size "
                         "per axis")
    out = []
    for i, (a, n) in enumerate(zip(axes, s)):
        if n == -1:
            m = x.shape[a]
            n = 2 * (m - 1) if half and i == len(axes) - 1 else m
            if n < 1:
                raise ValueError(f"{fn}: axis {a} has size {m}, which gives {n} points; pass "
                                 "s with sizes >= 1")
        out.append(_check_size(fn, f"s[{i}]", n))
    return x, tuple(out), axes


# --- primitives ------------------------------------------------------------------------------
# name -> (op type, kind, adjoint name); kind: "c2c" complex-linear, "r2c" real input to a
# half spectrum, "c2r" half spectrum to a real output
_TABLE = {
    "fft": ("FFT", "c2c", "ifft"), "ifft": ("IFFT", "c2c", "fft"),
    "fftn": ("FFTN", "c2c", "ifftn"), "ifftn": ("IFFTN", "c2c", "fftn"),
    "rfft": ("RFFT", "r2c", "irfft"), "rfftn": ("RFFTN", "r2c", "irfftn"),
    "ihfft": ("IHFFT", "r2c", "hfft"),
    "irfft": ("IRFFT", "c2r", "rfft"), "irfftn": ("IRFFTN", "c2r", "rfftn"),
    "hfft": ("HFFT", "c2r", "ihfft"),
}
_PRIMITIVES = {}
_NAMES = {op_type: name for name, (op_type, _, _) in _TABLE.items()}  # op type -> name


def _backend_error(name, x, attrs, e):
    settings = ", ".join(f"{k}={v!r}" for k, v in attrs.items())
    return type(e)(f"{name}: the backend cannot transform a tensor of shape {_shape(x)} and "
                   f"dtype {getattr(x, 'dtype', '?')} with {settings}: {e}")


_COMPLEX_INPUT = {"fft", "ifft", "fftn", "ifftn", "irfft", "irfftn", "hfft"}


def _promoted(name, x):
    """Real input to a transform the standard defines on complex input is promoted, as NumPy
    does on every backend (array-api-strict would refuse it)."""
    xp = _ns(x)
    if name in _COMPLEX_INPUT and xp.isdtype(x.dtype, "real floating"):
        return xp.astype(x, xp.complex64 if x.dtype == xp.float32 else xp.complex128)
    return x


def _forward_1d(name):
    def forward(x, *, n=None, axis=-1, norm="backward"):
        try:
            return getattr(_ns(x).fft, name)(_promoted(name, x), n=n, axis=axis, norm=norm)
        except (TypeError, ValueError, IndexError) as e:
            raise _backend_error(name, x, {"n": n, "axis": axis, "norm": norm}, e) from e

    forward.__name__ = name
    return forward


def _forward_nd(name):
    def forward(x, *, s=None, axes=None, norm="backward"):
        try:
            return getattr(_ns(x).fft, name)(_promoted(name, x), s=s, axes=axes, norm=norm)
        except (TypeError, ValueError, IndexError) as e:
            raise _backend_error(name, x, {"s": s, "axes": axes, "norm": norm}, e) from e

    forward.__name__ = name
    return forward


def _multiplicities(g, n, axis, invert):
    """The Hermitian multiplicities ``c`` (or ``1/c``) of the ``n // 2 + 1`` half-spectrum bins
    along ``axis``, a real constant of ``g``'s precision shaped to broadcast against ``g``."""
    v = g._value
    xp = _ns(v)
    k = n // 2 + 1
    c = [1.0] + [2.0] * (k - 1)
    if n % 2 == 0:
        c[-1] = 1.0
    if invert:
        c = [1.0 / a for a in c]
    w = xp.asarray(c, dtype=xp.finfo(v.dtype).dtype)
    return Tensor(xp.reshape(w, (k,) + (1,) * (g.ndim - 1 - axis)))


def _fit(g, shape, axes):
    """Trim or zero-pad ``g`` along ``axes`` to the sizes of ``shape`` (the adjoint of the
    forward's zero-padding / trimming to ``n`` or ``s``)."""
    for a in axes:
        m, k = shape[a], g.shape[a]
        if k > m:
            g = g[(slice(None),) * a + (slice(0, m), Ellipsis)]
        elif k < m:
            v = g._value
            pad = g.shape[:a] + (m - k,) + g.shape[a + 1:]
            g = concat([g, Tensor(_ns(v).zeros(pad, dtype=v.dtype))], axis=a)
    return g


def _resolve(op):
    """``(s, axes, norm)`` of a recorded op, defaults resolved as the backend resolves them."""
    x = op.inputs[0]
    attrs = op.attrs
    name = _NAMES[op.type]
    half = _TABLE[name][1] == "c2r"
    ndim = x.ndim
    if name.endswith("n"):
        axes = attrs.get("axes")
        axes = tuple(range(ndim)) if axes is None else tuple(a % ndim for a in axes)
        s = attrs.get("s") or (-1,) * len(axes)
        s = list(s)
        for i, a in enumerate(axes):
            if s[i] == -1:
                m = x.shape[a]
                s[i] = 2 * (m - 1) if half and i == len(axes) - 1 else m
        return tuple(s), axes, attrs.get("norm", "backward")
    axis = attrs.get("axis", -1) % ndim
    n = attrs.get("n")
    if n is None:
        m = x.shape[axis]
        n = 2 * (m - 1) if half else m
    return (n,), (axis,), attrs.get("norm", "backward")


def _fft_grad(op, dy):
    # the adjoint transform with the dual normalisation (derivations in the module docstring)
    name = _NAMES[op.type]
    _, kind, adjoint = _TABLE[name]
    s, axes, norm = _resolve(op)
    x = op.inputs[0]
    if kind == "r2c":
        dy = dy * _multiplicities(dy, s[-1], axes[-1], invert=True)
    prim = _PRIMITIVES[adjoint]
    if name.endswith("n"):
        g = prim(dy, s=s, axes=axes, norm=_DUAL[norm])
    else:
        g = prim(dy, n=s[0], axis=axes[0], norm=_DUAL[norm])
    if kind == "c2r":
        g = g * _multiplicities(g, s[-1], axes[-1], invert=False)
    g = _fit(g, x.shape, axes)
    if _is_complex(g._value) and not _is_complex(x._value):
        g = real(g)  # the VJP of a real input is the real part of the adjoint
    return g


def _samples(name):
    kind = _TABLE[name][1]
    if name.endswith("n"):
        base = [Sample((3, 4)), Sample((2, 3, 4), axes=(0, 2), norm="ortho"),
                Sample((3, 4), s=(5, 3), axes=(1, 0), norm="forward"),
                Sample((0, 3, 4), axes=(1, 2)), Sample((1, 3), axes=(1,))]
        if kind == "c2r":
            base += [Sample((3, 4), s=(3, 7), axes=(0, 1)),
                     Sample((2, 1), s=(1, 2), axes=(1, 0))]
        else:
            base.append(Sample((2, 1), axes=(0, 1)))
        return base
    base = [Sample((6,)), Sample((3, 5), axis=0, norm="ortho"),
            Sample((2, 5), n=8, norm="forward"), Sample((2, 6), n=3, axis=1),
            Sample((0, 4)), Sample((1,), n=1 if kind != "c2r" else 2), Sample((3, 1), axis=0)]
    if kind == "c2r":
        base.append(Sample((2, 4), n=7))  # odd output length: no Nyquist bin
    return base


def _define(name):
    op_type = _TABLE[name][0]
    make = _forward_nd if name.endswith("n") else _forward_1d
    prim = primitive(op_type, samples=_samples(name), linear=(0,),  # the self-check's adjoint test
                     real_only=_TABLE[name][1] == "r2c")(make(name))
    RegisterGradient(op_type)(_fft_grad)
    RegisterJVP(op_type)(linear_jvp)  # every transform is (real-)linear: itself on the tangent
    _PRIMITIVES[name] = prim
    return prim


for _name in _TABLE:
    _define(_name)


# --- public functions ------------------------------------------------------------------------
def fft(x, /, *, n=None, axis=-1, norm="backward"):
    """One-dimensional discrete Fourier transform along ``axis`` (Array API ``fft.fft``).

    x: at least 1-d, complex floating (the Array API dtype; NumPy also accepts real input and
    promotes it, array-api-strict does not). n: transform length (input zero-padded or trimmed
    along ``axis``; default its size). norm: ``"backward"`` (no scaling), ``"ortho"``
    (``1/sqrt(n)``) or ``"forward"`` (``1/n``). Result: ``x``'s shape with ``n`` along
    ``axis``, complex of ``x``'s precision. Raises ``ValueError`` for a 0-d ``x``, a bad axis,
    ``n < 1`` or an unknown norm. Gradient: ``ifft(dy, n, axis, norm=dual)`` (``F^H = n F^-1``),
    trimmed/padded back to ``x``'s length, its real part for a real ``x``.
    """
    x, n, axis = _params_1d("fft", x, n, axis, norm, half=False)
    return _PRIMITIVES["fft"](x, n=n, axis=axis, norm=norm)


def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    """One-dimensional inverse discrete Fourier transform (Array API ``fft.ifft``).

    Arguments, result and errors as :func:`fft`; norm ``"backward"`` scales by ``1/n``,
    ``"forward"`` not at all. Gradient: ``fft(dy, norm=dual)``, trimmed/padded back to ``x``'s
    length, its real part for a real ``x``.
    """
    x, n, axis = _params_1d("ifft", x, n, axis, norm, half=False)
    return _PRIMITIVES["ifft"](x, n=n, axis=axis, norm=norm)


def fftn(x, /, *, s=None, axes=None, norm="backward"):
    """n-dimensional discrete Fourier transform over ``axes`` (Array API ``fft.fftn``).

    x: complex floating (NumPy also promotes real input). axes: unique axes (default all).
    s: transform sizes per axis (``-1``: the input's size; the input is zero-padded or trimmed);
    if given, ``axes`` must be given too. norm: as :func:`fft` with ``n = prod(s)``. Result:
    ``x``'s shape with ``s[i]`` along ``axes[i]``. Raises ``ValueError`` for a 0-d ``x``,
    ``s`` without ``axes``, repeated or empty axes, mismatched lengths, sizes < 1 or an unknown
    norm. Gradient: ``ifftn(dy, s, axes, norm=dual)`` trimmed/padded back (real part for a real
    ``x``).
    """
    x, s, axes = _params_nd("fftn", x, s, axes, norm, half=False)
    return _PRIMITIVES["fftn"](x, s=s, axes=axes, norm=norm)


def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    """n-dimensional inverse discrete Fourier transform (Array API ``fft.ifftn``).

    Arguments, result and errors as :func:`fftn`. Gradient: ``fftn(dy, s, axes, norm=dual)``
    trimmed/padded back (real part for a real ``x``).
    """
    x, s, axes = _params_nd("ifftn", x, s, axes, norm, half=False)
    return _PRIMITIVES["ifftn"](x, s=s, axes=axes, norm=norm)


def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    """Discrete Fourier transform of a real signal, non-negative frequencies only.

    x: at least 1-d, real floating. n: transform length (default ``x.shape[axis]``). Result:
    ``x``'s shape with ``n // 2 + 1`` along ``axis``, complex of ``x``'s precision. Raises
    ``TypeError`` for complex ``x`` and ``ValueError`` as :func:`fft`. Gradient (real):
    ``irfft(dy / c, n, axis, norm=dual)`` with ``c = (1, 2, ..., 2, 1)`` the bins' Hermitian
    multiplicities, which equals ``Re(R^H dy)`` for the half-spectrum DFT ``R``.
    """
    x, n, axis = _params_1d("rfft", x, n, axis, norm, half=False)
    _check_real("rfft", x, "fft")
    return _PRIMITIVES["rfft"](x, n=n, axis=axis, norm=norm)


def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    """Inverse of :func:`rfft`: a real signal of length ``n`` from its half spectrum.

    x: at least 1-d, complex floating (NumPy also accepts real). n: output length (default
    ``2 * (x.shape[axis] - 1)``); the input is zero-padded or trimmed to ``n // 2 + 1`` bins,
    and the imaginary parts of the zero-frequency (and, for even ``n``, the Nyquist) bin are
    ignored. Result: real of ``x``'s precision, ``n`` along ``axis``. Raises ``ValueError`` as
    :func:`fft`. Gradient: ``c * rfft(dy, n, axis, norm=dual)`` (``c`` as in :func:`rfft`),
    trimmed/padded back to ``x``'s length (real part for a real ``x``).
    """
    x, n, axis = _params_1d("irfft", x, n, axis, norm, half=True)
    return _PRIMITIVES["irfft"](x, n=n, axis=axis, norm=norm)


def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    """n-dimensional Fourier transform of a real signal (half spectrum on the last axis).

    x: real floating. s, axes, norm: as :func:`fftn`. Result: ``s[i]`` along ``axes[i]``
    except ``s[-1] // 2 + 1`` along ``axes[-1]``, complex. Raises ``TypeError`` for complex
    ``x``, ``ValueError`` as :func:`fftn`. Gradient (real): ``irfftn(dy / c, s, axes,
    norm=dual)``, ``c`` the Hermitian multiplicities along ``axes[-1]``, trimmed/padded back.
    """
    x, s, axes = _params_nd("rfftn", x, s, axes, norm, half=False)
    _check_real("rfftn", x, "fftn")
    return _PRIMITIVES["rfftn"](x, s=s, axes=axes, norm=norm)


def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    """Inverse of :func:`rfftn`: a real signal with sizes ``s`` from its half spectrum.

    x: complex floating (NumPy also accepts real). s: output sizes (default the input sizes,
    except ``2 * (m - 1)`` on the last axis); the input is zero-padded or trimmed to ``s[i]``
    (``s[-1] // 2 + 1`` on the last axis). Result: real, ``s[i]`` along ``axes[i]``. Raises
    ``ValueError`` as :func:`fftn`. Gradient: ``c * rfftn(dy, s, axes, norm=dual)``,
    trimmed/padded back (real part for a real ``x``).
    """
    x, s, axes = _params_nd("irfftn", x, s, axes, norm, half=True)
    return _PRIMITIVES["irfftn"](x, s=s, axes=axes, norm=norm)


def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    """Fourier transform of a Hermitian-symmetric signal given by its first half (real result).

    x: complex floating (NumPy also accepts real). n: output length (default
    ``2 * (x.shape[axis] - 1)``). Equals ``n * irfft(conj(x))`` for ``norm="backward"``.
    Result: real, ``n`` along ``axis``. Raises ``ValueError`` as :func:`fft`. Gradient:
    ``c * ihfft(dy, n, axis, norm=dual)``, trimmed/padded back (real part for a real ``x``).
    """
    x, n, axis = _params_1d("hfft", x, n, axis, norm, half=True)
    return _PRIMITIVES["hfft"](x, n=n, axis=axis, norm=norm)


def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    """Inverse of :func:`hfft`: ``conj(rfft(x)) / n`` for ``norm="backward"``.

    x: at least 1-d, real floating. Result: complex, ``n // 2 + 1`` along ``axis``. Raises
    ``TypeError`` for complex ``x``, ``ValueError`` as :func:`fft`. Gradient (real):
    ``hfft(dy / c, n, axis, norm=dual)``, trimmed/padded back.
    """
    x, n, axis = _params_1d("ihfft", x, n, axis, norm, half=False)
    _check_real("ihfft", x, "ifft")
    return _PRIMITIVES["ihfft"](x, n=n, axis=axis, norm=norm)


# --- frequencies (constants) -------------------------------------------------------------------
def _freq(fn, n, d, dtype, device):
    n = _check_size(fn, "n", n)
    xp = _ns()  # a creation function: NumPy, as tapegrad's other creation functions
    kw = {} if device is None else {"device": device}
    out = getattr(xp.fft, fn)(n, d=d, **kw)
    if dtype is not None:
        dt = _np.dtype(dtype)
        if dt.kind != "f":
            raise ValueError(f"{fn}: dtype must be a real floating dtype, got {dt}")
        out = xp.astype(out, dt)
    return Tensor(out)


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """Sample frequencies of an ``n``-point DFT: ``[0, 1, ..., -1] / (d * n)``.

    n: a positive int; d: the sample spacing; dtype: a real floating dtype (default float64).
    Result: a constant of shape ``(n,)``. Raises ``ValueError`` for ``n < 1`` or a non-real
    dtype. No gradient (a constant).
    """
    return _freq("fftfreq", n, d, dtype, device)


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """Sample frequencies of :func:`rfft`: ``[0, 1, ..., n // 2] / (d * n)``.

    Arguments and errors as :func:`fftfreq`. Result: a constant of shape ``(n // 2 + 1,)``.
    """
    return _freq("rfftfreq", n, d, dtype, device)


# --- shifts ------------------------------------------------------------------------------------
_SHIFT_SAMPLES = [Sample((5,)), Sample((3, 4), axes=0), Sample((3, 4), axes=(1, 0)),
                  Sample((2, 3, 4), axes=(-1,)), Sample(()), Sample((3, 2), axes=()),
                  Sample((0, 3)), Sample((1, 1))]


@primitive("FFTShift", samples=_SHIFT_SAMPLES, linear=(0,))
def _fftshift(x, *, axes=None):
    if axes == () or not x.shape:
        return x  # nothing to shift (NumPy's roll rejects an empty axes tuple)
    return _ns(x).fft.fftshift(x, axes=axes)


@primitive("IFFTShift", samples=_SHIFT_SAMPLES, linear=(0,))
def _ifftshift(x, *, axes=None):
    if axes == () or not x.shape:
        return x
    return _ns(x).fft.ifftshift(x, axes=axes)


RegisterJVP("FFTShift")(linear_jvp)
RegisterJVP("IFFTShift")(linear_jvp)


@RegisterGradient("FFTShift")
def _fftshift_grad(op, dy):
    return _ifftshift(dy, axes=op.attrs.get("axes"))  # the inverse permutation


@RegisterGradient("IFFTShift")
def _ifftshift_grad(op, dy):
    return _fftshift(dy, axes=op.attrs.get("axes"))  # the inverse permutation


def _shift_axes(fn, x, axes):
    ndim = len(x.shape)
    if axes is None:
        return None
    if isinstance(axes, int) or hasattr(axes, "__index__"):
        return _check_axis(fn, axes, ndim)
    return tuple(_check_axis(fn, a, ndim) for a in axes)


def fftshift(x, /, *, axes=None):
    """Move the zero-frequency term to the centre along ``axes`` (int, sequence or None: all).

    x: any shape (floating on array-api-strict). Result: same shape and dtype, each axis rolled
    by ``size // 2``. Raises ``ValueError`` for an out-of-range axis. Gradient: ``ifftshift`` of
    the cotangent (the inverse permutation).
    """
    x = convert_to_tensor(x)
    return _fftshift(x, axes=_shift_axes("fftshift", x, axes))


def ifftshift(x, /, *, axes=None):
    """Inverse of :func:`fftshift` (rolls each axis by ``-(size // 2)``).

    Arguments and errors as :func:`fftshift`. Gradient: ``fftshift`` of the cotangent.
    """
    x = convert_to_tensor(x)
    return _ifftshift(x, axes=_shift_axes("ifftshift", x, axes))


__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
