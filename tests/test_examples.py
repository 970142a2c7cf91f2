"""The scripts in examples/: each main() runs; its values are checked against hand derivations."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import tapegrad as tg

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name):
    """Import examples/<name>.py once per process (its primitives register op types)."""
    key = f"tapegrad_example_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def test_every_example_has_a_docstring_and_main():
    for path in sorted(EXAMPLES.glob("*.py")):
        module = load(path.stem)
        assert module.__doc__ and "TensorFlow" in module.__doc__, path.name
        assert callable(module.main), path.name


def test_custom_square():
    out = load("custom_square").main()
    assert out == {"y": 4.0, "dy_dx": 4.0}  # d(x^2)/dx = 2x = 4 at x = 2


def test_leaky_gradient_relu():
    out = load("leaky_gradient_relu").main()
    np.testing.assert_array_equal(out["y"], [0.0, 1.0, 0.0, 3.0])
    np.testing.assert_allclose(out["dy_dx"], [0.01, 1.0, 0.01, 1.0])


def test_scaled_gradient():
    out = load("scaled_gradient").main()
    np.testing.assert_array_equal(out["y"], [0.0, 2.0])
    np.testing.assert_allclose(out["dy_dx"], [0.5, 0.5])


def test_gradient_from_function_is_the_surrogate_and_not_linear():
    out = load("gradient_from_function").main()
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(out["grad"], np.sin(x) + 0.1 * x)
    np.testing.assert_allclose(out["grad_dy2"], 2 * np.sin(x) + 0.1 * x)
    assert not np.allclose(out["grad_dy2"], 2 * np.asarray(out["grad"]))
    np.testing.assert_allclose(out["true_grad"], 2 * x)


def test_stable_softmax():
    out = load("stable_softmax").main()
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    w = np.asarray(out["weights"])
    p = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    np.testing.assert_allclose(out["y"], p)
    # d/dx sum(w * softmax(x)) = p * (w - sum(w * p))
    np.testing.assert_allclose(out["grad_weighted"], p * (w - (w * p).sum(-1, keepdims=True)))
    np.testing.assert_allclose(out["grad_sum"], np.zeros_like(x), atol=1e-15)
    # at magnitude 1e4 the result equals the softmax of the shifted logits; the naive one is NaN
    np.testing.assert_allclose(out["y_large"], p)
    assert np.all(np.isfinite(out["grad_large"]))
    np.testing.assert_allclose(out["grad_large"], out["grad_weighted"], atol=1e-12)
    assert np.all(np.isnan(out["naive_large"]))


def test_second_derivative():
    out = load("second_derivative").main()
    np.testing.assert_allclose(out["dy_dx"], [3.0, 12.0])  # 3x^2
    np.testing.assert_allclose(out["d2y_dx2"], [6.0, 12.0])  # 6x


def test_custom_second_order():
    out = load("custom_second_order").main()
    np.testing.assert_allclose(out["dy_dx"], [2.0, 6.0])  # 2x at [1, 3]
    np.testing.assert_allclose(out["d2y_dx2"], [2.0, 2.0])  # d^2(x^2)/dx^2
    assert out["second_order_calls"] == 1  # the nested custom rule gave the second derivative
    assert out["seed_error"].startswith("GradientCountError")
    assert "nested" in out["seed_error"]


def test_threshold_relu_trains_loss_and_threshold():
    module = load("threshold_relu")
    out = module.main()
    losses = out["losses"]
    assert len(losses) == 10  # printed every 10 steps of 100
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert losses[-1] < 0.7 * losses[0]
    assert out["threshold"] < 0.5 - 0.3  # it started at 0.5 and learns to fall


def test_threshold_relu_gradients_match_hand_derivation():
    import tapegrad as tg

    module = load("threshold_relu")
    x = tg.constant([-1.0, 0.2, 0.7, 2.0])
    t = tg.constant(0.5)
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([x, t])
        y = module.threshold_relu(x, t)
    np.testing.assert_allclose(y.numpy(), [0.0, 0.0, 0.2, 1.5])
    gx, gt = tape.gradient(y, [x, t])
    np.testing.assert_allclose(gx.numpy(), [0.0, 0.0, 1.0, 1.0])
    assert float(gt) == -2.0  # d/dt (x - t) = -1 on the two active elements
    del tape
    tg.test.check_gradients(module.threshold_relu, [np.array([[-1.0, 0.2], [0.7, 2.0]]),
                                                    np.array(0.5)], order=2)


_NUMPY_ONLY = pytest.mark.skipif(
    tg._backend.default_namespace() is not np,
    reason="the deconvolution example's ops have SciPy forwards: NumPy arrays only")


@_NUMPY_ONLY
def test_deconvolution_ops_pass_gradient_checks_and_recover_the_photograph():
    pytest.importorskip("sklearn")
    deconv = load("deconvolution")
    rng = np.random.default_rng(0)
    image, psf = rng.normal(size=(5, 6)), rng.normal(size=(3, 3))
    from scipy import signal
    np.testing.assert_allclose(deconv.deconv2d(image, psf).numpy(),
                               signal.convolve2d(image, psf, mode="full"))
    # the adjoint pair: <Deconv2D(x, k), y> == <x, Correlate2D(y, k)>
    y = rng.normal(size=(7, 8))
    lhs = float(np.sum(deconv.deconv2d(image, psf).numpy() * y))
    rhs = float(np.sum(image * deconv.correlate2d(y, psf).numpy()))
    assert abs(lhs - rhs) < 1e-12 * max(1.0, abs(lhs))
    tg.test.check_gradients(deconv.deconv2d, [image, psf], order=2)
    tg.test.check_gradients(deconv.correlate2d, [y, psf], order=2)
    out = deconv.main(steps=300, size=96)
    assert out["psnr_recovered"] - out["psnr_blurred"] >= 6.0, out
    assert out["loss_last"] < 0.1 * out["loss_first"]


@_NUMPY_ONLY
def test_deconvolution_ops_name_bad_shapes():
    deconv = load("deconvolution")
    with pytest.raises(ValueError, match=r"Deconv2D: psf must be 2-D \(height, width\), got shape \(3,\)"):
        deconv.deconv2d(np.ones((4, 4)), np.ones(3))
    with pytest.raises(ValueError, match=r"Correlate2D: the window \(5, 5\) is larger than the signal \(4, 4\)"):
        deconv.correlate2d(np.ones((4, 4)), np.ones((5, 5)))


@_NUMPY_ONLY
def test_tapegrad_check_passes_the_deconvolution_example_and_fails_a_broken_copy(tmp_path):
    import subprocess

    def check(path):
        return subprocess.run([sys.executable, "-m", "tapegrad", "check", str(path)],
                              capture_output=True, text=True, timeout=300)

    good = check(EXAMPLES / "deconvolution.py")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "PASS      Deconv2D" in good.stdout and "PASS      Correlate2D" in good.stdout
    source = (EXAMPLES / "deconvolution.py").read_text()
    wrong = "return correlate2d(dy, psf) * 1.01, correlate2d(dy, image)"
    broken = tmp_path / "broken_deconvolution.py"
    broken.write_text(source.replace("return correlate2d(dy, psf), correlate2d(dy, image)", wrong))
    bad = check(broken)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL      Deconv2D" in bad.stdout and "result: 1 passed, 2 failed" in bad.stdout
    # main()'s short run (CHECK_ARGS) self-checks the rule on its real inputs too
    assert "FAIL      rule of Deconv2D: _deconv2d_grad (" in bad.stdout
    assert "disagrees with a central difference of the forward at input 0 'image'" in bad.stdout


def test_navier_stokes_spectral_step_is_self_adjoint_and_divergence_free():
    ns = load("navier_stokes")
    rng = np.random.default_rng(0)
    u, w = rng.normal(size=(2, 2, 16, 16))
    spectral = ns.spectral_operator(16)
    pu = spectral(tg.constant(u)).numpy()
    pw = spectral(tg.constant(w)).numpy()
    np.testing.assert_allclose(np.sum(pu * w), np.sum(u * pw), rtol=1e-12)  # <P D u, w> = <u, P D w>
    kx, ky, _ = ns.wavenumbers(16)
    h = np.fft.rfftn(pu, axes=(1, 2))
    np.testing.assert_allclose(kx * h[0] + ky * h[1], 0, atol=1e-10)  # k . u_hat = 0
    # its custom gradient, and the whole step's, against central differences
    tg.test.check_gradients(spectral, [u])
    tg.test.check_gradients(ns.make_step(16), [0.3 * ns.initial_flow(16)])


@pytest.mark.skipif(tg._backend.default_namespace().__name__ == "array_api_strict",
                    reason="compiled code makes array_api_strict constants that do not mix "
                           "with JAX tracers")
def test_navier_stokes_recovers_the_force_compiled_and_eager_alike():
    ns = load("navier_stokes")
    small = ["--grid", "16", "--steps", "40", "--every", "10", "--out", ""]
    compiled = ns.main(small + ["--iterations", "30"])
    losses = np.array(compiled["losses"])
    assert np.all(np.diff(losses) <= 1e-12)  # Adam's cosine-decayed rate: no oscillation
    assert losses[-1] < 0.04 * losses[0]  # down to the noise: 0.01^2 and its propagation
    assert compiled["error"] < 0.05  # relative L2 error of the recovered force
    np.testing.assert_allclose(compiled["recovered"], compiled["theta"], atol=0.15)
    assert compiled["step_seconds"] > 0 and compiled["peak_rss_mb"] > 10
    # the first two losses do not depend on the schedule's length (the rate at step 0 is lr)
    eager = ns.main(small + ["--iterations", "2", "--eager"])
    np.testing.assert_allclose(eager["losses"], compiled["losses"][:2], rtol=1e-10)


def test_navier_stokes_misfit_restarts_each_window_and_its_gradient():
    """The misfit equals the mean over windows of separate simulations from each observation
    to the next; its gradient with respect to the force's coefficients (the force passed to
    the recompute_grad step as an argument) matches central differences and is the same
    with checkpoints=1; with the true force and no noise the misfit is zero to rounding."""
    ns = load("navier_stokes")
    n, every = 8, 3
    exact = ns.make_problem(n, 2 * every, every, noise=0.0, compiled=False)
    assert exact["observed"].shape == (3, 2, n, n)
    step, modes = exact["step"], tg.constant(ns.FORCING * exact["modes"])

    def loss(theta, observed, checkpoints=None):
        forcing = tg.tensordot(theta, modes, axes=1)
        return ns.misfit(step, forcing, tg.constant(observed), every, checkpoints)

    assert float(loss(tg.constant(exact["theta"]), exact["observed"])) < 1e-25
    observed = ns.make_problem(n, 2 * every, every, compiled=False)["observed"]  # noisy
    theta = tg.constant(0.5 * exact["theta"])
    forcing = tg.tensordot(theta, modes, axes=1)
    windows = [np.mean((ns.simulate(step, tg.constant(observed[j]), every,
                                    forcing=forcing).numpy() - observed[j + 1]) ** 2)
               for j in range(2)]
    np.testing.assert_allclose(float(loss(theta, observed)), np.mean(windows), rtol=1e-12)
    tg.test.check_gradients(lambda t: loss(t, observed), [theta])
    g = tg.grad(lambda t: loss(t, observed))(theta).numpy()
    assert np.abs(g).max() > 1e-6
    g1 = tg.grad(lambda t: loss(t, observed, checkpoints=1))(theta).numpy()
    np.testing.assert_allclose(g1, g, rtol=1e-10, atol=1e-18)


def test_navier_stokes_refuses_steps_not_a_multiple_of_every(capsys):
    ns = load("navier_stokes")
    with pytest.raises(SystemExit):
        ns.main(["--grid", "16", "--steps", "25", "--every", "10", "--out", ""])
    assert "--steps 25 is not a positive multiple of --every 10" in capsys.readouterr().err
    with pytest.raises(ValueError, match="steps=5 is not a positive multiple of every=10"):
        ns.make_problem(16, 5, 10)


@pytest.mark.skipif(tg._backend.default_namespace().__name__ == "array_api_strict",
                    reason="the example's constants are array_api_strict arrays, which do not "
                           "mix with tg.vmap's JAX tracers")
def test_navier_stokes_ensemble_of_viscosities_equals_separate_simulations():
    """One tg.vmap over three viscosities: the flows and the gradient of their mean square
    with respect to the shared initial flow equal three separate simulations' (float64)."""
    pytest.importorskip("jax")
    ns = load("navier_stokes")
    n, steps = 16, 5
    u0 = tg.constant(ns.initial_flow(n))
    nus = np.array([1e-3, 1e-2, 5e-2])
    flows = ns.ensemble(u0, nus, steps)
    loop = [ns.simulate(ns.make_step(n, nu=nu), u0, steps).numpy() for nu in nus]
    assert flows.shape == (3, 2, n, n)
    np.testing.assert_allclose(flows.numpy(), np.stack(loop), rtol=1e-8, atol=1e-12)
    assert np.abs(loop[0] - loop[2]).max() > 0.1  # the viscosities give other flows
    grad = tg.grad(lambda u: tg.mean(ns.ensemble(u, nus, steps) ** 2))(u0)
    want = tg.grad(lambda u: sum(tg.mean(ns.simulate(ns.make_step(n, nu=nu), u, steps) ** 2)
                                 for nu in nus) / 3.0)(u0)
    np.testing.assert_allclose(grad.numpy(), want.numpy(), rtol=1e-8, atol=1e-14)


