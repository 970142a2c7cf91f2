"""python -m tapegrad: check, ops, --version (run as subprocesses on fixture files)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import tapegrad as tg

SRC = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))


def run(*args, cwd=None):
    """Run ``python -m tapegrad *args`` on this tapegrad; returns the CompletedProcess."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [SRC, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "tapegrad", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


PASSING = '''
import numpy as np
import tapegrad as tg

@tg.primitive("CliFixtureCube", samples=[tg.Sample((3,)), tg.Sample((2, 2))])
def cube(x):
    return x ** 3

@tg.RegisterGradient("CliFixtureCube", reads="inputs")
def _cube_grad(op, dy):
    (x,) = op.inputs
    return 3.0 * x * x * dy

@tg.test.samples(tg.Sample((4,), domain=(0.5, 2.0)))
@tg.custom_gradient
def log_of(x):
    def grad(dy):
        return dy / x
    return tg.log(x), grad

@tg.test.samples(tg.Sample((3,)))
@tg.custom_gradient(surrogate=True)
def ste_round(x):
    return tg.round(x), lambda dy: dy

def helper(x):  # a plain function: not an op
    return x
'''

BROKEN = '''
import tapegrad as tg

@tg.test.samples(tg.Sample((3,)))
@tg.custom_gradient
def bad_square(x):
    def grad(dy):
        return 3.0 * x * dy  # should be 2 x dy
    return x * x, grad

@tg.custom_gradient
def undeclared(x):
    return x, lambda dy: dy
'''


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_check_passes_a_file_with_a_primitive_and_custom_gradients(tmp_path):
    result = run("check", str(write(tmp_path, "good_ops.py", PASSING)))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"tapegrad check {tmp_path / 'good_ops.py'} (order 2, seed 0): 3 ops"
    assert lines[1].startswith("PASS      CliFixtureCube  [primitive, ")
    assert lines[1].endswith("good_ops.py:5]: 2 samples, orders 1-2")
    assert any(ln.startswith("PASS      log_of  [custom_gradient, ") for ln in lines)
    surrogate = next(ln for ln in lines if "ste_round" in ln)
    assert surrogate.startswith("SURROGATE ste_round")
    assert "differs from the derivative by 1" in result.stdout
    assert lines[-1] == "result: 2 passed, 1 passed with declared surrogate gradients, 0 failed"


def test_check_fails_a_wrong_gradient_naming_it_and_an_op_without_samples(tmp_path):
    result = run("check", str(write(tmp_path, "bad_ops.py", BROKEN)), "--order", "1")
    assert result.returncode == 1
    out = result.stdout
    assert "FAIL      bad_square  [custom_gradient, " in out
    assert "worst element: input 0 at index" in out
    assert "gradient / derivative = 1.5" in out  # 3 x dy against the derivative 2 x
    assert ("FAIL      undeclared  [custom_gradient, " in out
            and "no samples — declare them with @tg.test.samples(tg.Sample(...)) above "
                "@tg.custom_gradient" in out)
    assert out.splitlines()[-1] == "result: 0 passed, 2 failed"


