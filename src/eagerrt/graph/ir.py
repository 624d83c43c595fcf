"""The graph IR: a traced function as values and the nodes that compute them.

Small on purpose (a list of nodes in a valid execution order, SSA values) so a
pass is a short loop and a printed graph reads like the program:

    graph model(%x: float32[32, 784]) {
      %w1 = const float32[784, 512]
      %0 = matmul(%x, %w1) : float32[32, 512]
      %1 = add(%0, %b1) : float32[32, 512]
      %2 = maximum(%1, 0) : float32[32, 512]
      return %2
    }

A node's ``op`` is an :class:`~eagerrt.ops.registry.Op` (registered or made by a
pass, like a fused kernel); its inputs are values or weak Python scalars; its
``static`` keyword arguments are what the op was called with.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .._core import SourceLine, TracingError, user_line
from ..tensor import Shaped

__all__ = ["Graph", "Node", "Value"]

_ids = itertools.count()


class Value(Shaped):
    """One SSA value: the output of a node, a graph input, or a constant.

    It has a tensor's metadata (``shape``, ``dtype``, ``device``, ``ndim``,
    ``size``), so an op's shape rule and cost function accept it in place of a
    tensor.
    """

    __slots__ = ("const", "device", "dtype", "id", "name", "node", "shape", "site")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        device: Any,
        *,
        node: Node | None = None,
        const: Any = None,
        name: str | None = None,
        site: SourceLine | None = None,
    ) -> None:
        self.id = next(_ids)
        self.shape = shape
        self.dtype = dtype
        self.device = device
        #: The node computing this value; None for inputs and constants.
        self.node = node
        #: A constant's data: a numpy array (or, until compiled, the Tensor it
        #: came from). None for computed values and inputs.
        self.const = const
        self.name = name or f"%{self.id}"
        #: The user's line that made this value (for errors and explain()).
        self.site = site

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def type_str(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"

    def read_error(self) -> TracingError:
        """The error for asking a traced tensor for its data (see Tensor._host_value)."""
        site = user_line()
        return TracingError(
            f"the value of traced tensor {self.name} ({self.type_str()}) isn't known while "
            "ert.function traces: Python control flow on it (`if t:`, `while t > 0:`), "
            "`await t`, float(t)/int(t)/bool(t), t.numpy(), and ops whose result shape "
            "depends on data (boolean masks, nonzero, unique_*) need data a trace doesn't "
            f"have\n  at {site}\n"
            "Fix: use ert.where / ert.cond(pred, true_fn, false_fn, *operands) / "
            "ert.while_loop(cond_fn, body_fn, init) for control flow on values, compute it "
            "outside the compiled function, or run the function eagerly (fn.eager(...))."
        )

    def __repr__(self) -> str:
        return f"<Value {self.name}: {self.type_str()}>"


Operand = Any  # a Value, or a weak Python scalar


class Node:
    """``outputs = op(*inputs, **static)``."""

    __slots__ = ("inputs", "op", "outputs", "site", "static")

    def __init__(
        self,
        op: Any,
        inputs: Iterable[Operand],
        static: dict[str, Any],
        outputs: Iterable[Value],
        site: SourceLine | None = None,
    ) -> None:
        self.op = op
        self.inputs: list[Operand] = list(inputs)
        self.static = static
        self.outputs: list[Value] = list(outputs)
        for v in self.outputs:
            v.node = self
        self.site = site

    @property
    def out(self) -> Value:
        """The only output (most nodes have one)."""
        return self.outputs[0]

    @property
    def name(self) -> str:
        return str(self.op.name)

    def value_inputs(self) -> Iterator[Value]:
        for a in self.inputs:
            if type(a) is Value:
                yield a

    def __repr__(self) -> str:
        return f"<Node {format_node(self)}>"


def format_node(node: Node) -> str:
    outs = ", ".join(v.name for v in node.outputs)
    args = ", ".join(a.name if type(a) is Value else repr(a) for a in node.inputs)
    static = "".join(f", {k}={v!r}" for k, v in node.static.items())
    types = ", ".join(v.type_str() for v in node.outputs)
    return f"{outs} = {node.name}({args}{static}) : {types}"


class Graph:
    """A traced function: inputs, nodes in execution order, outputs.

    Constants are values with ``const`` set that appear as node inputs or
    outputs; they are not listed separately (``constants()`` finds them).
    """

    def __init__(self, name: str, inputs: list[Value]) -> None:
        self.name = name
        self.inputs = inputs
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        #: What each pass did, in order: (pass name, summary).
        self.log: list[tuple[str, str]] = []
        #: The precision its products are compiled in (see ``eagerrt._core.precision``).
        self.precision = "float32"

    # -- queries -------------------------------------------------------------
    def _reads(self) -> Iterator[Value]:
        """Every read of a value: node operands in order, then the graph's outputs."""
        for node in self.nodes:
            yield from node.value_inputs()
        yield from self.outputs

    def constants(self) -> list[Value]:
        return list({v.id: v for v in self._reads() if v.is_const}.values())

    def users(self) -> dict[int, list[Node]]:
        """Value id -> the nodes reading it (a node once per operand it takes)."""
        users: dict[int, list[Node]] = {}
        for node in self.nodes:
            for v in node.value_inputs():
                users.setdefault(v.id, []).append(node)
        return users

    def use_counts(self) -> dict[int, int]:
        return dict(Counter(v.id for v in self._reads()))

    # -- edits ---------------------------------------------------------------
    def replace_uses(self, old: Value, new: Operand) -> None:
        """Every read of ``old`` (node inputs and graph outputs) reads ``new``."""
        for node in self.nodes:
            node.inputs = [new if a is old else a for a in node.inputs]
        if type(new) is Value:
            self.outputs = [new if v is old else v for v in self.outputs]

    def note(self, pass_name: str, summary: str) -> None:
        self.log.append((pass_name, summary))

    def verify(self) -> None:
        """Check the invariants passes must keep: every input defined before
        it is read, each value produced once, outputs defined."""
        defined = {v.id for v in self.inputs}
        for node in self.nodes:
            for v in node.value_inputs():
                if not v.is_const and v.id not in defined:
                    raise AssertionError(f"{v.name} read before it is defined in {node!r}")
            for v in node.outputs:
                if v.id in defined:
                    raise AssertionError(f"{v.name} defined twice")
                defined.add(v.id)
        for v in self.outputs:
            if not v.is_const and v.id not in defined:
                raise AssertionError(f"output {v.name} is never defined")

    # -- printing ------------------------------------------------------------
    def __str__(self) -> str:
        params = ", ".join(f"{v.name}: {v.type_str()}" for v in self.inputs)
        lines = [f"graph {self.name}({params}) {{"]
        lines += [f"  {c.name} = const {c.type_str()}" for c in self.constants()]
        lines += [f"  {format_node(node)}" for node in self.nodes]
        lines += [f"  return {', '.join(v.name for v in self.outputs)}", "}"]
        return "\n".join(lines)
