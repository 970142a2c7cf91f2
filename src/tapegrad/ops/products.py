"""Linear algebra in the main namespace (Array API): ``matmul``, ``tensordot``, ``vecdot``.

(``matrix_transpose`` lives in :mod:`.manipulation`.) Gradients are the usual ones: for
``C = A @ B``, ``dA = dC @ B^T`` and ``dB = A^T @ dC`` (Giles, "An extended collection of
matrix derivative results", 2008), summed over broadcast batch axes. Real floating dtypes.
"""
from __future__ import annotations

from .._backend import namespace as _ns
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .manipulation import _shape, expand_dims, matrix_transpose, permute_dims, reshape
from .reductions import _sum_to


# --- matmul ----------------------------------------------------------------------------------
@primitive("MatMul", samples=[
    Sample((3, 4), (4, 5)), Sample((4,), (4, 5)), Sample((3, 4), (4,)), Sample((4,), (4,)),
    Sample((2, 3, 4), (4, 5)), Sample((2, 1, 3, 4), (5, 4, 2)), Sample((4,), (2, 4, 3)),
    Sample((2, 3, 4), (4,)), Sample((0, 3), (3, 2)), Sample((3, 0), (0, 2)),
    Sample((1, 1), (1, 1)), Sample((1,), (1,))])
def _matmul(x1, x2):
    try:
        return _ns(x1, x2).matmul(x1, x2)
    except ValueError as e:
        s1, s2 = _shape(x1), _shape(x2)
        if not s1 or not s2:
            msg = "matmul needs at least 1-d operands; use multiply for scalars"
        else:
            msg = (f"x1's last dimension ({s1[-1]}) must equal x2's "
                   f"{'only' if len(s2) == 1 else 'second-to-last'} dimension "
                   f"({s2[0] if len(s2) == 1 else s2[-2]}) and the batch dimensions must "
                   "broadcast")
        raise ValueError(f"matmul: cannot multiply shapes {s1} and {s2}: {msg}") from e


def _bilinear_jvp(op, ta, tb):
    # the JVP of a bilinear op p(a, b): dp = p(da, b) + p(a, db), attributes kept
    a, b = op.inputs
    p = op._opdef.public
    if tb is None:
        return p(ta, b, **op.attrs)
    if ta is None:
        return p(a, tb, **op.attrs)
    return p(ta, b, **op.attrs) + p(a, tb, **op.attrs)


RegisterJVP("MatMul")(_bilinear_jvp)  # d(A B) = dA B + A dB


@RegisterGradient("MatMul", reads="inputs")
def _matmul_grad(op, dy):
    # dA = dC B^T, dB = A^T dC; a 1-d operand acts as a (1, n) row / (n, 1) column whose
    # added axis is absent from dC, so it is restored in dC and removed from the gradient
    a, b = op.inputs
    need_a, need_b = op.needs_input_grad
    if a.ndim == 1 and b.ndim == 1:  # dot product: dC is 0-d
        return dy * b if need_a else None, dy * a if need_b else None
    a2, b2 = a, b
    if a.ndim == 1:
        a2, dy = reshape(a, (1, a.shape[0])), expand_dims(dy, axis=-2)
    if b.ndim == 1:
        b2, dy = reshape(b, (b.shape[0], 1)), expand_dims(dy, axis=-1)
    da = db = None
    if need_a:
        da = reshape(_sum_to(matmul(dy, matrix_transpose(b2)), a2.shape), a.shape)
    if need_b:
        db = reshape(_sum_to(matmul(matrix_transpose(a2), dy), b2.shape), b.shape)
    return da, db


def matmul(x1, x2, /):
    """Matrix product with Array API semantics (also the ``@`` operator).

    x1: ``(..., M, K)`` or ``(K,)``; x2: ``(..., K, N)`` or ``(K,)``; batch axes broadcast.
    A 1-d ``x1`` is a row vector and a 1-d ``x2`` a column vector whose added axis is removed
    from the result (``(K,) @ (K,)`` is 0-d). Raises ``ValueError`` for 0-d operands or
    mismatched inner dimensions. Gradient: ``dx1 = dy @ x2^T``, ``dx2 = x1^T @ dy``, summed
    over broadcast batch axes.
    """
    return _matmul(x1, x2)


# --- tensordot -------------------------------------------------------------------------------
def _norm_axes(axes, n1, n2):
    """``axes`` (int or pair of int/sequences) as two lists of non-negative contracted axes."""
    if isinstance(axes, int):
        return list(range(n1 - axes, n1)), list(range(axes))
    a1, a2 = axes
    a1 = [a1] if isinstance(a1, int) else list(a1)
    a2 = [a2] if isinstance(a2, int) else list(a2)
    return [a % n1 for a in a1], [a % n2 for a in a2]


