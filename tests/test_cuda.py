"""The cuda device on a real GPU (``gpu`` marker; skipped without CuPy or a GPU).

The stream logic itself is tested in CI by ``test_stream_device.py`` on the
thread-backed test device; these tests check CuPy's half: every op against the
CPU, streams and events, copies, out-of-memory, graph mode.
"""

from __future__ import annotations

import asyncio

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

    failures = [f for f in record_failures(DEV) if "operands are on different devices" not in f]
    fallbacks = dict(DEV.host_fallbacks)  # type: ignore[attr-defined]
    print(f"ops run on the host (generic kernels refusing cupy arrays): {fallbacks}")
    assert not failures, "\n".join(failures)


def test_await_gives_cupy_and_to_cpu_gives_numpy() -> None:
    x = ert.asarray(np.arange(6.0, dtype="float32").reshape(2, 3), device="cuda:0")
    y = (x * 2 + 1).sum(axis=0)
    assert y.is_ready() and y.device is DEV

    async def main() -> tuple[object, np.ndarray]:
        return await y, await y.to("cpu")

    native, host = asyncio.run(main())
    assert isinstance(native, cupy.ndarray)
    assert type(host) is np.ndarray
    np.testing.assert_allclose(host, [9.0, 15.0, 21.0])
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


def test_conv2d_matches_the_cpu() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 9, 9)).astype("float32")
    w = rng.normal(size=(4, 3, 3, 3)).astype("float32")
    for kw in ({}, {"stride": 2, "padding": 1}, {"dilation": 2, "padding": "same"}):
        cpu = ert.conv2d(ert.asarray(x), ert.asarray(w), **kw).numpy()
        gpu = ert.conv2d(ert.asarray(x, device=DEV), ert.asarray(w, device=DEV), **kw)
        np.testing.assert_allclose(gpu.numpy(), cpu, rtol=1e-4, atol=1e-4)
