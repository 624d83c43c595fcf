"""The cuda device's neural-network kernels (``eagerrt.backends.cuda.nn``), run on numpy.

Those kernels are written over the array namespace of their operands, so CI,
without a GPU, checks their arithmetic here against eagerrt's CPU ops (which
tests/test_nn.py checks against PyTorch's definitions); ``tests/test_cuda.py``
runs the same kernels on CuPy arrays on a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.backends.cuda import dnn as _cuda_dnn
from eagerrt.backends.cuda import nn as _cuda_nn
from eagerrt.devices.device_checks import take_checks
from eagerrt.ops.nn.conv import conv_geometry

RNG = np.random.default_rng(7)


def _normal(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def _close(got: Any, expected: Any, tol: float = 2e-5) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("shape", "weight", "kw"),
    [
        ((2, 3, 9, 9), (4, 3, 3, 3), {}),
        ((2, 3, 9, 9), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
        ((1, 3, 8, 8), (4, 3, 2, 2), {"dilation": 2, "padding": "same"}),
        ((2, 4, 7, 7), (6, 2, 3, 3), {"groups": 2, "padding": (1, 2)}),
        ((3, 8, 5, 5), (16, 8, 1, 1), {}),  # 1x1 stride 1: the images as they are
        ((3, 8, 5, 5), (16, 8, 1, 1), {"stride": 2}),
        ((3, 7, 7), (5, 3, 3, 3), {"padding": 1}),  # (C, H, W): no batch
        ((1, 3, 15, 15), (8, 3, 7, 7), {"stride": 2, "padding": 3}),
    ],
)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d(shape: tuple[int, ...], weight: tuple[int, ...], kw: Any, with_bias: bool) -> None:
    x, w = _normal(*shape), _normal(*weight)
    b = _normal(weight[0]) if with_bias else None
    expected = ert.conv2d(x, w, b, **kw).numpy()
    _close(_cuda_nn.conv2d(x, w, b, **kw), expected, 1e-4)


_CONV_CASES = [
    ((2, 3, 9, 9), (4, 3, 3, 3), {}),
    ((2, 3, 9, 9), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
    ((1, 3, 8, 8), (4, 3, 3, 3), {"dilation": 2, "padding": "same"}),
    ((2, 4, 7, 7), (6, 2, 3, 3), {"groups": 2, "padding": (1, 2)}),
    ((3, 8, 5, 5), (16, 8, 1, 1), {"stride": 2}),
    ((1, 3, 15, 15), (8, 3, 7, 7), {"stride": 2, "padding": 3}),
]


@pytest.mark.parametrize(("shape", "weight", "kw"), _CONV_CASES)
def test_what_cudnn_is_asked_for_is_the_convolution(
    shape: tuple[int, ...], weight: tuple[int, ...], kw: Any
) -> None:
    # The descriptors the cuda device would give cuDNN, computed from in numpy.
    x, w, b = _normal(*shape), _normal(*weight), _normal(weight[0])
    expected = ert.conv2d(x, w, b, **kw).numpy()
    g = conv_geometry(x, w, b, kw.get("stride", 1), kw.get("padding", 0),
                       kw.get("dilation", 1), kw.get("groups", 1))  # fmt: skip
    d = _cuda_dnn.describe(x, w, g, b)
    assert d is not None and d.out == expected.shape
    got = _cuda_dnn.convolve(d, x, w, b)
    assert got.dtype == np.float32
    _close(got, expected, 1e-4)
    residual = _normal(*expected.shape)
    fused = _cuda_dnn.convolve(d, x, w, b, residual=residual, relu=True)
    _close(fused, np.maximum(expected + residual, 0), 1e-4)


def test_cudnn_is_not_asked_for_what_it_cant_do() -> None:
    x, w = _normal(1, 2, 6, 6), _normal(3, 2, 2, 2)
    # padding "same" for an even kernel pads one side more: cuDNN pads both alike
    assert _cuda_dnn.describe(x, w, conv_geometry(x, w, None, 1, "same", 1, 1)) is None
    x64, w64 = x.astype("float64"), w.astype("float64")
    assert _cuda_dnn.describe(x64, w64, conv_geometry(x64, w64, None, 1, 0, 1, 1)) is None
    assert not _cuda_dnn.available(x)  # numpy arrays: the cuBLAS kernels' path


@pytest.mark.parametrize("residual", [True, False])
def test_conv2d_relu(residual: bool) -> None:
    x, w, b = _normal(2, 3, 9, 9), _normal(4, 3, 3, 3), _normal(4)
    conv = ert.conv2d(x, w, b, padding=1).numpy()
    r = _normal(*conv.shape) if residual else None
    expected = np.maximum(conv + (r if residual else 0), 0)
    _close(_cuda_nn.conv2d_relu(x, w, b, r, padding=1), expected, 1e-4)


@pytest.mark.parametrize("affine", [True, False])
def test_add_layer_norm(affine: bool) -> None:
    x, r, w, b = _normal(2, 3, 6), _normal(2, 3, 6), _normal(6), _normal(6)
    params = (w, b) if affine else ()
    expected = ert.layer_norm(x + r, (6,), *params).numpy()
    got = _cuda_nn.add_layer_norm(
        x, r, *params, normalized_shape=(6,), has_weight=affine, has_bias=affine
    )
    _close(got, expected)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((5, 6), (6, 4)),
        ((2, 3, 5, 6), (6, 4)),  # leading dimensions against one matrix: one product
        ((2, 5, 6), (2, 6, 4)),  # one batch shape: strided-batched
        ((2, 5, 6), (1, 6, 4)),  # broadcast batches: numpy's matmul
        ((6,), (6, 4)),
        ((5, 0), (0, 4)),
    ],
)
def test_matmul(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    x, y = _normal(*a), _normal(*b)
    got = _cuda_nn.matmul(x, y)
    assert got.shape == (x @ y).shape
    _close(got, x @ y)


@pytest.mark.parametrize("shape", [(5, 6), (2, 3, 6), (1, 6)])
def test_linear(shape: tuple[int, ...]) -> None:
    x, w, b = _normal(*shape), _normal(4, 6), _normal(4)
    _close(_cuda_nn.linear(x, w, b), ert.linear(x, w, b).numpy())
    _close(_cuda_nn.linear(x, w), x @ w.T)


@pytest.mark.parametrize(
    "case",
    [
        "plain",
        "causal",
        "causal, more keys",
        "bool mask",
        "float mask",
        "masked row",
        "gqa",
        "scale",
    ],
)
def test_attention(case: str) -> None:
    q, k, v = _normal(2, 4, 5, 8), _normal(2, 4, 7, 8), _normal(2, 4, 7, 3)
    kw: dict[str, Any] = {}
    mask = None
    if case == "causal":
        k, v = _normal(2, 4, 5, 8), _normal(2, 4, 5, 3)
        kw["is_causal"] = True
    elif case == "causal, more keys":  # L != S: query i sees keys 0..i, as PyTorch's
        kw["is_causal"] = True
    elif case == "bool mask":
        mask = RNG.random((2, 1, 5, 7)) > 0.3
    elif case == "float mask":
        mask = _normal(5, 7)
    elif case == "masked row":  # a query allowed no key gives zeros
        mask = np.ones((5, 7), bool)
        mask[2] = False
    elif case == "gqa":
        k, v = _normal(2, 2, 7, 8), _normal(2, 2, 7, 3)
        kw["enable_gqa"] = True
    else:
        kw["scale"] = 0.5
    expected = ert.scaled_dot_product_attention(q, k, v, mask, **kw).numpy()
    got = _cuda_nn.scaled_dot_product_attention(q, k, v, mask, **kw)
    _close(got, expected)
    if case == "masked row":
        assert not np.asarray(got)[:, :, 2].any()


class _NotNumpy:
    """numpy under another name: what the GPU path of a kernel sees as ``xp``
    (CuPy), to run that path's Python on the CPU."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)


