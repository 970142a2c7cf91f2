"""Linear algebra in the main namespace (Array API): ``matmul``, ``tensordot``, ``vecdot``; and
``einsum`` (NumPy's and TensorFlow's).

(``matrix_transpose`` lives in :mod:`.manipulation`.) Gradients are the usual ones: for
``C = A @ B``, ``dA = dC @ B^T`` and ``dB = A^T @ dC`` (Giles, "An extended collection of
matrix derivative results", 2008), summed over broadcast batch axes. Real floating dtypes.
"""
from __future__ import annotations

import string

import numpy as np

from .. import config
from .._backend import kernel as _kernel
from .._backend import namespace as _ns
from .._backend import register_kernel as _register_kernel
from .._registry import RegisterGradient, RegisterJVP, Sample, primitive
from .._tensor import Tensor
from ._jvp import rule_op
from .manipulation import _shape, expand_dims, matrix_transpose, permute_dims, reshape
from .elementwise import _is_complex, conj, holomorphic
from .reductions import _sum_to


# --- matmul ----------------------------------------------------------------------------------
@primitive("MatMul", samples=[
    Sample((3, 4), (4, 5)), Sample((4,), (4, 5)), Sample((3, 4), (4,)), Sample((4,), (4,)),
    Sample((2, 3, 4), (4, 5)), Sample((2, 1, 3, 4), (5, 4, 2)), Sample((4,), (2, 4, 3)),
    Sample((2, 3, 4), (4,)), Sample((0, 3), (3, 2)), Sample((3, 0), (0, 2)),
    Sample((1, 1), (1, 1)), Sample((1,), (1,))])
def _matmul(x1, x2):
    s1, s2 = _shape(x1), _shape(x2)
    try:
        if not s1 or not s2 or s1[-1] != s2[-2 if len(s2) > 1 else 0]:
            raise ValueError("the shapes do not fit")  # JAX would raise TypeError
        return _ns(x1, x2).matmul(x1, x2)
    except ValueError as e:
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
    p = rule_op(op)
    if tb is None:
        return p(ta, b, **op.attrs)
    if ta is None:
        return p(a, tb, **op.attrs)
    return p(ta, b, **op.attrs) + p(a, tb, **op.attrs)


RegisterJVP("MatMul")(_bilinear_jvp)  # d(A B) = dA B + A dB


@RegisterGradient("MatMul", reads="inputs")
@holomorphic  # complex: dA = dC B^H, dB = A^H dC
def _matmul_grad(op, dy):
    # dA = dC B^T, dB = A^T dC; a 1-d operand acts as a (1, n) row / (n, 1) column whose
    # added axis is absent from dC, so it is restored in dC and removed from the gradient
    a, b = op.inputs
    need_a, need_b = op.needs_input_grad
    if a.ndim == 1 and b.ndim == 1:  # dot product: dC is 0-d
        return dy * b if need_a else None, dy * a if need_b else None
    da = db = None
    # a matrix-vector product's gradient for the vector: a product with the matrix itself, not
    # with a transposed copy (a second constant of a tg.function's program, if it is constant)
    if need_a and a.ndim == 1 and b.ndim == 2:
        da, need_a = matmul(b, dy), False  # B dC
    if need_b and a.ndim == 2 and b.ndim == 1:
        db, need_b = matmul(dy, a), False  # (dC^T A)^T
    if not (need_a or need_b):
        return da, db
    a2, b2 = a, b
    if a.ndim == 1:
        a2, dy = reshape(a, (1, a.shape[0])), expand_dims(dy, axis=-2)
    if b.ndim == 1:
        b2, dy = reshape(b, (b.shape[0], 1)), expand_dims(dy, axis=-1)
    if need_a:  # dC B^T, or (B dC^T)^T for a constant B in a trace
        da = (matrix_transpose(matmul(b2, matrix_transpose(dy))) if _constant_in_trace(b2, dy)
              else matmul(dy, matrix_transpose(b2)))
        da = _sum_to(da, a2.shape)
        da = da if a2 is a else reshape(da, a.shape)
    if need_b:  # A^T dC, or (dC^T A)^T for a constant A in a trace
        db = (matrix_transpose(matmul(matrix_transpose(dy), a2)) if _constant_in_trace(a2, dy)
              else matmul(matrix_transpose(a2), dy))
        db = _sum_to(db, b2.shape)
        db = db if b2 is b else reshape(db, b.shape)
    return da, db


