"""The CPU backend's thread policy: which kernel splits its work over two
threads, when BLAS is held to one, the helper thread, and per-thread work arrays."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..._core import config, renew_after_fork
from ...devices.cpu import cpu
from ...ops.nn.common import Shape
from . import blas

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
_blas_single_holders = 0  # threads inside one_blas_thread


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


def one_blas_thread(work: Any, *args: Any) -> Any:
    """``work(*args, single)`` with BLAS on one thread where that can be set
    (``single`` says whether it was).

    Kernels split over two threads (:func:`shared_by_two`) and small
    convolutions run their products here: OpenBLAS's pool threads spin for a
    while after each product, so a network that mixed pool products for its
    small convolutions with helper-thread splits for its big ones ran three busy
    threads on two cores (measured ResNet-18 at batch 1: 19 vs 13 ms; a step's
    own kernels up to 10 times slower while a pool thread spun beside them).
    Work that is one big product is left to the pool (:func:`on_blas_threads`).

    numpy's bundled OpenBLAS applies the "thread-local" count to the whole process
    (measured: a count set on one thread holds on the others), so two threads
    that each saved and restored the count could interleave and leave it at 1
    for good: every later product on one core (MiniLM at batch 1: 40 vs 27 ms).
    The count is therefore held at 1 while any thread is in here, and the
    default restored by the last one out."""
    global _blas_single_holders
    mkl_saved = blas.hold_to_one_thread()  # MKL's count is per thread: no bookkeeping
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
        blas.release_thread_hold(mkl_saved)


_helpers: Any = None  # a thread pool for kernels that split their work in two


def helper_pool() -> Any:
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


def cores_taken(others: int = 1) -> bool:
    """Whether at least ``others`` other CPU tasks are queued or running (other
    requests' models on the other workers): then a kernel does all its work on its
    own thread, BLAS held to it, rather than split it with the helper thread or
    BLAS's pool over cores those tasks would be using. (Asked before every
    split.)"""
    return cpu.busy_besides_caller() >= others


def two_blas_threads() -> bool:
    """Whether a convolution may split its products over two threads, each with
    BLAS held to it (numpy's BLAS must let that be set: see _blas_local)."""
    return config.num_threads >= 2 and _blas_local() is not None


def on_blas_threads(work: Any, *args: Any, others: int = 1) -> None:
    """``work(*args, single)`` with its products on BLAS's own threads, or with
    BLAS held to this thread while ``others`` other CPU tasks or more have the
    other cores (:func:`cores_taken`).

    For work that is one product (a linear layer at batch 1, a convolution of one
    small image): BLAS's pool threads keep watching for work for a while after
    each product, so they take the next one within microseconds, where the
    helper thread, asleep between kernels, takes tens to hundreds of
    microseconds to wake on these virtual cores (measured ResNet-18 at batch 1:
    10.1-10.4 ms with its one-image convolutions' products on the pool, against
    12.3-13.0 ms split with the helper)."""
    if cores_taken(others):
        one_blas_thread(work, *args)
    else:
        work(*args, False)


def one_product(a: np.ndarray, b: np.ndarray, out: np.ndarray, others: int = 1) -> None:
    """``out[...] = a @ b`` as one BLAS call, on BLAS's own threads (see
    :func:`on_blas_threads`). For products above BLAS_ONE_THREAD, which BLAS
    would otherwise thread."""
    on_blas_threads(lambda single: blas.matmul(a, b, out), others=others)


def shared_by_two(work: Any, n: int, *args: Any) -> None:
    """``work(*args, units, single)`` on a helper thread and here, each with
    BLAS on its own thread, ``units`` handing out [0, n) to whichever thread
    is free: on a busy machine a thread that loses its core takes fewer
    units instead of holding up the other (as fixed halves do). All here, when
    other tasks have the other cores (:func:`cores_taken`)."""
    if cores_taken():
        one_blas_thread(work, *args, range(n))
        return
    units = _Units(n)
    other = helper_pool().submit(one_blas_thread, work, *args, units)
    try:
        one_blas_thread(work, *args, units)
    finally:
        # The helper may still be busy with another caller's split (two workers each
        # running a model): then this caller has done every unit itself, and waiting
        # for the queued share would only serialise it behind the other caller.
        if not other.cancel():
            other.result()


def rows_by_two(work: Any, rows: int, *args: Any) -> None:
    """``work(*args, r0, r1, single)`` over chunks of [0, rows) shared by two
    threads as :func:`shared_by_two` shares units: a product split by output
    rows. Four chunks or more, so that a thread that loses its core on a busy
    machine leaves the others to the thread that has one (fixed halves made
    the caller wait for the whole of a late half)."""
    size = max(_MIN_CHUNK_ROWS, -(-rows // _ROW_CHUNKS))
    chunks = [(r0, min(rows, r0 + size)) for r0 in range(0, rows, size)]

    def run(*a: Any) -> None:
        *rest, units, single = a
        for unit in units:
            work(*rest, *chunks[unit], single)

    shared_by_two(run, len(chunks), *args)


#: Chunks a product split by rows is cut into, of at least so many rows (BLAS
#: runs short products slower).
_ROW_CHUNKS = 4
_MIN_CHUNK_ROWS = 16

#: OpenBLAS runs a matrix product of up to about this many m*n*k on the calling
#: thread (measured here: no pool thread ran for 64x64x128 or 64x576x16;
#: its source's floor is 4 * 65536); above it, every call wakes its thread pool. Attention's products are
#: small (128x64x128 per head): pool wake-ups cost more than they save, and on
#: a busy machine a preempted pool thread stalls the call (measured 1.6 ms on
#: one thread vs 2.4 ms quiet / 11 ms busy through the pool, for 96 heads).
BLAS_ONE_THREAD = 1 << 19


_work_arrays = threading.local()

#: Work arrays up to this many bytes are kept per thread between calls.
KEPT_WORK_BYTES = 1 << 22


def work_array(slot: str, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
    """An uninitialized array of ``shape``: this thread's kept one for ``slot``
    where it is small enough. Attention runs every layer of a transformer with
    the same work arrays; fresh ones are fresh pages, faulted in and cold in
    cache each call (measured MiniLM at batch 1: 550 against 620-730 us an
    attention in the model). Each slot holds one array per thread, and a
    kernel takes each slot once, so no two live users share one."""
    size = math.prod(shape) * dtype.itemsize
    if size > KEPT_WORK_BYTES:
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
    # without making one (Python between kernels is slow: see shared_pool.PoolKernel).
    buffer, views = entry
    view = views.get((shape, dtype))
    if view is None:
        if len(views) >= _KEPT_VIEWS:
            views.clear()
        view = views[shape, dtype] = buffer[:size].view(dtype).reshape(shape)
    return view


#: Views of a work array kept for reuse, at most (attention's change with the length).
_KEPT_VIEWS = 32


def work_view(a: np.ndarray, shape: Shape) -> np.ndarray:
    """``a`` reshaped without a copy (raises if that is impossible: an ``out=``
    must be the real memory)."""
    v = blas.view_without_copy(a, shape)
    if v is None:
        raise AttributeError(f"an array of shape {a.shape} has no view of shape {shape}")
    return v


def one_thread_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = a @ b`` for (B, m, k) @ (B, k, n), in row chunks small enough
    that OpenBLAS computes each product on this thread (see BLAS_ONE_THREAD)."""
    batch, m, k = a.shape
    n = b.shape[2]
    rows = max(1, BLAS_ONE_THREAD // (k * n))
    if rows >= m:
        np.matmul(a, b, out=out)
        return
    full = m - m % rows
    # (B, chunks, rows, k) @ (B, 1, k, n): numpy loops over the chunks in C.
    np.matmul(
        work_view(a[:, :full], (batch, full // rows, rows, k)),
        b[:, None],
        out=work_view(out[:, :full], (batch, full // rows, rows, n)),
    )
    if full < m:
        np.matmul(a[:, full:], b, out=out[:, full:])
