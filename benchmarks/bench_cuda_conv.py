"""ResNet-50's convolution shapes on the cuda device against PyTorch's cuDNN, layer by layer.

Where a model's time goes on the GPU: each layer is timed alone (CUDA events
around ``reps`` back-to-back calls, best of a few rounds) as eagerrt's cuda
kernel through cuDNN (``backends/cuda/dnn.py``) in float32 and on TF32 tensor cores
(``config.cuda_tf32``), as its cuBLAS products (``config.cuda_cudnn`` off:
shifted windows, im2col, or the images themselves for 1x1 layers) on TF32, and
as ``torch.nn.functional.conv2d`` with and without TF32. Needs a GPU, CuPy and
PyTorch.

``python benchmarks/bench_cuda_conv.py [--quick] [--batch 32]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import eagerrt as ert

#: (name, in channels, out channels, kernel, stride, padding, input side).
LAYERS = [
    ("stem 7x7/2", 3, 64, 7, 2, 3, 224),
    ("1x1 256->64 @56", 256, 64, 1, 1, 0, 56),
    ("3x3 64->64 @56", 64, 64, 3, 1, 1, 56),
    ("1x1 64->256 @56", 64, 256, 1, 1, 0, 56),
    ("3x3/2 128 @56", 128, 128, 3, 2, 1, 56),
    ("3x3 256->256 @14", 256, 256, 3, 1, 1, 14),
    ("1x1 1024->2048/2 @14", 1024, 2048, 1, 2, 0, 14),
    ("3x3 512->512 @7", 512, 512, 3, 1, 1, 7),
]


def _time(cp: Any, fn: Callable[[], Any], reps: int, rounds: int) -> float:
    """Best per-call milliseconds over ``rounds`` of ``reps`` calls (CUDA events)."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop) / reps)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    try:
        import cupy as cp
        import torch
        import torch.nn.functional as F
    except ImportError as exc:
        raise SystemExit(f"bench_cuda_conv: skipped: {exc}") from None
    from eagerrt.backends.cuda import nn as _cuda_nn

    reps, rounds = (3, 2) if args.quick else (10, 3)
    rng = np.random.default_rng(0)
    print(f"conv2d at batch {args.batch}, ms per call (best of {rounds} x {reps} calls)")
    header = ["layer", "eagerrt fp32", "eagerrt tf32", "cuBLAS tf32", "torch fp32", "torch tf32"]
    print(" | ".join([*header, "fp32 ratio", "tf32 ratio"]))
    totals = np.zeros(5)
    for name, c, o, k, s, p, side in LAYERS:
        x = rng.standard_normal((args.batch, c, side, side), np.float32)
        w = rng.standard_normal((o, c, k, k), np.float32) * 0.05
        xc, wc = cp.asarray(x), cp.asarray(w)
        xt, wt = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        row = []

        def ours(xc: Any = xc, wc: Any = wc, s: int = s, p: int = p) -> Any:
            return _cuda_nn.conv2d(xc, wc, stride=s, padding=p)

        def theirs(xt: Any = xt, wt: Any = wt, s: int = s, p: int = p) -> Any:
            return F.conv2d(xt, wt, stride=s, padding=p)

        for tf32, cudnn in ((False, True), (True, True), (True, False)):
            with ert.config.override(cuda_tf32=tf32, cuda_cudnn=cudnn):
                row.append(_time(cp, ours, reps, rounds))
        for tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = tf32
            with torch.inference_mode():
                row.append(_time(cp, theirs, reps, rounds))
        torch.backends.cudnn.allow_tf32 = True
        totals += row
        ratios = f" | {row[0] / row[3]:.2f}x | {row[1] / row[4]:.2f}x"
        print(f"{name} | " + " | ".join(f"{t:.3f}" for t in row) + ratios)
    ratios = f" | {totals[0] / totals[3]:.2f}x | {totals[1] / totals[4]:.2f}x"
    print("all | " + " | ".join(f"{t:.3f}" for t in totals) + ratios)
    from eagerrt.backends.cuda import dnn as _cuda_dnn

    library = _cuda_dnn._library()
    print("cuDNN:", f"version {library.version}" if library else "not found (cuBLAS path only)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
