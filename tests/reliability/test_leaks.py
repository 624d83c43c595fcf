"""The leak checks themselves: quiet for a clean case, loud for each kind of leak."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import eagerrt as ert

from .leaks import no_leaks

# An identity on a worker thread (its cost is far above any inline threshold),
# failing when asked: the slow paths, where values wait and tasks hold them.
HUGE_COST_OP = ert.define_op(
    "test_leaks_offloaded",
    rule=lambda x, **static: (x.shape, x.dtype),
    cost=lambda *args, **static: 1e15,
)


@HUGE_COST_OP.kernel()
def _offloaded(x: np.ndarray, *, fail: bool = False) -> np.ndarray:
    if fail:
        raise RuntimeError("asked to fail")
    return x


def test_a_clean_case_passes() -> None:
    with no_leaks():
        x = ert.asarray(np.arange(12.0).reshape(3, 4))
        y = HUGE_COST_OP(x) @ x.T  # offloaded, then parked: the slow paths
        assert y.numpy().shape == (3, 3)
        del x, y


def test_a_kept_tensor_is_a_leak() -> None:
    kept = []
    with (
        pytest.raises(AssertionError, match=r"AsyncValues outlived the case.*Tensor"),
        no_leaks(),
    ):
        kept.append(ert.ones((2,)) + 1)
    assert kept[0].numpy().tolist() == [2.0, 2.0]


def test_a_kept_async_value_is_a_leak() -> None:
    kept = []
    with pytest.raises(AssertionError, match="AsyncValue"), no_leaks():
        kept.append(ert.lowlevel.AsyncValue.ready(1))


def test_a_thread_left_running_is_a_leak() -> None:
    stop = threading.Event()
    with (
        pytest.raises(AssertionError, match=r"threads outlived the case: \[.stray.\]"),
        no_leaks(timeout=0.1),
    ):
        threading.Thread(target=stop.wait, name="stray", daemon=True).start()
    stop.set()


def test_memory_kept_is_a_leak() -> None:
    kept = []
    with pytest.raises(AssertionError, match=r"left .* bytes allocated"), no_leaks():
        kept.append(bytearray(1_000_000))


def test_failures_nobody_read_are_not_leaks() -> None:
    with no_leaks():
        bad = HUGE_COST_OP(ert.ones((2,)), fail=True)
        del bad


def test_the_fixture_checks_the_test(no_leaks: object) -> None:
    assert (HUGE_COST_OP(ert.ones((4,))) + 1).numpy().sum() == 8.0
