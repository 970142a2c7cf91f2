"""Seedable random numbers in the style of TensorFlow 2's ``tf.random``; results are constants.

``set_seed(s)`` makes every later call reproducible: the calls draw, in order, from a stream
determined by the global seed and, when given, the op-level ``seed`` (each distinct op seed
has its own stream, restarted by ``set_seed``). Without a global seed, calls without ``seed``
are non-deterministic, and calls with one are reproducible from program start.
:class:`Generator` holds its own state (``numpy.random.default_rng`` on NumPy).
Default dtype: the backend's default float (float64 on NumPy).

Inside ``tg.function`` a generator draws with JAX's counter-based PRNG from a key it keeps in a
Variable (``Generator.key``), which the compiled function lifts like any other state: every
call gets fresh numbers, never constants fixed at trace time.

Inside a function batched by ``tg.vmap`` (JAX's engine) every draw, from any generator, comes
from JAX's PRNG keyed by the call's key (from the global generator), the draw's number and the
example's index (:class:`BatchDraws`): independent per example (see "Batching" in
``docs/architecture.md``).
"""
from __future__ import annotations

import contextlib
import threading
import weakref

import numpy as np

from . import _backend, config
from ._tensor import Tensor
from ._variables import Variable, _binding

_DEFAULT_GLOBAL_SEED = 87654321
_keys = weakref.WeakValueDictionary()  # id -> a generator's key Variable (tg.vmap's loop
#                                         may assign them: examples draw one after another)


def is_key(v) -> bool:
    """Whether the Variable ``v`` is a generator's key (its state inside ``tg.function``)."""
    return _keys.get(v._id) is v  # the global seed assumed when only an op seed is given


