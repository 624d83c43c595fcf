"""numba kernels for the NN ops (convolution helpers, pooling, norms, attention).

The CPU backend's kernels (:mod:`eagerrt.backends.cpu`) call these; each
compiles (or loads from numba's cache) on its first call, when a model needs
it. Every kernel is
``nogil`` (workers overlap) and cached across processes. They write into arrays the caller allocates, so the callers
choose layouts and block sizes.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core.extending import intrinsic, overload

from .native_gemm import NO_TRANS, TRANS, gemm

__all__ = [
    "adaptive_avg_pool2d",
    "attention_heads",
    "attention_softmax",
    "avg_pool2d",
    "col2im_add",
    "gather_heads",
    "gathered_blocks_on_pool",
    "gathered_on_pool",
    "im2col",
    "mask_keys",
    "max_pool2d",
    "normalize_rows",
    "transpose_scaled",
    "winograd_input",
    "winograd_on_pool",
    "winograd_output",
    "winograd_weights",
]


@numba.njit(inline="always", cache=True)
def _valid(offset: int, stride: int, size: int, count: int) -> tuple[int, int]:
    """The ``o`` in ``[0, count)`` with ``0 <= o*stride + offset < size``, as [lo, hi)."""
    lo = 0 if offset >= 0 else (-offset + stride - 1) // stride
    last = size - 1 - offset
    hi = 0 if last < 0 else min(count, last // stride + 1)
    return min(lo, hi), hi


#: Flat indices as unsigned integers: numba wraps negative (signed) indices, and
#: that check keeps LLVM from vectorizing a loop.
_U = np.uint64


#: Output rows at most this wide are gathered from a zero-padded copy of the
#: channels (no bounds per row: 512 channels of 4x4 gathered in 46 us, not 92 us);
#: wider ones straight from the image (the copy costs more than it saves:
#: 64 channels of 32x32 at stride 2 took 68 us that way, 55 us straight).
_PADDED_WIDTH = 8


@numba.njit(nogil=True, cache=True)
def im2col(
    x: Any,
    cols: Any,
    col: int,
    c0: int,
    c1: int,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    ph: int,
    pw: int,
    dh: int,
    dw: int,
    oh0: int,
    oh1: int,
    wo: int,
) -> None:  # pragma: no cover - compiled
    """Fill columns ``[col, col + (oh1 - oh0) * wo)`` of the C-contiguous ``cols``
    with, at ``cols[(c, i, j), col + (oh - oh0) * wo + ow]``, the pixel of the
    C-contiguous image ``x`` under kernel tap (i, j) for output pixel (oh, ow),
    channels ``[c0, c1)``; zero where the tap falls in the padding. Indexed flat
    with unsigned offsets, as the Winograd kernels below (measured up to 2.5x
    faster than 3-d indexing, whose negative-index checks keep loops scalar)."""
    h = x.shape[1]
    w = x.shape[2]
    width = cols.shape[1]
    cf = cols.reshape(-1)
    if wo <= _PADDED_WIDTH:
        # Through a zero-padded copy of the channels, so that every tap is in
        # bounds. Rows and columns the taps reach (bottom / right padding may be wider):
        hp = max(h + ph, (oh1 - 1) * sh + (kh - 1) * dh + 1)
        wp = max(w + pw, (wo - 1) * sw + (kw - 1) * dw + 1)
        padded = np.zeros((c1 - c0, hp, wp), x.dtype)
        for c in range(c1 - c0):
            for r in range(h):
                for q in range(w):
                    padded[c, r + ph, q + pw] = x[c0 + c, r, q]
        pf = padded.reshape(-1)
        row = 0
        for c in range(c1 - c0):
            for i in range(kh):
                for j in range(kw):
                    at = row * width + col
                    for oh in range(oh0, oh1):
                        src = (c * hp + oh * sh + i * dh) * wp + j * dw
                        for ow in range(wo):
                            cf[_U(at + ow)] = pf[_U(src + ow * sw)]
                        at += wo
                    row += 1
        return
    xf = x.reshape(-1)
    zero = x.dtype.type(0)
    # Each tap column's valid output columns, found once rather than per channel.
    los = np.empty(kw, np.int64)
    his = np.empty(kw, np.int64)
    for j in range(kw):
        los[j], his[j] = _valid(j * dw - pw, sw, w, wo)
    row = 0
    for c in range(c0, c1):
        for i in range(kh):
            for j in range(kw):
                lo = los[j]
                hi = his[j]
                at = row * width + col
                for oh in range(oh0, oh1):
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= h:
                        for ow in range(wo):
                            cf[_U(at + ow)] = zero
                    else:
                        for ow in range(lo):
                            cf[_U(at + ow)] = zero
                        src = (c * h + ih) * w + j * dw - pw
                        if sw == 1:
                            for ow in range(lo, hi):
                                cf[_U(at + ow)] = xf[_U(src + ow)]
                        else:
                            for ow in range(lo, hi):
                                cf[_U(at + ow)] = xf[_U(src + ow * sw)]
                        for ow in range(hi, wo):
                            cf[_U(at + ow)] = zero
                    at += wo
                row += 1


@numba.njit(nogil=True, cache=True, inline="always")
def _work_areas(a: Any, b: Any, busy: Any) -> Any:  # pragma: no cover - compiled
    """In an iteration of a pool kernel's parallel loop: this thread's work
    areas ``a[mine]`` and ``b[mine]`` (``busy[mine]`` then set), with ``mine``
    and whether they were busy already; the iteration sets ``busy[mine]`` back
    to that when done. oneTBB may hand a thread another iteration of the same
    loop while it waits inside MKL's product (a nested parallel region: MKL's
    tasks and the loop's share the workers), and that iteration then runs on
    the same thread, in the middle of the one it interrupted: it gets fresh
    arrays instead."""
    mine = numba.get_thread_id()
    nested = busy[mine]
    if nested:
        return np.empty(a.shape[1:], a.dtype), np.empty(b.shape[1:], b.dtype), mine, nested
    busy[mine] = True
    return a[mine], b[mine], mine, nested


@numba.njit(nogil=True, cache=True, inline="always")
def _add_bias(
    flat: Any, bias: Any, r0: int, r1: int, q0: int, q1: int
) -> None:  # pragma: no cover - compiled
    """``flat[r, q0:q1] += bias[r]`` for the rows r in [r0, r1)."""
    for r in range(r0, r1):
        b = bias[r]
        for q in range(q0, q1):
            flat[r, q] += b


@numba.njit(parallel=True, nogil=True, cache=True)
def gathered_on_pool(
    gemm_address: int,
    x: Any,
    w: Any,
    bias: Any,
    out: Any,
    cols: Any,
    gather: bool,
    window: Any,
    parts: int,
) -> None:  # pragma: no cover - compiled
    """One image's convolution as im2col and one product, both cut into
    ``parts`` shared by numba's parallel loop: the image ``x`` (1, C, H, W)
    gathered into ``cols`` (C * kh * kw, Ho * Wo) by channels, then ``out`` (1,
    O, Ho, Wo) = ``w`` (O, C * kh * kw) @ cols + ``bias`` by output channels,
    each part's product through MKL's gemm (``gemm_address``, for x's dtype) on
    the thread that runs it. Where ``gather`` is False (a 1x1 stride-1
    convolution) the image is its own im2col matrix and ``cols`` is not used.
    ``window``: the kernel's (kh, kw, sh, sw, ph, pw, dh, dw), as
    :func:`im2col` takes them. All arrays C-contiguous."""
    kh, kw, sh, sw, ph, pw, dh, dw = window
    image = x[0]
    channels = image.shape[0]
    o, taps = w.shape
    ho, wo = out.shape[2], out.shape[3]
    pixels = ho * wo
    item = x.itemsize
    one, zero = x.dtype.type(1.0), x.dtype.type(0.0)
    if gather:
        per = -(-channels // parts)
        for part in numba.prange(parts):
            c0 = part * per
            c1 = min(channels, c0 + per)
            if c0 < c1:
                im2col(image, cols[c0 * kh * kw :], 0, c0, c1, kh, kw, sh, sw, ph, pw, dh, dw,
                       0, ho, wo)  # fmt: skip
    source = cols.ctypes.data if gather else x.ctypes.data
    per = -(-o // parts)
    flat = out.reshape(o, pixels)
    for part in numba.prange(parts):
        o0 = part * per
        o1 = min(o, o0 + per)
        if o0 < o1:
            gemm(gemm_address, NO_TRANS, o1 - o0, pixels, taps, one,
                 w.ctypes.data + o0 * taps * item, taps, source, pixels,
                 zero, flat.ctypes.data + o0 * pixels * item, pixels)  # fmt: skip
            _add_bias(flat, bias, o0, o1, 0, pixels)


@numba.njit(parallel=True, nogil=True, cache=True)
def gathered_blocks_on_pool(
    gemm_address: int,
    x: Any,
    w: Any,
    bias: Any,
    out: Any,
    blocks: Any,
    cols: Any,
    products: Any,
    window: Any,
) -> None:  # pragma: no cover - compiled
    """A batch's convolution as im2col and products, the (first image, end
    image, first row, end row) ``blocks`` shared by numba's parallel loop: each
    block gathered into its thread's ``cols`` (threads, C * kh * kw, width),
    multiplied by ``w`` (O, C * kh * kw) through MKL's gemm (``gemm_address``,
    for x's dtype) on that thread, and ``bias`` added: straight into ``out``
    (N, O, Ho, Wo) for a block of one image (its rows are a run of each output
    channel's), else into the thread's ``products`` (threads, O, width) and
    then copied into each image's place. ``x`` (N, C, H, W), ``window`` as
    :func:`gathered_on_pool` takes it; all arrays C-contiguous."""
    kh, kw, sh, sw, ph, pw, dh, dw = window
    channels = x.shape[1]
    o, taps = w.shape
    ho, wo = out.shape[2], out.shape[3]
    pixels = ho * wo
    width = cols.shape[2]
    item = x.itemsize
    one, zero = x.dtype.type(1.0), x.dtype.type(0.0)
    busy = np.zeros(cols.shape[0], np.bool_)  # each thread's work area in use
    for unit in numba.prange(blocks.shape[0]):
        n0, n1, r0, r1 = blocks[unit, 0], blocks[unit, 1], blocks[unit, 2], blocks[unit, 3]
        ct, pt, mine, nested = _work_areas(cols, products, busy)
        span = (r1 - r0) * wo
        for k in range(n1 - n0):
            im2col(x[n0 + k], ct, k * span, 0, channels, kh, kw, sh, sw, ph, pw, dh, dw,
                   r0, r1, wo)  # fmt: skip
        n = (n1 - n0) * span
        if n1 - n0 == 1:  # in place: rows [r0, r1) of each channel, pixels apart
            flat = out[n0].reshape(o, pixels)
            at = flat.ctypes.data + r0 * wo * item
            gemm(gemm_address, NO_TRANS, o, span, taps, one, w.ctypes.data, taps, ct.ctypes.data,
                 width, zero, at, pixels)  # fmt: skip
            _add_bias(flat, bias, 0, o, r0 * wo, r1 * wo)
        else:
            gemm(gemm_address, NO_TRANS, o, n, taps, one, w.ctypes.data, taps, ct.ctypes.data,
                 width, zero, pt.ctypes.data, width)  # fmt: skip
            for k in range(n1 - n0):
                dest = out[n0 + k].reshape(o, pixels)
                for r in range(o):
                    b = bias[r]
                    for q in range(span):
                        dest[r, q] = pt[r, k * span + q] + b
        busy[mine] = nested


# -- Winograd F(2x2, 3x3) ------------------------------------------------------------
# A 3x3 stride-1 convolution computes each 2x2 output tile from the 4x4 input
# tile d under it as Y = A^T [(G g G^T) * (B^T d B)] A: 16 multiplications per
# tile and channel pair instead of 36. The caller transforms the weights
# (G g G^T) and does the multiplications as 16 BLAS matmuls; these kernels do
# the input and output transforms. The input transform works on tile rows
# ``tw + 1`` columns apart (the extra column is computed and dropped), so its
# loops run over a whole block of tile rows as one contiguous range, and stores
# them ``span`` (``tw + 1`` or ``tw``) apart. ``tw + 1`` keeps the stores
# contiguous too; ``tw`` spares the products (the bulk of the work) the dropped
# column, one in three for a 4x4 image (tw = 2) but one in seventeen at 32x32.
#
# The arrays are indexed flat with unsigned offsets: numba wraps negative
# (signed) indices, and that check keeps LLVM from vectorizing these loops
# (measured 3.5x slower); a sliced view per row costs more to set up than a
# row's work (measured 2.8x slower).
@numba.njit(nogil=True, cache=True, inline="always")
def _combine(
    src: Any, a: int, b: int, subtract: bool, dst: Any, at: int, n: int
) -> None:  # pragma: no cover - compiled
    """``dst[at + k] = src[a + k] -/+ src[b + k]`` for k < n."""
    if subtract:
        for k in range(n):
            dst[_U(at + k)] = src[_U(a + k)] - src[_U(b + k)]
    else:
        for k in range(n):
            dst[_U(at + k)] = src[_U(a + k)] + src[_U(b + k)]


@numba.njit(nogil=True, cache=True)
def winograd_weights(w: Any, u: Any) -> None:  # pragma: no cover - compiled
    """``G g G^T`` of each 3x3 filter g of the C-contiguous ``w`` (O, C/groups,
    3, 3), element (i, j) into ``u[group, 4i + j, o, c]`` (``u``: C-contiguous
    (groups, 16, O/groups, C/groups)). G's rows give g0, (g0 + g1 + g2) / 2,
    (g0 - g1 + g2) / 2 and g2 of a column (g0, g1, g2)."""
    groups, _, og, cg = u.shape
    half = w.dtype.type(0.5)
    wf = w.reshape(-1)
    uf = u.reshape(-1)
    step = og * cg  # from u[group, k] to u[group, k + 1]
    # 64 channels at a time into ``part``, then 16 runs of ``u``: storing each
    # filter's 16 values straight into u, whose 16 planes often lie a power
    # of two apart, thrashed the cache (measured 8x slower at 512 channels).
    chunk = 64
    part = np.empty((16, chunk), w.dtype)
    for o in range(og * groups):
        at = ((o // og) * 16 * og + o % og) * cg
        for c0 in range(0, cg, chunk):
            n = min(chunk, cg - c0)
            for c in range(n):
                g = _U(9 * (o * cg + c0 + c))
                for i in range(4):
                    # Row i of G g (a row of three taps) ...
                    if i == 0 or i == 3:
                        r = _U(0 if i == 0 else 6)
                        a, b, e = wf[g + r], wf[g + r + _U(1)], wf[g + r + _U(2)]
                    else:
                        sign = w.dtype.type(1 if i == 1 else -1)
                        a = (wf[g] + sign * wf[g + _U(3)] + wf[g + _U(6)]) * half
                        b = (wf[g + _U(1)] + sign * wf[g + _U(4)] + wf[g + _U(7)]) * half
                        e = (wf[g + _U(2)] + sign * wf[g + _U(5)] + wf[g + _U(8)]) * half
                    # ... times G^T.
                    part[4 * i, c] = a
                    part[4 * i + 1, c] = (a + b + e) * half
                    part[4 * i + 2, c] = (a - b + e) * half
                    part[4 * i + 3, c] = e
            for k in range(16):
                dst = _U(at + k * step + c0)
                for c in range(n):
                    uf[dst + _U(c)] = part[k, c]


@numba.njit(nogil=True, cache=True)
def winograd_input(
    x: Any, v: Any, col: int, ty0: int, ty1: int, tw: int, span: int, ph: int, pw: int
) -> None:  # pragma: no cover - compiled
    """``B^T d B`` of the 4x4 input tiles d of tile rows [ty0, ty1) of the
    C-contiguous image ``x`` (C, H, W) (tile (ty, tx) starts at input pixel
    (2ty - ph, 2tx - pw); pixels outside ``x`` read as zeros), ``tw`` tiles a
    row: element (i, j) of channel c's transform goes to ``v[4i + j, c, k]``
    (``v`` C-contiguous), column ``k = col + (ty - ty0) * span + tx`` (``span``:
    ``tw + 1`` or ``tw``)."""
    channels, h, w = x.shape
    rows = ty1 - ty0
    wt = tw + 1
    n = rows * wt
    cols = v.shape[2]
    step = channels * cols  # from v[i] to v[i + 1]
    xf = x.reshape(-1)
    vf = v.reshape(-1)
    # The input rows under the tiles, zero-padded and split by row and column
    # parity: plane 2p + q holds rows 2r + p, columns 2j + q (counted from the
    # tiles' origin), so row 2ty + i of every tile row in the block is one
    # contiguous run of a plane, and so is the column pair beside it.
    plane = (rows + 1) * wt
    planes = np.empty(4 * plane, x.dtype)
    # A vertical combination of rows (B^T d), even columns then odd, and a
    # zero after each for the dropped column's neighbour.
    t = np.zeros(2 * n + 2, x.dtype)
    top = 2 * ty0 - ph
    lo = min(wt, (pw + 1) // 2)  # column pairs [lo, hi) lie inside the row
    hi = max(lo, min(wt, (w + pw) // 2))
    for c in range(channels):
        for r in range(2 * rows + 2):
            ih = top + r
            even = 2 * (r & 1) * plane + (r >> 1) * wt
            odd = even + plane
            if ih < 0 or ih >= h:
                for j in range(wt):
                    planes[even + j] = 0
                    planes[odd + j] = 0
                continue
            src = (c * h + ih) * w - pw
            for j in range(lo):
                planes[even + j] = xf[src + 2 * j] if 0 <= 2 * j - pw < w else 0
                planes[odd + j] = xf[src + 2 * j + 1] if 0 <= 2 * j + 1 - pw < w else 0
            for j in range(lo, hi):
                planes[_U(even + j)] = xf[_U(src + 2 * j)]
                planes[_U(odd + j)] = xf[_U(src + 2 * j + 1)]
            for j in range(hi, wt):
                planes[even + j] = xf[src + 2 * j] if 0 <= 2 * j - pw < w else 0
                planes[odd + j] = xf[src + 2 * j + 1] if 0 <= 2 * j + 1 - pw < w else 0
        for i in range(4):
            # Row i of B^T d: d0 - d2, d1 + d2, d2 - d1, d1 - d3 (rows a -/+ b).
            a, b = (0, 2) if i == 0 else (1, 2) if i == 1 else (2, 1) if i == 2 else (1, 3)
            ea = 2 * (a & 1) * plane + (a >> 1) * wt
            eb = 2 * (b & 1) * plane + (b >> 1) * wt
            _combine(planes, ea, eb, i != 1, t, 0, n)
            _combine(planes, ea + plane, eb + plane, i != 1, t, n + 1, n)
            # The same combinations of its columns e0, o0, e1, o1 (times B):
            # e0 - e1, o0 + e1, e1 - o0, o0 - o1.
            at = 4 * i * step + c * cols + col
            if span == wt:  # the whole block as one range
                _combine(t, 0, 1, True, vf, at, n)
                _combine(t, n + 1, 1, False, vf, at + step, n)
                _combine(t, 1, n + 1, True, vf, at + 2 * step, n)
                _combine(t, n + 1, n + 2, True, vf, at + 3 * step, n)
                continue
            for r in range(rows):  # row by row, the dropped column left out
                k = r * wt
                _combine(t, k, k + 1, True, vf, at, tw)
                _combine(t, n + 1 + k, k + 1, False, vf, at + step, tw)
                _combine(t, k + 1, n + 1 + k, True, vf, at + 2 * step, tw)
                _combine(t, n + 1 + k, n + 2 + k, True, vf, at + 3 * step, tw)
                at += span


@numba.njit(nogil=True, cache=True)
def winograd_output(
    m: Any, out: Any, bias: Any, col: int, ty0: int, ty1: int, span: int
) -> None:  # pragma: no cover - compiled
    """``out[o, 2ty:2ty+2, 2tx:2tx+2] = A^T m A + bias[o]`` for tile rows
    [ty0, ty1) of the C-contiguous image ``out`` (O, Ho, Wo), from the tiles'
    products ``m`` (16, O, columns), C-contiguous, laid out as
    :func:`winograd_input` lays out its tiles (tile rows ``span`` columns
    apart); cells of border tiles beyond ``out`` are dropped."""
    channels, ho, wo = out.shape
    half = wo // 2  # tiles whose both columns are in ``out``
    cols = m.shape[2]
    step = channels * cols  # from m[i] to m[i + 1]
    mf = m.reshape(-1)
    of = out.reshape(-1)
    for o in range(channels):
        b = bias[o]
        for ty in range(ty0, ty1):
            q = o * cols + col + (ty - ty0) * span
            top = (o * ho + 2 * ty) * wo
            bottom = top + wo if 2 * ty + 1 < ho else -1
            # Row 0 of A^T m is m0 + m1 + m2 (m_i: row i of the tile's 4x4),
            # row 1 is m1 - m2 - m3; then the same across columns (times A).
            for t in range(half):
                k = q + t
                s0 = mf[_U(k)] + mf[_U(k + 4 * step)] + mf[_U(k + 8 * step)]
                s1 = mf[_U(k + step)] + mf[_U(k + 5 * step)] + mf[_U(k + 9 * step)]
                s2 = mf[_U(k + 2 * step)] + mf[_U(k + 6 * step)] + mf[_U(k + 10 * step)]
                s3 = mf[_U(k + 3 * step)] + mf[_U(k + 7 * step)] + mf[_U(k + 11 * step)]
                of[_U(top + 2 * t)] = s0 + s1 + s2 + b
                of[_U(top + 2 * t + 1)] = s1 - s2 - s3 + b
            if bottom >= 0:
                for t in range(half):
                    k = q + t
                    d0 = mf[_U(k + 4 * step)] - mf[_U(k + 8 * step)] - mf[_U(k + 12 * step)]
                    d1 = mf[_U(k + 5 * step)] - mf[_U(k + 9 * step)] - mf[_U(k + 13 * step)]
                    d2 = mf[_U(k + 6 * step)] - mf[_U(k + 10 * step)] - mf[_U(k + 14 * step)]
                    d3 = mf[_U(k + 7 * step)] - mf[_U(k + 11 * step)] - mf[_U(k + 15 * step)]
                    of[_U(bottom + 2 * t)] = d0 + d1 + d2 + b
                    of[_U(bottom + 2 * t + 1)] = d1 - d2 - d3 + b
            if wo % 2:  # an odd width: the last tile's left column only
                k = q + half
                r0 = mf[k] + mf[k + step] + mf[k + 2 * step]  # row sums (m A)
                r1 = mf[k + 4 * step] + mf[k + 5 * step] + mf[k + 6 * step]
                r2 = mf[k + 8 * step] + mf[k + 9 * step] + mf[k + 10 * step]
                of[top + wo - 1] = r0 + r1 + r2 + b
                if bottom >= 0:
                    r3 = mf[k + 12 * step] + mf[k + 13 * step] + mf[k + 14 * step]
                    of[bottom + wo - 1] = r1 - r2 - r3 + b


@numba.njit(parallel=True, nogil=True, cache=True)
def winograd_on_pool(
    gemm_address: int,
    x: Any,
    u: Any,
    bias: Any,
    out: Any,
    blocks: Any,
    tw: int,
    span: int,
    ph: int,
    pw: int,
    v: Any,
    m: Any,
) -> None:  # pragma: no cover - compiled
    """Winograd F(2x2, 3x3) of the C-contiguous images ``x`` (N, C, H, W) into
    ``out`` (N, O, Ho, Wo), the (first image, end image, first tile row, end
    tile row) ``blocks`` shared by numba's parallel loop: each block's input
    transform, its ``16 * groups`` products through MKL's gemm
    (``gemm_address``, for x's dtype) on the thread that runs it, and its
    output transform (``bias`` added) while the block is in that core's cache.

    ``u``: the transformed weights, C-contiguous (groups, 16, O/groups,
    C/groups). ``v`` (threads, 16, C, width) and ``m`` (threads, 16, O, width):
    one C-contiguous work area per thread of the loop, ``width`` at least a
    block's columns (its images times tile rows times ``span``)."""
    groups, _, og, cg = u.shape
    width = v.shape[3]
    item = x.itemsize
    one, zero = x.dtype.type(1.0), x.dtype.type(0.0)
    busy = np.zeros(v.shape[0], np.bool_)  # each thread's work area in use
    for unit in numba.prange(blocks.shape[0]):
        n0, n1, r0, r1 = blocks[unit, 0], blocks[unit, 1], blocks[unit, 2], blocks[unit, 3]
        vt, mt, mine, nested = _work_areas(v, m, busy)
        image = (r1 - r0) * span
        for k in range(n1 - n0):
            winograd_input(x[n0 + k], vt, k * image, r0, r1, tw, span, ph, pw)
        cols = (n1 - n0) * image
        for gi in range(groups):
            for t in range(16):
                w_at = u.ctypes.data + ((gi * 16 + t) * og * cg) * item
                v_at = vt.ctypes.data + ((t * cg * groups + gi * cg) * width) * item
                m_at = mt.ctypes.data + ((t * og * groups + gi * og) * width) * item
                gemm(gemm_address, NO_TRANS, og, cols, cg, one, w_at, cg, v_at, width,
                     zero, m_at, width)  # fmt: skip
        for k in range(n1 - n0):
            winograd_output(mt, out[n0 + k], bias, k * image, r0, r1, span)
        busy[mine] = nested


@numba.njit(nogil=True, cache=True)
def col2im_add(
    cols: Any,
    out: Any,
    c0: int,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    ph: int,
    pw: int,
    dh: int,
    dw: int,
    h: int,
    w: int,
) -> None:  # pragma: no cover - compiled
    """The adjoint of :func:`im2col` (transposed convolution): add each
    ``cols[(c, i, j), (ih, iw)]`` into the output pixel that input pixel
    (ih, iw) reaches through tap (i, j), channels from ``c0``."""
    ho = out.shape[1]
    wo = out.shape[2]
    channels = cols.shape[0] // (kh * kw)
    row = 0
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                base = j * dw - pw
                lo, hi = _valid(base, sw, wo, w)
                for ih in range(h):
                    oh = ih * sh - ph + i * dh
                    if 0 <= oh < ho:
                        for iw in range(lo, hi):
                            out[c0 + c, oh, iw * sw + base] += cols[row, ih * w + iw]
                row += 1


@numba.njit(nogil=True, cache=True)
def max_pool2d(
    x: Any, out: Any, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, dh: int, dw: int
) -> None:  # pragma: no cover - compiled
    """Max over each window of each (H, W) plane; NaN wins, as in PyTorch."""
    planes, h, w = x.shape
    _, ho, wo = out.shape
    for p in range(planes):
        for oh in range(ho):
            for ow in range(wo):
                best = -np.inf
                for i in range(kh):
                    ih = oh * sh - ph + i * dh
                    if 0 <= ih < h:
                        for j in range(kw):
                            iw = ow * sw - pw + j * dw
                            if 0 <= iw < w:
                                v = x[p, ih, iw]
                                if v > best or math.isnan(v):
                                    best = v
                out[p, oh, ow] = best


@numba.njit(nogil=True, cache=True)
def avg_pool2d(
    x: Any,
    out: Any,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    ph: int,
    pw: int,
    count_include_pad: bool,
    divisor: int,
) -> None:  # pragma: no cover - compiled
    """Mean over each window, with PyTorch's divisor: the window clipped to the
    padded input when counting padding, else to the input itself (or ``divisor``
    when it is positive)."""
    planes, h, w = x.shape
    _, ho, wo = out.shape
    for p in range(planes):
        for oh in range(ho):
            h0 = oh * sh - ph
            h1 = min(h0 + kh, h + ph)
            for ow in range(wo):
                w0 = ow * sw - pw
                w1 = min(w0 + kw, w + pw)
                padded = (h1 - h0) * (w1 - w0)
                a0, a1 = max(h0, 0), min(h1, h)
                b0, b1 = max(w0, 0), min(w1, w)
                total = 0.0
                for ih in range(a0, a1):
                    for iw in range(b0, b1):
                        total += x[p, ih, iw]
                if divisor > 0:
                    count = divisor
                elif count_include_pad:
                    count = padded
                else:
                    count = (a1 - a0) * (b1 - b0)
                out[p, oh, ow] = total / count


@numba.njit(nogil=True, cache=True)
def adaptive_avg_pool2d(x: Any, out: Any) -> None:  # pragma: no cover - compiled
    """Mean over PyTorch's adaptive windows: ``[floor(i*H/o), ceil((i+1)*H/o))``."""
    planes, h, w = x.shape
    _, ho, wo = out.shape
    for p in range(planes):
        for oh in range(ho):
            h0 = (oh * h) // ho
            h1 = ((oh + 1) * h + ho - 1) // ho
            for ow in range(wo):
                w0 = (ow * w) // wo
                w1 = ((ow + 1) * w + wo - 1) // wo
                total = 0.0
                for ih in range(h0, h1):
                    for iw in range(w0, w1):
                        total += x[p, ih, iw]
                out[p, oh, ow] = total / ((h1 - h0) * (w1 - w0))


# fastmath "reassoc" only: the float64 sums may be reordered, so they vectorize
# (measured 1.7 vs 3.2 ms for 4096 rows of 384; torch: 0.8-1.0 ms); nan and
# inf keep their IEEE meaning. The last pass runs in the data's own dtype, the
# mean and scale rounded to it: in float64 it cost twice the two sums together
# (float32, 128 rows of 384: 15 against 42 us; error to a float64 reference
# 1.2e-6 against 0.5e-6 at values up to 10).
@numba.njit(nogil=True, cache=True, fastmath={"reassoc"}, error_model="numpy")
def normalize_rows(
    x: Any, out: Any, weight: Any, bias: Any, eps: float
) -> None:  # pragma: no cover
    """``(x - mean) / sqrt(var + eps) * weight + bias`` per row (biased variance,
    two passes in float64 for accuracy)."""
    rows, cols = x.shape
    for r in range(rows):
        row, into = x[r], out[r]
        total = 0.0
        for c in range(cols):
            total += row[c]
        mean = total / cols
        sq = 0.0
        for c in range(cols):
            d = row[c] - mean
            sq += d * d
        shift = x.dtype.type(mean)
        scale = x.dtype.type(1.0 / math.sqrt(sq / cols + eps))
        for c in range(cols):
            into[c] = (row[c] - shift) * scale * weight[c] + bias[c]


@numba.njit(parallel=True, nogil=True, cache=True)
def normalize_rows_on_pool(
    x: Any, out: Any, weight: Any, bias: Any, eps: float, blocks: Any
) -> None:  # pragma: no cover - compiled
    """:func:`normalize_rows` over blocks of rows ``blocks[i]:blocks[i + 1]``
    shared by numba's parallel loop (on MKL's oneTBB workers)."""
    for b in numba.prange(len(blocks) - 1):
        r0, r1 = blocks[b], blocks[b + 1]
        normalize_rows(x[r0:r1], out[r0:r1], weight, bias, eps)


@numba.njit(nogil=True, cache=True)
def gather_heads(x: Any, start: int, out: Any) -> None:  # pragma: no cover - compiled
    """``out[i] = x[b, h]`` for the (batch, head) pairs ``start + i`` of a strided
    (B, H, L, E) view: attention's q, k, v sliced from one projection's output,
    copied a block at a time into a buffer that stays in cache (copying whole
    arrays first measured 11 ms of 25 for 384 heads of 128x32)."""
    heads = x.shape[1]
    for i in range(out.shape[0]):
        b, h = divmod(start + i, heads)
        for r in range(x.shape[2]):
            for e in range(x.shape[3]):
                out[i, r, e] = x[b, h, r, e]


@numba.njit(nogil=True, cache=True)
def mask_keys(s: Any, masked: Any, start: int, heads: int) -> None:  # pragma: no cover
    """Scores of masked keys set to -inf in place: ``s[i, :, j] = -inf`` where
    ``masked[b, j]``, b the batch of pair ``start + i`` (``heads`` pairs a batch
    item; ``masked`` with one row serves every batch). A key-padding mask,
    without broadcasting it to every head and query first."""
    for i in range(s.shape[0]):
        b = (start + i) // heads if masked.shape[0] > 1 else 0
        for r in range(s.shape[1]):
            for j in range(s.shape[2]):
                if masked[b, j]:
                    s[i, r, j] = -np.inf


@numba.njit(nogil=True, cache=True)
def transpose_scaled(a: Any, out: Any, scale: float) -> None:  # pragma: no cover - compiled
    """``out[b] = a[b].T * scale`` for (B, m, n) ``a`` and (B, n, m) ``out``:
    attention's keys, so that the scores' product reads both operands in
    BLAS's plain layout (measured 0.76 vs 1.21 ms for 48 heads' q @ k^T from
    a transposed view, where this copy costs 0.15 ms)."""
    batch, rows, cols = a.shape
    factor = a.dtype.type(scale)
    for b in range(batch):
        for j in range(cols):
            for i in range(rows):
                out[b, j, i] = a[b, i, j] * factor


# -- attention softmax -----------------------------------------------------------
# numba has no vectorized exp without Intel's SVML, and a scalar libm call per
# score made the softmax cost more than both matmuls of attention together. So
# float32 uses its own exp: exp(t) = 2**n * exp(r), n = round(t / ln 2),
# |r| <= ln(2)/2, exp(r) by a degree-7 Taylor polynomial (relative error < 1e-8,
# below float32's rounding), 2**n built from its IEEE bits (a bit cast, below).
# The row maximum is taken on the scores' bits as integers (ordered like the
# floats after flipping negative ones), since LLVM vectorizes integer max
# reductions but not float ones. Every loop is then plain vectorizable
# arithmetic; the fastmath flags let LLVM reorder the sum ("ninf" is left out:
# masked scores are -inf).
_F32, _I32 = np.float32, np.int32
_LOG2E = _F32(1.4426950408889634)
_LN2_HI = _F32(0.693359375)  # ln 2 split so n * _LN2_HI is exact
_LN2_LO = _F32(-2.12194440e-4)
_EXP_FLOOR = _F32(-87.0)  # exp(-87) is about float32's smallest normal number
_HALF, _ONE = _F32(0.5), _F32(1.0)
_C2, _C3, _C4, _C5, _C6, _C7 = (_F32(1 / math.factorial(n)) for n in range(2, 8))  # 1/n!
_ABS = _I32(0x7FFFFFFF)
_SIGN_SHIFT = _I32(31)
_INF_BITS = _I32(0x7F800000)
_NEG_INF_KEY = _I32(-0x7F800001)  # the ordered key of -inf's bits
_FAST = {"nnan", "nsz", "reassoc", "contract", "arcp"}


def _bit_cast(typingctx: Any, bits: Any) -> Any:  # pragma: no cover - compiled
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return types.float32(types.int32), codegen


#: ``_float32_from_bits(bits)``: the float32 whose IEEE bits are the int32
#: ``bits`` (an LLVM bit cast, in compiled code only).
_float32_from_bits: Any = intrinsic(_bit_cast)


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def _softmax_rows_f32(s: Any, causal: bool) -> None:  # pragma: no cover
    batch, rows, cols = s.shape
    ints = s.view(np.int32)
    for b in range(batch):
        for i in range(rows):
            row = s[b, i]
            irow = ints[b, i]
            n = min(cols, i + 1) if causal else cols
            top = _I32(-0x80000000)
            magnitude = _I32(0)
            for c in range(n):
                # Every int32 result cast back: numba widens int32 arithmetic
                # to int64, which halves the vector lanes (measured 2.7x slower).
                v = irow[c]
                top = max(top, _I32(v ^ _I32(_I32(v >> _SIGN_SHIFT) & _ABS)))
                magnitude = max(magnitude, _I32(v & _ABS))
            if magnitude > _INF_BITS or top == _INF_BITS:  # a nan or +inf: all nan
                for c in range(cols):
                    row[c] = np.nan
                continue
            if top == _NEG_INF_KEY:  # every score masked: PyTorch gives zeros, not nan
                for c in range(cols):
                    row[c] = 0
                continue
            peak = _float32_from_bits(_I32(top ^ _I32(_I32(top >> _SIGN_SHIFT) & _ABS)))
            total = _F32(0.0)
            for c in range(n):
                t = row[c] - peak
                tc = max(t, _EXP_FLOOR)
                k = np.floor(tc * _LOG2E + _HALF)
                r = tc - k * _LN2_HI - k * _LN2_LO
                p = _ONE + r * (
                    _ONE + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * (_C6 + r * _C7)))))
                )
                e = p * _float32_from_bits(_I32(_I32(_I32(k) + _I32(127)) << _I32(23)))
                e = e if t > _EXP_FLOOR else _F32(0)
                row[c] = e
                total += e
            inv = _ONE / total
            for c in range(n):
                row[c] *= inv
            for c in range(n, cols):
                row[c] = 0


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _softmax_rows_exact(s: Any, causal: bool) -> None:  # pragma: no cover
    batch, rows, cols = s.shape
    for b in range(batch):
        for i in range(rows):
            row = s[b, i]
            n = min(cols, i + 1) if causal else cols
            peak = -np.inf
            for c in range(n):
                v = row[c]
                if v > peak or math.isnan(v):
                    peak = v
            if peak == -np.inf:
                for c in range(cols):
                    row[c] = 0
                continue
            total = 0.0
            for c in range(n):
                e = math.exp(row[c] - peak)
                row[c] = e
                total += e
            inv = 1.0 / total
            for c in range(n):
                row[c] *= inv
            for c in range(n, cols):
                row[c] = 0


