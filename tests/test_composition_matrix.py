"""The composition matrix: every ordered pair of transforms, and a seeded sample of triples,
applied to functions of every pytree kind, against the same stack of JAX transforms.

Generated, not hand-picked. A *transform adapter* (``ADAPTERS``) maps a function ``g`` of a
pytree ``x`` returning a float64 scalar to another such function, once with tapegrad
(``adapter.tg(g)``) and once with JAX (``adapter.jax(g)``): derivative transforms reduce their
pytree result to a scalar with fixed seeded weights (:func:`contract`), ``vmap`` maps over a
leading batch axis it adds and sums with fixed weights, the control-flow adapters run ``g``
inside a 3-step loop, ... so adapters stack in any order. A case is a stack (applied
innermost first) and a pytree kind (``KINDS``: a bare tensor, tuple, list, dict, namedtuple,
and a nested mix with a Python-scalar leaf and a ``None`` leaf); it passes when the stacked
tapegrad function's value and gradient (a ``GradientTape`` over the leaves) equal JAX's in
float64 (``rtol=1e-10``), or when tapegrad raises an error whose message names a transform of
the stack and the argument (:func:`clear_refusal`). JAX runs in 64-bit mode only inside
``config.x64_scope`` (thread-local), never process-wide.

Each case's outcome on each array backend is saved in
``composition_matrix_known_failures.json`` (generated: the failure's first line, or ``null``
for a pass) and JAX's values in ``composition_matrix_reference.json`` (JAX's eager transforms
take 0.1-1 s a case on the shared machine; a seeded sample is checked live). A failing case is
marked ``xfail(strict=True)``, so the suite stays green and a fixed case XPASSes, failing,
until it is regenerated; a case not evaluated yet on the backend skips. ``MirroredStrategy``
needs 4 CPU devices (``XLA_FLAGS`` read when JAX starts): its cases run in one subprocess.

Script mode::

    python tests/test_composition_matrix.py --report         # pass/fail counts by pair
    python tests/test_composition_matrix.py --report --full  # with the slow part
    python tests/test_composition_matrix.py --write-known [--kinds tensor,dict] [--pairs]
                                    # evaluate live (JAX too) and save both tables

The default pytest run takes every ordered pair but MirroredStrategy's on the bare tensor
(each backend a seeded half of them, the halves complementary); the rest (``slow``: other kinds, triples, MirroredStrategy) runs with ``TAPEGRAD_SLOW_TESTS=1``.
"""
from __future__ import annotations

import collections
import functools
import itertools
import json
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import config

jax = pytest.importorskip("jax")
jnp = jax.numpy

RTOL, ATOL = 1e-10, 1e-12
N_TRIPLES = 60
TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "composition_matrix_known_failures.json")
REFERENCES = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "composition_matrix_reference.json")
BACKEND = os.environ.get("TAPEGRAD_ARRAY_BACKEND", "numpy")
RUN_SLOW = os.environ.get("TAPEGRAD_SLOW_TESTS") == "1"


# --- pytrees, walked the same way on both sides (dicts in sorted key order, None empty) -----
def leaves(tree):
    """The leaves of ``tree`` (tuples, lists, namedtuples, dicts; ``None`` is empty)."""
    if tree is None:
        return []
    if isinstance(tree, (tuple, list)):
        return [leaf for child in tree for leaf in leaves(child)]
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in leaves(tree[k])]
    return [tree]


def tmap(f, tree, _count=None):
    """``tree`` with ``f(leaf, i)`` for its ``i``-th leaf (the order of :func:`leaves`)."""
    count = itertools.count() if _count is None else _count
    if tree is None:
        return None
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*[tmap(f, c, count) for c in tree])
    if isinstance(tree, (tuple, list)):
        return type(tree)(tmap(f, c, count) for c in tree)
    if isinstance(tree, dict):
        return {k: tmap(f, tree[k], count) for k in sorted(tree)}
    return f(tree, next(count))


def shape(leaf):
    return () if isinstance(leaf, (int, float)) else tuple(leaf.shape)


