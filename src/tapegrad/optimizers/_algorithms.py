"""Optimizers with Keras 3's names, arguments and update formulas: one base class, one short
class per algorithm (the formulas of keras/src/optimizers/*.py, written out in each docstring).

Updates run on backend arrays (optimizers are not differentiated through) and rebind each
Variable's array through ``assign``/``assign_sub`` (never mutating it in place, so a tape that
recorded the old value still differentiates at it). All state is held in Variables, as in
Keras 3: ``iterations``, the learning rate (when it is a number) and the per-variable slots
(keyed by the Variable's ``_id``, since Tensors are unhashable), created on the first step or
by ``build``. So ``tg.function`` lifts an optimizer's state like a model's weights, and a
compiled training step updates it exactly as an eager one.
"""
from __future__ import annotations

import inspect
import math
import re
import warnings

import numpy as np

from .. import _backend, config
from .._backend import kernel as _kernel
from .._backend import namespace as _ns
from .._tape import GradientTape
from .._tensor import Tensor
from ..ops.creation import convert_to_tensor
from .._variables import Variable
from . import schedules as _schedules

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Nadam", "Lion"]


def _takes_no_step(fn) -> bool:
    """True for a learning-rate callable of no arguments (Keras 3 takes one), False for a
    schedule ``step -> rate``."""
    if isinstance(fn, _schedules.LearningRateSchedule):
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: a schedule, as before
        return False
    return not any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                   for p in params)


def _like(x, value):
    """``x`` (a Python number or 0-d backend array) as a 0-d array of ``value``'s library and
    dtype, as Keras casts the learning rate and step to each variable's dtype."""
    xp = _ns(value)
    if isinstance(x, (int, float)):
        return xp.asarray(x, dtype=value.dtype)
    if type(x) is type(value):
        return x if x.dtype == value.dtype else xp.astype(x, value.dtype)
    return _backend.asarray(x, dtype=value.dtype, xp=xp)


