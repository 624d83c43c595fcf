"""Eager ``ert.cond`` / ``ert.while_loop`` calls, as ``ert.profile()`` sees them.

While a profile records, each eager call is one event (kind ``"op"``) named
``cond`` or ``while_loop``, with its dependencies like any op's, and in its
``args`` the branch taken (``{"branch": "true", "function": "scale"}``) or the
loop's trip count (``{"iterations": 5}``). The sub-plans it runs then run
step by step, each step an event (kind ``"step"``) whose ``parent`` is the
call's event, so a branch's or a loop body's ops show inside the call.

>>> import numpy as np, eagerrt as ert
>>> x = ert.asarray(np.array([1.0, 2.0]))
>>> with ert.profile() as prof:
...     n, y = ert.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2), (0, x))
...     _ = y.numpy()
>>> loop = next(e for e in prof.events if e.name == "while_loop")
>>> loop.args
{'iterations': 3}
>>> sorted({e.name for e in prof.events if e.parent == loop.id})
['add', 'less', 'multiply']
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .._core import SourceLine, profiling
from .plan import Plan

__all__: list[str] = []

_current = threading.local()
_counting = threading.Lock()

#: How many recorded calls are running now, on any thread: while none is, the
#: sub-plans of control flow run as usual without looking further (one read).
running = 0


class Observed:
    """One eager control-flow call while a profile records: its event id is
    taken at the call (its results name it as their producer at once); the
    event is logged when the kernel has run, on whichever thread ran it."""

    __slots__ = (
        "deps",
        "depth",
        "device",
        "event_id",
        "inline",
        "name",
        "queued_ns",
        "recording",
        "runs",
        "site",
    )

    def __init__(
        self,
        recording: profiling.Recording,
        name: str,
        device: str,
        args: list[Any],
        site: SourceLine | None,
    ) -> None:
        self.recording = recording
        self.name = name
        self.device = device
        self.site = site
        self.event_id = recording.new_id()
        self.queued_ns = time.perf_counter_ns()
        self.deps = recording.producers(args)
        #: The sub-plans run by the call itself (not by a nested call), in order.
        self.runs: list[Plan] = []
        self.depth = 0
        self.inline = True

    def made(self, results: list[Any], later: bool) -> None:
        """The call's results: later readers depend on its event. ``later``:
        it runs as a task, which the profile waits for when it ends."""
        recording = self.recording
        for r in results:
            recording.produced(r, self.event_id)
        if later:
            recording.expect(self.event_id, results[-1])

    def run(self, call: Any, inline: bool, describe: Any) -> Any:
        """``call()`` (the op's kernel), timed and logged as the call's event
        with ``describe(self.runs)`` as its args."""
        global running
        outer = getattr(_current, "observed", None)
        _current.observed = self
        self.inline = inline
        with _counting:
            running += 1
        track = profiling.track_name()
        start = time.perf_counter_ns()
        failed = True
        try:
            out = call()
            failed = False
            return out
        finally:
            end = time.perf_counter_ns()
            _current.observed = outer
            with _counting:
                running -= 1
            self.recording.add(
                (
                    self.event_id,
                    self.name,
                    "op",
                    self.device,
                    track,
                    self.queued_ns,
                    start,
                    end,
                    inline,
                    self.site,
                    self.deps,
                    None,
                    failed,
                    describe(self.runs),
                )
            )
            self.recording.done(self.event_id)

    def execute(self, plan: Plan, arrays: list[Any]) -> list[Any]:
        """Run ``plan`` inside the call: its steps one by one, each an event
        (raises :class:`~eagerrt.graph.plan.StepFailed` as ``plan.execute`` does)."""
        if self.depth == 0:
            self.runs.append(plan)
        on_step = Plan.step_recorder(
            self.recording,
            {},  # value id -> the step event that made it
            device=self.device,
            track=profiling.track_name(),
            inline=self.inline,
            parent=self.event_id,
        )
        values = plan.step_values(arrays)
        self.depth += 1
        try:
            plan.run_steps(plan.steps, values, on_step)
        finally:
            self.depth -= 1
        return [values[v.id] for v in plan.outputs]


def observing() -> Observed | None:
    """The eager control-flow call being recorded on this thread, if any."""
    return getattr(_current, "observed", None)
