"""A stream device whose "streams" run each launch at once on the host, with
numpy arrays as its natives, that takes compiled plans whole and launches
through the lean path as the cuda device does: the cuda device's logic, run in
CI (tests/test_native_plan.py, tests/test_stream_launcher.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import eagerrt as ert
from eagerrt.devices.device_checks import check_later, checks_for, first_failure, take_checks
from eagerrt.devices.stream import DeviceValue, StreamDevice

__all__ = ["HostPlanDevice", "checked"]

#: Identity whose kernel leaves a device-side check: fails if any value is negative.
checked = ert.define_op(
    "host_stream_test_checked",
    rule=lambda x: (x.shape, x.dtype),
    doc="Identity whose kernel leaves a device-side check: fails if any value is negative.",
)


@checked.kernel()
def _checked_kernel(x: Any) -> Any:
    check_later(np.asarray((x < 0).any()), "a negative value")
    return x * 1


_names = itertools.count()


class HostPlanDevice(StreamDevice):
    """Streams that run each launch at once, numpy natives, whole plans taken."""

    runs_native_plans = True
    #: The cuda backend's compiler: native plans with its fusions (whose kernels
    #: are written over the array module, so they run on numpy natives too).
    backend = "eagerrt.backends.cuda"

    def __init__(self, compute_streams: int = 1) -> None:
        super().__init__(f"hostplans:{next(_names)}", compute_streams=compute_streams)
        self.plans_run = 0
        self.kernels_run = 0
        self.fast_launches = 0

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

    def _launch_fast(self, stream: Any, kernel: Callable[..., Any], values: Sequence[Any]) -> Any:
        # As the cuda device's: refuse what _launch must handle (a kernel that
        # raised, checks left), which then runs the kernel again.
        try:
            out = np.asarray(kernel(*[v.native if type(v) is DeviceValue else v for v in values]))
        except Exception:
            take_checks()
            return None
        if take_checks():
            return None
        self.fast_launches += 1
        return out

    def _launch(self, stream: Any, op: Any, kernel: Any, values: Any, static: Any, *_: Any) -> Any:
        args = [v.native if type(v) is DeviceValue else v for v in values]
        return self.call_kernel(op, kernel, args, static), checks_for(
            op.name, values, take_checks()
        )

    def plan_runner(
        self, run: Callable[[list[Any]], Any], inputs: int, results: Any = ()
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
