"""Gradients through tf.while_loop, tf.cond and tf.function: restated from
tensorflow/python/ops/while_v2_test.py, cond_v2_test.py, control_flow_ops_test.py and
tensorflow/python/eager/polymorphic_function/*_test.py gradient tests, public API only."""
import numpy as np

from shim import TestCase, tf


def grad(f, x):
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    return t.gradient(y, x)


class WhileV2Test(TestCase):

    def testSingleLoopVar(self):
        x = tf.constant(2.)
        ret = tf.while_loop(lambda v: v < 8., lambda v: [v * v], [x])
        self.assertAllEqual(ret, 16.)
        self.assertAllEqual(grad(lambda x: tf.while_loop(lambda v: v < 8., lambda v: [v * v], [x])[0], x), 32.)

    def testMultipleLoopVarsBasic(self):
        x, y = tf.constant(5.), tf.constant(3.)

        def f(x, y):
            return tf.while_loop(lambda v, _: v < 45., lambda v, w: (v * w, w), [x, y])[0]
        with tf.GradientTape() as t:
            t.watch([x, y])
            r = f(x, y)
        self.assertAllEqual(r, 45.)
        dx, dy = t.gradient(r, [x, y])
        self.assertAllEqual(dx, 9.)
        self.assertAllEqual(dy, 30.)

    def testMultipleLoopNonscalarCond(self):
        x = tf.constant([[5.]])
        ret = tf.while_loop(lambda v: v < 8., lambda v: [v * v], [x])
        self.assertAllEqual(ret, [[25.]])
        self.assertAllEqual(grad(lambda x: tf.while_loop(lambda v: v < 8., lambda v: [v * v], [x])[0], x), [[10.]])

    def testGradientTapeResourceVariable(self):
        v = tf.Variable(1.)

        @tf.function
        def fnWithLoop():
            with tf.GradientTape() as tape:
                _, x = tf.while_loop(lambda i, _: i < 2, lambda i, x: (i + 1, x * v), [0, 2.])
            return tape.gradient(x, v)
        self.assertAllEqual(fnWithLoop(), 4.)

    def testDoubleDerivative(self):
        x = tf.constant(2.)
        f = lambda x: tf.while_loop(lambda v: v < 8., lambda v: [v ** 2], [x])[0]
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                r = f(x)
            g = t1.gradient(r, x)
        self.assertAllEqual(r, 16.)
        self.assertAllEqual(g, 32.)
        self.assertAllEqual(t2.gradient(g, x), 48.)

    def testLoopWithTensorListPushBackEquivalent(self):
        # The loop accumulates x**i into a sum; d/dx sum_{i<4} x^i at x=2 = 1 + 4 + 12 = 17.
        f = lambda x: tf.while_loop(lambda i, s, p: i < 4, lambda i, s, p: (i + 1, s + p, p * x),
                                    [0, 0., tf.ones([])])[1]
        self.assertAllEqual(grad(f, 2.), 17.)

    def testGradOfLoopInFunction(self):
        @tf.function
        def f(x):
            with tf.GradientTape() as t:
                t.watch(x)
                y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tf.sin(y)), [0, x])[1]
            return t.gradient(y, x)
        s1 = np.sin(0.5)
        s2 = np.sin(s1)
        self.assertAllClose(f(tf.constant(0.5)), np.cos(0.5) * np.cos(s1) * np.cos(s2), rtol=1e-5)

    def testMaximumIterations(self):
        f = lambda x: tf.while_loop(lambda v: v < 1e6, lambda v: [v * 2.], [x], maximum_iterations=3)[0]
        self.assertAllEqual(f(tf.constant(1.)), 8.)
        self.assertAllEqual(grad(f, 1.), 8.)

    def testWhileLoopWithIndexedSlices(self):
        f = lambda x: tf.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s + tf.reduce_sum(tf.gather(x, [0, 0]))),
                                    [0, 0.])[1]
        self.assertAllEqual(tf.convert_to_tensor(grad(f, [1., 2.])), [4., 0.])

    def testVariableInLoopBody(self):
        v = tf.Variable(3.)
        with tf.GradientTape() as t:
            r = tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * v), [0, 1.])[1]
        self.assertAllEqual(t.gradient(r, v), 27.)

    def testNestedWhile(self):
        def inner(x):
            return tf.while_loop(lambda j, y: j < 2, lambda j, y: (j + 1, y * x), [0, 1.])[1]
        f = lambda x: tf.while_loop(lambda i, z: i < 2, lambda i, z: (i + 1, z * inner(x)), [0, 1.])[1]
        # f = x^4
        self.assertAllEqual(f(tf.constant(2.)), 16.)
        self.assertAllEqual(grad(f, 2.), 32.)

    def testWhileStructuredLoopVars(self):
        def f(x):
            out = tf.while_loop(lambda s: s["i"] < 3, lambda s: [{"i": s["i"] + 1, "v": s["v"] * x}],
                                [{"i": tf.constant(0), "v": tf.constant(1.)}])
            out = out[0] if isinstance(out, (list, tuple)) else out
            return out["v"]
        self.assertAllEqual(grad(f, 2.), 12.)

    def testWhileShapeInvariant(self):
        def f(x):
            return tf.while_loop(lambda a: tf.shape(a)[0] < 4, lambda a: [tf.concat([a, a * 2.], 0)], [x],
                                 shape_invariants=[tf.TensorShape([None])])[0]
        x = tf.constant([1.])
        self.assertAllEqual(f(x), [1., 2., 2., 4.])
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.reduce_sum(f(x))
        self.assertAllEqual(t.gradient(y, x), [9.])

    def testGradientOfLoopWithTwoLoopVarsBothWatched(self):
        # while_v2_test.testMultipleLoopVars: x_{k+1} = x_k * y_k, y_{k+1} = y_k + 1, three times.
        x, y = tf.constant(2.), tf.constant(3.)
        with tf.GradientTape() as t:
            t.watch([x, y])
            _, rx, ry = tf.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, a * b, b + 1.), [0, x, y])
            out = rx + ry
        self.assertAllEqual(rx, 2. * 3. * 4. * 5.)
        self.assertAllEqual(ry, 6.)
        # d/dx = y(y+1)(y+2) = 60; d/dy = x * d(y^3+3y^2+2y)/dy + 1 = 2 * (27 + 18 + 2) + 1
        self.assertAllEqual(t.gradient(out, [x, y]), [60., 95.])


