"""A linear layer as one numba parallel loop on MKL's oneTBB workers.

``x @ w.T`` then elementwise work on the result (the bias, an activation, a
residual add) is cut into blocks of rows, one numba ``prange`` iteration each:
the iteration computes its rows with MKL's gemm on its own core
(:mod:`eagerrt.backends.cpu.native_gemm`) and runs the elementwise work on them at
once, in that core's cache. No Python runs between the blocks, nor between
the product and its epilogue, and the epilogue is split over the cores as the
product is (measured MiniLM at batch 1, 128 x 384 -> 1536 with GELU: 590
against 690 us, the GELU's 180 us no longer on one thread).

Where rows are few and the weight is deep (128 x 1536 -> 384), cutting by
rows would have every core pack the whole weight: the product is cut by
columns instead, and the epilogue then runs over blocks of rows in a second
loop (its kernels are only fast over C-contiguous rows, which a block of
columns is not: measured 420 against 180 us for a GELU).

Two kinds of kernel: :func:`linear_on_pool`, compiled here, adds a bias (or
nothing); graph mode's epilogue fusion generates one per fused epilogue
(:func:`driver_source`), which calls the epilogue's own generated kernel on
each block. :class:`PooledLinear` sets either up once for a shape and runs it.

>>> import numpy as np
>>> from eagerrt.backends.cpu import pooled_linear
>>> blocks = pooled_linear.row_blocks(4096, 2)
>>> len(blocks) - 1, blocks[1]
(8, 512)
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import numba
import numpy as np

from ..._core import config
from . import blas, shared_pool
from .native_gemm import TRANS, gemm

__all__ = [
    "PooledLinear",
    "driver_source",
    "linear_on_pool",
    "pool_applies",
    "pooled_linear",
    "row_blocks",
]

#: A product with fewer flops runs as before (one BLAS call): a parallel
#: loop's start costs about what it saves below this.
POOL_FLOPS = 4e6
#: Rows a block, about: enough that each block's product packs the weight
#: once for many rows (MKL packs it per call), few enough for the epilogue
#: to find its rows in cache (measured 4096 x 384 -> 1152: 512 rows best).
BLOCK_ROWS = 512


def row_blocks(m: int, threads: int) -> list[int]:
    """Row boundaries ``[0, ..., m]`` of the blocks for ``m`` rows: a multiple
    of ``threads`` of them (every thread gets as many), of about BLOCK_ROWS
    rows each, multiples of 8 rows where there are enough."""
    count = threads * max(1, round(m / (threads * BLOCK_ROWS)))
    count = max(1, min(count, m))
    step = m / count
    bounds = [0]
    for i in range(1, count):
        edge = round(i * step)
        if m >= 8 * count:
            edge -= edge % 8
        bounds.append(max(edge, bounds[-1] + 1))
    bounds.append(m)
    return bounds


def by_columns(m: int, n: int, k: int, threads: int) -> bool:
    """Whether to cut the product by columns: few rows a thread against a deep
    weight, so that cutting by rows would have each thread pack all of it
    (measured 128 x 1536 -> 384: 1.08x MKL's own threads by rows)."""
    return threads > 1 and k > n and m // threads < 128 and n >= 32 * threads


@numba.njit(nogil=True, cache=True, inline="always")
def product_rows(
    address: int, x2: Any, w: Any, out2: Any, r0: int, r1: int
) -> None:  # pragma: no cover - compiled
    """``out2[r0:r1] = x2[r0:r1] @ w.T`` by MKL's gemm on this thread (all
    arrays C-contiguous, ``w`` (n, k))."""
    k = x2.shape[1]
    n = w.shape[0]
    item = x2.itemsize
    one, zero = x2.dtype.type(1.0), x2.dtype.type(0.0)
    gemm(address, TRANS, r1 - r0, n, k, one, x2.ctypes.data + r0 * k * item, k,
         w.ctypes.data, k, zero, out2.ctypes.data + r0 * n * item, n)  # fmt: skip


@numba.njit(nogil=True, cache=True, inline="always")
def product_columns(
    address: int, x2: Any, w: Any, out2: Any, part: int, parts: int
) -> None:  # pragma: no cover - compiled
    """Columns of ``out2 = x2 @ w.T``, the ``part``-th of ``parts`` (cut at
    multiples of 16 columns: whole cache lines)."""
    m, k = x2.shape
    n = w.shape[0]
    item = x2.itemsize
    per = -(-n // parts)
    per = -(-per // 16) * 16
    c0 = part * per
    c1 = min(n, c0 + per)
    if c0 < c1:
        one, zero = x2.dtype.type(1.0), x2.dtype.type(0.0)
        gemm(address, TRANS, m, c1 - c0, k, one, x2.ctypes.data, k,
             w.ctypes.data + c0 * k * item, k, zero, out2.ctypes.data + c0 * item, n)  # fmt: skip


@numba.njit(nogil=True, cache=True)
def _add_bias(rows: Any, bias: Any) -> None:  # pragma: no cover - compiled
    """``rows += bias`` over C-contiguous rows (not inlined into the parallel
    loop: LLVM vectorizes it only as a function of its own)."""
    m, n = rows.shape
    for i in range(m):
        for j in range(n):
            rows[i, j] += bias[j]


@numba.njit(parallel=True, nogil=True, cache=True)
def linear_on_pool(
    address: int, x2: Any, w: Any, bias: Any, out2: Any, blocks: Any, columns: int
) -> None:  # pragma: no cover - compiled
    """``out2 = x2 @ w.T + bias`` (no bias where ``bias`` is empty): blocks of
    rows ``blocks[i]:blocks[i + 1]`` each a product and its bias on one
    thread, or where ``columns`` is not 0 the product cut into that many
    parts by columns, then the bias added by blocks of rows. (The part count
    is an argument: numba's ``get_num_threads`` in the kernel would keep it
    out of numba's cache.)"""
    count = len(blocks) - 1
    with_bias = bias.shape[0] > 0
    if columns:
        for part in numba.prange(columns):
            product_columns(address, x2, w, out2, part, columns)
        if with_bias:
            for b in numba.prange(count):
                _add_bias(out2[blocks[b] : blocks[b + 1]], bias)
    else:
        for b in numba.prange(count):
            r0, r1 = blocks[b], blocks[b + 1]
            product_rows(address, x2, w, out2, r0, r1)
            if with_bias:
                _add_bias(out2[r0:r1], bias)


def driver_source(ndim: int, by_rows: list[bool]) -> str:
    """Source lines of ``pooled(address, x2, w, <operands>, out, blocks,
    columns)``, :func:`linear_on_pool`'s loop with ``kernel(<operands>, out)``
    (an epilogue's generated kernel, defined beside it, over ``ndim``-d
    arrays, reading the product from ``out``) run on each block of rows in
    place of the bias: operand ``j`` is cut into the block's rows where
    ``by_rows[j]`` (it has ``out``'s shape), else passed whole (it broadcasts
    over all but the last dimension). A block is viewed as (1, ..., rows, n)."""
    names = [f"a{j}" for j in range(len(by_rows))]
    lead = "1, " * (ndim - 2)
    # numba's cache checks a file's own date only: code it inlined from this
    # module would outlive a change here. This module's digest in the source
    # makes a changed module another source, compiled anew.
    digest = _module_digest()

    def block(name: str) -> str:
        return f"{name}2[r0:r1].reshape(({lead}r1 - r0, n))"

    pairs = list(zip(names, by_rows, strict=True))
    operands = [block(a) if rows else a for a, rows in pairs]
    call = f"kernel({', '.join([*operands, block('out')])})"
    flat = [f"    {a}2 = {a}.reshape((m, n))" for a, rows in pairs if rows]
    params = ", ".join(["address", "x2", "w", *names, "out", "blocks", "columns"])
    return "\n".join(
        [
            f"# the product's kernels: eagerrt.backends.cpu.pooled_linear {digest}",
            "from eagerrt.backends.cpu.pooled_linear import product_columns, product_rows",
            "",
            "",
            "@numba.njit(parallel=True, nogil=True, cache=True, error_model='numpy')",
            f"def pooled({params}):",
            "    m = x2.shape[0]",
            "    n = w.shape[0]",
            "    out2 = out.reshape((m, n))",
            *flat,
            "    count = len(blocks) - 1",
            "    if columns:",
            "        for part in numba.prange(columns):",
            "            product_columns(address, x2, w, out2, part, columns)",
            "        for b in numba.prange(count):",
            "            r0, r1 = blocks[b], blocks[b + 1]",
            f"            {call}",
            "    else:",
            "        for b in numba.prange(count):",
            "            r0, r1 = blocks[b], blocks[b + 1]",
            "            product_rows(address, x2, w, out2, r0, r1)",
            f"            {call}",
            "",
        ]
    )


@functools.cache
def _module_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


class PooledLinear(shared_pool.PoolKernel):
    """``out = x @ w.T`` then elementwise work, as one call of a pool kernel,
    set up once for a shape (``m`` rows of ``k`` into ``n`` columns, of
    ``dtype``): eager calls keep one per shape.

    ``kernel`` is :func:`linear_on_pool` (its operand a bias, or an empty
    array for none) or a generated driver (:func:`driver_source`, its
    operands the epilogue's). Where other tasks have the other cores the loop
    runs on the calling thread alone, MKL held to it too."""

    def __init__(self, kernel: Any, m: int, n: int, k: int, dtype: np.dtype[Any]) -> None:
        super().__init__(dtype)
        self.kernel, self.shape = kernel, (m, k)
        self.blocks = np.array(row_blocks(m, self.threads), np.int64)
        self.no_bias = np.empty(0, dtype)  # linear_on_pool's bias where there is none
        # The one-thread form (other cores taken): one block, by rows.
        self.one_block = np.array([0, m], np.int64)
        # Column parts, one a thread; 0: blocks of rows.
        self.columns = self.threads if by_columns(m, n, k, self.threads) else 0

    def __call__(self, x: np.ndarray, w: np.ndarray, operands: tuple[Any, ...], out: Any) -> bool:
        """Run the kernel: ``x`` (..., k) and ``w`` (n, k) C-contiguous, ``out``
        C-contiguous of the result's shape; False (nothing done) where they
        are not so, ``config.num_threads`` was changed since or
        ``config.blas`` now asks for numpy's BLAS."""
        if config.blas == "numpy" or not (x.flags.c_contiguous and w.flags.c_contiguous):
            return False
        alone = self.claim()
        if alone is None:
            return False
        x2 = x.reshape(self.shape)
        if alone:
            self.held(self.kernel, self.address, x2, w, *operands, out, self.one_block, 0)
        else:
            self.kernel(self.address, x2, w, *operands, out, self.blocks, self.columns)
        return True


def pool_applies(m: int, n: int, k: int, dtype: np.dtype[Any]) -> bool:
    """Whether a product of ``m`` rows of ``k`` into ``n`` columns of ``dtype``
    runs as a pool kernel: enough work, such a pool
    (:func:`shared_pool.ready`), a dtype MKL's gemm takes, and dimensions
    within its 32-bit ints."""
    if 2.0 * m * n * k < POOL_FLOPS or max(m, n, k) >= 1 << 31:
        return False
    return shared_pool.ready() and blas.gemm_address(dtype) is not None


def pooled_linear(kernel: Any, m: int, n: int, k: int, dtype: np.dtype[Any]) -> PooledLinear | None:
    """A :class:`PooledLinear` running ``kernel`` for this shape, or None
    where :func:`pool_applies` says no."""
    return PooledLinear(kernel, m, n, k, dtype) if pool_applies(m, n, k, dtype) else None
