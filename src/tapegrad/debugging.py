"""Debugging aids: check-numerics mode, logging from inside gradient functions, and what the
tape keeps for the reverse pass (``memory_report``, ``saved_residuals``)."""
from __future__ import annotations

import functools
import os
import sys
from typing import NamedTuple

import numpy as np

from . import _backend, _records, _structural, config
from ._records import Dropped
from ._tape import GradientTape
from ._tensor import Tensor
from .errors import NumericsError

__all__ = ["enable_check_numerics", "disable_check_numerics", "log", "enable_memory_report",
           "disable_memory_report", "memory_report", "saved_residuals", "MemoryReport",
           "MemoryRow", "KeptTensor"]


class _NumericsObserver:
    """Sees every op (forward and gradient) and raises at the first NaN or Inf it produces.

    Inside ``tg.function`` the values are symbolic: the check is compiled into the program as
    a host callback (``jax.debug.callback``) that raises when the op runs; JAX reports it as a
    ``JaxRuntimeError`` carrying the same message."""

    _observer = True
    _differentiates = False

    def observe(self, opdef, args, attrs, outs):
        op_type = opdef.type
        jax = config.loaded_jax()
        for k, out in enumerate(outs):
            v = out._value
            if not _backend.is_floating(v.dtype):
                continue
            message = functools.partial(_message, op_type, k, _phase(), _shapes(args))
            if jax is not None and isinstance(v, jax.core.Tracer):
                jax.debug.callback(functools.partial(_check, message), v)
            else:
                _check(message, v)


def _check(message, v):
    xp = _backend.namespace(v)
    if not bool(xp.all(xp.isfinite(v))):
        raise NumericsError(message("NaN" if bool(xp.any(xp.isnan(v))) else "Inf"))


def _phase() -> str:
    tape, op = _records.backward_state()
    if tape is None:
        return "in the forward computation"
    if op is None:
        return "in the gradient computation"
    return f"in the gradient of op type {op.type!r} (while differentiating it)"


def _shapes(args) -> str:
    return ", ".join(str(tuple(a.shape)) if hasattr(a, "shape") else repr(a) for a in args)


def _message(op_type, k, phase, shapes, what) -> str:
    return (f"check_numerics: op type {op_type!r} produced {what} in output {k} {phase}; its "
            f"inputs have shapes [{shapes}]. Disable with tg.debugging.disable_check_numerics()")


_OBSERVER = _NumericsObserver()


def enable_check_numerics() -> None:
    """Raise :class:`~tapegrad.errors.NumericsError` at the first NaN or Inf produced by any op.

    Checks every forward and gradient computation (in this thread and threads started later),
    naming the op type, whether it was forward or gradient, and the input shapes. Costs one
    reduction per op; off by default.
    """
    _records.add_observer(_OBSERVER)


def disable_check_numerics() -> None:
    """Turn check-numerics mode off again."""
    _records.remove_observer(_OBSERVER)


def log(name: str, value) -> None:
    """From inside a gradient function, keep ``value`` in ``tape.logs[name]`` (a list).

    For debugging gradients without print statements: after ``tape.gradient`` returns,
    ``tape.logs`` maps each name to the values logged during that call, in order. Raises
    ``RuntimeError`` when no gradient is being computed.
    """
    tape, _ = _records.backward_state()
    if tape is None:
        raise RuntimeError(
            f"tg.debugging.log({name!r}, ...) was called outside a gradient computation; call "
            "it from a gradient function (custom_gradient or RegisterGradient) while "
            "tape.gradient runs")
    tape.logs.setdefault(name, []).append(value)


# --- what the tape keeps ------------------------------------------------------------------------
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))  # tapegrad's frames are never a user line
_SITE_LIMIT = 100_000  # call sites remembered (the latest ops'), while the mode is on


