"""tg.saved_model: a Module's tg.function methods exported as JAX exports with safetensors
Variables, loaded and run (values, gradients with respect to inputs and Variables, custom and
registered gradients, assigned Variables) in this process and in a fresh one that never imports
the code defining the model; signatures; checkpoints and optimizers on the loaded Variables;
and each error, with its message."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")
pytest.importorskip("safetensors")
pytest.importorskip("flatbuffers")  # jax.export's serialization

SRC = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))
RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 3))
Y = np.array([0, 1, 1, 0])


def _xp(x):
    return x.__array_namespace__() if hasattr(x, "__array_namespace__") else np


@tg.primitive("SavedModelTestScaledTanh")
def _scaled_tanh(x):  # an Array API forward, so it traces; its gradient is registered by name
    return 2.0 * _xp(x).tanh(x)


@tg.RegisterGradient("SavedModelTestScaledTanh")
def _scaled_tanh_grad(op, dy):
    (x,) = op.inputs
    return dy * 2.0 * (1.0 - tg.tanh(x) ** 2)


@tg.custom_gradient
def _half_gradient(x):  # forward: x; gradient: half of dy (not the derivative)
    return x, lambda dy: 0.5 * dy


@tg.primitive("SavedModelTestNumpySquare")
def _numpy_square(x):  # a NumPy forward: a host callback inside a compiled function
    return np.square(np.asarray(x))


class Net(tg.Module):
    def __init__(self, name=None):
        super().__init__(name=name)
        with self.name_scope:
            self.w = tg.Variable(np.linspace(-1.0, 1.0, 6).reshape(3, 2), name="w")
            self.b = tg.Variable(np.array([0.1, -0.2], np.float32), name="b")
            self.layers = [tg.Variable(np.array([1.0, 2.0]), name="scale")]
            self.count = tg.Variable(0.0, trainable=False, name="count")

    @tg.function(input_signature=[tg.TensorSpec((4, 3), tg.float64)])
    def __call__(self, x):
        self.count.assign_add(1.0)
        h = _scaled_tanh(_half_gradient(x) @ self.w)
        return h * self.layers[0] + tg.astype(self.b, tg.float64)

    @tg.function(input_signature=[tg.TensorSpec((4, 3), tg.float64),
                                  tg.TensorSpec((4,), tg.int64)])
    def loss(self, x, labels):
        logits = self(x)
        ce = tg.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return {"loss": tg.mean(ce), "logits": logits}

    @tg.function  # no input_signature: not exported
    def untyped(self, x):
        return x * 2.0


def _reference(net, x=X):
    """The original's loss, its gradients with respect to the trainable Variables and x."""
    x = tg.constant(x)
    with tg.GradientTape() as tape:
        tape.watch(x)
        out = net.loss(x, tg.constant(Y))
    return out, tape.gradient(out["loss"], [*net.trainable_variables, x])


def _loaded_values(loaded, x=X):
    x = tg.constant(x)
    with tg.GradientTape() as tape:
        tape.watch(x)
        out = loaded.loss(x, tg.constant(Y))
    return out, tape.gradient(out["loss"], [*loaded.trainable_variables, x])


@pytest.fixture
def exported(tmp_path):
    net = Net()
    tg.saved_model.save(net, tmp_path / "net")
    return net, tmp_path / "net"


# --- values and gradients ------------------------------------------------------------------
def test_loaded_function_gives_the_original_values_and_gradients(exported):
    net, path = exported
    loaded = tg.saved_model.load(path)
    (ref, ref_grads), (out, grads) = _reference(net), _loaded_values(loaded)
    np.testing.assert_allclose(out["loss"].numpy(), ref["loss"].numpy(), rtol=1e-13)
    np.testing.assert_allclose(out["logits"].numpy(), ref["logits"].numpy(), rtol=1e-13)
    assert out["loss"].dtype == tg.float64 and out["logits"].shape == (4, 2)
    assert len(grads) == 4
    for g, r in zip(grads, ref_grads):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-12, atol=1e-15)
    assert grads[0].dtype == tg.float32  # the float32 bias keeps its dtype