def test_navier_stokes_writes_its_picture(tmp_path):
    pytest.importorskip("matplotlib")
    ns = load("navier_stokes")
    out = tmp_path / "flow.png"
    result = ns.main(["--grid", "16", "--steps", "2", "--every", "1", "--iterations", "2",
                      "--eager", "--out", str(out)])
    assert result["losses"][1] < result["losses"][0]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "compiled"])
def test_navier_stokes_with_checkpoints_trains_as_without(eager):
    # --checkpoints 2 over 6 steps: the gradient replays the steps on the binomial schedule,
    # so the Adam iterates are the ones of the run that keeps every step's velocity
    if not eager:
        pytest.importorskip("jax")
    ns = load("navier_stokes")
    flags = ["--grid", "16", "--steps", "6", "--every", "3", "--iterations", "3", "--out", "",
             *(["--eager"] if eager else [])]
    plain, checkpointed = ns.main(flags), ns.main([*flags, "--checkpoints", "2"])
    np.testing.assert_allclose(checkpointed["losses"], plain["losses"], rtol=1e-10)
    assert checkpointed["losses"][-1] < checkpointed["losses"][0]


def test_dp_sgd_digits_per_example_gradients_clipping_and_accuracy():
    pytest.importorskip("sklearn")
    out = load("dp_sgd_digits").main(epochs=3)
    assert out["per_example_max_error"] < 1e-5  # tg.vmap(tg.grad) == a loop of tape.gradient
    norms = out["clipped_norms"]
    assert norms.shape == (64,) and np.all(norms <= 1.0 + 1e-5) and np.any(norms > 0.99)
    assert out["accuracy"] > 0.8  # 3 noisy epochs already learn the digits
