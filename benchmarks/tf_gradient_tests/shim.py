"""The TensorFlow under test and a tiny stand-in for tf.test.TestCase.

``TG_TF=tensorflow`` runs the tests on real TensorFlow; anything else (the default) on
``tapegrad.compat.tensorflow``. The tests restate TensorFlow's own unit tests of its gradient
machinery (each test names the TensorFlow test it comes from) with public TF 2 API only.
"""
import os
import unittest

import numpy as np

if os.environ.get("TG_TF", "tapegrad") == "tensorflow":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf  # noqa: F401
else:
    import tapegrad.compat.tensorflow as tf  # noqa: F401


def _np(x):
    """Nested structure of tensors/variables -> the same structure of NumPy values."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return type(x)(_np(v) for v in x)
    if isinstance(x, dict):
        return {k: _np(v) for k, v in x.items()}
    if hasattr(x, "numpy"):
        return np.asarray(x.numpy())
    return x


class TestCase(unittest.TestCase):
    """assertAllClose / assertAllEqual / evaluate as in tf.test.TestCase (eager only)."""

    def evaluate(self, x):
        return _np(x)

    def assertAllClose(self, a, b, rtol=1e-6, atol=1e-6):
        a, b = _np(a), _np(b)
        if isinstance(a, dict):
            self.assertEqual(sorted(a), sorted(b))
            for k in a:
                self.assertAllClose(a[k], b[k], rtol, atol)
            return
        if isinstance(a, (list, tuple)) and not all(isinstance(v, (int, float)) for v in a):
            self.assertEqual(len(a), len(b))
            for u, v in zip(a, b):
                self.assertAllClose(u, v, rtol, atol)
            return
        if a is None or b is None:
            self.assertIs(a, b)
            return
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                                   rtol=rtol, atol=atol)

    def assertAllEqual(self, a, b):
        a, b = _np(a), _np(b)
        if a is None or b is None:
            self.assertIs(a, b)
            return
        if isinstance(a, (list, tuple)) and any(v is None for v in a):
            self.assertEqual(len(a), len(b))
            for u, v in zip(a, b):
                self.assertAllEqual(u, v)
            return
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
