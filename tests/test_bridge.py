"""Awaiting tensors on asyncio, uvloop and trio, and reading them with no loop at all."""

from __future__ import annotations

import asyncio
import logging
import threading

import anyio
import numpy as np
import pytest

import eagerrt as ert


def _our_threads() -> set[threading.Thread]:
    """Live threads, less trio's own (anyio runs trio in guest mode, whose I/O waits
    use trio's cached helper threads that come and go)."""
    return {t for t in threading.enumerate() if not t.name.startswith("Trio thread")}


def _warm_up_workers() -> None:
    """Start the CPU worker threads, so thread counts compare like with like."""
    with ert.config.override(inline_threshold_ns=0):
        assert ert.exp(ert.ones((4,))).wait(10)


# -- awaiting ready tensors ----------------------------------------------------------
@pytest.mark.anyio
async def test_await_ready_tensor_returns_read_only_data() -> None:
    t = ert.asarray(np.arange(6.0).reshape(2, 3)) * 2
    assert t.is_ready()
    out = await t
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, np.arange(6.0).reshape(2, 3) * 2)
    assert not out.flags.writeable
    assert (await t) is not None  # awaiting twice is fine


@pytest.mark.anyio
async def test_await_ready_tensor_does_not_yield_to_the_loop() -> None:
    t = ert.asarray([1.0, 2.0]) + 1
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        # The child can only run once this task yields to the loop.
        for _ in range(100):
            np.testing.assert_array_equal(await t, [2.0, 3.0])
        assert ran == [], "awaiting a ready tensor let another task run"
    assert ran == ["other"]  # and the child did run once we yielded


@pytest.mark.anyio
async def test_await_ready_tensor_is_not_a_cancellation_point() -> None:
    t = ert.asarray([5.0])
    reached = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        reached.append(await t)  # no checkpoint: the pending cancel is not delivered
        reached.append("after")
        await anyio.sleep(0)  # a real checkpoint: the cancel lands here
        reached.append("unreachable")
    assert scope.cancelled_caught
    assert len(reached) == 2 and reached[1] == "after"
    np.testing.assert_array_equal(reached[0], [5.0])


def test_await_ready_tensor_under_plain_asyncio_never_suspends() -> None:
    async def main() -> list[str]:
        order: list[str] = []

        async def other() -> None:
            order.append("other")

        task = asyncio.ensure_future(other())
        t = ert.ones((3,)) + 1
        for _ in range(50):
            await t
        order.append("main")
        await task
        return order

    assert asyncio.run(main()) == ["main", "other"]


# -- awaiting pending tensors --------------------------------------------------------
@pytest.mark.anyio
async def test_await_tensor_completed_by_a_worker_thread(gate) -> None:
    g = gate()
    t = g(np.arange(4.0))
    completed_on: list[str] = []
    t.and_then(lambda: completed_on.append(threading.current_thread().name))
    about_to_await = anyio.Event()
    results = []

    async def waiter() -> None:
        about_to_await.set()
        results.append(await t)  # registered before the gate can open

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await about_to_await.wait()
            assert not t.is_ready()
            g.open()
    np.testing.assert_array_equal(results[0], np.arange(4.0))
    assert completed_on and completed_on[0].startswith("eagerrt-cpu")


@pytest.mark.anyio
async def test_await_tensor_completed_on_the_loop_thread(manual_device) -> None:
    with ert.config.override(inline_threshold_ns=0):
        t = ert.exp(ert.asarray(np.zeros(3), device=manual_device))
    assert not t.is_ready()
    about_to_await = anyio.Event()
    results = []

    async def waiter() -> None:
        about_to_await.set()
        results.append(await t)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await about_to_await.wait()
            assert manual_device.run_all() == 1  # completes t right here, on the loop thread
    np.testing.assert_array_equal(results[0], np.ones(3))


