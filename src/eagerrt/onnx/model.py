"""``ert.onnx.load``: an ONNX model as a callable that runs through ``ert.function``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

import eagerrt as ert

from .._core import ArgumentError, DTypeError, ShapeError, UsageError
from ..graph.function import Function
from ..tensor import Tensor
from . import fusion
from .graph import Graph, Node, ValueInfo, read_graph
from .interpreter import run_graph
from .ops import SPECS, UnsupportedError, supported_ops

__all__ = ["OnnxModel", "load"]


def load(source: Any, *, fuse: bool = True, precision: str | None = None) -> OnnxModel:
    """Load an ONNX model: a path, the file's bytes or an ``onnx.ModelProto``.

    Every node is checked here: an op, attribute or attribute value eagerrt
    does not support raises :class:`~eagerrt.onnx.UnsupportedError` naming the
    node. ``fuse=False`` keeps the subgraphs the importer would rewrite into
    one eagerrt op (GELU spelled out with ``Erf``, attention as matmuls and a
    softmax, a linear layer as ``MatMul`` by its transposed weight and ``Add``)
    as they are. ``precision``: the compiled calls' matrix-product precision,
    as :func:`eagerrt.function` takes it (``"bfloat16"`` where the CPU has fast
    bfloat16 products; None follows ``ert.config.matmul_precision``).

    >>> import numpy as np, eagerrt as ert
    >>> from onnx import TensorProto, helper, numpy_helper
    >>> w = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 2, "w")
    >>> graph = helper.make_graph(
    ...     [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Relu", ["xw"], ["y"])],
    ...     "double", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])
    >>> model = ert.onnx.load(helper.make_model(graph).SerializeToString())
    >>> [str(i) for i in model.inputs]
    ['x: float32[batch, 3]']
    >>> model.run(np.array([[1, -1, 2]], dtype=np.float32)).numpy()
    array([[2., 0., 4.]], dtype=float32)
    """
    return OnnxModel(read_graph(source), fuse=fuse, precision=precision)


class OnnxModel:
    """An ONNX model loaded by :func:`load`.

    * ``await model(x)`` or ``await model(input_ids=..., attention_mask=...)``:
      the graph through :func:`eagerrt.function` (traced and compiled once per
      input signature). ``model.run(...)`` is the same call from sync code.
    * ``model.eager(...)``: the same graph op by op, eagerly.

    All three give one :class:`~eagerrt.Tensor` for a one-output model, else a
    dict of tensors by output name (in the graph's order). Inputs are tensors,
    numpy arrays or nested lists, by position in ``model.inputs`` or by name;
    a wrong name, dtype or shape raises a :class:`~eagerrt.UsageError` at the call.
    """

    def __init__(self, graph: Graph, *, fuse: bool = True, precision: str | None = None) -> None:
        _validate(graph)
        nodes: list[Node] = graph.nodes
        if fuse:
            constants = dict(graph.initializers)
            constants.update(
                (n.outputs[0], n.attrs["value"])
                for n in nodes
                if n.op_type == "Constant" and "value" in n.attrs
            )
            outputs = {o.name for o in graph.outputs}
            nodes, made = fusion.fuse(nodes, constants, outputs)
            # The rewrites' arrays (transposed weights) join the initializers, and
            # those no node reads any more (the weights as the file had them) go.
            read = {name for node in nodes for name in node.inputs} | outputs
            every = {**graph.initializers, **made}
            graph = dataclasses.replace(
                graph, initializers={k: v for k, v in every.items() if k in read}
            )
        self._graph = graph
        self._nodes = nodes
        # Made once: each weight is the same eagerrt constant in every trace and eager call.
        self._weights = {id(a): ert.asarray(a) for a in graph.initializers.values()}
        self._names = [i.name for i in graph.inputs]
        #: The compiled function behind ``model(...)`` (positional tensors, in
        #: ``model.inputs`` order); ``model.function.explain(*tensors)`` shows its plan.
        self.function: Function[Any] = ert.function(self._run, precision=precision)

    # -- description -----------------------------------------------------------------
    @property
    def inputs(self) -> tuple[ValueInfo, ...]:
        """The graph's inputs (initializers excluded): name, dtype, shape."""
        return self._graph.inputs

    @property
    def outputs(self) -> tuple[ValueInfo, ...]:
        """The graph's outputs: name, dtype, shape."""
        return self._graph.outputs

    @property
    def opset(self) -> int:
        """The default domain's opset version the model was exported with."""
        return self._graph.opset

    @property
    def nodes(self) -> list[Node]:
        """The nodes that run, after the load-time rewrites."""
        return list(self._nodes)

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return (
            f"<ert.onnx model {self._graph.name!r} ({ins}) -> ({outs}), {len(self._nodes)} nodes>"
        )

    # -- calling -------------------------------------------------------------------------
    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """``await model(...)`` from sync code: through the compiled function."""
        return self._package(self.function(*self._bind(args, kwargs)))

    def eager(self, *args: Any, **kwargs: Any) -> Any:
        """Run the graph op by op with eager eagerrt ops (no tracing)."""
        return self._package(self._run(*self._bind(args, kwargs)))

    def _run(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        feeds = dict(zip(self._names, tensors, strict=True))
        return tuple(run_graph(self._graph, feeds, self._weights, self._nodes))

    def _package(self, outputs: Sequence[Tensor]) -> Any:
        if len(outputs) == 1:
            return outputs[0]
        return {info.name: t for info, t in zip(self.outputs, outputs, strict=True)}

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Tensor]:
        if len(args) > len(self._names):
            raise ArgumentError(
                f"the ONNX model takes {len(self._names)} inputs ({', '.join(self._names)}), "
                f"got {len(args)} positional arguments"
            )
        given = dict(zip(self._names, args, strict=False))
        for name, value in kwargs.items():
            if name not in self._names:
                raise ArgumentError(
                    f"the ONNX model has no input {name!r}; its inputs: {', '.join(self._names)}"
                )
            if name in given:
                raise ArgumentError(f"the ONNX model's input {name!r} is given twice")
            given[name] = value
        missing = [n for n in self._names if n not in given]
        if missing:
            raise ArgumentError(
                f"the ONNX model needs the inputs {', '.join(missing)} (it takes "
                f"{', '.join(map(str, self.inputs))})"
            )
        sizes: dict[str, tuple[int, str]] = {}  # symbolic dimension -> size, and whose
        return [_checked(info, given[info.name], sizes) for info in self.inputs]


def _checked(info: ValueInfo, value: Any, sizes: dict[str, tuple[int, str]]) -> Tensor:
    """``value`` as a tensor of ``info``'s dtype and shape, or a UsageError."""
    if info.dtype is None:
        return ert.asarray(value)
    tensor_given = type(value) is Tensor
    if not tensor_given:
        try:
            if isinstance(value, (list, tuple, bool, int, float)):
                value = _python_value(info, value)
            else:
                value = np.asarray(value)
        except (ValueError, TypeError, OverflowError) as exc:  # ragged, too large, ...
            raise ArgumentError(
                f"the ONNX model's input {info}: can't make an array of "
                f"{type(value).__name__} {value!r:.80}: {exc}"
            ) from exc
    if value.dtype != info.dtype:
        cast = f"ert.astype(x, ert.{info.dtype})" if tensor_given else f".astype(np.{info.dtype})"
        raise DTypeError(
            f"the ONNX model's input {info.name!r} must be {info.dtype}, got {value.dtype} "
            f"(cast it with {cast})"
        )
    value = ert.asarray(value)
    if info.shape is None:
        return value
    if len(value.shape) != len(info.shape):
        raise ShapeError(
            f"the ONNX model's input {info} needs rank {len(info.shape)}, got shape {value.shape}"
        )
    for axis, (want, got) in enumerate(zip(info.shape, value.shape, strict=True)):
        if isinstance(want, int) and want != got:
            raise ShapeError(
                f"the ONNX model's input {info} needs size {want} on axis {axis}, got shape {value.shape}"
            )
        if isinstance(want, str):
            seen = sizes.setdefault(want, (got, info.name))
            if seen[0] != got:
                raise ShapeError(
                    f"the ONNX model's dimension {want!r} is {seen[0]} in input {seen[1]!r} but "
                    f"{got} in input {info.name!r} (shape {value.shape})"
                )
    return value


def _python_value(info: ValueInfo, value: Any) -> np.ndarray:
    """Python numbers take the input's dtype (``[[1, 2]]`` for a float32 input), but
    not by losing their fractions (``[[1.5]]`` for an int64 input is refused)."""
    assert info.dtype is not None
    natural = np.asarray(value)
    if natural.dtype.kind == "f" and info.dtype.kind in "biu":
        return natural  # the caller's dtype check names both
    return np.asarray(value, dtype=info.dtype)


def _validate(graph: Graph) -> None:
    """Refuse, at load, every node eagerrt can't run, naming it."""
    defined = set(graph.initializers) | {i.name for i in graph.inputs}
    used = {name for node in graph.nodes for name in node.inputs} | {o.name for o in graph.outputs}
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx"):
            raise UnsupportedError(
                f"{node.describe()} is in the domain {node.domain!r}; eagerrt.onnx runs the "
                "default ONNX domain only"
            )
        spec = SPECS.get(node.op_type)
        if spec is None:
            raise UnsupportedError(
                f"{node.describe()}: the op {node.op_type!r} is not supported by eagerrt.onnx; "
                f"supported: {', '.join(supported_ops())}"
            )
        extra = sorted(set(node.attrs) - spec.attrs)
        if extra:
            raise UnsupportedError(
                f"{node.describe()}: attribute(s) {', '.join(extra)} not supported; "
                f"{node.op_type} takes {', '.join(sorted(spec.attrs)) or 'no attributes'}"
            )
        low, high = spec.inputs
        if not low <= len(node.inputs) <= high:
            raise UnsupportedError(
                f"{node.describe()} has {len(node.inputs)} inputs; eagerrt runs {node.op_type} "
                f"with {low}" + ("" if low == high else f" to {high}")
            )
        for name in node.outputs[spec.outputs :]:
            if name and name in used:
                raise UnsupportedError(
                    f"{node.describe()}: its output {name!r} is used, but eagerrt computes only "
                    f"the first {spec.outputs} output(s) of {node.op_type}"
                )
        if spec.check is not None:
            spec.check(node)
        for name in node.inputs:
            if name and name not in defined:
                raise ArgumentError(
                    f"{node.describe()} reads {name!r}, which no earlier node, input or "
                    "initializer defines (the graph must be in topological order)"
                )
        defined.update(n for n in node.outputs if n)
    for info in graph.outputs:
        if info.name not in defined:
            raise ArgumentError(f"the graph's output {info.name!r} is never computed")
    if not graph.outputs:
        raise UsageError("the ONNX graph has no outputs")
