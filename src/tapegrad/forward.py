"""Forward mode: ``ForwardAccumulator`` (TensorFlow 2) and the functional transforms built on
it alone: ``jvp`` and ``jacfwd`` (JAX's names; ``hessian`` and ``hvp``, forward over reverse,
are in :mod:`tapegrad.transforms`).

An accumulator is an observer of the recording state (``tapegrad._records``): it sees every op
as it runs and, where an input has a tangent, computes the outputs' tangents at once. The JVP
rule of an op is the one registered for its gradient's op type with ``tg.RegisterJVP`` (beside
the forward and the gradient in the op's module), or
else the **transpose of its VJP**: a gradient function is linear in its cotangent ``u``,
``g(u) = J^T u``, so ``J v`` is the gradient with respect to ``u`` of ``<g(u), v>`` (the
"double VJP", Townsend 2017, "A new trick for calculating Jacobian vector products"); complex
numbers are (real, imaginary) pairs there, ``<g, v> = Re(sum(g conj(v)))``, under which
tapegrad's (TensorFlow's) VJP is the transpose of the JVP, so a JVP is ``f'(z) v`` for a
holomorphic ``f`` (``docs/architecture.md``, "Complex numbers"). So every
op with a gradient (built-in, ``custom_gradient``, registered by name, overridden by
``gradient_override_map``) works in forward mode, with its custom rule respected, and the
tangents are computed with tapegrad ops: differentiable again, by tapes and by outer
accumulators.
"""
from __future__ import annotations

import sys
import warnings

from . import _backend, _records
from ._pytree import show, tree_flatten, tree_unflatten
from ._records import Dropped
from ._tape import GradientTape, UnconnectedGradients, _flatten, _unflatten, _zeros_for
from ._tensor import Tensor
from .ops.creation import convert_to_tensor
from ._views import OperationView
from .errors import GradientShapeError, GradientTypeError, describe_fn
from .ops import astype, broadcast_to, conj, identity, real, reshape, stack, zeros, zeros_like
from .ops import sum as _sum

__all__ = ["ForwardAccumulator", "jvp", "jacfwd"]

