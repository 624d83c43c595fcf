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
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core import Failure, config
from .cost_model import assign_streams, node_cost
from .ir import Graph, Node, Value, format_node
from .kernels import kernel_for, out_form_for, writes_elementwise
from .memory_plan import MemoryPlan, PlannedStep, plan_memory
from .replay import Replay

__all__ = ["Plan", "Step", "lower"]

_SCALAR_LITERALS = (bool, int)


@dataclass
class Step:
    node: Node
    kernel: Callable[..., Any]
    out_form: Callable[..., Any] | None
    cost: float
    stream: int = 0
    line: int = 0  # in the generated source


@dataclass
class Context:
    """One execution's buffers: the generated functions bound to its scratch
    views (one per segment, then ``collect`` if several), and the current
    output arrays."""

    functions: tuple[Callable[[Sequence[Any], list[Any]], Any], ...]
    outputs: list[Any]


@dataclass
class Plan:
    #: Plans run generated code (see :class:`~eagerrt.graph.op_by_op.OpByOpPlan`).
    op_by_op = False

    graph: Graph
    steps: list[Step]
    segments: list[Segment]
    memory: MemoryPlan
    source: str
    filename: str
    outputs: list[Value]
    cost: float
    #: Length of the register list segments pass values in (inputs first).
    n_registers: int
    factory: Callable[..., Any] = field(repr=False, default=None)  # type: ignore[assignment]
    _factory_args: list[Any] = field(repr=False, default_factory=list)
    _buffer_specs: list[tuple[int, Any, tuple[int, ...]]] = field(default_factory=list)
    _free: list[Context] = field(default_factory=list)
    _buffered_outputs: list[int] = field(default_factory=list)
    #: The traced graph before optimizing, to replay a failed call op by op
    #: (see :mod:`~eagerrt.graph.replay`); None: a failed call fails as a whole.
    replay: Replay | None = field(repr=False, default=None)

    # -- contexts --------------------------------------------------------------
    def _new_context(self) -> Context:
        arenas = [np.empty(max(cap, 1), np.uint8) for cap in self.memory.capacities]
        views = [
            arenas[b][: int(np.prod(shape)) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
            for b, dtype, shape in self._buffer_specs
        ]
        functions = self.factory(*self._factory_args, *views)
        buffered = set(self._buffered_outputs)
        outputs = [
            np.empty(v.shape, v.dtype) if slot in buffered else None
            for slot, v in enumerate(self.outputs)
        ]
        return Context(functions, outputs)

    def release(self, ctx: Context) -> None:
        self._free.append(ctx)

    # -- running ---------------------------------------------------------------
    def execute(self, inputs: Sequence[Any]) -> list[Any]:
        """Run on input arrays on this thread, segment after segment; returns
        the output arrays (raises :class:`StepFailed` naming the failing step)."""
        ctx = self.begin()
        try:
            functions = ctx.functions
            if len(functions) == 1:
                return functions[0](inputs, ctx.outputs)
            registers = self.registers(inputs)
            for run in functions[:-1]:
                run(registers, ctx.outputs)
            return functions[-1](registers, ctx.outputs)
        except Exception as exc:
            raise StepFailed(self.failure(exc)) from None
        finally:
            self._free.append(ctx)  # release(), written out: a small plan's call feels each call

    def step_values(self, inputs: list[Any]) -> dict[int, Any]:
        """What a step-by-step run starts from: the inputs and constants by value id."""
        values: dict[int, Any] = {v.id: a for v, a in zip(self.graph.inputs, inputs, strict=True)}
        for c in self.graph.constants():
            values[c.id] = c.const
        return values

    def run_steps(
        self,
        steps: list[Step],
        values: dict[int, Any],
        on_step: Callable[[Step, int, int, bool], None],
    ) -> None:
        """Run ``steps`` one by one with the eager kernels, reading and adding
        to ``values``; ``on_step(step, start_ns, end_ns, failed)`` after each.
        The profiler's way to run a plan: slower than the generated code, but
        every step is seen. Raises :class:`StepFailed` naming a failing step."""
        clock = time.perf_counter_ns
        for step in steps:
            node = step.node
            args = [values[a.id] if type(a) is Value else a for a in node.inputs]
            start = clock()
            try:
                result = step.kernel(*args, **node.static)
            except Exception as exc:
                on_step(step, start, clock(), True)
                raise StepFailed(Failure(node.name, node.site, exc)) from None
            on_step(step, start, clock(), False)
            results = result if len(node.outputs) > 1 else (result,)
            for v, r in zip(node.outputs, results, strict=True):
                values[v.id] = r

    @staticmethod
    def step_recorder(
        recording: Any,
        made: dict[int, int],
        *,
        device: str,
        track: str,
        inline: bool,
        parent: int | None,
        queued_ns: int | None = None,
    ) -> Callable[[Step, int, int, bool], None]:
        """An ``on_step`` for :meth:`run_steps` that records each step as a
        profile event under ``parent``; ``made`` maps value ids to the events
        that made them (seeded with the inputs' producers, grown per step)."""

        def on_step(step: Step, start: int, end: int, failed: bool) -> None:
            node = step.node
            eid = recording.new_id()
            deps = tuple(dict.fromkeys(made[v.id] for v in node.value_inputs() if v.id in made))
            queued = start if queued_ns is None else queued_ns
            recording.add(
                (
                    eid,
                    node.name,
                    "step",
                    device,
                    track,
                    queued,
                    start,
                    end,
                    inline,
                    node.site,
                    deps,
                    parent,
                    failed,
                    None,
                )
            )
            for v in node.outputs:
                made[v.id] = eid

        return on_step

    def time_steps(self, inputs: list[Any], repeats: int = 3) -> list[float]:
        """Each step's best time in nanoseconds over ``repeats`` runs, step by
        step with the eager kernels (for the cost model, not for speed)."""
        best = [math.inf] * len(self.steps)
        for _ in range(repeats):
            values = self.step_values(inputs)
            for i, step in enumerate(self.steps):
                node = step.node
                args = [values[a.id] if type(a) is Value else a for a in node.inputs]
                start = time.perf_counter_ns()
                result = step.kernel(*args, **node.static)
                best[i] = min(best[i], time.perf_counter_ns() - start)
                results = result if len(node.outputs) > 1 else (result,)
                for v, r in zip(node.outputs, results, strict=True):
                    values[v.id] = r
        return best

    def registers(self, inputs: Sequence[Any]) -> list[Any]:
        return [*inputs, *([None] * (self.n_registers - len(inputs)))]

    def begin(self) -> Context:
        """A context for one execution, its output buffers ready to write."""
        try:
            ctx = self._free.pop()  # a released one, or a new one
        except IndexError:
            ctx = self._new_context()
        outs = ctx.outputs
        for i in self._buffered_outputs:
            # Only the list and getrefcount's argument hold it, unless the caller
            # still holds the previous call's result: then it gets a new one.
            if sys.getrefcount(outs[i]) > 2:
                outs[i] = np.empty(outs[i].shape, outs[i].dtype)
            elif not outs[i].flags.writeable:  # read through numpy(), now let go
                outs[i].flags.writeable = True
        return ctx

    def failure(self, exc: BaseException) -> Failure:
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
        steps.append(Step(node, kernel, out_form_for(node, kernel), node_cost(node)))
    costs = [s.cost for s in steps]
    if sum(costs) > config.graph_inline_threshold_ns:  # not run inline: worth spreading
        streams = assign_streams([s.node for s in steps], costs, config.inline_threshold_ns)
        for step, stream in zip(steps, streams, strict=True):
            step.stream = stream
    segments = _segments(steps)
    external = {v.id for v in graph.inputs} | {v.id for v in graph.constants()}
    planned = [
        PlannedStep(
            outputs=s.node.outputs,
            inputs=list(s.node.value_inputs()),
            has_out_form=s.out_form is not None,
            in_place_ok=s.out_form is not None and writes_elementwise(s.node, s.kernel),
            stream=s.stream,
        )
        for s in steps
    ]
    memory = plan_memory(planned, graph.outputs, external)
    return _generate(graph, steps, segments, memory)


@dataclass
class Segment:
    """Steps of one stream run back to back as one task, once the segments
    it depends on are done (the earlier segment of its stream, and those
    making the values it reads from other streams)."""

    steps: list[Step]
    stream: int
    deps: set[int] = field(default_factory=set)

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.steps)


