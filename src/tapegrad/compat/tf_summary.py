"""``tf.summary`` for ``tapegrad.compat.tensorflow``: summaries written as JSON lines.

``create_file_writer(logdir)`` makes ``logdir`` and appends to ``logdir/summaries.jsonl``:
one JSON object per summary, ``{"wall_time", "step", "tag", "kind", ...}`` with ``"value"``
(``scalar``: a float; ``text``: a string, or nested lists of strings), or ``"buckets"``
(``histogram``: ``[left, right, count]`` rows). This is NOT TensorBoard's event-file format
(TensorBoard does not read it; ``pandas.read_json(path, lines=True)`` does). Inside
``tf.function`` the values (and a traced step) reach the file when the compiled function
runs, through a host callback (``jax.debug.callback``, ordered).
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time

import numpy as np

import tapegrad as tg

__all__ = ["create_file_writer", "create_noop_writer", "scalar", "histogram", "text", "flush",
           "SummaryWriter", "experimental"]

_state = threading.local()  # .writer: the default writer; .step: the default step


class SummaryWriter:
    """A writer of summaries to ``path`` (``logdir/summaries.jsonl``; None: a no-op writer);
    see the module doc for the format."""

    def __init__(self, logdir):
        self.path = None if logdir is None else os.path.join(os.fspath(logdir),
                                                             "summaries.jsonl")
        self._lines = []
        self._lock = threading.Lock()
        if self.path is not None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)

    @contextlib.contextmanager
    def as_default(self, step=None):
        """Within the ``with`` block, this writer (and ``step``, if given) is the default."""
        old = getattr(_state, "writer", None), getattr(_state, "step", None)
        _state.writer = self
        if step is not None:
            _state.step = step
        try:
            yield self
        finally:
            self.flush()
            _state.writer, _state.step = old

    def set_as_default(self, step=None):
        """Make this writer (and ``step``, if given) the default from now on."""
        _state.writer = self
        if step is not None:
            _state.step = step

    def init(self):
        """Does nothing (the file is opened when flushed)."""

    def _add(self, record):
        with self._lock:
            self._lines.append(json.dumps(record))

    def flush(self):
        """Append the summaries written so far to the file."""
        with self._lock:
            lines, self._lines = self._lines, []
        if lines and self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")

    def close(self):
        """Flush (the writer may still be used)."""
        self.flush()


def create_file_writer(logdir, max_queue=None, flush_millis=None, filename_suffix=None,
                       name=None, experimental_trackable=False, experimental_mesh=None):
    """``tf.summary.create_file_writer``: a :class:`SummaryWriter` appending to
    ``logdir/summaries.jsonl`` (``logdir`` is made if missing)."""
    return SummaryWriter(logdir)


def create_noop_writer():
    """``tf.summary.create_noop_writer``: a writer that writes nothing."""
    return SummaryWriter(None)


def set_step(step):
    """``tf.summary.experimental.set_step``: the default step (an int, Tensor or Variable)."""
    _state.step = step


def get_step():
    """``tf.summary.experimental.get_step``: the default step, or None."""
    return getattr(_state, "step", None)


experimental = type("experimental", (), {
    "set_step": staticmethod(set_step), "get_step": staticmethod(get_step),
    "__doc__": "``tf.summary.experimental``: ``set_step`` and ``get_step``."})


def _write(kind, name, data, step, convert):
    """Record ``convert(array)`` under ``name`` at ``step`` for the default writer, now or
    (traced) when the program runs. Returns whether a writer was there."""
    writer = getattr(_state, "writer", None)
    if writer is None:
        return False
    step = get_step() if step is None else step
    if step is None:
        raise ValueError(f"tf.summary.{kind}({name!r}): no step: pass step= or set one with "
                         "tf.summary.experimental.set_step(step) or writer.as_default(step)")
    tensors = [tg.convert_to_tensor(data), tg.convert_to_tensor(
        step.read_value() if isinstance(step, tg.Variable) else step)]

    def record(value, step_value):
        writer._add({"wall_time": time.time(), "step": int(np.asarray(step_value)),
                     "tag": name, "kind": kind, **convert(np.asarray(value))})

    jax = tg.config.loaded_jax()
    if jax is not None and any(isinstance(t._value, jax.core.Tracer) for t in tensors):
        values = [t._value if isinstance(t._value, jax.core.Tracer) else t.numpy()
                  for t in tensors]  # constants as NumPy: JAX takes no other library's arrays
        jax.debug.callback(record, *values, ordered=True)
    else:
        record(*(t.numpy() for t in tensors))
    return True


def scalar(name, data, step=None, description=None):
    """``tf.summary.scalar``: the 0-d ``data`` as a float at ``step`` (default: the one set).
    Returns True if a default writer took it, False if there is none; raises ``ValueError``
    with no step."""
    return _write("scalar", name, data, step, lambda a: {"value": float(a)})


def _buckets(a, buckets):
    a = a.astype(np.float64).ravel()
    if a.size == 0:
        return {"buckets": []}
    counts, edges = np.histogram(a, bins=buckets, range=None if a.min() < a.max() else (
        a.min() - 0.5, a.max() + 0.5))
    return {"buckets": [[float(lo), float(hi), int(c)]
                        for lo, hi, c in zip(edges[:-1], edges[1:], counts)]}


def histogram(name, data, step=None, buckets=None, description=None):
    """``tf.summary.histogram``: ``buckets`` (30 by default, as TensorFlow) equal-width
    ``[left, right, count]`` rows over ``data``'s range. Returns as :func:`scalar`."""
    return _write("histogram", name, data, step,
                  lambda a: _buckets(a, 30 if buckets is None else int(buckets)))


def text(name, data, step=None, description=None):
    """``tf.summary.text``: a string (or an array of them, as nested lists). Returns as
    :func:`scalar`. Eager only for strings (a Tensor of strings does not exist here)."""
    writer = getattr(_state, "writer", None)
    if isinstance(data, (str, bytes, list, tuple, np.ndarray)):
        if writer is None:
            return False
        step = get_step() if step is None else step
        if step is None:
            raise ValueError(f"tf.summary.text({name!r}): no step: pass step= or set one")
        value = np.asarray(data).astype(str)
        writer._add({"wall_time": time.time(), "step": int(tg.convert_to_tensor(
            step.read_value() if isinstance(step, tg.Variable) else step).numpy()),
            "tag": name, "kind": "text", "value": value.tolist()})
        return True
    raise TypeError(f"tf.summary.text({name!r}): data must be a str or a list or array of "
                    f"them, got {type(data).__name__}")


def flush(writer=None, name=None):
    """``tf.summary.flush``: flush ``writer`` (default: the default writer)."""
    writer = writer if writer is not None else getattr(_state, "writer", None)
    if writer is not None:
        writer.flush()
