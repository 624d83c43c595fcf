"""AsyncValue: completion, continuations, races, forwarding, deep chains."""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.lowlevel import (
    MAX_INLINE_DEPTH,
    AsyncValue,
    AsyncValueStateError,
    IndirectAsyncValue,
    run_when_ready,
)

THREADS = 8

# Always offloaded to the CPU workers, whatever the cost model's constants.
_heavy_copy = ert.define_op(
    "async_value_heavy_copy", rule=lambda x: (x.shape, x.dtype), cost=lambda *a, **k: 1e15
)
_heavy_copy.register_kernel("generic", np.copy)


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Make the interpreter switch threads as often as it can, to shake out races."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


class Crew:
    """``THREADS`` persistent threads that run one job each per round, in lockstep."""

    def __init__(self, n: int = THREADS) -> None:
        self.n = n
        self.start = threading.Barrier(n + 1, timeout=30)
        self.end = threading.Barrier(n + 1, timeout=30)
        self.jobs: list = [None] * n
        self.errors: list[BaseException] = []
        self.stop = False
        self.threads = [threading.Thread(target=self._loop, args=(i,)) for i in range(n)]
        for t in self.threads:
            t.start()

    def _loop(self, i: int) -> None:
        while True:
            self.start.wait()
            if self.stop:
                return
            try:
                self.jobs[i]()
            except BaseException as exc:
                self.errors.append(exc)
            self.end.wait()

    def round(self, jobs: list) -> None:
        self.jobs[:] = jobs
        self.start.wait()
        self.end.wait()

    def close(self) -> None:
        self.stop = True
        self.start.wait()
        for t in self.threads:
            t.join(10)


@pytest.fixture
def crew() -> Iterator[Crew]:
    c = Crew()
    yield c
    c.close()
    assert not c.errors, c.errors[:3]


# -- basic state machine -------------------------------------------------------------
def test_pending_then_ready_is_final() -> None:
    v = AsyncValue()
    assert v.state == "pending" and not v.is_available() and not v.is_error()
    with pytest.raises(AsyncValueStateError):
        _ = v.value
    v.set_value(7)
    assert v.state == "ready" and v.is_available() and v.value == 7
    with pytest.raises(AsyncValueStateError, match="twice"):
        v.set_value(8)
    with pytest.raises(AsyncValueStateError, match="twice"):
        v.set_error(ValueError("late"))
    assert v.value == 7 and v.state == "ready"
    with pytest.raises(AsyncValueStateError):
        _ = v.error


def test_error_is_final() -> None:
    v = AsyncValue()
    boom = ValueError("boom")
    v.set_error(boom)
    assert v.is_error() and v.error is boom and v.state == "error"
    with pytest.raises(AsyncValueStateError):
        v.set_value(1)
    with pytest.raises(AsyncValueStateError):
        v.set_error(ValueError("again"))
    with pytest.raises(AsyncValueStateError):
        _ = v.value
    assert v.error is boom


def test_born_ready_and_born_failed() -> None:
    assert AsyncValue.ready(3).value == 3
    err = KeyError("k")
    failed = AsyncValue.failed(err)
    assert failed.is_error() and failed.error is err
    with pytest.raises(AsyncValueStateError):
        AsyncValue.ready(1).set_value(2)


def test_and_then_runs_inline_when_available() -> None:
    v = AsyncValue.ready(1)
    seen = []
    v.and_then(lambda: seen.append(threading.current_thread()))
    assert seen == [threading.current_thread()]  # before and_then returned


def test_and_then_runs_on_the_completing_thread() -> None:
    v = AsyncValue()
    seen: list[tuple[threading.Thread, object]] = []
    v.and_then(lambda: seen.append((threading.current_thread(), v.value)))
    assert seen == []
    completer = threading.Thread(target=v.set_value, args=("done",), name="completer")
    completer.start()
    completer.join(10)
    assert len(seen) == 1
    assert seen[0][0] is completer and seen[0][1] == "done"


def test_continuations_run_in_registration_order_once() -> None:
    v = AsyncValue()
    seen: list[int] = []
    for i in range(10):
        v.and_then(lambda i=i: seen.append(i))
    v.set_value(None)
    assert seen == list(range(10))
    v.and_then(lambda: seen.append(99))
    assert seen == [*range(10), 99]


def test_a_raising_continuation_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    v = AsyncValue()
    seen = []

    def bad() -> None:
        raise RuntimeError("continuation bug")

    v.and_then(lambda: seen.append("first"))
    v.and_then(bad)
    v.and_then(lambda: seen.append("last"))
    with caplog.at_level(logging.ERROR, logger="eagerrt"):
        v.set_value(1)  # does not raise into the producer
    assert seen == ["first", "last"]
    assert any("continuation" in r.getMessage() for r in caplog.records)


