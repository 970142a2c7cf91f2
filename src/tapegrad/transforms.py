"""Functional transforms with JAX's names, and ``recompute_grad`` with TensorFlow's.

These are thin layers over :class:`~tapegrad.GradientTape`, nothing more: each call runs ``f``
once under a new tape that watches the differentiated arguments and asks that tape for
gradients or a Jacobian. So they see every op a tape sees (built-in, ``custom_gradient``,
registered, overridden: a custom rule is respected) and they nest: the gradient is computed
with tapegrad ops, so an outer transform or tape differentiates it again (``grad(grad(f))``).

* :func:`grad`, :func:`value_and_grad`, :func:`vjp`, :func:`jacrev`: JAX's semantics.
  Arguments and outputs may be pytrees (``tg.tree_util``: tuples, lists, dicts in sorted key
  order, namedtuples, registered classes; ``None`` is an empty subtree) whose leaves are
  Tensors, backend arrays or Python numbers. A differentiated leaf is passed to ``f`` as a
  new Tensor (``tg.identity``), so two arguments holding one Tensor, or ``f`` closing over
  it, stay distinct as in JAX. Gradients are Tensors with their primal's shape and dtype;
  unconnected inputs get zeros (as in JAX).
* :func:`recompute_grad`: TensorFlow's gradient checkpointing, built on
  :func:`~tapegrad.custom_gradient`.

* :func:`hessian`, :func:`hvp`: forward over reverse, :func:`~tapegrad.forward.jacfwd` and
  :func:`~tapegrad.forward.jvp` of :func:`grad`.

``jvp`` and ``jacfwd`` themselves are in :mod:`tapegrad.forward`. JAX is not needed.
"""
from __future__ import annotations

import functools

from . import config
from ._backend import is_floating
from ._pytree import show as _show
from ._pytree import tree_flatten as _tree_flatten
from ._pytree import tree_unflatten as _tree_unflatten
from ._tape import GradientTape
from ._tensor import Tensor
from .ops.creation import convert_to_tensor
from .custom_gradient import _leaf_inputs, _rebuild, _trees, custom_gradient
from .forward import jacfwd, jvp
from .ops import identity, isdtype
from .ops.elementwise import optimization_barrier



# --- the tape under every transform ------------------------------------------------------------
def _argnums(name, argnums, n_args):
    """``argnums`` (an int or a tuple of ints) as a tuple of non-negative indices."""
    nums = (argnums,) if isinstance(argnums, int) else argnums
    if not isinstance(nums, (tuple, list)) or not all(isinstance(i, int) for i in nums):
        raise TypeError(f"{name}: argnums must be an int or a tuple of ints, got {argnums!r}")
    if not nums:
        raise ValueError(f"{name}: argnums is empty; give at least one argument to "
                         "differentiate with respect to")
    for i in nums:
        if not -n_args <= i < n_args:
            raise TypeError(f"{name}: differentiating with respect to argnums={argnums!r} "
                            f"requires at least {max(i, -i - 1) + 1} positional arguments, but "
                            f"f was called with {n_args}")
    return tuple(i % n_args for i in nums)


class _Traced:
    """``f`` run once under a new tape that watches the floating leaves of the
    differentiated arguments.

    ``out``/``aux``: what ``f`` returned; ``sources``: per differentiated argument, its
    structure and its leaves as passed to ``f`` (``None`` for a non-floating leaf).
    """

    def __init__(self, name, f, args, kwargs, argnums, has_aux, persistent, integers_ok=False):
        self.name = name
        args = list(args)
        self.sources = []
        with GradientTape(persistent=persistent, watch_accessed_variables=False) as tape:
            for i in argnums:
                raw, structure = _tree_flatten(args[i])
                xs = [self._primal(i, leaf, integers_ok) for leaf in raw]
                tape.watch([x for x in xs if x is not None])
                self.sources.append((structure, xs))
                args[i] = _tree_unflatten(structure, [r if x is None else x
                                                      for x, r in zip(xs, raw)])
            result = f(*args, **kwargs)
        self.tape = tape
        if has_aux:
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise TypeError(f"{name}: with has_aux=True, f must return a pair "
                                f"(output, auxiliary data); it returned {_kind(result)}")
            result, self.aux = result
        self.out = result

    def _primal(self, i, leaf, integers_ok):
        """The Tensor passed to ``f`` for one leaf of argument ``i`` (``None``: not floating)."""
        x = convert_to_tensor(leaf)
        if is_floating(x.dtype):
            return identity(x)
        if integers_ok:
            return None
        raise TypeError(f"{self.name}: argument {i} has a leaf of dtype {x.dtype}; only "
                        "floating inputs can be differentiated (as in JAX); pass it as a float, "
                        "or leave its position out of argnums")

    def flat_sources(self):
        return [x for _, leaves in self.sources for x in leaves if x is not None]

    def unflatten_sources(self, flat, single):
        """Per-source results (``flat``, one per floating leaf) in the arguments' structure:
        one tree if ``single`` (argnums was an int), else a tuple of trees."""
        it = iter(flat)
        trees = tuple(_tree_unflatten(s, [None if x is None else next(it) for x in leaves])
                      for s, leaves in self.sources)
        return trees[0] if single else trees


