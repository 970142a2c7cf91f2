"""``samples``: declare the sample inputs of a ``custom_gradient`` function."""
from __future__ import annotations

from .._samples import Sample


def samples(*declared):
    """Decorator: declare sample inputs of a ``custom_gradient`` function, for
    ``python -m tapegrad check`` (which gradient-checks every op a module defines on them).

    Place it above ``@tg.custom_gradient``::

        @tg.test.samples(tg.Sample((3, 4)), tg.Sample((5,), domain=(0.1, 2.0)))
        @tg.custom_gradient
        def softplus(x): ...

    ``declared``: one or more :class:`tapegrad.Sample`, as ``tg.primitive(samples=[...])``
    takes (a tuple of ints is a random float input of that shape; see ``Sample``). They are
    attached to the function as ``samples`` (a list); the function is returned unchanged.

    Raises ``TypeError`` if no samples are given, if one is not a ``Sample``, or if the
    decorated object is not a ``custom_gradient`` function (the decorator is below
    ``@tg.custom_gradient``, or on a plain function; a primitive takes ``samples=``).
    """
    if not declared:
        raise TypeError("tg.test.samples: give at least one tg.Sample(...), e.g. "
                        "@tg.test.samples(tg.Sample((3,)))")
    for s in declared:
        if not isinstance(s, Sample):
            raise TypeError(f"tg.test.samples: expected tg.Sample objects, got "
                            f"{type(s).__name__} {s!r}; write tg.Sample((3,)) for a random "
                            "float input of shape (3,)")

    def attach(fn):
        if not getattr(fn, "_custom_gradient", False):
            name = getattr(fn, "__qualname__", type(fn).__name__)
            raise TypeError(f"tg.test.samples: {name} is not a custom_gradient function; place "
                            "@tg.test.samples(...) above @tg.custom_gradient (for an op type "
                            "made with tg.primitive, pass samples=[...] to tg.primitive)")
        fn.samples = list(declared)
        return fn

    return attach