class CondV2Test(TestCase):

    def testBasic(self):
        x, y = tf.constant(1.), tf.constant(2.)
        with tf.GradientTape() as t:
            t.watch([x, y])
            out = tf.cond(tf.constant(True), lambda: x * 2., lambda: y * 3.)
        self.assertAllEqual(out, 2.)
        self.assertAllEqual(t.gradient(out, [x, y], unconnected_gradients="zero"), [2., 0.])

    def testFalseBranch(self):
        x, y = tf.constant(1.), tf.constant(2.)
        with tf.GradientTape() as t:
            t.watch([x, y])
            out = tf.cond(tf.constant(False), lambda: x * 2., lambda: y * 3.)
        g = t.gradient(out, [x, y])
        self.assertAllEqual(out, 6.)
        self.assertAllEqual(g[1], 3.)

    def testMultipleOutputs(self):
        x, y = tf.constant(1.), tf.constant(3.)
        with tf.GradientTape() as t:
            t.watch([x, y])
            a, b = tf.cond(x < y, lambda: (x * y, x + y), lambda: (x, y))
            z = a + b
        self.assertAllEqual(t.gradient(z, [x, y]), [4., 2.])

    def testCondInFunction(self):
        @tf.function
        def f(x):
            with tf.GradientTape() as t:
                t.watch(x)
                y = tf.cond(x > 0., lambda: x * x, lambda: -x)
            return t.gradient(y, x)
        self.assertAllEqual(f(tf.constant(3.)), 6.)
        self.assertAllEqual(f(tf.constant(-3.)), -1.)

    def testSecondDerivative(self):
        x = tf.constant(2.)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = tf.cond(x > 0., lambda: x ** 3, lambda: x)
            g = t1.gradient(y, x)
        self.assertAllEqual(g, 12.)
        self.assertAllEqual(t2.gradient(g, x), 12.)

    def testNestedCond(self):
        f = lambda x: tf.cond(x > 0., lambda: tf.cond(x > 1., lambda: x * 5., lambda: x * 3.), lambda: x)
        self.assertAllEqual(grad(f, 2.), 5.)
        self.assertAllEqual(grad(f, 0.5), 3.)
        self.assertAllEqual(grad(f, -1.), 1.)

    def testCondWithVariable(self):
        v = tf.Variable(4.)
        with tf.GradientTape() as t:
            y = tf.cond(v > 1., lambda: v * v, lambda: v)
        self.assertAllEqual(t.gradient(y, v), 8.)

    def testCondInsideWhile(self):
        f = lambda x: tf.while_loop(lambda i, y: i < 3,
                                    lambda i, y: (i + 1, tf.cond(i % 2 == 0, lambda: y * x, lambda: y + x)),
                                    [0, 1.])[1]
        # y: 1 -> x -> 2x -> 2x^2 ; d/dx = 4x
        self.assertAllEqual(grad(f, 3.), 12.)

    def testSwitchCase(self):
        x = tf.constant(2.)
        for i, expected in ((0, 1.), (1, 4.), (2, 12.)):
            with tf.GradientTape() as t:
                t.watch(x)
                y = tf.switch_case(tf.constant(i), [lambda: x, lambda: x * x, lambda: x ** 3])
            self.assertAllEqual(t.gradient(y, x), expected)

    def testCondStopGradient(self):
        f = lambda x: tf.cond(x > 0., lambda: tf.stop_gradient(x) * x, lambda: x)
        self.assertAllEqual(grad(f, 3.), 3.)

    def testGradientOfCondUnusedInputIsNone(self):
        # cond_v2_test gradient with an input only the untaken branch reads: no path, so None.
        x, y = tf.constant(2.), tf.constant(5.)
        with tf.GradientTape() as t:
            t.watch([x, y])
            out = tf.cond(x > 0., lambda: x * x, lambda: y)
        dx, dy = t.gradient(out, [x, y])
        self.assertAllEqual(dx, 4.)
        self.assertIsNone(dy)


