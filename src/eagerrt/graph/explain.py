"""``fn.explain(*args)``: a readable account of one compiled trace."""

from __future__ import annotations

from typing import Any

from .._core import config

__all__ = ["explain"]


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f} us"


#: Ops whose products a reduced precision could apply to (as named in a plan's
#: steps, fused ones included: ``fused[linear,gelu]``).
_PRODUCTS = ("linear", "matmul", "conv2d", "conv_transpose2d", "scaled_dot_product_attention")


def _precision_lines(precision: str, steps: Any) -> list[str]:
    """Which steps multiply in which precision: a step's kernel says so with a
    ``precision`` attribute (the backend's reduced-precision forms); every
    other product is float32."""
    if precision == "float32":
        return ["precision: float32 (every product exact to float32)"]
    by: dict[str, list[str]] = {}
    for step in steps:
        name = step.node.name
        kernel = step.out_form if step.out_form is not None else step.kernel
        used = getattr(kernel, "precision", None)
        if used is None and not any(p in name for p in _PRODUCTS):
            continue
        by.setdefault(used or "float32", []).append(f"{step.node.outputs[0].name} {name}")
    lines = [f"precision: {precision} asked for; products by precision:"]
    for used, names in sorted(by.items()):
        lines.append(f"  {used} ({len(names)}): {', '.join(names)}")
    lines.append("  (norms, softmax, sums and elementwise ops: float32)")
    return lines


def explain(name: str, compiled: Any) -> str:
    graph = compiled.graph
    plan = compiled.plan
    lines = [f"ert.function {name}", "passes:"]
    lines += [f"  {pass_name}: {summary}" for pass_name, summary in graph.log]
    lines.append("optimized graph:")
    lines += ["  " + line for line in str(graph).splitlines()]
    if plan.op_by_op:  # a device's own plan: no generated code, no memory plan
        return "\n".join(lines + plan.describe())
    if plan.cost <= config.graph_inline_threshold_ns:
        where = "inline, on the caller's thread (synchronous interpreter)"
    elif len(plan.segments) == 1:
        where = "as one task on the device's workers"
    else:
        streams_used = len({seg.stream for seg in plan.segments})
        where = (
            f"as {len(plan.segments)} segments over {streams_used} streams on the device's "
            "workers (each segment waits only for the segments it reads)"
        )
    lines.append(f"execution: {len(plan.steps)} steps, estimated {_us(plan.cost)}; runs {where}")
    streams: dict[int, list[Any]] = {}
    for step in plan.steps:
        streams.setdefault(step.stream, []).append(step)
    for stream, steps in sorted(streams.items()):
        ops = ", ".join(f"{s.node.outputs[0].name} {s.node.name}" for s in steps[:12])
        more = f", ... ({len(steps)} in all)" if len(steps) > 12 else ""
        lines.append(f"  stream {stream} ({_us(sum(s.cost for s in steps))}): {ops}{more}")
    lines += _precision_lines(graph.precision, plan.steps)
    lines.append(f"memory plan: {plan.memory.describe()}")
    lines.append("generated code:")
    lines += ["  " + line for line in plan.source.splitlines()]
    return "\n".join(lines)
