"""Gradient-check every built-in primitive, to first and second order, on its declared samples:
real (float64) inputs, and complex ones (complex128, and for ops of several inputs the first
complex and the others real), checked as (real, imaginary) pairs under tapegrad's convention
(TensorFlow's). An op declared ``real_only`` must refuse complex input instead.

The cases are read from ``tg.registered_ops()`` at collection time, so a new op is picked up
without editing this file. Only ops declared inside the ``tapegrad`` package are checked (test
modules register their own throw-away ops). A differentiable op without samples fails here.
The JVPs of the same cases (and float32 ones) are checked in ``tests/test_forward.py``.
"""
from __future__ import annotations

import inspect
import zlib

import numpy as np
import pytest

import tapegrad as tg  # imports every op module, filling the registry
from conftest import on_strict_first_samples
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


def _random_inputs(sample) -> int:
    """The number of random (floating) inputs of ``sample``."""
    return len(sample.materialize(np.random.default_rng(0))[2])


def complex_cases():
    """``(op type, sample index, mixed)`` of every sample with a random input; ``mixed``: only
    the first random input is complex (for samples of several)."""
    cases = []
    for name, opdef in sorted(tg.registered_ops().items()):
        if not opdef.differentiable or not _is_builtin(opdef):
            continue
        for k, sample in enumerate(opdef.samples):
            n = _random_inputs(sample)
            if n:
                cases.append(pytest.param(name, k, False, id=f"{name}-{k}"))
            if n > 1:
                cases.append(pytest.param(name, k, True, id=f"{name}-{k}-mixed"))
    return cases


# Ops whose outputs hold vectors fixed only up to their signs (real) or phases (complex):
# {op type: {output: the axis along which a vector's entries lie}}. LAPACK and cuSOLVER may pick
# different signs (eager NumPy against XLA on a GPU), so every sweep sees each real vector with
# its largest entry made positive: the sign is locally constant, so the derivatives are the op's
# own. A complex vector's phase is not locally constant (nor chosen alike by the op's derivatives
# and by LAPACK), so each complex vector is multiplied by conj(p) / |p|, p its entry of largest
# modulus: the function is then gauge-invariant (as PyTorch requires of losses of complex
# eigenvectors) and smooth. For Svd and Qr the vectors of the first output (columns of U, Q)
# pair with the rows of the second (Vh, R): those rows get the inverse phase, so that the
# factorization is unchanged (Svd's extra rows of Vh with full_matrices get their own).
_SIGN_FREE = {"Eigh": {1: -2}, "Svd": {0: -2, 2: -1}, "Qr": {0: -2, 1: -1}}


def _fixed_signs(y, axis):
    """``y`` with each vector along ``axis`` multiplied by the sign of its largest entry (the
    conjugate phase ``conj(p) / |p|`` of its entry ``p`` of largest modulus for a complex ``y``)."""
    if 0 in y.shape:
        return y
    return y * _phase(y, axis)


def _phase(y, axis):
    """``conj(p) / |p|`` (``sign(p)`` for real ``y``) of each vector's entry ``p`` of largest
    modulus, with the vector's axis kept (length 1)."""
    largest = tg.take_along_axis(y, tg.argmax(tg.abs(y), axis=axis, keepdims=True), axis=axis)
    if y.dtype.kind != "c":
        return tg.sign(largest)
    return tg.conj(largest) / tg.abs(largest)


def _fixed_phases(out, sign_free):
    """The outputs with the vectors of ``sign_free`` fixed: real ones by their signs, each
    independently; complex ones by their phases, with a second output's rows taking the inverse
    phases of the first's columns (the pairs of Svd and Qr)."""
    out = list(out)
    keys = sorted(sign_free)
    if len(keys) == 2 and out[keys[0]].dtype.kind == "c" and 0 not in out[keys[0]].shape:
        a, b = keys  # the columns of out[a] pair with the rows of out[b]
        phase = _phase(out[a], -2)  # (..., 1, K)
        out[a] = out[a] * phase
        k = min(out[a].shape[-1], out[b].shape[-2])
        paired = out[b][..., :k, :] * tg.conj(tg.matrix_transpose(phase[..., :k]))
        if out[b].shape[-2] > k:  # unpaired rows (Svd's full Vh of a wide matrix)
            paired = tg.concat([paired, _fixed_signs(out[b][..., k:, :], -1)], axis=-2)
        out[b] = paired
        return out
    return [_fixed_signs(y, sign_free[k]) if k in sign_free else y for k, y in enumerate(out)]


def symmetric_part(x):
    """``(x + x^T) / 2``, or the Hermitian part ``(x + x^H) / 2`` of a complex ``x``: the input
    of a ``_SYMMETRIC_INPUT`` op."""
    xt = tg.matrix_transpose(x)
    return (x + (tg.conj(xt) if x.dtype.kind == "c" else xt)) / 2.0


