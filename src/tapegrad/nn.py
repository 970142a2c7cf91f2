"""``tg.nn``: neural-network functions with TensorFlow's names and semantics (``tf.nn``).

The activations and sparse/sigmoid cross-entropies are each one primitive op named as
TensorFlow's op type (``"Relu"``, ``"Softmax"``, ...), defined in :mod:`tapegrad.ops.nn` with
its forward and gradient side by side; dropout, the dense cross-entropy, ``l2_loss``,
``embedding_lookup`` (there) and the normalisations (:mod:`tapegrad.ops.normalization`) are
compositions of ops; ``one_hot`` makes a constant. Convolutions, deconvolutions and pooling
are N-d primitives in :mod:`tapegrad.ops.convolution` and :mod:`tapegrad.ops.pooling`.
"""
from __future__ import annotations

from . import config, ops
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
           "avg_pool1d", "avg_pool2d", "avg_pool3d", "compute_average_loss"]


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
    """The sum of ``per_example_loss`` divided by the global batch size (TensorFlow's
    ``tf.nn.compute_average_loss``): in a ``tg.distribute`` replica function each replica
    returns its share of the loss of the global batch, so the gradients the optimizer sums
    across replicas are those of the mean over the global batch.

    per_example_loss: a floating Tensor with at least one axis, the (local) batch first;
    sample_weight: None, or a Tensor broadcasting against it (multiplied in);
    global_batch_size: None, or an int: the divisor. None gives the local batch (the first
    axis) times the replicas in sync (1 outside a replica function); for an uneven last
    batch of a ``MirroredStrategy`` (padded to a multiple of the replicas) it is the batch's
    real row count, and the padding rows are left out of the sum. Returns a 0-d Tensor of
    ``per_example_loss``'s dtype; its gradient is that of the sum and division.

    Raises ``ValueError`` for a 0-d ``per_example_loss`` (as TensorFlow).
    """
    loss = ops.asarray(per_example_loss)
    if loss.ndim == 0:
        raise ValueError("tg.nn.compute_average_loss: per_example_loss is 0-d; pass the loss of "
                         "each example (a Tensor with the batch as its first axis), not their "
                         "mean or sum")
    if sample_weight is not None:
        loss = loss * ops.astype(ops.asarray(sample_weight), loss.dtype)
    ctx = config.replica_context()
    rows = loss.shape[0]
    if ctx is not None:
        loss, rows = ctx._per_example(loss)
    if global_batch_size is not None:
        rows = global_batch_size
    return ops.sum(loss) / ops.astype(ops.asarray(rows), loss.dtype)


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
