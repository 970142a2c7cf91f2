"""Test configuration.

* hypothesis runs derandomized, so every CI run tests the same examples;
* tape records drop every tensor their gradient does not read, however small (by default
  only tensors of 1 KiB or more are dropped), so a wrong ``RegisterGradient(reads=...)``
  declaration fails on the registry's small samples.
"""
from hypothesis import settings

from tapegrad import _records

settings.register_profile("tapegrad", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("tapegrad")
_records.DROP_MIN_BYTES = 0
