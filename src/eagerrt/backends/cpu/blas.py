"""The matrix products of eagerrt's heavy kernels: numpy's OpenBLAS, or Intel's MKL.

numpy's bundled OpenBLAS serves by default. Where MKL is installed
(``pip install 'eagerrt[mkl]'``: the PyPI ``mkl`` wheel and its ``tbb``), the
products of linear layers and convolutions go through its ``cblas_?gemm`` and
``cblas_?gemm_batch_strided`` instead, with MKL's threads from oneTBB (see
:func:`_open_with_tbb` for why not OpenMP). Measured on the reference machine
(2 cores): MiniLM compiled at batch 1, 21.0-23.2 ms against 26.7-27.0 ms through
numpy's OpenBLAS; at batch 32 (rows shared by two threads, one BLAS thread
each), 461-471 against 528-541 ms.

``config.blas`` (``EAGERRT_BLAS``) chooses: ``"auto"`` (MKL where installed),
``"mkl"`` (an error where it is not) or ``"numpy"``. MKL is loaded on the first
product that could use it, never by ``import eagerrt``.

>>> import numpy as np
>>> from eagerrt.backends.cpu import blas
>>> a, b = np.ones((3, 4), np.float32), np.ones((5, 4), np.float32)
>>> out = np.empty((3, 5), np.float32)
>>> blas.matmul(a, b.T, out)  # b.T read in place, as BLAS's transposed operand
>>> out[0]
array([4., 4., 4., 4., 4.], dtype=float32)
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from typing import Any

import numpy as np

from ..._core import EagerError, config, renew_after_fork

__all__ = [
    "MKLMissingError",
    "backend",
    "gemm_address",
    "hold_to_one_thread",
    "matmul",
    "reads_rows_in_place",
    "release_thread_hold",
]

#: Products smaller than this (m * n * k) stay with numpy: a ctypes call costs
#: a few microseconds, as much as such a product.
_MIN_WORK = 1 << 15

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


class MKLMissingError(EagerError, RuntimeError):
    """``config.blas`` is ``"mkl"`` but no usable MKL was found."""


class _MKL:
    """MKL's single dynamic library (``libmkl_rt``) through ctypes: ctypes calls
    release the GIL, so products on two threads run in parallel."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        c_int, c_void = ctypes.c_int, ctypes.c_void_p
        self.gemm: dict[np.dtype[Any], Any] = {}
        self.gemm_addresses: dict[np.dtype[Any], int] = {}  # for numba kernels
        self.gemm_batch: dict[np.dtype[Any], Any] = {}  # one call for equally strided products
        for dtype, name, scalar in (
            (np.dtype(np.float32), "s", ctypes.c_float),
            (np.dtype(np.float64), "d", ctypes.c_double),
        ):
            fn = getattr(lib, f"cblas_{name}gemm")
            fn.restype = None
            fn.argtypes = [c_int] * 6 + [scalar] + [c_void, c_int] * 2 + [scalar, c_void, c_int]
            self.gemm[dtype] = fn
            self.gemm_addresses[dtype] = int(ctypes.cast(fn, c_void).value or 0)
            fn = getattr(lib, f"cblas_{name}gemm_batch_strided")
            fn.restype = None
            fn.argtypes = [c_int] * 6 + [scalar] + [c_void, c_int, c_int] * 2 + [scalar]
            fn.argtypes += [c_void, c_int, c_int, c_int]
            self.gemm_batch[dtype] = fn
        self.gemm_bf16: Any = None  # bfloat16 operands, float32 results (MKL 2021+)
        if hasattr(lib, "cblas_gemm_bf16bf16f32_compute"):
            self.gemm_bf16 = _bf16_function(lib, "cblas_gemm_bf16bf16f32")
            self.gemm_bf16_compute = _bf16_function(lib, "cblas_gemm_bf16bf16f32_compute")
            self.pack_bf16_size = lib.cblas_gemm_bf16bf16f32_pack_get_size
            self.pack_bf16_size.restype = ctypes.c_size_t
            self.pack_bf16_size.argtypes = [c_int] * 4
            self.pack_bf16 = lib.cblas_gemm_bf16bf16f32_pack
            self.pack_bf16.restype = None
            self.pack_bf16.argtypes = [c_int] * 6 + [c_void, c_int, c_void]
        # Per thread, unlike numpy's OpenBLAS (see threads.one_blas_thread): returns
        # the count in force before, 0 meaning "MKL's global count".
        self.set_local_threads = lib.MKL_Set_Num_Threads_Local
        self.set_local_threads.restype, self.set_local_threads.argtypes = c_int, [c_int]
        self.max_threads = lib.MKL_Get_Max_Threads  # what a product may use on this thread
        self.max_threads.restype, self.max_threads.argtypes = c_int, []


