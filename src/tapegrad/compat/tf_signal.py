"""``tf.signal`` and ``tf.image.resize`` for ``tapegrad.compat.tensorflow``: TensorFlow's
signatures, defaults and dtypes on ``tapegrad.fft`` and tapegrad's indexing, differentiable
through them (the gradients are those of the tapegrad ops they are made of)."""
from __future__ import annotations

import math

import numpy as np

import tapegrad as tg

__all__ = ["fft", "ifft", "fft2d", "ifft2d", "rfft", "irfft", "fftshift", "ifftshift",
           "hann_window", "hamming_window", "frame", "stft", "resize"]


def _length(fft_length, default):
    """TensorFlow's ``fft_length`` (None, an int or a one-element list) as an int."""
    if fft_length is None:
        return default
    return int(np.ravel(np.asarray(fft_length))[0])


def fft(input, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.signal.fft``: the DFT over the innermost axis of the complex ``input`` (same shape
    and dtype). Gradient: ``tapegrad.fft.fft``'s (the adjoint DFT)."""
    return tg.fft.fft(input)


def ifft(input, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.signal.ifft``: the inverse DFT (with 1/n) over the innermost axis."""
    return tg.fft.ifft(input)


def fft2d(input, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.signal.fft2d``: the DFT over the two innermost axes of the complex ``input``."""
    return tg.fft.fftn(input, axes=(-2, -1))


def ifft2d(input, name=None):  # noqa: A002 - TensorFlow's names
    """``tf.signal.ifft2d``: the inverse DFT over the two innermost axes."""
    return tg.fft.ifftn(input, axes=(-2, -1))


def rfft(input_tensor, fft_length=None, name=None):
    """``tf.signal.rfft``: the non-negative frequencies of the real ``input_tensor``'s DFT over
    its innermost axis, cropped or zero-padded to ``fft_length`` (an int or ``[n]``; default
    the axis length) first: shape ``(..., n // 2 + 1)``, complex64 for float32 input
    (complex128 for float64)."""
    x = tg.convert_to_tensor(input_tensor)
    return tg.fft.rfft(x, n=_length(fft_length, x.shape[-1]))


def irfft(input_tensor, fft_length=None, name=None):
    """``tf.signal.irfft``: the real signal of length ``fft_length`` (default
    ``2 * (m - 1)`` for an innermost axis of m) whose ``rfft`` is ``input_tensor``: float32
    for complex64 input (float64 for complex128)."""
    x = tg.convert_to_tensor(input_tensor)
    return tg.fft.irfft(x, n=_length(fft_length, 2 * (x.shape[-1] - 1)))


def _shift(x, axes, sign):
    x = tg.convert_to_tensor(x)
    axes = tuple(range(x.ndim)) if axes is None else tuple(np.atleast_1d(axes).tolist())
    return tg.roll(x, tuple(sign * (x.shape[a] // 2) for a in axes), axis=axes)


def fftshift(x, axes=None, name=None):
    """``tf.signal.fftshift``: the zero frequency moved to the centre along ``axes`` (an int
    or a list; all axes when None, as in TensorFlow): a roll by ``n // 2`` (any dtype, as
    TensorFlow's; ``tapegrad.fft.fftshift`` is floating-only on array-api-strict).
    Gradient: the opposite roll."""
    return _shift(x, axes, 1)


def ifftshift(x, axes=None, name=None):
    """``tf.signal.ifftshift``: the inverse of :func:`fftshift` (a roll by ``-(n // 2)``)."""
    return _shift(x, axes, -1)


def _cosine_window(a, b, window_length, periodic, dtype):
    n = int(window_length)
    if n == 1:
        return tg.ones((1,), dtype=dtype)
    denom = n if periodic and n % 2 == 0 else n - 1  # TensorFlow: periodic only when even
    return tg.astype(tg.constant(a - b * np.cos(2 * np.pi * np.arange(n) / denom)), dtype)


def hann_window(window_length, periodic=True, dtype=tg.float32, name=None):
    """``tf.signal.hann_window``: ``0.5 - 0.5 cos(2 pi n / N)`` for ``n < window_length``,
    N = ``window_length`` when ``periodic`` and ``window_length`` is even, else
    ``window_length - 1`` (TensorFlow's rule: an odd periodic window is the symmetric one);
    1-d ``dtype``; ``[1]`` for length 1."""
    return _cosine_window(0.5, 0.5, window_length, periodic, dtype)


def hamming_window(window_length, periodic=True, dtype=tg.float32, name=None):
    """``tf.signal.hamming_window``: ``0.54 - 0.46 cos(2 pi n / N)``, N as in
    :func:`hann_window`."""
    return _cosine_window(0.54, 0.46, window_length, periodic, dtype)


def frame(signal, frame_length, frame_step, pad_end=False, pad_value=0, axis=-1, name=None):
    """``tf.signal.frame``: the windows ``signal[..., k * frame_step + j, ...]`` (j <
    ``frame_length``) along ``axis``, which becomes two axes ``(frames, frame_length)``.
    Frames: ``1 + (n - frame_length) // frame_step`` (0 when the signal is shorter), or
    with ``pad_end`` ``ceil(n / frame_step)``, the end padded with ``pad_value``. Raises
    ``ValueError`` for a non-positive ``frame_length`` or ``frame_step``. Gradient: the
    gather's (overlapping frames add)."""
    x = tg.convert_to_tensor(signal)
    length, step = int(frame_length), int(frame_step)
    if length <= 0 or step <= 0:
        raise ValueError(f"tf.signal.frame: frame_length and frame_step must be positive, got "
                         f"{frame_length} and {frame_step}")
    axis = axis % x.ndim
    n = x.shape[axis]
    if pad_end:
        frames = -(-n // step)
        extra = max(0, (frames - 1) * step + length - n)
        if extra:
            shape = list(x.shape)
            shape[axis] = extra
            x = tg.concat([x, tg.full(tuple(shape), pad_value, dtype=x.dtype)], axis=axis)
    else:
        frames = max(0, 1 + (n - length) // step)
    idx = (step * np.arange(frames)[:, None] + np.arange(length)[None, :]).reshape(-1)
    out = tg.take(x, idx, axis=axis)
    return tg.reshape(out, (*x.shape[:axis], frames, length, *x.shape[axis + 1:]))


def stft(signals, frame_length, frame_step, fft_length=None, window_fn=hann_window,
         pad_end=False, name=None):
    """``tf.signal.stft``: the ``rfft`` (length ``fft_length``, default the smallest power
    of 2 >= ``frame_length``) of each frame of ``signals`` (``(..., samples)``, real) times
    ``window_fn(frame_length, dtype=signals.dtype)`` (a periodic Hann window; None for none):
    ``(..., frames, fft_length // 2 + 1)``, complex64 for float32 signals."""
    x = tg.convert_to_tensor(signals)
    if fft_length is None:
        fft_length = 1 << math.ceil(math.log2(int(frame_length)))
    frames = frame(x, frame_length, frame_step, pad_end=pad_end)
    if window_fn is not None:
        frames = frames * window_fn(int(frame_length), dtype=x.dtype)
    return rfft(frames, fft_length)


def resize(images, size, method="bilinear", preserve_aspect_ratio=False, antialias=False,
           name=None):
    """``tf.image.resize``: ``images`` (``(height, width, channels)`` or ``(batch, height,
    width, channels)``) resized to ``size`` = ``[new_height, new_width]`` with TensorFlow 2's
    half-pixel centres: output pixel i samples input position ``(i + 0.5) * in / out - 0.5``.
    ``method``: "bilinear" (linear between the two nearest pixels of each axis, edges
    clamped; a float32 result, as TensorFlow's) or "nearest" (the pixel
    ``floor((i + 0.5) * in / out)``; ``images``' own dtype). Raises ``NotImplementedError``
    for other methods, ``antialias=True`` and ``preserve_aspect_ratio=True``; ``ValueError``
    for an ``images`` of another rank. Gradient: the gathers' (bilinear: weighted)."""
    name_ = str(getattr(method, "value", method)).lower()
    if name_ not in ("bilinear", "nearest") or antialias or preserve_aspect_ratio:
        raise NotImplementedError(
            f"tf.image.resize: method={method!r}, antialias={antialias}, preserve_aspect_ratio="
            f"{preserve_aspect_ratio} is not provided by tapegrad.compat.tensorflow yet; only "
            "'bilinear' and 'nearest' without antialias or aspect ratio")
    x = tg.convert_to_tensor(images)
    if x.ndim not in (3, 4):
        raise ValueError(f"tf.image.resize: images must be 3-d (height, width, channels) or 4-d "
                         f"(batch, height, width, channels), got shape {tuple(x.shape)}")
    if name_ == "bilinear":
        x = tg.astype(x, tg.float32)
    for k in (1, 0):  # width first, then height, as TensorFlow's kernel interpolates
        axis, out = x.ndim - 3 + k, int(size[k])
        n = x.shape[axis]
        scale = np.float32(n) / np.float32(out)
        centre = (np.arange(out, dtype=np.float32) + np.float32(0.5)) * scale
        if name_ == "nearest":
            idx = np.minimum(np.floor(centre).astype(np.int64), n - 1)
            x = tg.take(x, idx, axis=axis)
            continue
        pos = centre - np.float32(0.5)
        low = np.floor(pos)
        w = (pos - low).astype(np.dtype(x.dtype))
        low = low.astype(np.int64)
        shape = [1] * x.ndim
        shape[axis] = out
        w = tg.reshape(tg.constant(w), tuple(shape))
        lo = tg.take(x, np.clip(low, 0, n - 1), axis=axis)
        hi = tg.take(x, np.clip(low + 1, 0, n - 1), axis=axis)
        x = lo + (hi - lo) * w
    return x
