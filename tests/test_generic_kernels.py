"""Each op's generic kernel (plain numpy-API code, what a device without kernels
of its own runs) equals the CPU backend's kernel (BLAS, numba, thread pools).

The generic kernels run here on a stream test device whose kernels are the
generic ones (``HostPlanDevice``: numpy natives, no kernels registered under its
name); the CPU's run eagerly. Cases cover every argument the ops take.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from host_stream_device import HostPlanDevice

RNG = np.random.default_rng(11)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def generic() -> Iterator[HostPlanDevice]:
    device = HostPlanDevice()
    ert.register_device(device)
    yield device


Case = tuple[str, Callable[..., ert.Tensor], list[Any], dict[str, Any]]

CASES: list[Case] = [
    ("conv2d", ert.conv2d, [rand(2, 4, 9, 9), rand(6, 4, 3, 3), rand(6)], {}),
    ("conv2d strided padded dilated", ert.conv2d, [rand(1, 4, 11, 10), rand(4, 2, 3, 2)],
     {"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1), "groups": 2}),
    ("conv2d same", ert.conv2d, [rand(3, 7, 8), rand(5, 3, 4, 4)], {"padding": "same"}),
    ("conv2d 1x1 float64", ert.conv2d, [rand(2, 8, 5, 5, dtype="float64"),
                                        rand(3, 8, 1, 1, dtype="float64")], {}),
    ("conv_transpose2d", ert.conv_transpose2d, [rand(2, 4, 5, 5), rand(4, 3, 3, 3), rand(3)],
     {"stride": 2, "padding": 1, "output_padding": 1}),
    ("conv_transpose2d grouped dilated", ert.conv_transpose2d, [rand(1, 4, 6, 5), rand(4, 2, 2, 3)],
     {"groups": 2, "dilation": (2, 1), "padding": (1, 0)}),
    ("max_pool2d", ert.max_pool2d, [rand(2, 3, 9, 9)], {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("max_pool2d ceil dilated", ert.max_pool2d, [rand(1, 2, 10, 7)],
     {"kernel_size": (2, 3), "stride": (3, 2), "dilation": (2, 1), "ceil_mode": True}),
    ("avg_pool2d", ert.avg_pool2d, [rand(2, 3, 8, 8)], {"kernel_size": 2}),
    ("avg_pool2d padded ceil", ert.avg_pool2d, [rand(1, 2, 9, 7)],
     {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("avg_pool2d without pad counts", ert.avg_pool2d, [rand(1, 2, 9, 7)],
     {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    ("avg_pool2d divisor", ert.avg_pool2d, [rand(2, 5, 6)],
     {"kernel_size": 2, "padding": 1, "divisor_override": 3}),
    ("adaptive_avg_pool2d", ert.adaptive_avg_pool2d, [rand(2, 3, 7, 10)], {"output_size": (3, 4)}),
    ("adaptive_avg_pool2d one", ert.adaptive_avg_pool2d, [rand(3, 5, 5)], {"output_size": 1}),
    ("layer_norm", ert.layer_norm, [rand(4, 6, 8), (8,), rand(8), rand(8)], {}),
    ("layer_norm 2-d shape, no affine", ert.layer_norm, [rand(3, 4, 5, dtype="float64"), (4, 5)],
     {"eps": 1e-3}),
    ("group_norm", ert.group_norm, [rand(2, 6, 4, 4), 3, rand(6), rand(6)], {}),
    ("group_norm no affine", ert.group_norm, [rand(3, 4, 5), 2], {}),
    ("linear", ert.linear, [rand(5, 7), rand(3, 7), rand(3)], {}),
    ("linear batched, no bias", ert.linear, [rand(2, 4, 7), rand(6, 7)], {}),
    ("attention", ert.scaled_dot_product_attention, [rand(2, 3, 5, 8), rand(2, 3, 6, 8),
                                                     rand(2, 3, 6, 4)], {}),
    ("attention causal", ert.scaled_dot_product_attention, [rand(2, 5, 8), rand(2, 7, 8),
                                                            rand(2, 7, 8)], {"is_causal": True}),
    ("attention bool mask", ert.scaled_dot_product_attention,
     [rand(2, 4, 8), rand(2, 6, 8), rand(2, 6, 8), RNG.random((2, 4, 6)) > 0.3], {"scale": 0.5}),
    ("attention float mask", ert.scaled_dot_product_attention,
     [rand(1, 4, 8), rand(1, 6, 8), rand(1, 6, 3), rand(4, 6)], {}),
    ("attention gqa", ert.scaled_dot_product_attention,
     [rand(1, 4, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8)], {"enable_gqa": True}),
    ("gelu", ert.gelu, [rand(4, 33)], {}),
    ("gelu float64", ert.gelu, [rand(40, dtype="float64") * 3], {}),
    ("gelu tanh", ert.gelu, [rand(4, 9)], {"approximate": "tanh"}),
    ("softmax", ert.softmax, [rand(3, 40)], {}),
    ("log_softmax axis 0", ert.log_softmax, [rand(5, 20)], {"axis": 0}),
    ("cross_entropy", ert.cross_entropy, [rand(6, 20), np.array([0, 3, 19, -100, 2, 7])], {}),
    ("cross_entropy probs smoothed", ert.cross_entropy, [rand(4, 5, 3), rand(4, 5, 3)],
     {"label_smoothing": 0.1, "reduction": "none"}),
    ("cross_entropy weighted sum", ert.cross_entropy,
     [rand(3, 4, 2), np.array([[0, 3], [1, 1], [2, 0]]), RNG.random(4).astype("float32")],
     {"reduction": "sum"}),
    ("silu", ert.silu, [rand(50)], {}),
    ("softplus", ert.softplus, [rand(50) * 30], {"beta": 2.0, "threshold": 10.0}),
]  # fmt: skip


def _on(device: Any, arg: Any) -> Any:
    return ert.asarray(arg, device=device) if isinstance(arg, np.ndarray) else arg


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_generic_kernel_equals_the_cpus(case: Case, generic: HostPlanDevice) -> None:
    _, fn, args, static = case
    on_cpu = fn(*[_on("cpu", a) for a in args], **static).numpy()
    elsewhere = fn(*[_on(generic, a) for a in args], **static)
    got = elsewhere.to("cpu").numpy()
    assert got.shape == on_cpu.shape and got.dtype == on_cpu.dtype
    tol = 2e-5 if on_cpu.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, on_cpu, rtol=tol, atol=tol)


def test_the_generic_kernels_are_what_the_test_device_runs(generic: HostPlanDevice) -> None:
    from eagerrt.ops.registry import GENERIC

    for name in ("conv2d", "max_pool2d", "layer_norm", "linear", "scaled_dot_product_attention"):
        op = ert.get_op(name)
        assert op._kernel_for(generic) is op.kernels[GENERIC]
        assert op._kernel_for(ert.get_device("cpu")) is op.kernels["cpu"]
