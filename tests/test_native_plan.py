"""Compiled functions as native plans (``eagerrt.graph.native_plan``), on the CPU.

The cuda device takes a compiled function's plan as one unit of work on one
stream and replays it as a CUDA graph (tests/test_cuda.py, on a GPU). The plan
itself is device-neutral: here a stream device whose "streams" run each launch
at once on the host, with numpy arrays as its native arrays, takes plans the
same way, so CI checks how plans are built, ordered, fed and failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.devices.stream_threads import ThreadStreamDevice
from eagerrt.graph.native_plan import NativePlan
from eagerrt.graph.op_by_op import OpByOpPlan
from host_stream_device import HostPlanDevice, checked


@pytest.fixture
def dev() -> Iterator[HostPlanDevice]:
    device = HostPlanDevice()
    ert.register_device(device)
    yield device


def test_a_compiled_function_runs_as_one_plan(dev: HostPlanDevice) -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 4)).astype("float32")

    def net(w: ert.Tensor) -> Callable[[ert.Tensor], tuple[ert.Tensor, ert.Tensor]]:
        def f(x: ert.Tensor) -> tuple[ert.Tensor, ert.Tensor]:
            h = ert.relu(x @ w)
            return ert.softmax(h, axis=-1), h.sum()

        return f

    compiled = ert.function(net(ert.asarray(weight, device=dev)))
    for _ in range(3):
        data = rng.standard_normal((5, 6)).astype("float32")
        probs, total = compiled(ert.asarray(data, device=dev))
        assert probs.is_ready() and probs.device is dev
        want_probs, want_total = net(ert.asarray(weight))(ert.asarray(data))
        np.testing.assert_allclose(probs.numpy(), want_probs.numpy(), rtol=1e-6)
        np.testing.assert_allclose(float(total), float(want_total), rtol=1e-5)
    plan = compiled.compiled_for(ert.asarray(data, device=dev)).plan
    assert isinstance(plan, NativePlan)
    assert dev.plans_run == 3  # each call one unit of work, not an enqueue per op


def test_a_result_that_is_an_input_or_a_constant_is_a_copy(dev: HostPlanDevice) -> None:
    w = ert.asarray(np.ones(3, "float32"), device=dev)
    compiled = ert.function(lambda x: (x, w, x + w))
    x = ert.asarray(np.zeros(3, "float32"), device=dev)
    same, weight, total = compiled(x)
    assert same._value.native is not x._value.native
    assert weight._value.native is not w._value.native
    np.testing.assert_array_equal(total.numpy(), np.ones(3))


def test_inputs_not_ready_run_op_by_op(dev: HostPlanDevice, gate: Any) -> None:
    g = gate()
    pending = g(np.arange(3.0))  # a CPU tensor, pending on a worker
    compiled = ert.function(lambda x: x * 2)
    x = ert.asarray(np.arange(3.0), device=dev)
    compiled(x)  # traced on a ready input
    runs = dev.plans_run
    moved = pending.to(dev)
    out = compiled(moved)
    g.open()
    np.testing.assert_array_equal(out.numpy(timeout=30), [0.0, 2.0, 4.0])
    assert dev.plans_run == runs  # not ready when called: eager calls instead


def test_checks_left_by_kernels_fail_the_read(dev: HostPlanDevice) -> None:
    compiled = ert.function(lambda x: checked(x) + 1)
    ok = compiled(ert.asarray(np.ones(3), device=dev))
    np.testing.assert_array_equal(ok.numpy(), np.full(3, 2.0))
    bad = compiled(ert.asarray(-np.ones(3), device=dev))
    assert bad.is_ready()  # found on the device: known when the host reads
    with pytest.raises(ert.KernelError, match="a negative value"):
        bad.numpy()
    later = bad * 2  # an eager op on the failed result fails the same way
    with pytest.raises(ert.KernelError, match="a negative value"):
        later.numpy()


def test_a_kernel_failing_at_launch_fails_every_result_naming_the_function(
    dev: HostPlanDevice,
) -> None:
    boom = ert.define_op("native_plan_test_boom", rule=lambda x: (x.shape, x.dtype))

    @boom.kernel()
    def _boom(x: Any) -> Any:
        raise ValueError("no good")

    compiled = ert.function(lambda x: (boom(x), x + 1))
    first, second = compiled(ert.asarray(np.ones(2), device=dev))
    for result in (first, second):
        with pytest.raises(ert.KernelError, match="no good"):
            result.numpy()


def test_convolutions_take_the_relu_and_residual_after_them(dev: HostPlanDevice) -> None:
    rng = np.random.default_rng(3)

    def conv_weights(o: int, c: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.standard_normal((o, c, k, k)).astype("float32"), rng.standard_normal(o).astype(
            "float32"
        )

    (w1, b1), (w2, b2), (w3, _) = (
        conv_weights(4, 4, 3),
        conv_weights(4, 4, 1),
        conv_weights(4, 4, 1),
    )
    on_dev = [ert.asarray(a, device=dev) for a in (w1, b1, w2, b2, w3)]

    def block(ws: list[ert.Tensor]) -> Callable[[ert.Tensor], tuple[ert.Tensor, ert.Tensor]]:
        def f(x: ert.Tensor) -> tuple[ert.Tensor, ert.Tensor]:
            y = ert.relu(ert.conv2d(x, ws[0], ws[1], padding=1))
            out = ert.relu(x + ert.conv2d(y, ws[2], ws[3]))  # the residual on the left
            plain = ert.conv2d(out, ws[4])
            shared = ert.conv2d(y, ws[4])  # read twice below: not fused
            return ert.relu(plain + out), ert.relu(shared) + shared

        return f

    compiled = ert.function(block(on_dev))
    reference = block([ert.asarray(a) for a in (w1, b1, w2, b2, w3)])
    for _ in range(2):
        x = rng.standard_normal((2, 4, 6, 6)).astype("float32")
        got = compiled(ert.asarray(x, device=dev))
        for g, e in zip(got, reference(ert.asarray(x)), strict=True):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
    plan = compiled.compiled_for(ert.asarray(x, device=dev)).plan
    assert isinstance(plan, NativePlan)
    names = [step[0].name for step in plan._steps]
    # relu(conv + b), relu(x + conv + b); relu(conv (no bias) + out) stays (a plan's
    # constants are the model's own: no zero bias is made for it); the shared conv stays.
    assert names.count("conv2d_relu") == 2 and names.count("conv2d") == 2


def test_layer_norms_take_the_residual_sum_before_them(dev: HostPlanDevice) -> None:
    rng = np.random.default_rng(6)
    w, gamma, beta = (rng.standard_normal(s).astype("float32") for s in ((8, 8), (8,), (8,)))

    def block_on(device: object) -> Callable[[ert.Tensor], ert.Tensor]:
        wt, g, b = (ert.asarray(a, device=device) for a in (w, gamma, beta))

        def block(x: ert.Tensor) -> ert.Tensor:
            h = ert.layer_norm(x + ert.tanh(x @ wt), (8,), g, b)
            return ert.layer_norm(h + (h @ wt), (8,))  # no affine

        return block

    compiled, reference = ert.function(block_on(dev)), block_on("cpu")
    x = rng.standard_normal((3, 5, 8)).astype("float32")
    got = compiled(ert.asarray(x, device=dev))
    np.testing.assert_allclose(got.numpy(), reference(ert.asarray(x)).numpy(), rtol=1e-5, atol=1e-5)
    plan = compiled.compiled_for(ert.asarray(x, device=dev)).plan
    names = [step[0].name for step in plan._steps]
    assert names.count("add_layer_norm") == 2 and "layer_norm" not in names


def test_explain_and_measure_costs_on_a_device_with_its_own_plans(dev: HostPlanDevice) -> None:
    """Issue 22: ``explain()`` and ``measure_costs()`` work on every device."""
    compiled = ert.function(lambda x: ert.relu(x @ x.T) + 1.0)
    x = ert.asarray(np.ones((3, 4), "float32"), device=dev)
    text = compiled.explain(x)
    assert "kernels on its native arrays" in text and "matmul" in text
    measured = compiled.measure_costs(x, repeats=2)
    assert [step.split()[1] for step in measured] == ["transpose", "matmul", "relu", "add"]
    assert all(ns > 0 for ns in measured.values())


def test_explain_and_measure_costs_on_the_stream_test_device() -> None:
    compiled = ert.function(lambda x: ert.exp(x) + 1.0)
    x = ert.asarray(np.ones(4), device="teststream:0")
    assert isinstance(compiled.compiled_for(x).plan, NativePlan)
    assert "teststream:0's kernels on its native arrays" in compiled.explain(x)
    measured = compiled.measure_costs(x, repeats=1)
    assert [step.split()[1] for step in measured] == ["exp", "add"]
    assert all(ns > 0 for ns in measured.values())


class _NoCompilerDevice(ThreadStreamDevice):
    """The test device without a backend: compiled functions run op by op."""

    backend = None


def test_a_device_without_a_compiler_runs_op_by_op_and_explains_so() -> None:
    dev = _NoCompilerDevice("teststream:nocompiler")
    try:
        compiled = ert.function(lambda x: ert.exp(x) + 1.0)
        x = ert.asarray(np.ones(4), device=dev)
        np.testing.assert_allclose(compiled(x).numpy(), np.exp(1.0) + 1)
        assert isinstance(compiled.compiled_for(x).plan, OpByOpPlan)
        assert "called in order as eager calls on teststream:nocompiler" in compiled.explain(x)
        measured = compiled.measure_costs(x, repeats=1)
        assert [step.split()[1] for step in measured] == ["exp", "add"]
    finally:
        dev.close()


def test_moving_a_traced_tensor_off_a_stream_device_says_it_cannot_be_traced() -> None:
    compiled = ert.function(lambda x: (ert.exp(x) + 1.0).to("cpu") * 2)
    with pytest.raises(ert.TracingError, match="to can't be traced"):
        compiled(ert.asarray(np.ones(4), device="teststream:0"))