class ForwardAccumulator:
    """Computes Jacobian-vector products of the ops run in its block (``tf.autodiff``).

    Args:
        primals: a Tensor or Variable, or a (nested) list, tuple or dict of them, each at
            most once. Only floating ones (real or complex) are watched: an integer or boolean
            primal is skipped with a warning (TensorFlow warns likewise), as
            ``GradientTape.watch`` skips it, so what depends only on it has no JVP (``None``).
        tangents: the same structure; each tangent has its primal's shape and is cast to its
            dtype (a real tangent of a complex primal becomes complex).

    ``acc.jvp(target)`` is the directional derivative of ``target`` along the tangents.
    Accumulators nest (an outer one differentiates the inner one's JVPs: second order), and
    combine with ``GradientTape`` in both orders (forward-over-reverse for Hessian-vector
    products, reverse-over-forward). Raises ``ValueError`` for mismatched structures or shapes
    and for a primal given twice (TensorFlow's rule: sum the tangents instead), ``TypeError``
    for a primal that is not a Tensor or a complex tangent of a real primal.
    """

    _observer = True
    _differentiates = True
    _transposed = False  # True: JAX may transpose what runs in the block (see below)

    def __init__(self, primals, tangents):
        self._tangents = {}
        self._active = False
        ps, ts = _flatten(primals), _flatten(tangents)
        if len(ps) != len(ts):
            raise ValueError(f"ForwardAccumulator: {len(ps)} primal(s) but {len(ts)} "
                             "tangent(s); give one tangent per primal, in the same structure")
        for p, t in zip(ps, ts):
            self.watch(p, t)

    def __enter__(self):
        if self._active:
            raise ValueError("this ForwardAccumulator is already active; do not re-enter it "
                             "(TensorFlow raises ValueError too)")
        self._active = True
        _records.push_entry(self)
        return self

    def __exit__(self, *exc):
        self._active = False
        _records.remove_entry(self)
        return False

    def watch(self, primal, tangent):
        """Give ``primal`` (a Tensor or Variable, or a structure of them) the ``tangent`` (the
        same structure; each of its primal's shape, cast to its dtype).

        Warns (``UserWarning``) and skips an integer or boolean primal. Raises ``TypeError``
        for a primal that is not a Tensor or a complex tangent of a real primal,
        ``ValueError`` for a tangent of another shape or a primal that already has a tangent
        here (watched before, or computed by an op in this accumulator's block).
        """
        for p, t in zip(_flatten(primal), _flatten(tangent)):
            if not isinstance(p, Tensor):
                raise TypeError(f"ForwardAccumulator: a primal must be a Tensor or Variable, "
                                f"got {type(p).__name__}")
            if not _backend.is_floating(p.dtype):
                warnings.warn(f"ForwardAccumulator: a primal of dtype {p.dtype} cannot carry a "
                              "tangent (only floating dtypes do); it is not watched, so what "
                              "depends only on it has no JVP. Cast it to a floating dtype "
                              "(tg.astype) before the accumulator if it should have one",
                              stacklevel=_caller_level())
                continue
            if p._id in self._tangents:
                raise ValueError(
                    f"ForwardAccumulator: the {type(p).__name__} of shape {p.shape} (id "
                    f"{p._id}) already has a tangent in this accumulator (it was given as a "
                    "primal multiple times, or an op in the block computed it); a tensor is watched "
                    "once. If you meant both tangents, watch it once with their sum, as "
                    "TensorFlow asks")
            self._tangents[p._id] = _as_tangent(p, t)

    def jvp(self, primals, unconnected_gradients=UnconnectedGradients.NONE):
        """The tangent of each of ``primals`` (a Tensor or a structure of them), in their
        structure: ``None`` (or zeros, with ``UnconnectedGradients.ZERO``) where a primal does
        not depend on the watched ones."""
        zero = UnconnectedGradients(unconnected_gradients) is UnconnectedGradients.ZERO
        out = []
        for p in _flatten(primals):
            t = self._tangents.get(p._id) if isinstance(p, Tensor) else None
            out.append(zeros_like(p) if t is None and zero else t)
        return _unflatten(primals, iter(out))

    # --- seeing ops ---------------------------------------------------------------------------
    def observe(self, opdef, args, attrs, outs):
        """Called by the recording state for each op run in the block (not by users): store
        the tangents of ``outs`` (Tensors) from those of ``args`` by the op's JVP rule."""
        tangents = self._tangents
        get = tangents.get
        n = len(args)
        if n == 2:  # ops of one or two inputs (most) without a comprehension's frame
            a, b = args
            ins = (get(a._id) if isinstance(a, Tensor) else None,
                   get(b._id) if isinstance(b, Tensor) else None)
            if ins[0] is None and ins[1] is None:
                return
        elif n == 1:
            a = args[0]
            ins = (get(a._id) if isinstance(a, Tensor) else None,)
            if ins[0] is None:
                return
        else:
            ins = [get(a._id) if isinstance(a, Tensor) else None for a in args]
            for t in ins:
                if t is not None:
                    break
            else:
                return
        if not opdef.differentiable:
            return
        op = _records.new_record(opdef, args, attrs, outs, whole=True)
        saved = _records.trace_entries()
        # inner tapes pause while the rule runs (its ops are no business of theirs)
        paused = () if len(saved) == 1 else saved[:saved.index(self)] if self in saved else saved
        rule = getattr(op._gdef, "jvp", None)  # custom_gradient: none
        with _records.trace_stack(paused):
            res = NotImplemented if rule is None else rule(op, *ins)
            if type(res) is Tensor and len(outs) == 1:  # the common case
                o = outs[0]
                rv, ov = res._value, o._value
                if (type(rv) is not type(ov) or rv.shape != ov.shape
                        or rv.dtype is not ov.dtype and rv.dtype != ov.dtype):
                    res = _checked_tangent(op, 0, res, rule)
                if res is not None:
                    tangents[o._id] = res
                return
            outs_t = _rule_tangents(op, ins, rule, res)
        for o, t in zip(outs, outs_t):
            if t is not None:
                tangents[o._id] = t


