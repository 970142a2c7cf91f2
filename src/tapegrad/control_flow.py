"""Control flow with TensorFlow 2's names: ``cond``, ``switch_case``, ``while_loop``, ``scan``,
``map_fn``, ``foldl``, ``foldr`` (``tg.lax`` gives the same under JAX's carry-style signatures).

**Eagerly** each construct runs as Python: the body is called once per iteration, so tapes and
accumulators record every op and a debugger steps through the body.

**Inside** ``tg.function`` (while JAX traces) each is one XLA control-flow op (``lax.switch``,
``lax.scan``, ``lax.while_loop``) whose body is traced once, whatever the trip count. A body
is traced twice: first alone (``jax.eval_shape``), to find the Tensors it *captures* (made
before the construct: closed-over tensors and Variables it reads or returns), the
Variables it *assigns* (a ``tg.random`` generator's key, a counter), and its outputs'
shapes and dtypes, which are
checked against the loop variables or the other branches; then inside the op, with the
assigned Variables carried as loop variables of their own. The op is recorded on the active
tapes and accumulators as one record whose inputs are the loop variables, the scanned slices
and the captures, and whose gradient and JVP are control-flow ops of tapegrad code again:

* the **VJP** of a scan is a scan in the other direction whose step runs the body again under a
  ``GradientTape`` (the carries entering each step are the only residuals: the body is
  recomputed, as ``jax.checkpoint`` of a step would) and accumulates the captures' gradients
  in its carry; the VJP of a ``switch`` is a ``switch`` of the branches' VJPs;
* the **JVP** of a scan (a while loop, a switch) is the same construct carrying the tangents
  beside the primals, each step under a ``ForwardAccumulator``; when a forward accumulator is
  the outermost entry that differentiates (``tg.jvp``, the outer level of ``tg.hvp``), the
  construct is fused with its JVP: one construct, its body traced once for both;
* the bodies' own ops are differentiated by their rules, so ``custom_gradient`` functions and
  registered gradients are respected inside loops, and since these gradients are tapegrad
  ops recorded as control flow in turn, they are differentiated again (second order).

Reverse mode through a compiled ``while_loop`` with an int ``maximum_iterations`` runs it as a
scan of that length whose step is a ``cond`` (the iterations after the exit do nothing);
without one (or with a traced bound) the loop keeps ``checkpoints`` slots
(``UNBOUNDED_WHILE_SLOTS`` by default) and its gradient replays from them, first order only.
Forward mode always works.
"""
from __future__ import annotations


import numpy as np

from . import _backend, _records, checkpointing, config
from ._pytree import leaf_paths as _paths
from ._pytree import show, tree_flatten, tree_unflatten
from ._registry import Sample, construct, construct_call
from ._tape import GradientTape, UnconnectedGradients
from ._tensor import Tensor
from ._tensor import _ids as _tensor_ids
from ._variables import (Variable, bind_tensors, bind_variables, set_state,
                         visible_variables)
from .errors import describe_fn
from .forward import ForwardAccumulator, inheriting
from .ops import (astype, concat, convert_to_tensor, cos, expand_dims, logical_and,
                  logical_not, sin, stack, zeros, zeros_like)
from .ops import abs as _abs
from .ops import sum as _sum
from .ops import where as _where

__all__ = ["cond", "switch_case", "while_loop", "scan", "map_fn", "foldl", "foldr"]

_ZERO = UnconnectedGradients.ZERO


def _jax():
    return config.jax_module()


def _raw(x):
    return x._value if isinstance(x, Tensor) else x


def _compiled(leaves) -> bool:
    """Whether a construct builds an XLA op: inside a ``tg.function`` trace, or on tracers."""
    if config.tracing():
        return True
    jax = config.loaded_jax()
    return jax is not None and any(isinstance(_raw(x), jax.core.Tracer) for x in leaves)


def _spec(t):
    return tuple(t.shape), _backend.np_dtype(t._value.dtype)


def _describe(spec):
    shape, dtype = spec
    return f"shape {shape} and dtype {dtype}"


def _carry_changed(where, name, got, want, hint=""):
    """The ``TypeError`` for a loop variable whose ``(shape, dtype)`` changed in the body."""
    return TypeError(f"{where}: the body returned {name} with {_describe(got)}, but it entered "
                     f"the loop with {_describe(want)}; a loop variable keeps its shape and "
                     f"dtype in every iteration (pad it to a fixed shape, or cast it{hint})")


# --- tracing a body alone: what it captures, assigns and returns -------------------------------
class _Captures:
    """An observer that notes the Tensors a body's ops read that were made before the body ran
    (tensor ids grow: one below ``first`` is older): closed-over tensors and Variables."""

    _observer = True
    _differentiates = False

    def __init__(self):
        self.first = next(_tensor_ids)
        self.found = {}

    def observe(self, opdef, args, attrs, outs):
        for a in args:
            if isinstance(a, Tensor) and a._id < self.first:
                self.found.setdefault(a._id, a)


class _Guard:
    """An observer that checks that a body run again for its gradient reads no tensor made
    before it other than its captures and arguments: Python closures bind late, so a closed-
    over name rebound after the construct ran (``c = tg.cond(..., lambda: c * 2, ...)``)
    would give another computation's gradient."""

    _observer = True
    _differentiates = False

    def __init__(self, allowed, where):
        self.first = next(_tensor_ids)
        self.allowed, self.where = allowed, where

    def observe(self, opdef, args, attrs, outs):
        for a in args:
            if isinstance(a, Tensor) and a._id < self.first and a._id not in self.allowed:
                raise RuntimeError(
                    f"{self.where}: run again for its gradient, a body or branch read a "
                    f"{_describe_capture(a)} that it did not read when it ran: a name "
                    "it closes over was rebound after the construct ran (Python closures "
                    "bind late, e.g. `c = tg.cond(p, lambda: c * 2, ...)`). Bind the value "
                    "when the function is made (`lambda c=c: c * 2`) or use a new name")


def _guarded(fn, args, captures, where):
    """``fn()`` with a :class:`_Guard` that admits ``args`` and ``captures``."""
    allowed = {t._id for t in (*args, *captures) if isinstance(t, Tensor)}
    with _records.trace_stack([*_records.trace_entries(), _Guard(allowed, where)]):
        return fn()


def _merge(founds):
    """``(captures, assigned Variables)`` of several traces (the branches of a switch, a
    loop's cond and body), each once, in order; an assigned Variable is no capture."""
    captures, state = {}, {}
    for f in founds:
        state.update((id(v), v) for v in f.assigned)
        captures.update((id(c), c) for c in f.captures)
    return [c for i, c in captures.items() if i not in state], list(state.values())


def _differentiated(captures, state):
    """The tensors besides its loop variables and slices that a construct's record
    differentiates: its captures and the floating Variables it assigns, whose every read is
    differentiated as a read of the Variable, as eagerly (an assignment is not recorded)."""
    return [*captures, *[v for v in state if _backend.is_floating(v.dtype)]]


class _Found:
    """What :func:`_discover` found: ``captures`` (Tensors), ``assigned`` (Variables), ``outs``
    (the outputs' ``(shape, dtype)``), and the trace itself (``jaxpr``), which :meth:`run`
    evaluates instead of tracing the body's Python again."""

    def __init__(self, captures, assigned, outs):
        self.captures, self.assigned, self.outs = captures, assigned, outs
        self.jaxpr = None
        self.vjp = self.sources = None  # see _discover_with_vjp

    def run(self, arrays, again):
        """The body's flat JAX outputs on the JAX values ``arrays``: the trace evaluated when
        the body assigns no Variable (then its only inputs are ``arrays`` and what it closes
        over, the trace's constants) and ``arrays`` have the traced types; else ``again()``,
        the body traced anew."""
        jaxpr = self.jaxpr
        if (self.assigned or jaxpr is None
                or [getattr(a, "aval", None) for a in arrays] != jaxpr.in_avals):
            return again()
        return _jax().core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *arrays)


def _isolated(fn, tensors, observer=None):
    """``fn(tensors)`` with the outer tapes paused (the construct is recorded as one op), and
    the Variables bound to their values in this thread (``bind_tensors``: what it assigns, no
    other thread sees, and it is dropped afterwards); returns ``(outputs, the Variables it
    assigned)``."""
    live = visible_variables()
    before = [v._value for v in live]
    with (_records.trace_stack([observer] if observer is not None else []),
          bind_tensors(zip(live, before)) as values):
        outs = fn(tensors)
    return outs, [v for v, b in zip(live, before) if values[v._id] is not b]


def _discover(fn, specs) -> _Found:
    """Trace ``fn`` (flat Tensors -> flat Tensors) alone on JAX values of ``specs``."""
    jax = _jax()
    found = []

    def traced(*arrays):
        observer = _Captures()
        outs, assigned = _isolated(fn, [Tensor(a) for a in arrays], observer)
        for o in outs:  # a tensor made before, returned as it is (no op reads it)
            if isinstance(o, Tensor) and o._id < observer.first:
                observer.found.setdefault(o._id, o)
        found.append(_Found(list(observer.found.values()), list(assigned),
                            [_spec(o) for o in outs]))
        return [_backend.as_jax(o._value) for o in outs]

    jaxpr = jax.make_jaxpr(traced)(*[jax.ShapeDtypeStruct(s, d) for s, d in specs])
    result = found[-1]
    result.jaxpr = jaxpr
    assigned = {id(v) for v in result.assigned}
    result.captures = [c for c in result.captures if id(c) not in assigned]
    return result


class _Watcher:
    """An observer just outside a tape: it watches there each floating tensor made before the
    branch ran (a capture: a closed-over tensor or a Variable) when an op of the branch first
    reads it, so the tape records every op a capture reaches."""

    _observer = True
    _differentiates = False

    def __init__(self, tape):
        self.first = next(_tensor_ids)
        self.tape, self.found = tape, {}

    def observe(self, opdef, args, attrs, outs):
        for a in args:
            if (isinstance(a, Tensor) and a._id < self.first and a._id not in self.found
                    and _backend.is_floating(a.dtype)):
                self.found[a._id] = a
                self.tape.watch(a)


def _discover_with_vjp(branch, want, fo) -> _Found:
    """Trace the zero-argument ``branch`` once together with its VJP, for a construct that a
    tape records (its gradient will be asked for): the :class:`_Found` that :func:`_discover`
    gives, whose ``vjp`` is the trace of ``(cotangents of the outputs at positions fo) ->
    (the outputs, the gradients of the captures in ``sources``)``, which the forward evaluates
    for its outputs (XLA drops the unused gradients) and the VJP for the gradients. ``want``:
    the outputs' ``(shape, dtype)`` that the other branches gave; a branch that gives others
    (an error, reported by the caller) or assigns Variables has no ``vjp``."""
    primal, sources = [], []

    def with_vjp(dys):
        with GradientTape(watch_accessed_variables=False) as tape:
            watcher = _Watcher(tape)
            with _records.trace_stack([*_records.trace_entries()[:-1], watcher, tape]):
                y = branch()
        primal[:] = [_spec(o) for o in y]
        if primal != want:
            return y
        watcher.observe(None, y, None, None)  # a capture returned as it is, read by no op
        sources[:] = watcher.found.values()
        return [*y, *tape.gradient([y[j] for j in fo], sources, output_gradients=list(dys),
                                   unconnected_gradients=_ZERO)]

    traced = _discover(with_vjp, [want[j] for j in fo])
    found = _Found(traced.captures, traced.assigned, primal)
    if primal == want and not traced.assigned:
        found.vjp, found.sources = traced, sources
    return found


def _bound(fn, state):
    """``fn`` of (values of the Variables ``state``, then its own arguments) that binds the
    Variables to those values while it runs, in this thread only (``bind_tensors``), and
    returns their new values after its outputs."""
    n = len(state)

    def call(tensors):
        with bind_tensors([(v, t._value) for v, t in zip(state, tensors[:n])]):
            outs = fn(tensors[n:])
            return [*outs, *[Tensor(v._value) for v in state]]

    return call


