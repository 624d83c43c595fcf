"""Leak checks for the reliability tests: what a case leaves behind once it is over.

Three things must be back at their baseline after a case and its cleanup:

* live AsyncValues and Tensors, counted through the garbage collector
  (``eagerrt.lowlevel.live_async_values``: nothing is counted on the hot path);
* threads: none beyond those alive before and the runtime's own, named ``eagerrt-*``
  (its worker pools start on first use and stay);
* memory: what the case allocated and still holds (``tracemalloc``), under a small
  slack for the runtime's caches (per-op inline caches, kernel lookups) and numpy's;
  modules imported on first use and numba compiling a new kernel are caches too.

Use it as a context manager around one case::

    with no_leaks():
        run_the_case()

or take a :func:`baseline` and call :func:`check` with it. Both raise
``AssertionError`` saying what leaked.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass

import eagerrt as ert
from eagerrt.lowlevel import live_async_values

__all__ = ["Baseline", "baseline", "check", "no_leaks", "settle"]

#: Bytes a case may leave allocated: the runtime's caches (an op's inline cache,
#: its per-device kernel lookup) and numpy's grow on first use of a signature.
DEFAULT_MEMORY_SLACK = 256 * 1024


@dataclass
class Baseline:
    """What was alive before the case."""

    values: dict[str, int]
    threads: set[threading.Thread]
    started_tracing: bool
    memory: int


def settle(timeout: float = 30.0) -> None:
    """Let the runtime finish: wait for outstanding work, drop failures nobody
    read (the case checks the ones it cares about), and collect garbage."""
    with contextlib.suppress(ert.KernelError, ert.EagerErrorGroup):
        ert.synchronize(timeout=timeout)
    # A value completes a few bytecodes before its task lets go of it.
    deadline = time.monotonic() + timeout
    while ert.stats().queue_depth and time.monotonic() < deadline:
        time.sleep(0.001)
    gc.collect()


def baseline() -> Baseline:
    """Settle, then record live values, threads and traced memory.

    What is alive now is frozen out of the collector's generations: the
    collections and the count of live values after the case then walk only
    what came later, not the whole heap (after the model tests it is large,
    and each case would pay for a walk of it several times). The reliability
    conftest unfreezes it after each module.
    """
    settle()
    gc.freeze()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    return Baseline(
        values=live_async_values(),
        threads=set(threading.enumerate()),
        started_tracing=started,
        memory=tracemalloc.get_traced_memory()[0],
    )


#: Allocations that are caches, not the case's: modules imported on first use
#: (and the ABC registries their classes join), source lines read for a
#: traceback (linecache), and numba compiling a new fused kernel (eagerrt keeps
#: compiled kernels by source, as numba's cache does).
_CACHES = [
    tracemalloc.Filter(False, "*/linecache.py"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<frozen abc>"),
    tracemalloc.Filter(False, "*/numba/*"),
    tracemalloc.Filter(False, "*/llvmlite/*"),
]


def _held_by_the_case(before: Baseline) -> int:
    if not before.started_tracing:  # traces from before the case are mixed in
        return tracemalloc.get_traced_memory()[0] - before.memory
    snapshot = tracemalloc.take_snapshot().filter_traces(_CACHES)
    return sum(stat.size for stat in snapshot.statistics("filename"))


def _grown(before: Baseline) -> dict[str, int]:
    values = live_async_values()
    return {
        kind: count - before.values.get(kind, 0)
        for kind, count in values.items()
        if count > before.values.get(kind, 0)
    }


#: How long trio's thread cache keeps an idle worker thread (trio's IDLE_TIMEOUT, 10 s),
#: plus a margin for a loaded machine.
TRIO_IDLE_THREAD_S = 12.0


def _runtime_thread(thread: threading.Thread) -> bool:
    return thread.name.startswith("eagerrt-")


def check(
    before: Baseline, *, memory_slack: int = DEFAULT_MEMORY_SLACK, timeout: float = 5.0
) -> None:
    """Settle, then assert nothing outlived the case started at ``before``."""
    try:
        settle()
        grown = _grown(before)
        if grown:  # finalizers run by the first collection may free more
            gc.collect()
            grown = _grown(before)
        assert not grown, f"AsyncValues outlived the case: {grown} more than before"
        stats = ert.stats()
        assert stats.pending_values == 0, f"{stats.pending_values} value(s) still pending"
        assert stats.queue_depth == 0, f"{stats.queue_depth} task(s) still queued"

        # A thread that was told to stop may take a moment to end.
        started = time.monotonic()
        deadline = started + timeout
        while True:
            extra = [
                t
                for t in threading.enumerate()
                if t not in before.threads and not _runtime_thread(t)
            ]
            if not extra:
                break
            # trio keeps a finished to_thread worker idle in its cache for 10 s before it
            # exits: such threads get that long (anything else, the usual timeout).
            if all(t.name.startswith("Trio thread") for t in extra):
                limit = max(deadline, started + TRIO_IDLE_THREAD_S)
            else:
                limit = deadline
            if time.monotonic() > limit:
                break
            time.sleep(0.005)
        assert not extra, f"threads outlived the case: {[t.name for t in extra]}"

        held = tracemalloc.get_traced_memory()[0] - before.memory
        if held > memory_slack:
            gc.collect()
            held = _held_by_the_case(before)
        if held > memory_slack:
            top = tracemalloc.take_snapshot().filter_traces(_CACHES).statistics("lineno")[:8]
            sites = "\n  ".join(str(stat) for stat in top)
            raise AssertionError(
                f"the case left {held} bytes allocated (slack {memory_slack}); "
                f"largest holders now:\n  {sites}"
            )
    finally:
        if before.started_tracing:
            tracemalloc.stop()


@contextlib.contextmanager
def no_leaks(
    *, memory_slack: int = DEFAULT_MEMORY_SLACK, timeout: float = 5.0
) -> Iterator[Baseline]:
    """Assert that the block leaves no values, threads or memory behind.

    Not checked when the block raised: its own error says more.
    """
    before = baseline()
    try:
        yield before
    except BaseException:
        if before.started_tracing:
            tracemalloc.stop()
        raise
    check(before, memory_slack=memory_slack, timeout=timeout)