class _TransposedAccumulator(ForwardAccumulator):
    """The accumulator of a ``jax.custom_jvp`` rule (``tg.vmap``, ``tg.to_jax``): JAX may
    linearize and transpose the JVP traced in its block (``jax.vjp``, ``jax.grad``), so a
    construct with a transposable form takes it there, as under a recording tape (a
    ``tg.while_loop`` with an int ``maximum_iterations`` runs as a scan of that length, not as
    ``lax.while_loop``, which JAX cannot transpose)."""

    _transposed = True


class _Inherited(dict):
    """The tangents of a loop step's accumulator: its own, else those that the outer
    accumulator holds (for tensors made before the step: its captures)."""

    __slots__ = ("outer",)

    def get(self, key, default=None):
        t = dict.get(self, key)
        return self.outer.get(key, default) if t is None else t

    def __contains__(self, key):
        return dict.__contains__(self, key) or key in self.outer


def inheriting(outer, primals, tangents) -> ForwardAccumulator:
    """A ``ForwardAccumulator`` of ``primals`` and ``tangents`` (as the constructor's) for one
    step of a construct fused with its JVP (``control_flow``): a tensor made before the step
    that the step reads has the tangent that the accumulator ``outer`` gives it, so the step
    need not know its captures before it is traced."""
    acc = ForwardAccumulator(primals, tangents)
    inherited = _Inherited(acc._tangents)
    inherited.outer = outer._tangents
    acc._tangents = inherited
    return acc


def _as_tangent(p, t):
    """The tangent ``t`` of the primal ``p`` as a Tensor of ``p``'s shape and dtype."""
    t = t if isinstance(t, Tensor) else convert_to_tensor(
        t, dtype=p.dtype if getattr(t, "dtype", None) is None else None)
    if tuple(t.shape) != tuple(p.shape):
        raise ValueError(f"ForwardAccumulator: a tangent of shape {tuple(t.shape)} for "
                         f"a primal of shape {tuple(p.shape)}; they must match")
    if t.dtype != p.dtype:
        if t.dtype.kind == "c" and p.dtype.kind != "c":
            raise TypeError(f"ForwardAccumulator: a complex tangent (dtype {t.dtype}) for a "
                            f"real primal of dtype {p.dtype}; a real primal moves along real "
                            "directions only: make the primal complex (tg.astype) or give a "
                            "real tangent")
        t = astype(t, p.dtype)
    return t


def _caller_level() -> int:
    """The ``stacklevel`` of a warning that names the first frame outside this module."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


def linearize(op, ins) -> list:
    """The output tangents of an op recorded on a tape (``GradientTape.jacobian`` in forward
    mode). A JVP rule may read any input or output, so a record that dropped one (it keeps
    only what the gradient reads) takes the transposed VJP, which reads only that."""
    whole = not any(type(v) is Dropped for v in (*op.inputs, *op.outputs))
    return _tangents(op, ins, whole)


def _tangents(op, ins, use_rule) -> list:
    """One tangent (or None) per output of the record ``op``: its JVP rule's (if
    ``use_rule``), else the transposed VJP's."""
    rule = getattr(op._gdef, "jvp", None) if use_rule else None  # custom_gradient: none
    return _rule_tangents(op, ins, rule, NotImplemented if rule is None else rule(op, *ins))


def _rule_tangents(op, ins, rule, res) -> list:
    """The output tangents of the record ``op`` from what its JVP ``rule`` returned, ``res``
    (a Tensor, a tuple with one per output, or ``NotImplemented``: take the transposed VJP)."""
    outs = op.outputs
    if res is not NotImplemented:
        res = list(res) if isinstance(res, (tuple, list)) else [res]
        if len(res) != len(outs):
            raise GradientShapeError(
                f"the JVP rule {describe_fn(rule)} of op type {op._gdef.type!r} returned "
                f"{len(res)} tangent(s) for {len(outs)} output(s); return one per output")
        return [None if t is None else _checked_tangent(op, k, t, rule)
                for k, t in enumerate(res)]
    floating = [k for k, i in enumerate(op._out_ids) if i in op._float_out]
    us = [_zeros_for(o) for o in outs]
    needed = [k for k, t in enumerate(ins) if t is not None]
    with GradientTape() as tape:
        tape.watch([us[k] for k in floating])
        gs = OperationView(op).gradient(*us, needed=needed)
        terms = [_inner(gs[k], ins[k]) for k in needed if gs[k] is not None]
        if not terms:
            return [None] * len(outs)
        s = terms[0]
        for t in terms[1:]:
            s = s + t
    jv = tape.gradient(s, [us[k] for k in floating])
    out = [None] * len(outs)
    for k, t in zip(floating, jv):
        out[k] = t
    return out


