"""tapegrad.viz: tape.explain (one case per reason), DOT text, rendering with Graphviz."""
import re
import shutil
import struct

import numpy as np
from array_api_compat import array_namespace
import pytest

import tapegrad as tg
from tapegrad import viz

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _needs_dot():
    if shutil.which("dot") is None:
        pytest.skip(f"Graphviz's `dot` is not installed; {viz.INSTALL_HINT}")


@tg.primitive("VizTestFloor")
def _viz_floor(x):
    return array_namespace(x).floor(x)


tg.no_gradient("VizTestFloor")


@tg.primitive("VizTestNoGrad")
def _viz_nograd(x):
    return x * 2.0  # differentiable in principle, but no gradient is registered


@tg.custom_gradient
def _square(x):
    def grad(dy):
        return 2.0 * x * dy

    return x * x, grad


@tg.custom_gradient
def _split(x):
    def grad(da, db):
        return da + db

    return (x + 0.0, x - 0.0), grad


# --- explain: one test per reason -----------------------------------------------------------------
def test_connected_gives_the_shortest_chain_of_op_types():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tg.sum(x * x)
    e = tape.explain(y, {"x": x})
    assert str(e["x"]) == "x: connected through Mul -> Sum -> (target)"
    assert e["x"].connected and e["x"].path == ("Mul", "Sum")
    assert tape.gradient(y, x) is not None  # the explanation agrees with the gradient


def test_shortest_path_is_chosen_among_several():
    x = tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.exp(tg.sin(tg.cos(x))) + x
    assert tape.explain(y, {"x": x})["x"].path == ("Add",)


def test_source_that_is_the_target():
    x = tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
    assert tape.explain(x, {"x": x})["x"].reason == "connected: it is the target"


def test_variable_not_watched_with_watch_accessed_variables_false():
    w = tg.Variable(2.0, name="w")
    x = tg.Variable(3.0, name="x")
    with tg.GradientTape(watch_accessed_variables=False, persistent=True) as tape:
        tape.watch(x)
        y = w * x
    e = tape.explain(y, [w, x])
    assert str(e[0]) == ("w: unconnected — Variable 'w' was not watched "
                         "(watch_accessed_variables=False; call tape.watch(w))")
    assert str(e[1]) == "x: connected through Mul -> (target)"
    assert tape.gradient(y, w) is None


def test_untrainable_variable():
    v = tg.Variable(2.0, name="v", trainable=False)
    with tg.GradientTape(persistent=True) as tape:
        y = v * v
    e = tape.explain(y, v)
    assert e["v"].reason.startswith("unconnected — Variable 'v' has trainable=False")
    assert "tape.watch(v)" in e["v"].reason and not e["v"].connected
    assert tape.gradient(y, v) is None


def test_variable_read_outside_the_tape():
    v = tg.Variable(2.0, name="v")
    y0 = v * 3.0
    with tg.GradientTape() as tape:
        y = tg.exp(tg.constant(1.0)) * 2.0
    e = tape.explain(y0, v)
    assert "Variable 'v' was not read inside the tape's block" in e["v"].reason


def test_integer_cast_whose_consumers_are_not_recorded():
    x = tg.constant([1.5, 2.5])
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tg.sum(tg.astype(tg.astype(x, tg.int64), tg.float64) * 2.0)
    reason = tape.explain(y, {"x": x})["x"].reason
    assert reason.startswith("unconnected — its path to the target passes through Cast to int64, "
                             "which carries no gradient")
    assert tape.gradient(y, x) is None


@pytest.mark.skipif(tg._backend.default_namespace() is not np,
                    reason="float * int arithmetic (mixed kinds) is NumPy's, not the standard's")
def test_integer_cast_read_by_a_recorded_op():
    x, z = tg.constant([1.5, 2.5]), tg.constant([3.0, 4.0])
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([x, z])
        y = tg.sum(z * tg.astype(x, tg.int32))  # Mul is recorded (z is watched)
    e = tape.explain(y, {"x": x, "z": z})
    assert e["x"].reason == ("unconnected — its path to the target passes through Cast to int32, "
                             "which carries no gradient")
    assert str(e["z"]) == "z: connected through Mul -> Sum -> (target)"
    assert tape.gradient(y, x) is None


