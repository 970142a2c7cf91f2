"""tg.optimizers beyond SGD/Adam: AdamW, RMSprop, Adagrad, Nadam, Lion, amsgrad, weight decay,
gradient clipping, the learning-rate Variable, state Variables, configs, compiled steps.

Each trajectory is compared with the Keras 3 formula (keras/src/optimizers/*.py) written out
below in NumPy, independently of tapegrad, on the quadratic f(w) = 0.5 * sum(S * (w - C)^2)
whose gradient S * (w - C) depends on the iterate, so every step's state matters.
"""
import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import optimizers

rng = np.random.default_rng(3)
W0 = rng.normal(size=(2, 3))
C = rng.normal(size=(2, 3))
S = rng.uniform(0.5, 2.0, size=(2, 3))
STEPS = 6


def grad(w):
    return S * (w - C)


def reference(update, state, steps=STEPS, w0=W0, wd=None, lr=0.01, clip=lambda g: g):
    """Run ``update(w, g, t, state) -> w`` for t = 1..steps on the quadratic (after Keras's
    clipping and decoupled weight decay ``w -= w * wd * lr``)."""
    w = w0.copy()
    for t in range(1, steps + 1):
        g = clip(grad(w))
        if wd is not None:
            w = w - w * wd * lr
        w = update(w, g, t, state)
    return w


def run(opt, steps=STEPS, w0=W0):
    w = tg.Variable(w0, name="w")
    for _ in range(steps):
        opt.minimize(lambda: 0.5 * tg.sum(S * (w - C) ** 2), [w])
    return w.numpy()


def adam_update(lr, b1=0.9, b2=0.999, eps=1e-7, amsgrad=False):
    def update(w, g, t, s):
        alpha = lr * math.sqrt(1 - b2**t) / (1 - b1**t)
        s["m"] = s.get("m", 0) + (g - s.get("m", 0)) * (1 - b1)
        s["v"] = s.get("v", 0) + (g * g - s.get("v", 0)) * (1 - b2)
        v = s["v"]
        if amsgrad:
            v = s["vhat"] = np.maximum(s.get("vhat", 0), v)
        return w - s["m"] * alpha / (np.sqrt(v) + eps)
    return update


def rmsprop_update(lr, rho=0.9, momentum=0.0, eps=1e-7, centered=False):
    def update(w, g, t, s):
        s["v"] = rho * s.get("v", 0) + (1 - rho) * g * g
        if centered:
            s["a"] = rho * s.get("a", 0) + (1 - rho) * g
            step = lr * g / np.sqrt(s["v"] - s["a"] ** 2 + eps)
        else:
            step = lr * g / np.sqrt(s["v"] + eps)
        if momentum > 0:
            s["m"] = momentum * s.get("m", 0) + step
            step = s["m"]
        return w - step
    return update


def adagrad_update(lr, init=0.1, eps=1e-7):
    def update(w, g, t, s):
        s["a"] = s.get("a", init) + g * g
        return w - lr * g / np.sqrt(s["a"] + eps)
    return update


def nadam_update(lr, b1=0.9, b2=0.999, eps=1e-7):
    def u(t):
        return b1 * (1 - 0.5 * 0.96**t)

    def update(w, g, t, s):
        s["p"] = s.get("p", 1.0) * u(t)  # u_1 * ... * u_t
        s["m"] = s.get("m", 0) + (g - s.get("m", 0)) * (1 - b1)
        s["v"] = s.get("v", 0) + (g * g - s.get("v", 0)) * (1 - b2)
        m_hat = u(t + 1) * s["m"] / (1 - s["p"] * u(t + 1)) + (1 - u(t)) * g / (1 - s["p"])
        v_hat = s["v"] / (1 - b2**t)
        return w - lr * m_hat / (np.sqrt(v_hat) + eps)
    return update


def lion_update(lr, b1=0.9, b2=0.99):
    def update(w, g, t, s):
        m = s.get("m", np.zeros_like(w))
        w = w - lr * np.sign(b1 * m + (1 - b1) * g)
        s["m"] = b2 * m + (1 - b2) * g
        return w
    return update


def sgd_update(lr, momentum=0.0, nesterov=False):
    def update(w, g, t, s):
        if momentum == 0:
            return w - lr * g
        s["m"] = momentum * s.get("m", 0) - lr * g
        return w + (momentum * s["m"] - lr * g if nesterov else s["m"])
    return update


