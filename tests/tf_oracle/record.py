"""Record the oracle: run every case of ``cases.py`` with real TensorFlow and write their
outputs to ``values.npz`` (arrays named ``<case>/<k>``, dtypes kept) and the ``tf.print``
texts to ``prints.json``, next to this file. ``tests/test_compat_tensorflow_oracle.py`` compares
``tapegrad.compat.tensorflow`` against them, without TensorFlow. Run it again after adding
cases::

    /path/to/tensorflow-venv/bin/python tests/tf_oracle/record.py

Not collected by pytest (no test_ prefix).
"""
import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def outputs(result):
    items = result if isinstance(result, (list, tuple)) else (result,)
    return [np.asarray(x) for x in items]


def main():
    arrays = {"_version": np.asarray(tf.__version__)}
    failed = []
    for name, fn in cases.CASES.items():
        try:
            result = outputs(fn(tf))
        except Exception as e:  # a case TensorFlow rejects: fix the case
            failed.append(name)
            print(f"case {name} failed in TensorFlow: {type(e).__name__}: {e}")
            continue
        for k, a in enumerate(result):
            arrays[f"{name}/{k}"] = a
    if failed:
        raise SystemExit(f"not recorded: {failed}")
    np.savez_compressed(os.path.join(HERE, "values.npz"), **arrays)
    prints = {}
    with tempfile.TemporaryDirectory() as d:
        for name, args in cases.PRINTS.items():
            path = os.path.join(d, name)
            tf.print(*args(tf), output_stream=f"file://{path}")
            with open(path) as f:
                prints[name] = f.read()
    with open(os.path.join(HERE, "prints.json"), "w") as f:
        json.dump({"tensorflow": tf.__version__, "prints": prints}, f, indent=1)
    print(f"recorded {len(cases.CASES)} cases ({len(arrays) - 1} arrays) and {len(prints)} "
          f"prints with TensorFlow {tf.__version__}")


if __name__ == "__main__":
    main()
