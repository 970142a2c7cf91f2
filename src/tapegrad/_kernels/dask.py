"""Dask kernels: every one builds a lazy, chunked Dask graph; none computes.

* ``materialize`` evaluates several lazy arrays in one graph (``dask.persist``, then
  ``dask.compute`` for those wanted as NumPy), so work they share runs once.
* ``erf`` is ``scipy.special.erf`` mapped over the blocks (``map_blocks``).
* ``scatter_add`` (zeros of a shape with values added at an indexing key, repeated indices
  accumulating: the gradient of ``x[key]``): a key of ints, slices, ``None`` and ``Ellipsis``
  is padding (and interleaving with zeros for steps) of the values, chunks kept. One integer
  index array (or 1-d NumPy boolean mask) on one axis, every other axis whole (``take``,
  ``x[idx]``, embedding lookups), is a blockwise contraction shaped like Dask's ``matmul``: a
  task per (values block, output block) adds the block's rows whose index falls in the output
  block, and the partial outputs are summed by Dask's tree reduction, so no task holds more
  than one block of each. Any other key runs ``numpy.add.at`` in one lazy task (correct, one
  chunk).
* ``scatter_update`` (``x`` with ``x[key]`` set to ``v``; used instead of Dask's item
  assignment, which refuses some keys and fails late, when computed, on others): a basic key is a ``where`` over scatter-added mask and values;
  any other key runs NumPy's assignment in one lazy task.
* ``getitem_points``: indexing with several index arrays (``vindex``), which ``[]`` refuses.
"""
from __future__ import annotations

import warnings

import numpy as np


def materialize(arrays, keep):
    """The Dask arrays ``arrays`` evaluated in one graph: where ``keep[i]`` is true a persisted
    Dask array (its graph is its chunks: held by the workers under ``dask.distributed``),
    else a NumPy array."""
    import dask

    if not any(keep):
        return [np.asarray(a) for a in dask.compute(*arrays)]  # 0-d results are NumPy scalars
    out = list(dask.persist(*arrays))
    wanted = [i for i, k in enumerate(keep) if not k]
    for i, a in zip(wanted, dask.compute(*[out[i] for i in wanted])):
        out[i] = np.asarray(a)
    return out


def erf(x):
    """``scipy.special.erf`` block by block."""
    from scipy.special import erf as _erf

    return x.map_blocks(_erf, dtype=x.dtype)


def scatter_add(shape, dtype, key, values):
    """Zeros of ``shape`` and ``dtype`` with ``values`` added at ``key`` (NumPy's
    ``add.at``); lazy."""
    import dask.array as da

    shape = tuple(shape)
    parts = key if type(key) is tuple else (key,)
    values = da.asarray(values)
    if all(_is_basic(k) for k in parts):
        return _scatter_basic(shape, dtype, parts, values)
    rows = _row_key(parts, len(shape))
    if rows is not None:
        return _scatter_rows(shape, dtype, *rows, values)
    return _in_one_task(_numpy_scatter_add, shape, dtype, shape, dtype, key, values)


def scatter_update(x, key, v):
    """``x`` with ``x[key]`` set to ``v`` (NumPy's assignment: of repeated indices the last
    value is stored); lazy."""
    import dask.array as da

    parts = key if type(key) is tuple else (key,)
    if all(_is_basic(k) for k in parts):
        v = da.asarray(v)
        target = _indexed_shape(x.shape, parts)
        while v.ndim > len(target) and v.shape[0] == 1:  # NumPy drops such leading axes
            v = v[0]
        mask = _scatter_basic(x.shape, bool, parts, da.ones((), dtype=bool))
        return da.where(mask, _scatter_basic(x.shape, x.dtype, parts, v), x)
    if not any(isinstance(k, da.Array) for k in parts):  # errors now, not when computed
        np.broadcast_shapes(tuple(v.shape), _indexed_shape(x.shape, key))
    return _in_one_task(_numpy_scatter_update, x.shape, x.dtype, x, key, v)


def getitem_points(x, key):
    """``x[key]`` for a key of integer arrays, one per axis, broadcast together (what Dask's
    ``[]`` refuses for more than one array): ``x.vindex[key]``. Index arrays that are Dask
    arrays are computed first (``vindex`` needs concrete indices); ``x`` stays lazy."""
    import dask

    return x.vindex[tuple(dask.compute(*key))]


KERNELS = {"materialize": materialize, "erf": erf, "scatter_add": scatter_add,
           "scatter_update": scatter_update, "getitem_points": getitem_points}


# --- basic keys ----------------------------------------------------------------------------------
def _is_basic(k):
    return k is None or k is Ellipsis or (isinstance(k, (slice, int, np.integer))
                                          and not isinstance(k, bool))


def _axis_parts(parts, ndim):
    """A basic key as one int or slice per axis (``Ellipsis`` expanded, ``None`` dropped)."""
    parts = [k for k in parts if k is not None]
    if Ellipsis in parts:
        i = parts.index(Ellipsis)
        parts[i:i + 1] = [slice(None)] * (ndim - len(parts) + 1)
    return parts + [slice(None)] * (ndim - len(parts))


