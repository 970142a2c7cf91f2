"""Backend resolution: the array namespace of a backend array, dtype helpers, extra kernels.

NumPy 2 is Array API compliant in its main namespace, so NumPy arrays resolve to ``numpy``
itself; any other array resolves through ``array_api_compat.array_namespace``. The result is
cached per array class, so resolution costs one dict lookup on the hot path.

Kernels the standard lacks (scatter-add) are registered per namespace with
:func:`register_kernel` and looked up with :func:`kernel`; a backend without its own kernel
gets the NumPy one through a round trip (correct, not fast). Dask's, CuPy's and JAX's
kernels (``tapegrad._kernels``) are loaded when an array of theirs first appears; a kernel
that only fixes a backend's behaviour (JAX's ``eigh`` reading the lower triangle) is looked up
with :func:`own_kernel`, without a round trip. A lazy backend (Dask) also has a
``materialize`` kernel, behind :func:`materialize` and :func:`is_lazy`.

The *default namespace* holds the arrays made from Python values and NumPy arrays
(``tg.constant``, ``tg.Variable``, creation functions). It is NumPy unless set with
:func:`set_default_namespace` or the environment variable ``TAPEGRAD_ARRAY_BACKEND`` (a module
name such as ``array_api_strict`` or ``cupy``), read at import.
"""
from __future__ import annotations

import importlib
import os

import numpy as np

from . import config

_SCALARS = (bool, int, float, complex)
_NAMESPACES: dict[type, object] = {np.ndarray: np}
_KERNELS: dict[tuple[str, str], object] = {}


def namespace(*values):
    """Return the array namespace of the first non-NumPy backend array in ``values``.

    Python scalars are skipped, and NumPy arrays mix into another backend's computation (its
    functions take them, as they take Python scalars: a constant NumPy array meets JAX tracers
    in ``tg.function``); NumPy is returned when every value is a NumPy array or a scalar (or
    there are none). Raises ``TypeError`` if an array's library is not an Array API library.
    """
    found = np
    for v in values:
        if type(v) is np.ndarray:
            continue
        if isinstance(v, _SCALARS) or v is None:
            continue
        if isinstance(v, (list, tuple)):
            return _default
        cls = type(v)
        xp = _NAMESPACES.get(cls)
        if xp is None:
            xp = _resolve(v)
        if xp is not np:
            return xp
    return found


def _resolve(value):
    cls = type(value)
    if isinstance(value, (np.generic, np.ndarray)):  # subclasses too (JAX's constant literals)
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
    _load_kernels(xp)
    return xp


def asarray(value, dtype=None, xp=None, copy=None):
    """Convert ``value`` (scalar, nested sequence, backend array) to a backend array.

    Without ``dtype``, Python floats become the backend's default float (float64 on NumPy),
    Python ints its default integer. ``xp`` picks the backend (default: ``value``'s own for a
    non-NumPy backend array, else the default namespace).
    """
    if xp is None:
        xp = namespace(value)
        if xp is np and _default is not np:
            xp = _default
    if (xp is not np and hasattr(value, "__dlpack__") and type(value) is not np.ndarray
            and namespace(value) is not xp):  # another library's array (CuPy's): via the host
        value = to_numpy(value)
    if xp is not np and isinstance(value, (np.ndarray, np.generic)):
        if dtype is None:
            dtype = value.dtype  # a NumPy value keeps its dtype on another backend
        value = value.tolist() if value.ndim == 0 else value
    if isinstance(value, (np.generic, float)) and dtype is None and xp is not np:
        value = value.item() if isinstance(value, np.generic) else value
    return xp.asarray(value, dtype=xp_dtype(xp, dtype), copy=copy)


def default_namespace():
    """The namespace that holds arrays made from Python values and NumPy arrays."""
    return _default


def set_default_namespace(xp) -> None:
    """Make ``xp`` (an Array API namespace module, or its name) the default namespace."""
    global _default
    if isinstance(xp, str):
        xp = _import_namespace(xp)
    _default = xp


def _import_namespace(name: str):
    if name in ("numpy", "np", ""):
        return np
    try:
        module = importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"TAPEGRAD_ARRAY_BACKEND={name!r}: cannot import it ({e}); install it "
                          "or unset the variable") from e
    if name.split(".")[0] == "jax":  # float64, as on every other backend
        config.configure_jax(config.jax_module())
    if not hasattr(module, "__array_api_version__"):
        import array_api_compat

        module = array_api_compat.array_namespace(module.asarray([0]))
    _NAMESPACES.setdefault(type(module.asarray([0])), module)
    _load_kernels(module)
    return module


