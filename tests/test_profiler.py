"""ert.profile(): what ran where and when, as events, a table, a trace, a picture."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from conftest import HUGE_COST
from eagerrt._core import profiling

HERE = str(Path(__file__).resolve())


def _line_of(marker: str) -> int:
    """The line number of the line in this file ending with ``# <marker>``."""
    for number, line in enumerate(Path(HERE).read_text().splitlines(), start=1):
        if line.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(marker)


def _heavy(name: str) -> ert.Op:
    """An op that always goes to a worker; its kernel calls ``hook`` first."""
    op = ert.define_op(
        name,
        rule=lambda x, **static: (x.shape, x.dtype),
        cost=lambda *args, **static: HUGE_COST,
        replace=True,
    )

    @op.kernel()
    def _kernel(x: Any, *, hook: Any = None) -> Any:
        if hook is not None:
            hook()
        return x + 1

    return op


def test_records_eager_ops_with_lines_devices_and_dependencies() -> None:
    x = ert.asarray(np.ones((4, 4), dtype="float32"))
    with ert.profile() as prof:
        y = x @ x  # matmul line
        z = ert.exp(y) + y  # exp line
    events = prof.events
    assert [e.name for e in events] == ["matmul", "exp", "add"]
    matmul, exp, add = events
    assert all(e.kind == "op" and e.device == "cpu" for e in events)
    assert all(e.inline and e.track == threading.current_thread().name for e in events)
    assert all(e.queued_ns <= e.start_ns <= e.end_ns for e in events)
    assert matmul.source is not None and matmul.source.filename == HERE
    assert matmul.source.lineno == _line_of("matmul line")
    assert exp.source is not None and exp.source.lineno == _line_of("exp line")
    assert matmul.inputs == ()  # x was made before the profile
    assert exp.inputs == (matmul.id,)
    assert add.inputs == (exp.id, matmul.id)
    assert len({e.id for e in events}) == 3
    np.testing.assert_allclose(z.numpy(), np.exp(4.0) + 4.0, rtol=1e-6)


def test_fast_path_calls_are_recorded_and_the_fast_path_returns_after() -> None:
    x = ert.asarray(np.ones((4, 4), dtype="float32"))
    w = ert.asarray(np.eye(4, dtype="float32"))
    matmul = ert.get_op("matmul")
    _ = x @ w
    assert matmul._last2 is not None  # warm: `@` would skip Op._call
    with ert.profile() as prof:
        y = x
        for _ in range(10):
            y = y @ w
        assert matmul._last2 is None  # no inline cache while recording
    chain = prof.events
    assert len(chain) == 10
    assert all(b.inputs == (a.id,) for a, b in itertools.pairwise(chain))
    _ = x @ w
    _ = x @ w
    assert matmul._last2 is not None
    assert len(prof.events) == 10  # nothing recorded after the block


def test_worker_ops_record_their_worker_and_wait() -> None:
    heavy = _heavy("profiler_heavy")
    x = ert.asarray(np.arange(3.0))
    with ert.profile() as prof:
        a = heavy(x)
        b = heavy(a)
        c = b * 2  # parked on b, then run inline on b's worker
    assert c.numpy().tolist() == [4.0, 6.0, 8.0]
    first, second, double = prof.events
    assert (first.name, second.name, double.name) == ("profiler_heavy",) * 2 + ("multiply",)
    assert not first.inline and not second.inline
    assert first.track.startswith("eagerrt-cpu-")
    assert second.inputs == (first.id,) and double.inputs == (second.id,)
    assert double.inline and double.track.startswith("eagerrt-cpu-")
    assert second.start_ns >= first.end_ns
    assert second.wait_ns > 0  # queued while its input was computed


def test_leaving_the_block_waits_for_ops_still_running(gate: Any) -> None:
    heavy = _heavy("profiler_heavy_wait")
    g = gate()
    pending = g()
    with ert.profile() as prof:
        result = heavy(pending)
        threading.Timer(0.05, g.open).start()
    assert result.is_ready()
    (event,) = prof.events
    assert event.name == "profiler_heavy_wait" and event.end_ns <= prof.end_ns  # type: ignore[operator]


