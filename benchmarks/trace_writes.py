"""Count the places outside the core that write the thread's tape stack or a Tensor's value.

Run ``python benchmarks/trace_writes.py [--list]``. Issue 30's trace model has every
transformation enter and leave through one core API, and a Tensor's value never change after it
is made; the count outside the core is 0 (since the trace-stack API and
``_variables.set_state``). A write is an assignment (plain, augmented or
annotated, or ``setattr`` with a constant name) to an attribute named ``tapes`` (the tape
stack of ``_records._state``) or ``_value`` (a Tensor's or Variable's array). The core is
``_tensor``, ``_records``, ``_registry``, ``_validation``, ``_hooks``, ``_views``, ``_tape``
(as in ``core_size.py``); ``_variables`` (layer 6¼) defines ``Variable.assign`` and is counted
apart, as the one module above the core that may rebind a Variable's value.
``tests/test_trace_writes.py`` fails on any write outside.
"""
from __future__ import annotations

import argparse
import ast
import pathlib
import sys

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "tapegrad"
CORE = {"_tensor.py", "_records.py", "_registry.py", "_validation.py", "_hooks.py", "_views.py",
        "_tape.py"}
OWNER = {"_variables.py"}
NAMES = ("tapes", "_value")


def writes(path: pathlib.Path):
    """``(line, attribute)`` for each write of a watched attribute in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "setattr" and len(node.args) == 3
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in NAMES):
            found.append((node.lineno, node.args[1].value))
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and sub.attr in NAMES:
                    found.append((sub.lineno, sub.attr))
    return found


def count(src: pathlib.Path = SRC):
    """``{kind: {relative path: [(line, attribute), ...]}}`` for kinds ``outside`` (above the
    core but ``_variables``), ``owner`` (``_variables``) and ``core``."""
    out = {"outside": {}, "owner": {}, "core": {}}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        kind = "core" if rel in CORE else "owner" if rel in OWNER else "outside"
        found = writes(path)
        if found:
            out[kind][rel] = found
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="print every site")
    args = parser.parse_args(argv)
    sites = count()
    for kind, files in sites.items():
        for name in NAMES:
            n = sum(1 for found in files.values() for _, a in found if a == name)
            mods = sorted({f for f, found in files.items() if any(a == name for _, a in found)})
            print(f"{kind:8s} writes of .{name:7s}: {n:3d} in {len(mods)} module(s) "
                  f"{', '.join(mods)}")
        if args.list:
            for f, found in files.items():
                for line, a in found:
                    print(f"    {f}:{line}  .{a}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
