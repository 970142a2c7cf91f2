"""Optimizers with Keras 3's names, arguments and update formulas: one base class, one short
class per algorithm.

Updates run on backend arrays (optimizers are not differentiated through) and rebind each
Variable's array through ``assign``/``assign_sub`` (never mutating it in place, so a tape that
recorded the old value still differentiates at it). All state is held in Variables, as in
Keras 3: ``iterations`` and the per-variable slots (keyed by the Variable's ``_id``, since
Tensors are unhashable), created on the first step. So ``tg.function`` lifts an optimizer's
state like a model's weights, and a compiled training step updates it exactly as an eager one.
"""
from __future__ import annotations

import warnings

import numpy as np

from . import _backend
from ._backend import namespace as _ns
from ._tape import GradientTape
from ._tensor import Tensor, Variable

__all__ = ["Optimizer", "SGD", "Adam"]


class Optimizer:
    """Base class: validates ``(gradient, variable)`` pairs and calls ``_update`` for each.

    Args:
        learning_rate: a float, or a callable schedule ``step -> float`` called before each
            step with the current ``iterations`` as a 0-d float64 Tensor (as Keras 3 calls a
            schedule with its step; a Tensor, so that it works in compiled functions too).
        name: a label.

    Attributes: ``iterations``, the number of steps applied (an int64 Variable, starting at
    0). A subclass implements ``_update(variable, value, gradient, learning_rate)`` on backend
    arrays (``value`` is the variable's current array, ``gradient`` an array of its shape and
    dtype, ``learning_rate`` a float or a 0-d array) and keeps its per-variable state in
    Variables made by ``_slot(variable, name)``.
    """

    def __init__(self, learning_rate, name=None):
        if not (callable(learning_rate) or isinstance(learning_rate, (int, float))):
            raise TypeError(f"{type(self).__name__}: learning_rate must be a float or a callable "
                            f"schedule step -> float, got {type(learning_rate).__name__}")
        self.learning_rate = learning_rate
        self.name = name or type(self).__name__
        self.iterations = Variable(np.int64(0), trainable=False, name=f"{self.name}/iterations")
        self._slots = {}

    def _current_learning_rate(self):
        lr = self.learning_rate
        if not callable(lr):
            return lr
        step = self.iterations._value
        lr = lr(Tensor(_ns(step).asarray(step, dtype=_ns(step).float64)))
        return lr._value if isinstance(lr, Tensor) else lr

    def _slot(self, variable, name):
        """The slot ``name`` of ``variable`` (a Variable of its shape and dtype, starting at 0)."""
        slots = self._slots.setdefault(variable._id, {})
        if name not in slots:
            value = variable._value
            slots[name] = Variable(_ns(value).zeros_like(value), trainable=False,
                                   name=f"{self.name}/{variable.name}/{name}")
        return slots[name]

    def apply_gradients(self, grads_and_vars):
        """Apply one step to each Variable from its gradient; return ``iterations`` after it.

        ``grads_and_vars``: an iterable of ``(gradient, variable)`` pairs, e.g.
        ``zip(grads, variables)``; a gradient is a Tensor or backend array of the variable's
        shape (cast to its dtype if needed). ``None`` gradients are skipped with a
        ``UserWarning`` naming the variables. ``iterations`` is incremented once and returned.
        Lazy gradients (Dask) are evaluated together, in one graph, before any update.

        Raises ``TypeError`` if a target is not a Variable, ``ValueError`` if a gradient's
        shape differs from its variable's or if every gradient is ``None``. Nothing is
        updated when an error is raised.
        """
        pairs = []
        missing = []
        for g, v in grads_and_vars:
            if not isinstance(v, Variable):
                raise TypeError(f"{self.name}.apply_gradients: expected (gradient, Variable) "
                                f"pairs, got a {type(v).__name__} as the variable; only "
                                "tg.Variable can be updated")
            if g is None:
                missing.append(v.name)
                continue
            value = v._value
            if isinstance(g, Tensor):
                g = g._value
            elif type(g) is not type(value):  # a list, or an array of another library
                g = _backend.asarray(g, xp=_ns(value))
            if g.shape != value.shape:
                raise ValueError(f"{self.name}.apply_gradients: the gradient for Variable "
                                 f"{v.name!r} has shape {tuple(g.shape)} but the variable has "
                                 f"shape {tuple(value.shape)}; gradients must have their "
                                 "variable's shape (check the order of the pairs)")
            if g.dtype != value.dtype:
                g = _ns(value).astype(g, value.dtype)  # same library: dtypes compare
            pairs.append((v, value, g))
        if missing:
            if not pairs:
                raise ValueError(f"{self.name}.apply_gradients: no gradients provided for any "
                                 f"variable (all are None for {missing}); check that the loss "
                                 "depends on the variables and was computed on a GradientTape")
            warnings.warn(f"{self.name}.apply_gradients: gradients do not exist for variables "
                          f"{missing} when minimizing the loss; they are not updated",
                          UserWarning, stacklevel=2)
        gs = _backend.materialize([g for _, _, g in pairs], [value for _, value, _ in pairs])
        pairs = [(v, value, g) for (v, value, _), g in zip(pairs, gs)]  # lazy ones: one graph
        lr = self._current_learning_rate()
        update = self._update
        for v, value, g in pairs:
            update(v, value, g, lr)
        self.iterations.assign_add(1)
        return self.iterations

    def minimize(self, loss, var_list, tape=None):
        """Compute the gradients of ``loss`` wrt ``var_list`` and apply them; returns None.

        ``loss``: a zero-argument callable returning a scalar floating Tensor, run on a new
        :class:`GradientTape`; or a Tensor recorded on ``tape`` (as in Keras/TF 2).
        ``var_list``: a list of Variables, or a zero-argument callable returning one.
        Raises ``TypeError`` for a Tensor loss without ``tape``.
        """
        if tape is None:
            if not callable(loss):
                raise TypeError(f"{self.name}.minimize: loss must be a zero-argument callable "
                                "returning the loss, or a Tensor together with the GradientTape "
                                "that recorded it (tape=...)")
            with GradientTape() as tape:
                loss = loss()
        if callable(var_list):
            var_list = var_list()
        var_list = list(var_list)
        grads = tape.gradient(loss, var_list)
        self.apply_gradients(zip(grads, var_list))

    def _update(self, variable, value, gradient, learning_rate):
        raise NotImplementedError(f"{type(self).__name__} must implement _update")


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum, Keras 3's update.

    ``momentum == 0``: ``w -= lr * g``. Otherwise, with velocity ``m`` (starting at 0):
    ``m = momentum * m - lr * g``, then ``w += m``, or with ``nesterov=True``
    ``w += momentum * m - lr * g``. Raises ``ValueError`` unless ``0 <= momentum <= 1``.
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD"):
        super().__init__(learning_rate, name)
        if not isinstance(momentum, (int, float)) or not 0.0 <= momentum <= 1.0:
            raise ValueError(f"SGD: momentum must be a float in [0, 1], got {momentum!r}")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)

    def _update(self, variable, value, g, lr):
        step = lr * g
        if self.momentum == 0.0:
            variable.assign_sub(step)
            return
        velocity = self._slot(variable, "momentum")
        m = self.momentum * velocity._value - step
        velocity.assign(m)
        variable.assign_add(self.momentum * m - step if self.nesterov else m)


class Adam(Optimizer):
    """Adam (Kingma & Ba 2014) with Keras 3's update, ``t = iterations + 1``:

    ``alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)``; ``m += (g - m) * (1 - beta_1)``;
    ``v += (g^2 - v) * (1 - beta_2)``; ``w -= m * alpha / (sqrt(v) + epsilon)``, with ``m`` and
    ``v`` starting at 0. ``epsilon`` is Keras's "epsilon hat" (added outside the square root).
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 name="Adam"):
        super().__init__(learning_rate, name)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)

    def _update(self, variable, value, g, lr):
        xp = _ns(value)
        t = xp.asarray(self.iterations._value + 1, dtype=value.dtype)
        alpha = lr * xp.sqrt(1.0 - self.beta_2 ** t) / (1.0 - self.beta_1 ** t)
        m_slot, v_slot = self._slot(variable, "m"), self._slot(variable, "v")
        m, v = m_slot._value, v_slot._value
        m = m + (g - m) * (1.0 - self.beta_1)
        v = v + (g * g - v) * (1.0 - self.beta_2)
        m_slot.assign(m)
        v_slot.assign(v)
        variable.assign_sub(m * alpha / (xp.sqrt(v) + self.epsilon))
