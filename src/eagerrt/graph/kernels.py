"""Kernels for compiled graphs: each node's kernel, and where one exists its
*out form*, ``kernel(*arrays, out)``, which writes into a buffer the memory
plan gives it instead of allocating.

Out forms come from, in order: the op itself (``op.out_kernel``, which ops
made by passes such as fusion set), the table below (matmul, softmax), or
numpy's ufuncs (every elementwise op whose kernel is a ufunc: the rule's
dtype is the ufunc's own result type, so writing into ``out`` changes nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._core.config import config
from .ir import Node, Value

__all__ = ["eager_kernel", "kernel_for", "matmul_by_rows", "out_kernel_for", "writes_elementwise"]

OutKernel = Callable[..., Any]


def kernel_for(node: Node) -> Callable[..., Any]:
    """The kernel an eager call with these operands would run (specializers
    included), or where the op prepares for constant operands and some are
    constants, the kernel it prepared (see ``Op.prepare``)."""
    preparers = getattr(node.op, "_preparers", None)
    if preparers:
        preparer = preparers.get(node.out.device.name)
        constants = {
            i: v.const for i, v in enumerate(node.inputs) if type(v) is Value and v.is_const
        }
        if preparer is not None and constants:
            prepared = preparer(constants, *node.inputs, **node.static)
            if prepared is not None:
                return prepared
    return eager_kernel(node.op, node.inputs, node.static, node.out.device)


def eager_kernel(
    op: Any, inputs: Sequence[Any], static: dict[str, Any], device: Any
) -> Callable[..., Any]:
    """:func:`kernel_for` of a node given by its parts: ``op(*inputs, **static)`` on ``device``."""
    kernel = op._kernel_for(device)
    specializers = getattr(op, "_specializers", None)
    if specializers:
        specializer = specializers.get(device.name)
        if specializer is not None:
            kernel = specializer(*inputs, **static) or kernel
    return kernel


def _same_dtype(node: Node) -> bool:
    dtype = node.out.dtype
    return all(v.dtype == dtype for v in node.value_inputs())


def matmul_by_rows(node: Node) -> bool:
    """Whether a matmul node runs as ``linear_into``: a float (..., k) @ (k, n)
    product with rows enough to share, as one product over all leading
    dimensions in blocks of rows (numpy's matmul would make one BLAS call per
    leading index, each on BLAS's own threads), with an epilogue run on each
    block. Fewer rows stay one numpy call (measured: MiniLM through ert.onnx at
    batch 1, 128 rows, 26-27 ms that way against 28-31 ms through linear_into)."""
    a, b = node.inputs
    if type(a) is not Value or type(b) is not Value or not _same_dtype(node):
        return False
    if a.ndim < 2 or b.ndim != 2 or a.dtype.kind != "f" or node.out.shape[:-1] != a.shape[:-1]:
        return False
    from ..ops.nn import _LINEAR_ROWS, _LINEAR_SPLIT_FLOPS

    rows = math.prod(node.out.shape[:-1])
    return rows >= 2 * _LINEAR_ROWS and 2.0 * rows * b.shape[1] * b.shape[0] >= _LINEAR_SPLIT_FLOPS


def _matmul_out(node: Node) -> OutKernel | None:
    a, b = node.inputs
    if type(a) is not Value or type(b) is not Value or not _same_dtype(node):
        return None
    if matmul_by_rows(node):
        from ..ops.nn import linear_into

        # linear's weight is (n, k): b's transpose, a view; its product reads b in place.
        return lambda a, b, out, epilogue=None: linear_into(a, b.T, None, out, epilogue)
    from ..ops.nn import _BLAS_ONE_THREAD, _one_product

    big = a.ndim >= 1 and b.ndim >= 1 and node.out.ndim >= 1 and a.dtype.kind == "f"
    if big and math.prod(node.out.shape) * a.shape[-1] > _BLAS_ONE_THREAD:
        # Held to its thread only with two other tasks or more: one is often a
        # plan's own short side segment beside this one (measured MiniLM through
        # ert.onnx at batch 1: 27-29 ms, 31-32 ms holding BLAS for one).
        return lambda a, b, out: _one_product(a, b, out, max(2, config.num_threads))
    if a.ndim == 2 and b.ndim == 2:
        return np.ndarray.dot  # dot(a, b, out): half matmul's call cost on small matrices
    if a.ndim >= 1 and b.ndim >= 1 and node.out.ndim >= 1:
        return lambda a, b, out: np.matmul(a, b, out=out)
    return None


def _softmax_out(node: Node) -> OutKernel | None:
    x = node.inputs[0]
    axis = node.static.get("axis", -1)
    if type(x) is not Value or x.ndim == 0 or axis not in (-1, x.ndim - 1) or not _same_dtype(node):
        return None
    if x.dtype not in (np.dtype("float32"), np.dtype("float64")):
        return None
    from ..ops._numba_kernels import softmax_rows_into

    log = node.name == "log_softmax"
    return lambda x, out: softmax_rows_into(x, out, log)


def _relu_out(node: Node) -> OutKernel | None:
    x = node.inputs[0]
    if type(x) is not Value or not _same_dtype(node):
        return None
    return lambda x, out: np.maximum(x, 0, out=out)  # the eager kernel, written into out


def _linear_out(node: Node) -> OutKernel | None:
    """``linear_into``: one product over all leading dimensions, its pool kernel
    (:mod:`eagerrt.ops._pooled_linear`) set up now for the plan's shapes;
    ``epilogue=`` runs elementwise work on each block of rows (see
    :mod:`.passes.epilogue`, which runs most epilogues in a pool kernel of
    their own)."""
    if any(type(a) is not Value for a in node.inputs) or not _same_dtype(node):
        return None
    from ..ops.nn import linear_out_form

    return linear_out_form(node.inputs)


def _conv2d_out(node: Node) -> OutKernel | None:
    """conv2d into the plan's buffer; ``epilogue=`` runs elementwise work on
    runs of images as soon as they are done (see :mod:`.passes.epilogue`)."""
    x, w = node.inputs[:2]
    if any(type(a) is not Value for a in node.inputs) or not _same_dtype(node):
        return None
    if x.ndim != 4 or x.dtype.kind != "f":  # an unbatched image has no images to share
        return None
    from ..ops.nn import conv2d_out_form

    return conv2d_out_form(node.inputs, node.static, w.const if w.is_const else None)


def _layer_norm_out(node: Node) -> OutKernel | None:
    """layer_norm into the plan's buffer (its static arguments bound here: out
    forms get the arrays only)."""
    if any(type(a) is not Value for a in node.inputs) or not _same_dtype(node):
        return None
    from ..ops.nn import layer_norm_out_form

    return layer_norm_out_form(node.inputs, node.static)


def _attention_out(node: Node) -> OutKernel | None:
    """scaled_dot_product_attention into the plan's buffer."""
    if any(type(a) is not Value for a in node.inputs):
        return None
    from ..ops.nn import sdpa_out_form

    return sdpa_out_form(node.inputs, node.static)