class FunctionGradientsTest(TestCase):

    def testGraphModeWithGradients(self):
        v = tf.Variable(1.0)

        @tf.function
        def step():
            def inner():
                return v * v
            with tf.GradientTape() as t:
                y = inner()
            return t.gradient(y, v)
        self.assertAllEqual(step(), 2.0)

    def testGradientOfFunctionCall(self):
        @tf.function
        def f(x):
            return x * x * x
        self.assertAllEqual(grad(f, 2.), 12.)

    def testSymbolicGradientVariableNoneNotZerosLike(self):
        @tf.function
        def f(x, y):
            return x * 2.
        x, y = tf.constant(1.), tf.constant(2.)
        with tf.GradientTape() as t:
            t.watch([x, y])
            z = f(x, y)
        dx, dy = t.gradient(z, [x, y])
        self.assertAllEqual(dx, 2.)
        self.assertIsNone(dy)

    def testNestedFunctionGradient(self):
        @tf.function
        def inner(x):
            return tf.exp(x)

        @tf.function
        def outer(x):
            return inner(x) * x
        self.assertAllClose(grad(outer, 1.), 2 * np.e, rtol=1e-6)

    def testFunctionOnlyWatchedVariables(self):
        a, b = tf.Variable(1.), tf.Variable(2.)

        @tf.function
        def f():
            return a * 3.
        with tf.GradientTape() as t:
            y = f()
        ga, gb = t.gradient(y, [a, b])
        self.assertAllEqual(ga, 3.)
        self.assertIsNone(gb)

    def testHigherOrderThroughFunction(self):
        @tf.function
        def f(x):
            return tf.sin(x)
        x = tf.constant(0.4)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = f(x)
            g = t1.gradient(y, x)
        self.assertAllClose(g, np.cos(0.4), rtol=1e-6)
        self.assertAllClose(t2.gradient(g, x), -np.sin(0.4), rtol=1e-6)

    def testPersistentTapeInFunction(self):
        @tf.function
        def f(x):
            with tf.GradientTape(persistent=True) as t:
                t.watch(x)
                y = x * x
                z = y * y
            return t.gradient(y, x), t.gradient(z, x)
        a, b = f(tf.constant(2.))
        self.assertAllEqual(a, 4.)
        self.assertAllEqual(b, 32.)

    def testTrainingStepUpdatesVariable(self):
        w = tf.Variable(2.)

        @tf.function
        def step(x):
            with tf.GradientTape() as t:
                loss = (w * x - 1.) ** 2
            w.assign_sub(0.1 * t.gradient(loss, w))
            return loss
        self.assertAllClose(step(tf.constant(1.)), 1.)
        self.assertAllClose(w, 1.8)

    def testGradientOutputGradientsInFunction(self):
        @tf.function
        def f(x):
            with tf.GradientTape() as t:
                t.watch(x)
                y = x * 3.
            return t.gradient(y, x, output_gradients=tf.constant([2., 5.]))
        self.assertAllEqual(f(tf.constant([1., 1.])), [6., 15.])

    def testRetraceDifferentShapesGradient(self):
        @tf.function
        def f(x):
            return tf.reduce_sum(x * x)
        self.assertAllEqual(grad(f, [1., 2.]), [2., 4.])
        self.assertAllEqual(grad(f, [1., 2., 3.]), [2., 4., 6.])

    def testInputSignatureGradient(self):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def f(x):
            return tf.reduce_sum(tf.square(x))
        self.assertAllEqual(grad(f, [1., 3.]), [2., 6.])

    def testGradientThroughVariableAssignInFunctionIsNone(self):
        v = tf.Variable(1.)
        x = tf.constant(3.)

        @tf.function
        def f():
            v.assign(x)
            return v.read_value()
        with tf.GradientTape() as t:
            t.watch(x)
            y = f()
        self.assertIsNone(t.gradient(y, x))

    def testJacobianOfFunction(self):
        @tf.function
        def f(x):
            return tf.stack([x[0] * x[1], x[1]])
        x = tf.constant([2., 3.])
        with tf.GradientTape() as t:
            t.watch(x)
            y = f(x)
        self.assertAllEqual(t.jacobian(y, x), [[3., 2.], [0., 1.]])