def test_row_kernel_paths_fall_back_to_expressions_for_arrays_they_dont_take() -> None:
    scores = _normal(3, 5)
    expected = ert.softmax(ert.asarray(scores), axis=-1).numpy()
    _close(_cuda_nn._softmax_last(_NotNumpy(), scores.copy()), expected)
    x, w, b = _normal(4, 6), _normal(6), _normal(6)
    expected = ert.layer_norm(ert.asarray(x), (6,), ert.asarray(w), ert.asarray(b)).numpy()
    _close(_cuda_nn._normalize_rows(_NotNumpy(), x, 1e-5, w, b), expected)


@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_layer_norm_and_group_norm(affine: tuple[bool, bool]) -> None:
    has_weight, has_bias = affine
    x = _normal(3, 4, 6) * 3 + 1
    w, b = _normal(4, 6), _normal(4, 6)
    operands = [a for a, given in ((w, has_weight), (b, has_bias)) if given]
    static = {"has_weight": has_weight, "has_bias": has_bias, "eps": 1e-5}
    expected = ert.layer_norm(x, (4, 6), w if has_weight else None, b if has_bias else None)
    got = _cuda_nn.layer_norm(x, *operands, normalized_shape=(4, 6), **static)
    _close(got, expected.numpy(), 1e-4)
    cw, cb = _normal(4), _normal(4)
    operands = [a for a, given in ((cw, has_weight), (cb, has_bias)) if given]
    expected = ert.group_norm(x, 2, cw if has_weight else None, cb if has_bias else None)
    _close(_cuda_nn.group_norm(x, *operands, num_groups=2, **static), expected.numpy(), 1e-4)


