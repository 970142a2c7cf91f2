"""``tg.linalg``: the Array API ``linalg`` extension (2024.12), differentiable.

``matmul``, ``matrix_transpose``, ``tensordot`` and ``vecdot`` are the main namespace's
functions; the others are defined in :mod:`tapegrad.ops.linalg_ext`, forward and gradient side
by side, with the source of each gradient formula in its docstring. Also reachable as
``x.__array_namespace__().linalg`` for a Tensor ``x``.
"""
from __future__ import annotations

from .ops.products import matmul, tensordot, vecdot
from .ops.linalg_ext import EighResult, QRResult, SlogdetResult, SVDResult  # noqa: F401
from .ops.linalg_ext import (cholesky, cross,
                             det, diagonal, eigh, eigvalsh, inv, matrix_norm, matrix_power,
                             matrix_rank, outer, pinv, qr, slogdet, solve, svd, svdvals, trace,
                             vector_norm)
from .ops.manipulation import matrix_transpose
from .solvers import cg, gmres  # noqa: F401 - beside the standard extension, not in __all__

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv",
           "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot",
           "vector_norm"]