@pytest.mark.anyio
async def test_await_many_pending_tensors_at_once(gate) -> None:
    g = gate()
    root = g(np.arange(5.0))
    with ert.config.override(inline_threshold_ns=0):
        tensors = [ert.exp(root * float(i)) for i in range(40)]
    results: dict[int, np.ndarray] = {}

    async def read(i: int) -> None:
        results[i] = await tensors[i]

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for i in range(len(tensors)):
                tg.start_soon(read, i)
            await anyio.sleep(0)
            g.open()
    assert sorted(results) == list(range(40))
    for i, out in results.items():
        np.testing.assert_allclose(out, np.exp(np.arange(5.0) * i))


@pytest.mark.anyio
async def test_two_tasks_await_the_same_pending_tensor(manual_device) -> None:
    with ert.config.override(inline_threshold_ns=0):
        t = ert.asarray([1.0, 2.0], device=manual_device) * 3
    got: list[np.ndarray] = []
    registered: list[int] = []
    both_waiting = anyio.Event()

    async def reader() -> None:
        registered.append(1)
        if len(registered) == 2:
            both_waiting.set()
        got.append(await t)  # no yield between the set() above and this await

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(reader)
            await both_waiting.wait()
            assert got == []
            manual_device.run_all()
    assert len(got) == 2
    for out in got:
        np.testing.assert_array_equal(out, [3.0, 6.0])


# -- cancellation --------------------------------------------------------------------
@pytest.mark.anyio
async def test_cancel_task_awaiting_pending_tensor_leaves_runtime_consistent(
    gate, eventually
) -> None:
    _warm_up_workers()
    threads_before = _our_threads()
    g = gate()
    t = g(np.arange(3.0))
    dependent = t * 10
    waiting = anyio.Event()
    outcome: list[str] = []

    async def waiter() -> None:
        waiting.set()
        try:
            await t
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise
        outcome.append("finished")  # pragma: no cover - would be a bug

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await waiting.wait()
            tg.cancel_scope.cancel()
    assert outcome == ["cancelled"]
    assert not t.is_ready()  # cancelling the waiter does not cancel the work

    g.open()
    with anyio.fail_after(10):
        np.testing.assert_array_equal(await t, np.arange(3.0))
        np.testing.assert_array_equal(await dependent, np.arange(3.0) * 10)
        later = ert.exp(t) + dependent
        np.testing.assert_allclose(await later, np.exp(np.arange(3.0)) + np.arange(3.0) * 10)
        with ert.config.override(inline_threshold_ns=0):
            offloaded = ert.sqrt(later)
        np.testing.assert_allclose(
            await offloaded, np.sqrt(np.exp(np.arange(3.0)) + np.arange(3.0) * 10)
        )
    assert eventually(lambda: ert.stats().queue_depth == 0)
    assert not _our_threads() - threads_before, "threads leaked"


@pytest.mark.anyio
async def test_move_on_after_while_awaiting_then_await_again(gate) -> None:
    g = gate()
    t = g(np.ones(2))
    with anyio.move_on_after(0.02) as scope:
        await t
    assert scope.cancelled_caught
    g.open()
    with anyio.fail_after(10):
        np.testing.assert_array_equal(await t, np.ones(2))


@pytest.mark.anyio
async def test_cancel_while_awaiting_loop_thread_completion(manual_device) -> None:
    with ert.config.override(inline_threshold_ns=0):
        t = ert.asarray(np.arange(3.0), device=manual_device) + 1
    with anyio.CancelScope() as scope:
        scope.cancel()
        await t
    assert scope.cancelled_caught and not t.is_ready()
    manual_device.run_all()  # completes on the loop thread after the waiter left
    await anyio.sleep(0)  # let any (stale) wake-up run: it must be harmless
    np.testing.assert_array_equal(await t, np.arange(3.0) + 1)


