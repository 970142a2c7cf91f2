"""tg.distribute.MirroredStrategy: data-parallel compiled steps on JAX's sharding.

The first script checks the global-batch program (``per_replica=False``, XLA's partitioner);
the second (``_PER_REPLICA``) TensorFlow's per-replica ``run`` (the default, ``jax.shard_map``).
The multi-device checks run in a fresh interpreter started with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (JAX reads the flag when it starts), once
per module: the script trains the same model on 4 devices and on 1, checks the features inside
a distributed step and prints its findings as JSON, which the tests below assert. The error
messages are checked in this process (one device suffices). Without JAX every test skips.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")
_REPLICATED = str(jax.sharding.PartitionSpec())
_SPLIT = str(jax.sharding.PartitionSpec("batch"))

_SCRIPT = r'''
import json, re, tempfile
import numpy as np
import jax
import tapegrad as tg
from tapegrad.distribute import MirroredStrategy
from tapegrad._variables import device_array

assert len(jax.devices()) == 4, jax.devices()
found = {}


@tg.custom_gradient
def scaled_tanh(x):
    y = tg.tanh(x)
    def grad(dy):
        return dy * (1.0 - y * y)
    return y, grad


@tg.primitive("DistThresholdRelu")          # a NumPy forward: a host callback when compiled
def threshold_relu(x, threshold):
    if isinstance(x, np.ndarray):  # not the first try on a tracer, which fails
        seen.append(np.shape(x))
    return np.where(x > threshold, x, 0.0).astype(x.dtype)


@tg.RegisterGradient("DistThresholdRelu")
def _threshold_relu_grad(op, dy):
    x, threshold = op.inputs
    return tg.where(x > threshold, dy, tg.zeros_like(dy)), None


seen = []
found["vmap"] = hasattr(tg, "vmap")  # not on this branch yet: tg.map_fn (a compiled scan)


def batched(f, h):
    return tg.vmap(f)(h) if hasattr(tg, "vmap") else tg.map_fn(f, h)


def make(strategy, dtype, features):
    rng = np.random.default_rng(0)
    with strategy.scope():
        w = tg.Variable(rng.normal(size=(5, 3)), dtype=dtype, name="w")
        b = tg.Variable(np.zeros(3), dtype=dtype, name="b")
        opt = tg.optimizers.Adam(0.01)

    @tg.function
    def step(x, y):
        with tg.GradientTape() as tape:
            h = x @ w + b
            if features:
                h = scaled_tanh(h)                                   # custom gradient
                h = threshold_relu(h, -0.5)                          # host callback
                c = tg.cond(tg.sum(h) > 0, lambda h=h: h * 1.5, lambda h=h: h)  # control flow
                m = batched(lambda r: r * tg.sum(r), c)              # tg.vmap or map_fn
                _, h = tg.lax.scan(lambda a, r: (a + r, r * 0.5 + a), tg.zeros_like(m[0]), m)
            per_example = tg.sum((h - y) ** 2, axis=1)
            loss = tg.mean(per_example)
        g = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(g, [w, b]))
        return loss, per_example
    return w, b, opt, step


def data(dtype, steps, batch, rows_last=None):
    rng = np.random.default_rng(1)
    out = [(rng.normal(size=(batch, 5)).astype(dtype), rng.normal(size=(batch, 3)).astype(dtype))
           for _ in range(steps)]
    if rows_last is not None:
        out[-1] = tuple(a[:rows_last] for a in out[-1])
    return out


def train(devices, dtype, features=False, steps=20, batch=8, rows_last=None):
    strategy = MirroredStrategy(devices=list(range(devices)), per_replica=False)  # GSPMD
    w, b, opt, step = make(strategy, dtype, features)
    losses = []
    for x, y in strategy.experimental_distribute_dataset(data(dtype, steps, batch, rows_last)):
        loss, per_example = strategy.run(step, args=(x, y))
        losses.append(float(strategy.reduce("SUM", loss, axis=None)))
    return dict(w=w, b=b, opt=opt, step=step, strategy=strategy, x=x, y=y, losses=losses,
                per_example=per_example)


def diff(a, b):
    return max(float(np.max(np.abs(a["w"].numpy() - b["w"].numpy()))),
               float(np.max(np.abs(a["b"].numpy() - b["b"].numpy()))),
               float(np.max(np.abs(np.subtract(a["losses"], b["losses"])))))


for name, dtype in (("float64", np.float64), ("float32", np.float32)):
    one, four = train(1, dtype), train(4, dtype)
    found[f"diff_{name}"] = diff(one, four)
    w0 = np.random.default_rng(0).normal(size=(5, 3))
    found[f"moved_{name}"] = float(np.max(np.abs(four["w"].numpy() - w0)))

# the compiled step: its collectives and host transfers
s, step, x, y = four["strategy"], four["step"], four["x"], four["y"]
text = s.experimental_compiled_text(step, (x, y))
found["all_reduces"] = len(re.findall(r"\ball-reduce(?:-start)?\(", text))
found["other_collectives"] = len(re.findall(
    r"\b(?:all-gather|all-to-all|collective-permute|reduce-scatter)(?:-start)?\(", text))
HOST = r"\b(?:send|recv|infeed|outfeed)\(|custom_call_target=\"xla_(?:python|ffi_python)"
found["host_transfers"] = len(re.findall(HOST, text))
with jax.transfer_guard("disallow"):   # data already on the devices: no transfer at all
    for _ in range(3):
        loss, per_example = s.run(step, args=(x, y))
    jax.block_until_ready(device_array(loss))

# replicated Variables, identical on every device; sharded inputs
w, opt = four["w"], four["opt"]
found["w_spec"] = str(device_array(w).sharding.spec)
found["x_spec"] = str(device_array(x).sharding.spec)
slots = [v for d in opt._slots.values() for v in d.values()]
found["slot_specs"] = sorted({str(device_array(v).sharding.spec) for v in slots})
parts = s.experimental_local_results(w)
found["replicas_identical"] = all(np.array_equal(parts[0], p) for p in parts)
found["n_parts"] = len(parts)
found["num_replicas"] = s.num_replicas_in_sync
found["x_local_rows"] = [int(p.shape[0]) for p in s.experimental_local_results(x)]

# donation: the step gives the replicated state's old buffers to its new values; a snapshot
# taken before a step (as a tape's record keeps one) still reads its value after it
program = next(iter(s._steps[step]._programs.values()))
found["donated"] = len(program.donated)
pointers = [sh.data.unsafe_buffer_pointer() for sh in device_array(w).addressable_shards]
snap = w._snapshot()
s.run(step, args=(x, y))  # w's array is held by snap: not donated
found["snapshot_changed"] = not np.array_equal(snap.numpy(), w.numpy())
s.run(step, args=(x, y))  # w.numpy() made a host copy (a view): w is donated again from here
pointers = [sh.data.unsafe_buffer_pointer() for sh in device_array(w).addressable_shards]
s.run(step, args=(x, y))  # donated: every device's new w is written into its old buffer
found["buffers_reused"] = pointers == [sh.data.unsafe_buffer_pointer()
                                       for sh in device_array(w).addressable_shards]

# reduce: a step's result is global; per-example values reduced along the batch axis
pe = four["per_example"]
found["reduce_sum_axis0"] = float(s.reduce("SUM", pe, axis=0).numpy())
found["reduce_mean_axis0"] = float(s.reduce(tg.distribute.ReduceOp.MEAN, pe, axis=0).numpy())
found["per_example_sum"] = float(np.sum(pe.numpy()))
found["loss_now"] = float(s.reduce("MEAN", loss))
found["loss_mean_check"] = float(np.mean(per_example.numpy()))

# features inside a step: 4 devices against 1
seen.clear()
one = train(1, np.float64, features=True, steps=5)
found["callback_shapes_one"] = sorted({str(tuple(sh)) for sh in seen})
seen.clear()
four = train(4, np.float64, features=True, steps=5)
found["diff_features"] = diff(one, four)
found["callback_shapes"] = sorted({str(tuple(sh)) for sh in seen})
text = four["strategy"].experimental_compiled_text(four["step"], (four["x"], four["y"]))
found["host_transfers_features"] = len(re.findall(HOST, text))  # the check sees callbacks

# an uneven last batch (8, 8, 6 rows on 4 devices: the last replicated)
one = train(1, np.float64, steps=3, batch=8, rows_last=6)
four = train(4, np.float64, steps=3, batch=8, rows_last=6)
found["diff_uneven"] = diff(one, four)
found["uneven_spec"] = str(device_array(four["x"]).sharding.spec)

# checkpoints: distributed -> one device -> distributed
with tempfile.TemporaryDirectory() as tmp:
    four = train(4, np.float64, steps=3)
    path = tg.train.Checkpoint(w=four["w"], b=four["b"], opt=four["opt"]).save(tmp + "/dist")
    single = train(1, np.float64, steps=1)
    tg.train.Checkpoint(w=single["w"], b=single["b"], opt=single["opt"]).restore(path)
    found["restored_into_one"] = bool(np.array_equal(single["w"].numpy(), four["w"].numpy())
                                      and int(single["opt"].iterations.numpy()) == 3)
    single["w"].assign(single["w"] * 2.0)
    path = tg.train.Checkpoint(w=single["w"], b=single["b"], opt=single["opt"]).save(tmp + "/one")
    back = train(4, np.float64, steps=1)
    tg.train.Checkpoint(w=back["w"], b=back["b"], opt=back["opt"]).restore(path)
    found["restored_into_four"] = bool(np.array_equal(back["w"].numpy(), single["w"].numpy()))
    # training goes on from the restored state, replicated again by the next step
    s = back["strategy"]
    for x, y in s.experimental_distribute_dataset(data(np.float64, 1, 8)):
        s.run(back["step"], args=(x, y))
    found["after_restore_spec"] = str(device_array(back["w"]).sharding.spec)
    found["after_restore_identical"] = all(
        np.array_equal(p, s.experimental_local_results(back["w"])[0])
        for p in s.experimental_local_results(back["w"]))

# TensorFlow device names -> jax.devices(platform)[index]
found["named_devices"] = [d.id for d in MirroredStrategy(devices=[
    "cpu:2", "/CPU:1", "/job:localhost/replica:0/task:0/device:CPU:3", "cpu"]).devices]

print("RESULT " + json.dumps(found))
import sys; print(found, file=sys.stderr)
'''


def _run_script(script):
    """Run ``script`` on 4 host devices (also where a GPU is present) in a subprocess; the
    JSON after its last ``RESULT `` line."""
    env = {k: v for k, v in os.environ.items() if k != "TAPEGRAD_ARRAY_BACKEND"}
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4")
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.fixture(scope="module")
def found():
    return _run_script(_SCRIPT)


def test_four_devices_give_one_devices_variables_float64(found):
    assert found["moved_float64"] > 1e-2  # training changed the weights
    assert found["diff_float64"] < 1e-10


def test_four_devices_give_one_devices_variables_float32(found):
    assert found["moved_float32"] > 1e-2
    assert found["diff_float32"] < 1e-5


def test_the_step_holds_one_all_reduce_and_no_host_transfer(found):
    assert found["all_reduces"] == 1
    assert found["other_collectives"] == 0
    assert found["host_transfers"] == 0


def test_variables_and_slots_replicated_inputs_sharded(found):
    assert found["num_replicas"] == 4 and found["n_parts"] == 4
    assert found["w_spec"] == _REPLICATED
    assert found["slot_specs"] == [_REPLICATED]
    assert found["x_spec"] == _SPLIT
    assert found["x_local_rows"] == [2, 2, 2, 2]
    assert found["replicas_identical"]


def test_the_step_donates_the_replicated_state(found):
    assert found["donated"] >= 2  # w, b, slots...
    assert found["buffers_reused"]
    assert found["snapshot_changed"]  # readable after the step, and the old value


def test_reduce(found):
    assert found["reduce_sum_axis0"] == pytest.approx(found["per_example_sum"], rel=1e-12)
    assert found["reduce_mean_axis0"] == pytest.approx(found["per_example_sum"] / 8, rel=1e-12)
    assert found["loss_now"] == pytest.approx(found["loss_mean_check"], rel=1e-12)


def test_custom_gradient_primitive_control_flow_vmap_in_a_step(found):
    assert found["diff_features"] < 1e-10
    # the NumPy forward ran as a host callback per shard: 2 of the 8 rows on each device
    assert found["callback_shapes"] == ["(2, 3)"]
    assert found["callback_shapes_one"] == ["(8, 3)"]
    assert found["host_transfers_features"] >= 1


def test_uneven_last_batch(found):
    assert found["uneven_spec"] == _REPLICATED  # 6 rows on 4 devices: replicated
    assert found["diff_uneven"] < 1e-10


def test_tensorflow_device_names(found):
    assert found["named_devices"] == [2, 1, 3, 0]


def test_checkpoints_across_device_counts(found):
    assert found["restored_into_one"]
    assert found["restored_into_four"]
    assert found["after_restore_spec"] == _REPLICATED
    assert found["after_restore_identical"]


# --- errors, in this process ------------------------------------------------------------------
def test_bad_devices():
    with pytest.raises(ValueError, match=r"index 99 \(entry 0\) is out of range.*"
                                         r"xla_force_host_platform_device_count"):
        tg.distribute.MirroredStrategy(devices=[99])
    with pytest.raises(ValueError, match="the device list is empty"):
        tg.distribute.MirroredStrategy(devices=[])
    with pytest.raises(ValueError, match="a device is listed twice"):
        tg.distribute.MirroredStrategy(devices=[0, 0])
    with pytest.raises(ValueError, match=r"entry 1, 'cpu:99': JAX has \d+ cpu device"):
        tg.distribute.MirroredStrategy(devices=["cpu:0", "cpu:99"])
    with pytest.raises(ValueError, match=r"entry 0, 'disk:0', is not a device name"):
        tg.distribute.MirroredStrategy(devices=["disk:0"])
    with pytest.raises(TypeError, match="entry 0 is a float; pass jax.Device objects, ints"):
        tg.distribute.MirroredStrategy(devices=[0.0])
    cpu0 = jax.devices("cpu")[0]
    for name in ("cpu:0", "/cpu:0", "CPU", "/job:localhost/replica:0/task:0/device:CPU:0"):
        assert tg.distribute.MirroredStrategy(devices=[name]).devices == (cpu0,)
    with pytest.raises(TypeError, match="expected None or a sequence"):
        tg.distribute.MirroredStrategy(devices="gpu:0")


def test_bad_run_reduce_and_batches():
    s = tg.distribute.MirroredStrategy()
    with pytest.raises(TypeError, match=r"run: fn must be callable"):
        s.run(3)
    with pytest.raises(TypeError, match=r"args must be a tuple or list.*args=\(x,\)"):
        s.run(lambda x: x, args=np.ones(2))
    with pytest.raises(ValueError, match="reduce_op must be 'SUM', 'MEAN'"):
        s.reduce("MAX", tg.constant([1.0]))
    with pytest.raises(ValueError, match=r"axis 2 is out of range for a value of shape \(3,\)"):
        s.reduce("SUM", tg.constant([1.0, 2.0, 3.0]), axis=2)
    with pytest.raises(ValueError, match=r"\['label'\] is a 0-d value.*first \(batch\) axis"):
        s.experimental_distribute_values({"image": np.ones((2, 3)), "label": np.float64(1.0)})
    with pytest.raises(TypeError, match="expected an iterable of batches, got int"):
        s.experimental_distribute_dataset(5)
    with pytest.raises(ValueError, match=r"no program of .* call strategy.run\(fn, args\) first"):
        s.experimental_compiled_text(lambda x: x, (np.ones(2),))


def test_scopes_do_not_nest():
    a, b = tg.distribute.MirroredStrategy(), tg.distribute.MirroredStrategy()
    with a.scope():
        assert tg.distribute.get_strategy() is a
        with pytest.raises(RuntimeError, match="the scope of another strategy"):
            with b.scope():
                pass
    assert not tg.distribute.has_strategy()


def test_one_device_step_in_process():
    s = tg.distribute.MirroredStrategy(devices=[0], per_replica=False)
    with s.scope():
        v = tg.Variable([1.0, 2.0])
    step = tg.function(lambda x: v.assign_add(tg.sum(x) * tg.ones_like(v)) * 1.0)
    for (x,) in s.experimental_distribute_dataset([(np.ones((2, 1)),), (np.ones((1, 1)),)]):
        s.run(step, args=(x,))
    np.testing.assert_array_equal(v.numpy(), [4.0, 5.0])
    assert s.num_replicas_in_sync == 1
    text = s.experimental_compiled_text(step, (x,))
    assert "HloModule" in text and "all-reduce" not in text  # one device: no collective
    assert s.reduce("SUM", tg.constant([[1.0, 2.0]]), axis=1).numpy().tolist() == [3.0]
    assert s.experimental_local_results(v)[0].tolist() == [4.0, 5.0]


@pytest.mark.parametrize("per_replica", [True, False])
def test_a_step_with_python_control_flow_on_tensors_is_converted_by_autograph(per_replica):
    # strategy.run traced the step's Python function itself, without AutoGraph: a Python
    # `if` on a tensor raised "needs the concrete value of a traced tensor"
    s = tg.distribute.MirroredStrategy(devices=[0], per_replica=per_replica)

    @tg.function
    def step(x):
        total = tg.sum(x)
        if total > 0:
            total = total * 10.0
        return total

    for x, want in ((np.ones((2, 1)), 20.0), (-np.ones((2, 1)), -2.0)):
        (x,) = next(iter(s.experimental_distribute_dataset([(x,)])))
        assert float(s.reduce("SUM", s.run(step, args=(x,)), axis=None)) == want


def test_without_jax_the_strategy_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # as if JAX were not installed
    with pytest.raises(ImportError, match=r'pip install "tapegrad\[jit\]"'):
        tg.distribute.MirroredStrategy()


# --- several processes: what one process can check ---------------------------------------------
def test_process_rows_gives_each_process_its_devices_rows():
    rows = tg.distribute.process_rows
    assert rows(8, [0, 0, 1, 1], 0) == slice(0, 4)
    assert rows(8, [0, 0, 1, 1], 1) == slice(4, 8)
    assert rows(12, [0, 1, 1, 2], 1) == slice(3, 9)  # uneven device counts per process
    assert rows(6, [0, 0, 0], 0) == slice(0, 6)  # one process: the whole batch
    batch = np.arange(16)
    parts = [batch[rows(16, [0, 0, 1, 1, 2, 2, 3, 3], p)] for p in range(4)]
    np.testing.assert_array_equal(np.concatenate(parts), batch)  # the shares tile the batch
    with pytest.raises(ValueError, match="a batch of 6 rows cannot be split evenly across 4"):
        rows(6, [0, 0, 1, 1], 0)
    with pytest.raises(ValueError, match=r"process 2 has no device in the mesh.*\[0, 0, 1, 1\]"):
        rows(8, [0, 0, 1, 1], 2)
    with pytest.raises(ValueError, match=r"devices of process 0 are not adjacent.*\[0, 1, 0, 1\]"):
        rows(8, [0, 1, 0, 1], 0)


def test_several_processes_feed_their_own_rows_to_make_array_from_process_local_data(monkeypatch):
    """One process posing as process 1 of 2 (one device each): the batch's second half and the
    global shape go to jax.make_array_from_process_local_data; the Tensor holds its result and
    the whole batch as its host value."""
    s = tg.distribute.MirroredStrategy(devices=[0], per_replica=False)
    calls = []

    def made(sharding, local, global_shape):
        calls.append((sharding, np.array(local), tuple(global_shape)))
        return jax.device_put(np.asarray(local), jax.devices()[0])

    monkeypatch.setattr(jax, "make_array_from_process_local_data", made)
    monkeypatch.setattr(s, "_process", 1)
    monkeypatch.setattr(s, "devices", (_Posing(0), _Posing(1)))
    batch = np.arange(8.0).reshape(4, 2)
    x, y = s.experimental_distribute_values((batch, np.arange(3.0)))  # y: 3 rows, uneven
    (sx, lx, gx), (sy, ly, gy) = calls
    assert sx is s._sharded and gx == (4, 2)
    np.testing.assert_array_equal(lx, batch[2:])
    assert sy is s._replicated and gy == (3,)
    np.testing.assert_array_equal(ly, np.arange(3.0))  # replicated: all of it
    np.testing.assert_array_equal(x.numpy(), batch)


class _Posing:
    """A device of process ``process_index`` (for the test above)."""

    def __init__(self, process_index):
        self.process_index = process_index


def test_one_process_puts_the_whole_batch_with_device_put():
    s = tg.distribute.MirroredStrategy(devices=[0])
    assert s._process is None  # jax.process_count() == 1: no per-process slicing
    (x,) = s.experimental_distribute_values((np.arange(6.0).reshape(3, 2),))
    a = tg._variables.device_array(x)
    assert a.sharding == s._sharded and a.shape == (3, 2)
    np.testing.assert_array_equal(np.asarray(a), np.arange(6.0).reshape(3, 2))


# --- per replica (the default): TensorFlow's strategy.run, on jax.shard_map ----------------------
_PER_REPLICA = r'''
import json
import re
import numpy as np
import jax
import tapegrad as tg

assert len(jax.devices()) == 4, jax.devices()
found = {}
s = tg.distribute.MirroredStrategy()
floats = lambda v: [np.asarray(t).tolist() for t in v.values]

# the report: each replica returns the sum of its share, reduced with MEAN. 8 rows 53.5..60.5
# on 4 replicas: shares (53.5, 54.5), (55.5, 56.5), ...; sums 108, 112, 116, 120
(x,) = s.experimental_distribute_values((np.arange(8.0) + 53.5,))
sums = s.run(tg.function(lambda x: tg.sum(x)), args=(x,))
found["sums"] = floats(sums)
found["mean"] = float(s.reduce(tg.distribute.ReduceOp.MEAN, sums))
found["sum"] = float(s.reduce("SUM", sums))
found["local_results"] = [float(t) for t in s.experimental_local_results(sums)]

# the same with TensorFlow's names
import tapegrad.compat.tensorflow as tf
ts = tf.distribute.MirroredStrategy()
tx = ts.experimental_distribute_dataset([np.arange(8.0, dtype=np.float32) + 53.5])
found["tf_mean"] = float(ts.reduce(tf.distribute.ReduceOp.MEAN,
                                   ts.run(tf.function(lambda x: tf.reduce_sum(x)),
                                          args=(next(iter(tx)),)), axis=None))
found["tf_loss"] = [float(v) for v in ts.run(
    lambda x: tf.nn.compute_average_loss(x)
    * tf.distribute.get_replica_context().num_replicas_in_sync,
    args=(next(iter(tx)),)).values]


def per_replica(x):
    ctx = tg.distribute.get_replica_context()
    return (ctx.all_reduce("SUM", tg.sum(x)), ctx.all_reduce("MEAN", {"s": tg.sum(x)}),
            ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync, x * 2.0)


total, mean, ids, n, doubled = s.run(per_replica, args=(x,))
found["all_reduce_sum"], found["all_reduce_mean"] = floats(total), floats(mean["s"])
found["ids"], found["n_in_fn"] = floats(ids), n
found["doubled"] = floats(doubled)
found["sum_axis0"] = float(s.reduce("SUM", doubled, axis=0))
found["mean_axis0"] = float(s.reduce("MEAN", doubled, axis=0))
found["mean_none"] = np.asarray(s.reduce("MEAN", doubled)).tolist()
found["sum_axis_neg1"] = float(s.reduce("SUM", doubled, axis=-1))
# a PerReplica argument: each replica gets its own value
found["passed_back"] = floats(s.run(lambda v: v + 1.0, args=(sums,)))
# a plain (not per-replica) argument goes to every replica whole
found["whole"] = floats(s.run(lambda x, c: tg.sum(x) * 0.0 + tg.sum(c), args=(x, np.ones(3))))

# the gradient of an all-sum is the all-sum of the gradients (TensorFlow's rule)
with s.scope():
    w = tg.Variable(2.0)


def grad_of_all_reduce(x):
    with tg.GradientTape() as tape:
        y = tg.distribute.get_replica_context().all_reduce("SUM", tg.sum(x) * w)
    return tape.gradient(y, w)


found["all_reduce_grad"] = floats(s.run(grad_of_all_reduce, args=(x,)))

# an uneven batch: 6 rows padded to 8 (zero rows on the last replica)
(u,) = s.experimental_distribute_values((np.arange(6.0) + 1.0,))
pe = s.run(lambda x: x * 1.0, args=(u,))
found["uneven_values"] = floats(pe)
found["uneven_sum0"] = float(s.reduce("SUM", pe, axis=0))
found["uneven_mean0"] = float(s.reduce("MEAN", pe, axis=0))
found["uneven_loss"] = float(s.reduce("SUM", s.run(lambda x: tg.nn.compute_average_loss(x),
                                                   args=(u,))))


# TensorFlow's custom training loop, on 4 replicas and on 1
def train(devices, dtype, rows_last=None, batch=8, steps=12):
    s = tg.distribute.MirroredStrategy(devices=list(range(devices)))
    rng = np.random.default_rng(0)
    with s.scope():
        w = tg.Variable(rng.normal(size=(5, 3)), dtype=dtype)
        b = tg.Variable(np.zeros(3), dtype=dtype)
        opt = tg.optimizers.Adam(0.01)

    @tg.function
    def step(x, y):
        with tg.GradientTape() as tape:
            per_example = tg.sum((tg.tanh(x @ w + b) - y) ** 2, axis=1)
            loss = tg.nn.compute_average_loss(per_example)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss

    rng = np.random.default_rng(1)
    data = [(rng.normal(size=(batch, 5)).astype(dtype), rng.normal(size=(batch, 3)).astype(dtype))
            for _ in range(steps)]
    if rows_last is not None:
        data[-1] = tuple(a[:rows_last] for a in data[-1])
    losses = []
    for batch in s.experimental_distribute_dataset(data):
        losses.append(float(s.reduce("SUM", s.run(step, args=batch))))
    w0 = np.random.default_rng(0).normal(size=(5, 3))
    return dict(w=w.numpy(), b=b.numpy(), losses=np.array(losses), s=s, step=step, batch=batch,
                moved=float(np.max(np.abs(w.numpy() - w0))),
                replicas_equal=all(np.array_equal(p, s.experimental_local_results(w)[0])
                                   for p in s.experimental_local_results(w)))


def diff(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in ("w", "b", "losses"))


for name, dtype in (("float64", np.float64), ("float32", np.float32)):
    one, four = train(1, dtype), train(4, dtype)
    found[f"train_{name}"] = diff(one, four)
    found[f"moved_{name}"] = four["moved"]
    found[f"replicas_equal_{name}"] = four["replicas_equal"]
    found[f"train_uneven_{name}"] = diff(train(1, dtype, rows_last=6),
                                         train(4, dtype, rows_last=6))

# the compiled per-replica step: its collectives (the gradients' sum; XLA may combine them)
text = four["s"].experimental_compiled_text(four["step"], four["batch"])
found["pr_all_reduces"] = len(re.findall(r"\ball-reduce(?:-start)?\(", text))
found["pr_other_collectives"] = len(re.findall(
    r"\b(?:all-gather|all-to-all|collective-permute|reduce-scatter)(?:-start)?\(", text))

# custom gradients, a NumPy forward (a host callback, called by each device with its rows),
# tg.cond, map_fn and lax.scan inside a replica function (each treating rows independently)
@tg.custom_gradient
def scaled_tanh(x):
    y = tg.tanh(x)
    return y, lambda dy: dy * (1.0 - y * y)


seen = []


@tg.primitive("PerReplicaThresholdRelu")
def threshold_relu(x, threshold):
    if isinstance(x, np.ndarray):
        seen.append(str(np.shape(x)) + str(x.dtype))
    return np.where(x > threshold, x, 0.0).astype(x.dtype)


@tg.RegisterGradient("PerReplicaThresholdRelu")
def _threshold_relu_grad(op, dy):
    x, threshold = op.inputs
    return tg.where(x > threshold, dy, tg.zeros_like(dy)), None


def train_features(devices, steps=4):
    s = tg.distribute.MirroredStrategy(devices=list(range(devices)))
    with s.scope():
        w = tg.Variable(np.random.default_rng(0).normal(size=(5, 3)))
        opt = tg.optimizers.Adam(0.01)

    @tg.function
    def step(x, y):
        with tg.GradientTape() as tape:
            h = threshold_relu(scaled_tanh(x @ w), -0.5)
            c = tg.cond(tg.sum(w) > 0, lambda h=h: h * 1.5, lambda h=h: h)
            m = tg.permute_dims(tg.map_fn(lambda r: r * tg.sum(r), c), (1, 0))
            _, h = tg.lax.scan(lambda a, r: (a + r, r * 0.5 + a), tg.zeros_like(m[0]), m)
            per_example = tg.sum((tg.permute_dims(h, (1, 0)) - y) ** 2, axis=1)
            loss = tg.nn.compute_average_loss(per_example)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    rng = np.random.default_rng(1)
    data = [(rng.normal(size=(8, 5)), rng.normal(size=(8, 3))) for _ in range(steps)]
    for batch in s.experimental_distribute_dataset(data):
        s.run(step, args=batch)
    return w.numpy()


one = train_features(1)
seen.clear()
four = train_features(4)
found["features_diff"] = float(np.max(np.abs(one - four)))
found["features_moved"] = float(np.max(np.abs(four - np.random.default_rng(0).normal(size=(5, 3)))))
found["callback_shapes"] = sorted(set(seen))

# errors that need several replicas
try:
    s.reduce("SUM", tg.constant(1.0))
except ValueError as e:
    found["plain_sum_error"] = str(e)
found["plain_mean"] = float(s.reduce("MEAN", tg.constant(3.0)))
found["plain_sum_axis0"] = float(s.reduce("SUM", tg.constant([1.0, 2.0]), axis=0))


# an embedding's gradient is an IndexedSlices; in a replica function SGD sums it across
# the replicas (dense), as TensorFlow all-gathers the rows
def train_embedding(devices, steps=3):
    s = tg.distribute.MirroredStrategy(devices=list(range(devices)))
    with s.scope():
        table = tg.Variable(np.random.default_rng(2).normal(size=(10, 3)))
        opt = tg.optimizers.SGD(0.1)

    @tg.function
    def step(ids):
        with tg.GradientTape() as tape:
            e = tg.nn.embedding_lookup(table, ids)
            loss = tg.nn.compute_average_loss(tg.sum(e * e, axis=1))
        g = tape.gradient(loss, table)
        opt.apply_gradients([(g, table)])
        return loss

    rng = np.random.default_rng(3)
    for ids in s.experimental_distribute_dataset([rng.integers(0, 10, size=8)
                                                  for _ in range(steps)]):
        s.run(step, args=(ids,))
    return table.numpy()


found["embedding"] = float(np.max(np.abs(train_embedding(1) - train_embedding(4))))
found["embedding_moved"] = float(np.max(np.abs(
    train_embedding(4) - np.random.default_rng(2).normal(size=(10, 3)))))
print("RESULT " + json.dumps(found))
'''


@pytest.fixture(scope="module")
def per_replica():
    return _run_script(_PER_REPLICA)


def test_each_replica_sum_reduced_with_mean_is_tensorflows_114(per_replica):
    """The report: MEAN of the 4 replicas' sums is 114 (TensorFlow), not the global 456."""
    assert per_replica["sums"] == [108.0, 112.0, 116.0, 120.0]
    assert per_replica["local_results"] == [108.0, 112.0, 116.0, 120.0]
    assert per_replica["mean"] == 114.0
    assert per_replica["sum"] == 456.0
    assert per_replica["tf_mean"] == 114.0  # tapegrad.compat.tensorflow's names
    # compute_average_loss divides each replica's sum by the global batch, 8
    assert per_replica["tf_loss"] == [108.0 / 8 * 4, 112.0 / 8 * 4, 116.0 / 8 * 4, 120.0 / 8 * 4]