def test_comparison_result_carries_no_gradient():
    x = tg.constant([-1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(tg.astype(x > 0.0, tg.float64))
    reason = tape.explain(y, {"x": x})["x"].reason
    assert "passes through Greater, whose bool result carries no gradient" in reason


def test_stop_gradient():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tg.sum(tg.stop_gradient(x * 3.0) ** 2)
    e = tape.explain(y, {"x": x})
    assert e["x"].reason == ("unconnected — its path to the target passes through StopGradient "
                             "(tg.stop_gradient), which blocks the gradient")
    assert e["x"].short == "blocked by StopGradient"
    assert tape.gradient(y, x) is None


def test_non_differentiable_op():
    x = tg.constant([1.5, 2.5])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(_viz_floor(x) * x)  # connected through Mul, not through the floor
        z = tg.sum(_viz_floor(x))
    assert tape.explain(y, {"x": x})["x"].path == ("Mul", "Sum")
    assert tape.explain(z, {"x": x})["x"].reason == (
        "unconnected — its path to the target passes through the non-differentiable op "
        "'VizTestFloor'")


def test_numpy_function_suggests_custom_gradient():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(tg.numpy_function(np.sin, [x], np.float64))
    reason = tape.explain(y, {"x": x})["x"].reason
    assert "non-differentiable op 'NumpyFunction'" in reason and "tg.custom_gradient" in reason


def test_gradient_override_to_a_non_differentiable_type():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        with tg.gradient_override_map({"Exp": "StopGradient"}):
            y = tg.sum(tg.exp(x))
    assert "passes through StopGradient" in tape.explain(y, {"x": x})["x"].reason


def test_target_computed_outside_the_tape():
    x = tg.constant(2.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
    y = x * x
    assert str(tape.explain(y, {"x": x})["x"]) == (
        "x: unconnected — the target was computed outside the tape (or from no watched tensor)")
    assert tape.gradient(y, x) is None


def test_source_not_used_by_any_recorded_op():
    x, z = tg.constant(1.0), tg.constant(2.0)
    with tg.GradientTape() as tape:
        tape.watch([x, z])
        y = z * z
    assert str(tape.explain(y, {"x": x})["x"]) == "x: unconnected — not used by any recorded op"


def test_source_whose_uses_lead_elsewhere():
    x, z = tg.constant(1.0), tg.constant(2.0)
    with tg.GradientTape() as tape:
        tape.watch([x, z])
        _ = tg.exp(x)
        y = z * z
    reason = tape.explain(y, {"x": x})["x"].reason
    assert reason.startswith("unconnected — the target does not depend on it") and "Exp" in reason


def test_unwatched_tensor_is_a_constant():
    x, z = tg.constant([1.0, 2.0]), tg.constant([3.0, 4.0])
    with tg.GradientTape() as tape:
        y = tg.sum(x * x)  # nothing watched: nothing recorded
    reason = tape.explain(y, {"x": x})["x"].reason
    assert reason == ("unconnected — it was not watched (call tape.watch(x) inside the tape's "
                      "block; an unwatched tensor is a constant to the tape)")
    with tg.GradientTape() as tape:
        tape.watch(z)
        y = tg.sum(z * x)
    assert tape.explain(y, {"x": x})["x"].reason.endswith("; Mul read it as a constant")


def test_integer_source():
    n = tg.constant([1, 2])
    with tg.GradientTape() as tape:
        y = tg.astype(n, tg.float64)
    assert "dtype int64 carries no gradient" in tape.explain(y, {"n": n})["n"].reason


def test_missing_gradient_is_announced():
    x = tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = _viz_nograd(x) + 1.0
    reason = tape.explain(y, {"x": x})["x"].reason
    assert reason.startswith("connected through VizTestNoGrad -> Add -> (target)")
    assert "'VizTestNoGrad' have no registered gradient, so tape.gradient will raise" in reason
    with pytest.raises(tg.errors.NotDifferentiableError):
        tape.gradient(y, x)


def test_names_and_string_form():
    w = tg.Variable(1.0, name="w")
    x, z = tg.constant(1.0), tg.constant(2.0)
    with tg.GradientTape() as tape:
        tape.watch([x, z])
        y = w * x
    e = tape.explain(y, [w, x, {"z": z}])
    assert [s.name for s in e] == ["w", "sources[1]", "sources[2].z"]
    lines = str(e).splitlines()
    assert lines[0] == ("Gradient of the target (shape (), float64) from 1 recorded op(s); for "
                        "each source:")
    assert lines[1] == "  w: connected through Mul -> (target)"
    assert repr(e) == str(e)
    with pytest.raises(KeyError, match="no source named 'nope'; the sources are 'w'"):
        e["nope"]
    assert e[0] is e["w"]


def test_records_released_by_gradient():
    x = tg.Variable(1.0)
    with tg.GradientTape() as tape:
        y = x * x
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match="records were released.*persistent=True"):
        tape.explain(y, x)
    with pytest.raises(RuntimeError, match="records were released"):
        tape.to_dot(y)


def test_bad_arguments():
    x = tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = x * 2.0
    with pytest.raises(TypeError, match="not a Tensor"):
        tape.explain(y, {"x": 3.0})
    with pytest.raises(TypeError, match="target must be a Tensor"):
        tape.explain(1.0, x)


# --- DOT text -------------------------------------------------------------------------------------
def _mlp_tape():
    w = tg.Variable(np.ones((4, 3)), name="w")
    b = tg.Variable(np.zeros(3), name="b")
    frozen = tg.Variable(1.0, name="frozen", trainable=False)
    x = tg.constant(np.ones((2, 4)))
    with tg.GradientTape(persistent=True) as tape:
        h = _square(tg.matmul(x, w) + b)
        loss = tg.sum(h) * frozen
    return tape, loss, {"w": w, "b": b, "frozen": frozen}


def test_dot_shows_ops_shapes_sources_and_target():
    tape, loss, sources = _mlp_tape()
    text = tape.to_dot(loss, sources)
    assert text == viz.to_dot(tape, loss, sources)
    assert text.startswith("digraph tape {") and text.rstrip().endswith("}")
    assert '"MatMul\\n(2, 3) float64"' in text
    assert '"Sum\\n() float64"' in text
    assert '"w\\n(4, 3) float64"' in text and '"b\\n(3,) float64"' in text
    assert '"constant (2, 4) float64"' in text  # x: not watched, drawn as a constant
    assert 'label="target\\n() float64" shape=ellipse peripheries=2' in text
    # the custom_gradient op is highlighted
    line = next(ln for ln in text.splitlines() if "custom_gradient" in ln)
    assert '"_square\\ncustom_gradient\\n(2, 3) float64"' in line
    assert 'fillcolor="#ffd8a8"' in line and 'color="#e8590c"' in line
    # the unconnected source: dashed red, with its reason
    line = next(ln for ln in text.splitlines() if "frozen" in ln and "label" in ln)
    assert "unconnected: trainable=False" in line
    assert 'style="filled,dashed" color="#e03131"' in line
    # an edge per tensor input, and the last op to the target
    edges = [ln.split()[:3] for ln in text.splitlines() if re.match(r"\s+\w+ -> \w+", ln)]
    assert len(edges) == 9 and edges[-1][2] == "target0"


def test_dot_default_sources_are_watched_leaves():
    tape, loss, sources = _mlp_tape()
    text = tape.to_dot(loss)
    assert '"w\\n(4, 3) float64" shape=ellipse fillcolor="#ebfbee"' in text
    assert "unconnected:" not in text  # no verdicts without sources
    assert '"frozen\\n' not in text  # not watched, so a constant
    assert '"constant () float64"' in text


@pytest.mark.skipif(tg._backend.default_namespace() is not np,
                    reason="float * int arithmetic (mixed kinds) is NumPy's, not the standard's")
def test_dot_marks_the_blocking_op_and_integer_edges():
    x = tg.constant([1.5, 2.5])
    z = tg.constant([3.0, 4.0])
    with tg.GradientTape() as tape:
        tape.watch([x, z])
        y = tg.sum(z * tg.astype(x, tg.int64))
    lines = tape.to_dot(y, {"x": x, "z": z}).splitlines()
    cast = next(ln for ln in lines if ln.lstrip().startswith("op") and '"Cast' in ln)
    assert '"Cast\\n(2,) int64"' in cast and 'color="#e03131" penwidth=2' in cast
    cast_node = cast.split()[0]
    edge = next(ln for ln in lines if ln.strip().startswith(f"{cast_node} -> "))
    assert 'style="dashed"' in edge  # an int64 value
    assert any("blocked by Cast" in ln for ln in lines)


def test_dot_for_cast_without_recorded_consumer_shows_the_dead_end():
    x = tg.constant([1.5, 2.5])
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.astype(tg.astype(x, tg.int64), tg.float64) * 2.0
    text = tape.to_dot(y, {"x": x})
    assert '"Cast\\n(2,) int64"' in text
    assert "unconnected: blocked by Cast to int64" in text
    assert "(not recorded on the tape)" in text


def test_dot_non_differentiable_and_overridden_ops():
    x = tg.constant([1.0, 2.0])
    with tg.GradientTape() as tape:
        tape.watch(x)
        with tg.gradient_override_map({"Exp": "Identity"}):
            a = tg.exp(x)
        y = tg.sum(tg.stop_gradient(a) + a)
    text = tape.to_dot(y, [x])
    line = next(ln for ln in text.splitlines() if '"StopGradient' in ln)
    assert '"StopGradient\\nno gradient\\n(2,) float64"' in line
    assert 'fillcolor="#eeeeee"' in line
    line = next(ln for ln in text.splitlines() if '"Exp' in ln)
    assert '"Exp\\ngradient of Identity\\n(2,) float64"' in line and "#ffd8a8" in line


def test_dot_multi_output_op_and_quoting():
    x = tg.Variable([1.0, 2.0], name='say "hi"\\')
    with tg.GradientTape() as tape:
        a, b = _split(x)
        y = tg.sum(a * b)
    text = tape.to_dot(y, x)
    assert '"_split\\ncustom_gradient\\n[0] (2,) float64\\n[1] (2,) float64"' in text
    assert '"say \\"hi\\"\\\\\\n(2,) float64"' in text


def test_dot_list_of_targets_and_unrecorded_target():
    x = tg.constant(1.0)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y1 = x * 2.0
    y2 = x * 3.0
    text = tape.to_dot([y1, y2], {"x": x})
    assert '"target 0\\n() float64"' in text and '"target 1\\n() float64' in text
    assert "(not recorded on the tape)" in text


# --- rendering ------------------------------------------------------------------------------------
def _png_size(data):
    assert data[:8] == PNG_SIGNATURE
    return struct.unpack(">II", data[16:24])


def test_render_png(tmp_path):
    _needs_dot()
    tape, loss, sources = _mlp_tape()
    path = viz.draw(tape, loss, tmp_path / "tape.png", sources)
    assert path == tmp_path / "tape.png"
    width, height = _png_size(path.read_bytes())
    assert width > 200 and height > 300


def test_render_svg_and_jupyter(tmp_path):
    _needs_dot()
    tape, loss, sources = _mlp_tape()
    g = viz.graph(tape, loss, sources)
    svg = g._repr_svg_()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert ">MatMul</text>" in svg and ">(2, 3) float64</text>" in svg
    g.render(tmp_path / "tape.svg")
    assert (tmp_path / "tape.svg").read_text() == svg
    assert g.pipe("pdf")[:4] == b"%PDF"


def test_dot_errors_are_reported():
    _needs_dot()
    with pytest.raises(RuntimeError, match=r"Graphviz `dot -Tpng` failed \(exit status \d+\): "
                                           r"\S"):
        viz.Graph("digraph { a -> }").pipe("png")


def test_missing_dot_names_the_install_command(tmp_path, monkeypatch):
    tape, loss, sources = _mlp_tape()
    g = viz.graph(tape, loss, sources)
    monkeypatch.setattr(viz.shutil, "which", lambda name: None)
    with pytest.raises(viz.GraphvizNotFoundError) as info:
        g.render(tmp_path / "tape.png")
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert "apt-get install graphviz" in message and "brew install graphviz" in message
    assert "to_dot" in message
    assert not (tmp_path / "tape.png").exists()
    assert g._repr_svg_() is None  # Jupyter falls back to the text repr...
    assert "apt-get install graphviz" in repr(g)  # ...which says how to install Graphviz
    assert g.render(tmp_path / "tape.dot").read_text() == g.source  # DOT text needs no dot
    assert str(g) == g.source == tape.to_dot(loss, sources)


def test_unknown_suffix_and_bad_source(tmp_path):
    tape, loss, _ = _mlp_tape()
    with pytest.raises(ValueError, match=r"unknown suffix '\.jpg'; use one of \.svg, \.png"):
        viz.draw(tape, loss, tmp_path / "tape.jpg")
    with pytest.raises(TypeError, match="DOT text"):
        viz.Graph(b"digraph {}")


def test_namespace():
    assert tg.viz is viz
    assert set(viz.__all__) >= {"explain", "to_dot", "graph", "draw", "Graph"}