def _record(op_type, names, inputs, outs, grad, jvp, fused=None):
    """Record the construct ``op_type`` that ran on ``inputs`` (named ``names``) and gave
    ``outs`` on the active tapes and accumulators, with its ``grad`` and ``jvp``; ``fused``:
    ``(acc, tangents)`` when the construct already computed its outputs' ``tangents`` in the
    accumulator ``acc`` (the outermost that differentiates), which takes them as they are."""
    if _records.trace_entries() and any(_backend.is_floating(o.dtype) for o in outs):
        grad.__name__ = f"{op_type}_vjp"
        read = [k for k, a in enumerate(inputs) if isinstance(a, Variable)]
        if read:
            grad, jvp = _at_read(grad, inputs, read), _at_read(jvp, inputs, read)
        call = construct_call(op_type, names, grad, jvp)
        if fused is None:
            _records.record(call, tuple(inputs), {}, tuple(outs))
            return
        acc, tangents = fused
        given = construct_call(op_type, names, grad, lambda op, *ts: tuple(tangents))
        for entry in _records.trace_entries():  # each with the entries outside it active
            _records.record(given if entry is acc else call, tuple(inputs), {}, tuple(outs),
                            only=entry)


def _at_read(rule, inputs, read):
    """The gradient or JVP ``rule(op, *ds)`` of a construct that read the Variables among its
    ``inputs`` (at the positions ``read``), run with them bound to the values its record kept:
    the bodies it runs again read what the construct read, not what the Variables hold when
    the rule runs (assigned since, or bound to another value: the gradient of a compiled
    call's gradient, whose reads would otherwise count twice)."""
    def run(op, *ds):
        with bind_variables([(inputs[k], op.inputs[k]._value) for k in read]):
            return rule(op, *ds)

    run.__name__ = rule.__name__
    return run


# --- scan ------------------------------------------------------------------------------------
def _scan_flat(step, carries, xs, length, reverse=False, unroll=1, where="tg.lax.scan",
               names=None, schedule=None):
    """The compiled scan of ``step(carries, x_slices) -> (carries, ys)`` on flat lists of
    Tensors; returns ``(carries, ys)`` (ys stacked on a new leading axis). ``schedule``: a
    ``tg.checkpointing`` schedule for its gradient (:func:`_scan_vjp_on_schedule`), or
    ``None`` to keep the carry entering each step."""
    jax = _jax()
    nc = len(carries)
    names = names or [f"carry[{k}]" for k in range(nc)]
    c_specs = [_spec(c) for c in carries]
    x_specs = [(tuple(x.shape[1:]), _backend.np_dtype(x._value.dtype)) for x in xs]

    def flat(ts):
        c2, ys = step(ts[:nc], ts[nc:])
        return [*c2, *ys]

    acc = _fusing_accumulator()
    fused = acc and _scan_with_jvp(acc, flat, carries, xs, c_specs, x_specs, length, reverse,
                                   unroll, where, names)
    if fused:
        found, c_out, y_out, entered, tangents = fused
        state, s_init = [], []
    else:
        found = _discover(flat, [*c_specs, *x_specs])
        _check_carries(where, names, c_specs, found.outs[:nc])
        state = found.assigned
        if state and schedule is not None:
            raise _assigns_error(where, state[0])
    ny = len(found.outs) - nc
    ns = len(state)
    full = _bound(flat, state)  # (state, carries, x) -> (carries, ys, state)

    def full_step(c, x):  # carries then state values -> (carries then state, ys)
        out = full([*c[nc:], *c[:nc], *x])
        return [*out[:nc], *out[nc + ny:]], out[nc:nc + ny]

    recorded = bool(_records.trace_entries())
    on_schedule = recorded and not fused and schedule is not None and length > 0
    keep = recorded and not on_schedule  # the carries entering each step, for the gradient
    if not fused:
        def again(c, x):
            outs, _ = _isolated(lambda ts: full([*ts[nc:nc + ns], *ts[:nc], *ts[nc + ns:]]),
                                [Tensor(a) for a in (*c, *x)])
            return [_backend.as_jax(o._value) for o in outs]

        def body(c, x):
            new = found.run([*c, *x], lambda: again(c, x))
            return [*new[:nc], *new[nc + ny:]], (new[nc:nc + ny], list(c) if keep else [])

        init = [*[_backend.as_jax(c._value) for c in carries], *[v._value for v in state]]
        final, (ys, entered) = jax.lax.scan(body, init, [_backend.as_jax(x._value) for x in xs],
                                            length=length, reverse=reverse, unroll=unroll)
        set_state(state, final[nc:])
        c_out = [Tensor(a) for a in final[:nc]]
        y_out = [Tensor(a) for a in ys]
        entered = [Tensor(a) for a in entered]
        s_init = [Tensor(a) for a in init[nc:]]
    if recorded:
        captures = _differentiated(found.captures, state)
        inputs = [*carries, *xs, *captures]

        # the carries entering each step are outputs too: the gradient reads them, so an
        # outer tape must know what they depend on (second order)
        def grad(op, *dys):
            if on_schedule:
                return _scan_vjp_on_schedule(found, full_step, carries, xs, captures, c_out,
                                             y_out, dys, length, reverse, where, schedule)
            return _scan_vjp(full_step, carries, xs, captures, entered, c_out, y_out, dys,
                             length, reverse, where)

        def jvp(op, *ts):
            return _scan_jvp(full_step, carries, s_init, xs, captures, y_out, ts, length,
                             reverse, where)

        in_names = [*names, *[f"xs[{k}]" for k in range(len(xs))],
                    *[f"captured {_describe_capture(c)}" for c in captures]]
        _record("Scan", in_names, inputs, [*c_out, *y_out, *entered], grad, jvp,
                fused=fused and (acc, tangents))
    return c_out, y_out


def _check_carries(where, names, want, got):
    """Raise :func:`_carry_changed` for the first loop variable whose ``(shape, dtype)`` the
    body changed (``want``: as they entered, ``got``: as the body returned them)."""
    for name, w, g in zip(names, want, got):
        if w != g:
            raise _carry_changed(where, name, g, w)


def _fusing_accumulator():
    """The forward-mode accumulator that a compiled construct fuses with its JVP: the
    outermost entry of the trace stack that differentiates, if it is one (then no entry
    differentiates the tangents' computation) and JAX will not transpose what it runs;
    else ``None``."""
    for e in _records.trace_entries():
        if e._differentiates:
            return e if isinstance(e, ForwardAccumulator) and not e._transposed else None
    return None


def _fresh(tangents):
    """New Tensors of ``tangents``' values: a tangent made before a fused step (a capture's,
    returned as it is) is no capture of the step (only its value is an output)."""
    return [Tensor(t._value) for t in tangents]


def _scan_with_jvp(acc, flat, carries, xs, c_specs, x_specs, length, reverse, unroll, where,
                   names):
    """The compiled scan of ``flat`` (carries then slices -> carries then ys) fused with its
    JVP in the accumulator ``acc``: one scan carries the tangents beside the primals, so the
    step is traced once for both (the JVP as a scan of its own would trace it again), and a
    tensor the step captures has the tangent ``acc`` gives it. Returns ``(found, carries, ys,
    the carries entering each step, their tangents)`` (tangents in that order, ``None`` where
    not floating), or ``None`` when the step assigns Variables (the caller scans apart)."""
    jax = _jax()
    nc, nx = len(carries), len(xs)
    fc = [k for k in range(nc) if _backend.is_floating(carries[k].dtype)]
    tc = [acc.jvp(carries[k], _ZERO) for k in fc]
    tx = acc.jvp(list(xs))
    wx = [k for k in range(nx) if tx[k] is not None]
    nt = nc + len(fc)
    shape = []  # the step's number of ys and the floating ones' positions

    def step(ts):
        c, dc = ts[:nc], ts[nc:nt]
        xv, dx = ts[nt:nt + nx], ts[nt + nx:]
        inner = inheriting(acc, [*[c[k] for k in fc], *[xv[k] for k in wx]], [*dc, *dx])
        # the accumulator outside the observers: what its rules read is no capture
        with _records.trace_stack([inner, *_records.trace_entries()]):
            out = flat([*c, *xv])
        c2, y = out[:nc], out[nc:]
        fy = [j for j, o in enumerate(y) if _backend.is_floating(o.dtype)]
        shape[:] = len(y), fy
        return [*c2, *_fresh(inner.jvp([c2[k] for k in fc], _ZERO)), *y,
                *_fresh(inner.jvp([y[j] for j in fy], _ZERO)), *c, *dc]

    found = _discover(step, [*c_specs, *[c_specs[k] for k in fc], *x_specs,
                             *[x_specs[k] for k in wx]])
    if found.assigned:
        return None
    _check_carries(where, names, c_specs, found.outs[:nc])

    def again(c, x):
        outs, _ = _isolated(step, [Tensor(a) for a in (*c, *x)])
        return [_backend.as_jax(o._value) for o in outs]

    def body(c, x):
        new = found.run([*c, *x], lambda: again(c, x))
        return new[:nt], new[nt:]

    init = [_backend.as_jax(t._value) for t in (*carries, *tc)]
    seq = [_backend.as_jax(t._value) for t in (*xs, *[tx[k] for k in wx])]
    final, ys = jax.lax.scan(body, init, seq, length=length, reverse=reverse, unroll=unroll)
    ny, fy = shape
    final, ys = [Tensor(a) for a in final], [Tensor(a) for a in ys]
    n1, n2 = ny + len(fy), ny + len(fy) + nc
    tangents = [None] * (nc + ny + nc)  # of the carries, the ys, the entering carries
    for i, k in enumerate(fc):
        tangents[k], tangents[nc + ny + k] = final[nc + i], ys[n2 + i]
    for i, j in enumerate(fy):
        tangents[nc + j] = ys[ny + i]
    found.outs = found.outs[:nc + ny]
    return found, final[:nc], ys[:ny], ys[n1:n2], tangents


