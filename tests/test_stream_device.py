"""Stream devices (TFRT's GPU design) on the thread-backed test device: ordering by
events, host completion, copy streams, memory lifetimes, errors, graph mode.

Every rule tested here lives in ``eagerrt.devices.stream`` and is shared with
the CUDA device; only the primitives differ.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.devices import stream_threads
from eagerrt.devices.stream_threads import ThreadStreamDevice
from eagerrt.graph.native_plan import NativePlan

_names = itertools.count()


def _device(**options: object) -> ThreadStreamDevice:
    return ThreadStreamDevice(f"teststream:{100 + next(_names)}", **options)  # type: ignore[arg-type]


@pytest.fixture
def make_device() -> Iterator[object]:
    made: list[ThreadStreamDevice] = []

    def make(**options: object) -> ThreadStreamDevice:
        dev = _device(**options)
        made.append(dev)
        return dev

    yield make
    for dev in made:
        dev.shutdown()


_slow = ert.define_op(
    "test_stream_slow_double", rule=lambda x, seconds=0.0: (x.shape, x.dtype), operands=1
)


@_slow.kernel("cpu")
def _slow_double(x: np.ndarray, seconds: float = 0.0) -> np.ndarray:
    time.sleep(seconds)  # reads x only after the sleep: a too-early reuse shows
    return x * 2


_broken = ert.define_op("test_stream_broken", rule=lambda x: (x.shape, x.dtype))


@_broken.kernel("cpu")
def _broken_kernel(x: np.ndarray) -> np.ndarray:
    raise ValueError("bad data on the stream")


# -- ordering and host synchronization -------------------------------------------------
def test_results_are_ready_at_enqueue_and_the_host_waits_only_to_read(make_device) -> None:
    dev = make_device(delay=0.002)
    x = ert.asarray(np.arange(6.0).reshape(2, 3), device=dev)
    y = x * 2 + 1
    with dev.stream(1):
        z = (y @ ert.ones((3, 2), device=dev)).sum(axis=0)
    assert all(t.is_ready() for t in (x, y, z))  # enqueued, nothing done maybe
    assert dev.host_syncs == 0  # no host synchronization between device ops
    np.testing.assert_array_equal(
        z.numpy(), (np.arange(6.0).reshape(2, 3) * 2 + 1).sum() * np.ones(2)
    )
    assert dev.host_syncs == 1


@pytest.mark.parametrize("seed", range(4))
def test_a_consumer_on_another_stream_sees_its_producers_data(make_device, seed: int) -> None:
    dev = make_device(delay=0.001, seed=seed)
    rng = np.random.default_rng(seed)
    data = [rng.normal(size=(8, 8)) for _ in range(6)]
    outs = []
    for i, d in enumerate(data):
        with dev.stream(i % 2):
            produced = ert.asarray(d, device=dev) * 3.0
        with dev.stream((i + 1) % 2):
            outs.append(ert.exp(produced) - produced)
    with dev.stream(0):
        total = outs[0]
        for o in outs[1:]:
            total = total + o
    expected = sum(np.exp(d * 3.0) - d * 3.0 for d in data)
    np.testing.assert_allclose(total.numpy(), expected)
    assert dev.host_syncs == 1


def test_a_consumer_waits_for_a_slow_producer_on_another_stream(make_device) -> None:
    dev = make_device()
    x = ert.asarray(np.ones(4), device=dev)
    with dev.stream(0):
        slow = _slow(x, seconds=0.2)
    with dev.stream(1):
        after = slow + 1
    np.testing.assert_array_equal(after.numpy(), np.full(4, 3.0))


# -- the host learning of completion ---------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("completion", ["callback", "watcher"])
async def test_await_gives_the_native_array_once_the_event_is_done(
    make_device, completion: str
) -> None:
    dev = make_device(completion=completion)
    x = ert.asarray(np.arange(4.0), device=dev)
    y = _slow(x, seconds=0.05) + 1
    native = await y
    assert type(native) is np.ndarray  # the test device's native arrays are numpy's
    np.testing.assert_array_equal(native, np.arange(4.0) * 2 + 1)
    on_host = y.to("cpu")
    assert on_host.device is ert.get_device("cpu")
    np.testing.assert_array_equal(await on_host, np.arange(4.0) * 2 + 1)
    assert dev.host_syncs >= 2


@pytest.mark.parametrize("completion", ["callback", "watcher"])
def test_numpy_and_to_cpu_wait_for_the_event(make_device, completion: str) -> None:
    dev = make_device(completion=completion)
    y = _slow(ert.asarray(np.ones(3), device=dev), seconds=0.1)
    moved = y.to("cpu")
    assert not moved.is_ready()  # returned at once; the copy waits for the kernel
    np.testing.assert_array_equal(moved.numpy(), np.full(3, 2.0))
    np.testing.assert_array_equal(y.numpy(), np.full(3, 2.0))


def test_pending_host_tensor_moves_once_ready(make_device, gate) -> None:
    dev = make_device()
    opener = gate()
    pending = opener(np.arange(3.0))
    moved = pending.to(dev)
    assert moved.device is dev and moved.shape == (3,) and not moved.is_ready()
    doubled = moved * 2
    opener.open()
    np.testing.assert_array_equal(doubled.numpy(), np.arange(3.0) * 2)


def test_synchronize_returns_after_a_pending_stream_tensor_moved_to_the_host(
    make_device, gate
) -> None:
    dev = make_device()
    opener = gate()
    back = opener(np.arange(3.0)).to(dev).to("cpu")  # its download waits for the upload
    opener.open()
    ert.synchronize(timeout=10)  # timed out: the download's start was never done
    np.testing.assert_array_equal(back.numpy(), np.arange(3.0))


@pytest.mark.parametrize("completion", ["callback", "watcher"])
def test_a_full_worker_queue_never_runs_work_on_the_device_completion_thread(
    make_device, completion: str
) -> None:
    """Backpressure runs a task on the thread that offloads it when the queue is
    full, but not on the thread that completes the device's events: a kernel
    reading device data there would wait for that thread itself."""
    dev = make_device(completion=completion)
    other = ert.asarray([5.0, 6.0], device=dev) * 2
    peek = ert.define_op(
        "test_stream_peek_host",
        rule=lambda x: (x.shape, x.dtype),
        cost=lambda *args, **static: 1e12,  # always offloaded to a worker
        replace=True,
    )
    # A host read of device data, in a kernel.
    peek.register_kernel("cpu", lambda x: x + other.to("cpu").numpy(timeout=5))
    with ert.config.override(max_queued_tasks=0):  # the queue is always full
        moved = ert.asarray([1.0, 2.0], device=dev).to("cpu")  # completed on that thread
        out = peek(moved)  # offloaded from there once `moved` is ready
        np.testing.assert_array_equal(out.numpy(timeout=20), [11.0, 14.0])


def test_threads_use_the_same_stream_block_at_once(make_device) -> None:
    """``with dev.stream(1):`` in two threads whose blocks overlap: each ends its
    own (the replaced stream is saved per thread, not on the shared stream)."""
    dev = make_device(compute_streams=2)
    first_in, second_in = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def first() -> None:
        try:
            with dev.stream(1):
                first_in.set()
                second_in.wait(10)
                seen["first inside"] = dev._pick_stream([]).name
            seen["first after"] = dev._pick_stream([]).name
        except Exception as exc:
            seen["first"] = exc

    def second() -> None:
        first_in.wait(10)
        try:
            with dev.stream(1):
                second_in.set()
                time.sleep(0.2)  # the first thread leaves its block meanwhile
            seen["second after"] = dev._pick_stream([]).name
        except Exception as exc:
            seen["second"] = exc

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {
        "first inside": "compute1",
        "first after": "compute0",
        "second after": "compute0",
    }


def test_between_two_stream_devices_through_the_host(make_device) -> None:
    a, b = make_device(), make_device()
    x = ert.asarray(np.arange(3.0), device=a) + 1
    y = x.to(b)
    assert y.device is b
    np.testing.assert_array_equal((y * 2).numpy(), (np.arange(3.0) + 1) * 2)


# -- copy streams -----------------------------------------------------------------------
def test_copies_run_on_copy_streams_while_a_kernel_runs(make_device) -> None:
    dev = make_device(timeline=True)
    early = ert.asarray(np.arange(5.0), device=dev) + 1
    early.numpy()  # done before the slow kernel starts
    slow = _slow(ert.asarray(np.ones(4), device=dev), seconds=0.3)
    upload = ert.asarray(np.ones(100_000), device=dev)  # h2d stream
    download = early.to("cpu")  # d2h stream
    np.testing.assert_array_equal(download.numpy(), np.arange(5.0) + 1)
    upload.numpy()
    slow.numpy()
    timeline = dev.timeline
    kernel = next(t for t in timeline if t[1] == _slow.name)
    uploads = [t for t in timeline if t[1] == "upload"]
    downloads = [t for t in timeline if t[1] == "download"]
    # The big upload and the download, enqueued after the slow kernel, finished
    # before it did, on other streams: they did not queue behind it. (Not that
    # they finished after it started: on a loaded machine they may beat it.)
    assert any(u[3] < kernel[3] and u[0] != kernel[0] for u in uploads)
    assert any(d[3] < kernel[3] and d[0] != kernel[0] for d in downloads)


# -- memory: lifetimes across streams ---------------------------------------------------
def test_memory_read_on_another_stream_outlives_the_host_handle(make_device) -> None:
    dev = make_device()
    data = np.arange(64.0)
    with dev.stream(0):
        x = ert.asarray(data, device=dev) + 0  # lives in a block of stream 0
        x_handle = x._value
    with dev.stream(1):
        y = _slow(x, seconds=0.3)  # reads x after 0.3 s
    assert x_handle.users  # stream 1 reads it
    del x, x_handle  # the host drops x while stream 1 still has to read it
    with dev.stream(0):
        overwrites = [ert.full((64,), 99.0, device=dev) for _ in range(4)]
        for o in overwrites:
            o.numpy()  # these ran (and wrote) while y still sleeps
    np.testing.assert_array_equal(y.numpy(), data * 2)


def test_a_block_freed_on_one_stream_waits_for_an_event_before_another_reuses_it(
    make_device,
) -> None:
    dev = make_device()
    pool = dev.pool
    data = np.arange(64.0)
    with dev.stream(0):
        x = ert.asarray(data, device=dev) + 0
        y = _slow(x, seconds=0.3)  # same stream: reads x after 0.3 s
    del x  # back to stream 0's free list, behind y in stream order
    before = pool.reused_other_stream
    with dev.stream(1):
        z = ert.full((64,), 99.0, device=dev)
        z.numpy()  # stream 1 is idle: this ran at once, while y sleeps
    np.testing.assert_array_equal(y.numpy(), data * 2)
    assert pool.reused_other_stream == before  # not reused while stream 0 could read it
    dev.synchronize()
    with dev.stream(1):
        ert.full((64,), 7.0, device=dev).numpy()
    assert pool.reused_other_stream > before  # once its event said so, it was


def test_out_of_memory_is_an_error_value_and_the_device_goes_on(make_device) -> None:
    dev = make_device(memory_limit=64 * 1024)
    big = ert.zeros((100_000,), device=dev)  # 800 KB > 64 KB
    assert big.is_error()
    with pytest.raises(ert.KernelError, match=r"'fill' failed.*out of memory") as info:
        big.numpy()
    assert isinstance(info.value.__cause__, MemoryError)
    small = ert.asarray(np.arange(10.0), device=dev) * 2
    np.testing.assert_array_equal(small.numpy(), np.arange(10.0) * 2)


def test_memory_pressure_releases_retained_memory_and_retries(make_device) -> None:
    dev = make_device(memory_limit=6 * 1024)  # 6 blocks of 1 KB
    total = 0.0
    for i in range(40):  # far more than fits unless memory goes back
        with dev.stream(i % 2):
            t = ert.full((128,), float(i), device=dev)
        with dev.stream((i + 1) % 2):
            total += float((t + 0).sum())
    assert total == sum(128.0 * i for i in range(40))


# -- errors -----------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_kernel_failure_on_a_stream_reaches_dependents_and_await(
    make_device, clean_errors
) -> None:
    dev = make_device(delay=0.001)
    x = ert.asarray(np.ones(3), device=dev)
    bad = _broken(x)
    assert bad.is_ready()  # the failure is found on the stream, after enqueue
    with dev.stream(1):
        dependent = bad * 2 + 1
    with pytest.raises(ert.KernelError, match=r"test_stream_broken.*bad data") as info:
        await dependent
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ert.KernelError, match="test_stream_broken"):
        dependent.numpy()
    with pytest.raises(ert.KernelError, match="test_stream_broken"):
        await dependent.to("cpu")
    np.testing.assert_array_equal((x + 1).numpy(), np.full(3, 2.0))  # the device goes on


def test_mixing_devices_needs_an_explicit_move(make_device) -> None:
    dev = make_device()
    on_dev = ert.asarray(np.ones(2), device=dev)
    with pytest.raises(ert.DeviceError, match="different devices"):
        on_dev + ert.ones(2)
    np.testing.assert_array_equal((on_dev.to("cpu") + ert.ones(2)).numpy(), np.full(2, 2.0))


def test_in_place_writes_are_refused_at_the_call_and_leave_the_tensor_as_it_was(
    make_device,
) -> None:
    dev = make_device()
    x = ert.asarray(np.ones(3), device=dev)
    with pytest.raises(ert.DeviceError, match=r"setitem.*not supported yet"):
        x[0] = 5.0
    with pytest.raises(ert.DeviceError, match=r"__iadd__.*not supported yet"):
        x += 1
    np.testing.assert_array_equal(x.to("cpu").numpy(), np.ones(3))


def test_unknown_completion_and_stream_are_refused() -> None:
    with pytest.raises(ert.DeviceError, match="completion"):
        ThreadStreamDevice("teststream:bad", completion="poll")
    dev = _device(compute_streams=1)
    try:
        with pytest.raises(ert.DeviceError, match="no stream 3"):
            dev.stream(3)
    finally:
        dev.shutdown()


def test_teststream_devices_are_found_by_name() -> None:
    dev = ert.get_device("teststream:7")
    assert ert.get_device("teststream:7") is dev and isinstance(dev, ThreadStreamDevice)
    assert (ert.arange(3, device="teststream:7") + 1).numpy().tolist() == [1, 2, 3]


# -- graph mode -------------------------------------------------------------------------
def test_compiled_function_runs_as_one_plan_on_a_stream_device(make_device) -> None:
    dev = make_device(delay=0.0005)
    w = ert.asarray(np.arange(12.0).reshape(3, 4) / 10, device=dev)

    def model(x: ert.Tensor) -> ert.Tensor:
        h = ert.relu(x @ w - 0.5)
        return ert.sum(h * h + h, axis=1)

    compiled = ert.function(model)
    for seed in range(3):
        data = np.random.default_rng(seed).normal(size=(5, 3))
        x = ert.asarray(data, device=dev)
        got = compiled(x)
        assert got.device is dev
        np.testing.assert_allclose(got.numpy(), model(x).numpy())
    assert compiled.traces == 1
    assert isinstance(compiled.compiled_for(x).plan, NativePlan)  # not op by op


def test_a_failing_kernel_in_a_stream_plan_fails_its_results(make_device) -> None:
    dev = make_device(delay=0.0002)
    compiled = ert.function(lambda x: (ert.linalg.inv(x) + 1, x * 2))
    singular = ert.asarray(np.zeros((2, 2)), device=dev)
    bad, good = compiled(singular)
    with pytest.raises(ert.KernelError, match="Singular matrix"):
        bad.numpy()
    with pytest.raises(ert.KernelError):  # one unit of work: it fails as a whole
        good.numpy()
    np.testing.assert_allclose(
        compiled(ert.asarray(np.eye(2), device=dev))[0].numpy(), np.eye(2) + 1
    )


@pytest.mark.anyio
async def test_async_compiled_function_on_a_stream_device(make_device) -> None:
    dev = make_device()

    @ert.function
    async def double_plus(x: ert.Tensor) -> ert.Tensor:
        return x * 2 + 1

    out = await double_plus(ert.asarray(np.arange(3.0), device=dev))
    np.testing.assert_array_equal(await out.to("cpu"), np.arange(3.0) * 2 + 1)


# -- asking for cuda without CuPy or a GPU (runs everywhere) ----------------------------
def _fresh_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import eagerrt.devices as devices

    for name in ("cuda", "cuda:0", "cuda:3"):
        monkeypatch.delitem(devices._devices, name, raising=False)


def test_cuda_without_cupy_says_which_extra_to_install(monkeypatch) -> None:
    _fresh_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(ert.DeviceError, match=r"CuPy.*eagerrt\[cuda12\].*eagerrt\[cuda13\]"):
        ert.get_device("cuda")
    with pytest.raises(ert.DeviceError, match="CuPy"):
        ert.ones(3, device="cuda:0")


def _fake_cupy(count: int | Exception) -> types.ModuleType:
    def get_device_count() -> int:
        if isinstance(count, Exception):
            raise count
        return count

    cupy = types.ModuleType("cupy")
    cupy.__version__ = "13.0.0"  # type: ignore[attr-defined]
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=types.SimpleNamespace(getDeviceCount=get_device_count)
    )
    return cupy


def test_cuda_without_a_visible_gpu_says_so(monkeypatch) -> None:
    _fresh_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(RuntimeError("cudaErrorNoDevice")))
    with pytest.raises(ert.DeviceError, match=r"no CUDA GPU is visible.*cudaErrorNoDevice"):
        ert.get_device("cuda")
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(0))
    with pytest.raises(ert.DeviceError, match="no CUDA GPU is visible"):
        ert.get_device("cuda:0")


def test_cuda_index_beyond_the_visible_gpus(monkeypatch) -> None:
    _fresh_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(1))
    with pytest.raises(ert.DeviceError, match=r"cuda:3 asked for.*cuda:0\.\.cuda:0"):
        ert.get_device("cuda:3")


def test_stream_threads_stop_on_shutdown() -> None:
    dev = _device()
    (ert.asarray(np.ones(2), device=dev) + 1).numpy()
    threads = [s.thread for s in dev._threads]
    assert threads and all(t.is_alive() for t in threads)
    dev.shutdown()
    assert not any(t.is_alive() for t in threads)
    assert threading.active_count() >= 1
    assert stream_threads.HostBlockPool is type(dev.pool)


# -- every op ------------------------------------------------------------------------------
def test_every_op_record_runs_on_the_test_device(make_device) -> None:
    """The op table on stream threads, with random delays; a record that mixes in
    numpy constants (made CPU tensors) gets the clear mixed-device error instead."""
    from device_records import record_failures

    failures = record_failures(make_device(delay=0.0002))
    assert failures  # the table has records with numpy operands: they must say why
    unexpected = [f for f in failures if "operands are on different devices" not in f]
    assert not unexpected, "\n".join(unexpected)


def test_stream_work_shows_in_the_profiler_on_its_own_tracks(make_device) -> None:
    dev = make_device()
    with ert.profile() as prof:
        x = ert.asarray(np.ones(8), device=dev)
        with dev.stream(1):
            (x * 2).numpy()
    tracks = {(e.name, e.track) for e in prof.events if e.device == dev.name}
    assert any(n == "multiply" and t.startswith("compute") for n, t in tracks), tracks
    assert any(n == "upload" and t.startswith("h2d") for n, t in tracks), tracks


# -- fork ------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("completion", ["callback", "watcher"])
def test_a_forked_child_gets_fresh_streams_and_old_values_fail_clearly(
    make_device, completion: str
) -> None:
    """The child has none of the parent's stream, completer or watcher threads:
    new work gets new ones; a value made before the fork says why it can't be read."""
    dev = make_device(completion=completion)
    before = ert.asarray([1.0, 2.0], device=dev) * 2
    assert before.numpy().tolist() == [2.0, 4.0]  # every thread of the device started
    unread = before * 3  # enqueued in the parent, never read there
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            answer = b""
            try:
                fresh = (ert.asarray([1.0, 2.0], device=dev) + 1).numpy()
                answer += b"fresh ok;" if fresh.tolist() == [2.0, 3.0] else b"fresh wrong;"
            except BaseException as exc:
                answer += f"fresh {type(exc).__name__};".encode()
            if before.numpy().tolist() != [2.0, 4.0]:  # read before the fork: kept
                answer += b"old copy lost;"
            try:
                unread.numpy()
                answer += b"old read"
            except ert.DeviceError as exc:
                answer += b"old refused" if "forked" in str(exc) else b"old other"
            except BaseException as exc:
                answer += f"old {type(exc).__name__}".encode()
            os.write(write, answer)
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    answer = os.read(read, 256)
    os.close(read)
    assert answer == b"fresh ok;old refused"
    assert unread.numpy().tolist() == [6.0, 12.0]  # the parent's device is untouched


