"""``tg.function``: trace a Python function once per signature, compile it with XLA through JAX.

tapegrad runs on JAX arrays like on any Array API library, so calling the Python function on
Tensors that wrap JAX tracers turns every tapegrad op it runs (forwards, tapes, gradient
functions, custom gradients, overrides, hooks) into JAX operations: ``jax.make_jaxpr`` records
them once per signature and ``jax.jit`` compiles the program with XLA. No compiler is written
here; this module only decides what is an input, what is state and what is an output.

* **Signature**: the shapes and dtypes of the Tensor (and array) arguments, the values of the
  other (hashable) Python arguments, the identity of Variable arguments, and the structure of
  nested tuples, lists and dicts.
* **Variables** the function reads or assigns are lifted: every live Variable is an input of
  the trace, the ones it uses (found in the program) are passed on each call and the ones it
  assigns are outputs, written back after the call. Variables created by the first call are
  kept (their values written back) and the function is traced once more with them as state;
  creating a Variable on a later trace raises ``ValueError``, as in TensorFlow.
* **Gradients through a call**: under a recording ``GradientTape`` that traces an input (or
  reads a trainable Variable), the call is recorded as one op whose gradient is itself a
  compiled function (the VJP of a replay of the Python function), differentiable again.
* Programs are traced and run with JAX's 64-bit mode on for themselves only
  (``config.x64_scope``), so results have the dtypes eager execution gives while the user's
  own JAX code keeps its setting (``jnp.zeros(1)`` stays float32 unless the user turned
  ``jax_enable_x64`` on; ``TAPEGRAD_ARRAY_BACKEND=jax.numpy`` turns it on process-wide).
* **Device-resident values, asynchronous calls.** A call is dispatched as JAX dispatches it
  (asynchronously) and returns at once: its result Tensors, and the Variables it assigns, hold
  the JAX arrays it produced, on their device (``Tensor.device``); the next call takes them as
  they are, so a loop of compiled steps never copies through host memory. The first eager read
  of such a value (an eager op, ``numpy()``, printing, a checkpoint) waits for it and makes
  the default backend's copy once (``_to_host``), so eager ops compute on the default backend,
  in its dtypes (float64 stays float64 outside JAX's 64-bit mode). A Variable's host value is
  copied to the device by the first call that reads it and kept there until it changes. An
  error raised inside a program (check-numerics, a host callback) is raised at the call or at
  that first read, naming the function. With ``TAPEGRAD_ARRAY_BACKEND=jax.numpy`` results are
  plain JAX-array Tensors (JAX is then the eager backend too).
* A ``Function`` that keeps tracing new signatures warns (:class:`RetracingWarning`), and as a
  method decorator its instance is static (:class:`_BoundFunction`).
"""
from __future__ import annotations

import collections
import contextlib
import copy
import functools
import inspect
import os
import re
import sys
import threading
import warnings

import numpy as np

from . import _backend, _leaks, _records, _registry, _structural, autograph, config
from ._records import record
from ._tape import GradientTape, UnconnectedGradients
from ._tensor import Tensor, _wrap
from ._variables import (DeviceTensor, Variable, bind_variables, device_array, device_arrays,
                         on_device, set_all_on_device, set_on_device, set_state, sole_device_arrays,
                         visible_variables)
from .errors import ConvergenceError, NumericsError, describe_fn
from .forward import ForwardAccumulator

__all__ = ["function", "Function", "TensorSpec", "RetracingWarning"]

_JAX_HINT = 'install JAX with: pip install "tapegrad[jit]"'
_OWN_DIRS = (os.path.dirname(__file__),)


def _jax():
    """The ``jax`` module (``config.jax_module``; 64-bit mode is turned on by :func:`_Program`
    around its traces and calls only); raises ``ImportError`` saying how to install it."""
    try:
        return config.jax_module()
    except ImportError:
        raise ImportError(f"tg.function(jit_compile=True) compiles with XLA through JAX, which "
                          f"is not installed; {_JAX_HINT}, or use jit_compile=False") from None


def _has_jax() -> bool:
    try:
        config.jax_module()
    except ImportError:
        return False
    return True


class TensorSpec:
    """The shape and dtype of a Tensor argument (``tf.TensorSpec``), for ``input_signature``.

    ``shape``: a tuple of ints, ``None`` for a dimension of any size, or ``None`` itself for
    any rank (TensorFlow's ``TensorSpec(None)``); ``dtype``: a tapegrad dtype (default
    float32); ``name``: a label.
    """

    def __init__(self, shape, dtype=np.float32, name=None):
        self.shape = None if shape is None else tuple(shape)
        self.dtype = np.dtype(dtype)
        self.name = name

    def is_compatible_with(self, value) -> bool:
        """True if ``value`` (a Tensor or array) has a shape and dtype this spec admits."""
        shape = tuple(value.shape)
        return (self.shape is None or len(shape) == len(self.shape) and all(
            s is None or s == d for s, d in zip(self.shape, shape))
            and _backend.np_dtype(value.dtype) == self.dtype)

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype.name}, name={self.name!r})"


def function(func=None, *, input_signature=None, jit_compile=None, reduce_retracing=False,
             autograph=True):
    """Compile ``func`` with XLA: traced once per signature, then run as one program.

    Usable as ``@tg.function`` or ``@tg.function(jit_compile=True)`` (TensorFlow 2's names).

    Args:
        func: a Python function of Tensors, arrays, Variables and Python values (also nested in
            tuples, lists and dicts) that returns Tensors, Python values or ``None`` (also
            nested).
        input_signature: a sequence of :class:`TensorSpec`, one per positional argument (for
            a method, not counting ``self``); calls whose Tensors do not fit raise
            ``TypeError``. Each distinct shape is still traced once (a ``None`` dimension
            admits any size but does not share one trace across sizes).
        jit_compile: ``True`` compiles (needs JAX), ``False`` runs eagerly (for debugging),
            ``None`` compiles when JAX is installed and otherwise runs eagerly, warning once.
        reduce_retracing: accepted for TensorFlow compatibility; every distinct signature is
            traced.
        autograph: ``True`` (TensorFlow's default) converts Python ``if``/``while``/``for``
            on tensors, with ``break``/``continue``/``return``, into ``tg.cond`` /
            ``tg.while_loop`` before tracing (:mod:`tapegrad.autograph`); ``False`` traces the
            function as written.

    As a method decorator (``@tg.function`` on a method of a class, e.g. a ``tg.Module``), the
    instance is static: not an input, not counted by ``input_signature``, each instance traced
    on its own (by identity; its programs keep it alive), and its Variables are state as any
    other Variable's.

    When 5 of the last 10 calls trace a new signature, a :class:`RetracingWarning` (a
    ``UserWarning``) is issued once per function, naming the arguments whose Python value,
    shape, dtype or structure changed, as TensorFlow's retracing warning.

    Returns a :class:`Function`. Calls raise ``ImportError`` if ``jit_compile=True`` and JAX is
    missing, ``TypeError`` for an unhashable Python argument, ``ValueError`` when a trace other
    than the first creates a Variable, and a ``TypeError`` naming the line when the function
    needs the value of a traced tensor (``float()``, ``.numpy()``, an ``if`` on a tensor with
    ``autograph=False``)
    or runs an op whose output shape depends on values (``nonzero``, ``unique_values``, boolean
    masks, or a NumPy forward run as a host callback whose output shape changes with its input
    values).
    """
    if func is None:
        return functools.partial(function, input_signature=input_signature,
                                 jit_compile=jit_compile, reduce_retracing=reduce_retracing,
                                 autograph=autograph)
    return Function(func, input_signature, jit_compile, autograph)


