"""Checkpoint schedules: in which order to store, restore and recompute the states of an
``n``-step loop so that its steps can be reversed (a gradient) while at most ``s`` states are
stored (issue 31).

The model. A loop runs steps ``0 .. n-1``; step ``i`` maps state ``x_i`` (a scan's carry) to
``x_{i+1}``. Reversing step ``i`` (its VJP) needs ``x_i``, and the steps are reversed in the
order ``n-1, n-2, ..., 0``. A schedule's :meth:`Schedule.plan` says how, as a list of
:class:`Action`\\ s executed in order from ``x_0`` (the *current state* at the start; it is
not in a slot unless the plan stores it):

==================  ========================================================================
``ADVANCE(k)``      run ``k >= 1`` steps from the current state ``x_i`` without recording: it
                    becomes ``x_{i+k}``
``TAKESHOT(slot)``  store the current state, with its step index, in ``slot`` (overwriting it)
``RESTORE(slot)``   make the state stored in ``slot`` current (the slot keeps it)
``YOUTURN(i)``      the current state is ``x_i``: record step ``i`` from it and propagate the
                    cotangent of ``x_{i+1}`` back through it to ``x_i``; the current state is
                    then consumed (the next action is a ``RESTORE``, or the plan ends)
==================  ========================================================================

Revolve's FIRSTURN (the first reversal, of step ``n-1``, right after the forward sweep) is a
``YOUTURN`` here too. ``YOUTURN``'s argument is redundant (the current state's step index) but
lets an interpreter index a scan's ``xs`` without tracking it. Slots are indices into a buffer
of :meth:`Schedule.slots` rows.

Costs. A plan evaluates ``n`` recorded steps (one per ``YOUTURN``) plus its ``ADVANCE`` steps.
The fewest ``ADVANCE`` steps that reverse ``n`` steps with ``s`` slots are (Griewank 1992;
Griewank & Walther 2000; revolve's ``numforw``)::

    p(n, s) = r*n - C(s + r, r - 1),   r >= 1 the smallest with C(s + r, s) >= n

(:func:`forward_steps`); :class:`Revolve` attains it. The initial state ``x_0`` counts among
the ``s`` stored states; the current state is held apart. ``p(n, s) / n``, with ``r`` (the
most times Revolve advances one step) in parentheses:

==========  =============  ==============
n           s = 10         s = 40
==========  =============  ==============
1 000       3.636 (4)      2.097 (3)
10 000      5.762 (7)      2.910 (3)
100 000     8.320 (10)     3.868 (4)
==========  =============  ==============

(``p(1000, 10) = 3636``, ``p(10^4, 10) = 57624``, ``p(10^5, 10) = 832040``,
``p(1000, 40) = 2097``, ``p(10^4, 40) = 29097``, ``p(10^5, 40) = 386756``.)

Choosing ``s``. Memory is ``s`` states (plus the current one and one step's residuals); time
is ``n + p(n, s)`` step evaluations (forward sweep included), against ``2n - 1`` for
:class:`EveryStep`, so ``p(n, s) - (n - 1)`` are recomputation. Take the largest ``s`` whose
states fit in memory: ``s >= n - 1`` recomputes nothing (``p = n - 1``); beyond that the
cost per step grows only like ``r``, where ``n ~ C(s + r, s)``, so a few tens of slots
reverse ``10^5`` steps with about 4 advances per step. ``s = 1`` costs ``n (n - 1) / 2``.

In a loop whose primal forward pass runs before the gradient is asked for (a scan), the plan's
prefix up to its first ``YOUTURN`` can be that pass: it fills the slots and ends at
``x_{n-1}``; the primal also runs step ``n-1`` for ``x_n`` (one evaluation beyond the plan's
count), and the first ``YOUTURN`` runs it again under the tape.

Sources: A. Griewank, "Achieving logarithmic growth of temporal and spatial complexity in
reverse automatic differentiation", Optimization Methods and Software 1(1):35-54, 1992 (the
binomial bound); A. Griewank and A. Walther, "Algorithm 799: revolve: an implementation of
checkpointing for the reverse or adjoint mode of computational differentiation", ACM TOMS
26(1):19-45, 2000 (the schedule and its action names). This module's code is written from the
recursive binomial partition those papers describe, not from revolve's source.
"""
from __future__ import annotations