def _kind(x):
    return f"a {type(x).__name__}" + (f" of length {len(x)}" if isinstance(x, (tuple, list))
                                       else "")


def _scalar_output(name, out):
    """``out`` as a real floating scalar Tensor, or ``TypeError`` naming what it is."""
    if isinstance(out, (tuple, list, dict)):
        raise TypeError(f"{name}: f must return a scalar, but it returned {_kind(out)}; "
                        "use has_aux=True to return (value, auxiliary data), or tg.jacrev for "
                        "several outputs")
    if out is None:
        raise TypeError(f"{name}: f returned None; it must return the scalar to differentiate "
                        "(a missing `return`?)")
    out = convert_to_tensor(out)
    if out.shape != ():
        raise TypeError(f"{name}: gradients are only defined for scalar-output functions; f "
                        f"returned an output of shape {out.shape} (reduce it, e.g. tg.sum, or "
                        "use tg.vjp or tg.jacrev)")
    if not isdtype(out.dtype, "real floating"):
        raise TypeError(f"{name}: f must return a real floating scalar; it returned dtype "
                        f"{out.dtype}")
    return out


# --- the transforms ---------------------------------------------------------------------------
def value_and_grad(f, argnums=0, has_aux=False):
    """``f`` and its gradient in one call (JAX's ``jax.value_and_grad``).

    Returns a function of ``f``'s arguments returning ``(value, gradient)``, or
    ``((value, aux), gradient)`` with ``has_aux=True`` (then ``f`` returns ``(value, aux)``;
    ``aux`` is passed through, not differentiated). ``value`` is ``f``'s scalar output (a
    Tensor; Python numbers are converted). ``gradient`` has the structure of argument
    ``argnums`` (an int), or is a tuple of such trees (a tuple of ints); each leaf is a Tensor
    with its primal's shape and dtype, zeros where ``f`` does not depend on it. Keyword
    arguments pass through undifferentiated.

    Raises ``TypeError`` if ``f``'s output is not a real floating scalar (the message names
    its shape or dtype), if a differentiated leaf is not floating, if ``argnums`` names a
    missing argument, or if ``has_aux=True`` and ``f`` does not return a pair.
    """
    return _named(_value_and_grad(f, argnums, has_aux, "value_and_grad"), f, "value_and_grad")


def _value_and_grad(f, argnums, has_aux, name):
    """``value_and_grad(f, argnums, has_aux)``, its errors naming the transform ``name``."""
    def value_and_grad_f(*args, **kwargs):
        nums = _argnums(name, argnums, len(args))
        traced = _Traced(name, f, args, kwargs, nums, has_aux, persistent=False)
        out = _scalar_output(name, traced.out)
        flat = traced.tape.gradient(out, traced.flat_sources(), unconnected_gradients="zero")
        g = traced.unflatten_sources(flat, isinstance(argnums, int))
        return ((out, traced.aux) if has_aux else out), g

    return value_and_grad_f


