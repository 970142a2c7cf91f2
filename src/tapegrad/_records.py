"""Recording: the thread-local recording state, the ``Operation`` record, ``record``.

A tape traces a set of tensor ids: the tensors it watched and the outputs of the ops it
recorded. An op is recorded on a tape only if one of its inputs is traced by that tape; its
floating outputs then become traced. A record keeps only what its gradient function reads
(the op type's ``reads``, declared with ``RegisterGradient``): a tensor it does not keep is
replaced by a :class:`Dropped` placeholder with the tensor's id, shape and dtype. Tensors never
point back to records, so no reference cycle links them.

The public, read-only face of a record is ``tapegrad._views.OperationView``.
"""
from __future__ import annotations

import threading
import weakref

from . import _backend
from ._tensor import _SCALARS, Tensor, _raw

READS = {"none": 0, "inputs": 1, "outputs": 2, "both": 3}  # what a gradient function reads
# A record drops a tensor its gradient does not read only from this many bytes on: a
# placeholder costs about as much memory as a small array, and time. The tests set it to 0,
# so that every wrong `reads` declaration fails there.
DROP_MIN_BYTES = 1024


class _State(threading.local):
    def __init__(self):
        # active tapes, innermost last, and observers (check-numerics); replaced, never mutated
        self.tapes = list(_GLOBAL_OBSERVERS)
        self.overrides = {}  # gradient_override_map: op type -> the op-type entry to use
        self.reach = frozenset()  # ids connected to the sources of the running backward pass
        self.backward_tape = None  # the tape whose gradient is being computed (debugging.log)
        self.grad_op = None  # the op whose gradient function is running
        self.raw_access = False  # did that gradient function read a traced tensor's array?
        # ids of the Variables whose gradient the running pass may give as IndexedSlices
        self.sparse_ids = frozenset()


_GLOBAL_OBSERVERS = []  # observers every new thread starts with
_state = _State()
_overriding = 0  # gradient_override_map blocks open in any thread (a cheap pre-check)
_live_tapes = weakref.WeakSet()  # every tape that was entered and is still referenced


def add_observer(observer) -> None:
    """Let ``observer.observe(opdef, inputs, attrs, outputs)`` see every op, in every thread.

    An observer (check-numerics) sees each op's forward and the ops of gradient computations
    as they run, the outermost first; it records nothing. ``observer`` must have
    ``_observer = True``. (Forward-mode accumulators are observers of one thread, entered and
    left with their ``with`` block.)
    """
    if observer not in _GLOBAL_OBSERVERS:
        _GLOBAL_OBSERVERS.append(observer)
    if observer not in _state.tapes:
        _state.tapes = [observer, *_state.tapes]


def remove_observer(observer) -> None:
    """Stop ``observer`` (no error if it is not observing)."""
    if observer in _GLOBAL_OBSERVERS:
        _GLOBAL_OBSERVERS.remove(observer)
    _state.tapes = [t for t in _state.tapes if t is not observer]


class trace_stack:
    """``with trace_stack(entries) as outer:``: within the block, this thread's trace stack is
    ``entries`` (a list of tapes, forward-mode accumulators and observers, innermost last;
    ``outer`` is the stack it replaces, which is put back however the block ends). The one way
    a transformation above the core enters, pauses or filters the stack: each entry says by
    its protocol what it does with an op (``_observer``: only sees it; ``_differentiates``:
    takes part in derivatives; ``_watch_vars``: notes the Variables read)."""

    __slots__ = ("entries", "outer")

    def __init__(self, entries):
        self.entries = entries

    def __enter__(self):
        self.outer = _state.tapes
        _state.tapes = self.entries
        return self.outer

    def __exit__(self, *exc):
        _state.tapes = self.outer
        return False


def push_entry(entry) -> None:
    """Make ``entry`` (a tape or forward-mode accumulator entering its ``with`` block) this
    thread's innermost trace-stack entry."""
    _state.tapes = [*_state.tapes, entry]


def remove_entry(entry) -> None:
    """Take ``entry`` off this thread's trace stack, wherever it is (no error if absent)."""
    _state.tapes = [t for t in _state.tapes if t is not entry]


def trace_entries():
    """This thread's trace stack (a list, innermost last; never mutated: replace it with
    :class:`trace_stack`)."""
    return _state.tapes


def backward_state():
    """``(tape, op)`` while a gradient is computed in this thread: the tape whose ``gradient``
    runs and the :class:`Operation` whose gradient function runs (``None`` when between ops);
    ``(None, None)`` outside a gradient computation."""
    op = _state.grad_op
    return _state.backward_tape, op


def recording_tapes() -> tuple:
    """The tapes recording in this thread, innermost last (observers excluded)."""
    return tuple(t for t in _state.tapes if not t._observer)


