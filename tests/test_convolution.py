"""tg.nn convolutions: values against a direct loop, SciPy and JAX, TF's output sizes, the
adjoint identity of the transpose, gradients, and the error messages."""
import itertools
import math

import numpy as np
import pytest
import scipy.signal

import tapegrad as tg
from tapegrad import nn

rng = np.random.default_rng(0)


def _same_pads(n, k, s, d):
    total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
    return total // 2, total - total // 2


def conv_loop(x, w, strides, pads, dilations, groups=1):
    """Channels-last N-d cross-correlation by a loop over output positions (the definition)."""
    rank = x.ndim - 2
    k = w.shape[:rank]
    xp = np.pad(x, [(0, 0), *pads, (0, 0)])
    out = [(xp.shape[1 + a] - (k[a] - 1) * dilations[a] - 1) // strides[a] + 1
           for a in range(rank)]
    cg, o = w.shape[-2], w.shape[-1]
    og = o // groups
    y = np.zeros((x.shape[0], *out, o))
    for pos in itertools.product(*map(range, out)):
        for off in itertools.product(*map(range, k)):
            idx = tuple(p * s + i * d for p, s, i, d in zip(pos, strides, off, dilations))
            xv = xp[(slice(None), *idx, slice(None))]  # (N, C)
            for g in range(groups):
                y[(slice(None), *pos, slice(g * og, (g + 1) * og))] += (
                    xv[:, g * cg:(g + 1) * cg] @ w[off][:, g * og:(g + 1) * og])
    return y


CASES_2D = [  # input shape, filter shape, strides, padding, dilations
    ((2, 7, 6, 3), (3, 3, 3, 4), 1, "SAME", 1),
    ((2, 7, 6, 3), (3, 2, 3, 4), 2, "SAME", 1),
    ((1, 9, 8, 2), (3, 3, 2, 3), (2, 3), "VALID", 1),
    ((1, 9, 8, 2), (2, 3, 2, 3), 1, "SAME", (2, 1)),
    ((1, 9, 8, 2), (2, 2, 2, 3), [1, 2, 1, 1], "VALID", [1, 2, 2, 1]),
    ((1, 6, 5, 2), (3, 3, 2, 2), 2, [[0, 0], [1, 2], [0, 3], [0, 0]], 1),
    ((1, 8, 8, 1), (4, 4, 1, 1), 3, "SAME", 1),
]


def _pads(padding, x_shape, k, s, d):
    if isinstance(padding, str):
        if padding == "VALID":
            return [(0, 0)] * len(k)
        return [_same_pads(n, kk, ss, dd) for n, kk, ss, dd in zip(x_shape[1:-1], k, s, d)]
    return [tuple(p) for p in padding[1:-1]]


def _axes(v, rank):
    v = [v] if isinstance(v, int) else list(v)
    return v[1:-1] if len(v) == rank + 2 else v * rank if len(v) == 1 else v


@pytest.mark.parametrize("xs, ws, strides, padding, dil", CASES_2D)
def test_conv2d_matches_the_loop_and_tf_output_sizes(xs, ws, strides, padding, dil):
    x, w = rng.normal(size=xs), rng.normal(size=ws)
    y = nn.conv2d(x, w, strides, padding, dilations=dil).numpy()
    s, d = _axes(strides, 2), _axes(dil, 2)
    pads = _pads(padding, xs, ws[:2], s, d)
    np.testing.assert_allclose(y, conv_loop(x, w, s, pads, d), rtol=1e-10, atol=1e-10)
    if isinstance(padding, str):  # TF's output-size formulas
        eff = [(k - 1) * dd + 1 for k, dd in zip(ws[:2], d)]
        want = ([math.ceil(n / ss) for n, ss in zip(xs[1:3], s)] if padding == "SAME" else
                [math.ceil((n - e + 1) / ss) for n, e, ss in zip(xs[1:3], eff, s)])
        assert list(y.shape[1:3]) == want


def test_conv2d_nchw_is_the_transposed_nhwc():
    x, w = rng.normal(size=(2, 7, 6, 3)), rng.normal(size=(3, 2, 3, 4))
    want = nn.conv2d(x, w, [1, 2, 1, 1], "SAME").numpy()
    got = nn.conv2d(np.transpose(x, (0, 3, 1, 2)), w, [1, 1, 2, 1], "SAME", data_format="NCHW")
    np.testing.assert_allclose(got.numpy(), np.transpose(want, (0, 3, 1, 2)), rtol=1e-12)
    pad = [[0, 0], [0, 0], [1, 0], [2, 1]]
    got = nn.conv2d(np.transpose(x, (0, 3, 1, 2)), w, 1, pad, data_format="NCHW").numpy()
    want = conv_loop(x, w, (1, 1), [(1, 0), (2, 1)], (1, 1))
    np.testing.assert_allclose(got, np.transpose(want, (0, 3, 1, 2)), rtol=1e-10, atol=1e-12)


