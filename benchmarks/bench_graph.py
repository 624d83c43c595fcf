"""Graph mode (``ert.function``) against eager eagerrt and hand-written code.

Four workloads, each timed with its candidates interleaved round by round in
one process:

* **tiny model**: 100 dependent 4x4 float32 matmuls ``x = x @ w``, per-op time:
  the hand-written numpy loop (baseline), a hand-fused numba loop of the same
  chain (the optimum TFRT compared itself with), eagerrt eager, eagerrt
  compiled awaited, called from sync code (``f(x).numpy()``) and through the
  embedded path (``f.run_sync(x)``, numpy in and out). Targets: compiled <=
  0.5x numpy; moonshot <= 1.3x numba; run_sync <= 1.3x numba, costing under
  0.6 us a call beyond the hand loop's (issue 23).
* **MLP** (batch 32, 784-512-512-10, relu, softmax): hand-written numpy
  (baseline), eagerrt eager, eagerrt compiled. Target: compiled <= 1.0x numpy.
* **normalize-then-concat** (TFRT's example): 18 features of shape (256, 1),
  each ``(x_i - mean_i) / std_i``, concatenated: hand-written numpy (baseline),
  eager, compiled.
* **steady-state memory** of the compiled MLP: arrays allocated per call (from
  the memory plan) and the peak bytes a call allocates (tracemalloc), eager
  and numpy alongside.
* **compile time** of the MLP's first call (trace, passes, lowering, numba),
  in fresh processes: with empty caches, then with numba's cache warm.

Run: ``python benchmarks/bench_graph.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from typing import Any

import numba
import numpy as np

import eagerrt as ert
from _common import (
    _load_snapshot,
    add_row,
    add_target,
    bench_main,
    finish,
    interleave_async,
    new_result,
    now_ns,
)

HERE = os.path.dirname(os.path.abspath(__file__))


# -- the tiny model -------------------------------------------------------------------------
@numba.njit(nogil=True, cache=True)
def _numba_chain(x: Any, w: Any, n: int, a: Any, b: Any) -> None:  # pragma: no cover
    """The chain hand-fused: n 4x4 products, ping-ponging two scratch buffers."""
    a[:] = x
    for _ in range(n):
        for i in range(4):
            for j in range(4):
                s = a[i, 0] * w[0, j]
                for k in range(1, 4):
                    s += a[i, k] * w[k, j]
                b[i, j] = s
        a, b = b, a


def _numpy_chain(x: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        x = x @ w
    return x


def tiny_model(result: dict[str, Any], quick: bool, n_ops: int, rounds: int, reps: int) -> None:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 4)) * 0.5).astype(np.float32)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    ew, ex = ert.asarray(w), ert.asarray(x)

    @ert.function
    async def compiled(x: Any) -> Any:
        for _ in range(n_ops):
            x = x @ ew
        return x

    async def eager(x: Any) -> Any:
        for _ in range(n_ops):
            x = x @ ew
        return x

    @ert.function
    def from_sync(x: Any) -> Any:  # the same chain, as a plain function
        for _ in range(n_ops):
            x = x @ ew
        return x

    scratch = (np.empty_like(x), np.empty_like(x))

    def per_op(fn: Any) -> Any:
        def candidate() -> float:
            start = now_ns()
            for _ in range(reps):
                fn()
            return (now_ns() - start) / (reps * n_ops)

        return candidate

    def per_op_async(fn: Any) -> Any:
        async def candidate() -> float:
            start = now_ns()
            for _ in range(reps):
                y = await fn(ex)
            await y
            return (now_ns() - start) / (reps * n_ops)

        return candidate

    candidates = {
        "numpy": per_op(lambda: _numpy_chain(x, w, n_ops)),
        "numba_fused": per_op(lambda: _numba_chain(x, w, n_ops, *scratch)),
        "eager": per_op_async(eager),
        "compiled": per_op_async(compiled),
        # From sync code: a tensor in, its array read back; and the embedded path.
        "compiled_sync": per_op(lambda: from_sync(ex).numpy()),
        "run_sync": per_op(lambda: from_sync.run_sync(x)),
    }

    async def measure() -> Any:
        expected = _numpy_chain(x, w, n_ops)
        np.testing.assert_allclose(await (await compiled(ex)), expected, rtol=1e-4, atol=1e-30)
        np.testing.assert_allclose(from_sync.run_sync(x), expected, rtol=1e-4, atol=1e-30)
        return await interleave_async(candidates, rounds, warm_up=True)

    samples = asyncio.run(measure())
    fig = result["figures"]
    _rows_vs_numpy(result, samples, "tiny", "ns/op", {
        "numpy": "tiny model: numpy loop `x = x @ w` (baseline)",
        "numba_fused": "tiny model: hand-fused numba loop",
        "eager": "tiny model: eagerrt eager",
        "compiled": "tiny model: eagerrt compiled (ert.function), awaited",
        "compiled_sync": "tiny model: eagerrt compiled, from sync code (`f(x).numpy()`)",
        "run_sync": "tiny model: eagerrt compiled, embedded path (`f.run_sync(x)`)",
    })  # fmt: skip
    fig["tiny_compiled_vs_numpy"] = samples.ratio("compiled", "numpy")
    for name in ("compiled", "compiled_sync", "run_sync"):
        fig[f"tiny_{name}_vs_numba"] = samples.ratio(name, "numba_fused")
        add_row(
            result, f"tiny model: {name} vs hand-fused numba", fig[f"tiny_{name}_vs_numba"], "x",
            None, "", samples.paired_ratio(name, "numba_fused"),
        )  # fmt: skip
    # What a run_sync call costs beyond the hand loop's own call (its kernel, the
    # region, matches the loop): the embedded path's overhead, per call.
    overhead = (samples.best("run_sync") - samples.best("numba_fused")) * n_ops / 1000
    fig["tiny_run_sync_overhead_us"] = overhead
    add_row(result, "tiny model: run_sync's cost over the hand loop, per call", overhead, "us")
    add_target(result, "tiny_compiled_vs_numpy", "tiny model: compiled / numpy loop",
               fig["tiny_compiled_vs_numpy"], 0.5, "<=")  # fmt: skip
    add_target(result, "tiny_compiled_vs_numba", "tiny model (moonshot): compiled / numba",
               fig["tiny_compiled_vs_numba"], 1.3, "<=")  # fmt: skip
    add_target(result, "tiny_run_sync_vs_numba", "tiny model: run_sync / numba (issue 23)",
               fig["tiny_run_sync_vs_numba"], 1.3, "<=")  # fmt: skip
    add_target(result, "tiny_run_sync_overhead", "tiny model: run_sync's overhead, us per call",
               overhead, 0.6, "<=")  # fmt: skip


def _rows_vs_numpy(
    result: dict[str, Any], samples: Any, key: str, unit: str, labels: dict[str, str]
) -> None:
    """One row per candidate (best round, ratio and median paired ratio to
    "numpy"), and its best time as figure ``{key}_{name}_{unit}``."""
    figure_unit = unit.replace("/", "_per_")
    for name, label in labels.items():
        result["figures"][f"{key}_{name}_{figure_unit}"] = samples.best(name)
        add_row(
            result, label, samples.best(name), unit,
            samples.ratio(name, "numpy"), "vs numpy", samples.paired_ratio(name, "numpy"),
        )  # fmt: skip


# -- the MLP ----------------------------------------------------------------------------------
def _us_per_call(fn: Any, reps: int) -> Any:
    """A candidate timing ``fn()``: microseconds per call."""

    def candidate() -> float:
        start = now_ns()
        for _ in range(reps):
            fn()
        return (now_ns() - start) / reps / 1000

    return candidate


def _us_per_call_async(fn: Any, arg: Any, reps: int) -> Any:
    """A candidate timing ``await (await fn(arg))``: microseconds per call."""

    async def candidate() -> float:
        start = now_ns()
        for _ in range(reps):
            await (await fn(arg))
        return (now_ns() - start) / reps / 1000

    return candidate


def mlp_weights(sizes: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        params.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype("float32"))
        params.append((rng.standard_normal(fan_out) * 0.1).astype("float32"))
    return params


def numpy_mlp(x: np.ndarray, params: list[np.ndarray]) -> np.ndarray:
    """Dense layers with relu between them, softmax at the end: as a user writes it."""
    h = x
    for i in range(0, len(params) - 2, 2):
        h = np.maximum(h @ params[i] + params[i + 1], 0)
    z = h @ params[-2] + params[-1]
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def make_mlp(params: list[np.ndarray]) -> Any:
    weights = [ert.asarray(p) for p in params]

    async def mlp(x: Any) -> Any:
        h = x
        for i in range(0, len(weights) - 2, 2):
            h = ert.relu(h @ weights[i] + weights[i + 1])
        return ert.softmax(h @ weights[-2] + weights[-1], axis=-1)

    return mlp


def mlp_bench(
    result: dict[str, Any], batch: int, sizes: tuple[int, ...], rounds: int, reps: int
) -> None:
    params = mlp_weights(sizes)
    x = np.random.default_rng(1).standard_normal((batch, sizes[0])).astype("float32")
    ex = ert.asarray(x)
    eager = make_mlp(params)
    compiled = ert.function(eager)

    candidates = {
        "numpy": _us_per_call(lambda: numpy_mlp(x, params), reps),
        "eager": _us_per_call_async(eager, ex, reps),
        "compiled": _us_per_call_async(compiled, ex, reps),
    }

    async def measure() -> Any:
        expected = numpy_mlp(x, params)
        np.testing.assert_allclose(await (await compiled(ex)), expected, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(await (await eager(ex)), expected, rtol=1e-4, atol=1e-6)
        return await interleave_async(candidates, rounds, warm_up=True)

    samples = asyncio.run(measure())
    fig = result["figures"]
    _rows_vs_numpy(result, samples, "mlp", "us/call", {
        "numpy": "MLP: hand-written numpy (baseline)",
        "eager": "MLP: eagerrt eager",
        "compiled": "MLP: eagerrt compiled",
    })  # fmt: skip
    fig["mlp_compiled_vs_numpy"] = samples.ratio("compiled", "numpy")
    fig["mlp_compiled_vs_eager"] = samples.ratio("compiled", "eager")
    add_target(result, "mlp_compiled_vs_numpy", "MLP: compiled / hand-written numpy",
               fig["mlp_compiled_vs_numpy"], 1.0, "<=")  # fmt: skip
    _memory(result, compiled, eager, ex, x, params)


async def _peak_growth(call: Any, calls: int) -> int:
    """The most memory ``await call()`` had allocated at once above what it
    started with, over ``calls`` calls, inside one event loop (starting a loop
    allocates too)."""
    await call()  # warm: a compiled function's buffers are made once
    gc.collect()
    tracemalloc.start()
    try:
        worst = 0
        for _ in range(calls):
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            await call()
            worst = max(worst, tracemalloc.get_traced_memory()[1] - start)
    finally:
        tracemalloc.stop()
    return worst


def _memory(
    result: dict[str, Any], compiled: Any, eager: Any, ex: Any, x: np.ndarray, params: Any
) -> None:
    """Steady state: what one more call allocates."""

    async def call(fn: Any) -> None:
        await (await fn(ex))

    async def numpy_call() -> None:
        numpy_mlp(x, params)

    asyncio.run(call(compiled))
    plan = compiled.compiled_for(ex).plan
    new_arrays = sum(1 for s in plan.steps if s.out_form is None)
    fig = result["figures"]
    fig["mlp_compiled_new_arrays_per_call"] = new_arrays
    add_row(result, "MLP compiled: new arrays per call (memory plan)", new_arrays, "arrays")
    peaks = {
        "compiled": asyncio.run(_peak_growth(lambda: call(compiled), 5)),
        "eager": asyncio.run(_peak_growth(lambda: call(eager), 5)),
        "numpy": asyncio.run(_peak_growth(numpy_call, 5)),
    }
    for name in ("numpy", "eager", "compiled"):
        fig[f"mlp_{name}_peak_bytes_per_call"] = peaks[name]
        add_row(result, f"MLP {name}: peak bytes allocated per call", peaks[name], "bytes")
    add_target(result, "mlp_compiled_new_arrays", "MLP compiled: new arrays per call",
               new_arrays, 0, "<=")  # fmt: skip


# -- normalize-then-concat ------------------------------------------------------------------------
def normalize_bench(result: dict[str, Any], batch: int, rounds: int, reps: int) -> None:
    n = 18
    rng = np.random.default_rng(2)
    means = [float(m) for m in rng.standard_normal(n)]
    stds = [float(s) for s in rng.uniform(0.5, 2.0, n)]
    features = [rng.standard_normal((batch, 1)).astype("float32") for _ in range(n)]
    e_features = [ert.asarray(f) for f in features]
    e_means = [ert.asarray(np.float32(m)) for m in means]
    e_stds = [ert.asarray(np.float32(s)) for s in stds]

    def numpy_normalize(fs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(
            [(f - np.float32(m)) / np.float32(s) for f, m, s in zip(fs, means, stds, strict=True)],
            axis=1,
        )

    async def normalize(fs: list[Any]) -> Any:
        return ert.concat(
            [(f - m) / s for f, m, s in zip(fs, e_means, e_stds, strict=True)], axis=1
        )

    compiled = ert.function(normalize)

    candidates = {
        "numpy": _us_per_call(lambda: numpy_normalize(features), reps),
        "eager": _us_per_call_async(normalize, e_features, reps),
        "compiled": _us_per_call_async(compiled, e_features, reps),
    }

    async def measure() -> Any:
        expected = numpy_normalize(features)
        np.testing.assert_allclose(await (await compiled(e_features)), expected, rtol=1e-5)
        return await interleave_async(candidates, rounds, warm_up=True)

    samples = asyncio.run(measure())
    graph = compiled.compiled_for(e_features).graph
    result["params"]["normalize_compiled_ops"] = ", ".join(n.name for n in graph.nodes)
    fig = result["figures"]
    _rows_vs_numpy(result, samples, "normalize", "us/call", {
        "numpy": "normalize+concat: hand-written numpy (baseline)",
        "eager": "normalize+concat: eagerrt eager",
        "compiled": "normalize+concat: eagerrt compiled",
    })  # fmt: skip
    fig["normalize_compiled_vs_numpy"] = samples.ratio("compiled", "numpy")
    add_target(result, "normalize_compiled_vs_numpy", "normalize+concat: compiled / numpy",
               fig["normalize_compiled_vs_numpy"], 1.0, "<=")  # fmt: skip


# -- compile time -----------------------------------------------------------------------------
_COMPILE_SCRIPT = """
import asyncio, json, sys, time
sys.path.insert(0, {here!r})
t0 = time.perf_counter()
import numpy as np, eagerrt as ert
from bench_graph import make_mlp, mlp_weights
imported = time.perf_counter()
compiled = ert.function(make_mlp(mlp_weights({sizes!r})))
x = ert.asarray(np.ones(({batch}, {sizes[0]}), "float32"))
async def first():
    start = time.perf_counter()
    y = await compiled(x)
    await y
    return time.perf_counter() - start
