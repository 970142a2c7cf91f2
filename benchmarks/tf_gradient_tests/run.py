"""Runs the restated TensorFlow gradient tests on TensorFlow and on tapegrad; prints the counts.

    PYTHONPATH=src .venv/bin/python benchmarks/tf_gradient_tests/run.py [--tf-python /tmp/tfvenv/bin/python]

Each side runs in its own process with unittest (the TensorFlow venv has no pytest); only the
tests that pass on TensorFlow count. Failures on tapegrad are grouped by their first error line.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = r'''
import json, sys, unittest, traceback
sys.path.insert(0, sys.argv[1])
suite = unittest.defaultTestLoader.discover(sys.argv[1], pattern="test_*.py")
res = {}
class R(unittest.TestResult):
    def addSuccess(self, t): res[t.id()] = None
    def addFailure(self, t, e): res[t.id()] = self._line(e)
    def addError(self, t, e): res[t.id()] = self._line(e)
    def addSkip(self, t, why): res[t.id()] = "skipped: " + why
    def _line(self, e):
        msg = str(e[1]).strip().splitlines()
        return "%s: %s" % (e[0].__name__, msg[0][:300] if msg else "")
suite.run(R())
json.dump(res, open(sys.argv[2], "w"), indent=1)
'''


def run_side(python, impl, out):
    env = dict(os.environ, TG_TF=impl, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([python, "-c", CHILD, HERE, out], env=env, check=True, stderr=subprocess.DEVNULL)
    return json.load(open(out))


def cause(err):
    m = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", err) or \
        re.search(r"(tf\.[\w.]+) is not provided", err)
    if m:
        return "%s missing" % ".".join(g.replace("tapegrad.compat.tensorflow", "tf") for g in m.groups())
    return re.sub(r"\d+(\.\d+)?", "N", err)[:120]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tf-python", default="/tmp/tfvenv/bin/python")
    ap.add_argument("--tf-results", default=os.path.join(HERE, "tf_2.21_results.json"),
                    help="TensorFlow's outcomes; recorded with --record, else read")
    ap.add_argument("--record", action="store_true", help="(re)run the tests on TensorFlow first")
    ap.add_argument("--out", default="/tmp/tg_gradient_tests.json")
    a = ap.parse_args()
    if a.record or not os.path.exists(a.tf_results):
        run_side(a.tf_python, "tensorflow", a.tf_results)
    tf_res = json.load(open(a.tf_results))
    tg_res = run_side(sys.executable, "tapegrad", a.out)
    counted = [t for t, e in tf_res.items() if e is None]
    passed = [t for t in counted if tg_res.get(t, "missing") is None]
    groups = {}
    for t in counted:
        if tg_res.get(t, "missing") is not None:
            groups.setdefault(cause(tg_res.get(t) or "missing"), []).append(t.split(".", 1)[1])
    print("tests: %d; pass on TensorFlow: %d; pass on tapegrad (of those): %d" % (
        len(tf_res), len(counted), len(passed)))
    not_tf = sorted(t for t, e in tf_res.items() if e is not None)
    if not_tf:
        print("not counted (fail on TensorFlow): " + ", ".join(t.split(".")[-1] for t in not_tf))
    print("\n| cause on tapegrad | tests |\n|---|---|")
    for c, ts in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print("| %s | %d: %s |" % (c.replace("|", "\\|"), len(ts), ", ".join(x.split(".")[-1] for x in ts)))


if __name__ == "__main__":
    main()
