"""``tf.TensorArray`` for ``tapegrad.compat.tensorflow``: TensorFlow 2's functional list of
same-shape Tensors, eagerly and inside ``tf.function``.

Every element lives in one preallocated buffer Tensor of shape ``(size, *element_shape)``,
made at the first write (or from ``element_shape``). ``write`` and ``scatter`` return a new
TensorArray whose buffer is the old one with those rows replaced (an indexed update, which XLA
compiles to a dynamic update of the buffer when the index is traced), as TensorFlow 2's
``write`` returns the array to use from then on. A TensorArray is a pytree node (its buffer is
the leaf), so ``tf.while_loop``, ``tf.cond`` and ``tg.function`` carry it; carried through a
loop it must have its element shape already (give ``element_shape=`` or write before the
loop) and, being a loop variable of fixed shape, a fixed ``size``. Gradients flow through
``write``/``read``/``stack`` (those of indexing). ``clear_after_read`` is accepted and
ignored (elements may be read again, as in TensorFlow 2's ``tf.function``).
"""
from __future__ import annotations

import numpy as np

import tapegrad as tg

__all__ = ["TensorArray"]


def _concrete(index):
    """``index`` as a Python int, or None when it is traced (inside ``tf.function``)."""
    if isinstance(index, tg.Tensor):
        jax = tg.config.loaded_jax()
        if jax is not None and isinstance(index._value, jax.core.Tracer):
            return None
        return int(index.numpy())
    return int(index)


