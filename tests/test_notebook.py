"""eagerrt in Jupyter and IPython: top-level ``await`` and examples/notebook.ipynb.

The notebook runs through a real Jupyter kernel (nbclient + ipykernel), the way
a user's notebook runs; the repository keeps it without outputs, so what a
reader sees is always what this test just produced.
"""

from __future__ import annotations

import base64
import math
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import nbformat
from nbclient import NotebookClient

import eagerrt as ert

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"


def _kernel_env() -> dict[str, str]:
    """The kernel imports the eagerrt under test, wherever it was imported from."""
    src = str(pathlib.Path(ert.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": src if not path else f"{src}{os.pathsep}{path}"}


def _run(nb: Any, cwd: pathlib.Path) -> Any:
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    return client.execute(env=_kernel_env())


def _texts(cell: Any) -> str:
    """Everything a cell printed or displayed as plain text."""
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def _htmls(cell: Any) -> str:
    return "".join(out.data.get("text/html", "") for out in cell.outputs if "data" in out)


def _code_cells_with(nb: Any, needle: str) -> Any:
    """The executed code cell whose source contains ``needle``."""
    found = [c for c in nb.cells if c.cell_type == "code" and needle in c.source]
    assert len(found) == 1, f"expected one cell with {needle!r}, found {len(found)}"
    return found[0]


def test_notebook_is_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_notebook_runs_in_a_jupyter_kernel(tmp_path: pathlib.Path) -> None:
    nb = _run(nbformat.read(NOTEBOOK, as_version=4), tmp_path)

    errors = [
        (cell.source.splitlines()[0], out.get("ename"), out.get("evalue"))
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "error"
    ]
    assert errors == []

    # Quick start: metadata at once, a rich display, top-level await.
    assert "(2, 10) float32 cpu" in _texts(_code_cells_with(nb, "y = model(x)"))
    display = next(c for c in nb.cells if c.cell_type == "code" and c.source.strip() == "y")
    assert 'class="eagerrt-tensor"' in _htmls(display)
    assert "shape=(2, 10), dtype=float32" in _texts(display)
    assert "rows sum to [1. 1.]" in _texts(_code_cells_with(nb, "probabilities = await y"))
    pending_cell = _texts(_code_cells_with(nb, "slow = "))
    assert pending_cell.splitlines() == ["True", str(round(1500 * 1500 * math.e))]

    # A failure is displayed, then raised on await.
    bad = _code_cells_with(nb, "bad = ert.take")
    assert "error" in _htmls(bad) and "IndexError" in _htmls(bad)
    assert "Tensor(<error: take failed: IndexError>" in _texts(bad)
    assert _texts(_code_cells_with(nb, "await (bad + 1)")).startswith("op 'take' failed")

    # Overlap: one line per strategy (the figures themselves vary with the machine).
    overlap = _texts(_code_cells_with(nb, "async def overlapped"))
    for name in ("io_alone", "one_at_a_time", "overlapped"):
        assert f"{name}: " in overlap and overlap.count("ms for 8 batches") == 3

    # Graph mode.
    compiled = _texts(_code_cells_with(nb, "async def compiled_model"))
    assert "compiled == eager: True" in compiled
    assert "ert.function compiled_model" in compiled
    assert "TracingError: Fix: use ert.where" in _texts(_code_cells_with(nb, "def branchy"))

    # A profile: the summary's rows (four chains of heavy(), one compiled call and
    # its steps), on the main thread and at least one worker, and its timeline picture.
    summary = _texts(_code_cells_with(nb, "with ert.profile() as prof:"))
    assert "probs: (256, 10)" in summary
    header, rule, *rows, total = summary.split("op ", 1)[1].splitlines()
    assert re.fullmatch(r"\s*kind +count +total ms +mean us +% wall +% inline", header)
    assert set(rule) == {"-"}
    counts = {(r.split()[0], r.split()[1]): int(r.split()[2]) for r in rows}
    assert counts[("matmul", "op")] == counts[("tanh", "op")] == 8
    assert counts[("mean", "op")] == 4
    assert counts[("compiled_model", "graph")] == 1
    assert counts[("fused[matmul,add,relu]", "step")] == 1
    tracks = re.fullmatch(r"\d+ events on (\d+) track\(s\) in [\d.]+ ms wall", total)
    assert tracks is not None and int(tracks.group(1)) >= 2, total
    picture = _code_cells_with(nb, "prof.plot(")
    pngs = [out.data["image/png"] for out in picture.outputs if "image/png" in out.get("data", {})]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG")


# IPython's own shell (not a kernel): its autoawait runs the cell on an asyncio
# loop; the tensor is completed on a worker thread while the cell awaits it.
_IPYTHON_SESSION = """\
import threading, eagerrt as ert
op = ert.define_op("ipython_gate", rule=lambda x, event: (x.shape, x.dtype))
_ = op.kernel()(lambda x, event: (event.wait(30), x * 2)[1])
gate = threading.Event()
with ert.config.override(inline_threshold_ns=0): t = op(ert.arange(3.0), event=gate)
print("before:", repr(t))
threading.Timer(0.2, gate.set).start()
print("awaited:", (await t).tolist(), "on", threading.current_thread().name)
"""


def test_top_level_await_in_the_ipython_shell() -> None:
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "IPython", "--no-banner", "--simple-prompt"),
            *("--HistoryManager.enabled=False", "--colors=nocolor"),
        ],
        input=_IPYTHON_SESSION,
        capture_output=True,
        text=True,
        timeout=120,
        env=_kernel_env(),
        check=False,
    )
    assert "before: Tensor(<pending>, shape=(3,), dtype=float64)" in done.stdout, done.stdout
    assert "awaited: [0.0, 2.0, 4.0] on MainThread" in done.stdout, done.stdout
    assert "Error" not in done.stdout
