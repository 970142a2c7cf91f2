"""Threads never see each other's trace values (issue: "while 10 tg.vmap calls ran, a second
thread saw a closed-over constant's value replaced by a JAX array 71,512 times").

Threads trace new ``tg.function``s, run ``tg.vmap`` (with and without a tape) and eager control
flow over functions that close over module-level constant tensors, beside threads of eager
training that read the same constants; a watcher thread reads the constants' ``_value`` all
along. Every result must be bit-identical to its single-threaded run, and the watcher must never
see anything but the constants' own arrays."""
import copy
import pickle
import sys
import threading

import numpy as np
import pytest

import tapegrad as tg

pytest.importorskip("jax")

C1 = tg.constant(np.linspace(-1.0, 1.0, 8))  # closed over by every function below
C2 = tg.constant(np.arange(8.0) / 8 + 0.5)
CONSTANTS = [(C1, C1._value), (C2, C2._value)]
V = tg.Variable(np.ones(8))  # the loop body below assigns it, the same value each time
X = np.random.default_rng(0).normal(size=(6, 8))


def _per_example(x):
    return tg.sin(x * C1) + C2 * tg.sum(x)


def run_vmap():
    return tg.vmap(_per_example)(tg.constant(X)).numpy()


def run_vmap_gradient():
    x = tg.constant(X)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(tg.vmap(_per_example)(x) * C2)
    return tape.gradient(y, x).numpy()


def run_function():
    f = tg.function(lambda x: tg.tanh(x * C1) @ C2 + tg.sum(C1 * C2 * V))  # new: traced anew
    return f(tg.constant(X)).numpy()


def _body(i, v):
    V.assign(V * 1.0)
    return i + 1, tg.sin(v * C1) + C2 * V


def run_control_flow():
    x = tg.constant(X[0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        _, y = tg.while_loop(lambda i, v: i < 4, _body, (tg.constant(0), x))
        z = tg.cond(tg.sum(y) > 0, lambda: y * C2, lambda: y - C1)
        s = tg.sum(z)
    return np.concatenate([z.numpy(), tape.gradient(s, x).numpy()])


def run_training():
    rng = np.random.default_rng(1)
    w1 = tg.Variable(rng.normal(size=(8, 8)) * 0.3)
    w2 = tg.Variable(rng.normal(size=(8, 1)) * 0.3)
    opt = tg.optimizers.Adam(0.01)
    target = tg.constant(X[:, :1])
    for _ in range(5):
        with tg.GradientTape() as tape:
            h = tg.tanh(tg.constant(X) @ w1 * C1 + C2)
            loss = tg.mean((h @ w2 - target) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w1, w2]), [w1, w2]))
    return np.concatenate([w1.numpy().ravel(), w2.numpy().ravel(), [loss.numpy()]])


WORKERS = {"vmap": run_vmap, "vmap_gradient": run_vmap_gradient, "function": run_function,
           "control_flow": run_control_flow, "training": run_training}


def _race(kinds, rounds):
    """Run ``kinds`` (worker names), one thread each, ``rounds`` times, beside a watcher (of
    the constants and ``V``);
    returns (the watcher's sightings, the results that differ from the single-threaded run,
    the workers' errors)."""
    expected = {k: WORKERS[k]() for k in set(kinds)}
    mismatches, errors, sightings = [], [], [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for c, a in CONSTANTS:
                if c._value is not a:
                    sightings[0] += 1
            if type(V._value) is not type(C1._value):  # a trace's value (a JAX tracer)
                sightings[0] += 1

    def work(kind):
        try:
            for _ in range(rounds):
                got = WORKERS[kind]()
                if got.dtype != expected[kind].dtype or not np.array_equal(got, expected[kind]):
                    mismatches.append(kind)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(f"{kind}: {type(e).__name__}: {e}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: races show in few rounds
    watcher = threading.Thread(target=watch)
    threads = [threading.Thread(target=work, args=(k,)) for k in kinds]
    try:
        watcher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stop.set()
        watcher.join()
        sys.setswitchinterval(old)
    return sightings[0], mismatches, errors


def test_tracing_threads_beside_eager_training_see_only_their_own_values():
    kinds = ["vmap", "vmap_gradient", "function", "vmap"] + ["training"] * 4
    sightings, mismatches, errors = _race(kinds, rounds=3)
    assert sightings == 0, f"the watcher saw a trace's value in a constant {sightings} times"
    assert errors == [] and mismatches == []
    for c, a in CONSTANTS:  # and nothing is left changed
        assert type(c) is tg.Tensor and c._value is a


def test_a_first_compiled_call_races_eager_control_flow():
    sightings, mismatches, errors = _race(
        ["function", "control_flow", "function", "control_flow"], rounds=3)
    assert sightings == 0, f"the watcher saw a trace's value in a constant {sightings} times"
    assert errors == [] and mismatches == []


def test_a_binding_is_seen_in_its_own_thread_only():
    from tapegrad._variables import bind_tensors

    t = tg.constant([1.0, 2.0])
    own = t._value
    seen = []
    with bind_tensors([(t, np.array([5.0, 6.0]))]):
        with bind_tensors([(t, np.array([7.0, 8.0]))]):  # nested: the inner one wins
            np.testing.assert_array_equal(t.numpy(), [7.0, 8.0])
            other = threading.Thread(target=lambda: seen.append(t._value))
            other.start()
            other.join()
        np.testing.assert_array_equal(t.numpy(), [5.0, 6.0])
        for twin in (copy.copy(t), copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
            assert type(twin) is tg.Tensor  # a plain Tensor of the value read here
            np.testing.assert_array_equal(twin.numpy(), [5.0, 6.0])
    assert seen[0] is own
    assert type(t) is tg.Tensor and t._value is own  # put back as it was
