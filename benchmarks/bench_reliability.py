"""Reliability figures (issue 7): fuzzing, cancellation storms, latency, throughput, memory.

Runs the reliability tests' own machinery (``tests/reliability/``) at benchmark
sizes and prints what they measured:

* **random DAGs**: ``run_fuzz`` cases (eager, sync and compiled, on asyncio,
  uvloop and trio), faults injected, errors delivered to exactly the dependents,
  mismatches with numpy (should be 0) and the slowest case;
* **cancellation storm**: tasks looping over offloaded work under random
  timeouts (0-2 ms); how many were cancelled while their op was in flight, how
  many completed (each checked against numpy), values left pending (should be 0);
* **load**: coroutines on one asyncio loop each running a small model (16x64 ->
  64 -> 10, relu, softmax), every op offloaded to the workers under
  ``config.max_queued_tasks``: throughput eager and compiled as ratios to the same
  requests run by hand-written numpy, await latency p50/p99/max, peak queue vs bound;
* **memory**: peak traced memory (tracemalloc) while 1k vs 10k coroutines arrive
  with the workers held: bounded, it does not grow with the waiting tasks.

Run: ``python benchmarks/bench_reliability.py [--quick | --long]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from typing import Any

import anyio
import numpy as np

import eagerrt as ert
from _common import add_row, add_target, finish, machine_info, new_result, now_ns, print_result

# The reliability tests are a package under tests/ (what pytest imports them as).
TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from reliability import dag_fuzz, test_cancellation, test_load  # noqa: E402

BOUND = test_load.BOUND


# -- random DAGs -------------------------------------------------------------------------
def fuzz(result: dict[str, Any], cases: int) -> None:
    dag_fuzz.warm_up()
    figures = dag_fuzz.run_fuzz(cases, seed=7)
    f = result["figures"]
    f["fuzz_cases"] = figures["cases"]
    f["fuzz_faults_injected"] = figures["faults_injected"]
    f["fuzz_errors_delivered"] = figures["errors_delivered"]
    f["fuzz_failures"] = figures["failures"]
    f["fuzz_worst_case_s"] = figures["worst_latency_s"]
    add_row(result, "random DAG cases run", figures["cases"], "cases")
    add_row(result, "  faults injected", figures["faults_injected"], "faults")
    add_row(result, "  errors delivered to dependents", figures["errors_delivered"], "errors")
    add_row(result, "  cases with a wrong result, error or leak", figures["failures"], "cases")
    add_row(result, "  slowest case", figures["worst_latency_s"] * 1e3, "ms")
    add_target(result, "fuzz_failures", "random DAGs: failing cases", figures["failures"], 0, "<=")


# -- cancellation storm ------------------------------------------------------------------
def storm(result: dict[str, Any], tasks: int) -> None:
    rounds = 3

    async def main() -> tuple[int, int]:
        await test_cancellation.timeout_storm(30, seed=0)  # first-use state
        counts = await test_cancellation.timeout_storm(tasks, seed=11, rounds=rounds)
        ert.synchronize(timeout=60)
        await test_cancellation.works_on_every_path()
        return counts

    x = ert.asarray(np.ones((2, 3), np.float32))
    anyio.run(test_cancellation.compiled_model, x)  # compile outside the storm
    with ert.config.override(inline_threshold_ns=0):
        cancelled, completed = anyio.run(main)
    pending = ert.stats().pending_values
    f = result["figures"]
    f["storm_tasks"] = tasks
    f["storm_cancelled_in_flight"] = cancelled
    f["storm_completed_right"] = completed
    f["storm_pending_after"] = pending
    add_row(result, "cancellation storm: tasks", tasks, "tasks")
    add_row(result, "  cancelled while their op was in flight", cancelled, "awaits")
    add_row(result, f"  completed and right (of {tasks * rounds})", completed, "awaits")
    add_row(result, "  values left pending afterwards", pending, "values")
    add_target(result, "storm_pending", "storm: values left pending", pending, 0, "<=")


# -- load: throughput, latency, queue ----------------------------------------------------
async def _serve(n: int, compiled: bool | None) -> tuple[float, list[float]]:
    """``n`` coroutines, each one request; (wall s, latency of each in s).
    ``compiled``: the compiled model, the eager one, or (None) numpy by hand."""
    latencies: list[float] = []
    wrong: list[int] = []

    async def one(i: int) -> None:
        start = now_ns()
        if compiled is None:
            got = test_load.reference(i)
            await anyio.lowlevel.checkpoint()  # as an await of a ready tensor may yield
        else:
            x = ert.asarray(test_load.request(i))
            y = await test_load.compiled_model(x) if compiled else test_load.model(x)
            got = await y
        latencies.append((now_ns() - start) / 1e9)
        if not np.allclose(got, test_load.EXPECTED[i % 7], rtol=1e-4, atol=1e-6):
            wrong.append(i)

    start = now_ns()
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    wall = (now_ns() - start) / 1e9
    if wrong:
        raise AssertionError(f"wrong results under load for requests {wrong[:10]}")
    return wall, latencies


def _numpy_requests(n: int) -> float:
    start = now_ns()
    for i in range(n):
        test_load.reference(i)
    return (now_ns() - start) / 1e9


def load(result: dict[str, Any], coroutines: int, rounds: int) -> None:
    pool = test_load.cpu_pool()
    walls: dict[str, list[float]] = {"numpy": [], "eager": [], "compiled": []}
    latencies: dict[str, list[float]] = {"eager": [], "compiled": []}
    peak_queued = 0
    with ert.config.override(
        inline_threshold_ns=0, graph_inline_threshold_ns=0, max_queued_tasks=BOUND
    ):
        anyio.run(_serve, 10, True)  # compile and warm up
        for _ in range(rounds):  # interleaved, so drift hits all three alike
            walls["numpy"].append(_numpy_requests(coroutines))
            for name in ("eager", "compiled"):
                pool.reset_peak()
                wall, lat = anyio.run(_serve, coroutines, name == "compiled")
                peak_queued = max(peak_queued, pool.peak_queued)
                walls[name].append(wall)
                latencies[name] = lat  # the last round's
    f = result["figures"]
    base = min(walls["numpy"])
    add_row(result, f"load: {coroutines:,} coroutines, numpy by hand", coroutines / base, "req/s")
    for name in ("eager", "compiled"):
        best = min(walls[name])
        lat = sorted(latencies[name])
        p50 = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        f[f"load_{name}_req_per_s"] = coroutines / best
        f[f"load_{name}_wall_vs_numpy"] = best / base
        f[f"load_{name}_latency_p50_ms"] = p50 * 1e3
        f[f"load_{name}_latency_p99_ms"] = p99 * 1e3
        f[f"load_{name}_latency_max_ms"] = lat[-1] * 1e3
        add_row(result, f"  {name}: throughput", coroutines / best, "req/s", base / best, "numpy")
        add_row(result, f"  {name}: await latency p50", p50 * 1e3, "ms")
        add_row(result, f"  {name}: await latency p99", p99 * 1e3, "ms")
        add_row(result, f"  {name}: await latency max", lat[-1] * 1e3, "ms")
    # The same load with the default settings (the small model's ops run inline),
    # against numpy run by the same coroutines (task, check and all).
    same = min(anyio.run(_serve, coroutines, None)[0] for _ in range(rounds))
    f["load_numpy_coroutines_req_per_s"] = coroutines / same
    add_row(result, "  numpy in the same coroutines", coroutines / same, "req/s")
    for name in ("eager", "compiled"):
        best = min(anyio.run(_serve, coroutines, name == "compiled")[0] for _ in range(rounds))
        f[f"load_default_{name}_req_per_s"] = coroutines / best
        add_row(
            result,
            f"  {name}, default settings (inline): throughput",
            coroutines / best,
            "req/s",
            same / best,
            "numpy in coroutines",
        )
    f["load_coroutines"] = coroutines
    f["load_peak_queued"] = peak_queued
    f["load_queue_bound"] = BOUND
    add_row(result, f"  peak queued tasks (bound {BOUND})", peak_queued, "tasks")
    add_target(result, "queue_bound", "load: peak queued tasks", peak_queued, BOUND, "<=")


# -- memory with the workers held --------------------------------------------------------
_hold = ert.define_op(
    "bench_reliability_hold",
    rule=lambda x, **static: (x.shape, x.dtype),
    cost=lambda *args, **static: 1e15,  # always on a worker thread
    doc="Identity that holds its worker until the event is set (benchmark only).",
)


@_hold.kernel()
def _hold_kernel(x: Any, *, event: threading.Event, ran_on: list[str]) -> Any:
    ran_on.append(threading.current_thread().name)
    event.wait(60)
    return x


class _Gate:
    """What ``test_load.serve`` expects of the tests' ``gate`` fixture."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.ran_on: list[str] = []

    def __call__(self) -> ert.Tensor:
        return _hold(ert.asarray(np.arange(3.0)), event=self.event, ran_on=self.ran_on)

    def open(self) -> None:
        self.event.set()


