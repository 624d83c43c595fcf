"""Matmul precision as a setting: float32 exact by default, bfloat16 products
where asked (``ert.config.matmul_precision``, ``ert.function(precision=...)``),
a clear error where the CPU or device can't run them at speed.

The bfloat16 products themselves run through MKL's ``cblas_gemm_bf16bf16f32``.
On a CPU without AMX-BF16 or AVX512-BF16 eagerrt refuses them (MKL would
emulate them, slower than float32); these tests let the CPU check pass
(``fast_bf16``) so that MKL's emulation computes the same arithmetic on any
CI machine, and compare with a reference built from the rounded operands.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eagerrt as ert
from eagerrt.backends.cpu import bf16, blas

RNG = np.random.default_rng(23)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture
def fast_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """This CPU passes for one with AVX512-BF16 (MKL emulates the products
    where it has none: the same arithmetic, slower); skips without MKL."""
    if blas.mkl_with_bf16() is None:
        pytest.skip("bfloat16 products need MKL (the mkl extra)")
    monkeypatch.setattr(bf16, "cpu_features", lambda: ("test CPU", frozenset({"avx512bf16"})))


def rounded(a: np.ndarray) -> np.ndarray:
    """``a`` with each element rounded to bfloat16, as float64 (a reference
    independent of eagerrt's kernel: the nearest bfloat16, ties to even, and
    past the largest one's half step, infinity; finite ``a``)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    low = bits & 0xFFFF0000
    high = low + 0x10000  # the next bfloat16 away from zero (its bits: infinity's past the top)

    def as_float(b: np.ndarray) -> np.ndarray:
        value = b.astype(np.uint32).view(np.float32).astype(np.float64)
        # Infinity's bits, reached from the largest finite value, stand for 2**128.
        return np.where(np.isinf(value), np.copysign(2.0**128, value), value)

    value = a.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d_low, d_high = np.abs(value - as_float(low)), np.abs(as_float(high) - value)
    even_low = (low >> 16) % 2 == 0
    pick_high = (d_high < d_low) | ((d_high == d_low) & ~even_low)
    result = np.where(pick_high, as_float(high), as_float(low))
    return np.where(np.abs(result) == 2.0**128, np.copysign(np.inf, result), result)


def bf16_error(got: np.ndarray, want_bf16: np.ndarray, want_f32: np.ndarray) -> None:
    """``got`` is the product of bfloat16-rounded operands summed in float32
    (close to ``want_bf16``), and measurably not the float32 product."""
    scale = np.abs(want_bf16).max()
    assert np.abs(got - want_bf16).max() <= 2e-5 * scale
    assert np.abs(got - want_f32).max() >= 1e-4 * scale


# -- the setting ---------------------------------------------------------------------------


def test_float32_is_the_default_and_spellings_are_accepted() -> None:
    assert ert.config.matmul_precision == "float32"
    ert.config.matmul_precision = "bf16"
    assert ert.config.matmul_precision == "bfloat16"
    ert.config.matmul_precision = "FP32"
    assert ert.config.matmul_precision == "float32"
    assert ert.function(lambda x: x, precision="bf16").precision == "bfloat16"


@pytest.mark.parametrize("bad", ["fp16", "tf32", 16, None])
def test_an_unknown_precision_is_refused_where_it_is_given(bad: Any) -> None:
    with pytest.raises(ert.ArgumentError, match="matmul precision must be one of"):
        ert.config.matmul_precision = bad
    if bad is not None:  # None is ert.function's "follow the setting"
        with pytest.raises(ert.ArgumentError):
            ert.function(lambda x: x, precision=bad)


def test_a_cpu_without_bf16_instructions_says_which_it_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bf16, "cpu_features", lambda: ("oldcpu", frozenset()))
    w = ert.asarray(rand(8, 4))
    f = ert.function(lambda x: ert.linear(x, w), precision="bfloat16")
    with pytest.raises(ert.PrecisionError, match=r"AMX-BF16 or AVX512-BF16.*\(oldcpu\)"):
        f(ert.asarray(rand(2, 4)))
    # The same function in float32 (the setting, not the function, decides) still runs.
    g = ert.function(lambda x: ert.linear(x, w))
    assert g(ert.asarray(rand(2, 4))).shape == (2, 8)


def test_bf16_without_mkl_names_mkl(fast_bf16: None) -> None:
    ert.config.blas = "numpy"
    f = ert.function(lambda x: x @ x, precision="bfloat16")
    with pytest.raises(ert.PrecisionError, match="MKL"):
        f(ert.asarray(rand(4, 4)))


def test_a_device_without_bf16_products_refuses_them() -> None:
    x = ert.asarray(rand(4, 4), device="teststream:0")
    f = ert.function(lambda x: x @ x, precision="bfloat16")
    with pytest.raises(ert.PrecisionError, match="no bfloat16 products"):
        f(x)