_TABLE: dict[str, Callable[[Node], OutKernel | None]] = {
    "conv2d": _conv2d_out,
    "layer_norm": _layer_norm_out,
    "linear": _linear_out,
    "scaled_dot_product_attention": _attention_out,
    "relu": _relu_out,
    "matmul": _matmul_out,
    "softmax": _softmax_out,
    "log_softmax": _softmax_out,
}


def out_kernel_for(node: Node, kernel: Callable[..., Any]) -> OutKernel | None:
    """``kernel``'s out form for this node, or None (it allocates its result)."""
    if len(node.outputs) != 1 or node.static.get("out") is not None:
        return None
    own = getattr(node.op, "out_kernel", None)
    if own is not None:
        return own
    maker = _TABLE.get(node.name)
    if maker is not None:
        return maker(node)
    if isinstance(kernel, np.ufunc) and kernel.nout == 1 and not node.static:
        ufunc = kernel
        if ufunc.nin == 1:
            return lambda x, out: ufunc(x, out=out)
        return lambda x, y, out: ufunc(x, y, out=out)
    return None


def writes_elementwise(node: Node, kernel: Callable[..., Any]) -> bool:
    """Whether the out form reads each element before writing the same one, so
    it may write over an operand of the output's own shape (in place)."""
    if getattr(node.op, "elementwise", False) or node.name == "relu":
        return True
    return isinstance(kernel, np.ufunc) and not node.static