def _eventually(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def memory(result: dict[str, Any], small: int, large: int) -> None:
    with ert.config.override(
        inline_threshold_ns=0, graph_inline_threshold_ns=0, max_queued_tasks=BOUND
    ):
        x = ert.asarray(test_load.request(0))
        test_load.model(x).numpy()
        anyio.run(test_load.compiled_model, x)
        runs = {
            (n, compiled): anyio.run(test_load.serve, n, compiled, _Gate, _eventually)
            for compiled in (False, True)
            for n in (small, large)
        }
    f = result["figures"]
    for compiled in (False, True):
        name = "compiled" if compiled else "eager"
        s, big = runs[small, compiled], runs[large, compiled]
        ratio = big.peak_bytes / s.peak_bytes
        f[f"memory_{name}_peak_small_kib"] = s.peak_bytes / 1024
        f[f"memory_{name}_peak_large_kib"] = big.peak_bytes / 1024
        f[f"memory_{name}_large_vs_small"] = ratio
        add_row(result, f"memory {name}: peak with {small:,} arriving", s.peak_bytes / 1024, "KiB")
        add_row(
            result,
            f"memory {name}: peak with {large:,} arriving",
            big.peak_bytes / 1024,
            "KiB",
            ratio,
            f"{small:,}",
        )
        add_target(
            result,
            f"memory_{name}",
            f"memory {name}: peak {large:,} / {small:,}",
            ratio,
            1.5,
            "<=",
        )


def run(
    quick: bool = False,
    long: bool = False,
    fuzz_cases: int | None = None,
    storm_tasks: int | None = None,
    coroutines: int | None = None,
    memory_arrivals: tuple[int, int] = (1_000, 10_000),
    rounds: int | None = None,
) -> dict[str, Any]:
    """Reliability figures: fuzzing, cancellation storms, load, memory."""
    fuzz_cases = fuzz_cases or (30 if quick else 1_000 if long else 200)
    storm_tasks = storm_tasks or (1_000 if quick else 10_000 if long else 3_000)
    coroutines = coroutines or (2_000 if quick else 10_000)
    rounds = rounds or (1 if quick else 3)
    params = {
        "fuzz_cases": fuzz_cases,
        "storm_tasks": storm_tasks,
        "coroutines": coroutines,
        "memory_arrivals": list(memory_arrivals),
        "rounds": rounds,
        "queue_bound": BOUND,
    }
    result = new_result("reliability", "Reliability (issue 7)", quick, params)
    fuzz(result, fuzz_cases)
    storm(result, storm_tasks)
    load(result, coroutines, rounds)
    memory(result, *memory_arrivals)
    return finish(result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Reliability figures (issue 7).")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--long", action="store_true", help="the long variant: more cases")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, long=args.long)
    print_result(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "result": result}, f, indent=2)


if __name__ == "__main__":
    main()
