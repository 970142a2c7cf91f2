"""Batching: :func:`vmap` (JAX's semantics) and :func:`vectorized_map` (TensorFlow's).

Two engines, one result:

* **JAX's ``vmap``** (where JAX is installed). A call runs ``jax.vmap`` of the user's function
  made a JAX function as :func:`tapegrad.to_jax` makes one (a ``jax.custom_jvp`` whose rule
  runs it under a :class:`~tapegrad.ForwardAccumulator`, so custom gradients and registered
  rules are what JAX batches and differentiates), and records the call on the active tapes
  and accumulators as one op whose gradient is ``jax.vjp`` and JVP ``jax.jvp`` of the batched
  function (``interop``'s, to any order). Tensors the function reads that were made before
  the call (closed-over tensors, Variables) are noted on the first run when something records
  (a ``control_flow._Captures`` observer); if there are any, the call runs again with them as
  unbatched inputs of that op, so tapes see gradients for them; while the function runs they
  are bound to JAX's values. Inside ``tg.function`` (values are tracers) the batched
  function compiles into the caller's program; eagerly, a call nothing records is compiled
  by ``jax.jit`` once per signature (unless the function reads tensors made before the call
  or draws random numbers: then op by op, as JAX's eager ``vmap``).
* **A per-example loop** (without JAX, or with ``_FORCE_LOOP``): the mapped arguments are
  sliced with tapegrad indexing, the function is called once per example and the outputs are
  stacked (``tg.stack``), so tapes record every op.

``GradientTape.jacobian``/``batch_jacobian`` with ``experimental_use_pfor=True`` run their
reverse passes as one ``jax.vmap`` over the one-hot cotangents (:func:`_vectorized_rows`,
plugged into the core's extension point ``vectorize``).
"""
from __future__ import annotations

import functools
import inspect
import sys
import warnings

import numpy as np

from . import _backend, _records, _structural, config
from . import random as _random
from ._pytree import leaf_paths, show, tree_flatten, tree_unflatten
from ._tensor import Tensor, wrapped
from .ops.creation import convert_to_tensor
from ._variables import Variable, bind_tensors, visible_variables
from . import interop as _interop
from ._registry import CallDef
from .control_flow import _Captures
from .errors import describe_fn
from .forward import _TransposedAccumulator
from .ops import stack

__all__ = ["vmap", "vectorized_map"]

_FORCE_LOOP = False  # tests set it to run the per-example loop with JAX installed
_COMPILE_EAGER = True  # eager calls compiled once per signature; tests turn it off to compare
VECTORIZE_MIN_ROWS = 32  # eager Jacobians with fewer reverse passes take them one by one


def _jax():
    """JAX (``config.jax_module``), or ``None`` without it or when the loop is forced."""
    if _FORCE_LOOP:
        return None
    try:
        return config.jax_module()
    except ImportError:
        return None


class BatchedValueError(TypeError):
    """Python code inside :func:`vmap` needed the concrete value of a batched tensor (a
    Python ``if``/``while``, ``bool()``, ``float()``, ``.numpy()``)."""