def test_the_precision_survives_pickling() -> None:
    f = ert.function(abs, precision="bfloat16")
    assert pickle.loads(pickle.dumps(f)).precision == "bfloat16"


# -- rounding ------------------------------------------------------------------------------


def test_rounding_to_bf16_is_to_nearest_ties_to_even() -> None:
    values = np.array(
        [1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -2.5, 0.0, -0.0, np.inf, -np.inf,
         3.4e38, 1e-40],
        np.float32,
    )  # fmt: skip
    got = bf16.widen(bf16.round_to_bf16(values))
    want = [1.0, 1.0, 1 + 4 * 2**-8, 1 + 2 * 2**-8, -2.5, 0.0, -0.0, np.inf, -np.inf, np.inf]
    np.testing.assert_array_equal(got[:-1], np.array(want, np.float32))
    assert np.signbit(got[6])
    assert 0 < got[-1] < 1.1e-40  # a subnormal stays a subnormal
    nan = bf16.widen(bf16.round_to_bf16(np.array([np.nan, -np.nan], np.float32)))
    assert np.isnan(nan).all()


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=64))
def test_rounding_matches_the_nearest_bfloat16(values: list[float]) -> None:
    a = np.array(values, np.float32)
    got = bf16.widen(bf16.round_to_bf16(a)).astype(np.float64)
    np.testing.assert_array_equal(got, rounded(a))


def test_large_arrays_round_on_the_pool_the_same() -> None:
    a = rand(300, 700)  # above the parallel loop's threshold
    np.testing.assert_array_equal(bf16.widen(bf16.round_to_bf16(a)), rounded(a))


# -- bfloat16 products ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "workers"),
    [(1, 2), (37, 2), (1500, 2), (1500, 1)],  # 1500: the epilogue in units of rows
)
def test_linear_with_bias_and_epilogue_in_bf16(fast_bf16: None, rows: int, workers: int) -> None:
    ert.config.num_threads = workers  # (one: every unit on this thread)
    w, b = ert.asarray(rand(96, 64)), ert.asarray(rand(96))
    x = rand(rows, 64)
    f = ert.function(lambda x: ert.relu(ert.linear(x, w, b)) * 2.0, precision="bfloat16")
    got = f(ert.asarray(x)).numpy()
    want_bf16 = np.maximum(rounded(x) @ rounded(w.numpy()).T + b.numpy(), 0) * 2
    want_f32 = np.maximum(x @ w.numpy().T + b.numpy(), 0) * 2
    bf16_error(got, want_bf16, want_f32)
    assert "bfloat16 (1): %" in f.explain(ert.asarray(x))


def test_matmul_by_a_weight_and_by_an_activation_in_bf16(fast_bf16: None) -> None:
    w = ert.asarray(rand(48, 80))
    x, y = rand(2, 30, 48), rand(80, 16)
    f = ert.function(lambda x, y: (x @ w) @ y, precision="bfloat16")
    got = f(ert.asarray(x), ert.asarray(y)).numpy()
    h = (rounded(x) @ rounded(w.numpy())).astype(np.float32)
    want_bf16 = rounded(h) @ rounded(y)
    bf16_error(got, want_bf16, (x @ w.numpy()) @ y)


@pytest.mark.parametrize(
    ("options", "channels", "groups"),
    [
        ({"padding": 1}, 8, 1),  # 3x3
        ({"stride": 2, "padding": 3}, 3, 1),  # a stem's 7x7, stride 2
        ({}, 16, 1),  # 1x1: the image is its own im2col matrix
        ({"padding": 2, "dilation": 2}, 8, 2),  # dilated, grouped
    ],
)
def test_conv2d_in_bf16(
    fast_bf16: None, options: dict[str, Any], channels: int, groups: int
) -> None:
    import torch

    kernel = 7 if options.get("stride") == 2 else 1 if not options else 3
    w = rand(12, channels // groups, kernel, kernel)
    bias = rand(12)
    x = rand(3, channels, 15, 13)
    wt, bt = ert.asarray(w), ert.asarray(bias)
    f = ert.function(
        lambda x: ert.relu(ert.conv2d(x, wt, bt, groups=groups, **options)), precision="bfloat16"
    )
    got = f(ert.asarray(x)).numpy()

    def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        out = torch.nn.functional.conv2d(
            torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias.astype(x.dtype)),
            groups=groups, **options,
        )  # fmt: skip
        return np.maximum(out.numpy(), 0)

    want_bf16 = reference(rounded(x), rounded(w))  # float64: exact sums of rounded operands
    bf16_error(got, want_bf16, reference(x, w))


