"""Await overhead: ``await`` on eagerrt values vs bare asyncio futures.

Two cases, each on asyncio's default loop and on uvloop:

* **ready**: ``await t`` for a tensor that is already ready, ``n_ready`` times
  in a loop, vs ``await fut`` for a future that is already done. The time of the
  same ``for`` loop with no await is measured alongside and subtracted.
* **worker-completed**: one round trip per iteration through a worker thread:

  - baseline: a plain worker thread (fed by a ``queue.SimpleQueue``) completes
    a loop future with ``loop.call_soon_threadsafe(fut.set_result, None)``;
  - ``AsyncValue`` (``eagerrt.lowlevel``) set by the same worker thread with
    ``set_value``, awaited through ``lowlevel.wait_async``;
  - an eagerrt tensor from an offloaded op (a trivial kernel on a 1-element
    array, forced onto eagerrt's CPU workers): launch + hop + await;
  - for reference, ``await loop.run_in_executor(pool, fn)``, the usual asyncio
    way to run something on a thread.

  Each round reports the median of its per-iteration round trips: on a VM a
  thread's wake-up takes ~20 us while its vCPU is busy and ~100+ us from idle,
  so means swing with whatever else the machine is doing.

All candidates of a loop run interleaved in that loop. No targets (the issue
asks for the figures); ratios are against the bare future on the same loop.

Run: ``python benchmarks/bench_await_overhead.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import queue
import statistics
import threading
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, bench_main, finish, interleave_async, new_result, now_ns
from eagerrt.lowlevel import AsyncValue, wait_async

try:
    import uvloop
except ImportError:  # uvloop is not available on Windows
    uvloop = None


def _noop_op() -> ert.Op:
    try:
        return ert.get_op("bench_noop")
    except ert.UsageError:
        pass
    op = ert.define_op(
        "bench_noop",
        rule=lambda x: (x.shape, x.dtype),
        # Always more than the inline threshold: every call goes to a worker.
        cost=lambda shape, dtype, /, *args, **kw: float("inf"),
        doc="Benchmark op: a trivial kernel that is always offloaded.",
    )
    op.register_kernel("cpu", lambda x: x.copy())
    return op


noop = _noop_op()


class _AwaitValue:
    """Await a lowlevel AsyncValue the way ``Tensor.__await__`` does."""

    __slots__ = ("value",)

    def __init__(self, value: AsyncValue) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        value = self.value
        if not value.is_available():
            yield from wait_async(value)
        return value.value


class _PlainWorker:
    """One daemon thread running ``fn(arg)`` for each ``(fn, arg)`` queued."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._work, name="bench-worker", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        get = self.queue.get
        while True:
            item = get()
            if item is None:
                return
            fn, arg = item
            fn(arg)

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join()


def _set_value(av: AsyncValue) -> None:
    av.set_value(None)


async def _measure(n_ready: int, n_hops: int, rounds: int) -> Any:
    loop = asyncio.get_running_loop()
    worker = _PlainWorker()
    pool = ThreadPoolExecutor(1)
    done = loop.create_future()
    done.set_result(None)
    ready = ert.asarray(np.ones(4, np.float32)) + 1  # a tensor made by an op, ready
    one = ert.asarray(np.ones(1, np.float32))
    put = worker.queue.put
    call_soon_threadsafe = loop.call_soon_threadsafe

    def set_threadsafe(fut: asyncio.Future[Any]) -> None:
        call_soon_threadsafe(fut.set_result, None)

    async def empty() -> float:
        start = now_ns()
        for _ in range(n_ready):
            pass
        return (now_ns() - start) / n_ready

    async def future_ready() -> float:
        fut = done
        start = now_ns()
        for _ in range(n_ready):
            await fut
        return (now_ns() - start) / n_ready

    async def tensor_ready() -> float:
        t = ready
        start = now_ns()
        for _ in range(n_ready):
            await t
        return (now_ns() - start) / n_ready

    # Round trips: the median of per-iteration latencies (a worker's wake-up time
    # is bimodal on a VM: fast while its vCPU is busy, ~100 us from idle).
    async def future_thread() -> float:
        create = loop.create_future
        lat = []
        for _ in range(n_hops):
            start = now_ns()
            fut = create()
            put((set_threadsafe, fut))
            await fut
            lat.append(now_ns() - start)
        return statistics.median(lat)

    async def asyncvalue_thread() -> float:
        lat = []
        for _ in range(n_hops):
            start = now_ns()
            av = AsyncValue()
            put((_set_value, av))
            await _AwaitValue(av)
            lat.append(now_ns() - start)
        return statistics.median(lat)

    async def tensor_offloaded() -> float:
        x = one
        lat = []
        for _ in range(n_hops):
            start = now_ns()
            await noop(x)
            lat.append(now_ns() - start)
        return statistics.median(lat)

    def nothing() -> None:
        return None

    async def run_in_executor() -> float:
        run_in = loop.run_in_executor
        lat = []
        for _ in range(n_hops):
            start = now_ns()
            await run_in(pool, nothing)
            lat.append(now_ns() - start)
        return statistics.median(lat)

    candidates: dict[str, Callable[[], Any]] = {
        "empty": empty,
        "future_ready": future_ready,
        "tensor_ready": tensor_ready,
        "future_thread": future_thread,
        "asyncvalue_thread": asyncvalue_thread,
        "tensor_offloaded": tensor_offloaded,
        "run_in_executor": run_in_executor,
    }
    try:
        assert (await noop(one)).tolist() == [1.0]
        for c in candidates.values():  # warm-up: threads started, caches filled
            await c()
        before = ert.stats()
        samples = await interleave_async(candidates, rounds)
        offloaded = ert.stats().ops_offloaded - before.ops_offloaded
    finally:
        worker.stop()
        pool.shutdown()
    return samples, offloaded


