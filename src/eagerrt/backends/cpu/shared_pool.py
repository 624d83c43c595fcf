"""numba's parallel loops on the same oneTBB workers as MKL's products.

With the ``mkl`` extra, MKL computes the big products on oneTBB's workers, and
those keep spinning on the other core for a while after each product. A kernel
that split its work with eagerrt's own helper thread right after a product
found that core taken (measured MiniLM's attention at batch 1: no faster split
in two than on one thread). numba's ``parallel=True`` loops can run on oneTBB
too, and oneTBB is one pool per process: the worker that just finished MKL's
product takes the loop's other half at once (the same attention: 250 against
500 us a layer).

numba picks its threading layer the first time any parallel loop runs, oneTBB
first where it can load it; MKL's loader (:mod:`eagerrt.backends.cpu.blas`) has loaded
the wheel's ``libtbb`` by then. Where numba settled on another layer (someone
ran a parallel loop earlier, or chose ``NUMBA_THREADING_LAYER``), the kernels
keep their one-thread forms: two pools would fight over the cores again.

The kernels that run so (a linear layer, a convolution, a layer norm,
attention) are :class:`PoolKernel` subclasses: set up once for their shapes,
claiming the pool's threads on each call.

>>> from eagerrt.backends.cpu import shared_pool
>>> shared_pool.ready() in (True, False)
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from ..._core import config, renew_after_fork
from . import blas, threads

__all__ = ["PoolKernel", "claim_threads", "pool_threads", "ready", "threads_for_call"]

_lock = threading.Lock()
renew_after_fork(__name__, "_lock", threading.Lock)
_on_tbb: bool | None = None  # whether numba's loops run on oneTBB (None: not asked yet)


@numba.njit(parallel=True, nogil=True, cache=True)
def _touch(x: Any) -> None:  # pragma: no cover - compiled
    for i in numba.prange(x.shape[0]):
        x[i] = i


def _numba_layer_is_tbb() -> bool:
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel loop has run yet: numba chooses now
        try:
            _touch(np.zeros(2, np.int64))
        except Exception:  # no usable layer at all: stay on one thread
            return False
        layer = numba.threading_layer()
    return layer == "tbb"


def ready() -> bool:
    """Whether kernels may run numba parallel loops now: two threads or more
    allowed (``config.num_threads``), MKL on oneTBB the backend (loaded here
    if it was not yet) and numba's loops on the same oneTBB."""
    global _on_tbb
    if config.num_threads < 2 or blas.gemm_address(np.dtype(np.float32)) is None:
        return False
    if _on_tbb is None:
        with _lock:
            if _on_tbb is None:
                _on_tbb = _numba_layer_is_tbb()
    return _on_tbb


def pool_threads() -> int:
    """How many threads a parallel loop uses when no other task has the other
    cores: as many as ``config.num_threads`` allows (and numba has)."""
    return max(1, min(config.num_threads, _NUMBA_THREADS))


#: numba's threads (fixed once numba has started).
_NUMBA_THREADS: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]

#: The count this thread last gave numba (numba's is per thread too): asking
#: numba costs 1 us a kernel, several between kernels that evict the interpreter.
_set_here = threading.local()
renew_after_fork(__name__, "_set_here", threading.local)  # a child's numba starts afresh


def threads_for_call(alone: bool) -> int:
    """Set and return how many threads this thread's next parallel loop uses:
    one where ``alone`` (other tasks have the other cores), else
    :func:`pool_threads`. (numba's count is per calling thread; one set on
    this thread other than through here is not seen.)"""
    wanted = 1 if alone else pool_threads()
    if getattr(_set_here, "count", 0) != wanted:
        numba.set_num_threads(wanted)
        _set_here.count = wanted
    return wanted


def claim_threads(alone: bool, threads: int) -> bool:
    """For a kernel set up to run on ``threads`` (:func:`pool_threads` then):
    set this thread's count for its next parallel loop (one where ``alone``)
    and return True; False (nothing set) where it no longer may use
    ``threads``, ``config.num_threads`` having changed since the setup."""
    if not alone and pool_threads() != threads:
        return False
    threads_for_call(alone)
    return True


class PoolKernel:
    """A kernel run as one numba parallel loop on the pool, set up once for its
    shapes (graph mode sets one up when its plan is made), so that a call is a
    few checks and the kernel's. Python between kernels is slow here, its code
    and data evicted by the kernels (a 1 us function took 5-11 us between
    ResNet's convolutions), so a call does as little of it as it can: it
    checks its arrays, claims the threads (:meth:`claim`) and runs the
    kernel; where it runs alone, through :meth:`held` if its MKL products
    must not take the other cores."""

    #: MKL's gemm for the kernel's products, by address (set up with a ``gemm_dtype``).
    address: int

    def __init__(self, gemm_dtype: np.dtype[Any] | None = None) -> None:
        """Set up for the pool's threads as they are now; with ``gemm_dtype``
        for a kernel whose products call MKL's gemm of that dtype (which the
        caller checked MKL has)."""
        self.threads = pool_threads()
        # Looked up here, not on every call (Python is slow between kernels).
        self.claim_threads = claim_threads
        self.cores_taken = threads.cores_taken
        if gemm_dtype is not None:
            address = blas.gemm_address(gemm_dtype)
            assert address is not None  # the caller checked
            self.address = address

    def claim(self) -> bool | None:
        """Set this thread's count for the kernel's loop and return whether
        it runs alone, on this thread (other tasks have the other cores:
        :func:`threads.cores_taken`); None (nothing set) where
        ``config.num_threads`` changed since the setup."""
        alone = self.cores_taken()
        return alone if self.claim_threads(alone, self.threads) else None

    @staticmethod
    def held(run: Callable[..., None], *args: Any) -> None:
        """``run(*args)`` with MKL held to this thread, as the loop is."""
        saved = blas.hold_to_one_thread()
        try:
            run(*args)
        finally:
            blas.release_thread_hold(saved)
