"""An ONNX ``ModelProto`` read into plain Python: nodes with decoded attributes,
initializers as numpy arrays, inputs and outputs as :class:`ValueInfo`.

The ``onnx`` package is imported here, on first use, so that ``import eagerrt``
(and ``import eagerrt.onnx``) never needs it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import ArgumentError, UsageError

__all__ = ["Graph", "Node", "ValueInfo", "import_onnx", "read_graph"]

INSTALL_HINT = "pip install 'eagerrt[models]' (or onnx)"

#: The dtypes eagerrt computes in (ONNX's bfloat16, float8 and string types are not).
_SUPPORTED_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64",
    )
)  # fmt: skip


def import_onnx() -> Any:
    """The ``onnx`` package, or a UsageError saying how to install it."""
    try:
        import onnx
    except ImportError as exc:
        raise UsageError(
            f"eagerrt.onnx needs the onnx package, which is not installed ({exc}); {INSTALL_HINT}"
        ) from None
    return onnx


@dataclass(frozen=True)
class ValueInfo:
    """A graph input or output: its name, dtype and shape.

    A dimension is an int when fixed, a string when symbolic (``"batch"``: every
    input dimension with that name must have the same size in one call) and
    None when the model leaves it unnamed. ``shape`` is None when the rank
    itself is unknown; ``dtype`` is None for an output the model leaves untyped.
    """

    name: str
    dtype: np.dtype[Any] | None
    shape: tuple[int | str | None, ...] | None

    def __str__(self) -> str:
        dims = (
            "?"
            if self.shape is None
            else ", ".join("?" if d is None else str(d) for d in self.shape)
        )
        return f"{self.name}: {self.dtype}[{dims}]"


@dataclass
class Node:
    """One ONNX node; ``attrs`` holds its attributes as Python values (ints,
    floats, strings, lists of them, numpy arrays for tensors)."""

    op_type: str
    name: str
    inputs: list[str]  # "" for an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    opset: int = 0

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def describe(self) -> str:
        """How error messages name the node."""
        if self.name:
            return f"ONNX node {self.name!r} ({self.op_type})"
        return f"an ONNX {self.op_type} node"


@dataclass
class Graph:
    """A model's main graph, decoded."""

    nodes: list[Node]
    initializers: dict[str, np.ndarray]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    opset: int
    name: str


def _dtype(elem_type: int, what: str) -> np.dtype[Any]:
    onnx = import_onnx()
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        dtype = None
    if dtype not in _SUPPORTED_DTYPES:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
        raise UsageError(
            f"{what} has ONNX type {name}, which eagerrt does not compute in; supported: "
            + ", ".join(sorted(str(d) for d in _SUPPORTED_DTYPES))
        )
    return dtype


def _array(tensor: Any, what: str) -> np.ndarray:
    onnx = import_onnx()
    _dtype(tensor.data_type, what)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        # onnx.load(path) reads these in; a model given as bytes or a proto has only the name.
        entries = {e.key: e.value for e in tensor.external_data}
        raise ArgumentError(
            f"{what} is stored in the external file {entries.get('location', '?')!r}, which "
            "was not read: load the model from its path (ert.onnx.load('model.onnx')), with "
            "that file beside it"
        )
    # A read-only array of its own: eagerrt shares it with the constants it makes.
    array = np.array(onnx.numpy_helper.to_array(tensor), copy=True)
    array.flags.writeable = False
    return array


def _value_info(info: Any) -> ValueInfo:
    kind = info.type.WhichOneof("value")
    if kind is None:  # untyped (allowed for outputs): whatever the graph computes
        return ValueInfo(info.name, None, None)
    if kind != "tensor_type":
        raise UsageError(
            f"graph input/output {info.name!r} is a {kind}; eagerrt.onnx takes tensors"
        )
    tensor_type = info.type.tensor_type
    dtype = _dtype(tensor_type.elem_type, f"graph input/output {info.name!r}")
    shape: tuple[int | str | None, ...] | None = None
    if tensor_type.HasField("shape"):
        dims: list[int | str | None] = []
        for d in tensor_type.shape.dim:
            which = d.WhichOneof("value")
            dims.append(d.dim_value if which == "dim_value" else d.dim_param if which else None)
        shape = tuple(dims)
    return ValueInfo(info.name, dtype, shape)


def _attribute(attribute: Any, node_name: str) -> Any:
    onnx = import_onnx()
    kind = attribute.type
    types = onnx.AttributeProto
    if kind == types.TENSOR:
        return _array(attribute.t, f"attribute {attribute.name!r} of node {node_name!r}")
    if kind in (types.GRAPH, types.GRAPHS, types.SPARSE_TENSOR, types.SPARSE_TENSORS):
        return attribute  # refused by the op table: no supported op takes one
    value = onnx.helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _model_proto(source: Any) -> Any:
    onnx = import_onnx()
    arg: Any
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        what = f"the {len(source)} bytes given"
        read, arg = onnx.load_from_string, bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        what = repr(os.fspath(source))
        if not os.path.exists(source):
            raise ArgumentError(f"no ONNX file at {what}")
        read, arg = onnx.load, os.fspath(source)
    else:
        raise ArgumentError(
            "ert.onnx.load takes a path, the file's bytes or an onnx.ModelProto, "
            f"got {type(source).__name__}"
        )
    try:
        return read(arg)
    except Exception as exc:  # protobuf's DecodeError, OSError, ...: only parsing runs here
        raise ArgumentError(f"{what}: not an ONNX model ({type(exc).__name__}: {exc})") from exc


def read_graph(source: Any) -> Graph:
    """Decode ``source`` (a path, bytes or a ``ModelProto``) into a :class:`Graph`."""
    model = _model_proto(source)
    opset = 0
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            opset = entry.version
    graph = model.graph
    initializers = {t.name: _array(t, f"initializer {t.name!r}") for t in graph.initializer}
    if graph.sparse_initializer:
        raise UsageError("sparse initializers are not supported by eagerrt.onnx")
    nodes = []
    for index, proto in enumerate(graph.node):
        name = proto.name or f"{proto.op_type}_{index}"
        nodes.append(
            Node(
                op_type=proto.op_type,
                name=name,
                inputs=list(proto.input),
                outputs=list(proto.output),
                attrs={a.name: _attribute(a, name) for a in proto.attribute},
                domain=proto.domain,
                opset=opset,
            )
        )
    # Older exporters list initializers among the inputs too: they are weights.
    inputs = tuple(_value_info(i) for i in graph.input if i.name not in initializers)
    outputs = tuple(_value_info(o) for o in graph.output)
    return Graph(nodes, initializers, inputs, outputs, opset, graph.name)
