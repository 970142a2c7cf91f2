"""``python -m tapegrad``: gradient-check the ops a module defines, list the op registry.

``python -m tapegrad check PATH_OR_MODULE [--order N] [--seed N] [--verbose]`` imports a file
(a path) or a module (a dotted name) and checks every op it defines on its declared samples:

* each primitive whose forward is defined in it (``tg.primitive(..., samples=[...])``);
* each module-level ``custom_gradient`` function defined in it, with the samples declared by
  ``@tg.test.samples(tg.Sample(...), ...)`` above ``@tg.custom_gradient``.

Each sample runs :func:`tapegrad.test.check_gradients` (orders 1 to ``--order``, which also
checks each custom gradient's contract: one gradient per input of the right shape, linear in
the upstream gradient, equal to the derivative of its forward). One line per op: ``PASS``,
``FAIL`` (with the worst element; ``--verbose`` prints the whole report) or ``SURROGATE`` (a
declared surrogate gradient, reported, not failed). An op without samples fails. Exit status:
0 if every op passes, 1 if one fails, 2 for a usage error (no such file or module, an error
while importing it, no op defined in it).

``python -m tapegrad ops`` lists the registry: op type, gradient function, JVP rule, where
the forward is defined (``module:line``). ``python -m tapegrad --version`` prints the version.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
import warnings
import zlib

import numpy as np

import tapegrad as tg

_DECLARE = {"primitive": "@tg.primitive({name!r}, samples=[tg.Sample(...)])",
            "custom_gradient": "@tg.test.samples(tg.Sample(...)) above @tg.custom_gradient"}


class UsageError(Exception):
    """A command-line mistake: exit status 2 with the message."""


def _import(target):
    """The module named by ``target``: a path to a ``.py`` file, or a dotted module name."""
    if target.endswith(".py") or os.sep in target or (os.altsep and os.altsep in target):
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise UsageError(f"no such file: {target!r} (give a path to a .py file or a "
                             "dotted module name such as mypackage.ops)")
        name = inspect.getmodulename(path) or "module"
        if name in sys.modules:
            name = f"_tapegrad_check_{name}"
        sys.path.insert(0, os.path.dirname(path))  # so that the file's own imports work
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader = spec.loader.exec_module
    else:
        sys.path.insert(0, os.getcwd())
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as exc:
            spec, error = None, exc
        else:
            error = None
        if spec is None:
            raise UsageError(f"no module named {target!r}{f' ({error})' if error else ''}; give "
                             "a path to a .py file or an importable dotted module name")
        module, loader = None, None
    try:
        if loader is None:
            module = importlib.import_module(target)
        else:
            loader(module)
    except Exception:  # noqa: BLE001 - the user's module failed: show its traceback
        raise UsageError(f"importing {target!r} raised an error:\n"
                         + traceback.format_exc().rstrip()) from None
    return module


def _line(fn) -> int:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return code.co_firstlineno if code is not None else 0


def _where(fn) -> str:
    """``file:line`` of a function, the file relative to the working directory if inside."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__module__", "?")
    path = code.co_filename
    rel = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    return f"{rel}:{code.co_firstlineno}"


def _ops_of(module) -> list:
    """``[(kind, name, function, samples, differentiable)]`` for the ops ``module`` defines,
    in source order."""
    found = []
    for name, opdef in tg.registered_ops().items():
        forward = opdef.forward
        if forward is not None and getattr(inspect.unwrap(forward), "__module__",
                                           None) == module.__name__:
            found.append(("primitive", name, opdef.public, opdef.samples, opdef.differentiable))
    for name, obj in vars(module).items():
        if getattr(obj, "_custom_gradient", False) and getattr(obj, "__module__",
                                                               None) == module.__name__:
            found.append(("custom_gradient", name, obj, getattr(obj, "samples", None) or [],
                          True))
    return sorted(found, key=lambda op: _line(op[2]))


def _summary(message, verbose) -> list:
    """The lines of a failed check to print: all with ``verbose``, else the first three (what,
    the worst element, its values), kink marks, and each failing custom gradient with its
    problems."""
    lines = message.splitlines()
    if verbose:
        return lines
    keep, in_failed = lines[:3], False
    keep += [ln for ln in lines[3:] if "<-" in ln][:2]
    for k, ln in enumerate(lines):
        text = ln.strip()
        if text.startswith("FAILED"):
            in_failed = True
        elif not text.startswith("- "):
            in_failed = False
        if k >= 3 and (in_failed or text.startswith("likely cause")):
            keep.append(ln)
    return [ln.strip() for ln in keep]


