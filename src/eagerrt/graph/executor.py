"""Running a plan on tensors: the results are awaitable tensors like eager ones.

A call whose inputs are ready and whose plan is cheap runs right away on the
caller's thread (the synchronous interpreter: the plan's generated code); any
other call becomes one task, parked on its pending inputs and run inline or on
the device's workers by the same rule as an eager op. The outputs are pending
tensors until then, with their shapes and dtypes known at once.
"""

from __future__ import annotations

from typing import Any

from .._core.async_value import ERROR, PENDING, READY
from .._core.config import config
from .._core.errors import Failure, SourceLine, user_line
from .._core.scheduler import Task, count_inline, schedule
from ..tensor import Tensor
from .plan import Plan, StepFailed

__all__ = ["run_plan"]


def run_plan(plan: Plan, inputs: list[Tensor]) -> list[Tensor]:
    """The plan's output tensors for these input tensors."""
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
    if not pending and plan.cost <= config.inline_limit_ns:
        count_inline()
        return _run_now(plan, [t._value for t in inputs])
    results = [Tensor._pending(v.shape, v.dtype, v.device, name) for v in outs]
    if not results:  # nothing to compute: every op is pure
        return results
    device = outs[0].device
    task = _PlanTask(results[0], plan.cost, device.executor)
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
            for r in results:
                r._complete(ERROR, failed._value)
            return
        try:
            values = self.plan.execute([t._value for t in self.inputs])
        except StepFailed as exc:
            for r in results:
                r._complete(ERROR, exc.failure)
            return
        except BaseException as exc:  # never leave the results pending
            failure = Failure(self.plan.graph.name, self.site, exc)
            for r in results:
                r._complete(ERROR, failure)
            raise
        for r, value in zip(results, values, strict=True):
            r._complete(READY, value)
