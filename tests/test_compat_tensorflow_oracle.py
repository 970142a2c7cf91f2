"""``tapegrad.compat.tensorflow`` against real TensorFlow 2.21's outputs, recorded by
``tests/tf_oracle/record.py`` in ``tests/tf_oracle/values.npz`` and ``prints.json`` (the
cases are ``tests/tf_oracle/cases.py``; TensorFlow is not needed here). Values, shapes and
dtypes must match (floats to float32 or float64 rounding)."""
import importlib.util
import json
import os

import numpy as np
import pytest

import tapegrad.compat.tensorflow as tf

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_oracle")
_spec = importlib.util.spec_from_file_location("tf_oracle_cases", os.path.join(HERE, "cases.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)
RECORDED = dict(np.load(os.path.join(HERE, "values.npz")))
with open(os.path.join(HERE, "prints.json")) as _f:
    PRINTS = json.load(_f)["prints"]


def _outputs(result):
    items = result if isinstance(result, (list, tuple)) else (result,)
    return [np.asarray(x.numpy() if hasattr(x, "numpy") else x) for x in items]


def test_every_case_was_recorded():
    recorded = {key.split("/")[0] for key in RECORDED if key != "_version"}
    assert recorded == set(cases.CASES)
    assert str(RECORDED["_version"]).startswith("2.")


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_matches_tensorflow(name):
    ours = _outputs(cases.CASES[name](tf))
    theirs = [RECORDED[f"{name}/{k}"] for k in range(len(ours))]
    assert f"{name}/{len(ours)}" not in RECORDED, "TensorFlow gave more outputs"
    for k, (a, b) in enumerate(zip(ours, theirs)):
        where = f"{name} output {k}"
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype}, TensorFlow {b.dtype}"
        assert a.shape == b.shape, f"{where}: shape {a.shape}, TensorFlow {b.shape}"
        if a.dtype.kind in "fc":
            tol = 1e-5 if a.dtype in (np.float32, np.complex64) else 1e-12
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max(
                initial=0.0)), err_msg=where)
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)


@pytest.mark.parametrize("name", sorted(PRINTS))
def test_print_matches_tensorflow(name, tmp_path):
    path = tmp_path / "out.txt"
    tf.print(*cases.PRINTS[name](tf), output_stream=f"file://{path}")
    assert path.read_text() == PRINTS[name]