def watched_as_source(t) -> bool:
    """True if a recording tape watches the tensor ``t`` as a source: ``t`` was watched
    (``tape.watch``, or a Variable read under the tape) and no op recorded there produced it."""
    i = t._id
    return any(not tape._observer and i in tape._watched
               and not any(i in op._out_ids for op in tape._ops) for tape in _state.tapes)


def update_in_place(t, update) -> None:
    """``x[key] = v`` of a plain Tensor ``t`` (the Array API's ``__setitem__``), the one way a
    Tensor object takes a new value: ``old``, a new Tensor with ``t``'s array and id, takes
    ``t``'s place in every record of every live tape (so gradients read the values they
    recorded), and ``t`` takes the array and id of ``update(old)`` (a new Tensor computed from
    it). No array is written: the old value lives on in ``old``."""
    old = object.__new__(Tensor)
    old._value, old._id = t._value, t._id
    i = t._id
    for tape in list(_live_tapes):
        for op in reversed(tape._ops):
            if i in op._in_ids or i in op._out_ids:
                op.inputs = tuple(old if a is t else a for a in op.inputs)
                op.outputs = tuple(old if o is t else o for o in op.outputs)
                if i in op._out_ids:
                    break  # the op that made t: no earlier record holds it
    y = update(old)
    t._value, t._id = y._value, y._id


class Dropped:
    """Stands in for a tensor that a record does not keep (its gradient does not read it).

    Has the tensor's ``shape`` and backend ``dtype`` (``ndim``, ``size``), so gradient
    functions may read those; using its value raises ``RuntimeError`` naming the op.
    """

    __slots__ = ("shape", "dtype")
    _dropped = True  # tapegrad ops given a placeholder raise through numpy() below

    @property
    def _value(self):  # validation reads x._value.shape / .dtype of inputs and outputs
        return self

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def numpy(self):
        """Raises ``RuntimeError``: the record did not keep this tensor's value."""
        op = _state.grad_op
        which = (f"op type {op._gdef.type!r} declares reads={op._gdef.reads_name!r}"
                 if op is not None else "its op type's RegisterGradient(reads=...) says its "
                 "gradient does not read it")
        raise RuntimeError(
            f"a gradient function used the value of a tensor (shape {tuple(self.shape)}, dtype "
            f"{_backend.np_dtype(self.dtype)}) that its op's record did not keep: {which}. If "
            "the gradient reads it, declare so: tg.RegisterGradient(op_type, reads='inputs', "
            "'outputs' or 'both')")

    def __array__(self, dtype=None, copy=None):
        self.numpy()

    def __repr__(self):
        return f"<dropped tensor: shape={self.shape}, dtype={self.dtype}>"


def _use_of_dropped(self, *args):
    self.numpy()


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
              "xor", "lt", "le", "gt", "ge"):
    setattr(Dropped, f"__{_name}__", _use_of_dropped)
    setattr(Dropped, f"__r{_name}__", _use_of_dropped)
for _name in ("neg", "pos", "abs", "getitem", "bool", "float", "int", "index"):
    setattr(Dropped, f"__{_name}__", _use_of_dropped)


_new_object = object.__new__


def _drop(values):
    """``values`` with each Tensor of ``DROP_MIN_BYTES`` or more replaced by a placeholder
    (``values`` itself when there is none: the common case of small tensors)."""
    for t in values:
        if isinstance(t, Tensor) and getattr(t._peek(), "nbytes", DROP_MIN_BYTES) >= DROP_MIN_BYTES:
            break
    else:
        return values
    out = []
    for t in values:
        if isinstance(t, Tensor) and getattr(t._peek(), "nbytes", DROP_MIN_BYTES) >= DROP_MIN_BYTES:
            d = _new_object(Dropped)
            v = t._peek()
            d.shape, d.dtype = v.shape, v.dtype
            t = d
        out.append(t)
    return tuple(out)


class Operation:
    """The record of one executed op, as a gradient function receives it.

    Attributes: ``type`` (op type name), ``inputs`` (tuple of Tensors or Python scalars),
    ``outputs`` (tuple of Tensors), ``attrs`` (dict of keyword attributes). An input or output
    that the op type's gradient does not read (``RegisterGradient(..., reads=...)``) is a
    :class:`Dropped` placeholder with its shape and dtype only.
    """

    __slots__ = ("_opdef", "_gdef", "inputs", "outputs", "attrs", "_in_ids", "_out_ids",
                 "_float_out")

    @property
    def type(self) -> str:
        """The op type name."""
        return self._opdef.type

    @property
    def needs_input_grad(self) -> tuple:
        """One bool per input: does the running ``gradient`` call need this input's gradient?

        A gradient function may skip the work for inputs marked False (return None for them):
        constants, integer tensors, Python scalars and tensors not connected to the sources.
        """
        reach = _state.reach
        ids = self._in_ids
        if len(ids) == 2:
            return ids[0] in reach, ids[1] in reach
        return tuple([i in reach for i in ids])  # None is never in reach

    @property
    def name(self) -> str:
        """A unique name: ``<type>_<id of first output>``."""
        return f"{self.type}_{self._out_ids[0]}"

    def get_attr(self, name):
        """The keyword attribute ``name``; raises ``KeyError`` listing the op's attributes."""
        try:
            return self.attrs[name]
        except KeyError:
            raise KeyError(f"op {self.type!r} has no attribute {name!r}; it has "
                           f"{sorted(self.attrs)}") from None

    def __repr__(self):
        return f"<Operation {self.type} inputs={len(self.inputs)} outputs={len(self.outputs)}>"


