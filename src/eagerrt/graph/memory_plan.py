"""Memory planning: which buffer each intermediate is written into.

Every step with an out form (see :mod:`eagerrt.graph.kernels`) writes into a
buffer allocated once, when an execution context is made, never while running:

* **Liveness-based reuse.** Buffers are handed out in execution order and
  taken back after the last read of every value that may live in them, so a
  chain of a hundred matmuls needs two buffers, not a hundred. A step that
  reads each element before writing it (elementwise) may take back its dying
  operand's buffer first and write in place.
* **Views are tracked.** A step without an out form may return a view of its
  operands (reshape, transpose, slicing), so its result keeps its operands'
  buffers alive; a graph output that may be such a view is copied into an
  output buffer at the end.
* **Outputs** get buffers of their own, handed to the caller; a context reuses
  an output buffer on the next call only when the caller has let go of it.

Steps that run on different threads (streams) reuse only buffers freed on
their own stream: nothing orders a read on one thread before a write on
another unless a dependency does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Value

__all__ = ["MemoryPlan", "PlannedStep", "plan_memory"]


@dataclass
class PlannedStep:
    """What the planner needs of a step."""

    outputs: list[Value]
    inputs: list[Value]
    has_out_form: bool
    in_place_ok: bool
    stream: int = 0


@dataclass
class MemoryPlan:
    #: Value id -> buffer index, for values written into a scratch buffer.
    scratch: dict[int, int] = field(default_factory=dict)
    #: Byte capacity of each scratch buffer.
    capacities: list[int] = field(default_factory=list)
    #: Value id -> output index, for outputs a step writes into directly.
    direct_outputs: dict[int, int] = field(default_factory=dict)
    #: (value id, output index): outputs copied into their buffer at the end.
    copied_outputs: list[tuple[int, int]] = field(default_factory=list)
    #: Bytes the intermediates would take with a buffer each (for explain()).
    unplanned_bytes: int = 0

    @property
    def scratch_bytes(self) -> int:
        return sum(self.capacities)

    def describe(self) -> str:
        saved = self.unplanned_bytes - self.scratch_bytes
        return (
            f"{len(self.scratch)} intermediates in {len(self.capacities)} buffers "
            f"({_kib(self.scratch_bytes)} KiB; {_kib(self.unplanned_bytes)} KiB without "
            f"reuse, {_kib(max(saved, 0))} KiB saved); {len(self.direct_outputs)} outputs "
            f"written in place, {len(self.copied_outputs)} copied"
        )


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}"


def plan_memory(steps: list[PlannedStep], outputs: list[Value], external: set[int]) -> MemoryPlan:
    """Assign buffers. ``external``: ids of values the plan does not own
    (inputs, constants), which are never written."""
    plan = MemoryPlan()
    output_ids = [v.id for v in outputs]
    last_use = {v.id: i for i, step in enumerate(steps) for v in step.inputs}
    last_use.update(dict.fromkeys(output_ids, len(steps)))  # outputs live to the end

    # The first output each output value fills (an output listed twice is one buffer).
    first_slot: dict[int, int] = {}
    for slot, vid in enumerate(output_ids):
        first_slot.setdefault(vid, slot)

    # Values read on another stream than the one making them: nothing orders
    # that read before a later write on the maker's stream, so their buffers
    # are never handed out again.
    made_on: dict[int, int] = {}
    crossing: set[int] = set()
    for step in steps:
        for v in step.inputs:
            if made_on.get(v.id, step.stream) != step.stream:
                crossing.add(v.id)
        for v in step.outputs:
            made_on[v.id] = step.stream

    roots: dict[int, frozenset[int]] = {}  # value -> the scratch buffers it may view
    holders: dict[int, set[int]] = {}  # buffer -> live values that may view it
    free: dict[int, list[int]] = {}  # stream -> free buffers
    owner_stream: dict[int, int] = {}

    def release(vid: int) -> None:
        if vid in crossing:
            return
        for b in roots.get(vid, ()):
            live = holders[b]
            live.discard(vid)
            if not live:
                free.setdefault(owner_stream[b], []).append(b)

    def take(nbytes: int, stream: int) -> int:
        pool = free.get(stream, [])
        if pool:
            # The smallest free buffer that fits, else the largest (it grows).
            fits = [b for b in pool if plan.capacities[b] >= nbytes]
            size = plan.capacities.__getitem__
            b = min(fits, key=size) if fits else max(pool, key=size)
            pool.remove(b)
            plan.capacities[b] = max(plan.capacities[b], nbytes)
            return b
        plan.capacities.append(nbytes)
        owner_stream[len(plan.capacities) - 1] = stream
        holders[len(plan.capacities) - 1] = set()
        return len(plan.capacities) - 1

    for i, step in enumerate(steps):
        dying = [
            v
            for v in dict.fromkeys(step.inputs)
            if last_use.get(v.id) == i and v.id not in external
        ]
        out = step.outputs[0] if len(step.outputs) == 1 else None
        if out is not None and step.has_out_form and out.id in first_slot:
            plan.direct_outputs[out.id] = first_slot[out.id]
            roots[out.id] = frozenset()
        elif out is not None and step.has_out_form:
            plan.unplanned_bytes += out.nbytes
            if step.in_place_ok:  # dying same-shape operands may be overwritten
                same = [v for v in dying if v.shape == out.shape and v.dtype == out.dtype]
                for v in same:
                    release(v.id)
                dying = [v for v in dying if v not in same]
            b = take(out.nbytes, step.stream)
            plan.scratch[out.id] = b
            roots[out.id] = frozenset((b,))
            holders[b].add(out.id)
        else:
            # No out form: the kernel allocates, but may return views of its operands.
            viewed = frozenset().union(*(roots.get(v.id, frozenset()) for v in step.inputs))
            for v in step.outputs:
                roots[v.id] = viewed
                for b in viewed:
                    holders[b].add(v.id)
        for v in dying:
            release(v.id)
        # A result nobody reads frees its buffer at once.
        for v in step.outputs:
            if v.id not in last_use:
                release(v.id)

    for vid, slot in first_slot.items():
        if vid not in plan.direct_outputs and vid not in external and roots.get(vid):
            plan.copied_outputs.append((vid, slot))
    return plan
