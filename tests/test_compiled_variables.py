"""Variables read or assigned by compiled code are state of the trace: every derivative, in
every mode, and every loop's condition gives what eager execution gives."""
import numpy as np
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")

W0 = 0.7
X = np.array([0.3, -1.2, 2.0])


# --- functions of x that read the Variable w, compiled and eagerly ------------------------------
def _plain(x, w):
    return tg.sum(tg.sin(x * w))


def _vmap(x, w):
    return tg.sum(tg.vmap(lambda xi: tg.sin(xi * w) * xi)(x))


def _scan(x, w):
    def step(c, xi):
        c = c * tg.cos(xi * w) + tg.sin(w)
        return c, c * xi

    c, ys = tg.lax.scan(step, tg.constant(1.0, dtype=tg.float64), x)
    return c + tg.sum(ys)


def _while_loop(x, w):
    def body(i, c):
        return i + 1, c * tg.cos(x * w) + tg.sin(w * c)

    _, c = tg.while_loop(lambda i, c: i < 3, body, (tg.constant(0), x), maximum_iterations=5)
    return tg.sum(c)


def _cond(x, w):
    return tg.sum(tg.cond(tg.sum(x) > 0, lambda: tg.sin(x * w), lambda: tg.cos(x * w)))


BODIES = {"plain": _plain, "vmap": _vmap, "scan": _scan, "while_loop": _while_loop,
          "cond": _cond}


# --- the derivatives of orders 1, 2, 3 of f (a function of x reading w), by mode ---------------
def _tapes(f, w, x):
    """d^n f / dw^n by nested GradientTapes."""
    with tg.GradientTape() as t3:
        with tg.GradientTape() as t2:
            with tg.GradientTape() as t1:
                y = f(x)
            g1 = t1.gradient(y, w)
        g2 = t2.gradient(g1, w)
    return [g1, g2, t3.gradient(g2, w)]


def _forward_over_reverse(f, w, x):
    """d^n f / dw^n: a ForwardAccumulator (tangent 1 for w) around n - 1 tapes."""
    with tg.ForwardAccumulator(w, tg.constant(1.0, dtype=tg.float64)) as acc:
        with tg.GradientTape() as t2:
            with tg.GradientTape() as t1:
                y = f(x)
            g1 = t1.gradient(y, w)
        g2 = t2.gradient(g1, w)
    return [acc.jvp(y), acc.jvp(g1), acc.jvp(g2)]


def _grad_of_grad(f, w, x):
    """sum(d^n f / dx^n) by tg.grad of tg.grad: w is read all along."""
    g1 = tg.grad(f)
    g2 = tg.grad(lambda x: tg.sum(g1(x)))
    g3 = tg.grad(lambda x: tg.sum(g2(x)))
    return [tg.sum(g(x)) for g in (g1, g2, g3)]


def _grad_of_tape(f, w, x):
    """The mixed sum(d^n f / dx^(n-1) dw): tg.grad (in x) of tg.grad of a tape (in w)."""
    def dw(x):
        with tg.GradientTape() as t:
            y = f(x)
        return t.gradient(y, w)

    d2 = tg.grad(dw)
    d3 = tg.grad(lambda x: tg.sum(d2(x)))
    return [dw(x), tg.sum(d2(x)), tg.sum(d3(x))]


MODES = {"tapes": _tapes, "forward_over_reverse": _forward_over_reverse,
         "grad_of_grad": _grad_of_grad, "grad_of_tape": _grad_of_tape}