def test_custom_and_registered_gradients_are_exported(exported):
    # the gradient of sum(loaded(x)) with respect to x goes through _half_gradient (0.5 dy,
    # not dy) and the registered gradient of the scaled tanh: compare with the formula
    net, path = exported
    loaded = tg.saved_model.load(path)
    x = tg.constant(X)
    with tg.GradientTape() as tape:
        tape.watch(x)
        y = tg.sum(loaded(x))
    g = tape.gradient(y, x).numpy()
    w, scale = net.w.numpy(), net.layers[0].numpy()
    expected = 0.5 * ((2.0 * (1.0 - np.tanh(X @ w) ** 2) * scale) @ w.T)
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    assert not np.allclose(g, 2 * expected)  # the true derivative would be twice that


def test_loaded_variables_are_variables_with_the_original_names_values_and_order(exported):
    net, path = exported
    loaded = tg.saved_model.load(path)
    assert [v.name for v in loaded.variables] == [v.name for v in net.variables]
    assert [p for p, _ in loaded.named_variables()] == [p for p, _ in net.named_variables()]
    assert [v.name for v in loaded.trainable_variables] == ["net/b", "net/scale", "net/w"]
    assert [v.name for v in loaded.non_trainable_variables] == ["net/count"]
    for v, o in zip(loaded.variables, net.variables):
        assert isinstance(v, tg.Variable) and v.trainable == o.trainable
        assert v.dtype == o.dtype and v.shape == o.shape
        np.testing.assert_array_equal(v.numpy(), o.numpy())
    assert loaded.w is loaded.variables[3] and loaded.layers[0] is loaded.variables[2]
    assert loaded.name == "net" and isinstance(loaded, tg.Module)


def test_assigned_variables_are_written_back(exported):
    _, path = exported
    loaded = tg.saved_model.load(path)
    loaded(tg.constant(X))
    loaded.loss(tg.constant(X), tg.constant(Y))
    assert float(loaded.count.numpy()) == 2.0


def test_loaded_variables_train_and_change_what_the_functions_compute(exported):
    _, path = exported
    loaded = tg.saved_model.load(path)
    opt = tg.optimizers.SGD(0.5)
    losses = []
    for _ in range(3):
        out, grads = _loaded_values(loaded)
        losses.append(float(out["loss"].numpy()))
        opt.apply_gradients(zip(grads[:3], loaded.trainable_variables))
    assert losses[2] < losses[1] < losses[0]
    loaded.w.assign(np.zeros((3, 2)))  # the functions read the Variables, not constants
    logits = loaded(tg.constant(X)).numpy()
    np.testing.assert_allclose(logits, np.broadcast_to(loaded.b.numpy(), (4, 2)), rtol=1e-7)


def test_a_checkpoint_of_the_original_restores_into_the_loaded_object(exported, tmp_path):
    net, path = exported
    net.w.assign(net.w * 3.0)
    saved = tg.train.Checkpoint(model=net).save(str(tmp_path / "ckpt"))
    loaded = tg.saved_model.load(path)
    tg.train.Checkpoint(model=loaded).restore(saved).assert_consumed()
    np.testing.assert_array_equal(loaded.w.numpy(), net.w.numpy())


def test_loaded_function_inside_tg_function_and_under_tg_grad(exported):
    net, path = exported
    loaded = tg.saved_model.load(path)

    @tg.function
    def step(x):
        with tg.GradientTape() as tape:
            loss = loaded.loss(x, tg.constant(Y))["loss"]
        return loss, tape.gradient(loss, loaded.w)

    loss, gw = step(tg.constant(X))
    (ref, ref_grads) = _reference(net)
    np.testing.assert_allclose(loss.numpy(), ref["loss"].numpy(), rtol=1e-13)
    np.testing.assert_allclose(gw.numpy(), ref_grads[2].numpy(), rtol=1e-12)
    gx = tg.grad(lambda x: tg.sum(loaded(x)))(tg.constant(X))
    ref_gx = tg.grad(lambda x: tg.sum(net(x)))(tg.constant(X))
    np.testing.assert_allclose(gx.numpy(), ref_gx.numpy(), rtol=1e-12)


