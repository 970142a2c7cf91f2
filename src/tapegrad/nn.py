"""``tg.nn``: neural-network functions with TensorFlow's names and semantics (``tf.nn``).

Each function is one primitive op named as TensorFlow's op type (``"Relu"``, ``"Softmax"``,
...), defined in :mod:`tapegrad.ops.nn` with its forward and gradient side by side.
"""
from __future__ import annotations

from .ops.nn import (elu, gelu, leaky_relu, log_softmax, relu, sigmoid,
                     sigmoid_cross_entropy_with_logits, softmax, softplus,
                     sparse_softmax_cross_entropy_with_logits)
from .ops.convolution import (conv1d, conv1d_transpose, conv2d, conv2d_transpose, conv3d,
                              conv3d_transpose, depthwise_conv2d)
from .ops.pooling import avg_pool1d, avg_pool2d, avg_pool3d, max_pool1d, max_pool2d, max_pool3d

__all__ = ["relu", "leaky_relu", "elu", "sigmoid", "softplus", "gelu", "softmax", "log_softmax",
           "sparse_softmax_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits"]
__all__ += ["conv1d", "conv2d", "conv3d", "conv1d_transpose", "conv2d_transpose",
            "conv3d_transpose", "depthwise_conv2d", "max_pool1d", "max_pool2d", "max_pool3d",
            "avg_pool1d", "avg_pool2d", "avg_pool3d"]
