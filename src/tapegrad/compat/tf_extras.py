"""TensorFlow names used by TensorFlow's guides, for ``tapegrad.compat.tensorflow`` (issue 33):
``tf.meshgrid``, ``tf.cast`` with keywords, ``tf.random.Generator`` with TensorFlow's
signatures and float32 default, ``tf.random.stateless_normal`` / ``stateless_uniform``,
``tf.dtypes``, ``tf.init_scope``, ``tf.types.experimental`` and a clear
error for TensorFlow string tensors. Kept apart from ``tensorflow.py`` so that the names there
and here merge separately.
"""
from __future__ import annotations

import contextlib
import types

import numpy as np

import tapegrad as tg


__all__ = ["Generator", "stateless_normal", "stateless_uniform", "dtypes",
           "init_scope", "types_experimental", "check_not_string"]

_f32 = tg.float32


class Generator(tg.random.Generator):
    """``tf.random.Generator``: tapegrad's generator with TensorFlow's signatures (``alg`` is
    accepted and ignored, ``name`` too) and float32 draws by default. Its numbers are NumPy's
    (PCG64), not TensorFlow's Philox ones: the same seed gives the same numbers here, not
    TensorFlow's."""

    @classmethod
    def from_seed(cls, seed, alg=None) -> "Generator":
        """A generator determined by ``seed`` (a non-negative int); ``alg`` is ignored."""
        return super().from_seed(seed)

    @classmethod
    def from_non_deterministic_state(cls, alg=None) -> "Generator":
        """A generator seeded from the operating system's entropy; ``alg`` is ignored."""
        return super().from_non_deterministic_state()

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=_f32, name=None):
        """Normal samples of ``shape``, float32 unless ``dtype`` is given."""
        return super().normal(shape, mean, stddev, dtype)

    def uniform(self, shape, minval=0, maxval=None, dtype=_f32, name=None):
        """Uniform samples of ``shape`` in ``[minval, maxval)``, float32 unless ``dtype``."""
        return super().uniform(shape, minval, maxval, dtype)


def _stateless_generator(where, seed):
    """The generator a stateless op draws from: determined by ``seed`` (two ints) only."""
    s = np.asarray(seed.numpy() if isinstance(seed, tg.Tensor) else seed)
    if s.shape != (2,) or s.dtype.kind not in "iu":
        raise ValueError(f"tf.random.{where}: seed must be a shape [2] integer tensor or list "
                         f"of two ints, got {seed!r}")
    return tg.random.Generator(np.random.default_rng([int(v) & 0xFFFFFFFFFFFFFFFF for v in s]))


def stateless_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_f32, name=None, alg=None):
    """``tf.random.stateless_normal``: normal samples of ``shape`` fixed by ``seed`` (two ints):
    the same seed gives the same numbers, every time. The numbers are not TensorFlow's
    (Philox-based there; see docs/tensorflow_differences.md). Raises ``ValueError`` for a seed
    that is not two ints."""
    return _stateless_generator("stateless_normal", seed).normal(shape, mean, stddev, dtype)


def stateless_uniform(shape, seed, minval=0, maxval=None, dtype=_f32, name=None, alg=None):
    """``tf.random.stateless_uniform``: uniform samples in ``[minval, maxval)`` fixed by
    ``seed`` (two ints), as :func:`stateless_normal` (integer ``dtype`` needs ``maxval``)."""
    return _stateless_generator("stateless_uniform", seed).uniform(shape, minval, maxval, dtype)


@contextlib.contextmanager
def init_scope():
    """``tf.init_scope()``: the block leaves the function being traced and runs eagerly, as in
    TensorFlow: inside a ``tg.function`` trace, Variables in the block are the real ones (not
    the trace's bound values), so an ``assign`` there happens once, when the trace runs, and is
    not part of the compiled call (TensorFlow's guide: a guarded one-off ``assign_add`` gives
    1, 1, 1 on three calls). Outside a trace it does nothing."""
    from tapegrad._variables import _binding

    saved = _binding.values, _binding.created
    _binding.values = _binding.created = None
    try:
        yield
    finally:
        _binding.values, _binding.created = saved


dtypes = types.SimpleNamespace(
    float16=tg.float16, float32=tg.float32, float64=tg.float64, int8=tg.int8, int16=tg.int16,
    int32=tg.int32, int64=tg.int64, uint8=tg.uint8, bool=tg.bool, complex64=tg.complex64,
    complex128=tg.complex128, as_dtype=np.dtype, DType=np.dtype)

types_experimental = types.SimpleNamespace(
    TensorLike=(tg.Tensor, np.ndarray, int, float, bool, list, tuple),
    TraceType=type("TraceType", (), {"__doc__": "tf.types.experimental.TraceType: a base "
                                                "class only; tg.function does not use it"}))


def check_not_string(value, where):
    """Raise ``TypeError`` if ``value`` holds strings or bytes: TensorFlow's ``tf.string``
    tensors have no tapegrad counterpart (tensors are numeric, for differentiation)."""
    if isinstance(value, (str, bytes, list, tuple, np.ndarray)) and \
            np.asarray(value).dtype.kind in "SU":
        raise TypeError(f"{where}: {value!r} holds strings; TensorFlow's string tensors "
                        "(tf.string, tf.strings) are not supported by tapegrad, whose tensors "
                        "are numeric. Keep strings as Python str / NumPy arrays outside "
                        "tensors (see docs/tensorflow_differences.md)")
