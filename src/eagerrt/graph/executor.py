"""Running a plan on tensors: the results are awaitable tensors like eager ones.

A call whose inputs are ready and whose plan is cheap runs right away on the
caller's thread (the synchronous interpreter: the plan's generated code); any
other call becomes tasks, parked on its pending inputs and run inline or on
the device's workers by the same rule as an eager op: one task for a plan of
one stream, one per segment for a plan the cost model spread over several
streams (each segment waits for the segments it reads from, so independent
heavy branches run on different workers at once). The outputs are pending
tensors until then, with their shapes and dtypes known at once.

A call that sees a failed input or a failing step is replayed op by op (see
:mod:`~eagerrt.graph.replay`): each output gets its own value, or the failure
of exactly the ops it depends on, as eagerly.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from .._core import (
    ERROR,
    PENDING,
    READY,
    AsyncValue,
    Failure,
    SourceLine,
    Task,
    caller_modes,
    config,
    count_inline,
    profiling,
    register_runner,
    run_here,
    run_under,
    schedule,
    stop_counting_as_busy,
    user_line,
)
from ..tensor import Tensor
from .native_plan import NativePlan
from .op_by_op import OpByOpPlan
from .plan import Context, Plan, StepFailed

__all__ = ["run_plan"]


def run_plan(plan: Plan | OpByOpPlan | NativePlan, inputs: list[Tensor]) -> list[Tensor]:
    """The plan's output tensors for these input tensors."""
    if plan.op_by_op:  # a device other than the CPU
        return plan.run(inputs)  # type: ignore[union-attr]
    assert isinstance(plan, Plan)
    if (
        plan.cost <= config.graph_inline_threshold_ns or config.sync_active
    ) and not config.deterministic_active:
        for t in inputs:
            if t._state != READY:
                break
        else:  # the synchronous interpreter: run now, on this thread
            count_inline()
            recording = profiling.active  # read once: another thread may stop it
            if recording is not None:
                return _run_now_recorded(recording, plan, inputs)
            return _run_now(plan, [t._value for t in inputs])
        if plan.replay is not None and all(t._state != PENDING for t in inputs):
            return _replayed(plan, [t._value for t in inputs])  # a failed input
    outs = plan.outputs
    name = plan.graph.name
    pending = []
    for t in inputs:
        if t._state != READY:
            if t._state == ERROR and plan.replay is None:  # every output's failure
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
    task.plan, task.inputs, task.results = plan, inputs, results
    task.site, task.modes = user_line(), caller_modes()
    _expect_call(task, results)
    schedule(task, pending)
    return results


def _run_now(plan: Plan, arrays: list[Any]) -> list[Tensor]:
    outs = plan.outputs
    name = plan.graph.name
    try:
        values = run_here(plan.execute, arrays)
    except StepFailed as failed:
        if plan.replay is not None:
            failed.failure.discard()  # the replay reports it, on the outputs it reaches
            return _replayed(plan, arrays)
        return [Tensor._failed(failed.failure, v.shape, v.dtype, v.device, name) for v in outs]
    return [
        Tensor._ready(data, v.shape, v.dtype, v.device, name)
        for data, v in zip(values, outs, strict=True)
    ]


def _replayed(plan: Plan, values: list[Any]) -> list[Tensor]:
    """The output tensors of a call replayed op by op on ``values`` (arrays,
    or the Failures of failed inputs), now, on this thread."""
    assert plan.replay is not None
    name = plan.graph.name
    return [
        Tensor._failed(x, v.shape, v.dtype, v.device, name)
        if type(x) is Failure
        else Tensor._ready(x, v.shape, v.dtype, v.device, name)
        for x, v in zip(plan.replay.run(values), plan.outputs, strict=True)
    ]


def _fail_all(results: list[Tensor], failure: Failure) -> None:
    """One execution fails as a whole: every output carries the failure."""
    for r in results:
        r._complete(ERROR, failure)


