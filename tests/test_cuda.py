"""The cuda device on a real GPU (``gpu`` marker; skipped without CuPy or a GPU).

The stream logic itself is tested in CI by ``test_stream_device.py`` on the
thread-backed test device, and the neural-network kernels' arithmetic on numpy by
``test_cuda_kernels_on_numpy.py``; these tests check CuPy's half: every op
against the CPU (none of them run on the host), streams and events, copies,
out-of-memory, the event loop kept free while the GPU works, graph mode and its
CUDA graphs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

import eagerrt as ert

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip(
    "cupy", reason="the cuda tests need CuPy (pip install 'eagerrt[cuda12]')"
)
try:
    DEV = ert.get_device("cuda")
except ert.DeviceError as exc:
    pytest.skip(f"no usable GPU: {exc}", allow_module_level=True)


def test_every_op_matches_the_cpu() -> None:
    from device_records import record_failures

    DEV.host_fallbacks.clear()
    failures = [f for f in record_failures(DEV) if "operands are on different devices" not in f]
    fallbacks = dict(DEV.host_fallbacks)
    print(f"ops run on the host (generic kernels refusing cupy arrays): {fallbacks}")
    assert not failures, "\n".join(failures)
    assert not fallbacks, f"ops silently run on the host: {fallbacks}"


NN_CASES = {
    "conv2d": lambda d: ert.conv2d(_t(d, 2, 3, 9, 9), _t(d, 4, 3, 3, 3), _t(d, 4), padding=1),
    "conv2d 1x1": lambda d: ert.conv2d(_t(d, 2, 8, 5, 5), _t(d, 16, 8, 1, 1)),
    "linear": lambda d: ert.linear(_t(d, 2, 5, 6), _t(d, 4, 6), _t(d, 4)),
    "attention": lambda d: ert.scaled_dot_product_attention(
        _t(d, 2, 4, 5, 8), _t(d, 2, 4, 7, 8), _t(d, 2, 4, 7, 8)
    ),
    "causal attention": lambda d: ert.scaled_dot_product_attention(
        _t(d, 1, 2, 6, 8), _t(d, 1, 2, 6, 8), _t(d, 1, 2, 6, 8), is_causal=True
    ),
    "layer_norm": lambda d: ert.layer_norm(_t(d, 3, 4, 6), (6,), _t(d, 6), _t(d, 6)),
    "group_norm": lambda d: ert.group_norm(_t(d, 3, 4, 6), 2, _t(d, 4), _t(d, 4)),
    "batch_norm": lambda d: ert.batch_norm(
        _t(d, 3, 4, 5, 5), _t(d, 4), ert.abs(_t(d, 4)) + 0.5, _t(d, 4), _t(d, 4)
    ),
    "max_pool2d": lambda d: ert.max_pool2d(_t(d, 2, 3, 9, 9), 3, 2, 1),
    "avg_pool2d": lambda d: ert.avg_pool2d(_t(d, 2, 3, 9, 9), 3, 2, 1),
    "adaptive_avg_pool2d": lambda d: ert.adaptive_avg_pool2d(_t(d, 2, 3, 7, 7), 1),
    "gelu": lambda d: ert.gelu(_t(d, 64)),
    "softmax": lambda d: ert.softmax(_t(d, 4, 9), axis=-1),
    "silu": lambda d: ert.silu(_t(d, 64)),
    "embedding": lambda d: ert.embedding(
        ert.asarray(np.array([[1, 0], [3, 2]]), device=d), _t(d, 4, 5)
    ),
}


def _t(device: object, *shape: int) -> ert.Tensor:
    data = np.random.default_rng(sum(shape)).standard_normal(shape).astype("float32")
    return ert.asarray(data, device=device)


@pytest.mark.parametrize("case", sorted(NN_CASES))
def test_nn_ops_run_on_the_gpu_and_match_the_cpu(case: str) -> None:
    DEV.host_fallbacks.clear()
    got = NN_CASES[case](DEV).to("cpu").numpy()
    assert not DEV.host_fallbacks, f"ran on the host: {dict(DEV.host_fallbacks)}"
    np.testing.assert_allclose(got, NN_CASES[case]("cpu").numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", sorted(NN_CASES))
def test_nn_ops_are_captured_in_cuda_graphs(case: str) -> None:
    inputs = {"x": _t(DEV, 3)}  # the plans' one input; each case makes its own operands
    f = ert.function(lambda x: NN_CASES[case](DEV) + x.sum())
    want = NN_CASES[case]("cpu").numpy() + float(inputs["x"].sum())
    for _ in range(3):  # plain, captured, replayed
        got = f(inputs["x"]).to("cpu").numpy()
    plan = f.compiled_for(inputs["x"]).plan
    assert plan.captured, f"not captured: {plan.runner.capture_error!r}"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_embedding_index_out_of_range_fails_on_read_naming_the_op() -> None:
    table = _t(DEV, 4, 5)
    rows = ert.embedding(ert.asarray(np.array([1, 7]), device=DEV), table)
    later = rows * 2  # depends on the failed lookup: fails too
    assert rows.is_ready()  # the check is made on the device: no wait at the call
    with pytest.raises(ert.KernelError, match="out of range"):
        later.numpy()
    with pytest.raises(ert.KernelError, match="embedding"):
        rows.numpy()


def test_tf32_convolutions_are_close_to_float32() -> None:
    x, w = _t(DEV, 2, 64, 16, 16), _t(DEV, 64, 64, 3, 3)
    exact = ert.conv2d(x, w, padding=1).numpy()
    with ert.config.override(cuda_tf32=True):
        fast = ert.conv2d(x, w, padding=1).numpy()
    scale = np.abs(exact).max()
    assert np.abs(fast - exact).max() <= 1e-2 * scale


def test_await_gives_cupy_and_to_cpu_gives_numpy() -> None:
    x = ert.asarray(np.arange(6.0, dtype="float32").reshape(2, 3), device="cuda:0")
    y = (x * 2 + 1).sum(axis=0)
    assert y.is_ready() and y.device is DEV

    async def main() -> tuple[object, np.ndarray]:
        return await y, await y.to("cpu")

    native, host = asyncio.run(main())
    assert isinstance(native, cupy.ndarray)
    assert type(host) is np.ndarray
    np.testing.assert_allclose(host, [8.0, 12.0, 16.0])
    np.testing.assert_allclose(cupy.asnumpy(native), host)


@pytest.mark.parametrize("completion", ["callback", "watcher"])
def test_both_host_completions(completion: str) -> None:
    from eagerrt.devices.cuda import CudaDevice

    dev = CudaDevice(0, cupy, compute_streams=2, completion=completion)
    a = ert.asarray(np.ones((512, 512), "float32"), device=dev)
    with dev.stream(1):
        b = a @ a
    c = b + 1

    async def main() -> np.ndarray:
        return await c.to("cpu")

    np.testing.assert_allclose(asyncio.run(main()), np.full((512, 512), 513.0))
    assert dev.host_syncs >= 1


def test_streams_order_through_events_without_host_waits() -> None:
    from eagerrt.devices.cuda import CudaDevice

    dev = CudaDevice(0, cupy, compute_streams=2)
    data = np.random.default_rng(0).normal(size=(1024, 1024)).astype("float32")
    x = ert.asarray(data, device=dev)
    with dev.stream(0):
        y = x @ x  # long enough that a missing wait would read garbage
    with dev.stream(1):
        z = y * 2
    assert dev.host_syncs == 0
    np.testing.assert_allclose(z.numpy(), (data @ data) * 2, rtol=1e-3, atol=1e-2)


def test_out_of_memory_is_an_error_value_and_the_device_goes_on() -> None:
    free, _total = cupy.cuda.runtime.memGetInfo()
    huge = ert.zeros((int(free) // 4 * 2,), dtype="float32", device=DEV)  # twice what is free
    assert huge.is_error()
    with pytest.raises(ert.KernelError, match="out of memory"):
        huge.numpy()
    np.testing.assert_array_equal((ert.ones(3, device=DEV) + 1).numpy(), np.full(3, 2.0))


def test_graph_mode_on_cuda() -> None:
    w = ert.asarray(np.eye(4, dtype="float32") * 2, device=DEV)
    f = ert.function(lambda x: ert.relu(x @ w) + 1)
    x = ert.asarray(np.ones((3, 4), "float32"), device=DEV)
    np.testing.assert_allclose(f(x).numpy(), np.full((3, 4), 3.0))


def test_compiled_plans_replay_a_cuda_graph() -> None:
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((3, 8, 3, 3)).astype("float32")
    w2 = rng.standard_normal((10, 8)).astype("float32")

    def net_on(device: object) -> Any:
        """The network with its weights on ``device`` (the GPU's, and the CPU's
        for the expected values)."""
        conv, fc = ert.asarray(w1, device=device), ert.asarray(w2, device=device)

        def net(x: ert.Tensor) -> tuple[ert.Tensor, ert.Tensor]:
            h = ert.relu(ert.conv2d(x, ert.moveaxis(conv, 0, 1), padding=1))
            pooled = ert.adaptive_avg_pool2d(h, 1).reshape(x.shape[0], 8)
            return ert.softmax(ert.linear(pooled, fc), axis=-1), h.sum()

        return net

    f = ert.function(net_on(DEV))
    images = [rng.standard_normal((2, 3, 12, 12)).astype("float32") for _ in range(4)]
    results = []
    for image in images:  # the first call runs plainly, the second captures, then replays
        probs, total = f(ert.asarray(image, device=DEV))
        results.append((probs.to("cpu").numpy(), float(total)))
    plan = f.compiled_for(ert.asarray(images[0], device=DEV)).plan
    assert plan.captured, f"not captured: {plan.runner.capture_error!r}"
    on_cpu = net_on("cpu")
    for image, (probs, total) in zip(images, results, strict=True):
        want_probs, want_total = on_cpu(ert.asarray(image))
        np.testing.assert_allclose(probs, want_probs.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(total, float(want_total), rtol=1e-4)


def test_a_replayed_plan_gives_each_call_its_own_result() -> None:
    f = ert.function(lambda x: x * 2 + 1)
    outs = [f(ert.asarray(np.full(4, float(i), "float32"), device=DEV)) for i in range(5)]
    for i, out in enumerate(outs):  # read after later replays wrote the plan's buffers
        np.testing.assert_array_equal(out.numpy(), np.full(4, 2.0 * i + 1))


def test_await_never_blocks_the_event_loop_while_the_gpu_works() -> None:
    a = _t(DEV, 4096, 4096) * (1 / 64)
    y = a
    for _ in range(60):  # about 8 TFLOP queued: a few hundred ms of GPU work
        y = ert.tanh(y @ a)

    async def main() -> tuple[float, float, int]:
        ticks: list[float] = []
        done = False

        async def ticker() -> None:
            while not done:
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.002)

        task = asyncio.create_task(ticker())
        start = time.perf_counter()
        host = await y.to("cpu")
        waited = time.perf_counter() - start
        done = True
        await task
        assert host.shape == (4096, 4096)
        return waited, float(np.diff(ticks).max()), len(ticks)

    waited, worst_gap, count = asyncio.run(main())
    print(f"awaited {waited * 1e3:.0f} ms, {count} ticks, worst gap {worst_gap * 1e3:.1f} ms")
    assert waited > 0.05, "the GPU work was too short to show anything"
    assert worst_gap < 0.05
    assert count >= waited / 0.01


def test_conv2d_matches_the_cpu() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 9, 9)).astype("float32")
    w = rng.normal(size=(4, 3, 3, 3)).astype("float32")
    for kw in ({}, {"stride": 2, "padding": 1}, {"dilation": 2, "padding": "same"}):
        cpu = ert.conv2d(ert.asarray(x), ert.asarray(w), **kw).numpy()
        gpu = ert.conv2d(ert.asarray(x, device=DEV), ert.asarray(w, device=DEV), **kw)
        np.testing.assert_allclose(gpu.numpy(), cpu, rtol=1e-4, atol=1e-4)


def test_cudnn_convolutions_match_the_cublas_ones_and_the_cpu() -> None:
    from eagerrt.backends.cuda import dnn as _cuda_dnn

    if _cuda_dnn._find_library() is None:
        pytest.skip("cuDNN is not installed (pip install nvidia-cudnn-cu13)")
    assert _cuda_dnn._library() is not None, "cuDNN is installed but could not be loaded"
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 8, 12, 12)).astype("float32")
    w = rng.normal(size=(6, 4, 3, 3)).astype("float32")
    b = rng.normal(size=6).astype("float32")
    w1 = rng.normal(size=(6, 8, 3, 3)).astype("float32")
    cases = [
        (w1, {"padding": 1}),
        (w, {"stride": 2, "padding": 1, "groups": 2}),
        (w1, {"dilation": 2}),
    ]
    failures = []
    for weight, kw in cases:
        cpu = ert.conv2d(ert.asarray(x), ert.asarray(weight), ert.asarray(b), **kw).numpy()
        on = [ert.asarray(a, device=DEV) for a in (x, weight, b)]
        for cudnn in (True, False):
            with ert.config.override(cuda_cudnn=cudnn):
                try:
                    got = ert.conv2d(*on, **kw).numpy()
                except Exception as exc:
                    failures.append(f"{kw} cudnn={cudnn}: {type(exc).__name__}: {exc}")
                    continue
            error = float(np.abs(got - cpu).max())
            if not error <= 1e-4 * max(1.0, float(np.abs(cpu).max())):
                failures.append(f"{kw} cudnn={cudnn}: max error {error:.3g}")
    library = _cuda_dnn._library()
    algos = {d.groups: p.algo for d, p in library._prepared.items()}  # type: ignore[union-attr]
    assert not failures, f"{failures}; refused: {_cuda_dnn._refused}; algorithms: {algos}"
    assert not _cuda_dnn._refused, _cuda_dnn._refused


def test_a_compiled_resnet_block_fuses_its_relus_into_captured_convolutions() -> None:
    rng = np.random.default_rng(4)
    arrays = [rng.normal(size=s).astype("float32") * 0.2 for s in
              [(8, 8, 3, 3), (8,), (8, 8, 1, 1), (8,)]]  # fmt: skip

    def block_on(device: object) -> Any:
        w1, b1, w2, b2 = (ert.asarray(a, device=device) for a in arrays)

        def block(x: ert.Tensor) -> ert.Tensor:
            y = ert.relu(ert.conv2d(x, w1, b1, padding=1))
            return ert.relu(ert.conv2d(y, w2, b2) + x)

        return block

    f, on_cpu = ert.function(block_on(DEV)), block_on("cpu")
    for _ in range(3):  # plain, captured, replayed
        x = rng.normal(size=(2, 8, 10, 10)).astype("float32")
        got = f(ert.asarray(x, device=DEV)).numpy()
        np.testing.assert_allclose(got, on_cpu(ert.asarray(x)).numpy(), rtol=1e-4, atol=1e-4)
    plan = f.compiled_for(ert.asarray(x, device=DEV)).plan
    assert [s[0].name for s in plan._steps] == ["conv2d_relu", "conv2d_relu"]
    assert plan.captured, f"not captured: {plan.runner.capture_error!r}"


def test_eager_ops_with_scalars_launch_lean_and_match_numpy() -> None:
    data = np.linspace(-2, 2, 1000, dtype=np.float32)
    y, want = ert.asarray(data, device=DEV), data
    for _ in range(50):
        y = ert.tanh(y * 1.5 - 0.25) + y * 0.5
        want = np.tanh(want * np.float32(1.5) - np.float32(0.25)) + want * np.float32(0.5)
    assert y.dtype == np.float32 and y._value.handle is None
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_row_kernels_compile_and_keep_the_expressions_rules() -> None:
    from eagerrt.backends.cuda import nn as _cuda_nn
    from eagerrt.backends.cuda import rows as _cuda_rows

    rng = np.random.default_rng(5)
    scores = rng.normal(size=(3, 4, 50)).astype("float32")
    scores[1, 2] = -np.inf  # a query with every key masked: zeros
    got = _cuda_nn._softmax_last(cupy, cupy.asarray(scores))
    want = _cuda_nn._softmax_last(np, scores.copy())
    assert not _cuda_rows.failures, _cuda_rows.failures
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-5, atol=1e-6)
    assert not cupy.asnumpy(got)[1, 2].any()
    rows, w, b = (rng.normal(size=s) for s in ((7, 384), (384,), (384,)))
    for dtype in ("float32", "float64"):
        args = [a.astype(dtype) for a in (rows, w, b)]
        got = _cuda_nn._normalize_rows(cupy, *map(cupy.asarray, args[:1]), 1e-5,
                                       *map(cupy.asarray, args[1:]))  # fmt: skip
        want = _cuda_nn._normalize_rows(np, args[0], 1e-5, *args[1:])
        np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-5, atol=1e-5)
    assert not _cuda_rows.failures, _cuda_rows.failures


def test_a_compiled_residual_layer_norm_is_one_captured_row_kernel() -> None:
    rng = np.random.default_rng(8)
    w, gamma, beta = (rng.normal(size=s).astype("float32") for s in ((384, 384), (384,), (384,)))

    def block_on(device: object) -> Any:
        wt, g, b = (ert.asarray(a, device=device) for a in (w, gamma, beta))
        return lambda x: ert.layer_norm(x + ert.tanh(x @ wt), (384,), g, b)

    f, on_cpu = ert.function(block_on(DEV)), block_on("cpu")
    for _ in range(3):  # plain, captured, replayed
        x = rng.normal(size=(4, 16, 384)).astype("float32")
        got = f(ert.asarray(x, device=DEV)).numpy()
        np.testing.assert_allclose(got, on_cpu(ert.asarray(x)).numpy(), rtol=1e-4, atol=1e-4)
    plan = f.compiled_for(ert.asarray(x, device=DEV)).plan
    assert "add_layer_norm" in [s[0].name for s in plan._steps]
    assert plan.captured, f"not captured: {plan.runner.capture_error!r}"
