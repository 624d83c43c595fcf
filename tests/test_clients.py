"""Third-party clients of the Array API on eagerrt: scikit-learn and SciPy (the
``clients`` extra), equal to numpy on the same inputs.

``tests/clients/run_clients.py`` runs them in a child process (SciPy's array API
support must be switched on before SciPy is first imported); see its docstring
for what it covers.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("sklearn", reason="scikit-learn is in the clients extra")
pytest.importorskip("scipy", reason="SciPy is in the clients extra")

SCRIPT = pathlib.Path(__file__).resolve().parent / "clients" / "run_clients.py"


# scikit-learn and SciPy hand these to Cython kernels wanting writable buffers,
# which fail the same way on a read-only numpy array; eagerrt hands numpy
# read-only views of tensors (the guide shows the copy: np.array(t)).
NEEDS_WRITABLE_BUFFERS = {
    "sklearn.metrics.additive_chi2_kernel.metric_pairwise",
    "sklearn.metrics.chi2_kernel.metric_pairwise",
    "scipy.table.signal._signaltools.sosfilt(sos, x)",
    "scipy.table.signal._signaltools.sosfiltfilt(sos, x)",
}


def test_scikit_learn_estimators_and_metrics_and_scipy_functions_equal_numpy() -> None:
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    results = report["results"]
    estimators = [k for k in results if k.startswith("sklearn.") and ".metrics." not in k]
    metrics = [k for k in results if k.startswith("sklearn.metrics.")]
    table = [k for k in results if k.startswith("scipy.table.")]
    # Every estimator scikit-learn tags as array-API ready, and GaussianMixture.
    assert len(estimators) >= 12 and "sklearn.GaussianMixture" in results
    assert len(metrics) >= 100  # each metric under each of its own tests' checks
    # SciPy's table: every listed function is either run or named as taking no
    # generic input (classes' methods, windows of an int length, ...).
    assert len(table) >= 380, report["no_generic_input"]
    failed = {k: v for k, v in results.items() if v != "ok"}
    for name in NEEDS_WRITABLE_BUFFERS:
        assert failed.pop(name, "") == "ValueError: buffer source array is read-only", name
    assert not failed, json.dumps(failed, indent=1)