def sample_function(op_type, args, attrs, positions):
    """The op of ``op_type`` as a function of the sample's random inputs (the others fixed);
    vectors fixed up to sign or phase have them fixed (``_SIGN_FREE``)."""
    op = tg.registered_ops()[op_type].public
    sign_free = _SIGN_FREE.get(op_type, {})

    def f(*xs):
        full = list(args)
        for p, x in zip(positions, xs):
            full[p] = symmetric_part(x) if op_type in _SYMMETRIC_INPUT else x
        out = op(*full, **attrs)
        if not sign_free:
            return out
        return type(out)(_fixed_phases(out, sign_free))

    return f


def first_sample_cases():
    """``(op type, sample index)``: the first sample of each differentiable built-in op type
    that declares samples, and every other sample of a control-flow construct (they take
    different paths: reverse, empty, early exits, a batched predicate, the forms built on
    it), but a ``While`` without ``maximum_iterations`` (no reverse mode when compiled)."""
    cases = []
    for name, opdef in sorted(tg.registered_ops().items()):
        if not (opdef.differentiable and _is_builtin(opdef) and opdef.samples):
            continue
        cases.append(pytest.param(name, 0, id=name))
        cases += [pytest.param(name, k, id=f"{name}-{k}")
                  for k, sample in enumerate(opdef.samples[1:], 1)
                  if opdef.is_construct and not unbounded_while(name, sample.attrs)]
    return cases


def floating_outputs(op_type, args, attrs, positions):
    """:func:`sample_function`, returning the list of its floating outputs."""
    f = sample_function(op_type, args, attrs, positions)

    def floating(*xs):
        return [o for o in _as_list(f(*xs)) if tg._backend.is_floating(o._value.dtype)]

    return floating


def refuses_complex(op_type, args, attrs, positions):
    """Assert that a ``real_only`` op refuses the complex first random input (by name)."""
    f = sample_function(op_type, args, attrs, positions)
    with pytest.raises(TypeError, match=rf"op type '{op_type}': input .* has the complex dtype "
                                        r"complex128, but .* real numbers only"):
        f(*[args[p] for p in positions])


def _as_list(ys):
    return list(ys) if isinstance(ys, (tuple, list)) else [ys]


def complex_sample(op_type, index, mixed, rng):
    """``(args, attrs, positions)`` of the complex sample to check, or ``None`` after asserting
    that the op type refuses complex input (``real_only``)."""
    opdef = tg.registered_ops()[op_type]
    args, attrs, positions = opdef.samples[index].materialize(rng, np.complex128,
                                                               first_only=mixed)
    if opdef.real_only:
        refuses_complex(op_type, args, attrs, positions)
        return None
    return args, attrs, positions


def compiled_modes(op_type):
    """``(False,)``, or ``(False, True)`` for a control-flow construct (``Scan``, ``While``,
    ``Switch``): eagerly the tapes see its body's ops, only a compiled call (``tg.function``)
    is recorded as the construct, whose gradient and JVP are its op type's rules."""
    return (False, True) if tg.registered_ops()[op_type].is_construct else (False,)


def unbounded_while(op_type, attrs) -> bool:
    """Whether the sample is a ``While`` loop without ``maximum_iterations``: compiled, its
    reverse mode is checkpointed (``UNBOUNDED_WHILE_SLOTS``), first order only."""
    return op_type == "While" and attrs.get("maximum_iterations") is None


def check_gradients_in_modes(op_type, args, attrs, positions):
    """``tg.test.check_gradients`` of the sample to second order, eagerly and (for a construct)
    compiled."""
    f = sample_function(op_type, args, attrs, positions)
    for compiled in compiled_modes(op_type):
        xs = [args[p] for p in positions]
        if not compiled:
            tg.test.check_gradients(f, xs, order=2)
        elif unbounded_while(op_type, attrs):  # checkpointed: first order only
            tg.test.check_gradients(tg.function(f), xs)
            with pytest.raises(ValueError, match="and has first-order reverse mode only"):
                tg.test.check_gradients(tg.function(f), xs, order=2)
        else:
            tg.test.check_gradients(tg.function(f), xs, order=2)


@pytest.mark.parametrize("op_type, index, mixed", on_strict_first_samples(complex_cases()))
def test_complex_gradient_first_and_second_order(op_type, index, mixed):
    rng = np.random.default_rng([zlib.crc32(op_type.encode()), index, 2])
    sample = complex_sample(op_type, index, mixed, rng)
    if sample is not None:
        check_gradients_in_modes(op_type, *sample)


@pytest.mark.parametrize("op_type, index", on_strict_first_samples(_cases()))
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
    # only the sample's random float inputs vary; its other arguments are constants
    check_gradients_in_modes(op_type, args, attrs, float_positions)
