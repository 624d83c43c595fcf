"""Concurrency: ops issued from several threads and several event loops at once
(each thread its own asyncio, uvloop or trio loop, plus plain sync threads) on
shared tensors.

In-place writes from one thread happen in that thread's program order and each
thread reads its own writes; the final value is the one every serialization of
the threads' writes gives (each writer owns one row of the shared tensor, so all
serializations agree); readers on other threads only ever see, row by row, states
that the row's writer went through, and never one older than a state they saw
before.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import trio
import uvloop

import eagerrt as ert
from eagerrt._core.async_value import _transition_lock

from .conftest import scale
from .leaks import no_leaks

COLUMNS = 8
LOOPS = ("sync", "sync", "asyncio", "uvloop", "trio")


def plan_writes(row: int, steps: int) -> list[tuple[str, int]]:
    """A writer's program: (kind, step) for each write."""
    kinds = ("add", "set", "double")
    return [(kinds[(s + row) % 3], s) for s in range(steps)]


def apply(state: np.ndarray, kind: str, step: int) -> np.ndarray:
    """The row after one write of the program, by numpy."""
    new = state.copy()
    if kind == "add":
        new += step + 1
    elif kind == "set":
        new[step % COLUMNS] = step
    else:
        new = (new * 2) % 1009
    return new


def history(row: int, steps: int) -> list[np.ndarray]:
    """Every state row ``row`` goes through (the initial zeros first)."""
    states = [np.zeros(COLUMNS, np.int64)]
    for kind, step in plan_writes(row, steps):
        states.append(apply(states[-1], kind, step))
    return states


def write(shared: ert.Tensor, rows: int, row: int, kind: str, step: int) -> None:
    """One write, issued on the calling thread."""
    if kind == "add":  # an in-place operator on the whole tensor; only our row changes
        delta = np.zeros((rows, COLUMNS), np.int64)
        delta[row] = step + 1
        shared += ert.asarray(delta)
    elif kind == "set":
        shared[row, step % COLUMNS] = step
    else:  # read-modify-write through a view: needs our previous writes done first
        shared[row] = (shared[row] * 2) % 1009


def run_writer(
    loop: str, shared: ert.Tensor, rows: int, row: int, steps: int, errors: list[BaseException]
) -> None:
    """Thread body: the row's program on a plain thread or on a loop of its own."""
    states = history(row, steps)
    program = plan_writes(row, steps)

    async def main_async(sleep: Callable[[float], Any]) -> None:
        for k, (kind, step) in enumerate(program):
            write(shared, rows, row, kind, step)
            if k % 7 == 0:  # read our own writes back, through the loop
                np.testing.assert_array_equal(await shared[row], states[k + 1])
                await sleep(0)

    try:
        if loop == "sync":
            for k, (kind, step) in enumerate(program):
                write(shared, rows, row, kind, step)
                if k % 7 == 0:
                    np.testing.assert_array_equal(shared[row].numpy(), states[k + 1])
        elif loop == "asyncio":
            asyncio.run(main_async(asyncio.sleep))
        elif loop == "uvloop":
            uvloop.run(main_async(asyncio.sleep))
        else:
            trio.run(main_async, trio.sleep)
    except BaseException as exc:
        errors.append(exc)


def run_reader(
    shared: ert.Tensor, states: list[list[np.ndarray]], done: threading.Event, seen: list[int]
) -> None:
    """Read the whole tensor again and again: every row must be a state its writer
    went through, no older than the last one this reader saw."""
    last = [0] * len(states)
    while not done.is_set():
        snapshot = shared.numpy(timeout=60)
        for row, value in enumerate(snapshot):
            k = last[row]
            while k < len(states[row]) and not np.array_equal(states[row][k], value):
                k += 1
            assert k < len(states[row]), f"row {row} read {value}: no state at or after {last[row]}"
            last[row] = k
        seen[0] += 1


