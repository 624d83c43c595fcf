"""AsyncValue: a thread-safe, write-once future that runs continuations.

The runtime's one synchronisation primitive, after TFRT's ``AsyncValue``. A value
starts *pending* and ends *ready* (holding a result) or *error* (holding an
exception); the final state never changes.

``and_then(callback)`` runs ``callback()`` exactly once: at once if the value is
already available, otherwise on whichever thread completes it. The state and the
waiter list change together under one lock, so a waiter added while another
thread completes the value is never lost.

Continuations run inline on the completing thread, which is what makes a chain of
cheap dependent ops fast. To keep a chain of 100,000 dependent values from
overflowing the stack, each thread counts its nested continuations and, past
``MAX_INLINE_DEPTH``, queues them on a per-thread trampoline that the outermost
continuation drains.

>>> v = AsyncValue()
>>> seen = []
>>> v.and_then(lambda: seen.append(v.value))
>>> v.set_value(42)
>>> seen
[42]
"""

from __future__ import annotations

import collections
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from .forking import renew_after_fork

__all__ = [
    "ERROR",
    "MAX_INLINE_DEPTH",
    "PENDING",
    "READY",
    "AsyncValue",
    "AsyncValueStateError",
    "IndirectAsyncValue",
    "live_async_values",
    "on_worker_thread",
    "run_continuation",
    "run_when_ready",
]

PENDING: Final = 0
READY: Final = 1
ERROR: Final = 2
_STATE_NAMES: Final = {PENDING: "pending", READY: "ready", ERROR: "error"}

#: Nested continuations a thread runs before it starts queueing them (TFRT re-posts
#: past about 100; a Python continuation costs several frames, so fewer here).
MAX_INLINE_DEPTH: Final = 48

# One lock guards every value's state+waiters transition. The critical sections
# are a few bytecodes long, values that are born ready never touch it, and one
# lock avoids allocating a lock per value on the hot path.
_transition_lock = threading.Lock()
renew_after_fork(__name__, "_transition_lock")
_log = logging.getLogger("eagerrt")

#: Inside ``eagerrt.deterministic()``: a blocking wait runs the block's queued
#: work on the waiting thread (set and cleared by ``_core/deterministic.py``).
_deterministic_wait: Callable[[AsyncValue, float | None], bool] | None = None


class AsyncValueStateError(RuntimeError):
    """An AsyncValue was completed twice, or read before it was available."""


