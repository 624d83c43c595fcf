"""``one_hot`` and ``cross_entropy``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._core import ArgumentError
from ...tensor import Tensor
from ..registry import GENERIC, define_op
from .activation import softmax_numpy
from .common import INT64, RuleOut, check_shape, float_dtype, flop_cost, present


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
    return (*input.shape, int(num_classes)), INT64


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
    cost=lambda shape, dtype, *args, **_: flop_cost(0.0, math.prod(shape)),
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
    float_dtype("cross_entropy", input, w)
    if input.ndim < 1:
        raise ValueError("cross_entropy needs (C,), (N, C) or (N, C, d...) logits, got a scalar")
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    class_axis = 1 if input.ndim >= 2 else 0
    classes = input.shape[class_axis]
    check_shape("weight", w, (classes,))
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


def cross_entropy_kernel(log_softmax_last: Callable[[Any, bool], Any]) -> Callable[..., Any]:
    """cross_entropy's kernel, taking log-probabilities over the classes (the
    last axis, contiguous) from ``log_softmax_last(x, True)``: numpy's here, a
    backend's faster one in its own registration."""

    def kernel(
        x: np.ndarray, target: np.ndarray, *weight: np.ndarray, **options: Any
    ) -> np.ndarray:
        return _cross_entropy(x, target, weight, log_softmax_last, **options)

    kernel.__name__ = "cross_entropy"
    return kernel


def _cross_entropy(
    x: np.ndarray,
    target: np.ndarray,
    weight: tuple[np.ndarray, ...],
    log_softmax_last: Callable[[Any, bool], Any],
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> np.ndarray:
    w = weight[0] if weight else None
    class_axis = 1 if x.ndim >= 2 else 0
    classes = x.shape[class_axis]
    logp = log_softmax_last(np.ascontiguousarray(np.moveaxis(x, class_axis, -1)), True)
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


_cross_entropy_op = define_op(
    "cross_entropy",
    _cross_entropy_rule,
    cost=lambda shape, dtype, x, *rest, **_: flop_cost(0.0, 8.0 * x.size),
    weak_scalars=False,
    doc="Cross-entropy of logits against class indices or class probabilities.",
)
_cross_entropy_op.register_kernel(
    GENERIC, cross_entropy_kernel(lambda x, log: softmax_numpy(x, -1, log))
)


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
    return _cross_entropy_op(
        input, target, *present(weight),
        ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
    )  # fmt: skip
