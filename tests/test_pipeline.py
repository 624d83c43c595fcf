"""ert.pipeline: order, bounds, backpressure, failures and cancellation, on every loop."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import numpy as np
import pytest

import eagerrt as ert

pytestmark = pytest.mark.anyio


class Source:
    """An async source that records how far it was read and whether it was closed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pulled = 0
        self.closed = False

    async def items(self) -> AsyncIterator[int]:
        try:
            for i in range(self.n):
                self.pulled += 1
                yield i
        finally:
            self.closed = True


class Tracker:
    """Counts calls of a stage function running at once (and at most)."""

    def __init__(self) -> None:
        self.running = 0
        self.max_running = 0
        self.cancelled = 0

    def enter(self) -> None:
        self.running += 1
        self.max_running = max(self.max_running, self.running)

    def leave(self) -> None:
        self.running -= 1


def assert_no_tasks_left() -> None:
    """On asyncio, nothing but the test's own task may be left running."""
    try:
        current = asyncio.current_task()
    except RuntimeError:  # trio: its nurseries can't outlive their block by design
        return
    others = {
        t
        for t in asyncio.all_tasks()
        if t is not current and "TestRunner" not in t.get_coro().__qualname__  # anyio's runner
    }
    assert not others


# -- results and order -------------------------------------------------------------
async def test_results_come_in_source_order_whatever_finishes_first() -> None:
    async def slow_for_small(i: int) -> int:
        await anyio.sleep((10 - i) * 0.002)  # item 0 finishes last
        return i * i

    results = await ert.pipeline.map(slow_for_small, range(10), concurrency=10).collect()
    assert results == [i * i for i in range(10)]


async def test_unordered_yields_results_as_they_finish() -> None:
    gates = [anyio.Event() for _ in range(3)]

    async def wait_gate(i: int) -> int:
        await gates[i].wait()
        return i

    order = []
    async with ert.pipeline.map(wait_gate, range(3), concurrency=3, ordered=False) as results:
        for i in (2, 0, 1):
            gates[i].set()
            order.append(await results.__anext__())
        with pytest.raises(StopAsyncIteration):
            await results.__anext__()
    assert order == [2, 0, 1]


async def test_chained_stages_each_with_their_own_concurrency() -> None:
    trackers = [Tracker(), Tracker()]

    def stage(k: int, tracker: Tracker) -> Any:
        async def fn(x: int) -> int:
            tracker.enter()
            try:
                await anyio.sleep(0.001)
                return x * 10 + k
            finally:
                tracker.leave()

        return fn

    pipeline = ert.pipeline.map(stage(1, trackers[0]), range(12), concurrency=4).map(
        stage(2, trackers[1]), concurrency=2
    )
    async with pipeline as results:
        out = [r async for r in results]
        stats = results.statistics()
    assert out == [(i * 10 + 1) * 10 + 2 for i in range(12)]
    assert [s.max_running for s in stats] == [t.max_running for t in trackers]
    assert trackers[0].max_running <= 4 and trackers[1].max_running <= 2
    assert [s.delivered for s in stats] == [12, 12]
    assert all(s.busy_s > 0 for s in stats)


async def test_plain_functions_sync_sources_and_threads() -> None:
    main_thread = threading.current_thread()
    seen_threads = set()

    def where(x: int) -> int:
        seen_threads.add(threading.current_thread())
        return x + 1

    out = await ert.pipeline.map(where, [1, 2, 3], thread=True).map(str).collect()
    assert out == ["2", "3", "4"]
    assert main_thread not in seen_threads


# -- tensors inside stages ------------------------------------------------------------
async def test_stages_await_tensors_and_wait_for_returned_ones() -> None:
    async def load(i: int) -> ert.Tensor:
        x = ert.full((4,), float(i))
        data = await (x * 2)  # awaiting a result inside a stage is plain `await`
        return ert.asarray(data) + 1  # a pending tensor: the stage waits for it

    async with ert.pipeline.map(load, range(5)).map(ert.sum) as results:
        totals = [r async for r in results]
    assert all(isinstance(t, ert.Tensor) and t.is_ready() for t in totals)
    assert [float(t) for t in totals] == [4 * (2 * i + 1) for i in range(5)]


