"""Elementwise ops (Array API names), generated from one table: forward and gradient side by side.

Each row of ``_UNARY`` / ``_BINARY`` gives the public name, the op type, the gradient formula
(written with tapegrad ops, so it is itself differentiable) and the sample domain. Formulas are
the textbook derivatives (Abramowitz & Stegun ch. 4); where one is less obvious its derivation
is given on the row. Broadcasting and type promotion of the inputs are undone centrally by the
tape, so binary formulas return output-shaped gradients.

Complex inputs follow the convention of TensorFlow and PyTorch (also ``tg.fft``'s;
``docs/architecture.md``, "Complex numbers"): the cotangent of a complex ``z`` for a real loss
``L`` is ``dL/dRe(z) + i dL/dIm(z)``, and a tangent is the plain derivative ``f'(z) t``. For a
holomorphic ``f`` the gradient is ``dy * conj(f'(z))``, which the rows listed in
``_HOLOMORPHIC`` get from their real formula as ``conj(formula(conj(dy)))`` (the formulas are
linear in ``dy``), and the JVP is the real formula applied to the tangent, ``f'(z) t``; the
rows in ``_COMPLEX_AS_IS`` are right for complex inputs in both modes as they are (linear, or
``round``'s zero); the non-holomorphic ``abs``, ``sign``, ``real``, ``imag`` (and ``conj``,
linear over the reals) have their own complex rules in ``_COMPLEX_GRAD`` and ``_COMPLEX_JVP``
(Wirtinger calculus: for ``f(z)`` with ``df = a dz + b conj(dz)``, the JVP is ``a t + b
conj(t)`` and the gradient ``conj(a) dy + b conj(dy)``, ``dy`` real for a real ``f``). The rows
in ``_REAL_ONLY`` (orders, roundings to integers, kinks) refuse complex input, as TensorFlow and
the Array API do. A real input of a complex result gets the real part of its gradient.
"""
from __future__ import annotations

import cmath
import functools
import math

import numpy as _np

from .._backend import is_floating
from .._backend import namespace as _ns
from .._backend import own_kernel as _own_kernel
from .._backend import np_dtype as _np_dtype
from .._backend import xp_dtype
from .._registry import Arg, RegisterGradient, RegisterJVP, Sample, no_gradient, primitive
from .._tensor import Tensor
from ._jvp import linear_jvp
from .creation import ones_like, zeros_like
from .manipulation import broadcast_to, to_device

_ndarray = _np.ndarray
_PY_SCALARS = frozenset((bool, int, float, complex))

_UNARY_SHAPES = [(3, 4), (), (0, 3), (1,)]
_BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((), (3,)),
                  ((0, 2), (2,)), ((1,), (1, 1))]


def _unary_samples(domain):
    return [Sample(s, domain=domain) for s in _UNARY_SHAPES]


def _binary_samples(d1, d2):
    return [Sample(Arg(a, d1), Arg(b, d2)) for a, b in _BINARY_SHAPES] + [
        Sample(Arg((3,), d1), 1.5)]


def _unary_forward(name):
    fns = {}  # the namespace's function, cached per array class
    np_fn = getattr(_np, name)

    def forward(x, /):
        if type(x) is _ndarray:
            return np_fn(x)
        f = fns.get(type(x))
        if f is None:
            f = fns[type(x)] = getattr(_ns(x), name)
        return f(x)

    forward.__name__ = name
    forward._numpy_fn = np_fn  # the op wrapper calls it directly on NumPy arrays
    return forward


def _binary_forward(name):
    fns = {}
    np_fn = getattr(_np, name)

    def forward(x1, x2, /):
        if type(x1) is _ndarray and (type(x2) is _ndarray or type(x2) in _PY_SCALARS):
            return np_fn(x1, x2)
        key = (type(x1), type(x2))
        f = fns.get(key)
        if f is None:
            f = fns[key] = getattr(_ns(x1, x2), name)
        return f(x1, x2)

    forward.__name__ = name
    forward._numpy_fn = np_fn
    return forward


def _zero(x, y, dy):
    return zeros_like(dy)  # these ops keep their input's shape and dtype


_R = (-2.0, 2.0)
_POS = (0.2, 2.0)
_UNIT = (-0.9, 0.9)

