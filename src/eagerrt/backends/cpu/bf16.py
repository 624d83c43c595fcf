"""bfloat16 products on the CPU: what a plan compiled with
``precision="bfloat16"`` runs for its linear layers, matmuls by a 2-D operand and
convolutions (see :mod:`eagerrt._core.precision`).

Operands are rounded to bfloat16 (to nearest, ties to even, as PyTorch and
OpenVINO round), multiplied by MKL's ``cblas_gemm_bf16bf16f32`` (AMX tiles on
CPUs that have them, AVX512-BF16 instructions otherwise) and summed in float32
into a float32 result; biases and epilogues stay float32. A constant weight is
rounded once, when the plan is made, and a linear layer's is packed then too,
in MKL's own layout for the plan's row count (``Bf16Weight``), so a call
rounds only its activations.

Asking for bfloat16 on a CPU with neither AMX-BF16 nor AVX512-BF16 raises
:class:`~eagerrt.PrecisionError` naming them: MKL would emulate the products
in float32, slower than float32 itself (measured on AMD Zen 3: 37-71 against
58-118 Gflop/s at ResNet and MiniLM shapes). Attention's two products stay
float32 for now (``explain()`` lists which steps run in which precision).

>>> import numpy as np
>>> from eagerrt.backends.cpu import bf16
>>> bits = bf16.round_to_bf16(np.array([1.0, 1.00390625, 3.14159], np.float32))
>>> bf16.widen(bits).tolist()  # 1 + 2**-8 is a tie: to the even neighbour, 1.0
[1.0, 1.0, 3.140625]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np

from ..._core import PrecisionError, config
from ...ops.nn.conv import ConvGeometry, conv_geometry
from . import blas, shared_pool, threads

__all__ = [
    "Bf16Weight",
    "conv2d_form",
    "cpu_features",
    "linear_form",
    "linear_into",
    "require",
    "round_to_bf16",
    "widen",
]

#: LLVM's names of the CPU features that make bfloat16 products fast.
FEATURES = ("amx-bf16", "avx512bf16")

_ROW_MAJOR, _NO_TRANS, _TRANS, _PACKED, _B_MATRIX = 101, 111, 112, 151, 162

#: bfloat16 values' storage: their bits.
_BITS = np.dtype(np.uint16)

#: A linear layer's epilogue splits its rows over two threads from this many rows.
_SPLIT_ROWS = 512


@functools.cache
def cpu_features() -> tuple[str, frozenset[str]]:
    """This CPU's name and which of :data:`FEATURES` it has, as LLVM reads them."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    return llvm.get_host_cpu_name(), frozenset(f for f in FEATURES if features.get(f))


def require() -> None:
    """Raise :class:`~eagerrt.PrecisionError` unless this process can run
    bfloat16 products at speed: a CPU with AMX-BF16 or AVX512-BF16, and MKL
    as the BLAS (``pip install 'eagerrt[mkl]'``)."""
    name, present = cpu_features()
    if not present:
        raise PrecisionError(
            f"matmul precision 'bfloat16' needs a CPU with AMX-BF16 or AVX512-BF16 "
            f"instructions; this one ({name}) has neither, and its bfloat16 products "
            "would run slower than float32. Use precision='float32' (the default)"
        )
    if blas.mkl_with_bf16() is None:
        where = (
            "this MKL has no cblas_gemm_bf16bf16f32_compute (MKL 2021 or newer has)"
            if blas.backend() == "mkl"
            else f"MKL is not the BLAS here (config.blas={config.blas!r}): "
            "pip install 'eagerrt[mkl]'"
        )
        raise PrecisionError(
            "matmul precision 'bfloat16' multiplies through Intel MKL's "
            f"cblas_gemm_bf16bf16f32, and {where}"
        )


def _mkl() -> Any:
    """MKL with its bfloat16 products; raises as :func:`require` where it is not
    the BLAS now (``config.blas`` changed since the plan was made)."""
    mkl = blas.mkl_with_bf16()
    if mkl is None:
        require()
        raise AssertionError("unreachable: require() raised")  # pragma: no cover
    return mkl