# --- arguments: in_axes against the arguments' trees ------------------------------------------
def _names(fun, n):
    """``argument k ('name')`` for the first ``n`` positional arguments of ``fun``."""
    try:
        params = [p.name for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [f"argument {k}" + (f" ({params[k]!r})" if k < len(params) else "")
            for k in range(n)]


def _kind(x):
    if isinstance(x, dict):
        return f"a dict with keys {sorted(x, key=repr)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of length {len(x)}"
    return "a leaf" if x is not None else "None"


def _leaf_axes(spec, tree, where, what, out):
    """Append to ``out`` one ``(path, axis)`` per leaf of ``tree`` (tapegrad's pytree order),
    ``spec`` being a prefix of ``tree`` whose leaves are ints or ``None``."""
    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        leaves, structure = tree_flatten(tree)
        for path in leaf_paths(structure, where):
            out.append((path, spec))
        return
    if isinstance(spec, (tuple, list)):
        if type(tree) is not type(spec) or len(tree) != len(spec):
            raise ValueError(f"{what} does not match the arguments: {what} gives {where} as "
                             f"{_kind(spec)} but {where} is {_kind(tree)}; give {what} the "
                             "argument's structure (a prefix of it), or one int or None for "
                             "all its leaves")
        for k, (s, t) in enumerate(zip(spec, tree)):
            _leaf_axes(s, t, f"{where}[{k}]", what, out)
        return
    if isinstance(spec, dict):
        if not isinstance(tree, dict) or set(tree) != set(spec):
            raise ValueError(f"{what} does not match the arguments: {what} gives {where} as "
                             f"{_kind(spec)} but {where} is {_kind(tree)}; give {what} the "
                             "argument's structure (a prefix of it), or one int or None for "
                             "all its leaves")
        for k in sorted(spec):  # the pytree order
            _leaf_axes(spec[k], tree[k], f"{where}[{k!r}]", what, out)
        return
    raise TypeError(f"{what}: the entry for {where} is a {type(spec).__name__} ({spec!r}); "
                    "entries are ints, None, or tuples, lists and dicts of them")


def _is_array_leaf(x) -> bool:
    return isinstance(x, (Tensor, np.ndarray, np.generic)) or (
        not isinstance(x, type) and hasattr(x, "__array_namespace__")) or (
        hasattr(x, "shape") and hasattr(x, "dtype") and type(x).__module__.startswith("jax"))


class _Prepared:
    """A call's arguments flattened, each leaf with its axis: ``leaves`` (the arguments'
    leaves, array-likes made Tensors), ``structure`` (of ``(args, kwargs)``), ``axes`` (per
    leaf: a non-negative int, or ``None`` for an unbatched leaf), ``size`` (the batch size)."""

    def __init__(self, who, fun, in_axes, axis_size, args, kwargs):
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)
        names = _names(fun, len(args))
        pairs = []
        if isinstance(in_axes, tuple):
            if len(in_axes) != len(args):
                raise ValueError(
                    f"{who}: in_axes has {len(in_axes)} entries but the function was called "
                    f"with {len(args)} positional arguments; give one entry (an int, None, or "
                    "the argument's structure) per positional argument")
            for name, spec, arg in zip(names, in_axes, args):
                _leaf_axes(spec, arg, name, f"{who}: in_axes", pairs)
        elif in_axes is None or (isinstance(in_axes, int) and not isinstance(in_axes, bool)):
            for name, arg in zip(names, args):
                _leaf_axes(in_axes, arg, name, f"{who}: in_axes", pairs)
        else:
            raise TypeError(f"{who}: in_axes must be an int, None, or a tuple with one entry "
                            f"per positional argument; got {type(in_axes).__name__} "
                            f"{in_axes!r}")
        for key in sorted(kwargs):  # keyword arguments are mapped over axis 0, as in JAX
            _leaf_axes(0, kwargs[key], f"keyword argument {key!r}", f"{who}: in_axes", pairs)
        leaves, self.structure = tree_flatten((tuple(args), dict(kwargs)))
        self.leaves, self.axes, self.paths = [], [], []
        sizes = []
        for leaf, (path, axis) in zip(leaves, pairs):
            if _is_array_leaf(leaf):
                if isinstance(leaf, (np.ndarray, np.generic)) and config.tracing():
                    leaf = Tensor(np.asarray(leaf))  # NumPy mixes with traced values
                elif not isinstance(leaf, Tensor):
                    leaf = convert_to_tensor(leaf)
            elif axis is not None:
                if isinstance(leaf, (int, float, complex, bool, np.number)):
                    leaf = convert_to_tensor(leaf)
                else:
                    raise TypeError(f"{who}: {path} is a {type(leaf).__name__}, which has no "
                                    f"axis {axis} to map over; pass an array or Tensor, or "
                                    "give it the in_axes entry None")
            if axis is not None:
                ndim = leaf.ndim
                if not -ndim <= axis < ndim:
                    raise ValueError(
                        f"{who}: in_axes {axis} for {path} is out of range: it has shape "
                        f"{tuple(leaf.shape)} (rank {ndim}), so the axis must be in "
                        f"[{-ndim}, {ndim - 1}]" + (" (a scalar cannot be mapped over; give it "
                                                    "None)" if ndim == 0 else ""))
                axis %= ndim
                sizes.append((path, axis, leaf.shape[axis]))
            self.leaves.append(leaf)
            self.axes.append(axis)
            self.paths.append(path)
        if axis_size is not None and (isinstance(axis_size, bool) or not isinstance(
                axis_size, (int, np.integer)) or axis_size < 0):
            raise TypeError(f"{who}: axis_size must be a non-negative int or None, got "
                            f"{axis_size!r}")
        found = {s for _, _, s in sizes}
        if axis_size is not None:
            found.add(int(axis_size))
        if len(found) > 1:
            listed = "; ".join(f"{p} axis {a} has size {s}" for p, a, s in sizes)
            if axis_size is not None:
                listed += f"; axis_size is {axis_size}"
            raise ValueError(f"{who}: the mapped axes have different sizes: {listed}. Every "
                             "mapped axis must have the batch size (give an unbatched argument "
                             "the in_axes entry None)")
        if not found:
            raise ValueError(f"{who}: no argument is mapped (every in_axes entry is None) and "
                             "axis_size is not given; map at least one argument, or give "
                             "axis_size")
        self.size = found.pop()

    def rebuild(self, values):
        """``(args, kwargs)`` with ``values`` (one per leaf) in place of the leaves."""
        args, kwargs = tree_unflatten(self.structure, values)
        return args, kwargs


