"""tg.linalg.cg and tg.lax.custom_linear_solve: SciPy's results, implicit (adjoint) gradients
equal to the closed forms, eagerly and compiled, first and second order; errors."""
import numpy as np
import pytest

import tapegrad as tg

_RNG = np.random.default_rng(0)
_Q = _RNG.normal(size=(6, 6))
A0 = _Q @ _Q.T + 6 * np.eye(6)
B0, C = _RNG.normal(size=6), _RNG.normal(size=6)


def _maybe_compiled(f, compiled):
    if not compiled:
        return f
    pytest.importorskip("jax")
    if tg._backend.default_namespace().__name__.startswith("array_api_strict"):
        pytest.skip("compiled code makes array_api_strict constants that do not mix with JAX "
                    "tracers")
    return tg.function(f, jit_compile=True)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cg_solves_and_its_gradients_are_the_adjoint_ones(compiled):
    def loss(A, b):
        x, info = tg.linalg.cg(A, b, rtol=1e-12)
        return tg.sum(x * tg.constant(C))

    grad = _maybe_compiled(tg.grad(loss, argnums=(0, 1)), compiled)
    ga, gb = grad(tg.constant(A0), tg.constant(B0))
    x = np.linalg.solve(A0, B0)
    want_b = np.linalg.solve(A0, C)  # b_bar = A^-T x_bar
    np.testing.assert_allclose(gb.numpy(), want_b, rtol=1e-9)
    np.testing.assert_allclose(ga.numpy(), -np.outer(want_b, x), rtol=1e-9, atol=1e-12)
    solve = _maybe_compiled(lambda A, b: tg.linalg.cg(A, b, rtol=1e-10), compiled)
    x_got, info = solve(tg.constant(A0), tg.constant(B0))
    np.testing.assert_allclose(x_got.numpy(), x, rtol=1e-8)
    assert int(info) == 0


def test_cg_reports_non_convergence_as_scipy_does_and_takes_a_matrix_free_operator():
    _, info = tg.linalg.cg(tg.constant(A0), tg.constant(B0), maxiter=2)
    assert int(info) == 2
    s = tg.constant(0.5)
    with tg.GradientTape() as tape:
        tape.watch(s)
        x, _ = tg.linalg.cg(lambda v: tg.matmul(tg.constant(A0), v) + s * v, tg.constant(B0),
                            rtol=1e-12, M=np.diag(1 / np.diag(A0)))
        loss = tg.sum(x * tg.constant(C))
    a1 = A0 + 0.5 * np.eye(6)
    want = -np.linalg.solve(a1, C) @ np.linalg.solve(a1, B0)  # d/ds of c^T (A + sI)^-1 b
    np.testing.assert_allclose(float(tape.gradient(loss, s)), want, rtol=1e-9)


def test_second_order_through_the_implicit_gradient():
    h = tg.hessian(lambda b: tg.sum(tg.linalg.cg(tg.constant(A0), b, rtol=1e-12)[0] ** 2))(
        tg.constant(B0))
    inv = np.linalg.inv(A0)
    np.testing.assert_allclose(h.numpy(), 2 * inv.T @ inv, rtol=1e-8)


def test_custom_linear_solve_with_a_transpose_solve_for_a_nonsymmetric_operator():
    m = A0 + np.triu(np.ones((6, 6)), 1)
    mat = tg.constant(m)

    def dense_solve(matvec, b):
        return tg.linalg.solve(mat, b[:, None])[:, 0]

    def dense_transpose_solve(vecmat, b):
        return tg.linalg.solve(tg.matrix_transpose(mat), b[:, None])[:, 0]

    b = tg.constant(B0)
    with tg.GradientTape() as tape:
        tape.watch(b)
        x = tg.lax.custom_linear_solve(lambda v: tg.matmul(mat, v), b, dense_solve,
                                       dense_transpose_solve)
        loss = tg.sum(x * tg.constant(C))
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(m, B0), rtol=1e-10)
    np.testing.assert_allclose(tape.gradient(loss, b).numpy(), np.linalg.solve(m.T, C),
                               rtol=1e-10)


def test_solver_errors_say_what_to_do():
    with pytest.raises(ValueError, match="transpose_solve, or symmetric=True"):
        tg.lax.custom_linear_solve(lambda v: v, tg.constant(B0), lambda m, b: b)
    with pytest.raises(ValueError, match="callback is not supported"):
        tg.linalg.cg(tg.constant(A0), tg.constant(B0), callback=print)
    with pytest.raises(ValueError, match=r"square matrix or a function, got shape \(6, 3\)"):
        tg.linalg.cg(tg.constant(A0[:, :3]), tg.constant(B0))
