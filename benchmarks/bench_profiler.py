"""The profiler's cost: off (the issue asks <= 2% on the tiny model) and on.

The tiny model of ``bench_tiny_model.py`` (``x = x @ w`` repeated ``n_ops``
times on 4x4 float32, eager, one ``await``) is timed per op, interleaved round
by round in one event loop:

* **baseline**: no profile anywhere near;
* **profiling off**: a profile was entered and left just before the timing
  (profiling is off while timed). The fast path has no profiling hook at all;
  this catches what a profile could leave behind (the ops' inline caches,
  which a profile turns off, must come back);
* **profiling on**: the same model timed inside ``with ert.profile()``: every
  op takes the general path and records an event;
* the numpy loop, for scale.

The general path (``Op._call``, taken on an inline-cache miss, and by every
call while profiling) does have one hook: a read of a module global and a
test. Its cost is timed on its own, as the share of one general-path call.

Run: ``python benchmarks/bench_profiler.py [--quick]``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, add_target, bench_main, finish, interleave_async, new_result, now_ns
from bench_tiny_model import _eager_model, _numpy_model  # the same tiny model
from eagerrt._core import profiling


def _hook_ns(loops: int) -> float:
    """Nanoseconds of one profiling check (as ``Op._call`` makes it), above an
    empty loop's."""
    best_hook = best_empty = float("inf")
    for _ in range(5):
        start = now_ns()
        for _ in range(loops):
            recording = profiling.active
            if recording is not None:  # pragma: no cover - off while timed
                break
        best_hook = min(best_hook, now_ns() - start)
        start = now_ns()
        for _ in range(loops):
            recording = None
            if recording is not None:  # pragma: no cover
                break
        best_empty = min(best_empty, now_ns() - start)
    return max(0.0, (best_hook - best_empty) / loops)


def run(
    quick: bool = False, *, n_ops: int = 100, rounds: int | None = None, reps: int | None = None
) -> dict[str, Any]:
    """Profiler cost on the tiny model: off vs a baseline side by side, and on."""
    rounds = rounds or (5 if quick else 31)
    reps = reps or (20 if quick else 200)
    result = new_result(
        "profiler",
        f"Profiler cost: {n_ops} dependent 4x4 float32 matmuls, eager (per-op time)",
        quick,
        {"n_ops": n_ops, "rounds": rounds, "model_calls_per_round": reps},
    )
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 4)) * 0.1).astype(np.float32)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    ex, ew = ert.asarray(x), ert.asarray(w)
    expected = _numpy_model(x, w, n_ops)
    events_per_round: list[int] = []

    async def timed_model() -> float:
        start = now_ns()
        for _ in range(reps):
            await _eager_model(ex, ew, n_ops)
        return (now_ns() - start) / (reps * n_ops)

    async def baseline() -> float:
        return await timed_model()

    async def off() -> float:
        with ert.profile():
            await _eager_model(ex, ew, 2)
        return await timed_model()

    async def on() -> float:
        with ert.profile() as prof:
            per_op = await timed_model()
        events_per_round.append(len(prof.events))
        return per_op

    def numpy_loop() -> float:
        start = now_ns()
        for _ in range(reps):
            _numpy_model(x, w, n_ops)
        return (now_ns() - start) / (reps * n_ops)

    candidates: dict[str, Any] = {
        "baseline": baseline,
        "profiling_off": off,
        "profiling_on": on,
        "numpy": numpy_loop,
    }

    async def measure() -> Any:
        np.testing.assert_allclose(
            await _eager_model(ex, ew, n_ops), expected, rtol=1e-5, atol=1e-30
        )
        with ert.profile():
            got = await _eager_model(ex, ew, n_ops)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-30)
        return await interleave_async(candidates, rounds, warm_up=True)

    samples = asyncio.run(measure())
    if any(n != reps * n_ops for n in events_per_round):
        raise AssertionError(f"a profiled round recorded {events_per_round}, not {reps * n_ops}")

    matmul = ert.get_op("matmul")
    general_loops = 2_000 if quick else 20_000
    best_general = float("inf")
    for _ in range(5):
        start = now_ns()
        for _ in range(general_loops):
            matmul._call((ex, ew), None, {})
        best_general = min(best_general, (now_ns() - start) / general_loops)
    hook = _hook_ns(general_loops * 10)

    result["samples_ns_per_op"] = samples.to_json()
    fig = result["figures"]
    for name in samples.names:
        fig[f"{name}_ns_per_op"] = samples.best(name)
    fig["off_vs_baseline"] = samples.ratio("profiling_off", "baseline")
    fig["off_vs_baseline_paired"] = samples.paired_ratio("profiling_off", "baseline")
    fig["on_vs_baseline"] = samples.ratio("profiling_on", "baseline")
    fig["on_vs_baseline_paired"] = samples.paired_ratio("profiling_on", "baseline")
    fig["on_ns_per_event"] = samples.best("profiling_on") - samples.best("baseline")
    fig["general_path_ns_per_call"] = best_general
    fig["hook_ns"] = hook
    fig["hook_share_of_general_path"] = hook / best_general

    def row(label: str, name: str) -> None:
        add_row(
            result,
            label,
            samples.best(name),
            "ns/op",
            samples.ratio(name, "baseline"),
            "vs baseline",
            samples.paired_ratio(name, "baseline"),
        )

    row("eagerrt eager, no profile (baseline)", "baseline")
    row("eagerrt eager, profiling off (after a profile)", "profiling_off")
    row("eagerrt eager, inside `with ert.profile()`", "profiling_on")
    row("numpy loop (for scale)", "numpy")
    add_row(result, "general path (Op._call), one call", best_general, "ns")
    add_row(result, "its profiling hook (one global read and test)", hook, "ns")
    add_row(result, "the hook's share of a general-path call", 100 * hook / best_general, "%")
    add_target(
        result,
        "off_vs_baseline",
        "tiny model, profiling off / baseline",
        fig["off_vs_baseline"],
        1.02,
        "<=",
    )
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
