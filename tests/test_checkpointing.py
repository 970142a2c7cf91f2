"""tg.checkpointing (issue 31): Griewank's count p(n, s) against its closed-form values and a
brute-force minimum, Revolve's and EveryStep's plans replayed by simulate (validity, exact
advance counts, slots), gradients of a nonlinear recurrence reversed on every schedule against
forward mode, and the error messages."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.checkpointing import (ADVANCE, RESTORE, TAKESHOT, YOUTURN, Action, EveryStep,
                                    Replay, Revolve, Schedule, as_arrays, forward_steps,
                                    simulate)

SLOTS = [1, 2, 3, 5, 10, 40, 200]


def repetitions(n, s):
    """Griewank's r: the smallest r >= 1 with C(s + r, s) >= n."""
    return next(r for r in range(1, n + 2) if math.comb(s + r, s) >= n)


def test_forward_steps_values():
    # the module docstring's table
    assert [forward_steps(n, s) for n in (10**3, 10**4, 10**5) for s in (10, 40)] == [
        3636, 2097, 57624, 29097, 832040, 386756]
    assert forward_steps(10_000, 40) / 10_000 == 2.9097
    assert round(forward_steps(100_000, 40) / 100_000, 2) == 3.87
    assert forward_steps(0, 1) == forward_steps(0, 7) == 0
    assert forward_steps(1, 1) == forward_steps(1, 7) == 0
    assert [forward_steps(n, n - 1) for n in range(2, 9)] == list(range(1, 8))
    assert [forward_steps(n, 1000) for n in range(2, 9)] == list(range(1, 8))
    assert [forward_steps(n, 1) for n in range(12)] == [n * (n - 1) // 2 for n in range(12)]
    assert forward_steps(np.int64(10), np.int32(2)) == forward_steps(10, 2) == 3 * 10 - 10


def test_forward_steps_is_the_minimum_of_the_recursive_partition():
    """p(n, s) equals min over the first advance m of m + p(m, s) + p(n - m, s - 1) (the
    recursion revolve's optimality rests on), computed by brute force."""
    big, best = 10**9, {}
    for c in range(0, 7):
        for n in range(0, 61):
            if n <= 1:
                best[n, c] = 0
            elif c == 0:
                best[n, c] = big
            else:
                best[n, c] = min(m + best[m, c] + best[n - m, c - 1] for m in range(1, n))
    assert all(forward_steps(n, c) == best[n, c] for n in range(61) for c in range(1, 7))


def test_revolve_plan_by_hand():
    # n = 4, s = 2: r = 2, p = 2*4 - C(4, 1) = 4
    plan = Revolve(2).plan(4)
    assert plan == [Action(TAKESHOT, 0), Action(ADVANCE, 2), Action(TAKESHOT, 1),
                    Action(ADVANCE, 1), Action(YOUTURN, 3), Action(RESTORE, 1),
                    Action(YOUTURN, 2), Action(RESTORE, 0), Action(ADVANCE, 1),
                    Action(YOUTURN, 1), Action(RESTORE, 0), Action(YOUTURN, 0)]
    assert repr(plan[:2]) == "[TAKESHOT(0), ADVANCE(2)]"
    assert simulate(plan, 4) == Replay(advances=4, slots=2, repetitions=2)
    kind, arg = as_arrays(plan)
    assert kind.dtype == arg.dtype == np.int32
    np.testing.assert_array_equal(kind, [1, 0, 1, 0, 3, 2, 3, 2, 0, 3, 2, 3])
    np.testing.assert_array_equal(arg, [0, 2, 1, 1, 3, 1, 2, 0, 1, 1, 0, 0])
    assert [a.shape for a in as_arrays([])] == [(0,), (0,)]
    assert Revolve(3).plan(0) == [] and Revolve(3).plan(1) == [Action(YOUTURN, 0)]


@pytest.mark.parametrize("s", SLOTS)
def test_revolve_plans_are_valid_and_optimal(s):
    schedule = Revolve(s)
    for n in range(201):
        replay = simulate(schedule.plan(n), n, slots=schedule.slots(n))
        assert replay.advances == forward_steps(n, s) == schedule.forward_steps(n), n
        assert replay.slots == schedule.slots(n) == (min(s, n - 1) if n >= 2 else 0), n
        assert replay.repetitions <= (repetitions(n, s) if n >= 2 else 0), n
        assert len(schedule.plan(n)) <= max(4 * n - 2, n), n


def test_every_step_counts():
    for n in range(60):
        plan = EveryStep().plan(n)
        assert simulate(plan, n, slots=n) == Replay(max(n - 1, 0), n, min(n - 1, 1) if n else 0)
        assert EveryStep().slots(n) == n and EveryStep().forward_steps(n) == max(n - 1, 0)
        assert len(plan) == max(4 * n - 1, 0)
    assert EveryStep().plan(2) == [Action(TAKESHOT, 0), Action(ADVANCE, 1), Action(TAKESHOT, 1),
                                   Action(RESTORE, 1), Action(YOUTURN, 1), Action(RESTORE, 0),
                                   Action(YOUTURN, 0)]


def test_schedule_base_class_replays_the_plan():
    class Halves(Schedule):  # a user schedule: revolve with 2 slots, written by hand
        def plan(self, n):
            return Revolve(2).plan(n)

    assert Halves().slots(30) == 2 and Halves().forward_steps(30) == forward_steps(30, 2)
    with pytest.raises(NotImplementedError, match="Schedule must implement plan"):
        Schedule().plan(3)


def test_schedules_are_values():
    assert Revolve(np.int64(3)) == Revolve(3) and hash(Revolve(np.int64(3))) == hash(Revolve(3))
    assert Revolve(3) != Revolve(4) and EveryStep() == EveryStep()
    assert repr(Revolve(3)) == "Revolve(s=3)" and tg.checkpointing.Revolve is Revolve


@settings(max_examples=40)
@given(st.integers(0, 500), st.integers(1, 50))
def test_revolve_property(n, s):
    replay = simulate(Revolve(s).plan(n), n, slots=s)
    assert replay.advances == forward_steps(n, s)
    assert replay.slots == Revolve(s).slots(n)


def run(plan, n, slots, x0, a):
    """Execute a plan on x_{k+1} = sin(a x_k) + 0.1 k with NumPy: (x_n's gradient with
    respect to x_0 and a, step evaluations). x_n comes from the first YOUTURN's step."""
    buffer, index = np.full(slots, np.nan), np.full(slots, -1)
    x, i, xbar, abar, evaluations = x0, 0, 1.0, 0.0, 0
    step = lambda x, k: np.sin(a * x) + 0.1 * k  # noqa: E731
    for kind, arg in zip(*as_arrays(plan)):
        if kind == ADVANCE:
            for _ in range(arg):
                x, i, evaluations = step(x, i), i + 1, evaluations + 1
        elif kind == TAKESHOT:
            buffer[arg], index[arg] = x, i
        elif kind == RESTORE:
            x, i = buffer[arg], index[arg]
        else:
            assert kind == YOUTURN and i == arg
            evaluations += 1  # recording the step: its output is x_n on the first turn
            abar += xbar * np.cos(a * x) * x
            xbar *= a * np.cos(a * x)
            x = None
    return np.array([xbar, abar]), evaluations


def forward_mode(n, x0, a):
    x, dx0, da = x0, 1.0, 0.0
    for k in range(n):
        x, dx0, da = (np.sin(a * x) + 0.1 * k, a * np.cos(a * x) * dx0,
                      np.cos(a * x) * (x + a * da))
    return np.array([dx0, da])


@pytest.mark.parametrize("n", [1, 2, 7, 50, 173])
def test_gradient_of_a_recurrence_on_every_schedule(n):
    x0, a = 0.4, 1.3
    expected = forward_mode(n, x0, a)
    store_all, _ = run(EveryStep().plan(n), n, n, x0, a)
    np.testing.assert_allclose(store_all, expected, rtol=1e-12, atol=1e-15)
    for schedule in [Revolve(s) for s in SLOTS]:
        grads, evaluations = run(schedule.plan(n), n, schedule.slots(n), x0, a)
        np.testing.assert_allclose(grads, store_all, rtol=1e-12, atol=1e-15)
        assert evaluations == n + forward_steps(n, schedule.s)


@pytest.mark.parametrize("call, error, message", [
    (lambda: forward_steps(-1, 3), ValueError,
     r"forward_steps: n \(the number of steps\) must be an int >= 0, got -1"),
    (lambda: forward_steps(5, 0), ValueError,
     r"forward_steps: s \(the number of checkpoint slots\) must be an int >= 1, got 0"),
    (lambda: forward_steps(2.5, 3), TypeError, r"n \(the number of steps\) must be an int, "
                                               r"got float 2.5"),
    (lambda: forward_steps(4, True), TypeError, "s .* must be an int, got the bool True"),
    (lambda: Revolve(0), ValueError,
     r"Revolve: s \(the number of checkpoint slots\) must be an int >= 1, got 0"),
    (lambda: Revolve("4"), TypeError, "Revolve: s .* must be an int, got str '4'"),
    (lambda: Revolve(3).plan(-2), ValueError, r"Revolve.plan: n .* must be an int >= 0, got -2"),
    (lambda: EveryStep().plan(None), TypeError, "EveryStep.plan: n .* must be an int, got "
                                                "NoneType"),
])
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("plan, n, slots, message", [
    ([(RESTORE, 0), (YOUTURN, 0)], 1, None, r"action 0 RESTORE\(0\) .*n=1 steps: slot 0 was "
                                            "never filled"),
    ([(TAKESHOT, 0), (YOUTURN, 0), (RESTORE, 0), (YOUTURN, 0)], 1, None,
     r"action 3 YOUTURN\(0\).*every step is reversed already"),
    ([(TAKESHOT, 0), (YOUTURN, 0)], 2, None, r"action 1 YOUTURN\(0\).*step 1 is the next"),
    ([(ADVANCE, 1), (YOUTURN, 1), (ADVANCE, 1)], 2, None,
     r"action 2 ADVANCE\(1\).*no current state \(a YOUTURN consumed it; RESTORE a slot\)"),
    ([(TAKESHOT, 0), (ADVANCE, 2)], 2, None, r"from x_0 it must advance 1 to 1 steps"),
    ([(TAKESHOT, 3)], 2, 2, r"action 0 TAKESHOT\(3\).*slots are 0 .. 1"),
    ([(TAKESHOT, -1)], 2, None, r"action 0 TAKESHOT\(-1\).*a slot is an int >= 0"),
    ([(ADVANCE, 1), (TAKESHOT, 0), (RESTORE, 0), (YOUTURN, 1), (YOUTURN, 0)], 2, None,
     r"action 4 YOUTURN\(0\).*no current state"),
    ([(TAKESHOT, 0), (ADVANCE, 1), (RESTORE, 0), (YOUTURN, 1)], 2, None,
     r"action 3 YOUTURN\(1\).*the current state is x_0, not x_1"),
    ([(7, 0)], 1, None, r"action 0 \(7, 0\).*unknown kind; the kinds are ADVANCE, TAKESHOT"),
    ([(ADVANCE, 1.0)], 3, None, r"action 0 ADVANCE\(1.0\).*argument is not an int"),
    ([(ADVANCE, 1), (YOUTURN, 1)], 2, None, r"ends before reversing steps 0 \.\. 0"),
])
def test_simulate_rejects_broken_plans(plan, n, slots, message):
    with pytest.raises(ValueError, match=message):
        simulate(plan, n, slots=slots)
