"""``tg.nn``: neural-network functions with TensorFlow's names and semantics (``tf.nn``).

The activations and sparse/sigmoid cross-entropies are each one primitive op named as
TensorFlow's op type (``"Relu"``, ``"Softmax"``, ...), defined in :mod:`tapegrad.ops.nn` with
its forward and gradient side by side; dropout, the dense cross-entropy, ``l2_loss``,
``embedding_lookup`` (there) and the normalisations (:mod:`tapegrad.ops.normalization`) are
compositions of ops; ``one_hot`` makes a constant. Convolutions, deconvolutions and pooling
are N-d primitives in :mod:`tapegrad.ops.convolution` and :mod:`tapegrad.ops.pooling`.
"""
from __future__ import annotations

from .ops.nn import (elu, gelu, leaky_relu, log_softmax, relu, sigmoid,
                     sigmoid_cross_entropy_with_logits, softmax, softplus,
                     sparse_softmax_cross_entropy_with_logits)
from .ops.nn import (dropout, embedding_lookup, l2_loss, one_hot,
                     softmax_cross_entropy_with_logits)
from .ops.normalization import batch_normalization, layer_normalization, moments
from .ops.convolution import (conv1d, conv1d_transpose, conv2d, conv2d_transpose, conv3d,
                              conv3d_transpose, depthwise_conv2d)
from .ops.pooling import avg_pool1d, avg_pool2d, avg_pool3d, max_pool1d, max_pool2d, max_pool3d

__all__ = ["relu", "leaky_relu", "elu", "sigmoid", "softplus", "gelu", "silu", "swish",
           "softmax", "log_softmax",
           "sparse_softmax_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits",
           "softmax_cross_entropy_with_logits", "dropout", "one_hot", "l2_loss",
           "embedding_lookup", "moments", "batch_normalization", "layer_normalization",
           "conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose",
           "conv3d_transpose", "depthwise_conv2d", "max_pool1d", "max_pool2d", "max_pool3d",
           "avg_pool1d", "avg_pool2d", "avg_pool3d"]


def silu(features, beta=1.0):
    """The sigmoid linear unit ``features * sigmoid(beta * features)`` (TensorFlow's
    ``tf.nn.silu``, also named ``swish``; Ramachandran, Zoph & Le 2017, Elfwing et al. 2018).

    features: a real floating Tensor of any shape; beta: a Python float or a scalar Tensor
    (differentiable). The result has ``features``' shape and dtype. A composition of ``sigmoid``
    and products, so its gradient and JVP are theirs: ``d/dx = s + beta x s (1 - s)`` with
    ``s = sigmoid(beta x)``. Raises as ``sigmoid`` does (a complex input: ``TypeError``).
    """
    return features * sigmoid(beta * features)


swish = silu
