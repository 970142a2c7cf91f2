"""Debugging aids: check-numerics mode, self-checking gradient rules, logging from inside
gradient functions, and what the tape keeps for the reverse pass (``memory_report``,
``saved_residuals``)."""
from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
import warnings
import weakref
from typing import NamedTuple

import numpy as np

from . import _backend, _records, _structural, config
from ._pytree import tree_leaves
from ._records import Dropped
from ._tape import GradientTape
from ._tensor import Tensor, _wrap
from ._views import OperationView
from .errors import GradientCheckError, GradientCheckWarning, NumericsError, describe_fn

__all__ = ["enable_check_numerics", "disable_check_numerics", "log", "enable_gradient_checks",
           "disable_gradient_checks", "gradient_checks", "enable_memory_report",
           "disable_memory_report", "memory_report", "saved_residuals", "MemoryReport",
           "MemoryRow", "KeptTensor", "print"]


class _NumericsObserver:
    """Sees every op (forward and gradient) and raises at the first NaN or Inf it produces.

    Forward, the message names the user's line that called the op. In a gradient computation
    it names the record being differentiated (the forward op the NaN belongs to): its op type,
    the user's line that called it (noted at forward time by the call-site observer, which is
    on while this mode is), summaries of its cotangents, inputs and outputs, and a path of ops
    from the loss to it. It is the core's ``gradient_numerics`` extension point: while ``on``,
    the reverse pass hands it each record's cotangents before the gradient function runs and
    the gradients it returned after (ones computed without tapegrad ops are checked there).

    Inside ``tg.function`` the values are symbolic: the check is compiled into the program as
    a host callback (``jax.debug.callback``) that raises when the op runs, its text fixed at
    trace time and its summaries computed from the arrays the callback is given; JAX reports
    it as a ``JaxRuntimeError`` that ``tg.function`` turns back into ``NumericsError``."""

    _observer = True
    _differentiates = False

    def __init__(self):
        self.on = False
        self._local = threading.local()  # .now: (record, its cotangents); .path: a cache

    def __call__(self, op, cotangents):
        """The reverse pass, before the gradient function of record ``op`` runs."""
        self._local.now = (op, cotangents)

    def observe(self, opdef, args, attrs, outs):
        for k, out in enumerate(outs):
            self._watch(out._value, functools.partial(
                _head, f"op type {opdef.type!r} produced", f"in output {k}", _shapes(args)))

    def returned(self, fn, op, gs):
        """The reverse pass, after the gradient function ``fn`` of record ``op`` returned
        ``gs`` (a Tensor, raw array or None, or a list, tuple or dict of them)."""
        items = gs.items() if isinstance(gs, dict) else enumerate(
            gs if isinstance(gs, (list, tuple)) else (gs,))
        for k, g in items:
            self._watch(getattr(g, "_value", g), functools.partial(
                _head, f"the gradient function {describe_fn(fn)} returned", f"for input {k!r}",
                None), op)

    def _watch(self, v, head, record=None):
        if not hasattr(v, "dtype") or not _backend.is_floating(v.dtype):
            return
        jax = config.loaded_jax()
        if jax is not None and isinstance(v, jax.core.Tracer):
            parts, values = self._describe(head, record)
            jax.debug.callback(functools.partial(_check, parts), v, *values)
        elif not _finite(v):
            parts, values = self._describe(head, record)
            _check(parts, v, *values)

    def _describe(self, head, record=None):
        """``(parts, values)``: the message's fixed text and the arrays of its summaries (the
        record's cotangents, inputs and outputs)."""
        tape, op = _records.backward_state()
        if tape is None:
            return (head, "in the forward computation",
                    f"  called at {_user_line(sys._getframe(1))}", ()), ()
        record = record or op
        if record is None:
            return (head, "in the gradient computation", "", ()), ()
        now = getattr(self._local, "now", None)
        cots = now[1] if now is not None and now[0] is record else None
        labels, values = [], []
        if cots is None:
            labels.append(("cotangents: not known (a nested gradient computation ran since)",
                           False))
        for role, ts in ((lambda k: f"cotangent {k}", cots or ()),
                         (lambda k: f"input {k} {record._opdef.param_name(k)!r}", record.inputs),
                         (lambda k: f"output {k}", record.outputs)):
            for k, t in enumerate(ts):
                if isinstance(t, Tensor):
                    labels.append((role(k), True))
                    values.append(t._value)
                elif isinstance(t, Dropped):
                    labels.append((f"{role(k)}: shape {tuple(t.shape)} "
                                   f"{_backend.np_dtype(t.dtype)}, not kept by the record",
                                   False))
        line = _SITES.sites.get(record._out_ids[0]) if record._out_ids else None
        text = (f"  forward op: {record.type!r} (whose gradient this is), called at "
                f"{line or _UNNOTED}\n"
                f"  path from the loss: {self._path(tape, record)}")
        phase = f"in the gradient of op type {record.type!r} (while differentiating it)"
        return (head, phase, text, tuple(labels)), tuple(values)

    def _path(self, tape, record, most=8) -> str:
        """``"Sum (f.py:9) <- Mul (f.py:8) <- Sqrt (f.py:7)"``: from an op whose outputs no op
        of the pass reads (the loss) to ``record``, through the last reader of each."""
        reach = _records._state.reach
        cache = getattr(self._local, "path", None)
        if cache is None or cache[:3] != (tape, reach, len(tape._ops)):
            readers = {}  # tensor id -> the last record of the pass that reads it
            for o in tape._ops:
                if not reach.isdisjoint(o._out_ids):
                    for i in o._in_ids:
                        readers[i] = o
            cache = self._local.path = (tape, reach, len(tape._ops), readers)
        readers = cache[3]
        path, o = [record], record
        while len(path) <= len(tape._ops):
            nxt = [readers[i] for i in o._out_ids if i in readers]
            if not nxt:
                break
            o = max(nxt, key=lambda r: r._out_ids[0])
            path.append(o)
        names = [f"{o.type} ({_short(_SITES.sites.get(o._out_ids[0]))})" for o in path[::-1]]
        if len(names) > most:
            names = [*names[:3], f"... {len(names) - most + 1} more", *names[-(most - 4):]]
        return " <- ".join(names)


