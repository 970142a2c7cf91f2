"""Learning-rate schedules, ``tg.optimizers.schedules``: Keras 3's names, arguments and formulas
(keras/src/optimizers/schedules/learning_rate_schedule.py).

A schedule is a callable ``step -> learning rate``. An optimizer calls it before each step with
its ``iterations`` as a 0-d float64 Tensor; a Python number works too. The result is a 0-d
float64 Tensor. Schedules are written in tapegrad ops without Python branches on the step
(``where`` instead of ``if``), so they run inside ``tg.function`` on a traced step.
"""
from __future__ import annotations

import math

import numpy as np

from .._backend import np_dtype
from .._tensor import Tensor
from ..ops.creation import convert_to_tensor
from ..ops import astype, ceil, cos, floor, full_like, minimum, where

__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay",
           "PolynomialDecay", "InverseTimeDecay", "CosineDecay", "serialize", "deserialize"]


def _step(step):
    """The step as a 0-d float64 Tensor (Keras casts it to the learning rate's dtype)."""
    if not isinstance(step, Tensor):
        step = convert_to_tensor(step)
    return step if np_dtype(step.dtype) == np.float64 else astype(step, np.float64)


def _positive(owner, name, value):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{owner}: argument `{name}` must be > 0. Received: {name}={value!r}")
    return value


class LearningRateSchedule:
    """Base class of learning-rate schedules, Keras 3's ``LearningRateSchedule``.

    A subclass implements ``__call__(step)`` (``step``: a 0-d Tensor or a number; returns the
    learning rate, a 0-d Tensor) with tapegrad ops and no Python branch on ``step``, and
    ``get_config()`` returning its constructor arguments, so that ``from_config`` and
    :func:`deserialize` can rebuild it. Calling the base class raises
    ``NotImplementedError``.
    """

    def __call__(self, step):
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must "
                                  "override `__call__(self, step)`")

    def get_config(self):
        """The constructor arguments as a dict (Keras's ``get_config``), which
        :meth:`from_config` takes back. Raises ``NotImplementedError`` in the base class."""
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must "
                                  "override `get_config()` in order to be serializable")

    @classmethod
    def from_config(cls, config):
        """A schedule from the dict :meth:`get_config` returns."""
        return cls(**config)


class _RateDecay(LearningRateSchedule):
    """Shared by the schedules of ``(initial_learning_rate, decay_steps, decay_rate,
    staircase)``: ``_progress(step)`` is ``step / decay_steps``, floored if ``staircase``."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                 name=None):
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = _positive(type(self).__name__, "decay_steps", decay_steps)
        self.decay_rate = decay_rate
        self.staircase = bool(staircase)
        self.name = name or type(self).__name__

    def _progress(self, step):
        p = _step(step) / float(self.decay_steps)
        return floor(p) if self.staircase else p

    def get_config(self):
        """The constructor arguments, as :meth:`LearningRateSchedule.get_config`."""
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class ExponentialDecay(_RateDecay):
    """``initial_learning_rate * decay_rate ^ (step / decay_steps)``; with ``staircase=True``
    the exponent is ``floor(step / decay_steps)``.

    Args: ``initial_learning_rate`` (float), ``decay_steps`` (> 0), ``decay_rate`` (float),
    ``staircase`` (bool), ``name``. Raises ``ValueError`` if ``decay_steps <= 0``.
    """

    def __call__(self, step):
        return float(self.initial_learning_rate) * float(self.decay_rate) ** self._progress(step)


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, ``values[-1]`` after ``boundaries[-1]``.

    Args: ``boundaries`` (strictly increasing numbers), ``values`` (one more number than
    ``boundaries``), ``name``. Raises ``ValueError`` if the lengths do not fit (as Keras) or the
    boundaries do not increase strictly.
    """

    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        boundaries, values = list(boundaries), list(values)
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                "PiecewiseConstantDecay: the length of boundaries should be 1 less than the "
                f"length of values. Received: boundaries={boundaries} of length "
                f"{len(boundaries)}, and values={values} of length {len(values)}.")
        if any(b >= c for b, c in zip(boundaries, boundaries[1:])):
            raise ValueError("PiecewiseConstantDecay: boundaries must be strictly increasing. "
                             f"Received: boundaries={boundaries}")
        self.boundaries = boundaries
        self.values = values
        self.name = name

    def __call__(self, step):
        step = _step(step)
        result = full_like(step, float(self.values[-1]))
        for b, v in zip(reversed(self.boundaries), reversed(self.values[:-1])):
            result = where(step <= float(b), float(v), result)
        return result

    def get_config(self):
        """The constructor arguments, as :meth:`LearningRateSchedule.get_config`."""
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """From ``initial_learning_rate`` to ``end_learning_rate`` in ``decay_steps`` steps:
    ``(initial - end) * (1 - s / decay_steps) ^ power + end`` with ``s = min(step,
    decay_steps)``; with ``cycle=True`` the decay restarts: ``decay_steps`` is multiplied by
    ``ceil(step / decay_steps)`` (1 at step 0) and ``s = step``.

    Args: ``initial_learning_rate``, ``decay_steps`` (> 0), ``end_learning_rate`` (default
    1e-4), ``power`` (default 1), ``cycle`` (bool), ``name``. Raises ``ValueError`` if
    ``decay_steps <= 0``.
    """

    def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0,
                 cycle=False, name="PolynomialDecay"):
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = _positive(type(self).__name__, "decay_steps", decay_steps)
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = bool(cycle)
        self.name = name

    def __call__(self, step):
        step = _step(step)
        decay_steps = float(self.decay_steps)
        if self.cycle:
            decay_steps = decay_steps * where(step == 0.0, 1.0, ceil(step / decay_steps))
        else:
            step = minimum(step, decay_steps)
        end = float(self.end_learning_rate)
        return (float(self.initial_learning_rate) - end) * (
            1.0 - step / decay_steps) ** float(self.power) + end

    def get_config(self):
        """The constructor arguments, as :meth:`LearningRateSchedule.get_config`."""
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "end_learning_rate": self.end_learning_rate,
                "power": self.power, "cycle": self.cycle, "name": self.name}


