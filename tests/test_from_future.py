"""``ert.from_future``: a pending tensor that a future from outside eagerrt completes."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.devices.stream_threads import ThreadStreamDevice


def test_the_tensor_is_pending_until_the_future_completes_and_ops_wait_for_it() -> None:
    future: Future[np.ndarray] = Future()
    t = ert.from_future(future, (2, 3), "float32", name="fetch")
    later = ert.sum(t * 2)
    assert (t.shape, t.dtype, t.op) == ((2, 3), np.float32, "fetch")
    assert not t.is_ready() and not later.is_ready()
    future.set_result(np.ones((2, 3), np.float32))
    assert later.numpy() == 12.0
    assert not t.numpy().flags.writeable


def test_completed_from_another_thread_while_the_caller_waits() -> None:
    future: Future[list[int]] = Future()
    t = ert.from_future(future, (3,), "int64")
    threading.Timer(0.05, future.set_result, args=([1, 2, 3],)).start()
    np.testing.assert_array_equal(t.numpy(timeout=10), [1, 2, 3])


@pytest.mark.anyio
async def test_awaitable_on_every_event_loop() -> None:
    with ThreadPoolExecutor(1) as pool:
        t = ert.from_future(pool.submit(np.arange, 4.0), (4,), "float64")
        np.testing.assert_array_equal(await (t + 1), [1.0, 2.0, 3.0, 4.0])


def test_an_asyncio_future_completes_it_too() -> None:
    async def main() -> np.ndarray:
        future = asyncio.get_running_loop().create_future()
        t = ert.from_future(future, (), "int64")
        asyncio.get_running_loop().call_later(0.01, future.set_result, 7)
        return await t  # type: ignore[no-any-return]

    assert asyncio.run(main()) == 7


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (np.ones(3, np.float32), ert.ShapeError, r"shape \(3,\), where the tensor promised \(2,\)"),
        (
            np.ones(2, np.float64),
            ert.DTypeError,
            "dtype float64, where the tensor promised float32",
        ),
    ],
)
def test_a_result_unlike_the_promise_fails_the_tensor_naming_the_line(
    value: np.ndarray, error: type[Exception], match: str
) -> None:
    future: Future[np.ndarray] = Future()
    t = ert.from_future(future, (2,), "float32")
    future.set_result(value)
    with pytest.raises(error, match=match) as info:
        t.numpy()
    assert isinstance(info.value, ert.KernelError)
    assert "test_from_future.py" in str(info.value)


def test_python_values_take_the_promised_dtype_where_numpy_casts_them_so() -> None:
    future: Future[Any] = Future()
    t = ert.from_future(future, (2,), "float32")
    future.set_result([1.5, 2.5])
    np.testing.assert_array_equal(t.numpy(), np.array([1.5, 2.5], np.float32))
    future = Future()
    t = ert.from_future(future, (), "int32")
    future.set_result(2.5)  # a float for an int: not the same kind
    with pytest.raises(ert.DTypeError, match="float64, where the tensor promised int32"):
        t.numpy()


def test_a_failed_future_fails_the_tensor_with_its_exception() -> None:
    future: Future[np.ndarray] = Future()
    t = ert.from_future(future, (2,), "float32")
    future.set_exception(OSError("connection reset"))
    with pytest.raises(OSError, match="connection reset"):
        (t + 1).numpy()


def test_a_cancelled_future_fails_the_tensor_rather_than_leave_it_pending() -> None:
    future: Future[np.ndarray] = Future()
    t = ert.from_future(future, (2,), "float32")
    assert future.cancel()
    with pytest.raises(ert.KernelError, match="CancelledError"):
        t.numpy(timeout=10)


def test_a_device_whose_results_live_on_it_is_refused_at_the_call() -> None:
    device = ThreadStreamDevice("teststream:990")
    try:
        with pytest.raises(ert.DeviceError, match=r"\.to\('teststream:990'\)"):
            ert.from_future(Future(), (2,), "float32", device=device)
    finally:
        device.shutdown()