def _check_one(kind, name, fn, samples, order, seed, verbose):
    """``(status, lines)`` for one op: status ``"PASS"``, ``"FAIL"`` or ``"SURROGATE"``."""
    if not samples:
        return "FAIL", [f"no samples — declare them with {_DECLARE[kind].format(name=name)}"]
    notes = []
    for k, sample in enumerate(samples):
        rng = np.random.default_rng([seed, zlib.crc32(name.encode()), k])
        args, attrs, positions = sample.materialize(rng)
        label = f"sample {k} {sample!r}"
        if not positions:
            return "FAIL", [f"{label} has no random float input to check (give a shape tuple "
                            "or tg.Arg for the inputs to differentiate)"]

        def f(*xs, args=args, attrs=attrs, positions=positions):
            full = list(args)
            for p, x in zip(positions, xs):
                full[p] = x
            return fn(*full, **attrs)

        f.__qualname__ = f.__name__ = name
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                tg.test.check_gradients(f, [args[p] for p in positions], order=order, seed=seed)
            except AssertionError as exc:
                return "FAIL", [f"{label}:", *_summary(str(exc), verbose)]
            except Exception as exc:  # noqa: BLE001 - reported as the op's failure
                return "FAIL", [f"{label}: the check raised {type(exc).__name__}: {exc}"]
        for w in caught:
            text = str(w.message).splitlines()
            if issubclass(w.category, tg.test.SurrogateGradientWarning):
                lines = text if verbose else [
                    ln.strip() for ln in text[1:]
                    if ln.strip().startswith(("not failed:", "- surrogate gradient of"))]
                notes.append(("surrogate", [f"{label}:", *(lines or text[:1])]))
            else:
                notes.append(("note", [f"{label}: {w.category.__name__}: {text[0]}"]))
    status = "SURROGATE" if any(kind_ == "surrogate" for kind_, _ in notes) else "PASS"
    lines = [f"{len(samples)} sample{'s' if len(samples) > 1 else ''}, "
             f"order{'s 1-' + str(order) if order > 1 else ' 1'}"]
    for _, note in notes:
        lines += note
    return status, lines


def _check(args) -> int:
    if args.order < 1:
        raise UsageError(f"--order must be >= 1, got {args.order}")
    module = _import(args.target)
    ops = _ops_of(module)
    if not ops:
        raise UsageError(f"{args.target!r} defines no primitive and no module-level "
                         "custom_gradient function: nothing to check")
    print(f"tapegrad check {args.target} (order {args.order}, seed {args.seed}): "
          f"{len(ops)} op{'s' if len(ops) > 1 else ''}")
    counts = dict.fromkeys(["PASS", "SURROGATE", "FAIL", "SKIP"], 0)
    for kind, name, fn, samples, differentiable in ops:
        head = f"{name}  [{kind}, {_where(fn)}]"
        if differentiable:
            status, lines = _check_one(kind, name, fn, samples, args.order, args.seed,
                                       args.verbose)
        else:
            status, lines = "SKIP", ["declared without a gradient (tg.no_gradient)"]
        counts[status] += 1
        print(f"{status:<9} {head}: {lines[0]}")
        for line in lines[1:]:
            print(f"            {line}")
    results = [("passed", counts["PASS"]),
               ("passed with declared surrogate gradients", counts["SURROGATE"]),
               ("failed", counts["FAIL"]), ("skipped", counts["SKIP"])]
    print("result: " + ", ".join(f"{n} {label}" for label, n in results
                                 if n or label in ("passed", "failed")))
    return 1 if counts["FAIL"] else 0


def _describe(fn) -> str:
    if fn is None:
        return "-"
    fn = inspect.unwrap(fn)
    return getattr(fn, "__qualname__", None) or repr(fn)


def _ops(args) -> int:
    rows = [("op type", "gradient", "JVP", "defined at")]
    for name, opdef in sorted(tg.registered_ops().items()):
        if not opdef.differentiable:
            grad = "none (no_gradient)"
        elif opdef.grad is None:
            grad = "- (not registered)"
        else:
            grad = _describe(opdef.grad)
        forward = opdef.forward
        if forward is None:
            where = "- (gradient only, no primitive yet)"
        else:
            unwrapped = inspect.unwrap(forward)
            where = f"{getattr(unwrapped, '__module__', '?')}:{_line(unwrapped)}"
        rows.append((name, grad, _describe(opdef.jvp), where))
    widths = [max(len(r[k]) for r in rows) for k in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[3])
    print(f"{len(rows) - 1} op types")
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m tapegrad``."""
    p = argparse.ArgumentParser(prog="python -m tapegrad",
                                description="tapegrad's command line: gradient checks and the "
                                            "op registry.")
    p.add_argument("--version", action="version", version=f"tapegrad {tg.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{check,ops}")
    check = sub.add_parser("check", help="gradient-check every primitive and custom_gradient "
                                         "function a file or module defines, on its samples")
    check.add_argument("target", metavar="PATH_OR_MODULE",
                       help="a .py file, or a dotted module name")
    check.add_argument("--order", type=int, default=2,
                       help="check derivatives of orders 1 to ORDER (default 2)")
    check.add_argument("--seed", type=int, default=0, help="seed of the random samples and "
                                                           "directions (default 0)")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="print the whole report of a failure")
    check.set_defaults(run=_check)
    ops = sub.add_parser("ops", help="list the registered op types")
    ops.set_defaults(run=_ops)
    return p


def main(argv=None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit status:
    0 success, 1 a check failed, 2 a usage error (printed to stderr)."""
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as exc:
        print(f"python -m tapegrad {args.command}: error: {exc}", file=sys.stderr)
        return 2
