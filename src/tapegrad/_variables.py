"""``Variable`` (a mutable tensor: parameters, optimizer state) and the device-resident values
of compiled calls (``DeviceTensor``, of which ``Variable`` is a subclass).

A compiled call's result is a :class:`DeviceTensor` and the Variables it updates hold their
values the same way: the JAX array the program produced (``_device``) and no ``_value`` until
something reads it there; the first read (an eager op, ``numpy()``, printing) makes the
default backend's copy through the ``to_host`` extension point and keeps it. ``shape``,
``dtype`` and ``device`` do not copy, and a compiled call takes the device array itself
(:func:`device_array`). Plain Tensors are untouched by this: their ``_value`` is a slot, read
at the cost it always had (the library's hottest path).

This module sits above the tape: the core knows a Variable only through ``Tensor``'s
protocol (``_variable``, ``trainable``, ``_snapshot``, ``_peek``).
"""
from __future__ import annotations

import contextlib
import sys
import threading
import weakref

import numpy as np

from . import _backend
from ._structural import extensions as _extensions
from ._structural import ops as _structural_ops
from ._tensor import Tensor, TensorShape, _ids, _new, _short, _traced

_variables = weakref.WeakValueDictionary()  # id -> every live Variable (tg.function lifts them)
name_scopes = threading.local()  # .prefix: Variable names' prefix (tapegrad.module.name_scope)


class _Binding(threading.local):
    values = None  # {Variable id: value} read and assigned in this thread instead of the real ones
    created = None  # the Variables this thread created while ``values`` was set


_binding = _Binding()
_UNBOUND = object()


_SLOT = Tensor.__dict__["_value"]  # a Tensor's own storage; a Variable's _value looks at bindings


class DeviceTensor(Tensor):
    """A Tensor whose value is on a JAX device: a ``tg.function`` call's result, or made with
    ``device=`` a JAX device (``tg.asarray(x, device=t.device)``).

    It holds the device array in ``_device`` (``[device array, host copy or None, the
    compiled function's name]``). Reading ``_value`` (an eager op, ``numpy()``, printing)
    makes the default backend's copy on the first read, waiting for the program (its error is
    raised there, naming the function), and keeps it; a compiled call takes the device array
    (:func:`device_array`). ``shape``, ``dtype``, ``ndim``, ``size`` and ``device`` (the JAX
    device) read the device array and make no copy. Otherwise a Tensor as any other.
    """

    __slots__ = ("_device",)

    def _get_value(self):
        try:
            return _SLOT.__get__(self)
        except AttributeError:
            return _host_copy(self)

    def _set_value(self, value):  # a rebinding (x[k] = v): the device array is stale
        _SLOT.__set__(self, value)
        _DEVICE.__set__(self, None)

    _value = property(_get_value, _set_value)

    def _peek(self):
        """The device array when no host copy exists (none is made), else the host value. A
        Variable bound by :func:`bind_variables` has the shape and dtype of its own value."""
        try:
            return _SLOT.__get__(self)
        except AttributeError:
            return _DEVICE.__get__(self)[0]

    @property
    def shape(self) -> TensorShape:
        """The shape, a tuple of ints (a :class:`TensorShape`, with TensorFlow's ``as_list()``)."""
        return TensorShape(self._peek().shape)

    @property
    def dtype(self):
        """The dtype, as tapegrad's (NumPy's) dtype object whatever the backend."""
        dt = self._peek().dtype
        return dt if isinstance(dt, np.dtype) else _backend.np_dtype(dt)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._peek().ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(self._peek().size)

    @property
    def device(self):
        """The JAX device that holds the value (the backend array's, once it was rebound)."""
        a = device_array(self)
        return getattr(self._value if a is None else a, "device", "cpu")


_DEVICE = DeviceTensor.__dict__["_device"]


def _host_copy(t):
    """``t``'s (a DeviceTensor's) ``_value`` when its slot is empty: the host copy of its
    device array, made on the first read (waiting for the program) and kept."""
    try:
        cache = _DEVICE.__get__(t)
    except AttributeError:
        cache = None
    if cache is None:
        raise AttributeError(f"{type(t).__name__!r} object has no attribute '_value'")
    host = cache[1]
    if host is None:
        host = cache[1] = _extensions.to_host(cache[0], cache[2])
    _SLOT.__set__(t, host)
    return host


