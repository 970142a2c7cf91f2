"""``tg.saved_model``: export a ``tg.Module``'s compiled functions and Variables to a directory,
and load them back without the Python code that defined them (TensorFlow 2's
``tf.saved_model.save`` / ``load``).

An export directory holds:

* ``tapegrad_saved_model.json``: the format name and version, the Variables (path, name,
  shape, dtype, trainable), each function (its file, the Variables it reads and assigns, its
  input specs and parameter names) and the signatures;
* ``variables.safetensors``: the Variables' values (safetensors: no pickle; complex128, which
  safetensors lacks, as float64 pairs in a last axis of 2, as ``tg.train`` stores it);
* ``functions/<name>.jaxexport``: each function as JAX's serialized export
  (``jax.export``: StableHLO plus its calling convention), with its VJP.

Each function is exported as a JAX function of ``(*variable values, *arguments)`` whose VJP
(``jax.custom_vjp``) is tapegrad's reverse pass, so custom and registered gradients are what
the loaded function's gradient computes. Loading deserializes each function and turns it into a
tapegrad op with :func:`tapegrad.from_jax`, the Variables its inputs: ``GradientTape``
differentiates the loaded function with respect to its arguments and the loaded Variables,
and no Python code of the model, nor its op types, is needed.
"""
from __future__ import annotations

import importlib.metadata
import inspect
import json
import os
import re
import shutil
import tempfile

import numpy as np

from . import _backend, config
from ._function import _SELF as _FunctionSelf
from ._function import Function, TensorSpec
from ._tape import GradientTape, UnconnectedGradients
from ._tensor import Tensor
from ._variables import Variable, bind_variables, visible_variables
from .errors import SavedModelError
from .interop import from_jax
from .module import Module, name_scope
from .ops import conj
from .train import _Graph, _safetensors, _stored

__all__ = ["save", "load", "SaveOptions", "LoadedFunction"]

FORMAT = "tapegrad-saved-model"
VERSION = 1
METADATA = "tapegrad_saved_model.json"
VARIABLES = "variables.safetensors"
FUNCTIONS = "functions"
DEFAULT_SIGNATURE = "serving_default"
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")  # TensorFlow's key for a single signature function
_HINT = 'install JAX with: pip install "tapegrad[jit]"'


def _jax():
    """The ``jax`` module (with ``jax.export``); ``ImportError`` saying what to install when
    JAX or flatbuffers is missing."""
    try:
        jax = config.jax_module()
        import jax.export  # noqa: F401
    except ImportError:
        raise ImportError(f"tg.saved_model stores functions as JAX exports; JAX is not "
                          f"installed: {_HINT}") from None
    try:
        import flatbuffers  # noqa: F401 - what jax.export serializes with
    except ImportError:
        raise ImportError(f"tg.saved_model stores functions as JAX exports, which JAX "
                          f"serializes with flatbuffers, which is not installed: {_HINT} (or "
                          "pip install flatbuffers)") from None
    return jax


class SaveOptions:
    """Options of :func:`save` (TensorFlow's ``tf.saved_model.SaveOptions``, other fields).

    Args:
        vjp_order: how many orders of reverse-mode derivatives the export carries (JAX's
            ``Exported.serialize(vjp_order=...)``): 1 (default) for gradients, 2 for
            gradients of gradients (a larger export). A loaded function differentiated beyond
            it raises ``ValueError`` saying so.
        platforms: the platforms the functions are compiled for, a sequence of JAX platform
            names (``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``); default: the platform JAX
            runs on now. A loaded function runs only on one of them.
        experimental_custom_gradients: TensorFlow's option, True (its default): the export's
            derivatives are those the function computes, ``tg.custom_gradient`` rules included.
            False (derivatives of the forward computation instead) is not supported.

    Raises ``ValueError`` for a ``vjp_order`` that is not an int >= 0 or
    ``experimental_custom_gradients`` other than True, ``TypeError`` for ``platforms`` that
    are not strings.
    """

    def __init__(self, vjp_order=1, platforms=None, experimental_custom_gradients=True):
        if experimental_custom_gradients is not True:
            raise ValueError("tg.saved_model.SaveOptions: experimental_custom_gradients="
                             f"{experimental_custom_gradients!r} is not supported: an export "
                             "carries the gradients the function computes, custom_gradient "
                             "rules included (TensorFlow's default, True); leave it out")
        if isinstance(vjp_order, bool) or not isinstance(vjp_order, int) or vjp_order < 0:
            raise ValueError(f"tg.saved_model.SaveOptions: vjp_order must be an int >= 0 (the "
                             f"orders of gradients the export carries), got {vjp_order!r}")
        if platforms is not None:
            platforms = tuple(platforms)
            if not all(isinstance(p, str) for p in platforms):
                raise TypeError(f"tg.saved_model.SaveOptions: platforms must be JAX platform "
                                f"names such as 'cpu' or 'cuda', got {platforms!r}")
        self.vjp_order = vjp_order
        self.platforms = platforms

    def __repr__(self):
        return f"SaveOptions(vjp_order={self.vjp_order}, platforms={self.platforms!r})"