def _inverse(order):
    """The permutation that takes axes listed in ``order`` back to ``0, 1, 2, ...``."""
    inv = [0] * len(order)
    for i, a in enumerate(order):
        inv[a] = i
    return tuple(inv)


@primitive("TensorDot", samples=[
    Sample((2, 3, 4), (3, 4, 5)), Sample((2, 3), (3, 4), axes=1), Sample((2, 3), (4, 5), axes=0),
    Sample((2, 3, 4), (4, 2), axes=([2, 0], [0, 1])), Sample((3, 4), (4, 3), axes=([0, 1], [1, 0])),
    Sample((3,), (3,), axes=1), Sample((0, 3), (3, 2), axes=1), Sample((), (2,), axes=0)])
def _tensordot(x1, x2, *, axes=2):
    try:
        return _ns(x1, x2).tensordot(x1, x2, axes=axes)
    except (ValueError, IndexError) as e:
        raise ValueError(f"tensordot: cannot contract shapes {_shape(x1)} and {_shape(x2)} "
                         f"over axes={axes}: the contracted axes must exist and have equal "
                         "sizes") from e


RegisterJVP("TensorDot")(_bilinear_jvp)


@RegisterGradient("TensorDot")
def _tensordot_grad(op, dy):
    # dy has the free axes of x1, then those of x2. Contracting dy with one input over that
    # input's free axes gives the other input's gradient, with axes in a known order that
    # is then permuted back.
    a, b = op.inputs
    ca, cb = _norm_axes(op.attrs.get("axes", 2), a.ndim, b.ndim)
    fa = [i for i in range(a.ndim) if i not in ca]
    fb = [i for i in range(b.ndim) if i not in cb]
    k = len(fa)
    da = tensordot(dy, b, axes=(list(range(k, dy.ndim)), fb))
    order = fa + [ca[cb.index(j)] for j in sorted(cb)]
    da = permute_dims(da, _inverse(order)) if order != sorted(order) else da
    db = tensordot(a, dy, axes=(fa, list(range(k))))
    order = [cb[ca.index(i)] for i in sorted(ca)] + fb
    db = permute_dims(db, _inverse(order)) if order != sorted(order) else db
    return da, db


def tensordot(x1, x2, /, *, axes=2):
    """Contract ``x1`` and ``x2`` over axes (Array API ``tensordot``).

    axes: an int ``n`` (the last ``n`` axes of ``x1`` with the first ``n`` of ``x2``) or a
    pair of sequences of axes to contract, of equal sizes. Result: the free axes of ``x1``
    followed by those of ``x2``. Raises ``ValueError`` for missing or mismatched axes.
    Gradient: ``dy`` contracted with the other operand over its free axes, axes permuted back.
    """
    return _tensordot(x1, x2, axes=axes)


# --- vecdot ---------------------------------------------------------------------------------
@primitive("VecDot", samples=[
    Sample((3, 4), (3, 4)), Sample((3, 4), (4,)), Sample((2, 1, 3), (4, 3), axis=-1),
    Sample((3, 4), (3, 4), axis=-2), Sample((3,), (3,)), Sample((0, 2), (2,)),
    Sample((2, 0), (2, 0))])
def _vecdot(x1, x2, *, axis=-1):
    try:
        return _ns(x1, x2).vecdot(x1, x2, axis=axis)
    except ValueError as e:
        raise ValueError(f"vecdot: cannot take dot products of shapes {_shape(x1)} and "
                         f"{_shape(x2)} along axis {axis}: the sizes along that axis must be "
                         "equal and the other axes must broadcast") from e


RegisterJVP("VecDot")(_bilinear_jvp)  # also for complex: vecdot conjugates x1 linearly


@RegisterGradient("VecDot")
def _vecdot_grad(op, dy):
    # y = sum(x1 * x2, axis): dx1 = dy * x2, dx2 = dy * x1 (real dtypes), with dy's reduced
    # axis restored and broadcasting undone
    a, b = op.inputs
    dy = expand_dims(dy, axis=op.attrs.get("axis", -1))
    return _sum_to(dy * b, a.shape), _sum_to(dy * a, b.shape)


def vecdot(x1, x2, /, *, axis=-1):
    """Dot products ``sum(conj(x1) * x2)`` along ``axis`` (of the broadcast shape).

    x1, x2: at least 1-d, equal sizes along ``axis``, the other axes broadcast. Result: the
    broadcast shape without ``axis``. Raises ``ValueError`` otherwise. Gradient:
    ``dx1 = dy * x2``, ``dx2 = dy * x1`` broadcast along ``axis`` (real dtypes).
    """
    n = max(len(_shape(x1)), len(_shape(x2)))
    if not -n <= axis < n:
        raise ValueError(f"vecdot: axis {axis} is out of range for operands of shapes "
                         f"{_shape(x1)} and {_shape(x2)}")
    return _vecdot(x1, x2, axis=axis - n if axis >= 0 else axis)


__all__ = ["matmul", "tensordot", "vecdot"]
