"""Data types: the Array API's dtype objects and dtype functions.

eagerrt's dtypes *are* numpy's ``np.dtype`` objects, so ``t.dtype``,
``ert.float32`` and ``np.dtype("float32")`` are one and the same and compare
equal; numpy's promotion rules (NEP 50: Python scalars are weak) decide result
types, which for the Array API's defined cases are the standard's.

>>> import eagerrt as ert
>>> ert.ones(3, dtype=ert.float32).dtype == ert.float32
True
>>> ert.isdtype(ert.int8, "signed integer"), ert.result_type(ert.int8, ert.int16, 1)
(True, dtype('int16'))
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._core import DTypeError
from .tensor import Tensor

__all__ = [
    "bool",
    "can_cast",
    "complex64",
    "complex128",
    "finfo",
    "float32",
    "float64",
    "iinfo",
    "int8",
    "int16",
    "int32",
    "int64",
    "isdtype",
    "result_type",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

bool = np.dtype("bool")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")

#: Every dtype of the Array API, by name.
ALL_DTYPES: dict[str, np.dtype[Any]] = {
    str(d): d
    for d in (
        bool,
        int8,
        int16,
        int32,
        int64,
        uint8,
        uint16,
        uint32,
        uint64,
        float32,
        float64,
        complex64,
        complex128,
    )
}


def _dtype_of(x: Any, what: str) -> np.dtype[Any]:
    if isinstance(x, Tensor):
        return x.dtype
    try:
        return np.dtype(x)
    except TypeError:
        raise DTypeError(f"{what} needs a dtype or a tensor, got {x!r}") from None


def isdtype(dtype: Any, kind: Any) -> builtins.bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name ("bool",
    "signed integer", "unsigned integer", "integral", "real floating",
    "complex floating", "numeric") or a tuple of them.

    >>> import eagerrt as ert
    >>> ert.isdtype(ert.float32, ("integral", "real floating"))
    True
    """
    if not isinstance(dtype, np.dtype) or str(dtype) not in ALL_DTYPES:
        raise DTypeError(f"isdtype needs an eagerrt dtype, got {dtype!r}")
    try:
        return builtins.bool(np.isdtype(dtype, kind))
    except (TypeError, ValueError) as exc:
        raise DTypeError(f"isdtype: {exc}") from None


def result_type(*arrays_and_dtypes: Any) -> np.dtype[Any]:
    """The dtype that combining these tensors, dtypes and Python scalars gives
    (scalars are weak: they don't widen the result).

    >>> import eagerrt as ert
    >>> ert.result_type(ert.asarray([1], dtype=ert.uint8), 2.5)
    dtype('float64')
    """
    if not arrays_and_dtypes:
        raise DTypeError("result_type needs at least one tensor or dtype")
    parts: list[Any] = [
        x if isinstance(x, (builtins.bool, int, float, complex)) else _dtype_of(x, "result_type")
        for x in arrays_and_dtypes
    ]
    if not any(isinstance(p, np.dtype) for p in parts):
        raise DTypeError("result_type needs at least one tensor or dtype, not only Python scalars")
    try:
        return np.result_type(*parts)
    except TypeError as exc:
        raise DTypeError(f"result_type: {exc}") from None


def can_cast(from_: Any, to: Any, /) -> builtins.bool:
    """Whether ``from_`` (a dtype or tensor) casts to ``to`` without losing values."""
    return builtins.bool(np.can_cast(_dtype_of(from_, "can_cast"), _dtype_of(to, "can_cast")))


@dataclass(frozen=True)
class FInfo:
    """Machine limits of a floating dtype, as the Array API asks: Python numbers."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype[Any]


@dataclass(frozen=True)
class IInfo:
    """Machine limits of an integer dtype, as the Array API asks: Python ints."""

    bits: int
    max: int
    min: int
    dtype: np.dtype[Any]


def finfo(type: Any, /) -> FInfo:
    """Machine limits of a floating dtype (a complex dtype's are its parts').

    >>> import eagerrt as ert
    >>> ert.finfo(ert.float32).bits, ert.finfo(ert.float32).eps
    (32, 1.1920928955078125e-07)
    """
    dtype = _dtype_of(type, "finfo")
    if dtype.kind not in "fc":
        raise DTypeError(f"finfo needs a floating dtype, got {dtype}")
    info = np.finfo(dtype)
    return FInfo(
        bits=int(info.bits),
        eps=float(info.eps),
        max=float(info.max),
        min=float(info.min),
        smallest_normal=float(info.smallest_normal),
        dtype=dtype,
    )


def iinfo(type: Any, /) -> IInfo:
    """Machine limits of an integer dtype.

    >>> import eagerrt as ert
    >>> ert.iinfo(ert.int8).min, ert.iinfo(ert.uint16).max
    (-128, 65535)
    """
    dtype = _dtype_of(type, "iinfo")
    if dtype.kind not in "iu":
        raise DTypeError(f"iinfo needs an integer dtype, got {dtype}")
    info = np.iinfo(dtype)
    return IInfo(bits=int(info.bits), max=int(info.max), min=int(info.min), dtype=dtype)