@functools.lru_cache(maxsize=None)
def coef(shp, i):
    """Fixed weights of a leaf's shape (contractions, tangents): no symmetry to hide errors."""
    n = int(np.prod(shp))
    return np.cos(0.7 * np.arange(n) + 1.3 * i + 0.4).reshape(shp)


class Backend:
    """The few array functions the functions below need: tapegrad's or jax.numpy's."""

    def __init__(self, name, xp):
        self.name, self.sin, self.sum, self.reshape = name, xp.sin, xp.sum, xp.reshape
        self.const = (lambda a: tg.constant(a)) if name == "tg" else jnp.asarray
        self.zero = (lambda: tg.zeros((), dtype=tg.float64)) if name == "tg" else (
            lambda: jnp.zeros((), jnp.float64))


TG, JX = Backend("tg", tg), Backend("jax", jnp)


def contract(tree, B):
    """A scalar from a pytree result: the sum of its leaves weighted by :func:`coef`."""
    total = 0.0
    for i, leaf in enumerate(leaves(tree)):
        total = total + B.sum(leaf * B.const(coef(shape(leaf), i)))
    return total


# --- the pytree kinds -----------------------------------------------------------------------
Pair = collections.namedtuple("Pair", ["w", "b"])
_R = np.random.default_rng(20261201)
_A, _B = _R.normal(size=(3,)), _R.normal(size=(2, 2))


class Kind:
    """A pytree kind: an example argument (NumPy leaves and Python scalars) and how the base
    function reads its array leaves and its Python-scalar leaf (``None``: it has none)."""

    def __init__(self, name, make, parts, scalar=lambda x: None):
        self.name, self.make, self.parts, self.scalar = name, make, parts, scalar


KINDS = {k.name: k for k in [
    Kind("tensor", lambda: _A, lambda x: [x]),
    Kind("tuple", lambda: (_A, _B), lambda x: [x[0], x[1]]),
    Kind("list", lambda: [_A, _B], lambda x: [x[0], x[1]]),
    Kind("dict", lambda: {"w": _A, "b": _B}, lambda x: [x["w"], x["b"]]),
    Kind("namedtuple", lambda: Pair(_A, _B), lambda x: [x.w, x.b]),
    Kind("nested", lambda: {"p": (_A, [_B, 0.5]), "n": None},
         lambda x: [x["p"][0], x["p"][1][0]], lambda x: x["p"][1][1]),
]}


def base(kind, B):
    """The function every stack starts from: a float64 scalar of every leaf, nonlinear, with
    cross terms (so Hessians are not diagonal)."""
    def f(x):
        us = [B.sum(B.sin(p) * (0.5 + 0.1 * i)) + 0.3 * B.sum(p * p)
              for i, p in enumerate(kind.parts(x))]
        out = sum(us[1:], us[0]) + 0.5 * us[0] * us[-1]
        c = kind.scalar(x)
        return out if c is None else out + c * us[0] + 0.25 * c * c
    return f


# --- the transform adapters -----------------------------------------------------------------
def as_tensors(x):
    """``x`` with each leaf a float64 Tensor (a Python scalar too): what tapes watch."""
    return tmap(lambda leaf, i: tg.constant(np.asarray(leaf, np.float64))
                if not isinstance(leaf, tg.Tensor) else leaf, x)


def tangents(x, B):
    return tmap(lambda leaf, i: B.const(0.5 * coef(shape(leaf), i + 7)), x)


SCALES = np.array([1.0, 0.7, -0.4])   # vmap: the batch a leaf becomes
WEIGHTS = np.array([1.0, 0.5, 0.25])  # vmap: the batch's results summed with these


def batched(x, B):
    return tmap(lambda leaf, i: leaf * B.const(SCALES.reshape((3,) + (1,) * len(shape(leaf)))),
                x)


def shrink(x):
    return tmap(lambda leaf, i: leaf * 0.9, x)


def tg_grad(g):
    return lambda x: contract(tg.grad(g)(x), TG)


def tg_value_and_grad(g):
    def h(x):
        v, d = tg.value_and_grad(g)(x)
        return v + contract(d, TG)
    return h


