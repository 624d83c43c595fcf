"""Running a plan on tensors: the results are awaitable tensors like eager ones.

A call whose inputs are ready and whose plan is cheap runs right away on the
caller's thread (the synchronous interpreter: the plan's generated code); any
other call becomes tasks, parked on its pending inputs and run inline or on
the device's workers by the same rule as an eager op: one task for a plan of
one stream, one per segment for a plan the cost model spread over several
streams (each segment waits for the segments it reads from, so independent
heavy branches run on different workers at once). The outputs are pending
tensors until then, with their shapes and dtypes known at once.
"""

from __future__ import annotations

import math
from typing import Any

from .._core.async_value import ERROR, PENDING, READY, AsyncValue
from .._core.config import config
from .._core.errors import Failure, SourceLine, user_line
from .._core.scheduler import Task, count_inline, schedule
from ..tensor import Tensor
from .plan import Context, Plan, StepFailed

__all__ = ["run_plan"]


def run_plan(plan: Plan, inputs: list[Tensor]) -> list[Tensor]:
    """The plan's output tensors for these input tensors."""
    if plan.cost <= config.graph_inline_threshold_ns or config.sync_active:
        for t in inputs:
            if t._state != READY:
                break
        else:  # the synchronous interpreter: run now, on this thread
            count_inline()
            return _run_now(plan, [t._value for t in inputs])
    outs = plan.outputs
    name = plan.graph.name
    pending = []
    for t in inputs:
        if t._state != READY:
            if t._state == ERROR:  # an input's failure is every output's
                return [Tensor._failed(t._value, v.shape, v.dtype, v.device, name) for v in outs]
            if t._state == PENDING:
                pending.append(t)
    if pending and config.sync_active:
        for t in pending:
            t.wait()
        return run_plan(plan, inputs)
    results = [Tensor._pending(v.shape, v.dtype, v.device, name) for v in outs]
    if not results:  # nothing to compute: every op is pure
        return results
    device = outs[0].device
    if len(plan.segments) > 1:
        _start_segments(plan, inputs, results, pending, device.executor)
        return results
    # Parked: the thread completing the last input may run a cheap plan. Not
    # parked: over the graph threshold (tested above), so it goes to a worker.
    task = _PlanTask(results[0], plan.cost if pending else math.inf, device.executor)
    task.plan = plan
    task.inputs = inputs
    task.results = results
    task.site = user_line()
    schedule(task, pending)
    return results


def _run_now(plan: Plan, arrays: list[Any]) -> list[Tensor]:
    outs = plan.outputs
    name = plan.graph.name
    try:
        values = plan.execute(arrays)
    except StepFailed as failed:
        return [Tensor._failed(failed.failure, v.shape, v.dtype, v.device, name) for v in outs]
    return [
        Tensor._ready(data, v.shape, v.dtype, v.device, name)
        for data, v in zip(values, outs, strict=True)
    ]


def _fail_all(results: list[Tensor], failure: Failure) -> None:
    """One execution fails as a whole: every output carries the failure."""
    for r in results:
        r._complete(ERROR, failure)


class _PlanTask(Task):
    """One execution of a plan once its inputs are ready."""

    __slots__ = ("inputs", "plan", "results", "site")

    plan: Plan
    inputs: list[Tensor]
    results: list[Tensor]
    site: SourceLine | None

    def run(self) -> None:
        results = self.results
        failed = next((t for t in self.inputs if t._state == ERROR), None)
        if failed is not None:
            _fail_all(results, failed._value)
            return
        try:
            values = self.plan.execute([t._value for t in self.inputs])
        except StepFailed as exc:
            _fail_all(results, exc.failure)
            return
        except BaseException as exc:  # never leave the results pending
            _fail_all(results, Failure(self.plan.graph.name, self.site, exc))
            raise
        for r, value in zip(results, values, strict=True):
            r._complete(READY, value)


class _Call:
    """One execution of a multi-segment plan: its context, registers, and the
    completion of each segment."""

    __slots__ = ("ctx", "done", "failure", "inputs", "plan", "registers", "results")

    def __init__(self, plan: Plan, inputs: list[Tensor], results: list[Tensor]) -> None:
        self.plan = plan
        self.inputs = inputs
        self.results = results
        self.ctx: Context | None = None
        self.registers: list[Any] = []
        self.done = [AsyncValue() for _ in plan.segments]
        self.failure: Failure | None = None


class _SegmentTask(Task):
    __slots__ = ("call", "index")

    call: _Call
    index: int

    def run(self) -> None:
        call = self.call
        done = call.done[self.index]
        if call.failure is not None:  # an earlier segment failed: skip the work
            done._complete(ERROR, call.failure)
            return
        assert call.ctx is not None
        try:
            call.ctx.functions[self.index](call.registers, call.ctx.outputs)
        except Exception as exc:
            call.failure = call.failure or call.plan.failure(exc)
            done._complete(ERROR, call.failure)
            return
        done._complete(READY, None)


class _StartTask(Task):
    """Once the inputs are ready: take a context and release the first segments."""

    __slots__ = ("call", "executor")

    call: _Call

    def run(self) -> None:
        call = self.call
        failed = next((t for t in call.inputs if t._state == ERROR), None)
        if failed is not None:
            _fail_all(call.results, failed._value)
            return
        call.ctx = call.plan.begin()
        call.registers = call.plan.registers([t._value for t in call.inputs])
        finish = _FinishTask(call.results[0], 0.0, self.executor)
        finish.call = call
        for k, segment in enumerate(call.plan.segments):
            task = _SegmentTask(call.done[k], segment.cost, self.executor)
            task.call = call
            task.index = k
            schedule(task, [call.done[d] for d in segment.deps])
        schedule(finish, call.done)


class _FinishTask(Task):
    """Once every segment is done: collect the outputs, give the context back."""

    __slots__ = ("call",)

    call: _Call

    def run(self) -> None:
        call = self.call
        plan = call.plan
        ctx = call.ctx
        assert ctx is not None
        try:
            if call.failure is not None:
                _fail_all(call.results, call.failure)
                return
            try:
                values = ctx.functions[-1](call.registers, ctx.outputs)
            except Exception as exc:
                _fail_all(call.results, plan.failure(exc))
                return
            for r, value in zip(call.results, values, strict=True):
                r._complete(READY, value)
        finally:
            plan.release(ctx)


def _start_segments(
    plan: Plan,
    inputs: list[Tensor],
    results: list[Tensor],
    pending: list[Tensor],
    executor: Any,
) -> None:
    call = _Call(plan, inputs, results)
    start = _StartTask(AsyncValue(), 0.0, executor)
    start.call = call
    start.executor = executor
    schedule(start, pending)
