"""``linear`` and ``embedding``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..._core import ArgumentError
from ..registry import GENERIC, define_op
from .common import RuleOut, check_shape, float_dtype, flop_cost


def _linear_rule(input: Any, weight: Any, bias: Any = None) -> RuleOut:
    float_dtype("linear", input, weight, bias)
    if weight.ndim != 2:
        raise ValueError(f"linear needs an (out_features, in_features) weight, got {weight.shape}")
    if input.ndim < 1 or input.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"input {input.shape} must end in in_features={weight.shape[1]} (weight {weight.shape})"
        )
    check_shape("bias", bias, (weight.shape[0],))
    return (*input.shape[:-1], weight.shape[0]), input.dtype


def _linear_generic(x: Any, weight: Any, bias: Any = None) -> Any:
    """``x @ weight.T + bias``."""
    out = np.matmul(x, np.swapaxes(weight, -1, -2))
    return out if bias is None else out + bias


linear = define_op(
    "linear",
    _linear_rule,
    cost=lambda shape, dtype, x, w, *b: flop_cost(2.0 * math.prod(shape) * w.shape[1], 0.0),
    weak_scalars=False,
    doc="""``input @ weight.T + bias`` with PyTorch's (out_features, in_features)
    weight, as ``torch.nn.functional.linear`` (the bias is optional).

    >>> import eagerrt as ert
    >>> ert.linear(ert.ones((2, 3)), ert.ones((4, 3)), ert.ones(4)).numpy()
    array([[4., 4., 4., 4.],
           [4., 4., 4., 4.]])
    """,
)
linear.register_kernel(GENERIC, _linear_generic)


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
    cost=lambda shape, dtype, *args, **_: flop_cost(0.0, 2.0 * math.prod(shape)),
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
