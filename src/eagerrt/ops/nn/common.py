"""What the neural-network ops share: argument checks, the cost of
flops and elements, and the types of their rules."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..._core.config import config
from ..._core.errors import ArgumentError

Shape = tuple[int, ...]
RuleOut = tuple[Shape, np.dtype[Any]]
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
INT64 = np.dtype(np.int64)


def float_dtype(what: str, first: Any, *others: Any) -> np.dtype[Any]:
    """The common float32/float64 dtype of these tensors (None entries skipped)."""
    dtype = getattr(first, "dtype", None)  # a Tensor in rules, an array in kernels
    if dtype is None:
        raise TypeError(f"{what} needs a tensor, not {type(first).__name__}")
    if dtype not in FLOATS:
        raise TypeError(f"{what} needs float32 or float64 tensors, got {dtype}")
    for other in others:
        if other is not None and other.dtype != dtype:
            raise TypeError(
                f"{what} needs operands of one dtype, got {dtype} and {other.dtype} "
                "(cast one with .astype)"
            )
    return dtype


def ints(value: Any, n: int, name: str, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints (PyTorch's ``_pair``), each >= minimum."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or a sequence of {n} ints, got {value!r}")
    try:
        if isinstance(value, (int, np.integer)):
            out = (int(value),) * n
        else:
            out = tuple(operator.index(v) for v in value)
            if len(out) == 1:
                out *= n
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of {n} ints, got {value!r}") from None
    if len(out) != n:
        raise ArgumentError(f"{name} must have {n} values, got {value!r}")
    if any(v < minimum for v in out):
        raise ArgumentError(f"{name} must be >= {minimum}, got {value!r}")
    return out


def check_shape(what: str, tensor: Any, shape: Shape) -> None:
    if tensor is not None and tensor.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {tensor.shape}")


def spatial_input(what: str, x: Any) -> None:
    if x.ndim not in (3, 4):
        raise ValueError(f"{what} needs a 4-d (N, C, H, W) or 3-d (C, H, W) input, got {x.shape}")


def batched(x: np.ndarray) -> np.ndarray:
    """A (C, H, W) image as a batch of one (kernels work on 4-d arrays)."""
    return x[None] if x.ndim == 3 else x


def flop_cost(flops: float, elements: float) -> float:
    return config.op_overhead_ns + flops * config.ns_per_flop + elements * config.ns_per_element


def present(*tensors: Any) -> tuple[Any, ...]:
    """The given optional operands (None ones dropped) and which were given."""
    return tuple(t for t in tensors if t is not None)
