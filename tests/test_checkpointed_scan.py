"""tg.lax.scan(..., checkpoints=s): the gradient replays the steps on the binomial schedule
(tg.checkpointing.Revolve) and equals the store-all one; eagerly with exactly n + p(n, s) + n
step evaluations and one tape record for the whole loop, compiled with the body traced twice."""
import numpy as np
import pytest

import tapegrad as tg

W = np.array([0.9, 1.1, 1.3])
H0 = np.array([0.2, -0.1, 0.4])


def _problem(n, checkpoints, reverse=False, calls=None):
    """A loss of (h, xs, w): a nonlinear recurrence with a captured parameter, slices and ys."""
    weights = tg.linspace(0.5, 1.5, n) if n else tg.zeros((0,))

    def loss(h, xs, w):
        def step(c, x):
            if calls is not None:
                calls.append(1)
            c2 = tg.sin(c * w) + x
            return c2, tg.sum(c2 ** 2)
        c, ys = tg.lax.scan(step, h, xs, reverse=reverse, checkpoints=checkpoints)
        return tg.sum(c) + tg.sum(ys * weights)
    return loss


def _args(n):
    return (tg.constant(H0), tg.constant(np.linspace(0.1, 1.0, 3 * n).reshape(n, 3)),
            tg.constant(W))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("s", [1, 2, 3, 10, 40])
def test_every_schedule_gives_the_store_all_gradient_with_the_predicted_evaluations(s, reverse):
    for n in [*range(0, 41), 100, 200]:
        if s == 1 and n > 60:
            continue  # n (n - 1) / 2 advances
        want = tg.grad(_problem(n, None, reverse), argnums=(0, 1, 2))(*_args(n))
        calls = []
        got = tg.grad(_problem(n, s, reverse, calls), argnums=(0, 1, 2))(*_args(n))
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14,
                                       err_msg=f"n={n}, s={s}")
        forward = max(n, 1)  # n == 0 runs the body once for the ys' shapes
        assert len(calls) == forward + tg.checkpointing.forward_steps(n, s) + n, (n, s)


def test_the_tape_keeps_one_record_for_the_loop():
    h, xs, w = _args(50)
    with tg.GradientTape() as tape:
        tape.watch([h, w])
        c, _ = tg.lax.scan(lambda c, x: (tg.sin(c * w) + x, None), h, xs, checkpoints=4)
        loss = tg.sum(c)
    assert [op.type for op in tape.operations] == ["Scan", "Sum"]
    with tg.GradientTape() as full:
        full.watch([h, w])
        c, _ = tg.lax.scan(lambda c, x: (tg.sin(c * w) + x, None), h, xs)
        loss_all = tg.sum(c)
    assert len(full.operations) > 150  # one record per op per step
    for a, b in zip(tape.gradient(loss, [h, w]), full.gradient(loss_all, [h, w])):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_second_order_forward_mode_and_variables_equal_the_store_all_loop():
    h, xs, w = _args(12)
    v = tg.Variable(np.array([0.3, 0.2, 0.1]))

    def loss(ck):
        def f(w):
            step = lambda c, x: (tg.sin(c * w) + x * v, tg.cos(c))  # noqa: E731
            return tg.sum(tg.lax.scan(step, h, xs, checkpoints=ck)[1] ** 2)
        return f

    for transform in (tg.hessian, lambda f: lambda w: tg.jvp(f, (w,), (h,))[1],
                      lambda f: lambda w: tg.hvp(f, (w,), (h,))):
        np.testing.assert_allclose(transform(loss(3))(w).numpy(),
                                   transform(loss(None))(w).numpy(), rtol=1e-12)
    with tg.GradientTape() as tape:
        y = loss(2)(w)
    with tg.GradientTape() as tape_all:
        y_all = loss(None)(w)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), tape_all.gradient(y_all, v).numpy(),
                               rtol=1e-12)


