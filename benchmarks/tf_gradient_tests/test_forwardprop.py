"""tf.autodiff.ForwardAccumulator: restated from tensorflow/python/eager/forwardprop_test.py
(ForwardpropTest, HessianTests, JacobianTests), public API only."""
import numpy as np

from shim import TestCase, tf


def jvp(f, primals, tangents):
    with tf.autodiff.ForwardAccumulator(primals, tangents) as acc:
        out = f(*primals)
    return out, acc.jvp(out)


_X11_35_DERIVATIVES = [1.1 ** 3.5, 3.5 * 1.1 ** 2.5, 3.5 * 2.5 * 1.1 ** 1.5, 3.5 * 2.5 * 1.5 * 1.1 ** 0.5]


def _hvp(f, primals, tangents):
    """Forward-over-back Hessian-vector product (TF's forwardprop_test._hvp)."""
    with tf.autodiff.ForwardAccumulator(primals, tangents) as acc:
        with tf.GradientTape() as tape:
            tape.watch(primals)
            f_out = f(*primals)
        return acc.jvp(tape.gradient(f_out, primals))


class ForwardpropTest(TestCase):

    def testJVPManual(self):
        primal, tangent = jvp(tf.sin, (tf.constant(0.1),), (tf.constant(0.2),))
        self.assertAllClose(tf.sin(0.1), primal)
        self.assertAllClose(tf.cos(0.1) * 0.2, tangent)

    def testNumericHigherOrder(self):
        x = tf.constant(1.1)
        with tf.autodiff.ForwardAccumulator(x, tf.constant(1.)) as outer:
            with tf.autodiff.ForwardAccumulator(x, tf.constant(1.)) as inner:
                y = tf.exp(x) * x
            d1 = inner.jvp(y)
        d2 = outer.jvp(d1)
        self.assertAllClose(d1, np.exp(1.1) * 2.1, rtol=1e-5)
        self.assertAllClose(d2, np.exp(1.1) * 3.1, rtol=1e-5)

    def testJVPFunction(self):
        @tf.function
        def f(x):
            return tf.reduce_prod(tf.tanh(x) ** 2)
        x = tf.constant([1., 2.])
        _, t = jvp(f, (x,), (tf.constant([1., 0.]),))
        with tf.GradientTape() as g:
            g.watch(x)
            y = f(x)
        self.assertAllClose(g.gradient(y, x)[0], t, rtol=1e-5)

    def testJVPFunctionUsedByAccumulatorForOps(self):
        previous_fn = None

        @tf.function
        def f(x):
            return x ** 2
        x = tf.constant(3.)
        _, t = jvp(f, (x,), (tf.constant(2.),))
        self.assertAllClose(t, 12.)
        del previous_fn

    def testUnconnectedTangent(self):
        x, y = tf.constant(1.), tf.constant(2.)
        with tf.autodiff.ForwardAccumulator(x, tf.constant(1.)) as acc:
            z = y * 3.
        self.assertIsNone(acc.jvp(z))
        self.assertAllEqual(acc.jvp(z, unconnected_gradients="zero"), 0.)

    def testJVPPacking(self):
        two, three = tf.constant(2.), tf.constant(3.)
        with tf.autodiff.ForwardAccumulator([two, three], [tf.constant(1.), tf.constant(10.)]) as acc:
            p = two * three
        self.assertAllClose(acc.jvp(p), 3. + 20.)

    def testMultipleWatchesAdd(self):
        x = tf.constant(-2.)
        with self.assertRaisesRegex(ValueError, "multiple times"):
            with tf.autodiff.ForwardAccumulator([x, x], [1., 2.]):
                pass

    def testReenter(self):
        x = tf.constant(-2.)
        with tf.autodiff.ForwardAccumulator(x, 1.5) as acc:
            self.assertAllClose(acc.jvp(x), 1.5)
            y = 4. * x
        self.assertAllClose(acc.jvp(y), 6.)
        z = 4. * x
        self.assertIsNone(acc.jvp(z))
        with acc:
            yy = y * y
        self.assertAllClose(6. * -8. * 2., acc.jvp(yy))

    def testDeadTensorsJVPCleared(self):
        x = tf.ones([100])
        x_weak_tangent = tf.ones([100])
        with tf.autodiff.ForwardAccumulator(x, x_weak_tangent) as acc:
            y = x * 2.
        self.assertAllClose(acc.jvp(y), 2. * np.ones(100))

    def testJVPManualVariable(self):
        v = tf.Variable(2.)
        with tf.autodiff.ForwardAccumulator(v, tf.constant(3.)) as acc:
            y = v * v
        self.assertAllClose(acc.jvp(y), 12.)

    def testJVPWatchedVariableRead(self):
        v = tf.Variable(1.)
        with tf.autodiff.ForwardAccumulator(v, tf.constant(2.)) as acc:
            y = v.read_value() * 4.
        self.assertAllClose(acc.jvp(y), 8.)

    def testIndexSlicesGrad(self):
        x = tf.constant([1.])
        with tf.autodiff.ForwardAccumulator(x, tf.constant([3.])) as acc:
            y = tf.gather(x, [0])
        self.assertAllClose(acc.jvp(y), [3.])

    def testIndexSlicesGradInFunction(self):
        @tf.function
        def f(a):
            return tf.gather(a, [0])
        x = tf.constant([1.])
        with tf.autodiff.ForwardAccumulator(x, tf.constant([3.])) as acc:
            y = f(x)
        self.assertAllClose(acc.jvp(y), [3.])

    def testGradPureForward(self):
        # Forward-over-backward: the tape gradient's JVP is a Hessian-vector product.
        x = tf.constant([1., 2.])
        with tf.autodiff.ForwardAccumulator(x, tf.constant([1., 0.])) as acc:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(x ** 3)
            g = tape.gradient(y, x)
        self.assertAllClose(acc.jvp(g), [6., 0.])

    def testBackwardOverForward(self):
        x = tf.constant(1.5)
        with tf.GradientTape() as tape:
            tape.watch(x)
            with tf.autodiff.ForwardAccumulator(x, tf.constant(1.)) as acc:
                y = tf.sin(x) * x
            t = acc.jvp(y)
        self.assertAllClose(tape.gradient(t, x), 2 * np.cos(1.5) - 1.5 * np.sin(1.5), rtol=1e-5)

    def testForwardOverForward(self):
        x = tf.constant(0.7)
        with tf.autodiff.ForwardAccumulator(x, tf.constant(1.)) as a1:
            with tf.autodiff.ForwardAccumulator(x, tf.constant(1.)) as a2:
                y = tf.tanh(x)
            t = a2.jvp(y)
        th = np.tanh(0.7)
        self.assertAllClose(t, 1 - th ** 2, rtol=1e-5)
        self.assertAllClose(a1.jvp(t), -2 * th * (1 - th ** 2), rtol=1e-5)

    def testFunctionGrad(self):
        @tf.function
        def f(x):
            return tf.reduce_sum(tf.square(x) * 3.)
        x = tf.constant([1., 2.])
        _, t = jvp(f, (x,), (tf.constant([1., 1.]),))
        self.assertAllClose(t, 18.)

    def testFunctionWithVariables(self):
        v = tf.Variable([1., 2.])

        @tf.function
        def f():
            return tf.reduce_sum(v * v)
        with tf.autodiff.ForwardAccumulator(v, tf.constant([1., 0.])) as acc:
            y = f()
        self.assertAllClose(acc.jvp(y), 2.)

    def testExceptionInCustomGradientNotSwallowed(self):
        @tf.custom_gradient
        def f(x):
            def grad(_):
                raise ValueError("test_error_string")
            return tf.sin(x), grad
        c = tf.constant(1.)
        with self.assertRaisesRegex(ValueError, "test_error_string"):
            with tf.autodiff.ForwardAccumulator(c, tf.constant(1.)):
                f(c)

    def testVariableReadInFunction(self):
        v = tf.Variable(1.)
        with tf.autodiff.ForwardAccumulator(v, tf.constant(11.)) as acc:
            @tf.function
            def f():
                return v.read_value(), 2. * v.read_value()
            result = f()
        self.assertAllEqual((1.0, 2.), result)
        self.assertAllEqual((11., 22.), acc.jvp(result))

    def testJVPStructure(self):
        x, y = tf.constant(1.), tf.constant(2.)
        with tf.autodiff.ForwardAccumulator([x, y], [tf.constant(1.), tf.constant(0.)]) as acc:
            out = {"a": x * y, "b": [x + y, y * y]}
        j = acc.jvp(out)
        self.assertAllClose(j["a"], 2.)
        self.assertAllClose(j["b"], [1., 0.])

    def testOfFunctionWhile(self):
        y = tf.constant(1.)
        with tf.autodiff.ForwardAccumulator(y, 1.) as acc:
            _, out = tf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2.), (0, y))
        self.assertAllClose(8., acc.jvp(out))

    def testOfFunctionCond(self):
        y = tf.constant(2.)
        with tf.autodiff.ForwardAccumulator(y, 1.) as acc:
            out = tf.cond(y > 1., lambda: y * y, lambda: y)
        self.assertAllClose(4., acc.jvp(out))

    def testMatmulJVP(self):
        a = tf.constant([[1., 2.], [3., 4.]])
        da = tf.constant([[0., 1.], [1., 0.]])
        b = tf.constant([[5.], [6.]])
        _, t = jvp(lambda a: tf.matmul(a, b), (a,), (da,))
        self.assertAllClose(t, np.array([[0., 1.], [1., 0.]]) @ np.array([[5.], [6.]]))

    def testReduceAndBroadcastJVP(self):
        x = tf.constant([[1., 2.], [3., 4.]])
        _, t = jvp(lambda x: tf.reduce_mean(x, axis=0) + tf.reduce_max(x, axis=1), (x,), (tf.ones_like(x),))
        self.assertAllClose(t, [2., 2.])

    def _higher_order_pure_forward(self, order):
        def forwardgrad(f):
            def compute(primal):
                with tf.autodiff.ForwardAccumulator(primal, tf.constant(1.)) as acc:
                    out = f(primal)
                return acc.jvp(out)
            return compute
        f = lambda x: x ** 3.5
        for _ in range(order):
            f = forwardgrad(f)
        self.assertAllClose(_X11_35_DERIVATIVES[order], f(tf.constant(1.1)), rtol=1e-5)

    def testHigherOrderPureForwardOrder0(self):
        self._higher_order_pure_forward(0)

    def testHigherOrderPureForwardOrder1(self):
        self._higher_order_pure_forward(1)

    def testHigherOrderPureForwardOrder2(self):
        self._higher_order_pure_forward(2)

    def testHigherOrderPureForwardOrder3(self):
        self._higher_order_pure_forward(3)

    def testFunctionGradInFunctionPureForward(self):
        @tf.function
        def take_gradients():
            @tf.function
            def f(x):
                return x ** 3.5
            primal = tf.constant(1.1)
            with tf.autodiff.ForwardAccumulator(primal, tf.constant(1.)) as outer_acc:
                with tf.autodiff.ForwardAccumulator(primal, tf.constant(1.)) as acc:
                    primal_out = f(primal)
            inner_jvp = acc.jvp(primal_out)
            outer_jvp = outer_acc.jvp(inner_jvp)
            self.assertIsNone(acc.jvp(outer_acc.jvp(primal_out)))
            return primal_out, inner_jvp, outer_jvp
        primal_out, inner_jvp, outer_jvp = take_gradients()
        self.assertAllClose(1.1 ** 3.5, primal_out, rtol=1e-5)
        self.assertAllClose(3.5 * 1.1 ** 2.5, inner_jvp, rtol=1e-5)
        self.assertAllClose(3.5 * 2.5 * 1.1 ** 1.5, outer_jvp, rtol=1e-5)

    def testReusingJVP(self):
        rng = np.random.RandomState(0)
        m1 = tf.constant(rng.rand(16, 24).astype("float32"))
        m2 = tf.identity(m1)
        tangent1 = tf.constant(rng.rand(16, 24).astype("float32"))
        tangent2 = tf.constant(rng.rand(16, 24).astype("float32"))
        matmul = tf.function(tf.matmul)
        with tf.autodiff.ForwardAccumulator(primals=[m1, m2], tangents=[tangent1, tangent2]) as acc:
            result1 = matmul(m1, m1, transpose_b=True)
            result2 = matmul(m2, m2, transpose_b=True)

        def expected(mat, tangent):
            return tf.matmul(tangent, mat, transpose_b=True) + tf.matmul(mat, tangent, transpose_b=True)
        self.assertAllClose(result1, result2)
        self.assertAllClose(expected(m1, tangent1), acc.jvp(result1), rtol=1e-5, atol=1e-5)
        self.assertAllClose(expected(m2, tangent2), acc.jvp(result2), rtol=1e-5, atol=1e-5)

    def testHVPCorrectness(self):
        def fun(x):
            return tf.reduce_prod(tf.tanh(x) ** 2)
        primals = tf.constant([1., 2., 3.])
        tangents = tf.constant([3., 4., 5.])
        forwardback_hvp_eager, = _hvp(fun, (primals,), (tangents,))
        forwardback_hvp_function, = tf.function(_hvp)(fun, (primals,), (tangents,))
        with tf.GradientTape(persistent=True) as g:
            g.watch(primals)
            with tf.GradientTape() as gg:
                gg.watch(primals)
                out = fun(primals)
            grad = tf.unstack(gg.gradient(out, primals))
        hessian = tf.stack([g.gradient(grad[i], primals) for i in range(3)], axis=0)
        backback_hvp = tf.tensordot(hessian, tangents, axes=1)
        self.assertAllClose(backback_hvp, forwardback_hvp_eager, rtol=1e-5, atol=1e-6)
        self.assertAllClose(backback_hvp, forwardback_hvp_function, rtol=1e-5, atol=1e-6)

    def testOpWithNoTrainableOutputs(self):
        v = tf.Variable(1.)
        with tf.autodiff.ForwardAccumulator(v, 11.):
            v.assign_sub(0.5)
            self.assertAllClose(0.5, self.evaluate(v))

    def testVariableWatched(self):
        v = tf.Variable([1., 2., 3.])
        with tf.autodiff.ForwardAccumulator(v, tf.constant([.1, -.2, .3])) as acc:
            self.assertAllClose([.1, -.2, .3], acc.jvp(v))
            x = v * 2.
            self.assertAllClose([.2, -.4, .6], acc.jvp(x))
            x2 = v + .1
            self.assertAllClose([.1, -.2, .3], acc.jvp(x2))

    def testUnconnectedGradients(self):
        x = tf.constant(-1.)
        with tf.autodiff.ForwardAccumulator(x, 0.1) as acc:
            self.assertAllClose(0.1, acc.jvp(x, unconnected_gradients="zero"))
            self.assertAllClose(0.1, acc.jvp(x, unconnected_gradients="none"))
            y = tf.constant(-2.)
            self.assertAllClose(0.0, acc.jvp(y, unconnected_gradients="zero"))
            self.assertIsNone(acc.jvp(y, unconnected_gradients="none"))

    def testVariableWatchedFunction(self):
        class _Model(tf.Module):
            def __init__(self):
                super().__init__()
                self._v = tf.Variable([1., 2., 3.])

            @tf.function
            def compute_jvps(self):
                with tf.autodiff.ForwardAccumulator(self._v, tf.constant([.1, -.2, .3])) as acc:
                    x = self._v * 2.
                    x2 = self._v + .1
                return acc.jvp((self._v, x, x2))
        model = _Model()  # tf.function holds its instance weakly
        v_jvp, x_jvp, x2_jvp = model.compute_jvps()
        self.assertAllClose([.1, -.2, .3], v_jvp)
        self.assertAllClose([.2, -.4, .6], x_jvp)
        self.assertAllClose([.1, -.2, .3], x2_jvp)

    def testArgumentUnused(self):
        v = tf.constant(1.)
        with tf.autodiff.ForwardAccumulator(v, 11.) as acc:
            @tf.function
            def _f(x):
                del x
                return tf.constant(1.)
            result = _f(v)
            self.assertAllClose(1.0, result)
            self.assertIsNone(acc.jvp(result))

    def testCustomGradient(self):
        # TF checks the forward Jacobian of a custom_gradient function against its backward one.
        @tf.custom_gradient
        def f(x):
            def grad(dy):
                return dy * tf.cos(x)
            return tf.sin(x), grad
        x = tf.constant([1., 2.])
        _, t = jvp(f, (x,), (tf.constant([1., 1.]),))
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        self.assertAllClose(tape.gradient(y, x), t, rtol=1e-5)
        self.assertAllClose(t, np.cos([1., 2.]), rtol=1e-5)

    def _elementwise(self, value, op_fn, deriv):
        x = tf.constant(value)
        _, t = jvp(op_fn, (x,), (tf.ones_like(x),))
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op_fn(x)
        self.assertAllClose(t, tape.gradient(y, x), rtol=1e-5)
        self.assertAllClose(t, deriv(np.asarray(value, dtype=np.float64)), rtol=1e-5)

    def testElementwiseNNOpsEluM5(self):
        self._elementwise(-0.5, tf.nn.elu, np.exp)

    def testElementwiseNNOpsEluP5(self):
        self._elementwise([0.5], tf.nn.elu, np.ones_like)

    def testElementwiseNNOpsSwishP5(self):
        sig = lambda x: 1. / (1. + np.exp(-x))
        self._elementwise(0.5, tf.nn.swish, lambda x: sig(x) * (1. + x * (1. - sig(x))))

    def testElementwiseNNOpsSwishM5(self):
        sig = lambda x: 1. / (1. + np.exp(-x))
        self._elementwise([-0.5], tf.nn.swish, lambda x: sig(x) * (1. + x * (1. - sig(x))))


