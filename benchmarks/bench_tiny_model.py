"""Tiny model: a chain of dependent 4x4 float32 matmuls, per-op overhead.

``x = x @ w`` repeated ``n_ops`` times (w scaled by 0.1 so values stay finite),
timed as:

* a hand-written numpy loop (the baseline);
* numpy with ``x.dot(w)`` (for reference: the kernel eagerrt's matmul calls);
* PyTorch eager on the CPU, one thread (if torch imports);
* eagerrt eager: an ``async def`` with one ``await`` at the end, run under one
  ``asyncio.run`` that times the model call repeated many times;
* eagerrt in sync mode (``ert.sync_mode()``, ``.numpy()`` at the end).

All candidates run interleaved in the same event loop, in the same process.
Targets (from the issue): eagerrt eager <= 1.5x the numpy loop, <= 1.0x PyTorch.

Run: ``python benchmarks/bench_tiny_model.py [--quick]``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, add_target, bench_main, finish, interleave_async, new_result, now_ns

try:
    import torch
except ImportError:  # torch is an optional (bench) extra
    torch = None


def _numpy_model(x: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        x = x @ w
    return x


def _numpy_dot_model(x: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        x = x.dot(w)
    return x


def _torch_model(x: Any, w: Any, n: int) -> Any:
    for _ in range(n):
        x = x @ w
    return x


async def _eager_model(x: ert.Tensor, w: ert.Tensor, n: int) -> np.ndarray:
    for _ in range(n):
        x = x @ w
    return await x


def _sync_model(x: ert.Tensor, w: ert.Tensor, n: int) -> np.ndarray:
    for _ in range(n):
        x = x @ w
    return x.numpy()


def run(
    quick: bool = False, *, n_ops: int = 100, rounds: int | None = None, reps: int | None = None
) -> dict[str, Any]:
    """Per-op time of a tiny dependent matmul chain: numpy, torch, eagerrt."""
    rounds = rounds or (3 if quick else 25)
    reps = reps or (20 if quick else 200)
    result = new_result(
        "tiny_model",
        f"Tiny model: {n_ops} dependent 4x4 float32 matmuls (per-op time)",
        quick,
        {"n_ops": n_ops, "rounds": rounds, "model_calls_per_round": reps},
    )
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 4)) * 0.1).astype(np.float32)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    ex, ew = ert.asarray(x), ert.asarray(w)
    expected = _numpy_model(x, w, n_ops)

    def timed(model: Any, a: Any, b: Any) -> Any:
        def candidate() -> float:
            start = now_ns()
            for _ in range(reps):
                model(a, b, n_ops)
            return (now_ns() - start) / (reps * n_ops)

        return candidate

    async def eager() -> float:
        start = now_ns()
        for _ in range(reps):
            await _eager_model(ex, ew, n_ops)
        return (now_ns() - start) / (reps * n_ops)

    def sync() -> float:
        with ert.sync_mode():
            start = now_ns()
            for _ in range(reps):
                _sync_model(ex, ew, n_ops)
            return (now_ns() - start) / (reps * n_ops)

    candidates: dict[str, Any] = {
        "numpy": timed(_numpy_model, x, w),
        "numpy_dot": timed(_numpy_dot_model, x, w),
        "eagerrt_eager": eager,
        "eagerrt_sync": sync,
    }
    torch_threads = None
    if torch is not None:
        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        tx, tw = torch.from_numpy(x.copy()), torch.from_numpy(w.copy())
        candidates["torch"] = timed(_torch_model, tx, tw)
        result["params"]["torch_threads"] = 1

    async def measure() -> Any:
        # Correctness first (and warm-up: caches, the fast path's inline cache).
        got = await _eager_model(ex, ew, n_ops)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-30)
        with ert.sync_mode():
            np.testing.assert_allclose(_sync_model(ex, ew, n_ops), expected, rtol=1e-5, atol=1e-30)
        if torch is not None:
            np.testing.assert_allclose(
                _torch_model(tx, tw, n_ops).numpy(), expected, rtol=1e-4, atol=1e-30
            )
        before = ert.stats()
        samples = await interleave_async(candidates, rounds, warm_up=True)
        after = ert.stats()
        return samples, after.ops_offloaded - before.ops_offloaded

    try:
        samples, offloaded = asyncio.run(measure())
    finally:
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)

    result["samples_ns_per_op"] = samples.to_json()
    fig = result["figures"]
    for name in samples.names:
        fig[f"{name}_ns_per_op"] = samples.best(name)
    fig["eagerrt_ops_offloaded"] = offloaded
    fig["eager_vs_numpy"] = samples.ratio("eagerrt_eager", "numpy")
    fig["eager_vs_numpy_paired"] = samples.paired_ratio("eagerrt_eager", "numpy")
    fig["sync_vs_numpy"] = samples.ratio("eagerrt_sync", "numpy")
    fig["eager_overhead_ns_per_op"] = samples.best("eagerrt_eager") - samples.best("numpy_dot")

    def row(label: str, name: str) -> None:
        add_row(
            result,
            label,
            samples.best(name),
            "ns/op",
            samples.ratio(name, "numpy"),
            "vs numpy",
            samples.paired_ratio(name, "numpy"),
        )

    row("numpy loop `x = x @ w` (baseline)", "numpy")
    row("numpy loop `x = x.dot(w)` (reference)", "numpy_dot")
    if torch is not None:
        row("PyTorch eager, CPU, 1 thread", "torch")
    row("eagerrt eager (asyncio, one await)", "eagerrt_eager")
    row("eagerrt sync mode", "eagerrt_sync")

    add_target(
        result, "eager_vs_numpy", "eagerrt eager / numpy loop", fig["eager_vs_numpy"], 1.5, "<="
    )
    if torch is not None:
        fig["eager_vs_torch"] = samples.ratio("eagerrt_eager", "torch")
        fig["eager_vs_torch_paired"] = samples.paired_ratio("eagerrt_eager", "torch")
        fig["torch_vs_numpy"] = samples.ratio("torch", "numpy")
        add_row(
            result,
            "eagerrt eager vs PyTorch",
            fig["eager_vs_torch"],
            "x",
            None,
            "",
            fig["eager_vs_torch_paired"],
        )
        add_target(
            result,
            "eager_vs_torch",
            "eagerrt eager / PyTorch eager",
            fig["eager_vs_torch"],
            1.0,
            "<=",
        )
    else:
        result["notes"].append("torch is not installed: the PyTorch comparison was skipped")
    if offloaded:
        result["notes"].append(
            f"{offloaded} ops were offloaded during warm-up and timing (expected 0)"
        )
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