_UNNOTED = ("? (not noted: the op ran before check-numerics mode was on, or in a replay of a "
            "control-flow body for its gradient, which observers do not see)")


def _finite(v) -> bool:
    xp = _backend.namespace(v)
    return bool(xp.all(xp.isfinite(v)))


def _check(parts, v, *values):
    """Raise NumericsError if ``v`` has a NaN or Inf; ``parts`` (from ``_describe``) and
    ``values`` (the arrays its labels summarize) make the message."""
    if _finite(v):
        return
    xp = _backend.namespace(v)
    head, phase, text, labels = parts
    lines = [head("NaN" if bool(xp.any(xp.isnan(v))) else "Inf", phase)]
    if text:
        lines.append(text)
    values = iter(values)
    lines += [f"  {label}: {_summary(next(values))}" if has_value else f"  {label}"
              for label, has_value in labels]
    lines.append("  Disable with tg.debugging.disable_check_numerics()")
    raise NumericsError("\n".join(lines))


def _summary(v) -> str:
    """``"shape (2,) float64, min 0, max 2, 1 non-finite"`` (min and max of the finite
    values; of their magnitudes for complex ones)."""
    a = _backend.to_numpy(v)
    bad = ~np.isfinite(a)
    ok = np.abs(a[~bad]) if a.dtype.kind == "c" else a[~bad]
    span = f", min {ok.min():.6g}, max {ok.max():.6g}" if ok.size else ""
    return f"shape {tuple(a.shape)} {a.dtype}{span}, {int(bad.sum())} non-finite"


def _shapes(args) -> str:
    return ", ".join(str(tuple(a.shape)) if hasattr(a, "shape") else repr(a) for a in args)


def _head(what_did, where, shapes, what, phase) -> str:
    inputs = "" if shapes is None else f"; its inputs have shapes [{shapes}]"
    return f"check_numerics: {what_did} {what} {where} {phase}{inputs}."


_OBSERVER = _NumericsObserver()
_structural.extend(gradient_numerics=_OBSERVER)


def enable_check_numerics() -> None:
    """Raise :class:`~tapegrad.errors.NumericsError` at the first NaN or Inf produced by any op.

    Checks every forward and gradient computation (in this thread and threads started later),
    naming the op type, whether it was forward or gradient, the input shapes and the user's
    ``file:line`` that called the op. In a gradient computation it also names the forward op
    the NaN belongs to (the record whose gradient function made it: its op type and the
    user's line that called it, noted from now on, as :func:`enable_memory_report` notes
    them), summaries of that record's cotangents, inputs and outputs (shape, dtype, min, max,
    count of non-finite values) and a path of ops from the loss to it. Eagerly and inside
    ``tg.function`` (a host callback in the program). Costs one reduction per op and a walk up
    the Python stack per op; off by default, and off it costs nothing.
    """
    _note_sites("numerics", True)
    _records.add_observer(_OBSERVER)
    _OBSERVER.on = True


