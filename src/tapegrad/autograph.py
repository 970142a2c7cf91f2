"""AutoGraph (TensorFlow 2's): ``tg.function`` rewrites Python control flow on tensors.

Before a ``tg.function`` traces its Python function, :func:`convert` rewrites the function's
source (``ast``): every ``if``/``elif``/``else``, ``while`` and ``for`` becomes a call of
:func:`if_stmt`, :func:`while_stmt` or :func:`for_stmt` with its branches or body as nested
functions of the variables they assign; ``break``, ``continue`` and ``return`` inside them
become flags (``ag__brk_N = True``) and the statements after them are moved into the other
branch or guarded by the flag; ``and``/``or``/``not`` and ``a if c else b`` become
:func:`and_`, :func:`or_`, :func:`not_`, :func:`if_exp`; and every call ``f(...)`` becomes
``call(f)(...)``, which converts ``f`` too when it is a plain Python function of user code.
At trace time each helper looks at the runtime type of the condition (TensorFlow's rule): a
tensor inside a trace builds ``tg.cond`` / ``tg.while_loop``; anything else runs as Python.

Which variables a branch or loop carries is found from the source as TensorFlow's AutoGraph
does: the names assigned in it that are live after it or read in it before being assigned
(a backward liveness analysis, :func:`_live`). The converted code is compiled with the
original file name and line numbers, so tracebacks and this module's messages name the user's
lines. Conversions are cached per code object, so only the first conversion of a function
pays for the analysis.
"""
from __future__ import annotations

import __future__
import ast
import builtins
import copy
import functools
import inspect
import math
import os
import sys
import sysconfig
import textwrap
import types
import warnings

import numpy as np

from . import control_flow as _cf
from ._pytree import show, tree_flatten, tree_unflatten
from ._tensor import Tensor
from .ops import astype, convert_to_tensor, logical_and, logical_not, logical_or, where

__all__ = ["experimental", "to_graph", "to_code", "convert"]


# --- public API ---------------------------------------------------------------------------------
def do_not_convert(func=None):
    """``tf.autograph.experimental.do_not_convert``: ``func`` is called as written, never
    converted (as the function of a ``tg.function`` or when called from converted code).
    Usable as ``@do_not_convert`` or ``do_not_convert(f)``; returns a wrapper with ``func``'s
    name and docstring. Raises ``TypeError`` if ``func`` is not callable."""
    if func is None:
        return do_not_convert
    if not callable(func):
        raise TypeError(f"tg.autograph.experimental.do_not_convert: expected a function, got "
                        f"{type(func).__name__}")

    @functools.wraps(func)
    def as_written(*args, **kwargs):  # its code lives in tapegrad, so it is never converted
        return func(*args, **kwargs)

    return as_written


def set_loop_options(parallel_iterations=None, swap_memory=None, maximum_iterations=None,
                     shape_invariants=None):
    """``tf.autograph.experimental.set_loop_options``: as the first statement of a loop's body,
    options of the ``tg.while_loop`` that loop becomes. ``maximum_iterations`` (an int or a 0-d
    integer Tensor) bounds the loop, which reverse-mode differentiation of a compiled loop
    needs (see :func:`tapegrad.while_loop`); the others are accepted for TensorFlow
    compatibility. Read from the source by the conversion; calling it does nothing."""


experimental = types.SimpleNamespace(do_not_convert=do_not_convert,
                                     set_loop_options=set_loop_options)


def to_graph(func):
    """``tf.autograph.to_graph``: ``func`` with its control flow converted (see the module
    docstring), or ``func`` itself when it cannot be converted (no source, library code, a
    lambda or generator). Calling it outside a trace runs as Python."""
    return convert(func)


def to_code(func) -> str:
    """``tf.autograph.to_code``: the source of the converted ``func`` (a string). Raises
    ``ValueError`` when ``func`` cannot be converted."""
    tree = _converted_tree(func)
    if tree is None:
        raise ValueError(f"tg.autograph.to_code: {getattr(func, '__qualname__', func)!r} "
                         "cannot be converted (no Python source, library code, a lambda or a "
                         "generator)")
    return ast.unparse(tree)


def convert(func):
    """``func`` converted for tracing (a function; a bound method stays bound), or ``func``
    itself when it is not a plain Python function of user code or is marked by
    :func:`do_not_convert`."""
    return call(func)


# --- runtime: what converted code calls ---------------------------------------------------------
class Undefined:
    """The value of a variable not (yet) assigned on the path taken; any use raises a
    ``NameError``-like error naming it."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<undefined {self.name}>"

    def __getattr__(self, attr):
        raise AttributeError(_unassigned(object.__getattribute__(self, "name")))


def _unassigned(name):
    return (f"AutoGraph: {name!r} is used before it is assigned (it is assigned only on some "
            "of the paths through the branches and loops before)")


def _fail(self, *args, **kwargs):
    raise NameError(_unassigned(self.name))


for _m in ("add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow "
           "matmul rmatmul neg pos abs bool int float index len iter getitem call lt le gt ge "
           "and rand or ror xor rxor invert array").split():
    setattr(Undefined, f"__{_m}__", _fail)


def ret(value):
    """The function's result: ``None`` when no ``return`` ran."""
    return None if isinstance(value, Undefined) else value


def ld(value):
    """``value`` as a ``return`` reads it: ``NameError`` for a variable not assigned on the
    path taken (as Python's ``UnboundLocalError``)."""
    if isinstance(value, Undefined):
        raise NameError(_unassigned(value.name))
    return value


