"""``tg.distribute``: data-parallel compiled training on JAX's sharding (TensorFlow 2's names).

:class:`MirroredStrategy` keeps Variables replicated on every device of a one-axis
``jax.sharding.Mesh`` (axis ``"batch"``); batches from :meth:`~MirroredStrategy.
experimental_distribute_dataset` are split along their first axis
(``NamedSharding(mesh, P("batch"))``). A step runs in one of two ways:

* **Per replica** (the default, TensorFlow's semantics): :meth:`MirroredStrategy.run` runs the
  step once per replica on its share of the batch, as one ``tg.function`` program holding a
  ``jax.shard_map`` over the mesh, and returns :class:`PerReplica` values (one per replica),
  which :meth:`MirroredStrategy.reduce` combines as TensorFlow does (a step returning each
  replica's sum, reduced with ``MEAN``, gives the mean of the replicas' sums). Inside the
  step :func:`get_replica_context` gives a :class:`ReplicaContext` (``all_reduce``,
  ``replica_id_in_sync_group``); ``optimizer.apply_gradients`` sums the gradients across
  replicas (``jax.lax.psum``) and ``tg.nn.compute_average_loss`` divides by the global batch,
  so TensorFlow's custom training loop trains as on one device.
* **Global batch** (``MirroredStrategy(per_replica=False)``): the step is compiled once for
  the *global* batch and XLA's SPMD partitioner (GSPMD, through ``jax.jit``) splits it and
  inserts the all-reduce that sums the gradients; no partitioner is written here. A mean over
  the batch is the global mean, and the results are global values:
  :meth:`MirroredStrategy.reduce` with ``axis=None`` returns them as they are.

See ``docs/tensorflow_differences.md`` and ``docs/architecture.md`` ("Data parallelism").
"""
from __future__ import annotations

import contextlib
import enum
import re
import threading
import weakref

import numpy as np

from . import _backend, config
from ._function import (Function, _BoundFunction, _callback_mesh, _input, _jax, _leaf_key,
                        _variable_input)
from ._tensor import Tensor
from ._variables import (bind_variables, device_array, live_variables, on_device, set_on_device,
                         set_state, visible_variables)

__all__ = ["MirroredStrategy", "PerReplica", "ReduceOp", "ReplicaContext", "get_replica_context",
           "get_strategy", "has_strategy", "process_rows"]

_AXIS = "batch"
_state = threading.local()  # .strategy: the strategy whose scope is entered in this thread
_padded = {}  # id(Tensor) -> the real rows of an uneven batch padded by a per-replica strategy


class ReduceOp(enum.Enum):
    """How :meth:`MirroredStrategy.reduce` combines values (``tf.distribute.ReduceOp``)."""
    SUM = "SUM"
    MEAN = "MEAN"


def get_strategy():
    """The :class:`MirroredStrategy` whose ``scope()`` is entered in this thread, or None."""
    return getattr(_state, "strategy", None)


def has_strategy() -> bool:
    """Whether a strategy's ``scope()`` is entered in this thread."""
    return get_strategy() is not None


_DEVICE_NAME = re.compile(r"(?:.*/)?(?:device:)?([a-z_]+)(?::(\d+))?", re.I)
_PLATFORM = {"cpu": "cpu", "gpu": "gpu", "tpu": "tpu"}


def _python_step(fn):
    """The Python function a step ``fn`` (a ``tg.function``, a method of one, or a plain
    function) traces: a ``tg.function``'s after AutoGraph (unless ``autograph=False``)."""
    if isinstance(fn, _BoundFunction):
        python, instance = fn.__func__._traced(), fn.__self__
        return lambda *a, **k: python(instance, *a, **k)
    return fn._traced() if isinstance(fn, Function) else fn


