"""Tensors completed from outside eagerrt: ``ert.from_future``.

Work that eagerrt does not run itself (a Ray actor's result, a thread pool's,
another service's answer) still belongs in the dependency graph. ``from_future``
makes a pending tensor of a promised shape and dtype that a future completes:
it is awaitable on asyncio, uvloop and trio, readable with ``.numpy()`` in sync
code, and ops that use it park on it as on any pending tensor. The future's
thread never blocks: the tensor completes in the future's done callback.

A result of another shape or dtype than promised, or a future that fails,
fails the tensor with a :class:`~eagerrt.KernelError` naming the line that made
it (read on await, as a kernel failure is).

>>> from concurrent.futures import ThreadPoolExecutor
>>> import numpy as np, eagerrt as ert
>>> with ThreadPoolExecutor(1) as pool:
...     t = ert.from_future(pool.submit(np.ones, 3), (3,), "float64")
...     (t * 2).numpy()
array([2., 2., 2.])
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .._core import (
    ERROR,
    READY,
    DeviceError,
    DTypeError,
    Failure,
    ShapeError,
    SourceLine,
    user_line,
)
from ..devices import get_device
from ..tensor import Tensor
from ._rules import shape_tuple, to_dtype
from .wrap import DeviceLike

__all__ = ["from_future"]


class FutureLike(Protocol):
    """What ``from_future`` needs of a future: ``concurrent.futures.Future``,
    ``asyncio.Future`` and Ray's ``ObjectRef.future()`` all have it."""

    def add_done_callback(self, fn: Any, /) -> Any: ...

    def result(self) -> Any: ...


def from_future(
    future: FutureLike,
    shape: Any,
    dtype: Any,
    *,
    device: DeviceLike = None,
    name: str = "from_future",
) -> Tensor:
    """A pending tensor of ``shape`` and ``dtype`` that ``future`` completes with
    its result (anything ``np.asarray`` takes, of that shape and dtype).

    ``name`` is the tensor's op, as errors and the profiler show it. The device
    must keep its data on the host (the CPU); move the tensor with ``.to()``.
    """
    dev = get_device(device)
    if dev.completes_at_enqueue:
        raise DeviceError(
            f"from_future makes tensors on the host, not on {dev.name!r}: "
            f"make it on the CPU and move it with .to({dev.name!r})"
        )
    t = pending(shape_tuple(shape), to_dtype(dtype), name, device=dev)
    site = user_line()
    future.add_done_callback(lambda done: _settle(t, done, site))
    return t


def pending(
    shape: tuple[int, ...], dtype: np.dtype[Any], name: str, *, device: DeviceLike = None
) -> Tensor:
    """A pending host tensor for :func:`fulfil` or :func:`fail` to complete."""
    return Tensor._pending(shape, dtype, get_device(device), name)


def fulfil(t: Tensor, value: Any, site: SourceLine | None) -> None:
    """Complete ``t`` with ``value``, or fail it where the value is not of the
    shape and dtype ``t`` promised."""
    try:
        # Python values take the promised dtype where numpy can cast them so
        # (a float for a float32 tensor); an array must have it already.
        array = np.asarray(value)
        if not isinstance(value, np.ndarray) and np.can_cast(array.dtype, t.dtype, "same_kind"):
            array = array.astype(t.dtype, copy=False)
        if array.shape != t.shape:
            raise ShapeError(
                f"{t.op}: the result has shape {array.shape}, where the tensor promised {t.shape}"
            )
        if array.dtype != t.dtype:
            raise DTypeError(
                f"{t.op}: the result has dtype {array.dtype}, where the tensor promised {t.dtype}"
            )
        native = t.device.from_numpy(array)
    except Exception as exc:
        fail_all([t], exc, site)
        return
    t._complete(READY, native)


def fail_all(
    tensors: list[Tensor], cause: BaseException | Failure, site: SourceLine | None
) -> None:
    """Fail ``tensors`` with one failure (read once, reported once): reading
    any raises a KernelError caused by ``cause``, naming ``site``; or with a
    failure some other tensor already holds (an argument's)."""
    if not tensors:
        return
    failure = cause if isinstance(cause, Failure) else Failure(tensors[0].op, site, cause)
    for t in tensors:
        t._complete(ERROR, failure)


def _settle(t: Tensor, done: FutureLike, site: SourceLine | None) -> None:
    try:
        value = done.result()
    except BaseException as exc:  # a cancelled future too: the tensor must not hang
        fail_all([t], exc, site)
        return
    fulfil(t, value, site)
