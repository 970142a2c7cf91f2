"""Normalisation with TensorFlow 2's names: ``moments``, ``batch_normalization`` (``tf.nn``) and
``layer_normalization`` (the function behind ``tf.keras.layers.LayerNormalization``).

All three are compositions of differentiable ops (means, variances, arithmetic), so their
gradients are exact to any order and need no formula of their own. One deliberate difference
from TensorFlow: ``tf.nn.moments`` computes the variance around ``stop_gradient(mean)``, which
gives the right first derivative (the sum of the deviations is 0) but a wrong second one; here
the variance is ``tg.var``, whose gradient is exact at every order.
"""
from __future__ import annotations

from .creation import convert_to_tensor
from .elementwise import sqrt
from .manipulation import reshape
from .reductions import _axes, mean, var


def moments(x, axes, shift=None, keepdims=False, name=None):
    """Mean and variance of ``x`` over ``axes`` (``tf.nn.moments``).

    x: floating, any shape; axes: an int or a sequence of ints (negative allowed); shift:
    ignored, as in TensorFlow; keepdims: keep the reduced axes with size 1. Returns
    ``(mean, variance)``, both of ``x``'s shape without (or with size-1) ``axes``; the
    variance is the population variance ``mean((x - mean)^2)``. Raises ``ValueError`` for an
    axis out of range. Gradients: those of ``tg.mean`` and ``tg.var``
    (``dvar/dx = 2 (x - mean) / N``), exact to any order.
    """
    x = convert_to_tensor(x)
    axis = tuple(axes) if isinstance(axes, (list, tuple)) else axes
    return mean(x, axis=axis, keepdims=keepdims), var(x, axis=axis, keepdims=keepdims)


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``scale * (x - mean) / sqrt(variance + variance_epsilon) + offset``
    (``tf.nn.batch_normalization``), computed as TensorFlow does:
    ``inv = scale / sqrt(variance + eps)``, ``x * inv + (offset - mean * inv)``.

    x: floating, any shape; mean, variance, offset, scale: tensors that broadcast to ``x``
    (typically from :func:`moments` with ``keepdims=True``, or of shape ``(C,)`` for the last
    axis); offset and scale may be ``None`` (0 and 1); variance_epsilon: a small float.
    Result: ``x``'s shape. Gradient: that of the composition (to every input).
    """
    inv = 1.0 / sqrt(variance + variance_epsilon)
    if scale is not None:
        inv = inv * scale
    shift = -(mean * inv) if offset is None else offset - mean * inv
    return convert_to_tensor(x) * inv + shift


def layer_normalization(x, axis=-1, epsilon=1e-3, gamma=None, beta=None, name=None):
    """Layer normalisation (Ba et al. 2016): each slice of ``x`` over ``axis`` normalised to
    mean 0 and variance 1, then scaled by ``gamma`` and shifted by ``beta``.

    This is what ``tf.keras.layers.LayerNormalization(axis, epsilon)`` computes (TensorFlow
    has no ``tf.nn`` function for it; the name and the Keras default ``epsilon=1e-3`` are
    kept): ``moments(x, axis, keepdims=True)`` then :func:`batch_normalization`. x: floating;
    axis: an int or a sequence of ints; gamma, beta: ``None`` or tensors of the normalised
    axes' shape (``x.shape[axis]`` for one axis), broadcast against ``x``. Result: ``x``'s
    shape. Raises ``ValueError`` for an axis out of range or a ``gamma``/``beta`` of another
    shape. Gradient: that of the composition, exact to any order.
    """
    x = convert_to_tensor(x)
    axes = _axes(axis, x.ndim)
    params = tuple(x.shape[a] for a in axes)
    broadcast = tuple(n if i in axes else 1 for i, n in enumerate(x.shape))
    m, v = moments(x, axes, keepdims=True)

    def shaped(p, what):
        if p is None:
            return None
        p = convert_to_tensor(p)
        if p.shape != params:
            raise ValueError(f"layer_normalization: {what} must have the shape {params} of "
                             f"x's axes {list(axes)} (x has shape {x.shape}), got {p.shape}")
        return reshape(p, broadcast)

    return batch_normalization(x, m, v, shaped(beta, "beta"), shaped(gamma, "gamma"), epsilon)


__all__ = ["moments", "batch_normalization", "layer_normalization"]
