"""The lean launch of ops on stream devices (``StreamDevice.launcher``), on the CPU.

An op called again with the shapes and dtypes of its last call skips its rule
and, on a stream device, enqueues its kernel at once when nothing needs
ordering (the per-op launch overhead a GPU user pays). These tests check that
it gives the same results, and that everything the lean launch can't handle
(another stream, a stream chosen by ``with``, checks left on the device, a
kernel refusing its operands, a profile recording) still gets the full path.
The device runs each launch at once on the host, as the cuda device enqueues.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from host_stream_device import HostPlanDevice, checked


@pytest.fixture
def dev() -> Iterator[HostPlanDevice]:
    device = HostPlanDevice(compute_streams=2)
    ert.register_device(device)
    yield device


def test_a_chain_of_ops_with_scalars_launches_lean_and_computes_the_same(
    dev: HostPlanDevice,
) -> None:
    data = np.linspace(-1, 1, 64, dtype=np.float32)
    y, expected = ert.asarray(data, device=dev), data
    for _ in range(20):
        y = 2 * (y * 0.5 + 1.0) - y
        expected = 2 * (expected * 0.5 + 1.0) - expected
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
    assert dev.fast_launches >= 70  # all but each op's first call (4 ops x 20)


def test_a_stream_chosen_with_with_is_kept(dev: HostPlanDevice) -> None:
    x = ert.asarray(np.ones(8, np.float32), device=dev)
    y = x * 2.0
    y = y * 2.0  # warm: on y's stream, lean
    with dev.stream(1):
        z = y * 2.0
    assert z._value.stream is dev.stream(1)
    w = z * 2.0  # follows its operand to stream 1
    assert w._value.stream is dev.stream(1)
    assert w.numpy().tolist() == [16.0] * 8


def test_operands_on_two_streams_are_ordered_by_the_full_path(dev: HostPlanDevice) -> None:
    a = ert.asarray(np.ones(4, np.float32), device=dev) + 0.0
    with dev.stream(1):
        b = ert.asarray(np.ones(4, np.float32), device=dev) + 1.0
    c = a + b
    c = a + b  # warm cache, operands still on two streams
    assert c._value.stream is a._value.stream
    assert b._value.users == {a._value.stream}  # b's memory is kept for stream 0's read
    assert c.numpy().tolist() == [3.0] * 4


def test_checks_a_kernel_leaves_still_fail_the_read(dev: HostPlanDevice) -> None:
    good = ert.asarray(np.ones(3, np.float32), device=dev)
    bad = ert.asarray(-np.ones(3, np.float32), device=dev)
    for _ in range(2):
        assert checked(good).numpy().tolist() == [1.0] * 3
    with pytest.raises(ert.KernelError, match="a negative value"):
        checked(bad).numpy()
    with pytest.raises(ert.KernelError, match="a negative value"):
        (checked(bad) + 1.0).numpy()  # a dependent carries the check


def test_a_kernel_failing_on_a_warm_signature_fails_its_result(dev: HostPlanDevice) -> None:
    calls = []
    flaky = ert.define_op(
        "launcher_test_flaky", rule=lambda x: (x.shape, x.dtype), doc="Fails on its third call."
    )

    @flaky.kernel()
    def _kernel(x: Any) -> Any:
        calls.append(1)
        if len(calls) >= 3:
            raise ValueError("refused")
        return x + 1

    x = ert.asarray(np.zeros(2, np.float32), device=dev)
    assert flaky(x).numpy().tolist() == [1.0, 1.0]
    assert flaky(x).numpy().tolist() == [1.0, 1.0]
    with pytest.raises(ert.KernelError, match="refused"):
        flaky(x).numpy()


def test_a_profile_records_ops_whose_signature_is_warm(dev: HostPlanDevice) -> None:
    x = ert.asarray(np.ones(4, np.float32), device=dev) * 1.0
    x = x * 1.0  # warm
    with ert.profile() as prof:
        y = x * 3.0
        y.numpy()
    assert [e.name for e in prof.events if e.device == dev.name and e.name == "multiply"]


def test_weak_scalars_take_the_fast_path_on_the_cpu_with_numpys_types() -> None:
    x = ert.asarray(np.arange(4, dtype=np.float32))
    for _ in range(2):
        assert (x * 0.5).dtype == np.float32
        assert (1 - x).numpy().tolist() == [1.0, 0.0, -1.0, -2.0]
    i = ert.asarray(np.arange(4, dtype=np.int8))
    assert (i + 1).dtype == np.int8
    with pytest.raises(ert.ValueRangeError):  # NEP 50: 1000 doesn't fit int8, every time
        i + 1000
    assert (i * 0.5).dtype == np.float64  # a float scalar makes an int tensor float
    assert (i * 0.5).numpy().tolist() == [0.0, 0.5, 1.0, 1.5]
