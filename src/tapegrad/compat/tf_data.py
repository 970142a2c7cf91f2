"""``tf.data`` for ``tapegrad.compat.tensorflow``: an input pipeline of tapegrad Tensors.

A :class:`Dataset` is a recipe for a sequence of *elements* (a Tensor, or a tuple or dict of
them, nested as TensorFlow allows), run in Python each time it is iterated (eagerly, as
``for x, y in dataset:`` in a TensorFlow 2 training loop; inside ``tg.function`` iterate it
outside the function and pass each batch in). Transformations return new datasets and never
change the one they are called on. Shuffling draws from NumPy's generator seeded by ``seed``
(TensorFlow's exact order is not reproduced: the same seed gives the same order here).
"""
from __future__ import annotations

import itertools

import numpy as np

import tapegrad as tg

__all__ = ["Dataset", "AUTOTUNE"]

#: accepted where TensorFlow takes ``tf.data.AUTOTUNE`` (parallelism is not used)
AUTOTUNE = -1


def _leaves(element):
    return tg.tree_util.tree_leaves(element)


def _map(fn, element):
    return tg.tree_util.tree_map(fn, element)


def _call(fn, element):
    """``fn`` on an element as TensorFlow calls it: a tuple is unpacked into arguments."""
    return fn(*element) if isinstance(element, tuple) else fn(element)


def _positive(where, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"tf.data.Dataset.{where}: {name} must be a positive int, got "
                         f"{value!r}")
    return int(value)


