"""Runs TensorFlow's own guides cell by cell on TensorFlow (record) or on tapegrad (compare).

    # the oracle, with real TensorFlow (writes tf_2.21.json next to this file)
    /tmp/tfvenv/bin/python benchmarks/tf_guides/run.py record
    # the measurement, with tapegrad (import swapped to tapegrad.compat.tensorflow)
    PYTHONPATH=src .venv/bin/python benchmarks/tf_guides/run.py compare [--report out.md]

See README.md in this directory for what is skipped, how values are compared, and the options.
"""
import argparse
import ast
import concurrent.futures
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GUIDES = ["autodiff", "advanced_autodiff", "function", "intro_to_graphs", "basic_training_loops",
          "intro_to_modules", "variable", "tensor", "autograph", "random_numbers", "checkpoint",
          "core/logistic_regression_core", "core/mlp_core", "core/optimizers_core",
          "core/quickstart_core", "core/matrix_core"]
DEFAULT_MIRROR = "/work/.mirror/tensorflow+docs/repo"

# Cells left out in both runs, first matching reason wins.
SKIP_RULES = [
    ("keras", re.compile(r"\bkeras\b")),
    ("download", re.compile(r"https?://|get_file|\btfds\b|tensorflow_datasets|urlretrieve|read_csv|load_data\(")),
    ("gpu", re.compile(r"\bGPU\b|\bTPU\b|gpu:|list_physical_devices")),
]
# Cells whose values depend on a random draw: compared for shape/dtype only (see README).
RANDOM_RE = re.compile(r"random|shuffle|initializer|glorot|dropout|RandomNormal")
# Cells that show wall-clock timings: their stdout numbers are not compared.
TIMING_RE = re.compile(r"\btime\.|timeit|perf_counter|datetime")
RTOL, ATOL = 1e-4, 1e-5


# ----------------------------------------------------------------------------- notebooks
def load_notebook(docs, name):
    """The code cells' sources of guide ``name`` (None if the guide does not exist)."""
    path = os.path.join(docs, name + ".ipynb")
    if os.path.isfile(path):
        text = open(path).read()
    else:
        git_dir = docs
        r = subprocess.run(["git", "-C", git_dir, "show", "HEAD:site/en/guide/%s.ipynb" % name],
                           capture_output=True, text=True)
        if r.returncode:
            return None
        text = r.stdout
    nb = json.loads(text)
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


def docs_version(docs):
    r = subprocess.run(["git", "-C", docs, "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else os.path.abspath(docs)


def strip_magics(src):
    """Drops ``!shell`` and ``%magic`` lines (``%%time`` style cell magics too)."""
    lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("!", "%"))]
    return "\n".join(lines).strip()


def swap_import(src):
    src = re.sub(r"^(\s*)import tensorflow as tf\b", r"\1import tapegrad.compat.tensorflow as tf",
                 src, flags=re.M)
    return re.sub(r"^(\s*)from tensorflow import ", r"\1from tapegrad.compat.tensorflow import ",
                  src, flags=re.M)


