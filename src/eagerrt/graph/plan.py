"""Lowering an optimized graph to an executable plan.

Each node becomes a step: its kernel (the eager call's, specializers included),
its out form when it has one, its compile-time cost, and its stream. The
memory plan picks buffers; then each stream's steps are generated as one
Python function (like ``torch.fx``'s code generation) in which every step is a
plain call on locals: no interpreter loop, no per-step lookups, nothing
allocated by the plan itself. Constants, kernels and static arguments are bound
once, as closure variables; buffers once per execution context.
"""

from __future__ import annotations

import linecache
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.config import config
from .._core.errors import Failure
from .cost_model import node_cost
from .ir import Graph, Node, Value, format_node
from .kernels import kernel_for, out_kernel_for, writes_elementwise
from .memory_plan import MemoryPlan, PlannedStep, plan_memory

__all__ = ["Plan", "Step", "lower"]

_SCALAR_LITERALS = (bool, int)


@dataclass
class Step:
    node: Node
    kernel: Callable[..., Any]
    out_kernel: Callable[..., Any] | None
    cost: float
    stream: int = 0
    line: int = 0  # in the generated source


@dataclass
class Context:
    """One execution's buffers: scratch views and the current output arrays."""

    run: Callable[[list[Any], list[Any]], list[Any]]
    outputs: list[Any]