def test_an_embeddings_indexed_slices_gradient_is_summed_across_replicas(per_replica):
    assert per_replica["embedding"] < 1e-12
    assert per_replica["embedding_moved"] > 1e-3


def test_reduce_per_replica_values_along_an_axis(per_replica):
    assert per_replica["doubled"] == [[107.0, 109.0], [111.0, 113.0], [115.0, 117.0],
                                      [119.0, 121.0]]
    assert per_replica["sum_axis0"] == 912.0  # every element of every replica
    assert per_replica["mean_axis0"] == 114.0  # / 8, the global count
    assert per_replica["sum_axis_neg1"] == 912.0
    assert per_replica["mean_none"] == [113.0, 115.0]  # the replicas averaged elementwise
    assert per_replica["passed_back"] == [109.0, 113.0, 117.0, 121.0]
    assert per_replica["whole"] == [3.0, 3.0, 3.0, 3.0]


def test_replica_context_in_the_replica_function(per_replica):
    assert per_replica["all_reduce_sum"] == [456.0] * 4
    assert per_replica["all_reduce_mean"] == [114.0] * 4
    assert per_replica["ids"] == [0, 1, 2, 3]
    assert per_replica["n_in_fn"] == 4
    # y = all_sum(w * sum(x_r)) on each replica; TF's rule: the cotangent of w * sum(x_r) is
    # all_sum(dy) = 4, so replica r's gradient is 4 * sum(x_r) = 4 * (108, 112, 116, 120)
    assert per_replica["all_reduce_grad"] == [432.0, 448.0, 464.0, 480.0]


