"""tg.linalg.cg and tg.lax.custom_linear_solve: SciPy's results, implicit (adjoint) gradients
equal to the closed forms, eagerly and compiled, first and second order; errors."""
import warnings

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


# --- gmres -------------------------------------------------------------------------------------
N0 = 12
_G = np.random.default_rng(3)
G0 = 0.3 * _G.normal(size=(N0, N0)) + 3 * np.eye(N0) + 0.5 * np.triu(_G.normal(size=(N0, N0)), 1)
GB, GC = _G.normal(size=N0), _G.normal(size=N0)
GD, GE = _G.normal(size=N0), _G.normal(size=N0)  # a field and a tangent of the operator


def _jax():
    return pytest.importorskip("jax")


@pytest.fixture
def x64():
    """JAX's 64-bit mode on for the test only (thread-local, never process-wide): the JAX
    references in float64."""
    with tg.config.x64_scope(_jax()):
        yield


def test_the_gmres_case_is_non_symmetric_and_well_conditioned():
    assert np.abs(G0 - G0.T).max() > 1
    assert np.linalg.cond(G0) < 10


@pytest.mark.parametrize("kwargs", [
    {}, {"rtol": 1e-10}, {"restart": 4, "rtol": 1e-10}, {"restart": 3, "maxiter": 2},
    {"M": np.diag(1 / np.diag(G0)), "restart": 5, "rtol": 1e-9}, {"atol": 1e-3, "rtol": 0.0},
    {"x0": GD, "restart": 6, "rtol": 1e-9}], ids=["default", "rtol", "restart", "maxiter",
                                                  "M", "atol", "x0"])
def test_gmres_runs_scipys_iteration(kwargs):
    scipy_linalg = pytest.importorskip("scipy.sparse.linalg")
    want, want_info = scipy_linalg.gmres(G0, GB, **kwargs)
    x, info = tg.linalg.gmres(tg.constant(G0), tg.constant(GB), **kwargs)
    # the same iteration (Gram-Schmidt twice instead of modified): the same iterate, not
    # only the same solution, also where it stopped short of convergence
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-9, atol=1e-12)
    assert int(info) == want_info
    assert x.dtype == tg.float64 and info.shape == ()
    if "maxiter" in kwargs:
        assert want_info == 2 and np.linalg.norm(G0 @ want - GB) > 1e-3


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gmres_converges_in_float32_and_compiled(compiled):
    solve = _maybe_compiled(lambda A, b: tg.linalg.gmres(A, b, rtol=1e-5, restart=5), compiled)
    x, info = solve(tg.constant(G0.astype(np.float32)), tg.constant(GB.astype(np.float32)))
    assert x.dtype == tg.float32 and int(info) == 0
    assert np.linalg.norm(G0 @ x.numpy() - GB) <= 2e-5 * np.linalg.norm(GB)


def _gmres_jax(A, b):
    jax = _jax()
    return jax.scipy.sparse.linalg.gmres(A, b, tol=1e-13, atol=0.0, restart=5,
                                         solve_method="incremental")[0]


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gmres_values_and_gradients_match_jax_and_the_adjoint(compiled):
    jax = _jax()
    jnp = jax.numpy

    def loss(A, b):
        x, _ = tg.linalg.gmres(A, b, rtol=1e-13, restart=5)
        return tg.sum(x * tg.constant(GC))

    grad = _maybe_compiled(tg.value_and_grad(loss, argnums=(0, 1)), compiled)
    value, (ga, gb) = grad(tg.constant(G0), tg.constant(GB))
    want_value, (ja, jb) = jax.jit(jax.value_and_grad(  # one program (eager JAX: 5 s)
        lambda A, b: jnp.sum(_gmres_jax(A, b) * GC), argnums=(0, 1)))(G0, GB)
    x, u = np.linalg.solve(G0, GB), np.linalg.solve(G0.T, GC)  # b_bar = A^-T x_bar
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-10)
    np.testing.assert_allclose(float(value), GC @ x, rtol=1e-10)
    np.testing.assert_allclose(gb.numpy(), np.asarray(jb), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), u, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ga.numpy(), np.asarray(ja), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ga.numpy(), -np.outer(u, x), rtol=1e-9, atol=1e-12)


