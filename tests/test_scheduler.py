"""The host scheduler: inline vs offloaded vs parked, sync mode, stats, synchronize()."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import eagerrt as ert

HUGE_COST = 1e15

# -- ops that record the thread their kernel ran on ----------------------------------
_ran_on: list[str] = []
_ran_lock = threading.Lock()


def _record_kernel(*xs: np.ndarray) -> np.ndarray:
    with _ran_lock:
        _ran_on.append(threading.current_thread().name)
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


def _same_as_first(*xs: ert.Tensor, **static: object) -> tuple:
    return xs[0].shape, xs[0].dtype


cheap_record = ert.define_op("sched_cheap_record", rule=_same_as_first)
cheap_record.register_kernel("generic", _record_kernel)
heavy_record = ert.define_op(
    "sched_heavy_record", rule=_same_as_first, cost=lambda *a, **k: HUGE_COST
)
heavy_record.register_kernel("generic", _record_kernel)

# Two heavy branches that each wait for the other: they can only both finish if they
# run at the same time on two different worker threads.
_rendezvous_names: list[str] = []
rendezvous = ert.define_op("sched_rendezvous", rule=_same_as_first, cost=lambda *a, **k: HUGE_COST)


@rendezvous.kernel("cpu")
def _rendezvous_kernel(x: np.ndarray, *, barrier: threading.Barrier) -> np.ndarray:
    _rendezvous_names.append(threading.current_thread().name)
    barrier.wait()
    return x + 1


@pytest.fixture
def ran_on() -> Iterator[list[str]]:
    with _ran_lock:
        _ran_on.clear()
    yield _ran_on
    with _ran_lock:
        _ran_on.clear()


def _delta(before: ert.Stats, after: ert.Stats) -> dict[str, int]:
    return {
        "inline": after.ops_inline - before.ops_inline,
        "offloaded": after.ops_offloaded - before.ops_offloaded,
        "parked": after.ops_parked - before.ops_parked,
    }


# -- inline, offloaded, parked -------------------------------------------------------
def test_cheap_op_with_ready_inputs_runs_inline_at_call(ran_on: list[str]) -> None:
    x = ert.asarray(np.arange(4.0))
    before = ert.stats()
    y = ert.exp(x)
    assert y.is_ready()  # before anything else happened
    z = cheap_record(y, x)
    assert z.is_ready()
    assert _delta(before, ert.stats()) == {"inline": 2, "offloaded": 0, "parked": 0}
    assert ran_on == [threading.current_thread().name]
    np.testing.assert_allclose(z.numpy(), np.exp(np.arange(4.0)) + np.arange(4.0))


def test_threshold_zero_offloads_everything_and_matches_numpy(ran_on: list[str]) -> None:
    data = np.linspace(-2.0, 2.0, 12).reshape(3, 4)
    x = ert.asarray(data)
    default_threshold = ert.config.inline_threshold_ns
    with ert.config.override(inline_threshold_ns=0):
        assert ert.config.inline_threshold_ns == 0
        steps = [
            lambda: ert.tanh(x),
            lambda: results[-1] * 2 + 1,  # two ops, the second parked or offloaded
            lambda: cheap_record(results[-1]),
            lambda: results[-1] @ ert.asarray(data.T),
            lambda: results[-1].sum(axis=0),
        ]
        results: list[ert.Tensor] = []
        for step in steps:
            before = ert.stats()
            results.append(step())
            # Inputs were ready, so each op went to the workers at its call.
            assert _delta(before, ert.stats())["inline"] == 0
            assert _delta(before, ert.stats())["offloaded"] >= 1
            assert results[-1].wait(10)
    assert ert.config.inline_threshold_ns == default_threshold  # restored on exit
    y = np.tanh(data) * 2 + 1
    np.testing.assert_allclose(results[1].numpy(), y)
    np.testing.assert_allclose(results[2].numpy(), y)
    np.testing.assert_allclose(results[3].numpy(), y @ data.T)
    np.testing.assert_allclose(results[4].numpy(), (y @ data.T).sum(axis=0))
    assert len(ran_on) == 1 and ran_on[0].startswith("eagerrt-cpu")


def test_expensive_op_goes_to_workers_at_default_threshold(ran_on: list[str]) -> None:
    # A matmul the cost model puts at ten times the inline threshold (or more).
    flops_needed = 10 * ert.config.inline_threshold_ns / ert.config.ns_per_flop
    n = min(1500, max(64, math.ceil((flops_needed / 2) ** (1 / 3))))
    a = np.random.default_rng(0).standard_normal((n, n))
    before = ert.stats()
    product = ert.asarray(a) @ ert.asarray(a)
    assert _delta(before, ert.stats())["offloaded"] == 1
    np.testing.assert_allclose(product.numpy(timeout=30), a @ a)
    heavy = heavy_record(ert.asarray(a))
    heavy.numpy(timeout=10)
    assert len(ran_on) == 1 and ran_on[0].startswith("eagerrt-cpu-")


def test_inline_cache_respects_a_threshold_change() -> None:
    x = ert.asarray(np.ones(8))
    assert (x + x).is_ready()  # primes the fast path's cache for this signature
    before = ert.stats()
    with ert.config.override(inline_threshold_ns=0):
        y = x + x
    assert _delta(before, ert.stats()) == {"inline": 0, "offloaded": 1, "parked": 0}
    np.testing.assert_array_equal(y.numpy(timeout=10), np.full(8, 2.0))
    assert (x + x).is_ready()


def test_parked_op_runs_when_its_input_completes(gate, ran_on: list[str]) -> None:
    g = gate()
    root = g(np.arange(3.0))
    before = ert.stats()
    dep = cheap_record(root)
    dep2 = dep * 2
    assert not dep.is_ready() and not dep2.is_ready()
    assert _delta(before, ert.stats())["parked"] == 2
    assert ert.stats().pending_values >= 3
    assert ran_on == []  # nothing ran yet
    g.open()
    np.testing.assert_array_equal(dep2.numpy(timeout=10), np.arange(3.0) * 2)
    # A cheap parked op runs inline on the thread that completed its input.
    assert len(ran_on) == 1 and ran_on[0].startswith("eagerrt-cpu")


def test_parked_op_waits_for_its_last_input(gate, ran_on: list[str]) -> None:
    g1, g2 = gate(), gate()
    a, b = g1(np.ones(2)), g2(np.full(2, 10.0))
    c = cheap_record(a, b)
    g1.open()
    assert a.wait(10)
    assert not c.is_ready() and ran_on == []  # b is still pending
    g2.open()
    np.testing.assert_array_equal(c.numpy(timeout=10), [11.0, 11.0])
    assert ran_on == [ran_on[0]] and ran_on[0].startswith("eagerrt-cpu")


def test_parked_heavy_op_is_offloaded_when_inputs_complete(manual_device, ran_on) -> None:
    with ert.config.override(inline_threshold_ns=0):
        root = ert.asarray(np.ones(3), device=manual_device) + 1
    heavy = heavy_record(root)
    assert not heavy.is_ready()
    assert manual_device.run_one()  # runs root's op; heavy is then queued, not run
    assert root.is_ready() and not heavy.is_ready() and ran_on == []
    assert manual_device.run_one()
    assert not manual_device.run_one()
    np.testing.assert_array_equal(heavy.numpy(timeout=0), [2.0, 2.0, 2.0])
    assert ran_on == [threading.current_thread().name]


def test_two_independent_heavy_branches_run_on_workers_concurrently() -> None:
    workers = ert.devices.get_device("cpu").executor
    assert workers.size >= 1
    _rendezvous_names.clear()
    # With two or more workers, each branch waits for the other: they only finish
    # if they run side by side.
    parties = 2 if workers.size >= 2 else 1
    barrier = threading.Barrier(parties, timeout=10)
    x = ert.asarray(np.zeros(4))
    left = rendezvous(x, barrier=barrier)
    right = rendezvous(x * 2, barrier=barrier)
    np.testing.assert_array_equal(left.numpy(timeout=20), np.ones(4))
    np.testing.assert_array_equal(right.numpy(timeout=20), np.ones(4))
    assert len(_rendezvous_names) == 2
    assert all(name.startswith("eagerrt-cpu") for name in _rendezvous_names)
    if parties == 2:
        assert len(set(_rendezvous_names)) == 2


# -- sync mode -----------------------------------------------------------------------
def _workload(data: np.ndarray) -> list[ert.Tensor]:
    x = ert.asarray(data)
    h = ert.relu(x @ x.T - 1.0)
    return [h, ert.exp(-h).sum(axis=1), ert.softmax(h, axis=-1), ert.astype(x * 3, "float32")]


def test_sync_mode_makes_every_op_ready_at_call_with_identical_results(gate) -> None:
    data = np.random.default_rng(1).standard_normal((200, 150))
    eager = [t.numpy(timeout=30) for t in _workload(data)]
    g = gate()
    pending_root = g(np.arange(3.0))
    before = ert.stats()
    with ert.sync_mode():
        assert ert.config.sync_active is True
        sync_results = _workload(data)
        assert all(t.is_ready() for t in sync_results)
        with ert.config.override(inline_threshold_ns=0):
            forced = ert.exp(ert.asarray(data))
        assert forced.is_ready()
        threading.Thread(target=g.open).start()
        dependent = pending_root + 1  # waits for its input right here
        assert dependent.is_ready()
    assert ert.config.sync_active is False
    assert _delta(before, ert.stats())["offloaded"] == 0
    for got, want in zip(sync_results, eager, strict=True):
        got_np = got.numpy(timeout=0)
        assert got_np.dtype == want.dtype
        np.testing.assert_array_equal(got_np, want)
    np.testing.assert_array_equal(dependent.numpy(timeout=0), np.arange(3.0) + 1)
    # Outside the block, heavy work is offloaded again.
    before = ert.stats()
    _ = ert.asarray(data) @ ert.asarray(data.T)
    assert _delta(before, ert.stats())["offloaded"] == 1


def test_sync_mode_covers_device_transfers_of_pending_tensors(gate, manual_device) -> None:
    g = gate()
    pending = g(np.arange(3.0))
    with ert.sync_mode():
        opener = threading.Timer(0.05, g.open)
        opener.start()
        moved = pending.to(manual_device)  # like any op: waits for its input here
        assert moved.is_ready(), "sync mode: the transfer should be done at the call"
    opener.join()
    assert manual_device.run_all() == 0  # nothing was left for the device's executor
    np.testing.assert_array_equal(moved.numpy(timeout=10), np.arange(3.0))


def test_sync_mode_kernel_failure_is_still_read_time(clean_errors) -> None:
    with ert.sync_mode():
        bad = ert.take(ert.arange(3), ert.asarray([5]))  # does not raise at the call
        assert bad.is_ready()
    with pytest.raises(ert.KernelError, match="take"):
        bad.numpy()


_SUBPROCESS_PROBE = textwrap.dedent(
    """
    import json, threading
    import numpy as np
    import eagerrt as ert
    a = ert.asarray(np.ones((400, 400)))
    heavy = a @ a
    heavy_ready = heavy.is_ready()
    with ert.config.override(inline_threshold_ns=0):
        forced = ert.exp(a)
        forced_ready = forced.is_ready()
    s = ert.stats()
    ert.synchronize()
    print(json.dumps({
        "sync": ert.config.sync,
        "heavy_ready": heavy_ready,
        "forced_ready": forced_ready,
        "offloaded": s.ops_offloaded,
        "inline": s.ops_inline,
        "value": float(heavy.numpy()[0, 0]),
        "workers": sorted(t.name for t in threading.enumerate() if t.name.startswith("eagerrt")),
    }))
    """
)


def _run_probe(**env_changes: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGERRT_")}
    env.update(env_changes)
    proc = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS_PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_env_eagerrt_sync_runs_everything_inline() -> None:
    synced = _run_probe(EAGERRT_SYNC="1")
    assert synced["sync"] is True
    assert synced["heavy_ready"] and synced["forced_ready"]
    assert synced["offloaded"] == 0 and synced["inline"] >= 2
    assert synced["value"] == 400.0
    assert synced["workers"] == []  # no worker thread was ever needed


def test_without_env_sync_heavy_work_is_offloaded() -> None:
    plain = _run_probe(EAGERRT_SYNC="0", EAGERRT_NUM_THREADS="3")
    assert plain["sync"] is False
    assert plain["offloaded"] == 2
    assert plain["value"] == 400.0
    assert plain["workers"] == ["eagerrt-cpu-0", "eagerrt-cpu-1", "eagerrt-cpu-2"]


# -- stats ---------------------------------------------------------------------------
def test_stats_track_queue_depth_and_pending_values(gate, eventually) -> None:
    assert eventually(lambda: ert.stats().queue_depth == 0 and ert.stats().pending_values == 0)
    g = gate()
    t = g()
    dependent = t + 1
    s = ert.stats()
    assert isinstance(s, ert.Stats)
    assert s.queue_depth >= 1  # the gated op is running on a worker
    assert s.pending_values >= 2  # it and its parked dependent
    g.open()
    assert dependent.wait(10)
    assert eventually(lambda: ert.stats().queue_depth == 0 and ert.stats().pending_values == 0)


def test_a_task_that_completed_its_result_no_longer_counts_as_busy(gate, eventually) -> None:
    # Completing a result wakes its waiters (the event loop may start the next call
    # at once) while the worker still runs what the completion set off. The next
    # call's kernels must see the cores free, not taken by a finished task.
    from eagerrt.devices.cpu import cpu

    assert eventually(lambda: cpu.busy_besides_caller() == 0)
    g = gate()
    t = g()
    in_callback, leave = threading.Event(), threading.Event()

    def after_completion() -> None:  # runs on the worker, right after completion
        in_callback.set()
        leave.wait(10)

    t.and_then(after_completion)
    assert cpu.busy_besides_caller() == 1  # the gated kernel is running
    g.open()
    try:
        assert in_callback.wait(10)
        assert cpu.busy_besides_caller() == 0
        assert ert.stats().queue_depth == 0
    finally:
        leave.set()
    # Counted off once, not twice: the pool's count is exact for the next task.
    g2 = gate()
    t2 = g2()
    assert eventually(lambda: cpu.busy_besides_caller() == 1)
    g2.open()
    assert t2.wait(10)
    assert eventually(lambda: cpu.busy_besides_caller() == 0)


def test_stats_count_unobserved_errors(clean_errors) -> None:
    bad = ert.take(ert.arange(5), ert.asarray([7]))
    assert ert.stats().unobserved_errors == 1
    _ = bad + 1  # a dependent shares the failure: still one
    assert ert.stats().unobserved_errors == 1
    with pytest.raises(ert.KernelError):
        bad.numpy()
    assert ert.stats().unobserved_errors == 0


# -- synchronize ---------------------------------------------------------------------
def test_synchronize_waits_for_outstanding_work(gate) -> None:
    g = gate()
    t = g()
    dependent = ert.exp(t)
    opener = threading.Timer(0.05, g.open)
    opener.start()
    ert.synchronize(timeout=10)
    assert t.is_ready() and dependent.is_ready()
    np.testing.assert_allclose(dependent.numpy(timeout=0), np.exp(np.arange(3.0)))
    opener.join()


def test_synchronize_times_out(gate) -> None:
    g = gate()
    t = g()
    with pytest.raises(ert.WaitTimeoutError) as info:
        ert.synchronize(timeout=0.02)
    assert isinstance(info.value, TimeoutError)
    g.open()
    ert.synchronize(timeout=10)
    assert t.is_ready()


def test_synchronize_with_nothing_to_do_returns() -> None:
    ert.synchronize()
    ert.synchronize(timeout=0)


def test_synchronize_raises_an_unobserved_failure_once(clean_errors) -> None:
    with ert.config.override(inline_threshold_ns=0):
        bad = ert.take(ert.arange(5), ert.asarray([7]))
        dependent = bad * 2
    with pytest.raises(ert.KernelError, match="take") as info:
        ert.synchronize(timeout=10)
    assert isinstance(info.value.__cause__, IndexError)
    ert.synchronize(timeout=10)  # not again
    assert ert.stats().unobserved_errors == 0
    # The tensors still hold their failure for anyone who reads them.
    with pytest.raises(ert.KernelError, match="take"):
        dependent.numpy()


def test_synchronize_ignores_failures_already_read(clean_errors) -> None:
    bad = ert.take(ert.arange(5), ert.asarray([7]))
    with pytest.raises(ert.KernelError):
        bad.numpy()
    ert.synchronize(timeout=10)


def test_synchronize_ignores_failure_read_through_a_dependent(clean_errors) -> None:
    with ert.config.override(inline_threshold_ns=0):
        bad = ert.take(ert.arange(5), ert.asarray([7]))
        dependent = ert.exp(bad * 2)
    with pytest.raises(ert.KernelError):
        dependent.numpy(timeout=10)
    ert.synchronize(timeout=10)


def test_synchronize_groups_several_failures(clean_errors) -> None:
    first = ert.take(ert.arange(5), ert.asarray([7]))
    with ert.config.override(inline_threshold_ns=0):
        second = ert.take(ert.arange(3), ert.asarray([-9]))
    assert second.wait(10)
    with pytest.raises(ert.EagerErrorGroup) as info:
        ert.synchronize(timeout=10)
    group = info.value
    assert isinstance(group, ExceptionGroup) and isinstance(group, ert.EagerError)
    assert len(group.exceptions) == 2
    assert all(isinstance(e, ert.KernelError) for e in group.exceptions)
    assert all(isinstance(e.__cause__, IndexError) for e in group.exceptions)
    assert "2" in str(group)
    # Oldest first.
    assert "index 7" in str(group.exceptions[0]) and "-9" in str(group.exceptions[1])
    ert.synchronize(timeout=10)  # both now observed
    del first, second


def test_synchronize_error_group_works_with_except_star(clean_errors) -> None:
    _ = ert.take(ert.arange(2), ert.asarray([4]))
    _ = ert.take(ert.arange(2), ert.asarray([5]))
    caught = []
    try:
        ert.synchronize(timeout=10)
    except* ert.KernelError as eg:
        caught.extend(eg.exceptions)
    assert len(caught) == 2