def test_uneven_batch_is_padded_and_left_out_of_reductions(per_replica):
    # 6 rows on 4 replicas: padded to 8 with zero rows, which the last replica holds
    assert per_replica["uneven_values"] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], []]
    assert per_replica["uneven_sum0"] == 21.0
    assert per_replica["uneven_mean0"] == 3.5  # 21 / 6
    assert per_replica["uneven_loss"] == 3.5  # compute_average_loss: padding left out, / 6


def test_the_per_replica_step_sums_gradients_with_all_reduce_only(per_replica):
    assert 1 <= per_replica["pr_all_reduces"] <= 2  # w's and b's (combined or not)
    assert per_replica["pr_other_collectives"] == 0


def test_training_per_replica_gives_one_devices_variables(per_replica):
    assert per_replica["moved_float64"] > 1e-2 and per_replica["moved_float32"] > 1e-2
    assert per_replica["train_float64"] < 1e-12
    assert per_replica["train_float32"] < 1e-6
    assert per_replica["train_uneven_float64"] < 1e-12
    assert per_replica["train_uneven_float32"] < 2e-6
    assert per_replica["replicas_equal_float64"] and per_replica["replicas_equal_float32"]


def test_custom_gradient_host_callback_control_flow_in_a_replica_function(per_replica):
    assert per_replica["features_moved"] > 1e-2
    assert per_replica["features_diff"] < 1e-12
    # each device called the NumPy forward with its 2 rows, in float64 (64-bit crossing)
    assert per_replica["callback_shapes"] == ["(2, 3)float64"]


