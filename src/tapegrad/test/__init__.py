"""Gradient checking: compare tape gradients with central finite differences.

* :func:`compute_gradient` — TensorFlow 2's ``tf.test.compute_gradient``: the full theoretical
  (reverse-mode) and numerical (central-difference) Jacobians, in TensorFlow 2's layout.
* :func:`compute_gradient_error` — the largest absolute difference between the two (the
  TensorFlow 1 helper of that name, for code written against it).
* :func:`check_gradients` — the checker to use in tests: first, second (or higher) order, in
  float64, fast (one random projection per input and order), with an ``AssertionError`` that
  explains itself on failure: the worst Jacobian elements in a table, kinks flagged, the
  promotion to float64 and the step said, and any custom gradient at fault named.
* :func:`check_custom_gradient` — the contract of each ``custom_gradient`` call and
  user-registered op that a function runs: one gradient per input of the right shape and
  dtype, linear in the upstream gradient, equal to the derivative of the op's forward (unless
  declared ``surrogate=True``, then reported only). ``check_gradients`` runs it too.
* :func:`samples` — declare sample inputs of a ``custom_gradient`` function, on which
  ``python -m tapegrad check`` checks it.

The checks run on NumPy copies of the inputs (values of other backends are converted with
``Tensor.numpy()``). Complex inputs are not supported yet.
"""
from ._check import check_gradients
from ._contract import check_custom_gradient
from ._declare import samples
from ._finite_differences import compute_gradient, compute_gradient_error
from ._report import CustomGradientReport, OpCheck, SurrogateGradientWarning

__all__ = ["compute_gradient", "compute_gradient_error", "check_gradients",
           "check_custom_gradient", "CustomGradientReport", "OpCheck",
           "SurrogateGradientWarning", "samples"]

for _name in __all__:  # shown as tapegrad.test.<name> (reprs, warnings, pickles)
    globals()[_name].__module__ = __name__
del _name
