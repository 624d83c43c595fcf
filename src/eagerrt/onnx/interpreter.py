"""Running a decoded ONNX graph: shapes and constants on numpy at trace time,
the data-dependent rest as eagerrt ops.

Every value is either *known* (a numpy array: initializers, ``Constant``
nodes, ``Shape`` of anything, and whatever is computed from known values
alone) or a :class:`~eagerrt.Tensor` that depends on the model's inputs. An eagerrt
shape is static per signature, so the shape arithmetic exporters emit for
dynamic axes (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``,
``ConstantOfShape``, ``Range``, ``Expand``) all lands on known values and runs
once per trace, on numpy; only the model's real work becomes eagerrt ops, which
``ert.function`` compiles. Known values reach eagerrt ops as constants, which
graph mode's constant folding sees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import eagerrt as ert

from .._core import ArgumentError, EagerError
from ..tensor import Tensor
from .graph import Graph, Node
from .ops import REWRITES, SPECS, OpSpec, UnsupportedError

__all__ = ["run_graph"]

Value = np.ndarray | Tensor


def _known(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def _call(spec: OpSpec, node: Node, args: list[Any], weights: Mapping[int, Tensor]) -> Any:
    if all(a is None or _known(a) for a in args):
        if spec.numpy:
            return spec.fn(np, node, *args)
        # No numpy twin (a convolution of constants, say): run the eagerrt op on
        # the known values, now, and keep its result known.
        out = spec.fn(ert, node, *args)
        return tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()
    # Initializers enter as the tensors made once at load, not a new constant per call.
    args = [
        weights.get(id(a), a) if _known(a) and i not in spec.static else a
        for i, a in enumerate(args)
    ]
    return spec.fn(ert, node, *args)


def _evaluate(node: Node, values: dict[str, Value], weights: Mapping[int, Tensor]) -> None:
    spec = SPECS.get(node.op_type) or REWRITES[node.op_type]
    args = [values[name] if name else None for name in node.inputs]
    for i in spec.static:
        if i < len(args) and args[i] is not None and not _known(args[i]):
            raise UnsupportedError(
                f"{node.describe()}: its input {i} ({node.inputs[i]!r}) is computed from the "
                "model's input data, but eagerrt needs it when the graph is traced (a shape, "
                "axes or bounds); data-dependent shapes are not supported"
            )
    try:
        out = _call(spec, node, args, weights)
    except EagerError as exc:
        exc.add_note(f"in {node.describe()}")
        raise
    except (ValueError, TypeError, IndexError) as exc:  # numpy refusing known values
        raise ArgumentError(f"{node.describe()}: {exc}") from exc
    outs = out if isinstance(out, tuple) else (out,)
    for name, value in zip(node.outputs, outs, strict=False):
        if name:
            values[name] = value if isinstance(value, Tensor) else np.asarray(value)


def run_graph(
    graph: Graph, feeds: Mapping[str, Tensor], weights: Mapping[int, Tensor], nodes: Sequence[Node]
) -> list[Tensor]:
    """The graph's outputs for ``feeds`` (graph input name -> tensor), in order.

    ``weights`` maps ``id()`` of each initializer array to its eagerrt tensor;
    ``nodes`` is the graph's node list after the importer's rewrites.
    """
    values: dict[str, Value] = dict(graph.initializers)
    values.update(feeds)
    for node in nodes:
        _evaluate(node, values, weights)
    outputs: list[Tensor] = []
    for info in graph.outputs:
        value = values[info.name]
        if isinstance(value, np.ndarray):  # an output computed from constants alone
            weight = weights.get(id(value))
            value = ert.asarray(value) if weight is None else weight
        outputs.append(value)
    return outputs
