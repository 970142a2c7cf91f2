"""Checkpoints with TensorFlow 2's names: ``Checkpoint``, ``CheckpointManager``,
``latest_checkpoint``.

A checkpoint at ``path`` is two files: ``path.index.json`` (format version, a save id, and for
each array its name, shape, dtype and CRC-32) and the data file it names,
``path.data-<id>.safetensors`` (the arrays in the safetensors format: no pickle, readable by
other tools). The index is the commit point: a save writes the data file, then the index to a
temporary file, fsyncs both and renames the index into place last, so a crash or an error
mid-save leaves the previous checkpoint at that path (and every other one) intact. The data
file is written in a staging directory ``path.tmp-<8 hex>`` (safetensors writes its own
temporary file beside its target); what a killed save leaves (that directory, a temporary
index, a data file no index names) is removed by the next save of ``path`` and by a
``CheckpointManager`` started on the directory. Write errors (a full disk, a read-only
directory) are ``OSError`` exceptions that name the path. complex128 arrays, which
safetensors lacks, are stored as float64 pairs in a last axis of 2 (the same bytes) and
restored as complex128.

What is saved is found by walking the objects given to :class:`Checkpoint` (it knows no model
or optimizer class): see :class:`Checkpoint`.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
import types
import uuid
import zlib
from collections import deque

import numpy as np

from . import _backend
from ._tensor import Tensor
from ._variables import Variable
from .errors import CheckpointError

__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointManager", "latest_checkpoint",
           "list_variables", "load_variable"]

FORMAT = "tapegrad-checkpoint"
VERSION = 1
INDEX_SUFFIX = ".index.json"
STATE_FILE = "checkpoint"  # in a checkpoint directory: the latest and the kept checkpoints

# values the walk does not enter: data, functions (decorated ones and tg.function objects
# have __wrapped__), modules, classes, unordered sets, arrays (__dlpack__)
_NOT_WALKED = (Tensor, str, bytes, bytearray, memoryview, int, float, complex, type(None),
               np.ndarray, np.generic, types.FunctionType, types.MethodType,
               types.BuiltinFunctionType, types.ModuleType, type, functools.partial, set,
               frozenset, range)


def _safetensors():
    try:
        import safetensors.numpy
    except ImportError as exc:
        raise ImportError("tg.train checkpoints are stored with safetensors, which is not "
                          "installed: pip install 'tapegrad[checkpoint]' (or pip install "
                          "safetensors)") from exc
    return safetensors


def _is_optimizer(obj) -> bool:
    """The optimizer protocol: ``_slots`` ``{variable._id: {slot name: Variable}}`` and
    ``_slot(variable, name)``, which returns the slot, creating it if needed."""
    return isinstance(getattr(obj, "_slots", None), dict) and callable(getattr(obj, "_slot", None))


def _children(obj) -> list:
    """``[(name, value)]``: a dict's items, a list's or tuple's elements, or an object's
    attributes (``__dict__`` and ``__slots__``; an optimizer's ``_slots`` is left to the
    slot pass, and its ``_variables`` index is skipped)."""
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    if isinstance(obj, _NOT_WALKED) or hasattr(obj, "__wrapped__") or hasattr(obj, "__dlpack__"):
        return []
    attrs = dict(getattr(obj, "__dict__", None) or {})
    for cls in type(obj).__mro__:
        slots = getattr(cls, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                attrs.setdefault(name, getattr(obj, name))
    if _is_optimizer(obj):
        del attrs["_slots"]
        attrs.pop("_variables", None)  # Keras's index of its iterations, learning rate and slots
    return list(attrs.items())


class _Graph:
    """The Variables reachable from named root objects, by path name.

    ``variables``: ``{name: Variable}`` (breadth first, so a Variable reachable twice is named
    by its shortest path, as TensorFlow names it); ``slots``: ``{name: (optimizer path,
    variable path, slot name)}`` for the optimizer slots among ``variables``;
    ``optimizers``: ``{path: optimizer}``; ``paths``: ``{variable._id: name}``.
    """

    def __init__(self, roots: dict, where: str):
        self.variables, self.slots, self.optimizers, self.paths = {}, {}, {}, {}
        seen = set()
        queue = deque(roots.items())
        while queue:
            path, obj = queue.popleft()
            if isinstance(obj, Variable):
                if obj._id not in self.paths:
                    self._add(path, obj, where)
                continue
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if _is_optimizer(obj):
                self.optimizers[path] = obj
            queue.extend((f"{path}/{name}", child) for name, child in _children(obj))
        for opath, opt in self.optimizers.items():
            for vid, slots in list(opt._slots.items()):
                vpath = self.paths.get(vid)
                if vpath is None:
                    raise ValueError(
                        f"{where}: the optimizer {opath!r} has slots ({', '.join(slots)}) for a "
                        "Variable that none of the checkpoint's objects holds; add the object "
                        "holding the trained Variables (the model) to the checkpoint, e.g. "
                        "tg.train.Checkpoint(model=model, optimizer=optimizer)")
                for sname, slot in slots.items():
                    self.add_slot(opath, vpath, sname, slot, where)

    def _add(self, name, variable, where):
        if name in self.variables:
            raise ValueError(f"{where}: two different Variables have the path name {name!r} "
                             "(a dict key containing '/'?); give them distinct names")
        self.variables[name] = variable
        self.paths[variable._id] = name

    def add_slot(self, opath, vpath, sname, slot, where):
        name = f"{opath}/slots/{vpath}/{sname}"
        self._add(name, slot, where)
        self.slots[name] = (opath, vpath, sname)
        return name


def _to_numpy(variable) -> np.ndarray:
    a = _backend.to_numpy(variable._value)  # NumPy: the array itself; JAX, others: a copy
    return a if a.flags.c_contiguous else a.copy(order="C")


def _checksums():
    """A thread pool for the CRC-32s (``pool.submit(zlib.crc32, array)``): zlib releases the
    GIL, so they run beside the file I/O and each other."""
    from concurrent.futures import ThreadPoolExecutor  # imported when used: import time

    return ThreadPoolExecutor(min(4, os.cpu_count() or 1))


def _fsync_file(path):
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows cannot open directories; its renames are durable enough
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_text_atomic(path, text):
    """Write ``text`` to ``path``: a temporary file in the same directory, fsync, rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _data_files(path) -> list:
    """The data files in ``path``'s directory that belong to the checkpoint ``path``."""
    directory, base = os.path.split(os.path.abspath(path))
    pattern = re.compile(re.escape(base) + r"\.data-[0-9a-f]{32}\.safetensors")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in names if pattern.fullmatch(n)]