def _binding_first(get_own, set_own):
    """The ``_value`` property of a Variable, or of a Tensor that :func:`bind_tensors` binds:
    read, this thread's binding of the tensor if it has one, else ``get_own(t)`` (the class's
    own storage; for an empty slot, state a compiled call wrote, the host copy); written, the
    binding if there is one, else ``set_own(t, value)``. The one reader and writer of the
    per-thread binding for single tensors."""
    def get(self):
        values = _binding.values
        if values is not None:
            value = values.get(self._id, _UNBOUND)
            if value is not _UNBOUND:
                return value
        try:
            return get_own(self)
        except AttributeError:  # a DeviceTensor's empty slot: its host copy, made once
            return _host_copy(self)

    def set_(self, value):
        values = _binding.values
        if values is not None and self._id in values:
            values[self._id] = value
        else:
            set_own(self, value)

    return property(get, set_)


def device_array(t):
    """The device array that holds ``t``'s current value, or None: a compiled call's result (or
    a Variable it updated, or one whose value a call put on the device), unless the value was
    rebound since (``x[k] = v``, ``assign``) or a Variable is bound in this thread. Its device
    cache is ``t._device``: ``[device array, host copy or None, function name]``."""
    if not isinstance(t, DeviceTensor):
        return None
    try:
        cache = _DEVICE.__get__(t)
    except AttributeError:  # never set
        return None
    if cache is None:
        return None
    bound = _binding.values
    if bound is not None and t._id in bound:
        return None
    return cache[0] if cache[1] is None else _current(t, cache)


def device_arrays(variables) -> list:
    """``[device_array(v) for v in variables]`` (Variables), looking at this thread's bindings
    once: what a compiled call reads of its state on each call."""
    if _binding.values is not None:
        return [device_array(v) for v in variables]
    arrays = []
    for v in variables:
        try:
            cache = _DEVICE.__get__(v)
        except AttributeError:  # never set: no device copy
            cache = None
        arrays.append(None if cache is None else cache[0] if cache[1] is None
                      else _current(v, cache))
    return arrays


def _current(t, cache):
    """``cache[0]`` if it holds ``t``'s present value (its host value is the host copy, or
    there is none: then no host value exists, as no host copy was made), else None."""
    try:
        host = _SLOT.__get__(t)
    except AttributeError:
        return cache[0]
    return cache[0] if host is cache[1] else None


def on_device(array, name, host=None) -> DeviceTensor:
    """A :class:`DeviceTensor` of ``array`` (a JAX array): an output of the compiled function
    ``name``, or (``host``: its value on the default backend) an array put on a device."""
    t = _new(DeviceTensor)
    t._id = next(_ids)
    _DEVICE.__set__(t, [array, host, name])
    if host is not None:
        _SLOT.__set__(t, host)
    return t


def set_on_device(v, array, host=None, name=None) -> None:
    """Make ``array`` (a device array) Variable ``v``'s value: state a compiled call wrote
    (``host`` None: no host copy until one is read), or the device copy of ``v``'s present
    host value ``host`` that a call took. Inside :func:`bind_variables` of ``v``, a written
    value goes to the binding and a device copy is not kept."""
    bound = _binding.values
    if bound is not None and v._id in bound:
        if host is None:
            bound[v._id] = array
        return
    _set_device(v, array, host, name)


def set_all_on_device(variables, arrays, name) -> None:
    """``set_on_device(v, a, name=name)`` for each Variable ``v`` and array ``a`` (the state a
    compiled call wrote), looking at this thread's bindings once."""
    if _binding.values is not None:
        for v, a in zip(variables, arrays):
            set_on_device(v, a, name=name)
    else:
        for v, a in zip(variables, arrays):
            _set_device(v, a, None, name)