# name, op type, d/dx as f(x, y, dy) with y the output, sample domain, what d/dx reads of x and
# y (the record keeps only that: RegisterGradient's `reads`)
_UNARY = [
    ("negative", "Neg", lambda x, y, dy: negative(dy), _R, "none"),
    ("positive", "Positive", lambda x, y, dy: dy, _R, "none"),
    ("square", "Square", lambda x, y, dy: dy * (2.0 * x), _R, "inputs"),
    ("sqrt", "Sqrt", lambda x, y, dy: dy / (2.0 * y), _POS, "outputs"),
    ("exp", "Exp", lambda x, y, dy: dy * y, _R, "outputs"),
    ("expm1", "Expm1", lambda x, y, dy: dy * (y + 1.0), _R, "outputs"),
    ("log", "Log", lambda x, y, dy: dy / x, _POS, "inputs"),
    ("log1p", "Log1p", lambda x, y, dy: dy / (x + 1.0), (-0.5, 2.0), "inputs"),
    ("log2", "Log2", lambda x, y, dy: dy / (x * math.log(2.0)), _POS, "inputs"),
    ("log10", "Log10", lambda x, y, dy: dy / (x * math.log(10.0)), _POS, "inputs"),
    ("sin", "Sin", lambda x, y, dy: dy * cos(x), _R, "inputs"),
    ("cos", "Cos", lambda x, y, dy: negative(dy * sin(x)), _R, "inputs"),
    ("tan", "Tan", lambda x, y, dy: dy * (y * y + 1.0), (-1.2, 1.2), "outputs"),  # tan' = 1 + tan^2
    ("sinh", "Sinh", lambda x, y, dy: dy * cosh(x), _R, "inputs"),
    ("cosh", "Cosh", lambda x, y, dy: dy * sinh(x), _R, "inputs"),
    ("tanh", "Tanh", lambda x, y, dy: dy * (1.0 - y * y), _R, "outputs"),  # tanh' = 1 - tanh^2
    ("asin", "Asin", lambda x, y, dy: dy / sqrt(1.0 - x * x), _UNIT, "inputs"),
    ("acos", "Acos", lambda x, y, dy: negative(dy / sqrt(1.0 - x * x)), _UNIT, "inputs"),
    ("atan", "Atan", lambda x, y, dy: dy / (x * x + 1.0), _R, "inputs"),
    ("asinh", "Asinh", lambda x, y, dy: dy / sqrt(x * x + 1.0), _R, "inputs"),
    # acosh' = 1 / (sqrt(x - 1) sqrt(x + 1)): 1 / sqrt(x^2 - 1) for real x, the right branch
    # for complex x
    ("acosh", "Acosh", lambda x, y, dy: dy / (sqrt(x - 1.0) * sqrt(x + 1.0)), (1.2, 3.0), "inputs"),
    ("atanh", "Atanh", lambda x, y, dy: dy / (1.0 - x * x), _UNIT, "inputs"),
    ("abs", "Abs", lambda x, y, dy: dy * sign(x), _R, "inputs"),  # subgradient 0 at x = 0
    ("reciprocal", "Reciprocal", lambda x, y, dy: negative(dy * y * y), _POS, "outputs"),
    ("sign", "Sign", _zero, _R, "inputs"),  # complex x: _sign_rule
    ("floor", "Floor", _zero, _R, "none"),
    ("ceil", "Ceil", _zero, _R, "none"),
    ("round", "Round", _zero, _R, "none"),
    ("trunc", "Trunc", _zero, _R, "none"),
    ("conj", "Conj", lambda x, y, dy: conj(dy), _R, "none"),  # Re y = Re x, Im y = -Im x
    ("real", "Real", lambda x, y, dy: astype(dy, x.dtype) if _is_complex(x) else dy, _R, "inputs"),
    # imag of a real tensor is the constant 0; of a complex one, d/dIm(z) carries dy: i dy
    ("imag", "Imag", lambda x, y, dy: astype(dy, x.dtype) * 1j if _is_complex(x)
     else zeros_like(x), _R, "inputs"),
]


