"""CuPy: tapegrad's kernels on the GPU, and a training step without device-to-host transfers.

Skipped unless CuPy is installed and a CUDA device is present. They passed on an H100
(``benchmarks/device_check.sh``, 2026-11-27). To run the
whole suite on CuPy: ``TAPEGRAD_ARRAY_BACKEND=cupy python -m pytest``.
"""
from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (the GPU path is unverified)")
try:
    _DEVICES = cupy.cuda.runtime.getDeviceCount()
except Exception:  # noqa: BLE001 - CUDA driver missing or broken
    _DEVICES = 0
if _DEVICES == 0:
    pytest.skip("no CUDA device: the CuPy tests need a GPU", allow_module_level=True)

import cupyx  # noqa: E402
import scipy.special  # noqa: E402

import tapegrad as tg  # noqa: E402
from tapegrad import _backend  # noqa: E402


def test_erf_and_scatter_add_use_cupy_kernels():
    x = cupy.linspace(-3.0, 3.0, 13)
    assert isinstance(_backend.kernel(_backend.namespace(x), "erf")(x), cupy.ndarray)
    np.testing.assert_allclose(tg.nn.gelu(tg.asarray(x)).numpy(),
                               0.5 * x.get() * (1 + scipy.special.erf(x.get() / np.sqrt(2))),
                               rtol=1e-14)
    t = tg.asarray(cupy.arange(5.0))
    with tg.GradientTape() as tape:
        tape.watch(t)
        y = tg.sum(tg.take(t, np.array([0, 3, 3, -1])) ** 2)
    g = tape.gradient(y, t)
    assert isinstance(g._value, cupy.ndarray)
    np.testing.assert_allclose(g.numpy(), [0.0, 0.0, 0.0, 12.0, 8.0], rtol=1e-15)


def test_a_training_step_makes_no_device_to_host_transfer():
    rng = cupy.random.default_rng(0)
    x = tg.asarray(rng.standard_normal((256, 32)))
    targets = tg.asarray(rng.standard_normal((256, 10)))
    w = tg.Variable(rng.standard_normal((32, 10)) * 0.1)
    opt = tg.optimizers.Adam(1e-2)

    def step():
        with tg.GradientTape() as tape:
            loss = tg.mean((tg.nn.gelu(x @ w) - targets) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    step()  # the first step creates the optimizer's slots
    # a copy to the host synchronizes the device; cupyx refuses synchronization in this block
    with cupyx.allow_synchronize(False):
        loss = step()
    assert isinstance(loss._value, cupy.ndarray) and isinstance(w._value, cupy.ndarray)