# --- one trajectory test per optimizer -----------------------------------------------------
def test_adamw_trajectory():
    ref = reference(adam_update(0.05), {}, wd=0.004, lr=0.05)
    np.testing.assert_allclose(run(optimizers.AdamW(0.05)), ref, rtol=1e-12)
    # decoupled: not the same as Adam on the L2-regularized loss, and not plain Adam
    assert not np.allclose(run(optimizers.Adam(0.05)), ref, rtol=1e-9, atol=0)


def test_adamw_large_decay_hand_computed():
    # one step at g = 0: m = v = 0 so Adam moves nothing and only w -= w * wd * lr remains
    w = tg.Variable([2.0, -4.0])
    optimizers.AdamW(learning_rate=0.5, weight_decay=0.1).apply_gradients(
        [(tg.constant([0.0, 0.0]), w)])
    np.testing.assert_allclose(w.numpy(), [2.0 * 0.95, -4.0 * 0.95])


def test_adam_amsgrad_trajectory():
    ref = reference(adam_update(0.05, amsgrad=True), {}, steps=12)
    np.testing.assert_allclose(run(optimizers.Adam(0.05, amsgrad=True), steps=12), ref,
                               rtol=1e-12)
    assert not np.allclose(run(optimizers.Adam(0.05), steps=12), ref, rtol=1e-9, atol=0)


@pytest.mark.parametrize("kw", [{}, {"centered": True}, {"momentum": 0.5},
                                {"centered": True, "momentum": 0.9, "rho": 0.8}])
def test_rmsprop_trajectory(kw):
    ref = reference(rmsprop_update(0.01, **kw), {})
    np.testing.assert_allclose(run(optimizers.RMSprop(0.01, **kw)), ref, rtol=1e-12)


def test_adagrad_trajectory():
    ref = reference(adagrad_update(0.1), {})
    np.testing.assert_allclose(run(optimizers.Adagrad(0.1)), ref, rtol=1e-12)
    ref = reference(adagrad_update(0.1, init=1.0, eps=1e-3), {})
    np.testing.assert_allclose(
        run(optimizers.Adagrad(0.1, initial_accumulator_value=1.0, epsilon=1e-3)), ref,
        rtol=1e-12)


def test_nadam_trajectory():
    ref = reference(nadam_update(0.02), {})
    np.testing.assert_allclose(run(optimizers.Nadam(0.02)), ref, rtol=1e-12)
    ref = reference(nadam_update(0.02, b1=0.5, b2=0.9, eps=1e-4), {})
    np.testing.assert_allclose(run(optimizers.Nadam(0.02, beta_1=0.5, beta_2=0.9,
                                                    epsilon=1e-4)), ref, rtol=1e-12)


def test_nadam_first_step_hand_computed():
    # t = 1, g = 2, b1 = 0.9, b2 = 0.999: u1 = 0.9 * (1 - 0.48) = 0.468, u2 = 0.9 * (1 - 0.5 *
    # 0.9216) = 0.48528, P1 = u1; m = 0.2, v = 0.004, v_hat = 4
    u1, u2 = 0.468, 0.48528
    m_hat = u2 * 0.2 / (1 - u1 * u2) + (1 - u1) * 2.0 / (1 - u1)
    w = tg.Variable(1.0)
    optimizers.Nadam(0.1).apply_gradients([(tg.constant(2.0), w)])
    np.testing.assert_allclose(w.numpy(), 1.0 - 0.1 * m_hat / (2.0 + 1e-7), rtol=1e-14)


def test_lion_trajectory():
    ref = reference(lion_update(0.01), {})
    np.testing.assert_allclose(run(optimizers.Lion(0.01)), ref, rtol=1e-12)
    # every coordinate moves by exactly lr on the first step
    np.testing.assert_allclose(np.abs(run(optimizers.Lion(0.01), steps=1) - W0), 0.01,
                               rtol=1e-12)


def test_defaults_are_keras():
    assert optimizers.AdamW().weight_decay == 0.004
    for opt in [optimizers.AdamW(), optimizers.RMSprop(), optimizers.Adagrad(),
                optimizers.Nadam(), optimizers.Lion(), optimizers.Adam(), optimizers.SGD()]:
        expected = 0.01 if isinstance(opt, optimizers.SGD) else 0.001
        assert float(opt.learning_rate) == expected
    rms = optimizers.RMSprop()
    assert (rms.rho, rms.momentum, rms.epsilon, rms.centered) == (0.9, 0.0, 1e-7, False)
    ada = optimizers.Adagrad()
    assert (ada.initial_accumulator_value, ada.epsilon) == (0.1, 1e-7)
    lion = optimizers.Lion()
    assert (lion.beta_1, lion.beta_2) == (0.9, 0.99)
    nadam = optimizers.Nadam()
    assert (nadam.beta_1, nadam.beta_2, nadam.epsilon) == (0.9, 0.999, 1e-7)
    assert optimizers.Adam().amsgrad is False and optimizers.Adam().weight_decay is None


