"""Every built-in differentiable primitive under ``tg.vmap``: values and VJPs per example.

For each differentiable op type (its first declared sample; every sample of a control-flow
construct, ``first_sample_cases``), two examples of the sample's
floating inputs (two random draws of the same shapes) are stacked along a new leading axis;
``tg.vmap`` of the op over that axis must give, for each example, the op's own output (eager
``tg.vmap``), and the gradient of a fixed random projection of the batched outputs must give
each example's own VJP (the batched reverse pass is JAX's VJP of the op's JVP rules, see
``tapegrad.batching``). The gradient is taken inside ``tg.function``, as one program: the same
batching rules, where JAX's eager dispatch compiled each op of the batched reverse pass (the
file took about 150 s of CPU, now about 50; eager ``tg.vmap`` under a tape stays covered by
``test_vmap``).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import tapegrad as tg
from test_registry_gradients import first_sample_cases, floating_outputs

jax = pytest.importorskip("jax")
pytestmark = pytest.mark.skipif(
    tg._backend.default_namespace().__name__ == "array_api_strict",
    reason="tg.vmap runs on JAX, whose values do not mix with array_api_strict constants")


@pytest.mark.parametrize("op_type, index", first_sample_cases())
def test_vmap_of_the_op_equals_the_op_per_example(op_type, index):
    opdef = tg.registered_ops()[op_type]
    seed = zlib.crc32(op_type.encode())
    draws = [opdef.samples[index].materialize(np.random.default_rng([seed, k]))
             for k in (1, 2)]
    args, attrs, float_positions = draws[0]

    f = floating_outputs(op_type, args, attrs, float_positions)

    examples = [[tg.constant(a[p]) for p in float_positions] for a, _, _ in draws]
    per_example = [f(*xs) for xs in examples]
    batched_xs = [tg.stack([xs[k] for xs in examples]) for k in range(len(float_positions))]
    batched = tg.vmap(f)(*batched_xs)
    for b, outs in enumerate(per_example):
        for k, o in enumerate(outs):
            np.testing.assert_allclose(batched[k][b].numpy(), o.numpy(), rtol=1e-10,
                                       atol=1e-12, err_msg=f"{op_type}: output {k}, example {b}")

    rng = np.random.default_rng([seed, 3])
    cotangents = [tg.astype(tg.constant(rng.normal(size=o.shape)), o.dtype) for o in batched]

    def projected(g, xs, cots):
        with tg.GradientTape() as tape:
            tape.watch(list(xs))
            y = tg.sum(tg.stack([tg.sum(tg.real(o * c)) for o, c in zip(g(*xs), cots)]))
        return tape.gradient(y, list(xs), unconnected_gradients="zero")

    got = tg.function(lambda *xs: projected(tg.vmap(f), xs, cotangents))(*batched_xs)
    for b, xs in enumerate(examples):
        want = projected(f, xs, [c[b] for c in cotangents])
        for k, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g[b].numpy(), w.numpy(), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{op_type}: VJP of input {k}, example {b}")