def test_conv1d_is_scipy_correlate_per_channel_pair():
    x, w = rng.normal(size=(2, 11, 3)), rng.normal(size=(4, 3, 2))
    y = nn.conv1d(x, w, 1, "VALID").numpy()
    want = np.zeros((2, 8, 2))
    for n, c, o in itertools.product(range(2), range(3), range(2)):
        want[n, :, o] += scipy.signal.correlate(x[n, :, c], w[:, c, o], mode="valid")
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)
    y = nn.conv1d(np.transpose(x, (0, 2, 1)), w, 2, "SAME", data_format="NCW", dilations=2)
    want = conv_loop(x, w, (2,), [_same_pads(11, 4, 2, 2)], (2,))
    np.testing.assert_allclose(y.numpy(), np.transpose(want, (0, 2, 1)), rtol=1e-10, atol=1e-12)


def test_conv3d_matches_the_loop_in_both_formats():
    x, w = rng.normal(size=(1, 5, 4, 6, 2)), rng.normal(size=(2, 3, 2, 2, 3))
    y = nn.conv3d(x, w, [1, 2, 1, 2, 1], "SAME", dilations=[1, 1, 1, 2, 1]).numpy()
    pads = [_same_pads(n, k, s, d) for n, k, s, d in zip((5, 4, 6), (2, 3, 2), (2, 1, 2),
                                                         (1, 1, 2))]
    np.testing.assert_allclose(y, conv_loop(x, w, (2, 1, 2), pads, (1, 1, 2)), rtol=1e-10,
                               atol=1e-12)
    yc = nn.conv3d(np.moveaxis(x, -1, 1), w, 1, "VALID", data_format="NCDHW").numpy()
    np.testing.assert_allclose(np.moveaxis(yc, 1, -1), conv_loop(x, w, (1,) * 3, [(0, 0)] * 3,
                                                                 (1,) * 3), rtol=1e-10, atol=1e-12)


def test_depthwise_conv2d_convolves_each_channel_with_its_own_filters():
    x, w = rng.normal(size=(2, 6, 7, 3)), rng.normal(size=(3, 2, 3, 2))
    y = nn.depthwise_conv2d(x, w, [1, 2, 1, 1], "SAME", dilations=[1, 2]).numpy()
    pads = [_same_pads(6, 3, 2, 1), _same_pads(7, 2, 1, 2)]
    assert y.shape == (2, 3, 7, 6)
    for c in range(3):  # output channels c*M + m come from input channel c only
        want = conv_loop(x[..., c:c + 1], w[:, :, c:c + 1, :], (2, 1), pads, (1, 2))
        np.testing.assert_allclose(y[..., 2 * c:2 * c + 2], want, rtol=1e-10, atol=1e-12)
    yc = nn.depthwise_conv2d(np.transpose(x, (0, 3, 1, 2)), w, [1, 1, 2, 1], "SAME",
                             data_format="NCHW", dilations=[1, 2]).numpy()
    np.testing.assert_allclose(np.transpose(yc, (0, 2, 3, 1)), y, rtol=1e-12)


# --- the transpose --------------------------------------------------------------------------
TRANSPOSE_CASES = [  # output_shape (the conv's input), filter, strides, padding, dilations
    ((2, 7, 6, 3), (3, 3, 3, 4), 1, "SAME", 1),
    ((2, 7, 6, 3), (3, 3, 3, 4), 2, "SAME", 1),
    ((2, 8, 6, 3), (3, 3, 3, 4), 2, "SAME", 1),
    ((1, 9, 8, 2), (3, 2, 2, 3), (2, 3), "VALID", 1),
    ((1, 10, 8, 2), (3, 2, 2, 3), (3, 2), "VALID", 1),  # stride leaves the last row unused
    ((1, 9, 8, 2), (2, 3, 2, 3), 1, "SAME", (2, 2)),
    ((1, 6, 5, 2), (3, 3, 2, 2), 2, [[0, 0], [1, 2], [0, 3], [0, 0]], 1),
]


