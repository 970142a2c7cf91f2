"""What AutoGraph (``tapegrad.autograph``) adds to the first call of a fresh ``tg.function``.

Run ``python benchmarks/bench_autograph.py [--quick]`` (needs the ``jit`` extra). The function
has Python loops and conditionals on Python values only (a ``for`` over ``range``, an
``if``/``elif``/``else`` with ``and``, a ``while`` on a Python counter, a call of a helper
function with its own ``if``), so AutoGraph converts it but every construct still runs as
Python: the cost measured is the conversion and the runtime helpers' dispatch, nothing else.

Rows, each the median over repeats of a fresh ``tg.function`` of the same Python function,
AutoGraph on and off alternating, in the same process:

* trace: the time ``tg.function`` spends tracing (``_Program``'s construction:
  ``jax.make_jaxpr`` of the function), on vs off, and their ratio (target: <= 1.20);
* first call: the whole first call (trace, XLA compile, run), on vs off, and their ratio;
* Python calls per trace: the function calls (Python and builtin) made while tracing,
  counted with ``sys.setprofile``, on vs off: a measure of the work AutoGraph adds that does
  not depend on the machine's load (the times above do, on a shared machine);
* conversion: ``tg.autograph.convert`` of the function with an empty cache (what the very
  first ``tg.function`` of it pays once; later ones find the converted code object cached).

Nothing is asserted.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

import numpy as np

import tapegrad as tg
from tapegrad import _function, autograph


def _scale(h, k):
    if k > 2:
        return h * 0.5
    return h


def model(x, w, layers=8, training=True):
    """Python control flow on Python values around a few small ops per step."""
    h = x
    for k in range(layers):
        if k % 2 == 0 and training:
            h = tg.tanh(tg.matmul(h, w))
        elif k == 3:
            h = _scale(h, k)
        else:
            h = tg.nn.relu(tg.matmul(h, w)) + 0.1
    n = 0
    while n < 3:
        h = h + 1.0
        n += 1
    return tg.sum(h * h)


def _timed_trace():
    """Wrap ``_Program.__init__`` to add its duration to the list returned."""
    spent = []
    init = _function._Program.__init__

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        init(self, *args, **kwargs)
        spent.append(time.perf_counter() - t0)

    _function._Program.__init__ = timed
    return spent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    repeat = 5 if parser.parse_args().quick else 25
    x = tg.constant(np.linspace(-1, 1, 64).reshape(4, 16))
    w = tg.constant(np.eye(16) * 0.9 + 0.01)
    want = float(tg.function(model, jit_compile=False)(x, w))
    spent = _timed_trace()
    rows = {True: ([], []), False: ([], [])}
    for _ in range(repeat):
        for on in (True, False):
            f = tg.function(model, autograph=on)
            gc.collect()  # the two sides start from the same heap
            t0 = time.perf_counter()
            got = float(f(x, w))
            rows[on][1].append(time.perf_counter() - t0)
            rows[on][0].append(spent[-1])
            assert np.isclose(got, want), (got, want)
    calls = {}
    for on in (True, False):
        f = tg.function(model, autograph=on)
        count = [0]

        def profile(frame, event, arg):
            if event in ("call", "c_call"):
                count[0] += 1

        init = _function._Program.__init__

        def counted(self, *args, **kwargs):
            sys.setprofile(profile)
            try:
                init(self, *args, **kwargs)
            finally:
                sys.setprofile(None)

        _function._Program.__init__ = counted
        f(x, w)
        _function._Program.__init__ = init
        calls[on] = count[0]
    cold = []
    for _ in range(repeat):
        autograph._cache.clear()
        gc.collect()
        t0 = time.perf_counter()
        autograph.convert(model)
        cold.append(time.perf_counter() - t0)
    med = {on: [statistics.median(r) for r in rows[on]] for on in rows}
    print(f"{'row':<28}{'autograph on':>14}{'off':>12}{'ratio':>8}")
    for k, name in enumerate(("trace (make_jaxpr)", "first call (trace+compile)")):
        on, off = med[True][k], med[False][k]
        print(f"{name:<28}{on * 1e3:>11.2f} ms{off * 1e3:>9.2f} ms{on / off:>8.2f}")
    print(f"{'Python calls per trace':<28}{calls[True]:>14}{calls[False]:>12}"
          f"{calls[True] / calls[False]:>8.3f}")
    print(f"{'conversion, cold cache':<28}{statistics.median(cold) * 1e3:>11.2f} ms")


if __name__ == "__main__":
    main()