def _fail(
    plan: Plan, inputs: list[Tensor], results: list[Tensor], failure: Failure, *, step: bool
) -> None:
    """A call failed, from a failed input or (``step``) a failing step: replay
    it op by op, so each output gets its own value or failure; without a
    replay, every output gets ``failure``."""
    replay = plan.replay
    if replay is None:
        _fail_all(results, failure)
        return
    if step:
        failure.discard()  # made by the plan and held by no tensor: the replay reports it
    try:
        values = replay.run([t._value for t in inputs])
    except BaseException as exc:  # never leave the results pending
        _fail_all(results, Failure(plan.graph.name, None, exc))
        raise
    for r, x in zip(results, values, strict=True):
        r._complete(ERROR if type(x) is Failure else READY, x)


class _ReplayTask(Task):
    """A failed multi-segment call's replay, on a worker if the plan is costly."""

    __slots__ = ("call", "failure", "step")

    call: _Call
    failure: Failure
    step: bool

    def run(self) -> None:
        try:
            _fail(self.call.plan, self.call.inputs, self.call.results, self.failure, step=self.step)
        finally:  # its own value, which synchronize() waits for: nothing else completes it
            self.result._complete(READY, None)


def _fail_later(call: _Call, executor: Any, failure: Failure, *, step: bool) -> None:
    """:func:`_fail` for a multi-segment call, scheduled by the plan's cost (a
    replay computes the whole call again: not inline on a cheap task's thread)."""
    if call.plan.replay is None:
        _fail_all(call.results, failure)
        return
    task = _ReplayTask(AsyncValue(), call.plan.cost, executor)
    task.call, task.failure, task.step = call, failure, step
    schedule(task, [])


class _PlanTask(Task):
    """One execution of a plan once its inputs are ready."""

    __slots__ = ("call_id", "inputs", "modes", "plan", "queued_ns", "recording", "results", "site")

    plan: Plan
    inputs: list[Tensor]
    results: list[Tensor]
    site: SourceLine | None
    modes: Any  # numpy's error modes where the call was made
    recording: profiling.Recording | None
    call_id: int
    queued_ns: int

    def run(self) -> None:
        results = self.results
        failed = next((t for t in self.inputs if t._state == ERROR), None)
        if failed is not None:
            _fail(self.plan, self.inputs, results, failed._value, step=False)
            return
        try:
            if self.recording is None:
                arrays = [t._value for t in self.inputs]
                values = run_under(self.modes, self.plan.execute, arrays)
            else:
                values = _execute_recorded(
                    self.recording,
                    self.plan,
                    self.inputs,
                    self.call_id,
                    self.queued_ns,
                    self.cost_ns <= config.inline_limit_ns,
                    self.site,
                )
        except StepFailed as exc:
            _fail(self.plan, self.inputs, results, exc.failure, step=True)
            return
        except BaseException as exc:  # never leave the results pending
            _fail_all(results, Failure(self.plan.graph.name, self.site, exc))
            raise
        stop_counting_as_busy()
        for r, value in zip(results, values, strict=True):
            r._complete(READY, value)

    def refused(self, exc: Exception) -> None:
        _fail_all(self.results, Failure(self.plan.graph.name, self.site, exc))


