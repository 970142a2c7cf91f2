"""Explaining and drawing a tape: ``explain``, ``to_dot``, ``graph``, ``draw``.

``explain(tape, target, sources)`` says for each source why its gradient is what it is: the
shortest chain of recorded ops that connects it to the target, or why it is unconnected (not
watched, an integer result on the way, ``stop_gradient``, a non-differentiable op, a target
computed outside the tape). ``to_dot`` writes the recorded ops that lead to the target as
Graphviz DOT text; ``graph`` wraps that text in a :class:`Graph` that Jupyter shows inline and
that renders to SVG, PNG or PDF with Graphviz's ``dot`` program (``apt-get install graphviz``
on Debian/Ubuntu, ``brew install graphviz`` on macOS); ``draw`` renders straight to a file.

Everything here reads the tape's public records (``tape.operations``, read-only
``OperationView`` objects), walking them by tensor id; nothing runs an op. A non-persistent
tape frees its records in ``gradient``: explain or draw first. ``GradientTape.explain`` and
``GradientTape.to_dot`` are this module's functions, attached to the tape class here.
"""
from __future__ import annotations

import inspect
import pathlib
import re
import shutil
import subprocess
from collections import deque
from typing import NamedTuple

from . import _backend, _structural
from ._tape import GradientTape
from ._tensor import Tensor
from ._variables import Variable

INSTALL_HINT = ("install Graphviz, which provides the `dot` program: `sudo apt-get install "
                "graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) or `conda install "
                "graphviz`")

_FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": None, ".gv": None}

# colours of the picture (a legend is printed under it)
_OP_FILL, _CUSTOM_FILL, _CUSTOM_LINE = "#e7eef8", "#ffd8a8", "#e8590c"
_NODIFF_FILL, _SOURCE_FILL, _TARGET_FILL, _RED = "#eeeeee", "#d3f9d8", "#fff3bf", "#e03131"
_EDGE = re.compile(r"\s*\w+ -> \w+")  # an edge line of the DOT text


class GraphvizNotFoundError(RuntimeError):
    """Rendering needs Graphviz's ``dot`` program, which is not installed (not on ``PATH``)."""


# --- the records, indexed by tensor id -----------------------------------------------------------
class _Spec(NamedTuple):
    """Shape and dtype of a recorded tensor (what the records API gives of it)."""

    shape: tuple
    dtype: object


class _Records:
    """The ops of a tape with, per tensor id, the op that produced it and the ops that read it."""

    def __init__(self, tape):
        if tape.released:
            raise RuntimeError(
                "this GradientTape's records were released by its gradient (or jacobian) call; "
                "call explain/to_dot/draw before tape.gradient, or create the tape with "
                "GradientTape(persistent=True)")
        self.tape = tape
        self.traced = tape.traced_ids
        self.ops = list(tape.operations)
        self.producer = {}  # tensor id -> (op index, output position)
        self.consumers = {}  # tensor id -> [(op index, input position)]
        self.tensors = {}  # tensor id -> its _Spec
        for i, op in enumerate(self.ops):
            for k, (tid, shape, dtype) in enumerate(zip(op.input_ids, op.input_shapes,
                                                        op.input_dtypes)):
                if tid is not None:
                    self.consumers.setdefault(tid, []).append((i, k))
                    self.tensors.setdefault(tid, _Spec(shape, dtype))
            for k, (tid, shape, dtype) in enumerate(zip(op.output_ids, op.output_shapes,
                                                        op.output_dtypes)):
                self.producer[tid] = (i, k)
                self.tensors[tid] = _Spec(shape, dtype)

    def recorded(self, tid) -> bool:
        """Is the tensor traced by the tape (watched, or the output of a recorded op)?"""
        return tid in self.producer or tid in self.traced

    def forward_path(self, start, goals, differentiable):
        """Shortest chain of ``(op index, input id, output id)`` steps from ``start`` to a goal id.

        ``differentiable``: follow only what carries a gradient (floating inputs and outputs of
        ops that have a gradient); otherwise follow every recorded tensor. Returns ``None`` if no
        goal is reachable, ``[]`` if ``start`` is a goal.
        """
        if start in goals:
            return []
        parent = {start: None}
        queue = deque([start])
        while queue:
            tid = queue.popleft()
            for i, k in self.consumers.get(tid, ()):
                op = self.ops[i]
                if differentiable and (op.input_ids[k] != tid or not op.differentiable):
                    continue
                for out in (op.floating_output_ids if differentiable else op.output_ids):
                    if out in parent:
                        continue
                    parent[out] = (i, tid)
                    if out in goals:
                        steps = []
                        while parent[out] is not None:
                            i, prev = parent[out]
                            steps.append((i, prev, out))
                            out = prev
                        return steps[::-1]
                    queue.append(out)
        return None

    def reach(self, start):
        """Op indices reachable from ``start`` along differentiable steps (first reads included)."""
        seen, ops, queue = {start}, [], deque([start])
        while queue:
            tid = queue.popleft()
            for i, k in self.consumers.get(tid, ()):
                op = self.ops[i]
                if op.input_ids[k] != tid:
                    continue
                ops.append(i)
                if not op.differentiable:
                    continue
                for out in op.floating_output_ids:
                    if out not in seen:
                        seen.add(out)
                        queue.append(out)
        return sorted(set(ops))

    def ancestors(self, tids):
        """Indices of the recorded ops whose outputs lead to any of ``tids`` (every input)."""
        seen, found, stack = set(tids), set(), list(tids)
        while stack:
            p = self.producer.get(stack.pop())
            if p is None or p[0] in found:
                continue
            found.add(p[0])
            for tid in self.ops[p[0]].input_ids:
                if tid is not None and tid not in seen:
                    seen.add(tid)
                    stack.append(tid)
        return found