@pytest.mark.parametrize("shape, ws, strides, padding, dil", TRANSPOSE_CASES)
def test_conv2d_transpose_is_the_adjoint_of_conv2d(shape, ws, strides, padding, dil):
    x, w = rng.normal(size=shape), rng.normal(size=ws)
    y = nn.conv2d(x, w, strides, padding, dilations=dil).numpy()
    u = rng.normal(size=y.shape)
    xt = nn.conv2d_transpose(u, w, shape, strides, padding, dilations=dil).numpy()
    assert xt.shape == shape
    np.testing.assert_allclose(np.vdot(y, u), np.vdot(x, xt), rtol=1e-10)
    # and it is conv2d's gradient wrt the input
    xv = tg.constant(x)
    with tg.GradientTape() as tape:
        tape.watch(xv)
        out = nn.conv2d(xv, w, strides, padding, dilations=dil)
    np.testing.assert_allclose(tape.gradient(out, xv, output_gradients=u).numpy(), xt,
                               rtol=1e-12, atol=1e-12)


def test_conv1d_and_conv3d_transpose_are_adjoints_too():
    x, w = rng.normal(size=(2, 9, 3)), rng.normal(size=(3, 3, 2))
    y = nn.conv1d(x, w, 2, "SAME").numpy()
    u = rng.normal(size=y.shape)
    np.testing.assert_allclose(np.vdot(y, u),
                               np.vdot(x, nn.conv1d_transpose(u, w, x.shape, 2).numpy()))
    x, w = rng.normal(size=(1, 4, 5, 3, 2)), rng.normal(size=(2, 2, 2, 2, 3))
    xc = np.moveaxis(x, -1, 1)
    y = nn.conv3d(xc, w, 2, "VALID", data_format="NCDHW").numpy()
    u = rng.normal(size=y.shape)
    xt = nn.conv3d_transpose(u, w, xc.shape, 2, "VALID", data_format="NCDHW").numpy()
    np.testing.assert_allclose(np.vdot(y, u), np.vdot(xc, xt), rtol=1e-10)


def test_against_jax_conv_general_dilated_and_conv_transpose():
    jax = pytest.importorskip("jax")
    x = rng.normal(size=(2, 9, 8, 4)).astype(np.float32)
    w = rng.normal(size=(3, 2, 4, 6)).astype(np.float32)
    wd = rng.normal(size=(3, 2, 4, 2)).astype(np.float32)  # depthwise, multiplier 2
    dn = ("NHWC", "HWIO", "NHWC")
    for s, pad, d in [((1, 1), "SAME", (1, 1)), ((2, 1), "VALID", (1, 2)),
                      ((2, 2), ((1, 0), (2, 1)), (1, 1))]:
        tf_pad = pad if isinstance(pad, str) else [[0, 0], *map(list, pad), [0, 0]]
        want = jax.lax.conv_general_dilated(x, w, s, pad, rhs_dilation=d, dimension_numbers=dn)
        got = nn.conv2d(x, w, s, tf_pad, dilations=d)
        np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-4, atol=1e-4)
        want = jax.lax.conv_general_dilated(x, wd.reshape(3, 2, 1, 8), s, pad, rhs_dilation=d,
                                            dimension_numbers=dn, feature_group_count=4)
        got = nn.depthwise_conv2d(x, wd, s, tf_pad, dilations=d)
        np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-4, atol=1e-4)
    # conv2d_transpose against jax.lax.conv_transpose (transpose_kernel=True: the gradient form)
    u = rng.normal(size=(2, 5, 4, 4)).astype(np.float32)
    got = nn.conv2d_transpose(u, w[..., :4], (2, 10, 8, 4), 2, "SAME")
    want = jax.lax.conv_transpose(u, w[..., :4], (2, 2), "SAME", dimension_numbers=dn,
                                  transpose_kernel=True)
    np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_runs_on_jax_arrays_and_under_tf_function():
    jnp = pytest.importorskip("jax.numpy")
    x, w = rng.normal(size=(1, 6, 5, 2)), rng.normal(size=(3, 3, 2, 3))
    want = nn.conv2d(x, w, 2, "SAME").numpy()
    got = nn.conv2d(tg.constant(jnp.asarray(x)), tg.constant(jnp.asarray(w)), 2, "SAME")
    assert "jax" in type(got._value).__module__
    np.testing.assert_allclose(np.asarray(got._value), want, rtol=1e-6, atol=1e-6)

    @tg.function
    def loss_and_grad(x, w):
        with tg.GradientTape() as tape:
            tape.watch(w)
            loss = tg.sum(nn.conv2d(x, w, 2, "SAME") ** 2)
        return loss, tape.gradient(loss, w)

    loss, g = loss_and_grad(tg.constant(x), tg.constant(w))
    np.testing.assert_allclose(float(loss), np.sum(want ** 2), rtol=1e-10)
    xv, wv = tg.constant(x), tg.constant(w)
    with tg.GradientTape() as tape:
        tape.watch(wv)
        ref = tg.sum(nn.conv2d(xv, wv, 2, "SAME") ** 2)
    np.testing.assert_allclose(g.numpy(), tape.gradient(ref, wv).numpy(), rtol=1e-10)


