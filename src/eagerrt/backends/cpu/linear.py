"""The CPU's linear kernel: one product over all leading dimensions, split by
rows or on MKL's pool, with epilogues; its out form."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..._core import config
from ...ops.registry import get_op
from . import blas, pooled_linear, threads


@get_op("matmul").specialize("cpu")
def _matmul_cpu(a: Any, b: Any) -> Any:
    # For matrices and vectors ``ndarray.dot`` equals ``matmul`` and costs half as
    # much per call (0.33 vs 0.72 us for 4x4 float32 here), which small models feel.
    # Kernels hand plain ndarrays to each other (asarray drops subclasses), so
    # the unbound method applies directly.
    return np.ndarray.dot if a.ndim <= 2 and b.ndim <= 2 else None


#: Rows per unit when a linear layer's rows are shared by two threads: measured
#: 15% more single-thread time than one call for 4096x384 @ 384x1536 (each call
#: packs the weight again), where 64-row units cost 55%.
LINEAR_ROWS = 256

#: A linear layer with at least this many flops (and two units of rows) splits
#: its rows over two threads.
LINEAR_SPLIT_FLOPS = 2e7

#: ``epilogue(start, stop)``: elementwise work on rows [start, stop) of the
#: result, run right after they are computed (while they are in cache).
Epilogue = Callable[[int, int], None]


def linear_into(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    out: np.ndarray,
    epilogue: Epilogue | None = None,
    pooled: pooled_linear.PooledLinear | None = None,
) -> None:
    """``out[...] = x @ weight.T + bias`` (then ``epilogue`` over the rows) as one
    matrix product over all leading dimensions. Without an epilogue it is one
    pool kernel where it can be (:mod:`.pooled_linear`; ``pooled``, set up for
    this shape by graph mode, else looked up here). Otherwise large products
    share their rows, in units of LINEAR_ROWS, between a helper thread and this
    one (BLAS on one thread each, the epilogue on each unit as it is done);
    smaller ones are one BLAS call (BLAS's own threads) and then the epilogue."""
    n, k = weight.shape
    m = math.prod(out.shape[:-1])
    if epilogue is None and out.flags.c_contiguous:
        if pooled is None:
            pooled = _pooled_linear_for(m, n, k, x, weight, bias, out)
        if pooled is not None:
            operand = (pooled.no_bias if bias is None else bias,)
            if pooled(x, weight, operand, out.reshape(m, n)):
                return
    target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    x2 = x.reshape(m, k)  # a copy only for a non-contiguous x
    out2 = threads.work_view(target, (m, n))
    units = -(-m // LINEAR_ROWS)
    if units >= 2 and 2.0 * m * n * k >= LINEAR_SPLIT_FLOPS and config.num_threads >= 2:
        threads.shared_by_two(_linear_rows, units, x2, weight.T, bias, out2, epilogue)
    else:
        # One product on BLAS's own threads: for a transformer at batch 1 (128 rows)
        # they beat sharing the columns with the helper thread (MiniLM: 26 vs 31 ms).
        # On this thread alone while other tasks have the other cores. BLAS reads
        # the transposed weight in place.
        if m * n * k > threads.BLAS_ONE_THREAD:
            threads.one_product(x2, weight.T, out2)
        else:
            np.matmul(x2, weight.T, out=out2)
        if bias is not None:
            out2 += bias
        if epilogue is not None:
            epilogue(0, m)
    if target is not out:
        out[...] = target


def _linear_rows(
    x2: np.ndarray,
    wt: np.ndarray,
    bias: np.ndarray | None,
    out2: np.ndarray,
    epilogue: Epilogue | None,
    units: Iterable[int],
    single: bool,
) -> None:
    """Units of LINEAR_ROWS rows of :func:`linear_into`'s product (``single``,
    whether BLAS was held to one thread, is not needed)."""
    m = x2.shape[0]
    for unit in units:
        start, stop = unit * LINEAR_ROWS, min(m, (unit + 1) * LINEAR_ROWS)
        rows = out2[start:stop]
        blas.matmul(x2[start:stop], wt, rows)
        if bias is not None:
            rows += bias
        if epilogue is not None:
            epilogue(start, stop)


def _pooled_linear_for(
    m: int, n: int, k: int, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, out: np.ndarray
) -> pooled_linear.PooledLinear | None:
    """An eager call's :class:`~.pooled_linear.PooledLinear` for its shape
    (kept per shape), or None where it can't run one: operands of mixed dtypes,
    or a bias not C-contiguous."""
    dtype = out.dtype
    if x.dtype != dtype or w.dtype != dtype:
        return None
    if bias is not None and (bias.dtype != dtype or not bias.flags.c_contiguous):
        return None
    # What the pool's readiness hangs on is part of the key: a shape first seen
    # under numpy's BLAS or one thread gets its kernel when they are set back.
    key = (m, n, k, dtype, config.blas, config.num_threads)
    pooled = _POOLED_LINEARS.get(key, _NOT_KEPT)
    if pooled is _NOT_KEPT:  # (workers may clear the dict meanwhile: the local answers)
        pooled = pooled_linear.pooled_linear(pooled_linear.linear_on_pool, m, n, k, dtype)
        if len(_POOLED_LINEARS) >= _KEPT_POOLED_LINEARS:
            _POOLED_LINEARS.clear()
        _POOLED_LINEARS[key] = pooled
    return pooled


#: Eager linear calls' pool kernels, by shape, dtype and the settings the pool
#: depends on; at most this many kept.
_POOLED_LINEARS: dict[tuple[Any, ...], Any] = {}
_KEPT_POOLED_LINEARS = 64
_NOT_KEPT: Any = object()


def linear_out_form(inputs: Sequence[Any]) -> Callable[..., None]:
    """graph mode's out form of a linear node with these inputs (Values of one
    dtype): :func:`linear_into`, its pool kernel set up now for the plan's
    shapes."""
    x, w = inputs[0], inputs[1]
    n, k = w.shape
    m = math.prod(x.shape[:-1])
    pooled = pooled_linear.pooled_linear(pooled_linear.linear_on_pool, m, n, k, x.dtype)
    if len(inputs) == 3:
        return lambda x, w, b, out, epilogue=None: linear_into(x, w, b, out, epilogue, pooled)
    return lambda x, w, out, epilogue=None: linear_into(x, w, None, out, epilogue, pooled)


def _linear_kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    out = np.empty((*x.shape[:-1], weight.shape[0]), np.result_type(x, weight))
    linear_into(x, weight, bias, out)
    return out


get_op("linear").register_kernel("cpu", _linear_kernel)
