"""Process-wide switches (``tg.config``), with TensorFlow 2's names."""
from __future__ import annotations

import contextlib
import sys
import threading
import types

_run_eagerly = False
_tensor_float_32 = False  # see enable_tensor_float_32_execution
_traces = threading.local()  # tg.function traces open in this thread (``tracing``)
_on_jax = []  # functions f(jax) for configure_jax to call once (see when_jax_loaded)
_replica = threading.local()  # .context: see replica_context


def tracing() -> bool:
    """Whether this thread is tracing a ``tg.function`` (values are JAX tracers): control flow
    (``tg.cond``, ``tg.lax.scan``, ...) then builds XLA control-flow ops instead of running as
    Python."""
    return getattr(_traces, "depth", 0) > 0


def replica_context():
    """The replica context of the ``tg.distribute`` replica function this thread is tracing
    (``MirroredStrategy.run``: one trace per replica under ``jax.shard_map``), or None. The
    optimizers sum their gradients across replicas through it and ``tg.nn.compute_average_loss``
    reads the replica count from it; ``tg.distribute`` sets it (``_replica.context``)."""
    return getattr(_replica, "context", None)


@contextlib.contextmanager
def trace_scope():
    """The block in which ``tg.function`` traces a Python function (see :func:`tracing`)."""
    depth = getattr(_traces, "depth", 0)
    if depth == 0:
        _traces.constants = {}
    _traces.depth = depth + 1
    try:
        yield
    finally:
        _traces.depth -= 1
        if _traces.depth == 0:
            _traces.constants = None


def trace_constants() -> dict:
    """The NumPy copies of other libraries' arrays made for this thread's trace (see
    ``_backend.mixable_with_jax``): ``{id(array): (array, copy)}``, one copy per array, so
    that the traced program holds each constant once. Valid while :func:`tracing`."""
    return _traces.constants


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


def enable_tensor_float_32_execution(enabled: bool) -> None:
    """Let compiled float32 matrix products and convolutions use TensorFloat-32 (``True``) or
    not (``False``, the default), as ``tf.config.experimental.enable_tensor_float_32_execution``.

    TF32 (GPUs since NVIDIA's Ampere) rounds float32 inputs of a product to 10 mantissa bits:
    several times faster, but relative errors near 1e-3 instead of 1e-7. Unlike TensorFlow
    (and like PyTorch's matmul default), tapegrad keeps it off, so that a compiled program
    computes what eager execution computes: its programs trace with JAX's float32 precision
    (``jax.default_matmul_precision("float32")``); with ``True`` they keep JAX's default
    precision, which is TF32 on such GPUs. On CPUs both give the same numbers. Programs
    traced before a change are traced again at their next call. Raises ``TypeError`` for a
    non-bool."""
    global _tensor_float_32
    if not isinstance(enabled, bool):
        raise TypeError(f"enable_tensor_float_32_execution: expected True or False, got "
                        f"{enabled!r}")
    _tensor_float_32 = enabled


def tensor_float_32_execution_enabled() -> bool:
    """Whether :func:`enable_tensor_float_32_execution` is on (``False`` by default)."""
    return _tensor_float_32


experimental = types.SimpleNamespace(
    enable_tensor_float_32_execution=enable_tensor_float_32_execution,
    tensor_float_32_execution_enabled=tensor_float_32_execution_enabled)


def precision_scope(jax):
    """A context manager in which JAX traces float32 products and convolutions at float32
    precision, unless :func:`enable_tensor_float_32_execution` is on (then JAX's default).
    JAX records the precision in each traced product, so only tracing needs it."""
    if _tensor_float_32:
        return contextlib.nullcontext()
    return jax.default_matmul_precision("float32")


def jax_module():
    """The ``jax`` module, fully imported: the one way tapegrad loads JAX. The first call
    imports it under a lock, so that threads calling it meanwhile wait for the import to
    finish instead of seeing a half-imported module. Nothing of JAX's configuration is
    changed (see :func:`configure_jax`). Raises JAX's own ``ImportError`` when it is not
    installed (or ``sys.modules["jax"]`` is None, as tests make it); callers add what to
    install."""
    global _jax
    jax = _jax
    if jax is None or sys.modules.get("jax") is not jax:
        with _jax_lock:
            import jax

            while _on_jax:  # what waited for JAX (when_jax_loaded), once
                _on_jax.pop(0)(jax)
            _jax = jax
    return jax


def loaded_jax():
    """``jax`` if it is imported (by tapegrad or by the user), else None, without importing it:
    for the places that only look whether a value is JAX's (a tracer exists only once JAX is
    imported). While another thread is still importing it, waits for that import to finish
    (a half-imported module has no ``jax.core`` yet), as :func:`jax_module` does."""
    jax = sys.modules.get("jax")
    if jax is None or jax is _jax:
        return jax
    try:
        return jax_module()
    except ImportError:  # the user's import failed: not loaded
        return None


_jax = None  # jax_module's module, once imported
_jax_lock = threading.Lock()


def configure_jax(jax) -> None:
    """Turn on JAX's 64-bit mode for the whole process: only where JAX is tapegrad's eager
    backend (``TAPEGRAD_ARRAY_BACKEND=jax.numpy``: eager tapegrad computes on JAX arrays, in
    float64 as on every backend). Everything else of tapegrad that runs JAX (``tg.function``,
    ``tg.to_jax``/``tg.from_jax``, ``tg.vmap``, ``tg.vectorized_map``, vectorized Jacobians)
    turns it on in its own calls only, with :func:`x64_scope` or :func:`x64_caller`, so the
    user's own JAX code keeps its setting. Nothing else of JAX's configuration is changed: its
    CPU dispatch stays asynchronous (its default) unless the user set it otherwise."""
    if not jax.config.jax_enable_x64:
        jax.config.update("jax_enable_x64", True)


def when_jax_loaded(f) -> None:
    """Call ``f(jax)`` now if JAX is imported, else when tapegrad first loads JAX
    (:func:`jax_module`): how ``tg.tree_util``'s registered classes reach
    ``jax.tree_util`` without importing JAX (seconds) for tapegrad's sake."""
    with _jax_lock:
        jax = _jax
        if jax is None:
            _on_jax.append(f)
    if jax is not None:
        f(jax)
    else:
        loaded_jax()  # imported by the user: jax_module calls f now


def x64_enabled(jax) -> bool:
    """Whether JAX's 64-bit mode is on in this thread (then :func:`x64_scope` is not needed:
    JAX keys its programs by the setting's value, not by how it was set)."""
    state = getattr(jax, "enable_x64", None)
    if state is not None and hasattr(state, "value"):  # JAX >= 0.6: thread-local aware
        return state.value
    return bool(jax.config.jax_enable_x64)


def x64_caller(jax):
    """A function ``call(f, args)`` that returns ``f(*args)`` run as ``with x64_scope(jax)``
    runs it (JAX's 64-bit mode on in this thread for the call only), for a call made again
    and again: where JAX's switch is a thread-local setting without hooks (JAX >= 0.6) it
    swaps the setting in and back as the context manager does, without building one (0.5 us
    against 4.5 us a call on the shared 2-core machine)."""
    state = getattr(jax, "enable_x64", None)
    if (hasattr(state, "swap_local") and hasattr(state, "set_local")
            and getattr(state, "_update_thread_local_hook", None) is None):
        swap, restore = state.swap_local, state.set_local

        def call(f, args):
            previous = swap(True)
            try:
                return f(*args)
            finally:
                restore(previous)
        return call

    def call(f, args):
        with x64_scope(jax):
            return f(*args)
    return call


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