def set_state(variables, arrays) -> None:
    """Give each Variable of ``variables`` its array of ``arrays`` (of its shape and dtype, a
    JAX array or tracer): the state a compiled call or construct computed for the Variables it
    assigns. Inside a trace it goes to this thread's binding (``bind_tensors``), which no other
    thread sees; else it becomes the Variable's value. Not checked and not copied: the caller
    computed it from the Variable's own value."""
    for v, a in zip(variables, arrays):
        v._value = a


def _set_device(v, array, host, name):
    if host is None:
        try:
            cache = _DEVICE.__get__(v)
        except AttributeError:
            cache = None
        if cache is None or cache[1] is not None:  # else the slot is empty already
            try:
                _SLOT.__delete__(v)
            except AttributeError:
                pass
    _DEVICE.__set__(v, [array, host, name])


def _device_refs(v) -> tuple:
    """(references to Variable ``v``'s device cache, to its device array), counted as
    :func:`sole_device_arrays` counts them (for its calibration, ``_SOLE_REFS``)."""
    cache = _DEVICE.__get__(v)
    return sys.getrefcount(cache), sys.getrefcount(cache[0])


def sole_device_arrays(variables, positions) -> tuple:
    """The positions ``k`` among ``positions`` (indices into the list ``variables``) whose
    Variable's device array nothing but the Variable holds: a compiled call that writes
    ``variables[k]`` may then donate that array (let XLA reuse its buffer for the new value).

    A Variable is left out when it has no device array, is bound in this thread, or has a
    host copy (a NumPy view of the buffer may be out: ``numpy()`` returned it), or when
    another Python object references its device cache (a snapshot: ``read_value()``, a
    tape's record) or the array itself: found by reference count, as
    :meth:`Variable.assign_add` decides whether it may update in place (the counts as
    :func:`_device_refs` takes them, calibrated below; the loop computes them the same way)."""
    get, count = _DEVICE.__get__, sys.getrefcount
    bound = _binding.values
    most_cache, most_array = _SOLE_REFS
    out = []
    for k in positions:
        v = variables[k]
        try:
            cache = get(v)
        except AttributeError:
            continue
        if (cache is None or cache[1] is not None or count(cache) > most_cache
                or count(cache[0]) > most_array or (bound is not None and v._id in bound)):
            continue
        out.append(k)
    return tuple(out)


