"""erf for float32 work as a rational function: only multiplies, adds and one divide,
which numba's loops vectorize, where ``math.erf`` is a scalar libm call per element
(measured 8-17 ns vs 1 ns per element here: GELU was the slowest step of a BERT layer).

``erf(z) ~ z * P(z^2) / Q(z^2)`` for ``|z| < ERF_CLAMP``, and +-1 beyond (float32's
erf rounds to +-1 there). P and Q (degree 5 each, Q(0) = 1) were fitted to ``math.erf``
by linear least squares on 4,000 Chebyshev nodes of [0, ERF_CLAMP], iteratively
reweighted towards the minimax solution: the largest absolute error is 1.7e-8 inside
the clamp and 3e-8 (erfc(3.92)) past it, under half float32's spacing near 1. GELU
evaluates it in float32 (in float64, each float32 GELU cost twice as much: 1.0 vs
0.57 ns an element, half the vector lanes), the roundings of the polynomials
adding to erf's error: the GELU is off the ``math.erf`` form's by at most
``1.6e-7 * |x|`` plus its own rounding (measured on [-12, 12]; PyTorch's float32
GELU: 3.1e-7).

Only float32 (and float16, computed in float32) uses it: float64 results keep
``math.erf``, whose accuracy this fit doesn't have.

>>> import math
>>> max(abs(erf_float64_rational(z / 100) - math.erf(z / 100)) for z in range(-500, 501)) < 3e-8
True
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "ERF_CLAMP",
    "ERF_P",
    "ERF_Q",
    "INV_SQRT2",
    "erf_float64_rational",
    "erf_rational_inside",
    "erf_source_lines",
]

#: GELU's erf argument is x / sqrt(2): the eager kernel and generated code share this.
INV_SQRT2 = 1.0 / math.sqrt(2.0)

#: Beyond this, float32's erf is +-1.
ERF_CLAMP = 3.92
#: Numerator coefficients, lowest power of z^2 first.
ERF_P = (
    1.1283790228688166,
    0.19275663583434346,
    0.05305931036239362,
    0.0038679471578819936,
    0.00028746052237366187,
    2.0346641103916056e-06,
)
#: Denominator coefficients, lowest power of z^2 first (the constant is 1).
ERF_Q = (
    1.0,
    0.5041577922303432,
    0.11508137519415396,
    0.01517155656925243,
    0.0011880028270839203,
    3.806890331929881e-05,
)


def erf_float64_rational(z: float) -> float:
    """The approximation on a Python float (the reference for the generated forms)."""
    if not abs(z) < ERF_CLAMP:
        return 1.0 if z > 0 else -1.0
    return erf_rational_inside(z)


def erf_rational_inside(z: Any) -> Any:
    """``z * P(z^2) / Q(z^2)``, the approximation inside the clamp, of a Python
    float or of a numpy array (computed in its dtype)."""
    t = z * z
    p = q = 0.0
    for a in reversed(ERF_P):
        p = p * t + a
    for b in reversed(ERF_Q):
        q = q * t + b
    return z * p / q


def erf_source_lines(z: str, result: str, tmp: str, scalar: str = "np.float32") -> list[str]:
    """Python/numba statements setting ``result`` to the approximation of erf at
    the expression ``z`` of type ``scalar``, every constant of that type too, so
    numba computes in it (variables named ``tmp`` + suffix are used).
    Branch-free but for one select, so loops over it vectorize; exactly +-1 past
    the clamp (GELU of -inf is nan, of a large negative x -0.0, as with ``math.erf``)."""
    a, zc, t, p, q = (f"{tmp}{s}" for s in ("a", "z", "t", "p", "q"))

    def c(value: float) -> str:
        return f"{scalar}({value!r})"

    clamp = c(ERF_CLAMP)
    lines = [f"{a} = {z}", f"{zc} = min(max({a}, -{clamp}), {clamp})", f"{t} = {zc} * {zc}"]
    for poly, coefficients in ((p, ERF_P), (q, ERF_Q)):  # Horner's rule
        lines.append(f"{poly} = {c(coefficients[-1])}")
        lines += [f"{poly} = {poly} * {t} + {c(k)}" for k in reversed(coefficients[:-1])]
    lines.append(
        f"{result} = {zc} * {p} / {q} if abs({a}) < {clamp} else ({c(1.0)} if {a} > 0 else -{c(1.0)})"
    )
    return lines