async def test_a_compiled_function_is_a_stage() -> None:
    weights = ert.asarray(np.eye(3, dtype="float32") * 3)

    @ert.function
    async def model(x: ert.Tensor) -> ert.Tensor:
        return ert.relu(x @ weights)

    batches = [np.full((2, 3), i, dtype="float32") for i in range(4)]
    out = await ert.pipeline.map(model, [ert.asarray(b) for b in batches]).collect()
    assert [o.numpy().tolist() for o in out] == [(b * 3).tolist() for b in batches]


# -- bounds and backpressure ---------------------------------------------------------
async def test_items_in_flight_never_exceed_concurrency_with_a_slow_consumer() -> None:
    source = Source(30)
    tracker = Tracker()

    async def work(i: int) -> int:
        tracker.enter()
        try:
            await anyio.sleep(0)
            return i
        finally:
            tracker.leave()

    consumed = 0
    async with ert.pipeline.map(work, source.items(), concurrency=3) as results:
        async for _ in results:
            consumed += 1
            assert source.pulled - consumed <= 3
            if consumed == 5:
                # The consumer stalls: the stage fills its 3 slots and stops reading.
                await anyio.wait_all_tasks_blocked()
                assert source.pulled == consumed + 3
        (stats,) = results.statistics()
    assert consumed == 30
    assert stats.max_in_flight == 3 and tracker.max_running <= 3
    assert stats.in_flight == 0 and stats.bytes_in_flight == 0


async def test_bytes_in_flight_are_bounded_by_max_bytes() -> None:
    tracker = Tracker()

    async def work(x: np.ndarray) -> np.ndarray:
        tracker.enter()
        try:
            await anyio.sleep(0.001)
            return x  # the result is as large as the input
        finally:
            tracker.leave()

    arrays = [np.zeros(25, "float32") for _ in range(12)]  # 100 bytes each
    async with ert.pipeline.map(work, arrays, concurrency=10, max_bytes=250) as results:
        out = [r async for r in results]
        (stats,) = results.statistics()
    assert len(out) == 12
    assert tracker.max_running == 2  # 3 x 100 bytes would pass the budget
    assert stats.max_bytes_in_flight == 200


async def test_an_item_larger_than_max_bytes_still_goes_through_alone() -> None:
    arrays = [np.zeros(10, "uint8"), np.zeros(1000, "uint8"), np.zeros(10, "uint8")]
    async with ert.pipeline.map(_identity, arrays, concurrency=3, max_bytes=100) as results:
        sizes = [r.size async for r in results]
        (stats,) = results.statistics()
    assert sizes == [10, 1000, 10]
    assert stats.max_bytes_in_flight == 1000


async def test_growing_results_count_against_the_byte_budget() -> None:
    async def read(path: str) -> bytes:  # a path holds no bytes, its content does
        await anyio.sleep(0)
        return b"x" * 100

    consumed = 0
    async with ert.pipeline.map(read, [f"f{i}" for i in range(10)], max_bytes=300) as results:
        async for _ in results:
            consumed += 1
            if consumed == 2:
                await anyio.wait_all_tasks_blocked()
                # Admitted while nothing was charged, then the contents arrived:
                # four results (400 bytes) wait, and nothing more is admitted.
                assert results.statistics()[0].bytes_in_flight == 400
    assert consumed == 10


async def _identity(x: Any) -> Any:
    await anyio.sleep(0)
    return x


def test_nbytes_sizes_tensors_arrays_bytes_and_containers() -> None:
    t = ert.zeros((3, 4), dtype="float64")
    assert ert.pipeline.nbytes(t) == 96
    assert ert.pipeline.nbytes({"a": np.zeros(2, "int8"), "b": [b"abcd", "text"]}) == 6
    assert ert.pipeline.nbytes(memoryview(b"12345")) == 5
    assert ert.pipeline.nbytes(object()) == 0


# -- failures -----------------------------------------------------------------------------
async def test_an_error_names_the_stage_and_item_and_chains_the_cause() -> None:
    source = Source(100)
    delivered = []

    async def parse(i: int) -> int:
        await anyio.sleep(0)
        if i == 3:
            raise ValueError("bad header")
        return i

    with pytest.raises(ert.PipelineError) as info:
        async with ert.pipeline.map(parse, source.items(), concurrency=4) as results:
            async for r in results:
                delivered.append(r)
    error = info.value
    assert delivered == [0, 1, 2]  # what a sequential loop gets before the failure
    assert (error.stage, error.index, error.item) == (
        "test_an_error_names_the_stage_and_item_and_chains_the_cause.<locals>.parse",
        3,
        3,
    )
    assert "failed on item 3 (3): ValueError: bad header" in str(error)
    assert isinstance(error.__cause__, ValueError)
    assert source.closed and source.pulled < 100
    assert_no_tasks_left()