def _scatter_basic(shape, dtype, parts, values):
    import dask.array as da

    target = _indexed_shape(shape, tuple(parts))  # raises IndexError for a bad key
    ranges = []
    for k, n in zip(_axis_parts(parts, len(shape)), shape):
        if isinstance(k, slice):
            ranges.append(range(*k.indices(n)))
        else:
            i = int(k) + n if int(k) < 0 else int(k)
            ranges.append(range(i, i + 1))
    if any(len(r) == 0 for r in ranges):
        return da.zeros(shape, dtype=dtype)
    # the axes of None and of ints have size 1, so reshaping to one axis per axis of the
    # output keeps the order of the elements
    v = da.broadcast_to(values, target)
    v = v.astype(dtype).reshape(tuple(len(r) for r in ranges))
    for axis, (r, n) in enumerate(zip(ranges, shape)):
        if r.step < 0:
            v = da.flip(v, axis)
        step = abs(r.step)
        if step > 1 and len(r) > 1:  # each value followed by step - 1 zeros
            v = da.stack([v] + [da.zeros_like(v)] * (step - 1), axis=axis + 1)
            merged = list(v.shape)
            merged[axis:axis + 2] = [len(r) * step]
            v = v.reshape(merged)[(slice(None),) * axis + (slice(0, (len(r) - 1) * step + 1),)]
        width = [(0, 0)] * v.ndim
        width[axis] = (min(r[0], r[-1]), n - min(r[0], r[-1]) - v.shape[axis])
        v = da.pad(v, width)
    return v


def _indexed_shape(shape, key):
    """The shape of ``zeros(shape)[key]``, found on a zero-strided array (no memory)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1), shape, (0,) * len(shape))[key].shape


# --- one index array on one axis ----------------------------------------------------------------
def _row_key(parts, ndim):
    """``(axis, index)`` if the key is one integer index array (or 1-d NumPy boolean mask)
    with every other axis whole; else None."""
    arrays = [i for i, k in enumerate(parts) if not _is_basic(k)]
    if len(arrays) != 1:
        return None
    pos = arrays[0]
    if any(k is not Ellipsis and not (isinstance(k, slice) and k == slice(None))
           for i, k in enumerate(parts) if i != pos):
        return None
    index = parts[pos]
    if isinstance(index, np.ndarray) and index.dtype == bool and index.ndim == 1:
        index = np.flatnonzero(index)
    if getattr(index, "dtype", np.dtype(bool)).kind not in "iu":
        return None
    axis = ndim - len(parts) + pos if Ellipsis in parts[:pos] else pos
    return axis, index


def _scatter_rows(shape, dtype, axis, index, values):
    import dask.array as da

    n, rest = shape[axis], shape[:axis] + shape[axis + 1:]
    dtype = np.dtype(dtype)
    index = da.asarray(index)
    k = index.ndim
    v = da.broadcast_to(values, shape[:axis] + tuple(index.shape) + shape[axis + 1:])
    if 0 in v.shape or n == 0:
        return da.zeros(shape, dtype=dtype)
    v = da.moveaxis(v.astype(dtype), list(range(axis, axis + k)), list(range(k)))
    v = v.reshape((-1,) + rest).rechunk({d: -1 for d in range(1, 1 + len(rest))})
    index = index.reshape(-1).rechunk((v.chunks[0],))
    index = da.where(index < 0, index + n, index)
    out_chunks = da.core.normalize_chunks(("auto",) + (-1,) * len(rest), (n,) + rest,
                                          dtype=dtype)[0]
    edges = np.cumsum((0,) + out_chunks)
    bounds = da.from_array(np.stack([edges[:-1], edges[1:]], axis=1), chunks=(1, 2))
    rest_ix = "".join(chr(ord("k") + d) for d in range(len(rest)))

    def partial(index, rows, bounds):  # one task: rows of one block that land in one block
        start, stop = int(bounds[0, 0]), int(bounds[0, 1])
        out = np.zeros((1, stop - start) + rest, dtype=dtype)
        inside = (index >= start) & (index < stop)
        np.add.at(out[0], index[inside] - start, rows[inside])
        return out

    with warnings.catch_warnings():  # a task per pair of blocks is the point, as in matmul
        warnings.simplefilter("ignore", da.PerformanceWarning)
        partials = da.blockwise(partial, "ij" + rest_ix, index, "i", v, "i" + rest_ix,
                                bounds, "jb", adjust_chunks={"i": 1, "j": out_chunks},
                                dtype=dtype, concatenate=True,
                                meta=np.empty((0,) * (2 + len(rest)), dtype))
    return da.moveaxis(partials.sum(axis=0), 0, axis)


# --- anything else: NumPy in one lazy task -------------------------------------------------------
def _numpy_scatter_add(shape, dtype, key, values):
    out = np.zeros(shape, dtype=dtype)
    np.add.at(out, key, values)
    return out


def _numpy_scatter_update(x, key, v):
    out = np.array(x, copy=True)
    out[key] = v
    return out


def _in_one_task(fn, shape, dtype, *args):
    import dask
    import dask.array as da

    return da.from_delayed(dask.delayed(fn)(*args), tuple(shape), dtype=np.dtype(dtype))