def test_float32_and_complex128_variables_round_trip(tmp_path):
    class Mixed(tg.Module):
        def __init__(self):
            super().__init__()
            self.z = tg.Variable(np.array([1 + 2j, -0.5j]), name="z")
            self.s = tg.Variable(np.float32(2.0), name="s")
            self.table = {"a key": tg.Variable(np.arange(3, dtype=np.int32), trainable=False,
                                               name="table")}

        @tg.function(input_signature=[tg.TensorSpec((2,), tg.complex128)])
        def f(self, x):
            return tg.real(tg.sum(x * self.z)) * tg.astype(self.s, tg.float64)

    m = Mixed()
    tg.saved_model.save(m, tmp_path / "mixed")
    loaded = tg.saved_model.load(tmp_path / "mixed")
    assert loaded.z.dtype == tg.complex128 and loaded.s.dtype == tg.float32
    np.testing.assert_array_equal(loaded.z.numpy(), m.z.numpy())
    np.testing.assert_array_equal(loaded.table["a key"].numpy(), [0, 1, 2])
    x = tg.constant(np.array([0.5 - 1j, 2 + 0.25j]))
    np.testing.assert_allclose(loaded.f(x).numpy(), m.f(x).numpy(), rtol=1e-14)
    with tg.GradientTape() as tape:
        y = loaded.f(x)
    gz = tape.gradient(y, loaded.z).numpy()
    with tg.GradientTape() as tape:
        y = m.f(x)
    np.testing.assert_allclose(gz, tape.gradient(y, m.z).numpy(), rtol=1e-14)


# --- the fresh process -----------------------------------------------------------------------
MODEL_SOURCE = '''
import numpy as np
import tapegrad as tg


@tg.primitive("FreshProcessCube")
def cube(x):
    xp = x.__array_namespace__() if hasattr(x, "__array_namespace__") else np
    return xp.multiply(xp.multiply(x, x), x)


@tg.RegisterGradient("FreshProcessCube")
def _cube_grad(op, dy):  # a surrogate gradient, 10 x (not 3 x^2): tells which one ran
    (x,) = op.inputs
    return dy * 10.0 * x


class Model(tg.Module):
    def __init__(self):
        super().__init__()
        self.dense = tg.Module(name="dense")
        self.dense.kernel = tg.Variable(np.linspace(-1.0, 1.0, 6).reshape(3, 2), name="kernel")

    @tg.function(input_signature=[tg.TensorSpec((5, 3), tg.float64)])
    def predict(self, x):
        return tg.sum(cube(x @ self.dense.kernel), axis=1)
'''

SAVE = '''
import numpy as np, tapegrad as tg
from fresh_model import Model
m = Model()
x = tg.constant(np.arange(15.0).reshape(5, 3) / 10)
tg.saved_model.save(m, "export")
with tg.GradientTape() as tape:
    tape.watch(x)
    y = tg.sum(m.predict(x))
gk, gx = tape.gradient(y, [m.dense.kernel, x])
np.savez("reference.npz", x=x.numpy(), y=m.predict(x).numpy(), gk=gk.numpy(), gx=gx.numpy())
'''

LOAD = '''
import sys
import numpy as np, tapegrad as tg
ref = np.load("reference.npz")
loaded = tg.saved_model.load("export")
x = tg.constant(ref["x"])
with tg.GradientTape() as tape:
    tape.watch(x)
    y = loaded.predict(x)
    total = tg.sum(y)
gk, gx = tape.gradient(total, [loaded.dense.kernel, x])
assert "fresh_model" not in sys.modules, "the model's module was imported"
assert "FreshProcessCube" not in tg.registered_ops(), "the op type is registered"
np.testing.assert_allclose(y.numpy(), ref["y"], rtol=1e-14)
np.testing.assert_allclose(gk.numpy(), ref["gk"], rtol=1e-13)
np.testing.assert_allclose(gx.numpy(), ref["gx"], rtol=1e-13)
print("loaded", [v.name for v in loaded.trainable_variables], float(total.numpy()))
'''


