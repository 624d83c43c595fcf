"""I/O and compute overlap: an async pipeline over batches.

Each of ``batches`` batches "arrives" after ``await asyncio.sleep(io_ms)`` (the
simulated I/O); its compute is then launched without awaiting: a chain of
offloaded ops (a numba nogil custom op, ``sin``, and a ``sum``), a few tens of
ms per batch. At most ``in_flight`` batches are pending at once (the oldest is
awaited before more are read); the rest are awaited at the end.

Timed side by side, interleaved, in one event loop:

* io alone: the sleeps one after the other, nothing else;
* compute alone: the same ops, batch after batch, each batch awaited before the
  next is launched (serial);
* pipeline: I/O and compute overlapped as above;
* for reference, the compute in plain numpy on the event loop's thread.

Target (from the issue): pipeline wall <= 1.15x max(io time, compute time).

Run: ``python benchmarks/bench_io_overlap.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, add_target, bench_main, finish, interleave_async, new_result, now_ns
from bench_parallel_branches import relax, relax_kernel


def batch_compute(x: ert.Tensor) -> ert.Tensor:
    """The per-batch work, issued at once: relax -> sin -> relax -> sum."""
    return ert.sum(relax(ert.sin(relax(x))))


def batch_compute_numpy(x: np.ndarray) -> np.ndarray:
    return np.sum(relax_kernel(np.sin(relax_kernel(x))))


def run(
    quick: bool = False,
    *,
    batches: int = 16,
    n: int = 1 << 19,
    io_ms: float | None = None,
    in_flight: int = 4,
    rounds: int | None = None,
) -> dict[str, Any]:
    """Overlap of simulated async I/O with offloaded compute, vs each alone."""
    rounds = rounds or (3 if quick else 10)
    rng = np.random.default_rng(2)
    inputs_np = [rng.standard_normal(n) for _ in range(batches)]
    inputs = [ert.asarray(a) for a in inputs_np]
    expected = [batch_compute_numpy(a) for a in inputs_np]

    def numpy_compute() -> float:
        start = now_ns()
        for a in inputs_np:
            batch_compute_numpy(a)
        return (now_ns() - start) / 1e6

    io_s = (io_ms or 0.0) / 1e3  # set in measure() when not given

    result = new_result(
        "io_overlap",
        f"I/O and compute overlap: {batches} batches, async sleep + offloaded compute",
        quick,
        {
            "batches": batches,
            "n": n,
            "io_ms_per_batch": io_ms,
            "in_flight": in_flight,
            "rounds": rounds,
            "num_threads": ert.config.num_threads,
        },
    )

    async def io_alone() -> float:
        start = now_ns()
        for _ in range(batches):
            await asyncio.sleep(io_s)
        return (now_ns() - start) / 1e6

    async def compute_alone() -> float:
        start = now_ns()
        for x in inputs:
            await batch_compute(x)
        return (now_ns() - start) / 1e6

    async def pipeline() -> float:
        start = now_ns()
        pending: collections.deque[ert.Tensor] = collections.deque()
        outputs = []
        for x in inputs:
            await asyncio.sleep(io_s)  # the batch arrives
            if len(pending) >= in_flight:
                outputs.append(await pending.popleft())
            pending.append(batch_compute(x))  # launched, not awaited
        while pending:
            outputs.append(await pending.popleft())
        return (now_ns() - start) / 1e6

    candidates = {
        "io": io_alone,
        "compute": compute_alone,
        "pipeline": pipeline,
        "numpy_compute": numpy_compute,
    }

    async def measure() -> Any:
        nonlocal io_s
        got = [await batch_compute(x) for x in inputs]
        np.testing.assert_allclose(np.array(got), np.array(expected), rtol=1e-9)
        if io_ms is None:
            # I/O about as long as the compute (its best of a few runs): the
            # hardest case to overlap, where neither hides the other for free.
            io_s = min([await compute_alone() for _ in range(3)]) / batches / 1e3
            result["params"]["io_ms_per_batch"] = round(io_s * 1e3, 3)
        for c in candidates.values():  # warm-up
            v = c()
            if asyncio.iscoroutine(v):
                await v
        return await interleave_async(candidates, rounds)

    samples = asyncio.run(measure())
    result["samples_ms"] = samples.to_json()
    fig = result["figures"]
    for name in samples.names:
        fig[f"{name}_ms"] = samples.best(name)
    io, compute, wall = samples.best("io"), samples.best("compute"), samples.best("pipeline")
    bound = max(io, compute)
    fig["wall_vs_max"] = wall / bound
    fig["wall_vs_max_paired"] = float(
        np.median([r["pipeline"] / max(r["io"], r["compute"]) for r in samples.rounds])
    )
    fig["wall_vs_sum"] = wall / (io + compute)
    fig["io_share"] = io / (io + compute)

    add_row(result, "I/O alone (sum of sleeps, measured)", io, "ms", io / bound, "vs max")
    add_row(
        result,
        "compute alone (eagerrt, batch after batch, awaited)",
        compute,
        "ms",
        compute / bound,
        "vs max",
    )
    add_row(
        result,
        "compute in plain numpy on the loop thread (reference)",
        samples.best("numpy_compute"),
        "ms",
        samples.best("numpy_compute") / bound,
        "vs max",
    )
    add_row(
        result,
        "pipeline wall time",
        wall,
        "ms",
        fig["wall_vs_max"],
        "vs max",
        fig["wall_vs_max_paired"],
    )
    add_row(
        result,
        "pipeline wall / (I/O + compute)",
        fig["wall_vs_sum"],
        "x",
        None,
        "",
        float(np.median([r["pipeline"] / (r["io"] + r["compute"]) for r in samples.rounds])),
    )
    numpy_bound = max(io, samples.best("numpy_compute"))
    fig["wall_vs_max_numpy"] = wall / numpy_bound
    add_row(
        result,
        "pipeline wall / max(I/O, compute in plain numpy) (stricter)",
        fig["wall_vs_max_numpy"],
        "x",
        None,
        "",
        float(
            np.median([r["pipeline"] / max(r["io"], r["numpy_compute"]) for r in samples.rounds])
        ),
    )
    add_target(
        result, "wall_vs_max", "pipeline wall / max(I/O, compute)", fig["wall_vs_max"], 1.15, "<="
    )
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
