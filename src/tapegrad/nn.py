"""``tg.nn``: neural-network functions with TensorFlow's names and semantics (``tf.nn``).

The activations and sparse/sigmoid cross-entropies are each one primitive op named as
TensorFlow's op type (``"Relu"``, ``"Softmax"``, ...), defined in :mod:`tapegrad.ops.nn` with
its forward and gradient side by side; dropout, the dense cross-entropy, ``l2_loss``,
``embedding_lookup`` (there) and the normalisations (:mod:`tapegrad.ops.normalization`) are
compositions of ops; ``one_hot`` makes a constant.
"""
from __future__ import annotations

from .ops.nn import (elu, gelu, leaky_relu, log_softmax, relu, sigmoid,
                     sigmoid_cross_entropy_with_logits, softmax, softplus,
                     sparse_softmax_cross_entropy_with_logits)
from .ops.nn import (dropout, embedding_lookup, l2_loss, one_hot,
                     softmax_cross_entropy_with_logits)
from .ops.normalization import batch_normalization, layer_normalization, moments

__all__ = ["relu", "leaky_relu", "elu", "sigmoid", "softplus", "gelu", "softmax", "log_softmax",
           "sparse_softmax_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits",
           "softmax_cross_entropy_with_logits", "dropout", "one_hot", "l2_loss",
           "embedding_lookup", "moments", "batch_normalization", "layer_normalization"]
