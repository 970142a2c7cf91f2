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

import os
import sys
import sysconfig
import threading
import warnings
import weakref

from . import _backend
from . import _tensor as _tensor_module
from ._tensor import _SCALARS, Tensor, Variable, _raw, _wrap
from ._tensor import _ids as _tensor_ids
from .errors import TapeLeakWarning

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


def rebind(t, old) -> None:
    """Before the Python object ``t`` is rebound to a new value (``x[key] = v``), make every
    record of every live tape that holds ``t`` hold ``old`` (a snapshot of ``t``) instead, so
    that gradients read the values they recorded."""
    i = t._id
    for tape in list(_live_tapes):
        for op in reversed(tape._ops):
            if i in op._in_ids or i in op._out_ids:
                op.inputs = tuple(old if a is t else a for a in op.inputs)
                op.outputs = tuple(old if o is t else o for o in op.outputs)
                if i in op._out_ids:
                    break  # the op that made t: no earlier record holds it


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
        if isinstance(t, Tensor) and getattr(t._value, "nbytes", DROP_MIN_BYTES) >= DROP_MIN_BYTES:
            break
    else:
        return values
    out = []
    for t in values:
        if isinstance(t, Tensor) and getattr(t._value, "nbytes", DROP_MIN_BYTES) >= DROP_MIN_BYTES:
            d = _new_object(Dropped)
            v = t._value
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


def _floating(value) -> bool:
    kind = getattr(value.dtype, "kind", None)
    return kind in "fc" if kind is not None else _backend.is_floating(value.dtype)


def record(opdef, args, attrs, out):
    """Wrap ``out`` in Tensors and record the op on every active tape that traces an input.

    ``opdef`` is the op's registry entry (``type``, ``grad``, ``differentiable``, ``reads``,
    ``param_name``); ``args`` the op's positional inputs, ``out`` a backend array or a tuple
    of them. Returns the output Tensor(s).
    """
    if type(out) is tuple:
        outs = tuple(_wrap(o) for o in out)
        record_outputs(opdef, args, attrs, outs)
        return outs
    t = _new_object(Tensor)  # _wrap(out), inlined
    t._value = out
    t._id = next(_tensor_ids)
    tapes = _state.tapes
    if len(tapes) == 1 and not tapes[0]._observer:
        tape = tapes[0]  # the common case, inlined: one tape
        watched = tape._watched
        traced = False
        for a in args:
            if type(a) is Tensor:
                if a._id in watched:
                    traced = True
            elif isinstance(a, Tensor):  # a Variable, or another subclass: as record_outputs
                if tape._watch_vars and isinstance(a, Variable) and a.trainable:
                    tape._note_variable(a)
                if a._id in watched:
                    traced = True
        if not traced:
            return t
        op = _new_record(opdef, args, attrs, (t,))
        tape._ops.append(op)
        watched.update(op._float_out)
        return t
    if len(tapes) == 1:  # one accumulator (forward mode)
        tapes[0].observe(opdef, args, attrs, (t,))
        return t
    record_outputs(opdef, args, attrs, (t,))
    return t


def record_outputs(opdef, args, attrs, outs):
    """Record an op whose output Tensors already exist (used by ``custom_gradient``)."""
    op = None
    for tape in _state.tapes:  # outermost first: an outer accumulator knows an output's
        if tape._observer:     # tangent before an inner one computes with that output
            tape.observe(opdef, args, attrs, outs)
            continue
        watched = tape._watched
        traced = False
        for a in args:
            if isinstance(a, Tensor):
                if tape._watch_vars and isinstance(a, Variable) and a.trainable:
                    tape._note_variable(a)
                if a._id in watched:
                    traced = True
        if not traced:
            continue
        if op is None:
            op = _new_record(opdef, args, attrs, outs)
        tape._ops.append(op)  # ops without floating outputs too: tape.explain shows them
        watched.update(op._float_out)


def _as_input(a):
    if isinstance(a, Tensor):
        return a._snapshot() if isinstance(a, Variable) else a
    if isinstance(a, _SCALARS) or a is None:
        return a
    return Tensor(_raw(a))  # a backend array: a constant to every tape