def _pow_d1(a, b, y, dy):
    # d(a^b)/da = b a^(b-1), and 0 where b = 0 (a^0 = 1), also at a = 0 where the product is
    # 0 * inf (JAX's rule for an integer 0): the exponent b - 1 becomes 0 there, so that the
    # formula and its own derivatives stay finite
    if not isinstance(b, Tensor):
        return zeros_like(dy) if b == 0 else dy * b * pow(a, b - 1.0)
    zero = b == 0
    return dy * b * pow(a, where(zero, ones_like(b), b) - 1.0)


def _pow_d2(a, b, y, dy):
    # d(a^b)/db = a^b log a, taken as 0 where a <= 0 (as TensorFlow does); for a complex
    # result log a is the principal complex logarithm, 0 where a = 0 (TensorFlow's _PowGrad)
    if _is_complex(y):
        if not isinstance(a, Tensor):
            return dy * y * (cmath.log(a) if a != 0 else 0.0)
        a = a if _is_complex(a) else astype(a, y.dtype)
        nonzero = a != 0.0
        return where(nonzero, dy * y * log(where(nonzero, a, ones_like(a))), zeros_like(dy))
    positive_a = a > 0.0
    safe = where(positive_a, a, ones_like(a))
    return where(positive_a, dy * y * log(safe), zeros_like(dy))


# name, op type, d/dx1 and d/dx2 as f(x1, x2, y, dy) with y the output, sample domains, what
# the two read of the inputs and the output
_BINARY = [
    ("add", "Add", lambda a, b, y, dy: dy, lambda a, b, y, dy: dy, _R, _R, "none"),
    ("subtract", "Sub", lambda a, b, y, dy: dy, lambda a, b, y, dy: negative(dy), _R, _R, "none"),
    ("multiply", "Mul", lambda a, b, y, dy: dy * b, lambda a, b, y, dy: dy * a, _R, _R, "inputs"),
    ("divide", "RealDiv", lambda a, b, y, dy: dy / b,
     lambda a, b, y, dy: negative(dy * y / b), _R, _POS, "both"),  # d(a/b)/db = -a/b^2 = -y/b
    ("pow", "Pow", _pow_d1, _pow_d2, _POS, _R, "both"),
    # atan2(a, b) = atan(a / b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
    ("atan2", "Atan2", lambda a, b, y, dy: dy * b / (a * a + b * b),
     lambda a, b, y, dy: negative(dy * a / (a * a + b * b)), _R, _POS, "inputs"),
    # ties go to the first argument, as in TensorFlow's Maximum/Minimum gradients
    ("maximum", "Maximum", lambda a, b, y, dy: where(a >= b, dy, zeros_like(dy)),
     lambda a, b, y, dy: where(a >= b, zeros_like(dy), dy), _R, _R, "inputs"),
    ("minimum", "Minimum", lambda a, b, y, dy: where(a <= b, dy, zeros_like(dy)),
     lambda a, b, y, dy: where(a <= b, zeros_like(dy), dy), _R, _R, "inputs"),
    # hypot(a, b) = sqrt(a^2 + b^2): d/da = a / hypot
    ("hypot", "Hypot", lambda a, b, y, dy: dy * a / y, lambda a, b, y, dy: dy * b / y, _R, _R, "both"),
    # logaddexp(a, b) = log(e^a + e^b): d/da = e^(a - y)
    ("logaddexp", "LogAddExp", lambda a, b, y, dy: dy * exp(a - y),
     lambda a, b, y, dy: dy * exp(b - y), _R, _R, "both"),
    # a mod b = a - b floor(a / b): d/da = 1, d/db = -floor(a / b)
    ("remainder", "FloorMod", lambda a, b, y, dy: dy,
     lambda a, b, y, dy: negative(dy * floor_divide(a, b)), _R, _POS, "inputs"),
    ("floor_divide", "FloorDiv", lambda a, b, y, dy: zeros_like(dy),
     lambda a, b, y, dy: zeros_like(dy), _R, _POS, "none"),
    # copysign(a, b) = |a| sign(b): d/da = sign(a) sign(b) = sign(a) sign(y), d/db = 0
    ("copysign", "CopySign", lambda a, b, y, dy: dy * sign(a) * sign(y),
     lambda a, b, y, dy: zeros_like(dy), _R, _R, "both"),
    # nextafter(a, b) is a moved by one ulp towards b: a up to rounding, so d/da = 1, d/db = 0
    ("nextafter", "NextAfter", lambda a, b, y, dy: dy, lambda a, b, y, dy: zeros_like(dy),
     _R, _R, "none"),
]

