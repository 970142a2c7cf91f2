"""JAX interop, both ways: :func:`to_jax` (tapegrad code as a JAX function) and
:func:`from_jax` (a JAX function as a tapegrad op).

tapegrad runs on any Array API library, JAX's included, so both directions run tapegrad ops
on JAX arrays (tracers included): no conversion of programs, only of the derivative rules.

* :func:`to_jax` wraps ``f`` in ``jax.custom_jvp`` whose rule runs ``f`` under a tapegrad
  :class:`~tapegrad.ForwardAccumulator`: JAX's forward mode gets tapegrad's JVPs, and JAX's
  reverse mode transposes them (they are JAX ops underneath), so custom and registered
  gradients of ``f`` are what JAX differentiates, in both modes and to any order.
* :func:`from_jax` records one op per call whose gradient is ``jax.vjp`` and whose JVP is
  ``jax.jvp``, each computed by another ``from_jax`` op: tapegrad differentiates it to any
  order, eagerly and inside ``tg.function``.

Both run JAX with its 64-bit mode on in their own calls only (``config.x64_scope``, as
``tg.function`` runs its programs), because tapegrad's default floating dtype is float64:
NumPy float64 inputs stay float64 in JAX; the user's own JAX code keeps its setting.
"""
from __future__ import annotations

import functools

import numpy as np

from . import _backend, _records, config
from ._registry import CallDef
from ._tape import UnconnectedGradients
from ._tensor import Tensor, wrapped
from .errors import describe_fn
from .forward import _TransposedAccumulator

__all__ = ["to_jax", "from_jax"]

_HINT = 'install JAX with: pip install "tapegrad[jit]"'


def _jax(who):
    try:
        return config.jax_module()
    except ImportError:
        raise ImportError(f"tg.{who} needs JAX, which is not installed; {_HINT}") from None


def _is_tracer(jax, a) -> bool:
    return isinstance(a, jax.core.Tracer)


def _as_jax(o):
    """A Tensor's (or a value's) array as JAX takes it (``_backend.as_jax``)."""
    return _backend.as_jax(o._value if isinstance(o, Tensor) else o)


def _jax_tangents(jax, outs, primal, tangents):
    """The JAX tangents of a function's output leaves ``outs`` (their JAX values ``primal``)
    from a ForwardAccumulator's ``tangents`` of the Tensors among them: JAX's ``float0`` zeros
    for a non-floating output, zeros where no tangent reached, cast to the primal's dtype."""
    it = iter(tangents)
    out = []
    for o, p in zip(outs, primal):
        t = next(it) if isinstance(o, Tensor) else None
        if not _backend.is_floating(p.dtype):
            out.append(np.zeros(p.shape, jax.dtypes.float0))
        elif t is None:
            out.append(jax.numpy.zeros_like(p))
        else:
            tv = _as_jax(t)
            out.append(tv.astype(p.dtype) if tv.dtype != p.dtype else tv)
    return out


