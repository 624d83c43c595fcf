"""The documentation: it builds without a warning or a broken reference, its
Python examples run, and every example program has a test."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

import eagerrt as ert

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def test_docs_build_strictly(tmp_path: pathlib.Path) -> None:
    """What ``./dev docs`` runs: any warning (a reference to nothing, a page in
    no table of contents, a docstring autodoc can't parse) fails the build."""
    src = str(pathlib.Path(ert.__file__).resolve().parents[1])
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "sphinx", "-E", "-W", "--keep-going", "-n", "-q", "-b", "html"),
            *(str(DOCS), str(tmp_path / "html")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": src},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    pages = {p.relative_to(tmp_path / "html").as_posix() for p in tmp_path.rglob("*.html")}
    for page in PAGES:
        assert page.relative_to(DOCS).with_suffix(".html").as_posix() in pages
    # The reference documents what users call, ops made from tables included.
    ops = (tmp_path / "html" / "reference" / "ops.html").read_text()
    for name in ("eagerrt.exp", "eagerrt.conv2d", "eagerrt.fft.rfft", "eagerrt.linalg.svd"):
        assert f'id="{name}"' in ops, name
    tensor = (tmp_path / "html" / "reference" / "tensor.html").read_text()
    assert 'id="eagerrt.Tensor.numpy"' in tensor


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_python_examples_in_docs_run(page: pathlib.Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(textwrap.dedent(block), str(page), "exec"), namespace)


def test_every_example_is_exercised_by_a_test() -> None:
    tests = "".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for example in sorted((ROOT / "examples").iterdir()):
        if example.suffix in (".py", ".ipynb"):
            assert f'"{example.name}"' in tests, f"no test runs examples/{example.name}"
    # The models are modules that tests import (``from models import resnet``).
    for model in sorted((ROOT / "examples" / "models").glob("*.py")):
        if model.stem != "__init__":
            imported = re.search(rf"from models import [\w, ]*\b{model.stem}\b", tests)
            assert imported, f"no test imports examples/models/{model.name}"