def _dtype(t) -> str:
    return t.dtype.name


def _blocker(records, i, out):
    """Why op ``i`` passes no gradient on to its output ``out``: ``(phrase, a few words)``."""
    op = records.ops[i]
    if out not in op.floating_output_ids:
        dtype = _dtype(records.tensors[out])
        if op.type == "Cast":
            return (f"passes through Cast to {dtype}, which carries no gradient",
                    f"blocked by Cast to {dtype}")
        return (f"passes through {op.type}, whose {dtype} result carries no gradient",
                f"blocked by {op.type}")
    if op.gradient_type == "StopGradient":
        return ("passes through StopGradient (tg.stop_gradient), which blocks the gradient",
                "blocked by StopGradient")
    hint = ("; wrap the call in tg.custom_gradient to give it a gradient"
            if op.gradient_type == "NumpyFunction" else "")
    return (f"passes through the non-differentiable op {op.gradient_type!r}{hint}",
            f"blocked by {op.gradient_type}")


# --- explain -------------------------------------------------------------------------------------
class SourceExplanation:
    """Why one source's gradient is what it is.

    Attributes: ``name``, ``source`` (the Tensor), ``connected`` (bool: the gradient is a
    tensor), ``path`` (op types from the source to the target, connected sources only),
    ``reason`` (the sentence after ``name:``) and ``short`` (a few words, for pictures).
    """

    __slots__ = ("name", "source", "connected", "path", "reason", "short", "_ops")

    def __init__(self, name, source, connected, reason, short, path=(), ops=()):
        self.name, self.source, self.connected = name, source, connected
        self.reason, self.short, self.path, self._ops = reason, short, tuple(path), tuple(ops)

    def __str__(self):
        return f"{self.name}: {self.reason}"

    def __repr__(self):
        return f"<SourceExplanation {self}>"


