"""tf.custom_gradient, tf.recompute_grad, RegisterGradient: restated from
tensorflow/python/ops/gradients_test.py (CustomGradientTest, VariablesGradientTest) and
tensorflow/python/eager/backprop_test.py, eager / tf.function only."""
import numpy as np

from shim import TestCase, tf


def grad_of(f, xs, dy=None):
    with tf.GradientTape() as t:
        t.watch(xs)
        y = f(*xs)
    return t.gradient(y, xs, output_gradients=dy)


class CustomGradientTest(TestCase):

    def testCustomGradientTrivial(self):
        @tf.custom_gradient
        def MyIdentity(x):
            return x, lambda dy: [3 * dy]
        x = tf.constant(3.)
        self.assertEqual(9., grad_of(lambda x: MyIdentity(MyIdentity(x)), [x])[0].numpy())

    def testCustomGradient(self):
        @tf.custom_gradient
        def MyMultiply(x1, x2):
            return x1 * x2, lambda dy: [dy * x1, dy * x2]   # switched on purpose
        self.assertAllEqual([3., 5.], grad_of(MyMultiply, [tf.constant(3.), tf.constant(5.)]))

    def testCustomGradientClass(self):
        class Model:
            @tf.custom_gradient
            def Multiply(self, x1, x2):
                return x1 * x2, lambda dy: (dy * x1, dy * x2)
        m = Model()
        self.assertAllEqual([3., 5.], grad_of(m.Multiply, [tf.constant(3.), tf.constant(5.)]))

    def testCustomGradientErrors(self):
        @tf.custom_gradient
        def F(x):
            def Grad(_):
                raise RuntimeError("x")
            return x, Grad
        with self.assertRaises(RuntimeError):
            grad_of(F, [tf.constant(1.0)])

    def testCustomGradientInFunction(self):
        @tf.custom_gradient
        def MyMultiply(x1, x2):
            return x1 * x2, lambda dy: [dy * x1, dy * x2]

        @tf.function
        def F(x, y):
            with tf.GradientTape() as t:
                t.watch(y)
                r = MyMultiply(x, y)
            return t.gradient(r, y)
        self.assertAllEqual(5., F(tf.constant(3.), tf.constant(5.)))

    def testCustomGradientWithCapture(self):
        x = tf.constant(3.)

        @tf.custom_gradient
        def MyMultiply(x1, x2):
            return x1 * x2, lambda dy: [dy * x1, dy * x2]

        @tf.function
        def F(y):
            with tf.GradientTape() as t:
                t.watch(y)
                r = MyMultiply(x, y)
            return t.gradient(r, [y])
        self.assertAllEqual([5.], F(tf.constant(5.)))

    def testCustomGradientWithVariablesEager(self):
        w = tf.Variable(tf.ones((2, 4)))

        @tf.custom_gradient
        def F(x):
            out = tf.matmul(x, w)

            def Grad(out_grad, variables=None):
                self.assertEqual(1, len(variables))
                return tf.ones((3, 2)), [tf.ones((2, 4))]
            return out, Grad
        x = tf.ones((3, 2)) + 2.
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = F(x)
        dx, dw = tape.gradient(y, [x, w])
        self.assertEqual(6., tf.reduce_sum(dx).numpy())
        self.assertEqual(8., tf.reduce_sum(dw).numpy())

    def testCustomGradientVariablesKwonlyArgs(self):
        for anonymous_varargs in (True, False):
            x_captured = tf.Variable(3.)

            @tf.custom_gradient
            def FuncMult(x):
                def ActualGrad(dy, variables):
                    self.assertEqual(len(variables), 1)
                    self.assertIs(variables[0], x_captured)
                    return 4. * x_captured * dy, [5. * x * dy]
                if anonymous_varargs:
                    def GradMult(dy, *, variables=None):
                        return ActualGrad(dy, variables)
                else:
                    def GradMult(*dys, variables=None):
                        return ActualGrad(dys[0], variables)
                return x * x_captured, GradMult
            x = tf.Variable(6.)
            with tf.GradientTape(persistent=True) as g:
                y = FuncMult(x)
            self.assertAllEqual(g.gradient(y, x), 12.)
            self.assertAllEqual(g.gradient(y, x_captured), 30.)

    def testWithNumpyInputs(self):
        @tf.custom_gradient
        def F(x):
            return x, lambda _: (None, None)
        F(np.ones((3, 2), dtype=np.float32))

    def testCustomGradientStructuralInputOutput(self):
        @tf.custom_gradient
        def F(a, b):
            def Vjp(d1, d2):
                return tf.zeros([]), tf.zeros([])
            return (a * 2., b * 3.), Vjp
        a, b = tf.constant(1.), tf.constant(2.)
        with tf.GradientTape() as t:
            t.watch([a, b])
            y1, y2 = F(a, b)
        self.assertAllEqual(t.gradient([y1, y2], [a, b]), [0., 0.])
        self.assertAllEqual([y1, y2], [2., 6.])

    def testCustomGradientMultipleOutputsUsesEachDy(self):
        @tf.custom_gradient
        def F(x):
            return (x * 1., x * 1.), lambda d1, d2: d1 * 10. + d2 * 100.
        x = tf.constant(1.)
        with tf.GradientTape() as t:
            t.watch(x)
            a, b = F(x)
            y = a * 2. + b * 3.
        self.assertAllEqual(t.gradient(y, x), 320.)

    def testCustomGradientSecondOrder(self):
        @tf.custom_gradient
        def F(x):
            def grad(dy):
                return dy * 3. * x * x
            return x ** 3, grad
        x = tf.constant(2.)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = F(x)
            g = t1.gradient(y, x)
        self.assertAllEqual(g, 12.)
        self.assertAllEqual(t2.gradient(g, x), 12.)

    def testCustomGradientNoneGradientForInput(self):
        @tf.custom_gradient
        def F(x, y):
            return x * y, lambda dy: (dy * y, None)
        x, y = tf.constant(2.), tf.constant(3.)
        g = grad_of(F, [x, y])
        self.assertAllEqual(g[0], 3.)
        self.assertIsNone(g[1])

    def testCustomGradientOutputShapeIsKept(self):
        @tf.custom_gradient
        def F(x):
            return tf.reduce_sum(x), lambda dy: dy * tf.ones_like(x) * 2.
        x = tf.constant([1., 2., 3.])
        self.assertAllEqual(grad_of(F, [x])[0], [2., 2., 2.])

    def testCustomGradientFunctionDecorated(self):
        @tf.function
        @tf.custom_gradient
        def F(x):
            return tf.sin(x), lambda dy: dy * 7.
        x = tf.constant(0.3)
        self.assertAllClose(grad_of(F, [x])[0], 7.)

    def testCustomGradientOnVariableInput(self):
        @tf.custom_gradient
        def F(x):
            return x * 2., lambda dy: dy * 5.
        v = tf.Variable(1.)
        with tf.GradientTape() as t:
            y = F(v)
        self.assertAllEqual(t.gradient(y, v), 5.)

    def testCustomGradientClipNorm(self):
        # The tf.custom_gradient docstring's clip_gradient_by_norm example.
        @tf.custom_gradient
        def clip_gradients(y):
            return y, lambda dy: tf.clip_by_norm(dy, 0.5)
        x = tf.constant([3., 4.])
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.reduce_sum(clip_gradients(x) * tf.constant([3., 4.]))
        self.assertAllClose(t.gradient(y, x), [0.3, 0.4])

    def testCustomGradientLogExp(self):
        # The tf.custom_gradient docstring's numerically stable log1pexp.
        @tf.custom_gradient
        def log1pexp(x):
            e = tf.exp(x)
            return tf.math.log(1 + e), lambda upstream: upstream * (1 - 1 / (1 + e))
        x = tf.constant(100.)
        self.assertAllClose(grad_of(log1pexp, [x])[0], 1.0)


