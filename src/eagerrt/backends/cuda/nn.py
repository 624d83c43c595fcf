"""The cuda device's neural-network kernels, written once over an array namespace.

Each kernel takes the op's operands as CuPy arrays on the GPU and computes with
CuPy's numpy-compatible functions, which launch on the current stream: whole-array
expressions and cuBLAS products, no host round trip, nothing that waits for the
device (so a compiled plan can capture them into a CUDA graph). The namespace
comes from the operands (:func:`_xp`): the same code runs on numpy arrays, which
is how CI, without a GPU, checks every kernel's arithmetic against the CPU ops
(``tests/test_cuda_kernels_on_numpy.py``).

Products of float32 convolutions (of one group) run on TensorFloat-32 tensor
cores when ``config.cuda_tf32`` is set (PyTorch's ``cudnn.allow_tf32`` default
does the same for its convolutions); off by default, so results match the CPU's
to float32 rounding.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ...devices.device_checks import check_later
from ...ops._rules import as_float
from ...ops.nn.attention import attention_geometry
from ...ops.nn.conv import conv_geometry
from ...ops.nn.norm import group_norm_with, layer_norm_args
from ...ops.nn.pooling import adaptive_size, pool_geometry
from . import dnn, gemm
from . import rows as row_kernels

__all__ = [
    "adaptive_avg_pool2d",
    "matmul",
    "add_layer_norm",
    "avg_pool2d",
    "conv2d",
    "conv2d_relu",
    "embedding",
    "gelu",
    "group_norm",
    "layer_norm",
    "linear",
    "max_pool2d",
    "scaled_dot_product_attention",
]


def _xp(a: Any) -> Any:
    """The array namespace of ``a``: CuPy for a CuPy array, else numpy."""
    if type(a).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


# -- products ---------------------------------------------------------------------------
def matmul(a: Any, b: Any) -> Any:
    """``a @ b`` through :func:`.gemm.matmul_into` (so compiled plans
    capture it; CuPy's own refuses cuBLAS while capturing): one product for
    a (..., m, k) @ (k, n), one strided-batched product for operands of one
    batch shape; anything else (vectors, broadcast batches, other dtypes)
    as CuPy's ``matmul``."""
    xp = _xp(a)
    if a.ndim < 2 or b.ndim < 2 or not gemm.supported(a, b) or a.shape[-1] != b.shape[-2]:
        return xp.matmul(a, b)
    (m, k), n = a.shape[-2:], b.shape[-1]
    if b.ndim == 2:  # every row of a against one matrix: a single product
        batch, m = 1, math.prod(a.shape[:-1])
    elif a.shape[:-2] == b.shape[:-2]:
        batch = math.prod(a.shape[:-2])
    else:
        return xp.matmul(a, b)
    out = xp.empty((batch, m, n), a.dtype)
    left = xp.ascontiguousarray(a).reshape(batch, m, k)
    right = xp.ascontiguousarray(b).reshape(batch, k, n)
    gemm.matmul_into(out, left, right, m=m, n=n, k=k)
    return out.reshape(*a.shape[:-1], n)


def linear(x: Any, weight: Any, bias: Any = None) -> Any:
    """``x @ weight.T + bias``: one cuBLAS product over all leading dimensions
    (cuBLAS reads the (out, in) weight transposed where it lies)."""
    xp = _xp(x)
    k = x.shape[-1]
    rows = xp.ascontiguousarray(x.reshape(-1, k) if x.ndim != 2 else x)
    if gemm.supported(rows, weight):
        m, n = rows.shape[0], weight.shape[0]
        out = xp.empty((1, m, n), rows.dtype)
        weight = xp.ascontiguousarray(weight)
        gemm.matmul_into(out, rows[None], weight[None], m=m, n=n, k=k, b_transposed=True)
    else:
        out = xp.matmul(rows, weight.T)
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def conv2d(x: Any, weight: Any, bias: Any = None, **options: Any) -> Any:
    """conv2d: cuDNN's where it is installed (:mod:`.dnn`); else cuBLAS
    products sharing the weight across the batch: a 1x1 stride-1 convolution
    multiplies the images as they are; another stride-1 one sums one product
    per tap over shifted windows of the padded images (:func:`_shifted_products`);
    a strided one gathers its input columns once (im2col, a strided view of the
    padded input copied in one pass)."""
    return _convolve(_xp(x), x, weight, bias, conv_geometry(x, weight, bias, **options))


def conv2d_relu(x: Any, weight: Any, bias: Any = None, residual: Any = None, **options: Any) -> Any:
    """``relu(conv2d(x, weight, bias) + residual)`` (a compiled plan's fused
    node, ``backends/cuda/passes/conv_relu.py``): one cuDNN kernel where cuDNN takes
    the convolution, else the convolution, then the sum and ReLU in place."""
    g = conv_geometry(x, weight, bias, **options)
    return _convolve(_xp(x), x, weight, bias, g, residual, relu=True)


def _convolve(
    xp: Any, x: Any, weight: Any, bias: Any, g: Any, residual: Any = None, relu: bool = False
) -> Any:
    """conv2d of geometry ``g`` (then ``+ residual`` and ReLU if asked): cuDNN
    where it takes it, the epilogue in its kernel; else the cuBLAS products
    (:func:`conv2d`'s docstring), the epilogue in place after them."""
    x4 = x if x.ndim == 4 else x[None]
    described = dnn.describe(x4, weight, g, bias) if dnn.available(x) else None
    if described is not None and (residual is None or residual.dtype == x.dtype):
        if residual is not None:
            residual = xp.ascontiguousarray(residual).reshape(g.n, g.o, g.ho, g.wo)
        x4, weight = xp.ascontiguousarray(x4), xp.ascontiguousarray(weight)
        out = dnn.convolve(described, x4, weight, bias, residual=residual, relu=relu)
        if out is not None:  # else cuDNN refused it: the products below
            return out if x.ndim == 4 else out[0]
    cg, og = g.c // g.groups, g.o // g.groups
    taps = cg * g.kh * g.kw
    if g.groups == 1 and g.kh == g.kw == 1 and g.sh == g.sw == 1 and not (g.ph or g.pw):
        cols = x4.reshape(g.n, g.c, g.h * g.w)  # a 1x1 stride-1 convolution: the images
        out = _shared_weight_products(xp, weight.reshape(g.o, taps), cols)
    elif g.groups == 1 and g.sh == g.sw == 1 and gemm.supported(x4, weight):
        out = _shifted_products(xp, x4, weight, g)
    elif g.groups == 1:
        cols = _im2col(xp, x4, g).reshape(g.n, taps, g.ho * g.wo)
        out = _shared_weight_products(xp, weight.reshape(g.o, taps), cols)
    else:  # CuPy's batched products: float32, whatever config.cuda_tf32 says
        out = xp.matmul(weight.reshape(g.groups, og, taps), _im2col(xp, x4, g))
    out = out.reshape(g.n, g.o, g.ho, g.wo)
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    out = out if x.ndim == 4 else out[0]
    if residual is not None:
        out += residual
    return xp.maximum(out, 0, out=out) if relu else out


def _shared_weight_products(xp: Any, weight: Any, cols: Any) -> Any:
    """``out[n] = weight @ cols[n]`` for an (O, K) weight and (N, K, P) columns:
    one strided-batched product whose weight is shared (stride 0), on TF32 tensor
    cores where ``config.cuda_tf32`` says (CuPy's ``matmul`` would broadcast the
    weight through an array of pointers, without TF32)."""
    if not gemm.supported(weight, cols):
        return xp.matmul(weight, cols)
    n, k, p = cols.shape
    o = weight.shape[0]
    weight, cols = xp.ascontiguousarray(weight), xp.ascontiguousarray(cols)
    out = xp.empty((n, o, p), cols.dtype)
    gemm.matmul_into(out, weight[None], cols, m=o, n=p, k=k, tf32=gemm.tf32_for(cols.dtype))
    return out


def _shifted_products(xp: Any, x4: Any, weight: Any, g: Any) -> Any:
    """A stride-1 convolution without im2col: one product per tap, each reading
    the padded images shifted by that tap (a window of their rows, no copy),
    accumulated into an output laid on the padded grid, whose valid columns are
    copied out at the end. (N, O, Ho, Wo)."""
    padded = _padded(xp, x4, g, g.ho, g.wo)
    hp, wp = padded.shape[-2:]
    length = (g.ho - 1) * wp + g.wo  # from the first output pixel to the last, on the grid
    grid = xp.empty((g.n, g.o, g.ho * wp), x4.dtype)
    per_tap = xp.ascontiguousarray(weight.transpose(2, 3, 0, 1))  # (kh, kw, O, C)
    tf32 = gemm.tf32_for(x4.dtype)
    for i in range(g.kh):
        for j in range(g.kw):
            window = gemm.Operand(padded, i * g.dh * wp + j * g.dw, hp * wp, g.c * hp * wp)
            gemm.matmul_into(
                grid,
                per_tap[i, j][None],
                window,
                m=g.o,
                n=length,
                k=g.c,
                accumulate=bool(i or j),
                out_ld=g.ho * wp,
                tf32=tf32,
            )
    return xp.ascontiguousarray(grid.reshape(g.n, g.o, g.ho, wp)[..., : g.wo])


def _padded(xp: Any, x: Any, g: Any, rows: int, cols: int, fill: float = 0.0) -> Any:
    """``x`` (..., H, W) padded with ``fill`` as ``rows`` x ``cols`` windows of
    ``g`` (a convolution's or a pooling's geometry) read it (C-contiguous; as is
    where there is no padding): exactly the rows and columns they reach."""
    h, w = x.shape[-2:]
    bottom = max(0, (rows - 1) * g.sh + g.dh * (g.kh - 1) + 1 - h - g.ph)
    right = max(0, (cols - 1) * g.sw + g.dw * (g.kw - 1) + 1 - w - g.pw)
    if not (g.ph or g.pw or bottom or right):
        return xp.ascontiguousarray(x)
    padded = xp.full((*x.shape[:-2], h + g.ph + bottom, w + g.pw + right), fill, x.dtype)
    padded[..., g.ph : g.ph + h, g.pw : g.pw + w] = x
    return padded


def _im2col(xp: Any, x4: Any, g: Any) -> Any:
    """(N, groups, C/groups * kh * kw, Ho * Wo): each output pixel's taps, zeros
    in the padding."""
    padded = _padded(xp, x4, g, g.ho, g.wo)
    s0, s1, s2, s3 = padded.strides
    windows = xp.lib.stride_tricks.as_strided(
        padded,
        shape=(g.n, g.c, g.kh, g.kw, g.ho, g.wo),
        strides=(s0, s1, s2 * g.dh, s3 * g.dw, s2 * g.sh, s3 * g.sw),
    )
    cg = g.c // g.groups
    return xp.ascontiguousarray(windows).reshape(g.n, g.groups, cg * g.kh * g.kw, g.ho * g.wo)


# -- attention ---------------------------------------------------------------------------
def scaled_dot_product_attention(q: Any, k: Any, v: Any, mask: Any = None, **options: Any) -> Any:
    """``softmax(q @ k^T * scale + mask) @ v`` as three steps: batched scores
    (cuBLAS, the scale its alpha), a softmax over keys (one kernel,
    :func:`_softmax_last`), batched values (cuBLAS). Queries that may attend to
    nothing give zeros (PyTorch's rule)."""
    xp = _xp(q)
    g = attention_geometry(q, k, v, mask, **options)
    if g.kv_repeat > 1:  # grouped-query attention: each key/value head serves several
        k, v = (xp.repeat(t, g.kv_repeat, axis=-3) for t in (k, v))
    batch = math.prod(g.batch)
    supported = gemm.supported(q, k, v)

    def flat(t: Any, rows: int, cols: int) -> Any:  # (batch, rows, cols), C-contiguous
        whole = xp.broadcast_to(t, (*g.batch, rows, cols))
        return xp.ascontiguousarray(whole).reshape(batch, rows, cols)

    if supported:
        scores = xp.empty((batch, g.length, g.source), q.dtype)
        queries, keys = flat(q, g.length, g.embed), flat(k, g.source, g.embed)
        gemm.matmul_into(
            scores, queries, keys, m=g.length, n=g.source, k=g.embed, b_transposed=True,
            alpha=g.scale,
        )  # fmt: skip
        scores = scores.reshape(*g.batch, g.length, g.source)
    else:
        scores = xp.matmul(q, xp.swapaxes(k, -1, -2))
        scores *= scores.dtype.type(g.scale)
    allowed = None
    if g.is_causal:
        # Query i sees keys 0..i (the top-left alignment, as PyTorch's and the
        # generic kernel's), also where L != S.
        allowed = xp.tril(xp.ones((g.length, g.source), dtype=bool))
    elif mask is not None and mask.dtype == np.bool_:
        allowed = mask
    elif mask is not None:
        scores += mask
    if allowed is not None:
        scores = xp.where(allowed, scores, scores.dtype.type(-np.inf))
    weights = _softmax_last(xp, scores)
    if not supported:
        return xp.matmul(weights, v)
    out = xp.empty((batch, g.length, g.value_embed), q.dtype)
    values = flat(v, g.source, g.value_embed)
    weights = xp.ascontiguousarray(weights).reshape(batch, g.length, g.source)
    gemm.matmul_into(out, weights, values, m=g.length, n=g.value_embed, k=g.source)
    return out.reshape(*g.batch, g.length, g.value_embed)


def _softmax_last(xp: Any, scores: Any) -> Any:
    """Softmax over the last axis, in place: one row kernel on the GPU
    (:mod:`.rows`), else expressions. A row with no finite maximum
    (every key masked) is shifted by 0, and one summing to 0 divided by 1:
    zeros."""
    if xp is not np and scores.flags.c_contiguous:
        rows = scores.reshape(-1, scores.shape[-1])
        if row_kernels.takes(rows) and row_kernels.softmax_rows(rows, rows) is not None:
            return scores
    top = scores.max(axis=-1, keepdims=True)
    top = xp.where(xp.isfinite(top), top, top.dtype.type(0))
    scores -= top
    weights = xp.exp(scores, out=scores)
    total = weights.sum(axis=-1, keepdims=True)
    weights /= xp.where(total > 0, total, total.dtype.type(1))
    return weights


# -- normalization ---------------------------------------------------------------------------
def _normalize_rows(
    xp: Any, rows: Any, eps: float, weight: Any = None, bias: Any = None, residual: Any = None
) -> Any:
    """Rows (plus ``residual``'s, if given) normalized to mean 0 and (biased)
    variance 1, then ``* weight + bias`` (each if given, of the rows' length),
    in a new array: one row kernel on the GPU (:mod:`.rows`), else
    expressions."""
    if xp is not np:
        rows = xp.ascontiguousarray(rows)
        extra = [a for a in (weight, bias, residual) if a is not None]
        if row_kernels.takes(rows) and all(
            a.dtype == rows.dtype and a.flags.c_contiguous for a in extra
        ):
            out = row_kernels.layer_norm_rows(rows, weight, bias, eps, residual)
            if out is not None:
                return out
    if residual is not None:
        rows = rows + residual
    mean = rows.mean(axis=-1, keepdims=True)
    centered = rows - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    var += var.dtype.type(eps)
    centered *= 1 / xp.sqrt(var)
    if weight is not None:
        centered *= weight
    if bias is not None:
        centered += bias
    return centered


def layer_norm(x: Any, *affine: Any, **options: Any) -> Any:
    """Layer norm over the trailing ``normalized_shape`` dimensions."""
    cols, weight, bias, eps = layer_norm_args(affine, **options)
    return _normalize_rows(_xp(x), x.reshape(-1, cols), eps, weight, bias).reshape(x.shape)


def add_layer_norm(x: Any, residual: Any, *affine: Any, **options: Any) -> Any:
    """``layer_norm(x + residual)`` (a compiled plan's fused node,
    ``backends/cuda/passes/add_layer_norm.py``): the sum is never written, the row
    kernel reads both."""
    xp = _xp(x)
    cols, weight, bias, eps = layer_norm_args(affine, **options)
    rows, extra = x.reshape(-1, cols), xp.ascontiguousarray(residual).reshape(-1, cols)
    return _normalize_rows(xp, rows, eps, weight, bias, extra).reshape(x.shape)


def group_norm(x: Any, *affine: Any, **options: Any) -> Any:
    """Group norm: statistics per sample over groups of channels."""
    return group_norm_with(functools.partial(_normalize_rows, _xp(x)), x, affine, **options)


# -- pooling ---------------------------------------------------------------------------------
def _windows(xp: Any, x: Any, g: Any, fill: float) -> Any:
    """(N*C, Ho, Wo, kh, kw) windows of the planes of ``x`` padded with ``fill``
    (a strided view of the padded planes)."""
    oh, ow = g.out_shape[-2:]
    padded = _padded(xp, x.reshape(-1, *x.shape[-2:]), g, oh, ow, fill)
    s0, s1, s2 = padded.strides
    return xp.lib.stride_tricks.as_strided(
        padded,
        shape=(padded.shape[0], oh, ow, g.kh, g.kw),
        strides=(s0, s1 * g.sh, s2 * g.sw, s1 * g.dh, s2 * g.dw),
    )


def max_pool2d(x: Any, **options: Any) -> Any:
    """Max over each window (padding never wins: it is -inf)."""
    g = pool_geometry("max_pool2d", x, **options)
    return _windows(_xp(x), x, g, -np.inf).max(axis=(-2, -1)).reshape(g.out_shape)


def avg_pool2d(x: Any, **options: Any) -> Any:
    """Mean over each window, PyTorch's divisors: the window clipped to the
    padded input (``count_include_pad``) or to the input itself."""
    xp = _xp(x)
    g = pool_geometry("avg_pool2d", x, **options)
    sums = _windows(xp, x, g, 0.0).sum(axis=(-2, -1))
    if g.divisor_override:
        sums /= sums.dtype.type(g.divisor_override)
        return sums.reshape(g.out_shape)
    (oh, ow), (h, w) = g.out_shape[-2:], x.shape[-2:]
    rows = _taps(oh, g.sh, g.kh, g.ph, h, g.count_include_pad)
    cols = _taps(ow, g.sw, g.kw, g.pw, w, g.count_include_pad)
    divisors = np.maximum(np.outer(rows, cols), 1).astype(x.dtype)
    sums /= xp.asarray(divisors)
    return sums.reshape(g.out_shape)


def _taps(out: int, stride: int, k: int, pad: int, size: int, with_pad: bool) -> np.ndarray:
    """Each window's divisor along one axis, as PyTorch counts it: the window
    clipped to the padded axis, or to the axis itself (host arithmetic on the
    geometry alone, made into a small array once per call)."""
    starts = np.arange(out) * stride - pad
    if with_pad:
        return np.minimum(starts + k, size + pad) - starts
    return np.minimum(starts + k, size) - np.maximum(starts, 0)


def adaptive_avg_pool2d(x: Any, output_size: Any) -> Any:
    """PyTorch's adaptive bins (floor starts, ceil ends): a reshaped mean where
    the sizes divide, else one mean per output row and column of bins."""
    xp = _xp(x)
    oh, ow = adaptive_size(x, output_size)
    h, w = x.shape[-2:]
    lead = x.shape[:-2]
    if h % oh == 0 and w % ow == 0:
        return x.reshape(*lead, oh, h // oh, ow, w // ow).mean(axis=(-3, -1))
    out = xp.empty((*lead, oh, ow), x.dtype)
    for i in range(oh):
        r0, r1 = (i * h) // oh, -((-(i + 1) * h) // oh)
        for j in range(ow):
            c0, c1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            out[..., i, j] = x[..., r0:r1, c0:c1].mean(axis=(-2, -1))
    return out


# -- activations -------------------------------------------------------------------------------
_GELU_SOURCE = "y = x * (T)0.5 * ((T)1 + erf(x * (T)0.70710678118654752440))"
_gelu_kernel: Any = None


def gelu(x: Any, approximate: str = "none") -> Any:
    """GELU as one fused CUDA kernel (``erf``; or the tanh formula)."""
    xp = _xp(x)
    x = as_float(x)  # ints as numpy's exp would make them (int8: float16)
    if approximate == "tanh":
        inner = xp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))
        return (0.5 * x * (1 + inner)).astype(x.dtype, copy=False)
    if xp is np:
        erf = np.frompyfunc(math.erf, 1, 1)(x * math.sqrt(0.5)).astype(x.dtype)
        return x * 0.5 * (1 + erf)
    global _gelu_kernel
    if _gelu_kernel is None:
        _gelu_kernel = xp.ElementwiseKernel("T x", "T y", _GELU_SOURCE, "eagerrt_gelu")
    if x.dtype == np.float16:  # CUDA's erf has no half overload: compute in float32
        return _gelu_kernel(x.astype(np.float32)).astype(np.float16)
    return _gelu_kernel(x)


# -- lookups ---------------------------------------------------------------------------------
def embedding(indices: Any, weight: Any, padding_idx: int | None = None) -> Any:
    """Rows of ``weight``; an index out of range is found on the device (no wait
    for it here) and fails the result when the host reads it."""
    xp = _xp(indices)
    num = weight.shape[0]
    message = f"an embedding index is out of range for a table of {num} rows"
    if xp is np:
        if indices.size and (indices.min() < 0 or indices.max() >= num):
            raise IndexError(message)
        return np.take(weight, indices, axis=0)
    if indices.size:
        check_later(((indices < 0) | (indices >= num)).any(), message)
    return xp.take(weight, xp.clip(indices, 0, num - 1), axis=0)
