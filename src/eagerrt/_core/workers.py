"""A small pool of daemon worker threads fed by one bounded FIFO queue.

Lighter than ``concurrent.futures``: no Future per task (completion is the
task's own AsyncValue), a C ``SimpleQueue``, threads started on first use.

Backpressure: once ``config.max_queued_tasks`` tasks wait in the queue, the
thread submitting another runs it itself (Java's caller-runs policy). That
thread is busy meanwhile and so issues no more work: a flood of submitters
advances at the workers' pace, and the queue (with the inputs and results its
tasks hold) never grows past the bound. Running instead of blocking means no
wait can deadlock: the submitter never depends on a worker to make progress.
Threads that other work waits on (a stream device's completer and watcher)
always queue: a task run there could wait for that thread's own next step.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .async_value import _trampoline
from .config import config
from .errors import DeviceError

__all__ = ["WorkerPool", "count_value", "reset_after_fork", "stop_counting_as_busy"]

_log = logging.getLogger("eagerrt")
_STOP = object()


class WorkerPool:
    """Run zero-argument callables on ``size`` daemon threads, FIFO.

    >>> import threading
    >>> pool = WorkerPool(2, "doc")
    >>> done = threading.Event()
    >>> pool.submit(done.set)
    >>> done.wait(5)
    True
    >>> pool.shutdown()
    """

    #: The most tasks seen waiting in the queue at once (see :meth:`reset_peak`).
    peak_queued: int

    def __init__(self, size: int, name: str) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one thread, got {size}")
        self.size = size
        self.name = name
        self._closed = False
        self._reset_after_fork()
        _pools.add(self)

    def _reset_after_fork(self) -> None:
        # Made afresh in a forked child too: it has none of the parent's threads.
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._submitted = itertools.count()
        self._finished = itertools.count()
        self._ran_by_caller = itertools.count()
        self.peak_queued = 0

    def submit(self, task: Callable[[], object]) -> None:
        """Queue ``task`` for a worker, or run it here if the queue is full.
        Raises :class:`~eagerrt.DeviceError` once the pool is shut down (the scheduler
        then fails the task's result, saying so)."""
        if self._closed:
            raise DeviceError(f"the {self.name!r} worker pool is shut down: it takes no new work")
        if not self._threads:
            self._start()
        queued = self._queue.qsize()
        if queued >= config.max_queued_tasks and not getattr(_thread, "never_runs_tasks", False):
            next(self._ran_by_caller)
            outer = getattr(_thread, "counted", None)
            _thread.counted = None  # never counted as submitted: nothing to uncount
            try:
                task()
            except Exception:  # as on a worker: a task's failure is its own business
                _log.exception("eagerrt: a task for %s raised", self.name)
            finally:
                _thread.counted = outer
            return
        if queued >= self.peak_queued:  # racy across threads; a statistic, not a bound
            self.peak_queued = queued + 1
        next(self._submitted)
        self._queue.put(task)

    def _start(self) -> None:
        with self._start_lock:
            if self._threads:
                return
            if self._closed:  # shut down between submit's check and here
                raise DeviceError(
                    f"the {self.name!r} worker pool is shut down: it takes no new work"
                )
            for i in range(self.size):
                thread = threading.Thread(
                    target=self._work, name=f"eagerrt-{self.name}-{i}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _work(self) -> None:
        # A blocking wait on this pool's worker runs queued work meanwhile.
        _trampoline.help = self._run_one
        while self._run_one(None):
            pass

    def _run_one(self, timeout: float | None) -> bool:
        """Run the next queued task (waiting up to ``timeout`` for one); False on stop."""
        try:
            task = self._queue.get(timeout=timeout)
        except queue.Empty:
            return True
        if task is _STOP:
            if timeout is not None:  # helping inside a task: the stop is for a worker loop
                self._queue.put(_STOP)
                time.sleep(timeout)
            return False
        outer = getattr(_thread, "counted", None)  # a task this one runs inside of
        _thread.counted = self
        try:
            task()  # type: ignore[operator]
        except BaseException:  # a task must never kill its worker
            _log.exception("eagerrt: a task on %s raised", self.name)
        finally:
            if _thread.counted is self:  # not already by stop_counting_as_busy
                next(self._finished)
            _thread.counted = outer
        return True

    def queue_depth(self) -> int:
        """Tasks submitted but not finished (queued or running)."""
        # Two reads, not one atomic snapshot: clamp the brief negative window.
        return max(0, count_value(self._submitted) - count_value(self._finished))

    def busy_besides_caller(self) -> int:
        """Tasks queued or running other than the calling worker's own: work that
        wants the other cores (a kernel splitting itself over threads) would
        only take them from these."""
        depth = self.queue_depth()
        if getattr(_thread, "counted", None) is self:  # the caller's own task
            depth -= 1
        return max(0, depth)

    def ran_by_caller(self) -> int:
        """Tasks that found the queue full and ran on the submitting thread."""
        return count_value(self._ran_by_caller)

    def reset_peak(self) -> None:
        """Start measuring :attr:`peak_queued` afresh from now."""
        self.peak_queued = self._queue.qsize()

    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` was called: the pool takes no new work."""
        return self._closed

    def shutdown(self, wait: bool = True) -> None:
        """Stop the threads after the tasks already queued (``wait``: and wait
        for them). The pool is closed for good: work submitted later is refused."""
        with self._start_lock:
            self._closed = True
            threads, self._threads = self._threads, []
            for _ in threads:
                self._queue.put(_STOP)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
_thread = threading.local()


def never_run_tasks_here() -> None:
    """Mark this thread as one others wait on (a device's event completer):
    a full queue still takes its tasks instead of running them here, where a
    task waiting for that thread's own work would never finish."""
    _thread.never_runs_tasks = True


def stop_counting_as_busy() -> None:
    """Called by a task, its kernel done, just before it completes its results:
    its pool no longer counts it among the busy (:meth:`WorkerPool.queue_depth`).

    Completing a result wakes whatever waits on it (the event loop, which may
    submit the next call at once), while this thread still has bookkeeping left
    and, on busy cores, may wait milliseconds for the GIL to do it. Counted until
    then, it made the next task see the cores taken (measured MiniLM at batch 1:
    the first three or four products of every call held to one thread).

    >>> import threading
    >>> pool = WorkerPool(1, "doc")
    >>> checked, finish = threading.Event(), threading.Event()
    >>> def task():
    ...     stop_counting_as_busy()
    ...     checked.set()
    ...     finish.wait(5)
    >>> pool.submit(task)
    >>> checked.wait(5), pool.queue_depth()
    (True, 0)
    >>> finish.set(); pool.shutdown()
    """
    pool = getattr(_thread, "counted", None)
    if pool is not None:
        _thread.counted = None
        next(pool._finished)


def reset_after_fork(members: weakref.WeakSet[Any]) -> None:
    """In a forked child, call ``_reset_after_fork()`` on each of ``members``
    (worker pools, stream devices: their threads stayed in the parent)."""

    def reset() -> None:
        for member in list(members):
            member._reset_after_fork()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=reset)


reset_after_fork(_pools)


def count_value(counter: itertools.count[int]) -> int:
    """The next value an ``itertools.count`` will return, without advancing it."""
    return int(repr(counter)[6:-1])
