"""The cuda device's captured plans (``eagerrt.devices.cuda_graphs``), on the CPU.

A fake CuPy stands in for the GPU: its stream records, while capturing, what the
plan's kernels do to their (fixed) arrays, and a graph launch replays that tape,
as a CUDA graph replays kernels on the addresses they were captured with. So CI
checks the protocol: warm up, capture, copy inputs in and results out, notice a
replaced weight, give up on a capture that fails. tests/test_cuda.py checks the
same on a GPU.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from eagerrt.devices.cuda_graphs import CapturedPlan
from eagerrt.devices.device_checks import check_later


class FakeStream:
    def __init__(self) -> None:
        self.tape: list[Callable[[], None]] | None = None

    def begin_capture(self, mode: Any = None) -> None:
        self.tape = []

    def end_capture(self) -> Any:
        tape, self.tape = self.tape, None
        return types.SimpleNamespace(launch=lambda stream: [step() for step in tape or ()])


def fake_cupy() -> Any:
    pool = types.SimpleNamespace(malloc=None)
    cuda = types.SimpleNamespace(
        MemoryPool=lambda: pool,
        using_allocator=lambda malloc: contextlib.nullcontext(),
        runtime=types.SimpleNamespace(streamCaptureModeRelaxed=0),
    )
    return types.SimpleNamespace(cuda=cuda)


def plan_of(stream: FakeStream, fail_capture: bool = False) -> tuple[CapturedPlan, list[int]]:
    """A plan computing ``x * 2 + w`` (input x, constant w); ``runs`` counts its
    kernels' plain runs."""
    runs = [0]

    def run(natives: list[Any]) -> list[Any]:
        x, w = natives
        if stream.tape is not None and fail_capture:
            raise RuntimeError("this kernel can't be captured")
        out = x * 2 + w
        flag = np.asarray((out < 0).any())
        check_later(flag, "negative")
        if stream.tape is not None:  # what the captured kernels do on every replay
            stream.tape.append(lambda: np.copyto(out, x * 2 + w))
            stream.tape.append(lambda: np.copyto(flag, (out < 0).any()))
        else:
            runs[0] += 1
        return [out]

    return CapturedPlan(fake_cupy(), run, 1), runs


def test_warm_up_capture_then_replays_with_fresh_results() -> None:
    stream = FakeStream()
    plan, runs = plan_of(stream)
    w = np.ones(3)
    first, _ = plan(stream, [np.full(3, 1.0), w])
    assert not plan.captured and runs[0] == 1  # the warm-up runs plainly
    second, checks = plan(stream, [np.full(3, 2.0), w])
    assert plan.captured and runs[0] == 1  # captured and replayed, not run
    third, _ = plan(stream, [np.full(3, 3.0), w])
    np.testing.assert_array_equal(first[0], [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(second[0], [5.0, 5.0, 5.0])  # not overwritten by the replay
    np.testing.assert_array_equal(third[0], [7.0, 7.0, 7.0])
    assert second[0] is not third[0]
    assert [message for _, message in checks] == ["negative"]  # copied out per call
    _, checks = plan(stream, [np.full(3, -9.0), w])
    assert bool(checks[0][0]) and runs[0] == 1


def test_a_replaced_weight_makes_the_plan_capture_again() -> None:
    stream = FakeStream()
    plan, _ = plan_of(stream)
    w = np.ones(3)
    plan(stream, [np.zeros(3), w])
    plan(stream, [np.zeros(3), w])
    assert plan.captured
    out, _ = plan(stream, [np.zeros(3), np.full(3, 5.0)])  # a new weight array
    np.testing.assert_array_equal(out[0], [5.0, 5.0, 5.0])
    assert not plan.captured
    out, _ = plan(stream, [np.ones(3), np.full(3, 5.0)])
    assert plan.captured
    np.testing.assert_array_equal(out[0], [7.0, 7.0, 7.0])


def test_a_failed_capture_leaves_the_plan_running_plainly() -> None:
    stream = FakeStream()
    plan, runs = plan_of(stream, fail_capture=True)
    plan(stream, [np.zeros(3), np.ones(3)])
    out, _ = plan(stream, [np.ones(3), np.ones(3)])
    assert not plan.captured
    assert isinstance(plan.capture_error, RuntimeError)
    np.testing.assert_array_equal(out[0], [3.0, 3.0, 3.0])
    assert stream.tape is None  # the capture was ended
    plan(stream, [np.ones(3), np.ones(3)])
    assert runs[0] == 3


def test_a_plan_asked_not_to_capture_never_does() -> None:
    stream = FakeStream()
    runs = [0]

    def run(natives: list[Any]) -> list[Any]:
        runs[0] += 1
        return [natives[0] + 1]

    plan = CapturedPlan(fake_cupy(), run, 1, capture=False)
    for _ in range(3):
        plan(stream, [np.zeros(2)])
    assert not plan.captured and runs[0] == 3


def test_a_call_on_another_stream_runs_plainly() -> None:
    """The graph's buffers are ordered on its capture stream only."""
    stream, other = FakeStream(), FakeStream()
    plan, runs = plan_of(stream)
    w = np.ones(3)
    plan(stream, [np.zeros(3), w])
    plan(stream, [np.zeros(3), w])
    assert plan.captured and runs[0] == 1
    out, _ = plan(other, [np.ones(3), w])
    np.testing.assert_array_equal(out[0], [3.0, 3.0, 3.0])
    assert runs[0] == 2 and plan.captured  # still captured for its own stream
