"""``onnx_erf``: the error function, an ONNX op eagerrt's own op set lacks.

Exported BERT-style models compute GELU as ``x * 0.5 * (1 + erf(x / sqrt(2)))``;
the importer rewrites that pattern into :func:`eagerrt.gelu` (one fused op), so
this op runs only for an ``Erf`` used some other way.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..ops.elementwise import scaled_cost
from ..ops.registry import define_op

__all__ = ["erf"]


def _rule(x: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if x.dtype.kind != "f":
        raise TypeError(f"erf is defined here for floating-point tensors, not {x.dtype}")
    return x.shape, x.dtype


erf = define_op(
    "onnx_erf",
    _rule,
    cost=scaled_cost(10),
    operands=1,
    doc="The error function, elementwise (ONNX's ``Erf``).",
)


@functools.cache
def _compiled() -> Any:
    import numba

    @numba.njit(nogil=True, cache=True)
    def erf_flat(x: Any, out: Any) -> None:  # pragma: no cover - compiled
        for i in range(x.size):
            out[i] = math.erf(x[i])

    return erf_flat


@erf.kernel()
def _erf(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float32) if x.dtype == np.float16 else x  # numba has no float16
    flat = np.ascontiguousarray(wide).reshape(-1)
    out = np.empty_like(flat)
    _compiled()(flat, out)
    return out.reshape(x.shape).astype(x.dtype, copy=False)