# ==============================================================================================
# save
# ==============================================================================================
class _Entry:
    """One function to export: its key (file name), Python function, instance (or None),
    input signature and parameter names."""

    def __init__(self, key, func, instance, signature, label):
        self.key, self.func, self.instance, self.signature = key, func, instance, signature
        self.label = label  # how messages name it
        self.params = _parameter_names(func, instance is not None, len(signature))

    def call(self, args):
        return self.func(self.instance, *args) if self.instance is not None else self.func(*args)


def _parameter_names(func, bound, n):
    try:
        params = [p.name for p in inspect.signature(func).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    params = params[1:] if bound else params
    return params[:n] if len(params) >= n else [f"arg{k}" for k in range(n)]


def _traced_signature(function, instance, label):
    """The ``input_signature`` of a ``tg.function`` without one, from the calls it was traced
    for (TensorFlow saves the concrete functions already traced): a list of ``TensorSpec``
    when ``function`` (bound to ``instance``, or None) was traced for one signature of
    positional Tensors only; ``None`` when never. Raises ``ValueError`` for several traced
    signatures or Python values among the arguments (the export stores one signature per
    function)."""
    jax = config.jax_module()
    found = set()
    for key in function._programs:
        if instance is not None:
            if key[0] != _FunctionSelf or key[1] != id(instance):
                continue
            key = key[2:]
        elif key[0] == _FunctionSelf:
            continue
        treedef, leaves = key
        if (treedef != jax.tree_util.tree_structure((tuple(range(len(leaves))), {}))
                or not all(len(k) == 2 and isinstance(k[0], tuple) for k in leaves)):
            raise ValueError(f"tg.saved_model.save: {label} has no input_signature and was "
                             "traced for arguments other than positional Tensors (Python values, "
                             "Variables, nests); give it @tg.function(input_signature=[...])")
        found.add(tuple(leaves))
    if not found:
        return None
    if len(found) > 1:
        shown = "; ".join(str([TensorSpec(*k) for k in sig]) for sig in sorted(found, key=str))
        raise ValueError(f"tg.saved_model.save: {label} has no input_signature and was traced "
                         f"for {len(found)} signatures ({shown}); an export stores one per "
                         "function: give it @tg.function(input_signature=[...])")
    return [TensorSpec(shape, dtype) for shape, dtype in found.pop()]


def _methods(obj) -> dict:
    """``{attribute name: (Function, input_signature)}``: the ``tg.function`` methods of
    ``obj``'s class that have an ``input_signature`` or were traced for ``obj`` with one
    signature (:func:`_traced_signature`), in sorted name order."""
    found = {}
    for name in sorted(dir(type(obj))):
        try:
            attr = inspect.getattr_static(obj, name)
        except AttributeError:
            continue
        if isinstance(attr, Function):
            signature = attr._signature or _traced_signature(
                attr, obj, f"{type(obj).__name__}.{name}")
            if signature is not None:
                found[name] = (attr, signature)
    return found


def _entries(obj, signatures):
    """``(entries {key: _Entry}, methods [names], signatures {name: key})``."""
    methods = _methods(obj)
    entries = {name: _Entry(name, f.__wrapped__, obj, sig, f"{type(obj).__name__}.{name}")
               for name, (f, sig) in methods.items()}
    methods = {name: f for name, (f, _) in methods.items()}
    if signatures is None:
        if not entries:
            raise ValueError(
                f"tg.saved_model.save: nothing to export: {type(obj).__name__} has no "
                "tg.function method with an input_signature or traced by a call. Decorate the "
                "methods to export with @tg.function(input_signature=[tg.TensorSpec(shape, "
                "dtype), ...]) or call them once, or pass signatures=a tg.function (or a dict "
                "of them) that has one")
        return entries, list(methods), {name: name for name in methods}
    if not isinstance(signatures, dict):
        signatures = {DEFAULT_SIGNATURE: signatures}
    keys = {}
    by_function = {id(f): name for name, f in methods.items()}
    for sname, fn in signatures.items():
        if not isinstance(sname, str) or not _NAME.match(sname):
            raise ValueError(f"tg.saved_model.save: a signature name must be a non-empty string "
                             f"of letters, digits, '_', '.' and '-' (it names a file), got "
                             f"{sname!r}")
        bound = getattr(fn, "__self__", None)
        function = getattr(fn, "__func__", fn)
        if not isinstance(function, Function):
            raise TypeError(
                f"tg.saved_model.save: signatures[{sname!r}] is a {type(fn).__name__}, not a "
                "tg.function; decorate it with @tg.function(input_signature=[...])")
        signature = function._signature or _traced_signature(
            function, bound, f"signatures[{sname!r}] ({function.__name__})")
        if signature is None:
            raise ValueError(
                f"tg.saved_model.save: signatures[{sname!r}] ({function.__name__}) has no "
                "input_signature and was never called, so the shapes and dtypes to export it "
                "for are unknown; give it @tg.function(input_signature=[tg.TensorSpec(shape, "
                "dtype), ...]) or call it once")
        if bound is not None and bound is not obj:
            raise ValueError(
                f"tg.saved_model.save: signatures[{sname!r}] is a method of another object "
                f"({type(bound).__name__}), not of the exported {type(obj).__name__}; export "
                "that object, or make the function a method of this one")
        if id(function) in by_function:  # a method of obj: exported once
            keys[sname] = by_function[id(function)]
            continue
        key = f"signature_{sname}"
        entries[key] = _Entry(key, function.__wrapped__, bound, signature,
                              f"signatures[{sname!r}] ({function.__name__})")
        keys[sname] = key
    return entries, list(methods), keys


def _variables(obj):
    """``[(path, Variable)]``: the Variables reachable from ``obj``, named by their attribute
    paths as ``tg.train.Checkpoint`` names them, in ``obj.variables`` order for a Module."""
    graph = _Graph({"obj": obj}, "tg.saved_model.save")
    named = [(path[len("obj/"):], v) for path, v in graph.variables.items()]
    if isinstance(obj, Module):
        order = {v._id: k for k, v in enumerate(obj.variables)}
        named.sort(key=lambda pv: order.get(pv[1]._id, len(order)))
    return named


def _specs(jax, entry):
    """JAX's abstract values of the arguments, from the ``TensorSpec``s. Raises ``ValueError``
    for a ``None`` dimension: tapegrad's ops do not trace with symbolic sizes (``jax.export``
    shape polymorphism) yet, so an export is made for concrete sizes."""
    specs = []
    for k, spec in enumerate(entry.signature):
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"tg.saved_model.save: {entry.label}: input_signature[{k}] is a "
                            f"{type(spec).__name__}, not a tg.TensorSpec")
        if spec.shape is None or None in spec.shape:
            raise ValueError(
                f"tg.saved_model.save: {entry.label}: input_signature[{k}] is {spec!r}, with a "
                "None dimension (or rank); an export is traced for concrete sizes (tapegrad's "
                "ops do not trace with jax.export's symbolic sizes yet), so give every size, e.g. "
                "tg.TensorSpec((32, 3), ...) for batches of 32, and pad smaller batches")
        specs.append(jax.ShapeDtypeStruct(spec.shape, spec.dtype))
    return specs


