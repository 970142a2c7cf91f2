"""Kernels of backends that have their own (Dask, CuPy), loaded by ``_backend`` only when an
array of that library first appears, so that nothing imports Dask or CuPy otherwise.

Each module has ``KERNELS``: a dict from kernel name (``"erf"``, ``"scatter_add"``, ...) to the
function, with the signature of the NumPy kernel of that name (see ``_backend.kernel``). These
modules import nothing of tapegrad.
"""