class Function:
    """A compiled Python function (made by :func:`function`); call it like the function."""

    def __init__(self, func, input_signature=None, jit_compile=None, autograph=True):
        if not callable(func):
            raise TypeError(f"tg.function: expected a function, got {type(func).__name__}")
        if jit_compile not in (None, True, False):
            raise TypeError(f"tg.function: jit_compile must be True, False or None, got "
                            f"{jit_compile!r}")
        if autograph not in (True, False):
            raise TypeError(f"tg.function: autograph must be True or False, got {autograph!r}")
        functools.update_wrapper(self, func)
        self._func = func
        self._signature = None if input_signature is None else list(input_signature)
        self._jit_compile = jit_compile
        self._programs = {}
        self._by_shapes = {}  # the programs of calls with Tensor arguments only, by their shapes
        self._jax = None  # the jax module, once a call compiled
        self._retrace = set()
        self._traces = 0
        self._warned = False
        self._lock = threading.RLock()
        self._calls = 0  # calls so far, for the retracing warning
        self._recent = collections.deque(maxlen=_RETRACE_THRESHOLD)  # (call, changed leaves)
        self._last_key = None  # the key (and leaf paths) of the last trace
        self._retrace_warned = False
        self._tensor_float_32 = config._tensor_float_32  # the setting its programs traced with
        self._autograph = autograph
        self._converted = None  # the function traced: converted by AutoGraph, once

    def _traced(self):
        """The Python function that traces run: ``autograph.convert`` of it, unless off."""
        if self._converted is None:
            self._converted = autograph.convert(self._func) if self._autograph else self._func
        return self._converted

    def experimental_get_tracing_count(self) -> int:
        """The number of signatures traced so far (one per signature)."""
        return self._traces

    def __get__(self, obj, objtype=None):
        """As a method: a bound function whose instance is static (not an input, not counted by
        ``input_signature``), told apart by identity, as TensorFlow's."""
        return self if obj is None else _BoundFunction(self, obj)

    def __repr__(self):
        return f"<tg.Function {describe_fn(self._func)}>"

    def __call__(self, *args, **kwargs):
        return self._call(args, kwargs, _UNBOUND)

    def _call(self, args, kwargs, instance):
        """A call with positional ``args`` and ``kwargs``; ``instance`` is the object a method
        is bound to (static, keyed by identity), or ``_UNBOUND``."""
        self._calls += 1
        if self._tensor_float_32 is not config._tensor_float_32:  # traced at another precision
            self._tensor_float_32 = config._tensor_float_32
            self._programs.clear()
            self._by_shapes.clear()
        if self._signature is not None:
            self._check_signature(args)
        bound = instance is not _UNBOUND
        if self._by_shapes and not kwargs and not config._run_eagerly:
            # Tensors only: the program and its inputs found in one pass, without JAX's trees
            found = _tensor_inputs(args)
            if found is not None:
                program = self._by_shapes.get((_SELF, id(instance), found[0]) if bound
                                              else found[0])
                if program is not None and not config.tracing():  # in a trace: inlined below
                    return program.call(found[1], args)
        if config._run_eagerly or not self._compiles():
            return self._func(instance, *args, **kwargs) if bound else self._func(*args, **kwargs)
        jax = self._jax or _jax()
        self._jax = jax
        leaves, treedef, key = self._signature_key(args, kwargs, instance)
        if config.tracing() or any(isinstance(_raw(x), jax.core.Tracer) for x in leaves):
            # called while another is traced (its Variables bound to tracers, even when the
            # arguments are concrete): inline
            func = self._traced()
            return func(instance, *args, **kwargs) if bound else func(*args, **kwargs)
        key, program = self._find(key, leaves)
        if program is None:
            check = _structural.extensions.gradient_check
            if check is not None and check.on and check.eager_first_call(self):
                # tg.debugging.enable_gradient_checks: the first call runs eagerly, its
                # gradient rules checked on concrete values; the next call traces
                return (self._func(instance, *args, **kwargs) if bound
                        else self._func(*args, **kwargs))
            with self._lock:  # concurrent first calls: one thread traces, the others wait
                program = self._programs.get(key)
                if program is None:
                    retrace = key in self._retrace  # after a first call that created Variables
                    func = (functools.partial(self._traced(), instance) if bound
                            else self._traced())
                    program = _Program(self, func, treedef, leaves,
                                       first=self._traces == 0 and not retrace)
                    if not retrace:
                        self._note_trace(key, args, kwargs, bound)
                    self._traces += not retrace
                    if program.created and not retrace:  # run it once, trace again with them
                        self._retrace.add(key)
                        return program.run(leaves)
                    self._retrace.discard(key)
                    self._programs[key] = program
        found = None if kwargs else _tensor_inputs(args)
        if found is not None:  # later calls like it take the Tensors-only path
            self._by_shapes[(_SELF, id(instance), found[0]) if bound else found[0]] = program
            return program.call(found[1], args)
        return program.run(leaves)

    def _signature_key(self, args, kwargs, instance):
        """``(leaves, treedef, key)`` of a call: its pytree's leaves and structure, and the key
        of its program in ``_programs`` (a method's instance by identity: the program keeps it
        alive, so its id stays its)."""
        leaves, treedef = self._jax.tree_util.tree_flatten((args, kwargs))
        key = (treedef, tuple([_leaf_key(x, self.__name__) for x in leaves]))
        if instance is not _UNBOUND:
            key = (_SELF, id(instance), *key)
        return leaves, treedef, key

    def _find(self, key, leaves):
        """``(key, program)``: the program traced for ``key``, rebound to other Variable
        arguments of the same specs (:meth:`_for_variables`), or None."""
        program = self._programs.get(key)
        if program is not None and program.var_args and not program.traced_with(leaves):
            key, program = self._for_variables(key, program, leaves)
        return key, program

    def _for_variables(self, key, program, leaves):
        """``(key, program)`` for a call whose Variable arguments have the shapes and dtypes
        of ``program``'s but are other Variables: TensorFlow's rule, a Variable argument is
        traced by its spec, so ``program`` is rebound to them (:meth:`_Program.rebound`, no
        trace, no compile) and kept under the Variables' identities, unless its trace depends
        on which Variables they are (:meth:`_Program.shares`); then that key has no program
        yet, and the call traces its own."""
        ikey = (*key[:-2], key[-2], tuple(("variable", id(x)) if isinstance(x, Variable)
                                          else k for x, k in zip(leaves, key[-1])))
        found = self._programs.get(ikey)
        if found is None and program.shares(leaves):
            found = self._programs[ikey] = program.rebound(leaves)
        return ikey, found

    def _gradient_memory(self, wrap, args, kwargs) -> dict:
        """For ``tg.debugging.saved_residuals``: XLA's ``memory_analysis()`` sizes, in bytes
        (``temp``, ``argument``, ``output``, ``alias``, ``generated_code``), of the program
        that ``Function(wrap(python function))`` compiles for ``args`` and ``kwargs`` (called
        once: traced and compiled as a call would be). Raises ``TypeError`` when this function
        runs eagerly (``run_functions_eagerly``, ``jit_compile=False``, no JAX)."""
        if config._run_eagerly or not self._compiles():
            raise TypeError(f"saved_residuals: tg.function {self.__name__} runs eagerly here "
                            "(run_functions_eagerly, jit_compile=False, or no JAX), so XLA "
                            "compiles nothing; pass its Python function for the tape's view")
        g = Function(wrap(self._func), jit_compile=True)
        g(*args, **kwargs)
        jax = _jax()
        (program,) = g._programs.values()  # one call: one signature
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        inputs = [*_variable_inputs(program.variables, jax),
                  *[_input(leaves[k]) for k in program.dynamic]]
        with config.x64_scope(jax):  # as tapegrad runs its float64 programs
            stats = program.compiled.lower(*inputs).compile().memory_analysis()
        return {k: int(getattr(stats, f"{k}_size_in_bytes", 0) or 0)
                for k in ("temp", "argument", "output", "alias", "generated_code")}

    # --- the retracing warning ----------------------------------------------------------------
    def _note_trace(self, key, args, kwargs, bound):
        """Remember a new trace; warn (once per function) when ``_RETRACE_THRESHOLD`` of the
        last ``_RETRACE_WINDOW`` calls traced, naming the arguments whose changes caused it."""
        last, self._last_key = self._last_key, key
        if last is None:  # the first trace is no retrace
            return
        self._recent.append((self._calls, _changed_leaves(last, key)))
        if (self._retrace_warned or len(self._recent) < _RETRACE_THRESHOLD
                or self._calls - self._recent[0][0] >= _RETRACE_WINDOW):
            return
        self._retrace_warned = True
        changed = set()
        for _, leaves in self._recent:
            changed |= leaves
        warnings.warn(self._retrace_message(changed, args, kwargs, bound),
                      RetracingWarning, stacklevel=_leaks._site(sys._getframe())[1])

    def _retrace_message(self, changed, args, kwargs, bound):
        n = self._calls - self._recent[0][0] + 1
        head = (f"{len(self._recent)} out of the last {n} calls to {self.__name__} triggered "
                "tg.function retracing. Tracing is expensive (each new signature runs the Python "
                "function again and compiles a new XLA program)")
        if "self" in changed:
            changed.discard("self")
            if not changed:
                return (f"{head}: the method is called on a different instance each time, and "
                        "each instance traces its own programs. Call it on fewer instances, or "
                        "compile a function that takes the state as arguments")
        if None in changed or not changed:
            return (f"{head}: the structure of the arguments (their number, or the nesting of "
                    "tuples, lists and dicts) changes from call to call. Keep it fixed")
        jax = _jax()
        paths, _ = jax.tree_util.tree_flatten_with_path((args, kwargs))
        names = _parameter_names(self._func, bound)
        parts = []
        for k in sorted(changed):
            if k >= len(paths):
                continue
            path, leaf = paths[k]
            what = _describe_path(path, names)
            if isinstance(leaf, Variable):
                parts.append(f"{what} is a different Variable each time")
            elif isinstance(leaf, Tensor) or _is_array(leaf):
                parts.append(f"{what} changes shape or dtype (now {tuple(leaf.shape)}, "
                             f"{_backend.np_dtype(_raw(leaf).dtype)}), and every distinct "
                             "shape and dtype is traced (input_signature checks them but, "
                             "unlike TensorFlow's, a None dimension still traces once per "
                             "size); pad or bucket it to a few shapes")
            else:
                parts.append(f"{what} is a Python {type(leaf).__name__} whose value changes "
                             f"(now {leaf!r}), and every distinct Python value is traced; pass "
                             "it as a Tensor (tg.constant(...)) instead of a Python number "
                             "(input_signature can then fix its shape and dtype)")
        return f"{head}: " + "; ".join(parts) + "."

    def _compiles(self) -> bool:
        if self._jit_compile is False:
            return False
        if self._jit_compile is True or self._jax is not None or _has_jax():
            return True
        if not self._warned:
            self._warned = True
            warnings.warn(f"tg.function({self.__name__}): JAX is not installed, so the function "
                          f"runs eagerly (not compiled); {_JAX_HINT}", stacklevel=3)
        return False

    def get_concrete_function(self, *args, **kwargs):
        """TensorFlow's ``get_concrete_function``: the :class:`ConcreteFunction` of the
        signature of ``args`` and ``kwargs`` (Tensors, arrays or :class:`TensorSpec` leaves,
        Python values; with none and an ``input_signature``, its specs), traced now when
        every spec's shape is known (not run: no Variable changes, unless the trace creates
        Variables, whose initial values are then computed by one run on zeros, the other
        Variables it assigns being put back).

        A spec with ``None`` dimensions is traced once per size at the calls (XLA compiles
        static shapes); its ``structured_outputs`` are known after the first call. Raises
        ``TypeError`` for arguments that do not fit ``input_signature``."""
        return self._concrete(args, kwargs, _UNBOUND)

    def _concrete(self, args, kwargs, instance):
        jax = self._jax or _jax()
        if not args and not kwargs and self._signature is not None:
            args = tuple(self._signature)
        specs = jax.tree_util.tree_map(_spec_of, (args, kwargs),
                                       is_leaf=lambda x: isinstance(x, TensorSpec))
        if self._signature is not None:
            self._check_signature(specs[0])
        concrete = ConcreteFunction(self, instance, *specs)
        if concrete._known:
            zeros = jax.tree_util.tree_map(
                lambda x: Tensor(np.zeros(x.shape, x.dtype)) if isinstance(x, TensorSpec) else x,
                specs, is_leaf=lambda x: isinstance(x, TensorSpec))
            concrete._program = self._trace_only(*zeros, instance)
        return concrete

    def _trace_only(self, args, kwargs, instance):
        """The program of a call with these arguments, traced if new, not run (but for a first
        trace that creates Variables: see :meth:`get_concrete_function`)."""
        self._jax = self._jax or _jax()
        leaves, treedef, key = self._signature_key(args, kwargs, instance)
        key, program = self._find(key, leaves)
        if program is not None:
            return program
        bound = instance is not _UNBOUND
        func = functools.partial(self._traced(), instance) if bound else self._traced()
        with self._lock:
            program = _Program(self, func, treedef, leaves, first=self._traces == 0)
            self._note_trace(key, args, kwargs, bound)
            self._traces += 1
            if program.created:
                kept = [(v, v.read_value()) for v in program.changed]
                program.run(leaves)
                for v, value in kept:
                    v.assign(value)
                program = _Program(self, func, treedef, leaves, first=False)
            self._programs[key] = program
        return program

    def pretty_printed_concrete_signatures(self, verbose=True) -> str:
        """TensorFlow's listing of the signatures traced so far, in trace order: per trace
        its ``Input Parameters`` (name, kind, and a :class:`TensorSpec` per Tensor,
        ``Literal[value]`` per Python value, ``List[...]``/``Tuple[...]``/``Dict[...]`` for
        containers), ``Output Type`` and ``Captures`` (always ``None``: tapegrad's programs
        take the Variables they use as inputs), the traces separated by a blank line; ``""``
        before the first trace. ``verbose`` is accepted for TensorFlow's signature."""
        jax = self._jax or _jax()
        blocks = []
        for key, program in list(self._programs.items()):
            bound = key[0] == _SELF
            treedef, leaf_keys = key[-2:]
            args, kwargs = jax.tree_util.tree_unflatten(treedef, [  # keys as _leaf_key gives
                _Literal(k[2]) if k[0] == "static" else TensorSpec(*k[k[0] == "variable":][:2])
                for k in leaf_keys])
            try:
                params = list(inspect.signature(self._func).parameters.values())[bound:]
            except (TypeError, ValueError):
                params = []
            lines = ["Input Parameters:"]
            for k, a in enumerate(args):
                p = params[k] if k < len(params) else None
                name, kind = (p.name, p.kind.name) if p else (f"arg_{k}", "VAR_POSITIONAL")
                lines.append(f"  {name} ({kind}): {_spec_text(a)}")
            for name, a in kwargs.items():
                lines.append(f"  {name} (KEYWORD_ONLY): {_spec_text(a)}")
            outs = list(program.out_leaves)
            for k in program.tensors:
                outs[k] = TensorSpec(tuple(outs[k].shape), _backend.np_dtype(outs[k].dtype))
            out = jax.tree_util.tree_unflatten(program.out_tree, outs)
            lines += ["Output Type:", f"  {_spec_text(out)}", "Captures:", "  None"]
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    def _check_signature(self, args):
        if len(args) != len(self._signature):
            raise TypeError(f"{self.__name__}: input_signature has {len(self._signature)} "
                            f"TensorSpec(s) but the call passes {len(args)} positional "
                            "argument(s)")
        for k, (a, spec) in enumerate(zip(args, self._signature)):
            if not (hasattr(a, "shape") and spec.is_compatible_with(a)):
                got = (f"shape {tuple(a.shape)} and dtype {_backend.np_dtype(a.dtype)}"
                       if hasattr(a, "shape") else f"a {type(a).__name__}")
                rank = (f" (rank {len(a.shape)} where the spec has rank {len(spec.shape)})"
                        if hasattr(a, "shape") and len(a.shape) != len(spec.shape) else "")
                raise TypeError(f"{self.__name__}: argument {k} has {got}, which does not fit "
                                f"its input_signature {spec!r}{rank}")


