"""tg.while_loop(..., checkpoints=s) (issue 31): reverse mode through a loop whose trip count
is known only when it ends. Compiled, the loop stores at most s states on
tg.checkpointing.Online's schedule and its gradient replays the rest in one XLA loop, the body
traced twice; eagerly the gradient replays it on Revolve(s). Every gradient equals the
store-all one, and the replays make exactly the steps the schedules' plans count."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import checkpointing as C

X0 = np.array([0.3, -0.7, 1.2])
W = np.array([0.9, 1.1, 1.3])


def _loss(limit, checkpoints, w, calls=None):
    """sum(x_n^2) for x_{k+1} = sin(x_k) w + 0.1 x_k, n = limit trips (a loop-carried count)."""
    def body(x, k):
        if calls is not None:
            calls.append(1)
        return tg.sin(x) * w + 0.1 * x, k + 1

    def loss(x0):
        x, _ = tg.while_loop(lambda x, k: k < limit, body, (x0, tg.constant(0)),
                             checkpoints=checkpoints)
        return tg.sum(x * x)
    return loss


def _store_all(n):
    w = tg.Variable(W)
    x0 = tg.constant(X0)
    with tg.GradientTape() as tape:
        tape.watch(x0)
        y = _loss(n, None, w)(x0)
    return [g if g is not None else tg.zeros_like(v) for g, v in
            zip(tape.gradient(y, [x0, w]), [x0, w])]


def _close(got, want):
    for g, v in zip(got, want):
        np.testing.assert_allclose(g.numpy(), v.numpy(), rtol=1e-12, atol=1e-15)


# --- the schedule ----------------------------------------------------------------------------
def test_online_plans_reverse_every_loop_within_their_slots():
    for s in range(1, 8):
        for n in range(0, 120):
            replay = C.simulate(C.Online(s).plan(n), n, slots=s)
            assert replay.slots == C.Online(s).slots(n)
            if n <= s:  # every state fits (x_{n-1} too: the loop may go on): none advanced twice
                assert replay.advances == max(n - 1, 0) == C.forward_steps(n, s)
            assert replay.advances >= C.forward_steps(n, s)  # never below the offline optimum


def test_online_repetitions_are_at_most_one_more_than_revolves():
    for s in (2, 3, 10):
        for n in range(2, 300):
            online = C.simulate(C.Online(s).plan(n), n).repetitions
            assert online <= C.simulate(C.Revolve(s).plan(n), n).repetitions + 1, (s, n)


def test_online_costs_match_the_figures_its_docstring_gives():
    ratio = lambda n, s: C.Online(s).forward_steps(n) / C.forward_steps(n, s)  # noqa: E731
    assert max(ratio(n, 40) for n in range(2, 101)) == pytest.approx(1.025, abs=1e-3)
    assert max((ratio(n, 10), n) for n in range(2, 200)) == (pytest.approx(1.388, abs=1e-3), 64)
    assert ratio(861, 40) == pytest.approx(1.464, abs=1e-3)
    assert ratio(1000, 40) == pytest.approx(1.306, abs=1e-3)
    assert ratio(10_000, 40) == pytest.approx(1.006, abs=1e-3)
    assert ratio(10_000, 10) == pytest.approx(1.037, abs=1e-3)


def test_online_refuses_a_bad_slot_count():
    with pytest.raises(ValueError, match=r"tg.checkpointing.Online: s \(the number of "
                                         r"checkpoint slots\) must be an int >= 1, got 0"):
        C.Online(0)


# --- eager ----------------------------------------------------------------------------------
@pytest.mark.parametrize("s", [1, 2, 3, 10])
def test_eager_gradients_equal_store_all_with_the_revolve_count(s):
    for n in [0, 1, 2, 3, 5, 13, 40]:
        want = _store_all(n)
        w, x0, calls = tg.Variable(W), tg.constant(X0), []
        with tg.GradientTape() as tape:
            tape.watch(x0)
            y = _loss(n, s, w, calls)(x0)
        forward = len(calls)
        _close(tape.gradient(y, [x0, w], unconnected_gradients="zero"), want)
        assert forward == n
        assert len(calls) - forward == C.forward_steps(n, s) + n


def test_eager_checkpointed_loop_has_second_order_and_forward_mode():
    w = tg.constant(W)
    hess = lambda ck: tg.hessian(_loss(9, ck, w))(tg.constant(X0)).numpy()  # noqa: E731
    np.testing.assert_allclose(hess(3), hess(None), rtol=1e-11)
    jvp = lambda ck: tg.jvp(_loss(9, ck, w), (tg.constant(X0),),  # noqa: E731
                            (tg.constant(W),))[1].numpy()
    np.testing.assert_allclose(jvp(3), jvp(None), rtol=1e-12)


# --- compiled --------------------------------------------------------------------------------
def _compiled():
    if tg._backend.default_namespace().__name__.startswith("array_api_strict"):
        pytest.skip("compiled programs run on the NumPy pass (tg.function needs JAX arrays)")
    pytest.importorskip("jax")


@pytest.mark.parametrize("s", [1, 2, 3, 10])
def test_compiled_gradients_equal_store_all_with_two_body_traces(s):
    _compiled()
    calls = []

    @tg.function
    def gradient(x0, limit, w):
        with tg.GradientTape() as tape:
            tape.watch(x0)
            y = _loss(limit, s, w, calls)(x0)
        return tape.gradient(y, [x0, w], unconnected_gradients="zero")

    w = tg.Variable(W)
    for n in [0, 1, 2, 3, 5, 13, 40, 100]:
        _close(gradient(tg.constant(X0), tg.constant(n), w), _store_all(n))
    assert len(calls) == 2  # the forward's body and its VJP, once for every trip count


def test_compiled_replay_makes_the_steps_the_online_plan_counts():
    _compiled()
    import jax
    import jax.numpy as jnp

    from tapegrad import control_flow as cf

    def replay(n, s):  # integer states x_t = t: each reversal folds t into a hash
        def body(c):
            return [c[0] + 1, *cf._online_store(c[1], c[2], c[3], c[4:], [c[0]])]
        out = jax.lax.while_loop(lambda c: c[0] < n, body,
                                 [jnp.int32(0), *cf._online_init([jnp.int32(0)], s)])
        trips, times, _, *buffers = out[1:]
        return cf._online_reverse(lambda st: [st[0] + 1],
                                  lambda st, g: ((g[0] * 3 + st[0] + 1) % 1000003, g[1] + 1),
                                  trips, times, buffers, (jnp.int32(0), jnp.int32(0)))

    replay = jax.jit(replay, static_argnums=1)  # n traced: one program per s
    for s in (1, 2, 3, 10):
        for n in [*range(0, 30), 66, 200]:
            (fold, turns), advances = replay(n, s)
            want = 0
            for i in range(n - 1, -1, -1):  # the reversals in the order n-1 .. 0
                want = (want * 3 + i + 1) % 1000003
            assert (int(fold), int(turns)) == (want, n)
            # the forward's sweep is the primal loop; with one slot x_{n-1} is recomputed too
            plan = C.Online(s).forward_steps(n) - max(n - 1, 0) if s > 1 else n * (n - 1) // 2
            assert int(advances) == plan, (s, n)


def test_compiled_lax_while_loop_and_forward_mode():
    _compiled()
    w = tg.constant(W)

    def loss(ck):
        return lambda x0, n: tg.sum(tg.lax.while_loop(
            lambda c: c[1] < n, lambda c: (tg.sin(c[0]) * w, c[1] + 1),
            (x0, tg.constant(0)), checkpoints=ck)[0])

    x0, n = tg.constant(X0), tg.constant(17)
    want = tg.grad(lambda x: loss(None)(x, 17))(x0).numpy()
    got = tg.function(lambda x, n: tg.grad(lambda x: loss(C.Online(4))(x, n))(x))(x0, n)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    tangent = tg.function(lambda x, n: tg.jvp(lambda x: loss(4)(x, n), (x,), (x,))[1])(x0, n)
    np.testing.assert_allclose(tangent.numpy(), want @ X0, rtol=1e-12)


def test_compiled_checkpointed_loop_under_vmap_equals_each_example():
    _compiled()
    w = tg.constant(W)
    batch = tg.constant(np.stack([X0, 0.5 * X0, -X0]))
    grad = tg.grad(lambda x: _loss(11, 3, w)(x))
    got = tg.function(tg.vmap(grad))(batch)
    for b in range(3):
        np.testing.assert_allclose(got.numpy()[b], tg.grad(_loss(11, None, w))(batch[b])
                                   .numpy(), rtol=1e-12)


def test_compiled_second_order_says_to_give_a_bound():
    _compiled()
    w = tg.constant(W)
    with pytest.raises(ValueError, match=r"tg.while_loop: a compiled while_loop without an "
                                         r"int maximum_iterations is checkpointed \(checkpoints="
                                         r"s, by default UNBOUNDED_WHILE_SLOTS\) and has "
                                         r"first-order reverse mode only"):
        tg.function(lambda x, n: tg.hessian(_loss(n, 3, w))(x))(tg.constant(X0),
                                                                 tg.constant(5))


def test_bad_checkpoints_and_assigning_bodies_are_refused():
    with pytest.raises(TypeError, match=r"tg.while_loop: checkpoints must be None, an int "
                                        r"\(the loop states to store\), "
                                        r"tg.checkpointing.Online\(s\) or Revolve\(s\)"):
        tg.while_loop(lambda x: x < 3.0, lambda x: x + 1.0, (tg.constant(0.0),),
                      checkpoints="10")
    v = tg.Variable(0.0)

    def body(x):
        v.assign_add(1.0)
        return x * 1.5

    x = tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        with pytest.raises(ValueError, match=r"tg.while_loop: with checkpoints= the body must "
                                             r"assign no Variable \(it assigned Variable"):
            tg.while_loop(lambda x: x < 3.0, body, (x,), checkpoints=2)
