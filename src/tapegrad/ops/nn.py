"""Neural-network functions with TensorFlow's names and semantics (``tf.nn``).

Each function is one primitive op named as TensorFlow's op type (``"Relu"``, ``"Softmax"``, ...):
its forward runs on backend arrays through the Array API, its gradient is written with
tapegrad ops (so every gradient is differentiable again) and stands next to it. Forwards are
numerically stable for inputs of any magnitude: softmax and log-softmax subtract the row
maximum, sigmoid and the cross-entropies only ever exponentiate ``-|x|``.

The ``name`` argument of each function is accepted for TensorFlow compatibility and ignored.

``dropout``, ``softmax_cross_entropy_with_logits``, ``l2_loss`` and ``embedding_lookup`` are
compositions of differentiable ops (exact, differentiable to any order, with their JVPs);
``one_hot`` makes a constant. Normalisation (``moments``, ``batch_normalization``,
``layer_normalization``) is in :mod:`.normalization`.
"""
from __future__ import annotations

import math

import numpy as _np

from .. import _backend
from .. import random as _random
from .._backend import namespace as _ns
from .._registry import Arg, RegisterGradient, RegisterJVP, Sample, primitive
from .._tensor import Tensor
from .clipping import clip_by_norm
from .creation import convert_to_tensor
from .elementwise import exp, tanh, where
from .indexing import take
from .manipulation import reshape
from .reductions import sum as _sum

__all__ = ["relu", "leaky_relu", "elu", "sigmoid", "softplus", "gelu", "softmax", "log_softmax",
           "sparse_softmax_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits",
           "softmax_cross_entropy_with_logits", "dropout", "one_hot", "l2_loss",
           "embedding_lookup"]

_UNARY = [Sample((3, 4)), Sample(()), Sample((0, 3)), Sample((1,))]


# --- erf kernel (the Array API standard has no erf) ----------------------------------------------
def _numpy_erf(x):
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is optional
        x = _np.asarray(x)
        return _np.vectorize(math.erf, otypes=[x.dtype])(x)
    return erf(x)


try:
    _backend.kernel(_np, "erf")
except NotImplementedError:
    _backend.register_kernel("numpy", "erf", _numpy_erf)


# --- relu, leaky_relu, elu -----------------------------------------------------------------------
@primitive("Relu", real_only=True, samples=_UNARY)
def _relu(features):
    return _ns(features).maximum(features, 0)


@RegisterJVP("Relu")
def _relu_jvp(op, t):
    return _relu_backprop(t, op.outputs[0])  # diagonal Jacobian: the same mask


@RegisterGradient("Relu", reads="outputs")
def _relu_grad(op, dy):
    return _relu_backprop(dy, op.outputs[0])


@primitive("ReluGrad", real_only=True, samples=[Sample((3, 4), Arg((3, 4), (0.1, 1.0))),
                                Sample((3, 4), Arg((3, 4), (-1.0, 1.0)))])
def _relu_backprop(dy, y):
    # TF ReluGrad: dy where y > 0, else 0 (subgradient 0 at the kink); one fused kernel
    xp = _ns(dy, y)
    return dy * xp.astype(y > 0, dy.dtype)


@RegisterGradient("ReluGrad", reads="inputs")
def _relu_backprop_grad(op, ddx):
    # linear in dy with a piecewise-constant mask: d/d(dy) = the same mask, d/dy = 0
    return _relu_backprop(ddx, op.inputs[1]), None


@RegisterJVP("ReluGrad")
def _relu_backprop_jvp(op, tdy, ty):
    # linear in dy with a piecewise-constant mask: the same mask on dy's tangent, none from y
    return None if tdy is None else _relu_backprop(tdy, op.inputs[1])


def relu(features, name=None):
    """Rectified linear unit ``max(features, 0)``, elementwise.

    features: any shape, real dtype. Result: same shape and dtype.
    Gradient: ``dy`` where ``features > 0``, else 0 (TensorFlow's ReluGrad; 0 at the kink).
    """
    return _relu(features)


@primitive("LeakyRelu", real_only=True, samples=[*_UNARY, Sample((3, 4), alpha=0.1)])
def _leaky_relu(features, *, alpha=0.2):
    return _ns(features).where(features > 0, features, alpha * features)


@RegisterGradient("LeakyRelu")
def _leaky_relu_grad(op, dy):
    # TF LeakyReluGrad: dy where x > 0, else alpha * dy
    return where(op.inputs[0] > 0, dy, dy * op.attrs.get("alpha", 0.2))