def test_ops_from_other_threads_are_recorded_on_their_track() -> None:
    x = ert.asarray(np.ones(3))

    def work() -> None:
        (x + 1).numpy()

    with ert.profile() as prof:
        thread = threading.Thread(target=work, name="loader")
        thread.start()
        thread.join()
        (x * 2).numpy()
    tracks = {e.name: e.track for e in prof.events}
    assert tracks == {"add": "loader", "multiply": threading.current_thread().name}


def test_failed_ops_are_marked() -> None:
    bad = ert.define_op("profiler_bad", rule=lambda x: (x.shape, x.dtype), replace=True)

    @bad.kernel()
    def _boom(x: Any) -> Any:
        raise ZeroDivisionError("boom")

    with ert.profile() as prof:
        r = bad(ert.asarray(np.ones(2)))
    (event,) = prof.events
    assert event.failed and event.name == "profiler_bad"
    with pytest.raises(ert.KernelError):
        r.numpy()


def test_profiles_dont_nest_and_are_single_use() -> None:
    with ert.profile() as prof:
        with pytest.raises(ert.UsageError, match="already recording"), ert.profile():
            pass
        _ = ert.asarray(np.ones(2)) + 1
    assert [e.name for e in prof.events] == ["add"]
    with pytest.raises(ert.UsageError, match="already used"), prof:
        pass
    assert profiling.active is None
    with ert.profile() as again:  # the failed attempts left nothing active
        pass
    assert again.events == []


def test_profile_in_async_code(anyio_backend: Any) -> None:
    heavy = _heavy("profiler_heavy_async")

    async def main() -> list[str]:
        x = ert.asarray(np.ones(3))
        with ert.profile() as prof:
            y = await (heavy(x) + 1)
        assert y.tolist() == [3.0, 3.0, 3.0]
        return [e.name for e in prof.events]

    import anyio

    backend, options = (anyio_backend, {}) if isinstance(anyio_backend, str) else anyio_backend
    assert anyio.run(main, backend=backend, backend_options=options) == [
        "profiler_heavy_async",
        "add",
    ]


def test_graph_calls_record_a_call_and_its_steps() -> None:
    x = ert.asarray(np.arange(6.0).reshape(2, 3))

    @ert.function
    def f(x: ert.Tensor) -> ert.Tensor:
        return ert.exp(x) * 2 + 1  # graph body line

    expected = f(x).numpy()
    with ert.profile() as prof:
        y = f(x)  # graph call line
        z = y - 1
        got = z.numpy()
    np.testing.assert_allclose(got, expected - 1)
    calls = [e for e in prof.events if e.kind == "graph"]
    steps = [e for e in prof.events if e.kind == "step"]
    (call,) = calls
    assert call.name.endswith(".f")  # the qualified name
    assert call.source is not None and call.source.lineno == _line_of("graph call line")
    assert steps and all(s.parent == call.id for s in steps)
    assert all(call.start_ns <= s.start_ns <= s.end_ns <= call.end_ns for s in steps)
    assert any(
        s.source is not None and s.source.lineno == _line_of("graph body line") for s in steps
    )
    (after,) = [e for e in prof.events if e.name == "subtract"]
    assert after.inputs == (call.id,)


