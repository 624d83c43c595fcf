"""Pluggable devices (registry, entry points, transfers) and user-defined ops."""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
import eagerrt.devices as devices_module
from eagerrt.lowlevel import WorkerPool

HUGE_COST = 1e15
_names = itertools.count()


class Box:
    """A test device's native array: host data behind a wrapper numpy can't see through."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:  # pragma: no cover
        raise AssertionError("a Box must go through BoxDevice.to_numpy, not np.asarray")


class BoxDevice(ert.Device):
    """A device with its own worker threads, its own array type, no generic kernels."""

    generic_kernels = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.pool = WorkerPool(1, name)
        self.uploads = 0
        self.downloads = 0

    @property
    def executor(self) -> WorkerPool:
        return self.pool

    def from_numpy(self, array: np.ndarray) -> Box:
        self.uploads += 1
        return Box(np.array(array, copy=True))

    def to_numpy(self, native: Box) -> np.ndarray:
        assert isinstance(native, Box)
        self.downloads += 1
        return native.array.copy()

    native_types = (Box,)

    def native_shape_dtype(self, native: Box) -> tuple[tuple[int, ...], np.dtype]:
        return native.array.shape, native.array.dtype


@pytest.fixture
def box_device() -> Iterator[BoxDevice]:
    device = BoxDevice(f"box{next(_names)}")
    assert ert.register_device(device) is device
    yield device
    device.pool.shutdown()


def _unique(base: str) -> str:
    """A fresh op name, so tests can run more than once in a process."""
    return f"{base}_{next(_names)}"


def _same_as_first(*xs: ert.Tensor, **static: Any) -> tuple:
    return xs[0].shape, xs[0].dtype


# -- user-defined ops ----------------------------------------------------------------
def test_define_op_with_cpu_kernel_overriding_generic() -> None:
    op = ert.define_op(_unique("custom_plus_tag"), rule=_same_as_first)
    calls: list[str] = []

    @op.kernel()
    def generic(x: np.ndarray) -> np.ndarray:
        calls.append("generic")
        return x + 1

    @op.kernel("cpu")
    def on_cpu(x: np.ndarray) -> np.ndarray:
        calls.append("cpu")
        return x + 100

    assert ert.get_op(op.name) is op
    assert op.name in ert.registered_ops()
    out = op(ert.asarray([1.0, 2.0]))
    assert out.op == op.name and out.shape == (2,) and out.dtype == np.float64
    np.testing.assert_array_equal(out.numpy(), [101.0, 102.0])
    assert calls == ["cpu"]
    with ert.config.override(inline_threshold_ns=0):
        np.testing.assert_array_equal(op(ert.asarray([0.0])).numpy(timeout=10), [100.0])
    assert calls == ["cpu", "cpu"]


def test_generic_kernel_runs_on_devices_that_accept_generic_kernels(manual_device) -> None:
    op = ert.define_op(_unique("custom_generic_only"), rule=_same_as_first)
    op.kernel()(lambda x: x * 3)
    out = op(ert.asarray([1.0, 2.0], device=manual_device))
    assert out.device is manual_device
    np.testing.assert_array_equal(out.numpy(), [3.0, 6.0])


def test_kernel_registered_after_a_call_takes_effect() -> None:
    op = ert.define_op(_unique("custom_late_kernel"), rule=_same_as_first)
    op.kernel()(lambda x: x + 1)
    x = ert.asarray(np.zeros(3))
    np.testing.assert_array_equal(op(x).numpy(), np.ones(3))  # primes the fast path
    np.testing.assert_array_equal(op(x).numpy(), np.ones(3))
    op.kernel("cpu")(lambda x: x - 1)
    np.testing.assert_array_equal(op(x).numpy(), -np.ones(3))  # same signature, new kernel


def test_user_op_with_static_params_and_custom_cost() -> None:
    ran_on_cpu_workers: list[str] = []

    def rule(x: ert.Tensor, *, times: int) -> tuple:
        return (*x.shape[:-1], x.shape[-1] * times), x.dtype

    costs: list[tuple] = []

    def cost(shape: tuple, dtype: np.dtype, x: ert.Tensor, *, times: int) -> float:
        costs.append((shape, times))
        return HUGE_COST

    op = ert.define_op(_unique("custom_tile_last"), rule=rule, cost=cost)

    @op.kernel("cpu")
    def _(x: np.ndarray, *, times: int) -> np.ndarray:
        ran_on_cpu_workers.append(threading.current_thread().name)
        return np.tile(x, times)

    out = op(ert.asarray([1, 2]), times=3)
    assert out.shape == (6,) and costs == [((6,), 3)]
    np.testing.assert_array_equal(out.numpy(timeout=10), [1, 2, 1, 2, 1, 2])
    assert ran_on_cpu_workers[0].startswith("eagerrt-cpu")


def test_define_op_refuses_duplicate_names() -> None:
    name = _unique("custom_unique_name")
    ert.define_op(name, rule=_same_as_first)
    with pytest.raises(ert.UsageError, match=name):
        ert.define_op(name, rule=_same_as_first)
    with pytest.raises(ert.UsageError, match="exp"):
        ert.define_op("exp", rule=_same_as_first)  # a built-in op
    with pytest.raises(ert.UsageError, match="built in"):
        ert.define_op("exp", rule=_same_as_first, replace=True)
    assert ert.get_op("exp") is ert.exp


def test_define_op_replace_redefines_a_user_op() -> None:
    name = _unique("custom_redefined")
    old = ert.define_op(name, rule=_same_as_first)
    old.kernel()(lambda x: x + 1)
    new = ert.define_op(name, rule=_same_as_first, replace=True)
    new.kernel()(lambda x: x + 2)
    assert ert.get_op(name) is new
    np.testing.assert_array_equal(new(ert.asarray([0.0])).numpy(), [2.0])
    with pytest.raises(ert.UsageError):
        ert.get_op("custom_never_defined")


def test_op_without_any_kernel_raises_device_error_at_call() -> None:
    op = ert.define_op(_unique("custom_no_kernels"), rule=_same_as_first)
    with pytest.raises(ert.DeviceError, match=op.name):
        op(ert.ones((2,)))


# -- a third-party style device ------------------------------------------------------
def test_tensor_on_a_custom_device(box_device: BoxDevice) -> None:
    t = ert.asarray(np.arange(4.0), device=box_device)
    assert t.device is box_device and t.shape == (4,) and t.is_ready()
    assert box_device.uploads == 1
    out = t.numpy()
    np.testing.assert_array_equal(out, np.arange(4.0))
    assert box_device.downloads == 1
    assert f"device={box_device.name}" in repr(t)
    assert ert.get_device(box_device.name) is box_device
    assert box_device.name in ert.devices.available_devices()


def test_op_without_kernel_for_device_raises_then_runs_once_registered(
    box_device: BoxDevice,
) -> None:
    op = ert.define_op(
        f"custom_double_{box_device.name}", rule=_same_as_first, cost=lambda *a: HUGE_COST
    )
    op.kernel()(lambda x: x * 2)  # generic: not allowed on this device
    t = ert.asarray(np.arange(3.0), device=box_device)
    with pytest.raises(ert.DeviceError) as info:
        op(t)
    assert op.name in str(info.value) and box_device.name in str(info.value)
    with pytest.raises(ert.DeviceError):
        t + t  # built-in ops have only generic kernels too

    threads: list[str] = []

    @op.kernel(box_device.name)
    def _(x: Box) -> Box:
        threads.append(threading.current_thread().name)
        return Box(x.array * 2)

    out = op(t)
    assert out.device is box_device
    np.testing.assert_array_equal(out.numpy(timeout=10), [0.0, 2.0, 4.0])
    # Heavy: it ran on the device's own executor, not on the CPU's.
    assert threads == [f"eagerrt-{box_device.name}-0"]
    # The CPU kernel table is untouched: on the CPU the generic kernel still runs.
    np.testing.assert_array_equal(op(ert.asarray([1.0])).numpy(timeout=10), [2.0])


def test_to_device_and_back(box_device: BoxDevice) -> None:
    data = np.arange(6.0).reshape(2, 3)
    host = ert.asarray(data)
    assert host.to("cpu") is host  # already there
    on_box = host.to(box_device)
    assert on_box.device is box_device and on_box.shape == (2, 3) and on_box.dtype == data.dtype
    back = on_box.to(box_device.name).to("cpu")
    assert back.device is ert.get_device("cpu")
    out = back.numpy(timeout=10)
    np.testing.assert_array_equal(out, data)
    assert box_device.uploads == 1 and box_device.downloads == 1  # through the host, once


def test_offloaded_transfers_run_on_the_source_devices_workers(box_device: BoxDevice) -> None:
    data = np.arange(5.0)
    with ert.config.override(inline_threshold_ns=0):
        on_box = ert.asarray(data).to(box_device)
        back = on_box.to("cpu")
    np.testing.assert_array_equal(back.numpy(timeout=10), data)
    assert on_box.device is box_device and back.device is ert.get_device("cpu")
    assert box_device.uploads == 1 and box_device.downloads == 1


def test_to_device_of_a_pending_tensor(box_device: BoxDevice, gate) -> None:
    g = gate()
    pending = g(np.array([1.0, 2.0]))
    moved = pending.to(box_device)
    assert not moved.is_ready() and moved.device is box_device
    g.open()
    np.testing.assert_array_equal(moved.numpy(timeout=10), [1.0, 2.0])


def test_failure_travels_across_devices(box_device: BoxDevice, clean_errors) -> None:
    bad = ert.take(ert.arange(3), ert.asarray([5]))
    moved = bad.to(box_device)
    with pytest.raises(ert.KernelError, match="take"):
        moved.numpy(timeout=10)


def test_mixing_devices_in_one_op_raises(box_device: BoxDevice) -> None:
    on_cpu = ert.ones((3,))
    on_box = ert.asarray(np.ones(3), device=box_device)
    with pytest.raises(ert.DeviceError) as info:
        on_cpu + on_box
    assert "cpu" in str(info.value) and box_device.name in str(info.value)
    with pytest.raises(ert.DeviceError):
        on_box * on_cpu
    op = ert.define_op(f"custom_mixed_{box_device.name}", rule=_same_as_first)
    op.kernel()(lambda x: x)
    with pytest.raises(ert.DeviceError):
        op(on_cpu, device=box_device)  # operands on the CPU, device= says otherwise


def test_get_device_unknown_lists_known_devices(box_device: BoxDevice) -> None:
    with pytest.raises(ert.DeviceError) as info:
        ert.get_device("nope")
    message = str(info.value)
    assert "'nope'" in message
    assert "cpu" in message and box_device.name in message
    assert ert.get_device(None) is ert.get_device("cpu")
    assert ert.get_device(box_device) is box_device


def test_register_device_rejects_non_devices() -> None:
    with pytest.raises(ert.DeviceError):
        ert.register_device("cpu")  # type: ignore[arg-type]


def test_creation_op_on_device_without_generic_kernels(box_device: BoxDevice) -> None:
    with pytest.raises(ert.DeviceError, match="fill"):
        ert.ones((3,), device=box_device)  # fill has only a generic kernel


# -- calling conventions: non-tensor arguments of built-in ops ------------------------
def test_astype_takes_a_dtype_argument() -> None:
    t = ert.asarray([1.5, 2.5])
    for cast in (
        lambda: t.astype("float32"),
        lambda: t.astype(np.float32),
        lambda: ert.astype(t, "float32"),
        lambda: ert.asarray(t, dtype="float32"),
    ):
        out = cast()
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out.numpy(), np.array([1.5, 2.5], dtype=np.float32))


# -- entry points --------------------------------------------------------------------
class FakeEntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self.value = f"fake_plugin.module:{name}"
        self.group = "eagerrt.devices"
        self._target = target
        self.loads = 0

    def load(self) -> Any:
        self.loads += 1
        return self._target


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch) -> list[FakeEntryPoint]:
    offered: list[FakeEntryPoint] = []

    def entry_points(*, group: str | None = None, **_: Any) -> list[FakeEntryPoint]:
        return [ep for ep in offered if group in (None, ep.group)]

    monkeypatch.setattr(devices_module, "entry_points", entry_points)
    return offered


def test_entry_point_device_factory_is_discovered(fake_entry_points) -> None:
    name = f"plugin{next(_names)}"
    made: list[BoxDevice] = []

    def factory() -> BoxDevice:
        made.append(BoxDevice(name))
        return made[-1]

    ep = FakeEntryPoint(name, factory)
    fake_entry_points.append(ep)
    assert name in ert.devices.available_devices()
    device = ert.get_device(name)
    assert device is made[0] and device.name == name
    assert ert.get_device(name) is device and ep.loads == 1  # loaded once, then registered
    t = ert.asarray(np.arange(3.0)).to(name)
    assert t.device is device
    np.testing.assert_array_equal(t.numpy(timeout=10), np.arange(3.0))
    device.pool.shutdown()


def test_entry_point_device_instance_is_discovered(fake_entry_points) -> None:
    name = f"plugin{next(_names)}"
    instance = BoxDevice(name)
    fake_entry_points.append(FakeEntryPoint(name, instance))
    assert ert.get_device(name) is instance
    instance.pool.shutdown()


def test_entry_point_giving_a_non_device_is_a_device_error(fake_entry_points) -> None:
    name = f"plugin{next(_names)}"
    ep = FakeEntryPoint(name, lambda: "not a device")
    fake_entry_points.append(ep)
    with pytest.raises(ert.DeviceError) as info:
        ert.get_device(name)
    assert ep.value in str(info.value)


def test_no_kernel_for_the_device_names_the_users_line(box_device: BoxDevice) -> None:
    t = ert.asarray(np.arange(3.0), device=box_device)
    with pytest.raises(ert.DeviceError) as info:
        line = sys._getframe().f_lineno + 1
        ert.exp(t)
    assert f'File "{__file__}", line {line}' in str(info.value)
    assert "has no kernel for device" in str(info.value)


class _RefusingExecutor:
    def submit(self, fn: Any) -> None:
        raise RuntimeError("this queue is closed")

    def queue_depth(self) -> int:
        return 0


def test_an_executor_refusing_work_fails_the_result_instead_of_leaving_it_pending(
    box_device: BoxDevice, clean_errors: None
) -> None:
    op = ert.define_op(_unique("custom_refused"), rule=_same_as_first, cost=lambda *a: HUGE_COST)

    @op.kernel(box_device.name)
    def _(x: Box) -> Box:  # pragma: no cover - never runs
        return x

    t = ert.asarray(np.arange(3.0), device=box_device)
    box_device.pool, pool = _RefusingExecutor(), box_device.pool  # type: ignore[assignment]
    try:
        out = op(t)
        assert out.wait(10) and out.state == "error"
        with pytest.raises(ert.KernelError, match="this queue is closed"):
            out.numpy()
    finally:
        box_device.pool = pool
    ert.synchronize(10)  # nothing left waiting


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (lambda x: x.array * 2, "returned a ndarray, not the device's array (Box)"),
        (lambda x: Box(np.zeros(7)), "returned float64[7] where the op's rule says float64[3]"),
        (lambda x: Box(x.array.astype("float32")), "float32[3] where the op's rule says float64"),
    ],
)
def test_a_kernels_result_is_checked_against_the_rule(
    box_device: BoxDevice, returned: Any, message: str, clean_errors: None
) -> None:
    """Issue 22: a device's kernel can't hand back the wrong type, shape or
    dtype silently; the failure names the op and the device, on read."""
    op = ert.define_op(_unique("custom_checked"), rule=_same_as_first)
    op.kernel(box_device.name)(returned)
    t = ert.asarray(np.arange(3.0), device=box_device)
    for _ in range(2):  # the first call and the inline cache's
        with pytest.raises(ert.KernelError, match=box_device.name) as info:
            op(t).numpy()
        assert message in str(info.value.__cause__)


def test_a_user_kernel_on_the_cpu_is_checked_too(clean_errors: None) -> None:
    op = ert.define_op(_unique("custom_cpu_checked"), rule=_same_as_first)
    op.kernel("cpu")(lambda x: x[:1])
    with pytest.raises(ert.KernelError, match="float64\\[1\\] where the op's rule says"):
        op(ert.ones(3)).numpy()


def test_stats_count_a_devices_own_queue(box_device: BoxDevice) -> None:
    """Issue 22: ert.stats() sees the work queued on a third-party device."""
    gate = threading.Event()
    op = ert.define_op(_unique("custom_gated"), rule=_same_as_first, cost=lambda *a: HUGE_COST)

    @op.kernel(box_device.name)
    def _(x: Box) -> Box:
        gate.wait(10)
        return x

    t = ert.asarray(np.arange(3.0), device=box_device)
    outs = [op(t) for _ in range(3)]  # one runs on the device's one thread, two wait
    try:
        assert ert.stats().queue_depth >= 2
    finally:
        gate.set()
    for out in outs:
        np.testing.assert_array_equal(out.numpy(timeout=10), np.arange(3.0))


def test_a_write_on_a_device_without_a_write_kernel_is_refused_at_the_call(
    box_device: BoxDevice,
) -> None:
    """Not a bare AttributeError from deep inside the write ('Box' has no copy):
    writes are ops, and this device gave ``setitem`` no kernel (nor a fallback)."""
    t = ert.asarray(np.arange(4.0), device=box_device)
    with pytest.raises(ert.DeviceError, match=r"'setitem' has no kernel for device") as info:
        line = sys._getframe().f_lineno + 1
        t[0] = 1.0
    assert f'File "{__file__}", line {line}' in str(info.value)
    np.testing.assert_array_equal(t.numpy(), np.arange(4.0))  # unchanged
    with pytest.raises(ert.DeviceError) as info:
        line = sys._getframe().f_lineno + 1
        t += 1  # no add kernel for the device: said at this line too
    assert f'File "{__file__}", line {line}' in str(info.value)