def _number(owner, name, value, low=-math.inf, high=math.inf, low_open=False, high_open=False):
    """``value`` as a float after checking that it is a real number in the given interval."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = (low < value if low_open else low <= value) and (
            value < high if high_open else value <= high)
    if not ok:
        interval = ("(" if low_open else "[") + f"{low}, {high}" + (")" if high_open else "]")
        raise ValueError(f"{owner}: {name} must be a float in {interval}, got {value!r}")
    return value


class Optimizer:
    """Base class, Keras 3's ``keras.optimizers.Optimizer``: one step per ``apply_gradients``.

    Args:
        learning_rate: a float ``>= 0`` (held in a float64 Variable ``learning_rate``, so it can
            be changed by assignment, also between calls of a compiled function), or a callable
            schedule ``step -> learning rate`` (e.g. a
            :class:`~tapegrad.optimizers.schedules.LearningRateSchedule`) called before each
            step with the current ``iterations`` as a 0-d float64 Tensor (as Keras 3 calls a
            schedule with its step; a Tensor, so that it works in compiled functions too), or
            a callable of no arguments returning the rate (Keras 3's third form). A schedule
            class instead of an instance raises ``TypeError``.
        weight_decay: ``None`` or a float ``>= 0``: before each update every variable (except
            those excluded with :meth:`exclude_from_weight_decay`) is decayed as
            ``w -= w * weight_decay * lr``, decoupled from the gradient (Loshchilov & Hutter
            2019, "Decoupled Weight Decay Regularization"), as Keras 3 does for every optimizer.
        clipnorm: ``None`` or a float ``> 0``: each gradient is rescaled as
            ``g * clipnorm / max(||g||_2, clipnorm)``.
        clipvalue: ``None`` or a float ``> 0``: each gradient is clipped to
            ``[-clipvalue, clipvalue]`` elementwise.
        global_clipnorm: ``None`` or a float ``> 0``: all gradients are rescaled by
            ``global_clipnorm / max(n, global_clipnorm)`` where ``n`` is the 2-norm of all of
            them together (NaN if ``n`` is not finite, as ``tf.clip_by_global_norm``).
        name: a label, the prefix of the names of the optimizer's Variables (default: the
            class name).

    Order of a step (Keras 3's): gradients are clipped, then weight decay is applied with the
    current learning rate, then each variable is updated by the algorithm, then
    ``iterations`` is incremented. Keras's ``use_ema``, ``loss_scale_factor`` and
    ``gradient_accumulation_steps`` are not implemented.

    Attributes: ``iterations``, the number of steps applied (an int64 Variable starting at 0);
    ``learning_rate``, the learning-rate Variable, or for a schedule its value at
    ``iterations`` (a 0-d Tensor); ``variables``, every state Variable in creation order.

    Raises ``ValueError`` for a negative learning rate or weight decay, a clipping argument
    that is not positive, or more than one clipping argument (as Keras), and ``TypeError`` for
    a learning rate that is neither a number nor callable.

    A subclass sets ``self._slot_inits`` (slot name -> initial value, for every variable) and
    implements ``_update(variable, value, gradient, learning_rate)`` on backend arrays
    (``value`` is the variable's current array, ``gradient`` an array of its shape and dtype,
    ``learning_rate`` a 0-d array of its dtype), reading its slots with ``_slot``.
    """

    def __init__(self, learning_rate, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None):
        self.name = name or type(self).__name__
        owner = type(self).__name__
        self.weight_decay = (None if weight_decay is None else
                             _number(owner, "weight_decay", weight_decay, 0.0))
        clips = {"clipnorm": clipnorm, "clipvalue": clipvalue, "global_clipnorm": global_clipnorm}
        if sum(v is not None for v in clips.values()) > 1:
            raise ValueError(f"{owner}: only one of `clipnorm`, `clipvalue` and "
                             f"`global_clipnorm` can be set. Received: clipnorm={clipnorm}, "
                             f"clipvalue={clipvalue}, global_clipnorm={global_clipnorm}")
        for key, v in clips.items():
            clips[key] = None if v is None else _number(
                owner, key + " (None for no clipping)", v, 0.0, low_open=True)
        self.clipnorm, self.clipvalue = clips["clipnorm"], clips["clipvalue"]
        self.global_clipnorm = clips["global_clipnorm"]
        self._variables = []
        self._slots = {}
        self._slot_inits = {}
        self._casts, self._t = {}, None  # per step: see _cast
        self._exclude_ids, self._exclude_pattern = set(), None
        self.iterations = self._new_variable(np.int64(0), "iterations")
        self._learning_rate = None
        self.learning_rate = learning_rate

    # --- state ------------------------------------------------------------------------------
    @property
    def variables(self):
        """Every state Variable (``iterations``, the learning rate if it is a number, slots),
        in creation order, as Keras 3's ``Optimizer.variables``."""
        return list(self._variables)

    def _new_variable(self, value, name):
        v = Variable(value, trainable=False, name=f"{self.name}/{name}")
        self._variables.append(v)
        return v

    def _slot(self, variable, name):
        """The slot ``name`` of ``variable``: a Variable of its shape and dtype, named
        ``'{optimizer}/{variable}/{name}'``, created at ``self._slot_inits[name]``."""
        slots = self._slots.setdefault(variable._id, {})
        slot = slots.get(name)
        if slot is None:
            value = variable._value
            init = _ns(value).full_like(value, self._slot_inits[name])
            slot = slots[name] = self._new_variable(init, f"{variable.name}/{name}")
        return slot

    def build(self, var_list):
        """Create the slots of every Variable in ``var_list`` now rather than on the first
        step (for instance before restoring a checkpoint), as Keras 3's ``build``."""
        for v in var_list:
            for name in self._slot_inits:
                self._slot(v, name)

    @property
    def learning_rate(self):
        """The learning-rate Variable (assign a float to it, or to this property, to change the
        rate), or for a schedule its value at ``iterations`` (a 0-d Tensor). Assigning a
        callable replaces the schedule or Variable; assigning a float to an optimizer made
        with a schedule raises ``TypeError``, a negative one ``ValueError``."""
        lr = self._learning_rate
        if isinstance(lr, Variable):
            return lr
        return convert_to_tensor(self._current_learning_rate())

    @learning_rate.setter
    def learning_rate(self, value):
        owner = type(self).__name__
        current = self._learning_rate
        if isinstance(value, type):
            raise TypeError(f"{owner}: learning_rate is the class {value.__name__}, not a "
                            f"schedule; pass an instance: {value.__name__}(initial_learning_rate, "
                            "...)")
        if callable(value) and not isinstance(value, Tensor):
            if isinstance(current, Variable):
                self._variables = [v for v in self._variables if v is not current]
            self._learning_rate = value
            return
        if isinstance(value, Tensor):
            value = float(value)
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
            raise TypeError(f"{owner}: learning_rate must be a float or a callable schedule "
                            f"step -> learning rate, got {type(value).__name__}")
        value = _number(owner, "learning_rate", value, 0.0)
        if isinstance(current, Variable):
            current.assign(value)
        elif current is None:
            self._learning_rate = self._new_variable(np.float64(value), "learning_rate")
        else:
            raise TypeError(f"{owner}: this optimizer was created with a learning-rate schedule, "
                            "so a float learning rate cannot be assigned; create the optimizer "
                            "with a float learning_rate, or assign another schedule")

    def _current_learning_rate(self):
        """The learning rate of this step: a 0-d backend array (or what a schedule returns)."""
        lr = self._learning_rate
        if isinstance(lr, Variable):
            return lr._value
        if _takes_no_step(lr):  # Keras 3: a callable of no arguments returns the rate
            lr = lr()
        else:
            step = self.iterations._value
            lr = lr(Tensor(_ns(step).asarray(step, dtype=_ns(step).float64)))
        return lr._value if isinstance(lr, Tensor) else lr

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Exclude Variables from weight decay: those in ``var_list``, and those whose name
        matches one of the regular expressions ``var_names`` (``re.search``; e.g.
        ``["bias"]``), as Keras 3. Each call replaces the previous exclusions."""
        self._exclude_ids = {v._id for v in var_list or ()}
        self._exclude_pattern = re.compile("|".join(var_names)) if var_names else None

    def _decays(self, variable) -> bool:
        return bool(self.weight_decay) and variable._id not in self._exclude_ids and not (
            self._exclude_pattern is not None and self._exclude_pattern.search(variable.name))

    # --- a step -----------------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars):
        """Apply one step to each Variable from its gradient; return ``iterations`` after it.

        ``grads_and_vars``: an iterable of ``(gradient, variable)`` pairs, e.g.
        ``zip(grads, variables)``; a gradient is a Tensor or backend array of the variable's
        shape (cast to its dtype if needed), or an :class:`~tapegrad.IndexedSlices` of that
        dense shape: with plain :class:`SGD` and ``Adam(lazy=True)`` only its rows are updated
        (repeated indices summed), as Keras 3's TensorFlow backend updates with
        ``scatter_sub``; the other algorithms (and SGD with momentum, Adam without ``lazy``)
        make it dense first, as Keras 3 does (their moments decay on every row). Clipping of
        IndexedSlices uses the norms of their values (TensorFlow's ``clip_by_norm`` and
        ``global_norm`` of IndexedSlices; duplicate indices are not summed first); weight
        decay is dense. ``None`` gradients are skipped with a
        ``UserWarning`` naming the variables. ``iterations`` is incremented once and returned.
        Inside a ``tg.distribute`` replica function (``MirroredStrategy.run``) the gradients
        are first summed across the replicas (``jax.lax.psum``), as TensorFlow's
        ``MirroredStrategy`` all-reduces them, so every replica applies the same update.
        Lazy gradients (Dask) are evaluated together, in one graph, before any update.

        Raises ``TypeError`` if a target is not a Variable, ``ValueError`` if a gradient's
        shape differs from its variable's or if every gradient is ``None``. Nothing is
        updated when an error is raised.
        """
        variables, grads, missing = [], [], []
        for g, v in grads_and_vars:
            if not isinstance(v, Variable):
                raise TypeError(f"{self.name}.apply_gradients: expected (gradient, Variable) "
                                f"pairs, got a {type(v).__name__} as the variable; only "
                                "tg.Variable can be updated")
            if g is None:
                missing.append(v.name)
                continue
            variables.append(v)
            if getattr(g, "_sparse", False):  # IndexedSlices: its rows
                if g.dense_shape != v.shape:
                    raise ValueError(f"{self.name}.apply_gradients: the IndexedSlices gradient "
                                     f"for Variable {v.name!r} has dense_shape {g.dense_shape} "
                                     f"but the variable has shape {v.shape}; gradients must "
                                     "have their variable's shape (check the order of the "
                                     "pairs)")
                # across replicas the rows differ: summed dense (TensorFlow gathers them)
                g = (g._dense() if config.replica_context() is not None
                     else _Rows(g.indices._value, g.values._value))
            grads.append(g._value if isinstance(g, Tensor) else g)
        values = [v._value for v in variables]
        arrays = _backend.materialize(  # lazy ones (Dask): one graph
            [g.values if type(g) is _Rows else g for g in grads], values)
        for k, (v, value, g) in enumerate(zip(variables, values, arrays)):
            if type(g) is not type(value):  # a list, or an array of another library
                g = _backend.asarray(g, xp=_ns(value))
            if type(grads[k]) is not _Rows and g.shape != value.shape:
                raise ValueError(f"{self.name}.apply_gradients: the gradient for Variable "
                                 f"{v.name!r} has shape {tuple(g.shape)} but the variable has "
                                 f"shape {tuple(value.shape)}; gradients must have their "
                                 "variable's shape (check the order of the pairs)")
            if g.dtype != value.dtype:
                g = _ns(value).astype(g, value.dtype)  # same library: dtypes compare
            grads[k] = _Rows(grads[k].indices, g) if type(grads[k]) is _Rows else g
        if missing:
            if not variables:
                raise ValueError(f"{self.name}.apply_gradients: no gradients provided for any "
                                 f"variable (all are None for {missing}); check that the loss "
                                 "depends on the variables and was computed on a GradientTape")
            warnings.warn(f"{self.name}.apply_gradients: gradients do not exist for variables "
                          f"{missing} when minimizing the loss; they are not updated",
                          UserWarning, stacklevel=2)
        values = value = None  # hold no arrays: an update may then be made in place
        if config.replica_context() is not None:  # tg.distribute: summed across replicas
            grads = config.replica_context()._sum_gradients(grads)
        grads = self._clip_gradients(grads)
        self._step(variables, grads, self._current_learning_rate())
        self.iterations.assign_add(1)
        return self.iterations

    def _clip_gradients(self, grads):
        """``grads`` clipped; the rows of IndexedSlices (``_Rows``) by their values."""
        out = self._clip_arrays([g.values if type(g) is _Rows else g for g in grads])
        return [_Rows(g.indices, a) if type(g) is _Rows else a for g, a in zip(grads, out)]

    def _clip_arrays(self, grads):
        if self.clipnorm is not None:
            out = []
            for g in grads:
                xp = _ns(g)
                norm = xp.sqrt(xp.sum(g * g))
                out.append(g * self.clipnorm / xp.maximum(norm, _like(self.clipnorm, norm)))
            return out
        if self.global_clipnorm is not None:
            squares = [_ns(g).sum(g * g) for g in grads]
            total = squares[0]
            for s in squares[1:]:
                total = total + s
            xp = _ns(total)
            norm = xp.sqrt(total)
            c = self.global_clipnorm
            scale = c / xp.maximum(norm, _like(c, norm)) + (norm - norm)  # NaN unless finite
            return [g * _like(scale, g) for g in grads]
        if self.clipvalue is not None:
            return [_ns(g).clip(g, -self.clipvalue, self.clipvalue) for g in grads]
        return grads

    def _cast(self, name, x, value):
        """``_like(x, value)``, computed once per step for each library and dtype."""
        key = (name, type(value), value.dtype)
        cast = self._casts.get(key)
        if cast is None:
            cast = self._casts[key] = _like(x, value)
        return cast

    def _step(self, variables, grads, lr):
        self._t = self.iterations._value + 1  # the number of this step, as in Keras
        try:
            for v, g in zip(variables, grads):
                lr_v = self._cast("lr", lr, v._value)
                if self._decays(v):
                    v.assign(v._value - v._value * self.weight_decay * lr_v)
                if type(g) is _Rows:
                    if self._update_rows(v, g, lr_v):
                        continue
                    # Keras 3: a dense update from the dense gradient
                    g = _kernel(_ns(g.values), "scatter_add")(v.shape, g.values.dtype,
                                                              (g.indices,), g.values)
                self._update(v, v._value, g, lr_v)  # no reference kept here (see SGD)
        finally:  # keep no arrays (or tracers of a compiled step) between steps
            self._casts, self._t = {}, None

    def _update(self, variable, value, gradient, learning_rate):
        raise NotImplementedError(f"{type(self).__name__} must implement _update")

    def _update_rows(self, variable, rows, learning_rate) -> bool:
        """Update ``variable`` from the rows of an IndexedSlices gradient (``rows.indices``,
        ``rows.values``, backend arrays) and return True; False (the default) has the step
        made dense instead."""
        return False

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
        # as the user's own tape.gradient: embedding rows' gradients stay IndexedSlices
        grads = tape._gradient(loss, var_list, None, "none", sparse=True)
        self.apply_gradients(zip(grads, var_list))

    # --- configuration ----------------------------------------------------------------------
    def get_config(self):
        """The constructor arguments as a dict (Keras 3's ``get_config``), from which
        ``from_config`` makes a new optimizer (without state). A schedule is given by
        :func:`~tapegrad.optimizers.schedules.serialize` when it is a
        ``LearningRateSchedule``, else as the callable itself."""
        lr = self._learning_rate
        if isinstance(lr, Variable):
            lr = float(lr)
        elif isinstance(lr, _schedules.LearningRateSchedule):
            lr = _schedules.serialize(lr)
        return {"name": self.name, "learning_rate": lr, "weight_decay": self.weight_decay,
                "clipnorm": self.clipnorm, "global_clipnorm": self.global_clipnorm,
                "clipvalue": self.clipvalue, **self._hyperparameters()}

    def _hyperparameters(self):
        return {}

    @classmethod
    def from_config(cls, config):
        """A new optimizer from :meth:`get_config`'s dict."""
        config = dict(config)
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = _schedules.deserialize(config["learning_rate"])
        return cls(**config)


def _unique_rows(rows, n):
    """``(indices, values)``: the distinct indices of ``rows`` and its values summed per
    index (JAX: padded to a static length with index ``n``, dropped by the row updates)."""
    xp = _ns(rows.values)
    own = _backend.own_kernel(xp, "unique_rows")
    if own is not None:
        return own(rows.indices, rows.values, n)
    unique, inverse = xp.unique_inverse(rows.indices)
    shape = (unique.shape[0],) + tuple(rows.values.shape[1:])
    return unique, _kernel(xp, "scatter_add")(shape, rows.values.dtype,
                                              (xp.reshape(inverse, (-1,)),), rows.values)


class _Rows:
    """The rows of an IndexedSlices gradient as backend arrays: ``indices`` (k,), ``values``
    (k, ...) of the variable's library and dtype."""

    __slots__ = ("indices", "values")

    def __init__(self, indices, values):
        self.indices, self.values = indices, values


def _betas(owner, beta_1, beta_2):
    return (_number(owner, "beta_1", beta_1, 0.0, 1.0, high_open=True),
            _number(owner, "beta_2", beta_2, 0.0, 1.0, high_open=True))


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum, Keras 3's ``SGD``.

    ``momentum == 0``: ``w -= lr * g``. Otherwise, with the slot ``momentum`` ``m`` (starting
    at 0): ``m = momentum * m - lr * g``, then ``w += m``, or with ``nesterov=True``
    ``w += momentum * m - lr * g`` (Sutskever et al. 2013, "On the importance of
    initialization and momentum in deep learning", in Keras's form). Base arguments
    (``weight_decay``, clipping, ``name``) as :class:`Optimizer`. Raises ``ValueError`` unless
    ``0 <= momentum <= 1``.
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, name=None):
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.momentum = _number("SGD", "momentum", momentum, 0.0, 1.0)
        self.nesterov = bool(nesterov)
        self._slot_inits = {"momentum": 0.0} if self.momentum else {}

    def _update(self, variable, value, g, lr):
        del value  # unused: with no reference left, assign_sub updates the array in place
        step = lr * g
        if self.momentum == 0.0:
            variable.assign_sub(step)
            return
        slot = self._slot(variable, "momentum")
        m = self.momentum * slot._value - step
        slot.assign(m)
        variable.assign_add(self.momentum * m - step if self.nesterov else m)

    def _update_rows(self, variable, rows, lr):
        # without momentum: w[indices] -= lr * values (Keras 3's scatter_sub); the momentum
        # decays on every row, so with it the step is dense, as in Keras 3
        if self.momentum != 0.0:
            return False
        variable._update_rows(rows.indices, -(lr * rows.values))
        return True

    def _hyperparameters(self):
        return {"momentum": self.momentum, "nesterov": self.nesterov}


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization"), Keras 3's update.

    With ``t = iterations + 1`` and the slots ``momentum`` ``m`` and ``velocity`` ``v``
    (starting at 0): ``alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)``;
    ``m += (g - m) * (1 - beta_1)``; ``v += (g^2 - v) * (1 - beta_2)``;
    ``w -= m * alpha / (sqrt(v) + epsilon)``. ``epsilon`` is the paper's "epsilon hat" (added
    outside the square root, after the bias correction). With ``amsgrad=True`` (Reddi et al.
    2018, "On the Convergence of Adam and Beyond") the slot ``velocity_hat``
    ``v_hat = max(v_hat, v)`` replaces ``v`` in the last step. Base arguments as
    :class:`Optimizer`.

    An :class:`~tapegrad.IndexedSlices` gradient is made dense (Keras 3's and TensorFlow's
    semantics: the moments of every row decay each step, so every row moves). With
    ``lazy=True`` the update is row-sparse instead ("lazy Adam", TensorFlow Addons'
    ``LazyAdam``): only the rows at the gradient's indices (repeated ones summed first) update
    their moments and weights, by the formulas above; other rows keep theirs. The two agree
    while every step's indices cover all the rows any earlier step touched (e.g. on the first
    step, or with the same ids each step); otherwise lazy Adam differs, by design. Dense
    gradients are unaffected by ``lazy``. Raises ``ValueError`` unless ``0 <= beta_1, beta_2 < 1`` and
    ``epsilon >= 0``.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, lazy=False):
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        owner = type(self).__name__
        self.beta_1, self.beta_2 = _betas(owner, beta_1, beta_2)
        self.epsilon = _number(owner, "epsilon", epsilon, 0.0)
        self.amsgrad = bool(amsgrad)
        self.lazy = bool(lazy)
        self._slot_inits = dict.fromkeys(
            ["momentum", "velocity"] + ["velocity_hat"] * self.amsgrad, 0.0)

    def _update(self, variable, value, g, lr):
        xp = _ns(value)
        t = self._cast("t", self._t, value)
        alpha = lr * xp.sqrt(1.0 - self.beta_2 ** t) / (1.0 - self.beta_1 ** t)
        m_slot, v_slot = self._slot(variable, "momentum"), self._slot(variable, "velocity")
        m, v = m_slot._value, v_slot._value
        m = m + (g - m) * (1.0 - self.beta_1)
        v = v + (g * g - v) * (1.0 - self.beta_2)
        m_slot.assign(m)
        v_slot.assign(v)
        if self.amsgrad:
            hat = self._slot(variable, "velocity_hat")
            v = xp.maximum(hat._value, v)
            hat.assign(v)
        variable.assign_sub(m * alpha / (xp.sqrt(v) + self.epsilon))

    def _update_rows(self, variable, rows, lr):
        # lazy Adam: _update's formulas on the rows at the (distinct) indices only
        if not self.lazy:
            return False
        idx, g = _unique_rows(rows, variable.shape[0])
        xp = _ns(g)
        t = self._cast("t", self._t, g)
        alpha = lr * xp.sqrt(1.0 - self.beta_2 ** t) / (1.0 - self.beta_1 ** t)
        m_slot, v_slot = self._slot(variable, "momentum"), self._slot(variable, "velocity")
        m, v = xp.take(m_slot._value, idx, axis=0), xp.take(v_slot._value, idx, axis=0)
        m = m + (g - m) * (1.0 - self.beta_1)
        v = v + (g * g - v) * (1.0 - self.beta_2)
        m_slot._update_rows(idx, m, add=False)
        v_slot._update_rows(idx, v, add=False)
        if self.amsgrad:
            hat = self._slot(variable, "velocity_hat")
            v = xp.maximum(xp.take(hat._value, idx, axis=0), v)
            hat._update_rows(idx, v, add=False)
        variable._update_rows(idx, -(m * alpha / (xp.sqrt(v) + self.epsilon)))
        return True

    def _hyperparameters(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                "amsgrad": self.amsgrad, "lazy": self.lazy}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, "Decoupled Weight Decay
    Regularization"), Keras 3's ``AdamW``: :class:`Adam`'s update after
    ``w -= w * weight_decay * lr`` (the base class's weight decay, which AdamW turns on by
    default with ``weight_decay=0.004``; note that the decay is scaled by the learning rate, as
    in Keras and PyTorch, not by a separate schedule multiplier as in the paper).

    Raises ``ValueError`` if ``weight_decay`` is ``None`` (as Keras) or negative, and as
    :class:`Adam` otherwise.
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, amsgrad=False, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, lazy=False):
        if weight_decay is None:
            raise ValueError("AdamW: argument `weight_decay` must be a float. Received: "
                             "weight_decay=None (use Adam for no weight decay)")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, weight_decay,
                         clipnorm, clipvalue, global_clipnorm, name, lazy)


