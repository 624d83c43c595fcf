"""``__array_namespace_info__()``: what this Array API namespace supports.

>>> import eagerrt as ert
>>> info = ert.__array_namespace_info__()
>>> info.capabilities()["data-dependent shapes"], info.default_dtypes()["real floating"]
(True, dtype('float64'))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .devices import available_devices, get_device
from .devices.base import Device
from .dtypes import ALL_DTYPES

__all__ = ["NamespaceInfo", "__array_namespace_info__"]

_KINDS = (
    "bool",
    "signed integer",
    "unsigned integer",
    "integral",
    "real floating",
    "complex floating",
    "numeric",
)


class NamespaceInfo:
    """The Array API's inspection object for eagerrt."""

    def capabilities(self) -> dict[str, Any]:
        """Boolean-mask indexing and data-dependent shapes work: such ops
        (``t[mask]``, ``nonzero``, ``unique_*``) wait for the data that decides
        their shape at the call, then return tensors of known shape."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> Device:
        return get_device("cpu")

    def devices(self) -> list[Device]:
        """Every device eagerrt can use now (registered or offered by a plugin)."""
        return [get_device(name) for name in available_devices()]

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype[Any]]:
        get_device(device)  # an unknown device is an error, as the standard asks
        return {
            "real floating": ALL_DTYPES["float64"],
            "complex floating": ALL_DTYPES["complex128"],
            "integral": ALL_DTYPES["int64"],
            "indexing": ALL_DTYPES["int64"],
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype[Any]]:
        """The dtypes of ``kind`` (a kind name, a dtype, or a tuple of them; None: all)."""
        get_device(device)
        if kind is None:
            return dict(ALL_DTYPES)
        if isinstance(kind, str) and kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; known: {', '.join(_KINDS)}")
        return {name: d for name, d in ALL_DTYPES.items() if np.isdtype(d, kind)}

    def __repr__(self) -> str:
        return "<eagerrt namespace info>"


_INFO = NamespaceInfo()


def __array_namespace_info__() -> NamespaceInfo:
    return _INFO
