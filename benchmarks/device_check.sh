#!/usr/bin/env bash
# Issue 19's GPU checks, as one run on a machine with an NVIDIA GPU and JAX, CuPy, pytest,
# hypothesis and pytest-xdist installed (the development machine's `device` tool): the suite
# with JAX's default device a GPU, the CuPy tests, some test files on the CuPy backend,
# benchmarks/bench_call_parts.py, benchmarks/bench_function.py (which adds its batch-4096 MLP
# row on a GPU) and the digits demo, compiled and eager. Wheels for what is missing there
# (array-api-compat, array-api-strict) are taken from .whl/ when present. Logs go to $OUT
# (default: ./device_out).
set -u
OUT=${OUT:-device_out}; mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src:$PWD/benchmarks
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import jax, numpy, cupy; print('jax', jax.__version__, jax.devices(), 'numpy',
numpy.__version__, 'cupy', cupy.__version__)"
SUITE=${SUITE_TIMEOUT:-210}
# the suite (JAX on the GPU) and the CuPy backend run side by side; the benchmark runs alone
timeout "$SUITE" python3 -m pytest -n 12 --dist loadfile -p no:cacheprovider -rfE tests \
  > "$OUT/suite.log" 2>&1 &
suite=$!
timeout "$SUITE" python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_cupy.py \
  > "$OUT/cupy.log" 2>&1
TAPEGRAD_ARRAY_BACKEND=cupy timeout $((SUITE - 20)) python3 -m pytest -q -n 4 --dist loadfile \
  -p no:cacheprovider -rfE tests/test_tape.py tests/test_nn.py tests/test_ops_elementwise.py \
  tests/test_ops_linalg.py tests/test_optimizers.py tests/test_custom_gradient.py \
  > "$OUT/cupy_backend.log" 2>&1
wait $suite; echo "suite rc=$?"
echo "== suite"  # the summary line, or (stopped by timeout) the failures so far
grep -E '^(FAILED|ERROR) ' "$OUT/suite.log" | head -n 30; tail -n 3 "$OUT/suite.log"
for f in cupy cupy_backend; do echo "== $f"; tail -n 15 "$OUT/$f.log"; done
echo "== bench_call_parts"
OMP_NUM_THREADS=1 timeout 60 python3 benchmarks/bench_call_parts.py 2>&1
echo "== bench_function"
OMP_NUM_THREADS=1 timeout "${BENCH_TIMEOUT:-150}" python3 benchmarks/bench_function.py \
  2>&1 | tee "$OUT/bench.log" | tail -n 40
echo "== digits --compare"
timeout 60 python3 -m tapegrad.examples.digits --compare --out "$OUT/digits.png" 2>&1 | tail -n 6
