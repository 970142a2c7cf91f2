"""``Tensor``: an immutable wrapper of one backend array.

A Tensor holds its backend array in ``_value`` and a process-unique integer ``_id``; tapes
trace tensors by that id, so a Tensor never points to the operation that made it and no
reference cycle links tensors and tape records. Python's operators, indexing, iteration, the
conversions (``bool``, ``int``, ``float``, ``complex``, ``format``) and the Array API methods
(``__array_namespace__``, ``__dlpack__``) are attached by ``tapegrad.ops._operators``, and
``register_hook`` calls ``tapegrad._hooks`` (the core knows no op).

Tensors never change under a tape: ``constant`` (``tapegrad.ops.creation``) copies its value
and ``numpy()`` returns a read-only view. ``Variable`` and the device-resident
``DeviceTensor`` are subclasses defined above the tape (``tapegrad._variables``); the core
knows a Variable by the protocol below (``_variable``, ``trainable``, ``_snapshot``) and
reads any tensor's array where it is with ``_peek``.
"""
from __future__ import annotations

import itertools

import numpy as np

from . import _backend, config
from ._structural import extensions as _extensions

_ids = itertools.count(1)
_SCALARS = (bool, int, float, complex)


class TensorShape(tuple):
    """The shape of a Tensor (TensorFlow's ``tf.TensorShape``): a tuple of dimensions (ints, or
    None for unknown) with TensorFlow's ``as_list()``, ``rank`` / ``ndims`` and
    ``assert_is_compatible_with``. It equals the plain tuple of the same dimensions (and slices
    to plain tuples). ``TensorShape(None)`` (unknown rank) raises ``ValueError``."""

    def __new__(cls, dims=()):
        if type(dims) is tuple:  # an array's shape: as it is (the fast path of Tensor.shape)
            return tuple.__new__(cls, dims)
        if dims is None:
            raise ValueError("tf.TensorShape(None) (unknown rank) is not supported by tapegrad; "
                             "give the dimensions, None for an unknown one")
        dims = (dims,) if isinstance(dims, (int, np.integer)) else dims
        return super().__new__(cls, (None if d is None else int(d) for d in dims))

    def as_list(self) -> list:
        """The dimensions as a list."""
        return list(self)

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self)

    ndims = rank

    def is_compatible_with(self, other) -> bool:
        """True if ``other`` has this rank and each pair of dimensions agrees (None fits all)."""
        other = TensorShape(other)
        return len(self) == len(other) and all(a is None or b is None or a == b
                                               for a, b in zip(self, other))

    def assert_is_compatible_with(self, other) -> None:
        """Raise ``ValueError`` unless :meth:`is_compatible_with` ``other``."""
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {tuple(self)} and {tuple(TensorShape(other))} are "
                             "incompatible")