def test_check_imports_a_dotted_module_name(tmp_path):
    pkg = tmp_path / "fixturepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write(pkg, "ops.py", PASSING.replace("CliFixtureCube", "CliFixtureCube2"))
    result = run("check", "fixturepkg.ops", "--order", "1", "--seed", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("tapegrad check fixturepkg.ops (order 1, seed 3): 3 ops")


def test_usage_errors_exit_2_with_a_clear_message(tmp_path):
    missing = run("check", str(tmp_path / "nope.py"))
    assert missing.returncode == 2
    assert f"error: no such file: '{tmp_path / 'nope.py'}'" in missing.stderr
    crashing = run("check", str(write(tmp_path, "crash.py", "raise RuntimeError('boom')\n")))
    assert crashing.returncode == 2
    assert "importing" in crashing.stderr and "RuntimeError: boom" in crashing.stderr
    empty = run("check", str(write(tmp_path, "empty.py", "x = 1\n")))
    assert empty.returncode == 2
    assert "defines no primitive and no module-level custom_gradient" in empty.stderr
    no_module = run("check", "no_such_module_xyz")
    assert no_module.returncode == 2 and "no module named 'no_such_module_xyz'" in no_module.stderr
    assert run().returncode == 2  # no command: argparse's usage error


def test_ops_lists_the_registry_and_version_is_the_package_version():
    result = run("ops")
    assert result.returncode == 0
    rows = {ln.split()[0]: ln for ln in result.stdout.splitlines()[1:-1]}
    assert "_matmul_grad" in rows["MatMul"] and "tapegrad.ops.products:" in rows["MatMul"]
    assert "none (no_gradient)" in rows["ArgMax"]
    # the built-in op types at least (this process may have registered more)
    n = len(rows)
    assert result.stdout.splitlines()[-1] == f"{n} op types" and n >= 100
    assert set(rows) <= set(tg.registered_ops())
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"tapegrad {tg.__version__}"


def test_samples_decorator_attaches_samples_and_refuses_misuse():
    @tg.test.samples(tg.Sample((2,)), tg.Sample(()))
    @tg.custom_gradient
    def ident(x):
        return x, lambda dy: dy

    assert [s.args for s in ident.samples] == [((2,),), ((),)]
    with pytest.raises(TypeError, match="not a custom_gradient function; place "
                                        r"@tg.test.samples\(...\) above @tg.custom_gradient"):
        tg.test.samples(tg.Sample((2,)))(lambda x: x)
    with pytest.raises(TypeError, match=r"expected tg.Sample objects, got tuple \(3,\)"):
        tg.test.samples((3,))
    with pytest.raises(TypeError, match=r"give at least one tg.Sample"):
        tg.test.samples()


def test_order_below_one_is_a_usage_error(capsys):
    from tapegrad import cli

    assert cli.main(["check", "anything.py", "--order", "0"]) == 2
    assert "error: --order must be >= 1, got 0" in capsys.readouterr().err


SELF_CHECKED = '''
import tapegrad as tg

@tg.custom_gradient
def square(x):  # no samples: checked by main()
    def grad(dy):
        return FACTOR * x * dy
    return x * x, grad

@tg.custom_gradient
def never_called(x):
    return x, lambda dy: dy

def main():
    x = tg.Variable([0.5, -1.0, 2.0])
    with tg.GradientTape() as tape:
        y = tg.sum(square(x))
    print("gradient", tape.gradient(y, x).numpy())
'''


def test_check_runs_main_and_self_checks_a_rule_without_samples(tmp_path):
    wrong = run("check", str(write(tmp_path, "wrong_rule.py",
                                   "FACTOR = 3.0  # should be 2\n" + SELF_CHECKED)))
    assert wrong.returncode == 1
    lines = wrong.stdout.splitlines()
    assert lines[0].endswith("2 ops, then main() with the self-checks")
    assert lines[1].startswith("main()    ran in ") and lines[1].endswith(
        "1 user-defined rule self-checked on the inputs of its calls")
    assert "gradient [" not in wrong.stdout  # what main() prints is shown with -v only
    fail = next(k for k, ln in enumerate(lines) if ln.startswith("FAIL      square  "))
    assert "no samples; its rule square.<locals>.grad (" in lines[fail]
    assert "wrong_rule.py:7) self-checked in main()" in lines[fail]
    message = lines[fail + 1].strip()
    assert message.startswith("gradient check: the gradient of op type 'CustomGradient:square'"
                              " (its gradient square.<locals>.grad")
    assert "disagrees with a central difference of the forward at input 0 'x'" in message
    # <g(dy), v> with g = 3 x dy against the central difference of x * x, 2 x dy: a ratio 1.5
    lhs = float(message.split("<g(dy), v> = ")[1].split()[0])
    rhs = float(message.split("(2h)> = ")[1].split()[0])
    assert lhs / rhs == pytest.approx(1.5, rel=1e-6)
    assert any(ln.startswith("FAIL      never_called  ") and ln.endswith(
        "no samples, and main() did not run its gradient — declare them with "
        "@tg.test.samples(tg.Sample(...)) above @tg.custom_gradient, or call it in main()")
        for ln in lines)
    assert lines[-1] == "result: 0 passed, 2 failed"

    right = run("check", str(write(tmp_path, "right_rule.py",
                                   "FACTOR = 2.0\n" + SELF_CHECKED)), "-v", "--no-main")
    assert right.returncode == 1  # --no-main: no samples, nothing checks them
    fixed = SELF_CHECKED.replace("y = tg.sum(square(x))",
                                 "y = tg.sum(square(x) + never_called(x))")
    right = run("check", str(write(tmp_path, "right_rule.py", "FACTOR = 2.0\n" + fixed)), "-v")
    assert right.returncode == 0, right.stdout + right.stderr
    lines = right.stdout.splitlines()
    assert any(ln.startswith("PASS      square  ")
               and ln.endswith("self-checked in main(): passed") for ln in lines)
    assert any(ln.startswith("PASS      never_called  ") for ln in lines)
    assert "main() printed:" in lines and "gradient [ 2. -1.  5.]" in lines  # 2 x + 1
    assert lines[-1] == "result: 2 passed, 0 failed"


def test_check_reports_main_raising_and_a_bad_check_args(tmp_path):
    raising = run("check", str(write(tmp_path, "raising.py", SELF_CHECKED.replace(
        'print("gradient"', 'raise ValueError("boom"); print("gradient"'))))
    assert raising.returncode == 1
    assert any(ln.startswith("FAIL      main(): raised after ") for ln in
               raising.stdout.splitlines())
    assert "ValueError: boom" in raising.stdout
    bad = run("check", str(write(tmp_path, "badargs.py", "CHECK_ARGS = ['--quick']\n"
                                 "def main(argv=None):\n    pass\n")))
    assert bad.returncode == 2
    assert ("badargs.CHECK_ARGS is a list; it must be a dict of keyword arguments for main() "
            "(a short run)") in bad.stderr


def test_check_runs_a_shipped_example_with_its_short_run():
    path = os.path.join(os.path.dirname(SRC), "examples", "navier_stokes.py")
    result = run("check", path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"tapegrad check {path} (order 2, seed 0): 0 ops, then main() with the " \
                       "self-checks"
    assert lines[2].startswith("PASS      rule of CustomGradient:spectral: "
                               "spectral_operator.<locals>.apply (")
    assert lines[-1] == "result: 1 passed, 0 failed"
