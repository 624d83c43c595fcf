"""Array-API code written once, run on numpy and on eagerrt (asynchronously).

The function below knows nothing of eagerrt: it asks its input for its namespace
(``x.__array_namespace__()``), as SciPy and scikit-learn do, and uses only the
standard's functions. Given eagerrt tensors, every call returns at once and the
work runs as inputs become ready; ``await`` collects the result.

Run: ``.venv/bin/python examples/array_api_generic.py``
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import eagerrt as ert


def robust_standardize(x: Any) -> Any:
    """Centre each column on its median and scale by its interquartile range,
    then clip outliers to [-3, 3] and zero any NaNs: plain Array API code."""
    xp = x.__array_namespace__()
    n = x.shape[0]
    ordered = xp.sort(x, axis=0)
    median = ordered[n // 2, ...]
    iqr = ordered[(3 * n) // 4, ...] - ordered[n // 4, ...]
    z = (x - median) / xp.where(iqr > 0, iqr, xp.ones_like(iqr))
    z = xp.clip(z, min=-3.0, max=3.0)
    z[xp.isnan(z)] = 0.0  # a write, ordered after every read of z above
    return z


async def main() -> None:
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1000, 8))
    data[rng.random(data.shape) < 0.01] = np.nan

    # numpy 2 is itself an Array API namespace: the reference.
    expected = robust_standardize(data)

    x = ert.asarray(data)
    z = robust_standardize(x)  # returns at once: shape and dtype known now
    namespace = z.__array_namespace__().__name__
    print(f"eagerrt result: shape={z.shape}, dtype={z.dtype}, namespace={namespace}")
    got = await z
    print("matches numpy:", bool(np.allclose(got, expected, equal_nan=True)))
    print("NaNs left:", int(ert.sum(ert.isnan(z))))


if __name__ == "__main__":
    asyncio.run(main())
