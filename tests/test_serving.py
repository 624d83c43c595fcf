"""ert.serving.MicroBatcher: concurrent callers share model calls, on every loop.

Which callers share a batch is made deterministic without timing: callers are
queued one at a time (``wait_all_tasks_blocked`` after each start) and batches are
closed by size, or by ``max_wait=math.inf`` plus the batcher's flush on exit.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import numpy as np
import pytest

import eagerrt as ert
from eagerrt.serving import MicroBatcher

pytestmark = pytest.mark.anyio


class Model:
    """Doubles its batch, records each batch's size; fails on a negative input."""

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []
        self.running = 0
        self.max_running = 0
        self.release: anyio.Event | None = None

    async def __call__(self, x: ert.Tensor) -> ert.Tensor:
        self.batch_sizes.append(x.shape[0])
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if self.release is not None:
                await self.release.wait()
            if (await x).min() < 0:
                raise ValueError("negative input")
            return x * 2
        finally:
            self.running -= 1


class Callers:
    """Starts callers one at a time (so their queue order is known) and keeps results."""

    def __init__(self, tg: anyio.abc.TaskGroup, batcher: MicroBatcher) -> None:
        self.tg = tg
        self.batcher = batcher
        self.results: dict[int, Any] = {}
        self.errors: dict[int, BaseException] = {}
        self.scopes: dict[int, anyio.CancelScope] = {}

    async def start(self, key: int, *example: Any) -> None:
        async def call() -> None:
            with anyio.CancelScope() as scope:
                self.scopes[key] = scope
                try:
                    self.results[key] = await self.batcher(*example)
                except ert.EagerError as error:
                    self.errors[key] = error

        self.tg.start_soon(call)
        await anyio.wait_all_tasks_blocked()  # queued (or served) before the next one


def row(value: float, n: int = 3) -> np.ndarray:
    return np.full(n, value, dtype="float32")


async def test_concurrent_callers_share_batches_and_get_their_own_rows() -> None:
    model = Model()
    async with (
        MicroBatcher(model, max_batch_size=4, max_wait=math.inf, buckets=None) as batcher,
        anyio.create_task_group() as tg,
    ):
        callers = Callers(tg, batcher)
        for i in range(8):
            await callers.start(i, row(i))
    assert model.batch_sizes == [4, 4]
    assert batcher.statistics().batch_sizes == {4: 2}
    assert batcher.statistics().requests == 8
    for i in range(8):
        result = callers.results[i]
        assert isinstance(result, ert.Tensor) and result.is_ready()
        assert result.numpy().tolist() == [2.0 * i] * 3


async def test_a_partial_batch_waits_for_max_wait_not_for_more_callers() -> None:
    model = Model()
    async with MicroBatcher(model, max_batch_size=8, max_wait=0.01) as batcher:
        result = await batcher(row(1))  # alone: served once max_wait has passed
    assert result.numpy().tolist() == [2.0, 2.0, 2.0]
    assert batcher.statistics().batch_sizes == {1: 1}


async def test_without_a_wait_limit_a_partial_batch_waits_until_the_batcher_closes() -> None:
    model = Model()
    async with (
        anyio.create_task_group() as tg,
        MicroBatcher(model, max_batch_size=8, max_wait=math.inf) as batcher,
    ):
        callers = Callers(tg, batcher)
        await callers.start(0, row(1))
        await callers.start(1, row(2))
        assert model.batch_sizes == [] and batcher.statistics().queued == 2
    # Leaving the block served what was queued.
    assert sorted(callers.results) == [0, 1] and model.batch_sizes == [2]


async def test_padding_to_a_bucket_reuses_a_compiled_models_trace() -> None:
    weights = ert.asarray(np.eye(3, dtype="float32") * 3)

    @ert.function
    def compiled(x: ert.Tensor) -> ert.Tensor:
        return ert.relu(x @ weights)

    for size in (4, 3):  # a full batch, then a partial one padded to the same bucket
        async with (
            anyio.create_task_group() as tg,
            MicroBatcher(compiled, max_batch_size=4, max_wait=math.inf) as batcher,
        ):
            callers = Callers(tg, batcher)
            for i in range(size):
                await callers.start(i, row(i))
        assert batcher.statistics().batch_sizes == {size: 1}
        assert batcher.statistics().padded_rows == 4 - size
        assert [callers.results[i].numpy().tolist() for i in range(size)] == [
            [3.0 * i] * 3 for i in range(size)
        ]
    assert compiled.traces == 1