RegisterJVP("LeakyRelu")(_leaky_relu_grad)  # a diagonal Jacobian: the gradient's formula


def leaky_relu(features, alpha=0.2, name=None):
    """Leaky ReLU: ``features`` where positive, else ``alpha * features`` (elementwise).

    features: any shape, floating dtype; alpha: Python float. Result: same shape and dtype.
    Gradient: ``dy`` where ``features > 0``, else ``alpha * dy`` (TensorFlow's LeakyReluGrad).
    """
    return _leaky_relu(features, alpha=alpha)


@primitive("Elu", real_only=True, samples=_UNARY)
def _elu(features):
    xp = _ns(features)
    return xp.where(features > 0, features, xp.expm1(xp.minimum(features, 0)))


@RegisterGradient("Elu")
def _elu_grad(op, dy):
    # d/dx (e^x - 1) = e^x = y + 1 for x <= 0 (TF EluGrad)
    y = op.outputs[0]
    return where(op.inputs[0] > 0, dy, dy * (y + 1.0))


RegisterJVP("Elu")(_elu_grad)  # a diagonal Jacobian: the gradient's formula


def elu(features, name=None):
    """Exponential linear unit: ``features`` where positive, else ``exp(features) - 1``.

    features: any shape, floating dtype. Result: same shape and dtype.
    Gradient: ``dy`` where ``features > 0``, else ``dy * (y + 1)`` (TensorFlow's EluGrad).
    """
    return _elu(features)


# --- sigmoid, softplus ---------------------------------------------------------------------------
@primitive("Sigmoid", real_only=True, samples=_UNARY)
def _sigmoid(x):
    xp = _ns(x)
    e = xp.exp(-xp.abs(x))  # never overflows
    r = 1.0 / (1.0 + e)
    return xp.where(x >= 0, r, e * r)


@RegisterGradient("Sigmoid")
def _sigmoid_grad(op, dy):
    # sigma' = sigma (1 - sigma) (TF SigmoidGrad)
    y = op.outputs[0]
    return dy * (y * (1.0 - y))


RegisterJVP("Sigmoid")(_sigmoid_grad)  # a diagonal Jacobian: the gradient's formula


def sigmoid(x, name=None):
    """Logistic function ``1 / (1 + exp(-x))``, elementwise, stable for any magnitude of ``x``.

    x: any shape, floating dtype. Result: same shape and dtype, in [0, 1].
    Gradient: ``dy * y * (1 - y)`` (TensorFlow's SigmoidGrad).
    """
    return _sigmoid(x)


@primitive("Softplus", real_only=True, samples=_UNARY)
def _softplus(features):
    return _ns(features).logaddexp(features, 0.0)


@RegisterGradient("Softplus")
def _softplus_grad(op, dy):
    # d/dx log(1 + e^x) = sigmoid(x) (TF SoftplusGrad)
    return dy * _sigmoid(op.inputs[0])


RegisterJVP("Softplus")(_softplus_grad)  # a diagonal Jacobian: the gradient's formula


def softplus(features, name=None):
    """``log(1 + exp(features))``, elementwise, computed as ``logaddexp(features, 0)`` (stable).

    features: any shape, floating dtype. Result: same shape and dtype.
    Gradient: ``dy * sigmoid(features)`` (TensorFlow's SoftplusGrad).
    """
    return _softplus(features)


# --- gelu ----------------------------------------------------------------------------------------
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_C = math.sqrt(2.0 / math.pi)
_K = 0.044715


@primitive("Gelu", real_only=True, samples=[*_UNARY, Sample((3, 4), approximate=True),
                            Sample((), approximate=True)])
def _gelu(features, *, approximate=False):
    xp = _ns(features)
    if approximate:
        return 0.5 * features * (1.0 + xp.tanh(_C * (features + _K * features ** 3)))
    return 0.5 * features * (1.0 + _backend.kernel(xp, "erf")(features * _SQRT_HALF))


@RegisterGradient("Gelu")
def _gelu_grad(op, dy):
    return _gelu_grad_op(dy, op.inputs[0], approximate=op.attrs.get("approximate", False))


RegisterJVP("Gelu")(_gelu_grad)  # a diagonal Jacobian: the gradient's formula


@primitive("GeluGrad", real_only=True,
           samples=[Sample((3, 4), (3, 4)), Sample((3, 4), (4,)), Sample((), ()),
                    Sample((0, 2), (2,)), Sample((1,), (1,)),
                    Sample((3, 4), (3, 4), approximate=True),
                    Sample((2, 3), (3,), approximate=True)])