# --- base-class arguments ------------------------------------------------------------------
def test_weight_decay_applies_to_any_optimizer():
    ref = reference(sgd_update(0.1, momentum=0.9), {}, wd=0.05, lr=0.1)
    np.testing.assert_allclose(run(optimizers.SGD(0.1, momentum=0.9, weight_decay=0.05)), ref,
                               rtol=1e-12)


def test_exclude_from_weight_decay():
    kernel, bias = tg.Variable(1.0, name="dense/kernel"), tg.Variable(1.0, name="dense/bias")
    other = tg.Variable(1.0, name="other")
    opt = optimizers.SGD(0.5, weight_decay=0.1)
    opt.exclude_from_weight_decay(var_list=[other], var_names=["bias"])
    zero = tg.constant(0.0)
    opt.apply_gradients([(zero, kernel), (zero, bias), (zero, other)])
    np.testing.assert_allclose([kernel.numpy(), bias.numpy(), other.numpy()], [0.95, 1.0, 1.0])


def clip_by_norm(c):
    return lambda g: g * c / max(np.linalg.norm(g), c)


@pytest.mark.parametrize("c", [0.5, 100.0])  # clipping active, then inactive
def test_clipnorm(c):
    ref = reference(sgd_update(0.1), {}, clip=clip_by_norm(c))
    np.testing.assert_allclose(run(optimizers.SGD(0.1, clipnorm=c)), ref, rtol=1e-12)


def test_clipnorm_is_per_variable_and_global_clipnorm_is_joint():
    ga, gb = np.array([3.0, 4.0]), np.array([0.0, 12.0])  # norms 5 and 12, jointly 13
    for kw, expected in [({"clipnorm": 1.0}, [ga / 5, gb / 12]),
                         ({"global_clipnorm": 1.0}, [ga / 13, gb / 13]),
                         ({"global_clipnorm": 26.0}, [ga, gb]),
                         ({"clipvalue": 3.5}, [[3.0, 3.5], [0.0, 3.5]])]:
        a, b = tg.Variable(np.zeros(2)), tg.Variable(np.zeros(2))
        optimizers.SGD(1.0, **kw).apply_gradients([(tg.constant(ga), a), (tg.constant(gb), b)])
        np.testing.assert_allclose([-a.numpy(), -b.numpy()], expected, rtol=1e-14)


def test_global_clipnorm_trajectory_with_adam():
    def clip(g):  # a single variable: its norm is the global norm
        return g * min(1.0, 0.3 / np.linalg.norm(g))
    ref = reference(adam_update(0.05), {}, clip=clip)
    np.testing.assert_allclose(run(optimizers.Adam(0.05, global_clipnorm=0.3)), ref,
                               rtol=1e-12)


def test_clipvalue_trajectory():
    ref = reference(rmsprop_update(0.01), {}, clip=lambda g: np.clip(g, -0.2, 0.2))
    np.testing.assert_allclose(run(optimizers.RMSprop(0.01, clipvalue=0.2)), ref, rtol=1e-12)


def test_global_clipnorm_of_infinite_gradient_is_nan():
    w = tg.Variable([1.0, 1.0])
    with np.errstate(invalid="ignore"):
        optimizers.SGD(0.1, global_clipnorm=1.0).apply_gradients(
            [(tg.constant([np.inf, 0.0]), w)])
    assert np.isnan(w.numpy()).all()


