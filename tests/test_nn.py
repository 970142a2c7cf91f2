"""tapegrad.nn: values against NumPy/SciPy formulas, stability, gradients, label validation."""
import warnings

import numpy as np
import pytest
import scipy.special as sp

import tapegrad as tg
from tapegrad import nn

rng = np.random.default_rng(0)


def numgrad(f, x, h=1e-6):
    """Central-difference gradient of the scalar function ``f`` at the float64 array ``x``."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def tape_grad(fn, x, w):
    """Gradient of ``sum(fn(x) * w)`` wrt ``x`` by tapegrad."""
    x = tg.constant(x)
    with tg.GradientTape() as t:
        t.watch(x)
        y = tg.sum(fn(x) * w)
    return t.gradient(y, x).numpy()


def check_grad(fn, x, **tol):
    x = np.asarray(x, dtype=np.float64)
    w = rng.normal(size=np.shape(fn(tg.constant(x))))
    ana = tape_grad(fn, x, w)
    num = numgrad(lambda a: float(np.sum(fn(tg.constant(a)).numpy() * w)), x)
    np.testing.assert_allclose(ana, num, rtol=tol.get("rtol", 1e-6), atol=tol.get("atol", 1e-8))


def gelu_ref(x):
    return x * 0.5 * (1 + sp.erf(x / np.sqrt(2)))


def gelu_tanh_ref(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


X = rng.uniform(-3, 3, size=(4, 5))

ACTIVATIONS = [
    (nn.relu, lambda x: np.maximum(x, 0)),
    (nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x)),
    (lambda x: nn.leaky_relu(x, alpha=0.05), lambda x: np.where(x > 0, x, 0.05 * x)),
    (nn.elu, lambda x: np.where(x > 0, x, np.exp(x) - 1)),
    (nn.sigmoid, sp.expit),
    (nn.softplus, lambda x: np.log1p(np.exp(x))),
    (nn.gelu, gelu_ref),
    (lambda x: nn.gelu(x, approximate=True), gelu_tanh_ref),
    (nn.softmax, lambda x: sp.softmax(x, axis=-1)),
    (lambda x: nn.softmax(x, axis=0), lambda x: sp.softmax(x, axis=0)),
    (nn.log_softmax, lambda x: sp.log_softmax(x, axis=-1)),
    (lambda x: nn.log_softmax(x, axis=0), lambda x: sp.log_softmax(x, axis=0)),
]


@pytest.mark.parametrize("fn,ref", ACTIVATIONS)
def test_values_match_reference(fn, ref):
    np.testing.assert_allclose(fn(X).numpy(), ref(X), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fn,ref", ACTIVATIONS)
def test_float32_dtype_kept(fn, ref):
    x32 = X.astype(np.float32)
    y = fn(x32)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), ref(X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn,ref", ACTIVATIONS)
def test_gradients_match_central_differences(fn, ref):
    check_grad(fn, X)


def test_op_types_are_tensorflow_names():
    ops = tg.registered_ops()
    for op_type in ["Relu", "LeakyRelu", "Elu", "Sigmoid", "Softplus", "Gelu", "Softmax",
                    "LogSoftmax", "SparseSoftmaxCrossEntropyWithLogits",
                    "SigmoidCrossEntropyWithLogits"]:
        assert op_type in ops and ops[op_type].samples and ops[op_type].grad is not None
    x = tg.constant([1.0, -2.0])
    with tg.GradientTape() as t:
        t.watch(x)
        nn.relu(x)
    assert [op.type for op in t._ops] == ["Relu"]
    assert tg.nn.relu is nn.relu and set(nn.__all__) <= set(dir(tg.nn))


def test_second_order_softmax_and_gelu():
    # d/dx <grad f(x), u> by nested tapes vs central differences of the first-order gradient
    for fn in [nn.softmax, nn.log_softmax, nn.gelu, lambda x: nn.gelu(x, approximate=True),
               nn.sigmoid, nn.softplus, nn.elu]:
        x0 = rng.uniform(-2, 2, size=(3, 4))
        w, u = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))

        def gu(a):
            return float(np.sum(tape_grad(fn, a, w) * u))

        x = tg.constant(x0)
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = tg.sum(fn(x) * w)
            g = inner.gradient(y, x)
            s = tg.sum(g * u)
        np.testing.assert_allclose(outer.gradient(s, x).numpy(), numgrad(gu, x0),
                                   rtol=1e-5, atol=1e-7)


def test_gelu_second_derivative_closed_form():
    # gelu''(x) = phi(x) (2 - x^2)
    x0 = np.linspace(-3, 3, 7)
    x = tg.constant(x0)
    with tg.GradientTape() as outer:
        outer.watch(x)
        with tg.GradientTape() as inner:
            inner.watch(x)
            y = nn.gelu(x)
        g = inner.gradient(y, x)
    phi = np.exp(-x0**2 / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(g.numpy(), sp.ndtr(x0) + x0 * phi)
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), phi * (2 - x0**2))


def test_straight_through_override():
    x = tg.constant([-1.0, 2.0])
    with tg.GradientTape() as t:
        t.watch(x)
        with tg.gradient_override_map({"Relu": "Identity"}):
            y = nn.relu(x)
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [1.0, 1.0])


# --- stability -----------------------------------------------------------------------------------
BIG = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4 + 1.0, -1e4], [3e4, 1e4, -2e4]])


@pytest.mark.parametrize("fn", [nn.relu, nn.leaky_relu, nn.elu, nn.sigmoid, nn.softplus,
                                nn.gelu, lambda x: nn.gelu(x, approximate=True), nn.softmax,
                                nn.log_softmax])
def test_large_inputs_finite_without_warnings(fn):
    x = tg.constant(BIG)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid-value RuntimeWarning
        with tg.GradientTape() as t:
            t.watch(x)
            y = fn(x)
            loss = tg.sum(y * tg.constant(rng.normal(size=BIG.shape)))
        g = t.gradient(loss, x)
    assert np.all(np.isfinite(y.numpy())) and np.all(np.isfinite(g.numpy()))


def test_large_input_values():
    x = np.array([1e4, -1e4, 0.0])
    np.testing.assert_array_equal(nn.sigmoid(x).numpy(), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(nn.softplus(x).numpy(), [1e4, 0.0, np.log(2)])
    np.testing.assert_allclose(nn.elu(x).numpy(), [1e4, -1.0, 0.0])
    np.testing.assert_allclose(nn.gelu(x).numpy(), [1e4, 0.0, 0.0])
    np.testing.assert_allclose(nn.softmax(BIG).numpy(), sp.softmax(BIG, axis=-1), atol=1e-300)
    np.testing.assert_allclose(nn.log_softmax(BIG).numpy(), sp.log_softmax(BIG, axis=-1))
    np.testing.assert_allclose(nn.softmax(np.array([1e4, 0.0])).numpy(), [1.0, 0.0])
    np.testing.assert_allclose(nn.log_softmax(np.array([1e4, 0.0])).numpy(), [0.0, -1e4])


def test_sparse_softmax_cross_entropy_large_logits():
    labels = np.array([0, 1, 2])
    loss = nn.sparse_softmax_cross_entropy_with_logits(labels, BIG).numpy()
    np.testing.assert_allclose(loss, -sp.log_softmax(BIG, axis=-1)[np.arange(3), labels])
    np.testing.assert_allclose(loss[0], 0.0, atol=1e-12)  # confident and right
    np.testing.assert_allclose(loss[2], 5e4)  # confident and wrong: 3e4 - (-2e4)


def test_sigmoid_cross_entropy_large_logits():
    x = np.array([1e4, -1e4, 1e4, -1e4])
    z = np.array([1.0, 0.0, 0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(nn.sigmoid_cross_entropy_with_logits(z, x).numpy(),
                                   [0.0, 0.0, 1e4, 1e4])
        xt = tg.constant(x)
        with tg.GradientTape() as t:
            t.watch(xt)
            loss = nn.sigmoid_cross_entropy_with_logits(z, xt)
        np.testing.assert_allclose(t.gradient(loss, xt).numpy(), [0.0, 0.0, 1.0, -1.0])


# --- cross-entropies -----------------------------------------------------------------------------
def test_sparse_softmax_cross_entropy_values_and_gradient():
    logits = rng.normal(size=(2, 3, 5))
    labels = rng.integers(0, 5, size=(2, 3))
    ref = -np.take_along_axis(sp.log_softmax(logits, axis=-1), labels[..., None], -1)[..., 0]
    out = nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    assert out.shape == labels.shape
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)

    lt, zt = tg.constant(logits), tg.constant(labels)
    dy = rng.normal(size=labels.shape)
    with tg.GradientTape() as t:
        t.watch(lt)
        loss = nn.sparse_softmax_cross_entropy_with_logits(zt, lt)
    g_logits, g_labels = t.gradient(loss, [lt, zt], output_gradients=tg.constant(dy))
    onehot = np.eye(5)[labels]
    np.testing.assert_allclose(g_logits.numpy(),
                               dy[..., None] * (sp.softmax(logits, axis=-1) - onehot), rtol=1e-12)
    assert g_labels is None
    check_grad(lambda x: nn.sparse_softmax_cross_entropy_with_logits(labels, x), logits)


def test_sparse_softmax_cross_entropy_scalar_label_and_float32():
    logits = rng.normal(size=4).astype(np.float32)
    out = nn.sparse_softmax_cross_entropy_with_logits(np.int32(2), logits)
    assert out.shape == () and out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), -sp.log_softmax(logits.astype(np.float64))[2],
                               rtol=1e-6)
    out = nn.sparse_softmax_cross_entropy_with_logits([1, 0], np.zeros((2, 3)))
    np.testing.assert_allclose(out.numpy(), [np.log(3)] * 2)


@pytest.mark.parametrize("labels,logits,err,match", [
    (np.array([0, 3]), np.zeros((2, 3)), ValueError, r"label value of 3 .*\[0, 3\)"),
    (np.array([-1, 0]), np.zeros((2, 3)), ValueError, r"label value of -1"),
    (np.array([0.0, 1.0]), np.zeros((2, 3)), TypeError, "integer class indices"),
    (np.array([0, 1, 2]), np.zeros((2, 3)), ValueError, r"labels of shape \(3,\)"),
    (np.array(0), np.zeros(()), ValueError, "at least 1 dimension"),
    (np.array([0, 1]), np.zeros((2, 3), dtype=np.int64), TypeError, "floating"),
])
def test_sparse_softmax_cross_entropy_label_validation(labels, logits, err, match):
    with pytest.raises(err, match=match):
        nn.sparse_softmax_cross_entropy_with_logits(labels, logits)


def test_sigmoid_cross_entropy_values_and_gradients():
    x = rng.normal(scale=3, size=(3, 4))
    z = rng.uniform(0, 1, size=(3, 4))
    s = sp.expit(x)
    ref = -z * np.log(s) - (1 - z) * np.log(1 - s)
    np.testing.assert_allclose(nn.sigmoid_cross_entropy_with_logits(z, x).numpy(), ref,
                               rtol=1e-10)
    xt, zt = tg.constant(x), tg.constant(z)
    with tg.GradientTape() as t:
        t.watch([xt, zt])
        loss = nn.sigmoid_cross_entropy_with_logits(labels=zt, logits=xt)
    gx, gz = t.gradient(loss, [xt, zt])
    np.testing.assert_allclose(gx.numpy(), s - z, rtol=1e-12)
    np.testing.assert_allclose(gz.numpy(), -x, rtol=1e-12)
    check_grad(lambda a: nn.sigmoid_cross_entropy_with_logits(z, a), x)


def test_sigmoid_cross_entropy_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        nn.sigmoid_cross_entropy_with_logits(np.zeros(3), np.zeros((2, 3)))


def test_other_array_api_backend():
    # forward and gradient stay on the input's backend and agree with the NumPy results
    xs = pytest.importorskip("array_api_strict")
    x0 = np.array([[-1.5, 0.3, 2.0], [0.1, -0.2, 0.7]])
    z = np.array([[0.5, 0.2, 0.9], [1.0, 0.0, 1.0]])
    fns = [lambda a, asarray: nn.relu(a), lambda a, asarray: nn.leaky_relu(a),
           lambda a, asarray: nn.elu(a), lambda a, asarray: nn.sigmoid(a),
           lambda a, asarray: nn.softplus(a), lambda a, asarray: nn.softmax(a),
           lambda a, asarray: nn.log_softmax(a),
           lambda a, asarray: nn.gelu(a, approximate=True),
           lambda a, asarray: nn.sparse_softmax_cross_entropy_with_logits(asarray([0, 2]), a),
           lambda a, asarray: nn.sigmoid_cross_entropy_with_logits(asarray(z), a)]
    for fn in fns:
        x = tg.constant(xs.asarray(x0))
        with tg.GradientTape() as t:
            t.watch(x)
            y = fn(x, xs.asarray)
        g = t.gradient(y, x)
        assert type(y._value) is type(x._value) and type(g._value) is type(x._value)
        ref = fn(x0, np.asarray).numpy()
        np.testing.assert_allclose(np.asarray(y._value), ref, rtol=1e-12)
        ref_g = tape_grad(lambda a: fn(a, np.asarray), x0, np.ones(ref.shape))
        np.testing.assert_allclose(np.asarray(g._value), ref_g, rtol=1e-12, atol=1e-15)


def test_a_numpy_argument_is_copied_so_writing_into_it_later_cannot_change_the_gradient():
    # the ops convert non-Tensor arguments with tg.convert_to_tensor (a copy, as tg.constant);
    # they shared the NumPy array's memory before (tg.asarray), so the backward pass read the
    # values written into it after the forward pass
    logits = tg.Variable(np.array([[0.5, -1.0, 2.0]]))
    labels = np.array([[0.2, 0.3, 0.5]])
    with tg.GradientTape() as tape:
        y = tg.sum(nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    before = np.array(labels)
    labels[...] = 7.0
    g = tape.gradient(y, logits).numpy()
    expected = sp.softmax(logits.numpy(), axis=-1) * before.sum() - before
    np.testing.assert_allclose(g, expected, rtol=1e-12)
