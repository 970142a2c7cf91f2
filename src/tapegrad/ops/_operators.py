"""Python operators of :class:`Tensor`, bound to the ops of this package."""
from __future__ import annotations

from . import elementwise as ew
from .indexing import getitem
from .linalg import matmul
from .manipulation import matrix_transpose


def _swap(fn):
    def reflected(a, b):
        return fn(b, a)

    reflected.__name__ = f"r{fn.__name__}"
    return reflected


def _transpose(x):
    if x.ndim != 2:
        raise ValueError(f"Tensor.T is defined for 2-d tensors only (Array API), this one has "
                         f"shape {x.shape}; use x.mT to swap the last two axes or "
                         "tg.permute_dims(x, axes) for another order")
    return matrix_transpose(x)


def attach(cls):
    """Bind ``+ - * / // % ** @``, unary ops, comparisons, ``[]``, ``.T``/``.mT``, ``astype``."""
    for name, fn in [("add", ew.add), ("sub", ew.subtract), ("mul", ew.multiply),
                     ("truediv", ew.divide), ("floordiv", ew.floor_divide),
                     ("mod", ew.remainder), ("pow", ew.pow)]:
        setattr(cls, f"__{name}__", fn)
        setattr(cls, f"__r{name}__", _swap(fn))
    for name, fn in [("eq", ew.equal), ("ne", ew.not_equal), ("lt", ew.less),
                     ("le", ew.less_equal), ("gt", ew.greater), ("ge", ew.greater_equal),
                     ("and", ew.logical_and), ("or", ew.logical_or), ("xor", ew.logical_xor)]:
        setattr(cls, f"__{name}__", fn)
    cls.__neg__ = ew.negative
    cls.__pos__ = ew.positive
    cls.__abs__ = ew.abs
    cls.__invert__ = ew.logical_not
    cls.__getitem__ = getitem
    cls.__matmul__ = matmul
    cls.__rmatmul__ = _swap(matmul)
    cls.T = property(_transpose, doc="The transpose of a 2-d tensor (Array API ``x.T``).")
    cls.mT = property(matrix_transpose, doc="The last two axes swapped (``matrix_transpose``).")
    cls.astype = lambda self, dtype, /, *, copy=True, device=None: ew.astype(self, dtype)