def _operator_tg(s, d):
    """A matrix-free non-symmetric operator with a scalar and a field parameter."""
    g = tg.constant(G0)
    return lambda v: tg.matmul(g, v) + s * v + d * tg.roll(v, 1)


def _operator_jax(s, d):
    jnp = _jax().numpy
    return lambda v: G0 @ v + s * v + d * jnp.roll(v, 1)


def _closure_loss(s, d, b):
    x, _ = tg.linalg.gmres(_operator_tg(s, d), b, rtol=1e-13, restart=6)
    return tg.sum(x * tg.constant(GC))


def _closure_loss_jax(s, d, b):
    jax = _jax()
    x = jax.scipy.sparse.linalg.gmres(_operator_jax(s, d), b, tol=1e-13, atol=0.0,
                                      restart=6, solve_method="incremental")[0]
    return jax.numpy.sum(x * GC)


def _dense(s, d):
    return G0 + s * np.eye(N0) + d[:, None] * np.roll(np.eye(N0), 1, axis=0)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gmres_gradients_of_a_matrix_free_operators_parameters(compiled):
    jax = _jax()
    args = (0.7, 0.3 * GD, GB)
    grad = _maybe_compiled(tg.grad(_closure_loss, argnums=(0, 1, 2)), compiled)
    got = grad(*[tg.constant(a) for a in args])
    want = jax.jit(jax.grad(_closure_loss_jax, argnums=(0, 1, 2)))(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-8, atol=1e-12)
    a = _dense(0.7, 0.3 * GD)  # closed form: d/ds c^T A^-1 b = -u^T x with u = A^-T c
    x, u = np.linalg.solve(a, GB), np.linalg.solve(a.T, GC)
    np.testing.assert_allclose(float(got[0]), -u @ x, rtol=1e-9)
    np.testing.assert_allclose(got[1].numpy(), -u * np.roll(x, 1), rtol=1e-9, atol=1e-12)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gmres_forward_mode_matches_jax_and_the_closed_form(compiled):
    jax = _jax()
    args = (0.7, 0.3 * GD, GB)
    tangents = (0.5, GE, GD)

    def solution(s, d, b):
        return tg.linalg.gmres(_operator_tg(s, d), b, rtol=1e-13, restart=6)[0]

    def solution_jax(s, d, b):
        return jax.scipy.sparse.linalg.gmres(_operator_jax(s, d), b, tol=1e-13, atol=0.0,
                                             restart=6, solve_method="incremental")[0]

    jvp = _maybe_compiled(lambda *a: tg.jvp(solution, a[:3], a[3:]), compiled)
    x, dx = jvp(*[tg.constant(a) for a in (*args, *tangents)])
    want_x, want_dx = jax.jit(lambda a, t: jax.jvp(solution_jax, a, t))(args, tangents)
    np.testing.assert_allclose(x.numpy(), np.asarray(want_x), rtol=1e-10)
    np.testing.assert_allclose(dx.numpy(), np.asarray(want_dx), rtol=1e-8, atol=1e-12)
    a = _dense(0.7, 0.3 * GD)  # A dx = db - dA x
    da = 0.5 * np.eye(N0) + GE[:, None] * np.roll(np.eye(N0), 1, axis=0)
    np.testing.assert_allclose(dx.numpy(), np.linalg.solve(a, GD - da @ x.numpy()),
                               rtol=1e-9, atol=1e-12)


def test_gmres_gradient_with_a_preconditioner_solves_the_transposed_system():
    scale = tg.constant(1 / np.diag(G0))
    for m in (np.diag(1 / np.diag(G0)) + 0.01 * np.triu(np.ones((N0, N0))), lambda v: scale * v):
        b = tg.constant(GB)
        with tg.GradientTape() as tape:
            tape.watch(b)
            x, info = tg.linalg.gmres(tg.constant(G0), b, rtol=1e-13, restart=4, M=m)
            loss = tg.sum(x * tg.constant(GC))
        assert int(info) == 0
        np.testing.assert_allclose(x.numpy(), np.linalg.solve(G0, GB), rtol=1e-11)
        np.testing.assert_allclose(tape.gradient(loss, b).numpy(), np.linalg.solve(G0.T, GC),
                                   rtol=1e-10)


