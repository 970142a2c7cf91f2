"""Where a compiled call's time goes: ``tg.function`` against ``jax.jit`` on W1 and W4 of
``bench_function.py``, taken apart.

Run ``OMP_NUM_THREADS=1 python benchmarks/bench_call_parts.py`` (needs the ``jit`` extra), on
a CPU or with JAX's default device a GPU. For each workload, per call (blocks of calls, one
wait per block, as ``bench_function.time_blocks``; the best and the median of the blocks):

* ``jax.jit``: the peer;
* ``program``: tapegrad's compiled XLA program called directly, as ``_Program.call`` calls it
  (in 64-bit mode, through ``config.x64_caller``), on the same device arrays;
* ``program, wrapped``: the same, its first output wrapped as a call's result
  (``on_device``);
* ``tg.function``: the whole call;
* ``tg.function, gc off``: the same with Python's cyclic garbage collector disabled;
* ``tapegrad's Python``: the whole call with the program replaced by a stub that returns its
  last outputs: what tapegrad adds around the program.

The rows between ``program`` and ``tg.function`` isolate where a call costs more than its
program plus its Python (on an H100, W4's call took 74 us against 60 + 5.7).

It also prints, from each side's optimized HLO, the number of fusions and library calls
(``custom-call``: cuBLAS on a GPU), each of which is a kernel launch on a GPU. Nothing is
asserted.
"""
from __future__ import annotations

import gc
import re
import statistics
import time

import numpy as np

import bench_function as bf
import tapegrad as tg
from tapegrad import config
from tapegrad._variables import device_array, on_device

jax, jnp = bf.jax, bf.jnp


def per_call(fn, number, repeat=9):
    """``(best, median)`` microseconds per call of blocks of ``number`` calls."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            out = fn()
        out.numpy() if hasattr(out, "numpy") else jax.block_until_ready(out)
        runs.append((time.perf_counter() - t0) / number * 1e6)
    return min(runs), statistics.median(runs)


def kernels(hlo_text) -> str:
    calls = len(re.findall(r" custom-call\(", hlo_text))
    return f"{hlo_text.count(' fusion(')} fusions, {calls} custom calls"


def parts(name, peer, peer_args, function, tg_args, number):
    """Print the four timings and the HLO counts of one workload."""
    function(*tg_args).numpy()
    jax.block_until_ready(peer(*peer_args))
    (program,) = function._programs.values()
    fn_name = program.name
    inputs = [device_array(t) for t in tg_args]
    last = program.in_x64(program.compiled, inputs)
    compiled = program.compiled
    rows = {"jax.jit": lambda: peer(*peer_args),
            "program": lambda: program.in_x64(compiled, inputs)[0],
            "program, wrapped": lambda: on_device(program.in_x64(compiled, inputs)[0], fn_name),
            "tg.function": lambda: function(*tg_args)}
    times = {k: per_call(f, number) for k, f in rows.items()}
    gc.disable()
    try:
        times["tg.function, gc off"] = per_call(lambda: function(*tg_args), number)
    finally:
        gc.enable()
    program.compiled = lambda *values: last
    try:
        times["tapegrad's Python"] = per_call(lambda: function(*tg_args), number)
    finally:
        program.compiled = compiled
    with config.x64_scope(jax):
        ours = compiled.lower(*inputs).compile().as_text()
    theirs = peer.lower(*peer_args).compile().as_text()
    print(f"{name} on {bf._DEVICE.platform}: program {kernels(ours)}; "
          f"jax.jit {kernels(theirs)}")
    for k, (best, median) in times.items():
        print(f"  {k:20s} {best:8.1f} us best, {median:8.1f} median")


def main():
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=16)
    xd = tg.asarray(x0, device=bf._DEVICE)
    parts("W1", jax.jit(jax.grad(bf._chain_jax)), (jnp.asarray(x0),),
          tg.function(bf._chain_tg, jit_compile=True), (xd,), 1000)

    n = 1000
    a = rng.normal(size=(n, n)) / np.sqrt(n)
    x0, v0 = rng.normal(size=n), rng.normal(size=n)

    def f_jax(x):
        return jnp.sum(jnp.tanh(a @ x) ** 2)

    parts("W4", jax.jit(lambda x, v: jax.jvp(jax.grad(f_jax), (x,), (v,))[1]),
          (jnp.asarray(x0), jnp.asarray(v0)),
          tg.function(bf.hvp_tg(tg.constant(a)), jit_compile=True),
          (tg.asarray(x0, device=bf._DEVICE), tg.asarray(v0, device=bf._DEVICE)), 30)


if __name__ == "__main__":
    main()
