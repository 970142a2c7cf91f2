"""``tg.lax``: JAX's carry-style control flow, on tapegrad's implementation
(:mod:`tapegrad.control_flow`): eagerly Python loops that tapes record, inside ``tg.function``
one XLA control-flow op, differentiable in both modes to any order.

``scan``, ``fori_loop``, ``while_loop``, ``cond``, ``switch`` and ``map`` have the signatures
and semantics of their ``jax.lax`` namesakes; carries, operands and results are pytrees
(tuples, lists, dicts; ``None`` an empty subtree) of Tensors, arrays or Python numbers.
"""
from __future__ import annotations

import builtins

import numpy as np

from . import _records
from . import control_flow as _cf
from ._pytree import show as _show
from ._pytree import tree_flatten, tree_unflatten
from ._tensor import Tensor
from .custom_gradient import custom_gradient
from .ops import arange, astype, convert_to_tensor, where, zeros_like
from .ops.elementwise import optimization_barrier

__all__ = ["scan", "fori_loop", "while_loop", "cond", "switch", "map", "custom_linear_solve",
           "custom_root", "optimization_barrier"]


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, checkpoints=None):
    """Loop ``carry, y = f(carry, x)`` over the leading axis of ``xs`` (``jax.lax.scan``).

    Args:
        f: ``f(carry, x) -> (carry, y)``; the carry keeps its structure, shapes and dtypes.
        init: the initial carry (a pytree).
        xs: a pytree of arrays of one leading size ``n`` (or ``None``, with ``length``).
        length: ``n`` when ``xs`` is ``None`` (or a check of it).
        reverse: run from the last slice to the first (``ys`` stay in ``xs``' order).
        unroll: passed to ``jax.lax.scan`` when compiled.
        checkpoints: how the gradient gets the carry entering each step. ``None`` (or
            ``tg.checkpointing.EveryStep()``): eagerly the tape records every step, compiled
            the scan keeps every carry. An int ``s`` (``tg.checkpointing.Revolve(s)``) or
            another ``tg.checkpointing.Schedule``: the scan keeps only its outputs, and its
            gradient replays the steps on the binomial schedule (Griewank & Walther 2000),
            holding at most ``s`` carries: ``n + checkpointing.forward_steps(n, s)`` step
            evaluations for the gradient (``n`` with ``s >= n - 1``), the fewest possible
            with ``s`` carries. Eagerly the scan is recorded as one op and the gradient
            records one step at a time; compiled, the replay is one ``lax.scan`` over the
            plan's rows, the body traced twice in all (its forward, its VJP). A gradient of
            the gradient (a recorded VJP) recomputes the carries entering each step, with
            the memory of ``None``. The body must assign no Variable.

    Returns ``(carry, ys)``: the final carry and the ``y`` of every step stacked on a new
    leading axis of size ``n``. Compiled, the reverse pass recomputes each step from the carry
    that entered it (only the carries are kept, as ``jax.checkpoint`` of the step keeps).
    Raises ``ValueError`` for arrays of different leading sizes (naming them) or nothing to
    scan over, and for a body that assigns a Variable under ``checkpoints``; ``TypeError``
    when ``f`` does not return a pair or changes the carry's structure, shape or dtype
    (naming the carry leaf and both shapes), or for a ``checkpoints`` of another type.
    """
    return _cf._scan("tg.lax.scan", f, init, xs, length, reverse, unroll, checkpoints)


def _concrete_int(x):
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, Tensor) and not _cf._compiled([x]) and x.ndim == 0:
        return int(x)
    return None


def fori_loop(lower, upper, body_fun, init_val, checkpoints=None):
    """``val = body_fun(i, val)`` for ``i`` in ``range(lower, upper)`` (``jax.lax.fori_loop``).

    ``i`` is a 0-d int32 Tensor. With Python-int bounds the loop is a :func:`scan` (reverse
    mode works, compiled too; ``checkpoints`` as :func:`scan`'s); with traced bounds a
    :func:`while_loop` (compiled reverse mode with ``checkpoints`` only, as there). Returns the
    final ``val``. Errors as :func:`scan` and :func:`while_loop`.
    """
    lo, hi = _concrete_int(lower), _concrete_int(upper)
    if lo is not None and hi is not None:
        steps = arange(lo, builtins.max(lo, hi), dtype=np.int32)
        return _cf._scan("tg.lax.fori_loop", lambda v, i: (body_fun(i, v), None), init_val,
                         steps, None, False, 1, checkpoints)[0]
    i0 = astype(convert_to_tensor(lower), np.int32)
    out = _cf._while("tg.lax.fori_loop", lambda c: c[0] < upper,
                     lambda c: (c[0] + 1, body_fun(c[0], c[1])), (i0, init_val), None,
                     "(i, init_val)", checkpoints)
    return out[1]