@dataclass
class Plan:
    graph: Graph
    steps: list[Step]
    memory: MemoryPlan
    source: str
    filename: str
    #: The output values, and for each, how to get its array: "input", "const"
    #: or "computed".
    outputs: list[Value]
    cost: float
    factory: Callable[..., Any] = field(repr=False, default=None)  # type: ignore[assignment]
    _factory_args: list[Any] = field(repr=False, default_factory=list)
    _buffer_specs: list[tuple[int, Any, tuple[int, ...]]] = field(default_factory=list)
    _free: list[Context] = field(default_factory=list)
    _buffered_outputs: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- contexts --------------------------------------------------------------
    def _new_context(self) -> Context:
        arenas = [np.empty(max(cap, 1), np.uint8) for cap in self.memory.capacities]
        views = [
            arenas[b][: int(np.prod(shape)) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
            for b, dtype, shape in self._buffer_specs
        ]
        run = self.factory(*self._factory_args, *views)
        buffered = set(self._buffered_outputs)
        outputs = [
            np.empty(v.shape, v.dtype) if slot in buffered else None
            for slot, v in enumerate(self.outputs)
        ]
        return Context(run, outputs)

    def acquire(self) -> Context:
        try:
            return self._free.pop()
        except IndexError:
            return self._new_context()

    def release(self, ctx: Context) -> None:
        self._free.append(ctx)

    # -- running ---------------------------------------------------------------
    def execute(self, inputs: list[Any]) -> list[Any]:
        """Run on input arrays; returns the output arrays (raises on failure
        with the failing step's :class:`Failure` as ``exc.failure``)."""
        ctx = self.acquire()
        outs = ctx.outputs
        for i in self._buffered_outputs:
            # Only the list and getrefcount's argument hold it, unless the caller
            # still holds the previous call's result: then it gets a new one.
            if sys.getrefcount(outs[i]) > 2:
                outs[i] = np.empty(outs[i].shape, outs[i].dtype)
            elif not outs[i].flags.writeable:  # read through numpy(), now let go
                outs[i].flags.writeable = True
        try:
            return ctx.run(inputs, outs)
        except Exception as exc:
            raise StepFailed(self._failure(exc)) from None
        finally:
            self.release(ctx)

    def _failure(self, exc: BaseException) -> Failure:
        step = self.step_of(exc)
        if step is None:
            return Failure(self.graph.name, None, exc)
        return Failure(step.node.name, step.node.site, exc)

    def step_of(self, exc: BaseException) -> Step | None:
        tb = exc.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        return next((s for s in self.steps if s.line == line), None)


class StepFailed(Exception):
    """A step of a plan raised; carries the failure naming its op and line."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.op)
        self.failure = failure


_plans = iter(range(sys.maxsize))


def lower(graph: Graph) -> Plan:
    """Build the plan for an optimized graph."""
    steps: list[Step] = []
    for node in graph.nodes:
        kernel = kernel_for(node)
        out_form = out_kernel_for(node, kernel)
        steps.append(Step(node, kernel, out_form, node_cost(node)))
    external = {v.id for v in graph.inputs} | {v.id for v in graph.constants()}
    planned = [
        PlannedStep(
            outputs=s.node.outputs,
            inputs=list(s.node.value_inputs()),
            has_out_form=s.out_kernel is not None,
            in_place_ok=s.out_kernel is not None and writes_elementwise(s.node, s.kernel),
            stream=s.stream,
        )
        for s in steps
    ]
    memory = plan_memory(planned, graph.outputs, external)
    return _generate(graph, steps, memory)


def _generate(graph: Graph, steps: list[Step], memory: MemoryPlan) -> Plan:
    names: dict[int, str] = {}  # value id -> expression reading it
    params: list[str] = []
    args: list[Any] = []

    def bind(prefix: str, obj: Any) -> str:
        name = f"{prefix}{len(params)}"
        params.append(name)
        args.append(obj)
        return name

    for i, v in enumerate(graph.inputs):
        names[v.id] = f"x{i}"
    for c in graph.constants():
        names[c.id] = bind("c", c.const)
    buffer_specs: list[tuple[int, Any, tuple[int, ...]]] = []
    buffer_names: dict[int, str] = {}
    by_id = {v.id: v for s in steps for v in s.node.outputs}
    views: dict[tuple[Any, ...], str] = {}  # one view per buffer, dtype and shape
    for vid, b in memory.scratch.items():
        value = by_id[vid]
        spec = (b, value.dtype, value.shape)
        if spec not in views:
            views[spec] = f"b{b}_{len(buffer_specs)}"
            buffer_specs.append(spec)
        buffer_names[vid] = views[spec]

    def operand(a: Any) -> str:
        if type(a) is Value:
            return names[a.id]
        if type(a) in _SCALAR_LITERALS:
            return repr(a)
        return bind("s", a)

    body: list[str] = []
    header = 1  # the def line
    unpack = ", ".join(f"x{i}" for i in range(len(graph.inputs)))
    if graph.inputs:
        body.append(f"    {unpack}{',' if len(graph.inputs) == 1 else ''} = r")
    for step in steps:
        node = step.node
        call_args = [operand(a) for a in node.inputs]
        kname = bind("k", step.kernel if step.out_kernel is None else step.out_kernel)
        static = node.static if step.out_kernel is None else {}
        call_args += [f"{k}={bind('s', v)}" for k, v in static.items()]
        out = node.outputs[0] if len(node.outputs) == 1 else None
        comment = f"  # {format_node(node)}"
        if step.out_kernel is not None and out is not None:
            if out.id in memory.direct_outputs:
                target = f"o[{memory.direct_outputs[out.id]}]"
            else:
                target = buffer_names[out.id]
            body.append(f"    {kname}({', '.join(call_args)}, {target}){comment}")
            names[out.id] = target
        else:
            results = [f"v{v.id}" for v in node.outputs]
            for v, r in zip(node.outputs, results, strict=True):
                names[v.id] = r
            lhs = results[0] if len(results) == 1 else ", ".join(results)
            body.append(f"    {lhs} = {kname}({', '.join(call_args)}){comment}")
        step.line = header + len(body)
    for vid, slot in memory.copied_outputs:
        body.append(f"    _copyto(o[{slot}], {names[vid]})")
    result = []
    for slot, v in enumerate(graph.outputs):
        if v.id in memory.direct_outputs:
            result.append(f"o[{memory.direct_outputs[v.id]}]")
        elif (v.id, slot) in memory.copied_outputs:
            result.append(f"o[{slot}]")
        else:
            result.append(names[v.id])
    body.append(f"    return [{', '.join(result)}]")
    source = (
        f"def factory({', '.join([*params, *views.values()])}):\n"
        "  def run(r, o):\n" + "\n".join("  " + line for line in body) + "\n  return run\n"
    )
    filename = f"<eagerrt plan {graph.name} #{next(_plans)}>"
    # Lines of the generated code show in tracebacks and profilers.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"_copyto": np.copyto}
    exec(compile(source, filename, "exec"), namespace)
    for step in steps:
        step.line += 1  # "def factory" comes first
    cost = sum(s.cost for s in steps)
    plan = Plan(
        graph=graph,
        steps=steps,
        memory=memory,
        source=source,
        filename=filename,
        outputs=list(graph.outputs),
        cost=cost,
    )
    plan.factory = namespace["factory"]
    plan._factory_args = args
    plan._buffer_specs = buffer_specs
    plan._buffered_outputs = sorted(
        {*memory.direct_outputs.values(), *(slot for _, slot in memory.copied_outputs)}
    )
    return plan


def inline_ok(plan: Plan) -> bool:
    """Small plans run at the call, on the caller's thread."""
    return plan.cost <= config.inline_limit_ns