class InverseTimeDecay(_RateDecay):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)``; with
    ``staircase=True`` ``step / decay_steps`` is floored.

    Args: ``initial_learning_rate``, ``decay_steps`` (> 0), ``decay_rate``, ``staircase``,
    ``name``. Raises ``ValueError`` if ``decay_steps <= 0``.
    """

    def __call__(self, step):
        return float(self.initial_learning_rate) / (
            1.0 + float(self.decay_rate) * self._progress(step))


class CosineDecay(LearningRateSchedule):
    """Cosine decay (Loshchilov & Hutter 2017, "SGDR: Stochastic Gradient Descent with Warm
    Restarts", without restarts) after an optional linear warmup (Goyal et al. 2017,
    "Accurate, Large Minibatch SGD").

    Without ``warmup_target``: ``lr0 * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps))
    + alpha)`` with ``lr0 = initial_learning_rate`` and ``s = min(step, decay_steps)``. With
    ``warmup_target``: for ``step < warmup_steps`` the rate rises linearly,
    ``initial_learning_rate + (warmup_target - initial_learning_rate) * step /
    warmup_steps``; afterwards it is the decay above with ``lr0 = warmup_target`` and
    ``s = min(step, warmup_steps + decay_steps) - warmup_steps``.

    Args: ``initial_learning_rate``, ``decay_steps`` (> 0), ``alpha`` (the final rate as a
    fraction of ``lr0``, default 0), ``name``, ``warmup_target`` (``None`` for no warmup),
    ``warmup_steps`` (>= 0). Raises ``ValueError`` if ``decay_steps <= 0`` or
    ``warmup_steps < 0``.
    """

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay",
                 warmup_target=None, warmup_steps=0):
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = _positive(type(self).__name__, "decay_steps", decay_steps)
        self.alpha = alpha
        self.name = name
        if not isinstance(warmup_steps, (int, float)) or warmup_steps < 0:
            raise ValueError(f"CosineDecay: argument `warmup_steps` must be >= 0. Received: "
                             f"warmup_steps={warmup_steps!r}")
        self.warmup_target = warmup_target
        self.warmup_steps = warmup_steps

    def _decay(self, s, lr0):
        cosine = 0.5 * (1.0 + cos(math.pi * (s / float(self.decay_steps))))
        return lr0 * ((1.0 - self.alpha) * cosine + self.alpha)

    def __call__(self, step):
        step = _step(step)
        initial, decay_steps = float(self.initial_learning_rate), float(self.decay_steps)
        if self.warmup_target is None:
            return self._decay(minimum(step, decay_steps), initial)
        target, warmup = float(self.warmup_target), float(self.warmup_steps)
        step = minimum(step, decay_steps + warmup)
        # with no warmup steps the rising branch is never taken: divide by 1, not 0
        rising = (target - initial) * (step / (warmup if warmup > 0 else 1.0)) + initial
        return where(step < warmup, rising, self._decay(step - warmup, target))

    def get_config(self):
        """The constructor arguments, as :meth:`LearningRateSchedule.get_config`."""
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}


_BUILT_IN = {c.__name__: c for c in (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay,
                                     InverseTimeDecay, CosineDecay)}


def serialize(schedule):
    """``{"class_name": ..., "config": schedule.get_config()}``, a JSON-compatible dict (Keras's
    ``serialize``, without its module fields). Raises ``TypeError`` for a schedule that is not
    a :class:`LearningRateSchedule`."""
    if not isinstance(schedule, LearningRateSchedule):
        raise TypeError(f"schedules.serialize: expected a LearningRateSchedule, got "
                        f"{type(schedule).__name__}")
    return {"class_name": type(schedule).__name__, "config": schedule.get_config()}


def deserialize(config, custom_objects=None):
    """The schedule :func:`serialize` described. ``custom_objects`` maps the class names of
    user-defined schedules to their classes. Raises ``ValueError`` for an unknown class name."""
    classes = {**_BUILT_IN, **(custom_objects or {})}
    name = config.get("class_name")
    if name not in classes:
        raise ValueError(f"schedules.deserialize: unknown schedule class {name!r}; built-in "
                         f"ones are {sorted(_BUILT_IN)}, pass others in custom_objects")
    return classes[name].from_config(config["config"])
