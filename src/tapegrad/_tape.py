"""``GradientTape``: watching, the reverse pass, nesting, persistence, ``jacobian``.

Semantics are TensorFlow 2's. Recording itself is in :mod:`tapegrad._records`; what gradient
functions return is checked by :mod:`tapegrad._validation`; hooks live in
:mod:`tapegrad._hooks`. ``tape.operations`` gives read-only views of the records
(:class:`~tapegrad._views.OperationView`). ``explain`` and ``to_dot`` are attached by
:mod:`tapegrad.viz`. The ops the reverse pass computes with (accumulation, un-broadcasting,
Jacobian rows) come from :mod:`tapegrad._structural`.
"""
from __future__ import annotations

import contextlib
import enum
import sys
import warnings

from . import _backend
from ._hooks import HOOKS, run_hooks
from ._pytree import leaf_paths, tree_flatten, tree_unflatten
from ._records import _live_tapes, _state, push_entry, remove_entry
from ._structural import extensions, ops
from ._tensor import Tensor
from ._validation import as_gradient_list, check_gradient, no_gradient_error
from ._views import OperationView


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` returns for a source not connected to the target: ``None`` or zeros."""

    NONE = "none"
    ZERO = "zero"

    @classmethod
    def _missing_(cls, value):
        raise ValueError(f"Unknown value for unconnected_gradients: {value!r}; give 'none' or "
                         "'zero' (or tg.UnconnectedGradients.NONE / .ZERO)")


class GradientTape:
    """Records operations for automatic differentiation (TensorFlow 2 semantics).

    Args:
        persistent: if False, the tape's records are freed after one ``gradient`` or
            ``jacobian`` call and a second call raises ``RuntimeError``.
        watch_accessed_variables: if True, trainable Variables read by ops inside the block are
            watched automatically.

    Use as a context manager. Tapes nest: an outer tape records the gradient computation of an
    inner one, which gives higher-order gradients. Tapes are thread-local.
    """

    _observer = False  # observers (check-numerics) see every op; tapes record what they trace
    _differentiates = True

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self._persistent = bool(persistent)
        self._watch_vars = bool(watch_accessed_variables)
        self._ops = []
        self._watched = set()
        self._variables = {}
        self._conversions = {}  # tensor id -> where it was converted to NumPy (explain)
        self._used = False
        self._entered = False
        self.logs = {}

    # --- context -------------------------------------------------------------------------------
    def __enter__(self):
        if self in _state.tapes:
            raise ValueError("this GradientTape is already recording; do not re-enter it "
                             "(TensorFlow raises ValueError too)")
        self._entered = True
        _live_tapes.add(self)
        self._push()
        return self

    def __exit__(self, *exc):
        if self in _state.tapes:
            self._pop()
        return False

    def _push(self):
        push_entry(self)

    def _pop(self):
        remove_entry(self)

    @contextlib.contextmanager
    def stop_recording(self):
        """Within the block, this tape records nothing. Raises ``ValueError`` if not recording."""
        if self not in _state.tapes:
            raise ValueError("stop_recording: this tape is not recording (use it inside its "
                             "`with` block)")
        saved = _state.tapes
        self._pop()
        try:
            yield
        finally:
            _state.tapes = [t for t in saved if t is self or t in _state.tapes]

    def reset(self):
        """Forget everything recorded and watched, as if the block were entered anew."""
        self._ops = []
        self._watched = set()
        self._variables = {}
        self._conversions = {}
        self._used = False

    # --- the records ----------------------------------------------------------------------------
    @property
    def operations(self) -> tuple:
        """What the tape recorded, in order: a tuple of read-only
        :class:`~tapegrad._views.OperationView`. Empty once a non-persistent tape's records
        were released by ``gradient`` (see :attr:`released`)."""
        return tuple(OperationView(op) for op in self._ops)

    @property
    def traced_ids(self) -> frozenset:
        """The ids (``Tensor.id``) of the tensors the tape traces: watched ones and the
        floating outputs of recorded ops."""
        return frozenset(self._watched)

    @property
    def released(self) -> bool:
        """True once a non-persistent tape's ``gradient``/``jacobian`` freed its records."""
        return self._used

    @property
    def watch_accessed_variables(self) -> bool:
        """Whether trainable Variables read inside the block are watched automatically."""
        return self._watch_vars

    @property
    def conversions(self) -> dict:
        """``{tensor id: "file:line"}``: traced tensors converted to NumPy arrays (where they
        left the tape; see :class:`~tapegrad.errors.TapeLeakWarning`)."""
        return dict(self._conversions)

    # --- watching ------------------------------------------------------------------------------
    def watch(self, tensor):
        """Trace ``tensor`` (a Tensor, Variable, or a list/tuple/dict of them).

        Non-floating tensors are not watched (with a warning). Raises ``ValueError`` for a value
        that is not a Tensor (a NumPy array, ``None``: TensorFlow's error type, as its
        ``nest.flatten`` keeps ``None`` a leaf), naming its path in ``tensor`` (``x['b'][1]``).
        """
        leaves, structure = tree_flatten(tensor, none_is_leaf=True)
        for k, t in enumerate(leaves):
            if not isinstance(t, Tensor):
                at = "" if len(leaves) == 1 and not isinstance(tensor, (tuple, list, dict)) else (
                    f" at {leaf_paths(structure, 'x')[k]} of the structure x given")
                raise ValueError(f"GradientTape.watch: expected a Tensor or Variable, got "
                                 f"{type(t).__name__}{at}; convert it with tg.constant first"
                                 f"{', or leave it out' if t is None else ''}")
            if not _backend.is_floating(t.dtype):
                warnings.warn(f"GradientTape.watch: a tensor of dtype {t.dtype} cannot carry a "
                              "gradient (only floating dtypes do); it is not watched",
                              stacklevel=2)
                continue
            if t._variable:
                self._note_variable(t)
            else:
                self._watched.add(t._id)

    def _note_variable(self, v):
        if v._id not in self._variables:
            self._variables[v._id] = v
            self._watched.add(v._id)

    def explain(self, target, sources):
        """Why each source's gradient is what it is: :func:`tapegrad.viz.explain` of this tape
        (an ``Explanation``, printable; errors as there)."""
        return extensions.explain(self, target, sources)

    def to_dot(self, target, sources=None) -> str:
        """The recorded ops that lead to ``target`` as Graphviz DOT text:
        :func:`tapegrad.viz.to_dot` of this tape (errors as there)."""
        return extensions.to_dot(self, target, sources)

    def memory_report(self):
        """What the records keep for the reverse pass, per op and per user line, in bytes:
        :func:`tapegrad.debugging.memory_report` of this tape (a ``MemoryReport``; errors as
        there). Call it before ``gradient`` frees a non-persistent tape's records."""
        return extensions.memory_report(self)

    def watched_variables(self) -> tuple:
        """The Variables this tape watched or read, in the order they were created (as
        TensorFlow orders them)."""
        return tuple(sorted(self._variables.values(), key=lambda v: v._id))

    # --- gradients -------------------------------------------------------------------------------
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        """Gradient of ``target`` with respect to ``sources``.

        Args:
            target: a floating Tensor or a list of them (their gradients are summed).
            sources: a Tensor/Variable, or a list, tuple or dict (possibly nested) of them.
            output_gradients: the cotangent(s) of ``target``, same structure and shapes
                (default: ones, i.e. the gradient of the sum).
            unconnected_gradients: ``UnconnectedGradients.NONE`` (or ``"none"``) gives ``None``
                for sources not connected to the target; ``ZERO`` gives zeros.

        Returns gradients in the structure of ``sources``, each with its source's shape and dtype.
        As in TensorFlow, the gradient of a Variable whose value reaches the target only
        through row gathers (``tg.nn.embedding_lookup``, ``tg.take(v, ids, axis=0)``,
        ``v[ids]``) is an :class:`~tapegrad.IndexedSlices` (the gathered rows' cotangents;
        dense with any other use, or while a tape records this computation, or when called
        from inside tapegrad: ``tg.grad``, control flow). As in TensorFlow, a non-floating (integer, boolean) target or source has no gradient:
        ``None`` (zeros with ``ZERO``), with a warning for a target. Raises ``RuntimeError`` on
        a second call to a non-persistent tape or on a tape that was never entered (``with``),
        ``TypeError`` for a target or source that is not a Tensor.
        """
        # sparse gradients for the user's calls; tapegrad's own callers want Tensors
        sparse = not sys._getframe(1).f_globals.get("__name__", "").startswith("tapegrad.")
        return self._gradient(target, sources, output_gradients, unconnected_gradients, sparse)

    def _gradient(self, target, sources, output_gradients, unconnected_gradients, sparse):
        """:meth:`gradient`; ``sparse``: may Variables' gradients be IndexedSlices?"""
        unconnected = self._start("gradient", unconnected_gradients)
        targets, cots = _cotangents(_flatten(target), output_gradients)
        flat_sources = _flatten(sources)
        for s in flat_sources:
            if not isinstance(s, Tensor):
                raise TypeError(f"GradientTape.gradient: sources must be Tensors or Variables, "
                                f"got {type(s).__name__}")
        grads = self._backward(targets, cots, flat_sources, unconnected, sparse)
        self._finish()
        return _unflatten(sources, iter(grads))

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE,
                 parallel_iterations=None, experimental_use_pfor=True):
        """Jacobian of ``target`` (shape ``T``) with respect to each source (shape ``S``).

        Returns a Tensor of shape ``T + S`` per source, in the structure of ``sources``. As
        ``jax.jacrev`` / ``jax.jacfwd`` choose: with fewer source elements than target
        elements (a tall Jacobian) it is built column by column, one forward-mode sweep over
        the recorded ops per source element (each op's JVP rule, or its transposed VJP;
        ``tapegrad.forward``); otherwise row by row, one reverse pass per target element. Both
        use tapegrad ops, so an outer tape can differentiate the result again (Hessians), and
        give the same values. Gradient hooks (``register_hook``) act on reverse passes only, so
        a tape whose tensors have hooks always takes rows. With ``experimental_use_pfor=True``
        (TensorFlow's default) and JAX installed, the rows come from one reverse pass batched
        by ``jax.vmap`` over the one-hot cotangents (``tapegrad.batching``; eagerly from 32 rows
        on, below which JAX's fixed cost is more than the passes), unless another tape or
        accumulator records the computation (to differentiate the Jacobian: then rows one by
        one, as with ``False``), the values are another library's than NumPy's or JAX's, or a
        gradient function cannot be batched. ``parallel_iterations`` is accepted and ignored.
        Same errors as :meth:`gradient`; built by :mod:`tapegrad._jacobian`.
        """
        return extensions.jacobian(self, target, sources, unconnected_gradients,
                                   experimental_use_pfor)

    def batch_jacobian(self, target, source, unconnected_gradients=UnconnectedGradients.NONE,
                       parallel_iterations=None, experimental_use_pfor=True):
        """Per-example Jacobians (TensorFlow 2's ``GradientTape.batch_jacobian``).

        ``target`` has shape ``(B, *T)`` and ``source`` shape ``(B, *S)``, both of rank 2 or
        more (as in TensorFlow); the result has shape ``(B, *T, *S)`` and the source's dtype,
        and row ``b`` is the Jacobian of ``target[b]`` with respect to ``source[b]``. As in
        TensorFlow, ``target[b]`` must depend on ``source[b]`` only (examples independent):
        this is not checked; the rows are computed with one reverse pass per element of ``T``
        (the gradient of ``sum_b target[b, i]`` gives all ``B`` rows of column ``i`` at once),
        or, when ``S`` has fewer elements than ``T``, the columns with one forward-mode sweep
        per element of ``S`` (its tangent one-hot in ``S`` and ones across the batch), as
        :meth:`jacobian` chooses; so a dependence across examples is summed in silently. The
        passes use tapegrad ops, so an outer tape can differentiate the result again.
        ``experimental_use_pfor`` batches the reverse passes as :meth:`jacobian` does;
        ``parallel_iterations`` is accepted and ignored. A source not connected to the target
        gives ``None`` (or zeros with ``unconnected_gradients="zero"``).

        Raises ``TypeError`` if ``target`` or ``source`` is not a single Tensor or the target is
        not floating, ``ValueError`` if a rank is below 2 or the batch sizes differ, and
        ``RuntimeError`` as :meth:`gradient` (a second call on a non-persistent tape).
        """
        return extensions.batch_jacobian(self, target, source, unconnected_gradients,
                                         experimental_use_pfor)

    def _start(self, what, unconnected_gradients):
        """Begin a ``gradient``/``jacobian`` call: check the tape can be used, stop a
        non-persistent one recording; returns the ``UnconnectedGradients``."""
        self._check_usable(what)
        if not self._persistent and self in _state.tapes:
            self._pop()  # TensorFlow: a non-persistent tape stops recording once it is used
        self.logs = {}
        return UnconnectedGradients(unconnected_gradients)

    def _finish(self):
        if not self._persistent:
            self._release()

    def _check_usable(self, what):
        if not self._entered:
            raise RuntimeError(
                f"GradientTape.{what}: this tape was never entered, so it recorded nothing; "
                "compute the target inside `with tg.GradientTape() as tape:` (or call "
                "tape.__enter__()) and then call tape.gradient")
        if self._used:
            raise RuntimeError(
                f"GradientTape.{what}: a non-persistent GradientTape can only be used to compute "
                "one set of gradients (or Jacobians); create it with persistent=True to call "
                f"{what} several times")

    def _release(self):
        self._used = True
        self._ops = []
        self._watched = set()

    def _backward(self, targets, cotangents, sources, unconnected, sparse=False):
        source_ids = [s._id for s in sources]
        keep = set(source_ids)
        reach = keep & self._watched  # an unwatched source has no gradient, even if an op read it
        active = []
        for op in list(self._ops):
            if not reach.isdisjoint(op._in_ids):
                active.append(op)
                reach.update(op._float_out)
        saved = _state.reach, _state.backward_tape, _state.grad_op, _state.sparse_ids
        _state.reach, _state.backward_tape = reach, self
        # IndexedSlices only for Variables, and only while no tape records this pass (a
        # gradient of the gradient then differentiates dense ops, as before)
        _state.sparse_ids = frozenset(
            [s._id for s in sources if s._variable]
            if sparse and all(t._observer for t in _state.tapes) else ())
        try:
            grads = self._reverse(active, reach, keep, targets, cotangents)
            if HOOKS:
                produced = {i for op in active for i in op._out_ids}
                for i in keep - produced:  # leaves: their gradient is complete only now
                    if i in HOOKS and grads.get(i) is not None:
                        grads[i] = run_hooks(i, _dense(grads[i]))
        finally:
            _state.reach, _state.backward_tape, _state.grad_op, _state.sparse_ids = saved
        result = []
        for s in sources:
            g = grads.get(s._id)
            if g is None and unconnected is UnconnectedGradients.ZERO:
                floating = _backend.is_floating(s.dtype)
                dtype = s.dtype if floating else _backend.namespace(s._value).float64
                g = ops.zeros(s.shape, dtype=dtype)
            elif g is not None and not _backend.is_floating(s.dtype):
                g = None
            result.append(g)
        return result

    @staticmethod
    def _reverse(active, reach, keep, targets, cotangents):
        grads = {}
        for t, c in zip(targets, cotangents):
            prev = grads.get(t._id)
            grads[t._id] = c if prev is None else ops.add(prev, c)
        hooks = HOOKS
        observed = bool(_state.tapes)
        outer = any(not t._observer for t in _state.tapes)  # an outer tape may differentiate
        check = extensions.gradient_check  # tg.debugging.enable_gradient_checks: once per pass
        checking = check is not None and check.on
        numerics = extensions.gradient_numerics  # tg.debugging.enable_check_numerics: the same
        noting = numerics is not None and numerics.on
        for op in reversed(active):
            out_ids = op._out_ids
            if len(out_ids) == 1:
                i = out_ids[0]
                dy = grads.get(i) if i in keep else grads.pop(i, None)
                if dy is None:
                    continue
                if hooks and i in hooks:
                    dy = grads[i] = run_hooks(i, dy)
                dys = None  # one cotangent: fn(op, dy), without packing a tuple
            else:
                dys = [grads.get(i) if i in keep else grads.pop(i, None) for i in out_ids]
                if all(d is None for d in dys):
                    continue
                if hooks:
                    dys = [run_hooks(i, d) if d is not None and i in hooks else d
                           for i, d in zip(out_ids, dys)]
                dys = [_zeros_for(o) if d is None else d for d, o in zip(dys, op.outputs)]
            od = op._gdef
            fn = od.grad
            if fn is None:
                if not od.differentiable:
                    continue
                raise no_gradient_error(od.type)
            if checking:
                check(fn, op)
            if noting:
                numerics(op, (dy,) if dys is None else dys)
            if outer:  # computed on raw arrays? then once-differentiable (_once_differentiable)
                gs = extensions.gradient_call(fn, op, (dy,) if dys is None else dys)
            else:
                if observed:
                    _state.grad_op = op
                gs = fn(op, dy) if dys is None else fn(op, *dys)
            if noting:
                numerics.returned(fn, op, gs)
            in_ids = op._in_ids
            if type(gs) is Tensor and len(in_ids) == 1:  # the common case, without a loop
                iid = in_ids[0]
                if iid in reach:
                    x = op.inputs[0]
                    if gs._value.shape != x._value.shape or gs._value.dtype is not x._value.dtype:
                        gs = check_gradient(op, 0, x, gs, fn)
                    prev = grads.get(iid)
                    grads[iid] = gs if prev is None else (
                        ops.add(prev, gs) if type(prev) is Tensor else _add(prev, gs))
                continue
            if type(gs) is not tuple or len(gs) != len(in_ids):
                gs = as_gradient_list(gs, op, fn)
            for k, iid in enumerate(in_ids):
                if iid not in reach:  # None (a scalar input) is never in reach
                    continue
                g = gs[k]
                if g is None:
                    continue
                x = op.inputs[k]
                if type(g) is not Tensor:
                    if not getattr(g, "_sparse", False):
                        g = check_gradient(op, k, x, g, fn)
                    elif g.dense_shape != tuple(x.shape) or g.dtype != x.dtype:  # IndexedSlices
                        g = check_gradient(op, k, x, g._dense(), fn)
                elif g._value.shape != x._value.shape or g._value.dtype is not x._value.dtype:
                    g = check_gradient(op, k, x, g, fn)
                prev = grads.get(iid)
                grads[iid] = g if prev is None else (
                    ops.add(prev, g) if type(prev) is Tensor and type(g) is Tensor else _add(prev, g))
        return grads


def _dense(g):
    """``g`` as a Tensor (an IndexedSlices made dense)."""
    return g._dense() if getattr(g, "_sparse", False) else g


def _add(a, b):
    """The sum of two gradients of one tensor: two IndexedSlices concatenate their rows
    (TensorFlow's aggregation), with a dense one they are made dense first."""
    if getattr(a, "_sparse", False) and getattr(b, "_sparse", False):
        return a._concat(b)
    return ops.add(_dense(a), _dense(b))


def _zeros_for(o):
    """Zeros in place of a missing cotangent of output ``o`` (a Tensor or a dropped one)."""
    if isinstance(o, Tensor):
        return ops.zeros_like(o)
    return ops.zeros(o.shape, dtype=_backend.np_dtype(o.dtype))


def _cotangents(targets, output_gradients):
    """``(targets, cotangents)``: the floating targets and theirs. A non-floating target has
    no gradient: it is left out with a warning, so that alone it gives ``None`` gradients
    (TensorFlow's semantics)."""
    for t in targets:
        if not isinstance(t, Tensor):
            raise TypeError(f"GradientTape.gradient: target must be a Tensor, got "
                            f"{type(t).__name__}")
    if output_gradients is None:
        cots = [None] * len(targets)
    else:
        cots = _flatten(output_gradients)
        if len(cots) != len(targets):
            raise ValueError(f"GradientTape.gradient: {len(cots)} output_gradients for "
                             f"{len(targets)} targets; give one per target")
    kept, out = [], []
    for t, c in zip(targets, cots):
        if not _backend.is_floating(t.dtype):
            warnings.warn(f"GradientTape.gradient: a target of dtype {t.dtype} has no gradient "
                          "(only floating targets do); its gradients are None, as in "
                          "TensorFlow. Cast it with tg.astype before the op that made it "
                          "integer to differentiate it", stacklevel=3)
            continue
        if c is None:
            c = ops.ones_like(t)
        elif not isinstance(c, Tensor):
            c = Tensor(_backend.asarray(c, dtype=t.dtype, xp=_backend.namespace(t._value)))
        if c.shape != t.shape:
            raise ValueError(f"GradientTape.gradient: output_gradients of shape {c.shape} for "
                             f"a target of shape {t.shape}; they must match")
        kept.append(t)
        out.append(c)
    return kept, out


def _flatten(x) -> list:
    """The leaves of a nest of lists, tuples and dicts (``None`` a leaf), in ``_pytree``'s
    order."""
    return tree_flatten(x, none_is_leaf=True)[0]


def _unflatten(structure, it):
    """The nest ``structure`` (a nest like :func:`_flatten`'s argument) with the items of the
    iterator ``it`` in place of its leaves."""
    return tree_unflatten(tree_flatten(structure, none_is_leaf=True)[1], it)