async def test_padding_counts_and_explicit_buckets() -> None:
    model = Model()
    async with (
        anyio.create_task_group() as tg,
        MicroBatcher(model, max_batch_size=6, max_wait=math.inf, buckets=[2, 6]) as batcher,
    ):
        callers = Callers(tg, batcher)
        for i in range(3):
            await callers.start(i, row(i))
    assert model.batch_sizes == [6]  # 3 callers padded to the bucket of 6
    assert batcher.statistics().padded_rows == 3
    assert [callers.results[i].numpy()[0] for i in range(3)] == [0.0, 2.0, 4.0]


async def test_a_model_failure_reaches_exactly_the_callers_of_that_batch() -> None:
    model = Model()
    async with (
        anyio.create_task_group() as tg,
        MicroBatcher(model, max_batch_size=2, max_wait=math.inf) as batcher,
    ):
        callers = Callers(tg, batcher)
        await callers.start(0, row(1))
        await callers.start(1, row(-1))  # poisons the batch {0, 1}
        await callers.start(2, row(2))
        await callers.start(3, row(3))
    assert sorted(callers.errors) == [0, 1] and sorted(callers.results) == [2, 3]
    error = callers.errors[0]
    assert isinstance(error, ert.BatchError) and "batch of 2 requests" in str(error)
    assert isinstance(error.__cause__, ValueError)
    assert callers.errors[0] is not callers.errors[1]  # each caller its own exception
    assert callers.results[3].numpy().tolist() == [6.0] * 3


async def test_a_failed_tensor_fails_its_batch() -> None:
    def gather(x: ert.Tensor) -> ert.Tensor:
        return ert.take(x, ert.asarray([0, 99]), axis=1)  # out of range at run time

    async with MicroBatcher(gather, max_batch_size=1) as batcher:
        with pytest.raises(ert.BatchError) as info:
            await batcher(row(1))
    assert isinstance(info.value.__cause__, ert.KernelError)


async def test_a_failed_example_fails_only_its_caller() -> None:
    # A caller's own input failing is that caller's error, not a model failure
    # of a batch shared with callers whose examples were fine.
    model = Model()
    failed = ert.take(ert.asarray(row(1.0)), ert.asarray([0, 1, 99]))  # out of range
    batcher = MicroBatcher(model, max_batch_size=4, max_wait=0.2)
    async with batcher, anyio.create_task_group() as tg:
        callers = Callers(tg, batcher)
        await callers.start(0, row(1.0))
        await callers.start(1, failed)
        await callers.start(2, row(2.0))
    assert sorted(callers.results) == [0, 2] and list(callers.errors) == [1]
    assert callers.results[2].numpy().tolist() == [4.0] * 3
    assert isinstance(callers.errors[1], ert.KernelError)
    assert model.batch_sizes == [2]


async def test_examples_of_different_shapes_are_batched_apart() -> None:
    model = Model()
    async with (
        anyio.create_task_group() as tg,
        MicroBatcher(model, max_batch_size=4, max_wait=math.inf, buckets=None) as batcher,
    ):
        callers = Callers(tg, batcher)
        await callers.start(0, row(1, n=3))
        await callers.start(1, row(2, n=5))
        await callers.start(2, row(3, n=3))
    assert sorted(model.batch_sizes) == [1, 2]
    assert callers.results[1].numpy().tolist() == [4.0] * 5
    assert callers.results[2].numpy().tolist() == [6.0] * 3


async def test_a_caller_cancelled_while_queued_is_left_out_of_the_batch() -> None:
    model = Model()
    async with (
        anyio.create_task_group() as tg,
        MicroBatcher(model, max_batch_size=3, max_wait=math.inf, buckets=None) as batcher,
    ):
        callers = Callers(tg, batcher)
        await callers.start(0, row(0))
        await callers.start(1, row(1))
        callers.scopes[1].cancel()
        await callers.start(2, row(2))
        await callers.start(3, row(3))
    assert model.batch_sizes == [3]
    assert sorted(callers.results) == [0, 2, 3] and not callers.errors


