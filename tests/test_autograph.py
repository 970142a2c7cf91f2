"""AutoGraph in tg.function (tapegrad.autograph): Python if/while/for with break, continue and
return on tensors become tg.cond / tg.while_loop, Python values stay Python; the examples of
TensorFlow's tf.function guide (site/en/guide/function.ipynb, "AutoGraph transformations");
gradients through converted code against the eager Python function; errors naming the line."""
import functools
import inspect
import os

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.compat.tensorflow as tf

pytest.importorskip("jax")

HERE = os.path.basename(__file__)


def _line(fn, text):
    """The line number of the first line of ``fn``'s source containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


# --- conditionals -------------------------------------------------------------------------------
def test_if_on_a_tensor_becomes_one_cond_traced_once():
    traced = []

    @tg.function
    def f(x):
        if tg.sum(x) > 0:
            traced.append("if")
            y = x * 2.0
        elif tg.sum(x) > -3:
            traced.append("elif")
            y = x - 1.0
        else:
            traced.append("else")
            y = -x
        return y

    assert np.allclose(f(tg.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    assert np.allclose(f(tg.constant([-1.0, 0.5])).numpy(), [-2.0, -0.5])
    assert np.allclose(f(tg.constant([-3.0, -1.0])).numpy(), [3.0, 1.0])
    assert sorted(traced) == ["elif", "else", "if"]  # every branch traced once, in one trace
    assert f.experimental_get_tracing_count() == 1


def test_a_python_bool_if_stays_python_and_traces_once_per_value():
    traced = []

    @tg.function
    def f(x, training):
        if training:
            traced.append("train")
            x = x * 0.5
        else:
            traced.append("eval")
        return x

    for _ in range(2):
        assert np.allclose(f(tg.constant([4.0]), True).numpy(), [2.0])
        assert np.allclose(f(tg.constant([4.0]), False).numpy(), [4.0])
    assert traced == ["train", "eval"]  # only the branch taken, once per Python value
    assert f.experimental_get_tracing_count() == 2


def test_early_return_and_boolean_operators_on_tensors():
    @tg.function
    def f(x):
        if tg.sum(x) > 0 and not tg.any(x > 10.0):
            return x + 1.0
        if tg.sum(x) < -5 or tg.all(x == 0.0):
            return x * 0.0
        return x - 1.0

    for v, want in (([1.0, 2.0], [2.0, 3.0]), ([1.0, 20.0], [0.0, 19.0]),
                    ([-4.0, -3.0], [0.0, 0.0]), ([0.0, 0.0], [0.0, 0.0]),
                    ([-1.0, 0.5], [-2.0, -0.5])):
        assert np.allclose(f(tg.constant(v)).numpy(), want), v
    assert f.experimental_get_tracing_count() == 1


def test_intro_to_graphs_simple_relu():
    def simple_relu(x):  # site/en/guide/intro_to_graphs.ipynb
        if tf.greater(x, 0):
            return x
        else:
            return 0

    tf_simple_relu = tf.function(simple_relu)
    assert int(tf_simple_relu(tf.constant(1))) == 1
    got = tf_simple_relu(tf.constant(-1))
    assert int(got) == 0 and got.dtype == tf.int32  # the Python 0 takes the other branch's dtype
    assert "ag__.if_stmt" in tf.autograph.to_code(simple_relu)


def test_conditional_expression_on_a_tensor():
    @tg.function
    def f(x):
        return x * 2.0 if tg.sum(x) > 0 else x * 3.0

    assert np.allclose(f(tg.constant([1.0])).numpy(), [2.0])
    assert np.allclose(f(tg.constant([-1.0])).numpy(), [-3.0])


def test_a_python_number_in_one_branch_takes_the_other_branchs_dtype():
    @tg.function
    def f(x):
        if tg.sum(x) > 0:
            y = tg.sum(x)
        else:
            y = 0.0
        return y

    x32 = tg.constant([1.0, 2.0], dtype=tg.float32)
    assert f(x32).dtype == tg.float32 and float(f(x32)) == 3.0
    assert float(f(-x32)) == 0.0


# --- loops ----------------------------------------------------------------------------------------
def test_for_over_tf_range_of_a_traced_bound_accumulates():
    @tf.function
    def f(n):
        s = 0
        for i in tf.range(n):
            s += i * i
        return s

    for n in (0, 1, 5, 9):
        assert int(f(tf.constant(n))) == sum(i * i for i in range(n))
    assert f.experimental_get_tracing_count() == 1  # one loop for every n


def test_guide_simple_while_loop_matches_the_eager_loop():
    @tf.function
    def f(x):
        while tf.reduce_sum(x) > 1:
            x = tf.tanh(x)
        return x

    x0 = np.array([0.5, 0.6, 0.7], np.float32)
    want = x0.copy()
    while want.sum() > 1:
        want = np.tanh(want)
    got = f(tf.constant(x0))
    assert got.dtype == tg.float32 and np.allclose(got.numpy(), want, rtol=1e-6)


def test_while_true_with_break_on_a_tensor():
    @tg.function
    def f(n):
        i = 0
        while True:
            if i * i > n:
                break
            i += 1
        return i

    for n in (0, 10, 50, 99):
        assert int(f(tg.constant(n))) == next(i for i in range(100) if i * i > n)


def test_continue_and_break_in_a_for_loop_over_a_range():
    @tg.function
    def f(n, stop):
        total = tg.constant(0)
        for i in tg.arange(n):
            if i % 2 == 0:
                continue
            if i > stop:
                break
            total += i
        return total

    for n, stop in ((10, 100), (10, 5), (3, 0)):
        want = sum(i for i in range(n) if i % 2 and i <= stop)
        assert int(f(tg.constant(n), tg.constant(stop))) == want


def test_for_over_a_tensor_iterates_its_rows():
    @tg.function
    def f(m):
        total = tg.zeros(m.shape[1:])
        biggest = tg.constant(-np.inf)
        for row in m:
            total = total + row
            biggest = tg.maximum(biggest, tg.max(row))
        return total, biggest

    m = np.arange(6.0).reshape(3, 2)
    total, biggest = f(tg.constant(m))
    assert np.allclose(total.numpy(), m.sum(0)) and float(biggest) == 5.0


def test_loops_over_python_data_stay_python():
    traced = []

    @tf.function
    def train(dataset):
        loss = tf.constant(0)
        for x, y in dataset:
            traced.append(x)
            loss += tf.abs(y - x)
        return loss

    assert int(train([(1, 3)] * 3)) == 6
    dataset = tf.data.Dataset.from_tensor_slices((np.array([1, 2]), np.array([4, 1])))
    assert int(tf.function(lambda: train.__wrapped__(dataset))()) == 4
    assert len(traced) == 5  # unrolled while tracing: one trace per Python element


def test_a_tensor_condition_inside_a_python_loop():
    @tg.function
    def f(x):
        for k in range(3):  # Python: unrolled
            if x[k] > 0:
                x = x + 1.0
        return x

    assert np.allclose(f(tg.constant([1.0, -5.0, 1.0])).numpy(), [3.0, -3.0, 3.0])


def test_guide_fizzbuzz_traces_each_branch_once(capsys):
    traced = []

    @tf.function
    def fizzbuzz(n):
        for i in tf.range(1, n + 1):
            traced.append("loop")
            if i % 15 == 0:
                traced.append("fizzbuzz")
                tf.print("fizzbuzz", i)
            elif i % 3 == 0:
                traced.append("fizz")
                tf.print("fizz", i)
            elif i % 5 == 0:
                traced.append("buzz")
                tf.print("buzz", i)
            else:
                traced.append("default")
                tf.print(i)

    fizzbuzz(tf.constant(5))
    fizzbuzz(tf.constant(15))
    assert sorted(traced) == ["buzz", "default", "fizz", "fizzbuzz", "loop"]
    lines = capsys.readouterr().err.split()
    words = ["fizzbuzz" if i % 15 == 0 else "fizz" if i % 3 == 0 else "buzz" if i % 5 == 0
             else None for i in [*range(1, 6), *range(1, 16)]]
    assert [w for w in lines if not w.isdigit()] == [w for w in words if w]


def test_python_number_loop_variables_take_the_bodys_dtype():
    @tg.function
    def f(x, n):
        s = 0  # an int that the body makes a float64 tensor
        for i in tg.arange(n):
            s = s + x
        return s

    for dtype in (tg.float64, tg.float32):
        got = f(tg.constant(1.5, dtype=dtype), tg.constant(4))
        assert got.dtype == dtype and float(got) == 6.0


def test_nested_user_functions_are_converted_and_do_not_convert_is_respected():
    def helper(x):
        if tg.sum(x) > 0:
            return x
        return -x

    @tg.autograph.experimental.do_not_convert
    def kept(x):
        if tg.sum(x) > 0:
            return x
        return -x

    @tg.function
    def f(x):
        return helper(x) * 2.0

    assert np.allclose(f(tg.constant([-1.5])).numpy(), [3.0])
    with pytest.raises(TypeError, match=rf"{HERE}:{_line(kept, 'if tg.sum')}"):
        tg.function(lambda x: kept(x))(tg.constant([1.0]))
    assert np.allclose(tg.function(kept, jit_compile=False)(tg.constant([-1.0])).numpy(), [1.0])


def test_a_method_of_a_module():
    class Clip(tg.Module):
        def __init__(self):
            super().__init__()
            self.limit = tg.Variable(1.0)

        @tg.function
        def __call__(self, x):
            if tg.max(x) > self.limit:
                x = x * (self.limit / tg.max(x))
            return x

    clip = Clip()
    assert np.allclose(clip(tg.constant([4.0, 2.0])).numpy(), [1.0, 0.5])
    assert np.allclose(clip(tg.constant([0.5, 0.25])).numpy(), [0.5, 0.25])


def test_callable_objects_and_partials_are_converted():
    class Relu(tg.Module):
        def __call__(self, x, scale):
            if tg.sum(x) < 0:
                x = x * 0.0
            return x * scale

    relu = Relu()

    @tg.function
    def f(x, scale):  # a call of the object inside a converted function
        return relu(x, scale)

    assert np.allclose(f(tg.constant([-1.0]), 2.0).numpy(), [0.0])
    assert np.allclose(f(tg.constant([3.0]), 2.0).numpy(), [6.0])

    def g(x):  # calls of a partial of the object, inside a converted function
        return functools.partial(relu, scale=1.0)(x)

    assert np.allclose(tg.function(g)(tg.constant([-1.0])).numpy(), [0.0])
    assert np.allclose(tg.function(g)(tg.constant([2.0])).numpy(), [2.0])


# --- gradients ------------------------------------------------------------------------------------
def _model(x, w):
    y = x
    for i in tg.arange(4):
        if tg.sum(y) > 2.0:
            y = tg.sin(y * w)
        else:
            y = y * w + 1.0
    return tg.sum(y * y)


@pytest.mark.parametrize("x0", [[0.1, 0.2], [0.9, 1.4]])
def test_gradient_through_a_converted_loop_and_cond_tape_outside(x0):
    x, w = tg.constant(x0), tg.constant(1.3)
    with tg.GradientTape() as tape:  # eager Python: the reference
        tape.watch(w)
        want = _model(x, w)
    want_g = tape.gradient(want, w)
    f = tg.function(_model)
    with tg.GradientTape() as tape:
        tape.watch(w)
        got = f(x, w)
    assert np.allclose(float(got), float(want))
    assert np.allclose(float(tape.gradient(got, w)), float(want_g))


def test_gradient_tape_inside_the_converted_function():
    @tg.function
    def grad(x, w):
        with tg.GradientTape() as tape:
            tape.watch(w)
            loss = _model(x, w)
        return tape.gradient(loss, w)

    x, w = tg.constant([0.9, 1.4]), tg.constant(1.3)
    with tg.GradientTape() as tape:
        tape.watch(w)
        loss = _model(x, w)
    want = tape.gradient(loss, w)
    assert np.allclose(float(grad(x, w)), float(want))


def test_reverse_mode_through_a_while_loop_and_set_loop_options_for_a_hessian():
    def power(x, n):
        y = x
        i = 0
        while i < n:
            y = y * x
            i += 1
        return y

    def bounded(x, n):
        y = x
        i = 0
        while i < n:
            tg.autograph.experimental.set_loop_options(maximum_iterations=10)
            y = y * x
            i += 1
        return y

    x = tg.constant(1.5)
    # no bound: first order through the checkpointed loop (UNBOUNDED_WHILE_SLOTS), as TF
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.function(power)(x, tg.constant(3))
    assert np.isclose(float(tape.gradient(y, x)), 4 * 1.5 ** 3)
    # second order needs the bound; the message names the loop and set_loop_options
    with tg.GradientTape() as outer:
        outer.watch(x)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.function(power)(x, tg.constant(3))
        g = tape.gradient(y, x)
    with pytest.raises(ValueError, match=rf"while loop at .*{HERE}:{_line(power, 'while')} "
                       r"\(AutoGraph; set_loop_options\(maximum_iterations=n\) as the "
                       r"first statement of its body bounds it\).*first-order reverse "
                       "mode only"):
        outer.gradient(g, x)
    with tg.GradientTape() as outer:
        outer.watch(x)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = tg.function(bounded)(x, tg.constant(3))
        g = tape.gradient(y, x)
    assert np.isclose(float(y), 1.5 ** 4)
    assert np.isclose(float(g), 4 * 1.5 ** 3)
    assert np.isclose(float(outer.gradient(g, x)), 12 * 1.5 ** 2)


# --- errors ---------------------------------------------------------------------------------------
def test_autograph_false_gives_the_old_type_error():
    def f(x):
        if tg.sum(x) > 0:
            return x
        return -x

    for g in (tg.function(f, autograph=False), tg.function(autograph=False)(f),
              tf.function(f, autograph=False)):
        with pytest.raises(TypeError, match=rf"{HERE}:{_line(f, 'if tg.sum')} needs the "
                           "concrete value of a traced tensor"):
            g(tg.constant([1.0]))
    assert np.allclose(tf.function(f)(tg.constant([-2.0])).numpy(), [2.0])


def test_a_variable_set_in_one_branch_only():
    def f(x):
        if tg.sum(x) > 0:
            y = x * 2.0
        return y

    def g(x):
        if tg.sum(x) > 0:
            return x

    with pytest.raises(TypeError, match=rf"{HERE}:{_line(f, 'if tg.sum')}: 'y' must also be "
                       "initialized in the else branch"):
        tg.function(f)(tg.constant([1.0]))
    with pytest.raises(TypeError, match=rf"{HERE}:{_line(g, 'if tg.sum')}: this `if` returns "
                       "a value in its if branch but not in its else branch"):
        tg.function(g)(tg.constant([1.0]))


def test_loop_variable_errors_name_the_variable_and_line():
    def undefined(n):
        i = 0
        while i < n:
            last = i
            i += 1
        return last

    def dtype_change(x, n):
        s = tg.constant(0)
        for i in tg.arange(n):
            s = s + x
        return s

    def shape_change(n):
        v = tg.zeros(1)
        for i in tg.arange(n):
            v = tg.concat([v, v], axis=0)
        return v

    def returns_in_loop(n):
        for i in tg.arange(n):
            if i > 2:
                return i
        return n

    with pytest.raises(TypeError, match=rf"{HERE}:{_line(undefined, 'while')}: 'last' must be "
                       "defined before the loop"):
        tg.function(undefined)(tg.constant(3))
    with pytest.raises(TypeError, match=rf"{HERE}:{_line(dtype_change, 'for')}: 's' has dtype "
                       "int64 before the for loop, but dtype float64 after one iteration"):
        tg.function(dtype_change)(tg.constant(1.5), tg.constant(3))
    with pytest.raises(TypeError, match=rf"{HERE}:{_line(shape_change, 'for')}: 'v' has shape "
                       r"\(1,\) before the for loop, but shape \(2,\) after one iteration"):
        tg.function(shape_change)(tg.constant(3))
    with pytest.raises(TypeError, match=rf"{HERE}:{_line(returns_in_loop, 'for')}: a `return` "
                       "inside this for loop is not supported"):
        tg.function(returns_in_loop)(tg.constant(5))


def test_a_tensor_break_in_a_loop_over_python_data():
    def f(x):
        for k in [1.0, 2.0, 3.0]:
            if tg.sum(x) > 4.0:
                break
            x = x + k
        return x

    with pytest.raises(TypeError, match=rf"{HERE}:{_line(f, 'for k')}: this `for` loop "
                       "iterates over a Python list but its `break`"):
        tg.function(f)(tg.constant([1.0]))


def test_a_non_scalar_condition():
    def f(x):
        if x > 0:
            x = -x
        return x

    with pytest.raises(TypeError, match=rf"{HERE}:{_line(f, 'if x')}: the `if` condition is a "
                       r"tensor of shape \(2,\) and dtype bool"):
        tg.function(f)(tg.constant([1.0, 2.0]))


# --- the conversion itself ------------------------------------------------------------------------
def test_to_code_to_graph_and_the_conversion_cache():
    def f(x, n):
        while n > 0:
            x = x * 2
            n -= 1
        return x

    code = tf.autograph.to_code(f)
    assert "ag__.while_stmt" in code and "def f(x, n)" in code
    g = tf.autograph.to_graph(f)
    assert g(3, 2) == 12  # outside a trace: Python
    assert tg.autograph.convert(f).__code__ is g.__code__  # converted once per code object
    assert tf.autograph.experimental.set_loop_options is tg.autograph.experimental.set_loop_options
    assert tg.autograph.convert(np.sum) is np.sum and tg.autograph.convert(tg.sum) is tg.sum
    with pytest.raises(ValueError, match="cannot be converted"):
        tg.autograph.to_code(len)


def test_tracebacks_point_at_the_users_lines():
    def f(x):
        if tg.sum(x) > 0:
            x = x + tg.ones(3)  # shapes (2,) and (3,) do not broadcast
        return x

    with pytest.raises(Exception) as info:
        tg.function(f)(tg.constant([1.0, 2.0]))
    frames = [(os.path.basename(fr.filename), fr.lineno)
              for fr in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert (HERE, _line(f, "x + tg.ones")) in frames


def test_tuples_of_tensors_as_branch_outputs_and_loop_variables():
    @tg.function
    def f(x, n):
        state = (x, tg.zeros_like(x))
        for i in tg.arange(n):
            h, c = state
            state = (h * 0.5, c + h)
        if tg.sum(state[1]) > 10.0:
            pair = (state[1], 1)
        else:
            pair = (-state[1], 2)
        return pair

    (c, k) = f(tg.constant([4.0]), tg.constant(3))
    assert np.allclose(c.numpy(), [-7.0]) and int(k) == 2
    (c, k) = f(tg.constant([8.0]), tg.constant(3))
    assert np.allclose(c.numpy(), [14.0]) and int(k) == 1


def test_bad_autograph_arguments():
    with pytest.raises(TypeError, match="tg.function: autograph must be True or False, got 'no'"):
        tg.function(lambda x: x, autograph="no")
    with pytest.raises(TypeError, match="do_not_convert: expected a function, got int"):
        tg.autograph.experimental.do_not_convert(3)

    def f(n):
        i = 0
        while i < n:
            tg.autograph.experimental.set_loop_options(maximum_iteration=3)
            i += 1
        return i

    with pytest.raises(TypeError, match="unexpected keyword argument 'maximum_iteration'"):
        tg.function(f)(tg.constant(2))


def test_returning_a_variable_assigned_on_another_path_raises():
    @tg.function
    def f(x, flag):
        if flag:  # Python: only the branch taken runs
            y = x
        return y

    @tg.function
    def g(x, flag):
        for _ in range(2):
            if flag:
                z = x
        if flag:
            return z
        return z

    assert float(f(tg.constant(2.0), True)) == 2.0
    for h in (f, g):
        with pytest.raises(NameError, match="'y' is used before it is assigned" if h is f
                           else "'z' is used before it is assigned"):
            h(tg.constant(2.0), False)


def _countdown(x, n):
    # a module function that calls itself: its name is a global (it became a missing cell)
    return x if n == 0 else _countdown(x * 2.0, n - 1)


def test_a_recursive_module_function_is_converted_and_calls_itself():
    @tg.function
    def f(x):
        return _countdown(x, 3)  # called from converted code: converted too

    assert float(f(tg.constant(1.5))) == 12.0


def test_get_concrete_function_traces_the_converted_function():
    # it traced the function as written: the Python `if` on a tensor raised
    @tg.function
    def f(x):
        if tg.sum(x) > 0:
            return x * 2.0
        return -x

    c = f.get_concrete_function(tg.TensorSpec((2,), tg.float64))
    np.testing.assert_array_equal(c(tg.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(c(tg.constant([-1.0, -2.0])).numpy(), [1.0, 2.0])