def test_gmres_second_order_is_the_closed_form():
    h = tg.hessian(lambda b: tg.sum(tg.linalg.gmres(tg.constant(G0), b, rtol=1e-13)[0] ** 2))(
        tg.constant(GB))
    inv = np.linalg.inv(G0)
    np.testing.assert_allclose(h.numpy(), 2 * inv.T @ inv, rtol=1e-8, atol=1e-12)


def test_gmres_errors_say_what_is_wrong():
    a, b = tg.constant(G0), tg.constant(GB)
    with pytest.raises(ValueError, match="callback is not supported"):
        tg.linalg.gmres(a, b, callback=print, callback_type="x")
    with pytest.raises(ValueError, match="unknown callback_type 'each'"):
        tg.linalg.gmres(a, b, callback_type="each")
    with pytest.raises(ValueError, match=r"b must be a vector of shape \(n,\), got shape "
                                         r"\(12, 1\)"):
        tg.linalg.gmres(a, tg.constant(GB[:, None]))
    with pytest.raises(ValueError, match=r"square matrix or a function, got shape \(12, 3\)"):
        tg.linalg.gmres(tg.constant(G0[:, :3]), b)
    with pytest.raises(ValueError, match="A is 3 x 3 but b has 12 entries"):
        tg.linalg.gmres(tg.constant(G0[:3, :3]), b)
    with pytest.raises(ValueError, match="M is 3 x 3 but b has 12 entries"):
        tg.linalg.gmres(a, b, M=np.eye(3))
    with pytest.raises(ValueError, match=r"x0 has shape \(3,\) but b has \(12,\)"):
        tg.linalg.gmres(a, b, x0=np.zeros(3))
    with pytest.raises(ValueError, match="restart must be at least 1, got 0"):
        tg.linalg.gmres(a, b, restart=0)


# --- custom_root -------------------------------------------------------------------------------
ROOT_A = np.array([2.0, 5.0, 0.3, 9.0])
ROOT_V = np.array([1.0, -2.0, 0.5, 0.25])


def _newton(f, x0):
    return tg.lax.fori_loop(0, 40, lambda i, x: x - f(x) / (3 * x ** 2), x0)


def _cube_root(a):
    """The root of x^3 - a = 0 (elementwise) by Newton's method."""
    return tg.lax.custom_root(lambda x: x ** 3 - a, tg.ones(4, dtype=tg.float64), _newton,
                              lambda g, y: y / g(tg.ones(4, dtype=tg.float64)))


