"""``tf.debugging`` for ``tapegrad.compat.tensorflow``: TensorFlow's assertions.

Value checks (``assert_equal``, ``assert_near``, ``assert_less``, ..., ``check_numerics``)
raise ``ValueError`` (this module's ``tf.errors.InvalidArgumentError``) eagerly. Inside
``tf.function`` they run when the compiled function runs, as a host callback
(``jax.debug.callback``) with the values; a failure there reaches the caller as JAX's
``JaxRuntimeError`` carrying the same message (with a note naming the function). Static checks
(``assert_rank``, ``assert_shapes``, ``assert_type``, ``is_numeric_tensor``) look at shapes
and dtypes, known at trace time, and raise ``ValueError``/``TypeError`` at once.
"""
from __future__ import annotations

import numpy as np

import tapegrad as tg

__all__ = ["assert_equal", "assert_near", "assert_less", "assert_less_equal",
           "assert_greater", "assert_greater_equal", "assert_positive", "assert_non_negative",
           "assert_rank", "assert_shapes", "assert_all_finite", "check_numerics",
           "assert_type", "is_numeric_tensor"]


def _run(check, *tensors):
    """``check(*arrays)`` (NumPy arrays) now, or, inside a trace, when the program runs."""
    jax = tg.config.loaded_jax()
    if jax is not None and any(isinstance(t._value, jax.core.Tracer) for t in tensors):
        values = [t._value if isinstance(t._value, jax.core.Tracer) else t.numpy()
                  for t in tensors]  # constants as NumPy: JAX takes no other library's arrays
        jax.debug.callback(lambda *a: check(*(np.asarray(v) for v in a)), *values, ordered=True)
    else:
        check(*(np.asarray(t.numpy()) for t in tensors))


def _pair(x, y):
    x = tg.convert_to_tensor(x)
    y = tg.convert_to_tensor(y, dtype=x.dtype) if not isinstance(y, tg.Tensor) else y
    return x, y


def _comparison(symbol, holds):
    def assert_(x, y, message=None, summarize=None, name=None):
        def check(a, b):
            if not np.all(holds(a, b)):
                raise ValueError(f"{message + ' ' if message else ''}Condition x {symbol} y did "
                                 f"not hold element-wise: x = {a}, y = {b}")
        _run(check, *_pair(x, y))

    return assert_


def _doc(fn, name, symbol):
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``tf.debugging.{name}(x, y, message=None)``: raise ``ValueError`` "
                  f"(``tf.errors.InvalidArgumentError``) unless ``x {symbol} y`` holds for "
                  "every element (``x`` and ``y`` broadcast; a Python ``y`` takes ``x``'s "
                  "dtype); the message starts with ``message`` and shows both values. Returns "
                  "None; inside ``tf.function`` checked when the program runs (module doc).")
    return fn


assert_equal = _doc(_comparison("==", np.equal), "assert_equal", "==")
assert_less = _doc(_comparison("<", np.less), "assert_less", "<")
assert_less_equal = _doc(_comparison("<=", np.less_equal), "assert_less_equal", "<=")
assert_greater = _doc(_comparison(">", np.greater), "assert_greater", ">")
assert_greater_equal = _doc(_comparison(">=", np.greater_equal), "assert_greater_equal", ">=")


def assert_positive(x, message=None, summarize=None, name=None):
    """``tf.debugging.assert_positive``: ``assert_greater(x, 0)``."""
    assert_greater(x, 0, message)


def assert_non_negative(x, message=None, summarize=None, name=None):
    """``tf.debugging.assert_non_negative``: ``assert_greater_equal(x, 0)``."""
    assert_greater_equal(x, 0, message)