def disable_check_numerics() -> None:
    """Turn check-numerics mode off again."""
    _OBSERVER.on = False
    _records.remove_observer(_OBSERVER)
    _note_sites("numerics", False)


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


# --- printing at run time ----------------------------------------------------------------------
def _print_element(x) -> str:
    """One NumPy scalar as TensorFlow writes it: booleans as 1/0, floats in the shortest of
    ``%.6g``/``%.9g`` (float16/32) or ``%.15g``/``%.17g`` (float64) that reads back the same."""
    if x.dtype.kind == "b":
        return str(int(x))
    if x.dtype.kind != "f":
        return str(x)
    short, full = (15, 17) if x.dtype.itemsize == 8 else (6, 9)
    text = "%.*g" % (short, x)
    return text if not np.isfinite(x) or x.dtype.type(text) == x else "%.*g" % (full, x)


def _print_format(value, summarize) -> str:
    """A value as TensorFlow's ``tf.print`` writes it: nested brackets, elements separated by
    a space and not aligned, at most ``summarize`` elements at each end of every axis with
    ``...`` between (None or negative: all); 3-d and up: blank lines between blocks."""
    a = np.asarray(_backend.to_numpy(value))
    edge = None if summarize is None or summarize < 0 else summarize

    def text(x, depth):
        if x.ndim == 0:
            return _print_element(x[()])
        n = x.shape[0]
        shown = (list(range(n)) if edge is None or n <= 2 * edge
                 else [*range(edge), None, *range(n - edge, n)])
        sep = " " if x.ndim == 1 else "\n" * (x.ndim - 1) + " " * (depth + 1)
        return "[" + sep.join("..." if i is None else text(x[i], depth + 1)
                              for i in shown) + "]"

    return text(a, 0)


def print(*inputs, output_stream=None, sep=" ", end="\n", summarize=3) -> None:  # noqa: A001
    """Print ``inputs`` when the computation runs: eagerly at once, inside ``tg.function`` each
    time the compiled function is called (Python's ``print`` there runs once per trace and
    shows a traced Tensor's description, not its value). TensorFlow's ``tf.print``.

    inputs: Tensors (any shape and dtype), written as TensorFlow writes them (``[1 2 3 ... 5 6
    7]``, ``[[1.5 2]\n [-3.25 10]]``: no commas, no alignment, booleans as 1/0, floats in the
    fewest digits that read back the same) with at most ``summarize`` elements at each end of
    every axis (-1 or None: all), and any other objects, written as ``str``; joined by ``sep`` and
    followed by ``end``. output_stream: a file object (default ``sys.stderr``, as TensorFlow)
    or TensorFlow's ``"file://<path>"`` (appended to that file). Raises ``ValueError`` for
    another string.
    Inside ``tg.function`` (with Tensors or not) the Tensors' values reach a
    ``jax.debug.callback(ordered=True)``, so prints come in program order, in the branch taken. Returns None; not differentiable (prints nothing to
    gradients).
    """
    if isinstance(output_stream, str) and not output_stream.startswith("file://"):
        raise ValueError(f"tg.print: output_stream {output_stream!r} is not a file object or "
                         "a 'file://<path>' string (TensorFlow's two kinds)")
    is_tensor = [isinstance(x, Tensor) for x in inputs]
    values = [x._value for x, t in zip(inputs, is_tensor) if t]

    def emit(*arrays):
        it = iter(arrays)
        parts = [_print_format(next(it), summarize) if t else str(x)
                 for x, t in zip(inputs, is_tensor)]
        text = sep.join(parts) + end
        if isinstance(output_stream, str):  # TensorFlow's "file://path": appended to path
            with open(output_stream[len("file://"):], "a", encoding="utf-8") as f:
                f.write(text)
        else:
            (sys.stderr if output_stream is None else output_stream).write(text)

    jax = config.loaded_jax()
    if jax is not None and (config.tracing() or any(isinstance(v, jax.core.Tracer)
                                                   for v in values)):  # strings alone too
        values = [v if isinstance(v, jax.core.Tracer) else _backend.to_numpy(v)
                  for v in values]  # constants as NumPy: JAX takes no other library's arrays
        jax.debug.callback(emit, *values, ordered=True)
    else:
        emit(*values)


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
    """Notes, while the memory-report or check-numerics mode is on, the user's line that ran
    each op, by the id of its first output (the last ``_SITE_LIMIT`` ops). Off, it is not on
    the trace stack and costs nothing."""

    _observer = True
    _differentiates = False

    def __init__(self):
        self.sites = {}
        self.users = set()  # the modes that need it: "memory", "numerics"

    def observe(self, opdef, args, attrs, outs):
        if outs:
            sites = self.sites
            if len(sites) >= _SITE_LIMIT:
                del sites[next(iter(sites))]
            sites[outs[0]._id] = _user_line(sys._getframe(1))