class _Literal:
    """A Python value in a printed signature (``Literal[3]``)."""

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Literal[{self.value!r}]"


def _spec_text(x) -> str:
    """A signature's structure as TensorFlow prints it: ``List[Literal[1], TensorSpec(...)]``."""
    if isinstance(x, (list, tuple)):
        return (f"{'List' if isinstance(x, list) else 'Tuple'}"
                f"[{', '.join(_spec_text(v) for v in x)}]")
    if isinstance(x, dict):
        return f"Dict[{', '.join(f'{k!r}: {_spec_text(v)}' for k, v in x.items())}]"
    return "None" if x is None else repr(x) if isinstance(x, (TensorSpec, _Literal)) else (
        f"Literal[{x!r}]")


def _spec_of(x):
    """A leaf of ``get_concrete_function``'s arguments: a Tensor or array as its
    :class:`TensorSpec` (a Variable and a Python value as they are)."""
    if isinstance(x, TensorSpec) or isinstance(x, Variable):
        return x
    if type(x) is Tensor or isinstance(x, DeviceTensor) or _is_array(x):
        v = _raw(x)
        return TensorSpec(tuple(v.shape), _backend.np_dtype(v.dtype))
    return x


class ConcreteFunction:
    """One signature of a :class:`Function` (``f.get_concrete_function(...)``), callable
    with Tensors that fit it.

    ``structured_input_signature``: ``(args, kwargs)`` with :class:`TensorSpec` leaves for
    the Tensors (Variables and Python values as given); ``structured_outputs``: the result's
    structure with :class:`TensorSpec` leaves for its Tensors. A call takes the arguments in
    the same structure: a Tensor (or array) where a spec is, of its dtype and rank, with its
    sizes where they are not ``None``; the same Variables and Python values. Raises
    ``TypeError`` naming the argument otherwise, as TensorFlow does.
    """

    def __init__(self, function, instance, args, kwargs):
        self._function, self._instance = function, instance
        self.structured_input_signature = (tuple(args), dict(kwargs))
        jax = _jax()
        self._leaves, self._treedef = jax.tree_util.tree_flatten(
            self.structured_input_signature, is_leaf=lambda x: isinstance(x, TensorSpec))
        self._known = all(None not in x.shape for x in self._leaves if isinstance(x, TensorSpec))
        self._program = None
        self.__name__ = function.__name__

    @property
    def structured_outputs(self):
        """The result's structure, a :class:`TensorSpec` per Tensor (``ValueError`` before
        the first call when the signature has ``None`` dimensions: not traced yet)."""
        if self._program is None:
            raise ValueError(f"{self.__name__}: the concrete function of a signature with None "
                             "dimensions is traced per size at its calls (XLA compiles static "
                             "shapes); call it once before reading structured_outputs")
        p = self._program
        leaves = list(p.out_leaves)
        for k in p.tensors:
            leaves[k] = TensorSpec(tuple(leaves[k].shape), _backend.np_dtype(leaves[k].dtype))
        return _jax().tree_util.tree_unflatten(p.out_tree, leaves)

    def __call__(self, *args, **kwargs):
        jax = _jax()
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        if treedef != self._treedef:  # TensorFlow's call form: the Tensor arguments only
            args = self._with_static(args)
            leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        if treedef != self._treedef:
            raise TypeError(f"{self.__name__}: a concrete function takes arguments of the "
                            f"structure {self._treedef}, got {treedef}")
        for k, (spec, x) in enumerate(zip(self._leaves, leaves)):
            ok = (hasattr(x, "shape") and spec.is_compatible_with(x)
                  if isinstance(spec, TensorSpec) else x is spec or (
                      not isinstance(x, Tensor) and not isinstance(spec, Tensor) and x == spec))
            if not ok:
                got = (f"shape {tuple(x.shape)} and dtype {_backend.np_dtype(_raw(x).dtype)}"
                       if hasattr(x, "shape") else repr(x))
                raise TypeError(f"{self.__name__}: argument leaf {k} of the concrete function "
                                f"is {got}, which does not fit {spec!r}; call the tg.function "
                                "itself for another signature")
        out = self._function._call(args, kwargs, self._instance)
        if self._program is None:
            self._program = self._function._trace_only(args, kwargs, self._instance)
        return out

    def _with_static(self, args):
        """``args`` with the traced positional arguments that hold no Tensor (Python values,
        objects such as a Module) put back in place: TensorFlow's concrete function takes only
        the others. ``args`` as given when their count is not that of the others."""
        jax = _jax()
        traced = self.structured_input_signature[0]
        dynamic = [any(isinstance(x, (TensorSpec, Tensor)) for x in jax.tree_util.tree_leaves(
            a, is_leaf=lambda x: isinstance(x, TensorSpec))) for a in traced]
        if sum(dynamic) != len(args) or all(dynamic):
            return args
        given = iter(args)
        return tuple(next(given) if d else a for a, d in zip(traced, dynamic))

    def __repr__(self):
        return f"<ConcreteFunction {self.__name__}{self.structured_input_signature}>"


