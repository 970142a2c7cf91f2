"""Tensors that wrap Dask arrays: lazy ops and gradients, the Dask kernels, materialisation on
assignment, ``tg.compute``, and gradients on a ``LocalCluster`` of 2 worker processes equal
to NumPy's (to 1e-12), through a custom gradient and a registered op, to second order.

Skipped without Dask. The default backend is NumPy here whatever ``TAPEGRAD_ARRAY_BACKEND``
says: these tests are about Dask data mixed with NumPy parameters. The cluster tests come
last, since a distributed client becomes Dask's default scheduler while it lives.
"""
from __future__ import annotations

import argparse  # noqa: F401 - used by the example's main under test

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
scipy_special = pytest.importorskip("scipy.special")

import tapegrad as tg  # noqa: E402
from tapegrad import _backend  # noqa: E402
from tapegrad._kernels import dask as dask_kernels  # noqa: E402
from tapegrad.examples import distributed_regression as example  # noqa: E402


@pytest.fixture(autouse=True)
def _numpy_default(monkeypatch):
    monkeypatch.setattr(_backend, "_default", np)


def _refuse(*args, **kwargs):
    raise AssertionError("a Dask graph was computed where everything should stay lazy")


lazy_only = dask.config.set(scheduler=_refuse)  # a context manager: computing raises


@tg.custom_gradient
def _scaled_tanh(x):  # a custom gradient that differs from the autodiff one only in form
    y = tg.tanh(x)

    def grad(dy):
        return dy * (1.0 - y * y)

    return 2.0 * y, lambda dy: 2.0 * grad(dy)


def _loss(x, labels, w, b):
    """Touches every Dask kernel's gradient: matmul, a custom gradient, the example's registered
    op, gelu (erf), take with repeats (row scatter-add) and a strided slice (basic scatter)."""
    z = x @ w + b
    h = _scaled_tanh(z) + tg.nn.gelu(z)
    nll = -tg.mean(labels * example.log_sigmoid(h) + (1.0 - labels) * example.log_sigmoid(-h))
    picked = tg.take(z, np.array([0, 3, 3, -1, 5]), axis=0)
    return nll + 0.1 * tg.sum(picked ** 2) + tg.mean(z[1::3] ** 3)


def _data(rows=40, features=3, chunks=7, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features))
    labels = (rng.random(rows) > 0.5).astype(np.float64)
    return x, labels, da.from_array(x, chunks=(chunks, features)), da.from_array(labels, chunks)


def _first_and_second_order(x, labels, w0, b0, v):
    """The loss, its gradients wrt w and b, and the Hessian-vector product H_ww v."""
    w, b = tg.Variable(w0), tg.Variable(b0)
    with tg.GradientTape() as outer:
        with tg.GradientTape() as inner:
            loss = _loss(tg.asarray(x), tg.asarray(labels), w, b)
        gw, gb = inner.gradient(loss, [w, b])
        gv = tg.sum(gw * v)
    return loss, gw, gb, outer.gradient(gv, w)


# --- laziness ------------------------------------------------------------------------------------
def test_ops_and_gradients_of_every_order_stay_lazy():
    x, labels, dx, dlabels = _data()
    w0, v = np.linspace(-0.5, 0.5, 3), np.array([1.0, -2.0, 0.5])
    with lazy_only:
        results = _first_and_second_order(dx, dlabels, w0, 0.1, v)
        assert all(isinstance(t._value, da.Array) for t in results)
        assert "dask.array<" in repr(results[0])  # printing does not compute either
    got = tg.compute(*results)
    want = _first_and_second_order(x, labels, w0, 0.1, v)
    for g, n in zip(got, want):
        assert isinstance(g._value, np.ndarray)
        np.testing.assert_allclose(g.numpy(), n.numpy(), rtol=1e-12, atol=1e-12)


def test_compute_evaluates_several_tensors_in_one_graph():
    x, labels, dx, dlabels = _data()
    calls = []

    def counting(dsk, keys, **kwargs):
        calls.append(keys)
        return dask.get(dsk, keys, **kwargs)

    with tg.GradientTape() as tape:
        w = tg.Variable(np.ones(3))
        loss = _loss(tg.asarray(dx), tg.asarray(dlabels), w, 0.0)
    grad = tape.gradient(loss, w)
    plain = tg.constant(2.0)
    with dask.config.set(scheduler=counting):
        loss_c, (grad_c, plain_c) = tg.compute(loss, [grad, plain])
    assert len(calls) == 1  # one graph: the forward shared by loss and gradient ran once
    assert plain_c is plain  # not lazy: returned as it is
    np.testing.assert_allclose(loss_c.numpy(), loss.numpy(), rtol=1e-14)
    np.testing.assert_allclose(grad_c.numpy(), grad.numpy(), rtol=1e-14)


def test_compute_refuses_what_is_not_a_tensor():
    with pytest.raises(TypeError, match=r"tg.compute: argument 1 is or holds a ndarray; pass "
                                        r"Tensors or lists/tuples of Tensors"):
        tg.compute(tg.constant(1.0), [np.ones(2)])


