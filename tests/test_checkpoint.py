"""tg.train: Checkpoint, CheckpointManager, latest_checkpoint."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _backend
from tapegrad.errors import CheckpointError

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from safetensors import SafetensorError  # noqa: E402

_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"


class Dense:
    def __init__(self, rng, n_in, n_out):
        self.kernel = tg.Variable(rng.normal(size=(n_in, n_out)).astype(np.float32))
        self.bias = tg.Variable(np.zeros(n_out, np.float32))

    def __call__(self, x):
        return tg.tanh(x @ self.kernel + self.bias)


class Encoder:
    def __init__(self, rng):
        self.dense_1 = Dense(rng, 4, 8)
        self.dense_2 = Dense(rng, 8, 8)


class Model:
    """A small model of Variables: nested objects, a list, a dict."""

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.encoder = Encoder(rng)
        self.heads = [Dense(rng, 8, 2)]
        self.extra = {"scale": tg.Variable(np.float32(1.5))}
        self.activation = lambda x: x  # functions are not walked
        self.steps = tg.Variable(np.int64(0), trainable=False)

    def __call__(self, x):
        h = self.encoder.dense_2(self.encoder.dense_1(x))
        return self.heads[0](h) * self.extra["scale"]

    @property
    def trainable(self):
        e = self.encoder
        return [e.dense_1.kernel, e.dense_1.bias, e.dense_2.kernel, e.dense_2.bias,
                self.heads[0].kernel, self.heads[0].bias, self.extra["scale"]]


DATA = np.random.default_rng(1).normal(size=(10, 16, 4)).astype(np.float32)


def train(model, opt, steps):
    for x in steps:
        with tg.GradientTape() as tape:
            loss = tg.mean(model(tg.constant(x)) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable), model.trainable))
        model.steps.assign_add(1)


def values(variables):
    return [v.numpy().copy() for v in variables]


def schedule(step):  # reads iterations: resuming must restore it
    return 0.05 / (1.0 + step)


def test_names_are_paths_of_attributes_lists_dicts_and_slots(tmp_path):
    model, opt = Model(0), tg.optimizers.Adam(0.01)
    train(model, opt, DATA[:1])
    path = tg.train.Checkpoint(model=model, optimizer=opt).write(tmp_path / "c")
    index = json.loads((tmp_path / "c.index.json").read_text())
    names = [r["name"] for r in index["tensors"]]
    for name in ["model/steps", "optimizer/iterations", "optimizer/_learning_rate", "save_counter",
                 "model/encoder/dense_1/kernel", "model/encoder/dense_2/bias",
                 "model/heads/0/kernel", "model/extra/scale",
                 "optimizer/slots/model/encoder/dense_1/kernel/momentum",
                 "optimizer/slots/model/extra/scale/velocity"]:
        assert name in names
    # weights, steps, iterations, learning rate, counter, momentum and velocity of each weight
    assert len(names) == 7 + 1 + 1 + 1 + 1 + 2 * 7
    # the data file is plain safetensors with the same names and values
    data = safetensors_numpy.load_file(str(tmp_path / index["data"]))
    np.testing.assert_array_equal(data["model/encoder/dense_1/kernel"],
                                  model.encoder.dense_1.kernel.numpy())
    assert data["optimizer/iterations"] == 1 and path == os.fspath(tmp_path / "c")
    slot = next(r for r in index["tensors"] if r["name"].endswith("dense_1/kernel/momentum"))
    assert slot["slot"] == {"optimizer": "optimizer",
                            "variable": "model/encoder/dense_1/kernel", "name": "momentum"}
    assert slot["shape"] == [4, 8] and slot["dtype"] == "float32"


def test_a_variable_reachable_twice_is_saved_once_under_its_shortest_path(tmp_path):
    w = tg.Variable([1.0, 2.0])
    holder = {"deep": {"deeper": [w]}}
    tg.train.Checkpoint(a=holder, b=w).write(tmp_path / "c")
    names = [r["name"] for r in json.loads((tmp_path / "c.index.json").read_text())["tensors"]]
    assert sorted(names) == ["b", "save_counter"]


@pytest.mark.parametrize("optimizer", ["adam", "sgd_momentum"])
@pytest.mark.parametrize("fresh_optimizer", [True, False])
def test_resumed_training_continues_the_exact_trajectory(tmp_path, optimizer, fresh_optimizer):
    def make(seed):
        opt = (tg.optimizers.Adam(schedule) if optimizer == "adam"
               else tg.optimizers.SGD(schedule, momentum=0.9))
        return Model(seed), opt

    model, opt = make(0)
    train(model, opt, DATA)
    expected = values(model.trainable) + [model.steps.numpy().copy()]

    model, opt = make(0)
    train(model, opt, DATA[:4])
    path = tg.train.Checkpoint(model=model, optimizer=opt).save(tmp_path / "ckpt")
    del model, opt
    # a fresh process would build different objects: other initial values, and an optimizer
    # that has not run (its slots are created by restore) or has run elsewhere
    model, opt = make(7)
    if not fresh_optimizer:
        train(model, opt, DATA[:2])
    tg.train.Checkpoint(model=model, optimizer=opt).restore(path)
    assert int(opt.iterations) == 4 and int(model.steps) == 4
    train(model, opt, DATA[4:])
    got = values(model.trainable) + [model.steps.numpy().copy()]
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)  # bitwise


def test_save_numbers_checkpoints_and_latest_checkpoint_finds_the_last(tmp_path):
    w = tg.Variable([1.0, 2.0])
    ckpt = tg.train.Checkpoint(w=w)
    assert tg.train.latest_checkpoint(tmp_path) is None
    p1 = ckpt.save(tmp_path / "ckpt")
    w.assign([3.0, 4.0])
    p2 = ckpt.save(tmp_path / "ckpt")
    assert (os.path.basename(p1), os.path.basename(p2)) == ("ckpt-1", "ckpt-2")
    assert tg.train.latest_checkpoint(tmp_path) == p2 and int(ckpt.save_counter) == 2
    status = ckpt.restore(p1)
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
    # TensorFlow's status methods run and chain (a strict restore matched everything)
    assert status.expect_partial().assert_consumed().assert_existing_objects_matched() is status
    assert status.path == p1 and status.run_restore_ops() is status
    assert int(ckpt.save_counter) == 1  # restored, as TensorFlow does: numbering continues
    assert os.path.basename(ckpt.save(tmp_path / "ckpt")) == "ckpt-2"
    assert ckpt.w is w  # root objects are attributes
    w.assign([5.0, 6.0])
    nothing = ckpt.restore(None)  # a no-op: restore(manager.latest_checkpoint) with none yet
    np.testing.assert_array_equal(w.numpy(), [5.0, 6.0])
    assert nothing.expect_partial() is nothing
    with pytest.raises(AssertionError, match=r"no checkpoint was restored \(Checkpoint"):
        nothing.assert_consumed()


def test_dtypes_and_scalars_round_trip(tmp_path):
    made = {"f64": np.arange(6.0).reshape(2, 3),
            "i32": np.array([1, -7], np.int32), "u8": np.array([255, 0], np.uint8),
            "b": np.array([True, False]), "scalar": np.float32(3.25),
            "c": np.array([1 + 2j], np.complex64), "empty": np.zeros((0, 3))}
    vs = {k: tg.Variable(v) for k, v in made.items()}
    tg.train.Checkpoint(**vs).write(tmp_path / "c")
    for k, v in vs.items():
        v.assign(np.zeros(v.shape, v.dtype))
    tg.train.Checkpoint(**vs).restore(tmp_path / "c")
    for k, v in vs.items():
        assert v.dtype == np.asarray(made[k]).dtype and v.shape == np.shape(made[k])
        np.testing.assert_array_equal(v.numpy(), made[k])


def test_a_mismatch_lists_every_name_and_restores_nothing(tmp_path):
    w, b, extra = tg.Variable(np.ones((2, 3))), tg.Variable(np.ones(3)), tg.Variable(1.0)
    opt = tg.optimizers.Adam(0.1)
    opt.apply_gradients([(tg.ones_like(w), w)])
    tg.train.Checkpoint(model={"w": w, "b": b, "extra": extra}, optimizer=opt).write(
        tmp_path / "c")
    w2, b2, new = tg.Variable(np.zeros((3, 2))), tg.Variable(np.zeros(3, np.float32)), \
        tg.Variable(0.0)
    opt2 = tg.optimizers.Adam(0.1)
    with pytest.raises(CheckpointError, match=r"(?s)nothing was restored.*"
                       r"shape or dtype mismatch \(4\): model/b: checkpoint \(3,\) float64, "
                       r"object \(3,\) float32; model/w: checkpoint \(2, 3\) float64, object "
                       r"\(3, 2\) float64; optimizer/slots/model/w/momentum"):
        tg.train.Checkpoint(model={"w": w2, "b": b2, "new": new}, optimizer=opt2).restore(
            tmp_path / "c")
    assert not np.any(w2.numpy()) and not np.any(b2.numpy()) and int(opt2.iterations) == 0
    assert opt2._slots == {}  # the slots made to check them are removed again


def test_existing_slots_missing_in_the_checkpoint_are_left_and_reported(tmp_path):
    w = tg.Variable([1.0])
    opt = tg.optimizers.Adam(0.1)
    tg.train.Checkpoint(w=w, optimizer=opt).write(tmp_path / "c")  # before the first step
    opt.apply_gradients([(tg.constant([1.0]), w)])
    m = opt._slots[w._id]["momentum"].numpy().copy()
    status = tg.train.Checkpoint(w=w, optimizer=opt).restore(tmp_path / "c").expect_partial()
    assert int(opt.iterations) == 0 and w.numpy()[0] == 1.0  # what the checkpoint has
    np.testing.assert_array_equal(opt._slots[w._id]["momentum"].numpy(), m)  # kept
    assert status.unrestored == ["optimizer/slots/w/momentum", "optimizer/slots/w/velocity"]
    with pytest.raises(AssertionError, match=r"Variables of the objects that the checkpoint "
                       r"lacks \(2\): optimizer/slots/w/momentum, optimizer/slots/w/velocity; "
                       r"call expect_partial\(\)"):
        status.assert_existing_objects_matched()


def _model_and_optimizer_checkpoint(tmp_path):
    model = Model(0)
    opt = tg.optimizers.Adam(0.01)
    train(model, opt, DATA[:2])
    ckpt = tg.train.Checkpoint(model=model, optimizer=opt, other=[tg.Variable(7.0)])
    manager = tg.train.CheckpointManager(ckpt, tmp_path, max_to_keep=1)
    manager.save()
    path = manager.save()
    assert manager.checkpoints == [path] and tg.train.latest_checkpoint(tmp_path) == path
    return model, opt, path


def test_a_partial_restore_takes_the_model_out_of_a_checkpoint_with_the_optimizer(tmp_path):
    model, opt, path = _model_and_optimizer_checkpoint(tmp_path)
    fresh = Model(5)
    status = tg.train.Checkpoint(model=fresh).restore(path).expect_partial()
    for a, b in zip(values(model.trainable), values(fresh.trainable)):
        np.testing.assert_array_equal(a, b)
    assert int(fresh.steps) == 2
    assert status.unrestored == [] and "other/0" in status.unused
    assert {"optimizer/iterations", "optimizer/slots/model/encoder/dense_1/kernel/momentum",
            "optimizer/slots/model/heads/0/bias/velocity"} <= set(status.unused)
    assert len(status.unused) == 17  # 7 Variables x 2 slots, iterations, learning rate, other/0
    assert status.assert_existing_objects_matched() is status
    assert status.assert_nontrivial_match() is status
    with pytest.raises(AssertionError, match=r"values of the checkpoint that no object has "
                       r"\(17\): optimizer/_learning_rate, optimizer/iterations, .*other/0; call "
                       r"expect_partial"):
        status.assert_consumed()


def test_a_partial_restore_warns_at_deletion_unless_expect_partial(tmp_path, recwarn):
    model, opt, path = _model_and_optimizer_checkpoint(tmp_path)
    w = tg.Variable(np.zeros((4, 8), np.float32))
    ckpt = tg.train.Checkpoint(model={"encoder": {"dense_1": {"kernel": w}}},
                               mine=tg.Variable(3.0))
    with pytest.warns(UserWarning, match=r"(?s)was partial:\n  values of the checkpoint that "
                      r"no object has \(\d+\): model/encoder/dense_1/bias, .*\n  Variables of "
                      r"the objects that the checkpoint lacks \(not restored, 1\): mine\n  "
                      r"call .expect_partial\(\)"):
        ckpt.restore(path)  # the status, unused, is deleted here
    np.testing.assert_array_equal(w.numpy(), model.encoder.dense_1.kernel.numpy())
    assert float(ckpt.mine) == 3.0  # not in the checkpoint: kept
    recwarn.clear()
    ckpt.restore(path).expect_partial()
    status = tg.train.Checkpoint(model=model, optimizer=opt).restore(path)  # only 'other' unused
    status.expect_partial()
    del status
    assert not [r for r in recwarn if "partial" in str(r.message)]
    with pytest.raises(AssertionError, match="no Variable of the objects is in the checkpoint"):
        tg.train.Checkpoint(x=tg.Variable(1.0)).restore(path).expect_partial() \
            .assert_nontrivial_match()


def test_checkpoints_of_lists_and_dicts_of_variables_and_nested_modules(tmp_path):
    class Block(tg.Module):
        def __init__(self, n):
            super().__init__()
            self.w = tg.Variable(np.arange(n, dtype=np.float64))

    v1, v2, v3 = tg.Variable([1.0, 2.0]), tg.Variable(np.int32(3)), tg.Variable([[4.0]])
    blocks = [Block(2), Block(3)]
    opt = tg.optimizers.SGD(0.1, momentum=0.9)
    opt.apply_gradients([(tg.ones_like(b.w), b.w) for b in blocks])
    saved = [b.w.numpy().copy() for b in blocks]
    ckpt = tg.train.Checkpoint(vs=[v1, v2], d={"a": v3, "blocks": blocks}, opt=opt)
    path = ckpt.write(tmp_path / "c")
    names = [r["name"] for r in json.loads((tmp_path / "c.index.json").read_text())["tensors"]]
    assert {"vs/0", "vs/1", "d/a", "d/blocks/0/w", "d/blocks/1/w",
            "opt/slots/d/blocks/0/w/momentum"} <= set(names)
    for v in (v1, v2, v3, *[b.w for b in blocks]):
        v.assign(tg.zeros_like(v))
    opt._slots[blocks[0].w._id]["momentum"].assign([0.0, 0.0])
    ckpt.restore(path).assert_consumed()
    np.testing.assert_array_equal(v1.numpy(), [1.0, 2.0])
    assert int(v2) == 3 and v2.dtype == np.int32 and float(v3.numpy()[0, 0]) == 4.0
    for b, s in zip(blocks, saved):
        np.testing.assert_array_equal(b.w.numpy(), s)
    np.testing.assert_allclose(opt._slots[blocks[0].w._id]["momentum"].numpy(), [-0.1, -0.1])


def test_slots_of_a_variable_outside_the_checkpoint_are_refused(tmp_path):
    w = tg.Variable([1.0])
    opt = tg.optimizers.Adam(0.1)
    opt.apply_gradients([(tg.constant([1.0]), w)])
    with pytest.raises(ValueError, match="has slots \\(momentum, velocity\\) for a Variable that none of "
                                         "the checkpoint's objects holds; add"):
        tg.train.Checkpoint(optimizer=opt).write(tmp_path / "c")


def _saved(tmp_path):
    w = tg.Variable(np.arange(1000.0))
    ckpt = tg.train.Checkpoint(w=w)
    path = ckpt.write(tmp_path / "c")
    data = tmp_path / json.loads((tmp_path / "c.index.json").read_text())["data"]
    w.assign(np.zeros(1000))
    return ckpt, w, path, data


def test_a_corrupted_data_file_is_refused_and_nothing_restored(tmp_path):
    ckpt, w, path, data = _saved(tmp_path)
    raw = bytearray(data.read_bytes())
    raw[-100] ^= 0xFF  # one flipped byte in the arrays (the header stays valid)
    data.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"the data of w in .* does not match the index "
                                              r"\(shape, dtype or CRC-32 checksum\): the file "
                                              r"is corrupted; nothing was restored"):
        ckpt.restore(path)
    assert not np.any(w.numpy())


def test_a_truncated_data_file_is_refused(tmp_path):
    ckpt, w, path, data = _saved(tmp_path)
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(CheckpointError, match=r"is truncated or damaged \(safetensors: .*\); "
                                              "nothing was restored"):
        ckpt.restore(path)
    assert not np.any(w.numpy())


def test_a_damaged_index_or_missing_files_are_refused(tmp_path):
    ckpt, w, path, data = _saved(tmp_path)
    index = tmp_path / "c.index.json"
    text = index.read_text()
    index.write_text(text[:len(text) // 2])
    with pytest.raises(CheckpointError, match="is not valid JSON"):
        ckpt.restore(path)
    index.write_text(text.replace('"version": 1', '"version": 99'))
    with pytest.raises(CheckpointError, match="format version 99; this tapegrad reads version 1"):
        ckpt.restore(path)
    index.write_text(text)
    data.unlink()
    with pytest.raises(CheckpointError, match="its data file .* is missing"):
        ckpt.restore(path)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint there: .*nope.index.json"):
        ckpt.restore(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"a directory: pass tg.train.latest_checkpoint"):
        ckpt.restore(tmp_path)
    assert not np.any(w.numpy())


def _fail_mid_write(monkeypatch):
    """Make safetensors write half a file and then fail, as a full disk would."""
    real = safetensors_numpy.save_file

    def half(tensors, filename, metadata=None):
        real(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as f:
            f.truncate(os.path.getsize(filename) // 2)
        raise SafetensorError(_FULL)  # what safetensors 0.8 raised on a full tmpfs

    monkeypatch.setattr(safetensors_numpy, "save_file", half)


def test_a_failed_write_leaves_the_previous_checkpoint_at_that_path(tmp_path, monkeypatch):
    w = tg.Variable([1.0, 2.0])
    ckpt = tg.train.Checkpoint(w=w)
    ckpt.write(tmp_path / "c")
    before = sorted(os.listdir(tmp_path))
    w.assign([5.0, 6.0])
    _fail_mid_write(monkeypatch)
    with pytest.raises(OSError, match="No space left on device: saving the checkpoint "
                       f"'{tmp_path / 'c'}' failed") as error:
        ckpt.write(tmp_path / "c")
    assert error.value.errno == 28
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == before  # no temporary file left
    ckpt.restore(tmp_path / "c")
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])


def test_a_failure_at_the_index_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    w = tg.Variable([1.0, 2.0])
    ckpt = tg.train.Checkpoint(w=w)
    ckpt.write(tmp_path / "c")
    before = sorted(os.listdir(tmp_path))
    w.assign([5.0, 6.0])
    real = os.replace

    def crash_at_commit(src, dst):
        if str(dst).endswith(".index.json"):
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", crash_at_commit)
    with pytest.raises(OSError, match="Input/output error"):
        ckpt.write(tmp_path / "c")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == before
    ckpt.restore(tmp_path / "c")
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
    w.assign([5.0, 6.0])
    ckpt.write(tmp_path / "c")  # overwriting replaces the data file too
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".safetensors")]) == 1


def test_a_failed_manager_save_keeps_the_latest_and_the_counter(tmp_path, monkeypatch):
    w = tg.Variable([1.0])
    ckpt = tg.train.Checkpoint(w=w)
    manager = tg.train.CheckpointManager(ckpt, tmp_path, max_to_keep=2)
    first = manager.save()
    w.assign([2.0])
    _fail_mid_write(monkeypatch)
    with pytest.raises(OSError, match="No space left"):
        manager.save()
    monkeypatch.undo()
    assert manager.latest_checkpoint == first == tg.train.latest_checkpoint(tmp_path)
    assert int(ckpt.save_counter) == 1
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["checkpoint", "ckpt-1.index.json", os.path.basename(_data(first))])
    ckpt.restore(manager.latest_checkpoint)
    np.testing.assert_array_equal(w.numpy(), [1.0])


def _data(path):
    with open(path + ".index.json") as f:
        return os.path.join(os.path.dirname(path), json.load(f)["data"])


def test_manager_keeps_the_last_max_to_keep_and_a_new_manager_continues(tmp_path):
    w = tg.Variable([0.0])
    ckpt = tg.train.Checkpoint(w=w)
    manager = tg.train.CheckpointManager(ckpt, tmp_path / "run", max_to_keep=2)
    assert manager.latest_checkpoint is None and manager.checkpoints == []
    paths = []
    for k in range(3):
        w.assign([float(k)])
        paths.append(manager.save())
    assert [os.path.basename(p) for p in paths] == ["ckpt-1", "ckpt-2", "ckpt-3"]
    assert manager.checkpoints == paths[1:] and manager.latest_checkpoint == paths[2]
    assert not os.path.exists(paths[0] + ".index.json")
    assert len([n for n in os.listdir(tmp_path / "run") if n.endswith(".safetensors")]) == 2
    # a restarted job: new objects, new manager on the same directory
    w2 = tg.Variable([-1.0])
    ckpt2 = tg.train.Checkpoint(w=w2)
    manager2 = tg.train.CheckpointManager(ckpt2, tmp_path / "run", max_to_keep=2)
    assert manager2.checkpoints == paths[1:]
    ckpt2.restore(manager2.latest_checkpoint)
    assert float(w2.numpy()[0]) == 2.0 and int(ckpt2.save_counter) == 3
    assert os.path.basename(manager2.save()) == "ckpt-4"
    assert os.path.basename(manager2.save(checkpoint_number=100)) == "ckpt-100"
    assert [os.path.basename(p) for p in manager2.checkpoints] == ["ckpt-4", "ckpt-100"]
    assert tg.train.latest_checkpoint(tmp_path / "run") == manager2.latest_checkpoint


def test_manager_and_checkpoint_argument_errors():
    ckpt = tg.train.Checkpoint(w=tg.Variable(1.0))
    with pytest.raises(ValueError, match=r"max_to_keep must be an int >= 1 or None \(keep "
                                         r"all\), got 0"):
        tg.train.CheckpointManager(ckpt, "unused", max_to_keep=0)
    with pytest.raises(TypeError, match="expected a tg.train.Checkpoint, got dict; wrap"):
        tg.train.CheckpointManager({"w": 1}, "unused", max_to_keep=1)
    with pytest.raises(ValueError, match="'save_counter' is the name of the checkpoint's own"):
        tg.train.Checkpoint(save_counter=tg.Variable(1.0))
    with pytest.raises(AttributeError, match="no attribute 'model' \\(its objects: w\\)"):
        ckpt.model  # noqa: B018


def test_a_damaged_state_file_is_reported(tmp_path):
    (tmp_path / "checkpoint").write_text("{not json")
    with pytest.raises(CheckpointError, match="checkpoint state file .* is damaged"):
        tg.train.latest_checkpoint(tmp_path)


def test_variables_holding_jax_arrays_after_a_compiled_step_are_saved(tmp_path):
    jax = pytest.importorskip("jax")
    if _backend.default_namespace() is not np:
        pytest.skip("tg.function writes values back in the default backend's arrays")
    w = tg.Variable(np.array([1.0, -2.0], np.float32))
    opt = tg.optimizers.Adam(0.1)

    @tg.function
    def step():
        with tg.GradientTape() as tape:
            loss = tg.sum(w ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))

    step()
    step()
    assert w.device == jax.devices()[0]  # state on the device, no host copy made yet
    expected = w.numpy().copy()
    m = opt._slots[w._id]["momentum"].numpy().copy()
    path = tg.train.Checkpoint(w=w, opt=opt).write(tmp_path / "c")
    w2, opt2 = tg.Variable(np.zeros(2, np.float32)), tg.optimizers.Adam(0.1)
    tg.train.Checkpoint(w=w2, opt=opt2).restore(path)
    np.testing.assert_array_equal(w2.numpy(), expected)
    np.testing.assert_array_equal(opt2._slots[w2._id]["momentum"].numpy(), m)
    assert int(opt2.iterations) == 2
    tg.train.Checkpoint(w=w, opt=opt).restore(path)  # into the JAX-valued Variables too
    np.testing.assert_array_equal(w.numpy(), expected)


def test_complex128_variables_round_trip(tmp_path):
    made = np.array([[1 + 2j, -3.5j], [0.25, 1e-300 - 1e300j]])  # safetensors lacks complex128
    v = tg.Variable(made)
    tg.train.Checkpoint(v=v).write(tmp_path / "c")
    v.assign(np.zeros((2, 2), np.complex128))
    tg.train.Checkpoint(v=v).restore(tmp_path / "c")
    assert v.dtype == np.complex128
    np.testing.assert_array_equal(v.numpy(), made)


def test_a_read_only_directory_is_an_oserror_naming_the_checkpoint(tmp_path, monkeypatch):
    def read_only(tensors, filename, metadata=None):
        raise SafetensorError("Error while serializing: I/O error: Read-only file system "
                              "(os error 30)")

    monkeypatch.setattr(safetensors_numpy, "save_file", read_only)
    with pytest.raises(OSError, match=f"Read-only file system: saving the checkpoint "
                                      f"'{tmp_path / 'c'}' failed") as error:
        tg.train.Checkpoint(w=tg.Variable([1.0])).write(tmp_path / "c")
    assert error.value.errno == 30
    assert os.listdir(tmp_path) == []


def test_a_full_disk_is_an_oserror_naming_the_checkpoint(tmp_path):
    """A real full disk: a 1 MiB tmpfs (needs root and mount; skipped otherwise)."""
    import subprocess

    disk = tmp_path / "small"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                                            str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        w = tg.Variable(np.zeros(10_000))
        ckpt = tg.train.Checkpoint(w=w)
        ckpt.write(disk / "c")
        before = sorted(os.listdir(disk))
        w.assign(np.ones(10_000))
        big = tg.train.Checkpoint(w=w, more=tg.Variable(np.zeros(200_000)))
        with pytest.raises(OSError, match=f"No space left on device: saving the checkpoint "
                                          f"'{disk / 'c'}' failed"):
            big.write(disk / "c")
        assert sorted(os.listdir(disk)) == before
        ckpt.restore(disk / "c")
        np.testing.assert_array_equal(w.numpy(), np.zeros(10_000))
    finally:
        subprocess.run(["umount", str(disk)], check=True)


_SAVE_FOREVER = """
import sys
import numpy as np
import tapegrad as tg
ckpt = tg.train.Checkpoint(w=tg.Variable(np.ones(4_000_000)))
manager = tg.train.CheckpointManager(ckpt, sys.argv[1], max_to_keep=2)
print("ready", flush=True)
while True:
    manager.save()
"""


def test_a_manager_removes_what_killed_saves_left(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    rng = np.random.default_rng(0)
    leftovers = set()
    for _ in range(6):  # kill -9 a process saving 32 MB checkpoints at a random moment
        p = subprocess.Popen([sys.executable, "-c", _SAVE_FOREVER, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.05, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        leftovers |= {n for n in os.listdir(tmp_path) if ".tmp" in n}
    assert leftovers, "no kill landed inside a save: nothing was tested"
    manager = tg.train.CheckpointManager(tg.train.Checkpoint(w=tg.Variable(np.zeros(4_000_000))),
                                         tmp_path, max_to_keep=2)
    names = set(os.listdir(tmp_path))
    assert not {n for n in names if ".tmp" in n}
    # every index left names its data file, and nothing else is there; a kill between a
    # checkpoint's commit (its index) and the state file's update leaves a whole checkpoint
    # that the state file does not list, which is kept
    indexes = {n for n in names if n.endswith(".index.json")}
    assert {os.path.basename(p) + ".index.json" for p in manager.checkpoints} <= indexes
    indexed = {json.loads((tmp_path / n).read_text())["data"] for n in indexes}
    assert names == {"checkpoint"} | indexes | indexed