def attention_softmax(s: np.ndarray, causal: bool) -> None:
    """In place on contiguous scores ``s`` of shape (B, L, S): softmax over the
    last axis, keys after the query's position masked when ``causal``; fully
    masked rows become zeros (as PyTorch), rows with a nan nans."""
    if s.dtype == np.float32:
        _softmax_rows_f32(s, causal)
    else:
        _softmax_rows_exact(s, causal)


# -- attention on the shared pool ----------------------------------------------------
# (No annotations on these two: numba matches the overload's parameters to the
# stub's, annotations included.)
def _softmax_rows(s, causal):  # pragma: no cover
    raise NotImplementedError


@overload(_softmax_rows)
def _softmax_rows_for(s, causal):
    """The float32 or float64 softmax, chosen when a caller compiles."""
    if s.dtype == types.float32:
        return lambda s, causal: _softmax_rows_f32(s, causal)
    return lambda s, causal: _softmax_rows_exact(s, causal)


@numba.njit(parallel=True, nogil=True, cache=True)
def attention_heads(
    gemm_address: int,
    q: Any,
    k: Any,
    v: Any,
    out: Any,
    scale: Any,
    repeat: int,
    masked: Any,
    causal: bool,
) -> None:  # pragma: no cover - compiled
    """Attention for every (batch, head) pair, pairs shared by numba's parallel
    loop: scores = scale * q @ k^T and out = softmax(scores) @ v through MKL's
    gemm (``gemm_address``, for q's dtype, which ``scale`` has too), the
    softmax in place between them.

    q (B, H, L, E), k and v (B, H / repeat, S, E or Ev), out (B, H, L, Ev): any
    strides whose last axis is contiguous and whose rows BLAS can step through
    (the caller checks), so heads split out of a fused projection and an output
    in merged-heads layout are read and written where they lie. ``masked``
    (0, 1 or B rows, S): keys masked out per batch item (0 rows: none)."""
    batch, heads, length, embed = q.shape
    source, value_embed = v.shape[2], v.shape[3]
    item = q.itemsize
    lq, lk, lv, lo = (
        q.strides[2] // item,
        k.strides[2] // item,
        v.strides[2] // item,
        out.strides[2] // item,
    )
    one, zero = q.dtype.type(1.0), q.dtype.type(0.0)
    for pair in numba.prange(batch * heads):
        b, h = pair // heads, pair % heads
        kv = h // repeat
        s = np.empty((1, length, source), q.dtype)
        q_at = q.ctypes.data + b * q.strides[0] + h * q.strides[1]
        k_at = k.ctypes.data + b * k.strides[0] + kv * k.strides[1]
        v_at = v.ctypes.data + b * v.strides[0] + kv * v.strides[1]
        out_at = out.ctypes.data + b * out.strides[0] + h * out.strides[1]
        gemm(gemm_address, TRANS, length, source, embed, scale, q_at, lq, k_at, lk,
             zero, s.ctypes.data, source)  # fmt: skip
        if masked.shape[0] > 0:
            row = b if masked.shape[0] > 1 else 0
            for j in range(source):
                if masked[row, j]:
                    for r in range(length):
                        s[0, r, j] = -np.inf
        _softmax_rows(s, causal)
        gemm(gemm_address, NO_TRANS, length, value_embed, source, one, s.ctypes.data, source,
             v_at, lv, zero, out_at, lo)  # fmt: skip
