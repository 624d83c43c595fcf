"""Tensors pickle, copy and deep-copy as their values.

A tensor's state is a future and the locks around it, which neither pickle nor
copy; what a user means by saving one (``pickle``, ``joblib``, ``copy.deepcopy``
of a model's state, a tensor sent to another process) is its value. So a tensor
reduces to its data, waiting for it if it is still pending, and the name of its
device: loading it makes a ready tensor of that data on a device of that name (a
:class:`~eagerrt.DeviceError` where the loading process has none). A failed
tensor raises its :class:`~eagerrt.KernelError` when pickled.

>>> import copy, pickle, eagerrt as ert
>>> t = ert.asarray([1.0, 2.0]) * 2
>>> pickle.loads(pickle.dumps(t)).numpy()
array([2., 4.])
>>> copy.deepcopy({"weight": t})["weight"].device.name
'cpu'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from .creation import asarray

__all__: list[str] = []


def _rebuild(data: np.ndarray, device: str) -> Tensor:
    """A ready tensor of ``data`` on the device named ``device``."""
    return asarray(data, device=device)


def _reduce(self: Tensor) -> tuple[Any, ...]:
    data = np.array(self.numpy(), copy=True)  # waits for it; the copy is writable
    return _rebuild, (data, self.device.name)


Tensor.__reduce__ = _reduce  # type: ignore[assignment,method-assign]
