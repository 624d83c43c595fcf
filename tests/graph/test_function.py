"""ert.function: tracing, the signature cache, errors, execution, composition."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import anyio
import numpy as np
import pytest

import eagerrt as ert

rng = np.random.default_rng(7)
W1 = ert.asarray(rng.standard_normal((6, 5)).astype("float32"))
B1 = ert.asarray(rng.standard_normal(5).astype("float32"))
W2 = ert.asarray(rng.standard_normal((5, 3)).astype("float32"))


def mlp(x: Any) -> Any:
    return ert.softmax(ert.relu(x @ W1 + B1) @ W2, axis=-1)


def data(*shape: int, dtype: str = "float32") -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# -- basics ---------------------------------------------------------------------------
@pytest.mark.anyio
async def test_async_function_gives_eager_results_as_tensors() -> None:
    @ert.function
    async def model(x: Any) -> Any:
        return mlp(x)

    x = ert.asarray(data(4, 6))
    y = await model(x)
    assert isinstance(y, ert.Tensor)
    assert (y.shape, y.dtype) == ((4, 3), np.dtype("float32"))
    np.testing.assert_allclose(await y, await model.eager(x), rtol=1e-5, atol=1e-7)


def test_plain_function_compiles_and_takes_numpy_arrays() -> None:
    compiled = ert.function(mlp)
    x = data(2, 6)
    np.testing.assert_allclose(compiled(x).numpy(), mlp(x).numpy(), rtol=1e-5, atol=1e-7)


def test_one_trace_per_signature_and_retrace_on_new_shapes() -> None:
    calls = []

    @ert.function
    def f(x: Any) -> Any:
        calls.append(x.shape)
        return x * 2 + 1

    for _ in range(3):
        f(data(3))
    f(data(4))
    f(data(4).astype("float64"))
    assert calls == [(3,), (4,), (4,)]
    assert f.traces == 3
    np.testing.assert_array_equal(f(np.arange(3.0)).numpy(), [1.0, 3.0, 5.0])


def test_trace_cache_is_bounded() -> None:
    @ert.function(max_traces=2)
    def f(x: Any) -> Any:
        return x + 1

    for n in (1, 2, 3, 1):
        f(data(n))
    assert f.traces == 4  # (1,) was evicted by (3,) and traced again
    assert "2 traces cached" in repr(f)


def test_static_arguments_key_the_cache_and_are_passed_as_is() -> None:
    @ert.function
    def scale(x: Any, factor: float, *, mode: str = "mul") -> Any:
        return x * factor if mode == "mul" else x + factor

    x = np.arange(3.0)
    assert scale(x, 2.0).numpy().tolist() == [0.0, 2.0, 4.0]
    assert scale(x, 3.0).numpy().tolist() == [0.0, 3.0, 6.0]
    assert scale(x, 3.0, mode="add").numpy().tolist() == [3.0, 4.0, 5.0]
    assert scale.traces == 3
    with pytest.raises(ert.UsageError, match="hashable"):
        scale(x, {1.0})


def test_nested_arguments_and_results() -> None:
    @ert.function
    def f(pair: Any, cfg: dict[str, Any]) -> Any:
        a, b = pair
        return {"sum": a + b, "both": (a * cfg["k"], b), "k": cfg["k"]}

    out = f((np.ones(2), np.full(2, 3.0)), {"k": 2.0})
    assert out["k"] == 2.0
    assert out["sum"].numpy().tolist() == [4.0, 4.0]
    assert out["both"][0].numpy().tolist() == [2.0, 2.0]
    assert out["both"][1].numpy().tolist() == [3.0, 3.0]


def test_closed_over_tensors_are_constants_and_weights_computed_from_them_fold() -> None:
    w = ert.asarray(np.eye(3))

    @ert.function
    def f(x: Any) -> Any:
        return x @ (w * 2).T

    x = np.arange(9.0).reshape(3, 3)
    np.testing.assert_array_equal(f(x).numpy(), x @ (np.eye(3) * 2).T)
    graph = f.compiled_for(x).graph
    # (w * 2).T ran eagerly while tracing (concrete operands only): one constant.
    assert [n.name for n in graph.nodes] == ["matmul"]
    assert len(graph.constants()) == 1


def test_identity_constant_and_duplicate_outputs() -> None:
    c = ert.asarray([1.0, 2.0])

    @ert.function
    def f(x: Any) -> Any:
        y = x + 1
        return x, c, y, y

    x = ert.asarray([5.0, 6.0])
    a, b, y1, y2 = f(x)
    assert a.numpy().tolist() == [5.0, 6.0]
    assert b.numpy().tolist() == [1.0, 2.0]
    assert y1.numpy().tolist() == y2.numpy().tolist() == [6.0, 7.0]


def test_explain_shows_passes_graph_plan_and_memory() -> None:
    compiled = ert.function(mlp)
    text = compiled.explain(data(4, 6))
    for part in ("passes:", "constant folding", "optimized graph:", "matmul", "stream 0",
                 "memory plan:", "def seg0"):  # fmt: skip
        assert part in text, part


# -- errors -----------------------------------------------------------------------------
def test_python_control_flow_on_a_traced_value_names_the_line_and_the_fix() -> None:
    @ert.function
    def f(x: Any) -> Any:
        if x.sum() > 0:  # the offending line
            return x
        return -x

    with pytest.raises(ert.TracingError) as info:
        f(data(3))
    message = str(info.value)
    assert "test_function.py" in message and "f" in message
    assert "ert.cond" in message and "ert.while_loop" in message


@pytest.mark.parametrize(
    "read", [float, int, bool, lambda t: t.numpy(), lambda t: np.asarray(t), lambda t: t.item()]
)
def test_every_way_to_read_a_traced_value_raises_tracing_error(read: Any) -> None:
    @ert.function
    def f(x: Any) -> Any:
        read(x.sum())
        return x

    with pytest.raises(ert.TracingError):
        f(data(1))


@pytest.mark.anyio
async def test_awaiting_a_traced_tensor_raises_tracing_error() -> None:
    @ert.function
    async def f(x: Any) -> Any:
        return await (x + 1)

    with pytest.raises(ert.TracingError, match="await"):
        await f(ert.asarray(data(2)))


def test_data_dependent_shapes_refuse_to_trace() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return x[x > 0]

    with pytest.raises(ert.TracingError):
        f(data(4))


def test_shape_errors_are_raised_while_tracing_at_the_users_line() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return x @ W1  # (3, 4) @ (6, 5) doesn't fit

    with pytest.raises(ert.ShapeError) as info:
        f(data(3, 4))
    assert "test_function.py" in str(info.value)


def test_a_leaked_traced_tensor_is_refused_later() -> None:
    leaked = []

    @ert.function
    def f(x: Any) -> Any:
        leaked.append(x + 1)
        return x

    f(data(2))
    with pytest.raises(ert.TracingError, match="after its trace ended"):
        leaked[0] * 2


def test_kernel_failure_surfaces_on_read_naming_the_op_and_line() -> None:
    fail = ert.define_op("graph_test_fail", rule=lambda x: (x.shape, x.dtype), replace=True)

    @fail.kernel("cpu")
    def _fail(x: Any) -> Any:
        raise ValueError("bad data")

    @ert.function
    def f(x: Any) -> Any:
        return fail(x + 1) * 2, x - 1

    x = data(3)
    y, independent = f(x)
    with pytest.raises(ert.KernelError, match="graph_test_fail") as info:
        y.numpy()
    assert "test_function.py" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    np.testing.assert_allclose(independent.numpy(), x - 1)  # not a dependent: a value
    assert f(x)[0].is_error()  # and again: the plan is reusable after a failure


def test_a_failed_input_fails_its_dependents_only() -> None:
    fail = ert.define_op("graph_test_fail2", rule=lambda x: (x.shape, x.dtype), replace=True)
    fail.register_kernel("cpu", lambda x: 1 / 0)
    bad = fail(ert.ones(3))

    @ert.function
    def f(x: Any, y: Any) -> Any:
        return x + 1, x * y, y * 2

    a, b, c = f(bad, ert.ones(3))
    for t in (a, b):
        with pytest.raises(ert.KernelError, match="graph_test_fail2"):
            t.numpy()
    assert c.numpy().tolist() == [2.0, 2.0, 2.0]


# -- execution ----------------------------------------------------------------------------
def test_pending_inputs_make_pending_outputs(gate: Any) -> None:
    g = gate()
    x = g(np.arange(3.0))

    @ert.function
    def f(x: Any) -> Any:
        return x * 2 + 1

    y = f(x)
    assert y.state == "pending" and y.shape == (3,)
    g.open()
    assert y.numpy().tolist() == [1.0, 3.0, 5.0]


def test_expensive_plans_run_on_workers_cheap_ones_inline() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return x * 2

    before = ert.stats()
    f(np.ones(4)).numpy()
    middle = ert.stats()
    assert middle.ops_inline > before.ops_inline
    ert.config.graph_inline_threshold_ns = 0.0
    f(np.ones(4)).numpy()
    assert ert.stats().ops_offloaded > middle.ops_offloaded


def test_sync_mode_waits_and_runs_at_the_call(gate: Any) -> None:
    g = gate()
    x = g(np.arange(3.0))
    g.open()

    @ert.function
    def f(x: Any) -> Any:
        return x - 1

    with ert.sync_mode():
        y = f(x)
        assert y.is_ready()
    assert y.numpy().tolist() == [-1.0, 0.0, 1.0]


@pytest.mark.anyio
async def test_compiled_functions_compose_with_eager_code_and_each_other() -> None:
    @ert.function
    async def inner(x: Any) -> Any:
        return ert.exp(x) + 1

    @ert.function
    async def outer(x: Any) -> Any:
        return (await inner(x)) * 2  # traced through: one graph

    x = ert.asarray(data(5))
    eager_then_compiled = await outer(x - 1)
    expected = (np.exp(x.numpy() - 1) + 1) * 2
    np.testing.assert_allclose(await eager_then_compiled, expected, rtol=1e-6)
    # inner was traced through: its ops are in outer's one graph.
    assert ("trace", "3 ops traced") in outer.compiled_for(x).graph.log
    np.testing.assert_allclose(await ((await outer(x)) + 1), np.exp(x.numpy()) * 2 + 3, rtol=1e-6)


@pytest.mark.anyio
async def test_tracing_may_await_real_io() -> None:
    @ert.function
    async def f(x: Any) -> Any:
        await anyio.sleep(0)  # e.g. fetching a config while tracing
        return x + 1

    assert (await (await f(ert.asarray([1.0])))).tolist() == [2.0]


@pytest.mark.anyio
async def test_concurrent_calls_get_their_own_buffers() -> None:
    @ert.function
    async def f(x: Any) -> Any:
        h = ert.relu(x @ W1 + B1)
        return h @ W2

    ert.config.graph_inline_threshold_ns = 0.0  # every call is a task on a worker
    xs = [ert.asarray(data(64, 6)) for _ in range(16)]
    results = [await f(x) for x in xs]
    for x, y in zip(xs, results, strict=True):
        np.testing.assert_allclose(await y, await f.eager(x), rtol=1e-4, atol=1e-6)


def test_methods_compile_per_instance() -> None:
    class Layer:
        def __init__(self, k: float) -> None:
            self.k = k

        @ert.function
        def __call__(self, x: Any) -> Any:
            return x * self.k

    a, b = Layer(2.0), Layer(3.0)
    assert a(np.ones(2)).numpy().tolist() == [2.0, 2.0]
    assert b(np.ones(2)).numpy().tolist() == [3.0, 3.0]


def test_writes_inside_a_traced_function_keep_eager_semantics() -> None:
    @ert.function
    def f(x: Any) -> Any:
        y = x * 1
        before = y + 0
        y[0] = 100.0
        y += 1
        y[y > 50] = -1.0
        return before, y

    x = np.arange(4.0)
    before, y = f(x)
    eager_before, eager_y = f.eager(ert.asarray(x))
    assert before.numpy().tolist() == eager_before.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert y.numpy().tolist() == eager_y.numpy().tolist() == [-1.0, 2.0, 3.0, 4.0]


def test_writing_a_traced_value_into_a_weight_is_refused() -> None:
    w = ert.zeros(3)

    @ert.function
    def f(x: Any) -> Any:
        w[0] = x[0]
        return w

    with pytest.raises(ert.TracingError, match="outside the compiled function"):
        f(data(3))


# -- memory -----------------------------------------------------------------------------
def _peak_growth(fn: Any, calls: int) -> int:
    """The most memory ``fn()`` had allocated at once above what it started
    with, over ``calls`` calls (temporaries freed before returning count too)."""
    gc.collect()
    tracemalloc.start()
    try:
        worst = 0
        for _ in range(calls):
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            fn()
            worst = max(worst, tracemalloc.get_traced_memory()[1] - start)
    finally:
        tracemalloc.stop()
    return worst


WA = ert.asarray(rng.standard_normal((64, 128)).astype("float32"))
WB = ert.asarray(rng.standard_normal((128, 64)).astype("float32"))


def test_steady_state_allocates_no_arrays() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return ert.softmax((x @ WA + 1) @ WB * 2 - 1, axis=-1)

    x = ert.asarray(data(64, 64))  # every array here is 16 KiB or more
    for _ in range(3):  # warm: the plan and one execution context exist
        f(x)
    results = {id(f(x)._value) for _ in range(5)}
    assert len(results) == 1  # a dropped result's buffer is the next call's

    def call() -> None:
        f(x)

    # A few Python objects (the Tensor, lists), never an array's 16 KiB.
    assert _peak_growth(call, 20) < 4096
    eager_peak = _peak_growth(lambda: f.eager(x), 3)
    assert eager_peak > 16384  # the measure sees arrays where there are some


def test_a_held_result_is_never_overwritten() -> None:
    @ert.function
    def f(x: Any) -> Any:
        return x @ W1 + B1

    xs = [data(2, 6) for _ in range(3)]
    held = [f(x) for x in xs]
    for x, y in zip(xs, held, strict=True):
        np.testing.assert_allclose(y.numpy(), x @ W1.numpy() + B1.numpy(), rtol=1e-6)


def test_views_of_intermediates_are_not_overwritten() -> None:
    @ert.function
    def f(x: Any) -> Any:
        h = x @ W1  # an intermediate in a scratch buffer...
        return h.T, (h * 2).sum()  # ...of which a view is an output

    x = data(3, 6)
    t, _s = f(x)
    t2, _ = f(data(3, 6))
    np.testing.assert_allclose(t.numpy(), (x @ W1.numpy()).T, rtol=1e-6)
    assert t2.shape == (5, 3)


def test_random_sampling_inside_a_compiled_function_draws_anew_each_call() -> None:
    @ert.function
    def noisy(x: Any) -> Any:
        return x + ert.random.normal(x.shape, dtype=x.dtype) + ert.random.normal(x.shape)

    x = ert.zeros(4)
    a, b = noisy(x).numpy(), noisy(x).numpy()
    assert not np.array_equal(a, b)
    assert [n.name for n in noisy.compiled_for(x).graph.nodes].count("random") == 2

    @ert.function
    def seeded(x: Any) -> Any:
        return x + ert.random.uniform(x.shape, seed=5)

    assert np.array_equal(seeded(x).numpy(), seeded(x).numpy())
    assert np.array_equal(seeded(x).numpy(), ert.random.uniform(4, seed=5).numpy())


def test_an_output_returned_twice_that_views_an_intermediate_is_safe_in_both_places() -> None:
    @ert.function
    def f(x: Any) -> Any:
        h = x @ W1  # in a scratch buffer
        return h.T, h.T  # one value (CSE), a view, returned twice

    x = data(3, 6)
    a, b = f(x)
    f(data(3, 6))  # a second call reuses the scratch buffer
    expected = (x @ W1.numpy()).T
    np.testing.assert_allclose(a.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), expected, rtol=1e-6)


def test_concurrent_first_calls_from_threads_compile_once() -> None:
    import threading
    import time

    def body(x: Any) -> Any:
        time.sleep(0.1)  # a slow trace: the other callers arrive meanwhile
        return ert.relu(x) + 1

    f = ert.function(body)
    x = ert.asarray(np.ones((5, 3), np.float32))
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(f(x).numpy().tolist())) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [[[2.0] * 3] * 5] * 4
    assert f.traces == 1


@pytest.mark.anyio
async def test_concurrent_first_calls_from_tasks_compile_once() -> None:
    async def body(x: Any) -> Any:
        await anyio.sleep(0.05)  # the trace suspends: the other tasks call meanwhile
        return ert.relu(x) * 2

    f = ert.function(body)
    x = ert.asarray(np.ones((2, 2), np.float32))
    results: list[Any] = []

    async def call() -> None:
        results.append((await (await f(x))).tolist())

    async with anyio.create_task_group() as tasks:
        for _ in range(5):
            tasks.start_soon(call)
    assert results == [[[2.0, 2.0], [2.0, 2.0]]] * 5
    assert f.traces == 1


@pytest.mark.anyio
async def test_callers_waiting_on_a_failed_compile_get_its_error_not_a_hang() -> None:
    calls = 0

    async def body(x: Any) -> Any:
        nonlocal calls
        calls += 1
        await anyio.sleep(0.05)
        return ert.reshape(x, (7,))  # a ShapeError while tracing, for every caller

    f = ert.function(body)
    x = ert.asarray(np.ones((2, 2), np.float32))
    errors: list[BaseException] = []

    async def call() -> None:
        try:
            await f(x)
        except ert.ShapeError as error:
            errors.append(error)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            for _ in range(3):
                tasks.start_soon(call)
    assert len(errors) == 3 and calls == 3  # each waiter tried itself after the failure