def _run(code, cwd):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTHONSAFEPATH", None)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_an_export_loads_and_runs_in_a_fresh_process_without_the_model_code(tmp_path):
    (tmp_path / "fresh_model.py").write_text(MODEL_SOURCE)
    saved = _run(SAVE, tmp_path)
    assert saved.returncode == 0, saved.stderr[-3000:]
    (tmp_path / "fresh_model.py").unlink()  # the code that defined the model is gone
    loaded = _run(LOAD, tmp_path)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.startswith("loaded ['kernel'] ")
    ref = np.load(tmp_path / "reference.npz")
    x, k = ref["x"], np.linspace(-1.0, 1.0, 6).reshape(3, 2)
    np.testing.assert_allclose(ref["gx"], (10.0 * (x @ k)) @ k.T, rtol=1e-13)  # the surrogate


# --- signatures --------------------------------------------------------------------------------
def test_signatures_default_to_the_methods_with_an_input_signature(exported):
    _, path = exported
    loaded = tg.saved_model.load(path)
    assert sorted(loaded.signatures) == ["__call__", "loss"]
    assert loaded.signatures["loss"] is loaded.loss
    assert not hasattr(loaded, "untyped")
    meta = json.loads((path / "tapegrad_saved_model.json").read_text())
    assert meta["format"] == "tapegrad-saved-model" and meta["version"] == 1
    assert meta["functions"]["loss"]["inputs"] == [
        {"shape": [4, 3], "dtype": "float64", "name": None},
        {"shape": [4], "dtype": "int64", "name": None}]
    assert meta["functions"]["loss"]["assigns"] == ["count"]
    assert meta["functions"]["loss"]["variables"] == ["b", "count", "layers/0", "w"]
    assert sorted(os.listdir(path / "functions")) == ["__call__.jaxexport", "loss.jaxexport"]


def test_signatures_given_as_a_function_or_a_dict(tmp_path):
    net = Net()

    @tg.function(input_signature=[tg.TensorSpec((2, 3), tg.float64)])
    def project(x):  # not a method: reads the Variable net holds
        return x @ net.w

    tg.saved_model.save(net, tmp_path / "one", signatures=project)
    loaded = tg.saved_model.load(tmp_path / "one")
    assert sorted(loaded.signatures) == ["serving_default"]
    x = np.ones((2, 3))
    np.testing.assert_allclose(loaded.signatures["serving_default"](x).numpy(), x @ net.w.numpy())
    loaded.w.assign(np.ones((3, 2)))
    np.testing.assert_allclose(loaded.signatures["serving_default"](x).numpy(), np.full((2, 2), 3.))

    tg.saved_model.save(net, tmp_path / "two", signatures={"logits": net.__call__, "p": project})
    loaded = tg.saved_model.load(tmp_path / "two")
    assert sorted(loaded.signatures) == ["logits", "p"]
    assert loaded.signatures["logits"] is loaded.__call__  # a method is exported once
    assert sorted(os.listdir(tmp_path / "two" / "functions")) == [
        "__call__.jaxexport", "loss.jaxexport", "signature_p.jaxexport"]


def test_keyword_arguments_by_the_original_parameter_names(exported):
    net, path = exported
    loaded = tg.saved_model.load(path)
    out = loaded.loss(labels=Y, x=X)  # arrays are taken as they are
    np.testing.assert_allclose(out["loss"].numpy(), _reference(net)[0]["loss"].numpy(),
                               rtol=1e-13)