def np_dtype(dtype):
    """The NumPy dtype with the same name as a backend ``dtype`` (tapegrad's dtype objects)."""
    if isinstance(dtype, np.dtype):
        return dtype
    found = _NP_DTYPES.get(dtype)
    if found is None:
        found = _NP_DTYPES[dtype] = np.dtype(_dtype_name(dtype))
    return found


_NP_DTYPES: dict = {}


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
    """Look up the kernel ``name`` for namespace ``xp``; without one, the NumPy kernel wrapped in
    a round trip through NumPy. Raises ``NotImplementedError`` if neither exists."""
    try:
        return _KERNELS[(xp.__name__, name)]
    except KeyError:
        pass
    if ("numpy", name) in _KERNELS:
        return _via_numpy(xp, _KERNELS[("numpy", name)])
    raise NotImplementedError(
        f"the backend {xp.__name__!r} has no {name!r} kernel registered; register one with "
        f"tapegrad._backend.register_kernel({xp.__name__!r}, {name!r}, fn)")


def is_lazy(value) -> bool:
    """True for an array of a lazy backend (one with a ``materialize`` kernel: Dask)."""
    if type(value) is np.ndarray or isinstance(value, _SCALARS) or value is None:
        return False
    return (namespace(value).__name__, "materialize") in _KERNELS


def materialize(values, like=None) -> list:
    """``values`` (a list of backend arrays) with the lazy ones evaluated, in one graph per
    library, so that work they share runs once; other values are returned as they are.

    like: a list as long as ``values``, or None. A lazy value whose ``like`` entry is an array
    of its own library stays in it, evaluated and held (Dask: ``persist``; its graph then
    holds no trace of the computation that made it); any other lazy value becomes a NumPy
    array (Dask: ``compute``). ``Variable.assign`` and the optimizers call this, so that a
    Variable never holds a graph of past steps.
    """
    groups = {}
    for i, v in enumerate(values):
        if is_lazy(v):
            groups.setdefault(namespace(v).__name__, []).append(i)
    out = list(values)
    for name, idx in groups.items():
        keep = [like is not None and namespace(like[i]) is namespace(values[i]) for i in idx]
        for i, a in zip(idx, _KERNELS[(name, "materialize")]([values[i] for i in idx], keep)):
            out[i] = a
    return out


_KERNEL_MODULES = {"array_api_compat.dask.array": "dask", "dask.array": "dask",
                   "cupy": "cupy", "array_api_compat.cupy": "cupy", "jax.numpy": "jax"}


def _load_kernels(xp) -> None:
    """Register the kernels of Dask, CuPy or JAX (``tapegrad._kernels``) for ``xp`` if it is
    one."""
    library = _KERNEL_MODULES.get(getattr(xp, "__name__", None))
    if library is None or (xp.__name__, "_loaded") in _KERNELS:
        return
    if library == "dask":
        from ._kernels.dask import KERNELS
    elif library == "jax":
        from ._kernels.jax import KERNELS
    else:
        from ._kernels.cupy import KERNELS
    for name, fn in KERNELS.items():
        _KERNELS.setdefault((xp.__name__, name), fn)
    _KERNELS[(xp.__name__, "_loaded")] = True


def own_kernel(xp, name: str):
    """The kernel ``name`` registered for namespace ``xp`` itself, or None (no NumPy fallback)."""
    return None if xp is np else _KERNELS.get((xp.__name__, name))


def to_numpy(a):
    """A backend array (or anything array-like) as a NumPy array."""
    if isinstance(a, (np.ndarray, np.generic)) or not hasattr(a, "__dlpack__"):
        return np.asarray(a)
    try:
        return np.from_dlpack(a)
    except (TypeError, RuntimeError, BufferError):  # not on the host (CuPy), or no DLPack
        pass
    try:  # a copy to the host, by DLPack's device argument (Array API 2023.12)
        return np.from_dlpack(a, device="cpu", copy=True)
    except (TypeError, RuntimeError, BufferError, ValueError, NotImplementedError):
        get = getattr(a, "get", None)  # CuPy's explicit copy to the host
        return get() if callable(get) and not isinstance(a, dict) else np.asarray(a)


def as_jax(v):
    """``v`` (an array of any backend, a JAX tracer, a NumPy or Python scalar) as JAX takes
    it: JAX's arrays and tracers as they are, others as JAX arrays of their dtype through
    NumPy (``jax.numpy.asarray``: a Python number gives JAX's weakly typed scalar). Float64
    stays float64 in 64-bit mode only: call it inside ``config.x64_scope`` (or a
    ``tg.function`` trace). Raises ``ImportError`` without JAX."""
    jax = config.jax_module()
    if isinstance(v, jax.Array):  # JAX's tracers are jax.Array instances too
        return v
    if not isinstance(v, (np.ndarray, np.generic, int, float, complex)):
        v = to_numpy(v)
    return jax.numpy.asarray(v)