_SITES = _SiteObserver()


def _note_sites(user, on) -> None:
    """Note call sites while some mode (``user``) needs them; forget them when none does."""
    if on:
        _SITES.users.add(user)
        _records.add_observer(_SITES)
    else:
        _SITES.users.discard(user)
        if not _SITES.users:
            _records.remove_observer(_SITES)
            _SITES.sites.clear()


def enable_memory_report() -> None:
    """Note the user's ``file:line`` of every op from now on (in every thread), so that
    :func:`memory_report` and ``GradientTape.memory_report`` name the line that ran each
    recorded op. Costs one walk up the Python stack per op while on; off by default (without
    it a report's ``line`` is ``None``). :func:`saved_residuals` turns it on for its own run."""
    _note_sites("memory", True)


def disable_memory_report() -> None:
    """Stop noting call sites, and forget those noted (unless check-numerics mode, which notes
    them too, is on)."""
    _note_sites("memory", False)


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
    on = "memory" in _SITES.users
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
# ---------------------------------------------------------------------------------------------
# Self-checking gradient rules (enable_gradient_checks)

# default relative tolerances by the precision of the rule's values (bytes of a real component)
_RTOL = {8: 1e-5, 4: 1e-3, 2: 5e-2}
_A = 0.75  # the scalar of the linearity check g(a*dy1 + dy2) = a*g(dy1) + g(dy2)


class _GradientChecks:
    """The gradient-check mode: its settings, and how often each rule has been checked. Plugged
    into the reverse pass as the core's ``gradient_check`` extension point; the pass calls it
    only while ``on``."""

    def __init__(self):
        self.on = False
        self.rtol = self.atol = None
        self.calls, self.action, self.rules = 1, "raise", "user"
        self.counts = {}  # rule (its code object) -> times checked
        self.busy = False  # a check is running: the rule's own calls inside it are not checked
        self.log = None  # or a list of (rule, op type, message or None), one per check (the CLI's)
        self.functions = weakref.WeakSet()  # the tg.functions whose first call ran eagerly

    def eager_first_call(self, function) -> bool:
        """``tg.function``, at a call that would trace a program: run it eagerly instead, so
        the rules it runs are checked on concrete values? True once per function."""
        if function in self.functions:
            return False
        self.functions.add(function)
        return True

    def __call__(self, fn, op):
        """The reverse pass, before ``fn(op, ...)`` runs: check ``fn`` if it is a user rule."""
        if not self.busy and (self.rules == "all" or _is_user_rule(fn)):
            self.run(fn, op)

    def force(self, fn, op):
        """``custom_gradient(check=True)``: check ``fn`` whether the mode is on or not."""
        if not self.busy:
            self.run(fn, op)

    def run(self, fn, op):
        key = _rule_key(fn)
        n = self.counts.get(key, 0)
        if n >= self.calls or _traced(op):
            return
        self.counts[key] = n + 1
        self.busy = True
        try:
            with _records.trace_stack([]):
                problem = _check_rule(fn, op, self.rtol, self.atol)
        except Exception as exc:  # the rule itself raised: noted, then raised as without checks
            if self.log is not None:
                self.log.append((fn, op.type, f"the check raised {type(exc).__name__}: {exc}"))
            raise
        finally:
            self.busy = False
        if self.log is not None:
            self.log.append((fn, op.type, problem))
        if problem is None:
            return
        if self.action == "warn":
            warnings.warn(problem, GradientCheckWarning, stacklevel=2)
        else:
            raise GradientCheckError(problem)


_CHECKS = _GradientChecks()
_structural.extend(gradient_check=_CHECKS)