def _callbacks(jax, jaxpr) -> list:
    """The host callbacks in a jaxpr (sub-jaxprs included): the op types whose NumPy forwards
    run as ``pure_callback`` (``"?"`` where the op is not known), and ``debug_callback``."""
    found = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if "callback" in name:
            label = name
            func = getattr(eqn.params.get("callback"), "callback_func", None)
            if func is not None:
                try:
                    opdef = inspect.getclosurevars(func).nonlocals.get("opdef")
                except (TypeError, ValueError):
                    opdef = None
                label = getattr(opdef, "type", name)
            found.append(label)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found.extend(_callbacks(jax, inner))
    return found


def _callback_error(label, found, cause=None):
    ops = sorted({f for f in found if "callback" not in f})
    if ops:
        what = (f"op type(s) {', '.join(map(repr, ops))}, whose forward is NumPy (or reads "
                "values), run")
        fix = ("Write the forward against the Array API namespace of its inputs (xp = "
               "array_namespace(x)) so that it traces, or as a composition of tapegrad ops")
    else:
        what = ("a host callback (a NumPy forward, tg.numpy_function, or the checks of "
                "tg.debugging.enable_check_numerics) runs")
        fix = ("Write NumPy forwards against the Array API namespace of their inputs, and call "
               "tg.debugging.disable_check_numerics() before saving")
    return ValueError(
        f"tg.saved_model.save: {label} cannot be exported: {what} as a host callback into "
        "Python, which a serialized JAX export cannot contain (it must run without the Python "
        f"code). {fix}" + (f" ({cause})" if cause else ""))


def _created_error(entry, created):
    names = ", ".join(repr(v.name) for v in created)
    return ValueError(
        f"tg.saved_model.save: {entry.label} created Variables ({names}) while it was traced "
        "for export; an export holds only Variables that exist before it. Call the function "
        "once before saving (Variables made on the first call then exist), or create them in "
        "__init__")


def _discover(jax, entry, named, specs):
    """Trace ``entry`` once with every visible Variable bound to a traced value; returns the
    indices (into ``named``) of the Variables it reads and of those it assigns. Raises for a
    Variable it uses that ``obj`` does not hold, one it creates, and host callbacks."""
    candidates = [v for v in visible_variables() if not isinstance(v._value, jax.core.Tracer)]
    info = {}

    def pure(var_vals, args):
        with bind_variables(zip(candidates, var_vals)) as scope:
            info["created"] = scope.created
            with config.trace_scope():
                out = entry.call([Tensor(a) for a in args])
            info["changed"] = [k for k, (v, val) in enumerate(zip(candidates, var_vals))
                               if scope.values[v._id] is not val]
            leaves = jax.tree_util.tree_leaves(out, is_leaf=lambda x: isinstance(x, Tensor))
            return [_backend.as_jax(_host(o._value if isinstance(o, Tensor) else o))
                    for o in leaves]

    var_avals = [jax.ShapeDtypeStruct(tuple(v.shape), _backend.np_dtype(v.dtype))
                 for v in candidates]
    try:
        with config.x64_scope(jax), config.precision_scope(jax):
            closed = jax.make_jaxpr(pure)(var_avals, specs)
    except Exception as e:  # noqa: BLE001 - a Variable created first is the likely cause
        if info.get("created"):
            raise _created_error(entry, info["created"]) from e
        if isinstance(e, TypeError) and ("host callback" in str(e)
                                         or "needs the values of its inputs" in str(e)):
            raise _callback_error(entry.label, [], cause=str(e).split(".")[0]) from e
        raise
    if info["created"]:
        raise _created_error(entry, info["created"])
    found = _callbacks(jax, closed.jaxpr)
    if found:
        raise _callback_error(entry.label, found)
    invars = closed.jaxpr.invars[:len(candidates)]
    read = {id(v) for eqn in closed.jaxpr.eqns for v in eqn.invars}
    read.update(id(v) for v in closed.jaxpr.outvars)
    index = {v._id: k for k, (_, v) in enumerate(named)}
    used, assigned = [], []
    for k, (v, iv) in enumerate(zip(candidates, invars)):
        touched = id(iv) in read or k in info["changed"]
        if not touched:
            continue
        if v._id not in index:
            verb = "assigns" if k in info["changed"] else "reads"
            raise ValueError(
                f"tg.saved_model.save: {entry.label} {verb}"
                f" the Variable {v.name!r} (shape {tuple(v.shape)}), which the exported object "
                "does not hold, so it could not be saved with it. Store it as an attribute of "
                "the object (or of one of its submodules), or pass it as an argument")
        used.append(index[v._id])
        if k in info["changed"]:
            assigned.append(index[v._id])
    order = sorted(used)
    return order, sorted(assigned)


