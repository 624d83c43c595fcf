"""The test stream device: host threads stand in for streams.

``teststream:N`` implements :class:`~eagerrt.devices.stream.StreamDevice`'s
primitives on the CPU, so every rule about streams, events, copies and memory
lifetimes runs in CI without a GPU:

* each stream is a host thread draining a FIFO queue;
* an event is a marker put on a stream's queue, done once the thread reaches it;
  a wait is a queue item that blocks the thread on another stream's marker;
* kernels are the CPU's (numpy and numba), run on the stream threads; each
  result is written into memory from a pool with per-stream free lists, taken
  when the work is *enqueued* (as CuPy does), and the work sees its operands
  through views that do not keep that memory alive (as a GPU kernel sees
  pointers): a missing wait or a too-early reuse shows up as wrong data;
* ``delay=`` sleeps a random time (seeded) before each item, to flush out
  missing waits; ``timeline`` records when each kernel and copy ran.

>>> import eagerrt as ert
>>> from eagerrt.devices.stream_threads import ThreadStreamDevice
>>> dev = ThreadStreamDevice("teststream:doc", delay=0.001)
>>> a = ert.asarray([1.0, 2.0], device=dev)
>>> with dev.stream(1):
...     b = a + 1          # stream 1 waits for the upload, on the device side
>>> b.numpy()
array([2., 3.])
>>> dev.shutdown()
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import logging
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import Failure, profiling, user_line
from .stream import DeviceMemoryError, DeviceValue, StreamDevice, _stream_devices

__all__ = ["HostBlockPool", "ThreadStreamDevice"]

_log = logging.getLogger("eagerrt")
_STOP = object()
#: Pool blocks are multiples of this many bytes.
_BLOCK_ALIGN = 256
#: The marker of a block no stream can still be reading.
_ALREADY = threading.Event()
_ALREADY.set()


class _ThreadStream:
    """A host thread running queued callables in order."""

    def __init__(self, device: ThreadStreamDevice, name: str, seed: int) -> None:
        self.device = device
        self.name = name
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        #: Set once the thread has stopped (the device was shut down): every item
        #: put before ran, so later ones (a download of a value made before the
        #: close) run at once on the thread putting them, in order.
        self.stopped = False
        self._stop_lock = threading.Lock()
        self.rng = random.Random(seed)
        self.thread = threading.Thread(
            target=self._run, name=f"eagerrt-{device.name}-{name}", daemon=True
        )
        self.thread.start()

    def put(self, label: str | None, work: Callable[[], object], launch: Any = None) -> None:
        """Queue ``work``; a labelled item is a kernel or copy (delayed, timed),
        and reported to the profile that ``launch`` (profiling.launching()) names."""
        with self._stop_lock:
            if not self.stopped:
                self.queue.put((label, work, launch))
                return
        if threading.current_thread() is not self.thread:
            self.thread.join()  # the items queued before the stop run first
        self._run_item((label, work, launch))

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is _STOP:
                with self._stop_lock:
                    self.stopped = True
                while True:  # what was put before the flag, in order
                    try:
                        item = self.queue.get_nowait()
                    except queue.Empty:
                        return
                    if item is not _STOP:
                        self._run_item(item)
            self._run_item(item)

    def _run_item(self, item: tuple[str | None, Callable[[], object], Any]) -> None:
        device = self.device
        label, work, launch = item
        if label is not None and device.delay:
            time.sleep(self.rng.uniform(0.0, device.delay))
        start = time.perf_counter_ns()
        try:
            work()
        except BaseException:  # an item must never kill its stream
            _log.exception("eagerrt: work on %s raised", self.name)
        if label is None:
            return
        end = time.perf_counter_ns()
        if device.timeline is not None:
            device.timeline.append((self.name, label, start / 1e9, end / 1e9))
        if launch is not None:  # its own track in ert.profile(), as its op's event
            profiling.record(
                label,
                device=device.name,
                track=self.name,
                start_ns=start,
                end_ns=end,
                launch=launch,
            )


@dataclass(slots=True, eq=False, repr=False)
class _Cell:
    """What stream-side work sees of a value: a view that does not keep its
    memory alive, and the failure found making it."""

    raw: np.ndarray
    failure: Failure | None = field(init=False, default=None)


def _arrays(operands: list[Any]) -> list[Any] | Failure:
    """What stream-side work computes on: each operand's memory (a value's
    ``raw`` view, a Python scalar as it is), or the first failed value's failure."""
    arrays = []
    for a in operands:
        if type(a) is _Cell:
            if a.failure is not None:
                return a.failure
            a = a.raw
        arrays.append(a)
    return arrays


def _write(cell: _Cell, result: Any, what: str) -> None:
    """Copy a kernel's result into ``cell``'s memory, allocated at enqueue for
    the shape and dtype the result must have."""
    result = np.asarray(result)
    if result.shape != cell.raw.shape or result.dtype != cell.raw.dtype:
        raise RuntimeError(
            f"{what} gave {result.dtype}{list(result.shape)}, "
            f"expected {cell.raw.dtype}{list(cell.raw.shape)}"
        )
    np.copyto(cell.raw, result)