def _gelu_grad_op(dy, features, *, approximate=False):
    # dy * gelu'(x). Exact: gelu' = Phi(x) + x phi(x) (Hendrycks & Gimpel 2016).
    # Tanh form, u = c (x + k x^3), t = tanh(u): gelu' = (1 + t) / 2 + x (1 - t^2) u' / 2.
    xp = _ns(features)
    x = features
    if approximate:
        t = xp.tanh(_C * (x + _K * x ** 3))
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (_C * (1.0 + 3.0 * _K * x * x))
    else:
        cdf = 0.5 * (1.0 + _backend.kernel(xp, "erf")(x * _SQRT_HALF))
        d = cdf + x * (_INV_SQRT_2PI * xp.exp(-0.5 * x * x))
    return dy * d


@RegisterGradient("GeluGrad")
def _gelu_grad_grad(op, ddy):
    # d/d(dy) = gelu'(x), itself a GeluGrad; d/dx = ddy * dy * gelu''(x) with exact
    # gelu'' = phi(x) (2 - x^2); tanh form gelu'' = s u' + x s (u'' - 2 t u'^2) / 2, s = 1 - t^2
    dy, x = op.inputs
    approximate = op.attrs.get("approximate", False)
    return _gelu_grad_op(ddy, x, approximate=approximate), ddy * dy * _gelu_d2(x, approximate)


def _gelu_d2(x, approximate):
    if approximate:
        t = tanh(_C * (x + _K * x * x * x))
        s = 1.0 - t * t
        u1 = _C * (1.0 + 3.0 * _K * x * x)
        u2 = (6.0 * _C * _K) * x
        return s * u1 + 0.5 * x * s * (u2 - 2.0 * t * u1 * u1)
    return _INV_SQRT_2PI * exp(-0.5 * x * x) * (2.0 - x * x)


@RegisterJVP("GeluGrad")
def _gelu_grad_jvp(op, tdy, tx):
    # d(dy gelu'(x)) = gelu'(x) d(dy) + dy gelu''(x) dx (both partial Jacobians diagonal)
    dy, x = op.inputs
    approximate = op.attrs.get("approximate", False)
    terms = []  # each term has the output's (broadcast) shape
    if tdy is not None:
        terms.append(_gelu_grad_op(tdy, x, approximate=approximate))
    if tx is not None:
        terms.append(tx * dy * _gelu_d2(x, approximate))
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def gelu(features, approximate=False, name=None):
    """Gaussian error linear unit ``x * Phi(x)`` (Hendrycks & Gimpel 2016), elementwise.

    features: any shape, floating dtype. ``approximate=False`` uses ``erf`` (a per-backend
    kernel; NumPy: scipy.special.erf, else math.erf vectorized); ``approximate=True`` uses
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``. Result: same shape and dtype.
    Gradient: ``dy * (Phi(x) + x phi(x))`` (resp. the derivative of the tanh form), itself the
    op ``GeluGrad`` with a registered gradient, so gelu is differentiable to any order.
    Raises ``NotImplementedError`` for exact gelu on a backend with no ``erf`` kernel.
    """
    return _gelu(features, approximate=bool(approximate))


# --- softmax, log_softmax ------------------------------------------------------------------------
_SOFTMAX = [Sample((3, 4)), Sample((2, 3, 4), axis=1), Sample((1,)), Sample((0, 3)),
            Sample((1, 1), axis=0), Sample((5,), domain=(-5.0, 5.0))]


@primitive("Softmax", real_only=True, samples=_SOFTMAX)
def _softmax(logits, *, axis=-1):
    xp = _ns(logits)
    e = xp.exp(logits - xp.max(logits, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


@RegisterGradient("Softmax")
def _softmax_grad(op, dy):
    # Jacobian-vector product of softmax: y * (dy - sum(dy * y)) (Bridle 1990; TF SoftmaxGrad)
    y = op.outputs[0]
    return y * (dy - _sum(dy * y, axis=op.attrs.get("axis", -1), keepdims=True))


RegisterJVP("Softmax")(_softmax_grad)  # the Jacobian diag(y) - y y^T is symmetric


@RegisterJVP("LogSoftmax")
def _log_softmax_jvp(op, t):
    # the Jacobian I - 1 softmax^T applied to t: t - sum(softmax * t), softmax = exp(y)
    y = op.outputs[0]
    return t - _sum(exp(y) * t, axis=op.attrs.get("axis", -1), keepdims=True)


def softmax(logits, axis=-1, name=None):
    """``exp(logits) / sum(exp(logits), axis)``, computed after subtracting the max (stable).

    logits: floating, at least 1-d; axis: int (``None`` means -1, as in TensorFlow). Result:
    same shape and dtype. Raises ``numpy.exceptions.AxisError`` (a ``ValueError``) for a bad axis.
    Gradient: ``y * (dy - sum(dy * y, axis))``, the softmax Jacobian ``diag(y) - y y^T``
    applied to ``dy`` (Bridle 1990; TensorFlow's SoftmaxGrad).
    """
    return _softmax(logits, axis=-1 if axis is None else axis)


@primitive("LogSoftmax", real_only=True, samples=_SOFTMAX)
def _log_softmax(logits, *, axis=-1):
    xp = _ns(logits)
    s = logits - xp.max(logits, axis=axis, keepdims=True)
    return s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))


