"""``tg.fft``: the Array API ``fft`` extension on Tensors, differentiable.

Transforms (``fft``, ``ifft``, ``fftn``, ``ifftn``, ``rfft``, ``irfft``, ``rfftn``, ``irfftn``,
``hfft``, ``ihfft``) and shifts (``fftshift``, ``ifftshift``) have gradients (the adjoint
linear maps, see :mod:`tapegrad.ops.fft` for the complex cotangent convention);
``fftfreq``/``rfftfreq`` return constants.
"""
from __future__ import annotations

from .ops.fft import (fft, fftfreq, fftn, fftshift, hfft, ifft, ifftn, ifftshift, ihfft, irfft,
                      irfftn, rfft, rfftfreq, rfftn)

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
