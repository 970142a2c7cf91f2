"""Runs one notebook's cells in one namespace; one JSON line per cell on the results file.

Invoked by run.py as ``python worker.py JOB.json RESULTS.jsonl``. JOB holds ``cells`` (list of
source strings, already import-swapped and magic-stripped) and ``timeout`` (seconds per cell).
Each result line: ``{"i", "ok", "error", "etype", "stdout", "value", "seconds"}`` where ``value``
is a structural encoding of the cell's last expression (see :func:`encode`).
"""
import ast
import contextlib
import io
import json
import os
import signal
import sys
import time
import traceback
import types


class _Stub:
    """Stands for anything from matplotlib: callable, indexable, unpacks into two stubs."""

    def __call__(self, *a, **k):
        return _Stub()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub()

    def __getitem__(self, k):
        return _Stub()

    def __setitem__(self, k, v):
        pass

    def __iter__(self):
        return iter([_Stub(), _Stub()])

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def __repr__(self):
        return "<plot stub>"


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub()


def _install_plot_stubs():
    # Plotting is stubbed in both runs (matplotlib is absent from the TensorFlow venv): the cells
    # still compute the values they plot, the plot itself is a no-op returning a stub.
    for name in ("matplotlib", "matplotlib.pyplot", "matplotlib.colors", "matplotlib.cm",
                 "mpl_toolkits", "mpl_toolkits.mplot3d", "seaborn", "IPython", "IPython.display"):
        m = _StubModule(name)
        m.__path__ = []
        sys.modules[name] = m
    sys.modules["matplotlib"].pyplot = sys.modules["matplotlib.pyplot"]


class CellTimeout(BaseException):
    pass


def _alarm(signum, frame):
    raise CellTimeout("cell timed out")


def encode(v, depth=0):
    """A JSON form of a displayed value: arrays as shape/dtype/values, containers recursively."""
    import numpy as np
    if depth > 4:
        return {"t": "repr", "r": repr(v)[:2000]}
    if isinstance(v, (bool, int, float, complex, str, bytes)) or v is None:
        if isinstance(v, complex):
            v = [v.real, v.imag]
        if isinstance(v, bytes):
            v = v.decode("latin-1")
        return {"t": "py", "v": v, "type": type(v).__name__}
    if isinstance(v, (list, tuple)):
        return {"t": type(v).__name__, "items": [encode(x, depth + 1) for x in v[:200]]}
    if isinstance(v, dict):
        return {"t": "dict", "items": {str(k): encode(x, depth + 1) for k, x in list(v.items())[:200]}}
    a = None
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
    elif hasattr(v, "numpy") and callable(getattr(v, "numpy")) and not isinstance(v, type):
        try:
            a = np.asarray(v.numpy())
        except Exception:
            a = None
    if a is not None:
        out = {"t": "array", "shape": list(a.shape), "dtype": str(a.dtype), "kind": type(v).__name__}
        if a.size <= 20000:
            if a.dtype.kind == "c":
                a = np.stack([a.real, a.imag], -1)
            if a.dtype.kind in "SUO":
                out["v"] = [x.decode("latin-1") if isinstance(x, bytes) else str(x)
                            for x in a.reshape(-1).tolist()]
            else:
                out["v"] = np.asarray(a, dtype=np.float64).reshape(-1).tolist() if a.dtype.kind != "V" else None
        return out
    try:
        r = repr(v)
    except Exception as e:  # noqa: BLE001
        r = "<repr failed: %s>" % type(e).__name__
    return {"t": "repr", "r": r[:2000], "type": type(v).__name__}


def _json_default(o):
    return repr(o)


def run_cell(src, ns):
    tree = ast.parse(src, "<cell>")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), ns)
    if last is not None:
        return eval(compile(last, "<cell>", "eval"), ns)
    return None


def main():
    job = json.load(open(sys.argv[1]))
    out = open(sys.argv[2], "a")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _install_plot_stubs()
    signal.signal(signal.SIGALRM, _alarm)
    ns = {"__name__": "__main__"}
    for i, src in enumerate(job["cells"]):
        if src is None:  # skipped by run.py (Keras, download, GPU, empty)
            continue
        buf = io.StringIO()
        rec = {"i": i, "ok": True, "error": None, "etype": None}
        t0 = time.time()
        signal.alarm(int(job["timeout"]))
        try:
            with contextlib.redirect_stdout(buf):
                val = run_cell(src, ns)
            rec["value"] = encode(val) if val is not None else None
        except BaseException as e:  # noqa: BLE001  (SystemExit, timeouts, ... are cell outcomes)
            rec["ok"] = False
            rec["etype"] = type(e).__name__
            msg = str(e).strip().splitlines()
            rec["error"] = "%s: %s" % (type(e).__name__, msg[0][:400] if msg else "")
            tb = traceback.extract_tb(e.__traceback__)
            rec["where"] = ["%s:%s %s" % (os.path.basename(f.filename), f.lineno, f.name) for f in tb[-3:]]
            rec["value"] = None
        finally:
            signal.alarm(0)
        rec["seconds"] = round(time.time() - t0, 3)
        rec["stdout"] = buf.getvalue()[-20000:]
        out.write(json.dumps(rec, default=_json_default) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
