"""``tg.distribute``: data-parallel compiled training on JAX's sharding (TensorFlow 2's names).

:class:`MirroredStrategy` keeps Variables replicated on every device of a one-axis
``jax.sharding.Mesh`` (axis ``"batch"``) and runs a step as one ``tg.function`` program whose
batch inputs are sharded along their first axis (``NamedSharding(mesh, P("batch"))``) and
whose Variables are replicated (``NamedSharding(mesh, P())``). XLA's SPMD partitioner (GSPMD,
through ``jax.jit``) splits the program and inserts the all-reduce that sums the gradients
across devices; no partitioner is written here. The step sees the *global* batch (as
``jax.jit`` code does): a mean over the batch is the global mean, so training on N devices
gives the Variables one device gives with the same global batch.

Unlike TensorFlow, a step's results are not per-replica values: they are the program's global
results (a scalar loss is the loss of the whole batch; a per-example result is batch-sharded).
:meth:`MirroredStrategy.reduce` with ``axis=None`` therefore returns the value as it is (the
cross-replica result, SUM and MEAN alike); with an ``axis`` it sums or averages along it
(``docs/tensorflow_differences.md``).
"""
from __future__ import annotations

import contextlib
import enum
import threading

import numpy as np

from . import _backend, config
from ._function import (Function, _BoundFunction, _callback_mesh, _input, _jax, _leaf_key,
                        _variable_input)
from ._tensor import Tensor
from ._variables import (device_array, live_variables, on_device, set_on_device, set_state,
                         visible_variables)

__all__ = ["MirroredStrategy", "ReduceOp", "get_strategy", "has_strategy", "process_rows"]

_AXIS = "batch"
_state = threading.local()  # .strategy: the strategy whose scope is entered in this thread


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


class MirroredStrategy:
    """Synchronous data parallelism (``tf.distribute.MirroredStrategy``) on the devices of one
    process, or of several (``jax.distributed.initialize``: each process feeds its own rows).

    Args:
        devices: None for every device of JAX's default backend (``jax.devices()``), or a
            non-empty sequence of distinct ``jax.Device`` objects or of ints (indices into
            ``jax.devices()``).

    Raises ``ImportError`` without JAX, ``ValueError`` for an empty or repeated device list or
    an index out of range (or, on several processes, when a process's devices are not
    adjacent in the list), ``TypeError`` for a device that is neither.

    * ``with strategy.scope():`` Variables created in the block are put on every device
      (a replicated ``NamedSharding``); optimizer slots a step creates are replicated too.
    * :meth:`run` runs a (``tg.function`` or plain) step as one program partitioned by XLA.
    * :meth:`experimental_distribute_dataset` splits NumPy batches along their first axis.
    * :meth:`reduce`, :attr:`num_replicas_in_sync`, :meth:`experimental_local_results`.
    """

    def __init__(self, devices=None):
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
                elif not isinstance(d, jax.Device):
                    raise TypeError(f"MirroredStrategy(devices=...): entry {k} is a "
                                    f"{type(d).__name__}; pass jax.Device objects or ints")
                chosen.append(d)
            if not chosen:
                raise ValueError("MirroredStrategy(devices=...): the device list is empty; pass "
                                 "None for every device")
            if len(set(chosen)) != len(chosen):
                raise ValueError(f"MirroredStrategy(devices=...): a device is listed twice: "
                                 f"{chosen}")
        self._jax = jax
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
        return f"MirroredStrategy(devices={list(self.devices)})"

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
        not a multiple of :attr:`num_replicas_in_sync` (an uneven last batch) is replicated
        instead: every device computes the whole of it, which gives one device's results.
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
            even = host.shape[0] % self.num_replicas_in_sync == 0
            d = self._put(host, self._sharded if even else self._replicated)
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

        ``fn``: a ``tg.function`` (its Python function is compiled anew for the strategy) or a
        plain Python function. Arguments from :meth:`experimental_distribute_dataset` (or
        :meth:`experimental_distribute_values`) are split along the batch axis; other arrays
        and Tensors are passed to every device whole. Variables the step assigns or creates
        are constrained to stay replicated (``jax.lax.with_sharding_constraint``), so every
        replica's Variables are identical after each step; XLA sums the gradients of the
        batch-sharded computation across devices (an all-reduce).

        Returns the step's results as ``fn`` returns them: global values (a scalar is the value
        for the whole batch; see the module's notes). Raises ``TypeError`` if ``fn`` is not
        callable or ``args`` is not a tuple or list; errors of the step as ``tg.function``
        raises them.
        """
        if not callable(fn):
            raise TypeError(f"{self!r}.run: fn must be callable, got {type(fn).__name__}")
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"{self!r}.run: args must be a tuple or list of the step's "
                            f"arguments, got {type(args).__name__} (write args=(x,))")
        step = self._steps.get(fn)
        if step is None:
            step = self._steps[fn] = Function(self._constrained(fn), jit_compile=True)
        return step(*args, **(kwargs or {}))

    def _constrained(self, fn):
        """``fn``'s Python function, followed by a sharding constraint that keeps the
        Variables it assigns or creates replicated."""
        if isinstance(fn, _BoundFunction):
            python, instance = fn.__func__._func, fn.__self__
            inner = lambda *a, **k: python(instance, *a, **k)  # noqa: E731
        elif isinstance(fn, Function):
            inner = fn._func
        else:
            inner = fn
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

        ``reduce_op``: ``"SUM"``, ``"MEAN"`` or a :class:`ReduceOp`; ``value``: a Tensor (or
        array) a step returned; ``axis``: None, or an int axis to sum or average along
        (per-example values: ``axis=0`` gives the sum or mean over the global batch).

        A step's results are already its global values (one program ran on the whole batch),
        so ``axis=None`` returns ``value`` unchanged for both ops. Raises ``ValueError`` for an
        unknown ``reduce_op`` or an axis out of range.
        """
        op = reduce_op.value if isinstance(reduce_op, ReduceOp) else reduce_op
        if op not in ("SUM", "MEAN"):
            raise ValueError(f"{self!r}.reduce: reduce_op must be 'SUM', 'MEAN' or a "
                             f"tg.distribute.ReduceOp, got {reduce_op!r}")
        if axis is None:
            return value
        from . import ops
        t = value if isinstance(value, Tensor) else ops.asarray(value)
        if not -t.ndim <= axis < t.ndim:
            raise ValueError(f"{self!r}.reduce: axis {axis} is out of range for a value of "
                             f"shape {t.shape}")
        a = device_array(t)
        if a is None:
            return (ops.sum if op == "SUM" else ops.mean)(t, axis=axis)
        jnp = self._jax.numpy
        with config.x64_scope(self._jax):
            r = (jnp.sum if op == "SUM" else jnp.mean)(a, axis=axis)
        return on_device(r, "MirroredStrategy.reduce")

    def experimental_local_results(self, value):
        """The per-device parts of ``value`` (a step's result or a distributed batch): a tuple
        of NumPy arrays, one per device in :attr:`devices` order (a replicated value gives the
        whole value on each). On several processes: this process's devices only."""
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