import dataclasses
import enum
import operator
from math import comb
from typing import NamedTuple

import numpy as np

__all__ = ["Kind", "ADVANCE", "TAKESHOT", "RESTORE", "YOUTURN", "Action", "Schedule",
           "EveryStep", "Revolve", "Online", "forward_steps", "as_arrays", "simulate",
           "Replay"]


class Kind(enum.IntEnum):
    """The kind of an :class:`Action` (its ``int32`` code in :func:`as_arrays`)."""
    ADVANCE = 0
    TAKESHOT = 1
    RESTORE = 2
    YOUTURN = 3


ADVANCE, TAKESHOT, RESTORE, YOUTURN = Kind.ADVANCE, Kind.TAKESHOT, Kind.RESTORE, Kind.YOUTURN


class Action(NamedTuple):
    """One row of a plan: ``kind`` (a :class:`Kind`) and ``arg`` (an int: the step count of
    ``ADVANCE``, the slot of ``TAKESHOT``/``RESTORE``, the step index of ``YOUTURN``).
    ``repr`` is ``ADVANCE(3)``."""
    kind: Kind
    arg: int

    def __repr__(self):
        return f"{Kind(self.kind).name}({self.arg})"


def _count(value, name, who, minimum):
    """``value`` as an int ``>= minimum``; TypeError for a non-integer (or a bool), ValueError
    below ``minimum``."""
    if isinstance(value, bool):
        raise TypeError(f"{who}: {name} must be an int, got the bool {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{who}: {name} must be an int, got {type(value).__name__} "
                        f"{value!r}") from None
    if value < minimum:
        raise ValueError(f"{who}: {name} must be an int >= {minimum}, got {value}")
    return value


def _repetitions(n, s):
    """The smallest ``r >= 1`` with ``C(s + r, s) >= n`` (``n >= 1``, ``s >= 1``)."""
    r, beta = 1, s + 1  # beta = C(s + r, s)
    while beta < n:
        r += 1
        beta = beta * (s + r) // r
    return r


def forward_steps(n, s):
    """The fewest forward step evaluations outside the reversals (``ADVANCE`` steps) that
    reverse ``n`` steps with ``s`` checkpoint slots: Griewank's ``p(n, s) = r*n - C(s + r,
    r - 1)``, ``r >= 1`` the smallest with ``C(s + r, s) >= n`` (Griewank 1992; Griewank &
    Walther 2000).

    Edge cases, from the formula and the model (module docstring): ``n = 0`` gives 0 (nothing
    to reverse; the formula would give -1); ``n = 1`` gives 0 (step 0 is reversed from
    ``x_0``); ``s >= n - 1`` gives ``n - 1`` (``r = 1``: every state is stored on one sweep);
    ``s = 1`` gives ``n (n - 1) / 2``.

    Args: ``n``: an int ``>= 0``; ``s``: an int ``>= 1`` (Python or NumPy integers).
    Returns: an int. Raises: TypeError if ``n`` or ``s`` is not an int (a bool is not);
    ValueError if ``n < 0`` or ``s < 1``.
    """
    n = _count(n, "n (the number of steps)", "tg.checkpointing.forward_steps", 0)
    s = _count(s, "s (the number of checkpoint slots)", "tg.checkpointing.forward_steps", 1)
    if n <= 1:
        return 0
    r = _repetitions(n, s)
    return r * n - comb(s + r, r - 1)


class Replay(NamedTuple):
    """What :func:`simulate` measured: ``advances`` (ADVANCE steps), ``slots`` (buffer rows
    the plan needs: its largest slot + 1, 0 without slots), ``repetitions`` (the most times
    one step was advanced)."""
    advances: int
    slots: int
    repetitions: int