# ==============================================================================================
# tapegrad -> JAX
# ==============================================================================================
def to_jax(f):
    """``f`` (a function of Tensors) as a function of JAX arrays that JAX can transform.

    Args:
        f: a Python function of Tensors (and pytrees of them: tuples, lists, dicts), written
            with tapegrad ops, returning a Tensor or a pytree of Tensors (arrays and Python
            numbers are accepted as output leaves too).

    Returns ``g``, called with JAX arrays (or NumPy arrays, Python numbers) in ``f``'s
    argument structure. ``g`` runs ``f`` on Tensors wrapping the values (JAX tracers
    included) and returns JAX arrays in ``f``'s output structure, with the dtypes ``f``
    gives (tapegrad keeps its inputs' dtypes; a Python float constant is float64, tapegrad's
    default). ``jax.jit``, ``jax.vmap``, ``jax.grad``, ``jax.jvp``, ``jax.jacfwd``,
    ``jax.hessian`` and their compositions work on ``g``.

    How derivatives are taken. ``g`` is ``jax.custom_jvp``: its JVP rule runs ``f`` under a
    tapegrad :class:`~tapegrad.ForwardAccumulator`, so the tangent is tapegrad's: each op's
    registered JVP rule, or, for ``custom_gradient`` calls and ops with only a gradient, the
    transpose of their VJP (``docs/architecture.md``, "Forward mode"). JAX's reverse mode
    (``grad``, ``vjp``, ``jacrev``) linearizes that rule and transposes it; the rule's tangent
    computation is tapegrad ops, i.e. JAX ops, linear in the tangents, so JAX can, and the
    transpose of the transposed VJP of a custom gradient is that custom gradient itself. So
    ``jax.grad(g)`` gives ``f``'s custom gradients, not the derivative of their forwards.
    Second order (``jax.hessian``, ``grad(grad(g))``) differentiates the rule's JAX ops
    again, i.e. the derivative of the JVP rules (for a ``custom_gradient``: of its
    ``grad_fn``), as an outer tapegrad tape differentiates ``grad_fn``'s ops. A
    ``jax.custom_vjp`` would give custom gradients too, but JAX refuses ``jax.jvp`` and
    ``jacfwd`` of a ``custom_vjp`` function; the ``custom_jvp`` design serves both modes.

    Forwards that need concrete values (NumPy code, ``tg.numpy_function``) run as
    ``jax.pure_callback`` on traced values, as inside ``tg.function``. ``g`` (and its JVP
    rule, which JAX may trace later) runs with JAX's 64-bit mode on for its own calls only
    (``config.x64_scope``; JAX's process-wide ``jax_enable_x64`` is not changed), so float64
    values stay float64; float32 inputs stay float32 unless ``f`` mixes them with float64
    values (then ``g`` returns float64 arrays, also to a caller in 32-bit mode).

    Limitations: integer and boolean inputs get no tangent (JAX's ``float0``), integer
    outputs a ``float0`` zero tangent; the second-order terms that pass through the *forward*
    of a ``custom_gradient`` are JAX's derivative of that forward (its residuals are computed
    by its ops), not its custom gradient; ``f`` must not read or assign tapegrad Variables
    under a JAX transformation other than reading their values (they are constants to JAX).

    Raises ``TypeError`` if ``f`` is not callable, or (at call time) if an output leaf is not
    a Tensor, array or number; ``ImportError`` without JAX.
    """
    if not callable(f):
        raise TypeError(f"tg.to_jax: expected a function of Tensors, got a "
                        f"{type(f).__name__}")
    jax = _jax("to_jax")
    name = describe_fn(f)

    def run(treedef, values):
        """Tensors wrapping ``values``, and ``f``'s arguments made of them."""
        tensors = [Tensor(v) for v in values]
        args = jax.tree_util.tree_unflatten(treedef, tensors)
        return tensors, args

    def out_leaves(out):
        leaves, tree = jax.tree_util.tree_flatten(out)
        for k, o in enumerate(leaves):
            if not (isinstance(o, Tensor) or hasattr(o, "shape")
                    or isinstance(o, (int, float, complex, bool, np.generic))):
                raise TypeError(f"tg.to_jax({name}): output leaf {k} is a "
                                f"{type(o).__name__}; return Tensors, arrays or numbers "
                                "(in tuples, lists or dicts)")
        return leaves, tree

    @functools.wraps(f)
    @_in_x64(jax)
    def wrapped(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        values = [_as_jax(x) for x in leaves]
        info = {}

        def scope(vals):
            return config.trace_scope() if any(_is_tracer(jax, v) for v in vals) else (
                _NullScope())

        @jax.custom_jvp
        @_in_x64(jax)
        def core(*vals):
            with scope(vals):
                _, fargs = run(treedef, vals)
                outs, tree = out_leaves(f(*fargs))
            info["tree"] = tree
            return [_as_jax(o) for o in outs]

        @core.defjvp
        @_in_x64(jax)
        def core_jvp(primals, tangents):
            with scope((*primals, *tangents)):
                tensors, fargs = run(treedef, primals)
                watched = [k for k, p in enumerate(primals)
                           if _backend.is_floating(p.dtype)]
                with _TransposedAccumulator([tensors[k] for k in watched],
                                             [Tensor(tangents[k]) for k in watched]) as acc:
                    out = f(*fargs)
                outs, tree = out_leaves(out)
                tans = acc.jvp([o for o in outs if isinstance(o, Tensor)],
                               unconnected_gradients=UnconnectedGradients.ZERO)
            info["tree"] = tree
            primal_out = [_as_jax(o) for o in outs]
            return primal_out, _jax_tangents(jax, outs, primal_out, tans)

        flat = core(*values)
        return jax.tree_util.tree_unflatten(info["tree"], flat)

    wrapped.__doc__ = f"{name} as a JAX function (tg.to_jax)"
    return wrapped


def _in_x64(jax):
    """A decorator: the function run with JAX's 64-bit mode on in this thread for each call
    only (``config.x64_caller``)."""
    call = config.x64_caller(jax)

    def decorate(fn):
        @functools.wraps(fn)
        def in_x64(*args):
            return call(fn, args)
        return in_x64
    return decorate


class _NullScope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ==============================================================================================
# JAX -> tapegrad
# ==============================================================================================
def from_jax(jax_fn, name=None):
    """A JAX function as a tapegrad op, differentiable to any order in both modes.

    Args:
        jax_fn: a function of JAX arrays (in tuples, lists and dicts) returning a JAX array or
            a pytree of them, written with ``jax.numpy``/``jax.lax``; it must be traceable by
            JAX (``jax.vjp`` and ``jax.jvp`` are applied to it).
        name: the op type's suffix (``"FromJax:<name>"``; default: the function's name).

    Returns ``op(*args)``: ``args`` in ``jax_fn``'s structure, whose Tensor and array leaves
    are the op's inputs (NumPy and other backends' arrays are converted to JAX arrays of the
    same dtype; other leaves, e.g. Python numbers, are passed to ``jax_fn`` unchanged and are
    not differentiated). The result has ``jax_fn``'s output structure with Tensors as leaves,
    of ``jax_fn``'s shapes and dtypes. Their arrays are the default backend's (NumPy by
    default, via ``np.asarray``) when every input was a NumPy array; when an input is a JAX
    array or tracer (inside ``tg.function``, or ``tg.asarray(jax_array)``) they stay JAX
    arrays, so the op compiles into the caller's program.

    Derivatives. Under a tape or a ``ForwardAccumulator`` the call is recorded as one op
    (``CallDef``):

    * gradient: ``jax.vjp`` of ``jax_fn`` at the inputs. JAX's complex cotangents are the
      conjugates of tapegrad's (TensorFlow's) convention (``docs/architecture.md``, "Complex
      numbers"), so the gradient is ``conj(vjp(conj(dy)))``, the identity on real values;
    * JVP: ``jax.jvp`` of ``jax_fn`` (the same convention in both libraries);

    each computed by another ``from_jax`` op (of the VJP or JVP function), so their gradients
    and JVPs are JAX's again: ``tg.grad(tg.grad(op))``, ``tg.hessian``, forward over reverse
    and every other nesting work to any order. Only floating inputs and outputs are
    differentiated; integer ones get ``None``.

    ``from_jax``'s op (and its gradient and JVP) runs ``jax_fn`` with JAX's 64-bit mode on
    for the call only (``config.x64_scope``, as ``tg.function``; JAX's process-wide
    ``jax_enable_x64`` is not changed), so NumPy float64 inputs stay float64.

    Raises ``TypeError`` if ``jax_fn`` is not callable or an output leaf is not an array;
    ``ImportError`` without JAX; errors of ``jax_fn`` itself propagate.
    """
    if not callable(jax_fn):
        raise TypeError(f"tg.from_jax: expected a function of JAX arrays, got a "
                        f"{type(jax_fn).__name__}")
    label = name if name is not None else getattr(jax_fn, "__name__", "fn")

    def op(*args):
        jax = _jax("from_jax")
        leaves, treedef = jax.tree_util.tree_flatten(args)
        dynamic = [k for k, x in enumerate(leaves) if isinstance(x, Tensor) or _is_array(x)]
        template = list(leaves)
        inputs = [wrapped(leaves[k]) for k in dynamic]
        out_tree = {}

        def flat_fn(*vals):
            lv = list(template)
            for k, v in zip(dynamic, vals):
                lv[k] = v
            out = jax_fn(*jax.tree_util.tree_unflatten(treedef, lv))
            outs, tree = jax.tree_util.tree_flatten(out)
            for k, o in enumerate(outs):
                if not hasattr(o, "dtype"):
                    raise TypeError(f"tg.from_jax({label}): output leaf {k} is a "
                                    f"{type(o).__name__}, not an array; return JAX arrays "
                                    "(in tuples, lists or dicts)")
            out_tree["tree"] = tree
            return list(outs)

        flat_fn.__name__ = label
        outs = _call(jax, flat_fn, f"FromJax:{label}", inputs, jax_fn)
        return jax.tree_util.tree_unflatten(out_tree["tree"], outs)

    functools.update_wrapper(op, jax_fn, updated=())
    op.__doc__ = (f"The JAX function {describe_fn(jax_fn)} as a tapegrad op (tg.from_jax).")
    return op


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) or (
        not isinstance(x, (Tensor, type)) and hasattr(x, "__array_namespace__"))


