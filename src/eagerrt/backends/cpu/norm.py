"""The CPU's normalization kernels: rows normalized by numba, split over two
threads or on MKL's pool; layer norm's out form."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..._core import config
from ...ops.nn.common import FLOATS
from ...ops.nn.norm import affine_operands, as_normalized_shape
from ...ops.registry import get_op
from . import numba_nn, pooled_linear, shared_pool, threads


def _normalize(
    x: np.ndarray, cols: int, weight: Any, bias: Any, eps: float, out: np.ndarray | None = None
) -> np.ndarray:
    """Rows of ``cols`` values normalized (numba), then scaled and shifted; into
    ``out`` (``x``'s shape) when given, else into a new array."""
    rows = np.ascontiguousarray(x).reshape(-1, cols)
    if out is None or not out.flags.c_contiguous:
        result = np.empty_like(rows)
        _normalize_rows_into(rows, result, weight, bias, eps)
        if out is None:
            return result.reshape(x.shape)
        out[...] = result.reshape(x.shape)  # a strided buffer: copied in
        return out
    _normalize_rows_into(rows, threads.work_view(out, rows.shape), weight, bias, eps)
    return out


def _normalize_rows_into(
    rows: np.ndarray, out: np.ndarray, weight: Any, bias: Any, eps: float
) -> None:
    """``out[:] =`` the (rows, cols) ``rows`` normalized, scaled and shifted."""
    cols, dtype = rows.shape[1], rows.dtype
    w = np.ones(cols, dtype) if weight is None else np.ascontiguousarray(weight).reshape(cols)
    b = np.zeros(cols, dtype) if bias is None else np.ascontiguousarray(bias).reshape(cols)
    if rows.size >= _NORMALIZE_SPLIT and config.num_threads >= 2:
        # Rows are independent, and numba releases the GIL: blocks of them on two threads.
        threads.rows_by_two(_normalize_block, rows.shape[0], rows, out, w, b, eps)
    elif rows.size:
        numba_nn.normalize_rows(rows, out, w, b, eps)


#: Values a normalization shares between two threads from (measured: 128 x 384 take
#: 45 us on one thread, about what a hand-off to the helper costs; 4096 x 384 take
#: 1.56 ms on one, 0.90 ms shared).
_NORMALIZE_SPLIT = 1 << 19


def _normalize_block(
    rows: np.ndarray,
    out: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    eps: float,
    r0: int,
    r1: int,
    single: bool,
) -> None:
    numba_nn.normalize_rows(rows[r0:r1], out[r0:r1], w, b, eps)


def _layer_norm_kernel(x: np.ndarray, *affine: np.ndarray, **static: Any) -> np.ndarray:
    return _layer_norm_run(x, affine, None, **static)


def layer_norm_into(x: np.ndarray, *affine_and_out: np.ndarray, **static: Any) -> None:
    """The layer norm kernel writing into a compiled plan's buffer (the last
    array): no fresh output to allocate and fault in on every call."""
    *affine, out = affine_and_out
    _layer_norm_run(x, tuple(affine), out, **static)


def _layer_norm_run(
    x: np.ndarray,
    affine: tuple[np.ndarray, ...],
    out: np.ndarray | None,
    normalized_shape: Any = (),
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> np.ndarray:
    """Layer norm of ``x`` with the ``affine`` operands the flags say it has;
    into ``out`` when given."""
    weight, bias = affine_operands(affine, has_weight, has_bias)
    cols = math.prod(as_normalized_shape(normalized_shape))
    return _normalize(x, cols, weight, bias, float(eps), out)


class _PooledNorm(shared_pool.PoolKernel):
    """graph mode's layer norm, set up once for the plan's shapes: rows of
    ``cols`` values, normalized by :func:`numba_nn.normalize_rows_on_pool`
    in blocks shared by numba's parallel loop (MiniLM at batch 32, 4096 rows
    of 384: 0.45 against 0.80 ms with the helper thread), with no Python for
    the affine operands' shapes a call. Declines (False) what it was not set
    up for: strided arrays, ``config.num_threads`` changed since."""

    def __init__(
        self, rows: int, cols: int, dtype: np.dtype[Any], has_weight: bool, has_bias: bool
    ) -> None:
        super().__init__()
        self.kernel = numba_nn.normalize_rows_on_pool
        self.shape = (rows, cols)
        self.blocks = np.array(pooled_linear.row_blocks(rows, self.threads), np.int64)
        self.has_weight, self.has_bias = has_weight, has_bias
        self.ones, self.zeros = np.ones(cols, dtype), np.zeros(cols, dtype)

    def __call__(
        self, x: np.ndarray, affine: Sequence[np.ndarray], out: np.ndarray, eps: float
    ) -> bool:
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            return False
        weight = affine[0].reshape(-1) if self.has_weight else self.ones
        bias = affine[-1].reshape(-1) if self.has_bias else self.zeros
        if not (weight.flags.c_contiguous and bias.flags.c_contiguous) or self.claim() is None:
            return False
        self.kernel(x.reshape(self.shape), out.reshape(self.shape), weight, bias, eps, self.blocks)
        return True


#: A layer norm over fewer values runs on one thread (the loop's start costs
#: about what sharing 128 rows of 384 saves).
_POOL_NORM_VALUES = 1 << 15


def layer_norm_out_form(inputs: Sequence[Any], static: dict[str, Any]) -> Callable[..., None]:
    """graph mode's layer norm into the plan's buffer: :class:`_PooledNorm`
    where the pool can run it, else :func:`layer_norm_into`."""
    x = inputs[0]
    cols = math.prod(as_normalized_shape(static.get("normalized_shape", ())))
    has_weight, has_bias = bool(static.get("has_weight")), bool(static.get("has_bias"))
    eps = float(static.get("eps", 1e-5))
    pooled = None
    same = all(a.dtype == x.dtype for a in inputs[1:])
    if x.size >= _POOL_NORM_VALUES and cols and x.dtype in FLOATS and same and shared_pool.ready():
        pooled = _PooledNorm(x.size // cols, cols, x.dtype, has_weight, has_bias)

    def out_form(x: np.ndarray, *affine_and_out: np.ndarray) -> None:
        *affine, out = affine_and_out
        if pooled is None or not pooled(x, affine, out, eps):
            layer_norm_into(x, *affine_and_out, **static)

    return out_form


get_op("layer_norm").register_kernel("cpu", _layer_norm_kernel)


def _group_norm_kernel(
    x: np.ndarray,
    *affine: np.ndarray,
    num_groups: int = 1,
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> np.ndarray:
    weight, bias = affine_operands(affine, has_weight, has_bias)
    n, c = x.shape[:2]
    per_group = math.prod(x.shape[1:]) // num_groups
    out = _normalize(x, per_group, None, None, float(eps))
    if weight is not None or bias is not None:
        channels = out.reshape(n, c, -1)
        if weight is not None:
            channels *= weight.reshape(c, 1)
        if bias is not None:
            channels += bias.reshape(c, 1)
    return out


get_op("group_norm").register_kernel("cpu", _group_norm_kernel)