@tf.function
def _has_loop(iters, y):
    return tf.while_loop(lambda i, r: i < tf.cast(iters, tf.float32),
                         lambda i, r: (i + 1., r + y * i), (tf.constant(0.), 0. * y))[1]


@tf.function
def _has_cond(k, y):
    return tf.cond(k > 1, lambda: 3. * y, lambda: 0. * y)


@tf.function
def _fprop_while(iters, y):
    with tf.autodiff.ForwardAccumulator(y, 1.) as acc:
        ret = _has_loop(iters, y)
    return acc.jvp(ret)


@tf.function
def _fprop_cond(k, y):
    with tf.autodiff.ForwardAccumulator(y, 1.) as acc:
        ret = _has_cond(k, y)
    return acc.jvp(ret)


class ControlFlowTests(TestCase):
    """TF's versions use AutoGraph (Python for/if on tensors); restated with tf.while_loop/tf.cond."""

    def testOfFunctionCondWithTensorPredicate(self):
        y = tf.constant(1.)
        with tf.autodiff.ForwardAccumulator(y, 1.) as acc:
            self.assertAllClose(3., acc.jvp(_has_cond(tf.constant(5), y)))
            self.assertAllClose(0., acc.jvp(_has_cond(tf.constant(0), y)))

    def testInFunctionWhile(self):
        self.assertAllClose(10., _fprop_while(tf.constant(5), tf.constant(1.)))

    def testInFunctionCond(self):
        self.assertAllClose(3., _fprop_cond(tf.constant(5), tf.constant(1.)))
        self.assertAllClose(0., _fprop_cond(tf.constant(0), tf.constant(1.)))


