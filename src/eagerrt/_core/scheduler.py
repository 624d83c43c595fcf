"""The host scheduler: where each piece of work runs, and when.

Work whose inputs are ready and whose estimated cost is under
``config.inline_threshold_ns`` runs inline on the calling thread (the fast sync
path; callers take it directly without coming here). Everything else comes
through :func:`schedule`: it is parked on its pending inputs and, on the thread
that completes the last one, runs inline if cheap or is posted to an executor
(the device's worker threads) if not. Nothing here needs an event loop, so
blocking reads from plain sync code never deadlock.

The scheduler knows nothing of ops or devices: a task is a callable that
completes its own result, plus a cost and an executor.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .async_value import ERROR, AsyncValue, _trampoline, run_when_ready
from .config import config
from .errors import (
    EagerError,
    Failure,
    KernelError,
    UsageError,
    WaitTimeoutError,
    take_unobserved,
    unobserved_count,
)
from .workers import count_value

__all__ = [
    "Executor",
    "Stats",
    "Task",
    "count_inline",
    "count_parked",
    "forget_outstanding",
    "note_outstanding",
    "register_executor",
    "schedule",
    "stats",
    "synchronize",
]


class Executor(Protocol):
    """Somewhere to run a task off the calling thread (a device's workers)."""

    def submit(self, task: Callable[[], object]) -> None: ...

    def queue_depth(self) -> int: ...


_inline_counter = itertools.count()
_offloaded_counter = itertools.count()
_parked_counter = itertools.count()
#: Called once per op run inline; a C-level increment, cheap on the hot path.
count_inline = _inline_counter.__next__
#: Called once per op parked on a pending input.
count_parked = _parked_counter.__next__

# Results not yet available, by id: what synchronize() waits for. Single dict
# operations (set, pop, copy) are atomic, so it needs no lock of its own.
_outstanding: dict[int, AsyncValue] = {}
_executors: list[Executor] = []


class TaskQueue(Protocol):
    """Where every task goes instead of an executor while one is set."""

    def post(self, task: Task) -> None: ...


#: Inside ``eagerrt.deterministic()``: the block's run, which queues every task
#: (set and cleared by ``_core/deterministic.py``).
task_queue: TaskQueue | None = None


def note_outstanding(result: AsyncValue) -> None:
    """Count ``result`` as work in flight (what :func:`synchronize` waits for)
    until :func:`forget_outstanding`; a task's run forgets its own."""
    _outstanding[id(result)] = result


def forget_outstanding(result: AsyncValue) -> None:
    _outstanding.pop(id(result), None)


def register_executor(executor: Executor) -> None:
    """Let :func:`stats` report this executor's queue depth (every executor an
    op is offloaded to is registered at its first task; a device may register
    its own earlier)."""
    if executor not in _executors:
        _executors.append(executor)


class Task:
    """One piece of work that completes ``result``; subclasses define :meth:`run`.

    A single slotted object per op (rather than closures and their cells) keeps
    the slow path cheap and gives the garbage collector less to walk.
    """

    __slots__ = ("cost_ns", "executor", "result")

    def __init__(self, result: AsyncValue, cost_ns: float, executor: Executor) -> None:
        self.result = result
        self.cost_ns = cost_ns
        self.executor = executor

    def run(self) -> None:
        """Compute and complete ``self.result`` (never raise: complete it as an error)."""
        raise NotImplementedError

    def __call__(self) -> None:
        """Dispatch, once every input is available: inline if cheap, else offload."""
        if self.cost_ns <= config.inline_limit_ns:
            next(_inline_counter)
            self._run_and_forget()
        else:
            queue = task_queue  # deterministic mode: nothing is inline
            if queue is not None:
                queue.post(self)
                return
            next(_offloaded_counter)
            executor = self.executor
            if executor not in _executors:  # a device's own: ert.stats() counts its queue
                register_executor(executor)
            try:
                executor.submit(self._run_and_forget)
            except Exception as exc:  # shut down, or a device's executor refusing work
                try:
                    self.refused(exc)
                finally:
                    _outstanding.pop(id(self.result), None)

    def refused(self, exc: Exception) -> None:
        """The executor would not take this task: its result fails, saying why
        (rather than waiting forever). Tasks with more to release extend it."""
        name = getattr(self, "name", type(self).__name__)
        failure = Failure(name, getattr(self, "site", None), exc)
        self.result._complete(ERROR, failure)

    def _run_and_forget(self) -> None:
        try:
            self.run()
        finally:
            _outstanding.pop(id(self.result), None)


def _fail_outstanding_after_fork() -> None:
    # The work in flight at fork time ran on threads the child does not have:
    # fail it, so that waiting on it (or synchronize()) in the child says why
    # rather than hanging.
    lost = RuntimeError("the process forked while this op was running; it ran on in the parent")
    for value in list(_outstanding.values()):
        if not value.is_available():
            value._complete(ERROR, Failure("<lost in fork>", None, lost))
    _outstanding.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fail_outstanding_after_fork)