def while_loop(cond_fun, body_fun, init_val, checkpoints=None):
    """``val = body_fun(val)`` while ``cond_fun(val)`` (``jax.lax.while_loop``).

    ``cond_fun`` returns a scalar bool; ``body_fun`` the carry in the same structure, shapes
    and dtypes. Returns the final carry. Compiled, forward mode works, and reverse mode needs
    ``checkpoints=s`` (at most ``s`` carries stored on an online schedule:
    :func:`tapegrad.while_loop`'s ``checkpoints``) or raises ``ValueError`` (as in JAX;
    ``tg.while_loop(maximum_iterations=...)`` is reverse differentiable too). Errors as
    :func:`tapegrad.while_loop`.
    """
    return _cf._while("tg.lax.while_loop", cond_fun, body_fun, init_val, None, "init_val",
                      checkpoints)


def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)`` (``jax.lax.cond``).

    ``pred``: a scalar bool or integer (non-zero is true). Both branches return the same
    structure, shapes and dtypes when compiled. Differentiable in both modes with respect to
    the operands and the tensors the branches use. Raises ``TypeError`` for a non-scalar
    predicate and for branches that disagree.
    """
    p = convert_to_tensor(pred)
    if p.ndim != 0:
        raise TypeError(f"tg.lax.cond: the predicate must be a scalar, got shape "
                        f"{tuple(p.shape)}")
    _cf._check_callables("tg.lax.cond", [true_fun, false_fun], ["true_fun", "false_fun"])
    true = p if _cf._spec(p)[1] == np.dtype(bool) else p != 0  # strict backends: no bool != 0
    index = astype(true, np.int32)
    if not _cf._compiled([index, *tree_flatten(operands)[0]]):
        return (true_fun if bool(true) else false_fun)(*operands)
    return _cf._switch("tg.lax.cond", index, [false_fun, true_fun], operands,
                       ["false_fun", "true_fun"])


def switch(index, branches, *operands):
    """``branches[index](*operands)``, ``index`` clamped to ``[0, len(branches) - 1]``
    (``jax.lax.switch``). Errors and gradients as :func:`cond`."""
    branches = list(branches)
    if not branches:
        raise ValueError("tg.lax.switch: branches is empty; give at least one branch")
    i = convert_to_tensor(index)
    if i.ndim != 0 or _cf._spec(i)[1].kind not in "iu":
        raise TypeError(f"tg.lax.switch: index must be a scalar integer, got one of "
                        f"{_cf._describe(_cf._spec(i))}")
    names = [f"branches[{k}]" for k in range(len(branches))]
    _cf._check_callables("tg.lax.switch", branches, names)
    n = len(branches) - 1
    i = astype(i, np.int32)
    i = where(i < 0, 0, where(i > n, n, i))
    return _cf._switch("tg.lax.switch", i, branches, operands, names)


def map(f, xs):  # noqa: A001 - JAX's name
    """``f`` applied to each slice of ``xs`` along its leading axis, stacked
    (``jax.lax.map``): ``scan`` with no carry. Errors as :func:`scan`."""
    return _cf._scan("tg.lax.map", lambda c, x: (c, f(x)), (), xs, None, False, 1)[1]


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False,
                        has_aux=False):
    """The solution ``x`` of ``matvec(x) = b`` found by ``solve(matvec, b)``, differentiated
    implicitly (``jax.lax.custom_linear_solve``): the solver's iterations are never
    differentiated.

    Args:
        matvec: a linear function from pytrees shaped like ``b`` to the same; it may read
            tensors and Variables (the operator's parameters), which receive gradients.
        b: a pytree of floating Tensors (the right-hand side).
        solve: ``solve(matvec, b) -> x`` (or ``(x, aux)`` with ``has_aux``).
        transpose_solve: ``transpose_solve(vecmat, b) -> x`` solving the transposed system;
            when ``symmetric`` it defaults to ``solve`` (as JAX's).
        symmetric: ``matvec`` is symmetric, so ``solve`` solves the transposed system too.
        has_aux: ``solve`` returns ``(x, aux)``; then ``(x, aux)`` is returned, ``aux``
            without gradient.

    Gradient (the adjoint method): with ``u = A^{-T} x_bar`` (one transposed solve, itself a
    ``custom_linear_solve``, so second order works), ``b_bar = u`` and each parameter
    ``theta`` of ``matvec`` gets ``-(d(A x)/d theta)^T u``, since ``A x = b`` gives
    ``A dx = db - dA x``. Forward mode: the transposed VJP of that rule. Raises ``ValueError``
    when neither ``symmetric`` nor ``transpose_solve`` says how to solve the transposed system.
    """
    if transpose_solve is None and not symmetric:
        raise ValueError("tg.lax.custom_linear_solve: give transpose_solve, or symmetric=True "
                         "if matvec is symmetric; the gradient solves the transposed system")
    if symmetric:
        t_solve = solve if transpose_solve is None else transpose_solve
        return _linear_solve(matvec, matvec, b, solve, t_solve, has_aux)
    leaves, structure = _flat_tensors(b)
    vecmat = _cf._transpose(matvec, tree_unflatten(structure, leaves))
    return _linear_solve(matvec, vecmat, b, solve, transpose_solve, has_aux)


def _flat_tensors(tree):
    leaves, structure = tree_flatten(tree)
    return [convert_to_tensor(x) for x in leaves], structure


def _linear_solve(matvec, vecmat, b, solve, transpose_solve, has_aux=False):
    """``custom_linear_solve`` with the transposed operator ``vecmat`` given: the gradient's
    solve is ``_linear_solve(vecmat, matvec, ...)``, so no order of differentiation transposes
    a transpose."""
    leaves, structure = _flat_tensors(b)
    n = len(leaves)
    params = _cf._reads(matvec, tree_unflatten(structure, leaves))[0]

    aux_structure = {}

    def run(*args):
        out = solve(matvec, tree_unflatten(structure, list(args[:n])))
        x, aux = out if has_aux else (out, None)
        x_leaves = [convert_to_tensor(a) for a in tree_flatten(x)[0]]
        aux_leaves, aux_structure["s"] = tree_flatten(aux)
        aux_leaves = [convert_to_tensor(a) for a in aux_leaves]

        def grad_fn(*dys, variables=()):
            cts = [d if d is not None else zeros_like(x) for d, x in zip(dys, x_leaves)]
            u = _linear_solve(vecmat, matvec, tree_unflatten(structure, cts), transpose_solve,
                              solve, has_aux)
            u = u[0] if has_aux else u  # transpose_solve returns (x, aux) too, as in JAX
            u_leaves = tree_flatten(u)[0]
            sources = [*params, *variables]
            with _cf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(sources)
                ax = tree_flatten(matvec(tree_unflatten(structure, x_leaves)))[0]
            g = tape.gradient(ax, sources, output_gradients=[-w for w in u_leaves],
                              unconnected_gradients=_cf._ZERO)
            gin = [*u_leaves, *g[:len(params)]]
            return (gin, g[len(params):]) if variables else gin

        return (*x_leaves, *aux_leaves), grad_fn

    run.__name__ = "custom_linear_solve"
    outs = custom_gradient(run)(*leaves, *params)
    x = tree_unflatten(structure, list(outs[:n]))
    if not has_aux:
        return x
    return x, tree_unflatten(aux_structure["s"], list(outs[n:]))


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """A root of ``f`` found by ``solve(f, initial_guess)``, differentiated implicitly
    (``jax.lax.custom_root``): the solver's iterations are never differentiated.

    Args:
        f: a function of a pytree of Tensors shaped like ``initial_guess`` returning one of
            the same structure, shapes and dtypes; the tensors and Variables it reads besides
            its argument (closed over) are the parameters ``theta`` that receive gradients.
        initial_guess: a pytree of floating Tensors (or arrays); it gets no gradient.
        solve: ``solve(f, initial_guess) -> x`` with ``f(x) = 0`` (or ``(x, aux)`` with
            ``has_aux``), e.g. Newton's method in a ``tg.lax.while_loop`` or ``fori_loop``.
        tangent_solve: ``tangent_solve(g, y) -> z`` with ``g(z) = y`` for a linear function
            ``g`` shaped like ``f``: ``lambda g, y: y / g(1.0)`` for a scalar, or a solve with
            the Jacobian of ``g`` (``tg.jacfwd(g)``), or ``tg.linalg.gmres(g, y)[0]``.
        has_aux: ``solve`` returns ``(x, aux)``; then ``(x, aux)`` is returned, ``aux``
            without gradient.

    Derivatives (the implicit function theorem: ``f(x*(theta), theta) = 0`` gives
    ``dx* = -(df/dx)^{-1} (df/dtheta) dtheta`` at the root): forward mode solves
    ``g(z) = (df/dtheta) dtheta`` with ``g = v -> (df/dx) v`` (the linearisation of ``f`` at
    ``x*``, by a ``ForwardAccumulator``), as JAX's rule does; reverse mode solves the
    transposed system ``g^T(u) = x_bar`` (``g^T`` by one reverse pass through ``f``), also with
    ``tangent_solve``, and gives ``theta_bar = -(df/dtheta)^T u``. Both solves are
    ``custom_linear_solve`` calls, so they are differentiated implicitly in turn (second
    order, any mix of modes). ``tangent_solve`` must solve any linear system shaped like
    ``f`` that it is given (``g`` or ``g^T``); it need not be differentiable.

    Raises ``TypeError`` when ``f`` or ``solve`` returns another structure, shape or dtype
    than ``initial_guess`` (naming both).
    """
    where_ = "tg.lax.custom_root"
    leaves, structure = _flat_tensors(initial_guess)
    names = _cf._paths(structure, "initial_guess")
    params, out_structure, specs = _cf._reads(f, tree_unflatten(structure, leaves))
    _check_like(where_, "f", out_structure, specs, structure, leaves, names)

    paused = [t for t in _records.trace_entries() if t._observer and not t._differentiates]
    with _records.trace_stack(paused):  # the iterations are not recorded: the root's
        result = solve(f, tree_unflatten(structure, list(leaves)))  # derivatives are below
    x, aux = result if has_aux else (result, None)
    x_leaves, x_structure = _flat_tensors(x)
    _check_like(where_, "solve", x_structure, [_cf._spec(a) for a in x_leaves], structure,
                leaves, names)
    xs = [Tensor(a._value) for a in x_leaves]  # fresh outputs

    def f_flat(vs):
        return [convert_to_tensor(a) for a in tree_flatten(f(tree_unflatten(structure, vs)))[0]]

    def g(v):  # v -> (df/dx) v at the root
        with _cf.ForwardAccumulator(xs, tree_flatten(v)[0]) as acc:
            y = f_flat(xs)
        return tree_unflatten(structure, [acc.jvp(a, _cf._ZERO) for a in y])

    def g_t(u):  # u -> (df/dx)^T u at the root
        with _cf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(xs)
            y = f_flat(xs)
        return tree_unflatten(structure, tape.gradient(y, xs, output_gradients=tree_flatten(u)[0],
                                                       unconnected_gradients=_cf._ZERO))

    def grad(op, *dys):
        cts = [d if d is not None else zeros_like(a) for d, a in zip(dys, xs)]
        u = tree_flatten(_linear_solve(g_t, g, tree_unflatten(structure, cts), tangent_solve,
                                       tangent_solve))[0]
        with _cf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(params)
            y = f_flat(xs)
        gp = tape.gradient(y, params, output_gradients=[-w for w in u],
                           unconnected_gradients=_cf._ZERO)
        return [*([None] * len(leaves)), *gp]

    def jvp(op, *ts):
        tp = ts[len(leaves):]
        wk = [k for k, t in enumerate(tp) if t is not None]
        if not wk:
            return (None,) * len(xs)
        with _cf.ForwardAccumulator([params[k] for k in wk], [tp[k] for k in wk]) as acc:
            y = f_flat(xs)
        rhs = tree_unflatten(structure, [acc.jvp(a, _cf._ZERO) for a in y])
        z = _linear_solve(g, g_t, rhs, tangent_solve, tangent_solve)
        return tuple(-a for a in tree_flatten(z)[0])

    _cf._record("CustomRoot", [*names, *[f"captured {_cf._describe_capture(c)}" for c in params]],
                [*leaves, *params], xs, grad, jvp)
    x = tree_unflatten(structure, xs)
    return (x, aux) if has_aux else x


def _check_like(where_, name, out_structure, specs, structure, leaves, names):
    """``TypeError`` unless a result (its structure and ``(shape, dtype)`` per leaf) has
    ``initial_guess``'s structure, shapes and dtypes."""
    if out_structure != structure:
        raise TypeError(f"{where_}: {name} returned {_show(out_structure)} but initial_guess "
                        f"has the structure {_show(structure)}; return the same structure")
    for got, want, path in zip(specs, leaves, names):
        if got != _cf._spec(want):
            raise TypeError(f"{where_}: {name} returned {path} with {_cf._describe(got)}, "
                            f"but initial_guess has {_cf._describe(_cf._spec(want))}; "
                            f"{name} must keep each leaf's shape and dtype")