def _named_device(jax, name, k):
    """The ``jax.Device`` a TensorFlow device name means: ``"cpu:0"``, ``"/gpu:1"``, ``"GPU"``
    (index 0) or ``"/job:localhost/replica:0/task:0/device:CPU:0"`` -> ``jax.devices(platform)
    [index]``. Raises ``ValueError`` naming the string (entry ``k``) for a name that is not of
    that form or a device JAX does not have."""
    m = _DEVICE_NAME.fullmatch(name.strip())
    platform = _PLATFORM.get(m.group(1).lower()) if m else None
    if platform is None:
        raise ValueError(f"MirroredStrategy(devices=...): entry {k}, {name!r}, is not a device "
                         "name; write 'cpu:0', '/gpu:1' or "
                         "'/job:localhost/replica:0/task:0/device:CPU:0'")
    index = int(m.group(2) or 0)
    try:
        found = jax.devices(platform)
    except RuntimeError:
        found = []
    if index >= len(found):
        raise ValueError(
            f"MirroredStrategy(devices=...): entry {k}, {name!r}: JAX has {len(found)} "
            f"{platform} device(s) ({found}). On the CPU, start the process with "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N for N devices")
    return found[index]


class MirroredStrategy:
    """Synchronous data parallelism (``tf.distribute.MirroredStrategy``) on the devices of one
    process, or of several (``jax.distributed.initialize``: each process feeds its own rows).

    Args:
        devices: None for every device of JAX's default backend (``jax.devices()``), or a
            non-empty sequence of distinct ``jax.Device`` objects, ints (indices into
            ``jax.devices()``) or TensorFlow device names (``"cpu:1"``, ``"/gpu:0"``,
            ``"/job:localhost/replica:0/task:0/device:CPU:0"``: ``jax.devices(platform)[i]``).

        per_replica: True (default): :meth:`run` runs the step once per replica on its share
            of the batch and returns :class:`PerReplica` values (TensorFlow's semantics).
            False: the step is one program for the global batch, partitioned by XLA, whose
            results are global values (see the module's notes).

    Raises ``ImportError`` without JAX, ``ValueError`` for an empty or repeated device list or
    an index out of range, a device name that is not one or names a device JAX does not have
    (or, on several processes, when a process's devices are not adjacent in the list),
    ``TypeError`` for a device of another type or a ``per_replica`` that is not a bool.

    * ``with strategy.scope():`` Variables created in the block are put on every device
      (a replicated ``NamedSharding``); optimizer slots a step creates are replicated too.
    * :meth:`run` runs a (``tg.function`` or plain) step once per replica (or, with
      ``per_replica=False``, as one program for the global batch partitioned by XLA).
    * :meth:`experimental_distribute_dataset` splits NumPy batches along their first axis.
    * :meth:`reduce`, :attr:`num_replicas_in_sync`, :meth:`experimental_local_results`.
    """

    def __init__(self, devices=None, per_replica=True):
        if per_replica not in (True, False):
            raise TypeError(f"MirroredStrategy(per_replica=...): expected True or False, got "
                            f"{per_replica!r}")
        jax = _jax()
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        every = jax.devices()
        if devices is None:
            chosen = list(every)
        else:
            if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
                raise TypeError("MirroredStrategy(devices=...): expected None or a sequence of "
                                f"jax.Device objects or ints, got {type(devices).__name__}")
            chosen = []
            for k, d in enumerate(devices):
                if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
                    if not 0 <= d < len(every):
                        raise ValueError(
                            f"MirroredStrategy(devices=...): index {int(d)} (entry {k}) is out of "
                            f"range: JAX sees {len(every)} device(s) ({every}). On the CPU, start "
                            "the process with XLA_FLAGS=--xla_force_host_platform_device_count=N "
                            "for N devices")
                    d = every[int(d)]
                elif isinstance(d, str):
                    d = _named_device(jax, d, k)
                elif not isinstance(d, jax.Device):
                    raise TypeError(f"MirroredStrategy(devices=...): entry {k} is a "
                                    f"{type(d).__name__}; pass jax.Device objects, ints or "
                                    "TensorFlow device names ('cpu:0', '/gpu:1')")
                chosen.append(d)
            if not chosen:
                raise ValueError("MirroredStrategy(devices=...): the device list is empty; pass "
                                 "None for every device")
            if len(set(chosen)) != len(chosen):
                raise ValueError(f"MirroredStrategy(devices=...): a device is listed twice: "
                                 f"{chosen}")
        self._jax = jax
        self.per_replica = per_replica
        self.devices = tuple(chosen)
        # several processes (jax.distributed): each feeds its own devices' rows of a batch
        self._process = jax.process_index() if jax.process_count() > 1 else None
        if self._process is not None:
            process_rows(len(chosen), [d.process_index for d in chosen], self._process)
        self.mesh = Mesh(np.array(chosen, dtype=object), (_AXIS,))
        self._replicated = NamedSharding(self.mesh, PartitionSpec())
        self._sharded = NamedSharding(self.mesh, PartitionSpec(_AXIS))
        self._steps = {}  # the user's step -> the Function that runs it

    def __repr__(self):
        extra = "" if self.per_replica else ", per_replica=False"
        return f"MirroredStrategy(devices={list(self.devices)}{extra})"

    @property
    def num_replicas_in_sync(self) -> int:
        """The number of devices (replicas) a step runs on."""
        return len(self.devices)

    # --- Variables ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self):
        """Within the block, Variables created (a model's, an optimizer's) are replicated on
        every device when the block ends (their host values stay, for eager reads). Raises
        ``RuntimeError`` when another strategy's scope is entered in this thread."""
        outer = get_strategy()
        if outer is not None and outer is not self:
            raise RuntimeError(f"{self!r}.scope(): the scope of another strategy ({outer!r}) "
                               "is entered; leave it first (strategies do not nest)")
        before = {v._id for v in live_variables()}
        _state.strategy = self
        try:
            yield self
        finally:
            _state.strategy = outer
            for v in live_variables():
                if v._id not in before:
                    self._replicate(v)

    def _replicate(self, v):
        """Put Variable ``v``'s value on every device (a replicated ``NamedSharding``), kept
        beside its host value until the value changes."""
        a = device_array(v)
        if a is not None:
            if getattr(a, "sharding", None) == self._replicated:
                return
            set_on_device(v, self._put(a, self._replicated))
            return
        host = v._value
        set_on_device(v, self._put(_backend.to_numpy(host), self._replicated), host=host)

    def _put(self, array, sharding):
        """``array`` (a host or device array, the whole value) on the mesh with ``sharding``.
        On several processes each process passes only its own devices' part (its rows for the
        split sharding, everything for the replicated one) to
        ``jax.make_array_from_process_local_data``."""
        jax = self._jax
        if config.x64_enabled(jax):
            return self._place(array, sharding)
        with config.x64_scope(jax):  # float64 stays float64, as in tapegrad's programs
            return self._place(array, sharding)

    def _place(self, array, sharding):
        jax = self._jax
        if self._process is None:
            return jax.device_put(array, sharding)
        array = np.asarray(array)
        local = array
        if sharding is self._sharded:
            local = array[process_rows(array.shape[0], [d.process_index for d in self.devices],
                                       self._process)]
        return jax.make_array_from_process_local_data(sharding, local, array.shape)

    # --- data -----------------------------------------------------------------------------------
    def experimental_distribute_values(self, batch):
        """``batch`` (an array, Tensor, or a tuple/list/dict nest of them, each with the batch
        as first axis) put on the devices: each leaf a ``Tensor`` whose device array is split
        along its first axis (``NamedSharding(mesh, P("batch"))``). A leaf whose first axis is
        not a multiple of :attr:`num_replicas_in_sync` (an uneven last batch): per replica, it
        is padded with zero rows to the next multiple (replica ``r`` gets rows ``r*k`` to
        ``(r+1)*k - 1`` of the padded batch, so the last replicas hold the padding); the real
        row count goes with it to :meth:`run`, where ``tg.nn.compute_average_loss`` leaves the
        padding rows out and divides by the real count, and :class:`PerReplica` results
        whose first axis is the local batch leave them out of ``values`` and of
        :meth:`reduce` along axis 0. Other computations in the step see the zero rows. With
        ``per_replica=False`` it is replicated instead: every device computes the whole of
        it, which gives one device's results.
        On several processes ``batch`` is the global batch and each process puts only its own
        devices' rows (see :meth:`experimental_distribute_dataset`). Raises ``ValueError``
        for a 0-d leaf, naming it."""
        jax = self._jax
        paths, treedef = jax.tree_util.tree_flatten_with_path(
            batch, is_leaf=lambda x: isinstance(x, Tensor))
        out = []
        for path, leaf in paths:
            host = leaf.numpy() if isinstance(leaf, Tensor) else np.asarray(leaf)
            if host.ndim == 0:
                where = jax.tree_util.keystr(path) or "the batch"
                raise ValueError(f"{self!r}: {where} is a 0-d value; every leaf of a batch "
                                 "needs a first (batch) axis to split across the devices")
            n = self.num_replicas_in_sync
            rows = host.shape[0]
            if rows % n and self.per_replica:  # padded with zero rows to a multiple of n
                fill = np.zeros((n - rows % n, *host.shape[1:]), host.dtype)
                d = self._put(np.concatenate([host, fill]), self._sharded)
                t = on_device(d, "MirroredStrategy")
                _padded[id(t)] = rows
                weakref.finalize(t, _padded.pop, id(t), None)
                out.append(t)
                continue
            d = self._put(host, self._sharded if rows % n == 0 else self._replicated)
            out.append(on_device(d, "MirroredStrategy", host=_backend.asarray(host)))
        return jax.tree_util.tree_unflatten(treedef, out)

    def experimental_distribute_dataset(self, dataset):
        """An iterable over ``dataset`` (any iterable of batches: arrays, Tensors, or nests of
        them, the batch along the first axis) whose batches are put on the devices by
        :meth:`experimental_distribute_values`: split along the batch axis, an uneven last
        batch replicated. Each pass iterates ``dataset`` again.

        On several processes (``jax.distributed.initialize``; ``jax.process_count() > 1``)
        every process iterates the same ``dataset`` of *global* batches (same order; TensorFlow's
        ``AutoShardPolicy.DATA``) and puts only its own share on its devices: the rows of its
        devices' shards (:func:`process_rows`), passed to
        ``jax.make_array_from_process_local_data``, which makes the global array."""
        return _DistributedDataset(self, dataset)

    # --- steps ----------------------------------------------------------------------------------
    def run(self, fn, args=(), kwargs=None):
        """Run ``fn(*args, **kwargs)`` on every replica as one compiled program.

        **Per replica** (the default): ``fn`` runs once per replica (``jax.shard_map`` over
        the mesh) on its share of each distributed argument (from
        :meth:`experimental_distribute_dataset` or :meth:`experimental_distribute_values`:
        the rows of its device; a :class:`PerReplica` argument: its own value); other arrays
        and Tensors are passed to every replica whole, and Variables are the replicated ones.
        Inside ``fn``, :func:`get_replica_context` gives the :class:`ReplicaContext`;
        ``optimizer.apply_gradients`` sums the gradients across replicas first (as
        TensorFlow's). A Variable ``fn`` assigns or creates must get the same value on every
        replica: one whose new value depends on a replica's rows without an all-reduce raises
        ``ValueError`` naming it. Returns ``fn``'s results with each Tensor a
        :class:`PerReplica` (other leaves as they are). The program is compiled once per
        argument shapes and kinds (an uneven batch padded to a full one reuses the program).

        **Global batch** (``per_replica=False``):
        ``fn``: a ``tg.function`` (its Python function is compiled anew for the strategy) or a
        plain Python function. Arguments from :meth:`experimental_distribute_dataset` (or
        :meth:`experimental_distribute_values`) are split along the batch axis; other arrays
        and Tensors are passed to every device whole. Variables the step assigns or creates
        are constrained to stay replicated (``jax.lax.with_sharding_constraint``), so every
        replica's Variables are identical after each step; XLA sums the gradients of the
        batch-sharded computation across devices (an all-reduce).

        Returns the step's results as ``fn`` returns them: global values (a scalar is the value
        for the whole batch; see the module's notes).

        Raises ``TypeError`` if ``fn`` is not callable or ``args`` is not a tuple or list;
        ``ValueError`` for a PerReplica argument of another strategy, distributed arguments
        of different batch sizes, or a Variable assigned a value that may differ across
        replicas; errors of the step as ``tg.function`` raises them.
        """
        if not callable(fn):
            raise TypeError(f"{self!r}.run: fn must be callable, got {type(fn).__name__}")
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"{self!r}.run: args must be a tuple or list of the step's "
                            f"arguments, got {type(args).__name__} (write args=(x,))")
        if self.per_replica:
            return self._run_per_replica(fn, args, kwargs or {})
        step = self._steps.get(fn)
        if step is None:
            step = self._steps[fn] = Function(self._constrained(fn), jit_compile=True)
        return step(*args, **(kwargs or {}))

    def _run_per_replica(self, fn, args, kwargs):
        """:meth:`run` with TensorFlow's semantics: ``fn`` once per replica on its share."""
        step, call, (leaves, kinds, padded, real) = self._per_replica_step(fn, args, kwargs)
        out = step(*call)
        out_leaves, out_tree = self._jax.tree_util.tree_flatten(out)
        result = [PerReplica(o, self, self._padding(o, leaves, kinds, padded, int(real)))
                  if isinstance(o, Tensor) else o for o in out_leaves]
        return self._jax.tree_util.tree_unflatten(out_tree, result)

    def _per_replica_step(self, fn, args, kwargs):
        """The ``Function`` a per-replica :meth:`run` of ``fn`` calls, the arguments it calls
        it with, and what the results need (the leaves, their kinds, padded, real rows)."""
        jax = self._jax
        leaves, treedef = jax.tree_util.tree_flatten(
            (tuple(args), kwargs), is_leaf=lambda x: isinstance(x, (Tensor, PerReplica)))
        kinds, rows = [], set()
        for k, x in enumerate(leaves):
            if isinstance(x, PerReplica):
                if x._strategy is not self:
                    raise ValueError(f"{self!r}.run: argument {k} is a PerReplica value of "
                                     f"another strategy ({x._strategy!r})")
                leaves[k], kind = x._stacked, "stacked"
            elif isinstance(x, Tensor) and _sharding(x) == self._sharded:
                kind = "split"  # from experimental_distribute_values / _dataset
                rows.add(_padded.get(id(x), x.shape[0]))
            else:
                kind = "whole" if isinstance(x, Tensor) or hasattr(x, "shape") else None
            kinds.append(kind)
        if len(rows) > 1:
            raise ValueError(f"{self!r}.run: the distributed arguments have different batch "
                             f"sizes {sorted(rows)}; split one batch of equal-length leaves")
        padded = any(id(x) in _padded for x in leaves if isinstance(x, Tensor))
        key = (fn, tuple(kinds))
        step = self._steps.get(key)
        if step is None:
            step = self._steps[key] = Function(self._replicated_fn(fn, treedef, kinds),
                                               jit_compile=True)
        real = np.asarray(rows.pop() if rows else 0, np.int32)
        return step, (padded, real, leaves), (leaves, kinds, padded, real)

    def _padding(self, out, leaves, kinds, padded, real):
        """``(local rows, real rows)`` for a per-replica result whose first axis is the local
        batch of a padded batch (its padding rows are left out of its values), else None."""
        if not padded:
            return None
        local = next(leaves[k].shape[0] for k, kd in enumerate(kinds) if kd == "split")
        local //= self.num_replicas_in_sync
        return (local, real) if out.ndim >= 2 and out.shape[1] == local else None

    def _replicated_fn(self, fn, treedef, kinds):
        """The function a per-replica :meth:`run` compiles: ``jax.shard_map`` of ``fn`` over
        the mesh (split arguments by rows, others and the Variables it reads whole), which returns
        each Tensor result stacked along a new first axis (one row per replica) and the
        Variables ``fn`` assigns or creates, which must be equal on every replica."""
        inner = _python_step(fn)
        jax, strategy = self._jax, self
        P = jax.sharding.PartitionSpec
        spec = {"split": P(_AXIS), "stacked": P(_AXIS), "whole": P()}

        def step(padded, real, leaves):
            variables = list(visible_variables())
            dyn = [k for k, kd in enumerate(kinds) if kd is not None]
            info = {}

            def body(real, values):
                # the Variables' values are the step's, closed over: JAX passes those the
                # body reads to every replica whole (P()); assignments go to this binding
                var_values = [v._value for v in variables]
                with bind_variables(zip(variables, var_values)) as scope:
                    lv = list(leaves)
                    for k, a in zip(dyn, values):
                        lv[k] = Tensor(a[0] if kinds[k] == "stacked" else a)
                    args, kwargs = jax.tree_util.tree_unflatten(treedef, lv)
                    ctx = ReplicaContext(strategy, jax.lax.axis_index(_AXIS),
                                         real if padded else None)
                    outer, config._replica.context = config.replica_context(), ctx
                    meshes = (getattr(_callback_mesh, "mesh", None),
                              getattr(_callback_mesh, "manual", False))
                    _callback_mesh.mesh, _callback_mesh.manual = strategy.mesh, True
                    try:
                        out = inner(*args, **kwargs)
                    finally:
                        config._replica.context = outer
                        _callback_mesh.mesh, _callback_mesh.manual = meshes
                        ctx._active = False
                    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
                    tensors = [k for k, o in enumerate(out_leaves) if isinstance(o, Tensor)]
                    changed = [v for v, val in zip(variables, var_values)
                               if scope.values[v._id] is not val]
                    state = [*changed, *scope.created]
                    new = [_backend.as_jax(scope.values.get(v._id, v._value)) for v in state]
                    info.update(out_leaves=out_leaves, out_tree=out_tree, tensors=tensors,
                                changed=changed, created=list(scope.created), state=state)
                    return ([_backend.as_jax(out_leaves[k]._value)[None] for k in tensors],
                            new)

            values = [_backend.as_jax(leaves[k]._value if isinstance(leaves[k], Tensor)
                                      else leaves[k]) for k in dyn]
            # JAX's replication check (check_vma) is off: tapegrad's control flow (a scan's
            # gradient carries start as zeros) does not carry its varying-axes types. The
            # Variables' new values are checked instead on the traced program (_varying_outputs)
            mapped = jax.shard_map(body, mesh=strategy.mesh,
                                   in_specs=(P(), [spec[kinds[k]] for k in dyn]),
                                   out_specs=(P(_AXIS), P()), check_vma=False)
            inputs = (_backend.as_jax(real._value), values)
            closed, shapes = jax.make_jaxpr(mapped, return_shape=True)(*inputs)
            (sm,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "shard_map"]
            n_out = len(info["tensors"])
            split = [_AXIS in tuple(spec) for spec in sm.params["in_specs"]]
            for v, varying in zip(info["state"], _varying_outputs(sm.params["jaxpr"],
                                                                  split)[n_out:]):
                if varying:
                    raise ValueError(
                        f"{strategy!r}.run: the replica function assigned Variable {v.name!r} "
                        "a value that may differ across replicas (it depends on a replica's "
                        "share of the batch). Sum or average it across the replicas first: "
                        "tg.distribute.get_replica_context().all_reduce(op, value), as "
                        "optimizer.apply_gradients does for gradients")
            flat = jax.core.eval_jaxpr(closed.jaxpr, closed.consts,
                                       *jax.tree_util.tree_leaves(inputs))
            outs, new = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), flat)
            set_state(info["changed"], new[:len(info["changed"])])
            set_state(info["created"], new[len(info["changed"]):])
            result = list(info["out_leaves"])
            for k, a in zip(info["tensors"], outs):
                result[k] = Tensor(a)
            return jax.tree_util.tree_unflatten(info["out_tree"], result)

        step.__name__ = getattr(inner, "__name__", "step")
        step.__qualname__ = getattr(inner, "__qualname__", step.__name__)
        return step

    def _constrained(self, fn):
        """``fn``'s Python function, followed by a sharding constraint that keeps the
        Variables it assigns or creates replicated."""
        inner = _python_step(fn)
        jax, replicated, mesh = self._jax, self._replicated, self.mesh

        def step(*args, **kwargs):
            # this trace's Variables (bound in this thread, or created): another thread's
            # are not this step's to constrain
            before = {v._id: v._value for v in visible_variables()}
            outer, _callback_mesh.mesh = getattr(_callback_mesh, "mesh", None), mesh
            try:
                out = inner(*args, **kwargs)
            finally:
                _callback_mesh.mesh = outer
            for v in visible_variables():
                value = v._value
                if before.get(v._id, None) is value:
                    continue
                set_state([v], [jax.lax.with_sharding_constraint(_backend.as_jax(value),
                                                                 replicated)])
            return out

        step.__name__ = getattr(inner, "__name__", "step")
        step.__qualname__ = getattr(inner, "__qualname__", step.__name__)
        return step

    # --- results ----------------------------------------------------------------------------------
    def reduce(self, reduce_op, value, axis=None):
        """Combine a step's result across replicas (``tf.distribute.Strategy.reduce``).

        ``reduce_op``: ``"SUM"``, ``"MEAN"`` or a :class:`ReduceOp`; ``value``: a
        :class:`PerReplica` value or a Tensor (or array) a step returned; ``axis``: None, or
        an int axis of the (per-replica) value to sum or average along (per-example values:
        ``axis=0`` gives the sum or mean over the global batch).

        A :class:`PerReplica` value, as TensorFlow: ``axis=None`` sums or averages the
        replicas' values elementwise; an ``axis`` sums along it and across the replicas, and
        ``MEAN`` divides by the global count (the replicas' lengths along it added up).
        A value that is not per-replica, with ``per_replica=True`` (as TensorFlow):
        ``axis=None`` ``MEAN`` returns it, ``SUM`` raises ``ValueError`` (on more than one
        replica); with an axis, each replica reduces the whole value, so ``SUM`` is the
        replica count times its sum along the axis. With ``per_replica=False`` a step's
        results are its global values, so ``axis=None`` returns ``value`` unchanged for both
        ops and an axis reduces along it. Returns a Tensor. Raises ``ValueError`` for an
        unknown ``reduce_op`` or an axis out of range.
        """
        op = _op(reduce_op, f"{self!r}.reduce")
        if isinstance(value, PerReplica):
            return self._reduce_per_replica(op, value, axis)
        n = self.num_replicas_in_sync
        if axis is None:
            if self.per_replica and op == "SUM" and n > 1:
                raise ValueError(
                    f"{self!r}.reduce: a value that is not per-replica (not a result of "
                    "strategy.run) cannot be summed across replicas (as TensorFlow); pass "
                    "strategy.run's PerReplica result, or use MEAN")
            return value
        from . import ops
        t = value if isinstance(value, Tensor) else ops.asarray(value)
        if not -t.ndim <= axis < t.ndim:
            raise ValueError(f"{self!r}.reduce: axis {axis} is out of range for a value of "
                             f"shape {t.shape}")
        # per replica, TensorFlow runs the sum on every replica (each gets the whole value)
        times = n if self.per_replica and op == "SUM" else 1
        a = device_array(t)
        if a is None:
            r = (ops.sum if op == "SUM" else ops.mean)(t, axis=axis)
            return r * times if times > 1 else r
        jnp = self._jax.numpy
        with config.x64_scope(self._jax):
            r = (jnp.sum if op == "SUM" else jnp.mean)(a, axis=axis) * times
        return on_device(r, "MirroredStrategy.reduce")

    def _reduce_per_replica(self, op, value, axis):
        """:meth:`reduce` of a :class:`PerReplica` value, as TensorFlow: ``axis=None`` sums
        or averages the replicas' values; an ``axis`` also sums along it, and ``MEAN`` then
        divides by the global count (the replicas' lengths along it added up; an uneven
        batch's padding rows left out)."""
        jax = self._jax
        jnp = jax.numpy
        a = _array(value._stacked)
        nd = a.ndim - 1  # the per-replica values' rank
        if axis is not None and not -nd <= axis < nd:
            raise ValueError(f"{self!r}.reduce: axis {axis} is out of range for per-replica "
                             f"values of shape {tuple(a.shape[1:])}")
        with config.x64_scope(jax):
            a = jnp.asarray(_backend.as_jax(a))
            if axis is None:
                r = (jnp.sum if op == "SUM" else jnp.mean)(a, axis=0)
            else:
                ax = axis % nd + 1
                count = a.shape[0] * a.shape[ax]
                if value._padding is not None and ax == 1:  # the padding rows: zeros
                    local, count = value._padding
                    row = jnp.arange(a.shape[0])[:, None] * local + jnp.arange(local)
                    keep = (row < count).reshape(row.shape + (1,) * (a.ndim - 2))
                    a = jnp.where(keep, a, jnp.zeros((), a.dtype))
                r = jnp.sum(a, axis=(0, ax))
                if op == "MEAN":
                    r = r / jnp.asarray(count, r.dtype)
        return on_device(r, "MirroredStrategy.reduce")

    def experimental_local_results(self, value):
        """The per-device parts of ``value``: for a :class:`PerReplica` value its ``values``
        (a tuple of Tensors); for a step's global result or a distributed batch, a tuple of
        NumPy arrays, one per device in :attr:`devices` order (a replicated value gives the
        whole value on each). On several processes: this process's devices only."""
        if isinstance(value, PerReplica):
            return value.values
        local = [d for d in self.devices if self._process is None
                 or d.process_index == self._process]
        a = device_array(value) if isinstance(value, Tensor) else value
        if a is None or not hasattr(a, "addressable_shards"):
            host = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            return tuple(host for _ in local)
        by_device = {s.device: np.asarray(s.data) for s in a.addressable_shards}
        return tuple(by_device[d] for d in local)

    # --- inspection -------------------------------------------------------------------------------
    def experimental_compiled_text(self, fn, args=(), kwargs=None) -> str:
        """The optimised HLO text of the program :meth:`run` compiles for ``fn`` on ``args``
        (after a :meth:`run` with arguments of the same shapes), as XLA partitioned it: count
        ``all-reduce`` in it to see the collectives. Raises ``ValueError`` if no such program
        was compiled yet."""
        jax = self._jax
        step = self._steps.get(fn)
        if self.per_replica:
            step, call, _ = self._per_replica_step(fn, args, kwargs or {})
            args, kwargs = call, {}
        leaves, treedef = jax.tree_util.tree_flatten((tuple(args), kwargs or {}))
        program = None if step is None else step._programs.get(
            (treedef, tuple(_leaf_key(x, step.__name__) for x in leaves)))
        if program is not None:
            values = [_variable_input(v, jax) for v in program.variables]
            values += [_input(leaves[k]) for k in program.dynamic]
            with config.x64_scope(jax):
                return program.compiled.lower(*values).compile().as_text()
        raise ValueError(f"{self!r}.experimental_compiled_text: no program of {fn!r} for these "
                         "arguments; call strategy.run(fn, args) first")