class Dataset:
    """A sequence of elements made by ``make()`` (a fresh iterator each time), with
    TensorFlow's transformations. Build one with :meth:`from_tensor_slices`,
    :meth:`from_tensors`, :meth:`range` or :meth:`zip`."""

    def __init__(self, make, length=None):
        self._make, self._length = make, length

    def __iter__(self):
        return iter(self._make())

    def __len__(self):
        if self._length is None:
            raise TypeError("tf.data.Dataset: the length is unknown (after filter, or an "
                            "infinite repeat); count the elements by iterating")
        return self._length

    def cardinality(self):
        """The number of elements as a 0-d int64 Tensor: -1 for infinite, -2 for unknown
        (TensorFlow's ``INFINITE`` and ``UNKNOWN``)."""
        return tg.constant(-2 if self._length is None else self._length, dtype=tg.int64)

    # --- sources -------------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(tensors):
        """One element per index of the leading axis of every leaf of ``tensors`` (a Tensor,
        array, list, or a tuple or dict of them): shapes ``(n, ...)`` give ``n`` elements of
        shapes ``(...)``. Raises ``ValueError`` if the leaves' leading sizes differ or a leaf
        is a scalar. A list is one tensor, as in TensorFlow (``from_tensor_slices([1, 2, 3])``
        gives three scalars); tuples and dicts are structures."""
        tensors = tg.tree_util.tree_map(tg.convert_to_tensor, tensors,
                                        is_leaf=lambda x: isinstance(x, list))
        sizes = {int(x.shape[0]) if x.ndim else None for x in _leaves(tensors)}
        if None in sizes or len(sizes) != 1:
            shapes = [tuple(x.shape) for x in _leaves(tensors)]
            raise ValueError("tf.data.Dataset.from_tensor_slices: every component needs the "
                             f"same leading size to slice along, got shapes {shapes}")
        n = sizes.pop()
        return Dataset(lambda: (_map(lambda x: x[i], tensors) for i in range(n)), n)

    @staticmethod
    def from_tensors(tensors):
        """A dataset of one element, ``tensors`` itself."""
        tensors = _map(lambda x: tg.convert_to_tensor(x), tensors)
        return Dataset(lambda: iter([tensors]), 1)

    @staticmethod
    def range(*args, dtype=tg.int64):
        """``range(stop)``, ``range(start, stop[, step])`` as 0-d Tensors of ``dtype``."""
        r = range(*args)
        return Dataset(lambda: (tg.constant(i, dtype=dtype) for i in r), len(r))

    @staticmethod
    def zip(datasets):
        """Elements of several datasets side by side, as the tuple (or dict) ``datasets``
        holds them; as long as the shortest."""
        items = list(datasets.items()) if isinstance(datasets, dict) else list(datasets)
        parts = [d for _, d in items] if isinstance(datasets, dict) else items
        lengths = [d._length for d in parts]
        length = None if None in lengths else min(lengths, default=0)

        def make():
            for values in zip(*parts):
                yield (dict(zip([k for k, _ in items], values)) if isinstance(datasets, dict)
                       else tuple(values))
        return Dataset(make, length)

    # --- transformations -----------------------------------------------------------------
    def map(self, map_func, num_parallel_calls=None, deterministic=None, name=None):
        """``map_func`` applied to each element (a tuple element unpacked into arguments)."""
        return Dataset(lambda: (_call(map_func, e) for e in self), self._length)

    def filter(self, predicate, name=None):
        """The elements for which ``predicate`` (a tuple unpacked) is true."""
        return Dataset(lambda: (e for e in self if bool(_call(predicate, e))))

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None,
              deterministic=None, name=None):
        """Consecutive elements stacked along a new leading axis, ``batch_size`` at a time;
        the last, smaller batch is dropped if ``drop_remainder``. Raises ``ValueError`` for a
        ``batch_size`` that is not a positive int."""
        size = _positive("batch", "batch_size", batch_size)

        def make():
            it = iter(self)
            while True:
                chunk = list(itertools.islice(it, size))
                if not chunk or (drop_remainder and len(chunk) < size):
                    return
                yield tg.tree_util.tree_map(lambda *xs: tg.stack(list(xs)), *chunk)
        length = None if self._length is None else (
            self._length // size if drop_remainder else -(-self._length // size))
        return Dataset(make, length)

    def unbatch(self, name=None):
        """Each batch split back into its elements."""
        return Dataset(lambda: (e for b in self for e in Dataset.from_tensor_slices(b)))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True, name=None):
        """TensorFlow's buffered shuffle: fill a buffer of ``buffer_size`` elements, then
        repeatedly emit a random one and put the next element in its place (a buffer as long
        as the dataset shuffles uniformly). ``seed`` fixes the order (each iteration draws a
        new order unless ``reshuffle_each_iteration=False``). Raises ``ValueError`` for a
        ``buffer_size`` that is not a positive int."""
        size = _positive("shuffle", "buffer_size", buffer_size)
        epochs = itertools.count()

        def make():
            epoch = next(epochs) if reshuffle_each_iteration else 0
            rng = np.random.default_rng(None if seed is None else [seed, epoch])
            it = iter(self)
            buffer = list(itertools.islice(it, size))
            for e in it:
                k = int(rng.integers(len(buffer)))
                yield buffer[k]
                buffer[k] = e
            while buffer:
                yield buffer.pop(int(rng.integers(len(buffer))))
        return Dataset(make, self._length)

    def repeat(self, count=None, name=None):
        """The dataset ``count`` times over (forever for ``None`` or -1)."""
        forever = count is None or count == -1
        length = None if forever or self._length is None else self._length * int(count)
        return Dataset(lambda: (e for _ in (itertools.count() if forever else range(int(count)))
                                for e in self), length)

    def take(self, count, name=None):
        """The first ``count`` elements (all for -1)."""
        if count == -1:
            return self
        count = int(count)
        length = count if self._length is None else min(count, self._length)
        return Dataset(lambda: itertools.islice(iter(self), count), length)

    def skip(self, count, name=None):
        """All but the first ``count`` elements."""
        count = int(count)
        length = None if self._length is None else max(self._length - count, 0)
        return Dataset(lambda: itertools.islice(iter(self), count, None), length)

    def enumerate(self, start=0, name=None):
        """``(index, element)`` pairs, the index a 0-d int64 Tensor."""
        return Dataset(lambda: ((tg.constant(i, dtype=tg.int64), e) for i, e in
                                enumerate(self, start)), self._length)

    def prefetch(self, buffer_size, name=None):
        """The dataset itself (elements are made when asked for)."""
        return self

    def cache(self, filename="", name=None):
        """The dataset itself (its elements are recomputed on each iteration)."""
        return self

    def as_numpy_iterator(self):
        """The elements with each Tensor as a NumPy array (a 0-d one as a NumPy scalar)."""
        return (_map(lambda x: x.numpy(), e) for e in self)