def _remove_leftovers(directory, checkpoints):
    """Delete what saves of the checkpoints whose file names match the regular expression
    ``checkpoints`` left behind when they were killed: their staging directories
    (``<ckpt>.tmp-<8 hex>``, holding safetensors' own temporary file), temporary indexes
    (``<ckpt>.index.json.<random>.tmp``), data files that no index names, and temporary
    state files (``checkpoint.<random>.tmp``). One process saves into a directory at a time
    (as in TensorFlow): another's save in progress would be taken for leftovers."""
    staging = re.compile(rf"({checkpoints})\.tmp-[0-9a-f]{{8}}")
    temporary = re.compile(rf"(({checkpoints}){re.escape(INDEX_SUFFIX)}|"
                           rf"{re.escape(STATE_FILE)})\..+\.tmp")
    data = re.compile(rf"({checkpoints})\.data-[0-9a-f]{{32}}\.safetensors")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        full = os.path.join(directory, name)
        if staging.fullmatch(name):
            shutil.rmtree(full, ignore_errors=True)
        elif temporary.fullmatch(name):
            os.unlink(full)
        elif data.fullmatch(name) and name != _indexed_data(full.split(".data-")[0]):
            os.unlink(full)


def _indexed_data(path):
    """The data file name the index of checkpoint ``path`` names, or ``None``."""
    try:
        with open(path + INDEX_SUFFIX, encoding="utf-8") as f:
            return json.load(f).get("data")
    except (OSError, ValueError, AttributeError):
        return None