class RecomputeGradTest(TestCase):

    def _grads(self, f, x, vs):
        fr = tf.recompute_grad(f)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            a = fr(x)
            b = f(x)
        return tape.gradient(a, [x] + vs), tape.gradient(b, [x] + vs)

    def testFnRecompute(self):
        w = tf.Variable(tf.constant([[1., 2.], [3., 4.]]))
        f = lambda x: tf.reduce_sum(tf.tanh(tf.matmul(x, w)))
        x = tf.constant([[0.1, -0.2]])
        g_re, g = self._grads(f, x, [w])
        self.assertAllClose(g_re, g)

    def testFnRecomputeNoVariables(self):
        f = lambda x: tf.reduce_sum(tf.sin(x) ** 2)
        x = tf.constant([0.5, 1.5])
        g_re, g = self._grads(f, x, [])
        self.assertAllClose(g_re, g)

    def testFnRecomputeInFunction(self):
        f = lambda x: tf.reduce_sum(tf.exp(x) * x)
        fr = tf.recompute_grad(f)

        @tf.function
        def both(x):
            with tf.GradientTape(persistent=True) as t:
                t.watch(x)
                a, b = fr(x), f(x)
            return t.gradient(a, x), t.gradient(b, x)
        a, b = both(tf.constant([0.1, 0.2]))
        self.assertAllClose(a, b)

    def testRecomputeSecondOrder(self):
        f = tf.recompute_grad(lambda x: x ** 3)
        x = tf.constant(2.)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = f(x)
            g = t1.gradient(y, x)
        self.assertAllClose(g, 12.)
        self.assertAllClose(t2.gradient(g, x), 12.)


class RegisterGradientTest(TestCase):

    def testRegisterGradientNameConflict(self):
        @tf.RegisterGradient("TgHarnessUnique1")
        def _g(op, grad):
            return grad
        with self.assertRaises(KeyError):
            tf.RegisterGradient("TgHarnessUnique1")(lambda op, grad: grad)

    def testRegisterGradientRejectsNonString(self):
        with self.assertRaises(TypeError):
            tf.RegisterGradient(3)

    def testGradientOverrideMap(self):
        @tf.RegisterGradient("TgHarnessTimesFive")
        def _g(op, grad):
            return grad * 5.

        @tf.function
        def f(x):
            with tf.compat.v1.get_default_graph().gradient_override_map({"Identity": "TgHarnessTimesFive"}):
                y = tf.identity(x)
            return tf.gradients(y, x)[0]
        self.assertAllEqual(f(tf.constant(1.)), 5.)

    def testNoGradient(self):
        tf.no_gradient("TgHarnessNoGradOp")
        with self.assertRaises(KeyError):
            tf.no_gradient("TgHarnessNoGradOp")
