"""Indexing: ``Tensor.__getitem__`` and ``__setitem__``, ``take``, ``take_along_axis``, and the
scatter-add behind their gradients.

All gathers are one op type, ``GetItem`` (``x[key]`` with NumPy indexing semantics: ints,
slices, ``None``, ``Ellipsis``, integer arrays and boolean masks). Its gradient is
``ScatterAdd``: the cotangent added into zeros of the input's shape at ``key``, accumulating
repeated indices (backend kernel ``scatter_add``, ``numpy.add.at`` on NumPy). The gradient of
``ScatterAdd`` is ``GetItem`` with the same key, so gradients of any order exist.
Tensors inside a key are replaced by their backend arrays before the key is stored.

``x[key] = v`` is the op type ``TensorScatterUpdate`` (TensorFlow's name for the out-of-place
update ``tf.tensor_scatter_nd_update``; here with the same keys as ``GetItem``): a new tensor,
``x`` with ``x[key]`` replaced by ``v``, to which the Python object ``x`` is then rebound.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _backend
from .. import _records
from .._backend import kernel as _kernel
from .._backend import namespace as _ns
from .._backend import register_kernel as _register_kernel
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .._pytree import register_pytree_node
from .._tensor import Tensor
from .._variables import Variable
from ._jvp import linear_jvp
from .creation import convert_to_tensor, zeros_like
from .elementwise import where
from .manipulation import concat, reshape
from .reductions import _sum_to

_IDX = np.asarray
_KEY_SAMPLES = [
    Sample((5, 3), key=(_IDX([0, 2, 0, 4]),)),  # repeated indices accumulate
    Sample((4, 5), key=(slice(1, None, 2), Ellipsis, None)),
    Sample((4, 5), key=(2, slice(None, None, -1))),
    Sample((3, 4), key=(_IDX([[0, 1], [2, 0]]), _IDX([1, 1]))),
    Sample((3, 4), key=(_IDX([[True, False, True, True]] * 3),)),  # boolean mask
    Sample((3, 4), key=(slice(None), _IDX([3, 3, 0]))),
    Sample((2, 3, 4), key=(_IDX([1, 1]), slice(None), _IDX([0, 3]))),
    Sample((), key=()), Sample((), key=(None,)),
    Sample((0, 3), key=(slice(None), 1)), Sample((3,), key=(_IDX([], dtype=np.intp),)),
    Sample((1, 1), key=(0,)),
]


def _key_part(k):
    if isinstance(k, Tensor):
        return k._value
    if isinstance(k, list):
        return np.asarray(k)
    return k


def _as_key(key):
    """``key`` with Tensors and lists replaced by backend arrays."""
    if type(key) is tuple:
        for k in key:
            if isinstance(k, (Tensor, list)):
                return tuple(_key_part(k) for k in key)
        return key
    return _key_part(key)


@primitive("GetItem", samples=_KEY_SAMPLES)
def _getitem(x, *, key):
    if type(x) is np.ndarray:  # a NumPy constant indexed by another backend's array (a tracer)
        xp = _ns(*[k for k in (key if type(key) is tuple else (key,)) if hasattr(k, "shape")])
        x = x if xp is np else xp.asarray(x)
    if _clamps(x):
        _check_bounds(x, key)
    try:
        return x[key]
    except (IndexError, NotImplementedError) as e:  # Dask: NotImplementedError
        portable = None if isinstance(x, (np.ndarray, np.generic)) else _portable_key(x, key)
        if portable is not None:
            try:
                return x[portable]
            except (IndexError, NotImplementedError):
                pass
            try:  # a backend's own pointwise indexing (Dask's vindex), with NumPy indices
                zeros = np.lib.stride_tricks.as_strided(np.zeros(1), x.shape, (0,) * x.ndim)
                return _kernel(_ns(x), "getitem_points")(x, _portable_key(zeros, key))
            except NotImplementedError:
                pass
        raise _index_error(x, key, e) from None


def _index_error(x, key, reason) -> IndexError:
    return IndexError(f"tensor index {_describe(key)} is invalid for a tensor of shape "
                      f"{tuple(x.shape)}: {reason}")


def _clamps(x) -> bool:
    """True for an array of a backend that clamps out-of-bounds indices instead of raising
    (JAX, whose indexing compiles to gathers and scatters)."""
    return type(x) is not np.ndarray and _ns(x).__name__ == "jax.numpy"


def _check_bounds(x, key) -> None:
    """Raise ``IndexError`` (as NumPy does) for an index array that is neither integer nor
    boolean, and for an integer, or an integer array with known values, outside its axis of
    ``x``; the values of JAX tracers are not known, not checked."""
    from jax.core import Tracer

    parts = key if type(key) is tuple else (key,)

    def is_mask(k):
        return hasattr(k, "dtype") and _backend.np_dtype(k.dtype) == np.bool_

    def width(k):  # the number of axes of x that k indexes
        if k is None or k is Ellipsis or isinstance(k, (bool, np.bool_)):
            return 0
        return k.ndim if is_mask(k) else 1

    axis, ndim = 0, len(x.shape)
    for k in parts:
        if k is Ellipsis:
            axis += ndim - sum(width(p) for p in parts)
            continue
        w = width(k)
        if w != 1 or isinstance(k, slice) or is_mask(k) or axis >= ndim:
            axis += w  # too many indices: the backend itself raises
            continue
        n = x.shape[axis]
        if hasattr(k, "dtype") and _backend.np_dtype(k.dtype).kind not in "iu":  # JAX: TypeError
            raise _index_error(x, key, "arrays used as indices must be of integer (or boolean) "
                                       "type")
        if isinstance(k, (int, np.integer)):
            lo = hi = int(k)
        elif hasattr(k, "dtype") and not isinstance(k, Tracer) and math.prod(k.shape) > 0:
            xp = _ns(k)
            lo, hi = int(xp.min(k)), int(xp.max(k))
        else:
            axis += 1
            continue
        if lo < -n or hi >= n:
            raise _index_error(x, key, f"index {hi if hi >= n else lo} is out of bounds for "
                                       f"axis {axis} with size {n}")
        axis += 1


def _portable_key(x, key):
    """A NumPy-style ``key`` rewritten in the forms the Array API guarantees on every backend:
    index arrays of the backend's own kind, a trailing ``...`` where NumPy implies one, and,
    when index arrays are mixed with slices or ints, one integer array per axis (NumPy's
    placement of the advanced-index axes is reproduced). None if it cannot be rewritten."""
    xp = _ns(x)
    parts = list(key) if type(key) is tuple else [key]
    for i, k in enumerate(parts):
        if isinstance(k, (np.ndarray, np.generic, list)):
            parts[i] = xp.asarray(k)
    arrays = [k for k in parts if hasattr(k, "dtype")]
    if not arrays:  # basic indexing: only the implicit trailing ellipsis is missing
        if not any(k is Ellipsis for k in parts):
            parts.append(Ellipsis)
        return tuple(parts)
    if len(parts) == 1 and (len(x.shape) == 1 or (
            _backend.np_dtype(parts[0].dtype) == np.bool_ and parts[0].ndim == len(x.shape))):
        return tuple(parts)  # one array over all axes
    if any(k is None for k in parts):
        return None
    expanded = []  # booleans as integer arrays, one per axis they cover
    for k in parts:
        if hasattr(k, "dtype") and _backend.np_dtype(k.dtype) == np.bool_:
            expanded.extend(xp.nonzero(k))
        else:
            expanded.append(k)
    ndim = len(x.shape)
    if any(k is Ellipsis for k in expanded):
        e = next(i for i, k in enumerate(expanded) if k is Ellipsis)
        expanded[e:e + 1] = [slice(None)] * (ndim - len(expanded) + 1)
    expanded += [slice(None)] * (ndim - len(expanded))
    advanced = [i for i, k in enumerate(expanded) if not isinstance(k, slice)]
    b = max(len(getattr(expanded[i], "shape", ())) for i in advanced)  # broadcast ndim
    contiguous = advanced == list(range(advanced[0], advanced[-1] + 1))
    # NumPy: adjacent advanced indices put their broadcast axes in place, others in front
    start = sum(isinstance(k, slice) for k in expanded[:advanced[0]]) if contiguous else 0
    total = b + sum(isinstance(k, slice) for k in expanded)
    out, slices_seen = [], 0
    for i, (k, n) in enumerate(zip(expanded, x.shape)):
        if isinstance(k, slice):
            pos = slices_seen if contiguous and i < advanced[0] else b + slices_seen
            r = xp.asarray(list(range(*k.indices(n))), dtype=xp.int64)
            out.append(xp.reshape(r, (1,) * pos + (r.shape[0],) + (1,) * (total - pos - 1)))
            slices_seen += 1
        else:
            a = xp.asarray(k)
            lead = start + b - a.ndim
            out.append(xp.reshape(a, (1,) * lead + tuple(a.shape) + (1,) * (total - start - b)))
    return tuple(out)


RegisterJVP("GetItem")(linear_jvp)


@RegisterGradient("GetItem")
def _getitem_grad(op, dy):
    # d x[key] / dx: scatter the cotangent back to the positions read, summing repeats; rows
    # of a Variable that GradientTape.gradient asks for: IndexedSlices (TensorFlow's
    # ResourceGather gradient), unless a tape records this pass (_records.sparse_ids)
    x = op.inputs[0]
    key = op.attrs["key"]
    if op._in_ids[0] in _records._state.sparse_ids:
        rows = key[0] if type(key) is tuple and len(key) == 1 else key
        if hasattr(rows, "dtype") and _backend.np_dtype(rows.dtype).kind in "iu":
            xp = _ns(rows)
            rows = xp.reshape(rows, (-1,))
            if _backend.np_dtype(rows.dtype).kind == "i":  # negative rows count from the end
                rows = xp.where(rows < 0, rows + x.shape[0], rows)
            return IndexedSlices(reshape(dy, (rows.shape[0],) + tuple(x.shape[1:])),
                                 Tensor(rows), tuple(x.shape))
    return _scatter_add(dy, shape=x.shape, key=key)


def _describe(key) -> str:
    parts = key if type(key) is tuple else (key,)
    out = []
    for k in parts:
        if hasattr(k, "shape") and hasattr(k, "dtype"):
            out.append(f"<array shape={tuple(k.shape)} dtype={_backend.np_dtype(k.dtype)}>")
        else:
            out.append(repr(k))
    return f"[{', '.join(out)}]"


def getitem(x, key, /):
    """``x[key]`` with NumPy indexing semantics; what ``Tensor.__getitem__`` calls.

    key: an int, slice, ``None`` (new axis), ``Ellipsis``, integer array/list/Tensor or boolean
    mask, or a tuple of these. Result: shape and dtype as NumPy gives them. Raises
    ``IndexError`` naming the key and the shape when the key does not fit. Gradient: the
    cotangent scatter-added into zeros of ``x.shape`` (repeated indices accumulate).
    """
    return _getitem(x, key=_as_key(key))


@primitive("ScatterAdd", samples=[
    Sample((4,), shape=(5,), key=(_IDX([0, 2, 0, 4]),)),
    Sample((2, 5), shape=(4, 5), key=(slice(1, None, 2),)),
    Sample((3, 2), shape=(3, 4), key=(_IDX([[0, 1], [2, 0], [2, 2]]), _IDX([1, 1]))),
    Sample((9,), shape=(3, 4), key=(_IDX([[True, False, True, True]] * 3),)),
    Sample((), shape=(2, 2), key=(1, 0)), Sample((0,), shape=(3,), key=(_IDX([], dtype=np.intp),)),
])
def _scatter_add(values, *, shape, key):
    # zeros of ``shape`` with ``values`` added at ``key`` (repeats accumulate)
    return _kernel(_ns(values), "scatter_add")(tuple(shape), values.dtype, key, values)


RegisterJVP("ScatterAdd")(linear_jvp)


@RegisterGradient("ScatterAdd")
def _scatter_add_grad(op, dy):
    return _getitem(dy, key=op.attrs["key"])


class IndexedSlices:
    """Rows of a dense tensor, TensorFlow's ``tf.IndexedSlices``: the tensor of shape
    ``dense_shape`` that is zero except for ``values[i]`` added at row ``indices[i]``
    (repeated indices add up). What ``GradientTape.gradient`` returns for a Variable whose
    value reaches the target only through row gathers (``tg.nn.embedding_lookup``,
    ``tg.take(v, ids, axis=0)``, ``v[ids]``), as TensorFlow's ``ResourceGather`` gradient.

    values: a tensor of shape ``(k,) + dense_shape[1:]``; indices: integers of shape ``(k,)``
    in ``[0, dense_shape[0])``; dense_shape: a tuple of ints (a list or 1-d tensor is
    converted), or None when unknown (then it cannot be made dense). Attributes: ``values``,
    ``indices`` (Tensors), ``dense_shape`` (a tuple, where TensorFlow holds a tensor),
    ``dtype`` (the values'), ``shape`` (``dense_shape``). It becomes the dense Tensor on
    demand: :func:`tapegrad.convert_to_tensor`, ``np.asarray``, ``.numpy()``, arithmetic with a number or
    Tensor (``+ - * /``; ``-s`` stays sparse) and any op given it as an input (there as a
    constant); the conversion is ``ScatterAdd`` (differentiable in ``values``). A pytree
    (children ``values``, ``indices``), so ``tg.function`` traces and returns it.

    Raises ``TypeError`` for non-integer indices, ``ValueError`` when the shapes do not fit
    (indices not 1-d, ``len(values) != len(indices)``, ``values.shape[1:] !=
    dense_shape[1:]``).
    """

    _sparse = True  # the protocol by which the core and convert_to_tensor know it

    def __init__(self, values, indices, dense_shape=None):
        values, indices = convert_to_tensor(values), convert_to_tensor(indices)
        if indices.dtype.kind not in "iu":
            raise TypeError(f"IndexedSlices: indices must be integers, got dtype "
                            f"{indices.dtype}")
        if dense_shape is not None:
            dense_shape = tuple(int(d) for d in (dense_shape.numpy().tolist() if isinstance(
                dense_shape, Tensor) else dense_shape))
        where_ = f"IndexedSlices(values of shape {values.shape}, indices of shape " \
                 f"{indices.shape}, dense_shape={dense_shape})"
        if indices.ndim != 1 or values.ndim < 1 or values.shape[0] != indices.shape[0]:
            raise ValueError(f"{where_}: indices must be 1-d and values must have one row per "
                             "index (values.shape[0] == len(indices))")
        if dense_shape is not None and (not dense_shape or values.shape[1:] != dense_shape[1:]):
            raise ValueError(f"{where_}: each row of values must have the shape of a row of "
                             "the dense tensor (values.shape[1:] == dense_shape[1:])")
        self.values, self.indices, self.dense_shape = values, indices, dense_shape

    @property
    def dtype(self):
        """The dtype of ``values`` (and of the dense tensor)."""
        return self.values.dtype

    @property
    def shape(self):
        """The dense shape (a tuple; None when unknown)."""
        return self.dense_shape

    def _dense(self) -> Tensor:
        """The dense Tensor: ``values`` scatter-added into zeros of ``dense_shape``."""
        if self.dense_shape is None:
            raise ValueError("IndexedSlices: cannot convert to a dense tensor without a "
                             "dense_shape; create it with IndexedSlices(values, indices, "
                             "dense_shape)")
        return _scatter_add(self.values, shape=self.dense_shape, key=(self.indices._value,))

    def _concat(self, other) -> "IndexedSlices":
        """The sum of two IndexedSlices of one dense tensor: values and indices concatenated
        (TensorFlow's aggregation of sparse gradients)."""
        return IndexedSlices(concat([self.values, other.values]),
                             concat([self.indices, _astype_like(other.indices, self.indices)]),
                             self.dense_shape)

    def numpy(self) -> np.ndarray:
        """The dense tensor as a NumPy array (TensorFlow's IndexedSlices has no ``numpy``;
        here code written for dense gradients keeps working)."""
        return self._dense().numpy()

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self._dense())
        return out if dtype is None else out.astype(dtype)

    def __neg__(self):
        return IndexedSlices(-self.values, self.indices, self.dense_shape)

    def __add__(self, other):
        return self._dense() + other

    def __radd__(self, other):
        return other + self._dense()

    def __sub__(self, other):
        return self._dense() - other

    def __rsub__(self, other):
        return other - self._dense()

    def __mul__(self, other):
        return self._dense() * other

    def __rmul__(self, other):
        return other * self._dense()

    def __truediv__(self, other):
        return self._dense() / other

    def __repr__(self):
        return (f"IndexedSlices(indices={self.indices!r}, values={self.values!r}, "
                f"dense_shape={self.dense_shape})")


def _astype_like(x, like):
    """``x`` cast to ``like``'s dtype when they differ (index arrays of two slices)."""
    if x.dtype == like.dtype:
        return x
    return Tensor(_ns(x._value).astype(x._value, like._value.dtype))


def _unflatten_slices(dense_shape, children):
    s = object.__new__(IndexedSlices)  # leaves may be anything a tree function puts there
    s.values, s.indices = children
    s.dense_shape = dense_shape
    return s


register_pytree_node(IndexedSlices, lambda s: ((s.values, s.indices), s.dense_shape),
                     _unflatten_slices)


def _axis(fn, axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"{fn}: axis {axis} is out of range for a tensor of {ndim} "
                         "dimension(s)")
    return axis % ndim


def take(x, indices, /, *, axis=None):
    """Elements of ``x`` at integer ``indices`` along ``axis`` (Array API ``take``).

    x: shape ``(..., n, ...)``; indices: integer array (negative counts from the end), any
    shape ``I``; axis: required when ``x`` has more than one dimension. Result:
    ``x.shape[:axis] + I + x.shape[axis+1:]``. Raises ``ValueError`` for a missing or
    out-of-range axis, ``IndexError`` for out-of-range indices. Gradient: the cotangent
    scatter-added back along ``axis`` (repeated indices accumulate).
    """
    ndim = len(x.shape) if hasattr(x, "shape") else 0
    if axis is None:
        if ndim != 1:
            raise ValueError(f"take: axis is required for a tensor of {ndim} dimension(s) "
                             "(only 1-d tensors may omit it)")
        axis = 0
    axis = _axis("take", axis, ndim)
    return _getitem(x, key=(slice(None),) * axis + (_key_part(indices),))


def take_along_axis(x, indices, /, *, axis=-1):
    """Elements of ``x`` at ``indices`` along ``axis``, matched elementwise elsewhere.

    indices: integer array with ``x``'s number of dimensions, broadcast-compatible with ``x``
    except along ``axis`` (e.g. the output of ``argsort``/``argmax(keepdims=True)``). Result:
    the broadcast shape with ``indices.shape[axis]`` along ``axis``. Raises ``ValueError`` if
    the ranks differ or the axis is out of range. Gradient: the cotangent scatter-added back
    (repeated indices accumulate).
    """
    idx = _key_part(indices)
    xp = _ns(x._value if isinstance(x, Tensor) else x, idx)
    idx = xp.asarray(idx)
    ndim = len(x.shape)
    if idx.ndim != ndim:
        raise ValueError(f"take_along_axis: indices have {idx.ndim} dimension(s) but x has "
                         f"{ndim}; they must have the same number (add size-1 axes)")
    axis = _axis("take_along_axis", axis, ndim)
    key = []
    for d, n in enumerate(x.shape):
        if d == axis:
            key.append(idx)
        else:  # positions along the other axes, shaped to broadcast against idx
            key.append(xp.reshape(xp.arange(n), (1,) * d + (n,) + (1,) * (ndim - d - 1)))
    return _getitem(x, key=tuple(key))


# --- x[key] = v ----------------------------------------------------------------------------------
def _numpy_scatter_update(x, key, v):
    out = np.array(x, copy=True)
    out[key] = v
    return out


_register_kernel("numpy", "scatter_update", _numpy_scatter_update)


def _update(x, v, *, key):
    """A copy of the backend array ``x`` with ``[key]`` set to ``v`` (cast to ``x``'s dtype)."""
    xp = _ns(x)
    v = xp.astype(xp.asarray(v), x.dtype, copy=False)
    ones = next((i for i, d in enumerate(v.shape) if d != 1), v.ndim)
    if ones:  # leading axes of size 1, which NumPy ignores and JAX refuses: dropped
        v = xp.reshape(v, tuple(v.shape)[ones:])
    own = _backend.own_kernel(xp, "scatter_update")  # Dask's: its item assignment misses keys
    if _clamps(x):
        _check_bounds(x, key)
    try:
        if own is not None:
            return own(x, key, v)
        out = xp.asarray(x, copy=True)
        try:
            out[key] = v
        except (IndexError, TypeError):
            if xp is np:
                raise
            # keys the backend cannot assign (array-api-strict: integer arrays, None) go
            # through NumPy
            out = _kernel(xp, "scatter_update")(x, key, v)
    except IndexError as e:
        raise _index_error(x, key, e) from None
    except ValueError as e:
        raise ValueError(f"cannot assign a value of shape {tuple(v.shape)} to tensor"
                         f"{_describe(key)} of a tensor of shape {tuple(x.shape)}: {e}") from None
    return out


_scatter_update = primitive("TensorScatterUpdate", samples=[
    Sample((4, 3), (2, 3), key=(slice(1, 3),)),
    Sample((4, 3), (3,), key=(slice(None, None, 2),)),  # v broadcast over the rows
    Sample((4, 3), (), key=(Ellipsis, 1)),
    Sample((5, 3), (3, 3), key=(_IDX([0, 2, 0]),)),  # repeated rows: the last one is stored
    Sample((3, 4), (2,), key=(_IDX([0, 2]), _IDX([3, 1]))),
    Sample((3, 4), (6,), key=(_IDX([[True, False, True, True]] * 2 + [[False] * 4]),)),
    Sample((3, 4), (3, 1), key=(slice(None), _IDX([3, 0]))),
    Sample((2, 3), (1, 3), key=(None, 1)), Sample((2, 3), (1, 3), key=1), Sample((), (), key=()),
    Sample((0, 3), (3,), key=(slice(None),)),
])(_update)


# linear in (x, v) jointly: the tangent of x with the tangent of v stored at key (the same
# element stored at repeated positions as in the forward)
RegisterJVP("TensorScatterUpdate")(linear_jvp)


@RegisterGradient("TensorScatterUpdate")
def _scatter_update_grad(op, dy):
    # y = x with y[key] = v: dy/dx passes dy except at key (overwritten), dy/dv gathers dy[key]
    # (only where v's element was the one stored), summed over the axes v was broadcast along
    x, v = op.inputs
    need_x, need_v = op.needs_input_grad
    key = op.attrs["key"]
    dx = _scatter_update(dy, 0, key=key) if need_x else None
    if not need_v:
        return dx, None
    dv = _getitem(dy, key=key)
    parts = key if type(key) is tuple else (key,)
    if any(hasattr(k, "dtype") and _backend.np_dtype(k.dtype) != np.bool_ for k in parts):
        xp = _ns(dy._value)  # integer arrays may repeat a position: keep the stored elements
        pos = xp.reshape(xp.arange(math.prod(dv.shape), dtype=xp.int64), dv.shape)
        stored = _update(xp.full(dy.shape, -1, dtype=xp.int64), pos, key=key)
        dv = where(_getitem(stored, key=key) == pos, dv, zeros_like(dv))
    if dv.ndim < v.ndim:  # NumPy also assigns values with extra leading axes of size 1
        dv = reshape(dv, (1,) * (v.ndim - dv.ndim) + dv.shape)
    return dx, _sum_to(dv, v.shape)


def setitem(x, key, value, /):
    """``x[key] = value``; what ``Tensor.__setitem__`` calls.

    key: as for :func:`getitem`. value: a Tensor, backend array or Python scalar broadcastable
    to ``x[key]``'s shape; it is cast to ``x``'s dtype. A Tensor is immutable, so this records
    the op ``TensorScatterUpdate`` on the old ``x`` and then rebinds the Python object ``x`` to
    the result (other names bound to the same object see the change; tensors computed from
    ``x`` before do not; the records of every tape keep the old value). On a
    :class:`Variable` it is an assignment (``assign``; not recorded). With repeated positions
    in the key, the backend decides which value is stored (NumPy: the last). A
    ``custom_gradient`` gradient function that closes over ``x`` sees the new value: do not
    assign to such a tensor before the gradient is computed.

    Raises ``RuntimeError`` if a recording tape watches ``x`` as a source (its gradient would
    be ambiguous), ``IndexError`` for a key that does not fit, ``ValueError`` for a value that
    does not broadcast. Gradient: to ``x``, the cotangent with zeros at ``key``; to ``value``,
    the cotangent at ``key`` (where ``value``'s element was stored), summed over the axes
    ``value`` was broadcast along.
    """
    key = _as_key(key)
    if _records.watched_as_source(x):
        raise RuntimeError(
            f"cannot assign to tensor{_describe(key)}: a recording GradientTape watches this "
            f"{'Variable' if isinstance(x, Variable) else 'tensor'} as a source, and after an "
            "in-place update the gradient with respect to it would be ambiguous (old or new "
            "value?). Build a new tensor instead, e.g. y = tg.where(mask, value, x), or copy "
            "it first (x = x + 0 or x = tg.asarray(x, copy=True)) and assign to the copy"
            + ("; or assign outside the tape (v.assign, or inside tape.stop_recording())"
               if isinstance(x, Variable) else ""))
    if isinstance(x, Variable):
        x.assign(_update(x._value, value._value if isinstance(value, Tensor) else value,
                         key=key))
        return
    _records.update_in_place(x, lambda old: _scatter_update(old, value, key=key))


__all__ = ["take", "take_along_axis", "IndexedSlices"]
