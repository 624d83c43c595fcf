"""Versioned values: an AsyncValue that writes give new values over time.

A tensor written in place (``t[i] = v``, ``t += 1``) is one value with a sequence
of versions, ordered like MXNet's read/write dependencies: a write waits for the
readers of the version it replaces, and a reader queued after the write reads
the write's version. This module keeps that bookkeeping, knowing nothing of
tensors or ops (``eagerrt.ops.writes`` is the writer, ``eagerrt.tensor`` the
value's user-facing face):

- ``_readers``: the queued (slow-path) tasks still to read the current version;
- ``_holds``: for each write not yet done, a stand-in value that completes when
  the version before it does, so that version's readers wake then while readers
  after the write wait on;
- ``_host``: a host copy of the current version, forgotten by each new one.

All three start unset (values born ready, the fast path, never touch them): each
is probed with getattr/try before its first assignment.

>>> v = VersionedValue()
>>> started, wait_for = v._begin_version()  # a write to a value still pending
>>> started, wait_for.is_available()
(True, False)
>>> v.set_value(1)  # the first version: its readers (and the hold) wake
>>> wait_for.value, v.is_available()
(1, False)
>>> v.set_value(2)  # the write's version
>>> v.value
2
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable
from typing import Any

from .async_value import (
    PENDING,
    READY,
    AsyncValue,
    _run_waiters,
    _transition_lock,
    run_continuation,
)
from .scheduler import Task, count_parked, note_outstanding

__all__ = ["VersionedValue", "schedule_read"]


class VersionedValue(AsyncValue):
    """An AsyncValue that is pending again while a write makes its next version."""

    __slots__ = ("_holds", "_host", "_readers")

    _host: Any
    _holds: collections.deque[AsyncValue]
    _readers: set[Any]

    def _complete(self, state: int, value: Any) -> None:
        """Complete the current version: the last one makes the value available;
        an earlier one (a write is queued behind it) only wakes its own readers."""
        # Decide and settle under one hold of the lock: a write queued between
        # the two (on another thread) would otherwise leave its hold behind,
        # never completed, and the value ready without that write.
        with _transition_lock:
            holds: collections.deque[AsyncValue] | None = getattr(self, "_holds", None)
            if holds and state == READY and self._state == PENDING:
                hold = holds.popleft()
                self._value = value  # the value stays pending: a write follows
            else:
                hold = None
                waiters = self._settle_locked(state, value)
                # A failure fails every later version too: writes can't mend it.
                failed = list(holds) if holds else ()
                if holds:
                    holds.clear()
            # After the new version is in: a reader caching the old one on
            # another thread checks the version after caching.
            self._forget_host()
        if hold is not None:
            hold._complete(READY, value)
            return
        if waiters is not None:
            _run_waiters(waiters)
        for later in failed:
            later._complete(state, value)

    def _begin_version(self) -> tuple[bool, AsyncValue | None]:
        """Make the value pending for a write's new version: ``(started,
        wait_for)``. Not started where the value has failed (a failed value
        stays failed; made pending again, the write would run on the failure).
        ``wait_for`` is a hold on the version still to come, which the write
        must read, or None where the current version is ready."""
        with _transition_lock:
            if self._state == PENDING:
                # The version before this write is still to come: its readers
                # (the waiters so far) move to a hold that completes with it.
                hold = AsyncValue()
                hold._waiters = self._waiters
                self._waiters = None
                holds = getattr(self, "_holds", None)
                if holds is None:
                    holds = self._holds = collections.deque()
                holds.append(hold)
                return True, hold
            if self._state != READY:
                return False, None
            self._state = PENDING  # until the write is done
            self._waiters = None
            return True, None

    def _forget_host(self) -> None:
        with contextlib.suppress(AttributeError):
            del self._host

    def _track_reader(self, reader: Any) -> None:
        """Note a queued task that will read this value's current version."""
        try:
            self._readers.add(reader)
        except AttributeError:
            with _transition_lock:  # two threads' first readers: one set, both in it
                try:
                    self._readers.add(reader)
                except AttributeError:
                    self._readers = {reader}

    def _untrack_reader(self, reader: Any) -> None:
        with contextlib.suppress(AttributeError):
            self._readers.discard(reader)


def schedule_read(task: Task, args: Iterable[Any]) -> None:
    """Schedule ``task``, which reads the versioned values among ``args``: note
    it as a reader of each (a later write waits for it) and park it on those
    pending.

    Both in one hold of the transition lock, the lock a write holds when it
    moves a pending value's parked readers to a hold on the version it
    replaces. Done apart, a write issued on another thread in between would
    count the task as a reader of the version it replaces (and wait for it)
    while the task parked after it, on the write's own version (waiting for
    the write): neither would ever run. Callers with no pending input note
    their reads with ``_track_reader`` instead, with no lock: they park on
    nothing, so a write that comes between can't close a cycle.
    """
    note_outstanding(task.result)  # before it can run: the run removes it
    callback: Any = task
    with _transition_lock:
        pending = []
        for a in args:
            if isinstance(a, VersionedValue):
                try:
                    a._readers.add(task)
                except AttributeError:
                    a._readers = {task}
                if a._state == PENDING:
                    pending.append(a)
        if len(pending) > 1:  # the last input to complete runs it
            remaining = len(pending)

            def one_ready() -> None:
                nonlocal remaining
                with _transition_lock:
                    remaining -= 1
                    last = remaining == 0
                if last:
                    task()

            callback = one_ready
        for a in pending:
            waiters = a._waiters
            if waiters is None:
                a._waiters = [callback]
            else:
                waiters.append(callback)
    if pending:
        count_parked()
    else:  # every input completed meanwhile
        run_continuation(task)