def _names(src):
    """(free loads, stores) of a cell, for the random-taint flow: a load counts when it comes on
    or before the line of the cell's first store of that name."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set(), set()
    loads, stores = {}, {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            d = stores if isinstance(n.ctx, ast.Store) else loads
            d[n.id] = min(d.get(n.id, n.lineno), n.lineno)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            stores[n.name] = min(stores.get(n.name, n.lineno), n.lineno)
    free = {k for k, line in loads.items() if k not in stores or line <= stores[k]}
    return free, set(stores)


def _code_only(src):
    """The cell without comment lines (licence headers, #@title ...); '' if it has no statement."""
    try:
        if not ast.parse(src).body:
            return ""
    except SyntaxError:
        pass
    return "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("#"))


def _imports_of(src):
    """A skipped cell's top-level imports without Keras (run, never counted), or None."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    keep = [ast.get_source_segment(src, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    keep = [k for k in keep if "keras" not in k]
    return "\n".join(keep) or None


_VIRTUAL_SET = re.compile(r"set_(?:virtual|logical)_device_configuration")
_VIRTUAL_CONF = re.compile(r"(?:Virtual|Logical)DeviceConfiguration\(")


def classify(cells):
    """Per cell: dict(src=code to run or None, skip=reason or None, random=bool, timing=bool)."""
    out, tainted = [], set()
    for raw in cells:
        src = strip_magics(raw)
        code = _code_only(src)
        skip = None
        if not code.strip():
            skip = "no code (comments, magics)"
        else:
            for reason, rx in SKIP_RULES:
                if rx.search(code):
                    skip = reason
                    break
        loads, stores = _names(src) if not skip else (set(), set())
        rnd = bool(not skip and (RANDOM_RE.search(code) or loads & tainted))
        tainted = (tainted | stores) if rnd else (tainted - stores)
        out.append({"src": _imports_of(src) if skip else src, "skip": skip, "random": rnd,
                    "timing": bool(not skip and TIMING_RE.search(src)),
                    "hash": hashlib.sha1(raw.encode()).hexdigest()[:12]})
        if skip and _VIRTUAL_SET.search(code):  # a skipped cell that makes N virtual CPUs
            out[-1]["virtual_cpus"] = len(_VIRTUAL_CONF.findall(code))
    return out


# ----------------------------------------------------------------------------- execution
def run_notebook(python, cells, swap, timeout, nb_timeout):
    """Runs the non-skipped cells in one subprocess; returns {cell index: result dict}."""
    srcs = [(swap_import(c["src"]) if swap else c["src"]) if c["src"] else None for c in cells]
    with tempfile.TemporaryDirectory() as d:
        job, res = os.path.join(d, "job.json"), os.path.join(d, "res.jsonl")
        json.dump({"cells": srcs, "timeout": timeout}, open(job, "w"))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        cpus = max([c.get("virtual_cpus", 0) for c in cells] + [0])
        if swap and cpus > 1:  # JAX makes host devices only at start: the skipped cell's CPUs
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                " --xla_force_host_platform_device_count=%d" % cpus)
        died = None
        try:
            p = subprocess.run([python, os.path.join(HERE, "worker.py"), job, res], cwd=d, env=env,
                               capture_output=True, text=True, timeout=nb_timeout)
            if p.returncode:
                died = "process died (exit %s): %s" % (p.returncode, p.stderr.strip()[-300:])
        except subprocess.TimeoutExpired:
            died = "notebook timeout (%ss)" % nb_timeout
        results = {}
        if os.path.exists(res):
            for line in open(res):
                r = json.loads(line)
                results[r["i"]] = r
    first = True
    for i, s in enumerate(srcs):
        if s is not None and i not in results:
            err = (died or "not run") if first else "not run: the notebook process died earlier"
            results[i] = {"i": i, "ok": False, "etype": "Crash", "error": "Crash: " + err,
                          "value": None, "stdout": ""}
            first = False
    return results


def execute(python, docs, guides, swap, args):
    plan = {}
    for g in guides:
        cells = load_notebook(docs, g)
        if cells is not None:
            plan[g] = classify(cells)
        else:
            print("guide %s: not found, skipped" % g, file=sys.stderr)
    out = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        futs = {ex.submit(run_notebook, python, cells, swap, args.cell_timeout, args.nb_timeout): g
                for g, cells in plan.items()}
        for f in concurrent.futures.as_completed(futs):
            g = futs[f]
            res = f.result()
            out[g] = [dict(c, **({"result": res.get(i)} if c["src"] and not c["skip"] else {}))
                      for i, c in enumerate(plan[g])]
            print("  %s: %d cells done" % (g, len(res)), file=sys.stderr)
    return {g: out[g] for g in plan}


# ----------------------------------------------------------------------------- comparison
_NUM = re.compile(r"(?<![\w.])[-+]?(?:nan|inf|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)(?![\w])")
_SHAPE = re.compile(r"shape=\(([^)]*)\)")
_DTYPE = re.compile(r"dtype=(?:tf\.|np\.|numpy\.)?(\w+)")


_ERRLINE = re.compile(r"^(?:\w+\.)*(\w*(?:Error|Exception))\b.*$", re.M)


def normalise_text(s):
    """(numbers, shape markers, dtype markers) of printed text, formatting dropped. A printed
    exception message (a line starting 'SomethingError') counts only by its type name."""
    s = _ERRLINE.sub(lambda m: m.group(1), s)
    s = re.sub(r"0x[0-9a-fA-F]+", "", s)
    s = re.sub(r":\d+'", "'", s)                       # variable names 'Variable:3'
    shapes = _SHAPE.findall(s)
    dtypes = _DTYPE.findall(s)
    s = _SHAPE.sub("", s)
    s = _DTYPE.sub("", s)
    s = re.sub(r"\b(?:b?float|u?int|complex|qint|quint)\d+\b", "", s)
    nums = []
    for t in _NUM.findall(s):
        try:
            nums.append(float(t))
        except ValueError:
            pass
    return nums, [x.replace(" ", "").rstrip(",") for x in shapes], dtypes


def close(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return False
        elif math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return False
        elif not (x == y or abs(x - y) <= ATOL + RTOL * abs(y)):
            return False
    return True


def flat_numbers(v):
    if v is None:
        return []
    t = v["t"]
    if t == "array":
        return list(v.get("v") or [])
    if t == "py":
        x = v["v"]
        if isinstance(x, bool) or isinstance(x, (int, float)):
            return [float(x)]
        if isinstance(x, list):
            return x
        return normalise_text(str(x))[0] if x is not None else []
    if t in ("list", "tuple"):
        return [n for it in v["items"] for n in flat_numbers(it)]
    if t == "dict":
        return [n for k in sorted(v["items"]) for n in flat_numbers(v["items"][k])]
    return normalise_text(v["r"])[0]


def compare_value(tf_v, tg_v, structure_only):
    """None if equal, else a short reason. Arrays: shape, dtype, values (unless structure_only)."""
    if tf_v is None and tg_v is None:
        return None
    if tf_v is None or tg_v is None:
        return "TF shows %s, tapegrad %s" % ("nothing" if tf_v is None else tf_v["t"],
                                             "nothing" if tg_v is None else tg_v["t"])
    if tf_v["t"] == "array" and tg_v["t"] == "array":
        if tf_v["shape"] != tg_v["shape"]:
            return "shape %s vs %s" % (tf_v["shape"], tg_v["shape"])
        if tf_v["dtype"] != tg_v["dtype"]:
            return "dtype %s vs %s" % (tf_v["dtype"], tg_v["dtype"])
        if structure_only or tf_v.get("v") is None or tg_v.get("v") is None:
            return None
        return None if close(tf_v["v"], tg_v["v"]) else "values differ"
    if tf_v["t"] in ("list", "tuple") and tg_v["t"] in ("list", "tuple"):
        if len(tf_v["items"]) != len(tg_v["items"]):
            return "length %d vs %d" % (len(tf_v["items"]), len(tg_v["items"]))
        for k, (a, b) in enumerate(zip(tf_v["items"], tg_v["items"])):
            r = compare_value(a, b, structure_only)
            if r:
                return "[%d]: %s" % (k, r)
        return None
    if tf_v["t"] == "dict" and tg_v["t"] == "dict":
        if sorted(tf_v["items"]) != sorted(tg_v["items"]):
            return "dict keys differ"
        for k in tf_v["items"]:
            r = compare_value(tf_v["items"][k], tg_v["items"][k], structure_only)
            if r:
                return "[%r]: %s" % (k, r)
        return None
    if tf_v["t"] == "py" and tg_v["t"] == "py" and isinstance(tf_v["v"], str):
        if structure_only:
            return None
        return None if tf_v["v"] == tg_v["v"] else "strings differ"
    if structure_only:
        return None
    a, b = flat_numbers(tf_v), flat_numbers(tg_v)
    return None if close(a, b) else "values differ (%s vs %s)" % (tf_v["t"], tg_v["t"])


def compare_stdout(tf_out, tg_out, structure_only):
    a, b = normalise_text(tf_out), normalise_text(tg_out)
    if not structure_only and not close(a[0], b[0]):
        return "printed numbers differ"
    if structure_only and len(a[0]) != len(b[0]):
        return "printed number count differs"
    for what, x, y in (("shapes", a[1], b[1]), ("dtypes", a[2], b[2])):
        if x and y and x != y:
            return "printed %s differ" % what
    return None


def cause_of(err, nb_cells, idx):
    """Groups an error message into a cause, e.g. 'tf.signal missing'."""
    m = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", err)
    if m:
        mod = m.group(1).replace("tapegrad.compat.tensorflow", "tf")
        return "%s.%s missing" % (mod, m.group(2))
    m = re.search(r"(tf\.[\w.]+) is not provided", err) or re.search(r"(tf\.[\w.]+): .*not provided", err)
    if m:
        return "%s missing" % m.group(1)
    m = re.search(r"'(\w+)' object has no attribute '(\w+)'", err)
    if m:
        return "%s.%s missing" % (m.group(1), m.group(2))
    if err.startswith("NameError"):
        return "NameError (a name from an earlier cell that failed or was skipped)"
    if err.startswith("Crash"):
        return err[:90]
    if err.startswith("CellTimeout"):
        return "cell timeout"
    msg = re.sub(r"'[^']*'", "'…'", err)
    msg = re.sub(r"\d+", "N", msg)
    return msg[:110]


def compare(oracle, mine):
    """Per guide counts and per failing cell details."""
    rows, fails, diffs, skips = [], {}, [], {}
    for g, tf_cells in oracle["guides"].items():
        tg_cells = mine.get(g)
        if tg_cells is None:
            continue
        r = dict(guide=g, cells=len(tf_cells), skipped=0, tf_ok=0, tg_ok=0, equal=0, random=0)
        for i, (a, b) in enumerate(zip(tf_cells, tg_cells)):
            if a["hash"] != b["hash"]:
                print("warning: %s cell %d differs from the oracle's notebook" % (g, i), file=sys.stderr)
            if a["skip"]:
                r["skipped"] += 1
                skips[a["skip"]] = skips.get(a["skip"], 0) + 1
                continue
            if not a["result"]["ok"]:
                continue
            r["tf_ok"] += 1
            rb = b["result"]
            if not rb["ok"]:
                c = cause_of(rb["error"], tg_cells, i)
                fails.setdefault(c, []).append("%s#%d" % (g, i))
                continue
            r["tg_ok"] += 1
            so = a["random"]
            r["random"] += so
            why = compare_value(a["result"]["value"], rb["value"], so)
            if not why and not a["timing"]:
                why = compare_stdout(a["result"]["stdout"], rb["stdout"], so)
            if why:
                diffs.append((g, i, why, a["src"].splitlines()[0][:70] if a["src"] else ""))
            else:
                r["equal"] += 1
        rows.append(r)
    return rows, fails, diffs, skips


def markdown(rows, fails, diffs, skips, meta):
    L = ["TensorFlow guides on tapegrad (oracle: TensorFlow %s, docs %s)" % (
        meta.get("tf_version"), meta.get("docs", "")[:12]), "",
         "| guide | code cells | skipped | run on TF | run on tapegrad | values equal | (random: shape/dtype only) |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    tot = dict(cells=0, skipped=0, tf_ok=0, tg_ok=0, equal=0, random=0)
    for r in rows:
        L.append("| %s | %d | %d | %d | %d | %d | %d |" % (r["guide"], r["cells"], r["skipped"], r["tf_ok"],
                                                         r["tg_ok"], r["equal"], r["random"]))
        for k in tot:
            tot[k] += r[k]
    pct = lambda x: "%.0f%%" % (100.0 * x / tot["tf_ok"]) if tot["tf_ok"] else "-"
    L.append("| **total** | %d | %d | %d | %d (%s) | %d (%s) | %d |" % (
        tot["cells"], tot["skipped"], tot["tf_ok"], tot["tg_ok"], pct(tot["tg_ok"]), tot["equal"],
        pct(tot["equal"]), tot["random"]))
    L += ["", "Skipped cells (not run in either): " + ", ".join(
        "%s %d" % kv for kv in sorted(skips.items(), key=lambda kv: -kv[1]))]
    L += ["", "Failures on tapegrad (cells that run on TF), by first error:", "",
          "| cause | cells | where |", "|---|---:|---|"]
    for c, where in sorted(fails.items(), key=lambda kv: -len(kv[1])):
        L.append("| %s | %d | %s |" % (c.replace("|", "\\|"), len(where), ", ".join(where[:6]) +
                                       (" …" if len(where) > 6 else "")))
    L += ["", "Cells that run on both but show different values:", "", "| cell | difference | first line |",
          "|---|---|---|"]
    for g, i, why, first in diffs:
        L.append("| %s#%d | %s | `%s` |" % (g, i, why, first.replace("|", "\\|").replace("`", "'")))
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["record", "compare"])
    ap.add_argument("--docs", default=None,
                    help="a directory of <guide>.ipynb files or a tensorflow/docs git dir "
                         "(default: notebooks/ here if present, else %s)" % DEFAULT_MIRROR)
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the cells")
    ap.add_argument("--oracle", default=os.path.join(HERE, "tf_2.21.json"))
    ap.add_argument("--guides", default=",".join(GUIDES))
    ap.add_argument("--jobs", "-j", type=int, default=2)
    ap.add_argument("--cell-timeout", type=int, default=60)
    ap.add_argument("--nb-timeout", type=int, default=300)
    ap.add_argument("--report", help="also write the markdown table here")
    ap.add_argument("--details", help="write per-cell outcomes (JSON) here")
    args = ap.parse_args(argv)
    docs = args.docs or (os.path.join(HERE, "notebooks") if os.path.isdir(os.path.join(HERE, "notebooks"))
                         else DEFAULT_MIRROR)
    guides = [g for g in args.guides.split(",") if g]
    t0 = time.time()
    if args.mode == "record":
        res = execute(args.python, docs, guides, False, args)
        ver = subprocess.run([args.python, "-c", "import tensorflow as tf; print(tf.__version__)"],
                             capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        meta = {"tf_version": ver.stdout.strip(), "docs": docs_version(docs),
                "recorded": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - t0)}
        if args.guides != ",".join(GUIDES) and os.path.exists(args.oracle):  # update those guides
            old = json.load(open(args.oracle))
            old["guides"].update(res)
            res = {g: old["guides"][g] for g in GUIDES if g in old["guides"]}
        json.dump({"meta": meta, "guides": res}, open(args.oracle, "w"), indent=1)
        print("wrote %s in %.0fs" % (args.oracle, time.time() - t0))
        return
    oracle = json.load(open(args.oracle))
    res = execute(args.python, docs, [g for g in guides if g in oracle["guides"]], True, args)
    rows, fails, diffs, skips = compare(oracle, res)
    md = markdown(rows, fails, diffs, skips, oracle["meta"])
    md += "\n(%.0f s wall, %d notebook processes in parallel)\n" % (time.time() - t0, args.jobs)
    print(md)
    if args.report:
        open(args.report, "w").write(md)
    if args.details:
        json.dump(res, open(args.details, "w"), indent=1)


if __name__ == "__main__":
    main()
