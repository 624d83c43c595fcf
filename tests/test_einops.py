"""einops' top-level API on eagerrt tensors (``eagerrt/einops_backend.py``).

einops finds a tensor's backend among its ``AbstractBackend`` subclasses whose
framework is imported; eagerrt defines one whichever of the two is imported
first, without importing einops itself.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import eagerrt as ert

einops = pytest.importorskip("einops", reason="einops is in the test extra")

X = np.arange(2 * 3 * 4 * 6, dtype=np.float64).reshape(2, 3, 4, 6)


@pytest.mark.parametrize(
    ("pattern", "sizes"),
    [
        ("b c h w -> b h w c", {}),
        ("b c h w -> (b c) (h w)", {}),
        ("b c (h h2) (w w2) -> b (c h2 w2) h w", {"h2": 2, "w2": 2}),
        ("b c h w -> b c (w h)", {}),
    ],
)
def test_rearrange_equals_numpys(pattern: str, sizes: dict[str, int]) -> None:
    got = einops.rearrange(ert.asarray(X), pattern, **sizes)
    assert isinstance(got, ert.Tensor)
    np.testing.assert_array_equal(got.numpy(), einops.rearrange(X, pattern, **sizes))


@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min", "prod"])
def test_reduce_equals_numpys(reduction: str) -> None:
    pattern = "b c (h h2) w -> b c h"
    got = einops.reduce(ert.asarray(X), pattern, reduction, h2=2)
    np.testing.assert_allclose(got.numpy(), einops.reduce(X, pattern, reduction, h2=2))


def test_repeat_pack_unpack_einsum_and_parse_shape() -> None:
    t = ert.asarray(X)
    np.testing.assert_array_equal(
        einops.repeat(t, "b c h w -> b c h w r", r=2).numpy(),
        einops.repeat(X, "b c h w -> b c h w r", r=2),
    )
    packed, shapes = einops.pack([t, ert.asarray(X[:, :1])], "b * h w")
    assert packed.shape == (2, 4, 4, 6)
    first, second = einops.unpack(packed, shapes, "b * h w")
    np.testing.assert_array_equal(first.numpy(), X)
    np.testing.assert_array_equal(second.numpy(), X[:, :1])
    np.testing.assert_allclose(
        einops.einsum(t, t, "b c h w, b c h w -> b c").numpy(),
        einops.einsum(X, X, "b c h w, b c h w -> b c"),
    )
    assert einops.parse_shape(t, "b c _ w") == {"b": 2, "c": 3, "w": 6}


@pytest.mark.parametrize("first", ["einops", "eagerrt"])
def test_either_import_order_finds_the_backend(first: str) -> None:
    code = (
        f"import {first}\n"
        "import sys\n"
        "import eagerrt as ert, einops, numpy as np\n"
        "t = ert.asarray(np.ones((2, 3)))\n"
        "assert type(einops.rearrange(t, 'a b -> b a')).__name__ == 'Tensor'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_importing_eagerrt_does_not_import_einops() -> None:
    code = "import sys, eagerrt\nassert 'einops' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