def _stored(a: np.ndarray) -> np.ndarray:
    """``a`` as safetensors stores it: complex128 (which it lacks) as float64 pairs in a last
    axis of 2, the same bytes; every other dtype as is."""
    return a.view(np.float64).reshape(*a.shape, 2) if a.dtype == np.complex128 else a


def _save_file(arrays, target, metadata):
    """safetensors' ``save_file``, its errors as ``OSError`` naming ``target``: it writes a
    temporary file beside ``target``, then renames it."""
    st = _safetensors()
    try:
        st.numpy.save_file(arrays, target, metadata=metadata)
    except st.SafetensorError as exc:
        code = re.search(r"os error (\d+)", str(exc))
        if code is None:
            raise
        errno = int(code.group(1))
        raise OSError(errno, f"{os.strerror(errno)}: saving the checkpoint "
                             f"{target.split('.tmp-')[0]!r} failed (safetensors: {exc}); "
                             "nothing was changed there", target) from exc


def _write(path, graph: _Graph):
    """Write ``graph``'s Variables as the checkpoint ``path`` (atomically, see the module)."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    _remove_leftovers(directory, re.escape(os.path.basename(path)))
    save_id = uuid.uuid4().hex
    arrays = {name: _to_numpy(variable) for name, variable in graph.variables.items()}
    data = f"{os.path.basename(path)}.data-{save_id}.safetensors"
    staging = os.path.join(directory, f"{os.path.basename(path)}.tmp-{save_id[:8]}")
    tmp = os.path.join(staging, data)
    try:
        os.mkdir(staging)
        with _checksums() as pool:
            stored = {name: _stored(a) for name, a in arrays.items()}
            crcs = [pool.submit(zlib.crc32, a) for a in stored.values()]
            _save_file(stored, tmp, metadata={"format": FORMAT, "id": save_id})
            _fsync_file(tmp)
            os.replace(tmp, os.path.join(directory, data))
            os.rmdir(staging)
            _fsync_dir(directory)
        records = []
        for (name, a), crc in zip(arrays.items(), crcs):
            record = {"name": name, "shape": list(a.shape), "dtype": a.dtype.name,
                      "crc32": crc.result()}
            if name in graph.slots:
                opath, vpath, sname = graph.slots[name]
                record["slot"] = {"optimizer": opath, "variable": vpath, "name": sname}
            records.append(record)
        index = {"format": FORMAT, "version": VERSION, "id": save_id, "data": data,
                 "tensors": records}
        _write_text_atomic(path + INDEX_SUFFIX, json.dumps(index, indent=1))  # the commit
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if os.path.exists(os.path.join(directory, data)):
            os.unlink(os.path.join(directory, data))
        raise
    _fsync_dir(directory)
    for old in _data_files(path):  # the data of the checkpoint this one replaced, leftovers
        if os.path.basename(old) != data:
            os.unlink(old)
    return path


def _damaged(path, what) -> CheckpointError:
    return CheckpointError(f"Checkpoint.restore({path!r}): {what}; nothing was restored")


def _read(path):
    """``(index, {name: NumPy array})`` of the checkpoint ``path``, every array checked
    against the index (names, shapes, dtypes, CRC-32)."""
    index_path = path + INDEX_SUFFIX
    if not os.path.exists(index_path):
        hint = (" (a directory: pass tg.train.latest_checkpoint(directory) for its latest "
                "checkpoint)" if os.path.isdir(path) else "")
        raise FileNotFoundError(
            f"Checkpoint.restore({path!r}): no checkpoint there: {index_path!r} does not exist"
            f"{hint}. A checkpoint path is what save() or write() returned, without a suffix")
    try:
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _damaged(path, f"the index {index_path!r} is not valid JSON ({exc}): the file "
                             "is damaged or not a tapegrad checkpoint") from exc
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise _damaged(path, f"{index_path!r} is not a tapegrad checkpoint index")
    if index.get("version") != VERSION:
        raise _damaged(path, f"the checkpoint has format version {index.get('version')!r}; "
                             f"this tapegrad reads version {VERSION}")
    try:
        records = {r["name"]: r for r in index["tensors"]}
        for r in records.values():
            r["shape"], r["dtype"], r["crc32"] = tuple(r["shape"]), np.dtype(r["dtype"]), int(r["crc32"])
        data_path = os.path.join(os.path.dirname(path), index["data"])
        save_id = index["id"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _damaged(path, f"the index {index_path!r} lacks or garbles an entry ({exc!r})") from exc
    st = _safetensors()
    arrays, crcs = {}, {}
    try:
        with _checksums() as pool, st.safe_open(data_path, framework="np") as f:
            metadata = f.metadata() or {}
            for name in f.keys():
                a = arrays[name] = f.get_tensor(name)
                crcs[name] = pool.submit(zlib.crc32, a)
            crcs = {name: crc.result() for name, crc in crcs.items()}
    except FileNotFoundError as exc:
        raise _damaged(path, f"its data file {data_path!r} is missing") from exc
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own SafetensorError
        raise _damaged(path, f"its data file {data_path!r} is truncated or damaged "
                             f"(safetensors: {exc})") from exc
    if metadata.get("id") != save_id:
        raise _damaged(path, f"the data file {data_path!r} was not written by the save that "
                             "wrote the index")
    if set(arrays) != set(records):
        raise _damaged(path, f"the data file {data_path!r} holds other arrays than the index "
                             f"lists: {_names(set(arrays) ^ set(records))}")
    for name, a in arrays.items():
        if records[name]["dtype"] == np.complex128 and a.dtype == np.float64 and a.shape[-1:] == (2,):
            arrays[name] = np.ascontiguousarray(a).view(np.complex128).reshape(a.shape[:-1])
    bad = [name for name, a in arrays.items()
           if a.shape != records[name]["shape"] or a.dtype != records[name]["dtype"]
           or crcs[name] != records[name]["crc32"]]
    if bad:
        raise _damaged(path, f"the data of {_names(bad)} in {data_path!r} does not match the "
                             "index (shape, dtype or CRC-32 checksum): the file is corrupted")
    return records, arrays


def _checkpoint_path(ckpt_dir_or_file):
    """A checkpoint path: ``ckpt_dir_or_file`` itself, or a directory's latest checkpoint."""
    if os.path.isdir(ckpt_dir_or_file):
        latest = latest_checkpoint(ckpt_dir_or_file)
        if latest is None:
            raise FileNotFoundError(f"tg.train: no checkpoint saved in the directory "
                                    f"{ckpt_dir_or_file!r}; give a path save() or write() "
                                    "returned")
        return latest
    return ckpt_dir_or_file


