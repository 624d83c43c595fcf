"""Seeded random tensors, reproducible whatever thread fills them.

Each call takes its seed at call time (from ``seed=`` or from the module's
generator, which :func:`seed` resets), so results depend only on the program's
order of calls, never on which worker ran first.

>>> import eagerrt as ert
>>> a = ert.random.uniform((2, 2), seed=0).numpy()
>>> b = ert.random.uniform((2, 2), seed=0).numpy()
>>> bool((a == b).all())
True
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._core import ArgumentError, DTypeError, config, renew_after_fork
from ..devices.base import Device
from ..tensor import Tensor
from . import registry
from ._rules import RuleOut, shape_tuple, to_dtype
from .registry import GENERIC, define_op

__all__ = ["normal", "seed", "uniform"]

_seed_lock = threading.Lock()
renew_after_fork(__name__, "_seed_lock")
_seeds = np.random.default_rng()


def seed(value: int) -> None:
    """Reset the generator that draws a seed for calls made without ``seed=``."""
    global _seeds
    with _seed_lock:
        _seeds = np.random.default_rng(value)


def _next_seed(explicit: int | None) -> int:
    if explicit is not None:
        seed = operator.index(explicit)
        if seed < 0:
            raise ArgumentError(f"seed must be a non-negative int, got {explicit!r}")
        return seed
    with _seed_lock:
        return int(_seeds.integers(2**63))


def _random_rule(*, shape: Any, dtype: Any, seed: int, a: float, b: float, dist: str) -> RuleOut:
    dt = to_dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise DTypeError(f"random {dist} supports float32 and float64, not {dt}")
    for name, number in (("low/mean", a), ("high/std", b)):
        if not isinstance(number, (int, float, np.integer, np.floating)):
            raise DTypeError(f"{name} must be a real number, got {number!r}")
    if dist == "normal" and b < 0:
        raise ArgumentError(f"std must be non-negative, got {b}")
    return shape_tuple(shape), dt


def _random_cost(out_shape: tuple[int, ...], out_dtype: Any, /, **_: Any) -> float:
    return config.op_overhead_ns + 4 * math.prod(out_shape) * config.ns_per_element


_random = define_op("random", _random_rule, cost=_random_cost, doc="Seeded random samples.")
_random.stateful = True


@_random.kernel(GENERIC)
def _random_kernel(
    *, shape: Any, dtype: Any, seed: int | None, a: float, b: float, dist: str
) -> np.ndarray:
    rng = np.random.default_rng(_next_seed(None) if seed is None else seed)
    dt = np.dtype(dtype)
    if dist == "uniform":
        out = rng.random(shape, dtype=dt)
        out *= b - a
    else:
        out = rng.standard_normal(shape, dtype=dt)
        out *= b
    out += a
    return out


def _sample(
    dist: str, shape: Any, a: float, b: float, dtype: Any, seed: int | None, device: Any
) -> Tensor:
    """The op's call. Its seed: the caller's, else drawn now; inside
    ``ert.function`` without one, None: drawn each time the compiled function
    runs, so every call samples anew, as eager calls do."""
    if seed is not None or not registry.tracing():
        seed = _next_seed(seed)
    return _random(shape=shape, dtype=dtype, seed=seed, a=a, b=b, dist=dist, device=device)


def uniform(
    shape: int | Sequence[int],
    low: float = 0.0,
    high: float = 1.0,
    *,
    dtype: Any = "float64",
    seed: int | None = None,
    device: str | Device | None = None,
) -> Tensor:
    """Samples from ``[low, high)``, reproducible for a given ``seed``."""
    return _sample("uniform", shape, low, high, dtype, seed, device)


def normal(
    shape: int | Sequence[int],
    mean: float = 0.0,
    std: float = 1.0,
    *,
    dtype: Any = "float64",
    seed: int | None = None,
    device: str | Device | None = None,
) -> Tensor:
    """Samples from a normal distribution, reproducible for a given ``seed``."""
    return _sample("normal", shape, mean, std, dtype, seed, device)