# --- vmap -------------------------------------------------------------------------------------
def vmap(fun, in_axes=0, out_axes=0, axis_size=None):
    """Vectorize ``fun`` over an axis of its arguments (JAX's ``jax.vmap``).

    Args:
        fun: a function of Tensors (pytrees of them: tuples, lists, dicts) written with
            tapegrad ops, returning a Tensor, a Python number or a pytree of them.
        in_axes: per positional argument, the axis to map over: an int (negative counts from
            the end), ``None`` (the argument is the same for every example, not batched), or
            a pytree prefix of the argument (tuples, lists, dicts) of them; one int or
            ``None`` applies to every argument. Keyword arguments are mapped over axis 0.
        out_axes: where the batch axis goes in each output (an int, negative allowed, or a
            pytree prefix of the output; ``None`` for an output that does not depend on the
            batch).
        axis_size: the batch size; needed only when no argument is mapped.

    Returns ``batched(*args, **kwargs)``: for a batch of size ``B``, each mapped leaf of shape
    ``S`` with ``S[axis] == B`` gives ``fun`` the slices along ``axis``; the result has
    ``fun``'s output structure, each leaf with the batch axis inserted at ``out_axes``, dtype
    as ``fun`` gives it. Python-number leaves of ``fun``'s output become Tensors (float64 for
    floats).

    What ``fun`` may contain: any tapegrad op, ``custom_gradient`` functions and primitives
    with registered gradients (their custom rules are what gets batched and differentiated;
    a NumPy forward runs as a host callback once per example, or once for the batch where
    the primitive declares ``vmap_method``: see :func:`tapegrad.primitive`), tapes, transforms
    (``tg.grad``, ``tg.jvp``, ...), ``tg.vmap`` again, ``tg.cond``/``tg.where`` and
    ``tg.lax`` control flow on batched values, Variables read (shared, not batched; tapes
    outside get their gradients), and ``tg.random`` draws (independent values per example;
    with JAX, drawn by JAX's PRNG from a key taken from the global generator, so
    ``tg.random.set_seed`` makes them reproducible, but they are other numbers than the
    loop's). It composes with ``tg.grad``, ``tg.jvp``, ``tg.jacrev``, ``tg.hessian``,
    ``GradientTape`` and ``ForwardAccumulator`` in either order, and with ``tg.function``.

    Engines: JAX's ``jax.vmap`` where JAX is installed (compiled inside ``tg.function``);
    without JAX a per-example loop that slices, calls ``fun`` ``B`` times and stacks (tapes
    then record every example's ops). Both give the same values. A Python ``if`` on a batched
    value works in the loop only; write it with ``tg.cond``/``tg.where``.

    Eager calls on NumPy or JAX values that nothing records (no tape or accumulator active)
    are compiled by ``jax.jit`` once per signature (the arguments' structure, each array's
    shape, dtype and axis, the values of static leaves, the batch size) and later calls of
    that signature run the program without running ``fun``'s Python again, as ``jax.jit``
    would. A function that reads tensors made before the call (closures, Variables) or draws
    ``tg.random`` numbers is not kept compiled: each of its calls runs op by op, so it sees
    the tensors' current values and new draws. What a compiled call cannot see, as with
    ``tg.function``: Python values ``fun`` reads from outside (numbers, NumPy arrays) that
    change after the first call, and Python side effects (they happen once per signature).
    Under a tape, inside ``tg.function`` or on another library's arrays every call runs as
    above.

    Raises ``TypeError`` if ``fun`` is not callable or an ``in_axes`` entry is not an int,
    ``None`` or a pytree of them; ``ValueError`` (at call time) if ``in_axes`` does not match
    the arguments' structure, an axis is out of range for its argument (naming the argument,
    its shape and the valid range), the mapped sizes differ (naming each argument and size),
    nothing is mapped and ``axis_size`` is missing, or ``fun`` assigns a Variable;
    :class:`BatchedValueError` (a ``TypeError``) with JAX when Python code in ``fun`` needs
    the value of a batched tensor, naming the line and pointing to ``tg.cond``/``tg.where``.
    """
    if not callable(fun):
        raise TypeError(f"tg.vmap: expected a function, got a {type(fun).__name__}")
    for what, spec in (("in_axes", in_axes), ("out_axes", out_axes)):
        _check_spec(spec, f"tg.vmap: {what}")
    who = f"tg.vmap({describe_fn(fun)})"
    programs = {}  # eager calls: signature -> _Compiled, or _UNCACHED (see _JaxCall.run)

    @functools.wraps(fun)
    def batched(*args, **kwargs):
        prepared = _Prepared(who, fun, in_axes, axis_size, args, kwargs)
        jax = _jax()
        if jax is None:
            return _loop(who, fun, prepared, out_axes)
        with config.x64_scope(jax):  # float64 stays float64, in this call only
            return _JaxCall(jax, who, fun, prepared, out_axes).run(
                programs if _COMPILE_EAGER else None)

    batched.__doc__ = f"{describe_fn(fun)} vectorized by tg.vmap"
    return batched


