"""tapegrad.examples.digits: the custom ops, the data split, a short and a full training run."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

import tapegrad as tg  # noqa: E402
from tapegrad.examples import digits  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ACCURACY_LINE = re.compile(r"^test accuracy: (\d\.\d{3})$", re.MULTILINE)


def _assert_png(path):
    assert path.exists()
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_elu_values_and_gradient():
    x = np.array([-2.0, -0.5, 0.5, 3.0])
    xt = tg.constant(x)
    with tg.GradientTape() as tape:
        tape.watch(xt)
        y = digits.elu(xt)
    np.testing.assert_allclose(y.numpy(), np.where(x > 0, x, np.expm1(x)))
    np.testing.assert_allclose(tape.gradient(y, xt).numpy(), np.where(x > 0, 1.0, np.exp(x)))


def test_log_softmax_matches_numpy_and_is_stable():
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 5.0]])
    expected = x - np.log(np.exp(x).sum(-1, keepdims=True))
    np.testing.assert_allclose(digits.log_softmax(tg.constant(x)).numpy(), expected)
    big = digits.log_softmax(tg.constant(x * 1e4)).numpy()
    assert np.all(np.isfinite(big))
    np.testing.assert_allclose(big[0], [-2e4, -1e4, 0.0])


def test_cross_entropy_value_and_gradient():
    rng = np.random.default_rng(1)
    logits, labels = rng.normal(size=(5, 10)), rng.integers(0, 10, size=5)
    onehot = np.eye(10)[labels]
    z = tg.constant(logits)
    with tg.GradientTape() as tape:
        tape.watch(z)
        loss = digits.cross_entropy(z, tg.constant(onehot))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(float(loss), -np.mean(np.log(p[np.arange(5), labels])))
    np.testing.assert_allclose(tape.gradient(loss, z).numpy(), (p - onehot) / 5)


def test_check_ops_passes_first_and_second_order(capsys):
    results = digits.check_ops()
    assert results == {(name, order): True for name in ("elu (primitive DigitsElu)",
                                                        "log_softmax (custom_gradient)")
                       for order in (1, 2)}
    assert capsys.readouterr().out.count(": ok") == 4


def test_load_data_split():
    x_train, y_train, x_test, y_test = digits.load_data()
    assert x_train.shape == (1437, 64) and x_test.shape == (360, 64)
    assert x_train.dtype == np.float32 and 0.0 <= x_train.min() and x_train.max() == 1.0
    # stratified: every class has (close to) 20% of its images in the test split
    counts_test, counts_all = np.bincount(y_test), np.bincount(np.concatenate([y_train, y_test]))
    np.testing.assert_allclose(counts_test / counts_all, 0.2, atol=0.01)


def test_short_run_prints_accuracy_and_writes_png(tmp_path, capsys):
    out = tmp_path / "loss.png"
    result = digits.main(["--epochs", "2", "--out", str(out)])
    text = capsys.readouterr().out
    match = ACCURACY_LINE.search(text)
    assert match and float(match.group(1)) == round(result["accuracy"], 3)
    assert result["accuracy"] > 0.8  # two epochs already learn most digits
    assert text.count("gradient check") == 4 and "FAIL" not in text
    assert len(result["losses"]) == 2 * 45  # 1437 images in batches of 32
    assert np.mean(result["losses"][-10:]) < np.mean(result["losses"][:10])
    _assert_png(out)


def test_without_tqdm_prints_epochs(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # makes `from tqdm import tqdm` fail
    x_train, y_train, _, _ = digits.load_data()
    losses = digits.train(digits.build_model(), x_train[:64], y_train[:64], epochs=2)
    assert len(losses) == 4
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("epoch 1/2: running loss") and lines[1].startswith("epoch 2/2")


def test_full_run_reaches_95_percent(tmp_path, capsys):
    result = digits.main(["--out", str(tmp_path / "loss.png")])
    assert result["accuracy"] >= 0.95
    assert f"test accuracy: {result['accuracy']:.3f}" in capsys.readouterr().out


def test_command_line_default_output(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tapegrad.examples.digits", "--epochs", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    assert ACCURACY_LINE.search(proc.stdout)
    _assert_png(tmp_path / "digits_loss.png")


def test_bad_epochs_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        digits.main(["--epochs", "0"])
    assert info.value.code == 2
    assert "--epochs must be at least 1" in capsys.readouterr().err


def test_explain_flag_draws_one_training_step(tmp_path, capsys):
    out = tmp_path / "step.png"
    result = digits.main(["--epochs", "1", "--out", str(tmp_path / "loss.png"),
                          "--explain", str(out)])
    text = capsys.readouterr().out
    assert "w1: connected through MatMul -> Add -> DigitsElu -> MatMul -> Add -> " \
           "CustomGradient:log_softmax -> Mul" in text
    assert "b2: connected through Add -> CustomGradient:log_softmax" in text
    if shutil.which("dot") is None:  # the DOT text instead, and how to install Graphviz
        assert result["explain"] == out.with_suffix(".dot")
        assert "apt-get install graphviz" in text
        assert "DigitsElu" in out.with_suffix(".dot").read_text()
    else:
        assert result["explain"] == out
        _assert_png(out)
    assert result["accuracy"] > 0.5  # training still runs after the picture


def test_explain_step_svg_labels(tmp_path):
    if shutil.which("dot") is None:
        pytest.skip(f"Graphviz's `dot` is not installed; {tg.viz.INSTALL_HINT}")
    x_train, y_train, _, _ = digits.load_data()
    params = digits.build_model()
    before = [p.numpy().copy() for p in params]
    path = digits.explain_step(params, x_train[:32], np.eye(10, dtype=np.float32)[y_train[:32]],
                               tmp_path / "step.svg")
    svg = path.read_text()
    for label in ("DigitsElu", "log_softmax", "custom_gradient", "MatMul", "(32, 128) float32",
                  "(64, 128) float32", ">w1<", ">target<"):
        assert label in svg, label
    for p, b in zip(params, before):  # drawing a step does not train
        np.testing.assert_array_equal(p.numpy(), b)


def test_explain_step_without_graphviz_writes_dot_text(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    x_train, y_train, _, _ = digits.load_data()
    path = digits.explain_step(digits.build_model(), x_train[:8],
                               np.eye(10, dtype=np.float32)[y_train[:8]], tmp_path / "step.png")
    assert path == tmp_path / "step.dot" and not (tmp_path / "step.png").exists()
    text = path.read_text()
    assert text.startswith("digraph tape {")
    assert '"DigitsElu\\nuser gradient\\n(8, 128) float32"' in text
    assert "apt-get install graphviz" in capsys.readouterr().out


def test_explain_needs_png_or_svg(capsys):
    with pytest.raises(SystemExit) as info:
        digits.main(["--explain", "step.jpg"])
    assert info.value.code == 2
    assert "--explain PATH must end in .png or .svg" in capsys.readouterr().err


def test_compiled_training_matches_eager_and_reports_its_tracing(capsys, monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.setitem(sys.modules, "tqdm", None)
    x_train, y_train, _, _ = digits.load_data()
    x, y = x_train[:70], y_train[:70]  # batches of 32, 32 and 6: two signatures
    eager = digits.train(digits.build_model(), x, y, epochs=2)
    capsys.readouterr()
    compiled = digits.train(digits.build_model(), x, y, epochs=2, compiled=True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-4)
    text = capsys.readouterr().out
    assert text.startswith("first step (trace and XLA compile): ")
    assert re.search(r"tracing and compiling took \d+\.\d\d s for 2 batch shape\(s\) \(a last "
                     r"batch of 6 images is a new signature\); the 6 steps ran in the rest", text)