def tg_tape(g):
    # The tape watches the Tensor leaves (JAX's tree_leaves: a None is no leaf), as a
    # TensorFlow user does: tape.watch/gradient refuse a None in a structure, as TF's do.
    def h(x):
        x = as_tensors(x)
        xs = tg.tree_util.tree_leaves(x)
        with tg.GradientTape() as tape:
            tape.watch(xs)
            y = tg.sum(g(x))
        return contract(tape.gradient(y, xs), TG)
    return h


def tg_accumulator(g):
    def h(x):
        x = as_tensors(x)
        with tg.ForwardAccumulator(x, tangents(x, TG)) as acc:
            y = g(x)
        return y + acc.jvp(y)
    return h


def tg_jvp(g):
    def h(x):
        y, dy = tg.jvp(g, (x,), (tangents(x, TG),))
        return y + dy
    return h


def tg_vmap(g):
    return lambda x: tg.sum(tg.vmap(g)(batched(x, TG)) * tg.constant(WEIGHTS))


def tg_scan(g):
    def h(x):
        def body(carry, s):
            y, acc = carry
            v = g(y)
            return (shrink(y), acc + s * v), v
        (_, acc), vs = tg.lax.scan(body, (x, TG.zero()), tg.constant(np.array([1.0, 0.8, 0.6])))
        return acc + 0.1 * tg.sum(vs)
    return h


def jax_scan(g):
    def h(x):
        def body(carry, s):
            y, acc = carry
            v = g(y)
            return (shrink(y), acc + s * v), v
        (_, acc), vs = jax.lax.scan(body, (x, JX.zero()), jnp.array([1.0, 0.8, 0.6]))
        return acc + 0.1 * jnp.sum(vs)
    return h


def tg_cond(g):
    def h(x):
        pred = tg.sum(leaves(x)[0]) > -100.0
        return tg.cond(pred, lambda: g(x), lambda: -2.0 * g(x))
    return h


def jax_cond(g):
    def h(x):
        pred = jnp.sum(leaves(x)[0]) > -100.0
        return jax.lax.cond(pred, g, lambda y: -2.0 * g(y), x)
    return h


def tg_while(g):
    def h(x):
        _, _, acc = tg.while_loop(lambda i, y, acc: i < 3,
                                  lambda i, y, acc: (i + 1, shrink(y), acc + g(y)),
                                  (tg.constant(0), x, TG.zero()), maximum_iterations=3)
        return acc
    return h


def jax_while(g):
    def h(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: (shrink(c[0]), c[1] + g(c[0])),
                                 (x, JX.zero()))[1]
    return h


@tg.custom_gradient
def custom_sin(x):
    def grad(dy):
        return dy * tg.cos(x)
    return tg.sin(x), grad


@tg.primitive("CompositionMatrixNumpySin")
def numpy_sin(x):
    return np.sin(x)


@tg.RegisterGradient("CompositionMatrixNumpySin")
def _numpy_sin_grad(op, dy):
    return dy * tg.cos(op.inputs[0])


def tg_custom_gradient_tree(g):
    @tg.custom_gradient
    def h(x):
        def grad(dy):
            return tmap(lambda d, i: dy * d, tg.grad(g)(x))
        return g(x), grad
    return h


def tg_custom_vjp(g):  # tg.custom_vjp with JAX's API (another branch adds it)
    h = tg.custom_vjp(lambda x: g(x))
    h.defvjp(lambda x: (g(x), x), lambda x, dy: (tmap(lambda d, i: dy * d, tg.grad(g)(x)),))
    return h


def tg_custom_jvp(g):  # tg.custom_jvp with JAX's API (another branch adds it)
    h = tg.custom_jvp(lambda x: g(x))
    h.defjvp(lambda primals, tans: tg.jvp(g, primals, tans))
    return h


_MESH = []


def strategy():
    if not _MESH:
        _MESH.append(tg.distribute.MirroredStrategy())
    return _MESH[0]


def tg_mirrored(g):
    return lambda x: strategy().run(g, args=(x,))