def _scan_vjp_on_schedule(found, full_step, carries, xs, captures, c_out, y_out, dys, length,
                          reverse, where, schedule):
    """The gradients of a compiled scan that kept no carries, replaying its steps on
    ``schedule``'s plan (:mod:`tapegrad.checkpointing`) in one ``lax.scan`` over the plan's
    rows (an ``ADVANCE(k)`` as ``k`` rows), each a ``lax.switch`` between advancing one step
    (the forward's trace, ``found``, evaluated), storing the carry in a slot, restoring one,
    and reversing one step (the step's VJP, traced once here): at most the schedule's slots of
    carries are held. First order only: when a tape or accumulator records this gradient (a
    higher order), the carries entering each step are recomputed by a scan of tapegrad code
    and the usual :func:`_scan_vjp` runs (memory as without checkpoints)."""
    nc, nx, ny = len(carries), len(xs), len(y_out)
    if any(t._differentiates for t in _records.trace_entries()):
        _, entered = _scan_flat(lambda c, x: (full_step(c, x)[0], list(c)), carries, xs, length,
                                reverse, where=where)
        return _scan_vjp(full_step, carries, xs, captures, entered, c_out, y_out,
                         (*dys, *[None] * nc), length, reverse, where)
    jax = _jax()
    jnp = jax.numpy
    fc = [k for k in range(nc) if _backend.is_floating(carries[k].dtype)]
    fx = [k for k in range(nx) if _backend.is_floating(xs[k].dtype)]
    fy = [j for j in range(ny) if _backend.is_floating(y_out[j].dtype)]
    fk = [k for k in range(len(captures)) if _backend.is_floating(captures[k].dtype)]
    n1, n2 = len(fc), len(fc) + len(fx)

    def back(ts):  # (carries, slices, cotangents of the floating carries and ys) -> gradients
        return _step_vjp(full_step, ts[:nc], ts[nc:nc + nx], captures, (fc, fx, fy, fk),
                         ts[nc + nx:], where)

    c_specs = [_spec(c) for c in carries]
    x_specs = [(tuple(x.shape[1:]), _backend.np_dtype(x._value.dtype)) for x in xs]
    y_specs = [(tuple(y_out[j].shape[1:]), _backend.np_dtype(y_out[j]._value.dtype)) for j in fy]
    back_found = _discover(back, [*c_specs, *x_specs, *[c_specs[k] for k in fc], *y_specs])

    rows = []  # (kind, arg) with ADVANCE(k) as k rows of ADVANCE(1)
    for kind, arg in schedule.plan(length):
        rows += [(int(kind), 1)] * arg if kind == checkpointing.ADVANCE else [(int(kind), arg)]
    kinds, args = (np.array(col, dtype=np.int32) for col in zip(*rows))
    turns = np.flatnonzero(kinds == int(checkpointing.YOUTURN))  # step n-1 first, then ...
    at = (length - 1 - args[turns]) if reverse else args[turns]  # ... each one's slice
    x_arrays = [_backend.as_jax(x._value) for x in xs]
    dy = [_backend.as_jax((dys[nc + j] if dys[nc + j] is not None else zeros_like(y_out[j]))
                          ._value) for j in fy]
    slots = max(schedule.slots(length), 1)
    c0 = [_backend.as_jax(c._value) for c in carries]

    def row(state, kind_arg):
        kind, arg = kind_arg
        c, t, buffers, steps, gc, gk = state
        # storing and restoring outside the switch: one carry's copy per row, in place (in a
        # branch, XLA copied every slot at every row)
        shot = kind == int(checkpointing.TAKESHOT)
        restoring = kind == int(checkpointing.RESTORE)
        slot = jnp.where(shot | restoring, arg, 0)
        buffers = [b.at[slot].set(jnp.where(shot, v, b[slot])) for b, v in zip(buffers, c)]
        steps = steps.at[slot].set(jnp.where(shot, t, steps[slot]))
        c = [jnp.where(restoring, b[slot], v) for b, v in zip(buffers, c)]
        t = jnp.where(restoring, steps[slot], t)
        i = (length - 1 - t) if reverse else t
        x_t = [x[i] for x in x_arrays]

        def idle():
            return (c, t, gc, gk), [jnp.zeros(x.shape[1:], x.dtype) for x in
                                    (x_arrays[k] for k in fx)]

        def advance():
            new = _run_found(found, lambda ts: full_step(ts[:nc], ts[nc:])[0],
                             [*c, *x_t])[:nc]
            return (new, t + 1, gc, gk), idle()[1]

        def turn():
            g = _run_found(back_found, back, [*c, *x_t, *gc, *[d[i] for d in dy]])
            return (c, t, g[:n1], [a + b for a, b in zip(gk, g[n2:])]), g[n1:n2]

        which = jnp.where(kind == int(checkpointing.ADVANCE), 1,
                          jnp.where(kind == int(checkpointing.YOUTURN), 2, 0))
        (c, t, gc, gk), gx = jax.lax.switch(which, [idle, advance, turn])
        return (c, t, buffers, steps, gc, gk), gx

    init = (c0, jnp.zeros((), jnp.int32), [jnp.zeros((slots, *v.shape), v.dtype) for v in c0],
            jnp.zeros((slots,), jnp.int32),
            [_backend.as_jax((dys[k] if dys[k] is not None else zeros_like(c_out[k]))._value)
             for k in fc],
            [jnp.zeros(tuple(captures[k].shape), _backend.np_dtype(captures[k]._value.dtype))
             for k in fk])
    (_, _, _, _, gc, gk), per_row = jax.lax.scan(row, init, (kinds, args))
    order = np.empty(length, dtype=np.int64)
    order[at] = turns  # the row that reversed the step of each slice
    out = [None] * (nc + nx + len(captures))
    for i, k in enumerate(fc):
        out[k] = Tensor(gc[i])
    for i, k in enumerate(fx):
        out[nc + k] = Tensor(per_row[i][order])
    for i, k in enumerate(fk):
        out[nc + nx + k] = Tensor(gk[i])
    return out


def _describe_capture(t) -> str:
    """A captured tensor as error messages name it."""
    if isinstance(t, Variable):
        return f"Variable {t.name!r}"
    return f"tensor of shape {tuple(t.shape)}"


def _step_vjp(step, c_t, x_t, captures, floating, cotangents, where):
    """One scan step's VJP: ``step(c_t, x_t) -> (carries, ys)`` run again under a tape (a
    :class:`_Guard` on what it reads) and the ``cotangents`` of its floating carries then ys
    taken back to the floating carries, slices and captures. ``floating``: the positions
    ``(fc, fx, fy, fk)`` of the floating carries, slices, ys and captures. Returns the
    gradients in that order (zeros where unconnected)."""
    fc, fx, fy, fk = floating
    sources = [*[c_t[k] for k in fc], *[x_t[k] for k in fx], *[captures[k] for k in fk]]
    with GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(sources)
        c2, y = _guarded(lambda: step(c_t, x_t), [*c_t, *x_t], captures, where)
    return tape.gradient([*[c2[k] for k in fc], *[y[j] for j in fy]], sources,
                         output_gradients=list(cotangents), unconnected_gradients=_ZERO)


def _assigns_error(where, variable):
    """The ``ValueError`` for a body under ``checkpoints=`` that assigned ``variable``."""
    return ValueError(f"{where}: with checkpoints= the body must assign no Variable (it "
                      f"assigned {_describe_capture(variable)}): its gradient runs the steps "
                      "again. Carry the value as a loop variable instead")


def _scan_vjp(full_step, carries, xs, captures, entered, c_out, y_out, dys, length, reverse,
              where):
    """The gradients of a compiled scan's inputs (carries, xs, captures), as a reverse scan."""
    nc, nx = len(carries), len(xs)
    fc = [k for k in range(nc) if _backend.is_floating(carries[k].dtype)]
    fx = [k for k in range(nx) if _backend.is_floating(xs[k].dtype)]
    fy = [j for j, y in enumerate(y_out) if _backend.is_floating(y.dtype)]
    fk = [k for k, c in enumerate(captures) if _backend.is_floating(c.dtype)]
    ny = len(y_out)
    dc, dy, de = dys[:nc], dys[nc:nc + ny], dys[nc + ny:]
    init = [dc[k] if dc[k] is not None else zeros_like(c_out[k]) for k in fc]
    init += [zeros_like(captures[k]) for k in fk]
    seq = [*entered, *xs]
    seq += [dy[j] if dy[j] is not None else zeros_like(y_out[j]) for j in fy]
    we = [k for k in fc if de[k] is not None]  # cotangents of the carries entering each step
    seq += [de[k] for k in we]
    n_in, n_dy = len(entered), len(fy)

    def back(carry, x):
        gc, gk = carry[:len(fc)], carry[len(fc):]
        c_t, x_t = x[:n_in], x[n_in:n_in + nx]
        dy_t, de_t = x[n_in + nx:n_in + nx + n_dy], x[n_in + nx + n_dy:]
        g = _step_vjp(full_step, c_t, x_t, captures, (fc, fx, fy, fk), [*gc, *dy_t], where)
        n1, n2 = len(fc), len(fc) + len(fx)
        g_c = g[:n1]
        for k, d in zip(we, de_t):
            i = fc.index(k)
            g_c[i] = g_c[i] + d
        return [*g_c, *[a + b for a, b in zip(gk, g[n2:])]], g[n1:n2]

    final, gxs = _scan_flat(back, init, seq, length, reverse=not reverse, where=where)
    out = [None] * (nc + nx + len(captures))
    for i, k in enumerate(fc):
        out[k] = final[i]
    for i, k in enumerate(fx):
        out[nc + k] = gxs[i]
    for i, k in enumerate(fk):
        out[nc + nx + k] = final[len(fc) + i]
    return out


def _scan_jvp(full_step, carries, s_init, xs, captures, y_out, ts, length, reverse, where):
    """The tangents of a compiled scan's outputs, as a scan carrying tangents beside primals."""
    nc, nx = len(carries), len(xs)
    tc, tx, tk = ts[:nc], ts[nc:nc + nx], ts[nc + nx:]
    fc = [k for k in range(nc) if _backend.is_floating(carries[k].dtype)]
    fy = [j for j, y in enumerate(y_out) if _backend.is_floating(y.dtype)]
    wx = [k for k in range(nx) if tx[k] is not None]
    wk = [k for k in range(len(captures)) if tk[k] is not None]
    n_all = nc + len(s_init)
    init = [*carries, *s_init, *[tc[k] if tc[k] is not None else zeros_like(carries[k])
                                 for k in fc]]

    def tangent_step(carry, x):
        c, dc = carry[:n_all], carry[n_all:]
        xv, dx = x[:nx], x[nx:]
        primals = [*[c[k] for k in fc], *[xv[k] for k in wx], *[captures[k] for k in wk]]
        with ForwardAccumulator(primals, [*dc, *dx, *[tk[k] for k in wk]]) as acc:
            c2, y = full_step(c, xv)
        return ([*c2, *[acc.jvp(c2[k], _ZERO) for k in fc]],
                [*[acc.jvp(y[j], _ZERO) for j in fy], *dc])

    final, ty = _scan_flat(tangent_step, init, [*xs, *[tx[k] for k in wx]], length,
                           reverse=reverse, where=where)
    ny = len(y_out)
    out = [None] * (nc + ny + n_all)  # the carries', the ys' and the entering carries'
    for i, k in enumerate(fc):
        out[k] = final[n_all + i]
        out[nc + ny + k] = ty[len(fy) + i]
    for i, j in enumerate(fy):
        out[nc + j] = ty[i]
    return tuple(out)


# --- switch ----------------------------------------------------------------------------------
def _switch_flat(index, branches, where="tg.switch_case", names=None):
    """The compiled ``lax.switch`` of zero-argument ``branches`` (each returning a flat list of
    Tensors) on the int32 scalar Tensor ``index`` (clamped, as ``lax.switch`` does)."""
    jax = _jax()
    names = names or [f"branch {k}" for k in range(len(branches))]
    acc = _fusing_accumulator()
    fused = acc and _switch_with_jvp(acc, index, branches, where, names)
    if fused:
        founds, outs, tangents = fused
        state = s_init = []
    else:
        founds = [_discover(lambda ts: branches[0](), [])]
        first = founds[0]
        fo = [j for j, o in enumerate(first.outs) if _backend.is_floating(o[1])]
        if _records.recording_tapes() and fo and not first.assigned:
            # a tape will ask for the gradient: each other branch traced once with its VJP
            founds += [_discover_with_vjp(b, first.outs, fo) for b in branches[1:]]
        else:
            founds += [_discover(lambda ts, b=b: b(), []) for b in branches[1:]]
        _check_branches(where, names, [f.outs for f in founds])
        state = _merge(founds)[1]
    fulls = [_bound(lambda ts, b=b: b(), state) for b in branches]
    if not fused:
        n_out = len(first.outs)

        def as_jax(full, found):
            def again(s):
                outs, _ = _isolated(full, [Tensor(a) for a in s])
                return [_backend.as_jax(o._value) for o in outs]

            if found.vjp is not None:  # its gradients unused here: XLA drops them
                zeros = [jax.numpy.zeros(a.shape, a.dtype) for a in found.vjp.jaxpr.in_avals]
                return lambda: found.vjp.run(zeros, lambda: again([]))[:n_out]
            return lambda *s: found.run(list(s), lambda: again(s)) if not state else again(s)

        s_init = [v._value for v in state]
        res = jax.lax.switch(index._value,
                             [as_jax(f, found) for f, found in zip(fulls, founds)], *s_init)
        set_state(state, res[n_out:])
        outs = [Tensor(a) for a in res[:n_out]]
    if _records.trace_entries():
        captures = _differentiated(_merge(founds)[0], state)
        s_tensors = [Tensor(a) for a in s_init]

        def run(full):  # a branch with the Variables it assigns at their values before
            return lambda: full(s_tensors)[:len(outs)]

        def grad(op, *dys):
            return _switch_vjp(index, [run(f) for f in fulls], captures, outs, dys, where,
                               founds)

        def jvp(op, *ts):
            return _switch_jvp(index, [run(f) for f in fulls], captures, outs, ts, where)

        _record("Switch", [f"captured {_describe_capture(c)}" for c in captures], captures, outs,
                grad, jvp, fused=fused and (acc, tangents))
    return outs


def _check_branches(where, names, outs):
    """Raise ``TypeError`` unless every branch's outputs (``outs``: one list of ``(shape,
    dtype)`` per branch) are the first's."""
    for name, got in zip(names[1:], outs[1:]):
        if len(got) != len(outs[0]):
            raise TypeError(f"{where}: {names[0]} returns {len(outs[0])} tensor(s) but "
                            f"{name} returns {len(got)}; every branch must return the same "
                            "structure")
        for k, (a, b) in enumerate(zip(outs[0], got)):
            if a != b:
                raise TypeError(
                    f"{where}: output {k} is of {_describe(a)} from {names[0]} but of "
                    f"{_describe(b)} from {name}; every branch must return the same shapes "
                    "and dtypes (cast or reshape inside the branch)")


