"""``tg.print`` (run-time printing in TensorFlow's layout, eagerly and inside ``tg.function``)
and Python's ``print``/``repr``/``format`` of a traced Tensor (its symbolic description)."""
import sys

import numpy as np
import pytest

import tapegrad as tg


def test_tg_print_writes_tensorflows_layout_to_stderr(capsys):
    tg.print("x:", tg.arange(10), tg.constant([True, False]), tg.constant(3.0))
    assert capsys.readouterr().err == "x: [0 1 2 ... 7 8 9] [1 0] 3\n"
    tg.print(tg.reshape(tg.arange(100), (10, 10)), output_stream=sys.stdout)
    assert capsys.readouterr().out.splitlines() == [
        "[[0 1 2 ... 7 8 9]", " [10 11 12 ... 17 18 19]", " [20 21 22 ... 27 28 29]",
        " ...", " [70 71 72 ... 77 78 79]", " [80 81 82 ... 87 88 89]",
        " [90 91 92 ... 97 98 99]]"]  # as TensorFlow 2.21 prints it: no alignment
    tg.print(tg.constant(np.arange(8.0).reshape(2, 2, 2)), output_stream=sys.stdout)
    assert capsys.readouterr().out == "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]\n"
    floats = [0.1, 1 / 3, 1e20, np.nan, -np.inf, 12345678.0]
    tg.print(tg.constant(floats, tg.float32), tg.constant(floats, tg.float64), sep="|",
             end="!", summarize=-1, output_stream=sys.stdout)
    assert capsys.readouterr().out == ("[0.1 0.333333343 1e+20 nan -inf 12345678]|"
                                       "[0.1 0.33333333333333331 1e+20 nan -inf 12345678]!")
    tg.print(tg.arange(10), summarize=2, output_stream=sys.stdout)
    assert capsys.readouterr().out == "[0 1 ... 8 9]\n"


def test_tg_print_inside_tg_function_prints_once_per_call_in_order(capsys):
    @tg.function
    def f(x):
        tg.print("first", x, output_stream=sys.stdout)
        y = x * 2
        tg.print("second", y, output_stream=sys.stdout)
        return y

    f(tg.constant([1.0, 2.5]))
    f(tg.constant([3.0, 4.0]))  # same signature: no retrace, still prints
    f(tg.constant([3.0, 4.0]))
    assert capsys.readouterr().out.splitlines() == [
        "first [1 2.5]", "second [2 5]", "first [3 4]", "second [6 8]", "first [3 4]",
        "second [6 8]"]


def test_python_print_of_a_traced_tensor_shows_its_description_once_per_trace(capsys):
    @tg.function
    def f(x):
        print(x)
        print(repr(x), f"{x}", f"{x:>45}")
        return x + 1

    np.testing.assert_array_equal(f(tg.constant([1.0, 2.0, 3.0], tg.float32)).numpy(), [2, 3, 4])
    f(tg.constant([5.0, 6.0, 7.0], tg.float32))  # no retrace: Python's print does not run
    desc = 'Tensor("traced", shape=(3,), dtype=float32)'
    assert capsys.readouterr().out.splitlines() == [
        desc, f"<tg.Tensor: shape=(3,), dtype=float32, traced> {desc} {desc:>45}"]


@pytest.mark.parametrize("convert", [bool, float, int])
def test_value_conversions_of_a_traced_tensor_still_raise_the_helpful_error(convert):
    @tg.function
    def f(x):
        return x * convert(x)

    with pytest.raises(TypeError, match=r"needs the concrete value of a traced tensor"):
        f(tg.constant(1.0))


def test_numeric_format_spec_on_a_traced_tensor_says_to_use_tg_print():
    @tg.function
    def f(x):
        return f"{x:.3f}"

    with pytest.raises(TypeError, match=r"format spec '.3f' on a traced tensor.*tg.print"):
        f(tg.constant(1.0))


def test_print_of_a_variable_inside_tg_function(capsys):
    v = tg.Variable([1.0, 2.0], name="w")

    @tg.function
    def f(x):
        print(v, repr(v))
        tg.print(v, x, output_stream=sys.stdout)
        return v * x

    f(tg.constant(2.0))
    f(tg.constant(3.0))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith('Tensor("traced", shape=(2,), dtype=float64) <tg.Variable \'w')
    assert out[0].endswith("shape=(2,) dtype=float64, traced>")
    assert out[1:] == ["[1 2] 2", "[1 2] 3"]
    assert "numpy=" in repr(v)  # eagerly the value


def test_print_output_stream_file_url_and_bad_string(tmp_path):
    path = tmp_path / "log.txt"
    tg.print("a", tg.constant([1, 2]), output_stream=f"file://{path}")
    tg.print("b", output_stream=f"file://{path}")
    assert path.read_text() == "a [1 2]\nb\n"
    with pytest.raises(ValueError, match=r"output_stream 'stdout' is not a file object or a "
                                         r"'file://<path>' string"):
        tg.print("x", output_stream="stdout")


def test_tg_print_inside_tg_function_mixes_traced_and_constant_tensors(capsys, recwarn):
    @tg.function
    def f(x):
        tg.print(x, tg.constant([5, 6]), tg.arange(2.0) + 1, output_stream=sys.stdout)
        return x

    f(tg.constant(1.5))
    assert capsys.readouterr().out == "1.5 [5 6] [1 2]\n"
    assert not [w for w in recwarn if "array_api_strict dtype" in str(w.message)]


def test_tg_print_of_strings_alone_prints_at_run_time_in_the_branch_taken(capsys):
    # it printed once, when traced, in both branches (no Tensor argument, so no callback)
    @tg.function
    def f(x):
        if x > 0:  # AutoGraph: a tg.cond
            tg.print("positive", output_stream=sys.stdout)
        else:
            tg.print("not positive", output_stream=sys.stdout)
        return x

    for v in (1.0, -1.0, 2.0):
        f(tg.constant(v))
    assert capsys.readouterr().out.splitlines() == ["positive", "not positive", "positive"]
