"""``GradientTape``: recording, the reverse pass, nesting, persistence, ``jacobian``.

Semantics are TensorFlow 2's. A tape traces a set of tensor ids: the tensors it watched and the
outputs of the ops it recorded. An op is recorded on a tape only if one of its inputs is traced
by that tape; its floating outputs then become traced. Records (:class:`Operation`) hold the op's
inputs and outputs; tensors never point back to records, so there is no reference cycle.
"""
from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import threading
import warnings
import weakref

from . import _backend, _registry
from . import _tensor as _tensor_module
from ._tensor import Tensor, Variable, _wrap
from ._tensor import _ids as _tensor_ids
from .errors import (GradientCountError, GradientShapeError, GradientTypeError,
                     NotDifferentiableError)

_SCALARS = (bool, int, float, complex)


class _State(threading.local):
    def __init__(self):
        # active tapes, innermost last, and observers (check-numerics); replaced, never mutated
        self.tapes = list(_GLOBAL_OBSERVERS)
        self.overrides = {}  # gradient_override_map
        self.reach = frozenset()  # ids connected to the sources of the running backward pass
        self.backward_tape = None  # the tape whose gradient is being computed (debugging.log)
        self.grad_op = None  # the op whose gradient function is running
        self.raw_access = False  # did that gradient function read a traced tensor's array?


_GLOBAL_OBSERVERS = []  # observers every new thread starts with
_overriding = 0  # number of gradient_override_map blocks open in any thread (a cheap pre-check)
_HOOKS: dict = {}  # tensor id -> gradient hooks (register_hook)