def _input_ids(args):
    """``args`` as a record keeps them (Variables snapshotted and backend arrays wrapped, by
    :func:`_as_input`; Tensors and scalars as they are), and their ids (None for scalars)."""
    ids = []
    for a in args:
        if type(a) is Tensor:
            ids.append(a._id)
        elif type(a) in _SCALAR_TYPES or a is None:
            ids.append(None)
        else:
            args = tuple([_as_input(a) for a in args])
            return args, [a._id if isinstance(a, Tensor) else None for a in args]
    return args, ids


def _new_record(opdef, args, attrs, outs):
    """The record of an op (``opdef``) that ran on ``args`` with ``attrs`` and gave the Tensors
    ``outs``, for a tape: it keeps what the op type's gradient reads."""
    op = _new_object(Operation)
    op._opdef = opdef
    gdef = op._gdef = _state.overrides.get(opdef.type, opdef) if _overriding else opdef
    # ids of tensor inputs (None for scalars); only floating ones are ever traced
    n = len(args)
    if n == 1 and type(args[0]) is Tensor:
        in_ids = (args[0]._id,)
    elif n == 2 and type(args[0]) is Tensor and type(args[1]) is Tensor:
        in_ids = (args[0]._id, args[1]._id)
    elif n == 2 and type(args[0]) is Tensor and type(args[1]) in _SCALAR_TYPES:
        in_ids = (args[0]._id, None)
    else:
        args, in_ids = _input_ids(args)
    reads = gdef.reads
    a0 = args[0] if args else None
    if reads & 1 or (type(a0) is Tensor and getattr(a0._value, "nbytes", 0) < DROP_MIN_BYTES):
        op.inputs = args  # kept: read by the gradient, or small (judged by the first input)
    else:
        op.inputs = _drop(args)
    op._in_ids = tuple(in_ids) if type(in_ids) is list else in_ids
    op.attrs = attrs
    if len(outs) == 1:
        o = outs[0]
        op._out_ids = ids = (o._id,)
        v = o._value
        dtype = v.dtype
        kind = getattr(dtype, "kind", None)  # _floating, inlined for NumPy dtypes
        fl = kind in "fc" if kind is not None else _floating(v)
        op._float_out = ids if fl else ()
        if reads & 2 or getattr(v, "nbytes", DROP_MIN_BYTES) < DROP_MIN_BYTES:
            op.outputs = outs
        else:  # _drop, inlined
            d = _new_object(Dropped)
            d.shape, d.dtype = v.shape, dtype
            op.outputs = (d,)
    else:
        op._out_ids = tuple([o._id for o in outs])
        op._float_out = tuple([o._id for o in outs if _floating(o._value)])
        op.outputs = outs if reads & 2 else _drop(outs)
    return op


_SCALAR_TYPES = frozenset(_SCALARS)


class ObservedOperation(Operation):
    """The record of an op that ran while a ``ForwardAccumulator`` watched it, made for its
    JVP rule, which runs at once: every input and output kept, and the ids (which only the
    transposed-VJP fallback reads) computed when read. Building none of them is an eighth of
    forward mode's cost per op."""

    __slots__ = ()

    @property
    def _in_ids(self):
        return tuple([a._id if isinstance(a, Tensor) else None for a in self.inputs])

    @property
    def _out_ids(self):
        return tuple([o._id for o in self.outputs])

    @property
    def _float_out(self):
        return tuple([o._id for o in self.outputs if _floating(o._value)])


def observed_record(opdef, args, attrs, outs):
    """The :class:`ObservedOperation` of ``opdef`` run on ``args`` (backend arrays among them
    wrapped as constants) with ``attrs``, giving the Tensors ``outs``."""
    op = _new_object(ObservedOperation)
    op._opdef = opdef
    op._gdef = _state.overrides.get(opdef.type, opdef) if _overriding else opdef
    for a in args:
        if not isinstance(a, Tensor) and type(a) not in _SCALAR_TYPES and a is not None:
            args = tuple([a if isinstance(a, Tensor) else _as_input(a) for a in args])
            break
    op.inputs, op.outputs, op.attrs = args, outs, attrs
    return op


