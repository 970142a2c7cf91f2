"""Kernels of backends that have their own (Dask, CuPy, JAX), loaded by ``_backend`` only when
an array of that library first appears, so that nothing imports Dask, CuPy or JAX otherwise.

Each module has ``KERNELS``: a dict from kernel name (``"erf"``, ``"scatter_add"``, ...) to the
function, with the signature of the NumPy kernel of that name (see ``_backend.kernel``) or, for
a kernel that replaces a standard function (JAX's ``eigh``), that function's. These
modules import nothing of tapegrad.
"""
