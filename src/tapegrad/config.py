"""Process-wide switches (``tg.config``), with TensorFlow 2's names."""
from __future__ import annotations

_run_eagerly = False


def run_functions_eagerly(run_eagerly: bool) -> None:
    """Make every ``tg.function`` run its Python function eagerly (``True``) or compile it
    again (``False``), as ``tf.config.run_functions_eagerly``: for debugging with prints and
    breakpoints. Raises ``TypeError`` for a non-bool."""
    global _run_eagerly
    if not isinstance(run_eagerly, bool):
        raise TypeError(f"run_functions_eagerly: expected True or False, got {run_eagerly!r}")
    _run_eagerly = run_eagerly


def functions_run_eagerly() -> bool:
    """Whether :func:`run_functions_eagerly` is on."""
    return _run_eagerly