class Variable(DeviceTensor):
    """A mutable tensor: model parameters and optimizer state.

    Args:
        initial_value: array-like, copied.
        trainable: tapes watch a trainable Variable automatically when an op reads it.
        name: a label shown in ``repr`` and in optimizer warnings, prefixed by the enclosing
            ``tg.name_scope``s (``"dense/kernel"``).
        dtype: backend dtype; defaults to the value's (Python floats: the backend's default float).

    A Variable works wherever a Tensor does; its value changes only through ``assign``,
    ``assign_add`` and ``assign_sub``. They rebind the array, or update it in place only when
    nothing else references it (NumPy, by reference count), so a tape or Tensor that holds an
    older value still sees that value. A lazy value (Dask) is evaluated when assigned: held by
    Dask (persisted) for a Dask Variable, computed to NumPy for a NumPy one. Raises
    ``TypeError`` for string or object data.
    """

    __slots__ = ("trainable", "name")
    _variable = True
    _default_float = None  # a subclass may set float32 (tapegrad.compat.tensorflow does)

    # this thread's binding first, then its own: the slot (empty for state a compiled call
    # wrote: its host copy, made once); a rebinding makes a device copy of an earlier value stale
    _value = _binding_first(_SLOT.__get__, DeviceTensor._set_value)

    def __init__(self, initial_value, trainable: bool = True, name: str | None = None, dtype=None):
        value = initial_value._value if isinstance(initial_value, Tensor) else initial_value
        dtype = _backend.float_default(dtype, self._default_float, value)
        value = _backend.asarray(_backend.check_numeric(value, "Variable"), dtype=dtype, copy=True)
        super().__init__(_backend.materialize([value], [value])[0])
        self.trainable = bool(trainable)
        self.name = getattr(name_scopes, "prefix", "") + (
            name if name is not None else f"Variable:{self._id}")
        _variables[self._id] = self
        if _binding.created is not None:
            _binding.created.append(self)

    def assign(self, value):
        """Set the value; ``value`` must have this Variable's shape. Returns the Variable.

        The value is copied and cast to the Variable's dtype. Raises ``ValueError`` on a shape
        mismatch and ``TypeError`` when the cast would lose the kind of the data (a floating
        value for an integer or boolean Variable, a complex one for a real Variable), as
        TensorFlow does.
        """
        v = value._value if isinstance(value, Tensor) else value
        xp = _backend.namespace(self._value)
        self._check_kind(v, "assign")
        return self._set(_backend.asarray(v, dtype=self._value.dtype, copy=True, xp=xp))

    def assign_add(self, delta):
        """``self = self + delta`` (``delta`` broadcastable to the shape); returns the Variable.

        Raises ``TypeError`` as :meth:`assign` does.
        """
        d = self._operand(delta)
        if self._alone(d):
            self._value += d
            return self
        return self._set(self._value + d)

    def assign_sub(self, delta):
        """``self = self - delta`` (``delta`` broadcastable to the shape); returns the Variable.

        Raises ``TypeError`` as :meth:`assign` does.
        """
        d = self._operand(delta)
        if self._alone(d):
            self._value -= d
            return self
        return self._set(self._value - d)

    # --- TensorFlow's sliced and scatter assignments (issue 33) ----------------------------------
    def __getitem__(self, key):
        """``v[key]``: a read of the Variable's elements at ``key`` (a Tensor, recorded by
        tapes as any indexing), which also has TensorFlow's ``assign``, ``assign_add`` and
        ``assign_sub`` of those elements (``v[1:3].assign(value)``, ``v[:, 0].assign(...)``)."""
        out = Tensor.__getitem__(self, key)
        if type(out) is not Tensor:
            return out
        part = _new(_Slice)
        part._value, part._id = out._value, out._id
        part._of, part._key = self, key
        return part

    def scatter_nd_update(self, indices, updates):
        """TensorFlow's ``scatter_nd_update``: set the elements (or slices) at ``indices``.

        ``indices``: integers of shape ``(..., k)``, each row the first ``k`` coordinates of an
        element (``k == ndim``) or a slice (``k < ndim``); ``updates``: shape
        ``indices.shape[:-1] + self.shape[k:]``, cast to the Variable's dtype (as
        :meth:`assign`). With repeated rows, the backend decides which update is stored (NumPy:
        the last). Returns the Variable. Not recorded by tapes (an assignment).

        Raises ``ValueError`` naming the shapes when ``updates`` has another shape or ``k``
        exceeds ``ndim``, ``IndexError`` for an index out of range (checked where the indices
        are concrete; inside ``tg.function`` traced indices out of range are dropped, as JAX
        does), ``TypeError`` as :meth:`assign` for a value that does not fit the dtype."""
        return self._scatter(indices, updates, None, "scatter_nd_update")

    def scatter_nd_add(self, indices, updates):
        """TensorFlow's ``scatter_nd_add``: add ``updates`` at ``indices`` (repeated rows
        accumulate); shapes, result and errors as :meth:`scatter_nd_update`."""
        return self._scatter(indices, updates, 1, "scatter_nd_add")

    def scatter_nd_sub(self, indices, updates):
        """TensorFlow's ``scatter_nd_sub``: subtract ``updates`` at ``indices`` (repeated rows
        accumulate); shapes, result and errors as :meth:`scatter_nd_update`."""
        return self._scatter(indices, updates, -1, "scatter_nd_sub")

    def scatter_update(self, sparse_delta):
        """TensorFlow's ``scatter_update``: set the rows ``sparse_delta.indices`` (integers of
        any shape, along the first axis) to ``sparse_delta.values`` (shape ``indices.shape +
        self.shape[1:]``). ``sparse_delta``: a ``tf.IndexedSlices`` or any object with
        ``values`` and ``indices``. Returns the Variable; errors as
        :meth:`scatter_nd_update`, and ``TypeError`` for an object without those."""
        return self._sparse(sparse_delta, None, "scatter_update")

    def scatter_add(self, sparse_delta):
        """TensorFlow's ``scatter_add``: add ``sparse_delta.values`` to the rows
        ``sparse_delta.indices`` (repeated indices accumulate); see :meth:`scatter_update`."""
        return self._sparse(sparse_delta, 1, "scatter_add")

    def scatter_sub(self, sparse_delta):
        """TensorFlow's ``scatter_sub``: subtract ``sparse_delta.values`` from the rows
        ``sparse_delta.indices`` (repeated indices accumulate); see :meth:`scatter_update`."""
        return self._sparse(sparse_delta, -1, "scatter_sub")

    def _sparse(self, delta, sign, where):
        if not (hasattr(delta, "indices") and hasattr(delta, "values")):
            raise TypeError(f"Variable.{where}: expected a tf.IndexedSlices (an object with "
                            f"'indices' and 'values'), got {type(delta).__name__}; for "
                            f"indices and updates use scatter_nd_{where.split('_')[1]}")
        indices = delta.indices
        indices = indices._value if isinstance(indices, Tensor) else indices
        xp = _backend.namespace(indices)
        indices = xp.asarray(indices)
        return self._scatter(xp.reshape(indices, (*indices.shape, 1)), delta.values, sign, where)

    def _scatter(self, indices, updates, sign, where):
        x = self._value
        xp = _backend.namespace(x)
        idx = _beside(indices._value if isinstance(indices, Tensor) else indices, xp)
        if _backend.np_dtype(idx.dtype).kind not in "iu" or idx.ndim < 1 or idx.shape[-1] > x.ndim:
            raise ValueError(f"Variable.{where}: indices must be integers of shape (..., k) "
                             f"with k <= {x.ndim} (the Variable {self.name!r} has shape "
                             f"{self.shape}); got dtype {_backend.np_dtype(idx.dtype)} and "
                             f"shape {tuple(idx.shape)}")
        k = idx.shape[-1]
        expected = (*idx.shape[:-1], *x.shape[k:])
        u = updates._value if isinstance(updates, Tensor) else updates
        self._check_kind(u, where)
        u = _backend.asarray(_beside(u, xp), dtype=x.dtype, xp=xp)
        if tuple(u.shape) != tuple(expected):
            raise ValueError(f"Variable.{where}: updates of shape {tuple(u.shape)} do not fit "
                             f"indices of shape {tuple(idx.shape)} into Variable {self.name!r} "
                             f"of shape {self.shape}: they must have shape {expected} "
                             "(indices.shape[:-1] + shape[k:])")
        if type(idx) is np.ndarray or isinstance(idx, np.generic):
            bad = (idx < 0) | (idx >= np.asarray(x.shape[:k]))
            if bad.any():
                row = tuple(int(i) for i in idx[np.nonzero(bad)[:-1]][0]) if idx.ndim > 1 \
                    else tuple(int(i) for i in idx)
                raise IndexError(f"Variable.{where}: index {list(row)} is out of range for "
                                 f"Variable {self.name!r} of shape {self.shape}")
        key = tuple(idx[..., j] for j in range(k))
        if sign is None:
            new = _backend.kernel(xp, "scatter_update")(x, key, u)
        else:
            new = x + _backend.kernel(xp, "scatter_add")(
                tuple(x.shape), x.dtype, key, u if sign > 0 else -u)
        return self._set(new)

    def _check_kind(self, v, where):
        kind = _PY_KINDS.get(type(v))
        if kind is None:
            dt = getattr(v, "dtype", None)
            if dt is not None and dt is self._value.dtype:
                return  # the Variable's own dtype: always fits
            kind = (dt.kind if isinstance(dt, np.dtype) else _backend.np_dtype(dt).kind
                    if dt is not None else np.asarray(v).dtype.kind)
        mine = self.dtype.kind
        if _KIND_RANK.get(kind, 0) > _KIND_RANK.get(mine, 3):
            raise TypeError(
                f"Variable.{where}: a value of kind {_KIND_NAMES[kind]} cannot be stored in "
                f"Variable {self.name!r} of dtype {self.dtype} without losing data; cast it "
                f"first (tg.astype(value, {self.dtype}) or tg.round) if that is what you want")

    def _operand(self, delta):
        v = delta._value if isinstance(delta, Tensor) else delta
        self._check_kind(v, "assign_add/assign_sub")
        if isinstance(delta, Tensor):
            return v
        if isinstance(delta, (list, tuple)) or (  # a Python int too: JAX would wrap it around
                isinstance(delta, (np.ndarray, np.generic, int))
                and type(self._value) is not np.ndarray):
            return _backend.asarray(delta, dtype=self._value.dtype,
                                    xp=_backend.namespace(self._value))
        return delta

    def _alone(self, d) -> bool:
        """True if only this Variable holds its NumPy array, so an in-place update by ``d``
        (same shape or scalar, no dtype change) is invisible to every tape and Tensor."""
        v = self._value
        if type(v) is not np.ndarray or sys.getrefcount(v) > _ALONE_REFS or not v.flags.writeable:
            return False
        if type(d) is np.ndarray and d.dtype == v.dtype:  # the common case: a gradient step
            return d.shape in (v.shape, ())
        return (isinstance(d, (np.ndarray, np.generic, int, float))
                and np.shape(d) in (v.shape, ()) and np.result_type(v, d) == v.dtype)

    def _update_rows(self, indices, values, add=True):
        """``self[indices] += values`` (repeated indices accumulate), or with ``add=False``
        ``self[indices] = values`` (indices distinct; an out-of-range index of JAX's padding
        is dropped), on backend arrays of the Variable's library and dtype: an optimizer's
        update of the rows of an ``IndexedSlices`` gradient. In place when only this Variable
        holds its NumPy array (as :meth:`assign_sub`), else a new array."""
        v = self._value
        if type(v) is np.ndarray and sys.getrefcount(v) <= _ALONE_REFS and v.flags.writeable:
            if add:
                np.add.at(v, indices, values)
            else:
                v[indices] = values
            return self
        xp = _backend.namespace(v)
        return self._set(_backend.kernel(xp, "index_add" if add else "scatter_update")(
            v, (indices,), values))

    def _refs(self) -> int:  # the reference count _alone sees when nothing else holds the array
        v = self._value
        return sys.getrefcount(v)

    def _set(self, v):
        old = self._value
        if type(v) is not np.ndarray:  # a lazy value is evaluated: no graph of past steps
            v = _backend.materialize([v], [old])[0]
        if tuple(v.shape) != tuple(old.shape):
            raise ValueError(
                f"cannot assign a value of shape {tuple(v.shape)} to Variable {self.name!r} of "
                f"shape {self.shape}; reshape the value first"
            )
        if v.dtype != old.dtype:
            v = _backend.namespace(old).astype(v, old.dtype)
        self._value = v
        return self

    def read_value(self) -> Tensor:
        """A Tensor holding the current value (a snapshot; later assigns do not change it).

        Like reading the Variable in an op, this is recorded by active tapes, so gradients
        flow from the snapshot back to the Variable.
        """
        return _structural_ops.identity(self)

    def _snapshot(self) -> Tensor:
        if device_array(self) is not None:  # shared: one host copy
            cache = _DEVICE.__get__(self)
            t = _new(DeviceTensor)
            _DEVICE.__set__(t, cache)
            if cache[1] is not None:
                _SLOT.__set__(t, cache[1])
        else:
            t = _new(Tensor)
            t._value = self._value
        t._id = self._id
        return t

    def __repr__(self):
        if _traced(self._value):  # inside tg.function: no value yet, as TensorFlow's repr
            return f"<tg.Variable '{self.name}' shape={self.shape} dtype={self.dtype}, traced>"
        return (f"<tg.Variable '{self.name}' shape={self.shape} dtype={self.dtype}, "
                f"numpy={_short(self)}>")