# -- rounding --------------------------------------------------------------------------


@numba.njit(nogil=True, cache=True, inline="always")
def _rounded(u: Any) -> Any:  # pragma: no cover - compiled
    """The bfloat16 bits of the float32 whose bits are ``u``: to nearest, ties
    to even; a NaN stays a (quiet) NaN."""
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x40
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


@numba.njit(parallel=True, nogil=True, cache=True)
def _round_rows_parallel(src: Any, dst: Any) -> None:  # pragma: no cover - compiled
    for i in numba.prange(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = _rounded(src[i, j])


@numba.njit(nogil=True, cache=True)
def _round_rows(src: Any, dst: Any) -> None:  # pragma: no cover - compiled
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = _rounded(src[i, j])


#: Fewer elements than this round on the calling thread (a parallel loop's
#: start costs about what it saves below it).
_PARALLEL_ELEMENTS = 1 << 16


def round_to_bf16(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The bfloat16 bits (uint16) of float32 ``a``, C-contiguous, of ``a``'s
    shape (into ``out`` where given)."""
    a = np.ascontiguousarray(a, np.float32)
    if out is None:
        out = np.empty(a.shape, np.uint16)
    if a.size == 0:
        return out
    rows = a.reshape(-1, a.shape[-1] if a.ndim else 1).view(np.uint32)
    dst = out.reshape(rows.shape)
    if a.size >= _PARALLEL_ELEMENTS and shared_pool.ready():
        _round_rows_parallel(rows, dst)
    else:
        _round_rows(rows, dst)
    return out


def widen(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 ``bits`` (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


# -- linear layers ---------------------------------------------------------------------


class Bf16Weight:
    """A linear layer's weight (n, k), rounded to bfloat16 once; with ``rows``,
    also packed in MKL's layout for products of that many rows (MKL otherwise
    packs the weight again on every call, which for a few hundred rows costs
    as much as the product on AMX)."""

    def __init__(self, weight: np.ndarray, rows: int | None = None) -> None:
        mkl = _mkl()
        self.n, self.k = weight.shape
        self.bits = round_to_bf16(weight)
        self.rows = rows
        self.packed: np.ndarray | None = None
        if rows is not None and rows > 0:
            size = mkl.pack_bf16_size(_B_MATRIX, rows, self.n, self.k)
            self.packed = np.empty(size, np.uint8)
            mkl.pack_bf16(_ROW_MAJOR, _B_MATRIX, _TRANS, rows, self.n, self.k,
                          self.bits.ctypes.data, self.k, self.packed.ctypes.data)  # fmt: skip


def _product(mkl: Any, xb: np.ndarray, w: Bf16Weight, out2: np.ndarray) -> None:
    """``out2 = xb @ w.T`` (bfloat16 rows (m, k), float32 (m, n) C-contiguous)
    on MKL's threads, through the packed weight where it was packed for m rows."""
    m, k = xb.shape
    n = w.n
    if w.packed is not None and m == w.rows:
        mkl.gemm_bf16_compute(_ROW_MAJOR, _NO_TRANS, _PACKED, m, n, k, 1.0, xb.ctypes.data, k,
                              w.packed.ctypes.data, k, 0.0, out2.ctypes.data, n)  # fmt: skip
    else:
        mkl.gemm_bf16(_ROW_MAJOR, _NO_TRANS, _TRANS, m, n, k, 1.0, xb.ctypes.data, k,
                      w.bits.ctypes.data, k, 0.0, out2.ctypes.data, n)  # fmt: skip


def linear_into(
    x: np.ndarray,
    weight: Bf16Weight,
    bias: np.ndarray | None,
    out: np.ndarray,
    epilogue: Callable[[int, int], None] | None = None,
) -> None:
    """``out[...] = x @ weight.T + bias`` with bfloat16 operands and float32
    accumulation, then ``epilogue(start, stop)`` over blocks of rows (shared
    by two threads where there are many)."""
    mkl = _mkl()
    k = x.shape[-1]
    m = math.prod(out.shape[:-1])
    xb = round_to_bf16(x.reshape(m, k), threads.work_array("bf16 rows", (m, k), _BITS))
    target = out if out.flags.c_contiguous else np.empty(out.shape, np.float32)
    out2 = threads.work_view(target, (m, weight.n))
    # On MKL's threads, or held to this one while other tasks have the other cores.
    threads.on_blas_threads(lambda single: _product(mkl, xb, weight, out2))
    if bias is not None or epilogue is not None:
        units = -(-m // _SPLIT_ROWS)
        if units >= 2 and config.num_threads >= 2:
            threads.shared_by_two(_finish_rows, units, m, out2, bias, epilogue)
        else:
            _finish_rows(m, out2, bias, epilogue, range(units), True)
    if target is not out:
        out[...] = target


def _finish_rows(
    m: int,
    out2: np.ndarray,
    bias: np.ndarray | None,
    epilogue: Callable[[int, int], None] | None,
    units: Any,
    single: bool,
) -> None:
    """The bias and epilogue over units of :data:`_SPLIT_ROWS` rows."""
    for unit in units:
        start, stop = unit * _SPLIT_ROWS, min(m, (unit + 1) * _SPLIT_ROWS)
        if bias is not None:
            out2[start:stop] += bias
        if epilogue is not None:
            epilogue(start, stop)


def linear_form(
    rows: int, weight: np.ndarray | None, transposed: bool, with_bias: bool
) -> Callable[..., None]:
    """Graph mode's bfloat16 out form of a product of ``rows`` rows by a weight:
    ``form(x, w[, b], out, epilogue=None)``. ``weight``: the weight's array where
    it is a constant (rounded and packed once, here; else rounded on each call);
    ``transposed``: the weight operand is (k, n), a matmul's, not linear's (n, k)."""
    made = None if weight is None else Bf16Weight(weight.T if transposed else weight, rows)

    def form(x: np.ndarray, w: np.ndarray, *rest: Any, epilogue: Any = None) -> None:
        b, out = (rest[0], rest[1]) if with_bias else (None, rest[0])
        packed = made or Bf16Weight(w.T if transposed else w)
        linear_into(x, packed, b, out, epilogue)

    form.precision = "bfloat16"  # type: ignore[attr-defined]  # for explain()
    return form


# -- convolutions ----------------------------------------------------------------------


@numba.njit(nogil=True, cache=True)
def _im2col_channels(
    image: Any, cols: Any, window: Any, ho: int, wo: int, c0: int, c1: int
) -> None:  # pragma: no cover - compiled
    """Rows of ``cols`` (C * kh * kw, ho * wo) for channels [c0, c1): the bfloat16
    bits of one image's im2col matrix (``image``: the float32 bits (C, H, W);
    ``window``: (kh, kw, sh, sw, ph, pw, dh, dw)), zeros for padding."""
    kh, kw, sh, sw, ph, pw, dh, dw = window
    height, width = image.shape[1], image.shape[2]
    for c in range(c0, c1):
        for i in range(kh):
            for j in range(kw):
                row = (c * kh + i) * kw + j
                for oy in range(ho):
                    y = oy * sh - ph + i * dh
                    base = oy * wo
                    if y < 0 or y >= height:
                        for ox in range(wo):
                            cols[row, base + ox] = 0
                        continue
                    for ox in range(wo):
                        xx = ox * sw - pw + j * dw
                        if 0 <= xx < width:
                            cols[row, base + ox] = _rounded(image[c, y, xx])
                        else:
                            cols[row, base + ox] = 0


@numba.njit(parallel=True, nogil=True, cache=True)
def _im2col_parallel(
    image: Any, cols: Any, window: Any, ho: int, wo: int
) -> None:  # pragma: no cover - compiled
    channels = image.shape[0]
    for c in numba.prange(channels):
        _im2col_channels(image, cols, window, ho, wo, c, c + 1)


def _im2col_rounded(
    image: np.ndarray, cols: np.ndarray, window: np.ndarray, ho: int, wo: int
) -> None:
    """One image's rounded im2col matrix, on the pool where numba's loops run
    there (:func:`shared_pool.ready`), else on this thread."""
    if shared_pool.ready():
        _im2col_parallel(image, cols, window, ho, wo)
    else:
        _im2col_channels(image, cols, window, ho, wo, 0, image.shape[0])


def _plain(g: ConvGeometry) -> bool:
    """A 1x1, stride-1, unpadded convolution: the image is its own im2col matrix."""
    return (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw) == (1, 1, 1, 1, 0, 0) and (g.ho, g.wo) == (g.h, g.w)


def conv2d_into(
    x: np.ndarray,
    wbits: np.ndarray,
    bias: np.ndarray | None,
    g: ConvGeometry,
    out: np.ndarray,
    epilogue: Callable[[int, int], None] | None = None,
) -> None:
    """conv2d of geometry ``g`` (4-d ``x``) into C-contiguous ``out`` with
    bfloat16 operands: each image's im2col matrix rounded as it is gathered,
    one product a group on MKL's threads (``wbits``: the weight's bits as
    (groups, O / groups, C / groups * kh * kw)), the bias, then ``epilogue``
    on the image."""
    mkl = _mkl()
    pixels = g.ho * g.wo
    cols = threads.work_array("bf16 cols", (g.c * g.kh * g.kw, pixels), _BITS)
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    flat = out.reshape(g.n, g.o, pixels)
    window = np.array([g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw], np.int64)
    # On MKL's threads, or held to this one while other tasks have the other cores.
    threads.on_blas_threads(
        lambda single: _conv_images(mkl, x, bits, cols, wbits, bias, g, flat, window, epilogue)
    )


def _conv_images(
    mkl: Any,
    x: np.ndarray,
    bits: np.ndarray,
    cols: np.ndarray,
    wbits: np.ndarray,
    bias: np.ndarray | None,
    g: ConvGeometry,
    flat: np.ndarray,
    window: np.ndarray,
    epilogue: Callable[[int, int], None] | None,
) -> None:
    """:func:`conv2d_into`'s images, one after another."""
    og, taps = wbits.shape[1:]
    pixels = g.ho * g.wo
    for image in range(g.n):
        if _plain(g):
            round_to_bf16(x[image].reshape(g.c, pixels), cols)
        else:
            _im2col_rounded(bits[image], cols, window, g.ho, g.wo)
        dest = flat[image]
        for group in range(g.groups):
            mkl.gemm_bf16(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, og, pixels, taps, 1.0,
                          wbits[group].ctypes.data, taps,
                          cols.ctypes.data + group * taps * pixels * 2, pixels, 0.0,
                          dest.ctypes.data + group * og * pixels * 4, pixels)  # fmt: skip
        if bias is not None:
            dest += bias.reshape(-1, 1)
        if epilogue is not None:
            epilogue(image, image + 1)


def conv2d_form(
    inputs: Sequence[Any], static: dict[str, Any], weight: np.ndarray | None
) -> Callable[..., None]:
    """Graph mode's bfloat16 out form of a conv2d of 4-d ``inputs`` (x, weight[,
    bias]): ``form(x, w[, b], out, epilogue=None)``. ``weight``: the weight's
    array where it is a constant (rounded once, here)."""
    x, w, *rest = inputs
    g = conv_geometry(x, w, rest[0] if rest else None, **static)
    shape = (g.groups, g.o // g.groups, g.c // g.groups * g.kh * g.kw)
    made = None if weight is None else round_to_bf16(weight).reshape(shape)

    def form(x: np.ndarray, w: np.ndarray, *rest: Any, epilogue: Any = None) -> None:
        b, out = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
        bits = made if made is not None else round_to_bf16(w).reshape(shape)
        conv2d_into(x, bits, b, g, out, epilogue)

    form.precision = "bfloat16"  # type: ignore[attr-defined]  # for explain()
    return form
