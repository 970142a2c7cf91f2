"""Test configuration: hypothesis runs derandomized, so every CI run tests the same examples."""
from hypothesis import settings

settings.register_profile("tapegrad", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("tapegrad")
