"""Running a definition again (a notebook cell re-run) replaces it; other code is refused."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

CELL = '''
import tapegrad as tg

@tg.primitive("NotebookCellOp")
def cell_op(x):
    return x * {k}

@tg.RegisterGradient("NotebookCellOp")
def _cell_op_grad(op, dy):
    return dy * {k}

@tg.RegisterJVP("NotebookCellOp")
def _cell_op_jvp(op, t):
    return t * {k}
'''


def _run(source, filename):
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - a notebook cell's code
    return namespace["cell_op"]


def test_a_cell_run_again_replaces_its_definitions_with_a_warning():
    # ipykernel names a cell's code after a hash of its source: the same file for a re-run
    _run(CELL.format(k=2), "/tmp/ipykernel_0/cell_a.py")
    with pytest.warns(UserWarning) as caught:
        op = _run(CELL.format(k=2), "/tmp/ipykernel_0/cell_a.py")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3
    assert "op type 'NotebookCellOp' is defined again by the same code" in messages[0]
    assert "the gradient of 'NotebookCellOp' is defined again" in messages[1]
    assert "the JVP rule of 'NotebookCellOp' is defined again" in messages[2]
    x = tg.constant([1.0, 3.0])
    np.testing.assert_array_equal(op(x).numpy(), [2.0, 6.0])
    np.testing.assert_array_equal(tg.grad(lambda x: tg.sum(op(x)))(x).numpy(), [2.0, 2.0])
    with tg.ForwardAccumulator(x, tg.ones_like(x)) as acc:
        y = op(x)
    np.testing.assert_array_equal(acc.jvp(y).numpy(), [2.0, 2.0])
    # another cell (another file) may not take the name
    with pytest.raises(ValueError, match="op type 'NotebookCellOp' is already registered "
                                         r"\(by cell_op \(/tmp/ipykernel_0/cell_a.py:4\)\); "
                                         "choose another name"):
        _run(CELL.format(k=3), "/tmp/ipykernel_0/cell_b.py")
    with pytest.raises(ValueError, match="'NotebookCellOp' already has a gradient"):
        tg.RegisterGradient("NotebookCellOp")(lambda op, dy: dy)