def test_wait_times_out_then_succeeds() -> None:
    v = AsyncValue()
    assert v.wait(0.01) is False
    assert not v.is_available()
    release = threading.Event()

    def complete() -> None:
        release.wait(10)
        v.set_value("x")

    t = threading.Thread(target=complete)
    t.start()
    assert v.wait(0) is False
    release.set()
    assert v.wait(10) is True
    assert v.value == "x"
    assert v.wait(0) is True  # available: no waiting at all
    t.join(10)


def test_wait_returns_true_for_error() -> None:
    v = AsyncValue()
    threading.Thread(target=v.set_error, args=(ValueError("e"),)).start()
    assert v.wait(10) is True
    assert v.is_error()


# -- races ---------------------------------------------------------------------------
ROUNDS = 1500


def _race_and_then_against(
    crew: Crew, complete: str, rounds: int = ROUNDS, per_thread: int = 4
) -> None:
    """Seven threads add continuations while the eighth completes the value."""
    for rnd in range(rounds):
        v = AsyncValue()
        calls: list[tuple[int, int, bool]] = []

        def adder(tid: int, v: AsyncValue = v, calls: list = calls) -> None:
            for k in range(per_thread):
                v.and_then(lambda k=k: calls.append((tid, k, v.is_available())))

        def completer(v: AsyncValue = v, rnd: int = rnd) -> None:
            if complete == "value":
                v.set_value(rnd)
            else:
                v.set_error(ValueError(rnd))

        jobs = [lambda tid=tid: adder(tid) for tid in range(crew.n - 1)] + [completer]
        crew.round(jobs)
        expected = {(tid, k) for tid in range(crew.n - 1) for k in range(per_thread)}
        counts = collections.Counter((tid, k) for tid, k, _ in calls)
        assert set(counts) == expected, f"round {rnd}: lost {expected - set(counts)}"
        assert max(counts.values()) == 1, f"round {rnd}: ran twice"
        assert all(available for _, _, available in calls), f"round {rnd}: ran early"
        if complete == "value":
            assert v.value == rnd
        else:
            assert v.error.args == (rnd,)


def test_race_and_then_vs_set_value(crew: Crew, busy_switching: None) -> None:
    _race_and_then_against(crew, "value")


def test_race_and_then_vs_set_error(crew: Crew, busy_switching: None) -> None:
    _race_and_then_against(crew, "error")