def list_variables(ckpt_dir_or_file) -> list:
    """``[(name, shape)]`` of the arrays in a checkpoint (TensorFlow's
    ``tf.train.list_variables``), sorted by name; ``shape`` is a list of ints. The names are
    tapegrad's (the objects' paths, e.g. ``model/w``), not TensorFlow's. Raises
    ``FileNotFoundError`` / ``CheckpointError`` as :meth:`Checkpoint.restore` does."""
    records, _ = _read(_checkpoint_path(ckpt_dir_or_file))
    return [(name, list(records[name]["shape"])) for name in sorted(records)]


def load_variable(ckpt_dir_or_file, name):
    """The NumPy array stored under ``name`` in a checkpoint (``tf.train.load_variable``).
    Raises ``KeyError`` naming the stored names if there is no such array."""
    _, arrays = _read(_checkpoint_path(ckpt_dir_or_file))
    if name not in arrays:
        raise KeyError(f"tg.train.load_variable: no array {name!r} in the checkpoint; it has "
                       f"{_names(arrays)} (tg.train.list_variables lists them)")
    return arrays[name]


def _names(names, limit=20) -> str:
    names = sorted(names)
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _read_state(directory) -> dict:
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        return {"latest": None, "all": []}
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"the checkpoint state file {path!r} is damaged ({exc}); delete "
                              "it, and pass a checkpoint path to restore() directly") from exc
    if not isinstance(state, dict) or not isinstance(state.get("all"), list):
        raise CheckpointError(f"{path!r} is not a tapegrad checkpoint state file")
    return state