# --- materialisation on assignment ------------------------------------------------------------------
def test_optimizer_steps_keep_numpy_variables_numpy_and_match_numpy_training():
    x, labels, dx, dlabels = _data()
    trajectories = []
    for data in [(x, labels), (dx, dlabels)]:
        w, b = tg.Variable(np.zeros(3)), tg.Variable(0.0)
        opt = tg.optimizers.Adam(0.1)
        for _ in range(3):
            with tg.GradientTape() as tape:
                loss = _loss(tg.asarray(data[0]), tg.asarray(data[1]), w, b)
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))  # lazy gradients
            assert isinstance(w._value, np.ndarray) and isinstance(b._value, (np.ndarray, np.generic))
        trajectories.append(w.numpy())
    np.testing.assert_allclose(trajectories[1], trajectories[0], rtol=1e-12, atol=1e-12)


def test_a_dask_variable_holds_no_graph_of_past_steps():
    x, labels, dx, dlabels = _data()
    w = tg.Variable(da.zeros(3, chunks=2))  # two chunks
    opt = tg.optimizers.SGD(0.1, momentum=0.9)
    for _ in range(4):
        with tg.GradientTape() as tape:
            loss = _loss(tg.asarray(dx), tg.asarray(dlabels), w, 0.0)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        assert isinstance(w._value, da.Array)
        # persisted: its graph is its two chunks, whatever the number of steps
        assert len(w._value.__dask_graph__()) == 2
    reference = tg.Variable(np.zeros(3))
    opt = tg.optimizers.SGD(0.1, momentum=0.9)
    for _ in range(4):
        with tg.GradientTape() as tape:
            loss = _loss(tg.asarray(x), tg.asarray(labels), reference, 0.0)
        opt.apply_gradients([(tape.gradient(loss, reference), reference)])
    np.testing.assert_allclose(w.numpy(), reference.numpy(), rtol=1e-12, atol=1e-12)


def test_assign_materialises_a_lazy_value():
    v = tg.Variable(np.zeros(4))
    v.assign(tg.asarray(da.arange(4.0, chunks=2)) * 2.0)
    assert type(v._value) is np.ndarray
    np.testing.assert_array_equal(v.numpy(), [0.0, 2.0, 4.0, 6.0])


# --- the Dask kernels -----------------------------------------------------------------------------
@pytest.mark.parametrize("op_type", ["GetItem", "ScatterAdd", "TensorScatterUpdate"])
def test_indexing_ops_on_their_samples_are_lazy_and_equal_numpy(op_type):
    opdef = tg.registered_ops()[op_type]
    rng = np.random.default_rng(1)
    for sample in opdef.samples:
        args, attrs, floating = sample.materialize(rng)
        want = opdef.public(*args, **attrs).numpy()
        lazy = [tg.asarray(da.from_array(a, chunks=2)) if i in floating else a
                for i, a in enumerate(args)]
        with lazy_only:
            got = opdef.public(*lazy, **attrs)
        assert isinstance(got._value, da.Array), sample
        np.testing.assert_array_equal(got.numpy(), want, err_msg=repr(attrs.get("key")))


@pytest.mark.parametrize("key, axis", [
    ((np.array([0, 29, -1, 2, 2, 0, -30]),), 0),  # repeats and negative indices
    ((slice(None), np.array([[2, 1], [1, -3]])), 1),  # a 2-d index on axis 1
    ((Ellipsis, np.array([3, 3, 0])), 2),  # on the last axis
    ((slice(None), slice(None), np.array([True, False, True, True, False, False, True, False])),
     2),  # a boolean mask
], ids=["rows", "axis1-2d", "ellipsis", "mask"])
def test_scatter_add_of_one_index_array_is_chunked_and_lazy(key, axis):
    rng = np.random.default_rng(2)
    shape = (30, 9, 8)
    values = rng.normal(size=np.zeros(shape)[key].shape)
    want = np.zeros(shape)
    np.add.at(want, key, values)
    with dask.config.set({"array.chunk-size": "1KiB"}), lazy_only:
        got = dask_kernels.scatter_add(shape, np.float64, key, da.from_array(values, chunks=5))
    assert got.numblocks[axis] > 1  # the output is chunked along the scattered axis
    np.testing.assert_allclose(got.compute(), want, rtol=0, atol=1e-13)