# complex inputs (see the module docstring); rows in none of these sets raise
# NotImplementedError
_HOLOMORPHIC = {"square", "sqrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos",
                "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
                "reciprocal", "multiply", "divide", "pow"}
_COMPLEX_AS_IS = {"negative", "positive", "conj", "add", "subtract", "round"}
_REAL_ONLY = {"floor", "ceil", "trunc", "atan2", "maximum", "minimum", "hypot", "logaddexp",
              "remainder", "floor_divide", "copysign", "nextafter", "signbit", "less",
              "less_equal", "greater", "greater_equal"}


def _abs_jvp(x, y, t):
    # |z|: d|z| = Re(conj(z) dz) / |z| = Re(conj(sign(z)) dz) (0 at z = 0, the subgradient)
    return real(conj(sign(x)) * t)


def _sign_rule(x, y, d):
    # sign(z) = s = z / |z|, Wirtinger a = 1 / (2|z|), b = -s^2 / (2|z|): the JVP a t + b conj(t)
    # and the gradient conj(a) dy + b conj(dy) are both i s Im(conj(s) d) / |z| (0 at z = 0)
    s, r = sign(x), abs(x)
    return (s * 1j) * imag(conj(s) * d) / where(r == 0.0, ones_like(r), r)


_COMPLEX_GRAD = {  # the gradient rows' complex formulas, f(x, y, dy), beside _HOLOMORPHIC's
    "abs": lambda x, y, dy: dy * sign(x),  # conj(a) dy + b dy, a = conj(z)/2|z|, b = z/2|z|
    "sign": _sign_rule,
    "real": lambda x, y, dy: astype(dy, x.dtype),  # Re z: d/dRe = 1, d/dIm = 0
    "imag": lambda x, y, dy: astype(dy, x.dtype) * 1j,  # Im z: d/dRe = 0, d/dIm = 1
}
_COMPLEX_JVP = {  # the JVPs of the non-holomorphic rows for complex inputs, f(x, y, t)
    "abs": _abs_jvp,
    "sign": _sign_rule,
    "real": lambda x, y, t: real(t),
    "imag": lambda x, y, t: imag(t),
}

_NONDIFF_UNARY = ["logical_not", "isnan", "isinf", "isfinite", "signbit", "bitwise_invert"]
_NONDIFF_BINARY = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                   "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
                   "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"]


def _camel(name):
    return "".join(p.capitalize() for p in name.split("_"))


def _real_pair(a, b) -> bool:
    """True if both have NumPy real floating dtypes (the common case, tested cheaply)."""
    return getattr(a._value.dtype, "kind", None) == "f" == getattr(b._value.dtype, "kind", None)


def _is_complex(t) -> bool:
    dt = t._value.dtype
    kind = getattr(dt, "kind", None)  # NumPy dtypes: cheap; others: by name
    return kind == "c" if kind is not None else _np_dtype(dt).kind == "c"


def _complex_rule(name, formula):
    """The gradient ``formula`` for complex values, as the module docstring says (real ones use
    ``formula`` itself)."""
    if name in _COMPLEX_AS_IS:
        return formula
    if name in _COMPLEX_GRAD:
        return _COMPLEX_GRAD[name]
    if name in _HOLOMORPHIC:
        def rule(*args):
            *xs, y, dy = args
            return conj(formula(*xs, y, conj(dy)))
    else:
        rule = _complex_not_implemented(name)
    return rule


def _complex_jvp_rule(name, formula):
    """The JVP ``formula`` for complex values: the real formula applied to the tangent for the
    holomorphic and as-is rows (``f'(z) t``), the non-holomorphic rows' own."""
    if name in _COMPLEX_JVP:
        return _COMPLEX_JVP[name]
    if name in _HOLOMORPHIC or name in _COMPLEX_AS_IS:
        return formula
    return _complex_not_implemented(name)


def _complex_not_implemented(name):
    def rule(*args):
        raise NotImplementedError(
            f"the derivative of {name} for complex inputs is not implemented (only real inputs "
            "are differentiable); differentiate real(z) and imag(z) separately if you need it")

    return rule


def _imag_forward(x):
    # NumPy gives zeros for real input; the standard only defines complex input: follow NumPy
    # on every backend, so real-valued code stays portable
    xp = _ns(x)
    return xp.imag(x) if xp.isdtype(x.dtype, "complex floating") else xp.zeros_like(x)


