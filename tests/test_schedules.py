"""tg.optimizers.schedules: values against Keras 3's formulas
(keras/src/optimizers/schedules/learning_rate_schedule.py) written out with `math`, traced
steps, configs and errors."""
import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.optimizers import schedules

STEPS = [0, 1, 3, 7, 10, 12, 25, 100]


def values(schedule, steps=STEPS):
    return [float(schedule(tg.constant(float(s)))) for s in steps]


def test_exponential_decay():
    s = schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    np.testing.assert_allclose(values(s), [0.1 * 0.5 ** (k / 10) for k in STEPS], rtol=1e-14)
    s = schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=True)
    np.testing.assert_allclose(values(s), [0.1 * 0.5 ** (k // 10) for k in STEPS], rtol=1e-14)


def test_piecewise_constant_decay():
    s = schedules.PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
    steps = [0, 9, 10, 10.5, 11, 20, 21, 1000]  # a boundary belongs to the interval below
    np.testing.assert_array_equal(values(s, steps), [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.1, 0.1])
    np.testing.assert_array_equal(values(schedules.PiecewiseConstantDecay([], [0.3]), [0, 5]),
                                  [0.3, 0.3])


def test_polynomial_decay():
    lr0, end, n, power = 0.1, 0.01, 10, 0.5

    def keras(k, cycle):
        if cycle:
            steps = n * (1 if k == 0 else math.ceil(k / n))
        else:
            k, steps = min(k, n), n
        return (lr0 - end) * (1 - k / steps) ** power + end

    for cycle in (False, True):
        s = schedules.PolynomialDecay(lr0, n, end_learning_rate=end, power=power, cycle=cycle)
        np.testing.assert_allclose(values(s), [keras(k, cycle) for k in STEPS], rtol=1e-14)
    # without cycle the rate stays at end_learning_rate; with it, 15 of 20 steps are done
    assert float(schedules.PolynomialDecay(lr0, n, end)(tg.constant(15.0))) == end
    np.testing.assert_allclose(float(schedules.PolynomialDecay(lr0, n, end, cycle=True)(15)),
                               (lr0 - end) * 0.25 + end, rtol=1e-14)
    assert schedules.PolynomialDecay(1.0, 5).end_learning_rate == 0.0001  # Keras default


def test_inverse_time_decay():
    s = schedules.InverseTimeDecay(0.1, decay_steps=5, decay_rate=0.5)
    np.testing.assert_allclose(values(s), [0.1 / (1 + 0.5 * k / 5) for k in STEPS], rtol=1e-14)
    s = schedules.InverseTimeDecay(0.1, decay_steps=5, decay_rate=0.5, staircase=True)
    np.testing.assert_allclose(values(s), [0.1 / (1 + 0.5 * (k // 5)) for k in STEPS],
                               rtol=1e-14)


def cosine(k, n, lr0, alpha):
    k = min(k, n)
    return lr0 * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * k / n)) + alpha)


def test_cosine_decay():
    s = schedules.CosineDecay(0.1, decay_steps=10, alpha=0.2)
    np.testing.assert_allclose(values(s), [cosine(k, 10, 0.1, 0.2) for k in STEPS], rtol=1e-14)
    np.testing.assert_allclose(values(s, [0, 5, 10, 50]), [0.1, 0.06, 0.02, 0.02], rtol=1e-14)


def test_cosine_decay_with_warmup():
    lr0, target, warmup, n, alpha = 0.01, 0.1, 5, 10, 0.1
    s = schedules.CosineDecay(lr0, n, alpha=alpha, warmup_target=target, warmup_steps=warmup)

    def keras(k):
        k = min(k, n + warmup)
        if k < warmup:
            return (target - lr0) * (k / warmup) + lr0
        return cosine(k - warmup, n, target, alpha)

    np.testing.assert_allclose(values(s), [keras(k) for k in STEPS], rtol=1e-14)
    np.testing.assert_allclose(values(s, [0, 5, 10, 15]),
                               [lr0, target, target * 0.55, target * alpha], rtol=1e-14)
    # warmup_target without warmup steps: the decay starts from warmup_target, no 0/0 warning
    s = schedules.CosineDecay(lr0, n, warmup_target=target)
    with np.errstate(all="raise"):
        np.testing.assert_allclose(values(s, [0, 10]), [target, 0.0], atol=1e-17)


def test_step_kinds_and_result():
    s = schedules.ExponentialDecay(0.1, 10, 0.5)
    for step in [3, 3.0, np.int64(3), tg.constant(3), tg.constant(np.float32(3.0))]:
        lr = s(step)
        assert isinstance(lr, tg.Tensor) and lr.shape == () and lr.dtype == np.float64
        np.testing.assert_allclose(float(lr), 0.1 * 0.5**0.3, rtol=1e-14)


ALL = [schedules.ExponentialDecay(0.1, 3, 0.7, staircase=True),
       schedules.PiecewiseConstantDecay([2, 5], [0.3, 0.2, 0.1]),
       schedules.PolynomialDecay(0.1, 4, 0.01, power=2.0, cycle=True),
       schedules.InverseTimeDecay(0.1, 2, 0.5, staircase=True),
       schedules.CosineDecay(0.0, 4, alpha=0.1, warmup_target=0.1, warmup_steps=3)]


@pytest.mark.parametrize("schedule", ALL, ids=lambda s: type(s).__name__)
def test_traced_step_gives_eager_values(schedule):
    pytest.importorskip("jax")
    f = tg.function(lambda step: schedule(step), jit_compile=True)
    steps = [0.0, 1.0, 2.0, 3.0, 4.5, 6.0, 9.0]
    compiled = [float(f(tg.constant(k))) for k in steps]
    np.testing.assert_allclose(compiled, values(schedule, steps), rtol=1e-14)
    assert f.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("schedule", ALL, ids=lambda s: type(s).__name__)
def test_config_round_trip(schedule):
    config = schedule.get_config()
    clone = type(schedule).from_config(config)
    assert clone.get_config() == config
    assert values(clone) == values(schedule)
    again = schedules.deserialize(schedules.serialize(schedule))
    assert type(again) is type(schedule) and again.get_config() == config


def test_optimizer_uses_schedule_at_each_iteration():
    s = schedules.PiecewiseConstantDecay([1], [0.5, 0.25])  # steps 0, 1 at 0.5, then 0.25
    w = tg.Variable(0.0)
    opt = tg.optimizers.SGD(s)
    for _ in range(4):
        opt.apply_gradients([(tg.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), -(0.5 + 0.5 + 0.25 + 0.25))


def test_custom_schedule_subclass():
    class Halving(schedules.LearningRateSchedule):
        def __init__(self, lr):
            self.lr = lr

        def __call__(self, step):
            return self.lr * 0.5**step

        def get_config(self):
            return {"lr": self.lr}

    w = tg.Variable(0.0)
    opt = tg.optimizers.SGD(Halving(1.0))
    for _ in range(3):
        opt.apply_gradients([(tg.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), -1.75)
    config = opt.get_config()
    assert config["learning_rate"] == {"class_name": "Halving", "config": {"lr": 1.0}}
    clone = schedules.deserialize(config["learning_rate"], custom_objects={"Halving": Halving})
    assert clone.lr == 1.0


@pytest.mark.parametrize("make,match", [
    (lambda: schedules.ExponentialDecay(0.1, 0, 0.5),
     r"ExponentialDecay: argument `decay_steps` must be > 0. Received: decay_steps=0"),
    (lambda: schedules.PolynomialDecay(0.1, -5), "PolynomialDecay: argument `decay_steps`"),
    (lambda: schedules.InverseTimeDecay(0.1, 0.0, 1.0), "InverseTimeDecay: argument"),
    (lambda: schedules.CosineDecay(0.1, 0), "CosineDecay: argument `decay_steps` must be > 0"),
    (lambda: schedules.CosineDecay(0.1, 10, warmup_target=1.0, warmup_steps=-1),
     "`warmup_steps` must be >= 0"),
    (lambda: schedules.PiecewiseConstantDecay([1, 2], [0.1, 0.2]),
     r"length of boundaries should be 1 less than the length of values.*of length 2"),
    (lambda: schedules.PiecewiseConstantDecay([5, 2], [0.1, 0.2, 0.3]),
     r"boundaries must be strictly increasing. Received: boundaries=\[5, 2\]"),
    (lambda: schedules.deserialize({"class_name": "Nope", "config": {}}),
     "unknown schedule class 'Nope'"),
])
def test_bad_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_base_class_must_be_overridden():
    with pytest.raises(NotImplementedError, match=r"must override `__call__\(self, step\)`"):
        schedules.LearningRateSchedule()(0)
    with pytest.raises(NotImplementedError, match="must override `get_config"):
        schedules.LearningRateSchedule().get_config()
    with pytest.raises(TypeError, match="expected a LearningRateSchedule"):
        schedules.serialize(lambda step: 0.1)
