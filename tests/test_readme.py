"""Every ``python`` code block of README.md (and of docs/*.md) runs as pasted, alone, in a
fresh interpreter.

A block followed by a paragraph that starts with "raises" must raise, and the first line of the
``text`` block after it must be the first line of the error it raises. Blocks run in a
temporary directory (some write files). Blocks that need an optional dependency (JAX for
``tg.function``, safetensors for checkpoints and exports, flatbuffers for exports) are skipped
without it. The quickstart's primitive has a NumPy forward, as a user's first primitive often
does, so the blocks run on NumPy only.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tapegrad as tg

pytestmark = pytest.mark.skipif(
    tg._backend.default_namespace().__name__ != "numpy",
    reason="a pasted block runs on the default backend, NumPy: the NumPy run checks them")
ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # the docs' blocks run as pasted too
_BLOCK = re.compile(r"```python\n(.*?)```\n(.*?)(?=```python|\Z)", re.S)
_NEEDS = {"tg.function": "jax", "tf.function": "jax", "import jax": "jax",
          "tg.train.": "safetensors", "tg.saved_model.": "safetensors",
          "saved_model.save": "flatbuffers"}


def _blocks():
    found = []
    for doc in DOCS:
        text = doc.read_text()
        prefix = "" if doc == README else f"{doc.stem}-"
        for code, after in _BLOCK.findall(text):
            raises = None
            if after.lstrip().startswith("raises"):
                raises = re.search(r"```text\n(.*?)\n", after).group(1)
            line = text[:text.index(code)].count("\n") + 1
            found.append(pytest.param(code, raises, id=f"{prefix}line{line}"))
    return found


def test_the_readme_has_its_blocks():
    assert len([b for b in _blocks() if not b.id.startswith("checkpointing-")]) >= 11
    assert any(b.id.startswith("checkpointing-") for b in _blocks())


@pytest.mark.parametrize("code, raises", _blocks())
def test_readme_block_runs_as_pasted(code, raises, tmp_path):
    for marker, module in _NEEDS.items():
        if marker in code:
            pytest.importorskip(module)
    if "tg.viz.draw(" in code and shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not on PATH (.ci/run installs it)")
    (tmp_path / "block.py").write_text(code)  # pasted into a file (AutoGraph reads source)
    run = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    if raises is None:
        assert run.returncode == 0, run.stderr[-3000:]
    else:
        assert run.returncode != 0, "the README says this block raises; it ran"
        last_lines = run.stderr.strip().splitlines()
        first = next(k for k, ln in enumerate(last_lines) if ln.startswith(raises.split(":")[0]))
        assert last_lines[first].split(" (")[0] == raises.split(" (")[0], run.stderr[-3000:]
