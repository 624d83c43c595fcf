"""The model tests import the example models as ``models.<name>``: examples/ goes on
sys.path (the directory has no ``__init__.py``, so it is not a package of its own
that could shadow examples/models)."""

from __future__ import annotations

import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture
def anyio_backend() -> str:
    """Whole models are slow to run three times over: the loops are tested elsewhere."""
    return "asyncio"
