"""``Function.run_sync``: the embedded call path, numpy arrays in and out on
the caller's thread, sharing the function's traces."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import eagerrt as ert

RNG = np.random.default_rng(5)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


W = ert.asarray(rand(4, 4))


def chain(x: Any) -> Any:
    for _ in range(20):
        x = x @ W
    return x


def test_it_returns_what_a_call_returns_as_arrays() -> None:
    f = ert.function(chain)
    x = rand(4, 4)
    got = f.run_sync(x)
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, f(ert.asarray(x)).numpy())


def test_it_shares_the_functions_traces() -> None:
    f = ert.function(chain)
    x = rand(4, 4)
    f(ert.asarray(x))
    f.run_sync(x)
    f.run_sync(rand(4, 4))
    assert f.traces == 1
    f.run_sync(rand(3, 4))  # a new shape: one new trace, run_sync's and f's
    f(ert.asarray(rand(3, 4)))
    assert f.traces == 2


def test_structures_and_async_functions() -> None:
    @ert.function
    async def pair(x: Any, y: Any) -> Any:
        return x + y, {"product": x * y, "scale": 2}

    x, y = rand(3), rand(3)
    total, rest = pair.run_sync(x, y)
    np.testing.assert_allclose(total, x + y)
    np.testing.assert_allclose(rest["product"], x * y)
    assert rest["scale"] == 2


def test_results_are_never_overwritten_by_the_next_call() -> None:
    f = ert.function(lambda x: x * 2)
    first = f.run_sync(np.ones(3))
    second = f.run_sync(np.full(3, 5.0))
    np.testing.assert_array_equal(first, [2, 2, 2])
    np.testing.assert_array_equal(second, [10, 10, 10])


def test_a_failing_kernel_raises_at_once_naming_the_op() -> None:
    f = ert.function(lambda x: ert.linalg.inv(x) + 1)
    with pytest.raises(ert.KernelError, match=r"linalg\.inv"):
        f.run_sync(np.zeros((2, 2)))
    np.testing.assert_allclose(f.run_sync(np.eye(2)), np.eye(2) + 1)  # and it still runs


@pytest.mark.parametrize("bad", [[1.0, 2.0], 3.0])
def test_arguments_must_be_arrays(bad: Any) -> None:
    f = ert.function(lambda x: x + 1)
    with pytest.raises(ert.UsageError, match="numpy arrays only; argument 0 is"):
        f.run_sync(bad)
    with pytest.raises(ert.UsageError, match="argument 0 is Tensor"):
        f.run_sync(ert.asarray(np.ones(2)))
    with pytest.raises(ert.UsageError, match="byte order; argument 0 is >f4"):
        f.run_sync(np.ones(2, ">f4"))


def test_a_graph_spanning_devices_runs_op_by_op() -> None:
    on_device = ert.asarray(np.ones(2), device="teststream:0")
    f = ert.function(lambda x: (x + 1, on_device * 2))
    assert type(f.compiled_for(ert.asarray(np.ones(2))).plan).__name__ == "OpByOpPlan"
    near, far = f.run_sync(np.ones(2))
    assert type(near) is np.ndarray and type(far) is np.ndarray
    np.testing.assert_array_equal(near, [2, 2])
    np.testing.assert_array_equal(far, [2, 2])