def test_saving_again_replaces_the_export(exported):
    net, path = exported
    net.w.assign(np.zeros((3, 2)))
    tg.saved_model.save(net, path)
    np.testing.assert_array_equal(tg.saved_model.load(path).w.numpy(), np.zeros((3, 2)))
    assert sorted(os.listdir(path.parent)) == ["net"]  # no staging directory left


def test_second_order_with_vjp_order_2(tmp_path):
    net = Net()
    tg.saved_model.save(net, tmp_path / "n2", options=tg.saved_model.SaveOptions(vjp_order=2))
    loaded = tg.saved_model.load(tmp_path / "n2")

    def hvp(model):
        x, v = tg.constant(X), tg.constant(np.ones_like(X))
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = model.loss(x, tg.constant(Y))["loss"]
            g = inner.gradient(y, x)
            gv = tg.sum(g * v)
        return outer.gradient(gv, x).numpy()

    np.testing.assert_allclose(hvp(loaded), hvp(net), rtol=1e-11, atol=1e-14)


# --- errors --------------------------------------------------------------------------------
def test_loading_a_directory_that_is_not_an_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="no directory .*missing"):
        tg.saved_model.load(tmp_path / "missing")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hello")
    with pytest.raises(tg.errors.SavedModelError,
                       match=r"'.*other' is not a tapegrad export: it has no "
                             r"tapegrad_saved_model.json\. Load a directory written by"):
        tg.saved_model.load(tmp_path / "other")
    (tmp_path / "other" / "saved_model.pb").write_bytes(b"\x08\x01")
    with pytest.raises(tg.errors.SavedModelError, match="a TensorFlow SavedModel"):
        tg.saved_model.load(tmp_path / "other")
    (tmp_path / "other" / "tapegrad_saved_model.json").write_text('{"format": "something"}')
    with pytest.raises(tg.errors.SavedModelError, match="does not say format"):
        tg.saved_model.load(tmp_path / "other")


def test_loading_another_version_or_a_damaged_export(exported):
    _, path = exported
    meta_path = path / "tapegrad_saved_model.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(dict(meta, version=99)))
    with pytest.raises(tg.errors.SavedModelError, match="format version 99, which this"):
        tg.saved_model.load(path)
    meta_path.write_text(json.dumps(meta))
    (path / "functions" / "loss.jaxexport").write_bytes(b"not an export")
    with pytest.raises(tg.errors.SavedModelError,
                       match=r"functions/loss.jaxexport is not a JAX export"):
        tg.saved_model.load(path)
    (path / "functions" / "loss.jaxexport").unlink()
    with pytest.raises(tg.errors.SavedModelError, match="the function 'loss'.*incomplete"):
        tg.saved_model.load(path)
    (path / "variables.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(tg.errors.SavedModelError, match="variables.safetensors is missing or "
                                                        "damaged"):
        tg.saved_model.load(path)


def test_calling_with_a_wrong_signature(exported):
    _, path = exported
    loaded = tg.saved_model.load(path)
    with pytest.raises(TypeError, match=r"the loaded function 'loss': argument 0 \('x'\) has "
                                        r"shape \(5, 3\) and dtype "
                                        r"float64, which does not fit its input_signature "
                                        r"TensorSpec\(shape=\(4, 3\), dtype=float64"):
        loaded.loss(np.ones((5, 3)), Y)
    with pytest.raises(TypeError, match=r"argument 1 \('labels'\) has shape \(4,\) and dtype "
                                        r"float64.*TensorSpec\(shape=\(4,\), dtype=int64"):
        loaded.loss(X, np.zeros(4))
    with pytest.raises(TypeError, match=r"'loss': its input_signature has 2 TensorSpec\(s\) .* "
                                        r"but the call passes 1 argument"):
        loaded.loss(X)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'y'; its parameters are "
                                        r"\['x', 'labels'\]"):
        loaded.loss(X, y=Y)