def _check_spec(spec, what):
    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        return
    if isinstance(spec, (tuple, list)):
        for s in spec:
            _check_spec(s, what)
        return
    if isinstance(spec, dict):
        for s in spec.values():
            _check_spec(s, what)
        return
    raise TypeError(f"{what} must be an int, None, or a tuple, list or dict of them; got a "
                    f"{type(spec).__name__} ({spec!r})")


def _assignment_error(who, v):
    return ValueError(f"{who}: the function assigned the Variable {v.name!r} "
                      f"(shape {tuple(v.shape)}); a batched function may read Variables but "
                      "not assign them (each example would assign its own value). Return the "
                      "new value and assign it outside tg.vmap")


def _assigned_variable(tb):
    """The Variable whose ``assign``, ``assign_add`` or ``assign_sub`` is on the traceback
    ``tb`` (it met a batched value it cannot hold), or None."""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("assign", "assign_add", "assign_sub"):
            v = frame.f_locals.get("self")
            if isinstance(v, Variable):
                return v
        tb = tb.tb_next
    return None


class _VariableWatch:
    """From its creation until ``check``, the run of the user's function: the Variables (but
    those ``exempt``) are bound in this thread to their values before it (``bind_tensors``:
    what the function assigns, no other thread sees, and what other threads assign, the run
    does not take for its own), and the tensors of ``captures`` (``(Tensor, value)``) read
    their values. ``check`` ends the binding, which drops any assignment, and raises
    :func:`_assignment_error` for an assigned Variable."""

    def __init__(self, who, exempt=None, captures=()):
        self.who = who
        captures = list(captures)
        taken = {t._id for t, _ in captures}  # a captured Variable reads its captured value
        self.live = [v for v in visible_variables()
                     if v._id not in taken and (exempt is None or not exempt(v))]
        self.before = [v._value for v in self.live]
        self.binding = bind_tensors([*captures, *zip(self.live, self.before)])
        self.values = self.binding.__enter__()

    def check(self, raising=True):
        values = self.values
        changed = [v for v, b in zip(self.live, self.before) if values[v._id] is not b]
        self.binding.__exit__(None, None, None)
        if changed and raising:
            raise _assignment_error(self.who, changed[0])


# --- the per-example loop -----------------------------------------------------------------------
def _slice(x, axis, b):
    return x[(slice(None),) * axis + (b,)]


def _loop(who, fun, prepared, out_axes):
    """``fun`` called once per example on slices, its outputs stacked at ``out_axes``."""
    B = prepared.size
    if B == 0:
        raise ValueError(f"{who}: the batch is empty (size 0); the per-example loop (JAX is "
                         "not installed) cannot find the outputs' shapes without an example")
    outs = []
    watch = _VariableWatch(who, exempt=_random.is_key)  # examples draw one after another
    try:
        for b in range(B):
            values = [leaf if axis is None else _slice(leaf, axis, b)
                      for leaf, axis in zip(prepared.leaves, prepared.axes)]
            args, kwargs = prepared.rebuild(values)
            outs.append(fun(*args, **kwargs))
    finally:
        watch.check(raising=sys.exc_info()[0] is None)
    leaves0, structure = tree_flatten(outs[0])
    columns = [leaves0]
    for b, o in enumerate(outs[1:], 1):
        leaves, s = tree_flatten(o)
        if s != structure:
            raise ValueError(f"{who}: the function returned {show(s)} for example {b} but "
                             f"{show(structure)} for example 0; it must return one structure")
        columns.append(leaves)
    pairs = []
    _leaf_axes(out_axes, tree_unflatten(structure, leaves0), "the output", f"{who}: out_axes",
               pairs)
    result = []
    for k, (path, axis) in enumerate(pairs):
        values = [convert_to_tensor(c[k]) if not isinstance(c[k], Tensor) else c[k]
                  for c in columns]
        if axis is None:
            result.append(values[0])
            continue
        rank = values[0].ndim + 1
        if not -rank <= axis < rank:
            raise ValueError(f"{who}: out_axes {axis} for {path} is out of range: the batched "
                             f"output has rank {rank}, so the axis must be in "
                             f"[{-rank}, {rank - 1}]")
        result.append(stack(values, axis=axis % rank))
    return tree_unflatten(structure, result)


