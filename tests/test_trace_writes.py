"""The source scan of issue 30: no module outside the core writes the thread's tape stack or a
Tensor's value (``benchmarks/trace_writes.py``): a transformation enters and leaves through
``_records.trace_stack`` (``push_entry``/``remove_entry`` for a ``with`` block's tape or
accumulator), a construct gives the Variables it assigned their new state through
``_variables.set_state``, and ``x[key] = v`` goes through ``_records.update_in_place``."""
import importlib.util
import pathlib
import textwrap

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "trace_writes.py"
NAMES = ("tapes", "_value")


@pytest.fixture(scope="module")
def scan():
    spec = importlib.util.spec_from_file_location("trace_writes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", NAMES)
def test_no_module_outside_the_core_writes_the_trace_stack_or_a_value(scan, name):
    sites = [f"{f}:{line}" for f, found in scan.count()["outside"].items()
             for line, a in found if a == name]
    assert not sites, (
        f"{len(sites)} write(s) of .{name} outside the core: {', '.join(sites)}; enter a trace "
        "through _records.trace_stack, give Variables their state with _variables.set_state")


def test_the_scan_finds_every_form_of_write(scan, tmp_path):
    (tmp_path / "m.py").write_text(textwrap.dedent("""
        state.tapes = []
        t._value = 1
        a, t._value = 1, 2
        t._value += 1
        setattr(t, "_value", 3)
        x.value = 1
        y = t._value
    """))
    assert scan.writes(tmp_path / "m.py") == [
        (2, "tapes"), (3, "_value"), (4, "_value"), (5, "_value"), (6, "_value")]