def test_scatter_add_takes_a_dask_index_array():
    rng = np.random.default_rng(3)
    index = rng.integers(-50, 50, size=200)
    values = rng.normal(size=(200, 2))
    want = np.zeros((50, 2))
    np.add.at(want, index, values)
    with dask.config.set({"array.chunk-size": "256B"}), lazy_only:
        got = dask_kernels.scatter_add((50, 2), np.float64, (da.from_array(index, chunks=30),),
                                       da.from_array(values, chunks=(30, 2)))
    assert got.numblocks[0] > 1
    np.testing.assert_allclose(got.compute(), want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("key", [(slice(5, 0, -2), None, 1), (2, slice(None, None, -1)),
                                 (Ellipsis, slice(0, 4, 3)), (-1,)])
def test_scatter_add_and_update_of_basic_keys_match_numpy(key):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(7, 3, 4))
    values = rng.normal(size=x[key].shape)
    added, updated = np.zeros(x.shape), x.copy()
    np.add.at(added, key, values)
    updated[key] = values
    v = da.from_array(values, chunks=2)
    with lazy_only:
        got_added = dask_kernels.scatter_add(x.shape, np.float64, key, v)
        got_updated = dask_kernels.scatter_update(da.from_array(x, chunks=2), key, v)
    np.testing.assert_array_equal(got_added.compute(), added)
    np.testing.assert_array_equal(got_updated.compute(), updated)


def test_scatter_update_reports_a_bad_value_shape_when_called():
    x = tg.asarray(da.zeros((3, 4), chunks=2))
    with pytest.raises(ValueError, match=r"cannot assign a value of shape \(3,\) to "
                                         r"tensor\[<array shape=\(2,\) dtype=int64>, "):
        x[np.array([0, 2]), np.array([1, 3])] = tg.asarray(da.ones(3, chunks=2))


def test_scatter_update_reports_an_index_out_of_range_when_called():
    x = tg.asarray(da.zeros((3, 4), chunks=2))
    with pytest.raises(IndexError, match=r"tensor index \[5\] is invalid for a tensor of "
                                         r"shape \(3, 4\)"):
        x[5] = 1.0


def test_erf_and_gelu_gradient_are_lazy_and_match_scipy():
    x = np.linspace(-3.0, 3.0, 13)
    with lazy_only:
        erf = dask_kernels.erf(da.from_array(x, chunks=4))
        t = tg.asarray(da.from_array(x, chunks=4))
        with tg.GradientTape() as tape:
            tape.watch(t)
            y = tg.sum(tg.nn.gelu(t))
        g = tape.gradient(y, t)
    np.testing.assert_allclose(erf.compute(), scipy_special.erf(x), rtol=1e-15)
    pdf = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)  # d/dx x Phi(x) = Phi(x) + x phi(x)
    np.testing.assert_allclose(g.numpy(), 0.5 * (1 + scipy_special.erf(x / np.sqrt(2))) + x * pdf,
                               rtol=1e-13)


def test_dask_as_the_default_backend(monkeypatch):
    monkeypatch.setattr(_backend, "_default", _backend._import_namespace("dask.array"))
    w = tg.Variable([1.0, -2.0])
    c = tg.constant([[0.5, 1.0], [2.0, -1.0]])
    assert isinstance(w._value, da.Array) and isinstance(c._value, da.Array)
    with tg.GradientTape() as tape:
        y = tg.sum(tg.nn.gelu(c @ w))
    g = tape.gradient(y, w)
    assert isinstance(g._value, da.Array)
    z = np.array([[0.5, 1.0], [2.0, -1.0]]) @ np.array([1.0, -2.0])
    dgelu = 0.5 * (1 + scipy_special.erf(z / np.sqrt(2))) + z * np.exp(-z * z / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(g.numpy(), np.array([[0.5, 1.0], [2.0, -1.0]]).T @ dgelu,
                               rtol=1e-13)


# --- on a cluster of 2 worker processes ---------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def test_cluster_gradients_equal_numpy_to_first_and_second_order(client):
    x, labels, dx, dlabels = _data(rows=60, chunks=30)
    w0, v = np.array([0.3, -0.2, 0.1]), np.array([1.0, 0.5, -1.5])
    lazy = _first_and_second_order(dx, dlabels, w0, -0.1, v)
    assert all(isinstance(t._value, da.Array) for t in lazy)
    got = tg.compute(*lazy)
    want = _first_and_second_order(x, labels, w0, -0.1, v)
    for g, n in zip(got, want):
        np.testing.assert_allclose(g.numpy(), n.numpy(), rtol=1e-12, atol=1e-12)
    # both workers are (still or again) there: on a loaded 2-core CI machine the scheduler may
    # briefly drop a worker whose heartbeat is late, and its nanny brings it back
    client.wait_for_workers(2, timeout=60)
    assert len(client.scheduler_info()["workers"]) == 2


def test_the_example_trains_on_the_cluster(client, capsys):
    result = example.train(client, rows=20_000, steps=3, chunk_rows=10_000, learning_rate=0.2)
    losses = result["losses"]
    assert losses[0] == pytest.approx(np.log(2.0), rel=1e-12)  # w = 0, b = 0: p = 1/2
    assert all(b < a for a, b in zip(losses, losses[1:])) and result["loss"] < losses[-1]
    assert 0.75 < result["accuracy"] <= 1.0
    assert 0.0 < result["peak_worker_memory_gib"] < 1.5
    assert "peak worker memory" in capsys.readouterr().out