def process_rows(rows, processes, process_index) -> slice:
    """The rows of a global batch that one process feeds when the batch is split evenly
    across a mesh's devices (:meth:`MirroredStrategy.experimental_distribute_dataset` on
    several processes).

    Args:
        rows: the global batch's first-axis length (an int), a multiple of
            ``len(processes)``.
        processes: the ``process_index`` of each device of the mesh, in mesh order
            (``[0, 0, 1, 1]``: 2 processes of 2 devices each); process ``p``'s devices must
            be adjacent, as ``jax.devices()`` orders them.
        process_index: the process asking (``jax.process_index()``).

    Returns ``slice(start, stop)``: the rows of that process's devices' shards, in order
    (``rows // len(processes)`` per device). Raises ``ValueError`` if ``rows`` is not a
    multiple of the device count, if the process has no device in the mesh, or if its devices
    are not adjacent (its rows would not be one block).
    """
    processes = list(processes)
    n = len(processes)
    if n == 0 or rows % n:
        raise ValueError(f"process_rows: a batch of {rows} rows cannot be split evenly across "
                         f"{n} devices")
    mine = [k for k, p in enumerate(processes) if p == process_index]
    if not mine:
        raise ValueError(f"process_rows: process {process_index} has no device in the mesh "
                         f"(the devices' processes are {processes}); every process must "
                         "hold some of the strategy's devices")
    if mine[-1] - mine[0] + 1 != len(mine):
        raise ValueError(f"process_rows: the devices of process {process_index} are not "
                         f"adjacent in the mesh (the devices' processes are {processes}); list "
                         "each process's devices together, as jax.devices() does")
    per = rows // n
    return slice(mine[0] * per, (mine[-1] + 1) * per)


