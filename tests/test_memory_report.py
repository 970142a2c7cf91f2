"""What the tape keeps: GradientTape.memory_report and tg.debugging.saved_residuals (issue 32).

conftest sets _records.DROP_MIN_BYTES to 0, so every tensor a gradient does not read is dropped,
whatever its size: the byte counts below are exact."""
import inspect

import numpy as np
import pytest

import tapegrad as tg

F8 = np.dtype("float64")


@pytest.fixture
def sites():
    tg.debugging.enable_memory_report()
    yield
    tg.debugging.disable_memory_report()


def _line(offset=0):
    """``file:line`` of the caller's line plus ``offset``."""
    frame = inspect.currentframe().f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno + offset}"


def _arrays(*shapes):
    rng = np.random.default_rng(0)
    return [tg.constant(rng.standard_normal(s)) for s in shapes]


def test_a_matmul_chain_keeps_exactly_the_matmul_inputs(sites):
    x, w1, w2 = _arrays((8, 16), (16, 32), (32, 4))
    with tg.GradientTape() as tape:
        tape.watch([w1, w2])
        here = _line(1)
        h = x @ w1
        loss = tg.sum(h @ w2)
    report = tape.memory_report()
    assert [r.op_type for r in report.rows] == ["MatMul", "MatMul", "Sum"]
    first, second, total = report.rows
    assert [(t.role, t.shape, t.dtype, t.nbytes) for t in first.kept] == [
        ("input x1", (8, 16), F8, 8 * 16 * 8), ("input x2", (16, 32), F8, 16 * 32 * 8)]
    assert first.dropped == ("output 0 (8, 32) float64",)  # MatMul reads its inputs only
    assert [(t.role, t.shape, t.nbytes) for t in second.kept] == [
        ("input x1", (8, 32), 8 * 32 * 8), ("input x2", (32, 4), 32 * 4 * 8)]
    assert total.kept == () and total.nbytes == 0  # Sum's gradient reads shapes only
    assert report.total_bytes == 8 * (8 * 16 + 16 * 32 + 8 * 32 + 32 * 4) == 8192
    file, _, no = here.rpartition(":")
    assert first.line == here and second.line == total.line == f"{file}:{int(no) + 1}"
    assert report.by_line == {here: 5120, f"{file}:{int(no) + 1}": 3072}
    text = str(report)
    assert "kept by the tape for the reverse pass: 3 rows, 8192 bytes (8.0 KiB)" in text
    assert "MatMul" in text and "dropped: output 0 (8, 32) float64" in text and "by line:" in text
    assert loss.shape == ()


def test_reads_outputs_keeps_the_output_only_and_a_shared_buffer_counts_once(sites):
    x, w = _arrays((8, 16), (16, 4))
    with tg.GradientTape() as tape:
        tape.watch(x)
        h = tg.tanh(x)  # Tanh's gradient reads its output: its input is dropped
        y = h @ w  # MatMul keeps h again: counted once
    tanh, matmul = tape.memory_report().rows
    assert [(t.role, t.shape, t.nbytes) for t in tanh.kept] == [("output 0", (8, 16), 1024)]
    assert tanh.dropped == ("input x (8, 16) float64",)
    assert [(t.role, t.size_bytes, t.nbytes) for t in matmul.kept] == [
        ("input x1", 1024, 0), ("input x2", 512, 512)]
    assert tape.memory_report().total_bytes == 1536
    assert "(counted above)" in str(tape.memory_report()) and y.shape == (8, 4)


def test_recompute_grad_keeps_the_block_inputs_and_output_only():
    x, w1, w2 = _arrays((8, 16), (16, 16), (16, 16))

    def block(x, w1, w2):
        return tg.tanh(tg.tanh(x @ w1) @ w2)

    plain = tg.debugging.saved_residuals(block, x, w1, w2)
    # MatMul x, w1; Tanh h1 (8, 16); MatMul h1 (counted above), w2; Tanh y (8, 16)
    assert plain.total_bytes == 8 * (8 * 16 + 16 * 16 + 8 * 16 + 16 * 16 + 8 * 16) == 7168
    again = tg.debugging.saved_residuals(tg.recompute_grad(block), x, w1, w2)
    (row,) = again.rows
    assert row.op_type.startswith("CustomGradient:")
    assert [t.role.split()[0] for t in row.kept] == ["input"] * 3 + ["output"]
    assert again.total_bytes == 8 * (8 * 16 + 16 * 16 + 16 * 16 + 8 * 16) == 6144
    np.testing.assert_allclose(tg.grad(lambda a: tg.sum(tg.recompute_grad(block)(a, w1, w2)))(x),
                               tg.grad(lambda a: tg.sum(block(a, w1, w2)))(x))


def _scan_loss(n, checkpoints):
    def loss(c0, w):
        def step(c, _):
            return tg.sin(1.1 * c) * w + 0.01 * c, None
        return tg.sum(tg.lax.scan(step, c0, None, length=n, checkpoints=checkpoints)[0])
    return loss


