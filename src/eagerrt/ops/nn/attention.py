"""``scaled_dot_product_attention``."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ..._core import ArgumentError
from ...tensor import Tensor
from ..registry import GENERIC, call_error, define_op
from .activation import softmax_numpy
from .common import RuleOut, Shape, float_dtype, flop_cost, present


class AttentionGeometry(NamedTuple):
    batch: Shape
    length: int
    source: int
    embed: int
    value_embed: int
    kv_repeat: int  # grouped-query attention: each key/value head serves this many
    scale: float  # the scores' factor: the given scale, else 1/sqrt(embed)
    is_causal: bool


def attention_geometry(
    q: Any,
    k: Any,
    v: Any,
    mask: Any = None,
    is_causal: bool = False,
    enable_gqa: bool = False,
    scale: float | None = None,
) -> AttentionGeometry:
    """Attention's checks and geometry. Its rule and kernels pass their static
    arguments on here (``**options``), so these are their defaults."""
    dtype = float_dtype("scaled_dot_product_attention", q, k, v)
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., L, E), got {t.shape}")
    length, embed = q.shape[-2:]
    source, key_embed = k.shape[-2:]
    if key_embed != embed:
        raise ValueError(f"query {q.shape} and key {k.shape} differ in their last dimension")
    if v.shape[-2] != source:
        raise ValueError(f"key {k.shape} and value {v.shape} differ in sequence length")
    kb, vb = k.shape[:-2], v.shape[:-2]
    repeat = 1
    if enable_gqa and q.ndim >= 3 and k.ndim >= 3 and v.ndim >= 3:
        heads, kv_heads = q.shape[-3], k.shape[-3]
        if kv_heads != v.shape[-3] or heads % kv_heads:
            raise ValueError(
                f"enable_gqa needs key/value heads ({kv_heads}, {v.shape[-3]}) equal and "
                f"dividing the query heads ({heads})"
            )
        repeat = heads // kv_heads
        kb, vb = (*kb[:-1], heads), (*vb[:-1], heads)
    try:
        batch = tuple(np.broadcast_shapes(q.shape[:-2], kb, vb))
    except ValueError:
        raise ValueError(
            f"batch dimensions of query {q.shape}, key {k.shape} and value {v.shape} "
            "do not broadcast"
        ) from None
    if mask is not None:
        if is_causal:
            raise ArgumentError("give either attn_mask or is_causal=True, not both")
        if mask.dtype != np.bool_ and mask.dtype != dtype:
            raise TypeError(
                f"attn_mask must be bool or {dtype} (the query's dtype), got {mask.dtype}"
            )
        scores = (*batch, length, source)
        try:
            if np.broadcast_shapes(mask.shape, scores) != scores:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"attn_mask {mask.shape} does not broadcast to the scores' shape "
                f"{(*batch, length, source)}"
            ) from None
    if scale is not None and (
        isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating))
    ):
        raise TypeError(f"scale must be a number or None, got {scale!r}")
    factor = 1.0 / math.sqrt(embed) if scale is None else float(scale)
    return AttentionGeometry(
        batch, length, source, embed, v.shape[-1], repeat, factor, bool(is_causal)
    )


def _sdpa_rule(query: Any, key: Any, value: Any, attn_mask: Any = None, **options: Any) -> RuleOut:
    geo = attention_geometry(query, key, value, attn_mask, **options)
    return (*geo.batch, geo.length, geo.value_embed), query.dtype


def _sdpa_cost(
    shape: Shape, dtype: np.dtype[Any], /, q: Tensor, k: Tensor, v: Tensor, *m: Any, **_: Any
) -> float:
    scores = math.prod(shape[:-1]) * k.shape[-2]
    return flop_cost(2.0 * scores * (q.shape[-1] + v.shape[-1]), 4.0 * scores)


def _sdpa_generic(q: Any, k: Any, v: Any, mask: Any = None, **options: Any) -> Any:
    """Attention in numpy-API calls: the scores, masked (a bool mask keeps its
    true entries; a float mask is added; causal keeps ``j <= i``), softmax over
    the keys, times the values."""
    g = attention_geometry(q, k, v, mask, **options)
    if g.kv_repeat > 1:  # grouped-query attention: each key/value head serves several
        k = np.repeat(k, g.kv_repeat, axis=-3)
        v = np.repeat(v, g.kv_repeat, axis=-3)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(g.scale)
    if g.is_causal:
        mask = np.tril(np.ones((g.length, g.source), np.bool_))
    if mask is not None and mask.dtype == np.bool_:
        scores = np.where(mask, scores, q.dtype.type(-np.inf))
    elif mask is not None:
        scores = scores + mask
    return np.matmul(softmax_numpy(scores, -1, False), v)


_sdpa = define_op(
    "scaled_dot_product_attention",
    _sdpa_rule,
    cost=_sdpa_cost,
    weak_scalars=False,
    doc="Attention ``softmax(q @ k^T * scale + mask) @ v``, as PyTorch's.",
)
_sdpa.register_kernel(GENERIC, _sdpa_generic)


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` over (..., L, E),
    (..., S, E) and (..., S, Ev) tensors, as
    ``torch.nn.functional.scaled_dot_product_attention``.

    ``attn_mask`` is boolean (True: may attend) or float (added to the scores)
    and broadcasts to (..., L, S); ``is_causal`` masks keys after each query's
    position; ``scale`` defaults to ``1/sqrt(E)``. Queries that may attend to
    nothing give zeros, as in PyTorch. ``dropout_p`` must be 0 (inference).

    >>> import eagerrt as ert
    >>> q = ert.ones((2, 4, 3, 8))
    >>> v = ert.arange(24.0).reshape(1, 1, 3, 8)
    >>> out = ert.scaled_dot_product_attention(q, q, v, is_causal=True)
    >>> out.shape, out.numpy()[0, 0, :, 0]
    ((2, 4, 3, 8), array([0., 4., 8.]))
    """
    if dropout_p != 0:
        raise call_error(
            ArgumentError,
            "scaled_dot_product_attention",
            (query, key, value),
            {"dropout_p": dropout_p},
            "runs inference only: dropout_p must be 0",
        )
    return _sdpa(
        query, key, value, *present(attn_mask),
        is_causal=bool(is_causal), scale=scale, enable_gqa=bool(enable_gqa),
    )  # fmt: skip
