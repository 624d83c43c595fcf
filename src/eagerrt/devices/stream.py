"""Stream devices: the device-neutral half of an accelerator, after TFRT's GPU runtime.

A stream device runs work on *streams*: FIFO queues that run in order, side by
side with each other and with the host. This module holds every rule about
ordering, events, host completion, copies and memory lifetimes; a concrete
device (:mod:`eagerrt.devices.cuda` over CuPy, or the thread-backed test device
in :mod:`eagerrt.devices.stream_threads`) implements a handful of primitives.

The rules (TFRT's):

* An op's result is ready for other device ops as soon as its work is
  *enqueued*: its tensor is ready at once, holding a :class:`DeviceValue` (the
  native array plus where on which stream it is made).
* A consumer on another stream makes its stream wait for an event recorded
  after the producer (a device-side wait): the host never blocks between
  device ops.
* The host learns of completion only when it needs the data (``await t``,
  ``t.numpy()``, ``t.to("cpu")``), through an event: either a host callback
  enqueued behind the event (CUDA's ``launch_host_func``) or an event-watcher
  thread; ``completion=`` picks one.
* Host-to-device and device-to-host copies run on their own copy streams, so
  transfers overlap compute.
* A value read on a stream other than its own is kept alive, when the host
  drops it, until events say those streams are done with it (so a memory pool
  with per-stream free lists never hands its memory to new work too early).
* A failure known at enqueue (out of memory, a kernel refusing its operands)
  makes the result an error value naming the op; the device keeps working.
  A failure found while the stream runs reaches dependents through the same
  events and is raised when the host reads.

>>> import eagerrt as ert
>>> dev = ert.get_device("teststream:0")
>>> x = ert.asarray([1.0, 2.0, 3.0], device=dev)
>>> y = (x * 2).sum()
>>> y.is_ready()            # enqueued: ready for other device ops
True
>>> float(y)                # the host waits for the event here
12.0
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import (
    READY,
    AsyncValue,
    DeviceError,
    EagerError,
    Executor,
    WaitTimeoutError,
    count_value,
    never_run_tasks_here,
    on_synchronize,
    reset_after_fork,
)
from .base import Device

__all__ = ["COMPLETIONS", "DeviceMemoryError", "DeviceValue", "Event", "Stream", "StreamDevice"]

#: The ways the host can learn that an event completed.
COMPLETIONS = ("callback", "watcher")

# How many retained values each enqueue checks for release (more on memory pressure).
_RELEASE_CHECKS = 8


class DeviceMemoryError(EagerError, MemoryError):
    """A device ran out of memory for a result (the op's result holds it, as a
    :class:`~eagerrt.KernelError` naming the op, once the device has given
    back what it could and retried)."""


@dataclass(slots=True, eq=False, repr=False)
class Stream:
    """One stream of a device: work enqueued on it runs in order.

    ``with stream:`` makes it the stream new ops on its device go to (in this
    thread or task); otherwise an op goes to its first operand's stream, or to
    the device's first compute stream.
    """

    device: StreamDevice
    name: str
    native: Any
    #: A compute stream (ops follow their operands' compute stream).
    compute: bool = field(init=False)
    #: Work items enqueued so far (a result's position on its stream).
    enqueued: int = field(init=False, default=0)
    #: The latest event recorded here, reused by results enqueued before it.
    last_event: Event | None = field(init=False, default=None)
    #: Per other stream, the position up to which this stream already waits.
    seen: dict[Stream, int] = field(init=False, default_factory=dict)
    lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    #: A parent's stream, in a forked child: its thread and work stayed there.
    lost: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.compute = self.name.startswith("compute")

    # The stream it replaces is saved per thread or task (a context variable),
    # not on the stream: threads and tasks enter the same stream at once.
    def __enter__(self) -> Stream:
        device = self.device
        device._saved.set((*device._saved.get(), device._current.get()))
        device._current.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        device = self.device
        saved = device._saved.get()
        device._current.set(saved[-1])
        device._saved.set(saved[:-1])

    def __repr__(self) -> str:
        return f"<stream {self.name} of {self.device.name}>"


@dataclass(slots=True, eq=False, repr=False)
class Event:
    """A point on a stream: done once all work enqueued there before it is done."""

    stream: Stream
    native: Any
    position: int
    #: Completed on the host once the event is (made on first need).
    done: AsyncValue | None = field(init=False, default=None)


class DeviceValue:
    """A stream device's result: its native array, and where it is made.

    A tensor on a stream device holds one as its value from the moment its
    work is enqueued. ``users`` lists the other streams that read it: if the
    host drops it, its memory is kept until those streams are past their reads.
    """

    __slots__ = ("device", "event", "handle", "native", "position", "stream", "users")

    def __init__(
        self, device: StreamDevice, stream: Stream, position: int, native: Any, handle: Any
    ) -> None:
        self.device = device
        self.stream = stream
        self.position = position
        self.native = native
        #: The device's own per-value state (the test device's stream-side cell).
        self.handle = handle
        self.event: Event | None = None
        self.users: set[Stream] | None = None

    def __del__(self) -> None:
        if self.users:  # read on other streams: keep the memory until they are done
            self.device._retired.append((self.native, self.handle, self.users))

    def __repr__(self) -> str:
        return f"<DeviceValue on {self.stream.name}#{self.position}>"


class _InlineExecutor:
    """Enqueueing is cheap: a task parked on pending inputs enqueues on the
    thread that completes them."""

    def submit(self, task: Callable[[], object]) -> None:
        task()

    def queue_depth(self) -> int:
        return 0


class StreamDevice(Device):
    """Base of devices whose work runs on streams (see the module docstring).

    A subclass implements the primitives (the methods raising
    ``NotImplementedError`` below): streams, events, waits, host callbacks,
    kernel launches and copies. Everything else (which stream an op runs on,
    when a stream must wait, how the host learns of completion, when memory may
    be reused) is here, tested on the CPU through the thread-backed test device.
    """

    generic_kernels = True
    backend = "eagerrt.backends.stream"
    completes_at_enqueue = True

    def __init__(
        self, name: str, *, compute_streams: int = 1, completion: str = "callback"
    ) -> None:
        if compute_streams < 1:
            raise DeviceError(
                f"{name}: a stream device needs a compute stream, got {compute_streams}"
            )
        if completion not in COMPLETIONS:
            raise DeviceError(
                f"{name}: completion must be one of {COMPLETIONS}, not {completion!r}"
            )
        self.name = name
        self.completion = completion
        self._compute_count = compute_streams
        self._streams: dict[str, Stream] = {}
        self._lock = threading.Lock()
        self._current: contextvars.ContextVar[Stream | None] = contextvars.ContextVar(
            f"eagerrt-stream-{name}", default=None
        )
        #: The streams that ``with stream:`` blocks open here replaced, innermost last.
        self._saved: contextvars.ContextVar[tuple[Stream | None, ...]] = contextvars.ContextVar(
            f"eagerrt-stream-saved-{name}", default=()
        )
        self._inline = _InlineExecutor()
        # (native, handle, users) of values dropped by the host, and (events,
        # things kept alive) until those events are done.
        self._retired: collections.deque[tuple[Any, Any, set[Stream]]] = collections.deque()
        self._retained: collections.deque[tuple[list[Event], Any]] = collections.deque()
        self._host_syncs = itertools.count()
        #: Per role ("completer", "watcher"), the queue a host thread of this device drains.
        self._host_queues: dict[str, queue.SimpleQueue[Any]] = {}
        _stream_devices.add(self)

    def _reset_after_fork(self) -> None:
        """In a forked child: the parent's streams, completer and watcher threads
        (and any lock they held) are gone. New work makes new ones; a value made
        on an old stream is refused when read (its work ran in the parent)."""
        for stream in self._streams.values():
            stream.lost = True
        self._streams = {}
        self._lock = threading.Lock()
        self._host_queues = {}
        self._retired.clear()  # nothing runs on the old streams: nothing to wait for
        self._retained.clear()

    # -- primitives a concrete device implements --------------------------------
    def _new_stream(self, kind: str) -> Any:
        """A native stream; ``kind`` is "compute", "h2d", "d2h" or "notify"."""
        raise NotImplementedError

    def _record_event(self, stream: Any) -> Any:
        """A native event after all work enqueued on ``stream`` so far."""
        raise NotImplementedError

    def _wait_event(self, stream: Any, event: Any) -> None:
        """Make later work on ``stream`` wait for ``event`` (never blocks the host)."""
        raise NotImplementedError

    def _event_done(self, event: Any) -> bool:
        """Whether ``event`` is done (never blocks)."""
        raise NotImplementedError

    def _event_synchronize(self, event: Any) -> None:
        """Block the calling thread until ``event`` is done."""
        raise NotImplementedError

    def _host_callback(self, stream: Any, callback: Callable[[], None]) -> None:
        """Run ``callback()`` on some host thread once earlier work on ``stream``
        is done (it must not call the device's API: it only hands over)."""
        raise NotImplementedError

    def _launch(self, stream: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Enqueue on ``stream`` the kernel of an op, given the rest of :meth:`enqueue`'s
        arguments ``(op, kernel, values, static, shape, dtype)`` (``op`` an
        :class:`~eagerrt.ops.registry.Op`; operands DeviceValues or Python scalars);
        returns ``(native, handle)`` of the result, allocated now."""
        raise NotImplementedError

    def _stage(self, array: np.ndarray) -> Any:
        """A host copy of ``array`` the copy engine can read asynchronously
        (pinned memory on CUDA); the caller may change ``array`` afterwards."""
        raise NotImplementedError

    def _copy_to_device(self, stream: Any, staged: Any) -> tuple[Any, Any]:
        """Enqueue a copy of staged host data on ``stream``: ``(native, handle)``."""
        raise NotImplementedError

    def _copy_to_host(self, stream: Any, value: DeviceValue) -> Any:
        """Enqueue a copy of ``value`` into staged host memory on ``stream``."""
        raise NotImplementedError

    def _unstage(self, staged: Any) -> np.ndarray:
        """The data of a finished device-to-host copy as an ordinary numpy array."""
        raise NotImplementedError

    def stream_failure(self, value: DeviceValue) -> Any:
        """The failure (``Failure``) the stream found while making ``value`` (known
        once its event is done; None on devices whose failures all show at
        enqueue)."""
        return None

    def _reclaim(self) -> None:
        """Memory is short: give back what the device caches (then a retry)."""

    # -- streams ----------------------------------------------------------------
    def _stream(self, key: str, kind: str) -> Stream:
        stream = self._streams.get(key)
        if stream is None:
            with self._lock:
                stream = self._streams.get(key)
                if stream is None:
                    stream = self._streams[key] = Stream(self, key, self._new_stream(kind))
        return stream

    def stream(self, index: int = 0) -> Stream:
        """Compute stream ``index`` (``with dev.stream(1): ...`` runs ops there)."""
        if not 0 <= index < self._compute_count:
            raise DeviceError(
                f"{self.name} has {self._compute_count} compute stream(s); no stream {index}"
            )
        return self._stream(f"compute{index}", "compute")

    @property
    def h2d_stream(self) -> Stream:
        """The stream host-to-device copies run on."""
        return self._stream("h2d", "h2d")

    @property
    def d2h_stream(self) -> Stream:
        """The stream device-to-host copies run on."""
        return self._stream("d2h", "d2h")

    @property
    def executor(self) -> Executor:
        """Enqueueing runs inline: an op parked on a pending host operand
        enqueues on the thread that completes it."""
        return self._inline

    @property
    def host_syncs(self) -> int:
        """How many times the host waited for this device's events (reads of data)."""
        return count_value(self._host_syncs)

    def _pick_stream(self, values: Sequence[Any]) -> Stream:
        chosen = self._current.get()
        if chosen is not None:
            # ``with dev.stream(i):`` open across a fork: its stream in the child.
            return chosen if not chosen.lost else self._stream(chosen.name, "compute")
        for v in values:
            if type(v) is DeviceValue and v.stream.compute:
                return v.stream
        return self.stream(0)

    # -- events -------------------------------------------------------------------
    def _record(self, stream: Stream) -> Event:
        """An event after everything enqueued on ``stream`` so far (hold its lock)."""
        event = Event(stream, self._record_event(stream.native), stream.enqueued)
        stream.last_event = event
        return event

    def _event_of(self, value: DeviceValue) -> Event:
        """An event after ``value``'s work: the stream's latest one if it covers
        it, else a new one (recorded lazily: most values never need one)."""
        _refuse_lost(value)
        event = value.event
        if event is None:
            stream = value.stream
            with stream.lock:
                event = stream.last_event
                if event is None or event.position < value.position:
                    event = self._record(stream)
            value.event = event
        return event

    def _order_after(self, stream: Stream, value: DeviceValue) -> Event | None:
        """The event ``stream`` must wait for before reading ``value``, or None."""
        _refuse_lost(value)
        source = value.stream
        if source is stream:
            return None
        users = value.users
        if users is None:
            value.users = {stream}
        else:
            users.add(stream)
        if stream.seen.get(source, -1) >= value.position:
            return None  # this stream already waits for a later point there
        return self._event_of(value)

    def _wait_all(self, stream: Stream, events: list[Event]) -> None:
        """Make ``stream`` wait for ``events`` (hold its lock)."""
        seen = stream.seen
        for event in events:
            if seen.get(event.stream, -1) < event.position:
                self._wait_event(stream.native, event.native)
                seen[event.stream] = event.position

    # -- enqueueing ops -----------------------------------------------------------
    def enqueue(
        self,
        op: Any,
        kernel: Callable[..., Any],
        values: Sequence[Any],
        static: dict[str, Any],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
    ) -> DeviceValue:
        """Enqueue ``op``'s kernel on a stream: the result's value, ready for
        other device ops at once (the op registry makes it a tensor).

        ``values`` are this device's DeviceValues or Python scalars; an
        exception here (out of memory, a kernel refusing its operands at
        launch) becomes the result's failure.
        """
        return DeviceValue(
            self, *self._enqueue(values, self._launch, op, kernel, values, static, shape, dtype)
        )

    def launcher(
        self, op: Any, kernel: Callable[..., Any], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> Callable[..., DeviceValue]:
        """For the op registry's inline cache (a call with the same operand
        shapes and dtypes as one that just went through :meth:`enqueue`): a
        function of the operands' values (DeviceValues or Python scalars) that
        enqueues ``kernel`` on them.

        The common case (operands on one compute stream, no stream chosen by
        ``with``, no checks to carry, nothing waiting for release) enqueues at
        once through ``_launch_fast``; any other goes through :meth:`enqueue`.
        """
        retired, retained, current = self._retired, self._retained, self._current

        def launch(*values: Any) -> DeviceValue:
            stream = None
            if not (retired or retained) and current.get() is None:
                for v in values:
                    if type(v) is DeviceValue:
                        if v.handle is not None or (stream is not None and v.stream is not stream):
                            stream = None
                            break
                        stream = v.stream
                if stream is not None and (stream.lost or not stream.compute):
                    stream = None
            if stream is not None:
                with stream.lock:
                    native = self._launch_fast(stream.native, kernel, values)
                    if native is not None:
                        stream.enqueued += 1
                        return DeviceValue(self, stream, stream.enqueued, native, None)
            return self.enqueue(op, kernel, values, {}, shape, dtype)

        return launch

    def _launch_fast(self, stream: Any, kernel: Callable[..., Any], values: Sequence[Any]) -> Any:
        """Enqueue ``kernel`` on ``stream`` for :meth:`launcher`'s common case:
        the result's native, or None to take :meth:`enqueue` instead (a kernel
        that raised or left checks; enqueue runs it again, which a kernel, a
        pure function of its operands, allows). Devices override this with a
        leaner launch."""
        return None

    def _enqueue(
        self, values: Sequence[Any], launch: Callable[..., tuple[Any, Any]], *args: Any
    ) -> tuple[Stream, int, Any, Any]:
        """Run ``launch(native stream, *args)`` (:meth:`_launch` or :meth:`_launch_plan`)
        on the stream new work on ``values`` goes to, after the waits it needs (releasing
        what dropped values no longer need, on the way): ``(stream, the work's position
        there, native, handle)``."""
        if self._retired or self._retained:
            self._tidy(_RELEASE_CHECKS)
        stream = self._pick_stream(values)
        waits = []
        for v in values:
            if type(v) is DeviceValue:
                event = self._order_after(stream, v)
                if event is not None:
                    waits.append(event)
        try:
            return self._launch_on(stream, waits, launch, args)
        except MemoryError:  # give back what can be given, then one retry
            self._reclaim_all()
            return self._launch_on(stream, waits, launch, args)

    def _launch_on(
        self,
        stream: Stream,
        waits: list[Event],
        launch: Callable[..., tuple[Any, Any]],
        args: tuple[Any, ...],
    ) -> tuple[Stream, int, Any, Any]:
        with stream.lock:
            if waits:
                self._wait_all(stream, waits)
            native, handle = launch(stream.native, *args)
            stream.enqueued += 1
            return stream, stream.enqueued, native, handle

    # -- whole plans ------------------------------------------------------------------
    #: Whether :meth:`plan_runner` runs compiled plans' kernels on native arrays
    #: (graph mode then enqueues a plan as one unit: :meth:`enqueue_plan`).
    runs_native_plans = False

    def plan_runner(
        self,
        run: Callable[[list[Any]], Any],
        inputs: int,
        results: Sequence[tuple[tuple[int, ...], np.dtype[Any]]] = (),
    ) -> Callable[[Any, list[Any]], Any]:
        """How a compiled plan runs here: a callable ``(stream, natives)`` around
        ``run(natives) -> result natives``, which calls the plan's kernels; it
        returns ``(result natives, checks left)``. The first ``inputs`` natives
        are the call's inputs, the rest the plan's constants (the same arrays
        on every call while the plan's weights are unchanged); ``results``: the
        shape and dtype of each result (a device that allocates them at enqueue)."""
        raise NotImplementedError

    def call_kernel(
        self, op: Any, kernel: Callable[..., Any], args: Sequence[Any], static: dict[str, Any]
    ) -> Any:
        """``kernel(*args, **static)`` on native operands, inside a native plan
        (a device may catch, retry or fall back here)."""
        return kernel(*args, **static)

    def enqueue_plan(
        self, runner: Callable[[Any, list[Any]], Any], values: Sequence[Any]
    ) -> list[DeviceValue]:
        """Enqueue a compiled plan as one unit of work on one stream: ``values``
        (DeviceValues: its inputs, then the constants it reads) ordered before
        it as an op's operands are; the results' values, ready at once."""
        stream, position, results, handle = self._enqueue(
            values, self._launch_plan, runner, [v.native for v in values], values
        )
        # One handle shared by every result, or (a list) one each.
        handles = handle if type(handle) is list else [handle] * len(results)
        return [
            DeviceValue(self, stream, position, r, h) for r, h in zip(results, handles, strict=True)
        ]

    def _launch_plan(self, stream: Any, *args: Any, **kwargs: Any) -> tuple[list[Any], Any]:
        """Run :meth:`enqueue_plan`'s runner on ``stream``, given ``(runner, natives,
        values)``: (result natives, their shared handle, or a list of one handle each)."""
        raise NotImplementedError

    # -- memory lifetimes -----------------------------------------------------------
    def _tidy(self, checks: int | None) -> None:
        """Turn dropped values read on other streams into retained ones (events
        recorded now on those streams), and release retained ones whose events
        are done (the first ``checks`` of them; all if None)."""
        retired = self._retired
        while retired:
            try:
                native, handle, users = retired.popleft()
            except IndexError:
                break
            if any(s.lost for s in users):
                continue  # made before a fork: no stream here reads it
            events = []
            for s in users:
                with s.lock:
                    events.append(self._record(s))
            self._retained.append((events, (native, handle)))
        retained = self._retained
        for _ in range(len(retained) if checks is None else min(checks, len(retained))):
            try:
                entry = retained.popleft()
            except IndexError:
                break
            if not all(self._event_done(e.native) for e in entry[0]):
                retained.append(entry)

    def _reclaim_all(self) -> None:
        """Out of memory: wait for every retained value's streams, free them,
        and let the device give back its caches, before one retry."""
        self._tidy(None)
        while self._retained:
            try:
                events, _ = self._retained.popleft()
            except IndexError:
                break
            for e in events:
                self._event_synchronize(e.native)
        self._reclaim()

    # -- transfers ------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> DeviceValue:
        """Enqueue an upload of ``array`` on the host-to-device stream."""
        if self._retired or self._retained:
            self._tidy(_RELEASE_CHECKS)
        staged = self._stage(array)
        try:
            value = self._upload(staged)
        except MemoryError:
            self._reclaim_all()
            value = self._upload(staged)
        assert value.event is not None
        self._retained.append(([value.event], staged))  # kept until the copy is done
        return value

    def _upload(self, staged: Any) -> DeviceValue:
        stream = self.h2d_stream
        with stream.lock:
            native, handle = self._copy_to_device(stream.native, staged)
            stream.enqueued += 1
            value = DeviceValue(self, stream, stream.enqueued, native, handle)
            # Copies get their event now: a consumer must not wait for later copies.
            value.event = self._record(stream)
        return value

    def _download(self, value: DeviceValue) -> tuple[Any, Event]:
        """Enqueue a copy of ``value`` to the host: (staged data, its event)."""
        stream = self.d2h_stream
        event = self._order_after(stream, value)
        with stream.lock:
            if event is not None:
                self._wait_all(stream, [event])
            staged = self._copy_to_host(stream.native, value)
            stream.enqueued += 1
            done = self._record(stream)
        return staged, done

    def to_numpy(self, native: Any) -> np.ndarray:
        """Copy a value to the host and wait for it (blocks this thread)."""
        value: DeviceValue = native
        staged, event = self._download(value)
        next(self._host_syncs)
        self._event_synchronize(event.native)
        failure = self.stream_failure(value)
        if failure is not None:
            raise failure.to_exception()
        return self._unstage(staged)

    def start_download(self, value: DeviceValue) -> tuple[AsyncValue, Callable[[], np.ndarray]]:
        """Enqueue a copy of ``value`` to the host without waiting: an AsyncValue
        completed once it is done, and a function giving the host array then
        (check :meth:`stream_failure` first)."""
        staged, event = self._download(value)
        return self._completion(event), lambda: self._unstage(staged)

    # -- the host learning of completion --------------------------------------------
    def host_ready(self, value: DeviceValue) -> AsyncValue:
        """An AsyncValue completed on the host once ``value``'s work is done."""
        return self._completion(self._event_of(value))

    def native_result(self, value: DeviceValue, reading: str | None = None) -> Any:
        """``value``'s native array once its work is done (what ``await t`` gives);
        raises the failure the stream found making it."""
        failure = self.stream_failure(value)
        if failure is not None:
            raise failure.to_exception(reading)
        return value.native

    def _completion(self, event: Event) -> AsyncValue:
        done = event.done
        if done is not None:
            return done
        with self._lock:
            done = event.done
            if done is not None:
                return done
            done = event.done = AsyncValue()
        next(self._host_syncs)
        if self._event_done(event.native):
            done._complete(READY, None)
        elif self.completion == "watcher":
            self._host_queue("watcher", self._watch_forever).put((event, done))
        else:
            self._notify(event, done)
        return done

    def _notify(self, event: Event, done: AsyncValue) -> None:
        """The callback strategy: a notify stream waits for the event, then a
        host callback hands ``done`` to the completer thread (a CUDA host
        function must not call CUDA, and completing runs continuations that may)."""
        completer = self._host_queue("completer", _complete_forever)
        notify = self._stream("notify", "notify")
        with notify.lock:
            self._wait_event(notify.native, event.native)
            self._host_callback(notify.native, lambda: completer.put(done))

    def _host_queue(
        self, role: str, drain: Callable[[queue.SimpleQueue[Any]], None]
    ) -> queue.SimpleQueue[Any]:
        """The queue this device's ``role`` thread runs ``drain`` on (queue and
        thread made on first need)."""
        found = self._host_queues.get(role)
        if found is None:
            with self._lock:
                found = self._host_queues.get(role)
                if found is None:
                    found = self._host_queues[role] = queue.SimpleQueue()
                    name = f"eagerrt-{self.name}-{role}"
                    threading.Thread(target=drain, args=(found,), name=name, daemon=True).start()
        return found

    def _watch_forever(self, watched: queue.SimpleQueue[tuple[Event, AsyncValue]]) -> None:
        """The watcher strategy: block on the oldest watched event, then poll the others."""
        never_run_tasks_here()  # completions run continuations here: they must not block it
        pending: list[tuple[Event, AsyncValue]] = []
        while True:
            if not pending:
                pending.append(watched.get())
            while True:
                try:
                    pending.append(watched.get_nowait())
                except queue.Empty:
                    break
            self._event_synchronize(pending[0][0].native)
            still = []
            for event, done in pending:
                if self._event_done(event.native):
                    done._complete(READY, None)
                else:
                    still.append((event, done))
            pending = still

    def close(self) -> None:
        """Take no new work, then wait for the work already enqueued."""
        super().close()
        self.synchronize()

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until all work enqueued on this device so far is done (raises
        :class:`~eagerrt.WaitTimeoutError` if it isn't within ``timeout`` s)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for stream in list(self._streams.values()):
            if stream.lost or not stream.enqueued:
                continue  # a parent's stream in a forked child (its work ran there), or idle
            with stream.lock:
                last = stream.last_event
                if (
                    last is not None
                    and last.position >= stream.enqueued
                    and self._event_done(last.native)
                ):
                    continue  # nothing enqueued since an event that is done
                event = self._record(stream)
            next(self._host_syncs)
            if deadline is None:
                self._event_synchronize(event.native)
                continue
            while not self._event_done(event.native):  # polled: a native wait can't time out
                if time.monotonic() > deadline:
                    raise WaitTimeoutError(
                        f"synchronize() timed out after {timeout} s waiting for {self.name}'s "
                        f"stream {stream.name}"
                    )
                time.sleep(0.0005)
        self._tidy(None)


def _refuse_lost(value: DeviceValue) -> None:
    if value.stream.lost:
        raise DeviceError(
            f"{value.device.name}: this value was made before the process forked; its work "
            "ran in the parent, on streams the child does not have. Make it again in the "
            "child, or move it to the host (t.to('cpu')) before forking."
        )


_stream_devices: weakref.WeakSet[StreamDevice] = weakref.WeakSet()


def _synchronize_stream_devices(timeout: float | None) -> None:
    """``ert.synchronize()``'s wait for every stream device's streams."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for device in list(_stream_devices):
        device.synchronize(None if deadline is None else max(0.0, deadline - time.monotonic()))


on_synchronize(_synchronize_stream_devices)
reset_after_fork(_stream_devices)


def _complete_forever(completer: queue.SimpleQueue[AsyncValue]) -> None:
    never_run_tasks_here()  # completions run continuations here: they must not block it
    while True:
        completer.get()._complete(READY, None)