async def test_the_lowest_failing_item_is_reported_and_later_items_are_cancelled() -> None:
    started = anyio.Event()
    tracker = Tracker()

    async def fail_some(i: int) -> int:
        tracker.enter()
        try:
            if i == 0:
                await started.wait()  # fails only after item 2 has failed
                raise KeyError("zero")
            if i == 2:
                started.set()
                raise KeyError("two")
            await anyio.sleep_forever()  # item 1 and 3: cancelled, never finish
            raise AssertionError("unreachable")
        finally:
            tracker.leave()

    with pytest.raises(ert.PipelineError, match="item 0") as info:
        await ert.pipeline.map(fail_some, range(4), concurrency=4, name="fail_some").collect()
    assert info.value.index == 0 and info.value.stage == "fail_some"
    assert tracker.running == 0


async def test_an_upstream_failure_reaches_the_consumer_naming_the_original_item() -> None:
    async def check(path: str) -> str:
        await anyio.sleep(0)
        if path == "c.bin":
            raise OSError("unreadable")
        return path.upper()

    pipeline = ert.pipeline.map(check, ["a.bin", "b.bin", "c.bin", "d.bin"], name="read").map(
        str.lower, name="lower"
    )
    got = []
    with pytest.raises(ert.PipelineError) as info:
        async with pipeline as results:
            async for r in results:
                got.append(r)
    assert got == ["a.bin", "b.bin"]
    assert info.value.stage == "read" and info.value.index == 2
    assert "'c.bin'" in str(info.value) and isinstance(info.value.__cause__, OSError)


async def test_a_later_stage_reports_the_index_in_the_first_source() -> None:
    def odd_only(x: int) -> int:
        if x % 2 == 0:
            raise ValueError(f"{x} is even")
        return x

    pipeline = ert.pipeline.map(_identity, [1, 3, 5, 6, 7], ordered=False).map(odd_only)
    with pytest.raises(ert.PipelineError, match="failed on item 3 ") as info:
        await pipeline.collect()
    assert info.value.index == 3 and info.value.item == 6


async def test_a_failed_tensor_is_the_items_failure() -> None:
    def gather(i: int) -> ert.Tensor:
        return ert.take(ert.arange(3), ert.asarray([i]))  # fails at run time for i >= 3

    with pytest.raises(ert.PipelineError, match="item 3") as info:
        await ert.pipeline.map(gather, range(5), concurrency=1).collect()
    assert isinstance(info.value.__cause__, ert.KernelError)


@pytest.mark.parametrize("measured", ["item", "result"])
async def test_a_failing_size_is_that_items_failure(measured: str) -> None:
    # size() is the user's code too: failing on an item (or on its result) it
    # fails that item like fn would, not the whole run with an ExceptionGroup.
    def size(x: int) -> int:
        if x == (3 if measured == "item" else 30):
            raise TypeError(f"can't size {x}")
        return 1

    got = []
    with pytest.raises(ert.PipelineError, match="failed on item 3 ") as info:
        async with ert.pipeline.map(
            lambda i: i * 10, range(6), size=size, max_bytes=100, concurrency=1, name="tens"
        ) as results:
            async for r in results:
                got.append(r)
    assert got == [0, 10, 20]
    assert (info.value.stage, info.value.index, info.value.item) == ("tens", 3, 3)
    assert isinstance(info.value.__cause__, TypeError)
    assert_no_tasks_left()


async def test_a_failing_source_is_reported_after_the_items_it_gave() -> None:
    async def broken() -> AsyncIterator[int]:
        yield 0
        yield 1
        raise ConnectionError("lost")

    got = []
    with pytest.raises(ert.PipelineError, match="source of stage 'str' failed after 2 items"):
        async with ert.pipeline.map(str, broken()) as results:
            async for r in results:
                got.append(r)
    assert got == ["0", "1"]