def _bf16_function(lib: ctypes.CDLL, name: str) -> Any:
    """``cblas_gemm_bf16bf16f32`` or its ``_compute`` form: (layout, transa,
    transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), bfloat16 ``a`` and
    ``b``, float32 scalars and ``c``."""
    c_int, c_void, c_float = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
    fn = getattr(lib, name)
    fn.restype = None
    fn.argtypes = [c_int] * 6 + [c_float, c_void, c_int, c_void, c_int, c_float, c_void, c_int]
    return fn


_TBB = 4  # MKL_THREADING_TBB


def _open_with_tbb(path: str) -> ctypes.CDLL | None:
    """libmkl_rt with its threads from oneTBB (the ``mkl`` wheel's ``tbb``), or
    None where that layer can't be had.

    Not OpenMP. MKL's default, Intel's OpenMP, resolves its ``omp_*`` calls in
    the process's global scope, where PyTorch's libgomp comes first once torch
    is imported: inside Intel's parallel regions every thread then read thread
    number 0 and computed the same share (MiniLM's embeddings off by 0.21). GNU
    OpenMP, which MKL picks by itself where libgomp is loaded, joins PyTorch's
    pool: libgomp starts a team for each thread that calls MKL, counts more
    threads than cores and stops spinning for all of them (PyTorch's ResNet-18
    at batch 1, 9.5 -> 17-20 ms in the same process). oneTBB shares no symbols
    with either, and its pool is measured as fast here: MiniLM at batch 1
    21.0-23.2 ms against 26.7-27.0 through numpy's OpenBLAS.

    The layer is asked for before MKL computes anything; where MKL answers with
    another (someone else's MKL already running), eagerrt keeps to numpy. A
    layer whose library is missing would end the process at the first product
    (MKL's "fatal error"), hence the check for the files: oneTBB is loaded from
    beside libmkl_rt by its path, as MKL's own loader would not find it there."""
    folder = os.path.dirname(path)
    tbb = sorted(glob.glob(os.path.join(folder, "libtbb.so.12*")))
    if not tbb or not glob.glob(os.path.join(folder, "libmkl_tbb_thread.so*")):
        return None
    ctypes.CDLL(tbb[0])  # MKL's TBB layer needs libtbb.so.12: now it is loaded
    lib = ctypes.CDLL(path)
    lib.MKL_Set_Threading_Layer.restype = ctypes.c_int
    lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
    return lib if lib.MKL_Set_Threading_Layer(_TBB) == _TBB else None


_lock = threading.Lock()
_mkl: _MKL | None = None
_looked = False
renew_after_fork(__name__, "_lock", threading.Lock)