def _write_state(directory, latest, kept):
    state = {"latest": os.path.basename(latest),
             "all": [os.path.basename(p) for p in kept]}
    _write_text_atomic(os.path.join(directory, STATE_FILE), json.dumps(state, indent=1))


def _exists(path) -> bool:
    return os.path.exists(path + INDEX_SUFFIX)


def _delete(path):
    """Delete the checkpoint ``path``: its index first, so a half-deleted one is never read."""
    if os.path.exists(path + INDEX_SUFFIX):
        os.unlink(path + INDEX_SUFFIX)
    for data in _data_files(path):
        os.unlink(data)


class Checkpoint:
    """Save and restore the Variables of some objects (TensorFlow 2's ``tf.train.Checkpoint``).

    ``Checkpoint(model=model, optimizer=optimizer, ...)``: each keyword names a root object.
    What is saved is found by walking them, breadth first: a Variable is saved under its path
    name; lists and tuples (by position), dicts (by key) and any other object's attributes
    (``__dict__`` and ``__slots__``, private ones included) are walked, so a model's weights
    are named like ``"model/encoder/dense_1/kernel"``. A Variable reachable along two paths is
    saved once, under the shorter. Functions (decorated ones and ``tg.function`` objects
    included), modules, classes, sets, arrays and plain Tensors are not walked (a Tensor is no
    state: it never changes).

    Optimizers (any object with ``_slots``, ``{variable._id: {slot name: Variable}}``, and
    ``_slot(variable, name)``, as :class:`tapegrad.optimizers.Optimizer` has) save
    ``iterations`` like any attribute, and each slot under the optimizer's path, ``slots``,
    the path of the Variable it belongs to and the slot's name:
    ``"optimizer/slots/model/dense/kernel/m"``, as TensorFlow's object graph names them. So
    the trained Variables must be in the checkpoint too (``ValueError`` otherwise). Restoring
    into an optimizer that has not run yet creates its slots with ``_slot``, so training
    resumes exactly where it stopped.

    ``save_counter`` (an int64 Variable, saved under that name) counts the :meth:`save` calls
    and numbers them. Root objects are also attributes (``checkpoint.model``).

    Raises ``ValueError`` for a root named ``save_counter``.
    """

    def __init__(self, **objects):
        if "save_counter" in objects:
            raise ValueError("Checkpoint: 'save_counter' is the name of the checkpoint's own "
                             "counter; give the object another name")
        self._objects = objects
        self.save_counter = Variable(np.int64(0), trainable=False, name="save_counter")

    def __getattr__(self, name):
        objects = self.__dict__.get("_objects", {})
        if name in objects:
            return objects[name]
        raise AttributeError(f"'Checkpoint' object has no attribute {name!r} (its objects: "
                             f"{', '.join(objects) or 'none'})")

    def _graph(self, where) -> _Graph:
        return _Graph({**self._objects, "save_counter": self.save_counter}, where)

    def write(self, path) -> str:
        """Write the checkpoint ``path`` (files ``path.index.json`` and
        ``path.data-<id>.safetensors``, replacing a checkpoint at ``path``); returns ``path``.

        Atomic: on an error (a full disk) or a crash, the checkpoint that was at ``path`` is
        still there whole. Variables on any backend are saved (JAX arrays, e.g. after a
        ``tg.function`` step, are copied to NumPy). ``save_counter`` is not changed.

        Raises ``ValueError`` when an optimizer has slots for Variables that none of the
        objects holds, or when two Variables get the same name; ``OSError`` from the files.
        """
        path = os.fspath(path)
        _write(path, self._graph(f"Checkpoint.write({path!r})"))
        return path

    def _save_numbered(self, file_prefix, number=None) -> str:
        n = int(self.save_counter) + 1
        self.save_counter.assign(n)
        try:
            return self.write(f"{os.fspath(file_prefix)}-{n if number is None else int(number)}")
        except BaseException:
            self.save_counter.assign(n - 1)
            raise

    def save(self, file_prefix) -> str:
        """Write a numbered checkpoint ``f"{file_prefix}-{n}"`` and return its path.

        ``n`` is ``save_counter`` after incrementing it (1 for the first save, continuing
        after a restore, as in TensorFlow). The directory's ``checkpoint`` state file is
        updated so that :func:`latest_checkpoint` finds it. Raises as :meth:`write`; on an
        error ``save_counter`` is left unchanged.
        """
        path = os.path.abspath(self._save_numbered(file_prefix))
        directory = os.path.dirname(path)
        state = _read_state(directory)
        kept = [os.path.join(directory, p) for p in state["all"] if p != os.path.basename(path)]
        _write_state(directory, path, [*kept, path])
        return path

    def restore(self, path):
        """Restore the Variables of the objects that the checkpoint ``path`` holds; returns a
        :class:`CheckpointLoadStatus`.

        ``path``: what :meth:`save` or :meth:`write` returned, or
        ``tg.train.latest_checkpoint(directory)``; ``None`` does nothing (so
        ``checkpoint.restore(manager.latest_checkpoint)`` starts fresh when there is none).

        As in TensorFlow, the restore matches names: a Variable of the objects that the
        checkpoint lacks keeps its value, and a value of the checkpoint that no object has
        (an optimizer's, restoring only the model: ``Checkpoint(model=model)``) is left
        unused. The status's ``assert_consumed()`` raises when either happened; unless
        ``expect_partial()`` is called on it, the status warns (``UserWarning``, naming
        them) when it is deleted, as TensorFlow logs them.

        The whole checkpoint is read and checked before any Variable is assigned: if the
        files are damaged, or a matched value's shape or dtype differs from its Variable's,
        nothing is restored. Optimizer slots that are in the checkpoint but not yet in the
        optimizer are created first (and removed again if the restore fails).

        Raises:
            FileNotFoundError: no checkpoint at ``path``.
            CheckpointError: (a ``ValueError``) the files are damaged (not valid JSON, a
                truncated or corrupted data file, a CRC-32 mismatch, a data file of another
                save), or values of the checkpoint have other shapes or dtypes than the
                Variables of the same names (all listed, with both).
            ImportError: safetensors is not installed.
        """
        if path is None:
            return CheckpointLoadStatus(None)
        path = os.fspath(path)
        records, arrays = _read(path)
        where = f"Checkpoint.restore({path!r})"
        graph = self._graph(where)
        created, unused = [], []
        for name, record in records.items():
            if name in graph.variables:
                continue
            slot = record.get("slot") or {}
            opt = graph.optimizers.get(slot.get("optimizer"))
            primary = graph.variables.get(slot.get("variable"))
            if opt is None or primary is None or not isinstance(slot.get("name"), str):
                unused.append(name)
                continue
            had = primary._id in opt._slots
            variable = opt._slot(primary, slot["name"])
            created.append((opt, primary._id, slot["name"], had))
            graph.add_slot(slot["optimizer"], slot["variable"], slot["name"], variable, where)
        unrestored = [name for name in graph.variables if name not in records]
        mismatched = [
            f"{name}: checkpoint {records[name]['shape']} {records[name]['dtype']}, object "
            f"{v.shape} {v.dtype}" for name, v in graph.variables.items()
            if name in records and (records[name]["shape"] != v.shape
                                    or records[name]["dtype"] != v.dtype)]
        if mismatched:
            for opt, vid, sname, had in reversed(created):
                del opt._slots[vid][sname]
                if not had:
                    del opt._slots[vid]
            raise CheckpointError(
                f"{where}: the checkpoint does not fit the objects; nothing was restored\n"
                f"  shape or dtype mismatch ({len(mismatched)}): " + "; ".join(sorted(mismatched))
                + "\n  (names are paths from the Checkpoint's keyword arguments; build the "
                "objects as they were when the checkpoint was saved)")
        for name, variable in graph.variables.items():
            if name not in records:
                continue
            if type(variable._value) is np.ndarray:  # the array was just read: no copy
                variable._set(arrays[name])
            else:
                variable.assign(arrays[name])
        return CheckpointLoadStatus(path, unused, unrestored,
                                    [name for name in graph.variables if name in records])