def _symbolic(x) -> bool:
    """Whether ``x`` is a tensor inside a trace (TensorFlow's rule for converting)."""
    return isinstance(x, Tensor) and _cf._compiled([x])


def not_(x):
    """``not x``: ``tg.logical_not`` for a tensor inside a trace."""
    return logical_not(x) if _symbolic(x) else not x


def and_(a, b):
    """``a() and b()`` (short-circuit for Python values): ``tg.logical_and`` when ``a()`` is a
    tensor inside a trace."""
    x = a()
    return logical_and(x, b()) if _symbolic(x) else (x and b())


def or_(a, b):
    """``a() or b()``: ``tg.logical_or`` when ``a()`` is a tensor inside a trace."""
    x = a()
    return logical_or(x, b()) if _symbolic(x) else (x or b())


def if_exp(cond, a, b, site):
    """``a() if cond else b()``: ``tg.cond`` for a tensor condition inside a trace."""
    if _symbolic(cond):
        return _cf.cond(_predicate(cond, "conditional expression", site), a, b)
    return a() if cond else b()


def if_stmt(cond, if_true, if_false, values, names, site):
    """An ``if`` statement: ``if_true(*values)`` or ``if_false(*values)``, each returning the
    branch's new values of ``names`` (a tuple). For a tensor ``cond`` inside a trace both
    become one ``tg.cond``; a variable must then be assigned in both branches or neither, and
    have one shape and dtype (a Python number takes the other branch's dtype)."""
    if not _symbolic(cond):
        return if_true(*values) if cond else if_false(*values)
    pred = _predicate(cond, "`if` condition", site)
    seen, casts = {}, {}

    def branch(fn, key):
        def run():
            outs, kinds = [], []
            for k, o in enumerate(fn(*values)):
                if isinstance(o, Undefined):
                    kinds.append(("undefined", None))
                    outs.append(())
                elif (t := _as_tensors(o, casts.get(k))) is not None:
                    kinds.append(("number" if _number(o) else "tensor", _signature(t)))
                    outs.append(t)
                else:
                    kinds.append(("static", o))
                    outs.append(())
            seen[key] = kinds
            return tuple(outs)
        return run

    for _ in range(2):  # a second time with Python numbers cast to the other branch's dtype
        seen.clear()
        try:
            outs = _cf.cond(pred, branch(if_true, "if"), branch(if_false, "else"))
        except Exception as e:  # noqa: BLE001 - explained with the variables' names, or re-raised
            if len(seen) < 2:
                raise
            if _branch_casts(seen, casts):
                continue
            raise _branch_error(seen, names, site) or e from e
        error = _branch_error(seen, names, site)
        if error is not None:
            raise error
        return tuple(_branch_value(outs[k], seen["if"][k], seen["else"][k], names[k])
                     for k in range(len(names)))
    raise _branch_error(seen, names, site) or AssertionError("unreachable")


def while_stmt(test, body, values, names, opts, site):
    """A ``while`` loop: ``values = body(*values)`` while ``test(*values)``. Runs as Python
    until ``test`` gives a tensor inside a trace; from there on one ``tg.while_loop`` carries
    ``values`` (``opts``: :func:`set_loop_options`'s, from the source)."""
    while True:
        c = test(*values)
        if _symbolic(c):
            return _loop("while", site, test, body, values, names, opts, None)
        if not c:
            return values
        values = body(*values)


def for_stmt(iterable, extra_test, body, values, names, opts, site):
    """A ``for`` loop: ``values = body(item, *values)`` for each item of ``iterable`` while
    ``extra_test(*values)`` (the ``break``/``return`` flags; ``None`` when there are none).
    Over a tensor or a :func:`range_` of tensors inside a trace it is one ``tg.while_loop``
    (over the tensor's first axis or the range's numbers); otherwise Python iteration."""
    if isinstance(iterable, _Range) or _symbolic(iterable):
        return _tensor_for(iterable, extra_test, body, values, names, opts, site)
    it = iter(iterable)
    while True:
        if extra_test is not None:
            c = extra_test(*values)
            if _symbolic(c):
                raise TypeError(
                    f"{site}: this `for` loop iterates over a Python {type(iterable).__name__} "
                    "but its `break` or `return` depends on a tensor, which Python iteration "
                    "cannot follow. Iterate over tg.range(n) (tf.range) or a tensor, so that "
                    "the loop becomes a tg.while_loop, or make the condition a Python value")
            if not c:
                break
        try:
            item = next(it)
        except StopIteration:
            break
        values = body(item, *values)
    return values


class _Range:
    """A ``range`` whose loop becomes a ``tg.while_loop`` (bounds known only when the
    compiled program runs, or a tensor range inside a trace)."""

    def __init__(self, start, stop, step, dtype):
        self.start, self.stop, self.step, self.dtype = start, stop, step, dtype