async def test_a_caller_cancelled_while_its_batch_runs_does_not_break_it() -> None:
    model = Model()
    model.release = anyio.Event()
    async with (
        anyio.create_task_group() as tg,
        MicroBatcher(model, max_batch_size=3, max_wait=math.inf) as batcher,
    ):
        callers = Callers(tg, batcher)
        for i in range(3):
            await callers.start(i, row(i))
        assert model.running == 1  # the batch is in the model
        callers.scopes[1].cancel()
        await anyio.wait_all_tasks_blocked()
        model.release.set()
        await anyio.wait_all_tasks_blocked()
        assert sorted(callers.results) == [0, 2]
        for i in range(3, 6):  # the batcher goes on serving
            await callers.start(i, row(i))
    assert sorted(callers.results) == [0, 2, 3, 4, 5] and not callers.errors
    assert callers.results[5].numpy().tolist() == [10.0] * 3


async def test_max_concurrent_batches_lets_batches_overlap() -> None:
    model = Model()
    model.release = anyio.Event()
    async with (
        anyio.create_task_group() as tg,
        MicroBatcher(model, max_batch_size=2, max_wait=math.inf, max_concurrent_batches=2) as b,
    ):
        callers = Callers(tg, b)
        for i in range(6):
            await callers.start(i, row(i))
        assert model.running == 2 and b.statistics().queued == 2  # the third batch waits
        model.release.set()
    assert model.max_running == 2 and len(callers.results) == 6


async def test_structured_outputs_are_sliced_per_caller() -> None:
    def model(x: ert.Tensor, y: ert.Tensor) -> dict[str, Any]:
        return {"sum": x + y, "pair": (x * 0, np.asarray(y.numpy()))}

    async with MicroBatcher(model, max_batch_size=1) as batcher:
        out = await batcher(row(1), row(2))
    assert out["sum"].numpy().tolist() == [3.0] * 3
    assert out["pair"][0].numpy().tolist() == [0.0] * 3
    assert out["pair"][1].tolist() == [2.0] * 3


async def test_an_output_without_a_batch_axis_is_a_batch_error() -> None:
    async with MicroBatcher(ert.sum, max_batch_size=1) as batcher:
        with pytest.raises(ert.BatchError, match="first axis") as info:
            await batcher(row(1))
    assert isinstance(info.value.__cause__, ert.ArgumentError)


async def test_closing_with_an_error_fails_the_waiting_callers() -> None:
    model = Model()
    model.release = anyio.Event()
    async with anyio.create_task_group() as tg:
        with pytest.raises(RuntimeError, match="server stops"):
            async with MicroBatcher(model, max_batch_size=1, max_wait=math.inf) as batcher:
                callers = Callers(tg, batcher)
                await callers.start(0, row(0))  # in the model
                await callers.start(1, row(1))  # queued
                raise RuntimeError("server stops")
    assert sorted(callers.errors) == [0, 1] and not callers.results
    assert "closed while this batch ran" in str(callers.errors[0])
    assert "closed before this request ran" in str(callers.errors[1])


async def test_calls_outside_the_block_and_bad_arguments_are_usage_errors() -> None:
    batcher = MicroBatcher(Model())
    with pytest.raises(ert.UsageError, match="async with MicroBatcher"):
        await batcher(row(1))
    async with batcher:
        with pytest.raises(ert.ArgumentError, match="needs the example"):
            await batcher()
    with pytest.raises(ert.UsageError, match="closed"):
        await batcher(row(1))
    with pytest.raises(ert.UsageError, match="entered once"):
        async with batcher:
            pass


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"max_wait": -1}, "max_wait"),
        ({"buckets": [2, 4], "max_batch_size": 8}, "largest bucket"),
        ({"buckets": "powers"}, "buckets"),
        ({"max_concurrent_batches": 0}, "max_concurrent_batches"),
    ],
)
def test_bad_settings_raise_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ert.ArgumentError, match=message):
        MicroBatcher(Model(), **kwargs)


def test_default_buckets_are_powers_of_two_and_the_maximum() -> None:
    assert ert.serving.pow2_buckets(1) == (1,)
    assert ert.serving.pow2_buckets(32) == (1, 2, 4, 8, 16, 32)
    assert ert.serving.pow2_buckets(12) == (1, 2, 4, 8, 12)


