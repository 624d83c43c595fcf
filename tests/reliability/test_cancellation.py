"""Cancellation storms: thousands of tasks cancelled at random points while their
ops are in flight (pending tensors on worker threads, parked chains, compiled
``ert.function`` calls), on asyncio, uvloop and trio (through anyio).

Cancelling a task only stops it waiting: the bridge removes its waiter from the
value (nothing is left registered on a long-running AsyncValue), the work goes on
and its result stays right, and afterwards everything still works. Every storm
runs under a deadline (a hang fails the test) and inside the leak checks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest

import eagerrt as ert
from eagerrt.lowlevel import AsyncValue

from .conftest import scale
from .leaks import no_leaks

#: A storm that takes longer than this has hung.
DEADLINE_S = 90

SLOW_IDENTITY = ert.define_op(
    "test_cancellation_offloaded",
    rule=lambda x, seconds=0.0: (x.shape, x.dtype),
    cost=lambda *args, **static: 1e15,  # always on a worker thread
    doc="Identity on a worker thread (tests only).",
)


@SLOW_IDENTITY.kernel()
def _slow_identity(x: np.ndarray, *, seconds: float = 0.0) -> np.ndarray:
    if seconds:  # work that is still running when the cancellation lands
        time.sleep(seconds)
    return x.copy()


W = ert.asarray(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))


def eager_model(x: Any) -> Any:
    return ert.tanh(x @ W) * 2 + 1


@ert.function
async def compiled_model(x: Any) -> Any:
    return eager_model(x)


def expected_model(x: np.ndarray) -> np.ndarray:
    return np.tanh(x @ W.numpy()) * 2 + 1


KINDS = ("worker", "chain", "compiled")


async def in_flight(kind: str, source: ert.Tensor) -> ert.Tensor:
    """A tensor still being computed from ``source``, by one of the slow paths."""
    if kind == "worker":  # an op of its own queued on a worker thread
        return SLOW_IDENTITY(source) + 0.5
    if kind == "chain":  # cheap ops parked on a pending input
        y = source
        for _ in range(5):
            y = y * 0.5 + 1
        return y
    result: ert.Tensor = await compiled_model(source)  # a compiled call, parked
    return result


def expected(kind: str, source: np.ndarray) -> np.ndarray:
    if kind == "worker":
        return source + 0.5
    if kind == "chain":
        y = source
        for _ in range(5):
            y = y * 0.5 + 1
        return y
    return expected_model(source)


def bridge_waiters(value: AsyncValue) -> int:
    """Continuations the event-loop bridge registered on ``value`` (awaiting tasks)."""
    return sum(
        1
        for callback in list(value._waiters or ())
        if getattr(callback, "__qualname__", "").startswith(("_wait_asyncio", "_wait_trio"))
    )


def table_slack(tasks: int) -> int:
    """Memory a storm may leave behind: tables keep the capacity of their
    high-water mark (the scheduler's dict of outstanding results, anyio's task
    maps), under 600 bytes per task; leaked values are counted apart."""
    return 256 * 1024 + 600 * tasks


@pytest.fixture
def warm() -> None:
    """Compile once outside the leak checks (a compiled function keeps its traces)."""
    x = ert.asarray(np.ones((2, 3), np.float32))
    np.testing.assert_allclose(
        anyio.run(compiled_model, x).numpy(), expected_model(x.numpy()), rtol=1e-6
    )
    SLOW_IDENTITY(x).numpy()


async def held_storm(tasks: int, gate: Callable[[], Any], seed: int) -> None:
    rng = random.Random(seed)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    held = gate()
    source = held(data)  # pending on a worker until the gate opens
    scopes = [anyio.CancelScope() for _ in range(tasks)]
    tensors: dict[int, ert.Tensor] = {}
    results: dict[int, np.ndarray] = {}

    async def waiter(i: int) -> None:
        with scopes[i]:
            y = await in_flight(KINDS[i % 3], source)
            tensors[i] = y
            results[i] = await y

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            for i in range(tasks):
                tg.start_soon(waiter, i)
                if rng.random() < 0.1:
                    await anyio.sleep(0)
            # Cancel at random turns: some before they start, most mid-await.
            doomed = rng.sample(range(tasks), tasks // 2)
            for start in range(0, len(doomed), 97):
                for i in doomed[start : start + 97]:
                    scopes[i].cancel()
                await anyio.sleep(0)
            for _ in range(10):  # let every task reach its await or unwind
                await anyio.sleep(0)
            assert not source.is_ready()
            cancelled = set(doomed)
            for i, y in tensors.items():
                # Only the tasks still waiting are registered on the values.
                assert bridge_waiters(y) == (0 if i in cancelled else 1), i
            assert len(tensors) >= tasks - len(cancelled)
            held.open()
    assert set(results) == set(range(tasks)) - cancelled
    for i, y in tensors.items():  # the cancelled tasks' work went on and is right too
        want = expected(KINDS[i % 3], data)
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
        if i in results:
            np.testing.assert_allclose(results[i], want, rtol=1e-5, atol=1e-6)


@pytest.mark.anyio
async def test_a_storm_on_held_work_leaves_no_waiter_behind(
    gate: Callable[[], Any], warm: None
) -> None:
    """Everything waits on a gated tensor while a random half of the tasks is
    cancelled at random turns: exactly the surviving awaiters stay registered,
    and once the gate opens every result (cancelled or not) is right."""
    tasks = scale(3_000, 20_000)
    # A small storm first: the loop's own first-use state (anyio's lazy imports,
    # trio's thread cache) belongs to the loop, not to the storm.
    await held_storm(30, gate, seed=0)
    with no_leaks(memory_slack=table_slack(tasks)):
        await held_storm(tasks, gate, seed=7)


async def timeout_storm(tasks: int, seed: int, rounds: int = 3) -> tuple[int, int]:
    """``tasks`` tasks loop over work under random timeouts; (cancelled while
    their work was in flight, completed) counts."""
    rng = random.Random(seed)
    cancelled_in_flight = 0
    completed = 0

    async def worker(i: int) -> None:
        nonlocal cancelled_in_flight, completed
        data = np.full((2, 3), float(i % 5), np.float32)
        for r in range(rounds):
            kind = KINDS[(i + r) % 3]
            with anyio.move_on_after(rng.choice([0.0, 0.0005, 0.002, 1.0])) as scope:
                # A millisecond on a worker first: the cancellation lands mid-work.
                source = SLOW_IDENTITY(ert.asarray(data), seconds=0.001)
                y = await in_flight(kind, source)
                try:
                    got = await y
                except anyio.get_cancelled_exc_class():
                    cancelled_in_flight += not y.is_ready()
                    raise
            if scope.cancelled_caught:
                continue
            np.testing.assert_allclose(got, expected(kind, data), rtol=1e-5, atol=1e-6)
            completed += 1

    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            for i in range(tasks):
                tg.start_soon(worker, i)
    return cancelled_in_flight, completed


@pytest.mark.anyio
async def test_a_storm_of_random_timeouts_while_work_runs(warm: None) -> None:
    """Tasks loop over offloaded work under random timeouts (0 to 2 ms): many are
    cancelled while their op runs on a worker. Afterwards nothing hangs, nothing
    is pending, what completed is right, and the runtime keeps working."""
    tasks = scale(1_000, 10_000)
    # Every op offloaded: the storm hits work running on the workers.
    with ert.config.override(inline_threshold_ns=0):
        await timeout_storm(30, seed=0)  # the loop's first-use state, as above
        with no_leaks(memory_slack=table_slack(tasks)):
            cancelled_in_flight, completed = await timeout_storm(tasks, seed=11)
            assert cancelled_in_flight > 0  # the storm hit work in flight
            assert completed > 0
            ert.synchronize(timeout=30)
            assert ert.stats().pending_values == 0
            # Everything still works afterwards, on every path.
            await works_on_every_path()


async def works_on_every_path() -> None:
    x = np.ones((2, 3), np.float32)
    for kind in KINDS:
        got = await (await in_flight(kind, SLOW_IDENTITY(ert.asarray(x))))
        np.testing.assert_allclose(got, expected(kind, x), rtol=1e-5, atol=1e-6)


async def group_storm(tasks: int, gate: Callable[[], Any]) -> None:
    data = np.full((2, 3), 2.0, np.float32)
    held = gate()
    source = held(data)
    tensors = [await in_flight(KINDS[i % 3], source) for i in range(tasks)]
    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            for y in tensors:
                tg.start_soon(_await, y)
            while sum(map(bridge_waiters, tensors)) < tasks:  # every task waits
                await anyio.sleep(0)
            tg.cancel_scope.cancel()
    assert sum(map(bridge_waiters, tensors)) == 0
    got: list[np.ndarray] = []
    with anyio.fail_after(DEADLINE_S):
        async with anyio.create_task_group() as tg:
            for y in tensors:
                tg.start_soon(_collect, y, got)
            await anyio.sleep(0)
            held.open()
    assert len(got) == tasks
    for i, value in enumerate(tensors):
        np.testing.assert_allclose(
            value.numpy(), expected(KINDS[i % 3], data), rtol=1e-5, atol=1e-6
        )


@pytest.mark.anyio
async def test_cancelling_the_whole_group_mid_flight_and_starting_again(
    gate: Callable[[], Any], warm: None
) -> None:
    """A task group's cancel reaches thousands of awaiters at once; the same
    pending tensors can be awaited again afterwards, by new tasks."""
    tasks = scale(2_000, 10_000)
    await group_storm(30, gate)  # the loop's first-use state, as above
    with no_leaks(memory_slack=table_slack(tasks)):
        await group_storm(tasks, gate)
        await works_on_every_path()


async def _await(y: ert.Tensor) -> None:
    await y


async def _collect(y: ert.Tensor, out: list[np.ndarray]) -> None:
    out.append(await y)