@RegisterGradient("LogSoftmax")
def _log_softmax_grad(op, dy):
    # d/dx (x - logsumexp x) applied to dy: dy - softmax * sum(dy), softmax = exp(y) (as TF)
    y = op.outputs[0]
    return dy - exp(y) * _sum(dy, axis=op.attrs.get("axis", -1), keepdims=True)


def log_softmax(logits, axis=-1, name=None):
    """``logits - log(sum(exp(logits), axis))``, computed after subtracting the max (stable).

    logits: floating, at least 1-d; axis: int (``None`` means -1). Result: same shape and dtype.
    Gradient: ``dy - exp(y) * sum(dy, axis)`` (the Jacobian ``I - 1 softmax^T`` applied to
    ``dy``; TensorFlow's LogSoftmax gradient).
    """
    return _log_softmax(logits, axis=-1 if axis is None else axis)


# --- cross-entropies -----------------------------------------------------------------------------
_WHO = "sparse_softmax_cross_entropy_with_logits"


def _is(array, kinds, category):
    kind = getattr(array.dtype, "kind", None)  # NumPy/CuPy dtypes: a cheap check; others: isdtype
    return kind in kinds if kind is not None else _ns(array).isdtype(array.dtype, category)


def _check_labels(xp, labels, logits):
    if not _is(logits, "f", "real floating"):
        raise TypeError(f"{_WHO}: logits must have a real floating dtype, got {logits.dtype}; "
                        "cast them with tg.astype(logits, tg.float32)")
    if logits.ndim == 0:
        raise ValueError(f"{_WHO}: logits must have at least 1 dimension (the last axis indexes "
                         "classes), got a 0-d tensor")
    if not _is(labels, "iu", "integral"):
        raise TypeError(f"{_WHO}: labels must be integer class indices, got dtype {labels.dtype}; "
                        "cast them with tg.astype(labels, tg.int64) (for one-hot or probability "
                        "labels, use -sum(labels * log_softmax(logits), axis=-1))")
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"{_WHO}: labels of shape {tuple(labels.shape)} must have the shape of "
                         f"logits without its last axis; logits have shape {tuple(logits.shape)}, "
                         f"so labels need shape {tuple(logits.shape[:-1])}")
    n = logits.shape[-1]
    if labels.size:
        if type(labels) is _np.ndarray:  # also beside traced logits; methods: no dispatch
            lo, hi = int(labels.min()), int(labels.max())
        else:
            lxp = _ns(labels)
            try:
                lo, hi = int(lxp.min(labels)), int(lxp.max(labels))
            except TypeError:  # traced labels (tg.function): values unknown until run
                return
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{_WHO}: received a label value of {bad} which is outside the valid "
                             f"range of [0, {n}) for logits with {n} classes; labels must be "
                             "class indices")


def _index_array(xp, labels):
    labels = labels._value if isinstance(labels, Tensor) else labels
    return labels if hasattr(labels, "dtype") and hasattr(labels, "shape") else xp.asarray(labels)