class RMSprop(Optimizer):
    """RMSprop (Hinton, Srivastava & Swersky 2012, "Neural Networks for Machine Learning",
    lecture 6e; the centered form is Graves 2013, "Generating Sequences With Recurrent Neural
    Networks", eq. 38-40), Keras 3's update.

    With the slots ``velocity`` ``v`` (and ``average_gradient`` ``a`` if ``centered``,
    ``momentum`` ``m`` if ``momentum > 0``), all starting at 0:
    ``v = rho * v + (1 - rho) * g^2``; ``a = rho * a + (1 - rho) * g``;
    ``step = lr * g / sqrt(v - a^2 + epsilon)`` (``centered``) or
    ``lr * g / sqrt(v + epsilon)``; then ``m = momentum * m + step``, ``w -= m`` if
    ``momentum > 0``, else ``w -= step``. Note that ``epsilon`` is inside the square root.
    Base arguments as :class:`Optimizer`. Raises ``ValueError`` unless ``0 <= rho < 1``,
    ``0 <= momentum <= 1`` and ``epsilon >= 0``.
    """

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
                 centered=False, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None):
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.rho = _number("RMSprop", "rho", rho, 0.0, 1.0, high_open=True)
        self.momentum = _number("RMSprop", "momentum", momentum, 0.0, 1.0)
        self.epsilon = _number("RMSprop", "epsilon", epsilon, 0.0)
        self.centered = bool(centered)
        self._slot_inits = dict.fromkeys(["velocity"] + ["momentum"] * (self.momentum > 0)
                                         + ["average_gradient"] * self.centered, 0.0)

    def _update(self, variable, value, g, lr):
        xp, rho = _ns(value), self.rho
        v_slot = self._slot(variable, "velocity")
        v = rho * v_slot._value + (1 - rho) * (g * g)
        v_slot.assign(v)
        if self.centered:
            a_slot = self._slot(variable, "average_gradient")
            a = rho * a_slot._value + (1 - rho) * g
            a_slot.assign(a)
            denominator = v - a * a + self.epsilon
        else:
            denominator = v + self.epsilon
        step = lr * g / xp.sqrt(denominator)
        if self.momentum > 0:
            m_slot = self._slot(variable, "momentum")
            m = self.momentum * m_slot._value + step
            m_slot.assign(m)
            variable.assign_sub(m)
        else:
            variable.assign_sub(step)

    def _hyperparameters(self):
        return {"rho": self.rho, "momentum": self.momentum, "epsilon": self.epsilon,
                "centered": self.centered}