Adapter = collections.namedtuple("Adapter", ["name", "tg", "jax", "names"])
identity = lambda g: g  # noqa: E731  (the JAX side of transforms with no JAX counterpart)

ADAPTERS = {a.name: a for a in [
    Adapter("function", tg.function, jax.jit, ("tg.function",)),
    Adapter("grad", tg_grad, lambda g: lambda x: contract(jax.grad(g)(x), JX), ("grad",)),
    Adapter("value_and_grad", tg_value_and_grad,
            lambda g: lambda x: (lambda v, d: v + contract(d, JX))(*jax.value_and_grad(g)(x)),
            ("value_and_grad",)),
    Adapter("tape", tg_tape, lambda g: lambda x: contract(jax.grad(g)(x), JX),
            ("GradientTape", "tape.gradient", "watch")),
    Adapter("accumulator", tg_accumulator,
            lambda g: lambda x: sum(jax.jvp(g, (x,), (tangents(x, JX),))),
            ("ForwardAccumulator", "accumulator")),
    Adapter("jvp", tg_jvp, lambda g: lambda x: sum(jax.jvp(g, (x,), (tangents(x, JX),))),
            ("jvp",)),
    Adapter("vmap", tg_vmap,
            lambda g: lambda x: jnp.sum(jax.vmap(g)(batched(x, JX)) * WEIGHTS), ("vmap",)),
    Adapter("hessian", lambda g: lambda x: contract(tg.hessian(g)(x), TG),
            lambda g: lambda x: contract(jax.hessian(g)(x), JX), ("hessian", "jacfwd")),
    Adapter("custom_gradient", lambda g: lambda x: g(tmap(lambda l, i: custom_sin(l), x)),
            lambda g: lambda x: g(tmap(lambda l, i: jnp.sin(l), x)), ("custom_gradient",)),
    Adapter("custom_gradient_tree", tg_custom_gradient_tree, identity, ("custom_gradient",)),
    Adapter("numpy_primitive", lambda g: lambda x: g(tmap(lambda l, i: numpy_sin(l), x)),
            lambda g: lambda x: g(tmap(lambda l, i: jnp.sin(l), x)),
            ("CompositionMatrixNumpySin", "host callback")),
    Adapter("recompute_grad", tg.recompute_grad, jax.checkpoint, ("recompute_grad",)),
    Adapter("scan", tg_scan, jax_scan, ("scan",)),
    Adapter("cond", tg_cond, jax_cond, ("cond",)),
    Adapter("while_loop", tg_while, jax_while, ("while_loop",)),
    Adapter("mirrored", tg_mirrored, identity, ("MirroredStrategy",)),
]}
# --- hook: tg.custom_vjp / tg.custom_jvp join the matrix once they exist (another branch) ---
if hasattr(tg, "custom_vjp"):
    ADAPTERS["custom_vjp"] = Adapter("custom_vjp", tg_custom_vjp, identity, ("custom_vjp",))
if hasattr(tg, "custom_jvp"):
    ADAPTERS["custom_jvp"] = Adapter("custom_jvp", tg_custom_jvp, identity, ("custom_jvp",))


# --- the cases --------------------------------------------------------------------------------
def stacks():
    """Every ordered pair of adapters, then ``N_TRIPLES`` seeded triples (innermost first)."""
    names = sorted(ADAPTERS)
    pairs = list(itertools.product(names, repeat=2))
    triples = list(itertools.product(names, repeat=3))
    rng = np.random.default_rng(0)
    picked = rng.choice(len(triples), size=N_TRIPLES, replace=False)
    return pairs + [triples[i] for i in sorted(picked)]


def case_id(stack, kind):
    return "-".join(stack) + "@" + kind


def all_cases():
    """``(case id, stack, kind, slow)`` for the whole matrix."""
    out = []
    for stack in stacks():
        for kind in KINDS:
            slow = not (kind == "tensor" and len(stack) == 2 and "mirrored" not in stack)
            out.append((case_id(stack, kind), stack, kind, slow))
    return out