class _Call:
    """One execution of a multi-segment plan: its context, registers, and the
    completion of each segment."""

    __slots__ = (
        "call_id",
        "ctx",
        "done",
        "failure",
        "inputs",
        "made",
        "modes",
        "plan",
        "queued_ns",
        "recording",
        "registers",
        "results",
        "site",
        "started_ns",
        "values",
    )

    def __init__(self, plan: Plan, inputs: list[Tensor], results: list[Tensor]) -> None:
        self.plan = plan
        self.inputs = inputs
        self.results = results
        self.ctx: Context | None = None
        self.registers: list[Any] = []
        self.done = [AsyncValue() for _ in plan.segments]
        self.failure: Failure | None = None
        # While a profile records: the call runs step by step on these values
        # (by value id), and ``made`` names each value's producing event.
        self.recording: profiling.Recording | None = None
        self.call_id = self.queued_ns = self.started_ns = 0
        self.site: SourceLine | None = user_line()
        self.modes = caller_modes()  # numpy's error modes where the call was made
        self.values: dict[int, Any] = {}
        self.made: dict[int, int] = {}


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
        try:
            if call.recording is not None:
                inline = self.cost_ns <= config.inline_limit_ns
                recorder = _step_recorder(call, threading.current_thread().name, inline)
                call.plan.run_steps(call.plan.segments[self.index].steps, call.values, recorder)
            else:
                assert call.ctx is not None
                segment = call.ctx.functions[self.index]
                run_under(call.modes, segment, call.registers, call.ctx.outputs)
                stop_counting_as_busy()
        except Exception as exc:  # inside a step or not: never leave the call waiting
            if call.failure is None:  # the first failure is the call's
                call.failure = exc.failure if type(exc) is StepFailed else call.plan.failure(exc)
            done._complete(ERROR, call.failure)
            return
        done._complete(READY, None)


class _StartTask(Task):
    """Once the inputs are ready: take a context and release the first segments."""

    __slots__ = ("call", "executor")

    call: _Call

    def run(self) -> None:
        try:
            self._start()
        finally:  # its own value, which synchronize() waits for: nothing else completes it
            self.result._complete(READY, None)

    def _start(self) -> None:
        call = self.call
        failed = next((t for t in call.inputs if t._state == ERROR), None)
        if failed is not None:
            _fail_later(call, self.executor, failed._value, step=False)
            return
        if call.recording is not None:
            call.started_ns = time.perf_counter_ns()
            call.values = call.plan.step_values([t._value for t in call.inputs])
            call.made = _input_producers(call.recording, call.plan, call.inputs)
        else:
            call.ctx = call.plan.begin()
            call.registers = call.plan.registers([t._value for t in call.inputs])
        finish = _FinishTask(call.results[0], 0.0, self.executor)
        finish.call = call
        for k, segment in enumerate(call.plan.segments):
            task = _SegmentTask(call.done[k], segment.cost, self.executor)
            task.call, task.index = call, k
            schedule(task, [call.done[d] for d in segment.deps])
        schedule(finish, call.done)


class _FinishTask(Task):
    """Once every segment is done: collect the outputs, give the context back."""

    __slots__ = ("call",)

    call: _Call

    def run(self) -> None:
        call = self.call
        if call.recording is not None:
            _finish_recorded(call)
            return
        plan = call.plan
        ctx = call.ctx
        assert ctx is not None
        try:
            if call.failure is not None:
                _fail_later(call, self.executor, call.failure, step=True)
                return
            try:
                values = ctx.functions[-1](call.registers, ctx.outputs)
            except Exception as exc:
                _fail_later(call, self.executor, plan.failure(exc), step=True)
                return
            stop_counting_as_busy()
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
    _expect_call(call, results)
    start = _StartTask(AsyncValue(), 0.0, executor)
    start.call, start.executor = call, executor
    schedule(start, pending)


# -- while a profile records: plans run step by step, every step an event ------
# (slower than the generated code, which can't report its steps; only then)


def _expect_call(call: _PlanTask | _Call, results: list[Tensor]) -> None:
    """If a profile records: the event id of a call that runs later (its results
    name it as producer now), and when it was queued."""
    call.recording = recording = profiling.active
    if recording is None:
        return
    call.call_id = call_id = recording.new_id()
    for r in results:
        recording.produced(r, call_id)
    recording.expect(call_id, results[-1])  # the last one completes last
    call.queued_ns = time.perf_counter_ns()


def _input_producers(
    recording: profiling.Recording, plan: Plan, inputs: list[Tensor]
) -> dict[int, int]:
    """Graph input value id -> the event that made that input tensor."""
    made = {}
    for v, t in zip(plan.graph.inputs, inputs, strict=True):
        found = recording.producers((t,))
        if found:
            made[v.id] = found[0]
    return made


def _device_name(plan: Plan, inputs: list[Tensor]) -> str:
    if plan.outputs:
        return str(plan.outputs[0].device.name)
    return inputs[0].device.name if inputs else "cpu"


