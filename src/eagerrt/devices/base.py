"""What a device provides to the runtime.

A device owns where its data lives and how work runs there. The core asks it
for an executor (worker threads for the CPU, streams for a GPU) and for
conversions to and from host numpy arrays; ops register kernels per device name.
Third-party devices subclass :class:`Device` and join through the
``eagerrt.devices`` entry point group (see :mod:`eagerrt.devices`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import DeviceError, Executor

__all__ = ["Device", "on_device_closed"]

_closed_listeners: list[Callable[[Device], None]] = []


def on_device_closed(listener: Callable[[Device], None]) -> None:
    """Call ``listener(device)`` whenever a device is closed (the op registry
    forgets the calls its fast paths remember)."""
    _closed_listeners.append(listener)


class Device:
    """Base class of devices. Subclasses set ``name`` and implement the methods.

    ``generic_kernels`` says whether an op's generic (numpy-API) kernel may run on
    this device's native arrays when the op has no kernel for it.
    """

    name: str = "abstract"
    generic_kernels: bool = False
    #: The name its ops' kernels are registered under (None: ``name``), so
    #: ``cuda:0`` and ``cuda:1`` share the "cuda" kernels.
    kernel_name: str | None = None
    #: This device's backend: a module (``eagerrt.backends.<name>`` for eagerrt's
    #: own devices) that registers the device's kernels and out forms as it is
    #: imported, when the device first looks up a kernel or compiles a graph,
    #: and defines ``backend``, an :class:`eagerrt.graph.backend.Backend` (its
    #: graph passes and compiler). None: the registry's kernels only, and
    #: compiled functions run op by op.
    backend: str | None = None
    #: Results are ready once their work is enqueued (a stream device, see
    #: :mod:`eagerrt.devices.stream`): ops call :meth:`enqueue`, and reading
    #: the data waits for the device.
    completes_at_enqueue: bool = False
    #: The registry checks each kernel's result on this device against the
    #: op's rule (shape, dtype, and :attr:`native_types`): on by default, since
    #: nothing else checks a device's kernels, nor the generic ones run on its
    #: arrays. Kernels registered from outside eagerrt are checked on every
    #: device. (Stream devices check their own, at enqueue.)
    checks_results: bool = True
    #: The types of this device's native arrays (None: any type).
    native_types: tuple[type, ...] | None = None
    #: An op with no kernel for this device runs its CPU kernel on host copies
    #: of the operands, the result uploaded (counted in :attr:`host_fallbacks`),
    #: instead of raising "no kernel" at the call.
    host_fallback: bool = False
    #: Set by :meth:`close`: the device takes no new work.
    closed: bool = False

    @property
    def host_fallbacks(self) -> collections.Counter[str]:
        """How many times each op ran on the host for want of a kernel here."""
        return self.__dict__.setdefault("_host_fallbacks", collections.Counter())

    def close(self) -> None:
        """Take no new work: later ops, uploads and copies to this device raise
        :class:`~eagerrt.DeviceError` at the call, and ``get_device`` of its
        name makes a new device where it can. Work already submitted finishes.
        A subclass releases what it holds (threads, streams, memory), then
        calls this. Closing twice is harmless.

        >>> import numpy as np, eagerrt as ert
        >>> from eagerrt.devices.stream_threads import ThreadStreamDevice
        >>> dev = ert.register_device(ThreadStreamDevice("teststream:closing"))
        >>> x = ert.asarray(np.ones(2), device=dev) + 1
        >>> dev.close()
        >>> x.numpy()  # finished before the close
        array([2., 2.])
        >>> try:
        ...     x + 1
        ... except ert.DeviceError as exc:
        ...     print(str(exc).splitlines()[0].split(": ")[-1])
        device 'teststream:closing' is closed
        """
        if self.closed:
            return
        self.closed = True
        for listener in _closed_listeners:
            listener(self)

    def check_open(self) -> None:
        """Raise :class:`~eagerrt.DeviceError` if the device is closed."""
        if self.closed:
            raise DeviceError(f"device {self.name!r} is closed")

    @property
    def executor(self) -> Executor:
        """Where work too heavy to run inline goes."""
        raise NotImplementedError

    def from_numpy(self, array: np.ndarray) -> Any:
        """A host array's data as this device's native array."""
        raise NotImplementedError

    def to_numpy(self, native: Any) -> np.ndarray:
        """A native array's data as a host numpy array (may block)."""
        raise NotImplementedError

    def native_shape_dtype(self, native: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """A native array's shape and dtype (default: its ``shape`` and
        ``dtype`` attributes), to check kernels' results against."""
        return tuple(native.shape), np.dtype(native.dtype)

    def enqueue(
        self,
        op: Any,
        kernel: Any,
        values: Any,
        static: dict[str, Any],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
    ) -> Any:
        """Enqueue an op on a device that :attr:`completes_at_enqueue`: the
        result's value, ready for the device's other ops at once."""
        raise NotImplementedError

    def launcher(self, op: Any, kernel: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """For a device that :attr:`completes_at_enqueue`: a function of an op's
        operand values that enqueues it as :meth:`enqueue` would, for calls
        with the shapes and dtypes of one that just did (the op registry's
        inline cache)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def __str__(self) -> str:
        return self.name