@contextlib.contextmanager
def frequent_thread_switches() -> Iterator[None]:
    """Let the interpreter switch threads every 20 us, not every 5 ms:
    races that would hide for thousands of runs show up in a few."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def writers_and_readers(steps: int) -> None:
    """Every writer (one per row, one per kind of thread) and two readers at once."""
    rows = len(LOOPS)
    states = [history(row, steps) for row in range(rows)]
    shared = ert.zeros((rows, COLUMNS), dtype="int64")
    errors: list[BaseException] = []
    done = threading.Event()
    seen = [0]

    def reader() -> None:
        try:
            run_reader(shared, states, done, seen)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run_writer, args=(loop, shared, rows, row, steps, errors))
        for row, loop in enumerate(LOOPS)
    ]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + threads:
        t.start()
    for t in threads:
        t.join(90)
        assert not t.is_alive(), "a writer hung"
    done.set()
    for t in readers:
        t.join(90)
        assert not t.is_alive(), "a reader hung"
    if errors:
        raise errors[0]
    assert seen[0] > 0
    final = shared.numpy(timeout=60)
    np.testing.assert_array_equal(final, np.stack([s[-1] for s in states]))


def test_writers_on_threads_and_loops_keep_program_order() -> None:
    writers_and_readers(5)  # each loop's first-use imports, outside the leak check
    with no_leaks(), frequent_thread_switches():
        writers_and_readers(scale(150, 1_500))


def test_offloaded_writers_on_threads_and_loops_keep_program_order() -> None:
    """Every op on a worker: reads and writes of the shared tensor park on its
    pending versions while other threads write it (this used to deadlock: a
    read noted before a write and parked after it waited for that write,
    which waited for the read)."""
    with ert.config.override(inline_threshold_ns=0):
        writers_and_readers(5)
        with no_leaks(), frequent_thread_switches():
            writers_and_readers(scale(150, 1_500))


def write_while_paused(t: ert.Tensor, read: Callable[[], Any], step: int, lines: bool) -> Any:
    """Run ``read()`` on a thread of its own, paused at its ``step``-th step
    (Python-level calls and returns, or lines with ``lines``) while this thread
    writes ``t[0] = 10`` there. Returns what the read returned and whether it
    wrote (not if the read had no such step)."""
    paused, resume = threading.Event(), threading.Event()
    result: list[Any] = []
    events = 0

    def step_taken(is_step: bool) -> None:
        nonlocal events
        # Never inside a lock the write needs.
        if is_step and not paused.is_set():
            events += 1
            if events > step and not _transition_lock.locked():
                paused.set()
                resume.wait(10)

    def on_call(frame: Any, event: str, arg: Any) -> None:
        step_taken(event in ("call", "return"))

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        step_taken(event == "line")
        return on_line

    def reader() -> None:
        if lines:
            sys.settrace(on_line)
        else:
            sys.setprofile(on_call)
        try:
            result.append(read())
        finally:
            sys.settrace(None)
            sys.setprofile(None)

    thread = threading.Thread(target=reader)
    thread.start()
    while not paused.wait(0.001) and thread.is_alive():
        pass
    wrote = paused.is_set()
    if wrote:
        t[0] = 10.0
    resume.set()
    thread.join(10)
    assert not thread.is_alive(), "the reading thread hung"
    return result[0], wrote


def write_during_read(gate: Callable[[], Any], step: int) -> tuple[ert.Tensor, ert.Tensor, bool]:
    """Read a pending ``t`` (``t + 1``) on a thread of its own, paused at the
    read's ``step``-th Python-level call or return while this thread writes
    ``t[0] = 10`` there. Returns ``t``, the read, and whether it wrote (not if
    the read's issue had no such step); opens the gate last."""
    g = gate()
    t = g()  # [0, 1, 2], pending until the gate opens
    read, wrote = write_while_paused(t, lambda: t + 1, step, lines=False)
    g.open()
    return t, read, wrote


def test_a_write_at_any_step_of_a_parked_read_on_another_thread(
    gate: Callable[[], Any],
) -> None:
    """A read of a pending tensor issued on one thread, and a write to it
    issued on another at each step of that read's issue in turn: nothing
    hangs, the read sees the version before the write or the write's, and the
    tensor ends with the write. (Noting the read and parking it apart, a write
    between the two deadlocked: the write waited for the read, the read for
    the write.)"""
    step = 0
    while True:
        t, read, wrote = write_during_read(gate, step)
        seen = read.numpy(timeout=10).tolist()
        assert seen in ([1.0, 2.0, 3.0], [11.0, 2.0, 3.0]), seen
        if not wrote:  # past the read's last step: every step was tried
            assert t.numpy(timeout=10).tolist() == [0.0, 1.0, 2.0]
            break
        assert t.numpy(timeout=10).tolist() == [10.0, 1.0, 2.0]
        step += 1
    assert step > 10  # the read's issue has that many steps at least


def write_during_host_read(step: int) -> tuple[ert.Tensor, list[float], bool]:
    """``t.numpy()`` of a ready ``t`` on a thread of its own, paused at the
    read's ``step``-th line while this thread writes ``t[0] = 10``. Returns
    ``t``, what the read saw, and whether it wrote (not past the read's end).
    Line by line: the read has few calls, and the window is between two."""
    t = ert.asarray(np.array([0.0, 1.0, 2.0]))
    seen, wrote = write_while_paused(t, lambda: t.numpy().tolist(), step, lines=True)
    return t, seen, wrote


def test_a_write_at_any_step_of_a_host_read_on_another_thread() -> None:
    """``t.numpy()`` on one thread, and a write to ``t`` on another at each
    line of that read in turn: the read returns the old version or the new one,
    and every later read returns the new one. (The read cached its host array
    after the write had forgotten the cache: every later read, the final one
    of the writers' test included, missed the write.)"""
    step = 0
    while True:
        t, seen, wrote = write_during_host_read(step)
        assert seen in ([0.0, 1.0, 2.0], [10.0, 1.0, 2.0]), seen
        if not wrote:  # past the read's last line: every line was tried
            break
        assert t.numpy().tolist() == [10.0, 1.0, 2.0], f"the write at line {step} was lost"
        step += 1
    assert step > 3


def test_ops_on_shared_weights_from_threads_and_loops_at_once() -> None:
    """Readers only: eager and compiled models on shared weights, offloaded and
    parked work, from every kind of thread at once; every result right."""
    rng = np.random.default_rng(3)
    w_data = rng.standard_normal((16, 16)).astype(np.float32)
    w = ert.asarray(w_data)

    def eager(x: Any) -> Any:
        return ert.tanh(x @ w) @ w + 1

    @ert.function
    def compiled(x: Any) -> Any:
        return eager(x)

    def want(x: np.ndarray) -> np.ndarray:
        return np.tanh(x @ w_data) @ w_data + 1

    calls = scale(60, 600)
    errors: list[BaseException] = []

    def inputs(seed: int) -> list[np.ndarray]:
        r = np.random.default_rng(seed)
        return [r.standard_normal((4, 16)).astype(np.float32) for _ in range(calls)]

    async def main_async(seed: int, sleep: Callable[[float], Any]) -> None:
        for k, x in enumerate(inputs(seed)):
            fn = compiled if k % 2 else eager
            np.testing.assert_allclose(await fn(ert.asarray(x)), want(x), rtol=1e-4, atol=1e-5)
            await sleep(0)

    def body(loop: str, seed: int) -> None:
        try:
            if loop == "sync":
                for k, x in enumerate(inputs(seed)):
                    fn = compiled if k % 2 else eager
                    got = fn(ert.asarray(x)).numpy(timeout=60)
                    np.testing.assert_allclose(got, want(x), rtol=1e-4, atol=1e-5)
            elif loop == "asyncio":
                asyncio.run(main_async(seed, asyncio.sleep))
            elif loop == "uvloop":
                uvloop.run(main_async(seed, asyncio.sleep))
            else:
                trio.run(main_async, seed, trio.sleep)
        except BaseException as exc:
            errors.append(exc)

    compiled(ert.asarray(inputs(0)[0])).numpy()  # traced once, outside the threads
    for threshold in (None, 0.0):
        changes = {} if threshold is None else {"inline_threshold_ns": threshold}
        with ert.config.override(**changes), frequent_thread_switches():  # type: ignore[arg-type]
            threads = [
                threading.Thread(target=body, args=(loop, seed)) for seed, loop in enumerate(LOOPS)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
                assert not t.is_alive(), "a caller hung"
        if errors:
            raise errors[0]