def _check_out_axes(who, out_axes, out):
    """``ValueError`` unless ``out_axes`` is a prefix of the output ``out`` (one example's)
    whose axes are in range for the batched outputs."""
    pairs = []
    _leaf_axes(out_axes, out, "the output", f"{who}: out_axes", pairs)
    for leaf, (path, axis) in zip(tree_flatten(out)[0], pairs):
        rank = len(getattr(leaf, "shape", ())) + 1
        if axis is not None and not -rank <= axis < rank:
            raise ValueError(f"{who}: out_axes {axis} for {path} is out of range: the batched "
                             f"output has rank {rank}, so the axis must be in "
                             f"[{-rank}, {rank - 1}]")


# --- JAX's vmap -------------------------------------------------------------------------------
_is_tracer = _interop._is_tracer


_TRACER_ERRORS = ("ConcretizationTypeError", "TracerArrayConversionError",
                  "TracerBoolConversionError", "TracerIntegerConversionError")


def _tracer_error(jax, error) -> bool:
    return isinstance(error, tuple(getattr(jax.errors, n) for n in _TRACER_ERRORS))


def _user_site(tb):
    """The innermost frame of a traceback outside tapegrad, JAX and NumPy: ``file:line``."""
    import os

    own = os.path.dirname(__file__)
    skip = [own] + [os.path.dirname(m.__file__) for m in
                    (sys.modules.get("jax"), sys.modules.get("jaxlib"), sys.modules.get("numpy"))
                    if m is not None and getattr(m, "__file__", None)]
    site = "an unknown place"
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not any(name.startswith(s) for s in skip) and "site-packages" not in name:
            site = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


