"""A tensor wrapping data that already exists (what ``asarray`` does for data
that is not a tensor): ready at once, no op.

It sits below the ops, which all take plain data where a tensor goes: the
registry converts operands with it, and ``creation.asarray`` adds the cases of
a tensor given (a cast, copy or move: ops) on top.

>>> import numpy as np
>>> t = wrap(np.arange(3.0))
>>> t.is_ready(), t.dtype, t.op
(True, dtype('float64'), 'asarray')
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core import ArgumentError, DTypeError
from ..devices import get_device
from ..devices.base import Device
from ..tensor import Tensor

__all__ = ["DeviceLike", "as_tensor", "wrap"]

DeviceLike = str | Device | None


def wrap(
    obj: Any, *, dtype: Any = None, device: DeviceLike = None, copy: bool | None = None
) -> Tensor:
    """A ready tensor of ``obj`` (not a tensor), with ``asarray``'s options and errors."""
    dev = get_device(device)
    try:
        array = np.asarray(obj, dtype=dtype, copy=copy)
    except (TypeError, ValueError) as exc:
        if copy is False and isinstance(exc, ValueError):  # numpy: a copy was needed
            raise ArgumentError(f"asarray: {exc}") from None
        raise DTypeError(
            f"asarray: cannot make a tensor from {type(obj).__name__}: {exc}"
        ) from None
    if array.dtype.kind in "OSUVMm":
        raise DTypeError(
            f"asarray: eagerrt tensors hold numbers and bools, not {array.dtype} "
            f"(from {type(obj).__name__})"
        )
    if type(array) is not np.ndarray:  # np.matrix and friends change operators' meaning
        array = array.view(np.ndarray)
    if not array.dtype.isnative:
        # Kernels produce native-order results; keep every tensor native so the
        # metadata computed at the call always matches the data.
        if copy is False:
            raise ArgumentError("asarray: non-native byte order needs a copy, but copy=False")
        array = array.astype(array.dtype.newbyteorder("="))
    if array.flags.writeable:
        # A read-only view: the caller's own array keeps its flags, and readers of
        # the tensor cannot write into data that pending ops still read.
        array = array.view()
        array.flags.writeable = False
    dev.check_open()
    return Tensor._ready(dev.from_numpy(array), array.shape, array.dtype, dev, "asarray")


def as_tensor(x: Any) -> Tensor:
    """``x`` itself if a tensor, else a tensor wrapping it."""
    return x if isinstance(x, Tensor) else wrap(x)