def test_reduce_of_a_value_that_is_not_per_replica(per_replica):
    assert "cannot be summed across replicas" in per_replica["plain_sum_error"]
    assert per_replica["plain_mean"] == 3.0
    assert per_replica["plain_sum_axis0"] == 12.0  # as TF: each of 4 replicas sums it


def test_per_replica_errors_in_process():
    s = tg.distribute.MirroredStrategy(devices=[0])
    with pytest.raises(TypeError, match=r"per_replica=...\): expected True or False"):
        tg.distribute.MirroredStrategy(per_replica="yes")
    kept = []

    def keep(x):
        kept.append(tg.distribute.get_replica_context())
        return x * 1.0

    s.run(keep, args=(np.ones(2),))
    with pytest.raises(RuntimeError, match=r"all_reduce: this replica context belongs to a "
                                           r"replica function that has returned"):
        kept[0].all_reduce("SUM", tg.constant(1.0))
    with pytest.raises(ValueError, match="reduce_op must be 'SUM', 'MEAN'"):
        s.run(lambda x: tg.distribute.get_replica_context().all_reduce("MAX", x),
              args=(np.ones(2),))
    with s.scope():
        v = tg.Variable(0.0)
        assert tg.distribute.get_replica_context() is None  # cross-replica context, as TF
    (x,) = s.experimental_distribute_values((np.ones(4),))
    with pytest.raises(ValueError, match=r"assigned Variable .* a value that may differ across "
                                         r"replicas.*all_reduce"):
        s.run(lambda x: v.assign(tg.sum(x)), args=(x,))
    with pytest.raises(ValueError, match="per_example_loss is 0-d"):
        tg.nn.compute_average_loss(tg.constant(1.0))