class CheckpointLoadStatus:
    """What :meth:`Checkpoint.restore` returns, with TensorFlow's methods:
    ``checkpoint.restore(path).expect_partial()``, ``.assert_consumed()``, ...

    ``path``: the checkpoint restored, or None (``restore(None)``: nothing to restore, as
    TensorFlow's initialization-only status; every assertion then raises
    ``AssertionError``). ``unused``: the names of the checkpoint's values that no Variable
    of the objects took; ``unrestored``: the names of the objects' Variables that the
    checkpoint lacks; ``matched``: the names restored, ``save_counter`` aside (all three
    sorted lists of path names). The assertions return the status
    when they hold. Deleted with something unused or unrestored and without
    ``expect_partial()``, the status warns (``UserWarning``) naming them.
    """

    def __init__(self, path, unused=(), unrestored=(), matched=()):
        self.path = path
        self.unused, self.unrestored = sorted(unused), sorted(unrestored)
        self.matched = sorted(set(matched) - {"save_counter"})
        self._expect_partial = False

    def _fail(self, what):
        raise AssertionError(f"Checkpoint.restore({self.path!r}): {what}; call "
                             "expect_partial() on the status if a partial restore is meant")

    def _assert_restored(self):
        if self.path is None:
            raise AssertionError("no checkpoint was restored (Checkpoint.restore(None))")

    def assert_consumed(self):
        """Every checkpoint value matched a Variable and every Variable was restored;
        ``AssertionError`` naming those that were not otherwise."""
        self.assert_existing_objects_matched()
        if self.unused:
            self._fail(f"values of the checkpoint that no object has ({len(self.unused)}): "
                       f"{_names(self.unused)}")
        return self

    def assert_existing_objects_matched(self):
        """Every Variable of the objects was restored (values of the checkpoint may be left
        unused); ``AssertionError`` naming the Variables the checkpoint lacks otherwise."""
        self._assert_restored()
        if self.unrestored:
            self._fail(f"Variables of the objects that the checkpoint lacks "
                       f"({len(self.unrestored)}): {_names(self.unrestored)}")
        return self

    def assert_nontrivial_match(self):
        """Something was restored: ``AssertionError`` when the checkpoint shared no
        Variable with the objects (``save_counter`` aside)."""
        self._assert_restored()
        if not self.matched:
            self._fail("no Variable of the objects is in the checkpoint")
        return self

    def expect_partial(self):
        """Silence the warning about unused values and unrestored Variables at deletion (a
        partial restore is meant); returns the status."""
        self._expect_partial = True
        return self

    def run_restore_ops(self, session=None):
        """Nothing to run: the restore happened eagerly."""
        return self

    def __del__(self):
        if self._expect_partial or not (self.unused or self.unrestored):
            return
        import warnings
        lines = [f"Checkpoint.restore({self.path!r}) was partial:"]
        if self.unused:
            lines.append(f"  values of the checkpoint that no object has ({len(self.unused)}): "
                         f"{_names(self.unused)}")
        if self.unrestored:
            lines.append(f"  Variables of the objects that the checkpoint lacks (not restored, "
                         f"{len(self.unrestored)}): {_names(self.unrestored)}")
        lines.append("  call .expect_partial() on the status if that is meant, or "
                     ".assert_consumed() to make it an error")
        warnings.warn("\n".join(lines), UserWarning, stacklevel=2)

    def __repr__(self):
        return f"<CheckpointLoadStatus path={self.path!r}>"