def _segments(steps: list[Step]) -> list[Segment]:
    """Cut each stream where it waits for another: a step reading a value made
    on another stream starts a new segment. Segments come out in an order in
    which each one's dependencies precede it."""
    made_in: dict[int, int] = {}  # value id -> segment index
    open_segment: dict[int, int] = {}  # stream -> its current segment
    segments: list[Segment] = []
    for step in steps:
        foreign = {
            made_in[v.id]
            for v in step.node.value_inputs()
            if v.id in made_in and segments[made_in[v.id]].stream != step.stream
        }
        current = open_segment.get(step.stream)
        if current is None or (foreign - segments[current].deps):
            segment = Segment([], step.stream, foreign)
            if current is not None:
                segment.deps.add(current)
            segments.append(segment)
            current = open_segment[step.stream] = len(segments) - 1
        segments[current].steps.append(step)
        for v in step.node.outputs:
            made_in[v.id] = current
    return segments


def _generate(graph: Graph, steps: list[Step], segments: list[Segment], memory: MemoryPlan) -> Plan:
    """Generate one function per segment (and, with several, one collecting
    the outputs) inside a factory taking constants, kernels and buffers."""
    params: list[str] = []
    args: list[Any] = []

    def bind(prefix: str, obj: Any) -> str:
        name = f"{prefix}{len(params)}"
        params.append(name)
        args.append(obj)
        return name

    # Value id -> the name a segment reads it by.
    names: dict[int, str] = {c.id: bind("c", c.const) for c in graph.constants()}
    by_id = {v.id: v for s in steps for v in s.node.outputs}
    views: dict[tuple[int, Any, tuple[int, ...]], str] = {}  # one per buffer, dtype and shape
    for vid, b in memory.scratch.items():
        value = by_id[vid]
        spec = (b, value.dtype, value.shape)
        if spec not in views:
            views[spec] = f"b{b}_{len(views)}"
        names[vid] = views[spec]
    for vid, slot in memory.direct_outputs.items():
        names[vid] = f"o[{slot}]"

    single = len(segments) == 1
    # Values that live in neither a buffer nor a constant and cross segments
    # (or are outputs of a multi-segment plan) travel in the register list r,
    # after the inputs.
    registers: dict[int, int] = {v.id: i for i, v in enumerate(graph.inputs)}
    segment_of = {
        v.id: k for k, seg in enumerate(segments) for step in seg.steps for v in step.node.outputs
    }
    if not single:
        wanted = [v.id for v in graph.outputs]
        for k, seg in enumerate(segments):
            for step in seg.steps:
                wanted += [v.id for v in step.node.value_inputs() if segment_of.get(v.id, k) != k]
        for vid in wanted:
            if vid in segment_of and vid not in names and vid not in registers:
                registers[vid] = len(registers)

    def operand(a: Any) -> str:
        if type(a) is Value:
            return names.get(a.id) or f"v{a.id}"
        if type(a) in _SCALAR_LITERALS:
            return repr(a)
        return bind("s", a)

    lines: list[str] = []
    functions: list[str] = []
    n_in = len(graph.inputs)
    for k, seg in enumerate(segments):
        fname = f"seg{k}"
        functions.append(fname)
        lines.append(f"  def {fname}(r, o):")
        if single:
            if n_in:
                unpack = ", ".join(f"v{v.id}" for v in graph.inputs)
                lines.append(f"    {unpack}{',' if n_in == 1 else ''} = r")
        else:  # read what this segment needs from the registers
            needed = dict.fromkeys(
                v.id
                for step in seg.steps
                for v in step.node.value_inputs()
                if v.id in registers and segment_of.get(v.id) != k
            )
            lines += [f"    v{vid} = r[{registers[vid]}]" for vid in needed]
        for step in seg.steps:
            node = step.node
            call_args = [operand(a) for a in node.inputs]
            kname = bind("k", step.kernel if step.out_form is None else step.out_form)
            static = node.static if step.out_form is None else {}
            call_args += [f"{key}={bind('s', value)}" for key, value in static.items()]
            comment = f"  # {format_node(node)}"
            out = node.outputs[0]
            if step.out_form is not None:
                lines.append(f"    {kname}({', '.join(call_args)}, {names[out.id]}){comment}")
            else:
                lhs = ", ".join(f"v{v.id}" for v in node.outputs)
                lines.append(f"    {lhs} = {kname}({', '.join(call_args)}){comment}")
            step.line = len(lines) + 1  # the factory's def line comes first
            if not single:
                for v in node.outputs:
                    if v.id in registers and v.id not in names:
                        lines.append(f"    r[{registers[v.id]}] = v{v.id}")
        if single:
            lines += _collect_lines(graph, memory, operand)
        else:
            lines.append("    return None")
    if not single:
        functions.append("collect")
        lines.append("  def collect(r, o):")
        for vid, slot in registers.items():
            if slot < n_in:
                lines.append(f"    v{vid} = r[{slot}]")

        def from_register(a: Any) -> str:
            if type(a) is Value and a.id in registers and a.id not in names:
                return f"r[{registers[a.id]}]"
            return operand(a)

        lines += _collect_lines(graph, memory, from_register)
    source = (
        f"def factory({', '.join([*params, *views.values()])}):\n"
        + "\n".join(lines)
        + f"\n  return ({', '.join(functions)},)\n"
    )
    filename = f"<eagerrt plan {graph.name} #{next(_plans)}>"
    # Lines of the generated code show in tracebacks and profilers.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"_copyto": np.copyto}
    exec(compile(source, filename, "exec"), namespace)
    plan = Plan(
        graph=graph,
        steps=steps,
        segments=segments,
        memory=memory,
        source=source,
        filename=filename,
        outputs=list(graph.outputs),
        cost=sum(s.cost for s in steps),
        n_registers=len(registers),
    )
    plan.factory = namespace["factory"]
    plan._factory_args = args
    plan._buffer_specs = list(views)
    plan._buffered_outputs = sorted(
        {*memory.direct_outputs.values(), *(slot for _, slot in memory.copied_outputs)}
    )
    return plan


def _collect_lines(graph: Graph, memory: MemoryPlan, read: Callable[[Any], str]) -> list[str]:
    """Copy the outputs that need it into their buffers; return the outputs
    (an output listed twice is returned from its one buffer both times)."""
    by_id = {v.id: v for v in graph.outputs}
    copied = dict(memory.copied_outputs)  # value id -> its output buffer
    lines = [f"    _copyto(o[{slot}], {read(by_id[vid])})" for vid, slot in copied.items()]
    slots = {**memory.direct_outputs, **copied}  # written in place or copied
    result = [f"o[{slots[v.id]}]" if v.id in slots else read(v) for v in graph.outputs]
    lines.append(f"    return [{', '.join(result)}]")
    return lines
