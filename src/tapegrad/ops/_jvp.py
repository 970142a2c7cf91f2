"""JVP rules shared by op families: :func:`linear_jvp` (an op linear in its floating inputs
is its own JVP) and :func:`rule_op` (the op a rule applies, under ``gradient_override_map``
the overriding type's). Rules are registered with ``RegisterJVP``; forward mode
(``tapegrad.forward``) runs them."""
from __future__ import annotations

from .._backend import is_floating
from .._structural import ops as _structural_ops
from .._tensor import Tensor


def linear_jvp(op, *tangents):
    """The JVP rule of an op linear in its floating inputs jointly (reshape, sum, concat, fft,
    indexing, ``where``'s two branches): the op itself applied to the tangents, with the same
    attributes and the same non-floating inputs (indices, conditions); a floating input without
    a tangent counts as zero. The derivative of a linear map is the map itself. Under
    ``gradient_override_map`` the op applied is the overriding type's (its JVP is this rule)."""
    apply = rule_op(op)
    if len(tangents) == 1:
        return apply(tangents[0], **op.attrs)
    args = []
    for x, t in zip(op.inputs, tangents):
        if t is None:
            if isinstance(x, Tensor):
                t = _structural_ops.zeros_like(x) if is_floating(x.dtype) else x
            else:  # a Python scalar: zero if it is a float, else a constant (an int, a bool)
                t = type(x)(0) if isinstance(x, (float, complex)) else x
        args.append(t)
    return apply(*args, **op.attrs)


def rule_op(op):
    """The op function that a JVP rule of the record ``op`` applies to tangents: that of the
    op type whose rule runs, the overriding type under ``gradient_override_map`` (when it is
    defined), else the recorded op's."""
    return op._gdef.public or op._opdef.public