class Adagrad(Optimizer):
    """Adagrad (Duchi, Hazan & Singer 2011, "Adaptive Subgradient Methods for Online Learning
    and Stochastic Optimization"), Keras 3's update.

    With the slot ``accumulator`` ``a`` starting at ``initial_accumulator_value``:
    ``a += g^2``; ``w -= lr * g / sqrt(a + epsilon)``. Base arguments as :class:`Optimizer`.
    Raises ``ValueError`` unless ``initial_accumulator_value >= 0`` and ``epsilon >= 0``.
    """

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7,
                 weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 name=None):
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.initial_accumulator_value = _number("Adagrad", "initial_accumulator_value",
                                                 initial_accumulator_value, 0.0)
        self.epsilon = _number("Adagrad", "epsilon", epsilon, 0.0)
        self._slot_inits = {"accumulator": self.initial_accumulator_value}

    def _update(self, variable, value, g, lr):
        slot = self._slot(variable, "accumulator")
        a = slot._value + g * g
        slot.assign(a)
        variable.assign_sub(lr * g / _ns(value).sqrt(a + self.epsilon))

    def _hyperparameters(self):
        return {"initial_accumulator_value": self.initial_accumulator_value,
                "epsilon": self.epsilon}


class Nadam(Optimizer):
    """Nadam, Adam with Nesterov momentum (Dozat 2016, "Incorporating Nesterov Momentum into
    Adam", with its momentum schedule), Keras 3's update.

    With ``t = iterations + 1``, ``u_t = beta_1 * (1 - 0.5 * 0.96^t)``, the product
    ``P_t = u_1 * ... * u_t`` (the Variable ``u_product``, shared by all variables, updated
    once per step before the variables; it has the dtype of the first variable updated) and
    the slots ``momentum`` ``m`` and ``velocity`` ``v`` (starting at 0):
    ``m += (g - m) * (1 - beta_1)``; ``v += (g^2 - v) * (1 - beta_2)``;
    ``m_hat = u_{t+1} * m / (1 - P_t * u_{t+1}) + (1 - u_t) * g / (1 - P_t)``;
    ``v_hat = v / (1 - beta_2^t)``; ``w -= lr * m_hat / (sqrt(v_hat) + epsilon)``.
    Base arguments as :class:`Optimizer`. Raises ``ValueError`` unless
    ``0 <= beta_1, beta_2 < 1`` and ``epsilon >= 0``.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 name=None):
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.beta_1, self.beta_2 = _betas("Nadam", beta_1, beta_2)
        self.epsilon = _number("Nadam", "epsilon", epsilon, 0.0)
        self._slot_inits = {"momentum": 0.0, "velocity": 0.0}
        self._u_product = None

    def build(self, var_list):
        """As :meth:`Optimizer.build`, plus Nadam's momentum-schedule product ``u_product``
        (a 0-d Variable of the first variable's dtype)."""
        var_list = list(var_list)
        if var_list and self._u_product is None:
            value = var_list[0]._value
            self._u_product = self._new_variable(_ns(value).asarray(1.0, dtype=value.dtype),
                                                 "u_product")
        super().build(var_list)

    def _u(self, t):
        return self.beta_1 * (1.0 - 0.5 * 0.96 ** t)

    def _step(self, variables, grads, lr):
        if self._u_product is None:
            self.build(variables[:1])
        p = self._u_product._value
        self._u_product.assign(p * self._u(_like(self.iterations._value + 1, p)))
        super()._step(variables, grads, lr)

    def _update(self, variable, value, g, lr):
        xp = _ns(value)
        t = self._cast("t", self._t, value)
        u_t, u_next = self._u(t), self._u(t + 1.0)
        p_t = _like(self._u_product._value, value)
        m_slot, v_slot = self._slot(variable, "momentum"), self._slot(variable, "velocity")
        m = m_slot._value + (g - m_slot._value) * (1.0 - self.beta_1)
        v = v_slot._value + (g * g - v_slot._value) * (1.0 - self.beta_2)
        m_slot.assign(m)
        v_slot.assign(v)
        m_hat = u_next * m / (1.0 - p_t * u_next) + (1.0 - u_t) * g / (1.0 - p_t)
        v_hat = v / (1.0 - self.beta_2 ** t)
        variable.assign_sub(m_hat * lr / (xp.sqrt(v_hat) + self.epsilon))

    def _hyperparameters(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}


class Lion(Optimizer):
    """Lion, "EvoLved Sign Momentum" (Chen et al. 2023, "Symbolic Discovery of Optimization
    Algorithms"), Keras 3's update.

    With the slot ``momentum`` ``m`` (starting at 0):
    ``w -= lr * sign(beta_1 * m + (1 - beta_1) * g)``; then
    ``m = beta_2 * m + (1 - beta_2) * g``. Every coordinate moves by ``lr`` (or 0), so Lion
    wants a learning rate 3-10x smaller than Adam's. Base arguments as :class:`Optimizer`.
    Raises ``ValueError`` unless ``0 < beta_1 <= 1`` (at 0 Lion degenerates to signSGD, as
    Keras says) and ``0 <= beta_2 <= 1``.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.99, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, name=None):
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, name)
        self.beta_1 = _number("Lion", "beta_1 (0 would make Lion signSGD)", beta_1, 0.0, 1.0,
                              low_open=True)
        self.beta_2 = _number("Lion", "beta_2", beta_2, 0.0, 1.0)
        self._slot_inits = {"momentum": 0.0}

    def _update(self, variable, value, g, lr):
        slot = self._slot(variable, "momentum")
        m = slot._value
        variable.assign_sub(lr * _ns(value).sign(m * self.beta_1 + g * (1.0 - self.beta_1)))
        slot.assign(m * self.beta_2 + g * (1.0 - self.beta_2))

    def _hyperparameters(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2}
