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


def test_scikit_learn_estimators_and_scipy_functions_equal_numpy_on_tensors() -> None:
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    estimators = [k for k in results if k.startswith("sklearn.")]
    # Every estimator scikit-learn tags as array-API ready, and GaussianMixture.
    assert len(estimators) >= 12 and "sklearn.GaussianMixture" in results
    assert len(results) - len(estimators) >= 20  # SciPy's functions
    failed = {k: v for k, v in results.items() if v != "ok"}
    assert not failed, json.dumps(failed, indent=1)