def _host(a):
    if isinstance(a, (np.ndarray, np.generic, int, float, complex, bool)) or \
            type(a).__module__.startswith("jax"):
        return a
    return _backend.to_numpy(a)


class _Flat:
    """A tapegrad function of a flat list of Tensors returning a flat list of Tensors, and what
    a tape watches to differentiate it with respect to each input (:meth:`sources`)."""

    def __init__(self, fn, sources):
        self.fn, self.sources = fn, sources


def _entry_flat(jax, entry, variables, assigned, info):
    """``entry`` as a :class:`_Flat` of ``[*variable values, *arguments]`` returning
    ``[*output leaves, *new values of the assigned Variables]``; the Variables are bound to the
    given values, so a tape differentiates with respect to them by watching the Variables
    themselves (their reads are what the ops record). ``info["tree"]``: the outputs' pytree."""
    n_var = len(variables)

    def fn(tensors):
        with bind_variables([(v, t._value) for v, t in zip(variables, tensors)]) as scope:
            out = entry.call(list(tensors[n_var:]))
            new = [Tensor(scope.values[variables[k]._id]) for k in assigned]
        leaves, tree = jax.tree_util.tree_flatten(out, is_leaf=lambda x: isinstance(x, Tensor))
        info["tree"] = tree
        leaves = [o if isinstance(o, Tensor) else Tensor(_backend.as_jax(o)) for o in leaves]
        return [*leaves, *new]

    return _Flat(fn, lambda tensors: [*variables, *tensors[n_var:]])


def _vjp_flat(jax, flat, n_in, fin, fout):
    """The VJP of ``flat`` as a :class:`_Flat` of ``[*inputs, *cotangents of the floating
    outputs fout]`` returning the gradients of the floating inputs ``fin``, in JAX's complex
    convention (the conjugate of tapegrad's). It is tapegrad code again (a ``GradientTape``
    over ``flat``), so its own VJP is tapegrad's reverse pass too, to any order."""
    def fn(tensors):
        xs, cts = tensors[:n_in], tensors[n_in:]
        sources = flat.sources(xs)
        with GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([sources[k] for k in fin])
            outs = flat.fn(xs)
        targets = [outs[k] for k in fout]
        grads = tape.gradient(targets, [sources[k] for k in fin],
                              output_gradients=[_tconj(c) for c in cts],
                              unconnected_gradients=UnconnectedGradients.ZERO)
        return [_tconj(g) for g in grads]

    return _Flat(fn, lambda tensors: [*flat.sources(tensors[:n_in]), *tensors[n_in:]])


def _tconj(t):
    return conj(t) if np.dtype(_backend.np_dtype(t.dtype)).kind == "c" else t


def _custom_vjp(jax, flat):
    """``flat`` as a JAX function of flat arrays, a ``jax.custom_vjp`` whose VJP runs
    tapegrad's reverse pass (:func:`_vjp_flat`, itself made a ``custom_vjp`` the same way), so
    the export's derivatives of every order are tapegrad's: custom and registered gradients,
    also where a gradient is differentiated again."""
    def forward(*vals):
        with config.trace_scope():
            outs = flat.fn([Tensor(v) for v in vals])
        return [_backend.as_jax(_host(o._value)) for o in outs]

    core = jax.custom_vjp(forward)

    def fwd(*vals):
        return core(*vals), vals

    def bwd(vals, cts):  # an integer output's cotangent is float0
        fin = [k for k, v in enumerate(vals) if _backend.is_floating(v.dtype)]
        fout = [k for k, c in enumerate(cts) if _backend.is_floating(c.dtype)]
        grads = [None] * len(vals)
        if fin and fout:
            vjp = _custom_vjp(jax, _vjp_flat(jax, flat, len(vals), fin, fout))
            for k, g in zip(fin, vjp(*vals, *[cts[k] for k in fout])):
                grads[k] = g.astype(vals[k].dtype)
        return tuple(grads)

    core.defvjp(fwd, bwd)
    return core