def test_tf_scan_and_schedule_objects_take_checkpoints():
    xs = tg.constant(np.linspace(0.1, 1.0, 20))
    f = lambda ck: lambda x: tg.sum(tg.scan(lambda a, e: tg.sin(a) + e, x, checkpoints=ck))  # noqa: E731
    want = tg.grad(f(None))(xs).numpy()
    for ck in (3, tg.checkpointing.Revolve(5), tg.checkpointing.EveryStep()):
        np.testing.assert_allclose(tg.grad(f(ck))(xs).numpy(), want, rtol=1e-12)


def test_checkpoint_errors():
    h, xs, w = _args(4)
    with pytest.raises(TypeError, match=r"tg.lax.scan: checkpoints must be None, an int .* "
                                        r"got str 'all'"):
        tg.lax.scan(lambda c, x: (c, None), h, xs, checkpoints="all")
    counter = tg.Variable(0.0)

    def counting(c, x):
        counter.assign_add(1.0)
        return c + x, None

    with tg.GradientTape() as tape:
        tape.watch(h)
        with pytest.raises(ValueError, match=r"with checkpoints= the body must assign no "
                                             r"Variable .* Carry the value as a loop variable"):
            tg.lax.scan(counting, h, xs, checkpoints=2)


def test_a_compiled_body_that_assigns_a_variable_is_refused_under_checkpoints():
    _compiled_only()
    h, xs, _ = _args(4)
    counter = tg.Variable(0.0)

    def counting(c, x):
        counter.assign_add(1.0)
        return c + x, None

    f = tg.function(tg.grad(lambda h: tg.sum(tg.lax.scan(counting, h, xs, checkpoints=2)[0])))
    with pytest.raises(ValueError, match=r"tg.lax.scan: with checkpoints= the body must assign "
                                         r"no Variable \(it assigned Variable"):
        f(h)


def _compiled_only():
    pytest.importorskip("jax")
    if tg._backend.default_namespace().__name__.startswith("array_api_strict"):
        pytest.skip("compiled programs run on JAX's arrays: the NumPy run covers them")


@pytest.mark.parametrize("reverse", [False, True])
def test_compiled_gradients_replay_the_schedule_and_equal_the_store_all_ones(reverse):
    _compiled_only()
    for n in (1, 2, 5, 13, 40):
        want = tg.grad(_problem(n, None, reverse), argnums=(0, 1, 2))(*_args(n))
        for s in (1, 3, 10):
            calls = []
            got = tg.function(tg.grad(_problem(n, s, reverse, calls), argnums=(0, 1, 2)))(
                *_args(n))
            assert len(calls) == 2  # the forward's trace and the step's VJP's
            for a, b in zip(got, want):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14,
                                           err_msg=f"n={n}, s={s}")


def test_compiled_higher_orders_through_a_checkpointed_scan_equal_the_store_all_ones():
    _compiled_only()
    h, xs, w = _args(9)

    def loss(ck):
        return lambda w: tg.sum(tg.lax.scan(lambda c, x: (tg.sin(c * w) + x, tg.cos(c)), h, xs,
                                            checkpoints=ck)[1] ** 2)

    for transform in (tg.hessian, lambda f: lambda w: tg.hvp(f, (w,), (h,)),
                      lambda f: tg.grad(lambda w: tg.sum(tg.grad(f)(w) ** 2))):
        np.testing.assert_allclose(tg.function(transform(loss(2)))(w).numpy(),
                                   transform(loss(None))(w).numpy(), rtol=1e-11)


def test_fori_loop_takes_checkpoints_with_known_and_traced_bounds():
    x = tg.constant(H0)
    f = lambda ck: lambda x: tg.sum(tg.lax.fori_loop(  # noqa: E731
        0, 25, lambda i, v: tg.sin(v) * 1.1 + tg.astype(i, tg.float64) * 0.01, x,
        checkpoints=ck))
    np.testing.assert_allclose(tg.grad(f(4))(x).numpy(), tg.grad(f(None))(x).numpy(),
                               rtol=1e-12)
    if not tg._backend.default_namespace().__name__.startswith("array_api_strict"):
        pytest.importorskip("jax")  # traced bounds: a while loop on the online schedule
        traced = tg.function(lambda x, n: tg.grad(lambda x: tg.sum(tg.lax.fori_loop(
            0, n, lambda i, v: tg.sin(v) * 1.1, x, checkpoints=3)))(x))
        np.testing.assert_allclose(traced(x, tg.constant(25)).numpy(), tg.grad(
            lambda x: tg.sum(tg.lax.fori_loop(0, 25, lambda i, v: tg.sin(v) * 1.1, x)))(x)
            .numpy(), rtol=1e-12)


