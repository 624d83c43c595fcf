"""The cost model's streams, segments run on several workers, and the memory plan."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.graph.cost_model import assign_streams, measured_costs, record_cost
from eagerrt.graph.ir import Node, Value
from eagerrt.graph.memory_plan import PlannedStep, plan_memory

F32 = np.dtype("float32")


@pytest.fixture(autouse=True)
def fresh_cost_model() -> Any:
    """Measured costs are process-wide: each test starts and ends without any."""
    measured_costs.clear()
    yield
    measured_costs.clear()


CPU = ert.get_device("cpu")


def chain_graph(costs: list[list[float]]) -> tuple[list[Node], list[float]]:
    """Independent chains fed by one input: chain i has len(costs[i]) nodes."""
    add = ert.get_op("add")
    x = Value((2,), F32, CPU)
    nodes, flat = [], []
    for chain in costs:
        prev = x
        for cost in chain:
            out = Value((2,), F32, CPU)
            nodes.append(Node(add, [prev, 1], {}, [out]))
            flat.append(cost)
            prev = out
    return nodes, flat


def test_heavy_independent_chains_get_streams_of_their_own() -> None:
    nodes, costs = chain_graph([[1e6, 1e6], [1e6, 1e6], [1e6]])
    streams = assign_streams(nodes, costs, threshold=5e4)
    assert streams == [0, 0, 1, 1, 2]


def test_cheap_branches_merge_into_an_existing_stream() -> None:
    nodes, costs = chain_graph([[1e6, 1e6], [10.0, 10.0], [5.0]])
    streams = assign_streams(nodes, costs, threshold=5e4)
    assert streams == [0, 0, 0, 0, 0]


def test_the_heaviest_child_continues_its_parents_stream() -> None:
    add = ert.get_op("add")
    x = Value((2,), F32, CPU)
    a = Value((2,), F32, CPU)
    light, heavy = Value((2,), F32, CPU), Value((2,), F32, CPU)
    nodes = [
        Node(add, [x, 1], {}, [a]),
        Node(add, [a, 1], {}, [light]),  # comes first, but is the lighter branch
        Node(add, [a, 2], {}, [heavy]),
    ]
    streams = assign_streams(nodes, [1e6, 6e4, 1e7], threshold=5e4)
    assert streams[2] == streams[0] and streams[1] != streams[0]


def test_cheap_slices_joining_a_heavy_node_at_once_start_no_stream() -> None:
    # q, k, v = split(x); attention(q, k, v) then heavy work: the slices are
    # cheap and join the heavy node at once, so no thread hop for them, however
    # much work follows the join (it goes on in one of the streams anyway).
    add, where = ert.get_op("add"), ert.get_op("where")
    x = Value((2,), F32, CPU)
    qkv, q, k, v, att, tail = (Value((2,), F32, CPU) for _ in range(6))
    nodes = [
        Node(add, [x, 1], {}, [qkv]),
        Node(add, [qkv, 1], {}, [q]),
        Node(add, [qkv, 2], {}, [k]),
        Node(add, [qkv, 3], {}, [v]),
        Node(where, [q, k, v], {}, [att]),
        Node(add, [att, 1], {}, [tail]),
    ]
    streams = assign_streams(nodes, [1e6, 10.0, 10.0, 10.0, 1e6, 1e7], threshold=5e4)
    assert streams == [0] * 6


def test_the_stream_that_did_the_work_goes_on_past_a_join_with_a_cheap_input() -> None:
    # x -> heavy -> slice, joined by a mask computed from another input, then the
    # rest of the model: one stream, not the mask's taking over at the join (the
    # slice is cheaper than the mask, so "most work left" alone picks the mask).
    add = ert.get_op("add")
    x, m = Value((2,), F32, CPU), Value((2,), F32, CPU)
    heavy, sliced, mask, joined, tail = (Value((2,), F32, CPU) for _ in range(5))
    nodes = [
        Node(add, [x, 1], {}, [heavy]),
        Node(add, [m, 1], {}, [mask]),
        Node(add, [heavy, 1], {}, [sliced]),
        Node(add, [sliced, mask], {}, [joined]),
        Node(add, [joined, 1], {}, [tail]),
    ]
    streams = assign_streams(nodes, [1e6, 20.0, 0.4, 1e6, 1e7], threshold=5e4)
    assert streams == [0] * 5


rng = np.random.default_rng(3)
WEIGHTS = [ert.asarray(rng.standard_normal((96, 96)).astype("float32") * 0.1) for _ in range(3)]


def branches(x: Any) -> Any:
    # Each result sums 96 float32 values of up to 1: compiled and eager sum them
    # in different orders, so results near 0 differ by ~1e-6 (hence atol 1e-5).
    outs = []
    for w in WEIGHTS:
        h = x
        for _ in range(3):
            h = ert.tanh(h @ w)
        outs.append(h.sum(axis=1))
    return ert.stack(outs)


def test_parallel_branches_run_as_segments_on_several_workers() -> None:
    compiled = ert.function(branches)
    x = ert.asarray(rng.standard_normal((64, 96)).astype("float32"))
    with ert.config.override(
        inline_threshold_ns=0.0, graph_inline_threshold_ns=0.0
    ):  # every branch is "heavy"
        plan = compiled.compiled_for(x).plan
        assert len({seg.stream for seg in plan.segments}) == 3
        assert "segments over 3 streams" in compiled.explain(x)
        for _ in range(5):
            np.testing.assert_allclose(
                compiled(x).numpy(), branches(x).numpy(), rtol=1e-5, atol=1e-5
            )


def test_segments_wait_for_pending_inputs_and_a_failing_one_fails_only_its_dependents(
    gate: Any,
) -> None:
    boom = ert.define_op("plan_test_boom", rule=lambda x: (x.shape, x.dtype), replace=True)
    boom.register_kernel("cpu", lambda x: x / 0 if x.dtype.kind == "i" else 1 // 0)

    def f(x: Any) -> Any:
        return branches(x), boom(x).sum()

    compiled = ert.function(f)
    g = gate()
    x = g(rng.standard_normal((64, 96)).astype("float32"))
    with ert.config.override(inline_threshold_ns=0.0, graph_inline_threshold_ns=0.0):
        good, bad = compiled(x)
        assert len(compiled.compiled_for(x).plan.segments) > 1
        assert good.state == "pending"
        g.open()
        with pytest.raises(ert.KernelError, match="plan_test_boom") as info:
            bad.numpy(timeout=30)
        assert "in f\n" in str(info.value)  # the user's line that called the op
        want = branches(x).numpy()
        np.testing.assert_allclose(good.numpy(timeout=30), want, rtol=1e-5, atol=1e-5)
        good, bad = compiled(ert.asarray(x.numpy()))  # the plan still works, and fails alike
        np.testing.assert_allclose(good.numpy(timeout=30), want, rtol=1e-5, atol=1e-5)
        assert bad.wait(30) and bad.is_error()


def test_concurrent_multi_segment_calls_from_threads() -> None:
    compiled = ert.function(branches)
    xs = [ert.asarray(rng.standard_normal((64, 96)).astype("float32")) for _ in range(6)]
    results: list[Any] = [None] * len(xs)
    with ert.config.override(inline_threshold_ns=0.0, graph_inline_threshold_ns=0.0):

        def work(i: int) -> None:
            results[i] = compiled(xs[i]).numpy()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    for x, got in zip(xs, results, strict=True):
        np.testing.assert_allclose(got, branches(x).numpy(), rtol=1e-5, atol=1e-5)


def test_measured_costs_replace_estimates() -> None:
    compiled = ert.function(lambda x: (x @ x) @ x)
    x = ert.asarray(np.ones((64, 64)))  # large enough that no pass fuses the two
    plan = compiled.compiled_for(x).plan
    for step in plan.steps:
        record_cost(step.node, 123456.0)
    again = ert.function(lambda x: (x @ x) @ x).compiled_for(x).plan
    assert [s.cost for s in again.steps] == [123456.0, 123456.0]


# -- the memory plan --------------------------------------------------------------------------
def v(n: int = 4) -> Value:
    return Value((n,), F32, CPU)


def test_a_chain_reuses_two_buffers() -> None:
    values = [v() for _ in range(11)]
    steps = [
        PlannedStep([values[i + 1]], [values[i]], has_out_form=True, in_place_ok=False)
        for i in range(10)
    ]
    plan = plan_memory(steps, [values[-1]], external={values[0].id})
    assert len(plan.capacities) == 2
    assert plan.direct_outputs == {values[-1].id: 0}


def test_elementwise_steps_write_in_place() -> None:
    values = [v() for _ in range(5)]
    steps = [
        PlannedStep([values[i + 1]], [values[i]], has_out_form=True, in_place_ok=True)
        for i in range(3)
    ]
    plan = plan_memory(steps, [values[3]], external={values[0].id})
    assert len(plan.capacities) == 1  # values 1 and 2 share one buffer


def test_a_view_keeps_its_base_buffer_alive_and_outputs_copy() -> None:
    x, a, view, b = v(), v(), v(), v()
    steps = [
        PlannedStep([a], [x], has_out_form=True, in_place_ok=False),
        PlannedStep([view], [a], has_out_form=False, in_place_ok=False),  # e.g. a reshape
        PlannedStep([b], [x], has_out_form=True, in_place_ok=False),
    ]
    plan = plan_memory(steps, [view, b], external={x.id})
    assert plan.scratch[a.id] not in (plan.scratch.get(b.id),)  # b didn't take a's buffer
    assert plan.copied_outputs == [(view.id, 0)]


@pytest.mark.parametrize("reader_stream", [0, 1])
def test_values_read_on_another_stream_keep_their_buffers(reader_stream: int) -> None:
    x, a, b, c, out = v(), v(), v(), v(), v()
    steps = [
        PlannedStep([a], [x], has_out_form=True, in_place_ok=False, stream=0),
        PlannedStep([b], [a], has_out_form=True, in_place_ok=False, stream=reader_stream),
        PlannedStep([c], [x], has_out_form=True, in_place_ok=False, stream=0),
        PlannedStep([out], [b, c], has_out_form=True, in_place_ok=False, stream=0),
    ]
    plan = plan_memory(steps, [out], external={x.id})
    if reader_stream == 0:  # one thread: c may take a's buffer once b has read it
        assert plan.scratch[c.id] == plan.scratch[a.id]
    else:  # stream 1 may still be reading a while stream 0 writes c
        assert plan.scratch[c.id] != plan.scratch[a.id]


def test_measure_costs_times_each_step_and_recompiles_with_them() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return (x @ x) @ x

    x = ert.asarray(np.ones((64, 64)))
    before = f.compiled_for(x).plan
    measured = f.measure_costs(x)
    assert len(measured) == len(before.steps) and all(ns > 0 for ns in measured.values())
    after = f.compiled_for(x).plan
    assert after is not before
    # Both products have one signature: the model keeps their average.
    assert [s.cost for s in after.steps] == [sum(measured.values()) / 2] * 2
    assert [s.cost for s in before.steps] != [s.cost for s in after.steps]
    np.testing.assert_allclose(f(x).numpy(), (x.numpy() @ x.numpy()) @ x.numpy())


def test_synchronize_returns_after_multi_segment_calls_and_their_replays(gate: Any) -> None:
    """synchronize() waits for a multi-segment call's bookkeeping tasks (the
    start parked on a pending input, the replay of a failed call) and returns
    once they ran; it timed out though nothing was left to run."""
    boom = ert.define_op("plan_test_boom_sync", rule=lambda x: (x.shape, x.dtype), replace=True)
    boom.register_kernel("cpu", lambda x: 1 // 0)

    def f(x: Any) -> Any:
        return branches(x), boom(x).sum()

    compiled = ert.function(f)
    with contextlib.suppress(ert.KernelError, ert.EagerErrorGroup):
        ert.synchronize(timeout=10)  # earlier tests' unread failures: not this test's
    g = gate()
    x = g(rng.standard_normal((64, 96)).astype("float32"))
    with ert.config.override(inline_threshold_ns=0.0, graph_inline_threshold_ns=0.0):
        good, bad = compiled(x)  # parked on x; its last segment fails: a replay follows
        assert len(compiled.compiled_for(x).plan.segments) > 1
        g.open()
        with pytest.raises(ert.KernelError, match="plan_test_boom_sync"):
            ert.synchronize(timeout=10)
        assert good.is_ready() and bad.is_error()
        ert.synchronize(timeout=30)  # nothing left: returns at once


def test_layer_norm_and_attention_write_into_the_plans_buffers() -> None:
    # Their out forms: no fresh result array a call, and the same values as eager.
    rng = np.random.default_rng(3)
    w, b = (
        ert.asarray(rng.standard_normal(16).astype("float32")),
        ert.asarray(np.ones(16, "float32")),
    )

    def layer(x: ert.Tensor, keys: ert.Tensor) -> ert.Tensor:
        h = ert.layer_norm(x, (16,), w, b)
        heads = ert.permute_dims(ert.reshape(h, (2, 5, 2, 8)), (0, 2, 1, 3))
        context = ert.scaled_dot_product_attention(heads, heads, heads, keys)
        return ert.layer_norm(
            ert.reshape(ert.permute_dims(context, (0, 2, 1, 3)), (2, 5, 16)), (16,)
        )

    x = ert.asarray(rng.standard_normal((2, 5, 16)).astype("float32"))
    keys = ert.asarray(rng.random((2, 1, 1, 5)) > 0.3)
    compiled = ert.function(layer)
    plan = compiled.compiled_for(x, keys).plan
    forms = {s.node.name: s.out_form is not None for s in plan.steps}
    # (attention with its heads merged as it writes them: passes.merge_heads)
    assert forms["layer_norm"] and forms["attention[merged heads]"]
    names = [s.node.name for s in plan.steps]
    assert names.count("transpose") == 1  # the heads' split; their merge has no step
    for _ in range(3):
        np.testing.assert_allclose(
            compiled(x, keys).numpy(), layer(x, keys).numpy(), rtol=1e-5, atol=1e-5
        )
