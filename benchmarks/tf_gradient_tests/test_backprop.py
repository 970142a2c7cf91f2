"""GradientTape behaviour, restated from tensorflow/python/eager/backprop_test.py (BackpropTest)."""
import numpy as np

from shim import TestCase, tf


def grads(f, *xs, dy=None):
    """The gradient of f at xs (TensorFlow's backprop.gradients_function, with a tape)."""
    xs = [tf.convert_to_tensor(x) for x in xs]
    with tf.GradientTape() as t:
        for x in xs:
            t.watch(x)
        y = f(*xs)
    return t.gradient(y, xs, output_gradients=dy)


class BackpropTest(TestCase):

    def testNoOpBehaviorConsistent(self):
        for deco in (tf.function, lambda f: f):
            @deco
            def f(x):
                x1 = tf.identity(x)
                x2 = tf.add(x, 0.)
                x3 = tf.subtract(x, 0.)
                x4 = tf.multiply(x, 1.)
                with tf.GradientTape() as t:
                    t.watch([x, x1, x2, x3, x4])
                    loss = x * 2. + x1 * 3. + x2 * 3. + x3 * 3. + x4 * 3.
                return t.gradient(loss, [x, x1, x2, x3, x4])
            self.assertAllClose([2., 3., 3., 3., 3.], f(tf.constant(10.)))

    def testWhereGradient(self):
        f = lambda x: tf.where(x < 10, x, x * x)
        self.assertAllEqual(grads(f, 5.)[0], 1.0)
        self.assertAllEqual(grads(f, 50.)[0], 100.0)

    def testTwoTargets(self):
        with tf.GradientTape() as t:
            x, y = tf.constant(3.0), tf.constant(2.0)
            t.watch([x, y])
            xx, yy = 2 * x, 3 * y
        dx, dy = t.gradient([xx, yy], [x, y])
        self.assertAllEqual(dx, 2.0)
        self.assertAllEqual(dy, 3.0)

    def testCustomGradientEmptyError(self):
        @tf.custom_gradient
        def identity(x):
            return x, lambda _: []
        x = tf.Variable(1.0)
        with tf.GradientTape() as t:
            y = identity(x)
        with self.assertRaises(ValueError):
            t.gradient(y, [x])

    def testOutputGradUsedInComputation(self):
        with tf.GradientTape() as t:
            x, y = tf.constant(3.0), tf.constant(2.0)
            t.watch([x, y])
            loss = x * y
        dx, = t.gradient([loss, x], [x], output_gradients=[1.0, 2.0])
        self.assertAllEqual(dx, 4.0)

    def testDy(self):
        self.assertAllEqual(2., grads(lambda x: x, 1., dy=2.)[0])

    def testGradientInteger(self):
        self.assertIsNone(grads(lambda x: x + x, tf.constant(1))[0])

    def testErrors(self):
        @tf.custom_gradient
        def f(x):
            def grad(_):
                raise RuntimeError("x")
            return x, grad
        with self.assertRaises(RuntimeError):
            grads(f, tf.constant(1.0))

    def testGradientsFunctionInCustomGradient(self):
        @tf.custom_gradient
        def f(x):
            (y,) = grads(lambda x: x * x, x)
            return y, lambda dy: [2 * dy]
        self.assertAllEqual(f(tf.constant(1.0)), 2.0)

    def testTapeNoOpGradient(self):
        x = tf.constant(3.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = x
        self.assertEqual(t.gradient(y, x).numpy(), 1.0)

    def testTapeIdentityGradientIsIdentity(self):
        x = tf.constant(3.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.identity(x)
        self.assertEqual(t.gradient(y, x).numpy(), 1.0)

    def testFunctionIndexedSlicesGradient(self):
        @tf.function
        def f(x):
            return x + 1
        with tf.GradientTape() as t:
            x = tf.constant([1.0])
            t.watch(x)
            y = tf.gather(f(x), [0])
        self.assertAllEqual(tf.convert_to_tensor(t.gradient(y, x)), [1.0])

    def testTapeGradientMultiTargetOneIsSource(self):
        x = tf.constant(2.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = x * x
        self.assertEqual(t.gradient([x, y], x).numpy(), 5.0)

    def testTapeNoOpGradientWithMultiTargetAllSource(self):
        x = tf.constant(3.0)
        with tf.GradientTape() as t:
            t.watch(x)
            y = x
        self.assertEqual(t.gradient([y, y], x).numpy(), 2.0)

    def testTapeNoOpGradientWithMultiTargetMultiSource(self):
        x, y = tf.constant(3.0), tf.constant(5.0)
        with tf.GradientTape() as t:
            t.watch(x)
            t.watch(y)
            z = y * y
        self.assertAllEqual(t.gradient([x, y, z], [x, y]), [1.0, 11.0])

    def testTapeGradientStringTarget(self):
        s = tf.constant("unknown", dtype=tf.string)
        x = tf.constant(3.0)
        with tf.GradientTape() as t:
            t.watch(x)
            t.watch(s)
        self.assertIsNone(t.gradient(s, x))

    def testTapeNoOpGradientStringSourceAndTarget(self):
        s = tf.constant("unknown", dtype=tf.string)
        with tf.GradientTape() as t:
            t.watch(s)
        self.assertIsNone(t.gradient(s, s))

    def testTapeNoOpGradientWithMultiTargetMultiSourceIncludeString(self):
        x, y = tf.constant(3.0), tf.constant(5.0)
        s = tf.constant("unknown", dtype=tf.string)
        with tf.GradientTape() as t:
            t.watch(x)
            t.watch(y)
            t.watch(s)
            z = y * y
        g = t.gradient([x, y, z, s], [x, y, s])
        self.assertAllEqual(g[:2], [1.0, 11.0])
        self.assertIsNone(g[2])

    def testTapeNoOpOnVariableIsIdentity(self):
        v0 = tf.Variable(1.0)
        with tf.GradientTape() as t:
            y = v0.read_value()
        self.assertEqual(t.gradient(y, v0).numpy(), 1.0)

    def testTapeNoOpGradient2By2(self):
        a = tf.constant(2.0, shape=[2, 2])
        with tf.GradientTape(persistent=True) as t:
            t.watch(a)
        self.assertAllEqual(t.gradient(a, [a])[0], np.ones((2, 2)))

    def testTapeNoOpGradientMultiTarget2By2(self):
        a = tf.constant(2.0, shape=[2, 2])
        with tf.GradientTape(persistent=True) as t:
            t.watch(a)
        self.assertAllEqual(t.gradient([a, a], [a])[0], 2 * np.ones((2, 2)))

    def testTapeStopRecording(self):
        with tf.GradientTape() as t:
            x = tf.Variable(1.0)
            with t.stop_recording():
                y = x * x
        self.assertIsNone(t.gradient(y, x))

    def testTapeStopStartRecording(self):
        with tf.GradientTape(persistent=True) as t:
            x = tf.Variable(1.0)
            x2 = x * 2
            with t.stop_recording():
                y = x2 * x2
            z = x2 * x2
        self.assertIsNone(t.gradient(y, x2))
        self.assertEqual(t.gradient(z, x2).numpy(), 4.0)

    def testTapeReset(self):
        with tf.GradientTape() as t:
            v = tf.Variable(1.0)
            loss = v * v
            t.reset()
            loss += v * v
        self.assertAllEqual(t.gradient(loss, v), 2.0)

    def testPythonMax(self):
        x = [tf.Variable(2.), tf.Variable(3.), tf.Variable(5.)]
        with tf.GradientTape() as t:
            f = max(x)
        g = t.gradient(f, x)
        self.assertAllEqual(f, 5.)
        self.assertAllEqual(g, [None, None, 1.0])

    def testAutomaticWatchedVariables(self):
        with tf.GradientTape() as t:
            self.assertEqual(0, len(t.watched_variables()))
            v = tf.Variable(1.0)
            loss = v * v
            self.assertEqual(1, len(t.watched_variables()))
            self.assertIs(t.watched_variables()[0], v)
            t.reset()
            self.assertEqual(0, len(t.watched_variables()))
            loss += v * v
            self.assertIs(t.watched_variables()[0], v)

    def testExplicitWatchedVariables(self):
        with tf.GradientTape() as t:
            self.assertEqual(0, len(t.watched_variables()))
            v = tf.Variable(1.0)
            t.watch(v)
            self.assertIs(t.watched_variables()[0], v)
            t.reset()
            self.assertEqual(0, len(t.watched_variables()))
            t.watch(v)
            self.assertIs(t.watched_variables()[0], v)

    def testGradientNone(self):
        def loss(x, l):
            return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=x, labels=l), [0])
        g = grads(loss, tf.constant([[0.0, 0.0]]), tf.constant([[1.0, 0.0]]))[0]
        self.assertAllClose(g, [[-0.5, 0.5]])

    def testGradientWithinTapeBlock(self):
        v1 = tf.Variable(1.)
        for persistent in (False, True):
            with tf.GradientTape(persistent=persistent) as t:
                loss = 2 * v1
                g = t.gradient(loss, v1)
            self.assertAllEqual(g, 2.0)

    def testNestedSelfContexts(self):
        with tf.GradientTape() as t:
            with self.assertRaises(ValueError):
                with t:
                    pass

    def testSecondGrad(self):
        def first(x):
            x = tf.nn.softmax_cross_entropy_with_logits(labels=tf.constant([[0.0]]), logits=x)
            return tf.reduce_sum(x, [0])

        def second(x):
            return tf.reduce_sum(grads(first, x)[0], [0])
        self.assertAllEqual([[0.0]], grads(second, tf.constant([[0.1]]))[0])

    def testWatchingIsTapeLocal(self):
        x1 = tf.Variable(2.0, trainable=False)
        x2 = tf.Variable(2.0, trainable=False)
        with tf.GradientTape() as tape1:
            with tf.GradientTape() as tape2:
                tape1.watch(x1)
                tape2.watch([x1, x2])
                y, z = x1 ** 3, x2 ** 2
                dy, dz = tape2.gradient([y, z], [x1, x2])
            d2y, d2z = tape1.gradient([dy, dz], [x1, x2])
        self.assertEqual(d2y.numpy(), 12.0)
        self.assertIsNone(d2z)

    def testMakeVJP(self):
        x = tf.constant(3.0)
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = x * x
        self.assertAllEqual(y, 9.0)
        self.assertAllEqual(t.gradient(y, x, output_gradients=tf.constant(2.0)), 12.0)
        self.assertAllEqual(t.gradient(y, x, output_gradients=tf.constant(2.0)), 12.0)

    def testGradGrad(self):
        g = lambda x: grads(lambda x: x * x, x)[0]
        self.assertAllEqual(grads(g, tf.constant(3.0))[0], 2.0)

    def testGradGradExp(self):
        g = lambda x: grads(tf.exp, x)[0]
        self.assertAllEqual(grads(g, tf.constant(0.0))[0], 1.0)

    def testStopGradient(self):
        self.assertIsNone(grads(lambda x: tf.stop_gradient(tf.argmax(x)), tf.constant([0.0]))[0])

    def testCPU(self):
        f = lambda x: tf.add(tf.add(x, tf.constant(2.0)), tf.constant(3.0))
        self.assertAllEqual(grads(f, tf.constant(1.0))[0], 1.0)

    def testEmptyParams(self):
        x, y = tf.constant(1.0), tf.constant(2.0)
        dx, dy = grads(lambda a, b: a * b, x, y)
        self.assertAllEqual(dx, 2.0)
        self.assertAllEqual(dy, 1.0)

    def testUnconnectedNone(self):
        v = tf.Variable(1.0)
        with tf.GradientTape() as t:
            v.read_value()
            y = tf.constant(1.0)
        self.assertIsNone(t.gradient(y, v))

    def testGradientTapeReEnterContext(self):
        g = tf.GradientTape()
        with g:
            x = tf.constant(3.0)
            g.watch(x)
            y = 2 * x
        with g:
            z = 2 * y
        self.assertAllEqual(g.gradient(target=z, sources=[x]), [4.0])

    def testGradientTapeRepeatedSource(self):
        with tf.GradientTape() as g:
            x = tf.constant(3.0)
            g.watch(x)
            y = 2 * x
        self.assertAllEqual(g.gradient(target=y, sources=[x, x]), [2.0, 2.0])

    def testPersistentGradientTapeRepeatedSource(self):
        with tf.GradientTape(persistent=True) as g:
            x, y = tf.constant(3.0), tf.constant(5.0)
            g.watch(x)
            g.watch(y)
            z = x * x + x * y
        self.assertAllEqual(g.gradient(z, [x, x]), [11.0, 11.0])
        self.assertAllEqual(g.gradient(z, [y, x]), [3.0, 11.0])

    def testGradientTapeStructure(self):
        with tf.GradientTape(persistent=True) as g:
            x1, x2, x3 = tf.constant(3.0), tf.constant(3.1), tf.constant(3.2)
            g.watch(x1)
            g.watch(x2)
            g.watch(x3)
            y = x1 + 2 * x2 + 3 * x3
        self.assertEqual(self.evaluate(g.gradient(y, x1)), 1.0)
        self.assertEqual(self.evaluate(g.gradient(y, (x1,))), (1.0,))
        self.assertEqual(self.evaluate(g.gradient(y, (x1, x2))), (1.0, 2.0))
        self.assertEqual(self.evaluate(g.gradient(y, [(x1, x2), (x2, x3)])), [(1.0, 2.0), (2.0, 3.0)])
        self.assertEqual(self.evaluate(g.gradient(y, (x1, x2, [x1, x3]))), (1.0, 2.0, [1.0, 3.0]))
        self.assertEqual(self.evaluate(g.gradient(y, [x1, {"x2": x2, "x3": x3}])),
                         [1.0, {"x2": 2.0, "x3": 3.0}])

    def testGradientTape(self):
        with tf.GradientTape() as g:
            x = tf.constant(3.0)
            g.watch(x)
            y = x * x
            with tf.GradientTape() as gg:
                gg.watch(y)
                z = 2 * y
            inner = gg.gradient(z, [y])[0]
            self.assertEqual(inner.numpy(), 2.0)
            y += inner
        self.assertEqual(g.gradient(y, [x])[0].numpy(), 6.0)

    def testGradientTapeCalledOnConstantTarget(self):
        with tf.GradientTape() as g:
            x = tf.Variable([3.0])
            y = tf.Variable([2.0])
        self.assertIsNone(g.gradient(x, y))

    def testGradientTapeWithCond(self):
        x = tf.constant(3.0)
        with tf.GradientTape() as g:
            g.watch(x)
            y = tf.cond(x < x, lambda: x, lambda: x * x)
        self.assertEqual(g.gradient(y, [x])[0].numpy(), 6.0)

    def testGradientTapeWithWhileLoop(self):
        i, x = tf.constant(1), tf.constant(2.)
        with tf.GradientTape() as g:
            g.watch([x])
            _, y = tf.while_loop(lambda i, _: i < 3, lambda i, x: (i + 1, x * 2), [i, x])
        self.assertEqual(g.gradient(y, [x])[0].numpy(), 4.0)

    def testGradientTapeGradientCalledMultipleTimes(self):
        with tf.GradientTape() as g:
            x = tf.constant(3.0)
            g.watch(x)
            y = x * x
            z = y * y
        g.gradient(z, [x])
        with self.assertRaisesRegex(RuntimeError, "can only be used to compute one set of gradients"):
            g.gradient(y, [x])

    def testPersistentTape(self):
        with tf.GradientTape(persistent=True) as g:
            x = tf.constant(3.0)
            g.watch(x)
            y = x * x
            z = y * y
        self.assertEqual(g.gradient(z, [x])[0].numpy(), 4 * 3 * 3 * 3)
        self.assertEqual(g.gradient(y, [x])[0].numpy(), 2 * 3)

    def testHigherOrderGradient(self):
        with tf.GradientTape(persistent=True) as g:
            x = tf.constant(3.0)
            g.watch(x)
            y = x ** 3
            dy = g.gradient(y, x)
            d2y = g.gradient(dy, x)
        d3y = g.gradient(d2y, x)
        self.assertEqual(y.numpy(), 27)
        self.assertEqual(dy.numpy(), 27)
        self.assertEqual(d2y.numpy(), 18)
        self.assertEqual(d3y.numpy(), 6)

    def testPersistentNestedTape(self):
        with tf.GradientTape(persistent=True) as g:
            x = tf.constant(3.0)
            g.watch(x)
            y = x * x
            with tf.GradientTape(persistent=True) as gg:
                gg.watch(y)
                z = 2 * y
            for _ in range(2):
                inner = gg.gradient(z, [y])[0]
                self.assertEqual(inner.numpy(), 2.0)
            y += inner
            del gg
        self.assertEqual(g.gradient(y, [x])[0].numpy(), 6.0)
        self.assertEqual(g.gradient(z, [x])[0].numpy(), 12.0)

    def testGradientTapeVariable(self):
        v = tf.Variable(1.0, name="v")
        with tf.GradientTape() as g:
            y = v * v
        self.assertAllEqual(g.gradient(y, [v])[0], 2.0)

    def testNestedGradients(self):
        x = tf.constant(3.0)
        with tf.GradientTape() as g:
            g.watch(x)
            y = x * x
            z = y * y
        dz_dx, dz_dy = g.gradient(z, [x, y])
        self.assertEqual(dz_dx.numpy(), 108.0)
        self.assertEqual(dz_dy.numpy(), 18.0)

    def testUnconnectedGradientsDefault(self):
        x, y = tf.constant(1.0), tf.constant(3.0)
        with tf.GradientTape() as g:
            g.watch([x, y])
            z = y * 2
        self.assertIsNone(g.gradient(z, x))

    def testUnconnectedGradientsZeros(self):
        x, y = tf.constant(1.0, shape=[2, 2]), tf.constant(3.0)
        with tf.GradientTape() as g:
            g.watch([x, y])
            z = y * 2
        self.assertAllEqual([[0.0, 0.0], [0.0, 0.0]], g.gradient(z, x, unconnected_gradients="zero"))

    def testUnconnectedGradientsVariablesZeros(self):
        x = tf.Variable(tf.constant(1., shape=[2, 2]))
        y = tf.Variable(tf.constant(3.))
        with tf.GradientTape() as g:
            g.watch([x, y])
            z = y * 2
        self.assertAllEqual(np.zeros((2, 2)), g.gradient(z, x, unconnected_gradients="zero"))

    def testUnconnectedGradientsEnum(self):
        x, y = tf.constant(1.0), tf.constant(3.0)
        with tf.GradientTape() as g:
            g.watch([x, y])
            z = y * 2
        self.assertAllEqual(0.0, g.gradient(z, x, unconnected_gradients=tf.UnconnectedGradients.ZERO))

    def testUnknownUnconnectedGradientsValueGiven(self):
        x, y = tf.constant(1.0), tf.constant(1.0)
        with tf.GradientTape() as g:
            g.watch([x, y])
            z = y * 2
        with self.assertRaisesRegex(ValueError, "Unknown value for unconnected_gradients: 'nonsense'"):
            g.gradient(z, x, unconnected_gradients="nonsense")

    def testUnconnectedGradientsNestedDefunZeros(self):
        @tf.function
        def f(x):
            return x * x

        @tf.function
        def h(y):
            return tf.stop_gradient(f(y))
        x = tf.constant(1.0)
        with tf.GradientTape() as g:
            g.watch(x)
            y = h(x + 2.)
        self.assertEqual(0.0, g.gradient(y, x, unconnected_gradients="zero").numpy())