class _DistributedDataset:
    """What :meth:`MirroredStrategy.experimental_distribute_dataset` returns."""

    def __init__(self, strategy, dataset):
        if not hasattr(dataset, "__iter__"):
            raise TypeError(f"{strategy!r}.experimental_distribute_dataset: expected an iterable "
                            f"of batches, got {type(dataset).__name__}")
        self._strategy, self._dataset = strategy, dataset

    def __iter__(self):
        for batch in self._dataset:
            yield self._strategy.experimental_distribute_values(batch)


_INVARIANT = {"psum", "pmax", "pmin", "all_gather"}  # their results are equal on every replica


def _varying_outputs(jaxpr, varying) -> list:
    """Which outputs of ``jaxpr`` (the body of a ``jax.shard_map`` over the strategy's axis)
    may differ across replicas, given which inputs do (``varying``, bools). A forward pass
    over the equations: a collective over the axis (``psum``, ...) gives a value equal on
    every replica, ``axis_index`` one that differs, any other equation one that differs if
    an input does (conservative: a collective inside a loop or branch is not looked into)."""
    from jax.extend.core import Literal

    known = {}
    for var, v in zip(jaxpr.invars, varying):
        known[var] = v
    read = lambda a: False if isinstance(a, Literal) else known.get(a, False)  # noqa: E731
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _INVARIANT and _AXIS in tuple(np.ravel(eqn.params.get(
                "axes", eqn.params.get("axis_name", ())))):
            out = False
        else:
            out = name == "axis_index" or any(read(a) for a in eqn.invars)
        for o in eqn.outvars:
            known[o] = out
    return [read(o) for o in jaxpr.outvars]