# -- stopping early and cancellation ---------------------------------------------------
async def test_cancelling_the_consumer_stops_every_task_and_closes_the_source() -> None:
    source = Source(1000)
    tracker = Tracker()
    first = anyio.Event()

    async def stuck(i: int) -> int:
        tracker.enter()
        try:
            if i > 0:
                await anyio.sleep_forever()
            return i
        finally:
            tracker.leave()

    got = []
    with anyio.CancelScope() as scope:
        async with ert.pipeline.map(stuck, source.items(), concurrency=5) as results:
            async for r in results:
                got.append(r)
                first.set()
                await anyio.wait_all_tasks_blocked()
                scope.cancel()  # cancelled while items 1..5 run and the consumer waits
    assert scope.cancelled_caught
    assert got == [0] and tracker.max_running >= 4
    assert tracker.running == 0 and source.closed and source.pulled == 6
    assert_no_tasks_left()


@pytest.mark.parametrize(
    "anyio_backend", ["asyncio", ("asyncio", {"use_uvloop": True})], ids=["asyncio", "uvloop"]
)
async def test_asyncio_task_cancel_mid_stream_leaves_nothing_running() -> None:
    source = Source(1000)
    tracker = Tracker()
    reached = asyncio.Event()

    async def slow(i: int) -> int:
        tracker.enter()
        try:
            await asyncio.sleep(3600)
            return i
        finally:
            tracker.leave()

    async def consume() -> None:
        async with ert.pipeline.map(slow, source.items(), concurrency=3) as results:
            reached.set()
            async for _ in results:
                pass

    task = asyncio.create_task(consume())
    await reached.wait()
    await anyio.wait_all_tasks_blocked()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tracker.max_running == 3 and tracker.running == 0 and source.closed
    assert_no_tasks_left()


async def test_leaving_the_block_early_cancels_the_rest_and_closes_sync_sources() -> None:
    closed = []

    def numbers() -> Iterator[int]:
        try:
            yield from range(1000)
        finally:
            closed.append(True)

    tracker = Tracker()

    async def work(i: int) -> int:
        tracker.enter()
        try:
            await anyio.sleep(0 if i < 2 else 3600)
            return i
        finally:
            tracker.leave()

    async with ert.pipeline.map(work, numbers(), concurrency=4).map(str) as results:
        got = [await results.__anext__(), await results.__anext__()]
    assert got == ["0", "1"] and closed == [True] and tracker.running == 0
    assert_no_tasks_left()


async def test_an_error_in_the_consumers_body_propagates_unwrapped() -> None:
    with pytest.raises(ZeroDivisionError):
        async with ert.pipeline.map(_identity, range(10)) as results:
            async for r in results:
                1 / (r - 1)
    assert_no_tasks_left()


# -- usage errors ---------------------------------------------------------------------------
def test_bad_arguments_raise_at_the_call() -> None:
    with pytest.raises(ert.ArgumentError, match="concurrency"):
        ert.pipeline.map(str, [1], concurrency=0)
    with pytest.raises(ert.ArgumentError, match="max_bytes"):
        ert.pipeline.map(str, [1], max_bytes=0)
    with pytest.raises(ert.ArgumentError, match="iterable"):
        ert.pipeline.map(str, 42)  # type: ignore[arg-type]
    with pytest.raises(ert.ArgumentError, match="needs a function"):
        ert.pipeline.map("str", [1])  # type: ignore[arg-type]
    with pytest.raises(ert.ArgumentError, match="thread=True"):
        ert.pipeline.map(_identity, [1], thread=True)


async def test_iterating_a_stage_outside_its_block_says_how() -> None:
    stage = ert.pipeline.map(str, [1])
    with pytest.raises(ert.UsageError, match="async with stage as results"):
        async for _ in stage:  # type: ignore[attr-defined]
            pass
    async with stage:
        with pytest.raises(ert.UsageError, match="already running"):
            await stage.collect()


async def test_progress_bar_counts_delivered_items(capsys: pytest.CaptureFixture[str]) -> None:
    out = await ert.pipeline.map(str, range(7), progress="converting").collect()
    assert out == [str(i) for i in range(7)]
    err = capsys.readouterr().err
    assert "converting" in err and "7/7" in err


def test_progress_without_tqdm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # what an absent package looks like
    with pytest.raises(ert.UsageError, match="pip install tqdm"):
        ert.pipeline.map(str, [1], progress=True)


# -- the example ------------------------------------------------------------------------
def test_pipeline_example_overlaps_and_matches_the_sequential_run() -> None:
    import pathlib
    import subprocess

    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "pipeline.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=110, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "sequential run:" in out and "pipelined run:" in out and "overlap" in out
    assert "files written: 48, results identical to the sequential run: True" in out
