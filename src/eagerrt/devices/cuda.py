"""The CUDA device: CuPy arrays, kernels on CUDA streams, copies through pinned memory.

A thin layer: :class:`~eagerrt.devices.stream.StreamDevice` holds every rule
(ordering by events, host completion, copy streams, memory lifetimes, errors)
and this module maps its primitives onto CuPy's documented API:

* streams: ``cupy.cuda.Stream(non_blocking=True)``; an op's kernel runs with its
  stream current (``with stream:``), so CuPy launches there and allocates from
  that stream's arena of its memory pool;
* events: ``cupy.cuda.Event`` recorded on a stream, ``Stream.wait_event`` for a
  device-side wait, ``Event.done`` / ``Event.synchronize`` on the host, and
  ``Stream.launch_host_func`` for the host-callback completion;
* copies: host data is staged in pinned memory (``cupyx.empty_pinned``) and
  copied with ``ndarray.set(..., stream=)`` / ``ndarray.get(stream=, out=,
  blocking=False)`` on the copy streams;
* kernels: an op's "cuda" kernel if it has one (``eagerrt.backends.cuda``:
  CuPy's ufuncs for the elementwise ops, the creation ops, and matmul and the
  neural-network ops of ``backends/cuda/nn.py``, whose products call cuBLAS
  directly, ``gemm.py``, convolutions cuDNN, ``dnn.py``,
  softmax and norms one row kernel each, ``rows.py``), else its generic
  numpy-API kernel, which runs on cupy arrays through numpy's dispatch
  (``__array_ufunc__``, ``__array_function__``); a generic kernel that can't
  runs on the host instead, counted in ``host_fallbacks`` (none of the op
  records does, on an H100);
* checks a kernel makes on the device (an embedding index out of range) fail
  the result when the host reads it (``devices/device_checks.py``);
* eager ops called again with the same operand shapes and dtypes launch
  through the lean path (``StreamDevice.launcher``, ``CudaDevice._launch_fast``);
* compiled plans (``ert.function``) run as one unit of work on a stream,
  captured into a CUDA graph on their second call and replayed from then on
  (``devices/cuda_graphs.py``);
* out of memory (``cupy.cuda.memory.OutOfMemoryError``): the device waits for
  retained memory, frees CuPy's cached blocks and retries once; then the op's
  result is an error value and the device goes on.

CuPy is imported only when a ``cuda`` device is asked for; without it, or
without a visible GPU, that request raises a :class:`~eagerrt.DeviceError`
saying what to do. ``benchmarks/gpu_check.sh`` runs this device's tests and
benchmarks on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core import DeviceError
from .cpu import cpu
from .cuda_graphs import CapturedPlan
from .device_checks import checks_for, first_failure, take_checks
from .stream import DeviceMemoryError, DeviceValue, StreamDevice

__all__ = ["INSTALL_HINT", "CudaDevice", "cuda_device"]

INSTALL_HINT = "pip install 'eagerrt[cuda12]' (CUDA 12) or 'eagerrt[cuda13]' (CUDA 13)"


def cuda_device(index: int) -> CudaDevice:
    """The device ``cuda:index`` (raises DeviceError without CuPy or that GPU)."""
    try:
        import cupy
    except ImportError as exc:
        raise DeviceError(
            f"the cuda device needs CuPy, which is not installed ({exc}); {INSTALL_HINT}"
        ) from None
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
        why = ""
    except Exception as exc:  # no driver, driver too old, no device: CuPy says which
        count, why = 0, f": {type(exc).__name__}: {exc}"
    if count == 0:
        raise DeviceError(
            f"no CUDA GPU is visible{why} (CuPy {cupy.__version__} is installed; check "
            "the driver with nvidia-smi and CUDA_VISIBLE_DEVICES; if CuPy was built for "
            f"another CUDA version: {INSTALL_HINT})"
        )
    if index >= count:
        raise DeviceError(f"cuda:{index} asked for, but only cuda:0..cuda:{count - 1} are visible")
    return CudaDevice(index, cupy)


class CudaDevice(StreamDevice):
    """``cuda:N``: see the module docstring.

    ``completion`` is "callback" (a host function enqueued behind the event)
    or "watcher" (a thread waiting on events); ``compute_streams`` how many
    compute streams ``dev.stream(i)`` offers (ops follow their operands').
    """

    kernel_name = "cuda"
    backend = "eagerrt.backends.cuda"

    def __init__(
        self, index: int, cupy: Any, *, compute_streams: int = 1, completion: str = "callback"
    ) -> None:
        super().__init__(f"cuda:{index}", compute_streams=compute_streams, completion=completion)
        self.index = index
        self._cp = cupy
        # Made current around each call where another GPU could be current; with
        # one GPU visible it always is, and entering it (a runtime call each way)
        # would cost every launch a microsecond or two for nothing.
        self._many_devices = cupy.cuda.runtime.getDeviceCount() > 1
        self._device: Any = (
            cupy.cuda.Device(index) if self._many_devices else contextlib.nullcontext()
        )
        # host_fallbacks (the base class's counter) names the ops whose kernel
        # had to run on the host: what a cuda kernel should be written for.

    # -- primitives ---------------------------------------------------------------
    def _new_stream(self, kind: str) -> Any:
        with self._device:
            return self._cp.cuda.Stream(non_blocking=True)

    def _record_event(self, stream: Any) -> Any:
        with self._device:
            event = self._cp.cuda.Event(block=True, disable_timing=True)
            event.record(stream)
        return event

    def _wait_event(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def _event_done(self, event: Any) -> bool:
        return bool(event.done)

    def _event_synchronize(self, event: Any) -> None:
        event.synchronize()

    def _host_callback(self, stream: Any, callback: Callable[[], None]) -> None:
        stream.launch_host_func(lambda _arg: callback(), None)

    def _launch(
        self,
        stream: Any,
        op: Any,
        kernel: Callable[..., Any],
        values: Sequence[Any],
        static: dict[str, Any],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
    ) -> tuple[Any, Any]:
        args = [v.native if type(v) is DeviceValue else v for v in values]
        with self._device, stream:
            out = self.call_kernel(op, kernel, args, static)
        if out.shape != shape or out.dtype != dtype:
            raise RuntimeError(
                f"the cuda kernel of {op.name!r} gave {out.dtype}{list(out.shape)}, "
                f"expected {dtype}{list(shape)}"
            )
        return out, checks_for(op.name, values, take_checks())

    def _launch_fast(self, stream: Any, kernel: Callable[..., Any], values: Sequence[Any]) -> Any:
        # The launcher's common case: a call whose signature just ran through
        # _launch (its kernel gave the expected array). Anything unusual (an
        # exception, a result of another type, checks left) takes _launch.
        args = [v.native if type(v) is DeviceValue else v for v in values]
        try:
            if self._many_devices:
                with self._device, stream:
                    out = kernel(*args)
            else:
                with stream:
                    out = kernel(*args)
        except Exception:
            take_checks()
            return None
        if take_checks() or type(out) is not self._cp.ndarray:
            return None
        return out

    def call_kernel(
        self, op: Any, kernel: Callable[..., Any], args: Sequence[Any], static: dict[str, Any]
    ) -> Any:
        """``kernel(*args, **static)`` on native operands, on the current stream:
        a CuPy array; a generic kernel refusing CuPy arrays runs on the host
        (counted in ``host_fallbacks``); running out of memory raises
        :class:`DeviceMemoryError`. While a CUDA graph is being captured, a
        kernel's failure is the capture's (the host can't take part in a graph)."""
        cp = self._cp
        try:
            out = kernel(*args, **static)
        except cp.cuda.memory.OutOfMemoryError as exc:
            raise DeviceMemoryError(f"{self.name} is out of memory: {exc}") from exc
        except MemoryError:
            raise
        except Exception as exc:
            take_checks()  # the kernel's own, if it left any: the host run checks again
            if cp.cuda.get_current_stream().is_capturing():
                raise RuntimeError(
                    f"{op.name} can't be captured in a CUDA graph: {type(exc).__name__}: {exc}"
                ) from exc
            out = self._on_host(op, list(args), static)
        if type(out) is not cp.ndarray and not isinstance(out, tuple):  # tuples: several results
            out = cp.asarray(out)
        return out

    def stream_failure(self, value: DeviceValue) -> Any:
        """The first of ``value``'s checks that failed on the device (read once
        the value's work is done: the host is reading it)."""
        return first_failure(value.handle)

    # -- compiled plans ---------------------------------------------------------------
    runs_native_plans = True
    #: Compiled plans capture their kernels into CUDA graphs (see cuda_graphs).
    capture_plans = True

    def plan_runner(
        self,
        run: Callable[[list[Any]], Any],
        inputs: int,
        results: Sequence[tuple[tuple[int, ...], np.dtype[Any]]] = (),
    ) -> CapturedPlan:
        return CapturedPlan(self._cp, run, inputs, capture=self.capture_plans)

    def _launch_plan(
        self,
        stream: Any,
        runner: Callable[[Any, list[Any]], Any],
        natives: list[Any],
        values: Sequence[Any],
    ) -> tuple[list[Any], Any]:
        with self._device, stream:
            results, left = runner(stream, natives)
        return results, checks_for("function", values, left)

    def _on_host(self, op: Any, args: list[Any], static: dict[str, Any]) -> Any:
        """Run the op's CPU kernel on host copies (a generic kernel refused cupy
        arrays); its failure there is the op's failure."""
        cp = self._cp
        kernel = op._kernel_for(cpu)
        host = [cp.asnumpy(a) if type(a) is cp.ndarray else a for a in args]
        self.host_fallbacks[op.name] += 1
        return cp.asarray(kernel(*host, **static))

    def _stage(self, array: np.ndarray) -> Any:
        import cupyx

        staged = cupyx.empty_pinned(array.shape, array.dtype)
        staged[...] = array
        return staged

    def _copy_to_device(self, stream: Any, staged: Any) -> tuple[Any, None]:
        cp = self._cp
        with self._device, stream:
            try:
                out = cp.empty(staged.shape, staged.dtype)
            except cp.cuda.memory.OutOfMemoryError as exc:
                raise DeviceMemoryError(f"{self.name} is out of memory: {exc}") from exc
            out.set(staged, stream=stream)
        return out, None

    def _copy_to_host(self, stream: Any, value: DeviceValue) -> Any:
        import cupyx

        with self._device, stream:
            source = self._cp.ascontiguousarray(value.native)
            staged = cupyx.empty_pinned(source.shape, source.dtype)
            try:
                source.get(stream=stream, out=staged, blocking=False)
            except TypeError:  # CuPy before `blocking=`: a given stream made it asynchronous
                source.get(stream=stream, out=staged)
        return staged

    def _unstage(self, staged: Any) -> np.ndarray:
        return np.array(staged, copy=True)  # the pinned buffer goes back to CuPy's pool

    def _reclaim(self) -> None:
        with self._device:
            self._cp.get_default_memory_pool().free_all_blocks()