def _sharding(t):
    """The sharding of Tensor ``t``'s device array, or None (a host value)."""
    a = device_array(t)
    return getattr(a, "sharding", None)


def _array(t):
    """Tensor ``t``'s device array (JAX), or its value."""
    a = device_array(t)
    return t._value if a is None else a


class PerReplica:
    """The result of a per-replica :meth:`MirroredStrategy.run`: one value per replica
    (TensorFlow's ``tf.distribute.DistributedValues``, ``PerReplica``).

    ``values``: a tuple of Tensors, one per replica in the strategy's device order (each
    replica's result, on its device). Held as one Tensor whose first axis is the replica
    (``(num_replicas, *per-replica shape)``, split along it). Combine the values with
    :meth:`MirroredStrategy.reduce`; pass them back to :meth:`MirroredStrategy.run` (each
    replica gets its own). For an uneven batch (padded, see :meth:`MirroredStrategy.run`) a
    result whose first axis is the local batch leaves its padding rows out of ``values``.
    """

    def __init__(self, stacked, strategy, padding=None):
        self._stacked, self._strategy, self._padding = stacked, strategy, padding

    @property
    def values(self) -> tuple:
        a = _array(self._stacked)
        if hasattr(a, "addressable_shards"):
            by_device = {sh.device: sh.data for sh in a.addressable_shards}
            parts = [by_device[d][0] for d in self._strategy.devices if d in by_device]
        else:
            parts = list(a)
        if self._padding is not None:
            local, real = self._padding
            parts = [p[:min(max(real - r * local, 0), local)] for r, p in enumerate(parts)]
        return tuple(on_device(p, "PerReplica") if hasattr(p, "addressable_shards")
                     else Tensor(p) for p in parts)

    def __repr__(self):  # TensorFlow's layout: one "i: value" line per replica
        lines = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self.values))
        return f"PerReplica:{{\n{lines}\n}}"