class Explanation(tuple):
    """One :class:`SourceExplanation` per source, in the order of the sources.

    ``str()`` gives one line per source; ``explanation["w1"]`` looks an entry up by name.
    """

    def __new__(cls, entries, header=""):
        self = super().__new__(cls, entries)
        self.header = header
        return self

    def __getitem__(self, key):
        if isinstance(key, str):
            for e in self:
                if e.name == key:
                    return e
            raise KeyError(f"no source named {key!r}; the sources are "
                           f"{', '.join(repr(e.name) for e in self)}")
        return super().__getitem__(key)

    def __str__(self):
        lines = [self.header, *(f"  {e}" for e in self)] if self.header else map(str, self)
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def _flatten_named(sources, prefix=None):
    """``[(name, tensor)]`` for a Tensor or a (nested) list, tuple or dict of them."""
    if isinstance(sources, dict):
        return [item for k, v in sources.items()
                for item in _flatten_named(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(sources, (list, tuple)):
        return [item for k, v in enumerate(sources)
                for item in _flatten_named(v, f"{prefix or 'sources'}[{k}]")]
    if isinstance(sources, Variable) and (prefix is None or prefix.startswith("sources")):
        return [(sources.name, sources)]
    return [(prefix or "source", sources)]


def _targets(target):
    flat = [t for _, t in _flatten_named(target)]
    for t in flat:
        if not isinstance(t, Tensor):
            raise TypeError(f"the target must be a Tensor (or a list of them), got "
                            f"{type(t).__name__}")
    return flat


def _path_text(types) -> str:
    types = list(types)
    if len(types) > 12:
        types = [*types[:5], f"... ({len(types) - 9} more) ...", *types[-4:]]
    return " -> ".join([*types, "(target)"])


def _explain_one(records, name, s, goals, goal_ops):
    tape = records.tape
    if not isinstance(s, Tensor):
        raise TypeError(f"explain: the source {name!r} is a {type(s).__name__}, not a Tensor "
                        "or Variable")
    sid = s.id
    if not _backend.is_floating(s.dtype):
        return SourceExplanation(
            name, s, False, f"unconnected — its dtype {_dtype(s)} carries no gradient (only "
            "floating tensors are traced); cast it with tg.astype before the tape uses it",
            f"dtype {_dtype(s)}")
    if sid not in records.traced:
        if isinstance(s, Variable):
            if not tape.watch_accessed_variables:
                extra = "; it also has trainable=False" if not s.trainable else ""
                return SourceExplanation(
                    name, s, False, f"unconnected — Variable {s.name!r} was not watched "
                    f"(watch_accessed_variables=False; call tape.watch({s.name})){extra}",
                    "not watched")
            if not s.trainable:
                return SourceExplanation(
                    name, s, False, f"unconnected — Variable {s.name!r} has trainable=False, "
                    f"so the tape did not watch it (call tape.watch({s.name}) to trace it)",
                    "trainable=False")
            return SourceExplanation(
                name, s, False, f"unconnected — not used by any recorded op (Variable "
                f"{s.name!r} was not read inside the tape's block)", "not used")
        used = [records.ops[i].type for i, _ in records.consumers.get(sid, ())]
        extra = f"; {', '.join(dict.fromkeys(used))} read it as a constant" if used else ""
        return SourceExplanation(
            name, s, False, f"unconnected — it was not watched (call tape.watch({name}) inside "
            f"the tape's block; an unwatched tensor is a constant to the tape){extra}",
            "not watched")
    steps = records.forward_path(sid, goals, differentiable=True)
    if steps is not None:
        ops = [records.ops[i] for i, _, _ in steps]
        types = [op.type for op in ops]
        reason = ("connected: it is the target" if not steps else
                  f"connected through {_path_text(types)}")
        missing = sorted({records.ops[i].type for i in records.reach(sid) if i in goal_ops
                          and records.ops[i].gradient_function is None
                          and records.ops[i].differentiable})
        if missing:
            reason += (f"; but op type(s) {', '.join(map(repr, missing))} have no registered "
                       "gradient, so tape.gradient will raise (register one with "
                       "tg.RegisterGradient)")
        return SourceExplanation(name, s, True, reason, "connected", types,
                                 [i for i, _, _ in steps])
    steps = records.forward_path(sid, goals, differentiable=False)
    if steps is not None:  # recorded, but every path has a step without gradient
        for n, (i, prev, out) in enumerate(steps):
            op = records.ops[i]
            if not (op.differentiable and out in op.floating_output_ids
                    and prev in op.input_ids):
                phrase, short = _blocker(records, i, out)
                return SourceExplanation(
                    name, s, False, f"unconnected — its path to the target {phrase}", short,
                    ops=[j for j, _, _ in steps[:n + 1]])
    for i in records.reach(sid):  # the tape stops tracing at integer and boolean results
        op = records.ops[i]
        for out in op.output_ids:
            if out not in op.floating_output_ids:
                phrase, short = _blocker(records, i, out)
                path = records.forward_path(sid, {out}, differentiable=False) or []
                return SourceExplanation(
                    name, s, False, f"unconnected — its path to the target {phrase} (the tape "
                    "does not trace integer or boolean results)", short,
                    ops=[j for j, _, _ in path])
    left = _conversion(records, sid)
    if left is not None:
        return SourceExplanation(
            name, s, False, f"unconnected — {left}; what was computed from the NumPy array "
            "carries no gradient (use tapegrad functions instead of NumPy or a library that "
            "computes with NumPy)", "left the tape for NumPy")
    if not any(records.recorded(g) for g in goals):
        return SourceExplanation(
            name, s, False, "unconnected — the target was computed outside the tape (or from "
            "no watched tensor)", "target not recorded")
    if sid not in records.consumers:
        return SourceExplanation(name, s, False, "unconnected — not used by any recorded op",
                                 "not used")
    used = ", ".join(dict.fromkeys(records.ops[i].type for i in records.reach(sid)))
    return SourceExplanation(
        name, s, False, f"unconnected — the target does not depend on it (its recorded uses, "
        f"{used}, do not lead to the target)", "does not lead to the target")


def _conversion(records, sid):
    """Where the source ``sid``, or a tensor computed from it, was converted to NumPy."""
    conversions = records.tape.conversions
    if not conversions:
        return None
    if sid in conversions:
        return f"it was converted to a NumPy array at {conversions[sid]}"
    reached = {sid}
    for i in records.reach(sid):
        reached.update(records.ops[i].floating_output_ids)
    for tid, site in conversions.items():
        if tid in reached:
            return f"a tensor computed from it was converted to a NumPy array at {site}"
    return None


def explain(tape, target, sources) -> Explanation:
    """Why each source's gradient (``tape.gradient(target, sources)``) is what it is.

    Args:
        tape: a :class:`~tapegrad.GradientTape` whose records are still held (call this before
            ``tape.gradient`` on a non-persistent tape).
        target: a Tensor, or a list of Tensors (their gradients are summed).
        sources: a Tensor/Variable, or a list, tuple or dict of them; entries are named by dict
            key, else by Variable name, else ``sources[i]``. Pass ``{"x": x}`` to name a tensor.

    Returns an :class:`Explanation`: one entry per source, e.g.
    ``x: connected through Mul -> Sum -> (target)`` (the shortest chain of recorded ops) or
    ``w: unconnected — Variable 'w' was not watched (...)``. Unconnected reasons: a non-floating
    dtype, not watched (Variable with ``watch_accessed_variables=False`` or ``trainable=False``,
    a tensor without ``tape.watch``), a path through an integer/boolean result (``Cast to
    int64``, a comparison), through ``StopGradient`` or another non-differentiable op, a target
    computed outside the tape, a source no recorded op used.

    Raises ``RuntimeError`` if the tape's records were released by ``gradient``, ``TypeError``
    if the target or a source is not a Tensor.
    """
    records = _Records(tape)
    ts = _targets(target)
    goals = {t.id for t in ts}
    goal_ops = records.ancestors(goals)
    entries = [_explain_one(records, name, s, goals, goal_ops)
               for name, s in _flatten_named(sources)]
    what = (f"shape {ts[0].shape}, {_dtype(ts[0])}" if len(ts) == 1 else f"{len(ts)} tensors")
    header = (f"Gradient of the target ({what}) from {len(records.ops)} recorded op(s); for "
              "each source:")
    return Explanation(entries, header)


# --- DOT text ------------------------------------------------------------------------------------
def _q(*lines) -> str:
    """A quoted DOT string whose lines are ``lines``."""
    esc = [str(x).replace("\\", "\\\\").replace('"', '\\"') for x in lines]
    return '"' + "\\n".join(esc) + '"'


def _attrs(**kw) -> str:
    kw = " ".join(f"{k}={v}" for k, v in kw.items() if v is not None)
    return f" [{kw}]" if kw else ""


def _sd(t) -> str:
    """``(32, 10) float32``: shape and dtype of a tensor (or of a recorded one's _Spec)."""
    return f"{tuple(t.shape)} {_dtype(t)}"


def _kind(op) -> str | None:
    """``custom_gradient`` / ``user gradient`` / ``gradient of X`` for highlighted ops."""
    if op.is_overridden:
        return f"gradient of {op.gradient_type}"
    if op.is_custom:
        return "custom_gradient"
    grad = op.gradient_function
    if grad is not None:
        module = getattr(inspect.unwrap(grad), "__module__", "") or ""
        if not module.startswith("tapegrad.") or module.startswith("tapegrad.examples"):
            return "user gradient"
    return None


def to_dot(tape, target, sources=None) -> str:
    """The recorded ops that lead to ``target``, as Graphviz DOT text (a ``digraph``).

    Op nodes (boxes) show the op type and each output's shape and dtype; ops with a custom
    gradient (``custom_gradient``, a gradient registered outside tapegrad, or one chosen by
    ``gradient_override_map``) are orange, ops without gradient grey. Tensors that no recorded
    op produced are ellipses: sources (green; named as in :func:`explain`), other watched
    tensors and Variables, and constants (small grey text). Dashed grey edges carry integer or
    boolean values. Unconnected sources are dashed red, with the reason (and the op that
    blocked them); the target is a double ellipse.

    ``sources``: as in :func:`explain`, or ``None`` (draw the watched tensors without verdicts).
    Raises ``RuntimeError`` if the tape's records were released by ``gradient``.
    """
    records = _Records(tape)
    targets = _targets(target)
    goals = {t.id for t in targets}
    named = _flatten_named(sources) if sources is not None else []
    keep = records.ancestors(goals)
    verdicts = {}
    for name, s in named:
        verdicts.setdefault(s.id, _explain_one(records, name, s, goals, keep))
    blockers = set()
    for e in verdicts.values():
        if not e.connected and e._ops:
            keep.update(e._ops)
            blockers.add(e._ops[-1])
    order = sorted(keep)
    lines = ["digraph tape {",
             '  graph [rankdir=TB fontname="Helvetica" fontsize=10 labelloc=b nodesep=0.3 '
             'ranksep=0.35 label="orange: custom gradient   grey: no gradient   dashed red: '
             'unconnected source   dashed edge: integer/boolean value"];',
             '  node [fontname="Helvetica" fontsize=11 style=filled];',
             '  edge [color="#555555" arrowsize=0.7];']
    leaves = {}  # tensor id -> node name
    variables = {v.id: v for v in tape.watched_variables()}

    def leaf(tid):
        if tid in leaves:
            return leaves[tid]
        node = leaves[tid] = f"t{tid}"
        t = records.tensors.get(tid)
        e = verdicts.get(tid)
        var = variables.get(tid)
        if e is not None:
            label = [e.name, _sd(e.source)]
            if e.connected:
                lines.append(f"  {node}" + _attrs(label=_q(*label), shape="ellipse",
                                                   fillcolor=_q(_SOURCE_FILL), tooltip=_q(e)))
            else:
                lines.append(f"  {node}" + _attrs(
                    label=_q(*label, f"unconnected: {e.short}"), shape="ellipse",
                    style='"filled,dashed"', color=_q(_RED), fontcolor=_q(_RED), penwidth=1.5,
                    fillcolor='"#fff5f5"', tooltip=_q(e)))
        elif tid in records.traced:
            label = [var.name if var is not None else "watched", _sd(t)]
            lines.append(f"  {node}" + _attrs(label=_q(*label), shape="ellipse",
                                               fillcolor='"#ebfbee"'))
        else:
            lines.append(f"  {node}" + _attrs(label=_q("constant " + _sd(t)), shape="plain",
                                               fontsize=9, fontcolor='"#666666"',
                                               style='""'))
        return node

    for i in order:
        op = records.ops[i]
        kind = _kind(op)
        title = op.type
        if op.type.startswith("CustomGradient:"):
            title = op.type.split(":", 1)[1]
        label = [title, *([kind] if kind else [])]
        outs = [records.tensors[o] for o in op.output_ids]
        ins = [records.tensors[t] if t is not None else a
               for t, a in zip(op.input_ids, op.inputs)]
        label += [("[%d] " % k if len(outs) > 1 else "") + _sd(o) for k, o in enumerate(outs)]
        attrs = dict(label=_q(*label), shape="box", fillcolor=_q(_OP_FILL),
                     style='"rounded,filled"', tooltip=_q(f"{op.name}: " + ", ".join(
                         _sd(a) if isinstance(a, _Spec) else repr(a) for a in ins)
                         + " -> " + ", ".join(_sd(o) for o in outs)))
        if kind:
            attrs.update(fillcolor=_q(_CUSTOM_FILL), color=_q(_CUSTOM_LINE), penwidth=2)
        if not op.differentiable:
            attrs.update(fillcolor=_q(_NODIFF_FILL), fontcolor='"#555555"',
                         label=_q(*label[:1], "no gradient", *label[1:]))
        if i in blockers:
            attrs.update(color=_q(_RED), penwidth=2)
        lines.append(f"  op{i}" + _attrs(**attrs))
        for tid in op.input_ids:
            if tid is None:
                continue
            p = records.producer.get(tid)
            src = f"op{p[0]}" if p is not None and p[0] in keep else leaf(tid)
            style = None if _backend.is_floating(records.tensors[tid].dtype) else '"dashed"'
            lines.append(f"  {src} -> op{i}" + _attrs(style=style, color=(
                '"#aaaaaa"' if style else None)))
    for name, s in named:
        leaf(s.id)  # sources the kept ops do not read: isolated, with their verdict
    for n, t in enumerate(targets):
        node = f"target{n}"
        recorded = records.recorded(t.id)
        label = ["target" if len(targets) == 1 else f"target {n}", _sd(t)]
        if not recorded:
            label.append("(not recorded on the tape)")
        lines.append(f"  {node}" + _attrs(label=_q(*label), shape="ellipse", peripheries=2,
                                           fillcolor=_q(_TARGET_FILL),
                                           style=None if recorded else '"filled,dashed"'))
        p = records.producer.get(t.id)
        if p is not None:
            lines.append(f"  op{p[0]} -> {node}")
        elif recorded or t.id in verdicts:
            lines.append(f"  {leaf(t.id)} -> {node}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- rendering -----------------------------------------------------------------------------------
def _dot_program() -> str:
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizNotFoundError(
            "rendering a graph needs Graphviz's `dot` program, which is not on PATH; "
            f"{INSTALL_HINT}. Without it, tg.viz.to_dot (or tape.to_dot) still gives the DOT text")
    return dot


class Graph:
    """A Graphviz graph given by its DOT text: ``.source``, ``.pipe(fmt)``, ``.render(path)``.

    In Jupyter it displays inline as SVG (``_repr_svg_``); without Graphviz installed it shows
    its text representation, which says how to install it.
    """

    def __init__(self, source: str):
        if not isinstance(source, str):
            raise TypeError(f"Graph: source must be DOT text (str), got {type(source).__name__}")
        self.source = source
        self._svg = None

    def pipe(self, format: str = "svg") -> bytes:  # noqa: A002 - graphviz's name
        """The graph rendered by ``dot -T<format>`` (``svg``, ``png``, ``pdf``...), as bytes.

        Raises :class:`GraphvizNotFoundError` (a ``RuntimeError``) naming the install command
        if ``dot`` is missing, ``RuntimeError`` with dot's message if dot fails.
        """
        dot = _dot_program()
        proc = subprocess.run([dot, f"-T{format}"], input=self.source.encode(),
                              capture_output=True, timeout=120)
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"Graphviz `dot -T{format}` failed (exit status "
                               f"{proc.returncode}): {err}")
        return proc.stdout

    def render(self, path) -> pathlib.Path:
        """Write the picture to ``path``; its suffix picks the format.

        ``.svg``, ``.png``, ``.pdf`` run ``dot``; ``.dot``/``.gv`` write the DOT text (no
        Graphviz needed). Returns the path. Raises ``ValueError`` for another suffix, and the
        errors of :meth:`pipe`.
        """
        path = pathlib.Path(path)
        suffix = path.suffix.lower()
        if suffix not in _FORMATS:
            raise ValueError(f"cannot render to {str(path)!r}: unknown suffix {path.suffix!r}; "
                             f"use one of {', '.join(_FORMATS)}")
        fmt = _FORMATS[suffix]
        data = self.source.encode() if fmt is None else self.pipe(fmt)
        path.write_bytes(data)
        return path

    def _repr_svg_(self):
        if shutil.which("dot") is None:
            return None  # IPython then shows __repr__, which carries the install hint
        if self._svg is None:
            self._svg = self.pipe("svg").decode()
        return self._svg

    def __str__(self):
        return self.source

    def __repr__(self):
        n = sum(1 for ln in self.source.splitlines() if _EDGE.match(ln))
        hint = "" if shutil.which("dot") else f"; to see it, {INSTALL_HINT}"
        return f"<tg.viz.Graph: {n} edge(s); .source holds the DOT text{hint}>"


def graph(tape, target, sources=None) -> Graph:
    """The recorded ops leading to ``target`` (see :func:`to_dot`) as a :class:`Graph`."""
    return Graph(to_dot(tape, target, sources))


def draw(tape, target, path, sources=None) -> pathlib.Path:
    """Render the recorded ops leading to ``target`` to ``path`` (``.svg``, ``.png``, ``.pdf``,
    or ``.dot`` for the text); returns the path. Errors as :meth:`Graph.render`."""
    return graph(tape, target, sources).render(path)


__all__ = ["explain", "to_dot", "graph", "draw", "Graph", "Explanation", "SourceExplanation",
           "GraphvizNotFoundError", "INSTALL_HINT"]


_structural.extend(explain=explain, to_dot=to_dot)