def _user_line(frame) -> str | None:
    """``"file:line"`` of the first frame from ``frame`` outward outside tapegrad (and JAX)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_OWN_DIR) and "/jax/" not in name:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class _SiteObserver:
    """Notes, while the memory-report mode is on, the user's line that ran each op, by the id of
    its first output (the last ``_SITE_LIMIT`` ops). Off, it is not on the trace stack and costs
    nothing."""

    _observer = True
    _differentiates = False

    def __init__(self):
        self.sites = {}

    def observe(self, opdef, args, attrs, outs):
        if outs:
            sites = self.sites
            if len(sites) >= _SITE_LIMIT:
                del sites[next(iter(sites))]
            sites[outs[0]._id] = _user_line(sys._getframe(1))


_SITES = _SiteObserver()


def enable_memory_report() -> None:
    """Note the user's ``file:line`` of every op from now on (in every thread), so that
    :func:`memory_report` and ``GradientTape.memory_report`` name the line that ran each
    recorded op. Costs one walk up the Python stack per op while on; off by default (without
    it a report's ``line`` is ``None``). :func:`saved_residuals` turns it on for its own run."""
    _records.add_observer(_SITES)


def disable_memory_report() -> None:
    """Stop noting call sites, and forget those noted."""
    _records.remove_observer(_SITES)
    _SITES.sites.clear()


class KeptTensor(NamedTuple):
    """One tensor a record keeps for the reverse pass.

    ``role``: ``"input <name>"``, ``"output <k>"``, ``"closure"`` (held by a ``custom_gradient``
    or construct's gradient function, not by the record's inputs or outputs) or, compiled, the
    residual's origin; ``shape`` (tuple of ints); ``dtype`` (a NumPy dtype); ``size_bytes``:
    the tensor's own bytes; ``nbytes``: the bytes it adds to the report's total: its buffer's
    bytes (a NumPy view keeps the whole array it views alive), 0 when an earlier entry already
    counted that buffer."""

    role: str
    shape: tuple
    dtype: np.dtype
    size_bytes: int
    nbytes: int


class MemoryRow(NamedTuple):
    """One recorded op (eagerly) or one residual's producer (compiled): ``op_type``; ``line``:
    the user's ``"file:line"`` that ran it (``None`` when not known: eagerly, the
    memory-report mode was off when the op ran); ``kept``: a tuple of :class:`KeptTensor`;
    ``dropped``: ``"role shape dtype"`` strings of the tensors the record let go (its gradient
    does not read them: ``RegisterGradient(reads=...)``); ``nbytes``: what the row adds to the
    total, in bytes."""

    op_type: str
    line: str | None
    kept: tuple
    dropped: tuple
    nbytes: int


class MemoryReport:
    """What is kept for a reverse pass (printable as a table).

    Attributes:
        rows: a tuple of :class:`MemoryRow`, in recording order.
        total_bytes: the bytes kept, each buffer counted once (an int).
        by_line: ``{line: bytes}`` (``line`` a ``"file:line"`` string or ``None``), in the
            order the lines first appear.
        xla: for a compiled function, XLA's ``memory_analysis()`` of the compiled gradient
            program in bytes (``temp``, ``argument``, ``output``, ``alias``, ``generated_code``);
            ``None`` eagerly.
    """

    def __init__(self, rows, what, xla=None):
        self.rows = tuple(rows)
        self.total_bytes = sum(r.nbytes for r in self.rows)
        self.by_line = {}
        for r in self.rows:
            self.by_line[r.line] = self.by_line.get(r.line, 0) + r.nbytes
        self.xla = xla
        self._what = what

    def __str__(self):
        head = (f"{self._what}: {len(self.rows)} rows, {self.total_bytes} bytes "
                f"({_human(self.total_bytes)})")
        lines = [head, f"{'#':>3}  {'op':24s} {'bytes':>10}  {'line':28s} kept"]
        for k, r in enumerate(self.rows):
            kept = "; ".join(f"{t.role} {t.shape} {t.dtype}"
                             + ("" if t.nbytes or not t.size_bytes else " (counted above)")
                             for t in r.kept) or "-"
            lines.append(f"{k:>3}  {r.op_type[:24]:24s} {r.nbytes:>10}  "
                         f"{_short(r.line):28s} {kept}")
            if r.dropped:
                lines.append(f"{'':>52}dropped: {'; '.join(r.dropped)}")
        lines.append("by line:")
        lines += [f"  {_short(line, 60):60s} {b:>10} bytes" for line, b in self.by_line.items()]
        if self.xla is not None:
            lines.append("XLA, compiled gradient program: " + ", ".join(
                f"{k} {v} bytes" for k, v in self.xla.items()))
        return "\n".join(lines)

    def __repr__(self):
        return f"<MemoryReport {len(self.rows)} rows, {self.total_bytes} bytes>"


def _human(n) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "bytes" else f"{n} bytes"
        n /= 1024


def _short(line, width=28) -> str:
    if line is None:
        return "?"
    name, _, no = line.rpartition(":")
    text = f"{os.path.basename(name)}:{no}"
    return text if len(text) <= width else "..." + text[-width + 3:]


def _buffer(v):
    """``(key, bytes)`` of the buffer holding the backend array ``v``: a NumPy view's base."""
    raw = getattr(v, "_array", v)  # array_api_strict wraps a NumPy array
    if isinstance(raw, np.ndarray):
        while isinstance(raw.base, np.ndarray):
            raw = raw.base
        return id(raw), raw.nbytes
    return id(v), _bytes(v)


def _bytes(v) -> int:
    return int(np.prod(v.shape, dtype=np.int64)) * _backend.np_dtype(v.dtype).itemsize


def _closure_tensors(fn, depth=2) -> list:
    """The Tensors (not Variables) held in the closure of ``fn`` and of the functions found in
    it, ``depth`` levels down (a ``custom_gradient``'s ``grad_fn`` closes over its forward's
    intermediates), alone or in a list or tuple."""
    found, seen, todo = [], set(), [(fn, 0)]
    while todo:
        f, d = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        for cell in getattr(f, "__closure__", None) or ():
            try:
                x = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            for y in (x if isinstance(x, (list, tuple)) else (x,)):
                if isinstance(y, Tensor) and not y._variable:
                    found.append(y)
                elif callable(y) and d + 1 < depth and hasattr(y, "__closure__"):
                    todo.append((y, d + 1))
    return found


def memory_report(tape) -> MemoryReport:
    """What ``tape`` (a :class:`~tapegrad.GradientTape`) keeps for its reverse pass.

    One row per recorded op, in recording order: its op type, the user's ``file:line`` that
    ran it (while :func:`enable_memory_report` is on; else ``None``), the tensors its record
    keeps (inputs and outputs its gradient reads, ``RegisterGradient(reads=...)``, and the
    Tensors a ``custom_gradient``'s or construct's gradient function holds in its closure),
    with shapes, dtypes and bytes, and the tensors it dropped. Each buffer is counted once,
    in the first row that keeps it, so ``total_bytes`` is the sum of the rows'. A tensor the
    user also holds (a watched source) is counted too: the tape keeps it as well.

    Returns a :class:`MemoryReport`. Raises ``TypeError`` for something not a GradientTape and
    ``RuntimeError`` for a non-persistent tape whose ``gradient`` (or ``jacobian``) already
    freed its records.
    """
    if not isinstance(tape, GradientTape):
        raise TypeError(f"memory_report: expected a tg.GradientTape, got {type(tape).__name__}; "
                        "for a function, use tg.debugging.saved_residuals(f, *args)")
    if tape.released:
        raise RuntimeError(
            "memory_report: this non-persistent GradientTape's records were freed by its "
            "gradient (or jacobian) call, so nothing is kept any more; call "
            "tape.memory_report() before tape.gradient, or create the tape with "
            "persistent=True")
    counted, rows = set(), []

    def entry(role, t):
        v = t._peek()
        key, size = _buffer(v)
        new = key not in counted
        counted.add(key)
        spec = tuple(t.shape), t.dtype
        return KeptTensor(role, *spec, _bytes(v), size if new else 0)

    for op in tape.operations:
        kept, dropped = [], []
        names = op.param_names
        for role, values in ((lambda k: f"input {names[k]}", op.inputs),
                             (lambda k: f"output {k}", op.outputs)):
            for k, t in enumerate(values):
                if isinstance(t, Dropped):
                    dropped.append(f"{role(k)} {tuple(t.shape)} {_backend.np_dtype(t.dtype)}")
                elif isinstance(t, Tensor):
                    kept.append(entry(role(k), t))
        held = {id(t) for t in (*op.inputs, *op.outputs)}
        kept += [entry("closure", t) for t in _closure_tensors(op.gradient_function)
                 if id(t) not in held]
        line = _SITES.sites.get(op.output_ids[0]) if op.output_ids else None
        rows.append(MemoryRow(op.type, line, tuple(kept), tuple(dropped),
                              sum(t.nbytes for t in kept)))
    return MemoryReport(rows, "kept by the tape for the reverse pass")


_structural.extend(memory_report=memory_report)


def saved_residuals(f, *args, **kwargs) -> MemoryReport:
    """What a gradient of ``f(*args, **kwargs)`` keeps between its forward and reverse passes.

    ``f`` is run once under a persistent :class:`~tapegrad.GradientTape` that watches the
    floating Tensor leaves of ``args`` and ``kwargs`` (and the trainable Variables it reads),
    with the call sites noted (:func:`enable_memory_report`); the result is
    :func:`memory_report` of that tape. For a ``tg.function``, this runs inside the compiled
    gradient program (its Python function and then the tape's gradient of the sum of its
    floating outputs, traced and compiled as ``tg.function(tg.grad(...))`` would be), so the
    rows are the records of the trace (shapes and dtypes of the symbolic values), and the
    report's ``xla`` holds XLA's ``memory_analysis()`` of that program in bytes: ``temp`` is
    its scratch memory, what is kept for the reverse pass included, after XLA's own
    optimizations (it needs JAX). JAX's ``jax.ad_checkpoint.print_saved_residuals`` is not
    used: it differentiates the program with JAX's own rules, which know nothing of
    ``reads=``, ``recompute_grad`` or ``checkpoints=`` schedules.

    Returns a :class:`MemoryReport` (bytes throughout). Raises ``TypeError`` for an ``f`` that is
    not callable or a ``tg.function`` that runs eagerly, and what ``f`` raises.
    """
    if not callable(f):
        raise TypeError(f"saved_residuals: expected a function to call on the arguments, got "
                        f"{type(f).__name__}")
    on = _SITES in _records.trace_entries()
    if not on:
        enable_memory_report()
    try:
        compiled = getattr(f, "_gradient_memory", None)
        if compiled is None:
            return _taped(f, args, kwargs, [])[0]
        found = []
        xla = compiled(lambda py: lambda *a, **k: _taped(py, a, k, found)[1], args, kwargs)
        report = found[-1]
        return MemoryReport(report.rows, f"kept in the compiled gradient of {f.__name__}", xla)
    finally:
        if not on:
            disable_memory_report()


def _taped(f, args, kwargs, found):
    """``(report, gradients)``: ``f`` run under a persistent tape watching the floating Tensor
    leaves of the arguments; the tape's report (appended to ``found`` too) and the gradients
    of the sum of the floating outputs with respect to those leaves and the Variables read."""
    with GradientTape(persistent=True) as tape:
        sources = [t for t in _tensor_leaves([*args, *kwargs.values()])
                   if _backend.is_floating(t.dtype)]
        tape.watch(sources)
        out = f(*args, **kwargs)
    report = memory_report(tape)
    found.append(report)
    targets = [t for t in _tensor_leaves([out]) if _backend.is_floating(t.dtype)]
    if not targets:
        return report, []
    return report, tape.gradient(targets, [*sources, *tape.watched_variables()],
                                 unconnected_gradients="zero")


def _tensor_leaves(values) -> list:
    out = []
    for x in values:
        if isinstance(x, Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out += _tensor_leaves(x)
        elif isinstance(x, dict):
            out += _tensor_leaves(list(x.values()))
    return out