def _checked_tangent(op, k, t, rule):
    """The tangent ``t`` that ``rule`` gave output ``k`` of ``op``, as a Tensor of the output's
    shape and dtype, as the tape checks gradients (``_validation.check_gradient``): a tangent
    that broadcasts to the output's shape is broadcast, a real one of a complex output or one
    of another floating precision is cast, and an integer or boolean output has none. Raises
    ``GradientTypeError`` for a non-tensor, ``GradientShapeError`` for a shape that does not
    broadcast or a complex tangent of a real output."""
    o = op.outputs[k]
    where = (f"the JVP rule {describe_fn(rule)} of op type {op._gdef.type!r} returned a "
             f"tangent for output {k} (shape {tuple(o.shape)}, dtype {o.dtype})")
    if not isinstance(t, Tensor):
        raise GradientTypeError(f"{where} that is a {type(t).__name__}; return a Tensor (or "
                                "None for a zero tangent)")
    if not _backend.is_floating(o.dtype):
        return None
    if tuple(t.shape) != tuple(o.shape):
        try:
            t = broadcast_to(t, tuple(o.shape))
        except ValueError:
            raise GradientShapeError(f"{where} of shape {tuple(t.shape)}, which does not "
                                     "broadcast to it; return a tangent of the output's "
                                     "shape") from None
    if t.dtype != o.dtype:
        if t.dtype.kind == "c" and o.dtype.kind != "c":
            raise GradientShapeError(f"{where} of the complex dtype {t.dtype}; the tangent of a "
                                     "real output is real (take tg.real of it if the rule "
                                     "computes a complex value)")
        t = astype(t, o.dtype)
    return t


def _inner(g, v):
    """``<g, v>``, complex numbers as (real, imaginary) pairs: ``Re(sum(g conj(v)))``. A
    gradient ``g = J^T u`` of tapegrad's convention (``dL/dRe + i dL/dIm``) is the transpose of
    the real-linear map ``J`` under it, so the gradient of ``<J^T u, v>`` in ``u`` is ``J v``."""
    v = v if v.dtype == g.dtype else astype(v, g.dtype)
    if g.dtype.kind == "c":
        return real(_sum(g * conj(v)))
    return _sum(g * v)


# --- functional transforms --------------------------------------------------------------------
def _as_tensors(xs):
    return [convert_to_tensor(x) for x in xs]