def simulate(plan, n, slots=None):
    """Execute ``plan`` on symbolic states (step indices) and check that it reverses ``n``
    steps: every action well formed, ``ADVANCE(k)`` (``k >= 1``) from a current state and not
    past ``x_{n-1}``, ``TAKESHOT`` from a current state, ``RESTORE`` only of a filled slot,
    slots in ``range(slots)`` when ``slots`` is given, each ``YOUTURN(i)`` from ``x_i``, and
    the reversals exactly ``n-1, n-2, ..., 0``. For tests and for debugging a schedule.

    Args: ``plan``: a sequence of :class:`Action` (or ``(kind, arg)`` pairs); ``n``: int
    ``>= 0``; ``slots``: optional int bound on the slot indices.
    Returns: a :class:`Replay`. Raises: ValueError naming the first action that breaks an
    invariant (or saying which reversals are missing at the end).
    """
    n = _count(n, "n (the number of steps)", "tg.checkpointing.simulate", 0)
    current, stored, next_turn = 0, {}, n - 1
    advanced = np.zeros(max(n, 1), np.int64)
    for j, (kind, arg) in enumerate(plan):
        def bad(why):
            shown = f"{kind.name}({arg!r})" if isinstance(kind, Kind) else f"({kind!r}, {arg!r})"
            return ValueError(f"tg.checkpointing.simulate: action {j} {shown} of a plan for "
                              f"n={n} steps: {why}")
        try:
            kind = Kind(kind)
        except ValueError:
            raise bad(f"unknown kind; the kinds are {', '.join(k.name for k in Kind)}") from None
        if isinstance(arg, bool) or not isinstance(arg, (int, np.integer)):
            raise bad("its argument is not an int")
        if kind == YOUTURN:
            if current is None:
                raise bad("there is no current state (a YOUTURN consumed it; RESTORE a slot)")
            if arg != next_turn:
                raise bad(f"step {next_turn} is the next to reverse" if next_turn >= 0 else
                          "every step is reversed already")
            if current != arg:
                raise bad(f"the current state is x_{current}, not x_{arg}")
            current, next_turn = None, next_turn - 1
        elif kind == RESTORE:
            if arg not in stored:
                raise bad(f"slot {arg} was never filled")
            current = stored[arg]
        else:
            if current is None:
                raise bad("there is no current state (a YOUTURN consumed it; RESTORE a slot)")
            if kind == ADVANCE:
                if arg < 1 or current + arg > n - 1:
                    raise bad(f"from x_{current} it must advance 1 to {n - 1 - current} steps "
                              f"(a plan never needs x_{n} or beyond)")
                advanced[current:current + arg] += 1
                current += arg
            else:
                if arg < 0 or (slots is not None and arg >= slots):
                    raise bad("a slot is an int >= 0" if slots is None else
                              f"slots are 0 .. {slots - 1}")
                stored[arg] = current
    if next_turn >= 0:
        raise ValueError(f"tg.checkpointing.simulate: a plan for n={n} steps ends before "
                         f"reversing steps {next_turn} .. 0")
    return Replay(int(advanced.sum()), max(stored, default=-1) + 1, int(advanced.max()))


def as_arrays(plan):
    """``plan`` as two NumPy ``int32`` arrays ``(kind, arg)`` of shape ``(len(plan),)``, one
    row per action (``kind`` holds :class:`Kind` codes), for an interpreter in a compiled
    loop. Raises ValueError if an argument does not fit in int32."""
    kind = np.array([a[0] for a in plan], np.int64).reshape(-1)
    arg = np.array([a[1] for a in plan], np.int64).reshape(-1)
    if arg.size and arg.max() > np.iinfo(np.int32).max:
        raise ValueError(f"tg.checkpointing.as_arrays: an argument ({arg.max()}) does not fit "
                         "in int32; the plan is too long for a compiled interpreter")
    return kind.astype(np.int32), arg.astype(np.int32)


class Schedule:
    """Base class of checkpoint schedules. A subclass implements ``plan(n)``: the list of
    :class:`Action` that reverses ``n`` steps (the module docstring's model; :func:`simulate`
    accepts it). ``slots(n)`` (the buffer rows the plan needs) and ``forward_steps(n)`` (its
    ``ADVANCE`` steps) default to replaying the plan; subclasses give closed forms. Schedules
    are immutable, hashable and compare by value, so they can key a trace cache."""

    def plan(self, n):
        """The actions that reverse ``n`` steps (``n``: int ``>= 0``): a list of
        :class:`Action`."""
        raise NotImplementedError(f"{type(self).__name__} must implement plan(n)")

    def slots(self, n):
        """The number of state slots (buffer rows) ``plan(n)`` uses: an int."""
        return simulate(self.plan(n), n).slots

    def forward_steps(self, n):
        """The number of ``ADVANCE`` step evaluations in ``plan(n)``: an int (the plan
        evaluates ``n`` recorded steps besides)."""
        return simulate(self.plan(n), n).advances


