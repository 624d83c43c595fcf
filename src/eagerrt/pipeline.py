"""``ert.pipeline``: overlap I/O and compute by mapping functions over a stream.

:func:`map` applies a function (async or plain) to every item of an iterable or
async iterable, keeping up to ``concurrency`` items in flight; ``.map`` on the
result chains another stage with its own concurrency, so read -> preprocess ->
model -> write is one expression and every stage works at once.

>>> import anyio, eagerrt as ert
>>> async def load(i):
...     await anyio.sleep(0)            # a file read, a request...
...     return ert.full(3, float(i))
>>> async def main():
...     stage = ert.pipeline.map(load, range(4), concurrency=8).map(ert.sum)
...     async with stage as results:    # runs while you iterate
...         return [float(total) async for total in results]
>>> anyio.run(main)
[0.0, 3.0, 6.0, 9.0]

Bounds, applied to each stage on its own:

* items in flight: an item counts from the moment the stage pulls it from its
  source until its result is taken by the next stage (or by you), so a slow
  consumer stops the source being read (backpressure), whatever the ordering;
* bytes in flight (``max_bytes``, with ``size`` = :func:`nbytes` by default): a
  stage holds its input's bytes while the function runs, then its result's until
  it is taken; an item is only admitted while the total plus its own size fits
  (one item always may, so an oversize item can't wedge the pipeline).

Results come in source order (``ordered=False``: as they finish). A function
that returns a :class:`~eagerrt.Tensor` (or a tuple, list or dict of them) is done
when the tensors are ready, so a kernel failure is that item's failure.

A failure in item *i* stops the stage: nothing more is pulled from the source,
items after *i* are cancelled, and once the results before *i* have been taken
(``ordered=True``, as a sequential loop would have produced them) iterating raises
:class:`~eagerrt.PipelineError` naming the stage, *i* and the item, the original
exception chained. Leaving the ``async with`` block early (``break``, an error,
a cancellation) cancels whatever is still running and closes the source.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import reprlib
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypedDict, TypeVar, Unpack, final

import anyio
import anyio.abc
import anyio.to_thread

from ._core import ArgumentError, Available, PipelineError, UsageError
from .tensor import Tensor

__all__ = ["PipelineError", "Results", "Stage", "StageStatistics", "map", "nbytes"]

T = TypeVar("T")
R = TypeVar("R")

_item_repr = reprlib.Repr()
_item_repr.maxstring = 80
_item_repr.maxother = 80


def nbytes(item: Any) -> int:
    """The default ``size`` of an item: ``nbytes`` of tensors and arrays, the
    length of ``bytes``, summed over tuples, lists and dict values; 0 otherwise.

    >>> import numpy as np
    >>> nbytes(np.zeros(4, "float32")), nbytes(b"abc"), nbytes(("name", np.zeros(2)))
    (16, 3, 16)
    """
    if isinstance(item, bytes | bytearray):
        return len(item)
    size = getattr(item, "nbytes", None)
    if isinstance(size, int):  # Tensor, numpy/cupy arrays, memoryview
        return size
    if isinstance(item, tuple | list):
        return sum(nbytes(x) for x in item)
    if isinstance(item, dict):
        return sum(nbytes(x) for x in item.values())
    return 0


@dataclass
class StageStatistics:
    """What one stage has done so far (see ``results.statistics()``)."""

    name: str
    #: Items whose function has been called, and results taken downstream.
    started: int = 0
    delivered: int = 0
    #: Pulled from the source, result not yet taken (the bounded quantity).
    in_flight: int = 0
    max_in_flight: int = 0
    #: Function calls running right now, and at most at once.
    running: int = 0
    max_running: int = 0
    bytes_in_flight: int = 0
    max_bytes_in_flight: int = 0
    #: Seconds items spent in the function, summed over items (overlapping
    #: calls each count): what the stage would take run one item at a time.
    busy_s: float = 0.0


def map(
    fn: Callable[[T], Any],
    source: Iterable[T] | AsyncIterable[T] | Stage[T],
    *,
    concurrency: int = 4,
    max_bytes: int | None = None,
    size: Callable[[Any], int] = nbytes,
    ordered: bool = True,
    thread: bool = False,
    progress: bool | str = False,
    name: str | None = None,
) -> Stage[Any]:
    """A stage applying ``fn`` to every item of ``source`` (run it with ``async with``).

    ``fn`` may be async, plain, or return an awaitable (an ``ert.function``).
    ``concurrency``: items in flight at most. ``max_bytes``: bytes in flight at
    most, measured by ``size``. ``ordered=False`` yields results as they finish.
    ``thread=True`` runs a plain ``fn`` on a worker thread (blocking I/O, numpy
    code that releases the GIL) instead of on the event loop. ``progress``: a
    tqdm bar (``True``, or its description); tqdm is an optional dependency.
    ``name`` (default: ``fn``'s name) appears in errors and statistics.

    A plain iterable is read on the event loop; a source whose reads block should
    be an async iterable (or a stage whose ``fn`` does the reading).

    >>> import anyio
    >>> anyio.run(map(str.upper, ["a", "b"]).collect)
    ['A', 'B']
    """
    return Stage(
        fn,
        source,
        concurrency=concurrency,
        max_bytes=max_bytes,
        size=size,
        ordered=ordered,
        thread=thread,
        progress=progress,
        name=name,
    )


class _Options(TypedDict, total=False):
    """:func:`map`'s keyword options, which :meth:`Stage.map` passes on."""

    concurrency: int
    max_bytes: int | None
    size: Callable[[Any], int]
    ordered: bool
    thread: bool
    progress: bool | str
    name: str | None


@final
class Stage(Generic[R]):
    """A function mapped over a source, not yet running (made by :func:`map`).

    ``async with stage as results:`` starts it (and every stage it reads from)
    in the current task and yields an async iterator of its results; leaving the
    block stops it. ``await stage.collect()`` and ``await stage.drain()`` do both.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        source: Iterable[Any] | AsyncIterable[Any] | Stage[Any],
        *,
        concurrency: int,
        max_bytes: int | None,
        size: Callable[[Any], int],
        ordered: bool,
        thread: bool,
        progress: bool | str,
        name: str | None,
    ) -> None:
        if not callable(fn):
            raise ArgumentError(f"ert.pipeline.map needs a function, got {fn!r}")
        if not isinstance(source, Stage | Iterable | AsyncIterable):
            raise ArgumentError(
                f"ert.pipeline.map needs an iterable or async iterable source, got {source!r}"
            )
        if type(concurrency) is not int or concurrency < 1:
            raise ArgumentError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if max_bytes is not None and (type(max_bytes) is not int or max_bytes < 1):
            raise ArgumentError(f"max_bytes must be None or an int >= 1, got {max_bytes!r}")
        if not callable(size):
            raise ArgumentError(f"size must be a function of an item, got {size!r}")
        if thread and inspect.iscoroutinefunction(fn):
            raise ArgumentError("thread=True runs a plain function on a thread; fn is async")
        if progress:
            _require_tqdm()
        self.fn = fn
        self.source = source
        self.concurrency = concurrency
        self.max_bytes = max_bytes
        self.size = size
        self.ordered = ordered
        self.thread = thread
        self.progress = progress
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)
        self._open: _Run[R] | None = None

    def __repr__(self) -> str:
        return f"<ert.pipeline.Stage {self.name!r} concurrency={self.concurrency}>"

    def map(self, fn: Callable[[R], Any], **options: Unpack[_Options]) -> Stage[Any]:
        """Chain a stage that applies ``fn`` to this stage's results; ``options``
        are :func:`map`'s, with its defaults."""
        return map(fn, self, **options)

    async def __aenter__(self) -> Results[R]:
        if self._open is not None:
            raise UsageError(
                f"stage {self.name!r} is already running; build another stage to run it twice"
            )
        run: _Run[R] = _Run(self)
        await run.open()
        self._open = run
        return run.results

    async def __aexit__(self, *exc_info: object) -> None:
        run, self._open = self._open, None
        assert run is not None
        await run.close()

    def __aiter__(self) -> NoReturn:
        raise UsageError(
            "a pipeline stage runs tasks that must stop when you stop reading, so read it "
            "inside a block: `async with stage as results: async for r in results: ...` "
            "(or `await stage.collect()`)"
        )

    async def collect(self) -> list[R]:
        """Run the stage to the end and return its results as a list."""
        async with self as results:
            return [r async for r in results]

    async def drain(self) -> int:
        """Run the stage to the end, dropping results (a stage run for its effect,
        such as writing files); returns how many items went through."""
        count = 0
        async with self as results:
            async for _ in results:
                count += 1
        return count


@final
class Results(AsyncIterator[R]):
    """The results of a running stage (what ``async with stage as results`` gives)."""

    def __init__(self, run: _Run[R]) -> None:
        self._run = run

    def __aiter__(self) -> Results[R]:
        return self

    async def __anext__(self) -> R:
        return (await self._run.next_pair())[1]

    def statistics(self) -> tuple[StageStatistics, ...]:
        """Each stage's statistics, from the first (reading the source) to this one."""
        return self._run.all_statistics()


class _Run(Generic[R]):
    """One run of a stage: its task group, its bookkeeping, its source."""

    def __init__(self, stage: Stage[R]) -> None:
        self.stage = stage
        self.stats = StageStatistics(stage.name)
        self.results: Results[R] = Results(self)
        self._upstream: _Run[Any] | None = None
        self._stack = contextlib.AsyncExitStack()
        self._tg: anyio.abc.TaskGroup | None = None
        self._feeder_scope = anyio.CancelScope()
        self._changed = anyio.Event()
        # Items are numbered in the order this stage pulls them (seq); `origin`
        # is the position in the first stage's source, which errors report.
        self._pulled = 0
        self._next = 0  # ordered: the seq to deliver next
        self._done: dict[int, tuple[int, Any]] = {}
        self._finished: deque[int] = deque()  # unordered: seqs in completion order
        self._charged: dict[int, int] = {}  # bytes each item holds
        self._workers: dict[int, anyio.CancelScope] = {}
        self._exhausted = False
        self._failure: tuple[int, PipelineError] | None = None
        self._bar: Any = None

    # -- opening and closing ---------------------------------------------------
    async def open(self) -> None:
        stage = self.stage
        try:
            if isinstance(stage.source, Stage):
                self._upstream = _Run(stage.source)
                await self._upstream.open()
                self._stack.push_async_callback(self._upstream.close)
            if stage.progress:
                self._bar = _require_tqdm()(
                    total=self._total(),
                    desc=stage.progress if isinstance(stage.progress, str) else stage.name,
                    unit="item",
                )
                self._stack.callback(self._bar.close)
            self._tg = await self._stack.enter_async_context(anyio.create_task_group())
            self._tg.start_soon(self._feed)
        except BaseException:
            await self._stack.aclose()
            raise

    async def close(self) -> None:
        """Stop every task of this run (and its upstream stages), close the source.

        The caller's own exception, if any, goes on unchanged: the task group is
        exited as if the block had ended normally (its tasks never raise), so the
        exception is not wrapped in an ExceptionGroup.
        """
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._stack.aclose()
        self._done.clear()  # results nobody will take

    def _total(self) -> int | None:
        source = self.stage.source
        if isinstance(source, Stage):
            assert self._upstream is not None
            return self._upstream._total()
        try:
            return len(source)  # type: ignore[arg-type]
        except TypeError:
            return None

    def all_statistics(self) -> tuple[StageStatistics, ...]:
        upstream = self._upstream.all_statistics() if self._upstream is not None else ()
        return (*upstream, self.stats)

    # -- signalling --------------------------------------------------------------
    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def _wait_until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await self._changed.wait()

    # -- the feeder: pulls items from the source while the bounds allow --------------
    async def _feed(self) -> None:
        stage = self.stage
        source = stage.source
        pull: Callable[[], Any]
        closer: Callable[[], Any] | None = None
        if self._upstream is not None:
            pull = self._upstream.next_pair
        elif isinstance(source, AsyncIterable):
            iterator = aiter(source)
            pull = self._pull_async(iterator)
            closer = getattr(iterator, "aclose", None)
        else:
            sync_iterator = iter(source)
            pull = self._pull_sync(sync_iterator)
            closer = getattr(sync_iterator, "close", None)
        try:
            with self._feeder_scope:
                await self._feed_from(pull)
        finally:
            self._exhausted = True
            self._notify()
            if closer is not None:
                # Closed by the task that iterated it, even when cancelled.
                with anyio.CancelScope(shield=True):
                    result = closer()
                    if inspect.isawaitable(result):
                        await result

    def _pull_async(self, iterator: AsyncIterator[Any]) -> Callable[[], Any]:
        async def pull() -> tuple[int, Any]:
            return self._pulled, await anext(iterator)

        return pull

    def _pull_sync(self, iterator: Iterator[Any]) -> Callable[[], Any]:
        async def pull() -> tuple[int, Any]:
            try:
                return self._pulled, next(iterator)
            except StopIteration:
                raise StopAsyncIteration from None

        return pull

    async def _feed_from(self, pull: Callable[[], Any]) -> None:
        stage, stats = self.stage, self.stats
        max_bytes = stage.max_bytes if stage.max_bytes is not None else math.inf
        assert self._tg is not None
        while True:
            await self._wait_until(lambda: stats.in_flight < stage.concurrency)
            seq = self._pulled
            try:
                origin, item = await pull()
            except StopAsyncIteration:
                return
            except PipelineError as error:  # an upstream stage failed: pass it on as is
                self._fail(seq, error)
                return
            except Exception as error:
                failure = PipelineError(
                    f"the source of stage {stage.name!r} failed after {seq} items: "
                    f"{type(error).__name__}: {error}",
                    stage=stage.name,
                )
                failure.__cause__ = error
                self._fail(seq, failure)
                return
            try:
                item_size = stage.size(item)
            except Exception as error:  # the user's size() failing is this item's failure
                self._fail(seq, _item_error(stage.name, origin, item, error))
                return
            self._pulled += 1
            stats.in_flight += 1
            stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
            while stats.bytes_in_flight > 0 and stats.bytes_in_flight + item_size > max_bytes:
                await self._changed.wait()
            self._charge(seq, item_size)
            scope = anyio.CancelScope()
            self._workers[seq] = scope
            self._tg.start_soon(self._work, seq, origin, item, scope)

    def _charge(self, seq: int, size: int) -> None:
        stats = self.stats
        stats.bytes_in_flight += size - self._charged.get(seq, 0)
        stats.max_bytes_in_flight = max(stats.max_bytes_in_flight, stats.bytes_in_flight)
        self._charged[seq] = size

    def _release(self, seq: int) -> None:
        self.stats.in_flight -= 1
        self.stats.bytes_in_flight -= self._charged.pop(seq)

    # -- a worker: one item through the function ---------------------------------------
    async def _work(self, seq: int, origin: int, item: Any, scope: anyio.CancelScope) -> None:
        stage, stats = self.stage, self.stats
        stored = False
        try:
            with scope:
                stats.started += 1
                stats.running += 1
                stats.max_running = max(stats.max_running, stats.running)
                start = time.perf_counter()
                try:
                    result = await self._call(item)
                    result_size = stage.size(result)
                except Exception as error:
                    self._fail(seq, _item_error(stage.name, origin, item, error))
                    return
                finally:
                    stats.running -= 1
                    stats.busy_s += time.perf_counter() - start
                self._charge(seq, result_size)
                self._done[seq] = (origin, result)
                if not stage.ordered:
                    self._finished.append(seq)
                stored = True
        finally:
            del self._workers[seq]
            if not stored:  # failed or cancelled: it will never be taken
                self._release(seq)
            self._notify()

    async def _call(self, item: Any) -> Any:
        fn = self.stage.fn
        result = await anyio.to_thread.run_sync(fn, item) if self.stage.thread else fn(item)
        return await resolve(result)

    def _fail(self, seq: int, error: PipelineError) -> None:
        if self._failure is not None and self._failure[0] <= seq:
            return  # an earlier item's failure is the one to report
        self._failure = (seq, error)
        self._feeder_scope.cancel()
        # Ordered: what comes before the failure still runs and is delivered, as
        # a sequential loop would have; unordered: nothing more is delivered.
        for other, scope in self._workers.items():
            if other > seq or not self.stage.ordered:
                scope.cancel()
        self._notify()

    # -- the consumer side ---------------------------------------------------------------
    async def next_pair(self) -> tuple[int, R]:
        """The next (origin, result); raises the failure when it is next in line."""
        while True:
            if self.stage.ordered:
                if self._next in self._done:
                    return self._deliver(self._next)
                if self._failure is not None and self._failure[0] <= self._next:
                    raise self._failure[1]
                if self._exhausted and self._next >= self._pulled and not self._workers:
                    raise StopAsyncIteration
            else:
                if self._failure is not None:
                    raise self._failure[1]
                if self._finished:
                    return self._deliver(self._finished[0])
                if self._exhausted and not self._workers:
                    raise StopAsyncIteration
            await self._changed.wait()

    def _deliver(self, seq: int) -> tuple[int, R]:
        pair = self._done.pop(seq)
        if self.stage.ordered:
            self._next += 1
        else:
            self._finished.popleft()
        self._release(seq)
        self.stats.delivered += 1
        if self._bar is not None:
            self._bar.update(1)
        self._notify()
        return pair


async def resolve(result: Any) -> Any:
    """Await ``result`` if it is an awaitable other than a tensor (a coroutine, an
    ``ert.function`` call), then wait until the tensors in it (it, or the items of
    a tuple, list or dict) are ready; raises a failed tensor's KernelError."""
    if inspect.isawaitable(result) and not isinstance(result, Tensor):
        result = await result
    for tensor in _tensors_in(result):
        await Available(tensor)
        if tensor.is_error():
            raise tensor.error
    return result


def _tensors_in(result: Any) -> list[Tensor]:
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, tuple | list):
        return [x for x in result if isinstance(x, Tensor)]
    if isinstance(result, dict):
        return [x for x in result.values() if isinstance(x, Tensor)]
    return []


def _item_error(stage: str, origin: int, item: Any, error: Exception) -> PipelineError:
    failure = PipelineError(
        f"stage {stage!r} failed on item {origin} ({_item_repr.repr(item)}): "
        f"{type(error).__name__}: {error}",
        stage=stage,
        index=origin,
        item=item,
    )
    failure.__cause__ = error
    return failure


def _require_tqdm() -> Any:
    try:
        from tqdm import tqdm
    except ImportError as error:
        raise UsageError(
            "progress=True needs tqdm, which is not installed: `pip install tqdm` "
            "(or leave progress off)"
        ) from error
    return tqdm
