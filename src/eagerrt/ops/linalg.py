"""Matrix products: ``matmul`` (the ``@`` operator) and ``tensordot``.

>>> import eagerrt as ert
>>> (ert.ones((2, 3)) @ ert.ones((3, 4))).shape
(2, 4)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core.config import config
from .._core.errors import ShapeError
from ..tensor import Tensor
from ._rules import broadcast_shapes, normalize_axis, ufunc_dtype
from .registry import GENERIC, define_op

__all__ = ["matmul", "tensordot"]


def _tensor_operands(op: str, a: Any, b: Any) -> None:
    if type(a) is not Tensor or type(b) is not Tensor:
        # numpy says ValueError: a scalar has too few dimensions
        raise ValueError(f"{op} needs two tensors of at least one dimension, not a scalar")


def _matmul_rule(a: Any, b: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    _tensor_operands("matmul", a, b)
    sa, sb = a.shape, b.shape
    # The common case first: two matrices of one float dtype.
    dtype = a.dtype if a.dtype is b.dtype and a.dtype.kind in "fc" else ufunc_dtype(np.matmul, a, b)
    if len(sa) == 2 and len(sb) == 2:
        if sa[1] != sb[0]:
            raise ShapeError(f"inner dimensions differ: {sa[1]} (of {sa}) vs {sb[0]} (of {sb})")
        return (sa[0], sb[1]), dtype
    if not sa or not sb:
        raise ShapeError("matmul does not take 0-d tensors; use multiply (*) for scalars")
    ka = sa[-1]
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if ka != kb:
        raise ShapeError(f"inner dimensions differ: {ka} (of {sa}) vs {kb} (of {sb})")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    rows = (sa[-2],) if len(sa) > 1 else ()
    cols = (sb[-1],) if len(sb) > 1 else ()
    return batch + rows + cols, dtype


def _matmul_cost(shape: tuple[int, ...], dtype: np.dtype[Any], /, a: Tensor, b: Tensor) -> float:
    inner = a.shape[-1]
    return config.op_overhead_ns + 2.0 * math.prod(shape) * inner * config.ns_per_flop


matmul = define_op(
    "matmul", _matmul_rule, cost=_matmul_cost, doc="Matrix product with numpy's ``@`` rules."
)
matmul.register_kernel(GENERIC, np.matmul)


@matmul.specialize("cpu")
def _matmul_cpu(a: Tensor, b: Tensor) -> Any:
    # For matrices and vectors ``ndarray.dot`` equals ``matmul`` and costs half as
    # much per call (0.33 vs 0.72 us for 4x4 float32 here), which small models feel.
    # Kernels hand plain ndarrays to each other (asarray drops subclasses), so
    # the unbound method applies directly.
    if a.ndim <= 2 and b.ndim <= 2:
        return np.ndarray.dot
    return None


def _tensordot_axes(
    a: Tensor, b: Tensor, axes: int | Sequence[Any]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if isinstance(axes, (int, np.integer)):
        axes = int(axes)
        if not 0 <= axes <= min(a.ndim, b.ndim):
            raise ShapeError(f"axes={axes} is out of range for {a.ndim}-d and {b.ndim}-d tensors")
        return tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    try:
        left, right = axes
    except (TypeError, ValueError):
        raise TypeError(f"axes must be an int or a pair of axis lists, got {axes!r}") from None
    left = (left,) if isinstance(left, (int, np.integer)) else tuple(left)
    right = (right,) if isinstance(right, (int, np.integer)) else tuple(right)
    if len(left) != len(right):
        raise ShapeError(f"axes {left} and {right} differ in length")
    left_axes = tuple(normalize_axis(x, a.ndim) for x in left)
    right_axes = tuple(normalize_axis(x, b.ndim) for x in right)
    if len(set(left_axes)) != len(left_axes) or len(set(right_axes)) != len(right_axes):
        raise ShapeError(f"repeated axis in axes={axes!r}")
    return left_axes, right_axes


def _tensordot_rule(
    a: Any, b: Any, axes: int | Sequence[Any] = 2
) -> tuple[tuple[int, ...], np.dtype[Any]]:
    _tensor_operands("tensordot", a, b)
    left, right = _tensordot_axes(a, b, axes)
    for x, y in zip(left, right, strict=True):
        if a.shape[x] != b.shape[y]:
            raise ShapeError(
                f"contracted dimensions differ: axis {x} of {a.shape} vs axis {y} of {b.shape}"
            )
    shape = tuple(d for i, d in enumerate(a.shape) if i not in left) + tuple(
        d for i, d in enumerate(b.shape) if i not in right
    )
    return shape, np.result_type(a.dtype, b.dtype)


def _tensordot_cost(
    shape: tuple[int, ...], dtype: np.dtype[Any], /, a: Tensor, b: Tensor, axes: Any = 2
) -> float:
    left, _ = _tensordot_axes(a, b, axes)
    contracted = math.prod(a.shape[i] for i in left)
    return config.op_overhead_ns + 2.0 * math.prod(shape) * contracted * config.ns_per_flop


tensordot = define_op(
    "tensordot",
    _tensordot_rule,
    cost=_tensordot_cost,
    operands=2,
    doc="Sum products over the given axes, as ``numpy.tensordot``.",
)
tensordot.register_kernel(GENERIC, lambda a, b, axes=2: np.tensordot(a, b, axes=axes))
