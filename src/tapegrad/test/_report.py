"""Report text: the custom-gradient report (:class:`OpCheck`, :class:`CustomGradientReport`),
the table of worst Jacobian elements, notes, and locating an element in the outputs."""
from __future__ import annotations

import numpy as np


class SurrogateGradientWarning(UserWarning):
    """A gradient declared ``surrogate=True`` differs from the derivative (reported, not failed)."""


def promotion_note(promoted) -> list:
    by_dtype = {}
    for p, name in promoted.items():
        by_dtype.setdefault(name, []).append(str(p))
    return [f"{name} inputs were promoted to "
            f"{'complex128' if name.startswith('complex') else 'float64'} for this check "
            f"(input{'s' if len(ps) > 1 else ''} {', '.join(ps)})"
            for name, ps in by_dtype.items()]


def unravel(index, shape) -> tuple:
    return tuple(int(t) for t in np.unravel_index(index, shape))


def row_shape(y) -> tuple:
    """The shape of an output's Jacobian rows: a complex output adds an axis (real, imag)."""
    return tuple(y.shape) + ((2,) if y.dtype.kind == "c" else ())


def locate(row, out_shapes):
    """``(output number, element index)`` of ``row`` in the concatenated flat outputs."""
    o, r = 0, row
    while r >= int(np.prod(out_shapes[o])):
        r -= int(np.prod(out_shapes[o]))
        o += 1
    return o, unravel(r, out_shapes[o])


def _rel(a, n) -> float:
    d = abs(a - n)
    if n != 0:
        return d / abs(n)
    return 0.0 if d == 0 else float("inf")


def table(rows, n_bad, size, x_shape, out_cell) -> list:
    worst = f"; the worst {len(rows)}" if n_bad > len(rows) else ""
    lines = [f"  {n_bad} of {size} Jacobian elements outside the tolerance{worst}:",
             f"    {'input index':<14} {'output index':<18} {'analytic':>15} {'numeric':>15} "
             f"{'abs err':>10} {'rel err':>10}"]
    for row, col, a, n, tol, kink in rows:
        line = (f"    {str(unravel(col, x_shape)):<14} {out_cell(row):<18} {a:>15.8g} "
                f"{n:>15.8g} {abs(a - n):>10.3g} {_rel(a, n):>10.3g}")
        lines.append(line + (f"   <- {kink}" if kink else ""))
    return lines


class OpCheck:
    """The contract check of one recorded op: ``status`` is ``"passed"``, ``"surrogate"``
    (a declared surrogate that differs from the derivative: reported, not failed) or
    ``"failed"``; ``problems`` (why it failed), ``notes`` (what was reported)."""

    def __init__(self, number, op_type, where, surrogate):
        self.number, self.op_type, self.where = number, op_type, where
        self.surrogate = surrogate
        self.problems, self.notes = [], []
        self.differs = False  # a declared surrogate that differs from a true gradient

    @property
    def status(self) -> str:
        if self.problems:
            return "failed"
        if self.differs:
            return "surrogate"
        return "passed"

    def lines(self) -> list:
        """This check's report as lines of text: a status line, then one per problem."""
        head = {"failed": "FAILED", "surrogate": "surrogate", "passed": "passed"}[self.status]
        text = [f"  {head:<9} op {self.number}: {self.op_type}"
                + (f", gradient {self.where}" if self.where else "")
                + (" (declared surrogate=True)" if self.surrogate else "")]
        text += [f"      - {p}" for p in self.problems]
        text += [f"      - {n}" for n in self.notes]
        return text


class CustomGradientReport:
    """What :func:`check_custom_gradient` found: ``ops`` (one :class:`OpCheck` per recorded
    custom op, in execution order), ``failed`` and ``surrogates`` (subsets of ``ops``),
    ``seed``. ``str(report)`` is the readable report."""

    def __init__(self, title, seed, ops, notes=()):
        self.title, self.seed, self.ops, self.notes = title, seed, list(ops), list(notes)

    @property
    def failed(self) -> list:
        return [c for c in self.ops if c.status == "failed"]

    @property
    def surrogates(self) -> list:
        return [c for c in self.ops if c.status == "surrogate"]

    def __str__(self):
        if not self.ops:
            return (f"{self.title}: no custom_gradient function or user-registered op was "
                    "recorded while running the function (built-in ops are checked by the "
                    "registry tests)")
        lines = [f"{self.title}: {len(self.ops)} custom gradient call(s) checked in float64, "
                 f"seed={self.seed} (op n draws its random values from "
                 f"numpy.random.default_rng([{self.seed}, n]): the same seed replays the check)"]
        lines += [f"  note: {n}" for n in self.notes]
        for c in self.ops:
            lines += c.lines()
        counts = [f"{len(self.failed)} failed"] if self.failed else []
        n_pass = sum(c.status == "passed" for c in self.ops)
        counts += [f"{n_pass} passed"] if n_pass else []
        if self.surrogates:
            counts.append(f"{len(self.surrogates)} declared surrogate (reported, not failed)")
        lines.append("  result: " + ", ".join(counts))
        return "\n".join(lines)

    def __repr__(self):
        return (f"<CustomGradientReport ops={len(self.ops)} failed={len(self.failed)} "
                f"surrogates={len(self.surrogates)}>")
