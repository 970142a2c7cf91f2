"""Sample inputs of op types, for the registry-driven gradient tests (``primitive(samples=)``).

Not part of the tape machinery: the registry keeps an op type's samples, the tests draw random
inputs from them (``tests/test_registry_gradients.py``).
"""
from __future__ import annotations

import numpy as np


class Arg:
    """A sample float input of a given ``shape`` drawn uniformly from ``domain`` (lo, hi)."""

    __slots__ = ("shape", "domain")

    def __init__(self, shape, domain=None):
        self.shape = tuple(shape)
        self.domain = domain


class Sample:
    """Sample inputs of an op, for the registry-driven gradient tests.

    Positional ``args``: a tuple of ints is a random float input of that shape, an :class:`Arg`
    a random float input with its own domain, anything else is passed as it is (integer index
    arrays, Python scalars, shapes). Keyword ``attrs`` are passed as keyword attributes.
    ``domain``: the default (lo, hi) for random inputs.
    """

    def __init__(self, *args, domain=(-2.0, 2.0), **attrs):
        self.args = args
        self.domain = domain
        self.attrs = attrs

    def materialize(self, rng, dtype=np.float64, *, first_only=False):
        """Return ``(args, attrs, float_positions)`` with random arrays drawn from ``rng``.

        ``dtype``: the random inputs' dtype; for a complex dtype the real and the imaginary
        part are each drawn from the domain. ``first_only``: only the first random input has
        ``dtype``, the others its real counterpart (float64 for complex128), for ops that mix
        real and complex inputs.
        """
        args, pos = [], []
        real = np.finfo(dtype).dtype  # a complex dtype's components; a real dtype itself
        for i, a in enumerate(self.args):
            if isinstance(a, tuple) and all(isinstance(d, int) for d in a):
                a = Arg(a)
            if isinstance(a, Arg):
                lo, hi = a.domain or self.domain
                want = real if first_only and pos else np.dtype(dtype)
                value = rng.uniform(lo, hi, size=a.shape)
                if want.kind == "c":
                    value = value + 1j * rng.uniform(lo, hi, size=a.shape)
                args.append(np.asarray(value).astype(want))
                pos.append(i)
            else:
                args.append(a)
        return args, dict(self.attrs), pos

    def __repr__(self):
        return f"Sample({', '.join(map(repr, self.args))}, attrs={self.attrs})"
