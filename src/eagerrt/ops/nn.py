"""Neural-network ops, with ``torch.nn.functional``'s names, arguments and semantics.

Convolutions (``conv2d``, ``conv_transpose2d``), pooling (``max_pool2d``,
``avg_pool2d``, ``adaptive_avg_pool2d``), normalization (``batch_norm`` in
inference, ``layer_norm``, ``group_norm``), ``linear``, ``embedding``,
activations (``softmax``, ``log_softmax``, ``silu``, ``softplus``; ``gelu`` lives
in :mod:`~eagerrt.ops.elementwise`), ``scaled_dot_product_attention``, ``pad``,
``interpolate``, ``one_hot`` and ``cross_entropy``.

Each is one op: its shape rule runs at the call (bad shapes, dtypes and
arguments fail on the user's line), its cost counts flops and bytes so heavy
calls go to a worker, and its CPU kernel is numpy (BLAS) where numpy is fast and
numba (:mod:`~eagerrt.ops._numba_nn`, whose kernels load on first use) where it is not.
Float ops take float32 or float64 tensors and keep their dtype. Optional tensor
arguments (a bias, a weight) that are given become operands of the op.

>>> import eagerrt as ert
>>> ert.softmax(ert.asarray([[0.0, 0.0]]), axis=-1).numpy()
array([[0.5, 0.5]])
>>> x = ert.ones((1, 1, 4, 4))
>>> ert.conv2d(x, ert.ones((1, 1, 3, 3)), padding=1).numpy()[0, 0]
array([[4., 6., 6., 4.],
       [6., 9., 9., 6.],
       [6., 9., 9., 6.],
       [4., 6., 6., 4.]])
"""

from __future__ import annotations

import math
import operator
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._core.config import config
from .._core.errors import ArgumentError
from .._core.forking import renew_after_fork
from ..tensor import Tensor
from . import _blas, _pooled_linear
from ._rules import as_float, normalize_axis, ufunc_dtype
from .elementwise import scaled_cost
from .registry import GENERIC, Op, call_error, define_op

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "conv2d",
    "conv_transpose2d",
    "cross_entropy",
    "embedding",
    "group_norm",
    "interpolate",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool2d",
    "one_hot",
    "pad",
    "scaled_dot_product_attention",
    "silu",
    "softmax",
    "softplus",
]

Shape = tuple[int, ...]
RuleOut = tuple[Shape, np.dtype[Any]]
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INT64 = np.dtype(np.int64)


# -- shared argument checks ---------------------------------------------------------
def _float_dtype(what: str, first: Any, *others: Any) -> np.dtype[Any]:
    """The common float32/float64 dtype of these tensors (None entries skipped)."""
    dtype = getattr(first, "dtype", None)  # a Tensor in rules, an array in kernels
    if dtype is None:
        raise TypeError(f"{what} needs a tensor, not {type(first).__name__}")
    if dtype not in _FLOATS:
        raise TypeError(f"{what} needs float32 or float64 tensors, got {dtype}")
    for other in others:
        if other is not None and other.dtype != dtype:
            raise TypeError(
                f"{what} needs operands of one dtype, got {dtype} and {other.dtype} "
                "(cast one with .astype)"
            )
    return dtype


def _ints(value: Any, n: int, name: str, minimum: int) -> tuple[int, ...]:
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


def _check_shape(what: str, tensor: Any, shape: Shape) -> None:
    if tensor is not None and tensor.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {tensor.shape}")


def _spatial_input(what: str, x: Any) -> None:
    if x.ndim not in (3, 4):
        raise ValueError(f"{what} needs a 4-d (N, C, H, W) or 3-d (C, H, W) input, got {x.shape}")


def _batched(x: np.ndarray) -> np.ndarray:
    """A (C, H, W) image as a batch of one (kernels work on 4-d arrays)."""
    return x[None] if x.ndim == 3 else x


def _flop_cost(flops: float, elements: float) -> float:
    return config.op_overhead_ns + flops * config.ns_per_flop + elements * config.ns_per_element


# -- threads and BLAS ---------------------------------------------------------------------
# A heavy kernel runs on one eagerrt worker. Convolution and attention split
# their independent work (images, heads) over two threads, each calling BLAS on
# one thread: OpenBLAS's own pool, woken by every call from every thread, loses
# to that (measured 41 vs 102 GFLOP/s for two threads' 64x576x13k products on
# a busy machine; its pool threads spin and stall when preempted).

_blas_local_fn: Any = None
_blas_local_looked = False
#: BLAS's thread count before eagerrt changed it (restored when no thread needs one).
_blas_default_threads = 0
_blas_single_lock = threading.Lock()
_blas_single_holders = 0  # threads inside _one_blas_thread


def _blas_local() -> Any:
    """numpy's OpenBLAS ``openblas_set_num_threads_local`` (0.3.27+), or None
    where numpy has another BLAS; then products are cut small enough to run on
    one thread anyway."""
    global _blas_local_fn, _blas_local_looked, _blas_default_threads
    if not _blas_local_looked:
        _blas_local_looked = True
        try:
            import ctypes
            import glob
            import os

            libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
            for path in sorted(glob.glob(os.path.join(libs, "*openblas*"))):
                lib = ctypes.CDLL(path)  # already loaded by numpy: the same instance
                if hasattr(lib, "openblas_set_num_threads_local"):
                    fn = lib.openblas_set_num_threads_local
                    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int]
                    # Setting 1 returns the count in force: the default, as
                    # nothing here has changed it yet.
                    _blas_default_threads = fn(1)
                    fn(_blas_default_threads)
                    _blas_local_fn = fn
                    break
        except OSError:
            _blas_local_fn = None
    return _blas_local_fn


def _one_blas_thread(work: Any, *args: Any) -> Any:
    """``work(*args, single)`` with BLAS on one thread where that can be set
    (``single`` says whether it was).

    Kernels split over two threads (:func:`_shared_by_two`) and small
    convolutions run their products here: OpenBLAS's pool threads spin for a
    while after each product, so a network that mixed pool products for its
    small convolutions with helper-thread splits for its big ones ran three busy
    threads on two cores (measured ResNet-18 at batch 1: 19 vs 13 ms; a step's
    own kernels up to 10 times slower while a pool thread spun beside them).
    Work that is one big product is left to the pool (:func:`_on_blas_threads`).

    numpy's bundled OpenBLAS applies the "thread-local" count to the whole process
    (measured: a count set on one thread holds on the others), so two threads
    that each saved and restored the count could interleave and leave it at 1
    for good: every later product on one core (MiniLM at batch 1: 40 vs 27 ms).
    The count is therefore held at 1 while any thread is in here, and the
    default restored by the last one out."""
    global _blas_single_holders
    mkl_saved = _blas.hold_to_one_thread()  # MKL's count is per thread: no bookkeeping
    try:
        fn = _blas_local()
        if fn is None:
            return work(*args, False)
        with _blas_single_lock:
            _blas_single_holders += 1
            fn(1)
        try:
            return work(*args, True)
        finally:
            with _blas_single_lock:
                _blas_single_holders -= 1
                if _blas_single_holders == 0:
                    fn(_blas_default_threads)
    finally:
        _blas.release_thread_hold(mkl_saved)


_helpers: Any = None  # a thread pool for kernels that split their work in two


def _helper_pool() -> Any:
    global _helpers
    if _helpers is None:
        from concurrent.futures import ThreadPoolExecutor

        _helpers = ThreadPoolExecutor(1, thread_name_prefix="eagerrt-nn")
    return _helpers


renew_after_fork(__name__, "_helpers", lambda: None)  # a forked child starts its own
renew_after_fork(__name__, "_blas_single_lock", threading.Lock)
renew_after_fork(__name__, "_blas_single_holders", lambda: 0)


class _Units:
    """The indices [0, n) handed out one at a time to the threads iterating
    over this (each ``iter`` is one thread's share)."""

    def __init__(self, n: int) -> None:
        self._next = 0
        self._n = n
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[int]:
        while True:
            with self._lock:
                i = self._next
                self._next += 1
            if i >= self._n:
                return
            yield i


def _cores_taken(others: int = 1) -> bool:
    """Whether at least ``others`` other CPU tasks are queued or running (other
    requests' models on the other workers): then a kernel does all its work on its
    own thread, BLAS held to it, rather than split it with the helper thread or
    BLAS's pool over cores those tasks would be using. (Asked before every
    split: the CPU device is looked up once.)"""
    global _cpu_device
    if _cpu_device is None:
        from ..devices.cpu import cpu

        _cpu_device = cpu
    return _cpu_device.busy_besides_caller() >= others


_cpu_device: Any = None


def _two_blas_threads() -> bool:
    """Whether a convolution may split its products over two threads, each with
    BLAS held to it (numpy's BLAS must let that be set: see _blas_local)."""
    return config.num_threads >= 2 and _blas_local() is not None


def _on_blas_threads(work: Any, *args: Any, others: int = 1) -> None:
    """``work(*args, single)`` with its products on BLAS's own threads, or with
    BLAS held to this thread while ``others`` other CPU tasks or more have the
    other cores (:func:`_cores_taken`).

    For work that is one product (a linear layer at batch 1, a convolution of one
    small image): BLAS's pool threads keep watching for work for a while after
    each product, so they take the next one within microseconds, where the
    helper thread, asleep between kernels, takes tens to hundreds of
    microseconds to wake on these virtual cores (measured ResNet-18 at batch 1:
    10.1-10.4 ms with its one-image convolutions' products on the pool, against
    12.3-13.0 ms split with the helper)."""
    if _cores_taken(others):
        _one_blas_thread(work, *args)
    else:
        work(*args, False)


def _one_product(a: np.ndarray, b: np.ndarray, out: np.ndarray, others: int = 1) -> None:
    """``out[...] = a @ b`` as one BLAS call, on BLAS's own threads (see
    :func:`_on_blas_threads`). For products above _BLAS_ONE_THREAD, which BLAS
    would otherwise thread."""
    _on_blas_threads(lambda single: _blas.matmul(a, b, out), others=others)


def _shared_by_two(work: Any, n: int, *args: Any) -> None:
    """``work(*args, units, single)`` on a helper thread and here, each with
    BLAS on its own thread, ``units`` handing out [0, n) to whichever thread
    is free: on a busy machine a thread that loses its core takes fewer
    units instead of holding up the other (as fixed halves do). All here, when
    other tasks have the other cores (:func:`_cores_taken`)."""
    if _cores_taken():
        _one_blas_thread(work, *args, range(n))
        return
    units = _Units(n)
    other = _helper_pool().submit(_one_blas_thread, work, *args, units)
    try:
        _one_blas_thread(work, *args, units)
    finally:
        # The helper may still be busy with another caller's split (two workers each
        # running a model): then this caller has done every unit itself, and waiting
        # for the queued share would only serialise it behind the other caller.
        if not other.cancel():
            other.result()