def _switch_with_jvp(acc, index, branches, where, names):
    """The compiled switch of ``branches`` fused with its JVP in the accumulator ``acc`` (as
    :func:`_scan_with_jvp`): each branch traced once for its outputs and their tangents.
    Returns ``(the branches' _Found, outputs, their tangents)`` (``None`` where not floating),
    or ``None`` when a branch assigns Variables (the caller switches apart)."""
    counts = {}

    def with_jvp(k):
        def run(ts):
            inner = inheriting(acc, [], [])
            with _records.trace_stack([inner, *_records.trace_entries()]):
                y = branches[k]()
            counts[k] = len(y)
            return [*y, *_fresh(inner.jvp([o for o in y if _backend.is_floating(o.dtype)],
                                          _ZERO))]
        return run

    founds = [_discover(with_jvp(k), []) for k in range(len(branches))]
    if any(f.assigned for f in founds):
        return None
    for k, f in enumerate(founds):
        f.outs = f.outs[:counts[k]]
    _check_branches(where, names, [f.outs for f in founds])

    def as_jax(k):
        def again():
            outs, _ = _isolated(with_jvp(k), [])
            return [_backend.as_jax(o._value) for o in outs]
        return lambda: founds[k].run([], again)

    res = [Tensor(a) for a in _jax().lax.switch(index._value, [as_jax(k) for k in
                                                               range(len(branches))])]
    n = counts[0]
    fo = [j for j, o in enumerate(res[:n]) if _backend.is_floating(o.dtype)]
    tangents = [None] * n
    for i, j in enumerate(fo):
        tangents[j] = res[n + i]
    return founds, res[:n], tangents


def _switch_vjp(index, branches, captures, outs, dys, where, founds):
    """The gradients of a compiled switch's captures: a switch of the branches' VJPs, each the
    one traced with its branch (:func:`_discover_with_vjp`) when no tape or accumulator
    records this computation (first order), else the branch run again under a tape (the VJP
    then is tapegrad code, differentiated in turn)."""
    fk = [k for k, c in enumerate(captures) if _backend.is_floating(c.dtype)]
    fo = [j for j, o in enumerate(outs) if _backend.is_floating(o.dtype)]
    cts = [dys[j] if dys[j] is not None else zeros_like(outs[j]) for j in fo]
    first_order = not any(t._differentiates for t in _records.trace_entries())

    def traced(found, again):
        def run():
            res = found.vjp.run([_backend.as_jax(c._value) for c in cts], lambda: None)
            if res is None:  # cotangents of other types than traced (weak types)
                return again()
            g = dict(zip([t._id for t in found.sources], res[len(outs):]))
            return [Tensor(g[captures[k]._id]) if captures[k]._id in g
                    else zeros_like(captures[k]) for k in fk]
        return run

    def again(branch):  # the branch run again under a tape: tapegrad code, differentiable
        def run():
            sources = [captures[k] for k in fk]
            with GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(sources)
                y = _guarded(branch, (), captures, where)
            return tape.gradient([y[j] for j in fo], sources, output_gradients=cts,
                                 unconnected_gradients=_ZERO)
        return run

    runs = [traced(f, again(b)) if first_order and f.vjp is not None else again(b)
            for b, f in zip(branches, founds)]
    g = _switch_flat(index, runs, where) if fk else []
    out = [None] * len(captures)
    for i, k in enumerate(fk):
        out[k] = g[i]
    return out


def _switch_jvp(index, branches, captures, outs, ts, where):
    wk = [k for k in range(len(captures)) if ts[k] is not None]
    fo = [j for j, o in enumerate(outs) if _backend.is_floating(o.dtype)]

    def tangent(branch):
        def run():
            with ForwardAccumulator([captures[k] for k in wk], [ts[k] for k in wk]) as acc:
                y = branch()
            return [acc.jvp(y[j], _ZERO) for j in fo]
        return run

    t = _switch_flat(index, [tangent(b) for b in branches], where)
    out = [None] * len(outs)
    for i, j in enumerate(fo):
        out[j] = t[i]
    return tuple(out)


# --- while -----------------------------------------------------------------------------------
# A compiled while_loop with no int maximum_iterations, differentiated in reverse mode, runs
# as with checkpoints=Online(UNBOUNDED_WHILE_SLOTS): up to this many iterations it stores
# every state (no recomputation); beyond, Online's levels recompute a few times (n = 1,000:
# at most 3 sweeps of the body). TensorFlow differentiates such loops (keeping every state).
UNBOUNDED_WHILE_SLOTS = 32


def _while_flat(cond_fn, body_fn, loop_vars, maximum_iterations, where, names, slots=None):
    """The compiled while loop of ``cond_fn(vars) -> scalar bool Tensor`` and ``body_fn(vars)
    -> vars`` on a flat list of Tensors; ``slots``: the checkpoint slots of its gradient
    (:func:`_online_store`), or ``None``."""
    specs = [_spec(v) for v in loop_vars]

    def checked_body(ts):  # body_fn checks its structure; this, the shapes and dtypes
        outs = body_fn(ts)
        for name, want, got in zip(names, specs, [_spec(o) for o in outs]):
            if want != got:
                raise _carry_changed(where, name, got, want,
                                     "; shape_invariants cannot relax this")
        return outs

    recording = any(t._differentiates and (not t._observer or getattr(t, "_transposed", False))
                    for t in _records.trace_entries())  # a tape, or JAX's transposable JVP
    if recording and slots is None and not isinstance(maximum_iterations, int):
        slots = UNBOUNDED_WHILE_SLOTS  # no fixed length: TensorFlow differentiates it anyway
    if slots is not None and recording:
        return _while_loop(cond_fn, checked_body, loop_vars, maximum_iterations, where, names,
                           slots=slots)
    if isinstance(maximum_iterations, int) and recording:  # a traced bound: no fixed length
        return _bounded_while(cond_fn, checked_body, loop_vars, maximum_iterations, where,
                              names)
    acc = _fusing_accumulator()
    return (acc and _while_loop(cond_fn, checked_body, loop_vars, maximum_iterations, where,
                                names, acc)
            or _while_loop(cond_fn, checked_body, loop_vars, maximum_iterations, where, names))


def _while_loop(cond_fn, body_fn, loop_vars, maximum_iterations, where, names, acc=None,
                slots=None):
    """The ``lax.while_loop`` of :func:`_while_flat` (``body_fn`` checks the loop variables'
    shapes), recorded; ``acc``: the accumulator to fuse it with its JVP in (as
    :func:`_scan_with_jvp`: the tangents carried beside the loop variables), in which case it
    returns ``None`` when the body assigns Variables; ``slots``: keep that many loop states
    for the gradient on :class:`~tapegrad.checkpointing.Online`'s schedule
    (:func:`_online_store`, :func:`_online_reverse`)."""
    jax = _jax()
    n = len(loop_vars)
    carried, loop_cond, loop_body = loop_vars, cond_fn, body_fn
    if acc is not None:
        fv = [k for k in range(n) if _backend.is_floating(loop_vars[k].dtype)]
        carried = [*loop_vars, *[acc.jvp(loop_vars[k], _ZERO) for k in fv]]

        def primal_cond(ts):
            return cond_fn(ts[:n])

        def with_jvp(ts):
            vs, dv = ts[:n], ts[n:]
            inner = inheriting(acc, [vs[k] for k in fv], dv)
            with _records.trace_stack([inner, *_records.trace_entries()]):
                new = body_fn(vs)
            return [*new, *_fresh(inner.jvp([new[k] for k in fv], _ZERO))]

        loop_cond, loop_body = primal_cond, with_jvp

    specs = [_spec(v) for v in carried]
    found_c = _discover(lambda ts: [loop_cond(ts)], specs)  # cond_fn checks its predicate
    found_b = _discover(loop_body, specs)
    captures, state = _merge([found_c, found_b])
    if acc is not None and state:
        return None
    if slots is not None and state:
        raise _assigns_error(where, state[0])
    captures = _differentiated(captures, state)
    ns, nv = len(state), len(carried)
    extra = ns + nv + int(bound := maximum_iterations is not None)  # where slots' state starts
    body = _bound(loop_body, state)
    cond = _bound(lambda ts: [loop_cond(ts)], state)  # it reads what the body assigned

    def cond_again(c):
        return [_isolated(cond, [Tensor(a) for a in c])[0][0]._value]

    def body_again(c):
        outs, _ = _isolated(body, [Tensor(a) for a in c])
        return [_backend.as_jax(o._value) for o in outs]

    def jcond(c):
        vs = c[:ns + nv]
        ok = (found_c.run(vs, lambda: cond_again(vs)) if not state else cond_again(vs))[0]
        return jax.numpy.logical_and(ok, c[ns + nv] < maximum_iterations) if bound else ok

    def jbody(c):
        vs = c[:ns + nv]
        new = found_b.run(vs, lambda: body_again(vs)) if not state else body_again(vs)
        return [*new[nv:], *new[:nv], *([c[ns + nv] + 1] if bound else []),
                *(_online_store(*c[extra:extra + 3], c[extra + 3:], vs) if slots else [])]

    init = [*[v._value for v in state], *[_backend.as_jax(v._value) for v in carried],
            *([0] if bound else [])]
    if slots:
        init += _online_init(init[ns:ns + nv], slots)
    s_init = [Tensor(a) for a in init[:ns]]
    final = jax.lax.while_loop(jcond, jbody, init)
    set_state(state, final[:ns])
    outs = [Tensor(a) for a in final[ns:ns + nv]]
    kept = final[extra:]  # with slots: the trip count, the slots' steps, levels and states
    fused = None
    if acc is not None:
        tangents = [None] * n
        for i, k in enumerate(fv):
            tangents[k] = outs[n + i]
        outs, fused = outs[:n], (acc, tangents)
    if _records.trace_entries():
        def grad(op, *dys):
            if slots:
                return _while_vjp_online(found_b, body, body_again, loop_vars, captures,
                                         outs, kept, dys, where)
            given = ("maximum_iterations is a traced Tensor (computed from the function's "
                     "arguments), so the trip count is unknown when tracing: pass an int or a "
                     "Tensor made inside the function (it then runs as a scan of that length)"
                     if bound else "pass maximum_iterations (it then runs as a scan of that "
                     "length)")
            raise ValueError(
                f"{where}: reverse-mode differentiation of a compiled while_loop needs a bound "
                f"on its iterations known when it is traced: {given}, or use tg.lax.scan / "
                "tg.lax.fori_loop with a fixed trip count, or pass checkpoints=s. Forward mode (tg.jvp, "
                "ForwardAccumulator) works without it")

        def jvp(op, *ts):
            return _while_jvp(cond_fn, body_fn, state, s_init, loop_vars, captures, ts,
                              maximum_iterations, where, names)

        _record("While", [*names, *[f"captured {_describe_capture(c)}" for c in captures]],
                [*loop_vars, *captures], outs, grad, jvp, fused=fused)
    return outs


def _online_init(values, slots):
    """The initial state of :func:`_online_store` for the loop variables ``values`` (JAX
    arrays) and ``slots`` slots: step 0, ``x_0`` in slot 0 (at the top level, never
    replaced), the other slots free (step -1)."""
    jnp = _jax().numpy
    times = jnp.full((slots,), -1, jnp.int32).at[0].set(0)
    levels = jnp.zeros((slots,), jnp.int32).at[0].set(checkpointing.TOP_LEVEL)
    return [jnp.zeros((), jnp.int32), times, levels,
            *[jnp.zeros((slots, *v.shape), v.dtype).at[0].set(v) for v in values]]