def _cube_root_jax(a):
    jax = _jax()
    jnp = jax.numpy

    def newton(f, x0):
        return jax.lax.fori_loop(0, 40, lambda i, x: x - f(x) / (3 * x ** 2), x0)

    return jax.lax.custom_root(lambda x: x ** 3 - a, jnp.ones(4), newton,
                               lambda g, y: y / g(jnp.ones(4)))


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_custom_root_values_gradients_jvps_and_hessians(compiled):
    jax = _jax()
    jnp = jax.numpy
    a = tg.constant(ROOT_A)
    root = _maybe_compiled(_cube_root, compiled)(a)
    np.testing.assert_allclose(root.numpy(), np.cbrt(ROOT_A), rtol=1e-14)

    def loss(a):
        return tg.sum(tg.sin(_cube_root(a)))

    def loss_jax(a):
        return jnp.sum(jnp.sin(_cube_root_jax(a)))

    d1 = ROOT_A ** (-2 / 3) / 3  # d cbrt(a) / da
    d2 = -2 / 9 * ROOT_A ** (-5 / 3)
    r = np.cbrt(ROOT_A)
    g = _maybe_compiled(tg.grad(loss), compiled)(a)
    np.testing.assert_allclose(g.numpy(), np.asarray(jax.grad(loss_jax)(ROOT_A)), rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), np.cos(r) * d1, rtol=1e-12)
    jvp = _maybe_compiled(lambda a, v: tg.jvp(_cube_root, (a,), (v,))[1], compiled)
    t = jvp(a, tg.constant(ROOT_V))
    np.testing.assert_allclose(t.numpy(), np.asarray(jax.jvp(_cube_root_jax, (ROOT_A,),
                                                             (ROOT_V,))[1]), rtol=1e-12)
    np.testing.assert_allclose(t.numpy(), d1 * ROOT_V, rtol=1e-12)
    h = _maybe_compiled(tg.hessian(loss), compiled)(a)  # forward over reverse
    np.testing.assert_allclose(h.numpy(), np.asarray(jax.hessian(loss_jax)(ROOT_A)),
                               rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(np.diag(h.numpy()), np.cos(r) * d2 - np.sin(r) * d1 ** 2,
                               rtol=1e-10)


def test_custom_root_reverse_over_reverse_and_forward_over_forward():
    d1, d2 = ROOT_A ** (-2 / 3) / 3, -2 / 9 * ROOT_A ** (-5 / 3)
    a = tg.constant(ROOT_A)
    with tg.GradientTape() as outer:
        outer.watch(a)
        with tg.GradientTape() as inner:
            inner.watch(a)
            y = tg.sum(_cube_root(a))
        g = inner.gradient(y, a)
    np.testing.assert_allclose(g.numpy(), d1, rtol=1e-12)
    np.testing.assert_allclose(outer.jacobian(g, a).numpy(), np.diag(d2), rtol=1e-10,
                               atol=1e-14)
    v = tg.constant(ROOT_V)
    with tg.ForwardAccumulator(a, v) as acc2:
        with tg.ForwardAccumulator(a, v) as acc1:
            x = _cube_root(a)
        t = acc1.jvp(x)
    np.testing.assert_allclose(acc2.jvp(t).numpy(), d2 * ROOT_V ** 2, rtol=1e-10)


# a vector system with a non-symmetric Jacobian: B x + x^3 / 10 = a, solved by Newton's method
# with dense Jacobians, its tangent systems by gmres (so the transposed one is a real one)
ROOT_B = np.eye(4) * 3 + np.triu(np.ones((4, 4)), 1)


def _system_root(a, bmat):
    def f(x):
        return tg.matmul(bmat, x) + x ** 3 / 10 - a

    def newton(f, x0):
        def step(i, x):
            return x - tg.linalg.solve(tg.jacfwd(f)(x), f(x)[:, None])[:, 0]
        return tg.lax.fori_loop(0, 30, step, x0)

    def tangent_solve(g, y):
        return tg.linalg.gmres(g, y, rtol=1e-14)[0]

    return tg.lax.custom_root(f, tg.zeros(4, dtype=tg.float64), newton, tangent_solve)


def _system_root_jax(a, bmat):
    jax = _jax()
    jnp = jax.numpy

    def f(x):
        return bmat @ x + x ** 3 / 10 - a

    def newton(f, x0):
        return jax.lax.fori_loop(0, 30, lambda i, x: x - jnp.linalg.solve(jax.jacfwd(f)(x),
                                                                           f(x)), x0)

    def tangent_solve(g, y):
        return jnp.linalg.solve(jax.jacfwd(g)(y), y)

    return jax.lax.custom_root(f, jnp.zeros(4), newton, tangent_solve)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_custom_root_of_a_non_symmetric_system_in_both_modes(compiled):
    jax = _jax()
    jnp = jax.numpy
    args = (tg.constant(ROOT_A), tg.constant(ROOT_B))
    x = _maybe_compiled(_system_root, compiled)(*args)
    xv = x.numpy()
    np.testing.assert_allclose(ROOT_B @ xv + xv ** 3 / 10, ROOT_A, rtol=1e-12)
    np.testing.assert_allclose(xv, np.asarray(_system_root_jax(ROOT_A, ROOT_B)), rtol=1e-12)

    def loss(a, bmat):
        return tg.sum(_system_root(a, bmat) * tg.constant(ROOT_V))

    ga, gb = _maybe_compiled(tg.grad(loss, argnums=(0, 1)), compiled)(*args)
    ja, jb = jax.jit(jax.grad(lambda a, b: jnp.sum(_system_root_jax(a, b) * ROOT_V),
                              argnums=(0, 1)))(ROOT_A, ROOT_B)
    jac = ROOT_B + np.diag(3 * xv ** 2 / 10)  # df/dx; df/da = -I, df/dB = x^T per row
    u = np.linalg.solve(jac.T, ROOT_V)
    for got, want in [(ga, ja), (ga, u), (gb, jb), (gb, -np.outer(u, xv))]:
        np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=1e-10, atol=1e-13)
    tangent = (tg.constant(ROOT_V), tg.constant(np.tril(ROOT_B)))
    dx = _maybe_compiled(lambda a, b, ta, tb: tg.jvp(_system_root, (a, b), (ta, tb))[1],
                         compiled)(*args, *tangent)
    want = jax.jit(lambda a, b, ta, tb: jax.jvp(_system_root_jax, (a, b), (ta, tb))[1])(
        ROOT_A, ROOT_B, ROOT_V, np.tril(ROOT_B))
    np.testing.assert_allclose(dx.numpy(), np.asarray(want), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(dx.numpy(), np.linalg.solve(jac, ROOT_V - np.tril(ROOT_B) @ xv),
                               rtol=1e-10, atol=1e-13)


def test_custom_root_differentiates_variables_f_reads_and_returns_aux_without_gradient():
    a = tg.Variable(ROOT_A, name="a")

    def newton(f, x0):
        def fx(x):
            return f({"x": x})["x"]

        x, k = tg.lax.while_loop(lambda c: tg.max(tg.abs(fx(c[0]))) > 1e-14,
                                 lambda c: (c[0] - fx(c[0]) / (3 * c[0] ** 2), c[1] + 1),
                                 (x0["x"], tg.constant(np.int32(0))))
        return {"x": x}, k

    with tg.GradientTape() as tape:
        root, steps = tg.lax.custom_root(lambda x: {"x": x["x"] ** 3 - a},
                                         {"x": tg.ones(4, dtype=tg.float64)}, newton,
                                         lambda g, y: {"x": y["x"] / g({"x": tg.ones(
                                             4, dtype=tg.float64)})["x"]}, has_aux=True)
        loss = tg.sum(root["x"] * tg.constant(ROOT_V))
    np.testing.assert_allclose(root["x"].numpy(), np.cbrt(ROOT_A), rtol=1e-14)
    assert 5 < int(steps) < 40
    np.testing.assert_allclose(tape.gradient(loss, a).numpy(), ROOT_V * ROOT_A ** (-2 / 3) / 3,
                               rtol=1e-12)


def test_custom_root_errors_name_the_leaf_and_both_shapes():
    guess = tg.ones(3, dtype=tg.float64)
    with pytest.raises(TypeError, match=r"f returned initial_guess with shape \(2,\) and dtype "
                                        r"float64, but initial_guess has shape \(3,\)"):
        tg.lax.custom_root(lambda x: x[:2], guess, lambda f, x: x, lambda g, y: y)
    with pytest.raises(TypeError, match="f returned .* but initial_guess has the structure"):
        tg.lax.custom_root(lambda x: (x, x), guess, lambda f, x: x, lambda g, y: y)
    with pytest.raises(TypeError, match=r"solve returned initial_guess with shape \(\) "):
        tg.lax.custom_root(lambda x: x, guess, lambda f, x: tg.sum(x), lambda g, y: y)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("solver", ["cg", "gmres"])
def test_a_tiny_float32_cotangent_gives_the_right_finite_gradient(solver, compiled):
    # jax#40254: a preconditioned float32 CG's gradient was NaN for a loss scaled by 1e-20
    # (r.r underflows, 0/0) and zero for 1e-30; the adjoint solve now runs on the cotangent
    # divided by its largest magnitude
    a = A0.astype(np.float32)
    m = np.diag(1 / np.diag(A0)).astype(np.float32)
    for scale in (1.0, 1e-20, 1e-30):
        f = _maybe_compiled(tg.grad(lambda b: tg.sum(getattr(tg.linalg, solver)(
            a, b, M=m, rtol=1e-6)[0]) * scale), compiled)
        g = f(tg.constant(B0.astype(np.float32))).numpy()
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, np.linalg.solve(A0.T, np.ones(6)) * scale, rtol=2e-5)


