"""tapegrad.optimizers: Keras 3 update formulas, None gradients, validation, minimize."""
import math
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import optimizers

rng = np.random.default_rng(0)


# Reference implementations of the Keras 3 formulas (keras/src/optimizers/sgd.py, adam.py),
# written out independently of tapegrad.
def sgd_reference(w, grads, lr, momentum=0.0, nesterov=False):
    w, m = w.copy(), np.zeros_like(w)
    for g in grads:
        if momentum == 0.0:
            w = w - lr * g
        else:
            m = momentum * m - lr * g
            w = w + (momentum * m - lr * g if nesterov else m)
    return w


def adam_reference(w, grads, lr, b1=0.9, b2=0.999, eps=1e-7):
    w, m, v = w.copy(), np.zeros_like(w), np.zeros_like(w)
    for step, g in enumerate(grads, start=1):
        alpha = lr * np.sqrt(1 - b2**step) / (1 - b1**step)
        m = m + (g - m) * (1 - b1)
        v = v + (g**2 - v) * (1 - b2)
        w = w - m * alpha / (np.sqrt(v) + eps)
    return w


def run(opt, w0, grads):
    var = tg.Variable(w0)
    for g in grads:
        opt.apply_gradients([(tg.constant(g), var)])
    return var.numpy()


W0 = rng.normal(size=(3, 4))
GRADS = [rng.normal(size=(3, 4)) for _ in range(5)]


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.5, True)])
def test_sgd_matches_keras_formula(momentum, nesterov):
    opt = optimizers.SGD(learning_rate=0.1, momentum=momentum, nesterov=nesterov)
    np.testing.assert_allclose(run(opt, W0, GRADS),
                               sgd_reference(W0, GRADS, 0.1, momentum, nesterov), rtol=1e-13)
    assert opt.iterations == len(GRADS)


def test_sgd_momentum_hand_computed_two_steps():
    # w = 1, g = 1 twice, lr = 0.1, momentum = 0.9: m1 = -0.1, w1 = 0.9; m2 = -0.19, w2 = 0.71
    var = tg.Variable(1.0)
    opt = optimizers.SGD(learning_rate=0.1, momentum=0.9)
    for _ in range(2):
        opt.apply_gradients([(tg.constant(1.0), var)])
    np.testing.assert_allclose(var.numpy(), 0.71)
    # nesterov: w1 = 1 + 0.9 * -0.1 - 0.1 = 0.81; w2 = 0.81 + 0.9 * -0.19 - 0.1 = 0.539
    var = tg.Variable(1.0)
    opt = optimizers.SGD(learning_rate=0.1, momentum=0.9, nesterov=True)
    for _ in range(2):
        opt.apply_gradients([(tg.constant(1.0), var)])
    np.testing.assert_allclose(var.numpy(), 0.539)


@pytest.mark.parametrize("kw", [{}, {"beta_1": 0.5, "beta_2": 0.9, "epsilon": 1e-3}])
def test_adam_matches_keras_formula(kw):
    opt = optimizers.Adam(learning_rate=0.01, **kw)
    ref = adam_reference(W0, GRADS, 0.01, kw.get("beta_1", 0.9), kw.get("beta_2", 0.999),
                         kw.get("epsilon", 1e-7))
    np.testing.assert_allclose(run(opt, W0, GRADS), ref, rtol=1e-13)


def test_adam_first_step_is_lr_times_sign():
    # with m, v from zero, step 1 gives m = (1-b1) g, v = (1-b2) g^2 and alpha makes the step
    # lr * g / (|g| + eps / sqrt(1 - b2)): about lr * sign(g)
    var = tg.Variable([1.0, -2.0])
    optimizers.Adam(learning_rate=0.1).apply_gradients([(tg.constant([3.0, -0.5]), var)])
    np.testing.assert_allclose(var.numpy(), [0.9, -1.9], rtol=1e-5)