def assert_near(x, y, rtol=None, atol=None, message=None, summarize=None, name=None):
    """``tf.debugging.assert_near``: raise ``ValueError`` unless ``|x - y| <= atol + rtol *
    |y|`` element-wise; ``rtol`` and ``atol`` default to 10 times the machine epsilon of
    ``x``'s (floating or complex) dtype, as in TensorFlow. Returns None."""
    x, y = _pair(x, y)
    eps = np.finfo(x.dtype).eps
    rtol = 10 * eps if rtol is None else rtol
    atol = 10 * eps if atol is None else atol

    def check(a, b):
        if not np.all(np.abs(a - b) <= atol + rtol * np.abs(b)):
            raise ValueError(f"{message + ' ' if message else ''}x and y not equal to tolerance "
                             f"rtol = {rtol}, atol = {atol}: x = {a}, y = {b}")
    _run(check, x, y)


def check_numerics(tensor, message, name=None):
    """``tf.debugging.check_numerics``: ``tensor`` itself after checking that it has no NaN
    or Inf; raises ``ValueError`` ``"<message> : Tensor had NaN values"`` (or Inf) as
    TensorFlow's ``InvalidArgumentError``. Gradient: the identity."""
    t = tg.convert_to_tensor(tensor)

    def check(a):
        for bad, what in ((np.isnan, "NaN"), (np.isinf, "Inf")):
            if np.any(bad(a)):
                raise ValueError(f"{message} : Tensor had {what} values")
    _run(check, t)
    return t


def assert_all_finite(t, msg, name=None, x=None, message=None):
    """``tf.debugging.assert_all_finite``: :func:`check_numerics` (``t`` returned)."""
    return check_numerics(t if x is None else x, msg if message is None else message)


def assert_rank(x, rank, message=None, name=None):
    """``tf.debugging.assert_rank``: raise ``ValueError`` unless ``x`` has ``rank`` axes
    (static: at once, also inside ``tf.function``). Returns None."""
    x = tg.convert_to_tensor(x)
    if x.ndim != int(rank):
        raise ValueError(f"{message + ' ' if message else ''}Tensor must have rank {int(rank)}. "
                         f"Received rank {x.ndim}, shape {tuple(x.shape)}")


def assert_shapes(shapes, data=None, summarize=None, message=None, name=None):
    """``tf.debugging.assert_shapes``: check each ``(tensor, shape)`` of ``shapes`` (a list of
    pairs or a dict): ``shape`` lists the sizes, each an int, a string naming a size that
    must be the same wherever the name appears, or None (any); ``()`` or ``[]`` is a
    scalar, a string ``"NQ"`` names one axis per character. Raises ``ValueError`` naming the tensor's position, its shape and the
    expectation. Static (at once, also inside ``tf.function``). Returns None."""
    pairs = list(shapes.items()) if isinstance(shapes, dict) else list(shapes)
    sizes = {}
    for k, (tensor, spec) in enumerate(pairs):
        actual = tuple(tg.convert_to_tensor(tensor).shape)
        spec = list(spec)  # a string "NQ": one name per character
        fail = len(spec) != len(actual)
        for want, got in zip(spec, actual):
            if isinstance(want, str):
                want = sizes.setdefault(want, got)
            fail = fail or (want is not None and int(want) != got)
        if fail:
            raise ValueError(f"{message + ' ' if message else ''}tf.debugging.assert_shapes: "
                             f"tensor {k} has shape {actual}, expected {tuple(spec)} (named "
                             f"sizes so far: {sizes})")


def assert_type(tensor, tf_type, message=None, name=None):
    """``tf.debugging.assert_type``: raise ``TypeError`` unless ``tensor``'s dtype is
    ``tf_type``. Returns None."""
    got = tg.convert_to_tensor(tensor).dtype
    if got != np.dtype(tf_type):
        raise TypeError(f"{message + ' ' if message else ''}tf.debugging.assert_type: tensor "
                        f"has dtype {got}, expected {np.dtype(tf_type)}")


def is_numeric_tensor(tensor):
    """``tf.debugging.is_numeric_tensor``: True for a Tensor of an integer, floating or
    complex dtype (not bool), False for anything else (Python numbers and NumPy arrays
    included, as in TensorFlow)."""
    return isinstance(tensor, tg.Tensor) and tensor.dtype.kind in "iufc"