# --- raw-array reads and conversions of traced tensors ---------------------------------------
def _traced(t) -> bool:
    return any(not tape._observer and t._id in tape._watched for tape in _state.tapes)


def _note_raw_access(t):
    """Called by ``Tensor.numpy()``: inside a gradient function, reading a traced tensor's
    array makes the gradient once-differentiable."""
    if _state.grad_op is not None and not _state.raw_access and _traced(t):
        _state.raw_access = True


_OWN_DIRS = tuple(p for p in {  # tapegrad's and NumPy's frames: never a conversion's site
    os.path.dirname(os.path.dirname(__file__)),
    getattr(sys.modules.get("numpy"), "__path__", [""])[0]} if p)
_LIBRARY_DIRS = tuple(p for p in {  # installed libraries (SciPy...) and the standard library
    *(sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")),
    os.path.dirname(os.__file__)} if p)


def _losers(t) -> tuple:
    """``(tapes, accumulators)`` of this thread that lose ``t`` when it leaves for NumPy: the
    recording tapes that trace it (or would watch it: a trainable Variable under a tape that
    watches accessed variables) and the forward accumulators where it has a tangent."""
    i = t._id
    tapes, accumulators = [], []
    for tape in _state.tapes:
        if tape._observer:
            if i in getattr(tape, "_tangents", ()):
                accumulators.append(tape)
        elif i in tape._watched or (tape._watch_vars and isinstance(t, Variable)
                                    and t.trainable):
            tapes.append(tape)
    return tapes, accumulators


def _site(frame) -> tuple:
    """``(frame, level, via)``: the first frame from ``frame`` outward that is outside
    tapegrad, NumPy and installed libraries (the user's line) and its ``warnings.warn``
    stack level as seen from ``frame``, and ``"file:line"`` of the library frame in between,
    if one was (``None`` when the user's line called directly). Also used by ``_function``
    for its warnings."""
    level, via = 1, None
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_OWN_DIRS):
            if not name.startswith(_LIBRARY_DIRS):
                break
            if via is None:
                via = f"{name}:{frame.f_lineno}"
        frame, level = frame.f_back, level + 1
    return frame, level, via


def _note_conversion(t, how="converted to a NumPy array"):
    """Called by ``Tensor.__array__`` and ``__dlpack__`` (``how`` it leaves): a tensor that a
    recording tape traces (or a forward accumulator gives a tangent) is leaving for NumPy or
    another library, where neither sees it. Warn once per call site in the user's code (the first frame outside
    tapegrad, NumPy and installed libraries such as SciPy, which is named as well) and note the
    site on the tapes, for ``tape.explain``."""
    if _state.grad_op is not None or len(_state.tapes) == 0:
        return
    tapes, accumulators = _losers(t)
    if not tapes and not accumulators:
        return
    frame, level, via = _site(sys._getframe(1))
    site = (f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None
            else via or "an unknown place")
    for tape in tapes:
        tape._conversions.setdefault(t._id, site)
    what = ("that a recording GradientTape traces" if tapes and not accumulators else
            "that a ForwardAccumulator gives a tangent" if not tapes else
            "that a recording GradientTape traces and a ForwardAccumulator gives a tangent")
    lost = ("no gradient" if not accumulators else "no JVP" if not tapes
            else "no gradient and no JVP")
    inside = f" (inside {via})" if via is not None and frame is not None else ""
    warnings.warn(
        f"a {type(t).__name__} of shape {t.shape} {what} was {how} at {site}{inside}; what "
        f"is computed from that array carries {lost} (a library that "
        "computes with NumPy leaves the tape there, and tape.gradient returns None for it). "
        "Use tapegrad functions (an Array API namespace) for a differentiable result, wrap the "
        "NumPy code in a tg.custom_gradient that gives its gradient, or convert with "
        "t.numpy() if you mean to leave the tape", TapeLeakWarning, stacklevel=level + 1)


_tensor_module._raw_access_hook = _note_raw_access
_tensor_module._conversion_hook = _note_conversion
