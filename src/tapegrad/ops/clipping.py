"""Clipping with TensorFlow 2's names and semantics: ``clip_by_value``, ``clip_by_norm``,
``global_norm``, ``clip_by_global_norm``.

Each is a composition of differentiable ops written as TensorFlow writes it (``clip_ops.py``),
so the gradients are TensorFlow's and differentiable again: ``clip_by_value`` is
``maximum(minimum(t, max), min)`` (gradient 1 inside ``[min, max]``, ties included, the rest
to the bound that was hit); ``clip_by_norm`` divides by ``max(norm, clip_norm)`` with the
norm computed through a ``where`` that keeps the gradient of ``sqrt`` finite at zero.
"""
from __future__ import annotations

import math

from .._tensor import Tensor
from .creation import convert_to_tensor
from .elementwise import astype, maximum, minimum, sqrt, where
from .creation import ones_like
from .indexing import IndexedSlices
from .reductions import sum as _sum


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """``t`` with values below ``clip_value_min`` set to it and above ``clip_value_max`` set
    to it (``tf.clip_by_value``).

    t: any shape and real dtype; the bounds: scalars or tensors that broadcast to ``t``'s
    shape (``min <= max`` for a meaningful result, as in TensorFlow). Result: ``t``'s shape
    and dtype. Raises ``ValueError`` if a bound would broadcast the result beyond ``t``'s
    shape, ``TypeError`` for a complex ``t`` (an order of complex numbers is not defined;
    TensorFlow refuses it too). Gradient (of ``maximum(minimum(t, max), min)``, TensorFlow's composition): ``dy``
    to ``t`` where ``min <= t <= max``, to ``clip_value_max`` where ``t > max``, to
    ``clip_value_min`` where ``t < min`` (summed over broadcast axes).
    """
    t = convert_to_tensor(t)
    if t.dtype.kind == "c":
        raise TypeError(f"clip_by_value: t has the complex dtype {t.dtype}, but clipping orders "
                        "values, which complex numbers have not (TensorFlow refuses it too); "
                        "clip tg.real(t) and tg.imag(t) separately, or rescale by tg.abs(t) "
                        "(tg.clip_by_norm)")
    out = maximum(minimum(t, clip_value_max), clip_value_min)
    if out.shape != t.shape:
        raise ValueError(f"clip_by_value: clip_value_min and clip_value_max must broadcast to "
                         f"t's shape {t.shape}, but they broadcast the result to {out.shape}")
    return out


def _check_clip_norm(fn, clip_norm):
    try:
        value = float(clip_norm)
    except TypeError:  # a traced value (tg.function): not known before the run
        return
    if not value >= 0:
        raise ValueError(f"{fn}: clip_norm must be a non-negative scalar, got {value}")


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """``t * clip_norm / max(l2norm(t), clip_norm)`` (``tf.clip_by_norm``): ``t`` unchanged if
    its L2 norm over ``axes`` is at most ``clip_norm``, else rescaled to that norm.

    t: floating, any shape; clip_norm: a non-negative scalar; axes: None (the norm of all of
    ``t``) or an int or sequence of ints (one norm per slice, broadcast back). Result: ``t``'s
    shape and dtype. Raises ``ValueError`` for a negative ``clip_norm``. Gradient: of that
    formula, with the norm computed as TensorFlow does (``where(s > 0, sqrt(s), s)`` on a
    safe argument), so an all-zero ``t`` has a finite gradient. An
    :class:`~tapegrad.IndexedSlices` ``t`` gives IndexedSlices with its ``values`` clipped
    (TensorFlow's rule: the norm of the values, repeated indices not summed first).
    """
    _check_clip_norm("clip_by_norm", clip_norm)
    if isinstance(t, IndexedSlices):
        return IndexedSlices(clip_by_norm(t.values, clip_norm, axes), t.indices, t.dense_shape)
    t = convert_to_tensor(t)
    axis = tuple(axes) if isinstance(axes, (list, tuple)) else axes
    l2sum = _sum(t * t, axis=axis, keepdims=True)
    pred = l2sum > 0
    l2norm = where(pred, sqrt(where(pred, l2sum, ones_like(l2sum))), l2sum)
    return t * clip_norm / maximum(l2norm, clip_norm)


def _tensor_list(fn, t_list):
    if not isinstance(t_list, (list, tuple)):
        raise TypeError(f"{fn}: t_list should be a list or tuple of tensors, got "
                        f"{type(t_list).__name__}")
    return [t if t is None or isinstance(t, IndexedSlices) else convert_to_tensor(t)
            for t in t_list]


def global_norm(t_list, name=None):
    """``sqrt(sum(sum(t ** 2) for t in t_list))``, the L2 norm of all the tensors together
    (``tf.linalg.global_norm``); ``None`` entries are skipped.

    t_list: a list or tuple of floating tensors of any shapes. Result: a 0-d tensor (the
    promoted dtype). Raises ``TypeError`` if ``t_list`` is not a list or tuple,
    ``ValueError`` if it holds no tensor. Gradient: ``t / global_norm`` for each ``t``
    (infinite or NaN where all are zero, as ``sqrt`` at 0, as in TensorFlow). Of an
    :class:`~tapegrad.IndexedSlices` its ``values`` count (TensorFlow's rule; repeated indices
    are not summed first).
    """
    ts = [t.values if isinstance(t, IndexedSlices) else t
          for t in _tensor_list("global_norm", t_list) if t is not None]
    if not ts:
        raise ValueError("global_norm: t_list holds no tensors (only None entries or none at "
                         "all)")
    total = _sum(ts[0] * ts[0])
    for t in ts[1:]:
        total = total + _sum(t * t)
    return sqrt(total)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Rescale the tensors of ``t_list`` together so that their :func:`global_norm` is at
    most ``clip_norm`` (``tf.clip_by_global_norm``).

    Each ``t`` becomes ``t * clip_norm / max(global_norm, clip_norm)``, computed as TensorFlow
    does: ``scale = clip_norm * minimum(1 / norm, 1 / clip_norm) + (norm - norm)`` (so an
    infinite or NaN norm makes every result NaN). t_list: a list or tuple of floating tensors
    or ``None`` (passed through as ``None``); clip_norm: a non-negative scalar; use_norm: the
    global norm to use instead of computing it. Returns ``(list_clipped, global_norm)``.
    Raises ``TypeError`` if ``t_list`` is not a list or tuple, ``ValueError`` for a negative
    ``clip_norm`` or a list without tensors. Differentiable (compositions of ops). An
    :class:`~tapegrad.IndexedSlices` stays one, its ``values`` scaled (TensorFlow's rule).
    """
    _check_clip_norm("clip_by_global_norm", clip_norm)
    ts = _tensor_list("clip_by_global_norm", t_list)
    norm = global_norm(ts) if use_norm is None else convert_to_tensor(use_norm)
    inv_clip = 1.0 / clip_norm if isinstance(clip_norm, Tensor) or clip_norm else math.inf
    scale = clip_norm * minimum(1.0 / norm, inv_clip) + (norm - norm)
    out = []
    for t in ts:
        if isinstance(t, IndexedSlices):
            out.append(IndexedSlices(t.values * astype(scale, t.dtype, copy=False), t.indices,
                                     t.dense_shape))
        else:
            out.append(None if t is None else t * astype(scale, t.dtype, copy=False))
    return out, norm


__all__ = ["clip_by_value", "clip_by_norm", "global_norm", "clip_by_global_norm"]