_state = _State()


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` returns for a source not connected to the target: ``None`` or zeros."""

    NONE = "none"
    ZERO = "zero"


class Operation:
    """The record of one executed op, as a gradient function receives it.

    Attributes: ``type`` (op type name), ``inputs`` (tuple of Tensors or Python scalars),
    ``outputs`` (tuple of Tensors), ``attrs`` (dict of keyword attributes).
    """

    __slots__ = ("_opdef", "inputs", "outputs", "attrs", "_in_ids", "_out_ids", "_float_out",
                 "_override")

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


def _is_float(t) -> bool:
    return _backend.is_floating(t._value.dtype)


def _floating(value) -> bool:
    kind = getattr(value.dtype, "kind", None)
    return kind in "fc" if kind is not None else _backend.is_floating(value.dtype)


def record(opdef, args, attrs, out):
    """Wrap ``out`` in Tensors and record the op on every active tape that traces an input.

    ``opdef`` is the op's registry entry (it gives ``type``, ``grad``, ``differentiable`` and
    ``param_name``).
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
        tape = tapes[0]  # the common case, inlined: one tape, no Variable among the inputs
        watched = tape._watched
        traced = False
        for a in args:
            if type(a) is Tensor:
                if a._id in watched:
                    traced = True
            elif isinstance(a, Variable):
                record_outputs(opdef, args, attrs, (t,))
                return t
        if not traced:
            return t
        op = _new_record(opdef, args, attrs, (t,))
        tape._ops.append(op)
        watched.update(op._float_out)
        return t
    record_outputs(opdef, args, attrs, (t,))
    return t


def record_outputs(opdef, args, attrs, outs):
    """Record an op whose output Tensors already exist (used by ``custom_gradient``)."""
    op = None
    for tape in _state.tapes:
        if tape._observer:
            tape.observe(opdef, args, outs)
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
    return Tensor(_registry._raw(a))  # a backend array: a constant to every tape


def _new_record(opdef, args, attrs, outs):
    op = _new_object(Operation)
    op._opdef = opdef
    in_ids = []  # ids of tensor inputs (None for scalars); only floating ones are ever traced
    for a in args:
        if type(a) is Tensor:
            in_ids.append(a._id)
        elif type(a) in _SCALAR_TYPES or a is None:
            in_ids.append(None)
        else:  # Variables are snapshotted, backend arrays wrapped
            args = tuple([_as_input(a) for a in args])
            in_ids = [a._id if isinstance(a, Tensor) else None for a in args]
            break
    op.inputs = args
    op._in_ids = tuple(in_ids)
    op.outputs = outs
    op.attrs = attrs
    if len(outs) == 1:
        o = outs[0]
        op._out_ids = ids = (o._id,)
        kind = getattr(o._value.dtype, "kind", None)  # _floating, inlined for NumPy dtypes
        fl = kind in "fc" if kind is not None else _floating(o._value)
        op._float_out = ids if fl else ()
    else:
        op._out_ids = tuple([o._id for o in outs])
        op._float_out = tuple([o._id for o in outs if _floating(o._value)])
    op._override = _state.overrides.get(opdef.type) if _overriding else None
    return op


_new_object = object.__new__
_SCALAR_TYPES = frozenset(_SCALARS)


class GradientTape:
    """Records operations for automatic differentiation (TensorFlow 2 semantics).

    Args:
        persistent: if False, the tape's records are freed after one ``gradient`` or
            ``jacobian`` call and a second call raises ``RuntimeError``.
        watch_accessed_variables: if True, trainable Variables read by ops inside the block are
            watched automatically.

    Use as a context manager. Tapes nest: an outer tape records the gradient computation of an
    inner one, which gives higher-order gradients. Tapes are thread-local.
    """

    _observer = False  # observers (check-numerics) see every op; tapes record what they trace

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self._persistent = bool(persistent)
        self._watch_vars = bool(watch_accessed_variables)
        self._ops = []
        self._watched = set()
        self._variables = {}
        self._used = False
        self.logs = {}

    # --- context -------------------------------------------------------------------------------
    def __enter__(self):
        if self in _state.tapes:
            raise RuntimeError("this GradientTape is already recording; do not re-enter it")
        self._push()
        return self

    def __exit__(self, *exc):
        if self in _state.tapes:
            self._pop()
        return False

    def _push(self):
        _state.tapes = [*_state.tapes, self]

    def _pop(self):
        _state.tapes = [t for t in _state.tapes if t is not self]

    @contextlib.contextmanager
    def stop_recording(self):
        """Within the block, this tape records nothing. Raises ``ValueError`` if not recording."""
        if self not in _state.tapes:
            raise ValueError("stop_recording: this tape is not recording (use it inside its "
                             "`with` block)")
        saved = _state.tapes
        self._pop()
        try:
            yield
        finally:
            _state.tapes = [t for t in saved if t is self or t in _state.tapes]

    def reset(self):
        """Forget everything recorded and watched, as if the block were entered anew."""
        self._ops = []
        self._watched = set()
        self._variables = {}
        self._used = False

    # --- watching ------------------------------------------------------------------------------
    def watch(self, tensor):
        """Trace ``tensor`` (a Tensor, Variable, or a list/tuple/dict of them).

        Non-floating tensors are not watched (with a warning). Raises ``TypeError`` for a value
        that is not a Tensor.
        """
        for t in _flatten(tensor):
            if not isinstance(t, Tensor):
                raise TypeError(f"GradientTape.watch: expected a Tensor or Variable, got "
                                f"{type(t).__name__}; convert it with tg.constant first")
            if not _is_float(t):
                warnings.warn(f"GradientTape.watch: a tensor of dtype {t.dtype} cannot carry a "
                              "gradient (only floating dtypes do); it is not watched",
                              stacklevel=2)
                continue
            if isinstance(t, Variable):
                self._note_variable(t)
            else:
                self._watched.add(t._id)

    def _note_variable(self, v):
        if v._id not in self._variables:
            self._variables[v._id] = v
            self._watched.add(v._id)

    def watched_variables(self) -> tuple:
        """The Variables this tape watched, in the order they were first watched or read."""
        return tuple(self._variables.values())

    # --- explanations (tapegrad.viz) ------------------------------------------------------------
    def explain(self, target, sources):
        """Why each source's gradient is what it is; see :func:`tapegrad.viz.explain`."""
        from .viz import explain

        return explain(self, target, sources)

    def to_dot(self, target, sources=None) -> str:
        """The recorded graph behind ``target`` as Graphviz DOT text; see :func:`tapegrad.viz.to_dot`."""
        from .viz import to_dot

        return to_dot(self, target, sources)

    # --- gradients -------------------------------------------------------------------------------
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        """Gradient of ``target`` with respect to ``sources``.

        Args:
            target: a floating Tensor or a list of them (their gradients are summed).
            sources: a Tensor/Variable, or a list, tuple or dict (possibly nested) of them.
            output_gradients: the cotangent(s) of ``target``, same structure and shapes
                (default: ones, i.e. the gradient of the sum).
            unconnected_gradients: ``UnconnectedGradients.NONE`` (or ``"none"``) gives ``None``
                for sources not connected to the target; ``ZERO`` gives zeros.

        Returns gradients in the structure of ``sources``, each with its source's shape and dtype.
        Raises ``RuntimeError`` on a second call to a non-persistent tape, ``TypeError`` for a
        non-floating target or a source that is not a Tensor.
        """
        self._check_usable("gradient")
        if not self._persistent and self in _state.tapes:
            self._pop()  # TensorFlow: a non-persistent tape stops recording once it is used
        self.logs = {}
        unconnected = UnconnectedGradients(unconnected_gradients)
        targets = _flatten(target)
        cots = _cotangents(targets, output_gradients)
        flat_sources = _flatten(sources)
        for s in flat_sources:
            if not isinstance(s, Tensor):
                raise TypeError(f"GradientTape.gradient: sources must be Tensors or Variables, "
                                f"got {type(s).__name__}")
        grads = self._backward(targets, cots, flat_sources, unconnected)
        if not self._persistent:
            self._release()
        return _unflatten(sources, iter(grads))

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE):
        """Jacobian of ``target`` (shape ``T``) with respect to each source (shape ``S``).

        Returns a Tensor of shape ``T + S`` per source, in the structure of ``sources``; built
        row by row with one reverse pass per element of ``target``, using tapegrad ops, so an
        outer tape can differentiate it again (Hessians). Same errors as :meth:`gradient`.
        """
        from . import ops

        self._check_usable("jacobian")
        if not self._persistent and self in _state.tapes:
            self._pop()
        self.logs = {}
        unconnected = UnconnectedGradients(unconnected_gradients)
        if not isinstance(target, Tensor):
            raise TypeError("GradientTape.jacobian: target must be a single Tensor")
        flat_sources = _flatten(sources)
        n = target.size
        xp = _backend.namespace(target._value)
        rows = [[] for _ in flat_sources]
        for k in range(n):
            onehot = xp.reshape(xp.eye(1, n, k=k, dtype=target._value.dtype), target.shape)
            gs = self._backward([target], [Tensor(onehot)], flat_sources, unconnected)
            for r, g in zip(rows, gs):
                r.append(g)
        out = []
        for s, r in zip(flat_sources, rows):
            if all(g is None for g in r):
                out.append(None if unconnected is UnconnectedGradients.NONE else
                           ops.zeros(target.shape + s.shape, dtype=s.dtype))
                continue
            r = [ops.zeros_like(s) if g is None else g for g in r]
            out.append(ops.reshape(ops.stack(r), target.shape + s.shape))
        if not self._persistent:
            self._release()
        return _unflatten(sources, iter(out))

    def _check_usable(self, what):
        if self._used:
            raise RuntimeError(
                f"GradientTape.{what}: a non-persistent GradientTape can only be used to compute "
                "one set of gradients (or Jacobians); create it with persistent=True to call "
                f"{what} several times")

    def _release(self):
        self._used = True
        self._ops = []
        self._watched = set()

    def _backward(self, targets, cotangents, sources, unconnected):
        from . import ops

        source_ids = [s._id for s in sources]
        keep = set(source_ids)
        reach = keep & self._watched  # an unwatched source has no gradient, even if an op read it
        active = []
        for op in list(self._ops):
            if not reach.isdisjoint(op._in_ids):
                active.append(op)
                reach.update(op._float_out)
        saved = _state.reach, _state.backward_tape, _state.grad_op
        _state.reach, _state.backward_tape = reach, self
        try:
            grads = self._reverse(active, reach, keep, targets, cotangents)
            if _HOOKS:
                produced = {i for op in active for i in op._out_ids}
                for i in keep - produced:  # leaves: their gradient is complete only now
                    if i in _HOOKS and grads.get(i) is not None:
                        grads[i] = _run_hooks(i, grads[i])
        finally:
            _state.reach, _state.backward_tape, _state.grad_op = saved
        result = []
        for s in sources:
            g = grads.get(s._id)
            if g is None and unconnected is UnconnectedGradients.ZERO:
                dtype = s.dtype if _is_float(s) else _backend.namespace(s._value).float64
                g = ops.zeros(s.shape, dtype=dtype)
            elif g is not None and not _is_float(s):
                g = None
            result.append(g)
        return result

    @staticmethod
    def _reverse(active, reach, keep, targets, cotangents):
        from . import ops

        grads = {}
        for t, c in zip(targets, cotangents):
            _accumulate(grads, t._id, c)
        hooks = _HOOKS
        observed = bool(_state.tapes)
        outer = any(not t._observer for t in _state.tapes)  # an outer tape may differentiate
        for op in reversed(active):
            out_ids = op._out_ids
            if len(out_ids) == 1:
                i = out_ids[0]
                dy = grads.get(i) if i in keep else grads.pop(i, None)
                if dy is None:
                    continue
                if hooks and i in hooks:
                    dy = grads[i] = _run_hooks(i, dy)
                dys = (dy,)
            else:
                dys = [grads.get(i) if i in keep else grads.pop(i, None) for i in out_ids]
                if all(d is None for d in dys):
                    continue
                if hooks:
                    dys = [_run_hooks(i, d) if d is not None and i in hooks else d
                           for i, d in zip(out_ids, dys)]
                dys = [ops.zeros_like(o) if d is None else d for d, o in zip(dys, op.outputs)]
            od = op._opdef if op._override is None else _registry._OPS[op._override]
            fn = od.grad
            if fn is None:
                if not od.differentiable:
                    continue
                raise _no_gradient_error(od.type)
            if outer:
                gs = _call_tracking_provenance(fn, op, dys)
            elif observed:
                _state.grad_op = op
                gs = fn(op, *dys)
            else:
                gs = fn(op, *dys)
            in_ids = op._in_ids
            if type(gs) is Tensor and len(in_ids) == 1:  # the common case, without a loop
                iid = in_ids[0]
                if iid in reach:
                    x = op.inputs[0]
                    if gs._value.shape != x._value.shape or gs._value.dtype is not x._value.dtype:
                        gs = _check_gradient(op, 0, x, gs, fn)
                    prev = grads.get(iid)
                    grads[iid] = gs if prev is None else ops.add(prev, gs)
                continue
            if type(gs) is not tuple or len(gs) != len(in_ids):
                gs = _as_gradient_list(gs, op, fn)
            for k, iid in enumerate(in_ids):
                if iid not in reach:  # None (a scalar input) is never in reach
                    continue
                g = gs[k]
                if g is None:
                    continue
                x = op.inputs[k]
                if type(g) is not Tensor or g._value.shape != x._value.shape or (
                        g._value.dtype is not x._value.dtype):
                    g = _check_gradient(op, k, x, g, fn)
                prev = grads.get(iid)
                grads[iid] = g if prev is None else ops.add(prev, g)
        return grads


def _call_tracking_provenance(fn, op, dys):
    """Call ``fn(op, *dys)``; if it computed with raw arrays of traced tensors, or returned raw
    arrays, its results are marked once-differentiable for the outer tapes."""
    saved = _state.grad_op, _state.raw_access
    _state.grad_op, _state.raw_access = op, False
    try:
        gs = fn(op, *dys)
        raw = _state.raw_access
    finally:
        _state.grad_op, _state.raw_access = saved
    if isinstance(gs, (list, tuple, dict)):
        items = gs.values() if isinstance(gs, dict) else gs
        if not raw and all(g is None or isinstance(g, Tensor) for g in items):
            return gs
    elif not raw and (gs is None or isinstance(gs, Tensor)):
        return gs
    mark = functools.partial(_once_differentiable, op, fn, dys)
    if isinstance(gs, dict):
        return {k: mark(g) for k, g in gs.items()}
    if isinstance(gs, (list, tuple)):
        return [mark(g) for g in gs]
    return mark(gs)


class _OnceDifferentiable:
    """Op-type entry of a gradient computed outside tapegrad ops: differentiating it raises."""

    differentiable = True
    surrogate = False

    def __init__(self, op, fn):
        self.type = f"OnceDifferentiable({op.type})"
        self.source_type, self.fn = op.type, fn

    def param_name(self, i):
        return f"input {i}"

    def grad(self, op, *dys):
        raise NotDifferentiableError(
            f"cannot differentiate the gradient of op type {self.source_type!r} again: its "
            f"gradient function {describe_fn(self.fn)} computed it with raw backend arrays "
            "(.numpy(), np.asarray, float()) instead of tapegrad ops, so its own derivative is "
            "unknown (it would silently be zero). Write the gradient function with tapegrad "
            "ops, or give a second-order gradient with a nested @tg.custom_gradient")


def _once_differentiable(op, fn, dys, g):
    if g is None or callable(g) and not isinstance(g, Tensor):
        return g
    if not isinstance(g, Tensor):
        try:
            g = Tensor(_backend.asarray(g))
        except TypeError:
            return g  # not an array: _check_gradient reports it
    out = _wrap(g._value)
    inputs = tuple(a for a in (*op.inputs, *dys) if isinstance(a, Tensor))
    record_outputs(_OnceDifferentiable(op, fn), inputs, {}, (out,))
    return out


def _note_raw_access(t):
    """Called by Tensor.numpy(): inside a gradient function, reading a traced tensor's array
    makes the gradient once-differentiable."""
    if _state.grad_op is not None and not _state.raw_access:
        for tape in _state.tapes:
            if not tape._observer and t._id in tape._watched:
                _state.raw_access = True
                return


_tensor_module._raw_access_hook = _note_raw_access


def register_hook(tensor, fn):
    """Call ``fn(grad)`` with the gradient flowing into ``tensor`` during ``tape.gradient``.

    ``tensor``: a Tensor or Variable. ``fn`` returns ``None`` (keep the gradient: inspect it) or
    a Tensor of the same shape and dtype that replaces it for everything upstream. The hook
    runs once per ``gradient`` call, when the tensor's gradient is complete. Returns a handle
    whose ``remove()`` unregisters it; hooks die with their tensor.
    Raises ``GradientShapeError`` if ``fn`` returns a gradient of another shape or dtype.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"register_hook: expected a Tensor or Variable, got {type(tensor).__name__}")
    key = tensor._id
    if key not in _HOOKS:
        _HOOKS[key] = []
        weakref.finalize(tensor, _HOOKS.pop, key, None)
    _HOOKS[key].append(fn)
    return _HookHandle(key, fn)


class _HookHandle:
    def __init__(self, key, fn):
        self._key, self._fn = key, fn

    def remove(self):
        """Unregister the hook (no error if it is already gone)."""
        fns = _HOOKS.get(self._key, [])
        if self._fn in fns:
            fns.remove(self._fn)


def _run_hooks(key, g):
    for fn in list(_HOOKS.get(key, ())):
        new = fn(g)
        if new is None:
            continue
        if not isinstance(new, Tensor) or new.shape != g.shape or new.dtype != g.dtype:
            got = (f"shape {new.shape} and dtype {new.dtype}" if isinstance(new, Tensor)
                   else f"a {type(new).__name__}")
            raise GradientShapeError(
                f"the gradient hook {describe_fn(fn)} returned {got} for a gradient of shape "
                f"{g.shape} and dtype {g.dtype}; return None or a Tensor of the same shape and "
                "dtype")
        g = new
    return g


def _no_gradient_error(op_type):
    return NotDifferentiableError(
        f"no gradient is registered for op type {op_type!r}; register one with "
        f"@tg.RegisterGradient({op_type!r}), declare it non-differentiable with "
        f"tg.no_gradient({op_type!r}), or wrap the computation in tg.stop_gradient")


def _accumulate(grads, key, g):
    prev = grads.get(key)
    if prev is None:
        grads[key] = g
    else:
        from .ops import add

        grads[key] = add(prev, g)


def _cotangents(targets, output_gradients):
    from . import ops

    for t in targets:
        if not isinstance(t, Tensor):
            raise TypeError(f"GradientTape.gradient: target must be a Tensor, got "
                            f"{type(t).__name__}")
        if not _is_float(t):
            raise TypeError(
                f"GradientTape.gradient: the target has dtype {t.dtype}; only floating targets "
                "have gradients. Cast it with tg.astype(target, tg.float64) before the op that "
                "made it integer, or differentiate a floating quantity")
    if output_gradients is None:
        return [ops.ones_like(t) for t in targets]
    cots = _flatten(output_gradients)
    if len(cots) != len(targets):
        raise ValueError(f"GradientTape.gradient: {len(cots)} output_gradients for "
                         f"{len(targets)} targets; give one per target")
    out = []
    for t, c in zip(targets, cots):
        c = c if isinstance(c, Tensor) else Tensor(_backend.asarray(
            c, dtype=t.dtype, xp=_backend.namespace(t._value)))
        if c.shape != t.shape:
            raise ValueError(f"GradientTape.gradient: output_gradients of shape {c.shape} for "
                             f"a target of shape {t.shape}; they must match")
        out.append(c)
    return out


def _flatten(x):
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    if isinstance(x, dict):
        return [y for item in x.values() for y in _flatten(item)]
    return [x]


def _unflatten(structure, it):
    if isinstance(structure, (list, tuple)):
        return type(structure)(_unflatten(s, it) for s in structure)
    if isinstance(structure, dict):
        return {k: _unflatten(v, it) for k, v in structure.items()}
    return next(it)


def describe_fn(fn) -> str:
    """``name (file:line)`` of a gradient function, for error messages."""
    fn = inspect.unwrap(fn)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return name
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


def _as_gradient_list(result, op, fn):
    n = len(op.inputs)
    if isinstance(result, (list, tuple)):
        gs = list(result)
    elif isinstance(result, dict):
        return _gradients_by_name(result, op, fn)
    else:
        gs = [result]
    if len(gs) != n:
        hint = ""
        if any(callable(g) and not isinstance(g, Tensor) for g in gs):
            hint = (". One of them is a function: a gradient function cannot return a "
                    "second-order gradient function. For a custom second-order gradient, return "
                    "a tensor computed by a nested @tg.custom_gradient function inside the "
                    "gradient function; the plain second derivative comes from an outer "
                    "GradientTape")
        raise GradientCountError(
            f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned "
            f"{len(gs)} gradient(s) for {n} input(s); return exactly one per input, in input "
            f"order, with None for an input that has no gradient{hint}")
    return gs


def _gradients_by_name(result, op, fn):
    names = [op._opdef.param_name(k) for k in range(len(op.inputs))]
    unknown = sorted(set(result) - set(names))
    if unknown:
        raise GradientCountError(
            f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned gradients "
            f"for {', '.join(map(repr, unknown))}, which are not inputs; its inputs are "
            f"{', '.join(map(repr, names))}")
    return [result.get(name) for name in names]


def _input_label(op, k) -> str:
    opdef = op._opdef
    name = opdef.param_name(k) if opdef is not None else f"input {k}"
    return f"input {k} ({name!r})"


def _check_gradient(op, k, x, g, fn):
    if not isinstance(g, Tensor):
        if callable(g):
            raise GradientTypeError(
                f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
                f"function for {_input_label(op, k)}, not a tensor. To give a custom second-order "
                "gradient, return a tensor computed by a nested @tg.custom_gradient function "
                "inside the gradient function (see the README); the plain second derivative "
                "comes from an outer GradientTape")
        if isinstance(g, (list, tuple, dict, str)) or g is None:
            raise GradientTypeError(
                f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
                f"{type(g).__name__} for {_input_label(op, k)}; return a Tensor (or None)")
        try:
            _backend.namespace(g)
        except TypeError:
            raise GradientTypeError(
                f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
                f"{type(g).__name__} for {_input_label(op, k)}; return a Tensor (or None)"
            ) from None
        g = Tensor(_backend.asarray(g, xp=_backend.namespace(x._value)))
        for obs in _state.tapes:
            if obs._observer:
                obs.observe(_registry._OPS["Identity"], (g,), (g,))
    gv, xv = g._value, x._value
    if gv.shape != xv.shape:
        g = _unbroadcast(op, k, x, g, fn)
    if gv.dtype is not xv.dtype and gv.dtype != xv.dtype:
        out_dtypes = [o._value.dtype for o in op.outputs]
        if gv.dtype in out_dtypes and _backend.is_floating(xv.dtype):
            from .ops import astype  # undo type promotion of the op, as broadcasting is undone

            g = astype(g, xv.dtype)
        else:
            raise GradientShapeError(
                f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
                f"gradient of dtype {g.dtype} for {_input_label(op, k)}, which has dtype "
                f"{x.dtype}; return a gradient with its input's dtype")
    return g


def _unbroadcast(op, k, x, g, fn):
    from . import ops

    xs, gs = tuple(x._value.shape), tuple(g._value.shape)
    out_shapes = [tuple(o._value.shape) for o in op.outputs]
    lead = len(gs) - len(xs)
    ok = gs in out_shapes and lead >= 0 and all(
        a == b or a == 1 for a, b in zip(xs, gs[lead:]))
    if not ok:
        raise GradientShapeError(
            f"the gradient function {describe_fn(fn)} of op type {op.type!r} returned a "
            f"gradient of shape {gs} for {_input_label(op, k)}, which has shape {xs}; expected "
            f"shape {xs} (a gradient of the op's output shape is summed back only where the "
            "input was broadcast). Return one gradient per input with that input's shape")
    axes = tuple(range(lead)) + tuple(
        lead + i for i, (a, b) in enumerate(zip(xs, gs[lead:])) if a == 1 and b != 1)
    if axes:
        g = ops.sum(g, axis=axes)
    if g.shape != xs:
        g = ops.reshape(g, xs)
    return g