class _Trampoline(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.deferred: collections.deque[Callable[[], object]] = collections.deque()
        #: On a worker thread: runs one queued task of its pool (or waits up to
        #: the given seconds for one); a blocking wait there helps instead of idling.
        self.help: Callable[[float], object] | None = None


_trampoline = _Trampoline()


def on_worker_thread() -> bool:
    """True on a worker thread of one of eagerrt's pools: there a blocking wait
    runs the pool's queued work, and waiting for work the thread itself is
    running would never end."""
    return _trampoline.help is not None


def run_continuation(callback: Callable[[], object]) -> None:
    """Run ``callback`` now, or queue it if this thread is nested too deeply."""
    tramp = _trampoline
    depth = tramp.depth
    if depth >= MAX_INLINE_DEPTH:
        tramp.deferred.append(callback)
        return
    tramp.depth = depth + 1
    try:
        callback()
    except Exception:  # a continuation must never break the completing thread
        _log.exception("eagerrt: a continuation raised; it was dropped")
    finally:
        tramp.depth = depth
        if depth == 0 and tramp.deferred:  # even after Ctrl-C: nothing stays queued
            _drain(tramp)


def _run_waiters(waiters: list[Callable[[], object]]) -> None:
    """Run a completed value's waiters. They queue up at the front of this
    thread's trampoline, in order: run now at the outermost level, else when
    that level resumes or when a blocking wait() in one of them needs a later one."""
    tramp = _trampoline
    tramp.deferred.extendleft(reversed(waiters))
    if tramp.depth == 0:
        _drain(tramp)


def _drain(tramp: _Trampoline, until: AsyncValue | None = None) -> None:
    """Run this thread's queued continuations, one level below the current one:
    all of them (the outermost level), or until ``until`` is available (a
    blocking wait inside a continuation)."""
    deferred = tramp.deferred
    depth = tramp.depth
    interrupt = None
    while deferred and (until is None or until._state == PENDING):
        tramp.depth = depth + 1
        try:
            deferred.popleft()()
        except Exception:
            _log.exception("eagerrt: a continuation raised; it was dropped")
        except BaseException as exc:  # Ctrl-C: finish the queue, then deliver it
            interrupt = interrupt or exc
        finally:
            tramp.depth = depth
    if interrupt is not None:
        raise interrupt


class AsyncValue:
    """A write-once value that is pending, then ready or an error.

    Producers call :meth:`set_value` or :meth:`set_error` exactly once; consumers
    call :meth:`and_then`, :meth:`wait`, or read :attr:`value` once available.

    >>> v = AsyncValue.ready(3)
    >>> v.is_available(), v.value
    (True, 3)
    >>> e = AsyncValue.failed(ValueError("boom"))
    >>> e.is_error(), type(e.error).__name__
    (True, 'ValueError')
    """

    __slots__ = ("__weakref__", "_state", "_value", "_waiters")

    _state: int
    _value: Any
    _waiters: list[Callable[[], object]] | None

    def __init__(self) -> None:
        self._state = PENDING
        self._value = None
        self._waiters = None

    @classmethod
    def ready(cls, value: Any) -> AsyncValue:
        """A value that is ready from birth."""
        return cls._born(READY, value)

    @classmethod
    def failed(cls, error: BaseException) -> AsyncValue:
        """A value that is an error from birth."""
        return cls._born(ERROR, error)

    @classmethod
    def _born(cls, state: int, value: Any) -> AsyncValue:
        av = cls()
        av._state = state
        av._value = value
        return av

    # -- state ---------------------------------------------------------------
    @property
    def state(self) -> str:
        """``"pending"``, ``"ready"`` or ``"error"``."""
        return _STATE_NAMES[self._state]

    def is_available(self) -> bool:
        """True once the value is ready or an error (it will never change again)."""
        return self._state != PENDING

    def is_error(self) -> bool:
        return self._state == ERROR

    @property
    def value(self) -> Any:
        """The result; raises :class:`AsyncValueStateError` unless ready."""
        if self._state != READY:
            raise AsyncValueStateError(f"AsyncValue is {self.state}, not ready")
        return self._value

    @property
    def error(self) -> BaseException:
        """The exception; raises :class:`AsyncValueStateError` unless an error."""
        if self._state != ERROR:
            raise AsyncValueStateError(f"AsyncValue is {self.state}, not an error")
        return self._value

    # -- producer side -------------------------------------------------------
    def set_value(self, value: Any) -> None:
        """Make the value ready and run every waiting continuation."""
        self._complete(READY, value)

    def set_error(self, error: BaseException) -> None:
        """Make the value an error and run every waiting continuation."""
        self._complete(ERROR, error)

    def _complete(self, state: int, value: Any) -> None:
        with _transition_lock:
            waiters = self._settle_locked(state, value)
        if waiters is not None:
            _run_waiters(waiters)

    def _settle_locked(self, state: int, value: Any) -> list[Callable[[], object]] | None:
        """Make the value final and take its waiters; the caller holds the
        transition lock (so a subclass can decide and settle in one step)."""
        if self._state != PENDING:
            raise AsyncValueStateError(f"AsyncValue completed twice: it is already {self.state}")
        self._value = value
        self._state = state
        waiters = self._waiters
        self._waiters = None
        return waiters

    # -- consumer side -------------------------------------------------------
    def and_then(self, callback: Callable[[], object]) -> None:
        """Run ``callback()`` exactly once, when the value is available.

        Inline if it already is; otherwise on the thread that completes it.
        """
        if self._state == PENDING:
            with _transition_lock:
                if self._state == PENDING:
                    waiters = self._waiters
                    if waiters is None:
                        self._waiters = [callback]
                    else:
                        waiters.append(callback)
                    return
        run_continuation(callback)

    def _discard_waiter(self, callback: Callable[[], object]) -> None:
        """Forget a continuation that is no longer wanted (its awaiter was cancelled)."""
        with _transition_lock:
            waiters = self._waiters
            if waiters is not None and callback in waiters:
                waiters.remove(callback)

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until the value is available; False on timeout.

        Never needs an event loop: work completes on worker threads.
        """
        if self._state != PENDING:
            return True
        # Inside a continuation, the work this value waits for may sit in this
        # thread's own trampoline queue, which would only drain after we return.
        _drain(_trampoline, until=self)
        if self._state != PENDING:
            return True
        if _deterministic_wait is not None:
            return _deterministic_wait(self, timeout)
        help_pool = _trampoline.help
        if help_pool is not None:
            return self._wait_helping(help_pool, timeout)
        event = threading.Event()
        wake = event.set
        self.and_then(wake)
        if event.wait(timeout):
            return True
        self._discard_waiter(wake)  # polling with timeouts must not pile up waiters
        return self._state != PENDING

    def _wait_helping(self, help_pool: Callable[[float], object], timeout: float | None) -> bool:
        # On a worker: the value may need a task queued behind this one, and if
        # every worker waited, none would run it. Run queued tasks meanwhile.
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._state == PENDING:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            help_pool(0.001)
        return True

    def __repr__(self) -> str:
        if self._state == PENDING:
            return f"<{type(self).__name__} pending>"
        return f"<{type(self).__name__} {self.state}: {self._value!r}>"


class IndirectAsyncValue(AsyncValue):
    """A value whose result is forwarded from another value, decided later.

    Useful when a producer must hand out a value before it knows which
    computation will produce it.

    >>> indirect = IndirectAsyncValue()
    >>> source = AsyncValue()
    >>> indirect.forward_to(source)
    >>> source.set_value("hi")
    >>> indirect.value
    'hi'
    """

    __slots__ = ("_source",)

    def forward_to(self, source: AsyncValue) -> None:
        """Take ``source``'s result (value or error) once it is available; once."""
        if source is self:
            raise AsyncValueStateError("an AsyncValue cannot forward to itself")
        with _transition_lock:
            if getattr(self, "_source", None) is not None or self._state != PENDING:
                raise AsyncValueStateError("this IndirectAsyncValue is already forwarded")
            self._source = source
        source.and_then(lambda: self._complete(source._state, source._value))

    def set_value(self, value: Any) -> None:
        self._refuse_if_forwarded()
        super().set_value(value)

    def set_error(self, error: BaseException) -> None:
        self._refuse_if_forwarded()
        super().set_error(error)

    def _refuse_if_forwarded(self) -> None:
        if getattr(self, "_source", None) is not None:
            raise AsyncValueStateError("this IndirectAsyncValue takes its forwarded result")


def run_when_ready(values: Iterable[AsyncValue], callback: Callable[[], object]) -> None:
    """Run ``callback()`` once every value in ``values`` is available.

    >>> a, b = AsyncValue(), AsyncValue()
    >>> done = []
    >>> run_when_ready([a, b], lambda: done.append(a.value + b.value))
    >>> a.set_value(1); done
    []
    >>> b.set_value(2); done
    [3]
    """
    pending = [v for v in values if v._state == PENDING]
    if not pending:
        run_continuation(callback)
        return
    if len(pending) == 1:
        pending[0].and_then(callback)
        return
    remaining = [len(pending)]

    def one_ready() -> None:
        with _transition_lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            callback()

    for v in pending:
        v.and_then(one_ready)


def live_async_values() -> dict[str, int]:
    """How many AsyncValues are alive now, by class name (``Tensor`` and the rest).

    For leak checks in tests: values are found through the garbage collector,
    so counting costs nothing until it is called (then about a ``gc.collect()``).
    Call ``gc.collect()`` first to leave out garbage not yet collected.

    >>> import gc
    >>> before = live_async_values().get("AsyncValue", 0)
    >>> kept = [AsyncValue() for _ in range(3)]
    >>> live_async_values()["AsyncValue"] - before
    3
    >>> del kept; _ = gc.collect()
    >>> live_async_values().get("AsyncValue", 0) - before
    0
    """
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        # type(), not isinstance(): that would ask proxies for their __class__.
        kind = type(obj)
        if issubclass(kind, AsyncValue):
            counts[kind.__name__] = counts.get(kind.__name__, 0) + 1
    return counts
