"""The fast paths agree with the general path, for every registered op on its samples.

The op wrapper is one template (``_registry._OP_TEMPLATE``), spelled out for ops of one or two
inputs and no attributes and variadic otherwise (``_make_op(opdef, fast_paths=False)`` gives
the variadic form for every op); both forms must give the same outputs, the same records and
the same gradients, under no tape, one tape and two tapes (``_records.record``, the one
recording function, records once for both).
"""
from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _registry
from test_registry_gradients import _is_builtin


def _cases():
    # not the control-flow constructs (Scan, While, Switch): their public function is the
    # construct itself, on Tensors; no op wrapper runs them
    return [pytest.param(name, id=name) for name, opdef in sorted(tg.registered_ops().items())
            if opdef.defined and _is_builtin(opdef) and opdef.samples
            and not opdef.is_construct]


def _values(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [np.asarray(o.numpy()) for o in outs]


def _equal(a, b, what):
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, what
        np.testing.assert_array_equal(x, y, err_msg=what)


def _floating(t):
    return tg.isdtype(t.dtype, ("real floating", "complex floating"))


@pytest.mark.parametrize("op_type", _cases())
def test_fast_and_general_paths_agree(op_type):
    opdef = tg.registered_ops()[op_type]
    general = _registry._make_op(opdef, fast_paths=False)
    rng = np.random.default_rng([zlib.crc32(op_type.encode()), 3])
    args, attrs, float_positions = opdef.samples[0].materialize(rng)
    tensors = [tg.constant(a) if k in float_positions else a for k, a in enumerate(args)]
    sources = [tensors[k] for k in float_positions]

    _equal(_values(opdef.public(*tensors, **attrs)), _values(general(*tensors, **attrs)),
           f"{op_type}: outputs without a tape")

    def run(op, n_tapes):
        tapes = [tg.GradientTape(persistent=True) for _ in range(n_tapes)]
        for tape in tapes:
            tape.__enter__()
            tape.watch(sources)
        try:
            out = op(*tensors, **attrs)
        finally:
            for tape in reversed(tapes):
                tape.__exit__(None, None, None)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if _floating(o)]
        record = tapes[-1]._ops[-1] if tapes[-1]._ops else None
        if not (opdef.differentiable and outs and sources):
            return out, record, []
        weights = [tg.astype(tg.constant(np.linspace(0.5, 1.5, o.size).reshape(o.shape)),
                             o.dtype) for o in outs]
        grads = []
        for tape in tapes:
            with tape:
                total = tg.sum(tg.stack([tg.sum(tg.real(o * w)) for o, w in zip(outs, weights)]))
            grads.append(tape.gradient(total, sources, unconnected_gradients="zero"))
        return out, record, grads

    fast_out, fast_record, fast_grads = run(opdef.public, 1)
    results = {"general, one tape": run(general, 1), "fast, two tapes": run(opdef.public, 2),
               "general, two tapes": run(general, 2)}
    for name, (out, record, grads) in results.items():
        _equal(_values(fast_out), _values(out), f"{op_type}: outputs, {name}")
        assert (fast_record is None) == (record is None), f"{op_type}: recorded, {name}"
        if record is not None:
            assert record.type == fast_record.type and record.attrs == fast_record.attrs
            assert len(record.inputs) == len(fast_record.inputs)
            assert len(record.outputs) == len(fast_record.outputs)
            assert record._gdef is fast_record._gdef
        for tape_grads in grads:
            _equal([g.numpy() for g in fast_grads[0]], [g.numpy() for g in tape_grads],
                   f"{op_type}: gradients, {name}")


@pytest.mark.parametrize("op_type", _cases())
def test_a_none_input_names_the_op_and_the_argument_on_both_paths(op_type):
    opdef = tg.registered_ops()[op_type]
    general = _registry._make_op(opdef, fast_paths=False)
    args, attrs, _ = opdef.samples[0].materialize(np.random.default_rng(0))
    name = opdef.forward.__name__.lstrip("_")
    for k in range(len(args)):
        param = opdef.param_name(k)
        if param in opdef.optional:  # clip's bounds: None is no bound
            continue
        given = [None if j == k else a for j, a in enumerate(args)]
        for op in (opdef.public, general):
            with pytest.raises(TypeError, match=rf"^{name} \(op type '{op_type}'\): argument "
                                                rf"'{re.escape(param)}' is None \(a NoneType\); "
                                                "pass a Tensor"):
                op(*given, **attrs)


def test_sum_of_none_names_sum_and_x():
    with pytest.raises(TypeError, match=r"^sum \(op type 'Sum'\): argument 'x' is None"):
        tg.sum(None)
    assert float(tg.clip(tg.constant(5.0), None, 2.0)) == 2.0  # an optional input
