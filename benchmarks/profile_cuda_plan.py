"""Where a compiled model's time goes on the GPU: its plan's kernels timed one by one.

A compiled function on the cuda device runs as one captured CUDA graph, so
the profiler sees one unit of work. This script runs the plan's steps itself,
each between two CUDA events (after a warm-up run), and sums the time by op:
the table says which kernels a model's speed rests on. Timing each step alone
adds its launch to its time, so the sum is above the captured graph's; the
shares are what matters. Needs a GPU and CuPy (and the bundled MiniLM).

``python benchmarks/profile_cuda_plan.py [--batch 32] [--tf32]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
from typing import Any

import numpy as np

import eagerrt as ert
from _common import example_model, minilm_batch


def step_times(plan: Any, natives: list[Any], cp: Any) -> dict[str, list[float]]:
    """Milliseconds of each of the plan's steps by op name (one run, after one warm-up)."""
    device = plan.device
    n_inputs = len(plan.graph.inputs)
    times: dict[str, list[float]] = collections.defaultdict(list)
    for timed in (False, True):
        results: list[Any] = [None] * plan._result_count
        for op, kernel, sources, static, first in plan._steps:
            args = []
            for kind, at in sources:
                args.append(
                    results[at] if kind == 1 else natives[at] if kind == 0
                    else natives[n_inputs + at] if kind == 2 else at
                )  # fmt: skip
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            out = device.call_kernel(op, kernel, args, static)
            stop.record()
            if isinstance(out, (tuple, list)):
                results[first : first + len(out)] = out
            else:
                results[first] = out
            if timed:
                stop.synchronize()
                times[op.name].append(cp.cuda.get_elapsed_time(start, stop))
    return times


async def _wait(result: Any) -> Any:
    return await result


def report(title: str, times: dict[str, list[float]]) -> None:
    total = sum(sum(t) for t in times.values())
    print(f"\n{title}: {sum(len(t) for t in times.values())} kernels, {total:.2f} ms timed alone")
    print("op | calls | ms | share")
    for name, t in sorted(times.items(), key=lambda item: -sum(item[1])):
        print(f"{name} | {len(t)} | {sum(t):.3f} | {sum(t) / total:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tf32", action="store_true")
    args = parser.parse_args()
    try:
        import cupy as cp

        dev = ert.get_device("cuda")
    except (ImportError, ert.DeviceError) as exc:
        raise SystemExit(f"profile_cuda_plan: skipped: {exc}") from None
    from eagerrt.graph.native_plan import NativePlan

    rng = np.random.default_rng(0)
    resnet50 = example_model("resnet50")
    torch_reference = example_model("torch_reference")
    minilm = example_model("minilm")
    shapes = resnet50.state_dict_shapes()
    state = {k: rng.standard_normal(s).astype(np.float32) * 0.05 for k, s in shapes.items()}
    for k in state:
        if k.endswith("running_var"):
            state[k] = np.abs(state[k]) + 1.0
    models = [
        ("ResNet-50", resnet50.ResNet50.from_state_dict(state, device=dev),
         (rng.standard_normal((args.batch, 3, 224, 224)).astype(np.float32),)),
        ("MiniLM", minilm.MiniLM.from_pretrained(torch_reference.minilm_path(), device=dev),
         minilm_batch(args.batch, 128)),
    ]  # fmt: skip
    with ert.config.override(cuda_tf32=args.tf32):
        for name, model, inputs in models:
            on_dev = [ert.asarray(a, device=dev) for a in inputs]
            compiled = model.compiled
            result = compiled(*on_dev)  # traced, then run plainly
            if inspect.isawaitable(result):
                asyncio.run(_wait(result))
            plan = compiled.compiled_for(*on_dev).plan
            if not isinstance(plan, NativePlan):
                print(f"{name}: not a native plan ({type(plan).__name__})")
                continue
            natives = [t._value.native for t in on_dev] + [c._value.native for c in plan._constants]
            report(f"{name}, batch {args.batch}", step_times(plan, natives, cp))


if __name__ == "__main__":
    main()
