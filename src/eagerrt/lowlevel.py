"""The low-level primitives under eagerrt, for runtime and device authors.

>>> from eagerrt.lowlevel import AsyncValue, run_when_ready
>>> a = AsyncValue()
>>> out = []
>>> run_when_ready([a], lambda: out.append(a.value * 2))
>>> a.set_value(21); out
[42]
"""

from __future__ import annotations

from ._core import (
    MAX_INLINE_DEPTH,
    AsyncValue,
    AsyncValueStateError,
    DeterministicRun,
    Executor,
    IndirectAsyncValue,
    Task,
    WorkerPool,
    live_async_values,
    register_executor,
    run_when_ready,
    schedule,
    wait_async,
)
from .ops.indexing import fill_index

__all__ = [
    "MAX_INLINE_DEPTH",
    "AsyncValue",
    "AsyncValueStateError",
    "DeterministicRun",
    "Executor",
    "IndirectAsyncValue",
    "Task",
    "WorkerPool",
    "fill_index",
    "live_async_values",
    "register_executor",
    "run_when_ready",
    "schedule",
    "wait_async",
]