def _constant_in_trace(x, dy) -> bool:
    """Whether ``x`` is a constant (a concrete array) of a ``tg.function`` trace in which the
    cotangent ``dy`` is traced: transposing ``x`` would run eagerly and put a transposed copy
    of it into the program beside it, where a transpose of ``dy`` is traced and folded by XLA.
    Eagerly the products keep the transposed operand (C-ordered NumPy results)."""
    return (config.tracing() and type(dy._value).__module__.startswith("jax")
            and not type(x._value).__module__.startswith("jax"))


def matmul(x1, x2, /):
    """Matrix product with Array API semantics (also the ``@`` operator).

    x1: ``(..., M, K)`` or ``(K,)``; x2: ``(..., K, N)`` or ``(K,)``; batch axes broadcast.
    A 1-d ``x1`` is a row vector and a 1-d ``x2`` a column vector whose added axis is removed
    from the result (``(K,) @ (K,)`` is 0-d). Raises ``ValueError`` for 0-d operands or
    mismatched inner dimensions. Gradient: ``dx1 = dy @ x2^T``, ``dx2 = x1^T @ dy``, summed
    over broadcast batch axes (conjugate transposes ``x2^H``, ``x1^H`` for complex values,
    TensorFlow's convention); JVP ``dx1 @ x2 + x1 @ dx2``.
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


def _contractible(s1, s2, axes) -> bool:
    """Whether ``axes`` names existing axes of shapes ``s1`` and ``s2`` of equal sizes."""
    if isinstance(axes, int):
        if not 0 <= axes <= min(len(s1), len(s2)):
            return False
    else:
        for ax, n in zip(axes, (len(s1), len(s2))):
            if not all(-n <= a < n for a in ([ax] if isinstance(ax, int) else ax)):
                return False
    a1, a2 = _norm_axes(axes, len(s1), len(s2))
    return len(a1) == len(a2) and all(s1[i] == s2[j] for i, j in zip(a1, a2))


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
        if not _contractible(_shape(x1), _shape(x2), axes):
            raise ValueError("the shapes do not fit")  # JAX would raise TypeError
        # as tuples: CuPy takes a 0-d operand only with axes 0 or ((), ()), not ([], [])
        pairs = axes if isinstance(axes, int) else tuple(
            tuple(a) if isinstance(a, list) else a for a in axes)
        return _ns(x1, x2).tensordot(x1, x2, axes=pairs)
    except (ValueError, IndexError) as e:
        raise ValueError(f"tensordot: cannot contract shapes {_shape(x1)} and {_shape(x2)} "
                         f"over axes={axes}: the contracted axes must exist and have equal "
                         "sizes") from e


RegisterJVP("TensorDot")(_bilinear_jvp)


@RegisterGradient("TensorDot")
@holomorphic
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
    Gradient: ``dy`` contracted with the other operand (its conjugate for complex values,
    TensorFlow's convention) over its free axes, axes permuted back; JVP
    ``tensordot(dx1, x2) + tensordot(x1, dx2)``.
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
    # y = sum(conj(x1) * x2, axis): dx1 = conj(dy) * x2, dx2 = dy * x1 (tapegrad's convention:
    # y is anti-holomorphic in x1, holomorphic in x2; for real values dy * x2 and dy * x1),
    # with dy's reduced axis restored and broadcasting undone (real inputs get the real part
    # from the core, _validation.check_gradient)
    a, b = op.inputs
    dy = expand_dims(dy, axis=op.attrs.get("axis", -1))
    da = _sum_to((conj(dy) if _is_complex(dy) else dy) * b, a.shape)
    return da, _sum_to(dy * a, b.shape)


def vecdot(x1, x2, /, *, axis=-1):
    """Dot products ``sum(conj(x1) * x2)`` along ``axis`` (of the broadcast shape).

    x1, x2: at least 1-d, equal sizes along ``axis``, the other axes broadcast. Result: the
    broadcast shape without ``axis``. Raises ``ValueError`` otherwise. Gradient:
    ``dx1 = conj(dy) * x2``, ``dx2 = dy * x1`` broadcast along ``axis`` (``dy * x2`` and
    ``dy * x1`` for real dtypes); JVP ``vecdot(dx1, x2) + vecdot(x1, dx2)``.
    """
    n = max(len(_shape(x1)), len(_shape(x2)))
    if not -n <= axis < n:
        raise ValueError(f"vecdot: axis {axis} is out of range for operands of shapes "
                         f"{_shape(x1)} and {_shape(x2)}")
    return _vecdot(x1, x2, axis=axis - n if axis >= 0 else axis)


# --- einsum --------------------------------------------------------------------------------
_LETTERS = string.ascii_letters


def _einsum_error(subscripts, msg):
    return ValueError(f"einsum {subscripts!r}: {msg}")


def _parse(subscripts, shapes):
    """``subscripts`` as explicit per-operand letters and output letters: ``...`` replaced by
    letters, the implicit output (NumPy's: the broadcast ``...`` axes, then the letters that
    occur once, sorted) written out, sizes checked. Returns ``(inputs, output)``."""
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum: subscripts must be a string such as 'ij,jk->ik', got "
                        f"{type(subscripts).__name__}")
    s = subscripts.replace(" ", "")
    lhs, arrow, out = s.partition("->")
    if "->" in out or "-" in lhs or ">" in lhs:
        raise _einsum_error(subscripts, "'->' may appear once, between the inputs and the output")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _einsum_error(subscripts, f"the subscripts name {len(terms)} operand(s) but "
                            f"{len(shapes)} were given")
    letters, ellipsis_dims = [], []
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        explicit = term.replace("...", "")
        bad = sorted(set(c for c in explicit if c not in _LETTERS))
        if bad or term.count("...") > 1:
            raise _einsum_error(subscripts, f"operand {k}'s subscripts {term!r} must be letters "
                                "with at most one '...'" + (f"; {bad} are not" if bad else ""))
        if "..." in term and len(shape) < len(explicit) or \
                "..." not in term and len(shape) != len(explicit):
            raise _einsum_error(subscripts, f"operand {k} has {len(shape)} dimension(s) but its "
                                f"subscripts {term!r} name {len(explicit)}")
        ellipsis_dims.append(len(shape) - len(explicit) if "..." in term else 0)
        letters.append(explicit)
    used = set("".join(letters) + out)
    free = [c for c in _LETTERS if c not in used]
    n_ell = max(ellipsis_dims, default=0)
    if n_ell > len(free):
        raise _einsum_error(subscripts, "too many dimensions: einsum has 52 letters")
    ell = "".join(free[:n_ell])
    inputs = [t.replace("...", ell[n_ell - d:]) for t, d in zip(terms, ellipsis_dims)]
    if arrow:
        bad = sorted(set(c for c in out.replace("...", "") if c not in _LETTERS))
        if bad or out.count("...") > 1:
            raise _einsum_error(subscripts, f"the output {out!r} must be letters with at most "
                                "one '...'")
        if n_ell and "..." not in out:
            raise _einsum_error(subscripts, "the output must contain '...' where the inputs' "
                                "'...' stand for dimensions")
        output = out.replace("...", ell)
    else:
        counts = "".join(letters)
        output = ell + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    for c in output:
        if output.count(c) > 1:
            raise _einsum_error(subscripts, f"the output repeats {c!r}")
        if not any(c in t for t in inputs):
            raise _einsum_error(subscripts, f"the output letter {c!r} names no input dimension")
    sizes = {}
    for k, (term, shape) in enumerate(zip(inputs, shapes)):
        for c, n in zip(term, shape):
            j, m = sizes.get(c, (k, n))
            if m != n and (j == k or 1 not in (m, n)):
                where = f"operand {k}" if j == k else f"operands {j} and {k}"
                raise _einsum_error(subscripts, f"{where} give {c!r} the sizes {m} and {n}; "
                                    "a letter must have one size (or 1, broadcast, across "
                                    "operands)")
            if m == 1:
                sizes[c] = (k, n)
            elif c not in sizes:
                sizes[c] = (j, m)
    return inputs, output


def _numpy_einsum(subscripts, *operands):
    return np.asarray(np.einsum(subscripts, *operands, optimize=len(operands) > 1))


_register_kernel("numpy", "einsum", _numpy_einsum)


@primitive("Einsum", samples=[
    Sample((3, 4), (4, 5), subscripts="ij,jk->ik"), Sample((2, 3, 4), (2, 4, 5),
                                                           subscripts="bij,bjk->bik"),
    Sample((3, 3), subscripts="ii->"), Sample((3, 3), subscripts="ii->i"),
    Sample((2, 3), subscripts="ij->ji"), Sample((2, 3), subscripts="ij->"),
    Sample((3,), (4,), subscripts="i,j->ij"), Sample((3, 4), (4,), (4, 2), subscripts="ij,j,jk->ik"),
    Sample((2, 3), (4,), subscripts="ij,k->ik"), Sample((1, 3), (2, 3), subscripts="ij,ij->ij"),
    Sample((2, 2, 3), (3,), subscripts="iij,j->i"), Sample((0, 3), (3, 2), subscripts="ij,jk->ik"),
    Sample((), (3,), subscripts=",i->i"),
])
def _einsum(*operands, subscripts):
    xp = _ns(*operands)
    fn = getattr(xp, "einsum", None)
    if xp is np or fn is None:  # not in the Array API standard: NumPy's (round trip)
        return _kernel(xp, "einsum")(subscripts, *operands)
    return fn(subscripts, *operands)


def _split(subscripts):
    lhs, _, out = subscripts.partition("->")
    return lhs.split(","), out


def _einsum_operand_grad(dy, operands, inputs, output, j):
    """The gradient of operand ``j`` of ``einsum(inputs -> output)`` for the cotangent ``dy``.

    y[out] = sum over the other letters of prod_k A_k[in_k], so dL/dA_j[in_j] = sum over the
    letters not in in_j of dy[out] prod_{k != j} A_k[in_k]: the einsum of ``dy`` and the other
    operands into ``in_j`` (e.g. Giles 2008 for matmul; autograd's ``grad_einsum``). Two cases
    make that an invalid einsum and are written as extra constant operands: a letter of in_j
    found nowhere else (summed over in the forward) gets a ones vector, so the gradient is
    constant along it; a letter repeated in in_j (a diagonal) gets a fresh letter for each
    repeat and an identity matrix linking the two, so the gradient is zero off the diagonal.
    Axes of A_j of size 1 that the forward broadcast are summed back.
    """
    a = operands[j]
    xp = _ns(dy._value)
    term = inputs[j]
    terms = [output] + [t for k, t in enumerate(inputs) if k != j]
    args = [dy] + [x for k, x in enumerate(operands) if k != j]
    present = set("".join(terms))
    fresh = iter(c for c in _LETTERS if c not in set("".join(inputs) + output))
    target, seen, naked = [], set(), []
    for c, n in zip(term, a.shape):
        if c in seen:
            f = next(fresh)
            target.append(f)
            terms.append(c + f)
            args.append(Tensor(xp.eye(n, dtype=dy._value.dtype)))
        else:
            seen.add(c)
            target.append(c)
            if c not in present:
                naked.append((c, n))
    if naked:
        terms.append("".join(c for c, _ in naked))
        args.append(Tensor(xp.ones(tuple(n for _, n in naked), dtype=dy._value.dtype)))
    g = _einsum(*args, subscripts=",".join(terms) + "->" + "".join(target))
    return _sum_to(g, a.shape) if g.shape != a.shape else g


@RegisterGradient("Einsum", reads="inputs")
@holomorphic
def _einsum_grad(op, dy):
    inputs, output = _split(op.attrs["subscripts"])
    ops = op.inputs
    return [_einsum_operand_grad(dy, ops, inputs, output, j) if need else None
            for j, need in enumerate(op.needs_input_grad)]


@RegisterJVP("Einsum")
def _einsum_jvp(op, *tangents):
    # multilinear: the tangent is the sum over operands of the einsum with it replaced by its
    # tangent
    subscripts = op.attrs["subscripts"]
    terms = []
    for j, t in enumerate(tangents):
        if t is not None:
            args = list(op.inputs)
            args[j] = t
            terms.append(_einsum(*args, subscripts=subscripts))
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def einsum(subscripts, *operands):
    """Einstein summation (``numpy.einsum``, ``tf.einsum``): the product of the operands summed
    over the letters that are not in the output.

    subscripts: a string such as ``"ij,jk->ik"`` with one comma-separated term per operand
    (letters ``a-zA-Z``, at most one ``...`` per term for broadcast leading dimensions) and
    optionally ``->`` and the output's letters; without ``->`` the output is the ``...``
    dimensions then the letters used once, sorted (NumPy's implicit mode). A repeated letter
    in one term takes a diagonal. A letter has one size in all operands, or size 1 in some
    (broadcast). operands: numeric tensors. Result: dims in output order, the promoted dtype.

    Raises ``ValueError`` naming the operand (or the output) for a wrong number of operands or
    dimensions, bad characters, mismatched sizes, an output letter that is repeated or names
    no input, ``TypeError`` if ``subscripts`` is not a string. The forward is the backend's
    ``einsum`` (NumPy, JAX, ...), through NumPy where the backend has none (the Array API
    standard has no einsum). Gradient: another einsum per operand (see
    ``_einsum_operand_grad``; of the other operands' conjugates for complex values, TensorFlow's
    convention), so to any order; JVP: the sum of the einsums with one operand replaced by its
    tangent (multilinearity).
    """
    shapes = [tuple(getattr(x, "shape", np.shape(x))) for x in operands]
    inputs, output = _parse(subscripts, shapes)
    return _einsum(*operands, subscripts=",".join(inputs) + "->" + output)


__all__ = ["matmul", "tensordot", "vecdot", "einsum"]