def enable_gradient_checks(rtol=None, atol=None, calls: int = 1, action: str = "raise",
                           rules: str = "user") -> None:
    """Check each user-defined gradient rule the first ``calls`` times it runs, on the inputs
    of that call, and raise :class:`~tapegrad.errors.GradientCheckError` when it is wrong.

    The rules checked: the gradient functions of ``custom_gradient``, ``custom_vjp`` and
    ``custom_jvp`` calls, and of op types registered with ``RegisterGradient`` (also as
    ``gradient_override_map`` targets) and ``RegisterJVP`` outside tapegrad (``rules="all"``
    checks tapegrad's own too). Each check, on copies and with no tape recording it:

    - *linearity*: ``g(a*dy1 + dy2) == a*g(dy1) + g(dy2)`` for random cotangents (a gradient
      is a vector-Jacobian product, linear in ``dy``);
    - *VJP against the forward*: ``<g(dy), v> == <dy, (f(x + h v) - f(x - h v)) / 2h>`` along a
      random direction ``v`` of all floating inputs, the forward run in float64 (complex128)
      where it allows (else in its own dtype), ``h = cbrt(eps) * max(1, |x|)``; on a mismatch
      one such probe per input names the input. Skipped for ``surrogate`` rules. For an op
      type declared ``primitive(linear=...)`` in the inputs that need gradients (the FFTs),
      the *dot-product (adjoint) test* ``<g(dy), v> == <dy, f(v)>`` instead (the forward at
      ``v``: no step, only rounding between the two sides);
    - *JVP*: for an op type with a user JVP rule (``RegisterJVP``, ``custom_jvp``), ``<dy,
      jvp(v)>`` against the same central difference and ``<g(dy), v>`` (the dot-product test).

    ``<a, b>`` is ``Re(sum(a * conj(b)))`` (complex values as real pairs, tapegrad's
    convention). An op type declared with ``primitive(hermitian=...)`` (``eigh``, whose
    gradient is the symmetric one) is perturbed along symmetric (Hermitian) ``v`` at those
    inputs; one declared with ``primitive(gauge=...)`` (complex ``svd``, ``eigh``: singular
    vectors and eigenvectors defined up to phases) gets only gauge-invariant cotangents.
    Cost per checked call: 3 calls of the rule, 2 of the forward (2 more per input
    only when a check fails), one of the JVP rule. Off (the default), the reverse pass tests
    one flag per ``gradient`` call and nothing else.

    Args:
        rtol: relative tolerance, against the sum of the magnitudes of the terms compared;
            ``None``: by the rule's precision, 1e-5 (64-bit), 1e-3 (32-bit), 5e-2 (16-bit).
        atol: absolute tolerance added to it (default 0).
        calls: how many calls of each rule to check (a positive int).
        action: ``"raise"`` (:class:`~tapegrad.errors.GradientCheckError`) or ``"warn"``
            (:class:`~tapegrad.errors.GradientCheckWarning`).
        rules: ``"user"`` (rules defined outside tapegrad, and tapegrad's examples) or
            ``"all"``.

    Inside ``tg.function``: while the checks are on, the first call of each ``tg.function``
    that would trace a program runs eagerly instead (its Python once, as a trace would; its
    result the same), so the rules it runs are checked on that call's values; the next call
    traces and compiles. Not checked: rules that run on traced values (later calls, calls of
    functions compiled before the checks were turned on: run one eagerly,
    ``tg.config.run_functions_eagerly(True)``, to check them); records whose
    inputs were dropped (``RegisterGradient(reads="outputs")``: nothing to replay); calls that
    cannot be replayed (``tg.from_jax``). The environment variable
    ``TAPEGRAD_CHECK_GRADIENTS=1`` turns the mode on at import. Raises ``ValueError`` for a bad
    argument.
    """
    if action not in ("raise", "warn"):
        raise ValueError(f"enable_gradient_checks: action={action!r}; it must be 'raise' or "
                         "'warn'")
    if rules not in ("user", "all"):
        raise ValueError(f"enable_gradient_checks: rules={rules!r}; it must be 'user' (rules "
                         "defined outside tapegrad) or 'all'")
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise ValueError(f"enable_gradient_checks: calls={calls!r}; it must be a positive int "
                         "(how many calls of each rule to check)")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None and not (isinstance(tol, (int, float)) and tol >= 0):
            raise ValueError(f"enable_gradient_checks: {name}={tol!r}; it must be None or a "
                             "non-negative number")
    c = _CHECKS
    c.rtol, c.atol, c.calls, c.action, c.rules = rtol, atol, calls, action, rules
    c.counts, c.functions = {}, weakref.WeakSet()
    c.on = True


