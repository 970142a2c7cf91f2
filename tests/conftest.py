"""Test configuration.

* hypothesis runs derandomized, so every CI run tests the same examples;
* tape records drop every tensor their gradient does not read, however small (by default
  only tensors of 1 KiB or more are dropped), so a wrong ``RegisterGradient(reads=...)``
  declaration fails on the registry's small samples;
* no test may leave JAX's 64-bit mode on for the process (``jax.config.update(
  "jax_enable_x64", True)``): with ``pytest-xdist --dist loadfile`` a worker runs several
  files in turn, and the flag would mask 32-bit bugs in the next ones. Tests turn it on with
  ``tg.config.x64_scope(jax)`` (thread-local) instead; a test that leaves it on errors at its
  teardown, naming it.
"""
import os
import sys

import pytest
from hypothesis import settings

from tapegrad import _records

settings.register_profile("tapegrad", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("tapegrad")
_records.DROP_MIN_BYTES = 0

RUN_SLOW = os.environ.get("TAPEGRAD_SLOW_TESTS") == "1"
STRICT = os.environ.get("TAPEGRAD_ARRAY_BACKEND") == "array_api_strict"

# Files whose subject is not the default array backend: compiled programs (which run on JAX's
# arrays), exports, JAX's process state, Dask's and the devices' arrays, the demos and the
# command line. The NumPy pass runs them; the array_api_strict pass only with
# TAPEGRAD_SLOW_TESTS=1 (the registry sweeps and the eager tests are what it is for).
NUMPY_PASS_ONLY = {"test_compiled_variables.py", "test_function.py", "test_saved_model.py",
                   "test_digits.py", "test_examples.py", "test_jax_isolation.py",
                   "test_dask.py", "test_distribute.py", "test_cli.py"}


def on_strict_first_samples(cases):
    """The sweep ``cases`` (``pytest.param``s whose second value is a sample index) with every
    sample but each op type's first marked ``slow`` on the array_api_strict pass: there every
    op is checked in every mode on one sample, on NumPy on all (all on both with
    ``TAPEGRAD_SLOW_TESTS=1``)."""
    if not STRICT:
        return cases
    return [c if c.values[1] in (0, None) else pytest.param(*c.values, id=c.id,
                                                            marks=pytest.mark.slow)
            for c in cases]


# The slowest tests by measurement (tests/slow_tests.txt: one test id per line), marked slow
with open(os.path.join(os.path.dirname(__file__), "slow_tests.txt")) as _f:
    SLOW_IDS = {line.split("#")[0].strip() for line in _f} - {""}


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.slow`` tests, those listed in ``slow_tests.txt``, and the files of
    ``NUMPY_PASS_ONLY`` on array_api_strict, skip unless ``TAPEGRAD_SLOW_TESTS=1`` (the suite
    stays under 10 minutes; CI runs the README's command)."""
    for item in items:
        if item.nodeid in SLOW_IDS:
            item.add_marker(pytest.mark.slow)
    if RUN_SLOW:
        return
    skip = pytest.mark.skip(reason="slow: run with TAPEGRAD_SLOW_TESTS=1")
    numpy_only = pytest.mark.skip(reason="the NumPy pass runs this file; on array_api_strict "
                                         "with TAPEGRAD_SLOW_TESTS=1")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
        elif STRICT and item.path.name in NUMPY_PASS_ONLY:
            item.add_marker(numpy_only)


def _x64_on():
    """JAX's 64-bit mode in this thread: None when JAX is not imported (not imported here)."""
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)  # None while JAX is half-imported
    return None if config is None else bool(config.jax_enable_x64)


# the mode before the session: on where TAPEGRAD_ARRAY_BACKEND=jax.numpy (tapegrad turns it on
# for the process, imported above) or where JAX_ENABLE_X64 is set, and then left alone
_X64_BEFORE = _x64_on()
if _X64_BEFORE is None:
    _X64_BEFORE = os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true", "t", "yes",
                                                                   "y", "on")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield  # the test's fixtures (and scoped switches) are finalized by now
    if not _X64_BEFORE and _x64_on():
        sys.modules["jax"].config.update("jax_enable_x64", False)  # for the tests after it
        pytest.fail(f"{item.nodeid} left JAX's 64-bit mode on for the process "
                    "(jax.config.update('jax_enable_x64', True)): use "
                    "tg.config.x64_scope(jax) (thread-local) instead", pytrace=False)
    return result
