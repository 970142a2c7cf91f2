"""``OperationView``: the public, read-only view of one tape record (``tape.operations``).

What a user scripts against to inspect a tape; ``tg.viz``, ``tg.test`` and ``tg.debugging``
read tapes only through it. Tensors are named by their ``Tensor.id``.
"""
from __future__ import annotations

import types

import numpy as np

from . import _backend
from ._records import Dropped, Operation, _state
from ._tensor import Tensor
from ._validation import as_gradient_list, check_gradient, no_gradient_error
from .errors import describe_fn


def _spec(t):
    """``(shape, tapegrad dtype)`` of a tensor or a dropped one; ``(None, None)`` for a scalar."""
    if not isinstance(t, (Tensor, Dropped)):
        return None, None
    dt = t._value.dtype
    return tuple(t.shape), (dt if isinstance(dt, np.dtype) else _backend.np_dtype(dt))


class OperationView:
    """A read-only view of one recorded operation.

    Attributes (all read-only):
        type: the op type (``"MatMul"``, ``"CustomGradient:softplus"``).
        name: ``<type>_<id of the first output>``.
        input_ids / output_ids: tuples of tensor ids (``Tensor.id``; ``None`` for an input
            that is a Python scalar).
        floating_output_ids: the ids of the outputs that carry gradients.
        input_shapes / output_shapes: tuples of shape tuples (``None`` for a scalar input).
        input_dtypes / output_dtypes: tuples of tapegrad dtypes (``None`` for a scalar input).
        param_names: the name of each input (``x``, ``x1``, ``arrays[2]``).
        attrs: the keyword attributes (a read-only mapping).
        inputs / outputs: what the record keeps: Tensors, Python scalars, and a
            :class:`~tapegrad._records.Dropped` placeholder (shape and dtype only) for a tensor
            the gradient does not read.
        reads: what the gradient function reads: ``"inputs"``, ``"outputs"``, ``"both"`` or
            ``"none"`` (``RegisterGradient(..., reads=)``).
        gradient_type: the op type whose gradient function runs (another type when
            ``gradient_override_map`` replaced it).
        gradient_function: that function, ``fn(op, *output_gradients)``; ``None`` if none.
        gradient_source: ``"qualname (file:line)"`` of the gradient function, or ``None``.
        differentiable: ``False`` for an op type declared with ``tg.no_gradient``.
        is_custom: the op is a ``custom_gradient`` call.
        is_overridden: ``gradient_override_map`` gave it another type's gradient.
        surrogate: its gradient is declared a surrogate (not the derivative, on purpose).
        forward: ``forward(*inputs)`` runs the op again on new positional inputs (for a
            ``custom_gradient`` op, the call's own arguments) and returns its output(s).
        forward_function: the function that defines the forward (the registered forward on
            backend arrays, or the ``custom_gradient`` function).
        variables: the Variables a ``custom_gradient`` forward read, its last inputs after
            the call's own arguments (an empty tuple for other ops).
    """

    __slots__ = ("_op",)

    def __init__(self, op: Operation):
        self._op = op

    type = property(lambda self: self._op._opdef.type)
    name = property(lambda self: self._op.name)
    input_ids = property(lambda self: self._op._in_ids)
    output_ids = property(lambda self: self._op._out_ids)
    floating_output_ids = property(lambda self: self._op._float_out)
    inputs = property(lambda self: self._op.inputs)
    outputs = property(lambda self: self._op.outputs)
    attrs = property(lambda self: types.MappingProxyType(dict(self._op.attrs)))
    reads = property(lambda self: self._op._gdef.reads_name)
    gradient_type = property(lambda self: self._op._gdef.type)
    gradient_function = property(lambda self: self._op._gdef.grad)
    differentiable = property(lambda self: bool(self._op._gdef.differentiable))
    is_overridden = property(lambda self: self._op._gdef is not self._op._opdef)
    surrogate = property(lambda self: bool(self._op._gdef.surrogate))
    is_custom = property(lambda self: bool(self._op._opdef.is_custom))
    forward_function = property(lambda self: self._op._opdef.forward_function)
    variables = property(lambda self: tuple(getattr(self._op._opdef, "variables", ())))
    input_shapes = property(lambda self: tuple(_spec(a)[0] for a in self._op.inputs))
    input_dtypes = property(lambda self: tuple(_spec(a)[1] for a in self._op.inputs))
    output_shapes = property(lambda self: tuple(_spec(o)[0] for o in self._op.outputs))
    output_dtypes = property(lambda self: tuple(_spec(o)[1] for o in self._op.outputs))

    @property
    def param_names(self) -> tuple:
        return tuple(self._op._opdef.param_name(k) for k in range(len(self._op.inputs)))

    @property
    def gradient_source(self):
        fn = self._op._gdef.grad
        return None if fn is None else describe_fn(fn)

    @property
    def forward(self):
        return self._op._opdef.replay(self._op.attrs)

    def gradient(self, *output_gradients, needed=None) -> list:
        """Run the gradient function on ``output_gradients`` (one Tensor per output), validated
        as the tape validates it: one entry per input, a Tensor of the input's shape and dtype,
        or ``None`` (no gradient, or not ``needed``).

        ``needed``: the input positions whose gradients are wanted (default: every tensor
        input); ``op.needs_input_grad`` says so to the gradient function. Raises what the tape
        raises (``GradientCountError``, ``GradientShapeError``, ``GradientTypeError``) and
        ``NotDifferentiableError`` for an op without a gradient.
        """
        op = self._op
        fn = op._gdef.grad
        if fn is None:
            raise no_gradient_error(op._gdef.type)
        wanted = range(len(op._in_ids)) if needed is None else needed
        saved = _state.reach
        _state.reach = frozenset(op._in_ids[k] for k in wanted if op._in_ids[k] is not None)
        try:
            res = fn(op, *output_gradients)
            gs = [res] if type(res) is Tensor and len(op.inputs) == 1 else as_gradient_list(
                res, op, fn)
            return [None if g is None or iid not in _state.reach
                    else check_gradient(op, k, op.inputs[k], g, fn)
                    for k, (g, iid) in enumerate(zip(gs, op._in_ids))]
        finally:
            _state.reach = saved

    def __eq__(self, other):
        return isinstance(other, OperationView) and other._op is self._op

    def __hash__(self):
        return id(self._op)

    def __repr__(self):
        return (f"<OperationView {self.type} inputs={list(self.input_shapes)} "
                f"outputs={list(self.output_shapes)}>")

