"""Runnable demonstrations of tapegrad.

- :mod:`tapegrad.examples.digits`: train a small MLP with custom-gradient ops on scikit-learn's
  handwritten digits (``python -m tapegrad.examples.digits``). Needs the ``examples`` extra
  (scikit-learn, matplotlib; tqdm optional).

Short scripts reproducing the TensorFlow 2 custom-gradient patterns one at a time live in the
repository's top-level ``examples/`` folder.
"""

__all__: list[str] = []
