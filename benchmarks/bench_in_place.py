"""In-place operators: ``t += 1`` on a big tensor vs numpy's ``a += 1``.

An in-place operator on a tensor nothing else can see (no view, no array
handed out, no task reading it) runs numpy's ufunc into the tensor's own
buffer; the issue's case is a 2000x20000 float64 tensor (320 MB). Three
candidates, interleaved: numpy's ``a += 1``, eagerrt's ``t += 1`` (the own
buffer), and eagerrt's ``t += 1`` while a view of ``t`` is alive (value
semantics: the view keeps its values, so a new version is made). Memory: the
largest allocation each makes beyond its array, by ``tracemalloc`` (numpy
reports its buffers there): the own-buffer path makes none.

Target: ``t += 1`` <= 1.2x numpy's time, with no second buffer.

Run: ``python benchmarks/bench_in_place.py [--quick]``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, add_target, bench_main, finish, interleave, new_result, now_ns


def _peak_extra_bytes(step: Callable[[], Any]) -> int:
    """The most memory ``step()`` held at once beyond what it started with."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        step()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return max(0, peak - before)


def run(
    quick: bool = False, *, rows: int = 2000, cols: int = 20000, rounds: int = 0
) -> dict[str, Any]:
    """``t += 1`` against numpy's ``a += 1``, time and extra memory."""
    rounds = rounds or (3 if quick else 7)
    result = new_result("in_place", "in-place operators vs numpy", quick, {"shape": (rows, cols)})
    fig = result["figures"]
    a = np.zeros((rows, cols))
    t = ert.asarray(np.zeros((rows, cols)))
    shared = ert.asarray(np.zeros((rows, cols)))
    a += 1  # first touch of the pages, outside the timings
    t += 1
    shared += 1
    t.wait()
    shared.wait()

    def numpy_add() -> float:
        start = now_ns()
        a.__iadd__(1)
        return (now_ns() - start) / 1e6

    kept = [0, 0]  # rounds, and those whose result is in t's own buffer

    def own_buffer() -> float:
        buffer = t._value.ctypes.data
        start = now_ns()
        t.__iadd__(1)
        t.wait()
        elapsed = (now_ns() - start) / 1e6
        kept[0] += 1
        kept[1] += t._value.ctypes.data == buffer
        return elapsed

    def with_a_view() -> float:
        view = shared[0]  # alive across the write: it must keep its values
        before = float(view[0])
        start = now_ns()
        shared.__iadd__(1)
        shared.wait()
        elapsed = (now_ns() - start) / 1e6
        assert float(view[0]) == before
        return elapsed

    s = interleave({"numpy": numpy_add, "own": own_buffer, "view": with_a_view}, rounds)
    fig["numpy_ms"], fig["own_buffer_ms"], fig["with_view_ms"] = (
        s.best("numpy"),
        s.best("own"),
        s.best("view"),
    )
    fig["own_buffer_vs_numpy"] = s.best("own") / s.best("numpy")
    fig["rounds_in_own_buffer"] = kept[1] / kept[0]
    fig["numpy_extra_bytes"] = _peak_extra_bytes(lambda: a.__iadd__(1))
    fig["own_buffer_extra_bytes"] = _peak_extra_bytes(lambda: t.__iadd__(1))
    nbytes = a.nbytes
    add_row(result, f"numpy a += 1, {rows}x{cols} float64", s.best("numpy"), "ms")
    add_row(
        result,
        "eagerrt t += 1 (its own buffer)",
        s.best("own"),
        "ms",
        fig["own_buffer_vs_numpy"],
        "vs numpy",
        s.paired_ratio("own", "numpy"),
    )
    add_row(
        result,
        "eagerrt t += 1 with a view alive (a new version)",
        s.best("view"),
        "ms",
        s.best("view") / s.best("numpy"),
        "vs numpy",
    )
    add_row(result, "rounds written into t's own buffer", fig["rounds_in_own_buffer"], "share")
    add_row(result, "extra memory, numpy a += 1", fig["numpy_extra_bytes"] / nbytes, "x the array")
    add_row(
        result,
        "extra memory, eagerrt t += 1",
        fig["own_buffer_extra_bytes"] / nbytes,
        "x the array",
    )
    add_target(
        result, "own_buffer_vs_numpy", "t += 1 vs numpy", fig["own_buffer_vs_numpy"], 1.2, "<="
    )
    add_target(
        result,
        "own_buffer_extra",
        "t += 1 extra memory (x the array)",
        fig["own_buffer_extra_bytes"] / nbytes,
        0.01,
        "<=",
    )
    assert float(t[0, 0]) == float(a[0, 0])  # the same number of additions on both
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
