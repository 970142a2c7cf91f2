"""Where an eager training step's time goes: the W3 step of issue 8 taken apart.

Run ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_step_parts.py
[--sizes 784,64,64,10] [--batch 16]``. Nothing is asserted.

The step is ``bench_function.py``'s W3 (an SGD step of a ReLU MLP with the mean sparse softmax
cross-entropy, float32). Printed, in microseconds per step (best of several ``timeit``
repeats, malloc pinned as in ``bench_overhead.py``):

* the forward without a tape, with a ``GradientTape``, ``tape.gradient`` (fed by fresh tapes,
  so each is differentiated once) and ``apply_gradients``, beside the hand-written NumPy
  forward, backward and update;
* inside ``tape.gradient``: the time of each op type's gradient function (its calls per step
  in brackets), the tape's central un-broadcast of gradients (``check_gradient``, which sums
  the bias gradients over the batch) and the rest of the reverse loop.
"""
from __future__ import annotations

import argparse
import collections
import time
import timeit

import numpy as np

import tapegrad as tg
from tapegrad import _tape
from bench_overhead import make_mlp, pin_allocator, step_numpy


def _best(fn, number, repeat=7):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _numpy_parts(x, labels, params):
    """Times (us) of the hand-written forward (loss) and of forward + backward + update."""
    def forward():
        w1, b1, w2, b2, w3, b3 = params
        h1 = np.maximum(x @ w1 + b1, 0)
        h2 = np.maximum(h1 @ w2 + b2, 0)
        logits = h2 @ w3 + b3
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return -logp[np.arange(x.shape[0]), labels].mean()

    work = [p.copy() for p in params]
    return _best(forward, 300), _best(lambda: step_numpy(x, labels, work), 300)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="784,64,64,10")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    pin_allocator()
    sizes = tuple(int(s) for s in args.sizes.split(","))
    x, labels, params = make_mlp(sizes=sizes, batch=args.batch)
    variables = [tg.Variable(p) for p in params]
    xt, lt = tg.constant(x), tg.constant(labels)
    opt = tg.optimizers.SGD(0.01)

    def loss_fn():
        h = xt
        for w, b in zip(variables[:-2:2], variables[1:-2:2]):
            h = tg.nn.relu(h @ w + b)
        logits = h @ variables[-2] + variables[-1]
        return tg.mean(tg.nn.sparse_softmax_cross_entropy_with_logits(labels=lt, logits=logits))

    def forward_on_tape():
        with tg.GradientTape() as tape:
            loss = loss_fn()
        return tape, loss

    def differentiate(tape_and_loss):
        tape, loss = tape_and_loss
        return tape.gradient(loss, variables)

    grads = differentiate(forward_on_tape())
    n = 300
    t_plain, t_taped = _best(loss_fn, n), _best(forward_on_tape, n)
    tapes = iter([forward_on_tape() for _ in range(7 * n)])
    t_grad = _best(lambda: differentiate(next(tapes)), n)
    t_apply = _best(lambda: opt.apply_gradients(zip(grads, variables)), n)
    np_forward, np_step = _numpy_parts(x, labels, params)

    # inside tape.gradient: each op type's gradient function and the central un-broadcast
    spent, calls = collections.Counter(), collections.Counter()
    probe = forward_on_tape()[0]
    patched = {}
    for op in probe._ops:
        gdef = op._gdef
        if gdef.type in patched:
            continue
        patched[gdef.type] = (gdef, gdef.grad)

        def timed(o, *dys, _fn=gdef.grad, _name=gdef.type):
            start = time.perf_counter_ns()
            out = _fn(o, *dys)
            spent[_name] += time.perf_counter_ns() - start
            calls[_name] += 1
            return out

        gdef.grad = timed
    check = _tape.check_gradient

    def timed_check(*a):
        start = time.perf_counter_ns()
        out = check(*a)
        spent["(check_gradient: un-broadcast)"] += time.perf_counter_ns() - start
        calls["(check_gradient: un-broadcast)"] += 1
        return out

    _tape.check_gradient = timed_check
    k = 2000
    fresh = [forward_on_tape() for _ in range(k)]
    start = time.perf_counter()
    for pair in fresh:
        differentiate(pair)
    t_probed = (time.perf_counter() - start) / k * 1e6
    _tape.check_gradient = check
    for gdef, fn in patched.values():
        gdef.grad = fn

    print(f"W3-like step, sizes {sizes}, batch {args.batch}, float32 (us per step)")
    print(f"  {'part':40s} {'tapegrad':>9s} {'NumPy':>9s}")
    print(f"  {'forward, no tape':40s} {t_plain:9.1f} {np_forward:9.1f}")
    print(f"  {'forward, on a tape':40s} {t_taped:9.1f}")
    print(f"  {'tape.gradient':40s} {t_grad:9.1f}")
    print(f"  {'apply_gradients (SGD)':40s} {t_apply:9.1f}")
    print(f"  {'whole step (sum of the above / NumPy)':40s} {t_taped + t_grad + t_apply:9.1f} "
          f"{np_step:9.1f}")
    print(f"\n  inside tape.gradient ({t_probed:.1f} us with the timers):")
    for name, ns in spent.most_common():
        print(f"  {name:40s} {ns / k / 1000:9.1f}   ({calls[name] // k} per step)")
    rest = t_probed - sum(spent.values()) / k / 1000
    print(f"  {'the rest (the reverse loop, seeding, release)':40s} {rest:9.1f}   "
          f"(the timers' own cost included: {t_probed - t_grad:.1f} us over the untimed run)")


if __name__ == "__main__":
    main()