def _online_store(t, times, levels, buffers, values):
    """One step of :class:`~tapegrad.checkpointing.Online`'s forward sweep in JAX: store the
    state ``values`` entering step ``t`` (0-d int32) in the slot that
    :func:`tapegrad.checkpointing.online_slot` picks (none for ``t = 0``, already in slot 0,
    or with one slot). ``times``, ``levels``: ``(s,)`` int32; ``buffers``: one ``(s, ...)``
    array per loop variable. Returns ``[t + 1, times, levels, *buffers]``, updated."""
    jnp = _jax().numpy
    slots = times.shape[0]
    later = jnp.arange(slots) > 0
    free = times < 0
    dispensable = later & jnp.any((times[None, :] > times[:, None])
                                  & (levels[None, :] > levels[:, None]), axis=1)
    latest = jnp.argmax(jnp.where(later, times, -1))
    k = jnp.where(jnp.any(free), jnp.argmax(free),
                  jnp.where(jnp.any(dispensable),
                            jnp.argmax(jnp.where(dispensable, times, -1)), latest))
    level = jnp.where(jnp.any(free) | jnp.any(dispensable), 0, levels[latest] + 1)
    store = (t > 0) & (slots > 1)
    times = times.at[k].set(jnp.where(store, t, times[k]))
    levels = levels.at[k].set(jnp.where(store, level, levels[k]))
    return [t + 1, times, levels,
            *[b.at[k].set(jnp.where(store, v, b[k])) for b, v in zip(buffers, values)]]


