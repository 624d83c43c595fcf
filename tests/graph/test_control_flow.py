"""ert.cond and ert.while_loop: eager and compiled results, asynchrony, which
branch runs, captures, nesting, errors at the call and at the read."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import eagerrt as ert

rng = np.random.default_rng(11)


def data(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


# A custom op that counts its kernel's runs, and one whose kernel fails.
runs: list[int] = []
_counted = ert.define_op("cf_test_counted", rule=lambda x: (x.shape, x.dtype))


@_counted.kernel()
def _counted_kernel(x: Any) -> Any:
    runs.append(1)
    return x * 10


_boom = ert.define_op("cf_test_boom", rule=lambda x: (x.shape, x.dtype))


@_boom.kernel()
def _boom_kernel(x: Any) -> Any:
    raise ZeroDivisionError("boom in a branch")


def op_names(fn: Any, *args: Any) -> list[str]:
    return [node.name for node in fn.compiled_for(*args).graph.nodes]


# -- cond: results ----------------------------------------------------------------------
@pytest.mark.parametrize("flag", [True, False])
def test_eager_cond_matches_numpy(flag: bool) -> None:
    a, b = data(3, 4), data(4)
    out = ert.cond(
        ert.asarray(np.array(flag)),
        lambda x, y: {"sum": x + y, "max": ert.max(x, axis=0)},
        lambda x, y: {"sum": x * y, "max": ert.min(x, axis=0) - y},
        a,
        ert.asarray(b),
    )
    assert set(out) == {"sum", "max"}
    assert out["sum"].shape == (3, 4) and out["max"].shape == (4,)
    want = (a + b, a.max(axis=0)) if flag else (a * b, a.min(axis=0) - b)
    np.testing.assert_allclose(out["sum"].numpy(), want[0], rtol=1e-6)
    np.testing.assert_allclose(out["max"].numpy(), want[1], rtol=1e-6)


def test_python_bool_predicate_and_static_operands() -> None:
    x = ert.asarray(np.arange(4.0))
    out = ert.cond(False, lambda v, k: v * k, lambda v, k: v - k, x, 3)
    np.testing.assert_array_equal(out.numpy(), np.arange(4.0) - 3)


@pytest.mark.parametrize("flag", [True, False])
def test_compiled_cond_is_one_node_and_matches_numpy(flag: bool) -> None:
    @ert.function
    def f(x: Any, y: Any) -> Any:
        s = x.sum()
        return ert.cond(s > 0, lambda a, b: (a @ b, s), lambda a, b: (a @ b.T * 2, -s), x, y)

    x = data(3, 3) + (1 if flag else -1)
    y = data(3, 3)
    out, s = f(x, y)
    assert out.shape == (3, 3) and s.shape == ()
    positive = x.sum() > 0
    want = x @ y if positive else x @ y.T * 2
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(float(s), x.sum() if positive else -x.sum(), rtol=1e-5)
    assert op_names(f, x, y).count("cond") == 1
    # Eager and compiled agree.
    eager_out, _ = f.eager(ert.asarray(x), ert.asarray(y))
    np.testing.assert_allclose(eager_out.numpy(), out.numpy(), rtol=1e-6)


def test_multi_output_node_generates_a_tuple_assignment() -> None:
    @ert.function
    def f(x: Any) -> Any:
        a, b = ert.cond(x[0] > 0, lambda v: (v + 1, v * 2), lambda v: (v - 1, v / 2), x)
        return a * b  # both outputs read by a later step

    compiled = f.compiled_for(np.ones(3))
    cond_nodes = [n for n in compiled.graph.nodes if n.name == "cond"]
    assert len(cond_nodes) == 1 and len(cond_nodes[0].outputs) == 2
    names = ", ".join(f"v{v.id}" for v in cond_nodes[0].outputs)
    assert f"{names} = " in compiled.plan.source
    np.testing.assert_allclose(f(np.array([1.0, 2.0])).numpy(), [4.0, 12.0])
    np.testing.assert_allclose(f(np.array([-1.0, 2.0])).numpy(), [1.0, 1.0])
    assert "cond" in f.explain(np.ones(3))


# -- asynchrony -------------------------------------------------------------------------
def test_pending_predicate_does_not_block(gate: Callable[[], Any]) -> None:
    g = gate()
    pred = g(np.array(True))
    x = ert.asarray(np.arange(3.0))
    y = ert.cond(pred, lambda v: v + 1, lambda v: v - 1, x)
    z = ert.while_loop(lambda v: v.sum() < 100, lambda v: v * 2 + 1, g(np.arange(3.0)))
    assert (y.shape, y.dtype) == ((3,), np.dtype("float64"))
    assert z.shape == (3,)
    assert not y.is_ready() and not z.is_ready()
    g.open()
    np.testing.assert_array_equal(y.numpy(timeout=10), [1.0, 2.0, 3.0])
    v = np.arange(3.0)
    while v.sum() < 100:
        v = v * 2 + 1
    np.testing.assert_array_equal(z.numpy(timeout=10), v)


def test_pending_captured_tensor_is_waited_for(gate: Callable[[], Any]) -> None:
    g = gate()
    w = g(np.array([10.0, 20.0, 30.0]))  # closed over, still pending
    y = ert.cond(True, lambda v: v + w, lambda v: v, ert.ones(3))
    assert not y.is_ready()
    g.open()
    np.testing.assert_array_equal(y.numpy(timeout=10), [11.0, 21.0, 31.0])


def test_a_later_write_to_an_operand_waits_for_the_read(gate: Callable[[], Any]) -> None:
    g = gate()
    x = ert.asarray(np.arange(3.0))
    y = ert.cond(g(np.array(True)), lambda v: v * 2, lambda v: v, x)
    x[0] = 100.0  # value semantics: y reads the version before the write
    g.open()
    np.testing.assert_array_equal(y.numpy(timeout=10), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(x.numpy(timeout=10), [100.0, 1.0, 2.0])


@pytest.mark.anyio
async def test_await_results_in_async_code() -> None:
    @ert.function
    async def f(x: Any) -> Any:
        return ert.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * 3), (0, x))

    n, y = await f(ert.asarray(np.ones(2)))
    assert int(await n) == 4
    assert (await y).tolist() == [81.0, 81.0]
    eager = ert.cond(ert.asarray(np.array(False)), lambda v: v, lambda v: -v, y)
    assert (await eager).tolist() == [-81.0, -81.0]


# -- which branch runs ------------------------------------------------------------------
@pytest.mark.parametrize("compiled", [False, True])
def test_only_the_chosen_branch_runs(compiled: bool) -> None:
    traced: list[str] = []

    def heavy(v: Any) -> Any:
        traced.append("heavy")
        return _counted(v) + 1

    def light(v: Any) -> Any:
        traced.append("light")
        return v - 1

    def f(p: Any, x: Any) -> Any:
        return ert.cond(p, heavy, light, x)

    run = ert.function(f) if compiled else f
    x = np.arange(3.0)
    runs.clear()
    for _ in range(3):
        np.testing.assert_array_equal(run(np.array(False), x).numpy(), x - 1)
    assert runs == []  # heavy's op never ran...
    assert traced.count("heavy") == (1 if compiled else 3)  # ...though it was traced
    np.testing.assert_array_equal(run(np.array(True), x).numpy(), x * 10 + 1)
    assert runs == [1]


# -- loops ------------------------------------------------------------------------------
def newton_sqrt(a: Any) -> Any:
    """Newton's iteration for sqrt(a) until it changes by less than 1e-6."""

    def body(c: Any) -> Any:
        x, _, n = c
        new = 0.5 * (x + a / x)
        return new, ert.max(ert.abs(new - x)), n + 1

    x0 = ert.ones_like(a)
    init = (x0, ert.asarray(np.array(np.inf, dtype=a.dtype)), 0)
    return ert.while_loop(lambda c: c[1] > 1e-6, body, init)


