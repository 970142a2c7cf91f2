"""Gradient-check every built-in primitive, to first and second order, on its declared samples.

The cases are read from ``tg.registered_ops()`` at collection time, so a new op is picked up
without editing this file. Only ops declared inside the ``tapegrad`` package are checked (test
modules register their own throw-away ops). A differentiable op without samples fails here.
"""
from __future__ import annotations

import inspect
import zlib

import numpy as np
import pytest

import tapegrad as tg  # imports every op module, filling the registry
# The examples register their own ops (DigitsElu, StableLogSigmoid); import them here so the
# cases do not depend on whether test_digits.py or test_dask.py was collected first (node ids of
# a partial run must match a full run's).
import tapegrad.examples.digits  # noqa: F401
import tapegrad.examples.distributed_regression  # noqa: F401

# Ops of a symmetric matrix that read only its lower triangle and return the symmetric gradient
# (as PyTorch and JAX do): the derivative along symmetric directions, not along every direction
# (moving one off-diagonal entry changes the forward only if it lies in the lower triangle).
# They are checked as functions of (x + x^T) / 2, whose finite differences along any direction
# v are those of the op along the symmetric direction (v + v^T) / 2.
_SYMMETRIC_INPUT = {"Cholesky", "Eigh", "Eigvalsh"}


def _is_builtin(opdef) -> bool:
    module = getattr(inspect.unwrap(opdef.forward), "__module__", "") or ""
    return module == "tapegrad" or module.startswith("tapegrad.")


def _cases():
    cases = []
    for name, opdef in sorted(tg.registered_ops().items()):
        if not opdef.differentiable or not _is_builtin(opdef):
            continue
        if not opdef.samples:
            cases.append(pytest.param(name, None, id=f"{name}-no-samples"))
        for k in range(len(opdef.samples)):
            cases.append(pytest.param(name, k, id=f"{name}-{k}"))
    return cases


@pytest.mark.parametrize("op_type, index", _cases())
def test_gradient_first_and_second_order(op_type, index):
    opdef = tg.registered_ops()[op_type]
    if index is None:
        pytest.fail(f"op type {op_type!r} ({opdef.forward.__module__}) is differentiable but "
                    "declares no sample inputs: declare them with "
                    f"@primitive({op_type!r}, samples=[Sample(...)]) so that its gradient is "
                    "checked here (or declare it non-differentiable with tg.no_gradient)")
    sample = opdef.samples[index]
    rng = np.random.default_rng([zlib.crc32(op_type.encode()), index])  # fixed per case
    args, attrs, float_positions = sample.materialize(rng)
    op = opdef.public

    def f(*xs):
        full = list(args)
        for p, x in zip(float_positions, xs):
            full[p] = (x + tg.matrix_transpose(x)) / 2.0 if op_type in _SYMMETRIC_INPUT else x
        return op(*full, **attrs)

    # only the sample's random float inputs vary; its other arguments are constants
    tg.test.check_gradients(f, [args[p] for p in float_positions], order=2)
