"""The source scan of issue 30: places outside the core that write the thread's tape stack or a
Tensor's value (``benchmarks/trace_writes.py``). The target is none; until the trace model
replaces them, the count may only go down: lower ``CEILING`` when a change removes sites."""
import importlib.util
import pathlib
import textwrap

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "trace_writes.py"
CEILING = {"tapes": 15, "_value": 8}


@pytest.fixture(scope="module")
def scan():
    spec = importlib.util.spec_from_file_location("trace_writes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(CEILING))
def test_writes_outside_the_core_do_not_grow(scan, name):
    sites = [f"{f}:{line}" for f, found in scan.count()["outside"].items()
             for line, a in found if a == name]
    assert len(sites) <= CEILING[name], (
        f"{len(sites)} writes of .{name} outside the core (ceiling {CEILING[name]}): "
        f"{', '.join(sites)}; enter a trace through the core's API instead")


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