@pytest.mark.parametrize(
    ("backend", "options"),
    [("asyncio", {}), ("asyncio", {"use_uvloop": True}), ("trio", {})],
    ids=["asyncio", "uvloop", "trio"],
)
def test_loop_finishes_before_awaited_tensor_completes(
    backend: str, options: dict, gate, eventually, caplog: pytest.LogCaptureFixture
) -> None:
    g = gate()
    t = g(np.arange(3.0))

    async def give_up() -> bool:
        with anyio.move_on_after(0.01) as scope:
            await t
        return scope.cancelled_caught

    assert anyio.run(give_up, backend=backend, backend_options=options)
    with caplog.at_level(logging.DEBUG, logger="eagerrt"):
        g.open()  # wakes a waiter whose loop/run is gone: nothing may break
        np.testing.assert_array_equal(t.numpy(timeout=10), np.arange(3.0))
        np.testing.assert_array_equal((t + 1).numpy(timeout=10), np.arange(3.0) + 1)
        assert eventually(lambda: ert.stats().queue_depth == 0)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.anyio
async def test_no_thread_leak_after_many_awaits(gate) -> None:
    _warm_up_workers()
    before = _our_threads()
    for _ in range(20):
        g = gate()
        t = g()
        g.open()
        with anyio.fail_after(10):
            await t
        with ert.config.override(inline_threshold_ns=0):
            await (ert.exp(t) + 1)
    assert not _our_threads() - before, "threads leaked"


# -- errors through await ------------------------------------------------------------
@pytest.mark.anyio
async def test_await_failed_tensor_raises_kernel_error(clean_errors) -> None:
    with ert.config.override(inline_threshold_ns=0):
        bad = ert.take(ert.arange(5), ert.asarray([7]))
    with anyio.fail_after(10), pytest.raises(ert.KernelError, match="take") as info:
        await bad
    assert isinstance(info.value.__cause__, IndexError)
    with pytest.raises(ert.KernelError):
        await (bad + 1)


# -- plain sync code, no loop --------------------------------------------------------
def test_sync_reads_without_a_loop(gate) -> None:
    g = gate()
    t = g(np.array(2.5))
    threading.Thread(target=g.open).start()
    out = t.numpy(timeout=10)
    np.testing.assert_array_equal(out, 2.5)
    assert not out.flags.writeable
    np.testing.assert_array_equal(np.asarray(t), 2.5)
    assert float(t) == 2.5
    assert int(t) == 2
    assert bool(t) is True
    assert t.item() == 2.5
    assert t.tolist() == 2.5


def test_numpy_timeout_then_ready(gate) -> None:
    g = gate()
    t = g()
    with pytest.raises(ert.WaitTimeoutError) as info:
        t.numpy(timeout=0.01)
    assert isinstance(info.value, TimeoutError)
    assert t.wait(0.001) is False and not t.is_ready()
    g.open()
    assert t.wait(10) is True and t.is_ready()
    np.testing.assert_array_equal(t.numpy(timeout=0), np.arange(3.0))


def test_array_protocol_copy_and_dtype() -> None:
    t = ert.asarray(np.arange(3), dtype="int32")
    as_float = np.asarray(t, dtype=np.float64)
    assert as_float.dtype == np.float64
    np.testing.assert_array_equal(as_float, [0.0, 1.0, 2.0])
    copied = np.array(t, copy=True)
    assert copied.flags.writeable
    copied[0] = 9  # a copy is the caller's own
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2])


def test_scalar_conversions_need_one_element() -> None:
    t = ert.ones((2,))
    with pytest.raises(TypeError):  # numpy's exception type for this
        float(t)
    assert float(ert.ones((1,))) == 1.0 == ert.ones((1,)).item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t)
    with pytest.raises(ValueError):
        t.item()


def test_await_pending_tensor_outside_any_loop_is_a_usage_error(gate) -> None:
    g = gate()
    t = g()

    async def read() -> np.ndarray:
        return await t

    coro = read()
    with pytest.raises(ert.UsageError, match="numpy"):
        coro.send(None)  # driven by hand: no asyncio loop, no trio run
    g.open()
    assert t.wait(10)


def test_await_ready_tensor_driven_by_hand_completes_at_once() -> None:
    t = ert.asarray([1.0, 2.0])

    async def read() -> np.ndarray:
        return await t

    with pytest.raises(StopIteration) as info:
        read().send(None)
    np.testing.assert_array_equal(info.value.value, [1.0, 2.0])
