"""TensorFlow semantics that TF code depends on (issue 33): tf.function traces Variable
arguments by their spec, get_concrete_function, input_signature with None dimensions,
tg.saved_model.save of methods traced by calls; integers under compat.tensorflow; sliced and
scatter assignments of Variables, eagerly and inside tf.function."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.compat.tensorflow as tf

jax = pytest.importorskip("jax")


# --- tf.function: Variable arguments by spec ------------------------------------------------
def test_variables_of_one_spec_share_one_trace_and_each_is_assigned():
    @tg.function
    def f(v, x):
        v.assign_add(x)
        return tg.sum(v * 2.0)

    a, b = tg.Variable([1.0, 2.0]), tg.Variable([3.0, 4.0])
    assert float(f(a, tg.constant([1.0, 1.0]))) == 10.0
    assert float(f(b, tg.constant([1.0, 1.0]))) == 18.0
    assert f.experimental_get_tracing_count() == 1
    np.testing.assert_array_equal(a.numpy(), [2.0, 3.0])
    np.testing.assert_array_equal(b.numpy(), [4.0, 5.0])
    assert float(f(a, tg.constant([0.0, 0.0]))) == 10.0  # back to the first: same program
    assert f.experimental_get_tracing_count() == 1
    f(tg.Variable([1.0, 2.0, 3.0]), tg.ones(3))  # another shape: traced
    assert f.experimental_get_tracing_count() == 2
    with tg.GradientTape() as tape:  # gradients through a rebound program reach b
        y = f(b, tg.constant([0.0, 0.0]))
    np.testing.assert_array_equal(tape.gradient(y, b).numpy(), [2.0, 2.0])


def test_aliasing_and_identity_dependent_traces_are_traced_apart():
    @tg.function
    def g(u, w):
        u.assign(w * 2.0)
        return u + w  # reads u after the write: f(a, a) differs from f(a, b)

    a, b = tg.Variable([1.0, 2.0]), tg.Variable([3.0, 4.0])
    np.testing.assert_array_equal(g(a, b).numpy(), [9.0, 12.0])
    np.testing.assert_array_equal(g(a, a).numpy(), [24.0, 32.0])  # a = 2 [6, 8]: traced apart
    assert g.experimental_get_tracing_count() == 2
    c = tg.Variable(0.0)

    @tg.function
    def count(v):  # assigns a Variable that is no argument: traced per Variable
        c.assign_add(1.0)
        return v * 1.0

    count(tg.Variable(1.0)), count(tg.Variable(2.0))
    assert count.experimental_get_tracing_count() == 2 and float(c) == 2.0

    p, q = tg.Variable([1.0, 2.0]), tg.Variable([3.0, 4.0])

    @tg.function
    def reads(v):  # reads a closure Variable: called with that very Variable, traced again
        return v + p

    np.testing.assert_array_equal(reads(q).numpy(), [4.0, 6.0])
    np.testing.assert_array_equal(reads(p).numpy(), [2.0, 4.0])
    assert reads.experimental_get_tracing_count() == 2


# --- get_concrete_function, input_signature with None ------------------------------------------
def test_get_concrete_function_traces_once_without_running():
    v = tg.Variable(1.0)

    @tg.function
    def f(x, scale=2.0):
        v.assign_add(1.0)
        return {"y": x * scale, "n": tg.sum(x)}

    cf = f.get_concrete_function(tg.TensorSpec([3], tg.float64))
    assert f.experimental_get_tracing_count() == 1 and float(v) == 1.0  # traced, not run
    assert repr(cf.structured_input_signature) == repr(((tg.TensorSpec([3], tg.float64),), {}))
    outs = cf.structured_outputs
    assert (outs["y"].shape, outs["n"].shape, outs["y"].dtype) == ((3,), (), np.float64)
    out = cf(tg.constant([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(out["y"].numpy(), [2.0, 4.0, 6.0])
    assert float(out["n"]) == 6.0 and float(v) == 2.0
    assert f.experimental_get_tracing_count() == 1
    with pytest.raises(TypeError, match=r"f: argument leaf 0 of the concrete function is shape "
                       r"\(2,\) and dtype float64, which does not fit TensorSpec\(shape=\(3,\)"):
        cf(tg.constant([1.0, 2.0]))
    cf2 = f.get_concrete_function(tg.constant([1.0, 2.0]), 3.0)  # a Tensor: its spec
    np.testing.assert_array_equal(cf2(tg.constant([1.0, 1.0]), 3.0)["y"].numpy(), [3.0, 3.0])
    with pytest.raises(TypeError, match="argument leaf 1 of the concrete function is 4.0, "
                                        "which does not fit 3.0"):
        cf2(tg.constant([1.0, 1.0]), 4.0)


def test_get_concrete_function_of_a_method_that_creates_variables():
    class M(tg.Module):
        def __init__(self):
            super().__init__()
            self.w = None

        @tg.function
        def __call__(self, x):
            if self.w is None:
                self.w = tg.Variable(tg.ones((2,)) * 3.0)
            self.w.assign_add(x)
            return self.w * 1.0

    m = M()
    cf = m.__call__.get_concrete_function(tg.TensorSpec([2], tg.float64))
    np.testing.assert_array_equal(m.w.numpy(), [3.0, 3.0])  # created, the assignment undone
    assert cf.structured_outputs.shape == (2,)
    np.testing.assert_array_equal(cf(tg.ones(2)).numpy(), [4.0, 4.0])


def test_input_signature_with_none_dimensions_checks_rank_and_dtype():
    @tg.function(input_signature=[tg.TensorSpec([None, 2], tg.float64)])
    def g(x):
        return tg.sum(x, axis=0)

    np.testing.assert_array_equal(g(tg.ones((3, 2))).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(g(tg.ones((5, 2))).numpy(), [5.0, 5.0])
    assert g.experimental_get_tracing_count() == 2  # one per size under XLA (TF: one)
    with pytest.raises(TypeError, match=r"g: argument 0 has shape \(2,\) and dtype float64, "
                       r"which does not fit its input_signature TensorSpec\(shape=\(None, 2\), "
                       r"dtype=float64, name=None\) \(rank 1 where the spec has rank 2\)"):
        g(tg.ones(2))
    with pytest.raises(TypeError, match=r"argument 0 has shape \(3, 2\) and dtype float32"):
        g(tg.ones((3, 2), dtype=tg.float32))
    cf = g.get_concrete_function()  # the signature's: traced at its calls, per size
    with pytest.raises(ValueError, match="call it once before reading structured_outputs"):
        cf.structured_outputs
    np.testing.assert_array_equal(cf(tg.ones((4, 2))).numpy(), [4.0, 4.0])
    assert cf.structured_outputs.shape == (2,)


# --- saved_model of methods traced by calls ---------------------------------------------------
class _Scale(tg.Module):
    def __init__(self):
        super().__init__()
        self.w = tg.Variable(np.array([1.0, 2.0, 3.0]))

    @tg.function
    def __call__(self, x):
        return x * self.w

    @tg.function
    def twice(self, x):
        return 2.0 * x


def test_saved_model_exports_a_method_traced_by_one_call(tmp_path):
    pytest.importorskip("safetensors")
    pytest.importorskip("flatbuffers")
    m = _Scale()
    x = tg.constant(np.arange(6.0).reshape(2, 3))
    expected = m(x).numpy()
    tg.saved_model.save(m, tmp_path / "m")  # twice was never called: not exported
    loaded = tg.saved_model.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded(x).numpy(), expected)
    assert sorted(loaded.signatures) == ["__call__"] and not hasattr(loaded, "twice")
    m(tg.ones(3))  # a second traced signature: which one to store is ambiguous
    with pytest.raises(ValueError, match=r"_Scale.__call__ has no input_signature and was traced "
                       r"for 2 signatures \(.*\); an export stores one per function"):
        tg.saved_model.save(m, tmp_path / "m2")


# --- integers under compat.tensorflow -------------------------------------------------------
