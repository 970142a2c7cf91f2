"""Backend resolution: the array namespace of a backend array, dtype helpers, extra kernels.

NumPy 2 is Array API compliant in its main namespace, so NumPy arrays resolve to ``numpy``
itself; any other array resolves through ``array_api_compat.array_namespace``. The result is
cached per array class, so resolution costs one dict lookup on the hot path.

Kernels the standard lacks (scatter-add) are registered per namespace with
:func:`register_kernel` and looked up with :func:`kernel`.
"""
from __future__ import annotations

import numpy as np

_SCALARS = (bool, int, float, complex)
_NAMESPACES: dict[type, object] = {np.ndarray: np}
_KERNELS: dict[tuple[str, str], object] = {}


def namespace(*values):
    """Return the array namespace of the first backend array in ``values``.

    Python scalars are skipped; if every value is a scalar (or there are none), NumPy is
    returned. Raises ``TypeError`` if an array's library is not an Array API library.
    """
    for v in values:
        if isinstance(v, _SCALARS) or v is None:
            continue
        if isinstance(v, (list, tuple)):
            return np
        cls = type(v)
        xp = _NAMESPACES.get(cls)
        if xp is None:
            xp = _resolve(v)
        return xp
    return np


def _resolve(value):
    cls = type(value)
    if isinstance(value, np.generic):
        xp = np
    else:
        import array_api_compat

        try:
            xp = array_api_compat.array_namespace(value)
        except TypeError as e:
            raise TypeError(
                f"tapegrad cannot use a value of type {cls.__module__}.{cls.__qualname__}: it is not "
                "an array of an Array API library. Pass a NumPy array, a Python scalar or list, "
                "or an array of an Array API backend (CuPy, Dask, array-api-strict)."
            ) from e
    _NAMESPACES[cls] = xp
    return xp


def asarray(value, dtype=None, xp=None):
    """Convert ``value`` (scalar, nested sequence, backend array) to a backend array.

    Without ``dtype``, Python floats become the backend's default float (float64 on NumPy),
    Python ints its default integer. ``xp`` picks the backend (default: ``value``'s own, else NumPy).
    """
    if xp is None:
        xp = namespace(value)
    return xp.asarray(value, dtype=dtype)


def is_floating(dtype) -> bool:
    """True for real or complex floating dtypes (the dtypes that carry gradients)."""
    kind = getattr(dtype, "kind", None)
    if kind is not None:  # NumPy and CuPy dtypes
        return kind in "fc"
    return _isdtype(dtype, ("real floating", "complex floating"))


def _isdtype(dtype, kinds):
    for xp in set(_NAMESPACES.values()) - {np}:  # NumPy dtypes were handled by their .kind
        try:
            return xp.isdtype(dtype, kinds)
        except Exception:  # noqa: BLE001 - dtype of another library
            continue
    return False


def register_kernel(xp_name: str, name: str, fn) -> None:
    """Register ``fn`` as the kernel ``name`` for the namespace whose ``__name__`` is ``xp_name``."""
    _KERNELS[(xp_name, name)] = fn


def kernel(xp, name: str):
    """Look up the kernel ``name`` for namespace ``xp``; raises ``NotImplementedError`` if absent."""
    try:
        return _KERNELS[(xp.__name__, name)]
    except KeyError:
        raise NotImplementedError(
            f"the backend {xp.__name__!r} has no {name!r} kernel registered; register one with "
            f"tapegrad._backend.register_kernel({xp.__name__!r}, {name!r}, fn)"
        ) from None


def _numpy_scatter_add(shape, dtype, key, values):
    out = np.zeros(shape, dtype=dtype)
    np.add.at(out, key, values)
    return out


register_kernel("numpy", "scatter_add", _numpy_scatter_add)