# --- learning rate -------------------------------------------------------------------------
def test_learning_rate_is_an_assignable_variable():
    opt = optimizers.SGD(0.1)
    assert isinstance(opt.learning_rate, tg.Variable)
    assert opt.variables[1] is opt.learning_rate
    w = tg.Variable(1.0)
    opt.apply_gradients([(tg.constant(1.0), w)])
    opt.learning_rate = 0.5
    opt.apply_gradients([(tg.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), 1.0 - 0.1 - 0.5)
    assert float(opt.learning_rate) == 0.5


def test_schedule_learning_rate_reads_the_schedule():
    schedule = optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    opt = optimizers.SGD(schedule)
    w = tg.Variable(0.0)
    for _ in range(3):
        opt.apply_gradients([(tg.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), -(0.1 + 0.05 + 0.025))
    np.testing.assert_allclose(float(opt.learning_rate), 0.0125)  # at iterations = 3
    assert opt.variables == [opt.iterations]  # no learning-rate Variable
    with pytest.raises(TypeError, match="created with a learning-rate schedule"):
        opt.learning_rate = 0.1


def test_learning_rate_callables():
    opt = optimizers.SGD(lambda step: 0.5)  # a callable returning a Python float
    assert float(opt.learning_rate) == 0.5 and opt.learning_rate.shape == ()
    opt = optimizers.SGD(0.1)
    opt.learning_rate = lambda step: 0.2 / (1.0 + step)  # replaces the Variable
    assert opt.variables == [opt.iterations]
    w = tg.Variable(0.0)
    for _ in range(2):
        opt.apply_gradients([(tg.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), -(0.2 + 0.1))
    np.testing.assert_allclose(float(opt.learning_rate), 0.2 / 3)


def test_float32_variables_stay_float32():
    for opt in [optimizers.Nadam(0.1), optimizers.RMSprop(0.1, centered=True, momentum=0.5),
                optimizers.Adagrad(0.1), optimizers.Lion(0.1), optimizers.AdamW(0.1),
                optimizers.SGD(optimizers.schedules.CosineDecay(0.1, 10), global_clipnorm=1.0)]:
        w = tg.Variable(np.ones(3, dtype=np.float32))
        for _ in range(2):
            opt.apply_gradients([(tg.constant(np.ones(3, dtype=np.float32)), w)])
        assert w.dtype == np.float32
        assert all(v.dtype == np.float32 for v in opt.variables[2:]), type(opt).__name__


# --- state ---------------------------------------------------------------------------------
def test_variables_in_creation_order_with_keras_slot_names():
    a, b = tg.Variable(np.ones(2), name="a"), tg.Variable(np.ones(3), name="b")
    opt = optimizers.Adam(0.1, amsgrad=True, name="adam")
    assert [v.name for v in opt.variables] == ["adam/iterations", "adam/learning_rate"]
    opt.apply_gradients([(np.ones(2), a), (np.ones(3), b)])
    assert [v.name for v in opt.variables] == [
        "adam/iterations", "adam/learning_rate", "adam/a/momentum", "adam/a/velocity",
        "adam/a/velocity_hat", "adam/b/momentum", "adam/b/velocity", "adam/b/velocity_hat"]
    assert all(isinstance(v, tg.Variable) and not v.trainable for v in opt.variables)
    assert opt._slots[a._id]["velocity"] is opt.variables[3]
    nadam = optimizers.Nadam(name="n")
    nadam.build([a])
    assert [v.name for v in nadam.variables] == [
        "n/iterations", "n/learning_rate", "n/u_product", "n/a/momentum", "n/a/velocity"]
    np.testing.assert_array_equal(nadam.variables[3].numpy(), [0.0, 0.0])


def test_build_creates_slots_at_their_initial_values():
    w = tg.Variable(np.ones((2, 2)), name="w")
    opt = optimizers.Adagrad(initial_accumulator_value=0.25)
    opt.build([w])
    (acc,) = opt.variables[2:]
    assert acc.name == "Adagrad/w/accumulator"
    np.testing.assert_array_equal(acc.numpy(), np.full((2, 2), 0.25))
    assert opt.iterations == 0
    opt.build([w])  # again: nothing new
    assert len(opt.variables) == 3
    assert len(optimizers.SGD().variables) == 2 and optimizers.SGD()._slot_inits == {}


def test_get_config_round_trip():
    schedule = optimizers.schedules.PolynomialDecay(0.1, 100, power=2.0)
    for opt in [optimizers.RMSprop(0.01, rho=0.8, centered=True, clipnorm=1.0),
                optimizers.AdamW(schedule, weight_decay=0.01, amsgrad=True),
                optimizers.Lion(0.002, beta_2=0.95, global_clipnorm=2.0, name="lion")]:
        config = opt.get_config()
        clone = type(opt).from_config(config)
        assert clone.get_config() == config
    assert optimizers.AdamW(schedule).get_config()["learning_rate"] == {
        "class_name": "PolynomialDecay", "config": schedule.get_config()}
    assert optimizers.RMSprop(0.01).get_config() == {
        "name": "RMSprop", "learning_rate": 0.01, "weight_decay": None, "clipnorm": None,
        "global_clipnorm": None, "clipvalue": None, "rho": 0.9, "momentum": 0.0,
        "epsilon": 1e-7, "centered": False}


# --- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("make,match", [
    (lambda: optimizers.Adam(-0.1), r"Adam: learning_rate must be a float in \[0.0, inf\]"),
    (lambda: optimizers.Adam(0.1, beta_1=1.0), r"beta_1 must be a float in \[0.0, 1.0\)"),
    (lambda: optimizers.Nadam(beta_2=-0.5), "beta_2 must be"),
    (lambda: optimizers.AdamW(beta_2=1.5), "AdamW: beta_2 must be"),
    (lambda: optimizers.AdamW(weight_decay=None), "weight_decay.*must be a float"),
    (lambda: optimizers.SGD(weight_decay=-1.0), "weight_decay must be a float in"),
    (lambda: optimizers.Lion(beta_1=0.0), "beta_1 .0 would make Lion signSGD."),
    (lambda: optimizers.RMSprop(rho=1.0), r"rho must be a float in \[0.0, 1.0\)"),
    (lambda: optimizers.RMSprop(epsilon=-1e-7), "epsilon must be"),
    (lambda: optimizers.Adagrad(initial_accumulator_value=-1.0), "initial_accumulator_value"),
    (lambda: optimizers.SGD(clipnorm=1.0, global_clipnorm=1.0),
     "only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set"),
    (lambda: optimizers.Adam(clipvalue=0.5, clipnorm=1.0), "only one of"),
    (lambda: optimizers.Adam(clipnorm=0.0), r"clipnorm \(None for no clipping\) must be"),
    (lambda: optimizers.Adam(global_clipnorm=-1.0), "global_clipnorm"),
])
def test_bad_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_learning_rate_type_and_assignment():
    with pytest.raises(TypeError, match="learning_rate must be a float or a callable"):
        optimizers.Lion(learning_rate=[0.1])
    opt = optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="learning_rate must be a float in"):
        opt.learning_rate = -1.0
    assert float(opt.learning_rate) == 0.1


