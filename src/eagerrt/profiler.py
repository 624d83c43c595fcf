"""The profiler: what ran where and when, as a table, a trace or a picture.

``with ert.profile() as prof:`` records every op run while the block is active,
from any thread: its name, device, track (the thread that ran it, or a device's
stream), when it was called, started and ended, whether it ran inline or on a
worker, the user's line that called it, and which recorded ops made its inputs.
Compiled calls (``ert.function``) are recorded too, with an event per step.

>>> import numpy as np, eagerrt as ert
>>> x = ert.asarray(np.ones((4, 4), dtype="float32"))
>>> with ert.profile() as prof:
...     y = ert.exp(x @ x).sum()
...     _ = y.numpy()
>>> [e.name for e in prof.events]
['matmul', 'exp', 'sum']
>>> matmul, exp, total = prof.events
>>> exp.inputs == (matmul.id,), total.inputs == (exp.id,), total.inline
(True, True, True)

Then ``print(prof)`` (or ``prof.summary()``) for a table by op,
``prof.export_chrome_trace("trace.json")`` for Perfetto / chrome://tracing, and
``prof.plot("timeline.png")`` for a timeline picture (needs matplotlib).

While a profile is active the ops' inline caches are off, so every call takes
the general path where it is recorded; when none is active, each hook is one
read of a module global.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, final

from ._core import AsyncValue, Event, UsageError, on_worker_thread, profiling
from .ops import registry

__all__ = ["Event", "Profile", "profile"]


@final
class Profile(profiling.Recording):
    """A recording of the ops run while it was active; made by :func:`profile`.

    Single use: enter it once. Leaving the block waits for the ops it saw
    called to finish, so that every event has its times.
    """

    def __init__(self) -> None:
        super().__init__()
        self._entered = False
        self.start_ns = 0
        self.end_ns: int | None = None

    # -- recording -----------------------------------------------------------
    def __enter__(self) -> Profile:
        if self._entered:
            raise UsageError(
                "this profile was already used: make a new one with `with ert.profile() as prof:`"
            )
        self._entered = True
        profiling.start(self)
        # Off the fast paths' inline caches: every call must take Op._call now.
        registry._forget_all_calls()
        self.start_ns = time.perf_counter_ns()
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        profiling.stop(self)
        # Let the ops called inside finish, unless leaving on an error or from
        # inside a kernel (where waiting could wait for that kernel itself).
        if kind is None and not on_worker_thread():
            for value in self.in_flight():
                AsyncValue.wait(value)
        self.end_ns = time.perf_counter_ns()

    @property
    def events(self) -> list[Event]:
        """The recorded events, by start time (a new list on each read)."""
        return sorted(self.recorded(), key=lambda e: (e.start_ns, e.id))

    @property
    def wall_ns(self) -> int:
        """Nanoseconds from entering the block to leaving it (or to now)."""
        end = self.end_ns if self.end_ns is not None else time.perf_counter_ns()
        return end - self.start_ns

    # -- reports -------------------------------------------------------------
    def summary(self) -> str:
        """A text table by op name: count, total and mean time, share of the
        profile's wall time, share run inline; the largest total first.

        Compiled calls (kind ``graph``) and their parts show as their own rows
        beside their steps, so shares may add up to more than 100%, as do
        those of ops that overlapped on several threads.
        """
        rows: dict[tuple[str, str], list[int]] = {}  # (name, kind) -> [count, total, inline]
        events = self.recorded()
        for e in events:
            row = rows.setdefault((e.name, e.kind), [0, 0, 0])
            row[0] += 1
            row[1] += e.duration_ns
            row[2] += e.inline
        wall = max(self.wall_ns, 1)
        table = [["op", "kind", "count", "total ms", "mean us", "% wall", "% inline"]]
        for (name, kind), (count, total, inline) in sorted(
            rows.items(), key=lambda item: (-item[1][1], item[0])
        ):
            table.append(
                [
                    name,
                    kind,
                    str(count),
                    f"{total / 1e6:.3f}",
                    f"{total / count / 1e3:.1f}",
                    f"{100 * total / wall:.1f}",
                    f"{100 * inline / count:.0f}",
                ]
            )
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines = [
            "  ".join(
                cell.ljust(w) if i < 2 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
            for r in table
        ]
        lines.insert(1, "-" * len(lines[0]))
        tracks = len({(e.device, e.track) for e in events})
        lines.append(
            f"{len(events)} events on {tracks} track(s) in {self.wall_ns / 1e6:.3f} ms wall"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        state = "recording" if profiling.active is self else "done"
        return f"<eagerrt Profile: {len(self._log)} events, {state}>"

    def chrome_trace(self) -> dict[str, Any]:
        """The profile in the Chrome trace event format, as a JSON-ready dict
        (what :meth:`export_chrome_trace` writes)."""
        events = self.events
        origin = self.start_ns
        pids: dict[str, int] = {}
        tids: dict[tuple[str, str], int] = {}
        out: list[dict[str, Any]] = []
        streams = self.device_tracks
        # The host first, then devices as they appear; in each, the main thread,
        # the other threads, then the device's streams, each by name.
        devices = sorted({e.device for e in events}, key=lambda d: d != "cpu")
        for device in devices:
            pids[device] = pid = len(pids) + 1
            out.append(_meta("process_name", pid, 0, device))
            out.append(_meta("process_sort_index", pid, 0, pid, "sort_index"))
            tracks = sorted(
                {e.track for e in events if e.device == device},
                key=lambda t: ((device, t) in streams, *_track_order((device, t))[1:]),
            )
            for track in tracks:
                tids[(device, track)] = tid = len(tids) + 1
                label = track
                if (device, track) in streams and "stream" not in track.lower():
                    label = f"stream {track}"  # a device's own track: "stream compute0"
                out.append(_meta("thread_name", pid, tid, label))
                out.append(_meta("thread_sort_index", pid, tid, tid, "sort_index"))

        def at(e: Event, ns: int) -> dict[str, Any]:
            """Where a trace event sits: its time (us since the start) and track."""
            return {
                "ts": (ns - origin) / 1e3,
                "pid": pids[e.device],
                "tid": tids[e.device, e.track],
            }

        by_id = {e.id: e for e in events}
        for e in events:
            args: dict[str, Any] = {
                "inline": e.inline,
                "queued_us": round(e.wait_ns / 1e3, 3),
                "event_id": e.id,
            }
            if e.source is not None:
                args["source"] = f"{e.source.filename}:{e.source.lineno} ({e.source.function})"
            if e.failed:
                args["failed"] = True
            if e.parent is not None:
                args["parent_id"] = e.parent
            if e.args:
                args.update(e.args)
            slice_ = {"name": e.name, "cat": e.kind, "ph": "X", "dur": e.duration_ns / 1e3}
            out.append({**slice_, **at(e, e.start_ns), "args": args})
        flow_id = 0
        for e in events:
            for dep in e.inputs:
                producer = by_id.get(dep)
                if producer is None:
                    continue
                flow_id += 1
                flow = {"name": "dependency", "cat": "dependency", "id": flow_id}
                # The start binds to the slice enclosing its time on the
                # producer's track, so it sits just inside the producer's end.
                start = max(producer.start_ns, producer.end_ns - 1)
                out.append({**flow, "ph": "s", **at(producer, start)})
                out.append({**flow, "ph": "f", "bp": "e", **at(e, e.start_ns)})
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the profile as a Chrome trace JSON file (open it in
        https://ui.perfetto.dev or chrome://tracing): a process per device, a
        track per thread or stream, a slice per op with its source line, and
        arrows from each op to the ops that read its results."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)

    def plot(self, path: str | os.PathLike[str], *, width: float = 12.0) -> None:
        """Save a timeline picture (PNG): a row per track, a bar per op, a
        colour per op name, so what overlapped shows at a glance.

        Needs matplotlib (``pip install 'eagerrt[plot]'``); draws on its own
        figure with the Agg renderer, leaving pyplot's state alone.
        """
        try:
            from matplotlib import colormaps
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
            from matplotlib.patches import Patch
        except ImportError:
            raise UsageError(
                "prof.plot() needs matplotlib: pip install 'eagerrt[plot]' (or matplotlib). "
                "prof.export_chrome_trace(path) needs nothing and opens in Perfetto."
            ) from None
        events = self.events
        tracks = sorted({(e.device, e.track) for e in events}, key=_track_order)
        row = {t: i for i, t in enumerate(tracks)}
        names = _by_total_time(e for e in events if e.kind not in _CONTAINERS)
        palette = colormaps["tab20"]
        colour: dict[str, Any] = {n: palette(i % 20) for i, n in enumerate(names)}
        fig = Figure(figsize=(width, 1.2 + 0.45 * max(len(tracks), 1)))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        origin = self.start_ns
        for e in events:
            y = row[(e.device, e.track)]
            start = (e.start_ns - origin) / 1e6
            length = max(e.duration_ns / 1e6, 1e-4)
            if e.kind in _CONTAINERS:  # a compiled call: an outline around its steps
                band, face, edge = (y - 0.42, 0.84), "none", "0.4"
            else:
                band, face, edge = (y - 0.3, 0.6), colour[e.name], "black" if e.failed else "none"
            ax.broken_barh([(start, length)], band, facecolors=face, edgecolors=edge)
        ax.set_yticks(range(len(tracks)), [f"{d}: {t}" for d, t in tracks])
        ax.set_ylim(-0.7, len(tracks) - 0.3)
        ax.invert_yaxis()
        ax.set_xlim(0, max(self.wall_ns / 1e6, 1e-3))
        ax.set_xlabel("time since the profile started (ms)")
        ax.set_title(f"eagerrt profile: {len(events)} events")
        shown = names[:12]
        if shown:
            ax.legend(
                handles=[Patch(color=colour[n], label=n) for n in shown],
                loc="upper left",
                bbox_to_anchor=(1.01, 1.0),
                fontsize="small",
            )
        fig.tight_layout()
        fig.savefig(path, dpi=100, format="png")


#: Event kinds that contain others (drawn as outlines around their steps).
_CONTAINERS = frozenset({"graph", "segment"})


def _meta(what: str, pid: int, tid: int, value: Any, key: str = "name") -> dict[str, Any]:
    return {"name": what, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def _track_order(track: tuple[str, str]) -> tuple[str, bool, str]:
    # The main thread first on each device, then the others by name.
    device, name = track
    return (device, name != threading.main_thread().name, name)


def _by_total_time(events: Any) -> list[str]:
    totals: dict[str, int] = {}
    for e in events:
        totals[e.name] = totals.get(e.name, 0) + e.duration_ns
    return sorted(totals, key=lambda n: (-totals[n], n))


def profile() -> Profile:
    """Record every op run while the ``with`` block is active (from any thread).

    >>> import eagerrt as ert
    >>> with ert.profile() as prof:
    ...     _ = ert.exp(ert.ones((3,))).numpy()
    >>> print(prof.summary())  # doctest: +ELLIPSIS
    op    kind  count  total ms  mean us  % wall  % inline
    ------------------------------------------------------
    ...
    2 events on 1 track(s) in ... ms wall

    Profiles don't nest: starting one while another records raises a
    :class:`~eagerrt.UsageError`.
    """
    return Profile()
