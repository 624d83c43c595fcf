"""A compiled call that fails gives each output its own value or failure, as
eagerly: a failed input or a failing step reaches exactly its dependents."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.graph.cost_model import measured_costs

rng = np.random.default_rng(7)
W = ert.asarray(rng.standard_normal((64, 64)).astype("float32") * 0.1)
X = rng.standard_normal((32, 64)).astype("float32")
Y = rng.standard_normal((32, 64)).astype("float32")

boom = ert.define_op("replay_test_boom", rule=lambda x: (x.shape, x.dtype), replace=True)


@boom.kernel("cpu")
def _boom(x: Any) -> Any:
    raise ValueError("injected")


def left_branch(x: Any) -> Any:
    return ert.tanh(ert.tanh(x @ W) @ W).sum(axis=1)


def right_branch(y: Any) -> Any:
    return ert.tanh(ert.tanh(y @ W) @ W).sum(axis=1)


def with_failing_step(x: Any, y: Any) -> Any:
    left = boom(left_branch(x))
    right = right_branch(y)
    return left, right, left + right


def without_failing_step(x: Any, y: Any) -> Any:
    left, right = left_branch(x), right_branch(y)
    return left, right, left + right


#: How a call runs: the synchronous interpreter (inline), one task for the
#: plan, or one task per segment of a plan spread over several streams.
PATHS = {
    "inline": {},
    "task": {"graph_inline_threshold_ns": 0.0},
    "segments": {"graph_inline_threshold_ns": 0.0, "inline_threshold_ns": 0.0},
}


@pytest.fixture(autouse=True)
def fresh_cost_model() -> Any:
    measured_costs.clear()  # a measured cost could change how many segments a plan has
    yield
    measured_costs.clear()


def check_segments(f: Any, path: str, *args: Any) -> None:
    segments = len(f.compiled_for(*args).plan.segments)
    assert segments > 1 if path == "segments" else segments == 1


def read(t: ert.Tensor) -> Any:
    try:
        return t.numpy(timeout=30)
    except ert.KernelError as exc:
        return exc


def right_value() -> Any:
    return right_branch(ert.asarray(Y)).numpy()


@pytest.mark.parametrize("path", PATHS)
def test_a_failing_step_fails_only_its_dependents(path: str, clean_errors: None) -> None:
    f = ert.function(with_failing_step)
    x, y = ert.asarray(X), ert.asarray(Y)
    with ert.config.override(**PATHS[path]):
        check_segments(f, path, x, y)
        left, right, both = (read(t) for t in f(x, y))
    np.testing.assert_allclose(right, right_value(), rtol=1e-5)
    for got in (left, both):
        assert isinstance(got, ert.KernelError)
        assert str(got).startswith("op 'replay_test_boom' failed: ValueError: injected")
        assert "test_replay.py" in str(got) and "in with_failing_step" in str(got)
    # One failure, read: the plan's own record of it was dropped, not left unread.
    assert ert.stats().unobserved_errors == 0


@pytest.mark.parametrize("pending", [False, True], ids=["failed", "pending-then-failed"])
@pytest.mark.parametrize("path", PATHS)
def test_a_failed_input_fails_only_its_dependents(
    path: str, pending: bool, gate: Any, clean_errors: None
) -> None:
    f = ert.function(without_failing_step)
    g = gate()
    singular = np.zeros((64, 64), "float32")
    source = g(singular) if pending else ert.asarray(singular)
    x = ert.linalg.inv(source)[:32]  # a singular matrix: its kernel fails
    y = ert.asarray(Y)
    with ert.config.override(**PATHS[path]):
        check_segments(f, path, x, y)
        outputs = f(x, y)
        g.open()
        left, right, both = (read(t) for t in outputs)
    np.testing.assert_allclose(right, right_value(), rtol=1e-5)
    for got in (left, both):
        assert isinstance(got, ert.KernelError)
        assert str(got).startswith("op 'linalg.inv' failed")


@pytest.mark.parametrize(
    "mode",
    [ert.sync_mode, lambda: ert.deterministic(seed=1), ert.profile],
    ids=["sync", "deterministic", "profiled"],
)
def test_other_modes_fail_only_the_dependents(mode: Any, clean_errors: None) -> None:
    f = ert.function(with_failing_step)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mode())
        left, right, both = f(ert.asarray(X), ert.asarray(Y))
        got = [read(t) for t in (left, right, both)]
    np.testing.assert_allclose(got[1], right_value(), rtol=1e-5)
    assert isinstance(got[0], ert.KernelError) and isinstance(got[2], ert.KernelError)


def test_writes_and_control_flow_replay_like_eager_calls(clean_errors: None) -> None:
    def program(x: Any, y: Any) -> Any:
        x = x + 0
        x[0] = boom(y[0])  # fails: x depends on it from here on
        y = y + 0
        y[1] += 1
        z = ert.cond(y.sum() > -1e9, lambda v: v * 2, lambda v: v, y)
        n, w = ert.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + 1), (0, y))
        return x, z, w, n

    f = ert.function(program)
    x, y = ert.asarray(X), ert.asarray(Y)
    got = [read(t) for t in f(x, y)]
    expected_y = Y.copy()
    expected_y[1] += 1
    assert isinstance(got[0], ert.KernelError) and "replay_test_boom" in str(got[0])
    np.testing.assert_allclose(got[1], expected_y * 2, rtol=1e-6)
    np.testing.assert_allclose(got[2], expected_y + 3, rtol=1e-6)
    assert int(got[3]) == 3


def test_a_cond_whose_branch_fails_fails_only_its_results(clean_errors: None) -> None:
    def program(x: Any, y: Any) -> Any:
        return ert.cond(x.sum() > -1e9, boom, lambda v: v, x), y * 2

    f = ert.function(program)
    failed, fine = (read(t) for t in f(ert.asarray(X), ert.asarray(Y)))
    assert isinstance(failed, ert.KernelError)
    assert str(failed).startswith("op 'cond' failed: KernelError: op 'replay_test_boom'")
    np.testing.assert_allclose(fine, Y * 2)


def test_a_failed_call_still_samples_its_random_outputs(clean_errors: None) -> None:
    def program(x: Any) -> Any:
        return boom(x), ert.random.uniform((4,)) + 1

    f = ert.function(program)
    failed, sample = (read(t) for t in f(ert.asarray(X)))
    assert isinstance(failed, ert.KernelError)
    assert sample.shape == (4,) and ((sample >= 1) & (sample < 2)).all()


def test_a_profiled_segment_failing_outside_its_steps_replays_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch, clean_errors: None
) -> None:
    from eagerrt.graph.plan import Plan

    f = ert.function(without_failing_step)
    with ert.config.override(**PATHS["segments"]):
        x, y = ert.asarray(X), ert.asarray(Y)
        f(x, y)  # compile outside the profile
        check_segments(f, "segments", x, y)

        def broken(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("not a step's failure")

        monkeypatch.setattr(Plan, "run_steps", broken)
        with ert.profile():
            outputs = f(x, y)
            got = [read(t) for t in outputs]
    # The call fails over to its op-by-op replay, which gives every output.
    want = [t.numpy() for t in without_failing_step(x, y)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5)
