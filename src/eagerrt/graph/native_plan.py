"""Compiled functions on stream devices that run whole plans (the cuda device).

The CPU's plans generate Python over numpy buffers; a stream device whose
``runs_native_plans`` is set takes a plan as one unit of work instead (its
backend, :mod:`eagerrt.backends.stream`, compiles graphs to this plan). The
graph keeps the device-neutral rewrites (dead code, common subexpressions), then
the backend's own passes (the cuda backend's fuse what its kernels do in one
launch: :mod:`eagerrt.backends.cuda.passes`); each
remaining node becomes a call of its op's kernel for that device, on native
arrays, with no tensor, rule or scheduler in between. The device enqueues the
whole sequence on one stream, ordered after the inputs and constants it reads
(:meth:`~eagerrt.devices.stream.StreamDevice.enqueue_plan`), and may capture it
once and replay it (the cuda device: a CUDA graph, :mod:`eagerrt.devices.cuda_graphs`).

Inputs that are not ready device values (still pending, failed, on another
device) run the graph op by op instead, as eager calls would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core import READY, Failure, user_line
from ..devices.stream import DeviceValue, StreamDevice
from ..tensor import Tensor
from .backend import Pass
from .ir import Graph, Value
from .op_by_op import OpByOpPlan

__all__ = ["NativePlan"]


# Where a kernel's operand comes from: an input, an earlier result, a constant
# (index into the plan's constants), or a Python value given as is.
_INPUT, _RESULT, _CONSTANT, _LITERAL = range(4)


class NativePlan:
    """A graph run as its device's kernels on native arrays (see the module docstring)."""

    #: run_plan hands these to :meth:`run` (the CPU's plans run generated code).
    op_by_op = True

    def __init__(self, graph: Graph, device: StreamDevice, passes: Sequence[Pass] = ()) -> None:
        self.by_ops = OpByOpPlan(graph)  # dead code and common subexpressions gone
        # After them (a fused node's parts are no longer shared): the backend's
        # fusions of what its kernels do in one launch.
        for run in passes:
            run(graph)
        self.graph = graph
        self.device = device
        self.outputs = graph.outputs
        inputs = {v.id: i for i, v in enumerate(graph.inputs)}
        constants: dict[int, int] = {}
        self._constants: list[Tensor] = []
        results: dict[int, int] = {}

        def source(a: Any) -> tuple[int, Any]:
            if type(a) is not Value:
                return _LITERAL, a
            if a.id in inputs:
                return _INPUT, inputs[a.id]
            if a.const is not None:
                if a.id not in constants:
                    constants[a.id] = len(self._constants)
                    self._constants.append(a.const)
                return _CONSTANT, constants[a.id]
            return _RESULT, results[a.id]

        self._steps: list[tuple[Any, Any, list[tuple[int, Any]], dict[str, Any], int]] = []
        for node in graph.nodes:
            sources = [source(a) for a in node.inputs]
            first = len(results)
            for v in node.outputs:
                results[v.id] = len(results)
            self._steps.append((node.op, node.op._kernel_for(device), sources, node.static, first))
        self._results = [source(v) for v in graph.outputs]
        self._result_count = len(results)
        self.runner = device.plan_runner(
            self._execute, len(graph.inputs), [(v.shape, v.dtype) for v in graph.outputs]
        )
        graph.note(
            "native plan",
            f"{len(self._steps)} kernels, run as one unit of work on {device.name}",
        )

    def _execute(self, natives: list[Any]) -> list[Any]:
        """The plan's kernels on native arrays (inputs, then constants): its
        results' natives."""
        device: Any = self.device
        n_inputs = len(self.graph.inputs)
        results: list[Any] = [None] * self._result_count

        def get(where: tuple[int, Any]) -> Any:
            kind, at = where
            if kind == _RESULT:
                return results[at]
            if kind == _INPUT:
                return natives[at]
            if kind == _CONSTANT:
                return natives[n_inputs + at]
            return at

        for op, kernel, sources, static, first in self._steps:
            out = device.call_kernel(op, kernel, [get(s) for s in sources], static)
            if isinstance(out, (tuple, list)):
                results[first : first + len(out)] = out
            else:
                results[first] = out
        outputs = []
        for where in self._results:
            value = get(where)
            # A result that is an input or a constant is the caller's to keep:
            # writes to it must not reach the plan's own.
            outputs.append(value if where[0] == _RESULT else value.copy())
        return outputs

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        values: list[Any] = []
        for t in [*inputs, *self._constants]:
            if (
                t._state != READY
                or type(t._value) is not DeviceValue
                or t.device is not self.device
            ):
                return self.by_ops.run(inputs)
            values.append(t._value)
        device = self.device
        try:
            made = device.enqueue_plan(self.runner, values)
        except Exception as exc:  # out of memory, a kernel refusing its operands
            failure = Failure("function", user_line(), exc)
            return [
                Tensor._failed(failure, v.shape, v.dtype, device, "function") for v in self.outputs
            ]
        return [
            Tensor._ready(d, v.shape, v.dtype, device, "function")
            for d, v in zip(made, self.outputs, strict=True)
        ]

    def time_ops(self, inputs: list[Tensor], repeats: int) -> list[tuple[str, float]]:
        """Each op's time as an eager call (``measure_costs``; see OpByOpPlan)."""
        return self.by_ops.time_ops(inputs, repeats)

    def describe(self) -> list[str]:
        """How this plan runs, for ``fn.explain``."""
        how = "replayed as one captured graph" if self.captured else "enqueued as one unit"
        lines = [
            f"execution: {len(self._steps)} of {self.device.name}'s kernels on its native "
            f"arrays, {how}; op by op when an input is pending or elsewhere"
        ]
        lines += [f"  {i}: {op.name}" for i, (op, *_) in enumerate(self._steps[:40])]
        if len(self._steps) > 40:
            lines.append(f"  ... ({len(self._steps)} in all)")
        return lines

    @property
    def captured(self) -> bool:
        """Whether the device replays this plan as a captured graph."""
        return bool(getattr(self.runner, "captured", False))