def range_(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` for the iterable of a ``for`` loop: a :class:`_Range` when
    ``fn`` is tapegrad's ``arange``/``range`` (``tf.range``) inside a trace, or Python's
    ``range`` given a tensor inside a trace; ``fn``'s result otherwise."""
    if fn is builtins.range:
        converted = any(map(_symbolic, args))
    else:
        converted = (getattr(fn, "__name__", None) in ("range", "arange")
                     and str(getattr(fn, "__module__", "")).startswith("tapegrad")
                     and _cf._compiled([*args, *kwargs.values()]))
    if not converted:
        return fn(*args, **kwargs)
    dtype = kwargs.pop("dtype", None)
    start = kwargs.pop("start", args[0] if args else 0)
    stop = kwargs.pop("limit", kwargs.pop("stop", args[1] if len(args) > 1 else None))
    step = kwargs.pop("delta", kwargs.pop("step", args[2] if len(args) > 2 else 1))
    if stop is None:
        start, stop = 0, start
    bounds = (start, stop, step)
    if dtype is None:
        tensors = [b for b in bounds if isinstance(b, Tensor)]
        dtype = (tensors[0].dtype if tensors
                 else fn(start, start + step, step).dtype if fn is not builtins.range
                 else np.int64)
    return _Range(start, stop, step, dtype)


def call(f):
    """``f`` converted when it is a plain Python function (or a method, ``functools.partial``
    or callable object whose ``__call__`` is one) of user code (not tapegrad's, NumPy's, JAX's,
    the standard library's or an installed package's, not a lambda, generator or coroutine,
    not marked :func:`do_not_convert`); ``f`` otherwise."""
    kind = type(f)
    if kind is types.FunctionType:
        entry = _cache.get(f.__code__, _MISSING)
        if entry is _MISSING:
            entry = _cache[f.__code__] = _conversion(f)
        if entry is None:
            return f
        code, ag_cell = entry
        cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
        cells["ag__"] = ag_cell
        new = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__,
                                 tuple(cells[n] for n in code.co_freevars))
        new.__kwdefaults__ = f.__kwdefaults__
        new.__qualname__, new.__doc__, new.__module__ = f.__qualname__, f.__doc__, f.__module__
        new.__wrapped__ = f
        return new
    if kind is types.MethodType:
        fn = call(f.__func__)
        return f if fn is f.__func__ else types.MethodType(fn, f.__self__)
    if kind is functools.partial:
        fn = call(f.func)
        return f if fn is f.func else functools.partial(fn, *f.args, **f.keywords)
    method = getattr(kind, "__call__", None)  # a callable object (a tg.Module): its __call__
    if type(method) is types.FunctionType and not isinstance(f, type):
        fn = call(method)
        return f if fn is method else types.MethodType(fn, f)
    return f


# --- runtime internals ----------------------------------------------------------------------------
_MISSING = object()
_cache = {}  # code object -> (converted code, the cell holding this module) or None


def _number(x) -> bool:
    return isinstance(x, (bool, int, float, complex, np.bool_, np.number))


def _tensor_like(x) -> bool:
    return isinstance(x, Tensor) or _number(x) or hasattr(x, "dtype")


def _as_tensors(value, dtype=None):
    """``value`` (a Tensor, number or array, or a tuple, list or dict of them) with Tensors for
    leaves: a Python number as ``dtype`` or TensorFlow's dtype for it (int32, float32); None
    when a leaf is something else or there is none."""
    leaves, structure = tree_flatten(value)
    if not leaves or not all(map(_tensor_like, leaves)):
        return None
    return tree_unflatten(structure, [
        convert_to_tensor(x, dtype=dtype or _DEFAULTS.get(type(x))) if _number(x)
        else convert_to_tensor(x) for x in leaves])


def _signature(value):
    """A Tensor's ``(shape, dtype)``; a structure's ``(structure, its leaves' specs)``."""
    if isinstance(value, Tensor):
        return _cf._spec(value)
    leaves, structure = tree_flatten(value)
    return show(structure), tuple(_cf._spec(x) for x in leaves)


def _predicate(cond, what, site):
    """``cond`` checked to be a 0-d bool tensor (``tg.cond``'s predicate)."""
    shape, dtype = _cf._spec(cond)
    if shape != () or dtype != np.dtype(bool):
        raise TypeError(f"{site}: the {what} is a tensor of shape {shape} and dtype {dtype}; "
                        "AutoGraph turns it into tg.cond, which needs a scalar bool: compare "
                        "it (x > 0) or reduce it (tg.any, tg.all)")
    return cond


def _branch_casts(seen, casts) -> bool:
    """Casts that would make both branches agree (a Python number taking the dtype of the
    other branch's value of the same shape); whether any new one was found."""
    new = False
    for k, (a, b) in enumerate(zip(seen["if"], seen["else"])):
        if a[0] in ("number", "tensor") and b[0] in ("number", "tensor") and a[1] != b[1] \
                and a[1][0] == b[1][0] and "number" in (a[0], b[0]) and k not in casts:
            other = b if a[0] == "number" else a
            if other[0] == "number":  # two Python numbers: the wider kind
                other = max(a, b, key=lambda s: np.dtype(s[1][1]).kind == "f")
            casts[k] = other[1][1]
            new = True
    return new


def _describe(kind):
    if kind[0] not in ("number", "tensor"):
        return f"a Python {type(kind[1]).__name__}"
    if isinstance(kind[1][0], str):
        return f"{kind[1][0]} of tensors of (shape, dtype) {list(kind[1][1])}"
    return f"a tensor of shape {kind[1][0]} and dtype {kind[1][1]}"


def _branch_error(seen, names, site):
    """The ``TypeError`` for the first variable whose branches disagree, or None."""
    for k, (a, b) in enumerate(zip(seen["if"], seen["else"])):
        name = names[k]
        if (a[0] == "undefined") != (b[0] == "undefined"):
            missing = "else" if b[0] == "undefined" else "if"
            if name == "ag__retval":
                other = "if" if missing == "else" else "else"
                return TypeError(
                    f"{site}: this `if` returns a value in its {other} branch but not in its "
                    f"{missing} branch; its condition is a "
                    "tensor, so it becomes a tg.cond and every branch must return a value "
                    "(TensorFlow's rule)")
            return TypeError(
                f"{site}: '{name}' must also be initialized in the {missing} branch: the `if` "
                f"condition is a tensor, so the branches become a tg.cond, after which "
                f"'{name}' is used, and both must give it (TensorFlow's rule)")
        if "static" in (a[0], b[0]) and not (a[0] == b[0] == "static" and _same(a[1], b[1])):
            if a[0] == "undefined":
                continue
            return TypeError(
                f"{site}: '{name}' is {_describe(a)} in the if branch and {_describe(b)} in "
                "the else branch; the `if` condition is a tensor (a tg.cond), whose branches "
                "can give different values only of tensors and numbers (TensorFlow's rule)")
        if a[0] != "static" and a[0] != "undefined" and a[1] != b[1]:
            return TypeError(
                f"{site}: '{name}' is {_describe(a)} in the if branch but {_describe(b)} in "
                "the else branch; the `if` condition is a tensor, so both branches become a "
                "tg.cond and must give it the same shape and dtype (TensorFlow's rule): cast "
                "or reshape one of them")
    return None


def _same(a, b) -> bool:
    """Whether two Python values a tensor ``if``'s branches give are the same one."""
    return a is b or (type(a) is type(b) and isinstance(a, (str, bytes)) and a == b)


def _branch_value(out, a, b, name):
    if a[0] == "undefined":
        return Undefined(name)
    if a[0] == "static":
        return a[1]
    return out


class _Widen(Exception):
    """A loop variable that entered as a Python number must take the dtype its body gives."""

    def __init__(self, k, dtype):
        super().__init__(k, dtype)
        self.k, self.dtype = k, dtype


_DEFAULTS = {bool: np.dtype(bool), int: np.dtype(np.int32), float: np.dtype(np.float32),
             complex: np.dtype(np.complex64)}  # TensorFlow's, for Python numbers


def _entry(values, names, site, kind, dtypes):
    """The loop variables as Tensors: Python numbers as TensorFlow's (bool, int32, float32)
    unless a first try widened them (``dtypes``)."""
    out = []
    for k, (v, name) in enumerate(zip(values, names)):
        if isinstance(v, Undefined):
            if name == "ag__retval":
                raise TypeError(
                    f"{site}: a `return` inside this {kind} loop is not supported: the loop's "
                    "condition is a tensor, so it becomes a tg.while_loop. Assign the result to "
                    "a variable defined before the loop, `break`, and return after the loop")
            raise TypeError(
                f"{site}: '{name}' must be defined before the loop: the {kind} loop's "
                "condition is a tensor, so AutoGraph makes it a tg.while_loop, which carries "
                f"'{name}' from one iteration to the next (TensorFlow's rule)")
        t = _as_tensors(v, dtypes.get(k))
        if t is not None:
            out.append(t)
        else:
            raise TypeError(
                f"{site}: '{name}' is a Python {type(v).__name__}, assigned in this {kind} "
                "loop whose condition is a tensor: a tg.while_loop carries only tensors and "
                "numbers (TensorFlow's rule). Keep it out of the loop or make it a tensor")
    return tuple(out)


def _exit(outs, ins, values, names, site, kind, dtypes):
    """The body's results checked against the loop variables (a Python number takes its
    variable's dtype): ``TypeError`` naming the variable for a change of shape or dtype."""
    result = []
    for k, (o, t, v, name) in enumerate(zip(outs, ins, values, names)):
        if isinstance(o, Undefined):
            raise TypeError(f"{site}: '{name}' is not assigned on every path through the body "
                            f"of this {kind} loop, whose condition is a tensor")
        (o_leaves, o_tree), (t_leaves, t_tree) = tree_flatten(o), tree_flatten(t)
        if o_tree != t_tree:
            raise TypeError(
                f"{site}: '{name}' is {show(t_tree)} before the {kind} loop, but "
                f"{show(o_tree)} after one iteration; the loop's condition is a tensor (a "
                "tg.while_loop), whose variables keep their structure (TensorFlow's rule)")
        new = [convert_to_tensor(a, dtype=b.dtype) if _number(a) else convert_to_tensor(a)
               for a, b in zip(o_leaves, t_leaves)]
        for a, b in zip(new, t_leaves):
            _check_leaf(a, b, k, v, name, site, kind, dtypes)
        result.append(tree_unflatten(o_tree, new))
    return tuple(result)


def _check_leaf(o, t, k, v, name, site, kind, dtypes):
    """``TypeError`` (or ``_Widen``) when a loop variable's leaf changed shape or dtype."""
    (s0, d0), (s1, d1) = _cf._spec(t), _cf._spec(o)
    if d0 != d1 and s0 == s1 and _number(v) and k not in dtypes:
        raise _Widen(k, d1)  # entered as a Python number: take the body's dtype
    if d0 != d1:
        raise TypeError(
            f"{site}: '{name}' has dtype {d0} before the {kind} loop, but dtype {d1} after "
            "one iteration; the loop's condition is a tensor (a tg.while_loop), whose "
            "variables keep their dtype (TensorFlow's rule): cast it before the loop")
    if s0 != s1:
        raise TypeError(
            f"{site}: '{name}' has shape {s0} before the {kind} loop, but shape {s1} after "
            "one iteration; the loop's condition is a tensor (a tg.while_loop), whose "
            "variables keep their shape (TensorFlow's rule; tapegrad has no "
            "shape_invariants): pad it to a fixed shape")


def _loop(kind, site, test, body, values, names, opts, bound):
    """One ``tg.while_loop`` of ``test``/``body`` over ``values`` (retried once per loop
    variable that entered as a Python number and needs a wider dtype)."""
    maximum = (opts or {}).get("maximum_iterations", bound)
    place = (f"the {kind} loop at {site} (AutoGraph; set_loop_options(maximum_iterations=n) "
             "as the first statement of its body bounds it)")
    dtypes = {}
    for _ in range(len(values) + 1):
        init = _entry(values, names, site, kind, dtypes)
        try:
            return _cf._while(place, lambda v: test(*v),
                              lambda v: _exit(body(*v), v, values, names, site, kind, dtypes),
                              init, maximum, "loop_vars")
        except _Widen as w:
            dtypes[w.k] = w.dtype
    raise AssertionError("unreachable")


def _tensor_for(iterable, extra_test, body, values, names, opts, site):
    """A ``for`` loop over a tensor's first axis or a :class:`_Range` as a ``tg.while_loop``
    carrying a counter before ``values``."""
    if isinstance(iterable, _Range):
        r = iterable
        start, stop, step = (convert_to_tensor(b, dtype=r.dtype) if _number(b)
                             else astype(b, r.dtype) for b in (r.start, r.stop, r.step))
        bound = None
        if all(_number(b) for b in (r.start, r.stop, r.step)):
            bound = max(0, math.ceil((r.stop - r.start) / r.step))

        def item(i):
            return i

        def more(i):
            if _number(r.step):
                return i < stop if r.step > 0 else i > stop
            return where(step > 0, i < stop, i > stop)
    else:
        if iterable.ndim == 0:
            raise TypeError(f"{site}: a `for` loop cannot iterate over a 0-d tensor")
        n = int(iterable.shape[0])
        start, step, bound = convert_to_tensor(0, dtype=np.int32), 1, n

        def item(i):
            return iterable[i]

        def more(i):
            return i < n

    def test(i, *vals):
        ok = more(i)
        return ok if extra_test is None else and_(lambda: ok, lambda: extra_test(*vals))

    def step_body(i, *vals):
        return (i + step, *body(item(i), *vals))

    out = _loop("for", site, test, step_body, (start, *values), ("the loop counter", *names),
                opts, bound)
    return tuple(out[1:])


# --- conversion ----------------------------------------------------------------------------------
_SKIPPED = {"tapegrad", "numpy", "jax", "jaxlib", "scipy", "builtins", "array_api_strict",
            "dask", "cupy", "typing", "functools", "pytest", "_pytest"}
_LIBRARY_DIRS = tuple({os.path.realpath(p) + os.sep for p in (
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"]) if p})
_FUTURES = functools.reduce(lambda a, f: a | getattr(__future__, f).compiler_flag,
                            __future__.all_feature_names, 0)
_CELL = types.CellType(sys.modules[__name__])
# calls that must stay where they are written (they read their caller's frame)
_FRAME_CALLS = {"super", "locals", "globals", "vars", "eval", "exec", "dir"}


def _user_code(f) -> bool:
    code = f.__code__
    module = str(f.__globals__.get("__name__", "")).split(".")[0]
    return not (module in _SKIPPED or f.__name__ == "<lambda>"
                or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE
                                    | inspect.CO_ASYNC_GENERATOR)
                or os.path.realpath(code.co_filename).startswith(_LIBRARY_DIRS))


def _conversion(f):
    """``(code, cell)`` of ``f``'s converted function, or None (not converted)."""
    if not _user_code(f):
        return None
    try:
        tree = _converted_tree(f)
        if tree is None:
            return None
        code = compile(tree, f.__code__.co_filename, "exec",
                       flags=f.__code__.co_flags & _FUTURES, dont_inherit=True)
    except Exception as e:  # noqa: BLE001 - a construct the converter does not handle
        warnings.warn(f"AutoGraph could not convert {f.__qualname__} "
                      f"({f.__code__.co_filename}:{f.__code__.co_firstlineno}): "
                      f"{type(e).__name__}: {e}; it runs as written (Python control flow on "
                      "traced tensors then raises)", stacklevel=3)
        return None
    factory = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in factory.co_consts
                 if isinstance(c, types.CodeType) and c.co_name == f.__code__.co_name)
    return inner.replace(co_qualname=f.__code__.co_qualname), _CELL


def _converted_tree(f):
    """The ``ast.Module`` defining ``ag__factory(ag__, *freevars)`` that returns ``f``
    converted, with ``f``'s file's line numbers; None without source."""
    f = getattr(f, "__func__", f)
    if not isinstance(f, types.FunctionType) or f.__name__ == "<lambda>":
        return None
    try:
        lines, first = inspect.getsourcelines(f)
    except (OSError, TypeError):
        return None
    indent = len(lines[0]) - len(lines[0].lstrip())
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != f.__code__.co_name:
        return None
    fdef.decorator_list = []
    _Converter(f.__code__.co_filename, first).function(fdef)
    params = ["ag__", *f.__code__.co_freevars]
    factory = ast.FunctionDef(
        name="ag__factory", args=ast.arguments(
            posonlyargs=[], args=[ast.arg(arg=p) for p in params], kwonlyargs=[],
            kw_defaults=[], defaults=[]),
        # the def must not bind f's name in the factory: a module function that calls itself
        # reads its name as a global, not as a cell of the factory
        body=[*([ast.Global(names=[fdef.name])] if fdef.name not in params else []),
              fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    ast.copy_location(factory, fdef)
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    seen = set()
    for node in ast.walk(module):  # the original file's lines and columns
        if hasattr(node, "lineno") and id(node) not in seen:
            seen.add(id(node))
            node.lineno += first - 1
            node.col_offset += indent
            if getattr(node, "end_lineno", None) is not None:
                node.end_lineno += first - 1
            if getattr(node, "end_col_offset", None) is not None:
                node.end_col_offset += indent
    return module


def _name(n, store=False):
    return ast.Name(id=n, ctx=ast.Store() if store else ast.Load())


def _ag(attr):
    return ast.Attribute(value=_name("ag__"), attr=attr, ctx=ast.Load())


def _assign(n, value):
    return ast.Assign(targets=[_name(n, True)], value=value)


def _not(n):
    return ast.UnaryOp(op=ast.Not(), operand=_name(n))


def _scan(nodes):
    """``(stores, loads)``: the names a list of AST nodes binds and reads, not looking into
    nested scopes (a nested function's or lambda's loads all count as reads)."""
    stores, loads = set(), set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else stores).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            if not isinstance(n, ast.Lambda):
                stores.add(n.name)
            loads |= {m.id for m in ast.walk(n) if isinstance(m, ast.Name)
                      and isinstance(m.ctx, ast.Load)}
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            own = _scan([g.target for g in n.generators])[0]
            inner = _scan([c for c in ast.iter_child_nodes(n)])[1]
            loads |= inner - own
        elif isinstance(n, ast.AugAssign):
            if isinstance(n.target, ast.Name):
                loads.add(n.target.id)
            stack.extend(ast.iter_child_nodes(n))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            stores |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler):
            if n.name:
                stores.add(n.name)
            stack.extend(ast.iter_child_nodes(n))
        elif not isinstance(n, (ast.Global, ast.Nonlocal)):
            stack.extend(ast.iter_child_nodes(n))
    return stores, loads


def _live(stmts, out, mark):
    """The names live before ``stmts`` given those live after (backward liveness); with
    ``mark``, each ``if``/``while``/``for`` gets ``_ag_live`` (live after it) and each loop
    ``_ag_head`` (live at its head)."""
    live = set(out)
    for s in reversed(stmts):
        live = _live_stmt(s, live, mark)
    return live


def _live_stmt(s, out, mark):
    if isinstance(s, ast.If):
        if mark:
            s._ag_live = set(out)
        return _scan([s.test])[1] | _live(s.body, out, mark) | _live(s.orelse, out, mark)
    if isinstance(s, (ast.While, ast.For)):
        if isinstance(s, ast.While):
            kill, reads = set(), _scan([s.test])[1]
        else:
            kill = _scan([s.target])[0]
            reads = _scan([s._ag_extra])[1] if getattr(s, "_ag_extra", None) else set()
        base = out | reads | _live(s.orelse, out, mark)
        head = base
        while True:
            new = base | (_live(s.body, head, False) - kill)
            if new == head:
                break
            head = new
        if mark:
            s._ag_live, s._ag_head = set(out), head
            _live(s.body, head, True)
        return head | (_scan([s.iter])[1] if isinstance(s, ast.For) else set())
    if isinstance(s, ast.With):
        stores, loads = _scan(s.items)
        return (_live(s.body, out, mark) - stores) | loads
    if isinstance(s, ast.Try):
        fin = _live(s.finalbody, out, mark)
        handlers = set().union(set(), *(_live(h.body, fin, mark) | _scan([h.type] if h.type
                                        else [])[1] for h in s.handlers))
        body = _live(s.body, _live(s.orelse, fin, mark) | handlers, mark)
        return body | handlers | fin
    stores, loads = _scan([s])
    if isinstance(s, (ast.AsyncFor, ast.AsyncWith, ast.Match)):
        return out | loads  # not converted: no kills
    return (out - stores) | loads


def _own_nodes(stmts):
    """The nodes of ``stmts``, not looking into nested functions, classes and lambdas."""
    stack = list(stmts)
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))


def _jumps(stmts, loop_level=True):
    """``(break/continue of this loop, return)`` anywhere in ``stmts`` (not nested scopes)."""
    own, ret = set(), False
    stack = list(stmts)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Break, ast.Continue)):
            own.add(type(n))
        elif isinstance(n, ast.Return):
            ret = True
        elif isinstance(n, (ast.While, ast.For, ast.AsyncFor)):
            inner_ret = _jumps(n.body + n.orelse)[1]
            ret = ret or inner_ret
            stack.extend(n.orelse)
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                ast.Lambda, ast.expr)):
            stack.extend(ast.iter_child_nodes(n))
    return own, ret


class _Converter(ast.NodeTransformer):
    """Rewrites one function (see the module docstring)."""

    def __init__(self, filename, first):
        self.filename, self.first = filename, first
        self.count = 0
        self.declared = []  # the function's global/nonlocal statements

    # -- pass A: break, continue and return as flags ------------------------------------------
    def function(self, fdef):
        self.declared = [s for s in _own_nodes(fdef.body)
                         if isinstance(s, (ast.Global, ast.Nonlocal))]
        self.skip = {n for s in self.declared for n in s.names}
        body = fdef.body
        lower_ret = any(_jumps([s])[1] for s in body[:-1]) or (
            body and not isinstance(body[-1], ast.Return) and _jumps(body[-1:])[1])
        ctx = {"brk": None, "cont": None, "ret": bool(lower_ret)}
        body = self.block(body, ctx)
        if lower_ret:
            body = [_assign("ag__retval", ast.Call(func=_ag("Undefined"), args=[
                ast.Constant("the return value")], keywords=[])),
                _assign("ag__do_return", ast.Constant(False)), *body,
                ast.Return(value=ast.Call(func=_ag("ret"), args=[_name("ag__retval")],
                                          keywords=[]))]
        _live(body, set(), True)  # pass B
        fdef.body = [n for s in body for n in self._visit_stmt(s)]  # pass C
        return fdef

    def _new(self, what):
        self.count += 1
        return f"ag__{what}_{self.count}"

    def block(self, stmts, ctx):
        out = []
        for k, s in enumerate(stmts):
            rest = stmts[k + 1:]
            if isinstance(s, ast.Break) and ctx["brk"]:
                out.append(ast.copy_location(_assign(ctx["brk"], ast.Constant(True)), s))
                return out
            if isinstance(s, ast.Continue) and ctx["cont"]:
                out.append(ast.copy_location(_assign(ctx["cont"], ast.Constant(True)), s))
                return out
            if isinstance(s, ast.Return) and ctx["ret"]:
                value = _loaded(s.value) if s.value else ast.Constant(None)
                out += [ast.copy_location(_assign("ag__retval", value), s),
                        ast.copy_location(_assign("ag__do_return", ast.Constant(True)), s)]
                return out
            own, ret = _jumps([s]) if not isinstance(s, (ast.While, ast.For)) else (
                set(), _jumps([s])[1])
            ret = ret and ctx["ret"]
            own = own if ctx["brk"] or ctx["cont"] else set()
            if isinstance(s, (ast.While, ast.For)):
                out += self.loop(s, ctx)
                if ret and rest:
                    out.append(ast.copy_location(ast.If(test=_not("ag__do_return"),
                                                        body=self.block(rest, ctx), orelse=[]),
                                                 s))
                    return out
                continue
            if isinstance(s, ast.If) and (own or ret):
                s.body = self.block(s.body + copy.deepcopy(rest), ctx)
                s.orelse = self.block(s.orelse + copy.deepcopy(rest), ctx)
                out.append(s)
                return out
            if isinstance(s, ast.If):
                s.body, s.orelse = self.block(s.body, ctx), self.block(s.orelse, ctx)
            elif isinstance(s, (ast.With, ast.Try)):
                for field in ("body", "orelse", "finalbody"):
                    if hasattr(s, field):
                        setattr(s, field, self.block(getattr(s, field), ctx))
                for h in getattr(s, "handlers", []):
                    h.body = self.block(h.body, ctx)
                flags = [f for f, on in ((ctx["brk"], ast.Break in own),
                                         (ctx["cont"], ast.Continue in own),
                                         ("ag__do_return", ret)) if on]
                if flags and rest:
                    out.append(s)
                    test = (ast.UnaryOp(op=ast.Not(), operand=ast.BoolOp(
                        op=ast.Or(), values=[_name(f) for f in flags])) if len(flags) > 1
                        else _not(flags[0]))
                    out.append(ast.copy_location(ast.If(test=test, body=self.block(rest, ctx),
                                                        orelse=[]), s))
                    return out
            out.append(s)
        return out

    def loop(self, s, ctx):
        body = list(s.body)
        first = body[0] if body else None
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
                and getattr(first.value.func, "attr", getattr(first.value.func, "id", None))
                == "set_loop_options"):
            s._ag_opts = first.value.keywords  # the call stays: it checks its keywords
        own, ret = _jumps(body)
        brk = self._new("brk") if ast.Break in own else None
        cont = self._new("cont") if ast.Continue in own else None
        body = self.block(body, {"brk": brk, "cont": cont, "ret": ctx["ret"]})
        if cont:
            body.insert(0, ast.copy_location(_assign(cont, ast.Constant(False)), s))
        s.body = body
        guards = ([_not(brk)] if brk else []) + (
            [_not("ag__do_return")] if ret and ctx["ret"] else [])
        if isinstance(s, ast.While):
            if guards:
                s.test = ast.BoolOp(op=ast.And(), values=[*guards, s.test])
        elif guards:
            s._ag_extra = guards[0] if len(guards) == 1 else ast.BoolOp(op=ast.And(),
                                                                        values=guards)
        pre = [ast.copy_location(_assign(brk, ast.Constant(False)), s)] if brk else []
        post = []
        if s.orelse:
            orelse = self.block(s.orelse, ctx)
            post = ([ast.copy_location(ast.If(test=_not(brk), body=orelse, orelse=[]), s)]
                    if brk else orelse)
            s.orelse = []
        return [*pre, s, *post]

    # -- pass C: control flow, boolean operators and calls as the runtime's functions --------
    def _visit_stmt(self, s):
        r = self.visit(s)
        return r if isinstance(r, list) else [r]

    def _body(self, stmts):
        return [n for s in stmts for n in self._visit_stmt(s)] or [ast.Pass()]

    def _site(self, node):
        return ast.Constant(f"{self.filename}:{node.lineno + self.first - 1}")

    def _prelude(self, names, node):
        """``try: x / except NameError: x = ag__.Undefined('x')`` for each of ``names``."""
        return [ast.copy_location(ast.Try(
            body=[ast.Expr(value=_name(n))],
            handlers=[ast.ExceptHandler(type=_name("NameError"), name=None, body=[
                _assign(n, ast.Call(func=_ag("Undefined"), args=[ast.Constant(n)],
                                    keywords=[]))])],
            orelse=[], finalbody=[]), node) for n in names]

    def _def(self, name, params, body, node, returns):
        decl = [copy.deepcopy(d) for d in self.declared]
        tail = [ast.Return(value=ast.Tuple(elts=[_name(n) for n in returns], ctx=ast.Load()))]
        return ast.copy_location(ast.FunctionDef(
            name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params],
                                          kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=[*decl, *body, *tail], decorator_list=[], returns=None, type_comment=None),
            node)

    def _call_stmt(self, helper, args, names, node):
        call = ast.Call(func=_ag(helper), args=[
            *args, ast.Tuple(elts=[_name(n) for n in names], ctx=ast.Load()),
            ast.Tuple(elts=[ast.Constant(n) for n in names], ctx=ast.Load()), *(
                [] if helper == "if_stmt" else [self._opts(node)]), self._site(node)],
            keywords=[])
        if not names:
            return ast.copy_location(ast.Expr(value=call), node)
        return ast.copy_location(ast.Assign(targets=[ast.Tuple(
            elts=[_name(n, True) for n in names], ctx=ast.Store())], value=call), node)

    def _opts(self, node):
        kws = getattr(node, "_ag_opts", None)
        if not kws:
            return ast.Constant(None)
        return ast.Dict(keys=[ast.Constant(k.arg) for k in kws],
                        values=[self.visit(k.value) for k in kws])

    def visit_If(self, node):
        live = getattr(node, "_ag_live", None)
        assigned = _scan(node.body + node.orelse)[0] - self.skip
        exposed = _live(node.body, set(), False) | _live(node.orelse, set(), False)
        outs = sorted(assigned & ((live if live is not None else assigned) | exposed))
        test = self.visit(node.test)
        t, f = self._new("if_true"), self._new("if_false")
        return [*self._prelude(outs, node),
                self._def(t, outs, self._body(node.body), node, outs),
                self._def(f, outs, self._body(node.orelse), node, outs),
                self._call_stmt("if_stmt", [test, _name(t), _name(f)], outs, node)]

    def visit_While(self, node):
        head = getattr(node, "_ag_head", None)
        assigned = _scan(node.body)[0] - self.skip
        names = sorted(assigned & (head if head is not None else assigned))
        test = self.visit(node.test)
        t, b = self._new("while_test"), self._new("while_body")
        test_def = self._def(t, names, [], node, [])
        test_def.body[-1] = ast.Return(value=test)
        return [*self._prelude(names, node), test_def,
                self._def(b, names, self._body(node.body), node, names),
                self._call_stmt("while_stmt", [_name(t), _name(b)], names, node)]

    def visit_For(self, node):
        head = getattr(node, "_ag_head", None)
        targets = _scan([node.target])[0]
        assigned = (_scan(node.body)[0] | targets) - self.skip
        names = sorted(assigned & (head if head is not None else assigned))
        it = node.iter
        if isinstance(it, ast.Call) and (
                getattr(it.func, "id", None) == "range"
                or getattr(it.func, "attr", None) in ("range", "arange")):
            it = ast.copy_location(ast.Call(func=_ag("range_"), args=[it.func, *it.args],
                                            keywords=it.keywords), it)
        it = self.visit(it)
        b, e = self._new("for_body"), self._new("for_test")
        item = self._new("item")
        body = [ast.copy_location(ast.Assign(targets=[node.target], value=_name(item)), node),
                *self._body(node.body)]
        defs = [self._def(b, [item, *names], body, node, names)]
        extra = ast.Constant(None)
        if getattr(node, "_ag_extra", None) is not None:
            test_def = self._def(e, names, [], node, [])
            test_def.body[-1] = ast.Return(value=self.visit(node._ag_extra))
            defs.append(test_def)
            extra = _name(e)
        return [*self._prelude(names, node), *defs,
                self._call_stmt("for_stmt", [it, extra, _name(b)], names, node)]

    def visit_Return(self, node):
        node = self.generic_visit(node)
        if node.value is not None:
            node.value = _loaded(node.value)
        return node

    def visit_BoolOp(self, node):
        values = [self.visit(v) for v in node.values]
        helper = "and_" if isinstance(node.op, ast.And) else "or_"
        result = values[-1]
        for v in reversed(values[:-1]):
            result = ast.Call(func=_ag(helper), args=[_lambda(v), _lambda(result)], keywords=[])
        return ast.copy_location(result, node)

    def visit_UnaryOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(ast.Call(func=_ag("not_"), args=[node.operand],
                                              keywords=[]), node)
        return node

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        return ast.copy_location(ast.Call(func=_ag("if_exp"), args=[
            node.test, _lambda(node.body), _lambda(node.orelse), self._site(node)],
            keywords=[]), node)

    def visit_Call(self, node):
        node = self.generic_visit(node)
        f = node.func
        if (isinstance(f, ast.Name) and f.id in _FRAME_CALLS) or (
                isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                and f.value.id == "ag__"):
            return node
        node.func = ast.copy_location(ast.Call(func=_ag("call"), args=[f], keywords=[]), f)
        return node

    def _unchanged(self, node):  # nested scopes are not converted
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _unchanged
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _unchanged


def _loaded(expr):
    """``ag__.ld(name)`` for a returned name (an unassigned one raises), else ``expr``."""
    if isinstance(expr, ast.Name) and not expr.id.startswith("ag__"):
        return ast.copy_location(ast.Call(func=_ag("ld"), args=[expr], keywords=[]), expr)
    return expr


def _lambda(expr):
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                         defaults=[]), body=expr)