def _rows_by_two(work: Any, rows: int, *args: Any) -> None:
    """``work(*args, r0, r1, single)`` over chunks of [0, rows) shared by two
    threads as :func:`_shared_by_two` shares units: a product split by output
    rows. Four chunks or more, so that a thread that loses its core on a busy
    machine leaves the others to the thread that has one (fixed halves made
    the caller wait for the whole of a late half)."""
    size = max(_MIN_CHUNK_ROWS, -(-rows // _ROW_CHUNKS))
    chunks = [(r0, min(rows, r0 + size)) for r0 in range(0, rows, size)]

    def run(*a: Any) -> None:
        *rest, units, single = a
        for unit in units:
            work(*rest, *chunks[unit], single)

    _shared_by_two(run, len(chunks), *args)


#: Chunks a product split by rows is cut into, of at least so many rows (BLAS
#: runs short products slower).
_ROW_CHUNKS = 4
_MIN_CHUNK_ROWS = 16


# -- conv2d ------------------------------------------------------------------------------
class _Conv(NamedTuple):
    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int  # top padding (bottom padding only shows in ho)
    pw: int  # left padding
    dh: int
    dw: int
    groups: int
    ho: int
    wo: int
    out_shape: Shape


def _conv_padding(
    padding: Any, kernel: tuple[int, int], dilation: tuple[int, int], stride: tuple[int, int]
) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) for an int, a pair, 'valid' or 'same'."""
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0, 0, 0
        if padding != "same":
            raise ArgumentError(
                f"padding must be an int, a pair, 'valid' or 'same', got {padding!r}"
            )
        if stride != (1, 1):
            raise ArgumentError("padding='same' is not supported for strided convolutions")
        # PyTorch puts the odd pixel of an even total at the bottom / right.
        th, tw = (d * (k - 1) for d, k in zip(dilation, kernel, strict=True))
        return th // 2, th - th // 2, tw // 2, tw - tw // 2
    ph, pw = _ints(padding, 2, "padding", 0)
    return ph, ph, pw, pw


def _conv_geometry(
    x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: Any
) -> _Conv:
    _spatial_input("conv2d", x)
    if weight.ndim != 4:
        raise ValueError(f"conv2d needs a 4-d (O, C/groups, kH, kW) weight, got {weight.shape}")
    _float_dtype("conv2d", x, weight, bias)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ArgumentError(f"groups must be a positive int, got {groups!r}")
    groups = int(groups)
    *lead, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    if c != cg * groups:
        raise ValueError(
            f"input has {c} channels but weight {weight.shape} with groups={groups} "
            f"expects {cg * groups}"
        )
    if o % groups:
        raise ValueError(f"out channels {o} are not divisible by groups={groups}")
    _check_shape("bias", bias, (o,))
    sh, sw = _ints(stride, 2, "stride", 1)
    dh, dw = _ints(dilation, 2, "dilation", 1)
    top, bottom, left, right = _conv_padding(padding, (kh, kw), (dh, dw), (sh, sw))
    ho = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wo = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    if ho < 1 or wo < 1:
        raise ValueError(
            f"input {h}x{w} (padded {h + top + bottom}x{w + left + right}) is smaller than "
            f"the dilated kernel {dh * (kh - 1) + 1}x{dw * (kw - 1) + 1}"
        )
    n = lead[0] if lead else 1
    out_shape = (*lead, o, ho, wo)
    return _Conv(n, c, h, w, o, kh, kw, sh, sw, top, left, dh, dw, groups, ho, wo, out_shape)


def _conv2d_rule(
    input: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> RuleOut:
    geo = _conv_geometry(input, weight, bias, stride, padding, dilation, groups)
    return geo.out_shape, input.dtype


def _conv2d_cost(
    shape: Shape, dtype: np.dtype[Any], /, x: Tensor, w: Tensor, *rest: Any, **_: Any
) -> float:
    # Each output element: a dot product of C/groups * kH * kW; im2col copies as much.
    taps = math.prod(w.shape[1:])
    return _flop_cost(2.0 * math.prod(shape) * taps, math.prod(shape) / w.shape[0] * taps)


def _conv2d_kernel(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> np.ndarray:
    g = _conv_geometry(x, weight, bias, stride, padding, dilation, groups)
    return _conv2d_run(x, weight, bias, g, None)


def _conv2d_run(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    g: _Conv,
    u: np.ndarray | None,
    out: np.ndarray | None = None,
    epilogue: ImageEpilogue | None = None,
) -> np.ndarray:
    """conv2d of geometry ``g``; ``u``: the Winograd weights, if already made.
    With ``out`` (a C-contiguous (N, O, Ho, Wo) array, for a 4-d ``x``) the
    result is written there, and ``epilogue`` runs on each run of images as
    soon as they are done (see :data:`ImageEpilogue`)."""
    x4 = np.ascontiguousarray(_batched(x))
    if out is None:
        out = np.empty((g.n, g.o, g.ho, g.wo), x.dtype)
    done = _ImagesDone(epilogue)
    winograd = u is not None or _winograd_fits(g)
    if winograd and u is None:
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
        flops = 2.0 * g.o * taps * g.n * g.h * g.w
        if flops < _SPLIT_FLOPS or not _two_blas_threads():  # see _one_blas_thread
            _one_blas_thread(_plain_channels, wmat, xs, outs, 0, og)
        elif g.n == 1:  # one product a group
            _on_blas_threads(_plain_channels, wmat, xs, outs, 0, og)
        else:
            _rows_by_two(_plain_channels, og, wmat, xs, outs)
        if bias is not None:
            out += bias.reshape(-1, 1, 1)
        done.all(g.n)
    elif winograd:
        _conv2d_winograd(x4, weight, bias, g, out, u, done)
    else:
        _conv2d_gathered(x4, wmat, bias, g, out, done)
    return out if x.ndim == 4 else out[0]


def _plain(g: _Conv) -> bool:
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
        _blas.matmul(wmat[gi, o0:o1], xs[:, gi], outs[:, gi, o0:o1])


#: A convolution with at least this many flops splits its work over two threads.
_SPLIT_FLOPS = 2e7
#: ... and one image's, over numba's loops on MKL's oneTBB workers, from this many
#: (whose workers take a loop within microseconds: 3x64x32x32 in 37 against 73 us).
_POOL_FLOPS = 1e6


class _PooledConv:
    """A convolution as one numba parallel loop on MKL's oneTBB workers
    (:mod:`eagerrt.ops._shared_pool`), set up once: graph mode sets one up when
    the plan is made, so a call is a few checks and the kernel's.

    Winograd runs :func:`_numba_nn.winograd_on_pool`, one image's tile rows cut
    into a block per thread at least, each block's transforms and 16 products
    on one core (measured 64x64x32x32: 230 against 510 us with the transforms
    on this thread and the products on MKL's threads, short products that wait
    on each other 16 times a block). Other convolutions of one image run
    :func:`_numba_nn.gathered_on_pool`, im2col split by channels and the
    product by output channels (512x512x4x4: 350 against 415 us; a 1x1
    256->512 at stride 2: 45 against 86 us); a batch's run
    :func:`_numba_nn.gathered_blocks_on_pool`, blocks of images or rows. A
    batch's blocks are those of the helper-thread forms, without their Python
    between blocks (64x64x32x32 at batch 32: 8.3 against 11.6 ms); its
    epilogue then runs once over the whole result.

    Python between kernels is slow here, its code and data evicted by the
    kernels (a 1 us function took 5-11 us between ResNet's convolutions), so
    the call does as little of it as it can."""

    def __init__(
        self, g: _Conv, weight: np.ndarray, u: np.ndarray | None, dtype: np.dtype[Any]
    ) -> None:
        from . import _shared_pool
        from ._numba_nn import gathered_blocks_on_pool, gathered_on_pool, winograd_on_pool

        address = _blas.gemm_address(dtype)
        assert address is not None  # _pooled_conv checked
        # Looked up here, not imported on every call (Python is slow between kernels).
        self.claim_threads = _shared_pool.claim_threads
        self.threads = _shared_pool.pool_threads()
        self.address = address
        self.dtype = dtype
        self.zeros = np.zeros(g.o, dtype)  # the bias where there is none
        self.g = g
        self.u = u
        self.kernel: Any
        self.work: tuple[Shape, Shape]
        if u is not None:
            self.kernel = winograd_on_pool
            tw = (g.wo + 1) // 2
            self.tw, self.span = tw, _winograd_span(tw)
            blocks = _winograd_blocks_of(g, dtype, self.threads, _POOL_WINOGRAD_BYTES)
            self.blocks = np.array(blocks, np.int64)
            width = _widest(blocks) * self.span
            self.work = ((self.threads, 16, g.c, width), (self.threads, 16, g.o, width))
            return
        self.wmat = np.ascontiguousarray(weight, dtype).reshape(g.o, -1)
        taps = self.wmat.shape[1]
        if g.n == 1:
            self.kernel = gathered_on_pool
            self.gather = not _plain(g)
            self.cols = (taps, g.ho * g.wo)
            self.no_cols = np.empty((0, 0), dtype)  # stands for cols where the image is them
        else:
            self.kernel = gathered_blocks_on_pool
            blocks = _gathered_blocks_of(g, dtype, self.threads)
            self.blocks = np.array(blocks, np.int64)
            width = _widest(blocks) * g.wo
            self.work = ((self.threads, taps, width), (self.threads, g.o, width))

    def __call__(self, x: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> bool:
        """Write the convolution of ``x`` (C-contiguous, (N, C, H, W)) plus
        ``bias`` into ``out`` (C-contiguous (N, O, Ho, Wo)); False (nothing
        done) where ``config.num_threads`` was changed since, ``config.blas``
        now asks for numpy's BLAS, or ``x`` is not C-contiguous. Where other
        tasks have the other cores (:func:`_cores_taken`) the loop runs on this
        thread alone, MKL held to it too."""
        if config.blas == "numpy" or not x.flags.c_contiguous:
            return False
        alone = _cores_taken()
        if not self.claim_threads(alone, self.threads):
            return False
        if not alone:
            self._run(x, bias, out)
            return True
        saved = _blas.hold_to_one_thread()
        try:
            self._run(x, bias, out)
        finally:
            _blas.release_thread_hold(saved)
        return True

    def _run(self, x: np.ndarray, bias: np.ndarray | None, out: np.ndarray) -> None:
        b = self.zeros if bias is None else bias
        g = self.g
        if self.u is not None:
            v = _work_array("winograd input", self.work[0], self.dtype)
            m = _work_array("winograd products", self.work[1], self.dtype)
            self.kernel(self.address, x, self.u, b, out, self.blocks, self.tw, self.span,
                        g.ph, g.pw, v, m)  # fmt: skip
        elif g.n == 1:
            cols = _work_array("im2col", self.cols, self.dtype) if self.gather else self.no_cols
            self.kernel(self.address, x, self.wmat, b, out, cols, self.gather, g.kh, g.kw,
                        g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, self.threads)  # fmt: skip
        else:
            cols = _work_array("im2col", self.work[0], self.dtype)
            products = _work_array("im2col products", self.work[1], self.dtype)
            self.kernel(self.address, x, self.wmat, b, out, self.blocks, cols, products,
                        g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)  # fmt: skip


def _pooled_conv(
    g: _Conv, weight: np.ndarray, u: np.ndarray | None, dtype: np.dtype[Any]
) -> _PooledConv | None:
    """A :class:`_PooledConv` for a convolution of geometry ``g`` (Winograd
    where ``u``, its Winograd weights, is given), or None where it can't run
    so: too little work, no such pool
    (:func:`_shared_pool.ready`), a dtype BLAS doesn't take, a weight of
    another dtype, groups, or one image's im2col matrix too big for a kept
    work array."""
    from . import _shared_pool

    cg = g.c // g.groups
    if u is not None:
        flops = 32.0 * g.o * cg * ((g.ho + 1) // 2) * _winograd_span((g.wo + 1) // 2)
    else:
        flops = 2.0 * g.o * cg * g.kh * g.kw * g.ho * g.wo
    if flops * g.n < _POOL_FLOPS or not _shared_pool.ready():
        return None
    if _blas.gemm_address(dtype) is None or weight.dtype != dtype:
        return None
    if u is None:
        taps = cg * g.kh * g.kw
        pixels = g.ho * g.wo
        if g.groups != 1 or max(taps, pixels * g.n, g.o) >= 1 << 31:
            return None
        if g.n == 1 and not _plain(g) and taps * pixels * dtype.itemsize > _KEPT_WORK_BYTES:
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


def _winograd_fits(g: _Conv) -> bool:
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
    weight: np.ndarray,
    bias: np.ndarray | None,
    g: _Conv,
    out: np.ndarray,
    u: np.ndarray | None = None,
    done: _ImagesDone | None = None,
) -> None:
    """3x3 stride 1 as Winograd F(2x2, 3x3): 2.25 times fewer multiplications
    than im2col (measured 2x faster on ResNet's 3x3 layers), the products done
    by BLAS as 16 (O x C) @ (C x tiles) matmuls a block and group; float32
    results stay within a few float32 roundings of the exact ones.

    The work is cut into blocks of tiles (whole images when they are small,
    else tile rows of one image). A batch's blocks are split over two threads,
    each with BLAS on its own thread; one image's blocks run here, their
    products on BLAS's threads (see :func:`_on_blas_threads`).
    ``u``: the transformed weights when they were made once in advance (graph
    mode, :func:`_conv2d_constant_weight`).
    """
    th, tw = (g.ho + 1) // 2, (g.wo + 1) // 2
    span = _winograd_span(tw)
    per_image = th * span  # block columns an image takes
    flops = 32.0 * g.o * (g.c // g.groups) * per_image * g.n  # the products'
    if u is None:
        u = _winograd_u(weight, g)
    b = np.zeros(g.o, x.dtype) if bias is None else bias
    blocks = _winograd_blocks_of(g, x.dtype, min(2, g.n))  # a batch: two blocks at least
    done = done or _ImagesDone(None)
    done.expect(blocks)
    args = (x, u, b, g, out, blocks, done)
    _run_blocks(_winograd_blocks, len(blocks), flops, g.n, *args)


#: A block of work: (first image, end image, first row, end row) of tiles or output rows.
_Block = tuple[int, int, int, int]


def _widest(blocks: Sequence[_Block]) -> int:
    """The most rows (an image's rows times images) any of ``blocks`` takes."""
    return max((n1 - n0) * (r1 - r0) for n0, n1, r0, r1 in blocks)


def _winograd_blocks_of(
    g: _Conv, dtype: np.dtype[Any], least: int, budget: int | None = None
) -> list[_Block]:
    """A Winograd convolution's blocks of tile rows: whole images a block where
    they fit in :func:`_winograd_columns` (``least`` blocks at least, where the
    batch allows), else tile rows of one image (one image: ``least`` blocks at
    least, where its rows allow)."""
    th, tw = (g.ho + 1) // 2, (g.wo + 1) // 2
    span = _winograd_span(tw)
    per_image = th * span
    most = _winograd_columns(g, dtype, budget)
    if per_image <= most and g.n > 1:
        images = _balanced_share(g.n, max(1, min(most // per_image, -(-g.n // least))), least)
        return [(n0, min(g.n, n0 + images), 0, th) for n0 in range(0, g.n, images)]
    rows = min(max(1, most // span), -(-th // least) if g.n == 1 else th)
    rows = _even_share(th, rows)
    return [(n0, n0 + 1, r0, min(th, r0 + rows)) for n0 in range(g.n) for r0 in range(0, th, rows)]


def _winograd_columns(g: _Conv, dtype: np.dtype[Any], budget: int | None = None) -> int:
    """The most tile columns a Winograd block takes in ``budget`` bytes of
    transformed input and products (_WINOGRAD_BYTES by default)."""
    budget = _WINOGRAD_BYTES if budget is None else budget
    return max(_WINOGRAD_MIN_COLS, budget // (16 * (g.c + g.o) * dtype.itemsize))


def _run_blocks(work: Any, count: int, flops: float, images: int, *args: Any) -> None:
    """``work(*args, units, single)`` over a convolution's blocks [0, count):
    on this thread with BLAS held to it below _SPLIT_FLOPS (see
    _one_blas_thread); one image's here with their products on BLAS's threads
    (see _on_blas_threads); a batch's shared with the helper thread."""
    if not _two_blas_threads() or flops < _SPLIT_FLOPS:
        _one_blas_thread(work, *args, range(count))
    elif images == 1:
        _on_blas_threads(work, *args, range(count))
    else:
        _shared_by_two(work, count, *args)


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


def _prepared_u(weight: np.ndarray, g: _Conv) -> np.ndarray:
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


def _winograd_u(weight: np.ndarray, g: _Conv) -> np.ndarray:
    """The Winograd weights ``G g G^T``: (groups, 16, O/groups, C/groups)."""
    from ._numba_nn import winograd_weights

    u = np.empty((g.groups, 16, g.o // g.groups, g.c // g.groups), weight.dtype)
    winograd_weights(np.ascontiguousarray(weight), u)
    return u


def _winograd_blocks(
    x: np.ndarray,
    u: np.ndarray,
    bias: np.ndarray,
    g: _Conv,
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
    from ._numba_nn import winograd_input, winograd_output

    tw = (g.wo + 1) // 2
    og, cg = g.o // g.groups, g.c // g.groups
    span = _winograd_span(tw)
    width = _widest(blocks) * span
    # This thread's kept arrays (see _work_array): fresh ones of 0.5-1 MB are
    # fresh pages each call (measured 64x64x32x32 at batch 1: 530 against 550-960 us).
    v = _work_array("winograd input", (16, g.c, width), x.dtype)  # the input tiles, transformed
    m = _work_array("winograd products", (16, g.o, width), x.dtype)  # times the weights
    for unit in units:
        n0, n1, r0, r1 = blocks[unit]
        image = (r1 - r0) * span  # columns an image takes
        cols = (n1 - n0) * image
        for k in range(n1 - n0):
            winograd_input(x[n0 + k], v, k * image, r0, r1, tw, span, g.ph, g.pw)
        for gi in range(g.groups):
            _blas.matmul(
                u[gi], v[:, gi * cg : (gi + 1) * cg, :cols], m[:, gi * og : (gi + 1) * og, :cols]
            )
        for k in range(n1 - n0):
            winograd_output(m, out[n0 + k], bias, k * image, r0, r1, span)
        done.finished(blocks[unit])


def _conv2d_gathered(
    x: np.ndarray,
    wmat: np.ndarray,
    bias: np.ndarray | None,
    g: _Conv,
    out: np.ndarray,
    done: _ImagesDone | None = None,
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
    here, their products on BLAS's threads (see :func:`_on_blas_threads`)."""
    taps = (g.c // g.groups) * g.kh * g.kw
    pixels = g.ho * g.wo
    blocks = _gathered_blocks_of(g, x.dtype, 1)
    done = done or _ImagesDone(None)
    done.expect(blocks)
    args = (x, wmat, bias, g, out, blocks, done)
    flops = 2.0 * g.o * taps * g.n * pixels
    if len(blocks) == 1 < g.n and flops >= _SPLIT_FLOPS and _two_blas_threads():
        # Several small images in one block: its product split by output channels
        # with the helper thread, as a batch's other convolutions split their
        # blocks (one product on BLAS's pool leaves its threads spinning beside
        # those splits: ResNet-18 at batch 32 took 196-201 ms against 155-161 ms).
        cols = _gather(x, g, 0, g.n, 0, g.ho)
        res = _work_array("im2col products", (g.o, g.n * pixels), x.dtype)
        _rows_by_two(_gathered_channels, g.o // g.groups, wmat, cols, bias, res, g)
        _scatter(res, out, g, 0, g.n, 0, g.ho)
        done.finished(blocks[0])
    else:
        _run_blocks(_gathered_blocks, len(blocks), flops, g.n, *args)


def _gathered_blocks_of(g: _Conv, dtype: np.dtype[Any], least: int) -> list[_Block]:
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


def _gather(x: np.ndarray, g: _Conv, n0: int, n1: int, r0: int, r1: int) -> np.ndarray:
    """The im2col matrix of output rows [r0, r1) of images [n0, n1): (groups,
    taps, images * pixels), each image's pixels in a run of columns."""
    from ._numba_nn import im2col

    cg = g.c // g.groups
    span = (r1 - r0) * g.wo
    cols = _work_array("im2col", (g.groups, cg * g.kh * g.kw, (n1 - n0) * span), x.dtype)
    for k in range(n1 - n0):
        for gi in range(g.groups):
            im2col(
                x[n0 + k], cols[gi], k * span, gi * cg, (gi + 1) * cg,
                g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, r0, r1, g.wo,
            )  # fmt: skip
    return cols


def _scatter(
    res: np.ndarray, out: np.ndarray, g: _Conv, n0: int, n1: int, r0: int, r1: int
) -> None:
    """Copy a block's products (O, images * pixels) into ``out``'s rows [r0, r1)."""
    span = (r1 - r0) * g.wo
    flat = out.reshape(g.n, g.o, g.ho * g.wo)
    dest = flat[n0:n1, :, r0 * g.wo : r1 * g.wo]
    np.copyto(dest, res.reshape(g.o, n1 - n0, span).transpose(1, 0, 2))


def _gathered_blocks(
    x: np.ndarray,
    wmat: np.ndarray,
    bias: np.ndarray | None,
    g: _Conv,
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
            dest = _work_array("im2col products", (g.o, cols.shape[2]), x.dtype)
        for gi in range(g.groups):
            _blas.matmul(wmat[gi], cols[gi], dest[gi * og : (gi + 1) * og])
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
    g: _Conv,
    o0: int,
    o1: int,
    single: bool,
) -> None:
    """Output channels [o0, o1) of each group of one gathered block's products."""
    og = g.o // g.groups
    for gi in range(g.groups):
        rows = slice(gi * og + o0, gi * og + o1)
        _blas.matmul(wmat[gi, o0:o1], cols[gi], res[rows])
        if bias is not None:
            res[rows] += bias[rows, None]


_conv2d = define_op(
    "conv2d",
    _conv2d_rule,
    cost=_conv2d_cost,
    weak_scalars=False,
    doc="2-d convolution (cross-correlation), as ``torch.nn.functional.conv2d``.",
)
_conv2d.register_kernel(GENERIC, _conv2d_kernel)


def _geometry_and_u(
    x: Any,
    weight: Any,
    bias: Any,
    constant: np.ndarray | None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> tuple[_Conv, np.ndarray | None]:
    """A graph-mode conv2d's geometry, and its Winograd weights where the weight
    is a ``constant`` on the Winograd path (made once per weight array)."""
    g = _conv_geometry(x, weight, bias, stride, padding, dilation, groups)
    u = _prepared_u(constant, g) if constant is not None and _winograd_fits(g) else None
    return g, u


@_conv2d.prepare("cpu")
def _conv2d_constant_weight(
    constants: dict[int, np.ndarray],
    x: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Any:
    """Graph mode: a constant weight on the Winograd path is transformed once,
    here, rather than on every call (3 ms a call for 512x512x3x3)."""
    g, u = _geometry_and_u(x, weight, bias, constants.get(1), stride, padding, dilation, groups)
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

    def without_bias(x: Any, w: Any, out: Any, epilogue: Any = None) -> None:
        with_bias(x, w, None, out, epilogue)

    return with_bias if rest else without_bias


def _present(*tensors: Any) -> tuple[Any, ...]:
    """The given optional operands (None ones dropped) and which were given."""
    return tuple(t for t in tensors if t is not None)


def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-d convolution of an (N, C, H, W) or (C, H, W) input with an
    (O, C/groups, kH, kW) weight, as ``torch.nn.functional.conv2d``.

    ``padding`` is an int, a pair, ``'valid'`` or ``'same'`` (stride 1 only).

    >>> import eagerrt as ert
    >>> x = ert.ones((2, 4, 8, 8))
    >>> ert.conv2d(x, ert.ones((6, 2, 3, 3)), stride=2, groups=2).shape
    (2, 6, 3, 3)
    >>> ert.conv2d(x, ert.ones((6, 4, 3, 3)), ert.zeros(6), padding="same").shape
    (2, 6, 8, 8)
    """
    return _conv2d(
        input, weight, *_present(bias),
        stride=stride, padding=padding, dilation=dilation, groups=groups,
    )  # fmt: skip


# -- conv_transpose2d ------------------------------------------------------------------
def _conv_transpose_geometry(
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: Any,
    dilation: Any,
) -> _Conv:
    _spatial_input("conv_transpose2d", x)
    if weight.ndim != 4:
        raise ValueError(
            f"conv_transpose2d needs a 4-d (C_in, C_out/groups, kH, kW) weight, got {weight.shape}"
        )
    _float_dtype("conv_transpose2d", x, weight, bias)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ArgumentError(f"groups must be a positive int, got {groups!r}")
    groups = int(groups)
    *lead, c, h, w = x.shape
    cin, og, kh, kw = weight.shape
    if c != cin:
        raise ValueError(f"input has {c} channels but weight {weight.shape} expects {cin}")
    if cin % groups:
        raise ValueError(f"in channels {cin} are not divisible by groups={groups}")
    o = og * groups
    _check_shape("bias", bias, (o,))
    sh, sw = _ints(stride, 2, "stride", 1)
    dh, dw = _ints(dilation, 2, "dilation", 1)
    ph, pw = _ints(padding, 2, "padding", 0)
    oph, opw = _ints(output_padding, 2, "output_padding", 0)
    if oph >= max(sh, dh) or opw >= max(sw, dw):
        raise ArgumentError(
            f"output_padding {(oph, opw)} must be smaller than stride or dilation "
            f"(stride {(sh, sw)}, dilation {(dh, dw)})"
        )
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (w - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"padding {(ph, pw)} leaves an empty output ({ho}x{wo})")
    n = lead[0] if lead else 1
    return _Conv(n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups, ho, wo, (*lead, o, ho, wo))


def _conv_transpose2d_rule(
    input: Any,
    weight: Any,
    bias: Any = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> RuleOut:
    geo = _conv_transpose_geometry(
        input, weight, bias, stride, padding, output_padding, groups, dilation
    )
    return geo.out_shape, input.dtype


def _conv_transpose2d_cost(
    shape: Shape, dtype: np.dtype[Any], /, x: Tensor, w: Tensor, *rest: Any, **_: Any
) -> float:
    taps = math.prod(w.shape[1:])  # per input element: C_out/groups * kH * kW products
    return _flop_cost(
        2.0 * x.size * taps, x.size / w.shape[0] * taps * w.shape[0] + math.prod(shape)
    )


def _conv_transpose2d_kernel(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> np.ndarray:
    from ._numba_nn import col2im_add

    g = _conv_transpose_geometry(x, weight, bias, stride, padding, output_padding, groups, dilation)
    x4 = np.ascontiguousarray(_batched(x))
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


_conv_transpose2d = define_op(
    "conv_transpose2d",
    _conv_transpose2d_rule,
    cost=_conv_transpose2d_cost,
    weak_scalars=False,
    doc="2-d transposed convolution, as ``torch.nn.functional.conv_transpose2d``.",
)
_conv_transpose2d.register_kernel(GENERIC, _conv_transpose2d_kernel)


def conv_transpose2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Tensor:
    """2-d transposed convolution ("deconvolution") with a (C_in, C_out/groups,
    kH, kW) weight, as ``torch.nn.functional.conv_transpose2d``.

    >>> import eagerrt as ert
    >>> ert.conv_transpose2d(ert.ones((1, 3, 4, 4)), ert.ones((3, 2, 3, 3)), stride=2).shape
    (1, 2, 9, 9)
    >>> ert.conv_transpose2d(ert.ones((1, 1, 1, 1)), ert.ones((1, 1, 2, 2))).numpy()
    array([[[[1., 1.],
             [1., 1.]]]])
    """
    return _conv_transpose2d(
        input, weight, *_present(bias),
        stride=stride, padding=padding, output_padding=output_padding,
        groups=groups, dilation=dilation,
    )  # fmt: skip


# -- pooling -------------------------------------------------------------------------------
def _pool_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size (a window may not start in the right padding)."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


class _Pool(NamedTuple):
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    out_shape: Shape


def _pool_geometry(
    what: str,
    x: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
) -> _Pool:
    _spatial_input(what, x)
    _float_dtype(what, x)
    kh, kw = _ints(kernel_size, 2, "kernel_size", 1)
    sh, sw = (kh, kw) if stride is None or stride == () else _ints(stride, 2, "stride", 1)
    ph, pw = _ints(padding, 2, "padding", 0)
    dh, dw = _ints(dilation, 2, "dilation", 1)
    if 2 * ph > kh or 2 * pw > kw:
        raise ArgumentError(f"padding {(ph, pw)} must be at most half the kernel size {(kh, kw)}")
    h, w = x.shape[-2:]
    ho = _pool_size(h, kh, sh, ph, dh, ceil_mode)
    wo = _pool_size(w, kw, sw, pw, dw, ceil_mode)
    if ho < 1 or wo < 1:
        raise ValueError(f"{what}: input {h}x{w} is too small for the window (output {ho}x{wo})")
    return _Pool(kh, kw, sh, sw, ph, pw, dh, dw, (*x.shape[:-2], ho, wo))


def _pool_cost(shape: Shape, dtype: np.dtype[Any], /, x: Tensor, **static: Any) -> float:
    kh, kw = _ints(static.get("kernel_size", 1), 2, "kernel_size", 1)
    return _flop_cost(0.0, math.prod(shape) * kh * kw * 2)


def _planes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1, *x.shape[-2:])


def _max_pool2d_rule(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> RuleOut:
    geo = _pool_geometry("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode)
    return geo.out_shape, input.dtype


def _max_pool2d_kernel(
    x: np.ndarray,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> np.ndarray:
    from ._numba_nn import max_pool2d as kernel

    g = _pool_geometry("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    out = np.empty(g.out_shape, x.dtype)
    kernel(_planes(x), _planes(out), g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw)
    return out


max_pool2d = define_op(
    "max_pool2d",
    _max_pool2d_rule,
    cost=_pool_cost,
    operands=1,
    doc="""2-d max pooling, as ``torch.nn.functional.max_pool2d`` (no ``return_indices``).

    >>> import eagerrt as ert
    >>> x = ert.arange(16.0).reshape(1, 1, 4, 4)
    >>> ert.max_pool2d(x, 2).numpy()
    array([[[[ 5.,  7.],
             [13., 15.]]]])
    """,
)
max_pool2d.register_kernel(GENERIC, _max_pool2d_kernel)


def _avg_pool2d_rule(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> RuleOut:
    if divisor_override is not None and (
        isinstance(divisor_override, bool)
        or not isinstance(divisor_override, (int, np.integer))
        or divisor_override < 1
    ):
        raise ArgumentError(f"divisor_override must be a positive int, got {divisor_override!r}")
    geo = _pool_geometry("avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode)
    return geo.out_shape, input.dtype


def _avg_pool2d_kernel(
    x: np.ndarray,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> np.ndarray:
    from ._numba_nn import avg_pool2d as kernel

    g = _pool_geometry("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode)
    out = np.empty(g.out_shape, x.dtype)
    divisor = int(divisor_override or 0)
    kernel(
        _planes(x),
        _planes(out),
        g.kh,
        g.kw,
        g.sh,
        g.sw,
        g.ph,
        g.pw,
        bool(count_include_pad),
        divisor,
    )
    return out


avg_pool2d = define_op(
    "avg_pool2d",
    _avg_pool2d_rule,
    cost=_pool_cost,
    operands=1,
    doc="""2-d average pooling, as ``torch.nn.functional.avg_pool2d``
    (``count_include_pad=True`` by default, as there).

    >>> import eagerrt as ert
    >>> x = ert.ones((1, 1, 3, 3))
    >>> ert.avg_pool2d(x, 2, padding=1).numpy()[0, 0]
    array([[0.25, 0.5 ],
           [0.5 , 1.  ]])
    """,
)
avg_pool2d.register_kernel(GENERIC, _avg_pool2d_kernel)


def _adaptive_size(x: Any, output_size: Any) -> tuple[int, int]:
    if output_size is None or isinstance(output_size, (int, np.integer)):
        pair: Any = (output_size, output_size)
    else:
        pair = tuple(output_size)
    if len(pair) != 2:
        raise ArgumentError(f"output_size must be an int or a pair, got {output_size!r}")
    h, w = x.shape[-2:]
    # None keeps that dimension's input size, as in PyTorch.
    out = (h if pair[0] is None else pair[0], w if pair[1] is None else pair[1])
    oh, ow = _ints(out, 2, "output_size", 1)
    return oh, ow


def _adaptive_avg_pool2d_rule(input: Any, output_size: Any) -> RuleOut:
    _spatial_input("adaptive_avg_pool2d", input)
    _float_dtype("adaptive_avg_pool2d", input)
    return (*input.shape[:-2], *_adaptive_size(input, output_size)), input.dtype


def _adaptive_avg_pool2d_kernel(x: np.ndarray, output_size: Any) -> np.ndarray:
    from ._numba_nn import adaptive_avg_pool2d as kernel

    out = np.empty((*x.shape[:-2], *_adaptive_size(x, output_size)), x.dtype)
    kernel(_planes(x), _planes(out))
    return out


adaptive_avg_pool2d = define_op(
    "adaptive_avg_pool2d",
    _adaptive_avg_pool2d_rule,
    cost=lambda shape, dtype, x, **_: _flop_cost(0.0, 2.0 * x.size + math.prod(shape)),
    operands=1,
    doc="""Average pooling to a given output size, as
    ``torch.nn.functional.adaptive_avg_pool2d`` (a None size keeps the input's).

    >>> import eagerrt as ert
    >>> ert.adaptive_avg_pool2d(ert.arange(16.0).reshape(1, 1, 4, 4), 1).numpy()
    array([[[[7.5]]]])
    """,
)
adaptive_avg_pool2d.register_kernel(GENERIC, _adaptive_avg_pool2d_kernel)


# -- normalization ------------------------------------------------------------------------
def _norm_cost(shape: Shape, dtype: np.dtype[Any], /, *args: Any, **_: Any) -> float:
    return _flop_cost(0.0, 5.0 * math.prod(shape))


def _check_eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)):
        raise TypeError(f"eps must be a number, got {eps!r}")
    if not eps >= 0:
        raise ArgumentError(f"eps must be >= 0, got {eps!r}")
    return float(eps)


def _affine(args: tuple[Any, ...], has_weight: bool, has_bias: bool) -> tuple[Any, Any]:
    """The optional (weight, bias) operands, by the flags saying which were given."""
    if len(args) != has_weight + has_bias:
        raise ValueError(f"expected {has_weight + has_bias} affine operand(s), got {len(args)}")
    weight = args[0] if has_weight else None
    bias = args[-1] if has_bias else None
    return weight, bias


def _batch_norm_rule(
    input: Any,
    running_mean: Any,
    running_var: Any,
    *affine: Any,
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> RuleOut:
    weight, bias = _affine(affine, has_weight, has_bias)
    _float_dtype("batch_norm", input, running_mean, running_var, weight, bias)
    if input.ndim < 2:
        raise ValueError(f"batch_norm needs an (N, C, ...) input, got {input.shape}")
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        _check_shape(name, t, (c,))
    _check_shape("weight", weight, (c,))
    _check_shape("bias", bias, (c,))
    _check_eps(eps)
    return input.shape, input.dtype


def _batch_norm_kernel(
    x: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *affine: np.ndarray,
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> np.ndarray:
    weight, bias = _affine(affine, has_weight, has_bias)
    # Fold everything into one scale and shift per channel: one pass over x.
    scale = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    if weight is not None:
        scale = scale * weight
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias
    bcast = (-1,) + (1,) * (x.ndim - 2)
    out = x * scale.astype(x.dtype).reshape(bcast)
    out += shift.astype(x.dtype).reshape(bcast)
    return out


_batch_norm = define_op(
    "batch_norm",
    _batch_norm_rule,
    cost=_norm_cost,
    weak_scalars=False,
    doc="Batch normalization with running statistics (inference).",
)
_batch_norm.register_kernel(GENERIC, _batch_norm_kernel)


def batch_norm(
    input: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalization of an (N, C, ...) input with the running statistics,
    as ``torch.nn.functional.batch_norm`` in inference (``training=False``).

    >>> import eagerrt as ert
    >>> x = ert.asarray([[1.0, 2.0], [3.0, 4.0]])
    >>> ert.batch_norm(x, ert.asarray([2.0, 3.0]), ert.asarray([1.0, 4.0]), eps=0.0).numpy()
    array([[-1. , -0.5],
           [ 1. ,  0.5]])
    """
    if training:
        # Training updates the running statistics in place, which an op can't do.
        raise call_error(
            ArgumentError,
            "batch_norm",
            (input, running_mean, running_var),
            {"training": training},
            "supports inference only (training=False): for training, normalize with "
            "the batch's own statistics (mean / var over the batch) by hand",
        )
    return _batch_norm(
        input, running_mean, running_var, *_present(weight, bias),
        has_weight=weight is not None, has_bias=bias is not None, eps=eps,
    )  # fmt: skip


def _normalized_shape(normalized_shape: Any) -> Shape:
    if isinstance(normalized_shape, (int, np.integer)) and not isinstance(normalized_shape, bool):
        return (int(normalized_shape),)
    try:
        return tuple(operator.index(d) for d in normalized_shape)
    except TypeError:
        raise TypeError(
            f"normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}"
        ) from None


def _layer_norm_rule(
    input: Any,
    *affine: Any,
    normalized_shape: Any = (),
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> RuleOut:
    weight, bias = _affine(affine, has_weight, has_bias)
    _float_dtype("layer_norm", input, weight, bias)
    norm = _normalized_shape(normalized_shape)
    if not norm or input.shape[input.ndim - len(norm) :] != norm or len(norm) > input.ndim:
        raise ValueError(
            f"normalized_shape {norm} must be the last dimensions of the input {input.shape}"
        )
    _check_shape("weight", weight, norm)
    _check_shape("bias", bias, norm)
    _check_eps(eps)
    return input.shape, input.dtype


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
    _normalize_rows_into(rows, _view(out, rows.shape), weight, bias, eps)
    return out


def _normalize_rows_into(
    rows: np.ndarray, out: np.ndarray, weight: Any, bias: Any, eps: float
) -> None:
    """``out[:] =`` the (rows, cols) ``rows`` normalized, scaled and shifted."""
    from ._numba_nn import normalize_rows

    cols, dtype = rows.shape[1], rows.dtype
    w = np.ones(cols, dtype) if weight is None else np.ascontiguousarray(weight).reshape(cols)
    b = np.zeros(cols, dtype) if bias is None else np.ascontiguousarray(bias).reshape(cols)
    if rows.size >= _NORMALIZE_SPLIT and config.num_threads >= 2:
        # Rows are independent, and numba releases the GIL: blocks of them on two threads.
        _rows_by_two(_normalize_block, rows.shape[0], rows, out, w, b, eps)
    elif rows.size:
        normalize_rows(rows, out, w, b, eps)


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
    from ._numba_nn import normalize_rows

    normalize_rows(rows[r0:r1], out[r0:r1], w, b, eps)


def _layer_norm_kernel(
    x: np.ndarray,
    *affine: np.ndarray,
    normalized_shape: Any = (),
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> np.ndarray:
    weight, bias = _affine(affine, has_weight, has_bias)
    cols = math.prod(_normalized_shape(normalized_shape))
    return _normalize(x, cols, weight, bias, float(eps))


def layer_norm_into(
    x: np.ndarray,
    *affine_and_out: np.ndarray,
    normalized_shape: Any = (),
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> None:
    """The layer norm kernel writing into a compiled plan's buffer (the last
    array): no fresh output to allocate and fault in on every call."""
    *affine, out = affine_and_out
    weight, bias = _affine(tuple(affine), has_weight, has_bias)
    cols = math.prod(_normalized_shape(normalized_shape))
    _normalize(x, cols, weight, bias, float(eps), out)


class _PooledNorm:
    """graph mode's layer norm, set up once for the plan's shapes: rows of
    ``cols`` values, normalized by :func:`_numba_nn.normalize_rows_on_pool`
    in blocks shared by numba's parallel loop (MiniLM at batch 32, 4096 rows
    of 384: 0.45 against 0.80 ms with the helper thread), with no Python for
    the affine operands' shapes a call. Declines (False) what it was not set
    up for: strided arrays, ``config.num_threads`` changed since."""

    def __init__(
        self, rows: int, cols: int, dtype: np.dtype[Any], has_weight: bool, has_bias: bool
    ) -> None:
        from . import _shared_pool
        from ._numba_nn import normalize_rows_on_pool

        self.kernel = normalize_rows_on_pool
        self.claim_threads = _shared_pool.claim_threads
        self.threads = _shared_pool.pool_threads()
        self.shape = (rows, cols)
        self.blocks = np.array(_pooled_linear.row_blocks(rows, self.threads), np.int64)
        self.has_weight, self.has_bias = has_weight, has_bias
        self.ones, self.zeros = np.ones(cols, dtype), np.zeros(cols, dtype)

    def __call__(
        self, x: np.ndarray, affine: Sequence[np.ndarray], out: np.ndarray, eps: float
    ) -> bool:
        if not (x.flags.c_contiguous and out.flags.c_contiguous):
            return False
        weight = affine[0].reshape(-1) if self.has_weight else self.ones
        bias = affine[-1].reshape(-1) if self.has_bias else self.zeros
        if not (weight.flags.c_contiguous and bias.flags.c_contiguous):
            return False
        alone = _cores_taken()
        if not self.claim_threads(alone, self.threads):
            return False
        self.kernel(x.reshape(self.shape), out.reshape(self.shape), weight, bias, eps, self.blocks)
        return True


#: A layer norm over fewer values runs on one thread (the loop's start costs
#: about what sharing 128 rows of 384 saves).
_POOL_NORM_VALUES = 1 << 15


def layer_norm_out_form(inputs: Sequence[Any], static: dict[str, Any]) -> Callable[..., None]:
    """graph mode's layer norm into the plan's buffer: :class:`_PooledNorm`
    where the pool can run it, else :func:`layer_norm_into`."""
    from . import _shared_pool

    x = inputs[0]
    cols = math.prod(_normalized_shape(static.get("normalized_shape", ())))
    has_weight, has_bias = bool(static.get("has_weight")), bool(static.get("has_bias"))
    eps = float(static.get("eps", 1e-5))
    pooled = None
    if (
        x.size >= _POOL_NORM_VALUES
        and cols
        and x.dtype in _FLOATS
        and all(a.dtype == x.dtype for a in inputs[1:])
        and _shared_pool.ready()
    ):
        pooled = _PooledNorm(x.size // cols, cols, x.dtype, has_weight, has_bias)

    def out_form(x: np.ndarray, *affine_and_out: np.ndarray) -> None:
        *affine, out = affine_and_out
        if pooled is None or not pooled(x, affine, out, eps):
            layer_norm_into(x, *affine_and_out, **static)

    return out_form


_layer_norm = define_op(
    "layer_norm",
    _layer_norm_rule,
    cost=_norm_cost,
    weak_scalars=False,
    doc="Layer normalization over the trailing ``normalized_shape`` dimensions.",
)
_layer_norm.register_kernel(GENERIC, _layer_norm_kernel)


def layer_norm(
    input: Any,
    normalized_shape: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize over the last ``len(normalized_shape)`` dimensions (biased
    variance), then scale and shift, as ``torch.nn.functional.layer_norm``.

    >>> import eagerrt as ert
    >>> ert.layer_norm(ert.asarray([[1.0, 3.0]]), (2,), eps=0.0).numpy()
    array([[-1.,  1.]])
    """
    return _layer_norm(
        input, *_present(weight, bias),
        normalized_shape=normalized_shape,
        has_weight=weight is not None, has_bias=bias is not None, eps=eps,
    )  # fmt: skip


def _group_norm_rule(
    input: Any,
    *affine: Any,
    num_groups: int = 1,
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> RuleOut:
    weight, bias = _affine(affine, has_weight, has_bias)
    _float_dtype("group_norm", input, weight, bias)
    if input.ndim < 2:
        raise ValueError(f"group_norm needs an (N, C, ...) input, got {input.shape}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)):
        raise TypeError(f"num_groups must be an int, got {num_groups!r}")
    c = input.shape[1]
    if num_groups < 1 or c % num_groups:
        raise ValueError(f"{c} channels can't be split into num_groups={num_groups} groups")
    _check_shape("weight", weight, (c,))
    _check_shape("bias", bias, (c,))
    _check_eps(eps)
    return input.shape, input.dtype


def _group_norm_kernel(
    x: np.ndarray,
    *affine: np.ndarray,
    num_groups: int = 1,
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> np.ndarray:
    weight, bias = _affine(affine, has_weight, has_bias)
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


_group_norm = define_op(
    "group_norm",
    _group_norm_rule,
    cost=_norm_cost,
    weak_scalars=False,
    doc="Group normalization: statistics per sample over groups of channels.",
)
_group_norm.register_kernel(GENERIC, _group_norm_kernel)


def group_norm(
    input: Any,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize each sample's channels in ``num_groups`` groups, then scale and
    shift per channel, as ``torch.nn.functional.group_norm``.

    >>> import eagerrt as ert
    >>> x = ert.asarray([[[1.0], [3.0], [5.0], [9.0]]])
    >>> ert.group_norm(x, 2, eps=0.0).numpy()[0, :, 0]
    array([-1.,  1., -1.,  1.])
    """
    return _group_norm(
        input, *_present(weight, bias),
        num_groups=num_groups,
        has_weight=weight is not None, has_bias=bias is not None, eps=eps,
    )  # fmt: skip


# -- linear and embedding ---------------------------------------------------------------------
def _linear_rule(input: Any, weight: Any, bias: Any = None) -> RuleOut:
    _float_dtype("linear", input, weight, bias)
    if weight.ndim != 2:
        raise ValueError(f"linear needs an (out_features, in_features) weight, got {weight.shape}")
    if input.ndim < 1 or input.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"input {input.shape} must end in in_features={weight.shape[1]} (weight {weight.shape})"
        )
    _check_shape("bias", bias, (weight.shape[0],))
    return (*input.shape[:-1], weight.shape[0]), input.dtype


#: Rows per unit when a linear layer's rows are shared by two threads: measured
#: 15% more single-thread time than one call for 4096x384 @ 384x1536 (each call
#: packs the weight again), where 64-row units cost 55%.
_LINEAR_ROWS = 256

#: A linear layer with at least this many flops (and two units of rows) splits
#: its rows over two threads.
_LINEAR_SPLIT_FLOPS = 2e7

#: ``epilogue(start, stop)``: elementwise work on rows [start, stop) of the
#: result, run right after they are computed (while they are in cache).
Epilogue = Callable[[int, int], None]


def linear_into(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    out: np.ndarray,
    epilogue: Epilogue | None = None,
    pooled: _pooled_linear.PooledLinear | None = None,
) -> None:
    """``out[...] = x @ weight.T + bias`` (then ``epilogue`` over the rows) as one
    matrix product over all leading dimensions. Without an epilogue it is one
    pool kernel where it can be (:mod:`._pooled_linear`; ``pooled``, set up for
    this shape by graph mode, else looked up here). Otherwise large products
    share their rows, in units of _LINEAR_ROWS, between a helper thread and this
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
    out2 = _view(target, (m, n))
    units = -(-m // _LINEAR_ROWS)
    if units >= 2 and 2.0 * m * n * k >= _LINEAR_SPLIT_FLOPS and config.num_threads >= 2:
        _shared_by_two(_linear_rows, units, x2, weight.T, bias, out2, epilogue)
    else:
        # One product on BLAS's own threads: for a transformer at batch 1 (128 rows)
        # they beat sharing the columns with the helper thread (MiniLM: 26 vs 31 ms).
        # On this thread alone while other tasks have the other cores. BLAS reads
        # the transposed weight in place.
        if m * n * k > _BLAS_ONE_THREAD:
            _one_product(x2, weight.T, out2)
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
    """Units of _LINEAR_ROWS rows of :func:`linear_into`'s product (``single``,
    whether BLAS was held to one thread, is not needed)."""
    m = x2.shape[0]
    for unit in units:
        start, stop = unit * _LINEAR_ROWS, min(m, (unit + 1) * _LINEAR_ROWS)
        rows = out2[start:stop]
        _blas.matmul(x2[start:stop], wt, rows)
        if bias is not None:
            rows += bias
        if epilogue is not None:
            epilogue(start, stop)


def _pooled_linear_for(
    m: int, n: int, k: int, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, out: np.ndarray
) -> _pooled_linear.PooledLinear | None:
    """An eager call's :class:`~._pooled_linear.PooledLinear` for its shape
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
        pooled = _pooled_linear.pooled_linear(_pooled_linear.linear_on_pool, m, n, k, dtype)
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
    pooled = _pooled_linear.pooled_linear(_pooled_linear.linear_on_pool, m, n, k, x.dtype)
    if len(inputs) == 3:
        return lambda x, w, b, out, epilogue=None: linear_into(x, w, b, out, epilogue, pooled)
    return lambda x, w, out, epilogue=None: linear_into(x, w, None, out, epilogue, pooled)


def _linear_kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    out = np.empty((*x.shape[:-1], weight.shape[0]), np.result_type(x, weight))
    linear_into(x, weight, bias, out)
    return out


linear = define_op(
    "linear",
    _linear_rule,
    cost=lambda shape, dtype, x, w, *b: _flop_cost(2.0 * math.prod(shape) * w.shape[1], 0.0),
    weak_scalars=False,
    doc="""``input @ weight.T + bias`` with PyTorch's (out_features, in_features)
    weight, as ``torch.nn.functional.linear`` (the bias is optional).

    >>> import eagerrt as ert
    >>> ert.linear(ert.ones((2, 3)), ert.ones((4, 3)), ert.ones(4)).numpy()
    array([[4., 4., 4., 4.],
           [4., 4., 4., 4.]])
    """,
)
linear.register_kernel(GENERIC, _linear_kernel)


def _embedding_rule(input: Any, weight: Any, padding_idx: int | None = None) -> RuleOut:
    if input.dtype.kind not in "iu":
        raise TypeError(f"embedding indices must be integers, got {input.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"embedding needs a 2-d (num_embeddings, dim) table, got {weight.shape}")
    if padding_idx is not None:
        num = weight.shape[0]
        if not -num <= padding_idx < num:
            raise ArgumentError(f"padding_idx {padding_idx} is out of range for {num} embeddings")
    return (*input.shape, weight.shape[1]), weight.dtype


def _embedding_kernel(
    indices: np.ndarray, weight: np.ndarray, padding_idx: int | None = None
) -> np.ndarray:
    num = weight.shape[0]
    if indices.size:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= num:
            bad = lo if lo < 0 else hi
            raise IndexError(f"embedding index {bad} is out of range for a table of {num} rows")
    # padding_idx only changes gradients (that row gets none): the lookup ignores it.
    return np.take(weight, indices, axis=0)


embedding = define_op(
    "embedding",
    _embedding_rule,
    cost=lambda shape, dtype, *args, **_: _flop_cost(0.0, 2.0 * math.prod(shape)),
    operands=2,
    doc="""Rows of ``weight`` picked by integer ``input``, as
    ``torch.nn.functional.embedding``; an index out of range fails on await.

    >>> import eagerrt as ert
    >>> table = ert.asarray([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    >>> ert.embedding(ert.asarray([2, 0]), table).numpy()
    array([[2., 2.],
           [0., 0.]])
    """,
)
embedding.register_kernel(GENERIC, _embedding_kernel)


# -- activations -------------------------------------------------------------------------------
def _softmax_rule(x: Any, axis: int = -1) -> RuleOut:
    if type(x) is not Tensor:
        raise TypeError("softmax needs a tensor")
    normalize_axis(axis, x.ndim)
    return x.shape, ufunc_dtype(np.exp, x)


def _softmax_numpy(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    if log:
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    e = np.exp(shifted)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _log_softmax_last(x: np.ndarray, log: bool) -> np.ndarray:
    """(Log-)softmax over the last axis: the fused numba pass for floats."""
    if x.dtype in _FLOATS and x.shape[-1] >= 16 and x.size:
        from ._numba_kernels import softmax_last_axis

        return softmax_last_axis(x, log)
    return _softmax_numpy(x, -1, log)


def _softmax_kernels(log: bool) -> tuple[Any, Any]:
    def generic(x: Any, axis: int = -1) -> np.ndarray:
        return _softmax_numpy(as_float(x), axis, log)

    def cpu(x: Any, axis: int = -1) -> np.ndarray:
        x = as_float(x)
        if x.ndim >= 1 and normalize_axis(axis, x.ndim) == x.ndim - 1:
            return _log_softmax_last(x, log)
        return _softmax_numpy(x, axis, log)

    return generic, cpu


softmax = define_op(
    "softmax",
    _softmax_rule,
    cost=scaled_cost(6),
    operands=1,
    doc="``exp(x) / sum(exp(x))`` along ``axis``.",
)
log_softmax = define_op(
    "log_softmax",
    _softmax_rule,
    cost=scaled_cost(6),
    operands=1,
    doc="``log(softmax(x))``, computed stably.",
)
for _op, _log in ((softmax, False), (log_softmax, True)):
    _generic, _cpu = _softmax_kernels(_log)
    _op.register_kernel(GENERIC, _generic)
    _op.register_kernel("cpu", _cpu)  # the fused numba pass overrides the generic kernel


def _real_float_rule(what: str, x: Any) -> RuleOut:
    """Shape kept; ints become float64 as in numpy's exp; complex refused."""
    if type(x) is not Tensor:
        raise TypeError(f"{what} needs a tensor, not {type(x).__name__}")
    dtype = ufunc_dtype(np.exp, x)
    if dtype.kind != "f":
        raise TypeError(f"{what} is defined for real numbers, not {x.dtype}")
    return x.shape, dtype


silu = define_op(
    "silu",
    lambda x: _real_float_rule("silu", x),
    cost=scaled_cost(10),
    operands=1,
    doc="""SiLU (swish) ``x * sigmoid(x)``, as ``torch.nn.functional.silu``.

    >>> import eagerrt as ert
    >>> ert.silu(ert.asarray([0.0, 1.0])).numpy().round(4)
    array([0.    , 0.7311])
    """,
)


@silu.kernel()
def _silu(x: Any) -> Any:
    x = as_float(x)
    # sigmoid as (1 + tanh(x/2)) / 2: no overflow in exp for large |x|.
    out = np.tanh(x * 0.5)
    out += 1
    out *= 0.5
    out *= x
    return out


def _softplus_rule(x: Any, beta: float = 1.0, threshold: float = 20.0) -> RuleOut:
    for name, value in (("beta", beta), ("threshold", threshold)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, got {value!r}")
    if beta == 0:
        raise ArgumentError("beta must be nonzero")
    return _real_float_rule("softplus", x)


softplus = define_op(
    "softplus",
    _softplus_rule,
    cost=scaled_cost(10),
    operands=1,
    doc="""``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``,
    as ``torch.nn.functional.softplus``.

    >>> import eagerrt as ert
    >>> ert.softplus(ert.asarray([0.0, 30.0])).numpy().round(4)
    array([ 0.6931, 30.    ])
    """,
)


@softplus.kernel()
def _softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    x = as_float(x)
    scaled = x * x.dtype.type(beta)
    # exp of the clipped value: the linear branch is chosen there anyway, and
    # no overflow warning is raised for it.
    soft = np.log1p(np.exp(np.minimum(scaled, threshold)))
    soft /= x.dtype.type(beta)
    return np.where(scaled > threshold, x, soft)


# -- attention -------------------------------------------------------------------------------
class _Attention(NamedTuple):
    batch: Shape
    length: int
    source: int
    embed: int
    value_embed: int
    kv_repeat: int  # grouped-query attention: each key/value head serves this many


def _attention_geometry(
    q: Any, k: Any, v: Any, mask: Any, is_causal: bool, enable_gqa: bool
) -> _Attention:
    dtype = _float_dtype("scaled_dot_product_attention", q, k, v)
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., L, E), got {t.shape}")
    length, embed = q.shape[-2:]
    source, key_embed = k.shape[-2:]
    if key_embed != embed:
        raise ValueError(f"query {q.shape} and key {k.shape} differ in their last dimension")
    if v.shape[-2] != source:
        raise ValueError(f"key {k.shape} and value {v.shape} differ in sequence length")
    kb, vb = k.shape[:-2], v.shape[:-2]
    repeat = 1
    if enable_gqa and q.ndim >= 3 and k.ndim >= 3 and v.ndim >= 3:
        heads, kv_heads = q.shape[-3], k.shape[-3]
        if kv_heads != v.shape[-3] or heads % kv_heads:
            raise ValueError(
                f"enable_gqa needs key/value heads ({kv_heads}, {v.shape[-3]}) equal and "
                f"dividing the query heads ({heads})"
            )
        repeat = heads // kv_heads
        kb, vb = (*kb[:-1], heads), (*vb[:-1], heads)
    try:
        batch = tuple(np.broadcast_shapes(q.shape[:-2], kb, vb))
    except ValueError:
        raise ValueError(
            f"batch dimensions of query {q.shape}, key {k.shape} and value {v.shape} "
            "do not broadcast"
        ) from None
    if mask is not None:
        if is_causal:
            raise ArgumentError("give either attn_mask or is_causal=True, not both")
        if mask.dtype != np.bool_ and mask.dtype != dtype:
            raise TypeError(
                f"attn_mask must be bool or {dtype} (the query's dtype), got {mask.dtype}"
            )
        scores = (*batch, length, source)
        try:
            if np.broadcast_shapes(mask.shape, scores) != scores:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"attn_mask {mask.shape} does not broadcast to the scores' shape "
                f"{(*batch, length, source)}"
            ) from None
    return _Attention(batch, length, source, embed, v.shape[-1], repeat)


def _sdpa_rule(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> RuleOut:
    geo = _attention_geometry(query, key, value, attn_mask, is_causal, enable_gqa)
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating))
    ):
        raise TypeError(f"scale must be a number or None, got {scale!r}")
    return (*geo.batch, geo.length, geo.value_embed), query.dtype


def _sdpa_cost(
    shape: Shape, dtype: np.dtype[Any], /, q: Tensor, k: Tensor, v: Tensor, *m: Any, **_: Any
) -> float:
    scores = math.prod(shape[:-1]) * k.shape[-2]
    return _flop_cost(2.0 * scores * (q.shape[-1] + v.shape[-1]), 4.0 * scores)


#: Scores per block of (batch, head) pairs: float32 blocks of about 1 MB, so a
#: block stays in cache from its first matmul through softmax to the second;
#: measured 5% faster than 512 KB for 96 heads of 128x128 on two threads (each
#: block's Python steps between native calls contend for the GIL).
_SCORE_BLOCK = 1 << 18

#: OpenBLAS runs a matrix product of up to about this many m*n*k on the calling
#: thread (measured here: no pool thread ran for 64x64x128 or 64x576x16;
#: its source's floor is 4 * 65536); above it, every call wakes its thread pool. Attention's products are
#: small (128x64x128 per head): pool wake-ups cost more than they save, and on
#: a busy machine a preempted pool thread stalls the call (measured 1.6 ms on
#: one thread vs 2.4 ms quiet / 11 ms busy through the pool, for 96 heads).
_BLAS_ONE_THREAD = 1 << 19

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
    from ._numba_nn import gather_heads

    assert scratch is not None
    out = scratch[: c1 - c0]
    gather_heads(x.view, c0, out)
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
    return _work_array(slot, (step, *x.view.shape[-2:]), x.view.dtype)


_work_arrays = threading.local()

#: Work arrays up to this many bytes are kept per thread between calls.
_KEPT_WORK_BYTES = 1 << 22


def _work_array(slot: str, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """An uninitialized array of ``shape``: this thread's kept one for ``slot``
    where it is small enough. Attention runs every layer of a transformer with
    the same work arrays; fresh ones are fresh pages, faulted in and cold in
    cache each call (measured MiniLM at batch 1: 550 against 620-730 us an
    attention in the model). Each slot holds one array per thread, and a
    kernel takes each slot once, so no two live users share one."""
    size = math.prod(shape) * dtype.itemsize
    if size > _KEPT_WORK_BYTES:
        return np.empty(shape, dtype)
    kept: dict[str, tuple[np.ndarray, dict[Any, np.ndarray]]] | None = getattr(
        _work_arrays, "kept", None
    )
    if kept is None:
        kept = _work_arrays.kept = {}
    entry = kept.get(slot)
    if entry is None or entry[0].nbytes < size:
        entry = kept[slot] = (np.empty(size, np.uint8), {})
    # The views made of it, by shape: a kernel run again gets its view back
    # without making one (Python between kernels is slow: see _PooledConv).
    buffer, views = entry
    view = views.get((shape, dtype))
    if view is None:
        if len(views) >= _KEPT_VIEWS:
            views.clear()
        view = views[shape, dtype] = buffer[:size].view(dtype).reshape(shape)
    return view


#: Views of a work array kept for reuse, at most (attention's change with the length).
_KEPT_VIEWS = 32


def _view(a: np.ndarray, shape: Shape) -> np.ndarray:
    """``a`` reshaped without a copy (raises if that is impossible: an ``out=``
    must be the real memory)."""
    v = _blas.view_without_copy(a, shape)
    if v is None:
        raise AttributeError(f"an array of shape {a.shape} has no view of shape {shape}")
    return v


def _one_thread_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = a @ b`` for (B, m, k) @ (B, k, n), in row chunks small enough
    that OpenBLAS computes each product on this thread (see _BLAS_ONE_THREAD)."""
    batch, m, k = a.shape
    n = b.shape[2]
    rows = max(1, _BLAS_ONE_THREAD // (k * n))
    if rows >= m:
        np.matmul(a, b, out=out)
        return
    full = m - m % rows
    # (B, chunks, rows, k) @ (B, 1, k, n): numpy loops over the chunks in C.
    np.matmul(
        _view(a[:, :full], (batch, full // rows, rows, k)),
        b[:, None],
        out=_view(out[:, :full], (batch, full // rows, rows, n)),
    )
    if full < m:
        np.matmul(a[:, full:], b, out=out[:, full:])


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
    most _BLAS_ONE_THREAD m*n*k, which keeps them on this thread even where
    BLAS can't be told so, and measured faster than whole heads (3.1-3.5 vs
    3.7-5.1 ms here) even where it can. ``single`` (whether BLAS was told) is
    not needed."""
    from ._numba_nn import attention_softmax, mask_keys, transpose_scaled

    n, length = out.shape[:2]
    source, embed = (kb.view if isinstance(kb, _Heads) else kb).shape[-2:]
    dtype = out.dtype
    block = min(n, step)
    scores = _work_array("attention scores", (block, length, source), dtype)
    keys = _work_array("attention keys", (block, embed, source), dtype)
    buffers = [_scratch(x, block, f"attention {i}") for i, x in enumerate((qb, kb, vb))]
    neg_inf = dtype.type(-np.inf)
    for unit in units:
        c0, c1 = unit * step, min(n, (unit + 1) * step)
        s, kt = scores[: c1 - c0], keys[: c1 - c0]
        transpose_scaled(_block(kb, c0, c1, buffers[1]), kt, scale)
        _one_thread_matmul(_block(qb, c0, c1, buffers[0]), kt, s)
        if isinstance(masks, _KeyMask):
            mask_keys(s, masks.masked, c0, masks.heads)
        elif masks is not None:
            if masks.dtype == np.bool_:  # masks holds True where attention is masked out
                np.copyto(s, neg_inf, where=masks[c0:c1])
            else:
                s += masks[c0:c1]
        attention_softmax(s, is_causal)
        _one_thread_matmul(s, _block(vb, c0, c1, buffers[2]), out[c0:c1])


#: attention_heads's ``masked`` where no key is masked out (no rows).
_NO_KEY_MASKED = np.zeros((0, 0), np.bool_)


def _as_4d(x: np.ndarray, lead: Shape, shape: Shape) -> np.ndarray:
    """``x`` with ``lead`` ones before its shape, broadcast to ``shape`` (itself
    where it already has that shape: the common case, without numpy's calls)."""
    if x.shape == shape:
        return x
    return np.broadcast_to(x.reshape(*lead, *x.shape) if lead else x, shape)


class _PoolAttention:
    """Attention by :func:`_numba_nn.attention_heads` for one geometry and
    dtype, its (batch, head) pairs shared with MKL's oneTBB workers, reading
    q, k and v where they lie and writing into ``into`` where it lies. What
    hangs on shapes and dtypes alone is checked once (:func:`_pool_attention`);
    a call checks what the arrays bring: the mask's values, layouts BLAS can't
    step through, overlapping memory. Graph mode makes one per attention when
    its plan is made (:func:`sdpa_out_form`): Python between kernels is slow
    (see :class:`_PooledConv`)."""

    def __init__(self, g: _Attention, dtype: np.dtype[Any], scale: float, is_causal: bool) -> None:
        from . import _shared_pool
        from ._numba_nn import attention_heads

        address = _blas.gemm_address(dtype)
        assert address is not None  # _pool_attention checked
        self.address = address
        self.kernel = attention_heads
        self.claim_threads = _shared_pool.claim_threads
        self.threads = _shared_pool.pool_threads()
        self.g, self.dtype, self.is_causal = g, dtype, is_causal
        self.scale = dtype.type(scale)
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
        if not all(map(_blas.reads_rows_in_place, (q4, k4, v4, out4))) or not out4.flags.writeable:
            return None
        if any(np.may_share_memory(out4, x) for x in (q4, k4, v4)):
            return None
        if not self.claim_threads(_cores_taken(), self.threads):
            return None
        self.kernel(self.address, q4, k4, v4, out4, self.scale, self.g.kv_repeat, masked,
                    self.is_causal)  # fmt: skip
        return out


def _pool_attention(
    g: _Attention, dtypes: tuple[np.dtype[Any], ...], scale: float, is_causal: bool
) -> _PoolAttention | None:
    """A :class:`_PoolAttention` for this geometry and q, k and v's ``dtypes``,
    or None where it can't run: no shared pool (:func:`_shared_pool.ready`),
    more than two batch axes, other dtypes than one of float32 and float64,
    sizes past MKL's 32-bit ints."""
    from . import _shared_pool

    dtype = dtypes[0]
    if len(g.batch) > 2 or dtype not in (np.float32, np.float64) or len(set(dtypes)) != 1:
        return None
    if g.length * g.source == 0 or max(g.length, g.source, g.embed, g.value_embed) >= 1 << 31:
        return None
    if not _shared_pool.ready() or _blas.gemm_address(dtype) is None:
        return None
    return _PoolAttention(g, dtype, scale, is_causal)


def _attention_on_pool(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    into: np.ndarray | None,
    is_causal: bool,
    scale: float,
    g: _Attention,
) -> np.ndarray | None:
    """An eager call's attention by :class:`_PoolAttention`; None (nothing done)
    where it does not cover the call."""
    pool = _pool_attention(g, (q.dtype, k.dtype, v.dtype), scale, is_causal)
    return None if pool is None else pool(q, k, v, mask, into)


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
    g = _attention_geometry(q, k, v, mask, is_causal, enable_gqa)
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
    g = _attention_geometry(q, k, v, mask, is_causal, enable_gqa)
    scale = 1.0 / math.sqrt(g.embed) if scale is None else float(scale)
    done = _attention_on_pool(q, k, v, mask, into, is_causal, scale, g)
    if done is not None:
        return done
    qb = _as_batch(q, g.batch, 1)
    kb = _as_batch(k, g.batch, g.kv_repeat)
    vb = _as_batch(v, g.batch, g.kv_repeat)
    n = math.prod(g.batch)
    shape = (n, g.length, g.value_embed)
    direct = into is not None and into.flags.c_contiguous and into.dtype == q.dtype
    out = _view(into, shape) if direct else np.empty(shape, q.dtype)  # type: ignore[arg-type]
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
        masks = np.broadcast_to(mask, (*g.batch, g.length, g.source))
        masks = masks.reshape(n, g.length, g.source)
    # Pairs a block: _SCORE_BLOCK scores, but two blocks at least.
    step = max(1, min(_SCORE_BLOCK // max(1, g.length * g.source), -(-n // 2)))
    blocks = -(-n // step)
    args = (qb, kb, vb, masks, out, scale, is_causal, step)
    flops = 2.0 * n * g.length * g.source * (g.embed + g.value_embed)
    if blocks >= 2 and flops >= _ATTENTION_SPLIT_FLOPS and config.num_threads >= 2:
        # Heads are independent: blocks shared by a helper thread and this one
        # (BLAS on one thread each, numba's softmax releases the GIL).
        _shared_by_two(_attend, blocks, *args)
    else:
        _one_blas_thread(_attend, *args, range(blocks))
    result = out.reshape(*g.batch, g.length, g.value_embed)
    if into is None or direct:
        return result
    into[...] = result
    return into


_sdpa = define_op(
    "scaled_dot_product_attention",
    _sdpa_rule,
    cost=_sdpa_cost,
    weak_scalars=False,
    doc="Attention ``softmax(q @ k^T * scale + mask) @ v``, as PyTorch's.",
)
_sdpa.register_kernel(GENERIC, _sdpa_kernel)


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` over (..., L, E),
    (..., S, E) and (..., S, Ev) tensors, as
    ``torch.nn.functional.scaled_dot_product_attention``.

    ``attn_mask`` is boolean (True: may attend) or float (added to the scores)
    and broadcasts to (..., L, S); ``is_causal`` masks keys after each query's
    position; ``scale`` defaults to ``1/sqrt(E)``. Queries that may attend to
    nothing give zeros, as in PyTorch. ``dropout_p`` must be 0 (inference).

    >>> import eagerrt as ert
    >>> q = ert.ones((2, 4, 3, 8))
    >>> v = ert.arange(24.0).reshape(1, 1, 3, 8)
    >>> out = ert.scaled_dot_product_attention(q, q, v, is_causal=True)
    >>> out.shape, out.numpy()[0, 0, :, 0]
    ((2, 4, 3, 8), array([0., 4., 8.]))
    """
    if dropout_p != 0:
        raise call_error(
            ArgumentError,
            "scaled_dot_product_attention",
            (query, key, value),
            {"dropout_p": dropout_p},
            "runs inference only: dropout_p must be 0",
        )
    return _sdpa(
        query, key, value, *_present(attn_mask),
        is_causal=bool(is_causal), scale=scale, enable_gqa=bool(enable_gqa),
    )  # fmt: skip


# -- pad and interpolate ------------------------------------------------------------------------
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad_widths(x: Any, pad: Any, mode: str) -> list[tuple[int, int]]:
    """PyTorch's pad tuple (last dimension first) as numpy's per-axis widths."""
    if mode not in _PAD_MODES:
        raise ArgumentError(f"mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
    try:
        flat = [operator.index(p) for p in pad]
    except TypeError:
        raise TypeError(f"pad must be a sequence of ints, got {pad!r}") from None
    if len(flat) % 2 or len(flat) // 2 > x.ndim:
        raise ArgumentError(
            f"pad needs an even number of values, at most 2 per dimension "
            f"({2 * x.ndim} for this {x.ndim}-d input), got {len(flat)}"
        )
    widths = [(0, 0)] * x.ndim
    for i in range(len(flat) // 2):
        widths[x.ndim - 1 - i] = (flat[2 * i], flat[2 * i + 1])
    for axis, (before, after) in enumerate(widths):
        size = x.shape[axis]
        if mode == "constant":
            if size + before + after < 0:
                raise ValueError(
                    f"pad {(before, after)} leaves dimension {axis} of size {size} negative"
                )
            continue
        if before < 0 or after < 0:
            raise ArgumentError(f"negative padding is only allowed in constant mode, got {pad!r}")
        if mode == "reflect" and max(before, after) >= size and (before or after):
            raise ValueError(
                f"reflect padding {(before, after)} must be smaller than dimension {axis} ({size})"
            )
        if mode == "circular" and max(before, after) > size:
            raise ValueError(
                f"circular padding {(before, after)} must be at most dimension {axis} ({size})"
            )
        if mode == "replicate" and size == 0 and (before or after):
            raise ValueError(f"can't replicate-pad the empty dimension {axis}")
    return widths


def _pad_rule(input: Any, pad: Any = (), mode: str = "constant", value: Any = None) -> RuleOut:
    if value is not None and mode != "constant":
        raise ArgumentError(f"mode {mode!r} takes no value (only 'constant' does)")
    widths = _pad_widths(input, pad, mode)
    shape = tuple(d + a + b for d, (a, b) in zip(input.shape, widths, strict=True))
    return shape, input.dtype


def _pad_kernel(
    x: np.ndarray, pad: Any = (), mode: str = "constant", value: Any = None
) -> np.ndarray:
    widths = _pad_widths(x, pad, mode)
    if any(a < 0 or b < 0 for a, b in widths):  # negative padding crops first
        x = x[tuple(slice(max(-a, 0), x.shape[i] - max(-b, 0)) for i, (a, b) in enumerate(widths))]
        widths = [(max(a, 0), max(b, 0)) for a, b in widths]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=0 if value is None else value)
    return np.pad(x, widths, mode=_PAD_MODES[mode])  # type: ignore[call-overload]


pad = define_op(
    "pad",
    _pad_rule,
    cost=lambda shape, dtype, *args, **_: _flop_cost(0.0, 2.0 * math.prod(shape)),
    operands=1,
    doc="""Pad with PyTorch's convention: ``pad`` lists (before, after) pairs from
    the last dimension backwards; modes 'constant' (``value``, negative pads
    crop), 'reflect', 'replicate' and 'circular', as ``torch.nn.functional.pad``.

    >>> import eagerrt as ert
    >>> ert.pad(ert.asarray([[1, 2, 3]]), (2, 1), mode="reflect").numpy()
    array([[3, 2, 1, 2, 3, 2]])
    >>> ert.pad(ert.ones((1, 2)), (0, 0, 1, 0), value=5.0).numpy()
    array([[5., 5.],
           [1., 1.]])
    """,
)
pad.register_kernel(GENERIC, _pad_kernel)

_INTERP_MODES = ("nearest", "nearest-exact", "bilinear")


class _Resize(NamedTuple):
    size: tuple[int, int]
    scales: tuple[float | None, float | None]  # 1 / scale_factor where it sets the mapping


def _resize_geometry(
    x: Any,
    size: Any,
    scale_factor: Any,
    mode: str,
    align_corners: bool | None,
    recompute_scale_factor: bool | None,
) -> _Resize:
    if mode not in _INTERP_MODES:
        raise ArgumentError(f"mode must be one of {_INTERP_MODES}, got {mode!r}")
    if x.ndim != 4:
        raise ValueError(f"interpolate needs a 4-d (N, C, H, W) input, got {x.shape}")
    _float_dtype("interpolate", x)
    if align_corners is not None and mode != "bilinear":
        raise ArgumentError("align_corners can only be set with the interpolating mode 'bilinear'")
    if (size is None) == (scale_factor is None):
        raise ArgumentError("give exactly one of size and scale_factor")
    h, w = x.shape[-2:]
    if size is not None:
        out = _ints(size, 2, "size", 1)
        return _Resize((out[0], out[1]), (None, None))
    if isinstance(scale_factor, (int, float, np.integer, np.floating)):
        factors = (float(scale_factor), float(scale_factor))
    else:
        factors = tuple(float(f) for f in scale_factor)  # type: ignore[assignment]
        if len(factors) != 2:
            raise ArgumentError(f"scale_factor must be a number or a pair, got {scale_factor!r}")
    if min(factors) <= 0:
        raise ArgumentError(f"scale_factor must be positive, got {scale_factor!r}")
    oh, ow = math.floor(h * factors[0]), math.floor(w * factors[1])
    if oh < 1 or ow < 1:
        raise ValueError(f"scale_factor {scale_factor!r} leaves an empty output ({oh}x{ow})")
    # PyTorch maps coordinates with the given factor unless asked to recompute it.
    if recompute_scale_factor:
        return _Resize((oh, ow), (None, None))
    return _Resize((oh, ow), (1.0 / factors[0], 1.0 / factors[1]))


def _interpolate_rule(
    input: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> RuleOut:
    geo = _resize_geometry(input, size, scale_factor, mode, align_corners, recompute_scale_factor)
    return (*input.shape[:2], *geo.size), input.dtype


def _nearest_index(n_in: int, n_out: int, scale: float | None, exact: bool) -> np.ndarray:
    # PyTorch computes these in float32: do the same so rounding picks the same pixel.
    s = np.float32(n_in / n_out if scale is None else scale)
    pos = np.arange(n_out, dtype=np.float32)
    if exact:
        pos += np.float32(0.5)
    return np.minimum(np.floor(pos * s).astype(np.intp), n_in - 1)


def _linear_weights(
    n_in: int, n_out: int, scale: float | None, align_corners: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices (i0, i1) and the weight of i1 for each output position."""
    pos = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = pos * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        s = n_in / n_out if scale is None else scale
        src = np.maximum((pos + 0.5) * s - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.intp), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = np.clip(src - i0, 0.0, 1.0)
    return i0, i1, lam


def _interpolate_kernel(
    x: np.ndarray,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
) -> np.ndarray:
    g = _resize_geometry(x, size, scale_factor, mode, align_corners, recompute_scale_factor)
    h, w = x.shape[-2:]
    (oh, ow), (sh, sw) = g.size, g.scales
    if mode != "bilinear":
        exact = mode == "nearest-exact"
        rows = _nearest_index(h, oh, sh, exact)
        cols = _nearest_index(w, ow, sw, exact)
        return x[:, :, rows[:, None], cols[None, :]]
    # Separable: blend rows, then columns.
    r0, r1, rl = _linear_weights(h, oh, sh, bool(align_corners))
    c0, c1, cl = _linear_weights(w, ow, sw, bool(align_corners))
    rl = rl.astype(x.dtype)[:, None]
    cl = cl.astype(x.dtype)
    top, bottom = x[:, :, r0, :], x[:, :, r1, :]
    tall = top + (bottom - top) * rl
    left, right = tall[..., c0], tall[..., c1]
    return left + (right - left) * cl


interpolate = define_op(
    "interpolate",
    _interpolate_rule,
    cost=lambda shape, dtype, x, **_: _flop_cost(0.0, 6.0 * math.prod(shape)),
    operands=1,
    doc="""Resize an (N, C, H, W) input to ``size`` or by ``scale_factor`` with
    mode 'nearest', 'nearest-exact' or 'bilinear' (``align_corners``), as
    ``torch.nn.functional.interpolate``.

    >>> import eagerrt as ert
    >>> x = ert.asarray([[[[0.0, 1.0]]]])
    >>> ert.interpolate(x, scale_factor=2, mode="nearest").numpy()[0, 0, 0]
    array([0., 0., 1., 1.])
    >>> ert.interpolate(x, size=(1, 3), mode="bilinear", align_corners=True).numpy()[0, 0, 0]
    array([0. , 0.5, 1. ])
    """,
)
interpolate.register_kernel(GENERIC, _interpolate_kernel)


# -- one_hot and cross_entropy ------------------------------------------------------------------
def _one_hot_rule(input: Any, num_classes: int = -1) -> RuleOut:
    if input.dtype.kind not in "iu":
        raise TypeError(f"one_hot needs integer class indices, got {input.dtype}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)):
        raise TypeError(f"num_classes must be an int, got {num_classes!r}")
    if num_classes == -1:
        # PyTorch's default reads the data (max + 1); here shapes are known at the call.
        raise ArgumentError(
            "one_hot needs num_classes: the result's shape must be known at the call, "
            "before the indices are computed"
        )
    if num_classes < 0:
        raise ArgumentError(f"num_classes must be >= 0, got {num_classes}")
    return (*input.shape, int(num_classes)), _INT64


def _one_hot_kernel(indices: np.ndarray, num_classes: int = -1) -> np.ndarray:
    if indices.size:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= num_classes:
            bad = lo if lo < 0 else hi
            raise IndexError(f"class value {bad} is out of range for num_classes={num_classes}")
    return (indices[..., None] == np.arange(num_classes)).astype(np.int64)


one_hot = define_op(
    "one_hot",
    _one_hot_rule,
    cost=lambda shape, dtype, *args, **_: _flop_cost(0.0, math.prod(shape)),
    operands=1,
    doc="""int64 one-hot rows for integer class indices, as
    ``torch.nn.functional.one_hot`` (``num_classes`` is required here).

    >>> import eagerrt as ert
    >>> ert.one_hot(ert.asarray([0, 2]), 3).numpy()
    array([[1, 0, 0],
           [0, 0, 1]])
    """,
)
one_hot.register_kernel(GENERIC, _one_hot_kernel)

_REDUCTIONS = ("mean", "sum", "none")


def _cross_entropy_rule(
    input: Any,
    target: Any,
    *weight: Any,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> RuleOut:
    if len(weight) > 1:
        raise ValueError("cross_entropy takes at most one class weight tensor")
    w = weight[0] if weight else None
    _float_dtype("cross_entropy", input, w)
    if input.ndim < 1:
        raise ValueError("cross_entropy needs (C,), (N, C) or (N, C, d...) logits, got a scalar")
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    class_axis = 1 if input.ndim >= 2 else 0
    classes = input.shape[class_axis]
    _check_shape("weight", w, (classes,))
    rest = input.shape[:class_axis] + input.shape[class_axis + 1 :]
    if target.dtype.kind in "iu":
        if target.shape != rest:
            raise ValueError(
                f"class-index target must have shape {rest} for logits {input.shape}, "
                f"got {target.shape}"
            )
    elif target.dtype.kind == "f":
        if target.dtype != input.dtype:
            raise TypeError(f"probability target must be {input.dtype}, got {target.dtype}")
        if target.shape != input.shape:
            raise ValueError(
                f"probability target must have the logits' shape {input.shape}, got {target.shape}"
            )
    else:
        raise TypeError(
            f"target must hold class indices (ints) or probabilities, not {target.dtype}"
        )
    return (rest if reduction == "none" else ()), input.dtype


def _cross_entropy_kernel(
    x: np.ndarray,
    target: np.ndarray,
    *weight: np.ndarray,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> np.ndarray:
    w = weight[0] if weight else None
    class_axis = 1 if x.ndim >= 2 else 0
    classes = x.shape[class_axis]
    logp = _log_softmax_last(np.ascontiguousarray(np.moveaxis(x, class_axis, -1)), True)
    ls = float(label_smoothing)
    with np.errstate(invalid="ignore", divide="ignore"):  # all targets ignored: nan, as PyTorch
        if target.dtype.kind == "f":
            probs = np.moveaxis(target, class_axis, -1)
            if ls:
                probs = probs * (1 - ls) + ls / classes
            terms = logp * probs if w is None else logp * probs * w
            loss = -terms.sum(axis=-1)
            if reduction == "mean":
                return np.asarray(loss.sum() / max(loss.size, 1) if loss.size else np.nan, x.dtype)
            return np.asarray(loss.sum() if reduction == "sum" else loss, x.dtype)
        valid = target != ignore_index
        picked_class = np.where(valid, target, 0)
        bad = (picked_class < 0) | (picked_class >= classes)
        if bad.any():
            raise IndexError(
                f"target {int(picked_class[bad].flat[0])} is out of range for {classes} classes"
            )
        picked = np.take_along_axis(logp, picked_class[..., None], axis=-1)[..., 0]
        wt = valid.astype(x.dtype) if w is None else np.where(valid, w[picked_class], 0)
        loss = -picked * wt
        if ls:
            smooth = -(logp.sum(axis=-1) if w is None else (logp * w).sum(axis=-1))
            loss = (1 - ls) * loss + (ls / classes) * np.where(valid, smooth, 0)
        if reduction == "none":
            return np.asarray(loss, x.dtype)
        total = loss.sum()
        if reduction == "mean":
            total = total / wt.sum()
        return np.asarray(total, x.dtype)


_cross_entropy = define_op(
    "cross_entropy",
    _cross_entropy_rule,
    cost=lambda shape, dtype, x, *rest, **_: _flop_cost(0.0, 8.0 * x.size),
    weak_scalars=False,
    doc="Cross-entropy of logits against class indices or class probabilities.",
)
_cross_entropy.register_kernel(GENERIC, _cross_entropy_kernel)


def cross_entropy(
    input: Any,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of (C,), (N, C) or (N, C, d...) logits against integer class
    indices (or class probabilities of the logits' shape), as
    ``torch.nn.functional.cross_entropy``: optional class ``weight``,
    ``ignore_index``, ``reduction`` 'mean' / 'sum' / 'none', ``label_smoothing``.
    A class index out of range fails on await.

    >>> import eagerrt as ert
    >>> logits = ert.asarray([[0.0, 0.0], [0.0, 0.0]])
    >>> round(ert.cross_entropy(logits, ert.asarray([0, 1])).item(), 4)
    0.6931
    >>> ert.cross_entropy(logits, ert.asarray([0, -100]), reduction="none").numpy().round(4)
    array([0.6931, 0.    ])
    """
    return _cross_entropy(
        input, target, *_present(weight),
        ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
    )  # fmt: skip


#: The ops behind the functions above, by name (``get_op`` finds them too).
NN_OPS: dict[str, Op] = {
    op.name: op
    for op in (
        _conv2d, _conv_transpose2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d,
        _batch_norm, _layer_norm, _group_norm, linear, embedding, softmax, log_softmax,
        silu, softplus, _sdpa, pad, interpolate, one_hot, _cross_entropy,
    )
}  # fmt: skip

# Doctests of the ops defined directly (their docs live on Op objects, which
# doctest's finder does not visit by itself).
__test__ = {name: op.__doc__ for name, op in NN_OPS.items() if op.__doc__ and ">>>" in op.__doc__}
