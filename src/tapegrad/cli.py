"""``python -m tapegrad``: gradient-check the ops a module defines, list the op registry.

``python -m tapegrad check PATH_OR_MODULE [--order N] [--seed N] [--verbose] [--no-main]
[--rules {user,all}]`` imports a file (a path) or a module (a dotted name) and checks every op
it defines on its declared samples:

* each primitive whose forward is defined in it (``tg.primitive(..., samples=[...])``);
* each module-level ``custom_gradient`` function defined in it, with the samples declared by
  ``@tg.test.samples(tg.Sample(...), ...)`` above ``@tg.custom_gradient``.

Each sample runs :func:`tapegrad.test.check_gradients` (orders 1 to ``--order``, which also
checks each custom gradient's contract: one gradient per input of the right shape, linear in
the upstream gradient, equal to the derivative of its forward). One line per op: ``PASS``,
``FAIL`` (with the worst element; ``--verbose`` prints the whole report) or ``SURROGATE`` (a
declared surrogate gradient, reported, not failed).

Then, unless ``--no-main``, if the module has a function ``main``, it is run once with the
self-checks of :func:`tapegrad.debugging.gradient_checks` on (``calls=1``, ``tg.function`` calls
run eagerly so that every rule sees concrete values): each user-defined gradient rule
(``custom_gradient`` functions, also nested ones, ``RegisterGradient``, ``RegisterJVP``;
``--rules all``: tapegrad's own too) is checked the first time it runs, on the inputs of that
real call, no samples needed. One line per rule checked: ``PASS`` or ``FAIL`` with the check's
message. ``main`` is called as ``main(**CHECK_ARGS)`` when the module defines a dict
``CHECK_ARGS`` (a short run: few steps, no files written), else with no argument (``argv=[]``
when it takes ``argv``); what it prints is shown with ``--verbose`` only. An op without
samples passes or fails by the checks of its rule in ``main``; it fails when it has no
samples and ``main`` did not run its gradient. Exit status: 0 if every op and rule passes, 1
if one fails (or ``main`` raised), 2 for a usage error (no such file or module, an error while
importing it, no op and no ``main`` in it).

``python -m tapegrad ops`` lists the registry: op type, gradient function, JVP rule, where
the forward is defined (``module:line``). ``python -m tapegrad --version`` prints the version.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import io
import os
import sys
import time
import traceback
import warnings
import zlib

import numpy as np

import tapegrad as tg
from tapegrad.errors import describe_fn

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


def _run_main(module, rules):
    """Run ``module.main`` once with the self-checks on; ``(seconds, log, error, printed)``:
    ``log`` the checks' ``(rule, op type, message or None)``, ``error`` the traceback of what
    ``main`` raised (or None), ``printed`` what it wrote to standard output and error."""
    fn = module.main
    kwargs = getattr(module, "CHECK_ARGS", None)
    if kwargs is None:
        try:
            takes_argv = "argv" in inspect.signature(fn).parameters
        except (TypeError, ValueError):
            takes_argv = False
        kwargs = {"argv": []} if takes_argv else {}
    elif not isinstance(kwargs, dict):
        raise UsageError(f"{module.__name__}.CHECK_ARGS is a {type(kwargs).__name__}; it must "
                         "be a dict of keyword arguments for main() (a short run)")
    checks, log, printed = tg.debugging._CHECKS, [], io.StringIO()
    eager, error = tg.config.functions_run_eagerly(), None
    start = time.perf_counter()
    try:
        checks.log = log
        tg.config.run_functions_eagerly(True)  # compiled rules run on tracers: not checked
        with tg.debugging.gradient_checks(calls=1, action="warn", rules=rules), \
                warnings.catch_warnings(), contextlib.redirect_stdout(printed), \
                contextlib.redirect_stderr(printed):
            warnings.simplefilter("ignore", tg.errors.GradientCheckWarning)
            fn(**kwargs)
    except (Exception, SystemExit):  # noqa: BLE001 - reported as a failure of main()
        error = traceback.format_exc().rstrip()
    finally:
        checks.log = None
        tg.config.run_functions_eagerly(eager)
    return time.perf_counter() - start, log, error, printed.getvalue()


def _print(status, head, lines):
    print(f"{status:<9} {head}: {lines[0]}")
    for line in lines[1:]:
        print(f"            {line}")


def _check(args) -> int:
    if args.order < 1:
        raise UsageError(f"--order must be >= 1, got {args.order}")
    module = _import(args.target)
    ops = _ops_of(module)
    run_main = not args.no_main and callable(getattr(module, "main", None))
    if not ops and not run_main:
        raise UsageError(f"{args.target!r} defines no primitive and no module-level "
                         "custom_gradient function, and no main() to run with the self-checks: "
                         "nothing to check")
    print(f"tapegrad check {args.target} (order {args.order}, seed {args.seed}): "
          f"{len(ops)} op{'' if len(ops) == 1 else 's'}"
          + (", then main() with the self-checks" if run_main else ""))
    counts = dict.fromkeys(["PASS", "SURROGATE", "FAIL", "SKIP"], 0)
    later = []  # ops without samples, checked by main()
    for kind, name, fn, samples, differentiable in ops:
        head = f"{name}  [{kind}, {_where(fn)}]"
        if not differentiable:
            status, lines = "SKIP", ["declared without a gradient (tg.no_gradient)"]
        elif not samples and run_main:
            later.append((kind, name, head))
            continue
        else:
            status, lines = _check_one(kind, name, fn, samples, args.order, args.seed,
                                       args.verbose)
        counts[status] += 1
        _print(status, head, lines)
    if run_main:
        seconds, log, error, printed = _run_main(module, args.rules)
        rules = "user-defined rule" if args.rules == "user" else "rule"
        n = len(log)
        note = (f"ran in {seconds:.2f} s; {n} {rules}{'' if n == 1 else 's'} self-checked on "
                "the inputs of its calls")
        if error is not None:
            counts["FAIL"] += 1
            _print("FAIL", "main()", [f"raised after {seconds:.1f} s; {n} rule(s) checked",
                                      *error.splitlines()[-1 if not args.verbose else 0:]])
        else:
            print(f"{'main()':<9} {note}" + ("" if n or args.rules == "all" else
                                              " (--rules all checks tapegrad's own)"))
        if args.verbose and printed:
            print("main() printed:\n" + printed.rstrip())
        for kind, name, head in later:
            mine = [e for e in log if e[1] in (name, f"CustomGradient:{name}")]
            log = [e for e in log if e not in mine]
            failed = [e[2] for e in mine if e[2] is not None]
            if not mine:
                status, lines = "FAIL", [
                    "no samples, and main() did not run its gradient — declare them with "
                    f"{_DECLARE[kind].format(name=name)}, or call it in main()"]
            else:
                status = "FAIL" if failed else "PASS"
                lines = [f"no samples; its rule {describe_fn(mine[0][0])} self-checked in "
                         f"main(){'' if failed else ': passed'}", *failed]
            counts[status] += 1
            _print(status, head, lines)
        for rule, op_type, problem in log:
            status = "PASS" if problem is None else "FAIL"
            counts[status] += 1
            _print(status, f"rule of {op_type}", [describe_fn(rule)]
                   + ([] if problem is None else [problem]))
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
                                         "function a file or module defines, on its samples, "
                                         "and self-check the rules its main() runs")
    check.add_argument("target", metavar="PATH_OR_MODULE",
                       help="a .py file, or a dotted module name")
    check.add_argument("--order", type=int, default=2,
                       help="check derivatives of orders 1 to ORDER (default 2)")
    check.add_argument("--seed", type=int, default=0, help="seed of the random samples and "
                                                           "directions (default 0)")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="print the whole report of a failure")
    check.add_argument("--no-main", action="store_true",
                       help="do not run the module's main() with the self-checks")
    check.add_argument("--rules", choices=("user", "all"), default="user",
                       help="rules self-checked while main() runs: 'user' (defined outside "
                            "tapegrad, the default) or 'all' (tapegrad's own too)")
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
