"""numpy, DLPack and Array API interop, and sync conversions that never deadlock."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from conftest import Gate


# -- numpy ufuncs and functions ------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda a: np.exp(a),
        lambda a: np.add(a, 1.5),
        lambda a: np.arange(3.0) * a,
        lambda a: np.float32(2) + a,
        lambda a: np.maximum(a, np.ones(3)),
        lambda a: np.matmul(np.ones((2, 3)), a),
        lambda a: np.add.reduce(a),
        lambda a: np.sum(a, 0),
        lambda a: np.mean(a, axis=0, keepdims=True),
        lambda a: np.concatenate([a, a]),
        lambda a: np.stack([a, a], axis=1),
        lambda a: np.where(a > 1, a, 0.0),
        lambda a: np.clip(a, 0.5, 1.5),
        lambda a: np.transpose(np.reshape(a, (3, 1))),
    ],
)
def test_numpy_calls_on_tensors_give_tensors(call: Callable[[Any], Any]) -> None:
    x = np.array([0.25, 1.0, 2.0])
    got = call(ert.asarray(x))
    assert isinstance(got, ert.Tensor)
    np.testing.assert_allclose(got.numpy(), call(x))


def test_numpy_ufunc_on_a_pending_tensor_stays_asynchronous(gate: Callable[[], Gate]) -> None:
    g = gate()
    t = g()
    out = np.exp(t)
    assert isinstance(out, ert.Tensor) and not out.is_ready()  # nothing blocked
    g.open()
    np.testing.assert_allclose(out.numpy(timeout=10), np.exp(np.arange(3.0)))


def test_other_numpy_functions_run_on_the_data() -> None:
    t = ert.asarray([[3.0, 4.0]])
    assert np.linalg.norm(t) == 5.0
    np.testing.assert_array_equal(np.cumsum(t), [3.0, 7.0])
    np.testing.assert_array_equal(np.add.accumulate(t, axis=1), [[3.0, 7.0]])


def test_ufunc_out_into_a_tensor_is_refused() -> None:
    t = ert.asarray([1.0])
    with pytest.raises(TypeError):
        np.exp(np.ones(1), out=t)  # type: ignore[call-overload]


# -- DLPack ------------------------------------------------------------------------------------
def test_dlpack_with_numpy_is_zero_copy_both_ways() -> None:
    a = np.arange(6.0).reshape(2, 3)
    t = ert.from_dlpack(a)
    assert t.shape == (2, 3) and np.shares_memory(t.numpy(), a)
    back = np.from_dlpack(t)
    assert np.shares_memory(back, a) and not back.flags.writeable
    assert t.__dlpack_device__() == (1, 0)
    assert ert.from_dlpack(t) is t
    copied = ert.from_dlpack(a, copy=True)
    assert not np.shares_memory(copied.numpy(), a)


def test_dlpack_waits_for_pending_data(gate: Callable[[], Gate]) -> None:
    g = gate()
    t = g() + 1
    threading.Timer(0.05, g.open).start()
    np.testing.assert_array_equal(np.from_dlpack(t), [1.0, 2.0, 3.0])


def test_from_dlpack_refuses_what_has_no_dlpack() -> None:
    with pytest.raises(ert.DTypeError):
        ert.from_dlpack([1, 2, 3])


def test_dlpack_with_torch() -> None:
    torch = pytest.importorskip("torch")
    tt = torch.arange(4, dtype=torch.float32)
    t = ert.from_dlpack(tt)
    assert t.dtype == ert.float32 and np.shares_memory(t.numpy(), tt.numpy())
    back = torch.from_dlpack(ert.asarray([1.0, 2.0]) * 2)
    assert back.tolist() == [2.0, 4.0]


# -- the Array API namespace ----------------------------------------------------------------
def test_array_namespace() -> None:
    t = ert.ones(2)
    assert t.__array_namespace__() is ert
    assert t.__array_namespace__(api_version="2023.12") is ert
    with pytest.raises(ValueError):
        t.__array_namespace__(api_version="2099.01")


def test_registered_under_the_array_api_entry_point_group() -> None:
    found = {ep.name: ep.value for ep in entry_points(group="array_api")}
    assert found.get("eagerrt") == "eagerrt"


# -- sync conversions never deadlock -----------------------------------------------------------
CONVERSIONS: list[tuple[str, Callable[[ert.Tensor], Any], Any]] = [
    ("bool", bool, True),
    ("int", int, 2),
    ("float", float, 2.0),
    ("complex", complex, 2 + 0j),
    ("index", lambda t: [10, 11, 12][t.astype(ert.int64)], 12),
]


@pytest.mark.parametrize(("name", "convert", "expected"), CONVERSIONS)
def test_conversion_of_pending_tensor_in_plain_code(
    name: str, convert: Callable[[ert.Tensor], Any], expected: Any, gate: Callable[[], Gate]
) -> None:
    g = gate()
    t = g(np.array(2.0)) + 0
    threading.Timer(0.05, g.open).start()
    assert convert(t) == expected


@pytest.mark.parametrize(("name", "convert", "expected"), CONVERSIONS)
def test_conversion_inside_a_coroutine(
    name: str, convert: Callable[[ert.Tensor], Any], expected: Any
) -> None:
    async def main() -> Any:
        with ert.config.override(inline_threshold_ns=0):
            t = ert.full((), 2.0) * 1  # computed on a worker
        return convert(t)  # blocks the loop briefly; the workers need no loop

    assert asyncio.run(main()) == expected


@pytest.mark.parametrize(("name", "convert", "expected"), CONVERSIONS)
def test_conversion_inside_a_kernel_on_every_worker(
    name: str, convert: Callable[[ert.Tensor], Any], expected: Any
) -> None:
    """Each worker's kernel converts a tensor that is queued behind it: the
    waiting workers run the queued work themselves instead of deadlocking."""
    op = ert.define_op(
        f"test_interop_convert_{name}",
        rule=lambda x, **_: (x.shape, x.dtype),
        cost=lambda *a, **k: 1e12,
        replace=True,
    )
    results: list[Any] = []

    @op.kernel()
    def _kernel(x: Any, *, make: Callable[[], ert.Tensor]) -> Any:
        results.append(convert(make()))
        return x

    with ert.config.override(inline_threshold_ns=0):
        outs = [
            op(ert.zeros(()), make=lambda: ert.full((), 2.0) * 1)
            for _ in range(ert.config.num_threads * 2)
        ]
    for out in outs:
        out.numpy(timeout=20)
    assert results == [expected] * len(outs)


def test_numpy_updates_its_own_array_with_a_tensor_in_place() -> None:
    """Issue 21, item 5: ``a += t`` and ``np.add(a, t, out=a)`` (scikit-learn's LDA)."""
    a = np.ones(3)
    t = ert.asarray([1.0, 2.0, 3.0])
    a += t
    np.testing.assert_array_equal(a, [2.0, 3.0, 4.0])
    assert np.add(a, t, out=a) is a
    np.testing.assert_array_equal(a, [3.0, 5.0, 7.0])
    b = np.zeros(2)
    np.multiply(ert.asarray([2.0, 3.0]), 2, out=b)
    np.testing.assert_array_equal(b, [4.0, 6.0])
    with pytest.raises(TypeError):  # numpy never writes into a tensor
        np.add(a, a, out=(t,))