print(json.dumps({{"first_call_s": asyncio.run(first()), "import_s": imported - t0}}))
"""


def compile_time(result: dict[str, Any], batch: int, sizes: tuple[int, ...]) -> None:
    script = _COMPILE_SCRIPT.format(here=HERE, sizes=sizes, batch=batch)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, EAGERRT_CACHE_DIR=cache)
        runs = []
        for _ in range(2):  # the first with empty caches, the second with them warm
            out = subprocess.run(
                [sys.executable, "-c", script], env=env, capture_output=True, text=True,
                check=True, timeout=600,
            )  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    fig = result["figures"]
    fig["mlp_first_call_cold_s"] = runs[0]["first_call_s"]
    fig["mlp_first_call_warm_s"] = runs[1]["first_call_s"]
    add_row(result, "MLP first call: trace + compile, empty caches", runs[0]["first_call_s"], "s")
    add_row(result, "MLP first call: trace + compile, numba cache warm",
            runs[1]["first_call_s"], "s")  # fmt: skip


def run(
    quick: bool = False,
    *,
    n_ops: int = 100,
    batch: int = 32,
    sizes: tuple[int, ...] = (784, 512, 512, 10),
    rounds: int | None = None,
    reps: int | None = None,
    with_compile_time: bool = True,
) -> dict[str, Any]:
    """Graph mode: tiny model, MLP, normalize+concat, memory, compile time."""
    rounds = rounds or (3 if quick else 15)
    reps = reps or (20 if quick else 200)
    result = new_result(
        "graph",
        "Graph mode: ert.function vs eager and hand-written code",
        quick,
        {"tiny_n_ops": n_ops, "mlp": f"{batch}x" + "-".join(map(str, sizes)), "rounds": rounds},
    )
    if with_compile_time:
        compile_time(result, batch, sizes)
        # The compile-time runs are child processes: don't count them as the
        # "other processes" whose load makes the timings below unreliable.
        result["_load_start"] = _load_snapshot()
    tiny_model(result, quick, n_ops, rounds, reps)
    mlp_bench(result, batch, sizes, rounds, max(1, reps // 10))
    normalize_bench(result, 256, rounds, max(1, reps // 4))
    return finish(result)


def main(argv: list[str] | None = None) -> None:
    bench_main(run, argv)


if __name__ == "__main__":
    main()