class _Slice(Tensor):
    """``v[key]`` of a Variable ``v``: the elements read (a Tensor), with TensorFlow's
    assignments of those elements in ``v`` (its ``_UnreadVariable``/strided-slice assign)."""

    __slots__ = ("_of", "_key")

    def assign(self, value):
        """Set ``v[key]`` to ``value`` (broadcast to the slice's shape, cast to ``v``'s dtype as
        :meth:`Variable.assign`); returns the Variable ``v``. Also inside ``tg.function``.
        Raises ``ValueError`` for a value that does not broadcast, ``TypeError`` as
        :meth:`Variable.assign` for one that does not fit the dtype."""
        v = self._of
        x = v._value
        xp = _backend.namespace(x)
        u = value._value if isinstance(value, Tensor) else value
        v._check_kind(u, "assign")
        u = _backend.asarray(_beside(u, xp), dtype=x.dtype, xp=xp)
        shape = tuple(self._value.shape)
        try:
            u = xp.broadcast_to(u, shape)
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"Variable {v.name!r}[{_key_text(self._key)}].assign: a value of "
                             f"shape {tuple(u.shape)} does not broadcast to the slice's shape "
                             f"{shape}") from e
        key = _raw_key(self._key, xp)
        return v._set(_backend.kernel(xp, "scatter_update")(x, key, u))

    def assign_add(self, delta):
        """``v[key] += delta``; returns the Variable ``v``; errors as :meth:`assign`."""
        return self.assign(self + delta)

    def assign_sub(self, delta):
        """``v[key] -= delta``; returns the Variable ``v``; errors as :meth:`assign`."""
        return self.assign(self - delta)