class HessianTests(TestCase):

    def testHessianOfScalar(self):
        x = tf.constant([1., 2., 3.])
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = tf.reduce_sum(x ** 3)
            g = inner.gradient(y, x)
        self.assertAllClose(outer.jacobian(g, x), np.diag(6. * np.array([1., 2., 3.])))

    def testHVPForwardOverBack(self):
        x = tf.constant([1., 2.])
        v = tf.constant([1., -1.])
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = x[0] ** 2 * x[1]
            g = tape.gradient(y, x)
        # H = [[2 x1, 2 x0], [2 x0, 0]] = [[4, 2], [2, 0]]
        self.assertAllClose(acc.jvp(g), [2., 2.])

    def testHessian1D(self):
        # Forward-over-back Hessian, one one-hot tangent per parameter (TF's _forward_over_back_hessian).
        m = 4
        rng = np.random.RandomState([1, 2, 3])
        mat_value = rng.randn(m, m).astype("float32")
        x_value = rng.randn(m).astype("float32")
        mat = tf.Variable(mat_value)

        def f(x):
            return tf.reduce_sum(x[:, None] * mat * x[None, :])

        def hessian(x):
            return tf.stack([_hvp(f, (x,), (tf.one_hot(i, m),))[0] for i in range(m)])
        x = tf.constant(x_value)
        self.assertAllClose(mat_value + mat_value.T, hessian(x), rtol=1e-5, atol=1e-5)
        self.assertAllClose(mat_value + mat_value.T, tf.function(hessian)(x), rtol=1e-5, atol=1e-5)

    def testHessianOfVariables(self):
        # TF uses a Keras Dense(1) layer; restated with its kernel and bias as variables.
        kernel = tf.Variable([[0.3], [-0.7]])
        bias = tf.Variable([0.1])

        def loss():
            x = tf.constant([[-0.5, 1.], [0.5, -1.]])
            target = tf.constant([[-1.], [2.]])
            return tf.reduce_sum((tf.matmul(x, kernel) + bias - target) ** 2.)
        rows = []
        for i in range(3):
            onehot = tf.one_hot(i, 3)
            tk, tb = tf.reshape(onehot[:2], [2, 1]), onehot[2:]
            with tf.autodiff.ForwardAccumulator([kernel, bias], [tk, tb]) as acc:
                with tf.GradientTape() as tape:
                    l = loss()
                gk, gb = tape.gradient(l, [kernel, bias])
            jk, jb = acc.jvp([gk, gb])
            rows.append(tf.concat([tf.reshape(jk, [2]), jb], axis=0))
        full = tf.stack(rows)
        self.assertEqual([3, 3], list(full.shape))
        self.assertAllClose(full, tf.transpose(full))
        self.assertAllClose(full, [[1., -2., 0.], [-2., 4., 0.], [0., 0., 4.]], rtol=1e-5)