class TensorArray:
    """``tf.TensorArray(dtype, size=None, dynamic_size=None, clear_after_read=None, ...,
    element_shape=None)``: ``size`` elements (an int; 0 by default) of ``dtype`` and shape
    ``element_shape`` (learned from the first write when None or holding a None). With ``dynamic_size`` a write
    past the end grows it (eagerly, with a concrete index; not inside a loop, whose variables
    keep their shapes). Raises ``ValueError`` (``tf.errors.InvalidArgumentError``) for a
    write or read out of range of a fixed-size array and for an element of another shape."""

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None,
                 tensor_array_name=None, handle=None, flow=None, infer_shape=True,
                 element_shape=None, colocate_with_first_write_call=True, name=None):
        self._dtype = np.dtype(dtype)
        self._size = 0 if size is None else _concrete(size)
        if self._size is None:
            raise ValueError("tf.TensorArray: size must be known when the array is made (a "
                             "Python int or a Tensor computed outside tf.function)")
        self._dynamic = bool(dynamic_size)
        shape = None if element_shape is None else tuple(
            getattr(element_shape, "_static", element_shape))
        self._shape = None if shape is None or None in shape else tuple(int(d) for d in shape)
        self._buffer = None if self._shape is None else tg.zeros(
            (self._size, *self._shape), dtype=self._dtype)

    def _new(self, buffer):
        out = object.__new__(TensorArray)
        out._dtype, out._dynamic = self._dtype, self._dynamic
        out._size, out._shape, out._buffer = buffer.shape[0], tuple(buffer.shape[1:]), buffer
        return out

    # --- properties ---------------------------------------------------------------------------
    @property
    def dtype(self):
        """The elements' dtype."""
        return self._dtype

    @property
    def dynamic_size(self) -> bool:
        """Whether writes past the end grow the array."""
        return self._dynamic

    @property
    def element_shape(self):
        """The elements' shape (a tuple), None before the first write without one given."""
        return self._shape

    def size(self, name=None):
        """The number of elements, a 0-d int32 Tensor."""
        return tg.constant(self._size, tg.int32)

    # --- writes -------------------------------------------------------------------------------
    def _element(self, value, where, shape):
        value = tg.astype(tg.convert_to_tensor(value), self._dtype)
        if self._shape is not None and tuple(value.shape) != tuple(shape):
            raise ValueError(f"tf.TensorArray.{where}: an element of shape {tuple(value.shape)}"
                             f" does not match the array's element shape {self._shape}")
        return value

    def _room(self, last, where):
        """The buffer, grown (dynamic size) to hold index ``last``; raises when it cannot."""
        buffer = self._buffer
        if last is not None and last >= self._size:
            if not self._dynamic:
                raise ValueError(f"tf.TensorArray.{where}: tried to write to index {last} but "
                                 f"the array is not resizeable and its size is {self._size}; "
                                 "give a larger size or dynamic_size=True")
            extra = tg.zeros((last + 1 - self._size, *self._shape), dtype=self._dtype)
            buffer = tg.concat([buffer, extra], axis=0)
        return tg.identity(buffer)  # a new Tensor to update: the old array keeps its buffer

    def write(self, index, value, name=None):
        """The array with element ``index`` (an int or 0-d int Tensor, traced allowed) set to
        ``value`` (cast to the dtype). Returns a new TensorArray (use it from then on)."""
        value = self._element(value, "write", self._shape)
        if self._buffer is None:
            self._shape = tuple(value.shape)
            self._buffer = tg.zeros((self._size, *self._shape), dtype=self._dtype)
        i = _concrete(index)
        if i is not None and i < 0:
            raise ValueError(f"tf.TensorArray.write: index {i} is negative")
        if i is None and self._dynamic:
            raise ValueError("tf.TensorArray.write: a dynamic_size array cannot grow at a "
                             "traced index; make it with a fixed size inside tf.function")
        buffer = self._room(i, "write")
        buffer[index if i is None else i] = value
        return self._new(buffer)

    def unstack(self, value, name=None):
        """The array holding the slices of ``value`` along its first axis (size
        ``value.shape[0]``). Returns a new TensorArray."""
        value = tg.astype(tg.convert_to_tensor(value), self._dtype)
        if self._shape is not None and tuple(value.shape[1:]) != self._shape:
            raise ValueError(f"tf.TensorArray.unstack: slices of shape {tuple(value.shape[1:])}"
                             f" do not match the element shape {self._shape}")
        return self._new(value)

    def scatter(self, indices, value, name=None):
        """The array with elements ``indices`` (a 1-d list or int Tensor) set to the slices
        of ``value`` (``(len(indices), *element_shape)``). Returns a new TensorArray."""
        idx = np.asarray(indices.numpy() if isinstance(indices, tg.Tensor) else indices)
        value = tg.astype(tg.convert_to_tensor(value), self._dtype)
        if self._buffer is None:
            self._shape = tuple(value.shape[1:])
            self._buffer = tg.zeros((self._size, *self._shape), dtype=self._dtype)
        self._element(value[0] if value.shape[0] else tg.zeros(self._shape, self._dtype),
                      "scatter", self._shape)
        buffer = self._room(int(idx.max()) if idx.size else None, "scatter")
        buffer[idx.astype(np.int64)] = value
        return self._new(buffer)

    # --- reads --------------------------------------------------------------------------------
    def _data(self, where):
        if self._buffer is None:
            raise ValueError(f"tf.TensorArray.{where}: nothing was written and no element_shape "
                             "was given, so the elements' shape is unknown")
        return self._buffer

    def read(self, index, name=None):
        """Element ``index`` (an int or 0-d int Tensor, traced allowed); unwritten elements
        are zeros. Raises ``ValueError`` for a concrete index out of range."""
        i = _concrete(index)
        if i is not None and not 0 <= i < self._size:
            raise ValueError(f"tf.TensorArray.read: index {i} is out of range for an array of "
                             f"size {self._size}")
        return self._data("read")[index if i is None else i]

    def stack(self, name=None):
        """All elements stacked: ``(size, *element_shape)``; an empty array of unknown
        element shape gives a ``(0,)`` Tensor, as TensorFlow's."""
        if self._buffer is None and self._size == 0:
            return tg.zeros((0,), dtype=self._dtype)
        return self._data("stack")

    def gather(self, indices, name=None):
        """The elements ``indices`` (1-d) stacked: ``(len(indices), *element_shape)``."""
        return tg.take(self._data("gather"), tg.astype(tg.convert_to_tensor(indices), tg.int64),
                       axis=0)

    def concat(self, name=None):
        """The elements joined along their first axis: ``(size * element_shape[0],
        *element_shape[1:])`` (elements must be at least 1-d)."""
        data = self._data("concat")
        if data.ndim < 2:
            raise ValueError("tf.TensorArray.concat: the elements are scalars; use stack()")
        return tg.reshape(data, (-1, *data.shape[2:]))

    def identity(self):
        """This array (TensorArrays are never changed in place)."""
        return self

    def close(self, name=None):
        """Does nothing (TensorFlow frees the array's resources)."""

    def mark_used(self):
        """Does nothing (TensorFlow's warning about unused arrays is not reproduced)."""

    def __repr__(self):
        return (f"<tf.TensorArray: size={self._size}, dtype={self._dtype}, "
                f"element_shape={self._shape}>")


def _flatten(ta):
    if ta._buffer is None:
        raise ValueError("tf.TensorArray: carried through a loop, cond or tf.function before "
                         "its element shape is known; give element_shape=[...] when making it "
                         "or write an element first")
    return (ta._buffer,), (ta._dtype, ta._dynamic)


def _unflatten(aux, children):
    out = object.__new__(TensorArray)
    out._dtype, out._dynamic = aux
    (buffer,) = children
    out._buffer = buffer
    shape = getattr(buffer, "shape", None)
    out._size, out._shape = (shape[0], tuple(shape[1:])) if shape else (0, None)
    return out


tg.tree_util.register_pytree_node(TensorArray, _flatten, _unflatten)