def test_convolutions_round_the_same_off_the_pool(
    fast_bf16: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eagerrt.backends.cpu import shared_pool

    c = ert.asarray(rand(6, 4, 3, 3))
    x = ert.asarray(rand(2, 4, 11, 9))
    on_pool = ert.function(lambda x: ert.conv2d(x, c, padding=1), precision="bf16")(x).numpy()
    monkeypatch.setattr(shared_pool, "ready", lambda: False)
    alone = ert.function(lambda x: ert.conv2d(x, c, padding=1), precision="bf16")(x).numpy()
    np.testing.assert_array_equal(on_pool, alone)


def test_changing_the_setting_keeps_the_fast_path(fast_bf16: None) -> None:
    w = ert.asarray(rand(8, 8))
    f = ert.function(lambda x: x @ w)
    x = ert.asarray(rand(4, 8))
    f(x)
    assert len(f._fast) == 1
    ert.config.matmul_precision = "float32"  # the same value: nothing to forget
    assert len(f._fast) == 1
    ert.config.matmul_precision = "bfloat16"
    assert not f._fast  # traces of float32 must not answer bfloat16 calls
    f(x)
    ert.config.matmul_precision = "float32"
    f(x)  # its float32 trace, found by the slow path, is fast again
    assert len(f._fast) == 1 and f.traces == 2


def test_float32_stays_bit_for_bit_what_it_was(fast_bf16: None) -> None:
    w, b = ert.asarray(rand(64, 32)), ert.asarray(rand(64))
    c = ert.asarray(rand(4, 3, 3, 3))

    async def model(x: ert.Tensor, image: ert.Tensor) -> tuple[ert.Tensor, ert.Tensor]:
        return ert.gelu(ert.linear(x, w, b)), ert.conv2d(image, c, padding=1)

    x, image = ert.asarray(rand(300, 32)), ert.asarray(rand(2, 3, 9, 9))
    eager = ert.function(model).eager

    async def run(f: Any) -> list[np.ndarray]:
        return [t.numpy() for t in await f(x, image)]

    import asyncio

    f = ert.function(model)
    before = asyncio.run(run(f))
    with ert.config.override(matmul_precision="bfloat16"):
        during = asyncio.run(run(f))  # the setting is read at trace time: a new trace
    after = asyncio.run(run(f))
    explicit = asyncio.run(run(ert.function(model, precision="float32")))
    for one, two, three, four, five in zip(
        before, after, explicit, asyncio.run(run(eager)), during, strict=True
    ):
        np.testing.assert_array_equal(one, two)
        np.testing.assert_array_equal(one, three)
        np.testing.assert_allclose(one, four, rtol=1e-5, atol=1e-5)  # eager: float32 too
        assert not np.array_equal(one, five)  # and bfloat16 really ran under the setting


def test_explain_says_which_steps_run_in_which_precision(fast_bf16: None) -> None:
    w = ert.asarray(rand(64, 64))

    def fn(x: ert.Tensor) -> ert.Tensor:
        h = ert.linear(x, w).reshape((16, 16, 16))
        return ert.layer_norm(ert.scaled_dot_product_attention(h, h, h), (16,))

    x = ert.asarray(rand(64, 64))
    text = ert.function(fn, precision="bfloat16").explain(x)
    assert "precision: bfloat16 asked for" in text
    bf16_line = next(line for line in text.splitlines() if line.startswith("  bfloat16 ("))
    f32_line = next(line for line in text.splitlines() if line.startswith("  float32 ("))
    assert "linear" in bf16_line and "scaled_dot_product_attention" in f32_line
    assert "precision: float32" in ert.function(fn).explain(x)


def test_concurrent_bf16_calls_on_the_workers_agree(fast_bf16: None) -> None:
    import asyncio

    w, c = ert.asarray(rand(256, 128)), ert.asarray(rand(8, 3, 3, 3))

    async def model(x: ert.Tensor, image: ert.Tensor) -> tuple[ert.Tensor, ert.Tensor]:
        return ert.gelu(ert.linear(x, w)), ert.relu(ert.conv2d(image, c, padding=1))

    f = ert.function(model, precision="bfloat16")
    inputs = [(ert.asarray(rand(600, 128)), ert.asarray(rand(2, 3, 20, 20))) for _ in range(6)]

    async def each_alone() -> list[list[np.ndarray]]:
        return [[t.numpy() for t in await f(*args)] for args in inputs]

    async def all_at_once() -> list[list[np.ndarray]]:
        calls = await asyncio.gather(*(f(*args) for args in inputs))
        return [[np.asarray(await t) for t in pair] for pair in calls]

    alone = asyncio.run(each_alone())
    with ert.config.override(graph_inline_threshold_ns=0):  # every call to the workers
        together = asyncio.run(all_at_once())
    for one, two in zip(alone, together, strict=True):
        for a, b in zip(one, two, strict=True):
            # (MKL may sum in another order on one thread than on its pool.)
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(a).max())
