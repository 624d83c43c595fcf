"""Replaying a failed compiled call op by op, so each output fails alone.

A compiled call runs one plan: fused kernels, shared buffers, generated code,
with no record of which output a failing step or a failed input reaches.
Eagerly, each op's result carries its own failure and ops that read no failed
value still compute. So when a call of ``ert.function`` sees a failed input
or a step raises, the executor throws away what the plan did and replays the
call: the traced graph as it was before the optimizer rewrote it (fusion,
epilogues and small-op regions make kernels no eager op has), node by node
with each op's eager kernel, on the call's input values. Like an eager op, a
node with a failed operand fails with that operand's failure (the first one,
in operand order), and a kernel that raises fails its node with a failure
naming its op and the user's line that called it. Every output then holds its
own value, or the failure of exactly the ops it depends on.

The replay costs nothing until a call fails: it is a list of the traced nodes,
made when the function compiles; its constants are the arrays of the tensors
the function closes over (after batch norm folding, the unfolded weights as
well as the folded ones the plan holds). Stateful ops,
random samples drawn without ``seed=``, draw again in a replay, so a failed
call's other outputs can differ from what the plan would have sampled.

>>> import numpy as np, eagerrt as ert
>>> bad = ert.linalg.inv(ert.zeros((2, 2)))  # singular: its kernel fails
>>> f = ert.function(lambda a, b: (a + 1, b * 2))
>>> a, b = f(bad, ert.asarray(np.ones(2)))  # b reads only the good input
>>> a.is_error(), b.numpy().tolist()
(True, [2.0, 2.0])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._core import Failure, SourceLine
from .ir import Graph, Value
from .kernels import eager_kernel

__all__ = ["Replay"]


@dataclass(frozen=True)
class _Op:
    """One traced node, kept as traced (the optimizer edits the graph's own)."""

    op: Any
    inputs: tuple[Any, ...]
    static: dict[str, Any]
    outputs: tuple[Value, ...]
    site: SourceLine | None

    def kernel(self) -> Callable[..., Any]:
        return eager_kernel(self.op, self.inputs, self.static, self.outputs[0].device)


class Replay:
    """A traced graph's live nodes, to run one by one with eager failure semantics."""

    __slots__ = ("inputs", "ops", "outputs")

    def __init__(self, graph: Graph) -> None:
        live = {v.id for v in graph.outputs}
        ops = []
        for node in reversed(graph.nodes):
            if any(v.id in live for v in node.outputs):
                inputs, outputs = tuple(node.inputs), tuple(node.outputs)
                ops.append(_Op(node.op, inputs, dict(node.static), outputs, node.site))
                live.update(v.id for v in node.value_inputs())
        self.ops = ops[::-1]
        self.inputs = list(graph.inputs)
        self.outputs = list(graph.outputs)

    def run(self, inputs: list[Any]) -> list[Any]:
        """Each output's array, or its :class:`~eagerrt.Failure`, for these
        input arrays (a failed input given as its Failure)."""
        env: dict[int, Any] = {v.id: x for v, x in zip(self.inputs, inputs, strict=True)}

        def get(a: Any) -> Any:
            if type(a) is not Value:
                return a  # a weak Python scalar
            return a.const if a.const is not None else env[a.id]

        for node in self.ops:
            args = [get(a) for a in node.inputs]
            failure = next((a for a in args if type(a) is Failure), None)
            if failure is None:
                try:
                    result = node.kernel()(*args, **node.static)
                except Exception as exc:
                    failure = Failure(str(node.op.name), node.site, exc)
            if failure is not None:
                env.update((v.id, failure) for v in node.outputs)
                continue
            results = result if len(node.outputs) > 1 else (result,)
            for v, r in zip(node.outputs, results, strict=True):
                env[v.id] = r
        return [get(v) for v in self.outputs]
