"""Settings and fixtures shared by the reliability tests (issue 7).

* ``LONG``: set ``EAGERRT_RELIABILITY_LONG=1`` to run the long variants (more
  cases, bigger storms); CI runs the quick ones. Pick sizes with
  ``scale(quick, long)``.
* every test here starts with no work in flight and no unread failures left by
  earlier tests (``clean_errors``, autouse), so ``synchronize()`` sees its own.
* ``no_leaks`` (fixture): the test body leaves no AsyncValues, threads or memory
  behind (see ``tests/reliability/leaks.py``, usable per case as well).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from .leaks import Baseline, baseline, check

#: Run the long variants (``EAGERRT_RELIABILITY_LONG=1``).
LONG = os.environ.get("EAGERRT_RELIABILITY_LONG", "").strip().lower() in {"1", "true", "yes", "on"}


def scale(quick: int, long: int) -> int:
    """``long`` when the long variants were asked for, else ``quick``."""
    return long if LONG else quick


@pytest.fixture(scope="module", autouse=True)
def _collectable_again() -> Iterator[None]:
    """Leak checks freeze what is alive (``leaks.baseline``): give it back to
    the collector after each module."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _start_clean(clean_errors: None) -> None:
    """Earlier tests' unread failures are theirs, not this test's."""


@pytest.fixture
def no_leaks() -> Iterator[Baseline]:
    """Fail the test if it leaves AsyncValues, threads or memory behind."""
    before = baseline()
    yield before
    check(before)