@pytest.mark.parametrize("compiled", [False, True])
def test_while_loop_matches_numpy(compiled: bool) -> None:
    a = np.array([2.0, 9.0, 1e4])
    run = ert.function(newton_sqrt) if compiled else newton_sqrt
    x, delta, n = run(ert.asarray(a))
    np.testing.assert_allclose(x.numpy(), np.sqrt(a), rtol=1e-12)
    assert float(delta) <= 1e-6
    ref_x, ref_n = np.ones_like(a), 0
    while True:
        new = 0.5 * (ref_x + a / ref_x)
        done = np.abs(new - ref_x).max() <= 1e-6
        ref_x, ref_n = new, ref_n + 1
        if done:
            break
    assert int(n) == ref_n
    assert n.dtype == np.dtype("int64")


def test_while_loop_that_never_runs_returns_its_initial_value() -> None:
    x = ert.asarray(np.arange(3.0))
    y = ert.while_loop(lambda v: v.sum() < 0, lambda v: v + 1, x)
    np.testing.assert_array_equal(y.numpy(), np.arange(3.0))


def reference_collatz_like(x: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        x = x / 2 if x.sum() > 5 else x * 3
    return x


@pytest.mark.parametrize("compiled", [False, True])
def test_cond_nested_in_while(compiled: bool) -> None:
    def f(x: Any) -> Any:
        def body(c: Any) -> Any:
            i, v = c
            v = ert.cond(v.sum() > 5, lambda u: u / 2, lambda u: u * 3, v)
            return i + 1, v

        return ert.while_loop(lambda c: c[0] < 7, body, (0, x))[1]

    run = ert.function(f) if compiled else f
    x = np.array([0.5, 1.0, 1.5])
    np.testing.assert_allclose(run(x).numpy(), reference_collatz_like(x, 7))
    if compiled:
        assert op_names(run, x) == ["while_loop"]


# -- captures ---------------------------------------------------------------------------
def test_branches_capture_values_of_the_enclosing_trace() -> None:
    w = ert.asarray(np.array([1.0, 2.0, 3.0]))  # a concrete weight

    @ert.function
    def f(x: Any, p: Any) -> Any:
        shift = x.mean()  # traced by f, read inside the branches
        return ert.cond(p, lambda v: v - shift + w, lambda v: v * shift, x)

    x = np.array([1.0, 2.0, 6.0])
    np.testing.assert_allclose(f(x, np.array(True)).numpy(), x - 3 + [1, 2, 3])
    np.testing.assert_allclose(f(x, np.array(False)).numpy(), x * 3)
    node = next(n for n in f.compiled_for(x, np.array(True)).graph.nodes if n.name == "cond")
    assert len(node.inputs) == 4  # pred, x, then the captured shift and w


@pytest.mark.parametrize("compiled", [False, True])
def test_nested_capture_from_two_levels_up(compiled: bool) -> None:
    def f(x: Any) -> Any:
        scale = x.max()  # read by a cond inside the loop body

        def body(c: Any) -> Any:
            i, v = c
            return i + 1, ert.cond(i % 2 == 0, lambda u: u + scale, lambda u: u - 1, v)

        return ert.while_loop(lambda c: c[0] < 5, body, (0, ert.zeros_like(x)))[1]

    run = ert.function(f) if compiled else f
    x = np.array([1.0, 4.0])
    v = np.zeros(2)
    for i in range(5):
        v = v + 4.0 if i % 2 == 0 else v - 1
    np.testing.assert_allclose(run(x).numpy(), v)


def test_traced_tensor_leaked_from_a_branch_is_an_error() -> None:
    leaked: list[Any] = []

    def grab(v: Any) -> Any:
        leaked.append(v * 2)
        return v

    def use(v: Any) -> Any:
        return v + leaked[0]

    with pytest.raises(ert.TracingError, match="another trace"):
        ert.cond(True, grab, use, ert.ones(2))


@pytest.mark.parametrize("compiled", [False, True])
def test_writes_inside_a_branch_stay_inside(compiled: bool) -> None:
    def branch(v: Any) -> Any:
        v[0] = 100.0  # the branch's own operand: a new version inside the branch
        v += 1
        return v

    def f(x: Any) -> Any:
        return ert.cond(x[1] > 0, branch, lambda v: v * 2, x)

    run = ert.function(f) if compiled else f
    x = ert.asarray(np.array([0.0, 1.0, 2.0]))
    np.testing.assert_array_equal(run(x).numpy(), [101.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.numpy(), [0.0, 1.0, 2.0])


def test_writing_into_a_traced_tensor_from_outside_is_an_error() -> None:
    @ert.function
    def f(x: Any) -> Any:
        y = x * 2

        def branch(v: Any) -> Any:
            y[0] = v[0]
            return v

        out = ert.cond(x[0] > 0, branch, lambda v: v, x)
        return out + y

    with pytest.raises(ert.TracingError, match=r"true_fn writes into .* traced outside it"):
        f(np.ones(2))


# -- errors at the call -----------------------------------------------------------------
def test_mismatched_branch_shapes_raise_at_the_call() -> None:
    x = ert.ones((2, 3), dtype="float32")
    with pytest.raises(ert.ShapeError) as info:
        ert.cond(True, lambda v: v.sum(axis=0), lambda v: v.sum(axis=1), x)
    message = str(info.value)
    assert "true_fn" in message and "false_fn" in message
    assert "true_fn returned float32[3] and false_fn returned float32[2]" in message
    assert "test_control_flow.py" in message  # the user's line


def test_mismatched_branch_dtypes_and_structures_raise_at_the_call() -> None:
    x = ert.ones(3, dtype="float32")
    with pytest.raises(ert.DTypeError, match=r"float32\[3\].*float64\[3\]"):
        ert.cond(True, lambda v: v, lambda v: v.astype("float64"), x)
    with pytest.raises(ert.ArgumentError, match=r"\(float32\[3\], float32\[3\]\).*float32\[3\]"):
        ert.cond(True, lambda v: (v, v), lambda v: v, x)


def test_bad_predicates_raise_at_the_call() -> None:
    x = ert.ones(3)
    with pytest.raises(ert.DTypeError, match="bool"):
        ert.cond(ert.asarray(1), lambda v: v, lambda v: v, x)
    with pytest.raises(ert.ShapeError, match="one element"):
        ert.cond(x > 0, lambda v: v, lambda v: v, x)
    with pytest.raises(ert.DTypeError, match="cond_fn must return one bool"):
        ert.while_loop(lambda v: v, lambda v: v, x)


def test_loop_body_must_keep_the_carried_types() -> None:
    with pytest.raises(ert.DTypeError) as info:
        ert.while_loop(
            lambda c: c[0] < 3, lambda c: (c[0] + 0.5, c[1]), (0, ert.ones(2, dtype="float32"))
        )
    message = str(info.value)
    assert "init_val is (int64[], float32[2])" in message
    assert "body_fn returned (float64[], float32[2])" in message
    with pytest.raises(ert.ShapeError, match="body_fn"):
        ert.while_loop(lambda v: v.sum() < 3, lambda v: ert.concat([v, v]), ert.ones(2))


def test_python_if_on_a_traced_tensor_points_to_cond() -> None:
    @ert.function
    def f(x: Any) -> Any:
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(ert.TracingError, match=r"ert\.cond"):
        f(np.ones(3))


def test_a_branch_must_be_a_plain_function() -> None:
    async def branch(v: Any) -> Any:
        return v

    with pytest.raises(ert.ArgumentError, match="plain function"):
        ert.cond(True, branch, branch, ert.ones(2))
    with pytest.raises(ert.ArgumentError, match="must be a function"):
        ert.cond(True, None, branch, ert.ones(2))  # type: ignore[arg-type]


# -- failures at run time ---------------------------------------------------------------
def failing_branch(v: Any) -> Any:
    return _boom(v) + 1


@pytest.mark.parametrize("compiled", [False, True])
def test_a_failing_branch_fails_the_results_naming_its_op_and_line(
    compiled: bool, clean_errors: None
) -> None:
    def f(p: Any, x: Any) -> Any:
        return ert.cond(p, failing_branch, lambda v: v * 2, x)

    run = ert.function(f) if compiled else f
    x = np.arange(3.0)
    np.testing.assert_array_equal(run(np.array(False), x).numpy(), x * 2)  # not chosen: fine
    y = run(np.array(True), x)
    assert y.shape == (3,)
    with pytest.raises(ert.KernelError, match="cf_test_boom") as info:
        y.numpy()
    message = str(info.value)
    # The cond's failure chains the branch's: both ops and both lines are named.
    assert message.startswith("op 'cond' failed: KernelError: op 'cf_test_boom' failed")
    assert "in failing_branch\n" in message
    assert re.search(r"line \d+, in f$", message, re.MULTILINE)
    assert isinstance(info.value.__cause__, ert.KernelError)
    assert isinstance(info.value.__cause__.__cause__, ZeroDivisionError)
    assert ert.stats().unobserved_errors == 0  # the one failure was read, none leaked


@pytest.mark.anyio
async def test_a_failing_loop_body_surfaces_on_await(clean_errors: None) -> None:
    def body(c: Any) -> Any:
        i, v = c
        return i + 1, ert.cond(i < 2, lambda u: u + 1, failing_branch, v)

    _, y = ert.while_loop(lambda c: c[0] < 5, body, (0, ert.ones(2)))
    with pytest.raises(ert.KernelError, match="cf_test_boom"):
        await y
    assert ert.stats().unobserved_errors == 0


def test_a_failed_operand_fails_the_results(clean_errors: None) -> None:
    bad = _boom(ert.ones(2))
    y = ert.cond(True, lambda v: v + 1, lambda v: v, bad)
    with pytest.raises(ert.KernelError, match="cf_test_boom"):
        y.numpy()


def test_concurrent_loops_on_threads_agree() -> None:
    # Sub-plans keep one execution context per concurrent run.
    f = ert.function(newton_sqrt)
    a = np.arange(1.0, 5.0)
    results: list[Any] = []

    def work() -> None:
        for _ in range(20):
            results.append(f(ert.asarray(a))[0].numpy())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80
    for r in results:
        np.testing.assert_allclose(r, np.sqrt(a), rtol=1e-12)
