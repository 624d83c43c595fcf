"""Compiled functions as native plans (``eagerrt.graph.native_plan``), on the CPU.

The cuda device takes a compiled function's plan as one unit of work on one
stream and replays it as a CUDA graph (tests/test_cuda.py, on a GPU). The plan
itself is device-neutral: here a stream device whose "streams" run each launch
at once on the host, with numpy arrays as its native arrays, takes plans the
same way, so CI checks how plans are built, ordered, fed and failed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.devices.device_checks import check_later, checks_for, first_failure, take_checks
from eagerrt.devices.stream import DeviceValue, StreamDevice
from eagerrt.graph.native_plan import NativePlan

_names = itertools.count()


class HostPlanDevice(StreamDevice):
    """Streams that run each launch at once, numpy natives, whole plans taken."""

    runs_native_plans = True

    def __init__(self) -> None:
        super().__init__(f"hostplans:{next(_names)}")
        self.plans_run = 0
        self.kernels_run = 0

    def _new_stream(self, kind: str) -> object:
        return object()

    def _record_event(self, stream: Any) -> object:
        return object()

    def _wait_event(self, stream: Any, event: Any) -> None:
        pass

    def _event_done(self, event: Any) -> bool:
        return True

    def _event_synchronize(self, event: Any) -> None:
        pass

    def _host_callback(self, stream: Any, callback: Callable[[], None]) -> None:
        callback()

    def call_kernel(
        self, op: Any, kernel: Callable[..., Any], args: Sequence[Any], static: dict[str, Any]
    ) -> Any:
        self.kernels_run += 1
        return np.asarray(kernel(*args, **static))

    def _launch(self, stream: Any, op: Any, kernel: Any, values: Any, static: Any, *_: Any) -> Any:
        args = [v.native if type(v) is DeviceValue else v for v in values]
        return self.call_kernel(op, kernel, args, static), checks_for(
            op.name, values, take_checks()
        )

    def plan_runner(
        self, run: Callable[[list[Any]], Any], inputs: int
    ) -> Callable[[Any, list[Any]], Any]:
        def runner(stream: Any, natives: list[Any]) -> tuple[list[Any], list[Any]]:
            self.plans_run += 1
            return run(natives), take_checks()

        return runner

    def _launch_plan(self, stream: Any, runner: Any, natives: Any, values: Any) -> Any:
        results, left = runner(stream, natives)
        return results, checks_for("function", values, left)

    def stream_failure(self, value: DeviceValue) -> Any:
        return first_failure(value.handle)

    def _stage(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True)

    def _copy_to_device(self, stream: Any, staged: np.ndarray) -> tuple[np.ndarray, None]:
        return staged, None

    def _copy_to_host(self, stream: Any, value: DeviceValue) -> np.ndarray:
        return np.array(value.native, copy=True)

    def _unstage(self, staged: np.ndarray) -> np.ndarray:
        return staged


@pytest.fixture
def dev() -> Iterator[HostPlanDevice]:
    device = HostPlanDevice()
    ert.register_device(device)
    yield device


_checked = ert.define_op(
    "native_plan_test_checked",
    rule=lambda x: (x.shape, x.dtype),
    doc="Identity whose kernel leaves a device-side check: fails if any value is negative.",
)


@_checked.kernel()
def _checked_kernel(x: Any) -> Any:
    check_later(np.asarray((x < 0).any()), "a negative value")
    return x * 1


def test_a_compiled_function_runs_as_one_plan(dev: HostPlanDevice) -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 4)).astype("float32")

    def net(w: ert.Tensor) -> Callable[[ert.Tensor], tuple[ert.Tensor, ert.Tensor]]:
        def f(x: ert.Tensor) -> tuple[ert.Tensor, ert.Tensor]:
            h = ert.relu(x @ w)
            return ert.softmax(h, axis=-1), h.sum()

        return f

    compiled = ert.function(net(ert.asarray(weight, device=dev)))
    for _ in range(3):
        data = rng.standard_normal((5, 6)).astype("float32")
        probs, total = compiled(ert.asarray(data, device=dev))
        assert probs.is_ready() and probs.device is dev
        want_probs, want_total = net(ert.asarray(weight))(ert.asarray(data))
        np.testing.assert_allclose(probs.numpy(), want_probs.numpy(), rtol=1e-6)
        np.testing.assert_allclose(float(total), float(want_total), rtol=1e-5)
    plan = compiled.compiled_for(ert.asarray(data, device=dev)).plan
    assert isinstance(plan, NativePlan)
    assert dev.plans_run == 3  # each call one unit of work, not an enqueue per op


def test_a_result_that_is_an_input_or_a_constant_is_a_copy(dev: HostPlanDevice) -> None:
    w = ert.asarray(np.ones(3, "float32"), device=dev)
    compiled = ert.function(lambda x: (x, w, x + w))
    x = ert.asarray(np.zeros(3, "float32"), device=dev)
    same, weight, total = compiled(x)
    assert same._value.native is not x._value.native
    assert weight._value.native is not w._value.native
    np.testing.assert_array_equal(total.numpy(), np.ones(3))


def test_inputs_not_ready_run_op_by_op(dev: HostPlanDevice, gate: Any) -> None:
    g = gate()
    pending = g(np.arange(3.0))  # a CPU tensor, pending on a worker
    compiled = ert.function(lambda x: x * 2)
    x = ert.asarray(np.arange(3.0), device=dev)
    compiled(x)  # traced on a ready input
    runs = dev.plans_run
    moved = pending.to(dev)
    out = compiled(moved)
    g.open()
    np.testing.assert_array_equal(out.numpy(timeout=30), [0.0, 2.0, 4.0])
    assert dev.plans_run == runs  # not ready when called: eager calls instead


def test_checks_left_by_kernels_fail_the_read(dev: HostPlanDevice) -> None:
    compiled = ert.function(lambda x: _checked(x) + 1)
    ok = compiled(ert.asarray(np.ones(3), device=dev))
    np.testing.assert_array_equal(ok.numpy(), np.full(3, 2.0))
    bad = compiled(ert.asarray(-np.ones(3), device=dev))
    assert bad.is_ready()  # found on the device: known when the host reads
    with pytest.raises(ert.KernelError, match="a negative value"):
        bad.numpy()
    later = bad * 2  # an eager op on the failed result fails the same way
    with pytest.raises(ert.KernelError, match="a negative value"):
        later.numpy()


def test_a_kernel_failing_at_launch_fails_every_result_naming_the_function(
    dev: HostPlanDevice,
) -> None:
    boom = ert.define_op("native_plan_test_boom", rule=lambda x: (x.shape, x.dtype))

    @boom.kernel()
    def _boom(x: Any) -> Any:
        raise ValueError("no good")

    compiled = ert.function(lambda x: (boom(x), x + 1))
    first, second = compiled(ert.asarray(np.ones(2), device=dev))
    for result in (first, second):
        with pytest.raises(ert.KernelError, match="no good"):
            result.numpy()