def build(stack, kind, B):
    f = base(KINDS[kind], B)
    for name in stack:
        f = getattr(ADAPTERS[name], "tg" if B is TG else "jax")(f)
    return f


class Mismatch(AssertionError):
    pass


@functools.lru_cache(maxsize=None)
def cached_references():
    """``{case id: {"value": ..., "grad": [...]}}``: JAX's results saved by ``--write-known``
    (JAX's eager transforms take 0.1-1 s a case here; ``test_reference_cache_is_jax`` checks
    a seeded sample of them against JAX live)."""
    if not os.path.exists(REFERENCES):
        return {}
    with open(REFERENCES) as f:
        return json.load(f)


def reference(stack, kind, live=False):
    """JAX's value and gradient (a list of NumPy leaves), in 64-bit mode for the call only;
    from the saved table unless ``live`` or missing there."""
    saved = None if live else cached_references().get(case_id(stack, kind))
    if saved is not None:
        return np.asarray(saved["value"]), [np.asarray(g) for g in saved["grad"]]
    x = KINDS[kind].make()
    with config.x64_scope(jax), jax.disable_jit():  # no compilations: the same values, faster
        value, grad = jax.value_and_grad(build(stack, kind, JX))(x)
        return np.asarray(value), [np.asarray(g) for g in leaves(grad)]


def tapegrad_result(stack, kind):
    """tapegrad's value (the argument as given) and gradient (a tape over Tensor leaves)."""
    x = KINDS[kind].make()
    f = build(stack, kind, TG)
    value = np.asarray(tg.convert_to_tensor(f(tmap(lambda l, i: l if isinstance(l, float)
                                                   else tg.constant(l), x))).numpy())
    xs = as_tensors(x)
    with tg.GradientTape() as tape:
        tape.watch(leaves(xs))
        y = f(xs)
    grad = tape.gradient(y, leaves(xs))
    return value, [None if g is None else np.asarray(tg.convert_to_tensor(g).numpy())
                   for g in grad]


_PYTHON_CALL_ERROR = re.compile(r"takes \d+ positional argument|missing \d+ required|"
                                r"got an unexpected keyword argument")


def clear_refusal(stack, kind, message):
    """Whether an error message names a transform of the stack (a whole word) and the
    argument; Python's own call errors (a signature mismatch) never count."""
    if _PYTHON_CALL_ERROR.search(message):
        return False
    names_transform = any(re.search(rf"(?<!\w){re.escape(n)}\b", message)
                          for s in stack for n in ADAPTERS[s].names)
    names_argument = re.search(r"\bargument|\bargs?\b|\bprimals?\b|\binputs?\b|\bleaf\b|"
                               r"\bloop_vars\b|\binit\b|namedtuple|Pair", message) is not None
    return names_transform and names_argument