def _loops() -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    loops: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
    if uvloop is not None:
        loops["uvloop"] = uvloop.new_event_loop
    return loops


def run(
    quick: bool = False,
    *,
    n_ready: int | None = None,
    n_hops: int | None = None,
    rounds: int | None = None,
) -> dict[str, Any]:
    """ns per await: eagerrt values vs bare futures, ready and worker-completed."""
    n_ready = n_ready or (20_000 if quick else 200_000)
    n_hops = n_hops or (200 if quick else 1_000)
    rounds = rounds or (3 if quick else 10)
    loops = _loops()
    result = new_result(
        "await_overhead",
        "Await overhead: eagerrt values vs bare asyncio futures",
        quick,
        {"n_ready": n_ready, "n_hops": n_hops, "rounds": rounds, "loops": "+".join(loops)},
    )
    if uvloop is None:
        result["notes"].append("uvloop is not installed: only asyncio's loop was measured")
    fig = result["figures"]
    result["samples_ns"] = {}
    for loop_name, factory in loops.items():
        with asyncio.Runner(loop_factory=factory) as runner:
            samples, offloaded = runner.run(_measure(n_ready, n_hops, rounds))
        result["samples_ns"][loop_name] = samples.to_json()
        expected_offloads = n_hops * rounds
        if offloaded < expected_offloads:
            result["notes"].append(
                f"{loop_name}: only {offloaded} of {expected_offloads} noop ops were offloaded"
            )

        def net(name: str, r: dict[str, float]) -> float:
            return r[name] - r["empty"]

        # Best-of of the per-round net figures, and the median of paired ratios.
        fut_net = min(net("future_ready", r) for r in samples.rounds)
        ten_net = min(net("tensor_ready", r) for r in samples.rounds)
        paired_ready = float(
            np.median([net("tensor_ready", r) / net("future_ready", r) for r in samples.rounds])
        )
        p = f"{loop_name}_"
        fig[p + "loop_iteration_ns"] = samples.best("empty")
        fig[p + "future_ready_ns"] = fut_net
        fig[p + "tensor_ready_ns"] = ten_net
        fig[p + "tensor_ready_vs_future"] = ten_net / fut_net
        add_row(
            result,
            f"{loop_name}: await done future (baseline)",
            fut_net,
            "ns/await",
            1.0,
            "vs future",
        )
        add_row(
            result,
            f"{loop_name}: await ready tensor",
            ten_net,
            "ns/await",
            ten_net / fut_net,
            "vs future",
            paired_ready,
        )
        # Round trips: medians over rounds, not best-of (see the module docstring:
        # one lucky round with the worker's vCPU awake would make the best-of).
        base = "future_thread"
        fig[p + "future_thread_ns"] = samples.median(base)
        add_row(
            result,
            f"{loop_name}: worker sets future via call_soon_threadsafe (baseline)",
            samples.median(base),
            "ns/round trip",
            1.0,
            "vs future (median)",
        )
        for name, label in (
            ("asyncvalue_thread", "worker sets lowlevel AsyncValue, await via wait_async"),
            ("tensor_offloaded", "offloaded eagerrt op: launch + worker + await"),
            ("run_in_executor", "loop.run_in_executor(ThreadPoolExecutor(1)) (reference)"),
        ):
            ratio = samples.median(name) / samples.median(base)
            fig[p + name + "_ns"] = samples.median(name)
            fig[p + name + "_vs_future"] = ratio
            fig[p + name + "_vs_future_paired"] = samples.paired_ratio(name, base)
            add_row(
                result,
                f"{loop_name}: {label}",
                samples.median(name),
                "ns/round trip",
                ratio,
                "vs future (median)",
                samples.paired_ratio(name, base),
            )
    result["notes"].append(
        "round trips are medians (per-iteration median, then median over rounds), "
        "not best-of: a worker thread's wake-up is ~20 us while its vCPU is busy and "
        "~100+ us from idle on a VM, and one lucky round would make the best-of"
    )
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