# -- the example ------------------------------------------------------------------------
def test_serve_example_answers_the_same_with_and_without_batching() -> None:
    import pathlib
    import subprocess
    import sys

    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "serve.py"
    done = subprocess.run(
        [sys.executable, str(example), "--requests", "400", "--clients", "16"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "batching off" in out and "batching on" in out and "p99 ms" in out
    assert "errors: 0; same answers with and without batching: True" in out


def test_serve_load_measures_a_running_server() -> None:
    import pathlib
    import subprocess
    import sys
    import threading

    examples = pathlib.Path(__file__).resolve().parents[1] / "examples"
    sys.path.insert(0, str(examples))
    try:
        import serve  # the example's server, run here on a thread
    finally:
        sys.path.remove(str(examples))
    started = threading.Event()
    running: list[Any] = []  # the server's loop, its stop event, its port

    async def run_server() -> None:
        import asyncio

        server = await asyncio.start_server(
            lambda r, w: serve.handle(serve.unbatched(), r, w), host="127.0.0.1", port=0
        )
        stop = asyncio.Event()
        running.extend([asyncio.get_running_loop(), stop, server.sockets[0].getsockname()[1]])
        started.set()
        async with server:
            await stop.wait()

    thread = threading.Thread(target=lambda: __import__("asyncio").run(run_server()), daemon=True)
    thread.start()
    assert started.wait(30)
    loop, stop, port = running
    command = [sys.executable, str(examples / "serve_load.py"), "--port", str(port)]
    try:
        done = subprocess.run(
            [*command, "--requests", "60", "--clients", "4"],
            capture_output=True,
            text=True,
            timeout=110,
            check=False,
        )
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
    assert done.returncode == 0, done.stderr
    assert "requests/s" in done.stdout and "0 errors" in done.stdout


def test_the_fastapi_example_serves_the_same_answers_each_way() -> None:
    # A real uvicorn server per way, on 127.0.0.1, each loaded from another process.
    import json
    import pathlib
    import subprocess
    import sys

    pytest.importorskip("fastapi", reason="fastapi and uvicorn are in the test extra")
    pytest.importorskip("uvicorn", reason="fastapi and uvicorn are in the test extra")
    examples = pathlib.Path(__file__).resolve().parents[1] / "examples"
    assert (examples / "serve_fastapi.py").exists()  # imported: its servers run as children
    sys.path.insert(0, str(examples))
    try:
        import serve_fastapi
    finally:
        sys.path.remove(str(examples))
    labels = {}
    for mode in ("numpy", "compiled", "batched"):  # (and "none", the benchmark's ceiling)
        with serve_fastapi.server_process(mode) as port:
            command = [sys.executable, str(examples / "serve_load.py"), "--port", str(port)]
            done = subprocess.run(
                [*command, "--requests", "120", "--clients", "8", "--json"],
                capture_output=True,
                text=True,
                timeout=110,
                check=True,
            )
        figures = json.loads(done.stdout)
        assert figures["errors"] == 0 and figures["requests_per_s"] > 0, mode
        labels[mode] = figures["labels"]
    assert len(labels["numpy"]) == 120
    assert labels["numpy"] == labels["compiled"] == labels["batched"]


@pytest.mark.parametrize("offload", [True, False])
async def test_a_plain_model_runs_off_the_event_loop_unless_asked_not_to(offload: bool) -> None:
    import threading

    threads: list[int] = []

    def plain(x: ert.Tensor) -> ert.Tensor:
        threads.append(threading.get_ident())
        return x * 2

    async def asynchronous(x: ert.Tensor) -> ert.Tensor:
        threads.append(threading.get_ident())
        return x * 2

    loop_thread = threading.get_ident()
    for model in (plain, asynchronous):
        async with MicroBatcher(model, max_batch_size=2, offload=offload) as batcher:
            got = await batcher(row(1.0))
        assert got.numpy().tolist() == [2.0] * 3
    plain_thread, async_thread = threads
    assert (plain_thread != loop_thread) is offload  # a batch's inline kernels leave the loop
    assert async_thread == loop_thread  # an async def model is awaited where it is
