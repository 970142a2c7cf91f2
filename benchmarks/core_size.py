"""Count the lines of code of tapegrad's op-agnostic core: docstrings, comments and blank lines
not counted. Run ``python benchmarks/core_size.py``; prints one line per module and the total.

The core is what knows no op: tensors, records, the registry, gradient validation, hooks, the
records API and the tape (``src/tapegrad/_*.py`` of layers 1 to 6 but ``_backend.py``, which
is the backend dispatch, and ``_structural.py``, the interface through which ``ops/`` serves the
core). Not counted, since they plug in from layer 9 through extension points: ``_jacobian.py``
(``GradientTape.jacobian``/``batch_jacobian``), ``_leaks.py`` (``TapeLeakWarning``) and
``_once_differentiable.py`` (gradients computed on raw arrays); pass ``--with-plugins`` to count
them too. ``_variables.py`` (``Variable``, device residency) is above the tape (layer 6¼).
"""
from __future__ import annotations

import ast
import io
import pathlib
import tokenize

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "tapegrad"
CORE = ["_tensor.py", "_records.py", "_registry.py", "_validation.py", "_hooks.py", "_views.py",
        "_tape.py"]


def code_lines(path: pathlib.Path) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    text = path.read_text()
    doc = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(
                body[0].value.value, str):
            doc.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                        tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - doc)


PLUGINS = ["_jacobian.py", "_leaks.py", "_once_differentiable.py"]


def main(argv=None):
    """Print the count per core module and the total; return the total."""
    import sys
    argv = sys.argv[1:] if argv is None else argv
    total = 0
    for name in CORE + (PLUGINS if "--with-plugins" in argv else []):
        n = code_lines(SRC / name)
        total += n
        print(f"{name:16s} {n:5d}")
    print(f"{'core total':16s} {total:5d}")
    return total


if __name__ == "__main__":
    main()
