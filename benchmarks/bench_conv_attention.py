"""Heavy NN ops: ``conv2d`` and ``scaled_dot_product_attention`` on real sizes.

* conv2d: a 32x64x56x56 float32 input, 64x64x3x3 weights, padding 1 (a ResNet
  stage's 3x3 convolution, 3.7 GFLOP);
* attention: float32 q, k, v of 8x12x128x64 (batch 8, 12 heads, 128 tokens).

Each is timed, interleaved round by round in one process, as:

* a numpy-only reference (im2col by ``sliding_window_view`` + ``tensordot``;
  attention by batched matmuls and a numpy softmax): the baseline;
* PyTorch on the CPU with its default threads (if torch imports);
* eagerrt: the op call plus ``await`` of its result (it runs on a worker).

Targets (from the issue): eagerrt within 1.5x of PyTorch for both.

Run: ``python benchmarks/bench_conv_attention.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np

import eagerrt as ert
from _common import add_row, add_target, bench_main, finish, interleave_async, new_result, now_ns

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # torch is an optional (bench) extra
    torch = None


# -- numpy-only references ----------------------------------------------------------------
def numpy_conv2d(x: np.ndarray, w: np.ndarray, padding: int, chunk: int = 4) -> np.ndarray:
    """im2col by strided views, a ``tensordot`` per chunk of images."""
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    outs = []
    for i in range(0, x.shape[0], chunk):
        windows = np.lib.stride_tricks.sliding_window_view(xp[i : i + chunk], (kh, kw), axis=(2, 3))
        # windows: (n, C, Ho, Wo, kh, kw); contract C, kh, kw with the weight.
        outs.append(np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2))
    return np.ascontiguousarray(np.concatenate(outs))


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = q @ np.swapaxes(k, -1, -2)
    s *= 1 / math.sqrt(q.shape[-1])
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s @ v


# -- the benchmark -------------------------------------------------------------------------------
def run(
    quick: bool = False,
    *,
    conv_shape: tuple[int, int, int, int] = (32, 64, 56, 56),
    conv_out: int = 64,
    attn_shape: tuple[int, int, int, int] = (8, 12, 128, 64),
    rounds: int | None = None,
) -> dict[str, Any]:
    """conv2d and scaled_dot_product_attention: numpy, PyTorch, eagerrt."""
    conv_rounds = rounds or (2 if quick else 7)
    attn_rounds = rounds or (3 if quick else 25)
    attn_reps = 3 if quick else 10  # attention calls per timed sample (a few ms each)
    result = new_result(
        "conv_attention",
        "conv2d and scaled_dot_product_attention (float32, full call + await)",
        quick,
        {
            "conv_input": "x".join(map(str, conv_shape)),
            "conv_weight": f"{conv_out}x{conv_shape[1]}x3x3, padding 1",
            "attention_qkv": "x".join(map(str, attn_shape)),
            "conv_rounds": conv_rounds,
            "attention_rounds": attn_rounds,
            "attention_calls_per_round": attn_reps,
        },
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal(conv_shape).astype(np.float32)
    w = (rng.standard_normal((conv_out, conv_shape[1], 3, 3)) * 0.05).astype(np.float32)
    q, k, v = (rng.standard_normal(attn_shape).astype(np.float32) for _ in range(3))
    ex, ew = ert.asarray(x), ert.asarray(w)
    eq, ek, ev = ert.asarray(q), ert.asarray(k), ert.asarray(v)

    def timed(fn: Any, reps: int = 1) -> Any:
        def candidate() -> float:
            start = now_ns()
            for _ in range(reps):
                fn()
            return (now_ns() - start) / reps / 1e6

        return candidate

    def timed_async(make: Any, reps: int = 1) -> Any:
        async def candidate() -> float:
            start = now_ns()
            for _ in range(reps):
                await make()
            return (now_ns() - start) / reps / 1e6

        return candidate

    conv: dict[str, Any] = {
        "numpy": timed(lambda: numpy_conv2d(x, w, 1)),
        "eagerrt": timed_async(lambda: ert.conv2d(ex, ew, padding=1)),
    }
    attn: dict[str, Any] = {
        "numpy": timed(lambda: numpy_attention(q, k, v), attn_reps),
        "eagerrt": timed_async(lambda: ert.scaled_dot_product_attention(eq, ek, ev), attn_reps),
    }
    if torch is not None:
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        tq, tk, tv = torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v)
        conv["torch"] = timed(lambda: F.conv2d(tx, tw, padding=1))
        attn["torch"] = timed(lambda: F.scaled_dot_product_attention(tq, tk, tv), attn_reps)
        result["params"]["torch_threads"] = torch.get_num_threads()

    async def measure() -> Any:
        # Correctness first (and warm-up: numba's compiled kernels load on first use).
        want_conv = numpy_conv2d(x, w, 1)
        np.testing.assert_allclose(
            await ert.conv2d(ex, ew, padding=1), want_conv, rtol=1e-3, atol=1e-3
        )
        want_attn = numpy_attention(q, k, v)
        got_attn = await ert.scaled_dot_product_attention(eq, ek, ev)
        np.testing.assert_allclose(got_attn, want_attn, rtol=1e-4, atol=1e-5)
        if torch is not None:
            np.testing.assert_allclose(
                F.conv2d(tx, tw, padding=1).numpy(), want_conv, rtol=1e-3, atol=1e-3
            )
        before = ert.stats()
        conv_samples = await interleave_async(conv, conv_rounds, warm_up=True)
        attn_samples = await interleave_async(attn, attn_rounds, warm_up=True)
        offloaded = ert.stats().ops_offloaded - before.ops_offloaded
        return conv_samples, attn_samples, offloaded

    conv_samples, attn_samples, offloaded = asyncio.run(measure())
    result["samples_ms"] = {"conv2d": conv_samples.to_json(), "attention": attn_samples.to_json()}
    fig = result["figures"]
    fig["eagerrt_ops_offloaded"] = offloaded
    for label, samples in (("conv2d", conv_samples), ("attention", attn_samples)):
        for name in samples.names:
            fig[f"{label}_{name}_ms"] = samples.best(name)
            add_row(
                result,
                f"{label}: {_LABELS[name]}",
                samples.best(name),
                "ms",
                samples.ratio(name, "numpy"),
                "vs numpy",
                samples.paired_ratio(name, "numpy"),
            )
        fig[f"{label}_eagerrt_vs_numpy"] = samples.ratio("eagerrt", "numpy")
        if torch is not None:
            ratio = fig[f"{label}_eagerrt_vs_torch"] = samples.ratio("eagerrt", "torch")
            paired = fig[f"{label}_eagerrt_vs_torch_paired"] = samples.paired_ratio(
                "eagerrt", "torch"
            )
            add_row(result, f"{label}: eagerrt vs PyTorch", ratio, "x", None, "", paired)
            add_target(
                result,
                f"{label}_vs_torch",
                f"{label}: eagerrt / PyTorch",
                ratio,
                1.5,
                "<=",
            )
    if torch is None:
        result["notes"].append("torch is not installed: the PyTorch comparison was skipped")
    return finish(result)


_LABELS = {
    "numpy": "numpy-only reference (baseline)",
    "torch": "PyTorch CPU",
    "eagerrt": "eagerrt call + await",
}


def main() -> None:
    bench_main(run)


if __name__ == "__main__":
    main()
