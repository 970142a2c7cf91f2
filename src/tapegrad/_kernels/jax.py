"""JAX kernels, so that nothing of a JAX computation (``tg.function``'s traces, or JAX as the
default backend, ``TAPEGRAD_ARRAY_BACKEND=jax.numpy``) leaves the device for a NumPy round
trip, and JAX's linear algebra reads what NumPy's does.

* ``optimization_barrier`` is ``jax.lax.optimization_barrier`` (``tg.lax``'s).
* ``erf`` is ``jax.scipy.special.erf``.
* ``scatter_add`` and ``scatter_update`` are JAX's functional updates, ``.at[key].add`` and
  ``.at[key].set`` (repeated indices accumulate in ``add``).
* ``eigh``, ``eigvalsh`` and ``cholesky`` read only the lower triangle, as NumPy's do and as
  tapegrad documents (``symmetrize_input=False``: by default JAX uses ``(x + x^H) / 2``).
"""
from __future__ import annotations


def erf(x):
    """``jax.scipy.special.erf``."""
    from jax.scipy.special import erf as _erf

    return _erf(x)


def scatter_add(shape, dtype, key, values):
    """Zeros of ``shape`` with ``values`` added at ``key`` (``.at[key].add``)."""
    import jax.numpy as jnp

    return jnp.zeros(shape, dtype).at[key].add(values)


def scatter_update(x, key, v):
    """``x`` with ``x[key]`` set to ``v`` (``.at[key].set``)."""
    return x.at[key].set(v)


def index_add(x, key, values):
    """``x`` with ``values`` added at ``key`` (``.at[key].add``; repeats accumulate)."""
    return x.at[key].add(values)


def unique_rows(indices, values, n):
    """``(unique, summed)``: the distinct ``indices`` and the rows of ``values`` summed per
    index, padded to ``len(indices)`` with index ``n`` (out of range: ``.at`` updates drop
    it) and zero rows, so that the shapes are static under ``jax.jit``."""
    import jax.numpy as jnp

    k = indices.shape[0]
    unique, inverse = jnp.unique(indices, size=k, fill_value=n, return_inverse=True)
    summed = jnp.zeros((k,) + values.shape[1:], values.dtype).at[inverse.reshape(-1)].add(values)
    return unique, summed


def eigh(x):
    """``jax.numpy.linalg.eigh`` of the lower triangle."""
    import jax.numpy as jnp

    return jnp.linalg.eigh(x, UPLO="L", symmetrize_input=False)


def eigvalsh(x):
    """``jax.numpy.linalg.eigvalsh`` of the lower triangle."""
    import jax.numpy as jnp

    return jnp.linalg.eigvalsh(x, UPLO="L", symmetrize_input=False)


def cholesky(x):
    """``jax.numpy.linalg.cholesky`` of the lower triangle (NaN where ``x`` is not positive
    definite: JAX does not raise)."""
    import jax.numpy as jnp

    return jnp.linalg.cholesky(x, symmetrize_input=False)


def optimization_barrier(xs):
    """``jax.lax.optimization_barrier`` of the tuple ``xs``."""
    import jax

    return jax.lax.optimization_barrier(tuple(xs))


KERNELS = {"optimization_barrier": optimization_barrier, "erf": erf, "scatter_add": scatter_add, "scatter_update": scatter_update,
           "index_add": index_add, "unique_rows": unique_rows,
           "eigh": eigh, "eigvalsh": eigvalsh, "cholesky": cholesky}