@dataclasses.dataclass(frozen=True)
class EveryStep(Schedule):
    """Store every state: today's reversal of a scan (every carry that entered a step is
    kept). ``plan(n)`` stores ``x_i`` in slot ``i`` on one forward sweep, then reverses each
    step from its slot: ``n`` slots (``x_{n-1}`` too, which :class:`Revolve` keeps as the
    current state instead), ``max(n - 1, 0)`` ``ADVANCE`` steps, each step advanced at most
    once."""

    def plan(self, n):
        """``TAKESHOT(0), ADVANCE(1), TAKESHOT(1), ..., TAKESHOT(n-1)``, then ``RESTORE(i),
        YOUTURN(i)`` for ``i = n-1 .. 0``; raises TypeError/ValueError for a bad ``n``."""
        n = _count(n, "n (the number of steps)", "tg.checkpointing.EveryStep.plan", 0)
        actions = []
        for i in range(n):
            actions += [Action(TAKESHOT, i)] + ([Action(ADVANCE, 1)] if i < n - 1 else [])
        for i in reversed(range(n)):
            actions += [Action(RESTORE, i), Action(YOUTURN, i)]
        return actions

    def slots(self, n):
        """``n``."""
        return _count(n, "n (the number of steps)", "tg.checkpointing.EveryStep.slots", 0)

    def forward_steps(self, n):
        """``max(n - 1, 0)``."""
        n = _count(n, "n (the number of steps)", "tg.checkpointing.EveryStep.forward_steps", 0)
        return max(n - 1, 0)


@dataclasses.dataclass(frozen=True)
class Revolve(Schedule):
    """Griewank and Walther's binomial schedule (revolve, offline: ``n`` known) with ``s``
    slots: ``plan(n)`` advances exactly :func:`forward_steps` ``(n, s)`` steps, the fewest
    possible, advances no step more than ``r`` times (``r`` as there), and uses
    ``min(s, n - 1)`` slots (0 for ``n <= 1``).

    The plan (the recursive binomial partition of Griewank & Walther 2000): to reverse
    ``l >= 2`` steps from ``x_a`` (stored) with ``c`` slots, advance ``m`` steps, store
    ``x_{a+m}`` (unless one step is left), reverse the last ``l - m`` steps with ``c - 1``
    slots, restore ``x_a`` and reverse the first ``m`` with ``c``. With ``r`` the repetition
    number of ``(l, c)`` and ``b(c, r) = C(c + r, c)`` (``b(c, -1) = 0``), any ``m >= 1`` with
    ``b(c, r-2) <= m <= b(c, r-1)`` and ``b(c-1, r-1) <= l - m <= b(c-1, r)`` costs ``m +
    p(m, c) + p(l-m, c-1) = p(l, c)`` (``p`` is linear with slope ``r - 1``, ``r`` on those
    ranges; Pascal's rule); this takes the largest such ``m``. Slots are used as a stack: the
    state stored at nesting depth ``k`` is in slot ``k``. The plan has at most ``4n - 2`` rows
    (``n - 1`` splits of an ADVANCE, a RESTORE and at most one TAKESHOT, ``n`` YOUTURNs, the
    first TAKESHOT): 392 143 for ``n = 10^5``, ``s = 40``, built in about a second.

    Args: ``s``: int ``>= 1``, the number of stored states (``x_0`` included). Raises
    TypeError/ValueError for a bad ``s``.
    """
    s: int

    def __post_init__(self):
        object.__setattr__(self, "s", _count(self.s, "s (the number of checkpoint slots)",
                                             "tg.checkpointing.Revolve", 1))

    def plan(self, n):
        """The actions that reverse ``n`` steps (``n``: int ``>= 0``): a list of
        :class:`Action`; raises TypeError/ValueError for a bad ``n``."""
        n = _count(n, "n (the number of steps)", "tg.checkpointing.Revolve.plan", 0)
        if n <= 1:
            return [Action(YOUTURN, 0)] * n
        actions = [Action(TAKESHOT, 0)]
        # pending work, last first: (a, l, c, slot) reverses steps a .. a+l-1 from x_a (the
        # current state, stored in `slot` when l >= 2) with c slots; (None, slot) restores
        todo = [(0, n, self.s, 0)]
        while todo:
            item = todo.pop()
            if item[0] is None:
                actions.append(Action(RESTORE, item[1]))
                continue
            a, l, c, slot = item
            if l == 1:
                actions.append(Action(YOUTURN, a))
                continue
            m = _split(l, c)
            actions.append(Action(ADVANCE, m))
            todo += [(a, m, c, slot), (None, slot)]
            if l - m >= 2:
                actions.append(Action(TAKESHOT, slot + 1))
            todo.append((a + m, l - m, c - 1, slot + 1))
        return actions

    def slots(self, n):
        """``min(s, n - 1)``, 0 for ``n <= 1``."""
        n = _count(n, "n (the number of steps)", "tg.checkpointing.Revolve.slots", 0)
        return min(self.s, n - 1) if n >= 2 else 0

    def forward_steps(self, n):
        """:func:`forward_steps` ``(n, s)``."""
        return forward_steps(n, self.s)