_imag_forward.__name__ = "imag"


def _define_unary(name, op_type, formula, domain, reads):
    forward = _imag_forward if name == "imag" else _unary_forward(name)
    op = primitive(op_type, samples=_unary_samples(domain), real_only=name in _REAL_ONLY)(forward)
    op.__doc__ = (f"Elementwise ``{name}(x)``; Array API semantics. x: any shape, float dtype"
                  + (" (real only: complex input raises ``TypeError``)." if name in _REAL_ONLY
                     else " or complex (see the module docstring for complex derivatives)."))
    complex_formula = _complex_rule(name, formula)
    complex_jvp = _complex_jvp_rule(name, formula)

    @RegisterGradient(op_type, reads=reads)
    def grad(o, dy):
        x = o.inputs[0]  # a Dropped placeholder has the dtype too
        if _real_pair(dy, x) or not (_is_complex(dy) or _is_complex(x)):
            return formula(x, o.outputs[0], dy)  # dy has the output's dtype
        return complex_formula(x, o.outputs[0], dy)

    @RegisterJVP(op_type)
    def jvp(o, t):
        # an elementwise op's Jacobian is diagonal, so J t = J^T t for real values: the
        # gradient formula applied to the tangent; complex ones: the module docstring
        x = o.inputs[0]
        if _real_pair(t, x) or not (_is_complex(t) or _is_complex(x)):
            return formula(x, o.outputs[0], t)
        return complex_jvp(x, o.outputs[0], t)

    return op


def holomorphic(grad):
    """The gradient function ``grad`` (its real formula, ``J^T dy``) made right for complex
    values of an op whose outputs are holomorphic in its floating inputs (products, ``prod``,
    ``sigmoid``): tapegrad's convention (TensorFlow's) gives ``conj(J)^T dy``, which is
    ``conj(grad(op, conj(dy)))`` (``grad`` is linear in ``dy`` and reads the inputs
    holomorphically); a real input of a complex result gets the real part (the core's
    ``check_gradient`` takes it). Real values take ``grad`` itself. The JVP of such an op is
    its real rule: ``J t``."""
    @functools.wraps(grad)
    def rule(op, *dys):
        for d in dys:  # a loop, not any(): this runs for every product on the reverse pass
            if d is not None and _is_complex(d):
                break
        else:
            return grad(op, *dys)
        gs = grad(op, *[None if d is None else conj(d) for d in dys])
        single = not isinstance(gs, (tuple, list))
        out = [None if g is None else conj(g) for g in ([gs] if single else gs)]
        return out[0] if single else tuple(out)

    return rule


def _define_binary(name, op_type, f1, f2, dom1, dom2, reads):
    op = primitive(op_type, samples=_binary_samples(dom1, dom2),
                   real_only=name in _REAL_ONLY)(_binary_forward(name))
    op.__doc__ = (f"Elementwise ``{name}(x1, x2)`` with broadcasting and Array API type "
                  "promotion; either input may be a Python scalar"
                  + (" (real only: complex input raises ``TypeError``)." if name in _REAL_ONLY
                     else ", real or complex (see the module docstring for complex derivatives)."))
    c1, c2 = _complex_rule(name, f1), _complex_rule(name, f2)

    @RegisterGradient(op_type, reads=reads)
    def grad(o, dy):
        a, b = o.inputs
        y = o.outputs[0]
        n1, n2 = o.needs_input_grad
        if getattr(dy._value.dtype, "kind", None) == "f" or not _is_complex(dy):  # cheap first
            return f1(a, b, y, dy) if n1 else None, f2(a, b, y, dy) if n2 else None
        g1 = c1(a, b, y, dy) if n1 else None
        g2 = c2(a, b, y, dy) if n2 else None
        return g1, g2

    @RegisterJVP(op_type)
    def jvp(o, t1, t2):
        # diagonal partial Jacobians: each formula applied to its tangent, broadcast to the
        # output's shape; for complex values the rows here are holomorphic or linear, so the
        # same formulas give f'(z) t (the module docstring), cast to a complex output's dtype
        a, b = o.inputs
        y = o.outputs[0]
        shape = y._value.shape
        d1 = d2 = None
        if t1 is not None:
            d1 = f1(a, b, y, t1 if t1._value.shape == shape else broadcast_to(t1, shape))
        if t2 is not None:
            d2 = f2(a, b, y, t2 if t2._value.shape == shape else broadcast_to(t2, shape))
        d = d2 if d1 is None else d1 if d2 is None else d1 + d2
        return d if d._value.dtype == y._value.dtype else astype(d, y.dtype)

    return op