def record(opdef, args, attrs, outs, only=None) -> None:
    """Hand the op ``opdef`` that ran on ``args`` (its positional inputs: Tensors, Python
    scalars, backend arrays) with ``attrs`` and gave the Tensors ``outs`` (a tuple) to every
    active tape and observer, the outermost first: an observer (a forward accumulator, or
    check-numerics) sees it; a tape records it if it traces an input (a trainable Variable
    among them is watched first when the tape watches accessed variables). Every op wrapper,
    ``custom_gradient`` call, compiled call and control-flow construct records through here.
    ``only``: one entry of the stack to hand the op to, the others staying active while it
    computes (a ``custom_vjp`` op's level: outer entries record its forward's ops instead, and
    the ops of the tangent rule an accumulator runs)."""
    op = None
    for tape in _state.tapes if only is None else (only,):  # outermost first: an outer
        # accumulator knows an output's tangent before an inner one computes with that output
        if tape._observer:
            tape.observe(opdef, args, attrs, outs)
            continue
        watched = tape._watched
        traced = False
        for a in args:
            if isinstance(a, Tensor):
                if a._id in watched:
                    traced = True
                elif type(a) is not Tensor and tape._watch_vars and a._variable and a.trainable:
                    tape._note_variable(a)  # a stand-in tape (custom_gradient's) notes only
                    traced = traced or a._id in watched
        if traced:
            if op is None:
                op = new_record(opdef, args, attrs, outs)
            tape._ops.append(op)  # ops without floating outputs too: tape.explain shows them
            watched.update(op._float_out)


def _as_input(a):
    if isinstance(a, Tensor):
        return a._snapshot()
    if type(a) in _SCALAR_TYPES or a is None:
        return a
    return Tensor(_raw(a))  # a backend array: a constant to every tape


def new_record(opdef, args, attrs, outs, whole=False) -> Operation:
    """The record of an op (``opdef``) that ran on ``args`` with ``attrs`` and gave the Tensors
    ``outs``: Variables among the inputs are snapshotted and backend arrays wrapped as
    constants; it keeps what the gradient of its op type (the overriding one under
    ``gradient_override_map``) reads, or everything if ``whole`` (a JVP rule may read any)."""
    op = _new_object(Operation)
    op._opdef = opdef
    gdef = op._gdef = _state.overrides.get(opdef.type, opdef) if _overriding else opdef
    in_ids = ()  # grown as a tuple: for the one or two inputs of most ops, faster than a list
    for a in args:
        if type(a) is Tensor:
            in_ids += (a._id,)
        elif type(a) in _SCALAR_TYPES or a is None:
            in_ids += (None,)
        else:  # a Variable (it may change: snapshotted), a subclass, a backend array
            args = tuple([_as_input(a) for a in args])
            in_ids = tuple([a._id if isinstance(a, Tensor) else None for a in args])
            break
    op._in_ids = in_ids
    op.attrs = attrs
    reads = READS["both"] if whole else gdef.reads
    a0 = args[0] if args else None  # inputs are kept outright when the first one is small
    if reads & 1 or type(a0) is Tensor and getattr(a0._value, "nbytes", 0) < DROP_MIN_BYTES:
        op.inputs = args
    else:
        op.inputs = _drop(args)
    if len(outs) == 1:
        o = outs[0]
        v = o._value if type(o) is Tensor else o._peek()  # a compiled call's: not copied
        kind = getattr(v.dtype, "kind", None)  # _backend.is_floating, inlined for NumPy dtypes
        op._out_ids = ids = (o._id,)
        floating = kind in "fc" if kind is not None else _backend.is_floating(v.dtype)
        op._float_out = ids if floating else ()
        small = getattr(v, "nbytes", DROP_MIN_BYTES) < DROP_MIN_BYTES
        op.outputs = outs if reads & 2 or small else _drop(outs)
    else:
        op._out_ids = tuple([o._id for o in outs])
        op._float_out = tuple([o._id for o in outs if _backend.is_floating(o._peek().dtype)])
        op.outputs = outs if reads & 2 else _drop(outs)
    return op


_SCALAR_TYPES = frozenset(_SCALARS)