def _split(l, c):
    """The largest optimal first advance ``m`` for reversing ``l >= 2`` steps with ``c >= 1``
    slots (:class:`Revolve`'s docstring)."""
    c = min(c, l - 1)
    r = _repetitions(l, c)
    hi = min(comb(c + r - 1, c), l - comb(c + r - 2, c - 1))
    assert max(comb(c + r - 2, c) if r >= 2 else 1, l - comb(c + r - 1, c - 1)) <= hi
    return hi


#: the level of ``x_0``'s slot in :class:`Online`'s placement: never replaced
TOP_LEVEL = 1 << 30


def online_slot(times, levels):
    """Where :class:`Online` stores the state ``x_t`` reached on its forward sweep (Wang, Moin
    & Iaccarino 2009's dynamic allocation): ``times`` (the step index held by each slot, -1
    for a free one; slot 0 holds ``x_0``) and ``levels`` (each slot's level; slot 0's is
    :data:`TOP_LEVEL`), lists of ints of length ``s``. A slot is *dispensable* when a slot
    holding a later state has a higher level. The rule: a free slot, at level 0; else the
    latest dispensable slot, at level 0; else the latest slot, at its level + 1. Returns
    ``(slot, level)``, or ``(None, 0)`` when ``s == 1`` (only ``x_0`` is kept)."""
    s = len(times)
    free = [k for k in range(s) if times[k] < 0]
    if free:
        return free[0], 0
    if s == 1:
        return None, 0
    dispensable = [k for k in range(1, s) if any(times[j] > times[k] and levels[j] > levels[k]
                                                  for j in range(s))]
    if dispensable:
        return max(dispensable, key=times.__getitem__), 0
    latest = max(range(1, s), key=times.__getitem__)
    return latest, levels[latest] + 1


def next_store(base, target, s, occupied):
    """The step index at which :class:`Online`'s reversal stores the next state: from
    ``x_base`` (restored or just stored), to reverse steps ``base .. target`` with the slots
    left (``s - occupied`` free, plus ``base``'s own), advance :class:`Revolve`'s split and
    store there; ``None`` when nothing need be stored (the split leaves one step)."""
    length = target - base + 1
    if length <= 1:
        return None
    m = _split(length, s - occupied + 1)
    return base + m if length - m >= 2 else None