def test_a_checkpointed_scan_keeps_o1_carries_eagerly_and_every_step_keeps_o_n():
    c0, w = tg.constant(np.linspace(-1, 1, 64)), tg.constant(np.full(64, 0.9))
    carry = 64 * 8
    kept = {(n, s): tg.debugging.saved_residuals(_scan_loss(n, s), c0, w).total_bytes
            for n in (10, 40) for s in (None, 4)}
    # checkpoints=4: one Scan record keeping c0, w and the last carry, whatever n
    assert kept[10, 4] == kept[40, 4] == 3 * carry
    # every step recorded: per step its carry c, 1.1 c (read by Sin) and sin(1.1 c) (by Mul)
    assert kept[40, None] - kept[10, None] == 30 * 3 * carry
    (scan,) = tg.debugging.saved_residuals(_scan_loss(40, 4), c0, w).rows[:1]
    assert scan.op_type == "Scan" and [t.shape for t in scan.kept] == [(64,)] * 3


def test_a_custom_gradient_closure_is_counted():
    x = _arrays((4, 8))[0]

    @tg.custom_gradient
    def f(x):
        e = tg.exp(x)  # held by grad's closure, not by the record

        def grad(dy):
            return dy * e
        return tg.sum(e), grad

    (row,) = tg.debugging.saved_residuals(f, x).rows
    assert [(t.role, t.shape, t.nbytes) for t in row.kept] == [
        ("input x", (4, 8), 256), ("output 0", (), 8), ("closure", (4, 8), 256)]


def test_without_the_mode_lines_are_none_and_the_hot_path_has_no_observer():
    x = _arrays((3,))[0]
    with tg.GradientTape() as tape:
        tape.watch(x)
        tg.sin(x)
    assert tape.memory_report().rows[0].line is None
    assert "?" in str(tape.memory_report())
    assert not any(getattr(e, "_observer", False) for e in tg._records.trace_entries())


def test_memory_report_after_gradient_of_a_non_persistent_tape_says_what_to_do():
    x = _arrays((3,))[0]
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(tg.sin(x))
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match=r"memory_report: this non-persistent GradientTape's "
                                           r"records were freed by its gradient .* call "
                                           r"tape.memory_report\(\) before tape.gradient, or "
                                           r"create the tape with persistent=True"):
        tape.memory_report()


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="memory_report: expected a tg.GradientTape, got int; "
                                        "for a function, use tg.debugging.saved_residuals"):
        tg.debugging.memory_report(3)
    with pytest.raises(TypeError, match="saved_residuals: expected a function to call on the "
                                        "arguments, got ndarray"):
        tg.debugging.saved_residuals(np.ones(3), 1.0)


# --- compiled: tg.function -------------------------------------------------------------------
def test_compiled_matmul_chain_lists_the_trace_records_and_xla_sizes(sites):
    pytest.importorskip("jax")
    x, w1, w2 = _arrays((8, 16), (16, 32), (32, 4))

    def loss(x, w1, w2):
        return tg.sum((x @ w1) @ w2)
    here = _line(-1)
    report = tg.debugging.saved_residuals(tg.function(loss), x, w1, w2)
    assert [r.op_type for r in report.rows] == ["MatMul", "MatMul", "Sum"]
    assert report.total_bytes == 8192  # the same records as eagerly, on symbolic values
    assert {r.line for r in report.rows} == {here}
    assert set(report.xla) == {"temp", "argument", "output", "alias", "generated_code"}
    assert report.xla["argument"] == 8192 - 8 * 8 * 32  # x, w1, w2 (h is not an argument)
    grads = 8 * (8 * 16 + 16 * 32 + 32 * 4)  # the three gradients (and XLA's tuple of them)
    assert grads <= report.xla["output"] <= grads + 64
    assert "XLA, compiled gradient program: temp" in str(report)


def test_compiled_checkpointed_scan_temp_is_o1_and_every_step_is_o_n():
    pytest.importorskip("jax")
    c0, w = tg.constant(np.linspace(-1, 1, 256)), tg.constant(np.full(256, 0.9))
    carry = 256 * 8
    temp = {(n, s): tg.debugging.saved_residuals(tg.function(_scan_loss(n, s)), c0, w)
            .xla["temp"] for n in (10, 40) for s in (None, 4)}
    assert temp[10, 4] == temp[40, 4] <= 10 * carry  # checkpoints: independent of n
    assert temp[40, None] - temp[10, None] >= 30 * carry  # every step: one carry per step


def test_a_function_that_runs_eagerly_has_no_compiled_view():
    pytest.importorskip("jax")
    f = tg.function(lambda x: tg.sum(x), jit_compile=False)
    with pytest.raises(TypeError, match="saved_residuals: tg.function <lambda> runs eagerly "
                                        "here .* pass its Python function"):
        tg.debugging.saved_residuals(f, tg.constant([1.0]))
