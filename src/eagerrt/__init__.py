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

import importlib
import math
from typing import Any

from . import devices, einops_backend, fft, graph, linalg, lowlevel, pipeline, serving, weights
from ._core import (
    ArgumentError,
    BatchError,
    Config,
    DeviceError,
    DTypeError,
    EagerError,
    EagerErrorGroup,
    KernelError,
    OutOfBoundsError,
    PipelineError,
    PrecisionError,
    ShapeError,
    Stats,
    TracingError,
    UsageError,
    ValueRangeError,
    WaitTimeoutError,
    WeightsError,
    config,
    deterministic,
    stats,
    sync_mode,
    synchronize,
)
from .calibrate import calibrate
from .devices import Device, get_device, register_device
from .dtypes import *  # noqa: F403 - the Array API's dtypes and dtype functions
from .dtypes import __all__ as _dtypes_all
from .graph import cond, function, while_loop
from .namespace_info import __array_namespace_info__
from .ops import (  # noqa: F401 - re-exported through _ops_all
    GENERIC,
    Op,
    define_op,
    elementwise_cost,
    get_op,
    random,
    registered_ops,
)
from .ops import __all__ as _ops_all

# The op functions are the public API: each op module's names (listed one
# module at a time, so type checkers see them; test_layers checks the list).
from .ops.creation import *  # noqa: F403
from .ops.elementwise import *  # noqa: F403
from .ops.futures import *  # noqa: F403
from .ops.indexing import *  # noqa: F403
from .ops.interop import *  # noqa: F403
from .ops.linalg import *  # noqa: F403
from .ops.manipulation import *  # noqa: F403
from .ops.nn import *  # noqa: F403
from .ops.reduction import *  # noqa: F403
from .ops.registry import load_backend_module as _load_backend_module
from .ops.searching import *  # noqa: F403
from .ops.sets import *  # noqa: F403
from .ops.sorting import *  # noqa: F403
from .profiler import Profile, profile
from .tensor import Tensor

# The CPU's backend (its kernels, out forms and compiler), loaded now rather than
# on the first op, so that importing eagerrt is all the set-up there is.
_load_backend_module(devices.cpu.backend or "")

__version__ = "0.1.0"
#: The version of the Python Array API standard this namespace follows.
__array_api_version__ = "2024.12"

# The Array API's constants.
e = math.e
pi = math.pi
inf = math.inf
nan = math.nan
newaxis = None


# einops finds eagerrt's backend whichever of the two is imported first (without
# importing einops here).
einops_backend.install()


def __getattr__(name: str) -> Any:
    # ert.onnx is imported on first use: it registers its own ops and its loader
    # needs the onnx package (the models extra), which `import eagerrt` must not.
    if name == "onnx":
        return importlib.import_module(".onnx", __name__)
    # ert.distributed (scale-out on Ray) is imported on first use too, and imports
    # Ray only when a deployment starts.
    if name == "distributed":
        return importlib.import_module(".distributed", __name__)
    raise AttributeError(f"module 'eagerrt' has no attribute {name!r}")


__all__ = [
    "ArgumentError",
    "BatchError",
    "Config",
    "DTypeError",
    "Device",
    "DeviceError",
    "EagerError",
    "EagerErrorGroup",
    "KernelError",
    "OutOfBoundsError",
    "PipelineError",
    "PrecisionError",
    "Profile",
    "ShapeError",
    "Stats",
    "Tensor",
    "TracingError",
    "UsageError",
    "ValueRangeError",
    "WaitTimeoutError",
    "WeightsError",
    "__array_api_version__",
    "__array_namespace_info__",
    "__version__",
    "calibrate",
    "cond",
    "config",
    "deterministic",
    "devices",
    "e",
    "fft",
    "function",
    "graph",
    "get_device",
    "inf",
    "linalg",
    "lowlevel",
    "nan",
    "newaxis",
    "pi",
    "pipeline",
    "profile",
    "register_device",
    "serving",
    "stats",
    "sync_mode",
    "synchronize",
    "weights",
    "while_loop",
    *_dtypes_all,
    *_ops_all,
]
