"""Tensors of JAX arrays behave as NumPy's where JAX itself differs: errors for bad shapes and
indices (JAX raises TypeError or clamps), negative axes, complex truth values, the lower
triangle of eigh/eigvalsh/cholesky, copies, devices.

These run with NumPy as the default backend (CI) on JAX arrays made explicitly; the whole
suite also runs with ``TAPEGRAD_ARRAY_BACKEND=jax.numpy`` (README). Skipped without JAX.
"""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import linalg as LA

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
# JAX's 64-bit mode on in each test (_x64), as TAPEGRAD_ARRAY_BACKEND=jax.numpy and tg.function
# have it

JAX_ARRAY = type(jnp.zeros(1))


@pytest.fixture(autouse=True)
def _x64():
    """JAX's 64-bit mode on in each test only (thread-local, never process-wide)."""
    with tg.config.x64_scope(jax):
        yield


def _j(a):
    return tg.asarray(jnp.asarray(a))


def test_out_of_bounds_and_non_integer_indices_raise():
    x = _j(np.ones((3, 4)))
    for key, bad in [(5, r"\[5\]"), ((0, -5), r"\[0, -5\]"),
                     ((slice(None), np.array([1, 4])), r"\[slice.*dtype=int64>\]")]:
        with pytest.raises(IndexError, match=bad + r" is invalid for a tensor of shape \(3, 4\): "
                                               "index -?[45] is out of bounds for axis [01]"):
            x[key]
        with pytest.raises(IndexError, match=bad + r" is invalid for a tensor of shape \(3, 4\)"):
            y = x + 0
            y[key] = 1.0
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 3"):
        tg.take(x, _j([0, 7]), axis=0)
    with pytest.raises(IndexError, match="arrays used as indices must be of integer"):
        x[_j([0.0, 1.0])]
    # in bounds, negative, and boolean masks are read as NumPy reads them
    a = np.arange(12.0).reshape(3, 4)
    for key in [-3, (2, -1), np.array([0, -1]), (Ellipsis, np.array([3, -4])),
                np.array([True, False, True]), (None, 1, slice(None, None, -1))]:
        got = _j(a)[key]
        assert type(got._value) is JAX_ARRAY
        np.testing.assert_array_equal(got.numpy(), a[key])


def test_assigning_values_with_leading_size_one_axes():
    a = np.zeros((2, 3))
    y = _j(a)
    y[1] = _j(np.array([[1.0, 2.0, 3.0]]))  # (1, 3) into a row of 3, as NumPy allows
    a[1] = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(y.numpy(), a)


def test_shape_errors_are_value_errors():
    with pytest.raises(ValueError, match=r"concat: cannot concatenate shapes \(2, 3\), \(4, 5\) "
                                         "along axis 0: the shapes differ"):
        tg.concat([_j(np.ones((2, 3))), _j(np.ones((4, 5)))])
    with pytest.raises(ValueError, match=r"matmul: cannot multiply shapes \(2, 3\) and \(4, 5\)"):
        _j(np.ones((2, 3))) @ _j(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"tensordot: cannot contract shapes \(2, 3\) and "
                                         r"\(4, 5\)"):
        tg.tensordot(_j(np.ones((2, 3))), _j(np.ones((4, 5))), axes=1)
    with pytest.raises(ValueError, match=r"permute_dims: axes \(0, 0\) is not a permutation"):
        tg.permute_dims(_j(np.ones((2, 3))), (0, 0))
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(tg.permute_dims(_j(a), (-1, -3, 1)).numpy(),
                                  np.permute_dims(a, (-1, -3, 1)))


def test_any_and_all_of_complex_values():
    # JAX's own any/all reduce only the real part: any([0j, 1j]) is False there
    assert bool(tg.any(_j(np.array([0j, 1j]))))
    assert not bool(tg.all(_j(np.array([1j, 0j]))))
    np.testing.assert_array_equal(tg.any(_j(np.array([[0j, 2j], [0j, 0j]])), axis=1).numpy(),
                                  [True, False])


def test_eigh_eigvalsh_cholesky_read_only_the_lower_triangle():
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    x = _j(np.tril(a) + np.triu(np.full((3, 3), 9.0), 1))  # the upper triangle is ignored
    w, v = LA.eigh(x)
    assert type(w._value) is JAX_ARRAY
    np.testing.assert_allclose(w.numpy(), np.linalg.eigvalsh(a), rtol=1e-12)
    np.testing.assert_allclose((v.numpy() * w.numpy()) @ v.numpy().T, a, atol=1e-12)
    np.testing.assert_allclose(LA.eigvalsh(x).numpy(), np.linalg.eigvalsh(a), rtol=1e-12)
    np.testing.assert_allclose(LA.cholesky(x).numpy(), np.linalg.cholesky(a), rtol=1e-12)


def test_copies_devices_and_integer_overflow():
    x = _j(np.array([1.0, 2.0]))
    c = tg.asarray(x, copy=True)
    assert c._value.unsafe_buffer_pointer() != x._value.unsafe_buffer_pointer()
    device = x.device
    z = tg.zeros(2, device=device)  # device-resident there, its eager value on the default
    assert z.device == device and type(z._value) is type(tg.zeros(2)._value)  # backend
    v = tg.Variable(_j(np.array([1, 2], dtype=np.int8)))
    with pytest.raises(OverflowError):  # JAX would wrap 300 around in int8
        v.assign_add(300)
    v.assign_add(1)
    np.testing.assert_array_equal(v.numpy(), [2, 3])