def _beside(a, xp):
    """``a`` (data, an array) as an array that mixes with namespace ``xp``'s: another
    library's array (the default backend's constant inside a JAX trace) via NumPy."""
    if not hasattr(a, "shape"):
        return np.asarray(a)
    if type(a) is np.ndarray or isinstance(a, np.generic) or _backend.namespace(a) is xp:
        return a
    return _backend.to_numpy(a)


def _raw_key(key, xp):
    """An indexing key with Tensors as their arrays, beside ``xp``'s (:func:`_beside`)."""
    if isinstance(key, tuple):
        return tuple(_raw_key(k, xp) for k in key)
    if isinstance(key, Tensor):
        return _beside(key._value, xp)
    return key


def _key_text(key):
    def one(k):
        if isinstance(k, slice):
            return ":".join("" if p is None else str(p) for p in (k.start, k.stop)) + (
                f":{k.step}" if k.step is not None else "")
        return "..." if k is Ellipsis else str(k)
    return ", ".join(map(one, key)) if isinstance(key, tuple) else one(key)


_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}  # a higher kind does not fit a lower one
_PY_KINDS = {bool: "b", int: "i", float: "f", complex: "c"}  # NumPy's kinds of Python scalars
_KIND_NAMES = {"b": "bool", "u": "unsigned integer", "i": "integer", "f": "floating",
               "c": "complex"}