def test_forward_mode_and_orders_beyond_the_export_say_so(exported):
    _, path = exported
    loaded = tg.saved_model.load(path)
    x = tg.constant(X)
    with pytest.raises(TypeError, match="reverse-mode derivatives only"):
        tg.jvp(lambda x: loaded(x), (x,), (tg.ones_like(x),))
    with pytest.raises(ValueError, match=r"derivatives up to order 1 \(SaveOptions\(vjp_order=1\)"
                                         r"\); derivative order 2 needs"):
        with tg.GradientTape() as outer:
            outer.watch(x)
            with tg.GradientTape() as inner:
                inner.watch(x)
                y = tg.sum(loaded(x) ** 2)
            g = tg.sum(inner.gradient(y, x))
        outer.gradient(g, x)


def test_exporting_a_numpy_forward_names_the_op(tmp_path):
    class UsesNumpy(tg.Module):
        def __init__(self):
            super().__init__()
            self.w = tg.Variable(np.ones(3), name="w")

        @tg.function(input_signature=[tg.TensorSpec((3,), tg.float64)])
        def f(self, x):
            return tg.sum(_numpy_square(x * self.w))

    m = UsesNumpy()
    np.testing.assert_allclose(m.f(tg.constant([1.0, 2.0, 3.0])).numpy(), 14.0)  # it compiles
    with pytest.raises(ValueError, match=r"UsesNumpy.f cannot be exported: op type\(s\) "
                                         r"'SavedModelTestNumpySquare', whose forward is NumPy"
                                         r".*host callback"):
        tg.saved_model.save(m, tmp_path / "np")
    assert not (tmp_path / "np").exists()


def test_save_errors_name_the_cause(tmp_path):
    class NoSignature(tg.Module):
        @tg.function
        def f(self, x):
            return x

    with pytest.raises(ValueError, match="nothing to export: NoSignature has no tg.function "
                                         "method with an input_signature or traced by a call"):
        tg.saved_model.save(NoSignature(), tmp_path / "a")
    net = Net()
    with pytest.raises(ValueError, match=r"signatures\['serving_default'\] \(untyped\) has no "
                                         "input_signature and was never called"):
        tg.saved_model.save(net, tmp_path / "a", signatures=net.untyped)
    with pytest.raises(TypeError, match=r"signatures\['f'\] is a function, not a tg.function"):
        tg.saved_model.save(net, tmp_path / "a", signatures={"f": lambda x: x})
    with pytest.raises(ValueError, match="a signature name must be a non-empty string of "
                                         r"letters.*got 'a/b'"):
        tg.saved_model.save(net, tmp_path / "a", signatures={"a/b": net.loss})
    with pytest.raises(ValueError, match="is a method of another object"):
        tg.saved_model.save(net, tmp_path / "a", signatures=Net(name="other").loss)

    outside = tg.Variable(np.ones(3), name="outside")

    class ReadsOutside(tg.Module):
        @tg.function(input_signature=[tg.TensorSpec((3,), tg.float64)])
        def f(self, x):
            return x * outside

    with pytest.raises(ValueError, match="ReadsOutside.f reads the Variable 'outside' "
                                         r"\(shape \(3,\)\), which the exported object does "
                                         "not hold"):
        tg.saved_model.save(ReadsOutside(), tmp_path / "a")

    class Lazy(tg.Module):
        def __init__(self):
            super().__init__()
            self.w = None

        @tg.function(input_signature=[tg.TensorSpec((3,), tg.float64)])
        def f(self, x):
            if self.w is None:
                self.w = tg.Variable(np.ones(3), name="lazy_w")
            return x * self.w

    with pytest.raises(ValueError, match=r"Lazy.f created Variables \('lazy_w'\) while it was "
                                         "traced for export.*Call the function once"):
        tg.saved_model.save(Lazy(), tmp_path / "a")

    class Polymorphic(tg.Module):
        @tg.function(input_signature=[tg.TensorSpec((None, 3), tg.float64)])
        def f(self, x):
            return x

    with pytest.raises(ValueError, match=r"input_signature\[0\] is TensorSpec\(shape=\(None, "
                                         r"3\).*with a None dimension.*give every size"):
        tg.saved_model.save(Polymorphic(), tmp_path / "a")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "data.csv").write_text("1,2")
    with pytest.raises(ValueError, match="'.*busy' is a directory that is neither empty nor a "
                                         "tapegrad export"):
        tg.saved_model.save(net, tmp_path / "busy")
    with pytest.raises(ValueError, match=r"vjp_order must be an int >= 0"):
        tg.saved_model.SaveOptions(vjp_order=-1)
    assert sorted(os.listdir(tmp_path)) == ["busy"]  # nothing written by a refused save


