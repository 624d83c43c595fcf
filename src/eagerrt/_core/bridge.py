"""The one place where eagerrt suspends a task: waiting for an AsyncValue.

``await tensor`` comes here only when the value is still pending (an available
value is returned without yielding to the loop). Supported loops:

* asyncio and uvloop: a loop future, completed with ``set_result`` when the value
  completes on the loop's own thread and through ``call_soon_threadsafe`` when a
  worker completes it.
* trio (directly or under anyio): ``wait_task_rescheduled``, woken through the
  run's ``TrioToken.run_sync_soon``.

Cancelling the awaiting task just stops it waiting: the work itself goes on and
its result stays usable, so the runtime stays consistent.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .async_value import AsyncValue
from .deterministic import open_run
from .errors import UsageError

__all__ = ["Available", "wait_async"]


@dataclass(slots=True, eq=False, repr=False)
class Available:
    """``await Available(value)``: suspend until ``value`` is available (ready or
    failed), without reading it (a tensor's data is not copied to the host)."""

    value: AsyncValue

    def __await__(self) -> Generator[Any, None, None]:
        if not self.value.is_available():
            yield from wait_async(self.value)


def wait_async(value: AsyncValue) -> Generator[Any, None, None]:
    """Suspend the current task until ``value`` is available (``yield from`` it)."""
    # trio first: in trio's guest mode an asyncio loop runs too, but the task
    # awaiting is trio's.
    trio = sys.modules.get("trio")
    if trio is not None and _in_trio(trio):
        yield from _wait_trio(value, trio).__await__()
        return
    loop = asyncio._get_running_loop()
    if loop is not None:
        yield from _wait_asyncio(value, loop)
        return
    raise UsageError(
        "awaited an eagerrt value outside asyncio, uvloop or trio; "
        "in plain sync code use t.numpy() or t.wait() instead of await"
    )


def _in_trio(trio: Any) -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def _wait_asyncio(value: AsyncValue, loop: asyncio.AbstractEventLoop) -> Generator[Any, None, None]:
    future = loop.create_future()
    loop_thread = threading.get_ident()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    def on_available() -> None:
        if threading.get_ident() == loop_thread:
            wake()
            return
        # RuntimeError: the loop closed while the work ran, so nobody waits.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(wake)

    value.and_then(on_available)
    run = open_run()
    if run is not None:  # nothing runs by itself: this loop runs the queued work
        run.drive(loop.call_soon, lambda: not future.done())
    try:
        yield from future.__await__()
    except asyncio.CancelledError:  # don't leave a dead waiter on a long-running value
        # (Not on GeneratorExit: a coroutine closed by the garbage collector may be
        # finalised while this thread holds the transition lock.)
        value._discard_waiter(on_available)
        raise


async def _wait_trio(value: AsyncValue, trio: Any) -> None:
    lowlevel = trio.lowlevel
    task = lowlevel.current_task()
    token = lowlevel.current_trio_token()
    # Both callbacks below run on trio's thread, so this flag needs no lock.
    state = {"waiting": True}

    def wake() -> None:
        if state["waiting"]:
            state["waiting"] = False
            lowlevel.reschedule(task)

    def on_available() -> None:
        # Always through the token, even on trio's own thread: the completing
        # code may be another task's op call, not a place to reschedule from.
        # RuntimeError: the trio run finished while the work ran: nobody waits.
        with contextlib.suppress(RuntimeError):
            token.run_sync_soon(wake)

    def abort(_raise_cancel: Any) -> Any:
        state["waiting"] = False
        value._discard_waiter(on_available)
        return lowlevel.Abort.SUCCEEDED

    value.and_then(on_available)
    run = open_run()
    if run is not None:
        run.drive(token.run_sync_soon, lambda: state["waiting"])
    await lowlevel.wait_task_rescheduled(abort)
