"""tapegrad.examples.digits_cnn: the model's shapes and variables, a checkpoint-restored run
that reaches 98% held-out accuracy, and its usage error."""
import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("safetensors")

import tapegrad as tg  # noqa: E402
from tapegrad.examples import digits_cnn  # noqa: E402


def test_model_collects_its_variables_by_path_and_gives_logits():
    model = digits_cnn.DigitsCNN(0)
    names = [path for path, _ in model.named_variables()]
    assert names == ["conv1/bias", "conv1/kernel", "conv2/bias", "conv2/kernel",
                     "dense1/bias", "dense1/kernel", "dense2/bias", "dense2/kernel"]
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == (
        9 * 32 + 32 + 9 * 32 * 64 + 64 + 1024 * 128 + 128 + 128 * 10 + 10)
    x = tg.constant(np.random.default_rng(0).uniform(size=(5, 8, 8, 1)).astype(np.float32))
    logits = model(x)
    assert logits.shape == (5, 10) and logits.dtype == tg.float32
    np.testing.assert_array_equal(model(x).numpy(), logits.numpy())  # no dropout at inference
    assert not np.array_equal(model(x, training=True).numpy(), logits.numpy())


@pytest.mark.slow  # a training run (30-50 s); the demo's parts have fast tests
def test_run_restored_from_a_midway_checkpoint_reaches_98_percent(tmp_path, capsys):
    out = digits_cnn.main(["--checkpoint-dir", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "restored a fresh model and optimizer" in printed and "(step 270)" in printed
    assert out["checkpoint"].endswith("ckpt-1") and (tmp_path / "ckpt-1.index.json").exists()
    assert out["accuracy"] >= 0.98, out["accuracy"]
    assert f"test accuracy: {out['accuracy']:.3f}" in printed
    assert np.mean(out["losses"][-45:]) < 0.2 * np.mean(out["losses"][:45])


def test_one_epoch_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        digits_cnn.main(["--epochs", "1"])
    assert info.value.code == 2
    assert "--epochs must be at least 2" in capsys.readouterr().err


@pytest.mark.slow  # a training run (30-50 s); the demo's parts have fast tests
def test_data_parallel_on_four_cpu_devices():
    """--devices 4 in a fresh interpreter (XLA makes the 4 CPU devices when JAX starts)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    env = {k: v for k, v in os.environ.items() if k not in ("TAPEGRAD_ARRAY_BACKEND", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"  # host devices, also where a GPU is present
    proc = subprocess.run([sys.executable, "-m", "tapegrad.examples.digits_cnn", "--epochs", "2",
                           "--devices", "4"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "on 4 device(s)" in proc.stdout and "(step 45)" in proc.stdout
    accuracy = float(proc.stdout.split("test accuracy:")[1].split()[0])
    assert accuracy >= 0.9, proc.stdout


def test_zero_devices_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        digits_cnn.main(["--devices", "0"])
    assert info.value.code == 2
    assert "--devices must be at least 1" in capsys.readouterr().err