def test_second_order_through_the_public_functions():
    x, w = rng.normal(size=(1, 5, 4, 2)), rng.normal(size=(2, 3, 2, 3))
    f = lambda x, w: tg.sum(nn.conv2d(x, w, [1, 1, 2, 1], "SAME", data_format="NCHW") ** 2)  # noqa: E731
    xc = np.transpose(x, (0, 3, 1, 2))
    tg.test.check_gradients(f, [xc, w], order=2)
    g = lambda x, w: nn.depthwise_conv2d(x, w, 2, "VALID")  # noqa: E731
    tg.test.check_gradients(g, [x, rng.normal(size=(2, 2, 2, 2))], order=2)


# --- errors ---------------------------------------------------------------------------------
X, W = np.zeros((1, 5, 5, 3)), np.zeros((3, 3, 3, 4))


def test_channel_mismatch_names_both_numbers():
    with pytest.raises(ValueError, match="conv2d: the input has 3 channels but the filters "
                                         "expect 2"):
        nn.conv2d(X, np.zeros((3, 3, 2, 4)), 1, "SAME")
    with pytest.raises(ValueError, match="conv2d_transpose: the input has 3 channels but the "
                                         "filters expect 4"):
        nn.conv2d_transpose(X, W, (1, 5, 5, 3), 1)


def test_bad_padding_data_format_and_rank():
    with pytest.raises(ValueError, match="padding='same_ish' is not supported; use 'SAME'"):
        nn.conv2d(X, W, 1, "same_ish")
    with pytest.raises(ValueError, match="explicit padding must be a list of 4"):
        nn.conv2d(X, W, 1, [[1, 1], [1, 1]])
    with pytest.raises(ValueError, match=r"\[0, 0\] in the batch and channel dimensions"):
        nn.conv2d(X, W, 1, [[1, 0], [1, 1], [1, 1], [0, 0]])
    with pytest.raises(ValueError, match="data_format='NWHC' is not supported; use 'NHWC'"):
        nn.conv2d(X, W, 1, "SAME", data_format="NWHC")
    with pytest.raises(ValueError, match=r"conv1d: input must have 3 dimensions \(NWC or NCW\), "
                                         r"got shape \(1, 5, 5, 3\)"):
        nn.conv1d(X, W, 1, "SAME")
    with pytest.raises(ValueError, match="conv3d: filters must have 5 dimensions"):
        nn.conv3d(np.zeros((1, 4, 4, 4, 3)), W, 1, "SAME")


def test_bad_strides_and_a_filter_larger_than_the_input():
    with pytest.raises(ValueError, match="strides must be an int or a list of 1, 2 or 4 ints"):
        nn.conv2d(X, W, [1, 2, 3], "SAME")
    with pytest.raises(ValueError, match=r"strides=\[2, 1, 1, 1\] must be 1 in the batch"):
        nn.conv2d(X, W, [2, 1, 1, 1], "SAME")
    with pytest.raises(ValueError, match="dilations must be positive"):
        nn.conv2d(X, W, 1, "SAME", dilations=0)
    with pytest.raises(ValueError, match="dilated filter size 7 exceeds the padded input size 5 "
                                         "in spatial dimension 0"):
        nn.conv2d(X, W, 1, "VALID", dilations=(3, 1))


def test_inconsistent_output_shape():
    y = np.zeros((1, 3, 3, 4))
    with pytest.raises(ValueError, match=r"output_shape \[1, 9, 5, 3\] is inconsistent with the "
                                         r"input of shape \(1, 3, 3, 4\).*has shape "
                                         r"\[1, 5, 3, 4\]"):
        nn.conv2d_transpose(y, W, [1, 9, 5, 3], 2, "SAME")
    with pytest.raises(ValueError, match="output_shape must list the 4 dimensions"):
        nn.conv2d_transpose(y, W, [5, 5], 2, "SAME")