def _find_mkl() -> str | None:
    """libmkl_rt where the ``mkl`` wheel puts it (the environment's lib/), or
    where the dynamic loader would find it."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        found = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if found:
            return found[-1]
    import ctypes.util

    return ctypes.util.find_library("mkl_rt")


def _load() -> _MKL | None:
    global _mkl, _looked
    with _lock:
        if not _looked:
            path = _find_mkl()
            if path is not None:
                try:
                    lib = _open_with_tbb(path)
                    _mkl = None if lib is None else _MKL(lib)
                    if _mkl is not None:
                        global _thread_cap
                        _thread_cap = _asked_threads(_mkl.max_threads())
                except (OSError, AttributeError):  # not a usable MKL: stay with numpy
                    _mkl = None
            _looked = True
    return _mkl


#: MKL's threads per calling thread where ``MKL_NUM_THREADS`` asks for fewer than
#: the machine's cores (a Ray actor granted one CPU of many: see
#: eagerrt.distributed), else 0. On oneTBB, MKL sizes itself from the machine and
#: ignores MKL_NUM_THREADS and mkl_set_num_threads (measured: two threads' speed
#: after either); only its per-thread count holds it, set on each thread's first
#: product (and before a hold to one thread saves the count it restores).
_thread_cap = 0
_capped = threading.local()


def _asked_threads(machine: int) -> int:
    try:
        asked = int(os.environ.get("MKL_NUM_THREADS", ""))
    except ValueError:
        return 0
    return asked if 0 < asked < machine else 0


def _cap_this_thread(mkl: _MKL) -> None:
    if _thread_cap and not getattr(_capped, "done", False):
        mkl.set_local_threads(_thread_cap)
        _capped.done = True


def _active() -> _MKL | None:
    """MKL if ``config.blas`` selects it and it is installed."""
    choice = config.blas
    if choice == "numpy":
        return None
    mkl = _mkl if _looked else _load()
    if _thread_cap and mkl is not None:
        _cap_this_thread(mkl)
    if mkl is None and choice == "mkl":
        raise MKLMissingError(
            "config.blas is 'mkl' (EAGERRT_BLAS) but MKL's runtime library (libmkl_rt) "
            "with its oneTBB threading layer was not found: pip install 'eagerrt[mkl]', "
            "or set it to 'auto' or 'numpy'"
        )
    return mkl


def backend() -> str:
    """Which library computes the kernels' products now: ``"mkl"`` or ``"numpy"``.

    >>> import eagerrt as ert
    >>> from eagerrt.backends.cpu import blas
    >>> with ert.config.override(blas="numpy"):
    ...     blas.backend()
    'numpy'
    """
    return "numpy" if _active() is None else "mkl"


def mkl_with_bf16() -> _MKL | None:
    """MKL, where it is the backend and has bfloat16 products; else None."""
    mkl = _active()
    return mkl if mkl is not None and mkl.gemm_bf16 is not None else None


def gemm_address(dtype: np.dtype[Any]) -> int | None:
    """The address of MKL's ``cblas_sgemm`` / ``cblas_dgemm`` for ``dtype``
    (float32 / float64), for numba kernels that call it from their parallel
    loops (:mod:`eagerrt.backends.cpu.native_gemm`); None where MKL is not the backend
    or has no product for ``dtype``."""
    mkl = _active()
    return None if mkl is None else mkl.gemm_addresses.get(np.dtype(dtype)) or None


def _operand(a: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a matrix (the last two axes) as
    BLAS reads it in place, or None if its layout has no such form."""
    item = a.itemsize
    rows, cols = a.shape[-2:]
    s0, s1 = a.strides[-2:]
    if s1 == item and s0 % item == 0 and s0 // item >= max(1, cols):
        return _NO_TRANS, s0 // item
    if s0 == item and s1 % item == 0 and s1 // item >= max(1, rows):
        return _TRANS, s1 // item
    return None