def mixable_with_jax(values, copies):
    """``values`` (an op's inputs inside a JAX trace) with the arrays of libraries other than
    NumPy and JAX, and NumPy's subclasses (JAX's literals), as NumPy arrays, a copy through
    the host: JAX takes NumPy constants but not, say, array_api_strict's or CuPy's (a Tensor
    of another default backend that a ``tg.function`` closes over), and those libraries do
    not take NumPy's arrays, which gradient rules make in a trace; so inside one, constants
    are NumPy's. ``values`` itself when none is converted. ``copies`` (``{id(array): (array,
    copy)}``, kept for the trace) gives each array one copy, so the program holds it once."""
    out = None
    for k, v in enumerate(values):
        if (type(v) is np.ndarray or isinstance(v, np.generic)
                or not hasattr(v, "__array_namespace__")
                or not isinstance(v, np.ndarray) and namespace(v).__name__.startswith("jax")):
            continue
        if id(v) not in copies:
            copies[id(v)] = (v, np.asarray(to_numpy(v)))  # v kept: its id is not reused
        out = list(values) if out is None else out
        out[k] = copies[id(v)][1]
    return values if out is None else out


def _via_numpy(xp, fn):
    def kernel_via_numpy(*args, **kwargs):
        return xp.asarray(fn(*[_numpy_arg(a) for a in args], **kwargs))

    return kernel_via_numpy


def _numpy_arg(a):
    """Backend arrays and dtypes (also inside tuples and lists) as NumPy's, for a round trip."""
    if isinstance(a, (tuple, list)):
        return type(a)(_numpy_arg(x) for x in a)
    if hasattr(a, "__dlpack__"):
        return to_numpy(a)
    if a is None or isinstance(a, (*_SCALARS, slice, str, np.generic, np.ndarray, np.dtype)) \
            or a is Ellipsis or isinstance(a, type):
        return a
    try:
        return np_dtype(a)
    except TypeError:
        return a


def _numpy_scatter_add(shape, dtype, key, values):
    out = np.zeros(shape, dtype=dtype)
    np.add.at(out, key, values)
    return out


register_kernel("numpy", "scatter_add", _numpy_scatter_add)


def _numpy_index_add(x, key, values):
    # a copy of x with values added at key (repeats accumulate): an optimizer's row update
    out = np.array(x, copy=True)
    np.add.at(out, key, values)
    return out



register_kernel("numpy", "index_add", _numpy_index_add)


def xp_dtype(xp, dtype):
    """``dtype`` as namespace ``xp``'s own dtype object (``None`` stays ``None``).

    Accepts a dtype of ``xp``, a NumPy dtype or scalar type (``tg.float32``), or a name such as
    ``"float32"``. Raises ``TypeError`` for a dtype ``xp`` does not have.
    """
    if dtype is None:
        return dtype
    if xp is np:
        return dtype if isinstance(dtype, (np.dtype, type, str)) else np_dtype(dtype)
    name = dtype if isinstance(dtype, str) else _dtype_name(dtype)
    try:
        return getattr(xp, name)
    except AttributeError:
        raise TypeError(f"the backend {xp.__name__!r} has no dtype {name!r}") from None


def _dtype_name(dtype) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype).rsplit(".", 1)[-1].strip("'>")  # another library's dtype object


def check_numeric(value, where):
    """``value`` if it holds numbers (booleans, integers, floating, complex); raises
    ``TypeError`` for string and object data, naming ``where`` (``"constant"``, ``"Variable"``)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:  # Python data: ask NumPy what it is
        try:
            dtype = np.asarray(value).dtype
        except ValueError:  # ragged nested lists
            dtype = np.dtype(object)
    kind = getattr(dtype, "kind", "f")
    if kind in "US":
        raise TypeError(
            f"{where}: the value has dtype {dtype} (not numeric); tensors hold booleans, "
            "integers or floating numbers only. Convert strings to numbers (e.g. a vocabulary "
            "index) first")
    if kind in "OVMm":
        raise TypeError(
            f"{where}: the value has no numeric dtype (got {dtype}: None, objects or ragged "
            "lists); give numbers, a nested list of equal lengths, or an array")
    return value


def float_default(dtype, default_float, *values):
    """``dtype``, or ``default_float`` when ``dtype`` is None and one of ``values`` is Python
    float data (a float, nested lists holding one); a value with a dtype (an array, a NumPy
    scalar) keeps its own, as in TensorFlow."""
    if dtype is not None or default_float is None:
        return dtype
    for v in values:
        if v is not None and not hasattr(v, "dtype") and np.asarray(v).dtype.kind == "f":
            return default_float
    return None


_default = np
if os.environ.get("TAPEGRAD_ARRAY_BACKEND"):
    set_default_namespace(os.environ["TAPEGRAD_ARRAY_BACKEND"])