def _derivatives(body, mode, compiled):
    w = tg.Variable(W0, dtype=tg.float64)
    f = lambda x: BODIES[body](x, w)  # noqa: E731
    if compiled:
        f = tg.function(f, jit_compile=True)
    return [np.asarray(d) for d in MODES[mode](f, w, tg.constant(X))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("body", BODIES)
def test_derivatives_of_every_order_of_a_compiled_call_reading_a_variable_equal_eager(body,
                                                                                       mode):
    eager = _derivatives(body, mode, compiled=False)
    compiled = _derivatives(body, mode, compiled=True)
    for order, (e, c) in enumerate(zip(eager, compiled), 1):
        assert np.all(np.isfinite(e)) and np.any(e != 0), (order, e)
        np.testing.assert_allclose(c, e, rtol=1e-10, atol=1e-12,
                                   err_msg=f"{body}, {mode}, order {order}")


def test_the_derivatives_in_the_variable_are_the_calculus_ones():
    # d^n/dw^n sum(sin(x w)) = sum(x cos(xw)), -sum(x^2 sin(xw)), -sum(x^3 cos(xw)); the
    # second and third were 0 compiled (the gradient program read the Variable as a constant)
    want = [np.sum(X * np.cos(X * W0)), -np.sum(X**2 * np.sin(X * W0)),
            -np.sum(X**3 * np.cos(X * W0))]
    for mode in ("tapes", "forward_over_reverse"):
        np.testing.assert_allclose(_derivatives("plain", mode, compiled=True), want,
                                   rtol=1e-12)


def test_a_compiled_loops_gradient_reads_the_variable_at_the_value_the_loop_read():
    # the Variable is assigned after the loops, before the gradient is computed: the gradient
    # of a compiled scan and cond ran their bodies again on the new value
    def f(x, w):
        with tg.GradientTape() as t:
            t.watch(x)
            c, _ = tg.lax.scan(lambda c, xi: (c * tg.cos(xi * w), None), x,
                               tg.constant([1.0, 2.0], dtype=tg.float64))
            y = tg.cond(x > 0, lambda: tg.sin(w * x), lambda: w * x) + c
        w.assign(3.0)
        return t.gradient(y, x)

    x = tg.constant(0.5, dtype=tg.float64)
    w1, w2 = tg.Variable(W0, dtype=tg.float64), tg.Variable(W0, dtype=tg.float64)
    eager = f(x, w1)
    compiled = tg.function(lambda x: f(x, w2), jit_compile=True)(x)
    want = np.cos(W0) * np.cos(2 * W0) + W0 * np.cos(W0 * 0.5)
    np.testing.assert_allclose(eager.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(compiled.numpy(), want, rtol=1e-12)
    assert w2.numpy() == 3.0


# --- a loop's condition sees what its body assigned ---------------------------------------------
def _counting_loop(kind, limit):
    """A loop whose condition reads the Variable v its body increments; returns (the run, v)."""
    v = tg.Variable(0.0, dtype=tg.float64)

    def cond(i, s):
        return v < limit

    def body(i, s):
        v.assign_add(1.0)
        return i + 1, s + v

    init = (tg.constant(0), tg.constant(0.0, dtype=tg.float64))
    if kind == "lax":
        run = lambda: tg.lax.while_loop(lambda c: cond(*c), lambda c: body(*c), init)  # noqa
    else:
        bound = {"while_loop": None, "maximum_iterations": 1024, "maximum_iterations=2": 2}[kind]
        run = lambda: tg.while_loop(cond, body, init, maximum_iterations=bound)  # noqa: E731
    return run, v


@pytest.mark.parametrize("taped", [False, True], ids=["", "under a tape"])
@pytest.mark.parametrize("kind", ["while_loop", "maximum_iterations", "maximum_iterations=2",
                                  "lax"])
def test_a_compiled_loops_condition_sees_the_variable_its_body_assigns(kind, taped):
    results = []
    for compiled in (False, True):
        run, v = _counting_loop(kind, 3.0)
        if compiled:
            run = tg.function(run, jit_compile=True)
        w = tg.Variable(1.0, dtype=tg.float64)  # a tape watching a Variable: its record taken
        with tg.GradientTape() as tape:
            tape.watch(w)
            i, s = run() if not taped else [t * 1 for t in run()]
        results.append((int(i.numpy()), float(s.numpy()), float(v.numpy())))
    want = (2, 3.0, 2.0) if kind == "maximum_iterations=2" else (3, 6.0, 3.0)
    assert results == [want, want]


def test_a_compiled_loops_forward_derivative_sees_the_variable_its_body_assigns():
    # the JVP of a compiled while loop (no maximum_iterations) runs the loop again, condition
    # included
    for compiled in (False, True):
        v = tg.Variable(0.0, dtype=tg.float64)

        def f(x):
            def body(c):
                v.assign_add(1.0)
                return (c[0] * x,)
            with tg.ForwardAccumulator(x, tg.constant(1.0, dtype=tg.float64)) as acc:
                y = tg.lax.while_loop(lambda c: v < 3.0, body, (x,))[0]
            return y, acc.jvp(y)

        if compiled:
            f = tg.function(f, jit_compile=True)
        y, dy = f(tg.constant(1.5, dtype=tg.float64))
        np.testing.assert_allclose([y.numpy(), dy.numpy()], [1.5**4, 4 * 1.5**3])


def test_a_compiled_cond_whose_branch_assigns_a_variable_is_read_after_it():
    def f(p, x):
        v.assign(x)
        y = tg.cond(p, lambda: v.assign_add(x * 2.0).read_value() * 0.0,
                    lambda: v.assign(-x).read_value() * 0.0)
        return y + v * 10.0, v.read_value()

    for p, want in ((True, 30.0), (False, -10.0)):
        got = []
        for compiled in (False, True):
            v = tg.Variable(0.0, dtype=tg.float64)
            g = tg.function(f, jit_compile=True) if compiled else f
            out, read = g(tg.constant(p), tg.constant(1.0, dtype=tg.float64))
            got.append((float(out.numpy()), float(read.numpy()), float(v.numpy())))
        assert got == [(want, want / 10, want / 10)] * 2


# --- a Variable a compiled construct assigns and reads is differentiated at every read ----------
def _assigning(kind, v):
    """A function of x whose construct ``kind`` reads the Variable v and assigns it."""
    def f(x):
        if kind == "scan":
            def step(c, xi):
                y = c + tg.sin(v * xi) * x[1]
                v.assign_add(x[2])
                return y, None
            return tg.lax.scan(step, tg.constant(0.0, dtype=tg.float64), x)[0]
        if kind == "while_loop":
            def body(i, c):
                y = c + tg.sin(v * x[0])
                v.assign_add(x[1])
                return i + 1, y
            return tg.while_loop(lambda i, c: v < 4.0, body,
                                 (tg.constant(0), tg.constant(0.0, dtype=tg.float64)),
                                 maximum_iterations=10)[1]

        def branch():
            y = tg.sin(v * x[0])
            v.assign_add(x[1])
            return y + v
        return tg.cond(x[0] > 0, branch, lambda: x[0])
    return f


@pytest.mark.parametrize("kind", ["scan", "while_loop", "cond"])
def test_a_variable_a_compiled_construct_assigns_is_differentiated_as_eagerly(kind):
    # eagerly an assignment is not recorded and each read is one of the Variable; compiled,
    # the Variable was no input of the construct's record: its gradient raised a misleading
    # "name rebound" RuntimeError (and its tangent was dropped)
    got = []
    for compiled in (False, True):
        v = tg.Variable(1.0, dtype=tg.float64)
        f = _assigning(kind, v)
        if compiled:
            f = tg.function(f, jit_compile=True)
        x = tg.constant([1.0, 2.0, 3.0], dtype=tg.float64)
        with tg.ForwardAccumulator([v, x], [tg.constant(1.0, dtype=tg.float64),
                                            tg.constant([0.5, 0.25, 2.0], dtype=tg.float64)]) as acc:
            y = f(x)
        tangent, after = acc.jvp(y).numpy(), v.numpy()
        v.assign(1.0)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        dv, dx = tape.gradient(y, [v, x])
        got.append([y.numpy(), after, tangent, dv.numpy(), *dx.numpy()])
    assert np.all(np.asarray(got[0]) != 0) or kind != "scan"
    np.testing.assert_allclose(got[1], got[0], rtol=1e-12, atol=1e-15)


def test_a_body_that_reads_another_variable_when_run_for_its_gradient_names_it():
    holder = {"w": tg.Variable(2.0, dtype=tg.float64, name="w")}

    @tg.function(jit_compile=True)
    def f(x):
        with tg.GradientTape() as tape:
            tape.watch(x)
            c, _ = tg.lax.scan(lambda c, xi: (c * holder["w"] + xi, None), x, x[None] * 0.0)
        holder["w"] = tg.Variable(3.0, dtype=tg.float64, name="other")
        return tape.gradient(c, x)

    with pytest.raises(RuntimeError, match=r"tg\.lax\.scan: run again for its gradient, a body "
                       r"or branch read a Variable 'other' that it did not read when it ran"):
        f(tg.constant(1.0, dtype=tg.float64))
