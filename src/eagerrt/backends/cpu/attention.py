"""The CPU's attention kernel: heads in blocks split over two threads, or on
MKL's pool; its out form."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..._core import config
from ...ops.nn.attention import AttentionGeometry, attention_geometry
from ...ops.nn.common import Shape
from ...ops.registry import get_op
from . import blas, numba_nn, shared_pool, threads

#: Scores per block of (batch, head) pairs: float32 blocks of about 1 MB, so a
#: block stays in cache from its first matmul through softmax to the second;
#: measured 5% faster than 512 KB for 96 heads of 128x128 on two threads (each
#: block's Python steps between native calls contend for the GIL).
_SCORE_BLOCK = 1 << 18

#: Attention with at least this many flops splits its heads over two threads
#: (measured, 128 queries and keys of 32 values a head: 12 heads, 25 Mflop, take
#: 410 us on one thread and 421 us split, the hand-off costing what the split
#: saves; 24 heads take 851 us on one, 671 us split).
_ATTENTION_SPLIT_FLOPS = 4e7


class _Heads(NamedTuple):
    """A strided (B, H, L, E) view whose (batch, head) pairs can't be flattened
    without a copy: :func:`_block` copies the pairs a block needs."""

    view: np.ndarray


def _as_batch(x: np.ndarray, batch: Shape, repeat: int) -> np.ndarray | _Heads:
    """``x`` broadcast over ``batch`` as one (B, rows, cols) array (copied only
    when broadcasting or repeating heads makes it necessary), or a 4-d view that
    would need a copy to flatten, left for the blocks to copy from."""
    if repeat == 1 and x.ndim == 4 and x.shape[:-2] == tuple(batch):
        b, h = x.shape[:2]
        if b > 1 and h > 1 and x.strides[0] != h * x.strides[1]:
            return _Heads(x)  # (batch, head) pairs can't be one axis without a copy
    if repeat > 1:
        x = np.repeat(x, repeat, axis=-3)
    x = np.broadcast_to(x, (*batch, *x.shape[-2:]))
    return x.reshape(math.prod(batch), *x.shape[-2:])  # not -1: sizes may be 0


def _block(x: np.ndarray | _Heads, c0: int, c1: int, scratch: np.ndarray | None) -> np.ndarray:
    """Pairs [c0, c1) of an :func:`_as_batch` result as a (c1 - c0, rows, cols) array."""
    if not isinstance(x, _Heads):
        return x[c0:c1]
    assert scratch is not None
    out = scratch[: c1 - c0]
    numba_nn.gather_heads(x.view, c0, out)
    return out


class _KeyMask(NamedTuple):
    """A boolean (B or 1, 1, 1, S) mask of 4-d attention, inverted: True where a
    key is masked out for every query of every head of that batch item."""

    masked: np.ndarray  # (B or 1, S)
    heads: int


def _key_mask(mask: np.ndarray, batch: Shape) -> _KeyMask | None:
    """``mask`` (already inverted) as a :class:`_KeyMask` where it has that form."""
    if len(batch) != 2 or mask.ndim != 4 or mask.shape[1:3] != (1, 1):
        return None
    if mask.shape[0] not in (1, batch[0]):
        return None
    return _KeyMask(np.ascontiguousarray(mask.reshape(mask.shape[0], mask.shape[3])), batch[1])


def _scratch(x: np.ndarray | _Heads, step: int, slot: str) -> np.ndarray | None:
    """A block's buffer for an operand the blocks copy (None for the others)."""
    if not isinstance(x, _Heads):
        return None
    return threads.work_array(slot, (step, *x.view.shape[-2:]), x.view.dtype)


def _attend(
    qb: np.ndarray | _Heads,
    kb: np.ndarray | _Heads,
    vb: np.ndarray | _Heads,
    masks: np.ndarray | _KeyMask | None,
    out: np.ndarray,
    scale: float,
    is_causal: bool,
    step: int,
    units: Iterable[int],
    single: bool,
) -> None:
    """Attention for the blocks ``units`` of ``step`` (batch, head) pairs (block
    i: pairs [i * step, (i + 1) * step)): scores =
    q @ (k^T * scale) (k transposed and scaled by numba), the fused softmax in
    place (numba), out = probabilities @ v. Products go in row chunks of at
    most threads.BLAS_ONE_THREAD m*n*k, which keeps them on this thread even where
    BLAS can't be told so, and measured faster than whole heads (3.1-3.5 vs
    3.7-5.1 ms here) even where it can. ``single`` (whether BLAS was told) is
    not needed."""
    n, length = out.shape[:2]
    source, embed = (kb.view if isinstance(kb, _Heads) else kb).shape[-2:]
    dtype = out.dtype
    block = min(n, step)
    scores = threads.work_array("attention scores", (block, length, source), dtype)
    keys = threads.work_array("attention keys", (block, embed, source), dtype)
    buffers = [_scratch(x, block, f"attention {i}") for i, x in enumerate((qb, kb, vb))]
    neg_inf = dtype.type(-np.inf)
    for unit in units:
        c0, c1 = unit * step, min(n, (unit + 1) * step)
        s, kt = scores[: c1 - c0], keys[: c1 - c0]
        numba_nn.transpose_scaled(_block(kb, c0, c1, buffers[1]), kt, scale)
        threads.one_thread_matmul(_block(qb, c0, c1, buffers[0]), kt, s)
        if isinstance(masks, _KeyMask):
            numba_nn.mask_keys(s, masks.masked, c0, masks.heads)
        elif masks is not None:
            if masks.dtype == np.bool_:  # masks holds True where attention is masked out
                np.copyto(s, neg_inf, where=masks[c0:c1])
            else:
                s += masks[c0:c1]
        numba_nn.attention_softmax(s, is_causal)
        threads.one_thread_matmul(s, _block(vb, c0, c1, buffers[2]), out[c0:c1])


