"""A forked child gets working worker threads; the README and the demo run."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eagerrt as ert

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_offloaded_ops_work_in_a_forked_child() -> None:
    with ert.config.override(inline_threshold_ns=0):
        assert ert.exp(ert.zeros(3)).numpy(timeout=10).tolist() == [1.0, 1.0, 1.0]
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its pool's threads did not survive the fork
            try:
                value = ert.exp(ert.zeros(2)).numpy(timeout=10)
                os.write(write, b"ok" if value.tolist() == [1.0, 1.0] else b"wrong")
            finally:
                os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert os.read(read, 16) == b"ok"
        os.close(read)
        assert status == 0


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.S)


def test_readme_python_blocks_run(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _python_blocks((ROOT / "README.md").read_text())
    monkeypatch.chdir(tmp_path)  # files the examples write (a trace, a picture) land here
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(textwrap.dedent(block), "README.md", "exec"), namespace)
    assert (tmp_path / "trace.json").stat().st_size > 0  # the profiler's example
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    probabilities = namespace["probabilities"]
    assert isinstance(probabilities, np.ndarray) and probabilities.shape == (32, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_quickstart_demo_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "await -> ndarray" in out
    assert "call-time error" in out and "quickstart.py" in out
    assert "op 'take' failed" in out


def test_array_api_example_matches_numpy() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "array_api_generic.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "namespace=eagerrt" in done.stdout
    assert "matches numpy: True" in done.stdout and "NaNs left: 0" in done.stdout


def test_graph_mode_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "graph_mode.py")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "compiled == eager: True" in out
    assert "optimized graph:" in out and "memory plan:" in out
    assert "TracingError:" in out and "ert.cond" in out
    assert "cond: [" in out