def schedule(task: Task, pending_inputs: Sequence[AsyncValue]) -> None:
    """Dispatch ``task`` once ``pending_inputs`` are available (now if none are)."""
    result = task.result
    _outstanding[id(result)] = result
    if pending_inputs:
        count_parked()
    run_when_ready(pending_inputs, task)


@dataclass(frozen=True)
class Stats:
    """A snapshot of the scheduler's counters (see :func:`eagerrt.stats`)."""

    #: Ops run inline on the thread that called them or completed their inputs.
    ops_inline: int
    #: Ops posted to a device's worker threads.
    ops_offloaded: int
    #: Ops that had to wait for pending inputs.
    ops_parked: int
    #: Tasks queued or running on executors now.
    queue_depth: int
    #: Results not yet available now.
    pending_values: int
    #: Kernel failures that nobody has read yet (synchronize() raises them).
    unobserved_errors: int


def stats() -> Stats:
    """Counters since start-up: where ops ran, what is in flight, unread errors.

    >>> import eagerrt as ert
    >>> before = ert.stats().ops_inline
    >>> _ = ert.ones((2, 2)) + 1
    >>> ert.stats().ops_inline > before
    True
    """
    return Stats(
        ops_inline=count_value(_inline_counter),
        ops_offloaded=count_value(_offloaded_counter),
        ops_parked=count_value(_parked_counter),
        queue_depth=sum(e.queue_depth() for e in _executors),
        pending_values=sum(1 for v in _outstanding.copy().values() if not v.is_available()),
        unobserved_errors=unobserved_count(),
    )


#: Devices' own waits for their outstanding work (a stream device's streams),
#: called by :func:`synchronize` with the seconds left: devices live above this
#: layer, so they register here (``on_synchronize``).
_device_waits: list[Callable[[float | None], None]] = []


def on_synchronize(wait: Callable[[float | None], None]) -> None:
    """Have :func:`synchronize` also call ``wait(seconds_left)`` (None: no limit),
    which blocks until a device's enqueued work is done or raises
    :class:`WaitTimeoutError`."""
    _device_waits.append(wait)


def synchronize(timeout: float | None = None) -> None:
    """Wait for all outstanding work, the devices' streams included; raise the
    errors nobody has read, once each.

    One unread failure is raised as its :class:`KernelError`; several as an
    ``ExceptionGroup`` of them. Raises :class:`WaitTimeoutError` if the work is
    not done within ``timeout`` seconds.

    >>> import eagerrt as ert
    >>> _ = ert.exp(ert.ones((1000, 1000)))
    >>> ert.synchronize()
    """
    if _trampoline.help is not None:
        raise UsageError(
            "synchronize() was called inside a kernel, on a worker thread: it would wait "
            "for that kernel's own result. Read the tensors the kernel needs instead."
        )

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        waiting = [v for v in _outstanding.copy().values() if not v.is_available()]
        if not waiting:
            break
        for value in waiting:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not value.wait(left):
                raise WaitTimeoutError(
                    f"synchronize() timed out after {timeout} s with "
                    f"{len(_outstanding)} op(s) still running"
                )
    for device_wait in list(_device_waits):
        device_wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    failures = take_unobserved()
    if not failures:
        return
    errors: list[KernelError] = [f.to_exception() for f in failures]
    if len(errors) == 1:
        raise errors[0]
    raise EagerErrorGroup(f"{len(errors)} eagerrt ops failed and nobody read them", errors)


class EagerErrorGroup(EagerError, ExceptionGroup):
    """Several unread kernel failures, raised together by ``synchronize()``."""