def test_defaults_are_keras():
    sgd, adam = optimizers.SGD(), optimizers.Adam()
    assert (float(sgd.learning_rate), sgd.momentum, sgd.nesterov) == (0.01, 0.0, False)
    assert (float(adam.learning_rate), adam.beta_1, adam.beta_2, adam.epsilon) == (
        0.001, 0.9, 0.999, 1e-7)


def test_several_variables_keep_separate_state():
    w1, w2 = rng.normal(size=3), rng.normal(size=(2, 2))
    g1, g2 = [rng.normal(size=3) for _ in range(3)], [rng.normal(size=(2, 2)) for _ in range(3)]
    v1, v2 = tg.Variable(w1), tg.Variable(w2)
    opt = optimizers.Adam(learning_rate=0.05)
    for a, b in zip(g1, g2):
        opt.apply_gradients(zip([tg.constant(a), b], [v1, v2]))  # a backend array is accepted
    np.testing.assert_allclose(v1.numpy(), adam_reference(w1, g1, 0.05), rtol=1e-13)
    np.testing.assert_allclose(v2.numpy(), adam_reference(w2, g2, 0.05), rtol=1e-13)


def test_learning_rate_schedule_gets_step():
    seen = []

    def schedule(step):
        seen.append(step)
        return 0.1 / (1 + step)

    var = tg.Variable(0.0)
    opt = optimizers.SGD(learning_rate=schedule)
    for _ in range(3):
        opt.apply_gradients([(tg.constant(1.0), var)])
    assert seen == [0, 1, 2]
    np.testing.assert_allclose(var.numpy(), -(0.1 + 0.05 + 0.1 / 3))


def test_update_rebinds_variable_array():
    var = tg.Variable([1.0, 2.0])
    before = var.read_value()  # a Tensor holding the current array
    snapshot = before.numpy().copy()
    optimizers.SGD(0.5, momentum=0.9).apply_gradients([(tg.constant([1.0, 1.0]), var)])
    np.testing.assert_array_equal(before.numpy(), snapshot)  # the old array was not mutated
    np.testing.assert_allclose(var.numpy(), [0.5, 1.5])


def test_float32_variable_stays_float32():
    var = tg.Variable(np.ones(3, dtype=np.float32))
    opt = optimizers.Adam(0.1)
    opt.apply_gradients([(tg.constant(np.ones(3)), var)])  # float64 gradient is cast
    assert var.dtype == np.float32
    np.testing.assert_allclose(var.numpy(), 0.9, rtol=1e-5)


def test_none_gradient_warns_and_skips():
    a, b = tg.Variable(1.0, name="kernel"), tg.Variable(2.0, name="bias")
    opt = optimizers.SGD(0.1)
    with pytest.warns(UserWarning, match="bias"):
        opt.apply_gradients([(tg.constant(1.0), a), (None, b)])
    np.testing.assert_allclose([a.numpy(), b.numpy()], [0.9, 2.0])
    assert opt.iterations == 1
    with pytest.raises(ValueError, match="no gradients provided"):
        opt.apply_gradients([(None, a), (None, b)])


def test_validation_errors_update_nothing():
    a, b = tg.Variable(np.ones(3), name="a"), tg.Variable(np.ones((2, 2)), name="b")
    opt = optimizers.SGD(0.1)
    with pytest.raises(ValueError, match=r"'b' has shape \(3,\) but the variable has shape"):
        opt.apply_gradients([(np.ones(3), a), (np.ones(3), b)])
    np.testing.assert_array_equal(a.numpy(), np.ones(3))
    assert opt.iterations == 0
    with pytest.raises(TypeError, match="only tg.Variable"):
        opt.apply_gradients([(np.ones(3), tg.constant(np.ones(3)))])
    with pytest.raises(ValueError, match="momentum"):
        optimizers.SGD(momentum=1.5)
    with pytest.raises(TypeError, match="learning_rate"):
        optimizers.Adam(learning_rate="fast")