@dataclass(slots=True, eq=False, repr=False)
class _ThreadPlan:
    """A compiled plan as the test device runs it: ``run(arrays)`` on the stream
    thread, into results allocated (``results``: shapes and dtypes) at enqueue."""

    run: Callable[[list[Any]], Any]
    results: list[tuple[tuple[int, ...], np.dtype[Any]]]

    def __call__(self, stream: Any, natives: list[Any]) -> Any:  # pragma: no cover
        raise AssertionError("the test device runs its plans through _launch_plan")


class _Block:
    __slots__ = ("home", "raw", "released", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.raw = np.empty(size, np.uint8)
        self.home: _ThreadStream | None = None
        self.released: threading.Event | None = None


class HostBlockPool:
    """Device memory for the test device: blocks with per-stream free lists.

    A block whose last owning array died goes back to the pool with a marker
    recorded on the stream it was allocated on. The same stream reuses it at
    once (stream order puts the new work after the old); another stream only
    once the marker is done. ``limit`` caps the bytes held (None: no cap).
    """

    def __init__(self, device: ThreadStreamDevice, limit: int | None) -> None:
        self.device = device
        self.limit = limit
        self.held = 0
        self.reused_same_stream = 0
        self.reused_other_stream = 0
        self._free: list[_Block] = []
        self._released: collections.deque[_Block] = collections.deque()
        self._lock = threading.Lock()

    def allocate(
        self, stream: _ThreadStream, shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(owning, raw)`` views of a new block: the block returns to the pool
        when every view of ``owning`` is gone; ``raw`` never keeps it."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(_BLOCK_ALIGN, -(-nbytes // _BLOCK_ALIGN) * _BLOCK_ALIGN)
        with self._lock:
            block = self._take(stream, size)
        keeper = (ctypes.c_ubyte * size).from_buffer(block.raw)  # type: ignore[arg-type]
        weakref.finalize(keeper, self._released.append, block)
        owning = np.frombuffer(keeper, np.uint8)[:nbytes]  # type: ignore[call-overload]
        owning = owning.view(dtype).reshape(shape)
        owning.flags.writeable = False  # handed to users: they read, kernels write
        return owning, block.raw[:nbytes].view(dtype).reshape(shape)

    def _reset_after_fork(self) -> None:
        # In a forked child no stream runs the parent's work: every free block
        # (and any the parent's values give back later) is free for any stream.
        self._lock = threading.Lock()
        for block in self._free:
            block.released = _ALREADY

    def _take(self, stream: _ThreadStream, size: int) -> _Block:
        while self._released:
            block = self._released.popleft()
            assert block.home is not None
            if block.home.thread.is_alive():
                block.released = self.device._record_event(block.home)
            else:  # a parent's stream, in a forked child: nothing reads it any more
                block.released = _ALREADY
            self._free.append(block)
        for i, block in enumerate(self._free):
            if block.size != size:
                continue
            if block.home is stream:
                self.reused_same_stream += 1
            elif block.released is not None and block.released.is_set():
                self.reused_other_stream += 1
            else:
                continue
            del self._free[i]
            block.home = stream
            return block
        if self.limit is not None and self.held + size > self.limit:
            self._trim()
            if self.held + size > self.limit:
                raise DeviceMemoryError(
                    f"{self.device.name} is out of memory: {size} bytes asked for, "
                    f"{self.held} of {self.limit} held"
                )
        block = _Block(size)
        block.home = stream
        self.held += size
        return block

    def _trim(self) -> None:
        """Drop free blocks no stream can still be reading (their marker is done)."""
        keep = []
        for block in self._free:
            if block.released is not None and block.released.is_set():
                self.held -= block.size
            else:
                keep.append(block)
        self._free = keep

    def trim(self) -> None:
        with self._lock:
            self._trim()


class ThreadStreamDevice(StreamDevice):
    """A stream device whose streams are host threads (see the module docstring).

    ``compute_streams`` compute streams; ``completion`` "callback" or "watcher";
    ``delay`` the most seconds to sleep before each kernel or copy (random,
    from ``seed``); ``memory_limit`` bytes of device memory (None: unlimited);
    ``timeline=True`` records ``(stream, label, start, end)`` of each kernel and
    copy in ``self.timeline``.
    """

    kernel_name = "cpu"

    def __init__(
        self,
        name: str = "teststream:0",
        *,
        compute_streams: int = 2,
        completion: str = "callback",
        delay: float = 0.0,
        seed: int = 0,
        memory_limit: int | None = None,
        timeline: bool = False,
    ) -> None:
        super().__init__(name, compute_streams=compute_streams, completion=completion)
        self.delay = delay
        self.pool = HostBlockPool(self, memory_limit)
        self.timeline: list[tuple[str, str, float, float]] | None = [] if timeline else None
        self._seeds = itertools.count(seed * 1000)
        self._threads: list[_ThreadStream] = []

    def _reset_after_fork(self) -> None:
        super()._reset_after_fork()
        self._threads = []  # the parent's stream threads did not come along
        self.pool._reset_after_fork()

    # -- primitives ---------------------------------------------------------------
    def _new_stream(self, kind: str) -> _ThreadStream:
        stream = _ThreadStream(self, f"{kind}{len(self._threads)}", next(self._seeds))
        self._threads.append(stream)
        return stream

    def _record_event(self, stream: _ThreadStream) -> threading.Event:
        marker = threading.Event()
        stream.put(None, marker.set)
        return marker

    def _wait_event(self, stream: _ThreadStream, event: threading.Event) -> None:
        stream.put(None, event.wait)

    def _event_done(self, event: threading.Event) -> bool:
        return event.is_set()

    def _event_synchronize(self, event: threading.Event) -> None:
        event.wait()

    def _host_callback(self, stream: _ThreadStream, callback: Callable[[], None]) -> None:
        stream.put(None, callback)

    def _launch(
        self,
        stream: _ThreadStream,
        op: Any,
        kernel: Callable[..., Any],
        values: Sequence[Any],
        static: dict[str, Any],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
    ) -> tuple[np.ndarray, _Cell]:
        owning, raw = self.pool.allocate(stream, shape, dtype)
        out = _Cell(raw)
        name = op.name
        operands = [v.handle if type(v) is DeviceValue else v for v in values]
        site = user_line()

        def work() -> None:
            arrays = _arrays(operands)
            if isinstance(arrays, Failure):
                out.failure = arrays
                return
            try:
                _write(out, kernel(*arrays, **static), f"kernel of {name!r}")
            except Exception as exc:
                out.failure = Failure(name, site, exc)

        stream.put(name, work, profiling.launching())
        return owning, out

    # -- compiled plans -------------------------------------------------------------
    #: A compiled function's kernels run as one item on one stream thread.
    runs_native_plans = True

    def plan_runner(
        self,
        run: Callable[[list[Any]], Any],
        inputs: int,
        results: Sequence[tuple[tuple[int, ...], np.dtype[Any]]] = (),
    ) -> _ThreadPlan:
        return _ThreadPlan(run, list(results))

    def _launch_plan(
        self,
        stream: _ThreadStream,
        runner: Callable[[Any, list[Any]], Any],
        natives: list[Any],
        values: Sequence[Any],
    ) -> tuple[list[np.ndarray], list[_Cell]]:
        assert isinstance(runner, _ThreadPlan)
        operands = [v.handle if type(v) is DeviceValue else v for v in values]
        made = [self.pool.allocate(stream, shape, dtype) for shape, dtype in runner.results]
        cells = [_Cell(raw) for _, raw in made]
        site = user_line()

        def work() -> None:
            arrays = _arrays(operands)
            failure = None
            if isinstance(arrays, Failure):
                failure = arrays
            else:
                try:
                    for cell, result in zip(cells, runner.run(arrays), strict=True):
                        _write(cell, result, "a compiled plan")
                except Exception as exc:
                    failure = Failure("function", site, exc)
            for cell in cells:
                cell.failure = failure

        stream.put("function", work, profiling.launching())
        return [owning for owning, _ in made], cells

    def _stage(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True, order="C")

    def _copy_to_device(
        self, stream: _ThreadStream, staged: np.ndarray
    ) -> tuple[np.ndarray, _Cell]:
        owning, raw = self.pool.allocate(stream, staged.shape, staged.dtype)
        stream.put("upload", lambda: np.copyto(raw, staged), profiling.launching())
        return owning, _Cell(raw)

    def _copy_to_host(self, stream: _ThreadStream, value: DeviceValue) -> np.ndarray:
        cell: _Cell = value.handle
        host = np.empty(cell.raw.shape, cell.raw.dtype)

        def work() -> None:
            if cell.failure is None:
                np.copyto(host, cell.raw)

        stream.put("download", work, profiling.launching())
        return host

    def _unstage(self, staged: np.ndarray) -> np.ndarray:
        return staged

    def stream_failure(self, value: DeviceValue) -> Any:
        return value.handle.failure  # its _Cell's

    def _reclaim(self) -> None:
        self.pool.trim()

    # -- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        """Take no new work, finish what is queued, stop the stream threads."""
        super().close()
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the stream threads once their queued work is done (``ert.synchronize()``
        no longer waits for this device). Work put on a stopped stream later (reading
        a value made before) runs at once on the thread asking for it."""
        _stream_devices.discard(self)
        for stream in self._threads:
            stream.queue.put(_STOP)
        for stream in self._threads:
            stream.thread.join()