def _step_recorder(call: _Call, track: str, inline: bool) -> Any:
    """``on_step`` for :meth:`Plan.run_steps`: records each step of ``call``."""
    assert call.recording is not None
    return Plan.step_recorder(
        call.recording,
        call.made,
        device=_device_name(call.plan, call.inputs),
        track=track,
        inline=inline,
        parent=call.call_id,
        queued_ns=call.queued_ns,
    )


def _execute_recorded(
    recording: profiling.Recording,
    plan: Plan,
    inputs: list[Tensor],
    call_id: int,
    queued_ns: int,
    inline: bool,
    site: SourceLine | None,
) -> list[Any]:
    """One call of a plan on this thread, step by step: an event per step,
    inside one (kind ``graph``) for the call."""
    call = _Call(plan, inputs, [])
    call.recording = recording
    call.call_id = call_id
    call.queued_ns = queued_ns
    call.site = site
    call.values = plan.step_values([t._value for t in inputs])
    call.made = _input_producers(recording, plan, inputs)
    track = threading.current_thread().name
    call.started_ns = time.perf_counter_ns()
    failed = True
    try:
        plan.run_steps(plan.steps, call.values, _step_recorder(call, track, inline))
        failed = False
    finally:
        _record_call(call, failed, track, inline)
        recording.done(call_id)
    return [call.values[v.id] for v in plan.outputs]


def _run_now_recorded(
    recording: profiling.Recording, plan: Plan, inputs: list[Tensor]
) -> list[Tensor]:
    """:func:`_run_now`, recorded."""
    call_id = recording.new_id()
    outs = plan.outputs
    name = plan.graph.name
    try:
        values = _execute_recorded(
            recording, plan, inputs, call_id, time.perf_counter_ns(), True, user_line()
        )
    except StepFailed as failed:
        if plan.replay is not None:
            failed.failure.discard()  # the replay reports it, on the outputs it reaches
            return _replayed(plan, [t._value for t in inputs])
        return [Tensor._failed(failed.failure, v.shape, v.dtype, v.device, name) for v in outs]
    results = [
        Tensor._ready(data, v.shape, v.dtype, v.device, name)
        for data, v in zip(values, outs, strict=True)
    ]
    for r in results:
        recording.produced(r, call_id)
    return results


def _finish_recorded(call: _Call) -> None:
    """:class:`_FinishTask` for a recorded call: its outputs from the values."""
    recording = call.recording
    assert recording is not None
    _record_call(call, call.failure is not None)
    if call.failure is not None:
        _fail(call.plan, call.inputs, call.results, call.failure, step=True)
    else:
        for r, v in zip(call.results, call.plan.outputs, strict=True):
            r._complete(READY, call.values[v.id])
    recording.done(call.call_id)


def _record_call(call: _Call, failed: bool, track: str | None = None, inline: bool = False) -> None:
    """The call's own event (kind ``graph``), the parent of its steps' events."""
    assert call.recording is not None
    call.recording.record(
        call.plan.graph.name,
        kind="graph",
        device=_device_name(call.plan, call.inputs),
        track=track,
        queued_ns=call.queued_ns,
        start_ns=call.started_ns,
        end_ns=time.perf_counter_ns(),
        inline=inline,
        source=call.site,
        inputs=call.inputs,
        failed=failed,
        event_id=call.call_id,
    )


# A numeric warning in a plan names the compiled function, at the user's call.
register_runner(_run_now.__code__, lambda frame: (frame.f_locals["plan"].graph.name, None))


def _plan_task_run(frame: Any) -> tuple[str, SourceLine | None]:
    task = frame.f_locals["self"]
    return task.plan.graph.name, task.site


def _segment_task_run(frame: Any) -> tuple[str, SourceLine | None]:
    call = frame.f_locals["self"].call
    return call.plan.graph.name, call.site


register_runner(_PlanTask.run.__code__, _plan_task_run)
register_runner(_SegmentTask.run.__code__, _segment_task_run)