def disable_gradient_checks() -> None:
    """Turn the gradient-check mode off (``custom_gradient(check=True)`` still checks)."""
    _CHECKS.on = False


@contextlib.contextmanager
def gradient_checks(rtol=None, atol=None, calls: int = 1, action: str = "raise",
                    rules: str = "user"):
    """:func:`enable_gradient_checks` within a ``with`` block; the previous settings (on or
    off) are restored at its end. Arguments and errors are ``enable_gradient_checks``'s."""
    c = _CHECKS
    saved = (c.on, c.rtol, c.atol, c.calls, c.action, c.rules, c.counts, c.functions)
    enable_gradient_checks(rtol, atol, calls, action, rules)
    try:
        yield
    finally:
        c.on, c.rtol, c.atol, c.calls, c.action, c.rules, c.counts, c.functions = saved


def _is_user_rule(fn) -> bool:
    """Is ``fn`` (unwrapped) defined outside tapegrad, or in tapegrad's examples?"""
    module = getattr(inspect.unwrap(fn), "__module__", None) or ""
    if not module:
        return False
    return not (module == "tapegrad" or module.startswith("tapegrad.")) or module.startswith(
        "tapegrad.examples")


def _rule_key(fn):
    """What identifies a rule across calls: its code (a custom_gradient's grad_fn is a new
    closure at every call)."""
    f = inspect.unwrap(fn)
    return getattr(f, "__code__", f)


def _traced(op) -> bool:
    jax = config.loaded_jax()
    if jax is None:
        return False
    return any(isinstance(getattr(t, "_value", None), jax.core.Tracer)
               for t in (*op.inputs, *op.outputs) if isinstance(t, Tensor))


def _numpy(t):
    return _backend.to_numpy(t._value)