def test_race_between_completers_exactly_one_wins(crew: Crew, busy_switching: None) -> None:
    for rnd in range(ROUNDS // 2):
        v = AsyncValue()
        outcomes: list[str] = []
        calls: list[object] = []
        v.and_then(lambda v=v, calls=calls: calls.append(v.state))

        def complete(tid: int, v: AsyncValue = v, outcomes: list = outcomes) -> None:
            try:
                if tid % 2:
                    v.set_error(ValueError(tid))
                else:
                    v.set_value(tid)
            except AsyncValueStateError:
                outcomes.append("lost")
            else:
                outcomes.append("won")

        crew.round([lambda tid=tid: complete(tid) for tid in range(crew.n)])
        assert sorted(outcomes) == ["lost"] * (crew.n - 1) + ["won"], f"round {rnd}"
        assert calls == [v.state] and v.state in ("ready", "error")


def test_race_run_when_ready_values_completed_by_many_threads(
    crew: Crew, busy_switching: None
) -> None:
    for rnd in range(ROUNDS // 2):
        values = [AsyncValue() for _ in range(crew.n)]
        if rnd % 3 == 0:
            values[0].set_value(0)  # some inputs already available
        calls: list[list[int]] = []

        def on_all(values: list = values, calls: list = calls) -> None:
            calls.append([v.value for v in values])  # every one must be ready here

        def complete(tid: int, values: list = values) -> None:
            if values[tid].is_available():
                return
            values[tid].set_value(tid)

        registered = threading.Event()

        def register_then_complete(values: list = values, on_all=on_all, reg=registered) -> None:
            run_when_ready(values, on_all)
            reg.set()

        jobs = [lambda tid=tid: complete(tid) for tid in range(crew.n)]
        # The registering thread races the completers too.
        jobs[-1] = lambda: (register_then_complete(), complete(crew.n - 1))
        crew.round(jobs)
        assert registered.is_set()
        assert calls == [list(range(crew.n))], f"round {rnd}: {calls}"


def test_run_when_ready_with_errors_and_duplicates() -> None:
    a, b = AsyncValue(), AsyncValue()
    calls = []
    run_when_ready([a, b, a], lambda: calls.append((a.state, b.state)))
    a.set_error(ValueError("a"))
    assert calls == []
    b.set_value(1)
    assert calls == [("error", "ready")]
    run_when_ready([], lambda: calls.append("empty"))
    assert calls[-1] == "empty"
    run_when_ready([a, b], lambda: calls.append("all done"))
    assert calls[-1] == "all done"
    assert len(calls) == 3


# -- forwarding ----------------------------------------------------------------------
def test_forward_value_before_and_after_source_completes() -> None:
    src = AsyncValue()
    late = IndirectAsyncValue()
    late.forward_to(src)
    assert not late.is_available()
    seen = []
    late.and_then(lambda: seen.append(late.value))
    src.set_value("v")
    assert late.value == "v" and seen == ["v"]

    early = IndirectAsyncValue()
    early.forward_to(src)  # source already ready
    assert early.value == "v"


def test_forward_error() -> None:
    src = AsyncValue()
    ind = IndirectAsyncValue()
    ind.forward_to(src)
    err = KeyError("gone")
    src.set_error(err)
    assert ind.is_error() and ind.error is err
    again = IndirectAsyncValue()
    again.forward_to(src)
    assert again.error is err


def test_forward_to_self_is_refused() -> None:
    ind = IndirectAsyncValue()
    with pytest.raises(AsyncValueStateError):
        ind.forward_to(ind)
    assert not ind.is_available()


def test_forward_from_another_thread() -> None:
    src = AsyncValue()
    ind = IndirectAsyncValue()
    ind.forward_to(src)
    threading.Thread(target=src.set_value, args=(5,)).start()
    assert ind.wait(10) and ind.value == 5


# -- deep chains: the trampoline keeps the stack flat --------------------------------
CHAIN = 100_000


def test_long_chain_of_continuations_does_not_overflow() -> None:
    values = [AsyncValue() for _ in range(CHAIN + 1)]
    depths: list[int] = []

    def frame_depth() -> int:
        f, n = sys._getframe(), 0
        while f is not None:
            f, n = f.f_back, n + 1
        return n

    for i in range(CHAIN):
        a, b = values[i], values[i + 1]

        def step(a: AsyncValue = a, b: AsyncValue = b, i: int = i) -> None:
            if i % 1000 == 0:
                depths.append(frame_depth())
            b.set_value(a.value + 1)

        a.and_then(step)
    base = frame_depth()
    values[0].set_value(0)
    assert values[-1].value == CHAIN
    # Nesting is bounded by the inline depth, not by the chain's length.
    assert max(depths) - base < 10 * MAX_INLINE_DEPTH


def test_long_forwarding_chain_does_not_overflow() -> None:
    src = AsyncValue()
    chain = [IndirectAsyncValue() for _ in range(CHAIN)]
    chain[0].forward_to(src)
    for prev, nxt in itertools.pairwise(chain):
        nxt.forward_to(prev)
    err = ValueError("root")
    src.set_error(err)
    assert all(v.is_error() for v in chain)
    assert chain[-1].error is err


def test_long_chain_completed_on_another_thread() -> None:
    values = [AsyncValue() for _ in range(CHAIN + 1)]
    for a, b in itertools.pairwise(values):
        a.and_then(lambda a=a, b=b: b.set_value(a.value + 1))
    t = threading.Thread(target=values[0].set_value, args=(0,))
    t.start()
    t.join(30)
    assert values[-1].wait(10) and values[-1].value == CHAIN


def test_long_chain_of_dependent_ops_on_a_pending_root(gate) -> None:
    g = gate()
    root = g(np.zeros(3))
    assert not root.is_ready()
    x = root
    for _ in range(CHAIN):
        x = x + 1
    assert not x.is_ready()
    g.open()  # the whole chain now runs on the worker that completes the root
    out = x.numpy(timeout=60)
    np.testing.assert_array_equal(out, np.full(3, float(CHAIN)))
    assert x.shape == (3,) and x.dtype == np.float64


def test_long_chain_of_ops_with_failing_root_propagates() -> None:
    with ert.config.override(inline_threshold_ns=0):
        root = ert.take(ert.arange(5), ert.asarray([9]))
    x = root
    for _ in range(20_000):
        x = x + 1
    with pytest.raises(ert.KernelError, match="take"):
        x.numpy(timeout=60)
    with contextlib.suppress(ert.KernelError):
        root.numpy()


def test_blocking_read_inside_a_continuation_works_at_every_depth() -> None:
    """A continuation may read a tensor (here of a heavy op it launches) with ``numpy()``.

    The read blocks this thread until a worker has done the op, so the op's dispatch
    must not be parked on this thread's trampoline, which only drains after the
    continuation returns. Checked at every nesting depth up to past the limit.
    """
    big = ert.asarray(np.ones(4))
    depth_limit = MAX_INLINE_DEPTH + 12
    read: dict[int, object] = {}
    values = [AsyncValue() for _ in range(depth_limit + 1)]
    for k in range(depth_limit):

        def step(k: int = k, nxt: AsyncValue = values[k + 1]) -> None:
            try:
                read[k] = float(_heavy_copy(big).numpy(timeout=2)[0])
            except ert.WaitTimeoutError:
                read[k] = "timed out"
            nxt.set_value(None)

        values[k].and_then(step)
    values[0].set_value(None)
    assert values[-1].is_available()
    stuck = {k: v for k, v in read.items() if v != 1.0}
    assert len(read) == depth_limit
    assert stuck == {}, f"blocking reads timed out at continuation depths {sorted(stuck)}"