class _BoundFunction:
    """A :class:`Function` bound to an instance (``Function.__get__``): calls pass the instance
    as the Python function's first argument, as a static value told apart by identity, not an
    input (``input_signature`` describes the other arguments)."""

    __slots__ = ("__self__", "__func__")

    def __init__(self, function, instance):
        self.__func__ = function
        self.__self__ = instance

    def __call__(self, *args, **kwargs):
        return self.__func__._call(args, kwargs, self.__self__)

    def get_concrete_function(self, *args, **kwargs):
        """As :meth:`Function.get_concrete_function`, for this instance."""
        return self.__func__._concrete(args, kwargs, self.__self__)

    def __getattr__(self, name):  # __name__, experimental_get_tracing_count, ...
        return getattr(self.__func__, name)

    def __repr__(self):
        return f"<bound tg.Function {describe_fn(self.__func__._func)} of {self.__self__!r}>"


class RetracingWarning(UserWarning):
    """A ``tg.function`` keeps tracing new signatures (TensorFlow logs this as a warning)."""


_UNBOUND = object()  # the instance of a call that is not a method call
_SELF = "<self>"  # marks the keys of method calls, followed by the instance's id
# warn when this many of the last _RETRACE_WINDOW calls traced (TensorFlow's numbers)
_RETRACE_THRESHOLD, _RETRACE_WINDOW = 5, 10


def _changed_leaves(last, key) -> set:
    """The indices of the argument leaves whose keys differ between two call keys; ``{None}``
    if the structure differs, ``{"self"}`` if the instance of a method call does."""
    if last[0] == _SELF or key[0] == _SELF:
        if last[:2] != key[:2]:
            return {"self"}
        last, key = last[2:], key[2:]
    if last[0] != key[0] or len(last[1]) != len(key[1]):
        return {None}
    return {k for k, (a, b) in enumerate(zip(last[1], key[1])) if a != b}


