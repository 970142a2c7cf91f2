"""Real Array API consumers on Tensors: SciPy's ``logsumexp`` and scikit-learn's ``r2_score``
compute on Tensors and are differentiable through them.

SciPy reads ``SCIPY_ARRAY_API=1`` once, when it is first imported, so each check runs in a fresh
interpreter with that variable set (another test importing SciPy first cannot break it). The
child inherits ``TAPEGRAD_ARRAY_BACKEND``, so the checks run on the backend of the suite.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import tapegrad as tg


def run_with_array_api(code: str) -> None:
    """Run ``code`` in a fresh Python with ``SCIPY_ARRAY_API=1`` and this tapegrad importable;
    fail with the child's output if it fails."""
    src = str(pathlib.Path(tg.__file__).resolve().parents[1])
    env = {**os.environ, "SCIPY_ARRAY_API": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the child failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip().endswith("ok"), proc.stdout


def test_scipy_logsumexp_on_tensors_has_the_softmax_as_gradient():
    pytest.importorskip("scipy")
    run_with_array_api("""
        import numpy as np
        import tapegrad as tg
        from scipy.special import entr, logsumexp, softmax

        rng = np.random.default_rng(0)
        xn = rng.normal(size=(3, 4))
        for axis in (None, 0, 1, -1, (0, 1)):
            x = tg.constant(xn)
            with tg.GradientTape() as tape:
                tape.watch(x)
                y = logsumexp(x, axis=axis)
            assert isinstance(y, tg.Tensor), type(y)
            np.testing.assert_allclose(y.numpy(), logsumexp(xn, axis=axis), rtol=1e-13)
            # d logsumexp(x)/dx = softmax(x) over the reduced axes
            np.testing.assert_allclose(tape.gradient(y, x).numpy(), softmax(xn, axis=axis),
                                       rtol=1e-12)
            np.testing.assert_array_equal(x.numpy(), xn)  # the input is not changed

        # weights b: d/dx log sum b exp(x) = b exp(x) / sum b exp(x)
        b = np.array([1.0, 0.0, 2.0, 0.5])
        x = tg.constant(xn)
        with tg.GradientTape() as tape:
            tape.watch(x)
            y = logsumexp(x, axis=1, b=tg.constant(b))
        np.testing.assert_allclose(y.numpy(), logsumexp(xn, axis=1, b=b), rtol=1e-13)
        e = b * np.exp(xn)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), e / e.sum(1, keepdims=True),
                                   rtol=1e-12)
        tg.test.check_gradients(lambda a: logsumexp(a, axis=0), [xn], order=2)

        # not differentiable through SciPy, but it computes
        p = np.array([0.0, 0.5, 1.0, 2.0])
        np.testing.assert_allclose(np.asarray(entr(tg.constant(p))), entr(p))
        print("ok")
    """)


def test_sklearn_r2_score_on_tensors_is_differentiable_in_y_pred():
    pytest.importorskip("scipy")
    pytest.importorskip("sklearn")
    run_with_array_api("""
        import numpy as np
        import sklearn
        import tapegrad as tg
        from sklearn.metrics import r2_score

        rng = np.random.default_rng(1)
        yt, yp = rng.normal(size=(8, 2)), rng.normal(size=(8, 2))
        with sklearn.config_context(array_api_dispatch=True):
            # one output: scikit-learn returns float(score), a Python float (no gradient)
            r = r2_score(tg.constant(yt[:, 0]), tg.constant(yp[:, 0]))
            assert abs(r - r2_score(yt[:, 0], yp[:, 0])) < 1e-13

            t, p = tg.constant(yt), tg.constant(yp)
            with tg.GradientTape() as tape:
                tape.watch(p)
                r = r2_score(t, p, multioutput="raw_values")  # the Tensor of scores
            assert isinstance(r, tg.Tensor) and r.shape == (2,)
            np.testing.assert_allclose(r.numpy(), r2_score(yt, yp, multioutput="raw_values"),
                                       rtol=1e-13)
            # r_j = 1 - SS_res_j / SS_tot_j: dr_j/dp_ij = 2 (t_ij - p_ij) / SS_tot_j
            ss_tot = np.sum((yt - yt.mean(axis=0)) ** 2, axis=0)
            np.testing.assert_allclose(tape.gradient(r, p).numpy(), 2 * (yt - yp) / ss_tot,
                                       rtol=1e-12)
            tg.test.check_gradients(
                lambda q: r2_score(t, q, multioutput="raw_values") * tg.constant([1.0, 2.0]),
                [yp])
        print("ok")
    """)