def _next_store(base, target, slots, occupied):
    """:func:`tapegrad.checkpointing.next_store` in JAX on 0-d int32 values (``slots`` an
    int); -1 for none."""
    jax = _jax()
    jnp = jax.numpy
    length = (target - base + 1).astype(jnp.int32)
    c = jnp.maximum(jnp.minimum(slots - occupied + 1, length - 1), 1).astype(jnp.int32)

    def more(r_prev_beta):
        r, prev, beta = r_prev_beta
        return r + 1, beta, beta * (c + r + 1) // (r + 1)

    # the repetition number r of (length, c) and C(c + r - 1, c): Revolve's split, _split
    r, prev, _ = jax.lax.while_loop(lambda st: st[2] < length, more,
                                    (jnp.int32(1), jnp.int32(1), c + 1))
    m = jnp.minimum(prev, length - prev * c // (c + r - 1))
    return jnp.where((length >= 2) & (length - m >= 2), base + m, -1)


def _online_reverse(advance, turn, trips, times, buffers, cotangents):
    """The reversal of :class:`~tapegrad.checkpointing.Online`'s plan in one JAX while loop:
    from the slots the forward sweep left (``times``: ``(s,)`` int32, -1 free; ``buffers``:
    a ``(s, ...)`` array per loop variable) and ``trips`` (0-d int32, the steps taken), each
    iteration either reverses the step of the current state (``turn(state, cotangents) ->
    cotangents``; then frees the slots of later states and restores the latest) or advances
    it (``advance(state) -> state``), storing it where :func:`_next_store` says. Returns
    ``(cotangents, advances)``: the cotangents after reversing steps ``trips - 1 .. 0`` and
    the number of ``advance`` calls (:meth:`~tapegrad.checkpointing.Online.forward_steps`
    minus the sweep's ``trips - 1``)."""
    jax = _jax()
    jnp = jax.numpy
    slots = times.shape[0]

    def restored(target, times, buffers):
        times = jnp.where(times > target, -1, times)
        k = jnp.argmax(times)
        return ([b[k] for b in buffers], times[k], times,
                _next_store(times[k], target, slots, jnp.sum(times >= 0)))

    def body(st):
        state, t, target, store, times, buffers, g, count = st
        turning = t == target
        state, g = jax.lax.cond(turning, lambda: (state, turn(state, g)),
                                lambda: (advance(state), g))
        t = jnp.where(turning, t, t + 1)
        storing = ~turning & (t == store)
        k = jnp.argmin(times >= 0)
        times = times.at[k].set(jnp.where(storing, t, times[k]))
        buffers = [b.at[k].set(jnp.where(storing, v, b[k])) for b, v in zip(buffers, state)]
        target = jnp.where(turning, target - 1, target)
        back, t_back, times_back, store_back = restored(target, times, buffers)
        after = _next_store(t, target, slots, jnp.sum(times >= 0))
        return ([jnp.where(turning, b, v) for b, v in zip(back, state)],
                jnp.where(turning, t_back, t), target,
                jnp.where(turning, store_back, jnp.where(storing, after, store)),
                jnp.where(turning, times_back, times), buffers, g,
                count + (~turning).astype(jnp.int32))

    target = trips - 1
    state, t, times, store = restored(target, times, buffers)
    st = jax.lax.while_loop(lambda st: st[2] >= 0, body,
                            (state, t, target, store, times, buffers, cotangents,
                             jnp.zeros((), jnp.int32)))
    return st[6], st[7]


def _run_found(found, fn, arrays):
    """``found.run`` on ``arrays`` (JAX values), tracing ``fn`` (flat Tensors -> flat Tensors)
    again when the trace cannot be evaluated."""
    return found.run(arrays, lambda: [_backend.as_jax(o._value) for o in _isolated(
        fn, [Tensor(a) for a in arrays])[0]])


def _while_vjp_online(found, body, again, loop_vars, captures, outs, kept, dys, where):
    """The gradients of a compiled while loop run with checkpoint slots (``kept``: the trip
    count, the slots' steps and levels, and the states they hold): :func:`_online_reverse`
    with the body's trace (``found``; ``again(arrays)`` traces it anew) to advance and the
    VJP of ``body`` (flat Tensors -> flat Tensors), traced once, to turn. First order only: raises ``ValueError`` when a tape or
    accumulator records this gradient."""
    if any(t._differentiates for t in _records.trace_entries()):
        raise ValueError(
            f"{where}: a compiled while_loop without an int maximum_iterations is "
            "checkpointed (checkpoints=s, by default UNBOUNDED_WHILE_SLOTS) and has "
            "first-order reverse mode only (its gradient is not recorded); for a Hessian or "
            "an HVP pass maximum_iterations (a scan of that length), or use "
            "tg.lax.scan(..., checkpoints=s) with a known trip count")
    n = len(loop_vars)
    fc = [k for k in range(n) if _backend.is_floating(loop_vars[k].dtype)]
    fk = [k for k in range(len(captures)) if _backend.is_floating(captures[k].dtype)]
    specs = [_spec(v) for v in loop_vars]

    def back(ts):  # (loop variables, cotangents of the floating ones) -> gradients
        return _step_vjp(lambda c, x: (body(c), []), ts[:n], [], captures,
                         (fc, [], [], fk), ts[n:], where)

    back_found = _discover(back, [*specs, *[specs[k] for k in fc]])
    trips, times, _, *buffers = kept

    def turn(state, g):
        got = _run_found(back_found, back, [*state, *g[0]])
        return got[:len(fc)], [a + b for a, b in zip(g[1], got[len(fc):])]

    def advance(state):
        return found.run(list(state), lambda: again(list(state)))

    gc = [_backend.as_jax((dys[k] if dys[k] is not None else zeros_like(outs[k]))._value)
          for k in fc]
    gk = [_backend.as_jax(zeros_like(captures[k])._value) for k in fk]
    (gc, gk), _ = _online_reverse(advance, turn, trips, times, buffers, (gc, gk))
    out = [None] * (n + len(captures))
    for i, k in enumerate(fc):
        out[k] = Tensor(gc[i])
    for i, k in enumerate(fk):
        out[n + k] = Tensor(gk[i])
    return out


def _bounded_while(cond_fn, body_fn, loop_vars, maximum_iterations, where, names):
    """A while loop as a scan of ``maximum_iterations`` steps, each a switch between doing
    nothing and the body: reverse-differentiable like any scan. In a ``jax.custom_jvp`` rule
    (``tg.vmap``'s, ``tg.to_jax``'s), whose JVP JAX may batch and transpose, the switch is a
    selection (as :func:`_select`: JAX's batched switch masks tangents with ``stop_gradient``,
    which it cannot transpose)."""
    n = len(loop_vars)
    transposed = any(getattr(t, "_transposed", False) for t in _records.trace_entries())

    def step(c, x):
        vs, active = c[:n], c[n]
        go = logical_and(active, cond_fn(vs))
        if transposed:
            new = _select_flat([go, logical_not(go)], [lambda: body_fn(vs), lambda: vs], where)
        else:
            new = _switch_flat(astype(go, np.int32), [lambda: vs, lambda: body_fn(vs)], where,
                               ["the exit", "body"])
        return [*new, go], []

    final, _ = _scan_flat(step, [*loop_vars, convert_to_tensor(True)], [],
                          int(maximum_iterations), where=where, names=[*names, "active"])
    return final[:n]


def _while_jvp(cond_fn, body_fn, state, s_init, loop_vars, captures, ts, maximum_iterations,
               where, names):
    """The tangents of a compiled while loop's outputs: the loop again, carrying tangents."""
    n = len(loop_vars)
    fv = [k for k in range(n) if _backend.is_floating(loop_vars[k].dtype)]
    wk = [k for k in range(len(captures)) if ts[n + k] is not None]
    tv = [ts[k] if ts[k] is not None else zeros_like(loop_vars[k]) for k in fv]

    def body2(c):
        vs, dv = c[:n], c[n:]
        with ForwardAccumulator([*[vs[k] for k in fv], *[captures[k] for k in wk]],
                                [*dv, *[ts[n + k] for k in wk]]) as acc:
            new = body_fn(vs)
        return [*new, *[acc.jvp(new[k], _ZERO) for k in fv]]

    # the loop again from the Variables' values before it, in this thread only
    with bind_tensors([(v, s._value) for v, s in zip(state, s_init)]):
        final = _while_flat(lambda c: cond_fn(c[:n]), body2, [*loop_vars, *tv],
                            maximum_iterations, where,
                            [*names, *[f"tangent of {names[k]}" for k in fv]])
    out = [None] * n
    for i, k in enumerate(fv):
        out[k] = final[n + i]
    return tuple(out)


# --- the public constructs -------------------------------------------------------------------
def _predicate(pred, where):
    """``pred`` as a scalar boolean Tensor; ``TypeError`` otherwise."""
    p = convert_to_tensor(pred)
    if tuple(p.shape) != () or _backend.np_dtype(p._value.dtype) != np.dtype(bool):
        raise TypeError(f"{where}: the predicate must be a scalar boolean (a Python bool or a "
                        f"0-d bool Tensor), got one of {_describe(_spec(p))}; reduce it with "
                        "tg.all/tg.any or compare it to get a scalar bool")
    return p


def _flat_outputs(fn, args, structures, slot):
    """``fn(*args)`` flattened to Tensors; its structure is stored in ``structures[slot]``."""
    leaves, structure = tree_flatten(fn(*args))
    structures[slot] = structure
    return [convert_to_tensor(x) for x in leaves]


def _check_callables(where, fns, names):
    for name, b in zip(names, fns):
        if not callable(b):
            raise TypeError(f"{where}: {name} must be a function, got {type(b).__name__}")


def _switch(where, index, branches, operands, names):
    """``branches[index](*operands)``: eagerly in Python, compiled as ``lax.switch``
    (the branches are checked to be callable by the caller)."""
    if not _compiled([index, *tree_flatten(operands)[0]]):
        return branches[int(index)](*operands)
    if type(_raw(index)).__name__ == "BatchTracer":  # a different branch per example
        return _select(where, index, branches, operands, names)
    structures = {}
    fns = [lambda k=k, b=b: _flat_outputs(b, operands, structures, k)
           for k, b in enumerate(branches)]
    outs = _switch_flat(index, fns, where, names)
    first = structures[0]
    for k, name in enumerate(names[1:], 1):
        if structures[k] != first:
            raise TypeError(f"{where}: {names[0]} returns {show(first)} but {name} returns "
                            f"{show(structures[k])}; every branch must return the same "
                            "structure")
    return tree_unflatten(first, outs)


def _select(where, index, branches, operands, names):
    """``branches[index](*operands)`` for an index batched by ``jax.vmap`` (``tg.vmap``): every
    branch runs and each example takes its own branch's result with ``tg.where`` (an index
    below 0 takes the first, one past the end the last, as ``lax.switch`` clamps), as JAX's
    batching of ``lax.switch`` does. Written with tapegrad ops rather than left to JAX, whose
    batched switch masks the unselected operands with ``stop_gradient``, which JAX cannot
    transpose when the operands are tapegrad's tangents (reverse mode through ``tg.vmap``).

    Recorded as one op (``Select``, :func:`_select_flat`) of the tensors the branches read or
    return that were made before (captures), whose gradient is the selection of the branches'
    gradients and whose JVP the selection of their JVPs (selections again, to any order), as
    JAX's ``switch`` VJP is a ``switch`` of VJPs: each example gets its own branch's
    derivatives only, so a branch singular at an example that does not take it (``sqrt``,
    ``log`` of a negative) gives it an exact zero, as JAX's batched ``cond`` does, where a
    plain ``tg.where`` of the branches would give NaN (``0 * nan``)."""
    n = len(branches)
    takes = [(index <= 0) if k == 0 else (index >= n - 1) if k == n - 1 else (index == k)
             for k in range(n)]
    structures = {}

    def flat(k, b):
        def run():
            leaves, structures[k] = tree_flatten(b(*operands))
            return [convert_to_tensor(x) for x in leaves]
        return run

    def check():
        for k, name in enumerate(names[1:], 1):
            if structures[k] != structures[0]:
                raise TypeError(f"{where}: {names[0]} returns {show(structures[0])} but "
                                f"{name} returns {show(structures[k])}; every branch must "
                                "return the same structure")

    outs = _select_flat(takes, [flat(k, b) for k, b in enumerate(branches)], where, check)
    return tree_unflatten(structures[0], outs)


def _select_flat(takes, runs, where="tg.cond", check=None):
    """Per output, each example's value from the run (a function of no argument returning a
    flat list of Tensors) whose ``takes`` entry (a batched bool) holds; every run runs, with
    the tapes paused (then ``check()``, if given, before the selection), and the selection is
    recorded as one op (``Select``) of the runs' captures whose gradient and JVP are
    selections of the runs' gradients and JVPs."""
    observer = _Captures()
    with _records.trace_stack([observer]):  # the tapes see one op, recorded below
        columns = [run() for run in runs]
        if check is not None:
            check()
        outs = _selected(takes, columns)
    for t in (t for column in columns for t in column):  # a tensor returned as it is
        if t._id < observer.first:
            observer.found.setdefault(t._id, t)
    captures = list(observer.found.values())

    def grad(op, *dys):
        return _select_vjp(takes, runs, captures, outs, dys, where)

    def jvp(op, *ts):
        return _select_jvp(takes, runs, captures, outs, ts, where)

    _record("Select", [f"captured {_describe_capture(c)}" for c in captures], captures, outs,
            grad, jvp)
    return outs


def _selected(takes, columns):
    """Per output, each example's value from the column whose ``takes`` entry holds."""
    out = columns[-1]
    for take, column in zip(takes[-2::-1], columns[-2::-1]):
        out = [_where(take, a, o) for a, o in zip(column, out)]
    return out


def _masked(take, t):
    """``t`` where ``take`` holds, else zeros: the derivatives entering a branch, so that
    those of the examples that do not take it are zeros (and JAX's transpose of a selection
    stays finite through that branch)."""
    return _where(take, t, zeros_like(t))


def _select_vjp(takes, runs, captures, outs, dys, where):
    fk = [k for k, c in enumerate(captures) if _backend.is_floating(c.dtype)]
    fo = [j for j, o in enumerate(outs) if _backend.is_floating(o.dtype)]
    out = [None] * len(captures)
    if not fk or not fo:
        return out
    sources = [captures[k] for k in fk]
    cts = [dys[j] if dys[j] is not None else zeros_like(outs[j]) for j in fo]

    def back(take, run):
        def gradient():
            with GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(sources)
                y = _guarded(run, (), captures, where)
            return tape.gradient([y[j] for j in fo], sources,
                                 output_gradients=[_masked(take, c) for c in cts],
                                 unconnected_gradients=_ZERO)
        return gradient

    backs = [back(take, run) for take, run in zip(takes, runs)]
    for k, g in zip(fk, _select_flat(takes, backs, where)):
        out[k] = g
    return out


def _select_jvp(takes, runs, captures, outs, ts, where):
    wk = [k for k in range(len(captures)) if ts[k] is not None]
    fo = [j for j, o in enumerate(outs) if _backend.is_floating(o.dtype)]

    def tangent(take, run):
        def jvp():
            with ForwardAccumulator([captures[k] for k in wk],
                                    [_masked(take, ts[k]) for k in wk]) as acc:
                y = run()
            return [acc.jvp(y[j], _ZERO) for j in fo]
        return jvp

    tangents = [tangent(take, run) for take, run in zip(takes, runs)]
    out = [None] * len(outs)
    for j, t in zip(fo, _select_flat(takes, tangents, where)):
        out[j] = t
    return tuple(out)


def cond(pred, true_fn=None, false_fn=None, name=None):
    """``true_fn()`` if ``pred`` else ``false_fn()`` (TensorFlow 2's ``tf.cond``).

    Args:
        pred: a Python bool or a 0-d boolean Tensor.
        true_fn, false_fn: functions of no argument returning Tensors (nested in tuples, lists
            and dicts); inside ``tg.function`` both must return the same structure, shapes and
            dtypes.
        name: accepted for TensorFlow compatibility.

    Eagerly only the branch taken runs; inside ``tg.function`` both are traced into one
    ``lax.cond``. Differentiable in both modes with respect to the tensors the branches use
    (the gradient of the taken branch; ``pred`` has none). Raises ``TypeError`` for a predicate
    that is not a scalar bool, a branch that is not callable, and (compiled) branches whose
    results differ in structure, shape or dtype, naming both.
    """
    where = "tg.cond"
    p = _predicate(pred, where)
    _check_callables(where, [true_fn, false_fn], ["true_fn", "false_fn"])
    if isinstance(pred, (bool, np.bool_)) or not _compiled([p]):
        return (true_fn if bool(p) else false_fn)()
    return _switch(where, astype(p, np.int32), [false_fn, true_fn], (), ["false_fn", "true_fn"])


def switch_case(branch_index, branch_fns, default=None, name=None):
    """``branch_fns[branch_index]()`` (TensorFlow 2's ``tf.switch_case``).

    Args:
        branch_index: a Python int or a 0-d integer Tensor.
        branch_fns: a list of functions of no argument, or a dict ``{int: function}`` or a list
            of ``(int, function)`` pairs; each returns Tensors (nested), all of the same
            structure, shapes and dtypes when compiled.
        default: the function for an index out of range; without it the last branch runs (as
            in TensorFlow).

    Differentiable as :func:`cond`. Raises ``TypeError`` for a non-integer or non-scalar
    index, non-callable branches, branch keys that are not ``0..n-1``, and (compiled) results
    that differ between branches.
    """
    where = "tg.switch_case"
    fns = branch_fns
    if isinstance(fns, dict):
        fns = sorted(fns.items())
    fns = list(fns)
    if fns and isinstance(fns[0], tuple):
        keys = [k for k, _ in fns]
        if keys != list(range(len(keys))):
            raise TypeError(f"{where}: branch keys must be 0, 1, ..., n-1, got {keys}")
        fns = [f for _, f in fns]
    if not fns:
        raise ValueError(f"{where}: branch_fns is empty; give at least one branch")
    i = convert_to_tensor(branch_index)
    if tuple(i.shape) != () or _backend.np_dtype(i._value.dtype).kind not in "iu":
        raise TypeError(f"{where}: branch_index must be a scalar integer, got one of "
                        f"{_describe(_spec(i))}")
    names = [f"branch_fns[{k}]" for k in range(len(fns))]
    if default is not None:
        fns, names = [*fns, default], [*names, "default"]
    _check_callables(where, fns, names)
    if not _compiled([i]):
        k = int(i)
        return fns[k if 0 <= k < len(fns) else -1]()
    n = len(fns) - 1
    index = astype(i, np.int32)
    index = _where((index < 0) | (index > n), n, index)
    return _switch(where, index, fns, (), names)


def _check_vars(where, structure, new_structure, what="body"):
    if new_structure != structure:
        raise TypeError(f"{where}: the {what} returned {show(new_structure)} but the loop "
                        f"variables have the structure {show(structure)}; return the same "
                        "structure")


def _while(where, cond_fn, body_fn, init, maximum_iterations, prefix, checkpoints=None):
    """The while loop of ``cond_fn(v)`` and ``body_fn(v) -> v`` on the pytree ``init``;
    ``checkpoints``: see :func:`while_loop`."""
    slots = _while_slots(where, checkpoints)
    leaves, structure = tree_flatten(init)
    leaves = [convert_to_tensor(x) for x in leaves]
    maximum_iterations = _trip_bound(where, maximum_iterations)
    names = _paths(structure, prefix)

    def flat_cond(ts):
        return _predicate(cond_fn(tree_unflatten(structure, ts)), f"{where}: cond")

    def flat_body(ts):
        new_leaves, new_structure = tree_flatten(body_fn(tree_unflatten(structure, ts)))
        _check_vars(where, structure, new_structure)
        return [_cast_like(x, t) for x, t in zip(new_leaves, ts)]

    if _compiled(leaves):
        outs = _while_flat(flat_cond, flat_body, leaves, maximum_iterations, where, names,
                           slots)
        return tree_unflatten(structure, outs)
    trips = [0]

    def run(cs):  # the eager loop: (final loop variables, no ys); counts its trips
        k = 0
        while (maximum_iterations is None or k < maximum_iterations) and bool(flat_cond(cs)):
            new = flat_body(cs)
            for name, a, b in zip(names, cs, new):  # as compiled (_while_flat)
                if _spec(a) != _spec(b):
                    raise _carry_changed(where, name, _spec(b), _spec(a),
                                         "; shape_invariants cannot relax this")
            cs, k = new, k + 1
        trips[0] = k
        return cs, []

    if slots is None or not _records.trace_entries():
        return tree_unflatten(structure, run(leaves)[0])
    outs, _ = _scan_checkpointed(where, run, lambda cs, x: (flat_body(cs), []), leaves, [],
                                 lambda: trips[0], False, checkpointing.Revolve(slots), names)
    return tree_unflatten(structure, outs)


def _while_slots(where, checkpoints):
    """The checkpoint slots a while loop's ``checkpoints`` names: ``None`` (or
    ``EveryStep()``) for none, an int ``s`` or a ``Revolve(s)`` / ``Online(s)`` for ``s``.
    Raises TypeError for another value or schedule (a while loop's trip count is known only
    when it ends, so a schedule must work from its slot count)."""
    if checkpoints is None or isinstance(checkpoints, checkpointing.EveryStep):
        return None
    if isinstance(checkpoints, (checkpointing.Revolve, checkpointing.Online)):
        return checkpoints.s
    if isinstance(checkpoints, (int, np.integer)) and not isinstance(checkpoints, bool):
        return checkpointing.Online(int(checkpoints)).s  # checks s >= 1
    raise TypeError(f"{where}: checkpoints must be None, an int (the loop states to store), "
                    "tg.checkpointing.Online(s) or Revolve(s) (a while loop's trip count is "
                    f"known only when it ends), got {type(checkpoints).__name__} "
                    f"{checkpoints!r}")


def _trip_bound(where, bound):
    """``maximum_iterations`` as an int (None stays None), or as the JAX scalar of a 0-d
    integer Tensor traced inside ``tg.function`` (a dynamic bound, compared in the loop).
    Raises ``TypeError`` for a Tensor that is not a 0-d integer, ``ValueError`` for a negative
    bound."""
    if bound is None:
        return None
    if isinstance(bound, Tensor) or hasattr(bound, "dtype"):  # a Tensor or a backend array
        t = convert_to_tensor(bound)
        if t.ndim != 0 or _backend.np_dtype(t._value.dtype).kind not in "iu":
            raise TypeError(f"{where}: maximum_iterations must be an int or a 0-d integer "
                            f"Tensor, got one of {_describe(_spec(t))}; cast it with "
                            "tg.astype(n, tg.int32) or reduce it to a scalar")
        jax = config.loaded_jax()
        if jax is not None and isinstance(t._value, jax.core.Tracer):
            return t._value
        bound = t._value
    bound = int(bound)
    if bound < 0:
        raise ValueError(f"{where}: maximum_iterations must be >= 0, got {bound}")
    return bound


def _cast_like(x, like):
    """A body's result ``x`` as a Tensor; a Python number takes the loop variable's dtype."""
    if isinstance(x, Tensor):
        return x
    return convert_to_tensor(x, dtype=like.dtype)


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, swap_memory=False, maximum_iterations=None, name=None,
               checkpoints=None):
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` (``tf.while_loop``).

    Args:
        cond: a function of the loop variables returning a Python bool or a 0-d bool Tensor.
        body: a function of the loop variables returning them updated, in the same structure
            (a tuple or list of them; a single Tensor is returned as it is when ``loop_vars``
            holds one), each with the same shape and dtype.
        loop_vars: a tuple or list of Tensors or nested structures of them.
        shape_invariants: accepted for TensorFlow compatibility; shapes may not change.
        maximum_iterations: stop after this many iterations: an int or a 0-d integer Tensor
            (TensorFlow's). In reverse mode through a compiled loop an int bound makes the
            loop a scan of that length (every state kept, any order); without one, or with
            a traced bound, the loop runs as with ``checkpoints=UNBOUNDED_WHILE_SLOTS`` (32,
            below), first order only.
        parallel_iterations, back_prop, swap_memory, name: accepted for compatibility.
        checkpoints: how reverse mode gets the state entering each iteration. ``None`` (or
            ``tg.checkpointing.EveryStep()``): eagerly the tape records every iteration;
            compiled, with an int ``maximum_iterations``, one state per iteration of that
            bound, and without one as ``checkpoints=32``. An int ``s`` (or ``tg.checkpointing.Online(s)`` / ``Revolve(s)``):
            at most ``s`` loop states are stored, with no bound needed. Compiled, the loop
            stores them on :class:`tapegrad.checkpointing.Online`'s schedule (Wang, Moin &
            Iaccarino 2009's dynamic allocation, in a fixed buffer of ``s`` slots, while it
            runs; its docstring gives the proven optimality range and the measured cost) and
            its gradient replays the rest in one XLA loop, the body traced twice (forward
            and VJP); first order only (a Hessian needs ``maximum_iterations``). Eagerly,
            the trip count ``n`` is known when the loop ends, so the gradient replays it on
            the offline optimum ``Revolve(s)``: ``n + forward_steps(n, s) + n`` body
            evaluations. The body must assign no Variable.

    Returns the final loop variables, in ``loop_vars``' structure. Eagerly it is a Python loop
    (tapes record every iteration); inside ``tg.function`` one ``lax.while_loop``, or, under a
    recording tape with ``maximum_iterations`` and no ``checkpoints``, a scan of that length.
    Raises ``TypeError`` for a non-scalar or non-bool ``cond`` result, for a body whose
    results change structure, shape or dtype (naming the loop variable and both shapes), and
    for a ``checkpoints`` of another type; ``ValueError`` for a body that assigns a Variable
    under ``checkpoints`` (or compiled under a recording tape with no int
    ``maximum_iterations``); a compiled second-order gradient of a loop without an int
    ``maximum_iterations`` raises ``ValueError`` at gradient time.
    """
    single = not isinstance(loop_vars, (list, tuple))
    init = (loop_vars,) if single else tuple(loop_vars)

    def body_fn(v):
        out = body(*v)
        if single or (len(v) == 1 and not isinstance(out, (list, tuple))):
            out = (out,)
        return tuple(out)

    out = _while("tg.while_loop", lambda v: cond(*v), body_fn, init, maximum_iterations,
                 "loop_vars", checkpoints)
    return out[0] if single else type(loop_vars)(out)


def _scan(where, f, init, xs, length, reverse, unroll, checkpoints=None):
    """JAX's scan: ``(carry, ys)`` of ``f(carry, x) -> (carry, y)`` over the leading axis of
    the pytree ``xs``; ``checkpoints``: see :func:`tapegrad.lax.scan`."""
    schedule = _schedule(where, checkpoints)
    c_leaves, c_structure = tree_flatten(init)
    c_leaves = [convert_to_tensor(x) for x in c_leaves]
    x_leaves, x_structure = tree_flatten(xs)
    x_leaves = [convert_to_tensor(x) for x in x_leaves]
    x_names = _paths(x_structure, "xs")
    for name, x in zip(x_names, x_leaves):
        if x.ndim == 0:
            raise ValueError(f"{where}: {name} is a scalar; scanned arrays need a leading axis "
                             "to scan over")
    lengths = {int(x.shape[0]) for x in x_leaves}
    if length is not None:
        lengths.add(int(length))
    if len(lengths) > 1:
        sizes = ", ".join(f"{n} {int(x.shape[0])}" for n, x in zip(x_names, x_leaves))
        given = f" and length={length}" if length is not None else ""
        raise ValueError(f"{where}: the scanned arrays have different leading sizes ({sizes})"
                         f"{given}; they must all have the same")
    if not lengths:
        raise ValueError(f"{where}: give xs or length; there is nothing to scan over")
    n = lengths.pop()
    c_names = _paths(c_structure, "carry")
    y_structure = {}

    def flat_step(cs, x):
        out = f(tree_unflatten(c_structure, cs), tree_unflatten(x_structure, x))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"{where}: the body {describe_fn(f)} must return a pair "
                            f"(carry, y); it returned {type(out).__name__}")
        new_c, y = out
        new_leaves, new_structure = tree_flatten(new_c)
        _check_vars(where, c_structure, new_structure, "body's carry")
        y_leaves, y_structure["s"] = tree_flatten(y)
        return ([_cast_like(a, t) for a, t in zip(new_leaves, cs)],
                [convert_to_tensor(a) for a in y_leaves])

    if _compiled([*c_leaves, *x_leaves]):
        c_out, ys = _scan_flat(flat_step, c_leaves, x_leaves, n, reverse, unroll, where,
                               c_names, schedule)
        return tree_unflatten(c_structure, c_out), tree_unflatten(y_structure["s"], ys)

    def run(cs):  # the eager loop: (final carries, stacked ys)
        per_step = [None] * n
        for i in (range(n - 1, -1, -1) if reverse else range(n)):
            new, y = flat_step(cs, [x[i] for x in x_leaves])
            for name, a, b in zip(c_names, cs, new):
                if _spec(a) != _spec(b):
                    raise _carry_changed(where, name, _spec(b), _spec(a))
            cs, per_step[i] = new, y
        if n == 0:  # the ys' shapes from one call, whose results are dropped
            _, y = flat_step(cs, [zeros(tuple(x.shape[1:]), dtype=x.dtype) for x in x_leaves])
            return cs, [zeros((0, *t.shape), dtype=t.dtype) for t in y]
        return cs, [stack([s[k] for s in per_step]) for k in range(len(per_step[0]))]

    if schedule is None or n == 0 or not _records.trace_entries():
        cs, ys = run(c_leaves)
    else:
        cs, ys = _scan_checkpointed(where, run, flat_step, c_leaves, x_leaves, n, reverse,
                                    schedule, c_names)
    return tree_unflatten(c_structure, cs), tree_unflatten(y_structure["s"], ys)


def _schedule(where, checkpoints):
    """The :class:`~tapegrad.checkpointing.Schedule` that ``checkpoints`` names (an int: that
    many slots of :class:`~tapegrad.checkpointing.Revolve`), or ``None`` for one carry per
    step (``None`` or ``EveryStep()``)."""
    if checkpoints is None or isinstance(checkpoints, checkpointing.EveryStep):
        return None
    if isinstance(checkpoints, checkpointing.Schedule):
        return checkpoints
    if isinstance(checkpoints, (int, np.integer)) and not isinstance(checkpoints, bool):
        return checkpointing.Revolve(int(checkpoints))
    raise TypeError(f"{where}: checkpoints must be None, an int (the carries to store) or a "
                    f"tg.checkpointing schedule (Revolve(s), EveryStep()), got "
                    f"{type(checkpoints).__name__} {checkpoints!r}")


def _scan_checkpointed(where, run, flat_step, carries, xs, n, reverse, schedule, names):
    """An eager scan recorded as one ``Scan`` op whose gradient replays the steps on
    ``schedule``: the forward ``run(carries)`` records nothing and keeps only the outputs
    (``n``: the steps, or a function giving them once ``run`` has run: a while loop's);
    the gradient interprets ``schedule.plan(n)`` (:mod:`tapegrad.checkpointing`), holding at
    most its slots' carries and recording one step at a time, under a tape, for each
    ``YOUTURN``. So the step runs ``n`` times forward and ``p(n, s) + n`` times for the
    gradient (``checkpointing.forward_steps``), with the memory of ``s`` carries and one step."""
    observer = _Captures()
    live = visible_variables()
    before = [v._value for v in live]
    with _records.trace_stack([observer]):
        c_out, ys = run(carries)
    c_out, ys = _fresh(c_out), _fresh(ys)  # an output that is an input or capture as it is
    n = n() if callable(n) else n
    assigned = [v for v, b in zip(live, before) if v._value is not b]
    if assigned:
        raise _assigns_error(where, assigned[0])
    mine = {t._id for t in (*carries, *xs)}
    captures = [c for i, c in observer.found.items() if i not in mine]
    order = list(range(n - 1, -1, -1)) if reverse else list(range(n))  # step t's slice
    nc, nx = len(carries), len(xs)
    fc = [k for k in range(nc) if _backend.is_floating(carries[k].dtype)]
    fx = [k for k in range(nx) if _backend.is_floating(xs[k].dtype)]
    fy = [j for j in range(len(ys)) if _backend.is_floating(ys[j].dtype)]
    fk = [k for k in range(len(captures)) if _backend.is_floating(captures[k].dtype)]

    def grad(op, *dys):
        gc = [dys[k] if dys[k] is not None else zeros_like(c_out[k]) for k in fc]
        gk = [zeros_like(captures[k]) for k in fk]
        gx = [[None] * n for _ in fx]
        state, t, slots = list(carries), 0, {}
        for kind, arg in schedule.plan(n):
            if kind == checkpointing.ADVANCE:
                for _ in range(arg):
                    state, t = flat_step(state, [x[order[t]] for x in xs])[0], t + 1
            elif kind == checkpointing.TAKESHOT:
                slots[arg] = state, t
            elif kind == checkpointing.RESTORE:
                state, t = slots[arg]
            else:  # YOUTURN: step t again, recorded, and the cotangents back through it
                i = order[t]
                dy = [dys[nc + j][i] if dys[nc + j] is not None else zeros_like(ys[j][i])
                      for j in fy]
                g = _step_vjp(flat_step, state, [x[i] for x in xs], captures,
                              (fc, fx, fy, fk), [*gc, *dy], where)
                n1, n2 = len(fc), len(fc) + len(fx)
                gc = g[:n1]
                for column, gi in zip(gx, g[n1:n2]):
                    column[i] = gi
                gk = [a + b for a, b in zip(gk, g[n2:])]
        out = [None] * (nc + nx + len(captures))
        for i, k in enumerate(fc):
            out[k] = gc[i]
        for column, k in zip(gx, fx):
            out[nc + k] = stack(column) if n else zeros_like(xs[k])
        for i, k in enumerate(fk):
            out[nc + nx + k] = gk[i]
        return out

    def jvp(op, *ts):  # forward mode: the loop again under an accumulator (no memory issue)
        given = [k for k, t in enumerate(ts) if t is not None]
        inputs = [*carries, *xs, *captures]
        with ForwardAccumulator([inputs[k] for k in given], [ts[k] for k in given]) as acc:
            c2, y2 = run(carries)
        return tuple(acc.jvp(o, _ZERO) if _backend.is_floating(o.dtype) else None
                     for o in (*c2, *y2))

    in_names = [*names, *[f"xs[{k}]" for k in range(nx)],
                *[f"captured {_describe_capture(c)}" for c in captures]]
    _record("Scan", in_names, [*carries, *xs, *captures], [*c_out, *ys], grad, jvp)
    return c_out, ys


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
         swap_memory=False, infer_shape=True, reverse=False, name=None, checkpoints=None):
    """The running values of ``a = fn(a, x)`` over the leading axis of ``elems``
    (TensorFlow 2's ``tf.scan``).

    Args:
        fn: ``fn(accumulated, element) -> accumulated``; the accumulated value keeps its
            structure, shapes and dtypes.
        elems: a Tensor (or nested structure of Tensors with one leading size ``n``).
        initializer: the first accumulated value; without it ``elems``' first element is, and
            the scan runs over the rest.
        reverse: scan from the last element to the first.
        checkpoints: as :func:`tapegrad.lax.scan`'s.

    Returns the stacked accumulated values, of leading size ``n``. Differentiable in both
    modes, compiled as one ``lax.scan``. Raises ``ValueError`` for scanned arrays of different
    leading sizes and for empty ``elems`` without ``initializer``, ``TypeError`` when ``fn``
    changes the accumulated value's structure, shape or dtype.
    """
    if initializer is None:
        init, rest = _first_and_rest("tg.scan", elems, reverse)
        ys = scan(fn, rest, init, reverse=reverse, checkpoints=checkpoints)
        y_leaves, y_structure = tree_flatten(ys)
        i_leaves = tree_flatten(init)[0]
        joined = [_concat_first(convert_to_tensor(a), b, reverse)
                  for a, b in zip(i_leaves, y_leaves)]
        return tree_unflatten(y_structure, joined)

    def step(a, x):
        a = fn(a, x)
        return a, a

    return _scan("tg.scan", step, initializer, elems, None, reverse, 1, checkpoints)[1]


def _first_and_rest(where, elems, reverse):
    """``(first, rest)``: the first element of the pytree ``elems`` along the leading axis (the
    last when ``reverse``), the initial value of a scan or fold given no ``initializer``, and the
    other elements. Raises ``ValueError`` for a scalar or empty leaf (there is no first element)."""
    leaves, structure = tree_flatten(elems)
    leaves = [convert_to_tensor(x) for x in leaves]
    for name, x in zip(_paths(structure, "elems"), leaves):
        if x.ndim == 0:
            raise ValueError(f"{where}: {name} is a scalar; scanned arrays need a leading axis "
                             "to scan over")
        if x.shape[0] == 0:
            raise ValueError(f"{where}: {name} is empty (shape {tuple(x.shape)}) and no "
                             "initializer was given; without one the first element of elems "
                             "is the initial value. Pass initializer= (the value to return "
                             "for empty elems)")
    first = tree_unflatten(structure, [x[-1 if reverse else 0] for x in leaves])
    return first, tree_unflatten(structure, [x[:-1] if reverse else x[1:] for x in leaves])


def _concat_first(first, rest, reverse):
    parts = [expand_dims(first, axis=0), rest]
    return concat(parts[::-1] if reverse else parts, axis=0)


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """``fn(...fn(fn(initializer, elems[0]), elems[1])..., elems[n-1])`` (``tf.foldl``).

    ``initializer`` defaults to ``elems[0]`` (the fold then runs over the rest). Returns the
    final accumulated value. Differentiable; compiled as one ``lax.scan``. Errors as
    :func:`scan`.
    """
    return _fold("tg.foldl", fn, elems, initializer, False)


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True,
          swap_memory=False, name=None):
    """``foldl`` from the last element to the first (``tf.foldr``); ``initializer`` defaults
    to ``elems[-1]``."""
    return _fold("tg.foldr", fn, elems, initializer, True)


def _fold(where, fn, elems, initializer, reverse):
    if initializer is None:
        initializer, elems = _first_and_rest(where, elems, reverse)
    return _scan(where, lambda a, x: (fn(a, x), None), initializer, elems, None, reverse,
                 1)[0]


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True,
           swap_memory=False, infer_shape=True, name=None, fn_output_signature=None):
    """``stack([fn(x) for x in elems])`` over the leading axis (TensorFlow 2's ``tf.map_fn``).

    ``elems``: a Tensor or a nested structure of Tensors of one leading size ``n``; ``fn``
    takes one element (of the same structure) and returns Tensors (nested). Returns them
    stacked, of leading size ``n``. ``fn_output_signature`` (or the older ``dtype``) may give
    the result's dtype(s): the results are cast to them. Differentiable; compiled as one
    ``lax.scan``. Raises ``ValueError`` for elements of different leading sizes.
    """
    out = _scan("tg.map_fn", lambda c, x: (c, fn(x)), (), elems, None, False, 1)[1]
    signature = fn_output_signature if fn_output_signature is not None else dtype
    if signature is None:
        return out
    leaves, structure = tree_flatten(out)
    sig = tree_flatten(signature)[0] if isinstance(signature, (list, tuple, dict)) else (
        [signature] * len(leaves))
    dtypes = [s if s is None or isinstance(s, type) else getattr(s, "dtype", s) for s in sig]
    return tree_unflatten(structure, [a if d is None or a.dtype == d else astype(a, d)
                                      for a, d in zip(leaves, dtypes)])


# --- linear solves with implicit gradients -----------------------------------------------------
def _reads(fn, like):
    """``(parameters, structure, specs)`` of ``fn`` applied to a pytree of Tensors shaped like
    ``like``: the floating Tensors made before the call that its ops read (not its argument:
    it runs on copies), and its result's structure and ``(shape, dtype)`` per leaf. Compiled,
    ``fn`` is traced alone (``jax.eval_shape``), so the program gets no dead copy of it (nor of
    a host callback in it); eagerly it runs once."""
    leaves, structure = tree_flatten(like)
    leaves = [convert_to_tensor(x) for x in leaves]
    result = {}

    def flat(ts):
        out, result["s"] = tree_flatten(fn(tree_unflatten(structure, ts)))
        return [convert_to_tensor(a) for a in out]

    if _compiled(leaves):
        found = _discover(flat, [_spec(t) for t in leaves])
        captures, specs = found.captures, found.outs
    else:
        observer = _Captures()
        outs, _ = _isolated(lambda ts: flat([Tensor(t._value) for t in leaves]), [], observer)
        captures, specs = list(observer.found.values()), [_spec(o) for o in outs]
    return [c for c in captures if _backend.is_floating(c.dtype)], result["s"], specs


def _transpose(matvec, like):
    """The transpose of the linear function ``matvec`` (a pytree of Tensors shaped like
    ``like`` to one such pytree): ``u -> J^T u``, one reverse pass through ``matvec`` (its
    Jacobian is itself)."""
    def vecmat(u):
        leaves, structure = tree_flatten(like)
        z = [zeros_like(convert_to_tensor(x)) for x in leaves]
        with GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(z)
            y = tree_flatten(matvec(tree_unflatten(structure, z)))[0]
        g = tape.gradient(y, z, output_gradients=tree_flatten(u)[0], unconnected_gradients=_ZERO)
        return tree_unflatten(structure, g)

    return vecmat


# --- the constructs as op types of the registry ------------------------------------------------
# Each construct is an op type (``construct``) whose public function is the construct as users
# call it, its bodies given as attrs, so that the registry sweeps run it in every mode as they
# run every primitive: eagerly (the body's ops recorded), compiled (one record, whose gradient
# and JVP are the op type's rules running the call's), batched, forward mode, complex.
def _scan_op(init, xs, *captured, step, reverse=False, form="lax.scan"):
    """The op type ``Scan`` as the registry sweeps call it: ``tg.lax.scan`` of
    ``step(carry, x, *captured) -> (carry, y)`` from ``init`` over the leading axis of ``xs``
    (``reverse``: from the last slice); returns ``(carry, ys)``. Shapes, dtypes and errors as
    :func:`tapegrad.lax.scan`. ``form``: the construct built on it to call instead,
    ``"scan"``, ``"foldl"`` (``foldr`` when ``reverse``) of the step's carry, or ``"map_fn"``
    of its ``y`` from ``init``; each returns its own result."""
    def carry(c, x):
        return step(c, x, *captured)[0]

    if form == "scan":
        return scan(carry, xs, init, reverse=reverse)
    if form == "foldl":
        return (foldr if reverse else foldl)(carry, xs, init)
    if form == "map_fn":
        return map_fn(lambda x: step(init, x, *captured)[1], xs)
    return _scan("tg.lax.scan", lambda c, x: step(c, x, *captured), init, xs, None, reverse, 1)


def _while_op(*inputs, body, trips, carried=1, maximum_iterations=None):
    """The op type ``While`` as the registry sweeps call it: :func:`while_loop` of
    ``body(*loop_vars, *captured) -> loop_vars`` over the first ``carried`` inputs (the others
    are captured), ``trips`` times (an integer counter is a loop variable too), with
    ``maximum_iterations``. Returns the loop variables (one Tensor for ``carried=1``)."""
    loop, captured = inputs[:carried], inputs[carried:]

    def step(i, *v):
        out = body(*v, *captured)
        return (i + 1, *(out if isinstance(out, tuple) else (out,)))

    out = while_loop(lambda i, *v: i < trips, step, (0, *loop),
                     maximum_iterations=maximum_iterations)[1:]
    return out[0] if carried == 1 else out


def _switch_op(*captured, branches, index):
    """The op type ``Switch`` as the registry sweeps call it: the branch ``index`` of
    ``branches`` (functions of the inputs), by :func:`switch_case` for an integer index and by
    :func:`cond` (``branches``: ``(false_fn, true_fn)``) for a boolean one. ``index``: a Python
    int or bool, or a function of the inputs returning a 0-d integer or bool Tensor."""
    i = convert_to_tensor(index(*captured) if callable(index) else index)
    fns = [lambda b=b: b(*captured) for b in branches]
    if _backend.np_dtype(i._value.dtype) == np.dtype(bool):
        return cond(i, fns[1], fns[0])
    return switch_case(i, fns)


def _sample_step(c, x, w):  # a scan step: a loop-carried float, a slice, a captured tensor
    c = c * sin(x) + w * x
    return c, cos(c) * w


def _sample_body(x, y, w):  # a while body of two loop-carried floats and a capture (y keeps
    return x * cos(y) + w, y * cos(w) + sin(y) * w  # its dtype when only x is complex)


def _sample_passing(c, x, w):  # a step whose y is the captured tensor as it is
    return c * sin(x) + w, w


def _sample_body1(x, w):
    return sin(x) * w + x


def _sample_index(x, w):  # a predicate that holds, computed from the inputs (batched: Select)
    return _sum(_abs(x)) >= 0.0


def _sample_branch0(x, w):
    return sin(x) * w, x + w


def _sample_branch1(x, w):
    return cos(x) + w, x * w


def _sample_identity(x, w):  # a branch that returns an input as it is (and reads not w)
    return x, x


def _sample_branch2(x, w):
    return x * x * w, sin(w) + x


_D = (-1.0, 1.0)  # complex sin and cos grow as exp(|Im|): keep the loops' values moderate
construct("Scan", _scan_op, samples=[
    Sample((3,), (4, 3), (3,), step=_sample_step, domain=_D),
    Sample((3,), (4, 3), (3,), step=_sample_step, reverse=True, domain=_D),
    Sample((2, 2), (0, 2, 2), (2,), step=_sample_step, domain=_D),  # xs of length 0
    Sample((3,), (4, 3), (3,), step=_sample_step, form="scan", domain=_D),
    Sample((3,), (4, 3), (3,), step=_sample_step, form="foldl", domain=_D),
    Sample((3,), (4, 3), (3,), step=_sample_step, form="foldl", reverse=True, domain=_D),
    Sample((3,), (4, 3), (3,), step=_sample_step, form="map_fn", domain=_D),
    Sample((3,), (4, 3), (3,), step=_sample_passing, domain=_D),
])
construct("While", _while_op, samples=[
    Sample((3,), (3,), (3,), body=_sample_body, trips=3, carried=2, maximum_iterations=3,
           domain=_D),
    Sample((2,), (2,), body=_sample_body1, trips=2, maximum_iterations=5,  # exits early
           domain=_D),
    Sample((3,), (3,), (3,), body=_sample_body, trips=2, carried=2, domain=_D),  # no bound
])
construct("Switch", _switch_op, samples=[
    Sample((3,), (3,), branches=(_sample_branch0, _sample_branch1), index=_sample_index,
           domain=_D),  # tg.cond; its predicate batched under tg.vmap (a Select record)
    Sample((3,), (3,), branches=(_sample_branch0, _sample_branch1, _sample_branch2), index=1,
           domain=_D),
    Sample((3,), (3,), branches=(_sample_branch0, _sample_branch1), index=False, domain=_D),
    Sample((3,), (3,), branches=(_sample_branch0, _sample_branch2), index=7,  # the last
           domain=_D),
    Sample((3,), (3,), branches=(_sample_branch0, _sample_identity), index=_sample_index,
           domain=_D),
])