@primitive("SparseSoftmaxCrossEntropyWithLogits", real_only=True, samples=[
    Sample(_np.asarray([0, 3, 1]), (3, 4)), Sample(_np.asarray(2), (5,)),
    Sample(_np.asarray([[0, 1], [2, 0]]), (2, 2, 3)), Sample(_np.zeros((0,), dtype=int), (0, 3)),
    Sample(_np.asarray([0]), (1, 1)),
])
def _sparse_softmax_ce(labels, logits):
    # log(sum(exp(s))) - s[label] with s = logits - max(logits): log-softmax's negative at the
    # label (TF's SparseSoftmaxCrossEntropyWithLogits)
    xp = _ns(logits)
    labels = _index_array(xp, labels)
    _check_labels(xp, labels, logits)
    if type(logits) is _np.ndarray and type(labels) is _np.ndarray:
        # the same with NumPy's ufunc reductions and flat indexing: 5.8 us for 16 x 10 against
        # 10.5 through np.max, np.sum and take_along_axis (their Python dispatch)
        s = logits - _np.maximum.reduce(logits, axis=-1, keepdims=True)
        k = s.shape[-1]
        picked = s.reshape(-1, k)[_np.arange(labels.size), labels.reshape(-1)]
        return _np.log(_np.add.reduce(_np.exp(s), axis=-1)) - picked.reshape(labels.shape)
    s = logits - xp.max(logits, axis=-1, keepdims=True)
    picked = xp.take_along_axis(s, labels[..., None], axis=-1)[..., 0]
    return xp.log(xp.sum(xp.exp(s), axis=-1)) - picked


@RegisterGradient("SparseSoftmaxCrossEntropyWithLogits", reads="inputs")
def _sparse_softmax_ce_grad(op, dy):
    # d loss / d logits = softmax(logits) - onehot(labels) (TF SparseSoftmaxXent backprop)
    labels, logits = op.inputs
    return None, _sparse_softmax_ce_backprop(dy, labels, logits)


@primitive("SparseSoftmaxCrossEntropyWithLogitsGrad", real_only=True, samples=[
    Sample((3,), _np.asarray([0, 3, 1]), (3, 4)), Sample((), _np.asarray(2), (5,)),
    Sample((2, 2), _np.asarray([[0, 1], [2, 0]]), (2, 2, 3)),
    Sample((0,), _np.zeros((0,), dtype=int), (0, 3)),
])
def _sparse_softmax_ce_backprop(dy, labels, logits):
    # dy[..., None] * (softmax(logits) - onehot(labels)) in one kernel (the gradient of
    # SparseSoftmaxCrossEntropyWithLogits wrt its logits, TF's "backprop" output)
    xp = _ns(logits, dy)  # a traced dy (a JVP's tangent) with constant logits: JAX's
    labels = _index_array(xp, labels)
    if type(logits) is _np.ndarray and type(dy) is _np.ndarray:
        # in place, with NumPy's ufunc reductions: 7.3 us for 16 x 10 against 12.0
        g = _np.exp(logits - _np.maximum.reduce(logits, axis=-1, keepdims=True))
        g /= _np.add.reduce(g, axis=-1, keepdims=True)
        g -= labels[..., None] == _np.arange(logits.shape[-1])
        g *= dy[..., None]
        return g
    e = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))
    p = e / xp.sum(e, axis=-1, keepdims=True)
    onehot = xp.astype(labels[..., None] == xp.arange(logits.shape[-1]), p.dtype)
    return xp.expand_dims(dy, axis=-1) * (p - onehot)


def _scaled_softmax_jvp(dy, logits, v):
    # dy[..., None] * J v, with J = diag(p) - p p^T the (symmetric) Jacobian of p = softmax
    p = _softmax(logits, axis=-1)
    return reshape(dy, dy.shape + (1,)) * p * (v - _sum(p * v, axis=-1, keepdims=True))


@RegisterGradient("SparseSoftmaxCrossEntropyWithLogitsGrad", reads="inputs")
def _sparse_softmax_ce_backprop_grad(op, ddx):
    # g = dy (p - onehot) with p = softmax(logits): d/d(dy) = sum(ddx (p - onehot), -1), and
    # as J is symmetric, d/d(logits) = dy J ddx
    dy, labels, logits = op.inputs
    need_dy, _, need_logits = op.needs_input_grad
    d_dy = _sum(ddx * _softmax_minus_onehot(labels, logits), axis=-1) if need_dy else None
    return d_dy, None, _scaled_softmax_jvp(dy, logits, ddx) if need_logits else None


@RegisterJVP("SparseSoftmaxCrossEntropyWithLogitsGrad")
def _sparse_softmax_ce_backprop_jvp(op, tdy, tlabels, tlogits):
    # linear in dy; d/d(logits) applied to a tangent is dy J t
    dy, labels, logits = op.inputs
    terms = []
    if tdy is not None:
        terms.append(_sparse_softmax_ce_backprop(tdy, labels, logits))
    if tlogits is not None:
        terms.append(_scaled_softmax_jvp(dy, logits, tlogits))
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _softmax_minus_onehot(labels, logits):
    xp = _ns(logits._value)
    idx = _index_array(xp, labels)
    onehot = xp.astype(idx[..., None] == xp.arange(logits.shape[-1]), logits._value.dtype)
    return _softmax(logits, axis=-1) - Tensor(onehot)