def jvp(f, primals, tangents):
    """``(f(*primals), J v)``: the value of ``f`` and its directional derivative along
    ``tangents`` (JAX's ``jax.jvp``), by forward mode.

    ``primals``, ``tangents``: tuples (or lists) of the same length, one item per argument of
    ``f``, each a pytree (``tg.tree_util``: tuples, lists, dicts, namedtuples, registered
    classes) of Tensors, arrays or floats; the tangents have the primals' structure and each
    tangent leaf its primal leaf's shape. ``f`` receives the primals' trees (their leaves as
    Tensors) and returns a pytree; the output tangent has the output's structure (zeros where
    unconnected). A Tensor given at two positions is two arguments, each with its tangent, as
    in JAX. Integer and boolean primal leaves are skipped with a warning, as
    :class:`ForwardAccumulator` does.

    Raises ``TypeError`` if ``primals`` or ``tangents`` is not a tuple or list, ``ValueError``
    if their structures differ (both are shown) or a tangent's shape differs from its primal's.
    """
    for name, given in (("primals", primals), ("tangents", tangents)):
        if not isinstance(given, (tuple, list)):
            raise TypeError(f"jvp: {name} must be a tuple or list with one item per argument "
                            f"of f, got {type(given).__name__}; wrap a single argument as "
                            f"({name[:-1]},)")
    p_leaves, structure = tree_flatten(tuple(primals))
    t_leaves, t_structure = tree_flatten(tuple(tangents))
    if t_structure != structure:
        raise ValueError(f"jvp: the tangents have the structure {show(t_structure)}, but the "
                         f"primals have {show(structure)}; give one tangent per primal leaf, in "
                         "the primals' structure")
    ps, ts = _as_tensors(p_leaves), _as_tensors(t_leaves)
    seen = set()
    for k, p in enumerate(ps):
        if id(p) in seen:
            ps[k] = Tensor(p._value)
        seen.add(id(p))
    with ForwardAccumulator(ps, ts) as acc:
        out = f(*tree_unflatten(structure, ps))
    outs, out_structure = tree_flatten(out)
    outs = _as_tensors(outs)
    return out, tree_unflatten(out_structure,
                               acc.jvp(outs, unconnected_gradients=UnconnectedGradients.ZERO))


def jacfwd(f, argnums=0):
    """The Jacobian of ``f`` with respect to argument(s) ``argnums``, by forward mode: one JVP
    per input element (JAX's ``jax.jacfwd``; cheaper than reverse mode when inputs are fewer
    than outputs). Arguments and outputs may be pytrees (``tg.tree_util``: tuples, lists,
    dicts, namedtuples, registered classes). For an output leaf of shape ``T`` (dtype ``D``)
    and an argument leaf of shape ``S`` the block has shape ``T + S`` (dtype ``D``); the result
    has ``f``'s output structure, each output leaf replaced by the structure of argument
    ``argnums`` (an int) or by a tuple of such trees (a tuple of ints), as in JAX. The
    differentiated leaves reach ``f`` as new Tensors (``tg.identity``: a Tensor passed twice
    is two inputs, as in JAX); the other arguments as they are.
    """
    def jac(*args):
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        args = list(args)
        sources = []  # per differentiated argument: its structure and its leaves as passed
        for i in nums:
            leaves, structure = tree_flatten(args[i])
            xs = [identity(x) for x in _as_tensors(leaves)]
            args[i] = tree_unflatten(structure, xs)
            sources.append((structure, xs))
        flat = [x for _, xs in sources for x in xs]
        columns = [[] for _ in flat]  # per source leaf, per element: the outputs' tangents
        outs = None
        for x, cols in zip(flat, columns):
            for j in range(x.size):
                with ForwardAccumulator(x, reshape(_onehot(x, j), x.shape)) as acc:
                    outs, out_structure = tree_flatten(f(*args))
                    outs = _as_tensors(outs)
                cols.append(acc.jvp(outs, unconnected_gradients=UnconnectedGradients.ZERO))
        if outs is None:  # no input elements: the outputs' shapes from one call
            outs, out_structure = tree_flatten(f(*args))
            outs = _as_tensors(outs)
        blocks = []
        for k, y in enumerate(outs):
            it = (_block(y, x, [c[k] for c in cols]) for x, cols in zip(flat, columns))
            trees = tuple(tree_unflatten(s, [next(it) for _ in xs]) for s, xs in sources)
            blocks.append(trees[0] if isinstance(argnums, int) else trees)
        return tree_unflatten(out_structure, blocks)

    return jac


def _block(y, x, cols):
    """The Jacobian block of output ``y`` with respect to input ``x`` from its columns (one
    tangent of ``y`` per element of ``x``): shape ``y.shape + x.shape``."""
    if not cols:
        return zeros(tuple(y.shape) + tuple(x.shape), dtype=y.dtype)
    return reshape(stack(cols, axis=-1), tuple(y.shape) + tuple(x.shape))


def _onehot(x, j):
    xp = _backend.namespace(x._value)  # the input's library: a traced x takes JAX's arrays
    return Tensor(xp.astype(xp.arange(x.size) == j, x._value.dtype))