def save(obj, export_dir, signatures=None, options=None):
    """Export ``obj``'s compiled functions and Variables to the directory ``export_dir``
    (TensorFlow 2's ``tf.saved_model.save``); :func:`load` loads it back, without the Python
    code that defined ``obj``.

    Args:
        obj: the object to export, usually a ``tg.Module``; its Variables are those reachable
            from it (attributes, lists, dicts, submodules, optimizers), named by path
            (``"dense/kernel"``) as ``tg.train.Checkpoint`` names them.
        export_dir: a path; created, or replaced if it holds an earlier export. An existing
            directory that is neither empty nor an export is refused.
        signatures: ``None`` (default), a ``tg.function`` (stored as the signature
            ``"serving_default"``) or a dict ``{name: tg.function}``; each must have an
            ``input_signature`` (or have been called for one signature of Tensors: TensorFlow
            saves the concrete functions already traced) and be a method of ``obj`` or a
            function of Variables that ``obj`` holds. The methods of ``obj``'s class decorated
            with ``@tg.function(input_signature=[...])``, or without one but called on ``obj``
            for one signature of positional Tensors, are exported in every case (as the loaded
            object's methods); with ``signatures=None`` they are also its signatures. A method
            without ``input_signature`` traced for several signatures raises ``ValueError``
            (an export stores one per function).
        options: a :class:`SaveOptions` (``vjp_order``, ``platforms``).

    Each function is traced once for its ``input_signature`` (``self`` is not an input), whose
    sizes must all be given (a ``None`` dimension raises: tapegrad's ops do not trace with
    ``jax.export``'s symbolic sizes yet). dtypes are the specs' (traced in 64-bit mode, as
    ``tg.function`` traces). The Variables a function reads are inputs of its export (not
    constants), so the loaded object has them as Variables; those it assigns are written back
    after each loaded call. Gradients are tapegrad's (custom and registered ones included).

    Returns ``None``. Raises ``TypeError`` for a signature that is not a ``tg.function`` or
    ``options`` that are not :class:`SaveOptions`; ``ValueError`` for a signature name that
    is not letters, digits, ``_``, ``.`` and ``-``, when there is nothing to export, a function
    has no ``input_signature``, reads or assigns a Variable ``obj`` does not hold, creates a
    Variable, or runs an op whose forward is NumPy code (a host callback, which cannot be
    serialized), or when ``export_dir`` is a non-empty directory that is not an export;
    ``ImportError`` without JAX or safetensors; ``OSError`` when writing fails (the previous
    export stays whole).
    """
    jax = _jax()
    st = _safetensors()
    options = options if options is not None else SaveOptions()
    if not isinstance(options, SaveOptions):
        raise TypeError(f"tg.saved_model.save: options must be a tg.saved_model.SaveOptions, got "
                        f"a {type(options).__name__}")
    export_dir = os.fspath(export_dir)
    _check_target(export_dir)
    entries, methods, signature_keys = _entries(obj, signatures)
    named = _variables(obj)
    paths = [p for p, _ in named]
    heads = {p.split("/")[0] for p in paths}
    for name in [*methods, "signatures"]:
        if name in heads:
            raise ValueError(f"tg.saved_model.save: the method {name!r} and the Variables under "
                             f"{name!r}/ would share one attribute of the loaded object; "
                             "rename one of them")
    records, blobs = {}, {}
    for key, entry in entries.items():
        specs = _specs(jax, entry)
        used, assigned = _discover(jax, entry, named, specs)
        variables = [named[k][1] for k in used]
        info = {}
        core = _custom_vjp(jax, _entry_flat(jax, entry, variables,
                                            [used.index(k) for k in assigned], info))
        n_state = len(assigned)

        def exported_fn(*vals, core=core, info=info, n_state=n_state):  # outputs in their tree
            flat = core(*vals)
            n_out = len(flat) - n_state
            return (jax.tree_util.tree_unflatten(info["tree"], flat[:n_out]), flat[n_out:])

        var_avals = [jax.ShapeDtypeStruct(tuple(v.shape), _backend.np_dtype(v.dtype))
                     for v in variables]
        try:
            with config.x64_scope(jax):
                exported = jax.export.export(jax.jit(exported_fn), platforms=options.platforms)(
                    *var_avals, *specs)
                blobs[key] = exported.serialize(vjp_order=options.vjp_order)
        except NotImplementedError as e:
            if "callback" in str(e):
                raise _callback_error(entry.label, []) from e
            raise
        records[key] = {
            "file": f"{FUNCTIONS}/{key}.jaxexport",
            "variables": [paths[k] for k in used],
            "assigns": [paths[k] for k in assigned],
            "inputs": [{"shape": list(s.shape), "dtype": s.dtype.name, "name": s.name}
                       for s in entry.signature],
            "parameters": entry.params,
            "vjp_order": options.vjp_order,
            "platforms": list(exported.platforms),
        }
    metadata = {
        "format": FORMAT, "version": VERSION, "tapegrad": _version(), "jax": jax.__version__,
        "module_name": getattr(obj, "name", None) if isinstance(obj, Module) else None,
        "variables": [{"path": p, "name": v.name, "shape": list(v.shape),
                       "dtype": _backend.np_dtype(v.dtype).name, "trainable": bool(v.trainable)}
                      for p, v in named],
        "functions": records, "methods": methods, "signatures": signature_keys,
    }
    arrays = {p: np.asarray(_stored(np.asarray(_backend.to_numpy(v._value))), order="C")
              for p, v in named}
    _write(export_dir, st, metadata, arrays, blobs)


