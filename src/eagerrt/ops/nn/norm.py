"""Normalization: ``batch_norm`` (inference), ``layer_norm``, ``group_norm``."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._core import ArgumentError
from ...tensor import Tensor
from ..registry import GENERIC, call_error, define_op
from .common import RuleOut, Shape, check_shape, float_dtype, flop_cost, present


def _norm_cost(shape: Shape, dtype: np.dtype[Any], /, *args: Any, **_: Any) -> float:
    return flop_cost(0.0, 5.0 * math.prod(shape))


def _check_affine(weight: Any, bias: Any, shape: Shape, eps: Any) -> None:
    check_shape("weight", weight, shape)
    check_shape("bias", bias, shape)
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)):
        raise TypeError(f"eps must be a number, got {eps!r}")
    if not eps >= 0:
        raise ArgumentError(f"eps must be >= 0, got {eps!r}")


def affine_operands(args: tuple[Any, ...], has_weight: bool, has_bias: bool) -> tuple[Any, Any]:
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
    weight, bias = affine_operands(affine, has_weight, has_bias)
    float_dtype("batch_norm", input, running_mean, running_var, weight, bias)
    if input.ndim < 2:
        raise ValueError(f"batch_norm needs an (N, C, ...) input, got {input.shape}")
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        check_shape(name, t, (c,))
    _check_affine(weight, bias, (c,), eps)
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
    weight, bias = affine_operands(affine, has_weight, has_bias)
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
        input, running_mean, running_var, *present(weight, bias),
        has_weight=weight is not None, has_bias=bias is not None, eps=eps,
    )  # fmt: skip


def as_normalized_shape(normalized_shape: Any) -> Shape:
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
    weight, bias = affine_operands(affine, has_weight, has_bias)
    float_dtype("layer_norm", input, weight, bias)
    norm = as_normalized_shape(normalized_shape)
    if not norm or input.shape[input.ndim - len(norm) :] != norm or len(norm) > input.ndim:
        raise ValueError(
            f"normalized_shape {norm} must be the last dimensions of the input {input.shape}"
        )
    _check_affine(weight, bias, norm, eps)
    return input.shape, input.dtype


def _normalized_rows(rows: Any, eps: float) -> Any:
    """Each row minus its mean, over its standard deviation (biased variance)."""
    centered = rows - rows.mean(axis=-1, keepdims=True)
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(variance + rows.dtype.type(eps))


def layer_norm_args(
    affine: tuple[Any, ...],
    normalized_shape: Any = (),
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> tuple[int, Any, Any, float]:
    """A layer norm kernel's arguments: the rows' length (the normalized
    dimensions' size), the weight and bias as one such row each (None where not
    given), and eps. Kernels pass their static arguments on here (``**options``),
    so their defaults live here and in the rule."""
    weight, bias = affine_operands(affine, has_weight, has_bias)
    cols = math.prod(as_normalized_shape(normalized_shape))
    weight = None if weight is None else weight.reshape(cols)
    bias = None if bias is None else bias.reshape(cols)
    return cols, weight, bias, float(eps)


def _layer_norm_generic(x: Any, *affine: Any, **options: Any) -> Any:
    """layer_norm in numpy-API calls: rows of the trailing dimensions normalized,
    scaled and shifted."""
    cols, weight, bias, eps = layer_norm_args(affine, **options)
    out = _normalized_rows(x.reshape(-1, cols), eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.reshape(x.shape)


_layer_norm = define_op(
    "layer_norm",
    _layer_norm_rule,
    cost=_norm_cost,
    weak_scalars=False,
    doc="Layer normalization over the trailing ``normalized_shape`` dimensions.",
)
_layer_norm.register_kernel(GENERIC, _layer_norm_generic)


def layer_norm(
    input: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Tensor:
    """Normalize over the last ``len(normalized_shape)`` dimensions (biased
    variance), then scale and shift, as ``torch.nn.functional.layer_norm``.

    >>> import eagerrt as ert
    >>> ert.layer_norm(ert.asarray([[1.0, 3.0]]), (2,), eps=0.0).numpy()
    array([[-1.,  1.]])
    """
    return _layer_norm(
        input, *present(weight, bias),
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
    weight, bias = affine_operands(affine, has_weight, has_bias)
    float_dtype("group_norm", input, weight, bias)
    if input.ndim < 2:
        raise ValueError(f"group_norm needs an (N, C, ...) input, got {input.shape}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)):
        raise TypeError(f"num_groups must be an int, got {num_groups!r}")
    c = input.shape[1]
    if num_groups < 1 or c % num_groups:
        raise ValueError(f"{c} channels can't be split into num_groups={num_groups} groups")
    _check_affine(weight, bias, (c,), eps)
    return input.shape, input.dtype


def group_norm_with(
    normalize: Callable[[Any, float], Any],
    x: Any,
    affine: tuple[Any, ...],
    num_groups: int = 1,
    has_weight: bool = False,
    has_bias: bool = False,
    eps: float = 1e-5,
) -> Any:
    """group_norm with ``normalize(rows, eps)`` (a new array of the rows, each
    normalized): each sample's groups of channels as one row, then each channel
    scaled and shifted in place. Kernels pass their static arguments on here
    (``**options``), so their defaults live here and in the rule."""
    weight, bias = affine_operands(affine, has_weight, has_bias)
    n, c = x.shape[:2]
    out = normalize(x.reshape(n * num_groups, -1), float(eps)).reshape(n, c, -1)
    if weight is not None:
        out *= weight.reshape(c, 1)
    if bias is not None:
        out += bias.reshape(c, 1)
    return out.reshape(x.shape)


def _group_norm_generic(x: Any, *affine: Any, **options: Any) -> Any:
    """group_norm in numpy-API calls."""
    return group_norm_with(_normalized_rows, x, affine, **options)


_group_norm = define_op(
    "group_norm",
    _group_norm_rule,
    cost=_norm_cost,
    weak_scalars=False,
    doc="Group normalization: statistics per sample over groups of channels.",
)
_group_norm.register_kernel(GENERIC, _group_norm_generic)


def group_norm(
    input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Tensor:
    """Normalize each sample's channels in ``num_groups`` groups, then scale and
    shift per channel, as ``torch.nn.functional.group_norm``.

    >>> import eagerrt as ert
    >>> x = ert.asarray([[[1.0], [3.0], [5.0], [9.0]]])
    >>> ert.group_norm(x, 2, eps=0.0).numpy()[0, :, 0]
    array([-1.,  1., -1.,  1.])
    """
    return _group_norm(
        input, *present(weight, bias),
        num_groups=num_groups,
        has_weight=weight is not None, has_bias=bias is not None, eps=eps,
    )  # fmt: skip
