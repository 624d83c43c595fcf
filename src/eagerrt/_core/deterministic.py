"""Deterministic mode: every op runs on one thread, in an order a seed picks.

After TFRT's single-threaded work queue for tests. Inside
``with eagerrt.deterministic(seed=s)`` no op runs at its call and none goes to
a worker thread: each becomes a task that joins a queue of *ready* work once
its inputs are available. Queued tasks run only when some thread waits for a
result (``t.numpy()``, ``await t``, ``synchronize()``, or the end of the
block), one at a time, each drawn at random among the ready ones by
``random.Random(seed)``.

So a program whose waits come in a fixed order (plain sync code, or tasks on
one asyncio loop) runs its ops in the same order for the same seed, and in
other orders for other seeds: a bug that depends on how independent ops
interleave is found by trying seeds and replayed by the seed that found it.
Dependencies still hold under every order: an op runs after its inputs, a
write after earlier readers of its tensor, later readers after the write.

>>> import eagerrt as ert
>>> x = ert.asarray([1.0, 2.0])
>>> with ert.deterministic(seed=7) as run:
...     a, b = x + 1, x * 3
...     print(a.is_ready(), b.is_ready())
...     print((a + b).numpy())
False False
[5. 9.]
>>> sorted(run.order[:2]), run.order[2]
(['add', 'multiply'], 'add')
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator

from . import async_value, scheduler
from .async_value import PENDING, AsyncValue, _drain, _trampoline
from .config import config
from .errors import ArgumentError, UsageError
from .forking import renew_after_fork
from .scheduler import Task, _outstanding

__all__ = ["DeterministicRun", "deterministic", "open_run"]

# Nothing queued, the value still pending: only another thread can complete it
# (a user thread, a device with its own streams). Poll for that this often.
_IDLE_POLL_S = 0.0005


class DeterministicRun:
    """The queue of one ``deterministic()`` block, and what it ran.

    ``order`` lists the tasks run so far by name (an op's name; a compiled
    function's name for its plan), in the order they ran.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.order: list[str] = []
        self._rng = random.Random(seed)
        self._ready: list[Task] = []
        self._closed = False
        # Posting never waits for a task to run; running is one task at a time.
        self._queue_lock = threading.Lock()
        self._run_lock = threading.RLock()  # a kernel that waits runs tasks itself

    def __repr__(self) -> str:
        return f"<DeterministicRun seed={self.seed} ran={len(self.order)} ready={len(self._ready)}>"

    def queued(self) -> int:
        """Tasks ready to run now."""
        return len(self._ready)

    def post(self, task: Task) -> None:
        """Queue ``task`` (its inputs are available); it runs when someone waits."""
        with self._queue_lock:
            if not self._closed:
                self._ready.append(task)
                return
        task()  # the block has ended: dispatch it the usual way

    def run_one(self) -> bool:
        """Run one ready task, drawn by the seeded generator; False if none was ready."""
        with self._run_lock:
            with self._queue_lock:
                ready = self._ready
                if not ready:
                    return False
                pick = self._rng.randrange(len(ready))
                ready[pick], ready[-1] = ready[-1], ready[pick]
                task = ready.pop()
            self.order.append(_task_name(task))
            task._run_and_forget()
        return True

    def run_all(self) -> int:
        """Run ready tasks (and those they make ready) until none is left."""
        count = 0
        while True:
            _drain(_trampoline)  # continuations deferred here may queue more tasks
            if not self.run_one():
                return count
            count += 1

    def wait(self, value: AsyncValue, timeout: float | None) -> bool:
        """Run tasks on this thread until ``value`` is available; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while value._state == PENDING:
            _drain(_trampoline, until=value)
            if value._state != PENDING or self.run_one():
                continue
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(_IDLE_POLL_S)
        return True

    def drive(
        self, call_soon: Callable[[Callable[[], object]], object], waiting: Callable[[], bool]
    ) -> None:
        """For a task suspended on an event loop: run one queued task per loop
        turn while ``waiting()``, so other tasks' steps interleave with the ops."""

        def step() -> None:
            if waiting() and self.run_one():
                call_soon(step)

        call_soon(step)

    def _close(self) -> None:
        with self._queue_lock:
            self._closed = True
            left, self._ready = self._ready, []
        for task in left:  # posted while the block ended: dispatch as usual
            task()


def _task_name(task: Task) -> str:
    name = getattr(task, "name", None) or getattr(task.result, "_op", None)
    return name if isinstance(name, str) else type(task).__name__.lstrip("_")


# Held while an opening block waits for the work in flight (any length of time).
_enter_lock = threading.Lock()
#: The open block's run (blocks don't nest); guarded by ``_enter_lock``.
_open_run: DeterministicRun | None = None
renew_after_fork(__name__, "_enter_lock")


def open_run() -> DeterministicRun | None:
    """The open ``deterministic()`` block's run, or None outside one."""
    return _open_run


@contextlib.contextmanager
def deterministic(seed: int = 0) -> Iterator[DeterministicRun]:
    """Run every op on one thread, in an order ``random.Random(seed)`` picks
    among the ready ones, inside the block (process-wide). For tests.

    Work already in flight finishes first; the block's own work all runs
    before the block ends, whatever ended it. Sync mode is suspended inside.
    Blocks don't nest.

    >>> import eagerrt as ert
    >>> with ert.deterministic(seed=3) as run:
    ...     y = ert.exp(ert.zeros((3,)))
    >>> y.numpy(), run.order
    (array([1., 1., 1.]), ['fill', 'exp'])
    """
    global _open_run
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ArgumentError(f"deterministic(seed=...) takes an int, got {seed!r}")
    with _enter_lock:
        if _open_run is not None:
            raise UsageError(
                "deterministic() blocks don't nest: one is already open "
                f"(seed={_open_run.seed}); close it before opening another"
            )
        for value in list(_outstanding.values()):  # a fixed start: nothing in flight
            value.wait()
        run = _open_run = DeterministicRun(seed)
        config._set_queue_every_op(True)
        scheduler.task_queue = run
        async_value._deterministic_wait = run.wait
    try:
        yield run
    finally:
        try:
            run.run_all()
        finally:
            with _enter_lock:
                async_value._deterministic_wait = None
                scheduler.task_queue = None
                config._set_queue_every_op(False)
                _open_run = None
                run._close()
