"""ert.onnx: ONNX models through eagerrt, compared with ONNX Runtime.

One-node (or few-node) graphs built with onnx.helper check each op, compiled and
eager; two exported models (ResNet-18 for CIFAR, all-MiniLM-L6-v2's BERT) check
the whole path with dynamic axes. The model tests need torch (the models extra).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import eagerrt as ert

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i64(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _model(
    nodes: list[Any],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    dims: dict[str, list[Any]] | None = None,
) -> bytes:
    """A model of ``nodes`` whose inputs have the dtypes of the arrays given (and
    their shapes, or ``dims`` where given: symbolic ones)."""
    dims = dims or {}

    def info(name: str, array: np.ndarray) -> Any:
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        return helper.make_tensor_value_info(name, elem, dims.get(name, list(array.shape)))

    graph = helper.make_graph(
        nodes,
        "test",
        [info(n, a) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()],
    )
    domains = {n.domain for n in nodes} - {""}
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in sorted(domains))]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    # ONNX's own shape inference types the outputs, as an exporter would.
    return onnx.shape_inference.infer_shapes(model).SerializeToString()


def _onnxruntime(model: bytes, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def _as_list(result: Any) -> list[np.ndarray]:
    if isinstance(result, dict):
        return [t.numpy() for t in result.values()]
    return [result.numpy()]


def _assert_matches(
    model: bytes, inputs: dict[str, np.ndarray], atol: float = 1e-5, loaded: Any = None
) -> None:
    """ONNX Runtime's outputs equal eagerrt's, compiled and eager."""
    expected = _onnxruntime(model, inputs)
    loaded = loaded or ert.onnx.load(model)
    for how, got in (("compiled", loaded.run(**inputs)), ("eager", loaded.eager(**inputs))):
        for e, g in zip(expected, _as_list(got), strict=True):
            assert g.dtype == e.dtype, how
            assert g.shape == e.shape, how
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=atol, err_msg=how)


@dataclass
class Case:
    """One op test: nodes, inputs (graph inputs), initializers, opset."""

    nodes: list[Any]
    inputs: dict[str, np.ndarray]
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 17
    outputs: list[str] = field(default_factory=lambda: ["y"])


def _unary(op: str, x: np.ndarray | None = None, **attrs: Any) -> Case:
    return Case(
        [helper.make_node(op, ["x"], ["y"], **attrs)], {"x": _f32(2, 3) if x is None else x}
    )


def _binary(op: str, a: np.ndarray, b: np.ndarray, **attrs: Any) -> Case:
    return Case([helper.make_node(op, ["a", "b"], ["y"], **attrs)], {"a": a, "b": b})


POSITIVE = np.abs(_f32(2, 3)) + 0.5
INTS_A, INTS_B = _i64([[7, -7, 6], [-6, 5, 0]]), _i64([2, -3, 4])

CASES: dict[str, Case] = {
    **{
        op: _unary(op)
        for op in ("Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Erf", "Floor", "Ceil", "Sign")
    },
    "Sqrt": _unary("Sqrt", POSITIVE),
    "Log": _unary("Log", POSITIVE),
    "Reciprocal": _unary("Reciprocal", POSITIVE),
    "Softplus": _unary("Softplus"),
    "LeakyRelu": _unary("LeakyRelu", alpha=0.2),
    "IsNaN": _unary("IsNaN", np.array([1.0, np.nan, -np.inf], np.float32)),
    "Not": _unary("Not", np.array([True, False])),
    "Gelu": Case([helper.make_node("Gelu", ["x"], ["y"])], {"x": _f32(4, 5)}, opset=20),
    "Gelu-tanh": Case(
        [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], {"x": _f32(4, 5)}, opset=20
    ),
    **{op: _binary(op, _f32(2, 3), _f32(3)) for op in ("Add", "Sub", "Mul", "Div", "Max", "Min")},
    "Div-int": _binary("Div", INTS_A, INTS_B),  # truncates toward zero
    "Mod-int": _binary("Mod", INTS_A, _i64([2, -3, 4])),
    "Mod-fmod": _binary("Mod", _f32(2, 3), POSITIVE, fmod=1),
    "Pow": _binary("Pow", POSITIVE, _f32(3)),
    "Pow-int-exponent": _binary("Pow", _f32(2, 3), _i64([1, 2, 3])),
    **{
        op: _binary(op, _f32(2, 3), _f32(2, 3))
        for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
    },
    **{
        op: _binary(op, np.array([True, False, True]), np.array([True, True, False]))
        for op in ("And", "Or", "Xor")
    },
    "Where": Case(
        [helper.make_node("Where", ["c", "a", "b"], ["y"])],
        {"c": np.array([[True], [False]]), "a": _f32(2, 3), "b": _f32(3)},
    ),
    "Clip": Case(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        {"x": _f32(3, 4)},
        {"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)},
    ),
    "Cast": _unary("Cast", _f32(2, 3) * 4, to=TensorProto.INT32),
    "Sum": Case(
        [helper.make_node("Sum", ["a", "b", "c"], ["y"])],
        {"a": _f32(3), "b": _f32(2, 3), "c": _f32(1, 3)},
    ),
    "Mean": Case([helper.make_node("Mean", ["a", "b"], ["y"])], {"a": _f32(3), "b": _f32(2, 3)}),
    "MatMul": _binary("MatMul", _f32(2, 4, 5), _f32(5, 3)),
    "Gemm": Case(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        {"a": _f32(4, 2)},
        {"b": _f32(3, 4), "c": _f32(3)},
    ),
    "Softmax": _unary("Softmax", _f32(2, 3, 4), axis=1),
    "Softmax-opset11": Case(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": _f32(2, 3, 4)}, opset=11
    ),
    "LogSoftmax": _unary("LogSoftmax", _f32(2, 5)),
    "LayerNormalization": Case(
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-6)],
        {"x": _f32(2, 3, 8)},
        {"s": _f32(8), "b": _f32(8)},
    ),
    "LayerNormalization-axis": Case(
        [helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=1)],
        {"x": _f32(2, 3, 4)},
        {"s": _f32(3, 4)},
    ),
    "BatchNormalization": Case(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
        {"x": _f32(2, 3, 4, 4)},
        {"s": _f32(3), "b": _f32(3), "m": _f32(3), "v": POSITIVE[0]},
    ),
    "Conv": Case(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])],
        {"x": _f32(2, 4, 9, 9)},
        {"w": _f32(6, 4, 3, 3), "b": _f32(6)},
    ),
    "Conv-groups-dilations": Case(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=2, dilations=[2, 1], pads=[2, 1, 2, 1])],
        {"x": _f32(1, 4, 8, 8)},
        {"w": _f32(6, 2, 3, 3)},
    ),
    "Conv-asymmetric-pads": Case(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[0, 1, 2, 0])],
        {"x": _f32(1, 2, 6, 6)},
        {"w": _f32(3, 2, 3, 3)},
    ),
    "Conv-same-upper": Case(
        [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])],
        {"x": _f32(1, 2, 7, 8)},
        {"w": _f32(3, 2, 4, 4)},
    ),
    "Conv-1d": Case(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1])],
        {"x": _f32(2, 3, 10)},
        {"w": _f32(4, 3, 3), "b": _f32(4)},
    ),
    "MaxPool": _unary(
        "MaxPool", _f32(2, 3, 8, 8), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
    ),
    "MaxPool-asymmetric": _unary(
        "MaxPool", _f32(1, 2, 7, 7), kernel_shape=[2, 2], pads=[0, 0, 1, 1]
    ),
    "AveragePool": _unary("AveragePool", _f32(2, 3, 8, 8), kernel_shape=[2, 2], strides=[2, 2]),
    "AveragePool-pads": _unary(
        "AveragePool", _f32(1, 2, 6, 6), kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1
    ),
    "AveragePool-exclude-pad": _unary(
        "AveragePool", _f32(1, 2, 6, 6), kernel_shape=[3, 3], pads=[1, 1, 1, 1]
    ),
    "AveragePool-asymmetric-exclude-pad": _unary(  # torch's opset-9 ceil_mode export
        "AveragePool", _f32(2, 3, 7, 7), kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]
    ),
    "AveragePool-asymmetric-exclude-pad-ceil": _unary(
        "AveragePool",
        _f32(1, 2, 8, 7),
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 0, 2, 1],
        ceil_mode=1,
    ),
    "AveragePool-asymmetric-1d": _unary(
        "AveragePool", _f32(1, 2, 9), kernel_shape=[4], strides=[3], pads=[0, 2]
    ),
    "GlobalAveragePool": _unary("GlobalAveragePool", _f32(2, 3, 5, 5)),
    "GlobalMaxPool": _unary("GlobalMaxPool", _f32(2, 3, 5, 5)),
    "Flatten": _unary("Flatten", _f32(2, 3, 4), axis=2),
    "Transpose": _unary("Transpose", _f32(2, 3, 4), perm=[2, 0, 1]),
    "Identity": _unary("Identity"),
    "Dropout": _unary("Dropout"),
    "ReduceMean": Case(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)], {"x": _f32(2, 3, 4)}
    ),
    "ReduceSum": Case(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        {"x": _f32(2, 3, 4)},
        {"axes": _i64([0, 2])},
    ),
    "ReduceMax-all": Case(
        [helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)], {"x": _f32(2, 3)}
    ),
    "ReduceL2": Case([helper.make_node("ReduceL2", ["x"], ["y"], axes=[1])], {"x": _f32(2, 3)}),
    "ArgMax": _unary("ArgMax", _f32(3, 5), axis=1, keepdims=0),
    "Concat": Case(
        [helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
        {"a": _f32(2, 3)},
        {"b": _f32(2, 2)},
    ),
    "Split": Case(
        [helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)],
        {"x": _f32(2, 5)},
        {"s": _i64([2, 3])},
        outputs=["y", "z"],
    ),
    "Slice": Case(
        [helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])],
        {"x": _f32(4, 6)},
        {"s": _i64([-1, 1]), "e": _i64([-1 << 62, 100]), "a": _i64([0, 1]), "t": _i64([-2, 2])},
    ),
    "Gather": Case(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
        {"x": _f32(3, 4), "i": _i64([[0, -1], [2, 2]])},
    ),
    "Gather-scalar-index": Case(
        [helper.make_node("Gather", ["x", "i"], ["y"])], {"x": _f32(3, 4)}, {"i": _i64(-2)}
    ),
    "GatherElements": Case(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
        {"x": _f32(3, 4), "i": _i64([[0, -1], [2, 2], [3, 0]])},
    ),
    "Tile": Case(
        [helper.make_node("Tile", ["x", "r"], ["y"])], {"x": _f32(2, 3)}, {"r": _i64([2, 1])}
    ),
    "Pad": Case(
        [helper.make_node("Pad", ["x", "p", "v"], ["y"])],
        {"x": _f32(2, 3)},
        {"p": _i64([1, 0, 0, 2]), "v": np.array(9.0, np.float32)},
    ),
    "Pad-reflect": Case(
        [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
        {"x": _f32(2, 4)},
        {"p": _i64([0, 2, 0, 1])},
    ),
    "Pad-opset9-attributes": Case(  # torch's opset-9 exports pad pooling windows this way
        [helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 1, 2], value=-1.5)],
        {"x": _f32(2, 3)},
        opset=9,
    ),
    "Squeeze-Unsqueeze": Case(
        [
            helper.make_node("Unsqueeze", ["x", "a"], ["u"]),
            helper.make_node("Squeeze", ["u", "b"], ["y"]),
        ],
        {"x": _f32(2, 1, 3)},
        {"a": _i64([0, -1]), "b": _i64([2])},
    ),
    "Unsqueeze-opset11": Case(
        [helper.make_node("Unsqueeze", ["x"], ["y"], axes=[1])], {"x": _f32(2, 3)}, opset=11
    ),
    # The shape arithmetic exporters emit for dynamic axes, on known values.
    "shape-subgraph": Case(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
            helper.make_node("Unsqueeze", ["batch", "zero1"], ["b1"]),
            helper.make_node("Concat", ["b1", "minus1"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["flat"]),
            helper.make_node("Shape", ["flat"], ["fs"], start=-1),
            helper.make_node(
                "ConstantOfShape",
                ["fs"],
                ["ones"],
                value=numpy_helper.from_array(np.ones(1, np.float32)),
            ),
            helper.make_node("Cast", ["batch"], ["bf"], to=TensorProto.INT64),
            helper.make_node("Range", ["zero", "bf", "one"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "one1"], ["rc"]),
            helper.make_node("Cast", ["rc"], ["rf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["flat", "rf"], ["shifted"]),
            helper.make_node("Mul", ["shifted", "ones"], ["y"]),
            helper.make_node("Expand", ["rc", "big"], ["z"]),
        ],
        {"x": _f32(3, 2, 4)},
        {
            "zero": _i64(0),
            "one": _i64(1),
            "zero1": _i64([0]),
            "one1": _i64([1]),
            "minus1": _i64([-1]),
            "big": _i64([1, 5]),
        },
        outputs=["y", "z"],
    ),
    "Constant": Case(
        [
            helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0]),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        {"x": _f32(2, 3)},
    ),
}


def _resize(
    x: np.ndarray, scales: Any = None, sizes: Any = None, opset: int = 17, **attrs: Any
) -> Case:
    """Resize of ``x`` by ``scales`` or to ``sizes`` (the other input left empty)."""
    inits: dict[str, np.ndarray] = {"roi": np.zeros(0, np.float32)}
    names = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.asarray(scales, np.float32)
        names.append("scales")
    else:
        inits["scales"] = np.zeros(0, np.float32)
        inits["sizes"] = _i64(sizes)
        names += ["scales", "sizes"]
    return Case([helper.make_node("Resize", names, ["y"], **attrs)], {"x": x}, inits, opset)


# Resize: what exporters write (PyTorch's nearest: asymmetric + floor; its bilinear:
# pytorch_half_pixel or align_corners) and ONNX's defaults (half_pixel,
# round_prefer_floor), up and down, by scales and to sizes, odd ratios included.
IMAGE = _f32(2, 3, 5, 7)
CASES.update(
    {
        "Resize-nearest-torch": _resize(
            IMAGE, [1, 1, 2, 2], mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor",
        ),
        "Resize-nearest-defaults-down": _resize(IMAGE, sizes=[2, 3, 3, 4]),
        "Resize-nearest-defaults-odd": _resize(IMAGE, [1, 1, 1.7, 0.6]),
        "Resize-nearest-ceil-half-pixel": _resize(
            IMAGE, sizes=[2, 3, 8, 11], nearest_mode="round_prefer_ceil"
        ),
        "Resize-nearest-ceil-mode": _resize(
            IMAGE, [1, 1, 0.5, 1.5], coordinate_transformation_mode="asymmetric",
            nearest_mode="ceil",
        ),
        "Resize-linear-torch": _resize(
            IMAGE, [1, 1, 2, 2], mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
        "Resize-linear-align-corners": _resize(
            IMAGE, sizes=[2, 3, 9, 4], mode="linear", coordinate_transformation_mode="align_corners"
        ),
        "Resize-linear-half-pixel-down": _resize(IMAGE, [1, 1, 0.6, 0.5], mode="linear"),
        "Resize-linear-symmetric": _resize(
            IMAGE, [1, 1, 1.5, 0.75], mode="linear",
            coordinate_transformation_mode="half_pixel_symmetric", opset=19,
        ),
        "Resize-linear-to-one": _resize(  # one output row: pytorch_half_pixel samples row 0
            IMAGE, sizes=[2, 3, 1, 10], mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
        "Resize-axes": _resize(IMAGE, [3.0, 0.5], mode="linear", axes=[3, 2], opset=18),
        "Resize-1d-ints": _resize(np.array([[1, 5, -2, 7]], np.int32), [1, 2.5]),
    }
)  # fmt: skip


def _einsum(equation: str, *shapes: tuple[int, ...]) -> Case:
    names = [f"x{i}" for i in range(len(shapes))]
    return Case(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        {n: _f32(*s) for n, s in zip(names, shapes, strict=True)},
    )


CASES.update(
    {
        "Einsum-matmul": _einsum("ij,jk->ik", (3, 4), (4, 5)),
        "Einsum-attention": _einsum("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
        "Einsum-implicit": _einsum("ij,jk", (3, 4), (4, 2)),
        "Einsum-ellipsis": _einsum("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),
        "Einsum-transpose-sum": _einsum("ijk->ki", (2, 3, 4)),
        "Einsum-diagonal": _einsum("ii->i", (4, 4)),
        "Einsum-three": _einsum("ij,jk,kl->il", (2, 3), (3, 4), (4, 2)),
    }
)

# Older opsets' attribute forms, auto_pad and ceil_mode, and more of the shape ops.
CASES.update(
    {
        "Clip-opset10": Case(
            [helper.make_node("Clip", ["x"], ["y"], min=-0.3, max=0.4)], {"x": _f32(3, 4)}, opset=10
        ),
        "Slice-opset9": Case(
            [helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 1])],
            {"x": _f32(4, 5)},
            opset=9,
        ),
        "Split-attr-opset11": Case(
            [helper.make_node("Split", ["x"], ["y", "z"], axis=0, split=[1, 3])],
            {"x": _f32(4, 2)},
            opset=11,
            outputs=["y", "z"],
        ),
        "Split-equal": Case(
            [helper.make_node("Split", ["x"], ["y", "z"], axis=1)],
            {"x": _f32(2, 6)},
            outputs=["y", "z"],
        ),
        "ReduceSum-opset11": Case(
            [helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)],
            {"x": _f32(2, 3, 4)},
            opset=11,
        ),
        "ReduceMean-opset18": Case(
            [helper.make_node("ReduceMean", ["x", "a"], ["y"])],
            {"x": _f32(2, 3, 4)},
            {"a": _i64([-1])},
            opset=18,
        ),
        "Squeeze-opset11": Case(
            [helper.make_node("Squeeze", ["x"], ["y"], axes=[1])], {"x": _f32(2, 1, 3)}, opset=11
        ),
        "Squeeze-all": Case([helper.make_node("Squeeze", ["x"], ["y"])], {"x": _f32(1, 2, 1, 3)}),
        "Constant-int": Case(
            [
                helper.make_node("Constant", [], ["c"], value_int=3),
                helper.make_node("Add", ["x", "c"], ["y"]),
            ],
            {"x": _i64([1, 2])},
        ),
        "Expand-both": Case(
            [helper.make_node("Expand", ["x", "s"], ["y"])],
            {"x": _f32(3, 1)},
            {"s": _i64([2, 1, 4])},
        ),
        "Range-float": Case(
            [
                helper.make_node("Range", ["a", "b", "c"], ["r"]),
                helper.make_node("Add", ["x", "r"], ["y"]),
            ],
            {"x": _f32(5)},
            {
                "a": np.array(0.5, np.float32),
                "b": np.array(3.0, np.float32),
                "c": np.array(0.5, np.float32),
            },
        ),
        "MaxPool-ceil": _unary(
            "MaxPool", _f32(1, 2, 7, 7), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1
        ),
        "MaxPool-same-lower": _unary(
            "MaxPool", _f32(1, 2, 7, 7), kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER"
        ),
        "AvgPool-ceil": _unary(
            "AveragePool", _f32(1, 2, 7, 7), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1
        ),
        "MaxPool-1d": _unary("MaxPool", _f32(2, 3, 9), kernel_shape=[3], strides=[2]),
        "Conv-same-lower": Case(
            [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER")],
            {"x": _f32(1, 2, 6, 6)},
            {"w": _f32(3, 2, 2, 2)},
        ),
        "Conv-depthwise": Case(
            [helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])],
            {"x": _f32(1, 4, 6, 6)},
            {"w": _f32(4, 1, 3, 3)},
        ),
        "Softmax-opset11-axis2": Case(
            [helper.make_node("Softmax", ["x"], ["y"], axis=2)], {"x": _f32(2, 3, 4)}, opset=11
        ),
        "PRelu": Case(
            [helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": _f32(2, 3)}, {"s": _f32(3)}
        ),
        "Cast-bool": _unary("Cast", np.array([0.0, 1.5, -2.0], np.float32), to=TensorProto.BOOL),
        "Shape-start-end": Case(
            [
                helper.make_node("Shape", ["x"], ["s"], start=1, end=-1),
                helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
            ],
            {"x": _f32(2, 3, 4, 5)},
        ),
        "Where-int": Case(
            [helper.make_node("Where", ["c", "a", "b"], ["y"])],
            {"c": np.array([True, False]), "a": _i64([1, 2]), "b": _i64(7)},
        ),
        "Div-int-static": Case(
            [
                helper.make_node("Div", ["a", "b"], ["q"]),
                helper.make_node("Cast", ["q"], ["qf"], to=TensorProto.FLOAT),
                helper.make_node("Add", ["x", "qf"], ["y"]),
            ],
            {"x": _f32(3)},
            {"a": _i64([7, -7, -6]), "b": _i64([2, 2, 4])},
        ),
        "Gemm-no-C": Case(
            [helper.make_node("Gemm", ["a", "b"], ["y"], alpha=2.0)],
            {"a": _f32(2, 3), "b": _f32(3, 4)},
        ),
        "HardSigmoid": _unary("HardSigmoid", _f32(4, 5) * 4, alpha=0.3, beta=0.4),
        "HardSwish": _unary("HardSwish", _f32(4, 5) * 4),
        **{
            f"CumSum{'-exclusive' * e}{'-reverse' * r}": Case(
                [helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=e, reverse=r)],
                {"x": _f32(3, 4, 5)},
                {"axis": _i64(1)},
            )
            for e in (0, 1)
            for r in (0, 1)
        },
        "CumSum-int-static": Case(  # known at trace time: numpy computes it
            [
                helper.make_node("CumSum", ["a", "axis"], ["c"], exclusive=1),
                helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
                helper.make_node("Add", ["x", "cf"], ["y"]),
            ],
            {"x": _f32(4)},
            {"a": _i64([3, 1, 4, 1]), "axis": _i64(-1)},
        ),
        **{
            f"TopK-{'largest' if largest else 'smallest'}": Case(
                [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=1, largest=largest)],
                {"x": _f32(3, 7, 2)},
                {"k": _i64([3])},
                outputs=["y", "i"],
            )
            for largest in (0, 1)
        },
        "TopK-ties-to-the-lower-index": Case(
            [helper.make_node("TopK", ["x", "k"], ["y", "i"])],
            {"x": _i64([[3, 1, 3, 2, 1, 3], [0, 0, 5, 0, 5, 1]])},
            {"k": _i64([4])},
            outputs=["y", "i"],
        ),
        "ConvTranspose": Case(
            [
                helper.make_node(
                    "ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1]
                )
            ],
            {"x": _f32(2, 4, 5, 5)},
            {"w": _f32(4, 3, 3, 3), "b": _f32(3)},
        ),
        "ConvTranspose-groups-output-padding": Case(
            [
                helper.make_node(
                    "ConvTranspose",
                    ["x", "w"],
                    ["y"],
                    strides=[2, 3],
                    group=2,
                    output_padding=[1, 2],
                    dilations=[1, 1],
                )
            ],
            {"x": _f32(1, 4, 4, 3)},
            {"w": _f32(4, 2, 3, 3)},
        ),
        "ConvTranspose-asymmetric-pads": Case(
            [
                helper.make_node(
                    "ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1]
                )
            ],
            {"x": _f32(1, 2, 4, 4)},
            {"w": _f32(2, 3, 3, 3)},
        ),
    }
)


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_onnxruntime(name: str) -> None:
    case = CASES[name]
    model = _model(case.nodes, case.inputs, case.outputs, case.initializers, case.opset)
    _assert_matches(model, case.inputs)


def test_constant_only_output_and_known_values_fold_at_trace_time() -> None:
    # y depends on constants only: computed on numpy when traced, an eagerrt tensor out.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["x"], ["z"]),
    ]
    x = _f32(2, 3)
    model = _model(nodes, {"x": x}, ["y", "z"])
    _assert_matches(model, {"x": x})
    loaded = ert.onnx.load(model)
    out = loaded.run(x)
    assert list(out) == ["y", "z"] and out["y"].numpy().tolist() == [2.0, 3.0]


# -- dynamic axes: one trace per signature, symbolic dimensions checked ----------------------
def _dynamic_model() -> bytes:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "m"], ["y"]),
    ]
    inputs = {"x": _f32(2, 4), "m": _f32(2, 3)}
    return _model(
        nodes, inputs, ["y"], {"w": _f32(4, 3)}, dims={"x": ["batch", 4], "m": ["batch", 3]}
    )


def test_dynamic_batch_traces_once_per_shape() -> None:
    data = _dynamic_model()
    model = ert.onnx.load(data)
    assert [str(i) for i in model.inputs] == ["x: float32[batch, 4]", "m: float32[batch, 3]"]
    for batch in (1, 5, 1):
        x, m = _f32(batch, 4), _f32(batch, 3)
        np.testing.assert_allclose(
            model.run(x, m=m).numpy(), _onnxruntime(data, {"x": x, "m": m})[0], rtol=1e-5
        )
    assert model.function.traces == 2


@pytest.mark.anyio
async def test_await_model_runs_compiled() -> None:
    model = ert.onnx.load(_dynamic_model())
    x, m = _f32(2, 4), _f32(2, 3)
    y = await model(x, m)
    assert isinstance(y, ert.Tensor)
    np.testing.assert_allclose(await y, model.eager(x, m).numpy(), rtol=1e-6)


def test_one_model_called_from_several_threads_and_coroutines_at_once() -> None:
    import asyncio
    import threading

    data = _dynamic_model()
    model = ert.onnx.load(data)
    feeds = [(_f32(1 + i % 3, 4), _f32(1 + i % 3, 3)) for i in range(12)]
    want = [_onnxruntime(data, {"x": x, "m": m})[0] for x, m in feeds]
    got: dict[int, np.ndarray] = {}

    def call(i: int) -> None:  # new shapes traced from several threads at once
        got[i] = model.run(*feeds[i]).numpy()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    async def rest() -> list[np.ndarray]:
        outs = await asyncio.gather(*(model(*feeds[i]) for i in range(6, 12)))
        return [await y for y in outs]

    got.update(enumerate(asyncio.run(rest()), start=6))
    for i, expected in enumerate(want):
        np.testing.assert_allclose(got[i], expected, rtol=1e-5)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((_f32(2, 4),), {}, ert.ArgumentError, "needs the inputs m"),
        ((_f32(2, 4), _f32(2, 3)), {"q": 1}, ert.ArgumentError, "no input 'q'"),
        ((_f32(2, 4),), {"x": _f32(2, 4)}, ert.ArgumentError, "given twice"),
        (
            (_f32(2, 4).astype(np.float64), _f32(2, 3)),
            {},
            ert.DTypeError,
            "'x' must be float32, got float64",
        ),
        ((_f32(2, 5), _f32(2, 3)), {}, ert.ShapeError, "size 4 on axis 1"),
        ((_f32(4), _f32(2, 3)), {}, ert.ShapeError, "needs rank 2"),
        (
            (_f32(2, 4), _f32(3, 3)),
            {},
            ert.ShapeError,
            "'batch' is 2 in input 'x' but 3 in input 'm'",
        ),
    ],
)
def test_bad_inputs_raise_at_the_call(args: Any, kwargs: Any, error: type, match: str) -> None:
    model = ert.onnx.load(_dynamic_model())
    with pytest.raises(error, match=match):
        model.run(*args, **kwargs)
    with pytest.raises(error, match=match):
        model.eager(*args, **kwargs)


def test_python_lists_take_the_inputs_dtype() -> None:
    model = ert.onnx.load(_dynamic_model())
    y = model.run([[1, 2, 3, 4]], [[0, 0, 0]])
    assert y.shape == (1, 3) and y.dtype == np.float32


def test_python_values_that_do_not_fit_the_inputs_dtype_are_refused() -> None:
    ids = ert.onnx.load(
        _model([helper.make_node("Identity", ["ids"], ["y"])], {"ids": _i64([[1]])}, ["y"])
    )
    assert ids.run([[7]]).numpy().tolist() == [[7]]
    with pytest.raises(ert.DTypeError, match=r"'ids' must be int64, got float64"):
        ids.run([[1.5]])  # not silently truncated to 1
    with pytest.raises(ert.ArgumentError, match=r"input '?ids"):
        ids.run([[1, 2]])  # checked against the input's shape
    with pytest.raises(ert.ArgumentError, match=r"input '?ids"):
        ids.run([[1], [2, 3]])  # ragged: numpy's own ValueError, named
    with pytest.raises(ert.ArgumentError, match=r"input '?ids"):
        ids.run([[1 << 70]])  # does not fit int64


# -- what is refused at load ------------------------------------------------------------------
def _refused(nodes: list[Any], inputs: dict[str, np.ndarray], **kw: Any) -> str:
    with pytest.raises(ert.onnx.UnsupportedError) as info:
        ert.onnx.load(_model(nodes, inputs, ["y"], **kw))
    assert isinstance(info.value, ert.UsageError)
    return str(info.value)


def test_unsupported_op_is_refused_at_load_naming_the_node() -> None:
    message = _refused([helper.make_node("NonZero", ["x"], ["y"], name="find")], {"x": _f32(3)})
    assert "'find' (NonZero)" in message and "supported:" in message and "Conv" in message


def test_unsupported_attribute_and_value_are_refused_at_load() -> None:
    x = {"x": _f32(1, 1, 4, 4)}
    message = _refused(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], storage_order=1)], x
    )
    assert "storage_order=1 is not supported" in message
    message = _refused([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])], x)
    assert "'MaxPool_0' (MaxPool): a 3-d window is not supported" in message
    message = _refused([helper.make_node("Relu", ["x"], ["y"], bogus=3)], x)
    assert "bogus" in message and "Relu takes no attributes" in message


def test_resize_modes_it_cannot_match_and_einsum_without_equation_are_refused() -> None:
    x = {"x": _f32(1, 1, 4, 4)}
    for attrs, expected in [
        ({"mode": "cubic"}, "mode='cubic' is not supported"),
        ({"antialias": 1}, "antialias=1 is not supported"),
        ({"coordinate_transformation_mode": "tf_crop_and_resize"}, "tf_crop_and_resize"),
        ({"keep_aspect_ratio_policy": "not_larger"}, "not_larger"),
    ]:
        case = _resize(x["x"], [1, 1, 2, 2], **attrs)
        assert expected in _refused(case.nodes, x, initializers=case.initializers, opset=18)
    no_equation = [helper.make_node("Einsum", ["x"], ["y"])]
    assert "the equation attribute is missing" in _refused(no_equation, x)
    old = [helper.make_node("Resize", ["x", "s"], ["y"])]
    message = _refused(old, x, initializers={"s": np.array([1, 1, 2, 2], np.float32)}, opset=10)
    assert "before opset 11" in message


def test_resize_without_a_size_or_of_ints_linearly_fails_when_traced() -> None:
    for case, match in [
        (_resize(_i64([[1, 2]]), [1, 2], mode="linear"), "needs a float input"),
        (_resize(_f32(1, 4), sizes=[]), "neither scales nor sizes"),
        (_resize(_f32(1, 4), [1, 2, 2]), "3 axes|for 2 axes"),
    ]:
        model = ert.onnx.load(_model(case.nodes, case.inputs, ["y"], case.initializers))
        with pytest.raises(ert.ArgumentError, match=match):
            model.run(*case.inputs.values())


def test_used_extra_output_and_foreign_domain_are_refused() -> None:
    x = {"x": _f32(1, 1, 4, 4)}
    unused = [helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2])]
    ert.onnx.load(_model(unused, x, ["y"]))  # a second output nobody reads is fine
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p", "idx"], kernel_shape=[2, 2]),
        helper.make_node("Cast", ["idx"], ["y"], to=TensorProto.FLOAT),
    ]
    assert "output 'idx' is used" in _refused(nodes, x)
    custom = [helper.make_node("FusedGemm", ["x"], ["y"], domain="com.microsoft")]
    assert "domain 'com.microsoft'" in _refused(custom, x)


def test_data_dependent_shape_is_refused_when_traced() -> None:
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    model = ert.onnx.load(_model(nodes, {"x": _f32(6), "s": _i64([2, 3])}, ["y"]))
    for run in (model.run, model.eager):
        with pytest.raises(
            ert.onnx.UnsupportedError,
            match=r"input 1 \('s'\) is computed from the model's input data",
        ):
            run(_f32(6), _i64([2, 3]))


def test_shape_error_inside_a_node_names_it() -> None:
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="proj")]
    model = ert.onnx.load(
        _model(
            nodes, {"a": _f32(2, 3), "b": _f32(4, 5)}, ["y"], dims={"a": ["n", "k"], "b": ["k2", 5]}
        )
    )
    with pytest.raises(ert.ShapeError) as info:
        model.run(_f32(2, 3), _f32(4, 5))
    assert "ONNX node 'proj' (MatMul)" in "".join(getattr(info.value, "__notes__", []))


def test_load_takes_paths_bytes_and_protos(tmp_path: Any) -> None:
    data = _dynamic_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    for source in (path, str(path), data, onnx.load_from_string(data)):
        assert ert.onnx.load(source).outputs[0].name == "y"
    with pytest.raises(ert.ArgumentError, match="no ONNX file"):
        ert.onnx.load(tmp_path / "missing.onnx")
    with pytest.raises(ert.ArgumentError, match="takes a path"):
        ert.onnx.load(3)


def test_a_file_that_is_not_onnx_is_an_argument_error_naming_it(tmp_path: Any) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    for source, named in ((text, "notes.txt"), (tmp_path, str(tmp_path)), (b"garbage", "bytes")):
        with pytest.raises(ert.ArgumentError, match="not an ONNX model") as info:
            ert.onnx.load(source)
        assert named in str(info.value)


def test_weights_in_an_external_file_need_the_path(tmp_path: Any) -> None:
    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_empty_tensor_value_info("y")],
        [weight],
    )
    path = tmp_path / "m.onnx"
    onnx.save_model(
        helper.make_model(graph), path, save_as_external_data=True, location="m.data",
        size_threshold=0,
    )  # fmt: skip
    x = _f32(1, 4)
    np.testing.assert_array_equal(ert.onnx.load(path).run(x).numpy(), x)
    # From bytes the data file can't be found: say so, and what to do.
    with pytest.raises(ert.ArgumentError, match=r"initializer 'w'.*m\.data.*path") as info:
        ert.onnx.load(path.read_bytes())
    assert "load the model from its path" in str(info.value)


def test_missing_onnx_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ert.UsageError, match=r"pip install 'eagerrt\[models\]'"):
        ert.onnx.load(b"")


def test_import_eagerrt_does_not_import_onnx() -> None:
    code = (
        "import sys, eagerrt as ert\n"
        "assert 'onnx' not in sys.modules and 'eagerrt.onnx' not in sys.modules\n"
        "assert ert.onnx.load is not None and 'eagerrt.onnx' in sys.modules\n"
        "assert 'onnx' not in sys.modules  # the loader imports it on first use\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- GELU: the exporters' erf chain becomes one op ---------------------------------------------
def _gelu_chain(order: str) -> list[Any]:
    head = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
    ]
    if order == "x-first":  # torch's export: (x * (1 + erf)) * 0.5
        tail = [
            helper.make_node("Mul", ["x", "a"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y"]),
        ]
    else:  # (x * 0.5) * (1 + erf)
        tail = [
            helper.make_node("Mul", ["x", "half"], ["m"]),
            helper.make_node("Mul", ["m", "a"], ["y"]),
        ]
    return head + tail


GELU_CONSTANTS = {
    "sqrt2": np.array(np.sqrt(2.0), np.float32),
    "one": np.array(1.0, np.float32),
    "half": np.array(0.5, np.float32),
}


@pytest.mark.parametrize("order", ["x-first", "half-first"])
def test_gelu_chain_becomes_one_op(order: str) -> None:
    x = _f32(4, 6)
    model = _model(_gelu_chain(order), {"x": x}, ["y"], GELU_CONSTANTS)
    assert [n.op_type for n in ert.onnx.load(model).nodes] == ["Gelu"]
    assert [n.op_type for n in ert.onnx.load(model, fuse=False).nodes] == [
        "Div",
        "Erf",
        "Add",
        "Mul",
        "Mul",
    ]
    _assert_matches(model, {"x": x})


def test_gelu_chain_with_an_intermediate_used_elsewhere_is_kept() -> None:
    nodes = _gelu_chain("x-first")
    nodes.append(helper.make_node("Add", ["y", "e"], ["z"]))
    x = _f32(3, 3)
    model = _model(nodes, {"x": x}, ["z"], GELU_CONSTANTS)
    assert "Erf" in [n.op_type for n in ert.onnx.load(model).nodes]
    _assert_matches(model, {"x": x})


# -- linear layers: MatMul by a constant (+ Add of a bias) and Gemm become one eagerrt linear ---
def _mm_add(bias_first: bool = False) -> list[Any]:
    add = ["b", "xw"] if bias_first else ["xw", "b"]
    return [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", add, ["y"])]


LINEAR_CASES = {
    # name: the graph, the op types after the rewrites
    "matmul-add": (
        Case(_mm_add(), {"x": _f32(2, 5, 4)}, {"w": _f32(4, 3), "b": _f32(3)}),
        ["Linear"],
    ),
    "bias-first": (
        Case(_mm_add(True), {"x": _f32(5, 4)}, {"w": _f32(4, 3), "b": _f32(3)}),
        ["Linear"],
    ),
    "vector-input": (
        Case(_mm_add(), {"x": _f32(4)}, {"w": _f32(4, 3), "b": _f32(3)}),
        ["Linear"],
    ),
    "float64": (
        Case(
            _mm_add(),
            {"x": _f32(3, 4).astype(np.float64)},
            {"w": _f32(4, 3).astype(np.float64), "b": _f32(3).astype(np.float64)},
        ),
        ["Linear"],
    ),
    "one-value-bias": (
        Case(_mm_add(), {"x": _f32(3, 4)}, {"w": _f32(4, 3), "b": _f32(1)}),
        ["Linear"],
    ),
    "no-bias": (
        Case(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": _f32(2, 3, 4)}, {"w": _f32(4, 5)}
        ),
        ["Linear"],
    ),
    # y + b of shape (1, n) raises a vector input's product to rank 2: kept apart.
    "rank-2-bias": (
        Case(_mm_add(), {"x": _f32(4)}, {"w": _f32(4, 3), "b": _f32(1, 3)}),
        ["Linear", "Add"],
    ),
    "computed-bias": (
        Case(_mm_add(), {"x": _f32(2, 4), "b": _f32(2, 3)}, {"w": _f32(4, 3)}),
        ["Linear", "Add"],
    ),
    "product-read-twice": (
        Case(
            [*_mm_add(), helper.make_node("Mul", ["xw", "xw"], ["z"])],
            {"x": _f32(2, 4)},
            {"w": _f32(4, 3), "b": _f32(3)},
            outputs=["y", "z"],
        ),
        ["Linear", "Add", "Mul"],
    ),
    "computed-weight": (
        Case(_mm_add(), {"x": _f32(2, 4), "w": _f32(4, 3)}, {"b": _f32(3)}),
        ["MatMul", "Add"],
    ),
    "gemm-transB": (
        Case(
            [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
            {"x": _f32(2, 4)},
            {"w": _f32(3, 4), "b": _f32(3)},
        ),
        ["Linear"],
    ),
    "gemm-row-bias": (
        Case(
            [helper.make_node("Gemm", ["x", "w", "b"], ["y"])],
            {"x": _f32(2, 4)},
            {"w": _f32(4, 3), "b": _f32(1, 3)},
        ),
        ["Linear"],
    ),
    "gemm-no-C": (
        Case(
            [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
            {"x": _f32(2, 4)},
            {"w": _f32(3, 4)},
        ),
        ["Linear"],
    ),
    "gemm-beta-0": (
        Case(
            [helper.make_node("Gemm", ["x", "w", "b"], ["y"], beta=0.0)],
            {"x": _f32(2, 4)},
            {"w": _f32(4, 3), "b": _f32(3)},
        ),
        ["Linear"],
    ),
    "gemm-alpha": (
        Case(
            [helper.make_node("Gemm", ["x", "w", "b"], ["y"], alpha=0.5)],
            {"x": _f32(2, 4)},
            {"w": _f32(4, 3), "b": _f32(3)},
        ),
        ["Gemm"],
    ),
    "gemm-full-C": (
        Case(
            [helper.make_node("Gemm", ["x", "w", "b"], ["y"])],
            {"x": _f32(2, 4)},
            {"w": _f32(4, 3), "b": _f32(2, 3)},
        ),
        ["Gemm"],
    ),
    "gemm-transA": (
        Case(
            [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transA=1)],
            {"x": _f32(4, 2)},
            {"w": _f32(4, 3), "b": _f32(3)},
        ),
        ["Gemm"],
    ),
}


@pytest.mark.parametrize("name", sorted(LINEAR_CASES))
def test_linear_layers_become_one_op(name: str) -> None:
    case, expected = LINEAR_CASES[name]
    model = _model(case.nodes, case.inputs, case.outputs, case.initializers)
    loaded = ert.onnx.load(model)
    assert [n.op_type for n in loaded.nodes] == expected
    unfused = [n.op_type for n in ert.onnx.load(model, fuse=False).nodes]
    assert unfused == [n.op_type for n in case.nodes]
    _assert_matches(model, case.inputs, loaded=loaded)


def test_a_linear_layer_runs_as_linear_in_the_compiled_plan() -> None:
    x = _f32(4, 8, 16)
    model = _model(_mm_add(), {"x": x}, ["y"], {"w": _f32(16, 32), "b": _f32(32)})
    plan = ert.onnx.load(model).function.explain(ert.asarray(x))
    # PyTorch's (n, k) weight layout, made once at load: the plan's constant.
    assert "linear(%in0" in plan and "const float32[32, 16]" in plan
    assert "matmul" not in plan and "const float32[16, 32]" not in plan


def test_an_imported_model_takes_a_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    from eagerrt.backends.cpu import bf16, blas

    x = _f32(4, 8, 16)
    model = _model(_mm_add(), {"x": x}, ["y"], {"w": _f32(16, 32), "b": _f32(32)})
    monkeypatch.setattr(bf16, "cpu_features", lambda: ("old CPU", frozenset()))
    with pytest.raises(ert.PrecisionError, match="AVX512-BF16"):
        ert.onnx.load(model, precision="bf16").run(x)
    if blas.mkl_with_bf16() is None:
        return  # (the products themselves need MKL)
    monkeypatch.setattr(bf16, "cpu_features", lambda: ("test CPU", frozenset({"avx512bf16"})))
    loaded = ert.onnx.load(model, precision="bf16")
    assert "bfloat16 (1): %" in loaded.function.explain(ert.asarray(x))
    exact = ert.onnx.load(model).run(x).numpy()
    got = loaded.run(x).numpy()
    assert not np.array_equal(got, exact)
    np.testing.assert_allclose(got, exact, rtol=0, atol=0.02 * np.abs(exact).max())


def test_a_weight_read_by_two_products_is_transposed_once() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"]),
        helper.make_node("MatMul", ["z", "w"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    inputs = {"x": _f32(2, 4), "z": _f32(2, 4)}
    model = _model(nodes, inputs, ["y"], {"w": _f32(4, 3)})
    loaded = ert.onnx.load(model)
    first, second = (n for n in loaded.nodes if n.op_type == "Linear")
    assert first.inputs[1] == second.inputs[1]
    _assert_matches(model, inputs, loaded=loaded)


def _projected_attention(
    cross: bool,
) -> tuple[list[Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A BERT attention block as torch exports it: query, key and value each a
    MatMul + Add of the same input (of ``x`` and ``memory`` with ``cross``),
    heads split by Reshape and Transpose."""
    nodes = []
    weights: dict[str, np.ndarray] = {"heads": _i64([0, 0, 2, 4]), "merged": _i64([0, 0, 8])}
    for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        source = "memory" if cross and part != "q" else "x"
        weights |= {f"w{part}": _f32(8, 8), f"b{part}": _f32(8)}
        nodes += [
            helper.make_node("MatMul", [source, f"w{part}"], [f"{part}_mm"]),
            helper.make_node("Add", [f"b{part}", f"{part}_mm"], [f"{part}_lin"]),
            helper.make_node("Reshape", [f"{part}_lin", "heads"], [f"{part}_r"]),
            helper.make_node("Transpose", [f"{part}_r"], [f"{part}_t"], perm=perm),
        ]
    weights["c"] = np.array(0.5**0.5, np.float32)
    nodes += [
        helper.make_node("Mul", ["q_t", "c"], ["qs"]),
        helper.make_node("Mul", ["k_t", "c"], ["kts"]),
        helper.make_node("MatMul", ["qs", "kts"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v_t"], ["o"]),
        helper.make_node("Transpose", ["o"], ["o_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o_t", "merged"], ["y"]),
    ]
    inputs = {"x": _f32(2, 5, 8)} | ({"memory": _f32(2, 6, 8)} if cross else {})
    return nodes, inputs, weights


def test_query_key_and_value_of_one_input_become_one_product() -> None:
    nodes, inputs, weights = _projected_attention(cross=False)
    model = _model(nodes, inputs, ["y"], weights)
    loaded = ert.onnx.load(model)
    linears = [n for n in loaded.nodes if n.op_type == "Linear"]
    assert len(linears) == 1 and linears[0].attrs["split"] == [8, 8, 8]
    assert "ScaledDotProductAttention" in [n.op_type for n in loaded.nodes]
    _assert_matches(model, inputs, loaded=loaded)
    plan = loaded.function.explain(ert.asarray(inputs["x"]))
    products = re.findall(r"^ +%\d+ = (\S+)\(.*: (\S+\[.*\])$", plan, re.MULTILINE)
    assert [p for p in products if "linear" in p[0]] == [("linear", "float32[2, 5, 24]")]


def test_cross_attention_projections_stay_apart() -> None:
    nodes, inputs, weights = _projected_attention(cross=True)
    model = _model(nodes, inputs, ["y"], weights)
    loaded = ert.onnx.load(model)
    linears = [n for n in loaded.nodes if n.op_type == "Linear"]
    assert len(linears) == 3 and all("split" not in n.attrs for n in linears)
    _assert_matches(model, inputs, loaded=loaded)


def test_padding_mask_reaches_attention_as_a_boolean_key_mask() -> None:
    # torch's export of BERT's mask: the padding mask (batch, 1, 1, keys) AND-ed with
    # a mask made by shape arithmetic (all True), expanded, then Where(keep, 0, -inf).
    nodes, inputs, constants = _attention_graph(guard=True)
    nodes = [
        helper.make_node("Cast", ["keys"], ["keys_bool"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["keys_bool", "axes12"], ["keys4"]),
        helper.make_node(
            "ConstantOfShape",
            ["rows_shape"],
            ["rows"],
            value=helper.make_tensor("true", TensorProto.BOOL, [1], [True]),
        ),
        helper.make_node("And", ["rows", "keys4"], ["keep"]),
        helper.make_node("Expand", ["keep", "full"], ["keep_full"]),
        helper.make_node("Where", ["keep_full", "zero", "neg_inf"], ["mask"]),
        *nodes,
    ]
    keys = np.ones((2, 6), np.int64)
    keys[0, 4:] = 0
    keys[1, :] = 0  # nothing to attend to: zeros (ONNX: NaN, which the guard zeroes)
    del inputs["mask"]
    inputs["keys"] = keys
    constants |= {
        "axes12": _i64([1, 2]),
        "rows_shape": _i64([1, 1, 5, 1]),
        "full": _i64([2, 1, 5, 6]),
        "neg_inf": np.array([-np.inf], np.float32),
    }
    model = _model(nodes, inputs, ["y"], constants)
    loaded = ert.onnx.load(model)
    assert [n.op_type for n in loaded.nodes] == [
        "Cast", "Unsqueeze", "ConstantOfShape", "ScaledDotProductAttention"
    ]  # fmt: skip
    _assert_matches(model, inputs, loaded=loaded)
    assert not loaded.run(**inputs).numpy()[1].any()
    plan = loaded.function.explain(*(ert.asarray(inputs[i.name]) for i in loaded.inputs))
    # The all-True operand dropped out when traced: attention reads the padding mask.
    assert "logical_and" not in plan and "where" not in plan
    assert "bool[2, 1, 1, 6]" in plan


# -- real models ------------------------------------------------------------------------------
def test_resnet18_export_matches_onnxruntime(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    reference = pytest.importorskip("models.torch_reference")
    path = reference.export_onnx(
        reference.random_resnet18(seed=1),
        (torch.zeros(1, 3, 32, 32),),
        tmp_path / "resnet18.onnx",
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
    )
    model = ert.onnx.load(path)
    assert [str(i) for i in model.inputs] == ["image: float32[batch, 3, 32, 32]"]
    assert [n.op_type for n in model.nodes][-1] == "Linear"  # the classifier's Gemm
    for batch in (1, 3):
        image = RNG.standard_normal((batch, 3, 32, 32)).astype(np.float32)
        _assert_matches(path.read_bytes(), {"image": image}, atol=1e-4, loaded=model)
    assert model.function.traces == 2  # one per batch size


@pytest.mark.parametrize("pooled", [False, True], ids=["encoder", "pooled"])
def test_minilm_export_matches_onnxruntime(tmp_path: Any, pooled: bool) -> None:
    pytest.importorskip("torch")
    reference = pytest.importorskip("models.torch_reference")
    # pooled: mean pooling over the real tokens and L2 normalization in the graph too
    path = reference.export_minilm_onnx(tmp_path / "minilm.onnx", pooled=pooled)
    model = ert.onnx.load(path)
    assert [i.shape for i in model.inputs] == [("batch", "sequence")] * 2
    op_types = [n.op_type for n in model.nodes]
    assert "Erf" not in op_types and "Softmax" not in op_types  # GELU and attention fused
    # Every projection a linear layer: per layer query, key and value stacked, the
    # attention output, the feed-forward's two.
    assert "MatMul" not in op_types and op_types.count("Linear") == 6 * 4
    ids = RNG.integers(0, 30522, (3, 11)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0  # padding
    mask[2, 4:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    _assert_matches(path.read_bytes(), inputs, atol=1e-4, loaded=model)


# -- attention: PyTorch's exported scaled_dot_product_attention becomes one op ------------------
def _attention_graph(guard: bool) -> tuple[list[Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    nodes = [
        helper.make_node("Mul", ["q", "c"], ["qs"]),
        helper.make_node("Mul", ["kt", "c"], ["kts"]),
        helper.make_node("MatMul", ["qs", "kts"], ["scores"]),
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
    ]
    if guard:  # what torch exports: a fully masked row's NaNs become zeros
        nodes += [
            helper.make_node("IsNaN", ["p"], ["nan"]),
            helper.make_node("Where", ["nan", "zero", "p"], ["p2"]),
            helper.make_node("MatMul", ["p2", "v"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("MatMul", ["p", "v"], ["y"]))
    mask = np.zeros((2, 1, 5, 6), np.float32)
    mask[0, 0, :, 4:] = -np.inf  # padding
    mask[1, 0, 3, :] = -np.inf  # a row that may attend to nothing
    inputs = {"q": _f32(2, 3, 5, 4), "kt": _f32(2, 3, 4, 6), "v": _f32(2, 3, 6, 7), "mask": mask}
    constants = {"c": np.array(0.5**0.5, np.float32), "zero": np.zeros(1, np.float32)}
    return nodes, inputs, constants


def test_exported_attention_becomes_one_op() -> None:
    nodes, inputs, constants = _attention_graph(guard=True)
    model = _model(nodes, inputs, ["y"], constants)
    loaded = ert.onnx.load(model)
    assert [n.op_type for n in loaded.nodes] == ["ScaledDotProductAttention"]
    assert loaded.nodes[0].attrs["scale"] == pytest.approx(0.5)
    assert len(ert.onnx.load(model, fuse=False).nodes) == len(nodes)
    _assert_matches(model, inputs, loaded=loaded)
    assert not np.isnan(loaded.run(**inputs).numpy()).any()


def test_masked_attention_without_the_nan_guard_is_kept() -> None:
    # Without the guard a fully masked row is NaN in ONNX; the fused op would give zeros.
    nodes, inputs, constants = _attention_graph(guard=False)
    loaded = ert.onnx.load(_model(nodes, inputs, ["y"], constants))
    assert "Softmax" in [n.op_type for n in loaded.nodes]
    inputs["mask"][1, 0, 3, 0] = 0.0  # no fully masked row: ONNX Runtime's output has no NaN
    _assert_matches(_model(nodes, inputs, ["y"], constants), inputs)