def _outputs(jax, values, raw_outs):
    """The output arrays as the caller's: JAX's where an input was JAX's (or there were no
    NumPy inputs and the default backend is JAX's), else the default backend's."""
    keeps = any(type(v).__module__.startswith("jax") or _is_tracer(jax, v) for v in values)
    if keeps or any(_is_tracer(jax, o) for o in raw_outs):
        return [Tensor(o) for o in raw_outs]
    if _backend._default is np:
        return [Tensor(np.asarray(o)) for o in raw_outs]
    xp = _backend.default_namespace()
    return [Tensor(_backend.asarray(np.asarray(o), xp=xp)) for o in raw_outs]


def _call(jax, flat_fn, op_type, inputs, function):
    """Run ``flat_fn`` (JAX arrays -> list of JAX arrays) on ``inputs`` (Tensors), record
    it as one op with JAX's VJP and JVP, and return its outputs (Tensors)."""
    values = [t._value for t in inputs]
    with np.errstate(all="ignore"), config.x64_scope(jax):
        raw = flat_fn(*[_backend.as_jax(v) for v in values])
    outs = _outputs(jax, values, raw)
    if _records.trace_entries() and any(_backend.is_floating(o._value.dtype) for o in outs):
        calldef = CallDef(op_type, [f"args[{k}]" for k in range(len(inputs))],
                          functools.partial(_gradient, jax, flat_fn),
                          jvp=functools.partial(_jvp, jax, flat_fn), replay=None,
                          function=function,
                          replay_error="a tg.from_jax op is replayed by calling it again")
        _records.record(calldef, tuple(inputs), {}, tuple(outs))
    return outs


