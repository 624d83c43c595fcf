"""eagerrt: an asyncio-native eager execution runtime for numpy-style arrays.

Every op returns a :class:`Tensor` at once, with its shape, dtype and device
known; its data is computed as soon as its inputs are ready (inline when cheap,
on worker threads when not) and read with ``await t`` or ``t.numpy()``.

>>> import numpy as np, eagerrt as ert
>>> x = ert.asarray(np.ones((2, 3), dtype="float32"))
>>> h = ert.relu(x @ ert.ones((3, 4), dtype="float32") - 1)
>>> h.shape, h.dtype
((2, 4), dtype('float32'))
>>> h.numpy()[0, 0]
np.float32(2.0)
"""

from __future__ import annotations

from . import devices, fft, linalg, lowlevel
from ._core.config import Config, config, sync_mode
from ._core.errors import (
    ArgumentError,
    DeviceError,
    DTypeError,
    EagerError,
    KernelError,
    OutOfBoundsError,
    ShapeError,
    UsageError,
    ValueRangeError,
    WaitTimeoutError,
)
from ._core.scheduler import EagerErrorGroup, Stats, stats, synchronize
from .calibrate import calibrate
from .devices import Device, get_device, register_device
from .ops import *  # noqa: F403 - the op functions are the public API
from .ops import __all__ as _ops_all
from .tensor import Tensor

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "Config",
    "DTypeError",
    "Device",
    "DeviceError",
    "EagerError",
    "EagerErrorGroup",
    "KernelError",
    "OutOfBoundsError",
    "ShapeError",
    "Stats",
    "Tensor",
    "UsageError",
    "ValueRangeError",
    "WaitTimeoutError",
    "__version__",
    "calibrate",
    "config",
    "devices",
    "fft",
    "get_device",
    "linalg",
    "lowlevel",
    "register_device",
    "stats",
    "sync_mode",
    "synchronize",
    *_ops_all,
]
