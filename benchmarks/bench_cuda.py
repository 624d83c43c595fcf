"""The cuda device against raw CuPy, side by side (needs a GPU; skips without one).

* per-op launch overhead: a chain of small elementwise ops through eagerrt vs
  the same CuPy calls (target <= 1.2x);
* 8192x8192 matmul, float32 and float16: throughput vs ``cupy.matmul``, a few
  products back to back per sample (target >= 0.95x);
* a staged model (16 stages of 64 MB weights, a few products each) whose next
  stage's weights upload (copy stream, pinned staging) while the current stage
  computes: wall vs max(transfer, compute) (target <= 1.1x; the first upload and
  the last stage's compute can't overlap anything, so few large stages can't
  reach it);
* the two host-completion strategies (callback, watcher): await latency of a
  tiny op.

``python benchmarks/bench_cuda.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, add_target, bench_main, finish, interleave, new_result, now_ns


def _gpu() -> tuple[Any, Any] | str:
    """(cupy, the cuda device), or why there is none."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install 'eagerrt[cuda12]')"
    try:
        return cupy, ert.get_device("cuda")
    except ert.DeviceError as exc:
        return str(exc)


def run(
    quick: bool = False,
    *,
    chain: int = 200,
    small: int = 1024,
    big: int = 8192,
    products: int = 5,
    stages: int = 16,
    stage_mb: int = 64,
    stage_products: int = 3,
    rounds: int | None = None,
) -> dict[str, Any]:
    """The cuda device vs raw CuPy: launch overhead, matmul, overlapped uploads."""
    rounds = rounds or (3 if quick else 10)
    gpu = _gpu()
    if isinstance(gpu, str):
        raise SystemExit(f"bench_cuda: skipped: {gpu}")
    cp, dev = gpu
    params = {
        "chain": chain,
        "small": small,
        "big": big,
        "products": products,
        "stages": stages,
        "stage_mb": stage_mb,
        "stage_products": stage_products,
    }
    result = new_result("cuda", "cuda device vs raw CuPy", quick, params)
    fig = result["figures"]

    # -- launch overhead -------------------------------------------------------------
    x_np = np.ones(small, "float32")
    x_cp = cp.asarray(x_np)
    x_ert = ert.asarray(x_np, device=dev)

    def raw_chain() -> float:
        start = now_ns()
        y = x_cp
        for _ in range(chain):
            y = y * 1.0001 + 0.5
        cp.cuda.get_current_stream().synchronize()
        return (now_ns() - start) / chain / 2

    side_stream = cp.cuda.Stream(non_blocking=True)

    def raw_stream_chain() -> float:
        """Raw CuPy entering a stream around each op, as the device must (its
        ops run on its own streams): what of the overhead is CuPy's."""
        start = now_ns()
        y = x_cp
        for _ in range(chain):
            with side_stream:
                y = y * 1.0001
            with side_stream:
                y = y + 0.5
        side_stream.synchronize()
        return (now_ns() - start) / chain / 2

    def ert_chain() -> float:
        start = now_ns()
        y = x_ert
        for _ in range(chain):
            y = y * 1.0001 + 0.5
        dev.synchronize()
        return (now_ns() - start) / chain / 2

    def chain_of(y: Any) -> Any:
        for _ in range(chain):
            y = y * 1.0001 + 0.5
        return y

    compiled = ert.function(chain_of)

    def compiled_chain() -> float:
        start = now_ns()
        compiled(x_ert)
        dev.synchronize()
        return (now_ns() - start) / chain / 2

    compiled_chain()  # traced and run plainly; the next call captures a CUDA graph
    s = interleave(
        {
            "cupy": raw_chain,
            "cupy_stream": raw_stream_chain,
            "eagerrt": ert_chain,
            "compiled": compiled_chain,
        },
        rounds,
    )
    fig["launch_ns_cupy"], fig["launch_ns_eagerrt"] = s.best("cupy"), s.best("eagerrt")
    fig["launch_vs_cupy"] = s.best("eagerrt") / s.best("cupy")
    fig["compiled_chain_vs_cupy"] = s.best("compiled") / s.best("cupy")
    plan = compiled.compiled_for(x_ert).plan
    fig["compiled_chain_captured"] = float(bool(getattr(plan, "captured", False)))
    if not fig["compiled_chain_captured"]:
        why = getattr(getattr(plan, "runner", None), "capture_error", None)
        print(f"bench_cuda: the compiled chain runs without a CUDA graph: {why!r}", flush=True)
    add_row(result, "per-op launch, raw CuPy", s.best("cupy"), "ns")
    fig["launch_ns_cupy_stream"] = s.best("cupy_stream")
    add_row(
        result,
        "per-op launch, raw CuPy, a stream entered per op",
        s.best("cupy_stream"),
        "ns",
        s.best("cupy_stream") / s.best("cupy"),
        "vs CuPy",
    )
    add_row(
        result, "per-op launch, eagerrt", s.best("eagerrt"), "ns", fig["launch_vs_cupy"], "vs CuPy"
    )
    add_row(
        result,
        "per op, compiled (CUDA graph)" if fig["compiled_chain_captured"] else "per op, compiled",
        s.best("compiled"),
        "ns",
        fig["compiled_chain_vs_cupy"],
        "vs CuPy",
    )
    add_target(
        result, "launch_vs_cupy", "launch overhead vs CuPy", fig["launch_vs_cupy"], 1.2, "<="
    )

    # -- big matmul -----------------------------------------------------------------------
    for dtype in ("float32", "float16"):
        a_cp = cp.random.standard_normal((big, big), dtype="float32").astype(dtype)
        a_ert = ert.asarray(cp.asnumpy(a_cp), device=dev)

        # Several products back to back, one wait: the GPU's throughput, not one
        # host round trip's latency.
        def raw_mm(a_cp: Any = a_cp) -> float:
            start = now_ns()
            for _ in range(products):
                cp.matmul(a_cp, a_cp)
            cp.cuda.get_current_stream().synchronize()
            return (now_ns() - start) / 1e6 / products

        def ert_mm(a_ert: Any = a_ert) -> float:
            start = now_ns()
            for _ in range(products):
                a_ert @ a_ert
            dev.synchronize()
            return (now_ns() - start) / 1e6 / products

        s = interleave({"cupy": raw_mm, "eagerrt": ert_mm}, rounds)
        throughput = s.best("cupy") / s.best("eagerrt")
        fig[f"matmul_{dtype}_vs_cupy"] = throughput
        add_row(result, f"{big}^2 matmul {dtype}, raw CuPy", s.best("cupy"), "ms")
        add_row(
            result,
            f"{big}^2 matmul {dtype}, eagerrt",
            s.best("eagerrt"),
            "ms",
            throughput,
            "throughput vs CuPy",
        )
        add_target(
            result, f"matmul_{dtype}", f"matmul {dtype} throughput vs CuPy", throughput, 0.95, ">="
        )

    # -- staged model: uploads overlapped with compute --------------------------------------
    side = int((stage_mb * 2**20 / 4) ** 0.5)
    weights = [
        np.random.default_rng(i).standard_normal((side, side)).astype("float32") / side
        for i in range(stages)
    ]
    act = ert.asarray(np.ones((side, side), "float32"), device=dev)

    def transfer_only() -> float:
        start = now_ns()
        ups = [ert.asarray(w, device=dev) for w in weights]
        dev.synchronize()
        del ups
        return (now_ns() - start) / 1e6

    resident = [ert.asarray(w, device=dev) for w in weights]

    def stage(h: Any, w: Any) -> Any:
        for _ in range(stage_products):
            h = ert.tanh(h @ w)
        return h

    def compute_only() -> float:
        start = now_ns()
        h = act
        for w in resident:
            h = stage(h, w)
        dev.synchronize()
        return (now_ns() - start) / 1e6

    def staged() -> float:
        start = now_ns()
        h = act
        w = ert.asarray(weights[0], device=dev)
        for i in range(stages):
            h = stage(h, w)  # enqueued: the GPU computes stage i while ...
            if i + 1 < stages:
                w = ert.asarray(weights[i + 1], device=dev)  # ... the next weights upload
        dev.synchronize()
        return (now_ns() - start) / 1e6

    s = interleave({"transfer": transfer_only, "compute": compute_only, "staged": staged}, rounds)
    bound = max(s.best("transfer"), s.best("compute"))
    fig["staged_vs_max"] = s.best("staged") / bound
    add_row(result, "weight uploads alone", s.best("transfer"), "ms")
    add_row(result, "stage compute alone", s.best("compute"), "ms")
    add_row(
        result,
        "staged model, uploads overlapped",
        s.best("staged"),
        "ms",
        fig["staged_vs_max"],
        "vs max",
    )
    add_target(
        result,
        "staged_vs_max",
        "staged wall / max(transfer, compute)",
        fig["staged_vs_max"],
        1.1,
        "<=",
    )

    # -- host completion strategies ---------------------------------------------------------
    from eagerrt.devices.cuda import CudaDevice

    timings = {}
    for completion in ("callback", "watcher"):
        d = CudaDevice(0, cp, completion=completion)
        t = ert.asarray(np.ones(16, "float32"), device=d)

        async def awaits(d: Any = d, t: Any = t, n: int = 200) -> float:
            start = now_ns()
            for _ in range(n):
                await (t + 1)
            return (now_ns() - start) / n / 1e3

        timings[completion] = lambda awaits=awaits: asyncio.run(awaits())
    s = interleave(timings, rounds)
    for completion in ("callback", "watcher"):
        fig[f"await_us_{completion}"] = s.best(completion)
        add_row(result, f"await of a tiny op, {completion}", s.best(completion), "us")
    return finish(result)


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    sys.exit(main())