def _restricted(jax, flat_fn, values, fin, fout):
    """``flat_fn`` as a function of its floating inputs ``fin`` (the others fixed to
    ``values``) returning its floating outputs ``fout``."""
    def g(*xs):
        vals = list(values)
        for k, x in zip(fin, xs):
            vals[k] = x
        outs = flat_fn(*vals)
        return [outs[k] for k in fout]
    return g


def _conj(jax, a):
    return jax.numpy.conj(a) if jax.numpy.iscomplexobj(a) else a


def _gradient(jax, flat_fn, op, *dys):
    """The gradient of a ``from_jax`` op: ``conj(jax.vjp(conj(dy)))``, as a ``from_jax`` op of
    the inputs and the cotangents (so it is differentiable again)."""
    xs = list(op.inputs)
    outs = op.outputs
    fin = tuple(k for k, x in enumerate(xs) if _backend.is_floating(x._value.dtype))
    fout = tuple(k for k, o in enumerate(outs) if _backend.is_floating(o._value.dtype))
    if not fin or not fout:
        return [None] * len(xs)
    n = len(xs)
    cts = []
    for k in fout:
        dy = dys[k]
        cts.append(dy if dy is not None else Tensor(_zeros_like_value(outs[k]._value)))

    def vjp_fn(*vals):
        prim, ct = vals[:n], vals[n:]
        try:
            ys, pull = jax.vjp(_restricted(jax, flat_fn, prim, fin, fout),
                               *[prim[k] for k in fin])
            gs = pull([_conj(jax, c).astype(y.dtype) for c, y in zip(ct, ys)])
        except ValueError as e:
            if "does not work for lax.while_loop" not in str(e):
                raise
            raise ValueError(
                f"the gradient of {op.type} (a tg.vmap or JAX call) runs JAX's reverse mode, "
                "which cannot go through a while loop of unknown trip count (a tg.while_loop "
                "without maximum_iterations, or JAX's while_loop): pass maximum_iterations to "
                "tg.while_loop (under differentiation it then runs as a scan of that length), "
                "or use tg.lax.scan / tg.lax.fori_loop with a fixed trip count") from e
        return [_conj(jax, g) for g in gs]

    vjp_fn.__name__ = f"{getattr(flat_fn, '__name__', 'fn')}_vjp"
    gs = _call(jax, vjp_fn, f"FromJax:{vjp_fn.__name__}", [*xs, *cts], vjp_fn)
    out = [None] * n
    for k, g in zip(fin, gs):
        out[k] = g
    return out


def _jvp(jax, flat_fn, op, *ins):
    """The JVP of a ``from_jax`` op: ``jax.jvp``, as a ``from_jax`` op of the inputs and the
    tangents (so it is differentiable again)."""
    xs = list(op.inputs)
    outs = op.outputs
    fin = tuple(k for k, x in enumerate(xs) if _backend.is_floating(x._value.dtype)
                and ins[k] is not None)
    fout = tuple(k for k, o in enumerate(outs) if _backend.is_floating(o._value.dtype))
    if not fin or not fout:
        return [None] * len(outs)
    n = len(xs)

    def jvp_fn(*vals):
        prim, tan = vals[:n], vals[n:]
        fin_prims = [prim[k] for k in fin]
        tan = [t.astype(p.dtype) if t.dtype != p.dtype else t for t, p in zip(tan, fin_prims)]
        _, t_out = jax.jvp(_restricted(jax, flat_fn, prim, fin, fout), fin_prims, tan)
        return list(t_out)

    jvp_fn.__name__ = f"{getattr(flat_fn, '__name__', 'fn')}_jvp"
    ts = _call(jax, jvp_fn, f"FromJax:{jvp_fn.__name__}", [*xs, *[ins[k] for k in fin]],
               jvp_fn)
    out = [None] * len(outs)
    for k, t in zip(fout, ts):
        out[k] = t
    return out


def _zeros_like_value(v):
    return _backend.namespace(v).zeros_like(v)