def grad(f, argnums=0, has_aux=False):
    """The gradient of a scalar function (JAX's ``jax.grad``).

    Returns a function of ``f``'s arguments returning the gradient of ``f`` with respect to
    argument ``argnums`` (an int: one tree in that argument's structure; a tuple of ints: a
    tuple of trees), or ``(gradient, aux)`` with ``has_aux=True``. Each gradient leaf is a
    Tensor of its primal's shape and dtype (zeros if ``f`` does not depend on it). ``f`` must
    return a real floating scalar. Built on a tape, so ``grad(grad(f))`` is the second
    derivative. Same errors as :func:`value_and_grad`.
    """
    vg = _value_and_grad(f, argnums, has_aux, "grad")

    def grad_f(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return _named(grad_f, f, "grad")


def vjp(f, *primals, has_aux=False):
    """``f``'s output and its vector-Jacobian product function (JAX's ``jax.vjp``).

    Runs ``f(*primals)`` once and returns ``(out, vjp_fn)`` (``(out, vjp_fn, aux)`` with
    ``has_aux=True``). ``vjp_fn(cotangent)``, with ``cotangent`` of ``out``'s structure and
    shapes, returns a tuple with one gradient tree per primal, each leaf a Tensor with its
    primal's shape and dtype (zeros where unconnected; ``None`` for a non-floating leaf,
    where JAX gives a ``float0`` zero). Non-floating leaves of ``out`` are skipped (their
    cotangents are ignored). ``vjp_fn`` may be called any number of times; it keeps the
    records of ``f``'s forward alive as long as it lives.

    Raises ``ValueError`` from ``vjp_fn`` if the cotangent's structure differs from the
    output's (both are named), or a cotangent's shape differs; ``TypeError`` if
    ``has_aux=True`` and ``f`` does not return a pair.
    """
    traced = _Traced("vjp", f, primals, {}, tuple(range(len(primals))), has_aux,
                     persistent=True, integers_ok=True)
    outs, out_structure = _tree_flatten(traced.out)

    def vjp_fn(cotangent):
        cots, structure = _tree_flatten(cotangent)
        if structure != out_structure:
            raise ValueError(f"vjp_fn: the cotangent has the structure {_show(structure)}, but "
                             f"f's output has the structure {_show(out_structure)}; give one "
                             "cotangent per output, in the same structure")
        flat = _pullback(traced.tape, outs, cots, traced.flat_sources(), "zero")
        return traced.unflatten_sources(flat, False)

    return (traced.out, vjp_fn, traced.aux) if has_aux else (traced.out, vjp_fn)


def _pullback(tape, outs, cotangents, sources, unconnected):
    """``tape``'s vector-Jacobian product: the gradients of the floating ones of ``outs`` with
    ``cotangents``, with respect to ``sources`` (a list)."""
    pairs = [(o, c) for o, c in zip(map(convert_to_tensor, outs), cotangents)
             if is_floating(o.dtype)]
    return tape.gradient([o for o, _ in pairs], sources, output_gradients=[c for _, c in pairs],
                         unconnected_gradients=unconnected)


def jacrev(f, argnums=0, has_aux=False):
    """The Jacobian of ``f`` by reverse mode (JAX's ``jax.jacrev``).

    Returns a function of ``f``'s arguments returning the Jacobian (``(jacobian, aux)`` with
    ``has_aux=True``). For an output leaf of shape ``T`` and an input leaf of shape ``S`` the
    block has shape ``T + S`` and the input's dtype; the result has ``f``'s output structure,
    each output leaf replaced by the structure of argument ``argnums`` (an int) or by a
    tuple of such trees (a tuple of ints), as in JAX. Built with ``GradientTape.jacobian``:
    one reverse pass per output element (or, when the inputs have fewer elements than an
    output, one forward sweep over the recorded ops per input element: the same values, fewer
    passes); differentiable again (``jacrev(jacrev(f))`` is the Hessian).

    Raises ``TypeError`` if an output leaf or a differentiated input leaf is not floating, or
    as :func:`value_and_grad` for ``argnums`` and ``has_aux``.
    """
    def jacrev_f(*args, **kwargs):
        nums = _argnums("jacrev", argnums, len(args))
        traced = _Traced("jacrev", f, args, kwargs, nums, has_aux, persistent=True)
        outs, structure = _tree_flatten(traced.out)
        sources = traced.flat_sources()
        blocks = []
        for o in map(convert_to_tensor, outs):
            if not isdtype(o.dtype, "real floating"):
                raise TypeError(f"jacrev: f returned an output of dtype {o.dtype}; Jacobians "
                                "need real floating outputs")
            flat = traced.tape.jacobian(o, sources, unconnected_gradients="zero")
            blocks.append(traced.unflatten_sources(flat, isinstance(argnums, int)))
        jac = _tree_unflatten(structure, blocks)
        return (jac, traced.aux) if has_aux else jac

    return _named(jacrev_f, f, "jacrev")


def _named(transformed, f, name):
    """``transformed`` with ``f``'s name and docstring, as ``functools.wraps`` gives them."""
    functools.update_wrapper(transformed, f)
    transformed.__name__ = f"{name}({getattr(f, '__name__', 'f')})"
    return transformed


# --- gradient checkpointing -------------------------------------------------------------------
def recompute_grad(f):
    """``f`` whose intermediates are recomputed in the backward pass (TensorFlow 2's
    ``tf.recompute_grad``, gradient checkpointing).

    ``f(*args, **kwargs)`` returns a Tensor or a tuple/list of Tensors. The wrapped function
    returns the same values; under a tape its call is recorded as one op (a
    :func:`~tapegrad.custom_gradient` call) that keeps only its inputs and outputs, not the
    intermediates of ``f``. Its gradient runs ``f`` again under a new tape, watching the
    floating Tensor arguments and the trainable Variables ``f`` reads, and returns the
    vector-Jacobian product: gradients flow to the Tensor arguments (positional, then those
    passed by keyword), to the Tensor leaves of container arguments (pytrees, as
    :func:`~tapegrad.custom_gradient` takes them) and to those Variables. The gradient is
    written with tapegrad ops, so outer tapes differentiate it again (second order).

    Memory: the saving is what ``f``'s own intermediates would have kept; a tape already keeps
    only what gradients read, so wrap blocks of several ops (layers) rather than single ops.
    Time: the forward of ``f`` runs twice. As in TensorFlow, ``f`` must compute the same
    values when run again: random draws inside it differ on the second run, and Variables
    assigned between the forward and the gradient are read with their new values.

    Errors are those of ``custom_gradient`` and of ``f`` itself.
    """
    def checkpointed(*args, **kwargs):
        y = f(*args, **kwargs)

        def grad_fn(*dys, variables=()):
            tensor_kw = [k for k, v in kwargs.items() if isinstance(v, Tensor)]
            given = [*args, *[kwargs[k] for k in tensor_kw]]
            trees = _trees(given) or [None] * len(given)  # containers: their Tensor leaves
            inputs = _leaf_inputs(given, trees)
            with GradientTape(watch_accessed_variables=False) as tape:
                # a fresh Tensor per position: an argument passed twice, or also read by f
                # from a closure, gets the gradient of its position only
                xs = _held([identity(x) if isinstance(x, Tensor) and is_floating(x.dtype) else x
                            for x in inputs], inputs, dys)
                tape.watch([x for x, a in zip(xs, inputs) if x is not a])
                tape.watch(list(variables))
                ins = _rebuild(given, trees, xs)
                y2 = f(*ins[:len(args)], **{**kwargs, **dict(zip(tensor_kw, ins[len(args):]))})
            sources = [x for x, a in zip(xs, inputs) if x is not a]
            flat = iter(_pullback(tape, _tree_flatten(y2)[0], dys, [*sources, *variables],
                                  "none"))
            gin = _rebuild(given, trees, [next(flat) if x is not a else None
                                          for x, a in zip(xs, inputs)])
            return (gin, list(flat)) if variables else gin

        return y, grad_fn

    checkpointed.__name__ = f"recompute_grad({getattr(f, '__name__', 'f')})"
    checkpointed.__qualname__ = checkpointed.__name__
    return functools.wraps(f)(custom_gradient(checkpointed))


def _held(xs, inputs, dys):
    """``xs`` with its fresh Tensors (the recomputation's inputs, those that are not the
    ``inputs`` themselves) passed through one
    ``optimization_barrier`` together with the cotangents ``dys``, as ``jax.checkpoint``
    does: under ``tg.function`` XLA can then neither merge the recomputation back into the
    forward (common-subexpression elimination) nor run it before the cotangents exist, so the
    forward's intermediates are not kept. Eagerly, ``xs`` as they are."""
    fresh = [k for k, (x, a) in enumerate(zip(xs, inputs)) if x is not a]
    if not fresh or not config.tracing():
        return xs
    ds = [d for d in dys if isinstance(d, Tensor)]
    held = optimization_barrier(*[xs[k] for k in fresh], *ds)
    out = list(xs)
    for k, h in zip(fresh, held):
        out[k] = h
    return out


def hessian(f, argnums=0):
    """The Hessian of a scalar ``f`` with respect to argument(s) ``argnums``, by forward
    over reverse, ``jacfwd(grad(f))`` (JAX's ``jax.hessian``): shape ``S + S`` for an argument
    of shape ``S``. For pytrees, as in JAX, the block of leaves ``a`` and ``b`` (shapes
    ``A + B``) sits in the argument's structure nested in itself (a dict argument gives a dict
    of dicts, ``h[ka][kb]``); a tuple ``argnums`` gives a tuple of tuples,
    ``h[i][j]`` for arguments ``argnums[i]`` and ``argnums[j]``. Errors as :func:`grad`."""
    return jacfwd(grad(f, argnums), argnums)


def hvp(f, primals, tangents):
    """The Hessian-vector product of a scalar ``f`` at ``primals`` (a tuple) along
    ``tangents`` (one per primal; the product is with respect to the first argument): the JVP
    of the gradient, ``jvp(grad(f), primals, tangents)[1]``, one reverse and one forward pass
    (Pearlmutter 1994). Errors as :func:`grad` and :func:`~tapegrad.forward.jvp`.

    Eagerly, forward over reverse also computes the gradient itself (the JVP's primal). Where
    that is the dear part, as in ``sum(tanh(A x)^2)`` whose gradient ends in ``A^T g``, reverse
    over forward is cheaper: a ``GradientTape`` around a ``ForwardAccumulator``, then
    ``tape.gradient(acc.jvp(f(x)), x)`` (``benchmarks/bench_forward.py``: 1.5x the gradient's
    time against 2.0x)."""
    return jvp(grad(f), primals, tangents)[1]


__all__ = ["grad", "value_and_grad", "vjp", "jacrev", "hessian", "hvp", "recompute_grad"]