class Generator:
    """A random-number generator with its own state (TensorFlow's ``tf.random.Generator``).

    Create it with :meth:`from_seed` (reproducible) or :meth:`from_non_deterministic_state`.
    """

    def __init__(self, rng: np.random.Generator):
        if not isinstance(rng, np.random.Generator):
            raise TypeError("Generator: expected a numpy.random.Generator; create one with "
                            "tg.random.Generator.from_seed(seed)")
        self._rng = rng
        self.key = Variable(rng.integers(0, 2 ** 32, size=2, dtype=np.uint32), trainable=False,
                            name="random_key")
        _keys[self.key._id] = self.key

    def _traced(self):
        """JAX's ``random`` module when this draw is traced by ``tg.function``, else None."""
        jax = config.loaded_jax()
        return jax.random if jax is not None and isinstance(self.key._value,
                                                             jax.core.Tracer) else None

    def _subkey(self, jrandom):
        key, sub = jrandom.split(self.key._value)
        self.key.assign(key)
        return sub

    @classmethod
    def from_seed(cls, seed) -> "Generator":
        """A generator whose numbers are determined by ``seed`` (a non-negative int)."""
        return cls(np.random.default_rng(_check_seed(seed)))

    @classmethod
    def from_non_deterministic_state(cls) -> "Generator":
        """A generator seeded from the operating system's entropy."""
        return cls(np.random.default_rng())

    def reset_from_seed(self, seed) -> None:
        """Restart this generator as ``from_seed(seed)`` would create it (TensorFlow's
        ``Generator.reset_from_seed``): the next numbers are ``from_seed(seed)``'s."""
        self._rng = np.random.default_rng(_check_seed(seed))
        self.key.assign(self._rng.integers(0, 2 ** 32, size=2, dtype=np.uint32))

    def split(self, count=1) -> list:
        """``count`` new generators with independent streams, derived from this one's state
        (NumPy's ``Generator.spawn``), as TensorFlow's ``Generator.split``: deterministic given
        this generator's seed; the generator itself draws on unchanged. ``count``: a positive
        int; raises ``ValueError`` otherwise."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ValueError(f"Generator.split: count must be a positive int, got {count!r}")
        return [type(self)(rng) for rng in self._rng.spawn(int(count))]

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=None) -> Tensor:
        """Normal samples of ``shape`` (int or tuple): ``mean + stddev * N(0, 1)``.

        dtype: a floating dtype (default float64). Raises ``ValueError`` for a non-floating
        dtype or a negative shape.
        """
        dtype = _float_dtype("normal", dtype)
        batch = _batch_draws()
        if batch is not None:
            jrandom = config.jax_module().random
            return Tensor(mean + stddev * jrandom.normal(batch.next_key(jrandom),
                                                         _check_shape(shape), dtype))
        jrandom = self._traced()
        if jrandom is not None:
            return Tensor(mean + stddev * jrandom.normal(self._subkey(jrandom),
                                                         _check_shape(shape), dtype))
        z = self._rng.standard_normal(_check_shape(shape))
        return _host_draw(np.asarray(mean + stddev * z).astype(dtype, copy=False))

    def uniform(self, shape, minval=0.0, maxval=None, dtype=None) -> Tensor:
        """Uniform samples of ``shape`` in ``[minval, maxval)``.

        dtype: floating (default float64; ``maxval`` defaults to 1) or integer (``maxval``
        required). Raises ``ValueError`` if an integer dtype has no ``maxval`` or
        ``minval >= maxval``.
        """
        shape = _check_shape(shape)
        dtype = np.dtype(np.float64 if dtype is None else dtype)
        jrandom = self._traced()
        batch = _batch_draws()
        if batch is not None:
            jrandom = config.jax_module().random
        if dtype.kind in "iu":
            if maxval is None:
                raise ValueError("uniform: maxval is required for an integer dtype")
            if not minval < maxval:
                raise ValueError(f"uniform: need minval < maxval, got [{minval}, {maxval})")
            if batch is not None:
                return Tensor(jrandom.randint(batch.next_key(jrandom), shape, minval, maxval,
                                              dtype))
            if jrandom is not None:
                return Tensor(jrandom.randint(self._subkey(jrandom), shape, minval, maxval,
                                              dtype))
            return _host_draw(self._rng.integers(minval, maxval, size=shape, dtype=dtype))
        dtype = _float_dtype("uniform", dtype)
        maxval = 1.0 if maxval is None else maxval
        if batch is not None:
            return Tensor(jrandom.uniform(batch.next_key(jrandom), shape, dtype, minval, maxval))
        if jrandom is not None:
            return Tensor(jrandom.uniform(self._subkey(jrandom), shape, dtype, minval, maxval))
        u = self._rng.uniform(minval, maxval, size=shape)
        return _host_draw(np.asarray(u).astype(dtype, copy=False))


def _host_draw(a) -> Tensor:
    """A Tensor of the NumPy draw ``a`` on the default backend (``array_api_strict``'s array when
    that is the default, so that it mixes with the user's other tensors), but NumPy's while
    ``tg.function`` traces (Variables bound): JAX takes NumPy constants, not another backend's."""
    if _backend.default_namespace() is np or _binding.values is not None:
        return Tensor(a)
    return Tensor(_backend.asarray(a))


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"random: a seed must be a non-negative int, got {seed!r}")
    return int(seed)


def _check_shape(shape):
    if isinstance(shape, Tensor):
        shape = shape.numpy().tolist()
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"random: shape {shape} has a negative dimension")
    return shape


def _float_dtype(fn, dtype):
    dtype = np.dtype(np.float64 if dtype is None else dtype)
    if dtype.kind != "f":
        raise ValueError(f"{fn}: dtype must be a floating dtype, got {dtype}")
    return dtype


_global_seed = None
_global = Generator.from_non_deterministic_state()
_op_streams: dict = {}


def set_seed(seed) -> None:
    """Set the global seed (a non-negative int): later calls repeat the same numbers."""
    global _global_seed, _global
    _global_seed = _check_seed(seed)
    _global = Generator.from_seed(_global_seed)
    _op_streams.clear()