def test_default_replica_context_and_compute_average_loss_outside_a_strategy():
    ctx = tg.distribute.get_replica_context()
    assert ctx.num_replicas_in_sync == 1 and int(ctx.replica_id_in_sync_group) == 0
    assert ctx.all_reduce("SUM", 3.0) == 3.0
    loss = tg.nn.compute_average_loss(tg.constant([1.0, 2.0, 6.0]))
    assert float(loss) == 3.0
    assert float(tg.nn.compute_average_loss(tg.constant([1.0, 2.0, 6.0]),
                                            sample_weight=[1.0, 1.0, 0.5],
                                            global_batch_size=4)) == 1.5


def test_per_replica_step_reads_only_its_variables_and_assigns_all_reduced_values():
    stray = tg.Variable(np.zeros(777))  # another model's Variable: not an input of the step
    s = tg.distribute.MirroredStrategy(devices=[0])
    with s.scope():
        w = tg.Variable(1.0)

    def step(x):  # an all-reduced value is equal on every replica: it may be assigned
        ctx = tg.distribute.get_replica_context()
        return w.assign_add(ctx.all_reduce("SUM", tg.sum(x)))

    (x,) = s.experimental_distribute_values((np.arange(4.0),))
    out = s.run(step, args=(x,))
    assert float(w.numpy()) == 7.0 and [float(v) for v in out.values] == [7.0]
    assert "HloModule" in s.experimental_compiled_text(step, (x,))
    (function,) = s._steps.values()
    (program,) = function._programs.values()
    assert program.variables == [w]  # not stray (nor the random generator's state)
    assert stray.shape == (777,)


def test_per_replica_repr_is_tensorflows_layout():
    s = tg.distribute.MirroredStrategy(devices=["cpu:0"])
    out = s.run(lambda: tg.constant(2.5))
    assert repr(out) == "PerReplica:{\n  0: " + repr(out.values[0]) + "\n}"
    assert float(out.values[0]) == 2.5