class ReplicaContext:
    """What :func:`get_replica_context` returns inside a replica function of
    :meth:`MirroredStrategy.run` (``tf.distribute.ReplicaContext``), or outside any strategy
    (the default context: one replica).

    * ``num_replicas_in_sync``: the replica count (an int).
    * ``replica_id_in_sync_group``: this replica's index, an int32 0-d Tensor (0 to
      ``num_replicas_in_sync - 1``; the strategy's device order).
    * ``all_reduce(reduce_op, value)``: see the method.
    * ``strategy``: the :class:`MirroredStrategy` (None for the default context).
    """

    def __init__(self, strategy=None, replica_id=None, real=None):
        self._strategy, self._replica_id, self._real = strategy, replica_id, real
        self._active = True

    @property
    def strategy(self):
        return self._strategy

    @property
    def num_replicas_in_sync(self) -> int:
        return 1 if self._strategy is None else self._strategy.num_replicas_in_sync

    @property
    def replica_id_in_sync_group(self) -> Tensor:
        from . import ops
        if self._strategy is None:
            return ops.asarray(np.int32(0))
        self._check("replica_id_in_sync_group")
        return Tensor(self._replica_id.astype(np.int32))

    def _check(self, what):
        if not self._active:
            raise RuntimeError(
                f"ReplicaContext.{what}: this replica context belongs to a replica function "
                "that has returned; use it only inside the function given to strategy.run "
                "(call tg.distribute.get_replica_context() there)")

    def all_reduce(self, reduce_op, value):
        """``value`` (a Tensor or array, or a tuple/list/dict nest of them) summed
        (``"SUM"``) or averaged (``"MEAN"``) across the replicas; every replica gets the same
        result, of ``value``'s shapes and dtypes (``jax.lax.psum`` / ``pmean`` over the mesh).
        A value equal on every replica is summed as many times as there are replicas.
        Differentiable: the gradient of an all-sum is the all-sum of the incoming gradients
        (all-mean likewise), as TensorFlow's ``ReplicaContext.all_reduce`` defines it. In the
        default context (no strategy) the value is returned as it is.

        Raises ``ValueError`` for an unknown ``reduce_op``, ``RuntimeError`` when the replica
        function this context belongs to has returned."""
        op = _op(reduce_op, "ReplicaContext.all_reduce")
        if self._strategy is None:
            return value
        self._check("all_reduce")
        from . import ops
        from .custom_gradient import custom_gradient
        jax = self._strategy._jax
        collective = jax.lax.psum if op == "SUM" else jax.lax.pmean

        def reduce(a):  # a value equal on every replica is summed n times, as a varying one
            return collective(_backend.as_jax(a), _AXIS)

        @custom_gradient
        def all_reduced(t):
            return Tensor(reduce(t._value)), lambda dy: Tensor(reduce(dy._value))

        return jax.tree_util.tree_map(lambda x: all_reduced(ops.asarray(x)), value,
                                      is_leaf=lambda x: isinstance(x, Tensor))

    def _sum_gradients(self, grads):
        """``grads`` (backend arrays, traced) summed across the replicas: the optimizers'
        hook (``config.replica_context``), as TensorFlow's ``apply_gradients`` all-reduces
        in a replica context."""
        self._check("apply_gradients")
        return [self.all_reduce("SUM", Tensor(g))._value for g in grads]

    def _per_example(self, loss):
        """``(loss, rows)`` for ``tg.nn.compute_average_loss``: ``loss`` (this replica's
        per-example Tensor) with an uneven batch's padding rows zeroed, and the global batch
        size (the local batch times the replicas; for a padded batch its real rows)."""
        self._check("compute_average_loss")
        from . import ops
        local = loss.shape[0]
        if self._real is None:
            return loss, local * self.num_replicas_in_sync
        jnp = self._strategy._jax.numpy
        row = self._replica_id * local + jnp.arange(local)
        keep = Tensor((row < self._real).astype(_backend.np_dtype(loss.dtype)))
        keep = ops.reshape(keep, (local,) + (1,) * (loss.ndim - 1))
        return loss * keep, Tensor(self._real)


_DEFAULT_CONTEXT = ReplicaContext()


def _op(reduce_op, where):
    """``reduce_op`` (``"SUM"``, ``"MEAN"`` or a :class:`ReduceOp`) as ``"SUM"`` / ``"MEAN"``."""
    op = reduce_op.value if isinstance(reduce_op, ReduceOp) else reduce_op
    if op not in ("SUM", "MEAN"):
        raise ValueError(f"{where}: reduce_op must be 'SUM', 'MEAN' or a "
                         f"tg.distribute.ReduceOp, got {reduce_op!r}")
    return op


def get_replica_context():
    """The :class:`ReplicaContext` of the replica function being run
    (``tf.distribute.get_replica_context``); None inside a strategy's ``scope()`` outside
    :meth:`MirroredStrategy.run` (TensorFlow's cross-replica context); outside any strategy,
    the default context (one replica, ``all_reduce`` returns its value)."""
    ctx = config.replica_context()
    if ctx is not None:
        return ctx
    return None if has_strategy() else _DEFAULT_CONTEXT