def latest_checkpoint(directory):
    """The path of the latest checkpoint saved in ``directory`` (by :meth:`Checkpoint.save`
    or a :class:`CheckpointManager`), or ``None`` if there is none (no directory, no state
    file, or its latest checkpoint was deleted). Raises ``CheckpointError`` if the state file
    is damaged."""
    directory = os.fspath(directory)
    latest = _read_state(directory).get("latest")
    if not latest:
        return None
    path = os.path.abspath(os.path.join(directory, latest))
    return path if _exists(path) else None


class CheckpointManager:
    """Numbered checkpoints in one directory, keeping the last ``max_to_keep``
    (TensorFlow 2's ``tf.train.CheckpointManager``).

    Args:
        checkpoint: the :class:`Checkpoint` to save.
        directory: where the checkpoints go (created if needed); its ``checkpoint`` state file
            lists them, so a new manager on the same directory (a restarted job) continues
            with the same list.
        max_to_keep: how many to keep (an int >= 1; older ones are deleted after each save),
            or ``None`` to keep all.
        checkpoint_name: the file prefix, ``"ckpt"``: checkpoints are ``directory/ckpt-<n>``.

    Starting a manager removes what killed saves of ``checkpoint_name`` checkpoints left in the
    directory (see the module); one process saves into a directory at a time.

    Raises ``TypeError`` if ``checkpoint`` is not a Checkpoint, ``ValueError`` for a bad
    ``max_to_keep``.
    """

    def __init__(self, checkpoint, directory, max_to_keep, checkpoint_name="ckpt"):
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"CheckpointManager: expected a tg.train.Checkpoint, got "
                            f"{type(checkpoint).__name__}; wrap the objects: "
                            "tg.train.Checkpoint(model=model, optimizer=optimizer)")
        if max_to_keep is not None and (isinstance(max_to_keep, bool)
                                        or not isinstance(max_to_keep, int) or max_to_keep < 1):
            raise ValueError(f"CheckpointManager: max_to_keep must be an int >= 1 or None "
                             f"(keep all), got {max_to_keep!r}")
        self._checkpoint = checkpoint
        self._directory = os.path.abspath(os.fspath(directory))
        self._max_to_keep = max_to_keep
        self._prefix = os.path.join(self._directory, checkpoint_name)
        os.makedirs(self._directory, exist_ok=True)
        _remove_leftovers(self._directory, re.escape(checkpoint_name) + r"-\d+")
        mine = re.compile(re.escape(checkpoint_name) + r"-\d+")
        self._checkpoints = [os.path.join(self._directory, p)
                             for p in _read_state(self._directory)["all"]
                             if mine.fullmatch(p) and _exists(os.path.join(self._directory, p))]

    @property
    def directory(self) -> str:
        """The directory (absolute)."""
        return self._directory

    @property
    def checkpoints(self) -> list:
        """The paths of the kept checkpoints, oldest first."""
        return list(self._checkpoints)

    @property
    def latest_checkpoint(self):
        """The path of the newest checkpoint, or ``None``."""
        return self._checkpoints[-1] if self._checkpoints else None

    def save(self, checkpoint_number=None) -> str:
        """Save a checkpoint ``directory/ckpt-<n>``, delete the oldest beyond ``max_to_keep``,
        and return its path.

        ``n`` is ``checkpoint_number`` if given (an int, e.g. the training step), else the
        checkpoint's ``save_counter`` after incrementing it (it is incremented either way).
        Raises as :meth:`Checkpoint.write`; an error leaves every kept checkpoint intact.
        """
        path = self._checkpoint._save_numbered(self._prefix, checkpoint_number)
        kept = [p for p in self._checkpoints if p != path] + [path]
        dropped = kept[:-self._max_to_keep] if self._max_to_keep else []
        kept = kept[len(dropped):]
        _write_state(self._directory, path, kept)
        self._checkpoints = kept
        for old in dropped:
            _delete(old)
        return path
