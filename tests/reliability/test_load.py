"""Load: 10,000 coroutines on one loop, each running a small model (eager and compiled).

Backpressure is tested structurally, never by timing: the CPU workers are held on a
gate while the coroutines arrive, so every task that is offloaded stays queued. With
``config.max_queued_tasks`` the queue stops at the bound and later arrivals run their
work on the loop's thread (caller runs), finish at once and free what they held, so
the number of suspended coroutines, and the peak memory, are the same for 1,000 and
for 10,000 arrivals. Without the bound, both grow with the number of arrivals.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
import pytest

import eagerrt as ert
from eagerrt.lowlevel import WorkerPool

from .conftest import LONG

BOUND = 64
FEATURES = 64
rng = np.random.default_rng(11)
W1_DATA = rng.standard_normal((FEATURES, FEATURES)).astype(np.float32) * 0.1
W2_DATA = rng.standard_normal((FEATURES, 10)).astype(np.float32) * 0.1
W1 = ert.asarray(W1_DATA)
W2 = ert.asarray(W2_DATA)


def model(x: Any) -> Any:
    return ert.softmax(ert.relu(x @ W1) @ W2, axis=-1)


@ert.function
async def compiled_model(x: Any) -> Any:
    return model(x)


def request(i: int) -> np.ndarray:
    return np.full((16, FEATURES), float(i % 7) - 3.0, dtype=np.float32)


def reference(i: int) -> np.ndarray:
    h = np.maximum(request(i) @ W1_DATA, 0)
    z = h @ W2_DATA
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


EXPECTED = [reference(i) for i in range(7)]


def cpu_pool() -> WorkerPool:
    pool = ert.get_device("cpu").executor
    assert isinstance(pool, WorkerPool)
    return pool


@dataclass
class LoadRun:
    arrivals: int
    max_suspended: int
    peak_queued: int
    ran_by_caller: int
    peak_bytes: int


async def serve(arrivals: int, compiled: bool, gate: Callable[[], Any], eventually: Any) -> LoadRun:
    """``arrivals`` coroutines, one started per loop turn, while the workers are held."""
    pool = cpu_pool()
    held = gate()
    workers = [held() for _ in range(pool.size)]  # one gated op occupies each worker
    assert eventually(lambda: len(held.ran_on) == pool.size, timeout=30)
    pool.reset_peak()
    by_caller = pool.ran_by_caller()
    suspended = [0, 0]  # now, most at once
    started = [0]
    wrong: list[int] = []

    async def one(i: int) -> None:
        started[0] += 1
        x = ert.asarray(request(i))
        y = await compiled_model(x) if compiled else model(x)
        if not y.is_ready():
            suspended[0] += 1
            suspended[1] = max(suspended)
            await y
            suspended[0] -= 1
        if not np.allclose(y.numpy(), EXPECTED[i % 7], rtol=1e-4, atol=1e-6):
            wrong.append(i)

    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        async with anyio.create_task_group() as tg:
            for i in range(arrivals):
                tg.start_soon(one, i)
                await anyio.sleep(0)
            while started[0] < arrivals:  # trio may run a new task a turn later
                await anyio.sleep(0)
            peak = tracemalloc.get_traced_memory()[1] - base
            held.open()
    finally:
        tracemalloc.stop()
    for w in workers:
        await w
    assert not wrong, f"wrong results for requests {wrong[:10]}"
    return LoadRun(arrivals, suspended[1], pool.peak_queued, pool.ran_by_caller() - by_caller, peak)


@pytest.fixture
def warm_models() -> None:
    """Compile and run each path once, so first-call caches are not in the peaks."""
    with ert.config.override(inline_threshold_ns=0, graph_inline_threshold_ns=0):
        x = ert.asarray(request(0))
        model(x).numpy()
        anyio.run(compiled_model, x)


@pytest.mark.anyio
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
async def test_ten_thousand_coroutines_keep_queued_work_and_memory_bounded(
    compiled: bool, gate: Any, eventually: Any, warm_models: None, anyio_backend: Any
) -> None:
    # 10,000 on asyncio; the other loops run 3,000 unless LONG (the path
    # through the runtime is the same, the loop only carries the wake-ups).
    arrivals = 10_000 if LONG or anyio_backend == "asyncio" else 3_000
    # Every op (and every compiled call) is offloaded, so each arrival queues work.
    with ert.config.override(
        inline_threshold_ns=0, graph_inline_threshold_ns=0, max_queued_tasks=BOUND
    ):
        small = await serve(arrivals // 10, compiled, gate, eventually)
        large = await serve(arrivals, compiled, gate, eventually)
    for run in (small, large):
        assert run.peak_queued <= BOUND
        # Only arrivals whose work found room in the queue wait; the rest ran on
        # the loop's thread and finished at once.
        assert run.max_suspended <= BOUND
        assert run.ran_by_caller >= run.arrivals - BOUND
    # Ten times the arrivals, about the same memory (the unbounded control below
    # grows about tenfold with the same measure).
    assert large.peak_bytes < 1.5 * small.peak_bytes, (small, large)


def test_without_a_bound_the_same_load_grows_with_the_arrivals(
    gate: Any, eventually: Any, warm_models: None
) -> None:
    """The control: what ``max_queued_tasks`` prevents (so the test above can fail)."""
    with ert.config.override(
        inline_threshold_ns=0, graph_inline_threshold_ns=0, max_queued_tasks=10**9
    ):
        small = asyncio.run(serve(300, False, gate, eventually))
        large = asyncio.run(serve(3_000, False, gate, eventually))
    assert large.max_suspended == 3_000
    assert large.peak_queued >= 3_000
    assert large.ran_by_caller == 0
    assert large.peak_bytes > 5 * small.peak_bytes, (small, large)


def test_a_full_queue_makes_the_submitting_thread_run_the_task(gate: Any, eventually: Any) -> None:
    pool = WorkerPool(1, "bounded")
    try:
        held = gate()
        with ert.config.override(max_queued_tasks=3):
            release = held.event
            pool.submit(lambda: release.wait(30))  # the one worker is busy
            assert eventually(lambda: pool._queue.qsize() == 0)
            ran: list[tuple[int, str]] = []
            for k in range(5):
                pool.submit(lambda k=k: ran.append((k, threading.current_thread().name)))
            # Three queued behind the busy worker; the last two ran right here.
            here = threading.current_thread().name
            assert ran == [(3, here), (4, here)]
            assert pool.peak_queued == 3
            assert pool.ran_by_caller() == 2
            held.open()
            assert eventually(lambda: len(ran) == 5)
            assert sorted(k for k, _ in ran[2:]) == [0, 1, 2]
            assert all(name.startswith("eagerrt-bounded") for _, name in ran[2:])
    finally:
        pool.shutdown()
