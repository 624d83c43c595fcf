"""Shared fixtures for eagerrt's tests.

* ``anyio_backend``: every ``@pytest.mark.anyio`` test runs on asyncio, uvloop and trio.
* ``restore_config`` (autouse): whatever a test does to ``ert.config``, the next
  test starts with the settings it had before.
* ``gate``: tensors that stay pending on a CPU worker thread until the test opens
  their gate (released at teardown whatever happens, so no worker is left blocked).
* ``manual_device``: a device whose executor only runs work when the test says so,
  on the test's own thread: pending tensors without any thread.
* ``eventually``: polls a predicate for bookkeeping that trails a completion.
* ``clean_errors``: waits for outstanding work and drops failures other tests left
  unread, so ``synchronize()`` sees only this test's failures.

examples/ goes on sys.path, so the model tests (tests/models/) import the example models
as ``from models import resnet``. (A conftest.py there would shadow this one: test
directories are not packages.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import pathlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert

# A script tests/test_clients.py runs in a child process (SciPy's array API support
# must be on before SciPy is imported): the doctest collector must not import it.
collect_ignore = ["clients/run_clients.py"]

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))

#: Far above any inline threshold: the op always goes to its device's executor.
HUGE_COST = 1e15


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(autouse=True)
def restore_config() -> Iterator[None]:
    names = [f.name for f in dataclasses.fields(ert.Config) if f.init]
    saved = {name: getattr(ert.config, name) for name in names}
    yield
    for name, value in saved.items():
        if getattr(ert.config, name) != value:
            setattr(ert.config, name, value)


@pytest.fixture
def clean_errors() -> Iterator[None]:
    with contextlib.suppress(ert.KernelError, ert.EagerErrorGroup):
        ert.synchronize(timeout=30)
    assert ert.stats().unobserved_errors == 0
    yield


def _eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture
def eventually() -> Callable[..., bool]:
    """``eventually(predicate, timeout=5)``: poll until true (bookkeeping that
    trails a completion by a few bytecodes on another thread)."""
    return _eventually


# -- gated tensors: pending on a CPU worker until the test opens the gate -----------
_gate_op = ert.define_op(
    "conftest_gate",
    rule=lambda x, **static: (x.shape, x.dtype),
    cost=lambda *args, **static: HUGE_COST,
    doc="Identity that blocks its worker until `event` is set (tests only).",
)


@_gate_op.kernel()
def _gate_kernel(x: Any, *, event: threading.Event, ran_on: list[str]) -> Any:
    ran_on.append(threading.current_thread().name)
    if not event.wait(30):
        raise TimeoutError("test gate was never opened")
    return x


class Gate:
    """Makes tensors that stay pending (on a CPU worker) until :meth:`open`."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.ran_on: list[str] = []

    def __call__(self, data: Any = None) -> ert.Tensor:
        x = ert.asarray(np.arange(3.0) if data is None else data)
        return _gate_op(x, event=self.event, ran_on=self.ran_on)

    def open(self) -> None:
        self.event.set()


@pytest.fixture
def gate() -> Iterator[Callable[[], Gate]]:
    gates: list[Gate] = []

    def make() -> Gate:
        g = Gate()
        gates.append(g)
        return g

    yield make
    for g in gates:
        g.open()


# -- a device whose executor runs work only when asked, on the asking thread --------
class ManualExecutor:
    def __init__(self) -> None:
        self.tasks: list[Callable[[], object]] = []
        self.lock = threading.Lock()

    def submit(self, task: Callable[[], object]) -> None:
        with self.lock:
            self.tasks.append(task)

    def queue_depth(self) -> int:
        return len(self.tasks)

    def run_one(self) -> bool:
        """Run the oldest queued task on this thread; False if there was none."""
        with self.lock:
            if not self.tasks:
                return False
            task = self.tasks.pop(0)
        task()
        return True

    def run_all(self) -> int:
        """Run queued tasks (and those they queue) on this thread; the number run."""
        count = 0
        while self.run_one():
            count += 1
        return count


class ManualDevice(ert.Device):
    """Host numpy arrays, generic kernels, and work that waits for ``run_all()``."""

    generic_kernels = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.manual = ManualExecutor()

    @property
    def executor(self) -> ManualExecutor:
        return self.manual

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_numpy(self, native: Any) -> np.ndarray:
        return np.asarray(native)

    def run_one(self) -> bool:
        return self.manual.run_one()

    def run_all(self) -> int:
        return self.manual.run_all()


_manual_names = itertools.count()


@pytest.fixture
def manual_device() -> Iterator[ManualDevice]:
    device = ManualDevice(f"manual{next(_manual_names)}")
    ert.register_device(device)
    yield device
    device.run_all()  # nothing is left pending forever
