"""The CPU's out forms: how graph mode writes a product, a convolution, a norm,
attention or a softmax straight into the buffer its memory plan gives (see
:mod:`eagerrt.graph.kernels`), registered on each op for the "cpu" device as
this backend loads. Elementwise ufuncs need none: their generic out form is
numpy's own ``out=``.
"""

from __future__ import annotations

import math

import numpy as np

from ..._core import config, precision
from ...graph.ir import Node, Value
from ...graph.kernels import OutForm
from ...ops.registry import get_op
from . import bf16
from .attention import sdpa_out_form
from .conv import conv2d_out_form
from .linear import LINEAR_ROWS, LINEAR_SPLIT_FLOPS, linear_into, linear_out_form
from .norm import layer_norm_out_form
from .numba_kernels import softmax_rows_into
from .threads import BLAS_ONE_THREAD, one_product

__all__ = ["matmul_by_rows"]


def _arrays(node: Node) -> bool:
    """Whether every operand is a value (no weak scalar) of the result's dtype."""
    dtype = node.out.dtype
    return all(type(a) is Value and a.dtype == dtype for a in node.inputs)


def in_bf16(node: Node) -> bool:
    """Whether this node's product runs with bfloat16 operands: the plan is
    compiled in bfloat16 and the product is float32 throughout."""
    return precision.current() == precision.BFLOAT16 and node.out.dtype == np.float32


def _constant(v: Value) -> np.ndarray | None:
    return v.const if v.is_const and isinstance(v.const, np.ndarray) else None


def matmul_by_rows(node: Node) -> bool:
    """Whether a matmul node runs as ``linear_into``: a float (..., k) @ (k, n)
    product with rows enough to share, as one product over all leading
    dimensions in blocks of rows (numpy's matmul would make one BLAS call per
    leading index, each on BLAS's own threads), with an epilogue run on each
    block. Fewer rows stay one numpy call (measured: MiniLM through ert.onnx at
    batch 1, 128 rows, 26-27 ms that way against 28-31 ms through linear_into)."""
    a, b = node.inputs
    if not _arrays(node):
        return False
    if a.ndim < 2 or b.ndim != 2 or a.dtype.kind != "f" or node.out.shape[:-1] != a.shape[:-1]:
        return False
    rows = math.prod(node.out.shape[:-1])
    return rows >= 2 * LINEAR_ROWS and 2.0 * rows * b.shape[1] * b.shape[0] >= LINEAR_SPLIT_FLOPS


@get_op("matmul").out_form("cpu")
def _matmul_out(node: Node) -> OutForm | None:
    a, b = node.inputs
    if not _arrays(node):
        return None
    if in_bf16(node) and a.ndim >= 1 and b.ndim == 2 and node.out.ndim == a.ndim:
        # (..., k) @ (k, n): a linear layer in another spelling (ONNX's MatMul).
        rows = math.prod(node.out.shape[:-1])
        return bf16.linear_form(rows, _constant(b), transposed=True, with_bias=False)
    if matmul_by_rows(node):
        # linear's weight is (n, k): b's transpose, a view; its product reads b in place.
        return lambda a, b, out, epilogue=None: linear_into(a, b.T, None, out, epilogue)
    big = a.ndim >= 1 and b.ndim >= 1 and node.out.ndim >= 1 and a.dtype.kind == "f"
    if big and math.prod(node.out.shape) * a.shape[-1] > BLAS_ONE_THREAD:
        # Held to its thread only with two other tasks or more: one is often a
        # plan's own short side segment beside this one (measured MiniLM through
        # ert.onnx at batch 1: 27-29 ms, 31-32 ms holding BLAS for one).
        return lambda a, b, out: one_product(a, b, out, max(2, config.num_threads))
    if a.ndim == 2 and b.ndim == 2:
        return np.ndarray.dot  # dot(a, b, out): half matmul's call cost on small matrices
    if a.ndim >= 1 and b.ndim >= 1 and node.out.ndim >= 1:
        return lambda a, b, out: np.matmul(a, b, out=out)
    return None


@get_op("softmax").out_form("cpu")
@get_op("log_softmax").out_form("cpu")
def _softmax_out(node: Node) -> OutForm | None:
    x = node.inputs[0]
    axis = node.static.get("axis", -1)
    if not _arrays(node) or x.ndim == 0 or axis not in (-1, x.ndim - 1):
        return None
    if x.dtype not in (np.dtype("float32"), np.dtype("float64")):
        return None
    log = node.name == "log_softmax"
    return lambda x, out: softmax_rows_into(x, out, log)


@get_op("relu").out_form("cpu")
def _relu_out(node: Node) -> OutForm | None:
    if not _arrays(node):
        return None
    return lambda x, out: np.maximum(x, 0, out=out)  # the eager kernel, written into out


@get_op("linear").out_form("cpu")
def _linear_out(node: Node) -> OutForm | None:
    """``linear_into``: one product over all leading dimensions, its pool kernel
    (:mod:`eagerrt.backends.cpu.pooled_linear`) set up now for the plan's shapes;
    ``epilogue=`` runs elementwise work on each block of rows (see
    :mod:`.passes.epilogue`, which runs most epilogues in a pool kernel of
    their own)."""
    if not _arrays(node):
        return None
    x, w = node.inputs[:2]
    if in_bf16(node) and w.ndim == 2:
        rows = math.prod(x.shape[:-1])
        return bf16.linear_form(rows, _constant(w), False, len(node.inputs) == 3)
    return linear_out_form(node.inputs)


@get_op("conv2d").out_form("cpu")
def _conv2d_out(node: Node) -> OutForm | None:
    """conv2d into the plan's buffer; ``epilogue=`` runs elementwise work on
    runs of images as soon as they are done (see :mod:`.passes.epilogue`)."""
    x, w = node.inputs[:2]
    if not _arrays(node):
        return None
    if x.ndim != 4 or x.dtype.kind != "f":  # an unbatched image has no images to share
        return None
    if in_bf16(node):
        return bf16.conv2d_form(node.inputs, node.static, _constant(w))
    return conv2d_out_form(node.inputs, node.static, w.const if w.is_const else None)


@get_op("layer_norm").out_form("cpu")
def _layer_norm_out(node: Node) -> OutForm | None:
    """layer_norm into the plan's buffer (its static arguments bound here: out
    forms get the arrays only)."""
    return layer_norm_out_form(node.inputs, node.static) if _arrays(node) else None


@get_op("scaled_dot_product_attention").out_form("cpu")
def _attention_out(node: Node) -> OutForm | None:
    """scaled_dot_product_attention into the plan's buffer."""
    if any(type(a) is not Value for a in node.inputs):
        return None
    return sdpa_out_form(node.inputs, node.static)
