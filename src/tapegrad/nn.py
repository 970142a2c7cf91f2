"""``tg.nn``: neural-network functions with TensorFlow's names and semantics (``tf.nn``).

Each function is one primitive op named as TensorFlow's op type (``"Relu"``, ``"Softmax"``,
...), defined in :mod:`tapegrad.ops.nn` with its forward and gradient side by side.
"""
from __future__ import annotations

from .ops.nn import (elu, gelu, leaky_relu, log_softmax, relu, sigmoid,
                     sigmoid_cross_entropy_with_logits, softmax, softplus,
                     sparse_softmax_cross_entropy_with_logits)

__all__ = ["relu", "leaky_relu", "elu", "sigmoid", "softplus", "gelu", "softmax", "log_softmax",
           "sparse_softmax_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits"]
