"""The CPU's convolution kernels: 1x1 products, Winograd, im2col, and their
forms on MKL's thread pool; ``conv_transpose2d``'s col2im."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..._core import config, renew_after_fork
from ...ops.nn.common import Shape, batched
from ...ops.nn.conv import ConvGeometry, conv_geometry, conv_transpose_geometry
from ...ops.registry import get_op
from . import blas, numba_nn, shared_pool, threads
from .numba_nn import col2im_add, im2col, winograd_input, winograd_output, winograd_weights

_conv2d = get_op("conv2d")


def _conv2d_kernel(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, **options: Any
) -> np.ndarray:
    return _conv2d_run(x, weight, bias, conv_geometry(x, weight, bias, **options), None)


def _conv2d_run(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    g: ConvGeometry,
    u: np.ndarray | None,
    out: np.ndarray | None = None,
    epilogue: ImageEpilogue | None = None,
) -> np.ndarray:
    """conv2d of geometry ``g``; ``u``: the Winograd weights, if already made.
    With ``out`` (a C-contiguous (N, O, Ho, Wo) array, for a 4-d ``x``) the
    result is written there, and ``epilogue`` runs on each run of images as
    soon as they are done (see :data:`ImageEpilogue`)."""
    x4 = np.ascontiguousarray(batched(x))
    if out is None:
        out = np.empty((g.n, g.o, g.ho, g.wo), x.dtype)
    done = _ImagesDone(epilogue)
    if u is None and _winograd_fits(g):
        u = _winograd_u(weight, g)
    pooled = _pooled_conv(g, weight, u, x.dtype) if out.dtype == x.dtype else None
    if pooled is not None and pooled(x4, bias, out):
        done.all(g.n)
        return out if x.ndim == 4 else out[0]
    og, cg = g.o // g.groups, g.c // g.groups
    taps = cg * g.kh * g.kw
    wmat = np.ascontiguousarray(weight).reshape(g.groups, og, taps)
    if _plain(g):  # 1x1, stride 1, no padding: the input already is the im2col matrix
        xs = x4.reshape(g.n, g.groups, cg, g.h * g.w)
        outs = out.reshape(g.n, g.groups, og, g.h * g.w)
        flops = _flops(g, False) * g.n
        if flops < _SPLIT_FLOPS or not threads.two_blas_threads():  # see threads.one_blas_thread
            threads.one_blas_thread(_plain_channels, wmat, xs, outs, 0, og)
        elif g.n == 1:  # one product a group
            threads.on_blas_threads(_plain_channels, wmat, xs, outs, 0, og)
        else:
            threads.rows_by_two(_plain_channels, og, wmat, xs, outs)
        if bias is not None:
            out += bias.reshape(-1, 1, 1)
        done.all(g.n)
    elif u is not None:
        _conv2d_winograd(x4, bias, g, out, u, done)
    else:
        _conv2d_gathered(x4, wmat, bias, g, out, done)
    return out if x.ndim == 4 else out[0]


def _plain(g: ConvGeometry) -> bool:
    """Whether conv2d is 1x1, stride 1 and unpadded: the image its own im2col matrix."""
    return (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.ho, g.wo) == (1, 1, 1, 1, 0, 0, g.h, g.w)


#: ``epilogue(first, end)``: elementwise work on images [first, end) of a
#: convolution's result, run as soon as their blocks are written (in cache, on
#: the thread that wrote the last of them).
ImageEpilogue = Callable[[int, int], None]


class _ImagesDone:
    """Runs a convolution's :data:`ImageEpilogue` as its blocks finish: a block
    of whole images at once, an image cut into blocks of rows when the last of
    them is done (blocks finish on either thread, in any order)."""

    def __init__(self, epilogue: ImageEpilogue | None) -> None:
        self._epilogue = epilogue
        self._left: dict[int, int] = {}  # first image of a block -> its blocks not done
        self._lock = threading.Lock()

    def expect(self, blocks: list[tuple[int, int, int, int]]) -> None:
        """The (first image, end image, first row, end row) blocks to come."""
        for n0, *_ in blocks:
            self._left[n0] = self._left.get(n0, 0) + 1

    def finished(self, block: tuple[int, int, int, int]) -> None:
        if self._epilogue is None:
            return
        n0, n1, _, _ = block
        with self._lock:
            self._left[n0] -= 1
            last = self._left[n0] == 0
        if last:
            self._epilogue(n0, n1)

    def all(self, n: int) -> None:
        """Every image is done at once."""
        if self._epilogue is not None:
            self._epilogue(0, n)


def _plain_channels(
    wmat: np.ndarray, xs: np.ndarray, outs: np.ndarray, o0: int, o1: int, single: bool
) -> None:
    """Output channels [o0, o1) of each group of a 1x1 stride-1 convolution."""
    for gi in range(wmat.shape[0]):
        blas.matmul(wmat[gi, o0:o1], xs[:, gi], outs[:, gi, o0:o1])


#: A convolution with at least this many flops splits its work over two threads.
_SPLIT_FLOPS = 2e7
#: ... and one image's, over numba's loops on MKL's oneTBB workers, from this many
#: (whose workers take a loop within microseconds: 3x64x32x32 in 37 against 73 us).
_POOL_FLOPS = 1e6


class _PooledConv(shared_pool.PoolKernel):
    """A convolution as one numba parallel loop on MKL's oneTBB workers
    (:mod:`eagerrt.backends.cpu.shared_pool`), set up once: graph mode sets
    one up when the plan is made.

    Winograd runs :func:`numba_nn.winograd_on_pool`, one image's tile rows cut
    into a block per thread at least, each block's transforms and 16 products
    on one core (measured 64x64x32x32: 230 against 510 us with the transforms
    on this thread and the products on MKL's threads, short products that wait
    on each other 16 times a block). Other convolutions of one image run
    :func:`numba_nn.gathered_on_pool`, im2col split by channels and the
    product by output channels (512x512x4x4: 350 against 415 us; a 1x1
    256->512 at stride 2: 45 against 86 us); a batch's run
    :func:`numba_nn.gathered_blocks_on_pool`, blocks of images or rows. A
    batch's blocks are those of the helper-thread forms, without their Python
    between blocks (64x64x32x32 at batch 32: 8.3 against 11.6 ms); its
    epilogue then runs once over the whole result."""

    def __init__(
        self, g: ConvGeometry, weight: np.ndarray, u: np.ndarray | None, dtype: np.dtype[Any]
    ) -> None:
        super().__init__(dtype)
        self.g, self.u, self.dtype = g, u, dtype
        self.zeros = np.zeros(g.o, dtype)  # the bias where there is none
        self.kernel: Any
        self.work: tuple[Shape, Shape]
        if u is not None:
            self.kernel = numba_nn.winograd_on_pool
            tw = (g.wo + 1) // 2
            self.tw, self.span = tw, _winograd_span(tw)
            blocks = _winograd_blocks_of(g, dtype, self.threads, _POOL_WINOGRAD_BYTES)
            self.blocks = np.array(blocks, np.int64)
            width = _widest(blocks) * self.span
            self.work = ((self.threads, 16, g.c, width), (self.threads, 16, g.o, width))
            return
        self.wmat = np.ascontiguousarray(weight, dtype).reshape(g.o, -1)
        taps = self.wmat.shape[1]
        self.window = (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)
        if g.n == 1:
            self.kernel = numba_nn.gathered_on_pool
            self.gather = not _plain(g)
            self.cols = (taps, g.ho * g.wo)
            self.no_cols = np.empty((0, 0), dtype)  # stands for cols where the image is them
        else:
            self.kernel = numba_nn.gathered_blocks_on_pool
            blocks = _gathered_blocks_of(g, dtype, self.threads)
            self.blocks = np.array(blocks, np.int64)
            width = _widest(blocks) * g.wo
            self.work = ((self.threads, taps, width), (self.threads, g.o, width))

    def __call__(self, x: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> bool:
        """Write the convolution of ``x`` (C-contiguous, (N, C, H, W)) plus
        ``bias`` into ``out`` (C-contiguous (N, O, Ho, Wo)); False (nothing
        done) where ``config.num_threads`` was changed since, ``config.blas``
        now asks for numpy's BLAS, or ``x`` is not C-contiguous."""
        if config.blas == "numpy" or not x.flags.c_contiguous:
            return False
        alone = self.claim()
        if alone is None:
            return False
        if alone:
            self.held(self._run, x, bias, out)
        else:
            self._run(x, bias, out)
        return True

    def _run(self, x: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> None:
        b = self.zeros if bias is None else bias
        g = self.g
        if self.u is not None:
            v = threads.work_array("winograd input", self.work[0], self.dtype)
            m = threads.work_array("winograd products", self.work[1], self.dtype)
            self.kernel(self.address, x, self.u, b, out, self.blocks, self.tw, self.span,
                        g.ph, g.pw, v, m)  # fmt: skip
        elif g.n == 1:
            cols = (
                threads.work_array("im2col", self.cols, self.dtype) if self.gather else self.no_cols
            )
            self.kernel(self.address, x, self.wmat, b, out, cols, self.gather, self.window,
                        self.threads)  # fmt: skip
        else:
            cols = threads.work_array("im2col", self.work[0], self.dtype)
            products = threads.work_array("im2col products", self.work[1], self.dtype)
            self.kernel(self.address, x, self.wmat, b, out, self.blocks, cols, products,
                        self.window)  # fmt: skip


def _pooled_conv(
    g: ConvGeometry, weight: np.ndarray, u: np.ndarray | None, dtype: np.dtype[Any]
) -> _PooledConv | None:
    """A :class:`_PooledConv` for a convolution of geometry ``g`` (Winograd where
    ``u``, its Winograd weights, is given), or None where it can't run so: too
    little work, no such pool (:func:`shared_pool.ready`), a dtype BLAS doesn't
    take, a weight of another dtype, groups, or one image's im2col matrix too big
    for a kept work array."""
    if _flops(g, u is not None) * g.n < _POOL_FLOPS or not shared_pool.ready():
        return None
    if blas.gemm_address(dtype) is None or weight.dtype != dtype:
        return None
    if u is None:
        taps = g.c // g.groups * g.kh * g.kw
        pixels = g.ho * g.wo
        if g.groups != 1 or max(taps, pixels * g.n, g.o) >= 1 << 31:
            return None
        if g.n == 1 and not _plain(g) and taps * pixels * dtype.itemsize > threads.KEPT_WORK_BYTES:
            return None
    return _PooledConv(g, weight, u, dtype)


#: im2col block size: about an L2 cache, for single-threaded products.
_IM2COL_BYTES = 1 << 20
#: A block of small images takes enough of them for a product this wide
#: (when the block's size allows): more columns share each read of the weights.
_BLOCK_COLUMNS = 512


#: Winograd needs at least this many input channels per group, the inner
#: dimension of its 16 products (measured faster than im2col from 4 on; with 2
#: or 3, im2col's 9 times longer products win) ...
_WINOGRAD_CHANNELS = 4
#: ... and this many 2x2 output tiles in all, to pay for transforming the
#: weights (measured: 1x512x7x7 runs faster as im2col, 1x256x14x14 as Winograd).
_WINOGRAD_MIN_TILES = 32
#: Tile columns a Winograd block: as many as keep its transformed input and
#: products (16 x (C + O) values a column) in about an L2 cache, but at least
#: _WINOGRAD_MIN_COLS, so that each product reuses its transformed weights
#: enough when the channels are many (measured best at 256 for 256 and 512).
_WINOGRAD_BYTES = 1 << 21
_WINOGRAD_MIN_COLS = 256
#: The pool's loop takes bigger blocks: whole 64-channel 32x32 images rather
#: than halves of them (ResNet-18 at batch 32: 8.1 against 9.1 ms a convolution
#: in the model; alone, 7.4 against 7.6 ms), with no Python between them to spare.
_POOL_WINOGRAD_BYTES = 1 << 22


def _winograd_fits(g: ConvGeometry) -> bool:
    """Whether conv2d runs as Winograd F(2x2, 3x3): a 3x3 kernel, stride and
    dilation 1, enough channels and tiles."""
    tiles = g.n * ((g.ho + 1) // 2) * ((g.wo + 1) // 2)
    return (
        (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1)
        and g.c // g.groups >= _WINOGRAD_CHANNELS
        and tiles >= _WINOGRAD_MIN_TILES
    )


def _even_share(total: int, most: int) -> int:
    """The size of ``ceil(total / most)`` near-equal parts of ``total``."""
    return -(-total // -(-total // most))


def _balanced_share(total: int, most: int, threads: int) -> int:
    """The size of near-equal parts of ``total``, at most ``most``, in a number
    of parts ``threads`` divides where it can: each thread gets as many (three
    blocks of ResNet-18's 256x256x8x8 at batch 32 left one core idle a third of
    the time: 9.5 against 7.7 ms)."""
    parts = -(-total // most)
    parts = min(total, -(-parts // threads) * threads)
    return -(-total // parts)


def _conv2d_winograd(
    x: np.ndarray,
    bias: np.ndarray | None,
    g: ConvGeometry,
    out: np.ndarray,
    u: np.ndarray,
    done: _ImagesDone,
) -> None:
    """3x3 stride 1 as Winograd F(2x2, 3x3): 2.25 times fewer multiplications
    than im2col (measured 2x faster on ResNet's 3x3 layers), the products done
    by BLAS as 16 (O x C) @ (C x tiles) matmuls a block and group; float32
    results stay within a few float32 roundings of the exact ones.

    The work is cut into blocks of tiles (whole images when they are small,
    else tile rows of one image). A batch's blocks are split over two threads,
    each with BLAS on its own thread; one image's blocks run here, their
    products on BLAS's threads (see :func:`threads.on_blas_threads`).
    ``u``: the transformed weights (:func:`_winograd_u`).
    """
    b = np.zeros(g.o, x.dtype) if bias is None else bias
    blocks = _winograd_blocks_of(g, x.dtype, min(2, g.n))  # a batch: two blocks at least
    done.expect(blocks)
    args = (x, u, b, g, out, blocks, done)
    _run_blocks(_winograd_blocks, len(blocks), _flops(g, True) * g.n, g.n, *args)


#: A block of work: (first image, end image, first row, end row) of tiles or output rows.
_Block = tuple[int, int, int, int]


def _widest(blocks: Sequence[_Block]) -> int:
    """The most rows (an image's rows times images) any of ``blocks`` takes."""
    return max((n1 - n0) * (r1 - r0) for n0, n1, r0, r1 in blocks)


def _winograd_blocks_of(
    g: ConvGeometry, dtype: np.dtype[Any], least: int, budget: int | None = None
) -> list[_Block]:
    """A Winograd convolution's blocks of tile rows: whole images a block where
    they fit in the tile columns whose transformed input and products take
    ``budget`` bytes (_WINOGRAD_BYTES by default; ``least`` blocks at least, where
    the batch allows), else tile rows of one image (one image: ``least`` blocks
    at least, where its rows allow)."""
    th, tw = (g.ho + 1) // 2, (g.wo + 1) // 2
    span = _winograd_span(tw)
    per_image = th * span
    budget = _WINOGRAD_BYTES if budget is None else budget
    most = max(_WINOGRAD_MIN_COLS, budget // (16 * (g.c + g.o) * dtype.itemsize))
    if per_image <= most and g.n > 1:
        images = _balanced_share(g.n, max(1, min(most // per_image, -(-g.n // least))), least)
        return [(n0, min(g.n, n0 + images), 0, th) for n0 in range(0, g.n, images)]
    rows = _even_share(th, min(max(1, most // span), -(-th // least) if g.n == 1 else th))
    return [(n0, n0 + 1, r0, min(th, r0 + rows)) for n0 in range(g.n) for r0 in range(0, th, rows)]


def _flops(g: ConvGeometry, winograd: bool) -> float:
    """One image's products' flops: Winograd's 16 over its tile columns, or im2col's one."""
    if winograd:
        return 32.0 * g.o * (g.c // g.groups) * ((g.ho + 1) // 2) * _winograd_span((g.wo + 1) // 2)
    return 2.0 * g.o * (g.c // g.groups) * g.kh * g.kw * g.ho * g.wo


def _run_blocks(work: Any, count: int, flops: float, images: int, *args: Any) -> None:
    """``work(*args, units, single)`` over a convolution's blocks [0, count):
    on this thread with BLAS held to it below _SPLIT_FLOPS (see
    threads.one_blas_thread); one image's here with their products on BLAS's threads
    (see threads.on_blas_threads); a batch's shared with the helper thread."""
    if not threads.two_blas_threads() or flops < _SPLIT_FLOPS:
        threads.one_blas_thread(work, *args, range(count))
    elif images == 1:
        threads.on_blas_threads(work, *args, range(count))
    else:
        threads.shared_by_two(work, count, *args)


def _winograd_span(tw: int) -> int:
    """Columns a tile row takes in the transformed blocks: ``tw`` (no dropped
    column for the products to compute) where that saves a fifth or more of
    them, else ``tw + 1`` (the input transform stores whole blocks at once;
    measured faster from 32x32 images up, slower at 4x4)."""
    return tw if tw <= _WINOGRAD_COMPACT_TILES else tw + 1


#: Tile rows at most this long (images at most 8 wide) store no dropped column.
_WINOGRAD_COMPACT_TILES = 4


#: Winograd weights made for constant weights, by ``id`` of the weight array:
#: (a weak reference to it, groups, the weights). Traces of one function for
#: other input shapes (a server's batch sizes) share its constants' arrays, so
#: they share these too rather than each holding 16/9 of the model's weights.
_prepared: dict[int, tuple[Any, int, np.ndarray]] = {}
_prepared_lock = threading.Lock()
renew_after_fork(__name__, "_prepared_lock", threading.Lock)


def _prepared_u(weight: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """:func:`_winograd_u` of a constant weight, made once per weight array."""
    key = id(weight)
    with _prepared_lock:
        known = _prepared.get(key)
        if known is not None and known[0]() is weight and known[1] == g.groups:
            return known[2]
    u = _winograd_u(weight, g)

    def forget(_: Any) -> None:  # the weight is gone: its id may be reused
        _prepared.pop(key, None)

    try:
        ref = weakref.ref(weight, forget)
    except TypeError:  # an array type without weak references: not shared
        return u
    with _prepared_lock:
        _prepared[key] = (ref, g.groups, u)
    return u


def _winograd_u(weight: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """The Winograd weights ``G g G^T``: (groups, 16, O/groups, C/groups)."""
    u = np.empty((g.groups, 16, g.o // g.groups, g.c // g.groups), weight.dtype)
    winograd_weights(np.ascontiguousarray(weight), u)
    return u


def _winograd_blocks(
    x: np.ndarray,
    u: np.ndarray,
    bias: np.ndarray,
    g: ConvGeometry,
    out: np.ndarray,
    blocks: list[tuple[int, int, int, int]],
    done: _ImagesDone,
    units: Iterable[int],
    single: bool,
) -> None:
    """The blocks ``units`` of :func:`_conv2d_winograd`: the input transform
    of each image's part, the products, the output transform (bias added)
    straight into ``out``, then ``done``. ``single`` (whether BLAS is on this
    thread only) is not needed."""
    tw = (g.wo + 1) // 2
    og, cg = g.o // g.groups, g.c // g.groups
    span = _winograd_span(tw)
    width = _widest(blocks) * span
    # The input tiles transformed, and times the weights: this thread's kept arrays
    # (see threads.work_array): fresh ones of 0.5-1 MB are fresh pages each call
    # (measured 64x64x32x32 at batch 1: 530 against 550-960 us).
    v = threads.work_array("winograd input", (16, g.c, width), x.dtype)
    m = threads.work_array("winograd products", (16, g.o, width), x.dtype)
    for unit in units:
        n0, n1, r0, r1 = blocks[unit]
        image = (r1 - r0) * span  # columns an image takes
        cols = (n1 - n0) * image
        for k in range(n1 - n0):
            winograd_input(x[n0 + k], v, k * image, r0, r1, tw, span, g.ph, g.pw)
        for gi in range(g.groups):
            blas.matmul(
                u[gi], v[:, gi * cg : (gi + 1) * cg, :cols], m[:, gi * og : (gi + 1) * og, :cols]
            )
        for k in range(n1 - n0):
            winograd_output(m, out[n0 + k], bias, k * image, r0, r1, span)
        done.finished(blocks[unit])


def _conv2d_gathered(
    x: np.ndarray,
    wmat: np.ndarray,
    bias: np.ndarray | None,
    g: ConvGeometry,
    out: np.ndarray,
    done: _ImagesDone,
) -> None:
    """im2col, gathering each output pixel's taps (zeros in the padding; any
    stride), then BLAS multiplies. The work is cut into blocks (several whole
    images when they are small, so one product covers them all and the weights
    are read once per block, not per image; one image, whose product then lands
    in place; or rows of one), each an im2col matrix of at most
    ``_IM2COL_BYTES``; the bias is added to each block's products while they are
    in cache. (Gathering with flat unsigned indices measured 10-40% faster
    overall than copying rows of a zero-padded image, which computed dropped
    columns and copied the result once more.) A batch's blocks are shared by
    two threads, each running BLAS on its own thread; one image's blocks run
    here, their products on BLAS's threads (see :func:`threads.on_blas_threads`)."""
    blocks = _gathered_blocks_of(g, x.dtype, 1)
    done.expect(blocks)
    flops = _flops(g, False) * g.n
    if len(blocks) == 1 < g.n and flops >= _SPLIT_FLOPS and threads.two_blas_threads():
        # Several small images in one block: its product split by output channels
        # with the helper thread, as a batch's other convolutions split their
        # blocks (one product on BLAS's pool leaves its threads spinning beside
        # those splits: ResNet-18 at batch 32 took 196-201 ms against 155-161 ms).
        cols = _gather(x, g, 0, g.n, 0, g.ho)
        res = threads.work_array("im2col products", (g.o, g.n * g.ho * g.wo), x.dtype)
        threads.rows_by_two(_gathered_channels, g.o // g.groups, wmat, cols, bias, res, g)
        _scatter(res, out, g, 0, g.n, 0, g.ho)
        done.finished(blocks[0])
    else:
        _run_blocks(_gathered_blocks, len(blocks), flops, g.n, x, wmat, bias, g, out, blocks, done)


def _gathered_blocks_of(g: ConvGeometry, dtype: np.dtype[Any], least: int) -> list[_Block]:
    """An im2col convolution's blocks of output rows, each an im2col matrix of
    at most ``_IM2COL_BYTES``: several whole images where they are small (up
    to ``_BLOCK_COLUMNS`` columns; ``least`` blocks at least, where the batch
    allows), else rows of one image."""
    taps = (g.c // g.groups) * g.kh * g.kw
    pixels = g.ho * g.wo
    per_row = taps * g.wo * dtype.itemsize
    if per_row * g.ho <= _IM2COL_BYTES:
        fit = min(_IM2COL_BYTES // (per_row * g.ho), -(-_BLOCK_COLUMNS // pixels), -(-g.n // least))
        images = _balanced_share(g.n, max(1, fit), least)
        return [(n0, min(g.n, n0 + images), 0, g.ho) for n0 in range(0, g.n, images)]
    rows = _even_share(g.ho, max(1, _IM2COL_BYTES // per_row))
    return [
        (n0, n0 + 1, r0, min(g.ho, r0 + rows)) for n0 in range(g.n) for r0 in range(0, g.ho, rows)
    ]


def _gather(x: np.ndarray, g: ConvGeometry, n0: int, n1: int, r0: int, r1: int) -> np.ndarray:
    """The im2col matrix of output rows [r0, r1) of images [n0, n1): (groups,
    taps, images * pixels), each image's pixels in a run of columns."""
    cg = g.c // g.groups
    span = (r1 - r0) * g.wo
    cols = threads.work_array("im2col", (g.groups, cg * g.kh * g.kw, (n1 - n0) * span), x.dtype)
    for k in range(n1 - n0):
        for gi in range(g.groups):
            im2col(
                x[n0 + k], cols[gi], k * span, gi * cg, (gi + 1) * cg,
                g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, r0, r1, g.wo,
            )  # fmt: skip
    return cols


def _scatter(
    res: np.ndarray, out: np.ndarray, g: ConvGeometry, n0: int, n1: int, r0: int, r1: int
) -> None:
    """Copy a block's products (O, images * pixels) into ``out``'s rows [r0, r1)."""
    dest = out.reshape(g.n, g.o, g.ho * g.wo)[n0:n1, :, r0 * g.wo : r1 * g.wo]
    np.copyto(dest, res.reshape(g.o, n1 - n0, (r1 - r0) * g.wo).transpose(1, 0, 2))


def _gathered_blocks(
    x: np.ndarray,
    wmat: np.ndarray,
    bias: np.ndarray | None,
    g: ConvGeometry,
    out: np.ndarray,
    blocks: list[tuple[int, int, int, int]],
    done: _ImagesDone,
    units: Iterable[int],
    single: bool,
) -> None:
    """The blocks ``units`` of :func:`_conv2d_gathered`, gathered and multiplied
    on this thread, then ``done``."""
    og = g.o // g.groups
    flat = out.reshape(g.n, g.o, g.ho * g.wo)
    for unit in units:
        n0, n1, r0, r1 = blocks[unit]
        cols = _gather(x, g, n0, n1, r0, r1)
        if n1 - n0 == 1:  # one image: the products land in place
            dest = flat[n0, :, r0 * g.wo : r1 * g.wo]
        else:
            dest = threads.work_array("im2col products", (g.o, cols.shape[2]), x.dtype)
        for gi in range(g.groups):
            blas.matmul(wmat[gi], cols[gi], dest[gi * og : (gi + 1) * og])
        if bias is not None:
            dest += bias[:, None]
        if n1 - n0 > 1:
            _scatter(dest, out, g, n0, n1, r0, r1)
        done.finished(blocks[unit])


def _gathered_channels(
    wmat: np.ndarray,
    cols: np.ndarray,
    bias: np.ndarray | None,
    res: np.ndarray,
    g: ConvGeometry,
    o0: int,
    o1: int,
    single: bool,
) -> None:
    """Output channels [o0, o1) of each group of one gathered block's products."""
    og = g.o // g.groups
    for gi in range(g.groups):
        rows = slice(gi * og + o0, gi * og + o1)
        blas.matmul(wmat[gi, o0:o1], cols[gi], res[rows])
        if bias is not None:
            res[rows] += bias[rows, None]


_conv2d.register_kernel("cpu", _conv2d_kernel)


def _geometry_and_u(
    x: Any, weight: Any, bias: Any, constant: np.ndarray | None, **options: Any
) -> tuple[ConvGeometry, np.ndarray | None]:
    """A graph-mode conv2d's geometry, and its Winograd weights where the weight
    is a ``constant`` on the Winograd path (made once per weight array)."""
    g = conv_geometry(x, weight, bias, **options)
    u = _prepared_u(constant, g) if constant is not None and _winograd_fits(g) else None
    return g, u


@_conv2d.prepare("cpu")
def _conv2d_constant_weight(
    constants: dict[int, np.ndarray], x: Any, weight: Any, bias: Any = None, **options: Any
) -> Any:
    """Graph mode: a constant weight on the Winograd path is transformed once,
    here, rather than on every call (3 ms a call for 512x512x3x3)."""
    g, u = _geometry_and_u(x, weight, bias, constants.get(1), **options)
    if u is None:
        return None

    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, **_: Any) -> Any:
        return _conv2d_run(x, weight, bias, g, u)

    return kernel


def conv2d_out_form(inputs: Sequence[Any], static: dict[str, Any], weight: Any = None) -> Any:
    """Graph mode's out form of a conv2d of 4-d ``inputs`` (x, weight[, bias]):
    ``kernel(x, w[, b], out, epilogue=None)``, writing into the plan's buffer
    and running ``epilogue`` (an :data:`ImageEpilogue`) on images as they are
    done. ``weight``: the weight's array where it is a constant (its Winograd
    transform is then made once, here)."""
    x, w, *rest = inputs
    g, u = _geometry_and_u(x, w, rest[0] if rest else None, weight, **static)
    # A constant weight: set up for the shared pool now, once.
    pooled = None if weight is None else _pooled_conv(g, weight, u, np.dtype(x.dtype))

    def with_bias(x: Any, w: Any, b: Any, out: Any, epilogue: Any = None) -> None:
        if pooled is not None and pooled(x, b, out):
            if epilogue is not None:
                epilogue(0, g.n)
            return
        _conv2d_run(x, w, b, g, u, out, epilogue)

    if rest:
        return with_bias
    return lambda x, w, out, epilogue=None: with_bias(x, w, None, out, epilogue)


def _conv_transpose2d_kernel(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, **options: Any
) -> np.ndarray:
    g = conv_transpose_geometry(x, weight, bias, **options)
    x4 = np.ascontiguousarray(batched(x))
    out = np.zeros((g.n, g.o, g.ho, g.wo), x.dtype)
    cg, og = g.c // g.groups, g.o // g.groups
    # The adjoint of conv2d: per image and group, (og*kH*kW, cg) @ (cg, H*W) gives
    # every tap's contribution, which col2im adds into the output.
    wt = np.ascontiguousarray(
        np.asarray(weight).reshape(g.groups, cg, og * g.kh * g.kw).transpose(0, 2, 1)
    )
    xs = x4.reshape(g.n, g.groups, cg, g.h * g.w)
    for ni in range(g.n):
        for gi in range(g.groups):
            cols = wt[gi] @ xs[ni, gi]
            col2im_add(
                cols, out[ni], gi * og, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.h, g.w
            )
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    return out if x.ndim == 4 else out[0]


get_op("conv_transpose2d").register_kernel("cpu", _conv_transpose2d_kernel)
