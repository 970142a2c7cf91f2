"""tf.autodiff.ForwardAccumulator: restated from tensorflow/python/eager/forwardprop_test.py
(ForwardpropTest, HessianTests, JacobianTests), public API only."""
import numpy as np

from shim import TestCase, tf


def jvp(f, primals, tangents):
    with tf.autodiff.ForwardAccumulator(primals, tangents) as acc:
        out = f(*primals)
    return out, acc.jvp(out)


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
