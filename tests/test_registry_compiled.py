"""Every built-in primitive's gradient inside ``tg.function`` and inside a compiled loop body.

For each differentiable op type (its first declared sample; every sample of a control-flow
construct, ``first_sample_cases``), one compiled function returns the
VJP of the op with a fixed random cotangent three times: taken on the op directly, through a
``tg.lax.scan`` whose body applies the op (the scan's reverse pass runs the body again under a
tape, inside an XLA loop), and taken inside a scan's body; and the JVP with a fixed random
tangent twice: on the op directly and through the scan. Each must equal its eager value, as
must JAX's ``grad`` and ``jvp`` of the op made a JAX function by ``tg.to_jax``. The VJP and the
JVP are taken once more with the inputs after the first closed over (constants of the
program).
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import tapegrad as tg
from test_registry_gradients import first_sample_cases, floating_outputs

jax = pytest.importorskip("jax")
pytestmark = pytest.mark.skipif(
    os.environ.get("TAPEGRAD_ARRAY_BACKEND") == "array_api_strict",
    reason="compiled programs run on JAX's arrays whatever the default backend: the NumPy "
           "run covers them")
# On array_api_strict, the derivatives of these ops still meet array_api_strict's arrays where
# JAX's values are: arrays their rules make on the default backend inside a trace (which
# array_api_strict's functions then get with tracers), or the JVP rule of tg.to_jax, which
# JAX calls on concrete NumPy values outside any trace (Where). A TypeError, not a wrong value.
_STRICT_REFUSED = {"SigmoidCrossEntropyWithLogits", "Sort", "SparseSoftmaxCrossEntropyWithLogits",
                   "SparseSoftmaxCrossEntropyWithLogitsGrad", "Where"}
# (a zero-length eager scan, which tg.to_jax's JVP rule runs on the host, traces its step once on
# the default backend's zeros for the shapes of its outputs: they meet the rule's NumPy values)
_STRICT_REFUSED_SAMPLES = {("Scan", 2)}


@pytest.mark.parametrize("op_type, index", first_sample_cases())
def test_gradient_compiled_and_in_a_compiled_loop(op_type, index):
    if (op_type in _STRICT_REFUSED or (op_type, index) in _STRICT_REFUSED_SAMPLES) and (
            tg._backend.default_namespace().__name__ == "array_api_strict"):
        pytest.skip("its derivatives meet array_api_strict's arrays inside the trace")
    opdef = tg.registered_ops()[op_type]
    rng = np.random.default_rng([zlib.crc32(op_type.encode()), 7])
    args, attrs, float_positions = opdef.samples[index].materialize(rng)

    f = floating_outputs(op_type, args, attrs, float_positions)

    xs = [tg.constant(args[p]) for p in float_positions]
    eager_out = f(*xs)
    cotangents = [tg.astype(tg.constant(rng.normal(size=o.shape)), o.dtype) for o in eager_out]

    def total(outs):
        return tg.sum(tg.stack([tg.sum(tg.real(o * c)) for o, c in zip(outs, cotangents)]))

    def vjp(g, *xs):
        with tg.GradientTape() as tape:
            tape.watch(list(xs))
            y = total(g(*xs))
        return tape.gradient(y, list(xs), unconnected_gradients="zero")

    def scanned(*xs):  # the op in a loop body: the scan's reverse pass differentiates it
        _, ys = tg.lax.scan(lambda carry, _: (carry, f(*carry)), list(xs), None, length=1)
        return [y[0] for y in ys]

    def inside(*xs):  # the gradient taken inside a loop body
        _, gs = tg.lax.scan(lambda carry, _: (carry, vjp(f, *carry)), list(xs), None, length=1)
        return [g[0] for g in gs]

    tangents = [tg.astype(tg.constant(rng.normal(size=x.shape)), x.dtype) for x in xs]

    def jvp(g, *xs):
        with tg.ForwardAccumulator(list(xs), tangents) as acc:
            outs = g(*xs)
        return [acc.jvp(o, unconnected_gradients="zero") for o in outs]

    expected = [g.numpy() for g in vjp(f, *xs)]
    expected_jvp = [t.numpy() for t in jvp(f, *xs)]
    # (last, the inputs after the first closed over: constants of the program, whose
    # derivatives meet the traced ones: a gradient rule must not copy a constant into it)
    compiled = tg.function(lambda *ys: (vjp(f, *ys), vjp(scanned, *ys), inside(*ys),
                                        jvp(f, *ys), jvp(scanned, *ys), vjp(f, ys[0], *xs[1:]),
                                        jvp(f, ys[0], *xs[1:])))(*xs)
    names = ("VJP compiled", "VJP through a compiled scan", "VJP inside a compiled scan",
             "JVP compiled", "JVP through a compiled scan",
             "VJP compiled, inputs after the first closed over",
             "JVP compiled, inputs after the first closed over")
    for name, got in zip(names, compiled):
        for k, (g, e) in enumerate(zip(got, expected_jvp if "JVP" in name else expected)):
            np.testing.assert_allclose(g.numpy(), e, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{op_type}: {name}, {k}")
    # JAX transforming the op through tg.to_jax: its reverse mode transposes the JVP rules
    # (JAX in 64-bit mode for the float64 references, in this thread for the block only)
    primals, directions = [x.numpy() for x in xs], [t.numpy() for t in tangents]
    with tg.config.x64_scope(jax):
        # the VJP in one program (JAX's eager dispatch compiles each op of a transposed JVP:
        # 60 % of this file's time); the JVP eagerly, so JAX calls the rules on host values
        by_jax = {"VJP by jax.grad(tg.to_jax)": jax.jit(jax.grad(
                      tg.to_jax(lambda *xs: total(f(*xs))), argnums=tuple(range(len(xs)))))(
                      *primals),
                  "JVP by jax.jvp(tg.to_jax)": jax.jvp(tg.to_jax(f), primals, directions)[1]}
    for name, got in by_jax.items():
        for k, (g, e) in enumerate(zip(got, expected_jvp if "JVP" in name else expected)):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{op_type}: {name}, {k}")
