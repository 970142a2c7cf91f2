"""Tape leaks: a warning when a Tensor that a tape traces leaves for NumPy or another library.

``Tensor.__array__`` and ``__dlpack__`` call the core's extension point ``conversion``, which
this module provides: when a recording tape traces the tensor (or would watch it: a trainable
Variable under a tape that watches accessed variables) or a forward accumulator gives it a
tangent, what is computed from the NumPy array carries no gradient, so it warns
(:class:`~tapegrad.errors.TapeLeakWarning`) at the user's line and notes the site on the tapes
for ``tape.explain``. :func:`_site` (the first frame outside tapegrad, NumPy and installed
libraries) also places ``tg.function``'s warnings.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import warnings

from ._records import _state
from ._structural import extend
from ._variables import Variable
from .errors import TapeLeakWarning

_OWN_DIRS = tuple(p for p in {  # tapegrad's and NumPy's frames: never a conversion's site
    os.path.dirname(os.path.dirname(__file__)),
    getattr(sys.modules.get("numpy"), "__path__", [""])[0]} if p)
_LIBRARY_DIRS = tuple(p for p in {  # installed libraries (SciPy...) and the standard library
    *(sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")),
    os.path.dirname(os.__file__)} if p)


def _losers(t) -> tuple:
    """``(tapes, accumulators)`` of this thread that lose ``t`` when it leaves for NumPy: the
    recording tapes that trace it (or would watch it: a trainable Variable under a tape that
    watches accessed variables) and the forward accumulators where it has a tangent."""
    i = t._id
    tapes, accumulators = [], []
    for tape in _state.tapes:
        if tape._observer:
            if i in getattr(tape, "_tangents", ()):
                accumulators.append(tape)
        elif i in tape._watched or (tape._watch_vars and isinstance(t, Variable)
                                    and t.trainable):
            tapes.append(tape)
    return tapes, accumulators


def _site(frame) -> tuple:
    """``(frame, level, via)``: the first frame from ``frame`` outward that is outside
    tapegrad, NumPy and installed libraries (the user's line) and its ``warnings.warn``
    stack level as seen from ``frame``, and ``"file:line"`` of the library frame in between,
    if one was (``None`` when the user's line called directly). Also used by ``_function``
    for its warnings."""
    level, via = 1, None
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_OWN_DIRS):
            if not name.startswith(_LIBRARY_DIRS):
                break
            if via is None:
                via = f"{name}:{frame.f_lineno}"
        frame, level = frame.f_back, level + 1
    return frame, level, via


def note_conversion(t, how="converted to a NumPy array"):
    """Called by ``Tensor.__array__`` and ``__dlpack__`` (``how`` it leaves): a tensor that a
    recording tape traces (or a forward accumulator gives a tangent) is leaving for NumPy or
    another library, where neither sees it. Warn once per call site in the user's code (the first frame outside
    tapegrad, NumPy and installed libraries such as SciPy, which is named as well) and note the
    site on the tapes, for ``tape.explain``."""
    if _state.grad_op is not None or len(_state.tapes) == 0:
        return
    tapes, accumulators = _losers(t)
    if not tapes and not accumulators:
        return
    frame, level, via = _site(sys._getframe(1))
    site = (f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None
            else via or "an unknown place")
    for tape in tapes:
        tape._conversions.setdefault(t._id, site)
    what = ("that a recording GradientTape traces" if tapes and not accumulators else
            "that a ForwardAccumulator gives a tangent" if not tapes else
            "that a recording GradientTape traces and a ForwardAccumulator gives a tangent")
    lost = ("no gradient" if not accumulators else "no JVP" if not tapes
            else "no gradient and no JVP")
    inside = f" (inside {via})" if via is not None and frame is not None else ""
    warnings.warn(
        f"a {type(t).__name__} of shape {t.shape} {what} was {how} at {site}{inside}; what "
        f"is computed from that array carries {lost} (a library that "
        "computes with NumPy leaves the tape there, and tape.gradient returns None for it). "
        "Use tapegrad functions (an Array API namespace) for a differentiable result, wrap the "
        "NumPy code in a tg.custom_gradient that gives its gradient, or convert with "
        "t.numpy() if you mean to leave the tape", TapeLeakWarning, stacklevel=level + 1)


extend(conversion=note_conversion)