def get_global_generator() -> Generator:
    """The generator used by :func:`normal`/:func:`uniform` calls without an op seed."""
    return _global


def _generator(seed) -> Generator:
    if seed is None:
        return _global
    seed = _check_seed(seed)
    g = _op_streams.get(seed)
    if g is None:
        base = _DEFAULT_GLOBAL_SEED if _global_seed is None else _global_seed
        g = _op_streams[seed] = Generator(np.random.default_rng([base, seed]))
    return g


def normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None) -> Tensor:
    """Normal samples of ``shape``: ``mean + stddev * N(0, 1)`` (``tf.random.normal``).

    seed: an op-level seed (see the module docstring). dtype: floating, default float64.
    Returns a constant Tensor. Raises ``ValueError`` for a bad seed, shape or dtype.
    """
    return _generator(seed).normal(shape, mean, stddev, dtype)


def uniform(shape, minval=0.0, maxval=None, dtype=None, seed=None) -> Tensor:
    """Uniform samples of ``shape`` in ``[minval, maxval)`` (``tf.random.uniform``).

    maxval: default 1 for floating dtypes, required for integer dtypes. seed: an op-level
    seed. Returns a constant Tensor. Raises ``ValueError`` for a bad seed, shape, dtype or
    range.
    """
    return _generator(seed).uniform(shape, minval, maxval, dtype)


# --- draws inside tg.vmap ------------------------------------------------------------------------
# Inside a batched function (tg.vmap with JAX) every draw, from any generator, is JAX's PRNG
# keyed by the call's key, the draw's number in the call and the example's index, so each
# example gets independent numbers and a run of the function again (for its gradient) gets the
# same ones. The call's key comes from the global generator (set_seed makes it reproducible):
# a constant drawn from its NumPy state eagerly, its traced key inside tg.function, or the
# enclosing call's per-example key in a nested tg.vmap.
class NeedKey(Exception):
    """A draw inside ``tg.vmap`` needs a traced key, which the call must take as an input."""


class BatchDraws:
    """The random source of one run of a batched function: ``index`` (the example's index, a
    JAX value batched by ``jax.vmap``) and ``key`` (a raw uint32[2] key, or a function giving
    one, called at the first draw)."""

    def __init__(self, index, key):
        self.index, self._key, self.count = index, key, 0

    def next_key(self, jrandom):
        """A key of its own for the next draw of this example."""
        if callable(self._key):
            self._key = self._key()
        self.count += 1
        return jrandom.fold_in(jrandom.fold_in(self._key, self.count), self.index)


_batch = threading.local()


def _batch_draws():
    stack = getattr(_batch, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def batch_scope(draws):
    """Draws in the block come from ``draws`` (a :class:`BatchDraws`), in this thread."""
    stack = getattr(_batch, "stack", None)
    if stack is None:
        stack = _batch.stack = []
    stack.append(draws)
    try:
        yield draws
    finally:
        stack.pop()


def concrete_key_ok() -> bool:
    """Whether a ``tg.vmap`` call made here may draw its key as a constant (eagerly: no
    enclosing batched function, the global generator's key is not traced)."""
    return _batch_draws() is None and _global._traced() is None


def concrete_key():
    """A key for a ``tg.vmap`` call, drawn from the global generator's NumPy state."""
    return _global._rng.integers(0, 2 ** 32, size=2, dtype=np.uint32)


def vmap_key(jax):
    """A traced key for a ``tg.vmap`` call: the enclosing batched function's next per-example
    key, or a split of the global generator's traced key (inside ``tg.function``)."""
    outer = _batch_draws()
    if outer is not None:
        return outer.next_key(jax.random)
    if _global._traced() is not None:
        return _global._subkey(jax.random)
    return concrete_key()


__all__ = ["set_seed", "normal", "uniform", "Generator", "get_global_generator"]