def test_leaving_a_profile_waits_for_the_stream_work_it_saw_launched(make_device) -> None:
    # The op is ready once enqueued; its event comes from the stream when the
    # work has run. Leaving the block must wait for that report, as it waits
    # for ops on host workers: else the event is missing, and lands later.
    dev = make_device(delay=0.05)
    x = ert.asarray(np.ones(8), device=dev)
    (x + 0).numpy()
    with ert.profile() as prof:
        _ = x * 2  # not awaited
    (multiply,) = [e for e in prof.events if e.name == "multiply"]
    assert multiply.track.startswith("compute")
    assert prof.end_ns is not None and multiply.end_ns <= prof.end_ns


def test_an_enqueue_interrupted_in_a_profile_leaves_no_launch_behind(
    make_device, monkeypatch
) -> None:
    # An op's launch is this thread's while it enqueues; an enqueue escaping
    # with a BaseException (Ctrl-C) must not leave it there, or later copies
    # on this thread report into that op's event of that old profile.
    from eagerrt._core import profiling

    class Interrupt(BaseException):
        pass

    dev = make_device()
    x = ert.asarray(np.ones(4), device=dev)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise Interrupt

    with pytest.raises(Interrupt), ert.profile():
        monkeypatch.setattr(dev.pool, "allocate", interrupted)
        _ = x * 2
    monkeypatch.undo()
    assert profiling.launching() is None  # no profile records now
    assert (x * 2).numpy().tolist() == [2.0] * 4


def test_synchronize_waits_for_the_devices_streams_and_times_out(make_device) -> None:
    dev = make_device()
    x = ert.asarray(np.arange(4.0), device=dev)
    y = _slow(x, seconds=0.25)  # enqueued: ready for device ops at once, still running
    with pytest.raises(ert.WaitTimeoutError, match="timed out"):
        ert.synchronize(timeout=0.05)
    start = time.perf_counter()
    ert.synchronize()
    assert dev.host_ready(y._value).is_available()  # the stream's work is done
    assert time.perf_counter() - start < 1.0
    dev.synchronize(timeout=0)  # nothing enqueued here since: returns at once


def test_dlpack_exports_a_stream_tensor_once_the_device_made_it(make_device) -> None:
    dev = make_device()
    y = _slow(ert.asarray(np.arange(4.0), device=dev), seconds=0.25) * 2
    assert y.__dlpack_device__() == (1, 0)  # the test device's arrays live on the host
    np.testing.assert_array_equal(np.from_dlpack(y), [0.0, 4.0, 8.0, 12.0])