#: attention_heads's ``masked`` where no key is masked out (no rows).
_NO_KEY_MASKED = np.zeros((0, 0), np.bool_)


def _as_4d(x: np.ndarray, lead: Shape, shape: Shape) -> np.ndarray:
    """``x`` with ``lead`` ones before its shape, broadcast to ``shape`` (itself
    where it already has that shape: the common case, without numpy's calls)."""
    if x.shape == shape:
        return x
    return np.broadcast_to(x.reshape(*lead, *x.shape) if lead else x, shape)


class _PoolAttention(shared_pool.PoolKernel):
    """Attention by :func:`numba_nn.attention_heads` for one geometry and
    dtype, its (batch, head) pairs shared with MKL's oneTBB workers, reading
    q, k and v where they lie and writing into ``into`` where it lies. What
    hangs on shapes and dtypes alone is checked once (:func:`_pool_attention`);
    a call checks what the arrays bring: the mask's values, layouts BLAS can't
    step through, overlapping memory. Graph mode makes one per attention when
    its plan is made (:func:`sdpa_out_form`)."""

    def __init__(
        self, g: AttentionGeometry, dtype: np.dtype[Any], scale: float, is_causal: bool
    ) -> None:
        super().__init__(dtype)
        self.kernel = numba_nn.attention_heads
        self.g, self.dtype, self.is_causal, self.scale = g, dtype, is_causal, dtype.type(scale)
        # Everything as (B, H, rows, cols) views: broadcast batch axes get stride 0.
        self.lead = (1,) * (2 - len(g.batch))
        batch4 = (*self.lead, *g.batch)
        kv_batch = (*batch4[:-1], batch4[-1] // g.kv_repeat)
        self.q_shape = (*batch4, g.length, g.embed)
        self.k_shape = (*kv_batch, g.source, g.embed)
        self.v_shape = (*kv_batch, g.source, g.value_embed)
        self.out_shape = (*g.batch, g.length, g.value_embed)

    def __call__(
        self,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        mask: np.ndarray | None,
        into: np.ndarray | None,
    ) -> np.ndarray | None:
        """The result (``into`` where given), or None (nothing done) for a
        float mask, masks other than key padding (B or 1, 1, 1, S), an
        ``into`` of another dtype, layouts BLAS can't step through, overlapping
        memory, and where ``config.blas`` now asks for numpy's BLAS or
        ``config.num_threads`` changed since the setup."""
        if config.blas == "numpy":
            return None
        masked = _NO_KEY_MASKED
        if mask is not None:
            if mask.dtype != np.bool_:
                return None
            if not mask.all():  # (a mask that allows every key is no mask, whatever its shape)
                key_mask = _key_mask(~mask, self.g.batch)
                if key_mask is None:
                    return None
                masked = key_mask.masked
        lead = self.lead
        q4 = _as_4d(q, lead, self.q_shape)
        k4 = _as_4d(k, lead, self.k_shape)
        v4 = _as_4d(v, lead, self.v_shape)
        if into is not None and into.dtype != self.dtype:
            return None  # the blocked form computes apart and copies (casting) in
        out = np.empty(self.out_shape, self.dtype) if into is None else into
        out4 = out.reshape(*lead, *out.shape) if lead else out
        if not all(map(blas.reads_rows_in_place, (q4, k4, v4, out4))) or not out4.flags.writeable:
            return None
        if any(np.may_share_memory(out4, x) for x in (q4, k4, v4)) or self.claim() is None:
            return None
        self.kernel(self.address, q4, k4, v4, out4, self.scale, self.g.kv_repeat, masked,
                    self.is_causal)  # fmt: skip
        return out


def _pool_attention(
    g: AttentionGeometry, dtypes: tuple[np.dtype[Any], ...], scale: float, is_causal: bool
) -> _PoolAttention | None:
    """A :class:`_PoolAttention` for this geometry and q, k and v's ``dtypes``,
    or None where it can't run: no shared pool (:func:`shared_pool.ready`),
    more than two batch axes, other dtypes than one of float32 and float64,
    sizes past MKL's 32-bit ints."""
    dtype = dtypes[0]
    if len(g.batch) > 2 or dtype not in (np.float32, np.float64) or len(set(dtypes)) != 1:
        return None
    if g.length * g.source == 0 or max(g.length, g.source, g.embed, g.value_embed) >= 1 << 31:
        return None
    if not shared_pool.ready() or blas.gemm_address(dtype) is None:
        return None
    return _PoolAttention(g, dtype, scale, is_causal)


def sdpa_out_form(
    inputs: Sequence[Any], static: dict[str, Any], merged_heads: bool = False
) -> Callable[..., None]:
    """graph mode's attention into the plan's buffer, its pool kernel set up now
    for the plan's shapes (:class:`_PoolAttention`). With ``merged_heads`` the
    buffer is (B, L, H, E), the (B, H, L, E) result's heads merged: attention
    writes each head's rows where they go there (strided), and the usual
    transpose and reshape that follow it cost no copy (see
    :mod:`eagerrt.backends.cpu.passes.merge_heads`)."""
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    is_causal = bool(static.get("is_causal", False))
    scale, enable_gqa = static.get("scale"), bool(static.get("enable_gqa", False))
    g = attention_geometry(q, k, v, mask, is_causal, enable_gqa)
    factor = 1.0 / math.sqrt(g.embed) if scale is None else float(scale)
    pool = _pool_attention(g, (q.dtype, k.dtype, v.dtype), factor, is_causal)

    def out_form(q: np.ndarray, k: np.ndarray, v: np.ndarray, *mask_and_out: np.ndarray) -> None:
        *masks, out = mask_and_out
        mask = masks[0] if masks else None
        into = out.transpose(0, 2, 1, 3) if merged_heads else out
        if pool is None or pool(q, k, v, mask, into) is None:
            _attention(q, k, v, mask, into, is_causal, scale, enable_gqa)

    return out_form


def _sdpa_kernel(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> np.ndarray:
    return _attention(q, k, v, mask, None, is_causal, scale, enable_gqa)


def _attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    into: np.ndarray | None,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> np.ndarray:
    """The attention kernel; into ``into`` (the result's shape) when given."""
    g = attention_geometry(q, k, v, mask, is_causal, enable_gqa)
    scale = 1.0 / math.sqrt(g.embed) if scale is None else float(scale)
    pool = _pool_attention(g, (q.dtype, k.dtype, v.dtype), scale, is_causal)
    done = None if pool is None else pool(q, k, v, mask, into)
    if done is not None:
        return done
    qb = _as_batch(q, g.batch, 1)
    kb, vb = (_as_batch(a, g.batch, g.kv_repeat) for a in (k, v))
    n = math.prod(g.batch)
    shape = (n, g.length, g.value_embed)
    direct = into is not None and into.flags.c_contiguous and into.dtype == q.dtype
    out = threads.work_view(into, shape) if direct else np.empty(shape, q.dtype)  # type: ignore[arg-type]
    masks: np.ndarray | _KeyMask | None = None
    if mask is not None and mask.dtype == np.bool_:
        # Inverted once, on the mask as given (not per block, broadcast); a mask
        # that masks nothing (padding masks of unpadded batches) is skipped, a
        # key-padding mask applied per block without broadcasting it.
        mask = ~mask
        if not mask.any():
            mask = None
        else:
            masks = _key_mask(mask, g.batch)
    if mask is not None and masks is None:
        masks = np.broadcast_to(mask, (*g.batch, g.length, g.source)).reshape(n, g.length, g.source)
    # Pairs a block: _SCORE_BLOCK scores, but two blocks at least.
    step = max(1, min(_SCORE_BLOCK // max(1, g.length * g.source), -(-n // 2)))
    blocks = -(-n // step)
    args = (qb, kb, vb, masks, out, scale, is_causal, step)
    flops = 2.0 * n * g.length * g.source * (g.embed + g.value_embed)
    if blocks >= 2 and flops >= _ATTENTION_SPLIT_FLOPS and config.num_threads >= 2:
        # Heads are independent: blocks shared by a helper thread and this one
        # (BLAS on one thread each, numba's softmax releases the GIL).
        threads.shared_by_two(_attend, blocks, *args)
    else:
        threads.one_blas_thread(_attend, *args, range(blocks))
    result = out.reshape(*g.batch, g.length, g.value_embed)
    if into is None or direct:
        return result
    into[...] = result
    return into


get_op("scaled_dot_product_attention").register_kernel("cpu", _sdpa_kernel)