def live_variables() -> list:
    """Every Variable that is still referenced, in no particular order."""
    while True:
        try:
            return list(_variables.values())
        except RuntimeError:  # another thread created one meanwhile: "dictionary changed size"
            pass


def visible_variables() -> list:
    """The Variables this thread works on: inside :func:`bind_variables`, those bound and those
    created in the block; otherwise every live Variable."""
    if _binding.created is None:  # no bind_variables (bind_tensors alone keeps every one)
        return live_variables()
    return [v for i in _binding.values if (v := _variables.get(i)) is not None] + list(
        _binding.created)


class _Scope:
    """What :func:`bind_variables` yields: ``values`` ({Variable id: its value in the block})
    and ``created`` (the Variables created in the block, in order)."""

    def __init__(self, values, created):
        self.values, self.created = values, created


_bound_classes = {}  # a Tensor class -> its subclass that reads this thread's bindings first
_swaps = {}  # id(tensor) -> [tensor, its own class, bind_tensors blocks binding it]
_swap_lock = threading.Lock()


def _bound_class(cls):
    """The subclass of ``cls`` (a Tensor class that is no Variable) whose ``_value`` and
    ``_peek`` read this thread's binding of the tensor first, then ``cls``'s own storage."""
    bound = _bound_classes.get(cls)
    if bound is not None:
        return bound
    own = next(k.__dict__["_value"] for k in cls.__mro__ if "_value" in k.__dict__)
    own_peek = cls._peek

    def peek(self):
        values = _binding.values
        if values is not None and self._id in values:
            return values[self._id]
        return own_peek(self)

    def reduce_ex(self, protocol):  # copied or pickled as a ``cls`` (of the value read here)
        return (_unbound, (cls,), *object.__reduce_ex__(self, protocol)[2:])

    bound = type(cls.__name__, (cls,), {"__slots__": (), "_value": _binding_first(own.__get__,
                                                                                  own.__set__),
                                        "_peek": peek, "__reduce_ex__": reduce_ex,
                                        "__module__": cls.__module__, "__doc__": cls.__doc__})
    return _bound_classes.setdefault(cls, bound)