def _define_nondiff(name, forward):
    op = primitive(_camel(name), real_only=name in _REAL_ONLY)(forward(name))
    op.__doc__ = f"Elementwise ``{name}``; boolean or integer result, never differentiable."
    no_gradient(_camel(name))
    return op


_g = globals()
for _row in _UNARY:
    _g[_row[0]] = _define_unary(*_row)
for _row in _BINARY:
    _g[_row[0]] = _define_binary(*_row)
for _name in _NONDIFF_UNARY:
    _g[_name] = _define_nondiff(_name, _unary_forward)
for _name in _NONDIFF_BINARY:
    _g[_name] = _define_nondiff(_name, _binary_forward)


@primitive("Identity", samples=_unary_samples(_R))
def identity(x, /):
    """Return ``x`` unchanged (a new Tensor); its gradient passes the cotangent unchanged."""
    return x


RegisterJVP("Identity")(linear_jvp)


@RegisterGradient("Identity", reads="none")
def _identity_grad(op, dy):
    return dy


@primitive("OptimizationBarrier", samples=[Sample((3,)), Sample((2, 3), (4,))])
def optimization_barrier(*xs):
    """Return the tensors ``xs`` (any shapes and dtypes) unchanged, as a tuple of new Tensors,
    through one op that a compiler may not move computations across (``tg.lax`` name, after
    ``jax.lax.optimization_barrier``). Under ``tg.function`` it is JAX's: XLA neither merges
    what reads its outputs with what made its inputs nor runs it before all of ``xs`` exist
    (``recompute_grad`` holds its recomputation's inputs and the cotangents with it, as
    ``jax.checkpoint`` does). Eagerly it does nothing. Gradient and JVP: those of the identity
    (the op is the identity function of each input)."""
    barrier = _own_kernel(_ns(*xs), "optimization_barrier")
    return tuple(xs) if barrier is None else tuple(barrier(xs))


RegisterJVP("OptimizationBarrier")(linear_jvp)


@RegisterGradient("OptimizationBarrier", reads="none")
def _optimization_barrier_grad(op, *dys):
    return dys


@primitive("StopGradient")
def stop_gradient(x, /):
    """Return ``x`` as a value that no tape differentiates through (gradient ``None``)."""
    return x


no_gradient("StopGradient")


@primitive("Where", samples=[
    Sample(_ns(0).asarray([[True, False, True]]), (2, 3), (3,)),
    Sample(_ns(0).asarray(True), (), (2,)),
])
def where(condition, x1, x2, /):
    """``x1`` where ``condition`` else ``x2``, broadcasting all three (Array API ``where``).

    condition: boolean array. Gradient: the cotangent routed to the chosen branch.
    """
    return _ns(x1, x2, condition).where(condition, x1, x2)


RegisterJVP("Where")(linear_jvp)  # linear in (x1, x2) jointly for a fixed condition


@RegisterGradient("Where")
def _where_grad(op, dy):
    c = op.inputs[0]
    z = zeros_like(dy)
    return None, where(c, dy, z), where(c, z, dy)


@primitive("Clip", real_only=True, optional=("lo", "hi"),
           samples=[Sample((3, 4), -0.5, 0.7), Sample((3, 4), Arg((4,), (-2, -0.5)),
                                                              Arg((3, 1), (0.5, 2)))])
def _clip(x, lo, hi):
    return _ns(x).clip(x, lo, hi)


@RegisterGradient("Clip")
def _clip_grad(op, dy):
    # dy flows to x inside [lo, hi], to lo where x < lo, to hi where x > hi
    x, lo, hi = op.inputs
    z = zeros_like(dy)
    dlo = dhi = None
    inside = dy
    if lo is not None:
        below = x < lo
        inside = where(below, z, inside)
        dlo = where(below, dy, z)
    if hi is not None:
        above = x > hi
        inside = where(above, z, inside)
        dhi = where(above, dy, z)
    return inside, dlo, dhi