# --- checkpointing composed with every transform ----------------------------------------------
@tg.custom_gradient
def _custom_sin(x):
    return tg.sin(x), lambda dy: dy * tg.cos(x)


def _steps(inner):
    """A step of a dict carry {"h", "g"} whose nonlinear part is ``inner`` (sin, a
    custom-gradient sin, or sin under recompute_grad), reading the Variable-like ``w``."""
    def step(c, w):
        h = inner(c["h"] * w) + 0.1 * c["g"]
        return {"h": h, "g": c["g"] * 0.9 + tg.cos(c["h"])}
    return step


INNERS = {"sin": tg.sin, "custom_gradient": _custom_sin,
          "recompute_grad": tg.recompute_grad(lambda x: tg.sin(x) * tg.cos(0.5 * x))}


def _looped(loop, inner, checkpoints, n=9):
    step = _steps(INNERS[inner])

    def f(x):  # x: (3,) -> scalar
        w = tg.constant(W)
        c0 = {"h": x, "g": tg.cos(x)}
        if loop == "scan":
            c = tg.lax.scan(lambda c, _: (step(c, w), None), c0, None, length=n,
                            checkpoints=checkpoints)[0]
        else:
            c = tg.while_loop(lambda c, k: k < n, lambda c, k: (step(c, w), k + 1),
                              (c0, tg.constant(0)), checkpoints=checkpoints,
                              maximum_iterations=None if checkpoints else n + 2)[0]
        return tg.sum(c["h"] ** 2) + tg.sum(c["g"])
    return f


TRANSFORMS = {
    "grad": lambda f: tg.grad(f),
    "jvp": lambda f: lambda x: tg.jvp(f, (x,), (tg.ones_like(x),))[1],
    "vmap_grad": lambda f: lambda x: tg.vmap(tg.grad(f))(tg.stack([x, 0.5 * x, -x])),
    "hessian": lambda f: tg.hessian(f),
    "hvp": lambda f: lambda x: tg.jvp(tg.grad(f), (x,), (tg.ones_like(x),))[1],
    "function_grad": lambda f: tg.function(tg.grad(f)),
    "function_vmap_grad": lambda f: tg.function(
        lambda x: tg.vmap(tg.grad(f))(tg.stack([x, 0.5 * x, -x]))),
}


def _cases():
    """Every transform x loop x inner step; by default each transform with the plain step and
    each inner step under grad and tg.function(grad) (all with TAPEGRAD_SLOW_TESTS=1)."""
    out = []
    for transform in sorted(TRANSFORMS):
        for loop in ("scan", "while"):
            for inner in sorted(INNERS):
                default = inner == "sin" or transform in ("grad", "function_grad")
                out.append(pytest.param(transform, loop, inner,
                                        marks=() if default else pytest.mark.slow))
    return out


@pytest.mark.parametrize("transform, loop, inner", _cases())
def test_checkpointed_loops_compose_with_every_transform(transform, loop, inner):
    if transform.startswith("function") and tg._backend.default_namespace().__name__ \
            .startswith("array_api_strict"):
        pytest.skip("compiled programs run on the NumPy pass (tg.function needs JAX arrays)")
    if transform.startswith("function"):
        pytest.importorskip("jax")
    x = tg.constant(H0)
    want = TRANSFORMS[transform](_looped(loop, inner, None))(x)  # the store-all reference
    got = TRANSFORMS[transform](_looped(loop, inner, 3))(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-11, atol=1e-13)