class _JaxCall:
    """One call of a batched function on JAX's ``vmap`` (see the module docstring)."""

    def __init__(self, jax, who, fun, prepared, out_axes):
        self.jax, self.who, self.fun, self.p, self.out_axes = jax, who, fun, prepared, out_axes
        self.dyn = [k for k, x in enumerate(prepared.leaves) if isinstance(x, Tensor)]
        # the key tg.random draws from inside: drawn on the first draw when it can be a
        # constant (eagerly), else (traced: tg.function, an outer vmap) an input of the call
        self.key, self.keyed = None, False
        self.concrete_key_ok = _random.concrete_key_ok()
        self.jit = False  # compile the batched function (an eager call's first, _compile)

    def run(self, programs=None):
        """Run the call; when something records and the function read floating tensors made
        before the call (closures, Variables), run it again with them as unbatched inputs, so
        the record has them as inputs and tapes get their gradients.

        ``programs`` (a dict kept by the batched function): eager calls that nothing records
        are compiled once per signature (:meth:`_signature`) by ``jax.jit`` and the program is
        kept there, unless the first run found the function reads tensors made before the
        call or draws random numbers (the signature is then marked ``_UNCACHED`` and every
        call runs op by op, as JAX's eager ``vmap``)."""
        key = self._signature() if programs is not None else None
        if key is not None:
            program = programs.get(key)
            if isinstance(program, _Compiled):
                return program.run(self)
            if program is None:
                outs, program = self._compile()
                programs[key] = program
                return outs
        recording = bool(_records.trace_entries())
        captures = []
        if _backend.default_namespace() is not np and not _backend.default_namespace(
                ).__name__.startswith("jax") and self.p.size:
            # another library's closed-over arrays cannot meet JAX's values: find them first
            probed = self._probe()
            if probed is not None:
                captures, recording = probed, False
        for _ in range(3):
            try:
                outs = self._call(captures, recording)
                if outs is _AGAIN:
                    outs = self._call(self.captures, False)
                return outs
            except _random.NeedKey:
                if self.keyed:
                    raise
                self.key, self.keyed = _random.vmap_key(self.jax), True
        raise AssertionError("unreachable")

    def _probe(self):
        """The floating tensors made before the call that ``fun`` reads, from one eager run on
        the first example with the tapes paused (Variables it assigns are put back)."""
        observer = _Captures()
        watch = _VariableWatch(self.who, exempt=_random.is_key)
        try:
            values = [leaf if axis is None else _slice(leaf, axis, 0)
                      for leaf, axis in zip(self.p.leaves, self.p.axes)]
            args, kwargs = self.p.rebuild(values)
            with _records.trace_stack([observer]):
                self.fun(*args, **kwargs)
        except Exception:  # noqa: BLE001 - e.g. traced values meeting the library's: the
            return None    # captures are then found on the first run
        finally:
            watch.check(raising=False)
        return [c for c in observer.found.values() if _backend.is_floating(c._value.dtype)]

    def _need_key(self):
        if self.keyed:
            return self.key
        if self.key is None:
            if not self.concrete_key_ok:
                raise _random.NeedKey()
            self.key = _random.concrete_key()
        return self.key

    def _apply(self, dyn_tensors):
        """``fun`` on the leaves with ``dyn_tensors`` in place of the array leaves."""
        values = list(self.p.leaves)
        for k, t in zip(self.dyn, dyn_tensors):
            values[k] = t
        args, kwargs = self.p.rebuild(values)
        return self.fun(*args, **kwargs)

    def _signature(self):
        """The key of a call the compiled path may take: eager (no tracer, no enclosing
        ``tg.vmap`` or traced key, nothing recording or observing, no gradient override), NumPy
        or JAX values, hashable static leaves; what decides the traced program: the argument
        structure, per leaf its shape, dtype and axis (a static leaf: its type and value), and
        the batch size. ``None`` for any other call."""
        jax = self.jax
        if (_records.trace_entries() or _records._overriding or config.tracing()
                or not self.concrete_key_ok):
            return None
        parts = []
        for leaf, axis in zip(self.p.leaves, self.p.axes):
            if isinstance(leaf, Tensor):
                v = leaf._value
                if type(v) is not np.ndarray and (not type(v).__module__.startswith("jax")
                                                  or _is_tracer(jax, v)):
                    return None
                parts.append((tuple(v.shape), np.dtype(_backend.np_dtype(v.dtype)), axis))
            else:
                parts.append((type(leaf), leaf))
        key = (self.p.structure, self.p.size, tuple(parts))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _compile(self):
        """The first call of a signature: ``jax.jit`` of the batched function, traced with a
        ``_Captures`` observer; returns ``(outputs, the _Compiled to keep or _UNCACHED)``. A
        function that read tensors made before the call or drew a key gives ``_UNCACHED``:
        this call's program has their values as constants, which a later call must not
        reuse."""
        self.jit = True
        outs = self._call([], True)
        if self.captured or self.key is not None:
            return outs, _UNCACHED
        compiled = _Compiled(self.jitted, self.result_tree, self.index)
        for k in self.dyn:  # the program keeps the batched function, not the first arguments
            self.p.leaves[k] = None
        return outs, compiled

    def _call(self, captures, find_captures):
        jax = self.jax
        p, nd, nc = self.p, len(self.dyn), len(captures)
        keyed = self.keyed
        out_tree = {}
        who = self.who
        finder = {"observer": _Captures() if find_captures else None}

        def run_fun(vals, tangents):
            """``fun`` on one example's values (JAX's); its outputs (and their tangents)."""
            dyn_vals, cap_vals = vals[:nd], vals[nd:nd + nc]
            idx = vals[nd + nc]
            key = vals[nd + nc + 1] if keyed else self._need_key
            observer = finder["observer"]
            entries = [observer] if observer is not None and tangents is None else []
            watch = _VariableWatch(who, captures=zip(captures, cap_vals))  # in this thread
            ok = False
            with _records.trace_stack(entries):  # the tapes see the vmap as one op
                try:
                    with config.trace_scope(), _random.batch_scope(_random.BatchDraws(idx, key)):
                        ts = [Tensor(v) for v in dyn_vals]
                        if tangents is None:
                            out = self._apply(ts)
                            acc = None
                        else:
                            sources, tans = [], []
                            for t, tan in zip([*ts, *captures], tangents[:nd + nc]):
                                if _backend.is_floating(t._value.dtype):
                                    sources.append(t)
                                    tans.append(Tensor(tan))
                            with _TransposedAccumulator(sources, tans) as acc:
                                out = self._apply(ts)
                    outs, tree = jax.tree_util.tree_flatten(out)
                    out_tree["tree"] = tree
                    for j, o in enumerate(outs):
                        if not (isinstance(o, Tensor) or hasattr(o, "shape") or isinstance(
                                o, (int, float, complex, bool, np.generic))):
                            raise TypeError(f"{who}: output leaf {j} is a {type(o).__name__};"
                                            " return Tensors, arrays or numbers (in tuples, "
                                            "lists or dicts)")
                    primal = [_as_jax(o) for o in outs]
                    if acc is None:
                        ok = True
                        return primal, None
                    tans = acc.jvp([o for o in outs if isinstance(o, Tensor)],
                                   unconnected_gradients="zero")
                    ok = True
                    return primal, _interop._jax_tangents(jax, outs, primal, tans)
                except Exception as e:  # noqa: BLE001 - tracer errors explained, others kept
                    assigned = _assigned_variable(e.__traceback__)
                    if assigned is not None:  # assign(batched value): the error vmap promises
                        raise _assignment_error(who, assigned) from e
                    if _tracer_error(jax, e) and "BatchTrace" in str(e):
                        raise BatchedValueError(
                            f"{who}: the Python code at {_user_site(e.__traceback__)} needs the "
                            "concrete value of a batched tensor (a Python `if`/`while` on a "
                            "tensor, bool(), float(), int() or .numpy()); under tg.vmap a value "
                            "stands for the whole batch. Write a branch on a tensor as "
                            "tg.cond(pred, true_fn, false_fn) or tg.where(condition, x, y), a "
                            "loop as tg.while_loop or tg.lax.scan") from e
                    raise
                finally:
                    watch.check(raising=ok)

        @jax.custom_jvp
        def core(*vals):
            return run_fun(vals, None)[0]

        @core.defjvp
        def core_jvp(primals, tangents):
            return run_fun(primals, tangents)

        def per_example(*vals):
            flat = core(*vals)
            out = jax.tree_util.tree_unflatten(out_tree["tree"], flat)
            _check_out_axes(who, self.out_axes, out)
            return out

        in_axes = [p.axes[k] for k in self.dyn] + [None] * nc + [0] + ([None] if keyed else [])
        batched = jax.vmap(per_example, in_axes=tuple(in_axes), out_axes=self.out_axes,
                           axis_size=p.size)
        result_tree = {}

        def flat_fn(*vals):
            out = batched(*vals)
            leaves, result_tree["tree"] = jax.tree_util.tree_flatten(out)
            return leaves

        flat_fn.__name__ = f"vmap_{getattr(self.fun, '__name__', 'fn')}"
        index = Tensor(np.arange(p.size, dtype=np.int32))
        inputs = [p.leaves[k] for k in self.dyn] + list(captures) + [index] + (
            [wrapped(self.key)] if keyed else [])
        values = [t._value for t in inputs]
        run = flat_fn
        if self.jit and not captures:
            run = self.jitted = jax.jit(flat_fn)
            self.index, self.result_tree = index._value, result_tree
        try:
            with np.errstate(all="ignore"), config.precision_scope(jax):
                raw = run(*[_backend.as_jax(v) for v in values])
        except ValueError as e:
            if "out_axes is None" in str(e):
                raise ValueError(f"{who}: out_axes {self.out_axes!r} gives None to an output "
                                 "that depends on the batch; give it an axis, or None only "
                                 "to outputs that do not depend on the batch") from None
            raise
        observer = finder["observer"]
        finder["observer"] = None
        if observer is not None:
            found = [c for c in observer.found.values() if _backend.is_floating(c._value.dtype)]
            self.captured = bool(observer.found)
            if found and not self.jit:
                self.captures = found
                return _AGAIN
        outs = _interop._outputs(jax, values, raw)
        if _records.trace_entries() and any(_backend.is_floating(o._value.dtype) for o in outs):
            entry = CallDef(f"Vmap:{getattr(self.fun, '__name__', 'fn')}",
                            [f"args[{k}]" for k in range(len(inputs))],
                            functools.partial(_interop._gradient, jax, flat_fn),
                            jvp=functools.partial(_interop._jvp, jax, flat_fn), replay=None,
                            function=self.fun,
                            replay_error="a tg.vmap call is replayed by calling it again")
            _records.record(entry, tuple(inputs), {}, tuple(outs))
        return jax.tree_util.tree_unflatten(result_tree["tree"], outs)