def test_unknown_keras_argument_is_a_type_error():
    with pytest.raises(TypeError, match="use_ema"):
        optimizers.Adam(use_ema=True)


# --- compiled steps ------------------------------------------------------------------------
COMPILED = [
    lambda: optimizers.AdamW(0.05, amsgrad=True),
    lambda: optimizers.RMSprop(0.01, momentum=0.5, centered=True, clipnorm=0.5),
    lambda: optimizers.Adagrad(0.1, global_clipnorm=0.5),
    lambda: optimizers.Nadam(0.02, clipvalue=0.1),
    lambda: optimizers.Lion(0.01, weight_decay=0.1),
    lambda: optimizers.SGD(optimizers.schedules.CosineDecay(0.0, 4, alpha=0.1,
                                                            warmup_target=0.2, warmup_steps=2),
                           momentum=0.9),
    lambda: optimizers.Adam(optimizers.schedules.PiecewiseConstantDecay([1, 3], [0.1, 0.05,
                                                                                  0.01])),
]


@pytest.mark.parametrize("make", COMPILED)
def test_compiled_training_equals_eager(make):
    pytest.importorskip("jax")
    x = tg.constant(np.random.default_rng(1).normal(size=(8, 3)))
    y = tg.constant(np.ones((8, 2)))

    def model():
        r = np.random.default_rng(0)
        w = tg.Variable(r.normal(size=(3, 2)), name="w")
        b = tg.Variable(np.zeros(2), name="b")
        opt = make()

        def step(x, y):
            with tg.GradientTape() as tape:
                loss = tg.mean((tg.tanh(x @ w) + b - y) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            return loss
        return step, (w, b), opt

    eager_step, eager_vars, eager_opt = model()
    step, variables, opt = model()
    compiled = tg.function(step, jit_compile=True)
    for _ in range(6):
        le, lc = eager_step(x, y), compiled(x, y)
    np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-12)
    for a, b in zip(eager_vars + tuple(eager_opt.variables), variables + tuple(opt.variables)):
        np.testing.assert_allclose(np.asarray(b.numpy()), np.asarray(a.numpy()), rtol=1e-12,
                                   atol=1e-15)
    assert int(opt.iterations) == 6
    assert compiled.experimental_get_tracing_count() == 1


def test_assigning_the_learning_rate_reaches_a_compiled_step():
    pytest.importorskip("jax")
    w = tg.Variable(1.0)
    opt = optimizers.SGD(0.1)

    @tg.function(jit_compile=True)
    def step():
        opt.apply_gradients([(tg.ones_like(w), w)])

    step()
    opt.learning_rate = 0.25
    step()
    np.testing.assert_allclose(w.numpy(), 1.0 - 0.1 - 0.25)
    assert step.experimental_get_tracing_count() == 1