@RegisterJVP("Clip")
def _clip_jvp(op, tx, tlo, thi):
    # the tangent of the input the forward selects, minimum(maximum(x, lo), hi): hi where x > hi,
    # else lo where x < lo, else x
    x, lo, hi = op.inputs
    y = op.outputs[0]
    t = tx  # None stands for zero
    if lo is not None and not (t is None and tlo is None):
        t = where(x < lo, 0.0 if tlo is None else tlo, 0.0 if t is None else t)
    if hi is not None and not (t is None and thi is None):
        t = where(x > hi, 0.0 if thi is None else thi, 0.0 if t is None else t)
    return t if t.shape == y.shape else broadcast_to(t, y.shape)


def clip(x, /, min=None, max=None):  # noqa: A002 - Array API names
    """Clamp ``x`` to ``[min, max]`` (each a scalar, a broadcastable tensor, or None).

    Gradient: dy where min <= x <= max, else routed to the bound that was hit.
    """
    return _clip(x, min, max)


@primitive("Cast", samples=[Sample((3, 4), dtype=_ns(0).float64), Sample((), dtype=_ns(0).float32),
                             Sample((0, 2), dtype=_ns(0).float32)])
def _cast(x, *, dtype):
    xp = _ns(x)
    dtype = xp_dtype(xp, dtype)
    if xp.isdtype(x.dtype, "complex floating") and not xp.isdtype(dtype, "complex floating"):
        x = xp.real(x)  # TensorFlow's cast: the real part, on every backend
    return xp.astype(x, dtype, copy=True)  # the standard's default; not JAX's


@RegisterGradient("Cast", reads="inputs")
def _cast_grad(op, dy):
    x = op.inputs[0]
    if not is_floating(x.dtype):
        return None
    if _is_complex(dy) and not _is_complex(x):
        dy = real(dy)  # real -> complex: the gradient of the real input is the real part
    return astype(dy, x.dtype)


@RegisterJVP("Cast")
def _cast_jvp(op, t):
    # linear: the tangent cast the same way; none for an integer or boolean result
    y = op.outputs[0]
    return _cast(t, dtype=y.dtype) if is_floating(y.dtype) else None


def astype(x, dtype, /, *, copy=True, device=None):
    """Cast ``x`` to ``dtype`` with the backend's casting rules; complex to real keeps the real
    part on every backend, as TensorFlow's ``cast`` does (NumPy would warn, array-api-strict
    raise).

    ``copy=False`` returns ``x`` itself when it already has ``dtype``; ``device`` moves the
    result (see :func:`to_device`). Gradient: the cotangent cast back (its real part for a
    real ``x`` cast to complex; none for integer and boolean ``x``). JVP: the tangent cast the
    same way (none for an integer or boolean result).
    """
    y = x if not copy and isinstance(x, Tensor) and x.dtype == dtype else _cast(x, dtype=dtype)
    if device is not None:
        y = to_device(y, device)
    return y


def angle(z, /):
    """The argument of each element, ``atan2(imag(z), real(z))`` in radians, in ``(-pi, pi]``
    (NumPy's ``np.angle``, TensorFlow's ``tf.math.angle``; not in the Array API standard).

    z: complex or real floating, any shape; the result has ``z``'s shape and its real dtype
    (0 or pi for real input). A composition of ``real``, ``imag`` and ``atan2``, so both modes
    follow from theirs: ``d angle = Im(dz / z) = (x dy - y dx) / |z|^2`` for ``z = x + iy``
    (undefined at 0, where ``atan2``'s derivative gives 0/0). Raises ``TypeError`` for integer
    or boolean input.
    """
    if not is_floating(z.dtype if isinstance(z, Tensor) else np.asarray(z).dtype):
        raise TypeError(f"angle: expected a floating or complex tensor, got dtype "
                        f"{z.dtype if isinstance(z, Tensor) else np.asarray(z).dtype}; cast it "
                        "with tg.astype first")
    return atan2(imag(z), real(z))


__all__ = [r[0] for r in _UNARY] + [r[0] for r in _BINARY] + _NONDIFF_UNARY + _NONDIFF_BINARY + [
    "identity", "stop_gradient", "where", "clip", "astype", "angle"]