def first_line(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text[:160]


def run_case(stack, kind, live=False):
    """``None`` if the case passes, else the reason (one line, starting with the stage)."""
    import warnings
    try:
        want_v, want_g = reference(stack, kind, live)
    except Exception as e:  # noqa: BLE001
        return f"JAX reference: {first_line(e)}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got_v, got_g = tapegrad_result(stack, kind)
    except Exception as e:  # noqa: BLE001
        if clear_refusal(stack, kind, str(e)):
            return None
        return first_line(e)
    if got_v.shape != want_v.shape or not np.allclose(got_v, want_v, rtol=RTOL, atol=ATOL):
        return f"value: {got_v!r} != JAX's {want_v!r}"
    for i, (g, w) in enumerate(zip(got_g, want_g)):
        if g is None:
            return f"gradient of leaf {i}: None, JAX's {w!r}"
        if g.shape != w.shape or g.dtype != np.float64 or not np.allclose(g, w, rtol=RTOL,
                                                                            atol=ATOL):
            return (f"gradient of leaf {i}: {g.dtype}{list(g.shape)} "
                    f"max err {np.max(np.abs(g - w)) if g.shape == w.shape else 'shape'}")
    return None


def known_failures():
    """``{case id: reason, or None for a passing case}`` of the cases evaluated on this array
    backend; a case not in it skips (generate it with ``--write-known``)."""
    if not os.path.exists(TABLE):
        return {}
    with open(TABLE) as f:
        return json.load(f).get(BACKEND, {})


# --- MirroredStrategy's cases: one subprocess with 4 CPU devices ------------------------------
@functools.lru_cache(maxsize=None)
def mirrored_results(ids):
    """``{case id: reason or None}`` for the cases in ``ids`` (a tuple), run in a fresh
    interpreter with 4 host devices."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               PYTHONPATH=os.pathsep.join(p for p in [os.environ.get("PYTHONPATH")] + sys.path
                                          if p))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--mirrored-worker"],
                          input=json.dumps(list(ids)), env=env, capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"the 4-device worker failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _mirrored_worker():
    assert len(jax.devices()) == 4, jax.devices()
    cases = {c[0]: c for c in all_cases()}
    out = {}
    for cid in json.loads(sys.stdin.read()):
        _, stack, kind, _ = cases[cid]
        out[cid] = run_case(stack, kind)
    print(json.dumps(out))


def result(cid, stack, kind, selected_mirrored):
    if "mirrored" in stack:
        return mirrored_results(selected_mirrored)[cid]
    return run_case(stack, kind)


# --- pytest -----------------------------------------------------------------------------------
def _params():
    known = known_failures()
    untabled = pytest.mark.skip(reason=f"not evaluated on the {BACKEND} backend yet (not in "
                                f"{os.path.basename(TABLE)}): run this file with --write-known")
    params = []
    for cid, stack, kind, slow in all_cases():
        marks = []
        # each backend's pass takes a seeded half of the default pairs, the two halves
        # complementary (all on both with TAPEGRAD_SLOW_TESTS=1)
        if slow or zlib.crc32(cid.encode()) % 2 == (BACKEND == "numpy"):
            marks.append(pytest.mark.slow)
            marks.append(pytest.mark.skipif(not RUN_SLOW, reason="slow: TAPEGRAD_SLOW_TESTS=1"))
        if cid not in known:
            marks.append(untabled)
        elif known[cid] is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=known[cid]))
        params.append(pytest.param(cid, stack, kind, marks=marks, id=cid))
    return params


def _selected_mirrored():
    return tuple(cid for cid, stack, _, slow in all_cases()
                 if "mirrored" in stack and (RUN_SLOW or not slow))


@pytest.mark.parametrize("cid, stack, kind", _params())
def test_composition(cid, stack, kind):
    reason = result(cid, stack, kind, _selected_mirrored())
    assert reason is None, reason


def test_matrix_covers_every_pair_and_kind():
    ids = [c[0] for c in all_cases()]
    assert len(ids) == len(set(ids)) == (len(ADAPTERS) ** 2 + N_TRIPLES) * len(KINDS)
    assert set(known_failures()) <= set(ids), "stale ids in the known-failure table"


@pytest.mark.parametrize("k", range(6))
def test_reference_cache_is_jax(k):
    """A seeded sample of the saved JAX results equals JAX's computed now."""
    saved = cached_references()
    if not saved:
        pytest.skip("no saved references: run this file with --write-known")
    cid = sorted(saved)[np.random.default_rng(k).integers(len(saved))]
    stack, kind = cid.split("@")[0].split("-"), cid.split("@")[1]
    want_v, want_g = reference(stack, kind, live=True)
    got_v, got_g = reference(stack, kind)
    np.testing.assert_allclose(got_v, want_v, rtol=RTOL, atol=ATOL)
    assert len(got_g) == len(want_g)
    for g, w in zip(got_g, want_g):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_clear_refusal_needs_the_transform_and_the_argument():
    assert clear_refusal(("grad",), "tensor", "grad: argument 0 has a leaf of dtype int64")
    assert not clear_refusal(("grad",), "tensor", "Pair.__new__() missing 1 required positional")
    assert not clear_refusal(("vmap",), "tensor", "grad: argument 0 is bad")
    assert not clear_refusal(("custom_gradient",), "tensor",  # a helper's name is no name
                             "tg_custom_gradient_tree.<locals>.h(): argument 0 is bad")
    assert clear_refusal(("function",), "tensor", "tg.function(f): argument 0 is bad")


# --- script mode ------------------------------------------------------------------------------
def _report(cases, results):
    by_pair = collections.defaultdict(lambda: [0, 0])
    for cid, stack, kind, _ in cases:
        key = "-".join(stack) if len(stack) == 2 else "triples"
        by_pair[key][results[cid] is not None] += 1
    print(f"{'stack (innermost first)':44s} pass fail")
    for key in sorted(by_pair):
        ok, bad = by_pair[key]
        print(f"{key:44s} {ok:4d} {bad:4d}")
    total_bad = sum(r is not None for r in results.values())
    print(f"\n{len(results)} cases: {len(results) - total_bad} pass, {total_bad} fail")
    for cid in sorted(results):
        if results[cid] is not None:
            print(f"FAIL {cid}: {results[cid]}")


def _save(results, references):
    """Merge this run's outcomes (``{id: reason or None}``, this backend's) and JAX's values
    into the two tables, reading them now (a run on another backend may have written)."""
    table = {}
    if os.path.exists(TABLE):
        with open(TABLE) as f:
            table = json.load(f)
    table.setdefault(BACKEND, {}).update(results)
    with open(TABLE, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
    if references:
        saved = dict(cached_references())
        saved.update(references)
        with open(REFERENCES, "w") as f:
            json.dump(saved, f, sort_keys=True, separators=(",", ":"))
            f.write("\n")
        cached_references.cache_clear()


def main(argv):
    """``--report``: run the default cases (``--full``: all) and print the counts by pair.
    ``--write-known [--kinds a,b] [--pairs]``: run the cases (of those kinds; pairs only), in
    the order of the default run first, computing JAX's values live (on NumPy; another array
    backend reads those saved), and save both tables every 20 cases, so an interrupted run
    keeps what it did."""
    if "--mirrored-worker" in argv:
        return _mirrored_worker()
    write = "--write-known" in argv
    kinds = argv[argv.index("--kinds") + 1].split(",") if "--kinds" in argv else list(KINDS)
    cases = [c for c in all_cases() if (write or "--full" in argv or not c[3])
             and c[2] in kinds and not ("--pairs" in argv and len(c[1]) > 2)]
    cases.sort(key=lambda c: (c[3], "mirrored" in c[1], kinds.index(c[2])))
    results, references = {}, {}
    for n, (cid, stack, kind, _) in enumerate(cases):
        if write and "mirrored" in stack:  # one 4-device worker for all of them, below
            continue
        if write and BACKEND == "numpy":  # other backends read JAX's values saved by it
            try:
                value, grad = reference(stack, kind, live=True)
                references[cid] = {"value": value.tolist(), "grad": [g.tolist() for g in grad]}
                cached_references()[cid] = references[cid]  # run_case reads it: once per case
            except Exception:  # noqa: BLE001  (run_case reports JAX's error)
                pass
        results[cid] = run_case(stack, kind, live=write and BACKEND == "numpy"
                                and cid not in references)
        if write and len(results) % 20 == 0:
            _save(results, references if BACKEND == "numpy" else {})
            print(f"{len(results)}/{len(cases)} cases", file=sys.stderr, flush=True)
    mirrored = tuple(c[0] for c in cases if "mirrored" in c[1])
    if write and mirrored:
        if BACKEND == "numpy":
            for cid, stack, kind, _ in cases:
                if "mirrored" in stack:
                    value, grad = reference(stack, kind, live=True)
                    references[cid] = {"value": value.tolist(),
                                       "grad": [g.tolist() for g in grad]}
            _save(results, references)
        results.update(mirrored_results(mirrored))
    elif mirrored:
        results.update(mirrored_results(mirrored))
    if write:
        _save(results, references if BACKEND == "numpy" else {})
    _report([c for c in cases if c[0] in results], results)


if __name__ == "__main__":
    main(sys.argv[1:])