class Tensor:
    """An immutable n-dimensional array that tapes can differentiate through.

    Wraps one backend array (NumPy by default). Create one with ``tg.constant`` or
    ``tg.convert_to_tensor``; ops return Tensors. ``shape`` is a tuple of ints, ``dtype`` the
    backend dtype. Operators ``+ - * / // % ** @``, unary ``-``, ``abs``, comparisons (boolean
    results, never differentiable) and ``[]`` indexing are tapegrad ops.

    NumPy functions on a Tensor (``__array_ufunc__``, attached by ``tapegrad.ops``): the ufuncs
    behind Python operators (``np.multiply``, ``ndarray * tensor``...) are tapegrad ops and
    return Tensors; any other NumPy function (``np.sin``, ``np.sum``) computes eagerly on the
    value and returns a NumPy array that no tape sees, as TensorFlow's tensors do; use
    ``tg.sin``, ``tg.sum`` for a differentiable result. Converting a Tensor that a recording
    tape traces (or that a forward accumulator gives a tangent) to NumPy warns
    (:class:`~tapegrad.errors.TapeLeakWarning`).
    """

    __slots__ = ("_value", "_id", "__weakref__")
    __hash__ = None  # == is elementwise, as in TensorFlow 2 and NumPy
    _variable = False  # a Variable (``tapegrad._variables``): tapes may watch it when read

    def __init__(self, value):
        self._id = next(_ids)
        self._value = value

    # --- array facts -------------------------------------------------------------------------
    @property
    def shape(self) -> TensorShape:
        """The shape, a tuple of ints (a :class:`TensorShape`, with TensorFlow's ``as_list()``)."""
        return TensorShape(self._value.shape)

    @property
    def dtype(self):
        """The dtype, as tapegrad's (NumPy's) dtype object whatever the backend."""
        dt = self._value.dtype
        return dt if isinstance(dt, np.dtype) else _backend.np_dtype(dt)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._value.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(self._value.size)

    @property
    def id(self) -> int:
        """A process-unique int naming this tensor in tape records (``OperationView.input_ids``)."""
        return self._id

    @property
    def device(self):
        """The device of the backend array (``"cpu"`` on NumPy); for a compiled call's result
        (:class:`DeviceTensor`), the JAX device that holds it."""
        return getattr(self._value, "device", "cpu")

    def _peek(self):
        """The backend array where it is, for its shape and dtype (a device-resident value's
        device array: no host copy is made)."""
        return self._value

    def _snapshot(self):
        """What a record keeps of this tensor: itself (it never changes; a Variable's value)."""
        return self

    def register_hook(self, fn):
        """Call ``fn(gradient)`` when this tensor's gradient is computed; it may return a
        replacement. :func:`tapegrad._hooks.register_hook` (its arguments, result and errors)."""
        return _extensions.register_hook(self, fn)

    def numpy(self) -> np.ndarray:
        """The value as a read-only NumPy array (copied from the device for other backends).

        Writing into it raises ``ValueError`` (tensors never change under a tape); take
        ``.copy()`` for a writeable array. Inside a gradient function this marks the gradient
        once-differentiable (see ``NotDifferentiableError``): raw arrays carry no derivative.
        """
        _extensions.raw_access(self)
        v = self._value
        a = v.view() if type(v) is np.ndarray else np.asarray(_backend.to_numpy(v))
        a.flags.writeable = False
        return a

    def __array__(self, dtype=None, copy=None):
        """NumPy's conversion (``np.asarray(t)``: read-only; ``np.array(t)``: a copy).

        Warns (``TapeLeakWarning``) once per call site in the user's code when a recording
        tape traces this tensor (a trainable Variable: when the tape watches accessed
        variables) or a ``ForwardAccumulator`` gives it a tangent: the NumPy result carries no
        gradient and no JVP. A conversion inside a library (SciPy) is reported at the user's
        line that called the library, naming the library's line too.
        """
        if _extensions.conversion is not None:
            _extensions.conversion(self)
        a = self.numpy()
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        return np.array(a, copy=True) if copy else a

    # --- Python protocol ---------------------------------------------------------------------
    def __repr__(self):
        if _traced(self._value):
            return f"<tg.Tensor: shape={self.shape}, dtype={self.dtype}, traced>"
        return f"<tg.Tensor: shape={self.shape}, dtype={self.dtype}, numpy={_short(self)}>"

    def __str__(self):
        """The value as NumPy prints it; inside ``tg.function``, where the value is symbolic,
        TensorFlow's description of a graph tensor, ``Tensor("traced", shape=(3,),
        dtype=float32)`` (Python's ``print`` then prints it once per trace; ``tg.print``
        prints values when the compiled function runs)."""
        if _traced(self._value):
            return f'Tensor("traced", shape={self.shape}, dtype={self.dtype})'
        return str(self.numpy())


_new = object.__new__


def _wrap(value) -> Tensor:
    """``Tensor(value)`` without the cost of ``__init__`` (the ops' hot path)."""
    t = _new(Tensor)
    t._value = value
    t._id = next(_ids)
    return t


def wrapped(value) -> Tensor:
    """``value`` itself if it is a Tensor, else ``value`` (a backend array or a JAX tracer:
    neither converted nor copied) wrapped as a Tensor. To convert data (Python scalars and
    sequences, NumPy arrays under another default backend) use ``ops.convert_to_tensor``."""
    return value if isinstance(value, Tensor) else Tensor(value)


def _traced(value) -> bool:
    """Whether ``value`` is a JAX tracer (symbolic, inside ``tg.function`` or a transform)."""
    jax = config.loaded_jax()
    return jax is not None and isinstance(value, jax.core.Tracer)


def _short(t) -> str:
    if _backend.is_lazy(t._value):  # printing does not compute
        return repr(t._value)
    return np.array2string(t.numpy(), threshold=20, edgeitems=3, separator=", ").replace("\n", "")


def _raw(a):
    """A non-Tensor op input as a backend value: scalars stay, sequences and (under another
    default backend) NumPy arrays go to the default namespace, backend arrays pass."""
    if isinstance(a, _SCALARS) or a is None:
        return a
    if isinstance(a, (list, tuple, np.ndarray, np.generic)):
        if isinstance(a, (list, tuple)) or _backend.default_namespace() is not np:
            return _backend.asarray(a)
    elif getattr(a, "_dropped", False):  # a placeholder of a record that did not keep a tensor
        a.numpy()  # raises, saying which op and what to do
    elif getattr(a, "_sparse", False):  # IndexedSlices (ops.indexing): its dense array
        return a._dense()._value
    return a