@RegisterJVP("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_ce_jvp(op, tlabels, tlogits):
    # d loss = sum((softmax(logits) - onehot(labels)) * d logits, axis=-1) (the gradient's row)
    return _sum(_softmax_minus_onehot(*op.inputs) * tlogits, axis=-1)


def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example softmax cross-entropy ``-log_softmax(logits)[..., labels]``.

    labels: integer class indices of shape ``B`` (any batch shape), each in ``[0, C)``;
    logits: floating, shape ``B + (C,)``. Result: losses of shape ``B``, logits' dtype. Stable
    for logits of any magnitude. Raises ``TypeError`` for non-integer labels or non-floating
    logits, ``ValueError`` for 0-d logits, a shape mismatch or a label outside ``[0, C)``.
    Gradient wrt logits: ``dy[..., None] * (softmax(logits) - onehot(labels))`` (TensorFlow's
    SparseSoftmaxCrossEntropyWithLogits backprop); labels get no gradient.
    """
    return _sparse_softmax_ce(labels, logits)


_rng = _np.random.default_rng(1)


@primitive("SigmoidCrossEntropyWithLogits", real_only=True, samples=[
    Sample(_rng.uniform(0.05, 0.95, (3, 4)), (3, 4)), Sample(_np.asarray(0.3), ()),
    Sample(_np.zeros((0, 2)), (0, 2)), Sample(_np.asarray([1.0]), (1,), domain=(-6.0, 6.0)),
])
def _sigmoid_ce(labels, logits):
    xp = _ns(logits)
    if getattr(labels, "shape", ()) != getattr(logits, "shape", ()):
        raise ValueError(f"sigmoid_cross_entropy_with_logits: logits and labels must have the "
                         f"same shape, got logits {tuple(getattr(logits, 'shape', ()))} and "
                         f"labels {tuple(getattr(labels, 'shape', ()))}")
    return xp.maximum(logits, 0) - logits * labels + xp.log1p(xp.exp(-xp.abs(logits)))


@RegisterGradient("SigmoidCrossEntropyWithLogits")
def _sigmoid_ce_grad(op, dy):
    # differentiating TF's formula (smooth everywhere): d/dx = sigmoid(x) - z, d/dz = -x
    labels, logits = op.inputs
    return -(dy * logits), dy * (_sigmoid(logits) - labels)


@RegisterJVP("SigmoidCrossEntropyWithLogits")
def _sigmoid_ce_jvp(op, tz, tx):
    # diagonal partial Jacobians: d loss = -x dz + (sigmoid(x) - z) dx
    labels, logits = op.inputs
    terms = []
    if tz is not None:
        terms.append(-(tz * logits))
    if tx is not None:
        terms.append(tx * (_sigmoid(logits) - labels))
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def sigmoid_cross_entropy_with_logits(labels, logits, name=None):
    """Elementwise logistic loss ``-z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x))``.

    labels ``z`` and logits ``x``: same shape, floating dtype (labels usually in [0, 1]).
    Computed as ``max(x, 0) - x z + log(1 + exp(-|x|))`` (TensorFlow's formula, stable for any
    magnitude). Result: same shape. Raises ``ValueError`` if the shapes differ.
    Gradient: ``dy * (sigmoid(x) - z)`` wrt logits, ``-dy * x`` wrt labels.
    """
    return _sigmoid_ce(labels, logits)


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """Per-example softmax cross-entropy with dense labels, ``-sum(labels *
    log_softmax(logits), axis)`` (``tf.nn.softmax_cross_entropy_with_logits``, TF 2).

    labels, logits: floating, the same shape (each slice of ``labels`` along ``axis`` a
    probability distribution); axis: the class axis. Result: the shape without ``axis``. Stable
    for logits of any magnitude (``log_softmax`` subtracts the max). Raises ``ValueError`` if
    the shapes differ or ``logits`` is 0-d. Gradients (of the composition, to any order): wrt
    logits ``dy * (softmax(logits) * sum(labels) - labels)``, which is TensorFlow's
    ``softmax - labels`` for labels that sum to 1; wrt labels ``-dy * log_softmax(logits)``
    (TensorFlow 2 differentiates the labels too).
    """
    labels, logits = convert_to_tensor(labels), convert_to_tensor(logits)
    if logits.ndim == 0:
        raise ValueError("softmax_cross_entropy_with_logits: logits must have at least 1 "
                         "dimension (the class axis), got a 0-d tensor")
    if labels.shape != logits.shape:
        raise ValueError(f"softmax_cross_entropy_with_logits: labels and logits must have the "
                         f"same shape, got labels {labels.shape} and logits {logits.shape}")
    return -_sum(labels * log_softmax(logits, axis=axis), axis=axis)


def l2_loss(t, name=None):
    """``sum(t ** 2) / 2`` (``tf.nn.l2_loss``): half the squared L2 norm, without the sqrt.

    t: floating, any shape. Result: a 0-d tensor of ``t``'s dtype. Gradient: ``dy * t``.
    """
    t = convert_to_tensor(t)
    return _sum(t * t) / 2


def dropout(x, rate, noise_shape=None, seed=None, name=None, *, training=True):
    """Zero each element of ``x`` with probability ``rate`` and scale the others by
    ``1 / (1 - rate)``, so the expected value is ``x`` (``tf.nn.dropout``, TF 2).

    x: floating, any shape; rate: a Python number (or concrete 0-d tensor) in ``[0, 1)``;
    noise_shape: None (one draw per element) or a sequence of ``x.ndim`` ints, each ``x``'s
    dimension or 1 (``None`` entries mean ``x``'s), the shape of the keep/drop draws, which
    are broadcast (``(batch, 1)`` drops whole rows); seed: an op seed for ``tg.random`` (with
    ``tg.random.set_seed``, the masks repeat; under ``tg.function`` each call draws anew);
    training: keyword-only, a Keras-style addition: ``False`` returns ``x`` unchanged (as
    does ``rate == 0``). An element is kept where a uniform draw ``u`` in ``[0, 1)`` has
    ``u >= rate`` (TensorFlow's rule). Result: ``x``'s shape and dtype, ``x * mask``, the
    ``mask`` (0 or ``1 / (1 - rate)``) a constant, so the gradient is ``dy * mask`` (to any
    order) and the JVP ``t * mask``. Raises ``ValueError`` for a rate outside ``[0, 1)``, a
    non-floating ``x`` or a bad ``noise_shape``; ``TypeError`` for a non-numeric rate.
    """
    x = convert_to_tensor(x)
    try:
        p = float(rate) if not isinstance(rate, (str, bytes)) else None
    except TypeError:  # also a rate traced by tg.function: the mask's scale must be known
        p = None
    if p is None:
        raise TypeError(f"dropout: rate must be a number in [0, 1) (a Python number or a "
                        f"concrete 0-d tensor), got {rate!r}")
    if not 0 <= p < 1:
        raise ValueError(f"dropout: rate must be a scalar tensor or a float in the range [0, 1), "
                         f"got rate={p}")
    if not _is(x._value, "f", "real floating"):
        raise ValueError(f"dropout: x must have a floating dtype as it will be scaled, got "
                         f"{x.dtype}")
    if not training or p == 0:
        return x
    shape = x.shape if noise_shape is None else _noise_shape(x.shape, noise_shape)
    xp = _ns(x._value)
    u = _random.uniform(shape, dtype=_backend.np_dtype(x.dtype), seed=seed)._value
    keep = xp.asarray(u) >= p
    return x * Tensor(xp.astype(keep, x._value.dtype) * (1.0 / (1.0 - p)))


def _noise_shape(shape, noise_shape):
    noise = [int(n) if n is not None else None for n in noise_shape]
    if len(noise) != len(shape):
        raise ValueError(f"dropout: noise_shape {tuple(noise_shape)} must have one entry per "
                         f"dimension of x, which has shape {shape}")
    noise = [d if n is None else n for n, d in zip(noise, shape)]
    if any(n not in (1, d) for n, d in zip(noise, shape)):
        raise ValueError(f"dropout: noise_shape {tuple(noise)} must broadcast to x's shape "
                         f"{shape}: each entry must be x's dimension or 1")
    return tuple(noise)


def _python_dtype(value):
    """TensorFlow's dtype for an ``on_value``/``off_value``: a tensor's own, else float32 for
    Python floats, int32 for ints, bool for bools."""
    if hasattr(value, "dtype"):
        return _backend.np_dtype(value.dtype)
    if isinstance(value, bool):
        return _np.dtype(_np.bool_)
    return _np.dtype(_np.int32 if isinstance(value, int) else _np.float32)


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """A one-hot encoding of ``indices`` (``tf.one_hot``): ``on_value`` where the new axis's
    position equals the index, ``off_value`` elsewhere.

    indices: integers of any shape ``B``; an index outside ``[0, depth)`` gives a slice of
    only ``off_value`` (TensorFlow's rule). depth: a non-negative int, the size of the new
    axis. on_value, off_value: scalars (default 1 and 0). axis: where the new axis goes,
    ``-1``/``None`` (last, shape ``B + (depth,)``) or ``0 .. len(B)``. dtype: the result's;
    by default that of ``on_value``/``off_value`` if given (Python floats float32, ints int32),
    else float32, as in TensorFlow. Result: a constant tensor on ``indices``' backend (not
    differentiable, as in TensorFlow). Raises ``TypeError`` for non-integer indices,
    ``ValueError`` for a negative depth or an axis out of range.
    """
    idx = indices._value if isinstance(indices, Tensor) else _backend.asarray(indices)
    xp = _ns(idx)
    if not _is(idx, "iu", "integral"):
        raise TypeError(f"one_hot: indices must be integers, got dtype {idx.dtype}")
    if isinstance(depth, Tensor):
        depth = int(depth)
    if isinstance(depth, bool) or not isinstance(depth, (int, _np.integer)) or depth < 0:
        raise ValueError(f"one_hot: depth must be a non-negative int, got {depth!r}")
    axis = -1 if axis is None else axis
    if not -1 <= axis <= idx.ndim:
        raise ValueError(f"one_hot: axis must be -1 or in [0, {idx.ndim}] for indices of "
                         f"shape {tuple(idx.shape)}, got {axis}")
    if dtype is None:
        given = [v for v in (on_value, off_value) if v is not None]
        dtype = _python_dtype(given[0]) if given else _np.float32
    dt = _backend.xp_dtype(xp, dtype)

    def value(v, default):
        v = default if v is None else (v._value if isinstance(v, Tensor) else v)
        return xp.asarray(v, dtype=dt)

    hot = xp.astype(idx, xp.int64)[..., None] == xp.arange(int(depth), dtype=xp.int64)
    out = xp.where(hot, value(on_value, 1), value(off_value, 0))
    if axis != -1 and axis != idx.ndim:
        n = idx.ndim
        out = xp.permute_dims(out, tuple(range(axis)) + (n,) + tuple(range(axis, n)))
    return Tensor(out)


def embedding_lookup(params, ids, max_norm=None, name=None):
    """Rows of ``params`` at ``ids`` (``tf.nn.embedding_lookup``): ``params[ids]``.

    params: a tensor of shape ``(N,) + E`` (or a list holding one; TensorFlow's sharded
    lists of several are not supported); ids: integers in ``[0, N)`` of any shape ``B``;
    max_norm: if given, each looked-up embedding with an L2 norm above it is rescaled to it
    (``clip_by_norm`` over the ``E`` axes, as TensorFlow). Result: shape ``B + E``. Raises
    ``TypeError`` for non-integer ids or a list of several tensors, ``ValueError`` for an id
    outside ``[0, N)`` (checked when the ids are concrete). Gradient wrt params: the
    cotangent scatter-added into zeros of ``params``' shape (repeated ids accumulate); for a
    Variable, ``GradientTape.gradient`` gives it as :class:`~tapegrad.IndexedSlices` (the
    rows' cotangents at ``ids``, as TensorFlow) when this is its only use; to any order (the
    gather's).
    """
    if isinstance(params, (list, tuple)):
        if len(params) != 1:
            raise TypeError(f"embedding_lookup: params must be one tensor (a list of "
                            f"{len(params)} sharded tensors is not supported); concatenate "
                            "them with tg.concat")
        params = params[0]
    params = convert_to_tensor(params)
    idx = ids._value if isinstance(ids, Tensor) else _backend.asarray(ids)
    if not _is(idx, "iu", "integral"):
        raise TypeError(f"embedding_lookup: ids must be integers, got dtype {idx.dtype}")
    if params.ndim == 0:
        raise ValueError("embedding_lookup: params must have at least 1 dimension (the rows), "
                         "got a 0-d tensor")
    n = params.shape[0]
    try:
        lo, hi = (int(_ns(idx).min(idx)), int(_ns(idx).max(idx))) if idx.size else (0, 0)
    except TypeError:  # traced ids (tg.function): not known before the run
        lo, hi = 0, 0
    if lo < 0 or (idx.size and hi >= n):
        raise ValueError(f"embedding_lookup: id {lo if lo < 0 else hi} is outside [0, {n}) "
                         f"for params of shape {params.shape}")
    out = take(params, idx, axis=0)
    if max_norm is not None:
        out = clip_by_norm(out, max_norm, axes=tuple(range(idx.ndim, out.ndim)))
    return out