@pytest.mark.parametrize("solver", ["cg", "gmres"])
def test_the_adjoint_solve_takes_its_own_tolerances(solver):
    def gradient(**options):
        return tg.grad(lambda b: tg.sum(getattr(tg.linalg, solver)(
            A0, b, rtol=1e-12, **options)[0] * tg.constant(C)))(tg.constant(B0)).numpy()

    exact = np.linalg.solve(A0.T, C)
    np.testing.assert_allclose(gradient(), exact, rtol=1e-10)
    with pytest.warns(tg.errors.ConvergenceWarning):
        np.testing.assert_array_equal(gradient(adjoint_maxiter=0), np.zeros(6))  # no iteration
    loose = gradient(adjoint_rtol=1e-2)
    assert 1e-9 < np.abs(loose - exact).max() / np.abs(exact).max() < 1e-1
    np.testing.assert_allclose(gradient(adjoint_atol=1e3), np.zeros(6))  # zeros: close enough


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cg_solves_a_complex_hermitian_system_and_differentiates_it(compiled):
    # it raised "op type 'Maximum' ... defined for real numbers only", naming no solver
    rng = np.random.default_rng(1)
    q = rng.normal(size=(6, 6)) + 1j * rng.normal(size=(6, 6))
    a = q @ q.conj().T + 6 * np.eye(6)
    b, c = rng.normal(size=(2, 6)) + 1j * rng.normal(size=(2, 6))
    for m in (None, np.diag(1 / np.diag(a).real).astype(complex)):
        x, info = tg.linalg.cg(a, b, rtol=1e-12, M=m)
        assert int(info) == 0
        np.testing.assert_allclose(x.numpy(), np.linalg.solve(a, b), rtol=1e-10)

        def loss(solve):
            return lambda b: tg.real(tg.sum(solve(b) * tg.constant(c)))

        g = _maybe_compiled(tg.grad(loss(lambda b: tg.linalg.cg(a, b, rtol=1e-12, M=m)[0])),
                            compiled)(tg.constant(b))
        dense = tg.grad(loss(lambda b: tg.linalg.solve(tg.constant(a), b)))(tg.constant(b))
        np.testing.assert_allclose(g.numpy(), dense.numpy(), rtol=1e-10)
        # tapegrad's (TensorFlow's) convention: the conjugate of d loss / d b
        np.testing.assert_allclose(g.numpy(), np.conj(np.linalg.solve(a.T, c)), rtol=1e-10)


