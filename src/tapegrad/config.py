"""Process-wide switches (``tg.config``), with TensorFlow 2's names."""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import types

_run_eagerly = False
_synchronous = None  # set_synchronous_execution's setting; None: tapegrad's default (True)
_jax_configured = False  # configure_jax has run
_traces = threading.local()  # tg.function traces open in this thread (``tracing``)


def tracing() -> bool:
    """Whether this thread is tracing a ``tg.function`` (values are JAX tracers): control flow
    (``tg.cond``, ``tg.lax.scan``, ...) then builds XLA control-flow ops instead of running as
    Python."""
    return getattr(_traces, "depth", 0) > 0


@contextlib.contextmanager
def trace_scope():
    """The block in which ``tg.function`` traces a Python function (see :func:`tracing`)."""
    _traces.depth = getattr(_traces, "depth", 0) + 1
    try:
        yield
    finally:
        _traces.depth -= 1


def run_functions_eagerly(run_eagerly: bool) -> None:
    """Make every ``tg.function`` run its Python function eagerly (``True``) or compile it
    again (``False``), as ``tf.config.run_functions_eagerly``: for debugging with prints and
    breakpoints. Raises ``TypeError`` for a non-bool."""
    global _run_eagerly
    if not isinstance(run_eagerly, bool):
        raise TypeError(f"run_functions_eagerly: expected True or False, got {run_eagerly!r}")
    _run_eagerly = run_eagerly


def functions_run_eagerly() -> bool:
    """Whether :func:`run_functions_eagerly` is on."""
    return _run_eagerly


_ASYNC_FLAG = "jax_cpu_enable_async_dispatch"


def _backends_started() -> bool:
    """Whether JAX has started its backends (assumed so where this JAX cannot say)."""
    try:
        from jax._src import xla_bridge  # no public equivalent (JAX 0.4.30 to 0.10)
    except ImportError:
        return True
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return started() if started is not None else True


def _jax_with_flag():
    """The ``jax`` module if it is imported and has the CPU dispatch flag, else None."""
    jax = sys.modules.get("jax")
    return jax if jax is not None and _ASYNC_FLAG in getattr(jax.config, "values", {}) else None


def set_synchronous_execution(enable) -> None:
    """Run compiled programs on the CPU synchronously (``True``) or with JAX's asynchronous
    dispatch (``False``); ``None`` restores tapegrad's default, ``True``. As
    ``tf.config.experimental.set_synchronous_execution`` (here ``tg.config.experimental``).

    A ``tg.function`` call waits for its results (it returns them as arrays of the default
    backend), so asynchronous dispatch on the CPU only adds a hand-over between threads: the
    200-op W1 program of ``benchmarks/bench_function.py`` takes about 15 us run inline and 40
    us dispatched. tapegrad therefore turns JAX's ``jax_cpu_enable_async_dispatch`` off when
    it first uses JAX, unless the environment variable ``JAX_CPU_ENABLE_ASYNC_DISPATCH`` sets
    it or this function was called with ``False``. GPUs are not affected. JAX reads the flag
    when it starts its CPU backend, so the switch must come before JAX's first computation.

    Raises ``TypeError`` unless ``enable`` is a bool or ``None``; ``RuntimeError`` if JAX has
    already started its backends with the other mode.
    """
    global _synchronous
    if enable is not None and not isinstance(enable, bool):
        raise TypeError(f"set_synchronous_execution: expected True, False or None, got "
                        f"{enable!r}")
    jax = _jax_with_flag()
    if jax is not None and _backends_started():
        now = not jax.config.values[_ASYNC_FLAG]
        if now != (enable is not False):
            raise RuntimeError(
                f"set_synchronous_execution({enable}): JAX has already started its backends "
                f"with {'synchronous' if now else 'asynchronous'} CPU execution, which cannot "
                "change afterwards; call it at the start of the program, before the first "
                "tg.function call or JAX computation, or set the environment variable "
                "JAX_CPU_ENABLE_ASYNC_DISPATCH (1 or 0) before Python starts (needed with "
                "TAPEGRAD_ARRAY_BACKEND=jax.numpy, where importing tapegrad starts JAX)")
    _synchronous = enable
    if jax is not None and not _backends_started():
        jax.config.update(_ASYNC_FLAG, enable is False)


def get_synchronous_execution() -> bool:
    """Whether compiled programs run synchronously on the CPU: JAX's setting once it has
    started, else the mode :func:`set_synchronous_execution` chose, else the one the
    environment variable ``JAX_CPU_ENABLE_ASYNC_DISPATCH`` sets (default ``True``)."""
    jax = _jax_with_flag()
    if jax is not None and (_jax_configured or _backends_started()):
        return not jax.config.values[_ASYNC_FLAG]
    if _synchronous is None and "JAX_CPU_ENABLE_ASYNC_DISPATCH" in os.environ:  # JAX's reading
        return os.environ["JAX_CPU_ENABLE_ASYNC_DISPATCH"].lower() in ("n", "no", "f", "false",
                                                                        "off", "0")
    return _synchronous is not False


def configure_jax(jax, process_x64=None) -> None:
    """Set up ``jax`` for tapegrad (called wherever tapegrad first uses it): the CPU execution
    mode of :func:`set_synchronous_execution` if JAX has not started its backends yet and the
    environment does not set it; and, if ``process_x64``, JAX's 64-bit mode for the whole
    process. ``tg.function`` passes ``False``: it traces and runs its programs inside
    :func:`x64_scope`, so the user's own JAX code keeps its setting. ``None`` (the other
    callers) means ``True`` outside a ``tg.function`` trace: JAX as the default array backend
    (``TAPEGRAD_ARRAY_BACKEND=jax.numpy``: eager tapegrad computes on JAX arrays, in float64
    as on every backend), or control flow compiled on the tracers of the user's own
    ``jax.jit``; and ``False`` inside one (control flow in a ``tg.function``, already in
    its scope)."""
    global _jax_configured
    if process_x64 is None:
        process_x64 = not tracing()
    if process_x64 and not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)
    if _jax_configured:
        return
    _jax_configured = True
    if _ASYNC_FLAG not in jax.config.values:  # a JAX without the flag: its own mode
        return
    if "JAX_CPU_ENABLE_ASYNC_DISPATCH" in os.environ and _synchronous is None:
        return
    if not _backends_started():
        jax.config.update(_ASYNC_FLAG, _synchronous is False)


def x64_scope(jax):
    """A context manager turning JAX's 64-bit mode on in this thread for its block only
    (``jax.enable_x64(True)``, or ``jax.experimental.enable_x64()`` on older JAX); JAX keys its
    compiled programs by the setting, so a program traced in it must be called in it."""
    scope = getattr(jax, "enable_x64", None)
    if callable(scope) and hasattr(scope, "value"):  # JAX >= 0.6: a config state
        return scope(True)
    try:
        from jax.experimental import enable_x64
    except ImportError:  # no scoped switch in this JAX: the process-wide one
        if not jax.config.jax_enable_x64:
            jax.config.update("jax_enable_x64", True)
        return contextlib.nullcontext()
    return enable_x64()


experimental = types.SimpleNamespace(set_synchronous_execution=set_synchronous_execution,
                                     get_synchronous_execution=get_synchronous_execution)
experimental.__doc__ = "``tg.config.experimental``: TensorFlow's experimental config names."