def test_tensorflow_names(tmp_path):
    import tapegrad.compat.tensorflow as tf

    net = Net()
    tf.saved_model.save(net, str(tmp_path / "tf"))
    loaded = tf.saved_model.load(str(tmp_path / "tf"))
    np.testing.assert_allclose(loaded(X).numpy(), net(tg.constant(X)).numpy(), rtol=1e-14)


def test_an_export_for_several_platforms_runs_here(tmp_path):
    net = Net()
    options = tg.saved_model.SaveOptions(platforms=("cpu", "cuda"))
    tg.saved_model.save(net, tmp_path / "multi", options=options)
    meta = json.loads((tmp_path / "multi" / "tapegrad_saved_model.json").read_text())
    assert meta["functions"]["loss"]["platforms"] == ["cpu", "cuda"]
    loaded = tg.saved_model.load(tmp_path / "multi")
    np.testing.assert_allclose(loaded.loss(X, Y)["loss"].numpy(),
                               _reference(net)[0]["loss"].numpy(), rtol=1e-13)
    with pytest.raises(TypeError, match=r"platforms must be JAX platform names .*got \(1,\)"):
        tg.saved_model.SaveOptions(platforms=[1])


def test_exporting_with_check_numerics_on_says_to_turn_it_off(tmp_path):
    tg.debugging.enable_check_numerics()
    try:
        with pytest.raises(ValueError, match=r"Net.__call__ cannot be exported: a host callback "
                                             r"\(a NumPy forward, tg.numpy_function, or the "
                                             r"checks of tg.debugging.enable_check_numerics\).*"
                                             r"disable_check_numerics\(\) before saving"):
            tg.saved_model.save(Net(), tmp_path / "checked")
    finally:
        tg.debugging.disable_check_numerics()
    tg.saved_model.save(Net(), tmp_path / "checked")  # then it exports


def test_without_jax_or_flatbuffers_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "flatbuffers", None)  # import flatbuffers raises
    with pytest.raises(ImportError, match=r"JAX serializes with flatbuffers, which is not "
                                          r"installed: install JAX with: pip install "
                                          r"\"tapegrad\[jit\]\""):
        tg.saved_model.save(Net(), tmp_path / "x")
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(ImportError, match="JAX is not installed"):
        tg.saved_model.load(tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_experimental_custom_gradients_true_keeps_the_custom_rule(tmp_path):
    import tapegrad.compat.tensorflow as tf

    @tf.custom_gradient
    def clip_gradients(y):
        def backward(dy):
            return tf.clip_by_norm(dy, 0.5)
        return y, backward

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec(())])  # TF's guide: TensorSpec(None)
        def call_custom_grad(self, x):
            return clip_gradients(x)

    class AnyRank(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec(None)])
        def f(self, x):
            return x

    with pytest.raises(ValueError, match=r"input_signature\[0\] is TensorSpec\(shape=None.*"
                                         r"None dimension \(or rank\)"):
        tf.saved_model.save(AnyRank(), str(tmp_path / "any"))
    tf.saved_model.save(Model(), str(tmp_path / "m"),
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        out = loaded.call_custom_grad(v * v)
    assert float(out) == 4.0
    assert float(t.gradient(out, v)) == 2.0  # d(v*v)/dv = 4 times the clipped 0.5 (TF's guide)
    with pytest.raises(ValueError, match="experimental_custom_gradients=False is not supported"):
        tf.saved_model.SaveOptions(experimental_custom_gradients=False)