def _random(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _like(t, array):
    """``array`` (NumPy) as a Tensor on ``t``'s backend."""
    return _wrap(_backend.asarray(array, xp=_backend.namespace(t._value)))


def _inner(a, b) -> float:
    """``Re(sum(a * conj(b)))``, and the sum of ``|a| |b|`` (the scale of its rounding)."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.real(np.sum(a * np.conj(b)))), float(np.sum(np.abs(a) * np.abs(b)))


def _check_rule(fn, op, rtol, atol):
    """The message of the first check ``fn`` (the gradient of record ``op``) fails, or None."""
    inputs, outputs = op.inputs, op.outputs
    if any(getattr(x, "_dropped", False) for x in (*inputs, *outputs)):
        return None
    reach = _records._state.reach  # the inputs whose gradients this pass needs
    pos = [k for k, x in enumerate(inputs) if isinstance(x, Tensor) and op._in_ids[k] in reach
           and _backend.is_floating(x._value.dtype)]
    outs = [j for j, o in enumerate(outputs) if _backend.is_floating(o._value.dtype)]
    if not pos or not outs:
        return None
    view = OperationView(op)
    gdef = op._gdef
    dtypes = [_backend.np_dtype(inputs[k]._value.dtype) for k in pos] + [
        _backend.np_dtype(outputs[j]._value.dtype) for j in outs]
    bits = min(np.finfo(d).dtype.itemsize for d in dtypes)
    rtol = _RTOL.get(bits, 5e-2) if rtol is None else rtol
    atol = 0.0 if atol is None else atol
    where = f"op type {op.type!r} (its gradient {describe_fn(fn)})"
    rng = np.random.default_rng(0)
    zero = {j: np.zeros(tuple(outputs[j].shape), _backend.np_dtype(outputs[j]._value.dtype))
            for j in range(len(outputs))}

    def cotangent(us):
        return [_like(outputs[j], us.get(j, zero[j])) for j in range(len(outputs))]

    def grads(us):
        gs = view.gradient(*cotangent(us), needed=pos)
        return {k: np.zeros(inputs[k].shape) if gs[k] is None else _numpy(gs[k]) for k in pos}

    gauge = op._opdef.gauge  # outputs defined up to a gauge: gauge-invariant cotangents only

    def draw():
        u = {j: _random(rng, tuple(outputs[j].shape), zero[j].dtype) for j in outs}
        if gauge is None:
            return u
        us = gauge(view, cotangent(u))
        return {j: _numpy(us[j]) for j in outs}

    u1, u2 = draw(), draw()
    g1, g2 = grads(u1), grads(u2)
    g3 = grads({j: _A * u1[j] + u2[j] for j in outs})
    for k in pos:  # linearity in the cotangent
        want = _A * g1[k] + g2[k]
        got = g3[k]
        size = np.abs(_A * g1[k]) + np.abs(g2[k]) + np.abs(got)
        tol = atol + rtol * (size + 1e-3 * (size.max() if size.size else 0.0))
        bad = np.abs(got - want) - tol
        if bad.size and bad.max() > 0:
            i = np.unravel_index(int(np.argmax(bad)), bad.shape)
            at = f"[{', '.join(map(str, i))}]" if i else ""
            return (f"gradient check: the gradient of {where} is not linear in its cotangent "
                    f"dy at input {k} {op._opdef.param_name(k)!r}: g(a*dy1 + dy2){at} = "
                    f"{got[i]:.9g} but a*g(dy1){at} + g(dy2){at} = {want[i]:.9g} (a = {_A}, "
                    f"random dy1, dy2; tolerance rtol={rtol:g}, atol={atol:g}). A gradient is a "
                    "vector-Jacobian product: it must be linear in dy (a term without dy, such "
                    "as '+ 0.1 * x', is not). " + _SUGGEST)
    v = {k: _random(rng, tuple(inputs[k].shape), _backend.np_dtype(inputs[k]._value.dtype))
         for k in pos}
    for k in op._opdef.hermitian & set(pos):  # a symmetric gradient: symmetric directions
        v[k] = (v[k] + np.conj(np.swapaxes(v[k], -1, -2))) / 2
    probe = _Probe(view, inputs, outs, u1, v)
    if probe.fd is None:
        return None  # the forward cannot be replayed: nothing to compare with
    if not gdef.surrogate and set(pos) <= op._opdef.linear:  # the dot-product (adjoint) test
        lhs, scale = _sum_inner(g1, v, pos)
        rhs, f_scale = probe.at(v)
        if abs(lhs - rhs) > atol + rtol * (scale + f_scale):
            return (f"gradient check: the gradient of {where}, declared linear, fails the "
                    f"dot-product (adjoint) test along a random direction v: <g(dy), v> = "
                    f"{lhs:.9g} but <dy, f(v)> = {rhs:.9g} (the forward at v, in "
                    f"{probe.precision}; tolerance rtol={rtol:g}, atol={atol:g}): the gradient "
                    "is not the adjoint of the forward. " + _SUGGEST)
    elif not gdef.surrogate:
        lhs, scale = _sum_inner(g1, v, pos)
        rhs, fd_scale = probe.fd
        if abs(lhs - rhs) > atol + rtol * (scale + fd_scale + probe.noise):
            k, lhs, rhs = ((pos[0], lhs, rhs) if len(pos) == 1 else
                           probe.localize(g1, pos, rtol, atol) or ("all", lhs, rhs))
            name = "every floating input" if k == "all" else (
                f"input {k} {op._opdef.param_name(k)!r}")
            return (f"gradient check: the gradient of {where} disagrees with a central "
                    f"difference of the forward at {name}, along a random direction v: "
                    f"<g(dy), v> = {lhs:.9g} but <dy, (f(x+h*v) - f(x-h*v))/(2h)> = {rhs:.9g} "
                    f"(h = {probe.h:.3g}, the forward in {probe.precision}; tolerance "
                    f"rtol={rtol:g}, atol={atol:g}). " + _SUGGEST)
    jvp = gdef.jvp
    if jvp is not None and (_CHECKS.rules == "all" or _is_user_rule(jvp)):
        tangents = [_like(inputs[k], v[k]) if k in v else None for k in range(len(inputs))]
        res = jvp(op, *tangents)
        if res is NotImplemented:
            return None
        res = list(res) if isinstance(res, (tuple, list)) else [res]
        lhs, scale = 0.0, 0.0
        for j in outs:
            if j < len(res) and res[j] is not None:
                a, s = _inner(u1[j], _numpy(res[j]))
                lhs, scale = lhs + a, scale + s
        rhs, fd_scale = probe.fd
        vjp, vjp_scale = _sum_inner(g1, v, pos)
        if abs(lhs - rhs) > atol + rtol * (scale + fd_scale + probe.noise):
            return (f"gradient check: the JVP rule {describe_fn(jvp)} of op type {op.type!r} "
                    f"disagrees with a central difference of the forward along a random "
                    f"direction v: <dy, jvp(v)> = {lhs:.9g} but <dy, (f(x+h*v) - f(x-h*v))/(2h)>"
                    f" = {rhs:.9g}, and <g(dy), v> = {vjp:.9g} from its gradient "
                    f"{describe_fn(fn)} (h = {probe.h:.3g}; tolerance rtol={rtol:g}, "
                    f"atol={atol:g}). " + _SUGGEST)
    return None


_SUGGEST = ("Run tg.test.check_gradients on the function for the full report; turn these "
            "checks off with tg.debugging.disable_gradient_checks()")


def _sum_inner(g, v, pos):
    total, scale = 0.0, 0.0
    for k in pos:
        a, s = _inner(g[k], v[k])
        total, scale = total + a, scale + s
    return total, scale


class _Probe:
    """Central differences of a record's forward along directions of its floating inputs:
    ``fd`` is ``(<u, (f(x+hv) - f(x-hv))/2h>, its scale)`` along ``v`` (all inputs), or None
    when the forward cannot be replayed."""

    def __init__(self, view, inputs, outs, u, v):
        self.view, self.inputs, self.outs, self.u, self.v = view, inputs, outs, u, v
        self.fd = None
        for wide in (True, False):  # float64 copies first, else the inputs' own dtype
            try:
                self.fd = self._along(v, wide)
            except Exception:  # noqa: BLE001 - a forward that refuses the copies: try the next
                continue
            if self.fd is not None:
                return

    def _along(self, v, wide):
        xs = {k: _numpy(self.inputs[k]) for k in v}
        if wide:
            xs = {k: x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
                  for k, x in xs.items()}
        eps = max(np.finfo(x.dtype).eps for x in xs.values())
        big = max([1.0, *[float(np.max(np.abs(x))) for x in xs.values() if x.size]])
        h = np.cbrt(eps) * big
        ys = []
        for sign in (1.0, -1.0):
            args = list(self.inputs)
            for k, x in xs.items():
                args[k] = _like(self.inputs[k], x + sign * h * v[k])
            out = [t for t in tree_leaves(self.view.forward(*args)) if isinstance(t, Tensor)]
            if len(out) != len(self.view.outputs):
                return None
            ys.append({j: _numpy(out[j]) for j in self.outs})
        if wide and any(np.finfo(y.dtype).eps > eps for y in ys[0].values()):
            return None  # the forward computed in a lower precision: use the inputs' own
        self.h, self.precision = h, "float64" if wide else "the inputs' dtype"
        total, scale, noise = 0.0, 0.0, 0.0
        for j in self.outs:
            a, s = _inner(self.u[j], (ys[0][j] - ys[1][j]) / (2 * h))
            total, scale = total + a, scale + s
            noise += 100 * eps / h * float(np.sum(np.abs(self.u[j]) * (
                np.abs(ys[0][j]) + np.abs(ys[1][j]))))
        self.noise = noise
        return total, scale

    def at(self, v):
        """``(<u, f(v)>, its scale)``: the forward with the inputs of ``v`` replaced by ``v``
        (in the precision the central difference used): for a linear forward, the adjoint
        test's side."""
        args = list(self.inputs)
        for k, x in v.items():
            x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64) \
                if self.precision == "float64" else x.astype(_numpy(self.inputs[k]).dtype)
            args[k] = _like(self.inputs[k], x)
        out = [t for t in tree_leaves(self.view.forward(*args)) if isinstance(t, Tensor)]
        total, scale = 0.0, 0.0
        for j in self.outs:
            a, s = _inner(self.u[j], _numpy(out[j]))
            total, scale = total + a, scale + s
        return total, scale

    def localize(self, g, pos, rtol, atol):
        """``(k, <g_k, v_k>, fd along v_k)`` of the input whose probe fails, or None."""
        wide = self.precision == "float64"
        for k in pos:
            fd = self._along({k: self.v[k]}, wide)
            if fd is None:
                return None
            lhs, scale = _inner(g[k], self.v[k])
            if abs(lhs - fd[0]) > atol + rtol * (scale + fd[1] + self.noise):
                return k, lhs, fd[0]
        return None


if os.environ.get("TAPEGRAD_CHECK_GRADIENTS", "") not in ("", "0"):
    enable_gradient_checks()