def _parameter_names(func, bound):
    """The names of ``func``'s positional parameters (without ``self`` for a method)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names[1:] if bound else names


def _describe_path(path, names):
    """``argument 1 ('x')[0]``: an argument leaf by its path in ``(args, kwargs)``."""
    jax = _jax()
    where, rest = path[1], path[2:]
    if path[0].idx == 0:
        k = where.idx
        what = f"argument {k}" + (f" ({names[k]!r})" if k < len(names) else "")
    else:
        what = f"argument {where.key!r}"
    return what + (jax.tree_util.keystr(tuple(rest)) if rest else "")


def _tensor_inputs(args):
    """``(key, inputs)`` of a call whose arguments are all Tensors holding NumPy or (concrete)
    JAX arrays (device-resident ones included): the key is their shapes and dtypes, which
    decide the program as the call's full key does, and the inputs are the arrays the
    program takes (as :func:`_input` gives them). None for any other call (a tracer among
    them: the call is inlined into a trace)."""
    key, inputs = [], []
    for a in args:
        kind = type(a)
        if kind is DeviceTensor:
            v = device_array(a)
            if v is None:  # rebound since: its host value
                v = a._value
                if type(v) not in _AS_IS:
                    return None
        elif kind is Tensor:
            v = a._value
            if type(v) not in _AS_IS:
                return None
        else:
            return None
        key.append(v.shape)
        key.append(v.dtype)
        inputs.append(v)
    return tuple(key), inputs


def _is_array(x) -> bool:
    """An array or array scalar (not a Tensor, not a dtype such as ``tg.int32``, which is a
    class with the array methods)."""
    return isinstance(x, (np.ndarray, np.generic)) or (
        not isinstance(x, (Tensor, type)) and hasattr(x, "__array_namespace__"))


def _leaf_key(x, name):
    """What of an argument leaf the signature depends on."""
    if type(x) is Tensor:
        v = x._value
        return tuple(v.shape), _backend.np_dtype(v.dtype)
    if isinstance(x, Variable):  # by its spec, as TensorFlow (the program is rebound to it)
        v = x._peek()
        return "variable", tuple(v.shape), _backend.np_dtype(v.dtype), x.trainable
    if isinstance(x, Tensor) or _is_array(x):
        v = x._peek() if isinstance(x, Tensor) else x
        return tuple(v.shape), _backend.np_dtype(v.dtype)
    try:
        hash(x)
    except TypeError:
        raise TypeError(f"{name}: an argument of type {type(x).__name__} is neither a Tensor "
                        "nor a hashable Python value; tg.function traces once per value of a "
                        "Python argument, so pass it as a Tensor or a tuple") from None
    return ("static", type(x).__name__, x)


class _Program:
    """One traced and compiled signature of a :class:`Function`."""

    def __init__(self, owner, func, treedef, leaves, first):
        jax = self.jax = _jax()
        self.name = owner.__name__
        self.func = func  # the Python function; for a method, bound to its instance
        self.treedef = treedef
        self.dynamic = [k for k, x in enumerate(leaves)
                        if (isinstance(x, Tensor) and not isinstance(x, Variable)) or _is_array(x)]
        dyn = set(self.dynamic)  # the static leaves, kept to rebuild the arguments (no arrays)
        self.template = [None if k in dyn else x for k, x in enumerate(leaves)]
        self.var_args = [(k, x) for k, x in enumerate(leaves) if isinstance(x, Variable)]
        # a Variable left holding a tracer (made by an earlier trace that failed) is neither
        # an input nor created by this trace
        candidates = [v for v in visible_variables()
                      if device_array(v) is not None
                      or not isinstance(v._value, jax.core.Tracer)]
        info = {}

        def pure(var_vals, dyn_vals):
            # the Variables read the traced values in this thread only: other threads' eager
            # steps go on with the real ones
            with bind_variables(zip(candidates, var_vals)) as scope:
                args, kwargs = self._arguments([Tensor(v) for v in dyn_vals])
                with config.trace_scope():
                    out = self.func(*args, **kwargs)
                out_leaves, out_tree = jax.tree_util.tree_flatten(out)
                tensors = [k for k, o in enumerate(out_leaves) if isinstance(o, Tensor)]
                changed = [k for k, (v, val) in enumerate(zip(candidates, var_vals))
                           if scope.values[v._id] is not val]
                created = scope.created
                info.update(out_leaves=out_leaves, out_tree=out_tree, tensors=tensors,
                            changed=changed, created=created)
                as_jax = _backend.as_jax  # values of another backend: via NumPy
                return ([as_jax(_input(out_leaves[k])) for k in tensors],
                        [as_jax(_input(candidates[k])) for k in changed],
                        [as_jax(_input(v)) for v in created])

        var_avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in candidates]
        dyn_avals = [jax.ShapeDtypeStruct(tuple(leaves[k].shape),
                                          _backend.np_dtype(_raw(leaves[k]).dtype))
                     for k in self.dynamic]
        # the enclosing tapes and accumulators do not see the trace's ops (on tracers): they
        # record the call as one op; observers (check-numerics) do, to check in the program
        paused = [t for t in _records.trace_entries() if t._observer and not t._differentiates]
        try:
            # float64 as eagerly, for tapegrad's programs only; float32 products not in TF32
            with config.x64_scope(jax), config.precision_scope(jax), \
                    _records.trace_stack(paused):
                closed = jax.make_jaxpr(pure)(var_avals, dyn_avals)
        except Exception as e:  # noqa: BLE001 - re-raised, explained where it is a tracing error
            raise _explained(e, self.name) from e
        self.created = info["created"]
        if self.created and not first:
            names = ", ".join(repr(v.name) for v in self.created)
            raise ValueError(
                f"tg.function({self.name}) only supports Variables created on the first call "
                f"(as tf.function); this trace created {names}. Create them once, outside the "
                "function or on its first call (e.g. `if self.v is None: self.v = tg.Variable(...)`)")
        used_ids = _used_inputs(closed.jaxpr)
        var_invars = closed.jaxpr.invars[:len(candidates)]
        self.used = [k for k, iv in enumerate(var_invars) if id(iv) in used_ids]
        self.variables = [candidates[k] for k in self.used]
        self.changed = [candidates[k] for k in info["changed"]]
        self.out_leaves, self.out_tree, self.tensors = (info["out_leaves"], info["out_tree"],
                                                         info["tensors"])
        self.single = self.tensors == [0] and self.out_tree == jax.tree_util.tree_structure(0)
        self.n_out = len(self.tensors)
        self.state = (*self.changed, *self.created)  # written back after each call
        from jax.extend.core import jaxpr_as_fun

        fun = jaxpr_as_fun(closed)
        used, n = set(self.used), len(candidates)
        fill = [(v.shape, v.dtype) for v in candidates]

        n_used = len(self.used)

        def program(*vals):  # the used Variables' values, then the dynamic arguments
            it = iter(vals[:n_used])
            full = [next(it) if k in used else jax.numpy.zeros(*fill[k]) for k in range(n)]
            return fun(*full, *vals[n_used:])

        # Donation, decided here so that a signature compiles once: the used Variables the
        # program also writes give their buffers to their new values; a call passes a copy of
        # those something else holds (_donated)
        changed = set(map(id, self.changed))
        self.donated = tuple(k for k, v in enumerate(self.variables) if id(v) in changed)
        self.compiled = jax.jit(program, donate_argnums=self.donated)
        self.in_x64 = config.x64_caller(jax)
        # which recorded inputs (dynamic arguments, then used Variables) each output depends on:
        # an input no floating output depends on gets a None gradient, as in TensorFlow
        where = {len(candidates) + j: j for j in range(len(self.dynamic))}
        where.update({k: len(self.dynamic) + i for i, k in enumerate(self.used)})
        self.deps = tuple(frozenset(where[k] for k in d if k in where)
                          for d in _dependence(closed.jaxpr)[:self.n_out])
        self._make_calldef()

    def _make_calldef(self):
        replay, deps = self._replay_function(), self.deps
        names = [*[f"args[{i}]" for i in range(len(self.dynamic))],
                 *_registry.variable_names(self.variables)]
        self.calldef = _registry.CallDef(f"Function:{self.name}", names,
                                         _vjp_gradient(replay, deps),
                                         jvp=_jvp_rule(replay, deps), replay=replay, function=replay,
                                         variables=self.variables)

    # --- Variable arguments, by their specs ---------------------------------------------------
    def traced_with(self, leaves) -> bool:
        """Whether the Variable arguments among ``leaves`` are those this program runs on."""
        return all(leaves[k] is v for k, v in self.var_args)

    def shares(self, leaves) -> bool:
        """Whether this program, traced with other Variable arguments of the same specs, may
        run on those of ``leaves``: its trace created no Variable and assigned none but its
        Variable arguments (an optimizer step on an argument reads and writes the slots of
        that very Variable: such a function is traced per Variable), the new Variables alias
        each other as the traced ones did, and none of them is also a Variable the program
        reads or assigns other than through the arguments."""
        old = [v for _, v in self.var_args]
        new = [leaves[k] for k, _ in self.var_args]
        mine = {id(v) for v in old}
        if self.created or any(id(v) not in mine for v in self.changed):
            return False
        if any((a is b) != (c is d) for a, c in zip(old, new) for b, d in zip(old, new)):
            return False
        others = {id(v) for v in self.variables if id(v) not in mine}
        return not any(id(v) in others for v in new)

    def rebound(self, leaves):
        """A copy of this program running on the Variable arguments of ``leaves`` in place of
        those it was traced with (same compiled program; see :meth:`shares`)."""
        new = copy.copy(self)
        subst = {id(v): leaves[k] for k, v in self.var_args}

        def sub(v):
            return subst.get(id(v), v)

        new.template = [sub(x) if isinstance(x, Variable) else x for x in self.template]
        new.var_args = [(k, leaves[k]) for k, _ in self.var_args]
        new.variables = [sub(v) for v in self.variables]
        new.changed = [sub(v) for v in self.changed]
        new.state = (*new.changed, *self.created)
        new._make_calldef()
        return new

    def _arguments(self, tensors):
        """``(args, kwargs)`` of a call whose dynamic arguments are ``tensors``."""
        lv = list(self.template)
        for k, t in zip(self.dynamic, tensors):
            lv[k] = t
        return _jax().tree_util.tree_unflatten(self.treedef, lv)

    def run(self, leaves):
        """Call the compiled program on the leaves of a call's arguments; returns the result
        (see :meth:`call`)."""
        return self.call([_input(leaves[k]) for k in self.dynamic], leaves)

    def call(self, inputs, leaves):
        """Call the compiled program on ``inputs``, the dynamic leaves of a call's arguments as
        it takes them (:func:`_input`); ``leaves`` are the call's argument leaves, recorded on
        the recording tapes. Returns the result.

        The call is dispatched asynchronously (JAX's default): the returned Tensors and the
        Variables it assigns hold the program's device arrays, which the next call takes as
        they are; the first read of a value on the host waits (``_to_host``)."""
        if self.variables:
            # decided before the inputs list holds the arrays (refcounts)
            copied = self._copied() if self.donated else ()
            inputs = [*_variable_inputs(self.variables, self.jax), *inputs]
            for k in copied:  # the program deletes what it is given: a copy, made on the device
                if not isinstance(inputs[k], self.jax.core.Tracer):  # (an outer trace's value:
                    inputs[k] = self.jax.device_put(inputs[k], may_alias=False)  # not donated)
        try:  # in 64-bit mode, as traced: JAX keys its programs by the setting
            flat = self.in_x64(self.compiled, inputs)
        except self.jax.errors.JaxRuntimeError as e:  # a callback of tapegrad's raised
            raise _runtime_error(e, self.name) from None
        on_jax = _backend._default.__name__.startswith("jax")  # JAX is the eager backend too
        if self.single and not on_jax:
            outs = [on_device(flat[0], self.name)]
        else:
            outs = [_wrap(a) if on_jax else on_device(a, self.name) for a in flat[:self.n_out]]
        if _records.trace_entries():  # before the writes: the record keeps the values read
            self._record(leaves, self.variables, outs)
        if on_jax:
            set_state(self.state, flat[self.n_out:])
        elif self.state:  # device-resident: copied to the default backend when first read
            set_all_on_device(self.state, flat[self.n_out:], self.name)
        if self.single:
            return outs[0]
        result = list(self.out_leaves)
        for k, t in zip(self.tensors, outs):
            result[k] = t
        return self.jax.tree_util.tree_unflatten(self.out_tree, result)

    def _donated(self) -> tuple:
        """The positions (among the program's arguments, ``self.donated``: the Variables it
        reads and writes) whose Variable's old device array this call donates itself: those
        whose array nothing else holds (``sole_device_arrays``: no snapshot, no host copy, no
        other reference), so no value a user or a tape kept changes. None of them while a
        tape records (its record holds snapshots of the Variables). The others' arrays are
        copied and the copies donated (:meth:`_copied`), so the program is compiled once."""
        if _records.trace_entries():
            return ()
        return sole_device_arrays(self.variables, self.donated)

    def _copied(self) -> tuple:
        """The positions among ``self.donated`` whose arrays this call copies before giving
        them to the program: those :meth:`_donated` leaves out."""
        own = self._donated()
        return () if own == self.donated else tuple(k for k in self.donated if k not in own)

    # --- gradients through a call -------------------------------------------------------------
    def _replay_function(self):
        """The call as a pure function of (dynamic tensors, used Variables' values): the Python
        function replayed with the Variables bound to the given values, writes discarded."""
        variables = self.variables
        n_dyn = len(self.dynamic)

        def unbound(*tensors):  # the Variables as they are bound
            args, kwargs = self._arguments(tensors)
            out_leaves = _jax().tree_util.tree_leaves(self.func(*args, **kwargs))
            return [o for o in out_leaves if isinstance(o, Tensor)]

        def replay(*tensors):
            with _bound_to(variables, tensors[n_dyn:]):
                return unbound(*tensors[:n_dyn])

        replay.__name__ = self.name
        replay.variables, replay.unbound = variables, unbound
        return replay

    def _record(self, leaves, variables, outs):
        """Record the call as one op on the recording tapes (gradients through a call)."""
        if not any(_backend.is_floating(o.dtype) for o in outs):
            return
        inputs = [leaves[k] if isinstance(leaves[k], Tensor) else Tensor(_raw(leaves[k]))
                  for k in self.dynamic]
        record(self.calldef, (*inputs, *variables), {}, tuple(outs))


@contextlib.contextmanager
def _bound_to(variables, tensors):
    """Within the block, each of ``variables`` reads the value of the Tensor of ``tensors`` at
    its position (``bind_variables``), and the tapes and accumulators that trace the Tensor
    trace the Variable as a function of it: one identity op per pair, from the Tensor to the
    Variable's id. A compiled call's replay and gradient run so, on the values the call read;
    without the identity, reads of the Variable would be recorded as reads of the Variable
    only, and a tape or accumulator that differentiates them with respect to those Tensors
    (the gradient of a compiled call's gradient, forward over reverse) would see no
    dependence on them: a zero, not an error, for every derivative of order two and more in
    a Variable."""
    with bind_variables([(v, t._value) for v, t in zip(variables, tensors)]):
        for v, t in zip(variables, tensors):
            if t._id != v._id and _backend.is_floating(t.dtype):
                read = Tensor(t._value)
                read._id = v._id
                record(_READ_AS, (t,), {}, (read,))
        yield


# the Variable, bound to an input of a replay, reads that input: the identity
_READ_AS = _registry.CallDef("ReadBoundVariable", ("value",), lambda op, dy: [dy],
                             jvp=lambda op, t: t, is_custom=False)


def _raw(x):
    """An argument leaf's array, for its shape and dtype (a device-resident one not copied)."""
    return x._peek() if isinstance(x, Tensor) else x


def _input(x):
    """An argument leaf (Tensor or array) as the program takes it: a device-resident Tensor's
    device array (no copy), else its array (NumPy and JAX arrays as they are, others via
    NumPy)."""
    if isinstance(x, Tensor):
        a = device_array(x)
        if a is not None:
            return a
        x = x._value
    return x if type(x) in _AS_IS else _host(x)


def _variable_inputs(variables, jax) -> list:
    """``[_variable_input(v, jax) for v in variables]``, the device arrays found in one pass
    (what a call of a program that reads Variables does on each call)."""
    arrays = device_arrays(variables)
    for k, a in enumerate(arrays):
        if a is None:
            arrays[k] = _variable_input(variables[k], jax)
    return arrays


def _variable_input(v, jax):
    """Variable ``v``'s value as the program takes it: its device array, made from its host
    value on the first call that reads it and kept (``set_on_device``) until the value
    changes, so that a Variable a program only reads is not copied on each call."""
    a = device_array(v)
    if a is not None:
        return a
    a = v._value
    if isinstance(a, jax.Array):  # JAX's arrays and tracers (a binding of an outer trace)
        return a
    with config.x64_scope(jax):  # float64 stays float64
        d = jax.device_put(_host(a))
    set_on_device(v, d, host=a)
    return d


def _to_host(array, name):
    """The default backend's copy of ``array``, an output of the compiled function ``name``
    (the ``to_host`` extension point of the core): waits for the program; an error the
    program raised (a check-numerics or host-callback error) is raised here, naming it."""
    jax = sys.modules["jax"]
    try:
        a = np.asarray(array)
    except jax.errors.JaxRuntimeError as e:
        raise _runtime_error(e, name) from None
    default = _backend._default
    return a if default is np else _backend.asarray(a, xp=default)


def _runtime_error(error, name):
    """A program's run-time error (``JaxRuntimeError``, at the call or at the first wait) as
    the error tapegrad raises: ``NumericsError`` for check-numerics, ``TypeError`` for a host
    callback's, ``ConvergenceError`` for a solver's adjoint solve, naming the function; any other error as it is, with a note naming it."""
    found = re.search(r"(check_numerics: |host callback: |tg\.linalg\.\w+: the adjoint solve )"
                      r"(?:[^\n]*\n  )*[^\n]*", str(error))  # indented lines go with the first
    if found is None:
        error.add_note(f"raised by the program of tg.function({name})")
        return error
    kind = {"check_numerics: ": NumericsError, "host callback: ": TypeError}.get(
        found.group(1), ConvergenceError)
    return kind(f"tg.function({name}): {found.group(0)}")


_structural.extend(to_host=_to_host)

_AS_IS = {np.ndarray}  # concrete array types JAX takes as they are: NumPy's, JAX's once seen


def _host(a):
    """An input array as JAX takes it: NumPy and JAX arrays as they are, others via NumPy."""
    if isinstance(a, (np.ndarray, np.generic)) or type(a).__module__.startswith("jax"):
        if not isinstance(a, _jax().core.Tracer):
            _AS_IS.add(type(a))
        return a
    return _backend.to_numpy(a)


def _dependence(jaxpr) -> list:
    """For each output of ``jaxpr``, the set of positions of the inputs it depends on (an
    equation's outputs depend on all of its inputs; a literal on none)."""
    deps = {id(v): {k} for k, v in enumerate(jaxpr.invars)}
    for eqn in jaxpr.eqns:
        d = set().union(*(deps.get(id(v), ()) for v in eqn.invars))
        for v in eqn.outvars:
            deps[id(v)] = d
    return [deps.get(id(v), set()) for v in jaxpr.outvars]


def _used_inputs(jaxpr) -> set:
    """ids of the jaxpr's variables that an equation or an output reads."""
    used = {id(v) for eqn in jaxpr.eqns for v in eqn.invars}
    used.update(id(v) for v in jaxpr.outvars)
    return used


# --- the op a compiled call is on an outer tape, and its compiled gradient ---------------------
def _vjp_gradient(fn, deps):
    """The gradient function of a recorded call of the pure function ``fn``: the VJP of ``fn``,
    compiled, and recorded in turn on the tapes that record the gradient computation. ``deps``:
    for each output, the positions of the inputs it depends on; the others get ``None``."""
    def gradient(op, *dys):
        xs = op.inputs
        floating = tuple(k for k, o in enumerate(op.outputs)
                         if _backend.is_floating(o.dtype))
        grads = _compiled_vjp(fn, len(xs), floating)(*xs, *[dys[k] for k in floating])
        reached = set().union(*(deps[k] for k in floating))
        return [g if k in reached else None for k, g in enumerate(grads)]

    gradient.__wrapped__ = fn
    return gradient


def _replayed(fn, n_inputs, derive, suffix):
    """A :class:`Function` of ``(xs, ds)``: ``derive(sources, run, ds)`` with ``run()`` the
    recorded call ``fn`` replayed on the dynamic inputs among ``xs`` and ``sources`` those
    inputs then the Variables it reads, which are bound to the last inputs (their recorded
    values) meanwhile: the gradient or tangent computation too reads the Variables' recorded
    values (a compiled loop's gradient runs its body again), so all of it is a function of
    the inputs."""
    variables = list(fn.variables)
    n_dyn = n_inputs - len(variables)

    def rule(*tensors):
        xs, ds = tensors[:n_inputs], tensors[n_inputs:]
        with _bound_to(variables, xs[n_dyn:]):
            return derive([*xs[:n_dyn], *variables], lambda: fn.unbound(*xs[:n_dyn]), ds)

    rule.__name__ = f"{getattr(fn, '__name__', 'fn')}_{suffix}"
    return Function(rule, jit_compile=True)


@functools.lru_cache(maxsize=None)
def _compiled_vjp(fn, n_inputs, floating):
    """A :class:`Function` computing ``fn``'s VJP: ``(xs, dys) -> gradients of xs``."""
    def vjp(sources, run, dys):
        with GradientTape() as tape:
            tape.watch([s for s in sources if _backend.is_floating(s.dtype)])
            ys = run()
        return tuple(tape.gradient([ys[k] for k in floating], sources,
                                   output_gradients=list(dys),
                                   unconnected_gradients=UnconnectedGradients.ZERO))

    return _replayed(fn, n_inputs, vjp, "vjp")


def _jvp_rule(fn, deps):
    """The JVP rule of a recorded call of the pure function ``fn``: ``fn`` again under a
    forward-mode accumulator, compiled (so a ``while_loop`` without ``maximum_iterations``,
    which has a JVP but no VJP, works in forward mode through a compiled call), and recorded
    in turn on the tapes and accumulators that record the tangent computation. An output that
    depends on no input with a tangent (``deps``, as in :func:`_vjp_gradient`) gets ``None``."""
    def jvp(op, *ts):
        have = tuple(k for k, t in enumerate(ts) if t is not None)
        floating = tuple(k for k, o in enumerate(op.outputs) if _backend.is_floating(o.dtype))
        tangents = _compiled_jvp(fn, len(op.inputs), have, floating)(
            *op.inputs, *[ts[k] for k in have])
        out = [None] * len(op.outputs)
        for k, t in zip(floating, tangents):
            out[k] = t if deps[k] & set(have) else None
        return tuple(out)

    jvp.__wrapped__ = fn
    return jvp


@functools.lru_cache(maxsize=None)
def _compiled_jvp(fn, n_inputs, have, floating):
    """A :class:`Function` computing ``fn``'s JVP: ``(xs, tangents of xs[have]) -> tangents
    of the outputs[floating]`` (zeros where no tangent reaches)."""
    def jvp(sources, run, ts):
        with ForwardAccumulator([sources[k] for k in have], list(ts)) as acc:
            ys = run()
        return tuple(acc.jvp([ys[k] for k in floating],
                             unconnected_gradients=UnconnectedGradients.ZERO))

    return _replayed(fn, n_inputs, jvp, "jvp")


# --- NumPy forwards on traced values: host callbacks ------------------------------------------
class _HostCallback:
    """Runs an op's forward that needs concrete values (written with NumPy, or reading values)
    on traced inputs as ``jax.pure_callback``: XLA calls back into Python with the inputs'
    values at run time. The output shapes and dtypes come from a run of the forward on zeros
    of the inputs' shapes, at trace time. The op's gradient is still the registered one."""

    def wants(self, error, opdef) -> bool:
        jax = config.loaded_jax()
        return jax is not None and opdef.type not in _DATA_DEPENDENT and isinstance(
            error, (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError,
                    jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError))

    def __call__(self, opdef, values, attrs):
        jax = _jax()
        traced = [k for k, v in enumerate(values) if isinstance(v, jax.core.Tracer)]
        fixed = list(values)
        method = getattr(opdef, "vmap_method", "sequential")
        batched = method != "sequential"

        def forward(*arrays):
            vals = list(fixed)
            for k, a in zip(traced, arrays):
                vals[k] = np.asarray(a)
            out = opdef.forward(*vals, **attrs)
            return tuple(np.asarray(o) for o in out) if type(out) is tuple else np.asarray(out)

        def checked(*arrays):  # at run time: the shapes must be those found on zeros
            out = forward(*arrays)
            outs = out if type(out) is tuple else (out,)
            want = [(s.shape, s.dtype) for s in jax.tree_util.tree_leaves(spec)]
            # a vectorized forward called for a batch (tg.vmap): the inputs' leading axes more
            lead = arrays[0].ndim - values[traced[0]].ndim if batched and arrays else 0
            axes = np.broadcast_shapes(*[a.shape[:lead] for a in arrays]) if lead else ()
            got = [(o.shape[lead:] if o.shape[:lead] == axes else o.shape, o.dtype)
                   for o in outs]
            if got != want:
                raise TypeError(
                    f"host callback: op type {opdef.type!r} returned outputs of shapes and dtypes "
                    f"{got} at run time but {want} on zeros at trace time: its output shape "
                    "depends on its input values, which a compiled function cannot have. Use "
                    "tg.function(jit_compile=False), or give the op a fixed output shape")
            return out

        mesh = getattr(_callback_mesh, "mesh", None)  # inside a tg.distribute step
        specs = shapes = [values[k].shape for k in traced]
        manual = getattr(_callback_mesh, "manual", False)  # already in the shard_map's body
        if mesh is not None and not manual:  # per shard: inputs split along a first axis
            specs, shapes = _shard_specs(jax, mesh, [values[k] for k in traced])
        zeros = [np.zeros(s, _backend.np_dtype(values[k].dtype)) for k, s in zip(traced, shapes)]
        with np.errstate(all="ignore"):
            try:
                sample = forward(*zeros)
            except Exception as e:  # noqa: BLE001 - re-raised with what was being done
                raise TypeError(
                    f"op type {opdef.type!r} needs the values of its inputs (its forward uses "
                    "NumPy or Python numbers), so inside tg.function it runs as a host "
                    "callback, whose output shapes are found by running it on zeros; that run "
                    f"failed with {type(e).__name__}: {e}. Write the forward against the Array "
                    "API namespace of its inputs, or use tg.function(jit_compile=False)") from e
        if any(z.size for z in zeros) and any(
                o.size == 0 for o in (sample if type(sample) is tuple else (sample,))):
            # XLA never calls back for an empty output, so the run-time check cannot see it
            raise TypeError(
                f"host callback: op type {opdef.type!r} gives an empty output for zeros of its "
                "input shapes, so its output shape likely depends on its input values, which a "
                "compiled function cannot have. Use tg.function(jit_compile=False), or give the "
                "op a fixed output shape")
        spec = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), sample)
        if mesh is None:
            return jax.pure_callback(checked, spec, *[values[k] for k in traced],
                                     vmap_method=method)
        return _per_shard(jax, mesh, opdef, checked, spec, specs, manual)(
            *[values[k] for k in traced])


# Set by tg.distribute while it traces a step: its mesh (one axis). A NumPy forward then runs
# per shard (jax.shard_map around the callback: each device calls back with its own rows);
# a callback of the whole batch would be placed on one device by XLA's partitioner. With
# .manual set (a per-replica step, traced inside its own jax.shard_map) the values are already
# a device's: only the 64-bit crossing of _per_shard is applied.
_callback_mesh = threading.local()


def _shard_specs(jax, mesh, values):
    """The ``PartitionSpec`` of each traced input of a per-shard callback (split along the
    first axis where the mesh's size divides it, else whole on every device), and the shape
    each device sees."""
    P, n, axis = jax.sharding.PartitionSpec, mesh.size, mesh.axis_names[0]
    split = [v.ndim > 0 and v.shape[0] % n == 0 for v in values]
    return ([P(axis) if s else P() for s in split],
            [(v.shape[0] // n, *v.shape[1:]) if s else v.shape for v, s in zip(values, split)])


def _per_shard(jax, mesh, opdef, checked, spec, in_specs, manual=False):
    """The callback as a ``jax.shard_map`` over ``mesh``: outputs split along their first axis
    when an input is (the rows of each shard), else whole. ``manual``: already inside a
    ``shard_map`` over ``mesh``; the callback is called as it is (no shard_map of its own)."""
    P, axis = jax.sharding.PartitionSpec, mesh.axis_names[0]
    split = any(s != P() for s in in_specs)
    outs = jax.tree_util.tree_leaves(spec)
    if split and any(o.ndim == 0 for o in outs):
        raise TypeError(
            f"host callback: op type {opdef.type!r} runs per shard inside a tg.distribute step "
            "(each device calls its NumPy forward with its rows of the batch), but it returns a "
            "0-d value, which cannot be put together from the shards. Return one value per "
            "row, or write the forward against the Array API namespace of its inputs")
    out_specs = jax.tree_util.tree_map(lambda o: P(axis) if split else P(), spec)
    # The callback runs in the devices' threads, where JAX's 64-bit mode (thread-local) is
    # off: JAX would cast float64 arguments and results to float32 there. 64-bit values
    # therefore cross as uint32 pairs (bitcasts, exact) and are viewed back on each side.
    wide = [np.dtype(o.dtype).itemsize == 8 and np.dtype(o.dtype).kind in "fiu" for o in outs]
    out_tree = jax.tree_util.tree_structure(spec)
    narrow = [jax.ShapeDtypeStruct((*o.shape, 2), np.uint32) if w else o
              for o, w in zip(outs, wide)]

    def host(*arrays):  # NumPy, in a device's thread
        args = [np.ascontiguousarray(a).view(dt)[..., 0] if dt is not None else a
                for a, dt in zip(arrays, dtypes)]
        got = jax.tree_util.tree_leaves(checked(*args))
        return tuple(np.ascontiguousarray(g).reshape(*g.shape, 1).view(np.uint32) if w else g
                     for g, w in zip(got, wide))

    def shard(*a):
        a = [jax.lax.bitcast_convert_type(x, jax.numpy.uint32) if dt is not None else x
             for x, dt in zip(a, dtypes)]
        got = jax.pure_callback(host, tuple(narrow), *a, vmap_method="sequential")
        got = [jax.lax.bitcast_convert_type(g, o.dtype) if w else g
               for g, o, w in zip(got, outs, wide)]
        return jax.tree_util.tree_unflatten(out_tree, got)

    def run(*values):
        dtypes[:] = [np.dtype(v.dtype) if np.dtype(v.dtype).itemsize == 8 and
                     np.dtype(v.dtype).kind in "fiu" else None for v in values]
        if manual:
            return shard(*values)
        return jax.shard_map(shard, mesh=mesh, in_specs=tuple(in_specs), out_specs=out_specs,
                             check_vma=False)(*values)

    dtypes = []
    return run


_structural.extend(host_callback=_HostCallback())


# --- errors -----------------------------------------------------------------------------------
_DATA_DEPENDENT = {"NonZero", "UniqueAll", "UniqueCounts", "UniqueInverse", "UniqueValues"}

def _explained(error, name):
    """``error`` as a ``TypeError`` that names the user's line and what to do, for JAX's
    tracing errors; other errors unchanged."""
    jax = _jax()
    kinds = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
             jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError,
             jax.errors.NonConcreteBooleanIndexError)
    if not isinstance(error, kinds):
        return error
    site, op_type = _site(error.__traceback__)
    if isinstance(error, jax.errors.NonConcreteBooleanIndexError) or op_type in _DATA_DEPENDENT:
        return TypeError(
            f"tg.function({name}): op type {op_type!r} (at {site}) has an output whose shape "
            "depends on the values of its input, which XLA cannot compile (nonzero, "
            "unique_*, boolean-mask indexing). Use tg.function(jit_compile=False) for this "
            "function, or compute a fixed-shape result (e.g. tg.where(mask, x, 0))")
    if op_type is not None:
        return TypeError(
            f"tg.function({name}): op type {op_type!r} (at {site}) needs the concrete value of "
            "a traced tensor, which a compiled function does not have: its forward converts a "
            "value to a Python number or a NumPy array. Write the forward against the Array "
            "API namespace of its inputs, or use tg.function(jit_compile=False)")
    return TypeError(
        f"tg.function({name}): the Python code at {site} needs the concrete value of a traced "
        "tensor (a Python `if`/`while` on a tensor, bool(), float(), int() or .numpy()); "
        "inside a compiled function values are symbolic. Write a branch on a tensor as "
        "tg.cond(pred, true_fn, false_fn) (or tg.where for values), a loop as "
        "tg.while_loop(cond, body, loop_vars) or tg.lax.scan / tg.lax.fori_loop; or move "
        "the code out of the function, or use tg.function(jit_compile=False)")


def _site(tb):
    """``("file:line", op type)``: the innermost frame of user code in a traceback, and the
    tapegrad op that was running there, if any."""
    site, op_type = "an unknown place", None
    skip = _OWN_DIRS + tuple(os.path.dirname(m.__file__) for m in
                             (sys.modules.get("jax"), sys.modules.get("numpy")) if m)
    while tb is not None:
        frame = tb.tb_frame
        name = frame.f_code.co_filename
        if not name.startswith(skip) and "site-packages" not in name:
            site = f"{name}:{tb.tb_lineno}"
        opdef = (frame.f_locals.get("opdef") or frame.f_globals.get("opdef")
                 if frame.f_code.co_name == "op" else None)
        if opdef is not None and hasattr(opdef, "type"):
            op_type = opdef.type
        tb = tb.tb_next
    return site, op_type
