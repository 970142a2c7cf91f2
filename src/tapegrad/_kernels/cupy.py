"""CuPy kernels, so that a CuPy computation never round-trips through NumPy (host memory).

``erf`` is ``cupyx.scipy.special.erf``; ``scatter_add`` is ``cupyx.scatter_add`` (atomic adds:
repeated indices accumulate); ``scatter_update`` is CuPy's own item assignment. NumPy arrays
inside a key (indices given by the user) are copied to the device first.

Unverified: no test of this module has run on a GPU yet (``tests/test_cupy.py`` skips
without CuPy and a device).
"""
from __future__ import annotations

import numpy as np


def erf(x):
    """``cupyx.scipy.special.erf``."""
    from cupyx.scipy.special import erf as _erf

    return _erf(x)


def scatter_add(shape, dtype, key, values):
    """Zeros of ``shape`` with ``values`` added at ``key`` (``cupyx.scatter_add``)."""
    import cupy
    import cupyx

    out = cupy.zeros(tuple(shape), dtype=dtype)
    cupyx.scatter_add(out, _device_key(key), values)
    return out


def scatter_update(x, key, v):
    """A copy of ``x`` with ``x[key] = v``."""
    out = x.copy()
    out[_device_key(key)] = v
    return out


def _device_key(key):
    import cupy

    if type(key) is tuple:
        return tuple(_device_key(k) for k in key)
    return cupy.asarray(key) if isinstance(key, np.ndarray) else key


KERNELS = {"erf": erf, "scatter_add": scatter_add, "scatter_update": scatter_update}