def reads_rows_in_place(a: np.ndarray) -> bool:
    """Whether BLAS reads (or writes) each matrix of ``a`` (the last two axes)
    in place as stored, row after row, not as a transpose: what a kernel that
    passes ``a.strides[-2]`` as the leading dimension needs."""
    layout = _operand(a)
    return layout is not None and layout[0] == _NO_TRANS


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a @ b``, as ``np.matmul(a, b, out=out)``: through MKL where it
    is the backend and the product fits it (2-D; 3-D with one batch, or a 2-D
    ``a`` over ``b``'s batch; ``(..., m, k) @ (k, n)`` folding into rows without
    a copy; float32 or float64 throughout, layouts BLAS reads in place, no overlap
    with ``out``, big enough to be worth the call), else through numpy."""
    mkl = _active()
    if mkl is not None and b.ndim == 2 and a.ndim > 2 and out.ndim == a.ndim:
        # (..., m, k) @ (k, n): one product over all leading dimensions, where
        # they fold into the rows without a copy (a linear layer in ONNX form).
        rows = a.size // max(1, a.shape[-1])
        a2 = view_without_copy(a, (rows, a.shape[-1]))
        out2 = view_without_copy(out, (rows, b.shape[1]))
        if a2 is not None and out2 is not None and _mkl_matmul(mkl, a2, b, out2):
            return
    if mkl is not None and a.ndim == 2 and b.ndim == 3 == out.ndim:
        # (m, k) @ (batch, k, n): one matrix for every batch entry (a grouped 1x1
        # convolution's weights), read with a batch stride of 0.
        a = np.broadcast_to(a, (b.shape[0], *a.shape))
    if mkl is None or not _mkl_matmul(mkl, a, b, out):
        np.matmul(a, b, out=out)


def view_without_copy(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``a`` as a view of ``shape``, or None where that needs a copy (what an
    ``out=`` must never be: the result has to land in the real memory)."""
    try:
        return np.reshape(a, shape, copy=False)
    except ValueError:  # it needs a copy
        return None
    except TypeError:  # numpy 2.0: no copy=; setting the shape (deprecated in 2.5) refuses
        view = a.view()
        try:
            view.shape = shape
        except AttributeError:
            return None
        return view


def _mkl_matmul(mkl: _MKL, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """The product through MKL, if it fits (2-D, or 3-D with the same batch on
    every operand); False, doing nothing, if not."""
    dims = out.ndim
    if a.ndim != dims or b.ndim != dims or dims not in (2, 3) or a.dtype not in mkl.gemm:
        return False
    if b.dtype != a.dtype or out.dtype != a.dtype or not out.flags.writeable:
        return False
    *batch, m, k = a.shape
    n = b.shape[-1]
    if m * n * k * (batch[0] if batch else 1) < _MIN_WORK:
        return False
    if dims == 3 and not (b.shape[0] == out.shape[0] == batch[0] > 0):
        return False
    ta, tb, oc = _operand(a), _operand(b), _operand(out)
    if ta is None or tb is None or oc is None or oc[0] != _NO_TRANS:
        return False
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return False
    item = a.itemsize
    if dims == 2:
        mkl.gemm[a.dtype](_ROW_MAJOR, ta[0], tb[0], m, n, k, 1.0, a.ctypes.data, ta[1],
                          b.ctypes.data, tb[1], 0.0, out.ctypes.data, oc[1])  # fmt: skip
        return True
    strides = [x.strides[0] for x in (a, b, out)]
    if any(s < 0 or s % item for s in strides):
        return False
    sa, sb, so = (s // item for s in strides)
    mkl.gemm_batch[a.dtype](_ROW_MAJOR, ta[0], tb[0], m, n, k, 1.0, a.ctypes.data, ta[1], sa,
                            b.ctypes.data, tb[1], sb, 0.0, out.ctypes.data, oc[1], so,
                            batch[0])  # fmt: skip
    return True


def hold_to_one_thread() -> int | None:
    """Hold MKL to this thread (where it is loaded): returns what
    :func:`release_thread_hold` restores. MKL's count is the calling thread's own."""
    mkl = _mkl if _looked or config.blas == "numpy" else _load()
    if mkl is None:
        return None
    _cap_this_thread(mkl)  # so that the release restores the cap, not MKL's machine-wide count
    return int(mkl.set_local_threads(1))


def release_thread_hold(saved: int | None) -> None:
    """Undo :func:`hold_to_one_thread`."""
    mkl = _mkl
    if mkl is not None and saved is not None:
        mkl.set_local_threads(saved)
