"""The few differentiable ops the core needs, handed to it by ``tapegrad.ops`` at import.

The core (tensors, records, validation, the tape) never imports ``tapegrad.ops``: that would
make the layers a circle. Yet the reverse pass computes with ops: it adds the gradients that
reach one tensor from several uses, sums an output-shaped gradient back to a broadcast input's
shape, casts a gradient back to its input's dtype (the real part of a complex gradient of a
real input), and builds Jacobians and zero gradients.
Those ops are the attributes of :data:`ops` below; ``tapegrad/ops/__init__.py`` fills them in
with :func:`provide` when it is imported, and ``tapegrad/__init__.py`` adds the namespace
itself (``Tensor.__array_namespace__`` returns it). Every name must be provided once.

=================  ===========================================================================
name               signature and meaning (all are tapegrad ops: their results are recorded)
=================  ===========================================================================
``add``            ``add(x1, x2) -> Tensor``: gradient accumulation
``sum``            ``sum(x, axis=tuple) -> Tensor``: un-broadcasting a gradient
``reshape``        ``reshape(x, shape) -> Tensor``: un-broadcasting, Jacobian layout
``astype``         ``astype(x, dtype) -> Tensor``: undoing type promotion
``real``           ``real(x) -> Tensor``: the gradient of a real input of a complex result
``stack``          ``stack(list_of_tensors, axis=0) -> Tensor``: Jacobian rows
``zeros``          ``zeros(shape, dtype=) -> Tensor``: ``UnconnectedGradients.ZERO``
``zeros_like``     ``zeros_like(x) -> Tensor``: missing cotangents of multi-output ops
``ones_like``      ``ones_like(x) -> Tensor``: the default output gradient
``identity``       ``identity(x) -> Tensor``: ``Variable.read_value`` (a recorded snapshot)
``namespace``      the module ``tapegrad`` (the Array API namespace of a Tensor)
=================  ===========================================================================
"""
from __future__ import annotations

_NAMES = ("add", "sum", "reshape", "astype", "real", "stack", "zeros", "zeros_like",
          "ones_like", "identity", "namespace")


class _Missing:
    """Stands in for an op that was not provided yet: calling it says what went wrong."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"tapegrad's core needs the op {self.name!r}, which tapegrad.ops "
                           "provides when it is imported; import tapegrad, not its private "
                           "modules alone")


class StructuralOps:
    """The ops the core uses, as attributes (see the module docstring for the list)."""

    __slots__ = _NAMES

    def __init__(self):
        for name in _NAMES:
            setattr(self, name, _Missing(name))


ops = StructuralOps()


def provide(**fns) -> None:
    """Give the core its structural ops, by name; raises ``TypeError`` for an unknown name."""
    for name, fn in fns.items():
        if name not in _NAMES:
            raise TypeError(f"provide: {name!r} is not a structural op of the core; the names "
                            f"are {', '.join(_NAMES)}")
        setattr(ops, name, fn)


_EXTENSION_POINTS = ("raw_access", "gradient_call", "jacobian", "batch_jacobian", "host_callback",
                     "explain", "to_dot", "register_hook", "conversion", "to_host", "vectorize",
                     "memory_report", "gradient_check", "gradient_numerics")


class ExtensionPoints:
    """What layers above the core plug into it, by name (``None`` until provided):

    - ``raw_access(tensor)`` and ``gradient_call(fn, op, cotangents)``
      (``tapegrad._once_differentiable``): ``Tensor.numpy()`` and ``__dlpack__`` call the
      first; the reverse pass calls gradient functions through the second while an outer tape
      may differentiate it: a gradient computed from a traced tensor's raw array (or returned
      as raw arrays) is recorded as once-differentiable;
    - ``jacobian(tape, target, sources, unconnected)`` and ``batch_jacobian(tape, target,
      source, unconnected)`` (``tapegrad._jacobian``): ``GradientTape.jacobian`` and
      ``batch_jacobian``, built from the tape's reverse passes and forward mode's JVP rules;
    - ``host_callback`` (``tapegrad._function``): runs a forward that needs concrete values on
      traced inputs; ``host_callback.wants(error, opdef)`` says whether an error is that need;
    - ``explain(tape, target, sources)`` and ``to_dot(tape, target, sources)``
      (``tapegrad.viz``): ``GradientTape.explain`` and ``GradientTape.to_dot``;
    - ``register_hook(tensor, fn)`` (``tapegrad._hooks``): ``Tensor.register_hook``;
    - ``conversion(tensor, how)`` (``tapegrad._leaks``): called when a Tensor leaves for NumPy
      or another library (``__array__``, ``__dlpack__``), to warn when a tape loses it;
    - ``to_host(array, name)`` (``tapegrad._function``): the default backend's copy of a
      compiled call's device-resident result (``array``, made by ``tg.function`` ``name``),
      waiting for it; an error of the program is raised here, naming the function;
    - ``vectorize(tape, target, cotangents, sources, unconnected, axis, shapes)``
      (``tapegrad.batching``): the Jacobians of ``GradientTape.jacobian``/``batch_jacobian``
      (``tapegrad._jacobian``) from one batched reverse pass (``experimental_use_pfor=True``):
      per source a Tensor, or ``vectorize.missing`` where the target does not depend on it;
      ``None`` where it does not apply;
    - ``memory_report(tape)`` (``tapegrad.debugging``): ``GradientTape.memory_report``, what
      the records keep for the reverse pass.
    - ``gradient_check(fn, op)`` (``tapegrad.debugging``): while its ``on`` is true, the reverse
      pass calls it before each gradient function ``fn`` runs on record ``op``
      (``tg.debugging.enable_gradient_checks``); it checks user-defined rules on the record's
      inputs. The pass reads ``on`` once, so off it costs one test per pass. While ``on``,
      ``tg.function`` asks ``gradient_check.eager_first_call(function)`` at a call that would
      trace a program: True (once per function) runs that call eagerly instead.
    - ``gradient_numerics`` (``tapegrad.debugging``): while its ``on`` is true
      (``tg.debugging.enable_check_numerics``), the reverse pass calls
      ``gradient_numerics(op, cotangents)`` before each gradient function ``fn`` runs on record
      ``op`` and ``gradient_numerics.returned(fn, op, gradients)`` after; a NaN is then
      reported with the record it belongs to. Read once per pass, as ``gradient_check``.
    """

    __slots__ = _EXTENSION_POINTS

    def __init__(self):
        for name in _EXTENSION_POINTS:
            setattr(self, name, None)


extensions = ExtensionPoints()


def extend(**fns) -> None:
    """Plug functions into the core's extension points, by name, once each; raises
    ``TypeError`` for an unknown name and ``RuntimeError`` for one already provided."""
    for name, fn in fns.items():
        if name not in _EXTENSION_POINTS:
            raise TypeError(f"extend: {name!r} is not an extension point of the core; they "
                            f"are {', '.join(_EXTENSION_POINTS)}")
        if getattr(extensions, name) is not None:
            raise RuntimeError(f"extend: the extension point {name!r} is already provided")
        setattr(extensions, name, fn)