def _unbound(cls):
    """A new ``cls`` object without ``__init__`` (a bound tensor copied or unpickled)."""
    return _new(cls)


@contextlib.contextmanager
def bind_tensors(pairs):
    """Within the block and in this thread only, each Tensor of ``pairs`` (``(Tensor,
    value)``) reads ``value`` (a trace's value: a tracer); other threads read the tensor's
    own value throughout, so a trace never changes what a tensor holds (issue 30: tg.vmap's
    captured constants). Unlike :func:`bind_variables` it leaves which Variables this thread
    sees (``visible_variables``) and where new ones are logged as they were.

    A plain Tensor's ``_value`` is a slot, read at no extra cost; while a block binds it, its
    class is a subclass (:func:`_bound_class`) whose ``_value`` looks at the binding first, in
    every thread, until the last block binding it (in any thread) ends. Variables read their
    bindings always. Blocks nest; yields the binding dict ({tensor id: value})."""
    pairs = list(pairs)
    plain = [t for t, _ in pairs if not t._variable]
    with _swap_lock:
        for t in plain:
            entry = _swaps.get(id(t))
            if entry is None:
                _swaps[id(t)] = [t, type(t), 1]
                t.__class__ = _bound_class(type(t))
            else:
                entry[2] += 1
    outer = _binding.values
    values = dict(outer) if outer is not None else {}
    mine = {t._id: value for t, value in pairs}
    values.update(mine)
    _binding.values = values
    try:
        yield values
    finally:
        _binding.values = outer
        if outer is not None:  # assignments to outer bindings stay visible outside
            for i in outer:
                if i not in mine:
                    outer[i] = values[i]
        with _swap_lock:
            for t in plain:
                entry = _swaps[id(t)]
                entry[2] -= 1
                if entry[2] == 0:
                    del _swaps[id(t)]
                    t.__class__ = entry[1]


@contextlib.contextmanager
def bind_variables(pairs):
    """Within the block and in this thread only, each Variable of ``pairs`` (``(Variable,
    value)``) reads ``value`` and its assignments change only that binding; other threads see
    the real values throughout. Yields a :class:`_Scope`. Blocks nest (an inner binding
    shadows an outer one). tg.function traces inside one, so it never changes what another
    thread's Variables hold."""
    outer_values, outer_created = _binding.values, _binding.created
    values = dict(outer_values) if outer_values is not None else {}
    mine = {v._id: value for v, value in pairs}
    values.update(mine)
    scope = _Scope(values, [])
    _binding.values, _binding.created = values, scope.created
    try:
        yield scope
    finally:
        _binding.values, _binding.created = outer_values, outer_created
        if outer_created is not None:
            outer_created.extend(scope.created)
        if outer_values is not None:  # assignments to outer bindings stay visible outside
            for i in outer_values:
                if i not in mine:
                    outer_values[i] = values[i]



_ALONE_REFS = Variable(np.zeros(1))._refs()  # calibrated: counting differs across CPython versions


def _calibrate_sole_refs():
    """The counts :func:`_device_refs` gives for a Variable whose device cache and array
    only it holds (counting differs across CPython versions)."""
    v = Variable(np.zeros(1))
    set_on_device(v, np.zeros(1))  # any object does: only the counts are read
    return _device_refs(v)


_SOLE_REFS = _calibrate_sole_refs()