def _version() -> str:
    try:
        return importlib.metadata.version("tapegrad")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was not installed
        return "0+unknown"


def _is_export(path) -> bool:
    return os.path.isfile(os.path.join(path, METADATA))


def _check_target(export_dir):
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise ValueError(f"tg.saved_model.save: {export_dir!r} is a file, not a directory; "
                         "give a directory path for the export")
    if os.path.isdir(export_dir) and os.listdir(export_dir) and not _is_export(export_dir):
        raise ValueError(f"tg.saved_model.save: {export_dir!r} is a directory that is neither "
                         "empty nor a tapegrad export; choose a new or empty directory (an "
                         "earlier export there would be replaced)")


def _write(export_dir, st, metadata, arrays, blobs):
    """Write the export into a staging directory beside ``export_dir``, then move it in
    place (replacing an earlier export), so a failure leaves the previous export whole."""
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=os.path.basename(export_dir) + ".tmp-", dir=parent)
    try:
        os.makedirs(os.path.join(stage, FUNCTIONS))
        for key, blob in blobs.items():
            with open(os.path.join(stage, FUNCTIONS, f"{key}.jaxexport"), "wb") as f:
                f.write(bytes(blob))
        st.numpy.save_file(arrays, os.path.join(stage, VARIABLES),
                           metadata={"format": FORMAT})
        with open(os.path.join(stage, METADATA), "w") as f:
            json.dump(metadata, f, indent=1)
        old = None
        if os.path.isdir(export_dir):
            old = export_dir.rstrip("/\\") + ".old-" + os.path.basename(stage).rsplit("-", 1)[1]
            os.rename(export_dir, old)
        os.rename(stage, export_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


# ==============================================================================================
# load
# ==============================================================================================
def _not_export(export_dir, why):
    hint = ""
    if os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
        hint = (" (it holds saved_model.pb: a TensorFlow SavedModel, which tapegrad does not "
                "read)")
    return SavedModelError(
        f"tg.saved_model.load: {export_dir!r} is not a tapegrad export: {why}{hint}. Load a "
        "directory written by tg.saved_model.save")


def _read(export_dir, st):
    """``(metadata, {path: NumPy array}, {key: serialized bytes})``, checked."""
    if not os.path.isdir(export_dir):
        raise FileNotFoundError(f"tg.saved_model.load: no directory {export_dir!r}; give the "
                                "directory tg.saved_model.save wrote")
    path = os.path.join(export_dir, METADATA)
    if not os.path.isfile(path):
        raise _not_export(export_dir, f"it has no {METADATA}")
    try:
        with open(path) as f:
            metadata = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise _not_export(export_dir, f"{METADATA} is not JSON ({e})") from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise _not_export(export_dir, f"{METADATA} does not say format {FORMAT!r}")
    if metadata.get("version") != VERSION:
        raise SavedModelError(
            f"tg.saved_model.load: {export_dir!r} is a tapegrad export of format version "
            f"{metadata.get('version')!r}, which this tapegrad (format version {VERSION}) does "
            "not read; load it with the tapegrad version that wrote it "
            f"({metadata.get('tapegrad')})")
    try:
        arrays = st.numpy.load_file(os.path.join(export_dir, VARIABLES))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own SafetensorError
        raise SavedModelError(f"tg.saved_model.load: {export_dir!r}: the Variables' file "
                              f"{VARIABLES} is missing or damaged ({type(e).__name__}: {e}); "
                              "save the export again") from None
    for rec in metadata["variables"]:
        a = arrays.get(rec["path"])
        dtype = np.dtype(rec["dtype"])
        if a is not None and dtype == np.complex128 and a.dtype == np.float64:
            a = np.ascontiguousarray(a).view(np.complex128).reshape(a.shape[:-1])
            arrays[rec["path"]] = a
        if a is None or a.dtype != dtype or list(a.shape) != rec["shape"]:
            got = "missing" if a is None else f"shape {a.shape}, dtype {a.dtype}"
            raise SavedModelError(
                f"tg.saved_model.load: {export_dir!r}: the Variable {rec['path']!r} in "
                f"{VARIABLES} is {got}, but {METADATA} says shape {tuple(rec['shape'])}, dtype "
                f"{dtype}; the export is damaged, save it again")
    blobs = {}
    for key, rec in metadata["functions"].items():
        try:
            with open(os.path.join(export_dir, rec["file"]), "rb") as f:
                blobs[key] = bytearray(f.read())
        except OSError as e:
            raise SavedModelError(f"tg.saved_model.load: {export_dir!r}: the function {key!r} "
                                  f"({rec['file']}) cannot be read ({e}); the export is "
                                  "incomplete, save it again") from None
    return metadata, arrays, blobs


class _Node(Module):
    """An object on the path to loaded Variables: attributes by path component; ``node[k]``
    reads the attribute ``str(k)`` (list indices and dict keys of the original object)."""

    def __getitem__(self, key):
        try:
            return getattr(self, str(key))
        except AttributeError:
            raise KeyError(key) from None


class _Loaded(_Node):
    """What :func:`load` returns: a ``tg.Module`` whose Variables are the exported ones and
    whose methods are the exported ``tg.function`` methods (as :class:`LoadedFunction`).

    ``variables``, ``trainable_variables``, ``non_trainable_variables`` and
    ``named_variables()`` list them in the exported object's order (the original paths);
    ``signatures`` is ``{name: LoadedFunction}``. Calling the object calls its exported
    ``__call__`` method."""

    def _ordered(self):
        return [(path, self._resolve(path)) for path in self._variable_paths]

    def _resolve(self, path):
        node = self
        for part in path.split("/"):
            node = getattr(node, part)
        return node

    @property
    def variables(self):
        """Every loaded Variable, in the exported object's order."""
        return tuple(v for _, v in self._ordered())

    @property
    def trainable_variables(self):
        """The trainable loaded Variables, in the exported object's order."""
        return tuple(v for _, v in self._ordered() if v.trainable)

    @property
    def non_trainable_variables(self):
        """The loaded Variables that are not trainable, in the exported object's order."""
        return tuple(v for _, v in self._ordered() if not v.trainable)

    def named_variables(self, trainable_only=False):
        """``(path, Variable)`` pairs, the exported object's paths (``"dense/kernel"``)."""
        for path, v in self._ordered():
            if v.trainable or not trainable_only:
                yield path, v

    def __call__(self, *args, **kwargs):
        """Call the exported ``__call__`` method; ``TypeError`` if the export has none."""
        fn = self.__dict__.get("__call__")
        if fn is None:
            raise TypeError(f"the loaded object {self.name!r} is not callable: its export has no "
                            "__call__ method with an input_signature (exported: "
                            f"{', '.join(self._methods) or 'none'})")
        return fn(*args, **kwargs)


class LoadedFunction:
    """A function loaded by :func:`load`: a JAX export called as a tapegrad op.

    Call it with one Tensor (or array, or nested Python numbers) per entry of
    ``input_signature`` (positionally, or by the original parameter names); returns what the
    original returned (Tensors in the same tuples, lists and dicts; Python numbers become
    Tensors). Differentiable by ``GradientTape`` (and ``tg.grad``...) with respect to the
    arguments and the loaded Variables it reads, up to the export's ``vjp_order``; forward mode
    (``ForwardAccumulator``, ``tg.jvp``) is not available (JAX exports carry VJPs only). Works
    inside ``tg.function``. Variables the original assigned are assigned after each call.

    Raises ``TypeError`` for arguments that do not fit the input signature (count, shape,
    dtype, an unknown keyword; the first dimensions given as ``None`` must agree).
    """

    def __init__(self, jax, name, exported, variables, assigns, specs, params):
        self.__name__ = name
        self.input_signature = specs
        self._params = params
        self._variables = variables
        self._assigns = assigns
        # jit: JAX caches the trace of the custom_vjp wrappers (eagerly they are traced again
        # on every call, about 15 times the program's own time)
        call = jax.jit(_differentiable(jax, exported, name, 1))
        n_out_state = len(assigns)

        def jax_fn(*flat):
            try:
                with config.x64_scope(jax):
                    return call(*flat)
            except TypeError as e:
                if "forward-mode" in str(e):
                    raise TypeError(
                        f"the loaded function {name!r} has reverse-mode derivatives only (a JAX "
                        "export carries VJPs, not JVPs): use GradientTape, tg.grad or tg.vjp, "
                        "not ForwardAccumulator, tg.jvp, tg.jacfwd or tg.hessian") from None
                raise

        jax_fn.__name__ = name
        self.__wrapped__ = jax_fn  # also keeps tg.train's walk out of this object
        self._op = from_jax(jax_fn, name=f"SavedModel:{name}")
        self._n_out_state = n_out_state

    def __call__(self, *args, **kwargs):
        """Run the export on the arguments (see the class docstring); returns its outputs."""
        args = self._arguments(args, kwargs)
        out, state = self._op(*self._variables, *args)
        for v, t in zip(self._assigns, state):
            v.assign(t)
        return out

    def _arguments(self, args, kwargs):
        name, specs = f"the loaded function {self.__name__!r}", self.input_signature
        args, positional = list(args), len(args)
        for key, value in kwargs.items():
            if key not in self._params:
                raise TypeError(f"{name} got an unexpected keyword argument {key!r}; its "
                                f"parameters are {self._params}")
            k = self._params.index(key)
            if k < positional:
                raise TypeError(f"{name} got multiple values for argument {key!r}")
            args.extend([_MISSING] * (k + 1 - len(args)))
            args[k] = value
        if len(args) != len(specs) or any(a is _MISSING for a in args):
            raise TypeError(f"{name}: its input_signature has {len(specs)} TensorSpec(s) "
                            f"({', '.join(map(repr, specs))}) but the call passes "
                            f"{sum(a is not _MISSING for a in args)} argument(s)")
        out = []
        for k, (a, spec) in enumerate(zip(args, specs)):
            if not hasattr(a, "shape"):
                try:
                    a = Tensor(np.asarray(a, dtype=spec.dtype))
                except (TypeError, ValueError) as e:
                    raise TypeError(f"{name}: argument {k} ({self._params[k]!r}) is a "
                                    f"{type(a).__name__} that does not convert to "
                                    f"{spec!r}: {e}") from None
            if not spec.is_compatible_with(a):
                raise TypeError(
                    f"{name}: argument {k} ({self._params[k]!r}) has shape {tuple(a.shape)} and "
                    f"dtype {_backend.np_dtype(a.dtype)}, which does not fit its input_signature "
                    f"{spec!r}; pass a Tensor of that shape and dtype (tg.astype converts)")
            out.append(a)
        return out

    def __repr__(self):
        return f"<tg.saved_model.LoadedFunction {self.__name__}{tuple(self.input_signature)}>"


_MISSING = object()


def _differentiable(jax, exported, name, order):
    """``exported.call`` as a ``jax.custom_vjp`` whose VJP is the export's own (``order``: the
    derivative order it gives), raising a clear error past the orders the export carries."""
    @jax.custom_vjp
    def call(*flat):
        return exported.call(*flat)

    def fwd(*flat):
        return call(*flat), flat

    def bwd(flat, cts):
        if not exported.has_vjp():
            raise ValueError(
                f"the loaded function {name!r} was exported with derivatives up to order "
                f"{order - 1} (SaveOptions(vjp_order={order - 1})); derivative order {order} "
                f"needs tg.saved_model.save(..., options=tg.saved_model.SaveOptions("
                f"vjp_order={order}))")
        vjp = exported.vjp()
        ct_flat = jax.tree_util.tree_leaves(cts)
        fixed = [np.zeros(ct.shape, jax.dtypes.float0) if aval.dtype == jax.dtypes.float0 else ct
                 for ct, aval in zip(ct_flat, vjp.in_avals[len(flat):])]
        return tuple(_differentiable(jax, vjp, name, order + 1)(*flat, *fixed))

    call.defvjp(fwd, bwd)
    return call


def load(export_dir):
    """Load an export written by :func:`save` (TensorFlow 2's ``tf.saved_model.load``).

    Args:
        export_dir: the directory :func:`save` wrote.

    Returns a ``tg.Module`` holding the exported Variables (new ``tg.Variable``s with the saved
    values, names, dtypes and trainability) at their original attribute paths
    (``loaded.dense.kernel``; list indices and dict keys as ``loaded.layers[0]``), the exported
    ``tg.function`` methods as :class:`LoadedFunction` attributes (``loaded.f(x)``, or
    ``loaded(x)`` for ``__call__``), and ``loaded.signatures`` (``{name: LoadedFunction}``).
    ``variables`` and ``trainable_variables`` are in the original object's order. Nothing of
    the Python code that defined the original is imported or needed, and tapegrad's registry
    need not know its op types.

    Raises ``FileNotFoundError`` when ``export_dir`` does not exist;
    ``errors.SavedModelError`` (a ``ValueError``) when it is not a tapegrad export (no
    metadata file, another format or version) or its files are damaged or incomplete;
    ``ImportError`` without JAX or safetensors.
    """
    jax = _jax()
    st = _safetensors()
    export_dir = os.fspath(export_dir)
    metadata, arrays, blobs = _read(export_dir, st)
    name = metadata.get("module_name") or "loaded"
    loaded = _Loaded(name=name)
    loaded._variable_paths = [rec["path"] for rec in metadata["variables"]]
    loaded._methods = list(metadata["methods"])
    by_path = {}
    with name_scope(""):
        for rec in metadata["variables"]:
            v = Variable(arrays[rec["path"]], trainable=rec["trainable"], name=rec["name"])
            by_path[rec["path"]] = v
            _place(loaded, rec["path"], v)
    functions = {}
    for key, rec in metadata["functions"].items():
        try:
            exported = jax.export.deserialize(blobs[key])
        except Exception as e:  # noqa: BLE001 - JAX's own errors, named with the file
            raise SavedModelError(f"tg.saved_model.load: {export_dir!r}: {rec['file']} is not a "
                                  f"JAX export this JAX ({jax.__version__}; the export was "
                                  f"written with {metadata.get('jax')}) reads: "
                                  f"{type(e).__name__}: {e}") from None
        specs = [TensorSpec([d if d is None else int(d) for d in s["shape"]], s["dtype"],
                            s["name"]) for s in rec["inputs"]]
        label = key if key in metadata["methods"] else key[len("signature_"):]
        functions[key] = LoadedFunction(jax, label, exported,
                                        [by_path[p] for p in rec["variables"]],
                                        [by_path[p] for p in rec["assigns"]], specs,
                                        rec["parameters"])
    for method in metadata["methods"]:
        loaded.__dict__[method] = functions[method]
    loaded.signatures = {s: functions[key] for s, key in metadata["signatures"].items()}
    return loaded


def _place(root, path, value):
    node = root
    parts = path.split("/")
    for part in parts[:-1]:
        child = node.__dict__.get(part)
        if child is None:
            child = _Node(name=part if part.isidentifier() else "node")
            node.__dict__[part] = child
        node = child
    node.__dict__[parts[-1]] = value
