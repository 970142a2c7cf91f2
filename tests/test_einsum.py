"""tg.einsum: values against numpy.einsum (explicit, implicit, ellipsis, diagonals, broadcast),
gradients and JVPs to second order through the public wrapper, and the subscript errors."""
import numpy as np
import pytest

import tapegrad as tg

rng = np.random.default_rng(3)

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: ik
    ("ba", [(2, 3)]),  # implicit: sorted letters, so a transpose
    ("ii", [(3, 3)]),  # implicit trace
    ("ii->i", [(3, 3)]),
    ("i,i", [(4,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...j,j", [(2, 3, 4), (4,)]),
    ("b i j, b j -> b i", [(2, 3, 4), (2, 4)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),  # size-1 broadcast
    ("ijk,ikl,lm->jm", [(2, 3, 4), (2, 4, 5), (5, 2)]),
    ("iij->j", [(2, 2, 3)]),
    ("ij,k->", [(2, 3), (4,)]),
]


@pytest.mark.parametrize("subscripts, shapes", CASES)
def test_values_match_numpy(subscripts, shapes):
    ops = [rng.normal(size=s) for s in shapes]
    out = tg.einsum(subscripts, *[tg.constant(o) for o in ops])
    np.testing.assert_allclose(out.numpy(), np.einsum(subscripts, *ops), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("subscripts, shapes", CASES[5:])
def test_gradients_to_second_order_and_forward_mode(subscripts, shapes):
    ops = [rng.normal(size=s) for s in shapes]
    tg.test.check_gradients(lambda *xs: tg.einsum(subscripts, *xs), ops, order=2,
                            modes=("rev", "fwd"))


def test_matmul_gradient_is_the_transposed_product():
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 5))
    ta, tb = tg.constant(a), tg.constant(b)
    with tg.GradientTape(persistent=True) as tape:
        tape.watch([ta, tb])
        y = tg.sum(tg.einsum("ij,jk->ik", ta, tb))
    da, db = tape.gradient(y, [ta, tb])
    np.testing.assert_allclose(da.numpy(), np.ones((3, 5)) @ b.T)
    np.testing.assert_allclose(db.numpy(), a.T @ np.ones((3, 5)))
    assert {op.type for op in tape.operations} == {"Einsum", "Sum"}


@pytest.mark.parametrize("subscripts, shapes, match", [
    ("ij,jk->ik", [(3, 4)], r"name 2 operand\(s\) but 1 were given"),
    ("ij,jk->ik", [(3, 4), (4, 5, 1)], r"operand 1 has 3 dimension\(s\) but its subscripts "
                                       "'jk' name 2"),
    ("ij,jk->ik", [(3, 4), (5, 6)], "operands 0 and 1 give 'j' the sizes 4 and 5"),
    ("ii->i", [(2, 3)], "operand 0 give 'i' the sizes 2 and 3"),
    ("i1,j->ij", [(2, 2), (2,)], r"operand 0's subscripts 'i1' must be letters"),
    ("ij->ii", [(2, 2)], "the output repeats 'i'"),
    ("ij->k", [(2, 2)], "the output letter 'k' names no input dimension"),
    ("...ij->ij", [(4, 2, 2)], "the output must contain '...'"),
    ("ij->i->j", [(2, 2)], "'->' may appear once"),
])
def test_subscript_errors_name_the_operand(subscripts, shapes, match):
    with pytest.raises(ValueError, match=match):
        tg.einsum(subscripts, *[tg.constant(np.ones(s)) for s in shapes])


def test_subscripts_must_be_a_string():
    with pytest.raises(TypeError, match="subscripts must be a string"):
        tg.einsum(["i"], tg.constant(np.ones(2)))