@dataclasses.dataclass(frozen=True)
class Online(Schedule):
    """An online schedule for loops whose trip count is known only when they end
    (``tg.while_loop(..., checkpoints=s)`` compiled), in a fixed buffer of ``s`` slots.

    The forward sweep stores ``x_0`` in slot 0 and places each later state by Wang, Moin and
    Iaccarino's dynamic allocation (:func:`online_slot`; Q. Wang, P. Moin, G. Iaccarino,
    "Minimal repetition dynamic checkpointing algorithm for unsteady adjoint calculation",
    SIAM J. Sci. Comput. 31(4):2549-2567, 2009, where it is designed to keep the repetition
    number, the most times one step is recomputed, minimal whatever ``n`` turns out to be).
    The reversal then handles the gap after each stored state with the slots freed so far by
    :class:`Revolve`'s binomial split (:func:`next_store`), optimal for a gap once the stored
    states are given. P. Stumm and A. Walther ("New algorithms for optimal online
    checkpointing", SIAM J. Sci. Comput. 32(2):836-854, 2010) give a different placement that
    matches the offline optimum :func:`forward_steps` ``p(n, s)`` for ``n <= (s + 1)(s + 2) /
    2`` (Equinox's ``checkpointed_while_loop`` uses it up to there); this one does not claim
    that range.

    What this implementation does, measured (``tests/test_checkpointed_while.py``;
    ``x_0``'s slot counted in ``s``): ``forward_steps(n) = p(n, s)`` exactly for ``n <= s``
    (every state stored); ``forward_steps(n) / p(n, s)`` at most 1.025 for ``n <= 100`` and
    ``s = 40``, 1.39 at its worst for ``s = 10`` (n = 64), 1.46 just past ``(s + 1)(s + 2) /
    2`` (n = 859-861, s = 40), 1.306 at n = 1000, 1.006 at n = 10^4 and 1.009 at n = 10^5
    (s = 40), 1.037 at n = 10^4 (s = 10); its repetition number is at most one more than
    :class:`Revolve`'s for every ``n`` measured. The plan, for a loop that ran ``n`` steps:
    the forward sweep (``TAKESHOT(0)``, then ``ADVANCE(1)`` and a ``TAKESHOT`` per state), then
    from ``x_{n-1}``: reverse the current state's step when it is the next to reverse, else
    advance one step and store the state where :func:`next_store` says; after each reversal
    free the slots holding later states and restore the latest stored one.

    Args: ``s``: int ``>= 1``, the slots (``x_0``'s included). Raises TypeError/ValueError for
    a bad ``s``.
    """
    s: int

    def __post_init__(self):
        object.__setattr__(self, "s", _count(self.s, "s (the number of checkpoint slots)",
                                             "tg.checkpointing.Online", 1))

    def plan(self, n):
        """The actions of the online schedule for a loop that ran ``n`` steps (``n``: int
        ``>= 0``): a list of :class:`Action`; raises TypeError/ValueError for a bad ``n``."""
        n = _count(n, "n (the number of steps)", "tg.checkpointing.Online.plan", 0)
        if n <= 1:
            return [Action(YOUTURN, 0)] * n
        s = self.s
        times, levels = [0] + [-1] * (s - 1), [TOP_LEVEL] + [0] * (s - 1)
        actions = [Action(TAKESHOT, 0)]
        for t in range(1, n):
            actions.append(Action(ADVANCE, 1))
            slot, level = online_slot(times, levels)
            if slot is not None:
                times[slot], levels[slot] = t, level
                actions.append(Action(TAKESHOT, slot))
        t = target = n - 1
        store = None
        while True:
            if t == target:
                actions.append(Action(YOUTURN, target))
                target -= 1
                if target < 0:
                    return actions
                times = [-1 if x > target else x for x in times]
                slot = max((k for k in range(s) if times[k] >= 0), key=times.__getitem__)
                actions.append(Action(RESTORE, slot))
                t = times[slot]
            else:
                actions.append(Action(ADVANCE, 1))
                t += 1
                if t != store:
                    continue
                slot = times.index(-1)
                times[slot] = t
                actions.append(Action(TAKESHOT, slot))
            store = next_store(t, target, s, sum(x >= 0 for x in times))

    def slots(self, n):
        """``min(s, n)`` for ``n >= 2`` (the forward sweep fills them), 0 below."""
        n = _count(n, "n (the number of steps)", "tg.checkpointing.Online.slots", 0)
        return min(self.s, n) if n >= 2 else 0
