"""Running a graph op by op: compiled functions on a device whose backend has no
compiler, or whose device does not take this graph as a plan, or whose values
span several devices (see :mod:`eagerrt.graph.backend`).

A stream device's ops enqueue work and return at once. There a compiled function
keeps the device-neutral rewrites (dead code, common subexpressions) and calls
each remaining op like an eager call: the device's own ordering (streams,
events) does the rest.

>>> import numpy as np, eagerrt as ert
>>> dev = ert.get_device("teststream:0")
>>> W = ert.asarray(np.eye(2) * 3, device=dev)
>>> f = ert.function(lambda x: ert.relu(x @ W) + 1)
>>> f(ert.asarray(np.ones((1, 2)), device=dev)).numpy()
array([[4., 4.]])
"""

from __future__ import annotations

import math
import time
from typing import Any

from .._core import synchronize
from ..tensor import Tensor
from .ir import Graph, Value
from .passes import cse, dce

__all__ = ["OpByOpPlan"]


class OpByOpPlan:
    """A graph run by calling its ops on tensors, in order."""

    #: run_plan hands these to :meth:`run` (the CPU's plans run generated code).
    op_by_op = True

    def __init__(self, graph: Graph) -> None:
        dce.run(graph)
        cse.run(graph)
        dce.run(graph)
        graph.note(
            "op by op", f"{len(graph.nodes)} ops, run as eager calls on {self._device(graph)}"
        )
        self.graph = graph
        self.outputs = graph.outputs

    def describe(self) -> list[str]:
        """How this plan runs, for ``fn.explain``."""
        return [
            f"execution: {len(self.graph.nodes)} ops, called in order as eager calls on "
            f"{self._device(self.graph)} (its streams order them)"
        ]

    @staticmethod
    def _device(graph: Graph) -> str:
        for v in [*graph.inputs, *graph.outputs]:
            return str(v.device)
        return "cpu"

    def time_ops(self, inputs: list[Tensor], repeats: int) -> list[tuple[str, float]]:
        """Each op's best time over ``repeats`` eager calls on these inputs, in
        nanoseconds, waiting for the device after each (``measure_costs``)."""
        timings = []

        def timed(node: Any, args: list[Any]) -> Any:
            best = math.inf
            for _ in range(max(1, repeats)):
                start = time.perf_counter_ns()
                out = node.op(*args, **node.static)
                synchronize()  # the device's streams too: the op's work, not its launch
                best = min(best, time.perf_counter_ns() - start)
            timings.append((f"{node.outputs[0].name} {node.name}", float(best)))
            return out

        synchronize()
        self._interpret(inputs, timed)
        return timings

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        return self._interpret(inputs, _eager_call)

    def _interpret(self, inputs: list[Tensor], call: Any) -> list[Tensor]:
        """The graph's outputs for ``inputs``, each node's op made by
        ``call(node, operands)`` in order."""
        graph = self.graph
        env: dict[int, Any] = {v.id: t for v, t in zip(graph.inputs, inputs, strict=True)}

        def get(a: Any) -> Any:
            if type(a) is not Value:
                return a  # a weak Python scalar
            return a.const if a.const is not None else env[a.id]

        for node in graph.nodes:
            out = call(node, [get(a) for a in node.inputs])
            outs = (out,) if len(node.outputs) == 1 else out
            for v, t in zip(node.outputs, outs, strict=True):
                env[v.id] = t
        return [get(v) for v in graph.outputs]


def _eager_call(node: Any, args: list[Any]) -> Any:
    return node.op(*args, **node.static)