def test_a_graph_with_a_fused_matmul_epilogue_profiles_step_by_step() -> None:
    # relu(x @ W + b) is one fused node whose inputs don't broadcast to its
    # output: run step by step, its allocating kernel must use the node's shape.
    rng = np.random.default_rng(0)
    w = ert.asarray(rng.standard_normal((128, 64)).astype(np.float32))
    b = ert.asarray(rng.standard_normal(64).astype(np.float32))
    x = ert.asarray(rng.standard_normal((2, 128)).astype(np.float32))

    @ert.function
    def layer(x: ert.Tensor) -> ert.Tensor:
        return ert.relu(x @ w + b)

    expected = layer(x).numpy()
    assert "fused[matmul,add,relu]" in layer.explain(x)
    with ert.profile() as prof:
        got = layer(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert [e.name for e in prof.events if e.kind == "step"] == ["fused[matmul,add,relu]"]


def test_a_graph_spread_over_workers_records_steps_on_each() -> None:
    rng = np.random.default_rng(0)
    w = ert.asarray(rng.standard_normal((200, 200)).astype(np.float32) * 0.01)
    x = ert.asarray(rng.standard_normal((200, 200)).astype(np.float32))

    @ert.function
    def branches(x: ert.Tensor) -> ert.Tensor:
        return ert.tanh(x @ w) + ert.tanh(x @ w.T)

    with ert.config.override(graph_inline_threshold_ns=0, inline_threshold_ns=0):
        expected = branches(x).numpy()
        plan = branches.compiled_for(x).plan
        with ert.profile() as prof:
            got = branches(x).numpy()
    # float32 products of 200 terms, summed by MKL in an order that may change
    # between calls: values near 0 move by ~1e-7.
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    (call,) = [e for e in prof.events if e.kind == "graph"]
    steps = [e for e in prof.events if e.kind == "step"]
    assert Counter(s.name for s in steps)["matmul"] == 2
    assert all(s.parent == call.id for s in steps)
    assert len(plan.segments) > 1  # so the steps ran as tasks, on workers
    assert not any(s.inline for s in steps)
    assert {s.track for s in steps} <= {t.name for t in ert.get_device("cpu").executor.threads()}  # type: ignore[attr-defined]
    add = next(s for s in steps if s.name == "add")
    tanhs = [s.id for s in steps if s.name == "tanh"]
    assert sorted(add.inputs) == sorted(tanhs)


def test_summary_table() -> None:
    x = ert.asarray(np.eye(4))
    with ert.profile() as prof:
        for _ in range(3):
            x = x @ x
        _ = ert.exp(x)
    text = prof.summary()
    assert str(prof) == text
    header, rule, *rows, footer = text.splitlines()
    assert header.split()[:3] == ["op", "kind", "count"] and "% inline" in header
    assert set(rule) == {"-"}
    by_name = {row.split()[0]: row.split() for row in rows}
    assert by_name["matmul"][2] == "3" and by_name["exp"][2] == "1"
    assert by_name["matmul"][-1] == "100"  # all inline
    totals = [float(row.split()[3]) for row in rows]
    assert totals == sorted(totals, reverse=True)
    assert footer.startswith("4 events on 1 track(s)")


# -- Chrome trace -------------------------------------------------------------------
def _check_trace_format(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace event format's required fields, per phase."""
    events = trace["traceEvents"]
    assert isinstance(events, list)
    for e in events:
        assert isinstance(e["name"], str) and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int)
        ph = e["ph"]
        if ph == "M":
            if e["name"] in ("process_name", "thread_name"):
                assert isinstance(e["args"]["name"], str)
            else:
                assert e["name"] in ("process_sort_index", "thread_sort_index")
                assert isinstance(e["args"]["sort_index"], int)
        elif ph == "X":
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["dur"] >= 0
            assert isinstance(e["cat"], str) and isinstance(e["args"], dict)
        elif ph in ("s", "f"):
            assert isinstance(e["id"], int) and isinstance(e["ts"], float)
            assert isinstance(e["cat"], str)
        else:
            raise AssertionError(f"unexpected phase {ph!r}")
    return events


def test_chrome_trace_structure_counts_and_flows(tmp_path: Path) -> None:
    heavy = _heavy("profiler_heavy_trace")
    x = ert.asarray(np.ones(3))
    with ert.profile() as prof:
        a = heavy(x)
        b = a + 1
        c = b * a
        c.numpy()
        profiling.record(
            "copy",
            device="gpu9",
            track="stream 1",
            start_ns=prof.start_ns + 10,
            end_ns=prof.start_ns + 20,
            inputs=[c],
        )
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    events = _check_trace_format(json.loads(path.read_text()))

    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(prof.events) == 4
    processes = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    assert set(processes) == {"cpu", "gpu9"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }
    for s in slices:  # every slice sits on a named track of its device
        assert (s["pid"], s["tid"]) in threads
    copy = next(s for s in slices if s["name"] == "copy")
    assert copy["pid"] == processes["gpu9"] and threads[(copy["pid"], copy["tid"])] == "stream 1"
    heavy_slice = next(s for s in slices if s["name"] == "profiler_heavy_trace")
    assert threads[(heavy_slice["pid"], heavy_slice["tid"])].startswith("eagerrt-cpu-")
    assert heavy_slice["args"]["inline"] is False and "queued_us" in heavy_slice["args"]
    assert heavy_slice["args"]["source"].startswith(f"{HERE}:")

    # Flows: one s/f pair per dependency, from inside the producer to the consumer's start.
    by_event = {s["args"]["event_id"]: s for s in slices}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == finishes.keys()
    expected = {(d, e.id) for e in prof.events for d in e.inputs}
    assert len(expected) == 4  # add<-heavy, multiply<-add, multiply<-heavy, copy<-multiply
    found = set()
    for flow_id, s in starts.items():
        f = finishes[flow_id]
        producer = next(
            p for p in slices if (p["pid"], p["tid"]) == (s["pid"], s["tid"]) and _inside(s, p)
        )
        consumer = next(
            c for c in slices if (c["pid"], c["tid"]) == (f["pid"], f["tid"]) and c["ts"] == f["ts"]
        )
        assert f["bp"] == "e"
        found.add((producer["args"]["event_id"], consumer["args"]["event_id"]))
    assert found == expected
    assert set(by_event) == {e.id for e in prof.events}


def _inside(point: dict[str, Any], s: dict[str, Any]) -> bool:
    return bool(s["ts"] <= point["ts"] <= s["ts"] + s["dur"])


def test_two_independent_heavy_ops_overlap_on_two_worker_tracks(tmp_path: Path) -> None:
    if ert.get_device("cpu").executor.size < 2:  # type: ignore[attr-defined]
        pytest.skip("needs two CPU worker threads")
    heavy = _heavy("profiler_heavy_pair")
    both_running = threading.Barrier(2, timeout=30)  # each waits until the other started
    x = ert.asarray(np.ones(3))
    with ert.profile() as prof:
        a = heavy(x, hook=both_running.wait)
        b = heavy(x, hook=both_running.wait)
    a.numpy(), b.numpy()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    slices = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    first, second = slices
    assert first["tid"] != second["tid"]
    assert first["ts"] < second["ts"] + second["dur"] and second["ts"] < first["ts"] + first["dur"]


# -- plot -------------------------------------------------------------------------
def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    backend = matplotlib.get_backend()
    heavy = _heavy("profiler_heavy_plot")
    x = ert.asarray(np.ones(3))
    with ert.profile() as prof:
        (heavy(x) + ert.exp(x)).numpy()
    path = tmp_path / "timeline.png"
    prof.plot(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert matplotlib.get_backend() == backend  # the user's backend is left alone
    assert "matplotlib.pyplot" not in sys.modules or sys.modules["matplotlib.pyplot"] is not None


def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    with ert.profile() as prof:
        _ = ert.asarray(np.ones(2)) + 1
    with pytest.raises(ert.UsageError, match=r"eagerrt\[plot\]"):
        prof.plot(tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()


def test_record_hook_is_a_no_op_when_off() -> None:
    assert profiling.active is None
    assert profiling.record("x", device="d", track="s", start_ns=0, end_ns=1) is None


def test_sync_mode_ops_are_recorded() -> None:
    heavy = _heavy("profiler_heavy_sync")
    with ert.sync_mode(), ert.profile() as prof:
        heavy(ert.asarray(np.ones(2))).numpy()
    (event,) = prof.events
    assert event.name == "profiler_heavy_sync"


def test_many_threads_at_once_lose_nothing() -> None:
    x = ert.asarray(np.ones(2))

    def work() -> None:
        y = x
        for _ in range(200):
            y = y + 1
        y.numpy()

    with ert.profile() as prof:
        threads = [threading.Thread(target=work, name=f"w{i}") for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert Counter(e.track for e in prof.events) == {f"w{i}": 200 for i in range(4)}
    assert len({e.id for e in prof.events}) == 800


def test_asyncio_tasks_share_one_profile() -> None:
    async def main() -> int:
        x = ert.asarray(np.ones(2))

        async def one() -> None:
            await (x + 1)
            await asyncio.sleep(0)
            await (x * 2)

        with ert.profile() as prof:
            await asyncio.gather(one(), one())
        return len(prof.events)

    assert asyncio.run(main()) == 4


# -- writes ---------------------------------------------------------------------------
def test_writes_are_recorded_with_lines_and_dependencies() -> None:
    t = ert.zeros(4)
    with ert.profile() as prof:
        v = ert.ones(2) * 7  # value line
        t[1:3] = v  # setitem line
        t += 1  # iadd line
        t[t > 2] = 0.0  # masked line
        after = t * 2  # reader line
    assert after.numpy().tolist() == [2.0, 0.0, 0.0, 2.0]
    by_line = {e.source.lineno: e for e in prof.events if e.source is not None}  # type: ignore[union-attr]
    value = by_line[_line_of("value line")]
    setitem = by_line[_line_of("setitem line")]
    assert (setitem.name, setitem.kind, setitem.inline) == ("setitem", "op", True)
    assert setitem.inputs == (value.id,)  # t was made before the profile
    iadd = next(e for e in prof.events if e.name == "__iadd__")
    add = next(e for e in prof.events if e.name == "add")
    assert iadd.source is not None and iadd.source.lineno == _line_of("iadd line")
    assert add.inputs == (setitem.id,)  # t + 1 read the written version
    assert iadd.inputs == (add.id, setitem.id)  # the value written, then the tensor
    masked = [e for e in prof.events if e.source and e.source.lineno == _line_of("masked line")]
    greater, masked_write = masked
    assert greater.name == "greater" and greater.inputs == (iadd.id,)
    assert masked_write.name == "setitem" and masked_write.inputs == (greater.id, iadd.id)
    reader = by_line[_line_of("reader line")]
    assert reader.inputs == (masked_write.id,)


def test_a_write_waiting_for_its_tensor_is_recorded_when_it_runs(gate: Any) -> None:
    heavy = _heavy("profiler_heavy_write")
    g = gate()
    with ert.profile() as prof:
        y = heavy(g())
        y[0] = 5.0  # pending write line
        z = y + 1
        threading.Timer(0.05, g.open).start()
    assert z.is_ready()  # leaving the block waited for the write and its reader
    assert z.numpy().tolist()[0] == 6.0
    heavy_event, write, add = (
        next(e for e in prof.events if e.name == n)
        for n in ("profiler_heavy_write", "setitem", "add")
    )
    assert write.source is not None and write.source.lineno == _line_of("pending write line")
    assert write.inputs == (heavy_event.id,)
    assert write.start_ns >= heavy_event.end_ns and write.wait_ns > 0
    assert add.inputs == (write.id,)


def test_a_failing_write_is_marked() -> None:
    t = ert.zeros(3)
    with ert.profile() as prof, pytest.raises(ert.OutOfBoundsError):
        t[ert.asarray(np.array([5]))] = 1.0
    (write,) = [e for e in prof.events if e.name == "setitem"]
    assert write.failed


# -- control flow ---------------------------------------------------------------------
def test_eager_cond_is_one_event_naming_its_branch_with_its_steps() -> None:
    x = ert.asarray(np.array([3.0, 4.0]))

    def scale(v: ert.Tensor) -> ert.Tensor:
        return v / ert.linalg.vector_norm(v)  # branch line

    with ert.profile() as prof:
        pred = ert.linalg.vector_norm(x) > 1
        y = ert.cond(pred, scale, lambda v: v, x)  # cond line
        z = y * 2
        w = ert.cond(~pred, scale, lambda v: v + 0, x)
    assert z.numpy().tolist() == [1.2, 1.6] and w.numpy().tolist() == [3.0, 4.0]
    first, second = (e for e in prof.events if e.name == "cond")
    greater = next(e for e in prof.events if e.name == "greater")
    assert first.kind == "op" and first.inline and first.inputs == (greater.id,)
    assert first.source is not None and first.source.lineno == _line_of("cond line")
    assert first.args == {"branch": "true", "function": "scale"}
    assert second.args == {"branch": "false", "function": "<lambda>"}
    steps = [e for e in prof.events if e.parent == first.id]
    assert [s.name for s in steps] == ["linalg.vector_norm", "divide"]
    assert all(s.kind == "step" and first.start_ns <= s.start_ns <= first.end_ns for s in steps)
    assert steps[1].inputs == (steps[0].id,)
    assert steps[1].source is not None and steps[1].source.lineno == _line_of("branch line")
    (multiply,) = [e for e in prof.events if e.name == "multiply"]
    assert multiply.inputs == (first.id,)


def test_eager_while_loop_counts_its_iterations_even_on_a_worker(gate: Any) -> None:
    heavy = _heavy("profiler_heavy_loop")
    g = gate()
    with ert.profile() as prof:
        start = heavy(g())  # the loop parks on it, then runs as a task
        n, _ = ert.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * 2), (0, start))
        threading.Timer(0.05, g.open).start()
    assert int(n) == 4
    loop = next(e for e in prof.events if e.name == "while_loop")
    made = next(e for e in prof.events if e.name == "profiler_heavy_loop")
    assert loop.args == {"iterations": 4} and not loop.failed
    assert loop.inputs == (made.id,) and loop.start_ns >= made.end_ns and loop.wait_ns > 0
    steps = Counter(e.name for e in prof.events if e.parent == loop.id)
    assert steps == {"less": 5, "add": 4, "multiply": 4}
    trace = prof.chrome_trace()["traceEvents"]
    (slice_,) = [e for e in trace if e.get("name") == "while_loop" and e["ph"] == "X"]
    assert slice_["args"]["iterations"] == 4


# -- stream devices -------------------------------------------------------------------
def test_stream_device_ops_show_on_their_streams_with_dependencies(tmp_path: Path) -> None:
    from eagerrt.devices.stream_threads import ThreadStreamDevice

    dev = ThreadStreamDevice("teststream:7", compute_streams=1)
    try:
        x = ert.asarray(np.ones((4, 4), dtype="float32"), device=dev)
        x.numpy()  # uploaded before the profile
        with ert.profile() as prof:
            y = (x @ x) + 1  # stream line
            got = y.numpy()
        assert got.tolist() == [[5.0] * 4] * 4
        on_dev = [e for e in prof.events if e.device == "teststream:7"]
        matmul, add = (next(e for e in on_dev if e.name == n) for n in ("matmul", "add"))
        assert matmul.track.startswith("compute") and add.track == matmul.track
        assert add.inputs == (matmul.id,) and matmul.inputs == ()
        assert not matmul.inline and matmul.queued_ns <= matmul.start_ns
        assert add.start_ns >= matmul.end_ns  # one stream: in order
        for e in (matmul, add):
            assert e.source is not None and e.source.lineno == _line_of("stream line")
        download = next(e for e in on_dev if e.name == "download")
        assert download.track.startswith("d2h")
        trace = _check_trace_format(prof.chrome_trace())
        processes = {e["args"]["name"]: e["pid"] for e in trace if e["name"] == "process_name"}
        threads = {
            e["args"]["name"]: (e["pid"], e["tid"]) for e in trace if e["name"] == "thread_name"
        }
        stream_track = threads[f"stream {matmul.track}"]
        assert stream_track[0] == processes["teststream:7"]
        flows = [e for e in trace if e["ph"] in ("s", "f")]
        assert [(f["ph"], (f["pid"], f["tid"])) for f in flows] == [
            ("s", stream_track),
            ("f", stream_track),
        ]
    finally:
        dev.shutdown()


def test_a_stream_device_that_reports_nothing_still_shows_its_ops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    from eagerrt.devices import stream_threads

    # A device that never asks for the launch (so never reports its work).
    silent = types.SimpleNamespace(launching=lambda: None, record=profiling.record)
    monkeypatch.setattr(stream_threads, "profiling", silent)
    dev = stream_threads.ThreadStreamDevice("teststream:8", compute_streams=1)
    try:
        x = ert.asarray(np.ones(3), device=dev)
        with ert.profile() as prof:
            y = (x * 2) - 1  # silent line
            assert y.numpy().tolist() == [1.0] * 3
        multiply, subtract = (e for e in prof.events if e.name in ("multiply", "subtract"))
        assert multiply.track == subtract.track == threading.current_thread().name
        assert subtract.inputs == (multiply.id,) and multiply.inline
        assert multiply.source is not None and multiply.source.lineno == _line_of("silent line")
    finally:
        dev.shutdown()


# -- a profile stopping on another thread while a call reads it --------------------------
def _stopped_right_after_reading_active(prof: Any, function: str, call: Any) -> Any:
    """``call()``, with ``prof`` stopped (as another thread leaving its block
    would) at the first line ``function`` runs after a line reading
    ``profiling.active``: a call must read the active profile once and keep it."""
    import linecache

    stopped: list[bool] = []
    previous: dict[int, str] = {}  # frame id -> the last line it ran

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            if not stopped and "profiling.active" in previous.get(id(frame), ""):
                profiling.stop(prof)
                stopped.append(True)
            previous[id(frame)] = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_name == function else None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = call()
    finally:
        sys.settrace(old)
    assert stopped, f"{function} never read profiling.active"
    return out


def test_a_compiled_call_survives_the_profile_stopping_on_another_thread() -> None:
    @ert.function
    def f(x: ert.Tensor) -> ert.Tensor:
        return x * 2 + 1

    x = ert.ones(3)
    f(x).numpy()  # traced and compiled before the profile
    with ert.profile() as prof:
        y = _stopped_right_after_reading_active(prof, "run_plan", lambda: f(x))
    assert y.numpy().tolist() == [3.0, 3.0, 3.0]


def test_an_inline_write_survives_the_profile_stopping_on_another_thread() -> None:
    t = ert.zeros(3)
    with ert.profile() as prof:

        def write() -> None:
            t[0] = 5.0

        _stopped_right_after_reading_active(prof, "_write", write)
    assert t.numpy().tolist() == [5.0, 0.0, 0.0]


def test_a_parked_write_survives_the_profile_stopping_on_another_thread(gate: Any) -> None:
    heavy = _heavy("profiler_heavy_stopped_write")
    g = gate()
    with ert.profile() as prof:
        y = heavy(g())

        def write() -> None:
            y[0] = 5.0

        _stopped_right_after_reading_active(prof, "_write", write)
        g.open()
    assert y.numpy().tolist()[0] == 5.0
    y[1] = 6.0  # nothing was left reading y: a later write goes through
    assert y.numpy().tolist()[:2] == [5.0, 6.0]


def test_an_eager_cond_survives_the_profile_stopping_on_another_thread() -> None:
    x = ert.ones(2)
    with ert.profile() as prof:
        y = _stopped_right_after_reading_active(
            prof,
            "_run_eagerly",
            lambda: ert.cond(ert.asarray(True), lambda v: v + 1, lambda v: v, x),
        )
    assert y.numpy().tolist() == [2.0, 2.0]
