"""tg.nn pooling: values against a direct loop, TF's output sizes and "SAME" averaging, the
max-pool gradient's routing (ties to the first maximum), higher orders, and error messages."""
import itertools
import math
import zlib

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn

rng = np.random.default_rng(0)


def _same_pads(n, k, s):
    total = max((math.ceil(n / s) - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def pool_loop(x, k, s, pads, kind):
    """Channels-last N-d pooling by a loop over windows: max over the window's elements inside
    the input (padding never wins), or their mean (padding not counted, as TensorFlow)."""
    rank = x.ndim - 2
    out = [(x.shape[1 + a] + sum(pads[a]) - k[a]) // s[a] + 1 for a in range(rank)]
    y = np.zeros((x.shape[0], *out, x.shape[-1]))
    for pos in itertools.product(*map(range, out)):
        lo = [p * ss - pl for p, ss, (pl, _) in zip(pos, s, pads)]
        key = tuple(slice(max(a, 0), a + kk) for a, kk in zip(lo, k))
        win = x[(slice(None), *key, slice(None))].reshape(x.shape[0], -1, x.shape[-1])
        y[(slice(None), *pos, slice(None))] = win.max(1) if kind == "max" else win.mean(1)
    return y


CASES = [  # rank, input shape, ksize, strides, padding
    (2, (2, 7, 6, 3), 3, 2, "SAME"),
    (2, (2, 7, 6, 3), 2, 2, "VALID"),
    (2, (1, 6, 7, 2), (2, 3), (1, 2), "SAME"),
    (2, (1, 6, 7, 2), [1, 3, 2, 1], [1, 2, 2, 1], [[0, 0], [1, 2], [0, 1], [0, 0]]),
    (1, (2, 9, 3), 3, 2, "SAME"),
    (1, (2, 9, 3), 4, 3, "VALID"),
    (3, (1, 5, 4, 6, 2), 2, (1, 2, 2), "SAME"),
]
FUNCS = {("max", 1): nn.max_pool1d, ("max", 2): nn.max_pool2d, ("max", 3): nn.max_pool3d,
         ("avg", 1): nn.avg_pool1d, ("avg", 2): nn.avg_pool2d, ("avg", 3): nn.avg_pool3d}


def _axes(v, rank):
    v = [v] if isinstance(v, int) else list(v)
    return v[1:-1] if len(v) == rank + 2 else v * rank if len(v) == 1 else v


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("rank, shape, ksize, strides, padding", CASES)
def test_pooling_matches_the_loop_and_tf_output_sizes(kind, rank, shape, ksize, strides,
                                                      padding):
    if kind == "avg" and not isinstance(padding, str):
        padding = "VALID"
    x = rng.normal(size=shape)
    y = FUNCS[kind, rank](x, ksize, strides, padding).numpy()
    k, s = _axes(ksize, rank), _axes(strides, rank)
    if isinstance(padding, str):
        pads = [(0, 0)] * rank if padding == "VALID" else [
            _same_pads(n, kk, ss) for n, kk, ss in zip(shape[1:-1], k, s)]
        want = ([math.ceil(n / ss) for n, ss in zip(shape[1:-1], s)] if padding == "SAME" else
                [math.ceil((n - kk + 1) / ss) for n, kk, ss in zip(shape[1:-1], k, s)])
        assert list(y.shape[1:-1]) == want
    else:
        pads = [tuple(p) for p in padding[1:-1]]
    np.testing.assert_allclose(y, pool_loop(x, k, s, pads, kind), rtol=1e-12, atol=1e-14)


def test_channels_first_formats():
    x = rng.normal(size=(2, 3, 7, 6))
    want = nn.max_pool2d(np.transpose(x, (0, 2, 3, 1)), [1, 3, 2, 1], [1, 2, 1, 1], "SAME")
    got = nn.max_pool2d(x, [1, 1, 3, 2], [1, 1, 2, 1], "SAME", data_format="NCHW")
    np.testing.assert_allclose(got.numpy(), np.transpose(want.numpy(), (0, 3, 1, 2)))
    x1 = rng.normal(size=(2, 3, 9))
    want = nn.avg_pool1d(np.transpose(x1, (0, 2, 1)), 3, 2, "SAME").numpy()
    got = nn.avg_pool1d(x1, 3, 2, "SAME", data_format="NCW").numpy()
    np.testing.assert_allclose(got, np.transpose(want, (0, 2, 1)), rtol=1e-12)


def test_avg_pool_same_padding_is_not_counted():
    # a constant input stays constant, also at the borders where windows hold padding
    y = nn.avg_pool2d(np.full((1, 5, 4, 1), 3.0), 3, 2, "SAME").numpy()
    np.testing.assert_allclose(y, np.full((1, 3, 2, 1), 3.0))
    # the corner window of a 2x2 input with a 3x3 window holds the 4 inputs
    y = nn.avg_pool2d(np.arange(4.0).reshape(1, 2, 2, 1), 3, 1, "SAME").numpy()
    np.testing.assert_allclose(y[0, :, :, 0], np.full((2, 2), 1.5))


def _grad(f, x, dy):
    x = tg.constant(x)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return tape.gradient(y, x, output_gradients=dy).numpy()


def test_max_pool_gradient_goes_to_the_first_maximum_of_each_window():
    # ties: all four values of each 2x2 window equal; TF routes to the first (top-left)
    x = np.repeat(np.repeat(np.arange(4.0).reshape(1, 2, 2, 1), 2, axis=1), 2, axis=2)
    g = _grad(lambda x: nn.max_pool2d(x, 2, 2, "VALID"), x, np.ones((1, 2, 2, 1)))
    want = np.zeros((4, 4))
    want[::2, ::2] = 1.0
    np.testing.assert_array_equal(g[0, :, :, 0], want)
    # overlapping windows: each dy is added at its window's argmax (a loop reference)
    x = rng.permutation(36).reshape(1, 6, 6, 1).astype(float)
    dy = rng.normal(size=(1, 6, 6, 1))
    g = _grad(lambda x: nn.max_pool2d(x, 3, 1, "SAME"), x, dy)
    want = np.zeros((6, 6))
    for i, j in itertools.product(range(6), range(6)):
        win = x[0, max(i - 1, 0):i + 2, max(j - 1, 0):j + 2, 0]
        a, b = np.unravel_index(np.argmax(win), win.shape)
        want[max(i - 1, 0) + a, max(j - 1, 0) + b] += dy[0, i, j, 0]
    np.testing.assert_allclose(g[0, :, :, 0], want)


def test_pooling_gradients_to_second_order():
    x = rng.permutation(2 * 5 * 6 * 2).reshape(2, 5, 6, 2) * 0.1  # distinct: no ties
    f = lambda x: tg.sum(nn.max_pool2d(x, 3, 2, "SAME") ** 3)  # noqa: E731
    tg.test.check_gradients(f, [x], order=2)
    g = lambda x: tg.sum(nn.avg_pool1d(x, 3, 2, "SAME", data_format="NCW") ** 3)  # noqa: E731
    tg.test.check_gradients(g, [rng.normal(size=(2, 3, 7))], order=2)
    h = lambda x: tg.sum(nn.max_pool3d(x, 2, 1, "VALID") ** 2)  # noqa: E731
    tg.test.check_gradients(h, [rng.permutation(48).reshape(1, 3, 4, 4, 1) * 0.1], order=2)


def test_avg_pool_gradient_is_its_adjoint():
    x, k, s = rng.normal(size=(2, 7, 6, 3)), [2, 3], [2, 1]
    y = nn.avg_pool2d(x, k, s, "SAME").numpy()
    u = rng.normal(size=y.shape)
    np.testing.assert_allclose(np.vdot(y, u),
                               np.vdot(x, _grad(lambda t: nn.avg_pool2d(t, k, s, "SAME"), x, u)))


@pytest.mark.parametrize("op_type", ["MaxPool", "MaxPoolGrad", "MaxPoolGradGrad"])
def test_max_pool_samples_have_no_near_ties(op_type):
    # the registry tests draw the samples with these seeds (test_registry_gradients.py,
    # test_forward.py) and step by at most 2e-4 per element: the window maxima never change
    for index, sample in enumerate(tg.registered_ops()[op_type].samples):
        for extra in ([], [1]):
            args, _, _ = sample.materialize(
                np.random.default_rng([zlib.crc32(op_type.encode()), index, *extra]))
            assert np.diff(np.sort(np.ravel(args[0]))).min() > 10 * 2e-4


def test_errors():
    x = np.zeros((1, 4, 4, 2))
    with pytest.raises(ValueError, match="max_pool2d: ksize must be positive"):
        nn.max_pool2d(x, 0, 1, "SAME")
    with pytest.raises(ValueError, match=r"ksize=\[2, 2, 2, 2\] must be 1 in the batch and "
                                         "channel dimensions"):
        nn.max_pool2d(x, [2, 2, 2, 2], 1, "SAME")
    with pytest.raises(ValueError, match=r"explicit padding \[\[2, 0\], \[0, 0\]\] must be "
                                         r"smaller than the window \[2, 2\]"):
        nn.max_pool2d(x, 2, 1, [[0, 0], [2, 0], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match=r"avg_pool1d: input must have 3 dimensions \(NWC or "
                                         r"NCW\), got shape \(1, 4, 4, 2\)"):
        nn.avg_pool1d(x, 2, 1, "SAME")
    with pytest.raises(ValueError, match="data_format='NCWH' is not supported"):
        nn.avg_pool2d(x, 2, 1, "SAME", data_format="NCWH")
    with pytest.raises(ValueError, match="padding='FULL' is not supported"):
        nn.avg_pool2d(x, 2, 1, "FULL")
    with pytest.raises(ValueError, match="the window size 5 exceeds the padded input size 4 in spatial dimension 0"):
        nn.max_pool2d(x, 5, 1, "VALID")