@pytest.mark.parametrize(
    "kw",
    [
        {"kernel_size": 2},
        {"kernel_size": 3, "stride": 2, "padding": 1},
        {"kernel_size": 3, "stride": 2, "ceil_mode": True},
        {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 1)},
    ],
)
def test_pools(kw: dict[str, Any]) -> None:
    x = _normal(2, 3, 7, 8)
    _close(_cuda_nn.max_pool2d(x, **kw), ert.max_pool2d(x, **kw).numpy())
    _close(_cuda_nn.max_pool2d(x, **kw, dilation=1), ert.max_pool2d(x, **kw).numpy())
    for include in (True, False):
        expected = ert.avg_pool2d(x, **kw, count_include_pad=include).numpy()
        _close(_cuda_nn.avg_pool2d(x, **kw, count_include_pad=include), expected)
    expected = ert.avg_pool2d(x, **kw, divisor_override=3).numpy()
    _close(_cuda_nn.avg_pool2d(x, **kw, divisor_override=3), expected)


def test_dilated_max_pool() -> None:
    x = _normal(1, 2, 9, 9)
    kw = {"kernel_size": 3, "stride": 1, "padding": 1, "dilation": 2}
    _close(_cuda_nn.max_pool2d(x, **kw), ert.max_pool2d(x, **kw).numpy())


@pytest.mark.parametrize("size", [1, (2, 4), (3, 5), (None, 2)])
def test_adaptive_avg_pool(size: Any) -> None:
    x = _normal(2, 3, 7, 8)
    _close(_cuda_nn.adaptive_avg_pool2d(x, size), ert.adaptive_avg_pool2d(x, size).numpy())


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate: str) -> None:
    x = _normal(100) * 3
    _close(_cuda_nn.gelu(x, approximate), ert.gelu(x, approximate=approximate).numpy())


def test_embedding_and_its_range_check() -> None:
    table, ids = _normal(10, 4), np.array([[3, 0], [9, 9]])
    _close(_cuda_nn.embedding(ids, table), table[ids])
    with pytest.raises(IndexError, match="out of range for a table of 10 rows"):
        _cuda_nn.embedding(np.array([10]), table)
    assert take_checks() == []  # on the host the check is made at once, none left


def test_tf32_setting_leaves_numpy_alone() -> None:
    x, w = _normal(1, 3, 6, 6), _normal(2, 3, 3, 3)
    with ert.config.override(cuda_tf32=True):
        _close(_cuda_nn.conv2d(x, w), ert.conv2d(x, w).numpy(), 1e-4)


@pytest.mark.parametrize("order", [2, 1, np.inf, -np.inf, 0, 3, -1.5])
@pytest.mark.parametrize("axes", [(1,), (0, 2)])
def test_vector_norm_by_parts(order: float, axes: tuple[int, ...]) -> None:
    """The cuda device's vector_norm (CuPy has none): numpy's definition in
    elementwise ops and reductions."""
    from eagerrt.ops.linalg_extension import _vector_norm_by_parts

    x = _normal(3, 4, 5, dtype="float64")
    expected = np.linalg.vector_norm(x, axis=axes, keepdims=True, ord=order)
    _close(_vector_norm_by_parts(x, axes, True, order), expected, 1e-12)


def test_products_of_empty_operands() -> None:
    from eagerrt.backends.cuda import gemm as _cuda_gemm

    out = np.full((1, 2, 3), 7.0)
    _cuda_gemm.matmul_into(out, np.ones((1, 2, 0)), np.ones((1, 0, 3)), m=2, n=3, k=0)
    np.testing.assert_array_equal(out, np.zeros((1, 2, 3)))  # a sum of nothing
    _close(_cuda_nn.linear(np.ones((0, 4), "float32"), _normal(3, 4)), np.zeros((0, 3)))