_AGAIN = object()
_UNCACHED = object()  # a signature whose calls run op by op (see _JaxCall.run)


class _Compiled:
    """An eager signature's program: ``jitted`` (``jax.jit`` of the batched function of the
    dynamic leaves and the example indices), the output structure ``tree`` (``result_tree``,
    filled by the trace) and the indices ``index`` (a NumPy int32 array)."""

    def __init__(self, jitted, tree, index):
        self.jitted, self.tree, self.index = jitted, tree, index

    def run(self, call):
        """The outputs of ``call`` (a :class:`_JaxCall` of this signature)."""
        jax = call.jax
        values = [call.p.leaves[k]._value for k in call.dyn]
        with np.errstate(all="ignore"), config.precision_scope(jax):
            raw = self.jitted(*values, self.index)
        outs = _interop._outputs(jax, values, raw)
        return jax.tree_util.tree_unflatten(self.tree["tree"], outs)


_as_jax = _interop._as_jax


# --- vectorized_map ---------------------------------------------------------------------------
def vectorized_map(fn, elems, fallback_to_while_loop=True, warn=True):
    """``stack([fn(x) for x in elems])``, vectorized (TensorFlow 2's ``tf.vectorized_map``).

    Args:
        fn: a function of one element: a Tensor, or a nest (tuples, lists, dicts) of Tensors
            of the structure of ``elems``, sliced along axis 0; returns a Tensor or a nest.
        elems: a Tensor (array-like) or a nest of them, all of one leading size ``n``.
        fallback_to_while_loop: when ``fn`` cannot be vectorized (Python code needs a batched
            value, an op cannot be batched), run it once per element instead (with a
            ``UserWarning`` if ``warn``) rather than raising.
        warn: warn when falling back.

    Returns ``fn``'s output structure, each leaf stacked along a new axis 0 (size ``n``).
    It is ``tg.vmap(fn)(elems)``: JAX's ``vmap`` where JAX is installed, else the
    per-example loop, so values, gradients and JVPs are those of the loop. Raises
    ``ValueError`` if the leading sizes differ (naming each element and size), and, with
    ``fallback_to_while_loop=False``, :class:`BatchedValueError` where ``fn`` cannot be
    vectorized.
    """
    if not callable(fn):
        raise TypeError(f"tg.vectorized_map: expected a function, got a {type(fn).__name__}")
    who = f"tg.vectorized_map({describe_fn(fn)})"

    def one(elems):
        return fn(elems)

    prepared = _Prepared(who, one, 0, None, (elems,), {})
    jax = _jax()
    if jax is None:
        return _loop(who, one, prepared, 0)
    try:
        with config.x64_scope(jax):  # float64 stays float64, in this call only
            return _JaxCall(jax, who, one, prepared, 0).run()
    except BatchedValueError as e:
        if not fallback_to_while_loop:
            raise
        if warn:
            warnings.warn(f"{who}: could not vectorize, running once per element instead "
                          f"({e.args[0].split(': ', 1)[1].split(';')[0]})", UserWarning,
                          stacklevel=2)
        return _loop(who, one, prepared, 0)