def test_minimize_quadratic_converges():
    # f(x) = sum((x - c)^2 * s) has its minimum at x = c
    c = np.array([1.0, -2.0, 3.0])
    s = np.array([1.0, 2.0, 0.5])
    for opt, steps in [(optimizers.SGD(0.1), 200), (optimizers.SGD(0.05, momentum=0.9), 300),
                       (optimizers.SGD(0.05, momentum=0.9, nesterov=True), 300),
                       (optimizers.Adam(0.1), 1000)]:
        x = tg.Variable(np.zeros(3))
        for _ in range(steps):
            assert opt.minimize(lambda: tg.sum((x - c) ** 2 * s), [x]) is None
        np.testing.assert_allclose(x.numpy(), c, atol=1e-4)
        assert opt.iterations == steps


def test_minimize_with_tape_and_tensor_loss():
    x = tg.Variable(2.0)
    opt = optimizers.SGD(0.25)
    with tg.GradientTape() as tape:
        loss = x * x
    opt.minimize(loss, lambda: [x], tape=tape)
    np.testing.assert_allclose(x.numpy(), 2.0 - 0.25 * 4.0)
    with pytest.raises(TypeError, match="zero-argument callable"):
        opt.minimize(x * x, [x])


def test_adam_reference_sanity():
    # the reference itself against a scalar hand computation of one step
    g, lr, b1, b2, eps = 2.0, 0.1, 0.9, 0.999, 1e-7
    m, v = (1 - b1) * g, (1 - b2) * g * g
    alpha = lr * math.sqrt(1 - b2) / (1 - b1)
    w = 1.0 - m * alpha / (math.sqrt(v) + eps)
    np.testing.assert_allclose(adam_reference(np.array(1.0), [np.array(g)], lr), w, rtol=1e-15)


def test_other_array_api_backend():
    xs = pytest.importorskip("array_api_strict")
    for opt, ref in [(optimizers.SGD(0.1, momentum=0.9, nesterov=True),
                      lambda w, g: sgd_reference(w, g, 0.1, 0.9, True)),
                     (optimizers.Adam(0.1), lambda w, g: adam_reference(w, g, 0.1))]:
        var = tg.Variable(xs.asarray(W0))
        for g in GRADS:
            opt.apply_gradients([(tg.constant(xs.asarray(g)), var)])
        assert type(var._value) is type(xs.asarray(W0))
        np.testing.assert_allclose(np.asarray(var._value), ref(W0, GRADS), rtol=1e-13)


def test_sgd_updates_an_unshared_array_in_place_and_never_one_a_tape_record_holds():
    v = tg.Variable(np.ones(3))
    opt = tg.optimizers.SGD(0.5)
    array = weakref.ref(v._value) if isinstance(v._value, np.ndarray) else None
    opt.apply_gradients([(tg.constant(np.ones(3)), v)])
    np.testing.assert_allclose(v.numpy(), 0.5)
    if array is not None:  # NumPy: nothing else held the array, so it was updated in place
        assert array() is v._value
    with tg.GradientTape(persistent=True) as tape:
        y = v * v  # the record keeps v's array: d(v^2)/dv = 2 v reads it
    opt.apply_gradients([(tg.constant(np.ones(3)), v)])
    np.testing.assert_allclose(v.numpy(), 0.0)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), 1.0)  # 2 * 0.5, as recorded


def test_a_learning_rate_callable_of_no_arguments_is_called_each_step():
    rates = iter([0.5, 0.25])
    v = tg.Variable([1.0])
    opt = optimizers.SGD(lambda: next(rates))  # Keras 3's third form of learning_rate
    opt.apply_gradients([(tg.constant([1.0]), v)])
    opt.apply_gradients([(tg.constant([1.0]), v)])
    np.testing.assert_allclose(v.numpy(), [1.0 - 0.5 - 0.25])


def test_a_schedule_class_instead_of_an_instance_is_named():
    with pytest.raises(TypeError, match="learning_rate is the class ExponentialDecay, not a "
                                        r"schedule; pass an instance: ExponentialDecay\("):
        optimizers.Adam(optimizers.schedules.ExponentialDecay)