_Z = np.random.default_rng(2)
Z0 = 3 * np.eye(N0) + 0.4 * (_Z.normal(size=(N0, N0)) + 1j * _Z.normal(size=(N0, N0)))
ZB, ZC = _Z.normal(size=(2, N0)) + 1j * _Z.normal(size=(2, N0))


@pytest.mark.parametrize("kwargs", [
    {}, {"restart": 4, "rtol": 1e-10}, {"restart": 3, "maxiter": 2},
    {"M": np.diag(1 / np.diag(Z0)), "restart": 5, "rtol": 1e-9}],
    ids=["default", "restart", "maxiter", "M"])
def test_gmres_runs_scipys_iteration_on_a_complex_system(kwargs):
    # it raised TypeError: complex systems are not supported yet
    scipy_linalg = pytest.importorskip("scipy.sparse.linalg")
    want, want_info = scipy_linalg.gmres(Z0, ZB, **kwargs)
    x, info = tg.linalg.gmres(tg.constant(Z0), tg.constant(ZB), **kwargs)
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-9, atol=1e-12)
    assert int(info) == want_info and x.dtype == tg.complex128


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gmres_gradient_of_a_complex_system_is_the_dense_solves(compiled):
    jax = _jax()
    jnp = jax.numpy
    rng = np.random.default_rng(5)
    n = 30
    za = 3 * np.eye(n) + 0.5 * np.tril(rng.normal(size=(n, n)) + 1j * rng.normal(size=(n, n)),
                                       -1) + 0.01 * np.triu(rng.normal(size=(n, n)), 1)
    zm = np.linalg.inv(np.tril(za))  # Gauss-Seidel: M A ~ I; neither M^T nor M on A^H is
    budget = {"rtol": 1e-10, "restart": 4, "maxiter": 3}
    assert int(tg.linalg.gmres(za.conj().T, np.ones(n), M=zm.T, **budget)[1]) == 3
    mt = tg.constant(zm)
    b, c = rng.normal(size=(2, n)) + 1j * rng.normal(size=(2, n))
    cases = [(Z0, ZB, ZC, None, {"rtol": 1e-12, "restart": 4}), (za, b, c, zm, budget),
             (za, b, c, lambda v: tg.matmul(mt, v), budget)]
    for a, b, c, m, options in cases:  # M^H: a conjugate transpose, a VJP
        def loss(a, b, solve):
            return tg.real(tg.sum(solve(a, b) * tg.constant(c)))

        def gmres(a, b):
            return tg.linalg.gmres(a, b, M=m, adjoint_on_failure="raise", **options)[0]

        def dense(a, b):
            return tg.linalg.solve(a, b[:, None])[:, 0]

        ga, gb = _maybe_compiled(tg.grad(lambda a, b: loss(a, b, gmres), argnums=(0, 1)),
                                 compiled)(tg.constant(a), tg.constant(b))
        da, db = tg.grad(lambda a, b: loss(a, b, dense), argnums=(0, 1))(tg.constant(a),
                                                                         tg.constant(b))
        np.testing.assert_allclose(gb.numpy(), db.numpy(), rtol=1e-8)
        np.testing.assert_allclose(ga.numpy(), da.numpy(), rtol=1e-8, atol=1e-12)
        # JAX's gradient is the conjugate of tapegrad's (docs/architecture.md, "Complex numbers")
        ja, jb = jax.grad(lambda a, b: jnp.real(jnp.sum(jnp.linalg.solve(a, b) * c)),
                          argnums=(0, 1))(a, b)
        np.testing.assert_allclose(gb.numpy(), np.conj(jb), rtol=1e-8)
        np.testing.assert_allclose(ga.numpy(), np.conj(ja), rtol=1e-8, atol=1e-12)
        u = np.linalg.solve(a.conj().T, c.conj())  # b_bar = A^-H x_bar, x_bar = conj(c)
        np.testing.assert_allclose(gb.numpy(), u, rtol=1e-8)
        np.testing.assert_allclose(ga.numpy(), -np.outer(u, np.linalg.solve(a, b).conj()),
                                   rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("solver", ["cg", "gmres"])
def test_an_adjoint_solve_that_does_not_converge_warns_or_raises(solver, compiled):
    # the gradient's solve failed silently: its info was dropped
    unit = "iterations" if solver == "cg" else "restart cycles"
    residual = np.linalg.norm(C)  # after no iteration from zeros, the cotangent itself
    message = (rf"tg.linalg.{solver}: the adjoint solve \(of the gradient, A\^T u = cotangent; "
               rf"A\^H for complex A\) did not converge: residual norm {residual:.3g} > "
               rf"tolerance {1e-12 * residual:.3g} \(max\(adjoint_rtol \* \|\|cotangent\|\|, "
               rf"adjoint_atol\)\) after adjoint_maxiter=0 {unit}, so the gradient is "
               r"inaccurate. Raise adjoint_maxiter, .* 'raise' makes it an error")

    def gradient(on_failure, maxiter=0):
        f = _maybe_compiled(tg.grad(lambda b: tg.sum(getattr(tg.linalg, solver)(
            A0, b, rtol=1e-12, adjoint_maxiter=maxiter, adjoint_on_failure=on_failure)[0]
            * tg.constant(C))), compiled)
        g = f(tg.constant(B0)).numpy()
        if compiled:  # the host callback has run when the program has
            _jax().effects_barrier()
        return g

    with pytest.warns(tg.errors.ConvergenceWarning, match=message):
        np.testing.assert_array_equal(gradient("warn"), np.zeros(6))
    with pytest.raises(tg.errors.ConvergenceError, match=message):
        gradient("raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(gradient("ignore"), np.zeros(6))
        np.testing.assert_allclose(gradient("raise", None), np.linalg.solve(A0.T, C),
                                   rtol=1e-10)  # converged: silent
    with pytest.raises(ValueError, match=rf"tg.linalg.{solver}: adjoint_on_failure must be one "
                                         r"of 'warn', 'raise', 'ignore' \(as numpy.errstate's\), "
                                         r"got 'error'"):
        getattr(tg.linalg, solver)(A0, B0, adjoint_on_failure="error")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_preconditioned_gmres_gradient_uses_the_transposed_preconditioner_jax_29449(compiled):
    # jax#29449: JAX's transposed GMRES applies M, not M^T, so with a non-symmetric M (here
    # Gauss-Seidel's, the inverse of A's lower triangle: M A ~ I, M A^T is not) the forward
    # solve converges in its budget and the gradient's does not (JAX 0.10: relative error 1.1)
    rng = np.random.default_rng(5)
    n = 30
    a = 3 * np.eye(n) + np.tril(rng.normal(size=(n, n)), -1) + 0.02 * np.triu(
        rng.normal(size=(n, n)), 1)
    m = np.linalg.inv(np.tril(a))
    b, c = rng.normal(size=n), rng.normal(size=n)
    budget = {"rtol": 1e-10, "restart": 4, "maxiter": 3}
    assert np.abs(m - m.T).max() > 1
    # the case tells M^T from M: with M on A^T the same budget does not converge
    assert int(tg.linalg.gmres(a.T, c, M=m, **budget)[1]) == 3
    mt = tg.constant(m)
    for precond in (m, lambda v: tg.matmul(mt, v)):  # M^T: a transpose, or a reverse pass
        def loss(b):
            x, info = tg.linalg.gmres(a, b, M=precond, adjoint_on_failure="raise", **budget)
            return tg.sum(x * tg.constant(c)), info

        (value, info), g = _maybe_compiled(tg.value_and_grad(loss, has_aux=True),
                                           compiled)(tg.constant(b))
        assert int(info) == 0
        np.testing.assert_allclose(float(value), c @ np.linalg.solve(a, b), rtol=1e-10)
        dense = tg.grad(lambda b: tg.sum(tg.linalg.solve(tg.constant(a), b[:, None])[:, 0]
                                         * tg.constant(c)))(tg.constant(b))
        np.testing.assert_allclose(g.numpy(), dense.numpy(), rtol=1e-8)
        np.testing.assert_allclose(g.numpy(), np.linalg.solve(a.T, c), rtol=1e-8)


@pytest.mark.parametrize("solver", ["cg", "gmres"])
def test_a_real_b_with_a_complex_matrix_is_solved_in_complex(solver):
    # as SciPy's: x has the result dtype of A, M and b (it failed in a while_loop dtype check)
    rng = np.random.default_rng(4)
    q = rng.normal(size=(6, 6)) + 1j * rng.normal(size=(6, 6))
    a = q @ q.conj().T + 6 * np.eye(6)
    x, info = getattr(tg.linalg, solver)(a, B0, rtol=1e-12, M=np.diag(1 / np.diag(a)))
    assert int(info) == 0 and x.dtype == tg.complex128
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(a, B0), rtol=1e-10)