# --- GradientTape.jacobian(experimental_use_pfor=True) -----------------------------------------
def _vectorized_rows(tape, target, cotangents, sources, unconnected, axis, shapes):
    """The Jacobians of ``target`` with respect to ``sources`` from one ``jax.vmap`` of the
    tape's reverse pass over ``cotangents()`` (a backend array, one cotangent per leading
    index), stacked at ``axis`` and reshaped to ``shapes``; ``None`` where it does not apply
    (no JAX, something records the computation, values of a library other than NumPy's and
    JAX's, or the reverse pass cannot be batched), and the caller takes rows one by one.
    Per source: a Tensor, or ``_MISSING`` where the target does not depend on it. Eagerly
    only from :data:`VECTORIZE_MIN_ROWS` passes on: below, JAX's fixed cost per call is more
    than the passes cost (about 24 passes break even for a small MLP)."""
    if _records.trace_entries():
        return None
    jax = _jax()
    if jax is None:
        return None
    with config.x64_scope(jax):  # float64 stays float64, in this call only
        return _vectorized_rows_x64(jax, tape, target, cotangents, sources, unconnected, axis,
                                    shapes)


def _vectorized_rows_x64(jax, tape, target, cotangents, sources, unconnected, axis, shapes):
    """:func:`_vectorized_rows` with JAX loaded and its 64-bit mode on."""
    values = [target._value, *[s._value for s in sources]]
    if not all(isinstance(v, (np.ndarray, np.generic)) or _is_tracer(jax, v)
               or type(v).__module__.startswith("jax") for v in values):
        return None
    traced = any(_is_tracer(jax, v) for v in values)
    cots = cotangents()
    if not traced and cots.shape[0] < VECTORIZE_MIN_ROWS:
        return None  # eagerly JAX's fixed cost (~10 ms) is more than a few NumPy passes
    connected = []

    def row(c):
        with config.trace_scope():
            gs = tape._backward([target], [Tensor(c)], sources, unconnected)
        connected[:] = [g is not None for g in gs]
        return [(_as_jax(g) if g is not None else
                 jax.numpy.zeros(s.shape, _backend.np_dtype(s._value.dtype)))
                for g, s in zip(gs, sources)]

    try:
        with np.errstate(all="ignore"):
            stacked = jax.vmap(row)(_as_jax(cots))
    except Exception:  # noqa: BLE001 - whatever cannot be batched is taken row by row
        return None
    keep_jax = any(_is_tracer(jax, v) or type(v).__module__.startswith("jax") for v in values)
    out = []
    for s, v, ok, shape in zip(sources, stacked, connected, shapes):
        if not ok:
            out.append(_MISSING)
            continue
        if axis:
            v = jax.numpy.moveaxis(v, 0, axis)
        v = jax.numpy.reshape(v, shape)
        if not keep_jax:
            v = _backend.asarray(np.asarray(v), xp=_backend.namespace(s._value))
        out.append(Tensor(v))
    return out


class _Missing:
    """A source the target does not depend on (the tape gives ``None`` or zeros)."""


_MISSING = _Missing()
_vectorized_rows.missing = _MISSING

_structural.extend(vectorize=_vectorized_rows)
