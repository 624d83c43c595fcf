"""``boxdev``: a third-party device, as a hardware maker would ship one.

Its arrays are its own wrapper class (:class:`Box`: numpy can't see through it),
it runs work on one worker thread of its own, and it joins eagerrt through the
``eagerrt.devices`` entry point (``box = boxdev:make_device``) without patching
eagerrt. Its backend (:mod:`boxdev.backend`, named by ``BoxDevice.backend`` and
imported on first use) registers the kernels it has and a compiler; every other
op runs on the host (``host_fallback``), counted. The tests in
``tests/test_box_device.py`` hold it to the device contract.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import eagerrt as ert
from eagerrt.lowlevel import WorkerPool

__all__ = ["Box", "BoxDevice", "make_device"]


class Box:
    """The device's native array: data behind a wrapper numpy can't read."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("a Box is read through BoxDevice.to_numpy, not np.asarray")

    def __repr__(self) -> str:
        return f"Box({self.array!r})"


class BoxDevice(ert.Device):
    """Boxed host arrays on a worker thread of the device's own."""

    generic_kernels = False  # eagerrt's generic kernels expect numpy-API arrays
    host_fallback = True  # ops without a box kernel run on the host, counted
    backend = "boxdev.backend"
    native_types = (Box,)

    def __init__(self, name: str = "box") -> None:
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
        self.downloads += 1
        return native.array.copy()

    def native_shape_dtype(self, native: Box) -> tuple[tuple[int, ...], np.dtype[Any]]:
        return native.array.shape, native.array.dtype

    def close(self) -> None:
        super().close()
        self.pool.shutdown()


def make_device() -> BoxDevice:
    """The entry point's target: eagerrt calls it the first time "box" is asked for."""
    return BoxDevice("box")
