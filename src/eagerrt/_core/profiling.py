"""The profiler's hook: the active recording, and how work reports to it.

``active`` is None unless ``with ert.profile():`` is running; every hook in the
runtime is one read of this module global, so profiling costs nothing when off.
The op registry, the graph executor and devices report through it:

* :meth:`Recording.record` stores one finished piece of work (an inline op, a
  graph step, or a device's own work on a stream: see :func:`record`);
* :meth:`Recording.launched` wraps the compute of an op that runs later (parked
  on its inputs or posted to a worker), so its event gets the real start and end
  on whichever thread runs it.

Dependencies are found through the values an event produced: each result is
remembered (by identity, weakly) with the event that made it, and a later op
reading it lists that event among its ``inputs``.

This module knows nothing of ops, tensors or devices: values are any objects,
devices are given by name. The public API is :mod:`eagerrt.profiler`.

>>> from eagerrt._core import profiling
>>> profiling.record("decode", device="cam", track="stream 0", start_ns=0, end_ns=5) is None
True
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .async_value import AsyncValue
from .config import config
from .errors import SourceLine, UsageError, user_line

__all__ = ["Event", "Launch", "Recording", "active", "launching", "record", "track_name"]


@dataclass(slots=True)
class Event:
    """One piece of work recorded by a profile: an op, a compiled call, a step.

    Times are ``time.perf_counter_ns()`` readings: ``queued_ns`` when it was
    called (or, for a graph step, when its call started), ``start_ns`` and
    ``end_ns`` around the kernel itself.
    """

    #: Unique within its profile, in the order the work was called.
    id: int
    #: The op's name (a compiled function's, for kind ``"graph"``).
    name: str
    #: ``"op"`` (an eager op), ``"graph"`` (one call of an ``ert.function``),
    #: ``"segment"`` (a part of one run as one task), ``"step"`` (one op inside
    #: a compiled call), or what a device reports for its own work.
    kind: str
    #: The device's name (``"cpu"``).
    device: str
    #: Where it ran: a thread's name (the caller's, or a worker's), or a stream's.
    track: str
    queued_ns: int
    start_ns: int
    end_ns: int
    #: True if it ran on the thread that called it or completed its last input,
    #: False if it was posted to a worker (or a device's stream).
    inline: bool
    #: The user's line that called it (None where unknown).
    source: SourceLine | None
    #: Ids of the recorded events that produced its inputs.
    inputs: tuple[int, ...] = ()
    #: The event this one ran inside (a graph step's call), if any.
    parent: int | None = None
    #: Whether its kernel raised.
    failed: bool = False
    #: What else is known of it: ``{"branch": "true_fn"}`` for an ``ert.cond``,
    #: ``{"iterations": 5}`` for an ``ert.while_loop`` (shown in the trace).
    args: dict[str, Any] | None = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def wait_ns(self) -> int:
        """How long it waited between its call and its start (inputs, a queue)."""
        return self.start_ns - self.queued_ns


class Recording:
    """What a profile collects while it is active; thread-safe.

    Work is logged from any thread as plain tuples in :class:`Event`'s field
    order (a list append is atomic, and a tuple costs a tenth of an Event to
    make); :meth:`recorded` turns them into Events when they are read. Ids come
    from one counter, producers from one dict keyed by ``id(value)`` holding a
    weak reference to the value (so an id reused by a later object never names
    a stale producer).
    """

    def __init__(self) -> None:
        self._log: list[Event | tuple[Any, ...]] = []
        self._made: list[Event] = []
        self._making = threading.Lock()
        self._ids = itertools.count(1)
        # id(value) -> (a weak reference to it, the event that made it). A dead
        # value's entry stays until its id is reused (a callback dropping it
        # would cost as much again): the reference tells a stale entry.
        self._producers: dict[int, tuple[weakref.ref[Any], int]] = {}
        # Results of launched ops not finished yet, to wait for when stopping.
        self._in_flight: dict[int, Any] = {}
        #: (device, track) of the work devices reported themselves (streams).
        self.device_tracks: set[tuple[str, str]] = set()

    def new_id(self) -> int:
        return next(self._ids)

    def recorded(self) -> list[Event]:
        """The events logged so far, in the order they were logged (the same
        Event objects on every read; don't change the list)."""
        with self._making:
            made, log = self._made, self._log
            for i in range(len(made), len(log)):
                item = log[i]
                made.append(item if isinstance(item, Event) else Event(*item))
            return made

    def producers(self, values: Iterable[Any]) -> tuple[int, ...]:
        """The events that made these values (those made while recording)."""
        found: list[int] = []
        get = self._producers.get
        for value in values:
            entry = get(id(value))
            if entry is not None and entry[0]() is value and entry[1] not in found:
                found.append(entry[1])
        return tuple(found)

    def produced(self, value: Any, event_id: int) -> None:
        """Remember that ``value`` was made by event ``event_id``."""
        try:
            self._producers[id(value)] = (weakref.ref(value), event_id)
        except TypeError:  # not weakly referable (a plain array): can't be tracked
            return

    def add(self, event: Event | tuple[Any, ...]) -> None:
        """Log one event: an Event, or a tuple of its fields in order."""
        self._log.append(event)

    def record(
        self,
        name: str,
        *,
        device: str,
        track: str | None = None,
        start_ns: int,
        end_ns: int,
        queued_ns: int | None = None,
        kind: str = "op",
        inline: bool = True,
        source: SourceLine | None = None,
        inputs: Iterable[Any] = (),
        outputs: Iterable[Any] = (),
        parent: int | None = None,
        failed: bool = False,
        event_id: int | None = None,
        args: dict[str, Any] | None = None,
        deps: tuple[int, ...] = (),
    ) -> int:
        """Store one finished piece of work; returns its event id.

        ``inputs`` and ``outputs`` are the values it read and made (tensors):
        the inputs' producers become its dependencies (after ``deps``, ids of
        events known already), and later readers of the outputs depend on it.
        """
        eid = next(self._ids) if event_id is None else event_id
        self._log.append(
            (
                eid,
                name,
                kind,
                device,
                track_name() if track is None else track,
                start_ns if queued_ns is None else queued_ns,
                start_ns,
                end_ns,
                inline,
                source,
                tuple(dict.fromkeys(deps + self.producers(inputs))),
                parent,
                failed,
                args,
            )
        )
        for value in outputs:
            self.produced(value, eid)
        return eid

    def ran(
        self,
        name: str,
        device: str,
        start_ns: int,
        end_ns: int,
        source: SourceLine | None,
        inputs: Iterable[Any],
        result: Any,
        failed: bool,
    ) -> None:
        """:meth:`record` for the commonest case, an op run inline on this
        thread: the hot path while profiling, so :meth:`producers`,
        :meth:`produced` and :func:`track_name` are written out here."""
        eid = next(self._ids)
        producers = self._producers
        deps: list[int] = []
        for value in inputs:
            entry = producers.get(id(value))
            if entry is not None and entry[0]() is value and entry[1] not in deps:
                deps.append(entry[1])
        try:
            track: str = _thread.name
        except AttributeError:
            track = track_name()
        self._log.append(
            (
                eid,
                name,
                "op",
                device,
                track,
                start_ns,
                start_ns,
                end_ns,
                True,
                source,
                tuple(deps),
                None,
                failed,
                None,
            )
        )
        producers[id(result)] = (weakref.ref(result), eid)  # a tensor: weakly referable

    def launched(
        self,
        name: str,
        device: str,
        compute: Callable[..., Any],
        inputs: Iterable[Any],
        result: Any,
        source: SourceLine | None,
        cost_ns: float,
    ) -> Callable[..., Any]:
        """``compute`` wrapped to record its run: for work called now that runs
        once its inputs are ready, here or on a worker."""
        eid = next(self._ids)
        queued = time.perf_counter_ns()
        deps = self.producers(inputs)
        self.produced(result, eid)
        self._in_flight[eid] = result
        in_flight = self._in_flight
        log = self._log
        clock = time.perf_counter_ns

        def timed(*values: Any) -> Any:
            start = clock()
            failed = True
            try:
                out = compute(*values)
                failed = False
                return out
            finally:
                end = clock()
                log.append(
                    (
                        eid,
                        name,
                        "op",
                        device,
                        track_name(),
                        queued,
                        start,
                        end,
                        # The scheduler's own test, made just before this ran.
                        cost_ns <= config.inline_limit_ns,
                        source,
                        deps,
                        None,
                        failed,
                        None,
                    )
                )
                in_flight.pop(eid, None)

        return timed

    def launch(
        self, name: str, device: str, inputs: Iterable[Any], source: SourceLine | None
    ) -> Launch:
        """An op about to enqueue its work on a device's stream, on this
        thread: the device may take it (:func:`launching`) and report the work
        with it; else :meth:`Launch.launched` records the enqueue itself."""
        launch = Launch(self, next(self._ids), self.producers(inputs), source)
        launch.name, launch.device = name, device
        launch.outer = getattr(_thread, "launch", None)
        _thread.launch = launch
        return launch

    def expect(self, event_id: int, result: Any) -> None:
        """Note work called now that will complete ``result`` (an AsyncValue)
        and record event ``event_id`` later, then call :meth:`done`."""
        self._in_flight[event_id] = result

    def done(self, event_id: int) -> None:
        self._in_flight.pop(event_id, None)

    def in_flight(self) -> list[Any]:
        """Results of launched work that has not run yet."""
        return list(self._in_flight.copy().values())


_thread = threading.local()


@dataclass(slots=True, eq=False, repr=False)
class Launch:
    """Work being enqueued on a device while a profile records, with what its
    event needs: an id taken now (its result's readers name it at once), the
    dependencies, the user's line and the time it was called. A device passes
    it to :func:`record` when it reports the work, from any thread."""

    recording: Recording
    event_id: int
    deps: tuple[int, ...]
    source: SourceLine | None
    queued_ns: int = field(init=False, default_factory=time.perf_counter_ns)
    taken: bool = field(init=False, default=False)
    name: str = field(init=False, default="")
    device: str = field(init=False, default="")
    outer: Launch | None = field(init=False, default=None)
    #: Set when a device takes the launch: the profile, leaving its block,
    #: waits for the device's report (see :func:`launching`).
    reported: AsyncValue | None = field(init=False, default=None)

    def _await_report(self) -> Launch:
        if self.reported is None:
            self.reported = AsyncValue()
            self.recording.expect(self.event_id, self.reported)
        return self

    def _report_done(self) -> None:
        reported, self.reported = self.reported, None
        if reported is not None:
            self.recording.done(self.event_id)
            reported.set_value(None)

    def abandoned(self) -> None:
        """The op's enqueue was interrupted: no result, nothing more to wait for."""
        _thread.launch = self.outer
        self._report_done()

    def launched(self, result: Any, failed: bool) -> None:
        """The op's enqueue returned ``result``: it names this launch's event.
        If no device took the launch to report the work, the enqueue itself is
        recorded (on this thread), so the op shows either way."""
        _thread.launch = self.outer
        if not self.taken or failed:
            self.recording.record(
                self.name,
                device=self.device,
                start_ns=self.queued_ns,
                end_ns=time.perf_counter_ns(),
                source=self.source,
                failed=failed,
                event_id=self.event_id,
                deps=self.deps,
            )
            self._report_done()  # a failed enqueue: the device will report nothing
        self.recording.produced(result, self.event_id)


def launching() -> Launch | None:
    """For a device enqueueing work on a stream: what to pass to
    :func:`record` as ``launch=`` when it reports that work (None when no
    profile records). Call it on the thread enqueueing the work: inside an op's
    enqueue it is that op's launch (its event id, dependencies and line); for
    other work (a copy) a new one with the user's line. Report the work with
    it once it has run (even if it failed): leaving the profile's block waits
    for that report.

    >>> from eagerrt._core import profiling
    >>> profiling.launching() is None  # no profile recording
    True
    """
    launch: Launch | None = getattr(_thread, "launch", None)
    if launch is not None:
        launch.taken = True
        return launch._await_report()
    recording = active
    if recording is None:
        return None
    return Launch(recording, recording.new_id(), (), user_line())._await_report()


def track_name() -> str:
    """The calling thread's name, the track its work shows on (read once per
    thread: ``current_thread()`` costs more than the rest of a record)."""
    try:
        name: str = _thread.name
    except AttributeError:
        name = _thread.name = threading.current_thread().name
    return name


#: The recording in progress, or None: the one check every hook makes.
active: Recording | None = None

_switch = threading.Lock()


def start(recording: Recording) -> None:
    """Make ``recording`` the active one (a UsageError if one already is)."""
    global active
    with _switch:
        if active is not None:
            raise UsageError(
                "a profile is already recording: profiles don't nest or overlap. "
                "Use the outer one's events (filter them by time or name) instead "
                "of starting a second ert.profile() inside it."
            )
        active = recording


def stop(recording: Recording) -> None:
    global active
    with _switch:
        if active is recording:
            active = None


def record(
    name: str,
    *,
    device: str,
    track: str,
    start_ns: int,
    end_ns: int,
    queued_ns: int | None = None,
    kind: str = "op",
    inline: bool = False,
    inputs: Iterable[Any] = (),
    outputs: Iterable[Any] = (),
    failed: bool = False,
    launch: Launch | None = None,
) -> int | None:
    """Report work a device ran on its own track (a GPU stream, a DMA queue).

    Does nothing and returns None when no profile is active (nor ``launch``
    given); otherwise returns the event's id. Times are
    ``time.perf_counter_ns()`` readings (convert a device's own clock first).
    ``inputs``/``outputs`` are the tensors it read and wrote, which link it to
    the ops around it. ``launch`` is what :func:`launching` gave on the thread
    that enqueued the work: with it, the work is the op's event (its id, its
    dependencies, its line and call time), recorded into the profile that was
    active then, from whichever thread reports it. Without it the line is the
    user's line calling now (unknown off the launching thread).

    >>> import time, eagerrt as ert
    >>> from eagerrt._core import profiling
    >>> with ert.profile() as prof:
    ...     t0 = time.perf_counter_ns()
    ...     _ = profiling.record("memcpy", device="cpu", track="copy engine",
    ...                          start_ns=t0, end_ns=t0 + 1000)
    >>> [(e.name, e.track, e.duration_ns) for e in prof.events]
    [('memcpy', 'copy engine', 1000)]
    """
    recording = active if launch is None else launch.recording
    if recording is None:
        return None
    recording.device_tracks.add((device, track))
    if launch is not None and queued_ns is None:
        queued_ns = launch.queued_ns
    eid = recording.record(
        name,
        device=device,
        track=track,
        start_ns=start_ns,
        end_ns=end_ns,
        queued_ns=queued_ns,
        kind=kind,
        inline=inline,
        source=user_line() if launch is None else launch.source,
        inputs=inputs,
        outputs=outputs,
        failed=failed,
        event_id=None if launch is None else launch.event_id,
        deps=() if launch is None else launch.deps,
    )
    if launch is not None:
        launch._report_done()
    return eid