class JacobianTests(TestCase):

    def testJacobian(self):
        x = tf.constant([1., 2.])
        with tf.GradientTape() as t:
            t.watch(x)
            y = x * x
        self.assertAllClose(t.jacobian(y, x), [[2., 0.], [0., 4.]])

    def testJacobianUnconnectedZero(self):
        x, z = tf.constant([1., 2.]), tf.constant([1.])
        with tf.GradientTape() as t:
            t.watch([x, z])
            y = x * 2.
        self.assertAllClose(t.jacobian(y, z, unconnected_gradients="zero"), [[0.], [0.]])

    def testJacobianNoVectorized(self):
        x = tf.constant([1., 2., 3.])
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = tf.cumsum(x)
        self.assertAllClose(t.jacobian(y, x, experimental_use_pfor=False), np.tril(np.ones((3, 3))))

    def testBatchJacobian(self):
        x = tf.constant([[1., 2.], [3., 4.]])
        with tf.GradientTape() as t:
            t.watch(x)
            y = x * x
        self.assertAllClose(t.batch_jacobian(y, x), [np.diag([2., 4.]), np.diag([6., 8.])])

    def testJacobianVariable(self):
        v = tf.Variable([1., 2.])
        with tf.GradientTape() as t:
            y = tf.stack([v[0] * v[1], v[0] + v[1]])
        self.assertAllClose(t.jacobian(y, v), [[2., 1.], [1., 1.]])

    def testJacobianInFunction(self):
        @tf.function
        def jac(x):
            with tf.GradientTape() as t:
                t.watch(x)
                y = tf.sin(x)
            return t.jacobian(y, x)
        x = tf.constant([0.1, 0.2])
        self.assertAllClose(jac(x), np.diag(np.cos([0.1, 0.2])), rtol=1e-5)
